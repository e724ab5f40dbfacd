/* tpu.h — TPU generation presets and slices as Cloud TPU offers them.
 *
 * A generation fixes the MXU size, MXUs per TensorCore, TensorCores per chip, clock, HBM, the
 * inter-chip network (2D or 3D), the chips one host holds and which slice dimensions have
 * wrap-around links. A slice is a set of chips of one generation, given either by its
 * accelerator type ("v4-8", "v4-32", "v5p-8", "v5litepod-16", "v6e-4") or by a topology Cloud
 * TPU offers ("v4:2x2x4", "v5e:4x4"). Figures and their sources: docs/accel.md
 * "Generations and slices" (the Cloud TPU per-generation pages). */
#ifndef TF_TPU_H
#define TF_TPU_H

#include <stddef.h>

struct tf_tpu_gen {
	const char *name;        /* "v4": the name used in explicit topologies ("v4:2x2x4") */
	const char *type_prefix; /* accelerator-type prefix: "v4", "v5litepod", "v6e" */
	int mxu_rows, mxu_cols;  /* systolic array R x C */
	int mxus_per_core;       /* matrix units per TensorCore */
	int cores_per_chip;      /* TensorCores per chip */
	int torus_dims;          /* 2 or 3 */
	int type_counts_cores;   /* 1: "v4-8" counts TensorCores; 0: "v5litepod-16" counts chips */
	int max_chips;     /* largest slice Cloud TPU offers (v5p: 6144 of an 8960-chip pod) */
	double clock_hz;   /* MXU clock */
	double hbm_bytes;  /* HBM per chip, bytes (see hbm_gib for the published unit) */
	double hbm_bw;     /* HBM bytes/s per chip */
	double ici_bw;     /* bytes/s per ICI link and direction */
	double ici_alpha;  /* seconds of fixed latency per collective step (one hop) */
	double peak_flops; /* published bf16 peak per chip, FLOP/s */
	const char *const *types;  /* the accelerator types offered, NULL-terminated */
	const char *const *shapes; /* their default topologies, same order */
	/* Added with hosts and wrap-around (zero-initialised in older initialisers). */
	int pod_chips;    /* chips in a pod */
	int hbm_gib;      /* 1: Google states HBM in GiB (v2-v4); 0: in GB */
	int host_dims[3]; /* the block of chips one host holds: 2x2(x1), or 2x4 on v5e/v6e */
	enum tf_tpu_wrap {
		TF_WRAP_MULT4 = 1, /* v4: a dimension that is a multiple of 4 wraps around */
		TF_WRAP_CUBE,      /* v5p: slices of a full 4x4x4 cube or more wrap in every dim */
		TF_WRAP_POD_EDGE,  /* 2D: a dimension spanning the pod's side wraps (assumption) */
	} wrap_rule;
	const char *source; /* the public page the figures come from */
};

/* The presets, in generation order; n receives the count. */
const struct tf_tpu_gen *tf_tpu_gens(size_t *n);
/* Looks a generation up by name ("v4", "v5e", "v5p"...) or type prefix ("v5litepod");
 * NULL when unknown. */
const struct tf_tpu_gen *tf_tpu_gen_find(const char *name);

struct tf_tpu_slice {
	const struct tf_tpu_gen *gen; /* the generation (static storage) */
	int ndims;                    /* gen->torus_dims */
	int dims[3];                  /* topology; unused trailing dims are 1 */
	int chips;                    /* product of dims */
	int cores;                    /* chips x cores per chip: replicas of a data-parallel run */
	char name[48];                /* the accelerator type, e.g. "v4-32" */
	char topology[32];            /* e.g. "2x2x4" */
	int wrap[3];                  /* 1: the dimension has wrap-around links (a ring) */
	int hosts;                    /* hosts holding the slice (a sub-host slice counts 1) */
	int chips_per_host;           /* chips of the slice on each host: min(chips, host block) */
};

/* Parses "v4-8", "v4-32", "v5p-8", "v5litepod-16", "v6e-4" or "GEN:AxB[xC]" where the
 * topology is one Cloud TPU offers for the generation (the accelerator types' topologies,
 * and on v4/v5p any AxBxC of whole 4x4x4 cubes up to the largest slice). Returns 0 and fills
 * *out, or -EINVAL with a message in err (NUL-terminated, truncated to errlen) naming what is
 * wrong and the valid choices; *out is untouched on failure. */
int tf_tpu_slice_parse(const char *spec, struct tf_tpu_slice *out, char *err, size_t errlen);

/* As tf_tpu_slice_parse, but "GEN:AxB[xC]" may be any sub-mesh that obeys the generation's
 * geometric rules (3D: A <= B <= C, each dim at most 4 or a multiple of 4, 64+ chips in whole
 * cubes; 2D: powers of two, A <= B <= 2A): the shape of a placement inside a pool. */
int tf_tpu_shape_parse(const char *spec, struct tf_tpu_slice *out, char *err, size_t errlen);

/* The host (0 .. hosts-1) that holds chip `chip` (x fastest) of the slice: hosts hold
 * host_dims blocks of chips, numbered x fastest; -EINVAL for a chip outside the slice. */
int tf_tpu_chip_host(const struct tf_tpu_slice *s, int chip);

/* Peak bf16 FLOP/s of one chip computed from the MXUs: cores x MXUs x R x C x 2 x clock (v2:
 * 45.9e12; the published figure, 45e12, is g->peak_flops). */
double tf_tpu_chip_peak(const struct tf_tpu_gen *g);

#endif

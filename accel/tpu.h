/* tpu.h — TPU generation presets and slices named as Cloud TPU names them.
 *
 * A generation fixes the MXU size, MXUs per TensorCore, TensorCores per chip, clock, HBM and the
 * inter-chip torus (2D or 3D). A slice is a torus-shaped set of chips of one generation, given
 * either by its accelerator type ("v4-8", "v4-32", "v5p-8", "v5litepod-16", "v6e-4") or by an
 * explicit topology ("v4:2x2x4", "v5e:4x4"). Figures and naming rules: facts.md
 * "TPU generations" (Cloud TPU docs; Jouppi et al. ISCA 2017/2023). */
#ifndef TF_TPU_H
#define TF_TPU_H

#include <stddef.h>

struct tf_tpu_gen {
	const char *name;         /* "v4": the name used in explicit topologies ("v4:2x2x4") */
	const char *type_prefix;  /* accelerator-type prefix: "v4", "v5litepod", "v6e" */
	int mxu_rows, mxu_cols;   /* systolic array R x C */
	int mxus_per_core;        /* matrix units per TensorCore */
	int cores_per_chip;       /* TensorCores per chip */
	int torus_dims;           /* 2 or 3 */
	int type_counts_cores;    /* 1: "v4-8" counts TensorCores; 0: "v5litepod-16" counts chips */
	int max_chips;            /* largest pod */
	double clock_hz;          /* MXU clock */
	double hbm_bytes;         /* HBM per chip */
	double hbm_bw;            /* HBM bytes/s per chip */
	double ici_bw;            /* bytes/s per ICI link and direction */
	double ici_alpha;         /* seconds of fixed latency per collective step (one hop) */
	double peak_flops;        /* published bf16 peak per chip, FLOP/s */
	const char *const *types; /* the accelerator types offered, NULL-terminated */
	const char *const *shapes; /* their default topologies, same order */
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
};

/* Parses "v4-8", "v4-32", "v5p-8", "v5litepod-16", "v6e-4" or "GEN:AxB[xC]". Returns 0 and
 * fills *out, or -EINVAL with a message in err (NUL-terminated, truncated to errlen) naming
 * what is wrong and the valid choices; *out is untouched on failure. */
int tf_tpu_slice_parse(const char *spec, struct tf_tpu_slice *out, char *err, size_t errlen);

/* Peak bf16 FLOP/s of one chip computed from the MXUs: cores x MXUs x R x C x 2 x clock. */
double tf_tpu_chip_peak(const struct tf_tpu_gen *g);

#endif

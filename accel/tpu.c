/* tpu.c — the generation presets, the slice-name/topology parser with the topologies Cloud TPU
 * offers, hosts and wrap-around links.
 *
 * Sources (docs/accel.md lists the addresses): the Cloud TPU per-generation pages
 * (cloud.google.com/tpu/docs/v2 ... v6e) for MXUs, cores, HBM and its unit, pod and largest
 * slice, slice shapes, chips per host, torus links and ICI bandwidth per chip; Jouppi et al.
 * (CACM 2020) for the v2/v3 ICI link rates (496 and 656 Gbit/s). Per-link bandwidth for
 * v4..v6e is the published per-chip ICI figure divided by the chip's ports (6 on a 3D torus, 4
 * on a 2D one). Assumptions, not published figures: ici_alpha (1 us per step); v6e's clock,
 * derived from its 918 TFLOPS peak and 2 MXUs of 256x256 per core; the host blocks' layout
 * (2x2x1 trays, 2x4 hosts on v5e/v6e); 2D slices wrapping only along a side that spans the
 * pod. */
#include "accel/tpu.h"
#include "common/common.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GIB (1024.0 * 1024.0 * 1024.0)

/* Accelerator types and default topologies (Cloud TPU docs, "supported configurations"). */
static const char *const v2_types[] = {"v2-8", "v2-32", "v2-128", "v2-256", "v2-512", NULL};
static const char *const v2_shapes[] = {"2x2", "4x4", "8x8", "8x16", "16x16", NULL};
static const char *const v3_types[] = {"v3-8",   "v3-32",   "v3-64",   "v3-128", "v3-256",
                                       "v3-512", "v3-1024", "v3-2048", NULL};
static const char *const v3_shapes[] = {"2x2",   "4x4",   "4x8",   "8x8", "8x16",
                                        "16x16", "16x32", "32x32", NULL};
static const char *const v4_types[] = {"v4-8",    "v4-16",   "v4-32",   "v4-64",   "v4-128",
                                       "v4-256",  "v4-512",  "v4-1024", "v4-1536", "v4-2048",
                                       "v4-4096", "v4-8192", NULL};
static const char *const v4_shapes[] = {"2x2x1",   "2x2x2",    "2x2x4", "2x4x4",  "4x4x4",
                                        "4x4x8",   "4x8x8",    "8x8x8", "8x8x12", "8x8x16",
                                        "8x16x16", "16x16x16", NULL};
static const char *const v5e_types[] = {"v5litepod-1",   "v5litepod-4",   "v5litepod-8",
                                        "v5litepod-16",  "v5litepod-32",  "v5litepod-64",
                                        "v5litepod-128", "v5litepod-256", NULL};
static const char *const v5e_shapes[] = {"1x1", "2x2",  "2x4",   "4x4", "4x8",
                                         "8x8", "8x16", "16x16", NULL};
static const char *const v5p_types[] = {"v5p-8",    "v5p-16",    "v5p-32",   "v5p-64",   "v5p-128",
                                        "v5p-256",  "v5p-512",   "v5p-1024", "v5p-2048", "v5p-4096",
                                        "v5p-8192", "v5p-12288", NULL};
static const char *const v5p_shapes[] = {"2x2x1",    "2x2x2",    "2x2x4", "2x4x4",  "4x4x4",
                                         "4x4x8",    "4x8x8",    "8x8x8", "8x8x16", "8x16x16",
                                         "16x16x16", "16x16x24", NULL};
static const char *const v6e_types[] = {"v6e-1",  "v6e-4",   "v6e-8",   "v6e-16", "v6e-32",
                                        "v6e-64", "v6e-128", "v6e-256", NULL};
static const char *const v6e_shapes[] = {"1x1", "2x2",  "2x4",   "4x4", "4x8",
                                         "8x8", "8x16", "16x16", NULL};

static const struct tf_tpu_gen gens[] = {
    {.name = "v2",
     .type_prefix = "v2",
     .mxu_rows = 128,
     .mxu_cols = 128,
     .mxus_per_core = 1,
     .cores_per_chip = 2,
     .torus_dims = 2,
     .type_counts_cores = 1,
     .max_chips = 256,
     .clock_hz = 700e6,
     .hbm_bytes = 16 * GIB,
     .hbm_bw = 700e9,
     .ici_bw = 496e9 / 8,
     .ici_alpha = 1e-6,
     .peak_flops = 45e12,
     .types = v2_types,
     .shapes = v2_shapes,
     .pod_chips = 256,
     .hbm_gib = 1,
     .host_dims = {2, 2, 1},
     .wrap_rule = TF_WRAP_POD_EDGE,
     .source = "https://cloud.google.com/tpu/docs/v2"},
    {.name = "v3",
     .type_prefix = "v3",
     .mxu_rows = 128,
     .mxu_cols = 128,
     .mxus_per_core = 2,
     .cores_per_chip = 2,
     .torus_dims = 2,
     .type_counts_cores = 1,
     .max_chips = 1024,
     .clock_hz = 940e6,
     .hbm_bytes = 32 * GIB,
     .hbm_bw = 900e9,
     .ici_bw = 656e9 / 8,
     .ici_alpha = 1e-6,
     .peak_flops = 123e12,
     .types = v3_types,
     .shapes = v3_shapes,
     .pod_chips = 1024,
     .hbm_gib = 1,
     .host_dims = {2, 2, 1},
     .wrap_rule = TF_WRAP_POD_EDGE,
     .source = "https://cloud.google.com/tpu/docs/v3"},
    {.name = "v4",
     .type_prefix = "v4",
     .mxu_rows = 128,
     .mxu_cols = 128,
     .mxus_per_core = 4,
     .cores_per_chip = 2,
     .torus_dims = 3,
     .type_counts_cores = 1,
     .max_chips = 4096,
     .clock_hz = 1050e6,
     .hbm_bytes = 32 * GIB,
     .hbm_bw = 1200e9,
     .ici_bw = 300e9 / 6,
     .ici_alpha = 1e-6,
     .peak_flops = 275e12,
     .types = v4_types,
     .shapes = v4_shapes,
     .pod_chips = 4096,
     .hbm_gib = 1,
     .host_dims = {2, 2, 1},
     .wrap_rule = TF_WRAP_MULT4,
     .source = "https://cloud.google.com/tpu/docs/v4"},
    {.name = "v5e",
     .type_prefix = "v5litepod",
     .mxu_rows = 128,
     .mxu_cols = 128,
     .mxus_per_core = 4,
     .cores_per_chip = 1,
     .torus_dims = 2,
     .type_counts_cores = 0,
     .max_chips = 256,
     .clock_hz = 1.5e9,
     .hbm_bytes = 16e9,
     .hbm_bw = 819e9,
     .ici_bw = 400e9 / 4 / 2,
     .ici_alpha = 1e-6,
     .peak_flops = 197e12,
     .types = v5e_types,
     .shapes = v5e_shapes,
     .pod_chips = 256,
     .hbm_gib = 0,
     .host_dims = {2, 4, 1},
     .wrap_rule = TF_WRAP_POD_EDGE,
     .source = "https://cloud.google.com/tpu/docs/v5e"},
    {.name = "v5p",
     .type_prefix = "v5p",
     .mxu_rows = 128,
     .mxu_cols = 128,
     .mxus_per_core = 4,
     .cores_per_chip = 2,
     .torus_dims = 3,
     .type_counts_cores = 1,
     .max_chips = 6144,
     .clock_hz = 1.75e9,
     .hbm_bytes = 95 * GIB,
     .hbm_bw = 2765e9,
     .ici_bw = 600e9 / 6,
     .ici_alpha = 1e-6,
     .peak_flops = 459e12,
     .types = v5p_types,
     .shapes = v5p_shapes,
     .pod_chips = 8960,
     .hbm_gib = 1,
     .host_dims = {2, 2, 1},
     .wrap_rule = TF_WRAP_CUBE,
     .source = "https://cloud.google.com/tpu/docs/v5p"},
    {.name = "v6e",
     .type_prefix = "v6e",
     .mxu_rows = 256,
     .mxu_cols = 256,
     .mxus_per_core = 2,
     .cores_per_chip = 1,
     .torus_dims = 2,
     .type_counts_cores = 0,
     .max_chips = 256,
     .clock_hz = 918e12 / (2.0 * 65536 * 2),
     .hbm_bytes = 32e9,
     .hbm_bw = 1640e9,
     .ici_bw = 800e9 / 4 / 2,
     .ici_alpha = 1e-6,
     .peak_flops = 918e12,
     .types = v6e_types,
     .shapes = v6e_shapes,
     .pod_chips = 256,
     .hbm_gib = 0,
     .host_dims = {2, 4, 1},
     .wrap_rule = TF_WRAP_POD_EDGE,
     .source = "https://cloud.google.com/tpu/docs/v6e"},
};

const struct tf_tpu_gen *tf_tpu_gens(size_t *n)
{
	*n = sizeof gens / sizeof gens[0];
	return gens;
}

const struct tf_tpu_gen *tf_tpu_gen_find(const char *name)
{
	if (!name)
		return NULL;
	for (size_t i = 0; i < sizeof gens / sizeof gens[0]; i++)
		if (strcmp(gens[i].name, name) == 0 || strcmp(gens[i].type_prefix, name) == 0)
			return &gens[i];
	return NULL;
}

double tf_tpu_chip_peak(const struct tf_tpu_gen *g)
{
	return (double)g->cores_per_chip * g->mxus_per_core * g->mxu_rows * g->mxu_cols * 2.0 *
	       g->clock_hz;
}

/* "v4-8, v4-16, ..." into buf. */
static void list_types(const struct tf_tpu_gen *g, char *buf, size_t len)
{
	size_t off = 0;
	buf[0] = '\0';
	for (size_t i = 0; g->types[i] && off < len; i++)
		off += (size_t)snprintf(buf + off, len - off, "%s%s", i ? ", " : "", g->types[i]);
}

static void list_gens(char *buf, size_t len)
{
	size_t off = 0;
	buf[0] = '\0';
	for (size_t i = 0; i < sizeof gens / sizeof gens[0] && off < len; i++)
		off += (size_t)snprintf(buf + off, len - off, "%s%s", i ? ", " : "", gens[i].name);
}

/* Parses "AxB" or "AxBxC" into dims; returns the number of dims or -1. */
static int parse_dims(const char *s, int dims[3])
{
	int n = 0;
	const char *p = s;
	while (*p) {
		if (n == 3 || *p < '0' || *p > '9')
			return -1;
		char *end;
		long v = strtol(p, &end, 10);
		if (v < 1 || v > 100000)
			return -1;
		dims[n++] = (int)v;
		if (*end == 'x')
			p = end + 1;
		else if (*end == '\0')
			p = end;
		else
			return -1;
		if (*end == 'x' && *p == '\0')
			return -1;
	}
	return n;
}

/* The generation's geometric topology rules; 0 or -EINVAL with err filled. */
static int check_shape(const struct tf_tpu_gen *g, const int *d, int n, char *err, size_t errlen)
{
	long chips = 1;
	for (int i = 0; i < n; i++)
		chips *= d[i];
	if (chips > g->max_chips) {
		size_t last = 0;
		while (g->shapes[last + 1])
			last++;
		tf_errf(err, errlen,
		        "topology has %ld chips but the largest %s slice has %d (%s, %s)", chips,
		        g->name, g->max_chips, g->types[last], g->shapes[last]);
		return -EINVAL;
	}
	if (g->torus_dims == 3) {
		/* Non-decreasing order, except the documented 2x2x1 form (AxBx1 with A <= B). */
		int ordered = d[0] <= d[1] && (d[1] <= d[2] || d[2] == 1);
		if (!ordered) {
			tf_errf(err, errlen,
			        "%s topology %dx%dx%d must be written AxBxC with A <= B <= C "
			        "(for example 2x2x4, 4x4x8)",
			        g->name, d[0], d[1], d[2]);
			return -EINVAL;
		}
		int big = chips >= 64;
		for (int i = 0; i < 3; i++) {
			if (d[i] > 4 && d[i] % 4) {
				tf_errf(err, errlen,
				        "%s topology dimension %d must be at most 4 or a multiple "
				        "of 4",
				        g->name, d[i]);
				return -EINVAL;
			}
			if (big && d[i] % 4) {
				tf_errf(err, errlen,
				        "%s slices of 64 chips or more are built from 4x4x4 cubes: "
				        "every dimension must be a multiple of 4, not %d",
				        g->name, d[i]);
				return -EINVAL;
			}
		}
	} else {
		if (d[0] > d[1]) {
			tf_errf(err, errlen, "%s topology %dx%d must be written AxB with A <= B",
			        g->name, d[0], d[1]);
			return -EINVAL;
		}
		for (int i = 0; i < 2; i++) {
			if (d[i] & (d[i] - 1)) {
				tf_errf(err, errlen,
				        "%s topology dimension %d must be a power of two", g->name,
				        d[i]);
				return -EINVAL;
			}
		}
		if (d[1] > 2 * d[0]) {
			tf_errf(err, errlen,
			        "%s topology %dx%d is too elongated: the longer side may be at "
			        "most twice the shorter",
			        g->name, d[0], d[1]);
			return -EINVAL;
		}
	}
	return 0;
}

/* "2x2x1, 2x2x2, ..." (the offered types' topologies) into buf. */
static void list_shapes(const struct tf_tpu_gen *g, char *buf, size_t len)
{
	size_t off = 0;
	buf[0] = '\0';
	for (size_t i = 0; g->shapes[i] && off < len; i++)
		off += (size_t)snprintf(buf + off, len - off, "%s%s", i ? ", " : "", g->shapes[i]);
}

/* Whether Cloud TPU offers the (geometrically valid) shape: one of the accelerator types'
 * topologies, or on a 3D generation any shape of whole 4x4x4 cubes (the pages list "most but
 * not all" of those). 0 or -EINVAL with err filled. */
static int check_offered(const struct tf_tpu_gen *g, const int *d, int n, char *err, size_t errlen)
{
	char shape[32], list[512];
	if (n == 3)
		snprintf(shape, sizeof shape, "%dx%dx%d", d[0], d[1], d[2]);
	else
		snprintf(shape, sizeof shape, "%dx%d", d[0], d[1]);
	for (size_t i = 0; g->shapes[i]; i++)
		if (!strcmp(g->shapes[i], shape))
			return 0;
	if (n == 3 && d[0] % 4 == 0 && d[1] % 4 == 0 && d[2] % 4 == 0)
		return 0;
	list_shapes(g, list, sizeof list);
	tf_errf(err, errlen, "%s topology %s is not offered by Cloud TPU: use one of %s%s", g->name,
	        shape, list,
	        n == 3 ? " or AxBxC with every dimension a multiple of 4 (whole 4x4x4 cubes)" : "");
	return -EINVAL;
}

/* Whether dimension i (extent e) of a slice of `chips` chips has wrap-around links. */
static int dim_wraps(const struct tf_tpu_gen *g, int e, long chips)
{
	if (e <= 1)
		return 0;
	switch (g->wrap_rule) {
	case TF_WRAP_MULT4:
		return e % 4 == 0;
	case TF_WRAP_CUBE:
		return chips >= 64;
	case TF_WRAP_POD_EDGE: {
		int edge = 1;
		while (edge * edge < g->pod_chips)
			edge *= 2;
		return e == edge;
	}
	}
	return 0;
}

static void fill(struct tf_tpu_slice *s, const struct tf_tpu_gen *g, const int *d, int n)
{
	memset(s, 0, sizeof *s);
	s->gen = g;
	s->ndims = g->torus_dims;
	s->dims[0] = s->dims[1] = s->dims[2] = 1;
	for (int i = 0; i < n; i++)
		s->dims[i] = d[i];
	s->chips = s->dims[0] * s->dims[1] * s->dims[2];
	s->cores = s->chips * g->cores_per_chip;
	int units = g->type_counts_cores ? s->cores : s->chips;
	snprintf(s->name, sizeof s->name, "%s-%d", g->type_prefix, units);
	if (n == 3)
		snprintf(s->topology, sizeof s->topology, "%dx%dx%d", d[0], d[1], d[2]);
	else
		snprintf(s->topology, sizeof s->topology, "%dx%d", d[0], d[1]);
	int per = 1, nh = 1;
	for (int i = 0; i < 3; i++) {
		s->wrap[i] = dim_wraps(g, s->dims[i], s->chips);
		int b = g->host_dims[i] < s->dims[i] ? g->host_dims[i] : s->dims[i];
		per *= b;
		nh *= (s->dims[i] + b - 1) / b;
	}
	s->chips_per_host = per;
	s->hosts = nh;
}

int tf_tpu_chip_host(const struct tf_tpu_slice *s, int chip)
{
	if (!s || chip < 0 || chip >= s->chips)
		return -EINVAL;
	int c[3] = {chip % s->dims[0], (chip / s->dims[0]) % s->dims[1],
	            chip / (s->dims[0] * s->dims[1])};
	int host = 0, stride = 1;
	for (int i = 0; i < 3; i++) {
		int b = s->gen->host_dims[i] < s->dims[i] ? s->gen->host_dims[i] : s->dims[i];
		host += c[i] / b * stride;
		stride *= (s->dims[i] + b - 1) / b;
	}
	return host;
}

static int parse(const char *spec, int strict, struct tf_tpu_slice *out, char *err, size_t errlen)
{
	char gbuf[32], list[512];
	const struct tf_tpu_gen *g;
	int d[3] = {1, 1, 1};

	if (!spec || !*spec) {
		list_gens(list, sizeof list);
		tf_errf(err, errlen,
		        "empty slice: give an accelerator type such as \"v4-8\" or a "
		        "topology such as \"v4:2x2x4\" (generations: %s)",
		        list);
		return -EINVAL;
	}
	const char *colon = strchr(spec, ':');
	const char *dash = strrchr(spec, '-');
	const char *sep = colon ? colon : dash;
	if (!sep || (size_t)(sep - spec) >= sizeof gbuf) {
		list_gens(list, sizeof list);
		tf_errf(err, errlen,
		        "slice \"%s\" is neither an accelerator type (\"v4-8\", \"v5litepod-16\") "
		        "nor a topology (\"v4:2x2x4\"); generations: %s",
		        spec, list);
		return -EINVAL;
	}
	memcpy(gbuf, spec, (size_t)(sep - spec));
	gbuf[sep - spec] = '\0';
	g = tf_tpu_gen_find(gbuf);
	if (!g) {
		list_gens(list, sizeof list);
		tf_errf(err, errlen,
		        "unknown TPU generation \"%s\" in \"%s\": use one of %s "
		        "(v5e accelerator types are named v5litepod-N)",
		        gbuf, spec, list);
		return -EINVAL;
	}
	if (colon) {
		int n = parse_dims(colon + 1, d);
		if (n != g->torus_dims) {
			tf_errf(err, errlen,
			        "topology \"%s\" must be %s for %s (a %dD torus), e.g. \"%s:%s\"",
			        colon + 1, g->torus_dims == 3 ? "AxBxC" : "AxB", g->name,
			        g->torus_dims, g->name, g->shapes[1] ? g->shapes[1] : g->shapes[0]);
			return -EINVAL;
		}
		int rc = check_shape(g, d, n, err, errlen);
		if (!rc && strict)
			rc = check_offered(g, d, n, err, errlen);
		if (rc)
			return rc;
		fill(out, g, d, n);
		return 0;
	}
	/* An accelerator type: look the count up in the generation's offered types. */
	for (size_t i = 0; g->types[i]; i++) {
		if (strcmp(g->types[i] + strlen(g->type_prefix), dash) == 0) {
			int n = parse_dims(g->shapes[i], d);
			fill(out, g, d, n);
			return 0;
		}
	}
	list_types(g, list, sizeof list);
	char *end;
	long count = strtol(dash + 1, &end, 10);
	if (*end || count <= 0)
		tf_errf(err, errlen, "slice \"%s\": \"%s\" is not a number; %s types are %s", spec,
		        dash + 1, g->name, list);
	else
		tf_errf(err, errlen,
		        "slice \"%s\" is not offered: %s types count %s; use one of %s or an "
		        "explicit topology like \"%s:%s\"",
		        spec, g->name, g->type_counts_cores ? "TensorCores (2 per chip)" : "chips",
		        list, g->name, g->shapes[1] ? g->shapes[1] : g->shapes[0]);
	return -EINVAL;
}

int tf_tpu_slice_parse(const char *spec, struct tf_tpu_slice *out, char *err, size_t errlen)
{
	return parse(spec, 1, out, err, errlen);
}

int tf_tpu_shape_parse(const char *spec, struct tf_tpu_slice *out, char *err, size_t errlen)
{
	return parse(spec, 0, out, err, errlen);
}

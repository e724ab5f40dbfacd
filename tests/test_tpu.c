/* test_tpu.c — generation presets and slice names/topologies, including the error messages. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "accel/tpu.h"

#include <errno.h>
#include <math.h>
#include <string.h>

static void test_tpu_presets_match_published_peaks(void **state)
{
	(void)state;
	size_t n;
	const struct tf_tpu_gen *g = tf_tpu_gens(&n);
	assert_int_equal(n, 6);
	for (size_t i = 0; i < n; i++) {
		double peak = tf_tpu_chip_peak(&g[i]);
		/* computed peak within 3% of the published figure */
		assert_true(fabs(peak - g[i].peak_flops) / g[i].peak_flops < 0.03);
		assert_ptr_equal(tf_tpu_gen_find(g[i].name), &g[i]);
	}
	const struct tf_tpu_gen *v4 = tf_tpu_gen_find("v4");
	assert_non_null(v4);
	assert_int_equal(v4->mxu_rows, 128);
	assert_int_equal(v4->mxus_per_core, 4);
	assert_int_equal(v4->cores_per_chip, 2);
	assert_int_equal(v4->torus_dims, 3);
	assert_true(fabs(tf_tpu_chip_peak(v4) - 275.2e12) < 1e11);
	assert_ptr_equal(tf_tpu_gen_find("v5litepod"), tf_tpu_gen_find("v5e"));
	assert_int_equal(tf_tpu_gen_find("v6e")->mxu_rows, 256);
	assert_null(tf_tpu_gen_find("v7"));
	assert_null(tf_tpu_gen_find(NULL));
}

static void check(const char *spec, const char *gen, int chips, int cores, const char *topo,
                  const char *name)
{
	struct tf_tpu_slice s;
	char err[256] = "";
	int rc = tf_tpu_slice_parse(spec, &s, err, sizeof err);
	if (rc)
		fail_msg("%s: %s", spec, err);
	assert_string_equal(s.gen->name, gen);
	assert_int_equal(s.chips, chips);
	assert_int_equal(s.cores, cores);
	assert_string_equal(s.topology, topo);
	assert_string_equal(s.name, name);
	assert_int_equal(s.dims[0] * s.dims[1] * s.dims[2], chips);
	assert_int_equal(s.ndims, s.gen->torus_dims);
}

static void test_tpu_slice_names(void **state)
{
	(void)state;
	check("v4-8", "v4", 4, 8, "2x2x1", "v4-8");
	check("v4-32", "v4", 16, 32, "2x2x4", "v4-32");
	check("v4-8192", "v4", 4096, 8192, "16x16x16", "v4-8192");
	check("v5p-8", "v5p", 4, 8, "2x2x1", "v5p-8");
	check("v5litepod-16", "v5e", 16, 16, "4x4", "v5litepod-16");
	check("v5e-16", "v5e", 16, 16, "4x4", "v5litepod-16");
	check("v6e-4", "v6e", 4, 4, "2x2", "v6e-4");
	check("v2-8", "v2", 4, 8, "2x2", "v2-8");
	check("v3-2048", "v3", 1024, 2048, "32x32", "v3-2048");
	check("v4:2x2x4", "v4", 16, 32, "2x2x4", "v4-32");
	check("v4:4x4x8", "v4", 128, 256, "4x4x8", "v4-256");
	check("v4:2x2x1", "v4", 4, 8, "2x2x1", "v4-8");
	check("v5e:2x4", "v5e", 8, 8, "2x4", "v5litepod-8");
	check("v6e:16x16", "v6e", 256, 256, "16x16", "v6e-256");
}

static void bad(const char *spec, const char *needle)
{
	struct tf_tpu_slice s;
	memset(&s, 0x5a, sizeof s);
	struct tf_tpu_slice before = s;
	char err[512] = "";
	assert_int_equal(tf_tpu_slice_parse(spec, &s, err, sizeof err), -EINVAL);
	if (!strstr(err, needle))
		fail_msg("%s: message \"%s\" lacks \"%s\"", spec ? spec : "(null)", err, needle);
	assert_memory_equal(&s, &before, sizeof s); /* untouched on failure */
}

static void test_tpu_slice_errors(void **state)
{
	(void)state;
	bad("", "empty slice");
	bad(NULL, "empty slice");
	bad("v4", "neither an accelerator type");
	bad("v9-8", "unknown TPU generation \"v9\"");
	bad("v9-8", "v2, v3, v4, v5e, v5p, v6e");
	bad("v4-6", "not offered");
	bad("v4-6", "v4-8, v4-16");
	bad("v4-abc", "not a number");
	bad("v5litepod-3", "v5litepod-4");
	bad("v4:2x2", "must be AxBxC");
	bad("v4:4x2x2", "A <= B <= C");
	bad("v4:2x2x6", "at most 4 or a multiple of 4");
	bad("v4:4x4x4x4", "must be AxBxC");
	bad("v4:2x4x8", "4x4x4 cubes");
	bad("v4:16x16x32", "largest v4 slice has 4096");
	bad("v5e:4x2", "A <= B");
	bad("v5e:3x3", "power of two");
	bad("v5e:2x16", "too elongated");
	bad("v5e:2x", "must be AxB");
	bad("v6e:32x32", "largest v6e slice has 256 (v6e-256, 16x16)");
	/* Geometrically valid, but not offered by Cloud TPU: refused with the valid list. */
	bad("v4:1x1x1", "not offered by Cloud TPU: use one of 2x2x1, 2x2x2");
	bad("v4:1x2x2", "v4 topology 1x2x2 is not offered");
	bad("v4:1x4x4", "multiple of 4 (whole 4x4x4 cubes)");
	bad("v5e:1x2", "use one of 1x1, 2x2, 2x4");
	bad("v6e:1x2", "not offered");
	bad("v2:2x4", "use one of 2x2, 4x4, 8x8, 8x16, 16x16");
	bad("v5p-17920", "not offered");
	bad("v5p:16x20x28", "largest v5p slice has 6144 (v5p-12288, 16x16x24)");
}

/* Largest slices, hosts and which host holds which chip, wrap-around links (Cloud TPU pages). */
static void test_tpu_hosts_and_wrap(void **state)
{
	(void)state;
	struct tf_tpu_slice s;
	char err[256];
	assert_int_equal(tf_tpu_slice_parse("v5p-12288", &s, err, sizeof err), 0);
	assert_int_equal(s.chips, 6144);
	assert_int_equal(s.hosts, 1536);
	assert_int_equal(tf_tpu_slice_parse("v4:8x8x12", &s, err, sizeof err), 0); /* cubes */
	/* v4-32 = 2x2x4: 4 hosts of a 2x2x1 tray each; chip (x, y, z) is on host z */
	assert_int_equal(tf_tpu_slice_parse("v4-32", &s, err, sizeof err), 0);
	assert_int_equal(s.hosts, 4);
	assert_int_equal(s.chips_per_host, 4);
	for (int c = 0; c < s.chips; c++)
		assert_int_equal(tf_tpu_chip_host(&s, c), c / 4);
	assert_int_equal(tf_tpu_chip_host(&s, 16), -EINVAL);
	assert_int_equal(s.wrap[2], 1); /* v4 wraps along a multiple of 4 only */
	assert_int_equal(s.wrap[0] + s.wrap[1], 0);
	/* v5e: 8 chips (2x4) per host; 4x4 is 2 hosts, split along x; 2x2 is part of one */
	assert_int_equal(tf_tpu_slice_parse("v5litepod-16", &s, err, sizeof err), 0);
	assert_int_equal(s.hosts, 2);
	assert_int_equal(s.chips_per_host, 8);
	assert_int_equal(tf_tpu_chip_host(&s, 1), 0);
	assert_int_equal(tf_tpu_chip_host(&s, 2), 1);
	assert_int_equal(tf_tpu_chip_host(&s, 13), 0);
	assert_int_equal(s.wrap[0] + s.wrap[1], 0);
	assert_int_equal(tf_tpu_slice_parse("v5litepod-4", &s, err, sizeof err), 0);
	assert_int_equal(s.hosts, 1);
	assert_int_equal(s.chips_per_host, 4);
	assert_int_equal(tf_tpu_slice_parse("v6e-256", &s, err, sizeof err), 0);
	assert_int_equal(s.hosts, 32);
	assert_int_equal(s.wrap[0] + s.wrap[1], 2); /* the full pod's sides */
	/* the lenient shape parser takes sub-mesh placements the scheduler asks for */
	assert_int_equal(tf_tpu_shape_parse("v4:1x4x4", &s, err, sizeof err), 0);
	assert_int_equal(s.chips, 16);
	/* published figures and units */
	const struct tf_tpu_gen *v2 = tf_tpu_gen_find("v2"), *v6e = tf_tpu_gen_find("v6e");
	assert_true(v2->peak_flops == 45e12);
	assert_int_equal(v2->hbm_gib, 1);
	assert_int_equal(v6e->hbm_gib, 0);
	assert_true(v6e->ici_bw == 100e9);
	assert_int_equal(tf_tpu_gen_find("v5p")->max_chips, 6144);
	assert_int_equal(tf_tpu_gen_find("v5p")->pod_chips, 8960);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_tpu_presets_match_published_peaks),
	    cmocka_unit_test(test_tpu_slice_names),
	    cmocka_unit_test(test_tpu_slice_errors),
	    cmocka_unit_test(test_tpu_hosts_and_wrap),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

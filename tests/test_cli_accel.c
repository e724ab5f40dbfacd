/* test_cli_accel.c — `tpuflow accel` end to end: matmul on .npy files gives the MXU's bits and
 * the model's cycles, bad .npy files are refused with exit 65 and a clear message, cycles /
 * slices / info print what they should. Runs $TPUFLOW_BIN in the test's temp directory. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "accel/mxu.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

/* Runs `$TPUFLOW_BIN args`, captures stdout and stderr; returns the exit code. */
static int run(const char *args, char *out, size_t outlen, char *err, size_t errlen)
{
	const char *bin = getenv("TPUFLOW_BIN");
	assert_non_null(bin);
	char cmd[1024];
	snprintf(cmd, sizeof cmd, "%s %s >out.txt 2>err.txt", bin, args);
	int st = system(cmd);
	FILE *f = fopen("out.txt", "r");
	size_t n = f ? fread(out, 1, outlen - 1, f) : 0;
	out[n] = '\0';
	if (f)
		fclose(f);
	f = fopen("err.txt", "r");
	n = f ? fread(err, 1, errlen - 1, f) : 0;
	err[n] = '\0';
	if (f)
		fclose(f);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void write_npy(const char *path, const char *descr, const char *shape, const void *data,
                      size_t bytes)
{
	char dict[200];
	int dl = snprintf(dict, sizeof dict,
	                  "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, shape);
	size_t pad = (64 - (10 + (size_t)dl + 1) % 64) % 64;
	size_t hlen = (size_t)dl + pad + 1;
	FILE *f = fopen(path, "wb");
	assert_non_null(f);
	unsigned char pre[10] = {
	    0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)hlen, (unsigned char)(hlen >> 8)};
	fwrite(pre, 1, 10, f);
	fwrite(dict, 1, (size_t)dl, f);
	for (size_t i = 0; i < pad; i++)
		fputc(' ', f);
	fputc('\n', f);
	fwrite(data, 1, bytes, f);
	fclose(f);
}

static void test_cli_accel_matmul_npy(void **state)
{
	(void)state;
	enum { M = 5, K = 130, N = 7 };
	static float a[M * K], b[K * N], want[M * N], got[M * N];
	for (int i = 0; i < M * K; i++)
		a[i] = (float)((i * 37) % 101) / 7.0f - 6.0f;
	for (int i = 0; i < K * N; i++)
		b[i] = (float)((i * 53) % 89) / 11.0f - 4.0f;
	write_npy("A.npy", "<f4", "(5, 130)", a, sizeof a);
	write_npy("B.npy", "<f4", "(130, 7)", b, sizeof b);
	struct tf_mxu_cfg cfg;
	tf_mxu_cfg_init(&cfg);
	cfg.mxus = 4;
	struct tf_mxu_stats st;
	tf_mxu_gemm(&cfg, 0, 0, M, K, N, a, K, b, N, want, N, &st);

	char out[8192], err[4096];
	for (int ref = 0; ref <= 1; ref++) {
		char args[256];
		snprintf(args, sizeof args, "--json accel matmul --a A.npy --b B.npy --out C.npy%s",
		         ref ? " --reference" : " --threads 2");
		assert_int_equal(run(args, out, sizeof out, err, sizeof err), 0);
		json_error_t je;
		json_t *j = json_loads(out, 0, &je);
		assert_non_null(j);
		assert_int_equal(json_integer_value(json_object_get(j, "cycles")), st.cycles);
		assert_true(json_real_value(json_object_get(j, "device_seconds")) > 0);
		assert_non_null(json_object_get(j, "utilization"));
		assert_non_null(json_object_get(j, "mapping_efficiency"));
		json_decref(j);
		FILE *f = fopen("C.npy", "rb");
		assert_non_null(f);
		/* header is padded to 64 bytes: find the data after the newline */
		fseek(f, 0, SEEK_END);
		long sz = ftell(f);
		assert_true(sz > (long)sizeof got);
		fseek(f, sz - (long)sizeof got, SEEK_SET);
		assert_int_equal(fread(got, 1, sizeof got, f), sizeof got);
		fclose(f);
		assert_memory_equal(got, want, sizeof got);
	}
}

static void expect_bad(const char *args, const char *needle)
{
	char out[4096], err[4096];
	int rc = run(args, out, sizeof out, err, sizeof err);
	if (rc != 65 || !strstr(err, needle))
		fail_msg("%s: rc %d, stderr \"%s\" (want 65 and \"%s\")", args, rc, err, needle);
}

static void test_cli_accel_bad_npy(void **state)
{
	(void)state;
	double d[4] = {1, 2, 3, 4};
	float f[6] = {1, 2, 3, 4, 5, 6};
	write_npy("f8.npy", "<f8", "(2, 2)", d, sizeof d);
	write_npy("ok.npy", "<f4", "(2, 3)", f, sizeof f);
	write_npy("short.npy", "<f4", "(3, 3)", f, sizeof f);
	write_npy("be.npy", ">f4", "(2, 3)", f, sizeof f);
	write_npy("3d.npy", "<f4", "(1, 2, 3)", f, sizeof f);
	FILE *fp = fopen("junk.npy", "wb");
	fputs("hello world, not numpy", fp);
	fclose(fp);
	expect_bad("accel matmul --a f8.npy --b ok.npy", "'<f8' is not little-endian float32");
	expect_bad("accel matmul --a be.npy --b ok.npy", "'>f4'");
	expect_bad("accel matmul --a short.npy --b ok.npy", "promises 9 values of 4 bytes");
	expect_bad("accel matmul --a 3d.npy --b ok.npy", "2-D");
	expect_bad("accel matmul --a junk.npy --b ok.npy", "is not a .npy file");
	expect_bad("accel matmul --a missing.npy --b ok.npy", "cannot read 'missing.npy'");
	expect_bad("accel matmul --a ok.npy --b ok.npy", "shapes do not chain: A is 2 x 3");
	char out[4096], err[4096];
	assert_int_equal(run("accel matmul --a ok.npy", out, sizeof out, err, sizeof err), 64);
	assert_int_equal(
	    run("accel matmul --a ok.npy --b ok.npy --array 12", out, sizeof out, err, sizeof err),
	    64);
	assert_int_equal(run("accel frobnicate", out, sizeof out, err, sizeof err), 64);
}

static void test_cli_accel_cycles_slices_info(void **state)
{
	(void)state;
	char out[65536], err[4096];
	assert_int_equal(run("--json accel cycles --m 256 --k 784 --n 256 --array 128x128", out,
	                     sizeof out, err, sizeof err),
	                 0);
	json_t *j = json_loads(out, 0, NULL);
	assert_non_null(j);
	assert_int_equal(json_integer_value(json_object_get(j, "folds")), 14);
	assert_int_equal(json_integer_value(json_object_get(j, "scalesim_total")), 14 * 638 - 1);
	json_decref(j);
	assert_int_equal(run("accel cycles --m 1 --k 1", out, sizeof out, err, sizeof err), 64);
	assert_int_equal(
	    run("accel cycles --m 1 --k 1 --n 1 --dataflow xx", out, sizeof out, err, sizeof err),
	    64);
	assert_int_equal(run("accel slices --json", out, sizeof out, err, sizeof err), 0);
	j = json_loads(out, 0, NULL);
	assert_non_null(j);
	assert_int_equal(json_array_size(json_object_get(j, "generations")), 6);
	json_decref(j);
	assert_int_equal(run("accel info v4-32 --json", out, sizeof out, err, sizeof err), 0);
	j = json_loads(out, 0, NULL);
	assert_non_null(j);
	assert_int_equal(json_integer_value(json_object_get(j, "chips")), 16);
	assert_int_equal(json_integer_value(json_object_get(j, "mxus")), 128);
	assert_string_equal(json_string_value(json_object_get(j, "topology")), "2x2x4");
	json_decref(j);
	assert_int_equal(run("accel info v4-7", out, sizeof out, err, sizeof err), 64);
	assert_non_null(strstr(err, "not offered"));
}

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		fail_msg("cannot open %s", path);
	static char buf[2][65536];
	static int which;
	char *b = buf[which++ & 1];
	size_t n = fread(b, 1, sizeof buf[0] - 1, f);
	b[n] = '\0';
	fclose(f);
	return b;
}

/* SCALE-Sim's inputs in, SCALE-Sim's three reports out, byte for byte (the fixture's files
 * were written by SCALE-Sim v2 itself). */
static void test_cli_accel_cycles_topology(void **state)
{
	(void)state;
	char root[1024], out[65536], err[4096], args[8192];
	snprintf(root, sizeof root, "%s", getenv("TPUFLOW_BIN"));
	for (int i = 0; i < 2; i++) /* ROOT/BUILD/tpuflow */
		*strrchr(root, '/') = '\0';
	const char *fx = "tests/fixtures/scalesim";
	static const char *runs[] = {"os_user", "is_calc"};
	for (int r = 0; r < 2; r++) {
		snprintf(args, sizeof args,
		         "accel cycles --topology %s/%s/topologies/conv.csv --config "
		         "%s/%s/configs/%s.cfg --report-dir .",
		         root, fx, root, fx, runs[r]);
		if (run(args, out, sizeof out, err, sizeof err) != 0)
			fail_msg("%s: %s", args, err);
		assert_non_null(strstr(out, "Inc5b_3x3"));
		static const char *rep[3] = {"COMPUTE_REPORT.csv", "BANDWIDTH_REPORT.csv",
		                             "DETAILED_ACCESS_REPORT.csv"};
		for (int k = 0; k < 3; k++) {
			char want[2048];
			snprintf(want, sizeof want, "%s/%s/out/%s/conv/%s", root, fx, runs[r],
			         rep[k]);
			assert_string_equal(slurp(rep[k]), slurp(want));
		}
	}
	snprintf(args, sizeof args,
	         "--json accel cycles --topology %s/%s/topologies/gemm.csv --weight-double-buffer",
	         root, fx);
	assert_int_equal(run(args, out, sizeof out, err, sizeof err), 0);
	json_t *j = json_loads(out, 0, NULL);
	assert_non_null(j);
	json_t *l0 = json_array_get(json_object_get(j, "layers"), 0);
	assert_int_equal(json_integer_value(json_object_get(l0, "m")), 128);
	assert_true(json_integer_value(json_object_get(l0, "weight_double_buffer_cycles")) <
	            json_integer_value(json_object_get(l0, "compute_cycles")));
	json_decref(j);
	FILE *f = fopen("bad.csv", "w");
	fputs("Layer, M, N, K,\nx, 1, two, 3,\n", f);
	fclose(f);
	assert_int_equal(run("accel cycles --topology bad.csv", out, sizeof out, err, sizeof err),
	                 65);
	assert_non_null(strstr(err, "bad.csv:2"));
	f = fopen("bad.cfg", "w");
	fputs("[architecture_presets]\nArrayHeight: 0\n", f);
	fclose(f);
	snprintf(args, sizeof args,
	         "accel cycles --topology %s/%s/topologies/gemm.csv --config bad.cfg", root, fx);
	assert_int_equal(run(args, out, sizeof out, err, sizeof err), 78);
	assert_non_null(strstr(err, "bad.cfg:2: ArrayHeight must be 1..65536"));
	/* hosts and wrap-around in accel info */
	assert_int_equal(run("accel info v5litepod-16 --json", out, sizeof out, err, sizeof err),
	                 0);
	j = json_loads(out, 0, NULL);
	assert_non_null(j);
	assert_int_equal(json_integer_value(json_object_get(j, "hosts")), 2);
	assert_int_equal(json_integer_value(json_array_get(json_object_get(j, "chip_host"), 2)), 1);
	assert_string_equal(json_string_value(json_object_get(j, "hbm_unit")), "GB");
	json_decref(j);
	/* v5p's page states its HBM in GiB ("HBM capacity per chip (GiB) 95") */
	assert_int_equal(run("accel info v5p-8 --json", out, sizeof out, err, sizeof err), 0);
	j = json_loads(out, 0, NULL);
	assert_non_null(j);
	assert_string_equal(json_string_value(json_object_get(j, "hbm_unit")), "GiB");
	json_decref(j);
	assert_int_equal(run("accel info v4:1x2x2", out, sizeof out, err, sizeof err), 64);
	assert_non_null(strstr(err, "use one of 2x2x1"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_cli_accel_matmul_npy),
	    cmocka_unit_test(test_cli_accel_bad_npy),
	    cmocka_unit_test(test_cli_accel_cycles_slices_info),
	    cmocka_unit_test(test_cli_accel_cycles_topology),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

/* test_layersim.c — the SCALE-Sim-compatible layer simulator against SCALE-Sim v2's own output
 * (tests/fixtures/scalesim: reports produced by running SCALE-Sim on the topologies and
 * configs there). Every figure of COMPUTE_REPORT, BANDWIDTH_REPORT and DETAILED_ACCESS_REPORT
 * is compared: totals, stalls, SRAM and DRAM access counts and cycles exactly, utilizations
 * and bandwidths to the last bit (both sides compute them as the same IEEE divisions). Also
 * the readers' errors and the weight-double-buffering cycle count. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "accel/layersim.h"
#include "tests/testutil.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char root[PATH_MAX]; /* the source tree: the executable is ROOT/BUILD/tests/test_x */

static void find_root(void)
{
	ssize_t n = readlink("/proc/self/exe", root, sizeof root - 1);
	if (n <= 0)
		fail_msg("cannot read /proc/self/exe");
	root[n] = '\0';
	for (int i = 0; i < 3; i++) {
		char *slash = strrchr(root, '/');
		if (!slash)
			fail_msg("unexpected executable path");
		*slash = '\0';
	}
}

/* Reads a SCALE-Sim report: rows of numbers after the header, LayerID first. */
static int read_report(const char *path, double rows[][20], int max_rows, int *ncols)
{
	FILE *f = fopen(path, "r");
	if (!f)
		fail_msg("cannot open %s", path);
	char line[2048];
	int n = 0;
	if (!fgets(line, sizeof line, f))
		fail_msg("%s is empty", path);
	while (n < max_rows && fgets(line, sizeof line, f)) {
		int c = 0;
		char *p = line;
		while (*p && *p != '\n' && c < 20) {
			char *end;
			rows[n][c] = strtod(p, &end);
			if (end == p)
				break;
			c++;
			p = end;
			while (*p == ',' || *p == ' ')
				p++;
		}
		*ncols = c;
		n++;
	}
	fclose(f);
	return n;
}

static void check_run(const char *run, const char *topo)
{
	char path[PATH_MAX + 128], err[512];
	struct tf_layersim_cfg cfg;
	snprintf(path, sizeof path, "%s/tests/fixtures/scalesim/configs/%s.cfg", root, run);
	if (tf_layersim_read_cfg(path, &cfg, err, sizeof err))
		fail_msg("%s", err);
	struct tf_layer *layers;
	size_t n;
	snprintf(path, sizeof path, "%s/tests/fixtures/scalesim/topologies/%s.csv", root, topo);
	if (tf_layersim_read_topology(path, 0, &layers, &n, err, sizeof err))
		fail_msg("%s", err);
	static const char *rep[3] = {"COMPUTE_REPORT", "BANDWIDTH_REPORT",
	                             "DETAILED_ACCESS_REPORT"};
	double want[3][8][20];
	int cols[3], rows[3];
	for (int k = 0; k < 3; k++) {
		snprintf(path, sizeof path, "%s/tests/fixtures/scalesim/out/%s/%s/%s.csv", root,
		         run, topo, rep[k]);
		rows[k] = read_report(path, want[k], 8, &cols[k]);
		assert_int_equal(rows[k], (int)n);
	}
	assert_int_equal(cols[0], 6);
	assert_int_equal(cols[1], 7);
	assert_int_equal(cols[2], 19);
	for (size_t i = 0; i < n; i++) {
		struct tf_layersim_report r;
		if (tf_layersim_run(&cfg, &layers[i], &r, err, sizeof err))
			fail_msg("%s", err);
		const struct tf_layersim_mem *m[3] = {&r.ifmap, &r.filter, &r.ofmap};
		double got[3][20] = {{(double)i, (double)r.total_cycles, (double)r.stall_cycles,
		                      r.overall_util, r.mapping_efficiency, r.compute_util},
		                     {(double)i, m[0]->sram_bw, m[1]->sram_bw, m[2]->sram_bw,
		                      m[0]->dram_bw, m[1]->dram_bw, m[2]->dram_bw},
		                     {(double)i}};
		for (int o = 0; o < 3; o++) {
			got[2][1 + 3 * o] = (double)m[o]->sram_start;
			got[2][2 + 3 * o] = (double)m[o]->sram_stop;
			got[2][3 + 3 * o] = (double)m[o]->sram_accesses;
			got[2][10 + 3 * o] = (double)m[o]->dram_start;
			got[2][11 + 3 * o] = (double)m[o]->dram_stop;
			got[2][12 + 3 * o] = (double)m[o]->dram_accesses;
		}
		for (int k = 0; k < 3; k++)
			for (int c = 0; c < cols[k]; c++)
				if (got[k][c] != want[k][i][c])
					fail_msg(
					    "%s/%s layer %zu (%s) %s column %d: tpuflow %.17g, "
					    "SCALE-Sim %.17g",
					    run, topo, i, layers[i].name, rep[k], c, got[k][c],
					    want[k][i][c]);
		/* the total is the last demand row's cycle index: at most rows - 1 + stalls */
		assert_true(r.compute_cycles + r.stall_cycles >= r.total_cycles + 1);
	}
	free(layers);
}

static void test_layersim_matches_scalesim(void **state)
{
	(void)state;
	static const char *runs[] = {"ws_user", "ws_calc", "os_user",
	                             "os_calc", "is_user", "is_calc"};
	for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
		if (strcmp(runs[i], "ws_user")) /* not recorded: see the fixture's README */
			check_run(runs[i], "conv");
		check_run(runs[i], "gemm");
		check_run(runs[i], "conv_small");
	}
}

/* The USER-mode stalls are what makes the memory model matter: the same layer with a wide
 * interface stalls far less than with 4 words per cycle. */
static void test_layersim_bandwidth_moves_stalls(void **state)
{
	(void)state;
	struct tf_layersim_cfg cfg;
	tf_layersim_cfg_init(&cfg);
	cfg.rows = 32, cfg.cols = 16, cfg.ifmap_kb = 8, cfg.filter_kb = 8, cfg.ofmap_kb = 4;
	cfg.user_bandwidth = 1;
	struct tf_layer l;
	tf_layer_gemm(&l, "g", 128, 64, 256);
	struct tf_layersim_report slow, fast;
	char err[256];
	cfg.bandwidth = 4;
	assert_int_equal(tf_layersim_run(&cfg, &l, &slow, err, sizeof err), 0);
	cfg.bandwidth = 256;
	assert_int_equal(tf_layersim_run(&cfg, &l, &fast, err, sizeof err), 0);
	assert_true(slow.stall_cycles > 10 * fast.stall_cycles);
	assert_true(slow.total_cycles > fast.total_cycles);
	/* stall-free: folds x (2R + C + T - 2) rows; the weight double-buffered count
	 * replaces each fold's R weight-load cycles after the first */
	assert_int_equal(fast.folds, 8 * 4);
	assert_int_equal(fast.compute_cycles, 32 * (64 + 16 + 128 - 2));
	assert_int_equal(fast.wdb_cycles, 32 + 32 * (32 + 16 + 128 - 2));
}

/* Stall-free (CALC, large SRAMs), the simulator's total is the analytical model's
 * SCALE-Sim total for every dataflow, and the utilizations agree. */
static void test_layersim_agrees_with_cycle_model(void **state)
{
	(void)state;
	static const uint32_t shapes[][3] = {
	    {128, 64, 256}, {1, 300, 17}, {200, 3, 1000}, {33, 129, 65}};
	for (int df = TF_MXU_WS; df <= TF_MXU_IS; df++) {
		for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
			struct tf_layersim_cfg cfg;
			tf_layersim_cfg_init(&cfg);
			cfg.rows = 16, cfg.cols = 32, cfg.dataflow = df;
			cfg.ifmap_kb = cfg.filter_kb = cfg.ofmap_kb = 4096;
			struct tf_layer l;
			uint32_t M = shapes[i][0], N = shapes[i][1], K = shapes[i][2];
			tf_layer_gemm(&l, "g", M, N, K);
			struct tf_layersim_report r;
			char err[256];
			assert_int_equal(tf_layersim_run(&cfg, &l, &r, err, sizeof err), 0);
			struct tf_mxu_model m;
			assert_int_equal(tf_mxu_model(df, M, K, N, 16, 32, 1, &m), 0);
			assert_int_equal(r.stall_cycles, 0);
			assert_int_equal(r.total_cycles, m.scalesim_total);
			assert_int_equal(r.compute_cycles, m.cycles);
			assert_true(fabs(r.overall_util / 100 - m.scalesim_utilization) < 1e-12);
			assert_true(fabs(r.compute_util / 100 - m.compute_utilization) < 1e-12);
			assert_true(fabs(r.mapping_efficiency / 100 - m.mapping_efficiency) <
			            1e-12);
		}
	}
}

/* The reader tests write their files in a directory of their own (not the working tree). */
static void test_layersim_reader_errors(void **state)
{
	(void)state;
	char dir[] = "/tmp/tf-layersim-XXXXXX", back[4096];
	assert_non_null(getcwd(back, sizeof back));
	assert_non_null(mkdtemp(dir));
	assert_int_equal(chdir(dir), 0);
	char err[512];
	struct tf_layer *l = NULL;
	size_t n;
	struct tf_layersim_cfg cfg;
	tf_test_write_file("t1.csv",
	                   "Layer name, H, W, Fh, Fw, C, N, S,\nc1, 7, 7, 9, 3, 1, 1, 1,\n");
	assert_int_equal(tf_layersim_read_topology("t1.csv", 0, &l, &n, err, sizeof err), -EINVAL);
	assert_non_null(strstr(err, "t1.csv:2"));
	assert_non_null(strstr(err, "no larger than the input"));
	tf_test_write_file("t2.csv", "Layer, M, N, K,\ng, 4, x, 2,\n");
	assert_int_equal(tf_layersim_read_topology("t2.csv", 0, &l, &n, err, sizeof err), -EINVAL);
	assert_non_null(strstr(err, "t2.csv:2: every size must be"));
	tf_test_write_file("t3.csv", "Layer, M, N, K,\ng, 4, 3, 2,\n");
	assert_int_equal(tf_layersim_read_topology("t3.csv", 0, &l, &n, err, sizeof err), 0);
	assert_int_equal(n, 1);
	uint64_t M, N, K;
	tf_layer_mnk(&l[0], &M, &N, &K);
	assert_true(M == 4 && N == 3 && K == 2);
	free(l);
	tf_test_write_file("t4.csv",
	                   "Layer name, H, W, Fh, Fw, C, N, S,\nDP1, 8, 8, 3, 3, 4, 1, 1,\n");
	assert_int_equal(tf_layersim_read_topology("t4.csv", 0, &l, &n, err, sizeof err), 0);
	assert_int_equal(n, 4); /* depthwise: one layer per channel */
	assert_string_equal(l[3].name, "DP1Channel_3");
	free(l);
	assert_int_equal(tf_layersim_read_topology("missing.csv", 0, &l, &n, err, sizeof err),
	                 -ENOENT);
	tf_test_write_file("c1.cfg",
	                   "[general]\nrun_name = x\n[architecture_presets]\nArrayHeight: 8\n"
	                   "Dataflow : xs\n[run_presets]\nInterfaceBandwidth: USER\n");
	assert_int_equal(tf_layersim_read_cfg("c1.cfg", &cfg, err, sizeof err), -EINVAL);
	assert_non_null(strstr(err, "c1.cfg:5: Dataflow 'xs' must be ws, os or is"));
	tf_test_write_file("c2.cfg", "[architecture_presets]\nArrayHeight: 8\n[run_presets]\n"
	                             "InterfaceBandwidth: USER\n");
	assert_int_equal(tf_layersim_read_cfg("c2.cfg", &cfg, err, sizeof err), -EINVAL);
	assert_non_null(strstr(err, "needs Bandwidth"));
	tf_test_write_file("c3.cfg", "[architecture_presets]\nArrayHeight: 8\nArrayWidth: 4\n"
	                             "Bandwidth : 10,20\nDataflow : is\n[run_presets]\n"
	                             "InterfaceBandwidth: USER\n");
	assert_int_equal(tf_layersim_read_cfg("c3.cfg", &cfg, err, sizeof err), 0);
	assert_true(cfg.rows == 8 && cfg.cols == 4 && cfg.bandwidth == 10 &&
	            cfg.dataflow == TF_MXU_IS && cfg.user_bandwidth);
	static const char *const made[] = {"t1.csv", "t2.csv", "t3.csv", "t4.csv",
	                                   "c1.cfg", "c2.cfg", "c3.cfg"};
	for (size_t i = 0; i < sizeof made / sizeof made[0]; i++)
		assert_int_equal(unlink(made[i]), 0);
	assert_int_equal(chdir(back), 0);
	assert_int_equal(rmdir(dir), 0);
}

/* Sizes from a topology file whose products wrap 64 bits (a window of (2^32-1)^2 x 2^31
 * elements is 2^31 modulo 2^64) or need more than 2^30 simulated cycles are refused with a
 * message; nothing is allocated from a wrapped size. */
static void test_layersim_sizes_never_wrap(void **state)
{
	(void)state;
	struct tf_layersim_cfg cfg;
	tf_layersim_cfg_init(&cfg);
	struct tf_layersim_report r;
	char err[512];
	struct tf_layer l = {.ifmap_h = UINT32_MAX, .ifmap_w = UINT32_MAX, .filt_h = UINT32_MAX,
	                     .filt_w = UINT32_MAX, .channels = 1u << 31, .filters = 1,
	                     .stride_h = 1, .stride_w = 1};
	snprintf(l.name, sizeof l.name, "wrap");
	uint64_t M, N, K;
	assert_int_equal(tf_layer_mnk(&l, &M, &N, &K), -EOVERFLOW);
	assert_true(K == UINT64_MAX);
	assert_int_not_equal(tf_layersim_run(&cfg, &l, &r, err, sizeof err), 0);
	assert_non_null(strstr(err, "layer 'wrap' is too large to simulate"));
	/* output pixels (2^32-1)^2, a 2-element window */
	struct tf_layer px = {.ifmap_h = UINT32_MAX, .ifmap_w = UINT32_MAX, .filt_h = 1,
	                      .filt_w = 1, .channels = 2, .filters = 1, .stride_h = 1,
	                      .stride_w = 1};
	assert_int_not_equal(tf_layersim_run(&cfg, &px, &r, err, sizeof err), 0);
	assert_non_null(strstr(err, "too large to simulate"));
	/* small operands, too many cycles for a 1x1 array: refused at once */
	cfg.rows = cfg.cols = 1;
	struct tf_layer g;
	tf_layer_gemm(&g, "long", 1u << 31, 1, 1);
	assert_int_equal(tf_layersim_run(&cfg, &g, &r, err, sizeof err), -E2BIG);
	assert_non_null(strstr(err, "more than 2^30 cycles"));
}

int main(void)
{
	find_root();
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_layersim_matches_scalesim),
	    cmocka_unit_test(test_layersim_bandwidth_moves_stalls),
	    cmocka_unit_test(test_layersim_agrees_with_cycle_model),
	    cmocka_unit_test(test_layersim_reader_errors),
	    cmocka_unit_test(test_layersim_sizes_never_wrap),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

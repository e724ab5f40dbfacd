/* cmd_accel.c — `tpuflow accel`: the emulated TPU from the command line.
 *
 *   accel matmul --a A.npy --b B.npy [--out C.npy] [--array RxC] [--reference] [--threads N]
 *   accel cycles --m M --k K --n N [--array RxC] [--dataflow ws|os|is] [--mxus N]
 *   accel cycles --topology FILE.csv [--config FILE.cfg] [--report-dir DIR] [--csv]
 *   accel slices
 *   accel info SLICE
 * Matrices are .npy files read and written by ml/npy.c (float32, little-endian, C order). */
#include "cli/cli.h"
#include "common/buf.h"
#include "common/common.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accel/layersim.h"
#include "accel/mxu.h"
#include "accel/slice.h"
#include "accel/tpu.h"
#include "ml/npy.h"

/* A matrix operand: a 2-D (or 1-D, read as 1 x n) little-endian float32 .npy file, read by
 * ml/npy.c. 0, or a negative errno with err. */
struct matrix {
	struct tf_npy a;   /* the array (owned) */
	size_t rows, cols; /* its shape as a matrix */
};

static int read_matrix(const char *path, struct matrix *m, char *err, size_t errlen)
{
	int rc = tf_npy_read(path, &m->a, err, errlen);
	if (rc)
		return rc;
	static const char *const descr[TF_NPY_LAST] = {"|u1", "<f4", "<f8"};
	if (m->a.dtype != TF_NPY_F32) {
		tf_errf(err, errlen,
		        "'%s': dtype '%s' is not little-endian float32 ('<f4'); convert it with "
		        "numpy: np.save(path, a.astype('<f4'))",
		        path, descr[m->a.dtype]);
		rc = -EINVAL;
	} else if (m->a.ndim > 2) {
		tf_errf(err, errlen, "'%s': expected a 2-D matrix, got a %d-D array", path,
		        m->a.ndim);
		rc = -EINVAL;
	}
	if (rc) {
		tf_npy_release(&m->a);
		return rc;
	}
	m->rows = m->a.ndim == 2 ? m->a.shape[0] : 1;
	m->cols = m->a.shape[m->a.ndim - 1];
	return 0;
}

/* "RxC" -> rows, cols (1..65536). */
static int parse_array(const char *s, int *r, int *c)
{
	char *end;
	long a = strtol(s, &end, 10);
	if (end == s || *end != 'x')
		return -EINVAL;
	const char *p = end + 1;
	long b = strtol(p, &end, 10);
	if (end == p || *end || a < 1 || b < 1 || a > 65536 || b > 65536)
		return -EINVAL;
	*r = (int)a;
	*c = (int)b;
	return 0;
}

static int parse_count(const char *s, unsigned long long max, unsigned long long *out)
{
	char *end;
	if (!s || *s == '-' || *s == '\0')
		return -EINVAL;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (*end || errno || v > max)
		return -EINVAL;
	*out = v;
	return 0;
}

static int matmul(int argc, char **argv, struct tf_cli *cli)
{
	static const struct option opts[] = {
	    TF_CLI_COMMON_OPTIONS,
	    {"a", required_argument, NULL, 'a'},
	    {"b", required_argument, NULL, 'b'},
	    {"out", required_argument, NULL, 'o'},
	    {"array", required_argument, NULL, 'r'},
	    {"reference", no_argument, NULL, 'R'},
	    {"threads", required_argument, NULL, 't'},
	    {"gen", required_argument, NULL, 'g'},
	    {"no-ftz", no_argument, NULL, 'F'},
	    {NULL, 0, NULL, 0},
	};
	const char *cmd = "accel matmul", *apath = NULL, *bpath = NULL, *out = NULL;
	const char *array = NULL, *genname = "v4";
	int reference = 0, ftz = 1, opt;
	unsigned long long threads = 1;
	optind = 0;
	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (opt) {
		case 'a':
			apath = optarg;
			break;
		case 'b':
			bpath = optarg;
			break;
		case 'o':
			out = optarg;
			break;
		case 'r':
			array = optarg;
			break;
		case 'R':
			reference = 1;
			break;
		case 'F':
			ftz = 0;
			break;
		case 'g':
			genname = optarg;
			break;
		case 't':
			if (parse_count(optarg, 64, &threads) || threads < 1)
				return tf_cli_usage_error(cmd, "--threads '%s' must be 1..64",
				                          optarg);
			break;
		case 'h':
			printf(
			    "usage: tpuflow accel matmul --a A.npy --b B.npy [--out C.npy]\n"
			    "         [--array RxC] [--reference] [--threads N] [--gen GEN]\n"
			    "         [--no-ftz] [--json]\n\n"
			    "C = A . B on the emulated MXU: A (M x K) and B (K x N) are float32 "
			    ".npy\n"
			    "matrices, rounded to bfloat16 inside; products are accumulated in "
			    "fp32\n"
			    "in the systolic order (per K-tile of R rows). C is written as a "
			    "float32\n"
			    ".npy.\n\n"
			    "  --a, --b FILE   the operands (little-endian float32, C order, 2-D)\n"
			    "  --out FILE      write C here\n"
			    "  --array RxC     systolic array size (default: the generation's, "
			    "128x128)\n"
			    "  --reference     use the cycle-level reference model (slow; same "
			    "bits)\n"
			    "  --threads N     host threads for the fast kernel (default 1)\n"
			    "  --gen GEN       TPU generation for clock and MXUs per core (default "
			    "v4)\n"
			    "  --no-ftz        keep subnormals (default: flush them, as TPUs do)\n"
			    "  --json          print the summary as JSON: cycles, device_seconds,\n"
			    "                  utilization, mapping_efficiency\n");
			return TF_EXIT_OK;
		default:
			if (tf_cli_common_option(cli, opt, optarg))
				break;
			return tf_cli_usage_error(cmd, "unknown option");
		}
	}
	if (optind < argc)
		return tf_cli_usage_error(cmd, "unexpected argument '%s'", argv[optind]);
	if (!apath || !bpath)
		return tf_cli_usage_error(cmd, "both --a and --b are required");
	const struct tf_tpu_gen *gen = tf_tpu_gen_find(genname);
	if (!gen) {
		size_t ng;
		const struct tf_tpu_gen *gens = tf_tpu_gens(&ng);
		struct tf_buf known = {0};
		for (size_t i = 0; i < ng; i++)
			tf_buf_printf(&known, "%s%s", i ? ", " : "", gens[i].name);
		tf_cli_usage_error(cmd, "unknown generation '%s' (%s)", genname,
		                   tf_buf_str(&known));
		tf_buf_release(&known);
		return TF_EXIT_USAGE;
	}
	struct tf_mxu_cfg cfg;
	tf_mxu_cfg_init(&cfg);
	cfg.rows = gen->mxu_rows;
	cfg.cols = gen->mxu_cols;
	cfg.mxus = gen->mxus_per_core;
	cfg.ftz = ftz;
	cfg.threads = (int)threads;
	if (array && parse_array(array, &cfg.rows, &cfg.cols))
		return tf_cli_usage_error(cmd, "--array '%s' must be RxC, e.g. 128x128", array);

	char err[1024];
	struct matrix a = {0}, b = {0};
	int rc = TF_EXIT_OK;
	float *c = NULL;
	if (read_matrix(apath, &a, err, sizeof err) || read_matrix(bpath, &b, err, sizeof err)) {
		fprintf(stderr, "tpuflow %s: %s\n", cmd, err);
		rc = TF_EXIT_DATAERR;
		goto out;
	}
	if (a.cols != b.rows) {
		fprintf(stderr,
		        "tpuflow %s: shapes do not chain: A is %zu x %zu and B is %zu x %zu; A's "
		        "columns must equal B's rows\n",
		        cmd, a.rows, a.cols, b.rows, b.cols);
		rc = TF_EXIT_DATAERR;
		goto out;
	}
	size_t M = a.rows, K = a.cols, N = b.cols;
	c = tf_xmalloc((M * N > 0 ? M * N : 1) * sizeof(float));
	struct tf_mxu_stats st;
	double t0 = tf_now_monotonic();
	if (reference)
		tf_mxu_gemm_reference(&cfg, 0, 0, M, K, N, a.a.data, K, b.a.data, N, c, N, &st);
	else
		tf_mxu_gemm(&cfg, 0, 0, M, K, N, a.a.data, K, b.a.data, N, c, N, &st);
	double wall = tf_now_monotonic() - t0;
	int wrc = out ? tf_npy_write_f32(out, c, M, N) : 0;
	if (wrc) {
		fprintf(stderr, "tpuflow %s: cannot write '%s': %s\n", cmd, out, strerror(-wrc));
		rc = TF_EXIT_FAILED;
		goto out;
	}
	double dev = (double)st.cycles / gen->clock_hz;
	const char *kernel = reference ? "reference" : tf_mxu_kernel_name();
	if (cli->json) {
		json_t *j = json_object();
		json_object_set_new(j, "m", json_integer((json_int_t)M));
		json_object_set_new(j, "k", json_integer((json_int_t)K));
		json_object_set_new(j, "n", json_integer((json_int_t)N));
		json_object_set_new(j, "array", json_sprintf("%dx%d", cfg.rows, cfg.cols));
		json_object_set_new(j, "generation", json_string(gen->name));
		json_object_set_new(j, "mxus", json_integer(cfg.mxus));
		json_object_set_new(j, "kernel", json_string(kernel));
		json_object_set_new(j, "threads", json_integer(reference ? 1 : cfg.threads));
		json_object_set_new(j, "ftz", json_boolean(cfg.ftz));
		json_object_set_new(j, "folds", json_integer((json_int_t)st.folds));
		json_object_set_new(j, "cycles", json_integer((json_int_t)st.cycles));
		json_object_set_new(j, "device_seconds", json_real(dev));
		json_object_set_new(j, "utilization", json_real(st.utilization));
		json_object_set_new(j, "mapping_efficiency", json_real(st.mapping_efficiency));
		json_object_set_new(j, "host_seconds", json_real(wall));
		json_object_set_new(j, "out", out ? json_string(out) : json_null());
		tf_cli_print_json(stdout, j);
		json_decref(j);
	} else {
		printf("C = A . B: %zu x %zu . %zu x %zu on a %dx%d array (%s, %s kernel)\n", M, K,
		       K, N, cfg.rows, cfg.cols, gen->name, kernel);
		printf("folds %llu, cycles %llu (%d MXUs), device time %.3g s at %.0f MHz\n",
		       (unsigned long long)st.folds, (unsigned long long)st.cycles, cfg.mxus, dev,
		       gen->clock_hz / 1e6);
		printf("utilization %.4f, mapping efficiency %.4f, host time %.3g s\n",
		       st.utilization, st.mapping_efficiency, wall);
		if (out)
			printf("wrote %s\n", out);
	}
out:
	tf_npy_release(&a.a);
	tf_npy_release(&b.a);
	free(c);
	return rc;
}

/* Python's repr of a float (the shortest decimal that reads back the same), as SCALE-Sim's
 * reports print them: 33.0, 0.501173861507284. */
static void pyfloat(FILE *f, double v)
{
	char buf[40];
	for (int prec = 1; prec <= 17; prec++) {
		snprintf(buf, sizeof buf, "%.*g", prec, v);
		if (strtod(buf, NULL) == v)
			break;
	}
	char *e = strchr(buf, 'e');
	if (e && atoi(e + 1) >= 0 && atoi(e + 1) < 16) /* Python writes 1e+02 as 100.0 */
		snprintf(buf, sizeof buf, "%.0f", v);
	if (!strpbrk(buf, ".eEn"))
		strcat(buf, ".0");
	fputs(buf, f);
}

static const char *df_name(int df)
{
	return df == TF_MXU_WS ? "ws" : df == TF_MXU_OS ? "os" : "is";
}

/* SCALE-Sim's three per-layer reports, with its headers and number formats. */
static int write_reports(const char *dir, const struct tf_layersim_report *r, size_t n, char *err,
                         size_t errlen)
{
	static const char *names[3] = {"COMPUTE_REPORT.csv", "BANDWIDTH_REPORT.csv",
	                               "DETAILED_ACCESS_REPORT.csv"};
	for (int k = 0; k < 3; k++) {
		char path[4096];
		snprintf(path, sizeof path, "%s/%s", dir, names[k]);
		FILE *f = fopen(path, "w");
		if (!f) {
			tf_errf(err, errlen, "cannot create '%s': %s", path, strerror(errno));
			return -EIO;
		}
		if (k == 0)
			fputs("LayerID, Total Cycles, Stall Cycles, Overall Util %, Mapping "
			      "Efficiency %, Compute Util %,\n",
			      f);
		else if (k == 1)
			fputs("LayerID, Avg IFMAP SRAM BW, Avg FILTER SRAM BW, Avg OFMAP SRAM BW, "
			      "Avg IFMAP DRAM BW, Avg FILTER DRAM BW, Avg OFMAP DRAM BW,\n",
			      f);
		else
			fputs("LayerID, SRAM IFMAP Start Cycle, SRAM IFMAP Stop Cycle, SRAM IFMAP "
			      "Reads, SRAM Filter Start Cycle, SRAM Filter Stop Cycle, SRAM Filter "
			      "Reads, SRAM OFMAP Start Cycle, SRAM OFMAP Stop Cycle, SRAM OFMAP "
			      "Writes, DRAM IFMAP Start Cycle, DRAM IFMAP Stop Cycle, DRAM IFMAP "
			      "Reads, DRAM Filter Start Cycle, DRAM Filter Stop Cycle, DRAM Filter "
			      "Reads, DRAM OFMAP Start Cycle, DRAM OFMAP Stop Cycle, DRAM OFMAP "
			      "Writes,\n",
			      f);
		for (size_t i = 0; i < n; i++) {
			const struct tf_layersim_report *x = &r[i];
			const struct tf_layersim_mem *m[3] = {&x->ifmap, &x->filter, &x->ofmap};
			fprintf(f, "%zu, ", i);
			if (k == 0) {
				fprintf(f, "%llu, %llu, ", (unsigned long long)x->total_cycles,
				        (unsigned long long)x->stall_cycles);
				pyfloat(f, x->overall_util);
				fputs(", ", f);
				pyfloat(f, x->mapping_efficiency);
				fputs(", ", f);
				pyfloat(f, x->compute_util);
			} else if (k == 1) {
				for (int o = 0; o < 6; o++) {
					if (o)
						fputs(", ", f);
					pyfloat(f, o < 3 ? m[o]->sram_bw : m[o - 3]->dram_bw);
				}
			} else {
				for (int o = 0; o < 3; o++)
					fprintf(f, "%s%lld.0, %lld.0, %llu", o ? ", " : "",
					        (long long)m[o]->sram_start,
					        (long long)m[o]->sram_stop,
					        (unsigned long long)m[o]->sram_accesses);
				for (int o = 0; o < 3; o++)
					fprintf(f, ", %lld.0, %lld.0, %llu",
					        (long long)m[o]->dram_start,
					        (long long)m[o]->dram_stop,
					        (unsigned long long)m[o]->dram_accesses);
			}
			fputs(",\n", f);
		}
		if (fclose(f) != 0) {
			tf_errf(err, errlen, "cannot write '%s': %s", path, strerror(errno));
			return -EIO;
		}
	}
	return 0;
}

static json_t *mem_json(const struct tf_layersim_mem *m)
{
	json_t *j = json_object();
	json_object_set_new(j, "sram_start_cycle", json_integer(m->sram_start));
	json_object_set_new(j, "sram_stop_cycle", json_integer(m->sram_stop));
	json_object_set_new(j, "sram_accesses", json_integer((json_int_t)m->sram_accesses));
	json_object_set_new(j, "dram_start_cycle", json_integer(m->dram_start));
	json_object_set_new(j, "dram_stop_cycle", json_integer(m->dram_stop));
	json_object_set_new(j, "dram_accesses", json_integer((json_int_t)m->dram_accesses));
	json_object_set_new(j, "avg_sram_bw", json_real(m->sram_bw));
	json_object_set_new(j, "avg_dram_bw", json_real(m->dram_bw));
	return j;
}

/* accel cycles --topology FILE.csv [--config FILE.cfg] ...: SCALE-Sim's inputs, per layer. */
static int cycles_topology(int argc, char **argv, struct tf_cli *cli)
{
	static const struct option opts[] = {
	    TF_CLI_COMMON_OPTIONS,
	    {"topology", required_argument, NULL, 't'},
	    {"config", required_argument, NULL, 'c'},
	    {"gemm", no_argument, NULL, 'g'},
	    {"csv", no_argument, NULL, 'v'},
	    {"report-dir", required_argument, NULL, 'o'},
	    {"weight-double-buffer", no_argument, NULL, 'w'},
	    {NULL, 0, NULL, 0},
	};
	const char *cmd = "accel cycles", *topo = NULL, *cfgpath = NULL, *outdir = NULL;
	int gemm = 0, csv = 0, wdb = 0, opt;
	optind = 0;
	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (opt) {
		case 't':
			topo = optarg;
			break;
		case 'c':
			cfgpath = optarg;
			break;
		case 'g':
			gemm = 1;
			break;
		case 'v':
			csv = 1;
			break;
		case 'o':
			outdir = optarg;
			break;
		case 'w':
			wdb = 1;
			break;
		case 'h':
			printf(
			    "usage: tpuflow accel cycles --topology FILE.csv [--config FILE.cfg]\n"
			    "         [--gemm] [--weight-double-buffer] [--report-dir DIR]\n"
			    "         [--json|--csv]\n\n"
			    "Runs SCALE-Sim's inputs through tpuflow's compute and memory model:\n"
			    "a topology CSV (conv layers, or 'Layer, M, N, K' GEMMs: --gemm or a\n"
			    "header naming M, N, K) and a SCALE-Sim .cfg (array, SRAM sizes,\n"
			    "dataflow ws/os/is, InterfaceBandwidth USER with Bandwidth "
			    "words/cycle,\n"
			    "or CALC). Without --config: 128x128, ws, 1024/1024/512 kB, CALC.\n"
			    "Prints a per-layer table: total and stall cycles, utilization as\n"
			    "SCALE-Sim defines it, DRAM traffic.\n\n"
			    "  --report-dir DIR        also write SCALE-Sim's COMPUTE_REPORT.csv,\n"
			    "                          BANDWIDTH_REPORT.csv, "
			    "DETAILED_ACCESS_REPORT.csv\n"
			    "  --weight-double-buffer  add the ws cycles with each fold's weights\n"
			    "                          loaded while the previous fold computes\n"
			    "  --csv                   one CSV row per layer (all figures)\n"
			    "  --json                  the same as JSON\n");
			return TF_EXIT_OK;
		default:
			if (tf_cli_common_option(cli, opt, optarg))
				break;
			return tf_cli_usage_error(cmd, "unknown option");
		}
	}
	if (optind < argc)
		return tf_cli_usage_error(cmd, "unexpected argument '%s'", argv[optind]);
	if (!topo)
		return tf_cli_usage_error(cmd, "--topology FILE.csv is required");
	char err[512];
	struct tf_layersim_cfg cfg;
	tf_layersim_cfg_init(&cfg);
	if (cfgpath && tf_layersim_read_cfg(cfgpath, &cfg, err, sizeof err)) {
		fprintf(stderr, "tpuflow %s: %s\n", cmd, err);
		return TF_EXIT_CONFIG;
	}
	struct tf_layer *layers = NULL;
	size_t n = 0;
	if (tf_layersim_read_topology(topo, gemm, &layers, &n, err, sizeof err)) {
		fprintf(stderr, "tpuflow %s: %s\n", cmd, err);
		return TF_EXIT_DATAERR;
	}
	struct tf_layersim_report *rep = tf_xcalloc(n, sizeof *rep);
	int rc = TF_EXIT_OK;
	double t0 = tf_now_monotonic();
	for (size_t i = 0; i < n; i++) {
		if (tf_layersim_run(&cfg, &layers[i], &rep[i], err, sizeof err)) {
			fprintf(stderr, "tpuflow %s: %s: layer %zu: %s\n", cmd, topo, i, err);
			rc = TF_EXIT_DATAERR;
			goto out;
		}
	}
	double secs = tf_now_monotonic() - t0;
	if (outdir && write_reports(outdir, rep, n, err, sizeof err)) {
		fprintf(stderr, "tpuflow %s: %s\n", cmd, err);
		rc = TF_EXIT_FAILED;
		goto out;
	}
	uint64_t tot = 0, stall = 0, comp = 0, wdbc = 0;
	for (size_t i = 0; i < n; i++) {
		if (__builtin_add_overflow(tot, rep[i].total_cycles, &tot) ||
		    __builtin_add_overflow(stall, rep[i].stall_cycles, &stall) ||
		    __builtin_add_overflow(comp, rep[i].compute_cycles, &comp) ||
		    __builtin_add_overflow(wdbc, rep[i].wdb_cycles, &wdbc) || tot > INT64_MAX) {
			fprintf(stderr, "tpuflow %s: %s: the layers take more than 2^63 cycles in "
			                "all: simulate fewer or smaller layers\n",
			        cmd, topo);
			rc = TF_EXIT_DATAERR;
			goto out;
		}
	}
	if (cli->json) {
		json_t *j = json_object(), *arr = json_array();
		json_object_set_new(j, "topology", json_string(topo));
		json_object_set_new(j, "run_name", json_string(cfg.run_name));
		json_object_set_new(j, "array", json_sprintf("%dx%d", cfg.rows, cfg.cols));
		json_object_set_new(j, "dataflow", json_string(df_name(cfg.dataflow)));
		json_object_set_new(j, "bandwidth_mode",
		                    json_string(cfg.user_bandwidth ? "USER" : "CALC"));
		if (cfg.user_bandwidth)
			json_object_set_new(j, "bandwidth", json_integer(cfg.bandwidth));
		json_object_set_new(j, "sram_kb",
		                    json_pack("{s:i,s:i,s:i}", "ifmap", cfg.ifmap_kb, "filter",
		                              cfg.filter_kb, "ofmap", cfg.ofmap_kb));
		for (size_t i = 0; i < n; i++) {
			const struct tf_layersim_report *x = &rep[i];
			uint64_t M, N, K;
			tf_layer_mnk(&layers[i], &M, &N, &K);
			json_t *o = json_object();
			json_object_set_new(o, "layer", json_string(layers[i].name));
			json_object_set_new(o, "m", json_integer((json_int_t)M));
			json_object_set_new(o, "n", json_integer((json_int_t)N));
			json_object_set_new(o, "k", json_integer((json_int_t)K));
			json_object_set_new(o, "folds", json_integer((json_int_t)x->folds));
			json_object_set_new(o, "total_cycles",
			                    json_integer((json_int_t)x->total_cycles));
			json_object_set_new(o, "stall_cycles",
			                    json_integer((json_int_t)x->stall_cycles));
			json_object_set_new(o, "compute_cycles",
			                    json_integer((json_int_t)x->compute_cycles));
			if (wdb)
				json_object_set_new(o, "weight_double_buffer_cycles",
				                    json_integer((json_int_t)x->wdb_cycles));
			json_object_set_new(o, "overall_util_pct", json_real(x->overall_util));
			json_object_set_new(o, "mapping_efficiency_pct",
			                    json_real(x->mapping_efficiency));
			json_object_set_new(o, "compute_util_pct", json_real(x->compute_util));
			json_object_set_new(o, "ifmap", mem_json(&x->ifmap));
			json_object_set_new(o, "filter", mem_json(&x->filter));
			json_object_set_new(o, "ofmap", mem_json(&x->ofmap));
			json_array_append_new(arr, o);
		}
		json_object_set_new(j, "layers", arr);
		json_object_set_new(j, "total_cycles", json_integer((json_int_t)tot));
		json_object_set_new(j, "stall_cycles", json_integer((json_int_t)stall));
		json_object_set_new(j, "host_seconds", json_real(secs));
		tf_cli_print_json(stdout, j);
		json_decref(j);
	} else if (csv) {
		printf("layer,m,n,k,folds,total_cycles,stall_cycles,compute_cycles,%s"
		       "overall_util_pct,mapping_efficiency_pct,compute_util_pct,"
		       "ifmap_sram_reads,filter_sram_reads,ofmap_sram_writes,"
		       "ifmap_dram_reads,filter_dram_reads,ofmap_dram_writes,"
		       "ifmap_dram_bw,filter_dram_bw,ofmap_dram_bw\n",
		       wdb ? "weight_double_buffer_cycles," : "");
		for (size_t i = 0; i < n; i++) {
			const struct tf_layersim_report *x = &rep[i];
			uint64_t M, N, K;
			tf_layer_mnk(&layers[i], &M, &N, &K);
			printf("%s,%llu,%llu,%llu,%llu,%llu,%llu,%llu,", layers[i].name,
			       (unsigned long long)M, (unsigned long long)N, (unsigned long long)K,
			       (unsigned long long)x->folds, (unsigned long long)x->total_cycles,
			       (unsigned long long)x->stall_cycles,
			       (unsigned long long)x->compute_cycles);
			if (wdb)
				printf("%llu,", (unsigned long long)x->wdb_cycles);
			printf("%.6g,%.6g,%.6g,%llu,%llu,%llu,%llu,%llu,%llu,%.6g,%.6g,%.6g\n",
			       x->overall_util, x->mapping_efficiency, x->compute_util,
			       (unsigned long long)x->ifmap.sram_accesses,
			       (unsigned long long)x->filter.sram_accesses,
			       (unsigned long long)x->ofmap.sram_accesses,
			       (unsigned long long)x->ifmap.dram_accesses,
			       (unsigned long long)x->filter.dram_accesses,
			       (unsigned long long)x->ofmap.dram_accesses, x->ifmap.dram_bw,
			       x->filter.dram_bw, x->ofmap.dram_bw);
		}
	} else {
		printf("%s: %zu layers on %dx%d, %s, %s bandwidth", topo, n, cfg.rows, cfg.cols,
		       df_name(cfg.dataflow), cfg.user_bandwidth ? "USER" : "CALC");
		if (cfg.user_bandwidth)
			printf(" %u words/cycle", cfg.bandwidth);
		printf(", SRAM %u/%u/%u kB\n", cfg.ifmap_kb, cfg.filter_kb, cfg.ofmap_kb);
		printf("%-16s %12s %12s %7s %7s %7s %12s %12s %12s%s\n", "layer", "cycles",
		       "stalls", "util%", "map%", "comp%", "ifmap DRAM", "filter DRAM",
		       "ofmap DRAM", wdb ? "   ws+wdb cycles" : "");
		for (size_t i = 0; i < n; i++) {
			const struct tf_layersim_report *x = &rep[i];
			printf("%-16.16s %12llu %12llu %7.2f %7.2f %7.2f %12llu %12llu %12llu",
			       layers[i].name, (unsigned long long)x->total_cycles,
			       (unsigned long long)x->stall_cycles, x->overall_util,
			       x->mapping_efficiency, x->compute_util,
			       (unsigned long long)x->ifmap.dram_accesses,
			       (unsigned long long)x->filter.dram_accesses,
			       (unsigned long long)x->ofmap.dram_accesses);
			if (wdb)
				printf(" %16llu", (unsigned long long)x->wdb_cycles);
			printf("\n");
		}
		printf("total %llu cycles, %llu of them stalls (stall-free %llu)",
		       (unsigned long long)tot, (unsigned long long)stall,
		       (unsigned long long)comp);
		if (wdb)
			printf("; with weight double-buffering %llu", (unsigned long long)wdbc);
		printf("; simulated in %.3g s\n", secs);
	}
out:
	free(rep);
	free(layers);
	return rc;
}

static int cycles(int argc, char **argv, struct tf_cli *cli)
{
	static const struct option opts[] = {
	    TF_CLI_COMMON_OPTIONS,
	    {"m", required_argument, NULL, 'm'},
	    {"k", required_argument, NULL, 'k'},
	    {"n", required_argument, NULL, 'n'},
	    {"array", required_argument, NULL, 'r'},
	    {"dataflow", required_argument, NULL, 'd'},
	    {"mxus", required_argument, NULL, 'x'},
	    {NULL, 0, NULL, 0},
	};
	const char *cmd = "accel cycles";
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--topology") || !strncmp(argv[i], "--topology=", 11))
			return cycles_topology(argc, argv, cli);
	unsigned long long dim[3] = {0, 0, 0}, mxus = 1;
	int have[3] = {0, 0, 0}, R = 128, C = 128, opt;
	enum tf_mxu_dataflow df = TF_MXU_WS;
	optind = 0;
	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		int idx = opt == 'm' ? 0 : opt == 'k' ? 1 : opt == 'n' ? 2 : -1;
		if (idx >= 0) {
			if (parse_count(optarg, 1ull << 40, &dim[idx]))
				return tf_cli_usage_error(cmd,
				                          "--%c '%s' must be a non-negative "
				                          "integer",
				                          opt, optarg);
			have[idx] = 1;
			continue;
		}
		switch (opt) {
		case 'r':
			if (parse_array(optarg, &R, &C))
				return tf_cli_usage_error(cmd,
				                          "--array '%s' must be RxC, e.g. "
				                          "128x128",
				                          optarg);
			break;
		case 'd':
			if (!strcmp(optarg, "ws"))
				df = TF_MXU_WS;
			else if (!strcmp(optarg, "os"))
				df = TF_MXU_OS;
			else if (!strcmp(optarg, "is"))
				df = TF_MXU_IS;
			else
				return tf_cli_usage_error(
				    cmd, "--dataflow '%s' must be ws, os or is", optarg);
			break;
		case 'x':
			if (parse_count(optarg, 1024, &mxus) || mxus < 1)
				return tf_cli_usage_error(cmd, "--mxus '%s' must be 1..1024",
				                          optarg);
			break;
		case 'h':
			printf(
			    "usage: tpuflow accel cycles --m M --k K --n N [--array RxC]\n"
			    "         [--dataflow ws|os|is] [--mxus N] [--json]\n"
			    "       tpuflow accel cycles --topology FILE.csv [--config FILE.cfg] "
			    "...\n"
			    "         (SCALE-Sim's inputs with the memory model: --topology "
			    "--help)\n\n"
			    "SCALE-Sim's analytical cycle model for C[MxN] = A[MxK] . B[KxN].\n"
			    "ws (default): rows <- K, cols <- N, T = M, 2R + C + T - 2 cycles a "
			    "fold;\n"
			    "os: rows <- M, cols <- N, T = K, R + C + T - 2 cycles a fold;\n"
			    "is: rows <- K, cols <- M, T = N, 2R + C + T - 2 cycles a fold.\n"
			    "scalesim_total is folds x cycles per fold - 1, the figure SCALE-Sim\n"
			    "prints; core_cycles spreads the folds over --mxus arrays.\n");
			return TF_EXIT_OK;
		default:
			if (tf_cli_common_option(cli, opt, optarg))
				break;
			return tf_cli_usage_error(cmd, "unknown option");
		}
	}
	if (optind < argc)
		return tf_cli_usage_error(cmd, "unexpected argument '%s'", argv[optind]);
	if (!have[0] || !have[1] || !have[2])
		return tf_cli_usage_error(cmd, "--m, --k and --n are all required");
	struct tf_mxu_model m;
	int mrc = tf_mxu_model(df, dim[0], dim[1], dim[2], R, C, (int)mxus, &m);
	if (mrc == -EOVERFLOW) {
		fprintf(stderr,
		        "tpuflow %s: %llu x %llu . %llu x %llu on %dx%d takes more than 2^63 cycles: "
		        "give smaller sizes\n",
		        cmd, dim[0], dim[1], dim[1], dim[2], R, C);
		return TF_EXIT_DATAERR;
	}
	if (mrc)
		return tf_cli_usage_error(cmd, "invalid model parameters");
	const char *dfname = df_name(df);
	if (cli->json) {
		json_t *j = json_object();
		json_object_set_new(j, "dataflow", json_string(dfname));
		json_object_set_new(j, "m", json_integer((json_int_t)dim[0]));
		json_object_set_new(j, "k", json_integer((json_int_t)dim[1]));
		json_object_set_new(j, "n", json_integer((json_int_t)dim[2]));
		json_object_set_new(j, "rows", json_integer(R));
		json_object_set_new(j, "cols", json_integer(C));
		json_object_set_new(j, "mxus", json_integer((json_int_t)mxus));
		json_object_set_new(j, "folds", json_integer((json_int_t)m.folds));
		json_object_set_new(j, "cycles_per_fold",
		                    json_integer((json_int_t)m.cycles_per_fold));
		json_object_set_new(j, "cycles", json_integer((json_int_t)m.cycles));
		json_object_set_new(j, "scalesim_total",
		                    json_integer((json_int_t)m.scalesim_total));
		json_object_set_new(j, "core_cycles", json_integer((json_int_t)m.core_cycles));
		json_object_set_new(j, "mapping_efficiency", json_real(m.mapping_efficiency));
		json_object_set_new(j, "utilization", json_real(m.utilization));
		json_object_set_new(j, "core_utilization", json_real(m.core_utilization));
		json_object_set_new(j, "scalesim_overall_util", json_real(m.scalesim_utilization));
		json_object_set_new(j, "scalesim_compute_util", json_real(m.compute_utilization));
		tf_cli_print_json(stdout, j);
		json_decref(j);
	} else {
		printf("%s dataflow, %llu x %llu . %llu x %llu on %dx%d\n", dfname, dim[0], dim[1],
		       dim[1], dim[2], R, C);
		printf("folds %llu x %llu cycles = %llu cycles (SCALE-Sim total %llu)\n",
		       (unsigned long long)m.folds, (unsigned long long)m.cycles_per_fold,
		       (unsigned long long)m.cycles, (unsigned long long)m.scalesim_total);
		printf("on %llu MXUs: %llu cycles, utilization %.4f\n", mxus,
		       (unsigned long long)m.core_cycles, m.core_utilization);
		printf("mapping efficiency %.4f, utilization %.4f\n", m.mapping_efficiency,
		       m.utilization);
		printf("SCALE-Sim's: overall util %.4f (over its total), compute util %.4f (per "
		       "fold)\n",
		       m.scalesim_utilization, m.compute_utilization);
	}
	return TF_EXIT_OK;
}

/* HBM in the unit Google states it in: "32 GiB" (v2-v4, v5p) or "16 GB" (v5e, v6e). */
static void hbm_text(const struct tf_tpu_gen *g, double bytes, char *buf, size_t len)
{
	if (g->hbm_gib)
		snprintf(buf, len, "%g GiB", bytes / (1024.0 * 1024.0 * 1024.0));
	else
		snprintf(buf, len, "%g GB", bytes / 1e9);
}

/* "x, z" for the wrapped dimensions, "none" when the slice is a mesh. */
static void wrap_text(const struct tf_tpu_slice *s, char *buf, size_t len)
{
	static const char axis[3] = {'x', 'y', 'z'};
	size_t off = 0;
	buf[0] = '\0';
	for (int i = 0; i < s->ndims; i++)
		if (s->wrap[i])
			off += (size_t)snprintf(buf + off, len - off, "%s%c", off ? ", " : "",
			                        axis[i]);
	if (!off)
		snprintf(buf, len, "none");
}

static json_t *gen_json(const struct tf_tpu_gen *g)
{
	json_t *j = json_object();
	json_object_set_new(j, "name", json_string(g->name));
	json_object_set_new(j, "type_prefix", json_string(g->type_prefix));
	json_object_set_new(j, "mxu", json_sprintf("%dx%d", g->mxu_rows, g->mxu_cols));
	json_object_set_new(j, "mxus_per_core", json_integer(g->mxus_per_core));
	json_object_set_new(j, "cores_per_chip", json_integer(g->cores_per_chip));
	json_object_set_new(j, "torus_dims", json_integer(g->torus_dims));
	json_object_set_new(j, "clock_hz", json_real(g->clock_hz));
	json_object_set_new(j, "peak_flops_per_chip", json_real(g->peak_flops));
	json_object_set_new(j, "mxu_peak_flops_per_chip", json_real(tf_tpu_chip_peak(g)));
	json_object_set_new(j, "hbm_bytes_per_chip", json_real(g->hbm_bytes));
	json_object_set_new(j, "hbm_unit", json_string(g->hbm_gib ? "GiB" : "GB"));
	json_object_set_new(j, "chips_per_host",
	                    json_integer(g->host_dims[0] * g->host_dims[1] * g->host_dims[2]));
	json_object_set_new(j, "pod_chips", json_integer(g->pod_chips));
	json_object_set_new(j, "source", json_string(g->source));
	json_object_set_new(j, "hbm_bytes_per_second", json_real(g->hbm_bw));
	json_object_set_new(j, "ici_link_bytes_per_second", json_real(g->ici_bw));
	json_object_set_new(j, "max_chips", json_integer(g->max_chips)); /* largest slice */
	json_object_set_new(j, "type_counts",
	                    json_string(g->type_counts_cores ? "cores" : "chips"));
	return j;
}

static int slices(int argc, char **argv, struct tf_cli *cli)
{
	static const struct option opts[] = {TF_CLI_COMMON_OPTIONS, {NULL, 0, NULL, 0}};
	const char *cmd = "accel slices";
	int opt;
	optind = 0;
	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		if (opt == 'h') {
			printf("usage: tpuflow accel slices [--json]\n\n"
			       "Lists the TPU generations and the slice types each offers, with "
			       "their\n"
			       "topologies. Any slice also takes an explicit topology: "
			       "GEN:AxB[xC].\n");
			return TF_EXIT_OK;
		}
		if (!tf_cli_common_option(cli, opt, optarg))
			return tf_cli_usage_error(cmd, "unknown option");
	}
	if (optind < argc)
		return tf_cli_usage_error(cmd, "unexpected argument '%s'", argv[optind]);
	size_t n;
	const struct tf_tpu_gen *g = tf_tpu_gens(&n);
	json_t *arr = cli->json ? json_array() : NULL;
	for (size_t i = 0; i < n; i++) {
		json_t *types = cli->json ? json_array() : NULL;
		if (!cli->json) {
			char hbm[32];
			hbm_text(&g[i], g[i].hbm_bytes, hbm, sizeof hbm);
			printf("%-4s %dx%d MXU x%d per core, %d core%s/chip, %dD, %g "
			       "TFLOPS/chip, %s HBM/chip, %d chips/host, largest slice %d "
			       "chips\n     ",
			       g[i].name, g[i].mxu_rows, g[i].mxu_cols, g[i].mxus_per_core,
			       g[i].cores_per_chip, g[i].cores_per_chip > 1 ? "s" : "",
			       g[i].torus_dims, g[i].peak_flops / 1e12, hbm,
			       g[i].host_dims[0] * g[i].host_dims[1] * g[i].host_dims[2],
			       g[i].max_chips);
		}
		for (size_t t = 0; g[i].types[t]; t++) {
			struct tf_tpu_slice s;
			char err[256];
			if (tf_tpu_slice_parse(g[i].types[t], &s, err, sizeof err)) {
				fprintf(stderr, "tpuflow %s: internal: %s\n", cmd, err);
				json_decref(types);
				json_decref(arr);
				return TF_EXIT_SOFTWARE;
			}
			if (cli->json) {
				json_t *o = json_object();
				json_object_set_new(o, "name", json_string(s.name));
				json_object_set_new(o, "topology", json_string(s.topology));
				json_object_set_new(o, "chips", json_integer(s.chips));
				json_object_set_new(o, "cores", json_integer(s.cores));
				json_object_set_new(o, "hosts", json_integer(s.hosts));
				json_array_append_new(types, o);
			} else {
				printf("%s%s (%s)", t ? ", " : "", s.name, s.topology);
			}
		}
		if (cli->json) {
			json_t *j = gen_json(&g[i]);
			json_object_set_new(j, "types", types);
			json_array_append_new(arr, j);
		} else {
			printf("\n");
		}
	}
	if (cli->json) {
		json_t *j = json_object();
		json_object_set_new(j, "generations", arr);
		tf_cli_print_json(stdout, j);
		json_decref(j);
	}
	return TF_EXIT_OK;
}

static int info(int argc, char **argv, struct tf_cli *cli)
{
	static const struct option opts[] = {TF_CLI_COMMON_OPTIONS, {NULL, 0, NULL, 0}};
	const char *cmd = "accel info";
	int opt;
	optind = 0;
	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		if (opt == 'h') {
			printf(
			    "usage: tpuflow accel info SLICE [--json]\n\n"
			    "Describes a slice: an accelerator type (v4-8, v4-32, v5p-8,\n"
			    "v5litepod-16, v6e-4) or a topology (v4:2x2x4): chips, TensorCores,\n"
			    "MXUs, peak FLOP/s, HBM, torus, and the modelled all-reduce time.\n");
			return TF_EXIT_OK;
		}
		if (!tf_cli_common_option(cli, opt, optarg))
			return tf_cli_usage_error(cmd, "unknown option");
	}
	if (optind != argc - 1)
		return tf_cli_usage_error(cmd, "give exactly one SLICE, e.g. v4-8 or v4:2x2x4");
	struct tf_tpu_slice s;
	char err[512];
	if (tf_tpu_slice_parse(argv[optind], &s, err, sizeof err)) {
		fprintf(stderr, "tpuflow %s: %s\n", cmd, err);
		return TF_EXIT_USAGE;
	}
	const struct tf_tpu_gen *g = s.gen;
	int mxus = s.cores * g->mxus_per_core;
	double peak = g->peak_flops * s.chips;
	char hbm[32], hbm_core[32], wraps[16];
	hbm_text(g, g->hbm_bytes * s.chips, hbm, sizeof hbm);
	hbm_text(g, g->hbm_bytes / g->cores_per_chip, hbm_core, sizeof hbm_core);
	wrap_text(&s, wraps, sizeof wraps);
	double ar = tf_slice_allreduce_seconds(&s, 1 << 20);
	if (cli->json) {
		json_t *j = json_object();
		json_object_set_new(j, "name", json_string(s.name));
		json_object_set_new(j, "generation", json_string(g->name));
		json_object_set_new(j, "topology", json_string(s.topology));
		json_object_set_new(j, "torus_dims", json_integer(s.ndims));
		json_object_set_new(j, "chips", json_integer(s.chips));
		json_object_set_new(j, "cores", json_integer(s.cores));
		json_object_set_new(j, "replicas", json_integer(s.cores));
		json_object_set_new(j, "mxus", json_integer(mxus));
		json_object_set_new(j, "mxu", json_sprintf("%dx%d", g->mxu_rows, g->mxu_cols));
		json_object_set_new(j, "clock_hz", json_real(g->clock_hz));
		json_object_set_new(j, "peak_flops", json_real(peak));
		json_object_set_new(j, "hbm_bytes", json_real(g->hbm_bytes * s.chips));
		json_object_set_new(j, "hbm_bytes_per_core",
		                    json_real(g->hbm_bytes / g->cores_per_chip));
		json_object_set_new(j, "hbm_unit", json_string(g->hbm_gib ? "GiB" : "GB"));
		json_object_set_new(j, "ici_link_bytes_per_second", json_real(g->ici_bw));
		json_t *wr = json_array(), *hosts = json_array();
		for (int i = 0; i < s.ndims; i++)
			json_array_append_new(wr, json_boolean(s.wrap[i]));
		for (int c = 0; c < s.chips; c++)
			json_array_append_new(hosts, json_integer(tf_tpu_chip_host(&s, c)));
		json_object_set_new(j, "wrap", wr);
		json_object_set_new(j, "hosts", json_integer(s.hosts));
		json_object_set_new(j, "chips_per_host", json_integer(s.chips_per_host));
		json_object_set_new(j, "chip_host", hosts);
		json_object_set_new(j, "allreduce_1mib_seconds", json_real(ar));
		tf_cli_print_json(stdout, j);
		json_decref(j);
	} else {
		printf("%s: %s, topology %s (%dD; wrap-around links: %s)\n", s.name, g->name,
		       s.topology, s.ndims, wraps);
		printf("hosts %d, %d chips each", s.hosts, s.chips_per_host);
		if (s.chips <= 64) {
			printf("; host of each chip (x fastest):");
			for (int c = 0; c < s.chips; c++)
				printf(" %d", tf_tpu_chip_host(&s, c));
		}
		printf("\n");
		printf("chips %d, TensorCores %d (replicas), MXUs %d of %dx%d at %.0f MHz\n",
		       s.chips, s.cores, mxus, g->mxu_rows, g->mxu_cols, g->clock_hz / 1e6);
		printf("peak %g TFLOPS bf16 (published), HBM %s (%s per core)\n", peak / 1e12, hbm,
		       hbm_core);
		printf("ICI %.0f GB/s per link; all-reduce of 1 MiB: %.1f us (model)\n",
		       g->ici_bw / 1e9, ar * 1e6);
	}
	return TF_EXIT_OK;
}

int cmd_accel(int argc, char **argv, struct tf_cli *cli)
{
	static const struct {
		const char *name;
		int (*fn)(int, char **, struct tf_cli *);
	} subs[] = {{"matmul", matmul}, {"cycles", cycles}, {"slices", slices}, {"info", info}};
	if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		FILE *f = argc < 2 ? stderr : stdout;
		fprintf(f, "usage: tpuflow accel matmul|cycles|slices|info [ARGS]\n\n"
		           "  matmul   C = A . B from .npy files on the emulated MXU\n"
		           "  cycles   SCALE-Sim's analytical cycle model for one GEMM\n"
		           "  slices   TPU generations and their slice types\n"
		           "  info     describe one slice (v4-8, v5litepod-16, v4:2x2x4)\n\n"
		           "'tpuflow accel SUBCOMMAND --help' describes one.\n");
		return argc < 2 ? TF_EXIT_USAGE : TF_EXIT_OK;
	}
	for (size_t i = 0; i < TF_ARRAY_LEN(subs); i++)
		if (!strcmp(argv[1], subs[i].name))
			return subs[i].fn(argc - 1, argv + 1, cli);
	return tf_cli_usage_error("accel", "unknown subcommand '%s' (matmul, cycles, slices, info)",
	                          argv[1]);
}

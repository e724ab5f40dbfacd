/* test_untrusted.c — sizes read from files are checked before they size anything: crafted
 * .npy shapes, dataset manifests, bundle signatures, safetensors headers, IDX headers and
 * CSV headers are refused with a clear error (exit 65 from the CLI), never a heap overflow or
 * an out-of-memory abort. A small CSV dataset and a bundle trained on nothing (initial
 * weights) are made in the test's temp directory; each case damages a copy. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "accel/mxu.h"
#include "common/common.h"
#include "ml/bundle.h"
#include "ml/dataset.h"
#include "ml/input.h"
#include "ml/metrics.h"
#include "ml/npy.h"
#include "ml/source.h"
#include "ml/steps.h"
#include "storage/objstore.h"
#include "tests/testutil.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include <zlib.h>

/* ---- fixtures ---- */

/* Writes len bytes to path; fails the test on error. */
static void write_bytes(const char *path, const void *data, size_t len)
{
	FILE *f = fopen(path, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(data, 1, len, f), len);
	assert_int_equal(fclose(f), 0);
}

/* A .npy file with the given descr and shape text and `data` bytes of zeros after it. */
static void write_npy(const char *path, const char *descr, const char *shape, size_t data)
{
	char hdr[256];
	int n = snprintf(hdr, sizeof hdr, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
	                 descr, shape);
	size_t total = 10 + (size_t)n + 1, pad = (64 - total % 64) % 64;
	size_t hl = (size_t)n + pad + 1, len = 10 + hl + data;
	unsigned char *b = calloc(1, len);
	memcpy(b, "\x93NUMPY\x01\x00", 8);
	b[8] = (unsigned char)(hl & 0xff);
	b[9] = (unsigned char)(hl >> 8);
	memcpy(b + 10, hdr, (size_t)n);
	memset(b + 10 + n, ' ', pad);
	b[10 + n + pad] = '\n';
	write_bytes(path, b, len);
	free(b);
}

/* Makes store/ds (a 4-feature, 3-class CSV dataset) and the bundle store/model/ of an
 * untrained 4-8-3 MLP, once per test binary. */
static int setup(void **state)
{
	(void)state;
	FILE *f = fopen("t.csv", "w");
	if (!f)
		return -1;
	fputs("a,b,c,d,label\n", f);
	for (int i = 0; i < 40; i++)
		fprintf(f, "%d.5,%d,-%d,%d,%d\n", i, i % 7, i % 3, i * 2, i % 3);
	fclose(f);
	struct tf_objstore *s;
	char err[512], *key = NULL;
	if (tf_objstore_open("file://store", &s, err, sizeof err))
		return -1;
	struct tf_prep_opts o = {.source = "csv", .path = "t.csv", .shards = 2};
	struct tf_dataset *d = NULL;
	int rc = tf_dataset_prep(s, "ds/", &o, &key, NULL, err, sizeof err);
	if (!rc)
		rc = tf_dataset_open(s, key, &d, err, sizeof err);
	struct tf_mlp m;
	size_t hidden[1] = {8};
	struct tf_mxu_cfg mxu;
	tf_mxu_cfg_init(&mxu);
	if (!rc)
		rc = tf_mlp_init(&m, d->dim, hidden, 1, d->num_classes, 0);
	if (!rc) {
		tf_mlp_init_params(&m, 1);
		rc = tf_bundle_export(s, "model/", &m, d, &mxu, NULL, err, sizeof err);
		tf_mlp_release(&m);
	}
	if (rc)
		fprintf(stderr, "setup: %s\n", err);
	tf_dataset_free(d);
	free(key);
	tf_objstore_free(s);
	return rc ? -1 : 0;
}

static struct tf_bundle *load_bundle(const char *dir)
{
	struct tf_objstore *s;
	struct tf_bundle *b = NULL;
	char err[512];
	assert_int_equal(tf_objstore_open(dir, &s, err, sizeof err), 0);
	int rc = tf_bundle_load(s, "", &b, err, sizeof err);
	if (rc)
		fprintf(stderr, "bundle: %s\n", err);
	assert_int_equal(rc, 0);
	tf_objstore_free(s);
	return b;
}

/* Copies the bundle into dir and applies edit to its signature (may be NULL); if st_edit is
 * not NULL, the safetensors header JSON is replaced by its result and the signature's SHA-256
 * updated, as someone crafting a bundle would. */
static void craft_bundle(const char *dir, void (*edit)(json_t *sig),
                         void (*st_edit)(json_t *hdr))
{
	char *cmd = tf_xasprintf("rm -rf %s && cp -r store/model %s", dir, dir);
	assert_int_equal(system(cmd), 0);
	free(cmd);
	char *spath = tf_xasprintf("%s/signature.json", dir);
	char *mpath = tf_xasprintf("%s/model.safetensors", dir);
	json_t *sig = json_load_file(spath, 0, NULL);
	assert_non_null(sig);
	if (edit)
		edit(sig);
	if (st_edit) {
		char *m;
		size_t ml;
		assert_int_equal(tf_read_file(mpath, 1 << 24, &m, &ml), 0);
		uint64_t hl = 0;
		for (int i = 0; i < 8; i++)
			hl |= (uint64_t)(unsigned char)m[i] << (8 * i);
		json_t *hdr = json_loadb(m + 8, hl, 0, NULL);
		assert_non_null(hdr);
		st_edit(hdr);
		char *text = json_dumps(hdr, JSON_COMPACT | JSON_SORT_KEYS);
		size_t tl = strlen(text), nl = (tl + 7) / 8 * 8, body = ml - 8 - hl;
		unsigned char *out = malloc(8 + nl + body);
		for (int i = 0; i < 8; i++)
			out[i] = (unsigned char)((uint64_t)nl >> (8 * i));
		memcpy(out + 8, text, tl);
		memset(out + 8 + tl, ' ', nl - tl);
		memcpy(out + 8 + nl, m + 8 + hl, body);
		write_bytes(mpath, out, 8 + nl + body);
		unsigned char md[32];
		char hex[65];
		EVP_Digest(out, 8 + nl + body, md, NULL, EVP_sha256(), NULL);
		for (int i = 0; i < 32; i++)
			sprintf(hex + 2 * i, "%02x", md[i]);
		json_object_set_new(json_object_get(json_object_get(sig, "checksums"),
		                                    "model.safetensors"),
		                    "sha256", json_string(hex));
		free(out);
		free(text);
		free(m);
		json_decref(hdr);
	}
	assert_int_equal(json_dump_file(sig, spath, JSON_INDENT(1)), 0);
	json_decref(sig);
	free(spath);
	free(mpath);
}

/* Copies the dataset to store/<name>/ with edit applied to its manifest. */
static void craft_dataset(const char *name, void (*edit)(json_t *manifest))
{
	char *cmd = tf_xasprintf("rm -rf store/%s && cp -r store/ds store/%s", name, name);
	assert_int_equal(system(cmd), 0);
	free(cmd);
	char *path = tf_xasprintf("store/%s/manifest.json", name);
	json_t *m = json_load_file(path, 0, NULL);
	assert_non_null(m);
	edit(m);
	assert_int_equal(json_dump_file(m, path, JSON_INDENT(1)), 0);
	json_decref(m);
	free(path);
}

/* ---- .npy: the shapes of the report, and the rest of the header ---- */

static void test_untrusted_npy_shape_products_that_wrap_are_refused(void **state)
{
	(void)state;
	static const struct {
		const char *descr, *shape;
	} cases[] = {
	    {"|u1", "(4611686018427387904, 784)"}, /* 2^62 x 784 wraps to 0 */
	    {"<f4", "(1152921504606846976, 784)"}, /* 2^60 x 784 x 4 bytes wraps */
	    {"|u1", "(4611686018427387904, 28, 28)"},
	    {"|u1", "(18446744073709551616, 4)"}, /* 2^64: does not even fit */
	    {"|u1", "(-1, 4)"},
	    {"<f8", "(3074457345618258603, 6)"}, /* x 6 x 8 wraps to a small number */
	};
	struct tf_bundle *b = load_bundle("store/model");
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		write_npy("x.npy", cases[i].descr, cases[i].shape, 4);
		struct tf_npy a;
		char err[512];
		assert_int_equal(tf_npy_read("x.npy", &a, err, sizeof err), -EBADMSG);
		assert_non_null(strstr(err, "x.npy"));
		/* predict's whole input path */
		float *probs = NULL;
		size_t n = 0;
		assert_int_equal(tf_bundle_predict_npy(b, "x.npy", 0, 1, &probs, &n, err, sizeof err),
		                 -EBADMSG);
		assert_null(probs);
	}
	/* the CLI: a data error (65), not a crash */
	write_npy("x.npy", "|u1", "(4611686018427387904, 784)", 4);
	char *err;
	const char *args[] = {"predict", "--model", "store/model", "--input", "x.npy", NULL};
	assert_int_equal(tf_test_cli(args, NULL, &err), 65);
	assert_non_null(strstr(err, "shape"));
	free(err);
	/* a well-formed file still works: 3 rows of the model's 4 features */
	write_npy("x.npy", "<f4", "(3, 4)", 3 * 4 * 4);
	float *probs = NULL;
	size_t n = 0;
	char e2[512];
	assert_int_equal(tf_bundle_predict_npy(b, "x.npy", 0, 1, &probs, &n, e2, sizeof e2), 0);
	assert_int_equal(n, 3);
	free(probs);
	/* and reads back exactly what was written (the header's padding is not data) */
	float vals[6] = {1.5f, -2, 3, 4.25f, 5, 6};
	assert_int_equal(tf_npy_write_f32("w.npy", vals, 2, 3), 0);
	struct tf_npy w;
	assert_int_equal(tf_npy_read("w.npy", &w, e2, sizeof e2), 0);
	assert_int_equal(w.count, 6);
	assert_memory_equal(w.data, vals, sizeof vals);
	tf_npy_release(&w);
	/* rows x dim must match the model: (4, 3) has 12 values but rows of 3 */
	write_npy("x.npy", "<f4", "(4, 3)", 4 * 3 * 4);
	assert_int_equal(tf_bundle_predict_npy(b, "x.npy", 0, 1, &probs, &n, e2, sizeof e2),
	                 -EBADMSG);
	tf_bundle_free(b);
}

/* ---- bundle signatures and safetensors headers ---- */

static void sig_huge_layer(json_t *sig)
{
	json_array_set_new(json_object_get(sig, "layers"), 1, json_integer((json_int_t)1 << 40));
}

static void sig_negative_layer(json_t *sig)
{
	json_array_set_new(json_object_get(sig, "layers"), 1, json_integer(-8));
}

static void sig_wide_layers(json_t *sig)
{
	/* each width within bounds, the product far beyond them */
	json_t *l = json_array();
	json_array_append_new(l, json_integer(4));
	for (int i = 0; i < 14; i++)
		json_array_append_new(l, json_integer(65536));
	json_array_append_new(l, json_integer(3));
	json_object_set_new(sig, "layers", l);
}

static void sig_huge_mxu(json_t *sig)
{
	json_object_set_new(json_object_get(sig, "numerics"), "mxu_rows",
	                    json_integer((json_int_t)1 << 33));
}

static void st_bias_f16(json_t *hdr)
{
	json_object_set_new(json_object_get(hdr, "dense_0/bias"), "dtype", json_string("F16"));
}

static void st_kernel_shape_swapped(json_t *hdr)
{
	json_object_set_new(json_object_get(hdr, "dense_0/kernel"), "shape",
	                    json_pack("[i,i]", 8, 4));
}

static void st_bias_offsets(json_t *hdr)
{
	json_t *o = json_object_get(json_object_get(hdr, "dense_1/bias"), "data_offsets");
	json_array_set_new(o, 1, json_integer(json_integer_value(json_array_get(o, 1)) + 4));
}

static void st_extra_tensor(json_t *hdr)
{
	json_object_set_new(hdr, "dense_9/kernel",
	                    json_pack("{s:s, s:[i], s:[i,i]}", "dtype", "F32", "shape", 1,
	                              "data_offsets", 0, 4));
}

static void test_untrusted_bundle_sizes_are_checked(void **state)
{
	(void)state;
	static const struct {
		void (*sig)(json_t *);
		void (*st)(json_t *);
		const char *says;
	} cases[] = {
	    {sig_huge_layer, NULL, "width"},
	    {sig_negative_layer, NULL, "width"},
	    {sig_wide_layers, NULL, "too large"},
	    {sig_huge_mxu, NULL, "mxu_rows"},
	    {NULL, st_bias_f16, "dense_0/bias"},
	    {NULL, st_kernel_shape_swapped, "dense_0/kernel"},
	    {NULL, st_bias_offsets, "dense_1/bias"},
	    {NULL, st_extra_tensor, "does not know"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		craft_bundle("bad", cases[i].sig, cases[i].st);
		struct tf_objstore *s;
		struct tf_bundle *b = NULL;
		char err[512];
		assert_int_equal(tf_objstore_open("bad", &s, err, sizeof err), 0);
		int rc = tf_bundle_load(s, "", &b, err, sizeof err);
		if (rc != -EBADMSG || !strstr(err, cases[i].says))
			fprintf(stderr, "case %zu: rc %d: %s\n", i, rc, err);
		assert_int_equal(rc, -EBADMSG);
		assert_non_null(strstr(err, cases[i].says));
		assert_null(b);
		tf_objstore_free(s);
	}
	/* the CLI: a signature layer of 2^40 is exit 65, not an out-of-memory abort (134) */
	craft_bundle("bad", sig_huge_layer, NULL);
	write_npy("x.npy", "<f4", "(1, 4)", 16);
	char *err;
	const char *args[] = {"predict", "--model", "bad", "--input", "x.npy", NULL};
	assert_int_equal(tf_test_cli(args, NULL, &err), 65);
	free(err);
}

/* ---- dataset manifests ---- */

static void man_huge_examples(json_t *m)
{
	json_t *sh = json_array_get(
	    json_object_get(json_object_get(json_object_get(m, "splits"), "test"), "shards"), 0);
	json_object_set_new(sh, "examples", json_integer(1000000000000000000LL));
}

static void man_huge_examples_and_bytes(json_t *m)
{
	/* consistent with each other, but not with the shard on disk */
	json_t *sp = json_object_get(m, "splits");
	for (int k = 0; k < 2; k++) {
		json_t *sh = json_array_get(
		    json_object_get(json_object_get(sp, k ? "train" : "test"), "shards"), 0);
		json_object_set_new(sh, "examples", json_integer(1000000000LL));
		json_object_set_new(sh, "bytes", json_integer(1000000000000000000LL));
	}
}

static void man_huge_dim(json_t *m)
{
	json_object_set_new(m, "input_dim", json_integer((json_int_t)1 << 40));
}

static void man_three_classes_to_two(json_t *m)
{
	json_object_set_new(m, "num_classes", json_integer(2));
	json_array_remove(json_object_get(m, "class_names"), 2);
}

static void test_untrusted_dataset_manifest_counts_are_checked(void **state)
{
	(void)state;
	struct tf_objstore *s;
	char err[512];
	assert_int_equal(tf_objstore_open("file://store", &s, err, sizeof err), 0);
	craft_dataset("huge", man_huge_examples);
	struct tf_dataset *d = NULL;
	assert_int_equal(tf_dataset_open(s, "huge/manifest.json", &d, err, sizeof err), -EBADMSG);
	assert_non_null(strstr(err, "claims"));
	/* "run data prep first" fits a manifest that is not there, not a store that is down */
	assert_int_equal(tf_dataset_open(s, "none/manifest.json", &d, err, sizeof err), -ENOENT);
	assert_non_null(strstr(err, "run data prep first"));
	struct tf_objstore *down = NULL;
	struct tf_objstore_opts o = {.endpoint = "http://127.0.0.1:1", .access_key = "a",
	                             .secret_key = "b", .max_attempts = 1, .retry_budget = 1};
	assert_int_equal(tf_objstore_open_opts("s3://bucket/p", &o, &down, err, sizeof err), 0);
	assert_int_not_equal(tf_dataset_open(down, "x/manifest.json", &d, err, sizeof err), 0);
	assert_null(strstr(err, "run data prep first"));
	tf_objstore_free(down);
	craft_dataset("huge2", man_huge_examples_and_bytes);
	assert_int_equal(tf_dataset_open(s, "huge2/manifest.json", &d, err, sizeof err), 0);
	float *x = NULL;
	int32_t *y = NULL;
	size_t n;
	assert_int_equal(
	    tf_input_load_split(s, d, TF_SPLIT_TEST, &x, &y, NULL, &n, NULL, err, sizeof err), -EBADMSG);
	assert_non_null(strstr(err, "the manifest says"));
	struct tf_input *in = NULL;
	struct tf_input_opts io = {.split = TF_SPLIT_TRAIN, .batch = 4};
	assert_int_equal(tf_input_open(s, d, &io, &in, err, sizeof err), -EBADMSG);
	tf_dataset_free(d);
	craft_dataset("dim", man_huge_dim);
	assert_int_equal(tf_dataset_open(s, "dim/manifest.json", &d, err, sizeof err), -EBADMSG);
	tf_objstore_free(s);

	/* the CLI and the pipeline's steps: exit 65 / a failed step, never an abort */
	char *e;
	const char *eval[] = {"eval", "--model", "store/model", "--store", "file://store",
	                      "--dataset", "huge/manifest.json", NULL};
	assert_int_equal(tf_test_cli(eval, NULL, &e), 65);
	free(e);
	const char *eval2[] = {"eval", "--model", "store/model", "--store", "file://store",
	                       "--dataset", "huge2/manifest.json", NULL};
	assert_int_equal(tf_test_cli(eval2, NULL, &e), 65);
	free(e);
	const char *train[] = {"train", "--store", "file://store", "--dataset",
	                       "huge2/manifest.json", "--epochs", "1", "--batch", "8",
	                       "--no-ckpt", NULL};
	assert_int_equal(tf_test_cli(train, NULL, &e), 65);
	free(e);
	assert_int_equal(tf_objstore_open("file://store", &s, err, sizeof err), 0);
	json_t *with = json_pack("{s:s, s:s}", "model", "model/", "dataset", "huge/manifest.json");
	json_t *outputs = json_object(), *metrics = json_object();
	struct tf_ml_ctx ctx = {.store = s, .workdir = "."};
	assert_int_equal(tf_ml_evaluate_step(with, &ctx, outputs, metrics, err, sizeof err),
	                 -EBADMSG);
	json_decref(with);
	json_decref(outputs);
	json_decref(metrics);
	tf_objstore_free(s);
}

/* eval refuses a dataset whose class count differs from the model's */
static void test_untrusted_eval_refuses_other_class_count(void **state)
{
	(void)state;
	craft_dataset("two", man_three_classes_to_two);
	char *e;
	const char *eval[] = {"eval", "--model", "store/model", "--store", "file://store",
	                      "--dataset", "two/manifest.json", NULL};
	assert_int_equal(tf_test_cli(eval, NULL, &e), 64);
	assert_non_null(strstr(e, "3 classes"));
	assert_non_null(strstr(e, "2 classes"));
	free(e);
	const char *ok[] = {"eval", "--model", "store/model", "--store", "file://store",
	                    "--dataset", "ds/manifest.json", NULL};
	assert_int_equal(tf_test_cli(ok, NULL, &e), 0);
	free(e);
	/* the evaluate kind's `model` key (a key in the store) is --model-key */
	const char *by_key[] = {"eval", "--model-key", "model/", "--store", "file://store",
	                        "--dataset", "ds/manifest.json", NULL};
	assert_int_equal(tf_test_cli(by_key, NULL, &e), 0);
	free(e);
	const char *both[] = {"eval", "--model", "store/model", "--model-key", "model/", NULL};
	assert_int_equal(tf_test_cli(both, NULL, &e), 64);
	assert_non_null(strstr(e, "give one of --model DIR or --model-key PREFIX"));
	free(e);
}

/* ---- IDX and CSV sources ---- */

static void write_gz(const char *path, const void *data, size_t len)
{
	gzFile gz = gzopen(path, "wb");
	assert_non_null(gz);
	assert_int_equal(gzwrite(gz, data, (unsigned)len), (int)len);
	assert_int_equal(gzclose(gz), Z_OK);
}

static void test_untrusted_idx_dimensions_that_wrap_are_refused(void **state)
{
	(void)state;
	assert_int_equal(system("mkdir -p idx"), 0);
	/* 2^31 x 2^31 x 4 = 2^64 wraps to 0 = the data that follows */
	unsigned char img[16] = {0, 0, 8, 3, 0x80, 0, 0, 0, 0x80, 0, 0, 0, 0, 0, 0, 4};
	unsigned char lab[8] = {0, 0, 8, 1, 0x80, 0, 0, 0};
	write_gz("idx/train-images-idx3-ubyte.gz", img, sizeof img);
	write_gz("idx/train-labels-idx1-ubyte.gz", lab, sizeof lab);
	struct tf_rawset r;
	char err[512];
	assert_int_equal(tf_fashion_load("idx", 1, &r, err, sizeof err), -EBADMSG);
	assert_non_null(strstr(err, "overflow"));
}

static void test_untrusted_csv_wide_header_is_not_preallocated(void **state)
{
	(void)state;
	/* 2^21 columns and one row: sized by the rows present, not 1024 rows up front (8 GiB) */
	const size_t cols = (size_t)1 << 21;
	FILE *f = fopen("wide.csv", "w");
	assert_non_null(f);
	for (size_t i = 0; i < cols; i++)
		fputs("c,", f);
	fputs("label\n", f);
	for (size_t i = 0; i < cols; i++)
		fputs("1,", f);
	fputs("0\n", f);
	assert_int_equal(fclose(f), 0);
	/* run in a child limited to 2 GiB of address space (not under ASan, whose shadow
	 * memory needs more): the old sizing aborted there */
	if (getenv("TF_ASAN")) {
		skip();
		return;
	}
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct rlimit lim = {(rlim_t)2 << 30, (rlim_t)2 << 30};
		setrlimit(RLIMIT_AS, &lim);
		struct tf_rawset r;
		char err[512];
		int rc = tf_csv_load("wide.csv", "label", &r, err, sizeof err);
		_exit(rc == 0 && r.n == 1 && r.dim == cols ? 0 : 1);
	}
	assert_int_equal(tf_test_wait_exit(pid), 0);
}

/* A model with NaN weights (a crafted bundle, or a diverged run) scores NaN: the AUC must
 * still terminate (it looped forever on NaN ties; found by fuzz_eval). */
static void test_untrusted_auc_of_nan_scores_terminates(void **state)
{
	(void)state;
	float probs[8] = {NAN, NAN, 0.5f, NAN, 0.25f, NAN, 0.75f, NAN};
	int32_t y[4] = {0, 1, 1, 0};
	alarm(30); /* a hang fails the test instead of blocking the suite */
	double a = tf_metrics_auc(probs, 4, 2, y);
	alarm(0);
	assert_true(isnan(a) || (a >= 0 && a <= 1));
	float all_nan[4] = {NAN, NAN, NAN, NAN};
	alarm(30);
	a = tf_metrics_auc(all_nan, 4, 1, y);
	alarm(0);
	assert_true(isnan(a) || (a >= 0 && a <= 1));
}

/* An image model given floats (an .npy of float32 or float64 for `tpuflow predict`) clamps
 * them to pixels: NaN is 0, -Infinity 0 and Infinity 255, and the conversion of a NaN to a
 * byte, undefined behaviour that UBSan stops on (make asan), is never made. */
static void test_untrusted_image_nan_pixels(void **state)
{
	(void)state;
	float mean = 0.5f, inv_std = 2;
	struct tf_bundle b = {.pre = {.image = 1, .dim = 5, .mean = &mean, .inv_std = &inv_std}};
	const float raw[5] = {NAN, -INFINITY, INFINITY, 300, -NAN};
	const float same[5] = {0, 0, 255, 255, 0};
	float got[5], want[5];
	tf_bundle_preprocess(&b, raw, got);
	tf_bundle_preprocess(&b, same, want);
	assert_memory_equal(got, want, sizeof(got));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_untrusted_npy_shape_products_that_wrap_are_refused),
	    cmocka_unit_test(test_untrusted_bundle_sizes_are_checked),
	    cmocka_unit_test(test_untrusted_dataset_manifest_counts_are_checked),
	    cmocka_unit_test(test_untrusted_eval_refuses_other_class_count),
	    cmocka_unit_test(test_untrusted_idx_dimensions_that_wrap_are_refused),
	    cmocka_unit_test(test_untrusted_csv_wide_header_is_not_preallocated),
	    cmocka_unit_test(test_untrusted_auc_of_nan_scores_terminates),
	    cmocka_unit_test(test_untrusted_image_nan_pixels),
	};
	return cmocka_run_group_tests(tests, setup, NULL);
}

/* test_serve.c — model serving (web/serve*.c) against a real server started in this process,
 * requests made with libcurl: TensorFlow Serving REST (row and columnar, status, metadata,
 * the errors and their codes), the Open Inference Protocol, the predict scope, a broken
 * version that stays UNAVAILABLE without harming the others, an alias move, the `tpuflow
 * serve` command, predictions bit-identical to `tpuflow predict` on the same inputs, and the
 * rollout policies (SLOs, the guard against production, the shadow comparison).
 *
 * The models: untrained 784-16-10 MLPs (Fashion-MNIST preprocessing from a 256-image prep)
 * exported to the home's object store and registered; skipped without the dataset. */
#include "common/common.h"
#include "ml/bundle.h"
#include "ml/npy.h"
#include "orchestrator/registry.h"
#include "storage/objstore.h"
#include "web/api.h"
#include "web/serve.h"
#include "web/server.h"
#include "web/tokens.h"

#include "tests/testutil.h"

#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cmocka.h>

#define DIM 784
#define MAX_BATCH 8

static struct tf_web *srv;
static char base[64];
static char home[512];
static char tok_predict[TF_TOKEN_LEN + 1], tok_read[TF_TOKEN_LEN + 1];
static int have_data;

struct resp {
	long status;
	char *body;
	size_t n;
	json_t *json;
};

static size_t on_data(char *d, size_t sz, size_t nm, void *u)
{
	struct resp *r = u;
	r->body = realloc(r->body, r->n + sz * nm + 1);
	memcpy(r->body + r->n, d, sz * nm);
	r->n += sz * nm;
	r->body[r->n] = 0;
	return sz * nm;
}

static void resp_free(struct resp *r)
{
	free(r->body);
	json_decref(r->json);
	memset(r, 0, sizeof(*r));
}

/* One request to base_url (the in-process server when NULL); token may be NULL. */
static struct resp call_at(const char *base_url, const char *method, const char *path,
                           const char *token, const char *body)
{
	struct resp r = {0};
	CURL *c = curl_easy_init();
	char url[1024], auth[128];
	snprintf(url, sizeof(url), "%s%s", base_url ? base_url : base, path);
	struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
	if (token) {
		snprintf(auth, sizeof(auth), "Authorization: Bearer %s", token);
		h = curl_slist_append(h, auth);
	}
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
	if (body) {
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
	}
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &r);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, 30L);
	CURLcode cc = curl_easy_perform(c);
	if (cc != CURLE_OK)
		r.status = -1;
	else
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
	curl_slist_free_all(h);
	curl_easy_cleanup(c);
	if (r.body)
		r.json = json_loads(r.body, 0, NULL);
	return r;
}

static struct resp call(const char *method, const char *path, const char *body)
{
	return call_at(NULL, method, path, tok_predict, body);
}

/* The text is there and contains part. */
static void assert_has(const char *text, const char *part)
{
	assert_non_null(text);
	assert_non_null(strstr(text, part));
}

/* The integer and the string at key of object o. */
static json_int_t jint(json_t *o, const char *key)
{
	return json_integer_value(json_object_get(o, key));
}

static const char *jstr(json_t *o, const char *key)
{
	return json_string_value(json_object_get(o, key));
}

/* A serving error: this status, {"error": "..."} containing `has`. */
static void assert_error(struct resp *r, long status, const char *has)
{
	if (r->status != status || !r->body || !strstr(r->body, has))
		fprintf(stderr, "want %ld with '%s', got %ld: %s\n", status, has, r->status,
		        r->body ? r->body : "");
	assert_int_equal(r->status, status);
	const char *e = jstr(r->json, "error");
	assert_has(e, has);
}

/* The answer r (consumed) has this status. */
static void expect_status(struct resp r, long status)
{
	assert_int_equal(r.status, status);
	resp_free(&r);
}

/* The answer r (consumed) is the serving error of assert_error. */
static void expect_error(struct resp r, long status, const char *has)
{
	assert_error(&r, status, has);
	resp_free(&r);
}

/* Deterministic pixels of example i. */
static unsigned pixel(size_t i, size_t j)
{
	return (unsigned)((i * 131 + j * 7 + (j * j) % 17) % 256);
}

/* A JSON list of n examples from `first`, each a flat list (or 28 rows of 28 when nested). */
static char *examples(size_t first, size_t n, int nested)
{
	char *p = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&p, &len);
	fputc('[', f);
	for (size_t i = first; i < first + n; i++) {
		fputs(i > first ? ",[" : "[", f);
		for (size_t j = 0; j < DIM; j++) {
			if (nested && j % 28 == 0)
				fputs(j ? "],[" : "[", f);
			else if (j)
				fputc(',', f);
			fprintf(f, "%u", pixel(i, j));
		}
		fputs(nested ? "]]" : "]", f);
	}
	fputc(']', f);
	fclose(f);
	return p;
}

/* "0," n times, in one of two static buffers (two calls may share an expression). */
static const char *zeros(size_t n)
{
	static char buf[2][4 * DIM];
	static int k;
	k ^= 1;
	buf[k][0] = 0;
	for (size_t i = 0; i < n; i++)
		strcat(buf[k], "0,");
	return buf[k];
}

static char *body_of(const char *fmt, const char *list)
{
	return tf_xasprintf(fmt, list);
}

/* {"instances": n examples from `first`} (new). */
static char *instances(size_t first, size_t n)
{
	char *list = examples(first, n, 0), *body = body_of("{\"instances\":%s}", list);
	free(list);
	return body;
}

enum made { SOUND, NAN_BIAS, ROTATED };

/* Exports an untrained 784-16-10 model (seed) at key prefix in store s with dataset d; with
 * NAN_BIAS, a deliberately broken one: its first output bias is NaN, so every answer is NaN;
 * with ROTATED, its classes rotated by one (class j gets the output weights of j + 1), so its
 * predicted class differs from the SOUND model's of the same seed on every input. */
static void export_model(struct tf_objstore *s, const struct tf_dataset *d, const char *prefix,
                         uint64_t seed, enum made how)
{
	struct tf_mlp m;
	size_t hidden[1] = {16};
	struct tf_mxu_cfg mxu;
	char err[512];
	tf_mxu_cfg_init(&mxu);
	assert_int_equal(tf_mlp_init(&m, d->dim, hidden, 1, d->num_classes, 0), 0);
	tf_mlp_init_params(&m, seed);
	if (how == NAN_BIAS)
		m.params[m.b_off[m.nlayers - 1]] = NAN;
	if (how == ROTATED) { /* the last kernel is hidden x classes, row-major */
		size_t C = m.size[m.nlayers], H = m.size[m.nlayers - 1];
		float *w = m.params + m.w_off[m.nlayers - 1], *b = m.params + m.b_off[m.nlayers - 1];
		for (size_t r = 0; r <= H; r++) { /* H kernel rows, then the bias */
			float *row = r < H ? w + r * C : b, first = row[0];
			memmove(row, row + 1, (C - 1) * sizeof(float));
			row[C - 1] = first;
		}
	}
	int rc = tf_bundle_export(s, prefix, &m, d, &mxu, NULL, err, sizeof err);
	if (rc)
		fprintf(stderr, "export: %s\n", err);
	assert_int_equal(rc, 0);
	tf_mlp_release(&m);
}

static void reg(struct tf_store *st, const char *step, const char *bundle)
{
	struct tf_model_version_spec mv = {
	    .model = "fm", .run_id = "r1", .step = step, .bundle = bundle};
	int64_t v;
	assert_int_equal(tf_registry_register(st, &mv, &v, NULL), 0);
}

/* The home's store (caller closes). */
static struct tf_store *open_home(void)
{
	struct tf_store *st;
	char err[256];
	assert_int_equal(tf_store_open_home(home, &st, err, sizeof(err)), 0);
	return st;
}

/* The home's store with fm's production alias on version 1, where each rollout test starts
 * (caller closes). */
static struct tf_store *open_home_production_1(void)
{
	struct tf_store *st = open_home();
	assert_int_equal(tf_registry_set_alias(st, "fm", "production", 1), 0);
	return st;
}

/* Runs `tpuflow --home HOME ARGS...` (NULL-ended, at most 8) to its end, its stdout into the
 * file out (emptied first) and its stderr into err_out when not NULL; asserts it exits 0. */
static void tpuflow(const char *out, const char *err_out, ...)
{
	char *argv[12] = {getenv("TPUFLOW_BIN"), "--home", home};
	int n = 3;
	va_list ap;
	va_start(ap, err_out);
	for (char *a; n < 11 && (a = va_arg(ap, char *));)
		argv[n++] = a;
	va_end(ap);
	argv[n] = NULL;
	unlink(out);
	assert_int_equal(tf_test_wait_exit(tf_test_spawn(argv, out, err_out)), 0);
}

/* The file at path contains part. */
static void assert_file_has(const char *path, const char *part)
{
	char *text = NULL;
	size_t n;
	assert_int_equal(tf_read_file(path, 1 << 20, &text, &n), 0);
	assert_has(text, part);
	free(text);
}

static int setup(void **state)
{
	(void)state;
	curl_global_init(CURL_GLOBAL_DEFAULT);
	have_data = access(TF_TEST_FMNIST, R_OK) == 0;
	if (!have_data)
		return 0;
	snprintf(home, sizeof(home), "%s/servehome", tf_test_tmp());
	char cmd[1200], err[512];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s' && mkdir -p '%s'", home, home);
	assert_int_equal(system(cmd), 0);
	char *url = tf_objstore_home_url(home), *key = NULL;
	struct tf_objstore *s;
	assert_int_equal(tf_objstore_open(url, &s, err, sizeof err), 0);
	free(url);
	struct tf_prep_opts po = {.source = "fashion-mnist",
	                          .path = "/usr/share/datasets/fashion-mnist",
	                          .shards = 1,
	                          .limit_train = 256,
	                          .limit_test = 64};
	struct tf_dataset *d = NULL;
	int rc = tf_dataset_prep(s, "ds/", &po, &key, NULL, err, sizeof err);
	if (!rc)
		rc = tf_dataset_open(s, key, &d, err, sizeof err);
	if (rc)
		fprintf(stderr, "prep: %s\n", err);
	assert_int_equal(rc, 0);
	export_model(s, d, "models/fm1/", 1, SOUND);
	export_model(s, d, "models/fm2/", 2, SOUND);
	export_model(s, d, "models/bad/", 3, SOUND);
	export_model(s, d, "models/nan/", 4, NAN_BIAS);
	export_model(s, d, "models/rotated/", 1, ROTATED); /* the shadow comparison's */
	export_model(s, d, "models/same/", 1, SOUND);
	tf_dataset_free(d);
	free(key);
	key = NULL;
	/* a tabular model "tab" (4 float features, 3 classes) from a small CSV; feature d
	 * spreads little (0 or 0.001), so a large d is past float32 once standardised */
	char csv[600];
	snprintf(csv, sizeof(csv), "%s/tab.csv", home);
	FILE *f = fopen(csv, "w");
	assert_non_null(f);
	fputs("a,b,label,c,d\n", f);
	for (int i = 0; i < 60; i++)
		fprintf(f, "%d.5,%d,%d,%d.25,0.00%d\n", i % 7, i % 5, i % 3, i % 11, i % 2);
	fclose(f);
	struct tf_prep_opts to = {.source = "csv", .path = csv, .shards = 1, .seed = 1};
	assert_int_equal(tf_dataset_prep(s, "tabds/", &to, &key, NULL, err, sizeof err), 0);
	assert_int_equal(tf_dataset_open(s, key, &d, err, sizeof err), 0);
	export_model(s, d, "models/tab/", 7, SOUND);
	tf_dataset_free(d);
	free(key);
	tf_objstore_free(s);
	/* a damaged bundle: its tensors file cut short */
	snprintf(cmd, sizeof(cmd), "truncate -s 1000 '%s/objects/models/bad/model.safetensors'",
	         home);
	assert_int_equal(system(cmd), 0);

	struct tf_store *st;
	assert_int_equal(tf_store_open_home(home, &st, err, sizeof(err)), 0);
	reg(st, "a", "models/fm1/");
	reg(st, "b", "models/fm2");
	reg(st, "c", "models/bad/");
	reg(st, "e", "models/nan/"); /* version 4 */
	assert_int_equal(tf_registry_set_alias(st, "fm", "production", 1), 0);
	assert_int_equal(tf_registry_set_alias(st, "fm", "staging", 2), 0);
	assert_int_equal(tf_registry_set_alias(st, "fm", "broken", 3), 0);
	struct tf_model_version_spec other = {
	    .model = "empty", .run_id = "r1", .step = "d", .bundle = "models/fm1/"};
	int64_t v;
	assert_int_equal(tf_registry_register(st, &other, &v, NULL), 0);
	struct tf_model_version_spec tab = {
	    .model = "tab", .run_id = "r1", .step = "t", .bundle = "models/tab/"};
	assert_int_equal(tf_registry_register(st, &tab, &v, NULL), 0);
	assert_int_equal(tf_registry_set_alias(st, "tab", "production", v), 0);
	assert_int_equal(tf_token_create(st, "p", TF_SCOPE_PREDICT, 0, tok_predict, NULL), 0);
	assert_int_equal(tf_token_create(st, "r", TF_SCOPE_READ, 0, tok_read, NULL), 0);
	tf_store_close(st);

	struct tf_web_opts o = {.home = home,
	                        .listen = "127.0.0.1:0",
	                        .max_body = 4 << 20,
	                        .serve_max_batch = MAX_BATCH,
	                        .rate = 1e6}; /* the canary test sends 10,300 requests */
	rc = tf_web_start(&o, &srv, err, sizeof(err));
	if (rc)
		fprintf(stderr, "start: %s\n", err);
	assert_int_equal(rc, 0);
	snprintf(base, sizeof(base), "http://127.0.0.1:%d", tf_web_port(srv));
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	tf_web_stop(srv);
	curl_global_cleanup();
	return 0;
}

#define NEED_DATA()                                                                                \
	do {                                                                                       \
		if (!have_data) {                                                                  \
			fprintf(stderr, "no %s: skipped\n", TF_TEST_FMNIST);                       \
			skip();                                                                    \
		}                                                                                  \
	} while (0)

/* The n x 10 matrix of a predictions/outputs list, checked for shape. */
static void assert_matrix(json_t *m, size_t n, float *out)
{
	assert_true(json_is_array(m));
	assert_int_equal(json_array_size(m), n);
	for (size_t i = 0; i < n; i++) {
		json_t *row = json_array_get(m, i);
		assert_int_equal(json_array_size(row), 10);
		float sum = 0;
		for (size_t j = 0; j < 10; j++) {
			json_t *x = json_array_get(row, j);
			assert_true(json_is_number(x));
			float f = (float)json_number_value(x);
			if (out)
				out[i * 10 + j] = f;
			sum += f;
		}
		assert_true(sum > 0.99f && sum < 1.01f); /* softmax probabilities */
	}
}

/* Row and columnar formats, flat and nested examples, named inputs: the same numbers. */
static void test_tfs_row_and_columnar(void **state)
{
	(void)state;
	NEED_DATA();
	float a[30], b[30], c[30];
	char *list = examples(0, 3, 0), *nested = examples(0, 3, 1);
	char *row = body_of("{\"signature_name\":\"serving_default\",\"instances\":%s}", list);
	struct resp r = call("POST", "/v1/models/fm:predict", row);
	assert_int_equal(r.status, 200);
	assert_matrix(json_object_get(r.json, "predictions"), 3, a);
	resp_free(&r);
	char *col = body_of("{\"inputs\":%s}", nested);
	r = call("POST", "/v1/models/fm/versions/1:predict", col);
	assert_int_equal(r.status, 200);
	assert_null(json_object_get(r.json, "predictions"));
	assert_matrix(json_object_get(r.json, "outputs"), 3, b);
	resp_free(&r);
	assert_memory_equal(a, b, sizeof(a));
	char *named = body_of("{\"inputs\":{\"image\":%s}}", list);
	r = call("POST", "/v1/models/fm/labels/production:predict", named);
	assert_int_equal(r.status, 200);
	assert_matrix(json_object_get(r.json, "outputs"), 3, c);
	resp_free(&r);
	assert_memory_equal(a, c, sizeof(a));
	/* another version answers differently */
	r = call("POST", "/v1/models/fm/labels/staging:predict", row);
	assert_int_equal(r.status, 200);
	assert_matrix(json_object_get(r.json, "predictions"), 3, c);
	assert_memory_not_equal(a, c, sizeof(a));
	resp_free(&r);
	free(list);
	free(nested);
	free(row);
	free(col);
	free(named);
}

/* The errors: status codes and messages naming the field and index. */
static void test_tfs_errors(void **state)
{
	(void)state;
	NEED_DATA();
	char *ok = instances(0, 2);
	expect_error(call("POST", "/v1/models/nope:predict", ok), 404, "no model 'nope'");
	expect_error(call("POST", "/v1/models/fm/versions/9:predict", ok), 404, "no version 9");
	expect_error(call("POST", "/v1/models/fm/versions/x:predict", ok), 400, "version 'x'");
	/* a number: not found; an unknown label: 400, as TF Serving answers */
	expect_error(call("POST", "/v1/models/fm/versions/0:predict", ok), 404, "no version 0");
	expect_error(call("POST", "/v1/models/fm/labels/nolabel:predict", ok), 400,
	             "Unrecognized servable version label: 'nolabel'");
	expect_error(call("GET", "/v1/models/fm/labels/nolabel", NULL), 400,
	             "Unrecognized servable version label");
	expect_error(call("GET", "/v1/models/fm/versions/9", NULL), 404, "no version 9");
	expect_error(call("POST", "/v1/models/empty:predict", ok), 404, "no 'production' alias");
	/* a short example: the second one */
	char *bad = tf_xasprintf("{\"instances\":[[%s0],[%s0]]}", zeros(DIM - 1), zeros(77));
	expect_error(call("POST", "/v1/models/fm:predict", bad), 400,
	             "instances[1]: expected 784 values (or 28 x 28), got 78");
	free(bad);
	/* wrong dtypes */
	const char *dt[][2] = {
	    {"{\"instances\":[[1,2,\"x\"]]}", "instances[0], value 2: expected a number (uint8"},
	    {"{\"instances\":[[1,2.5]]}", "instances[0], value 1: 2.5 is not a uint8"},
	    {"{\"instances\":[[300]]}", "instances[0], value 0: 300 is not a uint8"},
	    {"{\"inputs\":{\"pixels\":[[1]]}}", "inputs: the model has one input, 'image'"},
	    {"{\"instances\":[]}", "instances: no instances"},
	    {"{\"instances\":[[1]], \"inputs\":[[1]]}", "exactly one of 'instances'"},
	    {"{\"signature_name\":\"other\",\"instances\":[[1]]}", "signature_name"},
	    {"[1,2]", "the body must be a JSON object"},
	    {"{\"instances\":", "not valid JSON"},
	};
	for (size_t i = 0; i < TF_ARRAY_LEN(dt); i++)
		expect_error(call("POST", "/v1/models/fm:predict", dt[i][0]), 400, dt[i][1]);
	/* over the batch cap */
	char *big = instances(0, MAX_BATCH + 1);
	expect_error(call("POST", "/v1/models/fm:predict", big), 400,
	             "9 instances, over this server's batch cap of 8");
	free(big);
	/* the broken version: UNAVAILABLE with its reason, the others unharmed */
	expect_error(call("POST", "/v1/models/fm/labels/broken:predict", ok), 404,
	             "version 3 of model 'fm' is UNAVAILABLE");
	expect_status(call("POST", "/v1/models/fm:predict", ok), 200);
	free(ok);
}

/* GET /v1/models/{name} and its metadata; the predict scope. */
static void test_tfs_status_metadata_auth(void **state)
{
	(void)state;
	NEED_DATA();
	struct resp r = call("GET", "/v1/models/fm", NULL);
	assert_int_equal(r.status, 200);
	json_t *list = json_object_get(r.json, "model_version_status");
	assert_int_equal(json_array_size(list), 3);
	/* TensorFlow Serving's states (get_model_status.proto): one that could not be loaded has
	 * reached END with its error; UNAVAILABLE is no state of that enum */
	const char *want[][2] = {{"AVAILABLE", "OK"}, {"AVAILABLE", "OK"}, {"END", "NOT_FOUND"}};
	for (size_t i = 0; i < 3; i++) {
		json_t *v = json_array_get(list, i);
		char num[8];
		snprintf(num, sizeof(num), "%zu", i + 1);
		assert_string_equal(jstr(v, "version"), num);
		assert_string_equal(jstr(v, "state"), want[i][0]);
		assert_string_equal(jstr(json_object_get(v, "status"), "error_code"), want[i][1]);
	}
	const char *why = json_string_value(
	    json_object_get(json_object_get(json_array_get(list, 2), "status"), "error_message"));
	assert_has(why, "models/bad/");
	assert_string_equal(
	    jstr(json_object_get(json_array_get(list, 0), "status"), "error_message"), "");
	resp_free(&r);
	/* a model no alias points into: TF Serving's "Could not find any versions" (404) */
	expect_error(call("GET", "/v1/models/empty", NULL), 404,
	             "model 'empty' has no version an alias points at");
	/* one version, by number or by alias */
	const char *one[][2] = {{"/v1/models/fm/versions/3", "3"},
	                        {"/v1/models/fm/labels/staging", "2"}};
	for (size_t i = 0; i < 2; i++) {
		r = call("GET", one[i][0], NULL);
		assert_int_equal(r.status, 200);
		list = json_object_get(r.json, "model_version_status");
		assert_int_equal(json_array_size(list), 1);
		assert_string_equal(jstr(json_array_get(list, 0), "version"), one[i][1]);
		resp_free(&r);
	}
	r = call("GET", "/v1/models/fm/versions/2/metadata", NULL);
	assert_int_equal(r.status, 200);
	assert_string_equal(jstr(json_object_get(r.json, "model_spec"), "version"), "2");
	resp_free(&r);
	r = call("GET", "/v1/models/fm/metadata", NULL);
	assert_int_equal(r.status, 200);
	json_t *sd = json_object_get(
	    json_object_get(json_object_get(json_object_get(r.json, "metadata"), "signature_def"),
	                    "signature_def"),
	    "serving_default");
	assert_string_equal(jstr(json_object_get(json_object_get(sd, "inputs"), "image"), "dtype"),
	                    "DT_UINT8");
	assert_non_null(json_object_get(
	    json_object_get(json_object_get(r.json, "metadata"), "tpuflow_signature"),
	    "checksums"));
	resp_free(&r);
	/* the version a label points at: its metadata too (TensorFlow Serving's
	 * /labels/{label}/metadata) */
	r = call("GET", "/v1/models/fm/labels/staging/metadata", NULL);
	assert_int_equal(r.status, 200);
	assert_string_equal(jstr(json_object_get(r.json, "model_spec"), "version"), "2");
	resp_free(&r);
	expect_error(call("GET", "/v1/models/fm/labels/nolabel/metadata", NULL), 400,
	             "Unrecognized servable version label: 'nolabel'");
	expect_status(call_at(NULL, "GET", "/v1/models/fm", NULL, NULL), 401);
	expect_status(call_at(NULL, "GET", "/v1/models/fm", tok_read, NULL), 403);
	expect_status(call_at(NULL, "GET", "/v2/health/live", NULL, NULL), 200);
	/* a predict token cannot read the API */
	expect_status(call("GET", "/api/v1/runs", NULL), 403);
}

/* Whichever part of the server refuses a request on a serving path (the token check, the
 * router, the body cap), the answer carries {"error": "..."}, where clients of both
 * protocols read errors, beside the problem's own members; the API's problems do not. */
static void test_serving_paths_errors_have_error(void **state)
{
	(void)state;
	NEED_DATA();
	expect_error(call_at(NULL, "POST", "/v2/models/fm/infer", NULL, "{}"), 401,
	             "needs a bearer token of scope 'predict'");
	expect_error(call_at(NULL, "GET", "/v1/models/fm", tok_read, NULL), 403,
	             "this route needs scope 'predict'");
	expect_error(call("GET", "/v1/models/fm:predict", NULL), 405, "GET is not allowed here");
	expect_error(call("POST", "/v1/models/fm/versions/1:classify", "{}"), 404,
	             "no such route");
	expect_error(call("GET", "/v2/repository/index", NULL), 404, "no such route");
	/* over the server's 4 MiB body cap */
	size_t big = (4u << 20) + 16;
	char *body = malloc(big + 1);
	memset(body, ' ', big);
	body[0] = '{';
	body[big - 1] = '}';
	body[big] = 0;
	struct resp r = call("POST", "/v2/models/fm/infer", body);
	assert_error(&r, 413, "larger than");
	assert_string_equal(jstr(r.json, "error"), jstr(r.json, "detail"));
	resp_free(&r);
	free(body);
	r = call("GET", "/api/v1/runs", NULL); /* the API: a problem alone */
	assert_int_equal(r.status, 403);
	assert_non_null(jstr(r.json, "detail"));
	assert_null(json_object_get(r.json, "error"));
	resp_free(&r);
}

/* A token the server has let in (and remembers) is refused once revoked: at once when the
 * revocation commits in this process, and after the server has seen the commit when another
 * process makes it (`tpuflow tokens revoke`). */
static void test_revoked_token_refused(void **state)
{
	(void)state;
	NEED_DATA();
	struct tf_store *st = open_home();
	char t1[TF_TOKEN_LEN + 1], t2[TF_TOKEN_LEN + 1];
	assert_int_equal(tf_token_create(st, "soon-gone", TF_SCOPE_PREDICT, 0, t1, NULL), 0);
	assert_int_equal(tf_token_create(st, "gone-later", TF_SCOPE_PREDICT, 0, t2, NULL), 0);
	for (int i = 0; i < 3; i++)
		expect_status(call_at(NULL, "GET", "/v1/models/fm", i % 2 ? t2 : t1, NULL), 200);
	assert_int_equal(tf_token_revoke(st, "soon-gone", tf_now_wall()), 0);
	tf_store_close(st);
	expect_status(call_at(NULL, "GET", "/v1/models/fm", t1, NULL), 401);
	tpuflow("revoke.out", "revoke.out", "tokens", "revoke", "gone-later", (char *)NULL);
	long status = 0;
	for (int i = 0; i < 400 && status != 401; i++) {
		struct resp r = call_at(NULL, "GET", "/v1/models/fm", t2, NULL);
		status = r.status;
		assert_true(status == 200 || status == 401);
		resp_free(&r);
		if (status != 401)
			usleep(25 * 1000);
	}
	assert_int_equal(status, 401);
}

/* The 3 probabilities of a tabular answer's row i (TF Serving's predictions or outputs). */
static void tab_row(json_t *m, size_t i, float out[3])
{
	json_t *row = json_array_get(m, i);
	assert_int_equal(json_array_size(row), 3);
	for (size_t k = 0; k < 3; k++)
		out[k] = (float)json_number_value(json_array_get(row, k));
}

/* text (an answer of tpuflow's, whose strings have no such token) with its NaN, Infinity and
 * -Infinity quoted, for a strict JSON parser (new). */
static char *quote_tokens(const char *text)
{
	char *out = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&out, &len);
	while (*text) {
		const char *tok = !strncmp(text, "NaN", 3)         ? "NaN"
		                  : !strncmp(text, "-Infinity", 9) ? "-Infinity"
		                  : !strncmp(text, "Infinity", 8)  ? "Infinity"
		                                                   : NULL;
		if (tok) {
			fprintf(f, "\"%s\"", tok);
			text += strlen(tok);
		} else {
			fputc(*text++, f);
		}
	}
	fclose(f);
	return out;
}

/* TensorFlow Serving's JSON has NaN, Infinity and -Infinity (its REST API's "JSON
 * conformance"): a float input takes them, bare or quoted as proto3 writes them, in every
 * format, and the answer of a row that had one writes them too; its other rows are answered
 * as without it. The Open Inference Protocol's body is plain JSON: refused there, with why;
 * and a uint8 input has no NaN. */
static void test_tfs_nonfinite(void **state)
{
	(void)state;
	NEED_DATA();
	float want[2][3], got[3];
	/* the finite rows alone (one through the row fast path, one through the tree) */
	struct resp r = call("POST", "/v1/models/tab:predict",
	                     "{\"instances\":[[1.5,2,3.25,-1],[0.5,1,2.25,-3]]}");
	assert_int_equal(r.status, 200);
	tab_row(json_object_get(r.json, "predictions"), 0, want[0]);
	tab_row(json_object_get(r.json, "predictions"), 1, want[1]);
	resp_free(&r);
	const char *bodies[] = {
	    /* the row fast path */
	    "{\"instances\":[[1.5,2,3.25,-1],[NaN,1,2,3],[0.5,1,2.25,-3]]}",
	    "{\"instances\":[[1.5,2,3.25,-1],[Infinity,1,-Infinity,3],[0.5,1,2.25,-3]]}",
	    /* the general path: named, columnar, quoted, spaced */
	    "{\"instances\":[{\"features\":[1.5,2,3.25,-1]},{\"features\":[1,NaN,2,3]},"
	    "{\"features\":[0.5,1,2.25,-3]}]}",
	    "{\"inputs\": [[1.5, 2, 3.25, -1], [-Infinity, 1, 2, 3], [0.5, 1, 2.25, -3]]}",
	    "{\"inputs\":{\"features\":[[1.5,2,3.25,-1],[1,2,\"NaN\",3],[0.5,1,2.25,-3]]}}",
	    "{\"signature_name\":\"serving_default\",\"instances\":[[1.5,2,3.25,-1],[1,2,3,"
	    "\"-Infinity\"],[0.5,1,2.25,-3]]}",
	};
	for (size_t i = 0; i < TF_ARRAY_LEN(bodies); i++) {
		r = call("POST", "/v1/models/tab:predict", bodies[i]);
		if (r.status != 200)
			fprintf(stderr, "%s: %ld %s\n", bodies[i], r.status, r.body);
		assert_int_equal(r.status, 200);
		/* the middle row's answer has a NaN: strict JSON parsers (this one) refuse it */
		assert_null(r.json);
		assert_true(strstr(r.body, "NaN") || strstr(r.body, "Infinity"));
		assert_null(strstr(r.body, "nan"));
		assert_null(strstr(r.body, "inf"));
		/* read it back with the tokens as JSON's strings: the other rows are unchanged */
		char *quoted = quote_tokens(r.body);
		json_t *j = json_loads(quoted, 0, NULL);
		assert_non_null(j);
		json_t *m = json_object_get(j, strstr(bodies[i], "inputs") ? "outputs" : "predictions");
		assert_int_equal(json_array_size(m), 3);
		tab_row(m, 0, got);
		assert_memory_equal(got, want[0], sizeof(got));
		tab_row(m, 2, got);
		assert_memory_equal(got, want[1], sizeof(got));
		json_t *bad = json_array_get(json_array_get(m, 1), 0);
		assert_true(json_is_string(bad));
		if (strstr(bodies[i], "NaN")) /* softmax of NaN: every probability */
			for (size_t k = 0; k < 3; k++)
				assert_string_equal(
				    json_string_value(json_array_get(json_array_get(m, 1), k)), "NaN");
		json_decref(j);
		free(quoted);
		resp_free(&r);
	}
	/* not a number token: the parser's error, as before */
	expect_error(call("POST", "/v1/models/tab:predict", "{\"instances\":[[NaNa,1,2,3]]}"),
	             400, "not valid JSON");
	expect_error(call("POST", "/v1/models/tab:predict", "{\"instances\":[[1,\"nan\",2,3]]}"),
	             400, "instances[0], value 1: expected a number (float32 input), got a string");
	/* a uint8 input has no NaN */
	char *img = tf_xasprintf("{\"instances\":[[%sNaN]]}", zeros(DIM - 1));
	expect_error(call("POST", "/v1/models/fm:predict", img), 400,
	             "instances[0], value 783: NaN is not a uint8");
	free(img);
	/* the Open Inference Protocol: plain JSON */
	const char *v2 = "{\"inputs\":[{\"name\":\"features\",\"shape\":[1,4],"
	                 "\"datatype\":\"FP32\",\"data\":[1,%s,2,3]}]}";
	char *b = tf_xasprintf(v2, "0.5");
	expect_status(call("POST", "/v2/models/tab/infer", b), 200);
	free(b);
	b = tf_xasprintf(v2, "NaN");
	expect_error(call("POST", "/v2/models/tab/infer", b), 400,
	             "NaN, Infinity and -Infinity are not JSON numbers");
	free(b);
	b = tf_xasprintf(v2, "\"NaN\"");
	expect_error(call("POST", "/v2/models/tab/infer", b), 400,
	             "inputs[0].data, value 1: expected a number (float32 input), got a string");
	free(b);
	/* a finite value that standardising takes past float32: TensorFlow Serving's answer
	 * writes what the model gives; this protocol's JSON cannot, and says why */
	r = call("POST", "/v1/models/tab:predict", "{\"instances\":[[1,2,3,1e36]]}");
	assert_int_equal(r.status, 200);
	assert_true(strstr(r.body, "NaN") || strstr(r.body, "Infinity"));
	resp_free(&r);
	expect_error(call("POST", "/v2/models/tab/infer",
	                  "{\"inputs\":[{\"name\":\"features\",\"shape\":[1,4],"
	                  "\"datatype\":\"FP32\",\"data\":[1,2,3,1e36]}]}"),
	             400, "instance 0: an input is not a finite float32 once preprocessed");
}

/* The Open Inference Protocol. */
static void test_v2(void **state)
{
	(void)state;
	NEED_DATA();
	expect_status(call("GET", "/v2/health/ready", NULL), 200);
	struct resp r = call("GET", "/v2/models/fm", NULL);
	assert_int_equal(r.status, 200);
	assert_string_equal(jstr(r.json, "name"), "fm");
	assert_string_equal(jstr(json_array_get(json_object_get(r.json, "inputs"), 0), "datatype"),
	                    "UINT8");
	resp_free(&r);
	/* ready: its production loads ('broken', a version that cannot, fails its own requests) */
	expect_status(call("GET", "/v2/models/fm/ready", NULL), 200);
	/* the server's metadata; one version; not ready is a 4xx */
	r = call_at(NULL, "GET", "/v2", NULL, NULL);
	assert_int_equal(r.status, 200);
	assert_string_equal(jstr(r.json, "name"), "tpuflow");
	assert_true(json_is_array(json_object_get(r.json, "extensions")));
	resp_free(&r);
	expect_status(call("GET", "/v2/models/fm/versions/2", NULL), 200);
	expect_status(call("GET", "/v2/models/fm/versions/2/ready", NULL), 200);
	r = call("GET", "/v2/models/fm/versions/3/ready", NULL); /* UNAVAILABLE */
	assert_int_equal(r.status / 100, 4);
	resp_free(&r);
	char *list = examples(0, 3, 0), *row = instances(0, 3);
	r = call("POST", "/v1/models/fm:predict", row);
	float a[30], b[30];
	assert_matrix(json_object_get(r.json, "predictions"), 3, a);
	resp_free(&r);
	char *inf = body_of("{\"id\":\"q1\",\"inputs\":[{\"name\":\"image\",\"shape\":[3,784],"
	                    "\"datatype\":\"UINT8\",\"data\":%s}]}",
	                    list);
	r = call("POST", "/v2/models/fm/infer", inf);
	assert_int_equal(r.status, 200);
	assert_string_equal(jstr(r.json, "id"), "q1");
	assert_string_equal(jstr(r.json, "model_version"), "1");
	json_t *out = json_array_get(json_object_get(r.json, "outputs"), 0);
	assert_int_equal(json_integer_value(json_array_get(json_object_get(out, "shape"), 1)), 10);
	json_t *data = json_object_get(out, "data");
	assert_int_equal(json_array_size(data), 30);
	for (size_t i = 0; i < 30; i++)
		b[i] = (float)json_number_value(json_array_get(data, i));
	assert_memory_equal(a, b, sizeof(a));
	resp_free(&r);
	r = call("POST", "/v2/models/fm/versions/2/infer", inf);
	assert_int_equal(r.status, 200);
	assert_string_equal(jstr(r.json, "model_version"), "2");
	resp_free(&r);
	free(inf);
	inf = body_of("{\"inputs\":[{\"name\":\"image\",\"shape\":[3,784],\"datatype\":\"FP32\","
	              "\"data\":%s}]}",
	              list);
	expect_error(call("POST", "/v2/models/fm/infer", inf), 400,
	             "inputs[0].datatype: the model takes UINT8, not FP32");
	free(inf);
	inf = body_of("{\"inputs\":[{\"name\":\"image\",\"shape\":[4,784],\"datatype\":\"UINT8\","
	              "\"data\":%s}]}",
	              list);
	expect_error(call("POST", "/v2/models/fm/infer", inf), 400,
	             "inputs[0].data: the shape says 3136 values, got 2352");
	free(inf);
	expect_error(
	    call("POST", "/v2/models/fm/infer",
	         "{\"inputs\":[{\"name\":\"image\",\"shape\":[1,783],\"datatype\":\"UINT8\","
	         "\"data\":[1]}]}"),
	    400, "inputs[0].shape: expected [N, 784] or [N, 28, 28]");
	expect_error(call("POST", "/v2/models/nope/infer", "{\"inputs\":[]}"), 404,
	             "no model 'nope'");
	/* the rest of the request as the protocol types it: "id" a string, "parameters"
	 * objects, "outputs" the model's (its one output asked for by name is answered) */
	const char *one = "{\"name\":\"image\",\"shape\":[1,784],\"datatype\":\"UINT8\","
	                  "\"parameters\":{},\"data\":[%s0]}";
	char *t = tf_xasprintf(one, zeros(783));
	const struct {
		const char *fmt, *error; /* NULL: answered */
	} v2cases[] = {
	    {"{\"id\":\"a\",\"parameters\":{\"k\":1},\"inputs\":[%s],"
	     "\"outputs\":[{\"name\":\"probabilities\",\"parameters\":{}}]}",
	     NULL},
	    {"{\"inputs\":[%s],\"outputs\":[]}", NULL},
	    {"{\"id\":42,\"inputs\":[%s]}", "id: expected a string"},
	    {"{\"parameters\":[1],\"inputs\":[%s]}", "parameters: expected an object"},
	    {"{\"inputs\":[%s],\"outputs\":[{\"name\":\"logits\"}]}",
	     "outputs[0].name: the model's only output is 'probabilities', not 'logits'"},
	    {"{\"inputs\":[%s],\"outputs\":{\"name\":\"probabilities\"}}",
	     "outputs: expected a list"},
	    {"{\"inputs\":[%s],\"outputs\":[{\"name\":\"probabilities\",\"parameters\":1}]}",
	     "outputs[0].parameters: expected an object"},
	};
	for (size_t i = 0; i < sizeof(v2cases) / sizeof(v2cases[0]); i++) {
		inf = tf_xasprintf(v2cases[i].fmt, t);
		r = call("POST", "/v2/models/fm/infer", inf);
		if (v2cases[i].error) {
			assert_error(&r, 400, v2cases[i].error);
		} else {
			assert_int_equal(r.status, 200);
			json_t *o = json_array_get(json_object_get(r.json, "outputs"), 0);
			assert_string_equal(jstr(o, "name"), "probabilities");
		}
		resp_free(&r);
		free(inf);
	}
	free(t);
	t = tf_xasprintf("{\"inputs\":[{\"name\":\"image\",\"shape\":[1,784],\"datatype\":"
	                 "\"UINT8\",\"parameters\":\"x\",\"data\":[%s0]}]}",
	                 zeros(783));
	expect_error(call("POST", "/v2/models/fm/infer", t), 400,
	             "inputs[0].parameters: expected an object");
	free(t);
	free(list);
	free(row);
}

/* Through HTTP and through `tpuflow predict` on the same inputs: the same bits. */
static void test_bit_identity_with_predict(void **state)
{
	(void)state;
	NEED_DATA();
	enum { N = 8 };
	float *x = malloc(N * DIM * sizeof(float));
	for (size_t i = 0; i < N; i++)
		for (size_t j = 0; j < DIM; j++)
			x[i * DIM + j] = (float)pixel(100 + i, j);
	assert_int_equal(tf_npy_write_f32("x.npy", x, N, DIM), 0);
	free(x);
	char model[700];
	snprintf(model, sizeof(model), "%s/objects/models/fm1", home);
	char *argv[] = {getenv("TPUFLOW_BIN"),
	                "predict",
	                "--model",
	                model,
	                "--input",
	                "x.npy",
	                "--out",
	                "y.npy",
	                NULL};
	assert_non_null(argv[0]);
	assert_int_equal(tf_test_wait_exit(tf_test_spawn(argv, "predict.out", NULL)), 0);
	struct tf_npy y = {0};
	char err[256];
	assert_int_equal(tf_npy_read("y.npy", &y, err, sizeof err), 0);
	assert_int_equal(y.count, N * 10);
	char *row = instances(100, N);
	struct resp r = call("POST", "/v1/models/fm:predict", row);
	float got[N * 10];
	assert_int_equal(r.status, 200);
	assert_matrix(json_object_get(r.json, "predictions"), N, got);
	assert_memory_equal(got, y.data, sizeof(got));
	/* and the text itself: each number reads back with strtof to the same bits */
	const char *p = strstr(r.body, "[[") + 2;
	for (size_t k = 0; k < N * 10; k++) {
		char *end;
		float f = strtof(p, &end);
		assert_memory_equal(&f, (float *)y.data + k, sizeof(f));
		p = end + strspn(end, ",[]");
	}
	resp_free(&r);
	tf_npy_release(&y);
	free(row);
}

/* Moving the production alias: the next request answers from the new version. */
static void test_alias_move(void **state)
{
	(void)state;
	NEED_DATA();
	char *row = instances(0, 1);
	float a[10], b[10], c[10];
	struct resp r = call("POST", "/v1/models/fm/versions/2:predict", row);
	assert_matrix(json_object_get(r.json, "predictions"), 1, a);
	resp_free(&r);
	struct tf_store *st = open_home();
	assert_int_equal(tf_registry_set_alias(st, "fm", "production", 2), 0);
	r = call("POST", "/v1/models/fm:predict", row);
	assert_matrix(json_object_get(r.json, "predictions"), 1, b);
	resp_free(&r);
	assert_memory_equal(a, b, sizeof(a));
	assert_int_equal(tf_registry_set_alias(st, "fm", "production", 1), 0);
	tf_store_close(st);
	r = call("POST", "/v1/models/fm:predict", row);
	assert_matrix(json_object_get(r.json, "predictions"), 1, c);
	resp_free(&r);
	assert_memory_not_equal(a, c, sizeof(a));
	free(row);
}

/* `tpuflow models VERB fm --json`: the new deployment (caller owns). */
static json_t *models_cmd(const char *verb)
{
	tpuflow("models.out", NULL, "models", verb, "fm", "--json", (char *)NULL);
	json_t *j = tf_test_load_json("models.out");
	assert_non_null(j);
	return j;
}

/* An Open Inference Protocol request of example 0 (new). */
static char *infer_body(void)
{
	char *list = examples(0, 1, 0);
	char *inf = body_of("{\"inputs\":[{\"name\":\"image\",\"shape\":[1,784],"
	                    "\"datatype\":\"UINT8\",\"data\":%s}]}",
	                    list);
	free(list);
	return inf;
}

/* The version that answers inf on the bare path once another process's registry change has
 * been seen (the server looks for such commits every few tens of milliseconds): waits up to
 * 10 s for `want`, and returns the version answering then. */
static char *version_after_change(const char *inf, const char *want)
{
	char *got = NULL;
	for (int i = 0; i < 400; i++) {
		struct resp r = call("POST", "/v2/models/fm/infer", inf);
		assert_int_equal(r.status, 200);
		free(got);
		got = strdup(jstr(r.json, "model_version"));
		resp_free(&r);
		if (!strcmp(got, want))
			break;
		usleep(25 * 1000);
	}
	return got;
}

/* A handle that POSTs body to fm's bare path, one request after another on one connection
 * (caller cleans up); the predict token's header into auth, for the caller's header list. */
static CURL *infer_handle(const char *body, char auth[128])
{
	CURL *c = curl_easy_init();
	char url[128];
	snprintf(url, sizeof(url), "%s/v2/models/fm/infer", base);
	snprintf(auth, 128, "Authorization: Bearer %s", tok_predict);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, 30L);
	return c;
}

/* A canary at 10% of the production deployment: 10% +- 2% of 10,000 keyed requests on the
 * bare path, the same key always on the same side; per-version counts in the status. */
static void test_canary_split(void **state)
{
	(void)state;
	NEED_DATA();
	struct tf_store *st = open_home();
	struct tf_deploy_spec d = {
	    .model = "fm", .alias = "production", .version = 2, .canary_percent = 10};
	assert_int_equal(tf_registry_deploy(st, &d, NULL), 0);
	char *inf = infer_body();
	char auth[128];
	CURL *c = infer_handle(inf, auth);
	enum { N = 10000 };
	static unsigned char side[N];
	int canary = 0;
	for (int i = 0; i < N + 300; i++) {
		int k = i < N ? i : (i - N) * 31; /* then 300 keys again */
		char key[64];
		snprintf(key, sizeof(key), "X-Request-Key: user-%d", k);
		struct curl_slist *h = curl_slist_append(NULL, auth);
		h = curl_slist_append(h, "Content-Type: application/json");
		h = curl_slist_append(h, key);
		struct resp r = {0};
		curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
		curl_easy_setopt(c, CURLOPT_WRITEDATA, &r);
		assert_int_equal(curl_easy_perform(c), CURLE_OK);
		curl_slist_free_all(h);
		r.json = json_loads(r.body, 0, NULL);
		const char *v = jstr(r.json, "model_version");
		assert_non_null(v);
		int is_canary = !strcmp(v, "2");
		assert_true(is_canary || !strcmp(v, "1"));
		if (i < N) {
			side[i] = (unsigned char)is_canary;
			canary += is_canary;
		} else {
			assert_int_equal(side[k], is_canary); /* sticky */
		}
		resp_free(&r);
	}
	curl_easy_cleanup(c);
	fprintf(stderr, "canary at 10%%: %d of %d requests\n", canary, N);
	assert_true(canary >= N * 8 / 100 && canary <= N * 12 / 100);
	/* the per-version figures */
	struct resp r = call("GET", "/v1/models/fm", NULL);
	json_t *list2 = json_object_get(r.json, "model_version_status");
	json_t *s2 = json_object_get(json_array_get(list2, 1), "tpuflow_stats");
	assert_true(jint(s2, "requests") >= canary);
	assert_true(json_real_value(json_object_get(s2, "p99_ms")) > 0);
	json_t *s1 = json_object_get(json_array_get(list2, 0), "tpuflow_stats");
	assert_true(jint(s1, "errors") > 0); /* the 400s */
	resp_free(&r);
	tf_store_close(st);
	/* by hand: promote makes the canary production, rollback goes back to the version before */
	json_t *dep = models_cmd("promote");
	assert_int_equal(jint(dep, "version"), 2);
	assert_true(json_is_null(json_object_get(dep, "canary_version")));
	json_decref(dep);
	char *v = version_after_change(inf, "2");
	assert_string_equal(v, "2");
	free(v);
	dep = models_cmd("rollback");
	assert_int_equal(jint(dep, "version"), 1);
	json_decref(dep);
	v = version_after_change(inf, "1");
	assert_string_equal(v, "1");
	free(v);
	free(inf);
}

/* The deployment of fm's alias (caller owns). */
static json_t *deployment_of(struct tf_store *st, const char *alias)
{
	json_t *dep = NULL;
	assert_int_equal(tf_registry_deployment(st, "fm", alias, &dep), 0);
	return dep;
}

/* The production deployment of fm (caller owns). */
static json_t *production(struct tf_store *st)
{
	return deployment_of(st, "production");
}

/* Deploys version v of fm as the canary of alias at pct with the rollout policy `policy`;
 * returns the id of the deployment it made (what requests_until_moved waits to see moved). */
static int64_t deploy_canary_of(struct tf_store *st, const char *alias, int64_t v, double pct,
                                const char *policy)
{
	struct tf_deploy_spec d = {
	    .model = "fm", .alias = alias, .version = v, .canary_percent = pct, .rollout = policy};
	json_t *dep = NULL;
	assert_int_equal(tf_registry_deploy(st, &d, &dep), 0);
	int64_t id = jint(dep, "id");
	json_decref(dep);
	return id;
}

static int64_t deploy_canary(struct tf_store *st, int64_t v, double pct, const char *policy)
{
	return deploy_canary_of(st, "production", v, pct, policy);
}

/* The deployment of fm's alias if it is no longer the one of id `from` (caller owns), else
 * NULL. */
static json_t *moved_from(struct tf_store *st, const char *alias, int64_t from)
{
	json_t *dep = deployment_of(st, alias);
	if (jint(dep, "id") != from)
		return dep;
	json_decref(dep);
	return NULL;
}

/* Sends body to path until the deployment of alias has moved from the one of id `from` (its
 * rollout policy at work), counting the answers by status; returns the deployment it moved to
 * (caller owns), after at most 60 s. */
static json_t *requests_until_moved_at(struct tf_store *st, const char *alias, const char *path,
                                       const char *body, int64_t from, int *ok, int *failed)
{
	json_t *dep = NULL;
	*ok = *failed = 0;
	double until = tf_now_monotonic() + 60;
	for (int i = 0; tf_now_monotonic() < until; i++) {
		struct resp r = call("POST", path, body);
		if (r.status == 200)
			++*ok;
		else
			++*failed;
		assert_true(r.status == 200 || r.status == 500);
		if (r.status == 500)
			assert_has(r.body, "not a finite number");
		resp_free(&r);
		if (i % 10 == 9 && (dep = moved_from(st, alias, from)))
			break;
	}
	assert_non_null(dep);
	return dep;
}

/* requests_until_moved_at for production, through fm's bare path. */
static json_t *requests_until_moved(struct tf_store *st, int64_t from, int *ok, int *failed)
{
	char *inf = infer_body();
	json_t *dep =
	    requests_until_moved_at(st, "production", "/v2/models/fm/infer", inf, from, ok, failed);
	free(inf);
	return dep;
}

/* A canary whose answers fail is rolled back by its rollout policy, the registry saying why
 * with the figures: a model that gives NaN (clients get 500s until then), and a bundle that
 * cannot be loaded (production answers its share meanwhile: no client sees an error). */
static void test_rollout_rolls_back_failing_canaries(void **state)
{
	(void)state;
	NEED_DATA();
	struct tf_store *st = open_home_production_1();
	const char *policy = "{\"max_error_rate\":0.1,\"min_requests\":8}";
	int64_t id = deploy_canary(st, 4, 50, policy);
	json_t *dep = production(st);
	assert_int_equal(jint(dep, "canary_version"), 4);
	json_decref(dep);
	int ok, failed;
	dep = requests_until_moved(st, id, &ok, &failed);
	fprintf(stderr, "NaN canary: %d answers, %d failed, then: %s\n", ok, failed,
	        jstr(dep, "reason"));
	assert_true(failed >= 8);
	assert_int_equal(jint(dep, "version"), 1);
	assert_true(json_is_null(json_object_get(dep, "canary_version")));
	const char *why = jstr(dep, "reason");
	assert_has(why, "rollback: canary version 4 failed");
	json_t *fig = json_object_get(dep, "figures");
	assert_true(jint(fig, "failures") >= 8);
	assert_true(json_number_value(json_object_get(fig, "error_rate")) > 0.1);
	json_decref(dep);

	id = deploy_canary(st, 3, 50, policy); /* the bundle cut short: UNAVAILABLE */
	dep = production(st);
	assert_int_equal(jint(dep, "canary_version"), 3);
	json_decref(dep);
	dep = requests_until_moved(st, id, &ok, &failed);
	assert_int_equal(failed, 0);
	why = jstr(dep, "reason");
	assert_has(why, "rollback: canary version 3 failed");
	assert_has(why, "UNAVAILABLE");
	json_decref(dep);
	tf_store_close(st);

	/* where people look: `tpuflow models show` and the API */
	tpuflow("show.out", NULL, "models", "show", "fm", (char *)NULL);
	assert_file_has("show.out", "rollback: canary version 3 failed");
	assert_file_has("show.out", "rollback: canary version 4 failed");
	struct resp r = call_at(NULL, "GET", "/api/v1/models/fm", tok_read, NULL);
	assert_int_equal(r.status, 200);
	json_t *d0 = json_array_get(json_object_get(r.json, "deployments"), 0);
	assert_has(jstr(d0, "reason"), "canary version 3");
	assert_true(jint(json_object_get(d0, "figures"), "requests") >= 8);
	resp_free(&r);
}

/* A canary over its p99 SLO is rolled back; one within its SLOs steps through its shares and
 * is promoted, each move recorded in order. */
static void test_rollout_p99_slo_and_promotion(void **state)
{
	(void)state;
	NEED_DATA();
	struct tf_store *st = open_home_production_1();
	/* 0.1 microseconds: any real answer is slower */
	int64_t id = deploy_canary(st, 2, 30, "{\"max_p99_ms\":0.0001,\"min_requests\":5}");
	int ok, failed;
	json_t *dep = requests_until_moved(st, id, &ok, &failed);
	assert_int_equal(failed, 0);
	const char *why = jstr(dep, "reason");
	assert_has(why, "rollback: canary version 2 p99");
	assert_has(why, "over the SLO of 0.0001 ms");
	assert_int_equal(jint(dep, "version"), 1);
	json_decref(dep);

	id = deploy_canary(st, 2, 20,
	                   "{\"steps\":[20,60],\"soak_s\":0,\"min_requests\":5,"
	                   "\"max_p99_ms\":60000,\"max_error_rate\":0.5}");
	dep = requests_until_moved(st, id, &ok, &failed);
	assert_int_equal(json_number_value(json_object_get(dep, "canary_percent")), 60);
	assert_has(jstr(dep, "reason"), "20% -> 60%");
	assert_non_null(json_object_get(json_object_get(dep, "rollout"), "steps"));
	id = jint(dep, "id");
	json_decref(dep);
	dep = requests_until_moved(st, id, &ok, &failed);
	assert_int_equal(failed, 0);
	assert_int_equal(jint(dep, "version"), 2);
	assert_true(json_is_null(json_object_get(dep, "canary_version")));
	assert_has(jstr(dep, "reason"), "promoted");
	json_decref(dep);
	int64_t v;
	assert_int_equal(tf_registry_resolve(st, "fm", "production", &v), 0);
	assert_int_equal(v, 2);
	assert_int_equal(tf_registry_set_alias(st, "fm", "production", 1), 0);
	tf_store_close(st);
}

/* The guard against production: a canary judged on its figures beside the stable version's
 * in the same window, with no absolute SLO. A canary failing where production does not, and
 * one slower than production by more than the allowed ratio, are rolled back; one within both
 * is promoted. The figures of both versions are recorded. */
static void test_rollout_guard_against_production(void **state)
{
	(void)state;
	NEED_DATA();
	struct tf_store *st = open_home_production_1();
	int64_t id =
	    deploy_canary(st, 4, 50, "{\"max_error_rate_vs_production\":0.05,\"min_requests\":8}");
	int ok, failed;
	json_t *dep = requests_until_moved(st, id, &ok, &failed);
	const char *why = jstr(dep, "reason");
	fprintf(stderr, "guard: %s\n", why);
	assert_has(why, "rollback: canary version 4 failed");
	assert_has(why, "production version 1 0 of");
	assert_has(why, "over the guard of 0.05");
	json_t *prod = json_object_get(json_object_get(dep, "figures"), "production");
	assert_int_equal(jint(prod, "version"), 1);
	assert_true(jint(prod, "requests") >= 8);
	assert_int_equal(jint(prod, "failures"), 0);
	assert_int_equal(jint(dep, "version"), 1);
	json_decref(dep);

	/* a ratio no answer can meet: the canary must be 1000x faster than production */
	id = deploy_canary(st, 2, 50, "{\"max_p99_ratio_vs_production\":0.001,\"min_requests\":8}");
	dep = requests_until_moved(st, id, &ok, &failed);
	assert_int_equal(failed, 0);
	why = jstr(dep, "reason");
	assert_has(why, "rollback: canary version 2 p99");
	assert_has(why, "over the guard of 0.001x");
	json_decref(dep);

	id = deploy_canary(
	    st, 2, 50,
	    "{\"max_p99_ratio_vs_production\":1000,\"max_error_rate_vs_production\":0.5,"
	    "\"min_requests\":8}");
	dep = requests_until_moved(st, id, &ok, &failed);
	assert_int_equal(failed, 0);
	why = jstr(dep, "reason");
	assert_has(why, "promoted: canary version 2");
	assert_has(why, "against production's");
	assert_int_equal(jint(dep, "version"), 2);
	json_decref(dep);
	assert_int_equal(tf_registry_set_alias(st, "fm", "production", 1), 0);
	tf_store_close(st);
}

/* A canary of another alias: its share of the requests naming that alias (/labels/staging)
 * goes to it, its policy rolls it back, production is untouched; by hand, `tpuflow models
 * promote fm staging` promotes a staging canary. */
static void test_rollout_other_alias(void **state)
{
	(void)state;
	NEED_DATA();
	struct tf_store *st = open_home_production_1();
	assert_int_equal(tf_registry_set_alias(st, "fm", "staging", 1), 0);
	json_t *dep = production(st);
	int64_t prod_id = jint(dep, "id");
	json_decref(dep);
	int64_t id =
	    deploy_canary_of(st, "staging", 4, 50, "{\"max_error_rate\":0.1,\"min_requests\":8}");
	dep = deployment_of(st, "staging");
	assert_int_equal(jint(dep, "canary_version"), 4);
	json_decref(dep);
	int64_t cv;
	assert_int_equal(tf_registry_resolve(st, "fm", "staging-canary", &cv), 0);
	assert_int_equal(cv, 4);
	/* the bare path (production) never reaches the staging canary */
	char *row = instances(0, 1);
	for (int i = 0; i < 40; i++)
		expect_status(call("POST", "/v1/models/fm:predict", row), 200);
	int ok, failed;
	dep = requests_until_moved_at(st, "staging", "/v1/models/fm/labels/staging:predict", row,
	                              id, &ok, &failed);
	assert_true(failed >= 8 && ok > 0); /* both sides of the split answered */
	const char *why = jstr(dep, "reason");
	assert_has(why, "rollback: canary version 4 failed");
	assert_string_equal(jstr(dep, "alias"), "staging");
	assert_int_equal(jint(dep, "version"), 1);
	assert_true(json_is_null(json_object_get(dep, "canary_version")));
	json_decref(dep);
	dep = production(st);
	assert_int_equal(jint(dep, "id"), prod_id);
	json_decref(dep);
	/* by hand */
	deploy_canary_of(st, "staging", 2, 10, NULL);
	tf_store_close(st);
	tpuflow("promote.out", NULL, "models", "promote", "fm", "staging", (char *)NULL);
	assert_file_has("promote.out", "fm 'staging' -> version 2 (canary promoted)");
	st = open_home();
	int64_t v;
	assert_int_equal(tf_registry_resolve(st, "fm", "staging", &v), 0);
	assert_int_equal(v, 2);
	tf_store_close(st);
	free(row);
}

/* One client of the alias-move test: keyed requests on the bare path, one after another on
 * one connection, until told to stop. */
struct hammer {
	pthread_t t;
	const char *body;
	volatile int *stop;
	int requests, failed; /* answers, and those that were not 200 (or no answer) */
	int seen[8], nseen;   /* the versions that answered, each change of version noted */
	char why[256];        /* the first failure */
};

static void *hammer_run(void *arg)
{
	struct hammer *h = arg;
	char auth[128];
	CURL *c = infer_handle(h->body, auth);
	struct curl_slist *hd = curl_slist_append(NULL, auth);
	hd = curl_slist_append(hd, "Content-Type: application/json");
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, hd);
	while (!*h->stop) {
		struct resp r = {0};
		long code = 0;
		curl_easy_setopt(c, CURLOPT_WRITEDATA, &r);
		CURLcode cc = curl_easy_perform(c);
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
		r.json = r.body ? json_loads(r.body, 0, NULL) : NULL;
		const char *v = jstr(r.json, "model_version");
		h->requests++;
		if (cc != CURLE_OK || code != 200 || !v) {
			if (!h->failed++)
				snprintf(h->why, sizeof(h->why), "curl %d, status %ld: %.200s",
				         (int)cc, code, r.body ? r.body : "");
		} else if (!h->nseen || h->seen[h->nseen - 1] != atoi(v)) {
			if (h->nseen < 8)
				h->seen[h->nseen++] = atoi(v);
		}
		resp_free(&r);
	}
	curl_slist_free_all(hd);
	curl_easy_cleanup(c);
	return NULL;
}

/* Every client has answered at least n more requests than in before[] and last saw v. */
static int all_past(struct hammer *h, int nh, const int *before, int n, int v)
{
	for (int i = 0; i < nh; i++)
		if (h[i].requests < before[i] + n || !h[i].nseen || h[i].seen[h[i].nseen - 1] != v)
			return 0;
	return 1;
}

/* Moving production under load: 8 clients keep predicting on the bare path while the alias
 * moves from version 1 to 2 by another process (`tpuflow models alias`), then back to 1 in
 * this one. No request fails, and every client's answers switch to the new version and never
 * go back to the old one. */
static void test_alias_move_under_load(void **state)
{
	(void)state;
	NEED_DATA();
	struct tf_store *st = open_home();
	struct tf_deploy_spec d = {.model = "fm", .alias = "production", .version = 1};
	assert_int_equal(tf_registry_deploy(st, &d, NULL), 0); /* no canary */
	char *inf = infer_body();
	enum { NH = 8 };
	struct hammer h[NH];
	volatile int stop = 0;
	int before[NH];
	for (int i = 0; i < NH; i++) {
		h[i] = (struct hammer){.body = inf, .stop = &stop};
		assert_int_equal(pthread_create(&h[i].t, NULL, hammer_run, &h[i]), 0);
	}
	memset(before, 0, sizeof(before));
	double until = tf_now_monotonic() + 60;
	while (!all_past(h, NH, before, 20, 1) && tf_now_monotonic() < until)
		usleep(10 * 1000);
	for (int i = 0; i < NH; i++)
		before[i] = h[i].requests;
	tpuflow("alias.out", "alias.out", "models", "alias", "fm", "production", "2", (char *)NULL);
	while (!all_past(h, NH, before, 20, 2) && tf_now_monotonic() < until)
		usleep(10 * 1000);
	for (int i = 0; i < NH; i++)
		before[i] = h[i].requests;
	assert_int_equal(tf_registry_set_alias(st, "fm", "production", 1), 0);
	while (!all_past(h, NH, before, 20, 1) && tf_now_monotonic() < until)
		usleep(10 * 1000);
	stop = 1;
	int total = 0;
	for (int i = 0; i < NH; i++) {
		pthread_join(h[i].t, NULL);
		total += h[i].requests;
		if (h[i].failed)
			fprintf(stderr, "client %d: %d failed, first: %s\n", i, h[i].failed,
			        h[i].why);
		assert_int_equal(h[i].failed, 0);
		if (h[i].nseen != 3)
			fprintf(stderr, "client %d saw versions %d %d %d %d ...\n", i, h[i].seen[0],
			        h[i].seen[1], h[i].seen[2], h[i].seen[3]);
		/* 1, then 2, then 1: switched each time, never back before the next move */
		assert_int_equal(h[i].nseen, 3);
		assert_int_equal(h[i].seen[0], 1);
		assert_int_equal(h[i].seen[1], 2);
		assert_int_equal(h[i].seen[2], 1);
	}
	fprintf(stderr, "alias moved twice under %d requests from %d clients: none failed\n", total,
	        NH);
	tf_store_close(st);
	free(inf);
}

/* Starts `tpuflow serve --model fm` on a free port with the extra options (NULL-ended; a
 * --model there serves that model instead), waits until it is ready; its URL into url. */
static pid_t serve_spawn(const char *const *extra, char url[128])
{
	/* a free port: bind port 0, read it, close (the command binds it right after) */
	char listen[64];
	int port = 0;
	for (int tries = 0; tries < 5 && !port; tries++) {
		struct tf_web *probe;
		struct tf_web_opts po = {.home = home, .listen = "127.0.0.1:0"};
		char err[256];
		assert_int_equal(tf_web_start(&po, &probe, err, sizeof err), 0);
		port = tf_web_port(probe);
		tf_web_stop(probe);
	}
	snprintf(listen, sizeof(listen), "127.0.0.1:%d", port);
	snprintf(url, 128, "http://%s", listen);
	char *argv[16] = {
	    getenv("TPUFLOW_BIN"), "--home", home, "serve", "--model", "fm", "--listen", listen};
	int n = 8;
	for (; extra && *extra && n < 15; extra++)
		argv[n++] = (char *)*extra;
	argv[n] = NULL;
	pid_t pid = tf_test_spawn(argv, "serve.out", "serve.out");
	assert_true(pid > 0);
	struct resp r = {0};
	for (int i = 0; i < 100; i++) {
		r = call_at(url, "GET", "/v2/health/ready", NULL, NULL);
		if (r.status == 200)
			break;
		resp_free(&r);
		usleep(100 * 1000);
	}
	assert_int_equal(r.status, 200);
	resp_free(&r);
	return pid;
}

/* Ends the `tpuflow serve` of serve_spawn; it exits 0. */
static void serve_stop(pid_t pid)
{
	kill(pid, SIGTERM);
	assert_int_equal(tf_test_wait_exit(pid), 0);
}

/* The readiness of `tpuflow serve` (/v2/health/ready) and of a model (/v2/models/NAME/ready)
 * is that of its production version, or, for a model served under other labels alone, of
 * every one of them: such a model is ready (it used to wait for a 'production' alias
 * forever), unless one of its labels points at a version that cannot be loaded, until the
 * label is moved; a broken label beside a sound production fails its own requests only. */
static void test_serve_ready(void **state)
{
	(void)state;
	NEED_DATA();
	struct tf_store *st = open_home();
	struct tf_model_version_spec mv = {
	    .model = "lbl", .run_id = "r1", .step = "l", .bundle = "models/fm2/"};
	int64_t v, bad;
	assert_int_equal(tf_registry_register(st, &mv, &v, NULL), 0);
	assert_int_equal(tf_registry_set_alias(st, "lbl", "staging", v), 0);
	expect_status(call("GET", "/v2/models/lbl/ready", NULL), 200);
	char url[128];
	const char *const lbl[] = {"--auth", "none", "--model", "lbl", NULL};
	pid_t pid = serve_spawn(lbl, url); /* ready, or it fails */
	expect_status(call_at(url, "GET", "/v2/models/lbl/ready", NULL, NULL), 200);
	expect_status(call_at(url, "POST", "/v1/models/lbl/labels/staging:predict", NULL,
	                      "{\"instances\":[[0]]}"),
	              400); /* answered by the model (a short example), not refused as unknown */

	/* a second label on a damaged bundle: not ready until it is moved */
	struct tf_model_version_spec dv = {
	    .model = "lbl", .run_id = "r1", .step = "l2", .bundle = "models/bad/"};
	assert_int_equal(tf_registry_register(st, &dv, &bad, NULL), 0);
	assert_int_equal(tf_registry_set_alias(st, "lbl", "broken", bad), 0);
	expect_error(call("GET", "/v2/models/lbl/ready", NULL), 400, "label 'broken'");
	struct resp r = {0};
	for (int i = 0; i < 100 && r.status != 400; i++) { /* the server sees the commit */
		resp_free(&r);
		r = call_at(url, "GET", "/v2/health/ready", NULL, NULL);
		if (r.status != 400)
			usleep(50 * 1000);
	}
	assert_error(&r, 400, "model 'lbl' is not ready: label 'broken': version");
	resp_free(&r);
	expect_status(call_at(url, "POST", "/v1/models/lbl/labels/staging:predict", NULL,
	                      "{\"instances\":[[0]]}"),
	              400); /* the other label answers meanwhile */
	assert_int_equal(tf_registry_set_alias(st, "lbl", "broken", v), 0);
	for (int i = 0; i < 100 && r.status != 200; i++) {
		resp_free(&r);
		r = call_at(url, "GET", "/v2/health/ready", NULL, NULL);
		if (r.status != 200)
			usleep(50 * 1000);
	}
	assert_int_equal(r.status, 200);
	resp_free(&r);
	serve_stop(pid);

	/* fm's 'broken' label points at version 3, whose bundle is damaged: fm stays ready */
	expect_status(call("GET", "/v2/models/fm/ready", NULL), 200);
	const char *const fm[] = {"--auth", "none", NULL};
	pid = serve_spawn(fm, url); /* ready, or it fails */
	expect_status(call_at(url, "POST", "/v1/models/fm/labels/broken:predict", NULL,
	                      "{\"instances\":[[0]]}"),
	              404); /* UNAVAILABLE, as test_tfs_errors has it */
	serve_stop(pid);
	tf_store_close(st);
}

/* `tpuflow serve --model fm`: predictions and health only, one model. */
static void test_serve_command(void **state)
{
	(void)state;
	NEED_DATA();
	char url[128];
	const char *const no_auth[] = {"--auth", "none", NULL};
	pid_t pid = serve_spawn(no_auth, url);
	char *row = instances(0, 2);
	struct resp r = call_at(url, "POST", "/v1/models/fm:predict", NULL, row);
	assert_int_equal(r.status, 200);
	assert_matrix(json_object_get(r.json, "predictions"), 2, NULL);
	resp_free(&r);
	expect_error(call_at(url, "POST", "/v1/models/empty/versions/1:predict", NULL, row), 404,
	             "serves model 'fm' only");
	expect_status(call_at(url, "GET", "/api/v1/runs", NULL, NULL), 404);
	expect_status(call_at(url, "GET", "/healthz", NULL, NULL), 200);
	serve_stop(pid);
	free(row);
}

/* `tpuflow serve` answers /metrics (a read token, not a predict one) with its figures per
 * version, in a text promtool accepts. */
static void test_serve_metrics(void **state)
{
	(void)state;
	NEED_DATA();
	if (system("command -v promtool >/dev/null 2>&1")) {
		fprintf(stderr, "test_serve_metrics: promtool missing (Debian prometheus)\n");
		skip();
	}
	tf_store_close(open_home_production_1());
	char url[128];
	pid_t pid = serve_spawn(NULL, url);
	char *row = instances(0, 1);
	for (int i = 0; i < 3; i++)
		expect_status(call_at(url, "POST", "/v1/models/fm:predict", tok_predict, row), 200);
	expect_status(call_at(url, "GET", "/metrics", tok_predict, NULL), 403);
	struct resp r = call_at(url, "GET", "/metrics", tok_read, NULL);
	assert_int_equal(r.status, 200);
	assert_has(r.body, "tpuflow_serving_requests_total{model=\"fm\",version=\"1\"} 3\n");
	assert_has(r.body, "tpuflow_serving_errors_total{model=\"fm\",version=\"1\"} 0\n");
	assert_has(r.body, "tpuflow_serving_request_duration_seconds_bucket{model=\"fm\","
	                   "version=\"1\",le=\"+Inf\"} 3\n");
	assert_has(r.body, "tpuflow_serving_request_duration_seconds_count{model=\"fm\","
	                   "version=\"1\"} 3\n");
	char path[600], cmd[1400];
	snprintf(path, sizeof(path), "%s/serve-metrics.txt", home);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(r.body, f);
	fclose(f);
	resp_free(&r);
	snprintf(cmd, sizeof(cmd), "promtool check metrics < '%s'", path);
	assert_int_equal(system(cmd), 0);
	serve_stop(pid);
	free(row);
}

/* tpuflow serve has no rate limit unless --rate gives one: one token makes more requests than
 * the daemon's default bucket holds (1000) without a 429; with --rate 1 the bucket (10) runs
 * dry within 30 quick requests, and the 429 says when to retry. */
static void test_serve_rate(void **state)
{
	(void)state;
	NEED_DATA();
	char url[128];
	pid_t pid = serve_spawn(NULL, url);
	int ok = 0;
	for (int i = 0; i < 1100; i++) {
		struct resp r = call_at(url, "GET", "/v1/models/fm", tok_predict, NULL);
		ok += r.status == 200;
		resp_free(&r);
	}
	assert_int_equal(ok, 1100);
	serve_stop(pid);
	const char *const slow[] = {"--rate", "1", NULL};
	pid = serve_spawn(slow, url);
	int limited = 0;
	for (int i = 0; i < 30 && !limited; i++) {
		struct resp r = call_at(url, "GET", "/v1/models/fm", tok_predict, NULL);
		assert_true(r.status == 200 || r.status == 429);
		limited = r.status == 429;
		if (limited)
			assert_has(r.body, "requests per second for this token");
		resp_free(&r);
	}
	assert_true(limited);
	serve_stop(pid);
}

/* The answer of path (a prediction) to body, as bytes (new). */
static char *answer_of(const char *path, const char *body)
{
	struct resp r = call("POST", path, body);
	assert_int_equal(r.status, 200);
	char *text = strdup(r.body);
	resp_free(&r);
	return text;
}

/* The comparison thread, parked: its signal handler tells park_fd and waits on unpark_fd. */
static int park_fd[2], unpark_fd[2];

static void park_here(int sig)
{
	(void)sig;
	int saved = errno;
	char c = 0;
	if (write(park_fd[1], &c, 1) == 1)
		while (read(unpark_fd[0], &c, 1) < 0 && errno == EINTR)
			;
	errno = saved;
}

/* The id of this process's thread named name that is blocked in a futex (so it holds no lock
 * it is not waiting for), within 60 s; 0 when there is none. */
static pid_t thread_waiting(const char *name)
{
	char comm[64], futex[24];
	snprintf(comm, sizeof(comm), "%s\n", name);
	snprintf(futex, sizeof(futex), "%ld ", (long)SYS_futex);
	for (double until = tf_now_monotonic() + 60; tf_now_monotonic() < until; usleep(1000)) {
		DIR *d = opendir("/proc/self/task");
		struct dirent *de;
		pid_t tid = 0;
		while (d && !tid && (de = readdir(d))) {
			char path[300], text[128] = "";
			snprintf(path, sizeof(path), "/proc/self/task/%s/comm", de->d_name);
			FILE *f = fopen(path, "r");
			if (f && fgets(text, sizeof(text), f) && !strcmp(text, comm)) {
				fclose(f);
				snprintf(path, sizeof(path), "/proc/self/task/%s/syscall", de->d_name);
				f = fopen(path, "r");
				if (f && fgets(text, sizeof(text), f) && !strncmp(text, futex, strlen(futex)))
					tid = atoi(de->d_name);
			}
			if (f)
				fclose(f);
		}
		if (d)
			closedir(d);
		if (tid)
			return tid;
	}
	return 0;
}

/* The shadow figures of version v (rows, differ, pending), once pending is `until` (at most
 * 60 s; -1: at once). */
static void shadow_of(int64_t v, json_int_t until, json_int_t out[3])
{
	char path[64];
	snprintf(path, sizeof(path), "/v1/models/fm/versions/%lld", (long long)v);
	for (double end = tf_now_monotonic() + 60;; usleep(2000)) {
		struct resp r = call("GET", path, NULL);
		assert_int_equal(r.status, 200);
		json_t *sh = json_object_get(
		    json_object_get(
		        json_array_get(json_object_get(r.json, "model_version_status"), 0),
		        "tpuflow_stats"),
		    "shadow");
		out[0] = jint(sh, "rows");
		out[1] = jint(sh, "differ");
		out[2] = jint(sh, "pending");
		resp_free(&r);
		if (until < 0 || out[2] == until || tf_now_monotonic() > end)
			break;
	}
	if (until >= 0)
		assert_int_equal(out[2], until);
}

/* The shadow comparison: a canary whose every predicted class differs from production's (its
 * output layer's classes rotated) is rolled back naming the disagreement, an identical-weights
 * canary is promoted under a bound of 0, and the shadow never changes what a client receives:
 * each answer of the bare path is byte for byte the answer of the version that gave it. */
static void test_rollout_shadow_disagreement(void **state)
{
	(void)state;
	NEED_DATA();
	struct tf_store *st = open_home_production_1();
	struct tf_model_version_spec rot = {
	    .model = "fm", .run_id = "r1", .step = "f", .bundle = "models/rotated/"};
	struct tf_model_version_spec same = {
	    .model = "fm", .run_id = "r1", .step = "g", .bundle = "models/same/"};
	int64_t vr, vs;
	assert_int_equal(tf_registry_register(st, &rot, &vr, NULL), 0);
	assert_int_equal(tf_registry_register(st, &same, &vs, NULL), 0);

	/* bit identity, under a policy that judges nothing yet */
	int64_t id = deploy_canary(
	    st, vr, 50, "{\"max_disagreement_vs_production\":0.1,\"min_requests\":1000000}");
	char vpath[2][64], v2path[2][64];
	snprintf(vpath[0], sizeof(vpath[0]), "/v1/models/fm/versions/%lld:predict", (long long)vr);
	snprintf(vpath[1], sizeof(vpath[1]), "/v1/models/fm/versions/1:predict");
	snprintf(v2path[0], sizeof(v2path[0]), "/v2/models/fm/versions/%lld/infer", (long long)vr);
	snprintf(v2path[1], sizeof(v2path[1]), "/v2/models/fm/versions/1/infer");
	int canary[2] = {0, 0};
	for (size_t i = 0; i < 40; i++) {
		int v2 = i % 2;
		char *list = examples(i, 1 + i % 3, 0);
		char *body = v2 ? tf_xasprintf("{\"inputs\":[{\"name\":\"image\",\"shape\":[%zu,784],"
		                               "\"datatype\":\"UINT8\",\"data\":%s}]}",
		                               1 + i % 3, list)
		                : body_of("{\"instances\":%s}", list);
		char *got = answer_of(v2 ? "/v2/models/fm/infer" : "/v1/models/fm:predict", body);
		char *of_canary = answer_of(v2 ? v2path[0] : vpath[0], body);
		char *of_prod = answer_of(v2 ? v2path[1] : vpath[1], body);
		assert_true(strcmp(of_canary, of_prod) != 0); /* the rotated classes show */
		if (!strcmp(got, of_canary))
			canary[v2]++;
		else
			assert_string_equal(got, of_prod);
		free(list);
		free(body);
		free(got);
		free(of_canary);
		free(of_prod);
	}
	fprintf(stderr, "shadowed canary: %d of 20 TF Serving and %d of 20 v2 answers\n",
	        canary[0], canary[1]);
	assert_true(canary[0] > 0 && canary[1] > 0);
	/* the shadow ran: production answered the canary's rows too, and every class differed */
	json_int_t sh[3];
	shadow_of(vr, 0, sh); /* once every comparison is made */
	assert_true(sh[0] >= 1);
	assert_int_equal(sh[1], sh[0]);

	/* judged: rolled back, naming the disagreement, with the figures */
	id = deploy_canary(st, vr, 50, "{\"max_disagreement_vs_production\":0.1,\"min_requests\":10}");
	int ok, failed;
	json_t *dep = requests_until_moved(st, id, &ok, &failed);
	assert_int_equal(failed, 0);
	const char *why = jstr(dep, "reason");
	fprintf(stderr, "shadow: %s\n", why);
	char want[128];
	snprintf(want, sizeof(want), "rollback: canary version %lld disagreed with production version 1",
	         (long long)vr);
	assert_has(why, want);
	assert_has(why, "over the guard of 0.1 (a row differs in the predicted class)");
	assert_int_equal(jint(dep, "version"), 1);
	json_t *fig = json_object_get(json_object_get(dep, "figures"), "shadow");
	assert_true(jint(fig, "rows") >= 10);
	assert_int_equal(jint(fig, "differ"), jint(fig, "rows"));
	json_decref(dep);

	/* the same weights under another version: no row differs, promoted under a bound of 0 */
	id = deploy_canary(st, vs, 50, "{\"max_disagreement_vs_production\":0,\"min_requests\":10}");
	dep = requests_until_moved(st, id, &ok, &failed);
	assert_int_equal(failed, 0);
	why = jstr(dep, "reason");
	snprintf(want, sizeof(want), "promoted: canary version %lld", (long long)vs);
	assert_has(why, want);
	assert_has(why, "against production's");
	fig = json_object_get(json_object_get(dep, "figures"), "shadow");
	assert_true(jint(fig, "rows") >= 10);
	assert_int_equal(jint(fig, "differ"), 0);
	json_decref(dep);
	assert_int_equal(tf_registry_set_alias(st, "fm", "production", 1), 0);
	tf_store_close(st);
}

/* The shadow comparison is off the request path: production answers the canary's requests
 * on the comparison thread, so no client answer waits for it. With that thread parked (held
 * in a signal handler), the canary's answers still come and their comparisons wait, counted
 * as pending, up to the queue's bound; past it a comparison is made on the connection's
 * thread once its answer is sent. Released, it makes them all, each row counted as before. */
static void test_shadow_off_request_path(void **state)
{
	(void)state;
	NEED_DATA();
	struct tf_store *st = open_home_production_1();
	struct tf_model_version_spec rot = {
	    .model = "fm", .run_id = "r1", .step = "f", .bundle = "models/rotated/"};
	int64_t vr;
	assert_int_equal(tf_registry_register(st, &rot, &vr, NULL), 0);
	deploy_canary(st, vr, 50,
	              "{\"max_disagreement_vs_production\":0.5,\"min_requests\":1000000}");
	char *inf = infer_body(), want[32];
	snprintf(want, sizeof(want), "\"model_version\":\"%lld\"", (long long)vr);
	/* until the canary has answered once and its comparison is made: the thread is up */
	for (int answered = 0; !answered;) {
		struct resp r = call("POST", "/v2/models/fm/infer", inf);
		assert_int_equal(r.status, 200);
		answered = strstr(r.body, want) != NULL;
		resp_free(&r);
	}
	json_int_t before[3], now[3];
	shadow_of(vr, 0, before);
	pid_t tid = thread_waiting("tpuflow-shadow");
	assert_true(tid > 0);
	assert_int_equal(pipe(park_fd), 0);
	assert_int_equal(pipe(unpark_fd), 0);
	struct sigaction sa = {.sa_handler = park_here}, old;
	sigemptyset(&sa.sa_mask);
	assert_int_equal(sigaction(SIGUSR2, &sa, &old), 0);
	assert_int_equal(tgkill(getpid(), tid, SIGUSR2), 0);
	char c;
	assert_int_equal(read(park_fd[0], &c, 1), 1);
	/* parked: the canary's answers come all the same, their comparisons wait */
	int canary = 0;
	while (canary < TF_SERVE_SHADOW_QUEUE + 5) {
		struct resp r = call("POST", "/v2/models/fm/infer", inf);
		assert_int_equal(r.status, 200);
		canary += strstr(r.body, want) != NULL;
		resp_free(&r);
		if (canary == 4) {
			shadow_of(vr, 4, now);
			assert_int_equal(now[0], before[0]);
		}
	}
	/* past the bound: those made once their answers were sent, the queue still waiting */
	shadow_of(vr, TF_SERVE_SHADOW_QUEUE, now);
	assert_int_equal(now[0] - before[0], canary - TF_SERVE_SHADOW_QUEUE);
	assert_int_equal(write(unpark_fd[1], "", 1), 1);
	shadow_of(vr, 0, now);
	assert_int_equal(now[0] - before[0], canary); /* one row each */
	assert_int_equal(now[1] - before[1], canary); /* the rotated classes: every row differs */
	fprintf(stderr, "shadow: %d comparisons, %d of them queued while the thread was parked\n",
	        canary, TF_SERVE_SHADOW_QUEUE);
	assert_int_equal(sigaction(SIGUSR2, &old, NULL), 0);
	for (int i = 0; i < 2; i++) {
		close(park_fd[i]);
		close(unpark_fd[i]);
	}
	free(inf);
	assert_int_equal(tf_registry_set_alias(st, "fm", "production", 1), 0);
	tf_store_close(st);
}

/* Two serving processes judge one rollout together: the in-process server and a `tpuflow
 * serve` on the same home each answer 12 requests of a NaN-answering canary, and its policy
 * needs 20. Neither reaches 20 alone; the figures each shares through the registry do, and
 * one of them rolls the canary back with the requests of both. */
static void test_rollout_several_servers(void **state)
{
	(void)state;
	NEED_DATA();
	struct tf_store *st = open_home_production_1();
	char url[128];
	int64_t id = deploy_canary(st, 4, 50, "{\"max_error_rate\":0.1,\"min_requests\":20}");
	const char *const no_auth[] = {"--auth", "none", NULL};
	pid_t pid = serve_spawn(no_auth, url);
	/* both read the deployment, then their windows begin at a tick of each; the requests
	 * wait until both have shared their (empty) figures, which each does only once its
	 * window has begun (a sleep instead lost the race to a late tick on a loaded machine) */
	expect_status(call("GET", "/v1/models/fm", NULL), 200);
	expect_status(call_at(url, "GET", "/v1/models/fm", NULL, NULL), 200);
	int64_t sharing = 0;
	for (int i = 0; i < 300 && sharing < 2; i++) { /* up to 30 s */
		usleep(100 * 1000);
		assert_int_equal(tf_store_query_int(st, &sharing,
		                                    "SELECT count(*) FROM serving_figures WHERE "
		                                    "deployment_id=?",
		                                    "i", id),
		                 0);
	}
	assert_int_equal(sharing, 2);
	char *inf = infer_body();
	for (int i = 0; i < 24; i++)
		expect_status(call_at(i % 2 ? url : NULL, "POST", "/v2/models/fm/versions/4/infer",
		                      i % 2 ? NULL : tok_predict, inf),
		              500);
	free(inf);
	json_t *dep = NULL;
	for (int i = 0; i < 200 && !(dep = moved_from(st, "production", id)); i++) /* up to 20 s */
		usleep(100 * 1000);
	assert_non_null(dep);
	const char *why = jstr(dep, "reason");
	char *figs = json_dumps(json_object_get(dep, "figures"), JSON_COMPACT);
	fprintf(stderr, "two servers: %s; figures %s\n", why, figs);
	free(figs);
	assert_has(why, "rollback: canary version 4 failed 24 of 24 requests");
	json_t *fig = json_object_get(dep, "figures");
	assert_int_equal(jint(fig, "servers"), 2);
	assert_int_equal(jint(dep, "version"), 1);
	json_decref(dep);
	serve_stop(pid);
	tf_store_close(st);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_tfs_row_and_columnar),
	    cmocka_unit_test(test_tfs_errors),
	    cmocka_unit_test(test_tfs_status_metadata_auth),
	    cmocka_unit_test(test_serving_paths_errors_have_error),
	    cmocka_unit_test(test_revoked_token_refused),
	    cmocka_unit_test(test_tfs_nonfinite),
	    cmocka_unit_test(test_v2),
	    cmocka_unit_test(test_bit_identity_with_predict),
	    cmocka_unit_test(test_alias_move),
	    cmocka_unit_test(test_canary_split),
	    cmocka_unit_test(test_rollout_rolls_back_failing_canaries),
	    cmocka_unit_test(test_rollout_p99_slo_and_promotion),
	    cmocka_unit_test(test_rollout_guard_against_production),
	    cmocka_unit_test(test_rollout_other_alias),
	    cmocka_unit_test(test_alias_move_under_load),
	    cmocka_unit_test(test_serve_ready),
	    cmocka_unit_test(test_serve_command),
	    cmocka_unit_test(test_serve_metrics),
	    cmocka_unit_test(test_serve_rate),
	    cmocka_unit_test(test_rollout_several_servers),
	    cmocka_unit_test(test_rollout_shadow_disagreement),
	    cmocka_unit_test(test_shadow_off_request_path),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}

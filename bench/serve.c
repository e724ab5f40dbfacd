/* serve.c — model serving's throughput and latency against the HTTP floor, in the same run:
 *
 *   - POST /v1/models/fmnist:predict, one Fashion-MNIST example (784 pixels) per request, on
 *     the pipeline's model shape (784-256-128-10, weights as initialised: inference costs the
 *     same whatever they are), through the real server (web/http.c: routing, predict-scope
 *     token check, rate limit, registry alias lookup; web/serve*.c: JSON in, shape checks,
 *     preprocessing, the bundle's MXU-numerics forward pass, 9-digit floats out), wrk at 64
 *     connections (2 threads);
 *   - the HTTP floor: a minimal libmicrohttpd handler in the same threading mode reading the
 *     same POST body and answering a fixed body of the predict answer's size, same wrk
 *     settings.
 * The two take turns, floor then predict, for several rounds (TF_BENCH_SERVE_ROUNDS, 3, of
 * TF_BENCH_SERVE_SECONDS, 5 s, each), and each figure is the median over the rounds, the
 * ratio the median of each round's ratio: on a shared machine the load moves between two
 * long runs more than between two short neighbours. Each round also gives:
 *   - the predict handler's own p50/p99 (GET /v1/models/fmnist, tpuflow_stats: from the start
 *     of the handler to its answer, over its last 1024 answers), apart from the time a request
 *     waits for a thread to be scheduled, which wrk's figures include;
 *   - the mean latency Little's law gives a closed loop of 64 connections (64 / requests/s),
 *     and what the CPU time alone allows: 64 x (server + wrk CPU per request) / cores, since
 *     the cores cannot answer faster than the CPU a request costs. p99 cannot be below the
 *     mean;
 *   - the same pair at 1 connection (wrk -t1 -c1): the latency of a request that does not
 *     queue behind others;
 *   - the cost of a canary's shadow comparison (docs/serving.md): the same predict with a
 *     canary of the same weights taking 99% of the requests under a rollout policy that never
 *     moves it, without and then with the shadow comparison (production answers each canary
 *     request too, on the comparison thread); the difference in server CPU per request, over
 *     0.99, is what the shadow costs per canary request.
 *
 * Goals (issue 15): p99 <= 1 ms and >= 0.5x the floor's requests/s. Needs wrk and the
 * Fashion-MNIST files.
 */
#include "common/common.h"
#include "ml/bundle.h"
#include "orchestrator/registry.h"
#include "storage/objstore.h"
#include "web/server.h"
#include "web/tokens.h"

#include "bench/httpbench.h"

#include <curl/curl.h>
#include <jansson.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#define FMNIST "/usr/share/datasets/fashion-mnist"
#define MAX_ROUNDS 9

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* CPU seconds this process (both servers) has used, or with children, the CPU seconds of the
 * children waited for (wrk, through system()). */
static double cpu_seconds(int children)
{
	struct rusage u;
	getrusage(children ? RUSAGE_CHILDREN : RUSAGE_SELF, &u);
	return (double)u.ru_utime.tv_sec + (double)u.ru_stime.tv_sec +
	       ((double)u.ru_utime.tv_usec + (double)u.ru_stime.tv_usec) * 1e-6;
}

/* The median of v[0..n) (n <= MAX_ROUNDS). */
static double median(const double *v, int n)
{
	double s[MAX_ROUNDS];
	memcpy(s, v, (size_t)n * sizeof(double));
	qsort(s, (size_t)n, sizeof(double), cmp_double);
	return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

static size_t keep(char *d, size_t sz, size_t nm, void *u)
{
	char **p = u;
	size_t have = *p ? strlen(*p) : 0;
	*p = realloc(*p, have + sz * nm + 1);
	memcpy(*p + have, d, sz * nm);
	(*p)[have + sz * nm] = 0;
	return sz * nm;
}

/* The predict handler's p50/p99 over its last answers (tpuflow_stats of GET /v1/models/NAME);
 * 0 when they cannot be read. */
static void handler_latency(CURL *c, const char *status_url, double *p50, double *p99)
{
	char *got = NULL;
	*p50 = *p99 = 0;
	curl_easy_setopt(c, CURLOPT_URL, status_url);
	curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &got);
	if (curl_easy_perform(c) == CURLE_OK && got) {
		json_t *j = json_loads(got, 0, NULL);
		json_t *st = json_object_get(
		    json_array_get(json_object_get(j, "model_version_status"), 0), "tpuflow_stats");
		*p50 = json_number_value(json_object_get(st, "p50_ms"));
		*p99 = json_number_value(json_object_get(st, "p99_ms"));
		json_decref(j);
	}
	free(got);
}

/* Makes the model fmnist v1 (production) and v2 (the same weights, another bundle: the canary
 * of the shadow figures) in home; 0 or -1 with a message. */
static int make_model(const char *home, char token[TF_TOKEN_LEN + 1])
{
	char err[512], *key = NULL, *url = tf_objstore_home_url(home);
	struct tf_objstore *s = NULL;
	struct tf_dataset *d = NULL;
	struct tf_prep_opts po = {.source = "fashion-mnist",
	                          .path = FMNIST,
	                          .shards = 1,
	                          .limit_train = 1024,
	                          .limit_test = 64};
	int rc = tf_objstore_open(url, &s, err, sizeof err);
	free(url);
	if (!rc)
		rc = tf_dataset_prep(s, "ds/", &po, &key, NULL, err, sizeof err);
	if (!rc)
		rc = tf_dataset_open(s, key, &d, err, sizeof err);
	struct tf_mlp m;
	size_t hidden[2] = {256, 128};
	struct tf_mxu_cfg mxu;
	tf_mxu_cfg_init(&mxu);
	if (!rc && !(rc = tf_mlp_init(&m, d->dim, hidden, 2, d->num_classes, 0))) {
		tf_mlp_init_params(&m, 1);
		rc = tf_bundle_export(s, "models/fmnist/", &m, d, &mxu, NULL, err, sizeof err);
		if (!rc)
			rc = tf_bundle_export(s, "models/fmnist2/", &m, d, &mxu, NULL, err,
			                      sizeof err);
		tf_mlp_release(&m);
	}
	tf_dataset_free(d);
	free(key);
	tf_objstore_free(s);
	struct tf_store *st = NULL;
	int64_t v;
	struct tf_model_version_spec mv = {
	    .model = "fmnist", .run_id = "bench", .step = "train", .bundle = "models/fmnist/"};
	struct tf_model_version_spec mv2 = {
	    .model = "fmnist", .run_id = "bench", .step = "train2", .bundle = "models/fmnist2/"};
	if (!rc && !(rc = tf_store_open_home(home, &st, err, sizeof err))) {
		rc = tf_registry_register(st, &mv, &v, NULL) ||
		     tf_registry_set_alias(st, "fmnist", "production", v) ||
		     tf_registry_register(st, &mv2, &v, NULL) ||
		     tf_token_create(st, "bench", TF_SCOPE_PREDICT, 0, token, NULL);
		if (rc)
			snprintf(err, sizeof err, "registry: %s", tf_store_errmsg(st));
		tf_store_close(st);
	}
	if (rc)
		fprintf(stderr, "serve bench: %s\n", err);
	return rc ? -1 : 0;
}

/* Deploys fmnist: v1 alone (policy NULL), or v2 as a canary at 99% under policy; 0 or -1. */
static int deploy(const char *home, const char *policy)
{
	struct tf_store *st = NULL;
	char err[256];
	struct tf_deploy_spec d = {.model = "fmnist",
	                           .alias = "production",
	                           .version = policy ? 2 : 1,
	                           .canary_percent = policy ? 99 : 0,
	                           .rollout = policy};
	int rc = tf_store_open_home(home, &st, err, sizeof err);
	if (!rc && (rc = tf_registry_deploy(st, &d, NULL)))
		snprintf(err, sizeof err, "deploy: %s", tf_store_errmsg(st));
	tf_store_close(st);
	if (rc)
		fprintf(stderr, "serve bench: %s\n", err);
	return rc ? -1 : 0;
}

/* Policies that never move the canary: without and with the shadow comparison. */
#define NO_SHADOW "{\"min_requests\":1000000000}"
#define SHADOW "{\"min_requests\":1000000000,\"max_disagreement_vs_production\":1}"

int main(void)
{
	if (system("command -v wrk >/dev/null 2>&1") || access(FMNIST, R_OK)) {
		printf("serve: wrk (Debian wrk) or %s is missing; skipped\n", FMNIST);
		return 0;
	}
	const char *e = getenv("TF_BENCH_SERVE_SECONDS");
	int secs = e && atoi(e) > 0 ? atoi(e) : 5;
	e = getenv("TF_BENCH_SERVE_ROUNDS");
	int rounds = e && atoi(e) > 0 ? atoi(e) : 3;
	if (rounds > MAX_ROUNDS)
		rounds = MAX_ROUNDS;
	char home[] = "/tmp/tpuflow-bench-serve.XXXXXX", err[256], token[TF_TOKEN_LEN + 1];
	if (!mkdtemp(home) || make_model(home, token))
		return 70;
	struct tf_web *w;
	struct tf_web_opts o = {.home = home,
	                        .listen = "127.0.0.1:0",
	                        .rate = -1, /* tpuflow serve's default: no limit */
	                        .serve_only = 1,
	                        .serve_model = "fmnist"};
	if (tf_web_start(&o, &w, err, sizeof(err))) {
		fprintf(stderr, "serve bench: %s\n", err);
		return 70;
	}
	/* one example of deterministic pixels */
	char *body = NULL;
	size_t blen = 0;
	FILE *bf = open_memstream(&body, &blen);
	fputs("{\"instances\":[[", bf);
	for (int j = 0; j < 784; j++)
		fprintf(bf, j ? ",%d" : "%d", (j * 37 + j / 28 * 11) % 256);
	fputs("]]}", bf);
	fclose(bf);
	char url[128], auth[128];
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1/models/fmnist:predict", tf_web_port(w));
	snprintf(auth, sizeof(auth), "Authorization: Bearer %s", token);
	/* one answer first: it loads the model and sizes the floor's body */
	curl_global_init(CURL_GLOBAL_DEFAULT);
	CURL *c = curl_easy_init();
	struct curl_slist *h = curl_slist_append(NULL, auth);
	h = curl_slist_append(h, "Content-Type: application/json");
	char *answer = NULL;
	long code = 0;
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, keep);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &answer);
	if (curl_easy_perform(c) != CURLE_OK ||
	    (curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code), code != 200) || !answer) {
		fprintf(stderr, "serve bench: the first predict failed (%ld): %s\n", code,
		        answer ? answer : "");
		return 70;
	}
	floor_len = strlen(answer);
	floor_body = tf_xmalloc(floor_len);
	memset(floor_body, ' ', floor_len);
	struct MHD_Daemon *fl = MHD_start_daemon(
	    MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL, 0, NULL,
	    NULL, floor_handler, NULL, MHD_OPTION_CONNECTION_LIMIT, 256u, MHD_OPTION_END);
	const union MHD_DaemonInfo *fi = MHD_get_daemon_info(fl, MHD_DAEMON_INFO_BIND_PORT);
	char floor_url[128];
	snprintf(floor_url, sizeof(floor_url), "http://127.0.0.1:%d/", fi ? fi->port : 0);
	char lua[] = "/tmp/tpuflow-bench-predict.XXXXXX";
	FILE *lf = fdopen(mkstemp(lua), "w");
	fprintf(lf,
	        "wrk.method = \"POST\"\nwrk.headers[\"Content-Type\"] = \"application/json\"\n"
	        "wrk.body = [==[%s]==]\n",
	        body);
	fclose(lf);
	char status_url[160];
	snprintf(status_url, sizeof(status_url), "http://127.0.0.1:%d/v1/models/fmnist",
	         tf_web_port(w));
	/* rps, p50, p99, and the server's CPU microseconds per request (its own CPU time over
	 * the requests wrk counted: a figure the machine's other load moves much less); hd: the
	 * handler's p50/p99; one: rps, p50, p99 at 1 connection */
	double fw[4][MAX_ROUNDS], pr[4][MAX_ROUNDS], ratio[MAX_ROUNDS], hd[2][MAX_ROUNDS];
	double fw1[3][MAX_ROUNDS], pr1[3][MAX_ROUNDS], fwk[MAX_ROUNDS], prk[MAX_ROUNDS];
	double ca[4][MAX_ROUNDS], sh[4][MAX_ROUNDS], shadow_us[MAX_ROUNDS]; /* as pr */
	for (int i = 0; i < rounds; i++) {
		double c0 = cpu_seconds(0), k0 = cpu_seconds(1);
		fw[0][i] = bench_wrk(floor_url, NULL, lua, 64, secs, &fw[1][i], &fw[2][i]);
		double c1 = cpu_seconds(0), k1 = cpu_seconds(1);
		pr[0][i] = bench_wrk(url, token, lua, 64, secs, &pr[1][i], &pr[2][i]);
		double c2 = cpu_seconds(0), k2 = cpu_seconds(1);
		handler_latency(c, status_url, &hd[0][i], &hd[1][i]);
		fw[3][i] = fw[0][i] > 0 ? (c1 - c0) / (fw[0][i] * secs) * 1e6 : 0;
		pr[3][i] = pr[0][i] > 0 ? (c2 - c1) / (pr[0][i] * secs) * 1e6 : 0;
		fwk[i] = fw[0][i] > 0 ? (k1 - k0) / (fw[0][i] * secs) * 1e6 : 0;
		prk[i] = pr[0][i] > 0 ? (k2 - k1) / (pr[0][i] * secs) * 1e6 : 0;
		ratio[i] = fw[0][i] > 0 ? pr[0][i] / fw[0][i] : 0;
		fw1[0][i] = bench_wrk(floor_url, NULL, lua, 1, secs, &fw1[1][i], &fw1[2][i]);
		pr1[0][i] = bench_wrk(url, token, lua, 1, secs, &pr1[1][i], &pr1[2][i]);
		double (*phase[2])[MAX_ROUNDS] = {ca, sh};
		const char *policy[2] = {NO_SHADOW, SHADOW};
		for (int k = 0; k < 2; k++) {
			if (deploy(home, policy[k]))
				return 70;
			double t0 = cpu_seconds(0);
			phase[k][0][i] = bench_wrk(url, token, lua, 64, secs, &phase[k][1][i],
			                           &phase[k][2][i]);
			phase[k][3][i] = phase[k][0][i] > 0 ? (cpu_seconds(0) - t0) /
			                                          (phase[k][0][i] * secs) * 1e6
			                                    : 0;
		}
		if (deploy(home, NULL))
			return 70;
		shadow_us[i] = (sh[3][i] - ca[3][i]) / 0.99;
		printf("  round %d: predict %.0f req/s (p50 %.3f ms, p99 %.3f ms, handler p99 %.3f ms, "
		       "%.1f us CPU), floor %.0f req/s (p50 %.3f ms, p99 %.3f ms, %.1f us CPU), ratio "
		       "%.2f; 1 connection: predict p99 %.3f ms, floor p99 %.3f ms; 99%% canary %.0f "
		       "req/s (%.1f us CPU), with its shadow %.0f req/s (%.1f us CPU)\n",
		       i + 1, pr[0][i], pr[1][i], pr[2][i], hd[1][i], pr[3][i], fw[0][i], fw[1][i],
		       fw[2][i], fw[3][i], ratio[i], pr1[2][i], fw1[2][i], ca[0][i], ca[3][i],
		       sh[0][i], sh[3][i]);
	}
	double rps = median(pr[0], rounds), p50 = median(pr[1], rounds),
	       p99 = median(pr[2], rounds);
	double f50 = median(fw[1], rounds), f99 = median(fw[2], rounds);
	double floor_rps = median(fw[0], rounds), r = median(ratio, rounds);
	printf("POST /v1/models/fmnist:predict (1 example, %zu-byte body, 784-256-128-10), wrk 64 "
	       "connections, median of %d x %d s: %.0f req/s, p50 %.3f ms, p99 %.3f ms\n",
	       blen, rounds, secs, rps, p50, p99);
	printf("HTTP floor (libmicrohttpd, same mode, same POST, fixed %zu-byte answer):     %.0f "
	       "req/s, p50 %.3f ms, p99 %.3f ms\n",
	       floor_len, floor_rps, f50, f99);
	printf("server CPU per request: predict %.1f us, floor %.1f us (medians)\n",
	       median(pr[3], rounds), median(fw[3], rounds));
	printf("predict handler (start to answer, last 1024 answers of each round): p50 %.3f ms, "
	       "p99 %.3f ms\n",
	       median(hd[0], rounds), median(hd[1], rounds));
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	double pcpu = median(pr[3], rounds) + median(prk, rounds),
	       fcpu = median(fw[3], rounds) + median(fwk, rounds);
	printf("wrk CPU per request: predict %.1f us, floor %.1f us (medians)\n", median(prk, rounds),
	       median(fwk, rounds));
	printf("mean latency at 64 connections, a floor under p99: measured (Little's law, 64 / "
	       "req/s) predict %.3f ms, HTTP floor %.3f ms; allowed by the CPU alone (64 x (server + "
	       "wrk CPU per request) / %ld cores) predict %.3f ms, HTTP floor %.3f ms\n",
	       rps > 0 ? 64e3 / rps : 0, floor_rps > 0 ? 64e3 / floor_rps : 0, cores,
	       64 * pcpu / (double)cores / 1e3, 64 * fcpu / (double)cores / 1e3);
	printf("1 connection (wrk -t1 -c1): predict %.0f req/s, p50 %.3f ms, p99 %.3f ms; HTTP "
	       "floor %.0f req/s, p50 %.3f ms, p99 %.3f ms\n",
	       median(pr1[0], rounds), median(pr1[1], rounds), median(pr1[2], rounds),
	       median(fw1[0], rounds), median(fw1[1], rounds), median(fw1[2], rounds));
	printf("99%% canary of the same weights, wrk 64 connections: %.0f req/s, p50 %.3f ms, p99 "
	       "%.3f ms, %.1f us server CPU per request; with the shadow comparison: %.0f req/s, "
	       "p50 %.3f ms, p99 %.3f ms, %.1f us; the shadow's CPU per canary request %.1f us "
	       "(medians)\n",
	       median(ca[0], rounds), median(ca[1], rounds), median(ca[2], rounds),
	       median(ca[3], rounds), median(sh[0], rounds), median(sh[1], rounds),
	       median(sh[2], rounds), median(sh[3], rounds), median(shadow_us, rounds));
	printf("predict/floor = %.2f (goal >= 0.5) -> %s; p99 %.3f ms (goal <= 1 ms) -> %s "
	       "(the floor's p99: %.3f ms)\n",
	       r, r >= 0.5 ? "ok" : "BELOW GOAL", p99, rps && p99 <= 1 ? "ok" : "ABOVE GOAL", f99);
	unlink(lua);
	free(body);
	free(answer);
	curl_slist_free_all(h);
	curl_easy_cleanup(c);
	curl_global_cleanup();
	MHD_stop_daemon(fl);
	tf_web_stop(w);
	free(floor_body);
	snprintf(err, sizeof(err), "rm -rf '%s'", home);
	return system(err) ? 70 : 0;
}

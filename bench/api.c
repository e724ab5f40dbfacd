/* api.c — the REST API's throughput and latency against the HTTP floor, in the same run:
 *
 *   - GET /api/v1/runs?limit=50 on a home with 10,000 runs, wrk at 16 connections (2 threads,
 *     10 s), through the real server (web/http.c: routing, token check, rate limit, SQLite);
 *   - the HTTP floor: a minimal libmicrohttpd handler in the same threading mode answering a
 *     fixed body of the same size, same wrk settings;
 *   - POST /api/v1/runs latency, one client after another (p50/p99 of 300 requests with
 *     libcurl, each a durable commit of a new run) beside its floor measured between them (the
 *     same POST to the HTTP floor plus one fdatasync in the home), and under wrk at 16
 *     connections (commits then share fsyncs: store.c's group commit).
 *
 * Goals (issue 13): GET >= 0.5x the floor's requests/s; POST p99 <= 10 ms. Needs wrk.
 * TF_BENCH_API_RUNS overrides the 10,000 seeded runs; TF_BENCH_API_SECONDS the 10 s.
 *
 * TF_BENCH_API_LIST=1 measures the runs list alone instead (no POST): nine runs in ten marked
 * succeeded, the tenth failed; GET /api/v1/runs?limit=50 unfiltered, with q= matching every
 * run, with state=succeeded and with state=failed (the rare one), each once cached (one URL,
 * answered from the server's memory while nothing is committed) and once uncached (a wrk script
 * gives every request its own since=, which selects the same runs, so every request runs the
 * handler and its queries); the floor before and after those eight runs, their ratios against the
 * floors' mean; and for each run the server's CPU time per request (getrusage of this process,
 * which serves; wrk is a child and not counted), which the machine's other load moves far less.
 * TF_BENCH_API_TOTAL_MAX sets the most runs the list counts for its total (the server's
 * runs_total_max; default 10,000).
 */
#include "common/common.h"
#include "orchestrator/pipeline.h"
#include "orchestrator/state.h"
#include "web/server.h"
#include "web/tokens.h"

#include "bench/httpbench.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

static const char yaml[] = "name: bench\nsteps:\n"
                           "  - name: a\n    type: shell\n    with: {argv: [/bin/true]}\n"
                           "  - name: b\n    type: shell\n    needs: [a]\n"
                           "    with: {argv: [/bin/true]}\n"
                           "  - name: c\n    type: shell\n    needs: [b]\n"
                           "    with: {argv: [/bin/true]}\n";

static const struct tf_run_step_def steps[] = {{"a", "shell"}, {"b", "shell"}, {"c", "shell"}};

/* What the daemon's submission does before the daemon picks the run up: check the pipeline,
 * record the run pending (in the server's transaction). */
static int submit(void *ctx, struct tf_store *st, const struct tf_web_submit *s, char run_id[32],
                  struct tf_diag_list *diags, char *err, size_t errlen)
{
	(void)ctx;
	struct tf_pipeline *p = NULL;
	if (!s->yaml ||
	    tf_pipeline_load_buffer("request.yaml", s->yaml, s->yaml_len, NULL, 0, 0, &p, diags)) {
		snprintf(err, errlen, "the pipeline has errors");
		return -EINVAL;
	}
	int rc = tf_run_create(st, p->name, p->source, NULL, s->params_json, NULL, steps, 3, NULL,
	                       run_id);
	tf_pipeline_free(p);
	return rc;
}

/* ---- measuring ------------------------------------------------------------------------ */

static size_t sink(char *d, size_t sz, size_t nm, void *u)
{
	(void)d;
	*(size_t *)u += sz * nm;
	return sz * nm;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* ---- the runs list alone (TF_BENCH_API_LIST) ------------------------------------------ */

/* A wrk script whose requests ask for limit=50 and the filter, each with a since= of its own
 * (each thread counting from its own 10^8: no two requests share a URL, so none is answered
 * from the server's cache). Returns the script's file (the caller unlinks it) or NULL. */
static char *uncached_script(const char *filter)
{
	char *path = tf_xstrdup("/tmp/tpuflow-bench-list.XXXXXX");
	int fd = mkstemp(path);
	FILE *f = fd < 0 ? NULL : fdopen(fd, "w");
	if (!f) {
		free(path);
		return NULL;
	}
	fprintf(f,
	        "local threads = 0\n"
	        "function setup(thread) threads = threads + 1; thread:set(\"first\", threads * "
	        "100000000) end\n"
	        "function init(args) n = first end\n"
	        "function request() n = n + 1; return wrk.format(nil, "
	        "\"/api/v1/runs?limit=50%s&since=\" .. n) end\n",
	        filter);
	fclose(f);
	return path;
}

/* This process's CPU time so far, in seconds. */
static double cpu_self(void)
{
	struct rusage u;
	getrusage(RUSAGE_SELF, &u);
	return (double)u.ru_utime.tv_sec + (double)u.ru_stime.tv_sec +
	       ((double)u.ru_utime.tv_usec + (double)u.ru_stime.tv_usec) / 1e6;
}

/* wrk as bench_wrk runs it; *cpu_us is the server's CPU time per request, in µs. */
static double wrk_cpu(const char *url, const char *token, const char *script, int secs,
                      double *cpu_us)
{
	double p50, p99, c0 = cpu_self();
	double rps = bench_wrk(url, token, script, 16, secs, &p50, &p99);
	*cpu_us = rps > 0 ? (cpu_self() - c0) * 1e6 / (rps * secs) : 0;
	return rps;
}

static void bench_list(int port, const char *token, const char *floor_url, int nruns, int secs)
{
	static const char *const filters[] = {"", "&q=bench", "&state=succeeded", "&state=failed"};
	enum { NF = sizeof(filters) / sizeof(filters[0]) };
	double load0[3] = {0}, load1[3] = {0}, rps[NF][2], cpu[NF][2];
	getloadavg(load0, 3);
	double fcpu0, fcpu1, f0 = wrk_cpu(floor_url, NULL, NULL, secs, &fcpu0);
	for (int i = 0; i < NF; i++) {
		char url[256];
		snprintf(url, sizeof(url), "http://127.0.0.1:%d/api/v1/runs?limit=50%s", port,
		         filters[i]);
		rps[i][0] = wrk_cpu(url, token, NULL, secs, &cpu[i][0]);
		char *lua = uncached_script(filters[i]);
		rps[i][1] = lua ? wrk_cpu(url, token, lua, secs, &cpu[i][1]) : 0;
		if (lua)
			unlink(lua);
		free(lua);
	}
	double f1 = wrk_cpu(floor_url, NULL, NULL, secs, &fcpu1), fl = (f0 + f1) / 2;
	getloadavg(load1, 3);
	printf("runs list, %d runs, wrk 16 connections %d s each; load average %.1f %.1f %.1f "
	       "before, %.1f %.1f %.1f after\n",
	       nruns, secs, load0[0], load0[1], load0[2], load1[0], load1[1], load1[2]);
	printf("HTTP floor (fixed %zu-byte body): %.0f req/s before, %.0f after (%.0f and %.0f us "
	       "CPU each)\n",
	       floor_len, f0, f1, fcpu0, fcpu1);
	for (int i = 0; i < NF; i++)
		printf("GET /api/v1/runs?limit=50%-16s cached %6.0f req/s (%.2fx the floor, %.0f "
		       "us CPU each), uncached %6.0f req/s (%.3fx, %.0f us CPU each)\n",
		       filters[i], rps[i][0], fl ? rps[i][0] / fl : 0, cpu[i][0], rps[i][1],
		       fl ? rps[i][1] / fl : 0, cpu[i][1]);
}

int main(void)
{
	if (system("command -v wrk >/dev/null 2>&1")) {
		printf("api: wrk is missing (Debian wrk); skipped\n");
		return 0;
	}
	const char *e = getenv("TF_BENCH_API_RUNS");
	int nruns = e ? atoi(e) : 10000;
	e = getenv("TF_BENCH_API_SECONDS");
	int secs = e ? atoi(e) : 10;
	/* the home lives under $TMPDIR (else /tmp): TMPDIR=/dev/shm measures the API without the
	 * disk's fdatasync, whose tail the floor below shows */
	const char *tmp = getenv("TMPDIR");
	char home[200], err[256];
	if (snprintf(home, sizeof(home), "%s/tpuflow-bench-api.XXXXXX", tmp && *tmp ? tmp : "/tmp") >=
	        (int)sizeof(home) ||
	    !mkdtemp(home))
		return 70;
	struct tf_store *st;
	if (tf_store_open_home(home, &st, err, sizeof(err))) {
		fprintf(stderr, "api: %s\n", err);
		return 70;
	}
	double t0 = tf_now_monotonic();
	tf_store_begin(st);
	for (int i = 0; i < nruns; i++) {
		char id[32];
		if (tf_run_create(st, "bench", yaml, NULL, "{}", NULL, steps, 3, NULL, id)) {
			fprintf(stderr, "api: seeding: %s\n", tf_store_errmsg(st));
			return 70;
		}
	}
	tf_store_commit(st);
	int list_only = getenv("TF_BENCH_API_LIST") != NULL;
	if (list_only &&
	    tf_store_run(st,
	                 "UPDATE runs SET state=iif(rowid % 10, 'succeeded', 'failed'), "
	                 "error=iif(rowid % 10, NULL, 'step a failed: exit 1'), "
	                 "started_at=created_at, finished_at=created_at+1",
	                 "")) {
		fprintf(stderr, "api: seeding: %s\n", tf_store_errmsg(st));
		return 70;
	}
	char token[TF_TOKEN_LEN + 1];
	tf_token_create(st, "bench", TF_SCOPE_ADMIN, 0, token, NULL);
	tf_store_close(st);
	printf("home with %d runs (3 steps each) seeded in %.1f s\n", nruns,
	       tf_now_monotonic() - t0);

	struct tf_web *w;
	e = getenv("TF_BENCH_API_TOTAL_MAX");
	struct tf_web_opts o = {.home = home,
	                        .listen = "127.0.0.1:0",
	                        .rate = 1e9,
	                        .runs_total_max = e ? atoll(e) : 0,
	                        .hooks = {.submit = submit}};
	if (tf_web_start(&o, &w, err, sizeof(err))) {
		fprintf(stderr, "api: %s\n", err);
		return 70;
	}
	char get_url[128], post_url[128];
	snprintf(get_url, sizeof(get_url), "http://127.0.0.1:%d/api/v1/runs?limit=50",
	         tf_web_port(w));
	snprintf(post_url, sizeof(post_url), "http://127.0.0.1:%d/api/v1/runs", tf_web_port(w));

	/* The floor answers a body as large as the API's page. */
	curl_global_init(CURL_GLOBAL_DEFAULT);
	CURL *c = curl_easy_init();
	struct curl_slist *h = NULL;
	char auth[128];
	snprintf(auth, sizeof(auth), "Authorization: Bearer %s", token);
	h = curl_slist_append(h, auth);
	h = curl_slist_append(h, "Content-Type: application/json");
	size_t got = 0;
	curl_easy_setopt(c, CURLOPT_URL, get_url);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, sink);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &got);
	curl_easy_perform(c);
	floor_len = got;
	floor_body = tf_xmalloc(floor_len);
	memset(floor_body, ' ', floor_len);
	struct MHD_Daemon *fl = MHD_start_daemon(
	    MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL, 0, NULL,
	    NULL, floor_handler, NULL, MHD_OPTION_CONNECTION_LIMIT, 256u, MHD_OPTION_END);
	const union MHD_DaemonInfo *fi = MHD_get_daemon_info(fl, MHD_DAEMON_INFO_BIND_PORT);
	char floor_url[128];
	snprintf(floor_url, sizeof(floor_url), "http://127.0.0.1:%d/", fi ? fi->port : 0);

	if (list_only) {
		bench_list(tf_web_port(w), token, floor_url, nruns, secs);
		goto done;
	}

	double p99_get, p99_floor, p99_post16, p50_unused;
	double floor_rps = bench_wrk(floor_url, NULL, NULL, 16, secs, &p50_unused, &p99_floor);
	double get_rps = bench_wrk(get_url, token, NULL, 16, secs, &p50_unused, &p99_get);
	printf("GET /api/v1/runs?limit=50 (%zu bytes), wrk 16 connections %d s: %.0f req/s, p99 "
	       "%.2f ms\n",
	       floor_len, secs, get_rps, p99_get);
	printf("HTTP floor (libmicrohttpd, same mode, fixed %zu-byte body):      %.0f req/s, p99 "
	       "%.2f ms\n",
	       floor_len, floor_rps, p99_floor);
	printf("GET/floor = %.2f (goal >= 0.5) -> %s\n", floor_rps ? get_rps / floor_rps : 0,
	       floor_rps && get_rps / floor_rps >= 0.5 ? "ok" : "BELOW GOAL");

	/* POST latency, one request at a time, each followed by the floor of a durable POST: the
	 * same POST to the HTTP floor (read, drop, fixed answer) and one fdatasync of a 4 KiB
	 * overwrite in the home (what one commit must wait for at least), back to back so both
	 * see the same load. */
	enum { N = 300 };
	double lat[N], flat[N], slat[N];
	json_t *b = json_pack("{s:s, s:{s:s}}", "yaml", yaml, "labels", "bench", "post");
	char *body = json_dumps(b, JSON_COMPACT);
	json_decref(b);
	char *syncf = tf_xasprintf("%s/fsync-floor", home);
	int sfd = open(syncf, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	char page[4096];
	memset(page, 'x', sizeof(page));
	CURL *cf = curl_easy_init();
	size_t fgot = 0;
	curl_easy_setopt(cf, CURLOPT_URL, floor_url);
	curl_easy_setopt(cf, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(cf, CURLOPT_WRITEFUNCTION, sink);
	curl_easy_setopt(cf, CURLOPT_WRITEDATA, &fgot);
	curl_easy_setopt(c, CURLOPT_URL, post_url);
	curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
	int bad = 0;
	for (int i = 0; i < N; i++) { /* each with its own Idempotency-Key, as CI sends them */
		char key[64];
		snprintf(key, sizeof(key), "Idempotency-Key: bench-%d-%d", (int)getpid(), i);
		struct curl_slist *hk = curl_slist_append(NULL, auth);
		hk = curl_slist_append(hk, "Content-Type: application/json");
		hk = curl_slist_append(hk, key);
		curl_easy_setopt(c, CURLOPT_HTTPHEADER, hk);
		double s = tf_now_monotonic();
		long code = 0;
		if (curl_easy_perform(c) != CURLE_OK)
			bad++;
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
		bad += code != 201;
		lat[i] = (tf_now_monotonic() - s) * 1000;
		curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
		curl_slist_free_all(hk);
		s = tf_now_monotonic();
		curl_easy_perform(cf);
		flat[i] = (tf_now_monotonic() - s) * 1000;
		s = tf_now_monotonic();
		if (pwrite(sfd, page, sizeof(page), (off_t)(i % 64) * 4096) < 0 || fdatasync(sfd))
			bad++;
		slat[i] = (tf_now_monotonic() - s) * 1000;
		flat[i] += slat[i];
	}
	close(sfd);
	unlink(syncf);
	free(syncf);
	curl_easy_cleanup(cf);
	qsort(lat, N, sizeof(lat[0]), cmp_double);
	qsort(flat, N, sizeof(flat[0]), cmp_double);
	qsort(slat, N, sizeof(slat[0]), cmp_double);
	double p50 = lat[N / 2], p99 = lat[N * 99 / 100];
	double f50 = flat[N / 2], f99 = flat[N * 99 / 100];
	printf("POST /api/v1/runs, one client, %d requests (each a new run with its key, one "
	       "durable commit): p50 %.2f ms, p99 %.2f ms%s; goal p99 <= 10 ms -> %s\n",
	       N, p50, p99, bad ? " (SOME FAILED)" : "", p99 <= 10 && !bad ? "ok" : "ABOVE GOAL");
	printf("  its floor, interleaved (a POST to the HTTP floor + one 4 KiB fdatasync in the "
	       "home): p50 %.2f ms, p99 %.2f ms (the fdatasync alone: p50 %.2f, p99 %.2f)\n",
	       f50, f99, slat[N / 2], slat[N * 99 / 100]);
	printf("  POST/floor: p50 %.2fx, p99 %.2fx\n", f50 > 0 ? p50 / f50 : 0,
	       f99 > 0 ? p99 / f99 : 0);

	/* POST under 16 connections (wrk script with the same body). */
	char lua[] = "/tmp/tpuflow-bench-post.XXXXXX";
	int lfd = mkstemp(lua);
	FILE *lf = fdopen(lfd, "w");
	fprintf(lf,
	        "wrk.method = \"POST\"\nwrk.headers[\"Content-Type\"] = \"application/json\"\n"
	        "wrk.body = [==[%s]==]\n",
	        body);
	fclose(lf);
	uint64_t c0, s0, c1, s1;
	tf_store_sync_stats(&c0, &s0);
	double post_rps = bench_wrk(post_url, token, lua, 16, secs, &p50_unused, &p99_post16);
	tf_store_sync_stats(&c1, &s1);
	printf("POST /api/v1/runs, wrk 16 connections %d s: %.0f runs/s, p99 %.2f ms; %llu "
	       "commits, %llu WAL fsyncs (%.1f commits per fsync)\n",
	       secs, post_rps, p99_post16, (unsigned long long)(c1 - c0),
	       (unsigned long long)(s1 - s0), s1 > s0 ? (double)(c1 - c0) / (double)(s1 - s0) : 0);
	unlink(lua);
	free(body);
done:
	curl_slist_free_all(h);
	curl_easy_cleanup(c);
	curl_global_cleanup();
	MHD_stop_daemon(fl);
	tf_web_stop(w);
	free(floor_body);
	snprintf(err, sizeof(err), "rm -rf '%s'", home);
	return system(err) ? 70 : 0;
}

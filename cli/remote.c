/* remote.c — `tpuflow --remote URL ...` (or TPUFLOW_URL, with TPUFLOW_TOKEN): `run`, `runs
 * list|show|logs|cancel|retry|resume|delete`, `gc` and `models list|show|alias|compare` against
 * a daemon's REST API instead of the local state home (docs/api.md), printed by the local
 * commands' printers where the answers carry the same facts.
 *
 * `run FILE` submits the file's text with a fresh Idempotency-Key, then follows the run's
 * events (Server-Sent Events, reconnecting with Last-Event-ID) and exits with the run's
 * result: 0 succeeded, 1 failed or interrupted. `runs cancel|retry|resume` carry a fresh
 * key too (the routes take one), so a resent cancel is not a second one (which would stop
 * the run's finally steps).
 *
 * A request is sent again, up to $TPUFLOW_RETRIES times (default 4), each wait said on
 * stderr (retry_sleep):
 *   - answered 429 or 503 with a Retry-After (over the token's rate, a daemon draining or a
 *     busy database: nothing was done): after that many seconds, at most RETRY_WAIT_MAX;
 *   - not answered (the daemon restarting, the network): after 1, 2, 4, ... seconds, when
 *     the connection could not be made (nothing reached the server: any request), or when
 *     it broke or timed out and the request is safe to repeat: a GET, or a request with an
 *     Idempotency-Key (the server answers the repeat with the first answer, or does it
 *     once). A DELETE, `gc` or an alias move that may have reached the server is not
 *     repeated: its answer is lost, and the command says so.
 * Then the server's problem (or the network's error) is printed as for any refusal.
 */
#include "cli/cli.h"
#include "common/common.h"
#include "orchestrator/retention.h"

#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <openssl/rand.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct remote {
	const char *url;   /* base URL, no trailing slash needed */
	const char *token; /* bearer token or NULL */
	int json;
};

struct body {
	char *p;
	size_t n;
};

static size_t on_body(char *d, size_t sz, size_t nm, void *u)
{
	struct body *b = u;
	b->p = tf_xrealloc(b->p, b->n + sz * nm + 1);
	memcpy(b->p + b->n, d, sz * nm);
	b->n += sz * nm;
	b->p[b->n] = 0;
	return sz * nm;
}

/* Options every request of this file takes: the CA certificate a daemon's HTTPS certificate
 * is checked against, when it is not in the system's store (TPUFLOW_CACERT, a PEM file). */
static void common_opts(CURL *c)
{
	const char *ca = getenv("TPUFLOW_CACERT");
	if (ca && *ca)
		curl_easy_setopt(c, CURLOPT_CAINFO, ca);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 10L);
}

#define RETRIES_DEFAULT 4 /* times a request is sent again (see the top of the file) */
#define RETRIES_MAX 100
#define RETRY_WAIT_MAX 30 /* seconds: the longest Retry-After waited for */

/* How many times a request the server asks to send later is sent again: $TPUFLOW_RETRIES
 * (0 to RETRIES_MAX; anything else is warned about once and the default taken). */
static int retries(void)
{
	static int n = -1;
	if (n >= 0)
		return n;
	const char *v = getenv("TPUFLOW_RETRIES");
	char *end = NULL;
	long x = v && *v ? strtol(v, &end, 10) : RETRIES_DEFAULT;
	if (v && *v && (*end || x < 0 || x > RETRIES_MAX)) {
		fprintf(stderr, "tpuflow: TPUFLOW_RETRIES wants a whole number from 0 to %d, not '%s'; "
		                "using %d\n",
		        RETRIES_MAX, v, RETRIES_DEFAULT);
		x = RETRIES_DEFAULT;
	}
	n = (int)x;
	return n;
}

/* The seconds a 429 or 503 answer asks the client to wait before sending the request again
 * (its Retry-After, at most RETRY_WAIT_MAX); 0 when it is not such an answer. */
static long retry_wait(CURL *c, long status)
{
	curl_off_t after = 0;
	if ((status != 429 && status != 503) ||
	    curl_easy_getinfo(c, CURLINFO_RETRY_AFTER, &after) != CURLE_OK || after <= 0)
		return 0;
	return after > RETRY_WAIT_MAX ? RETRY_WAIT_MAX : (long)after;
}

/* The seconds to wait before sending again a request that got no answer (cc, on its
 * `attempt`th send): 1, 2, 4, ... (at most RETRY_WAIT_MAX) when the connection could not be
 * made, or when it failed on the way and the request is `safe` to repeat (see the top of the
 * file); 0 when it is not to be sent again (a certificate, name or URL that waiting does not
 * mend, or a request that may have been done). */
static long resend_wait(CURLcode cc, int safe, int attempt)
{
	int again = cc == CURLE_COULDNT_CONNECT ||
	            (safe && (cc == CURLE_GOT_NOTHING || cc == CURLE_RECV_ERROR ||
	                      cc == CURLE_SEND_ERROR || cc == CURLE_PARTIAL_FILE ||
	                      cc == CURLE_OPERATION_TIMEDOUT));
	long wait = attempt < 6 ? 1L << (attempt - 1) : RETRY_WAIT_MAX;
	return again ? (wait < RETRY_WAIT_MAX ? wait : RETRY_WAIT_MAX) : 0;
}

/* Says on stderr that a request is sent again in `wait` seconds, with the reason — the
 * server's (its problem's title and detail), or `err` when it gave no answer (status 0) —
 * and waits. */
static void retry_sleep(long status, const char *body, const char *err, long wait, int attempt)
{
	json_t *j = body ? json_loads(body, 0, NULL) : NULL;
	if (status)
		fprintf(stderr, "tpuflow: %ld %s: %s; retrying in %ld s (%d of %d)\n", status,
		        json_string_value(json_object_get(j, "title")) ?: "error",
		        json_string_value(json_object_get(j, "detail")) ?: (body ? body : ""), wait,
		        attempt, retries());
	else
		fprintf(stderr, "tpuflow: %s; retrying in %ld s (%d of %d)\n", err, wait, attempt,
		        retries());
	json_decref(j);
	sleep((unsigned)wait);
}

/* One request, sent again while the answer asks for it (429/503 with Retry-After) or no
 * answer came and it may be sent again (resend_wait), up to retries() times. Returns the
 * HTTP status of the last answer (0 when no answer came: *err says why); *out gets its body
 * (caller frees). */
static long request(const struct remote *r, const char *method, const char *path,
                    const char *body, const char *idem_key, char **out, char *err, size_t errlen)
{
	CURL *c = curl_easy_init();
	char *url = tf_xasprintf("%s%s", r->url, path);
	struct curl_slist *h = NULL;
	char *auth = r->token ? tf_xasprintf("Authorization: Bearer %s", r->token) : NULL;
	char *idem = idem_key ? tf_xasprintf("Idempotency-Key: %s", idem_key) : NULL;
	if (auth)
		h = curl_slist_append(h, auth);
	if (idem)
		h = curl_slist_append(h, idem);
	if (body)
		h = curl_slist_append(h, "Content-Type: application/json");
	struct body b = {0};
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
	if (body)
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
	else if (!strcmp(method, "POST"))
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, "");
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
	common_opts(c);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, 120L);
	int safe = !strcmp(method, "GET") || idem_key;
	long status = 0;
	for (int attempt = 1;; attempt++) {
		CURLcode cc = curl_easy_perform(c);
		status = 0;
		if (cc == CURLE_OK)
			curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
		else
			tf_errf(err, errlen, "%s: %s", url, curl_easy_strerror(cc));
		long wait = status ? retry_wait(c, status) : resend_wait(cc, safe, attempt);
		if (!wait || attempt > retries())
			break;
		retry_sleep(status, b.p, err, wait, attempt);
		free(b.p);
		b = (struct body){0};
	}
	curl_slist_free_all(h);
	curl_easy_cleanup(c);
	free(url);
	free(auth);
	free(idem);
	*out = b.p;
	return status;
}

/* Prints a problem body as "tpuflow: TITLE: DETAIL" plus its file:line:col errors, each
 * under the name `file` when given (the file the user sent: the daemon names the text by its
 * pipeline). */
static int print_problem_in(long status, const char *body, const char *file)
{
	json_t *j = body ? json_loads(body, 0, NULL) : NULL;
	fprintf(stderr, "tpuflow: %ld %s: %s\n", status,
	        json_string_value(json_object_get(j, "title")) ?: "error",
	        json_string_value(json_object_get(j, "detail")) ?: (body ? body : ""));
	size_t i;
	json_t *e;
	json_array_foreach(json_object_get(j, "errors"), i, e)
	{
		fprintf(stderr, "%s:%lld:%lld: error: %s\n",
		        file ? file : json_string_value(json_object_get(e, "file")),
		        (long long)json_integer_value(json_object_get(e, "line")),
		        (long long)json_integer_value(json_object_get(e, "col")),
		        json_string_value(json_object_get(e, "message")));
		if (json_string_value(json_object_get(e, "hint")))
			fprintf(stderr, "  hint: %s\n", json_string_value(json_object_get(e, "hint")));
	}
	json_decref(j);
	return status == 401 || status == 403 ? TF_EXIT_CONFIG
	       : status == 404                  ? TF_EXIT_NOTFOUND
	       : status == 409                  ? TF_EXIT_FAILED
	       : status == 422 || status == 400 ? TF_EXIT_DATAERR
	       : status >= 500                  ? TF_EXIT_UNAVAILABLE
	                                        : TF_EXIT_FAILED;
}

static int print_problem(long status, const char *body)
{
	return print_problem_in(status, body, NULL);
}

/* A 2xx answer's body: with --json (or without a printer) the JSON as the local commands
 * print theirs (tf_cli_print_json: the same facts give the same text), else through `show`. */
static void print_answer(const struct remote *r, const char *body, void (*show)(json_t *doc))
{
	json_t *doc = body ? json_loads(body, 0, NULL) : NULL;
	if (!doc) { /* not JSON: as it came */
		fputs(body ? body : "", stdout);
		if (!body || !*body || body[strlen(body) - 1] != '\n')
			putchar('\n');
	} else if (r->json || !show) {
		tf_cli_print_json(stdout, doc);
	} else {
		show(doc);
	}
	json_decref(doc);
}

/* A fresh Idempotency-Key: 128 random bits in hex. */
static void new_key(char key[33])
{
	unsigned char rnd[16];
	RAND_bytes(rnd, sizeof(rnd));
	for (int i = 0; i < 16; i++)
		snprintf(key + 2 * i, 3, "%02x", rnd[i]);
}

/* GET/POST (with idem_key, when not NULL) and print the answer (print_answer). */
static int simple(const struct remote *r, const char *method, const char *path,
                  const char *idem_key, void (*show)(json_t *doc))
{
	char *body = NULL, err[512];
	long st = request(r, method, path, NULL, idem_key, &body, err, sizeof(err));
	int ret = TF_EXIT_OK;
	if (!st) {
		fprintf(stderr, "tpuflow: %s\n", err);
		ret = TF_EXIT_UNAVAILABLE;
	} else if (st >= 300) {
		ret = print_problem(st, body);
	} else {
		print_answer(r, body, show);
	}
	free(body);
	return ret;
}

static const char *str(json_t *o, const char *k)
{
	const char *s = json_string_value(json_object_get(o, k));
	return s ? s : "-";
}

/* "(more: --cursor ID)" on f when the runs page has a next page: ID its last run. */
static void say_more(FILE *f, json_t *doc)
{
	json_t *items = json_object_get(doc, "items");
	if (json_string_value(json_object_get(doc, "next")))
		fprintf(f, "(more: --cursor %s)\n",
		        str(json_array_get(items, json_array_size(items) - 1), "id"));
}

static void show_runs(json_t *doc)
{
	printf("%-24s %-20s %-12s %-7s %s\n", "RUN", "PIPELINE", "STATE", "STEPS", "CREATED");
	/* done: succeeded or cached; skipped steps and orphaned runs are said apart */
	size_t i;
	json_t *r;
	json_array_foreach(json_object_get(doc, "items"), i, r)
	{
		char when[32], steps[16];
		tf_cli_fmt_time(json_object_get(r, "created_at"), when, sizeof(when));
		snprintf(steps, sizeof(steps), "%lld/%lld",
		         (long long)json_integer_value(json_object_get(r, "done")),
		         (long long)json_integer_value(json_object_get(r, "steps")));
		long long skipped = json_integer_value(json_object_get(r, "skipped"));
		int orphaned = json_is_true(json_object_get(r, "orphaned"));
		printf("%-24s %-20s %-12s %-7s %s", str(r, "id"), str(r, "pipeline"),
		       orphaned ? "orphaned" : str(r, "state"), steps, when);
		if (skipped)
			printf("  (%lld skipped)", skipped);
		if (orphaned)
			printf("  its process is gone: tpuflow runs resume");
		printf("\n");
	}
	say_more(stdout, doc);
}

/* A number as the local document has it: a real (a whole one parses back as an integer) or
 * null. */
static json_t *real_or_null(json_t *v)
{
	return json_is_number(v) ? json_real(json_number_value(v)) : json_null();
}

/* `runs list --json`: the page's runs as the local command prints them (tf_runs_list's
 * array: the same keys in the same order, the same types), so a script reads either; the
 * API's `trigger` and the page's `total` are not part of it, and a next page is said on
 * stderr. A daemon from before `duration` and `labels` were in the page gives a finished
 * run's duration from its times and no labels. */
static void show_runs_json(json_t *doc)
{
	static const char *const texts[] = {"id", "pipeline", "state"};
	static const char *const times[] = {"created_at", "started_at", "finished_at"};
	static const char *const counts[] = {"steps", "done"};
	json_t *arr = json_array(), *r;
	size_t i;
	json_array_foreach(json_object_get(doc, "items"), i, r)
	{
		json_t *o = json_object();
		for (size_t k = 0; k < TF_ARRAY_LEN(texts); k++) {
			const char *v = json_string_value(json_object_get(r, texts[k]));
			json_object_set_new(o, texts[k], v ? json_string(v) : json_null());
		}
		for (size_t k = 0; k < TF_ARRAY_LEN(times); k++)
			json_object_set_new(o, times[k], real_or_null(json_object_get(r, times[k])));
		for (size_t k = 0; k < TF_ARRAY_LEN(counts); k++)
			json_object_set_new(o, counts[k],
			                    json_integer(json_integer_value(json_object_get(r, counts[k]))));
		const char *err = json_string_value(json_object_get(r, "error"));
		json_object_set_new(o, "error", err ? json_string(err) : json_null());
		json_object_set_new(o, "skipped",
		                    json_integer(json_integer_value(json_object_get(r, "skipped"))));
		json_object_set_new(o, "orphaned",
		                    json_boolean(json_is_true(json_object_get(r, "orphaned"))));
		json_t *dur = json_object_get(r, "duration");
		json_t *start = json_object_get(r, "started_at"), *end = json_object_get(r, "finished_at");
		if (!dur && json_is_number(start) && json_is_number(end))
			json_object_set_new(o, "duration", json_real(json_number_value(end) -
			                                             json_number_value(start)));
		else
			json_object_set_new(o, "duration", real_or_null(dur));
		json_t *labels = json_object_get(r, "labels");
		json_object_set_new(o, "labels", json_is_object(labels) ? json_deep_copy(labels)
		                                                         : json_object());
		json_array_append_new(arr, o);
	}
	tf_cli_print_json(stdout, arr);
	json_decref(arr);
	say_more(stderr, doc);
}

static void show_models(json_t *doc)
{
	printf("%-24s %-9s %s\n", "MODEL", "VERSIONS", "ALIASES");
	size_t i;
	json_t *m;
	json_array_foreach(json_object_get(doc, "items"), i, m)
	{
		char *aliases = json_dumps(json_object_get(m, "aliases"), JSON_COMPACT);
		printf("%-24s %-9lld %s\n", str(m, "name"),
		       (long long)json_integer_value(json_object_get(m, "versions")),
		       aliases ? aliases : "{}");
		free(aliases);
	}
}

static void show_action(json_t *doc)
{
	printf("%s: %s", str(doc, "action"), str(doc, "id"));
	if (json_string_value(json_object_get(doc, "state"))) /* cancel: where it is now */
		printf("  (the run is now %s)", str(doc, "state"));
	printf("\n");
}

/* ---- events --------------------------------------------------------------------------- */

struct sse {
	char *line;          /* partial line */
	size_t n;
	char event[64];
	char last_id[32];    /* for Last-Event-ID on reconnect */
	char *data;          /* data of the event being read */
	char final_state[32];
	int json;
};

static void sse_dispatch(struct sse *s)
{
	if (!s->data)
		return;
	json_t *d = json_loads(s->data, 0, NULL);
	if (s->json) {
		printf("%s\n", s->data);
	} else if (!strcmp(s->event, "end")) {
		/* printed by the caller */
	} else {
		char when[32];
		tf_cli_fmt_time(json_object_get(d, "at"), when, sizeof(when));
		printf("%s  %-8s %-14s", when, s->event, str(d, "step"));
		if (json_string_value(json_object_get(d, "to")))
			printf(" %s -> %s", str(d, "from"), str(d, "to"));
		if (json_string_value(json_object_get(d, "message")))
			printf("  %s", str(d, "message"));
		printf("\n");
	}
	if (!strcmp(s->event, "end"))
		snprintf(s->final_state, sizeof(s->final_state), "%s", str(d, "state"));
	fflush(stdout);
	json_decref(d);
	free(s->data);
	s->data = NULL;
	s->event[0] = 0;
}

static void sse_line(struct sse *s, const char *l)
{
	if (!*l) {
		sse_dispatch(s);
	} else if (!strncmp(l, "event: ", 7)) {
		snprintf(s->event, sizeof(s->event), "%s", l + 7);
	} else if (!strncmp(l, "id: ", 4)) {
		snprintf(s->last_id, sizeof(s->last_id), "%s", l + 4);
	} else if (!strncmp(l, "data: ", 6)) {
		char *d = s->data ? tf_xasprintf("%s\n%s", s->data, l + 6) : tf_xstrdup(l + 6);
		free(s->data);
		s->data = d;
	}
}

static size_t on_sse(char *d, size_t sz, size_t nm, void *u)
{
	struct sse *s = u;
	for (size_t i = 0; i < sz * nm; i++) {
		if (d[i] == '\n') {
			s->line = tf_xrealloc(s->line, s->n + 1);
			s->line[s->n] = 0;
			sse_line(s, s->line);
			s->n = 0;
		} else if (d[i] != '\r') {
			s->line = tf_xrealloc(s->line, s->n + 1);
			s->line[s->n++] = d[i];
		}
	}
	return sz * nm;
}

/* Follows a run's events to its end; returns the exit code for its final state. */
static int follow(const struct remote *r, const char *run, int json)
{
	struct sse s = {.json = json};
	for (int tries = 0; !*s.final_state && tries < 1000; tries++) {
		CURL *c = curl_easy_init();
		char *url = tf_xasprintf("%s/api/v1/runs/%s/events", r->url, run);
		char *auth = r->token ? tf_xasprintf("Authorization: Bearer %s", r->token) : NULL;
		char *last = *s.last_id ? tf_xasprintf("Last-Event-ID: %s", s.last_id) : NULL;
		struct curl_slist *h = NULL;
		if (auth)
			h = curl_slist_append(h, auth);
		if (last)
			h = curl_slist_append(h, last);
		curl_easy_setopt(c, CURLOPT_URL, url);
		curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
		curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_sse);
		curl_easy_setopt(c, CURLOPT_WRITEDATA, &s);
		common_opts(c);
		curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L); /* keep-alives come every 10 s */
		curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 60L);
		CURLcode cc = curl_easy_perform(c);
		long status = 0;
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
		long wait = retry_wait(c, status);
		curl_slist_free_all(h);
		curl_easy_cleanup(c);
		free(url);
		free(auth);
		free(last);
		if (status >= 400 && status != 429 && status != 503) {
			fprintf(stderr, "tpuflow: events of run %s: HTTP %ld\n", run, status);
			break;
		}
		if (!*s.final_state) {
			if (cc != CURLE_OK)
				fprintf(stderr, "tpuflow: event stream broke (%s); reconnecting\n",
				        curl_easy_strerror(cc));
			sleep(wait ? (unsigned)wait : tries < 5 ? 1 : 3);
		}
	}
	free(s.line);
	free(s.data);
	if (!*s.final_state)
		return TF_EXIT_UNAVAILABLE;
	if (!json)
		printf("run %s %s\n", run, s.final_state);
	return strcmp(s.final_state, "succeeded") ? TF_EXIT_FAILED : TF_EXIT_OK;
}

/* ---- commands ----------------------------------------------------------------------------- */

static int remote_run(const struct remote *r, int argc, char **argv)
{
	const char *file = NULL;
	int detach = 0;
	json_t *params = json_object(), *labels = json_object();
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if ((!strcmp(a, "--param") || !strcmp(a, "--label")) && i + 1 < argc) {
			const char *kv = argv[++i], *eq = strchr(kv, '=');
			if (!eq || eq == kv) {
				json_decref(params);
				json_decref(labels);
				return tf_cli_usage_error("run", "%s wants NAME=VALUE, not '%s'", a, kv);
			}
			char *k = tf_xasprintf("%.*s", (int)(eq - kv), kv);
			json_object_set_new(!strcmp(a, "--param") ? params : labels, k,
			                    json_string(eq + 1));
			free(k);
		} else if (!strcmp(a, "--detach")) {
			detach = 1;
		} else if (a[0] == '-') {
			json_decref(params);
			json_decref(labels);
			return tf_cli_usage_error("run", "with --remote, run takes FILE [--param K=V] "
			                                 "[--label K=V] [--detach], not '%s'",
			                          a);
		} else {
			file = a;
		}
	}
	char *yaml = NULL;
	size_t len = 0;
	if (!file || tf_read_file(file, 4 << 20, &yaml, &len)) {
		json_decref(params);
		json_decref(labels);
		if (!file)
			return tf_cli_usage_error("run", "expected a pipeline FILE");
		fprintf(stderr, "tpuflow run: cannot read '%s'\n", file);
		return TF_EXIT_DATAERR;
	}
	json_t *req = json_pack("{s:s%, s:o, s:o}", "yaml", yaml, len, "params", params, "labels",
	                        labels);
	free(yaml);
	char *body = json_dumps(req, JSON_COMPACT);
	json_decref(req);
	char key[33], *out = NULL, err[512];
	new_key(key);
	/* sent again with the same key when no answer came (request()): never two runs */
	long st = request(r, "POST", "/api/v1/runs", body, key, &out, err, sizeof(err));
	free(body);
	if (!st) {
		fprintf(stderr, "tpuflow run: %s\n", err);
		free(out);
		return TF_EXIT_UNAVAILABLE;
	}
	if (st >= 300) {
		int ret = print_problem_in(st, out, file);
		free(out);
		return ret;
	}
	json_t *doc = json_loads(out, 0, NULL);
	free(out);
	char run[64];
	snprintf(run, sizeof(run), "%s", str(doc, "id"));
	json_decref(doc);
	if (!r->json || detach)
		printf(r->json ? "{\"id\": \"%s\"}\n" : "run %s submitted\n", run);
	return detach ? TF_EXIT_OK : follow(r, run, r->json);
}

/* A streamed answer: a 2xx body goes to stdout as it comes, an error's is kept for
 * print_problem. */
struct logs_sink {
	CURL *c;
	struct body err;
	size_t out; /* bytes of a 2xx body written to stdout */
};

static size_t on_logs(char *d, size_t sz, size_t nm, void *u)
{
	struct logs_sink *k = u;
	long status = 0;
	curl_easy_getinfo(k->c, CURLINFO_RESPONSE_CODE, &status);
	if (status >= 300)
		return on_body(d, sz, nm, &k->err);
	size_t n = fwrite(d, sz, nm, stdout);
	fflush(stdout);
	k->out += n * sz;
	return n * sz;
}

static int is_one_of(const char *s, const char *const *words)
{
	for (; s && *words; words++)
		if (!strcmp(s, *words))
			return 1;
	return 0;
}

/* Whether a followed log that ended cleanly ended with its step: the stream ends by itself
 * once the step or its run is final, and also when the daemon stops (docs/api.md). 0 when
 * neither is final, or when it cannot be told (no daemon answers). */
static int log_ended_with_step(const struct remote *r, const char *run, const char *step)
{
	static const char *const run_final[] = {"succeeded", "failed", "interrupted", NULL};
	static const char *const step_final[] = {"succeeded", "cached", "skipped", "failed", NULL};
	char *p = tf_xasprintf("/api/v1/runs/%s", run), *body = NULL, err[512];
	long st = request(r, "GET", p, NULL, NULL, &body, err, sizeof(err));
	json_t *doc = st == 200 ? json_loads(body, 0, NULL) : NULL;
	int ended = is_one_of(json_string_value(json_object_get(doc, "state")), run_final);
	size_t i;
	json_t *s;
	json_array_foreach(json_object_get(doc, "steps"), i, s)
	{
		const char *name = json_string_value(json_object_get(s, "name"));
		if (name && !strcmp(name, step))
			ended |= is_one_of(json_string_value(json_object_get(s, "state")), step_final);
	}
	json_decref(doc);
	free(body);
	free(p);
	return ended;
}

static int step_logs(const struct remote *r, const char *run, const char *step, int follow_)
{
	CURL *c = curl_easy_init();
	char *es = curl_easy_escape(c, step, 0);
	char *url = tf_xasprintf("%s/api/v1/runs/%s/steps/%s/logs%s", r->url, run, es,
	                         follow_ ? "?follow=true" : "");
	char *auth = r->token ? tf_xasprintf("Authorization: Bearer %s", r->token) : NULL;
	struct curl_slist *h = auth ? curl_slist_append(NULL, auth) : NULL;
	struct logs_sink sink = {.c = c};
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_logs);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &sink);
	common_opts(c);
	CURLcode cc;
	long status;
	/* sent again as request() does while nothing went to stdout: an answer asking to come
	 * back, or none (a log cut in its middle is said below, not sent twice) */
	for (int attempt = 1;; attempt++) {
		cc = curl_easy_perform(c);
		status = 0;
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
		char err[512] = "";
		if (cc != CURLE_OK)
			snprintf(err, sizeof(err), "%s: %s", url, curl_easy_strerror(cc));
		long wait = cc == CURLE_OK ? retry_wait(c, status)
		            : sink.out   ? 0
		                         : resend_wait(cc, 1, attempt);
		if (!wait || attempt > retries())
			break;
		retry_sleep(cc == CURLE_OK ? status : 0, sink.err.p, err, wait, attempt);
		free(sink.err.p);
		sink.err = (struct body){0};
	}
	curl_slist_free_all(h);
	curl_free(es);
	curl_easy_cleanup(c);
	int ret = TF_EXIT_OK;
	if (status >= 300) { /* the problem, with the exit code of every other remote command */
		ret = print_problem(status, sink.err.p);
	} else if (cc != CURLE_OK) {
		fprintf(stderr, "tpuflow runs logs: %s: %s\n", url, curl_easy_strerror(cc));
		ret = TF_EXIT_UNAVAILABLE;
	} else if (follow_ && !log_ended_with_step(r, run, step)) {
		fprintf(stderr,
		        "tpuflow runs logs: the log of step '%s' ended before the step did (the "
		        "daemon stopped?); run the command again to follow it on\n",
		        step);
		ret = TF_EXIT_UNAVAILABLE;
	}
	free(sink.err.p);
	free(url);
	free(auth);
	return ret;
}

/* The logs of one step, or of every step of the run in file order. */
static int remote_logs(const struct remote *r, const char *run, const char *step, int follow_)
{
	if (step)
		return step_logs(r, run, step, follow_);
	char *p = tf_xasprintf("/api/v1/runs/%s/steps", run), *body = NULL, err[512];
	long st = request(r, "GET", p, NULL, NULL, &body, err, sizeof(err));
	free(p);
	if (st != 200) {
		int ret = st ? print_problem(st, body) : TF_EXIT_UNAVAILABLE;
		if (!st)
			fprintf(stderr, "tpuflow: %s\n", err);
		free(body);
		return ret;
	}
	json_t *doc = json_loads(body, 0, NULL);
	free(body);
	size_t i;
	json_t *s;
	int ret = TF_EXIT_OK;
	json_array_foreach(json_object_get(doc, "items"), i, s)
	{
		if (!json_integer_value(json_object_get(s, "attempts")))
			continue;
		printf("\n### step %s (%s)\n", str(s, "name"), str(s, "state"));
		fflush(stdout);
		int rc = step_logs(r, run, str(s, "name"), follow_);
		if (rc)
			ret = rc;
	}
	json_decref(doc);
	return ret;
}

/* The full id of the run `arg` names (an id, a unique prefix, "latest") into id, as the
 * daemon resolves it: 0, or the exit code after saying why (as the local command says it). */
static int resolve_run(const struct remote *r, const char *cmd, const char *arg, char id[32])
{
	char *e = curl_easy_escape(NULL, arg, 0), *body = NULL, err[512];
	char *p = tf_xasprintf("/api/v1/runs/%s", e);
	long st = request(r, "GET", p, NULL, NULL, &body, err, sizeof(err));
	json_t *doc = st == 200 ? json_loads(body, 0, NULL) : NULL;
	const char *full = json_string_value(json_object_get(doc, "id"));
	int ret = TF_EXIT_OK;
	if (!st) {
		fprintf(stderr, "tpuflow: %s\n", err);
		ret = TF_EXIT_UNAVAILABLE;
	} else if (st == 404 || st == 409) { /* 409: the prefix names several runs */
		ret = tf_cli_run_unresolved(cmd, arg, st == 409 ? -EEXIST : -ENOENT);
	} else if (st != 200) {
		ret = print_problem(st, body);
	} else if (!full || strlen(full) >= 32) {
		fprintf(stderr, "tpuflow %s: the daemon's answer names no run\n", cmd);
		ret = TF_EXIT_UNAVAILABLE;
	} else {
		snprintf(id, 32, "%s", full);
	}
	json_decref(doc);
	free(body);
	free(p);
	curl_free(e);
	return ret;
}

/* The delete report of a refused DELETE (409, 503, 404): the one its problem carries (what
 * was removed before it stopped, what is kept and for whom), with the members in the order
 * tf_run_delete_report_json writes them; from the problem's detail when it carries none (an
 * older daemon). A new reference. */
static json_t *refusal_report(const char *id, int rc, int dry_run, json_t *problem)
{
	struct tf_run_delete_report none = {0};
	json_t *rep = tf_run_delete_report_json(
	    id, rc, dry_run, json_string_value(json_object_get(problem, "detail")), &none);
	if (!json_string_value(json_object_get(problem, "reason")))
		return rep;
	const char *k;
	json_t *v;
	json_object_foreach(rep, k, v)
	{
		json_t *sent = json_object_get(problem, k);
		if (sent)
			json_object_set(rep, k, sent);
	}
	return rep;
}

/* `runs delete RUN... [--dry-run]`: each run resolved as the local command resolves it, then
 * DELETE /api/v1/runs/{id}, printed as the local command prints it (cli/cmd_gc.c); a refusal
 * the local command puts in the run's report (a live run, a store that does not answer) is
 * one here too. */
static int remote_delete(const struct remote *r, int argc, char **argv)
{
	int dry_run = 0, nruns = 0, ret = TF_EXIT_OK;
	for (int i = 2; i < argc; i++) {
		if (!strcmp(argv[i], "--dry-run"))
			dry_run = 1;
		else if (argv[i][0] == '-')
			return tf_cli_usage_error("runs",
			                          "with --remote, delete takes RUN... "
			                          "[--dry-run], not '%s'",
			                          argv[i]);
		else
			argv[2 + nruns++] = argv[i];
	}
	if (!nruns)
		return tf_cli_usage_error("runs", "'delete' needs a run id");
	json_t *arr = json_array();
	for (int i = 0; i < nruns; i++) {
		char id[32], *body = NULL, err[512];
		int x = resolve_run(r, "runs delete", argv[2 + i], id);
		if (x) {
			if (!ret)
				ret = x;
			continue;
		}
		char *e = curl_easy_escape(NULL, id, 0);
		char *p = tf_xasprintf("/api/v1/runs/%s%s", e, dry_run ? "?dry_run=true" : "");
		curl_free(e);
		long st = request(r, "DELETE", p, NULL, NULL, &body, err, sizeof(err));
		json_t *doc = st ? json_loads(body ? body : "", 0, NULL) : NULL;
		int rc = st == 404 ? -ENOENT : st == 409 ? -EBUSY : st == 503 ? -EIO : 0;
		if (!st) {
			fprintf(stderr, "tpuflow: %s\n", err);
			x = TF_EXIT_UNAVAILABLE;
		} else if (st == 200 || rc) { /* a report, or a refusal as the local one reports */
			json_t *rep =
			    st == 200 ? json_incref(doc) : refusal_report(id, rc, dry_run, doc);
			x = tf_cli_delete_print(r->json, rep, arr);
			json_decref(rep);
		} else {
			x = print_problem(st, body);
		}
		if (x && !ret)
			ret = x;
		json_decref(doc);
		free(body);
		free(p);
	}
	if (r->json)
		tf_cli_print_json(stdout, arr);
	json_decref(arr);
	return ret;
}

/* `gc [--keep-last N] [--older-than AGE] [--pipeline NAME] [--dry-run | --apply]`: POST
 * /api/v1/runs:gc, printed as the local command prints it. */
static int remote_gc(const struct remote *r, struct tf_cli *cli, int argc, char **argv)
{
	struct tf_gc_policy pol;
	const char *older_than;
	int apply, ret = tf_cli_gc_options(argc, argv, cli, &pol, &older_than, &apply);
	if (ret >= 0)
		return ret;
	json_t *req = json_pack("{s:b}", "apply", apply);
	if (pol.keep_last >= 0)
		json_object_set_new(req, "keep_last", json_integer(pol.keep_last));
	if (older_than)
		json_object_set_new(req, "older_than", json_string(older_than));
	if (pol.pipeline)
		json_object_set_new(req, "pipeline", json_string(pol.pipeline));
	char *body = json_dumps(req, JSON_COMPACT), *out = NULL, err[512];
	json_decref(req);
	long st = request(r, "POST", "/api/v1/runs:gc", body, NULL, &out, err, sizeof(err));
	free(body);
	json_t *doc = st == 200 ? json_loads(out, 0, NULL) : NULL;
	if (!st) {
		fprintf(stderr, "tpuflow gc: %s\n", err);
		ret = TF_EXIT_UNAVAILABLE;
	} else if (st != 200) {
		ret = print_problem(st, out);
	} else if (!doc) {
		fprintf(stderr, "tpuflow gc: the daemon's answer is not JSON\n");
		ret = TF_EXIT_UNAVAILABLE;
	} else {
		ret = tf_cli_gc_print(r->json, doc);
	}
	json_decref(doc);
	free(out);
	return ret;
}

static int remote_runs(const struct remote *r, int argc, char **argv)
{
	const char *sub = argc > 1 ? argv[1] : "list";
	if (!strcmp(sub, "list")) {
		char q[512] = "/api/v1/runs?";
		int limit = 0;
		for (int i = 2; i + 1 < argc; i += 2) {
			const char *flag = argv[i] + (strncmp(argv[i], "--", 2) ? 0 : 2);
			if (strcmp(flag, "state") && strcmp(flag, "pipeline") && strcmp(flag, "label") &&
			    strcmp(flag, "limit") && strcmp(flag, "cursor") && strcmp(flag, "since"))
				return tf_cli_usage_error("runs", "unknown option '%s'", argv[i]);
			char since[32];
			const char *val = argv[i + 1];
			if (!strcmp(flag, "since")) { /* an age or a date, sent as Unix seconds */
				double t;
				if (tf_cli_parse_since("runs", "--since", val, &t))
					return TF_EXIT_USAGE;
				snprintf(since, sizeof(since), "%.0f", t > 0 ? t : 0);
				val = since;
			}
			limit |= !strcmp(flag, "limit");
			char *e = curl_easy_escape(NULL, val, 0);
			size_t n = strlen(q);
			snprintf(q + n, sizeof(q) - n, "%s=%s&", flag, e);
			curl_free(e);
		}
		if (!limit) /* the local command's page */
			snprintf(q + strlen(q), sizeof(q) - strlen(q), "limit=50&");
		q[strlen(q) - 1] = 0; /* the last '&' */
		struct remote text = *r; /* --json too is printed by a printer of this file */
		text.json = 0;
		return simple(&text, "GET", q, NULL, r->json ? show_runs_json : show_runs);
	}
	if (!strcmp(sub, "delete"))
		return remote_delete(r, argc, argv);
	if (argc < 3)
		return tf_cli_usage_error("runs", "%s wants a RUN id", sub);
	char *e = curl_easy_escape(NULL, argv[2], 0);
	int ret;
	char *p = NULL;
	if (!strcmp(sub, "show")) {
		p = tf_xasprintf("/api/v1/runs/%s", e);
		ret = simple(r, "GET", p, NULL, tf_cli_runs_show_print);
	} else if (!strcmp(sub, "cancel") || !strcmp(sub, "retry") || !strcmp(sub, "resume")) {
		char key[33];
		new_key(key); /* safe to send again: never a second cancel */
		p = tf_xasprintf("/api/v1/runs/%s:%s", e, sub);
		ret = simple(r, "POST", p, key, show_action);
	} else if (!strcmp(sub, "logs")) {
		int fl = 0;
		const char *step = NULL;
		for (int i = 3; i < argc; i++) {
			if (!strcmp(argv[i], "--follow") || !strcmp(argv[i], "-f"))
				fl = 1;
			else
				step = argv[i];
		}
		ret = remote_logs(r, e, step, fl);
	} else if (!strcmp(sub, "events") || !strcmp(sub, "watch")) {
		ret = follow(r, e, r->json);
	} else {
		ret = tf_cli_usage_error("runs", "with --remote: list, show, logs, events, cancel, "
		                                 "retry, resume or delete");
	}
	free(p);
	curl_free(e);
	return ret;
}

static void show_model(json_t *d)
{
	tf_cli_models_show(str(d, "name"), d, 0);
}

static void show_version(json_t *d)
{
	tf_cli_models_show(str(d, "model"), d, 1);
}

static void show_alias(json_t *d)
{
	printf("%s '%s' -> version %lld\n", str(d, "model"), str(d, "alias"),
	       (long long)json_integer_value(json_object_get(d, "version")));
}

/* `models compare NAME V1 V2`: the API's answer printed as the local command prints it. */
static int remote_compare(const struct remote *r, const char *path, const char *model,
                          const char *v1, const char *v2)
{
	char *body = NULL, err[512];
	long st = request(r, "GET", path, NULL, NULL, &body, err, sizeof(err));
	json_t *doc = st == 200 && !r->json ? json_loads(body, 0, NULL) : NULL;
	int ret = TF_EXIT_OK;
	if (!st) {
		fprintf(stderr, "tpuflow: %s\n", err);
		ret = TF_EXIT_UNAVAILABLE;
	} else if (st >= 300) {
		ret = print_problem(st, body);
	} else if (doc) {
		tf_cli_models_compare(model, v1, v2, json_object_get(doc, "a"),
		                      json_object_get(doc, "b"), 0);
	} else {
		print_answer(r, body, NULL);
	}
	json_decref(doc);
	free(body);
	return ret;
}

static int remote_models(const struct remote *r, int argc, char **argv)
{
	const char *sub = argc > 1 ? argv[1] : "list";
	if (!strcmp(sub, "list") && argc <= 2)
		return simple(r, "GET", "/api/v1/models", NULL, show_models);
	int want = !strcmp(sub, "show")                               ? (argc == 4 ? 4 : 3)
	           : !strcmp(sub, "alias") || !strcmp(sub, "compare") ? 5
	                                                              : -1;
	if (want != argc)
		return tf_cli_usage_error("models", "with --remote: list, show NAME [VERSION], alias "
		                                    "NAME ALIAS VERSION or compare NAME V1 V2");
	char *e = curl_easy_escape(NULL, argv[2], 0);
	char *v = argc > 3 ? curl_easy_escape(NULL, argv[argc - 1], 0) : NULL;
	char *p = NULL;
	int ret;
	if (!strcmp(sub, "alias")) {
		json_t *b = json_pack("{s:s, s:s}", "alias", argv[3], "version", argv[4]);
		char *body = json_dumps(b, JSON_COMPACT), *out = NULL, err[512];
		p = tf_xasprintf("/api/v1/models/%s/aliases", e);
		long st = request(r, "POST", p, body, NULL, &out, err, sizeof(err));
		if (!st) {
			fprintf(stderr, "tpuflow: %s\n", err);
			ret = TF_EXIT_UNAVAILABLE;
		} else if (st >= 300) {
			ret = print_problem(st, out);
		} else {
			print_answer(r, out, show_alias);
			ret = TF_EXIT_OK;
		}
		json_decref(b);
		free(body);
		free(out);
	} else if (!strcmp(sub, "compare")) {
		char *v1 = curl_easy_escape(NULL, argv[3], 0);
		p = tf_xasprintf("/api/v1/models/%s:compare?a=%s&b=%s", e, v1, v);
		ret = remote_compare(r, p, argv[2], argv[3], argv[4]);
		curl_free(v1);
	} else {
		p = v ? tf_xasprintf("/api/v1/models/%s/versions/%s", e, v)
		      : tf_xasprintf("/api/v1/models/%s", e);
		ret = simple(r, "GET", p, NULL, v ? show_version : show_model);
	}
	free(p);
	curl_free(e);
	curl_free(v);
	return ret;
}

int tf_cli_remote(struct tf_cli *cli, const char *url, int argc, char **argv)
{
	char base[1024];
	snprintf(base, sizeof(base), "%s", url);
	size_t n = strlen(base);
	while (n && base[n - 1] == '/')
		base[--n] = 0;
	if (strncmp(base, "http://", 7) && strncmp(base, "https://", 8))
		return tf_cli_usage_error(argv[0], "--remote wants an http:// or https:// URL, not "
		                                   "'%s'",
		                          url);
	struct remote r = {.url = base, .token = getenv("TPUFLOW_TOKEN"), .json = cli->json};
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--json"))
			r.json = 1;
	int k = 0;
	for (int i = 0; i < argc; i++) /* --json was taken above */
		if (strcmp(argv[i], "--json"))
			argv[k++] = argv[i];
	argc = k;
	curl_global_init(CURL_GLOBAL_DEFAULT);
	int ret;
	if (!strcmp(argv[0], "run"))
		ret = remote_run(&r, argc, argv);
	else if (!strcmp(argv[0], "runs"))
		ret = remote_runs(&r, argc, argv);
	else if (!strcmp(argv[0], "gc"))
		ret = remote_gc(&r, cli, argc, argv);
	else
		ret = remote_models(&r, argc, argv);
	curl_global_cleanup();
	return ret;
}

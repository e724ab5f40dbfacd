/* routes.c — owns the route table of the API and the handlers behind it: runs (list with
 * filters and cursor pages, show, steps, logs, submit, cancel, retry, resume), live events
 * as Server-Sent Events from the database, pipeline validation, the model registry, the
 * slice pool and its queue, tokens, health, readiness, the OpenAPI document and /metrics.
 *
 * Each entry names its scope and its schemas; web/http.c routes and authorizes from the same
 * table, web/openapi.c documents it. Schemas refer to the components of web/openapi.c.
 */
#include "web/api.h"
#include "web/serve.h"
#include "web/tokens.h"

#define TF_LOG_TAG "web"
#include "common/common.h"
#include "common/log.h"
#include "orchestrator/broker.h"
#include "orchestrator/pipeline.h"
#include "orchestrator/registry.h"
#include "orchestrator/schedules.h"
#include "orchestrator/slices.h"
#include "orchestrator/state.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- scopes ----------------------------------------------------------------------------- */

static const char *const scope_names[TF_SCOPE_LAST] = {"unset", "public", "read",
                                                       "trigger", "admin", "predict"};

const char *tf_scope_name(enum tf_scope s)
{
	return (unsigned)s < TF_SCOPE_LAST ? scope_names[s] : "?";
}

int tf_scope_parse(const char *name, enum tf_scope *out)
{
	for (int i = TF_SCOPE_READ; name && i < TF_SCOPE_LAST; i++)
		if (!strcmp(name, scope_names[i])) {
			*out = (enum tf_scope)i;
			return 0;
		}
	return -EINVAL;
}

int tf_scope_allows(enum tf_scope have, enum tf_scope need)
{
	if (need == TF_SCOPE_PUBLIC)
		return 1;
	if (need == TF_SCOPE_PREDICT)
		return have == TF_SCOPE_PREDICT || have == TF_SCOPE_ADMIN;
	return have != TF_SCOPE_PREDICT && have >= need && have < TF_SCOPE_LAST;
}

/* ---- small helpers ---------------------------------------------------------------------- */

static json_t *col_text(struct tf_stmt *s, int c)
{
	const char *t = tf_stmt_text(s, c);
	return t ? json_string(t) : json_null();
}

static json_t *col_real(struct tf_stmt *s, int c)
{
	return tf_stmt_is_null(s, c) ? json_null() : json_real(tf_stmt_double(s, c));
}

/* ---- the runs page writer ---------------------------------------------------------------
 * A page of runs is the API's hottest answer: it is written straight into one tf_buf (no
 * jansson tree, no stdio stream; strings by tf_web_put_json_str), every value checked or
 * escaped. */

#define PUT_LIT(b, s) tf_buf_append((b), (s), sizeof(s) - 1)

static void put_i64(struct tf_buf *b, long long v)
{
	char d[24], *e = d + sizeof(d), *q = e;
	unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
	do
		*--q = (char)('0' + u % 10);
	while (u /= 10);
	if (v < 0)
		*--q = '-';
	tf_buf_append(b, q, (size_t)(e - q));
}

/* A time in Unix seconds with six decimals (null when NULL). */
static void put_time(struct tf_buf *b, struct tf_stmt *s, int c)
{
	if (tf_stmt_is_null(s, c)) {
		PUT_LIT(b, "null");
		return;
	}
	double v = tf_stmt_double(s, c);
	if (!(v >= 0 && v < 9e9)) { /* beyond, v * 1e6 would not be exact */
		tf_buf_printf(b, "%.6f", v);
		return;
	}
	long long us = llround(v * 1e6), frac = us % 1000000;
	put_i64(b, us / 1000000);
	char f[7] = ".";
	for (int i = 6; i > 0; i--, frac /= 10)
		f[i] = (char)('0' + frac % 10);
	tf_buf_append(b, f, 7);
}

/* A query value percent-encoded (unreserved characters as they are), inside a JSON string. */
static void put_query(struct tf_buf *b, const char *v)
{
	static const char hex[] = "0123456789ABCDEF";
	for (const unsigned char *p = (const unsigned char *)v; *p; p++) {
		if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
		    strchr("-._~", *p)) {
			tf_buf_append(b, p, 1);
		} else {
			char e[3] = {'%', hex[*p >> 4], hex[*p & 15]};
			tf_buf_append(b, e, 3);
		}
	}
}

static int is_final(const char *state)
{
	return state && (!strcmp(state, "succeeded") || !strcmp(state, "failed") ||
	                 !strcmp(state, "interrupted"));
}

/* Resolves the {id} parameter (a full id, a unique prefix or "latest"); 404 otherwise. */
int tf_web_run_param(struct tf_web_req *rq, struct tf_web_resp *rs, char id[32])
{
	const char *p = tf_web_param(rq, "id");
	int rc = p && strlen(p) < 32 ? tf_run_find(rq->st, p, id) : -ENOENT;
	if (rc == -EEXIST)
		tf_web_problem(rs, 409, rq->path, "'%s' matches more than one run; give more of the id",
		               p);
	else if (rc)
		tf_web_problem(rs, 404, rq->path, "no run '%s'", p ? p : "");
	return rc;
}

/* Parses an integer query argument in [min, max], defaulting to def; 400 on junk. */
static int query_int(struct tf_web_req *rq, struct tf_web_resp *rs, const char *name,
                     long long min, long long max, long long def, long long *out)
{
	const char *v = tf_web_query(rq, name);
	if (!v) {
		*out = def;
		return 0;
	}
	char *end;
	long long x = strtoll(v, &end, 10);
	if (!*v || *end || x < min || x > max) {
		tf_web_problem(rs, 400, rq->path, "query '%s' wants a whole number from %lld to %lld",
		               name, min, max);
		return -1;
	}
	*out = x;
	return 0;
}

static json_t *labels_of(struct tf_store *st, const char *run)
{
	json_t *o = json_object();
	struct tf_stmt *s =
	    tf_store_query(st, "SELECT key, value FROM run_labels WHERE run_id=?", "t", run);
	while (s && tf_stmt_step(s) == 1)
		json_object_set_new(o, tf_stmt_text(s, 0), json_string(tf_stmt_text(s, 1)));
	tf_stmt_done(s);
	return o;
}

/* ---- health ------------------------------------------------------------------------------- */

static void h_healthz(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	(void)rq;
	tf_web_json(rs, 200, json_pack("{s:s}", "status", "ok"));
}

static void h_readyz(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	const struct tf_web_hooks *h = tf_web_hooks(rq->srv);
	int64_t one = 0;
	int db = tf_store_query_int(rq->st, &one, "SELECT 1", "");
	int ready = !db && (!h->ready || h->ready(h->ctx));
	if (!ready) {
		tf_web_problem(rs, 503, rq->path, "%s",
		               db ? "the state database does not answer" : "the daemon is not ready");
		rs->retry_after = 1;
		return;
	}
	tf_web_json(rs, 200, json_pack("{s:s, s:b}", "status", "ready", "daemon", h->submit != NULL));
}

static void h_openapi(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	(void)rq;
	tf_web_json(rs, 200, tf_openapi_document());
}

static void h_metrics(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	char *text = NULL;
	size_t len = 0;
	int rc = tf_metrics_render(rq->srv, rq->st, &text, &len);
	if (rc) {
		tf_web_problem_errno(rs, rc, rq->path, tf_store_errmsg(rq->st));
		return;
	}
	rs->status = 200;
	rs->body = text;
	rs->len = len;
	rs->type = "text/plain; version=0.0.4; charset=utf-8";
}

/* ---- runs --------------------------------------------------------------------------------- */

static void h_runs_list(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	long long limit, since_i;
	if (query_int(rq, rs, "limit", 1, 500, 50, &limit) ||
	    query_int(rq, rs, "since", 0, 1LL << 40, 0, &since_i))
		return;
	const char *state = tf_web_query(rq, "state"), *pipe = tf_web_query(rq, "pipeline");
	const char *label = tf_web_query(rq, "label"), *cursor = tf_web_query(rq, "cursor");
	const char *trig = tf_web_query(rq, "trigger"), *text = tf_web_query(rq, "q");
	if (text && strlen(text) > 128) {
		tf_web_problem(rs, 400, rq->path, "q (text search) takes up to 128 characters");
		return;
	}
	enum tf_run_state sv;
	if (state && tf_run_state_parse(state, &sv)) {
		tf_web_problem(rs, 400, rq->path,
		               "unknown state '%s' (pending, running, succeeded, failed, interrupted)",
		               state);
		return;
	}
	char lkey[128] = "", *lval = NULL;
	if (label) {
		const char *eq = strchr(label, '=');
		size_t kn = eq ? (size_t)(eq - label) : strlen(label);
		if (!kn || kn >= sizeof(lkey)) {
			tf_web_problem(rs, 400, rq->path, "label wants KEY=VALUE or KEY");
			return;
		}
		memcpy(lkey, label, kn);
		lkey[kn] = 0;
		lval = eq ? (char *)eq + 1 : NULL;
	}
	struct tf_stmt *s = tf_store_query(
	    rq->st,
	    "SELECT r.id, r.pipeline, r.state, r.created_at, r.started_at, r.finished_at, "
	    "r.steps_total, r.steps_done, r.error, r.trigger, r.steps_skipped, "
	    "r.state, r.owner, r.pid, r.heartbeat_at "
	    "FROM runs r WHERE (?1 IS NULL OR r.state=?1) AND (?2 IS NULL OR r.pipeline=?2) "
	    "AND r.created_at>=?3 "
	    "AND (?4 IS NULL OR EXISTS (SELECT 1 FROM run_labels l WHERE l.run_id=r.id AND "
	    "l.key=?4 AND (?5 IS NULL OR l.value=?5))) "
	    "AND (?6 IS NULL OR (r.created_at, r.id) < "
	    "(SELECT created_at, id FROM runs WHERE id=?6)) "
	    "AND (?8 IS NULL OR r.trigger=?8) "
	    "AND (?9 IS NULL OR instr(r.id, ?9) OR instr(r.pipeline, ?9) OR instr(r.error, ?9)) "
	    "ORDER BY r.created_at DESC, r.id DESC LIMIT ?7",
	    "ttdtttitt", state, pipe, (double)since_i, label ? lkey : NULL, lval, cursor,
	    (int64_t)limit + 1, trig, text);
	if (!s) {
		tf_web_problem_errno(rs, -EIO, rq->path, tf_store_errmsg(rq->st));
		return;
	}
	struct tf_buf b = {0};
	char last[32] = "";
	int rc, n = 0, more = 0;
	PUT_LIT(&b, "{\"items\":[");
	while ((rc = tf_stmt_step(s)) == 1) {
		if (n == limit) {
			more = 1;
			break;
		}
		if (n++)
			PUT_LIT(&b, ",");
		PUT_LIT(&b, "{\"id\":");
		tf_web_put_json_str(&b, tf_stmt_text(s, 0));
		PUT_LIT(&b, ",\"pipeline\":");
		tf_web_put_json_str(&b, tf_stmt_text(s, 1));
		PUT_LIT(&b, ",\"state\":");
		tf_web_put_json_str(&b, tf_stmt_text(s, 2));
		PUT_LIT(&b, ",\"created_at\":");
		put_time(&b, s, 3);
		PUT_LIT(&b, ",\"started_at\":");
		put_time(&b, s, 4);
		PUT_LIT(&b, ",\"finished_at\":");
		put_time(&b, s, 5);
		PUT_LIT(&b, ",\"steps\":");
		put_i64(&b, tf_stmt_int(s, 6));
		PUT_LIT(&b, ",\"done\":");
		put_i64(&b, tf_stmt_int(s, 7));
		PUT_LIT(&b, ",\"error\":");
		tf_web_put_json_str(&b, tf_stmt_text(s, 8));
		/* runs.retry_of is never written (a run is retried in place): always null */
		PUT_LIT(&b, ",\"retry_of\":null,\"trigger\":");
		tf_web_put_json_str(&b, tf_stmt_text(s, 9));
		PUT_LIT(&b, ",\"skipped\":");
		put_i64(&b, tf_stmt_int(s, 10));
		PUT_LIT(&b, ",\"orphaned\":");
		if (tf_run_row_orphaned(s, 11))
			PUT_LIT(&b, "true}");
		else
			PUT_LIT(&b, "false}");
		snprintf(last, sizeof(last), "%s", tf_stmt_text(s, 0));
	}
	tf_stmt_done(s);
	PUT_LIT(&b, "],\"next\":");
	if (more) {
		PUT_LIT(&b, "\"/api/v1/runs?limit=");
		put_i64(&b, limit);
		PUT_LIT(&b, "&cursor=");
		put_query(&b, last);
		const char *names[] = {"state", "pipeline", "label", "since", "trigger", "q"};
		for (int i = 0; i < 6; i++) {
			const char *v = tf_web_query(rq, names[i]);
			if (v) {
				PUT_LIT(&b, "&");
				tf_buf_append(&b, names[i], strlen(names[i]));
				PUT_LIT(&b, "=");
				put_query(&b, v);
			}
		}
		PUT_LIT(&b, "\"}");
	} else {
		PUT_LIT(&b, "null}");
	}
	if (rc < 0) {
		tf_buf_release(&b);
		tf_web_problem_errno(rs, rc, rq->path, tf_store_errmsg(rq->st));
		return;
	}
	tf_web_json_text(rs, &b);
}

static void h_run_show(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	char id[32];
	if (tf_web_run_param(rq, rs, id))
		return;
	json_t *d = NULL;
	int rc = tf_run_describe(rq->st, id, &d);
	if (rc) {
		tf_web_problem_errno(rs, rc, rq->path, tf_store_errmsg(rq->st));
		return;
	}
	json_object_set_new(d, "labels", labels_of(rq->st, id));
	tf_web_json(rs, 200, d);
}

static void h_run_steps(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	char id[32];
	if (tf_web_run_param(rq, rs, id))
		return;
	json_t *d = NULL;
	int rc = tf_run_describe(rq->st, id, &d);
	if (rc) {
		tf_web_problem_errno(rs, rc, rq->path, tf_store_errmsg(rq->st));
		return;
	}
	json_t *steps = json_incref(json_object_get(d, "steps"));
	json_decref(d);
	tf_web_json(rs, 200, json_pack("{s:s, s:o}", "run_id", id, "items", steps));
}

/* ---- events (Server-Sent Events) ------------------------------------------------------- */

struct events_stream {
	struct tf_store *st;
	char run[32];      /* one run, or "" for every run */
	int64_t last;      /* last id sent (per-run id, or the global sequence) */
	char *pending;
	size_t plen, poff;
	int ended;
};

static void sse_event(FILE *f, const char *event, const char *id, json_t *data)
{
	char *d = json_dumps(data, JSON_COMPACT);
	fprintf(f, "event: %s\nid: %s\ndata: %s\n\n", event, id, d ? d : "{}");
	free(d);
}

/* Fetches the next batch of events as SSE text; 0 with pending set, or nothing new. */
static int events_batch(struct events_stream *e)
{
	struct tf_stmt *s =
	    *e->run ? tf_store_query(e->st,
	                             "SELECT id, run_id, at, step, attempt, kind, from_state, "
	                             "to_state, message FROM events WHERE run_id=? AND id>? "
	                             "ORDER BY id LIMIT 200",
	                             "ti", e->run, e->last)
	            : tf_store_query(e->st,
	                             "SELECT q.seq, e.run_id, e.at, e.step, e.attempt, e.kind, "
	                             "e.from_state, e.to_state, e.message FROM event_seq q "
	                             "JOIN events e ON e.run_id=q.run_id AND e.id=q.id "
	                             "WHERE q.seq>? ORDER BY q.seq LIMIT 200",
	                             "i", e->last);
	if (!s)
		return -EIO;
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	int rc;
	while ((rc = tf_stmt_step(s)) == 1) {
		e->last = tf_stmt_int(s, 0);
		char id[32];
		snprintf(id, sizeof(id), "%lld", (long long)e->last);
		json_t *d = json_pack("{s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o}", "run_id",
		                      col_text(s, 1), "at", col_real(s, 2), "step", col_text(s, 3),
		                      "attempt",
		                      tf_stmt_is_null(s, 4) ? json_null()
		                                            : json_integer(tf_stmt_int(s, 4)),
		                      "kind", col_text(s, 5), "from", col_text(s, 6), "to",
		                      col_text(s, 7), "message", col_text(s, 8));
		sse_event(f, tf_stmt_text(s, 5) ? tf_stmt_text(s, 5) : "event", id, d);
		json_decref(d);
	}
	tf_stmt_done(s);
	fclose(f);
	if (rc < 0) {
		free(buf);
		return rc;
	}
	free(e->pending);
	e->pending = buf;
	e->plen = len;
	e->poff = 0;
	return 0;
}

static long events_fill(void *ctx, char *buf, size_t max)
{
	struct events_stream *e = ctx;
	if (e->poff >= e->plen) {
		if (e->ended)
			return -1;
		/* Read the run's state before the batch: a final state seen here means every
		 * event of the run is already committed, so the batch below holds the last ones. */
		char *state = NULL;
		if (*e->run)
			tf_store_query_text(e->st, &state, "SELECT state FROM runs WHERE id=?", "t",
			                    e->run);
		int final = is_final(state);
		if (events_batch(e))
			e->ended = 1;
		if (final && e->plen == 0) {
			free(e->pending);
			json_t *d = json_pack("{s:s, s:s}", "run_id", e->run, "state", state);
			FILE *f = open_memstream(&e->pending, &e->plen);
			char id[32];
			snprintf(id, sizeof(id), "%lld", (long long)e->last);
			sse_event(f, "end", id, d);
			fclose(f);
			json_decref(d);
			e->poff = 0;
			e->ended = 1;
		}
		free(state);
		if (e->plen == 0)
			return e->ended ? -1 : 0;
	}
	size_t n = e->plen - e->poff < max ? e->plen - e->poff : max;
	memcpy(buf, e->pending + e->poff, n);
	e->poff += n;
	return (long)n;
}

static void events_free(void *ctx)
{
	struct events_stream *e = ctx;
	tf_store_close(e->st);
	free(e->pending);
	free(e);
}

static void events_start(struct tf_web_req *rq, struct tf_web_resp *rs, const char *run)
{
	const char *from = tf_web_header(rq, "Last-Event-ID");
	if (!from)
		from = tf_web_query(rq, "after");
	int64_t last = 0;
	int latest = from && !strcmp(from, "latest");
	if (latest) { /* from now: the newest event so far, sent as the stream's first id */
		int rc = run ? tf_store_query_int(rq->st, &last,
		                                  "SELECT coalesce(max(id), 0) FROM events WHERE "
		                                  "run_id=?",
		                                  "t", run)
		             : tf_store_query_int(rq->st, &last,
		                                  "SELECT coalesce(max(seq), 0) FROM event_seq", "");
		if (rc) {
			tf_web_problem_errno(rs, rc, rq->path, tf_store_errmsg(rq->st));
			return;
		}
	} else if (from) {
		char *end;
		long long v = strtoll(from, &end, 10);
		if (!*from || *end || v < 0) {
			tf_web_problem(rs, 400, rq->path,
			               "Last-Event-ID wants the id of an event this stream sent "
			               "(or ?after=latest to start from now)");
			return;
		}
		last = v;
	}
	struct events_stream *e = tf_xcalloc(1, sizeof(*e));
	snprintf(e->run, sizeof(e->run), "%s", run ? run : "");
	e->last = last;
	char err[256];
	char *path = tf_xasprintf("%s/%s", tf_web_home(rq->srv), TF_STORE_FILE);
	int rc = tf_store_open(path, 0, &e->st, err, sizeof(err));
	free(path);
	if (rc) {
		events_free(e);
		tf_web_problem(rs, 503, rq->path, "cannot open the state database: %s", err);
		return;
	}
	/* Tell the client how soon to come back (SSE `retry:`) before the first event; a stream
	 * that starts from now also names where it starts (`id:` alone sets the client's
	 * Last-Event-ID without an event), so a reconnect before any event misses nothing. */
	e->pending = latest ? tf_xasprintf("retry: 2000\nid: %lld\n\n", (long long)last)
	                    : tf_xstrdup("retry: 2000\n\n");
	e->plen = strlen(e->pending);
	rs->status = 200;
	rs->type = "text/event-stream";
	rs->stream = events_fill;
	rs->stream_ctx = e;
	rs->stream_free = events_free;
}

static void h_run_events(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	char id[32];
	if (tf_web_run_param(rq, rs, id))
		return;
	events_start(rq, rs, id);
}

static void h_events(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	events_start(rq, rs, NULL);
}

/* ---- submitting and acting on runs ----------------------------------------------------- */

static int hook_missing(struct tf_web_req *rq, struct tf_web_resp *rs, const void *hook)
{
	if (hook)
		return 0;
	tf_web_problem(rs, 503, rq->path,
	               "this server has no daemon attached to run work; start `tpuflow daemon`");
	return 1;
}

/* Checks a JSON object of strings/numbers/booleans; 0 or a 422 in rs. */
static int string_map(struct tf_web_req *rq, struct tf_web_resp *rs, const char *field,
                      json_t *obj, json_t **out)
{
	*out = json_object();
	if (!obj)
		return 0;
	if (!json_is_object(obj)) {
		tf_web_problem(rs, 422, rq->path, "'%s' must be an object of name: value", field);
		return -1;
	}
	const char *k;
	json_t *v;
	json_object_foreach(obj, k, v)
	{
		char num[64];
		const char *sv = json_string_value(v);
		if (json_is_integer(v))
			snprintf(num, sizeof(num), "%lld", (long long)json_integer_value(v)), sv = num;
		else if (json_is_real(v))
			snprintf(num, sizeof(num), "%.17g", json_real_value(v)), sv = num;
		else if (json_is_boolean(v))
			sv = json_is_true(v) ? "true" : "false";
		if (!sv || !*k || strlen(k) > 128) {
			tf_web_problem(rs, 422, rq->path,
			               "'%s.%s' must be a string, number or boolean (names up to 128 "
			               "characters)",
			               field, k);
			return -1;
		}
		json_object_set_new(*out, k, json_string(sv));
	}
	return 0;
}

static void h_runs_create(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	const struct tf_web_hooks *h = tf_web_hooks(rq->srv);
	if (hook_missing(rq, rs, h->submit))
		return;
	json_t *b = rq->json, *params = NULL, *labels = NULL;
	const char *k;
	json_t *v;
	json_object_foreach(b, k, v)
	{
		static const char *const known[] = {"pipeline", "yaml", "params", "priority",
		                                    "project", "labels", NULL};
		int ok = 0;
		for (int i = 0; known[i]; i++)
			ok |= !strcmp(k, known[i]);
		if (!ok) {
			const char *sug = tf_diag_suggest(k, known);
			tf_web_problem(rs, 422, rq->path, "unknown field '%s'%s%s%s", k,
			               sug ? " (did you mean '" : "", sug ? sug : "", sug ? "'?)" : "");
			return;
		}
	}
	json_t *jp = json_object_get(b, "pipeline"), *jy = json_object_get(b, "yaml");
	json_t *jprio = json_object_get(b, "priority"), *jproj = json_object_get(b, "project");
	if ((jp != NULL) == (jy != NULL) || (jp && !json_is_string(jp)) ||
	    (jy && !json_is_string(jy))) {
		tf_web_problem(rs, 422, rq->path,
		               "give exactly one of 'pipeline' (a registered pipeline's name) or "
		               "'yaml' (the pipeline file's text)");
		return;
	}
	if ((jprio && (!json_is_integer(jprio) || json_integer_value(jprio) < 0 ||
	               json_integer_value(jprio) > 9)) ||
	    (jproj && (!json_is_string(jproj) || json_string_length(jproj) > 128))) {
		tf_web_problem(rs, 422, rq->path,
		               "'priority' must be an integer from 0 to 9 and 'project' a "
		               "string of up to 128 characters");
		return;
	}
	if (string_map(rq, rs, "params", json_object_get(b, "params"), &params) ||
	    string_map(rq, rs, "labels", json_object_get(b, "labels"), &labels)) {
		json_decref(params);
		json_decref(labels);
		return;
	}
	/* A registered pipeline runs the text it was registered with. */
	char *source = NULL;
	int rc = jp ? tf_store_query_text(rq->st, &source,
	                                  "SELECT source FROM registered_pipelines WHERE name=?", "t",
	                                  json_string_value(jp))
	            : 0;
	if (rc) {
		if (rc == -ENOENT)
			tf_web_problem(rs, 404, rq->path,
			               "no registered pipeline '%s' (register it with POST "
			               "/api/v1/pipelines or `tpuflow pipelines add`, or send its 'yaml')",
			               json_string_value(jp));
		else
			tf_web_problem_errno(rs, rc, rq->path, tf_store_errmsg(rq->st));
		json_decref(params);
		json_decref(labels);
		return;
	}
	char *pj = json_dumps(params, JSON_COMPACT | JSON_SORT_KEYS);
	struct tf_web_submit sub = {
	    .pipeline = json_string_value(jp),
	    .yaml = source ? source : json_string_value(jy),
	    .yaml_len = source ? strlen(source) : jy ? json_string_length(jy) : 0,
	    .params_json = pj,
	    .priority = jprio ? (int)json_integer_value(jprio) : -1,
	    .project = json_string_value(jproj),
	};
	char run[32] = "", err[512] = "";
	struct tf_diag_list diags = {0};
	rc = h->submit(h->ctx, rq->st, &sub, run, &diags, err, sizeof(err));
	free(pj);
	free(source);
	if (rc == -EINVAL && diags.n) {
		tf_web_problem_diags(rs, 422, rq->path, &diags,
		                     *err ? err : "the pipeline has errors");
	} else if (rc) {
		tf_web_problem_errno(rs, rc, rq->path, err);
	} else {
		json_object_foreach(labels, k, v)
		{
			rc = tf_store_run(rq->st,
			                  "INSERT INTO run_labels(run_id, key, value) VALUES(?, ?, ?)",
			                  "ttt", run, k, json_string_value(v));
			if (rc)
				break;
		}
		if (rc) {
			tf_web_problem_errno(rs, rc, rq->path, tf_store_errmsg(rq->st));
		} else {
			char *ev = tf_xasprintf("/api/v1/runs/%s/events", run);
			tf_web_json(rs, 201,
			            json_pack("{s:s, s:s, s:O, s:s}", "id", run, "state", "pending",
			                      "labels", labels, "events", ev));
			free(ev);
			rs->location = tf_xasprintf("/api/v1/runs/%s", run);
			rs->wake = 1;
		}
	}
	tf_diag_list_release(&diags);
	json_decref(params);
	json_decref(labels);
}

static void run_action(struct tf_web_req *rq, struct tf_web_resp *rs, const char *what)
{
	const struct tf_web_hooks *h = tf_web_hooks(rq->srv);
	int (*act)(void *, struct tf_store *, const char *, char[32], char *, size_t) =
	    !strcmp(what, "retry") ? h->retry : h->resume;
	int cancel = !strcmp(what, "cancel");
	if (hook_missing(rq, rs, cancel ? (const void *)h->cancel : (const void *)act))
		return;
	char id[32], out[32] = "", err[512] = "";
	if (tf_web_run_param(rq, rs, id))
		return;
	int rc = cancel ? h->cancel(h->ctx, rq->st, id, err, sizeof(err))
	                : act(h->ctx, rq->st, id, out, err, sizeof(err));
	if (rc) {
		tf_web_problem_errno(rs, rc, rq->path, err);
		return;
	}
	if (cancel) {
		tf_web_json(rs, 202, json_pack("{s:s, s:s}", "id", id, "action", "cancel"));
	} else {
		tf_web_json(rs, !strcmp(what, "retry") ? 201 : 202,
		            json_pack("{s:s, s:s, s:s}", "id", *out ? out : id, "action", what,
		                      "of", id));
		rs->location = tf_xasprintf("/api/v1/runs/%s", *out ? out : id);
	}
	rs->wake = 1;
}

static void h_run_cancel(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	run_action(rq, rs, "cancel");
}

static void h_run_retry(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	run_action(rq, rs, "retry");
}

static void h_run_resume(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	run_action(rq, rs, "resume");
}

/* ---- pipelines ---------------------------------------------------------------------------- */

static void h_pipeline_validate(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	json_t *jy = json_object_get(rq->json, "yaml"), *jn = json_object_get(rq->json, "name");
	if (!json_is_string(jy) || (jn && !json_is_string(jn))) {
		tf_web_problem(rs, 422, rq->path,
		               "give 'yaml' (the pipeline file's text) and optionally 'name' (the "
		               "file name used in diagnostics)");
		return;
	}
	const char *name = jn ? json_string_value(jn) : "pipeline.yaml";
	struct tf_diag_list diags = {0};
	struct tf_pipeline *p = NULL;
	int rc = tf_pipeline_load_buffer(name, json_string_value(jy), json_string_length(jy), NULL,
	                                 0, TF_PIPELINE_ALLOW_UNSET, &p, &diags);
	if (rc) {
		tf_web_problem_diags(rs, 422, rq->path, &diags, "the pipeline has errors");
	} else {
		json_t *steps = json_array();
		for (size_t i = 0; i < p->nsteps; i++)
			json_array_append_new(steps, json_string(p->steps[i].name));
		tf_web_json(rs, 200,
		            json_pack("{s:b, s:s, s:o, s:o}", "valid", 1, "name", p->name, "steps",
		                      steps, "warnings", tf_diag_to_json(&diags)));
	}
	tf_pipeline_free(p);
	tf_diag_list_release(&diags);
}

/* Pipelines: those runs were made from (name, how many texts, the newest digest) merged with
 * the registered ones (registered, path, schedule with its next fire times). */
static void h_pipelines_list(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	json_t *reg = NULL, *byname = json_object();
	int rc = tf_pipelines_list(rq->st, tf_now_wall(), 3, &reg);
	struct tf_stmt *s = rc ? NULL : tf_store_query(
	    rq->st,
	    "SELECT name, count(*), max(created_at), (SELECT digest FROM pipelines q WHERE "
	    "q.name=p.name ORDER BY created_at DESC, id DESC LIMIT 1) FROM pipelines p "
	    "GROUP BY name ORDER BY name",
	    "");
	if (!rc && !s)
		rc = -EIO;
	while (s && (rc = tf_stmt_step(s)) == 1)
		json_object_set_new(byname, tf_stmt_text(s, 0),
		                    json_pack("{s:o, s:I, s:o, s:o, s:b, s:n}", "name", col_text(s, 0),
		                              "versions", (json_int_t)tf_stmt_int(s, 1), "updated_at",
		                              col_real(s, 2), "digest", col_text(s, 3), "registered",
		                              0, "schedule"));
	tf_stmt_done(s);
	if (rc < 0) {
		json_decref(reg);
		json_decref(byname);
		tf_web_problem_errno(rs, rc, rq->path, tf_store_errmsg(rq->st));
		return;
	}
	size_t i;
	json_t *r;
	json_array_foreach(reg, i, r)
	{
		const char *name = json_string_value(json_object_get(r, "name"));
		json_t *it = json_object_get(byname, name);
		if (!it) {
			it = json_pack("{s:s, s:i, s:O}", "name", name, "versions", 0, "updated_at",
			               json_object_get(r, "added_at"));
			json_object_set_new(byname, name, it);
		}
		json_object_set(it, "digest", json_object_get(r, "digest"));
		json_object_set(it, "path", json_object_get(r, "path"));
		json_object_set(it, "schedule", json_object_get(r, "schedule"));
		json_object_set_new(it, "registered", json_true());
	}
	json_decref(reg);
	json_t *items = json_array();
	const char *k;
	json_object_foreach(byname, k, r) json_array_append(items, r);
	json_decref(byname);
	tf_web_json(rs, 200, json_pack("{s:o}", "items", items));
}

/* The params a pipeline's text declares, [{name, type, default, description}] (a form needs
 * them to offer values); [] when the text no longer loads. */
static json_t *params_of(const char *yaml)
{
	json_t *out = json_array();
	struct tf_pipeline *p = NULL;
	struct tf_diag_list diags;
	tf_diag_list_init(&diags);
	if (yaml && !tf_pipeline_load_buffer("pipeline.yaml", yaml, strlen(yaml), NULL, 0,
	                                     TF_PIPELINE_ALLOW_UNSET, &p, &diags))
		for (size_t i = 0; i < p->nparams; i++) {
			const struct tf_param *q = &p->params[i];
			json_array_append_new(
			    out, json_pack("{s:s, s:s, s:O?, s:s?}", "name", q->name, "type",
			                   tf_param_type_name(q->type), "default", q->default_value,
			                   "description", q->description));
		}
	tf_pipeline_free(p);
	tf_diag_list_release(&diags);
	return out;
}

/* The registered text of a pipeline when it is registered, else the newest one a run used. */
static void h_pipeline_show(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	const char *name = tf_web_param(rq, "name");
	struct tf_stmt *s = tf_store_query(
	    rq->st,
	    "SELECT name, digest, path, source, added_at, 1 FROM registered_pipelines WHERE name=?1 "
	    "UNION ALL SELECT * FROM (SELECT name, digest, path, source, created_at, 0 "
	    "FROM pipelines WHERE name=?1 ORDER BY created_at DESC, id DESC LIMIT 1) LIMIT 1",
	    "t", name);
	int rc = s ? tf_stmt_step(s) : -EIO;
	if (rc == 1)
		tf_web_json(rs, 200,
		            json_pack("{s:o, s:o, s:o, s:o, s:o, s:b, s:o}", "name", col_text(s, 0),
		                      "digest", col_text(s, 1), "path", col_text(s, 2), "yaml",
		                      col_text(s, 3), "created_at", col_real(s, 4), "registered",
		                      (int)tf_stmt_int(s, 5), "params", params_of(tf_stmt_text(s, 3))));
	tf_stmt_done(s);
	if (rc == 0)
		tf_web_problem(rs, 404, rq->path, "no pipeline '%s'", name);
	else if (rc < 0)
		tf_web_problem_errno(rs, rc, rq->path, tf_store_errmsg(rq->st));
}

/* One entry of tf_pipelines_list (a new reference), NULL when not registered. */
static json_t *registered_entry(struct tf_store *st, const char *name)
{
	json_t *hit = NULL;
	return tf_pipelines_get(st, name, tf_now_wall(), 3, &hit) ? NULL : hit;
}

/* POST /pipelines and POST /schedules: registers {yaml, name?}; a schedule must have one. */
static void register_pipeline(struct tf_web_req *rq, struct tf_web_resp *rs, int schedule)
{
	json_t *jy = json_object_get(rq->json, "yaml"), *jn = json_object_get(rq->json, "name");
	if (!json_is_string(jy) || (jn && !json_is_string(jn)) ||
	    json_object_size(rq->json) != 1U + (jn != NULL)) {
		tf_web_problem(rs, 422, rq->path,
		               "give 'yaml' (the pipeline file's text) and optionally 'name' (the "
		               "file name used in diagnostics)");
		return;
	}
	const char *file = jn ? json_string_value(jn) : "pipeline.yaml";
	struct tf_diag_list diags = {0};
	char *name = NULL;
	int rc = tf_pipelines_add_text(rq->st, file, json_string_value(jy), json_string_length(jy),
	                               tf_now_wall(), &name, &diags);
	json_t *doc = rc ? NULL : registered_entry(rq->st, name);
	if (rc == -EINVAL)
		tf_web_problem_diags(rs, 422, rq->path, &diags, "the pipeline has errors");
	else if (rc || !doc)
		tf_web_problem_errno(rs, rc ? rc : -EIO, rq->path, tf_store_errmsg(rq->st));
	else if (schedule && json_is_null(json_object_get(doc, "schedule")))
		tf_web_problem(rs, 422, rq->path,
		               "pipeline '%s' has no `schedule:` block (docs/daemon.md, Schedules); "
		               "register it with POST /api/v1/pipelines instead",
		               name);
	else {
		rs->location = tf_xasprintf("/api/v1/%s/%s", schedule ? "schedules" : "pipelines", name);
		tf_web_json(rs, 201, json_incref(doc));
	}
	json_decref(doc);
	free(name);
	tf_diag_list_release(&diags);
}

static void h_pipeline_register(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	register_pipeline(rq, rs, 0);
}

static void h_pipeline_remove(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	const char *name = tf_web_param(rq, "name");
	int rc = tf_pipelines_remove(rq->st, name);
	if (rc == -ENOENT)
		tf_web_problem(rs, 404, rq->path, "no registered pipeline '%s'", name);
	else if (rc)
		tf_web_problem_errno(rs, rc, rq->path, tf_store_errmsg(rq->st));
	else
		tf_web_json(rs, 200, json_pack("{s:s, s:b}", "name", name, "registered", 0));
}

/* ---- schedules: the `schedule:` blocks of registered pipelines ------------------------ */

/* A registered pipeline's schedule with its newest fires; NULL when it has none. */
static json_t *schedule_doc(struct tf_store *st, json_t *reg)
{
	json_t *sc = json_object_get(reg, "schedule");
	if (!json_is_object(sc))
		return NULL;
	const char *name = json_string_value(json_object_get(reg, "name"));
	json_t *doc = json_deep_copy(sc), *fires = json_array();
	json_object_set_new(doc, "pipeline", json_string(name));
	json_object_set(doc, "digest", json_object_get(reg, "digest"));
	struct tf_stmt *s = tf_store_query(st,
	                                   "SELECT tick, outcome, run_id, reason, at FROM "
	                                   "schedule_fires WHERE pipeline=? ORDER BY tick DESC "
	                                   "LIMIT 5",
	                                   "t", name);
	while (s && tf_stmt_step(s) == 1)
		json_array_append_new(fires, json_pack("{s:I, s:o, s:o, s:o, s:o}", "tick",
		                                       (json_int_t)tf_stmt_int(s, 0), "outcome",
		                                       col_text(s, 1), "run", col_text(s, 2),
		                                       "reason", col_text(s, 3), "at", col_real(s, 4)));
	tf_stmt_done(s);
	json_object_set_new(doc, "fires", fires);
	return doc;
}

static void h_schedules_list(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	json_t *reg = NULL, *items = json_array(), *r;
	size_t i;
	int rc = tf_pipelines_list(rq->st, tf_now_wall(), 3, &reg);
	if (rc) {
		json_decref(items);
		tf_web_problem_errno(rs, rc, rq->path, tf_store_errmsg(rq->st));
		return;
	}
	json_array_foreach(reg, i, r)
	{
		json_t *d = schedule_doc(rq->st, r);
		if (d)
			json_array_append_new(items, d);
	}
	json_decref(reg);
	tf_web_json(rs, 200, json_pack("{s:o}", "items", items));
}

static void h_schedule_show(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	const char *name = tf_web_param(rq, "name");
	json_t *reg = registered_entry(rq->st, name), *d = reg ? schedule_doc(rq->st, reg) : NULL;
	json_decref(reg);
	if (d)
		tf_web_json(rs, 200, d);
	else
		tf_web_problem(rs, 404, rq->path, "no registered pipeline '%s' with a schedule", name);
}

static void h_schedule_create(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	register_pipeline(rq, rs, 1);
	if (rs->status == 201) { /* answer with the schedule, as GET /schedules/{name} does */
		json_t *reg = json_loadb(rs->body, rs->len, 0, NULL);
		tf_web_json(rs, 201, schedule_doc(rq->st, reg));
		json_decref(reg);
	}
}

/* The schedule goes with its pipeline: deleting it unregisters the pipeline. */
static void h_schedule_delete(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	const char *name = tf_web_param(rq, "name");
	json_t *reg = registered_entry(rq->st, name);
	int has = reg && json_is_object(json_object_get(reg, "schedule"));
	json_decref(reg);
	if (!has) {
		tf_web_problem(rs, 404, rq->path, "no registered pipeline '%s' with a schedule", name);
		return;
	}
	h_pipeline_remove(rq, rs);
}

/* POST /schedules/{name}:pause and :resume; answers with the schedule (and on resume how many
 * ticks of the pause were passed over). */
static void schedule_pause(struct tf_web_req *rq, struct tf_web_resp *rs, int pause)
{
	const char *name = tf_web_param(rq, "name");
	int passed = 0, rc = tf_schedules_pause(rq->st, name, pause, tf_now_wall(), &passed);
	json_t *reg = rc ? NULL : registered_entry(rq->st, name);
	json_t *d = reg ? schedule_doc(rq->st, reg) : NULL;
	json_decref(reg);
	if (rc == -ENOENT || rc == -EINVAL || (!rc && !d))
		tf_web_problem(rs, 404, rq->path, "no registered pipeline '%s' with a schedule", name);
	else if (rc)
		tf_web_problem_errno(rs, rc, rq->path, tf_store_errmsg(rq->st));
	else {
		if (!pause)
			json_object_set_new(d, "passed_over", json_integer(passed));
		tf_web_json(rs, 200, d);
		return;
	}
	json_decref(d);
}

static void h_schedule_pause(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	schedule_pause(rq, rs, 1);
}

static void h_schedule_resume(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	schedule_pause(rq, rs, 0);
}

/* `concurrency: replace` through the daemon's cancel hook, on the firing transaction. */
struct fire_ctx {
	struct tf_web_req *rq;
};

static int fire_cancel(void *ctx, const char *run)
{
	struct fire_ctx *f = ctx;
	const struct tf_web_hooks *h = tf_web_hooks(f->rq->srv);
	char err[256];
	return h->cancel(h->ctx, f->rq->st, run, err, sizeof(err));
}

/* Handles the ticks due now, as the daemon does every second (`tpuflow schedules fire`). */
static void h_schedules_fire(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	struct fire_ctx fc = {rq};
	struct tf_schedule_hooks sh = {.cancel = fire_cancel, .ctx = &fc};
	json_t *report = NULL, *t;
	size_t i;
	int rc = tf_schedules_fire_due(rq->st, tf_now_wall(),
	                               tf_web_hooks(rq->srv)->cancel ? &sh : NULL, &report);
	if (rc) {
		tf_web_problem_errno(rs, rc, rq->path, tf_store_errmsg(rq->st));
		return;
	}
	json_array_foreach(report, i, t) if (json_string_value(json_object_get(t, "run"))) rs->wake = 1;
	tf_web_json(rs, 200, json_pack("{s:o}", "items", report));
}

/* ---- models ------------------------------------------------------------------------------- */

static void h_models_list(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	json_t *out = NULL;
	int rc = tf_registry_list(rq->st, &out);
	if (rc)
		tf_web_problem_errno(rs, rc, rq->path, tf_store_errmsg(rq->st));
	else
		tf_web_json(rs, 200, json_pack("{s:o}", "items", out));
}

static void h_model_show(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	json_t *out = NULL;
	const char *name = tf_web_param(rq, "name");
	int rc = tf_registry_show(rq->st, name, &out);
	if (rc)
		tf_web_problem_errno(rs, rc, rq->path, rc == -ENOENT ? "no such model" : tf_store_errmsg(rq->st));
	else
		tf_web_json(rs, 200, out);
}

static void h_model_versions(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	json_t *out = NULL;
	int rc = tf_registry_show(rq->st, tf_web_param(rq, "name"), &out);
	if (rc) {
		tf_web_problem_errno(rs, rc, rq->path,
		                     rc == -ENOENT ? "no such model" : tf_store_errmsg(rq->st));
		return;
	}
	tf_web_json(rs, 200,
	            json_pack("{s:s, s:O}", "model", tf_web_param(rq, "name"), "items",
	                      json_object_get(out, "versions")));
	json_decref(out);
}

/* Resolves a version reference ("3", "v3", "latest", an alias) of {name}; 404 in rs. */
static int model_version(struct tf_web_req *rq, struct tf_web_resp *rs, const char *ref,
                         json_t **out)
{
	const char *name = tf_web_param(rq, "name");
	int64_t v = 0;
	int rc = ref ? tf_registry_resolve(rq->st, name, ref, &v) : -ENOENT;
	if (!rc)
		rc = tf_registry_version(rq->st, name, v, out);
	if (rc)
		tf_web_problem(rs, rc == -ENOENT ? 404 : 500, rq->path,
		               "model '%s' has no version '%s'", name, ref ? ref : "");
	return rc;
}

static void h_model_version(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	json_t *out = NULL;
	if (!model_version(rq, rs, tf_web_param(rq, "version"), &out))
		tf_web_json(rs, 200, out);
}

static void h_model_compare(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	json_t *a = NULL, *b = NULL;
	if (!tf_web_query(rq, "a") || !tf_web_query(rq, "b")) {
		tf_web_problem(rs, 400, rq->path, "give the two versions as ?a=V1&b=V2");
		return;
	}
	if (model_version(rq, rs, tf_web_query(rq, "a"), &a) ||
	    model_version(rq, rs, tf_web_query(rq, "b"), &b)) {
		json_decref(a);
		return;
	}
	json_t *ma = json_object_get(a, "metrics"), *mb = json_object_get(b, "metrics");
	json_t *metrics = json_object();
	const char *k;
	json_t *v;
	json_object_foreach(ma, k, v)
	{
		json_t *w = json_object_get(mb, k);
		json_t *row = json_pack("{s:O, s:O}", "a", v, "b", w ? w : json_null());
		if (json_is_number(v) && json_is_number(w))
			json_object_set_new(row, "delta",
			                    json_real(json_number_value(w) - json_number_value(v)));
		json_object_set_new(metrics, k, row);
	}
	json_object_foreach(mb, k, v) if (!json_object_get(ma, k)) json_object_set_new(
	    metrics, k, json_pack("{s:n, s:O}", "a", "b", v));
	tf_web_json(rs, 200,
	            json_pack("{s:s, s:o, s:o, s:o}", "model", tf_web_param(rq, "name"), "a", a, "b",
	                      b, "metrics", metrics));
}

static void h_model_alias(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	json_t *ja = json_object_get(rq->json, "alias"), *jv = json_object_get(rq->json, "version");
	const char *alias = json_string_value(ja);
	if (!alias || !*alias || json_string_length(ja) > 64 || !(json_is_string(jv) || json_is_integer(jv))) {
		tf_web_problem(rs, 422, rq->path,
		               "give 'alias' (e.g. production) and 'version' (a number, \"v3\", "
		               "\"latest\" or another alias)");
		return;
	}
	char why[300];
	if (tf_registry_check_name(alias, TF_REGNAME_ALIAS, why, sizeof(why))) {
		tf_web_problem(rs, 422, rq->path, "%s (docs/registry.md, Names)", why);
		return;
	}
	char ref[32];
	if (json_is_integer(jv))
		snprintf(ref, sizeof(ref), "%lld", (long long)json_integer_value(jv));
	else
		snprintf(ref, sizeof(ref), "%s", json_string_value(jv));
	json_t *ver = NULL;
	if (model_version(rq, rs, ref, &ver))
		return;
	int64_t v = json_integer_value(json_object_get(ver, "version"));
	json_decref(ver);
	int rc = tf_registry_set_alias(rq->st, tf_web_param(rq, "name"), alias, v);
	if (rc) {
		tf_web_problem_errno(rs, rc, rq->path, tf_store_errmsg(rq->st));
		return;
	}
	tf_web_json(rs, 200,
	            json_pack("{s:s, s:s, s:I}", "model", tf_web_param(rq, "name"), "alias", alias,
	                      "version", (json_int_t)v));
}

/* ---- slices and queue -------------------------------------------------------------------- */

/* How often the step of slice item `it` ({run, step, ...}) was preempted: its run's counts
 * are read once, by one query for all its steps, into counts ("RUN\nSTEP": n; "RUN": true
 * once read), not one query per item (each scanning its run's rows again). */
static json_int_t preemptions(struct tf_store *st, json_t *counts, const json_t *it)
{
	const char *run = json_string_value(json_object_get(it, "run"));
	const char *step = json_string_value(json_object_get(it, "step"));
	if (!run || !step)
		return 0;
	if (!json_object_get(counts, run)) {
		json_object_set_new(counts, run, json_true());
		struct tf_stmt *q =
		    tf_store_query(st,
		                   "SELECT step, count(*) FROM slice_jobs WHERE run_id=? AND "
		                   "reclaim_class='preempted' GROUP BY step",
		                   "t", run);
		while (q && tf_stmt_step(q) == 1) {
			char *key = tf_xasprintf("%s\n%s", run, tf_stmt_text(q, 0));
			json_object_set_new(counts, key, json_integer(tf_stmt_int(q, 1)));
			free(key);
		}
		tf_stmt_done(q);
	}
	char *key = tf_xasprintf("%s\n%s", run, step);
	json_int_t n = json_integer_value(json_object_get(counts, key));
	free(key);
	return n;
}

static int slices_view(struct tf_web_req *rq, struct tf_web_resp *rs, json_t **out)
{
	struct tf_slices_view v = {0};
	char err[256];
	int rc = tf_slices_view_load(tf_web_home(rq->srv), NULL, 0, tf_now_wall(), &v, err,
	                             sizeof(err));
	if (rc) {
		tf_web_problem_errno(rs, rc, rq->path, err);
		return rc;
	}
	*out = json_incref(v.recorded);
	/* the pools as the scheduler sees them: shape, and who holds each chip (a running
	 * item's `job`), -1 failed, -2 held for a waiting job, 0 free */
	json_t *d = tf_sched_describe_json(v.sched, 0);
	json_object_set(*out, "pools", json_object_get(d, "pools"));
	json_decref(d);
	tf_slices_view_release(&v);
	/* how often each attempt's step has been preempted before */
	json_t *counts = json_object();
	const char *lists[] = {"running", "waiting"};
	for (int k = 0; k < 2; k++) {
		size_t i;
		json_t *it;
		json_array_foreach(json_object_get(*out, lists[k]), i, it)
		{
			json_object_set_new(it, "preemptions",
			                    json_integer(preemptions(rq->st, counts, it)));
		}
	}
	json_decref(counts);
	return 0;
}

static void h_slices(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	json_t *doc = NULL;
	if (!slices_view(rq, rs, &doc))
		tf_web_json(rs, 200, doc);
}

static void h_queue(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	json_t *doc = NULL;
	if (slices_view(rq, rs, &doc))
		return;
	tf_web_json(rs, 200, json_pack("{s:O}", "items", json_object_get(doc, "waiting")));
	json_decref(doc);
}

/* POST /api/v1/slices/{pool}/chips/{chip}:fail and :repair; chip is "x,y,z". */
static void chip_action(struct tf_web_req *rq, struct tf_web_resp *rs, int fail)
{
	const char *pool = tf_web_param(rq, "pool"), *chip = tf_web_param(rq, "chip");
	int xyz[3];
	char end;
	if (!chip || sscanf(chip, "%d,%d,%d%c", &xyz[0], &xyz[1], &xyz[2], &end) != 3 ||
	    xyz[0] < 0 || xyz[1] < 0 || xyz[2] < 0) {
		tf_web_problem(rs, 400, rq->path, "the chip is x,y,z (e.g. 0,1,2), not '%s'",
		               chip ? chip : "");
		return;
	}
	const char *reason = rq->json ? json_string_value(json_object_get(rq->json, "reason")) : NULL;
	int rc = fail ? tf_broker_chip_fail(rq->st, pool, xyz, tf_now_wall(),
	                                    reason ? reason : "marked failed through the API")
	              : tf_broker_chip_repair(rq->st, pool, xyz);
	if (rc) {
		tf_web_problem_errno(rs, rc, rq->path,
		                     rc == -ENOENT ? "that chip is not marked failed"
		                                   : tf_store_errmsg(rq->st));
		return;
	}
	tf_web_json(rs, 200,
	            json_pack("{s:s, s:[i,i,i], s:s}", "pool", pool, "chip", xyz[0], xyz[1], xyz[2],
	                      "state", fail ? "failed" : "ok"));
}

static void h_chip_fail(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	chip_action(rq, rs, 1);
}

static void h_chip_repair(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	chip_action(rq, rs, 0);
}

/* ---- tokens ------------------------------------------------------------------------------- */

static void h_tokens_list(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	json_t *out = NULL;
	int rc = tf_token_list(rq->st, &out);
	if (rc)
		tf_web_problem_errno(rs, rc, rq->path, tf_store_errmsg(rq->st));
	else
		tf_web_json(rs, 200, json_pack("{s:o}", "items", out));
}

static void h_tokens_create(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	const char *name = json_string_value(json_object_get(rq->json, "name"));
	const char *sc = json_string_value(json_object_get(rq->json, "scope"));
	json_t *je = json_object_get(rq->json, "expires_in");
	enum tf_scope scope;
	double ttl = 0;
	if (!name || !*name || strlen(name) > 128 || tf_scope_parse(sc, &scope) ||
	    (je && (!json_is_string(je) || tf_token_parse_ttl(json_string_value(je), &ttl)))) {
		tf_web_problem(rs, 422, rq->path,
		               "give 'name' (1-128 characters), 'scope' (read, trigger, admin or "
		               "predict) and optionally 'expires_in' (e.g. 90d, 12h)");
		return;
	}
	char tok[TF_TOKEN_LEN + 1];
	int64_t id = 0;
	int rc = tf_token_create(rq->st, name, scope, ttl, tok, &id);
	json_t *doc = NULL;
	if (!rc)
		rc = tf_token_get(rq->st, id, &doc);
	if (rc) {
		tf_web_problem_errno(rs, rc, rq->path, tf_store_errmsg(rq->st));
		return;
	}
	json_object_set_new(doc, "token", json_string(tok));
	tf_web_json(rs, 201, doc);
	rs->location = tf_xasprintf("/api/v1/tokens/%lld", (long long)id);
}

static void h_token_revoke(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	const char *id = tf_web_param(rq, "id");
	int rc = tf_token_revoke(rq->st, id, tf_now_wall());
	json_t *doc = NULL;
	if (!rc)
		rc = tf_token_get(rq->st, strtoll(id, NULL, 10), &doc);
	if (rc)
		tf_web_problem(rs, rc == -ENOENT ? 404 : 500, rq->path, "no token with id '%s'", id);
	else
		tf_web_json(rs, 200, doc);
}

static void h_whoami(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	tf_web_json(rs, 200,
	            json_pack("{s:s, s:b, s:o}", "scope", tf_scope_name(rq->scope), "auth",
	                      rq->token_id != 0, "token_id",
	                      rq->token_id ? json_integer(rq->token_id) : json_null()));
}

/* ---- the table ---------------------------------------------------------------------------- */

#define REF(x) "{\"$ref\":\"#/components/schemas/" x "\"}"
#define LIST(x) "{\"type\":\"object\",\"required\":[\"items\"],\"properties\":{\"items\":" \
	"{\"type\":\"array\",\"items\":" x "}}}"
#define ANYOBJ "{\"type\":\"object\"}"

const struct tf_route tf_routes[] = {
    {"GET", "/healthz", TF_SCOPE_PUBLIC, h_healthz, 0, "healthz", "Liveness: the process answers",
     NULL, NULL, "{\"type\":\"object\",\"required\":[\"status\"]}", 200, NULL},
    {"GET", "/readyz", TF_SCOPE_PUBLIC, h_readyz, 0, "readyz",
     "Readiness: the database answers and the daemon takes runs", NULL, NULL,
     "{\"type\":\"object\",\"required\":[\"status\"]}", 200, NULL},
    {"GET", "/api/v1/openapi.json", TF_SCOPE_PUBLIC, h_openapi, 0, "openapi",
     "This document", NULL, NULL, ANYOBJ, 200, NULL},
    {"GET", "/", TF_SCOPE_PUBLIC, tf_web_ui, 0, "dashboard",
     "The dashboard's page shell (its data comes from this API with the user's token)", NULL,
     NULL, "{\"type\":\"string\"}", 200, "text/html; charset=utf-8"},
    {"GET", "/ui/app.js", TF_SCOPE_PUBLIC, tf_web_ui, 0, "dashboardScript",
     "The dashboard's script (one bundle)", NULL, NULL, "{\"type\":\"string\"}", 200,
     "text/javascript; charset=utf-8"},
    {"GET", "/ui/app.css", TF_SCOPE_PUBLIC, tf_web_ui, 0, "dashboardStyle",
     "The dashboard's style sheet", NULL, NULL, "{\"type\":\"string\"}", 200,
     "text/css; charset=utf-8"},
    {"GET", "/metrics", TF_SCOPE_READ, h_metrics, 0, "metrics",
     "Prometheus metrics (text format 0.0.4)", NULL, NULL, "{\"type\":\"string\"}", 200,
     "text/plain; version=0.0.4; charset=utf-8"},
    {"GET", "/api/v1/runs", TF_SCOPE_READ, h_runs_list, TF_ROUTE_CACHED, "listRuns",
     "Runs, newest first, one page at a time",
     "state:string:pending, running, succeeded, failed or interrupted;"
     "pipeline:string:pipeline name;label:string:KEY=VALUE or KEY;"
     "since:integer:created at or after (Unix seconds);trigger:string:cli, api or schedule;"
     "q:string:text in the run's id, pipeline or error;limit:integer:page size 1-500 "
     "(default 50);cursor:string:the id after which the page starts (from next)",
     NULL, REF("RunPage"), 200, NULL},
    {"POST", "/api/v1/runs", TF_SCOPE_TRIGGER, h_runs_create,
     TF_ROUTE_JSON_BODY | TF_ROUTE_IDEMPOTENT, "createRun",
     "Submit a run of a registered pipeline or of inline YAML", NULL, REF("RunRequest"),
     REF("RunCreated"), 201, NULL},
    {"GET", "/api/v1/runs/{id}", TF_SCOPE_READ, h_run_show, 0, "getRun",
     "One run with its steps and attempts", NULL, NULL, REF("Run"), 200, NULL},
    {"GET", "/api/v1/runs/{id}/steps", TF_SCOPE_READ, h_run_steps, 0, "listRunSteps",
     "The steps of a run", NULL, NULL,
     "{\"type\":\"object\",\"required\":[\"run_id\",\"items\"],\"properties\":{\"run_id\":{"
     "\"type\":\"string\"},\"items\":{\"type\":\"array\",\"items\":" REF("Step") "}}}",
     200, NULL},
    {"GET", "/api/v1/runs/{id}/steps/{step}/logs", TF_SCOPE_READ, tf_web_step_logs, TF_ROUTE_STREAM,
     "getStepLogs", "The logs of a step's attempts (follow=true streams until the step ends)",
     "follow:boolean:keep the response open and send each attempt's log as it grows "
     "(a running attempt's from its work directory, then as stored)",
     NULL, "{\"type\":\"string\"}", 200, "text/plain; charset=utf-8"},
    {"GET", "/api/v1/runs/{id}/steps/{step}/checkpoints", TF_SCOPE_READ,
     tf_web_step_checkpoints, 0, "listStepCheckpoints",
     "A train step's complete checkpoints in the run's object store, oldest first", NULL,
     NULL, REF("CheckpointList"), 200, NULL},
    {"GET", "/api/v1/runs/{id}/graph", TF_SCOPE_READ, tf_web_run_graph, 0, "getRunGraph",
     "The run's DAG, planned from the pipeline source it ran: steps with needs, level, when",
     NULL, NULL, REF("RunGraph"), 200, NULL},
    {"GET", "/api/v1/runs/{id}/events", TF_SCOPE_READ, h_run_events, TF_ROUTE_STREAM,
     "streamRunEvents",
     "A run's events as Server-Sent Events, ending with an `end` event once the run is final; "
     "resume with Last-Event-ID",
     "after:string:start after this event id (like Last-Event-ID), or 'latest' for events "
     "from now on", NULL,
     "{\"type\":\"string\"}", 200, "text/event-stream"},
    {"POST", "/api/v1/runs/{id}:cancel", TF_SCOPE_TRIGGER, h_run_cancel, TF_ROUTE_IDEMPOTENT,
     "cancelRun", "Ask the daemon to cancel a run", NULL, NULL, REF("RunAction"), 202, NULL},
    {"POST", "/api/v1/runs/{id}:retry", TF_SCOPE_TRIGGER, h_run_retry, TF_ROUTE_IDEMPOTENT,
     "retryRun", "A new run that re-runs the failed steps of a finished one", NULL, NULL,
     REF("RunAction"), 201, NULL},
    {"POST", "/api/v1/runs/{id}:resume", TF_SCOPE_TRIGGER, h_run_resume, TF_ROUTE_IDEMPOTENT,
     "resumeRun", "Continue an interrupted or failed run", NULL, NULL, REF("RunAction"), 202,
     NULL},
    {"GET", "/api/v1/events", TF_SCOPE_READ, h_events, TF_ROUTE_STREAM, "streamEvents",
     "Every run's events as Server-Sent Events, in commit order; resume with Last-Event-ID",
     "after:string:start after this event id (like Last-Event-ID), or 'latest' for events "
     "from now on (no history replayed)", NULL,
     "{\"type\":\"string\"}", 200, "text/event-stream"},
    {"GET", "/api/v1/pipelines", TF_SCOPE_READ, h_pipelines_list, 0, "listPipelines",
     "Pipelines the database knows", NULL, NULL,
     LIST("{\"type\":\"object\",\"required\":[\"name\"]}"), 200, NULL},
    {"GET", "/api/v1/pipelines/{name}", TF_SCOPE_READ, h_pipeline_show, 0, "getPipeline",
     "The registered text of a pipeline, else the newest one a run used, and the params it "
     "declares",
     NULL, NULL,
     "{\"type\":\"object\",\"required\":[\"name\",\"yaml\",\"digest\",\"params\"],"
     "\"properties\":{\"params\":{\"type\":\"array\",\"items\":{\"type\":\"object\","
     "\"required\":[\"name\",\"type\"]}}}}",
     200, NULL},
    {"POST", "/api/v1/pipelines", TF_SCOPE_TRIGGER, h_pipeline_register,
     TF_ROUTE_JSON_BODY | TF_ROUTE_IDEMPOTENT, "registerPipeline",
     "Register (or replace) a pipeline: its text is stored, runs by name and its schedule use "
     "it; 422 with every problem as {file, line, col, message, hint}",
     NULL, REF("PipelineText"), REF("RegisteredPipeline"), 201, NULL},
    {"DELETE", "/api/v1/pipelines/{name}", TF_SCOPE_TRIGGER, h_pipeline_remove, 0,
     "unregisterPipeline", "Unregister a pipeline (its runs and past fires are kept)", NULL,
     NULL, "{\"type\":\"object\",\"required\":[\"name\",\"registered\"]}", 200, NULL},
    {"GET", "/api/v1/schedules", TF_SCOPE_READ, h_schedules_list, 0, "listSchedules",
     "The schedules of registered pipelines with their next fire times and newest fires", NULL,
     NULL, LIST(REF("Schedule")), 200, NULL},
    {"POST", "/api/v1/schedules", TF_SCOPE_TRIGGER, h_schedule_create,
     TF_ROUTE_JSON_BODY | TF_ROUTE_IDEMPOTENT, "createSchedule",
     "Register a pipeline whose text has a `schedule:` block (422 without one)", NULL,
     REF("PipelineText"), REF("Schedule"), 201, NULL},
    {"GET", "/api/v1/schedules/{name}", TF_SCOPE_READ, h_schedule_show, 0, "getSchedule",
     "One registered pipeline's schedule", NULL, NULL, REF("Schedule"), 200, NULL},
    {"DELETE", "/api/v1/schedules/{name}", TF_SCOPE_TRIGGER, h_schedule_delete, 0,
     "deleteSchedule", "Unregister a scheduled pipeline: its schedule stops", NULL, NULL,
     "{\"type\":\"object\",\"required\":[\"name\",\"registered\"]}", 200, NULL},
    {"POST", "/api/v1/schedules/{name}:pause", TF_SCOPE_TRIGGER, h_schedule_pause, 0,
     "pauseSchedule",
     "Pause a schedule: no tick is handled while paused (none fires, none is recorded missed)",
     NULL, NULL, REF("Schedule"), 200, NULL},
    {"POST", "/api/v1/schedules/{name}:resume", TF_SCOPE_TRIGGER, h_schedule_resume, 0,
     "resumeSchedule",
     "Resume a paused schedule from the first tick after now; `passed_over` counts the ticks "
     "of the pause, which are not caught up",
     NULL, NULL, REF("Schedule"), 200, NULL},
    {"POST", "/api/v1/schedules:fire", TF_SCOPE_TRIGGER, h_schedules_fire, 0, "fireSchedules",
     "Handle the ticks due now (the daemon does this every second): each is fired, skipped "
     "or missed once",
     NULL, NULL, LIST(REF("ScheduleFire")), 200, NULL},
    {"POST", "/api/v1/pipelines:validate", TF_SCOPE_READ, h_pipeline_validate,
     TF_ROUTE_JSON_BODY, "validatePipeline",
     "Check a pipeline file: 200, or 422 with every problem as {file, line, col, message, "
     "hint}",
     NULL,
     "{\"type\":\"object\",\"required\":[\"yaml\"],\"properties\":{\"yaml\":{\"type\":"
     "\"string\"},\"name\":{\"type\":\"string\"}}}",
     "{\"type\":\"object\",\"required\":[\"valid\",\"name\",\"steps\"]}", 200, NULL},
    {"GET", "/api/v1/models", TF_SCOPE_READ, h_models_list, 0, "listModels",
     "Registered models", NULL, NULL, LIST("{\"type\":\"object\",\"required\":[\"name\"]}"),
     200, NULL},
    {"GET", "/api/v1/models/{name}", TF_SCOPE_READ, h_model_show, 0, "getModel",
     "A model's versions, aliases and deployments", NULL, NULL,
     "{\"type\":\"object\",\"required\":[\"name\",\"versions\"]}", 200, NULL},
    {"GET", "/api/v1/models/{name}/versions", TF_SCOPE_READ, h_model_versions, 0,
     "listModelVersions", "A model's versions, oldest first, with their aliases", NULL, NULL,
     "{\"type\":\"object\",\"required\":[\"model\",\"items\"],\"properties\":{\"items\":"
     "{\"type\":\"array\",\"items\":{\"type\":\"object\",\"required\":[\"version\"]}}}}",
     200, NULL},
    {"GET", "/api/v1/models/{name}/versions/{version}", TF_SCOPE_READ, h_model_version, 0,
     "getModelVersion", "One version (a number, v3, latest or an alias)", NULL, NULL,
     "{\"type\":\"object\",\"required\":[\"version\"]}", 200, NULL},
    {"GET", "/api/v1/models/{name}:compare", TF_SCOPE_READ, h_model_compare, 0, "compareModel",
     "Two versions' metrics side by side",
     "a:string:first version (number, vN, latest or alias);b:string:second version", NULL,
     "{\"type\":\"object\",\"required\":[\"a\",\"b\",\"metrics\"]}", 200, NULL},
    {"POST", "/api/v1/models/{name}/aliases", TF_SCOPE_ADMIN, h_model_alias, TF_ROUTE_JSON_BODY,
     "setModelAlias", "Point an alias (e.g. production) at a version", NULL,
     "{\"type\":\"object\",\"required\":[\"alias\",\"version\"],\"properties\":{\"alias\":{"
     "\"type\":\"string\"},\"version\":{\"type\":[\"string\",\"integer\"]}}}",
     "{\"type\":\"object\",\"required\":[\"model\",\"alias\",\"version\"]}", 200, NULL},
    {"GET", "/api/v1/slices", TF_SCOPE_READ, h_slices, 0, "getSlices",
     "The slice pool: each pool's chips (occupancy), running attempts with their boxes, "
     "waiting ones, accounting",
     NULL, NULL,
     "{\"type\":\"object\",\"required\":[\"running\",\"waiting\",\"pools\"],"
     "\"properties\":{\"pools\":{\"type\":\"array\",\"items\":{\"type\":\"object\","
     "\"required\":[\"name\",\"spec\",\"dims\",\"occupancy\"]}}}}",
     200, NULL},
    {"GET", "/api/v1/queue", TF_SCOPE_READ, h_queue, 0, "getQueue",
     "Attempts waiting for a slice, with the reason", NULL, NULL,
     LIST("{\"type\":\"object\"}"), 200, NULL},
    {"POST", "/api/v1/slices/{pool}/chips/{chip}:fail", TF_SCOPE_ADMIN, h_chip_fail, 0,
     "failChip",
     "Mark a chip (x,y,z) of a pool failed: slices on it are reclaimed, nothing is placed on it",
     NULL, NULL, "{\"type\":\"object\",\"required\":[\"pool\",\"chip\",\"state\"]}", 200, NULL},
    {"POST", "/api/v1/slices/{pool}/chips/{chip}:repair", TF_SCOPE_ADMIN, h_chip_repair, 0,
     "repairChip", "Return a failed chip to service", NULL, NULL,
     "{\"type\":\"object\",\"required\":[\"pool\",\"chip\",\"state\"]}", 200, NULL},
    {"GET", "/api/v1/whoami", TF_SCOPE_READ, h_whoami, 0, "whoami",
     "The caller's scope (what the dashboard may offer it)", NULL, NULL,
     "{\"type\":\"object\",\"required\":[\"scope\",\"auth\"],\"properties\":{"
     "\"scope\":{\"enum\":[\"read\",\"trigger\",\"admin\"]},\"auth\":{\"type\":"
     "\"boolean\"},\"token_id\":{\"type\":[\"integer\",\"null\"]}}}",
     200, NULL},
    {"GET", "/api/v1/tokens", TF_SCOPE_ADMIN, h_tokens_list, 0, "listTokens",
     "API tokens (never their secret)", NULL, NULL, LIST(REF("Token")), 200, NULL},
    {"POST", "/api/v1/tokens", TF_SCOPE_ADMIN, h_tokens_create, TF_ROUTE_JSON_BODY,
     "createToken", "Make a token; the response is the only time its secret is shown", NULL,
     "{\"type\":\"object\",\"required\":[\"name\",\"scope\"],\"properties\":{\"name\":{"
     "\"type\":\"string\"},\"scope\":{\"enum\":[\"read\",\"trigger\",\"admin\",\"predict\"]},"
     "\"expires_in\":{\"type\":\"string\"}}}",
     REF("Token"), 201, NULL},
    {"DELETE", "/api/v1/tokens/{id}", TF_SCOPE_ADMIN, h_token_revoke, 0, "revokeToken",
     "Revoke a token (by id, name or prefix)", NULL, NULL, REF("Token"), 200, NULL},
    TF_SERVE_ROUTES, /* model serving: web/serve.h */
};
const size_t tf_nroutes = TF_ARRAY_LEN(tf_routes);

/* ---- matching ----------------------------------------------------------------------------- */

static int hexval(int c)
{
	return c >= '0' && c <= '9' ? c - '0'
	       : c >= 'a' && c <= 'f' ? c - 'a' + 10
	       : c >= 'A' && c <= 'F' ? c - 'A' + 10
	                              : -1;
}

/* Percent-decodes n bytes of s into a new string; NULL when malformed or decoding to NUL. */
static char *decode(const char *s, size_t n)
{
	char *o = tf_xmalloc(n + 1);
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		int c = (unsigned char)s[i];
		if (c == '%') {
			int a = i + 2 < n ? hexval(s[i + 1]) : -1, b = i + 2 < n ? hexval(s[i + 2]) : -1;
			if (a < 0 || b < 0 || (a == 0 && b == 0)) {
				free(o);
				return NULL;
			}
			c = a * 16 + b;
			i += 2;
		}
		o[k++] = (char)c;
	}
	o[k] = 0;
	return o;
}

void tf_route_release_params(struct tf_web_req *rq)
{
	for (int i = 0; i < rq->nparams; i++)
		free(rq->pvals[i]);
	rq->nparams = 0;
}

int tf_route_match(const char *pattern, const char *path, struct tf_web_req *rq)
{
	tf_route_release_params(rq);
	const char *p = pattern, *u = path;
	while (*p) {
		if (*p == '{') {
			const char *close = strchr(p, '}');
			if (!close || rq->nparams == TF_WEB_MAX_PARAMS)
				goto fail;
			/* A value is one path segment up to a custom verb: no '/' and no ':'. */
			const char *e = u;
			while (*e && *e != '/' && *e != ':')
				e++;
			if (e == u)
				goto fail;
			char *val = decode(u, (size_t)(e - u));
			if (!val)
				goto fail;
			size_t nl = (size_t)(close - p - 1);
			if (nl >= sizeof(rq->pnames[0])) {
				free(val);
				goto fail;
			}
			memcpy(rq->pnames[rq->nparams], p + 1, nl);
			rq->pnames[rq->nparams][nl] = 0;
			rq->pvals[rq->nparams++] = val;
			p = close + 1;
			u = e;
			continue;
		}
		if (*p != *u)
			goto fail;
		p++;
		u++;
	}
	if (*u)
		goto fail;
	return 1;
fail:
	tf_route_release_params(rq);
	return 0;
}

const struct tf_route *tf_route_find(const char *method, const char *path,
                                     struct tf_web_req *rq, char **allow)
{
	*allow = NULL;
	char methods[64] = "";
	const struct tf_route *hit = NULL;
	for (size_t i = 0; i < tf_nroutes; i++) {
		if (!tf_route_match(tf_routes[i].pattern, path, rq))
			continue;
		if (!strcmp(tf_routes[i].method, method) ||
		    (!strcmp(method, "HEAD") && !strcmp(tf_routes[i].method, "GET") &&
		     !(tf_routes[i].flags & TF_ROUTE_STREAM))) {
			hit = &tf_routes[i];
			break;
		}
		if (!strstr(methods, tf_routes[i].method)) {
			size_t n = strlen(methods);
			snprintf(methods + n, sizeof(methods) - n, "%s%s", n ? ", " : "",
			         tf_routes[i].method);
		}
		tf_route_release_params(rq);
	}
	if (!hit && *methods)
		*allow = tf_xstrdup(methods);
	return hit;
}

int tf_routes_check(char *err, size_t errlen)
{
	for (size_t i = 0; i < tf_nroutes; i++) {
		const struct tf_route *r = &tf_routes[i];
		if (r->scope <= TF_SCOPE_UNSET || r->scope >= TF_SCOPE_LAST) {
			tf_errf(err, errlen, "route %s %s has no scope: refusing to start", r->method,
			        r->pattern);
			return -EINVAL;
		}
		const char *schemas[2] = {r->req, r->resp};
		for (int k = 0; k < 2; k++) {
			json_t *j = schemas[k] ? json_loads(schemas[k], 0, NULL) : NULL;
			if (schemas[k] && !json_is_object(j)) {
				json_decref(j);
				tf_errf(err, errlen, "route %s %s has a schema that is not a JSON object",
				        r->method, r->pattern);
				return -EINVAL;
			}
			json_decref(j);
		}
	}
	return 0;
}

/* routes_runs.c — owns the API's runs routes: the list (filters, cursor pages, written
 * straight into one buffer), one run and its steps, live events as Server-Sent Events from
 * the database (one run's, or every run's), submitting a run and acting on one (cancel,
 * retry, resume through the daemon's hooks), deleting runs (one, or by a retention policy)
 * through orchestrator/retention.c as `runs delete` and `gc` do. The route table is in web/routes.c; the inside
 * of one run (DAG, logs, checkpoints) in web/runview.c.
 */
#include "web/routes_int.h"

#include "common/buf.h"
#include "common/common.h"
#include "orchestrator/pipeline.h"
#include "orchestrator/retention.h"
#include "orchestrator/state.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* ---- runs --------------------------------------------------------------------------------- */

/* The orders GET /api/v1/runs pages in (?sort=), one row each: the key's SQL, and the
 * fragments its page's statement is made of around tf_runs_where_sql's WHERE clause: the
 * rows after the cursor (?8 its key, ?7 its run id) and the ORDER BY. Every order is total:
 * runs of one key come newest first (by id, which follows creation), except in the creation
 * orders, whose ties go the key's way. So a cursor (the key and id of a page's last run)
 * starts the next page exactly where it ended, ties included, and runs created while paging
 * do not shift the pages of the creation orders.
 *
 * A duration is a run's finished_at - started_at: what an ended run took. A run that has not
 * ended (or never started) has none that stays put from one page to the next, so it sorts
 * after every run that has one, in both directions (its key a bound out of reach: -1 longest
 * first, 1e15 s shortest first). The statements are made of these fixed fragments only,
 * never of a request's text, so the store caches a bounded set of them (orchestrator/store.h).
 * The default's page is tf_runs_where_sql's own, cursor included: the text whose plans
 * test_runs_filters_plan pins (an index in (created_at, id) order, runs_created or, for
 * state= or pipeline=, runs_state_created or runs_pipeline_created). Without an index on the
 * key, another order's page is a scan of the selected runs kept to the page's size: about
 * 3 ms over 10,000, so no index was added. */
struct runs_order {
	const char *name;    /* the value of ?sort= */
	char key_type;       /* 'd' a number, 't' text: how the cursor's key binds (?8) */
	double key_min;      /* the least number key a cursor may carry */
	const char *key;     /* the key of run r: the page's last column, written into the cursor */
	const char *key_sql; /* SELECT the key of run ?1: where a bare run-id cursor starts */
	const char *after;   /* the runs after the cursor; NULL: tf_runs_where_sql's (created_at) */
	const char *order;   /* the page's ORDER BY */
};

#define RUNS_ORDER(name, type, min, key, after, order)                                             \
	{name, type, min, key, "SELECT " key " FROM runs r WHERE r.id=?", after, order}
/* A key's way (cmp, dir), with ties newest first. */
#define RUNS_ORDER_KEY(name, type, min, key, cmp, dir)                                             \
	RUNS_ORDER(name, type, min, key, "(" key " " cmp " ?8 OR (" key " = ?8 AND r.id < ?7))",   \
	           key " " dir ", r.id DESC")
#define RUN_DURATION(none)                                                                         \
	"coalesce(CASE WHEN r.finished_at >= r.started_at THEN r.finished_at - r.started_at "      \
	"END, " none ")"

static const struct runs_order runs_orders[] = {
    /* the first is the default, paged by tf_runs_where_sql's cursor */
    RUNS_ORDER("-created", 'd', 0, "r.created_at", NULL, "r.created_at DESC, r.id DESC"),
    RUNS_ORDER("created", 'd', 0, "r.created_at", "(r.created_at, r.id) > (?8, ?7)",
               "r.created_at, r.id"),
    RUNS_ORDER_KEY("-duration", 'd', -1, RUN_DURATION("-1"), "<", "DESC"),
    RUNS_ORDER_KEY("duration", 'd', 0, RUN_DURATION("1e15"), ">", "ASC"),
    RUNS_ORDER_KEY("pipeline", 't', 0, "r.pipeline", ">", "ASC"),
    RUNS_ORDER_KEY("-pipeline", 't', 0, "r.pipeline", "<", "DESC"),
    RUNS_ORDER_KEY("state", 't', 0, "r.state", ">", "ASC"),
    RUNS_ORDER_KEY("-state", 't', 0, "r.state", "<", "DESC"),
};
#define N_ORDERS (sizeof(runs_orders) / sizeof(runs_orders[0]))

/* The order ?sort= names into *out (the default without one); 400 with a suggestion for an
 * unknown one. */
static int runs_order_find(struct tf_web_req *rq, struct tf_web_resp *rs,
                           const struct runs_order **out)
{
	const char *v = tf_web_query(rq, "sort");
	if (!v) {
		*out = &runs_orders[0];
		return 0;
	}
	const char *names[N_ORDERS + 1];
	for (size_t i = 0; i < N_ORDERS; i++) {
		names[i] = runs_orders[i].name;
		if (!strcmp(v, names[i])) {
			*out = &runs_orders[i];
			return 0;
		}
	}
	names[N_ORDERS] = NULL;
	const char *sug = tf_diag_suggest(v, names);
	tf_web_problem(rs, 400, rq->path,
	               "unknown sort '%s'%s%s%s: created or duration, pipeline or state, each "
	               "with a leading '-' for the other way (-created, the default: newest first)",
	               v, sug ? " (did you mean '" : "", sug ? sug : "", sug ? "'?)" : "");
	return -1;
}

/* Where a page starts: after the run `id` whose key under the order is key_d or key_t. */
struct runs_cursor {
	char id[32];
	double key_d;
	char key_t[256];
};

/* The key of the run a bare-id cursor names, under order o, into c: 0, or -1 with a problem
 * in rs. */
static int cursor_position(struct tf_web_req *rq, struct tf_web_resp *rs,
                           const struct runs_order *o, struct runs_cursor *c)
{
	struct tf_stmt *s = tf_store_query(rq->st, o->key_sql, "t", c->id);
	int rc = s ? tf_stmt_step(s) : -EIO;
	if (rc == 1 && o->key_type == 'd')
		c->key_d = tf_stmt_double(s, 0);
	else if (rc == 1)
		snprintf(c->key_t, sizeof(c->key_t), "%s", tf_stmt_text(s, 0));
	tf_stmt_done(s);
	if (rc == 0)
		tf_web_problem(rs, 400, rq->path,
		               "no run '%s' to page after: give the cursor of the answer's 'next' "
		               "(it stays valid when that run is deleted)",
		               c->id);
	else if (rc < 0)
		tf_web_problem_errno(rs, rc, rq->path, tf_store_errmsg(rq->st));
	return rc == 1 ? 0 : -1;
}

/* Parses ?cursor= for order o into c: "[SORT:]RUN@KEY" as `next` writes it (SORT: for every
 * order but the default; it must be o's), which stays valid when that run is deleted
 * meanwhile, or a bare run id, whose key is looked up. 0, or -1 with a 400 in rs. */
static int cursor_parse(struct tf_web_req *rq, struct tf_web_resp *rs, const char *cursor,
                        const struct runs_order *o, struct runs_cursor *c)
{
	const char *at = strchr(cursor, '@');
	const char *colon = memchr(cursor, ':', at ? (size_t)(at - cursor) : strlen(cursor));
	const char *id = colon ? colon + 1 : cursor;
	size_t idn = at ? (size_t)(at - id) : strlen(id);
	const char *key = at ? at + 1 : NULL;
	int ok = idn && idn < sizeof(c->id) && !(colon && !at);
	if (ok && key && o->key_type == 'd') {
		char *end;
		c->key_d = strtod(key, &end);
		ok = end != key && !*end && c->key_d >= o->key_min && c->key_d < 1e300;
	} else if (ok && key) {
		ok = strlen(key) < sizeof(c->key_t);
		if (ok)
			memcpy(c->key_t, key, strlen(key) + 1);
	}
	if (!ok) {
		tf_web_problem(rs, 400, rq->path,
		               "cursor wants the value in the answer's 'next' ([SORT:]RUN@KEY) "
		               "or a run id, not '%s'",
		               cursor);
		return -1;
	}
	/* a cursor made for another order would start a page at a place that means nothing */
	size_t sn = colon ? (size_t)(colon - cursor) : 0;
	const char *made = colon ? cursor : runs_orders[0].name;
	if (at && (colon ? strlen(o->name) != sn || memcmp(cursor, o->name, sn)
	                 : o != &runs_orders[0])) {
		tf_web_problem(rs, 400, rq->path,
		               "cursor '%s' pages sort=%.*s, not sort=%s: start again without a "
		               "cursor",
		               cursor, colon ? (int)sn : (int)strlen(made), made, o->name);
		return -1;
	}
	memcpy(c->id, id, idn);
	c->id[idn] = 0;
	return at ? 0 : cursor_position(rq, rs, o, c);
}

/* The filters of GET /api/v1/runs, which its page and its total share (the cursor the page's
 * alone), with the parameters tf_runs_where_sql names: ?1 to ?9, and ?10 a LIMIT. The
 * cursor's key (?8) is a number or, for an order by text (key_type 't'), text. */
struct runs_query {
	struct tf_runs_where w;
	const char *cid;   /* the cursor's run id, NULL for none */
	char key_type;     /* 'd': ?8 is key_d, 't': key_t */
	double key_d;      /* the cursor's key: its run's created_at in the default order */
	const char *key_t; /* ... or its text */
	double since;
};

/* Prepares `head` WHERE the filters `tail`, with ?1 to ?9 bound from q and ?10 from `limit`
 * when the text names it (has_limit); NULL on failure (the store's message). */
static struct tf_stmt *runs_query(struct tf_store *st, const char *head, const struct runs_query *q,
                                  const char *tail, int has_limit, int64_t limit)
{
	struct tf_buf sql = {0};
	tf_buf_append(&sql, head, strlen(head));
	tf_runs_where_sql(&sql, &q->w);
	tf_buf_append(&sql, tail, strlen(tail));
	const struct tf_runs_where *w = &q->w;
	struct tf_stmt *s =
	    q->key_type == 't'
	        ? tf_store_query(st, tf_buf_str(&sql), has_limit ? "ttttttttdi" : "ttttttttd",
	                         w->state, w->pipeline, w->label_key, w->label_value, w->trigger,
	                         w->text, q->cid, q->key_t, q->since, limit)
	        : tf_store_query(st, tf_buf_str(&sql), has_limit ? "tttttttddi" : "tttttttdd",
	                         w->state, w->pipeline, w->label_key, w->label_value, w->trigger,
	                         w->text, q->cid, q->key_d, q->since, limit);
	tf_buf_release(&sql);
	return s;
}

/* How many runs the filters select, on every page, counting at most `max` of them: *out is
 * the count and *exact 1, or *out is max and *exact 0 when more runs match. An exact count
 * reads every run the filters select, so it would grow with the home; this one stops at the
 * first run past max (a LIMIT inside the count's subquery). For orphaned runs (judged per
 * row, as the page is) the running ones whose owner is gone, with the same bound. 0 or
 * -EIO. */
static int runs_total(struct tf_web_req *rq, const struct runs_query *q, int orphaned_only,
                      int64_t max, int64_t *out, int *exact)
{
	struct runs_query all = *q; /* every page's runs: no cursor */
	all.w.cursor = 0;
	all.cid = NULL;
	all.key_type = 'd';
	struct tf_stmt *s =
	    orphaned_only
	        ? runs_query(rq->st,
	                     "SELECT r.state, r.owner, r.pid, r.heartbeat_at FROM runs r WHERE ",
	                     &all, "", 0, 0)
	        : runs_query(rq->st, "SELECT count(*) FROM (SELECT 1 FROM runs r WHERE ", &all,
	                     " LIMIT ?10)", 1, max + 1);
	if (!s)
		return -EIO;
	int64_t n = 0;
	int rc = 0;
	while (n <= max && (rc = tf_stmt_step(s)) == 1)
		n += orphaned_only ? tf_run_row_orphaned(s, 0) : tf_stmt_int(s, 0);
	tf_stmt_done(s);
	if (rc < 0)
		return -EIO;
	*exact = n <= max;
	*out = n <= max ? n : max;
	return 0;
}

void tf_web_runs_list(struct tf_web_req *rq, struct tf_web_resp *rs)
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
	/* orphaned: running, and its owner is gone (judged per row, as `runs list` does) */
	int orphaned_only = state && !strcmp(state, "orphaned");
	if (orphaned_only)
		state = "running";
	else if (state && tf_run_state_parse(state, &sv)) {
		tf_web_problem(rs, 400, rq->path,
		               "unknown state '%s' (pending, running, succeeded, failed, interrupted, "
		               "orphaned)",
		               state);
		return;
	}
	const struct runs_order *o;
	struct runs_cursor c = {0};
	if (runs_order_find(rq, rs, &o) || (cursor && cursor_parse(rq, rs, cursor, o, &c)))
		return;
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
	struct runs_query q = {.w = {.state = state,
	                             .pipeline = pipe,
	                             .label_key = label ? lkey : NULL,
	                             .label_value = label ? lval : NULL,
	                             .trigger = trig,
	                             .text = text,
	                             .cursor = cursor && !o->after},
	                       .cid = cursor ? c.id : NULL,
	                       .key_type = o->key_type,
	                       .key_d = c.key_d,
	                       .key_t = c.key_t,
	                       .since = (double)since_i};
	int64_t total;
	int exact;
	if (runs_total(rq, &q, orphaned_only, tf_web_runs_total_max(rq->srv), &total, &exact)) {
		tf_web_problem_errno(rs, -EIO, rq->path, tf_store_errmsg(rq->st));
		return;
	}
	/* the page: its columns, the order's key last (16); the filters; after the cursor, in
	 * the order (fixed fragments: see runs_order) */
	struct tf_buf head = {0}, tail = {0};
	PUT_LIT(&head, "SELECT r.id, r.pipeline, r.state, r.created_at, r.started_at, "
	               "r.finished_at, r.steps_total, r.steps_done, r.error, r.trigger, "
	               "r.steps_skipped, r.state, r.owner, r.pid, r.heartbeat_at, "
	               "(SELECT json_group_object(l.key, l.value) FROM run_labels l WHERE "
	               "l.run_id=r.id), ");
	tf_buf_append(&head, o->key, strlen(o->key));
	PUT_LIT(&head, " FROM runs r WHERE ");
	if (cursor && o->after) {
		PUT_LIT(&tail, " AND ");
		tf_buf_append(&tail, o->after, strlen(o->after));
	}
	PUT_LIT(&tail, " ORDER BY ");
	tf_buf_append(&tail, o->order, strlen(o->order));
	PUT_LIT(&tail, " LIMIT ?10");
	struct tf_stmt *s = runs_query(rq->st, tf_buf_str(&head), &q, tf_buf_str(&tail), 1,
	                               orphaned_only ? (int64_t)-1 : (int64_t)limit + 1);
	tf_buf_release(&head);
	tf_buf_release(&tail);
	if (!s) {
		tf_web_problem_errno(rs, -EIO, rq->path, tf_store_errmsg(rq->st));
		return;
	}
	struct tf_buf b = {0};
	char last[400] = "";
	int rc, n = 0, more = 0;
	PUT_LIT(&b, "{\"items\":[");
	while ((rc = tf_stmt_step(s)) == 1) {
		int orphaned = tf_run_row_orphaned(s, 11);
		if (orphaned_only && !orphaned)
			continue;
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
		PUT_LIT(&b, ",\"trigger\":");
		tf_web_put_json_str(&b, tf_stmt_text(s, 9));
		PUT_LIT(&b, ",\"skipped\":");
		put_i64(&b, tf_stmt_int(s, 10));
		if (orphaned)
			PUT_LIT(&b, ",\"orphaned\":true,\"duration\":");
		else
			PUT_LIT(&b, ",\"orphaned\":false,\"duration\":");
		double dur = tf_run_row_duration(s, 2, 4, 5, 14, orphaned);
		if (dur >= 0)
			tf_buf_printf(&b, "%.17g", dur);
		else
			PUT_LIT(&b, "null");
		/* labels: SQLite's JSON object, in the primary key's (run_id, key) order as
		 * tf_run_labels gives them */
		PUT_LIT(&b, ",\"labels\":");
		const char *labels = tf_stmt_text(s, 15);
		if (labels)
			tf_buf_append(&b, labels, strlen(labels));
		else
			PUT_LIT(&b, "{}");
		PUT_LIT(&b, "}");
		/* the cursor of the next page: the order (but the default's), this run's id and
		 * key, exact (%.17g reads back the same) */
		int named = o != &runs_orders[0];
		if (o->key_type == 'd')
			snprintf(last, sizeof(last), "%s%s%s@%.17g", named ? o->name : "",
			         named ? ":" : "", tf_stmt_text(s, 0), tf_stmt_double(s, 16));
		else
			snprintf(last, sizeof(last), "%s:%s@%s", o->name, tf_stmt_text(s, 0),
			         tf_stmt_text(s, 16));
	}
	tf_stmt_done(s);
	PUT_LIT(&b, "],\"total\":");
	put_i64(&b, total);
	tf_buf_printf(&b, ",\"total_exact\":%s", exact ? "true" : "false");
	PUT_LIT(&b, ",\"next\":");
	if (more) {
		PUT_LIT(&b, "\"/api/v1/runs?limit=");
		put_i64(&b, limit);
		PUT_LIT(&b, "&cursor=");
		put_query(&b, last);
		const char *names[] = {"sort",  "state",   "pipeline", "label",
		                       "since", "trigger", "q"};
		for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
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

/* The {id} run as tf_run_describe writes it (a new reference), its id in id; NULL with a
 * problem in rs. */
static json_t *run_doc(struct tf_web_req *rq, struct tf_web_resp *rs, char id[32])
{
	json_t *d = NULL;
	if (tf_web_run_param(rq, rs, id))
		return NULL;
	int rc = tf_run_describe(rq->st, id, &d);
	if (rc)
		tf_web_problem_errno(rs, rc, rq->path, tf_store_errmsg(rq->st));
	return rc ? NULL : d;
}

void tf_web_run_show(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	char id[32];
	json_t *d = run_doc(rq, rs, id);
	if (!d)
		return;
	json_object_set_new(d, "labels", labels_of(rq->st, id));
	json_t *pv = tf_run_param_values(rq->st, id, json_object_get(d, "params"));
	if (pv)
		json_object_set_new(d, "param_values", pv);
	tf_web_json(rs, 200, d);
}

void tf_web_run_steps(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	char id[32];
	json_t *d = run_doc(rq, rs, id);
	if (!d)
		return;
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
	/* ?log=STEP: that step's log, carried as `log` events (NULL once `log-end` is sent) */
	struct tf_web_log *log;
	char log_step[128];
	long long log_off; /* bytes of the log's body sent (or skipped with ?offset=) */
};

/* A `log` event's most bytes (its JSON is as long for ASCII, at most 6 times for control
 * bytes): few events for a long log read from its start, each one a client handles at once. */
#define LOG_EVENT_BYTES 65536

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
		                      tf_web_col_text(s, 1), "at", tf_web_col_real(s, 2), "step", tf_web_col_text(s, 3),
		                      "attempt",
		                      tf_stmt_is_null(s, 4) ? json_null()
		                                            : json_integer(tf_stmt_int(s, 4)),
		                      "kind", tf_web_col_text(s, 5), "from", tf_web_col_text(s, 6), "to",
		                      tf_web_col_text(s, 7), "message", tf_web_col_text(s, 8));
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

/* The log's next bytes as one `log` event into e->pending: {"step", "offset" (the body's
 * byte the first one is), "bytes"}, a JSON string whose characters are the bytes, U+0000 to
 * U+00FF, one each (a log is bytes: NUL or invalid UTF-8 come through exactly, and ASCII
 * costs one byte). At the log's end (or when the run is final and nothing more comes) a
 * `log-end` event {"step", "offset"} and the log is closed. Nothing while no byte is there. */
static void log_event(struct events_stream *e, int run_final)
{
	char *bytes = tf_xmalloc(LOG_EVENT_BYTES); /* not on the connection thread's stack */
	long n = tf_web_log_fill(e->log, bytes, LOG_EVENT_BYTES);
	if (n == 0 && !run_final) {
		free(bytes);
		return;
	}
	struct tf_buf b = {0};
	tf_buf_printf(&b, "event: %s\ndata: {\"step\":", n > 0 ? "log" : "log-end");
	tf_web_put_json_str(&b, e->log_step);
	tf_buf_printf(&b, ",\"offset\":%lld", e->log_off);
	if (n > 0) {
		PUT_LIT(&b, ",\"bytes\":\"");
		for (long i = 0; i < n; i++) {
			unsigned char c = (unsigned char)bytes[i];
			if (c == '"' || c == '\\' || c == '\n' || c == '\t') {
				char q[2] = {'\\', c == '\n' ? 'n' : c == '\t' ? 't' : (char)c};
				tf_buf_append(&b, q, 2);
			} else if (c < 0x20 || c == 0x7f) {
				tf_buf_printf(&b, "\\u%04x", c);
			} else if (c < 0x80) {
				tf_buf_append(&b, &c, 1);
			} else { /* U+0080..U+00FF in UTF-8 */
				unsigned char u[2] = {(unsigned char)(0xc0 | c >> 6),
				                      (unsigned char)(0x80 | (c & 0x3f))};
				tf_buf_append(&b, u, 2);
			}
		}
		PUT_LIT(&b, "\"");
		e->log_off += n;
	} else {
		tf_web_log_free(e->log);
		e->log = NULL;
	}
	free(bytes);
	PUT_LIT(&b, "}\n\n");
	free(e->pending);
	e->plen = b.len;
	e->pending = tf_buf_detach(&b);
	e->poff = 0;
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
		/* the log between events; a final run's whole log before its `end` */
		if (e->log && e->plen == 0 && !e->ended)
			log_event(e, final);
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
	tf_web_log_free(e->log);
	tf_store_close(e->st);
	free(e->pending);
	free(e);
}

/* ?log=STEP (with ?offset=N, the bytes of its body the client has) of a run's event stream:
 * that step's log comes in the stream as `log` events, so a page that shows a live run and
 * a step's log holds one connection, not two (a browser gives all the pages of one host six
 * over HTTP/1.1). 0 (e->log set when asked), or -1 with a problem in rs. */
static int events_log(struct tf_web_req *rq, struct tf_web_resp *rs, struct events_stream *e)
{
	const char *step = tf_web_query(rq, "log"), *offset = tf_web_query(rq, "offset");
	if (!step) {
		if (offset)
			tf_web_problem(rs, 400, rq->path,
			               "query 'offset' goes with 'log' (a step's name)");
		return offset ? -1 : 0;
	}
	enum tf_step_state state;
	int attempts = 0;
	if (strlen(step) >= sizeof(e->log_step) ||
	    tf_step_get_state(rq->st, e->run, step, &state, &attempts)) {
		tf_web_problem(rs, 404, rq->path, "run %s has no step '%s'", e->run, step);
		return -1;
	}
	char *end = NULL;
	errno = 0;
	unsigned long long skip = offset ? strtoull(offset, &end, 10) : 0;
	if (offset && (*offset < '0' || *offset > '9' || *end || errno || skip > 1ULL << 50)) {
		tf_web_problem(rs, 400, rq->path,
		               "query 'offset' wants a byte count (0 or more), not '%s'", offset);
		return -1;
	}
	snprintf(e->log_step, sizeof(e->log_step), "%s", step);
	e->log_off = (long long)skip;
	e->log = tf_web_log_follow(rq, e->st, e->run, step, (size_t)skip);
	return 0;
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
	if (run && events_log(rq, rs, e)) {
		events_free(e);
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

void tf_web_run_events(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	char id[32];
	if (tf_web_run_param(rq, rs, id))
		return;
	events_start(rq, rs, id);
}

void tf_web_events(struct tf_web_req *rq, struct tf_web_resp *rs)
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

/* 422 naming the first field of the body that is not in `known` (NULL-terminated), with the
 * nearest known one; 0 when every field is known. */
static int unknown_field(struct tf_web_req *rq, struct tf_web_resp *rs,
                         const char *const *known)
{
	const char *k;
	json_t *v;
	json_object_foreach(rq->json, k, v)
	{
		int ok = 0;
		for (int i = 0; known[i]; i++)
			ok |= !strcmp(k, known[i]);
		if (!ok) {
			const char *sug = tf_diag_suggest(k, known);
			tf_web_problem(rs, 422, rq->path, "unknown field '%s'%s%s%s", k,
			               sug ? " (did you mean '" : "", sug ? sug : "", sug ? "'?)" : "");
			return -1;
		}
	}
	return 0;
}

void tf_web_runs_create(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	const struct tf_web_hooks *h = tf_web_hooks(rq->srv);
	if (hook_missing(rq, rs, h->submit))
		return;
	json_t *b = rq->json, *params = NULL, *labels = NULL;
	static const char *const known[] = {"pipeline", "yaml",   "params",
	                                    "priority", "project", "labels", NULL};
	if (unknown_field(rq, rs, known))
		return;
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
		const char *k;
		json_t *v;
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
	if (cancel) { /* the state it is in now: a final one means nothing was left to stop */
		enum tf_run_state now;
		json_t *a = json_pack("{s:s, s:s}", "id", id, "action", "cancel");
		if (!tf_run_get_state(rq->st, id, &now))
			json_object_set_new(a, "state", json_string(tf_run_state_name(now)));
		tf_web_json(rs, 202, a);
	} else {
		tf_web_json(rs, !strcmp(what, "retry") ? 201 : 202,
		            json_pack("{s:s, s:s, s:s}", "id", *out ? out : id, "action", what,
		                      "of", id));
		rs->location = tf_xasprintf("/api/v1/runs/%s", *out ? out : id);
	}
	rs->wake = 1;
}

/* DELETE /api/v1/runs/{id}: `tpuflow runs delete` (orchestrator/retention.c): the run's rows,
 * logs, checkpoints and outputs, keeping what a model version or another run uses; 409 for a
 * run a live process drives (or a pending one), 503 when its object store does not answer. */
void tf_web_run_delete(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	char id[32];
	if (tf_web_run_param(rq, rs, id))
		return;
	const char *dry = tf_web_query(rq, "dry_run");
	if (dry && strcmp(dry, "true") && strcmp(dry, "false")) {
		tf_web_problem(rs, 400, rq->path, "query 'dry_run' wants true or false");
		return;
	}
	int dry_run = dry && !strcmp(dry, "true");
	struct tf_run_delete_report r;
	char err[1024] = "";
	int rc = tf_run_delete(rq->st, tf_web_home(rq->srv), id, dry_run, &r, err, sizeof(err));
	json_t *rep = tf_run_delete_report_json(id, rc, dry_run, err, &r);
	if (rc) /* the report's members go with the problem: what was removed before it stopped */
		tf_web_problem_ext(rs,
		                   rc == -EIO      ? 503
		                   : rc == -EBUSY  ? 409
		                   : rc == -ENOENT ? 404
		                                   : 500,
		                   rq->path, rep, err);
	else
		tf_web_json(rs, 200, rep);
	tf_run_delete_report_release(&r);
}

/* POST /api/v1/runs:gc: `tpuflow gc` (orchestrator/retention.c): the runs a retention policy
 * removes, each deleted as DELETE /api/v1/runs/{id} does; a dry run unless "apply" is true. */
void tf_web_runs_gc(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	static const char *const known[] = {"keep_last", "older_than", "pipeline", "apply", NULL};
	if (unknown_field(rq, rs, known))
		return;
	json_t *kl = json_object_get(rq->json, "keep_last"),
	       *ot = json_object_get(rq->json, "older_than"),
	       *pl = json_object_get(rq->json, "pipeline"), *ap = json_object_get(rq->json, "apply");
	struct tf_gc_policy pol = {.keep_last = -1};
	if (kl && (!json_is_integer(kl) || json_integer_value(kl) < 0 ||
	           json_integer_value(kl) > 1000000)) {
		tf_web_problem(rs, 422, rq->path, "keep_last wants a whole number from 0 to 1000000");
		return;
	}
	if (ot && (!json_is_string(ot) || tf_duration_parse(json_string_value(ot), &pol.older_than) ||
	           pol.older_than <= 0)) {
		tf_web_problem(rs, 422, rq->path,
		               "older_than wants an age such as \"30d\", \"12h\" or \"90m\"");
		return;
	}
	if ((pl && !json_is_string(pl)) || (ap && !json_is_boolean(ap))) {
		tf_web_problem(rs, 422, rq->path,
		               "pipeline wants a pipeline's name and apply true or false");
		return;
	}
	if (!kl && !ot) {
		tf_web_problem(rs, 422, rq->path, "give a policy: keep_last and/or older_than");
		return;
	}
	if (kl)
		pol.keep_last = (int)json_integer_value(kl);
	pol.pipeline = json_string_value(pl);
	int apply = json_is_true(ap);
	json_t *sel = NULL;
	int rc = tf_gc_select(rq->st, &pol, &sel);
	if (rc) {
		tf_web_problem_errno(rs, rc, rq->path, tf_store_errmsg(rq->st));
		return;
	}
	json_t *runs = json_array(), *item;
	size_t i;
	json_array_foreach(sel, i, item)
	{
		const char *id = json_string_value(json_object_get(item, "id"));
		struct tf_run_delete_report r;
		char err[1024] = "";
		rc = tf_run_delete(rq->st, tf_web_home(rq->srv), id, !apply, &r, err, sizeof(err));
		json_array_append_new(runs, tf_run_delete_report_json(id, rc, !apply, err, &r));
		tf_run_delete_report_release(&r);
	}
	json_decref(sel);
	tf_web_json(rs, 200, json_pack("{s:b, s:o}", "applied", apply, "runs", runs));
}

void tf_web_run_cancel(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	run_action(rq, rs, "cancel");
}

void tf_web_run_retry(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	run_action(rq, rs, "retry");
}

void tf_web_run_resume(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	run_action(rq, rs, "resume");
}

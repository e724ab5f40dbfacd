/* http.c — owns the HTTP server: libmicrohttpd set-up (limits, timeouts, TLS, the loopback
 * rule), reading request bodies under a cap, routing through the table of web/routes.c,
 * authorization by bearer token with a per-token rate limit, Idempotency-Key handling around
 * creating POSTs, RFC 9457 problem bodies for every error, security headers, streamed
 * responses and their clean end at the stop, the drain that refuses new runs, and the pool of
 * store handles the handlers use.
 *
 * Threading: one thread per connection (MHD_USE_THREAD_PER_CONNECTION) under a connection
 * cap. Handlers block on SQLite (a creating POST waits for an fsync'd commit) and streams wait
 * for new events; with a thread per connection neither holds up other clients, which a small
 * event-loop pool on a 2-core machine would (libmicrohttpd's flow-control notes: never block
 * in a callback except in thread-per-connection mode).
 */
#include "web/api.h"
#include "web/serve.h"
#include "web/tokens.h"

#define TF_LOG_TAG "web"
#include "common/common.h"
#include "common/log.h"
#include "common/digest.h"

#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define IDEM_TTL 86400.0 /* seconds an Idempotency-Key is remembered */
#define IDEM_MAX 255     /* longest accepted key */
#define STORE_POOL 16    /* idle store handles kept open */
#define TOUCH_EVERY 60.0 /* seconds between last_used_at writes per token */
#define NBUCKETS 64      /* rate-limit buckets (tokens seen recently) */
#define WATCH_MS 25      /* how often other processes' commits are looked for */
#define TICK_EVERY 8     /* watches between two rollout checks (tf_serve_tick) */
#define NCACHED 32       /* answers of TF_ROUTE_CACHED routes kept */
#define LINGER_MAX (4u << 20) /* bytes over the cap a declared body is still read for, to
                                 answer 413 to a client that sends before it reads */
#define STOP_WAIT 2.0    /* seconds tf_web_stop waits for open streams to end (unless
                            tf_web_end_streams was called before) */

struct bucket {
	int64_t id;       /* token id, 0 = free slot */
	double level;     /* requests left */
	double at;        /* last refill (monotonic) */
	double touched;   /* last last_used_at write (wall) */
};

/* The 200 answer of a TF_ROUTE_CACHED route to one URL, valid while the change generation is
 * the one noted before the handler read the database. */
struct cached {
	char *url; /* path?query (the arguments in the order received); NULL: a free slot */
	uint64_t gen;
	char *body;
	size_t len;
	uint64_t used; /* cache_clock at the last use: the least recent makes room */
};

/* Request counters by route and status, and a latency histogram by route, counted with atomic
 * operations (no lock on a request's path): each route has NCODES slots, a slot taken for a
 * status by the first answer with it. */
#define NLAT 12
#define NCODES 24 /* distinct statuses counted per route (more: counted as code "other") */
static const double lat_bounds[NLAT] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                        0.1,   0.25,   0.5,   1,    2.5,   10};
struct route_stats {
	_Atomic int code[NCODES]; /* 0: a free slot */
	_Atomic uint64_t n[NCODES];
	_Atomic uint64_t other; /* answers whose status found no slot */
	_Atomic uint64_t le[NLAT]; /* per bucket; summed into cumulative counts when rendered */
	_Atomic uint64_t count;
	_Atomic uint64_t sum_ns;
};

struct tf_web {
	struct MHD_Daemon *d;
	char *home, *dbpath, *cors;
	enum tf_web_auth auth;
	size_t max_body;
	double rate, burst;
	int64_t runs_total_max; /* the runs list counts at most this many for its total */
	int port;
	struct tf_web_hooks hooks;
	struct tf_serve *serve; /* model serving cache */
	struct route_stats *stats; /* tf_nroutes + 1 entries, the last for "no route" */
	int serve_only;         /* `tpuflow serve`: serving and public routes only */
	volatile int stopping;
	_Atomic int nstreams;          /* streamed answers not yet over (struct stream) */
	_Atomic int streams_end;       /* tf_web_end_streams was called: every stream ends */
	_Atomic int draining;          /* tf_web_drain was called: TF_ROUTE_NEW_RUN answers 503 */
	_Atomic int drain_retry_after; /* its Retry-After, seconds */
	char *openapi; /* the document, serialised once */
	size_t openapi_len;
	char *tls_key, *tls_cert;

	/* Creating POSTs of this server take turns here before SQLite's write lock: waiting on a
	 * mutex wakes the next writer at once, where SQLite's busy handler sleeps and retries.
	 * The drain's flag is set under it too (tf_web_drain). */
	pthread_mutex_t write_lock;
	struct tf_token_cache tokens; /* verified tokens (its own lock) */
	pthread_t watcher;            /* polls for other processes' commits (tf_store_poll_changes) */
	int watching;                 /* the watcher was started */
	pthread_mutex_t rate_lock; /* the buckets */
	struct bucket buckets[NBUCKETS];
	pthread_mutex_t lock; /* everything below */
	struct tf_store *pool[STORE_POOL];
	int npool;
	struct cached cache[NCACHED];
	uint64_t cache_clock;
};

/* Per-connection state between the calls of one request. */
struct conn {
	char *body;
	size_t len, cap;
	int too_big;
	double t0;
	void (*after)(void *ctx); /* the answer's tf_web_resp.after, run once it is sent */
	void *after_ctx;
};

/* ---- store handles ---------------------------------------------------------------- */

static struct tf_store *store_get(struct tf_web *w, char *err, size_t errlen)
{
	pthread_mutex_lock(&w->lock);
	struct tf_store *st = w->npool ? w->pool[--w->npool] : NULL;
	pthread_mutex_unlock(&w->lock);
	if (!st && tf_store_open(w->dbpath, 0, &st, err, errlen))
		return NULL;
	return st;
}

static void store_put(struct tf_web *w, struct tf_store *st)
{
	if (!st)
		return;
	tf_store_rollback(st);
	pthread_mutex_lock(&w->lock);
	if (w->npool < STORE_POOL) {
		w->pool[w->npool++] = st;
		st = NULL;
	}
	pthread_mutex_unlock(&w->lock);
	tf_store_close(st);
}

struct tf_store *tf_web_store(struct tf_web_req *rq)
{
	if (!rq->st) {
		char err[256];
		rq->st = store_get(rq->srv, err, sizeof(err));
		if (!rq->st)
			tf_warn("cannot open the state database: %s", err);
	}
	return rq->st;
}

/* Every WATCH_MS, moves the store's change generation when another process committed, so
 * the caches of the serving routes and of tokens see it (orchestrator/store.h); every
 * TICK_EVERY of them, checks the canaries' rollout policies (web/serve.h). */
static void *watch(void *arg)
{
	struct tf_web *w = arg;
	struct tf_store *st = NULL;
	char err[256];
	for (unsigned i = 1; !w->stopping; i++) {
		if (!st && tf_store_open(w->dbpath, 0, &st, err, sizeof(err)))
			st = NULL;
		if (st && tf_store_poll_changes(st)) {
			tf_store_close(st);
			st = NULL;
		}
		if (st && i % TICK_EVERY == 0)
			tf_serve_tick(w->serve, st);
		struct timespec ts = {0, WATCH_MS * 1000000L};
		nanosleep(&ts, NULL);
	}
	tf_store_close(st);
	return NULL;
}

/* ---- accessors for handlers ----------------------------------------------------------- */

static const char *pairs_lookup(const char *const *kv, const char *name, int nocase)
{
	for (int i = 0; kv && kv[i] && kv[i + 1]; i += 2)
		if (nocase ? !strcasecmp(kv[i], name) : !strcmp(kv[i], name))
			return kv[i + 1];
	return NULL;
}

const char *tf_web_query(const struct tf_web_req *rq, const char *name)
{
	return rq->conn ? MHD_lookup_connection_value(rq->conn, MHD_GET_ARGUMENT_KIND, name)
	                : pairs_lookup(rq->query, name, 0);
}

const char *tf_web_header(const struct tf_web_req *rq, const char *name)
{
	return rq->conn ? MHD_lookup_connection_value(rq->conn, MHD_HEADER_KIND, name)
	                : pairs_lookup(rq->headers, name, 1);
}

const char *tf_web_param(const struct tf_web_req *rq, const char *name)
{
	for (int i = 0; i < rq->nparams; i++)
		if (!strcmp(rq->pnames[i], name))
			return rq->pvals[i];
	return NULL;
}

const struct tf_web_hooks *tf_web_hooks(const struct tf_web *w)
{
	return &w->hooks;
}

struct tf_serve *tf_web_serving(const struct tf_web *w)
{
	return w->serve;
}

const char *tf_web_home(const struct tf_web *w)
{
	return w->home;
}

int64_t tf_web_runs_total_max(const struct tf_web *w)
{
	return w->runs_total_max;
}

int tf_web_port(const struct tf_web *w)
{
	return w ? w->port : -1;
}

int tf_web_draining(const struct tf_web *w)
{
	return atomic_load(&w->draining);
}

/* The flag is set under write_lock, which every request of a TF_ROUTE_NEW_RUN route holds
 * from its second look at the flag to its commit (run_idempotent, run_new_run): a run is
 * either committed before the drain begins — accepted, and taken, drained or left for the
 * next daemon as every run submitted before the drain — or refused with 503. No 201 is
 * answered for a run created after tf_web_drain returned. The first look, in dispatch, only
 * spares a refused request its parsing; the lock costs the hot path nothing, since those
 * requests take it anyway, and the drain waits at most for the transaction in progress. */
void tf_web_drain(struct tf_web *w, int retry_after)
{
	if (!w)
		return;
	pthread_mutex_lock(&w->write_lock);
	atomic_store(&w->drain_retry_after, retry_after > 0 ? retry_after : 1);
	atomic_store(&w->draining, 1);
	pthread_mutex_unlock(&w->write_lock);
}

/* 1, with a 503 problem in rs, when the server drains (tf_web_drain): a request that would
 * start a run does nothing and may be sent again, with the same Idempotency-Key, to the
 * daemon that serves the home next. */
static int refuse_drained(const struct tf_web_req *rq, struct tf_web_resp *rs)
{
	struct tf_web *w = rq->srv;
	if (!atomic_load(&w->draining))
		return 0;
	int after = atomic_load(&w->drain_retry_after);
	tf_web_problem(rs, 503, rq->path,
	               "the daemon is draining (it was asked to stop) and starts no new runs; "
	               "nothing was done: send the request again in %d s, to the daemon that "
	               "serves this home next",
	               after);
	rs->retry_after = after;
	return 1;
}

/* ---- responses -------------------------------------------------------------------------- */

void tf_web_resp_release(struct tf_web_resp *rs)
{
	free(rs->body);
	free(rs->location);
	free(rs->allow);
	if (rs->stream_free && rs->stream_ctx)
		rs->stream_free(rs->stream_ctx);
	if (rs->after)
		rs->after(rs->after_ctx);
	memset(rs, 0, sizeof(*rs));
}

void tf_web_json(struct tf_web_resp *rs, int status, json_t *doc)
{
	free(rs->body);
	rs->status = status;
	rs->body = json_dumps(doc, JSON_COMPACT);
	rs->len = rs->body ? strlen(rs->body) : 0;
	rs->type = "application/json";
	json_decref(doc);
}

void tf_web_json_text(struct tf_web_resp *rs, struct tf_buf *b)
{
	free(rs->body);
	rs->status = 200;
	rs->len = b->len;
	rs->body = tf_buf_detach(b);
	rs->type = "application/json";
}

void tf_web_put_json_str(struct tf_buf *b, const char *v)
{
	static const char hex[] = "0123456789abcdef";
	if (!v) {
		tf_buf_append(b, "null", 4);
		return;
	}
	tf_buf_append(b, "\"", 1);
	const unsigned char *p = (const unsigned char *)v, *plain = p;
	for (; *p; p++) {
		if (*p >= 0x20 && *p != '"' && *p != '\\')
			continue;
		tf_buf_append(b, plain, (size_t)(p - plain)); /* the bytes before, as they are */
		plain = p + 1;
		char e[6] = {'\\', (char)*p};
		if (*p < 0x20) {
			memcpy(e + 1, "u00", 3);
			e[4] = hex[*p >> 4];
			e[5] = hex[*p & 15];
		}
		tf_buf_append(b, e, *p < 0x20 ? 6 : 2);
	}
	tf_buf_append(b, plain, (size_t)(p - plain));
	tf_buf_append(b, "\"", 1);
}

static const char *status_title(int status)
{
	switch (status) {
	case 400: return "Bad Request";
	case 401: return "Unauthorized";
	case 403: return "Forbidden";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 409: return "Conflict";
	case 413: return "Content Too Large";
	case 415: return "Unsupported Media Type";
	case 422: return "Unprocessable Content";
	case 429: return "Too Many Requests";
	case 503: return "Service Unavailable";
	default: return status >= 500 ? "Internal Server Error" : "Error";
	}
}

void tf_web_utf8_clean(char *s)
{
	unsigned char *p = (unsigned char *)s;
	while (*p) {
		int n = *p < 0x80 ? 1 : *p >= 0xc2 && *p <= 0xdf ? 2 : (*p & 0xf0) == 0xe0 ? 3
		      : *p >= 0xf0 && *p <= 0xf4                 ? 4
		                                                 : 0;
		int ok = n > 0;
		for (int i = 1; ok && i < n; i++)
			ok = (p[i] & 0xc0) == 0x80;
		/* no overlong forms, UTF-16 surrogates or code points past U+10FFFF (RFC 3629) */
		if (ok && n == 3)
			ok = !(p[0] == 0xe0 && p[1] < 0xa0) && !(p[0] == 0xed && p[1] >= 0xa0);
		if (ok && n == 4)
			ok = !(p[0] == 0xf0 && p[1] < 0x90) && !(p[0] == 0xf4 && p[1] >= 0x90);
		if (!ok) {
			*p++ = '?';
			continue;
		}
		p += n;
	}
}

/* A path of the serving protocols (web/serve.h): /v1/models/... or /v2[/...]. */
static int serving_path(const char *path)
{
	return path && ((!strncmp(path, "/v1/models", 10) && (!path[10] || path[10] == '/')) ||
	                (!strncmp(path, "/v2", 3) && (!path[3] || path[3] == '/')));
}

/* The problem document; on a serving path it carries the detail as "error" too (an RFC 9457
 * extension member): clients of TensorFlow Serving and of the Open Inference Protocol read
 * every error from {"error": "..."}, whichever part of the server gave it. */
static json_t *problem_doc(int status, const char *instance, const char *detail)
{
	char *d = tf_xstrdup(detail ? detail : ""), *in = tf_xstrdup(instance ? instance : "");
	tf_web_utf8_clean(d); /* both may quote the request's path */
	tf_web_utf8_clean(in);
	json_t *doc = json_pack("{s:s, s:s, s:i, s:s, s:s}", "type", "about:blank", "title",
	                        status_title(status), "status", status, "detail", d, "instance", in);
	if (serving_path(instance))
		json_object_set_new(doc, "error", json_string(d));
	free(d);
	free(in);
	return doc;
}

static void set_problem(struct tf_web_resp *rs, int status, json_t *doc)
{
	tf_web_json(rs, status, doc);
	rs->type = "application/problem+json";
}

void tf_web_problem(struct tf_web_resp *rs, int status, const char *instance, const char *fmt, ...)
{
	char detail[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(detail, sizeof(detail), fmt, ap);
	va_end(ap);
	set_problem(rs, status, problem_doc(status, instance, detail));
}

void tf_web_problem_diags(struct tf_web_resp *rs, int status, const char *instance,
                          const struct tf_diag_list *diags, const char *detail)
{
	json_t *doc = problem_doc(status, instance, detail);
	json_t *errs = json_array();
	for (size_t i = 0; diags && i < diags->n; i++) {
		const struct tf_diag *d = &diags->items[i];
		json_array_append_new(
		    errs, json_pack("{s:s, s:i, s:i, s:s, s:s*, s:s}", "file", d->file ? d->file : "",
		                    "line", d->line, "col", d->col, "message", d->message, "hint",
		                    d->hint, "severity",
		                    d->severity == TF_DIAG_ERROR ? "error" : "warning"));
	}
	json_object_set_new(doc, "errors", errs);
	set_problem(rs, status, doc);
}

void tf_web_problem_ext(struct tf_web_resp *rs, int status, const char *instance, json_t *ext,
                        const char *detail)
{
	json_t *doc = problem_doc(status, instance, detail);
	json_object_update_missing(doc, ext);
	json_decref(ext);
	set_problem(rs, status, doc);
}

void tf_web_problem_errno(struct tf_web_resp *rs, int rc, const char *instance, const char *msg)
{
	/* -EALREADY: the run is already where the action would take it (retry of a succeeded
	 * run): the state does not allow it, as -EBUSY */
	int status = rc == -ENOENT                     ? 404
	             : rc == -EBUSY || rc == -EALREADY ? 409
	             : rc == -EINVAL                   ? 422
	                                               : 500;
	tf_web_problem(rs, status, instance, "%s", msg && *msg ? msg : strerror(-rc));
	if (status == 500)
		tf_error("%s: %s", instance ? instance : "?", msg && *msg ? msg : strerror(-rc));
}

/* ---- metrics -------------------------------------------------------------------------- */

void tf_web_metrics_observe(struct tf_web *w, const struct tf_route *route, int status,
                            double seconds)
{
	struct route_stats *h = &w->stats[route ? (size_t)(route - tf_routes) : tf_nroutes];
	int k = 0;
	for (; k < NCODES; k++) {
		int c = atomic_load_explicit(&h->code[k], memory_order_acquire), free_slot = 0;
		if (!c && atomic_compare_exchange_strong(&h->code[k], &free_slot, status))
			c = status;
		else if (!c)
			c = free_slot; /* another answer took it meanwhile */
		if (c == status)
			break;
	}
	atomic_fetch_add_explicit(k < NCODES ? &h->n[k] : &h->other, 1, memory_order_relaxed);
	for (int b = 0; b < NLAT; b++)
		if (seconds <= lat_bounds[b]) {
			atomic_fetch_add_explicit(&h->le[b], 1, memory_order_relaxed);
			break;
		}
	atomic_fetch_add_explicit(&h->count, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&h->sum_ns, (uint64_t)(seconds * 1e9), memory_order_relaxed);
}

void tf_web_metrics_requests(struct tf_web *w, FILE *f)
{
	fprintf(f, "# HELP tpuflow_api_requests_total API requests answered, by route and status.\n"
	           "# TYPE tpuflow_api_requests_total counter\n");
	for (size_t r = 0; r <= tf_nroutes; r++) {
		struct route_stats *h = &w->stats[r];
		const char *method = r < tf_nroutes ? tf_routes[r].method : "";
		const char *pattern = r < tf_nroutes ? tf_routes[r].pattern : "unmatched";
		for (int k = 0; k < NCODES; k++) {
			int c = atomic_load_explicit(&h->code[k], memory_order_acquire);
			if (c)
				fprintf(f,
				        "tpuflow_api_requests_total{method=\"%s\",route=\"%s\",code="
				        "\"%d\"} %llu\n",
				        method, pattern, c,
				        (unsigned long long)atomic_load_explicit(&h->n[k],
				                                                 memory_order_relaxed));
		}
		uint64_t other = atomic_load_explicit(&h->other, memory_order_relaxed);
		if (other)
			fprintf(f,
			        "tpuflow_api_requests_total{method=\"%s\",route=\"%s\",code=\"other\"} "
			        "%llu\n",
			        method, pattern, (unsigned long long)other);
	}
	fprintf(f, "# HELP tpuflow_api_request_duration_seconds Time to answer an API request (to "
	           "the first byte of a stream), by route.\n"
	           "# TYPE tpuflow_api_request_duration_seconds histogram\n");
	for (size_t r = 0; r <= tf_nroutes; r++) {
		struct route_stats *h = &w->stats[r];
		uint64_t count = atomic_load_explicit(&h->count, memory_order_relaxed);
		if (!count)
			continue;
		char lbl[256];
		snprintf(lbl, sizeof(lbl), "method=\"%s\",route=\"%s\"",
		         r < tf_nroutes ? tf_routes[r].method : "",
		         r < tf_nroutes ? tf_routes[r].pattern : "unmatched");
		uint64_t cum = 0;
		for (int b = 0; b < NLAT; b++) {
			cum += atomic_load_explicit(&h->le[b], memory_order_relaxed);
			fprintf(f, "tpuflow_api_request_duration_seconds_bucket{%s,le=\"%g\"} %llu\n", lbl,
			        lat_bounds[b], (unsigned long long)cum);
		}
		/* read apart from the buckets: +Inf is never below the last bucket's count */
		fprintf(f, "tpuflow_api_request_duration_seconds_bucket{%s,le=\"+Inf\"} %llu\n", lbl,
		        (unsigned long long)(count > cum ? count : cum));
		fprintf(f, "tpuflow_api_request_duration_seconds_sum{%s} %.6f\n", lbl,
		        (double)atomic_load_explicit(&h->sum_ns, memory_order_relaxed) * 1e-9);
		fprintf(f, "tpuflow_api_request_duration_seconds_count{%s} %llu\n", lbl,
		        (unsigned long long)(count > cum ? count : cum));
	}
}

/* ---- authorization and rate limit -------------------------------------------------------- */

/* Takes one request from the token's bucket: 0, or seconds until one is available (always 0
 * without a limit, w->rate 0). *touch: the token's last use is due to be recorded. */
static int rate_take(struct tf_web *w, int64_t id, int *touch)
{
	double now = tf_now_monotonic(), wall = tf_now_wall();
	int wait = 0, victim = 0;
	pthread_mutex_lock(&w->rate_lock);
	struct bucket *b = NULL;
	for (int i = 0; i < NBUCKETS; i++) {
		if (w->buckets[i].id == id) {
			b = &w->buckets[i];
			break;
		}
		if (w->buckets[i].at < w->buckets[victim].at)
			victim = i;
	}
	if (!b) { /* the least recently refilled bucket makes room */
		b = &w->buckets[victim];
		*b = (struct bucket){.id = id, .level = w->burst, .at = now, .touched = 0};
	}
	if (w->rate > 0) {
		b->level += (now - b->at) * w->rate;
		if (b->level > w->burst)
			b->level = w->burst;
		if (b->level >= 1)
			b->level -= 1;
		else
			wait = (int)((1 - b->level) / w->rate) + 1;
	}
	b->at = now;
	*touch = wall - b->touched >= TOUCH_EVERY;
	if (*touch)
		b->touched = wall;
	pthread_mutex_unlock(&w->rate_lock);
	return wait;
}

static struct tf_store *req_store(void *rq)
{
	return tf_web_store(rq);
}

/* 0 when the request may proceed (rq->token_id/scope set); else a problem in rs. */
static int authorize(struct tf_web *w, const struct tf_route *r, struct tf_web_req *rq,
                     struct tf_web_resp *rs)
{
	if (r->scope == TF_SCOPE_PUBLIC || w->auth == TF_WEB_AUTH_NONE) {
		rq->token_id = 0;
		rq->scope = w->auth == TF_WEB_AUTH_NONE ? TF_SCOPE_ADMIN : TF_SCOPE_PUBLIC;
		return 0;
	}
	const char *h = tf_web_header(rq, MHD_HTTP_HEADER_AUTHORIZATION);
	if (!h || strncasecmp(h, "Bearer ", 7)) {
		tf_web_problem(rs, 401, rq->path,
		               "this route needs a bearer token of scope '%s' (Authorization: Bearer "
		               "tpf_...; make one with `tpuflow tokens create`)",
		               tf_scope_name(r->scope));
		return -1;
	}
	/* the credentials without the whitespace around them (RFC 9110: OWS is not part of a
	 * field's value; a token pasted into a CI secret often ends with a space) */
	const char *tok = h + 7;
	while (*tok == ' ' || *tok == '\t')
		tok++;
	char cred[TF_TOKEN_LEN + 2];
	size_t n = strlen(tok);
	while (n && (tok[n - 1] == ' ' || tok[n - 1] == '\t'))
		n--;
	snprintf(cred, sizeof(cred), "%.*s", (int)(n < sizeof(cred) ? n : sizeof(cred) - 1), tok);
	int64_t id = 0;
	enum tf_scope scope = TF_SCOPE_UNSET;
	int rc =
	    tf_token_verify_cached(&w->tokens, cred, tf_now_wall(), req_store, rq, &id, &scope);
	if (rc == -EKEYREVOKED || rc == -EKEYEXPIRED || rc == -EACCES) {
		tf_web_problem(rs, 401, rq->path, "%s",
		               rc == -EKEYREVOKED   ? "the token was revoked"
		               : rc == -EKEYEXPIRED ? "the token has expired"
		                                    : "the token is not known");
		return -1;
	}
	if (rc) {
		tf_web_problem(rs, 503, rq->path, "cannot check the token: %s",
		               rq->st ? tf_store_errmsg(rq->st) : "the state database cannot be opened");
		return -1;
	}
	if (!tf_scope_allows(scope, r->scope)) {
		tf_web_problem(rs, 403, rq->path, "this route needs scope '%s'; the token has '%s'",
		               tf_scope_name(r->scope), tf_scope_name(scope));
		return -1;
	}
	int touch = 0, wait = rate_take(w, id, &touch);
	if (wait) {
		tf_web_problem(rs, 429, rq->path,
		               "more than %g requests per second for this token; retry in %d s",
		               w->rate, wait);
		rs->retry_after = wait;
		return -1;
	}
	if (touch && (!tf_web_store(rq) || tf_token_touch(rq->st, id, tf_now_wall())))
		tf_warn("cannot record the use of token %lld: %s", (long long)id,
		        rq->st ? tf_store_errmsg(rq->st) : "no database");
	rq->token_id = id;
	rq->scope = scope;
	return 0;
}

/* ---- idempotency -------------------------------------------------------------------------- */

/* What makes two requests with one Idempotency-Key "the same request": the SHA-256 of the
 * method, the path and the body. A body that is JSON is hashed in a canonical form (parsed,
 * then written with its keys sorted and no whitespace), so a client that serialises the
 * same document again — other key order, other spacing — gets its replay, not a 422; a body
 * that is not JSON is hashed as its bytes. *raw gets the digest of the bytes as they came
 * (what this file stored before the canonical form): see digest_matches. */
static void digest_with(const struct tf_web_req *rq, const char *body, size_t len, char hex[65])
{
	struct tf_sha256 *h = tf_sha256_new();
	tf_sha256_update_str(h, rq->method);
	tf_sha256_update_str(h, rq->path);
	tf_sha256_update(h, body, len);
	tf_sha256_final(h, hex);
}

static void request_digest(const struct tf_web_req *rq, char hex[65], char raw[65])
{
	const char *body = rq->body ? rq->body : "";
	digest_with(rq, body, rq->body_len, raw);
	json_t *doc = rq->body_len ? json_loadb(body, rq->body_len, 0, NULL) : NULL;
	char *canon = doc ? json_dumps(doc, JSON_SORT_KEYS | JSON_COMPACT) : NULL;
	json_decref(doc);
	if (canon)
		digest_with(rq, canon, strlen(canon), hex);
	else
		memcpy(hex, raw, 65);
	free(canon);
}

/* Whether a stored digest is this request's. Rows written before bodies were hashed in
 * their canonical form hold the digest of the raw bytes: those still match the very same
 * bytes, until they expire (IDEM_TTL), so an upgrade in the middle of a client's retries
 * replays as before. Taking the raw digest never matches another request: the bytes equal
 * to the canonical form of a first request are that request. */
static int digest_matches(const char *stored, const char *digest, const char *raw)
{
	return !strcmp(stored, digest) || !strcmp(stored, raw);
}

static void locked_idempotent(const struct tf_route *r, struct tf_web_req *rq,
                              struct tf_web_resp *rs, const char *key, const char *digest,
                              const char *raw);

/* Runs a creating handler inside one write transaction together with its idempotency
 * record. Without a key the handler still runs in one transaction. */
static void run_idempotent(const struct tf_route *r, struct tf_web_req *rq, struct tf_web_resp *rs)
{
	const char *raw = tf_web_header(rq, "Idempotency-Key");
	char key[IDEM_MAX + 1] = "";
	if (raw) { /* a Structured-Field string may come quoted */
		size_t n = strlen(raw);
		if (n >= 2 && raw[0] == '"' && raw[n - 1] == '"') {
			raw++;
			n -= 2;
		}
		if (n == 0 || n > IDEM_MAX) {
			tf_web_problem(rs, 400, rq->path,
			               "Idempotency-Key must be 1 to %d characters (a UUID is a good key)",
			               IDEM_MAX);
			return;
		}
		memcpy(key, raw, n);
		key[n] = 0;
	}
	char digest[65], raw_digest[65];
	request_digest(rq, digest, raw_digest);
	struct tf_web *w = rq->srv;
	pthread_mutex_lock(&w->write_lock);
	if ((r->flags & TF_ROUTE_NEW_RUN) && refuse_drained(rq, rs)) {
		pthread_mutex_unlock(&w->write_lock);
		return;
	}
	tf_store_defer_sync(rq->st, 1);
	locked_idempotent(r, rq, rs, key, digest, raw_digest);
	tf_store_defer_sync(rq->st, 0);
	pthread_mutex_unlock(&w->write_lock);
	/* The commit is written, not yet on disk (store.h: group commit). The daemon may start the
	 * run now: the commit that starts it syncs this one too (it comes first in the WAL), so
	 * nothing runs before the run is durable; the client is answered after the sync, which
	 * other POSTs written meanwhile share. A replayed answer also waits for it. */
	int ok = rs->status >= 200 && rs->status < 300;
	if (ok && rs->wake && !rs->replayed && w->hooks.wake) {
		w->hooks.wake(w->hooks.ctx);
		rs->wake = 0;
	}
	if (ok && tf_store_sync(rq->st)) {
		tf_web_resp_release(rs);
		tf_web_problem(rs, 503, rq->path, "could not commit: %s", tf_store_errmsg(rq->st));
		rs->retry_after = 1;
	}
}

/* A route that starts runs without an idempotency record (firing schedules, whose handler
 * commits tick by tick): under write_lock, so the drain's flag decides it as it does a submit
 * (tf_web_drain). */
static void run_new_run(const struct tf_route *r, struct tf_web_req *rq, struct tf_web_resp *rs)
{
	struct tf_web *w = rq->srv;
	pthread_mutex_lock(&w->write_lock);
	if (!refuse_drained(rq, rs))
		r->fn(rq, rs);
	pthread_mutex_unlock(&w->write_lock);
}

static void locked_idempotent(const struct tf_route *r, struct tf_web_req *rq,
                              struct tf_web_resp *rs, const char *key, const char *digest,
                              const char *raw)
{
	int rc = tf_store_begin(rq->st);
	if (rc) {
		tf_web_problem(rs, 503, rq->path, "the state database is busy: %s",
		               tf_store_errmsg(rq->st));
		rs->retry_after = 1;
		return;
	}
	double now = tf_now_wall();
	if (*key) {
		struct tf_stmt *s = tf_store_query(
		    rq->st,
		    "SELECT digest, status, response, location FROM idempotency_keys "
		    "WHERE token_id=? AND key=? AND created_at>?",
		    "itd", rq->token_id, key, now - IDEM_TTL);
		int found = s ? tf_stmt_step(s) : -EIO;
		if (found == 1) {
			if (!digest_matches(tf_stmt_text(s, 0), digest, raw)) {
				tf_web_problem(rs, 422, rq->path,
				               "Idempotency-Key '%s' was used with a different request in "
				               "the last 24 h; use a new key for a new request",
				               key);
			} else {
				rs->status = (int)tf_stmt_int(s, 1);
				rs->body = tf_stmt_strdup(s, 2);
				rs->len = rs->body ? strlen(rs->body) : 0;
				rs->type = rs->status < 300 ? "application/json" : "application/problem+json";
				rs->location = tf_stmt_strdup(s, 3);
				rs->replayed = 1;
			}
		}
		tf_stmt_done(s);
		if (found) {
			tf_store_rollback(rq->st);
			if (found < 0)
				tf_web_problem(rs, 500, rq->path, "%s", tf_store_errmsg(rq->st));
			return;
		}
	}
	r->fn(rq, rs);
	if (rs->status < 200 || rs->status >= 300) { /* nothing stored: the client may retry */
		tf_store_rollback(rq->st);
		return;
	}
	if (*key) {
		rc = tf_store_run(rq->st, "DELETE FROM idempotency_keys WHERE created_at<=?", "d",
		                  now - IDEM_TTL);
		if (!rc)
			rc = tf_store_run(rq->st,
			                  "INSERT OR REPLACE INTO idempotency_keys(token_id, key, digest, "
			                  "status, response, location, created_at) "
			                  "VALUES(?, ?, ?, ?, ?, ?, ?)",
			                  "ittittd", rq->token_id, key, digest, (int64_t)rs->status,
			                  rs->body ? rs->body : "", rs->location, now);
	}
	if (!rc)
		rc = tf_store_commit(rq->st);
	if (rc) {
		tf_store_rollback(rq->st);
		tf_web_resp_release(rs);
		tf_web_problem(rs, 503, rq->path, "could not commit: %s", tf_store_errmsg(rq->st));
		rs->retry_after = 1;
	}
}

/* ---- cached answers ------------------------------------------------------------------------
 * A TF_ROUTE_CACHED route's 200 body is kept under its URL with the store's change generation
 * noted before the handler read the database (orchestrator/store.h). While the generation has
 * not moved, nothing was committed since — by this process at once (its WAL hook), by another
 * process as soon as the watcher has seen it (WATCH_MS) — so the handler would write the same
 * bytes: they are sent again without a store handle or a query. Tokens, scopes and rate
 * limits are checked before, as for any request. */

static enum MHD_Result add_arg(void *cls, enum MHD_ValueKind kind, const char *key,
                               const char *value)
{
	(void)kind;
	FILE *f = cls;
	fprintf(f, "%s%s%s&", key, value ? "=" : "", value ? value : "");
	return MHD_YES;
}

/* path?name=value&... of the request (a new string). */
static char *request_url(const struct tf_web_req *rq)
{
	char *url = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&url, &len);
	fprintf(f, "%s?", rq->path);
	if (rq->conn)
		MHD_get_connection_values(rq->conn, MHD_GET_ARGUMENT_KIND, add_arg, f);
	for (int i = 0; !rq->conn && rq->query && rq->query[i] && rq->query[i + 1]; i += 2)
		add_arg(f, MHD_GET_ARGUMENT_KIND, rq->query[i], rq->query[i + 1]);
	fclose(f);
	return url;
}

static void run_cached(struct tf_web *w, const struct tf_route *r, struct tf_web_req *rq,
                       struct tf_web_resp *rs)
{
	uint64_t gen = tf_store_generation();
	char *url = request_url(rq);
	pthread_mutex_lock(&w->lock);
	struct cached *hit = NULL, *victim = &w->cache[0];
	for (int i = 0; i < NCACHED && !hit; i++) {
		struct cached *c = &w->cache[i];
		if (c->url && !strcmp(c->url, url))
			hit = c;
		else if (c->used < victim->used)
			victim = c;
	}
	if (hit && hit->gen == gen) {
		hit->used = ++w->cache_clock;
		rs->status = 200;
		rs->type = r->resp_type ? r->resp_type : "application/json";
		rs->body = tf_xmalloc(hit->len + 1);
		memcpy(rs->body, hit->body, hit->len + 1);
		rs->len = hit->len;
		pthread_mutex_unlock(&w->lock);
		free(url);
		return;
	}
	pthread_mutex_unlock(&w->lock);
	if (!tf_web_store(rq)) {
		tf_web_problem(rs, 503, rq->path, "cannot open the state database");
		rs->retry_after = 1;
		free(url);
		return;
	}
	r->fn(rq, rs);
	if (rs->status != 200 || !rs->body || rs->stream) {
		free(url);
		return;
	}
	pthread_mutex_lock(&w->lock);
	struct cached *c = hit && hit->url ? hit : victim; /* hit's slot may have been reused */
	if (c != hit || strcmp(c->url, url) == 0) {
		free(c->url);
		free(c->body);
		*c = (struct cached){.url = url, .gen = gen, .body = tf_xmalloc(rs->len + 1),
		                     .len = rs->len, .used = ++w->cache_clock};
		memcpy(c->body, rs->body, rs->len);
		c->body[rs->len] = 0;
		url = NULL;
	}
	pthread_mutex_unlock(&w->lock);
	free(url);
}

/* ---- dispatch ----------------------------------------------------------------------------- */

static int is_json_type(const char *ct)
{
	if (!ct)
		return 0;
	size_t n = strcspn(ct, ";");
	while (n && ct[n - 1] == ' ')
		n--;
	return (n == 16 && !strncasecmp(ct, "application/json", 16)) ||
	       (n == 24 && !strncasecmp(ct, "application/problem+json", 24));
}

/* ---- query arguments --------------------------------------------------------------------
 * An API route takes the query arguments its table row documents, each once: a misspelt
 * filter (`?status=failed`) or a repeated one would otherwise be ignored silently and answer
 * something the caller did not ask for. */

#define MAX_ARGS 16 /* query arguments of one request */

struct args {
	const char *name[MAX_ARGS];
	int n, more;
};

static enum MHD_Result note_arg(void *cls, enum MHD_ValueKind kind, const char *key,
                                const char *value)
{
	(void)kind;
	(void)value;
	struct args *a = cls;
	if (a->n < MAX_ARGS)
		a->name[a->n++] = key;
	else
		a->more = 1;
	return MHD_YES;
}

/* The names r->query documents ("name:type:description;...") into names (NULL-terminated,
 * each in its own slot of store); their count. */
static int query_names(const struct tf_route *r, char store[][24], const char *names[], int max)
{
	int n = 0;
	for (const char *q = r->query; q && *q && n < max;) {
		size_t len = strcspn(q, ":;");
		snprintf(store[n], 24, "%.*s", (int)len, q);
		names[n] = store[n];
		n++;
		q += strcspn(q, ";");
		q += *q == ';';
	}
	names[n] = NULL;
	return n;
}

/* 0 when every query argument is documented for the route and given once; else a 400
 * problem in rs naming the first that is not. */
static int check_query(const struct tf_route *r, struct tf_web_req *rq, struct tf_web_resp *rs)
{
	if (strncmp(r->pattern, "/api/v1/", 8))
		return 0; /* the dashboard's files, health, metrics and serving take any */
	struct args a = {0};
	if (rq->conn)
		MHD_get_connection_values(rq->conn, MHD_GET_ARGUMENT_KIND, note_arg, &a);
	for (int i = 0; !rq->conn && rq->query && rq->query[i] && rq->query[i + 1]; i += 2)
		note_arg(&a, MHD_GET_ARGUMENT_KIND, rq->query[i], rq->query[i + 1]);
	char store[MAX_ARGS][24];
	const char *names[MAX_ARGS + 1];
	int nnames = query_names(r, store, names, MAX_ARGS);
	if (a.more) {
		tf_web_problem(rs, 400, rq->path, "more than %d query arguments", MAX_ARGS);
		return -1;
	}
	for (int i = 0; i < a.n; i++) {
		int known = 0;
		for (int k = 0; k < nnames; k++)
			known |= !strcmp(a.name[i], names[k]);
		if (!known) {
			char list[256] = "";
			for (int k = 0; k < nnames; k++)
				snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s",
				         k ? ", " : "", names[k]);
			const char *sug = tf_diag_suggest(a.name[i], names);
			tf_web_problem(
			    rs, 400, rq->path, "unknown query argument '%s'%s%s%s; %s %s takes %s",
			    a.name[i], sug ? " (did you mean '" : "", sug ? sug : "",
			    sug ? "'?)" : "", r->method, r->pattern, nnames ? list : "none");
			return -1;
		}
		for (int k = 0; k < i; k++)
			if (!strcmp(a.name[i], a.name[k])) {
				tf_web_problem(
				    rs, 400, rq->path,
				    "query argument '%s' is given more than once; give it once",
				    a.name[i]);
				return -1;
			}
	}
	return 0;
}

/* The whole request: route, authorize, parse, run. Fills rs; returns the route or NULL. */
static const struct tf_route *dispatch(struct tf_web *w, struct tf_web_req *rq,
                                       struct tf_web_resp *rs, int too_big)
{
	char *allow = NULL;
	const struct tf_route *r = tf_route_find(rq->method, rq->path, rq, &allow);
	if (!r) {
		if (allow && !strcmp(rq->method, "OPTIONS")) { /* what the path takes, no token */
			rs->status = 204;
			rs->allow = allow;
		} else if (allow) {
			tf_web_problem(rs, 405, rq->path, "%s is not allowed here; allowed: %s",
			               rq->method, allow);
			rs->allow = allow;
		} else {
			tf_web_problem(rs, 404, rq->path, "no such route; the routes are listed in "
			                                  "/api/v1/openapi.json");
		}
		return NULL;
	}
	if (w->serve_only && !(r->flags & (TF_ROUTE_SERVING | TF_ROUTE_SERVE_TOO)) &&
	    r->scope != TF_SCOPE_PUBLIC) {
		tf_web_problem(rs, 404, rq->path, "this server answers predictions only "
		                                  "(tpuflow serve); the API is on the daemon");
		return NULL;
	}
	if (!(r->flags & (TF_ROUTE_SERVING | TF_ROUTE_CACHED))) { /* those take it if need be */
		char err[256];
		rq->st = store_get(w, err, sizeof(err));
		if (!rq->st) {
			tf_web_problem(rs, 503, rq->path, "cannot open the state database: %s", err);
			rs->retry_after = 1;
			return r;
		}
	}
	if (authorize(w, r, rq, rs))
		return r;
	if ((r->flags & TF_ROUTE_NEW_RUN) && refuse_drained(rq, rs))
		return r; /* checked again under write_lock, where it decides (tf_web_drain) */
	if (too_big) {
		tf_web_problem(rs, 413, rq->path, "the request body is larger than %zu bytes",
		               w->max_body);
		return r;
	}
	if (check_query(r, rq, rs))
		return r;
	if (r->flags & TF_ROUTE_JSON_BODY) {
		if (!is_json_type(tf_web_header(rq, MHD_HTTP_HEADER_CONTENT_TYPE))) {
			tf_web_problem(rs, 415, rq->path,
			               "send the body as Content-Type: application/json");
			return r;
		}
		json_error_t je;
		rq->json = json_loadb(rq->body ? rq->body : "", rq->body_len,
		                      JSON_REJECT_DUPLICATES, &je);
		if (!rq->json) {
			tf_web_problem(rs, 400, rq->path,
			               "the body is not valid JSON: %s at byte offset %d (line %d, "
			               "column %d)",
			               je.text, je.position, je.line, je.column);
			return r;
		}
		if (!json_is_object(rq->json)) {
			tf_web_problem(rs, 400, rq->path, "the body must be a JSON object");
			return r;
		}
	}
	if (r->flags & TF_ROUTE_IDEMPOTENT)
		run_idempotent(r, rq, rs);
	else if (r->flags & TF_ROUTE_NEW_RUN)
		run_new_run(r, rq, rs);
	else if (r->flags & TF_ROUTE_CACHED)
		run_cached(w, r, rq, rs);
	else
		r->fn(rq, rs);
	if (!rs->status)
		tf_web_problem(rs, 500, rq->path, "the handler gave no answer");
	return r;
}

void tf_web_serve(struct tf_web *w, struct tf_web_req *rq, struct tf_web_resp *rs)
{
	rq->srv = w;
	dispatch(w, rq, rs, rq->body_len > w->max_body);
	store_put(w, rq->st);
	rq->st = NULL;
	json_decref(rq->json);
	rq->json = NULL;
	tf_route_release_params(rq);
}

/* ---- libmicrohttpd glue ------------------------------------------------------------------- */

/* A streamed answer (text/event-stream, a followed log) on its connection's thread. When the
 * server stops (tf_web_end_streams, tf_web_stop) every stream ends as a stream should, with
 * the last chunk of its chunked body, so a client reads a normal end, not a connection cut in
 * the middle of a chunk: an event stream first finishes the event it is in (its bytes so far
 * do not end in a blank line) and sends STOP_COMMENT; a log ends after the bytes sent. */
#define STOP_COMMENT ": the server is stopping; reconnect with Last-Event-ID\n\n"

struct stream {
	struct tf_web *w;
	tf_web_stream_fn fn;
	void *ctx;
	void (*free_fn)(void *);
	double last; /* last time bytes went out (monotonic) */
	int sse;     /* an event stream: idle ones get a keep-alive comment */
	char tail[2]; /* the last two bytes handed to the server ("\n\n": between two events) */
	int said_stop; /* STOP_COMMENT was handed over */
};

/* Notes the bytes n handed out in buf (the stream's tail) and returns n. */
static ssize_t stream_sent(struct stream *s, const char *buf, size_t n)
{
	if (n >= 2) {
		memcpy(s->tail, buf + n - 2, 2);
	} else if (n == 1) {
		s->tail[0] = s->tail[1];
		s->tail[1] = buf[0];
	}
	s->last = tf_now_monotonic();
	return (ssize_t)n;
}

/* The stream's end once the server stops: the rest of the event in progress, the comment,
 * then the end (MHD then sends the chunked body's last chunk). */
static ssize_t stream_stop(struct stream *s, char *buf, size_t max)
{
	int between = !memcmp(s->tail, "\n\n", 2) || !memcmp(s->tail, "\0\0", 2);
	if (s->sse && !between) { /* the event's remaining bytes are pending in the stream */
		long n = s->fn(s->ctx, buf, max);
		if (n > 0)
			return stream_sent(s, buf, (size_t)n);
	}
	if (s->sse && between && !s->said_stop && max >= sizeof(STOP_COMMENT) - 1) {
		s->said_stop = 1;
		memcpy(buf, STOP_COMMENT, sizeof(STOP_COMMENT) - 1);
		return stream_sent(s, buf, sizeof(STOP_COMMENT) - 1);
	}
	return MHD_CONTENT_READER_END_OF_STREAM;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	(void)pos;
	struct stream *s = cls;
	for (;;) {
		if (atomic_load(&s->w->streams_end))
			return stream_stop(s, buf, max);
		long n = s->fn(s->ctx, buf, max);
		if (n < 0)
			return MHD_CONTENT_READER_END_OF_STREAM;
		if (n > 0)
			return stream_sent(s, buf, (size_t)n);
		if (s->sse && tf_now_monotonic() - s->last >= 10 && max >= 13) { /* keep it open */
			memcpy(buf, ": keepalive\n\n", 13);
			return stream_sent(s, buf, 13);
		}
		struct timespec ts = {0, 200 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
}

/* Called by MHD once the answer is over: after its last chunk went out, or when the
 * connection dropped. */
static void stream_free(void *cls)
{
	struct stream *s = cls;
	if (s->free_fn)
		s->free_fn(s->ctx);
	atomic_fetch_sub(&s->w->nstreams, 1);
	free(s);
}

static void add_common_headers(struct tf_web *w, struct MHD_Response *resp, const char *csp)
{
	MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
	MHD_add_response_header(resp, "X-Frame-Options", "DENY");
	MHD_add_response_header(resp, "Referrer-Policy", "no-referrer");
	MHD_add_response_header(resp, "Content-Security-Policy", csp ? csp : "default-src 'none'");
	MHD_add_response_header(resp, "Cache-Control", "no-store");
	if (w->tls_cert)
		MHD_add_response_header(resp, "Strict-Transport-Security", "max-age=31536000");
	if (w->cors) {
		MHD_add_response_header(resp, "Access-Control-Allow-Origin", w->cors);
		MHD_add_response_header(resp, "Vary", "Origin");
	}
}

static enum MHD_Result send_resp(struct tf_web *w, struct MHD_Connection *c,
                                 struct tf_web_resp *rs)
{
	struct MHD_Response *resp;
	if (rs->stream) {
		struct stream *s = tf_xcalloc(1, sizeof(*s));
		*s = (struct stream){.w = w,
		                     .fn = rs->stream,
		                     .ctx = rs->stream_ctx,
		                     .free_fn = rs->stream_free,
		                     .last = tf_now_monotonic(),
		                     .sse = rs->type && !strcmp(rs->type, "text/event-stream")};
		rs->stream_ctx = NULL; /* the response owns it now */
		atomic_fetch_add(&w->nstreams, 1);
		resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, s,
		                                         stream_free);
		if (!resp) {
			stream_free(s);
			return MHD_NO;
		}
	} else {
		resp = rs->body ? MHD_create_response_from_buffer(rs->len, rs->body,
		                                                  MHD_RESPMEM_MUST_FREE)
		                : MHD_create_response_from_buffer(0, (void *)"",
		                                                  MHD_RESPMEM_PERSISTENT);
		if (!resp)
			return MHD_NO;
		rs->body = NULL; /* the response frees it */
	}
	add_common_headers(w, resp, rs->csp);
	if (rs->type)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, rs->type);
	if (rs->location)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_LOCATION, rs->location);
	if (rs->allow)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, rs->allow);
	if (rs->replayed)
		MHD_add_response_header(resp, "Idempotent-Replayed", "true");
	if (rs->status == 401)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
	if (rs->retry_after > 0) {
		char ra[16];
		snprintf(ra, sizeof(ra), "%d", rs->retry_after);
		MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, ra);
	}
	enum MHD_Result ret = MHD_queue_response(c, (unsigned)rs->status, resp);
	MHD_destroy_response(resp);
	return ret;
}

static enum MHD_Result answer(struct tf_web *w, struct MHD_Connection *c, struct conn *cn,
                              const char *url, const char *method);

/* The request body is read under the cap w->max_body:
 *  - a declared Content-Length over it is answered on the first call, before any of the body
 *    is read (routing and the token are checked first: 401 before 413), when the client asked
 *    to hear first (Expect: 100-continue, which curl sends for big bodies) or the body is
 *    over the cap by more than LINGER_MAX; MHD then sends the answer and closes the
 *    connection without reading the body. Under that, the body is read and dropped and the
 *    413 comes after it, as before: a client that writes its whole body before it reads
 *    (most HTTP libraries without Expect) would otherwise meet a reset connection, not the
 *    answer, and a few MiB cost little;
 *  - a chunked body (no length declared) is read until it passes the cap; then the connection
 *    is closed without an answer, since MHD takes a response only right after the headers or
 *    after the whole request (MHD_queue_response), and reading on to the end to answer would
 *    let a client send without end. */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload, size_t *upload_size, void **con_cls)
{
	(void)version;
	struct tf_web *w = cls;
	struct conn *cn = *con_cls;
	if (!cn) {
		cn = tf_xcalloc(1, sizeof(*cn));
		cn->t0 = tf_now_monotonic();
		*con_cls = cn;
		const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
		                                             MHD_HTTP_HEADER_CONTENT_LENGTH);
		unsigned long long declared = cl ? strtoull(cl, NULL, 10) : 0;
		if (declared > w->max_body) {
			cn->too_big = 1;
			const char *expect =
			    MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_EXPECT);
			if ((expect && !strcasecmp(expect, "100-continue")) ||
			    declared - w->max_body > LINGER_MAX)
				return answer(w, c, cn, url, method);
		}
		return MHD_YES;
	}
	if (*upload_size && cn->too_big) { /* declared over the cap, by LINGER_MAX at most */
		*upload_size = 0;
		return MHD_YES;
	}
	if (*upload_size) {
		if (cn->len + *upload_size > w->max_body) {
			tf_warn("%s %s: the chunked request body passed %zu bytes: connection closed "
			        "(libmicrohttpd reports it as an application error)",
			        method, url, w->max_body);
			return MHD_NO;
		}
		if (cn->len + *upload_size + 1 > cn->cap) {
			cn->cap = (cn->len + *upload_size + 1) * 2;
			if (cn->cap > w->max_body + 1)
				cn->cap = w->max_body + 1;
			cn->body = tf_xrealloc(cn->body, cn->cap);
		}
		memcpy(cn->body + cn->len, upload, *upload_size);
		cn->len += *upload_size;
		cn->body[cn->len] = 0;
		*upload_size = 0;
		return MHD_YES;
	}
	return answer(w, c, cn, url, method);
}

/* The whole request has come (or its headers, for a body refused unread): dispatch it and
 * queue the answer. */
static enum MHD_Result answer(struct tf_web *w, struct MHD_Connection *c, struct conn *cn,
                              const char *url, const char *method)
{
	struct tf_web_req rq = {.method = method, .path = url, .body = cn->body,
	                        .body_len = cn->len, .srv = w, .conn = c};
	struct tf_web_resp rs = {0};
	const struct tf_route *r = dispatch(w, &rq, &rs, cn->too_big);
	store_put(w, rq.st);
	json_decref(rq.json);
	tf_route_release_params(&rq);
	if (rs.wake && w->hooks.wake && rs.status >= 200 && rs.status < 300 && !rs.replayed)
		w->hooks.wake(w->hooks.ctx);
	int status = rs.status;
	enum MHD_Result ret = send_resp(w, c, &rs);
	if (ret == MHD_YES) { /* on_completed runs it once the answer is out */
		cn->after = rs.after;
		cn->after_ctx = rs.after_ctx;
		rs.after = NULL;
	}
	tf_web_resp_release(&rs);
	tf_web_metrics_observe(w, r, status, tf_now_monotonic() - cn->t0);
	return ret;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
	(void)cls;
	(void)c;
	(void)toe;
	struct conn *cn = *con_cls;
	if (cn) {
		if (cn->after)
			cn->after(cn->after_ctx);
		free(cn->body);
		free(cn);
	}
	*con_cls = NULL;
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
	(void)cls;
	char msg[512];
	vsnprintf(msg, sizeof(msg), fmt, ap);
	msg[strcspn(msg, "\n")] = 0;
	tf_warn("libmicrohttpd: %s", msg);
}

/* ---- start and stop ----------------------------------------------------------------------- */

/* Parses "HOST:PORT" / "[V6]:PORT" / "PORT" into a socket address. */
static int parse_listen(const char *s, struct sockaddr_storage *ss, socklen_t *sl, int *loopback)
{
	char host[128] = "127.0.0.1";
	const char *port = s;
	if (s[0] == '[') {
		const char *e = strchr(s, ']');
		if (!e || (size_t)(e - s - 1) >= sizeof(host) || e[1] != ':')
			return -EINVAL;
		memcpy(host, s + 1, (size_t)(e - s - 1));
		host[e - s - 1] = 0;
		port = e + 2;
	} else if (strchr(s, ':')) {
		const char *e = strrchr(s, ':');
		if ((size_t)(e - s) >= sizeof(host))
			return -EINVAL;
		memcpy(host, s, (size_t)(e - s));
		host[e - s] = 0;
		port = e + 1;
	}
	char *end;
	long p = strtol(port, &end, 10);
	if (!*port || *end || p < 0 || p > 65535)
		return -EINVAL;
	memset(ss, 0, sizeof(*ss));
	struct sockaddr_in *a4 = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)ss;
	if (!strcmp(host, "localhost"))
		strcpy(host, "127.0.0.1");
	if (inet_pton(AF_INET, host, &a4->sin_addr) == 1) {
		a4->sin_family = AF_INET;
		a4->sin_port = htons((uint16_t)p);
		*sl = sizeof(*a4);
		*loopback = (ntohl(a4->sin_addr.s_addr) >> 24) == 127;
	} else if (inet_pton(AF_INET6, host, &a6->sin6_addr) == 1) {
		a6->sin6_family = AF_INET6;
		a6->sin6_port = htons((uint16_t)p);
		*sl = sizeof(*a6);
		*loopback = IN6_IS_ADDR_LOOPBACK(&a6->sin6_addr);
	} else {
		return -EINVAL;
	}
	return 0;
}

static void web_free(struct tf_web *w)
{
	for (int i = 0; i < NCACHED; i++) {
		free(w->cache[i].url);
		free(w->cache[i].body);
	}
	for (int i = 0; i < w->npool; i++)
		tf_store_close(w->pool[i]);
	tf_serve_free(w->serve);
	free(w->home);
	free(w->dbpath);
	free(w->cors);
	free(w->openapi);
	free(w->tls_key);
	free(w->tls_cert);
	free(w->stats);
	tf_token_cache_release(&w->tokens);
	pthread_mutex_destroy(&w->lock);
	pthread_mutex_destroy(&w->rate_lock);
	pthread_mutex_destroy(&w->write_lock);
	free(w);
}

int tf_web_start(const struct tf_web_opts *o, struct tf_web **out, char *err, size_t errlen)
{
	int rc = tf_routes_check(err, errlen);
	if (rc)
		return rc;
	struct sockaddr_storage ss;
	socklen_t sl = 0;
	int loopback = 0;
	const char *listen = o->listen && *o->listen ? o->listen : "127.0.0.1:8470";
	if (parse_listen(listen, &ss, &sl, &loopback)) {
		tf_errf(err, errlen, "cannot read the listen address '%s' (want HOST:PORT)", listen);
		return -EINVAL;
	}
	int tls = o->tls_cert && o->tls_key;
	if ((o->tls_cert != NULL) != (o->tls_key != NULL)) {
		tf_errf(err, errlen, "TLS needs both a certificate and a key (--tls-cert, --tls-key)");
		return -EINVAL;
	}
	if (!loopback && !tls && !o->insecure_http) {
		tf_errf(err, errlen,
		        "refusing to serve plain HTTP on the non-loopback address '%s': give "
		        "--tls-cert/--tls-key, or --insecure-http if something in front terminates TLS",
		        listen);
		return -EPERM;
	}
	/* By default one address may hold half the connections, so one client leaves the other
	 * half free (behind a proxy its clients share them): twice the 64 of the heaviest
	 * benchmark (bench/serve.c), far over a browser's 6 per host. */
	unsigned conns = o->max_conns ? o->max_conns : TF_WEB_CONNS;
	unsigned per_ip = o->max_conns_per_ip ? o->max_conns_per_ip : TF_WEB_CONNS_PER_IP;
	if (per_ip > conns) {
		tf_errf(err, errlen,
		        "%u connections from one address is more than the server's %u connections",
		        per_ip, conns);
		return -EINVAL;
	}
	struct tf_web *w = tf_xcalloc(1, sizeof(*w));
	pthread_mutex_init(&w->lock, NULL);
	pthread_mutex_init(&w->rate_lock, NULL);
	pthread_mutex_init(&w->write_lock, NULL);
	tf_token_cache_init(&w->tokens);
	w->home = tf_xstrdup(o->home ? o->home : ".tpuflow");
	w->dbpath = tf_xasprintf("%s/%s", w->home, TF_STORE_FILE);
	w->cors = o->cors_origin ? tf_xstrdup(o->cors_origin) : NULL;
	w->auth = o->auth;
	w->max_body = o->max_body ? o->max_body : 1 << 20;
	w->rate = o->rate > 0 ? o->rate : o->rate < 0 ? 0 : 100;
	w->burst = o->burst > 0 ? o->burst : 10 * w->rate;
	w->hooks = o->hooks;
	w->runs_total_max = o->runs_total_max > 0 ? o->runs_total_max : 1000;
	w->serve_only = o->serve_only;
	w->serve = tf_serve_new(w->home, o->serve_model, o->serve_max_batch);
	w->stats = tf_xcalloc(tf_nroutes + 1, sizeof(*w->stats));
	struct tf_store *st = NULL;
	rc = tf_store_open_home(w->home, &st, err, errlen);
	if (rc) {
		web_free(w);
		return rc;
	}
	w->pool[w->npool++] = st;
	if (tls) {
		size_t n;
		if (tf_read_file(o->tls_cert, 1 << 20, &w->tls_cert, &n) ||
		    tf_read_file(o->tls_key, 1 << 20, &w->tls_key, &n)) {
			tf_errf(err, errlen, "cannot read the TLS certificate '%s' or key '%s'",
			        o->tls_cert, o->tls_key);
			web_free(w);
			return -ENOENT;
		}
		if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
			tf_errf(err, errlen, "this libmicrohttpd was built without TLS");
			web_free(w);
			return -ENOTSUP;
		}
	}
	unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
	                 MHD_USE_POLL | MHD_USE_ERROR_LOG | (tls ? MHD_USE_TLS : 0) |
	                 (ss.ss_family == AF_INET6 ? MHD_USE_IPv6 : 0);
	struct MHD_OptionItem opts[] = {
	    {MHD_OPTION_EXTERNAL_LOGGER, (intptr_t)on_mhd_log, NULL}, /* first, to catch all */
	    {MHD_OPTION_SOCK_ADDR, 0, &ss},
	    {MHD_OPTION_CONNECTION_LIMIT, conns, NULL},
	    /* past it MHD closes a new connection from that address at once */
	    {MHD_OPTION_PER_IP_CONNECTION_LIMIT, per_ip, NULL},
	    {MHD_OPTION_CONNECTION_TIMEOUT, o->timeout_s ? o->timeout_s : 30, NULL},
	    {MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)on_completed, NULL},
	    {MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024, NULL},
	    {tls ? MHD_OPTION_HTTPS_MEM_CERT : MHD_OPTION_END, 0, w->tls_cert},
	    {tls ? MHD_OPTION_HTTPS_MEM_KEY : MHD_OPTION_END, 0, w->tls_key},
	    {MHD_OPTION_END, 0, NULL},
	};
	w->d = MHD_start_daemon(flags, 0, NULL, NULL, on_request, w, MHD_OPTION_ARRAY, opts,
	                        MHD_OPTION_END);
	if (!w->d) {
		tf_errf(err, errlen, "cannot listen on %s (in use, or not an address of this host?)",
		        listen);
		web_free(w);
		return -EADDRINUSE;
	}
	const union MHD_DaemonInfo *info = MHD_get_daemon_info(w->d, MHD_DAEMON_INFO_BIND_PORT);
	w->port = info ? info->port : 0;
	w->watching = !pthread_create(&w->watcher, NULL, watch, w);
	if (w->auth == TF_WEB_AUTH_NONE)
		tf_warn("AUTH IS OFF (--auth none): anyone who can reach %s may %s", listen,
		        w->serve_only ? "call predictions"
		                      : "start, cancel and read runs and manage tokens");
	tf_info("serving the API on %s://%s (port %d)", tls ? "https" : "http", listen, w->port);
	*out = w;
	return 0;
}

/* MHD_quiesce_daemon is not used to stop new connections meanwhile: with MHD's own threads
 * the listening socket stays open until MHD_stop_daemon (libmicrohttpd's manual), so a
 * client connecting then would wait in the backlog and be reset; served instead, a new
 * stream ends at once and any other request is answered. */
int tf_web_end_streams(struct tf_web *w, double wait)
{
	if (!w)
		return 0;
	atomic_store(&w->streams_end, 1);
	double until = tf_now_monotonic() + (wait > 0 ? wait : 0);
	int left;
	while ((left = atomic_load(&w->nstreams)) > 0 && tf_now_monotonic() < until) {
		struct timespec ts = {0, 20 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	return left;
}

void tf_web_stop(struct tf_web *w)
{
	if (!w)
		return;
	if (!atomic_load(&w->streams_end) && tf_web_end_streams(w, STOP_WAIT))
		tf_warn("API streams did not end within %.0f s; their connections are cut",
		        STOP_WAIT);
	w->stopping = 1;
	MHD_stop_daemon(w->d);
	if (w->watching)
		pthread_join(w->watcher, NULL);
	web_free(w);
}

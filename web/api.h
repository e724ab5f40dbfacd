/* api.h — inside the web/ folder: the route table, and the request and response that a
 * route's handler sees. web/http.c owns the server and calls handlers; web/routes.c holds the
 * table (its handlers are in web/routes_*.c and web/runview.c); web/openapi.c turns the
 * table into the OpenAPI document.
 *
 * One table drives the router, the authorization check and the OpenAPI document, so a route
 * cannot be served without being documented and without a scope.
 */
#ifndef TF_WEB_API_H
#define TF_WEB_API_H

#include "common/buf.h"
#include "orchestrator/diag.h"
#include "orchestrator/store.h"
#include "web/server.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Scopes, weakest first: a token of scope S may call routes needing S or less. `predict` is
 * its own branch (model serving only). TF_SCOPE_UNSET in the table refuses the start. */
enum tf_scope {
	TF_SCOPE_UNSET,
	TF_SCOPE_PUBLIC, /* no token (health, readiness, the OpenAPI document) */
	TF_SCOPE_READ,
	TF_SCOPE_TRIGGER,
	TF_SCOPE_ADMIN,
	TF_SCOPE_PREDICT,
	TF_SCOPE_LAST
};
const char *tf_scope_name(enum tf_scope s);
int tf_scope_parse(const char *name, enum tf_scope *out); /* 0 or -EINVAL */
/* 1 when a token of scope `have` may call a route needing `need`. */
int tf_scope_allows(enum tf_scope have, enum tf_scope need);

#define TF_WEB_MAX_PARAMS 4

struct tf_web_req {
	const char *method;
	const char *path;                     /* without the query */
	char pnames[TF_WEB_MAX_PARAMS][24];    /* path parameter names from the pattern */
	char *pvals[TF_WEB_MAX_PARAMS];        /* their decoded values (owned by the server) */
	int nparams;
	const char *body; /* request body (NUL-terminated), length body_len */
	size_t body_len;
	json_t *json;     /* parsed body when the route takes one */
	struct tf_store *st;   /* the request's store handle (serving routes: see tf_web_store) */
	struct tf_web *srv;
	int64_t token_id;      /* caller's token (0 when auth is off) */
	enum tf_scope scope;   /* caller's scope */
	void *conn;            /* the server's connection (for query and headers) */
	/* Without a connection (tf_web_serve from a test or fuzzer): name, value pairs,
	 * NULL-terminated, for headers and query arguments. */
	const char *const *headers, *const *query;
};

/* A query argument or request header, NULL when absent (borrowed for the request). */
const char *tf_web_query(const struct tf_web_req *rq, const char *name);
const char *tf_web_header(const struct tf_web_req *rq, const char *name);
const char *tf_web_param(const struct tf_web_req *rq, const char *name);
const struct tf_web_hooks *tf_web_hooks(const struct tf_web *w);
const char *tf_web_home(const struct tf_web *w);
/* The most runs GET /api/v1/runs counts for its total (tf_web_opts.runs_total_max). */
int64_t tf_web_runs_total_max(const struct tf_web *w);
/* 1 once tf_web_drain was called: the daemon is stopping and starts no new runs. */
int tf_web_draining(const struct tf_web *w);
/* The request's store handle, taken from the server's pool on first use (routes flagged
 * TF_ROUTE_SERVING start without one); NULL when the database cannot be opened. */
struct tf_store *tf_web_store(struct tf_web_req *rq);
/* The server's model-serving cache (web/serve.h). */
struct tf_serve *tf_web_serving(const struct tf_web *w);

/* A streamed body (Server-Sent Events, followed logs): fill writes up to `max` bytes into
 * buf and returns how many, 0 to say "nothing yet" (the server waits a little and asks
 * again), or -1 at the end. Runs on the connection's own thread. */
typedef long (*tf_web_stream_fn)(void *ctx, char *buf, size_t max);

struct tf_web_resp {
	int status;
	char *body; /* owned; NULL for an empty body */
	size_t len;
	const char *type; /* content type (static string) */
	char *location;   /* Location header (owned) or NULL */
	char *allow;      /* Allow header (owned) or NULL */
	int retry_after;  /* Retry-After seconds when > 0 */
	int replayed;     /* Idempotent-Replayed: true */
	int wake;         /* call hooks.wake after the commit */
	const char *csp;  /* Content-Security-Policy (static string); NULL: default-src 'none' */
	tf_web_stream_fn stream;
	void *stream_ctx;
	void (*stream_free)(void *ctx);
	/* called once, with after_ctx (which it owns), on the connection's thread once the answer
	 * has been sent or the connection dropped (or by tf_web_resp_release when the answer is
	 * never sent): work the request causes that the client need not wait for. The request's
	 * body (tf_web_req.body) is still there while it runs. */
	void (*after)(void *ctx);
	void *after_ctx;
};

/* Response helpers: the JSON is consumed (decref'd). */
void tf_web_json(struct tf_web_resp *rs, int status, json_t *doc);
/* The 200 answer of JSON text written by hand into b (its storage is taken; b is left empty):
 * for the hot answers (a page of runs, predictions), written without a jansson tree. */
void tf_web_json_text(struct tf_web_resp *rs, struct tf_buf *b);
/* Appends v to b as a JSON string (NULL: null): quotes, backslashes and control characters
 * escaped, other bytes as they are. */
void tf_web_put_json_str(struct tf_buf *b, const char *v);
/* Replaces, in place, every byte of `s` that is not part of valid UTF-8 with '?': text from a
 * request (a percent-decoded path) can then go into a JSON answer, which must be UTF-8. */
void tf_web_utf8_clean(char *s);
/* An RFC 9457 problem: type is about:blank-like per status unless `type` is given. */
void tf_web_problem(struct tf_web_resp *rs, int status, const char *instance, const char *fmt,
                    ...) __attribute__((format(printf, 4, 5)));
/* The same with an `errors` array of {file, line, col, message, hint} from diags. */
void tf_web_problem_diags(struct tf_web_resp *rs, int status, const char *instance,
                          const struct tf_diag_list *diags, const char *detail);
/* The same with the members of `ext` added (RFC 9457 extension members; the five standard
 * ones stay as given). Takes ext's reference. */
void tf_web_problem_ext(struct tf_web_resp *rs, int status, const char *instance, json_t *ext,
                        const char *detail);
/* Maps a negative errno of a store or hook call to a problem (404/409/422/503/500). */
void tf_web_problem_errno(struct tf_web_resp *rs, int rc, const char *instance, const char *msg);
void tf_web_resp_release(struct tf_web_resp *rs);

typedef void (*tf_web_handler)(struct tf_web_req *rq, struct tf_web_resp *rs);

enum tf_route_flags {
	TF_ROUTE_JSON_BODY = 1 << 0,  /* body must be a JSON object (415 / 400 otherwise) */
	TF_ROUTE_IDEMPOTENT = 1 << 1, /* creating POST: Idempotency-Key honoured, one transaction */
	TF_ROUTE_STREAM = 1 << 2,     /* may answer a stream (documented as text/event-stream) */
	TF_ROUTE_SERVING = 1 << 3,    /* model serving (web/serve.h): errors are {"error": "..."};
	                                 with TF_ROUTE_SERVE_TOO, the only non-public routes of
	                                 `tpuflow serve` */
	TF_ROUTE_CACHED = 1 << 4,     /* a GET whose 200 body depends only on the database and the
	                                 URL: answered again from memory until the store's change
	                                 generation moves (web/http.c) */
	TF_ROUTE_SERVE_TOO = 1 << 5,  /* an API route `tpuflow serve` answers as well (/metrics,
	                                 for its serving figures) */
	TF_ROUTE_NEW_RUN = 1 << 6,    /* starts a run (submit, retry, resume, firing schedules):
	                                 refused with 503 and Retry-After while the server drains
	                                 (tf_web_drain) */
};

struct tf_route {
	const char *method;  /* GET, POST, DELETE */
	const char *pattern; /* "/api/v1/runs/{id}:cancel" */
	enum tf_scope scope;
	tf_web_handler fn;
	unsigned flags;
	const char *op;      /* operationId */
	const char *summary;
	const char *query;   /* query parameters "name:type:description;..." or NULL */
	const char *req;     /* request body JSON schema text, NULL when none */
	const char *resp;    /* 2xx response body JSON schema text */
	int ok;              /* the success status (200, 201, 202) */
	const char *resp_type; /* content type of the success (NULL: application/json) */
};

extern const struct tf_route tf_routes[];
extern const size_t tf_nroutes;

/* One request through routing, authorization, body checks and the handler, as the server
 * does it; fills rs (release it with tf_web_resp_release). For requests that do not come
 * through a connection (fuzzing, tests); rq->method, path, body, headers, query set. */
void tf_web_serve(struct tf_web *w, struct tf_web_req *rq, struct tf_web_resp *rs);

/* Matches `path` against `pattern`; on success fills rq's params (decoded copies). */
int tf_route_match(const char *pattern, const char *path, struct tf_web_req *rq);
/* Finds the route for method+path (HEAD finds a GET that is not a stream). Returns the
 * route, or NULL with *allow set to the methods the path has, HEAD and OPTIONS included (a new
 * string; NULL when the path matches nothing = 404). */
const struct tf_route *tf_route_find(const char *method, const char *path,
                                     struct tf_web_req *rq, char **allow);
void tf_route_release_params(struct tf_web_req *rq);
/* 0 when every route has a scope and a valid schema; else -EINVAL naming the route in err. */
int tf_routes_check(char *err, size_t errlen);

/* Resolves the {id} parameter (a full id, a unique prefix or "latest") into id; 0, or a
 * problem in rs (404, or 409 for an ambiguous prefix) and a negative code. */
int tf_web_run_param(struct tf_web_req *rq, struct tf_web_resp *rs, char id[32]);
/* The inside of one run (web/runview.c): a step's logs (stored or followed live), the run's
 * DAG, a train step's checkpoints. */
void tf_web_step_logs(struct tf_web_req *rq, struct tf_web_resp *rs);
void tf_web_run_graph(struct tf_web_req *rq, struct tf_web_resp *rs);
/* A step's log as GET .../logs?follow=true&offset=SKIP sends it, for a stream that carries it
 * beside other things (a run's event stream with ?log=STEP, web/routes_runs.c): read with st,
 * which is borrowed and must outlive it (rq gives the home and the run's object store, at the
 * start only). tf_web_log_fill is a tf_web_stream_fn of it: bytes of the body in order, 0 for
 * nothing now, -1 at its end (every attempt sent and the step final). _free(NULL) is a no-op. */
struct tf_web_log;
struct tf_web_log *tf_web_log_follow(struct tf_web_req *rq, struct tf_store *st, const char *run,
                                     const char *step, size_t skip);
long tf_web_log_fill(struct tf_web_log *l, char *buf, size_t max);
void tf_web_log_free(struct tf_web_log *l);

void tf_web_step_checkpoints(struct tf_web_req *rq, struct tf_web_resp *rs);
/* The dashboard's files embedded at build time (web/ui.c, build/gen/ui.c): answers GET /
 * with index.html and /ui/NAME with the bundled NAME, under the page's CSP. */
void tf_web_ui(struct tf_web_req *rq, struct tf_web_resp *rs);

/* The OpenAPI 3.1 document of the table (a new reference). */
json_t *tf_openapi_document(void);

/* /metrics text (caller frees *out) from the database plus the server's request counters. */
int tf_metrics_render(struct tf_web *w, struct tf_store *st, char **out, size_t *len);
/* Request counters by route pattern and status, with latency. */
struct tf_route;
void tf_web_metrics_observe(struct tf_web *w, const struct tf_route *route, int status,
                            double seconds);
/* Writes the request counters and latency histogram as exposition text (web/metrics.c). */
void tf_web_metrics_requests(struct tf_web *w, FILE *f);

#endif

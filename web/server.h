/* server.h — the HTTP server of `tpuflow daemon`: the REST API under /api/v1, its OpenAPI
 * document, Prometheus /metrics, /healthz and /readyz (docs/api.md).
 *
 * The server reads the state database of one state home on its own store handles (one per
 * connection thread). Whatever needs the daemon itself — starting a submitted run, cancelling
 * one, retry and resume — goes through the hooks below, so web/ knows nothing of the daemon's
 * internals; a hook left NULL answers 503 on its routes.
 */
#ifndef TF_WEB_SERVER_H
#define TF_WEB_SERVER_H

#include "orchestrator/diag.h"
#include "orchestrator/store.h"

#include <stddef.h>
#include <stdint.h>

enum tf_web_auth {
	TF_WEB_AUTH_TOKENS, /* every route but the public ones needs a bearer token */
	TF_WEB_AUTH_NONE,   /* no token needed (logged loudly at start) */
};

/* A run asked for by POST /api/v1/runs. Strings are borrowed for the call. */
struct tf_web_submit {
	const char *pipeline;    /* the registered pipeline's name when asked for by name */
	const char *yaml;        /* the pipeline text: sent inline, or the registered one */
	size_t yaml_len;         /* length of yaml */
	const char *params_json; /* JSON object of param overrides, values as strings */
	int priority;            /* the run's priority 0..9 (runs.priority), -1 when not given */
	const char *project;     /* scheduler project, or NULL for the default */
};

/* What the daemon does for the API. Every hook runs inside a write transaction the server
 * has opened on `st` (tf_store_begin), joins it (state.h functions do) and must not wait for
 * other writers: the server commits the run together with its idempotency record, then calls
 * `wake`. A hook returns 0, -EINVAL for a request it refuses (message in err, pipeline
 * problems in diags: answered 422), -ENOENT for an unknown run or pipeline (404), -EBUSY
 * for a run in a state that does not allow the action (409), another negative errno (500). */
struct tf_web_hooks {
	void *ctx; /* passed to every hook */
	int (*submit)(void *ctx, struct tf_store *st, const struct tf_web_submit *s,
	              char run_id[32], struct tf_diag_list *diags, char *err, size_t errlen);
	int (*cancel)(void *ctx, struct tf_store *st, const char *run, char *err, size_t errlen);
	/* retry makes a new run (its id in new_run); resume continues `run` (new_run = run). */
	int (*retry)(void *ctx, struct tf_store *st, const char *run, char new_run[32], char *err,
	             size_t errlen);
	int (*resume)(void *ctx, struct tf_store *st, const char *run, char new_run[32], char *err,
	              size_t errlen);
	/* After the commit of any of the above: the daemon has work. May be NULL. */
	void (*wake)(void *ctx);
	/* For /readyz: 1 when the daemon is ready to take runs. NULL: ready once listening. */
	int (*ready)(void *ctx);
};

#define TF_WEB_CONNS 256        /* connections the server holds at once, by default */
#define TF_WEB_CONNS_PER_IP 128 /* of them from one address, by default */

struct tf_web_opts {
	const char *home;       /* state home (HOME/tpuflow.db, migrated) */
	const char *listen;     /* "HOST:PORT"; port 0 picks a free one (tf_web_port) */
	enum tf_web_auth auth;  /* tokens (default) or none */
	const char *tls_cert;   /* PEM files: both set = HTTPS */
	const char *tls_key;
	int insecure_http;      /* allow plain HTTP on a non-loopback address */
	const char *cors_origin; /* Access-Control-Allow-Origin value, NULL: no CORS */
	size_t max_body;        /* request body cap in bytes (0: 1 MiB) */
	unsigned max_conns;     /* connection cap (0: TF_WEB_CONNS) */
	unsigned max_conns_per_ip; /* connections from one address (0: TF_WEB_CONNS_PER_IP), so
	                            * one client cannot take them all; a browser holds about 6;
	                            * more than max_conns is refused (-EINVAL) */
	unsigned timeout_s;     /* idle seconds before a connection is closed (0: 30) */
	double rate;            /* requests per second per token (0: 100; negative: no limit) */
	double burst;           /* bucket size per token (0: 10 x rate) */
	int64_t runs_total_max; /* GET /api/v1/runs counts at most this many runs for its
	                         * `total`, then says `total_exact: false` (0: 10,000) */
	struct tf_web_hooks hooks;
	/* Model serving (web/serve.h, docs/serving.md): the /v1 and /v2 routes are always on;
	 * serve_only answers nothing else but the public routes and /metrics (`tpuflow serve`,
	 * TF_ROUTE_SERVE_TOO in web/api.h), serve_model
	 * (may be NULL) restricts serving to one model, serve_max_batch caps instances per
	 * request (0: 1024). */
	int serve_only;
	const char *serve_model;
	size_t serve_max_batch;
};

struct tf_web;

/* Checks the options (a non-loopback address without TLS is refused unless insecure_http;
 * a route without a scope is refused), opens the database and starts serving on background
 * threads. On success *out is a server the caller stops with tf_web_stop; on failure a
 * negative errno and a message in err. */
int tf_web_start(const struct tf_web_opts *o, struct tf_web **out, char *err, size_t errlen);

/* The port the server listens on (useful after asking for port 0). */
int tf_web_port(const struct tf_web *w);

/* Starts a drain (the daemon's SIGTERM): from then on the routes that start runs (submit,
 * retry, resume, firing schedules: TF_ROUTE_NEW_RUN in web/api.h) answer 503 with
 * `Retry-After: retry_after` and /readyz answers 503; every other route is served as before.
 * Such a request is decided under the lock it holds until its commit: it was committed before
 * the drain began (this call waits for a transaction in progress), or it is refused; once
 * this returns, no run is created through the server. Safe from any thread that is not in a
 * hook; there is no way back. */
void tf_web_drain(struct tf_web *w, int retry_after);

/* Ends every open stream as a stream ends, with the last chunk of its chunked body: an event
 * stream after the event it is in and a comment saying the server stops, a followed log
 * after the bytes sent (docs/api.md); a stream asked for from then on ends at once. Waits at
 * most `wait` seconds for their last bytes to go out; returns how many were still open.
 * Other requests are answered as before until tf_web_stop. */
int tf_web_end_streams(struct tf_web *w, double wait);

/* Ends open streams (tf_web_end_streams, waiting up to 2 s unless it was called before),
 * stops accepting, waits for handlers and frees the server. NULL: no-op. */
void tf_web_stop(struct tf_web *w);

#endif

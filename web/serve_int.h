/* serve_int.h — inside the web/ folder: what the files of model serving share (web/serve.h is
 * the interface). serve.c owns the cache of loaded versions and each model's registry view;
 * serve_input.c turns request bodies into model inputs; serve_proto.c answers the routes of
 * both protocols; serve_rollout.c keeps each version's figures and judges canaries by their
 * rollout policies. The structs below are the cache's; their locking rules are stated at each.
 */
#ifndef TF_WEB_SERVE_INT_H
#define TF_WEB_SERVE_INT_H

#include "web/serve.h"

#include "ml/bundle.h"
#include "orchestrator/registry.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#define LAT_RING 1024 /* latencies kept per version for its percentiles */
/* A latency histogram for the rollout's windows: bucket 0 holds answers up to 1 us, bucket i
 * those in (2^((i-1)/8), 2^(i/8)] us (9% wide), the last everything slower (~4 min) */
#define LAT_BUCKETS 224
#define MAX_VIEWS 256 /* models whose registry view is kept (unknown names included) */

enum vstate { V_LOADING, V_AVAILABLE, V_UNAVAILABLE };

/* One version of one model. refs counts the cache's own reference (while listed) plus one per
 * request holding it; it is taken under the lock and dropped without it, and the release
 * that drops it to zero frees the entry (by then it is unlisted, so nobody can find it). */
struct entry {
	struct entry *next;
	char *model;
	int64_t version;
	enum vstate state;
	char reason[512]; /* why UNAVAILABLE */
	struct tf_bundle *b;
	_Atomic unsigned refs;
	double failed_at, used_at; /* monotonic */
	/* answers of the prediction routes, counted without a lock: counts, and the latencies
	 * of the last LAT_RING */
	_Atomic uint64_t requests, errors;
	_Atomic uint64_t failures; /* answers it could not give: 5xx, or routed to it unloadable */
	_Atomic float lat_ms[LAT_RING];
	_Atomic uint64_t hist[LAT_BUCKETS]; /* every answer's latency (lat_bucket) */
	_Atomic uint64_t lat_ns;            /* and their sum (ns), for /metrics */
	/* as a canary under a shadow comparison: rows production also answered, and those
	 * whose answers differed (serve_proto.c, "shadow"); and its comparisons not yet made
	 * (queued for the comparison thread, or running) */
	_Atomic uint64_t shadow_rows, shadow_differ;
	_Atomic uint64_t shadow_pending;
};

/* A version's figures at one moment, or over a window (the difference of two moments). */
struct fig {
	uint64_t req, fail;
	uint64_t rows, differ; /* the shadow comparison's (entry.shadow_rows, shadow_differ) */
	uint64_t hist[LAT_BUCKETS];
};

/* The active deployment of one alias of a model, and this server's rollout window on its
 * canary: the canary's and the stable version's figures when the window began
 * (tf_serve_tick; kept across readings of the same deployment). */
struct dep {
	char *alias;
	int64_t id;        /* the deployment */
	int64_t stable;    /* the version the alias keeps */
	int64_t canary;    /* its canary, 0: none */
	double canary_pct; /* and the canary's share of the alias's requests */
	double at;         /* made (wall) */
	int has_rollout;   /* the canary's rollout policy, and its text */
	struct tf_rollout rollout;
	char *rollout_text;
	struct fig *base_canary, *base_stable; /* the window (NULL: not begun) */
	double base_at;                        /* monotonic */
};

/* What the registry says about one model, as of generation gen of the store
 * (tf_store_generation): read once, then used by every request until the store changes, so
 * resolving a request's version reads no database. */
struct view {
	struct view *next;
	char *model;
	uint64_t gen;
	int exists;     /* 0: no such model (remembered too) */
	int refreshing; /* a request is reading a newer one; the others wait for it */
	size_t nversions;
	int64_t *versions; /* ascending */
	char **bundles;    /* their bundle keys */
	size_t naliases;
	char **aliases; /* alias names and their versions */
	int64_t *aliased;
	size_t ndeps;
	struct dep *deps; /* the aliases' active deployments */
};

struct tf_serve {
	char *home;
	char *only_model;
	size_t max_batch;
	pthread_mutex_t lock; /* the lists, every entry's state and times, every view */
	pthread_cond_t loaded;
	pthread_cond_t refreshed; /* a view was read again (or could not be) */
	struct entry *list;
	size_t n;
	struct view *views; /* most recently read first */
	size_t nviews;
	char server[17];  /* this process's id among the serving processes (serving_figures) */
	double shared_at; /* when its figures were last written (monotonic; tf_serve_tick only) */
	/* the shadow comparisons waiting for production's answer, oldest first, and the one
	 * thread that makes them (serve_proto.c; started with the first, joined by
	 * tf_serve_shadow_stop), all under shadow_lock */
	pthread_mutex_t shadow_lock;
	pthread_cond_t shadow_cond;
	struct shadow *shadow_head, *shadow_tail;
	size_t shadow_queued, shadow_bytes; /* jobs, and the request bodies they copied */
	int shadow_started, shadow_stop;
	pthread_t shadow_thread;
};

#define MAX_ALIASED 64 /* versions listed by the status routes */

/* ---- serve.c: the cache and the registry views ---- */

/* Drops a reference taken by tf_serve_acquire_in or tf_serve_version_state (the last one frees
 * the entry); NULL is a no-op. */
void tf_serve_release(struct entry *e);
/* The listed entry of (model, version), or NULL. Called with the lock held. */
struct entry *tf_serve_entry_find_locked(struct tf_serve *sv, const char *model, int64_t v);
/* The view of `model`, called and returning with sv->lock held, never older than the store
 * was when the call began (read again first when the store has changed since; one request
 * reads, the others wait for it). The store is st, else the request's. NULL when the model
 * was never read and the store cannot be read now; an older view when it cannot be read
 * again. */
struct view *tf_serve_view_locked(struct tf_serve *sv, struct tf_store *st, struct tf_web_req *rq,
                                  const char *model);
/* The active deployment of `alias` in m, or NULL. */
struct dep *tf_serve_view_dep(const struct view *m, const char *alias);
/* The index of version v in m, or -1. */
ssize_t tf_serve_view_version(const struct view *m, int64_t v);
/* The version `alias` points at, or 0. */
int64_t tf_serve_view_alias(const struct view *m, const char *alias);
/* The entry of version v of the view m, held for the caller (tf_serve_release), loading its
 * bundle on first use; called with sv->lock held, returns with it released. count: a
 * prediction request, counted as a failure of the version when it cannot answer. -ENOENT
 * when the version cannot be loaded (reason in err), -EAGAIN when another request has been
 * loading it for too long. */
int tf_serve_acquire_in(struct tf_serve *sv, const struct view *m, int64_t v, int count,
                        struct entry **out, char *err, size_t errlen);
/* The distinct versions the aliases of `model` point at, ascending, into out[MAX_ALIASED]:
 * how many, or -ENOENT for a model the registry does not have (or cannot be read). */
int tf_serve_aliased_versions(struct tf_serve *sv, struct tf_store *st, struct tf_web_req *rq,
                              const char *model, int64_t out[MAX_ALIASED]);
/* State and reason of (model, version), loading it when needed; with e, the entry is held
 * for the caller when AVAILABLE. */
enum vstate tf_serve_version_state(struct tf_serve *sv, struct tf_store *st, struct tf_web_req *rq,
                                   const char *model, int64_t v, struct entry **e, char *why,
                                   size_t whylen);

/* Whether `model` is ready (the Open Inference Protocol's model and server readiness): the
 * version its 'production' alias points at is AVAILABLE (loaded now when needed), or, for a
 * model without production, the version of each of its aliases, the canary labels of its
 * deployments aside (production answers a canary's share when the canary cannot,
 * docs/serving.md). A label that cannot be loaded beside a sound production fails its own
 * requests, not the host's readiness. 1, or 0 with the first reason in why. */
int tf_serve_model_ready(struct tf_serve *sv, struct tf_web_req *rq, const char *model,
                         char *why, size_t whylen);

/* ---- serve_input.c: request bodies into model inputs ---- */

/* The name of b's input ("image", "features"), and its Open Inference Protocol datatype. */
const char *tf_serve_input_name(const struct tf_bundle *b);
const char *tf_serve_v2_datatype(const struct tf_bundle *b);
/* The common request, parsed without building a JSON tree: {"instances": [[n, ...], ...]}
 * with flat examples of plain numbers (integers 0..255 for an image model; for a float one,
 * TensorFlow Serving's NaN, Infinity and -Infinity too). Returns 1 with
 * *x (n x inputs, preprocessed) new when the body is exactly that and every value is
 * acceptable, 0 when not (the general path then parses it and names any error). */
int tf_serve_fast_instances(struct tf_serve *sv, const struct tf_bundle *b, const char *p,
                            const char *end, float **x, size_t *n);
/* TensorFlow Serving's JSON (docs/serving.md, "Non-finite floats"): the body p[len] with its
 * bare NaN, Infinity and -Infinity tokens (outside strings) quoted, so a JSON parser reads
 * them as the strings tf_serve_tfs_inputs takes for those values; new (*outlen bytes), or
 * NULL when the body has none. */
char *tf_serve_quote_nonfinite(const char *p, size_t len, size_t *outlen);
/* The examples of a TF Serving body: "instances" (row) or "inputs" (columnar); *x (n x
 * inputs, preprocessed) is new. *columnar says which. A float input takes the strings "NaN",
 * "Infinity" and "-Infinity" for those values (tf_serve_quote_nonfinite). -EINVAL with err. */
int tf_serve_tfs_inputs(struct tf_serve *sv, const struct tf_bundle *b, const json_t *body,
                        float **x, size_t *n, int *columnar, char *err, size_t errlen);
/* The one input tensor of an inference request into *x (n x inputs, preprocessed), new.
 * -EINVAL with err. */
int tf_serve_v2_inputs(struct tf_serve *sv, const struct tf_bundle *b, const json_t *body,
                       float **x, size_t *n, char *err, size_t errlen);

/* ---- serve_proto.c: the shadow comparison ---- */

/* Makes the comparisons still queued, then ends the comparison thread (if it was started).
 * No request may be running. */
void tf_serve_shadow_stop(struct tf_serve *sv);

/* ---- serve_rollout.c: figures ---- */

/* Counts one answer of e (status) that took since t0 (monotonic); without a lock. */
void tf_serve_record(struct entry *e, int status, double t0);
/* {requests, errors, failures, error_rate, p50_ms, p99_ms[, shadow: {rows, differ}]} of e
 * (percentiles of the last LAT_RING answers; the shadow comparison's rows as a canary). */
json_t *tf_serve_stats_json(struct entry *e);

#endif

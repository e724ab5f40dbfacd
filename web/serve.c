/* serve.c — owns model serving (web/serve.h): the cache of loaded versions (fetched once,
 * verified, shared by reference count), the resolution of a request's model, version or label
 * to a version (with the canary share of the named alias's deployment, sticky per
 * X-Request-Key), the parsing of TensorFlow Serving (row and columnar) and Open Inference
 * Protocol bodies into model inputs checked against the signature (the common row body without
 * a JSON tree), the answers, each version's request counts, latency percentiles and histogram,
 * and the rollout policies' judgement (with the figures other serving processes share).
 *
 * Inputs go through tf_bundle_preprocess and tf_bundle_predict, the path of `tpuflow predict`,
 * and every float is printed with 9 significant digits, enough for a float32 to read back to
 * the same bits: predictions over HTTP are bit-identical to the command's.
 */
#include "web/serve.h"

#define TF_LOG_TAG "serve"
#include "common/common.h"
#include "common/log.h"
#include "ml/bundle.h"
#include "orchestrator/registry.h"
#include "storage/objstore.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <pthread.h>
#include <sys/types.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define LAT_RING 1024 /* latencies kept per version for its percentiles */
/* A latency histogram for the rollout's windows: bucket 0 holds answers up to 1 us, bucket i
 * those in (2^((i-1)/8), 2^(i/8)] us (9% wide), the last everything slower (~4 min) */
#define LAT_BUCKETS 224
#define MAX_VIEWS 256 /* models whose registry view is kept (unknown names included) */

enum vstate { V_LOADING, V_AVAILABLE, V_UNAVAILABLE };
static const char *const vstate_names[] = {"LOADING", "AVAILABLE", "UNAVAILABLE"};

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
};

/* A version's figures at one moment, or over a window (the difference of two moments). */
struct fig {
	uint64_t req, fail;
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
};

struct tf_serve *tf_serve_new(const char *home, const char *only_model, size_t max_batch)
{
	struct tf_serve *sv = tf_xcalloc(1, sizeof(*sv));
	sv->home = tf_xstrdup(home);
	sv->only_model = only_model ? tf_xstrdup(only_model) : NULL;
	sv->max_batch = max_batch ? max_batch : TF_SERVE_MAX_BATCH;
	pthread_mutex_init(&sv->lock, NULL);
	pthread_cond_init(&sv->loaded, NULL);
	pthread_cond_init(&sv->refreshed, NULL);
	if (tf_random_hex(sv->server, 8))
		snprintf(sv->server, sizeof(sv->server), "pid%ld-%p", (long)getpid(), (void *)sv);
	return sv;
}

static void entry_free(struct entry *e)
{
	tf_bundle_free(e->b);
	free(e->model);
	free(e);
}

static void view_free(struct view *m)
{
	if (!m)
		return;
	for (size_t i = 0; i < m->nversions; i++)
		free(m->bundles[i]);
	for (size_t i = 0; i < m->naliases; i++)
		free(m->aliases[i]);
	free(m->versions);
	free(m->bundles);
	free(m->aliases);
	free(m->aliased);
	for (size_t i = 0; i < m->ndeps; i++) {
		free(m->deps[i].alias);
		free(m->deps[i].rollout_text);
		free(m->deps[i].base_canary);
		free(m->deps[i].base_stable);
	}
	free(m->deps);
	free(m->model);
	free(m);
}

void tf_serve_free(struct tf_serve *sv)
{
	if (!sv)
		return;
	for (struct entry *e = sv->list, *next; e; e = next) {
		next = e->next;
		entry_free(e);
	}
	for (struct view *m = sv->views, *next; m; m = next) {
		next = m->next;
		view_free(m);
	}
	pthread_mutex_destroy(&sv->lock);
	pthread_cond_destroy(&sv->loaded);
	pthread_cond_destroy(&sv->refreshed);
	free(sv->home);
	free(sv->only_model);
	free(sv);
}

/* Drops one reference; the last one frees e. */
static void entry_put(struct entry *e)
{
	if (atomic_fetch_sub_explicit(&e->refs, 1, memory_order_acq_rel) == 1)
		entry_free(e);
}

static void release(struct tf_serve *sv, struct entry *e)
{
	(void)sv;
	if (e)
		entry_put(e);
}

/* The histogram bucket of a latency of ms milliseconds. */
static int lat_bucket(double ms)
{
	double us = ms * 1000;
	if (!(us > 1))
		return 0;
	double i = ceil(8 * log2(us));
	return i >= LAT_BUCKETS - 1 ? LAT_BUCKETS - 1 : (int)i;
}

/* Counts one answer of e (status) that took since t0 (monotonic). */
static void record(struct tf_serve *sv, struct entry *e, int status, double t0)
{
	(void)sv;
	float ms = (float)((tf_now_monotonic() - t0) * 1000);
	uint64_t i = atomic_fetch_add_explicit(&e->requests, 1, memory_order_relaxed);
	atomic_store_explicit(&e->lat_ms[i % LAT_RING], ms, memory_order_relaxed);
	atomic_fetch_add_explicit(&e->hist[lat_bucket(ms)], 1, memory_order_relaxed);
	if (status != 200)
		atomic_fetch_add_explicit(&e->errors, 1, memory_order_relaxed);
	if (status >= 500)
		atomic_fetch_add_explicit(&e->failures, 1, memory_order_relaxed);
}

static int cmp_float(const void *a, const void *b)
{
	float x = *(const float *)a, y = *(const float *)b;
	return x < y ? -1 : x > y;
}

/* The latencies of e's last answers (at most LAT_RING), sorted, into lat; how many. */
static size_t latencies(struct entry *e, float lat[LAT_RING])
{
	uint64_t n = atomic_load_explicit(&e->requests, memory_order_relaxed);
	uint64_t from = n > LAT_RING ? n - LAT_RING : 0;
	size_t k = 0;
	for (uint64_t i = from; i < n; i++)
		lat[k++] = atomic_load_explicit(&e->lat_ms[i % LAT_RING], memory_order_relaxed);
	qsort(lat, k, sizeof(float), cmp_float);
	return k;
}

/* {requests, errors, failures, error_rate, p50_ms, p99_ms} of e (percentiles of the last
 * LAT_RING answers). */
static json_t *stats_json(struct tf_serve *sv, struct entry *e)
{
	(void)sv;
	float lat[LAT_RING];
	uint64_t n = atomic_load_explicit(&e->requests, memory_order_relaxed);
	uint64_t errs = atomic_load_explicit(&e->errors, memory_order_relaxed);
	uint64_t fails = atomic_load_explicit(&e->failures, memory_order_relaxed);
	size_t k = latencies(e, lat);
	return json_pack("{s:I, s:I, s:I, s:f, s:f, s:f}", "requests", (json_int_t)n, "errors",
	                 (json_int_t)errs, "failures", (json_int_t)fails, "error_rate",
	                 n ? (double)errs / (double)n : 0.0, "p50_ms", k ? (double)lat[k / 2] : 0.0,
	                 "p99_ms", k ? (double)lat[(k * 99) / 100] : 0.0);
}

/* e's figures now (zero for NULL). */
static void fig_read(struct entry *e, struct fig *f)
{
	memset(f, 0, sizeof(*f));
	if (!e)
		return;
	f->req = atomic_load_explicit(&e->requests, memory_order_relaxed);
	f->fail = atomic_load_explicit(&e->failures, memory_order_relaxed);
	for (int i = 0; i < LAT_BUCKETS; i++)
		f->hist[i] = atomic_load_explicit(&e->hist[i], memory_order_relaxed);
}

/* f minus base (the window since base): 0, or -1 when f is older than base (the version was
 * loaded again: its counts started over). */
static int fig_since(struct fig *f, const struct fig *base)
{
	if (f->req < base->req || f->fail < base->fail)
		return -1;
	f->req -= base->req;
	f->fail -= base->fail;
	for (int i = 0; i < LAT_BUCKETS; i++) {
		if (f->hist[i] < base->hist[i])
			return -1;
		f->hist[i] -= base->hist[i];
	}
	return 0;
}

/* The q-quantile of f's latencies in ms: the upper bound of the bucket it falls in (at most
 * 9% above the true figure); 0 without answers. */
static double fig_quantile(const struct fig *f, double q)
{
	uint64_t n = 0, seen = 0;
	for (int i = 0; i < LAT_BUCKETS; i++)
		n += f->hist[i];
	if (!n)
		return 0;
	uint64_t want = (uint64_t)ceil(q * (double)n);
	for (int i = 0; i < LAT_BUCKETS; i++)
		if ((seen += f->hist[i]) >= want)
			return pow(2, i / 8.0) / 1000;
	return pow(2, (LAT_BUCKETS - 1) / 8.0) / 1000;
}

/* Unlists the least recently used settled entry other than keep while over the cap. */
static void evict_locked(struct tf_serve *sv, const struct entry *keep)
{
	while (sv->n > TF_SERVE_CACHE) {
		struct entry **victim = NULL;
		for (struct entry **pe = &sv->list; *pe; pe = &(*pe)->next)
			if (*pe != keep && (*pe)->state != V_LOADING &&
			    (!victim || (*pe)->used_at < (*victim)->used_at))
				victim = pe;
		if (!victim)
			return;
		struct entry *e = *victim;
		*victim = e->next;
		sv->n--;
		tf_info("evicted %s version %lld from the serving cache", e->model,
		        (long long)e->version);
		entry_put(e); /* requests holding it keep it alive */
	}
}

/* ---- the registry's view ------------------------------------------------------------------ */

/* Reads the view of `model` from the store; NULL when the store cannot be read. */
static struct view *view_read(struct tf_store *st, const char *model, uint64_t gen)
{
	struct view *m = tf_xcalloc(1, sizeof(*m));
	m->model = tf_xstrdup(model);
	m->gen = gen;
	json_t *show = NULL, *dep = NULL;
	int rc = tf_registry_show(st, model, &show);
	if (rc == -ENOENT)
		return m;
	if (rc) {
		view_free(m);
		return NULL;
	}
	m->exists = 1;
	json_t *vs = json_object_get(show, "versions"), *v;
	size_t i;
	m->versions = tf_xcalloc(json_array_size(vs) + 1, sizeof(int64_t));
	m->bundles = tf_xcalloc(json_array_size(vs) + 1, sizeof(char *));
	json_array_foreach(vs, i, v)
	{
		int64_t n = json_integer_value(json_object_get(v, "version"));
		const char *b = json_string_value(json_object_get(v, "bundle"));
		size_t at = m->nversions++;
		while (at &&
		       m->versions[at - 1] > n) { /* ascending, whatever the listing's order */
			m->versions[at] = m->versions[at - 1];
			m->bundles[at] = m->bundles[at - 1];
			at--;
		}
		m->versions[at] = n;
		m->bundles[at] = tf_xstrdup(b ? b : "");
	}
	json_t *as = json_object_get(show, "aliases");
	m->aliases = tf_xcalloc(json_object_size(as) + 1, sizeof(char *));
	m->aliased = tf_xcalloc(json_object_size(as) + 1, sizeof(int64_t));
	const char *k;
	json_object_foreach(as, k, v)
	{
		m->aliases[m->naliases] = tf_xstrdup(k);
		m->aliased[m->naliases++] = json_integer_value(v);
	}
	json_decref(show);
	m->deps = tf_xcalloc(m->naliases + 1, sizeof(struct dep));
	for (size_t a = 0; a < m->naliases; a++) {
		rc = tf_registry_deployment(st, model, m->aliases[a], &dep);
		if (rc == -ENOENT)
			continue;
		if (rc) {
			view_free(m);
			return NULL;
		}
		struct dep *d = &m->deps[m->ndeps++];
		d->alias = tf_xstrdup(m->aliases[a]);
		const json_t *cv = json_object_get(dep, "canary_version");
		if (json_is_integer(cv)) {
			d->canary = json_integer_value(cv);
			d->canary_pct = json_number_value(json_object_get(dep, "canary_percent"));
		}
		d->id = json_integer_value(json_object_get(dep, "id"));
		d->stable = json_integer_value(json_object_get(dep, "version"));
		d->at = json_number_value(json_object_get(dep, "created_at"));
		const json_t *policy = json_object_get(dep, "rollout");
		char why[256];
		if (d->canary && json_is_object(policy)) {
			d->has_rollout =
			    !tf_registry_rollout_parse(policy, &d->rollout, why, sizeof(why));
			if (d->has_rollout)
				d->rollout_text = json_dumps(policy, JSON_COMPACT);
			else
				tf_warn("model %s: the rollout policy of deployment %lld is not used: "
				        "%s",
				        model, (long long)d->id, why);
		}
		json_decref(dep);
		dep = NULL;
	}
	return m;
}

/* The active deployment of `alias` in m, or NULL. */
static struct dep *view_dep(const struct view *m, const char *alias)
{
	for (size_t i = 0; i < m->ndeps; i++)
		if (!strcmp(m->deps[i].alias, alias))
			return &m->deps[i];
	return NULL;
}

static struct view **view_find_locked(struct tf_serve *sv, const char *model)
{
	struct view **pm = &sv->views;
	while (*pm && strcmp((*pm)->model, model))
		pm = &(*pm)->next;
	return pm;
}

/* The view of `model`, called and returning with sv->lock held, never older than the store
 * was when the call began: read again first when the store has changed since it was read
 * (one request reads, the others wait for it), so a request that starts after a commit
 * answers from what the commit wrote. The store is st, else the request's (taken only
 * then). NULL when the model was never read and the store cannot be read now; an older view
 * when it cannot be read again. */
static struct view *view_locked(struct tf_serve *sv, struct tf_store *st, struct tf_web_req *rq,
                                const char *model)
{
	uint64_t gen = tf_store_generation();
	struct view *m = *view_find_locked(sv, model);
	while (m && m->gen < gen && m->refreshing) {
		pthread_cond_wait(&sv->refreshed, &sv->lock);
		m = *view_find_locked(sv, model);
	}
	if (m && m->gen >= gen)
		return m;
	if (m)
		m->refreshing = 1;
	pthread_mutex_unlock(&sv->lock);
	if (!st && rq)
		st = tf_web_store(rq);
	struct view *fresh = st ? view_read(st, model, gen) : NULL;
	pthread_mutex_lock(&sv->lock);
	pthread_cond_broadcast(&sv->refreshed);
	struct view **pm = view_find_locked(sv, model);
	if (!fresh) {
		if (*pm)
			(*pm)->refreshing = 0;
		return *pm;
	}
	if (*pm) { /* replaced in place: a view is only read under the lock */
		struct view *old = *pm;
		for (size_t i = 0; i < fresh->ndeps; i++) { /* the same deployment's window goes on */
			struct dep *d = &fresh->deps[i], *was = view_dep(old, d->alias);
			if (was && was->id == d->id && was->base_canary) {
				d->base_canary = was->base_canary;
				d->base_stable = was->base_stable;
				d->base_at = was->base_at;
				was->base_canary = was->base_stable = NULL;
			}
		}
		fresh->next = old->next;
		*pm = fresh;
		view_free(old);
		return fresh;
	}
	fresh->next = sv->views;
	sv->views = fresh;
	if (++sv->nviews > MAX_VIEWS) { /* the least recently read goes */
		struct view **last = &sv->views;
		while ((*last)->next)
			last = &(*last)->next;
		view_free(*last);
		*last = NULL;
		sv->nviews--;
	}
	return fresh;
}

/* The index of version v in m, or -1. */
static ssize_t view_version(const struct view *m, int64_t v)
{
	size_t lo = 0, hi = m->nversions;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (m->versions[mid] == v)
			return (ssize_t)mid;
		if (m->versions[mid] < v)
			lo = mid + 1;
		else
			hi = mid;
	}
	return -1;
}

/* The version `alias` points at, or 0. */
static int64_t view_alias(const struct view *m, const char *alias)
{
	for (size_t i = 0; i < m->naliases; i++)
		if (!strcmp(m->aliases[i], alias))
			return m->aliased[i];
	return 0;
}

/* The distinct versions aliases point at, ascending, into out[cap]; how many. */
static size_t view_aliased(const struct view *m, int64_t *out, size_t cap)
{
	size_t n = 0;
	for (size_t a = 0; a < m->naliases; a++) {
		int64_t v = m->aliased[a];
		size_t i = 0;
		while (i < n && out[i] < v)
			i++;
		if ((i < n && out[i] == v) || n == cap)
			continue;
		memmove(out + i + 1, out + i, (n - i) * sizeof(*out));
		out[i] = v;
		n++;
	}
	return n;
}

/* ---- loading ------------------------------------------------------------------------------ */

/* Fetches and verifies the bundle of (model, version) under key; outside the lock. */
static int load_bundle(struct tf_serve *sv, const char *model, int64_t v, const char *key,
                       struct tf_bundle **out, char *err, size_t errlen)
{
	if (!key || !*key) {
		tf_errf(err, errlen, "version %lld of model '%s' has no bundle", (long long)v,
		        model);
		return -ENOENT;
	}
	size_t kl = strlen(key);
	char *prefix = tf_xasprintf("%s%s", key, key[kl - 1] == '/' ? "" : "/");
	char *url = tf_objstore_home_url(sv->home);
	struct tf_objstore *os = NULL;
	char why[512];
	int rc = tf_objstore_open(url, &os, why, sizeof(why));
	if (!rc)
		rc = tf_bundle_load(os, prefix, out, why, sizeof(why));
	if (rc)
		tf_errf(err, errlen, "bundle '%s' of version %lld: %s", prefix, (long long)v, why);
	tf_objstore_free(os);
	free(url);
	free(prefix);
	return rc;
}

/* The entry of (model, version), held for the caller (release it), loading its bundle (key)
 * on first use; called with sv->lock held, returns with it released. -ENOENT when the
 * version cannot be loaded (reason in err), -EAGAIN when another request has been loading
 * it for too long. */
static int acquire_locked(struct tf_serve *sv, const char *model, int64_t v, const char *key,
                          int count, struct entry **out, char *err, size_t errlen)
{
	double now = tf_now_monotonic();
	struct entry *e = sv->list;
	while (e && (e->version != v || strcmp(e->model, model)))
		e = e->next;
	if (e && e->state == V_AVAILABLE) { /* the common case */
		atomic_fetch_add_explicit(&e->refs, 1, memory_order_relaxed);
		e->used_at = now;
		pthread_mutex_unlock(&sv->lock);
		*out = e;
		return 0;
	}
	int load = 0;
	if (!e) {
		e = tf_xcalloc(1, sizeof(*e));
		e->model = tf_xstrdup(model);
		e->version = v;
		e->state = V_LOADING;
		atomic_init(&e->refs, 1);
		e->next = sv->list;
		sv->list = e;
		sv->n++;
		load = 1;
	} else if (e->state == V_UNAVAILABLE && now - e->failed_at >= TF_SERVE_RETRY) {
		e->state = V_LOADING;
		load = 1;
	}
	atomic_fetch_add_explicit(&e->refs, 1, memory_order_relaxed);
	e->used_at = now;
	if (load) {
		char *k = tf_xstrdup(key ? key : "");
		pthread_mutex_unlock(&sv->lock);
		struct tf_bundle *b = NULL;
		char why[sizeof(e->reason)];
		int rc = load_bundle(sv, model, v, k, &b, why, sizeof(why));
		free(k);
		pthread_mutex_lock(&sv->lock);
		if (rc) {
			e->state = V_UNAVAILABLE;
			snprintf(e->reason, sizeof(e->reason), "%s", why);
			e->failed_at = tf_now_monotonic();
			tf_warn("model %s version %lld is UNAVAILABLE: %s", model, (long long)v,
			        why);
		} else {
			e->b = b;
			e->state = V_AVAILABLE;
			tf_info("model %s version %lld loaded", model, (long long)v);
		}
		pthread_cond_broadcast(&sv->loaded);
		evict_locked(sv, e);
	} else {
		struct timespec until;
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_sec += 30;
		while (e->state == V_LOADING)
			if (pthread_cond_timedwait(&sv->loaded, &sv->lock, &until))
				break;
	}
	int rc = 0;
	if (e->state == V_LOADING) {
		tf_errf(err, errlen, "version %lld of model '%s' is still LOADING", (long long)v,
		        model);
		rc = -EAGAIN;
	} else if (e->state == V_UNAVAILABLE) {
		tf_errf(err, errlen, "version %lld of model '%s' is UNAVAILABLE: %s", (long long)v,
		        model, e->reason);
		rc = -ENOENT;
	}
	pthread_mutex_unlock(&sv->lock);
	if (rc && count) /* a request routed to a version that cannot answer */
		record(sv, e, 503, now);
	if (rc)
		entry_put(e);
	else
		*out = e;
	return rc;
}

/* acquire_locked for a version of the view m (lock held, released on return); count: a
 * prediction request, counted as a failure of the version when it cannot answer. */
static int acquire_in(struct tf_serve *sv, const struct view *m, int64_t v, int count,
                      struct entry **out, char *err, size_t errlen)
{
	ssize_t i = view_version(m, v);
	return acquire_locked(sv, m->model, v, i < 0 ? NULL : m->bundles[i], count, out, err,
	                      errlen);
}

/* ---- answers ---------------------------------------------------------------------------- */

static void serving_error(struct tf_web_resp *rs, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void serving_error(struct tf_web_resp *rs, int status, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	tf_web_utf8_clean(msg); /* it may quote the request's path */
	tf_web_json(rs, status, json_pack("{s:s}", "error", msg));
	if (status == 503)
		rs->retry_after = 1;
}

/* Floats with 9 significant digits: a float32 printed so reads back to the same bits (answers
 * are written by hand into a tf_buf, web/api.h). */
static void put_floats(struct tf_buf *b, const float *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		tf_buf_printf(b, i ? ",%.9g" : "%.9g", (double)p[i]);
}

/* ---- which version ---------------------------------------------------------------------- */

/* The view of the request's model `name` with sv->lock held, when this server serves it and
 * the registry has it; else NULL with the lock released and the error in rs. */
static struct view *model_view(struct tf_web_req *rq, struct tf_web_resp *rs, const char *name)
{
	struct tf_serve *sv = tf_web_serving(rq->srv);
	if (sv->only_model && strcmp(name, sv->only_model)) {
		serving_error(rs, 404, "Servable not found: this server serves model '%s' only",
		              sv->only_model);
		return NULL;
	}
	pthread_mutex_lock(&sv->lock);
	struct view *m = view_locked(sv, NULL, rq, name);
	if (m && m->exists)
		return m;
	pthread_mutex_unlock(&sv->lock);
	if (!m)
		serving_error(rs, 503,
		              "cannot read the registry: the state database cannot be "
		              "opened");
	else
		serving_error(rs, 404, "Servable not found: no model '%s' in the registry", name);
	return NULL;
}

/* A uniform number in [0, 100) from the request key (X-Request-Key: the same key, the same
 * side), else from a per-thread generator. */
static double traffic_point(struct tf_web_req *rq)
{
	static _Thread_local uint64_t rnd;
	const char *key = tf_web_header(rq, "X-Request-Key");
	uint64_t h;
	if (key) {
		h = 0xcbf29ce484222325ull; /* FNV-1a */
		for (const unsigned char *p = (const unsigned char *)key; *p; p++)
			h = (h ^ *p) * 0x100000001b3ull;
	} else {
		if (!rnd)
			rnd = (uint64_t)(tf_now_monotonic() * 1e9) ^ (uint64_t)(uintptr_t)&rnd;
		h = rnd += 0x9e3779b97f4a7c15ull;
	}
	h ^= h >> 30; /* splitmix64's finaliser: every key bit reaches the top bits */
	h *= 0xbf58476d1ce4e5b9ull;
	h ^= h >> 27;
	h *= 0x94d049bb133111ebull;
	h ^= h >> 31;
	return (double)(h >> 11) * 0x1.0p-53 * 100;
}

/* The version the request names: {version}, {label}, or the production alias, of which the
 * canary of the alias's deployment takes its share when `split` (then *stable is the version
 * that answers if the canary cannot, else 0). Returns the model's view with sv->lock held,
 * or NULL with the lock released and the error in rs. */
static struct view *pick_locked(struct tf_web_req *rq, struct tf_web_resp *rs, int split,
                                int64_t *v, int64_t *stable)
{
	const char *name = tf_web_param(rq, "name");
	const char *ver = tf_web_param(rq, "version"), *label = tf_web_param(rq, "label");
	long long n = 0;
	if (ver) {
		char *end;
		errno = 0;
		n = strtoll(ver, &end, 10);
		if (errno || *end || end == ver || n < 0) { /* TF Serving: "Malformed request" */
			serving_error(rs, 400, "version '%s': want a positive integer", ver);
			return NULL;
		}
	}
	struct view *m = model_view(rq, rs, name);
	if (!m)
		return NULL;
	*v = n;
	if (stable)
		*stable = 0;
	if (ver) {
		if (view_version(m, n) >= 0)
			return m;
		pthread_mutex_unlock(
		    &tf_web_serving(rq->srv)->lock); /* version 0 too, as TF Serving */
		serving_error(rs, 404, "Servable not found: model '%s' has no version %lld", name,
		              n);
		return NULL;
	}
	*v = label && !strcmp(label, "latest") ? 0 : view_alias(m, label ? label : "production");
	if (!*v) {
		pthread_mutex_unlock(&tf_web_serving(rq->srv)->lock);
		if (label) /* TF Serving: INVALID_ARGUMENT (ServerCore's label lookup), so 400 */
			serving_error(
			    rs, 400,
			    "Unrecognized servable version label: '%s' (model '%s' has no "
			    "such alias)",
			    label, name);
		else
			serving_error(
			    rs, 404,
			    "Servable not found: model '%s' has no 'production' alias (deploy "
			    "a version, or call /versions/{v} or /labels/{label})",
			    name);
		return NULL;
	}
	const struct dep *d = split ? view_dep(m, label ? label : "production") : NULL;
	if (d && d->canary && d->canary_pct > 0 && traffic_point(rq) < d->canary_pct) {
		*stable = *v;
		*v = d->canary;
	}
	return m;
}

/* The request's entry (pick_locked, with the canary's share), held for the caller (release
 * it). predicting: a prediction request, counted by the version it is routed to; a canary
 * that cannot answer counts it as a failure (its rollout policy sees it) and the stable
 * version answers it. On failure the error is in rs. */
static struct entry *serve_entry(struct tf_web_req *rq, struct tf_web_resp *rs, int predicting)
{
	struct tf_serve *sv = tf_web_serving(rq->srv);
	int64_t v, stable;
	struct view *m = pick_locked(rq, rs, 1, &v, &stable);
	if (!m)
		return NULL;
	struct entry *e = NULL;
	char err[1024];
	int rc = acquire_in(sv, m, v, predicting, &e, err, sizeof(err));
	if (rc && stable) { /* the canary cannot answer: production does */
		pthread_mutex_lock(&sv->lock);
		m = view_locked(sv, NULL, rq, tf_web_param(rq, "name"));
		if (m && m->exists)
			rc = acquire_in(sv, m, stable, predicting, &e, err, sizeof(err));
		else
			pthread_mutex_unlock(&sv->lock);
	}
	if (rc)
		serving_error(rs, rc == -EAGAIN ? 503 : 404, "%s", err);
	return e;
}

/* ---- inputs ----------------------------------------------------------------------------- */

struct input_ctx {
	const struct tf_bundle *b;
	int image; /* values must be integers 0..255 */
	char *err;
	size_t errlen;
};

/* Flattens the numbers of j (nested arrays, row-major) into out[cap], counting in *n;
 * field names the place in errors. -EINVAL on a wrong type, -E2BIG past cap. */
static int flatten(const struct input_ctx *c, const json_t *j, float *out, size_t cap, size_t *n,
                   const char *field)
{
	if (json_is_array(j)) {
		size_t i;
		const json_t *x;
		json_array_foreach(j, i, x)
		{
			int rc = flatten(c, x, out, cap, n, field);
			if (rc)
				return rc;
		}
		return 0;
	}
	if (!json_is_number(j)) {
		tf_errf(c->err, c->errlen, "%s, value %zu: expected a number (%s input), got %s",
		        field, *n, c->image ? "uint8" : "float32",
		        json_is_string(j)   ? "a string"
		        : json_is_object(j) ? "an object"
		        : json_is_null(j)   ? "null"
		                            : "a boolean");
		return -EINVAL;
	}
	double d = json_number_value(j);
	if (c->image && (d != floor(d) || d < 0 || d > 255)) {
		tf_errf(c->err, c->errlen,
		        "%s, value %zu: %.17g is not a uint8 (the model takes pixels 0..255)",
		        field, *n, d);
		return -EINVAL;
	}
	if (!isfinite(d) || fabs(d) > 3.4028234663852886e38) {
		tf_errf(c->err, c->errlen, "%s, value %zu: %.17g is not a finite float32", field,
		        *n, d);
		return -EINVAL;
	}
	if (*n >= cap)
		return -E2BIG;
	out[(*n)++] = (float)d;
	return 0;
}

/* One example from j into x[dim] (preprocessed); field names it in errors. */
static int one_example(const struct input_ctx *c, const json_t *j, float *x, const char *field)
{
	size_t dim = c->b->mlp.size[0], n = 0;
	float raw[TF_MLP_MAX_WIDTH];
	int rc = flatten(c, j, raw, dim, &n, field);
	if (rc == -E2BIG || (!rc && n != dim)) {
		if (c->b->rows)
			tf_errf(c->err, c->errlen,
			        "%s: expected %zu values (or %d x %d), got %s%zu", field, dim,
			        c->b->rows, c->b->cols, rc ? "more than " : "", n);
		else
			tf_errf(c->err, c->errlen, "%s: expected %zu values, got %s%zu", field, dim,
			        rc ? "more than " : "", n);
		return -EINVAL;
	}
	if (rc)
		return rc;
	tf_bundle_preprocess(c->b, raw, x);
	return 0;
}

static const char *input_name(const struct tf_bundle *b)
{
	const char *s =
	    json_string_value(json_object_get(json_object_get(b->signature, "input"), "name"));
	return s ? s : "input";
}

/* Allocates x for n examples after the batch cap check. */
static float *batch_alloc(struct tf_serve *sv, const struct tf_bundle *b, size_t n,
                          const char *field, char *err, size_t errlen)
{
	if (n == 0) {
		tf_errf(err, errlen, "%s: no instances", field);
		return NULL;
	}
	if (n > sv->max_batch) {
		tf_errf(err, errlen, "%s: %zu instances, over this server's batch cap of %zu",
		        field, n, sv->max_batch);
		return NULL;
	}
	return tf_xmalloc(n * b->mlp.size[0] * sizeof(float));
}

/* The examples of a TF Serving body: "instances" (row) or "inputs" (columnar); *x (n x
 * inputs, preprocessed) is new. *columnar says which. -EINVAL with err. */
static int tfs_inputs(struct tf_serve *sv, const struct tf_bundle *b, const json_t *body, float **x,
                      size_t *n, int *columnar, char *err, size_t errlen)
{
	struct input_ctx c = {b, b->pre.image, err, errlen};
	const char *iname = input_name(b);
	const json_t *inst = json_object_get(body, "instances"),
	             *cols = json_object_get(body, "inputs");
	const json_t *sig = json_object_get(body, "signature_name");
	if (sig && (!json_is_string(sig) || (strcmp(json_string_value(sig), "serving_default") &&
	                                     *json_string_value(sig)))) {
		tf_errf(err, errlen, "signature_name: the only signature is 'serving_default'");
		return -EINVAL;
	}
	if (!inst == !cols) {
		tf_errf(err, errlen,
		        "give exactly one of 'instances' (row format) or 'inputs' "
		        "(columnar format)");
		return -EINVAL;
	}
	*columnar = cols != NULL;
	const char *field = inst ? "instances" : "inputs";
	const json_t *list = inst ? inst : cols;
	if (json_is_object(list)) { /* {"inputs": {"image": [...]}} */
		const json_t *named = json_object_get(list, iname);
		if (!named || json_object_size(list) != 1) {
			tf_errf(err, errlen, "%s: the model has one input, '%s'", field, iname);
			return -EINVAL;
		}
		list = named;
	}
	if (!json_is_array(list)) {
		tf_errf(err, errlen, "%s: expected a list of examples", field);
		return -EINVAL;
	}
	*n = json_array_size(list);
	float *buf = batch_alloc(sv, b, *n, field, err, errlen);
	if (!buf)
		return -EINVAL;
	size_t dim = b->mlp.size[0];
	for (size_t i = 0; i < *n; i++) {
		const json_t *ex = json_array_get(list, i);
		char where[64];
		snprintf(where, sizeof(where), "%s[%zu]", field, i);
		if (json_is_object(ex)) { /* row format with named inputs */
			const json_t *v = json_object_get(ex, iname);
			if (!v || json_object_size(ex) != 1) {
				tf_errf(err, errlen, "%s: the model has one input, '%s'", where,
				        iname);
				free(buf);
				return -EINVAL;
			}
			ex = v;
		}
		if (one_example(&c, ex, buf + i * dim, where)) {
			free(buf);
			return -EINVAL;
		}
	}
	*x = buf;
	return 0;
}

/* Parses the body as a JSON object; on failure the error is in rs. */
static json_t *body_json(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	json_error_t je;
	json_t *j = json_loadb(rq->body ? rq->body : "", rq->body_len, JSON_REJECT_DUPLICATES, &je);
	if (!j || !json_is_object(j)) {
		if (j)
			serving_error(rs, 400, "the body must be a JSON object");
		else
			serving_error(rs, 400, "the body is not valid JSON: %s at byte offset %d",
			              je.text, je.position);
		json_decref(j);
		return NULL;
	}
	return j;
}

/* ---- TensorFlow Serving ----------------------------------------------------------------- */

/* The common request, parsed without building a JSON tree: {"instances": [[n, ...], ...]}
 * with flat examples of plain numbers (integers 0..255 for an image model). Returns 1 with
 * *x (n x inputs, preprocessed) new when the body is exactly that and every value is
 * acceptable, 0 when not (the general path then parses it and names any error). */
static int fast_instances(struct tf_serve *sv, const struct tf_bundle *b, const char *p,
                          const char *end, float **x, size_t *n)
{
	static const char head[] = "\"instances\"";
	const size_t dim = b->mlp.size[0];
	float raw[TF_MLP_MAX_WIDTH];
	float *buf = NULL;
	size_t rows = 0, cap = 0;
#define WS()                                                                                       \
	while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t'))                   \
	p++
#define EXPECT(c)                                                                                  \
	do {                                                                                       \
		WS();                                                                              \
		if (p == end || *p != (c))                                                         \
			goto no;                                                                   \
		p++;                                                                               \
	} while (0)
	EXPECT('{');
	WS();
	if ((size_t)(end - p) < sizeof(head) - 1 || memcmp(p, head, sizeof(head) - 1))
		goto no;
	p += sizeof(head) - 1;
	EXPECT(':');
	EXPECT('[');
	do {
		EXPECT('[');
		size_t k = 0;
		do {
			WS();
			if (b->pre.image && k < dim) { /* the common pixel: 1 to 3 digits, <= 255 */
				const char *q = p;
				unsigned iv = 0;
				while (q < end && q - p < 4 && *q >= '0' && *q <= '9')
					iv = iv * 10 + (unsigned)(*q++ - '0');
				if (q > p && q - p < 4 && iv <= 255 && (*p != '0' || q - p == 1) &&
				    q < end && (*q == ',' || *q == ']')) {
					raw[k++] = (float)iv;
					p = q;
					continue; /* the while below: a comma goes on */
				}
			}
			/* a JSON number: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
			const char *q = p;
			int neg = q < end && *q == '-', real = 0;
			q += neg;
			if (q == end || *q < '0' || *q > '9' ||
			    (*q == '0' && q + 1 < end && q[1] >= '0' && q[1] <= '9'))
				goto no;
			uint64_t iv = 0;
			int digits = 0;
			for (; q < end && *q >= '0' && *q <= '9'; q++, digits++)
				iv = iv * 10 + (uint64_t)(*q - '0');
			if (q < end && *q == '.') {
				real = 1;
				if (++q == end || *q < '0' || *q > '9')
					goto no;
				while (q < end && *q >= '0' && *q <= '9')
					q++;
			}
			if (q < end && (*q == 'e' || *q == 'E')) {
				real = 1;
				q++;
				if (q < end && (*q == '+' || *q == '-'))
					q++;
				if (q == end || *q < '0' || *q > '9')
					goto no;
				while (q < end && *q >= '0' && *q <= '9')
					q++;
			}
			if (k == dim || digits > 15)
				goto no;
			double d;
			if (!real) {
				d = neg ? -(double)iv : (double)iv; /* exact: below 2^53 */
			} else if (b->pre.image) {
				goto no;
			} else {
				char num[64];
				if ((size_t)(q - p) >= sizeof(num))
					goto no;
				memcpy(num, p, (size_t)(q - p));
				num[q - p] = 0;
				d = strtod(num, NULL);
			}
			if (b->pre.image ? (neg || d > 255)
			                 : (!isfinite(d) || fabs(d) > 3.4028234663852886e38))
				goto no;
			raw[k++] = (float)d;
			p = q;
			WS();
		} while (p < end && *p == ',' && ++p);
		EXPECT(']');
		if (k != dim || rows == sv->max_batch)
			goto no;
		if (rows == cap) {
			cap = cap ? 2 * cap : 4;
			if (cap > sv->max_batch)
				cap = sv->max_batch;
			buf = realloc(buf, cap * dim * sizeof(float));
			if (!buf)
				goto no;
		}
		tf_bundle_preprocess(b, raw, buf + rows * dim);
		rows++;
		WS();
	} while (p < end && *p == ',' && ++p);
	EXPECT(']');
	EXPECT('}');
	WS();
	if (p != end)
		goto no;
#undef EXPECT
#undef WS
	*x = buf;
	*n = rows;
	return 1;
no:
	free(buf);
	return 0;
}

/* The version's probabilities for the n rows of x, new; NULL with a 500 in rs when one is not
 * a finite number: the version is broken (JSON has no NaN; its rollout policy counts the
 * failure), not the request. */
static float *run_model(const struct entry *e, const float *x, size_t n, struct tf_web_resp *rs)
{
	const struct tf_bundle *b = e->b;
	size_t C = tf_mlp_outputs(&b->mlp);
	float *p = tf_xmalloc(n * C * sizeof(float));
	tf_bundle_predict(b, x, n, p, 1);
	for (size_t i = 0; i < n * C; i++)
		if (!isfinite(p[i])) {
			serving_error(
			    rs, 500,
			    "version %lld of model '%s' gave a value that is not a finite "
			    "number for instance %zu (a broken model)",
			    (long long)e->version, e->model, i / C);
			free(p);
			return NULL;
		}
	return p;
}

void tf_serve_h_predict(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	double t0 = tf_now_monotonic();
	struct entry *e = serve_entry(rq, rs, 1);
	if (!e)
		return;
	const struct tf_bundle *b = e->b;
	float *x = NULL;
	size_t n = 0;
	int columnar = 0;
	char err[1024];
	json_t *body = NULL;
	int ok = rq->body && fast_instances(tf_web_serving(rq->srv), b, rq->body,
	                                    rq->body + rq->body_len, &x, &n);
	if (!ok && (body = body_json(rq, rs))) {
		ok = !tfs_inputs(tf_web_serving(rq->srv), b, body, &x, &n, &columnar, err,
		                 sizeof(err));
		if (!ok)
			serving_error(rs, 400, "%s", err);
	}
	float *p = ok ? run_model(e, x, n, rs) : NULL;
	if (p) {
		size_t C = tf_mlp_outputs(&b->mlp);
		struct tf_buf o = {0};
		tf_buf_printf(&o, "%s", columnar ? "{\"outputs\":[" : "{\"predictions\":[");
		for (size_t i = 0; i < n; i++) {
			tf_buf_append(&o, i ? ",[" : "[", i ? 2 : 1);
			put_floats(&o, p + i * C, C);
			tf_buf_append(&o, "]", 1);
		}
		tf_buf_append(&o, "]}", 2);
		tf_web_json_text(rs, &o);
		free(p);
	}
	free(x);
	json_decref(body);
	record(tf_web_serving(rq->srv), e, rs->status, t0);
	release(tf_web_serving(rq->srv), e);
}

#define MAX_ALIASED 64 /* versions listed by the status routes */

/* The distinct versions the aliases of `model` point at, ascending, into out[MAX_ALIASED]:
 * how many, or -ENOENT for a model the registry does not have (or cannot be read). */
static int aliased_versions(struct tf_serve *sv, struct tf_store *st, struct tf_web_req *rq,
                            const char *model, int64_t out[MAX_ALIASED])
{
	pthread_mutex_lock(&sv->lock);
	struct view *m = view_locked(sv, st, rq, model);
	int n = m && m->exists ? (int)view_aliased(m, out, MAX_ALIASED) : -ENOENT;
	pthread_mutex_unlock(&sv->lock);
	return n;
}

/* State and reason of (model, version), loading it when needed; with e, the entry is held
 * for the caller when AVAILABLE. */
static enum vstate version_state(struct tf_serve *sv, struct tf_store *st, struct tf_web_req *rq,
                                 const char *model, int64_t v, struct entry **e, char *why,
                                 size_t whylen)
{
	struct entry *got = NULL;
	pthread_mutex_lock(&sv->lock);
	struct view *m = view_locked(sv, st, rq, model);
	int rc;
	if (m && m->exists) {
		rc = acquire_in(sv, m, v, 0, &got, why, whylen);
	} else {
		pthread_mutex_unlock(&sv->lock);
		tf_errf(why, whylen, "model '%s' is not in the registry", model);
		rc = -ENOENT;
	}
	if (e)
		*e = got;
	else
		release(sv, got);
	return rc == -EAGAIN ? V_LOADING : rc ? V_UNAVAILABLE : V_AVAILABLE;
}

int tf_serve_warm(struct tf_serve *sv, struct tf_store *st, const char *model, char *err,
                  size_t errlen)
{
	int64_t vs[MAX_ALIASED];
	int n = aliased_versions(sv, st, NULL, model, vs), ok = 0;
	if (n < 0) {
		tf_errf(err, errlen, "no model '%s' in the registry", model);
		return -ENOENT;
	}
	for (int i = 0; i < n; i++) {
		char why[1024];
		ok += version_state(sv, st, NULL, model, vs[i], NULL, why, sizeof(why)) ==
		      V_AVAILABLE;
	}
	return ok;
}

void tf_serve_h_status(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	struct tf_serve *sv = tf_web_serving(rq->srv);
	const char *model = tf_web_param(rq, "name");
	int64_t vs[MAX_ALIASED];
	int nv = 1;
	if (tf_web_param(rq, "version") || tf_web_param(rq, "label")) { /* that version only */
		if (!pick_locked(rq, rs, 0, &vs[0], NULL))
			return;
		pthread_mutex_unlock(&sv->lock);
	} else {
		if (!model_view(rq, rs, model))
			return;
		pthread_mutex_unlock(&sv->lock);
		nv = aliased_versions(sv, NULL, rq, model, vs);
	}
	json_t *list = json_array();
	for (int i = 0; i < nv; i++) {
		char why[1024] = "";
		int64_t n = vs[i];
		struct entry *e = NULL;
		enum vstate st = version_state(sv, NULL, rq, model, n, &e, why, sizeof(why));
		char num[24];
		snprintf(num, sizeof(num), "%lld", (long long)n);
		json_t *one = json_pack("{s:s, s:s, s:{s:s, s:s}}", "version", num, "state",
		                        vstate_names[st], "status", "error_code",
		                        st == V_AVAILABLE ? "OK"
		                        : st == V_LOADING ? "UNAVAILABLE"
		                                          : "NOT_FOUND",
		                        "error_message", st == V_AVAILABLE ? "" : why);
		if (e)
			json_object_set_new(one, "tpuflow_stats", stats_json(sv, e));
		release(sv, e);
		json_array_append_new(list, one);
	}
	tf_web_json(rs, 200, json_pack("{s:o}", "model_version_status", list));
}

/* A TensorFlow TensorInfo of dtype and shape [-1, d]. */
static json_t *tensor_info(const char *name, const char *dtype, size_t d)
{
	char size[24];
	snprintf(size, sizeof(size), "%zu", d);
	return json_pack("{s:s, s:s, s:{s:[{s:s}, {s:s}]}}", "name", name, "dtype", dtype,
	                 "tensor_shape", "dim", "size", "-1", "size", size);
}

void tf_serve_h_metadata(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	struct entry *e = serve_entry(rq, rs, 0);
	if (!e)
		return;
	const struct tf_bundle *b = e->b;
	const char *iname = input_name(b);
	char ver[24];
	snprintf(ver, sizeof(ver), "%lld", (long long)e->version);
	json_t *inputs = json_object(), *outputs = json_object();
	json_object_set_new(
	    inputs, iname,
	    tensor_info(iname, b->pre.image ? "DT_UINT8" : "DT_FLOAT", b->mlp.size[0]));
	json_object_set_new(outputs, "probabilities",
	                    tensor_info("probabilities", "DT_FLOAT", tf_mlp_outputs(&b->mlp)));
	json_t *sigdef = json_pack("{s:{s:o, s:o, s:s}}", "serving_default", "inputs", inputs,
	                           "outputs", outputs, "method_name", "tensorflow/serving/predict");
	tf_web_json(rs, 200,
	            json_pack("{s:{s:s, s:s, s:s}, s:{s:{s:o}, s:O}}", "model_spec", "name",
	                      e->model, "signature_name", "", "version", ver, "metadata",
	                      "signature_def", "signature_def", sigdef, "tpuflow_signature",
	                      b->signature));
	release(tf_web_serving(rq->srv), e);
}

/* ---- Open Inference Protocol (KServe v2) ------------------------------------------------- */

void tf_serve_h_server(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	(void)rq;
	tf_web_json(
	    rs, 200,
	    json_pack("{s:s, s:s, s:[]}", "name", "tpuflow", "version", TF_VERSION, "extensions"));
}

void tf_serve_h_live(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	(void)rq;
	tf_web_json(rs, 200, json_pack("{s:b}", "live", 1));
}

void tf_serve_h_ready(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	struct tf_serve *sv = tf_web_serving(rq->srv);
	if (sv->only_model) { /* a serving host is ready when its production version is */
		int64_t v = 0;
		char why[1024] = "no 'production' alias";
		pthread_mutex_lock(&sv->lock);
		struct view *m = view_locked(sv, NULL, rq, sv->only_model);
		if (m && m->exists)
			v = view_alias(m, "production");
		pthread_mutex_unlock(&sv->lock);
		if (!v || version_state(sv, NULL, rq, sv->only_model, v, NULL, why, sizeof(why)) !=
		              V_AVAILABLE) {
			/* the Open Inference Protocol: 200 is true, a 4xx false */
			serving_error(rs, 400, "model '%s' is not ready: %s", sv->only_model, why);
			return;
		}
	}
	tf_web_json(rs, 200, json_pack("{s:b}", "ready", 1));
}

static const char *v2_datatype(const struct tf_bundle *b)
{
	return b->pre.image ? "UINT8" : "FP32";
}

void tf_serve_h_v2_model(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	struct entry *e = serve_entry(rq, rs, 0);
	if (!e)
		return;
	const struct tf_bundle *b = e->b;
	int64_t vs[MAX_ALIASED];
	int nv = aliased_versions(tf_web_serving(rq->srv), NULL, rq, e->model, vs);
	json_t *names = json_array();
	for (int i = 0; i < nv; i++) {
		char num[24];
		snprintf(num, sizeof(num), "%lld", (long long)vs[i]);
		json_array_append_new(names, json_string(num));
	}
	tf_web_json(rs, 200,
	            json_pack("{s:s, s:o, s:s, s:[{s:s, s:s, s:[i,I]}], s:[{s:s, s:s, s:[i,I]}]}",
	                      "name", e->model, "versions", names, "platform", "tpuflow-mlp",
	                      "inputs", "name", input_name(b), "datatype", v2_datatype(b), "shape",
	                      -1, (json_int_t)b->mlp.size[0], "outputs", "name", "probabilities",
	                      "datatype", "FP32", "shape", -1,
	                      (json_int_t)tf_mlp_outputs(&b->mlp)));
	release(tf_web_serving(rq->srv), e);
}

void tf_serve_h_v2_model_ready(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	struct entry *e = serve_entry(rq, rs, 0);
	if (!e) { /* not ready is a 4xx (the Open Inference Protocol's health APIs) */
		if (rs->status == 503)
			rs->status = 400;
		rs->retry_after = 0;
		return;
	}
	tf_web_json(rs, 200, json_pack("{s:s, s:b}", "name", e->model, "ready", 1));
	release(tf_web_serving(rq->srv), e);
}

/* The one input tensor of an inference request into *x (n x inputs, preprocessed). */
static int v2_inputs(struct tf_serve *sv, const struct tf_bundle *b, const json_t *body, float **x,
                     size_t *n, char *err, size_t errlen)
{
	const json_t *ins = json_object_get(body, "inputs");
	if (!json_is_array(ins) || json_array_size(ins) != 1) {
		tf_errf(err, errlen, "inputs: expected a list of one tensor, '%s'", input_name(b));
		return -EINVAL;
	}
	const json_t *t = json_array_get(ins, 0), *shape = json_object_get(t, "shape");
	const char *name = json_string_value(json_object_get(t, "name"));
	const char *dt = json_string_value(json_object_get(t, "datatype"));
	if (!name || strcmp(name, input_name(b))) {
		tf_errf(err, errlen, "inputs[0].name: the model's input is '%s'", input_name(b));
		return -EINVAL;
	}
	if (!dt || strcmp(dt, v2_datatype(b))) {
		tf_errf(err, errlen, "inputs[0].datatype: the model takes %s, not %s",
		        v2_datatype(b), dt ? dt : "(none)");
		return -EINVAL;
	}
	size_t dim = b->mlp.size[0], rank = json_array_size(shape);
	int ok = json_is_array(shape) && rank >= 2 && rank <= 3;
	size_t dims[3] = {0};
	for (size_t i = 0; ok && i < rank; i++) {
		json_int_t d = json_integer_value(json_array_get(shape, i));
		ok = json_is_integer(json_array_get(shape, i)) && d >= 0;
		dims[i] = (size_t)d;
	}
	if (ok)
		ok = rank == 2
		         ? dims[1] == dim
		         : b->rows && dims[1] == (size_t)b->rows && dims[2] == (size_t)b->cols;
	if (!ok) {
		if (b->rows)
			tf_errf(err, errlen, "inputs[0].shape: expected [N, %zu] or [N, %d, %d]",
			        dim, b->rows, b->cols);
		else
			tf_errf(err, errlen, "inputs[0].shape: expected [N, %zu]", dim);
		return -EINVAL;
	}
	*n = dims[0];
	float *buf = batch_alloc(sv, b, *n, "inputs[0].shape[0]", err, errlen);
	if (!buf)
		return -EINVAL;
	float *raw = tf_xmalloc(*n * dim * sizeof(float));
	size_t got = 0;
	struct input_ctx c = {b, b->pre.image, err, errlen};
	int rc = flatten(&c, json_object_get(t, "data"), raw, *n * dim, &got, "inputs[0].data");
	if (rc == -E2BIG || (!rc && got != *n * dim)) {
		tf_errf(err, errlen, "inputs[0].data: the shape says %zu values, got %s%zu",
		        *n * dim, rc ? "more than " : "", got);
		rc = -EINVAL;
	}
	for (size_t i = 0; !rc && i < *n; i++)
		tf_bundle_preprocess(b, raw + i * dim, buf + i * dim);
	free(raw);
	if (rc) {
		free(buf);
		return rc;
	}
	*x = buf;
	return 0;
}

void tf_serve_h_infer(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	double t0 = tf_now_monotonic();
	json_t *body = body_json(rq, rs);
	if (!body)
		return;
	struct entry *e = serve_entry(rq, rs, 1);
	if (!e) {
		json_decref(body);
		return;
	}
	const struct tf_bundle *b = e->b;
	float *x = NULL;
	size_t n = 0;
	char err[1024];
	float *p = NULL;
	if (v2_inputs(tf_web_serving(rq->srv), b, body, &x, &n, err, sizeof(err))) {
		serving_error(rs, 400, "%s", err);
	} else if ((p = run_model(e, x, n, rs))) {
		size_t C = tf_mlp_outputs(&b->mlp);
		struct tf_buf o = {0};
		tf_buf_printf(&o, "{\"model_name\":");
		tf_web_put_json_str(&o, e->model);
		tf_buf_printf(&o, ",\"model_version\":\"%lld\"", (long long)e->version);
		const char *id = json_string_value(json_object_get(body, "id"));
		if (id) {
			tf_buf_printf(&o, ",\"id\":");
			tf_web_put_json_str(&o, id);
		}
		tf_buf_printf(&o,
		              ",\"outputs\":[{\"name\":\"probabilities\",\"datatype\":\"FP32\","
		              "\"shape\":[%zu,%zu],\"data\":[",
		              n, C);
		put_floats(&o, p, n * C);
		tf_buf_printf(&o, "]}]}");
		tf_web_json_text(rs, &o);
		free(p);
	}
	free(x);
	json_decref(body);
	record(tf_web_serving(rq->srv), e, rs->status, t0);
	release(tf_web_serving(rq->srv), e);
}

/* ---- rollout policy -------------------------------------------------------------------- */

#define MAX_MOVES 8    /* deployments judged per tick */
#define SHARE_EVERY 1.0 /* seconds between two writes of this server's figures */

/* One decision of tf_serve_tick, written to the registry outside the lock. */
struct move {
	char model[72];
	char alias[72];
	int64_t dep_id, version;
	double share;      /* the canary's next share; 0: no canary (promotion or rollback) */
	char *rollout;     /* the policy carried to the next step (owned) */
	const char *event; /* the alert it raises (orchestrator/alerts.h); NULL: model_deployed */
	char reason[768];
	char figures[512];
};

/* A canary deployment to judge, copied out of its view under the lock: the figures of the
 * canary (c) and of the stable version (s) over the window, this server's and then, added,
 * the other serving processes'. */
struct judged {
	char model[72];
	char alias[72];
	int64_t dep_id, canary, stable;
	double pct;
	double dep_at; /* the deployment was made (wall) */
	struct tf_rollout rollout;
	char *rollout_text;
	struct fig c, s;
	int servers;     /* whose figures are in c and s */
	int unavailable; /* the canary cannot be loaded here, and why */
	char why[512];
};

/* The listed entry of (model, version), or NULL. Called with the lock held. */
static struct entry *entry_find_locked(struct tf_serve *sv, const char *model, int64_t v)
{
	struct entry *e = sv->list;
	while (e && (e->version != v || strcmp(e->model, model)))
		e = e->next;
	return e;
}

/* The decision on the canary of j by its figures and the stable version's, soaked seconds
 * after the deployment was made: 1 with *mv filled when the deployment moves. */
static int decide(const struct judged *j, double soaked, struct move *mv)
{
	const struct tf_rollout *r = &j->rollout;
	const struct fig *c = &j->c, *s = &j->s;
	uint64_t n = c->req, f = c->fail;
	if (n < (uint64_t)r->min_requests)
		return 0;
	double rate = (double)f / (double)n, p99 = fig_quantile(c, 0.99);
	/* the guard compares with the stable version once it too has enough answers */
	int guarded = r->max_error_rate_vs_production >= 0 || r->max_p99_ratio_vs_production > 0;
	int compared = guarded && s->req >= (uint64_t)r->min_requests;
	double srate = s->req ? (double)s->fail / (double)s->req : 0, sp99 = fig_quantile(s, 0.99);
	const char *down = j->unavailable ? "; it is UNAVAILABLE: " : "";
	memset(mv, 0, sizeof(*mv));
	snprintf(mv->model, sizeof(mv->model), "%s", j->model);
	snprintf(mv->alias, sizeof(mv->alias), "%s", j->alias);
	mv->dep_id = j->dep_id;
	snprintf(mv->figures, sizeof(mv->figures),
	         "{\"version\":%lld,\"share\":%.6g,\"requests\":%llu,\"failures\":%llu,"
	         "\"error_rate\":%.6g,\"p99_ms\":%.6g,\"window_s\":%.3f,\"servers\":%d,"
	         "\"production\":{\"version\":%lld,\"requests\":%llu,\"failures\":%llu,"
	         "\"error_rate\":%.6g,\"p99_ms\":%.6g}}",
	         (long long)j->canary, j->pct, (unsigned long long)n, (unsigned long long)f, rate,
	         p99, soaked, j->servers, (long long)j->stable, (unsigned long long)s->req,
	         (unsigned long long)s->fail, srate, sp99);
	mv->version = j->stable;
	mv->event = "model_rolled_back";
	if (rate > r->max_error_rate) {
		snprintf(mv->reason, sizeof(mv->reason),
		         "rollback: canary version %lld failed %llu of %llu requests (error rate %.3g "
		         "over the SLO of %g)%s%.400s",
		         (long long)j->canary, (unsigned long long)f, (unsigned long long)n, rate,
		         r->max_error_rate, down, j->unavailable ? j->why : "");
		return 1;
	}
	if (r->max_p99_ms > 0 && p99 > r->max_p99_ms) {
		snprintf(mv->reason, sizeof(mv->reason),
		         "rollback: canary version %lld p99 %.3f ms over the SLO of %g ms (%llu "
		         "requests)",
		         (long long)j->canary, p99, r->max_p99_ms, (unsigned long long)n);
		return 1;
	}
	if (compared && r->max_error_rate_vs_production >= 0 &&
	    rate - srate > r->max_error_rate_vs_production) {
		snprintf(mv->reason, sizeof(mv->reason),
		         "rollback: canary version %lld failed %llu of %llu requests (error rate "
		         "%.3g), production version %lld %llu of %llu (%.3g) in the same window: %.3g "
		         "more, over the guard of %g%s%.300s",
		         (long long)j->canary, (unsigned long long)f, (unsigned long long)n, rate,
		         (long long)j->stable, (unsigned long long)s->fail,
		         (unsigned long long)s->req, srate, rate - srate,
		         r->max_error_rate_vs_production, down, j->unavailable ? j->why : "");
		return 1;
	}
	if (compared && r->max_p99_ratio_vs_production > 0 && sp99 > 0 &&
	    p99 > r->max_p99_ratio_vs_production * sp99) {
		snprintf(mv->reason, sizeof(mv->reason),
		         "rollback: canary version %lld p99 %.3f ms is %.3gx production version "
		         "%lld's %.3f ms in the same window, over the guard of %gx (%llu and %llu "
		         "requests)",
		         (long long)j->canary, p99, p99 / sp99, (long long)j->stable, sp99,
		         r->max_p99_ratio_vs_production, (unsigned long long)n,
		         (unsigned long long)s->req);
		return 1;
	}
	if (soaked < r->soak_s || (guarded && !compared))
		return 0;
	mv->version = j->canary;
	mv->event = NULL;
	const char *vs = compared ? ", and against production's" : "";
	for (int i = 0; i < r->nsteps; i++)
		if (r->steps[i] > j->pct) {
			mv->share = r->steps[i];
			mv->rollout = tf_xstrdup(j->rollout_text);
			snprintf(mv->reason, sizeof(mv->reason),
			         "canary version %lld %g%% -> %g%%: %llu requests within the SLOs%s "
			         "for %.1f s",
			         (long long)j->canary, j->pct, mv->share, (unsigned long long)n, vs,
			         soaked);
			return 1;
		}
	mv->event = "model_promoted";
	snprintf(mv->reason, sizeof(mv->reason),
	         "promoted: canary version %lld served %llu requests within the SLOs%s at %g%% for "
	         "%.1f s",
	         (long long)j->canary, (unsigned long long)n, vs, j->pct, soaked);
	return 1;
}

/* This server's window on the canary deployment d of view m: 1 with *j filled (figures since
 * the window began), 0 when it begins now (on first sight of the deployment, or again when
 * either version's counts started over). Called with the lock held. */
static int window_locked(struct tf_serve *sv, const struct view *m, struct dep *d, double now,
                         struct judged *j)
{
	struct entry *e = entry_find_locked(sv, m->model, d->canary);
	struct entry *es = entry_find_locked(sv, m->model, d->stable);
	struct fig *c = &j->c, *s = &j->s;
	fig_read(e, c);
	fig_read(es, s);
	if (!d->base_canary || fig_since(c, d->base_canary) || fig_since(s, d->base_stable)) {
		if (!d->base_canary) {
			d->base_canary = tf_xmalloc(sizeof(struct fig));
			d->base_stable = tf_xmalloc(sizeof(struct fig));
		}
		fig_read(e, d->base_canary); /* first sight, or reloaded: a new window */
		fig_read(es, d->base_stable);
		d->base_at = now;
		return 0;
	}
	snprintf(j->model, sizeof(j->model), "%s", m->model);
	snprintf(j->alias, sizeof(j->alias), "%s", d->alias);
	j->dep_id = d->id;
	j->canary = d->canary;
	j->stable = d->stable;
	j->pct = d->canary_pct;
	j->dep_at = d->at;
	j->rollout = d->rollout;
	j->rollout_text = tf_xstrdup(d->rollout_text);
	j->servers = 1;
	j->unavailable = e && e->state == V_UNAVAILABLE;
	snprintf(j->why, sizeof(j->why), "%s", j->unavailable ? e->reason : "");
	return 1;
}

/* {requests, failures, hist: [[bucket, count], ...]} of f, as JSON text (caller frees). */
static char *fig_text(const struct fig *f)
{
	json_t *h = json_array();
	for (int i = 0; i < LAT_BUCKETS; i++)
		if (f->hist[i])
			json_array_append_new(h, json_pack("[i,I]", i, (json_int_t)f->hist[i]));
	json_t *o = json_pack("{s:I, s:I, s:o}", "requests", (json_int_t)f->req, "failures",
	                      (json_int_t)f->fail, "hist", h);
	char *t = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	return t;
}

/* Adds the figures of fig_text's JSON j to f; -EINVAL (f unchanged) when j is not that. */
static int fig_add(struct fig *f, const json_t *j)
{
	struct fig x = {0};
	const json_t *req = json_object_get(j, "requests"), *fail = json_object_get(j, "failures");
	const json_t *h = json_object_get(j, "hist"), *pair;
	size_t i;
	if (!json_is_integer(req) || !json_is_integer(fail) || !json_is_array(h) ||
	    json_integer_value(req) < 0 || json_integer_value(fail) < 0)
		return -EINVAL;
	x.req = (uint64_t)json_integer_value(req);
	x.fail = (uint64_t)json_integer_value(fail);
	json_array_foreach(h, i, pair)
	{
		json_int_t b = json_integer_value(json_array_get(pair, 0));
		json_int_t n = json_integer_value(json_array_get(pair, 1));
		if (json_array_size(pair) != 2 || b < 0 || b >= LAT_BUCKETS || n < 0)
			return -EINVAL;
		x.hist[b] += (uint64_t)n;
	}
	f->req += x.req;
	f->fail += x.fail;
	for (int k = 0; k < LAT_BUCKETS; k++)
		f->hist[k] += x.hist[k];
	return 0;
}

/* Writes this server's figures of j for the other serving processes. */
static void figures_share(struct tf_serve *sv, struct tf_store *st, const struct judged *j)
{
	char *c = fig_text(&j->c), *s = fig_text(&j->s);
	if (tf_registry_figures_put(st, j->dep_id, sv->server, c, s, tf_now_wall()))
		tf_warn("model %s: cannot share the rollout's figures: %s", j->model,
		        tf_store_errmsg(st));
	free(c);
	free(s);
}

/* Adds the figures the other serving processes shared to j (none when they cannot be read:
 * j is then judged on this server's alone). */
static void figures_gather(struct tf_serve *sv, struct tf_store *st, struct judged *j)
{
	json_t *rows = NULL, *row;
	size_t i;
	if (tf_registry_figures_get(st, j->dep_id, sv->server, &rows))
		return;
	json_array_foreach(rows, i, row)
	{
		struct fig c = j->c, s = j->s;
		if (fig_add(&j->c, json_object_get(row, "canary")) ||
		    fig_add(&j->s, json_object_get(row, "stable"))) {
			j->c = c; /* a row not in fig_text's form: not counted */
			j->s = s;
			continue;
		}
		j->servers++;
	}
	json_decref(rows);
}

void tf_serve_tick(struct tf_serve *sv, struct tf_store *st)
{
	struct judged *js = tf_xcalloc(MAX_MOVES, sizeof(*js));
	int n = 0;
	double now = tf_now_monotonic();
	pthread_mutex_lock(&sv->lock);
	for (struct view *m = sv->views; m && n < MAX_MOVES; m = m->next)
		for (size_t i = 0; m->exists && i < m->ndeps && n < MAX_MOVES; i++)
			if (m->deps[i].canary && m->deps[i].has_rollout &&
			    window_locked(sv, m, &m->deps[i], now, &js[n]))
				n++;
	pthread_mutex_unlock(&sv->lock);
	int share = n && now - sv->shared_at >= SHARE_EVERY;
	if (share)
		sv->shared_at = now;
	for (int i = 0; i < n; i++) {
		struct move mv;
		struct judged own = js[i];
		figures_gather(sv, st, &js[i]);
		if (!decide(&js[i], tf_now_wall() - js[i].dep_at, &mv)) {
			if (share)
				figures_share(sv, st, &own);
		} else {
			struct tf_deploy_spec d = {.model = mv.model,
			                           .alias = mv.alias,
			                           .version = mv.version,
			                           .canary_percent = mv.share,
			                           .rollout = mv.rollout,
			                           .reason = mv.reason,
			                           .figures = mv.figures,
			                           .expect_id = mv.dep_id,
			                           .event = mv.event};
			int rc = tf_registry_deploy(st, &d, NULL);
			if (rc == 0)
				tf_info("model %s: %s", mv.model, mv.reason);
			else if (rc != -ESTALE) /* moved meanwhile (by hand, or another server) */
				tf_warn("model %s: cannot record '%s': %s", mv.model, mv.reason,
				        tf_store_errmsg(st));
			free(mv.rollout);
		}
		free(js[i].rollout_text);
	}
	free(js);
}

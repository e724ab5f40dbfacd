/* serve.c — owns model serving's cache (web/serve.h, serve_int.h): the loaded versions of the
 * models (fetched from the object store once, verified, shared by reference count, the least
 * recently used evicted, an unloadable one UNAVAILABLE with its reason and tried again after
 * a while) and each model's registry view (versions, aliases, active deployments and their
 * rollout windows), read again only when the store's change generation moves, so a request
 * reads no database. The other files of serving: serve_input.c (request bodies into model
 * inputs), serve_proto.c (the routes of both protocols), serve_rollout.c (figures, rollout
 * judgement).
 */
#include "web/serve_int.h"

#define TF_LOG_TAG "serve"
#include "common/common.h"
#include "common/log.h"
#include "storage/objstore.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct tf_serve *tf_serve_new(const char *home, const char *only_model, size_t max_batch)
{
	struct tf_serve *sv = tf_xcalloc(1, sizeof(*sv));
	sv->home = tf_xstrdup(home);
	sv->only_model = only_model ? tf_xstrdup(only_model) : NULL;
	sv->max_batch = max_batch ? max_batch : TF_SERVE_MAX_BATCH;
	pthread_mutex_init(&sv->lock, NULL);
	pthread_cond_init(&sv->loaded, NULL);
	pthread_cond_init(&sv->refreshed, NULL);
	pthread_mutex_init(&sv->shadow_lock, NULL);
	pthread_cond_init(&sv->shadow_cond, NULL);
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
	tf_serve_shadow_stop(sv); /* its comparisons hold entries */
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
	pthread_mutex_destroy(&sv->shadow_lock);
	pthread_cond_destroy(&sv->shadow_cond);
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

void tf_serve_release(struct entry *e)
{
	if (e)
		entry_put(e);
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

/* The listed entry of (model, version), or NULL. Called with the lock held. */
struct entry *tf_serve_entry_find_locked(struct tf_serve *sv, const char *model, int64_t v)
{
	struct entry *e = sv->list;
	while (e && (e->version != v || strcmp(e->model, model)))
		e = e->next;
	return e;
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
				tf_warn(
				    "model %s: the rollout policy of deployment %lld is not used: "
				    "%s",
				    model, (long long)d->id, why);
		}
		json_decref(dep);
		dep = NULL;
	}
	return m;
}

/* The active deployment of `alias` in m, or NULL. */
struct dep *tf_serve_view_dep(const struct view *m, const char *alias)
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
struct view *tf_serve_view_locked(struct tf_serve *sv, struct tf_store *st, struct tf_web_req *rq,
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
		for (size_t i = 0; i < fresh->ndeps;
		     i++) { /* the same deployment's window goes on */
			struct dep *d = &fresh->deps[i], *was = tf_serve_view_dep(old, d->alias);
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
ssize_t tf_serve_view_version(const struct view *m, int64_t v)
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
int64_t tf_serve_view_alias(const struct view *m, const char *alias)
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

/* The entry of (model, version), held for the caller (tf_serve_release), loading its bundle
 * (key) on first use; called with sv->lock held, returns with it released. -ENOENT when the
 * version cannot be loaded (reason in err), -EAGAIN when another request has been loading
 * it for too long. */
static int acquire_locked(struct tf_serve *sv, const char *model, int64_t v, const char *key,
                          int count, struct entry **out, char *err, size_t errlen)
{
	double now = tf_now_monotonic();
	struct entry *e = tf_serve_entry_find_locked(sv, model, v);
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
		tf_serve_record(e, 503, now);
	if (rc)
		entry_put(e);
	else
		*out = e;
	return rc;
}

/* acquire_locked for a version of the view m (lock held, released on return); count: a
 * prediction request, counted as a failure of the version when it cannot answer. */
int tf_serve_acquire_in(struct tf_serve *sv, const struct view *m, int64_t v, int count,
                        struct entry **out, char *err, size_t errlen)
{
	ssize_t i = tf_serve_view_version(m, v);
	return acquire_locked(sv, m->model, v, i < 0 ? NULL : m->bundles[i], count, out, err,
	                      errlen);
}

/* The distinct versions the aliases of `model` point at, ascending, into out[MAX_ALIASED]:
 * how many, or -ENOENT for a model the registry does not have (or cannot be read). */
int tf_serve_aliased_versions(struct tf_serve *sv, struct tf_store *st, struct tf_web_req *rq,
                              const char *model, int64_t out[MAX_ALIASED])
{
	pthread_mutex_lock(&sv->lock);
	struct view *m = tf_serve_view_locked(sv, st, rq, model);
	int n = m && m->exists ? (int)view_aliased(m, out, MAX_ALIASED) : -ENOENT;
	pthread_mutex_unlock(&sv->lock);
	return n;
}

/* State and reason of (model, version), loading it when needed; with e, the entry is held
 * for the caller when AVAILABLE. */
enum vstate tf_serve_version_state(struct tf_serve *sv, struct tf_store *st, struct tf_web_req *rq,
                                   const char *model, int64_t v, struct entry **e, char *why,
                                   size_t whylen)
{
	struct entry *got = NULL;
	pthread_mutex_lock(&sv->lock);
	struct view *m = tf_serve_view_locked(sv, st, rq, model);
	int rc;
	if (m && m->exists) {
		rc = tf_serve_acquire_in(sv, m, v, 0, &got, why, whylen);
	} else {
		pthread_mutex_unlock(&sv->lock);
		tf_errf(why, whylen, "model '%s' is not in the registry", model);
		rc = -ENOENT;
	}
	if (e)
		*e = got;
	else
		tf_serve_release(got);
	return rc == -EAGAIN ? V_LOADING : rc ? V_UNAVAILABLE : V_AVAILABLE;
}

/* Whether alias a of m names the canary of one of m's deployments ("canary" for production's,
 * ALIAS-canary for another alias's) while it points at that canary. */
static int canary_label(const struct view *m, size_t a)
{
	for (size_t i = 0; i < m->ndeps; i++) {
		const struct dep *d = &m->deps[i];
		if (!d->canary || m->aliased[a] != d->canary)
			continue;
		size_t n = strlen(d->alias);
		const char *name = m->aliases[a];
		if (!strcmp(d->alias, "production") ? !strcmp(name, "canary")
		                                    : !strncmp(name, d->alias, n) &&
		                                          !strcmp(name + n, "-canary"))
			return 1;
	}
	return 0;
}

int tf_serve_model_ready(struct tf_serve *sv, struct tf_web_req *rq, const char *model,
                         char *why, size_t whylen)
{
	char *labels[MAX_ALIASED];
	int64_t vs[MAX_ALIASED];
	size_t n = 0;
	pthread_mutex_lock(&sv->lock);
	struct view *m = tf_serve_view_locked(sv, NULL, rq, model);
	int exists = m && m->exists;
	int64_t production = exists ? tf_serve_view_alias(m, "production") : 0;
	if (production) { /* what the bare name answers: the other labels do not hold it back */
		labels[n] = tf_xstrdup("production");
		vs[n++] = production;
	}
	for (size_t a = 0; exists && !production && a < m->naliases && n < MAX_ALIASED; a++)
		if (!canary_label(m, a)) {
			labels[n] = tf_xstrdup(m->aliases[a]);
			vs[n++] = m->aliased[a];
		}
	pthread_mutex_unlock(&sv->lock);
	int ready = exists && n > 0;
	if (!m)
		tf_errf(why, whylen, "the registry cannot be read");
	else if (!exists)
		tf_errf(why, whylen, "no model '%s' in the registry", model);
	else if (!n)
		tf_errf(why, whylen, "model '%s' has no alias: no label is served", model);
	for (size_t i = 0; i < n; i++) {
		char reason[1024];
		if (ready && tf_serve_version_state(sv, NULL, rq, model, vs[i], NULL, reason,
		                                    sizeof(reason)) != V_AVAILABLE) {
			tf_errf(why, whylen, "label '%s': %s", labels[i], reason);
			ready = 0;
		}
		free(labels[i]);
	}
	return ready;
}

int tf_serve_warm(struct tf_serve *sv, struct tf_store *st, const char *model, char *err,
                  size_t errlen)
{
	int64_t vs[MAX_ALIASED];
	int n = tf_serve_aliased_versions(sv, st, NULL, model, vs), ok = 0;
	if (n < 0) {
		tf_errf(err, errlen, "no model '%s' in the registry", model);
		return -ENOENT;
	}
	for (int i = 0; i < n; i++) {
		char why[1024];
		ok += tf_serve_version_state(sv, st, NULL, model, vs[i], NULL, why, sizeof(why)) ==
		      V_AVAILABLE;
	}
	return ok;
}

/* serve_rollout.c — owns each served version's figures and the rollout policies' judgement
 * (docs/serving.md, "Rollout policy"): the counts, the ring of recent latencies and the
 * latency histogram kept per version with atomic operations, the windows of a canary and of
 * its stable version since a deployment began, the figures shared with the other serving
 * processes through the registry (serving_figures), and the decision (a rollback, the next
 * share, a promotion) written to the registry with a compare-and-set.
 */
#include "web/serve_int.h"

#define TF_LOG_TAG "serve"
#include "common/common.h"
#include "common/log.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
void tf_serve_record(struct entry *e, int status, double t0)
{
	double s = tf_now_monotonic() - t0;
	float ms = (float)(s * 1000);
	atomic_fetch_add_explicit(&e->lat_ns, (uint64_t)(s * 1e9), memory_order_relaxed);
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
	// cppcheck-suppress uninitvar ; lat[0..k) was written just above
	qsort(lat, k, sizeof(float), cmp_float);
	return k;
}

/* {requests, errors, failures, error_rate, p50_ms, p99_ms[, shadow: {rows, differ, pending}]}
 * of e
 * (percentiles of the last LAT_RING answers). */
json_t *tf_serve_stats_json(struct entry *e)
{
	float lat[LAT_RING];
	uint64_t n = atomic_load_explicit(&e->requests, memory_order_relaxed);
	uint64_t errs = atomic_load_explicit(&e->errors, memory_order_relaxed);
	uint64_t fails = atomic_load_explicit(&e->failures, memory_order_relaxed);
	size_t k = latencies(e, lat);
	json_t *j =
	    json_pack("{s:I, s:I, s:I, s:f, s:f, s:f}", "requests", (json_int_t)n, "errors",
	              (json_int_t)errs, "failures", (json_int_t)fails, "error_rate",
	              n ? (double)errs / (double)n : 0.0, "p50_ms", k ? (double)lat[k / 2] : 0.0,
	              "p99_ms", k ? (double)lat[(k * 99) / 100] : 0.0);
	/* a canary's shadow comparison: pending read first, so that once it reads 0 the rows
	 * and differ read after it count every comparison made (shadow_run releases it last) */
	uint64_t pending = atomic_load_explicit(&e->shadow_pending, memory_order_acquire);
	uint64_t rows = atomic_load_explicit(&e->shadow_rows, memory_order_relaxed);
	if (rows || pending)
		json_object_set_new(j, "shadow",
		                    json_pack("{s:I, s:I, s:I}", "rows", (json_int_t)rows, "differ",
		                              (json_int_t)atomic_load_explicit(
		                                  &e->shadow_differ, memory_order_relaxed),
		                              "pending", (json_int_t)pending));
	return j;
}

void tf_serve_metrics(struct tf_serve *sv, FILE *f)
{
	/* model names are registry names (letters, digits, '.', '_', '-'): no label escapes */
	static const struct {
		const char *name, *help;
		size_t at;
	} counters[] = {
	    {"tpuflow_serving_requests_total",
	     "Answers of the prediction routes, by the version that gave them.",
	     offsetof(struct entry, requests)},
	    {"tpuflow_serving_errors_total", "Those answers that were not 200.",
	     offsetof(struct entry, errors)},
	    {"tpuflow_serving_failures_total",
	     "Answers the version could not give (5xx, or routed to it while it could not be "
	     "loaded).",
	     offsetof(struct entry, failures)}};
	pthread_mutex_lock(&sv->lock);
	for (size_t c = 0; c < TF_ARRAY_LEN(counters); c++) {
		fprintf(f, "# HELP %s %s\n# TYPE %s counter\n", counters[c].name, counters[c].help,
		        counters[c].name);
		for (struct entry *e = sv->list; e; e = e->next)
			fprintf(f, "%s{model=\"%s\",version=\"%lld\"} %llu\n", counters[c].name,
			        e->model, (long long)e->version,
			        (unsigned long long)atomic_load_explicit(
			            (_Atomic uint64_t *)((char *)e + counters[c].at),
			            memory_order_relaxed));
	}
	fputs("# HELP tpuflow_serving_request_duration_seconds Time from a prediction handler's "
	      "start to its answer, by version.\n"
	      "# TYPE tpuflow_serving_request_duration_seconds histogram\n",
	      f);
	for (struct entry *e = sv->list; e; e = e->next) {
		uint64_t cum = 0;
		int i = 0;
		/* the latency buckets' bounds at the powers of two from 2^4 us (16 us) to 2^25 us
		 * (33.554432 s), every eighth of lat_bucket's (docs/api.md lists them) */
		for (int k = 4; k <= 25; k++) {
			for (; i <= 8 * k; i++)
				cum += atomic_load_explicit(&e->hist[i], memory_order_relaxed);
			fprintf(f,
			        "tpuflow_serving_request_duration_seconds_bucket{model=\"%s\","
			        "version=\"%lld\",le=\"%.9g\"} %llu\n",
			        e->model, (long long)e->version, ldexp(1e-6, k),
			        (unsigned long long)cum);
		}
		for (; i < LAT_BUCKETS; i++)
			cum += atomic_load_explicit(&e->hist[i], memory_order_relaxed);
		fprintf(
		    f,
		    "tpuflow_serving_request_duration_seconds_bucket{model=\"%s\",version="
		    "\"%lld\",le=\"+Inf\"} %llu\n"
		    "tpuflow_serving_request_duration_seconds_sum{model=\"%s\",version=\"%lld\"} "
		    "%.9f\n"
		    "tpuflow_serving_request_duration_seconds_count{model=\"%s\",version="
		    "\"%lld\"} %llu\n",
		    e->model, (long long)e->version, (unsigned long long)cum, e->model,
		    (long long)e->version,
		    (double)atomic_load_explicit(&e->lat_ns, memory_order_relaxed) * 1e-9, e->model,
		    (long long)e->version, (unsigned long long)cum);
	}
	pthread_mutex_unlock(&sv->lock);
}

/* e's figures now (zero for NULL). */
static void fig_read(struct entry *e, struct fig *f)
{
	memset(f, 0, sizeof(*f));
	if (!e)
		return;
	f->req = atomic_load_explicit(&e->requests, memory_order_relaxed);
	f->fail = atomic_load_explicit(&e->failures, memory_order_relaxed);
	f->rows = atomic_load_explicit(&e->shadow_rows, memory_order_relaxed);
	f->differ = atomic_load_explicit(&e->shadow_differ, memory_order_relaxed);
	for (int i = 0; i < LAT_BUCKETS; i++)
		f->hist[i] = atomic_load_explicit(&e->hist[i], memory_order_relaxed);
}

/* f minus base (the window since base): 0, or -1 when f is older than base (the version was
 * loaded again: its counts started over). */
static int fig_since(struct fig *f, const struct fig *base)
{
	if (f->req < base->req || f->fail < base->fail || f->rows < base->rows ||
	    f->differ < base->differ)
		return -1;
	f->req -= base->req;
	f->fail -= base->fail;
	f->rows -= base->rows;
	f->differ -= base->differ;
	for (int i = 0; i < LAT_BUCKETS; i++) {
		if (f->hist[i] < base->hist[i])
			return -1;
		f->hist[i] -= base->hist[i];
	}
	/* the counters are read one by one while answers are counted: an answer counted in
	 * requests but not yet in failures when the window began is a failure without its
	 * request inside the window (so too a shadowed row), which a rate must not show */
	if (f->fail > f->req)
		f->fail = f->req;
	if (f->differ > f->rows)
		f->differ = f->rows;
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

/* ---- rollout policy -------------------------------------------------------------------- */

#define MAX_MOVES 8     /* deployments judged per tick */
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
	char figures[768];
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
	/* the shadow comparison, once production has answered min_requests of its rows */
	int shadowed = r->max_disagreement_vs_production >= 0;
	int agreed = shadowed && c->rows >= (uint64_t)r->min_requests;
	double dis = c->rows ? (double)c->differ / (double)c->rows : 0;
	char shadow[160] = "";
	if (shadowed)
		snprintf(shadow, sizeof(shadow),
		         ",\"shadow\":{\"rows\":%llu,\"differ\":%llu,\"disagreement\":%.6g}",
		         (unsigned long long)c->rows, (unsigned long long)c->differ, dis);
	const char *down = j->unavailable ? "; it is UNAVAILABLE: " : "";
	memset(mv, 0, sizeof(*mv));
	snprintf(mv->model, sizeof(mv->model), "%s", j->model);
	snprintf(mv->alias, sizeof(mv->alias), "%s", j->alias);
	mv->dep_id = j->dep_id;
	snprintf(mv->figures, sizeof(mv->figures),
	         "{\"version\":%lld,\"share\":%.6g,\"requests\":%llu,\"failures\":%llu,"
	         "\"error_rate\":%.6g,\"p99_ms\":%.6g,\"window_s\":%.3f,\"servers\":%d%s,"
	         "\"production\":{\"version\":%lld,\"requests\":%llu,\"failures\":%llu,"
	         "\"error_rate\":%.6g,\"p99_ms\":%.6g}}",
	         (long long)j->canary, j->pct, (unsigned long long)n, (unsigned long long)f, rate,
	         p99, soaked, j->servers, shadow, (long long)j->stable, (unsigned long long)s->req,
	         (unsigned long long)s->fail, srate, sp99);
	mv->version = j->stable;
	mv->event = "model_rolled_back";
	if (rate > r->max_error_rate) {
		snprintf(
		    mv->reason, sizeof(mv->reason),
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
		snprintf(
		    mv->reason, sizeof(mv->reason),
		    "rollback: canary version %lld failed %llu of %llu requests (error rate "
		    "%.3g), production version %lld %llu of %llu (%.3g) in the same window: %.3g "
		    "more, over the guard of %g%s%.300s",
		    (long long)j->canary, (unsigned long long)f, (unsigned long long)n, rate,
		    (long long)j->stable, (unsigned long long)s->fail, (unsigned long long)s->req,
		    srate, rate - srate, r->max_error_rate_vs_production, down,
		    j->unavailable ? j->why : "");
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
	if (agreed && dis > r->max_disagreement_vs_production) {
		char rule[96] = "the predicted class";
		if (r->shadow_tolerance > 0)
			snprintf(rule, sizeof(rule),
			         "the predicted class, or an output by more than %g",
			         r->shadow_tolerance);
		snprintf(mv->reason, sizeof(mv->reason),
		         "rollback: canary version %lld disagreed with production version %lld on "
		         "%llu of %llu shadowed rows (%.3g) in the same window, over the guard of "
		         "%g (a row differs in %s)",
		         (long long)j->canary, (long long)j->stable, (unsigned long long)c->differ,
		         (unsigned long long)c->rows, dis, r->max_disagreement_vs_production, rule);
		return 1;
	}
	if (soaked < r->soak_s || (guarded && !compared) || (shadowed && !agreed))
		return 0;
	mv->version = j->canary;
	mv->event = NULL;
	const char *vs = compared || agreed ? ", and against production's" : "";
	for (int i = 0; i < r->nsteps; i++)
		if (r->steps[i] > j->pct) {
			mv->share = r->steps[i];
			mv->rollout = tf_xstrdup(j->rollout_text);
			snprintf(
			    mv->reason, sizeof(mv->reason),
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
	struct entry *e = tf_serve_entry_find_locked(sv, m->model, d->canary);
	struct entry *es = tf_serve_entry_find_locked(sv, m->model, d->stable);
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

/* {requests, failures, shadow_rows, shadow_differ, hist: [[bucket, count], ...]} of f, as
 * JSON text (caller frees). */
static char *fig_text(const struct fig *f)
{
	json_t *h = json_array();
	for (int i = 0; i < LAT_BUCKETS; i++)
		if (f->hist[i])
			json_array_append_new(h, json_pack("[i,I]", i, (json_int_t)f->hist[i]));
	json_t *o = json_pack("{s:I, s:I, s:I, s:I, s:o}", "requests", (json_int_t)f->req,
	                      "failures", (json_int_t)f->fail, "shadow_rows", (json_int_t)f->rows,
	                      "shadow_differ", (json_int_t)f->differ, "hist", h);
	char *t = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	return t;
}

/* Adds the figures of fig_text's JSON j to f; -EINVAL (f unchanged) when j is not that (the
 * shadow's counts may be absent: a server that wrote none). */
static int fig_add(struct fig *f, const json_t *j)
{
	struct fig x = {0};
	const json_t *req = json_object_get(j, "requests"), *fail = json_object_get(j, "failures");
	const json_t *rows = json_object_get(j, "shadow_rows"),
	             *differ = json_object_get(j, "shadow_differ");
	const json_t *h = json_object_get(j, "hist"), *pair;
	size_t i;
	if (!json_is_integer(req) || !json_is_integer(fail) || !json_is_array(h) ||
	    json_integer_value(req) < 0 || json_integer_value(fail) < 0 ||
	    (rows && (!json_is_integer(rows) || json_integer_value(rows) < 0)) ||
	    (differ && (!json_is_integer(differ) || json_integer_value(differ) < 0 ||
	                json_integer_value(differ) > json_integer_value(rows))))
		return -EINVAL;
	x.req = (uint64_t)json_integer_value(req);
	x.fail = (uint64_t)json_integer_value(fail);
	x.rows = (uint64_t)json_integer_value(rows); /* 0 when absent */
	x.differ = (uint64_t)json_integer_value(differ);
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
	f->rows += x.rows;
	f->differ += x.differ;
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

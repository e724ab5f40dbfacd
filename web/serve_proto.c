/* serve_proto.c — owns the serving routes (web/serve.h): TensorFlow Serving REST and the Open
 * Inference Protocol (KServe v2) — which version a request reaches (a version, a label, or
 * the production alias with its deployment's canary share, sticky per X-Request-Key), the
 * predictions, status and metadata answers and the protocols' errors, and the shadow
 * comparison (production answering a canary's request too, on a thread of its own once the
 * canary's answer is made).
 *
 * Every float is printed with 9 significant digits, enough for a float32 to read back to the
 * same bits: predictions over HTTP are bit-identical to `tpuflow predict`'s.
 */
#include "web/serve_int.h"

#include "common/common.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A version's state as TensorFlow Serving's model status names it (get_model_status.proto's
 * ModelVersionStatus.State): a version that cannot be loaded has reached END, with the error
 * in its status, as one whose load failed there; UNAVAILABLE is no value of that enum, and a
 * client reading the answer into the proto refuses it. */
static const char *const vstate_names[] = {"LOADING", "AVAILABLE", "END"};

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
 * are written by hand into a tf_buf, web/api.h); a value that is not finite as TensorFlow
 * Serving writes it (NaN, Infinity, -Infinity: only its answers have them, run_model). */
static void put_floats(struct tf_buf *b, const float *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (isfinite(p[i]))
			tf_buf_printf(b, i ? ",%.9g" : "%.9g", (double)p[i]);
		else
			tf_buf_printf(b, "%s%s", i ? "," : "",
			              isnan(p[i]) ? "NaN" : p[i] > 0 ? "Infinity" : "-Infinity");
	}
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
	struct view *m = tf_serve_view_locked(sv, NULL, rq, name);
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

/* A uniform number in [0, 100) from h (splitmix64's finaliser: every bit of h reaches the top
 * bits). */
static double point_of(uint64_t h)
{
	h ^= h >> 30;
	h *= 0xbf58476d1ce4e5b9ull;
	h ^= h >> 27;
	h *= 0x94d049bb133111ebull;
	h ^= h >> 31;
	return (double)(h >> 11) * 0x1.0p-53 * 100;
}

/* A uniform number in [0, 100) from a per-thread generator. */
static double random_point(void)
{
	static _Thread_local uint64_t rnd;
	if (!rnd)
		rnd = (uint64_t)(tf_now_monotonic() * 1e9) ^ (uint64_t)(uintptr_t)&rnd;
	return point_of(rnd += 0x9e3779b97f4a7c15ull);
}

/* A uniform number in [0, 100) from the request key (X-Request-Key: the same key, the same
 * side), else random_point. */
static double traffic_point(struct tf_web_req *rq)
{
	const char *key = tf_web_header(rq, "X-Request-Key");
	if (!key)
		return random_point();
	uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
	for (const unsigned char *p = (const unsigned char *)key; *p; p++)
		h = (h ^ *p) * 0x100000001b3ull;
	return point_of(h);
}

/* Where a request goes: the version v and, when the canary of the named alias's deployment
 * took it, the version the alias keeps (which answers if the canary cannot), and whether
 * production answers it too for the shadow comparison of the canary's rollout policy (with
 * the policy's tolerance). */
struct route {
	int64_t v;
	int64_t stable; /* 0: not the canary's */
	int shadow;
	double tolerance;
};

/* The version the request names (*to): {version}, {label}, or the production alias, of which
 * the canary of the alias's deployment takes its share when `split`. Returns the model's view
 * with sv->lock held, or NULL with the lock released and the error in rs. */
static struct view *pick_locked(struct tf_web_req *rq, struct tf_web_resp *rs, int split,
                                struct route *to)
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
	*to = (struct route){.v = n};
	if (ver) {
		if (tf_serve_view_version(m, n) >= 0)
			return m;
		pthread_mutex_unlock(
		    &tf_web_serving(rq->srv)->lock); /* version 0 too, as TF Serving */
		serving_error(rs, 404, "Servable not found: model '%s' has no version %lld", name,
		              n);
		return NULL;
	}
	to->v = label && !strcmp(label, "latest")
	            ? 0
	            : tf_serve_view_alias(m, label ? label : "production");
	if (!to->v) {
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
	const struct dep *d = split ? tf_serve_view_dep(m, label ? label : "production") : NULL;
	if (d && d->canary && d->canary_pct > 0 && traffic_point(rq) < d->canary_pct) {
		to->stable = to->v;
		to->v = d->canary;
		to->shadow = d->has_rollout && d->rollout.max_disagreement_vs_production >= 0 &&
		             random_point() < d->rollout.shadow_percent;
		to->tolerance = d->rollout.shadow_tolerance;
	}
	return m;
}

/* The request's entry (pick_locked, with the canary's share, into *to), held for the caller
 * (tf_serve_release); to may be NULL. predicting: a prediction request, counted by the version it
 * is routed to; a canary that cannot answer counts it as a failure (its rollout policy sees it) and
 * the stable version answers it (not shadowed then). On failure the error is in rs. */
static struct entry *serve_entry(struct tf_web_req *rq, struct tf_web_resp *rs, int predicting,
                                 struct route *to)
{
	struct tf_serve *sv = tf_web_serving(rq->srv);
	struct route own;
	if (!to)
		to = &own;
	struct view *m = pick_locked(rq, rs, 1, to);
	if (!m)
		return NULL;
	struct entry *e = NULL;
	char err[1024];
	int rc = tf_serve_acquire_in(sv, m, to->v, predicting, &e, err, sizeof(err));
	if (rc && to->stable) { /* the canary cannot answer: production does */
		to->shadow = 0;
		pthread_mutex_lock(&sv->lock);
		m = tf_serve_view_locked(sv, NULL, rq, tf_web_param(rq, "name"));
		if (m && m->exists)
			rc = tf_serve_acquire_in(sv, m, to->stable, predicting, &e, err,
			                         sizeof(err));
		else
			pthread_mutex_unlock(&sv->lock);
	}
	if (rc)
		serving_error(rs, rc == -EAGAIN ? 503 : 404, "%s", err);
	return e;
}

/* Parses the body as a JSON object; on failure the error is in rs. nonfinite: TensorFlow
 * Serving's JSON, whose bare NaN, Infinity and -Infinity are read as the strings
 * tf_serve_tfs_inputs takes for them (tried only when the body is not plain JSON, so a body
 * without them costs nothing more); else plain JSON, as the Open Inference Protocol's is. */
static json_t *body_json(struct tf_web_req *rq, struct tf_web_resp *rs, int nonfinite)
{
	json_error_t je;
	const char *text = rq->body ? rq->body : "";
	json_t *j = json_loadb(text, rq->body_len, JSON_REJECT_DUPLICATES, &je);
	size_t qlen = 0;
	char *quoted = j ? NULL : tf_serve_quote_nonfinite(text, rq->body_len, &qlen);
	if (quoted && nonfinite) {
		j = json_loadb(quoted, qlen, JSON_REJECT_DUPLICATES, &je);
		if (!j) /* its offsets are the quoted copy's */
			serving_error(rs, 400, "the body is not valid JSON: %s", je.text);
	} else if (quoted) {
		serving_error(rs, 400,
		              "the body is not valid JSON: NaN, Infinity and -Infinity are not JSON "
		              "numbers (this protocol's body is plain JSON; TensorFlow Serving's "
		              "/v1 routes take them)");
	} else if (!j) {
		serving_error(rs, 400, "the body is not valid JSON: %s at byte offset %d", je.text,
		              je.position);
	}
	free(quoted);
	if (j && !json_is_object(j)) {
		serving_error(rs, 400, "the body must be a JSON object");
		json_decref(j);
		return NULL;
	}
	return j;
}

/* Whether the dim values at x are all finite numbers. */
static int finite_row(const float *x, size_t dim)
{
	for (size_t j = 0; j < dim; j++)
		if (!isfinite(x[j]))
			return 0;
	return 1;
}

/* The version's probabilities for the n rows of x (preprocessed), new. An output that is not
 * a finite number from a row whose inputs are finite is the version's fault (its rollout
 * policy counts the failure): NULL with a 500 in rs. From a row whose inputs are not (a NaN
 * or an Infinity the client sent, or a value preprocessing took past float32) it is the
 * answer, written as TensorFlow Serving writes it when nonfinite, else (JSON has no NaN) a
 * 400. */
static float *run_model(const struct entry *e, const float *x, size_t n, int nonfinite,
                        struct tf_web_resp *rs)
{
	const struct tf_bundle *b = e->b;
	size_t C = tf_mlp_outputs(&b->mlp), dim = b->mlp.size[0];
	float *p = tf_xmalloc(n * C * sizeof(float));
	tf_bundle_predict(b, x, n, p, 1);
	for (size_t i = 0; i < n * C; i++) {
		if (isfinite(p[i]))
			continue;
		size_t row = i / C;
		if (finite_row(x + row * dim, dim)) {
			serving_error(
			    rs, 500,
			    "version %lld of model '%s' gave a value that is not a finite "
			    "number for instance %zu (a broken model)",
			    (long long)e->version, e->model, row);
		} else if (!nonfinite) {
			serving_error(rs, 400,
			              "instance %zu: an input is not a finite float32 once "
			              "preprocessed, so the answer is not a finite number either, "
			              "which JSON cannot carry",
			              row);
		} else {
			i = (row + 1) * C - 1; /* the row's answer, as it is */
			continue;
		}
		free(p);
		return NULL;
	}
	return p;
}

/* A prediction request as its protocol read it: the body (NULL when the row fast path read
 * it), the rows (n x inputs, preprocessed) and whether a TF Serving body was columnar. */
struct parsed {
	json_t *body;
	float *x;
	size_t n;
	int columnar;
};

/* One protocol's part of a prediction: how the request becomes rows for the version's bundle
 * b (0, or the error in rs), how the answer to the probabilities p (n x C) is written, and
 * whether its JSON has NaN, Infinity and -Infinity (TensorFlow Serving's does). */
struct proto {
	int (*read)(struct tf_web_req *rq, struct tf_web_resp *rs, const struct tf_bundle *b,
	            struct parsed *in);
	void (*write)(struct tf_buf *o, const struct entry *e, const struct parsed *in,
	              const float *p, size_t C);
	int nonfinite;
};

/* ---- the shadow comparison (docs/serving.md, "Shadow comparison") ----------------------- */

/* The comparisons that may wait for the comparison thread, and the request bodies they may
 * copy; past either, a comparison runs on the connection's thread once the answer is sent
 * (tf_web_resp.after), as the client's next request on that connection waits for it. */
#define SHADOW_QUEUE TF_SERVE_SHADOW_QUEUE
#define SHADOW_QUEUE_BYTES ((size_t)64 << 20)

/* A canary's answer that production answers too (on the comparison thread, or once the client
 * has it): the request as the canary read it, and the canary's probabilities. */
struct shadow {
	struct shadow *next; /* in the queue */
	struct tf_web *srv;
	const struct proto *pr;
	struct entry *canary; /* held */
	int64_t stable;
	double tolerance;
	const char *body; /* the request's (NULL when parsed): copy, or still there (web/api.h) */
	size_t len;
	char *copy;     /* the body, copied for the comparison thread */
	json_t *parsed; /* the body as the canary's read parsed it (NULL: the row fast path) */
	float *p;       /* n x C */
	size_t n, C;
};

/* The predicted class of a row of C probabilities: the largest (the first of equals), or for
 * a one-output (sigmoid) model whether it is at least 0.5. */
static size_t predicted(const float *p, size_t C)
{
	if (C == 1)
		return p[0] >= 0.5f;
	size_t best = 0;
	for (size_t k = 1; k < C; k++)
		if (p[k] > p[best])
			best = k;
	return best;
}

/* The rows of the canary's answer a (n x ca) that differ from production's b (n x cb): the
 * predicted class differs or, with tol > 0, some output differs by more than tol; every row
 * when the widths differ. */
static size_t rows_differ(const float *a, size_t ca, const float *b, size_t cb, size_t n,
                          double tol)
{
	if (ca != cb)
		return n;
	size_t d = 0;
	for (size_t i = 0; i < n; i++) {
		const float *x = a + i * ca, *y = b + i * ca;
		int differ = predicted(x, ca) != predicted(y, ca);
		for (size_t k = 0; !differ && tol > 0 && k < ca; k++)
			differ = fabs((double)x[k] - (double)y[k]) > tol;
		d += (size_t)differ;
	}
	return d;
}

/* Production's answer to the shadowed request, compared row by row with the canary's and
 * counted on the canary (shadow_rows, shadow_differ). Inputs production does not take count
 * as rows that differ; nothing is counted when production cannot answer at all (unloadable,
 * or an output that is not a finite number): that is not the canary's doing. */
static void shadow_run(void *ctx)
{
	struct shadow *s = ctx;
	struct tf_serve *sv = tf_web_serving(s->srv);
	struct entry *prod = NULL;
	char err[1024];
	pthread_mutex_lock(&sv->lock);
	struct view *m = tf_serve_view_locked(sv, NULL, NULL, s->canary->model);
	int rc = -ENOENT;
	if (m && m->exists)
		rc = tf_serve_acquire_in(sv, m, s->stable, 0, &prod, err, sizeof(err));
	else
		pthread_mutex_unlock(&sv->lock);
	struct parsed in = {.body = s->parsed};
	if (!rc) {
		struct tf_web_req q = {.body = s->body, .body_len = s->len, .srv = s->srv};
		struct tf_web_resp scratch = {0};
		float *p = NULL;
		size_t differ = s->n;
		int counted = 1;
		if (!s->pr->read(&q, &scratch, prod->b, &in) && in.n == s->n) {
			p = run_model(prod, in.x, in.n, s->pr->nonfinite, &scratch);
			if (p)
				differ = rows_differ(s->p, s->C, p, tf_mlp_outputs(&prod->b->mlp),
				                     s->n, s->tolerance);
			counted = p != NULL;
		}
		if (counted) {
			atomic_fetch_add_explicit(&s->canary->shadow_rows, s->n,
			                          memory_order_relaxed);
			atomic_fetch_add_explicit(&s->canary->shadow_differ, differ,
			                          memory_order_relaxed);
		}
		free(p);
		tf_web_resp_release(&scratch);
		tf_serve_release(prod);
	}
	free(in.x);
	json_decref(in.body);
	atomic_fetch_sub_explicit(&s->canary->shadow_pending, 1, memory_order_release);
	tf_serve_release(s->canary);
	free(s->copy);
	free(s->p);
	free(s);
}

/* The comparison thread: the queued comparisons in order, until tf_serve_shadow_stop and an
 * empty queue. */
static void *shadow_thread(void *arg)
{
	struct tf_serve *sv = arg;
	pthread_mutex_lock(&sv->shadow_lock);
	for (;;) {
		while (!sv->shadow_head && !sv->shadow_stop)
			pthread_cond_wait(&sv->shadow_cond, &sv->shadow_lock);
		struct shadow *s = sv->shadow_head;
		if (!s)
			break;
		sv->shadow_head = s->next;
		if (!sv->shadow_head)
			sv->shadow_tail = NULL;
		sv->shadow_queued--;
		sv->shadow_bytes -= s->copy ? s->len : 0;
		pthread_mutex_unlock(&sv->shadow_lock);
		shadow_run(s);
		pthread_mutex_lock(&sv->shadow_lock);
	}
	pthread_mutex_unlock(&sv->shadow_lock);
	return NULL;
}

/* Queues s for the comparison thread (started with the first), with a copy of the request
 * body when the comparison reads it again (the row fast path's). 0, or -EAGAIN when the
 * queue is full or the thread cannot start: s is as it was, for the caller to run. */
static int shadow_queue(struct tf_serve *sv, struct shadow *s)
{
	size_t bytes = s->parsed ? 0 : s->len;
	char *copy = bytes ? tf_xmalloc(bytes) : NULL;
	if (copy)
		memcpy(copy, s->body, bytes);
	int rc = 0;
	pthread_mutex_lock(&sv->shadow_lock);
	if (sv->shadow_stop || sv->shadow_queued >= SHADOW_QUEUE ||
	    sv->shadow_bytes + bytes > SHADOW_QUEUE_BYTES)
		rc = -EAGAIN;
	else if (!sv->shadow_started && pthread_create(&sv->shadow_thread, NULL, shadow_thread, sv))
		rc = -EAGAIN;
	if (!rc) {
		if (!sv->shadow_started)
			pthread_setname_np(sv->shadow_thread, "tpuflow-shadow"); /* top -H, ps -L */
		sv->shadow_started = 1;
		s->copy = copy;
		s->body = copy;
		s->len = bytes;
		s->next = NULL;
		*(sv->shadow_tail ? &sv->shadow_tail->next : &sv->shadow_head) = s;
		sv->shadow_tail = s;
		sv->shadow_queued++;
		sv->shadow_bytes += bytes;
		pthread_cond_signal(&sv->shadow_cond);
	}
	pthread_mutex_unlock(&sv->shadow_lock);
	if (rc)
		free(copy);
	return rc;
}

void tf_serve_shadow_stop(struct tf_serve *sv)
{
	pthread_mutex_lock(&sv->shadow_lock);
	sv->shadow_stop = 1;
	pthread_cond_signal(&sv->shadow_cond);
	int started = sv->shadow_started;
	pthread_mutex_unlock(&sv->shadow_lock);
	if (started)
		pthread_join(sv->shadow_thread, NULL);
}

/* ---- predictions ------------------------------------------------------------------------ */

/* A prediction request of protocol pr that began at t0 (monotonic); body is the request's
 * already parsed (consumed; NULL: pr->read parses it). The answer is counted by the version
 * that gave it; a canary's answer under a shadow comparison is answered by production too,
 * on the comparison thread (the entry, the body and the answer go to shadow_run), or once
 * the client has it when that thread has too much waiting. */
static void predict(struct tf_web_req *rq, struct tf_web_resp *rs, const struct proto *pr,
                    json_t *body, double t0)
{
	struct route to;
	struct entry *e = serve_entry(rq, rs, 1, &to);
	if (!e) {
		json_decref(body);
		return;
	}
	struct parsed in = {.body = body};
	float *p = NULL;
	size_t C = tf_mlp_outputs(&e->b->mlp);
	if (!pr->read(rq, rs, e->b, &in) && (p = run_model(e, in.x, in.n, pr->nonfinite, rs))) {
		struct tf_buf o = {0};
		pr->write(&o, e, &in, p, C);
		tf_web_json_text(rs, &o);
	}
	free(in.x);
	tf_serve_record(e, rs->status, t0);
	if (p && to.shadow) {
		struct shadow *s = tf_xmalloc(sizeof(*s));
		*s = (struct shadow){.srv = rq->srv,
		                     .pr = pr,
		                     .canary = e,
		                     .stable = to.stable,
		                     .tolerance = to.tolerance,
		                     .body = rq->body,
		                     .len = rq->body_len,
		                     .parsed = in.body,
		                     .p = p,
		                     .n = in.n,
		                     .C = C};
		atomic_fetch_add_explicit(&e->shadow_pending, 1, memory_order_relaxed);
		if (shadow_queue(tf_web_serving(rq->srv), s)) {
			rs->after = shadow_run;
			rs->after_ctx = s;
		}
		return;
	}
	free(p);
	json_decref(in.body);
	tf_serve_release(e);
}

/* TensorFlow Serving: the row fast path, else the body's instances or inputs (in->body, when
 * a shadow comparison reads the request again, is the body parsed before). */
static int tfs_read(struct tf_web_req *rq, struct tf_web_resp *rs, const struct tf_bundle *b,
                    struct parsed *in)
{
	struct tf_serve *sv = tf_web_serving(rq->srv);
	char err[1024];
	if (!in->body && rq->body &&
	    tf_serve_fast_instances(sv, b, rq->body, rq->body + rq->body_len, &in->x, &in->n))
		return 0;
	if (!in->body && !(in->body = body_json(rq, rs, 1)))
		return -EINVAL;
	if (!tf_serve_tfs_inputs(sv, b, in->body, &in->x, &in->n, &in->columnar, err, sizeof(err)))
		return 0;
	serving_error(rs, 400, "%s", err);
	return -EINVAL;
}

/* {"predictions": [[...], ...]} (row) or {"outputs": [[...], ...]} (columnar). */
static void tfs_write(struct tf_buf *o, const struct entry *e, const struct parsed *in,
                      const float *p, size_t C)
{
	(void)e;
	tf_buf_printf(o, "%s", in->columnar ? "{\"outputs\":[" : "{\"predictions\":[");
	for (size_t i = 0; i < in->n; i++) {
		tf_buf_append(o, i ? ",[" : "[", i ? 2 : 1);
		put_floats(o, p + i * C, C);
		tf_buf_append(o, "]", 1);
	}
	tf_buf_append(o, "]}", 2);
}

static const struct proto tfs = {tfs_read, tfs_write, 1};

void tf_serve_h_predict(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	predict(rq, rs, &tfs, NULL, tf_now_monotonic());
}

void tf_serve_h_status(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	struct tf_serve *sv = tf_web_serving(rq->srv);
	const char *model = tf_web_param(rq, "name");
	int64_t vs[MAX_ALIASED];
	int nv = 1;
	if (tf_web_param(rq, "version") || tf_web_param(rq, "label")) { /* that version only */
		struct route to;
		if (!pick_locked(rq, rs, 0, &to))
			return;
		vs[0] = to.v;
		pthread_mutex_unlock(&sv->lock);
	} else {
		if (!model_view(rq, rs, model))
			return;
		pthread_mutex_unlock(&sv->lock);
		nv = tf_serve_aliased_versions(sv, NULL, rq, model, vs);
		if (nv <= 0) { /* TF Serving: NOT_FOUND "Could not find any versions of model" */
			serving_error(rs, 404,
			              "Servable not found: model '%s' has no version an alias "
			              "points at (call /versions/{v})",
			              model);
			return;
		}
	}
	json_t *list = json_array();
	for (int i = 0; i < nv; i++) {
		char why[1024] = "";
		int64_t n = vs[i];
		struct entry *e = NULL;
		enum vstate st =
		    tf_serve_version_state(sv, NULL, rq, model, n, &e, why, sizeof(why));
		char num[24];
		snprintf(num, sizeof(num), "%lld", (long long)n);
		/* the status is the version's health, OK while it loads (TF Serving's) */
		json_t *one = json_pack("{s:s, s:s, s:{s:s, s:s}}", "version", num, "state",
		                        vstate_names[st], "status", "error_code",
		                        st == V_UNAVAILABLE ? "NOT_FOUND" : "OK", "error_message",
		                        st == V_UNAVAILABLE ? why : "");
		if (e)
			json_object_set_new(one, "tpuflow_stats", tf_serve_stats_json(e));
		tf_serve_release(e);
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
	struct entry *e = serve_entry(rq, rs, 0, NULL);
	if (!e)
		return;
	const struct tf_bundle *b = e->b;
	const char *iname = tf_serve_input_name(b);
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
	tf_serve_release(e);
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
	char why[1024];
	/* a serving host is ready when its model is; the daemon, which loads any model on first
	 * use, when it answers */
	if (sv->only_model && !tf_serve_model_ready(sv, rq, sv->only_model, why, sizeof(why))) {
		/* the Open Inference Protocol: 200 is true, a 4xx false */
		serving_error(rs, 400, "model '%s' is not ready: %s", sv->only_model, why);
		return;
	}
	tf_web_json(rs, 200, json_pack("{s:b}", "ready", 1));
}

void tf_serve_h_v2_model(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	struct entry *e = serve_entry(rq, rs, 0, NULL);
	if (!e)
		return;
	const struct tf_bundle *b = e->b;
	int64_t vs[MAX_ALIASED];
	int nv = tf_serve_aliased_versions(tf_web_serving(rq->srv), NULL, rq, e->model, vs);
	json_t *names = json_array();
	for (int i = 0; i < nv; i++) {
		char num[24];
		snprintf(num, sizeof(num), "%lld", (long long)vs[i]);
		json_array_append_new(names, json_string(num));
	}
	tf_web_json(rs, 200,
	            json_pack("{s:s, s:o, s:s, s:[{s:s, s:s, s:[i,I]}], s:[{s:s, s:s, s:[i,I]}]}",
	                      "name", e->model, "versions", names, "platform", "tpuflow-mlp",
	                      "inputs", "name", tf_serve_input_name(b), "datatype",
	                      tf_serve_v2_datatype(b), "shape", -1, (json_int_t)b->mlp.size[0],
	                      "outputs", "name", "probabilities", "datatype", "FP32", "shape", -1,
	                      (json_int_t)tf_mlp_outputs(&b->mlp)));
	tf_serve_release(e);
}

/* GET /v2/models/{name}[/versions/{version}]/ready: the version named, else the model as the
 * server's readiness judges it (tf_serve_model_ready). Not ready is a 4xx (the Open Inference
 * Protocol's health APIs). */
void tf_serve_h_v2_model_ready(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	struct tf_serve *sv = tf_web_serving(rq->srv);
	const char *name = tf_web_param(rq, "name");
	char why[1024];
	struct entry *e = NULL;
	if (tf_web_param(rq, "version")) {
		e = serve_entry(rq, rs, 0, NULL);
	} else if (model_view(rq, rs, name)) {
		pthread_mutex_unlock(&sv->lock);
		if (!tf_serve_model_ready(sv, rq, name, why, sizeof(why))) {
			serving_error(rs, 400, "model '%s' is not ready: %s", name, why);
			return;
		}
		tf_web_json(rs, 200, json_pack("{s:s, s:b}", "name", name, "ready", 1));
		return;
	}
	if (!e) {
		if (rs->status == 503)
			rs->status = 400;
		rs->retry_after = 0;
		return;
	}
	tf_web_json(rs, 200, json_pack("{s:s, s:b}", "name", e->model, "ready", 1));
	tf_serve_release(e);
}

/* The Open Inference Protocol: the body's one input tensor. */
static int v2_read(struct tf_web_req *rq, struct tf_web_resp *rs, const struct tf_bundle *b,
                   struct parsed *in)
{
	char err[1024];
	if (!tf_serve_v2_inputs(tf_web_serving(rq->srv), b, in->body, &in->x, &in->n, err,
	                        sizeof(err)))
		return 0;
	serving_error(rs, 400, "%s", err);
	return -EINVAL;
}

/* {"model_name", "model_version", "id", "outputs": [{"name": "probabilities", ...}]}. */
static void v2_write(struct tf_buf *o, const struct entry *e, const struct parsed *in,
                     const float *p, size_t C)
{
	tf_buf_printf(o, "{\"model_name\":");
	tf_web_put_json_str(o, e->model);
	tf_buf_printf(o, ",\"model_version\":\"%lld\"", (long long)e->version);
	const char *id = json_string_value(json_object_get(in->body, "id"));
	if (id) {
		tf_buf_printf(o, ",\"id\":");
		tf_web_put_json_str(o, id);
	}
	tf_buf_printf(o,
	              ",\"outputs\":[{\"name\":\"probabilities\",\"datatype\":\"FP32\","
	              "\"shape\":[%zu,%zu],\"data\":[",
	              in->n, C);
	put_floats(o, p, in->n * C);
	tf_buf_printf(o, "]}]}");
}

static const struct proto v2 = {v2_read, v2_write, 0};

void tf_serve_h_infer(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	double t0 = tf_now_monotonic();
	json_t *body = body_json(rq, rs, 0); /* a body that is not JSON is a 400 before a 404 */
	if (body)
		predict(rq, rs, &v2, body, t0);
}

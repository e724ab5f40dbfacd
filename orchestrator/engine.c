/* engine.c — owns the execution of one run: the coordinator loop, the worker pool, retries,
 * timeouts, gates, the step cache and clean interruption.
 *
 * Threads and ownership:
 *  - Coordinating is a role, not a thread: whoever holds the baton (`e->coord_busy`, taken
 *    and released under `e->mu`) owns every `struct estep` field marked [C], the fields of
 *    `struct engine` marked [C] and the database handle `e->db`. The holder runs rounds
 *    (coord_round), each in this order: open a transaction, apply a batch of transitions
 *    (finished attempts, the steps they unblock, new attempts), commit, and only then hand
 *    the new attempts to the workers. One commit per batch keeps the per-step cost at about
 *    one fsync even for a 1000-step chain.
 *  - Workers pop steps from the work queue, run the kind with their own database and
 *    object-store handles, and push the step on the `done` list. A worker that finds the
 *    baton free takes it and runs the round for the step it just finished itself; when that
 *    round starts exactly one step, the worker runs it next without waking anyone (a chain
 *    step then costs no thread handoff at all). Otherwise the baton holder processes the
 *    pushed step before it lets the baton go. Fields marked [W] are written by the worker
 *    while the step runs and read by the baton holder after it pops the step from `done`
 *    (the mutex orders the two).
 *  - The first round runs on the thread that calls tf_engine_start, in the transaction
 *    that claimed the run (first_round): a submitted run's claim, its steps and its first
 *    attempts are one commit.
 *  - The calling thread (drive) takes the baton for everything else: retries whose backoff
 *    passed, timeouts, Ctrl-C, the view's refresh, and it decides that
 *    the run is over. It sleeps on `coord_cv`; a worker wakes it only when a round left
 *    something for it (a deadline, a retry, the end of the run, an error).
 *  - The handle (struct tf_engine) runs drive on a thread of its own; tf_engine_cancel and
 *    tf_engine_drain (a caller's signal handling, the daemon) set `e->interrupted`.
 *  Nobody polls: the calling thread sleeps until it is woken, a signal arrives, or the
 *  nearest retry/timeout deadline (pthread_cond_timedwait).
 *
 * This file is the coordinator (decide, finished, the round, drive); the other engine_*.c
 * files hold the parts it calls (engine.h lists them).
 */
#include "orchestrator/engine_int.h"

#define TF_LOG_TAG "engine"
#include "common/common.h"
#include "common/log.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define PROGRESS_FLUSH_S 1.0 /* how often a step's progress line goes to the database */

/* ---- helpers ------------------------------------------------------------------------- */

static double u01(struct engine *e)
{
	e->rng = e->rng * 1103515245u + 12345u;
	return (double)((e->rng >> 8) & 0xffffff) / 16777216.0;
}

double tf_engine_backoff(const struct tf_retry_policy *p, int retry, double u)
{
	double d = p->backoff > 0 ? p->backoff : 0;
	double f = p->factor >= 1 ? p->factor : 1;
	for (int i = 1; i < retry && d < 1e12; i++)
		d *= f;
	if (p->max_backoff > 0 && d > p->max_backoff)
		d = p->max_backoff;
	return d * u;
}

static int failure_retryable(const struct tf_retry_policy *p, enum tf_fail_class f)
{
	return (TF_RETRY_ON_ALL & p->on & (1u << f)) != 0; /* never none or cancelled */
}

/* ---- references ---------------------------------------------------------------------- */

/* The outcome of the run's `steps` as a finally step sees it: cancelled, else failed when
 * one failed. */
static const char *main_outcome(const struct engine *e)
{
	if (e->cancel_asked)
		return "cancelled";
	for (size_t i = 0; i < e->p->nmain; i++)
		if (e->steps[i].state == TF_STEP_FAILED)
			return "failed";
	return "succeeded";
}

static json_t *lookup(void *ctx, const struct tf_ref *ref)
{
	struct engine *e = ctx;
	if (ref->kind == TF_REF_PARAM)
		return tf_pipeline_lookup_param(e->p, ref);
	if (ref->kind == TF_REF_RUN)
		return json_string(!strcmp(ref->name, "id")         ? e->run_id
		                   : !strcmp(ref->name, "pipeline") ? e->p->name
		                                                    : main_outcome(e));
	if (ref->kind == TF_REF_ENV) {
		const char *v = getenv(ref->name);
		return v ? json_string(v) : NULL;
	}
	int si = ref->step_index;
	if (si < 0 && ref->step)
		si = tf_pipeline_step_index(e->p, ref->step);
	if (si < 0 || (size_t)si >= e->n)
		return NULL;
	json_t *src = ref->kind == TF_REF_OUTPUT ? e->steps[si].outputs : e->steps[si].metrics;
	json_t *v = src ? json_object_get(src, ref->name) : NULL;
	return v ? json_incref(v) : NULL;
}

/* ---- the coordinator ----------------------------------------------------------------- */

/* 1 when step s may not start again and its running attempt is being stopped: the run is
 * stopping (Ctrl-C, a drain, a second cancel, a lost owner), or it was cancelled and s is a
 * step of `steps` (the finally steps still run: Argo's `argo stop`). */
static int halted(const struct engine *e, const struct estep *s)
{
	return e->stopping || (e->cancel_asked && !s->def->final);
}

/* A cancelled run whose steps of `steps` have all stopped: its finally steps become ready,
 * each once the finally steps it names are final (the steps of `steps` it needs never run). */
static void open_finally(struct engine *e)
{
	for (size_t i = 0; i < e->p->nmain; i++) {
		const struct estep *s = &e->steps[i];
		if (s->queued || s->awaiting_slice || s->waiting_worker ||
		    s->state == TF_STEP_RUNNING || s->state == TF_STEP_RETRYING ||
		    s->state == TF_STEP_QUEUED)
			return; /* still stopping */
	}
	e->finally_open = 1;
	for (size_t i = e->p->nmain; i < e->n; i++) {
		struct estep *s = &e->steps[i];
		int before = s->unresolved;
		s->unresolved = 0;
		for (size_t k = 0; k < s->def->nneeds; k++) {
			const struct estep *u = &e->steps[s->def->needs[k]];
			s->unresolved += u->def->final && !tf_step_state_final(u->state);
		}
		/* one with none left before was made ready already */
		if (before > 0 && s->unresolved == 0 && s->state == TF_STEP_PENDING)
			e->ready[e->nready++] = i;
	}
}

void tf_engine_view_mark(struct engine *e, struct estep *s)
{
	if (!e->view || s->view_marked)
		return;
	if (!e->view_dirty)
		e->view_dirty = tf_xcalloc(e->n + 1, sizeof(*e->view_dirty));
	s->view_marked = 1;
	e->view_dirty[e->nview_dirty++] = s->idx;
}

void tf_engine_view_update(struct engine *e, int in_round)
{
	if (!e->view)
		return;
	double mono = tf_now_monotonic();
	/* A round shows only its marked rows in plain mode, every row when the view's refresh
	 * interval has passed (progress lines) or on a terminal (the table needs them all). */
	int full = !in_round || tf_view_is_tty(e->view) ||
	           mono - e->view_full_at >= tf_view_interval(e->view);
	size_t k = full ? e->n : e->nview_dirty;
	struct tf_view_row *rows = k ? tf_xcalloc(k, sizeof(*rows)) : NULL;
	double now = tf_now_wall();
	pthread_mutex_lock(&e->mu);
	for (size_t j = 0; j < k; j++) {
		struct estep *s = &e->steps[full ? j : e->view_dirty[j]];
		rows[j].name = s->def->name;
		rows[j].type = tf_step_type_name(s->def->type);
		/* a placed train step waiting for a worker is running in the database (its
		 * attempt began with the slice request) but queued for people */
		rows[j].state = tf_step_state_name(s->waiting_worker ? TF_STEP_QUEUED : s->state);
		rows[j].attempt = s->attempts;
		rows[j].duration =
		    s->started_wall > 0
		        ? (s->finished_wall > 0 ? s->finished_wall : now) - s->started_wall
		        : -1;
		rows[j].progress = s->state == TF_STEP_RUNNING ? tf_xstrdup(s->progress) : NULL;
		rows[j].reason = s->reason[0] ? s->reason : NULL;
	}
	pthread_mutex_unlock(&e->mu);
	if (full)
		tf_view_update(e->view, rows, e->n);
	else if (k)
		tf_view_update_rows(e->view, rows, e->view_dirty, k, e->n);
	if (in_round) { /* the marks are the baton holder's */
		for (size_t j = 0; j < e->nview_dirty; j++)
			e->steps[e->view_dirty[j]].view_marked = 0;
		e->nview_dirty = 0;
		if (full)
			e->view_full_at = mono;
	}
	for (size_t j = 0; j < k; j++)
		free(rows[j].progress);
	free(rows);
}

/* What is recorded of an environment reference: the reference itself, never its value. */
static json_t *lookup_recorded(void *ctx, const struct tf_ref *ref)
{
	if (ref->kind == TF_REF_ENV)
		return json_sprintf("${%s}", ref->path);
	return lookup(ctx, ref);
}

char *tf_engine_with_recorded(const struct estep *s)
{
	return tf_engine_canon(s->with_rec ? s->with_rec : s->with);
}

void tf_engine_set_reason(struct estep *s, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(s->reason, sizeof(s->reason), fmt, ap);
	va_end(ap);
}

/* Marks a step final in memory and counts down its dependents. `ready` collects dependents
 * whose needs are now all final. */
static void resolved(struct engine *e, struct estep *s, size_t *ready, size_t *nready)
{
	for (size_t k = 0; k < e->ndependents[s->idx]; k++) {
		struct estep *d = &e->steps[e->dependents[s->idx][k]];
		if (--d->unresolved == 0 && d->state == TF_STEP_PENDING)
			ready[(*nready)++] = d->idx;
	}
}

/* The one way the engine changes a step's state: the database first (tf_step_set_state
 * checks the move against the diagram of state.c and records it with an event), then the
 * in-memory copy, then the reason the view shows (u->reason, when there is one). Only the
 * baton holder moves steps, or the setup before any worker runs. */
int tf_engine_step_move(struct engine *e, struct estep *s, enum tf_step_state to,
                        const struct tf_step_update *u)
{
	TF_ASSERT(e->coord_busy || e->nworkers == 0);
	int rc = tf_step_set_state(e->db, e->run_id, s->def->name, to, u);
	TF_ASSERT(rc != -EINVAL); /* the engine asks only for moves the diagram has */
	if (rc)
		return rc;
	s->state = to;
	if (u && u->reason)
		snprintf(s->reason, sizeof(s->reason), "%s", u->reason);
	tf_engine_view_mark(e, s);
	return 0;
}

/* Ends the step's current attempt in the database (the attempt diagram of state.c). */
int tf_engine_attempt_end(struct engine *e, struct estep *s, enum tf_attempt_state to,
                          const struct tf_attempt_result *r)
{
	TF_ASSERT(e->coord_busy || e->nworkers == 0);
	int rc = tf_attempt_set_state(e->db, e->run_id, s->def->name, s->attempts, to, r);
	TF_ASSERT(rc != -EINVAL); /* only a running attempt ends, once */
	return rc;
}

static int step_final(struct engine *e, struct estep *s, enum tf_step_state to,
                      const struct tf_step_update *u, size_t *ready, size_t *nready)
{
	int rc = tf_engine_step_move(e, s, to, u);
	if (rc)
		return rc;
	s->finished_wall = tf_now_wall();
	resolved(e, s, ready, nready);
	return 0;
}

/* A step whose needs are all final: skip it, fail it, take it from the cache, or start it. */
static int decide(struct engine *e, struct estep *s, struct tf_objstore *os, struct estep **start,
                  size_t *nstart, size_t *ready, size_t *nready, int *cache_hits)
{
	char err[512] = "";
	/* a finally step runs whatever its needs became */
	for (size_t i = 0; !s->def->final && i < s->def->nneeds; i++) {
		struct estep *u = &e->steps[s->def->needs[i]];
		if (!tf_step_state_done(u->state)) {
			char why[600];
			snprintf(why, sizeof(why), "need '%s' %s", u->def->name,
			         tf_step_state_name(u->state));
			struct tf_step_update up = {.reason = why};
			return step_final(e, s, TF_STEP_SKIPPED, &up, ready, nready);
		}
	}
	if (s->def->when) {
		int yes = 0;
		int rc = tf_expr_eval_bool(s->def->when, lookup, e, &yes, err, sizeof(err));
		if (rc) {
			char why[700];
			snprintf(why, sizeof(why), "when: %s", err);
			struct tf_step_update up = {.reason = why};
			return step_final(e, s, TF_STEP_FAILED, &up, ready, nready);
		}
		if (!yes) {
			char why[700];
			snprintf(why, sizeof(why), "when: %s is false", s->def->when_source);
			struct tf_step_update up = {.reason = why};
			return step_final(e, s, TF_STEP_SKIPPED, &up, ready, nready);
		}
	}
	json_decref(s->with);
	json_decref(s->with_rec);
	s->with_rec = NULL;
	s->with = tf_step_render_with(s->def, lookup, e, err, sizeof(err));
	if (s->with && s->def->uses_env)
		s->with_rec = tf_step_render_with(s->def, lookup_recorded, e, err, sizeof(err));
	if (!s->with) {
		char why[700];
		snprintf(why, sizeof(why), "cannot resolve inputs: %s", err);
		struct tf_step_update up = {.reason = why};
		return step_final(e, s, TF_STEP_FAILED, &up, ready, nready);
	}
	s->cache_key[0] = '\0';
	if (s->def->cache && tf_step_schema(s->def->type)->cacheable) {
		json_t *o = NULL, *m = NULL;
		if (tf_engine_cache_key(e, s, os, s->cache_key, err, sizeof(err))) {
			struct tf_step_update up = {.reason = err};
			s->cache_key[0] = '\0';
			return step_final(e, s, TF_STEP_FAILED, &up, ready, nready);
		}
		if (tf_engine_cache_allowed(e, s) &&
		    tf_engine_cache_lookup(e, os, s, s->cache_key, &o, &m) == 0) {
			char *os_ = tf_engine_canon(o), *ms = tf_engine_canon(m),
			     *w = tf_engine_with_recorded(s);
			struct tf_step_update up = {.outputs = os_,
			                            .metrics = ms,
			                            .with_json = w,
			                            .cache_key = s->cache_key,
			                            .cache_hit = 1,
			                            .reason = "cache hit"};
			s->outputs = o;
			s->metrics = m;
			s->started_wall = tf_now_wall();
			int rc = step_final(e, s, TF_STEP_CACHED, &up, ready, nready);
			free(os_);
			free(ms);
			free(w);
			(*cache_hits)++;
			return rc;
		}
	}
	return tf_engine_start_attempt(e, s, start, nstart);
}

/* Handles one finished attempt. */
static int finished(struct engine *e, struct estep *s, struct estep **start, size_t *nstart,
                    size_t *ready, size_t *nready, int interrupted)
{
	struct tf_attempt_result ar = {.failure = s->failure,
	                               .exit_code = s->exit_code,
	                               .error = s->rc ? s->err : NULL,
	                               .log_key = s->log_key[0] ? s->log_key : NULL};
	int rc;
	e->nrunning--;
	s->queued = 0;
	if (s->log_err[0]) {
		rc = tf_event_add(e->db, e->run_id, s->def->name, s->attempts, "log", s->log_err);
		s->log_err[0] = '\0';
		if (rc)
			return rc;
	}
	if (s->admitted) {
		s->admitted = 0;
		e->nadmitted--;
		if (e->o->pool)
			tf_pool_release(e->o->pool, &e->pc);
	}
	if (tf_step_schema(s->def->type)->needs_slice && s->slice_row) {
		/* The slice was held for the whole attempt, successful or not. */
		double secs = 0;
		rc = tf_engine_slice_release(e, s, &secs);
		if (rc == 0)
			rc = tf_step_add_slice(e->db, e->run_id, s->def->name, s->accel, secs);
		if (rc == 0)
			rc = tf_engine_sched_dispatch(e, 1, start, nstart);
		if (rc)
			return rc;
	}
	if (e->lost_owner) {
		/* another process drives the run now: its rows are no longer ours to write */
		json_decref(s->res_outputs);
		json_decref(s->res_metrics);
		s->res_outputs = s->res_metrics = NULL;
		return 0;
	}
	if (s->rc == 0) {
		rc = tf_engine_attempt_end(e, s, TF_ATTEMPT_SUCCEEDED, &ar);
		if (rc)
			return rc;
		char *o = tf_engine_canon(s->res_outputs), *m = tf_engine_canon(s->res_metrics);
		struct tf_step_update up = {.outputs = o, .metrics = m};
		s->outputs = s->res_outputs;
		s->metrics = s->res_metrics;
		s->res_outputs = s->res_metrics = NULL;
		if (s->cache_key[0])
			rc = tf_store_run(
			    e->db,
			    "INSERT OR REPLACE INTO step_cache(key, run_id, step, outputs, "
			    "metrics, created_at) VALUES(?,?,?,?,?,?)",
			    "tttttd", s->cache_key, e->run_id, s->def->name, o, m, tf_now_wall());
		if (rc == 0)
			rc = step_final(e, s, TF_STEP_SUCCEEDED, &up, ready, nready);
		free(o);
		free(m);
		return rc;
	}
	json_decref(s->res_outputs);
	json_decref(s->res_metrics);
	s->res_outputs = s->res_metrics = NULL;
	if (s->timed_out && s->failure != TF_FAIL_TIMEOUT) {
		ar.failure = TF_FAIL_TIMEOUT;
		char msg[600];
		snprintf(msg, sizeof(msg), "timed out after %gs%s%s", s->def->timeout,
		         s->err[0] ? ": " : "", s->err);
		snprintf(s->err, sizeof(s->err), "%.500s", msg);
		ar.error = s->err;
	}
	if (interrupted && !s->timed_out) {
		ar.failure = TF_FAIL_CANCELLED;
		if (!ar.error)
			ar.error = "interrupted";
		rc = tf_engine_attempt_end(e, s, TF_ATTEMPT_CANCELLED, &ar);
		if (rc == 0)
			rc = tf_engine_step_move(e, s, TF_STEP_PENDING, NULL);
		return rc;
	}
	if (s->reclaim != TF_FAIL_NONE && !s->timed_out) {
		/* The broker took the slice back (a more urgent job, a failed chip): the attempt
		 * ends with that class, does not count against the retry limit, and the step
		 * asks for a slice again; train resumes from the checkpoint it wrote. */
		char msg[sizeof(s->err) + sizeof(s->reclaim_why) + 2];
		snprintf(msg, sizeof(msg), "%s; %s", s->reclaim_why, s->err);
		snprintf(s->err, sizeof(s->err), "%.*s", (int)sizeof(s->err) - 1, msg);
		ar.failure = s->reclaim;
		ar.error = s->err;
		s->reclaim = TF_FAIL_NONE;
		s->budget_base++;
		rc = tf_engine_attempt_end(e, s, TF_ATTEMPT_FAILED, &ar);
		struct tf_step_update up = {.reason = s->err, .next_attempt_at = tf_now_wall()};
		if (rc == 0)
			rc = tf_engine_step_move(e, s, TF_STEP_RETRYING, &up);
		if (rc)
			return rc;
		return tf_engine_start_attempt(e, s, start, nstart);
	}
	int retries_used = s->attempts - s->budget_base - 1;
	const struct tf_retry_policy *pol = &s->def->retries;
	/* A kind missing from this build (-ENOSYS) fails the same way every time. */
	int retry = !interrupted && s->rc != -ENOSYS && failure_retryable(pol, ar.failure) &&
	            retries_used < pol->limit;
	if (retry)
		ar.backoff = tf_engine_backoff(pol, retries_used + 1, u01(e));
	rc = tf_engine_attempt_end(e, s, TF_ATTEMPT_FAILED, &ar);
	if (rc)
		return rc;
	if (retry) {
		struct tf_step_update up = {.reason = s->err,
		                            .next_attempt_at = tf_now_wall() + ar.backoff};
		rc = tf_engine_step_move(e, s, TF_STEP_RETRYING, &up);
		if (rc)
			return rc;
		e->retry_hint = 1;
		tf_engine_set_reason(s, "attempt %d %s: %s; retry in %.2fs", s->attempts,
		                     tf_fail_class_name(ar.failure), s->err, ar.backoff);
		s->next_at = tf_now_monotonic() + ar.backoff;
		if (ar.backoff <= 0)
			return tf_engine_start_attempt(e, s, start, nstart);
		return 0;
	}
	char why[700];
	snprintf(why, sizeof(why), "%s (%s, attempt %d)", s->err, tf_fail_class_name(ar.failure),
	         s->attempts);
	struct tf_step_update up = {.reason = why};
	return step_final(e, s, TF_STEP_FAILED, &up, ready, nready);
}

static void ts_after(struct timespec *ts, double seconds)
{
	clock_gettime(CLOCK_MONOTONIC, ts);
	double ns = (double)ts->tv_nsec + seconds * 1e9;
	ts->tv_sec += (time_t)(ns / 1e9);
	ts->tv_nsec = (long)fmod(ns, 1e9);
}

/* Which steps start as soon as s succeeds (s is their one need not final), for s's worker to
 * make their work directories while s's child runs (engine_worker.c): a chain step's mkdir
 * then costs nothing between one child's end and the next one's start. At most as many as
 * can start at once; one that never runs (s failed, the run was cancelled) keeps an empty
 * directory, which nothing reads (logs are looked for by name, gc removes the run's whole
 * directory). */
static void plan_next_dirs(struct engine *e, struct estep *s)
{
	size_t cap = (size_t)(e->nworkers > 0 ? e->nworkers : 1);
	s->nnext_dirs = 0;
	for (size_t k = 0; k < e->ndependents[s->idx] && s->nnext_dirs < cap; k++) {
		const struct estep *d = &e->steps[e->dependents[s->idx][k]];
		if (d->state != TF_STEP_PENDING || d->unresolved != 1 || d->attempts)
			continue;
		if (!s->next_dirs)
			s->next_dirs = tf_xcalloc(cap, sizeof(*s->next_dirs));
		s->next_dirs[s->nnext_dirs++] = d->idx;
	}
}

/* Hands attempts whose start is committed to the workers, each a job for e->pool. A worker
 * coordinating (by_worker) keeps one of them for itself (e->kept, no job): it runs it right
 * after the round, so waking another thread for that one would only add a handoff. */
static void hand_over(struct engine *e, struct estep **start, size_t nstart, int by_worker)
{
	size_t queued = 0;
	for (size_t i = 0; i < nstart; i++)
		if (!start[i]->queued)
			plan_next_dirs(e, start[i]);
	pthread_mutex_lock(&e->mu);
	for (size_t i = 0; i < nstart; i++) {
		struct estep *s = start[i];
		if (s->queued)
			continue; /* already handed over */
		s->cancel = 0;
		s->timed_out = 0;
		s->executor_timed = 0;
		s->started = tf_now_monotonic();
		/* Every attempt gets the deadline; one whose executor counts the timeout itself
		 * (a Slurm job's run time, which only the executor sees: Slurm's TimeUsed, not
		 * while the job waits in the queue or is suspended) loses it when its kind says
		 * so (tf_step_run_timed_by_executor), not because the step names an executor:
		 * a kind that ignores `executor` is timed here. */
		s->deadline = s->def->timeout > 0 ? s->started + s->def->timeout : 0;
		if (s->deadline > 0)
			e->timeout_hint = 1;
		s->queued = 1;
		e->nrunning++;
		e->queue[(e->qhead + e->qlen) % e->n] = s;
		e->qlen++;
		queued++;
	}
	if (by_worker && queued) {
		queued--;
		e->kept++;
	}
	e->pool_jobs += (int)queued;
	pthread_mutex_unlock(&e->mu);
	for (size_t i = 0; i < queued; i++) /* after the unlock: pool.h's lock order */
		tf_engine_pool_submit(e);
}

/* One round of the coordinator, run by the baton holder: takes the finished attempts,
 * applies them and everything they unblock in one transaction, commits, then hands the new
 * attempts to the workers. When many steps become ready at once (a fan-out), their starts
 * are committed in growing chunks (as many as there are workers first, then twice as many
 * each time) so the first ones run while the rest are still being recorded; each chunk is
 * committed before any of its steps is handed over. Sets e->complete when nothing is left,
 * and e->main_look when drive must look (a deadline or a retry to wait for, the view). */
/* Inside the round's write transaction: 1 while this engine's token still owns the run, 0
 * when another process took it over (a read: the heartbeat writes only every few seconds). */
static int still_owner(struct engine *e)
{
	int64_t n = 1;
	if (tf_store_query_int(e->db, &n, "SELECT count(*) FROM runs WHERE id=? AND owner=?", "tt",
	                       e->run_id, e->token))
		return 1; /* cannot tell: the heartbeat will */
	return n == 1;
}

int tf_engine_coord_round(struct engine *e, int by_worker)
{
	size_t nbatch = 0, nstart = 0, handed = 0,
	       chunk = (size_t)(e->nworkers > 0 ? e->nworkers : 1);
	struct estep **batch = e->batch, **start = e->start;
	int rc, interrupted, progress;

	TF_ASSERT(e->coord_busy); /* the [C] fields are the baton holder's */

	if (tf_now_monotonic() >= e->hb_next && !e->lost_owner) {
		int cancel = TF_CANCEL_NONE;
		rc = tf_run_heartbeat(e->db, e->run_id, e->token, &cancel);
		e->hb_next = tf_now_monotonic() + TF_RUN_HEARTBEAT_S;
		if (rc == -ESTALE) {
			tf_error("run '%s' was taken over by another process: stopping here",
			         e->run_id);
			e->lost_owner = 1;
		} else if (rc) {
			tf_warn("run '%s': heartbeat not recorded: %s", e->run_id,
			        tf_store_errmsg(e->db));
		} else if (cancel == TF_CANCEL_FIRST && !e->cancel_asked) {
			tf_info("run '%s': cancel requested: stopping its steps, then running its "
			        "finally steps",
			        e->run_id);
			e->cancel_asked = 1;
			for (size_t i = 0; i < e->n; i++)
				if (e->steps[i].queued && halted(e, &e->steps[i]))
					e->steps[i].cancel = 1;
		} else if (cancel != TF_CANCEL_NONE && !e->cancel_stop) {
			tf_info("run '%s': cancelled again: stopping its finally steps too",
			        e->run_id);
			e->cancel_asked = e->cancel_stop = 1;
		}
		if (e->lost_owner || e->cancel_stop) {
			pthread_mutex_lock(&e->mu);
			e->interrupted = 1;
			pthread_mutex_unlock(&e->mu);
		}
	}
	pthread_mutex_lock(&e->mu);
	for (size_t i = 0; i < e->ndone; i++)
		batch[nbatch++] = e->done[i];
	e->ndone = 0;
	interrupted = e->interrupted;
	progress = e->progress_any;
	e->progress_any = 0;
	pthread_mutex_unlock(&e->mu);

	double now = tf_now_monotonic();
	if (interrupted && !e->stopping) {
		e->stopping = 1;
		for (size_t i = 0; i < e->n; i++)
			if (e->steps[i].queued)
				e->steps[i].cancel = 1;
	}
	/* Timeouts: raise cancel; the attempt is recorded when the kind returns. */
	if (e->timeout_hint) {
		int any = 0;
		for (size_t i = 0; i < e->n; i++) {
			struct estep *s = &e->steps[i];
			if (s->state != TF_STEP_RUNNING || s->deadline <= 0 || s->timed_out)
				continue;
			if (s->executor_timed) {
				s->deadline = 0; /* the executor enforces it (r->timeout) */
				continue;
			}
			if (now >= s->deadline) {
				s->timed_out = 1;
				s->cancel = TF_CANCEL_TIMEOUT;
			} else {
				any = 1;
			}
		}
		e->timeout_hint = any;
	}

	/* the first round joins the transaction that claimed the run (tf_engine_start) */
	int own;
	rc = tf_store_join(e->db, &own);
	if (rc)
		goto fail;
	if (nbatch && !e->lost_owner && !still_owner(e)) {
		/* taken over since the last heartbeat: the attempts' ends are not ours to record */
		tf_error("run '%s' was taken over by another process: stopping here", e->run_id);
		e->lost_owner = 1;
		e->stopping = 1;
		for (size_t i = 0; i < e->n; i++)
			if (e->steps[i].queued)
				e->steps[i].cancel = 1;
	}
	for (size_t i = 0; i < nbatch && rc == 0; i++)
		rc = finished(e, batch[i], start, &nstart, e->ready, &e->nready,
		              halted(e, batch[i]));
	/* Stopping: attempts still waiting for a slice or a worker never ran. */
	for (size_t i = 0; (e->stopping || e->cancel_asked) && !e->lost_owner && i < e->n && rc == 0;
	     i++) {
		struct estep *s = &e->steps[i];
		if (!halted(e, s) || (!s->awaiting_slice && !s->waiting_worker))
			continue;
		double secs;
		rc = tf_engine_slice_release(e, s, &secs);
		struct tf_attempt_result ar = {
		    .failure = TF_FAIL_CANCELLED,
		    .exit_code = -1,
		    .error = s->waiting_worker ? "interrupted while waiting for a worker"
		                               : "interrupted while waiting for a slice"};
		if (rc == 0 && s->state == TF_STEP_RUNNING) /* queued steps have no attempt yet */
			rc = tf_engine_attempt_end(e, s, TF_ATTEMPT_CANCELLED, &ar);
		if (rc == 0)
			rc = tf_engine_step_move(e, s, TF_STEP_PENDING, NULL);
		s->waiting_worker = 0;
	}
	/* the wait queue keeps only the steps still waiting (a cancelled run's finally steps) */
	for (size_t k = 0, n = e->wq_len; k < n && (e->stopping || e->cancel_asked); k++) {
		struct estep *s = e->waitq[e->wq_head];
		e->wq_head = (e->wq_head + 1) % e->n;
		e->wq_len--;
		if (s->waiting_worker)
			e->waitq[(e->wq_head + e->wq_len++) % e->n] = s;
	}
	/* Slices: grants for waiting attempts, reclaims of running ones. */
	if (rc == 0 && e->broker && !e->stopping)
		rc = tf_engine_sched_dispatch(e, 0, start, &nstart);
	/* Workers freed by the finished attempts take waiting steps. */
	if (rc == 0 && !e->stopping)
		rc = tf_engine_admit_waiting(e, start, &nstart);
	if (e->o->pool && e->wq_len == 0) /* nothing waits: slots reserved for us go to others */
		tf_pool_leave(e->o->pool, &e->pc);
	/* Retries whose backoff has passed. */
	if (e->retry_hint && !e->lost_owner) {
		int any = 0;
		for (size_t i = 0; i < e->n && rc == 0; i++) {
			struct estep *s = &e->steps[i];
			if (s->state != TF_STEP_RETRYING)
				continue;
			if (halted(e, s)) {
				rc = tf_engine_step_move(e, s, TF_STEP_PENDING, NULL);
			} else if (s->next_at <= now) {
				rc = tf_engine_start_attempt(e, s, start, &nstart);
			} else {
				any = 1;
			}
		}
		e->retry_hint = any || rc;
	}
	/* Cancelled: the finally steps, once the steps of `steps` have stopped. */
	if (rc == 0 && e->cancel_asked && !e->finally_open && !e->stopping)
		open_finally(e);
	/* Steps whose needs are final (the list grows while we decide). */
	for (size_t i = 0; i < e->nready && rc == 0; i++) {
		struct estep *s = &e->steps[e->ready[i]];
		if (s->state != TF_STEP_PENDING || halted(e, s))
			continue;
		rc =
		    decide(e, s, e->coord_os, start, &nstart, e->ready, &e->nready, &e->cache_hits);
		if (rc == 0 && nstart - handed >= chunk && i + 1 < e->nready) {
			/* Durable before acting: commit this chunk, start it, go on deciding. */
			rc = tf_store_commit(e->db);
			if (rc)
				goto fail;
			hand_over(e, start + handed, nstart - handed, 0);
			handed = nstart;
			chunk *= 2;
			rc = tf_store_begin(e->db);
			if (rc)
				goto fail;
		}
	}
	if (rc == 0)
		e->nready = 0;
	/* Progress lines to the database, at most once a second per step. */
	if (progress && !e->lost_owner) {
		int still = 0;
		for (size_t i = 0; i < e->n && rc == 0; i++) {
			struct estep *s = &e->steps[i];
			if (s->state != TF_STEP_RUNNING)
				continue;
			char line[sizeof(s->progress)];
			int dirty;
			pthread_mutex_lock(&e->mu);
			dirty = s->progress_dirty;
			if (dirty && now - s->progress_flushed >= PROGRESS_FLUSH_S) {
				s->progress_dirty = 0;
				memcpy(line, s->progress, sizeof(line));
			} else {
				still |= dirty;
				dirty = 0;
			}
			pthread_mutex_unlock(&e->mu);
			if (dirty) {
				rc = tf_step_set_progress(e->db, e->run_id, s->def->name, line);
				s->progress_flushed = now;
			}
		}
		if (still) {
			pthread_mutex_lock(&e->mu);
			e->progress_any = 1;
			pthread_mutex_unlock(&e->mu);
		}
	}
	if (rc) {
		tf_store_rollback(e->db);
		goto fail;
	}
	rc = tf_store_commit(e->db);
	if (rc)
		goto fail;
	/* Durable: now hand the new attempts to the workers. */
	hand_over(e, start + handed, nstart - handed, by_worker);
	tf_engine_view_update(e, 1);
	int waiting = 0;
	if (e->nrunning == 0) {
		for (size_t i = 0; i < e->n; i++)
			if (e->steps[i].state == TF_STEP_RETRYING || e->steps[i].awaiting_slice ||
			    e->steps[i].waiting_worker)
				waiting = 1;
		if (e->stopping || (!waiting && e->nready == 0))
			e->complete = 1;
	}
	/* The view alone needs drive only when its refresh is not armed (work_one asks). */
	e->main_look = e->complete || e->stopping || e->retry_hint || e->timeout_hint ||
	               e->slice_poll || waiting;
	return 0;
fail:
	tf_error("run '%s': %s", e->run_id, tf_store_errmsg(e->db));
	e->main_look = 1;
	return rc;
}

/* Takes the baton (called with e->mu held, and the baton free), runs one round without the
 * mutex, gives the baton back; returns with e->mu held. */
static int round_with_baton(struct engine *e)
{
	e->coord_busy = 1;
	pthread_mutex_unlock(&e->mu);
	int rc = tf_engine_coord_round(e, 0);
	pthread_mutex_lock(&e->mu);
	e->coord_busy = 0;
	return rc;
}

/* The first round, on the thread that calls tf_engine_start, inside the transaction that
 * claimed the run: the claim, the steps' rows and the first attempts are one commit (one
 * fsync between a submitted run and its first step running), and no thread handoff comes
 * before it. The attempts it starts go to the workers at once
 * (tf_engine_start_workers came first). */
int tf_engine_first_round(struct engine *e)
{
	char err[512];
	e->ready = tf_xcalloc(e->n + 1, sizeof(*e->ready));
	e->start = tf_xcalloc(e->n + 1, sizeof(*e->start));
	e->batch = tf_xcalloc(e->n + 1, sizeof(*e->batch));
	e->nready = 0;
	if (tf_objstore_open(e->storage_url, &e->coord_os, err, sizeof(err)))
		e->coord_os = NULL; /* cache keys then hash the outputs only */
	/* Resumed runs may have retrying steps; every run may have timeouts. */
	e->retry_hint = e->timeout_hint = 1;

	/* Initial frontier: pending steps with all needs final. */
	for (size_t i = 0; i < e->n; i++)
		if (e->steps[i].state == TF_STEP_PENDING && e->steps[i].unresolved == 0)
			e->ready[e->nready++] = i;
	/* the first round runs even with nothing ready (a finished resume ends in it); it holds
	 * the baton: with a shared pool, the attempts it hands over may end before it returns
	 * (what ended meanwhile waits in e->done for drive) */
	pthread_mutex_lock(&e->mu);
	int rc = round_with_baton(e);
	if (rc)
		e->fatal = rc; /* no worker coordinates after it (engine_release waits for them) */
	pthread_mutex_unlock(&e->mu);
	return rc;
}

/* Drives the run until every step is final or the run is interrupted: runs the rounds
 * workers leave to it (see the top of this file) and sleeps otherwise. */
int tf_engine_drive(struct engine *e, int *cache_hits)
{
	int rc = 0, timer = 0;

	pthread_mutex_lock(&e->mu);
	for (;;) {
		if (e->fatal) {
			rc = e->fatal;
			break;
		}
		if (e->coord_busy) {
			e->main_blocked = 1;
			pthread_cond_wait(&e->coord_cv, &e->mu);
			e->main_blocked = 0;
			continue;
		}
		/* The baton is free and we hold the mutex: the [C] fields are ours to read. */
		if (e->complete)
			break;
		/* A worker's wakeup (main_look) only makes us look at the deadlines again. */
		int go = timer || e->ndone || e->nready || e->pool_kick ||
		         (e->interrupted && !e->stopping);
		timer = 0;
		e->pool_kick = 0;
		if (!go) {
			/* Nothing to do now: sleep until a worker finishes, a signal, or the
			 * nearest deadline (retry backoff, step timeout, view refresh). */
			double wake = 0, now = tf_now_monotonic();
			int has_wake = 0;
			for (size_t i = 0; !go && (e->retry_hint || e->timeout_hint) && i < e->n;
			     i++) {
				struct estep *s = &e->steps[i];
				double t = 0;
				if (s->state == TF_STEP_RETRYING && !e->stopping)
					t = s->next_at;
				else if (s->state == TF_STEP_RUNNING && s->deadline > 0 &&
				         !s->timed_out)
					t = s->deadline;
				else
					continue;
				if (t <= now)
					go = 1;
				else if (!has_wake || t < wake)
					wake = t, has_wake = 1;
			}
			if (e->slice_poll) {
				/* slices are decided across processes: ask the broker again */
				int waiting = 0;
				for (size_t i = 0; i < e->n; i++)
					waiting |= e->steps[i].awaiting_slice;
				double t = now + (waiting ? SLICE_POLL_WAIT_S : SLICE_POLL_HOLD_S);
				if (!has_wake || t < wake)
					wake = t, has_wake = 1;
			}
			if (!go && e->nrunning == 0 && !has_wake)
				go = 1; /* nothing left that can change: one more round ends the run
				         */
			if (!go && e->hb_next <= now)
				go = 1; /* the owner's heartbeat is due */
			else if (!go && (!has_wake || e->hb_next < wake))
				wake = e->hb_next, has_wake = 1;
			if (!go) {
				e->main_ticking = e->view && e->nrunning > 0;
				if (e->main_ticking) {
					double tick = now + tf_view_interval(e->view);
					if (!has_wake || tick < wake)
						wake = tick, has_wake = 1;
				}
				if (has_wake) {
					struct timespec ts;
					ts_after(&ts, wake - now);
					timer = pthread_cond_timedwait(&e->coord_cv, &e->mu, &ts) ==
					        ETIMEDOUT;
				} else {
					pthread_cond_wait(&e->coord_cv, &e->mu);
				}
				e->main_ticking = 0;
				continue;
			}
		}
		rc = round_with_baton(e);
		if (rc) {
			e->fatal = rc;
			break;
		}
	}
	/* Workers coordinate no more: the run is over (or failed). */
	e->complete = 1;
	pthread_mutex_unlock(&e->mu);
	*cache_hits = e->cache_hits;
	return rc; /* the round's scratch and coord_os go with the engine (engine_release) */
}

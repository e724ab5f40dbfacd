/* engine_sched.c — where an attempt starts: a train attempt asks the slice broker for its
 * slice first (orchestrator/broker.h); every attempt then takes a free worker or waits in
 * the engine's wait queue. Runs on the baton holder's thread (engine.c).
 */
#include "orchestrator/engine_int.h"

#define TF_LOG_TAG "engine"
#include "common/common.h"
#include "common/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

/* ---- slices for train steps -------------------------------------------------------- */

/* A train attempt's scheduling class: the step's, else the run's. */
static void slice_class(const struct engine *e, const struct estep *s, int *priority,
                        const char **project)
{
	*priority = s->def->priority >= 0 ? s->def->priority : e->run_priority;
	*project = s->def->project ? s->def->project : e->run_project;
}

static int admit(struct engine *e, struct estep *s, struct estep **start, size_t *nstart);

/* Asks the broker for the attempts waiting on a slice and admits those granted; raises the
 * cancel flag of running attempts whose slice the broker takes back. `decide`: run a
 * decision round first (this process waits for a slice, or just freed one). */
int tf_engine_sched_dispatch(struct engine *e, int decide, struct estep **start, size_t *nstart)
{
	if (!e->broker)
		return 0;
	int waiting = 0, rc = 0;
	for (size_t k = 0; k < e->n; k++)
		waiting |= e->steps[k].awaiting_slice;
	if ((decide || waiting) && tf_broker_schedule(e->broker, tf_now_wall()))
		tf_warn("slice broker: %s", tf_store_errmsg(e->db));
	e->slice_poll = 0;
	for (size_t k = 0; k < e->n && rc == 0; k++) {
		struct estep *s = &e->steps[k];
		struct tf_slice_status st;
		if (!s->slice_row || tf_broker_status(e->broker, s->slice_row, &st))
			continue;
		e->slice_poll = 1;
		if (s->awaiting_slice && st.state != TF_SLICE_WAITING) {
			s->awaiting_slice = 0;
			s->chips = st.chips;
			snprintf(s->placement, sizeof(s->placement), "%s %d,%d,%d+%dx%dx%d",
			         st.pool, st.box.origin[0], st.box.origin[1], st.box.origin[2],
			         st.box.shape[0], st.box.shape[1], st.box.shape[2]);
			rc = admit(e, s, start, nstart); /* running already: no database write */
		} else if (s->awaiting_slice) {
			tf_engine_set_reason(s, "waiting for a %s slice: %s", s->accel,
			                     st.reason[0] ? st.reason : "not decided yet");
		} else if (st.state == TF_SLICE_RECLAIMED && !s->reclaim && s->queued) {
			s->reclaim = st.reclaim;
			snprintf(s->reclaim_why, sizeof(s->reclaim_why), "%s", st.reason);
			tf_engine_set_reason(s, "%s: checkpointing to give the slice back",
			                     st.reason);
			s->cancel = 1;
		}
	}
	return rc;
}

/* Asks the broker for a slice for a train attempt; it starts when sched_dispatch sees it
 * granted. -EINVAL with err when no pool can ever hold it. */
static int slice_request(struct engine *e, struct estep *s, char *err, size_t errlen)
{
	if (!e->broker && tf_broker_db_new(e->db, &e->broker))
		return -ENOMEM;
	struct tf_slice_request r = {.run = e->run_id,
	                             .step = s->def->name,
	                             .attempt = s->attempts,
	                             .slice = s->accel,
	                             .preemptible = 1};
	slice_class(e, s, &r.priority, &r.project);
	int rc = tf_broker_request(e->broker, &r, tf_now_wall(), &s->slice_row, err, errlen);
	if (rc)
		return rc;
	s->awaiting_slice = 1;
	s->reclaim = TF_FAIL_NONE;
	return 0;
}

/* The attempt's slice goes back to the broker; *seconds receives the slice-seconds it held. */
int tf_engine_slice_release(struct engine *e, struct estep *s, double *seconds)
{
	*seconds = 0;
	if (!e->broker || !s->slice_row)
		return 0;
	int rc = tf_broker_release(e->broker, s->slice_row, tf_now_wall(), seconds);
	s->slice_row = 0;
	s->awaiting_slice = 0;
	return rc == -ENOENT ? 0 : rc;
}

void tf_engine_use_db(struct engine *e, struct tf_store *db)
{
	if (db == e->db)
		return;
	e->db = db;
	if (e->broker) { /* it keeps nothing but the handle it asks on */
		tf_broker_free(e->broker);
		(void)tf_broker_db_new(db, &e->broker); /* only allocates (which aborts on failure) */
	}
}

/* An attempt begins (state pending, queued or retrying): running + attempt row. */
static int begin_attempt(struct engine *e, struct estep *s)
{
	char *w = tf_engine_with_recorded(s);
	struct tf_step_update u = {.with_json = w,
	                           .cache_key = s->cache_key[0] ? s->cache_key : NULL};
	int rc = tf_engine_step_move(e, s, TF_STEP_RUNNING, &u);
	free(w);
	if (rc)
		return rc;
	s->attempts++;
	rc = tf_attempt_create(e->db, e->run_id, s->def->name, s->attempts);
	if (rc)
		return rc;
	if (s->started_wall <= 0)
		s->started_wall = tf_now_wall();
	s->reason[0] = '\0';
	return 0;
}

/* A worker for the run: under its own cap, and with a shared pool one of the pool's slots
 * (without one the run waits on the pool's list and is kicked when a slot is reserved for
 * it: pool.h, priority then fair share). 1 when it has one. */
static int take_worker(struct engine *e)
{
	if (e->nadmitted >= e->nworkers)
		return 0;
	if (!e->o->pool)
		return 1;
	return tf_pool_acquire(e->o->pool, &e->pc, e->run_priority);
}

/* The step has a worker: its attempt starts (handed over after the commit). */
static int admitted(struct engine *e, struct estep *s, struct estep **start, size_t *nstart)
{
	int rc = s->state != TF_STEP_RUNNING ? begin_attempt(e, s) : 0;
	if (rc) {
		if (e->o->pool)
			tf_pool_release(e->o->pool, &e->pc);
		return rc;
	}
	s->reason[0] = '\0';
	s->admitted = 1;
	e->nadmitted++;
	start[(*nstart)++] = s;
	return 0;
}

/* A step ready to run takes a worker when one is free (its timeout starts when it is handed
 * over), else it waits in e->waitq, in state queued (a train step whose slice was placed stays
 * running: its attempt began with the slice request). */
static int admit(struct engine *e, struct estep *s, struct estep **start, size_t *nstart)
{
	if (take_worker(e))
		return admitted(e, s, start, nstart);
	int rc = 0;
	e->waitq[(e->wq_head + e->wq_len) % e->n] = s;
	e->wq_len++;
	s->waiting_worker = 1;
	tf_engine_view_mark(e, s);
	if (s->state != TF_STEP_RUNNING) {
		struct tf_step_update u = {.reason = "waiting for a worker"};
		rc = tf_engine_step_move(e, s, TF_STEP_QUEUED, &u);
	}
	tf_engine_set_reason(s, "waiting for a worker");
	return rc;
}

/* Workers that finished attempts take the steps waiting for one, oldest first. */
int tf_engine_admit_waiting(struct engine *e, struct estep **start, size_t *nstart)
{
	int rc = 0;
	while (rc == 0 && e->wq_len && take_worker(e)) {
		struct estep *s = e->waitq[e->wq_head];
		e->wq_head = (e->wq_head + 1) % e->n;
		e->wq_len--;
		s->waiting_worker = 0;
		tf_engine_view_mark(e, s);
		rc = admitted(e, s, start, nstart);
	}
	return rc;
}

/* Starts an attempt of a step that is pending or retrying: a train step asks the scheduler
 * for a slice first (unless Slurm places it); every step then waits for a worker if none is
 * free (admit). */
int tf_engine_start_attempt(struct engine *e, struct estep *s, struct estep **start, size_t *nstart)
{
	if (!tf_step_schema(s->def->type)->needs_slice)
		return admit(e, s, start, nstart);
	snprintf(s->accel, sizeof(s->accel), "%s",
	         s->def->accelerator         ? s->def->accelerator
	         : e->o->default_accelerator ? e->o->default_accelerator
	                                     : "v4-8");
	if (s->def->executor == TF_EXECUTOR_SLURM) /* its chips are Slurm's GRES, not ours */
		return admit(e, s, start, nstart);
	int rc = begin_attempt(e, s);
	if (rc)
		return rc;
	char err[400] = "";
	s->placement[0] = '\0';
	s->chips = 0;
	if (slice_request(e, s, err, sizeof(err))) {
		/* No slice can ever fit: the attempt fails at once. */
		s->rc = -EINVAL;
		s->failure = TF_FAIL_ERROR;
		s->exit_code = -1;
		snprintf(s->err, sizeof(s->err), "slice '%s': %s", s->accel, err);
		s->res_outputs = s->res_metrics = NULL;
		s->ended = s->started = tf_now_monotonic();
		s->queued = 1;
		e->nrunning++;
		pthread_mutex_lock(&e->mu);
		e->done[e->ndone++] = s;
		pthread_mutex_unlock(&e->mu);
		return 0;
	}
	tf_engine_set_reason(s, "waiting for a %s slice", s->accel);
	return tf_engine_sched_dispatch(e, 1, start, nstart);
}

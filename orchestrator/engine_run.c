/* engine_run.c — one run from its start to its end around the coordinator: submission of a
 * new run, setup of a new or continued run (claim, lost processes, the in-memory steps from
 * the database), the worker threads, the final state, and the handle (struct tf_engine) that
 * drives it on a thread of its own.
 */
#include "orchestrator/engine_int.h"
#include "orchestrator/logsync.h"

#define TF_LOG_TAG "engine"
#include "common/common.h"
#include "common/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

/* ---- setup and teardown -------------------------------------------------------------- */

static void engine_release(struct engine *e)
{
	/* A start that failed after its first round handed attempts over: they end first (no
	 * round takes them, e->fatal), then the run's threads and its slots go (after a run
	 * that was driven, nothing is left of them) */
	tf_engine_stop_workers(e);
	for (size_t i = 0; i < e->n; i++) {
		json_decref(e->steps[i].outputs);
		json_decref(e->steps[i].metrics);
		json_decref(e->steps[i].with);
		json_decref(e->steps[i].with_rec);
		json_decref(e->steps[i].res_outputs);
		json_decref(e->steps[i].res_metrics);
		free(e->dependents ? e->dependents[i] : NULL);
		free(e->steps[i].next_dirs);
	}
	free(e->steps);
	free(e->view_dirty);
	free(e->dependents);
	free(e->ndependents);
	free(e->queue);
	free(e->done);
	free(e->waitq);
	free(e->ready);
	free(e->start);
	free(e->batch);
	tf_objstore_free(e->coord_os);
	tf_view_free(e->view);
	tf_broker_free(e->broker);
	if (e->db_own != e->o->db)
		tf_store_close(e->db_own); /* a borrowed handle is the caller's */
	tf_pipeline_free(e->p);
	free(e->home);
	free(e->storage_url);
	pthread_mutex_destroy(&e->mu);
	pthread_cond_destroy(&e->coord_cv);
}

/* The shared pool reserved a slot for this run (under the pool's mutex): drive looks. */
static void pool_kick(void *ctx)
{
	struct engine *e = ctx;
	pthread_mutex_lock(&e->mu);
	e->pool_kick = 1;
	pthread_cond_signal(&e->coord_cv);
	pthread_mutex_unlock(&e->mu);
}

static int engine_init(struct engine *e, const struct tf_engine_opts *o)
{
	memset(e, 0, sizeof(*e));
	e->o = o;
	/* Absolute, so paths handed to child processes (which run in their own directory)
	 * stay valid. */
	const char *h = o->home ? o->home : ".tpuflow";
	tf_mkdir_p(h);
	e->home = realpath(h, NULL);
	if (!e->home)
		e->home = tf_xstrdup(h);
	pthread_mutex_init(&e->mu, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&e->coord_cv, &ca);
	pthread_condattr_destroy(&ca);
	for (int t = 0; t < TF_STEP_MAX; t++) {
		const struct tf_step_schema *sc = tf_step_schema((enum tf_step_type)t);
		e->kinds[t] = o->kinds[t] ? o->kinds[t] : sc ? sc->run : NULL;
	}
	e->pc.kick = pool_kick;
	e->pc.ctx = e;
	e->rng = (unsigned)getpid() ^ (unsigned)(tf_now_monotonic() * 1e6);
	if (tf_random_hex(e->token, 16))
		snprintf(e->token, sizeof(e->token), "%08x%08x%016llx", (unsigned)getpid(), e->rng,
		         (unsigned long long)(tf_now_wall() * 1e6));
	e->hb_next = tf_now_monotonic() + TF_RUN_HEARTBEAT_S;
	return 0;
}

/* The run's scheduling class: --priority/--project, else the pipeline's keys, else 5 and
 * "default"; recorded on the run, and read back when it is resumed (options still win). */
static int run_class(struct engine *e, int resuming)
{
	int64_t prio = -1;
	char *project = NULL;
	if (resuming) {
		tf_store_query_int(e->db, &prio,
		                   "SELECT COALESCE(priority, -1) FROM runs WHERE id=?", "t",
		                   e->run_id);
		tf_store_query_text(e->db, &project, "SELECT project FROM runs WHERE id=?", "t",
		                    e->run_id);
	}
	e->run_priority = e->o->has_priority    ? e->o->priority
	                  : prio >= 0           ? (int)prio
	                  : e->p->priority >= 0 ? e->p->priority
	                                        : TF_BROKER_PRIORITY_DEFAULT;
	snprintf(e->run_project, sizeof(e->run_project), "%s",
	         e->o->project   ? e->o->project
	         : project       ? project
	         : e->p->project ? e->p->project
	                         : "default");
	free(project);
	return tf_store_run(e->db, "UPDATE runs SET priority=?, project=? WHERE id=?", "itt",
	                    (int64_t)e->run_priority, e->run_project, e->run_id);
}

/* Builds the in-memory steps from the pipeline and the database rows of the run, in the
 * caller's transaction when one is open (tf_engine_start keeps it open for the first round). */
static int load_steps(struct engine *e, int resuming)
{
	struct tf_pipeline *p = e->p;
	e->n = p->nsteps;
	e->steps = tf_xcalloc(e->n + 1, sizeof(*e->steps));
	e->dependents = tf_xcalloc(e->n + 1, sizeof(*e->dependents));
	e->ndependents = tf_xcalloc(e->n + 1, sizeof(*e->ndependents));
	e->queue = tf_xcalloc(e->n + 1, sizeof(*e->queue));
	e->done = tf_xcalloc(e->n + 1, sizeof(*e->done));
	e->waitq = tf_xcalloc(e->n + 1, sizeof(*e->waitq));
	for (size_t i = 0; i < e->n; i++) {
		struct estep *s = &e->steps[i];
		s->idx = i;
		s->def = &p->steps[i];
		s->state = TF_STEP_PENDING;
		for (size_t k = 0; k < s->def->nneeds; k++) {
			size_t u = s->def->needs[k];
			e->dependents[u] =
			    tf_xrealloc(e->dependents[u], (e->ndependents[u] + 1) * sizeof(size_t));
			e->dependents[u][e->ndependents[u]++] = i;
		}
	}
	int own, rc = tf_store_join(e->db, &own);
	if (rc)
		return rc;
	/* a continued run keeps what it selected (run --only/--from): those not selected stay
	 * skipped */
	struct tf_selection sel = {0};
	char err[256];
	if (resuming)
		rc = tf_engine_selection_of_run(e, &sel, err, sizeof(err));
	for (size_t i = 0; i < e->n && rc == 0; i++) {
		struct estep *s = &e->steps[i];
		struct tf_stmt *q = tf_store_query(e->db,
		                                   "SELECT state, attempts, outputs, metrics, "
		                                   "started_at, finished_at, reason FROM steps "
		                                   "WHERE run_id=? AND name=?",
		                                   "tt", e->run_id, s->def->name);
		if (!q) {
			rc = -EIO;
			break;
		}
		rc = tf_stmt_step(q);
		if (rc != 1) {
			tf_stmt_done(q);
			rc = rc == 0 ? -ENOENT : rc;
			break;
		}
		rc = tf_step_state_parse(tf_stmt_text(q, 0), &s->state);
		s->attempts = (int)tf_stmt_int(q, 1);
		s->budget_base = s->attempts;
		if (tf_step_state_done(s->state)) {
			s->outputs =
			    json_loads(tf_stmt_text(q, 2) ? tf_stmt_text(q, 2) : "{}", 0, NULL);
			s->metrics =
			    json_loads(tf_stmt_text(q, 3) ? tf_stmt_text(q, 3) : "{}", 0, NULL);
			if (!s->outputs)
				s->outputs = json_object();
			if (!s->metrics)
				s->metrics = json_object();
			s->started_wall = tf_stmt_double(q, 4);
			s->finished_wall = tf_stmt_double(q, 5);
		}
		tf_stmt_done(q);
		if (rc)
			break;
		/* a finally step reports the run's end: a run that ended failed and is continued
		 * has a new one, at which it runs again */
		int again = resuming && e->new_end && s->def->final && tf_step_state_done(s->state);
		if (!resuming || (tf_step_state_done(s->state) && !again))
			continue;
		if (s->state == TF_STEP_SKIPPED && sel.action[i] != TF_SEL_RUN)
			continue; /* not selected */
		if (again) {
			struct tf_step_update up = {
			    .new_end = 1, .reason = "runs again at the new end of the continued run"};
			rc = tf_engine_step_move(e, s, TF_STEP_PENDING, &up);
			json_decref(s->outputs);
			json_decref(s->metrics);
			s->outputs = s->metrics = NULL;
			s->started_wall = s->finished_wall = 0;
			continue;
		}
		/* Resume: anything not done starts again. An attempt left running died with the
		 * process that ran it. */
		if (s->state == TF_STEP_RUNNING && s->attempts > 0) {
			int64_t open = 0;
			if (tf_store_query_int(e->db, &open,
			                       "SELECT count(*) FROM attempts WHERE run_id=? AND "
			                       "step=? AND n=? AND state='running'",
			                       "tti", e->run_id, s->def->name,
			                       (int64_t)s->attempts) == 0 &&
			    open) {
				/* its log went up before (tf_logs_upload_lost) */
				struct tf_attempt_result ar = {
				    .failure = TF_FAIL_INFRA,
				    .exit_code = -1,
				    .error = "the engine stopped while it ran"};
				rc = tf_engine_attempt_end(e, s, TF_ATTEMPT_LOST, &ar);
			}
		}
		if (rc == 0 && s->state != TF_STEP_PENDING)
			rc = tf_engine_step_move(e, s, TF_STEP_PENDING, NULL);
	}
	/* slices the dead process held are no longer held (time unknown: not accounted) */
	if (rc == 0 && resuming)
		rc = tf_slice_jobs_close_run(e->db, e->run_id, tf_now_wall());
	/* a cancel taken before a crash, Ctrl-C or a drain still holds: finally steps only */
	e->cancel_asked = 0;
	if (rc == 0 && resuming)
		rc = tf_run_cancelled(e->db, e->run_id, &e->cancel_asked);
	tf_engine_selection_release(&sel);
	if (rc == 0)
		rc = run_class(e, resuming);
	rc = tf_store_leave(e->db, own, rc);
	if (rc)
		return rc;
	for (size_t i = 0; i < e->n; i++) {
		struct estep *s = &e->steps[i];
		for (size_t k = 0; k < s->def->nneeds; k++)
			if (!tf_step_state_final(e->steps[s->def->needs[k]].state))
				s->unresolved++;
	}
	return rc;
}

static int execute(struct engine *e, struct tf_engine_result *res, char *err, size_t errlen)
{
	int cache_hits = 0, rc;
	enum tf_run_state final;

	if (e->o->out)
		e->view = tf_view_new(e->o->out, e->o->tty, e->run_id, e->p->name);
	tf_engine_view_update(e, 0);
	rc = tf_engine_drive(e, &cache_hits);
	tf_engine_stop_workers(e);
	/* logs the store refused during this run or an earlier one, now that it may be back */
	if (rc == 0 && !e->lost_owner)
		rc = tf_logs_upload_pending(e->db, e->storage_url, e->home, e->run_id, NULL, NULL);
	if (rc) {
		tf_errf(err, errlen, "run '%s': %s", e->run_id, tf_store_errmsg(e->db));
		return rc;
	}
	int failed = 0, pending = 0;
	const char *first_failed = NULL;
	for (size_t i = 0; i < e->n; i++) {
		if (e->steps[i].state == TF_STEP_FAILED) {
			failed++;
			if (!first_failed)
				first_failed = e->steps[i].def->name;
		} else if (!tf_step_state_final(e->steps[i].state)) {
			pending++;
		}
	}
	char msg[300] = "";
	if (e->lost_owner) {
		tf_errf(err, errlen,
		        "run '%s' was taken over by another process ('runs resume --force'); "
		        "this one stopped without recording an end",
		        e->run_id);
		return -ESTALE;
	}
	/* Cancelled: failed whatever the finally steps did, unless Ctrl-C or a drain stopped
	 * them (then the run is interrupted and the run that continues it runs them). */
	if (e->cancel_asked && (e->cancel_stop || !e->interrupted)) {
		final = TF_RUN_FAILED;
		snprintf(msg, sizeof(msg),
		         "cancelled ('tpuflow runs cancel')%s; 'tpuflow runs retry %s' continues it",
		         e->cancel_stop && e->p->nsteps > e->p->nmain
		             ? "; a second cancel stopped its finally steps"
		             : "",
		         e->run_id);
	} else if (e->interrupted || pending) {
		final = TF_RUN_INTERRUPTED;
		snprintf(msg, sizeof(msg), "interrupted; resume with 'tpuflow runs resume %s'",
		         e->run_id);
	} else if (failed) {
		final = TF_RUN_FAILED;
		snprintf(msg, sizeof(msg), "step '%s' failed%s", first_failed,
		         failed > 1 ? " (and others)" : "");
	} else {
		final = TF_RUN_SUCCEEDED;
	}
	if (final == TF_RUN_INTERRUPTED && e->drain)
		snprintf(msg, sizeof(msg),
		         "stopped by a draining daemon; the next one continues it");
	rc = tf_run_finish(e->db, e->run_id, e->token, final, msg[0] ? msg : NULL,
	                   final == TF_RUN_INTERRUPTED && e->drain);
	if (rc == -ESTALE) {
		tf_errf(err, errlen,
		        "run '%s' was taken over by another process before it ended here",
		        e->run_id);
		return rc;
	}
	if (rc) {
		tf_errf(err, errlen, "run '%s': %s", e->run_id, tf_store_errmsg(e->db));
		return rc;
	}
	tf_engine_view_update(e, 0);
	memcpy(res->run_id, e->run_id, sizeof(res->run_id));
	res->state = final;
	res->summary = NULL;
	rc = tf_engine_summary(e->db, e->run_id, &res->summary);
	if (rc == 0)
		json_object_set_new(res->summary, "cache_hits_this_time", json_integer(cache_hits));
	return rc;
}

static char *default_storage(const struct tf_engine_opts *o, const struct tf_pipeline *p,
                             const char *home)
{
	if (o->storage && *o->storage)
		return tf_objstore_url_absolute(o->storage);
	if (p->storage && *p->storage)
		return tf_objstore_url_absolute(p->storage);
	char *abs = realpath(home, NULL);
	char *url = tf_xasprintf("file://%s/objects", abs ? abs : home);
	free(abs);
	return url;
}

/* The rule of what may be continued: resume takes any run that has not succeeded (a
 * running one only when its owner is gone, which tf_run_claim decides); retry takes failed
 * and interrupted runs. */
static unsigned continue_from(unsigned flags)
{
	unsigned m = (1u << TF_RUN_FAILED) | (1u << TF_RUN_INTERRUPTED);
	if (!(flags & TF_ENGINE_RETRY))
		m |= (1u << TF_RUN_RUNNING) | (1u << TF_RUN_PENDING);
	return m;
}

static int continue_check(const char *run, enum tf_run_state state, unsigned flags, char *err,
                          size_t errlen)
{
	if (continue_from(flags) & (1u << state))
		return 0;
	if (state == TF_RUN_SUCCEEDED)
		tf_errf(err, errlen, "run '%s' already succeeded: nothing to %s", run,
		        flags & TF_ENGINE_RETRY ? "retry" : "resume");
	else
		tf_errf(err, errlen,
		        "run '%s' is %s; retry is for failed or interrupted runs "
		        "(resume continues a run whose process died)",
		        run, tf_run_state_name(state));
	return -EALREADY;
}

static void busy_message(const char *run, const struct tf_run_owner *h, char *err, size_t errlen)
{
	tf_errf(err, errlen,
	        "run '%s' is being driven by process %ld (heartbeat %.1f s ago); wait for it, "
	        "stop it with 'tpuflow runs cancel %s', or if that process is stuck take the run "
	        "over with 'tpuflow runs resume --force %s'",
	        run, h->pid, h->heartbeat_age, run, run);
}

/* Before a resume starts anything: process groups that attempts left running still have
 * (the engine that started them was killed; their leader got its death signal, what it
 * started may live on) are ended and waited out, so no step ever runs twice at once. */
static int end_lost_processes(struct engine *e, char *err, size_t errlen)
{
	struct tf_stmt *q = tf_store_query(e->db,
	                                   "SELECT step, n, pgid FROM attempts WHERE run_id=? "
	                                   "AND state='running' AND pgid IS NOT NULL",
	                                   "t", e->run_id);
	int rc = 0;
	while (q && rc == 0 && tf_stmt_step(q) == 1) {
		long pgid = (long)tf_stmt_int(q, 2);
		if (!tf_pgrp_alive(pgid))
			continue;
		tf_warn("run '%s' step '%s' attempt %lld: its process group %ld outlived the "
		        "engine; ending it (SIGTERM, then SIGKILL) before the step starts again",
		        e->run_id, tf_stmt_text(q, 0), (long long)tf_stmt_int(q, 1), pgid);
		rc = tf_pgrp_end(pgid, 10);
		if (rc)
			snprintf(
			    err, errlen,
			    "run '%s' step '%s': process group %ld of its last attempt %s; end "
			    "it (kill -KILL -- -%ld) and resume again",
			    e->run_id, tf_stmt_text(q, 0), pgid,
			    rc == -EPERM ? "may not be signalled by this user" : "does not end",
			    pgid);
	}
	tf_stmt_done(q);
	return rc;
}

/* ---- creating runs ------------------------------------------------------------------- */

/* Records a new run of the loaded pipeline `p` (pending) in the caller's transaction, or in one
 * of its own: the one place runs are created, for `tpuflow run`, the daemon and the API. */
static int create_run(struct tf_store *st, const struct tf_pipeline *p, const char *path,
                      const struct tf_param_override *ov, size_t nov, const char *storage,
                      const char *trigger, const struct tf_run_label *labels, size_t nlabels,
                      char run_id[32])
{
	json_t *params = json_object();
	for (size_t i = 0; i < nov; i++) /* a name from the command line runs up to its '=' */
		json_object_setn_new(params, ov[i].name, strcspn(ov[i].name, "="),
		                     json_string(ov[i].value));
	char *pj = tf_engine_canon(params);
	json_decref(params);
	struct tf_run_step_def *defs = tf_xcalloc(p->nsteps + 1, sizeof(*defs));
	for (size_t i = 0; i < p->nsteps; i++) {
		defs[i].name = p->steps[i].name;
		defs[i].type = tf_step_type_name(p->steps[i].type);
	}
	int own, rc = tf_store_join(st, &own);
	if (rc == 0)
		rc = tf_run_create(st, p->name, p->source, path, pj, storage, defs, p->nsteps,
		                   trigger, run_id);
	if (rc == 0 && nlabels)
		rc = tf_run_set_labels(st, run_id, labels, nlabels);
	rc = tf_store_leave(st, own, rc);
	free(defs);
	free(pj);
	return rc;
}

int tf_engine_submit(struct tf_store *st, const char *home, const struct tf_engine_submit *s,
                     char run_id[32], struct tf_diag_list *diags, char *err, size_t errlen)
{
	struct tf_pipeline *p = NULL;
	const char *name = s->path ? s->path : "pipeline";
	int rc = tf_pipeline_load_buffer(name, s->yaml, s->yaml_len, s->ov, s->nov,
	                                 TF_PIPELINE_ENV_SET, &p, diags);
	if (rc) {
		tf_errf(err, errlen, "pipeline '%s' has errors", name);
		return -EINVAL;
	}
	struct tf_engine_opts o = {.storage = s->storage};
	char *storage = default_storage(&o, p, home);
	int own;
	rc = tf_store_join(st, &own);
	if (rc == 0)
		rc = create_run(st, p, s->path, s->ov, s->nov, storage, s->trigger, s->labels,
		                s->nlabels, run_id);
	if (rc == 0 && (s->has_priority || s->project))
		rc = tf_store_run(st,
		                  "UPDATE runs SET priority=CASE WHEN ? THEN ? ELSE priority END, "
		                  "project=coalesce(?, project) WHERE id=?",
		                  "iitt", (int64_t)(s->has_priority != 0), (int64_t)s->priority,
		                  s->project, run_id);
	rc = tf_store_leave(st, own, rc);
	if (rc)
		tf_errf(err, errlen, "%s", tf_store_errmsg(st));
	free(storage);
	tf_pipeline_free(p);
	return rc;
}

/* ---- the handle ------------------------------------------------------------------------ */

/* The coordinator's database handle: the caller's (opts.db, a daemon reuses its handles) or
 * one of its own. */
static int open_db(struct engine *e, char *err, size_t errlen)
{
	int rc = 0;
	if (e->o->db)
		e->db_own = e->o->db;
	else
		rc = tf_store_open_home(e->home, &e->db_own, err, errlen);
	e->db = e->db_own;
	return rc;
}

struct tf_engine {
	struct engine e;         /* the run */
	struct tf_engine_opts o; /* a copy (its strings are borrowed) */
	pthread_t driver;        /* runs execute() */
	int have_driver;
	int done;       /* execute() returned (under e.mu) */
	int rc;         /* its return */
	char err[1024]; /* its message */
	struct tf_engine_result res;
};

/* A new run from a file: loaded, then recorded pending, claimed (so no daemon can take it in
 * between) and its steps loaded in one transaction, left open for the first round. */
static int setup_new(struct engine *e, const struct tf_engine_req *rq, struct tf_diag_list *diags,
                     char *err, size_t errlen)
{
	const struct tf_engine_opts *o = e->o;
	int rc = tf_pipeline_load(rq->path, rq->ov, rq->nov, TF_PIPELINE_ENV_SET, &e->p, diags);
	if (rc) {
		tf_errf(err, errlen, "pipeline '%s' has errors", rq->path);
		return -EINVAL;
	}
	for (size_t i = 0; i < o->nforce; i++)
		if (tf_pipeline_step_index(e->p, o->force[i]) < 0) {
			tf_errf(err, errlen, "--force %s: pipeline '%s' has no such step",
			        o->force[i], rq->path);
			return -EINVAL;
		}
	rc = open_db(e, err, errlen);
	if (rc)
		return rc;
	e->storage_url = default_storage(o, e->p, e->home);
	struct tf_selection sel;
	rc = tf_engine_select(e->p, rq, e->db, e->storage_url, NULL, &sel, err, errlen);
	if (rc) {
		tf_engine_selection_release(&sel);
		return rc;
	}
	struct tf_run_owner holder;
	rc = tf_store_begin(e->db);
	if (rc == 0)
		rc = create_run(e->db, e->p, rq->path, rq->ov, rq->nov, e->storage_url,
		                rq->trigger ? rq->trigger : "cli", rq->labels, rq->nlabels,
		                e->run_id);
	if (rc == 0)
		rc = tf_run_claim(e->db, e->run_id, e->token, 1u << TF_RUN_PENDING, 0, &holder);
	if (rc == 0)
		rc = load_steps(e, 0);
	if (rc == 0 && sel.why[0])
		rc = tf_engine_apply_selection(e, &sel);
	if (rc)
		tf_errf(err, errlen, "%s", tf_store_errmsg(e->db));
	tf_engine_selection_release(&sel);
	return rc;
}

int tf_engine_dry_run(const struct tf_engine_opts *o, const struct tf_engine_req *rq,
                      json_t **out, struct tf_diag_list *diags, char *err, size_t errlen)
{
	struct tf_pipeline *p = NULL;
	int rc = tf_pipeline_load(rq->path, rq->ov, rq->nov, TF_PIPELINE_ENV_SET, &p, diags);
	if (rc) {
		tf_errf(err, errlen, "pipeline '%s' has errors", rq->path);
		return -EINVAL;
	}
	const char *h = o->home ? o->home : ".tpuflow";
	char *storage = default_storage(o, p, h), *db = tf_xasprintf("%s/%s", h, TF_STORE_FILE);
	struct tf_store *st = NULL;
	struct tf_selection sel;
	if (access(db, F_OK) == 0 && tf_store_open(db, TF_STORE_READONLY, &st, err, errlen))
		rc = -EIO;
	if (rc == 0)
		rc = tf_engine_select(p, rq, st, storage, NULL, &sel, err, errlen);
	if (rc == 0)
		*out = tf_engine_plan_json(p, &sel, storage);
	if (rc != -EIO)
		tf_engine_selection_release(&sel);
	tf_store_close(st);
	free(db);
	free(storage);
	tf_pipeline_free(p);
	return rc;
}

/* An existing run (resume, retry, or a submitted run a daemon takes): claimed, what its lost
 * attempts left behind ended, its steps loaded; the transaction that loaded them is left open
 * for the first round (for a pending run it is also the one that claimed it). */
static int setup_continue(struct engine *e, const struct tf_engine_req *rq,
                          struct tf_diag_list *diags, char *err, size_t errlen)
{
	char *source = NULL, *path = NULL, *params = NULL, *storage = NULL;
	struct tf_param_override *ov = NULL;
	size_t nov = 0;
	json_t *pj = NULL;
	enum tf_run_state state;
	unsigned flags = rq->flags;
	int rc = open_db(e, err, errlen);
	if (rc)
		return rc;
	rc = tf_run_find(e->db, rq->run_id, e->run_id);
	if (rc) {
		tf_errf(err, errlen,
		        rc == -EEXIST ? "run id prefix '%s' is ambiguous: give more characters"
		                      : "no run '%s' in this state home (see 'tpuflow runs list')",
		        rq->run_id);
		return rc;
	}
	rc = tf_run_get_state(e->db, e->run_id, &state);
	if (rc == 0)
		rc = continue_check(e->run_id, state, flags, err, errlen);
	if (rc)
		return rc;
	rc = tf_run_pipeline_source(e->db, e->run_id, &source, &path);
	if (rc == 0)
		rc = tf_store_query_text(e->db, &params, "SELECT params FROM runs WHERE id=?", "t",
		                         e->run_id);
	if (rc == 0)
		rc = tf_store_query_text(e->db, &storage, "SELECT storage FROM runs WHERE id=?",
		                         "t", e->run_id);
	if (rc) {
		tf_errf(err, errlen, "%s", tf_store_errmsg(e->db));
		goto out;
	}
	pj = json_loads(params ? params : "{}", 0, NULL);
	ov = tf_param_overrides_from_json(pj, &nov);
	rc = tf_pipeline_load_buffer(path ? path : "pipeline", source, strlen(source), ov, nov, 0,
	                             &e->p, diags);
	if (rc) {
		tf_errf(err, errlen, "the pipeline stored with run '%s' no longer loads",
		        e->run_id);
		rc = -EINVAL;
		goto out;
	}
	e->storage_url = storage ? tf_xstrdup(storage) : default_storage(e->o, e->p, e->home);
	struct tf_run_owner holder;
	rc = tf_store_begin(e->db);
	if (rc == 0)
		rc = tf_run_claim(e->db, e->run_id, e->token, continue_from(flags),
		                  flags & TF_ENGINE_FORCE, &holder);
	/* judged now: ending its processes below may make a live owner exit */
	if (rc == 0 && strcmp(holder.token, e->token) && tf_run_owner_live(&holder))
		tf_warn("run '%s': taken over by force from process %ld, which looks alive "
		        "(heartbeat %.1f s ago); if it still runs, it stops at its next heartbeat",
		        e->run_id, holder.pid, holder.heartbeat_age);
	e->new_end = rc == 0 && holder.state == TF_RUN_FAILED;
	if (rc == 0 && holder.state != TF_RUN_PENDING) {
		/* it ran before: the claim is durable before lost processes are ended */
		rc = tf_store_commit(e->db);
		if (rc == 0)
			rc = end_lost_processes(e, err, errlen);
		if (rc == -ETIMEDOUT || rc == -EPERM)
			goto out;
		/* their logs are complete now; uploaded outside the write transaction */
		if (rc == 0)
			rc = tf_logs_upload_lost(e->db, e->storage_url, e->home, e->run_id);
		if (rc == 0)
			rc = tf_store_begin(e->db);
	}
	if (rc == -EBUSY || rc == -EALREADY) {
		if (rc == -EALREADY)
			continue_check(e->run_id, holder.state, flags, err, errlen);
		else
			busy_message(e->run_id, &holder, err, errlen);
		goto out;
	}
	if (rc == 0)
		rc = load_steps(e, 1);
	if (rc)
		tf_errf(err, errlen, "%s", tf_store_errmsg(e->db));
out:
	json_decref(pj);
	free(ov);
	free(source);
	free(path);
	free(params);
	free(storage);
	return rc;
}

static void *driver_main(void *arg)
{
	struct tf_engine *h = arg;
	h->rc = execute(&h->e, &h->res, h->err, sizeof(h->err));
	pthread_mutex_lock(&h->e.mu);
	h->done = 1;
	pthread_mutex_unlock(&h->e.mu);
	return NULL;
}

int tf_engine_start(const struct tf_engine_opts *o, const struct tf_engine_req *rq,
                    struct tf_engine **out, struct tf_diag_list *diags, char *err, size_t errlen)
{
	struct tf_engine *h = tf_xcalloc(1, sizeof(*h));
	h->o = *o;
	engine_init(&h->e, &h->o);
	int rc = rq->run_id ? setup_continue(&h->e, rq, diags, err, errlen)
	                    : setup_new(&h->e, rq, diags, err, errlen);
	if (rc == 0 && (rc = tf_engine_start_workers(&h->e)))
		tf_errf(err, errlen, "run '%s': cannot start worker threads", h->e.run_id);
	if (rc == 0) {
		rc = tf_engine_first_round(&h->e);
		if (rc)
			snprintf(err, errlen, "run '%s': %s", h->e.run_id,
			         tf_store_errmsg(h->e.db));
	}
	if (rc && h->e.db)
		tf_store_rollback(h->e.db); /* what the failure left open */
	if (rc == 0 && pthread_create(&h->driver, NULL, driver_main, h)) {
		tf_errf(err, errlen, "cannot start a thread to drive run '%s'", h->e.run_id);
		rc = -EAGAIN;
		pthread_mutex_lock(&h->e.mu);
		h->e.fatal = rc; /* the workers coordinate no more */
		pthread_mutex_unlock(&h->e.mu);
	}
	if (rc) {
		engine_release(&h->e);
		free(h);
		return rc;
	}
	h->have_driver = 1;
	memcpy(h->res.run_id, h->e.run_id, sizeof(h->res.run_id));
	*out = h;
	return 0;
}

const char *tf_engine_run_id(const struct tf_engine *h)
{
	return h->e.run_id;
}

static void interrupt(struct tf_engine *h, int drain)
{
	pthread_mutex_lock(&h->e.mu);
	h->e.interrupted = 1;
	h->e.drain |= drain;
	pthread_cond_signal(&h->e.coord_cv);
	pthread_mutex_unlock(&h->e.mu);
}

void tf_engine_cancel(struct tf_engine *h)
{
	interrupt(h, 0);
}

void tf_engine_drain(struct tf_engine *h)
{
	interrupt(h, 1);
}

int tf_engine_done(struct tf_engine *h)
{
	pthread_mutex_lock(&h->e.mu);
	int d = h->done;
	pthread_mutex_unlock(&h->e.mu);
	return d;
}

int tf_engine_wait(struct tf_engine *h, struct tf_engine_result *res, char *err, size_t errlen)
{
	if (h->have_driver) {
		pthread_join(h->driver, NULL);
		h->have_driver = 0;
	}
	*res = h->res;
	h->res.summary = NULL; /* the caller's now */
	if (h->rc)
		tf_errf(err, errlen, "%s", h->err);
	return h->rc;
}

void tf_engine_free(struct tf_engine *h)
{
	if (!h)
		return;
	if (h->have_driver) {
		tf_engine_cancel(h);
		pthread_join(h->driver, NULL);
	}
	json_decref(h->res.summary);
	engine_release(&h->e);
	free(h);
}

/* start + wait + free: the run driven to its end on the calling thread's watch. */
static int run_to_end(const struct tf_engine_opts *o, const struct tf_engine_req *rq,
                      struct tf_diag_list *diags, struct tf_engine_result *res, char *err,
                      size_t errlen)
{
	struct tf_engine *h = NULL;
	int rc = tf_engine_start(o, rq, &h, diags, err, errlen);
	if (rc)
		return rc;
	rc = tf_engine_wait(h, res, err, errlen);
	tf_engine_free(h);
	return rc;
}

int tf_engine_run_file(const struct tf_engine_opts *o, const char *path,
                       const struct tf_param_override *ov, size_t nov, struct tf_diag_list *diags,
                       struct tf_engine_result *res, char *err, size_t errlen)
{
	struct tf_engine_req rq = {.path = path, .ov = ov, .nov = nov};
	return run_to_end(o, &rq, diags, res, err, errlen);
}

int tf_engine_resume(const struct tf_engine_opts *o, const char *run_id, unsigned flags,
                     struct tf_engine_result *res, char *err, size_t errlen)
{
	struct tf_engine_req rq = {.run_id = run_id, .flags = flags};
	struct tf_diag_list diags = {0};
	int rc = run_to_end(o, &rq, &diags, res, err, errlen);
	if (rc == -EINVAL && diags.n) {
		/* the stored pipeline's problems, in the message */
		size_t n = strlen(err);
		snprintf(err + n, errlen - n, ": %s:%d:%d: %s",
		         diags.items[0].file ? diags.items[0].file : "", diags.items[0].line,
		         diags.items[0].col, diags.items[0].message);
	}
	tf_diag_list_release(&diags);
	return rc;
}

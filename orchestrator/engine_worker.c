/* engine_worker.c — the engine's workers: a worker pops a step from the queue, runs its kind
 * with its own database and object-store handles, uploads the attempt's log, and pushes the
 * step on the `done` list; a worker that finds the baton free runs the round for the step it
 * just finished itself (engine.c explains the baton). Each queued attempt is a job on a pool
 * (pool.h), whose threads keep their handles from step to step: the run's own (as many as it
 * has workers), or in the daemon the process's shared pool, whose slots order the runs.
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
#include <sys/stat.h>
#include <unistd.h>

/* ---- workers ------------------------------------------------------------------------- */

struct progress_ctx {
	struct engine *e;
	struct estep *s;
	const char *log_path;  /* the attempt's log file */
	const char *s_workdir; /* its directory, created on first use */
	FILE *log;             /* open once something was logged */
};

static void progress_cb(void *data, const char *line)
{
	struct progress_ctx *pc = data;
	pthread_mutex_lock(&pc->e->mu);
	snprintf(pc->s->progress, sizeof(pc->s->progress), "%s", line);
	pc->s->progress_dirty = 1;
	pc->e->progress_any = 1;
	pthread_mutex_unlock(&pc->e->mu);
	if (!pc->log && pc->log_path && tf_mkdir_p(pc->s_workdir) == 0)
		pc->log = fopen(pc->log_path, "a"); /* opened on first use: most steps never log */
	if (pc->log) {
		fprintf(pc->log, "%s\n", line);
		fflush(pc->log);
	}
}

/* A step's scratch directory: HOME/work/RUN/STEP (a new string). */
static char *step_workdir(const struct engine *e, const struct estep *s)
{
	return tf_xasprintf("%s/work/%s/%s", e->home, e->run_id, s->def->name);
}

/* The attempt's child runs: makes the work directories of the steps that start when it
 * succeeds (estep.next_dirs), each marked made only when this call created it (so it is
 * empty). The steps cannot run before this one ends, so nobody else touches the marks. */
static void make_next_dirs(void *data)
{
	struct progress_ctx *pc = data;
	const struct engine *e = pc->e;
	for (size_t k = 0; k < pc->s->nnext_dirs; k++) {
		struct estep *d = &pc->e->steps[pc->s->next_dirs[k]];
		char *dir = step_workdir(e, d);
		if (mkdir(dir, 0755) == 0)
			d->dir_made = 1;
		free(dir);
	}
}

static void run_one(struct wctx *w, struct estep *s, int attempt, json_t *with)
{
	struct engine *e = w->e;
	char *workdir = step_workdir(e, s);
	char *prefix = tf_xasprintf("runs/%s/%s/", e->run_id, s->def->name);
	char *log_path = tf_xasprintf("%s/attempt-%d.log", workdir, attempt);
	const char *acc = s->accel[0] ? s->accel : s->def->accelerator;
	struct tf_step_run r = {
	    .run_id = e->run_id,
	    .step = s->def->name,
	    .def = s->def,
	    .with = with,
	    .attempt = attempt,
	    .home = e->home,
	    .workdir = workdir,
	    .prefix = prefix,
	    .accelerator = acc,
	    .log_path = log_path,
	    .db = w->db,
	    .storage_url = e->storage_url,
	    .self_exe = e->o->self_exe,
	    .force_local = e->o->ml_local,
	    .timeout = s->def->timeout,
	    .grace = e->o->grace,
	    .cancel = &s->cancel,
	    .executor_timed = &s->executor_timed,
	    .outputs = json_object(),
	    .metrics = json_object(),
	    .failure = TF_FAIL_ERROR,
	    .exit_code = -1,
	    .workdir_made = s->dir_made,
	};
	s->dir_made = 0; /* this attempt may use it; the next one finds what it left */
	struct progress_ctx pc = {.e = e, .s = s, .log_path = log_path, .s_workdir = workdir};
	r.progress = progress_cb;
	r.progress_data = &pc;
	r.child_running = make_next_dirs;
	r.child_running_data = &pc;
	int rc = 0;
	char err[512] = "";
	if (!w->os) {
		rc = tf_objstore_open(e->storage_url, &w->os, err, sizeof(err));
		if (rc) {
			snprintf(r.err, sizeof(r.err), "object store: %.480s", err);
			r.failure = TF_FAIL_INFRA;
			goto out;
		}
		free(w->os_url);
		w->os_url = tf_xstrdup(e->storage_url);
	}
	if (!w->db) {
		rc = tf_store_open_home(e->home, &w->db, err, sizeof(err));
		if (rc) {
			snprintf(r.err, sizeof(r.err), "%.500s", err);
			r.failure = TF_FAIL_INFRA;
			goto out;
		}
		free(w->db_home);
		w->db_home = tf_xstrdup(e->home);
	}
	r.db = w->db;
	r.objstore = w->os;
	tf_step_kind_fn fn = e->kinds[s->def->type];
	TF_ASSERT(fn); /* every row of the step-kind table has its run function */
	rc = fn(&r);
	if (pc.log) {
		fclose(pc.log);
		pc.log = NULL;
	}
	if (rc && !r.err[0])
		snprintf(r.err, sizeof(r.err), "step failed: %s", strerror(rc < 0 ? -rc : rc));
	if (rc == 0)
		tf_engine_record_artifacts(w, e->run_id, s->def->name, r.outputs);
out:
	s->ended = tf_now_monotonic();
	s->log_key[0] = s->log_err[0] = '\0';
	struct stat sb;
	if (stat(log_path, &sb) == 0 && sb.st_size > 0) {
		/* A log that cannot be uploaded stays in the work directory; the attempt says so
		 * (an event, finished()) and so does a warning. */
		char *key = tf_xasprintf("%slogs/attempt-%d.log", prefix, attempt);
		if (w->os && tf_objstore_put_file(w->os, key, log_path, 0) == 0) {
			snprintf(s->log_key, sizeof(s->log_key), "%s", key);
			unlink(log_path); /* the store's copy is the one kept */
		} else {
			snprintf(
			    s->log_err, sizeof(s->log_err),
			    "log not uploaded to the object store (%.150s); it stays in %.150s",
			    w->os ? tf_objstore_errmsg(w->os) : "the store cannot be opened",
			    log_path);
			tf_warn("run '%s' step '%s' attempt %d: %s", e->run_id, s->def->name,
			        attempt, s->log_err);
		}
		free(key);
	}
	s->rc = rc;
	s->failure = rc ? r.failure : TF_FAIL_NONE;
	s->exit_code = r.exit_code;
	snprintf(s->err, sizeof(s->err), "%s", rc ? r.err : "");
	s->res_outputs = r.outputs;
	s->res_metrics = r.metrics;
	free(workdir);
	free(prefix);
	free(log_path);
}

/* Runs the step at the head of the queue on w's handles and, when the baton is free,
 * coordinates its finish itself (no wakeup of another thread on the way). Called and returns
 * with e->mu held. Returns how many attempts its rounds kept for this thread to run next
 * (hand_over: they have no job of their own). */
static int work_one(struct wctx *w, struct engine *e)
{
	struct estep *s = e->queue[e->qhead];
	e->qhead = (e->qhead + 1) % e->n;
	e->qlen--;
	int attempt = s->attempts;
	json_t *with = s->with;
	pthread_mutex_unlock(&e->mu);
	run_one(w, s, attempt, with);
	pthread_mutex_lock(&e->mu);
	e->done[e->ndone++] = s;
	if (e->coord_busy || e->fatal || e->complete)
		return 0; /* the holder takes it before it lets go of the baton */
	e->coord_busy = 1;
	/* its rounds run on this worker's handle, which just recorded the child's process group:
	 * on the coordinator's, that commit of another connection emptied its page cache, and
	 * every round read its ~15 pages again (a chain step's rounds all run here) */
	if (w->db)
		tf_engine_use_db(e, w->db);
	int look = 0, rc = 0, kept = 0;
	while (e->ndone && !e->fatal && !e->complete) {
		int give = kept > 0; /* kept for us, but we are busy: a job of its own */
		if (give) {
			kept--;
			e->pool_jobs++;
		}
		pthread_mutex_unlock(&e->mu);
		if (give)
			tf_engine_pool_submit(e);
		rc = tf_engine_coord_round(e, 1);
		look |= e->main_look;
		kept += e->kept;
		e->kept = 0;
		pthread_mutex_lock(&e->mu);
		if (rc) {
			e->fatal = rc;
			break;
		}
	}
	tf_engine_use_db(e, e->db_own);
	e->coord_busy = 0;
	/* drive sleeps through rounds that leave it nothing: with a view, only until the
	 * view's refresh is armed (a round per step woke it for nothing, a chain's main cost
	 * in context switches) */
	if (look || rc || e->main_blocked || e->interrupted || (e->view && !e->main_ticking))
		pthread_cond_signal(&e->coord_cv);
	return kept;
}

static void wctx_release(struct wctx *w)
{
	tf_store_close(w->db);
	tf_objstore_free(w->os);
	free(w->db_home);
	free(w->os_url);
}

/* ---- the pool's jobs ---------------------------------------------------------------------- */

static void pool_local_free(void *local)
{
	wctx_release(local);
	free(local);
}

struct tf_pool *tf_engine_pool_new(int nthreads)
{
	return tf_pool_new(nthreads, pool_local_free);
}

/* One queued attempt of e (and those its rounds keep for it), on a pool thread; the thread
 * keeps its handles for the next job unless that one's run has another home or object store. */
static void pool_job(void *arg, void **local)
{
	struct engine *e = arg;
	struct wctx *w = *local;
	if (!w)
		*local = w = tf_xcalloc(1, sizeof(*w));
	if (w->db && strcmp(w->db_home, e->home)) {
		tf_store_close(w->db);
		w->db = NULL;
	}
	if (w->os && strcmp(w->os_url, e->storage_url)) {
		tf_objstore_free(w->os);
		w->os = NULL;
	}
	w->e = e;
	pthread_mutex_lock(&e->mu);
	TF_ASSERT(e->qlen > 0); /* one job per queued attempt not kept by a worker */
	for (int kept = 1; kept > 0; kept--)
		kept += work_one(w, e);
	if (--e->pool_jobs == 0)
		pthread_cond_broadcast(&e->coord_cv); /* tf_engine_stop_workers may wait for it */
	pthread_mutex_unlock(&e->mu);
}

void tf_engine_pool_submit(struct engine *e)
{
	tf_pool_run(e->pool, pool_job, e);
}

/* How many workers the run gets: --workers (default 8), at most one per step. */
int tf_engine_worker_count(const struct engine *e)
{
	int n = e->o->workers > 0 ? e->o->workers : 8;
	return (size_t)n > e->n ? (int)(e->n ? e->n : 1) : n;
}

int tf_engine_start_workers(struct engine *e)
{
	e->nworkers = tf_engine_worker_count(e);
	if (!e->o->pool && !(e->own_pool = tf_engine_pool_new(e->nworkers)))
		return -EAGAIN;
	e->pool = e->o->pool ? e->o->pool : e->own_pool;
	return 0;
}

void tf_engine_stop_workers(struct engine *e)
{
	pthread_mutex_lock(&e->mu);
	while (e->pool_jobs) /* the last job may still be coordinating */
		pthread_cond_wait(&e->coord_cv, &e->mu);
	pthread_mutex_unlock(&e->mu);
	tf_pool_free(e->own_pool); /* joins the run's own threads */
	e->own_pool = NULL;
	if (e->o->pool) { /* slots the run holds or has reserved go to others */
		while (e->pc.held)
			tf_pool_release(e->o->pool, &e->pc);
		tf_pool_leave(e->o->pool, &e->pc);
	}
	e->nworkers = 0;
}

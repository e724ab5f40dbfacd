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
 * Cache key of a step (hex SHA-256): program version, the object store's normalised URL,
 * step type, step name, accelerator, the resolved `with` as canonical JSON (sorted keys), the
 * contents of its `cache_inputs` files, and for every need its outputs and metrics as
 * canonical JSON plus the size/checksum of each output that names an object in the store.
 * A hit counts only when what the cached step left in the store is still there
 * (cache_in_store). register and deploy are never cached (they act on the registry).
 */
#include "orchestrator/engine.h"
#include "orchestrator/digest.h"
#include "orchestrator/view.h"
#include "accel/tpu.h"
#include "orchestrator/broker.h"
#include "orchestrator/slices.h"
#include "orchestrator/logsync.h"

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

#ifndef TF_VERSION
#define TF_VERSION "0"
#endif

#define PROGRESS_FLUSH_S 1.0 /* how often a step's progress line goes to the database */

struct estep {
	size_t idx;                /* index in the pipeline */
	const struct tf_step *def; /* the step as loaded */
	enum tf_step_state state;  /* [C] current state (as committed) */
	int attempts;              /* [C] attempts made so far (the attempt counter) */
	int budget_base;           /* [C] attempts before this engine started (retry budget) */
	int unresolved;            /* [C] needs not yet final */
	int queued;                /* [C] handed to a worker, not yet back */
	int admitted;              /* [C] holds a worker (counted in e->nadmitted) */
	int waiting_worker;        /* [C] in e->waitq: ready, every worker busy */
	json_t *outputs, *metrics; /* [C] results once done */
	json_t *with;              /* [C] resolved inputs of the current attempt */
	char cache_key[65];        /* [C] inputs hash ("" when not cacheable) */
	double next_at;            /* [C] monotonic time of the next attempt (retrying) */
	double deadline;           /* [C] monotonic timeout of the running attempt, 0 none */
	double started;            /* [C] monotonic start of the running attempt */
	double started_wall;       /* [C] wall start of the first attempt (view) */
	double finished_wall;      /* [C] wall end (view) */
	int timed_out;             /* [C] the coordinator raised cancel for the timeout */
	volatile int cancel;       /* raised by the coordinator, read by the kind */
	/* [W] results of the attempt that just finished */
	int rc;
	enum tf_fail_class failure;
	int exit_code;
	char err[512];
	json_t *res_outputs, *res_metrics;
	double ended;      /* monotonic end of the attempt */
	char log_key[256]; /* object key of the uploaded log, "" if none */
	char log_err[400]; /* why a log was not uploaded, "" if it was (or there was none) */
	/* progress, under e->mu */
	char progress[512];
	int progress_dirty;
	double progress_flushed;    /* [C] */
	char reason[512];           /* [C] skip/fail reason for the view */
	char accel[48];             /* [C] slice type of the running attempt (train) */
	char placement[128];        /* [C] where the scheduler put it, "" when unknown */
	int chips;                  /* [C] chips held, 0 when unknown */
	int awaiting_slice;         /* [C] attempt recorded, waiting for the broker */
	int64_t slice_row;          /* [C] its broker ticket (slice_jobs row), 0 none */
	enum tf_fail_class reclaim; /* [C] the broker took the slice back: why (else NONE) */
	char reclaim_why[256];      /* [C] in words */
};

struct engine {
	const struct tf_engine_opts *o;
	struct tf_pipeline *p;
	char run_id[32];
	char token[33];   /* owner token this engine drives the run under */
	double hb_next;   /* [C] monotonic time of the next heartbeat */
	int lost_owner;   /* [C] another process took the run over: write nothing final */
	int cancel_asked; /* [C] `runs cancel` asked to stop: the run ends failed */
	int drain;        /* tf_engine_drain: ends interrupted, marked for the next daemon (mu) */
	char *home;
	char *storage_url;
	struct tf_store *db; /* coordinator's handle */
	struct estep *steps;
	size_t n;
	size_t **dependents; /* dependents[i]: steps that need step i */
	size_t *ndependents;
	tf_step_kind_fn kinds[TF_STEP_LAST];

	pthread_mutex_t mu;
	pthread_cond_t coord_cv; /* coordinator: a step finished, a signal, a stop */
	pthread_cond_t work_cv;  /* workers: work queued or quit */
	struct estep **queue;    /* ring of steps to run (capacity n) */
	size_t qhead, qlen;
	struct estep **done; /* finished attempts awaiting the coordinator */
	size_t ndone;
	int quit;                 /* workers exit */
	volatile int interrupted; /* Ctrl-C / SIGTERM seen (under mu) */
	int coord_busy;           /* the baton: a thread is running a round (under mu) */
	int main_blocked;         /* drive waits for the baton (under mu) */
	int main_look;            /* [C] the last round left work for drive (deadlines etc.) */
	int complete;             /* [C] nothing is left to do: drive ends the run */
	int fatal;                /* a round failed (database error): its code (under mu) */
	int progress_any;         /* some step has an unflushed progress line (under mu) */
	int nrunning;             /* [C] steps queued or running */
	int nadmitted;            /* [C] steps holding a worker (at most nworkers) */
	struct estep **waitq;     /* [C] ring of steps waiting for a worker (capacity n) */
	size_t wq_head, wq_len;
	int stopping;                 /* [C] interrupted: cancelling, no new attempts */
	int retry_hint;               /* [C] a step may be retrying (cleared by the scan) */
	int timeout_hint;             /* [C] a running attempt may have a deadline */
	int cache_hits;               /* [C] steps taken from the cache in this process */
	size_t *ready, nready;        /* [C] steps whose needs became final */
	struct estep **start;         /* [C] scratch: attempts started in a round */
	struct estep **batch;         /* [C] scratch: finished attempts taken in a round */
	struct tf_objstore *coord_os; /* [C] object store for cache keys (NULL: outputs only) */
	pthread_t *workers;
	int nworkers;
	struct tf_view *view;
	unsigned rng;             /* jitter */
	struct tf_broker *broker; /* [C] slices for train steps (created on first use) */
	int slice_poll;           /* [C] attempts wait for or hold a slice: drive polls */
	int run_priority;         /* the run's scheduling class (runs.priority, project) */
	char run_project[64];
};

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

static char *canon(const json_t *v)
{
	if (!v)
		return tf_xstrdup("null");
	char *s = json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
	return s ? s : tf_xstrdup("null");
}

static int failure_retryable(const struct tf_retry_policy *p, enum tf_fail_class f)
{
	enum tf_failure_class c;
	switch (f) {
	case TF_FAIL_ERROR:
		c = TF_FAILURE_ERROR;
		break;
	case TF_FAIL_TIMEOUT:
		c = TF_FAILURE_TIMEOUT;
		break;
	case TF_FAIL_PREEMPTED:
		c = TF_FAILURE_PREEMPTED;
		break;
	case TF_FAIL_INFRA:
		c = TF_FAILURE_INFRA;
		break;
	default:
		return 0;
	}
	return (p->on & (1u << c)) != 0;
}

/* ---- references ---------------------------------------------------------------------- */

static json_t *lookup(void *ctx, const struct tf_ref *ref)
{
	struct engine *e = ctx;
	if (ref->kind == TF_REF_PARAM)
		return tf_pipeline_lookup_param(e->p, ref);
	int si = ref->step_index;
	if (si < 0 && ref->step)
		si = tf_pipeline_step_index(e->p, ref->step);
	if (si < 0 || (size_t)si >= e->n)
		return NULL;
	json_t *src = ref->kind == TF_REF_OUTPUT ? e->steps[si].outputs : e->steps[si].metrics;
	json_t *v = src ? json_object_get(src, ref->name) : NULL;
	return v ? json_incref(v) : NULL;
}

/* ---- the step cache ------------------------------------------------------------------ */

/* The step's cache key into out; -errno with err set when a `cache_inputs` file cannot be
 * read. */
static int cache_key(struct engine *e, struct estep *s, struct tf_objstore *os, char out[65],
                     char *err, size_t errlen)
{
	struct tf_sha256 *h = tf_sha256_new();
	char *w = canon(s->with);
	tf_sha256_update_str(h, "tpuflow-step-cache-2");
	tf_sha256_update_str(h, TF_VERSION);
	tf_sha256_update_str(h, os ? tf_objstore_url(os) : e->storage_url);
	tf_sha256_update_str(h, tf_step_type_name(s->def->type));
	tf_sha256_update_str(h, s->def->name);
	tf_sha256_update_str(h, s->def->accelerator);
	tf_sha256_update_str(h, w);
	free(w);
	int rc = 0;
	for (size_t i = 0; i < s->def->ncache_inputs && rc == 0; i++) {
		tf_sha256_update_str(h, s->def->cache_inputs[i]);
		rc = tf_sha256_update_file(h, s->def->cache_inputs[i]);
		if (rc)
			snprintf(err, errlen, "cache_inputs: cannot read '%.300s': %s",
			         s->def->cache_inputs[i], strerror(-rc));
	}
	for (size_t i = 0; i < s->def->nneeds; i++) {
		struct estep *u = &e->steps[s->def->needs[i]];
		char *a = canon(u->outputs), *b = canon(u->metrics);
		tf_sha256_update_str(h, u->def->name);
		tf_sha256_update_str(h, a);
		tf_sha256_update_str(h, b);
		free(a);
		free(b);
		/* Digest of upstream artifacts that are objects in the store. */
		const char *k;
		json_t *v;
		json_object_foreach(u->outputs, k, v)
		{
			struct tf_obj_info info;
			const char *key = json_string_value(v);
			if (!os || !key || tf_objstore_key_check(key) ||
			    tf_objstore_head(os, key, &info))
				continue;
			char buf[160];
			snprintf(buf, sizeof(buf), "%llu/%s/%08x", (unsigned long long)info.size,
			         info.etag, info.has_crc32c ? info.crc32c : 0u);
			tf_sha256_update_str(h, buf);
		}
	}
	tf_sha256_final(h, out);
	return rc;
}

/* Whether the store still holds what a cached step left there: every object recorded as its
 * artifact, and at least one object under each output that names a prefix ("…/": a
 * checkpoint, a bundle). Else *missing says what is gone. */
static int cache_in_store(struct engine *e, struct tf_objstore *os, const char *run,
                          const char *step, json_t *outputs, char *missing, size_t len)
{
	if (!os) {
		snprintf(missing, len, "the store %.300s cannot be opened", e->storage_url);
		return 0;
	}
	int ok = 1;
	struct tf_stmt *q = tf_store_query(
	    e->db, "SELECT uri FROM artifacts WHERE run_id=? AND step=? ORDER BY name", "tt", run,
	    step);
	if (!q)
		return 0;
	while (ok && tf_stmt_step(q) == 1) {
		struct tf_obj_info info;
		const char *uri = tf_stmt_text(q, 0);
		if (uri && tf_objstore_head(os, uri, &info)) {
			snprintf(missing, len, "object '%.300s' is not in the store", uri);
			ok = 0;
		}
	}
	tf_stmt_done(q);
	const char *k;
	json_t *v;
	json_object_foreach(outputs, k, v)
	{
		const char *key = json_string_value(v);
		size_t n = key ? strlen(key) : 0;
		if (!ok || n < 2 || n > 1024 || key[n - 1] != '/')
			continue;
		char dir[1025];
		memcpy(dir, key, n - 1);
		dir[n - 1] = '\0';
		if (tf_objstore_key_check(dir))
			continue; /* not a place in the store */
		struct tf_obj_list l = {0};
		if (tf_objstore_list(os, key, &l) || l.n == 0) {
			snprintf(missing, len, "nothing under '%.300s' in the store", key);
			ok = 0;
		}
		tf_obj_list_release(&l);
	}
	return ok;
}

/* A valid cache entry for `key`: 0 with *outputs and *metrics (caller owns), -ENOENT when
 * there is none or what it names is no longer in the store (an event says so). */
static int cache_lookup(struct engine *e, struct tf_objstore *os, struct estep *s, const char *key,
                        json_t **outputs, json_t **metrics)
{
	struct tf_stmt *q = tf_store_query(
	    e->db, "SELECT outputs, metrics, run_id, step FROM step_cache WHERE key=?", "t", key);
	if (!q)
		return -EIO;
	int rc = tf_stmt_step(q);
	char missing[400] = "";
	if (rc == 1) {
		*outputs = json_loads(tf_stmt_text(q, 0), 0, NULL);
		*metrics = json_loads(tf_stmt_text(q, 1), 0, NULL);
		rc = (*outputs && *metrics) ? 0 : -ENOENT;
		if (rc == 0 && !cache_in_store(e, os, tf_stmt_text(q, 2), tf_stmt_text(q, 3),
		                               *outputs, missing, sizeof(missing)))
			rc = -ENOENT;
		if (rc) {
			json_decref(*outputs);
			json_decref(*metrics);
			*outputs = *metrics = NULL;
		}
	} else if (rc == 0) {
		rc = -ENOENT;
	}
	tf_stmt_done(q);
	if (missing[0]) {
		char msg[500];
		snprintf(msg, sizeof(msg), "cache entry not used: %s", missing);
		tf_event_add(e->db, e->run_id, s->def->name, 0, "cache", msg);
	}
	return rc;
}

/* Whether the step's results may come from the cache in this run (not `--no-cache`, not
 * `--force STEP`). */
static int cache_allowed(const struct engine *e, const struct estep *s)
{
	if (e->o->no_cache)
		return 0;
	for (size_t i = 0; i < e->o->nforce; i++)
		if (!strcmp(e->o->force[i], s->def->name))
			return 0;
	return 1;
}

/* ---- workers ------------------------------------------------------------------------- */

struct wctx {
	struct engine *e;
	struct tf_store *db;
	struct tf_objstore *os;
};

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

void tf_step_run_child(struct tf_step_run *r, long pgid)
{
	if (r->db && pgid > 0 && tf_attempt_set_pgid(r->db, r->run_id, r->step, r->attempt, pgid))
		tf_warn("run '%s' step '%s': process group %ld not recorded: %s", r->run_id,
		        r->step, pgid, tf_store_errmsg(r->db));
}

int tf_step_run_workdir(struct tf_step_run *r)
{
	int rc = tf_mkdir_p(r->workdir);
	if (rc)
		snprintf(r->err, sizeof(r->err), "cannot create work directory '%s': %s",
		         r->workdir, strerror(-rc));
	return rc;
}

/* Outputs that name objects in the store are recorded as the step's artifacts (size and
 * checksum as the store reports them). Best effort: a failure here fails nothing. */
static void record_artifacts(struct wctx *w, const char *run, const char *step, json_t *outputs)
{
	const char *k;
	json_t *v;
	json_object_foreach(outputs, k, v)
	{
		struct tf_obj_info info;
		const char *key = json_string_value(v);
		if (!key || tf_objstore_key_check(key) || tf_objstore_head(w->os, key, &info))
			continue;
		char digest[100];
		if (info.has_crc32c)
			snprintf(digest, sizeof(digest), "crc32c:%08x", info.crc32c);
		else
			snprintf(digest, sizeof(digest), "etag:%s", info.etag);
		if (tf_store_run(
		        w->db,
		        "INSERT OR REPLACE INTO artifacts(run_id, step, name, uri, digest, size, "
		        "created_at) VALUES(?,?,?,?,?,?,?)",
		        "tttttid", run, step, k, key, digest, (int64_t)info.size, tf_now_wall()))
			tf_warn("run '%s' step '%s': artifact '%s' not recorded: %s", run, step, k,
			        tf_store_errmsg(w->db));
	}
}

static void run_one(struct wctx *w, struct estep *s, int attempt, json_t *with)
{
	struct engine *e = w->e;
	char *workdir = tf_xasprintf("%s/work/%s/%s", e->home, e->run_id, s->def->name);
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
	    .outputs = json_object(),
	    .metrics = json_object(),
	    .failure = TF_FAIL_ERROR,
	    .exit_code = -1,
	};
	struct progress_ctx pc = {.e = e, .s = s, .log_path = log_path, .s_workdir = workdir};
	r.progress = progress_cb;
	r.progress_data = &pc;
	int rc = 0;
	char err[512] = "";
	if (!w->os) {
		rc = tf_objstore_open(e->storage_url, &w->os, err, sizeof(err));
		if (rc) {
			snprintf(r.err, sizeof(r.err), "object store: %.480s", err);
			r.failure = TF_FAIL_INFRA;
			goto out;
		}
	}
	if (!w->db) {
		rc = tf_store_open_home(e->home, &w->db, err, sizeof(err));
		if (rc) {
			snprintf(r.err, sizeof(r.err), "%.500s", err);
			r.failure = TF_FAIL_INFRA;
			goto out;
		}
	}
	r.db = w->db;
	r.objstore = w->os;
	tf_step_kind_fn fn = e->kinds[s->def->type];
	if (!fn) {
		snprintf(r.err, sizeof(r.err),
		         "step type '%s' is not available in this build of tpuflow",
		         tf_step_type_name(s->def->type));
		r.failure = TF_FAIL_ERROR;
		rc = -ENOSYS;
		goto out;
	}
	rc = fn(&r);
	if (pc.log) {
		fclose(pc.log);
		pc.log = NULL;
	}
	if (rc && !r.err[0])
		snprintf(r.err, sizeof(r.err), "step failed: %s", strerror(rc < 0 ? -rc : rc));
	if (rc == 0)
		record_artifacts(w, e->run_id, s->def->name, r.outputs);
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
			snprintf(s->log_err, sizeof(s->log_err),
			         "log not uploaded to the object store (%.150s); it stays in %.150s",
			         w->os ? tf_objstore_errmsg(w->os) : "the store cannot be opened",
			         log_path);
			tf_warn("run '%s' step '%s' attempt %d: %s", e->run_id, s->def->name, attempt,
			        s->log_err);
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

static int coord_round(struct engine *e, int by_worker);

static void *worker_main(void *arg)
{
	struct wctx *w = arg;
	struct engine *e = w->e;
	pthread_mutex_lock(&e->mu);
	for (;;) {
		while (!e->quit && e->qlen == 0)
			pthread_cond_wait(&e->work_cv, &e->mu);
		if (e->quit && e->qlen == 0)
			break;
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
			continue; /* the holder takes it before it lets go of the baton */
		/* Coordinate the finish ourselves: no wakeup of another thread on the way. */
		e->coord_busy = 1;
		int look = 0, rc = 0;
		while (e->ndone && !e->fatal && !e->complete) {
			if (e->qlen)
				pthread_cond_signal(&e->work_cv); /* left for us, but we are busy */
			pthread_mutex_unlock(&e->mu);
			rc = coord_round(e, 1);
			look |= e->main_look;
			pthread_mutex_lock(&e->mu);
			if (rc) {
				e->fatal = rc;
				break;
			}
		}
		e->coord_busy = 0;
		if (look || rc || e->main_blocked || e->interrupted)
			pthread_cond_signal(&e->coord_cv);
	}
	pthread_mutex_unlock(&e->mu);
	tf_store_close(w->db);
	tf_objstore_free(w->os);
	free(w);
	return NULL;
}

/* ---- the coordinator ----------------------------------------------------------------- */

static void view_update(struct engine *e)
{
	if (!e->view)
		return;
	struct tf_view_row *rows = tf_xcalloc(e->n, sizeof(*rows));
	double now = tf_now_wall();
	pthread_mutex_lock(&e->mu);
	for (size_t i = 0; i < e->n; i++) {
		struct estep *s = &e->steps[i];
		rows[i].name = s->def->name;
		rows[i].type = tf_step_type_name(s->def->type);
		/* a placed train step waiting for a worker is running in the database (its
		 * attempt began with the slice request) but queued for people */
		rows[i].state = tf_step_state_name(s->waiting_worker ? TF_STEP_QUEUED : s->state);
		rows[i].attempt = s->attempts;
		rows[i].duration =
		    s->started_wall > 0
		        ? (s->finished_wall > 0 ? s->finished_wall : now) - s->started_wall
		        : -1;
		rows[i].progress = s->state == TF_STEP_RUNNING ? tf_xstrdup(s->progress) : NULL;
		rows[i].reason = s->reason[0] ? s->reason : NULL;
	}
	pthread_mutex_unlock(&e->mu);
	tf_view_update(e->view, rows, e->n);
	for (size_t i = 0; i < e->n; i++)
		free(rows[i].progress);
	free(rows);
}

static void set_reason(struct estep *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_reason(struct estep *s, const char *fmt, ...)
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

static int step_final(struct engine *e, struct estep *s, enum tf_step_state to,
                      const struct tf_step_update *u, size_t *ready, size_t *nready)
{
	int rc = tf_step_set_state(e->db, e->run_id, s->def->name, to, u);
	if (rc)
		return rc;
	s->state = to;
	s->finished_wall = tf_now_wall();
	if (u && u->reason)
		snprintf(s->reason, sizeof(s->reason), "%s", u->reason);
	resolved(e, s, ready, nready);
	return 0;
}

/* ---- slices for train steps -------------------------------------------------------- */

/* Every process on a home asks the same broker (orchestrator/broker.h): the database decides
 * who holds which chips. Waiting attempts poll it every SLICE_POLL_WAIT_S (a release in this
 * process decides at once), running ones every SLICE_POLL_HOLD_S to learn of a reclaim. */
#define SLICE_POLL_WAIT_S 0.2
#define SLICE_POLL_HOLD_S 0.5

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
static int sched_dispatch(struct engine *e, int decide, struct estep **start, size_t *nstart)
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
			set_reason(s, "waiting for a %s slice: %s", s->accel,
			           st.reason[0] ? st.reason : "not decided yet");
		} else if (st.state == TF_SLICE_RECLAIMED && !s->reclaim && s->queued) {
			s->reclaim = st.reclaim;
			snprintf(s->reclaim_why, sizeof(s->reclaim_why), "%s", st.reason);
			set_reason(s, "%s: checkpointing to give the slice back", st.reason);
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
static int slice_release(struct engine *e, struct estep *s, double *seconds)
{
	*seconds = 0;
	if (!e->broker || !s->slice_row)
		return 0;
	int rc = tf_broker_release(e->broker, s->slice_row, tf_now_wall(), seconds);
	s->slice_row = 0;
	s->awaiting_slice = 0;
	return rc == -ENOENT ? 0 : rc;
}

/* An attempt begins (state pending, queued or retrying): running + attempt row. */
static int begin_attempt(struct engine *e, struct estep *s)
{
	char *w = canon(s->with);
	struct tf_step_update u = {.with_json = w,
	                           .cache_key = s->cache_key[0] ? s->cache_key : NULL};
	int rc = tf_step_set_state(e->db, e->run_id, s->def->name, TF_STEP_RUNNING, &u);
	free(w);
	if (rc)
		return rc;
	s->state = TF_STEP_RUNNING;
	s->attempts++;
	rc = tf_attempt_create(e->db, e->run_id, s->def->name, s->attempts);
	if (rc)
		return rc;
	if (s->started_wall <= 0)
		s->started_wall = tf_now_wall();
	s->reason[0] = '\0';
	return 0;
}

/* A step ready to run takes a worker when one is free (handed over after the commit; its
 * timeout starts then), else it waits in e->waitq, in state queued (a train step whose slice
 * was placed stays running: its attempt began with the slice request). */
static int admit(struct engine *e, struct estep *s, struct estep **start, size_t *nstart)
{
	int rc = 0;
	if (e->nadmitted >= e->nworkers) {
		e->waitq[(e->wq_head + e->wq_len) % e->n] = s;
		e->wq_len++;
		s->waiting_worker = 1;
		if (s->state != TF_STEP_RUNNING) {
			struct tf_step_update u = {.reason = "waiting for a worker"};
			rc = tf_step_set_state(e->db, e->run_id, s->def->name, TF_STEP_QUEUED, &u);
			if (rc == 0)
				s->state = TF_STEP_QUEUED;
		}
		set_reason(s, "waiting for a worker");
		return rc;
	}
	if (s->state != TF_STEP_RUNNING)
		rc = begin_attempt(e, s);
	if (rc)
		return rc;
	s->reason[0] = '\0';
	s->admitted = 1;
	e->nadmitted++;
	start[(*nstart)++] = s;
	return 0;
}

/* Workers that finished attempts take the steps waiting for one, oldest first. */
static int admit_waiting(struct engine *e, struct estep **start, size_t *nstart)
{
	int rc = 0;
	while (rc == 0 && e->wq_len && e->nadmitted < e->nworkers) {
		struct estep *s = e->waitq[e->wq_head];
		e->wq_head = (e->wq_head + 1) % e->n;
		e->wq_len--;
		s->waiting_worker = 0;
		rc = admit(e, s, start, nstart);
	}
	return rc;
}

/* Starts an attempt of a step that is pending or retrying: a train step asks the scheduler
 * for a slice first (unless Slurm places it); every step then waits for a worker if none is
 * free (admit). */
static int start_attempt(struct engine *e, struct estep *s, struct estep **start, size_t *nstart)
{
	if (s->def->type != TF_STEP_TRAIN)
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
	set_reason(s, "waiting for a %s slice", s->accel);
	return sched_dispatch(e, 1, start, nstart);
}

/* A step whose needs are all final: skip it, fail it, take it from the cache, or start it. */
static int decide(struct engine *e, struct estep *s, struct tf_objstore *os, struct estep **start,
                  size_t *nstart, size_t *ready, size_t *nready, int *cache_hits)
{
	char err[512] = "";
	for (size_t i = 0; i < s->def->nneeds; i++) {
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
	s->with = tf_step_render_with(s->def, lookup, e, err, sizeof(err));
	if (!s->with) {
		char why[700];
		snprintf(why, sizeof(why), "cannot resolve inputs: %s", err);
		struct tf_step_update up = {.reason = why};
		return step_final(e, s, TF_STEP_FAILED, &up, ready, nready);
	}
	s->cache_key[0] = '\0';
	if (s->def->cache && tf_engine_kind_cacheable(s->def->type)) {
		json_t *o = NULL, *m = NULL;
		if (cache_key(e, s, os, s->cache_key, err, sizeof(err))) {
			struct tf_step_update up = {.reason = err};
			s->cache_key[0] = '\0';
			return step_final(e, s, TF_STEP_FAILED, &up, ready, nready);
		}
		if (cache_allowed(e, s) && cache_lookup(e, os, s, s->cache_key, &o, &m) == 0) {
			char *os_ = canon(o), *ms = canon(m), *w = canon(s->with);
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
	return start_attempt(e, s, start, nstart);
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
	}
	if (s->def->type == TF_STEP_TRAIN && s->slice_row) {
		/* The slice was held for the whole attempt, successful or not. */
		double secs = 0;
		rc = slice_release(e, s, &secs);
		if (rc == 0)
			rc = tf_step_add_slice(e->db, e->run_id, s->def->name, s->accel, secs);
		if (rc == 0)
			rc = sched_dispatch(e, 1, start, nstart);
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
		rc = tf_attempt_set_state(e->db, e->run_id, s->def->name, s->attempts,
		                          TF_ATTEMPT_SUCCEEDED, &ar);
		if (rc)
			return rc;
		char *o = canon(s->res_outputs), *m = canon(s->res_metrics);
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
		rc = tf_attempt_set_state(e->db, e->run_id, s->def->name, s->attempts,
		                          TF_ATTEMPT_CANCELLED, &ar);
		if (rc == 0)
			rc = tf_step_set_state(e->db, e->run_id, s->def->name, TF_STEP_PENDING,
			                       NULL);
		if (rc == 0)
			s->state = TF_STEP_PENDING;
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
		rc = tf_attempt_set_state(e->db, e->run_id, s->def->name, s->attempts,
		                          TF_ATTEMPT_FAILED, &ar);
		struct tf_step_update up = {.reason = s->err, .next_attempt_at = tf_now_wall()};
		if (rc == 0)
			rc = tf_step_set_state(e->db, e->run_id, s->def->name, TF_STEP_RETRYING,
			                       &up);
		if (rc)
			return rc;
		s->state = TF_STEP_RETRYING;
		return start_attempt(e, s, start, nstart);
	}
	int retries_used = s->attempts - s->budget_base - 1;
	const struct tf_retry_policy *pol = &s->def->retries;
	/* A kind missing from this build (-ENOSYS) fails the same way every time. */
	int retry = !interrupted && s->rc != -ENOSYS && failure_retryable(pol, ar.failure) &&
	            retries_used < pol->limit;
	if (retry)
		ar.backoff = tf_engine_backoff(pol, retries_used + 1, u01(e));
	rc = tf_attempt_set_state(e->db, e->run_id, s->def->name, s->attempts, TF_ATTEMPT_FAILED,
	                          &ar);
	if (rc)
		return rc;
	if (retry) {
		struct tf_step_update up = {.reason = s->err,
		                            .next_attempt_at = tf_now_wall() + ar.backoff};
		rc = tf_step_set_state(e->db, e->run_id, s->def->name, TF_STEP_RETRYING, &up);
		if (rc)
			return rc;
		s->state = TF_STEP_RETRYING;
		e->retry_hint = 1;
		set_reason(s, "attempt %d %s: %s; retry in %.2fs", s->attempts,
		           tf_failure_name(ar.failure), s->err, ar.backoff);
		s->next_at = tf_now_monotonic() + ar.backoff;
		if (ar.backoff <= 0)
			return start_attempt(e, s, start, nstart);
		return 0;
	}
	char why[700];
	snprintf(why, sizeof(why), "%s (%s, attempt %d)", s->err, tf_failure_name(ar.failure),
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

/* Hands attempts whose start is committed to the workers. A worker coordinating (by_worker)
 * keeps one of them for itself: it pops the queue right after the round, so waking another
 * thread for that one would only add a handoff. */
static void hand_over(struct engine *e, struct estep **start, size_t nstart, int by_worker)
{
	size_t queued = 0;
	pthread_mutex_lock(&e->mu);
	for (size_t i = 0; i < nstart; i++) {
		struct estep *s = start[i];
		if (s->queued)
			continue; /* already handed over */
		s->cancel = 0;
		s->timed_out = 0;
		s->started = tf_now_monotonic();
		s->deadline = s->def->timeout > 0 ? s->started + s->def->timeout : 0;
		if (s->deadline > 0)
			e->timeout_hint = 1;
		s->queued = 1;
		e->nrunning++;
		e->queue[(e->qhead + e->qlen) % e->n] = s;
		e->qlen++;
		queued++;
	}
	if (by_worker && queued)
		queued--;
	if (queued == 1)
		pthread_cond_signal(&e->work_cv);
	else if (queued > 1)
		pthread_cond_broadcast(&e->work_cv);
	pthread_mutex_unlock(&e->mu);
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

static int coord_round(struct engine *e, int by_worker)
{
	size_t nbatch = 0, nstart = 0, handed = 0,
	       chunk = (size_t)(e->nworkers > 0 ? e->nworkers : 1);
	struct estep **batch = e->batch, **start = e->start;
	int rc, interrupted, progress;

	if (tf_now_monotonic() >= e->hb_next && !e->lost_owner) {
		int cancel = 0;
		rc = tf_run_heartbeat(e->db, e->run_id, e->token, &cancel);
		e->hb_next = tf_now_monotonic() + TF_RUN_HEARTBEAT_S;
		if (rc == -ESTALE) {
			tf_error("run '%s' was taken over by another process: stopping here",
			         e->run_id);
			e->lost_owner = 1;
		} else if (rc) {
			tf_warn("run '%s': heartbeat not recorded: %s", e->run_id,
			        tf_store_errmsg(e->db));
		} else if (cancel && !e->cancel_asked) {
			tf_info("run '%s': cancel requested: stopping", e->run_id);
			e->cancel_asked = 1;
		}
		if (e->lost_owner || e->cancel_asked) {
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
		rc = finished(e, batch[i], start, &nstart, e->ready, &e->nready, e->stopping);
	/* Stopping: attempts still waiting for a slice or a worker never ran. */
	for (size_t i = 0; e->stopping && !e->lost_owner && i < e->n && rc == 0; i++) {
		struct estep *s = &e->steps[i];
		if (!s->awaiting_slice && !s->waiting_worker)
			continue;
		double secs;
		rc = slice_release(e, s, &secs);
		struct tf_attempt_result ar = {
		    .failure = TF_FAIL_CANCELLED,
		    .exit_code = -1,
		    .error = s->waiting_worker ? "interrupted while waiting for a worker"
		                               : "interrupted while waiting for a slice"};
		if (rc == 0 && s->state == TF_STEP_RUNNING) /* queued steps have no attempt yet */
			rc = tf_attempt_set_state(e->db, e->run_id, s->def->name, s->attempts,
			                          TF_ATTEMPT_CANCELLED, &ar);
		if (rc == 0)
			rc = tf_step_set_state(e->db, e->run_id, s->def->name, TF_STEP_PENDING,
			                       NULL);
		s->state = TF_STEP_PENDING;
		s->waiting_worker = 0;
	}
	if (e->stopping)
		e->wq_len = 0;
	/* Slices: grants for waiting attempts, reclaims of running ones. */
	if (rc == 0 && e->broker && !e->stopping)
		rc = sched_dispatch(e, 0, start, &nstart);
	/* Workers freed by the finished attempts take waiting steps. */
	if (rc == 0 && !e->stopping)
		rc = admit_waiting(e, start, &nstart);
	/* Retries whose backoff has passed. */
	if (e->retry_hint && !e->lost_owner) {
		int any = 0;
		for (size_t i = 0; i < e->n && rc == 0; i++) {
			struct estep *s = &e->steps[i];
			if (s->state != TF_STEP_RETRYING)
				continue;
			if (e->stopping) {
				rc = tf_step_set_state(e->db, e->run_id, s->def->name,
				                       TF_STEP_PENDING, NULL);
				s->state = TF_STEP_PENDING;
			} else if (s->next_at <= now) {
				rc = start_attempt(e, s, start, &nstart);
			} else {
				any = 1;
			}
		}
		e->retry_hint = any || rc;
	}
	/* Steps whose needs are final (the list grows while we decide). */
	for (size_t i = 0; i < e->nready && rc == 0; i++) {
		struct estep *s = &e->steps[e->ready[i]];
		if (s->state != TF_STEP_PENDING || e->stopping)
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
	view_update(e);
	int waiting = 0;
	if (e->nrunning == 0) {
		for (size_t i = 0; i < e->n; i++)
			if (e->steps[i].state == TF_STEP_RETRYING || e->steps[i].awaiting_slice ||
			    e->steps[i].waiting_worker)
				waiting = 1;
		if (e->stopping || (!waiting && e->nready == 0))
			e->complete = 1;
	}
	e->main_look = e->complete || e->stopping || e->retry_hint || e->timeout_hint || e->view ||
	               e->slice_poll || waiting;
	return 0;
fail:
	tf_error("run '%s': %s", e->run_id, tf_store_errmsg(e->db));
	e->main_look = 1;
	return rc;
}

static int worker_count(const struct engine *e)
{
	int n = e->o->workers > 0 ? e->o->workers : 8;
	return (size_t)n > e->n ? (int)(e->n ? e->n : 1) : n;
}

/* The first round, on the thread that calls tf_engine_start, inside the transaction that
 * claimed the run: the claim, the steps' rows and the first attempts are one commit (one
 * fsync between a submitted run and its first step running), and no thread handoff comes
 * before it. The attempts it starts wait in the queue for the workers start_threads makes. */
static int first_round(struct engine *e)
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
	e->nworkers = worker_count(e); /* the round's chunk size; start_threads makes them */

	/* Initial frontier: pending steps with all needs final. */
	for (size_t i = 0; i < e->n; i++)
		if (e->steps[i].state == TF_STEP_PENDING && e->steps[i].unresolved == 0)
			e->ready[e->nready++] = i;
	/* the first round runs even with nothing ready (a finished resume ends in it) */
	return coord_round(e, 0);
}

/* Drives the run until every step is final or the run is interrupted: runs the rounds
 * workers leave to it (see the top of this file) and sleeps otherwise. */
static int drive(struct engine *e, int *cache_hits)
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
		int go = timer || e->ndone || e->nready || (e->interrupted && !e->stopping);
		timer = 0;
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
				if (e->view && e->nrunning > 0) {
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
				continue;
			}
		}
		e->coord_busy = 1;
		pthread_mutex_unlock(&e->mu);
		rc = coord_round(e, 0);
		pthread_mutex_lock(&e->mu);
		e->coord_busy = 0;
		if (rc) {
			e->fatal = rc;
			break;
		}
	}
	/* Workers coordinate no more: the run is over (or failed). */
	e->complete = 1;
	pthread_mutex_unlock(&e->mu);
	*cache_hits = e->cache_hits;
	tf_objstore_free(e->coord_os);
	e->coord_os = NULL;
	free(e->ready);
	free(e->start);
	free(e->batch);
	e->ready = NULL;
	e->start = e->batch = NULL;
	return rc;
}

/* ---- setup and teardown -------------------------------------------------------------- */

static void engine_release(struct engine *e)
{
	for (size_t i = 0; i < e->n; i++) {
		json_decref(e->steps[i].outputs);
		json_decref(e->steps[i].metrics);
		json_decref(e->steps[i].with);
		json_decref(e->steps[i].res_outputs);
		json_decref(e->steps[i].res_metrics);
		free(e->dependents ? e->dependents[i] : NULL);
	}
	free(e->steps);
	free(e->dependents);
	free(e->ndependents);
	free(e->queue);
	free(e->done);
	free(e->waitq);
	free(e->workers);
	free(e->ready);
	free(e->start);
	free(e->batch);
	tf_objstore_free(e->coord_os);
	tf_view_free(e->view);
	tf_broker_free(e->broker);
	if (e->db != e->o->db)
		tf_store_close(e->db); /* a borrowed handle is the caller's */
	tf_pipeline_free(e->p);
	free(e->home);
	free(e->storage_url);
	pthread_mutex_destroy(&e->mu);
	pthread_cond_destroy(&e->coord_cv);
	pthread_cond_destroy(&e->work_cv);
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
	pthread_cond_init(&e->work_cv, NULL);
	for (int t = 0; t < TF_STEP_LAST; t++)
		e->kinds[t] =
		    o->kinds[t] ? o->kinds[t] : tf_engine_builtin_kind((enum tf_step_type)t);
	e->rng = (unsigned)getpid() ^ (unsigned)(tf_now_monotonic() * 1e6);
	if (tf_random_hex(e->token, 16))
		snprintf(e->token, sizeof(e->token), "%08x%08x%016llx", (unsigned)getpid(), e->rng,
		         (unsigned long long)(tf_now_wall() * 1e6));
	e->hb_next = tf_now_monotonic() + TF_RUN_HEARTBEAT_S;
	return 0;
}

/* A killed process never uploaded the log of the attempt it was running: the log is still
 * in the local work directory, so it goes to the object store now, where `runs logs` and the
 * next attempt's readers find attempt logs. Returns its key (caller frees) or NULL. */
static char *upload_lost_log(struct engine *e, const char *step, int attempt)
{
	char *path =
	    tf_xasprintf("%s/work/%s/%s/attempt-%d.log", e->home, e->run_id, step, attempt);
	char *key = tf_xasprintf("runs/%s/%s/logs/attempt-%d.log", e->run_id, step, attempt);
	struct tf_objstore *os = NULL;
	char err[256];
	struct stat sb;
	if (stat(path, &sb) || sb.st_size == 0 ||
	    tf_objstore_open(e->storage_url, &os, err, sizeof(err)) ||
	    tf_objstore_put_file(os, key, path, 0)) {
		if (stat(path, &sb) == 0 && sb.st_size > 0)
			tf_warn("run '%s' step '%s' attempt %d: its log was not uploaded; it stays in %s",
			        e->run_id, step, attempt, path);
		free(key);
		key = NULL;
	}
	tf_objstore_free(os);
	free(path);
	return key;
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
		if (!resuming || tf_step_state_done(s->state))
			continue;
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
				char *key = upload_lost_log(e, s->def->name, s->attempts);
				struct tf_attempt_result ar = {
				    .failure = TF_FAIL_INFRA,
				    .exit_code = -1,
				    .error = "the engine stopped while it ran",
				    .log_key = key};
				rc = tf_attempt_set_state(e->db, e->run_id, s->def->name,
				                          s->attempts, TF_ATTEMPT_LOST, &ar);
				free(key);
			}
		}
		if (rc == 0 && s->state != TF_STEP_PENDING) {
			rc = tf_step_set_state(e->db, e->run_id, s->def->name, TF_STEP_PENDING,
			                       NULL);
			s->state = TF_STEP_PENDING;
		}
	}
	/* slices the dead process held are no longer held (time unknown: not accounted) */
	if (rc == 0 && resuming)
		rc = tf_slice_jobs_close_run(e->db, e->run_id, tf_now_wall());
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

static int start_threads(struct engine *e)
{
	e->nworkers = worker_count(e);
	e->workers = tf_xcalloc((size_t)e->nworkers, sizeof(*e->workers));
	for (int i = 0; i < e->nworkers; i++) {
		struct wctx *w = tf_xcalloc(1, sizeof(*w));
		w->e = e;
		if (pthread_create(&e->workers[i], NULL, worker_main, w)) {
			free(w);
			e->nworkers = i;
			return -EAGAIN;
		}
	}
	return 0;
}

static void stop_threads(struct engine *e)
{
	pthread_mutex_lock(&e->mu);
	e->quit = 1;
	pthread_cond_broadcast(&e->work_cv);
	pthread_mutex_unlock(&e->mu);
	for (int i = 0; i < e->nworkers; i++)
		pthread_join(e->workers[i], NULL);
	e->nworkers = 0;
}

static int execute(struct engine *e, struct tf_engine_result *res, char *err, size_t errlen)
{
	int cache_hits = 0, rc;
	enum tf_run_state final;

	if (e->o->out)
		e->view = tf_view_new(e->o->out, e->o->tty, e->run_id, e->p->name);
	rc = start_threads(e);
	if (rc) {
		snprintf(err, errlen, "cannot start worker threads");
		stop_threads(e);
		return rc;
	}
	view_update(e);
	rc = drive(e, &cache_hits);
	stop_threads(e);
	/* logs the store refused during this run or an earlier one, now that it may be back */
	if (rc == 0 && !e->lost_owner)
		rc = tf_logs_upload_pending(e->db, e->storage_url, e->home, e->run_id, NULL, NULL);
	if (rc) {
		snprintf(err, errlen, "run '%s': %s", e->run_id, tf_store_errmsg(e->db));
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
		snprintf(err, errlen,
		         "run '%s' was taken over by another process ('runs resume --force'); "
		         "this one stopped without recording an end",
		         e->run_id);
		return -ESTALE;
	}
	if (e->cancel_asked) {
		final = TF_RUN_FAILED;
		snprintf(msg, sizeof(msg),
		         "cancelled ('tpuflow runs cancel'); 'tpuflow runs "
		         "retry %s' continues it",
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
		snprintf(msg, sizeof(msg), "stopped by a draining daemon; the next one continues it");
	rc = tf_run_finish(e->db, e->run_id, e->token, final, msg[0] ? msg : NULL,
	                   final == TF_RUN_INTERRUPTED && e->drain);
	if (rc == -ESTALE) {
		snprintf(err, errlen,
		         "run '%s' was taken over by another process before it ended here",
		         e->run_id);
		return rc;
	}
	if (rc) {
		snprintf(err, errlen, "run '%s': %s", e->run_id, tf_store_errmsg(e->db));
		return rc;
	}
	view_update(e);
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
		snprintf(err, errlen, "run '%s' already succeeded: nothing to %s", run,
		         flags & TF_ENGINE_RETRY ? "retry" : "resume");
	else
		snprintf(err, errlen,
		         "run '%s' is %s; retry is for failed or interrupted runs "
		         "(resume continues a run whose process died)",
		         run, tf_run_state_name(state));
	return -EALREADY;
}

static void busy_message(const char *run, const struct tf_run_owner *h, char *err, size_t errlen)
{
	snprintf(err, errlen,
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
                      const char *trigger, char run_id[32])
{
	json_t *params = json_object();
	for (size_t i = 0; i < nov; i++) /* a name from the command line runs up to its '=' */
		json_object_setn_new(params, ov[i].name, strcspn(ov[i].name, "="),
		                     json_string(ov[i].value));
	char *pj = canon(params);
	json_decref(params);
	struct tf_run_step_def *defs = tf_xcalloc(p->nsteps + 1, sizeof(*defs));
	for (size_t i = 0; i < p->nsteps; i++) {
		defs[i].name = p->steps[i].name;
		defs[i].type = tf_step_type_name(p->steps[i].type);
	}
	int own, rc = tf_store_join(st, &own);
	if (rc == 0)
		rc = tf_run_create(st, p->name, p->source, path, pj, storage, defs, p->nsteps, NULL,
		                   run_id);
	if (rc == 0 && trigger)
		rc = tf_store_run(st, "UPDATE runs SET trigger=? WHERE id=?", "tt", trigger, run_id);
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
	int rc = tf_pipeline_load_buffer(name, s->yaml, s->yaml_len, s->ov, s->nov, 0, &p, diags);
	if (rc) {
		snprintf(err, errlen, "pipeline '%s' has errors", name);
		return -EINVAL;
	}
	struct tf_engine_opts o = {.storage = s->storage};
	char *storage = default_storage(&o, p, home);
	int own;
	rc = tf_store_join(st, &own);
	if (rc == 0)
		rc = create_run(st, p, s->path, s->ov, s->nov, storage, s->trigger, run_id);
	if (rc == 0 && (s->has_priority || s->project))
		rc = tf_store_run(st,
		                  "UPDATE runs SET priority=CASE WHEN ? THEN ? ELSE priority END, "
		                  "project=coalesce(?, project) WHERE id=?",
		                  "iitt", (int64_t)(s->has_priority != 0), (int64_t)s->priority,
		                  s->project, run_id);
	rc = tf_store_leave(st, own, rc);
	if (rc)
		snprintf(err, errlen, "%s", tf_store_errmsg(st));
	free(storage);
	tf_pipeline_free(p);
	return rc;
}

/* ---- the handle ------------------------------------------------------------------------ */

/* The coordinator's database handle: the caller's (opts.db, a daemon reuses its handles) or
 * one of its own. */
static int open_db(struct engine *e, char *err, size_t errlen)
{
	if (e->o->db) {
		e->db = e->o->db;
		return 0;
	}
	return tf_store_open_home(e->home, &e->db, err, errlen);
}

struct tf_engine {
	struct engine e;          /* the run */
	struct tf_engine_opts o;  /* a copy (its strings are borrowed) */
	pthread_t driver;         /* runs execute() */
	int have_driver;
	int done;                 /* execute() returned (under e.mu) */
	int rc;                   /* its return */
	char err[1024];           /* its message */
	struct tf_engine_result res;
};

/* A new run from a file: loaded, then recorded pending, claimed (so no daemon can take it in
 * between) and its steps loaded in one transaction, left open for the first round. */
static int setup_new(struct engine *e, const struct tf_engine_req *rq, struct tf_diag_list *diags,
                     char *err, size_t errlen)
{
	const struct tf_engine_opts *o = e->o;
	int rc = tf_pipeline_load(rq->path, rq->ov, rq->nov, 0, &e->p, diags);
	if (rc) {
		snprintf(err, errlen, "pipeline '%s' has errors", rq->path);
		return -EINVAL;
	}
	for (size_t i = 0; i < o->nforce; i++)
		if (tf_pipeline_step_index(e->p, o->force[i]) < 0) {
			snprintf(err, errlen, "--force %.100s: pipeline '%.300s' has no such step",
			         o->force[i], rq->path);
			return -EINVAL;
		}
	rc = open_db(e, err, errlen);
	if (rc)
		return rc;
	e->storage_url = default_storage(o, e->p, e->home);
	struct tf_run_owner holder;
	rc = tf_store_begin(e->db);
	if (rc == 0)
		rc = create_run(e->db, e->p, rq->path, rq->ov, rq->nov, e->storage_url,
		                rq->trigger ? rq->trigger : "cli", e->run_id);
	if (rc == 0)
		rc = tf_run_claim(e->db, e->run_id, e->token, 1u << TF_RUN_PENDING, 0, &holder);
	if (rc == 0)
		rc = load_steps(e, 0);
	if (rc)
		snprintf(err, errlen, "%s", tf_store_errmsg(e->db));
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
		snprintf(err, errlen,
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
		snprintf(err, errlen, "%s", tf_store_errmsg(e->db));
		goto out;
	}
	pj = json_loads(params ? params : "{}", 0, NULL);
	if (pj && json_is_object(pj)) {
		ov = tf_xcalloc(json_object_size(pj) + 1, sizeof(*ov));
		const char *k;
		json_t *v;
		json_object_foreach(pj, k, v)
		{
			ov[nov].name = k;
			ov[nov].value = json_string_value(v) ? json_string_value(v) : "";
			nov++;
		}
	}
	rc = tf_pipeline_load_buffer(path ? path : "pipeline", source, strlen(source), ov, nov, 0,
	                             &e->p, diags);
	if (rc) {
		snprintf(err, errlen, "the pipeline stored with run '%s' no longer loads",
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
	if (rc == 0 && holder.state != TF_RUN_PENDING) {
		/* it ran before: the claim is durable before lost processes are ended */
		rc = tf_store_commit(e->db);
		if (rc == 0)
			rc = end_lost_processes(e, err, errlen);
		if (rc == -ETIMEDOUT || rc == -EPERM)
			goto out;
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
	if (rc == 0 && holder.state == TF_RUN_RUNNING && holder.token[0] &&
	    strcmp(holder.token, e->token) && !tf_run_owner_gone(&holder, TF_RUN_LEASE_S))
		tf_warn("run '%s': taken over by force from process %ld, which looks alive "
		        "(heartbeat %.1f s ago); if it still runs, it stops at its next heartbeat",
		        e->run_id, holder.pid, holder.heartbeat_age);
	if (rc == 0)
		rc = load_steps(e, 1);
	if (rc)
		snprintf(err, errlen, "%s", tf_store_errmsg(e->db));
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
	if (rc == 0) {
		rc = first_round(&h->e);
		if (rc)
			snprintf(err, errlen, "run '%s': %s", h->e.run_id,
			         tf_store_errmsg(h->e.db));
	}
	if (h->e.db)
		tf_store_rollback(h->e.db); /* what a failure left open (no-op after a commit) */
	if (rc == 0 && pthread_create(&h->driver, NULL, driver_main, h)) {
		snprintf(err, errlen, "cannot start a thread to drive run '%s'", h->e.run_id);
		rc = -EAGAIN;
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
		snprintf(err, errlen, "%s", h->err);
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
		snprintf(err + n, errlen - n, ": %s:%d:%d: %s", diags.items[0].file ? diags.items[0].file : "",
		         diags.items[0].line, diags.items[0].col, diags.items[0].message);
	}
	tf_diag_list_release(&diags);
	return rc;
}

/* ---- summaries ----------------------------------------------------------------------- */

int tf_engine_summary(struct tf_store *st, const char *run_id, json_t **out)
{
	json_t *d = NULL;
	int rc = tf_run_describe(st, run_id, &d);
	if (rc)
		return rc;
	json_t *doc = json_object();
	json_object_set(doc, "run_id", json_object_get(d, "id"));
	json_object_set(doc, "pipeline", json_object_get(d, "pipeline"));
	json_object_set(doc, "status", json_object_get(d, "state"));
	json_object_set(doc, "error", json_object_get(d, "error"));
	json_t *started = json_object_get(d, "started_at"),
	       *fin = json_object_get(d, "finished_at");
	if (json_is_number(started) && json_is_number(fin))
		json_object_set_new(doc, "duration",
		                    json_real(json_number_value(fin) - json_number_value(started)));
	json_t *steps = json_array();
	double slice_seconds = 0;
	int hits = 0;
	size_t i;
	json_t *s;
	json_array_foreach(json_object_get(d, "steps"), i, s)
	{
		json_t *o = json_object();
		static const char *const keys[] = {
		    "name",      "type",   "state",    "attempts", "outputs",      "metrics",
		    "cache_hit", "reason", "duration", "slice",    "slice_seconds"};
		for (size_t k = 0; k < TF_ARRAY_LEN(keys); k++) {
			json_t *v = json_object_get(s, keys[k]);
			if (v)
				json_object_set(o, keys[k], v);
		}
		slice_seconds += json_number_value(json_object_get(s, "slice_seconds"));
		if (json_is_true(json_object_get(s, "cache_hit")))
			hits++;
		json_array_append_new(steps, o);
	}
	json_object_set_new(doc, "steps", steps);
	json_object_set_new(doc, "cache_hits", json_integer(hits));
	json_object_set_new(doc, "slice_seconds", json_real(slice_seconds));
	json_t *model = json_object_get(d, "model");
	if (model) {
		json_t *m = json_deep_copy(model);
		char *metrics = NULL;
		if (tf_store_query_text(
		        st, &metrics,
		        "SELECT v.metrics FROM model_versions v JOIN models m ON "
		        "m.id=v.model_id WHERE m.name=? AND v.version=?",
		        "ti", json_string_value(json_object_get(m, "name")),
		        (int64_t)json_integer_value(json_object_get(m, "version"))) == 0) {
			json_t *mj = json_loads(metrics ? metrics : "{}", 0, NULL);
			json_object_set_new(m, "metrics", mj ? mj : json_object());
		}
		free(metrics);
		json_object_set_new(doc, "model", m);
	} else {
		json_object_set_new(doc, "model", json_null());
	}
	json_t *deps = json_array();
	struct tf_stmt *q = tf_store_query(st,
	                                   "SELECT m.name, d.alias, d.version, d.canary_version, "
	                                   "d.canary_percent FROM deployments d JOIN models m ON "
	                                   "m.id=d.model_id WHERE d.run_id=? ORDER BY d.id",
	                                   "t", run_id);
	while (q && tf_stmt_step(q) == 1) {
		json_t *o = json_pack("{s:s, s:s, s:I}", "model", tf_stmt_text(q, 0), "alias",
		                      tf_stmt_text(q, 1), "version", (json_int_t)tf_stmt_int(q, 2));
		if (!tf_stmt_is_null(q, 3)) {
			json_object_set_new(o, "canary_version", json_integer(tf_stmt_int(q, 3)));
			json_object_set_new(o, "canary_percent", json_real(tf_stmt_double(q, 4)));
		}
		json_array_append_new(deps, o);
	}
	tf_stmt_done(q);
	json_object_set_new(doc, "deployments", deps);
	json_decref(d);
	*out = doc;
	return 0;
}

void tf_engine_print_summary(FILE *f, const json_t *sum)
{
	const char *status = json_string_value(json_object_get(sum, "status"));
	fprintf(f, "\nrun %s %s", json_string_value(json_object_get(sum, "run_id")),
	        status ? status : "?");
	json_t *dur = json_object_get(sum, "duration");
	if (json_is_number(dur))
		fprintf(f, " in %.1f s", json_number_value(dur));
	fprintf(f, "\n");
	const char *error = json_string_value(json_object_get(sum, "error"));
	if (error)
		fprintf(f, "  %s\n", error);
	size_t i;
	json_t *s;
	json_array_foreach(json_object_get(sum, "steps"), i, s)
	{
		const char *st = json_string_value(json_object_get(s, "state"));
		if (st && (!strcmp(st, "failed") || !strcmp(st, "skipped")))
			fprintf(f, "  %s %s: %s\n", json_string_value(json_object_get(s, "name")),
			        st,
			        json_string_value(json_object_get(s, "reason"))
			            ? json_string_value(json_object_get(s, "reason"))
			            : "");
	}
	json_t *m = json_object_get(sum, "model");
	if (json_is_object(m)) {
		fprintf(f, "  model: %s version %lld",
		        json_string_value(json_object_get(m, "name")),
		        (long long)json_integer_value(json_object_get(m, "version")));
		const char *k;
		json_t *v;
		int first = 1;
		json_object_foreach(json_object_get(m, "metrics"), k, v)
		{
			if (!json_is_number(v))
				continue;
			fprintf(f, "%s%s %.4g", first ? " (" : ", ", k, json_number_value(v));
			first = 0;
		}
		fprintf(f, "%s\n", first ? "" : ")");
	}
	json_array_foreach(json_object_get(sum, "deployments"), i, s)
	{
		fprintf(f, "  deployed: %s '%s' -> version %lld",
		        json_string_value(json_object_get(s, "model")),
		        json_string_value(json_object_get(s, "alias")),
		        (long long)json_integer_value(json_object_get(s, "version")));
		if (json_object_get(s, "canary_version"))
			fprintf(f, ", canary version %lld at %.3g%%",
			        (long long)json_integer_value(json_object_get(s, "canary_version")),
			        json_number_value(json_object_get(s, "canary_percent")));
		fprintf(f, "\n");
	}
	fprintf(f, "  slice-seconds: %.1f   cache hits: %lld\n",
	        json_number_value(json_object_get(sum, "slice_seconds")),
	        (long long)json_integer_value(json_object_get(sum, "cache_hits")));
}

/* engine_int.h — what the engine_*.c files share: the engine's state (struct engine), the
 * in-memory copy of each step (struct estep) and the functions one file calls in another.
 * Internal to the engine; engine.c explains the threads and the [C]/[W] field markers.
 */
#ifndef TF_ENGINE_INT_H
#define TF_ENGINE_INT_H

#include "orchestrator/engine.h"
#include "orchestrator/broker.h"
#include "orchestrator/slices.h"
#include "orchestrator/view.h"

#include <jansson.h>
#include <pthread.h>

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
	json_t *with_rec;          /* [C] the same as recorded (each ${env.NAME} as written), NULL
	                              when the step has no ${env.NAME} */
	char cache_key[65];        /* [C] inputs hash ("" when not cacheable) */
	double next_at;            /* [C] monotonic time of the next attempt (retrying) */
	double deadline;           /* [C] monotonic timeout of the running attempt, 0 none */
	double started;            /* [C] monotonic start of the running attempt */
	double started_wall;       /* [C] wall start of the first attempt (view) */
	double finished_wall;      /* [C] wall end (view) */
	int timed_out;             /* [C] the coordinator raised cancel for the timeout */
	int forced;                /* [C] chosen by --only/--from: not taken from the cache */
	volatile int cancel;       /* raised by the coordinator, read by the kind */
	volatile int executor_timed; /* raised by the kind, read by the coordinator: the
	                                attempt's executor counts its timeout itself
	                                (tf_step_run_timed_by_executor), deadline is dropped */
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
	int view_marked;            /* [C] in e->view_dirty */
	size_t *next_dirs;          /* [C] the steps whose one unresolved need is this one (at
	                               most nworkers), set when an attempt is handed over: its
	                               worker makes their work directories while its child runs,
	                               off the path from its end to their start */
	size_t nnext_dirs;          /* [C] */
	int dir_made;               /* [W] of the worker of the step it needs: its work directory
	                               was made empty for its next attempt (read and cleared by
	                               the worker that runs that attempt) */
};

struct engine {
	const struct tf_engine_opts *o;
	struct tf_pipeline *p;
	char run_id[32];
	char token[33];   /* owner token this engine drives the run under */
	double hb_next;   /* [C] monotonic time of the next heartbeat */
	int lost_owner;   /* [C] another process took the run over: write nothing final */
	int cancel_asked; /* [C] cancelled (`runs cancel`, runs.cancelled_at): the steps of
	                     `steps` stop, the finally steps run, the run ends failed */
	int cancel_stop;  /* [C] cancelled again: the finally steps stop too */
	int finally_open; /* [C] cancelled, and the steps of `steps` have stopped: the finally
	                     steps were made ready */
	int new_end;      /* a run that ended failed is continued: its finally steps run again */
	int drain;        /* tf_engine_drain: ends interrupted, marked for the next daemon (mu) */
	char *home;
	char *storage_url;
	/* [C] the handle rounds run on: the engine's own (db_own), or while a worker holds the
	 * baton, that worker's (tf_engine_use_db) */
	struct tf_store *db;
	struct tf_store *db_own; /* the coordinator's: opts.db or one of its own */
	struct estep *steps;
	size_t n;
	size_t **dependents; /* dependents[i]: steps that need step i */
	size_t *ndependents;
	tf_step_kind_fn kinds[TF_STEP_MAX];

	pthread_mutex_t mu;
	pthread_cond_t coord_cv; /* coordinator: a step finished, a signal, a stop */
	struct estep **queue;    /* ring of steps to run (capacity n) */
	size_t qhead, qlen;
	struct estep **done; /* finished attempts awaiting the coordinator */
	size_t ndone;
	volatile int interrupted; /* Ctrl-C / SIGTERM seen (under mu) */
	int coord_busy;           /* the baton: a thread is running a round (under mu) */
	int main_blocked;         /* drive waits for the baton (under mu) */
	int main_look;            /* [C] the last round left work for drive (deadlines etc.) */
	int main_ticking;         /* drive sleeps with the view's refresh armed (under mu) */
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
	int nworkers;                 /* the run's cap on steps running at once */
	struct tf_pool *pool;         /* where its attempts run as jobs: o->pool or own_pool */
	struct tf_pool *own_pool;     /* its own threads (nworkers), without o->pool */
	int kept;                     /* [C] attempts the last round left to the worker running
	                                 it (by_worker), which has no job for them */
	struct tf_view *view;
	size_t *view_dirty, nview_dirty; /* [C] steps whose row may have changed since the view
	                                    last showed them (plain mode shows only those) */
	double view_full_at;             /* [C] monotonic time the view last saw every row */
	unsigned rng;             /* jitter */
	struct tf_broker *broker; /* [C] slices for train steps (created on first use) */
	int slice_poll;           /* [C] attempts wait for or hold a slice: drive polls */
	int run_priority;         /* the run's scheduling class (runs.priority, project) */
	char run_project[64];
	/* the run's slots of a shared pool (o->pool), and its jobs queued or running */
	struct tf_pool_client pc; /* [C] except what the pool owns (pool.h) */
	int pool_jobs;            /* jobs handed to e->pool and not finished (under mu) */
	int pool_kick;            /* the pool reserved a slot: drive runs a round (under mu) */
};

/* A worker's handles: a pool thread's, kept between the steps (of any run) it runs (db_home
 * and os_url say what they were opened on). */
struct wctx {
	struct engine *e;
	struct tf_store *db;
	struct tf_objstore *os;
	char *db_home, *os_url;
};

/* Every process on a home asks the same broker (orchestrator/broker.h): the database decides
 * who holds which chips. Waiting attempts poll it every SLICE_POLL_WAIT_S (a release in this
 * process decides at once), running ones every SLICE_POLL_HOLD_S to learn of a reclaim. */
#define SLICE_POLL_WAIT_S 0.2
#define SLICE_POLL_HOLD_S 0.5

/* ---- shared between the engine_*.c files (all on the baton holder's thread unless said) -- */

/* engine.c */
int tf_engine_step_move(struct engine *e, struct estep *s, enum tf_step_state to,
                        const struct tf_step_update *u);
int tf_engine_attempt_end(struct engine *e, struct estep *s, enum tf_attempt_state to,
                          const struct tf_attempt_result *r);
int tf_engine_coord_round(struct engine *e, int by_worker);
int tf_engine_first_round(struct engine *e);
int tf_engine_drive(struct engine *e, int *cache_hits);
/* Shows the run on e->view. Outside a round (in_round 0: before and after the drive) every
 * row; in a round, in plain mode, only the steps marked by tf_engine_view_mark since the
 * last round, so a round costs what changed in it, not the width of the run (every row once
 * the view's refresh interval has passed, for progress lines, and always on a terminal). */
void tf_engine_view_update(struct engine *e, int in_round);
/* Notes that step s's row (state, attempt, queued) changed. */
void tf_engine_view_mark(struct engine *e, struct estep *s);
void tf_engine_set_reason(struct estep *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Canonical JSON of what is recorded of the step's inputs (caller frees): with_rec when the
 * step has environment references, else with. */
char *tf_engine_with_recorded(const struct estep *s);

/* engine_cache.c */
/* Canonical JSON of v (sorted keys, compact; "null" for NULL); the caller frees it. */
char *tf_engine_canon(const json_t *v);
int tf_engine_cache_key(struct engine *e, struct estep *s, struct tf_objstore *os, char out[65],
                        char *err, size_t errlen);
int tf_engine_cache_lookup(struct engine *e, struct tf_objstore *os, struct estep *s,
                           const char *key, json_t **outputs, json_t **metrics);
int tf_engine_cache_allowed(const struct engine *e, const struct estep *s);
void tf_engine_record_artifacts(struct wctx *w, const char *run, const char *step, json_t *outputs);

/* engine_sched.c */
int tf_engine_sched_dispatch(struct engine *e, int decide, struct estep **start, size_t *nstart);
int tf_engine_slice_release(struct engine *e, struct estep *s, double *seconds);
int tf_engine_admit_waiting(struct engine *e, struct estep **start, size_t *nstart);
int tf_engine_start_attempt(struct engine *e, struct estep *s, struct estep **start,
                            size_t *nstart);
/* The baton holder's rounds run on db from now on (a handle on the same home), and so do the
 * broker's requests. */
void tf_engine_use_db(struct engine *e, struct tf_store *db);

/* engine_select.c: --only / --from */
enum tf_sel_action { TF_SEL_RUN, TF_SEL_REUSE, TF_SEL_SKIP };
struct tf_selection {
	enum tf_sel_action *action; /* per step (all TF_SEL_RUN without a selection) (owned) */
	char source[32];            /* the run whose results are reused, "" when none */
	char why[160];              /* "--from train", "--only a,b" ("" without a selection) */
	char *spec;                 /* as kept in runs.selection: {"only": [...]} or {"from": S}
	                               (owned; NULL without a selection) */
};
/* Decides each step's action for `rq` against the newest succeeded run of the pipeline on
 * `storage` in `st` (NULL: there is none), other than `self`. -EINVAL for an unknown step,
 * -ENOENT when results to reuse are missing; message in err. Release *sel either way. */
int tf_engine_select(const struct tf_pipeline *p, const struct tf_engine_req *rq,
                     struct tf_store *st, const char *storage, const char *self,
                     struct tf_selection *sel, char *err, size_t errlen);
void tf_engine_selection_release(struct tf_selection *sel);
/* The selection the run e->run_id was created with (runs.selection), for a run that is
 * continued: each step's action, from the pipeline alone (the steps it reused are cached in
 * the run already); all TF_SEL_RUN when it has none. Release *sel either way. */
int tf_engine_selection_of_run(struct engine *e, struct tf_selection *sel, char *err,
                               size_t errlen);
/* Records the selection on the new run's steps (reused ones cached with the source's
 * results, the others skipped), in the setup transaction. */
int tf_engine_apply_selection(struct engine *e, const struct tf_selection *sel);
/* The dry run's plan document (tf_engine_dry_run). */
json_t *tf_engine_plan_json(const struct tf_pipeline *p, const struct tf_selection *sel,
                            const char *storage);

/* engine_worker.c */
int tf_engine_worker_count(const struct engine *e);
/* Sets nworkers and e->pool (the run's own threads unless o->pool), before the first round. */
int tf_engine_start_workers(struct engine *e);
/* Waits for the run's jobs, then ends its own threads and gives back the shared pool's slots
 * (the calling thread of drive, and engine_release; a second call finds nothing to do). */
void tf_engine_stop_workers(struct engine *e);
/* One queued attempt becomes a job for e->pool (any thread, e->mu not held; e->pool_jobs
 * already counts it). */
void tf_engine_pool_submit(struct engine *e);

#endif

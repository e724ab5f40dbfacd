/* engine.h — runs a pipeline durably: `tpuflow run`, `runs resume` and `runs retry`.
 *
 * The engine drives one run in this process: a coordinator thread owns the run's state and
 * commits every transition to the store before acting on it; a pool of worker threads runs
 * the steps. Independent steps run in parallel; a finished step wakes the coordinator through
 * a condition variable, so a dependent step starts within microseconds plus one commit.
 *
 * Step kinds are functions (orchestrator/step_kind.h). Built in: data_prep, train, evaluate
 * (ml/steps.h), register and deploy (the registry), shell (an argv run as a child process);
 * tests and benchmarks may replace any of them through tf_engine_opts.kinds.
 *
 * The implementation is split by concern: engine.c (the coordinator), engine_sched.c (slices
 * and workers for attempts), engine_worker.c (the worker pool), engine_cache.c (the step cache
 * and artifacts), engine_run.c (setup, the handle, submission), engine_summary.c (the end-of-run
 * summary), engine_select.c (--only, --from, the dry run's plan); engine_int.h holds what they
 * share.
 */
#ifndef TF_ENGINE_H
#define TF_ENGINE_H

#include "orchestrator/pipeline.h"
#include "orchestrator/pool.h"
#include "orchestrator/step_kind.h"
#include "orchestrator/state.h"
#include "orchestrator/store.h"
#include "storage/objstore.h"

#include <jansson.h>
#include <stdio.h>

struct tf_engine_opts {
	const char *home;    /* state home (database, objects/, work/) */
	const char *storage; /* object store URL; else the pipeline's; else
	                        file://HOME/objects */
	int workers;         /* steps running at once (0: 8) */
	FILE *out;           /* progress view (NULL: quiet) */
	int tty;             /* redraw a live view on `out` instead of plain lines */
	int ml_local;        /* data_prep/train/evaluate steps with `executor: inprocess` run as
	                        `local` children instead (the daemon: a crash in a step never
	                        takes the process down) */
	tf_step_kind_fn kinds[TF_STEP_MAX]; /* overrides per step type (NULL: the row's run) */
	const char *default_accelerator;     /* for train steps without one (NULL: "v4-8") */
	int no_cache;                        /* do not take results from the cache (still record) */
	const char *const *force;            /* steps never taken from the cache (names) */
	size_t nforce;
	int has_priority;     /* 1: `priority` below overrides the pipeline's `priority` */
	int priority;         /* the run's train slices' priority, 0..9 (--priority) */
	const char *project;  /* the run's project (--project), NULL: the pipeline's */
	double grace;         /* seconds a step's process gets between SIGTERM and SIGKILL when
	                         the engine stops it (cancel, drain, preemption, a failed chip,
	                         a timeout); 0: the executor's default, 10 s */
	struct tf_store *db;  /* a handle on HOME's database for the run's coordinator (borrowed
	                         until tf_engine_free; the caller must not use it meanwhile);
	                         NULL: the engine opens its own */
	const char *self_exe; /* the tpuflow binary data_prep/train/evaluate steps with
	                         `executor: local` run as `step exec` (NULL: this program;
	                         tests that are not tpuflow name it) */
	struct tf_pool *pool; /* worker threads shared with the other runs of the process
	                         (orchestrator/pool.h, borrowed; the daemon's): the run's steps
	                         take its slots and run on its threads, `workers` still caps the
	                         run's own share; NULL: the run starts workers of its own */
};

/* A pool for tf_engine_opts.pool: `nthreads` threads that keep a database and an object-store
 * handle each between steps. Free it with tf_pool_free once no engine uses it. */
struct tf_pool *tf_engine_pool_new(int nthreads);

/* ---- the engine as a handle ---------------------------------------------------------------
 * One run driven by this process, on threads of its own: tf_engine_start returns once the run
 * is recorded and claimed (tf_engine_run_id names it); tf_engine_cancel / tf_engine_drain ask
 * it to stop; tf_engine_wait returns its outcome. Nothing is printed: problems come back as
 * diagnostics and messages, progress goes to opts.out when set. */
struct tf_engine;
struct tf_engine_result;

struct tf_engine_req {
	/* a new run: the pipeline file and its --param overrides (borrowed for the call) */
	const char *path;
	const struct tf_param_override *ov;
	size_t nov;
	const char *trigger; /* recorded with a new run: cli (NULL), api or schedule */
	const struct tf_run_label *labels; /* recorded with a new run (borrowed for the call) */
	size_t nlabels;
	/* part of a new run (docs/runs.md, "Running part of a pipeline"): only these steps, or
	 * this step and those after it; the steps they need come from the newest succeeded run
	 * of the pipeline on the same store (refused with -ENOENT when there is none) */
	const char *const *only;
	size_t nonly;
	const char *from;
	/* or an existing run (id, unique prefix or "latest"): resume, retry, or a submitted run
	 * the daemon takes; flags TF_ENGINE_RETRY / TF_ENGINE_FORCE as for tf_engine_resume */
	const char *run_id;
	unsigned flags;
};

/* Starts driving. `o` is copied; the strings it points to are borrowed until tf_engine_free.
 * Returns 0 and *out (the caller frees it with tf_engine_free), or a negative code: -EINVAL
 * with the pipeline's problems in diags, -EBUSY/-EALREADY as for tf_engine_resume, others
 * with a message in err. */
int tf_engine_start(const struct tf_engine_opts *o, const struct tf_engine_req *rq,
                    struct tf_engine **out, struct tf_diag_list *diags, char *err, size_t errlen);
const char *tf_engine_run_id(const struct tf_engine *e);
/* Like Ctrl-C: running steps are cancelled, the run ends interrupted. Any thread. */
void tf_engine_cancel(struct tf_engine *e);
/* For a daemon that stops: as cancel, and the run is marked for the next daemon to continue
 * (runs.resume_on_start). Train steps get SIGTERM and write a checkpoint first. */
void tf_engine_drain(struct tf_engine *e);
/* 1 once the run ended (tf_engine_wait then returns at once). */
int tf_engine_done(struct tf_engine *e);
/* Waits for the end: 0 with res filled (res->summary is the caller's), or the engine's error
 * (message in err; -ESTALE when another process took the run over). */
int tf_engine_wait(struct tf_engine *e, struct tf_engine_result *res, char *err, size_t errlen);
/* Frees the handle; a run still driven is cancelled and waited for first. NULL: no-op. */
void tf_engine_free(struct tf_engine *e);

/* `run --dry-run`: loads the pipeline of `rq` (a new run: path, overrides, only/from) as a run
 * would, and describes what the run would do without recording anything: {pipeline, storage,
 * reuse_from, selection, params: [{name, value, source}], steps: [{name, type, level, needs,
 * when, finally, action: run | reuse | skip, cache}]} in *out (caller releases). The home's
 * database is only read (and only when it exists). Errors as tf_engine_start. */
int tf_engine_dry_run(const struct tf_engine_opts *o, const struct tf_engine_req *rq,
                      json_t **out, struct tf_diag_list *diags, char *err, size_t errlen);

/* Submission: the one function that turns a pipeline's text into a run, for the daemon's API
 * and for `tpuflow run` with a daemon. Validates the text (-EINVAL, problems in diags) and
 * records the run `pending` with how it came (trigger), in the caller's transaction when one
 * is open on `st`. Whoever drives runs picks it up (orchestrator/runner.h: tf_daemon_wake). */
struct tf_engine_submit {
	const char *path;    /* where the text came from, for messages (NULL: "pipeline") */
	const char *yaml;    /* the pipeline text and its length */
	size_t yaml_len;
	const struct tf_param_override *ov;
	size_t nov;
	const char *storage; /* object store URL; NULL: the pipeline's, else file://HOME/objects */
	const char *trigger; /* cli, api or schedule */
	int has_priority;    /* 1: priority overrides the pipeline's */
	int priority;        /* 0..9 */
	const char *project; /* NULL: the pipeline's */
	const struct tf_run_label *labels; /* recorded with the run */
	size_t nlabels;
};
int tf_engine_submit(struct tf_store *st, const char *home, const struct tf_engine_submit *s,
                     char run_id[32], struct tf_diag_list *diags, char *err, size_t errlen);

/* Outcome of driving a run. */
struct tf_engine_result {
	char run_id[32];         /* the run */
	enum tf_run_state state; /* succeeded, failed or interrupted */
	json_t *summary;         /* the --json summary document (caller releases) */
};

/* Loads `path` with the overrides, creates a run and drives it to the end (tf_engine_start,
 * then tf_engine_wait). Returns 0 when
 * the run was driven (its outcome in res->state), -EINVAL when the pipeline has errors (in
 * diags), or another negative code when the engine itself could not work (message in err). */
int tf_engine_run_file(const struct tf_engine_opts *o, const char *path,
                       const struct tf_param_override *ov, size_t nov, struct tf_diag_list *diags,
                       struct tf_engine_result *res, char *err, size_t errlen);

/* Continues an existing run: steps that succeeded or were cached are kept; failed, skipped,
 * running (after a crash) and retrying steps start again (a running train step resumes from
 * its newest checkpoint). The run is claimed first (tf_run_claim); process groups its lost
 * attempts left behind are ended before anything starts. Flags: TF_ENGINE_RETRY accepts only
 * failed or interrupted runs (`runs retry`); TF_ENGINE_FORCE takes the run over even from an
 * owner that looks alive (a warning is logged). -EBUSY when a live owner drives the run (err
 * names it), -EALREADY when the run's state does not allow it (succeeded, or not failed for
 * a retry), -ETIMEDOUT/-EPERM when a lost process group does not end. */
enum { TF_ENGINE_RETRY = 1 << 0, TF_ENGINE_FORCE = 1 << 1 };
int tf_engine_resume(const struct tf_engine_opts *o, const char *run_id, unsigned flags,
                     struct tf_engine_result *res, char *err, size_t errlen);

/* The summary document of a run from the store (what --json prints at the end). */
int tf_engine_summary(struct tf_store *st, const char *run_id, json_t **out);

/* Prints the end-of-run summary for people. */
void tf_engine_print_summary(FILE *f, const json_t *summary);

/* Computes the retry delay before retry number `retry` (1 = first retry) with full jitter:
 * uniform in [0, min(max_backoff, backoff * factor^(retry-1))]. `u` is the uniform draw in
 * [0,1) (tests pass fixed values). */
double tf_engine_backoff(const struct tf_retry_policy *p, int retry, double u);

#endif

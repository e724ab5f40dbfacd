/* step_kind.h — the interface between the engine and a step kind: what a kind gets for one
 * attempt (struct tf_step_run), what it gives back, and the helpers it may call. Kinds
 * (orchestrator/kinds*.c) include this header, never engine.h.
 */
#ifndef TF_STEP_KIND_H
#define TF_STEP_KIND_H

#include "orchestrator/pipeline.h"
#include "orchestrator/state.h"
#include "orchestrator/store.h"
#include "storage/objstore.h"

#include <jansson.h>

/* *tf_step_run.cancel when the engine stops an attempt at its timeout (any other non-zero
 * value: Ctrl-C); a kind that runs a child passes the reason on, so the child's log and
 * class say "timeout" whichever of the engine and the executor saw the deadline first. */
#define TF_CANCEL_TIMEOUT 2

/* The largest file a shell step's program may write to $TPUFLOW_OUTPUTS, $TPUFLOW_METRICS or
 * $TPUFLOW_RESULT (bytes; docs/runs.md): read on the coordinator (kinds_shell.c), checked on
 * a Slurm node before it is put in the store (`tpuflow step job --results`). */
#define TF_SHELL_FILE_MAX (1u << 20)

/* What a step kind gets and gives back. Inputs are borrowed for the call; the kind fills
 * outputs/metrics (objects created by the engine) and, on failure, failure/err. */
struct tf_step_run {
	const char *run_id;           /* the run */
	const char *step;             /* the step's name */
	const struct tf_step *def;    /* the step as loaded (type, retries, timeout, ...) */
	const json_t *with;           /* `with`, references resolved */
	int attempt;                  /* 1, 2, ... */
	const char *home;             /* state home */
	const char *workdir;          /* scratch directory of this step, kept across attempts;
	                                 created by tf_step_run_workdir (not up front: most
	                                 steps never need one) */
	const char *prefix;           /* object-key prefix of the step, stable across attempts and
	                                 resumes: "runs/RUN/STEP/" */
	const char *accelerator;      /* slice the step runs on, e.g. "v4-8" (train) or NULL */
	const char *log_path;         /* file in workdir the kind may append its log to
	                                 (uploaded to PREFIX/logs/attempt-N.log after) */
	struct tf_objstore *objstore; /* the run's object store (this worker's handle) */
	const char *storage_url;      /* its URL, for a child process that opens its own */
	const char *self_exe;         /* the program a `local` ml step re-executes (NULL: this
	                                 one, tf_exec_self_path) */
	int force_local;              /* run an `inprocess` ml step as a `local` child */
	struct tf_store *db;          /* this worker's database handle */
	double timeout;               /* seconds, 0 = none (the engine also raises *cancel) */
	double grace;                 /* seconds a child process gets between SIGTERM and SIGKILL
	                                 when the attempt is stopped (0: the executor's 10 s) */
	volatile int *cancel;         /* becomes non-zero on timeout or Ctrl-C: return soon;
	                                 TF_CANCEL_TIMEOUT when the timeout passed */
	void (*progress)(void *data, const char *json_line); /* progress lines (JSON) */
	void *progress_data;
	void (*child_running)(void *data); /* called by tf_step_run_child once the attempt's
	                                      child runs (NULL: nothing): the engine uses the
	                                      wait to make the work directories of the steps
	                                      that start when this one ends */
	void *child_running_data;
	volatile int *executor_timed; /* set by tf_step_run_timed_by_executor (NULL: nothing to
	                                 tell) */
	int workdir_made;           /* the engine made workdir for this attempt and nothing used it
	                               since: it exists and is empty (tf_step_run_workdir) */
	json_t *outputs;            /* out: output name -> value */
	json_t *metrics;            /* out: metric name -> number */
	enum tf_fail_class failure; /* out on failure: class (default error) */
	int exit_code;              /* out: process exit code, -1 when not a process */
	char err[512];              /* out on failure: message for people */
};

/* Returns 0 on success, a negative code on failure (r->failure, r->err say more). */
typedef int (*tf_step_kind_fn)(struct tf_step_run *r);

/* A kind that started a child process records its process group with the attempt (a resume
 * after a crash ends it before the step runs again; best effort: a failure is logged), then
 * lets the engine use the wait (r->child_running). */
void tf_step_run_child(struct tf_step_run *r, long pgid);

/* A kind whose executor counts the attempt's timeout itself says so before it starts the
 * work: a Slurm job's timeout is its run time as Slurm counts it, not the time it waits in
 * the queue or stands suspended (executors/slurm.c), so the engine's own deadline, counted
 * from the attempt's start, must not cut it short. The engine then drops that deadline for
 * this attempt. A kind that never calls it (one that ignores `executor`) keeps the engine's
 * deadline, whatever the step declares. */
void tf_step_run_timed_by_executor(struct tf_step_run *r);

/* Creates r->workdir (and parents): 1 when this call made the directory itself, or the
 * engine did for this attempt (r->workdir_made; it is empty), 0 when it was there, or a
 * negative errno with r->err filled. */
int tf_step_run_workdir(struct tf_step_run *r);

#endif

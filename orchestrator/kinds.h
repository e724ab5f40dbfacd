/* kinds.h — the built-in step kinds, shared between kinds.c (the table, register, deploy),
 * kinds_shell.c and kinds_ml.c. Internal to the orchestrator. */
#ifndef TF_KINDS_H
#define TF_KINDS_H

#include "executors/executor.h"
#include "orchestrator/step_kind.h"

/* The built-in kinds, named by the rows of the step-kind table (pipeline_schema.c). */
int tf_kind_shell(struct tf_step_run *r);    /* kinds_shell.c */
int tf_kind_ml(struct tf_step_run *r);       /* kinds_ml.c: the row's ml step */
int tf_kind_register(struct tf_step_run *r); /* kinds.c */
int tf_kind_deploy(struct tf_step_run *r);   /* kinds.c */

/* Moves a captured stream (the file at `path`, if any) into the attempt's log under a
 * "==> title <==" line and removes the file; an empty or missing stream adds nothing. */
void tf_kind_append_log(FILE *log, const char *title, const char *path);

/* ---- executor: slurm (kinds_slurm.c) ---- */

struct tf_exec;

/* What a step's Slurm job is submitted with; filled by tf_kind_slurm_prepare. */
struct tf_kind_slurm {
	struct tf_slurm_spec spec; /* for tf_exec_spec.slurm (strings borrowed from here and
	                              from the step) */
	int attempt;               /* the attempt the job belongs to: this one, or a lost one
	                              whose job is followed again (spec.attach_job) */
	char *job_name;            /* tpuflow-RUN-STEP-ATTEMPT */
	char *comment;             /* tpuflow run=RUN step=STEP attempt=N */
	char **export_names;       /* NULL-terminated */
	size_t nexport;
	int noted_job, noted_nodes; /* what tf_kind_slurm_note has written */
	char noted_state[32];       /* the Slurm job state it wrote last */
	int noted_running;          /* it has added the event of the job's start */
	char *log_prefix;           /* STEP_PREFIX/slurm/attempt-N/: where the job puts its
	                               logs (and progress.json) for the coordinator */
	char **argv;                /* what the job runs (tf_kind_slurm_wrap), NULL-terminated */
	char *progress_seen;        /* the progress line last passed on (tf_kind_slurm_progress) */
	double progress_at;         /* when progress.json was last read (monotonic) */
};

/* Fills ks for r: chips and nodes from r->accelerator, the step's `slurm:` options, the
 * environment names the job gets (the usual ones that are set, plus `extra_names`, each NAME
 * or NAME=VALUE), and a lost attempt's job to follow again; tells the engine the executor
 * counts the attempt's timeout (tf_step_run_timed_by_executor). 0, or -EINVAL with r->err
 * set. */
int tf_kind_slurm_prepare(struct tf_step_run *r, struct tf_kind_slurm *ks,
                          char *const *extra_names);
/* Writes the job id on r's attempt (with a "slurm" event) the first time, its nodes once
 * Slurm has placed it, and Slurm's state of the job each time it changes, with a "slurm" event
 * when it starts (how long it waited in the queue) and when it is suspended; call it
 * after every poll (it writes only what changed). */
void tf_kind_slurm_note(struct tf_step_run *r, struct tf_kind_slurm *ks, struct tf_exec *x);
/* What the job hands back besides its logs (tf_kind_slurm_wrap). */
enum {
	TF_KIND_SLURM_PROGRESS = 1, /* its newest progress line: LOG_PREFIX/progress.json */
	TF_KIND_SLURM_RESULTS = 2,  /* a shell step's TPUFLOW_OUTPUTS, TPUFLOW_METRICS and
	                               TPUFLOW_RESULT files: LOG_PREFIX/outputs, metrics,
	                               result.json (tf_kind_slurm_fetch) */
};
/* The argv the job runs on its node: `SELF step job --store URL --prefix LOG_PREFIX
 * [--progress] [--results] -- ARGV...` (cli/cmd_step_job.c), which hands the program's logs
 * and what `flags` asks for to the coordinator through the object store. ks owns the result;
 * the strings of argv are borrowed. */
char *const *tf_kind_slurm_wrap(struct tf_step_run *r, struct tf_kind_slurm *ks, const char *self,
                                char *const *argv, unsigned flags);
/* Fetches the job's LOG_PREFIX + object from the store into the file at path, or removes
 * that file when the job put no such object. 0, or a negative code with r->err set (infra). */
int tf_kind_slurm_fetch(struct tf_step_run *r, struct tf_kind_slurm *ks, const char *object,
                        const char *path);
/* Passes the job's newest progress line (LOG_PREFIX/progress.json) to r->progress when it
 * changed; reads the store at most once a second. */
void tf_kind_slurm_progress(struct tf_step_run *r, struct tf_kind_slurm *ks);
void tf_kind_slurm_release(struct tf_kind_slurm *ks);

#endif

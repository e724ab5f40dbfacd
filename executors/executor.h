/* executor.h — where a step's work runs: one interface (start, poll, wait, cancel, logs) with
 * swappable backends behind a struct of function pointers, one exported instance each:
 *
 *   tf_executor_local      a child process from an argv (never a shell string): clone+exec
 *                          into its own process group, with SIGKILL as its parent-death
 *                          signal so it never outlives the thread that started it; a timeout
 *                          or cancel sends SIGTERM to the whole group, then SIGKILL after the
 *                          grace period; stdout and stderr go to files (and to the object
 *                          store when one is given)
 *
 * Every attempt ends with a failure class the retry policy acts on:
 *
 *   none       exit 0 / the function returned 0
 *   error      the work failed (non-zero exit, crash signal, negative return): a bug or bad
 *              data; retried only if the step says so
 *   timeout    it ran past spec->timeout and was stopped
 *   preempted  the scheduler asked it to stop (checkpoint, release): always requeued
 *   infra      the machinery failed, not the work: killed by SIGKILL it was not sent (the OOM
 *              killer), exit 75 (EX_TEMPFAIL) or 69 (EX_UNAVAILABLE), spawn resources,
 *              -EAGAIN-like returns: retryable
 *   cancelled  a person or the engine cancelled it
 *
 * Usage:
 *     struct tf_exec *x;
 *     tf_exec_start(&tf_executor_local, &spec, &x, err, sizeof err);
 *     tf_exec_wait(x, -1, &res);          // or tf_exec_poll(x, &res) from an event loop
 *     tf_exec_free(x);
 *
 * Threads: one handle is driven by one thread at a time; tf_exec_cancel may be called from
 * any thread.
 */
#ifndef TF_EXECUTOR_H
#define TF_EXECUTOR_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct tf_objstore;

/* The failure class of an attempt: the one vocabulary of executors, the engine, the state
 * tables and a step's `retries.on` (whose bitmask is 1u << class, error..infra). Names:
 * tf_fail_class_name / tf_fail_class_parse (one table, executor.c). */
enum tf_fail_class {
	TF_FAIL_NONE,      /* success */
	TF_FAIL_ERROR,     /* the work failed */
	TF_FAIL_TIMEOUT,   /* ran past its timeout */
	TF_FAIL_PREEMPTED, /* stopped for the scheduler */
	TF_FAIL_INFRA,     /* infrastructure failure: retryable */
	TF_FAIL_CANCELLED, /* cancelled */
	TF_FAIL_LAST
};

/* What a Slurm job asks for (tf_executor_slurm only). Strings are borrowed for the start. */
struct tf_slurm_spec {
	const char *job_name;      /* --job-name, e.g. tpuflow-RUN-STEP-ATTEMPT */
	const char *comment;       /* --comment, e.g. "tpuflow run=RUN step=STEP attempt=N" (for
	                              people: squeue -o %k), or NULL */
	int tpus_per_node;         /* --gres=tpu:N (0: no TPU chips) */
	int nodes;                 /* --nodes (0: one) */
	const char *partition;     /* -p, or NULL */
	const char *account;       /* -A, or NULL */
	const char *qos;           /* -q, or NULL */
	char *const *extra;        /* further sbatch arguments, NULL-terminated, or NULL */
	char *const *export_names; /* names of environment variables the job gets (their values
	                             come from spec->envp or this process's environment, never
	                             written into the script), NULL-terminated, or NULL */
	long attach_job;           /* > 0: follow this job, already submitted, instead of
	                              submitting a new one (a restarted coordinator) */
	int attach_requested;      /* with attach_job: the stop tpuflow had asked of that job
	                              before its coordinator died (its recorded intent: a
	                              tf_fail_class, cancelled..error), 0 for none. The job is
	                              cancelled again if it still runs, and a CANCELLED end is
	                              that stop's class, not a cancel by someone else */
	/* Called once per attempt before the first scancel of a stop tpuflow decided on (`why`:
	 * cancelled, timeout, preempted or infra after a requeue, error for a job that can never
	 * start), on the thread that polls the handle: it commits the intent, so a coordinator
	 * that dies between the scancel and the attempt's end leaves the reason for the one that
	 * follows the job again (attach_requested). A non-zero return is logged; the scancel
	 * goes ahead (a stop never waits on the record). NULL: nothing to record. */
	int (*stopping)(void *data, long job, enum tf_fail_class why);
	void *stopping_data;
};

struct tf_exec_spec {
	/* local: the program and its arguments, passed verbatim (no shell); argv[0] is looked up
	 * in PATH when it has no '/'. NULL-terminated. */
	char *const *argv;
	char *const *envp; /* environment, NULL: inherit */
	const char *cwd;   /* working directory, NULL: inherit */
	double timeout;            /* seconds, <= 0: none */
	double grace;              /* seconds between SIGTERM and SIGKILL, <= 0: 10 */
	const char *log_dir;       /* stdout.log and stderr.log go here (created); NULL: a private
	                              temporary directory removed by tf_exec_free */
	int lazy_logs;             /* local: log_dir and a stream's log are created at the
	                              stream's first byte, so a silent program leaves no file;
	                              log_path is NULL for a stream that wrote nothing */
	struct tf_objstore *store; /* when set, logs are uploaded on completion ... */
	const char *log_prefix;    /* ... as PREFIX + "stdout.log" / "stderr.log" (slurm: the
	                              job puts them there itself and they are fetched into
	                              log_dir when it has ended) */
	const struct tf_slurm_spec *slurm; /* slurm: the job's resources and options */
	uint64_t log_max; /* local: cap on each output stream's log (the step's `log_max`);
	                     0: tf_exec_log_cap() */
};

/* The cap on each output stream of a local child's log: $TPUFLOW_LOG_MAX (bytes, or with a
 * K/M/G suffix; at least 4096), else TF_EXEC_LOG_CAP_DEFAULT. Past it a log keeps its first
 * part and its last min(cap/4, 1 MiB) bytes (executors/local.c). */
#define TF_EXEC_LOG_CAP_DEFAULT (64ull << 20)
uint64_t tf_exec_log_cap(void);
/* A log size as written in TPUFLOW_LOG_MAX or a pipeline's `log_max`: bytes, or with a K, M
 * or G suffix, at least 4096. 0 and *out, or -EINVAL. */
int tf_exec_size_parse(const char *s, uint64_t *out);

struct tf_exec_result {
	enum tf_fail_class fclass; /* see above */
	int exit_code;     /* exit status, -1 if killed by a signal */
	int signal;        /* local: the terminating signal, 0 if it exited */
	double seconds;    /* wall time from start to end */
	int logs_uploaded; /* 1 when the logs reached the object store */
	char message[256]; /* what happened, for people: "exit 3", "killed by SIGKILL after
	                      timeout 5s", ... */
};

struct tf_exec; /* one running attempt; the backend's state follows its first field */

struct tf_executor_ops {
	const char *name; /* "local", "slurm" */
	/* Starts the work; on failure nothing runs and err says why: -EINVAL (also -ENOENT,
	 * -EACCES for a program) when the work as asked for cannot run (class error), another
	 * negative code when the infrastructure failed. */
	int (*start)(const struct tf_exec_spec *spec, struct tf_exec **out, char *err,
	             size_t errlen);
	/* 0 and *res when finished; -EAGAIN while running (also enforces the timeout). */
	int (*poll)(struct tf_exec *x, struct tf_exec_result *res);
	/* Blocks until finished (0 and *res) or `timeout` seconds pass (-ETIMEDOUT); < 0: forever.
	 */
	int (*wait)(struct tf_exec *x, double timeout, struct tf_exec_result *res);
	/* Asks it to stop; `why` is TF_FAIL_CANCELLED, TF_FAIL_PREEMPTED or TF_FAIL_TIMEOUT (the
	 * caller's own deadline passed). Returns at once. */
	int (*cancel)(struct tf_exec *x, enum tf_fail_class why);
	/* The path of the captured stdout (stream 1) or stderr (2) log; NULL for a lazy log
	 * (tf_exec_spec.lazy_logs) that was never created. */
	const char *(*log_path)(const struct tf_exec *x, int stream);
	void (*free)(struct tf_exec *x);
};

extern const struct tf_executor_ops tf_executor_local;
extern const struct tf_executor_ops tf_executor_slurm;


/* Dispatchers through the handle's backend. The handle belongs to the caller until
 * tf_exec_free (which stops nothing: cancel and wait first). */
int tf_exec_start(const struct tf_executor_ops *ops, const struct tf_exec_spec *spec,
                  struct tf_exec **out, char *err, size_t errlen);
int tf_exec_poll(struct tf_exec *x, struct tf_exec_result *res);
int tf_exec_wait(struct tf_exec *x, double timeout, struct tf_exec_result *res);
int tf_exec_cancel(struct tf_exec *x, enum tf_fail_class why);
/* Reads what a stream has captured so far (up to 64 MiB) into a new buffer the caller frees;
 * -ENOENT for a lazy log that was never written (nothing captured). */
int tf_exec_logs(struct tf_exec *x, int stream, char **out, size_t *len);
void tf_exec_free(struct tf_exec *x);
/* The process group a `local` attempt runs in (its leader's pid), 0 for in-process work. The
 * engine records it with the attempt, so a resume after a crash can end what outlived it. */
long tf_exec_pgid(const struct tf_exec *x);

/* A Slurm attempt's job id (0 before submission, also while a submission waits for the
 * controller, or for other backends); the nodes it runs on
 * as Slurm writes them ("" while pending) copied into nodes, and the job's state as the
 * newest sweep saw it ("PENDING", "RUNNING", "COMPLETED", ...; "" before the first) into
 * state. Either buffer may be NULL. */
long tf_exec_slurm_job(struct tf_exec *x, char *nodes, size_t nodeslen, char *state,
                       size_t statelen);

/* A Slurm attempt's times as the newest sweep saw them: *queued, the seconds from its
 * submission to its start (Slurm's SubmitTime and StartTime; -1 while it is pending, or
 * unknown), and *ran, the seconds it has run as Slurm counts them (TimeUsed: not while
 * pending or suspended), the figure its timeout is measured against. For other backends -1
 * and 0. */
void tf_exec_slurm_times(struct tf_exec *x, double *queued, double *ran);

/* Slurm's elapsed time as squeue prints it (TimeUsed: [DAYS-][HOURS:]MINUTES:SECONDS) or
 * plain seconds (sacct's ElapsedRaw), into *secs. 0, or -EINVAL for anything else ("N/A"). */
int tf_slurm_elapsed_parse(const char *text, long *secs);

/* The state Slurm reports for a job ("PENDING", "RUNNING", "COMPLETED", ...) with one
 * squeue call (then sacct, for a job squeue no longer lists), into state; -ENOENT when Slurm
 * no longer knows the job, another negative code when squeue cannot be run or the controller
 * does not answer (message in state). */
int tf_slurm_job_state(long job, char *state, size_t statelen);

/* scancel JOB: 0 when Slurm cancelled it or it had ended already, -EAGAIN when Slurm could
 * not be asked (logged). */
int tf_slurm_job_cancel(long job);

/* What a restarted coordinator does with the job of a lost attempt, by the state Slurm
 * reports for it (tf_slurm_job_state): 1 follow it again, it is queued or running; 2 follow
 * it again, it ended in a state tf_slurm_classify knows (COMPLETED, FAILED, TIMEOUT,
 * CANCELLED, ...), which becomes the attempt's outcome; 0 submit a new job (a state this
 * executor does not know). */
int tf_slurm_state_followable(const char *state);

/* The TPU chips (`tpu` GRES) Slurm gave job `job` on each of its nodes, and how many nodes,
 * from `scontrol show job -d` (what a step reads on its compute node). 0 or a negative code
 * with err set. */
int tf_slurm_job_tpus(long job, int *per_node, int *nodes, char *err, size_t errlen);

/* A Slurm job state as a class: COMPLETED none; FAILED, OUT_OF_MEMORY error (exit 69/75:
 * infra); TIMEOUT, DEADLINE timeout; PREEMPTED preempted; NODE_FAIL, BOOT_FAIL infra;
 * CANCELLED the class we asked for (`requested`), else cancelled. TF_FAIL_LAST while the job
 * has not ended. `wstatus` is the job's exit status as a wait status; msg says it for people. */
enum tf_fail_class tf_slurm_classify(const char *state, int requested, int wstatus, char *msg,
                                     size_t msglen);

/* What sbatch's failure message (its stderr) means: TF_FAIL_LAST when the controller could
 * not be reached or did not answer (the executor waits and submits again, after looking for a
 * job of the attempt's name that the lost answer may have created), TF_FAIL_ERROR when sbatch
 * refused the job as asked for (a partition, account, qos, GRES, time or memory it cannot
 * have, an option it does not know: not retried), TF_FAIL_INFRA otherwise. */
enum tf_fail_class tf_slurm_sbatch_class(const char *text);

/* Checks one further sbatch option of a step (`slurm.args`, executors/slurm_args.c): an
 * option, not one the executor sets itself or that stops it following the job (--array,
 * --wait, --hold, --job-name, --output, --error, --export, --wrap, --test-only, --clusters,
 * or a start of their names), and a --time, --mem or --gres value that sbatch can read.
 * 0, or -EINVAL with err saying why. */
int tf_slurm_arg_check(const char *arg, char *err, size_t errlen);

/* "none", "error", "timeout", "preempted", "infra", "cancelled"; "?" outside the enum. */
const char *tf_fail_class_name(enum tf_fail_class c);
/* Name -> class; -EINVAL when unknown. */
int tf_fail_class_parse(const char *name, enum tf_fail_class *out);

/* How a child process ended, as a class: wstatus from waitpid; `requested` is what we asked
 * for (TF_FAIL_NONE if nothing, else TIMEOUT, CANCELLED or PREEMPTED). Writes a message. */
enum tf_fail_class tf_exec_classify_status(int wstatus, enum tf_fail_class requested, char *msg,
                                           size_t msglen);

/* The running program's own path, for re-executing itself as a step ("/proc/self/exe"
 * resolved); a new string the caller frees, NULL if unknown. */
char *tf_exec_self_path(void);

#endif

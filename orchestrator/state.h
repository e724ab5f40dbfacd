/* state.h — the durable state machines of runs, steps and attempts, and read access to them.
 *
 * One set_state function per object validates the transition against the diagram in
 * orchestrator/state.c, writes it and an event row, and commits before returning, so a caller
 * acts only on state that is already durable. Called inside an open transaction
 * (tf_store_begin) it joins it instead, and the caller's commit makes the whole group durable
 * at once (the engine batches a finished step and the steps it unblocks into one commit).
 */
#ifndef TF_STATE_H
#define TF_STATE_H

#include "executors/executor.h"
#include "common/buf.h"
#include "orchestrator/store.h"

#include <jansson.h>
#include <stdint.h>

enum tf_run_state {
	TF_RUN_PENDING,     /* created, not started */
	TF_RUN_RUNNING,     /* a process is driving it (runs.pid) */
	TF_RUN_SUCCEEDED,   /* every step succeeded, was cached or skipped by a gate */
	TF_RUN_FAILED,      /* a step failed for good; `runs retry|resume` can continue it */
	TF_RUN_INTERRUPTED, /* stopped by Ctrl-C / SIGTERM; `runs resume` continues it */
	TF_RUN_STATE_LAST
};

enum tf_step_state {
	TF_STEP_PENDING,   /* waiting for its needs */
	TF_STEP_QUEUED,    /* ready to run, waiting for a free worker (no attempt yet) */
	TF_STEP_RUNNING,   /* an attempt is running (train: placed or waiting for a slice) */
	TF_STEP_RETRYING,  /* an attempt failed; waiting out the backoff (next_attempt_at) */
	TF_STEP_SUCCEEDED, /* outputs and metrics recorded */
	TF_STEP_CACHED,    /* results reused from an earlier run with the same inputs */
	TF_STEP_SKIPPED,   /* its `when` gate was false, or a need did not succeed (reason) */
	TF_STEP_FAILED,    /* out of attempts, or a permanent failure */
	TF_STEP_STATE_LAST
};

enum tf_attempt_state {
	TF_ATTEMPT_RUNNING,
	TF_ATTEMPT_SUCCEEDED,
	TF_ATTEMPT_FAILED,    /* failure_class says why */
	TF_ATTEMPT_CANCELLED, /* stopped by the user (Ctrl-C) */
	TF_ATTEMPT_LOST,      /* its process died with the engine (found on resume) */
	TF_ATTEMPT_STATE_LAST
};

/* Why an attempt failed: enum tf_fail_class of executors/executor.h, named by
 * tf_fail_class_name; a step's retry policy names the classes it retries. */

const char *tf_run_state_name(enum tf_run_state s);
const char *tf_step_state_name(enum tf_step_state s);
const char *tf_attempt_state_name(enum tf_attempt_state s);
/* Name -> value; -EINVAL when unknown. */
int tf_run_state_parse(const char *name, enum tf_run_state *out);
int tf_step_state_parse(const char *name, enum tf_step_state *out);

/* 1 when a step in this state has its results (succeeded or cached). */
int tf_step_state_done(enum tf_step_state s);
/* 1 when the step will not change without a retry (succeeded, cached, skipped, failed). */
int tf_step_state_final(enum tf_step_state s);

/* Whether the diagram allows from -> to. */
int tf_run_transition_ok(enum tf_run_state from, enum tf_run_state to);
int tf_step_transition_ok(enum tf_step_state from, enum tf_step_state to);
int tf_attempt_transition_ok(enum tf_attempt_state from, enum tf_attempt_state to);

/* A new run: records the pipeline (deduplicated by digest), the run in state pending and its
 * steps in state pending, in one transaction. `params_json` is a JSON object of the --param
 * overrides as given; `trigger` how it was submitted (cli, api or schedule; NULL: cli).
 * `run_id` receives the new id (buffer of at least 32 bytes). */
struct tf_run_step_def {
	const char *name; /* step name */
	const char *type; /* step type */
};
int tf_run_create(struct tf_store *st, const char *pipeline_name, const char *source,
                  const char *path, const char *params_json, const char *storage,
                  const struct tf_run_step_def *steps, size_t nsteps, const char *trigger,
                  char run_id[32]);

/* Run transitions. `error` (may be NULL) is kept on failed/interrupted and cleared otherwise;
 * entering running records this process's pid. -EINVAL for a transition the diagram forbids,
 * -ENOENT for an unknown run. */
int tf_run_set_state(struct tf_store *st, const char *run, enum tf_run_state to, const char *error);
int tf_run_get_state(struct tf_store *st, const char *run, enum tf_run_state *out);

/* Ownership of a run (docs/runs.md, "Who drives a run"). A process drives a run under an owner
 * token (32 hex digits, tf_random_hex) that it claims with one compare-and-set in one write
 * transaction, renews every TF_RUN_HEARTBEAT_S while it drives, and gives up with the run's
 * final state. An owner is gone when its heartbeat is older than TF_RUN_LEASE_S or its pid
 * (on this host) is no longer alive. */
#define TF_RUN_HEARTBEAT_S 2.0
#define TF_RUN_LEASE_S 30.0
struct tf_run_owner {
	enum tf_run_state state;
	char token[33];       /* "" when unowned */
	long pid;             /* the owner's process, 0 when unknown */
	double heartbeat_age; /* seconds since its last heartbeat, -1 when none */
	int cancel_requested; /* `runs cancel` asked it to stop */
};
int tf_run_owner_get(struct tf_store *st, const char *run, struct tf_run_owner *o);
/* The owner from four columns of the row being read from q, from `col` on: runs.state,
 * runs.owner, runs.pid, runs.heartbeat_at (the one reader of them; cancel_requested stays 0).
 * 0, or -EINVAL when the state is not a run state (o is filled anyway). */
int tf_run_owner_read(struct tf_stmt *q, int col, struct tf_run_owner *o);
/* 1 when a live process drives the run: it is running, owned, its heartbeat at most
 * TF_RUN_LEASE_S old and its pid alive (the one test of it: claims, resume, the runner, the
 * slice broker, `runs list`); 0 when its owner is gone or it has none. */
int tf_run_owner_live(const struct tf_run_owner *o);
/* Claims `run` for `token` and makes it running (pid: this process), when its state is one of
 * `from_states` (a mask of 1u << enum tf_run_state) and it is unowned, already this token's,
 * or its owner is gone — or, with `force`, whoever holds it. -EBUSY when a live owner holds
 * it, -EALREADY when its state is not in the mask, -ENOENT for an unknown run; *holder
 * receives what was found. */
int tf_run_claim(struct tf_store *st, const char *run, const char *token, unsigned from_states,
                 int force, struct tf_run_owner *holder);
/* What a heartbeat found of `runs cancel` (docs/runs.md, "Cancel and finally steps"). */
enum tf_cancel_seen {
	TF_CANCEL_NONE,  /* nothing asked */
	TF_CANCEL_FIRST, /* a cancel, now taken (runs.cancelled_at): stop the steps, run the
	                    finally steps */
	TF_CANCEL_AGAIN, /* a cancel of a run already cancelled: stop the finally steps too */
};
/* Renews the heartbeat; *cancel (may be NULL) receives an enum tf_cancel_seen. A first cancel
 * is taken in the same transaction (cancelled_at set, the request cleared), so a request that
 * comes later is seen as a second one. -ESTALE when `token` no longer owns the run (it was
 * taken over). */
int tf_run_heartbeat(struct tf_store *st, const char *run, const char *token, int *cancel);
/* Final transition by the owner (succeeded, failed, interrupted) and release of the run;
 * `resume_on_start` marks an interrupted run for the next daemon on the home. -ESTALE when
 * `token` no longer owns it. */
int tf_run_finish(struct tf_store *st, const char *run, const char *token, enum tf_run_state to,
                  const char *error, int resume_on_start);
/* `runs cancel`: a pending run fails at once, a running one gets cancel_requested_at (its
 * owner stops it at its next heartbeat: the first time its steps and then runs its finally
 * steps, a second time those too), an interrupted one is no longer continued by a daemon.
 * *state receives the state after the call. */
int tf_run_request_cancel(struct tf_store *st, const char *run, enum tf_run_state *state);
/* Whether the run was cancelled (runs.cancelled_at: a heartbeat took its first cancel, and
 * no claim of it as a failed run cleared it since): *yes 1 or 0. 0, -ENOENT (no such run)
 * or a store error. */
int tf_run_cancelled(struct tf_store *st, const char *run, int *yes);

/* What changes with a step transition besides its state; NULL pointers leave a column as it
 * is, except `reason`, which is replaced (NULL clears it). */
struct tf_step_update {
	const char *reason;     /* skipped/failed reason, for people */
	const char *outputs;    /* JSON object text */
	const char *metrics;    /* JSON object text */
	const char *with_json;  /* resolved inputs */
	const char *cache_key;  /* inputs hash */
	int cache_hit;          /* entering cached */
	double next_attempt_at; /* entering retrying: wall-clock time of the next attempt */
	int new_end;            /* a finally step of a run that ended failed and is continued:
	                           it leaves succeeded or cached for pending, to run again at the
	                           run's new end (the one move out of those two states) */
};
/* Step transitions. Entering running increments the step's attempt counter (queued is not an
 * attempt: a step interrupted while queued goes back to pending with no attempt recorded). */
int tf_step_set_state(struct tf_store *st, const char *run, const char *step, enum tf_step_state to,
                      const struct tf_step_update *u);
int tf_step_get_state(struct tf_store *st, const char *run, const char *step,
                      enum tf_step_state *state, int *attempts);
/* Latest progress line of a running step (not a transition: no event, throttled by callers). */
int tf_step_set_progress(struct tf_store *st, const char *run, const char *step,
                         const char *json_line);
/* Adds slice usage to a step (slice description, seconds). */
int tf_step_add_slice(struct tf_store *st, const char *run, const char *step, const char *slice,
                      double seconds);

/* A new attempt `n` (the step's attempt counter after entering running) in state running. */
int tf_attempt_create(struct tf_store *st, const char *run, const char *step, int n);
struct tf_attempt_result {
	enum tf_fail_class failure; /* for failed/cancelled/lost */
	int exit_code;              /* process exit code, or -1 */
	const char *error;          /* message for people */
	double backoff;             /* seconds until the next attempt, when one follows */
	const char *log_key;        /* object-store key of its log */
};
int tf_attempt_set_state(struct tf_store *st, const char *run, const char *step, int n,
                         enum tf_attempt_state to, const struct tf_attempt_result *r);
/* Asks whoever drives runs (the daemon) to continue `run` (the API's resume/retry): marks a
 * failed or interrupted run resume_on_start. -EALREADY (succeeded, or a retry of a run that
 * is not failed/interrupted), -EBUSY (a live owner drives it), -ENOENT; message in err. */
int tf_run_mark_resume(struct tf_store *st, const char *run, int retry, char *err, size_t errlen);

/* Records the process group of the attempt's child process; on its own (outside a
 * transaction) its commit does not wait for a sync: it must survive this process, not the
 * machine. */
int tf_attempt_set_pgid(struct tf_store *st, const char *run, const char *step, int n, long pgid);

/* Records, before the scancel goes out, that tpuflow cancels attempt n's Slurm job `job`
 * and the class the attempt is to end with (`why`: cancelled, timeout, preempted, infra,
 * error): an event of kind "scancel" whose to_state is that class (`runs logs` shows it).
 * Committed on its own, it outlives a coordinator killed before the attempt's end, for the
 * one that follows the job again (tf_attempt_stop_intent). */
int tf_attempt_stop_record(struct tf_store *st, const char *run, const char *step, int n,
                           long job, enum tf_fail_class why);
/* The stop recorded for attempt n (tf_attempt_stop_record) into *why, TF_FAIL_NONE when
 * there is none. 0 or a negative code. */
int tf_attempt_stop_intent(struct tf_store *st, const char *run, const char *step, int n,
                           enum tf_fail_class *why);

/* Appends an event that is not a state change (kind e.g. "model", "deploy", "cache"). */
int tf_event_add(struct tf_store *st, const char *run, const char *step, int attempt,
                 const char *kind, const char *message);

/* Which runs tf_runs_list returns (every field zero: all of them). */
struct tf_runs_filter {
	const char *pipeline;    /* pipeline name, NULL: any */
	const char *state;       /* a run state's name, or "orphaned" (running, owner gone) */
	double since;            /* created at or after (Unix seconds), 0: any time */
	const char *label_key;   /* has this label, NULL: any */
	const char *label_value; /* ... with this value, NULL: any value */
	int limit;               /* at most this many, 0: all */
};

/* The filters of a runs listing, for tf_runs_where_sql: each NULL (0) selects every run. */
struct tf_runs_where {
	const char *state, *pipeline; /* r.state, r.pipeline equal to it */
	const char *label_key;        /* has this label ... */
	const char *label_value;      /* ... with this value (NULL: any value) */
	const char *trigger;          /* r.trigger equal to it */
	const char *text;             /* in the run's id, pipeline or error */
	int cursor;                   /* only runs before the cursor in (created_at, id) order */
};

/* Appends the WHERE clause of a listing of `runs r` that names only the filters `w` gives,
 * so that SQLite can search an index in the listings' (created_at, id) order
 * (runs_state_created, runs_pipeline_created; migrations/0021): a clause that names every
 * filter as (?1 IS NULL OR r.state=?1) leaves it one plan, which reads every run. The text is
 * made of fixed fragments only (at most 2^7 texts, which the store's statement cache keys
 * by; no caller's text goes into it) and takes these parameters, naming only the ones it
 * uses: ?1 state, ?2 pipeline, ?3 and ?4 the label's key and value, ?5 trigger, ?6 text, ?7
 * and ?8 the cursor's id and created_at, and ?9, created at or after, which it always names:
 * bind ?1 to ?9 whatever the filters (a NULL binds for an unused one). */
void tf_runs_where_sql(struct tf_buf *b, const struct tf_runs_where *w);

/* Read models as JSON documents (caller owns *out):
 * tf_runs_list: array of {id, pipeline, state, created_at, started_at, finished_at, steps,
 *   done (succeeded or cached), skipped, orphaned, duration, labels} newest first that pass
 *   `f` (NULL: all).
 * tf_run_describe: {id, pipeline, state, params, storage, error, created_at, ...,
 *   steps: [{name, type, state, attempts, reason, cache_hit, with, outputs, metrics, slice,
 *   slice_seconds, started_at, finished_at, duration, attempts_detail: [...]}],
 *   model: {name, version} when a register step made one}.
 * tf_run_events: array of events in order, for one run (step may be NULL). */
int tf_runs_list(struct tf_store *st, const struct tf_runs_filter *f, json_t **out);
int tf_run_describe(struct tf_store *st, const char *run, json_t **out);
int tf_run_events(struct tf_store *st, const char *run, const char *step, json_t **out);

/* 1 when the current row of `s` is a running run whose owner is gone (orphaned; its process
 * died): runs.state, owner, pid and heartbeat_at in columns col to col + 3
 * (tf_run_owner_read's layout). */
int tf_run_row_orphaned(struct tf_stmt *s, int col);
/* The seconds the run in the current row of `s` took, or has taken so far, from the columns
 * of its state, started_at, finished_at and its owner's heartbeat_at (the end of an orphaned
 * run, `orphaned` as tf_run_row_orphaned judged it); -1 when it has not started. What
 * `runs list` and GET /api/v1/runs say as `duration`. */
double tf_run_row_duration(struct tf_stmt *s, int state, int started, int finished,
                           int heartbeat, int orphaned);

/* Labels of a run (`run --label k=v`, the API's "labels"): free-form names and values kept
 * with the run, shown by `runs show|list` and selected on by `runs list --label`. */
struct tf_run_label {
	const char *key;   /* 1..128 characters, no '=' */
	const char *value; /* up to 1024 characters */
};
/* 0 when a label may be stored, else -EINVAL with the reason in err. */
int tf_run_label_check(const char *key, const char *value, char *err, size_t errlen);
/* Sets labels on a run (a name given again replaces its value), in the caller's transaction
 * when one is open. */
int tf_run_set_labels(struct tf_store *st, const char *run, const struct tf_run_label *labels,
                      size_t n);
/* The labels of a run as a JSON object {name: value} (caller owns *out). */
int tf_run_labels(struct tf_store *st, const char *run, json_t **out);

/* The pipeline source a run was created from (caller owns both strings; path may be NULL). */
int tf_run_pipeline_source(struct tf_store *st, const char *run, char **source, char **path);

/* Every param of the run's pipeline with the value the run used, [{name, value, text,
 * source}] as tf_pipeline_param_values writes them, from the pipeline stored with the run and
 * `overrides` (the run's `params`); NULL when that pipeline no longer loads (caller owns):
 * `param_values` of `runs show --json` and GET /api/v1/runs/{id}. */
json_t *tf_run_param_values(struct tf_store *st, const char *run, const json_t *overrides);

/* Finds a run id from a unique prefix or "latest"; -ENOENT / -EEXIST (ambiguous). */
int tf_run_find(struct tf_store *st, const char *prefix, char run_id[32]);

#endif

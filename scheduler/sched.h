/* sched.h — the TPU slice scheduler: pools of chips laid out as their torus, a queue of gang
 * jobs, and the decisions (start, preempt, kill, infra failure) that follow from them.
 *
 * Pure decision logic: nothing here reads a clock, opens a file or a socket. The caller (the
 * run engine, the daemon, the simulator, a test) passes `now` in seconds to every call and acts
 * on the decisions it gets back:
 *
 *     tf_sched_new(&cfg, &s); tf_sched_add_pool(s, "pod", "v4:4x4x8", err, sizeof err);
 *     tf_sched_submit(s, &spec, now, &id, err, sizeof err);
 *     tf_sched_tick(s, now, &d);        // d.v[i]: START job on box / PREEMPT job by deadline ...
 *     tf_sched_requeue(s, id, now);     // a preempted job checkpointed and exited: requeued
 *     tf_sched_finish(s, id, now, ok);  // a job ended on its own
 *
 * Job states and the calls that move them (one function, set_state in sched.c, checks each):
 *
 *     QUEUED --tick: START--> RUNNING --finish--> DONE | FAILED
 *     RUNNING --tick: PREEMPT--> DRAINING --release, or tick: KILL at the deadline--> QUEUED
 *     RUNNING | DRAINING --chip_fail: FAIL_INFRA--> QUEUED (attempt + 1, placed elsewhere)
 *     QUEUED | RUNNING | DRAINING --cancel--> CANCELLED
 *
 * Ownership: the scheduler copies every string it is given; pointers it returns stay valid
 * until the next call that changes its state.
 */
#ifndef TF_SCHED_H
#define TF_SCHED_H

#include "scheduler/torus.h"

#include <jansson.h>
#include <stddef.h>

#define TF_SCHED_PRIO_MAX 9 /* priorities are 0 (lowest) .. 9 (most urgent) */

enum tf_sched_policy {
	TF_SCHED_FIFO,     /* strict queue order: the first job that cannot start blocks the rest */
	TF_SCHED_BACKFILL, /* EASY backfill around a reservation for the first blocked job */
	TF_SCHED_POLICY_LAST
};

struct tf_sched_config {
	enum tf_sched_policy policy; /* default TF_SCHED_BACKFILL */
	double grace_seconds;        /* preemption: time to checkpoint before KILL (default 30) */
	double default_estimate;     /* duration assumed for jobs that give none (default 3600) */
	double fair_half_life;       /* half-life of the usage history behind fair share (3600) */
	int backfill_depth;          /* queued jobs examined per pool per tick, and jobs the
	                                walk's first pass passes, skipped ones included
	                                (default 1000) */
	int preemption;              /* 1: jobs may preempt to reclaim borrowed capacity, by
	                                priority, and within a project (default 1) */
};

enum tf_sched_job_state {
	TF_JOB_QUEUED,
	TF_JOB_RUNNING,
	TF_JOB_DRAINING, /* asked to checkpoint and exit; still holds its chips */
	TF_JOB_DONE,
	TF_JOB_FAILED,
	TF_JOB_CANCELLED,
	TF_JOB_STATE_LAST
};

enum tf_sched_action {
	TF_SCHED_START,      /* start the job on `box` of `pool` (its chips: tf_sched_job_chips) */
	TF_SCHED_PREEMPT,    /* ask the job to checkpoint and exit before `deadline`, then call
	                        tf_sched_requeue; it is requeued and later resumes */
	TF_SCHED_KILL,       /* grace ran out: stop the job now; its chips are already released
	                        and it is requeued */
	TF_SCHED_FAIL_INFRA, /* a chip under the job failed: stop it and record a retryable
	                        infrastructure failure; it is requeued to run elsewhere */
	TF_SCHED_ACTION_LAST
};

struct tf_sched_decision {
	enum tf_sched_action action; /* what to do */
	int job;                     /* job id */
	int attempt;                 /* START: the attempt number now beginning (1, 2, ...) */
	int pool;                    /* pool index */
	struct tf_box box;           /* START: where; others: where it ran */
	int chips;                   /* chips in the box */
	double deadline;             /* PREEMPT: when grace ends */
	int cause;                   /* PREEMPT: the job it makes room for; FAIL_INFRA: chip */
};

/* A growable list of decisions owned by the caller; every call that fills one clears it
 * first. Release the array with tf_sched_decisions_release. */
struct tf_sched_decisions {
	struct tf_sched_decision *v; /* decisions in the order they were taken */
	size_t n, cap;               /* used, allocated */
};
void tf_sched_decisions_release(struct tf_sched_decisions *d);

struct tf_sched_job_spec {
	const char *name;    /* for people, e.g. "run 12 / train" (may be NULL) */
	const char *run;     /* run id for accounting (may be NULL) */
	const char *project; /* NULL: "default" */
	const char *slice;   /* "v4-8", "v4:2x2x4", "v5litepod-16" or a bare shape "2x2x4" */
	const char *pool;    /* pool name, NULL: the first pool of the slice's generation */
	int priority;        /* 0..TF_SCHED_PRIO_MAX */
	int preemptible;     /* may be preempted (checkpoint, release, requeue) */
	double est_seconds;  /* estimated duration, <= 0: the configured default */
};

struct tf_sched_job_info {
	enum tf_sched_job_state state;
	const char *name, *run, *project; /* borrowed */
	int pool;                         /* pool index */
	int shape[3];                     /* requested extents */
	int chips;                        /* chips the job needs */
	int priority, preemptible, borrowed;
	struct tf_box box;                  /* RUNNING / DRAINING: where */
	int has_target;                     /* QUEUED: a box is being drained for it */
	struct tf_box target;               /* that box */
	int attempts;                       /* starts so far */
	int preemptions;                    /* times preempted */
	int infra_failures;                 /* times a chip failed under it */
	double submitted;                   /* submit time */
	double first_start;                 /* first START, < 0 if never started */
	double started;                     /* start of the current attempt */
	double chip_seconds, slice_seconds; /* accounted so far (running attempt up to now) */
};

struct tf_sched_usage {
	double chip_seconds;  /* sum over jobs of chips x seconds held */
	double slice_seconds; /* sum over jobs of seconds a slice was held */
	int running_chips;    /* chips held right now */
	int jobs;             /* jobs submitted */
};

struct tf_sched;

void tf_sched_config_default(struct tf_sched_config *cfg);
/* A new scheduler with no pools; cfg NULL means defaults. The caller owns *out. */
int tf_sched_new(const struct tf_sched_config *cfg, struct tf_sched **out);
void tf_sched_free(struct tf_sched *s);

/* Adds a pool from a spec "GEN:AxBxC" ("v4:4x4x8", "v5e:16x16"). Returns the pool index, or
 * -EINVAL with a message in err. Dimensions wrap (torus) as the generation wires them. */
int tf_sched_add_pool(struct tf_sched *s, const char *name, const char *spec, char *err,
                      size_t errlen);
int tf_sched_pool_count(const struct tf_sched *s);
/* The pool's torus (dims, wrap) and name; NULL when out of range. */
const struct tf_torus *tf_sched_pool_torus(const struct tf_sched *s, int pool);
const char *tf_sched_pool_name(const struct tf_sched *s, int pool);
/* The pool's spec as added ("v4:4x4x8"); NULL when out of range. */
const char *tf_sched_pool_spec(const struct tf_sched *s, int pool);

/* Declares or updates a project: weight for fair share (> 0), quota in chips across pools
 * (0: none) and whether its preemptible jobs may borrow idle capacity beyond the quota. */
int tf_sched_set_project(struct tf_sched *s, const char *name, double weight, int quota_chips,
                         int may_borrow);

/* Queues a job; *id receives its id (>= 1). -EINVAL with err for a bad slice, an unknown pool
 * or a slice larger than every pool that could take it. */
int tf_sched_submit(struct tf_sched *s, const struct tf_sched_job_spec *spec, double now, int *id,
                    char *err, size_t errlen);

/* Occupies `box` of `pool` for a new job at once, without searching or queueing: for showing
 * placements decided elsewhere (a `tpuflow run` process's own pool) on one map. The box must
 * be a rotation of the slice's shape, inside the pool (crossing the seam only where the
 * dimension wraps), and every chip of it free and healthy. The job is RUNNING from `now`
 * (its start); *id receives its id. -EINVAL with err for a bad slice, pool or box, -EBUSY
 * with err naming the job that holds a chip of it. Decides nothing else: no tick is needed. */
int tf_sched_place_at(struct tf_sched *s, int pool, const struct tf_box *box,
                      const struct tf_sched_job_spec *spec, double now, int *id, char *err,
                      size_t errlen);

/* Rebuilding a scheduler from records (a broker that keeps its state in a database): marks a
 * RUNNING job as preempted earlier, DRAINING until `deadline`, without a decision. -ENOENT for
 * an unknown id, -EINVAL when the job is not running. */
int tf_sched_drain_at(struct tf_sched *s, int id, double deadline);
/* The same for the job a preemption made room for: holds `box` of its pool for the QUEUED job
 * (as the PREEMPT decisions it caused did); it starts there once the box is clear. -EINVAL when
 * the job is not queued or already holds a box, the box is not a rotation of its shape inside
 * its pool, or the box overlaps one held for another job. */
int tf_sched_hold_at(struct tf_sched *s, int id, const struct tf_box *box);

/* The embedded default pool of a TPU generation, as "GEN:AxBxC": v4 4x4x8 (a 128-chip rack),
 * the other 3D generations 4x4x4, the 2D ones 16x16. -EINVAL for an unknown generation. */
int tf_sched_default_pool(const char *gen, char *spec, size_t len);

/* Takes every decision due at `now`: kills of drained-out jobs, starts (priority, fair share,
 * FIFO, quotas, backfill) and preemptions. `out` is cleared first. Returns 0. */
int tf_sched_tick(struct tf_sched *s, double now, struct tf_sched_decisions *out);

/* A running job ended on its own (ok: succeeded or not); its chips are released. -ENOENT for an
 * unknown id, -EINVAL when the job is not running or draining. */
int tf_sched_finish(struct tf_sched *s, int id, double now, int ok);
/* A draining (preempted) job has checkpointed and exited: released and requeued. */
int tf_sched_requeue(struct tf_sched *s, int id, double now);
/* Withdraws a queued job or releases a running one (the caller stops it). */
int tf_sched_cancel(struct tf_sched *s, int id, double now);

/* Marks a chip failed (chip index x + X*(y + Y*z)); a job on it gets FAIL_INFRA in out and is
 * requeued. Repair makes the chip usable again. */
int tf_sched_chip_fail(struct tf_sched *s, int pool, int chip, double now,
                       struct tf_sched_decisions *out);
int tf_sched_chip_repair(struct tf_sched *s, int pool, int chip);
/* Fails every chip of a host (tf_sched_chip_host numbering); -EINVAL for no such host. */
int tf_sched_host_fail(struct tf_sched *s, int pool, int host, double now,
                       struct tf_sched_decisions *out);
/* The host a chip belongs to (chips are grouped into hosts as the generation does). */
int tf_sched_chip_host(const struct tf_sched *s, int pool, int chip);

int tf_sched_job_info(const struct tf_sched *s, int id, double now, struct tf_sched_job_info *out);
/* The chip indices of a running job, up to cap; returns the number of chips or -ENOENT. */
int tf_sched_job_chips(const struct tf_sched *s, int id, int *chips, size_t cap);
/* Why a queued job is waiting, for people: "needs 2x2x4, largest free 2x2x2". */
int tf_sched_job_reason(struct tf_sched *s, int id, char *buf, size_t len);

/* Accounting per project and per run (running jobs counted up to now); -ENOENT if unknown. */
int tf_sched_project_usage(const struct tf_sched *s, const char *project, double now,
                           struct tf_sched_usage *out);
int tf_sched_run_usage(const struct tf_sched *s, const char *run, double now,
                       struct tf_sched_usage *out);

/* Chips busy / healthy chips of one pool (or all pools with pool = -1), right now. */
double tf_sched_utilization(const struct tf_sched *s, int pool);
/* 1 - (largest free box / free chips) of a pool: 0 when the free chips form one box. */
double tf_sched_fragmentation(struct tf_sched *s, int pool);

/* The pools (chips, hosts, occupancy), the queue with reasons, utilization and accounting as
 * one JSON object (new reference, the caller owns it). */
json_t *tf_sched_describe_json(struct tf_sched *s, double now);
/* The same for people: per pool a map (one character per chip: '.' free, 'x' failed, a letter
 * per job, legend below), then the queue with reasons. A new string the caller frees. */
char *tf_sched_describe_text(struct tf_sched *s, double now);

const char *tf_sched_state_name(enum tf_sched_job_state st);
const char *tf_sched_policy_name(enum tf_sched_policy p);
int tf_sched_policy_parse(const char *name, enum tf_sched_policy *out);

#endif

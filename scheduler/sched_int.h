/* sched_int.h — the scheduler's internal state, shared by sched.c (decisions) and
 * describe.c (JSON and text views). Nothing outside scheduler/ includes it.
 *
 * Invariants (checked by the tests):
 *  1. For every pool row r: free[r] == ~(busy[r] | failed[r] | reserved[r]) & xmask.
 *  2. owner[c] != 0 exactly for the chips of RUNNING and DRAINING jobs, and those chips have
 *     their busy bit set; a running job's box holds no failed chip.
 *  3. A QUEUED job has exactly one live entry, in one queue list: q[pool][project][priority],
 *     ordered by seq (and so by id); the entry mirrors its chips, sid, preemptible and
 *     has_target.
 *  4. reserved = the union of the target boxes of queued jobs waiting for preempted jobs.
 *  5. project quota_used = chips of its running and draining jobs with borrowed == 0, plus
 *     chips of its queued jobs with a drain target.
 */
#ifndef TF_SCHED_INT_H
#define TF_SCHED_INT_H

#include "scheduler/sched.h"

#include <stdint.h>

#define NPRIO (TF_SCHED_PRIO_MAX + 1)
#define MAX_SHAPES 256 /* distinct requested shapes with a placement memo */

struct project {
	char *name;           /* project name */
	double weight;        /* fair-share weight (> 0) */
	int quota;            /* chips across all pools, 0: unlimited */
	int may_borrow;       /* preemptible jobs may exceed the quota on idle capacity */
	int running_chips;    /* chips held now (running and draining jobs) */
	int quota_used;       /* chips counted against the quota: running and draining jobs that
	                         started within it, plus chips held for its jobs waiting on
	                         preempted jobs (invariant 5); borrowed jobs do not count */
	double decayed;       /* chip-seconds used, decayed with the configured half-life */
	double chip_seconds;  /* accounted chip-seconds of finished attempts */
	double slice_seconds; /* accounted slice-seconds of finished attempts */
	int jobs;             /* jobs submitted */
	double key;           /* fair-share key this tick: lower goes first */
};

struct run_acct {
	char *name;           /* run id */
	double chip_seconds;  /* finished attempts */
	double slice_seconds; /* finished attempts */
	int running_chips;    /* chips held now */
	int jobs;             /* jobs submitted */
};

struct job {
	int id;                                    /* index in s->jobs */
	enum tf_sched_job_state state;             /* see the diagram in sched.h */
	char *name, *run;                          /* owned copies, may be NULL */
	int project;                               /* index in s->projects */
	int run_idx;                               /* index in s->runs, -1: none */
	int pool;                                  /* pool index, fixed at submit */
	int sid;                                   /* shape id for the placement memo, -1: none */
	int shape[3];                              /* requested extents */
	int chips;                                 /* product of the extents */
	int prio;                                  /* 0..TF_SCHED_PRIO_MAX */
	int preemptible;                           /* may be preempted */
	int borrowed;                              /* started beyond its project's quota */
	double est;                                /* estimated seconds per attempt */
	double submitted;                          /* submit time */
	uint64_t seq;                              /* FIFO order (kept across requeues) */
	double started;                            /* start of the current attempt */
	double first_start;                        /* first start, -1 before */
	struct tf_box box;                         /* where it runs (RUNNING, DRAINING) */
	int attempts, preemptions, infra_failures; /* counters */
	double deadline;                           /* DRAINING: end of the grace period */
	int has_target;                     /* QUEUED: waiting on preempted jobs for `target` */
	struct tf_box target;               /* the box being drained for it */
	double chip_seconds, slice_seconds; /* accounted (finished attempts) */
	int run_pos; /* index in its pool's running array, -1 when not running */
};

/* One queued job in its queue list, with what the walk reads of it: a tick may pass a
 * thousand queued jobs to reach the ones it examines, and walking an array of these stays in
 * the cache and in order where chasing links through job records spread over megabytes did
 * not. A job leaving the queue leaves a dead entry (QE_LIVE clear) that keeps its id, so the
 * array stays sorted, a job requeued before the list is compacted takes its entry back, and
 * a walk's positions stay valid while it starts jobs. */
enum { QE_LIVE = 1, QE_PREEMPTIBLE = 2, QE_TARGET = 4 };
struct qent {
	int id;               /* job id (ids are handed out in seq order) */
	int chips;            /* = the job's chips */
	short sid;            /* = the job's shape id */
	unsigned short flags; /* QE_*: live, and the job's preemptible and has_target */
	uint64_t borrow_walk; /* walk_serial of the walk that left it to the borrow pass */
};

/* A queue list: v[lo..n) ordered by id (so by seq), dead entries among them. */
struct qlist {
	struct qent *v;
	int lo, n, cap; /* first entry that may be live, end, allocated */
	int dead;       /* dead entries in v[lo..n) */
	int dead_hi;    /* none beyond this index */
};

struct pool {
	char *name;                   /* pool name */
	char tpu_gen[16];             /* generation, "v4" */
	char spec[64];                /* as configured, "v4:4x4x8" */
	struct tf_torus t;            /* geometry and search scratch */
	int host[3];                  /* chips per host along x, y, z */
	uint64_t *busy;               /* held by a running or draining job */
	uint64_t *failed;             /* failed chips */
	uint64_t *reserved;           /* being drained for a waiting job */
	uint64_t *free;               /* usable now: invariant 1 */
	uint64_t *scratch;            /* search inputs built on the fly */
	uint64_t *scratch2;           /* second scratch (reservation box removed) */
	int *owner;                   /* per chip: job id or 0 */
	int busy_chips, failed_chips; /* counts */
	uint64_t gen;                 /* bumps on every occupancy change: invalidates the memo */
	uint64_t epoch;               /* bumps on changes that can move the head's reservation */
	struct qlist *q;              /* [project * NPRIO + prio] */
	int nq_projects;              /* projects q has room for */
	int queued;                   /* jobs in q */
	int *running;                 /* ids of jobs holding chips */
	int nrunning, caprunning;
	int *targets; /* ids of queued jobs with a drain target */
	int ntargets, captargets;
	uint64_t grow;        /* bumps when chips become usable (release, repair, undrain) */
	uint64_t resv_serial; /* bumps when the reservation is recomputed */
	/* placement memo per shape id: while `grow` is unchanged a "no fit" stays true (usable
	 * chips only shrank) and a found box stays a fit as long as it is still free */
	uint64_t memo_grow[MAX_SHAPES], memor_grow[MAX_SHAPES], memor_resv[MAX_SHAPES];
	signed char memo_ok[MAX_SHAPES], memor_ok[MAX_SHAPES];
	struct tf_box memo_box[MAX_SHAPES], memor_box[MAX_SHAPES];
	/* the reservation of the first blocked job (EASY), valid while resv_epoch == epoch */
	int resv_job;           /* job id, 0: none */
	uint64_t resv_epoch;    /* epoch it was computed at */
	int resv_ok;            /* 1: a time and box exist */
	double resv_time;       /* when the head can start at the latest */
	double resv_at;         /* when it was computed */
	struct tf_box resv_box; /* where */
	uint64_t largest_gen;   /* cache of the largest free box */
	int largest_ok;
	struct tf_box largest;
};

struct tf_sched {
	struct tf_sched_config cfg; /* policy and knobs */
	struct pool *pools;
	int npools;
	struct project *projects;
	int nprojects;
	int *cursor; /* per project: next queue entry in the walk (tick scratch) */
	int *qhold;  /* per project: quota chips held this tick for its blocked jobs, so
	                jobs behind them cannot take the quota they wait for (tick scratch) */
	struct run_acct *runs;
	int nruns;
	struct job *jobs; /* jobs[0] unused: ids start at 1 */
	int njobs, capjobs;
	int shapes[MAX_SHAPES][3]; /* interned shapes */
	int nshapes;
	uint64_t seq;       /* next FIFO sequence number */
	double last_accrue; /* time fair-share usage was last decayed */
	int *stamp;         /* per job id, for distinct-victim counting */
	int stamp_now;
	uint64_t walk_serial; /* bumps on every queue walk (one per pool per tick) */
	uint64_t decisions;   /* decisions taken so far */
};

/* Shared with describe.c. */
void tf_sched_shape_str(const int s[3], int ndims, char *buf, size_t len);
double tf_sched_job_running_seconds(const struct job *j, double now);
int tf_sched_pool_largest(struct tf_sched *s, int pool, struct tf_box *out);

#endif

/* broker.h — who holds which chips: the slice requests of train attempts go through a broker,
 * request -> grant -> release, and the broker may reclaim a grant (ask its holder to give the
 * chips back: `preempted` for a more urgent job, `infra` when a chip under it failed).
 *
 * One interface, struct tf_broker_ops, like tf_objstore_ops and tf_executor_ops. The broker
 * over the state database (tf_broker_db_new) is the one every process on a home uses, so all
 * of them share one pool per TPU generation:
 *
 *   request   inserts a slice_jobs row without a box (queued_at, project, priority);
 *   schedule  in one write transaction loads every open row of live attempts onto a fresh
 *             tf_sched (placed rows at their boxes with tf_sched_place_at, rows being
 *             reclaimed as draining, waiting rows submitted in request order with their
 *             priority and project, failed chips from failed_chips), ticks it and writes the
 *             decisions back: a START is the box on the row, a PREEMPT is reclaim_at and
 *             reclaim_class on the victim's row, a waiting row gets the scheduler's reason;
 *   status    reads one row: waiting (why), granted (where), or reclaimed (why);
 *   release   completes the row (finished_at, slice-seconds) or deletes it if never placed.
 *
 * Because one transaction decides and the scheduler is rebuilt from the rows each time, two
 * processes never hold the same chip, and nothing accumulates in a long-lived process. Holders
 * learn of a reclaim by polling status; the broker never kills anything itself (a draining row
 * keeps its chips until its holder releases them).
 *
 * Times are wall-clock seconds. Ownership: strings in requests are borrowed for the call.
 */
#ifndef TF_BROKER_H
#define TF_BROKER_H

#include "executors/executor.h"
#include "orchestrator/store.h"
#include "scheduler/torus.h"

#include <stddef.h>
#include <stdint.h>

#define TF_BROKER_PRIORITY_DEFAULT 5 /* priorities are 0..TF_SCHED_PRIO_MAX (9) */

struct tf_slice_request {
	const char *run, *step; /* the attempt asking */
	int attempt;            /* its number (1, 2, ...) */
	const char *slice;      /* slice type, e.g. "v4-8" */
	const char *project;    /* NULL: "default" */
	int priority;           /* 0..9 */
	int preemptible;        /* may be reclaimed for a more urgent job */
};

enum tf_slice_state {
	TF_SLICE_WAITING,   /* not placed yet; reason says why */
	TF_SLICE_GRANTED,   /* placed: pool, box, chips, granted_at */
	TF_SLICE_RECLAIMED, /* granted, and the broker asks for it back: reclaim, reason */
};

struct tf_slice_status {
	enum tf_slice_state state;
	char pool[40];              /* GRANTED / RECLAIMED: pool name, e.g. "v4" */
	struct tf_box box;          /* where */
	int chips;                  /* chips in the box (WAITING: chips needed) */
	double granted_at;          /* when it was placed */
	enum tf_fail_class reclaim; /* RECLAIMED: TF_FAIL_PREEMPTED or TF_FAIL_INFRA */
	char reason[256];           /* WAITING: why it waits; RECLAIMED: why; else "" */
};

struct tf_broker;

struct tf_broker_ops {
	const char *name;
	/* Queues a request; *ticket names it from now on. -EINVAL with err when no pool of
	 * the slice's generation can ever hold it. */
	int (*request)(struct tf_broker *b, const struct tf_slice_request *r, double now,
	               int64_t *ticket, char *err, size_t errlen);
	/* Takes every decision due now (grants, reclaims) for all requests it knows. */
	int (*schedule)(struct tf_broker *b, double now);
	/* Where a request stands. -ENOENT for an unknown (released) ticket. */
	int (*status)(struct tf_broker *b, int64_t ticket, struct tf_slice_status *out);
	/* The holder is done with it (or withdraws it); *slice_seconds (may be NULL) receives
	 * the seconds it was held (0 if never granted). */
	int (*release)(struct tf_broker *b, int64_t ticket, double now, double *slice_seconds);
	void (*destroy)(struct tf_broker *b);
};

/* Every implementation's state starts with this. */
struct tf_broker {
	const struct tf_broker_ops *ops;
};

/* The broker over the state database `st` (borrowed; it must outlive the broker). Each call
 * runs in the caller's open transaction, else in its own (BEGIN IMMEDIATE). Pools: the first
 * of each generation in $TPUFLOW_POOLS, else the scheduler's default. The caller owns *out. */
int tf_broker_db_new(struct tf_store *st, struct tf_broker **out);

int tf_broker_request(struct tf_broker *b, const struct tf_slice_request *r, double now,
                      int64_t *ticket, char *err, size_t errlen);
int tf_broker_schedule(struct tf_broker *b, double now);
int tf_broker_status(struct tf_broker *b, int64_t ticket, struct tf_slice_status *out);
int tf_broker_release(struct tf_broker *b, int64_t ticket, double now, double *slice_seconds);
void tf_broker_free(struct tf_broker *b); /* NULL is a no-op */

/* Chip failure, recorded in the database so every process's broker sees it: `pool` is a pool
 * name ("v4"), x, y, z the chip. A decision is taken at once in the same transaction: a grant
 * holding the chip is reclaimed (class infra; its holder sees it at its next poll), and
 * nothing is placed on the chip until it is repaired (which decides again, so a request
 * waiting for it may be placed). tf_broker_chip_repair returns -ENOENT when the chip was not
 * marked failed. */
int tf_broker_chip_fail(struct tf_store *st, const char *pool, const int xyz[3], double now,
                        const char *reason);
int tf_broker_chip_repair(struct tf_store *st, const char *pool, const int xyz[3]);

#endif

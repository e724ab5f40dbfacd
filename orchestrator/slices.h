/* slices.h — train attempts' slices as the state database records them (table slice_jobs),
 * the pools they are placed on, and the view `tpuflow slices` draws from them.
 *
 * Each `tpuflow run` process schedules its train attempts on its own embedded pool (one per
 * TPU generation). When its scheduler places an attempt the engine records the placement
 * (tf_slice_job_started: pool, box, chips, start time) and completes the row when the attempt
 * ends (tf_slice_job_finished). tf_slices_view_load reads those rows back: the attempts
 * running now are put on one scheduler's map at their recorded boxes (tf_sched_place_at), and
 * finished rows give slice-seconds per run and per project.
 */
#ifndef TF_SLICES_H
#define TF_SLICES_H

#include "orchestrator/store.h"
#include "scheduler/sched.h"

#include <jansson.h>
#include <stdint.h>

/* The pool specs $TPUFLOW_POOLS configures (comma-separated GEN:AxBxC, blanks ignored), copied
 * into buf; out[] receives pointers into buf, at most cap. Returns how many (0 when unset). */
int tf_slices_env_pools(char *buf, size_t buflen, const char **out, int cap);

/* The pool a generation's train attempts are placed on: the first pool of that generation in
 * $TPUFLOW_POOLS, else the embedded default (tf_sched_default_pool). -EINVAL for an unknown
 * generation. */
int tf_slices_pool_for(const char *gen, char *spec, size_t len);

/* Adds the pools given (specs; none: $TPUFLOW_POOLS, else the default v4 pool) to s, each
 * named after its generation ("v4"; a second v4 pool "v4-2"), as train attempts name the pool
 * of their generation. 0, or -EINVAL with err for a bad spec. */
int tf_slices_add_pools(struct tf_sched *s, const char *const *pools, int npools, char *err,
                        size_t errlen);
/* Index of the pool a recorded placement belongs on: the pool of the same name and spec, else
 * the first of the same spec, else a new pool (named `pool` when that name is free). Negative
 * with err for a bad spec. */
int tf_slices_pool_index(struct tf_sched *s, const char *pool, const char *spec, char *err,
                         size_t errlen);
/* An open slice_jobs row (finished_at NULL): a train attempt's request or grant, and whether
 * a live attempt still holds it (the broker and `tpuflow slices` read them alike). */
struct tf_slice_row {
	int64_t id;                /* slice_jobs.id, the broker's ticket */
	char *run, *step;          /* the attempt's run and step */
	int attempt;               /* its number */
	char *slice;               /* slice type asked for, e.g. "v4-8" */
	char *pool, *pool_spec;    /* its pool (NULL for rows written before the broker) */
	int has_box;               /* 1 when placed: box holds its chips */
	struct tf_box box;         /* the chips, when has_box */
	int chips;                 /* chips in the box (or asked for) */
	double started_at;         /* when it was placed (or asked) */
	double queued_at;          /* when it asked for its slice (started_at when unrecorded) */
	char *project;             /* scheduler project ("default") */
	int priority, preemptible; /* as asked */
	char *reclaim_class;       /* infra or preempted when it is asked to give chips back */
	char *hold;                /* a reservation "x,y,z+a,b,c" while waiting, or NULL */
	char *wait_reason;         /* the scheduler's reason while not placed, or NULL */
	char *gone;                /* why no live attempt holds it, NULL when one does */
	int job;                   /* for the reader: its id in a scheduler it loads it onto */
};

/* Reads every open row, oldest request first, into a new array (*n rows) the caller frees with
 * tf_slice_rows_free. 0, or a negative store code. tf_slice_row_release empties one row. */
int tf_slices_read_open(struct tf_store *st, struct tf_slice_row **rows, size_t *n);
void tf_slice_row_release(struct tf_slice_row *r);
void tf_slice_rows_free(struct tf_slice_row *rows, size_t n);
/* What loading row r onto s needs (the broker's round and the view alike): its pool's index
 * on s (found, or added by name and spec: tf_slices_pool_index) and a job spec like its
 * attempt's, named RUN/STEP in `name`, borrowing from r and name. The pool index, or
 * negative with err. */
int tf_slices_row_job(struct tf_sched *s, const struct tf_slice_row *r, char name[256],
                      struct tf_sched_job_spec *js, char *err, size_t errlen);

/* A box from six columns of a slice_jobs row from `col` on (box_x, box_y, box_z, box_a,
 * box_b, box_c): 1 when all are set, 0 when the row has no box. */
int tf_slices_stmt_box(struct tf_stmt *q, int col, struct tf_box *box);

/* Where one train attempt was placed (all strings borrowed for the call). */
struct tf_slice_placement {
	const char *run, *step; /* run id and step name */
	int attempt;            /* attempt number (1, 2, ...) */
	const char *slice;      /* slice type asked for, e.g. "v4-8" */
	const char *pool;       /* pool name in the run's scheduler, e.g. "v4" */
	const char *pool_spec;  /* that pool, e.g. "v4:4x4x8" */
	struct tf_box box;      /* the chips: origin and extents as placed */
	int chips;              /* chips in the box */
	const char *project;    /* scheduler project, NULL: "default" */
	int priority;           /* scheduler priority */
	double started_at;      /* wall-clock time the slice was taken */
};

/* Records a placement as a slice_jobs row with finished_at NULL; *id receives the row id. */
int tf_slice_job_started(struct tf_store *st, const struct tf_slice_placement *p, int64_t *id);
/* Records a request not placed yet (p's pool, box and started_at are ignored; chips is what
 * it needs): a row without a box, queued_at = `queued_at`; *id receives the row id. */
int tf_slice_job_queued(struct tf_store *st, const struct tf_slice_placement *p, double queued_at,
                        int64_t *id);
/* Why a queued request still waits (the run's scheduler's words), for people. */
int tf_slice_job_waiting(struct tf_store *st, int64_t id, const char *reason);
/* The queued request was placed: fills in pool, box, chips and started_at. */
int tf_slice_job_placed(struct tf_store *st, int64_t id, const struct tf_slice_placement *p);
/* The request was withdrawn before it was placed (it never held a slice): deletes the row. */
int tf_slice_job_forget(struct tf_store *st, int64_t id);
/* Completes the row: when the slice was released and the seconds it was held. -ENOENT for no
 * such row. */
int tf_slice_job_finished(struct tf_store *st, int64_t id, double finished_at,
                          double slice_seconds);

/* Closes the rows a run's earlier process left open (it died; the run is being resumed):
 * requests never placed are deleted, placed ones get finished_at = `at` and slice_seconds
 * NULL, since when the slice was really freed is unknown (accounting counts them as 0). */
int tf_slice_jobs_close_run(struct tf_store *st, const char *run, double at);

/* What `tpuflow slices` shows. */
struct tf_slices_view {
	/* pools with the running attempts placed (owned); its clock is seconds relative to the
	 * `now` of tf_slices_view_load: describe it and add jobs to it at time 0 */
	struct tf_sched *sched;
	/* {database: path or null, running: [{run, step, attempt, job, slice, pool, pool_spec,
	 *  box: {origin, shape}, chips, started_at, running_seconds, slice_seconds,
	 *  chip_seconds}], waiting: [{run, step, attempt, slice, chips, priority, project, queued_at,
	 *  waiting_seconds, reason}], skipped: [{run, step, attempt, reason}], accounting: {runs:
	 * [{run, pipeline, attempts, slice_seconds, chip_seconds}], projects: [{project, attempts,
	 *  slice_seconds, chip_seconds}], slice_seconds, chip_seconds}, slurm: [{run, step,
	 *  attempt, slurm_job, nodes, state}] (attempts running as Slurm jobs, docs/slurm.md)}
	 *  (owned) */
	json_t *recorded;
};

/* Builds the view at wall-clock time `now`: the pools given (specs; none: $TPUFLOW_POOLS,
 * else the default v4 pool), plus the pool of any running attempt recorded on a pool not
 * among them; then every attempt of HOME/tpuflow.db that holds a slice now, placed at its
 * recorded box; attempts still waiting for their run's scheduler are listed with its reason.
 * An attempt whose run is no longer driven by a live process, whose attempt has
 * ended, or whose chips collide with one already shown is skipped with a reason. A home
 * without a database shows the pools only (nothing is created). Returns 0, -EINVAL with err
 * for a bad pool spec, or a store error with err. */
int tf_slices_view_load(const char *home, const char *const *pools, int npools, double now,
                        struct tf_slices_view *out, char *err, size_t errlen);
void tf_slices_view_release(struct tf_slices_view *v);

#endif

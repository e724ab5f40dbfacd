/* retention.h — deleting runs and keeping a home's history in bounds: `tpuflow runs delete`
 * and `tpuflow gc` (docs/runs.md, "Deleting runs and retention").
 *
 * Deleting a run removes its rows (the run, its steps, attempts, events, artifacts, labels,
 * slice accounting and the cache entries it produced), its objects in the store it ran
 * against (everything under runs/RUN/: logs, datasets, checkpoints, bundles, outputs) and its
 * scratch directory HOME/work/RUN. What is still used elsewhere stays: the objects of a model
 * version registered from the run (its bundle, checkpoint and dataset directories) and those
 * that a step of another run took from the cache (its outputs name them). Objects go first,
 * rows last, so a delete that stops half way (a store that fails) leaves the run listed and
 * the same command finishes it.
 */
#ifndef TF_RETENTION_H
#define TF_RETENTION_H

#include "orchestrator/store.h"

#include <jansson.h>
#include <stdint.h>

/* What deleting a run removed (or, in a dry run, would remove). */
struct tf_run_delete_report {
	size_t objects;      /* objects removed */
	uint64_t bytes;      /* their size */
	size_t kept;         /* objects kept because a model version or another run uses them */
	json_t *kept_by;     /* ["model fashion-mnist v3", "run 2026...-abc (cache)"] (owned) */
	size_t failed;       /* objects the store would not remove (the rows then stay) */
};
void tf_run_delete_report_release(struct tf_run_delete_report *r);

/* Deletes `run` (a full id) of the home `home` whose database is `st`. A running run is
 * refused (-EBUSY) unless its owner is gone, a pending one too (cancel it first); -ENOENT
 * for an unknown run; -EIO when its store cannot be opened or refuses a delete (nothing of
 * the rows is removed then). With `dry_run` nothing changes and the report says what
 * would go. Messages in err; *r is filled in every case (release it). */
int tf_run_delete(struct tf_store *st, const char *home, const char *run, int dry_run,
                  struct tf_run_delete_report *r, char *err, size_t errlen);

/* What deleting `run` did, as `runs delete --json` and DELETE /api/v1/runs/{id} write it:
 * {run, deleted, error, reason, objects, bytes, kept, kept_for} (caller owns it). `rc` and
 * `err` are tf_run_delete's return and message; `deleted` is true only when it removed the
 * run. When it did not, `reason` says why in a word: "not_found" (-ENOENT), "busy" (-EBUSY:
 * a live or pending run), "unavailable" (-EIO: the store or the database did not answer) or
 * "failed"; `error` and `reason` are null otherwise. */
json_t *tf_run_delete_report_json(const char *run, int rc, int dry_run, const char *err,
                                  const struct tf_run_delete_report *r);

/* A retention policy (`tpuflow gc`). A run is removed when it is final (succeeded, failed or
 * interrupted) and beyond every limit given: not among the newest `keep_last` runs of its
 * pipeline (running and pending ones count among them), and created more than `older_than`
 * seconds ago. */
struct tf_gc_policy {
	int keep_last;         /* -1: no limit by count */
	double older_than;     /* seconds; 0: no limit by age */
	const char *pipeline;  /* only this pipeline's runs; NULL: every pipeline */
};
/* The runs the policy removes, oldest first: [{id, pipeline, state, created_at}] (caller owns
 * *out). -EINVAL when the policy gives no limit. */
int tf_gc_select(struct tf_store *st, const struct tf_gc_policy *p, json_t **out);

#endif

/* schedules.h — registered pipelines and their cron schedules.
 *
 * `tpuflow pipelines add FILE` stores the file's text and digest (table pipelines), so a
 * schedule always fires the text that was added. tf_schedules_fire_due, called periodically
 * (by the daemon's loop, or `tpuflow schedules fire`), creates the runs whose ticks are due:
 *
 *   - the ticks since the last one handled are listed (cron.h: zone, DST rules);
 *   - a tick older than `starting_deadline` is missed; of the rest, `catchup: none` fires only
 *     a tick less than a minute old, `latest` the newest, `all` the newest `catchup_max`
 *     (oldest first) — the others are recorded as missed;
 *   - `concurrency: forbid` skips a tick while a run of the pipeline is pending or running,
 *     `replace` asks that run to stop (SIGTERM to the process driving it, or the caller's
 *     cancel hook) and fires, `allow` fires;
 *   - each handled tick is one schedule_fires row under a unique key PIPELINE@TICK, inserted
 *     in the same transaction that creates the run, so a tick fires exactly once however many
 *     processes call this at once.
 *
 * A fired run is created pending (tf_run_create, the registered text, default params); the
 * caller starts it (the daemon does; without one, `tpuflow runs resume RUN` drives it). Call
 * these outside a transaction: each pipeline's ticks are decided in a transaction of their own.
 */
#ifndef TF_SCHEDULES_H
#define TF_SCHEDULES_H

#include "orchestrator/diag.h"
#include "orchestrator/store.h"

#include <jansson.h>
#include <stdint.h>

/* Registers (or replaces) the pipeline in `path`: it must load without errors (diags) and its
 * params must all have defaults. *name (may be NULL) receives a copy of its name. 0, -EINVAL
 * (diags), or a store error. */
int tf_pipelines_add(struct tf_store *st, const char *path, double now, char **name,
                     struct tf_diag_list *diags);
/* The same for pipeline text received whole (the REST API); `file` names it in diagnostics
 * and is recorded as its path. */
int tf_pipelines_add_text(struct tf_store *st, const char *file, const char *text, size_t len,
                          double now, char **name, struct tf_diag_list *diags);
/* Unregisters a pipeline; -ENOENT when none of that name. Past fires are kept. */
int tf_pipelines_remove(struct tf_store *st, const char *name);
/* [{name, path, digest, added_at, schedule: {cron, timezone, concurrency, catchup,
 *  catchup_max, starting_deadline, next: [Unix seconds...]} | null}] with the next `nnext`
 * fire times after now. New reference. */
int tf_pipelines_list(struct tf_store *st, double now, int nnext, json_t **out);
/* The entry of tf_pipelines_list of the registered pipeline `name` (only its text is
 * loaded): 0 with *out a new reference, -ENOENT when none of that name, or a store error. */
int tf_pipelines_get(struct tf_store *st, const char *name, double now, int nnext, json_t **out);

/* Pauses (pause = 1) or resumes (0) the schedule of registered pipeline `name`. A paused
 * schedule handles no tick: none fires, none is recorded missed or skipped, no alert is sent.
 * Resuming continues with the first tick after `now`: the ticks of the pause are passed over
 * (not caught up, whatever `catchup` says), and *passed (may be NULL) receives how many there
 * were (counted up to 1000). Pausing a paused schedule or resuming a running one changes
 * nothing. Adding the pipeline again keeps its pause. 0, -ENOENT (no such pipeline), -EINVAL
 * (it has no schedule), or a store error. Joins the caller's transaction. */
int tf_schedules_pause(struct tf_store *st, const char *name, int pause, double now,
                       int *passed);

/* What tf_schedules_fire_due needs from its caller. */
struct tf_schedule_hooks {
	/* asks an active run to stop for `concurrency: replace`; NULL: SIGTERM to the process
	 * driving it (runs.pid, when alive and not this process) */
	int (*cancel)(void *ctx, const char *run_id);
	void *ctx;
};

/* Handles every tick due at `now` (Unix seconds) as above, in one write transaction per
 * pipeline. *report (may be NULL) receives [{pipeline, tick, fire_key, outcome, run, reason}]
 * for the ticks handled now (new reference). hooks may be NULL. */
int tf_schedules_fire_due(struct tf_store *st, double now, const struct tf_schedule_hooks *hooks,
                          json_t **report);

#endif

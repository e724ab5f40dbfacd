/* slices.c — owns the slice_jobs rows (a train attempt's placement, written when the
 * scheduler places it and completed when it ends), the choice of pool per TPU generation
 * ($TPUFLOW_POOLS, else the scheduler's embedded default), and the view `tpuflow slices`
 * builds from the rows: running attempts drawn on one map at their recorded boxes, finished
 * ones summed into slice-seconds per run and per project. */
#include "orchestrator/slices.h"
#include "orchestrator/state.h"

#define TF_LOG_TAG "slices"
#include "common/common.h"
#include "common/log.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

/* ---- pools ---- */

int tf_slices_env_pools(char *buf, size_t buflen, const char **out, int cap)
{
	const char *env = getenv("TPUFLOW_POOLS");
	int n = 0;
	if (!env || !*env || buflen == 0)
		return 0;
	snprintf(buf, buflen, "%s", env);
	char *save = NULL;
	for (char *tok = strtok_r(buf, ", \t", &save); tok && n < cap;
	     tok = strtok_r(NULL, ", \t", &save))
		out[n++] = tok;
	return n;
}

/* The generation part of "GEN:AxBxC" into gen; 0, or -EINVAL without a colon. */
static int spec_gen(const char *spec, char *gen, size_t len)
{
	const char *colon = strchr(spec, ':');
	if (!colon || (size_t)(colon - spec) >= len)
		return -EINVAL;
	memcpy(gen, spec, (size_t)(colon - spec));
	gen[colon - spec] = '\0';
	return 0;
}

int tf_slices_pool_for(const char *gen, char *spec, size_t len)
{
	char buf[1024], g[16];
	const char *specs[32];
	int n = tf_slices_env_pools(buf, sizeof(buf), specs, (int)TF_ARRAY_LEN(specs));
	for (int i = 0; i < n; i++)
		if (spec_gen(specs[i], g, sizeof(g)) == 0 && !strcmp(g, gen)) {
			snprintf(spec, len, "%s", specs[i]);
			return 0;
		}
	return tf_sched_default_pool(gen, spec, len);
}

/* ---- rows ---- */

int tf_slice_job_started(struct tf_store *st, const struct tf_slice_placement *p, int64_t *id)
{
	char placement[160];
	snprintf(placement, sizeof(placement), "%s %d,%d,%d+%dx%dx%d", p->pool ? p->pool : "?",
	         p->box.origin[0], p->box.origin[1], p->box.origin[2], p->box.shape[0],
	         p->box.shape[1], p->box.shape[2]);
	int rc = tf_store_run(
	    st,
	    "INSERT INTO slice_jobs(run_id, step, attempt, slice, placement, chips, "
	    "started_at, pool, pool_spec, box_x, box_y, box_z, box_a, box_b, box_c, "
	    "project, priority) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
	    "ttittidttiiiiiiti", p->run, p->step, (int64_t)p->attempt, p->slice, placement,
	    (int64_t)p->chips, p->started_at, p->pool, p->pool_spec, (int64_t)p->box.origin[0],
	    (int64_t)p->box.origin[1], (int64_t)p->box.origin[2], (int64_t)p->box.shape[0],
	    (int64_t)p->box.shape[1], (int64_t)p->box.shape[2], p->project ? p->project : "default",
	    (int64_t)p->priority);
	if (rc == 0)
		*id = tf_store_last_rowid(st);
	return rc;
}

int tf_slice_job_queued(struct tf_store *st, const struct tf_slice_placement *p, double queued_at,
                        int64_t *id)
{
	int rc = tf_store_run(
	    st,
	    "INSERT INTO slice_jobs(run_id, step, attempt, slice, chips, started_at, "
	    "queued_at, project, priority) VALUES(?,?,?,?,?,?,?,?,?)",
	    "ttitiddti", p->run, p->step, (int64_t)p->attempt, p->slice, (int64_t)p->chips,
	    queued_at, queued_at, p->project ? p->project : "default", (int64_t)p->priority);
	if (rc == 0)
		*id = tf_store_last_rowid(st);
	return rc;
}

/* 0, or -ENOENT when the statement changed no row. */
static int changed(struct tf_store *st, int rc)
{
	return rc == 0 && tf_store_changes(st) == 0 ? -ENOENT : rc;
}

int tf_slice_job_waiting(struct tf_store *st, int64_t id, const char *reason)
{
	return changed(st, tf_store_run(st, "UPDATE slice_jobs SET wait_reason=? WHERE id=?", "ti",
	                                reason, id));
}

int tf_slice_job_placed(struct tf_store *st, int64_t id, const struct tf_slice_placement *p)
{
	char placement[160];
	snprintf(placement, sizeof(placement), "%s %d,%d,%d+%dx%dx%d", p->pool ? p->pool : "?",
	         p->box.origin[0], p->box.origin[1], p->box.origin[2], p->box.shape[0],
	         p->box.shape[1], p->box.shape[2]);
	return changed(st, tf_store_run(st,
	                                "UPDATE slice_jobs SET placement=?, chips=?, started_at=?, "
	                                "pool=?, pool_spec=?, box_x=?, box_y=?, box_z=?, box_a=?, "
	                                "box_b=?, box_c=?, wait_reason=NULL WHERE id=?",
	                                "tidttiiiiiii", placement, (int64_t)p->chips, p->started_at,
	                                p->pool, p->pool_spec, (int64_t)p->box.origin[0],
	                                (int64_t)p->box.origin[1], (int64_t)p->box.origin[2],
	                                (int64_t)p->box.shape[0], (int64_t)p->box.shape[1],
	                                (int64_t)p->box.shape[2], id));
}

int tf_slice_job_forget(struct tf_store *st, int64_t id)
{
	return changed(st, tf_store_run(st, "DELETE FROM slice_jobs WHERE id=?", "i", id));
}

int tf_slice_job_finished(struct tf_store *st, int64_t id, double finished_at, double slice_seconds)
{
	int own, rc = tf_store_join(st, &own);
	if (rc)
		return rc;
	rc = changed(
	    st, tf_store_run(st, "UPDATE slice_jobs SET finished_at=?, slice_seconds=? WHERE id=?",
	                     "ddi", finished_at, slice_seconds, id));
	/* the running total behind tpuflow_slice_seconds_total (migration 0019) */
	if (rc == 0)
		rc = tf_store_run(
		    st,
		    "INSERT INTO slice_seconds_totals(project, seconds) "
		    "SELECT coalesce(project, 'default'), ?1 FROM slice_jobs WHERE id=?2 "
		    "ON CONFLICT(project) DO UPDATE SET seconds=seconds+excluded.seconds",
		    "di", slice_seconds, id);
	return tf_store_leave(st, own, rc);
}

int tf_slice_jobs_close_run(struct tf_store *st, const char *run, double at)
{
	int rc = tf_store_run(st,
	                      "DELETE FROM slice_jobs WHERE run_id=? AND finished_at IS NULL AND "
	                      "box_a IS NULL AND queued_at IS NOT NULL",
	                      "t", run);
	if (rc == 0)
		rc = tf_store_run(st,
		                  "UPDATE slice_jobs SET finished_at=?, slice_seconds=NULL WHERE "
		                  "run_id=? AND finished_at IS NULL",
		                  "dt", at, run);
	return rc;
}

int tf_slices_stmt_box(struct tf_stmt *q, int col, struct tf_box *box)
{
	int whole = 1;
	for (int d = 0; d < 3; d++) {
		whole &= !tf_stmt_is_null(q, col + d) && !tf_stmt_is_null(q, col + 3 + d);
		box->origin[d] = (int)tf_stmt_int(q, col + d);
		box->shape[d] = (int)tf_stmt_int(q, col + 3 + d);
	}
	return whole;
}

/* Why the row being read from q is no longer held by a live attempt, or NULL when it is.
 * Columns from `col` on: runs.state, runs.owner, runs.pid, runs.heartbeat_at, attempts.state
 * (NULL when a row is missing). The run's owner must be live by the rule claims use
 * (tf_run_owner_live: a token, a heartbeat within TF_RUN_LEASE_S, a live pid), so a daemon's
 * run whose engine stopped renewing its heartbeat loses its chips although the daemon's pid
 * lives on. */
static const char *holder_gone(struct tf_stmt *q, int col, char *buf, size_t len)
{
	const char *run_state = tf_stmt_text(q, col), *attempt_state = tf_stmt_text(q, col + 4);
	if (!run_state)
		return "its run is not in the database";
	struct tf_run_owner o;
	if (tf_run_owner_read(q, col, &o) || o.state != TF_RUN_RUNNING) {
		snprintf(buf, len, "its run is %s: the attempt did not record its end", run_state);
		return buf;
	}
	if (!tf_run_owner_live(&o)) {
		if (!o.token[0])
			return "its run has no owner; 'tpuflow runs resume' continues the run";
		if (o.heartbeat_age >= 0 && o.heartbeat_age <= TF_RUN_LEASE_S)
			snprintf(buf, len,
			         "the process driving its run (pid %ld) is gone; 'tpuflow runs "
			         "resume' continues the run",
			         o.pid);
		else
			snprintf(buf, len,
			         "the owner of its run (pid %ld) has not renewed its heartbeat for "
			         "%.0f s; 'tpuflow runs resume' continues the run",
			         o.pid, o.heartbeat_age);
		return buf;
	}
	if (!attempt_state || strcmp(attempt_state, "running")) {
		snprintf(buf, len, "the attempt is %s",
		         attempt_state ? attempt_state : "not recorded");
		return buf;
	}
	return NULL;
}

void tf_slice_row_release(struct tf_slice_row *r)
{
	free(r->run);
	free(r->step);
	free(r->slice);
	free(r->pool);
	free(r->pool_spec);
	free(r->project);
	free(r->reclaim_class);
	free(r->hold);
	free(r->wait_reason);
	free(r->gone);
}

void tf_slice_rows_free(struct tf_slice_row *rows, size_t n)
{
	for (size_t i = 0; i < n; i++)
		tf_slice_row_release(&rows[i]);
	free(rows);
}

int tf_slices_read_open(struct tf_store *st, struct tf_slice_row **out, size_t *n)
{
	struct tf_stmt *q = tf_store_query(
	    st,
	    "SELECT j.id, j.run_id, j.step, j.attempt, j.slice, j.pool, j.pool_spec, j.box_x, "
	    "j.box_y, j.box_z, j.box_a, j.box_b, j.box_c, j.chips, j.started_at, "
	    "COALESCE(j.queued_at, j.started_at), COALESCE(j.project, 'default'), "
	    "COALESCE(j.priority, 5), j.preemptible, j.reclaim_class, j.hold, j.wait_reason, "
	    "r.state, r.owner, r.pid, r.heartbeat_at, a.state FROM slice_jobs j "
	    "LEFT JOIN runs r ON r.id = j.run_id "
	    "LEFT JOIN attempts a ON a.run_id = j.run_id AND a.step = j.step AND a.n = j.attempt "
	    "WHERE j.finished_at IS NULL ORDER BY 16, j.id",
	    "");
	if (!q)
		return -EIO;
	struct tf_slice_row *v = NULL;
	size_t k = 0, cap = 0;
	int rc;
	while ((rc = tf_stmt_step(q)) == 1) {
		if (k == cap) {
			cap = cap ? cap * 2 : 16;
			v = tf_xrealloc(v, cap * sizeof(*v));
		}
		struct tf_slice_row *r = &v[k++];
		memset(r, 0, sizeof(*r));
		r->id = tf_stmt_int(q, 0);
		r->run = tf_stmt_strdup(q, 1);
		r->step = tf_stmt_strdup(q, 2);
		r->attempt = (int)tf_stmt_int(q, 3);
		r->slice = tf_stmt_strdup(q, 4);
		r->pool = tf_stmt_strdup(q, 5);
		r->pool_spec = tf_stmt_strdup(q, 6);
		r->has_box = tf_slices_stmt_box(q, 7, &r->box);
		r->chips = (int)tf_stmt_int(q, 13);
		r->started_at = tf_stmt_double(q, 14);
		r->queued_at = tf_stmt_double(q, 15);
		r->project = tf_stmt_strdup(q, 16);
		r->priority = (int)tf_stmt_int(q, 17);
		r->preemptible = (int)tf_stmt_int(q, 18);
		r->reclaim_class = tf_stmt_strdup(q, 19);
		r->hold = tf_stmt_strdup(q, 20);
		r->wait_reason = tf_stmt_strdup(q, 21);
		char why[300];
		const char *gone = holder_gone(q, 22, why, sizeof(why));
		r->gone = gone ? tf_xstrdup(gone) : NULL;
	}
	tf_stmt_done(q);
	if (rc < 0) {
		tf_slice_rows_free(v, k);
		return rc;
	}
	*out = v;
	*n = k;
	return 0;
}

int tf_slices_row_job(struct tf_sched *s, const struct tf_slice_row *r, char name[256],
                      struct tf_sched_job_spec *js, char *err, size_t errlen)
{
	int pool = tf_slices_pool_index(s, r->pool, r->pool_spec, err, errlen);
	if (pool < 0)
		return pool;
	snprintf(name, 256, "%s/%s", r->run, r->step);
	*js = (struct tf_sched_job_spec){.name = name,
	                                 .run = r->run,
	                                 .project = r->project,
	                                 .slice = r->slice,
	                                 .pool = tf_sched_pool_name(s, pool),
	                                 .priority = r->priority,
	                                 .preemptible = r->preemptible};
	return pool;
}

/* ---- the view ---- */

/* Why an open row is not shown, or NULL when its attempt holds its slice now. */
static const char *stale_reason(const struct tf_slice_row *r, char *buf, size_t len)
{
	if (r->gone) {
		snprintf(buf, len, "%s", r->gone);
		return buf;
	}
	if (r->has_box && !r->pool_spec)
		return "its pool was not recorded";
	return NULL;
}

/* Slice-seconds of finished rows per run and per project. */
static int accounting(struct tf_store *st, int version, json_t **out)
{
	json_t *runs = json_array(), *projects = json_array();
	double total_s = 0, total_c = 0;
	int rc = 0;
	struct tf_stmt *q = tf_store_query(
	    st,
	    "SELECT j.run_id, r.pipeline, count(*), sum(COALESCE(j.slice_seconds, 0)), "
	    "sum(COALESCE(j.slice_seconds, 0) * j.chips) FROM slice_jobs j "
	    "LEFT JOIN runs r ON r.id = j.run_id WHERE j.finished_at IS NOT NULL "
	    "GROUP BY j.run_id ORDER BY min(j.started_at), j.run_id",
	    "");
	if (!q) {
		rc = -EIO;
		goto out;
	}
	while ((rc = tf_stmt_step(q)) == 1) {
		double ss = tf_stmt_double(q, 3), cs = tf_stmt_double(q, 4);
		json_array_append_new(runs,
		                      json_pack("{s:s?, s:s?, s:I, s:f, s:f}", "run",
		                                tf_stmt_text(q, 0), "pipeline", tf_stmt_text(q, 1),
		                                "attempts", (json_int_t)tf_stmt_int(q, 2),
		                                "slice_seconds", ss, "chip_seconds", cs));
		total_s += ss;
		total_c += cs;
	}
	tf_stmt_done(q);
	if (rc < 0)
		goto out;
	/* the project column arrived with schema 2; older rows are all "default" */
	q = version >= 2 ? tf_store_query(st,
	                                  "SELECT COALESCE(project, 'default') AS p, count(*), "
	                                  "sum(COALESCE(slice_seconds, 0)), "
	                                  "sum(COALESCE(slice_seconds, 0) * chips) FROM slice_jobs "
	                                  "WHERE finished_at IS NOT NULL GROUP BY p ORDER BY p",
	                                  "")
	                 : tf_store_query(st,
	                                  "SELECT 'default', count(*), "
	                                  "sum(COALESCE(slice_seconds, 0)), "
	                                  "sum(COALESCE(slice_seconds, 0) * chips) FROM slice_jobs "
	                                  "WHERE finished_at IS NOT NULL HAVING count(*) > 0",
	                                  "");
	if (!q) {
		rc = -EIO;
		goto out;
	}
	while ((rc = tf_stmt_step(q)) == 1)
		json_array_append_new(projects, json_pack("{s:s?, s:I, s:f, s:f}", "project",
		                                          tf_stmt_text(q, 0), "attempts",
		                                          (json_int_t)tf_stmt_int(q, 1),
		                                          "slice_seconds", tf_stmt_double(q, 2),
		                                          "chip_seconds", tf_stmt_double(q, 3)));
	tf_stmt_done(q);
	if (rc < 0)
		goto out;
	rc = 0;
	*out = json_pack("{s:o, s:o, s:f, s:f}", "runs", runs, "projects", projects,
	                 "slice_seconds", total_s, "chip_seconds", total_c);
	runs = projects = NULL;
out:
	json_decref(runs);
	json_decref(projects);
	return rc;
}

int tf_slices_pool_index(struct tf_sched *s, const char *pool, const char *spec, char *err,
                         size_t errlen)
{
	int n = tf_sched_pool_count(s), same_spec = -1;
	for (int i = 0; i < n; i++) {
		if (strcmp(tf_sched_pool_spec(s, i), spec))
			continue;
		if (pool && !strcmp(tf_sched_pool_name(s, i), pool))
			return i;
		if (same_spec < 0)
			same_spec = i;
	}
	if (same_spec >= 0)
		return same_spec;
	const char *name = pool;
	for (int i = 0; name && i < n; i++)
		if (!strcmp(tf_sched_pool_name(s, i), name))
			name = NULL;
	return tf_sched_add_pool(s, name ? name : spec, spec, err, errlen);
}

int tf_slices_add_pools(struct tf_sched *s, const char *const *pools, int npools, char *err,
                        size_t errlen)
{
	char envbuf[1024], def[64];
	const char *specs[32];
	if (npools <= 0) {
		npools =
		    tf_slices_env_pools(envbuf, sizeof(envbuf), specs, (int)TF_ARRAY_LEN(specs));
		if (npools == 0) {
			tf_sched_default_pool("v4", def, sizeof(def));
			specs[npools++] = def;
		}
		pools = specs;
	}
	for (int i = 0; i < npools; i++) {
		char gen[16], name[40];
		int same = 0;
		if (spec_gen(pools[i], gen, sizeof(gen)) == 0)
			for (int k = 0; k < i; k++) {
				char g2[16];
				same += spec_gen(pools[k], g2, sizeof(g2)) == 0 && !strcmp(g2, gen);
			}
		else
			snprintf(gen, sizeof(gen), "pool");
		if (same)
			snprintf(name, sizeof(name), "%s-%d", gen, same + 1);
		else
			snprintf(name, sizeof(name), "%s", gen);
		int rc = tf_sched_add_pool(s, name, pools[i], err, errlen);
		if (rc < 0)
			return rc;
	}
	return 0;
}

static void skip(json_t *skipped, const struct tf_slice_row *r, const char *why)
{
	json_array_append_new(skipped, json_pack("{s:s?, s:s?, s:i, s:s}", "run", r->run, "step",
	                                         r->step, "attempt", r->attempt, "reason", why));
}

/* Chips marked failed (`tpuflow slices fail`) drawn as failed; an attempt still on one (it is
 * giving its slice back) is then listed as skipped with that reason. Databases before the
 * broker have none. */
static void mark_failed(struct tf_store *st, struct tf_sched *s)
{
	struct tf_stmt *q = tf_store_query(st, "SELECT pool, x, y, z FROM failed_chips", "");
	struct tf_sched_decisions none = {0};
	while (q && tf_stmt_step(q) == 1)
		for (int p = 0; p < tf_sched_pool_count(s); p++) {
			const struct tf_torus *t = tf_sched_pool_torus(s, p);
			int x = (int)tf_stmt_int(q, 1), y = (int)tf_stmt_int(q, 2),
			    z = (int)tf_stmt_int(q, 3);
			if (!tf_stmt_text(q, 0) ||
			    strcmp(tf_sched_pool_name(s, p), tf_stmt_text(q, 0)) || x < 0 ||
			    y < 0 || z < 0 || x >= t->dims[0] || y >= t->dims[1] || z >= t->dims[2])
				continue;
			tf_sched_chip_fail(s, p, x + t->dims[0] * (y + t->dims[1] * z), 0, &none);
			tf_sched_decisions_release(&none);
		}
	tf_stmt_done(q);
}

/* Attempts running as Slurm jobs now (executor: slurm): [{run, step, attempt, slurm_job,
 * nodes, state}] (state: Slurm's, as last seen). */
static json_t *slurm_running(struct tf_store *st)
{
	json_t *a = json_array();
	struct tf_stmt *q = tf_store_query(
	    st,
	    "SELECT a.run_id, a.step, a.n, a.slurm_job, a.slurm_nodes, a.slurm_state FROM attempts a "
	    "JOIN runs r ON r.id = a.run_id WHERE a.state = 'running' AND r.state = 'running' "
	    "AND a.slurm_job IS NOT NULL ORDER BY a.run_id, a.step",
	    "");
	while (q && tf_stmt_step(q) == 1)
		json_array_append_new(a, json_pack("{s:s, s:s, s:I, s:I, s:s?, s:s?}", "run",
		                                   tf_stmt_text(q, 0), "step", tf_stmt_text(q, 1),
		                                   "attempt", (json_int_t)tf_stmt_int(q, 2),
		                                   "slurm_job", (json_int_t)tf_stmt_int(q, 3),
		                                   "nodes", tf_stmt_text(q, 4), "state",
		                                   tf_stmt_text(q, 5)));
	tf_stmt_done(q);
	return a;
}

int tf_slices_view_load(const char *home, const char *const *pools, int npools, double now,
                        struct tf_slices_view *out, char *err, size_t errlen)
{
	struct tf_sched *s = NULL;
	struct tf_store *st = NULL;
	struct tf_slice_row *rows = NULL;
	size_t nrows = 0;
	json_t *running = json_array(), *waiting = json_array(), *skipped = json_array(),
	       *acct = NULL, *slurm = NULL;
	char *path = tf_xasprintf("%s/%s", home, TF_STORE_FILE);
	struct tf_sched_config cfg;
	tf_sched_config_default(&cfg);
	cfg.preemption = 0; /* jobs added to the view (what-if) never displace recorded ones */
	int rc = tf_sched_new(&cfg, &s);
	if (rc)
		goto out;
	rc = tf_slices_add_pools(s, pools, npools, err, errlen);
	if (rc < 0)
		goto out;
	rc = 0;
	if (access(path, F_OK) != 0) {
		acct = json_pack("{s:[], s:[], s:f, s:f}", "runs", "projects", "slice_seconds", 0.0,
		                 "chip_seconds", 0.0);
		free(path);
		path = NULL;
		goto done;
	}
	rc = tf_store_open(path, TF_STORE_READONLY, &st, err, errlen);
	if (rc)
		goto out;
	int version = 0;
	rc = tf_store_version(st, &version);
	if (rc == 0 && version >= 2)
		rc = tf_slices_read_open(st, &rows, &nrows);
	if (rc == 0)
		rc = accounting(st, version, &acct);
	if (rc == 0)
		slurm = slurm_running(st);
	if (rc) {
		tf_errf(err, errlen, "cannot read slice jobs from '%s': %s", path,
		        tf_store_errmsg(st));
		goto out;
	}
	mark_failed(st, s);
	for (size_t i = 0; i < nrows; i++) {
		struct tf_slice_row *r = &rows[i];
		char why[400], perr[300];
		const char *stale = stale_reason(r, why, sizeof(why));
		if (stale) {
			skip(skipped, r, stale);
			continue;
		}
		if (!r->has_box) {
			double w = now > r->queued_at ? now - r->queued_at : 0;
			json_array_append_new(
			    waiting, json_pack("{s:s, s:s, s:i, s:s, s:i, s:i, s:s, s:f, s:f, s:s}",
			                       "run", r->run, "step", r->step, "attempt", r->attempt,
			                       "slice", r->slice, "chips", r->chips, "priority",
			                       r->priority, "project", r->project, "queued_at",
			                       r->queued_at, "waiting_seconds", w, "reason",
			                       r->wait_reason ? r->wait_reason
			                                      : "waiting for its run's scheduler"));
			continue;
		}
		char name[256];
		struct tf_sched_job_spec js;
		int pool = tf_slices_row_job(s, r, name, &js, perr, sizeof(perr));
		if (pool < 0) {
			snprintf(why, sizeof(why), "pool '%s': %s", r->pool_spec, perr);
			skip(skipped, r, why);
			continue;
		}
		js.preemptible = 1;
		int id = 0;
		/* the view's scheduler clock: seconds relative to now (0), so that times it
		 * prints (reservations) read as "from now" */
		int prc = tf_sched_place_at(s, pool, &r->box, &js, r->started_at - now, &id, perr,
		                            sizeof(perr));
		if (prc < 0) {
			snprintf(why, sizeof(why), "%s", perr);
			skip(skipped, r, why);
			continue;
		}
		double secs = now > r->started_at ? now - r->started_at : 0;
		json_t *j = json_pack(
		    "{s:s, s:s, s:i, s:i, s:s, s:s, s:s, s:{s:[i,i,i], s:[i,i,i]}, s:i, s:s, "
		    "s:f, s:f, s:f, s:f}",
		    "run", r->run, "step", r->step, "attempt", r->attempt, "job", id, "slice",
		    r->slice, "pool", tf_sched_pool_name(s, pool), "pool_spec", r->pool_spec, "box",
		    "origin", r->box.origin[0], r->box.origin[1], r->box.origin[2], "shape",
		    r->box.shape[0], r->box.shape[1], r->box.shape[2], "chips", r->chips, "project",
		    r->project, "started_at", r->started_at, "running_seconds", secs,
		    "slice_seconds", secs, "chip_seconds", secs * r->chips);
		json_array_append_new(running, j);
	}
done:
	out->sched = s;
	out->recorded = json_pack("{s:s?, s:o, s:o, s:o, s:o, s:o}", "database", path, "running",
	                          running, "waiting", waiting, "skipped", skipped, "accounting",
	                          acct, "slurm", slurm ? slurm : json_array());
	s = NULL;
	running = waiting = skipped = acct = slurm = NULL;
	rc = 0;
out:
	tf_slice_rows_free(rows, nrows);
	tf_store_close(st);
	tf_sched_free(s);
	json_decref(running);
	json_decref(waiting);
	json_decref(skipped);
	json_decref(acct);
	json_decref(slurm);
	free(path);
	return rc;
}

void tf_slices_view_release(struct tf_slices_view *v)
{
	if (!v)
		return;
	tf_sched_free(v->sched);
	json_decref(v->recorded);
	v->sched = NULL;
	v->recorded = NULL;
}

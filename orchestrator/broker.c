/* broker.c — owns the slice broker interface (the tf_broker_* calls dispatch through
 * tf_broker_ops) and its implementation over the state database: requests are slice_jobs rows,
 * and one write transaction loads them all onto a fresh scheduler, ticks it and writes the
 * grants and reclaims back (see broker.h). Also the failed_chips rows. */
#include "orchestrator/broker.h"
#include "orchestrator/alerts.h"

#define TF_LOG_TAG "broker"
#include "accel/tpu.h"
#include "common/common.h"
#include "common/log.h"
#include "orchestrator/slices.h"
#include "scheduler/sched.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the interface ---- */

int tf_broker_request(struct tf_broker *b, const struct tf_slice_request *r, double now,
                      int64_t *ticket, char *err, size_t errlen)
{
	return b->ops->request(b, r, now, ticket, err, errlen);
}

int tf_broker_schedule(struct tf_broker *b, double now)
{
	return b->ops->schedule(b, now);
}

int tf_broker_status(struct tf_broker *b, int64_t ticket, struct tf_slice_status *out)
{
	return b->ops->status(b, ticket, out);
}

int tf_broker_release(struct tf_broker *b, int64_t ticket, double now, double *slice_seconds)
{
	return b->ops->release(b, ticket, now, slice_seconds);
}

void tf_broker_free(struct tf_broker *b)
{
	if (b)
		b->ops->destroy(b);
}

/* ---- over the database ---- */

struct db_broker {
	struct tf_broker base;
	struct tf_store *st; /* borrowed */
};

static struct tf_store *db_of(struct tf_broker *b)
{
	return ((struct db_broker *)b)->st;
}

/* "x,y,z+a,b,c" <-> a box (the hold column). */
static void box_str(const struct tf_box *b, char *buf, size_t len)
{
	snprintf(buf, len, "%d,%d,%d+%d,%d,%d", b->origin[0], b->origin[1], b->origin[2],
	         b->shape[0], b->shape[1], b->shape[2]);
}

static int box_parse(const char *s, struct tf_box *b)
{
	return s && sscanf(s, "%d,%d,%d+%d,%d,%d", &b->origin[0], &b->origin[1], &b->origin[2],
	                   &b->shape[0], &b->shape[1], &b->shape[2]) == 6
	           ? 0
	           : -EINVAL;
}

static int db_request(struct tf_broker *b, const struct tf_slice_request *r, double now,
                      int64_t *ticket, char *err, size_t errlen)
{
	struct tf_tpu_slice sl;
	char spec[64];
	int rc = tf_tpu_slice_parse(r->slice, &sl, err, errlen);
	if (rc == 0 && (rc = tf_slices_pool_for(sl.gen->name, spec, sizeof(spec))) < 0)
		tf_errf(err, errlen, "no pool for generation '%s'", sl.gen->name);
	if (rc)
		return rc;
	/* refused now if it can never fit: a scheduler with just that pool says */
	struct tf_sched *s = NULL;
	struct tf_sched_job_info ji = {0};
	int id = 0;
	struct tf_sched_job_spec js = {.slice = r->slice,
	                               .project = r->project,
	                               .priority = r->priority,
	                               .preemptible = r->preemptible};
	if ((rc = tf_sched_new(NULL, &s)) == 0 &&
	    (rc = tf_sched_add_pool(s, sl.gen->name, spec, err, errlen)) >= 0 &&
	    (rc = tf_sched_submit(s, &js, 0, &id, err, errlen)) == 0)
		rc = tf_sched_job_info(s, id, 0, &ji);
	tf_sched_free(s);
	if (rc < 0)
		return rc;
	struct tf_store *st = db_of(b);
	rc = tf_store_run(st,
	                  "INSERT INTO slice_jobs(run_id, step, attempt, slice, chips, started_at, "
	                  "queued_at, pool, pool_spec, project, priority, preemptible) "
	                  "VALUES(?,?,?,?,?,?,?,?,?,?,?,?)",
	                  "ttitiddtttii", r->run, r->step, (int64_t)r->attempt, r->slice,
	                  (int64_t)ji.chips, now, now, sl.gen->name, spec,
	                  r->project ? r->project : "default", (int64_t)r->priority,
	                  (int64_t)(r->preemptible != 0));
	if (rc) {
		tf_errf(err, errlen, "cannot record the slice request: %s", tf_store_errmsg(st));
		return rc;
	}
	*ticket = tf_store_last_rowid(st);
	return 0;
}

/* The open rows whose attempt is alive (the others hold nothing) and that a broker wrote
 * (they name their pool), in request order. */
static int load_rows(struct tf_store *st, struct tf_slice_row **out, size_t *n)
{
	struct tf_slice_row *v = NULL;
	size_t all = 0, k = 0;
	int rc = tf_slices_read_open(st, &v, &all);
	if (rc)
		return rc;
	for (size_t i = 0; i < all; i++) {
		if (v[i].gone || !v[i].pool_spec) { /* no pool: written before the broker */
			tf_slice_row_release(&v[i]);
			continue;
		}
		v[k++] = v[i];
	}
	*out = v;
	*n = k;
	return 0;
}

static int reclaim_row(struct tf_store *st, struct tf_slice_row *r, const char *cls, double now,
                       const char *why)
{
	free(r->reclaim_class);
	r->reclaim_class = tf_xstrdup(cls);
	return tf_store_run(st,
	                    "UPDATE slice_jobs SET reclaim_at=?, reclaim_class=?, reclaim_reason=? "
	                    "WHERE id=?",
	                    "dtti", now, cls, why, r->id);
}

/* 1 when chip (x,y,z) of a pool with dims D lies in box b (which may wrap). */
static int box_has(const struct tf_box *b, const int D[3], const int xyz[3])
{
	for (int d = 0; d < 3; d++)
		if ((xyz[d] - b->origin[d] + D[d]) % D[d] >= b->shape[d])
			return 0;
	return 1;
}

/* Marks the failed chips on s: a chip under a grant reclaims that grant (infra; the grant
 * keeps its chips until released), a free one is failed in the scheduler. */
static int apply_failed(struct tf_store *st, struct tf_sched *s, struct tf_slice_row *rows,
                        size_t n, double now)
{
	struct tf_sched_decisions none = {0};
	struct tf_stmt *q = tf_store_query(st, "SELECT pool, x, y, z FROM failed_chips", "");
	if (!q)
		return -EIO;
	int rc;
	while ((rc = tf_stmt_step(q)) == 1) {
		const char *pool = tf_stmt_text(q, 0);
		int xyz[3] = {(int)tf_stmt_int(q, 1), (int)tf_stmt_int(q, 2),
		              (int)tf_stmt_int(q, 3)};
		for (int p = 0; p < tf_sched_pool_count(s); p++) {
			if (!pool || strcmp(tf_sched_pool_name(s, p), pool))
				continue;
			const struct tf_torus *t = tf_sched_pool_torus(s, p);
			if (xyz[0] < 0 || xyz[1] < 0 || xyz[2] < 0 || xyz[0] >= t->dims[0] ||
			    xyz[1] >= t->dims[1] || xyz[2] >= t->dims[2])
				continue;
			struct tf_slice_row *holder = NULL;
			for (size_t i = 0; i < n && !holder; i++)
				if (rows[i].job && rows[i].has_box && !strcmp(rows[i].pool, pool) &&
				    box_has(&rows[i].box, t->dims, xyz))
					holder = &rows[i];
			if (!holder) {
				int chip = xyz[0] + t->dims[0] * (xyz[1] + t->dims[1] * xyz[2]);
				tf_sched_chip_fail(s, p, chip, 0, &none);
				continue;
			}
			if (holder->reclaim_class)
				continue; /* already asked, and loaded as draining */
			char why[160];
			snprintf(why, sizeof(why), "chip %d,%d,%d of pool '%s' failed", xyz[0],
			         xyz[1], xyz[2], pool);
			tf_sched_drain_at(s, holder->job, INFINITY);
			if ((rc = reclaim_row(st, holder, "infra", now, why)) < 0)
				break;
			tf_info("%s/%s attempt %d: %s: asked to release its slice", holder->run,
			        holder->step, holder->attempt, why);
		}
		if (rc < 0)
			break;
	}
	tf_stmt_done(q);
	tf_sched_decisions_release(&none);
	return rc < 0 ? rc : 0;
}

static struct tf_slice_row *row_of_job(struct tf_slice_row *rows, size_t n, int job)
{
	for (size_t i = 0; i < n; i++)
		if (rows[i].job == job)
			return &rows[i];
	return NULL;
}

/* Loads the rows onto s (scheduler time: seconds relative to now). */
static int load_sched(struct tf_store *st, struct tf_sched *s, struct tf_slice_row *rows, size_t n,
                      double now)
{
	char err[300];
	for (int pass = 0; pass < 2; pass++)
		for (size_t i = 0; i < n; i++) {
			struct tf_slice_row *r = &rows[i];
			if (r->has_box != (pass == 0))
				continue;
			char name[256];
			struct tf_sched_job_spec js;
			int pool = tf_slices_row_job(s, r, name, &js, err, sizeof(err));
			if (pool < 0) {
				tf_warn("slice request %lld: pool '%s': %s", (long long)r->id,
				        r->pool_spec, err);
				continue;
			}
			int rc;
			if (r->has_box) {
				rc = tf_sched_place_at(s, pool, &r->box, &js, r->started_at - now,
				                       &r->job, err, sizeof(err));
				if (rc == 0 && r->reclaim_class)
					tf_sched_drain_at(s, r->job, INFINITY);
			} else {
				rc = tf_sched_submit(s, &js, r->queued_at - now, &r->job, err,
				                     sizeof(err));
				struct tf_box hb;
				if (rc == 0 && box_parse(r->hold, &hb) == 0 &&
				    tf_sched_hold_at(s, r->job, &hb))
					tf_debug("slice request %lld: drained box no longer held",
					         (long long)r->id);
			}
			if (rc < 0) {
				/* rows the broker wrote never collide; older ones may */
				tf_warn("slice request %lld (%s attempt %d): %s", (long long)r->id,
				        name, r->attempt, err);
				r->job = 0;
			}
		}
	return apply_failed(st, s, rows, n, now);
}

static int apply_decisions(struct tf_store *st, struct tf_sched *s, struct tf_slice_row *rows,
                           size_t n, const struct tf_sched_decisions *d, double now)
{
	int rc = 0;
	for (size_t i = 0; i < d->n && rc == 0; i++) {
		const struct tf_sched_decision *x = &d->v[i];
		struct tf_slice_row *r = row_of_job(rows, n, x->job);
		if (!r)
			continue;
		if (x->action == TF_SCHED_START) {
			struct tf_slice_placement pl = {.pool = tf_sched_pool_name(s, x->pool),
			                                .pool_spec = tf_sched_pool_spec(s, x->pool),
			                                .box = x->box,
			                                .chips = x->chips,
			                                .started_at = now};
			rc = tf_slice_job_placed(st, r->id, &pl);
			if (rc == 0)
				rc = tf_store_run(st, "UPDATE slice_jobs SET hold=NULL WHERE id=?",
				                  "i", r->id);
			r->has_box = 1;
		} else if (x->action == TF_SCHED_PREEMPT) {
			struct tf_slice_row *c = row_of_job(rows, n, x->cause);
			char why[400];
			snprintf(why, sizeof(why),
			         "preempted for %s/%s (priority %d, project '%s')",
			         c ? c->run : "?", c ? c->step : "?", c ? c->priority : -1,
			         c ? c->project : "?");
			rc = reclaim_row(st, r, "preempted", now, why);
			tf_info("%s/%s attempt %d: %s", r->run, r->step, r->attempt, why);
		}
		/* KILL needs a deadline and FAIL_INFRA a job on a failing chip: neither is loaded
		 */
	}
	/* requests still waiting: the box drained for them and why they wait, when changed */
	for (size_t i = 0; i < n && rc == 0; i++) {
		struct tf_slice_row *r = &rows[i];
		struct tf_sched_job_info ji;
		char why[256], hold[96] = "";
		if (r->has_box || !r->job || tf_sched_job_info(s, r->job, 0, &ji))
			continue;
		if (ji.has_target)
			box_str(&ji.target, hold, sizeof(hold));
		if (strcmp(hold, r->hold ? r->hold : ""))
			rc = tf_store_run(st, "UPDATE slice_jobs SET hold=? WHERE id=?", "ti",
			                  hold[0] ? hold : NULL, r->id);
		if (rc == 0 && tf_sched_job_reason(s, r->job, why, sizeof(why)) == 0 &&
		    strcmp(why, r->wait_reason ? r->wait_reason : ""))
			rc = tf_slice_job_waiting(st, r->id, why);
		if (rc == 0)
			rc = tf_alerts_on_waiting(st, r->run, r->step, r->attempt,
			                          now - r->queued_at,
			                          r->wait_reason ? r->wait_reason : why);
	}
	return rc;
}

/* One decision over every open row of st (see broker.h). */
static int decide(struct tf_store *st, double now)
{
	struct tf_slice_row *rows = NULL;
	size_t n = 0;
	struct tf_sched *s = NULL;
	struct tf_sched_decisions d = {0};
	char err[300];
	int own, rc = tf_store_join(st, &own);
	if (rc)
		return rc;
	rc = load_rows(st, &rows, &n);
	if (rc == 0 && n > 0) {
		rc = tf_sched_new(NULL, &s);
		if (rc == 0 && tf_slices_add_pools(s, NULL, 0, err, sizeof(err)) < 0)
			tf_warn("$TPUFLOW_POOLS: %s", err); /* pools of the rows are added anyway */
		if (rc == 0)
			rc = load_sched(st, s, rows, n, now);
		if (rc == 0)
			rc = tf_sched_tick(s, 0, &d);
		if (rc == 0)
			rc = apply_decisions(st, s, rows, n, &d, now);
	}
	tf_slice_rows_free(rows, n);
	tf_sched_decisions_release(&d);
	tf_sched_free(s);
	return tf_store_leave(st, own, rc);
}

static int db_schedule(struct tf_broker *b, double now)
{
	return decide(db_of(b), now);
}

static int db_status(struct tf_broker *b, int64_t ticket, struct tf_slice_status *out)
{
	struct tf_store *st = db_of(b);
	struct tf_stmt *q = tf_store_query(
	    st,
	    "SELECT box_x, box_y, box_z, box_a, box_b, box_c, pool, chips, started_at, "
	    "wait_reason, reclaim_class, reclaim_reason FROM slice_jobs "
	    "WHERE id=? AND finished_at IS NULL",
	    "i", ticket);
	if (!q)
		return -EIO;
	int rc = tf_stmt_step(q);
	if (rc == 1) {
		memset(out, 0, sizeof(*out));
		int placed = tf_slices_stmt_box(q, 0, &out->box);
		snprintf(out->pool, sizeof(out->pool), "%s",
		         tf_stmt_text(q, 6) ? tf_stmt_text(q, 6) : "");
		out->chips = (int)tf_stmt_int(q, 7);
		out->granted_at = tf_stmt_double(q, 8);
		const char *reclaim = tf_stmt_text(q, 10);
		const char *why = !placed ? tf_stmt_text(q, 9) : reclaim ? tf_stmt_text(q, 11) : "";
		snprintf(out->reason, sizeof(out->reason), "%s", why ? why : "");
		out->state = !placed   ? TF_SLICE_WAITING
		             : reclaim ? TF_SLICE_RECLAIMED
		                       : TF_SLICE_GRANTED;
		if (reclaim)
			out->reclaim =
			    !strcmp(reclaim, "infra") ? TF_FAIL_INFRA : TF_FAIL_PREEMPTED;
		rc = 0;
	} else if (rc == 0) {
		rc = -ENOENT;
	}
	tf_stmt_done(q);
	return rc;
}

static int db_release(struct tf_broker *b, int64_t ticket, double now, double *slice_seconds)
{
	struct tf_slice_status s;
	struct tf_store *st = db_of(b);
	double secs = 0;
	int own, rc = tf_store_join(st, &own);
	if (rc)
		return rc;
	rc = db_status(b, ticket, &s);
	if (rc == 0 && s.state == TF_SLICE_WAITING) {
		rc = tf_slice_job_forget(st, ticket); /* never held a slice */
	} else if (rc == 0) {
		secs = now > s.granted_at ? now - s.granted_at : 0;
		rc = tf_slice_job_finished(st, ticket, now, secs);
	}
	if (slice_seconds)
		*slice_seconds = secs;
	return tf_store_leave(st, own, rc);
}

static void db_destroy(struct tf_broker *b)
{
	free(b);
}

static const struct tf_broker_ops db_ops = {.name = "database",
                                            .request = db_request,
                                            .schedule = db_schedule,
                                            .status = db_status,
                                            .release = db_release,
                                            .destroy = db_destroy};

int tf_broker_db_new(struct tf_store *st, struct tf_broker **out)
{
	struct db_broker *b = tf_xcalloc(1, sizeof(*b));
	b->base.ops = &db_ops;
	b->st = st;
	*out = &b->base;
	return 0;
}

/* ---- failed chips ---- */

int tf_broker_chip_fail(struct tf_store *st, const char *pool, const int xyz[3], double now,
                        const char *reason)
{
	int own, rc = tf_store_join(st, &own);
	if (rc)
		return rc;
	rc = tf_store_run(st,
	                  "INSERT OR REPLACE INTO failed_chips(pool, x, y, z, failed_at, reason) "
	                  "VALUES(?,?,?,?,?,?)",
	                  "tiiidt", pool, (int64_t)xyz[0], (int64_t)xyz[1], (int64_t)xyz[2], now,
	                  reason);
	if (rc == 0) {
		char msg[300];
		snprintf(msg, sizeof(msg), "chip %d,%d,%d of pool '%s' failed%s%s", xyz[0], xyz[1],
		         xyz[2], pool, reason ? ": " : "", reason ? reason : "");
		json_t *x = json_pack("{s:s, s:[i,i,i]}", "pool", pool, "chip", xyz[0], xyz[1], xyz[2]);
		rc = tf_alerts_emit(st, "chip_failed", NULL, NULL, msg, x);
		json_decref(x);
	}
	if (rc == 0)
		rc = decide(st,
		            now); /* the grant on it is reclaimed now, not at someone's next ask */
	return tf_store_leave(st, own, rc);
}

int tf_broker_chip_repair(struct tf_store *st, const char *pool, const int xyz[3])
{
	int own, rc = tf_store_join(st, &own);
	if (rc)
		return rc;
	rc = tf_store_run(st, "DELETE FROM failed_chips WHERE pool=? AND x=? AND y=? AND z=?",
	                  "tiii", pool, (int64_t)xyz[0], (int64_t)xyz[1], (int64_t)xyz[2]);
	if (rc == 0 && tf_store_changes(st) == 0)
		rc = -ENOENT;
	if (rc == 0)
		rc = tf_alerts_on_chip_repaired(st, pool, xyz);
	if (rc == 0)
		rc = decide(st, tf_now_wall()); /* a request waiting for it may be placed */
	return tf_store_leave(st, own, rc);
}

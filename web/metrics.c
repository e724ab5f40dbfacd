/* metrics.c — owns GET /metrics: the Prometheus text exposition format 0.0.4 of what the
 * state database holds (runs, steps and the alert outbox by state, step durations, the
 * slice queue, chips in use per pool, slice-seconds per project) plus the server's own request
 * counters, the served versions' figures (web/serve.h), and the build. Every family has its HELP
 * and TYPE lines; names carry the tpuflow_ prefix, counters end in _total and durations are in
 * _seconds. */
#include "web/api.h"
#include "web/serve.h"

#include "common/common.h"
#include "orchestrator/state.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the le_* columns of step_duration_totals (migration 0019, orchestrator/state.c) */
static const double dur_bounds[] = {1, 5, 15, 60, 300, 900, 3600, 14400};

/* A label value with \, " and newline escaped. */
static void label_value(FILE *f, const char *v)
{
	for (; v && *v; v++) {
		if (*v == '\\' || *v == '"')
			fputc('\\', f), fputc(*v, f);
		else if (*v == '\n')
			fputs("\\n", f);
		else
			fputc(*v, f);
	}
}

/* `family{label="value"} n` for each row of (text, number) from sql, every value that
 * name(0..n-1) gives appearing (0 when absent). */
static int by_state(FILE *f, struct tf_store *st, const char *family, const char *help,
                    const char *sql, const char *(*name)(int), int n)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s gauge\n", family, help, family);
	int64_t counts[16] = {0};
	TF_ASSERT(n <= 16);
	struct tf_stmt *s = tf_store_query(st, sql, "");
	if (!s)
		return -EIO;
	int rc;
	while ((rc = tf_stmt_step(s)) == 1)
		for (int i = 0; i < n; i++)
			if (tf_stmt_text(s, 0) && !strcmp(tf_stmt_text(s, 0), name(i)))
				counts[i] = tf_stmt_int(s, 1);
	tf_stmt_done(s);
	for (int i = 0; i < n; i++)
		fprintf(f, "%s{state=\"%s\"} %lld\n", family, name(i), (long long)counts[i]);
	return rc < 0 ? rc : 0;
}

static const char *run_state(int i)
{
	return tf_run_state_name((enum tf_run_state)i);
}

static const char *step_state(int i)
{
	return tf_step_state_name((enum tf_step_state)i);
}

static const char *alert_state(int i)
{
	static const char *const names[] = {"pending", "delivered", "dead"};
	return names[i];
}

static int step_durations(FILE *f, struct tf_store *st)
{
	enum { NB = TF_ARRAY_LEN(dur_bounds) };
	fprintf(f, "# HELP tpuflow_step_duration_seconds Wall time of finished steps, by step "
	           "type and final state.\n# TYPE tpuflow_step_duration_seconds histogram\n");
	/* the running totals, not the steps table: deleting runs must not take a counter down */
	struct tf_stmt *s = tf_store_query(
	    st,
	    "SELECT type, state, n, seconds, le_1, le_5, le_15, le_60, le_300, le_900, le_3600, "
	    "le_14400 FROM step_duration_totals ORDER BY type, state",
	    "");
	if (!s)
		return -EIO;
	int rc;
	while ((rc = tf_stmt_step(s)) == 1) {
		char lbl[256];
		snprintf(lbl, sizeof(lbl), "type=\"%s\",state=\"%s\"", tf_stmt_text(s, 0),
		         tf_stmt_text(s, 1));
		for (int b = 0; b < NB; b++)
			fprintf(f, "tpuflow_step_duration_seconds_bucket{%s,le=\"%g\"} %lld\n", lbl,
			        dur_bounds[b], (long long)tf_stmt_int(s, 4 + b));
		fprintf(f, "tpuflow_step_duration_seconds_bucket{%s,le=\"+Inf\"} %lld\n", lbl,
		        (long long)tf_stmt_int(s, 2));
		fprintf(f, "tpuflow_step_duration_seconds_sum{%s} %.6f\n", lbl,
		        tf_stmt_double(s, 3));
		fprintf(f, "tpuflow_step_duration_seconds_count{%s} %lld\n", lbl,
		        (long long)tf_stmt_int(s, 2));
	}
	tf_stmt_done(s);
	return rc < 0 ? rc : 0;
}

/* How long the oldest alert still to be delivered has waited: a receiver that has been down
 * for a while shows here before its alerts are dead-lettered. */
static int alerts_oldest(FILE *f, struct tf_store *st, double now)
{
	double oldest = 0;
	struct tf_stmt *s =
	    tf_store_query(st, "SELECT min(queued_at) FROM alerts WHERE state='pending'", "");
	if (!s)
		return -EIO;
	if (tf_stmt_step(s) == 1 && !tf_stmt_is_null(s, 0))
		oldest = now - tf_stmt_double(s, 0);
	tf_stmt_done(s);
	fprintf(f,
	        "# HELP tpuflow_alerts_oldest_pending_seconds How long the oldest alert not yet "
	        "delivered has been queued (0 when none is).\n"
	        "# TYPE tpuflow_alerts_oldest_pending_seconds gauge\n"
	        "tpuflow_alerts_oldest_pending_seconds %.3f\n",
	        oldest < 0 ? 0 : oldest);
	return 0;
}

static int slices(FILE *f, struct tf_store *st, double now)
{
	int64_t waiting = 0;
	double oldest = 0;
	struct tf_stmt *s = tf_store_query(
	    st,
	    "SELECT count(*), coalesce(min(queued_at), 0) FROM slice_jobs WHERE finished_at IS "
	    "NULL AND box_x IS NULL AND queued_at IS NOT NULL",
	    "");
	if (!s)
		return -EIO;
	if (tf_stmt_step(s) == 1) {
		waiting = tf_stmt_int(s, 0);
		oldest = waiting ? now - tf_stmt_double(s, 1) : 0;
	}
	tf_stmt_done(s);
	fprintf(f,
	        "# HELP tpuflow_queue_length Train attempts waiting for a slice.\n"
	        "# TYPE tpuflow_queue_length gauge\ntpuflow_queue_length %lld\n"
	        "# HELP tpuflow_queue_oldest_wait_seconds How long the longest-waiting attempt has "
	        "waited (0 when none waits).\n"
	        "# TYPE tpuflow_queue_oldest_wait_seconds gauge\n"
	        "tpuflow_queue_oldest_wait_seconds %.3f\n",
	        (long long)waiting, oldest < 0 ? 0 : oldest);

	fprintf(f, "# HELP tpuflow_chips Chips of each pool, by state (busy: held by a placed "
	           "attempt; free: the rest of the pool's torus).\n# TYPE tpuflow_chips gauge\n");
	s = tf_store_query(st,
	                   "SELECT pool, pool_spec, sum(CASE WHEN finished_at IS NULL AND box_x IS "
	                   "NOT NULL THEN chips ELSE 0 END) FROM slice_jobs WHERE pool IS NOT NULL "
	                   "GROUP BY pool, pool_spec ORDER BY pool",
	                   "");
	if (!s)
		return -EIO;
	int rc;
	while ((rc = tf_stmt_step(s)) == 1) {
		const char *pool = tf_stmt_text(s, 0), *spec = tf_stmt_text(s, 1);
		long long busy = tf_stmt_int(s, 2), total = 0;
		int a = 0, b = 0, c = 0;
		const char *colon = spec ? strchr(spec, ':') : NULL;
		if (colon && sscanf(colon + 1, "%dx%dx%d", &a, &b, &c) == 3)
			total = (long long)a * b * c;
		fprintf(f, "tpuflow_chips{pool=\"");
		label_value(f, pool);
		fprintf(f, "\",state=\"busy\"} %lld\n", busy);
		if (total) {
			fprintf(f, "tpuflow_chips{pool=\"");
			label_value(f, pool);
			fprintf(f, "\",state=\"free\"} %lld\n", total > busy ? total - busy : 0);
		}
	}
	tf_stmt_done(s);
	if (rc < 0)
		return rc;

	fprintf(f, "# HELP tpuflow_slice_seconds_total Slice-seconds used by finished train "
	           "attempts, by scheduler project.\n# TYPE tpuflow_slice_seconds_total counter\n");
	s = tf_store_query(st, "SELECT project, seconds FROM slice_seconds_totals ORDER BY 1", "");
	if (!s)
		return -EIO;
	while ((rc = tf_stmt_step(s)) == 1) {
		fprintf(f, "tpuflow_slice_seconds_total{project=\"");
		label_value(f, tf_stmt_text(s, 0));
		fprintf(f, "\"} %.3f\n", tf_stmt_double(s, 1));
	}
	tf_stmt_done(s);
	return rc < 0 ? rc : 0;
}

int tf_metrics_render(struct tf_web *w, struct tf_store *st, char **out, size_t *len)
{
	char *buf = NULL;
	size_t n = 0;
	FILE *f = open_memstream(&buf, &n);
	if (!f)
		return -ENOMEM;
	fprintf(f,
	        "# HELP tpuflow_build_info The running build (always 1).\n"
	        "# TYPE tpuflow_build_info gauge\ntpuflow_build_info{version=\"%s\"} 1\n",
	        TF_VERSION);
	uint64_t commits, syncs;
	tf_store_sync_stats(&commits, &syncs);
	fprintf(f,
	        "# HELP tpuflow_db_commits_total Commits of this process to the state database.\n"
	        "# TYPE tpuflow_db_commits_total counter\ntpuflow_db_commits_total %llu\n"
	        "# HELP tpuflow_db_wal_syncs_total fdatasyncs of the database's WAL that made "
	        "those commits durable (group commit: one may cover several).\n"
	        "# TYPE tpuflow_db_wal_syncs_total counter\ntpuflow_db_wal_syncs_total %llu\n",
	        (unsigned long long)commits, (unsigned long long)syncs);
	int rc = by_state(f, st, "tpuflow_runs", "Runs in the state database, by state.",
	                  "SELECT state, count(*) FROM runs GROUP BY state", run_state,
	                  TF_RUN_STATE_LAST);
	if (!rc)
		rc = by_state(f, st, "tpuflow_steps", "Steps of every run, by state.",
		              "SELECT state, count(*) FROM steps GROUP BY state", step_state,
		              TF_STEP_STATE_LAST);
	if (!rc)
		rc = by_state(f, st, "tpuflow_alerts",
		              "Alerts in the outbox, by state (pending: still to be delivered; "
		              "dead: given up, see tpuflow alerts list --dead).",
		              "SELECT state, count(*) FROM alerts GROUP BY state", alert_state, 3);
	if (!rc)
		rc = alerts_oldest(f, st, tf_now_wall());
	if (!rc)
		rc = step_durations(f, st);
	if (!rc)
		rc = slices(f, st, tf_now_wall());
	if (!rc && w)
		tf_web_metrics_requests(w, f);
	if (!rc && w && tf_web_serving(w))
		tf_serve_metrics(tf_web_serving(w), f);
	fclose(f);
	if (rc) {
		free(buf);
		return rc;
	}
	*out = buf;
	*len = n;
	return 0;
}

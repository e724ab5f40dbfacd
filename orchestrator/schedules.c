/* schedules.c — owns the registered pipelines (table registered_pipelines) and the firing of
 * their cron schedules (table schedule_fires): which ticks are due, the catch-up and
 * concurrency policies, and the one-fire-per-tick key (schedules.h). */
#include "orchestrator/schedules.h"
#include "orchestrator/alerts.h"

#define TF_LOG_TAG "schedules"
#include "common/common.h"
#include "common/log.h"
#include "common/digest.h"
#include "orchestrator/cron.h"
#include "orchestrator/engine.h"
#include "orchestrator/pipeline.h"
#include "orchestrator/state.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_TICKS 1000     /* ticks listed per call and pipeline; older ones are skipped over */
#define NONE_WINDOW_S 60.0 /* `catchup: none`: a tick this recent is not a missed one */

/* Stores a loaded pipeline as the registered one of its name; path is for people. */
static int store_registered(struct tf_store *st, const struct tf_pipeline *p, const char *path,
                            double now, char **name)
{
	char digest[65];
	struct tf_sha256 *h = tf_sha256_new();
	tf_sha256_update(h, p->source, p->source_len);
	tf_sha256_final(h, digest);
	int64_t next = 0;
	int has_next = p->schedule && tf_cron_next(&p->schedule->spec, p->schedule->timezone,
	                                           (int64_t)now, &next) == 0;
	/* a pipeline added again keeps its pause (paused_at) */
	int rc = tf_store_run(st,
	                      "INSERT INTO registered_pipelines(name, path, source, digest, "
	                      "added_at, cron, timezone, next_tick) VALUES(?,?,?,?,?,?,?,?) "
	                      "ON CONFLICT(name) DO UPDATE SET path=excluded.path, "
	                      "source=excluded.source, digest=excluded.digest, "
	                      "added_at=excluded.added_at, cron=excluded.cron, "
	                      "timezone=excluded.timezone, next_tick=excluded.next_tick",
	                      has_next ? "ttttdtti" : "ttttdttn", p->name, path, p->source, digest,
	                      now, p->schedule ? p->schedule->cron : NULL,
	                      p->schedule ? p->schedule->timezone : NULL, next);
	if (rc == 0 && name)
		*name = tf_xstrdup(p->name);
	return rc;
}

int tf_pipelines_add(struct tf_store *st, const char *path, double now, char **name,
                     struct tf_diag_list *diags)
{
	struct tf_pipeline *p = NULL;
	int rc = tf_pipeline_load(path, NULL, 0, 0, &p, diags);
	if (rc)
		return rc;
	char *abs = realpath(path, NULL);
	rc = store_registered(st, p, abs ? abs : path, now, name);
	free(abs);
	tf_pipeline_free(p);
	return rc;
}

int tf_pipelines_add_text(struct tf_store *st, const char *file, const char *text, size_t len,
                          double now, char **name, struct tf_diag_list *diags)
{
	struct tf_pipeline *p = NULL;
	int rc = tf_pipeline_load_buffer(file, text, len, NULL, 0, 0, &p, diags);
	if (rc == 0)
		rc = store_registered(st, p, file, now, name);
	tf_pipeline_free(p);
	return rc;
}

int tf_pipelines_remove(struct tf_store *st, const char *name)
{
	int rc = tf_store_run(st, "DELETE FROM registered_pipelines WHERE name=?", "t", name);
	return rc == 0 && tf_store_changes(st) == 0 ? -ENOENT : rc;
}

/* The registered text of a pipeline, loaded (its schedule parsed); NULL when it no longer
 * loads (a newer tpuflow stored it), with the reason logged. */
static struct tf_pipeline *load_registered(const char *name, const char *source)
{
	struct tf_pipeline *p = NULL;
	struct tf_diag_list d = {0};
	char what[200];
	snprintf(what, sizeof(what), "registered pipeline '%s'", name);
	if (tf_pipeline_load_buffer(what, source, strlen(source), NULL, 0, 0, &p, &d)) {
		tf_warn("%s no longer loads (%zu problems): add it again", what, d.n);
		p = NULL;
	}
	tf_diag_list_release(&d);
	return p;
}

/* tf_pipelines_list of every registered pipeline, or of the one named `only`. */
static int list_registered(struct tf_store *st, const char *only, double now, int nnext,
                           json_t **out)
{
	struct tf_stmt *q =
	    tf_store_query(st,
	                   "SELECT name, path, digest, added_at, source, paused_at FROM "
	                   "registered_pipelines WHERE ?1 IS NULL OR name=?1 ORDER BY name",
	                   "t", only);
	if (!q)
		return -EIO;
	json_t *list = json_array();
	int rc;
	while ((rc = tf_stmt_step(q)) == 1) {
		const char *name = tf_stmt_text(q, 0);
		json_t *sched = json_null();
		struct tf_pipeline *p = load_registered(name, tf_stmt_text(q, 4));
		if (p && p->schedule) {
			const struct tf_pipeline_schedule *sc = p->schedule;
			json_t *next = json_array();
			int paused = !tf_stmt_is_null(q, 5);
			int64_t t = (int64_t)now;
			for (int i = 0; !paused && i < nnext &&
			                tf_cron_next(&sc->spec, sc->timezone, t, &t) == 0;
			     i++)
				json_array_append_new(next, json_integer(t));
			sched = json_pack(
			    "{s:s, s:s, s:s, s:s, s:i, s:f, s:o, s:b, s:o}", "cron", sc->cron,
			    "timezone", sc->timezone, "concurrency",
			    tf_concurrency_name(sc->concurrency), "catchup",
			    tf_catchup_name(sc->catchup), "catchup_max", sc->catchup_max,
			    "starting_deadline", sc->starting_deadline, "next", next, "paused", paused,
			    "paused_at", paused ? json_real(tf_stmt_double(q, 5)) : json_null());
		}
		tf_pipeline_free(p);
		json_array_append_new(list, json_pack("{s:s, s:s?, s:s, s:f, s:o}", "name", name,
		                                      "path", tf_stmt_text(q, 1), "digest",
		                                      tf_stmt_text(q, 2), "added_at",
		                                      tf_stmt_double(q, 3), "schedule", sched));
	}
	tf_stmt_done(q);
	if (rc < 0) {
		json_decref(list);
		return rc;
	}
	*out = list;
	return 0;
}

int tf_pipelines_list(struct tf_store *st, double now, int nnext, json_t **out)
{
	return list_registered(st, NULL, now, nnext, out);
}

int tf_pipelines_get(struct tf_store *st, const char *name, double now, int nnext, json_t **out)
{
	json_t *list = NULL;
	int rc = list_registered(st, name, now, nnext, &list);
	if (rc)
		return rc;
	*out = json_incref(json_array_get(list, 0));
	json_decref(list);
	return *out ? 0 : -ENOENT;
}

/* ---- firing ---- */

/* Runs of the pipeline that are pending or running: their ids into a JSON array. */
static int active_runs(struct tf_store *st, const char *name, json_t **out)
{
	struct tf_stmt *q = tf_store_query(st,
	                                   "SELECT id, pid FROM runs WHERE pipeline=? AND state IN "
	                                   "('pending', 'running') ORDER BY created_at",
	                                   "t", name);
	if (!q)
		return -EIO;
	json_t *v = json_array();
	int rc;
	while ((rc = tf_stmt_step(q)) == 1)
		json_array_append_new(
		    v, json_pack("{s:s, s:I}", "id", tf_stmt_text(q, 0), "pid",
		                 (json_int_t)(tf_stmt_is_null(q, 1) ? 0 : tf_stmt_int(q, 1))));
	tf_stmt_done(q);
	if (rc < 0) {
		json_decref(v);
		return rc;
	}
	*out = v;
	return 0;
}

/* `concurrency: replace`: asks each active run to stop. */
static void stop_runs(json_t *active, const struct tf_schedule_hooks *h)
{
	size_t i;
	json_t *r;
	json_array_foreach(active, i, r)
	{
		const char *id = json_string_value(json_object_get(r, "id"));
		long pid = (long)json_integer_value(json_object_get(r, "pid"));
		if (h && h->cancel)
			h->cancel(h->ctx, id);
		else if (pid > 0 && pid != (long)getpid() && tf_pid_alive(pid))
			kill((pid_t)pid, SIGTERM); /* the engine stops cleanly, resumable */
	}
}

/* Creates the pending run of a fired tick from the registered text (default params), through
 * the engine's one door for new runs. */
static int create_run(struct tf_store *st, const char *source, const char *path, char run_id[32])
{
	char *home = tf_xstrdup(tf_store_path(st)), *slash = strrchr(home, '/'), err[512];
	if (slash)
		*slash = '\0';
	else
		snprintf(home, strlen(home) + 1, ".");
	struct tf_engine_submit s = {
	    .path = path, .yaml = source, .yaml_len = strlen(source), .trigger = "schedule"};
	struct tf_diag_list d = {0};
	int rc = tf_engine_submit(st, home, &s, run_id, &d, err, sizeof(err));
	if (rc)
		tf_warn("a run of %s was not created: %s", path ? path : "a registered pipeline",
		        err);
	tf_diag_list_release(&d);
	free(home);
	return rc;
}

/* How tick i of n (oldest first) is handled by the catch-up policy and the deadline: 1 fire,
 * 0 missed (why in `why`). */
static int catchup_fires(const struct tf_pipeline_schedule *sc, size_t i, size_t n, double age,
                         char *why, size_t len)
{
	if (sc->starting_deadline > 0 && age > sc->starting_deadline) {
		snprintf(why, len, "%.0f s late, past starting_deadline %.0f s", age,
		         sc->starting_deadline);
		return 0;
	}
	switch (sc->catchup) {
	case TF_CATCHUP_NONE:
		if (i + 1 == n && age < NONE_WINDOW_S)
			return 1;
		snprintf(why, len, "missed (catchup: none)");
		return 0;
	case TF_CATCHUP_LATEST:
		if (i + 1 == n)
			return 1;
		snprintf(why, len, "missed (catchup: latest, a newer tick runs)");
		return 0;
	default:
		if (i + (size_t)sc->catchup_max >= n)
			return 1;
		snprintf(why, len, "missed (catchup: all, only the newest %d run)",
		         sc->catchup_max);
		return 0;
	}
}

static int alert_missed(struct tf_store *st, const char *name, int nmissed, size_t ndue)
{
	char msg[300];
	snprintf(msg, sizeof(msg),
	         "pipeline '%s' missed %d of its %zu due tick(s) (catch-up policy or "
	         "starting_deadline; tpuflow schedules list)",
	         name, nmissed, ndue);
	json_t *x = json_pack("{s:s, s:i}", "pipeline", name, "missed", nmissed);
	int rc = tf_alerts_emit(st, "schedule_missed", NULL, NULL, msg, x);
	json_decref(x);
	return rc;
}

/* Handles the due ticks of one pipeline in the caller's transaction. -EEXIST when another
 * process handled one of them first (the caller rolls back). */
static int fire_pipeline(struct tf_store *st, const char *name, double now,
                         const struct tf_schedule_hooks *h, json_t *report)
{
	char *path = NULL, *source = NULL;
	int64_t next = 0;
	int rc = tf_store_query_int(st, &next,
	                            "SELECT next_tick FROM registered_pipelines WHERE name=? AND "
	                            "next_tick IS NOT NULL AND paused_at IS NULL",
	                            "t", name);
	if (rc == -ENOENT || (rc == 0 && (double)next > now))
		return 0; /* removed, paused, or handled meanwhile */
	if (rc == 0)
		rc = tf_store_query_text(
		    st, &source, "SELECT source FROM registered_pipelines WHERE name=?", "t", name);
	if (rc == 0)
		rc = tf_store_query_text(
		    st, &path, "SELECT path FROM registered_pipelines WHERE name=?", "t", name);
	struct tf_pipeline *p = rc == 0 ? load_registered(name, source) : NULL;
	if (rc || !p || !p->schedule) {
		free(path);
		free(source);
		tf_pipeline_free(p);
		return rc ? rc
		          : tf_store_run(
		                st, "UPDATE registered_pipelines SET next_tick=NULL WHERE name=?",
		                "t", name);
	}
	const struct tf_pipeline_schedule *sc = p->schedule;
	int64_t *ticks = tf_xcalloc(MAX_TICKS, sizeof(*ticks)), t = next;
	size_t n = 0;
	while ((double)t <= now) {
		if (n == MAX_TICKS) { /* keep the newest MAX_TICKS */
			memmove(ticks, ticks + 1, (MAX_TICKS - 1) * sizeof(*ticks));
			n--;
		}
		ticks[n++] = t;
		if (tf_cron_next(&sc->spec, sc->timezone, t, &t))
			break;
	}
	int64_t after = 0;
	int has_after = tf_cron_next(&sc->spec, sc->timezone, (int64_t)now, &after) == 0;
	json_t *active = NULL;
	int nmissed = 0;
	for (size_t i = 0; i < n && rc == 0; i++) {
		char key[300], why[200] = "", run[32] = "";
		const char *outcome = "fired";
		snprintf(key, sizeof(key), "%s@%lld", name, (long long)ticks[i]);
		if (!catchup_fires(sc, i, n, now - (double)ticks[i], why, sizeof(why))) {
			outcome = "missed";
			nmissed++;
		} else if (sc->concurrency != TF_CONCURRENCY_ALLOW) {
			json_decref(active);
			active = NULL;
			rc = active_runs(st, name, &active);
			const char *first =
			    json_string_value(json_object_get(json_array_get(active, 0), "id"));
			if (rc == 0 && first && sc->concurrency == TF_CONCURRENCY_FORBID) {
				outcome = "skipped";
				snprintf(why, sizeof(why),
				         "run %s is still active (concurrency: forbid)", first);
			} else if (rc == 0 && first) {
				stop_runs(active, h);
				snprintf(why, sizeof(why), "replaces run %s (concurrency: replace)",
				         first);
			}
		}
		if (rc)
			break;
		/* the key first: a tick another process handled fails here, before any run */
		rc = tf_store_run(st,
		                  "INSERT INTO schedule_fires(fire_key, pipeline, tick, outcome, "
		                  "reason, at) VALUES(?,?,?,?,?,?)",
		                  "ttitid", key, name, ticks[i], outcome, why[0] ? why : NULL, now);
		if (rc == 0 && !strcmp(outcome, "fired")) {
			rc = create_run(st, source, path, run);
			if (rc == 0)
				rc = tf_store_run(
				    st, "UPDATE schedule_fires SET run_id=? WHERE fire_key=?", "tt",
				    run, key);
		}
		if (rc == 0 && report)
			json_array_append_new(
			    report,
			    json_pack("{s:s, s:I, s:s, s:s, s:s?, s:s?}", "pipeline", name, "tick",
			              (json_int_t)ticks[i], "fire_key", key, "outcome", outcome,
			              "run", run[0] ? run : NULL, "reason", why[0] ? why : NULL));
	}
	if (rc == 0 && nmissed) /* one alert for the ticks this pass missed */
		rc = alert_missed(st, name, nmissed, n);
	if (rc == 0 && has_after)
		rc = tf_store_run(st, "UPDATE registered_pipelines SET next_tick=? WHERE name=?",
		                  "it", after, name);
	else if (rc == 0)
		rc = tf_store_run(st, "UPDATE registered_pipelines SET next_tick=NULL WHERE name=?",
		                  "t", name);
	json_decref(active);
	free(ticks);
	free(path);
	free(source);
	tf_pipeline_free(p);
	return rc;
}

int tf_schedules_fire_due(struct tf_store *st, double now, const struct tf_schedule_hooks *hooks,
                          json_t **report)
{
	json_t *names = json_array(), *rep = report ? json_array() : NULL;
	struct tf_stmt *q = tf_store_query(st,
	                                   "SELECT name FROM registered_pipelines WHERE next_tick "
	                                   "IS NOT NULL AND next_tick <= ? AND paused_at IS NULL "
	                                   "ORDER BY name",
	                                   "d", now);
	int rc = q ? 0 : -EIO;
	while (q && (rc = tf_stmt_step(q)) == 1)
		json_array_append_new(names, json_string(tf_stmt_text(q, 0)));
	tf_stmt_done(q);
	size_t i;
	json_t *nm;
	json_array_foreach(names, i, nm)
	{
		if (rc < 0)
			break;
		int own;
		rc = tf_store_join(st, &own);
		if (rc)
			break;
		size_t before = rep ? json_array_size(rep) : 0;
		rc = fire_pipeline(st, json_string_value(nm), now, hooks, rep);
		if (rc == -EEXIST && own) { /* another process handled these ticks: theirs stand */
			tf_store_rollback(st);
			while (rep && json_array_size(rep) > before)
				json_array_remove(rep, before);
			rc = 0;
			continue;
		}
		rc = tf_store_leave(st, own, rc);
	}
	json_decref(names);
	if (rc < 0) {
		json_decref(rep);
		return rc;
	}
	if (report)
		*report = rep;
	return 0;
}

int tf_schedules_pause(struct tf_store *st, const char *name, int pause, double now,
                       int *passed)
{
	int own, rc = tf_store_join(st, &own), npassed = 0;
	char *source = NULL;
	struct tf_stmt *q = rc ? NULL
	                       : tf_store_query(st,
	                                        "SELECT source, paused_at, next_tick FROM "
	                                        "registered_pipelines WHERE name=?",
	                                        "t", name);
	int found = q ? tf_stmt_step(q) : rc ? rc : -EIO;
	int was_paused = found == 1 && !tf_stmt_is_null(q, 1);
	int64_t next = found == 1 ? tf_stmt_int(q, 2) : 0;
	int has_next = found == 1 && !tf_stmt_is_null(q, 2);
	if (found == 1)
		source = tf_stmt_strdup(q, 0);
	tf_stmt_done(q);
	rc = found == 1 ? 0 : found == 0 ? -ENOENT : found;
	struct tf_pipeline *p = rc == 0 ? load_registered(name, source) : NULL;
	if (rc == 0 && (!p || !p->schedule))
		rc = -EINVAL;
	if (rc == 0 && pause && !was_paused)
		rc = tf_store_run(st, "UPDATE registered_pipelines SET paused_at=? WHERE name=?",
		                  "dt", now, name);
	if (rc == 0 && !pause && was_paused) {
		/* the ticks of the pause are passed over: counted, neither fired nor recorded */
		const struct tf_pipeline_schedule *sc = p->schedule;
		int64_t t = next, after = 0;
		while (has_next && (double)t <= now && npassed < MAX_TICKS) {
			npassed++;
			if (tf_cron_next(&sc->spec, sc->timezone, t, &t))
				break;
		}
		if (tf_cron_next(&sc->spec, sc->timezone, (int64_t)now, &after) == 0)
			rc = tf_store_run(st,
			                  "UPDATE registered_pipelines SET paused_at=NULL, next_tick=? "
			                  "WHERE name=?",
			                  "it", after, name);
		else
			rc = tf_store_run(st,
			                  "UPDATE registered_pipelines SET paused_at=NULL, "
			                  "next_tick=NULL WHERE name=?",
			                  "t", name);
	}
	tf_pipeline_free(p);
	free(source);
	rc = tf_store_leave(st, own, rc);
	if (rc == 0 && passed)
		*passed = npassed;
	return rc;
}

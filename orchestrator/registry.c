/* registry.c — owns the model registry tables (models, model_versions, aliases, deployments).
 *
 * Versions are numbered per model as 1 + the highest so far, inside the same BEGIN IMMEDIATE
 * transaction that inserts the row, so two registrations never get the same number. The
 * UNIQUE (run_id, step) key backs the idempotence rule: looking it up first makes a resumed
 * register step return the version it made before the crash.
 */
#include "orchestrator/registry.h"
#include "orchestrator/alerts.h"

#define TF_LOG_TAG "registry"
#include "common/common.h"
#include "common/log.h"
#include "orchestrator/state.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ctype.h>

#define NAME_MAX_LEN 64

/* Digits only (an optional leading 'v' or 'V' when `v` is set); *value gets the number. */
static int is_number(const char *s, int v, long long *value)
{
	if (v && (s[0] == 'v' || s[0] == 'V'))
		s++;
	if (!isdigit((unsigned char)s[0]))
		return 0;
	for (const char *c = s; *c; c++)
		if (!isdigit((unsigned char)*c))
			return 0;
	errno = 0;
	*value = strtoll(s, NULL, 10);
	return 1;
}

int tf_registry_check_name(const char *s, enum tf_registry_name kind, char *err, size_t errlen)
{
	const char *what = kind == TF_REGNAME_MODEL   ? "model name"
	                   : kind == TF_REGNAME_ALIAS ? "alias"
	                                              : "version";
	long long n = 0;
	if (!s || !*s) {
		tf_errf(err, errlen, "the %s is empty", what);
		return -EINVAL;
	}
	if (kind == TF_REGNAME_VERSION) {
		if (!strcmp(s, "latest"))
			return 0;
		if (is_number(s, 1, &n)) {
			if (n >= 1 && errno == 0)
				return 0;
			tf_errf(err, errlen, "version '%.40s': versions are numbered from 1", s);
			return -EINVAL;
		}
		if (s[0] == '-' && is_number(s + 1, 0, &n)) {
			tf_errf(err, errlen, "version '%.40s': versions are numbered from 1", s);
			return -EINVAL;
		}
		kind = TF_REGNAME_ALIAS; /* otherwise it names an alias */
		what = "version (an alias)";
	}
	size_t len = strlen(s);
	int ok =
	    len <= NAME_MAX_LEN && (islower((unsigned char)s[0]) || isdigit((unsigned char)s[0]));
	for (const char *c = s; ok && *c; c++)
		ok = islower((unsigned char)*c) || isdigit((unsigned char)*c) || *c == '.' ||
		     *c == '_' || *c == '-';
	if (!ok) {
		tf_errf(err, errlen,
		        "%s '%.80s%s': use 1 to %d characters of a-z, 0-9, '.', '_' and '-', "
		        "starting with a letter or a digit",
		        what, s, len > 80 ? "..." : "", NAME_MAX_LEN);
		return -EINVAL;
	}
	if (kind == TF_REGNAME_ALIAS && (!strcmp(s, "latest") || is_number(s, 1, &n))) {
		tf_errf(err, errlen,
		        "%s '%s' reads as a version (a number, vN or latest); choose a name such "
		        "as production",
		        what, s);
		return -EINVAL;
	}
	return 0;
}

static int model_id(struct tf_store *st, const char *model, int create, int64_t *id)
{
	int rc = tf_store_query_int(st, id, "SELECT id FROM models WHERE name=?", "t", model);
	if (rc == -ENOENT && create) {
		rc = tf_store_run(st, "INSERT INTO models(name, created_at) VALUES(?,?)", "td",
		                  model, tf_now_wall());
		if (rc == 0)
			*id = tf_store_last_rowid(st);
	}
	return rc;
}

/* Records a registry change in the event log of the run that made it, if one did. */
static int add_event(struct tf_store *st, const char *run, const char *step, const char *kind,
                     const char *message)
{
	return run ? tf_event_add(st, run, step, 0, kind, message) : 0;
}

int tf_registry_register(struct tf_store *st, const struct tf_model_version_spec *spec,
                         int64_t *version, int *existed)
{
	int64_t mid = 0, v = 0;
	int own, rc, found = 0;

	char why[300];
	if (!spec->bundle || !*spec->bundle ||
	    tf_registry_check_name(spec->model, TF_REGNAME_MODEL, why, sizeof(why)))
		return -EINVAL;
	rc = tf_store_join(st, &own);
	if (rc)
		return rc;
	rc = model_id(st, spec->model, 1, &mid);
	if (rc)
		goto out;
	if (spec->run_id && spec->step) {
		rc = tf_store_query_int(
		    st, &v,
		    "SELECT version FROM model_versions WHERE run_id=? AND step=? "
		    "AND model_id=?",
		    "tti", spec->run_id, spec->step, mid);
		if (rc == 0)
			found = 1;
		else if (rc != -ENOENT)
			goto out;
	}
	if (!found) {
		rc = tf_store_query_int(st, &v,
		                        "SELECT version FROM model_versions WHERE model_id=? AND "
		                        "bundle=? ORDER BY version LIMIT 1",
		                        "it", mid, spec->bundle);
		if (rc == 0)
			found = 1;
		else if (rc != -ENOENT)
			goto out;
	}
	if (!found) {
		rc = tf_store_query_int(st, &v,
		                        "SELECT coalesce(max(version), 0) + 1 FROM model_versions "
		                        "WHERE model_id=?",
		                        "i", mid);
		if (rc)
			goto out;
		rc = tf_store_run(
		    st,
		    "INSERT INTO model_versions(model_id, version, run_id, step, bundle, "
		    "checkpoint, dataset, metrics, params, tags, created_at) "
		    "VALUES(?,?,?,?,?,?,?,?,?,?,?)",
		    "iittttttttd", mid, v, spec->run_id ? spec->run_id : "",
		    spec->step ? spec->step : "", spec->bundle, spec->checkpoint, spec->dataset,
		    spec->metrics ? spec->metrics : "{}", spec->params ? spec->params : "{}",
		    spec->tags ? spec->tags : "{}", tf_now_wall());
		if (rc)
			goto out;
		char msg[300];
		snprintf(msg, sizeof(msg), "registered %s version %lld", spec->model, (long long)v);
		rc = add_event(st, spec->run_id, spec->step, "model", msg);
		if (rc == 0)
			rc = tf_alerts_on_register(st, spec->model, v, spec->run_id, spec->step,
			                           spec->metrics);
	}
out:
	rc = tf_store_leave(st, own, rc);
	if (rc == 0) {
		*version = v;
		if (existed)
			*existed = found;
	}
	return rc;
}

int tf_registry_resolve(struct tf_store *st, const char *model, const char *ref, int64_t *version)
{
	int64_t mid, v = 0;
	int rc = model_id(st, model, 0, &mid);
	if (rc)
		return rc;
	const char *num = ref;
	if ((ref[0] == 'v' || ref[0] == 'V') && ref[1] >= '0' && ref[1] <= '9')
		num = ref + 1;
	char *end = NULL;
	long long n = strtoll(num, &end, 10);
	if (*num && end && !*end) {
		rc = tf_store_query_int(st, &v,
		                        "SELECT version FROM model_versions WHERE model_id=? AND "
		                        "version=?",
		                        "ii", mid, (int64_t)n);
	} else if (!strcmp(ref, "latest")) {
		rc = tf_store_query_int(st, &v,
		                        "SELECT max(version) FROM model_versions WHERE model_id=? "
		                        "HAVING count(*) > 0",
		                        "i", mid);
	} else {
		rc = tf_store_query_int(st, &v,
		                        "SELECT version FROM aliases WHERE model_id=? AND alias=?",
		                        "it", mid, ref);
	}
	if (rc == 0)
		*version = v;
	return rc;
}

static int set_alias(struct tf_store *st, int64_t mid, const char *alias, int64_t version)
{
	return tf_store_run(
	    st,
	    "INSERT INTO aliases(model_id, alias, version, updated_at) VALUES(?,?,?,?) "
	    "ON CONFLICT(model_id, alias) DO UPDATE SET version=excluded.version, "
	    "updated_at=excluded.updated_at",
	    "itid", mid, alias, version, tf_now_wall());
}

int tf_registry_set_alias(struct tf_store *st, const char *model, const char *alias,
                          int64_t version)
{
	int64_t mid, v;
	char why[300];
	if (tf_registry_check_name(alias, TF_REGNAME_ALIAS, why, sizeof(why)))
		return -EINVAL;
	int own, rc = tf_store_join(st, &own);
	if (rc)
		return rc;
	rc = model_id(st, model, 0, &mid);
	if (rc == 0)
		rc = tf_store_query_int(st, &v,
		                        "SELECT version FROM model_versions WHERE model_id=? AND "
		                        "version=?",
		                        "ii", mid, version);
	if (rc == 0)
		rc = set_alias(st, mid, alias, version);
	return tf_store_leave(st, own, rc);
}

static json_t *deployment_row(struct tf_stmt *s, int base, const char *model)
{
	/* columns from base: alias, version, canary_version, canary_percent, previous_version,
	 * created_at, run_id, step, id, rollout, reason, figures */
	json_t *o = json_object();
	json_object_set_new(o, "model", json_string(model));
	json_object_set_new(o, "alias", json_string(tf_stmt_text(s, base)));
	json_object_set_new(o, "version", json_integer(tf_stmt_int(s, base + 1)));
	json_object_set_new(o, "canary_version",
	                    tf_stmt_is_null(s, base + 2) ? json_null()
	                                                 : json_integer(tf_stmt_int(s, base + 2)));
	json_object_set_new(o, "canary_percent", json_real(tf_stmt_double(s, base + 3)));
	json_object_set_new(o, "previous_version",
	                    tf_stmt_is_null(s, base + 4) ? json_null()
	                                                 : json_integer(tf_stmt_int(s, base + 4)));
	json_object_set_new(o, "created_at", json_real(tf_stmt_double(s, base + 5)));
	const char *run = tf_stmt_text(s, base + 6), *step = tf_stmt_text(s, base + 7);
	json_object_set_new(o, "run_id", run ? json_string(run) : json_null());
	json_object_set_new(o, "step", step ? json_string(step) : json_null());
	json_object_set_new(o, "id", json_integer(tf_stmt_int(s, base + 8)));
	const char *rollout = tf_stmt_text(s, base + 9), *reason = tf_stmt_text(s, base + 10);
	const char *figures = tf_stmt_text(s, base + 11);
	json_t *r = rollout ? json_loads(rollout, 0, NULL) : NULL;
	json_t *f = figures ? json_loads(figures, 0, NULL) : NULL;
	json_object_set_new(o, "rollout", r ? r : json_null());
	json_object_set_new(o, "reason", reason ? json_string(reason) : json_null());
	json_object_set_new(o, "figures", f ? f : json_null());
	return o;
}

#define DEPLOY_COLS                                                                                \
	"alias, version, canary_version, canary_percent, previous_version, created_at, run_id, "   \
	"step, id, rollout, reason, figures"

static int deployment_by(struct tf_store *st, const char *model, int64_t mid, const char *alias,
                         json_t **out)
{
	struct tf_stmt *s =
	    tf_store_query(st,
	                   "SELECT " DEPLOY_COLS " FROM deployments WHERE "
	                   "model_id=? AND alias=? AND active=1 ORDER BY id DESC LIMIT 1",
	                   "it", mid, alias);
	if (!s)
		return -EIO;
	int rc = tf_stmt_step(s);
	if (rc == 1) {
		*out = deployment_row(s, 0, model);
		rc = 0;
	} else if (rc == 0) {
		rc = -ENOENT;
	}
	tf_stmt_done(s);
	return rc;
}

int tf_registry_deployment(struct tf_store *st, const char *model, const char *alias, json_t **out)
{
	int64_t mid;
	int rc = model_id(st, model, 0, &mid);
	if (rc)
		return rc;
	return deployment_by(st, model, mid, alias, out);
}

int tf_registry_rollout_parse(const json_t *j, struct tf_rollout *out, char *err, size_t errlen)
{
	struct tf_rollout r = {.max_error_rate = 1,
	                       .min_requests = 100,
	                       .max_error_rate_vs_production = -1,
	                       .max_disagreement_vs_production = -1,
	                       .shadow_percent = 100};
	const char *k;
	json_t *v;
	if (!json_is_object(j)) {
		tf_errf(err, errlen, "rollout: expected an object");
		return -EINVAL;
	}
	json_object_foreach((json_t *)j, k, v)
	{
		double x = json_number_value(v);
		int num = json_is_number(v);
		if (!strcmp(k, "steps")) {
			size_t i;
			json_t *e;
			if (!json_is_array(v) || json_array_size(v) > TF_ROLLOUT_MAX_STEPS) {
				tf_errf(err, errlen,
				        "rollout.steps: expected a list of at most %d "
				        "shares",
				        TF_ROLLOUT_MAX_STEPS);
				return -EINVAL;
			}
			json_array_foreach(v, i, e)
			{
				double p = json_number_value(e);
				if (!json_is_number(e) || p <= 0 || p >= 100 ||
				    (i && p <= r.steps[i - 1])) {
					snprintf(
					    err, errlen,
					    "rollout.steps[%zu]: shares are percents above 0 and "
					    "below 100, ascending",
					    i);
					return -EINVAL;
				}
				r.steps[r.nsteps++] = p;
			}
		} else if (!strcmp(k, "soak_s") && num && x >= 0 && x <= 86400 * 30) {
			r.soak_s = x;
		} else if (!strcmp(k, "max_error_rate") && num && x >= 0 && x <= 1) {
			r.max_error_rate = x;
		} else if (!strcmp(k, "max_p99_ms") && num && x >= 0) {
			r.max_p99_ms = x;
		} else if (!strcmp(k, "min_requests") && json_is_integer(v) && x >= 1 && x <= 1e9) {
			r.min_requests = json_integer_value(v);
		} else if (!strcmp(k, "max_error_rate_vs_production") && num && x >= 0 && x <= 1) {
			r.max_error_rate_vs_production = x;
		} else if (!strcmp(k, "max_p99_ratio_vs_production") && num && x > 0 && x <= 1e6) {
			r.max_p99_ratio_vs_production = x;
		} else if (!strcmp(k, "max_disagreement_vs_production") && num && x >= 0 &&
		           x <= 1) {
			r.max_disagreement_vs_production = x;
		} else if (!strcmp(k, "shadow_percent") && num && x > 0 && x <= 100) {
			r.shadow_percent = x;
		} else if (!strcmp(k, "shadow_tolerance") && num && x >= 0 && x <= 1) {
			r.shadow_tolerance = x;
		} else {
			tf_errf(err, errlen, "rollout.%s: %s", k,
			         !strcmp(k, "soak_s")           ? "seconds from 0 to 30 days"
			         : !strcmp(k, "max_error_rate") ? "a rate from 0 to 1"
			         : !strcmp(k, "max_p99_ms")     ? "milliseconds, 0 or more"
			         : !strcmp(k, "min_requests")   ? "an integer from 1"
			         : !strcmp(k, "max_error_rate_vs_production")
			             ? "a difference of rates from 0 to 1"
			         : !strcmp(k, "max_p99_ratio_vs_production")
			             ? "a ratio above 0"
			         : !strcmp(k, "max_disagreement_vs_production")
			             ? "a share of rows from 0 to 1"
			         : !strcmp(k, "shadow_percent")
			             ? "a percent above 0, at most 100"
			         : !strcmp(k, "shadow_tolerance")
			             ? "a difference of probabilities from 0 to 1"
			             : "unknown key (steps, soak_s, max_error_rate, max_p99_ms, "
			               "min_requests, max_error_rate_vs_production, "
			               "max_p99_ratio_vs_production, max_disagreement_vs_production, "
			               "shadow_percent, shadow_tolerance)");
			return -EINVAL;
		}
	}
	*out = r;
	return 0;
}

/* 1 for NULL or the text of a JSON object. */
static int json_text_ok(const char *text)
{
	json_t *j = text ? json_loads(text, 0, NULL) : NULL;
	int ok = !text || json_is_object(j);
	json_decref(j);
	return ok;
}

int tf_registry_deploy(struct tf_store *st, const struct tf_deploy_spec *d, json_t **out)
{
	int64_t mid, v, cur = 0, id = 0;
	int own, rc, has_cur = 0;
	json_t *doc = NULL;

	char why[300];
	if (tf_registry_check_name(d->alias, TF_REGNAME_ALIAS, why, sizeof(why)) ||
	    d->canary_percent < 0 || d->canary_percent >= 100)
		return -EINVAL;
	if (!json_text_ok(d->rollout) || !json_text_ok(d->figures))
		return -EINVAL;
	rc = tf_store_join(st, &own);
	if (rc)
		return rc;
	rc = model_id(st, d->model, 0, &mid);
	if (rc)
		goto out;
	rc = tf_store_query_int(st, &v,
	                        "SELECT version FROM model_versions WHERE model_id=? AND version=?",
	                        "ii", mid, d->version);
	if (rc)
		goto out;
	if (d->run_id && d->step) {
		rc = tf_store_query_int(st, &id,
		                        "SELECT id FROM deployments WHERE run_id=? AND step=?",
		                        "tt", d->run_id, d->step);
		if (rc == 0) { /* already done by an earlier attempt of this step */
			struct tf_stmt *s = tf_store_query(
			    st, "SELECT " DEPLOY_COLS " FROM deployments WHERE id=?", "i", id);
			if (!s) {
				rc = -EIO;
				goto out;
			}
			if (tf_stmt_step(s) == 1)
				doc = deployment_row(s, 0, d->model);
			tf_stmt_done(s);
			goto out;
		}
		if (rc != -ENOENT)
			goto out;
	}
	rc =
	    tf_store_query_int(st, &cur, "SELECT version FROM aliases WHERE model_id=? AND alias=?",
	                       "it", mid, d->alias);
	if (rc == 0)
		has_cur = 1;
	else if (rc != -ENOENT)
		goto out;
	int canary = d->canary_percent > 0 && has_cur && cur != d->version;
	/* the alias naming the canary: "canary" for production's, ALIAS-canary for another's */
	int prod = !strcmp(d->alias, "production");
	char canary_alias[80];
	snprintf(canary_alias, sizeof(canary_alias), "%s%s", prod ? "" : d->alias,
	         prod ? "canary" : "-canary");
	if (canary && tf_registry_check_name(canary_alias, TF_REGNAME_ALIAS, why, sizeof(why))) {
		rc = -EINVAL; /* an alias too long to name its canary */
		goto out;
	}
	if (d->expect_id) { /* compare-and-set: only over the deployment the caller judged */
		int64_t active = 0;
		rc = tf_store_query_int(
		    st, &active,
		    "SELECT id FROM deployments WHERE model_id=? AND alias=? AND "
		    "active=1 ORDER BY id DESC LIMIT 1",
		    "it", mid, d->alias);
		if (rc == 0 && active != d->expect_id)
			rc = -ESTALE;
		if (rc)
			goto out;
	}
	rc = tf_store_run(st, "UPDATE deployments SET active=0 WHERE model_id=? AND alias=?", "it",
	                  mid, d->alias);
	if (rc)
		goto out;
	rc = tf_store_run(st,
	                  "INSERT INTO deployments(model_id, alias, version, canary_version, "
	                  "canary_percent, previous_version, run_id, step, active, created_at, "
	                  "rollout, reason, figures) "
	                  "VALUES(?1, ?2, ?3, CASE WHEN ?4 THEN ?5 ELSE NULL END, ?6, "
	                  "CASE WHEN ?7 THEN ?8 ELSE NULL END, ?9, ?10, 1, ?11, "
	                  "CASE WHEN ?4 THEN ?12 ELSE NULL END, ?13, ?14)",
	                  "itiiidiittdttt", mid, d->alias, canary ? cur : d->version,
	                  (int64_t)canary, d->version, canary ? d->canary_percent : 0.0,
	                  (int64_t)has_cur, cur, d->run_id, d->step, tf_now_wall(), d->rollout,
	                  d->reason, d->figures);
	if (rc)
		goto out;
	id = tf_store_last_rowid(st);
	rc = set_alias(st, mid, canary ? canary_alias : d->alias, d->version);
	if (rc)
		goto out;
	char msg[600];
	if (canary)
		snprintf(msg, sizeof(msg),
		         "%s version %lld is the canary of '%s' at %.3g%%%s%.300s", d->model,
		         (long long)d->version, d->alias, d->canary_percent, d->reason ? ": " : "",
		         d->reason ? d->reason : "");
	else
		snprintf(msg, sizeof(msg), "%s '%s' -> version %lld%s%.300s", d->model, d->alias,
		         (long long)d->version, d->reason ? ": " : "", d->reason ? d->reason : "");
	rc = add_event(st, d->run_id, d->step, "deploy", msg);
	if (rc == 0) {
		json_t *x = json_pack("{s:s, s:s, s:I}", "model", d->model, "alias", d->alias,
		                      "version", (json_int_t)d->version);
		rc = tf_alerts_emit(st, d->event ? d->event : "model_deployed", d->run_id, d->step,
		                    msg, x);
		json_decref(x);
	}
	if (rc)
		goto out;
	rc = deployment_by(st, d->model, mid, d->alias, &doc);
out:
	rc = tf_store_leave(st, own, rc);
	if (rc == 0 && out)
		*out = doc;
	else
		json_decref(doc);
	return rc;
}

static json_t *json_text(const char *t)
{
	if (!t)
		return json_object();
	json_t *v = json_loads(t, JSON_DECODE_ANY, NULL);
	return v ? v : json_string(t);
}

int tf_registry_figures_put(struct tf_store *st, int64_t dep_id, const char *server,
                            const char *canary, const char *stable, double now)
{
	if (!json_text_ok(canary) || !json_text_ok(stable))
		return -EINVAL;
	int rc = tf_store_begin(st);
	if (rc)
		return rc;
	rc = tf_store_run(st,
	                  "DELETE FROM serving_figures WHERE deployment_id IN (SELECT id FROM "
	                  "deployments WHERE active=0)",
	                  "");
	if (!rc)
		rc = tf_store_run(st,
		                  "INSERT OR REPLACE INTO serving_figures(deployment_id, server, canary, "
		                  "stable, updated_at) SELECT id, ?2, ?3, ?4, ?5 FROM deployments "
		                  "WHERE id=?1 AND active=1",
		                  "itttd", dep_id, server, canary, stable, now);
	if (!rc)
		return tf_store_commit(st);
	tf_store_rollback(st);
	return rc;
}

int tf_registry_figures_get(struct tf_store *st, int64_t dep_id, const char *except_server,
                            json_t **out)
{
	struct tf_stmt *s = tf_store_query(st,
	                                   "SELECT server, canary, stable, updated_at FROM "
	                                   "serving_figures WHERE deployment_id=? AND server<>? "
	                                   "ORDER BY server",
	                                   "it", dep_id, except_server ? except_server : "");
	if (!s)
		return -EIO;
	json_t *arr = json_array();
	int rc;
	while ((rc = tf_stmt_step(s)) == 1)
		json_array_append_new(
		    arr, json_pack("{s:s, s:o, s:o, s:f}", "server", tf_stmt_text(s, 0), "canary",
		                   json_text(tf_stmt_text(s, 1)), "stable",
		                   json_text(tf_stmt_text(s, 2)), "updated_at", tf_stmt_double(s, 3)));
	tf_stmt_done(s);
	if (rc < 0) {
		json_decref(arr);
		return rc;
	}
	*out = arr;
	return 0;
}

static json_t *aliases_of(struct tf_store *st, int64_t mid)
{
	json_t *o = json_object();
	struct tf_stmt *s = tf_store_query(
	    st, "SELECT alias, version FROM aliases WHERE model_id=? ORDER BY alias", "i", mid);
	if (!s)
		return o;
	while (tf_stmt_step(s) == 1)
		json_object_set_new(o, tf_stmt_text(s, 0), json_integer(tf_stmt_int(s, 1)));
	tf_stmt_done(s);
	return o;
}

int tf_registry_list(struct tf_store *st, json_t **out)
{
	struct tf_stmt *s = tf_store_query(
	    st,
	    "SELECT m.id, m.name, m.created_at, count(v.version), max(v.version) FROM models m "
	    "LEFT JOIN model_versions v ON v.model_id = m.id GROUP BY m.id ORDER BY m.name",
	    "");
	if (!s)
		return -EIO;
	json_t *arr = json_array();
	int rc;
	while ((rc = tf_stmt_step(s)) == 1) {
		json_t *o = json_object();
		json_object_set_new(o, "name", json_string(tf_stmt_text(s, 1)));
		json_object_set_new(o, "created_at", json_real(tf_stmt_double(s, 2)));
		json_object_set_new(o, "versions", json_integer(tf_stmt_int(s, 3)));
		json_object_set_new(o, "latest",
		                    tf_stmt_is_null(s, 4) ? json_null()
		                                          : json_integer(tf_stmt_int(s, 4)));
		json_object_set_new(o, "id", json_integer(tf_stmt_int(s, 0)));
		json_array_append_new(arr, o);
	}
	tf_stmt_done(s);
	if (rc < 0) {
		json_decref(arr);
		return rc;
	}
	size_t i;
	json_t *o;
	json_array_foreach(arr, i, o)
	{
		int64_t mid = json_integer_value(json_object_get(o, "id"));
		json_object_set_new(o, "aliases", aliases_of(st, mid));
		json_object_del(o, "id");
	}
	*out = arr;
	return 0;
}

static json_t *version_row(struct tf_stmt *s)
{
	/* version, run_id, step, bundle, checkpoint, dataset, metrics, params, tags, created_at */
	json_t *o = json_object();
	json_object_set_new(o, "version", json_integer(tf_stmt_int(s, 0)));
	json_object_set_new(o, "run_id", json_string(tf_stmt_text(s, 1)));
	json_object_set_new(o, "step", json_string(tf_stmt_text(s, 2)));
	json_object_set_new(o, "bundle", json_string(tf_stmt_text(s, 3)));
	const char *ck = tf_stmt_text(s, 4), *ds = tf_stmt_text(s, 5);
	json_object_set_new(o, "checkpoint", ck ? json_string(ck) : json_null());
	json_object_set_new(o, "dataset", ds ? json_string(ds) : json_null());
	json_object_set_new(o, "metrics", json_text(tf_stmt_text(s, 6)));
	json_object_set_new(o, "params", json_text(tf_stmt_text(s, 7)));
	json_object_set_new(o, "tags", json_text(tf_stmt_text(s, 8)));
	json_object_set_new(o, "created_at", json_real(tf_stmt_double(s, 9)));
	return o;
}

#define VERSION_COLS                                                                               \
	"version, run_id, step, bundle, checkpoint, dataset, metrics, params, tags, created_at"

static void attach_aliases(json_t *version, json_t *aliases)
{
	json_t *names = json_array();
	const char *k;
	json_t *v;
	json_object_foreach(aliases, k, v)
	{
		if (json_integer_value(v) ==
		    json_integer_value(json_object_get(version, "version")))
			json_array_append_new(names, json_string(k));
	}
	json_object_set_new(version, "aliases", names);
}

int tf_registry_version(struct tf_store *st, const char *model, int64_t version, json_t **out)
{
	int64_t mid;
	int rc = model_id(st, model, 0, &mid);
	if (rc)
		return rc;
	struct tf_stmt *s = tf_store_query(st,
	                                   "SELECT " VERSION_COLS " FROM model_versions WHERE "
	                                   "model_id=? AND version=?",
	                                   "ii", mid, version);
	if (!s)
		return -EIO;
	rc = tf_stmt_step(s);
	json_t *o = NULL;
	if (rc == 1) {
		o = version_row(s);
		rc = 0;
	} else if (rc == 0) {
		rc = -ENOENT;
	}
	tf_stmt_done(s);
	if (rc == 0) {
		json_t *aliases = aliases_of(st, mid);
		attach_aliases(o, aliases);
		json_decref(aliases);
		json_object_set_new(o, "model", json_string(model));
		*out = o;
	}
	return rc;
}

int tf_registry_show(struct tf_store *st, const char *model, json_t **out)
{
	int64_t mid;
	int rc = model_id(st, model, 0, &mid);
	if (rc)
		return rc;
	json_t *doc = json_object(), *versions = json_array(), *deps = json_array();
	json_t *aliases = aliases_of(st, mid);
	struct tf_stmt *s = tf_store_query(
	    st, "SELECT " VERSION_COLS " FROM model_versions WHERE model_id=? ORDER BY version",
	    "i", mid);
	if (!s) {
		rc = -EIO;
		goto out;
	}
	while ((rc = tf_stmt_step(s)) == 1) {
		json_t *v = version_row(s);
		attach_aliases(v, aliases);
		json_array_append_new(versions, v);
	}
	tf_stmt_done(s);
	if (rc < 0)
		goto out;
	s = tf_store_query(st,
	                   "SELECT " DEPLOY_COLS ", active FROM deployments WHERE model_id=? "
	                   "ORDER BY id DESC LIMIT 20",
	                   "i", mid);
	if (!s) {
		rc = -EIO;
		goto out;
	}
	while ((rc = tf_stmt_step(s)) == 1) {
		json_t *d = deployment_row(s, 0, model);
		json_object_set_new(d, "active", json_boolean(tf_stmt_int(s, 12)));
		json_array_append_new(deps, d);
	}
	tf_stmt_done(s);
	if (rc < 0)
		goto out;
	rc = 0;
	json_object_set_new(doc, "name", json_string(model));
	json_object_set(doc, "aliases", aliases);
	json_object_set(doc, "versions", versions);
	json_object_set(doc, "deployments", deps);
	*out = doc;
	doc = NULL;
out:
	json_decref(doc);
	json_decref(versions);
	json_decref(deps);
	json_decref(aliases);
	return rc;
}

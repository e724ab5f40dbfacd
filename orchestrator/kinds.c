/* kinds.c — owns the built-in step kinds that act on the registry (register, deploy) and
 * the table that maps step types to kinds. The ml kinds live in kinds_ml.c, shell in
 * kinds_shell.c. Names and versions are checked here too (the loader checks the ones written
 * literally; values from references arrive only now), and register loads the bundle with
 * its manifest, signature and checksums before it records a version. */
#include "orchestrator/kinds.h"
#include "orchestrator/registry.h"
#include "ml/bundle.h"
#include "ml/steps.h"

#define TF_LOG_TAG "kinds"
#include "common/common.h"
#include "common/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *with_str(const json_t *with, const char *key, char *buf, size_t len)
{
	json_t *v = json_object_get(with, key);
	if (json_is_string(v))
		return json_string_value(v);
	if (json_is_integer(v)) {
		snprintf(buf, len, "%lld", (long long)json_integer_value(v));
		return buf;
	}
	if (json_is_real(v)) { /* shortest exact form: 1.1, not 1.1000000000000001 */
		char *t = tf_template_value_text(v);
		snprintf(buf, len, "%s", t);
		free(t);
		return buf;
	}
	return NULL;
}

/* Finds the step of this run whose outputs hold `bundle` (the train step) for lineage. */
static void lineage(struct tf_step_run *r, const char *bundle, char **checkpoint, char **dataset,
                    char **params)
{
	struct tf_stmt *q =
	    tf_store_query(r->db,
	                   "SELECT outputs, with_json FROM steps WHERE run_id=? AND "
	                   "json_valid(outputs) AND json_extract(outputs, '$.bundle')=?",
	                   "tt", r->run_id, bundle);
	if (!q)
		return;
	if (tf_stmt_step(q) == 1) {
		json_t *o = json_loads(tf_stmt_text(q, 0), 0, NULL);
		json_t *w = tf_stmt_text(q, 1) ? json_loads(tf_stmt_text(q, 1), 0, NULL) : NULL;
		const char *ck = json_string_value(json_object_get(o, "checkpoint"));
		const char *ds = json_string_value(json_object_get(w, "dataset"));
		*checkpoint = ck ? tf_xstrdup(ck) : NULL;
		*dataset = ds ? tf_xstrdup(ds) : NULL;
		*params = w ? json_dumps(w, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
		json_decref(o);
		json_decref(w);
	}
	tf_stmt_done(q);
}

int tf_kind_register(struct tf_step_run *r)
{
	char b1[64], b2[64];
	const char *model = with_str(r->with, "model_name", b1, sizeof(b1));
	const char *bundle = with_str(r->with, "bundle", b2, sizeof(b2));
	const char *from = json_string_value(json_object_get(r->with, "metrics_from"));
	char *metrics = NULL, *tags = NULL, *checkpoint = NULL, *dataset = NULL, *params = NULL;
	int64_t version = 0;
	int existed = 0, rc;

	if (!model || !*model || !bundle || !*bundle) {
		snprintf(r->err, sizeof(r->err), "register needs with.model_name and with.bundle");
		return -EINVAL;
	}
	char why[400];
	if (tf_registry_check_name(model, TF_REGNAME_MODEL, why, sizeof(why))) {
		tf_errf(r->err, sizeof(r->err), "register: %s", why);
		return -EINVAL;
	}
	/* Only a bundle that loads (manifest, signature, tensor checksums) becomes a version. */
	struct tf_bundle *b = NULL;
	rc = tf_bundle_load(r->objstore, bundle, &b, why, sizeof(why));
	tf_bundle_free(b);
	if (rc) {
		tf_errf(r->err, sizeof(r->err), "register: bundle '%s' %s: %s", bundle,
		        rc == -ENOENT ? "is not in the store" : "does not load", why);
		r->failure = tf_objstore_retryable(rc) ? TF_FAIL_INFRA : TF_FAIL_ERROR;
		return rc;
	}
	if (from) {
		rc = tf_store_query_text(r->db, &metrics,
		                         "SELECT metrics FROM steps WHERE run_id=? AND name=?",
		                         "tt", r->run_id, from);
		if (rc) {
			snprintf(r->err, sizeof(r->err), "metrics_from: no step '%s' in this run",
			         from);
			return -EINVAL;
		}
	}
	json_t *t = json_object_get(r->with, "tags");
	if (json_is_object(t))
		tags = json_dumps(t, JSON_COMPACT | JSON_SORT_KEYS);
	lineage(r, bundle, &checkpoint, &dataset, &params);
	struct tf_model_version_spec spec = {
	    .model = model,
	    .run_id = r->run_id,
	    .step = r->step,
	    .bundle = bundle,
	    .checkpoint = checkpoint,
	    .dataset = dataset,
	    .metrics = metrics,
	    .params = params,
	    .tags = tags,
	};
	rc = tf_registry_register(r->db, &spec, &version, &existed);
	if (rc) {
		snprintf(r->err, sizeof(r->err), "register '%s': %s", model,
		         tf_store_errmsg(r->db));
		r->failure = rc == -EBUSY ? TF_FAIL_INFRA : TF_FAIL_ERROR;
		goto out;
	}
	json_object_set_new(r->outputs, "model", json_string(model));
	json_object_set_new(r->outputs, "version", json_integer(version));
	json_object_set_new(r->metrics, "version", json_integer(version));
	if (existed)
		tf_info("register: %s version %lld already recorded", model, (long long)version);
out:
	free(metrics);
	free(tags);
	free(checkpoint);
	free(dataset);
	free(params);
	return rc;
}

/* The deploy step's rollout_* keys as a policy object (registry.h), NULL when it has none;
 * -EINVAL with r->err set when they do not make one. */
static int deploy_rollout(struct tf_step_run *r, json_t **out)
{
	static const char *const keys[][2] = {
	    {"rollout_soak_s", "soak_s"},
	    {"rollout_max_error_rate", "max_error_rate"},
	    {"rollout_max_p99_ms", "max_p99_ms"},
	    {"rollout_min_requests", "min_requests"},
	    {"rollout_max_error_rate_vs_production", "max_error_rate_vs_production"},
	    {"rollout_max_p99_ratio_vs_production", "max_p99_ratio_vs_production"},
	    {"rollout_max_disagreement_vs_production", "max_disagreement_vs_production"},
	    {"rollout_shadow_percent", "shadow_percent"},
	    {"rollout_shadow_tolerance", "shadow_tolerance"}};
	json_t *p = json_object();
	int rc = 0;
	const json_t *steps = json_object_get(r->with, "rollout_steps");
	if (steps && !json_is_null(steps) && !json_is_array(steps)) {
		tf_errf(r->err, sizeof(r->err),
		        "deploy: with.rollout_steps must be a list of shares, e.g. [10, 50]");
		rc = -EINVAL;
		goto fail;
	}
	if (json_is_array(steps)) {
		json_t *list = json_array();
		json_object_set_new(p, "steps", list);
		size_t i;
		const json_t *v;
		json_array_foreach(steps, i, v)
		{
			double x;
			if (tf_ml_number(v, &x)) {
				tf_errf(r->err, sizeof(r->err),
				        "deploy: with.rollout_steps[%zu] must be a number (a share "
				        "in percent)",
				        i);
				rc = -EINVAL;
				goto fail;
			}
			json_array_append_new(list, json_real(x));
		}
	}
	for (size_t i = 0; i < TF_ARRAY_LEN(keys); i++) {
		double x;
		char why[160];
		const char *text = json_string_value(json_object_get(r->with, keys[i][0]));
		if (text && !strcmp(keys[i][1], "soak_s")) { /* a duration, as the pipeline's others */
			rc = tf_duration_parse(text, &x);
			if (rc)
				tf_errf(why, sizeof(why),
				        "with.rollout_soak_s must be a duration (seconds, or 30s, 10m, "
				        "1h30m), not '%.40s'",
				        text);
		} else {
			rc = tf_ml_with_number(r->with, keys[i][0], &x, why, sizeof(why));
		}
		if (rc < 0) {
			tf_errf(r->err, sizeof(r->err), "deploy: %s", why);
			goto fail;
		}
		if (rc == 0)
			json_object_set_new(p, keys[i][1],
			                    !strcmp(keys[i][1], "min_requests")
			                        ? json_integer((json_int_t)x)
			                        : json_real(x));
	}
	if (!json_object_size(p)) {
		json_decref(p);
		*out = NULL;
		return 0;
	}
	struct tf_rollout pol;
	char why[256];
	if (tf_registry_rollout_parse(p, &pol, why, sizeof(why))) {
		snprintf(r->err, sizeof(r->err), "deploy: %s", why);
		rc = -EINVAL;
		goto fail;
	}
	*out = p;
	return 0;
fail:
	json_decref(p);
	return rc;
}

int tf_kind_deploy(struct tf_step_run *r)
{
	char b1[64], b2[64], b3[64];
	const char *model = with_str(r->with, "model_name", b1, sizeof(b1));
	const char *ver = with_str(r->with, "version", b2, sizeof(b2));
	const char *alias = with_str(r->with, "alias", b3, sizeof(b3));
	double canary = 0;
	int64_t version = 0;
	json_t *dep = NULL;
	int rc;

	if (!model || !ver) {
		snprintf(r->err, sizeof(r->err), "deploy needs with.model_name and with.version");
		return -EINVAL;
	}
	if (!alias)
		alias = "production";
	char why[300];
	if (tf_registry_check_name(model, TF_REGNAME_MODEL, why, sizeof(why)) ||
	    tf_registry_check_name(alias, TF_REGNAME_ALIAS, why, sizeof(why)) ||
	    tf_registry_check_name(ver, TF_REGNAME_VERSION, why, sizeof(why))) {
		tf_errf(r->err, sizeof(r->err), "deploy: %s", why);
		return -EINVAL;
	}
	rc = tf_ml_with_number(r->with, "canary_percent", &canary, NULL, 0);
	if (rc < 0 || canary < 0 || canary >= 100) {
		snprintf(r->err, sizeof(r->err),
		         "deploy: canary_percent must be a number from 0 to below 100");
		return -EINVAL;
	}
	json_t *policy = NULL;
	if ((rc = deploy_rollout(r, &policy)))
		return rc;
	const json_t *first = json_array_get(json_object_get(policy, "steps"), 0);
	if (policy && canary == 0 && first) /* the policy's first share starts the canary */
		canary = json_number_value(first);
	if (policy && canary == 0) {
		snprintf(r->err, sizeof(r->err),
		         "deploy: a rollout policy needs a canary (the share of the alias's traffic "
		         "serving splits): give canary_percent or rollout_steps");
		json_decref(policy);
		return -EINVAL;
	}
	rc = tf_registry_resolve(r->db, model, ver, &version);
	if (rc) {
		snprintf(r->err, sizeof(r->err), "deploy: model '%s' has no version '%s'", model,
		         ver);
		json_decref(policy);
		return rc;
	}
	char *policy_text = policy ? json_dumps(policy, JSON_COMPACT) : NULL;
	json_decref(policy);
	struct tf_deploy_spec d = {.model = model,
	                           .alias = alias,
	                           .version = version,
	                           .canary_percent = canary,
	                           .run_id = r->run_id,
	                           .step = r->step,
	                           .rollout = policy_text};
	rc = tf_registry_deploy(r->db, &d, &dep);
	free(policy_text);
	if (rc) {
		snprintf(r->err, sizeof(r->err), "deploy '%s': %s", model, tf_store_errmsg(r->db));
		r->failure = rc == -EBUSY ? TF_FAIL_INFRA : TF_FAIL_ERROR;
		return rc;
	}
	json_object_set_new(r->outputs, "alias", json_string(alias));
	json_object_set_new(r->outputs, "version", json_integer(version));
	json_t *cv = json_object_get(dep, "canary_version");
	if (json_is_integer(cv))
		json_object_set(r->outputs, "canary_version", cv);
	json_decref(dep);
	return 0;
}

/* ---- helpers of the kind interface (step_kind.h) ---- */

void tf_step_run_child(struct tf_step_run *r, long pgid)
{
	if (r->db && pgid > 0 && tf_attempt_set_pgid(r->db, r->run_id, r->step, r->attempt, pgid))
		tf_warn("run '%s' step '%s': process group %ld not recorded: %s", r->run_id,
		        r->step, pgid, tf_store_errmsg(r->db));
	if (r->child_running)
		r->child_running(r->child_running_data);
}

void tf_step_run_timed_by_executor(struct tf_step_run *r)
{
	if (r->executor_timed)
		*r->executor_timed = 1;
}

int tf_step_run_workdir(struct tf_step_run *r)
{
	if (r->workdir_made) {
		r->workdir_made = 0; /* once: a second call finds what the first left */
		return 1;
	}
	if (mkdir(r->workdir, 0755) == 0)
		return 1; /* new: nothing of an earlier attempt is in it */
	int rc = tf_mkdir_p(r->workdir);
	if (rc)
		snprintf(r->err, sizeof(r->err), "cannot create work directory '%s': %s",
		         r->workdir, strerror(-rc));
	return rc;
}

/* routes_registry.c — owns the API's routes over what is registered by name: pipelines
 * (validate a text, list, show, register, remove), their `schedule:` blocks (list, show,
 * create, delete, pause, resume, fire the due ticks) and the model registry (models, their
 * versions, comparing two versions, moving an alias). The route table is in web/routes.c.
 */
#include "web/routes_int.h"

#include "common/common.h"
#include "orchestrator/pipeline.h"
#include "orchestrator/registry.h"
#include "orchestrator/schedules.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- pipelines ---------------------------------------------------------------------------- */

/* A body of {yaml, name?}: the pipeline text in *yaml and the file name for diagnostics in
 * *name ("pipeline.yaml" when not given); 0, or a 422 in rs. exact: no other member. */
static int yaml_body(struct tf_web_req *rq, struct tf_web_resp *rs, int exact, json_t **yaml,
                     const char **name)
{
	json_t *jy = json_object_get(rq->json, "yaml"), *jn = json_object_get(rq->json, "name");
	if (!json_is_string(jy) || (jn && !json_is_string(jn)) ||
	    (exact && json_object_size(rq->json) != 1U + (jn != NULL))) {
		tf_web_problem(rs, 422, rq->path,
		               "give 'yaml' (the pipeline file's text) and optionally 'name' (the "
		               "file name used in diagnostics)");
		return -1;
	}
	*yaml = jy;
	*name = jn ? json_string_value(jn) : "pipeline.yaml";
	return 0;
}

void tf_web_pipeline_validate(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	json_t *jy;
	const char *name;
	if (yaml_body(rq, rs, 0, &jy, &name))
		return;
	struct tf_diag_list diags = {0};
	struct tf_pipeline *p = NULL;
	int rc = tf_pipeline_load_buffer(name, json_string_value(jy), json_string_length(jy), NULL,
	                                 0, TF_PIPELINE_ALLOW_UNSET, &p, &diags);
	if (rc) {
		tf_web_problem_diags(rs, 422, rq->path, &diags, "the pipeline has errors");
	} else {
		json_t *steps = json_array();
		for (size_t i = 0; i < p->nsteps; i++)
			json_array_append_new(steps, json_string(p->steps[i].name));
		tf_web_json(rs, 200,
		            json_pack("{s:b, s:s, s:o, s:o}", "valid", 1, "name", p->name, "steps",
		                      steps, "warnings", tf_diag_to_json(&diags)));
	}
	tf_pipeline_free(p);
	tf_diag_list_release(&diags);
}

/* Pipelines: those runs were made from (name, how many texts, the newest digest) merged with
 * the registered ones (registered, path, schedule with its next fire times). */
void tf_web_pipelines_list(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	json_t *reg = NULL, *byname = json_object();
	int rc = tf_pipelines_list(rq->st, tf_now_wall(), 3, &reg);
	struct tf_stmt *s = rc ? NULL : tf_store_query(
	    rq->st,
	    "SELECT name, count(*), max(created_at), (SELECT digest FROM pipelines q WHERE "
	    "q.name=p.name ORDER BY created_at DESC, id DESC LIMIT 1) FROM pipelines p "
	    "GROUP BY name ORDER BY name",
	    "");
	if (!rc && !s)
		rc = -EIO;
	while (s && (rc = tf_stmt_step(s)) == 1)
		json_object_set_new(byname, tf_stmt_text(s, 0),
		                    json_pack("{s:o, s:I, s:o, s:o, s:b, s:n}", "name", tf_web_col_text(s, 0),
		                              "versions", (json_int_t)tf_stmt_int(s, 1), "updated_at",
		                              tf_web_col_real(s, 2), "digest", tf_web_col_text(s, 3), "registered",
		                              0, "schedule"));
	tf_stmt_done(s);
	if (rc < 0) {
		json_decref(reg);
		json_decref(byname);
		tf_web_problem_errno(rs, rc, rq->path, tf_store_errmsg(rq->st));
		return;
	}
	size_t i;
	json_t *r;
	json_array_foreach(reg, i, r)
	{
		const char *name = json_string_value(json_object_get(r, "name"));
		json_t *it = json_object_get(byname, name);
		if (!it) {
			it = json_pack("{s:s, s:i, s:O}", "name", name, "versions", 0, "updated_at",
			               json_object_get(r, "added_at"));
			json_object_set_new(byname, name, it);
		}
		json_object_set(it, "digest", json_object_get(r, "digest"));
		json_object_set(it, "path", json_object_get(r, "path"));
		json_object_set(it, "schedule", json_object_get(r, "schedule"));
		json_object_set_new(it, "registered", json_true());
	}
	json_decref(reg);
	json_t *items = json_array();
	const char *k;
	json_object_foreach(byname, k, r) json_array_append(items, r);
	json_decref(byname);
	tf_web_json(rs, 200, json_pack("{s:o}", "items", items));
}

/* The params a pipeline's text declares, [{name, type, default, description}] (a form needs
 * them to offer values); [] when the text no longer loads. */
static json_t *params_of(const char *yaml)
{
	json_t *out = json_array();
	struct tf_pipeline *p = NULL;
	struct tf_diag_list diags;
	tf_diag_list_init(&diags);
	if (yaml && !tf_pipeline_load_buffer("pipeline.yaml", yaml, strlen(yaml), NULL, 0,
	                                     TF_PIPELINE_ALLOW_UNSET, &p, &diags))
		for (size_t i = 0; i < p->nparams; i++) {
			const struct tf_param *q = &p->params[i];
			json_array_append_new(
			    out, json_pack("{s:s, s:s, s:O?, s:s?}", "name", q->name, "type",
			                   tf_param_type_name(q->type), "default", q->default_value,
			                   "description", q->description));
		}
	tf_pipeline_free(p);
	tf_diag_list_release(&diags);
	return out;
}

/* The registered text of a pipeline when it is registered, else the newest one a run used. */
void tf_web_pipeline_show(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	const char *name = tf_web_param(rq, "name");
	struct tf_stmt *s = tf_store_query(
	    rq->st,
	    "SELECT name, digest, path, source, added_at, 1 FROM registered_pipelines WHERE name=?1 "
	    "UNION ALL SELECT * FROM (SELECT name, digest, path, source, created_at, 0 "
	    "FROM pipelines WHERE name=?1 ORDER BY created_at DESC, id DESC LIMIT 1) LIMIT 1",
	    "t", name);
	int rc = s ? tf_stmt_step(s) : -EIO;
	if (rc == 1)
		tf_web_json(rs, 200,
		            json_pack("{s:o, s:o, s:o, s:o, s:o, s:b, s:o}", "name", tf_web_col_text(s, 0),
		                      "digest", tf_web_col_text(s, 1), "path", tf_web_col_text(s, 2), "yaml",
		                      tf_web_col_text(s, 3), "created_at", tf_web_col_real(s, 4), "registered",
		                      (int)tf_stmt_int(s, 5), "params", params_of(tf_stmt_text(s, 3))));
	tf_stmt_done(s);
	if (rc == 0)
		tf_web_problem(rs, 404, rq->path, "no pipeline '%s'", name);
	else if (rc < 0)
		tf_web_problem_errno(rs, rc, rq->path, tf_store_errmsg(rq->st));
}

/* One entry of tf_pipelines_list (a new reference), NULL when not registered. */
static json_t *registered_entry(struct tf_store *st, const char *name)
{
	json_t *hit = NULL;
	return tf_pipelines_get(st, name, tf_now_wall(), 3, &hit) ? NULL : hit;
}

/* POST /pipelines and POST /schedules: registers {yaml, name?}; a schedule must have one. */
static void register_pipeline(struct tf_web_req *rq, struct tf_web_resp *rs, int schedule)
{
	json_t *jy;
	const char *file;
	if (yaml_body(rq, rs, 1, &jy, &file))
		return;
	struct tf_diag_list diags = {0};
	char *name = NULL;
	int rc = tf_pipelines_add_text(rq->st, file, json_string_value(jy), json_string_length(jy),
	                               tf_now_wall(), &name, &diags);
	json_t *doc = rc ? NULL : registered_entry(rq->st, name);
	if (rc == -EINVAL)
		tf_web_problem_diags(rs, 422, rq->path, &diags, "the pipeline has errors");
	else if (rc || !doc)
		tf_web_problem_errno(rs, rc ? rc : -EIO, rq->path, tf_store_errmsg(rq->st));
	else if (schedule && json_is_null(json_object_get(doc, "schedule")))
		tf_web_problem(rs, 422, rq->path,
		               "pipeline '%s' has no `schedule:` block (docs/daemon.md, Schedules); "
		               "register it with POST /api/v1/pipelines instead",
		               name);
	else {
		rs->location = tf_xasprintf("/api/v1/%s/%s", schedule ? "schedules" : "pipelines", name);
		tf_web_json(rs, 201, json_incref(doc));
	}
	json_decref(doc);
	free(name);
	tf_diag_list_release(&diags);
}

void tf_web_pipeline_register(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	register_pipeline(rq, rs, 0);
}

void tf_web_pipeline_remove(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	const char *name = tf_web_param(rq, "name");
	int rc = tf_pipelines_remove(rq->st, name);
	if (rc == -ENOENT)
		tf_web_problem(rs, 404, rq->path, "no registered pipeline '%s'", name);
	else if (rc)
		tf_web_problem_errno(rs, rc, rq->path, tf_store_errmsg(rq->st));
	else
		tf_web_json(rs, 200, json_pack("{s:s, s:b}", "name", name, "registered", 0));
}

/* ---- schedules: the `schedule:` blocks of registered pipelines ------------------------ */

/* A registered pipeline's schedule with its newest fires; NULL when it has none. */
static json_t *schedule_doc(struct tf_store *st, json_t *reg)
{
	json_t *sc = json_object_get(reg, "schedule");
	if (!json_is_object(sc))
		return NULL;
	const char *name = json_string_value(json_object_get(reg, "name"));
	json_t *doc = json_deep_copy(sc), *fires = json_array();
	json_object_set_new(doc, "pipeline", json_string(name));
	json_object_set(doc, "digest", json_object_get(reg, "digest"));
	struct tf_stmt *s = tf_store_query(st,
	                                   "SELECT tick, outcome, run_id, reason, at FROM "
	                                   "schedule_fires WHERE pipeline=? ORDER BY tick DESC "
	                                   "LIMIT 5",
	                                   "t", name);
	while (s && tf_stmt_step(s) == 1)
		json_array_append_new(fires, json_pack("{s:I, s:o, s:o, s:o, s:o}", "tick",
		                                       (json_int_t)tf_stmt_int(s, 0), "outcome",
		                                       tf_web_col_text(s, 1), "run", tf_web_col_text(s, 2),
		                                       "reason", tf_web_col_text(s, 3), "at", tf_web_col_real(s, 4)));
	tf_stmt_done(s);
	json_object_set_new(doc, "fires", fires);
	return doc;
}

void tf_web_schedules_list(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	json_t *reg = NULL, *items = json_array(), *r;
	size_t i;
	int rc = tf_pipelines_list(rq->st, tf_now_wall(), 3, &reg);
	if (rc) {
		json_decref(items);
		tf_web_problem_errno(rs, rc, rq->path, tf_store_errmsg(rq->st));
		return;
	}
	json_array_foreach(reg, i, r)
	{
		json_t *d = schedule_doc(rq->st, r);
		if (d)
			json_array_append_new(items, d);
	}
	json_decref(reg);
	tf_web_json(rs, 200, json_pack("{s:o}", "items", items));
}

void tf_web_schedule_show(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	const char *name = tf_web_param(rq, "name");
	json_t *reg = registered_entry(rq->st, name), *d = reg ? schedule_doc(rq->st, reg) : NULL;
	json_decref(reg);
	if (d)
		tf_web_json(rs, 200, d);
	else
		tf_web_problem(rs, 404, rq->path, "no registered pipeline '%s' with a schedule", name);
}

void tf_web_schedule_create(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	register_pipeline(rq, rs, 1);
	if (rs->status == 201) { /* answer with the schedule, as GET /schedules/{name} does */
		json_t *reg = json_loadb(rs->body, rs->len, 0, NULL);
		tf_web_json(rs, 201, schedule_doc(rq->st, reg));
		json_decref(reg);
	}
}

/* The schedule goes with its pipeline: deleting it unregisters the pipeline. */
void tf_web_schedule_delete(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	const char *name = tf_web_param(rq, "name");
	json_t *reg = registered_entry(rq->st, name);
	int has = reg && json_is_object(json_object_get(reg, "schedule"));
	json_decref(reg);
	if (!has) {
		tf_web_problem(rs, 404, rq->path, "no registered pipeline '%s' with a schedule", name);
		return;
	}
	tf_web_pipeline_remove(rq, rs);
}

/* POST /schedules/{name}:pause and :resume; answers with the schedule (and on resume how many
 * ticks of the pause were passed over). */
static void schedule_pause(struct tf_web_req *rq, struct tf_web_resp *rs, int pause)
{
	const char *name = tf_web_param(rq, "name");
	int passed = 0, rc = tf_schedules_pause(rq->st, name, pause, tf_now_wall(), &passed);
	json_t *reg = rc ? NULL : registered_entry(rq->st, name);
	json_t *d = reg ? schedule_doc(rq->st, reg) : NULL;
	json_decref(reg);
	if (rc == -ENOENT || rc == -EINVAL || (!rc && !d))
		tf_web_problem(rs, 404, rq->path, "no registered pipeline '%s' with a schedule", name);
	else if (rc)
		tf_web_problem_errno(rs, rc, rq->path, tf_store_errmsg(rq->st));
	else {
		if (!pause)
			json_object_set_new(d, "passed_over", json_integer(passed));
		tf_web_json(rs, 200, d);
		return;
	}
	json_decref(d);
}

void tf_web_schedule_pause(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	schedule_pause(rq, rs, 1);
}

void tf_web_schedule_resume(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	schedule_pause(rq, rs, 0);
}

/* `concurrency: replace` through the daemon's cancel hook, on the firing transaction. */
struct fire_ctx {
	struct tf_web_req *rq;
};

static int fire_cancel(void *ctx, const char *run)
{
	struct fire_ctx *f = ctx;
	const struct tf_web_hooks *h = tf_web_hooks(f->rq->srv);
	char err[256];
	return h->cancel(h->ctx, f->rq->st, run, err, sizeof(err));
}

/* Handles the ticks due now, as the daemon does every second (`tpuflow schedules fire`). */
void tf_web_schedules_fire(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	struct fire_ctx fc = {rq};
	struct tf_schedule_hooks sh = {.cancel = fire_cancel, .ctx = &fc};
	json_t *report = NULL, *t;
	size_t i;
	int rc = tf_schedules_fire_due(rq->st, tf_now_wall(),
	                               tf_web_hooks(rq->srv)->cancel ? &sh : NULL, &report);
	if (rc) {
		tf_web_problem_errno(rs, rc, rq->path, tf_store_errmsg(rq->st));
		return;
	}
	json_array_foreach(report, i, t) if (json_string_value(json_object_get(t, "run"))) rs->wake = 1;
	tf_web_json(rs, 200, json_pack("{s:o}", "items", report));
}

/* ---- models ------------------------------------------------------------------------------- */

void tf_web_models_list(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	json_t *out = NULL;
	int rc = tf_registry_list(rq->st, &out);
	tf_web_items(rq, rs, rc, out);
}

void tf_web_model_show(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	json_t *out = NULL;
	const char *name = tf_web_param(rq, "name");
	int rc = tf_registry_show(rq->st, name, &out);
	if (rc)
		tf_web_problem_errno(rs, rc, rq->path, rc == -ENOENT ? "no such model" : tf_store_errmsg(rq->st));
	else
		tf_web_json(rs, 200, out);
}

void tf_web_model_versions(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	json_t *out = NULL;
	int rc = tf_registry_show(rq->st, tf_web_param(rq, "name"), &out);
	if (rc) {
		tf_web_problem_errno(rs, rc, rq->path,
		                     rc == -ENOENT ? "no such model" : tf_store_errmsg(rq->st));
		return;
	}
	tf_web_json(rs, 200,
	            json_pack("{s:s, s:O}", "model", tf_web_param(rq, "name"), "items",
	                      json_object_get(out, "versions")));
	json_decref(out);
}

/* Resolves a version reference ("3", "v3", "latest", an alias) of {name}; 404 in rs. */
static int model_version(struct tf_web_req *rq, struct tf_web_resp *rs, const char *ref,
                         json_t **out)
{
	const char *name = tf_web_param(rq, "name");
	int64_t v = 0;
	int rc = ref ? tf_registry_resolve(rq->st, name, ref, &v) : -ENOENT;
	if (!rc)
		rc = tf_registry_version(rq->st, name, v, out);
	if (rc)
		tf_web_problem(rs, rc == -ENOENT ? 404 : 500, rq->path,
		               "model '%s' has no version '%s'", name, ref ? ref : "");
	return rc;
}

void tf_web_model_version(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	json_t *out = NULL;
	if (!model_version(rq, rs, tf_web_param(rq, "version"), &out))
		tf_web_json(rs, 200, out);
}

void tf_web_model_compare(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	json_t *a = NULL, *b = NULL;
	if (!tf_web_query(rq, "a") || !tf_web_query(rq, "b")) {
		tf_web_problem(rs, 400, rq->path, "give the two versions as ?a=V1&b=V2");
		return;
	}
	if (model_version(rq, rs, tf_web_query(rq, "a"), &a) ||
	    model_version(rq, rs, tf_web_query(rq, "b"), &b)) {
		json_decref(a);
		return;
	}
	json_t *ma = json_object_get(a, "metrics"), *mb = json_object_get(b, "metrics");
	json_t *metrics = json_object();
	const char *k;
	json_t *v;
	json_object_foreach(ma, k, v)
	{
		json_t *w = json_object_get(mb, k);
		json_t *row = json_pack("{s:O, s:O}", "a", v, "b", w ? w : json_null());
		if (json_is_number(v) && json_is_number(w))
			json_object_set_new(row, "delta",
			                    json_real(json_number_value(w) - json_number_value(v)));
		json_object_set_new(metrics, k, row);
	}
	json_object_foreach(mb, k, v) if (!json_object_get(ma, k)) json_object_set_new(
	    metrics, k, json_pack("{s:n, s:O}", "a", "b", v));
	tf_web_json(rs, 200,
	            json_pack("{s:s, s:o, s:o, s:o}", "model", tf_web_param(rq, "name"), "a", a, "b",
	                      b, "metrics", metrics));
}

void tf_web_model_alias(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	json_t *ja = json_object_get(rq->json, "alias"), *jv = json_object_get(rq->json, "version");
	const char *alias = json_string_value(ja);
	if (!alias || !*alias || json_string_length(ja) > 64 || !(json_is_string(jv) || json_is_integer(jv))) {
		tf_web_problem(rs, 422, rq->path,
		               "give 'alias' (e.g. production) and 'version' (a number, \"v3\", "
		               "\"latest\" or another alias)");
		return;
	}
	char why[300];
	if (tf_registry_check_name(alias, TF_REGNAME_ALIAS, why, sizeof(why))) {
		tf_web_problem(rs, 422, rq->path, "%s (docs/registry.md, Names)", why);
		return;
	}
	char ref[32];
	if (json_is_integer(jv))
		snprintf(ref, sizeof(ref), "%lld", (long long)json_integer_value(jv));
	else
		snprintf(ref, sizeof(ref), "%s", json_string_value(jv));
	json_t *ver = NULL;
	if (model_version(rq, rs, ref, &ver))
		return;
	int64_t v = json_integer_value(json_object_get(ver, "version"));
	json_decref(ver);
	int rc = tf_registry_set_alias(rq->st, tf_web_param(rq, "name"), alias, v);
	if (rc) {
		tf_web_problem_errno(rs, rc, rq->path, tf_store_errmsg(rq->st));
		return;
	}
	tf_web_json(rs, 200,
	            json_pack("{s:s, s:s, s:I}", "model", tf_web_param(rq, "name"), "alias", alias,
	                      "version", (json_int_t)v));
}

/* registry.h — the model registry: models, auto-numbered versions with metrics, params, tags
 * and lineage, aliases (production, canary, ...) and the deployment records serving reads.
 *
 * Every write is one transaction (or joins the caller's). Registering is idempotent per
 * (run, step): a resumed or retried run gets back the version it already made instead of a
 * second one; and a bundle already registered under the model (a cache hit upstream) maps
 * to its existing version too.
 */
#ifndef TF_REGISTRY_H
#define TF_REGISTRY_H

#include "orchestrator/store.h"

#include <jansson.h>
#include <stdint.h>

/* The name rule of the registry (docs/registry.md): model names and aliases are 1 to 64
 * characters of a-z, 0-9, '.', '_' and '-', starting with a letter or a digit. An alias must
 * also not read as a version: not `latest`, not a number, not vN. A version reference is a
 * number >= 1, vN, `latest` or an alias. */
enum tf_registry_name {
	TF_REGNAME_MODEL,   /* a model name */
	TF_REGNAME_ALIAS,   /* an alias (production, canary, ...) */
	TF_REGNAME_VERSION, /* a version reference (3, v3, latest, production) */
};
/* 0, or -EINVAL with err set ("alias 'latest': ..."). */
int tf_registry_check_name(const char *s, enum tf_registry_name kind, char *err, size_t errlen);

struct tf_model_version_spec {
	const char *model;  /* model name (created on first use) */
	const char *run_id; /* lineage: the run and step that registered it */
	const char *step;
	const char *bundle;     /* object-store key of the exported bundle (required) */
	const char *checkpoint; /* checkpoint key, or NULL */
	const char *dataset;    /* dataset manifest key, or NULL */
	const char *metrics;    /* JSON object text, or NULL */
	const char *params;     /* JSON object text (training params), or NULL */
	const char *tags;       /* JSON object text of string tags, or NULL */
};

/* Registers a version; *version receives its number, *existed (may be NULL) 1 when it was
 * already registered by this run+step or with this bundle (nothing written then). -EINVAL
 * for a model name that breaks the name rule. The bundle is not read here: the register step
 * loads it first (orchestrator/kinds.c). */
int tf_registry_register(struct tf_store *st, const struct tf_model_version_spec *spec,
                         int64_t *version, int *existed);

/* Resolves "3", "v3", "latest" or an alias name to a version number; -ENOENT. */
int tf_registry_resolve(struct tf_store *st, const char *model, const char *ref, int64_t *version);

/* Points `alias` of `model` at an existing version (-ENOENT when either is missing, -EINVAL
 * for an alias that breaks the rule above). */
int tf_registry_set_alias(struct tf_store *st, const char *model, const char *alias,
                          int64_t version);

struct tf_deploy_spec {
	const char *model;     /* model name */
	const char *alias;     /* serving label, e.g. "production" */
	int64_t version;       /* the version being deployed */
	double canary_percent; /* 0: the alias moves to `version` at once; 0 < p < 100: `version`
	                          takes p% of the traffic as the canary while the alias keeps its
	                          current version (if it has none, the alias moves) */
	const char *run_id;    /* lineage (may be NULL for manual deployments) */
	const char *step;
	const char *event; /* the alert it raises (orchestrator/alerts.h); NULL: model_deployed */
	const char *rollout; /* a canary's rollout policy, JSON text (NULL: none; kept only on a
	                        canary deployment); the server checks it (web/serve.h) */
	const char *reason;  /* why this deployment is made, for people (NULL: a deploy step) */
	const char *figures; /* the figures the decision was taken on, JSON text, or NULL */
	int64_t expect_id;   /* non-zero: deploy only while this is the active deployment of
	                        (model, alias), else -ESTALE (someone moved it meanwhile) */
};
/* Records a deployment and moves the alias (and, for a canary rollout, the alias naming the
 * canary: "canary" for production's, ALIAS-canary for another alias's; -EINVAL when that
 * name would be too long).
 * Idempotent per (run, step). The previous active deployment of (model, alias) is retired.
 * *out (may be NULL) receives the deployment as JSON (caller owns). */
int tf_registry_deploy(struct tf_store *st, const struct tf_deploy_spec *d, json_t **out);

/* A canary's rollout policy (the `rollout` of a deployment, docs/serving.md): the canary
 * steps through shares, each held for soak_s seconds with at least min_requests answers
 * within the SLOs, then is promoted; an error rate or p99 over its SLO rolls it back. */
#define TF_ROLLOUT_MAX_STEPS 8
struct tf_rollout {
	double steps[TF_ROLLOUT_MAX_STEPS]; /* the shares (percent) after the first, ascending */
	int nsteps;
	double soak_s;         /* seconds at each share before the next move */
	double max_error_rate; /* failures / requests above which it rolls back (1: no SLO) */
	double max_p99_ms;     /* p99 latency above which it rolls back (0: no SLO) */
	int64_t min_requests;  /* answers of the canary a judgement needs */
	/* the guard against the stable version, on its answers in the same window: */
	double max_error_rate_vs_production; /* the canary's error rate minus its (< 0: none) */
	double max_p99_ratio_vs_production;  /* the canary's p99 over its (0: none) */
	/* the shadow comparison: production also answers shadow_percent of the canary's
	 * requests, and the share of rows whose answers differ (the predicted class, or with
	 * shadow_tolerance > 0 any output by more than it) rolls the canary back above: */
	double max_disagreement_vs_production; /* < 0: no shadow */
	double shadow_percent;                 /* of the canary's requests (default 100) */
	double shadow_tolerance;               /* 0: the predicted class only */
};
/* Reads and checks a policy object {steps, soak_s, max_error_rate, max_p99_ms, min_requests,
 * max_error_rate_vs_production, max_p99_ratio_vs_production, max_disagreement_vs_production,
 * shadow_percent, shadow_tolerance} (every key optional: no steps, no soak, no SLOs, no
 * guard, no shadow, 100 requests). -EINVAL with err naming the key. */
int tf_registry_rollout_parse(const json_t *j, struct tf_rollout *out, char *err, size_t errlen);

/* The active deployment of (model, alias) as {model, alias, version, canary_version,
 * canary_percent, previous_version, created_at, run_id, step, id, rollout, reason, figures};
 * -ENOENT when none. */
int tf_registry_deployment(struct tf_store *st, const char *model, const char *alias, json_t **out);

/* What serving processes have seen of a canary rollout (docs/serving.md, "Several serving
 * processes"): one row per (deployment, server), canary and stable as JSON text
 * (web/serve_rollout.c writes and reads them). tf_registry_figures_put writes this server's
 * row in its own transaction and deletes the rows of deployments no longer active;
 * tf_registry_figures_get gives the other servers' rows of deployment dep_id as [{server,
 * canary, stable, updated_at}] (canary and stable parsed; caller owns *out). */
int tf_registry_figures_put(struct tf_store *st, int64_t dep_id, const char *server,
                            const char *canary, const char *stable, double now);
int tf_registry_figures_get(struct tf_store *st, int64_t dep_id, const char *except_server,
                            json_t **out);

/* Read models (caller owns *out):
 * list: [{name, versions, latest, aliases: {alias: version}, created_at}]
 * show: {name, created_at, aliases, versions: [{version, run_id, step, bundle, checkpoint,
 *        dataset, metrics, params, tags, created_at, aliases: [...]}], deployments: [...]}
 * version: one element of show's versions. */
int tf_registry_list(struct tf_store *st, json_t **out);
int tf_registry_show(struct tf_store *st, const char *model, json_t **out);
int tf_registry_version(struct tf_store *st, const char *model, int64_t version, json_t **out);

#endif

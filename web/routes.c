/* routes.c — owns the route table of the API (method, pattern, scope, handler, schemas; one
 * table drives the router, the authorization check and the OpenAPI document), the scopes,
 * matching a path against the patterns, and the handlers of health, readiness, the OpenAPI
 * document and /metrics. The other handlers are by concern: web/routes_runs.c (runs, events,
 * submitting and acting on runs), web/runview.c (the inside of one run),
 * web/routes_registry.c (pipelines, schedules, models), web/routes_admin.c (slices, queue,
 * chips, tokens, whoami), web/serve.c (model serving).
 *
 * web/http.c routes and authorizes from the table, web/openapi.c documents it. Schemas refer
 * to the components of web/openapi.c.
 */
#include "web/routes_int.h"
#include "web/serve.h"

#include "common/buf.h"
#include "common/common.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- scopes ----------------------------------------------------------------------------- */

static const char *const scope_names[TF_SCOPE_LAST] = {"unset", "public", "read",
                                                       "trigger", "admin", "predict"};

const char *tf_scope_name(enum tf_scope s)
{
	return (unsigned)s < TF_SCOPE_LAST ? scope_names[s] : "?";
}

int tf_scope_parse(const char *name, enum tf_scope *out)
{
	for (int i = TF_SCOPE_READ; name && i < TF_SCOPE_LAST; i++)
		if (!strcmp(name, scope_names[i])) {
			*out = (enum tf_scope)i;
			return 0;
		}
	return -EINVAL;
}

int tf_scope_allows(enum tf_scope have, enum tf_scope need)
{
	if (need == TF_SCOPE_PUBLIC)
		return 1;
	if (need == TF_SCOPE_PREDICT)
		return have == TF_SCOPE_PREDICT || have == TF_SCOPE_ADMIN;
	return have != TF_SCOPE_PREDICT && have >= need && have < TF_SCOPE_LAST;
}


void tf_web_items(struct tf_web_req *rq, struct tf_web_resp *rs, int rc, json_t *items)
{
	if (rc) {
		json_decref(items);
		tf_web_problem_errno(rs, rc, rq->path, tf_store_errmsg(rq->st));
	} else {
		tf_web_json(rs, 200, json_pack("{s:o}", "items", items));
	}
}

/* ---- health ------------------------------------------------------------------------------- */

static void h_healthz(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	(void)rq;
	tf_web_json(rs, 200, json_pack("{s:s}", "status", "ok"));
}

static void h_readyz(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	const struct tf_web_hooks *h = tf_web_hooks(rq->srv);
	int64_t one = 0;
	int db = tf_store_query_int(rq->st, &one, "SELECT 1", "");
	int draining = tf_web_draining(rq->srv);
	int ready = !db && !draining && (!h->ready || h->ready(h->ctx));
	if (!ready) {
		tf_web_problem(rs, 503, rq->path, "%s",
		               db         ? "the state database does not answer"
		               : draining ? "the daemon is draining: it is stopping and takes no new runs"
		                          : "the daemon is not ready");
		rs->retry_after = 1;
		return;
	}
	tf_web_json(rs, 200, json_pack("{s:s, s:b}", "status", "ready", "daemon", h->submit != NULL));
}

static void h_openapi(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	(void)rq;
	tf_web_json(rs, 200, tf_openapi_document());
}

static void h_metrics(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	char *text = NULL;
	size_t len = 0;
	int rc = tf_metrics_render(rq->srv, rq->st, &text, &len);
	if (rc) {
		tf_web_problem_errno(rs, rc, rq->path, tf_store_errmsg(rq->st));
		return;
	}
	rs->status = 200;
	rs->body = text;
	rs->len = len;
	rs->type = "text/plain; version=0.0.4; charset=utf-8";
}

/* ---- the table ---------------------------------------------------------------------------- */

#define REF(x) "{\"$ref\":\"#/components/schemas/" x "\"}"
#define LIST(x) "{\"type\":\"object\",\"required\":[\"items\"],\"properties\":{\"items\":" \
	"{\"type\":\"array\",\"items\":" x "}}}"
#define ANYOBJ "{\"type\":\"object\"}"

const struct tf_route tf_routes[] = {
    {"GET", "/healthz", TF_SCOPE_PUBLIC, h_healthz, 0, "healthz", "Liveness: the process answers",
     NULL, NULL, "{\"type\":\"object\",\"required\":[\"status\"]}", 200, NULL},
    {"GET", "/readyz", TF_SCOPE_PUBLIC, h_readyz, 0, "readyz",
     "Readiness: the database answers and the daemon takes runs", NULL, NULL,
     "{\"type\":\"object\",\"required\":[\"status\"]}", 200, NULL},
    {"GET", "/api/v1/openapi.json", TF_SCOPE_PUBLIC, h_openapi, 0, "openapi",
     "This document", NULL, NULL, ANYOBJ, 200, NULL},
    {"GET", "/", TF_SCOPE_PUBLIC, tf_web_ui, 0, "dashboard",
     "The dashboard's page shell (its data comes from this API with the user's token)", NULL,
     NULL, "{\"type\":\"string\"}", 200, "text/html; charset=utf-8"},
    {"GET", "/ui/app.js", TF_SCOPE_PUBLIC, tf_web_ui, 0, "dashboardScript",
     "The dashboard's script (one bundle)", NULL, NULL, "{\"type\":\"string\"}", 200,
     "text/javascript; charset=utf-8"},
    {"GET", "/ui/app.css", TF_SCOPE_PUBLIC, tf_web_ui, 0, "dashboardStyle",
     "The dashboard's style sheet", NULL, NULL, "{\"type\":\"string\"}", 200,
     "text/css; charset=utf-8"},
    {"GET", "/metrics", TF_SCOPE_READ, h_metrics, TF_ROUTE_SERVE_TOO, "metrics",
     "Prometheus metrics (text format 0.0.4)", NULL, NULL, "{\"type\":\"string\"}", 200,
     "text/plain; version=0.0.4; charset=utf-8"},
    {"GET", "/api/v1/runs", TF_SCOPE_READ, tf_web_runs_list, TF_ROUTE_CACHED, "listRuns",
     "Runs, newest first unless sorted otherwise, one page at a time",
     "sort:string:the order: -created (the default: newest first), created (oldest first), "
     "-duration (longest first), duration (shortest first), the runs that have not ended "
     "after those that have in both, pipeline or -pipeline (by name), state or -state (by "
     "the state's name), ties newest first;"
     "state:string:pending, running, succeeded, failed or interrupted, or orphaned "
     "(running, but the process driving it is gone);"
     "pipeline:string:pipeline name;label:string:KEY=VALUE or KEY;"
     "since:integer:created at or after (Unix seconds);trigger:string:cli, api or schedule;"
     "q:string:text in the run's id, pipeline or error;limit:integer:page size 1-500 "
     "(default 50);cursor:string:where the page starts: the cursor in the previous "
     "answer's next ([SORT:]RUN@KEY, for that sort only, valid even when that run is "
     "deleted), or a run id (the runs after it in the order)",
     NULL, REF("RunPage"), 200, NULL},
    {"POST", "/api/v1/runs", TF_SCOPE_TRIGGER, tf_web_runs_create,
     TF_ROUTE_JSON_BODY | TF_ROUTE_IDEMPOTENT | TF_ROUTE_NEW_RUN, "createRun",
     "Submit a run of a registered pipeline or of inline YAML", NULL, REF("RunRequest"),
     REF("RunCreated"), 201, NULL},
    {"GET", "/api/v1/runs/{id}", TF_SCOPE_READ, tf_web_run_show, 0, "getRun",
     "One run with its steps and attempts", NULL, NULL, REF("Run"), 200, NULL},
    {"GET", "/api/v1/runs/{id}/steps", TF_SCOPE_READ, tf_web_run_steps, 0, "listRunSteps",
     "The steps of a run", NULL, NULL,
     "{\"type\":\"object\",\"required\":[\"run_id\",\"items\"],\"properties\":{\"run_id\":{"
     "\"type\":\"string\"},\"items\":{\"type\":\"array\",\"items\":" REF("Step") "}}}",
     200, NULL},
    {"GET", "/api/v1/runs/{id}/steps/{step}/logs", TF_SCOPE_READ, tf_web_step_logs, TF_ROUTE_STREAM,
     "getStepLogs", "The logs of a step's attempts (follow=true streams until the step ends)",
     "follow:boolean:keep the response open and send each attempt's log as it grows "
     "(a running attempt's from its work directory, then as stored);"
     "offset:integer:start at this byte of the body (the bytes a follower cut off already "
     "has: the body read earlier is a prefix of the body read later)",
     NULL, "{\"type\":\"string\"}", 200, "text/plain; charset=utf-8"},
    {"GET", "/api/v1/runs/{id}/steps/{step}/checkpoints", TF_SCOPE_READ,
     tf_web_step_checkpoints, 0, "listStepCheckpoints",
     "A train step's complete checkpoints in the run's object store, oldest first", NULL,
     NULL, REF("CheckpointList"), 200, NULL},
    {"GET", "/api/v1/runs/{id}/graph", TF_SCOPE_READ, tf_web_run_graph, 0, "getRunGraph",
     "The run's DAG, planned from the pipeline source it ran: steps with needs, level, when",
     NULL, NULL, REF("RunGraph"), 200, NULL},
    {"GET", "/api/v1/runs/{id}/events", TF_SCOPE_READ, tf_web_run_events, TF_ROUTE_STREAM,
     "streamRunEvents",
     "A run's events as Server-Sent Events, ending with an `end` event once the run is final; "
     "resume with Last-Event-ID; with log=STEP, also that step's log as `log` events",
     "after:string:start after this event id (like Last-Event-ID), or 'latest' for events "
     "from now on;log:string:a step's name: its log comes in the stream as `log` events "
     "{step, offset, bytes} (each character of bytes one byte, U+0000-U+00FF), then a "
     "`log-end` event {step, offset} once the log is whole;offset:integer:with log, the "
     "bytes of the log the client has (they are not sent again)", NULL,
     "{\"type\":\"string\"}", 200, "text/event-stream"},
    {"DELETE", "/api/v1/runs/{id}", TF_SCOPE_ADMIN, tf_web_run_delete, 0, "deleteRun",
     "Delete a run as `tpuflow runs delete` does: its rows, logs, checkpoints and outputs; "
     "what a registered model version or another run uses stays (kept_for says who); 409 "
     "while a live process drives it",
     "dry_run:boolean:say what would go, remove nothing", NULL, REF("RunDeleteReport"), 200,
     NULL},
    {"POST", "/api/v1/runs:gc", TF_SCOPE_ADMIN, tf_web_runs_gc, TF_ROUTE_JSON_BODY, "gcRuns",
     "Apply a retention policy as `tpuflow gc` does: the finished runs beyond keep_last (per "
     "pipeline) and older_than, each deleted like deleteRun; a dry run unless apply is true",
     NULL, REF("GcPolicy"),
     "{\"type\":\"object\",\"required\":[\"applied\",\"runs\"],\"properties\":{"
     "\"applied\":{\"type\":\"boolean\"},\"runs\":{\"type\":\"array\",\"items\":"
     REF("RunDeleteReport") "}}}",
     200, NULL},
    {"POST", "/api/v1/runs/{id}:cancel", TF_SCOPE_TRIGGER, tf_web_run_cancel, TF_ROUTE_IDEMPOTENT,
     "cancelRun", "Ask the daemon to cancel a run", NULL, NULL, REF("RunAction"), 202, NULL},
    {"POST", "/api/v1/runs/{id}:retry", TF_SCOPE_TRIGGER, tf_web_run_retry,
     TF_ROUTE_IDEMPOTENT | TF_ROUTE_NEW_RUN, "retryRun",
     "Run the failed steps of a finished run again, in place (the same run id)",
     NULL, NULL, REF("RunAction"), 201, NULL},
    {"POST", "/api/v1/runs/{id}:resume", TF_SCOPE_TRIGGER, tf_web_run_resume,
     TF_ROUTE_IDEMPOTENT | TF_ROUTE_NEW_RUN, "resumeRun", "Continue an interrupted or failed run",
     NULL, NULL, REF("RunAction"), 202, NULL},
    {"GET", "/api/v1/events", TF_SCOPE_READ, tf_web_events, TF_ROUTE_STREAM, "streamEvents",
     "Every run's events as Server-Sent Events, in commit order; resume with Last-Event-ID",
     "after:string:start after this event id (like Last-Event-ID), or 'latest' for events "
     "from now on (no history replayed)", NULL,
     "{\"type\":\"string\"}", 200, "text/event-stream"},
    {"GET", "/api/v1/pipelines", TF_SCOPE_READ, tf_web_pipelines_list, 0, "listPipelines",
     "Pipelines the database knows", NULL, NULL,
     LIST("{\"type\":\"object\",\"required\":[\"name\"]}"), 200, NULL},
    {"GET", "/api/v1/pipelines/{name}", TF_SCOPE_READ, tf_web_pipeline_show, 0, "getPipeline",
     "The registered text of a pipeline, else the newest one a run used, and the params it "
     "declares",
     NULL, NULL,
     "{\"type\":\"object\",\"required\":[\"name\",\"yaml\",\"digest\",\"params\"],"
     "\"properties\":{\"params\":{\"type\":\"array\",\"items\":{\"type\":\"object\","
     "\"required\":[\"name\",\"type\"]}}}}",
     200, NULL},
    {"POST", "/api/v1/pipelines", TF_SCOPE_TRIGGER, tf_web_pipeline_register,
     TF_ROUTE_JSON_BODY | TF_ROUTE_IDEMPOTENT, "registerPipeline",
     "Register (or replace) a pipeline: its text is stored, runs by name and its schedule use "
     "it; 422 with every problem as {file, line, col, message, hint}",
     NULL, REF("PipelineText"), REF("RegisteredPipeline"), 201, NULL},
    {"DELETE", "/api/v1/pipelines/{name}", TF_SCOPE_TRIGGER, tf_web_pipeline_remove, 0,
     "unregisterPipeline", "Unregister a pipeline (its runs and past fires are kept)", NULL,
     NULL, "{\"type\":\"object\",\"required\":[\"name\",\"registered\"]}", 200, NULL},
    {"GET", "/api/v1/schedules", TF_SCOPE_READ, tf_web_schedules_list, 0, "listSchedules",
     "The schedules of registered pipelines with their next fire times and newest fires", NULL,
     NULL, LIST(REF("Schedule")), 200, NULL},
    {"POST", "/api/v1/schedules", TF_SCOPE_TRIGGER, tf_web_schedule_create,
     TF_ROUTE_JSON_BODY | TF_ROUTE_IDEMPOTENT, "createSchedule",
     "Register a pipeline whose text has a `schedule:` block (422 without one)", NULL,
     REF("PipelineText"), REF("Schedule"), 201, NULL},
    {"GET", "/api/v1/schedules/{name}", TF_SCOPE_READ, tf_web_schedule_show, 0, "getSchedule",
     "One registered pipeline's schedule", NULL, NULL, REF("Schedule"), 200, NULL},
    {"DELETE", "/api/v1/schedules/{name}", TF_SCOPE_TRIGGER, tf_web_schedule_delete, 0,
     "deleteSchedule", "Unregister a scheduled pipeline: its schedule stops", NULL, NULL,
     "{\"type\":\"object\",\"required\":[\"name\",\"registered\"]}", 200, NULL},
    {"POST", "/api/v1/schedules/{name}:pause", TF_SCOPE_TRIGGER, tf_web_schedule_pause, 0,
     "pauseSchedule",
     "Pause a schedule: no tick is handled while paused (none fires, none is recorded missed)",
     NULL, NULL, REF("Schedule"), 200, NULL},
    {"POST", "/api/v1/schedules/{name}:resume", TF_SCOPE_TRIGGER, tf_web_schedule_resume, 0,
     "resumeSchedule",
     "Resume a paused schedule from the first tick after now; `passed_over` counts the ticks "
     "of the pause, which are not caught up",
     NULL, NULL, REF("Schedule"), 200, NULL},
    {"POST", "/api/v1/schedules:fire", TF_SCOPE_TRIGGER, tf_web_schedules_fire, TF_ROUTE_NEW_RUN,
     "fireSchedules",
     "Handle the ticks due now (the daemon does this every second): each is fired, skipped "
     "or missed once",
     NULL, NULL, LIST(REF("ScheduleFire")), 200, NULL},
    {"POST", "/api/v1/pipelines:validate", TF_SCOPE_READ, tf_web_pipeline_validate,
     TF_ROUTE_JSON_BODY, "validatePipeline",
     "Check a pipeline file: 200, or 422 with every problem as {file, line, col, message, "
     "hint}",
     NULL,
     "{\"type\":\"object\",\"required\":[\"yaml\"],\"properties\":{\"yaml\":{\"type\":"
     "\"string\"},\"name\":{\"type\":\"string\"}}}",
     "{\"type\":\"object\",\"required\":[\"valid\",\"name\",\"steps\"]}", 200, NULL},
    {"GET", "/api/v1/models", TF_SCOPE_READ, tf_web_models_list, 0, "listModels",
     "Registered models", NULL, NULL, LIST("{\"type\":\"object\",\"required\":[\"name\"]}"),
     200, NULL},
    {"GET", "/api/v1/models/{name}", TF_SCOPE_READ, tf_web_model_show, 0, "getModel",
     "A model's versions, aliases and deployments", NULL, NULL,
     "{\"type\":\"object\",\"required\":[\"name\",\"versions\"]}", 200, NULL},
    {"GET", "/api/v1/models/{name}/versions", TF_SCOPE_READ, tf_web_model_versions, 0,
     "listModelVersions", "A model's versions, oldest first, with their aliases", NULL, NULL,
     "{\"type\":\"object\",\"required\":[\"model\",\"items\"],\"properties\":{\"items\":"
     "{\"type\":\"array\",\"items\":{\"type\":\"object\",\"required\":[\"version\"]}}}}",
     200, NULL},
    {"GET", "/api/v1/models/{name}/versions/{version}", TF_SCOPE_READ, tf_web_model_version, 0,
     "getModelVersion", "One version (a number, v3, latest or an alias)", NULL, NULL,
     "{\"type\":\"object\",\"required\":[\"version\"]}", 200, NULL},
    {"GET", "/api/v1/models/{name}:compare", TF_SCOPE_READ, tf_web_model_compare, 0, "compareModel",
     "Two versions' metrics side by side",
     "a:string:first version (number, vN, latest or alias);b:string:second version", NULL,
     "{\"type\":\"object\",\"required\":[\"a\",\"b\",\"metrics\"]}", 200, NULL},
    {"POST", "/api/v1/models/{name}/aliases", TF_SCOPE_ADMIN, tf_web_model_alias, TF_ROUTE_JSON_BODY,
     "setModelAlias", "Point an alias (e.g. production) at a version", NULL,
     "{\"type\":\"object\",\"required\":[\"alias\",\"version\"],\"properties\":{\"alias\":{"
     "\"type\":\"string\"},\"version\":{\"type\":[\"string\",\"integer\"]}}}",
     "{\"type\":\"object\",\"required\":[\"model\",\"alias\",\"version\"]}", 200, NULL},
    {"GET", "/api/v1/slices", TF_SCOPE_READ, tf_web_slices, 0, "getSlices",
     "The slice pool: each pool's chips (occupancy), running attempts with their boxes, "
     "waiting ones, accounting",
     NULL, NULL,
     "{\"type\":\"object\",\"required\":[\"running\",\"waiting\",\"pools\"],"
     "\"properties\":{\"pools\":{\"type\":\"array\",\"items\":{\"type\":\"object\","
     "\"required\":[\"name\",\"spec\",\"dims\",\"occupancy\"]}}}}",
     200, NULL},
    {"GET", "/api/v1/queue", TF_SCOPE_READ, tf_web_queue, 0, "getQueue",
     "Attempts waiting for a slice, with the reason", NULL, NULL,
     LIST("{\"type\":\"object\"}"), 200, NULL},
    {"POST", "/api/v1/slices/{pool}/chips/{chip}:fail", TF_SCOPE_ADMIN, tf_web_chip_fail, 0,
     "failChip",
     "Mark a chip (x,y,z) of a pool failed: slices on it are reclaimed, nothing is placed on it",
     NULL, NULL, "{\"type\":\"object\",\"required\":[\"pool\",\"chip\",\"state\"]}", 200, NULL},
    {"POST", "/api/v1/slices/{pool}/chips/{chip}:repair", TF_SCOPE_ADMIN, tf_web_chip_repair, 0,
     "repairChip", "Return a failed chip to service", NULL, NULL,
     "{\"type\":\"object\",\"required\":[\"pool\",\"chip\",\"state\"]}", 200, NULL},
    {"GET", "/api/v1/whoami", TF_SCOPE_READ, tf_web_whoami, 0, "whoami",
     "The caller's scope (what the dashboard may offer it)", NULL, NULL,
     "{\"type\":\"object\",\"required\":[\"scope\",\"auth\"],\"properties\":{"
     "\"scope\":{\"enum\":[\"read\",\"trigger\",\"admin\"]},\"auth\":{\"type\":"
     "\"boolean\"},\"token_id\":{\"type\":[\"integer\",\"null\"]}}}",
     200, NULL},
    {"GET", "/api/v1/tokens", TF_SCOPE_ADMIN, tf_web_tokens_list, 0, "listTokens",
     "API tokens (never their secret)", NULL, NULL, LIST(REF("Token")), 200, NULL},
    {"POST", "/api/v1/tokens", TF_SCOPE_ADMIN, tf_web_tokens_create, TF_ROUTE_JSON_BODY,
     "createToken", "Make a token; the response is the only time its secret is shown", NULL,
     "{\"type\":\"object\",\"required\":[\"name\",\"scope\"],\"properties\":{\"name\":{"
     "\"type\":\"string\"},\"scope\":{\"enum\":[\"read\",\"trigger\",\"admin\",\"predict\"]},"
     "\"expires_in\":{\"type\":\"string\"}}}",
     REF("Token"), 201, NULL},
    {"DELETE", "/api/v1/tokens/{id}", TF_SCOPE_ADMIN, tf_web_token_revoke, 0, "revokeToken",
     "Revoke a token (by id, name or prefix)", NULL, NULL, REF("Token"), 200, NULL},
    TF_SERVE_ROUTES, /* model serving: web/serve.h */
};
const size_t tf_nroutes = TF_ARRAY_LEN(tf_routes);

/* ---- matching ----------------------------------------------------------------------------- */

static int hexval(int c)
{
	return c >= '0' && c <= '9' ? c - '0'
	       : c >= 'a' && c <= 'f' ? c - 'a' + 10
	       : c >= 'A' && c <= 'F' ? c - 'A' + 10
	                              : -1;
}

/* Percent-decodes n bytes of s into a new string; NULL when malformed or decoding to NUL. */
static char *decode(const char *s, size_t n)
{
	char *o = tf_xmalloc(n + 1);
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		int c = (unsigned char)s[i];
		if (c == '%') {
			int a = i + 2 < n ? hexval(s[i + 1]) : -1, b = i + 2 < n ? hexval(s[i + 2]) : -1;
			if (a < 0 || b < 0 || (a == 0 && b == 0)) {
				free(o);
				return NULL;
			}
			c = a * 16 + b;
			i += 2;
		}
		o[k++] = (char)c;
	}
	o[k] = 0;
	return o;
}

void tf_route_release_params(struct tf_web_req *rq)
{
	for (int i = 0; i < rq->nparams; i++)
		free(rq->pvals[i]);
	rq->nparams = 0;
}

int tf_route_match(const char *pattern, const char *path, struct tf_web_req *rq)
{
	tf_route_release_params(rq);
	const char *p = pattern, *u = path;
	while (*p) {
		if (*p == '{') {
			const char *close = strchr(p, '}');
			if (!close || rq->nparams == TF_WEB_MAX_PARAMS)
				goto fail;
			/* A value is one path segment up to a custom verb: no '/' and no ':'. */
			const char *e = u;
			while (*e && *e != '/' && *e != ':')
				e++;
			if (e == u)
				goto fail;
			char *val = decode(u, (size_t)(e - u));
			if (!val)
				goto fail;
			size_t nl = (size_t)(close - p - 1);
			if (nl >= sizeof(rq->pnames[0])) {
				free(val);
				goto fail;
			}
			memcpy(rq->pnames[rq->nparams], p + 1, nl);
			rq->pnames[rq->nparams][nl] = 0;
			rq->pvals[rq->nparams++] = val;
			p = close + 1;
			u = e;
			continue;
		}
		if (*p != *u)
			goto fail;
		p++;
		u++;
	}
	if (*u)
		goto fail;
	return 1;
fail:
	tf_route_release_params(rq);
	return 0;
}

const struct tf_route *tf_route_find(const char *method, const char *path,
                                     struct tf_web_req *rq, char **allow)
{
	*allow = NULL;
	char methods[64] = "";
	const struct tf_route *hit = NULL;
	for (size_t i = 0; i < tf_nroutes; i++) {
		if (!tf_route_match(tf_routes[i].pattern, path, rq))
			continue;
		if (!strcmp(tf_routes[i].method, method) ||
		    (!strcmp(method, "HEAD") && !strcmp(tf_routes[i].method, "GET") &&
		     !(tf_routes[i].flags & TF_ROUTE_STREAM))) {
			hit = &tf_routes[i];
			break;
		}
		if (!strstr(methods, tf_routes[i].method)) {
			size_t n = strlen(methods);
			/* HEAD goes with a GET that is not a stream (RFC 9110 9.3.2) */
			int head = !strcmp(tf_routes[i].method, "GET") &&
			           !(tf_routes[i].flags & TF_ROUTE_STREAM);
			snprintf(methods + n, sizeof(methods) - n, "%s%s%s", n ? ", " : "",
			         tf_routes[i].method, head ? ", HEAD" : "");
		}
		tf_route_release_params(rq);
	}
	if (!hit && *methods)
		*allow = tf_xasprintf("%s, OPTIONS", methods);
	return hit;
}

int tf_routes_check(char *err, size_t errlen)
{
	for (size_t i = 0; i < tf_nroutes; i++) {
		const struct tf_route *r = &tf_routes[i];
		if (r->scope <= TF_SCOPE_UNSET || r->scope >= TF_SCOPE_LAST) {
			tf_errf(err, errlen, "route %s %s has no scope: refusing to start", r->method,
			        r->pattern);
			return -EINVAL;
		}
		const char *schemas[2] = {r->req, r->resp};
		for (int k = 0; k < 2; k++) {
			json_t *j = schemas[k] ? json_loads(schemas[k], 0, NULL) : NULL;
			if (schemas[k] && !json_is_object(j)) {
				json_decref(j);
				tf_errf(err, errlen, "route %s %s has a schema that is not a JSON object",
				        r->method, r->pattern);
				return -EINVAL;
			}
			json_decref(j);
		}
	}
	return 0;
}

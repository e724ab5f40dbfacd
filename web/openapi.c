/* openapi.c — owns the OpenAPI 3.1 document of the API, built from the route table of
 * web/routes.c (paths, parameters, scopes, request and response schemas) plus the shared
 * component schemas below. */
#include "web/api.h"

#include "common/common.h"

#include <stdlib.h>
#include <string.h>

/* Shared schemas the table refers to with #/components/schemas/NAME. */
static const char components[] =
    "{"
    "\"Problem\":{\"type\":\"object\",\"required\":[\"type\",\"title\",\"status\"],"
    " \"description\":\"RFC 9457 problem details\",\"properties\":{"
    "  \"type\":{\"type\":\"string\"},\"title\":{\"type\":\"string\"},"
    "  \"status\":{\"type\":\"integer\"},\"detail\":{\"type\":\"string\"},"
    "  \"instance\":{\"type\":\"string\"},"
    "  \"error\":{\"type\":\"string\",\"description\":\"the detail again, on the serving "
    "routes (/v1/models, /v2), whose clients read errors as {error}\"},"
    "  \"errors\":{\"type\":\"array\",\"items\":{\"type\":\"object\","
    "   \"required\":[\"file\",\"line\",\"col\",\"message\"],\"properties\":{"
    "   \"file\":{\"type\":\"string\"},\"line\":{\"type\":\"integer\"},"
    "   \"col\":{\"type\":\"integer\"},\"message\":{\"type\":\"string\"},"
    "   \"hint\":{\"type\":\"string\"},\"severity\":{\"enum\":[\"error\",\"warning\"]}}}}}},"
    "\"RunState\":{\"enum\":[\"pending\",\"running\",\"succeeded\",\"failed\","
    " \"interrupted\"]},"
    "\"RunSummary\":{\"type\":\"object\",\"required\":[\"id\",\"pipeline\",\"state\","
    " \"created_at\",\"steps\",\"done\",\"trigger\"],\"properties\":{"
    "  \"id\":{\"type\":\"string\"},\"pipeline\":{\"type\":\"string\"},"
    "  \"state\":{\"$ref\":\"#/components/schemas/RunState\"},"
    "  \"created_at\":{\"type\":\"number\"},\"started_at\":{\"type\":[\"number\",\"null\"]},"
    "  \"finished_at\":{\"type\":[\"number\",\"null\"]},\"steps\":{\"type\":\"integer\"},"
    "  \"done\":{\"type\":\"integer\",\"description\":\"steps succeeded or cached\"},"
    "  \"skipped\":{\"type\":\"integer\",\"description\":\"steps skipped by a gate or a "
    "need\"},\"orphaned\":{\"type\":\"boolean\",\"description\":\"running, but the "
    "process driving it is gone: runs resume continues it\"},"
    "  \"error\":{\"type\":[\"string\",\"null\"]},"
    "  \"duration\":{\"type\":[\"number\",\"null\"],\"description\":\"seconds from "
    "its start to its end, or to now while it runs; null before it starts\"},"
    "  \"labels\":{\"type\":\"object\",\"additionalProperties\":{\"type\":\"string\"}},"
    "  \"trigger\":{\"$ref\":\"#/components/schemas/Trigger\"}}},"
    "\"Trigger\":{\"enum\":[\"cli\",\"api\",\"schedule\"],"
    " \"description\":\"how the run was submitted\"},"
    "\"RunPage\":{\"type\":\"object\",\"required\":[\"items\",\"total\",\"total_exact\","
    "\"next\"],"
    " \"properties\":{"
    "  \"items\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/components/schemas/RunSummary\"}},"
    "  \"total\":{\"type\":\"integer\",\"description\":\"the runs the filters select, on "
    "every page (the cursor aside), counted up to 1,000: when total_exact is false, more "
    "runs than this match\"},"
    "  \"total_exact\":{\"type\":\"boolean\",\"description\":\"true when total is the "
    "count of every run the filters select; false when the count stopped at total (1,000)\"},"
    "  \"next\":{\"type\":[\"string\",\"null\"],\"description\":\"the next page, null at the "
    "end\"}}},"
    "\"Step\":{\"type\":\"object\",\"required\":[\"name\",\"type\",\"state\",\"attempts\"],"
    " \"properties\":{\"name\":{\"type\":\"string\"},\"type\":{\"type\":\"string\"},"
    "  \"state\":{\"enum\":[\"pending\",\"running\",\"retrying\",\"succeeded\",\"cached\","
    "   \"skipped\",\"failed\"]},\"attempts\":{\"type\":\"integer\"},"
    "  \"attempts_detail\":{\"type\":\"array\",\"items\":{\"$ref\":"
    "   \"#/components/schemas/Attempt\"}}}},"
    "\"Attempt\":{\"type\":\"object\",\"required\":[\"n\",\"state\"],\"properties\":{"
    "  \"n\":{\"type\":\"integer\"},\"state\":{\"type\":\"string\"},"
    "  \"failure_class\":{\"type\":[\"string\",\"null\"]},"
    "  \"exit_code\":{\"type\":[\"integer\",\"null\"]},"
    "  \"started_at\":{\"type\":[\"number\",\"null\"]},"
    "  \"finished_at\":{\"type\":[\"number\",\"null\"]},"
    "  \"slurm_job\":{\"type\":\"integer\",\"description\":\"executor: slurm only: the "
    "Slurm job id\"},\"slurm_nodes\":{\"type\":[\"string\",\"null\"],\"description\":"
    "  \"the nodes it ran on, as Slurm writes them (null while pending)\"},"
    "  \"slurm_state\":{\"type\":[\"string\",\"null\"],\"description\":\"Slurm's state of "
    "the job as last seen: PENDING, RUNNING, COMPLETED, TIMEOUT...\"}}},"
    "\"Run\":{\"type\":\"object\",\"required\":[\"id\",\"pipeline\",\"state\",\"trigger\","
    " \"steps\"],\"properties\":{\"id\":{\"type\":\"string\"},\"pipeline\":{\"type\":\"string\"},"
    "  \"state\":{\"$ref\":\"#/components/schemas/RunState\"},"
    "  \"trigger\":{\"$ref\":\"#/components/schemas/Trigger\"},"
    "  \"orphaned\":{\"type\":\"boolean\",\"description\":\"running, but the process "
    "driving it is gone: the daemon takes it up, or runs resume continues it\"},"
    "  \"priority\":{\"type\":[\"integer\",\"null\"]},"
    "  \"project\":{\"type\":[\"string\",\"null\"]},"
    "  \"labels\":{\"type\":\"object\",\"additionalProperties\":{\"type\":\"string\"}},"
    "  \"selection\":{\"type\":[\"object\",\"null\"],\"description\":\"run --only/--from:"
    " {only: [steps]} or {from: step}\",\"properties\":{\"only\":{\"type\":\"array\","
    "   \"items\":{\"type\":\"string\"}},\"from\":{\"type\":\"string\"}}},"
    "  \"cancelled_at\":{\"type\":[\"number\",\"null\"],\"description\":\"when its "
    "owner took a cancel\"},"
    "  \"param_values\":{\"type\":\"array\",\"description\":\"every param with the value "
    "the run used (absent when its pipeline no longer loads)\",\"items\":{\"type\":"
    "\"object\",\"required\":[\"name\",\"source\"],\"properties\":{\"name\":{\"type\":"
    "\"string\"},\"value\":{},\"text\":{\"type\":[\"string\",\"null\"]},\"source\":"
    "{\"enum\":[\"param\",\"default\"]}}}},"
    "  \"steps\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/components/schemas/Step\"}}}},"
    "\"RunGraph\":{\"type\":\"object\",\"required\":[\"run_id\",\"name\",\"levels\","
    " \"steps\"],\"properties\":{\"run_id\":{\"type\":\"string\"},\"name\":{\"type\":"
    " \"string\"},\"params\":{\"type\":\"object\"},\"levels\":{\"type\":\"array\","
    " \"items\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}}},"
    "  \"steps\":{\"type\":\"array\",\"items\":{\"type\":\"object\",\"required\":[\"name\","
    "   \"type\",\"level\",\"needs\"],\"properties\":{\"name\":{\"type\":\"string\"},"
    "   \"type\":{\"type\":\"string\"},\"level\":{\"type\":\"integer\"},"
    "   \"needs\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}},"
    "   \"when\":{\"type\":\"string\"},\"retries\":{\"type\":\"integer\"}}}}}},"
    "\"CheckpointList\":{\"type\":\"object\",\"required\":[\"run_id\",\"prefix\","
    " \"items\"],\"properties\":{\"run_id\":{\"type\":\"string\"},\"prefix\":{\"type\":"
    " \"string\"},\"items\":{\"type\":\"array\",\"items\":{\"type\":\"object\","
    "  \"required\":[\"step\",\"created_at\",\"tensors\",\"bytes\"],\"properties\":{"
    "  \"step\":{\"type\":\"integer\"},\"created_at\":{\"type\":\"number\"},"
    "  \"tensors\":{\"type\":\"integer\"},\"bytes\":{\"type\":\"integer\"}}}}}},"
    "\"RunRequest\":{\"type\":\"object\",\"additionalProperties\":false,"
    " \"oneOf\":[{\"required\":[\"pipeline\"]},{\"required\":[\"yaml\"]}],\"properties\":{"
    "  \"pipeline\":{\"type\":\"string\",\"description\":\"a registered pipeline's name\"},"
    "  \"yaml\":{\"type\":\"string\",\"description\":\"the pipeline file's text\"},"
    "  \"params\":{\"type\":\"object\",\"additionalProperties\":"
    "   {\"type\":[\"string\",\"number\",\"boolean\"]}},"
    "  \"priority\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":9},"
    "  \"project\":{\"type\":\"string\"},"
    "  \"labels\":{\"type\":\"object\",\"additionalProperties\":"
    "   {\"type\":[\"string\",\"number\",\"boolean\"]}}}},"
    "\"RunCreated\":{\"type\":\"object\",\"required\":[\"id\",\"state\",\"events\"],"
    " \"properties\":{\"id\":{\"type\":\"string\"},\"state\":{\"const\":\"pending\"},"
    "  \"labels\":{\"type\":\"object\"},\"events\":{\"type\":\"string\"}}},"
    "\"RunDeleteReport\":{\"type\":\"object\",\"required\":[\"run\",\"deleted\","
    "  \"objects\",\"bytes\",\"kept\",\"kept_for\"],\"properties\":{"
    "  \"run\":{\"type\":\"string\"},"
    "  \"deleted\":{\"type\":\"boolean\",\"description\":\"false in a dry run\"},"
    "  \"error\":{\"type\":[\"string\",\"null\"],"
    "   \"description\":\"why it was not deleted (gc); null when nothing went wrong\"},"
    "  \"reason\":{\"enum\":[\"not_found\",\"busy\",\"unavailable\",\"failed\",null],"
    "   \"description\":\"the error in a word: busy is a live or pending run, unavailable "
    "a store that did not answer\"},"
    "  \"objects\":{\"type\":\"integer\",\"description\":\"objects removed\"},"
    "  \"bytes\":{\"type\":\"integer\"},"
    "  \"kept\":{\"type\":\"integer\",\"description\":\"objects kept: still used\"},"
    "  \"kept_for\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}}}},"
    "\"RunDeleteRefusal\":{\"description\":\"a problem that carries the run's delete report: "
    "what was removed before the delete stopped\",\"allOf\":[{\"$ref\":"
    "\"#/components/schemas/Problem\"},{\"$ref\":\"#/components/schemas/RunDeleteReport\"}]},"
    "\"GcPolicy\":{\"type\":\"object\",\"additionalProperties\":false,\"properties\":{"
    "  \"keep_last\":{\"type\":\"integer\",\"minimum\":0,"
    "   \"description\":\"keep the newest N runs of each pipeline\"},"
    "  \"older_than\":{\"type\":\"string\",\"description\":\"an age: 30d, 12h, 90m\"},"
    "  \"pipeline\":{\"type\":\"string\"},"
    "  \"apply\":{\"type\":\"boolean\",\"description\":\"remove (default: dry run)\"}}},"
    "\"RunAction\":{\"type\":\"object\",\"required\":[\"id\",\"action\"],\"properties\":{"
    "  \"id\":{\"type\":\"string\"},\"action\":{\"enum\":[\"cancel\",\"retry\",\"resume\"]},"
    "  \"of\":{\"type\":\"string\"},\"state\":{\"allOf\":[{\"$ref\":"
    "\"#/components/schemas/RunState\"}],\"description\":\"cancel: the run's state once "
    "the cancel is taken (a final one: nothing was left to stop)\"}}},"
    "\"PipelineText\":{\"type\":\"object\",\"required\":[\"yaml\"],"
    " \"additionalProperties\":false,\"properties\":{"
    "  \"yaml\":{\"type\":\"string\",\"description\":\"the pipeline file's text\"},"
    "  \"name\":{\"type\":\"string\",\"description\":\"the file name used in diagnostics\"}}},"
    "\"ScheduleSpec\":{\"type\":\"object\",\"required\":[\"cron\",\"timezone\","
    " \"concurrency\",\"catchup\",\"next\"],\"properties\":{"
    "  \"cron\":{\"type\":\"string\"},\"timezone\":{\"type\":\"string\"},"
    "  \"concurrency\":{\"enum\":[\"allow\",\"forbid\",\"replace\"]},"
    "  \"catchup\":{\"enum\":[\"none\",\"latest\",\"all\"]},"
    "  \"catchup_max\":{\"type\":\"integer\"},\"starting_deadline\":{\"type\":\"number\"},"
    "  \"next\":{\"type\":\"array\",\"items\":{\"type\":\"integer\"},"
    "   \"description\":\"the next fire times (Unix seconds); empty while paused\"},"
    "  \"paused\":{\"type\":\"boolean\",\"description\":\"a paused schedule handles no "
    "tick (none fires, none is recorded missed)\"},"
    "  \"paused_at\":{\"type\":[\"number\",\"null\"]}}},"
    "\"RegisteredPipeline\":{\"type\":\"object\",\"required\":[\"name\",\"digest\","
    " \"added_at\",\"schedule\"],\"properties\":{\"name\":{\"type\":\"string\"},"
    "  \"path\":{\"type\":\"string\"},\"digest\":{\"type\":\"string\"},"
    "  \"added_at\":{\"type\":\"number\"},\"schedule\":{\"oneOf\":[{\"type\":\"null\"},"
    "   {\"$ref\":\"#/components/schemas/ScheduleSpec\"}]}}},"
    "\"ScheduleFire\":{\"type\":\"object\",\"required\":[\"tick\",\"outcome\"],"
    " \"properties\":{\"pipeline\":{\"type\":\"string\"},\"tick\":{\"type\":\"integer\"},"
    "  \"outcome\":{\"enum\":[\"fired\",\"skipped\",\"missed\"]},"
    "  \"run\":{\"type\":[\"string\",\"null\"]},\"reason\":{\"type\":[\"string\",\"null\"]},"
    "  \"fire_key\":{\"type\":\"string\"},\"at\":{\"type\":\"number\"}}},"
    "\"Schedule\":{\"allOf\":[{\"$ref\":\"#/components/schemas/ScheduleSpec\"},"
    " {\"type\":\"object\",\"required\":[\"pipeline\",\"digest\",\"fires\"],\"properties\":{"
    "  \"pipeline\":{\"type\":\"string\"},\"digest\":{\"type\":\"string\"},"
    "  \"fires\":{\"type\":\"array\",\"description\":\"the newest five ticks handled\","
    "   \"items\":{\"$ref\":\"#/components/schemas/ScheduleFire\"}}}}]},"
    "\"Token\":{\"type\":\"object\",\"required\":[\"id\",\"name\",\"prefix\",\"scope\","
    " \"created_at\"],\"properties\":{\"id\":{\"type\":\"integer\"},"
    "  \"name\":{\"type\":\"string\"},\"prefix\":{\"type\":\"string\"},"
    "  \"scope\":{\"enum\":[\"read\",\"trigger\",\"admin\",\"predict\"]},"
    "  \"created_at\":{\"type\":\"number\"},\"expires_at\":{\"type\":[\"number\",\"null\"]},"
    "  \"revoked_at\":{\"type\":[\"number\",\"null\"]},"
    "  \"last_used_at\":{\"type\":[\"number\",\"null\"]},"
    "  \"token\":{\"type\":\"string\",\"description\":\"the secret, only when created\"}}}"
    "}";

#define SERVING_ERROR                                                                      \
	"{\"type\":\"object\",\"required\":[\"error\"],\"properties\":{\"error\":{"         \
	"\"type\":\"string\"}}}"

static json_t *problem_response(const char *why)
{
	return json_pack("{s:s, s:{s:{s:{s:s}}}}", "description", why, "content",
	                 "application/problem+json", "schema", "$ref",
	                 "#/components/schemas/Problem");
}

/* Error answers of an operation that carry more than a plain problem. */
static const struct {
	const char *op, *status, *schema, *why;
} special_errors[] = {
    {"deleteRun", "409", "RunDeleteRefusal",
     "a live process drives the run, or it is pending (with the run's report, reason busy); "
     "or the id prefix names several runs (a plain problem)"},
    {"deleteRun", "503", "RunDeleteRefusal",
     "its object store does not answer (with the run's report, reason unavailable: the run "
     "stays, a second call finishes it); or the database does not (a plain problem)"},
};

static json_t *operation(const struct tf_route *r)
{
	json_t *op = json_pack("{s:s, s:s, s:[s]}", "operationId", r->op, "summary", r->summary,
	                       "tags", r->flags & TF_ROUTE_SERVING         ? "serving"
	                               : strncmp(r->pattern, "/api/v1/", 8) ? "service"
	                                                                    : "api");
	json_t *params = json_array();
	for (const char *p = strchr(r->pattern, '{'); p; p = strchr(p + 1, '{')) {
		const char *e = strchr(p, '}');
		char name[32];
		snprintf(name, sizeof(name), "%.*s", (int)(e - p - 1), p + 1);
		json_array_append_new(params, json_pack("{s:s, s:s, s:b, s:{s:s}}", "name", name, "in",
		                                        "path", "required", 1, "schema", "type",
		                                        "string"));
	}
	for (const char *q = r->query; q && *q;) { /* "name:type:description;..." */
		const char *c1 = strchr(q, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
		const char *end = q + strcspn(q, ";");
		if (!c1 || !c2 || c2 > end)
			break;
		char *name = tf_xasprintf("%.*s", (int)(c1 - q), q);
		char *type = tf_xasprintf("%.*s", (int)(c2 - c1 - 1), c1 + 1);
		char *desc = tf_xasprintf("%.*s", (int)(end - c2 - 1), c2 + 1);
		json_array_append_new(params, json_pack("{s:s, s:s, s:s, s:{s:s}}", "name", name, "in",
		                                        "query", "description", desc, "schema",
		                                        "type", type));
		free(name);
		free(type);
		free(desc);
		q = *end ? end + 1 : end;
	}
	if (r->flags & TF_ROUTE_IDEMPOTENT)
		json_array_append_new(
		    params,
		    json_pack("{s:s, s:s, s:s, s:{s:s, s:i}}", "name", "Idempotency-Key", "in",
		              "header", "description",
		              "the same key with the same body within 24 h replays the first "
		              "response (Idempotent-Replayed: true); with another body: 422",
		              "schema", "type", "string", "maxLength", 255));
	if (r->flags & TF_ROUTE_STREAM && strstr(r->pattern, "events"))
		json_array_append_new(params,
		                      json_pack("{s:s, s:s, s:{s:s}}", "name", "Last-Event-ID", "in",
		                                "header", "schema", "type", "string"));
	if (json_array_size(params))
		json_object_set_new(op, "parameters", params);
	else
		json_decref(params);
	if (r->req)
		json_object_set_new(op, "requestBody",
		                    json_pack("{s:b, s:{s:{s:o}}}", "required", 1, "content",
		                              "application/json", "schema",
		                              json_loads(r->req, 0, NULL)));
	char code[8];
	snprintf(code, sizeof(code), "%d", r->ok);
	json_t *responses = json_object();
	json_object_set_new(responses, code,
	                    json_pack("{s:s, s:{s:{s:o}}}", "description", r->summary, "content",
	                              r->resp_type ? r->resp_type : "application/json", "schema",
	                              json_loads(r->resp, 0, NULL)));
	if (r->scope != TF_SCOPE_PUBLIC) {
		json_object_set_new(responses, "401",
		                    problem_response("no token, or an unknown, revoked or expired one"));
		json_object_set_new(responses, "403", problem_response("the token's scope is too low"));
		json_object_set_new(responses, "429",
		                    problem_response("over the token's rate limit (Retry-After)"));
	}
	if (r->flags & TF_ROUTE_NEW_RUN)
		json_object_set_new(responses, "503",
		                    problem_response("the daemon is draining (stopping) and starts no "
		                                     "new runs; nothing was done (Retry-After)"));
	for (size_t i = 0; i < TF_ARRAY_LEN(special_errors); i++) {
		if (strcmp(special_errors[i].op, r->op))
			continue;
		char *ref = tf_xasprintf("#/components/schemas/%s", special_errors[i].schema);
		json_object_set_new(responses, special_errors[i].status,
		                    json_pack("{s:s, s:{s:{s:{s:[{s:s}, {s:s}]}}}}", "description",
		                              special_errors[i].why, "content",
		                              "application/problem+json", "schema", "anyOf", "$ref",
		                              ref, "$ref", "#/components/schemas/Problem"));
		free(ref);
	}
	json_object_set_new(responses, "default",
	                    r->flags & TF_ROUTE_SERVING
	                        ? json_pack("{s:s, s:{s:{s:o}}}", "description",
	                                    "any other error, as TensorFlow Serving answers it",
	                                    "content", "application/json", "schema",
	                                    json_loads(SERVING_ERROR, 0, NULL))
	                        : problem_response("any other error"));
	json_object_set_new(op, "responses", responses);
	json_object_set_new(op, "security",
	                    r->scope == TF_SCOPE_PUBLIC
	                        ? json_array()
	                        : json_pack("[{s:[]}]", "bearer"));
	json_object_set_new(op, "x-tpuflow-scope", json_string(tf_scope_name(r->scope)));
	return op;
}

json_t *tf_openapi_document(void)
{
	json_t *paths = json_object();
	for (size_t i = 0; i < tf_nroutes; i++) {
		const struct tf_route *r = &tf_routes[i];
		json_t *item = json_object_get(paths, r->pattern);
		if (!item) {
			item = json_object();
			json_object_set_new(paths, r->pattern, item);
		}
		char m[8];
		size_t k = 0;
		for (; k < sizeof(m) - 1 && r->method[k]; k++)
			m[k] = (char)(r->method[k] | 0x20);
		m[k] = 0;
		json_object_set_new(item, m, operation(r));
	}
	json_t *doc = json_pack(
	    "{s:s, s:{s:s, s:s, s:s}, s:[{s:s}], s:o, s:{s:o, s:{s:{s:s, s:s, s:s}}},"
	    " s:[{s:[]}], s:[{s:s, s:s}, {s:s, s:s}, {s:s, s:s}]}",
	    "openapi", "3.1.0", "info", "title", "tpuflow API", "version", TF_VERSION,
	    "description",
	    "Trigger, watch and manage tpuflow pipeline runs. Errors are RFC 9457 problem details; "
	    "scopes are read < trigger < admin (predict for model serving).",
	    "servers", "url", "/", "paths", paths,
	    "components", "schemas", json_loads(components, 0, NULL), "securitySchemes", "bearer",
	    "type", "http", "scheme", "bearer", "description",
	    "a tpf_ token from `tpuflow tokens create`", "security", "bearer", "tags", "name", "api",
	    "description", "the REST API", "name", "service", "description",
	    "health, readiness and metrics", "name", "serving", "description",
	    "model serving: TensorFlow Serving REST (/v1) and the Open Inference Protocol (/v2)");
	return doc;
}

/* serve.h — inside the web/ folder: model serving. The registry's versions answer predictions
 * over TensorFlow Serving's REST API (/v1/models/...) and the Open Inference Protocol (KServe
 * v2, /v2/...), from a cache of verified bundles (docs/serving.md).
 *
 * Which version answers: /versions/{v} names one, /labels/{alias} resolves an alias, and a
 * bare model name is its "production" alias (what the deploy step moves), except for the
 * canary share of the named alias's deployment (sticky per X-Request-Key). A bundle is fetched
 * from the state home's object store once, verified (checksums, tensor shapes) and kept in
 * memory, shared by reference: a request holds its version until it has answered, so moving an
 * alias or evicting a version never fails a request in flight. A version that cannot be loaded
 * is UNAVAILABLE with its reason (tried again after a while) and does not affect the others.
 */
#ifndef TF_WEB_SERVE_H
#define TF_WEB_SERVE_H

#include "web/api.h"

#include <stddef.h>
#include <stdio.h>

#define TF_SERVE_MAX_BATCH 1024 /* default instances per request */
#define TF_SERVE_CACHE 16       /* loaded versions kept (least recently used evicted) */
#define TF_SERVE_RETRY 10.0     /* seconds before an unloadable version is tried again */
#define TF_SERVE_SHADOW_QUEUE 256 /* shadow comparisons waiting for the comparison thread */

struct tf_serve;

/* A serving cache over the state home `home` (the object store of tf_objstore_home_url).
 * only_model (may be NULL) restricts serving to one model; max_batch 0 takes the default.
 * Never fails (allocation failure aborts). */
struct tf_serve *tf_serve_new(const char *home, const char *only_model, size_t max_batch);
/* Frees the cache; no request may be running. NULL is a no-op. */
void tf_serve_free(struct tf_serve *sv);
/* Loads the versions the aliases of `model` point at (a serving host's warm start); returns
 * how many are AVAILABLE, or -ENOENT for an unknown model (message in err). */
int tf_serve_warm(struct tf_serve *sv, struct tf_store *st, const char *model, char *err,
                  size_t errlen);

/* The rollout policies of the canaries this server has answered for (docs/serving.md): each
 * canary's and its stable version's figures since the deployment began, this server's and
 * those the other serving processes shared through st (this server's own are shared about
 * once a second), are judged against its policy, and a deployment that must move (a
 * rollback, the next share, a promotion) is moved in the registry through st with a
 * compare-and-set, with the reason and the figures. Called every few hundred ms by the
 * server's watcher thread (web/http.c), one call at a time. */
void tf_serve_tick(struct tf_serve *sv, struct tf_store *st);

/* The per-version figures of the prediction routes as Prometheus text families (web/metrics.c
 * writes them into /metrics): tpuflow_serving_requests_total, _errors_total, _failures_total
 * and the tpuflow_serving_request_duration_seconds histogram, labelled model and version. */
void tf_serve_metrics(struct tf_serve *sv, FILE *f);

/* The handlers (route rows below). */
void tf_serve_h_predict(struct tf_web_req *rq, struct tf_web_resp *rs);
void tf_serve_h_status(struct tf_web_req *rq, struct tf_web_resp *rs);
void tf_serve_h_metadata(struct tf_web_req *rq, struct tf_web_resp *rs);
void tf_serve_h_server(struct tf_web_req *rq, struct tf_web_resp *rs);
void tf_serve_h_live(struct tf_web_req *rq, struct tf_web_resp *rs);
void tf_serve_h_ready(struct tf_web_req *rq, struct tf_web_resp *rs);
void tf_serve_h_v2_model(struct tf_web_req *rq, struct tf_web_resp *rs);
void tf_serve_h_v2_model_ready(struct tf_web_req *rq, struct tf_web_resp *rs);
void tf_serve_h_infer(struct tf_web_req *rq, struct tf_web_resp *rs);

/* Schemas of the serving routes' bodies (OpenAPI). */
#define TF_SERVE_ANY "{\"type\":\"object\"}"
#define TF_SERVE_PREDICT_REQ                                                                       \
	"{\"type\":\"object\",\"properties\":{\"signature_name\":{\"type\":\"string\"},"           \
	"\"instances\":{\"type\":\"array\"},\"inputs\":{}}}"
#define TF_SERVE_PREDICT_RESP                                                                      \
	"{\"type\":\"object\",\"properties\":{\"predictions\":{\"type\":\"array\"},"               \
	"\"outputs\":{\"type\":\"array\"}}}"
#define TF_SERVE_STATUS_RESP                                                                       \
	"{\"type\":\"object\",\"required\":[\"model_version_status\"],\"properties\":{"            \
	"\"model_version_status\":{\"type\":\"array\",\"items\":{\"type\":\"object\","             \
	"\"required\":[\"version\",\"state\",\"status\"],\"properties\":{\"version\":{\"type\":"   \
	"\"string\"},\"state\":{\"enum\":[\"LOADING\",\"AVAILABLE\",\"END\"]},"                    \
	"\"status\":{\"type\":\"object\"}}}}}}"
#define TF_SERVE_INFER_REQ                                                                         \
	"{\"type\":\"object\",\"required\":[\"inputs\"],\"properties\":{\"id\":{\"type\":"         \
	"\"string\"},\"parameters\":{\"type\":\"object\"},\"inputs\":{\"type\":\"array\","            \
	"\"items\":{\"type\":\"object\",\"required\":[\"name\",\"shape\",\"datatype\",\"data\"]}},"    \
	"\"outputs\":{\"type\":\"array\",\"items\":{\"type\":\"object\",\"required\":[\"name\"]}}}}"
#define TF_SERVE_INFER_RESP                                                                        \
	"{\"type\":\"object\",\"required\":[\"model_name\",\"outputs\"],\"properties\":{"          \
	"\"model_name\":{\"type\":\"string\"},\"model_version\":{\"type\":\"string\"},"            \
	"\"outputs\":{\"type\":\"array\"}}}"
#define TF_SERVE_READY_RESP "{\"type\":\"object\",\"required\":[\"ready\"]}"
#define TF_SERVE_LIVE_RESP "{\"type\":\"object\",\"required\":[\"live\"]}"
#define TF_SERVE_SERVER_RESP                                                                       \
	"{\"type\":\"object\",\"required\":[\"name\",\"version\",\"extensions\"]}"

/* The serving rows of the route table (web/routes.c): each answers 200, takes no query
 * parameters, and reports errors as {"error": "..."} (TF_ROUTE_SERVING). */
#define TF_SERVE_ROUTE(method, path, scope, fn, op, summary, req, resp)                            \
	{                                                                                          \
		method, path, scope, fn, TF_ROUTE_SERVING, op, summary, NULL, req, resp, 200, NULL \
	}
#define TF_SERVE_ROUTES                                                                            \
	TF_SERVE_ROUTE("POST", "/v1/models/{name}:predict", TF_SCOPE_PREDICT, tf_serve_h_predict,  \
	               "tfsPredict", "TensorFlow Serving predict on the production version",       \
	               TF_SERVE_PREDICT_REQ, TF_SERVE_PREDICT_RESP),                               \
	    TF_SERVE_ROUTE("POST", "/v1/models/{name}/versions/{version}:predict",                 \
	                   TF_SCOPE_PREDICT, tf_serve_h_predict, "tfsPredictVersion",              \
	                   "TensorFlow Serving predict on one version", TF_SERVE_PREDICT_REQ,      \
	                   TF_SERVE_PREDICT_RESP),                                                 \
	    TF_SERVE_ROUTE("POST", "/v1/models/{name}/labels/{label}:predict", TF_SCOPE_PREDICT,   \
	                   tf_serve_h_predict, "tfsPredictLabel",                                  \
	                   "TensorFlow Serving predict on the version an alias points at",         \
	                   TF_SERVE_PREDICT_REQ, TF_SERVE_PREDICT_RESP),                           \
	    TF_SERVE_ROUTE("GET", "/v1/models/{name}", TF_SCOPE_PREDICT, tf_serve_h_status,        \
	                   "tfsModelStatus", "The served versions of a model and their state",     \
	                   NULL, TF_SERVE_STATUS_RESP),                                            \
	    TF_SERVE_ROUTE("GET", "/v1/models/{name}/metadata", TF_SCOPE_PREDICT,                  \
	                   tf_serve_h_metadata, "tfsModelMetadata",                                \
	                   "The production version's signature", NULL, TF_SERVE_ANY),              \
	    TF_SERVE_ROUTE("GET", "/v2/health/live", TF_SCOPE_PUBLIC, tf_serve_h_live, "v2Live",   \
	                   "Open Inference Protocol: the server is live", NULL,                    \
	                   TF_SERVE_LIVE_RESP),                                                    \
	    TF_SERVE_ROUTE("GET", "/v2/health/ready", TF_SCOPE_PUBLIC, tf_serve_h_ready,           \
	                   "v2Ready", "Open Inference Protocol: the server is ready", NULL,        \
	                   TF_SERVE_READY_RESP),                                                   \
	    TF_SERVE_ROUTE("GET", "/v2/models/{name}", TF_SCOPE_PREDICT, tf_serve_h_v2_model,      \
	                   "v2ModelMetadata", "Open Inference Protocol: model metadata", NULL,     \
	                   TF_SERVE_ANY),                                                          \
	    TF_SERVE_ROUTE("GET", "/v2/models/{name}/ready", TF_SCOPE_PREDICT,                     \
	                   tf_serve_h_v2_model_ready, "v2ModelReady",                              \
	                   "Open Inference Protocol: the model is ready", NULL,                    \
	                   TF_SERVE_READY_RESP),                                                   \
	    TF_SERVE_ROUTE("POST", "/v2/models/{name}/infer", TF_SCOPE_PREDICT, tf_serve_h_infer,  \
	                   "v2Infer",                                                              \
	                   "Open Inference Protocol: inference on the production version",         \
	                   TF_SERVE_INFER_REQ, TF_SERVE_INFER_RESP),                               \
	    TF_SERVE_ROUTE("GET", "/v1/models/{name}/versions/{version}", TF_SCOPE_PREDICT,        \
	                   tf_serve_h_status, "tfsVersionStatus", "The state of one version",      \
	                   NULL, TF_SERVE_STATUS_RESP),                                            \
	    TF_SERVE_ROUTE("GET", "/v1/models/{name}/labels/{label}", TF_SCOPE_PREDICT,            \
	                   tf_serve_h_status, "tfsLabelStatus",                                    \
	                   "The state of the version an alias points at", NULL,                    \
	                   TF_SERVE_STATUS_RESP),                                                  \
	    TF_SERVE_ROUTE("GET", "/v1/models/{name}/versions/{version}/metadata",                 \
	                   TF_SCOPE_PREDICT, tf_serve_h_metadata, "tfsVersionMetadata",            \
	                   "One version's signature", NULL, TF_SERVE_ANY),                         \
	    TF_SERVE_ROUTE("GET", "/v1/models/{name}/labels/{label}/metadata", TF_SCOPE_PREDICT,   \
	                   tf_serve_h_metadata, "tfsLabelMetadata",                                \
	                   "The signature of the version an alias points at", NULL, TF_SERVE_ANY), \
	    TF_SERVE_ROUTE("GET", "/v2", TF_SCOPE_PUBLIC, tf_serve_h_server, "v2ServerMetadata",   \
	                   "Open Inference Protocol: server metadata", NULL,                       \
	                   TF_SERVE_SERVER_RESP),                                                  \
	    TF_SERVE_ROUTE("GET", "/v2/models/{name}/versions/{version}", TF_SCOPE_PREDICT,        \
	                   tf_serve_h_v2_model, "v2VersionMetadata",                               \
	                   "Open Inference Protocol: metadata of one version", NULL,               \
	                   TF_SERVE_ANY),                                                          \
	    TF_SERVE_ROUTE("GET", "/v2/models/{name}/versions/{version}/ready", TF_SCOPE_PREDICT,  \
	                   tf_serve_h_v2_model_ready, "v2VersionReady",                            \
	                   "Open Inference Protocol: one version is ready", NULL,                  \
	                   TF_SERVE_READY_RESP),                                                   \
	    TF_SERVE_ROUTE("POST", "/v2/models/{name}/versions/{version}/infer", TF_SCOPE_PREDICT, \
	                   tf_serve_h_infer, "v2InferVersion",                                     \
	                   "Open Inference Protocol: inference on one version",                    \
	                   TF_SERVE_INFER_REQ, TF_SERVE_INFER_RESP)

#endif

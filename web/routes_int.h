/* routes_int.h — inside the web/ folder: the handlers that the route table of web/routes.c
 * names and other files of web/ define (by concern: routes_runs.c, routes_registry.c,
 * routes_admin.c), and the column readers they share. Each handler answers one route; the
 * request's store handle is rq->st, and every answer goes into rs.
 */
#ifndef TF_WEB_ROUTES_INT_H
#define TF_WEB_ROUTES_INT_H

#include "web/api.h"

/* A text column as a JSON string, NULL as null (a new reference). */
static inline json_t *tf_web_col_text(struct tf_stmt *s, int c)
{
	const char *t = tf_stmt_text(s, c);
	return t ? json_string(t) : json_null();
}

/* A real column as a JSON number, NULL as null (a new reference). */
static inline json_t *tf_web_col_real(struct tf_stmt *s, int c)
{
	return tf_stmt_is_null(s, c) ? json_null() : json_real(tf_stmt_double(s, c));
}

/* Answers a list read from the store: 200 {"items": items} (consumed) when rc is 0, else
 * the store's problem for rc (web/routes.c). */
void tf_web_items(struct tf_web_req *rq, struct tf_web_resp *rs, int rc, json_t *items);

/* web/routes_runs.c */
void tf_web_runs_list(struct tf_web_req *rq, struct tf_web_resp *rs);
void tf_web_run_show(struct tf_web_req *rq, struct tf_web_resp *rs);
void tf_web_run_steps(struct tf_web_req *rq, struct tf_web_resp *rs);
void tf_web_run_events(struct tf_web_req *rq, struct tf_web_resp *rs);
void tf_web_events(struct tf_web_req *rq, struct tf_web_resp *rs);
void tf_web_runs_create(struct tf_web_req *rq, struct tf_web_resp *rs);
void tf_web_run_delete(struct tf_web_req *rq, struct tf_web_resp *rs);
void tf_web_runs_gc(struct tf_web_req *rq, struct tf_web_resp *rs);
void tf_web_run_cancel(struct tf_web_req *rq, struct tf_web_resp *rs);
void tf_web_run_retry(struct tf_web_req *rq, struct tf_web_resp *rs);
void tf_web_run_resume(struct tf_web_req *rq, struct tf_web_resp *rs);

/* web/routes_registry.c */
void tf_web_pipeline_validate(struct tf_web_req *rq, struct tf_web_resp *rs);
void tf_web_pipelines_list(struct tf_web_req *rq, struct tf_web_resp *rs);
void tf_web_pipeline_show(struct tf_web_req *rq, struct tf_web_resp *rs);
void tf_web_pipeline_register(struct tf_web_req *rq, struct tf_web_resp *rs);
void tf_web_pipeline_remove(struct tf_web_req *rq, struct tf_web_resp *rs);
void tf_web_schedules_list(struct tf_web_req *rq, struct tf_web_resp *rs);
void tf_web_schedule_show(struct tf_web_req *rq, struct tf_web_resp *rs);
void tf_web_schedule_create(struct tf_web_req *rq, struct tf_web_resp *rs);
void tf_web_schedule_delete(struct tf_web_req *rq, struct tf_web_resp *rs);
void tf_web_schedule_pause(struct tf_web_req *rq, struct tf_web_resp *rs);
void tf_web_schedule_resume(struct tf_web_req *rq, struct tf_web_resp *rs);
void tf_web_schedules_fire(struct tf_web_req *rq, struct tf_web_resp *rs);
void tf_web_models_list(struct tf_web_req *rq, struct tf_web_resp *rs);
void tf_web_model_show(struct tf_web_req *rq, struct tf_web_resp *rs);
void tf_web_model_versions(struct tf_web_req *rq, struct tf_web_resp *rs);
void tf_web_model_version(struct tf_web_req *rq, struct tf_web_resp *rs);
void tf_web_model_compare(struct tf_web_req *rq, struct tf_web_resp *rs);
void tf_web_model_alias(struct tf_web_req *rq, struct tf_web_resp *rs);

/* web/routes_admin.c */
void tf_web_slices(struct tf_web_req *rq, struct tf_web_resp *rs);
void tf_web_queue(struct tf_web_req *rq, struct tf_web_resp *rs);
void tf_web_chip_fail(struct tf_web_req *rq, struct tf_web_resp *rs);
void tf_web_chip_repair(struct tf_web_req *rq, struct tf_web_resp *rs);
void tf_web_tokens_list(struct tf_web_req *rq, struct tf_web_resp *rs);
void tf_web_tokens_create(struct tf_web_req *rq, struct tf_web_resp *rs);
void tf_web_token_revoke(struct tf_web_req *rq, struct tf_web_resp *rs);
void tf_web_whoami(struct tf_web_req *rq, struct tf_web_resp *rs);

#endif

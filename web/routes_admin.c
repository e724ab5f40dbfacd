/* routes_admin.c — owns the API's routes over the machine and its access: the slice pool
 * and its queue as the scheduler sees them, marking a chip failed or repaired, API tokens
 * (list, create, revoke) and whoami. The route table is in web/routes.c.
 */
#include "web/routes_int.h"
#include "web/tokens.h"

#include "common/common.h"
#include "orchestrator/broker.h"
#include "orchestrator/slices.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- slices and queue -------------------------------------------------------------------- */

/* How often the step of slice item `it` ({run, step, ...}) was preempted: its run's counts
 * are read once, by one query for all its steps, into counts ("RUN\nSTEP": n; "RUN": true
 * once read), not one query per item (each scanning its run's rows again). */
static json_int_t preemptions(struct tf_store *st, json_t *counts, const json_t *it)
{
	const char *run = json_string_value(json_object_get(it, "run"));
	const char *step = json_string_value(json_object_get(it, "step"));
	if (!run || !step)
		return 0;
	if (!json_object_get(counts, run)) {
		json_object_set_new(counts, run, json_true());
		struct tf_stmt *q =
		    tf_store_query(st,
		                   "SELECT step, count(*) FROM slice_jobs WHERE run_id=? AND "
		                   "reclaim_class='preempted' GROUP BY step",
		                   "t", run);
		while (q && tf_stmt_step(q) == 1) {
			char *key = tf_xasprintf("%s\n%s", run, tf_stmt_text(q, 0));
			json_object_set_new(counts, key, json_integer(tf_stmt_int(q, 1)));
			free(key);
		}
		tf_stmt_done(q);
	}
	char *key = tf_xasprintf("%s\n%s", run, step);
	json_int_t n = json_integer_value(json_object_get(counts, key));
	free(key);
	return n;
}

static int slices_view(struct tf_web_req *rq, struct tf_web_resp *rs, json_t **out)
{
	struct tf_slices_view v = {0};
	char err[256];
	int rc = tf_slices_view_load(tf_web_home(rq->srv), NULL, 0, tf_now_wall(), &v, err,
	                             sizeof(err));
	if (rc) {
		tf_web_problem_errno(rs, rc, rq->path, err);
		return rc;
	}
	*out = json_incref(v.recorded);
	/* the pools as the scheduler sees them: shape, and who holds each chip (a running
	 * item's `job`), -1 failed, -2 held for a waiting job, 0 free */
	json_t *d = tf_sched_describe_json(v.sched, 0);
	json_object_set(*out, "pools", json_object_get(d, "pools"));
	json_decref(d);
	tf_slices_view_release(&v);
	/* how often each attempt's step has been preempted before */
	json_t *counts = json_object();
	const char *lists[] = {"running", "waiting"};
	for (int k = 0; k < 2; k++) {
		size_t i;
		json_t *it;
		json_array_foreach(json_object_get(*out, lists[k]), i, it)
		{
			json_object_set_new(it, "preemptions",
			                    json_integer(preemptions(rq->st, counts, it)));
		}
	}
	json_decref(counts);
	return 0;
}

void tf_web_slices(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	json_t *doc = NULL;
	if (!slices_view(rq, rs, &doc))
		tf_web_json(rs, 200, doc);
}

void tf_web_queue(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	json_t *doc = NULL;
	if (slices_view(rq, rs, &doc))
		return;
	tf_web_json(rs, 200, json_pack("{s:O}", "items", json_object_get(doc, "waiting")));
	json_decref(doc);
}

/* POST /api/v1/slices/{pool}/chips/{chip}:fail and :repair; chip is "x,y,z". */
static void chip_action(struct tf_web_req *rq, struct tf_web_resp *rs, int fail)
{
	const char *pool = tf_web_param(rq, "pool"), *chip = tf_web_param(rq, "chip");
	int xyz[3];
	char end;
	if (!chip || sscanf(chip, "%d,%d,%d%c", &xyz[0], &xyz[1], &xyz[2], &end) != 3 ||
	    xyz[0] < 0 || xyz[1] < 0 || xyz[2] < 0) {
		tf_web_problem(rs, 400, rq->path, "the chip is x,y,z (e.g. 0,1,2), not '%s'",
		               chip ? chip : "");
		return;
	}
	const char *reason = rq->json ? json_string_value(json_object_get(rq->json, "reason")) : NULL;
	int rc = fail ? tf_broker_chip_fail(rq->st, pool, xyz, tf_now_wall(),
	                                    reason ? reason : "marked failed through the API")
	              : tf_broker_chip_repair(rq->st, pool, xyz);
	if (rc) {
		tf_web_problem_errno(rs, rc, rq->path,
		                     rc == -ENOENT ? "that chip is not marked failed"
		                                   : tf_store_errmsg(rq->st));
		return;
	}
	tf_web_json(rs, 200,
	            json_pack("{s:s, s:[i,i,i], s:s}", "pool", pool, "chip", xyz[0], xyz[1], xyz[2],
	                      "state", fail ? "failed" : "ok"));
}

void tf_web_chip_fail(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	chip_action(rq, rs, 1);
}

void tf_web_chip_repair(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	chip_action(rq, rs, 0);
}

/* ---- tokens ------------------------------------------------------------------------------- */

void tf_web_tokens_list(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	json_t *out = NULL;
	int rc = tf_token_list(rq->st, &out);
	tf_web_items(rq, rs, rc, out);
}

void tf_web_tokens_create(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	const char *name = json_string_value(json_object_get(rq->json, "name"));
	const char *sc = json_string_value(json_object_get(rq->json, "scope"));
	json_t *je = json_object_get(rq->json, "expires_in");
	enum tf_scope scope;
	double ttl = 0;
	if (!name || !*name || strlen(name) > 128 || tf_scope_parse(sc, &scope) ||
	    (je && (!json_is_string(je) || tf_token_parse_ttl(json_string_value(je), &ttl)))) {
		tf_web_problem(rs, 422, rq->path,
		               "give 'name' (1-128 characters), 'scope' (read, trigger, admin or "
		               "predict) and optionally 'expires_in' (e.g. 90d, 12h)");
		return;
	}
	char tok[TF_TOKEN_LEN + 1];
	int64_t id = 0;
	int rc = tf_token_create(rq->st, name, scope, ttl, tok, &id);
	json_t *doc = NULL;
	if (!rc)
		rc = tf_token_get(rq->st, id, &doc);
	if (rc) {
		tf_web_problem_errno(rs, rc, rq->path, tf_store_errmsg(rq->st));
		return;
	}
	json_object_set_new(doc, "token", json_string(tok));
	tf_web_json(rs, 201, doc);
	rs->location = tf_xasprintf("/api/v1/tokens/%lld", (long long)id);
}

void tf_web_token_revoke(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	const char *id = tf_web_param(rq, "id");
	int rc = tf_token_revoke(rq->st, id, tf_now_wall());
	json_t *doc = NULL;
	if (!rc)
		rc = tf_token_get(rq->st, strtoll(id, NULL, 10), &doc);
	if (rc)
		tf_web_problem(rs, rc == -ENOENT ? 404 : 500, rq->path, "no token with id '%s'", id);
	else
		tf_web_json(rs, 200, doc);
}

void tf_web_whoami(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	tf_web_json(rs, 200,
	            json_pack("{s:s, s:b, s:o}", "scope", tf_scope_name(rq->scope), "auth",
	                      rq->token_id != 0, "token_id",
	                      rq->token_id ? json_integer(rq->token_id) : json_null()));
}

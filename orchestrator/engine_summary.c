/* engine_summary.c — the summary of a run: the --json document (tf_engine_summary) and the
 * lines printed for people at the end of a run.
 */
#include "orchestrator/engine.h"

#define TF_LOG_TAG "engine"
#include "common/common.h"
#include "common/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- summaries ----------------------------------------------------------------------- */

int tf_engine_summary(struct tf_store *st, const char *run_id, json_t **out)
{
	json_t *d = NULL;
	int rc = tf_run_describe(st, run_id, &d);
	if (rc)
		return rc;
	json_t *doc = json_object();
	json_object_set(doc, "run_id", json_object_get(d, "id"));
	json_object_set(doc, "pipeline", json_object_get(d, "pipeline"));
	json_object_set(doc, "status", json_object_get(d, "state"));
	json_object_set(doc, "error", json_object_get(d, "error"));
	json_t *started = json_object_get(d, "started_at"),
	       *fin = json_object_get(d, "finished_at");
	if (json_is_number(started) && json_is_number(fin))
		json_object_set_new(doc, "duration",
		                    json_real(json_number_value(fin) - json_number_value(started)));
	json_t *steps = json_array();
	double slice_seconds = 0;
	int hits = 0;
	size_t i;
	json_t *s;
	json_array_foreach(json_object_get(d, "steps"), i, s)
	{
		json_t *o = json_object();
		static const char *const keys[] = {
		    "name",      "type",   "state",    "attempts", "outputs",      "metrics",
		    "cache_hit", "reason", "duration", "slice",    "slice_seconds"};
		for (size_t k = 0; k < TF_ARRAY_LEN(keys); k++) {
			json_t *v = json_object_get(s, keys[k]);
			if (v)
				json_object_set(o, keys[k], v);
		}
		slice_seconds += json_number_value(json_object_get(s, "slice_seconds"));
		if (json_is_true(json_object_get(s, "cache_hit")))
			hits++;
		json_array_append_new(steps, o);
	}
	json_object_set_new(doc, "steps", steps);
	json_object_set_new(doc, "cache_hits", json_integer(hits));
	json_object_set_new(doc, "slice_seconds", json_real(slice_seconds));
	json_t *model = json_object_get(d, "model");
	if (model) {
		json_t *m = json_deep_copy(model);
		char *metrics = NULL;
		if (tf_store_query_text(
		        st, &metrics,
		        "SELECT v.metrics FROM model_versions v JOIN models m ON "
		        "m.id=v.model_id WHERE m.name=? AND v.version=?",
		        "ti", json_string_value(json_object_get(m, "name")),
		        (int64_t)json_integer_value(json_object_get(m, "version"))) == 0) {
			json_t *mj = json_loads(metrics ? metrics : "{}", 0, NULL);
			json_object_set_new(m, "metrics", mj ? mj : json_object());
		}
		free(metrics);
		json_object_set_new(doc, "model", m);
	} else {
		json_object_set_new(doc, "model", json_null());
	}
	json_t *deps = json_array();
	struct tf_stmt *q = tf_store_query(st,
	                                   "SELECT m.name, d.alias, d.version, d.canary_version, "
	                                   "d.canary_percent FROM deployments d JOIN models m ON "
	                                   "m.id=d.model_id WHERE d.run_id=? ORDER BY d.id",
	                                   "t", run_id);
	while (q && tf_stmt_step(q) == 1) {
		json_t *o = json_pack("{s:s, s:s, s:I}", "model", tf_stmt_text(q, 0), "alias",
		                      tf_stmt_text(q, 1), "version", (json_int_t)tf_stmt_int(q, 2));
		if (!tf_stmt_is_null(q, 3)) {
			json_object_set_new(o, "canary_version", json_integer(tf_stmt_int(q, 3)));
			json_object_set_new(o, "canary_percent", json_real(tf_stmt_double(q, 4)));
		}
		json_array_append_new(deps, o);
	}
	tf_stmt_done(q);
	json_object_set_new(doc, "deployments", deps);
	json_decref(d);
	*out = doc;
	return 0;
}

void tf_engine_print_summary(FILE *f, const json_t *sum)
{
	const char *status = json_string_value(json_object_get(sum, "status"));
	fprintf(f, "\nrun %s %s", json_string_value(json_object_get(sum, "run_id")),
	        status ? status : "?");
	json_t *dur = json_object_get(sum, "duration");
	if (json_is_number(dur))
		fprintf(f, " in %.1f s", json_number_value(dur));
	fprintf(f, "\n");
	const char *error = json_string_value(json_object_get(sum, "error"));
	if (error)
		fprintf(f, "  %s\n", error);
	size_t i;
	json_t *s;
	json_array_foreach(json_object_get(sum, "steps"), i, s)
	{
		const char *st = json_string_value(json_object_get(s, "state"));
		if (st && (!strcmp(st, "failed") || !strcmp(st, "skipped")))
			fprintf(f, "  %s %s: %s\n", json_string_value(json_object_get(s, "name")),
			        st,
			        json_string_value(json_object_get(s, "reason"))
			            ? json_string_value(json_object_get(s, "reason"))
			            : "");
	}
	json_t *m = json_object_get(sum, "model");
	if (json_is_object(m)) {
		fprintf(f, "  model: %s version %lld",
		        json_string_value(json_object_get(m, "name")),
		        (long long)json_integer_value(json_object_get(m, "version")));
		const char *k;
		json_t *v;
		int first = 1;
		json_object_foreach(json_object_get(m, "metrics"), k, v)
		{
			if (!json_is_number(v))
				continue;
			fprintf(f, "%s%s %.4g", first ? " (" : ", ", k, json_number_value(v));
			first = 0;
		}
		fprintf(f, "%s\n", first ? "" : ")");
	}
	json_array_foreach(json_object_get(sum, "deployments"), i, s)
	{
		fprintf(f, "  deployed: %s '%s' -> version %lld",
		        json_string_value(json_object_get(s, "model")),
		        json_string_value(json_object_get(s, "alias")),
		        (long long)json_integer_value(json_object_get(s, "version")));
		if (json_object_get(s, "canary_version"))
			fprintf(f, ", canary version %lld at %.3g%%",
			        (long long)json_integer_value(json_object_get(s, "canary_version")),
			        json_number_value(json_object_get(s, "canary_percent")));
		fprintf(f, "\n");
	}
	fprintf(f, "  slice-seconds: %.1f   cache hits: %lld\n",
	        json_number_value(json_object_get(sum, "slice_seconds")),
	        (long long)json_integer_value(json_object_get(sum, "cache_hits")));
}

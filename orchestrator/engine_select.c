/* engine_select.c — which steps of a new run run: `run --only STEP,...` and `run --from STEP`
 * (docs/runs.md, "Running part of a pipeline"), and the plan `run --dry-run` prints.
 *
 * --from S runs S and every step after it (its dependents, transitively, and the finally
 * steps); --only A,B runs A and B. The steps the selected ones need that do not run take
 * their outputs and metrics from the newest succeeded run of the same pipeline on the same
 * object store (state cached, reason "reused from run R"); the others are skipped ("not
 * selected"). Without such a run the selection is refused before anything is recorded. The
 * steps that run are not taken from the cache: asking for a step by name runs it.
 */
#include "orchestrator/engine_int.h"

#include "common/common.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void tf_engine_selection_release(struct tf_selection *sel)
{
	free(sel->action);
	free(sel->spec);
	memset(sel, 0, sizeof(*sel));
}

/* Marks `i` and everything that needs it, transitively (dependents from the needs lists). */
static void mark_after(const struct tf_pipeline *p, size_t i, unsigned char *mark)
{
	size_t *stack = tf_xcalloc(p->nsteps + 1, sizeof(*stack)), n = 0;
	mark[i] = 1;
	stack[n++] = i;
	while (n) {
		size_t u = stack[--n];
		for (size_t d = 0; d < p->nsteps; d++) {
			if (mark[d])
				continue;
			for (size_t k = 0; k < p->steps[d].nneeds; k++)
				if (p->steps[d].needs[k] == u) {
					mark[d] = 1;
					stack[n++] = d;
					break;
				}
		}
	}
	free(stack);
}

/* Marks what step `i` needs, transitively (the DAG is acyclic and at most
 * TF_PIPELINE_MAX_STEPS deep, and each step is marked once). */
static void mark_before(const struct tf_pipeline *p, size_t i, unsigned char *need)
{
	for (size_t k = 0; k < p->steps[i].nneeds; k++) {
		size_t u = p->steps[i].needs[k];
		if (need[u])
			continue;
		need[u] = 1;
		mark_before(p, u, need);
	}
}

/* Each step's action for --only / --from (rq), from the pipeline alone: run, reuse or skip;
 * sel->why and sel->spec too. *nreuse receives how many are reused. */
static int mark_selection(const struct tf_pipeline *p, const struct tf_engine_req *rq,
                          struct tf_selection *sel, size_t *nreuse, char *err, size_t errlen)
{
	unsigned char *run = tf_xcalloc(p->nsteps + 1, 1), *need = tf_xcalloc(p->nsteps + 1, 1);
	int rc = 0;
	size_t off = 0;
	json_t *spec = rq->from ? json_pack("{s:s}", "from", rq->from)
	                        : json_pack("{s:[]}", "only");
	if (rq->from) {
		int i = tf_pipeline_step_index(p, rq->from);
		if (i < 0) {
			tf_errf(err, errlen, "--from %s: the pipeline has no such step", rq->from);
			rc = -EINVAL;
			goto out;
		}
		mark_after(p, (size_t)i, run);
		snprintf(sel->why, sizeof(sel->why), "--from %s", rq->from);
	} else {
		off = (size_t)snprintf(sel->why, sizeof(sel->why), "--only ");
	}
	for (size_t k = 0; k < rq->nonly; k++) {
		int i = tf_pipeline_step_index(p, rq->only[k]);
		if (i < 0) {
			tf_errf(err, errlen, "--only %s: the pipeline has no such step", rq->only[k]);
			rc = -EINVAL;
			goto out;
		}
		run[i] = 1;
		json_array_append_new(json_object_get(spec, "only"), json_string(rq->only[k]));
		if (off < sizeof(sel->why))
			off += (size_t)snprintf(sel->why + off, sizeof(sel->why) - off, "%s%s",
			                        k ? "," : "", rq->only[k]);
	}
	for (size_t i = 0; i < p->nsteps; i++)
		if (run[i])
			mark_before(p, i, need);
	*nreuse = 0;
	for (size_t i = 0; i < p->nsteps; i++) {
		sel->action[i] = run[i] ? TF_SEL_RUN : need[i] ? TF_SEL_REUSE : TF_SEL_SKIP;
		*nreuse += sel->action[i] == TF_SEL_REUSE;
	}
	/* --from: every step before the chosen one (or beside it) is reused, not skipped */
	for (size_t i = 0; rq->from && i < p->nsteps; i++)
		if (sel->action[i] == TF_SEL_SKIP)
			sel->action[i] = TF_SEL_REUSE, (*nreuse)++;
	sel->spec = tf_engine_canon(spec);
out:
	json_decref(spec);
	free(run);
	free(need);
	return rc;
}

int tf_engine_select(const struct tf_pipeline *p, const struct tf_engine_req *rq,
                     struct tf_store *st, const char *storage, const char *self,
                     struct tf_selection *sel, char *err, size_t errlen)
{
	memset(sel, 0, sizeof(*sel));
	sel->action = tf_xcalloc(p->nsteps + 1, sizeof(*sel->action));
	if (!rq->nonly && !rq->from)
		return 0;
	size_t nreuse = 0;
	int rc = mark_selection(p, rq, sel, &nreuse, err, errlen);
	if (rc || !nreuse)
		return rc;
	char *src = NULL;
	if (st)
		rc = tf_store_query_text(st, &src,
		                         "SELECT id FROM runs WHERE pipeline=? AND state='succeeded' "
		                         "AND storage=? AND id != ? ORDER BY created_at DESC, id DESC "
		                         "LIMIT 1",
		                         "ttt", p->name, storage, self ? self : "");
	if (rc == -ENOENT || (rc == 0 && !src)) {
		tf_errf(err, errlen,
		        "%s: the steps before it come from the newest succeeded run of pipeline '%s' "
		        "on %s, and there is none: run the whole pipeline first",
		        sel->why, p->name, storage);
		return -ENOENT;
	}
	if (rc) {
		tf_errf(err, errlen, "%s", tf_store_errmsg(st));
		return rc;
	}
	snprintf(sel->source, sizeof(sel->source), "%s", src);
	free(src);
	/* each reused step must have its results there (skipped ones stay skipped) */
	for (size_t i = 0; i < p->nsteps && rc == 0; i++) {
		if (sel->action[i] != TF_SEL_REUSE)
			continue;
		char *state = NULL;
		rc = tf_store_query_text(st, &state,
		                         "SELECT state FROM steps WHERE run_id=? AND name=?", "tt",
		                         sel->source, p->steps[i].name);
		enum tf_step_state s;
		if (rc == -ENOENT) {
			tf_errf(err, errlen,
			        "%s: run %s (the newest succeeded one) has no step '%s' to reuse: the "
			        "pipeline changed since; run it whole",
			        sel->why, sel->source, p->steps[i].name);
		} else if (rc == 0 && tf_step_state_parse(state, &s) == 0 && s == TF_STEP_SKIPPED) {
			sel->action[i] = TF_SEL_SKIP;
		} else if (rc == 0 && (tf_step_state_parse(state, &s) || !tf_step_state_done(s))) {
			tf_errf(err, errlen, "%s: step '%s' is %s in run %s: nothing to reuse",
			        sel->why, p->steps[i].name, state, sel->source);
			rc = -ENOENT;
		} else if (rc) {
			tf_errf(err, errlen, "%s", tf_store_errmsg(st));
		}
		free(state);
	}
	return rc;
}

int tf_engine_selection_of_run(struct engine *e, struct tf_selection *sel, char *err,
                               size_t errlen)
{
	memset(sel, 0, sizeof(*sel));
	sel->action = tf_xcalloc(e->n + 1, sizeof(*sel->action));
	char *text = NULL;
	int rc = tf_store_query_text(e->db, &text, "SELECT selection FROM runs WHERE id=?", "t",
	                             e->run_id);
	json_t *spec = rc == 0 && text ? json_loads(text, 0, NULL) : NULL;
	free(text);
	if (rc || !spec)
		return rc; /* the whole pipeline */
	json_t *only = json_object_get(spec, "only");
	size_t n = json_array_size(only);
	const char **names = tf_xcalloc(n + 1, sizeof(*names));
	for (size_t k = 0; k < n; k++)
		names[k] = json_string_value(json_array_get(only, k));
	struct tf_engine_req rq = {
	    .only = names, .nonly = n, .from = json_string_value(json_object_get(spec, "from"))};
	size_t nreuse;
	if (rq.from || rq.nonly)
		rc = mark_selection(e->p, &rq, sel, &nreuse, err, errlen);
	free(names);
	json_decref(spec);
	return rc;
}

int tf_engine_apply_selection(struct engine *e, const struct tf_selection *sel)
{
	int rc = tf_store_run(e->db, "UPDATE runs SET selection=? WHERE id=?", "tt", sel->spec,
	                      e->run_id);
	for (size_t i = 0; i < e->n && rc == 0; i++) {
		struct estep *s = &e->steps[i];
		char why[256];
		s->forced = sel->action[i] == TF_SEL_RUN; /* asked for by name: run it */
		if (sel->action[i] == TF_SEL_SKIP) {
			snprintf(why, sizeof(why), "not selected (%s)", sel->why);
			struct tf_step_update up = {.reason = why};
			rc = tf_engine_step_move(e, s, TF_STEP_SKIPPED, &up);
		} else if (sel->action[i] == TF_SEL_REUSE) {
			struct tf_stmt *q = tf_store_query(
			    e->db,
			    "SELECT outputs, metrics, with_json FROM steps WHERE run_id=? AND name=?",
			    "tt", sel->source, s->def->name);
			if (!q || tf_stmt_step(q) != 1) {
				tf_stmt_done(q);
				return -EIO;
			}
			const char *o = tf_stmt_text(q, 0), *m = tf_stmt_text(q, 1);
			s->outputs = json_loads(o ? o : "{}", 0, NULL);
			s->metrics = json_loads(m ? m : "{}", 0, NULL);
			if (!s->outputs)
				s->outputs = json_object();
			if (!s->metrics)
				s->metrics = json_object();
			snprintf(why, sizeof(why), "reused from run %s (%s)", sel->source, sel->why);
			char *os = tf_engine_canon(s->outputs), *ms = tf_engine_canon(s->metrics);
			/* its with too: a register step's lineage reads the train step's */
			struct tf_step_update up = {.reason = why,
			                            .outputs = os,
			                            .metrics = ms,
			                            .with_json = tf_stmt_text(q, 2)};
			rc = tf_engine_step_move(e, s, TF_STEP_CACHED, &up);
			tf_stmt_done(q); /* after the move: up.with_json is its text */
			s->started_wall = s->finished_wall = tf_now_wall();
			free(os);
			free(ms);
		}
	}
	/* needs that became final no longer hold their dependents back */
	for (size_t i = 0; i < e->n; i++) {
		struct estep *s = &e->steps[i];
		s->unresolved = 0;
		for (size_t k = 0; k < s->def->nneeds; k++)
			if (!tf_step_state_final(e->steps[s->def->needs[k]].state))
				s->unresolved++;
	}
	return rc;
}

json_t *tf_engine_plan_json(const struct tf_pipeline *p, const struct tf_selection *sel,
                            const char *storage)
{
	static const char *const words[] = {"run", "reuse", "skip"};
	json_t *steps = json_array();
	for (size_t k = 0; k < p->nsteps; k++) {
		size_t i = p->topo ? p->topo[k] : k;
		const struct tf_step *s = &p->steps[i];
		json_t *needs = json_array();
		for (size_t n = 0; n < s->nneeds; n++)
			if (!s->final || p->steps[s->needs[n]].final) /* a finally step's own needs */
				json_array_append_new(needs, json_string(p->steps[s->needs[n]].name));
		json_array_append_new(
		    steps, json_pack("{s:s, s:s, s:i, s:o, s:s?, s:b, s:s, s:b}", "name", s->name,
		                     "type", tf_step_type_name(s->type), "level", s->level, "needs",
		                     needs, "when", s->when_source, "finally", s->final, "action",
		                     words[sel->action[i]], "cache",
		                     s->cache && tf_step_schema(s->type)->cacheable));
	}
	return json_pack("{s:s, s:s, s:s?, s:s?, s:o, s:o}", "pipeline", p->name, "storage",
	                 storage, "reuse_from", sel->source[0] ? sel->source : NULL, "selection",
	                 sel->why[0] ? sel->why : NULL, "params", tf_pipeline_param_values(p),
	                 "steps", steps);
}

/* pipeline_alerts.c — the pipeline's `alerts:` routes: which events of its runs go to which
 * hooks, and when (docs/alerts.md). Loaded after the steps, so a `when` may name any step's
 * declared metrics and outputs as well as params. Hook names are checked for form only: the
 * hooks live in a state home, which a pipeline file does not know, so a route to a hook the
 * home lacks is reported when the run starts (orchestrator/alerts.c). */
#include "orchestrator/alerts.h"
#include "orchestrator/pipeline_int.h"

#include "common/common.h"

#include <stdlib.h>
#include <string.h>

static int declared(char *const *names, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(names[i], name))
			return 1;
	return 0;
}

/* The static type of a reference in a route's `when`: params, and the declared metrics and
 * outputs of any step (an event may come before or after the step ran: a value that does not
 * exist then makes the route not match). */
static enum tf_vtype route_ref_type(void *ctx, const struct tf_ref *r)
{
	struct loader *L = ctx;
	if (r->kind == TF_REF_PARAM) {
		const struct tf_param *p = tf_pipeline_param(L->p, r->name);
		if (p)
			return tf_pl_param_vtype(p->type);
		tf_diag_add(L->d, TF_DIAG_ERROR, L->file, r->line, r->col,
		            "declare it under 'params'", "unknown param '%s'", r->name);
		return TF_VT_LAST;
	}
	if (r->kind == TF_REF_RUN && strcmp(r->name, "state"))
		return TF_VT_STRING; /* ${run.id}, ${run.pipeline} */
	if (r->kind == TF_REF_RUN || r->kind == TF_REF_ENV) {
		tf_diag_add(L->d, TF_DIAG_ERROR, L->file, r->line, r->col,
		            "a route's when may use params, ${run.id}, ${run.pipeline} and the "
		            "steps' outputs and metrics",
		            "'${%s}' is not known to an alert route", r->path);
		return TF_VT_LAST;
	}
	int i = tf_pipeline_step_index(L->p, r->step);
	if (i < 0) {
		tf_diag_add(L->d, TF_DIAG_ERROR, L->file, r->line, r->col, NULL,
		            "'${%s}': no step '%s'", r->path, r->step);
		return TF_VT_LAST;
	}
	const struct tf_step *s = &L->p->steps[i];
	if (r->kind == TF_REF_METRIC ? declared(s->metrics, s->nmetrics, r->name)
	                             : declared(s->outputs, s->noutputs, r->name))
		return r->kind == TF_REF_METRIC   ? TF_VT_NUMBER
		       : s->type == TF_STEP_SHELL ? TF_VT_ANY
		                                  : TF_VT_STRING;
	tf_diag_add(L->d, TF_DIAG_ERROR, L->file, r->line, r->col, NULL,
	            "'${%s}': step '%s' has no %s '%s'", r->path, r->step,
	            r->kind == TF_REF_METRIC ? "metric" : "output", r->name);
	return TF_VT_LAST;
}

/* `on:` or `to:` — one name or a list of names, each checked by `ok`. Returns the names. */
static char **load_names(struct loader *L, const struct ynode *n, const char *what,
                         int (*ok)(struct loader *L, const struct ynode *item), size_t *count)
{
	const struct ynode *const *items = n->kind == Y_SEQ ? (const struct ynode *const *)n->kids
	                                                    : (const struct ynode *const *)&n;
	size_t k = n->kind == Y_SEQ ? n->n : 1;
	char **names = tf_xcalloc(k + 1, sizeof(*names));
	*count = 0;
	if (n->kind == Y_MAP || k == 0) {
		tf_pl_err_at(L, n, "write a name or a list such as [a, b]", "%s wants names", what);
		return names;
	}
	for (size_t i = 0; i < k; i++) {
		if (tf_pl_want_kind(L, items[i], Y_SCALAR, what) || !ok(L, items[i]))
			continue;
		names[(*count)++] = tf_xstrdup(items[i]->str);
	}
	return names;
}

static int event_ok(struct loader *L, const struct ynode *n)
{
	const struct tf_alert_event *ev = tf_alert_event_find(n->str);
	if (ev && strcmp(ev->name, "test"))
		return 1;
	size_t ne;
	const struct tf_alert_event *all = tf_alert_events(&ne);
	char hint[600] = "events:";
	for (size_t i = 0; i < ne; i++)
		if (strcmp(all[i].name, "test"))
			snprintf(hint + strlen(hint), sizeof(hint) - strlen(hint), "%s %s",
			         i ? "," : "", all[i].name);
	tf_pl_err_at(L, n, hint, "unknown event '%.60s'", n->str);
	return 0;
}

static int hook_ok(struct loader *L, const struct ynode *n)
{
	int ok = tf_alerts_hook_name_ok(n->str);
	if (!ok)
		tf_pl_err_at(L, n,
		             "hook names are 1 to 64 of a-z, 0-9, '_' and '-' (tpuflow hooks list)",
		             "bad hook name '%.60s'", n->str);
	return ok;
}

void tf_pl_load_alerts(struct loader *L, const struct ynode *n)
{
	struct tf_pipeline *p = L->p;
	if (tf_pl_want_kind(L, n, Y_SEQ, "'alerts'"))
		return;
	p->alerts = tf_xcalloc(n->n + 1, sizeof(*p->alerts));
	for (size_t i = 0; i < n->n; i++) {
		const struct ynode *m = n->kids[i], *x;
		struct tf_alert_route *r = &p->alerts[p->nalerts++];
		r->line = m->line;
		r->col = m->col;
		if (tf_pl_want_kind(L, m, Y_MAP, "an alert route"))
			continue;
		static const char *const keys[] = {"on", "to", "when", NULL};
		tf_pl_check_keys(L, m, keys, "an alert route");
		if ((x = tf_pl_map_get(m, "on")))
			r->on = load_names(L, x, "'alerts.on'", event_ok, &r->non);
		else
			tf_pl_err_at(L, m,
			             "add 'on: [run_failed]' (tpuflow hooks events lists them)",
			             "the alert route has no 'on'");
		if ((x = tf_pl_map_get(m, "to"))) {
			r->to = load_names(L, x, "'alerts.to'", hook_ok, &r->nto);
			r->to_lines = tf_xcalloc(r->nto + 1, 2 * sizeof(int));
			for (size_t k = 0, j = 0; x->kind == Y_SEQ && k < x->n && j < r->nto; k++)
				if (x->kids[k]->kind == Y_SCALAR &&
				    !strcmp(x->kids[k]->str, r->to[j])) {
					r->to_lines[2 * j] = x->kids[k]->line;
					r->to_lines[2 * j++ + 1] = x->kids[k]->col;
				}
			if (x->kind == Y_SCALAR && r->nto == 1) {
				r->to_lines[0] = x->line;
				r->to_lines[1] = x->col;
			}
		} else {
			tf_pl_err_at(L, m, "add 'to: [HOOK]' (tpuflow hooks list)",
			             "the alert route has no 'to'");
		}
		if ((x = tf_pl_map_get(m, "when")) &&
		    !tf_pl_want_kind(L, x, Y_SCALAR, "'alerts.when'")) {
			int col, exact = tf_pl_scalar_exact(x, &col);
			struct tf_expr *e =
			    tf_expr_parse(x->str, L->file, x->line, col, exact, L->d);
			if (e && tf_expr_check(e, route_ref_type, L, L->file, L->d) == 0) {
				r->when = e;
				r->when_source = tf_xstrdup(x->str);
			} else {
				tf_expr_free(e);
			}
		}
	}
}

void tf_pl_alerts_free(struct tf_pipeline *p)
{
	for (size_t i = 0; i < p->nalerts; i++) {
		struct tf_alert_route *r = &p->alerts[i];
		for (size_t k = 0; k < r->non; k++)
			free(r->on[k]);
		for (size_t k = 0; k < r->nto; k++)
			free(r->to[k]);
		free(r->on);
		free(r->to);
		free(r->to_lines);
		free(r->when_source);
		tf_expr_free(r->when);
	}
	free(p->alerts);
}

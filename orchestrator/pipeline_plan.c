/* pipeline_plan.c — what the rest of the program asks of a loaded pipeline: params and steps
 * by name, a step's `with` rendered with references resolved, and the plan as JSON and as
 * Graphviz dot.
 */
#include "orchestrator/pipeline_int.h"

#include "common/common.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>

/* ---- lookups, rendering, plans ------------------------------------------------------ */

const struct tf_param *tf_pipeline_param(const struct tf_pipeline *p, const char *name)
{
	for (size_t i = 0; i < p->nparams; i++)
		if (p->params[i].name && !strcmp(p->params[i].name, name))
			return &p->params[i];
	return NULL;
}

int tf_pipeline_step_index(const struct tf_pipeline *p, const char *name)
{
	for (size_t i = 0; i < p->nsteps; i++)
		if (p->steps[i].name && !strcmp(p->steps[i].name, name))
			return (int)i;
	return -1;
}

const struct tf_with_value *tf_step_with(const struct tf_step *s, const char *key)
{
	for (size_t i = 0; i < s->nwith; i++)
		if (!strcmp(s->with[i].key, key))
			return &s->with[i];
	return NULL;
}

json_t *tf_pipeline_param_values(const struct tf_pipeline *p)
{
	json_t *arr = json_array();
	for (size_t i = 0; i < p->nparams; i++) {
		const struct tf_param *pa = &p->params[i];
		char *text = pa->text ? tf_xstrdup(pa->text)
		             : pa->value ? tf_template_value_text(pa->value)
		                         : NULL;
		json_array_append_new(arr, json_pack("{s:s, s:O?, s:s?, s:s}", "name", pa->name,
		                                     "value", pa->value, "text", text, "source",
		                                     pa->overridden ? "param" : "default"));
		free(text);
	}
	return arr;
}

json_t *tf_pipeline_lookup_param(void *ctx, const struct tf_ref *ref)
{
	const struct tf_pipeline *p = ctx;
	if (ref->kind != TF_REF_PARAM)
		return NULL;
	const struct tf_param *par = tf_pipeline_param(p, ref->name);
	if (par && par->text && ref->as_text)
		return json_string(par->text);
	return par && par->value ? json_incref(par->value) : NULL;
}

static json_t *render_value(const struct tf_with_value *w, tf_lookup_fn fn, void *ctx, int as_text,
                            char *err, size_t errlen)
{
	if (w->kind == TF_WITH_SCALAR && as_text && w->tmpl.whole_ref) {
		char *s = tf_template_render(&w->tmpl, fn, ctx, err, errlen);
		json_t *j = s ? json_string(s) : NULL;
		if (s && !j)
			j = json_stringn_nocheck(s, strlen(s));
		free(s);
		return j;
	}
	if (w->kind == TF_WITH_SCALAR) {
		int has_ref = 0;
		for (size_t i = 0; i < w->tmpl.nparts; i++)
			if (w->tmpl.parts[i].ref)
				has_ref = 1;
		if (!has_ref && w->plain) {
			struct ynode n = {.kind = Y_SCALAR, .style = YAML_PLAIN_SCALAR_STYLE};
			char *s = tf_template_render(&w->tmpl, NULL, NULL, err, errlen);
			n.str = s;
			n.len = strlen(s);
			json_t *j = tf_pl_scalar_json(&n);
			free(s);
			return j;
		}
		return tf_template_render_json(&w->tmpl, fn, ctx, err, errlen);
	}
	json_t *c = w->kind == TF_WITH_LIST ? json_array() : json_object();
	for (size_t i = 0; i < w->nitems; i++) {
		json_t *v = render_value(&w->items[i], fn, ctx, as_text, err, errlen);
		if (!v) {
			json_decref(c);
			return NULL;
		}
		if (w->kind == TF_WITH_LIST)
			json_array_append_new(c, v);
		else
			json_object_set_new(c, w->items[i].key, v);
	}
	return c;
}

json_t *tf_step_render_with(const struct tf_step *s, tf_lookup_fn fn, void *ctx, char *err,
                            size_t errlen)
{
	json_t *o = json_object();
	for (size_t i = 0; i < s->nwith; i++) {
		/* argv and env items end up as text: a number param in them keeps its source text
		 * (a whole `argv: ${params.list}` stays a list) */
		int as_text = s->with[i].kind != TF_WITH_SCALAR &&
		              (!strcmp(s->with[i].key, "argv") || !strcmp(s->with[i].key, "env"));
		json_t *v = render_value(&s->with[i], fn, ctx, as_text, err, errlen);
		if (!v) {
			json_decref(o);
			return NULL;
		}
		json_object_set_new(o, s->with[i].key, v);
	}
	return o;
}

json_t *tf_pipeline_plan_json(const struct tf_pipeline *p)
{
	json_t *levels = json_array();
	for (int l = 0; l < p->nlevels; l++)
		json_array_append_new(levels, json_array());
	json_t *steps = json_array();
	for (size_t a = 0; a < p->nsteps; a++) {
		const struct tf_step *s = &p->steps[p->topo ? p->topo[a] : a];
		json_t *needs = json_array();
		for (size_t k = 0; k < s->nneeds; k++)
			json_array_append_new(needs, json_string(p->steps[s->needs[k]].name));
		json_t *o =
		    json_pack("{s:s, s:s, s:i, s:o, s:s, s:b, s:i, s:f}", "name", s->name, "type",
		              tf_step_type_name(s->type), "level", s->level, "needs", needs,
		              "executor", tf_executor_name(s->executor), "cache", s->cache,
		              "retries", s->retries.limit, "timeout", s->timeout);
		if (s->accelerator)
			json_object_set_new(o, "accelerator", json_string(s->accelerator));
		if (s->when_source)
			json_object_set_new(o, "when", json_string(s->when_source));
		if (s->final) /* after every step of `steps`, whatever their outcome */
			json_object_set_new(o, "finally", json_true());
		json_array_append_new(steps, o);
		json_array_append_new(json_array_get(levels, (size_t)s->level),
		                      json_string(s->name));
	}
	json_t *params = json_object();
	for (size_t i = 0; i < p->nparams; i++)
		json_object_set_new(params, p->params[i].name,
		                    p->params[i].value ? json_incref(p->params[i].value)
		                                       : json_null());
	json_t *o =
	    json_pack("{s:s, s:s, s:o, s:o, s:o}", "file", p->path, "name", p->name ? p->name : "",
	              "params", params, "levels", levels, "steps", steps);
	if (p->storage)
		json_object_set_new(o, "storage", json_string(p->storage));
	return o;
}

static void dot_string(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			fputc('\\', f);
		if (*s == '\n')
			fputs("\\n", f);
		else
			fputc(*s, f);
	}
	fputc('"', f);
}

void tf_pipeline_plan_dot(const struct tf_pipeline *p, FILE *f)
{
	fputs("digraph ", f);
	dot_string(f, p->name ? p->name : "pipeline");
	fputs(" {\n  rankdir=LR;\n  node [shape=box, style=rounded];\n", f);
	for (int l = 0; l < p->nlevels; l++) {
		fputs("  { rank=same;", f);
		for (size_t i = 0; i < p->nsteps; i++)
			if (p->steps[i].level == l) {
				fputc(' ', f);
				dot_string(f, p->steps[i].name);
				fputc(';', f);
			}
		fputs(" }\n", f);
	}
	for (size_t i = 0; i < p->nsteps; i++) {
		const struct tf_step *s = &p->steps[i];
		char *label =
		    tf_xasprintf("%s\n%s%s%s%s", s->name, tf_step_type_name(s->type),
		                 s->accelerator ? " on " : "", s->accelerator ? s->accelerator : "",
		                 s->when ? "\n(conditional)" : "");
		fputs("  ", f);
		dot_string(f, s->name);
		fputs(" [label=", f);
		dot_string(f, label);
		fputs(s->when ? ", style=\"rounded,dashed\"];\n" : "];\n", f);
		free(label);
	}
	for (size_t i = 0; i < p->nsteps; i++)
		for (size_t k = 0; k < p->steps[i].nneeds; k++) {
			fputs("  ", f);
			dot_string(f, p->steps[p->steps[i].needs[k]].name);
			fputs(" -> ", f);
			dot_string(f, p->steps[i].name);
			fputs(";\n", f);
		}
	fputs("}\n", f);
}

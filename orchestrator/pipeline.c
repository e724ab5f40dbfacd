/* pipeline.c — loads a pipeline YAML file into struct tf_pipeline and checks it.
 *
 * Two stages. (1) YAML -> a small node tree, through libyaml's event parser, under hard
 * limits: file size, nesting depth, alias uses, and "materialised" nodes, i.e. the node count
 * with every alias expanded. An alias shares its anchor's subtree instead of copying it, and
 * each node knows its expanded size, so a billion-laughs document is refused after a few
 * dozen events without expanding anything. (2) The tree -> typed structs, reporting every
 * problem with its line:col: keys, types, durations, params and overrides, steps, `needs`,
 * cycles, the step-type schema, references and `when` expressions.
 *
 * Invariants: (a) every later walk of the tree touches at most TF_PIPELINE_MAX_NODES nodes;
 * (b) the semantic stage never stops at the first problem: a bad value is reported and the
 * walk goes on with the next key; (c) checks that depend on a sound DAG (upstream references,
 * levels) run only when the DAG is sound, so one mistake does not cascade.
 *
 * The loader is split by concern: pipeline_yaml.c (stage 1, and reading typed values from the
 * tree with errors at line:col), pipeline_schema.c (the step types' `with` schema, references,
 * `with` and `when`), pipeline_dag.c (`needs`, cycles, levels), pipeline_plan.c (lookups,
 * rendering `with`, plans); this file walks the document (params, defaults, steps, schedule)
 * and owns loading and freeing. pipeline_int.h holds what they share. */
#include "orchestrator/pipeline_int.h"

#include "accel/tpu.h"
#include "common/common.h"
#include "orchestrator/registry.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <yaml.h>

/* ---- stage 2 helpers: the loader, errors and scalar typing -------------------------- */

/* ---- names of enums and the step-type schema ---------------------------------------- */

static const char *const executor_names[] = {"inprocess", "local", "slurm", NULL};
static const char *const param_type_names[] = {"int", "float", "string", "bool", "list", NULL};

const char *tf_step_type_name(enum tf_step_type t)
{
	const struct tf_step_schema *sc = tf_step_schema(t);
	return sc ? sc->name : NULL;
}

const char *tf_executor_name(enum tf_executor_kind e)
{
	return (unsigned)e < TF_EXECUTOR_LAST ? executor_names[e] : NULL;
}

const char *tf_param_type_name(enum tf_param_type t)
{
	return (unsigned)t < TF_PARAM_LAST ? param_type_names[t] : NULL;
}

/* ---- accelerators ------------------------------------------------------------------- */

/* Checks an accelerator name and writes its canonical slice name ("v4:2x2x1" -> "v4-8").
 * The naming rules live with the slice model in accel/tpu.c. */
static int check_accelerator(const char *spec, char *canon, size_t canonlen, char *err,
                             size_t errlen)
{
	struct tf_tpu_slice sl;
	int rc = tf_tpu_slice_parse(spec, &sl, err, errlen);
	if (rc)
		return rc;
	snprintf(canon, canonlen, "%s", sl.name);
	return 0;
}

/* ---- params ------------------------------------------------------------------------- */

static int infer_param_type(const struct ynode *n, enum tf_param_type *t)
{
	long long i;
	double f;
	int b;
	if (n->kind == Y_SEQ)
		*t = TF_PARAM_LIST;
	else if (n->kind == Y_MAP)
		return -EINVAL;
	else if (tf_pl_is_plain(n) && !tf_pl_parse_bool_text(n->str, &b))
		*t = TF_PARAM_BOOL;
	else if (tf_pl_is_plain(n) && !tf_pl_parse_int_text(n->str, &i))
		*t = TF_PARAM_INT;
	else if (tf_pl_is_plain(n) && !tf_pl_parse_float_text(n->str, &f))
		*t = TF_PARAM_FLOAT;
	else
		*t = TF_PARAM_STRING;
	return 0;
}

/* Converts a YAML node to a param value of type t; NULL with a diagnostic when it does not
 * fit. */
static json_t *param_from_node(struct loader *L, const struct ynode *n, enum tf_param_type t,
                               const char *pname)
{
	long long i;
	double f;
	int b;
	if (t == TF_PARAM_LIST) {
		if (n->kind != Y_SEQ) {
			tf_pl_err_at(L, n, "write a list such as [1, 2, 3]",
			             "param '%s' is a list, its default must be a list", pname);
			return NULL;
		}
		json_t *arr = json_array();
		for (size_t k = 0; k < n->n; k++) {
			if (n->kids[k]->kind != Y_SCALAR) {
				tf_pl_err_at(L, n->kids[k], NULL,
				             "items of list param '%s' must be scalars, not %s",
				             pname, tf_pl_kind_name(n->kids[k]));
				json_decref(arr);
				return NULL;
			}
			json_array_append_new(arr, tf_pl_scalar_json(n->kids[k]));
		}
		return arr;
	}
	if (n->kind != Y_SCALAR) {
		tf_pl_err_at(L, n, NULL, "param '%s' is %s %s, its default cannot be %s", pname,
		             t == TF_PARAM_INT ? "an" : "a", param_type_names[t],
		             tf_pl_kind_name(n));
		return NULL;
	}
	switch (t) {
	case TF_PARAM_INT:
		if (tf_pl_is_plain(n) && !tf_pl_parse_int_text(n->str, &i))
			return json_integer(i);
		break;
	case TF_PARAM_FLOAT:
		if (tf_pl_is_plain(n) && !tf_pl_parse_float_text(n->str, &f))
			return json_real(f);
		break;
	case TF_PARAM_BOOL:
		if (tf_pl_is_plain(n) && !tf_pl_parse_bool_text(n->str, &b))
			return json_boolean(b);
		break;
	default: {
		json_t *s = json_stringn(n->str, n->len);
		if (s)
			return s;
		tf_pl_err_at(L, n, NULL, "param '%s': the default is not valid UTF-8", pname);
		return NULL;
	}
	}
	tf_pl_err_at(L, n,
	             t == TF_PARAM_BOOL
	                 ? "write true or false (in YAML 1.2 yes, no, on and off are "
	                   "strings; --param accepts them as booleans)"
	                 : NULL,
	             "param '%s' is %s %s, but its default '%.40s' is not", pname,
	             t == TF_PARAM_INT ? "an" : "a", param_type_names[t], n->str);
	return NULL;
}

/* Converts --param text to type t; NULL with err set on mismatch. */
static json_t *param_from_text(const char *v, enum tf_param_type t, char *err, size_t errlen)
{
	long long i;
	double f;
	switch (t) {
	case TF_PARAM_INT:
		if (!tf_pl_parse_int_text(v, &i))
			return json_integer(i);
		tf_errf(err, errlen, "expected an integer, got '%.40s'", v);
		return NULL;
	case TF_PARAM_FLOAT:
		if (!tf_pl_parse_float_text(v, &f))
			return json_real(f);
		tf_errf(err, errlen, "expected a number, got '%.40s'", v);
		return NULL;
	case TF_PARAM_BOOL:
		if (!strcmp(v, "true") || !strcmp(v, "yes") || !strcmp(v, "1") || !strcmp(v, "on"))
			return json_true();
		if (!strcmp(v, "false") || !strcmp(v, "no") || !strcmp(v, "0") || !strcmp(v, "off"))
			return json_false();
		tf_errf(err, errlen, "expected true or false, got '%.40s'", v);
		return NULL;
	case TF_PARAM_LIST: {
		if (v[0] == '[') {
			json_error_t je;
			json_t *arr = json_loads(v, 0, &je);
			if (!json_is_array(arr)) {
				json_decref(arr);
				tf_errf(err, errlen, "expected a JSON list such as [256,128]: %s",
				        je.text);
				return NULL;
			}
			size_t k;
			json_t *it;
			json_array_foreach(arr, k, it)
			{
				if (json_is_array(it) || json_is_object(it)) {
					json_decref(arr);
					tf_errf(err, errlen, "list items must be scalars");
					return NULL;
				}
			}
			return arr;
		}
		json_t *arr = json_array();
		const char *s = v;
		while (*v) { /* "a,b,c": items typed by their looks */
			const char *comma = strchr(s, ',');
			size_t n = comma ? (size_t)(comma - s) : strlen(s);
			char *item = tf_xmalloc(n + 1);
			memcpy(item, s, n);
			item[n] = '\0';
			int b;
			if (!tf_pl_parse_int_text(item, &i))
				json_array_append_new(arr, json_integer(i));
			else if (!tf_pl_parse_float_text(item, &f))
				json_array_append_new(arr, json_real(f));
			else if (!tf_pl_parse_bool_text(item, &b))
				json_array_append_new(arr, json_boolean(b));
			else {
				json_t *js = json_string(item);
				if (!js) {
					free(item);
					json_decref(arr);
					tf_errf(err, errlen, "the value is not valid UTF-8");
					return NULL;
				}
				json_array_append_new(arr, js);
			}
			free(item);
			if (!comma)
				break;
			s = comma + 1;
		}
		return arr;
	}
	default: {
		json_t *s = json_string(v);
		if (!s)
			tf_errf(err, errlen, "the value is not valid UTF-8");
		return s;
	}
	}
}

int tf_param_override_parse(const char *arg, struct tf_param_override *out)
{
	const char *eq = strchr(arg, '=');
	if (!eq || eq == arg)
		return -EINVAL;
	out->name = arg; /* the name runs up to the '=' (names cannot contain one) */
	out->value = eq + 1;
	return 0;
}

struct tf_param_override *tf_param_overrides_from_json(const json_t *obj, size_t *n)
{
	struct tf_param_override *ov =
	    tf_xcalloc((json_is_object(obj) ? json_object_size(obj) : 0) + 1, sizeof(*ov));
	const char *k;
	json_t *v;
	*n = 0;
	if (json_is_object(obj)) {
		json_object_foreach((json_t *)obj, k, v)
		{
			ov[*n].name = k;
			ov[(*n)++].value = json_string_value(v) ? json_string_value(v) : "";
		}
	}
	return ov;
}

static void load_params(struct loader *L, const struct ynode *m)
{
	struct tf_pipeline *p = L->p;
	if (tf_pl_want_kind(L, m, Y_MAP, "'params'"))
		return;
	if (m->n / 2 > TF_PIPELINE_MAX_PARAMS) {
		tf_pl_err_at(L, m, NULL, "too many params: %zu (the limit is %d)", m->n / 2,
		             TF_PIPELINE_MAX_PARAMS);
		return;
	}
	p->params = tf_xcalloc(m->n / 2 + 1, sizeof(*p->params));
	tf_pl_check_keys(L, m, NULL, "'params'");
	for (size_t i = 0; i + 1 < m->n; i += 2) {
		const struct ynode *k = m->kids[i], *v = m->kids[i + 1];
		if (k->kind != Y_SCALAR)
			continue;
		if (!tf_pl_valid_name(k->str)) {
			tf_pl_err_at(L, k, tf_pl_name_hint(k->str), "bad param name '%.60s'",
			             k->str);
			continue;
		}
		if (tf_pipeline_param(p, k->str))
			continue; /* duplicate, reported by check_keys */
		struct tf_param *par = &p->params[p->nparams];
		memset(par, 0, sizeof(*par));
		par->name = tf_xstrdup(k->str);
		par->line = k->line;
		par->col = k->col;
		par->type = TF_PARAM_STRING;
		const struct ynode *def = NULL;
		if (v->kind == Y_MAP) {
			static const char *const keys[] = {"type", "default", "description", NULL};
			char what[100];
			snprintf(what, sizeof(what), "param '%s'", k->str);
			tf_pl_check_keys(L, v, keys, what);
			const struct ynode *t = tf_pl_map_get(v, "type");
			def = tf_pl_map_get(v, "default");
			int ti;
			if (t && !tf_pl_get_enum(L, t, "param type", param_type_names, &ti))
				par->type = (enum tf_param_type)ti;
			else if (!t && def && infer_param_type(def, &par->type))
				par->type = TF_PARAM_STRING;
			const struct ynode *desc = tf_pl_map_get(v, "description");
			if (desc)
				par->description =
				    tf_pl_get_string(L, desc, "a param's 'description'");
		} else {
			def = v; /* shorthand: `epochs: 12` declares an int with that default */
			infer_param_type(v, &par->type);
		}
		if (def && !tf_pl_scalar_null(def))
			par->default_value = param_from_node(L, def, par->type, par->name);
		if (json_is_number(par->default_value))
			par->text = tf_xstrdup(def->str);
		par->value = par->default_value ? json_incref(par->default_value) : NULL;
		p->nparams++;
	}
}

static void apply_overrides(struct loader *L, const struct tf_param_override *ov, size_t nov)
{
	struct tf_pipeline *p = L->p;
	for (size_t i = 0; i < nov; i++) {
		size_t nlen = strcspn(ov[i].name, "=");
		char *name = tf_xmalloc(nlen + 1);
		memcpy(name, ov[i].name, nlen);
		name[nlen] = '\0';
		struct tf_param *par = (struct tf_param *)tf_pipeline_param(p, name);
		if (!par) {
			const char **names = tf_xcalloc(p->nparams + 1, sizeof(*names));
			for (size_t k = 0; k < p->nparams; k++)
				names[k] = p->params[k].name;
			const char *near = tf_diag_suggest(name, names);
			char hint[128];
			if (near)
				snprintf(hint, sizeof(hint), "did you mean '%s'?", near);
			else
				snprintf(hint, sizeof(hint), "declare it under 'params'");
			tf_diag_add(L->d, TF_DIAG_ERROR, L->file, 0, 0, hint,
			            "--param %s: the pipeline has no param '%s'", name, name);
			free(names);
			free(name);
			continue;
		}
		char err[200];
		json_t *v = param_from_text(ov[i].value, par->type, err, sizeof(err));
		if (!v) {
			tf_diag_add(L->d, TF_DIAG_ERROR, L->file, 0, 0, NULL,
			            "--param %s: param '%s' is %s %s: %s", name, name,
			            par->type == TF_PARAM_INT ? "an" : "a",
			            param_type_names[par->type], err);
		} else {
			json_decref(par->value);
			par->value = v;
			par->overridden = 1;
			free(par->text);
			par->text = json_is_number(v) ? tf_xstrdup(ov[i].value) : NULL;
		}
		free(name);
	}
	if (L->flags & TF_PIPELINE_ALLOW_UNSET)
		return;
	for (size_t i = 0; i < p->nparams; i++)
		if (!p->params[i].value)
			tf_diag_add(L->d, TF_DIAG_ERROR, L->file, p->params[i].line,
			            p->params[i].col,
			            "give it a 'default' or pass --param NAME=VALUE",
			            "param '%s' has no value", p->params[i].name);
}

/* ---- retries, defaults -------------------------------------------------------------- */

static void builtin_retries(struct tf_retry_policy *r)
{
	r->limit = 0;
	r->backoff = 10;
	r->factor = 2;
	r->max_backoff = 600;
	r->on = TF_RETRY_ON_ALL;
}

static void load_retries(struct loader *L, const struct ynode *n, struct tf_retry_policy *r)
{
	long long v;
	if (n->kind == Y_SCALAR) { /* shorthand: `retries: 3` */
		if (!tf_pl_get_int(L, n, "'retries'", 0, 1000, &v))
			r->limit = (int)v;
		return;
	}
	if (tf_pl_want_kind(L, n, Y_MAP, "'retries'"))
		return;
	static const char *const keys[] = {"limit", "backoff", "factor", "max_backoff", "on", NULL};
	tf_pl_check_keys(L, n, keys, "'retries'");
	const struct ynode *x;
	if ((x = tf_pl_map_get(n, "limit")) && !tf_pl_get_int(L, x, "'retries.limit'", 0, 1000, &v))
		r->limit = (int)v;
	if ((x = tf_pl_map_get(n, "backoff")))
		tf_pl_get_duration(L, x, "'retries.backoff'", &r->backoff);
	if ((x = tf_pl_map_get(n, "factor")))
		tf_pl_get_number(L, x, "'retries.factor'", 1, &r->factor);
	if ((x = tf_pl_map_get(n, "max_backoff")))
		tf_pl_get_duration(L, x, "'retries.max_backoff'", &r->max_backoff);
	if ((x = tf_pl_map_get(n, "on"))) {
		/* the classes `on` may name, error..infra, by their names in the one table */
		const char *names[TF_FAIL_INFRA - TF_FAIL_ERROR + 2] = {NULL};
		for (int k = TF_FAIL_ERROR; k <= TF_FAIL_INFRA; k++)
			names[k - TF_FAIL_ERROR] = tf_fail_class_name((enum tf_fail_class)k);
		unsigned on = 0;
		int c;
		if (x->kind == Y_SCALAR) {
			if (!tf_pl_get_enum(L, x, "failure class", names, &c))
				on |= 1u << (TF_FAIL_ERROR + c);
		} else if (!tf_pl_want_kind(L, x, Y_SEQ, "'retries.on'")) {
			for (size_t i = 0; i < x->n; i++)
				if (!tf_pl_get_enum(L, x->kids[i], "failure class", names, &c))
					on |= 1u << (TF_FAIL_ERROR + c);
		}
		r->on = on;
	}
}

/* ---- executor: slurm ----------------------------------------------------------------- */

#define SLURM_MAX_ARGS 32

/* A Slurm name (partition, account, qos): printable, no spaces, at most 128 bytes. */
static char *get_slurm_name(struct loader *L, const struct ynode *n, const char *what)
{
	char *v = tf_pl_get_string(L, n, what);
	if (!v)
		return NULL;
	int ok = v[0] && strlen(v) <= 128;
	for (const char *c = v; ok && *c; c++)
		ok = isgraph((unsigned char)*c) && *c != ',';
	if (!ok) {
		tf_pl_err_at(L, n, "a Slurm name has no spaces or commas", "bad %s '%.60s'", what,
		             v);
		free(v);
		return NULL;
	}
	return v;
}

static void slurm_opts_free(struct tf_slurm_opts *o)
{
	free(o->partition);
	free(o->account);
	free(o->qos);
	for (size_t i = 0; i < o->nargs; i++)
		free(o->args[i]);
	free(o->args);
	memset(o, 0, sizeof(*o));
}

/* Reads a `slurm:` mapping over *o (keys it gives replace what o had). */
static void load_slurm(struct loader *L, const struct ynode *m, struct tf_slurm_opts *o)
{
	static const char *const keys[] = {"partition", "account", "qos", "args", NULL};
	if (tf_pl_want_kind(L, m, Y_MAP, "'slurm'"))
		return;
	tf_pl_check_keys(L, m, keys, "'slurm'");
	const struct ynode *x;
	char **fields[] = {&o->partition, &o->account, &o->qos};
	for (size_t i = 0; i < 3; i++)
		if ((x = tf_pl_map_get(m, keys[i]))) {
			char what[32];
			snprintf(what, sizeof(what), "'slurm.%s'", keys[i]);
			char *v = get_slurm_name(L, x, what);
			if (v) {
				free(*fields[i]);
				*fields[i] = v;
			}
		}
	if ((x = tf_pl_map_get(m, "args")) && !tf_pl_want_kind(L, x, Y_SEQ, "'slurm.args'")) {
		if (x->n > SLURM_MAX_ARGS) {
			tf_pl_err_at(L, x, NULL, "'slurm.args' has %zu items (the limit is %d)",
			             x->n, SLURM_MAX_ARGS);
			return;
		}
		for (size_t i = 0; i < o->nargs; i++)
			free(o->args[i]);
		free(o->args);
		o->args = tf_xcalloc(x->n + 1, sizeof(char *));
		o->nargs = 0;
		for (size_t i = 0; i < x->n; i++) {
			const struct ynode *a = x->kids[i];
			if (tf_pl_want_kind(L, a, Y_SCALAR, "an item of 'slurm.args'"))
				continue;
			char why[300];
			if (strlen(a->str) > 256) {
				tf_pl_err_at(
				    L, a, NULL,
				    "'slurm.args' item '%.60s...' is longer than 256 bytes",
				    a->str);
				continue;
			}
			if (tf_slurm_arg_check(a->str, why, sizeof(why))) {
				tf_pl_err_at(L, a, NULL, "'slurm.args' item %s", why);
				continue;
			}
			o->args[o->nargs++] = tf_xstrdup(a->str);
		}
	}
}

static void slurm_opts_copy(struct tf_slurm_opts *to, const struct tf_slurm_opts *from)
{
	to->partition = from->partition ? tf_xstrdup(from->partition) : NULL;
	to->account = from->account ? tf_xstrdup(from->account) : NULL;
	to->qos = from->qos ? tf_xstrdup(from->qos) : NULL;
	to->nargs = from->nargs;
	to->args = from->nargs ? tf_xcalloc(from->nargs + 1, sizeof(char *)) : NULL;
	for (size_t i = 0; i < from->nargs; i++)
		to->args[i] = tf_xstrdup(from->args[i]);
}

int tf_storage_shared(const char *url)
{
	if (!url)
		return 0;
	if (!strncmp(url, "s3://", 5))
		return 1;
	const char *path = !strncmp(url, "file://", 7) ? url + 7 : url;
	const char *shared = getenv("TPUFLOW_SHARED_STORAGE");
	if (!shared || path[0] != '/')
		return 0;
	char *list = tf_xstrdup(shared), *save = NULL;
	int ok = 0;
	for (char *d = strtok_r(list, ":", &save); d && !ok; d = strtok_r(NULL, ":", &save)) {
		size_t n = strlen(d);
		while (n > 1 && d[n - 1] == '/')
			d[--n] = '\0';
		ok = n && !strncmp(path, d, n) && (path[n] == '/' || !path[n] || n == 1);
	}
	free(list);
	return ok;
}

/* Steps on Slurm run on other machines: the run's storage must be one they all reach. */
static void check_slurm_storage(struct loader *L, const struct ynode *at, const char *what)
{
	const char *u = L->p->storage;
	if (tf_storage_shared(u))
		return;
	tf_pl_err_at(
	    L, at,
	    "add 'storage: s3://BUCKET/PREFIX' to the pipeline, or list the shared directory of "
	    "a file:// storage in TPUFLOW_SHARED_STORAGE (docs/slurm.md)",
	    "%s runs on Slurm, but the run's storage %s%.80s%s is not one every node can reach",
	    what, u ? "'" : "", u ? u : "(the state home's objects/)", u ? "'" : "");
}

/* `priority` (0..9) and `project` (a name) of map m, where given: the scheduling class of
 * train slices. `what` prefixes the key in messages ("'defaults." or "'"). */
static void load_class(struct loader *L, const struct ynode *m, const char *what, int *priority,
                       char **project)
{
	const struct ynode *x;
	char key[64];
	long long v;
	snprintf(key, sizeof(key), "%spriority'", what);
	if ((x = tf_pl_map_get(m, "priority")) && !tf_pl_get_int(L, x, key, 0, 9, &v))
		*priority = (int)v;
	snprintf(key, sizeof(key), "%sproject'", what);
	char *pr = (x = tf_pl_map_get(m, "project")) ? tf_pl_get_string(L, x, key) : NULL;
	if (pr && !tf_pl_valid_name(pr)) {
		tf_pl_err_at(L, x, tf_pl_name_hint(pr), "bad project name '%.60s'", pr);
		free(pr);
	} else if (pr) {
		free(*project);
		*project = pr;
	}
}

/* `log_max: 16M`: a size of at least 4096 bytes (tf_exec_size_parse). */
static void get_log_max(struct loader *L, const struct ynode *n, uint64_t *out)
{
	if (tf_pl_want_kind(L, n, Y_SCALAR, "'log_max'"))
		return;
	if (tf_exec_size_parse(n->str, out))
		tf_pl_err_at(L, n, "write bytes or a size such as 512K, 16M, 1G (at least 4096)",
		             "'log_max': bad size '%.40s'", n->str);
}

static void load_defaults(struct loader *L, const struct ynode *m)
{
	struct tf_step_defaults *d = &L->p->defaults;
	if (tf_pl_want_kind(L, m, Y_MAP, "'defaults'"))
		return;
	static const char *const keys[] = {"retries", "timeout", "executor", "cache", "slurm",
	                                   "priority", "project", "log_max", NULL};
	tf_pl_check_keys(L, m, keys, "'defaults'");
	const struct ynode *x;
	int e;
	if ((x = tf_pl_map_get(m, "retries")))
		load_retries(L, x, &d->retries);
	if ((x = tf_pl_map_get(m, "timeout")))
		tf_pl_get_duration(L, x, "'timeout'", &d->timeout);
	if ((x = tf_pl_map_get(m, "log_max")))
		get_log_max(L, x, &d->log_max);
	if ((x = tf_pl_map_get(m, "executor")) &&
	    !tf_pl_get_enum(L, x, "executor", executor_names, &e)) {
		d->executor = (enum tf_executor_kind)e;
		d->has_executor = 1;
		L->defaults_executor = x;
	}
	if ((x = tf_pl_map_get(m, "slurm")))
		load_slurm(L, x, &d->slurm);
	if ((x = tf_pl_map_get(m, "cache")) && !tf_pl_get_bool(L, x, "'cache'", &d->cache))
		d->has_cache = 1;
	load_class(L, m, "'defaults.", &d->priority, &d->project);
}

/* ---- steps -------------------------------------------------------------------------- */

static const char *const step_keys[] = {"name",     "type",     "needs",        "with",
                                        "when",     "retries",  "timeout",      "accelerator",
                                        "executor", "cache",    "cache_inputs", "description",
                                        "slurm",    "priority", "project",      "log_max",
                                        NULL};

/* `cache_inputs: [files]`: paths relative to the pipeline file's directory, made absolute so
 * a resume from another directory hashes the same files. */
static void load_cache_inputs(struct loader *L, struct tf_step *s, const struct ynode *v,
                              const char *what)
{
	if (tf_pl_want_kind(L, v, Y_SEQ, "'cache_inputs'"))
		return;
	if (!s->cache) {
		tf_pl_err_at(L, v, "add 'cache: true' to the step",
		             "%s: 'cache_inputs' has no effect on a step that is not cached", what);
		return;
	}
	char *dir = tf_xstrdup(L->p->path ? L->p->path : ".");
	char *slash = strrchr(dir, '/');
	if (slash)
		slash[slash == dir ? 1 : 0] = '\0';
	else
		snprintf(dir, strlen(dir) + 1, ".");
	char *absdir = realpath(dir, NULL);
	s->cache_inputs = tf_xcalloc(v->n + 1, sizeof(char *));
	for (size_t i = 0; i < v->n; i++) {
		const struct ynode *it = v->kids[i];
		if (tf_pl_want_kind(L, it, Y_SCALAR, "an item of 'cache_inputs'"))
			continue;
		if (!it->str[0] || memchr(it->str, '\0', it->len)) {
			tf_pl_err_at(L, it,
			             "name a file, relative to the pipeline file's directory",
			             "%s: empty or binary path in 'cache_inputs'", what);
			continue;
		}
		s->cache_inputs[s->ncache_inputs++] =
		    it->str[0] == '/' ? tf_xstrdup(it->str)
		                      : tf_xasprintf("%s/%s", absdir ? absdir : dir, it->str);
	}
	free(absdir);
	free(dir);
}

static void load_step(struct loader *L, size_t idx, const struct ynode *m)
{
	struct tf_pipeline *p = L->p;
	struct tf_step *s = &p->steps[idx];
	struct stepx *x = &L->sx[idx];
	x->node = m;
	s->line = m->line;
	s->col = m->col;
	s->retries = p->defaults.retries;
	s->timeout = p->defaults.timeout;
	s->cache = p->defaults.cache;
	s->priority = p->defaults.priority;
	s->log_max = p->defaults.log_max;
	s->project = p->defaults.project ? tf_xstrdup(p->defaults.project) : NULL;
	if (tf_pl_want_kind(L, m, Y_MAP, "a step"))
		return;
	const struct ynode *n = tf_pl_map_get(m, "name");
	char what[100];
	if (n && n->kind == Y_SCALAR)
		snprintf(what, sizeof(what), "step '%.60s'", n->str);
	else
		snprintf(what, sizeof(what), "step %zu", idx + 1);
	tf_pl_check_keys(L, m, step_keys, what);
	int name_ok = 0, type_ok = 0, t;
	if (!n) {
		tf_pl_err_at(L, m, "add 'name: NAME'", "%s has no 'name'", what);
	} else if (!tf_pl_want_kind(L, n, Y_SCALAR, "a step's 'name'")) {
		if (!tf_pl_valid_name(n->str)) {
			tf_pl_err_at(L, n, tf_pl_name_hint(n->str), "bad step name '%.60s'",
			             n->str);
		} else {
			s->name = tf_xstrdup(n->str);
			s->line = n->line;
			s->col = n->col;
			x->name_node = n;
			name_ok = 1;
		}
	}
	const struct ynode *ty = tf_pl_map_get(m, "type");
	if (!ty)
		tf_pl_err_at(L, m,
		             "add 'type:' (data_prep, train, evaluate, register, deploy or shell)",
		             "%s has no 'type'", what);
	else if (!tf_pl_get_enum(L, ty, "step type", tf_step_kind_names(), &t)) {
		s->type = (enum tf_step_type)t;
		type_ok = 1;
	}
	x->ok = name_ok && type_ok;

	const struct ynode *v;
	if ((v = tf_pl_map_get(m, "retries")))
		load_retries(L, v, &s->retries);
	if ((v = tf_pl_map_get(m, "timeout")))
		tf_pl_get_duration(L, v, "'timeout'", &s->timeout);
	if ((v = tf_pl_map_get(m, "log_max")))
		get_log_max(L, v, &s->log_max);
	int cache_set = 0;
	if ((v = tf_pl_map_get(m, "cache")) && !tf_pl_get_bool(L, v, "'cache'", &s->cache))
		cache_set = 1;
	/* A shell step runs a program whose own files the cache key cannot see (edit the script
	 * and the key stays the same): it is cached only when asked. */
	if (type_ok && s->type == TF_STEP_SHELL && !cache_set && !p->defaults.has_cache)
		s->cache = 0;
	if ((v = tf_pl_map_get(m, "cache_inputs")))
		load_cache_inputs(L, s, v, what);
	/* A shell step runs a program: `defaults.executor: inprocess` does not apply to it (it
	 * stays `local`); saying `executor: inprocess` on the step itself is an error. */
	/* register and deploy write the registry: they stay in the coordinator, whatever
	 * `defaults.executor` says; naming `executor: slurm` on one is an error. */
	int e = TF_EXECUTOR_INPROCESS;
	int coord_only = type_ok && (s->type == TF_STEP_REGISTER || s->type == TF_STEP_DEPLOY);
	const struct ynode *exec_at = L->defaults_executor;
	if (p->defaults.has_executor)
		e = p->defaults.executor;
	if (coord_only && e == TF_EXECUTOR_SLURM)
		e = TF_EXECUTOR_INPROCESS;
	if (type_ok && s->type == TF_STEP_SHELL && e == TF_EXECUTOR_INPROCESS)
		e = TF_EXECUTOR_LOCAL;
	if ((v = tf_pl_map_get(m, "executor")) &&
	    !tf_pl_get_enum(L, v, "executor", executor_names, &e)) {
		exec_at = v;
		if (coord_only && e == TF_EXECUTOR_SLURM)
			tf_pl_err_at(
			    L, v, "leave 'executor' out: register and deploy run in tpuflow itself",
			    "%s: a %s step cannot run on Slurm", what, tf_step_type_name(s->type));
		else if (type_ok && s->type == TF_STEP_SHELL && e == TF_EXECUTOR_INPROCESS)
			tf_pl_err_at(L, v,
			             "set 'executor: local' on this step (or leave 'executor' out)",
			             "%s: a shell step runs a program and cannot use the inprocess "
			             "executor",
			             what);
	}
	s->executor = (enum tf_executor_kind)e;
	if (e == TF_EXECUTOR_SLURM) {
		slurm_opts_copy(&s->slurm, &p->defaults.slurm);
		if ((v = tf_pl_map_get(m, "slurm")))
			load_slurm(L, v, &s->slurm);
		check_slurm_storage(L, exec_at ? exec_at : m, what);
	} else if ((v = tf_pl_map_get(m, "slurm"))) {
		tf_pl_err_at(L, v, "add 'executor: slurm' to the step, or remove 'slurm:'",
		             "%s: 'slurm' applies only to steps with 'executor: slurm'", what);
	}
	if ((v = tf_pl_map_get(m, "accelerator")) &&
	    !tf_pl_want_kind(L, v, Y_SCALAR, "'accelerator'")) {
		char canon[64], err[256];
		if (check_accelerator(v->str, canon, sizeof(canon), err, sizeof(err)))
			tf_pl_err_at(L, v, NULL, "%s", err);
		else
			s->accelerator = tf_xstrdup(canon);
	}
	if ((v = tf_pl_map_get(m, "description")))
		tf_pl_want_kind(L, v, Y_SCALAR, "a step's 'description'");
	load_class(L, m, "'", &s->priority, &s->project);
	if ((v = tf_pl_map_get(m, "with")) && !tf_pl_want_kind(L, v, Y_MAP, "'with'"))
		x->with_node = v;
	if ((v = tf_pl_map_get(m, "when")) && !tf_pl_want_kind(L, v, Y_SCALAR, "'when'")) {
		x->when_node = v;
		s->when_source = tf_xstrdup(v->str);
	}
}

/* Declared outputs and metrics: the schema's, or for shell the names under with.outputs /
 * with.metrics. */
static void declare_outputs(struct loader *L, size_t idx)
{
	struct tf_step *s = &L->p->steps[idx];
	const struct tf_step_schema *sc = tf_step_schema(s->type);
	const char *const *lists[2] = {sc->outputs, sc->metrics};
	char ***dst[2] = {&s->outputs, &s->metrics};
	size_t *ndst[2] = {&s->noutputs, &s->nmetrics};
	for (int k = 0; k < 2; k++) {
		if (!sc->dynamic) {
			size_t n = 0;
			while (lists[k][n])
				n++;
			*dst[k] = tf_xcalloc(n + 1, sizeof(char *));
			for (size_t i = 0; i < n; i++)
				(*dst[k])[i] = tf_xstrdup(lists[k][i]);
			*ndst[k] = n;
			continue;
		}
		const struct ynode *l =
		    tf_pl_map_get(L->sx[idx].with_node, k ? "metrics" : "outputs");
		*dst[k] = tf_xcalloc((l && l->kind == Y_SEQ ? l->n : 0) + 1, sizeof(char *));
		if (!l || l->kind != Y_SEQ)
			continue;
		for (size_t i = 0; i < l->n; i++) {
			const struct ynode *it = l->kids[i];
			if (it->kind != Y_SCALAR)
				continue; /* reported by the with checks */
			if (!tf_pl_valid_name(it->str)) {
				tf_pl_err_at(L, it, "use letters, digits, '_' and '-'",
				             "bad %s name '%.60s'", k ? "metric" : "output",
				             it->str);
				continue;
			}
			(*dst[k])[(*ndst[k])++] = tf_xstrdup(it->str);
		}
	}
}

/* ---- schedule ------------------------------------------------------------------------ */

static const char *const concurrency_names[] = {"allow", "forbid", "replace", NULL};
static const char *const catchup_names[] = {"none", "latest", "all", NULL};

const char *tf_concurrency_name(enum tf_sched_concurrency c)
{
	return c < TF_CONCURRENCY_LAST ? concurrency_names[c] : NULL;
}

const char *tf_catchup_name(enum tf_sched_catchup c)
{
	return c < TF_CATCHUP_LAST ? catchup_names[c] : NULL;
}

/* The cron text of node n: a bad part is reported at its own column (quoted scalars start
 * one column after the quote). */
static void load_cron(struct loader *L, const struct ynode *n, struct tf_pipeline_schedule *sc)
{
	if (tf_pl_want_kind(L, n, Y_SCALAR, "'schedule.cron'"))
		return;
	char err[256];
	int col = 1;
	if (tf_cron_parse(n->str, &sc->spec, &col, err, sizeof(err))) {
		int quoted = n->style == YAML_SINGLE_QUOTED_SCALAR_STYLE ||
		             n->style == YAML_DOUBLE_QUOTED_SCALAR_STYLE;
		struct ynode at = *n;
		if (n->line == n->end_line || !strchr(n->str, '\n'))
			at.col = n->col + quoted + col - 1;
		tf_pl_err_at(
		    L, &at,
		    "five fields: minute hour day-of-month month day-of-week, e.g. '0 3 * * *' "
		    "or '*/15 9-17 * * mon-fri'; or @hourly, @daily, @weekly, @monthly, @yearly",
		    "bad cron schedule: %s", err);
		return;
	}
	sc->cron = tf_xstrdup(n->str);
}

static void load_schedule(struct loader *L, const struct ynode *n)
{
	struct tf_pipeline_schedule *sc = tf_xcalloc(1, sizeof(*sc));
	L->p->schedule = sc;
	sc->line = n->line;
	sc->col = n->col;
	sc->concurrency = TF_CONCURRENCY_FORBID;
	sc->catchup = TF_CATCHUP_LATEST;
	sc->catchup_max = 10;
	sc->timezone = tf_xstrdup("UTC");
	if (n->kind == Y_SCALAR) { /* shorthand: `schedule: "0 3 * * *"` */
		load_cron(L, n, sc);
		return;
	}
	if (tf_pl_want_kind(L, n, Y_MAP, "'schedule'"))
		return;
	static const char *const keys[] = {
	    "cron", "timezone", "concurrency", "catchup", "catchup_max", "starting_deadline", NULL};
	tf_pl_check_keys(L, n, keys, "'schedule'");
	const struct ynode *x;
	int e;
	long long v;
	if (!(x = tf_pl_map_get(n, "cron")))
		tf_pl_err_at(L, n, "add 'cron: \"0 3 * * *\"' (or a macro such as @daily)",
		             "'schedule' has no 'cron'");
	else
		load_cron(L, x, sc);
	if ((x = tf_pl_map_get(n, "timezone")) &&
	    !tf_pl_want_kind(L, x, Y_SCALAR, "'schedule.timezone'")) {
		char err[300];
		if (tf_cron_tz_check(x->str, err, sizeof(err))) {
			tf_pl_err_at(L, x, NULL, "%s", err);
		} else {
			free(sc->timezone);
			sc->timezone = tf_xstrdup(x->str);
		}
	}
	if ((x = tf_pl_map_get(n, "concurrency")) &&
	    !tf_pl_get_enum(L, x, "concurrency policy", concurrency_names, &e))
		sc->concurrency = (enum tf_sched_concurrency)e;
	if ((x = tf_pl_map_get(n, "catchup")) &&
	    !tf_pl_get_enum(L, x, "catch-up policy", catchup_names, &e))
		sc->catchup = (enum tf_sched_catchup)e;
	if ((x = tf_pl_map_get(n, "catchup_max")) &&
	    !tf_pl_get_int(L, x, "'schedule.catchup_max'", 1, 1000, &v))
		sc->catchup_max = (int)v;
	if ((x = tf_pl_map_get(n, "starting_deadline")))
		tf_pl_get_duration(L, x, "'schedule.starting_deadline'", &sc->starting_deadline);
}

/* ---- the whole file ----------------------------------------------------------------- */

static const char *const top_keys[] = {"name",    "description", "params",   "defaults",
                                       "storage", "steps",       "finally",  "priority",
                                       "project", "schedule",    "alerts",   NULL};

static void load_pipeline(struct loader *L, const struct ynode *root,
                          const struct tf_param_override *ov, size_t nov)
{
	struct tf_pipeline *p = L->p;
	builtin_retries(&p->defaults.retries);
	p->defaults.cache = 1; /* results are reused unless `cache: false` */
	p->defaults.priority = p->priority = -1;
	if (!root || tf_pl_scalar_null(root)) {
		tf_diag_add(L->d, TF_DIAG_ERROR, L->file, root ? root->line : 1,
		            root ? root->col : 1, "start with 'name:' and 'steps:'",
		            "the pipeline file is empty");
		return;
	}
	if (root->kind != Y_MAP) {
		tf_pl_err_at(L, root, "start with 'name:' and 'steps:'",
		             "a pipeline must be a mapping, not %s", tf_pl_kind_name(root));
		return;
	}
	tf_pl_check_keys(L, root, top_keys, "the pipeline");
	const struct ynode *x;
	if (!(x = tf_pl_map_get(root, "name")))
		tf_pl_err_at(L, root, "add 'name: NAME' at the top", "the pipeline has no 'name'");
	else if ((p->name = tf_pl_get_string(L, x, "'name'")) && !tf_pl_valid_name(p->name))
		tf_pl_err_at(L, x, tf_pl_name_hint(p->name), "bad pipeline name '%.60s'", p->name);
	if ((x = tf_pl_map_get(root, "description")))
		p->description = tf_pl_get_string(L, x, "'description'");
	if ((x = tf_pl_map_get(root, "storage")) &&
	    (p->storage = tf_pl_get_string(L, x, "'storage'"))) {
		const char *sep = strstr(p->storage, "://");
		if (sep && strncmp(p->storage, "file://", 7) && strncmp(p->storage, "s3://", 5))
			tf_pl_err_at(L, x, "use file:///DIR, s3://BUCKET/PREFIX or a plain path",
			             "unsupported storage URL '%.60s'", p->storage);
	}
	load_class(L, root, "'", &p->priority, &p->project);
	if ((x = tf_pl_map_get(root, "schedule")))
		load_schedule(L, x);
	if ((x = tf_pl_map_get(root, "params")))
		load_params(L, x);
	apply_overrides(L, ov, nov);
	if ((x = tf_pl_map_get(root, "defaults")))
		load_defaults(L, x);

	const struct ynode *steps = tf_pl_map_get(root, "steps");
	if (!steps) {
		tf_pl_err_at(L, root, "add a 'steps:' list", "the pipeline has no 'steps'");
		return;
	}
	if (tf_pl_want_kind(L, steps, Y_SEQ, "'steps'"))
		return;
	if (steps->n == 0) {
		tf_pl_err_at(L, steps, "add at least one step", "the pipeline has no steps");
		return;
	}
	const struct ynode *fin = tf_pl_map_get(root, "finally");
	if (fin && (tf_pl_scalar_null(fin) || tf_pl_want_kind(L, fin, Y_SEQ, "'finally'")))
		fin = NULL;
	size_t nfin = fin ? fin->n : 0;
	if (steps->n + nfin > TF_PIPELINE_MAX_STEPS) {
		tf_pl_err_at(L, steps, NULL, "too many steps: %zu (the limit is %d)",
		             steps->n + nfin, TF_PIPELINE_MAX_STEPS);
		return;
	}
	p->nmain = steps->n;
	p->nsteps = steps->n + nfin;
	p->steps = tf_xcalloc(p->nsteps, sizeof(*p->steps));
	L->sx = tf_xcalloc(p->nsteps, sizeof(*L->sx));
	for (size_t i = 0; i < p->nsteps; i++) {
		p->steps[i].final = i >= p->nmain;
		load_step(L, i, i < p->nmain ? steps->kids[i] : fin->kids[i - p->nmain]);
	}

	/* duplicate names: sorted by (name, index), so each later one follows its first; the
	 * later one is reported and loses its name */
	L->sidx = tf_xcalloc(p->nsteps + 1, sizeof(*L->sidx));
	for (size_t i = 0; i < p->nsteps; i++)
		if (p->steps[i].name)
			L->sidx[L->nsidx++] = (struct nameidx){p->steps[i].name, i};
	qsort(L->sidx, L->nsidx, sizeof(*L->sidx), tf_pl_cmp_nameidx);
	size_t kept = 0;
	for (size_t a = 0, first = 0; a < L->nsidx; a++) {
		if (a == 0 || strcmp(L->sidx[a].name, L->sidx[first].name)) {
			first = a;
			L->sidx[kept++] = L->sidx[a];
			continue;
		}
		size_t i = L->sidx[a].idx, j = L->sidx[first].idx;
		char hint[96];
		snprintf(hint, sizeof(hint), "the first is at line %d, column %d; rename one",
		         p->steps[j].line, p->steps[j].col);
		tf_pl_err_at(L, L->sx[i].name_node, hint, "duplicate step name '%s'",
		             p->steps[i].name);
		free(p->steps[i].name);
		p->steps[i].name = NULL;
		L->sx[i].ok = 0;
	}
	L->nsidx = kept;
	for (size_t i = 0; i < p->nsteps; i++)
		if (L->sx[i].ok)
			declare_outputs(L, i);

	L->dag_ok = 1;
	for (size_t i = 0; i < p->nsteps; i++) {
		if (!p->steps[i].name) {
			L->dag_ok = 0;
			continue;
		}
		const struct ynode *needs = tf_pl_map_get(L->sx[i].node, "needs");
		if (needs)
			tf_pl_resolve_needs(L, i, needs);
	}
	for (size_t i = 0; i < p->nsteps; i++)
		if (!p->steps[i].needs)
			p->steps[i].needs = tf_xcalloc(1, sizeof(size_t));
	/* a finally step needs every step of `steps` (besides the finally steps it names) */
	for (size_t i = p->nmain; i < p->nsteps; i++) {
		struct tf_step *s = &p->steps[i];
		s->needs = tf_xrealloc(s->needs, (s->nneeds + p->nmain + 1) * sizeof(size_t));
		L->sx[i].need_nodes = tf_xrealloc(L->sx[i].need_nodes, (s->nneeds + p->nmain + 1) *
		                                                           sizeof(*L->sx[i].need_nodes));
		for (size_t j = 0; j < p->nmain; j++) {
			int dup = 0;
			for (size_t k = 0; k < s->nneeds && !dup; k++)
				dup = s->needs[k] == j;
			if (dup)
				continue;
			L->sx[i].need_nodes[s->nneeds] = L->sx[i].node;
			s->needs[s->nneeds++] = j;
		}
	}
	/* cycles are searched over the needs that resolved, so a typo elsewhere does not hide
	 * one; upstream checks need every need resolved and no cycle */
	int needs_ok = L->dag_ok;
	L->dag_ok = 1;
	tf_pl_find_cycles(L);
	if (L->dag_ok)
		tf_pl_compute_order(L);
	L->dag_ok = L->dag_ok && needs_ok;

	for (size_t i = 0; i < p->nsteps; i++) {
		if (!L->sx[i].ok)
			continue;
		L->cur_step = i;
		tf_pl_load_with(L, i);
		tf_pl_load_when(L, i);
	}
	if ((x = tf_pl_map_get(root, "alerts"))) /* after the steps: a `when` may name them */
		tf_pl_load_alerts(L, x);
}

static void free_with_value(struct tf_with_value *w)
{
	free(w->key);
	tf_template_release(&w->tmpl);
	for (size_t i = 0; i < w->nitems; i++)
		free_with_value(&w->items[i]);
	free(w->items);
}

void tf_pipeline_free(struct tf_pipeline *p)
{
	if (!p)
		return;
	free(p->path);
	free(p->source);
	free(p->name);
	free(p->description);
	free(p->storage);
	free(p->project);
	free(p->defaults.project);
	tf_pl_alerts_free(p);
	if (p->schedule) {
		free(p->schedule->cron);
		free(p->schedule->timezone);
		free(p->schedule);
	}
	for (size_t i = 0; i < p->nparams; i++) {
		free(p->params[i].name);
		free(p->params[i].description);
		free(p->params[i].text);
		json_decref(p->params[i].default_value);
		json_decref(p->params[i].value);
	}
	free(p->params);
	for (size_t i = 0; i < p->nsteps; i++) {
		struct tf_step *s = &p->steps[i];
		free(s->name);
		free(s->needs);
		for (size_t k = 0; k < s->nwith; k++)
			free_with_value(&s->with[k]);
		free(s->with);
		free(s->when_source);
		tf_expr_free(s->when);
		free(s->accelerator);
		for (size_t k = 0; k < s->ncache_inputs; k++)
			free(s->cache_inputs[k]);
		free(s->cache_inputs);
		slurm_opts_free(&s->slurm);
		free(s->project);
		for (size_t k = 0; k < s->noutputs; k++)
			free(s->outputs[k]);
		free(s->outputs);
		for (size_t k = 0; k < s->nmetrics; k++)
			free(s->metrics[k]);
		free(s->metrics);
	}
	free(p->steps);
	free(p->topo);
	slurm_opts_free(&p->defaults.slurm);
	free(p);
}

int tf_pipeline_load_buffer(const char *name, const char *buf, size_t len,
                            const struct tf_param_override *ov, size_t nov, unsigned flags,
                            struct tf_pipeline **out, struct tf_diag_list *diags)
{
	int rc = 0;
	size_t errors_before = diags->nerrors;
	if (len > TF_PIPELINE_MAX_BYTES) {
		tf_diag_add(diags, TF_DIAG_ERROR, name, 0, 0,
		            "split it or remove generated content",
		            "file too large: %zu bytes (pipelines are limited to %u bytes)", len,
		            TF_PIPELINE_MAX_BYTES);
		return -EFBIG;
	}
	struct ybuild b = {.file = name, .d = diags};
	rc = tf_pl_build_tree(&b, buf, len);
	if (rc) {
		tf_pl_arena_free(&b.arena);
		free(b.anchors);
		return rc == -E2BIG ? -E2BIG : -EINVAL;
	}
	struct tf_pipeline *p = tf_xcalloc(1, sizeof(*p));
	p->path = tf_xstrdup(name);
	p->source = tf_xmalloc(len + 1);
	memcpy(p->source, buf, len);
	p->source[len] = '\0';
	p->source_len = len;
	struct loader L = {.file = name, .d = diags, .p = p, .flags = flags};
	load_pipeline(&L, b.root, ov, nov);
	for (size_t i = 0; i < p->nsteps && L.sx; i++)
		free(L.sx[i].need_nodes);
	free(L.sx);
	free(L.sidx);
	free(L.upstream);
	tf_pl_arena_free(&b.arena);
	free(b.anchors);
	if (diags->nerrors > errors_before) {
		tf_pipeline_free(p);
		return -EINVAL;
	}
	*out = p;
	return 0;
}

int tf_pipeline_load(const char *path, const struct tf_param_override *ov, size_t nov,
                     unsigned flags, struct tf_pipeline **out, struct tf_diag_list *diags)
{
	struct stat st;
	if (stat(path, &st)) {
		int e = errno;
		tf_diag_add(diags, TF_DIAG_ERROR, path, 0, 0, NULL, "cannot read the file: %s",
		            strerror(e));
		return -e;
	}
	if (S_ISDIR(st.st_mode)) {
		tf_diag_add(diags, TF_DIAG_ERROR, path, 0, 0, "name a .yaml file",
		            "is a directory");
		return -EISDIR;
	}
	/* refuse by size before reading a byte, so a 100 MB file costs nothing */
	if (S_ISREG(st.st_mode) && (uintmax_t)st.st_size > TF_PIPELINE_MAX_BYTES) {
		tf_diag_add(diags, TF_DIAG_ERROR, path, 0, 0,
		            "split it or remove generated content",
		            "file too large: %jd bytes (pipelines are limited to %u bytes)",
		            (intmax_t)st.st_size, TF_PIPELINE_MAX_BYTES);
		return -EFBIG;
	}
	char *buf = NULL;
	size_t len = 0;
	int rc = tf_read_file(path, TF_PIPELINE_MAX_BYTES, &buf, &len);
	if (rc == -EFBIG) {
		tf_diag_add(diags, TF_DIAG_ERROR, path, 0, 0,
		            "split it or remove generated content",
		            "file too large: more than %u bytes", TF_PIPELINE_MAX_BYTES);
		return rc;
	}
	if (rc) {
		tf_diag_add(diags, TF_DIAG_ERROR, path, 0, 0, NULL, "cannot read the file: %s",
		            strerror(-rc));
		return rc;
	}
	rc = tf_pipeline_load_buffer(path, buf, len, ov, nov, flags, out, diags);
	free(buf);
	return rc;
}

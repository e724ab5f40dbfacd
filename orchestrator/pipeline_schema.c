/* pipeline_schema.c — the step types' `with` schema (keys, types, allowed values, ranges,
 * outputs, metrics) and the checks of each step's `with` and `when` against it: references
 * to params and to upstream outputs/metrics, their static types, values and ranges.
 */
#include "orchestrator/pipeline_int.h"
#include "orchestrator/kinds.h"
#include "orchestrator/registry.h"
#include "ml/dataset.h"
#include "ml/optim.h"
#include "ml/source.h"
#include "ml/steps.h"
#include "ml/train.h"

#include "common/buf.h"
#include "common/common.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

/* The allowed words of ENUM rows are the lists of the modules that parse them (ml/). */

/* Rows of the `with` schemas: W(key, check, help), then the rules on its value
 * (TF_WRULE_* of pipeline.h), checked at load (check_scalar, check_value_kind, load_with). */
#define W(k, c, h) .key = (k), .check = (c), .help = (h)
#define ENUM(k, names, h) W(k, TF_WCHECK_ENUM, h), .choices = (names)
#define RANGE(lo, hi) .rules = TF_WRULE_MIN | TF_WRULE_MAX, .min = (lo), .max = (hi)
#define AT_LEAST(x) .rules = TF_WRULE_MIN, .min = (x)
#define ABOVE(x) .rules = TF_WRULE_MIN_OPEN, .min = (x)
#define BIG ((double)(1u << 30)) /* the largest count the ml steps take */
#define I TF_WCHECK_INT
#define N TF_WCHECK_NUMBER
#define D TF_WCHECK_DURATION
#define S TF_WCHECK_STRING
#define B TF_WCHECK_BOOL

/* clang-format off */
static const struct tf_with_key data_prep_with[] = {
    {ENUM("source", tf_dataset_sources, "raw data (default fashion-mnist: the Debian package)"),
     .if_value = "csv", .requires = "path"},
    {W("path", S, "the CSV file (header line, numeric columns), or the fashion-mnist "
                  "directory (default " TF_FASHION_MNIST_DIR ")")},
    {W("shards", I, "train shards (default 8); test gets max(1, shards / 4)"), RANGE(1, 4096)},
    {W("csv_label", S, "CSV label column (default label); labels are integers 0..K-1")},
    {W("test_fraction", N, "CSV: fraction held out as the test split (default 0.2)"),
     .rules = TF_WRULE_MIN_OPEN | TF_WRULE_MAX_OPEN, .min = 0, .max = 1},
    {W("seed", I, "CSV split seed (default 0)"), AT_LEAST(0)},
    {W("limit_train", I, "keep the first N train examples (default 0: all)"), AT_LEAST(0)},
    {W("limit_test", I, "keep the first N test examples (default 0: all)"), AT_LEAST(0)},
    {.key = NULL}};
static const struct tf_with_key train_with[] = {
    {W("dataset", S, "the dataset's manifest key (a data_prep step's outputs.dataset)")},
    {W("hidden", TF_WCHECK_INT_LIST, "hidden layer widths (default [256, 128])"),
     RANGE(1, 1e6)},
    {W("epochs", I, "passes over the training set (default 10)"), RANGE(1, BIG)},
    {W("batch", I, "global batch size (default 256)"), RANGE(1, BIG)},
    {ENUM("optimizer", tf_optim_names, "default sgd; adam and adamw: Adam with decoupled "
                                       "weight decay")},
    {W("lr", N, "base learning rate (default 0.1; adam 0.001)"), ABOVE(0)},
    {W("momentum", N, "sgd and lars momentum (default 0.9)"),
     .rules = TF_WRULE_MIN | TF_WRULE_MAX_OPEN, .min = 0, .max = 1},
    {W("weight_decay", N, "L2 (sgd), decoupled (adam), in the trust ratio (lars)"),
     AT_LEAST(0)},
    {W("warmup_epochs", N, "linear warmup length in epochs (default 0)"), AT_LEAST(0)},
    {ENUM("schedule", tf_lr_schedule_names, "learning rate after warmup (default cosine)")},
    {W("seed", I, "initialisation and data order (default 0)"), AT_LEAST(0)},
    {W("checkpoint_every", I, "steps between checkpoints (default 0: only at the end)"),
     AT_LEAST(0)},
    {W("max_steps", I, "stop after this many steps in total (default 0: the epochs)"),
     AT_LEAST(0)},
    {W("prefetch", I, "input batches prepared ahead (default 4; 0 turns it off)"),
     RANGE(0, BIG)},
    {W("clip_norm", N, "clip the gradient's global L2 norm (default 0: off)"), AT_LEAST(0)},
    {W("decay_epochs", N, "step schedule: epochs between x0.1 decays (default a third of "
                          "the run)"),
     AT_LEAST(0)},
    {W("lars_eta", N, "LARS trust coefficient (default 0.001)"), AT_LEAST(0)},
    {W("linear_scaling", B, "lr x batch / 256 (Goyal et al.)")},
    {W("cache", B, "keep decoded examples in memory after the first epoch (default: when "
                   "the decoded train split fits in 1 GiB)")},
    {W("patience", I, "early stopping after N epochs without improvement (default 0: off)"),
     RANGE(0, BIG)},
    {ENUM("monitor", tf_train_monitors, "what early stopping watches on the test split "
                                        "(default accuracy)")},
    {W("binary", B, "sigmoid binary cross-entropy for two-class (0/1) labels")},
    {.key = NULL}};
static const struct tf_with_key evaluate_with[] = {
    {W("model", S, "model bundle or checkpoint key (from train)")},
    {W("dataset", S, "dataset manifest key (from data_prep)")},
    {.key = NULL}};
static const struct tf_with_key register_with[] = {
    {W("model_name", S, "registry model name"), .rules = TF_WRULE_MODEL_NAME},
    {W("bundle", S, "model bundle key (from train)")},
    {W("metrics_from", TF_WCHECK_STEP, "upstream step whose metrics are recorded")},
    {W("tags", TF_WCHECK_STR_MAP, "tags stored with the version")},
    {.key = NULL}};
static const struct tf_with_key deploy_with[] = {
    {W("model_name", S, "registry model name"), .rules = TF_WRULE_MODEL_NAME},
    {W("version", S, "model version (from register)"), .rules = TF_WRULE_VERSION},
    {W("alias", S, "alias to point at the version, e.g. production"),
     .rules = TF_WRULE_ALIAS},
    {W("canary_percent", N, "share of traffic for the new version"),
     .rules = TF_WRULE_MIN | TF_WRULE_MAX_OPEN, .min = 0, .max = 100},
    {W("rollout_steps", TF_WCHECK_INT_LIST, "canary shares to step through, e.g. [10, 50]"),
     RANGE(1, 99)},
    {W("rollout_soak_s", D, "rollout: time at each share before the next move"),
     RANGE(0, 2592000)},
    {W("rollout_max_error_rate", N, "rollout: canary failure rate that rolls it back"),
     RANGE(0, 1)},
    {W("rollout_max_p99_ms", N, "rollout: canary p99 latency (ms) that rolls it back"),
     AT_LEAST(0)},
    {W("rollout_min_requests", I, "rollout: canary answers a judgement needs"), RANGE(1, 1e9)},
    {W("rollout_max_error_rate_vs_production", N,
       "rollout: canary failure rate minus production's (same window) that rolls it back"),
     RANGE(0, 1)},
    {W("rollout_max_p99_ratio_vs_production", N,
       "rollout: canary p99 over production's (same window) that rolls it back"),
     RANGE(0, 1e6)},
    {W("rollout_max_disagreement_vs_production", N,
       "rollout: share of shadowed rows whose answer differs from production's that rolls "
       "it back"),
     RANGE(0, 1)},
    {W("rollout_shadow_percent", N,
       "rollout: canary requests production also answers, to compare (default 100)"),
     .rules = TF_WRULE_MIN_OPEN | TF_WRULE_MAX, .min = 0, .max = 100},
    {W("rollout_shadow_tolerance", N,
       "rollout: a row also differs when an output differs by more (default 0: class only)"),
     RANGE(0, 1)},
    {.key = NULL}};
static const struct tf_with_key shell_with[] = {
    {W("argv", TF_WCHECK_STR_LIST, "program and arguments (never a shell string)"),
     .rules = TF_WRULE_NONEMPTY},
    {W("env", TF_WCHECK_STR_MAP, "extra environment variables"), .rules = TF_WRULE_ENV_NAMES},
    {W("outputs", TF_WCHECK_STR_LIST, "names of outputs the program writes"),
     .rules = TF_WRULE_UNIQUE},
    {W("metrics", TF_WCHECK_STR_LIST, "names of metrics the program writes"),
     .rules = TF_WRULE_UNIQUE},
    {.key = NULL}};
/* clang-format on */
#undef W
#undef ENUM
#undef RANGE
#undef AT_LEAST
#undef ABOVE
#undef BIG
#undef I
#undef N
#undef S
#undef B

static const char *const no_names[] = {NULL};
static const char *const data_prep_out[] = {"dataset", NULL};
static const char *const data_prep_met[] = {"examples", NULL};
static const char *const train_out[] = {"checkpoint", "bundle", NULL};
static const char *const train_met[] = {
    "loss",           "accuracy",    "auc",        "examples_per_second",
    "device_seconds", "utilization", "input_wait", "early_stopped", NULL};
static const char *const evaluate_met[] = {"loss", "accuracy", "auc", NULL};
static const char *const register_out[] = {"model", "version", NULL};
static const char *const deploy_out[] = {"alias", "version", NULL};

/* clang-format off */
static const struct tf_step_schema builtin[TF_STEP_LAST] = {
    {.type = TF_STEP_DATA_PREP, .name = "data_prep", .with = data_prep_with,
     .outputs = data_prep_out, .metrics = data_prep_met, .cacheable = 1,
     .run = tf_kind_ml, .ml = tf_ml_data_prep_step},
    {.type = TF_STEP_TRAIN, .name = "train", .with = train_with, .outputs = train_out,
     .metrics = train_met, .cacheable = 1, .needs_slice = 1, .run = tf_kind_ml,
     .ml = tf_ml_train_step},
    {.type = TF_STEP_EVALUATE, .name = "evaluate", .with = evaluate_with, .outputs = no_names,
     .metrics = evaluate_met, .cacheable = 1, .run = tf_kind_ml, .ml = tf_ml_evaluate_step},
    {.type = TF_STEP_REGISTER, .name = "register", .with = register_with,
     .outputs = register_out, .metrics = no_names, .run = tf_kind_register},
    {.type = TF_STEP_DEPLOY, .name = "deploy", .with = deploy_with, .outputs = deploy_out,
     .metrics = no_names, .run = tf_kind_deploy},
    {.type = TF_STEP_SHELL, .name = "shell", .with = shell_with, .outputs = no_names,
     .metrics = no_names, .dynamic = 1, .cacheable = 1, .run = tf_kind_shell},
};
/* clang-format on */

/* The kinds added after the built-ins (tf_step_kind_add), and every kind's name. */
static struct tf_step_schema added[TF_STEP_MAX - TF_STEP_LAST];
static size_t nadded;
static const char *kind_names[TF_STEP_MAX + 1];

const struct tf_step_schema *tf_step_schema(enum tf_step_type t)
{
	if ((unsigned)t < TF_STEP_LAST)
		return &builtin[t];
	if ((unsigned)t < TF_STEP_LAST + nadded)
		return &added[t - TF_STEP_LAST];
	return NULL;
}

const struct tf_step_schema *tf_step_schema_find(const char *name)
{
	for (int t = 0; name && t < TF_STEP_MAX; t++) {
		const struct tf_step_schema *sc = tf_step_schema((enum tf_step_type)t);
		if (sc && !strcmp(sc->name, name))
			return sc;
	}
	return NULL;
}

const char *const *tf_step_kind_names(void)
{
	for (int t = 0; t < TF_STEP_MAX; t++) {
		const struct tf_step_schema *sc = tf_step_schema((enum tf_step_type)t);
		kind_names[t] = sc ? sc->name : NULL;
	}
	return kind_names;
}

int tf_step_kind_add(const struct tf_step_schema *row, enum tf_step_type *type)
{
	if (!row->name || !row->run || !row->with || !row->outputs || !row->metrics)
		return -EINVAL;
	if (tf_step_schema_find(row->name))
		return -EEXIST;
	if (TF_STEP_LAST + nadded >= TF_STEP_MAX)
		return -ENOSPC;
	added[nadded] = *row;
	added[nadded].type = (enum tf_step_type)(TF_STEP_LAST + nadded);
	*type = added[nadded].type;
	nadded++;
	return 0;
}

/* ---- references and `with` ---------------------------------------------------------- */

static const char **names_of_params(const struct tf_pipeline *p)
{
	const char **names = tf_xcalloc(p->nparams + 1, sizeof(*names));
	for (size_t i = 0; i < p->nparams; i++)
		names[i] = p->params[i].name;
	return names;
}

enum tf_vtype tf_pl_param_vtype(enum tf_param_type t)
{
	switch (t) {
	case TF_PARAM_INT:
	case TF_PARAM_FLOAT:
		return TF_VT_NUMBER;
	case TF_PARAM_BOOL:
		return TF_VT_BOOL;
	case TF_PARAM_LIST:
		return TF_VT_LIST;
	default:
		return TF_VT_STRING;
	}
}

/* Checks one reference from step L->cur_step; resolves step_index. Returns the static type,
 * or TF_VT_LAST when it is bad (and reported). */
static enum tf_vtype check_ref(struct loader *L, struct tf_ref *r)
{
	struct tf_pipeline *p = L->p;
	const struct tf_step *self = &p->steps[L->cur_step];
	char hint[160];
	if (r->kind == TF_REF_PARAM) {
		const struct tf_param *par = tf_pipeline_param(p, r->name);
		if (!par) {
			const char **names = names_of_params(p);
			const char *near =
			    tf_pl_diag_room(L) ? tf_diag_suggest(r->name, names) : NULL;
			if (near)
				snprintf(hint, sizeof(hint), "did you mean '%s'?", near);
			else
				snprintf(hint, sizeof(hint), "declare it under 'params'");
			tf_diag_add(L->d, TF_DIAG_ERROR, L->file, r->line, r->col, hint,
			            "unknown param '%s' in '${%s}'", r->name, r->path);
			free(names);
			return TF_VT_LAST;
		}
		return tf_pl_param_vtype(par->type);
	}
	if (r->kind == TF_REF_RUN) {
		if (!strcmp(r->name, "state") && !self->final) {
			tf_diag_add(L->d, TF_DIAG_ERROR, L->file, r->line, r->col,
			            "move the step under 'finally:'",
			            "'${run.state}' (the outcome of the run's steps) is known only to "
			            "finally steps, and '%s' is not one",
			            self->name);
			return TF_VT_LAST;
		}
		return TF_VT_STRING;
	}
	if (r->kind == TF_REF_ENV) {
		L->p->steps[L->cur_step].uses_env = 1;
		if (!getenv(r->name) && (L->flags & (TF_PIPELINE_ENV_SET | TF_PIPELINE_ALLOW_UNSET)))
			tf_diag_add(L->d,
			            L->flags & TF_PIPELINE_ENV_SET ? TF_DIAG_ERROR : TF_DIAG_WARNING,
			            L->file, r->line, r->col,
			            "set it in the environment of the process that runs the pipeline",
			            "environment variable %s is not set ('${%s}')", r->name, r->path);
		return TF_VT_STRING;
	}
	int j = tf_pl_step_lookup(L, r->step);
	if (j < 0) {
		const char *near =
		    tf_pl_diag_room(L) ? tf_pl_suggest_step(L, r->step, p->nsteps) : NULL;
		if (near)
			snprintf(hint, sizeof(hint), "did you mean '%s'?", near);
		else
			snprintf(hint, sizeof(hint), "refer to a step declared in this pipeline");
		tf_diag_add(L->d, TF_DIAG_ERROR, L->file, r->line, r->col, hint,
		            "unknown step '%s' in '${%s}'", r->step, r->path);
		return TF_VT_LAST;
	}
	r->step_index = j;
	const struct tf_step *src = &p->steps[j];
	if (!L->sx[j].ok)
		return TF_VT_LAST; /* the step itself is broken and reported */
	if ((size_t)j == L->cur_step) {
		tf_diag_add(L->d, TF_DIAG_ERROR, L->file, r->line, r->col,
		            "a step's outputs exist only after it ran; use them in a later step",
		            "step '%s' refers to its own %s in '${%s}'", self->name,
		            r->kind == TF_REF_OUTPUT ? "outputs" : "metrics", r->path);
		return TF_VT_LAST;
	}
	char **decl = r->kind == TF_REF_OUTPUT ? src->outputs : src->metrics;
	size_t ndecl = r->kind == TF_REF_OUTPUT ? src->noutputs : src->nmetrics;
	int found = 0;
	for (size_t i = 0; i < ndecl; i++)
		if (!strcmp(decl[i], r->name))
			found = 1;
	if (!found) {
		const char *near = tf_diag_suggest(r->name, (const char *const *)decl);
		const char *kind = r->kind == TF_REF_OUTPUT ? "output" : "metric";
		if (near) {
			snprintf(hint, sizeof(hint), "did you mean '%s'?", near);
		} else if (!ndecl) {
			snprintf(hint, sizeof(hint), "a '%s' step has no %ss%s",
			         tf_step_type_name(src->type), kind,
			         src->type == TF_STEP_SHELL ? "; declare them under its with" : "");
		} else {
			size_t off = (size_t)snprintf(hint, sizeof(hint), "its %ss:", kind);
			for (size_t i = 0; i < ndecl && off < sizeof(hint); i++)
				off += (size_t)snprintf(hint + off, sizeof(hint) - off, "%s %s",
				                        i ? "," : "", decl[i]);
		}
		tf_diag_add(L->d, TF_DIAG_ERROR, L->file, r->line, r->col, hint,
		            "step '%s' (%s) has no %s '%s'", src->name,
		            tf_step_type_name(src->type), kind, r->name);
		return TF_VT_LAST;
	}
	if (L->dag_ok && !tf_pl_is_upstream(L, L->cur_step, (size_t)j)) {
		snprintf(hint, sizeof(hint), "add '%s' to the needs of '%s'", src->name,
		         self->name);
		tf_diag_add(L->d, TF_DIAG_ERROR, L->file, r->line, r->col, hint,
		            "step '%s' uses '${%s}' but does not depend on step '%s'", self->name,
		            r->path, src->name);
		return TF_VT_LAST;
	}
	return r->kind == TF_REF_METRIC ? TF_VT_NUMBER : TF_VT_ANY;
}

static enum tf_vtype ref_type_cb(void *ctx, const struct tf_ref *r)
{
	return check_ref(ctx, (struct tf_ref *)r);
}

/* Is the scalar's text exactly its column span on one line (so offsets map to columns)?
 * Returns the column of its first character via *col. */
int tf_pl_scalar_exact(const struct ynode *n, int *col)
{
	*col = n->col;
	if (n->kind != Y_SCALAR || n->line != n->end_line)
		return 0;
	size_t chars = 0;
	for (size_t i = 0; i < n->len; i++)
		if (((unsigned char)n->str[i] & 0xC0) != 0x80)
			chars++;
	int quoted = n->style == YAML_SINGLE_QUOTED_SCALAR_STYLE ||
	             n->style == YAML_DOUBLE_QUOTED_SCALAR_STYLE;
	if (n->style != YAML_PLAIN_SCALAR_STYLE && !quoted)
		return 0;
	if ((size_t)(n->end_col - n->col) != chars + (quoted ? 2 : 0))
		return 0;
	*col = n->col + quoted;
	return 1;
}

/* Parses a `with` value (recursively), checking references. */
static void load_with_value(struct loader *L, const struct ynode *n, struct tf_with_value *w)
{
	w->line = n->line;
	w->col = n->col;
	if (n->kind == Y_SCALAR) {
		w->kind = TF_WITH_SCALAR;
		w->plain = tf_pl_is_plain(n);
		int col, exact = tf_pl_scalar_exact(n, &col);
		tf_template_parse(n->str, L->file, n->line, col, exact, &w->tmpl, L->d);
		for (size_t i = 0; i < w->tmpl.nparts; i++)
			if (w->tmpl.parts[i].ref)
				check_ref(L, w->tmpl.parts[i].ref);
		return;
	}
	w->kind = n->kind == Y_SEQ ? TF_WITH_LIST : TF_WITH_MAP;
	size_t cnt = n->kind == Y_SEQ ? n->n : n->n / 2;
	w->items = tf_xcalloc(cnt + 1, sizeof(*w->items));
	if (n->kind == Y_MAP)
		tf_pl_check_keys(L, n, NULL, "a 'with' mapping");
	for (size_t i = 0; i < cnt; i++) {
		const struct ynode *v = n->kind == Y_SEQ ? n->kids[i] : n->kids[2 * i + 1];
		if (n->kind == Y_MAP) {
			const struct ynode *k = n->kids[2 * i];
			w->items[w->nitems].key = tf_xstrdup(k->kind == Y_SCALAR ? k->str : "");
		}
		load_with_value(L, v, &w->items[w->nitems++]);
	}
}

/* Values of text-typed keys (argv, env, tags, names) are passed on as written: `1.10`, `012`
 * and `~` stay those characters instead of becoming 1.1000000000000001, 12 and null. */
static void keep_source_text(struct tf_with_value *w)
{
	w->plain = 0;
	for (size_t i = 0; i < w->nitems; i++)
		keep_source_text(&w->items[i]);
}

static enum tf_vtype ref_static_type(struct loader *L, const struct tf_ref *r)
{
	if (r->kind == TF_REF_PARAM) {
		const struct tf_param *par = tf_pipeline_param(L->p, r->name);
		if (!par)
			return TF_VT_LAST;
		return tf_pl_param_vtype(par->type);
	}
	if (r->kind == TF_REF_RUN || r->kind == TF_REF_ENV)
		return TF_VT_STRING;
	return r->kind == TF_REF_METRIC ? TF_VT_NUMBER : TF_VT_ANY;
}

/* The bounds of a schema row in words: "at least 1", "between 0 and 100", "greater than 0
 * and less than 1". */
static void range_text(const struct tf_with_key *wk, char *buf, size_t len)
{
	unsigned r = wk->rules;
	int n = 0;
	buf[0] = '\0';
	if ((r & TF_WRULE_MIN) && (r & TF_WRULE_MAX)) {
		n = snprintf(buf, len, "between %.15g and %.15g", wk->min, wk->max);
	} else {
		if (r & (TF_WRULE_MIN | TF_WRULE_MIN_OPEN))
			n = snprintf(buf, len, "%s %.15g",
			             r & TF_WRULE_MIN ? "at least" : "greater than", wk->min);
		if (n >= 0 && (size_t)n < len && (r & (TF_WRULE_MAX | TF_WRULE_MAX_OPEN)))
			n += snprintf(buf + n, len - (size_t)n, "%s%s %.15g", n ? " and " : "",
			              r & TF_WRULE_MAX ? "at most" : "less than", wk->max);
	}
	if (wk->check == TF_WCHECK_DURATION && n > 0 && (size_t)n < len) /* its bounds' unit */
		snprintf(buf + n, len - (size_t)n, " seconds");
}

static int in_range(const struct tf_with_key *wk, double v)
{
	unsigned r = wk->rules;
	return !isnan(v) && !((r & TF_WRULE_MIN) && v < wk->min) &&
	       !((r & TF_WRULE_MIN_OPEN) && v <= wk->min) && !((r & TF_WRULE_MAX) && v > wk->max) &&
	       !((r & TF_WRULE_MAX_OPEN) && v >= wk->max);
}

static void describe(const struct tf_with_key *wk, struct tf_buf *b, const char *quote,
                     int with_requires)
{
	static const char *const kinds[TF_WCHECK_LAST] = {
	    [TF_WCHECK_STRING] = "a string",
	    [TF_WCHECK_INT] = "an integer",
	    [TF_WCHECK_NUMBER] = "a number",
	    [TF_WCHECK_BOOL] = "true or false",
	    [TF_WCHECK_ENUM] = "one of ",
	    [TF_WCHECK_INT_LIST] = "a list of integers",
	    [TF_WCHECK_STR_LIST] = "a list of strings",
	    [TF_WCHECK_STR_MAP] = "a mapping of names to strings",
	    [TF_WCHECK_STEP] = "the name of an upstream step",
	    [TF_WCHECK_DURATION] = "a duration (seconds, or 30s, 10m, 1h30m)"};
	tf_buf_printf(b, "%s", kinds[wk->check]);
	if (wk->check == TF_WCHECK_ENUM)
		tf_buf_names(b, wk->choices, "or", quote);
	char range[96];
	range_text(wk, range, sizeof(range));
	if (range[0])
		tf_buf_printf(b, "%s %s", wk->check == TF_WCHECK_INT_LIST ? ", each" : ",", range);
	static const struct {
		unsigned rule;
		const char *text;
	} words[] = {{TF_WRULE_NONEMPTY, "not empty"},
	             {TF_WRULE_UNIQUE, "distinct"},
	             {TF_WRULE_ENV_NAMES, "names are environment variable names"},
	             {TF_WRULE_MODEL_NAME, "a registry name (docs/registry.md)"},
	             {TF_WRULE_ALIAS, "a registry name that does not read as a version"},
	             {TF_WRULE_VERSION, "N >= 1, vN, latest or an alias"}};
	for (size_t i = 0; i < TF_ARRAY_LEN(words); i++)
		if (wk->rules & words[i].rule)
			tf_buf_printf(b, ", %s", words[i].text);
	if (wk->requires && with_requires)
		tf_buf_printf(b, "; %s%s%s needs %s%s%s", quote, wk->if_value, quote, quote,
		              wk->requires, quote);
}

void tf_with_key_describe(const struct tf_with_key *wk, struct tf_buf *b, const char *quote)
{
	describe(wk, b, quote, 1);
}

json_t *tf_with_key_value(const struct tf_with_key *wk, const char *text, const char *what,
                          char *err, size_t errlen)
{
	struct tf_buf b = {0};
	json_t *v = NULL;
	long long i;
	double d;
	switch (wk->check) {
	case TF_WCHECK_BOOL: {
		int x = 1; /* a flag without a value */
		if (!text || !tf_pl_parse_bool_text(text, &x))
			v = json_boolean(x);
		break;
	}
	case TF_WCHECK_INT:
		if (!tf_pl_parse_int_text(text, &i) && in_range(wk, (double)i))
			v = json_integer(i);
		break;
	case TF_WCHECK_NUMBER:
		if (!tf_pl_parse_float_text(text, &d) && in_range(wk, d))
			v = json_real(d);
		break;
	case TF_WCHECK_DURATION:
		if (!tf_duration_parse(text, &d) && in_range(wk, d))
			v = json_real(d);
		break;
	case TF_WCHECK_ENUM:
		for (size_t k = 0; wk->choices[k] && !v; k++)
			if (!strcmp(wk->choices[k], text))
				v = json_string(text);
		break;
	case TF_WCHECK_INT_LIST: {
		v = json_array();
		char *dup = tf_xstrdup(text), *save = NULL;
		for (char *t = strtok_r(dup, ",", &save); t && v; t = strtok_r(NULL, ",", &save))
			if (!tf_pl_parse_int_text(t, &i) && in_range(wk, (double)i))
				json_array_append_new(v, json_integer(i));
			else
				v = (json_decref(v), NULL);
		free(dup);
		if (v && json_array_size(v) == 0)
			v = (json_decref(v), NULL);
		break;
	}
	default:
		v = json_string(text);
		break;
	}
	if (!v) {
		tf_buf_printf(&b, "%s wants ", what);
		describe(wk, &b, "", 0);
		tf_buf_printf(&b, ", not '%s'", text ? text : "");
		tf_buf_copy_to(&b, err, errlen);
	}
	tf_buf_release(&b);
	return v;
}

/* A number against the bounds of its schema row; `shown` is how the value was written,
 * `via` says where it came from ("" for a literal). 0 or -EINVAL (reported at n). */
static int check_range(struct loader *L, const struct tf_with_key *wk, const struct ynode *n,
                       double v, const char *shown, const char *via, const char *what)
{
	if (in_range(wk, v))
		return 0;
	char range[96];
	range_text(wk, range, sizeof(range));
	tf_pl_err_at(L, n, NULL, "%s must be %s, not %.40s%s", what, range, shown, via);
	return -EINVAL;
}

/* A duration (a number of seconds, or 30s, 10m, 1h30m: tf_duration_parse, as the pipeline's
 * timeouts and backoffs) against the bounds of its schema row, in seconds; `via` as in
 * check_range. 0 or -EINVAL (reported at n). */
static int check_duration(struct loader *L, const struct tf_with_key *wk, const struct ynode *n,
                          const char *via, const char *what)
{
	double s;
	if (!tf_duration_parse(n->str, &s))
		return check_range(L, wk, n, s, n->str, via, what);
	tf_pl_err_at(L, n, "write a number of seconds or a duration such as 30s, 10m, 1h30m",
	             "%s expects a duration, not '%.40s'%s", what, n->str, via);
	return -EINVAL;
}

/* The registry's name rule on a literal model name, alias or version. */
static int check_registry_name(struct loader *L, const struct tf_with_key *wk,
                               const struct ynode *n, const char *what)
{
	enum tf_registry_name kind = (wk->rules & TF_WRULE_MODEL_NAME) ? TF_REGNAME_MODEL
	                             : (wk->rules & TF_WRULE_ALIAS)    ? TF_REGNAME_ALIAS
	                                                               : TF_REGNAME_VERSION;
	char err[300];
	if (tf_registry_check_name(n->str, kind, err, sizeof(err)) == 0)
		return 0;
	tf_pl_err_at(L, n, "see docs/registry.md, Names", "%s: %s", what, err);
	return -EINVAL;
}

/* Checks a scalar against a check kind; `what` names the key. 0 or -EINVAL (reported). */
static int check_scalar(struct loader *L, const struct tf_with_key *wk,
                        const struct tf_with_value *w, const struct ynode *n, enum tf_with_check c,
                        const char *what)
{
	const struct tf_template *t = &w->tmpl;
	long long i;
	double f;
	int b;
	if (t->whole_ref) {
		const struct tf_ref *r = t->parts[0].ref;
		enum tf_vtype rt = ref_static_type(L, r);
		if (rt == TF_VT_LAST || rt == TF_VT_ANY)
			return 0;
		int ok;
		switch (c) {
		case TF_WCHECK_INT:
		case TF_WCHECK_NUMBER:
			ok = rt == TF_VT_NUMBER;
			if (ok && c == TF_WCHECK_INT && r->kind == TF_REF_PARAM &&
			    tf_pipeline_param(L->p, r->name)->type == TF_PARAM_FLOAT)
				ok = 0;
			break;
		case TF_WCHECK_BOOL:
			ok = rt == TF_VT_BOOL;
			break;
		case TF_WCHECK_DURATION:
			ok = rt == TF_VT_NUMBER || rt == TF_VT_STRING;
			break;
		default:
			ok = rt != TF_VT_LIST;
			break;
		}
		if (!ok) {
			const char *desc =
			    r->kind == TF_REF_PARAM
			        ? tf_param_type_name(tf_pipeline_param(L->p, r->name)->type)
			        : tf_vtype_name(rt);
			tf_pl_err_at(L, n, "change the param's type or use another value",
			             "%s expects %s, but '${%s}' is %s %s", what,
			             c == TF_WCHECK_INT        ? "an integer"
			             : c == TF_WCHECK_NUMBER   ? "a number"
			             : c == TF_WCHECK_DURATION ? "a duration"
			             : c == TF_WCHECK_BOOL     ? "true or false"
			                                       : "a scalar",
			             r->path, desc[0] == 'i' ? "an" : "a", desc);
			return -EINVAL;
		}
		/* a param's value is known at load: the same bounds as a literal */
		const struct tf_param *pp =
		    r->kind == TF_REF_PARAM ? tf_pipeline_param(L->p, r->name) : NULL;
		if (pp && json_is_number(pp->value) &&
		    (c == TF_WCHECK_INT || c == TF_WCHECK_NUMBER || c == TF_WCHECK_DURATION)) {
			char shown[48], via[200];
			snprintf(shown, sizeof(shown), "%.15g", json_number_value(pp->value));
			snprintf(via, sizeof(via), " (the value of ${%s})", r->path);
			return check_range(L, wk, n, json_number_value(pp->value), shown, via,
			                   what);
		}
		if (pp && json_is_string(pp->value) && c == TF_WCHECK_DURATION) {
			struct ynode v = *n;
			v.str = (char *)json_string_value(pp->value);
			char via[200];
			snprintf(via, sizeof(via), " (the value of ${%s})", r->path);
			return check_duration(L, wk, &v, via, what);
		}
		if (pp && json_is_string(pp->value) && c == TF_WCHECK_STRING &&
		    (wk->rules & (TF_WRULE_MODEL_NAME | TF_WRULE_ALIAS | TF_WRULE_VERSION))) {
			struct ynode v = *n;
			v.str = (char *)json_string_value(pp->value);
			return check_registry_name(L, wk, &v, what);
		}
		return 0;
	}
	int has_ref = 0;
	for (size_t k = 0; k < t->nparts; k++)
		if (t->parts[k].ref)
			has_ref = 1;
	if (c == TF_WCHECK_STRING && !has_ref &&
	    (wk->rules & (TF_WRULE_MODEL_NAME | TF_WRULE_ALIAS | TF_WRULE_VERSION)))
		return check_registry_name(L, wk, n, what);
	if (c == TF_WCHECK_STRING || c == TF_WCHECK_STEP)
		return 0;
	if (has_ref && c == TF_WCHECK_DURATION) /* "${params.n}m": read at run time */
		return 0;
	if (has_ref) {
		tf_pl_err_at(L, n, "use a single ${...} on its own for a non-text value",
		             "%s expects %s, but text mixed with references is a string", what,
		             c == TF_WCHECK_BOOL   ? "true or false"
		             : c == TF_WCHECK_ENUM ? "a fixed choice"
		                                   : "a number");
		return -EINVAL;
	}
	switch (c) {
	case TF_WCHECK_INT:
		if (tf_pl_is_plain(n) && !tf_pl_parse_int_text(n->str, &i))
			return check_range(L, wk, n, (double)i, n->str, "", what);
		tf_pl_err_at(L, n,
		             n->style != YAML_PLAIN_SCALAR_STYLE ? "write it without quotes" : NULL,
		             "%s expects an integer, not '%.40s'", what, n->str);
		return -EINVAL;
	case TF_WCHECK_NUMBER:
		if (tf_pl_is_plain(n) && !tf_pl_parse_float_text(n->str, &f))
			return check_range(L, wk, n, f, n->str, "", what);
		tf_pl_err_at(L, n,
		             n->style != YAML_PLAIN_SCALAR_STYLE ? "write it without quotes" : NULL,
		             "%s expects a number, not '%.40s'", what, n->str);
		return -EINVAL;
	case TF_WCHECK_DURATION:
		return check_duration(L, wk, n, "", what);
	case TF_WCHECK_BOOL:
		if (tf_pl_is_plain(n) && !tf_pl_parse_bool_text(n->str, &b))
			return 0;
		tf_pl_err_at(L, n, NULL, "%s expects true or false, not '%.40s'", what, n->str);
		return -EINVAL;
	case TF_WCHECK_ENUM: {
		for (size_t k = 0; wk->choices[k]; k++)
			if (!strcmp(wk->choices[k], n->str))
				return 0;
		const char *near = tf_diag_suggest(n->str, wk->choices);
		char hint[200];
		if (near) {
			snprintf(hint, sizeof(hint), "did you mean '%s'?", near);
		} else {
			size_t off = (size_t)snprintf(hint, sizeof(hint), "choose one of:");
			for (size_t k = 0; wk->choices[k] && off < sizeof(hint); k++)
				off += (size_t)snprintf(hint + off, sizeof(hint) - off, "%s %s",
				                        k ? "," : "", wk->choices[k]);
		}
		tf_pl_err_at(L, n, hint, "%s: unknown value '%.40s'", what, n->str);
		return -EINVAL;
	}
	default:
		return 0;
	}
}

static int check_value_kind(struct loader *L, const struct tf_with_key *wk,
                            const struct tf_with_value *w, const struct ynode *n, const char *sname)
{
	char what[160];
	snprintf(what, sizeof(what), "'with.%s' of step '%s'", wk->key, sname);
	switch (wk->check) {
	case TF_WCHECK_INT_LIST:
	case TF_WCHECK_STR_LIST:
		if (n->kind == Y_SCALAR && w->tmpl.whole_ref) {
			enum tf_vtype rt = ref_static_type(L, w->tmpl.parts[0].ref);
			if (rt == TF_VT_LIST || rt == TF_VT_LAST || rt == TF_VT_ANY)
				return 0;
			tf_pl_err_at(L, n, "declare the param with 'type: list'",
			             "%s expects a list, but '${%s}' is a %s", what,
			             w->tmpl.parts[0].ref->path, tf_vtype_name(rt));
			return -EINVAL;
		}
		if (n->kind != Y_SEQ) {
			tf_pl_err_at(L, n, "write a list such as [256, 128]",
			             "%s must be a list, not %s", what, tf_pl_kind_name(n));
			return -EINVAL;
		}
		if (n->n == 0 && (wk->rules & TF_WRULE_NONEMPTY)) {
			tf_pl_err_at(L, n,
			             "name the program and its arguments, e.g. [/bin/echo, hello]",
			             "%s must not be empty", what);
			return -EINVAL;
		}
		for (size_t i = 0; i < n->n; i++) {
			if (n->kids[i]->kind != Y_SCALAR) {
				tf_pl_err_at(L, n->kids[i], NULL,
				             "items of %s must be scalars, not %s", what,
				             tf_pl_kind_name(n->kids[i]));
				continue;
			}
			check_scalar(L, wk, &w->items[i], n->kids[i],
			             wk->check == TF_WCHECK_INT_LIST ? TF_WCHECK_INT
			                                             : TF_WCHECK_STRING,
			             what);
			for (size_t j = 0; (wk->rules & TF_WRULE_UNIQUE) && j < i; j++)
				if (n->kids[j]->kind == Y_SCALAR &&
				    !strcmp(n->kids[j]->str, n->kids[i]->str)) {
					tf_pl_err_at(L, n->kids[i], "list each name once",
					             "%s lists '%.60s' twice", what,
					             n->kids[i]->str);
					break;
				}
		}
		return 0;
	case TF_WCHECK_STR_MAP:
		if (n->kind != Y_MAP) {
			tf_pl_err_at(L, n, "write a mapping of names to values",
			             "%s must be a mapping, not %s", what, tf_pl_kind_name(n));
			return -EINVAL;
		}
		for (size_t i = 0; i + 1 < n->n; i += 2) {
			const struct ynode *k = n->kids[i];
			if (n->kids[i + 1]->kind != Y_SCALAR)
				tf_pl_err_at(L, n->kids[i + 1], NULL,
				             "values of %s must be scalars, not %s", what,
				             tf_pl_kind_name(n->kids[i + 1]));
			if ((wk->rules & TF_WRULE_ENV_NAMES) && k->kind == Y_SCALAR &&
			    !tf_pl_valid_env_name(k->str))
				tf_pl_err_at(
				    L, k,
				    "use letters, digits and '_', not starting with a digit (no "
				    "'=')",
				    "%s: '%.60s' is not an environment variable name", what,
				    k->str);
		}
		return 0;
	default:
		if (n->kind != Y_SCALAR) {
			tf_pl_err_at(L, n, NULL, "%s must be a single value, not %s", what,
			             tf_pl_kind_name(n));
			return -EINVAL;
		}
		if (check_scalar(L, wk, w, n, wk->check, what))
			return -EINVAL;
		if (wk->check == TF_WCHECK_STEP && !w->tmpl.nparts) {
			return 0;
		}
		if (wk->check == TF_WCHECK_STEP && !w->tmpl.whole_ref) {
			int j = tf_pl_step_lookup(L, n->str);
			const struct tf_step *self = &L->p->steps[L->cur_step];
			if (j < 0) {
				tf_pl_err_at(L, n, "name a step this one needs",
				             "%s: unknown step '%.60s'", what, n->str);
				return -EINVAL;
			}
			if (L->dag_ok && ((size_t)j == L->cur_step ||
			                  !tf_pl_is_upstream(L, L->cur_step, (size_t)j))) {
				char hint[160];
				snprintf(hint, sizeof(hint), "add '%s' to the needs of '%s'",
				         n->str, self->name);
				tf_pl_err_at(L, n, hint, "%s: step '%s' is not upstream of '%s'",
				             what, n->str, self->name);
				return -EINVAL;
			}
		}
		return 0;
	}
}

void tf_pl_load_with(struct loader *L, size_t idx)
{
	struct tf_step *s = &L->p->steps[idx];
	const struct ynode *m = L->sx[idx].with_node;
	if (!m)
		return;
	const struct tf_step_schema *sc = tf_step_schema(s->type);
	const char *allowed[32];
	size_t na = 0;
	for (const struct tf_with_key *k = sc->with; k->key && na < 31; k++)
		allowed[na++] = k->key;
	allowed[na] = NULL;
	char what[120];
	snprintf(what, sizeof(what), "'with' of %s step '%s'", sc->name, s->name);
	tf_pl_check_keys(L, m, allowed, what);
	s->with = tf_xcalloc(m->n / 2 + 1, sizeof(*s->with));
	for (size_t i = 0; i + 1 < m->n; i += 2) {
		const struct ynode *k = m->kids[i], *v = m->kids[i + 1];
		if (k->kind != Y_SCALAR)
			continue;
		const struct tf_with_key *wk = NULL;
		for (const struct tf_with_key *c = sc->with; c->key; c++)
			if (!strcmp(c->key, k->str))
				wk = c;
		if (!wk)
			continue; /* reported by check_keys */
		int dup = 0;
		for (size_t j = 0; j < s->nwith; j++)
			if (!strcmp(s->with[j].key, k->str))
				dup = 1;
		if (dup)
			continue;
		struct tf_with_value *w = &s->with[s->nwith++];
		w->key = tf_xstrdup(k->str);
		load_with_value(L, v, w);
		if (wk->check == TF_WCHECK_STRING || wk->check == TF_WCHECK_STR_LIST ||
		    wk->check == TF_WCHECK_STR_MAP)
			keep_source_text(w);
		check_value_kind(L, wk, w, v, s->name);
		if (wk->requires && v->kind == Y_SCALAR && !strcmp(v->str, wk->if_value) &&
		    !tf_pl_map_get(m, wk->requires)) {
			char hint[120];
			snprintf(hint, sizeof(hint), "add '%s: ...' to 'with'", wk->requires);
			tf_pl_err_at(L, v, hint, "'with.%s: %s' of step '%s' needs 'with.%s'",
			             wk->key, wk->if_value, s->name, wk->requires);
		}
	}
}

void tf_pl_load_when(struct loader *L, size_t idx)
{
	struct tf_step *s = &L->p->steps[idx];
	const struct ynode *n = L->sx[idx].when_node;
	if (!n)
		return;
	int col, exact = tf_pl_scalar_exact(n, &col);
	struct tf_expr *e = tf_expr_parse(n->str, L->file, n->line, col, exact, L->d);
	if (!e)
		return;
	if (tf_expr_check(e, ref_type_cb, L, L->file, L->d)) {
		tf_expr_free(e);
		return;
	}
	s->when = e;
}

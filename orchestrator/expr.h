/* expr.h — references, `with` templates and the `when` language of pipelines.
 *
 * A reference is `${params.NAME}`, `${steps.STEP.outputs.NAME}`, `${steps.STEP.metrics.NAME}`,
 * `${run.id}`, `${run.pipeline}`, `${run.state}` or `${env.NAME}`.
 * A template is a string with references in it ("runs/${params.tag}/x"); `$${` writes a
 * literal `${`. A `when` expression is a small, side-effect-free language:
 *
 *     expr    := or
 *     or      := and { ("or" | "||") and }
 *     and     := not { ("and" | "&&") not }
 *     not     := ("not" | "!") not | cmp
 *     cmp     := primary [ ("==" | "!=" | "<" | "<=" | ">" | ">=") primary ]
 *     primary := NUMBER | STRING | "true" | "false" | REFERENCE | "(" expr ")"
 *
 * Strings are 'single' or "double" quoted (backslash escapes \\ \' \" \n \t). Everything is
 * parsed and type-checked when the pipeline is loaded; evaluation only looks values up.
 * Values come from a lookup callback the caller provides (the engine: params, and outputs and
 * metrics of finished steps), so this module has no idea where values live. */
#ifndef TF_EXPR_H
#define TF_EXPR_H

#include <jansson.h>
#include <stddef.h>

#include "orchestrator/diag.h"

/* What a reference points at. */
enum tf_ref_kind {
	TF_REF_PARAM,  /* ${params.NAME} */
	TF_REF_OUTPUT, /* ${steps.STEP.outputs.NAME} */
	TF_REF_METRIC, /* ${steps.STEP.metrics.NAME} */
	TF_REF_RUN,    /* ${run.NAME}: id, pipeline, state (the run's, for `finally` steps) */
	TF_REF_ENV,    /* ${env.NAME}: an environment variable of the process driving the run,
	                  passed to the step and never recorded */
	TF_REF_LAST
};

struct tf_ref {
	enum tf_ref_kind kind; /* params, outputs or metrics */
	char *path;            /* the text inside ${...}, e.g. "steps.train.metrics.loss" (owned) */
	char *step;            /* STEP for outputs/metrics, NULL for params (owned) */
	char *name;            /* NAME: the param, output or metric (owned) */
	int step_index;        /* index of STEP in tf_pipeline.steps once resolved, else -1 */
	int line, col;         /* where the `${` is in the file (1-based; 0 if unknown) */
	int as_text;           /* set on a copy by renderers that put the value into text: a
	                          number param then answers with its text as written (1.10, 012) */
};

/* Types the checker knows. NUMBER covers ints and floats; ANY is a value whose type is only
 * known at run time (a shell step's declared outputs are strings, its metrics numbers). */
enum tf_vtype { TF_VT_BOOL, TF_VT_NUMBER, TF_VT_STRING, TF_VT_LIST, TF_VT_ANY, TF_VT_LAST };

/* Resolves a reference path ("params.x", "steps.s.outputs.y", "steps.s.metrics.z") to its
 * value. Returns a NEW json reference the caller releases, or NULL when the value does not
 * exist (yet); `ref` is the parsed reference for callers that prefer its parts. */
typedef json_t *(*tf_lookup_fn)(void *ctx, const struct tf_ref *ref);

/* ---- templates ---------------------------------------------------------------------- */

struct tf_template_part {
	char *text;         /* literal text (owned); NULL for a reference part */
	struct tf_ref *ref; /* the reference (owned); NULL for a literal part */
};

struct tf_template {
	char *source;                   /* the string as written (owned) */
	struct tf_template_part *parts; /* literal and reference parts in order (owned) */
	size_t nparts;                  /* number of parts */
	int whole_ref;                  /* 1 when the template is exactly one `${...}` and nothing
	                                   else: rendering to JSON then keeps the value's type */
};

/* Parses `src` into `out`. line/col are where the string's first character is in the file
 * (1-based; used for the references' positions and the diagnostics); `col_exact` is 0 when
 * the string was folded or escaped in the file so that offsets do not map to columns, and then
 * every position is reported at (line, col). Problems go to `diags` under `file`. Returns 0 or
 * -EINVAL (diagnostics added); `out` is usable (and must be released) either way. */
int tf_template_parse(const char *src, const char *file, int line, int col, int col_exact,
                      struct tf_template *out, struct tf_diag_list *diags);
void tf_template_release(struct tf_template *t);

/* Renders to a new string (caller frees): references become their value's text (numbers in
 * shortest round-trip form, booleans true/false, lists as JSON). NULL when a reference cannot
 * be resolved, with the reason in err. */
/* A value as a template puts it into text (caller frees): strings as they are, numbers in
 * their shortest form that reads back exactly (1.1, not 1.1000000000000001), true/false,
 * "" for null, lists and maps as compact JSON. */
char *tf_template_value_text(const json_t *v);
char *tf_template_render(const struct tf_template *t, tf_lookup_fn fn, void *ctx, char *err,
                         size_t errlen);

/* Renders to a new JSON value: a whole-reference template keeps the referenced value's type
 * (a list param stays a list); anything else becomes a string. NULL with err on failure. */
json_t *tf_template_render_json(const struct tf_template *t, tf_lookup_fn fn, void *ctx, char *err,
                                size_t errlen);

/* Parses one reference path ("params.x", ...) without the ${}; 0 or -EINVAL with a message. */
int tf_ref_parse(const char *path, struct tf_ref *out, char *err, size_t errlen);
void tf_ref_release(struct tf_ref *r);

/* ---- expressions -------------------------------------------------------------------- */

enum tf_expr_op {
	TF_EXPR_NUMBER, /* literal number: num */
	TF_EXPR_STRING, /* literal string: str */
	TF_EXPR_BOOL,   /* literal true/false: num is 0 or 1 */
	TF_EXPR_REF,    /* a reference: ref */
	TF_EXPR_NOT,    /* not a */
	TF_EXPR_AND,    /* a and b (short-circuit) */
	TF_EXPR_OR,     /* a or b (short-circuit) */
	TF_EXPR_EQ,     /* a == b */
	TF_EXPR_NE,     /* a != b */
	TF_EXPR_LT,     /* a < b */
	TF_EXPR_LE,     /* a <= b */
	TF_EXPR_GT,     /* a > b */
	TF_EXPR_GE,     /* a >= b */
	TF_EXPR_LAST
};

struct tf_expr {
	enum tf_expr_op op; /* node kind */
	double num;         /* TF_EXPR_NUMBER, TF_EXPR_BOOL */
	char *str;          /* TF_EXPR_STRING (owned) */
	struct tf_ref *ref; /* TF_EXPR_REF (owned) */
	struct tf_expr *a;  /* first operand (owned) */
	struct tf_expr *b;  /* second operand (owned) */
	enum tf_vtype type; /* static type filled by tf_expr_check */
	int line, col;      /* position of the node's first character in the file */
};

/* Parses `src` (positions as for tf_template_parse). Returns the tree (caller frees with
 * tf_expr_free) or NULL with diagnostics added. */
struct tf_expr *tf_expr_parse(const char *src, const char *file, int line, int col, int col_exact,
                              struct tf_diag_list *diags);

/* Type-checks a parsed expression. `ref_type` gives each reference's static type (the
 * pipeline loader answers from params and the step-type schema; return TF_VT_LAST for an
 * unknown reference, which the loader has already reported). The whole expression must be
 * boolean. Returns 0 or -EINVAL with diagnostics added. */
int tf_expr_check(struct tf_expr *e, enum tf_vtype (*ref_type)(void *ctx, const struct tf_ref *r),
                  void *ctx, const char *file, struct tf_diag_list *diags);

/* Calls fn(ctx, ref) for every reference in the tree (for dependency checks). */
void tf_expr_visit_refs(const struct tf_expr *e, void (*fn)(void *ctx, struct tf_ref *r),
                        void *ctx);

/* A run-time value. */
struct tf_value {
	enum tf_vtype type; /* BOOL, NUMBER or STRING */
	int b;              /* TF_VT_BOOL */
	double num;         /* TF_VT_NUMBER */
	char *str;          /* TF_VT_STRING (owned; release with tf_value_release) */
};
void tf_value_release(struct tf_value *v);

/* Evaluates `e` with values from fn. 0 and *out set, or -ENOENT when a referenced value is
 * missing, -EINVAL when a value has the wrong type at run time; err says which and where. */
int tf_expr_eval(const struct tf_expr *e, tf_lookup_fn fn, void *ctx, struct tf_value *out,
                 char *err, size_t errlen);
/* The same for a boolean expression (what `when` is): *out is 0 or 1. */
int tf_expr_eval_bool(const struct tf_expr *e, tf_lookup_fn fn, void *ctx, int *out, char *err,
                      size_t errlen);

void tf_expr_free(struct tf_expr *e);

/* A printable name of a static type ("number", ...). */
const char *tf_vtype_name(enum tf_vtype t);

#endif

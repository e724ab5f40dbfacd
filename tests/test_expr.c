/* test_expr.c — references, templates and the `when` language: parsing with exact columns,
 * type checking, evaluation through a lookup callback; and the diagnostics helpers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "orchestrator/diag.h"
#include "orchestrator/expr.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A lookup over a JSON object keyed by reference path. */
static json_t *obj_lookup(void *ctx, const struct tf_ref *r)
{
	json_t *v = json_object_get(ctx, r->path);
	return v ? json_incref(v) : NULL;
}

/* Static types for the checker: params.n number, params.s string, params.b bool,
 * params.l list, steps.*.metrics.* number; anything else unknown (reported here). */
static enum tf_vtype test_types(void *ctx, const struct tf_ref *r)
{
	struct tf_diag_list *d = ctx;
	if (r->kind == TF_REF_METRIC)
		return TF_VT_NUMBER;
	if (r->kind == TF_REF_OUTPUT)
		return TF_VT_ANY;
	if (!strcmp(r->name, "n"))
		return TF_VT_NUMBER;
	if (!strcmp(r->name, "s"))
		return TF_VT_STRING;
	if (!strcmp(r->name, "b"))
		return TF_VT_BOOL;
	if (!strcmp(r->name, "l"))
		return TF_VT_LIST;
	tf_diag_error(d, "t", r->line, r->col, "unknown param '%s'", r->name);
	return TF_VT_LAST;
}

/* Parses and checks `src` placed at line 3, column 9; returns the tree or NULL. */
static struct tf_expr *compile(const char *src, struct tf_diag_list *d)
{
	struct tf_expr *e = tf_expr_parse(src, "t", 3, 9, 1, d);
	if (e && tf_expr_check(e, test_types, d, "t", d)) {
		tf_expr_free(e);
		return NULL;
	}
	return e;
}

static int eval_src(const char *src, json_t *vals, int *out)
{
	struct tf_diag_list d = {0};
	struct tf_expr *e = compile(src, &d);
	if (!e) {
		tf_diag_print(&d, stderr);
		tf_diag_list_release(&d);
		return -100;
	}
	char err[200] = "";
	int rc = tf_expr_eval_bool(e, obj_lookup, vals, out, err, sizeof(err));
	tf_expr_free(e);
	tf_diag_list_release(&d);
	return rc;
}

/* Expects compiling `src` to fail with one diagnostic at 3:col containing `needle`. */
static void expect_error(const char *src, int col, const char *needle)
{
	struct tf_diag_list d = {0};
	struct tf_expr *e = compile(src, &d);
	if (e || d.n == 0 || d.items[0].line != 3 || d.items[0].col != col ||
	    !strstr(d.items[0].message, needle)) {
		fprintf(stderr, "source: %s\nwanted 3:%d '%s', got:\n", src, col, needle);
		tf_diag_print(&d, stderr);
	}
	assert_null(e);
	assert_true(d.n >= 1);
	assert_int_equal(d.items[0].line, 3);
	assert_int_equal(d.items[0].col, col);
	assert_non_null(strstr(d.items[0].message, needle));
	tf_diag_list_release(&d);
}

static void test_expr_precedence_and_values(void **state)
{
	(void)state;
	json_t *v = json_pack("{s:f, s:s, s:b, s:i}", "params.n", 0.9, "params.s", "prod",
	                      "params.b", 1, "steps.e.metrics.accuracy", 1);
	int r = -1;
	assert_int_equal(eval_src("1 < 2 and not (3 == 4) or false", v, &r), 0);
	assert_int_equal(r, 1);
	assert_int_equal(eval_src("false or false and true", v, &r), 0);
	assert_int_equal(r, 0); /* and binds tighter: false or (false and true) */
	assert_int_equal(eval_src("not false and false", v, &r), 0);
	assert_int_equal(r, 0); /* (not false) and false */
	assert_int_equal(eval_src("${params.n} >= 0.88", v, &r), 0);
	assert_int_equal(r, 1);
	assert_int_equal(eval_src("${params.n} < 0.88 || ${params.s} == 'prod'", v, &r), 0);
	assert_int_equal(r, 1);
	assert_int_equal(eval_src("${params.s} != \"prod\" && !${params.b}", v, &r), 0);
	assert_int_equal(r, 0);
	assert_int_equal(eval_src("${params.b}", v, &r), 0);
	assert_int_equal(r, 1);
	assert_int_equal(eval_src("'abc' < 'abd' and 2.5e1 > 24 and .5 == 0.5", v, &r), 0);
	assert_int_equal(r, 1);
	assert_int_equal(eval_src("${ steps.e.metrics.accuracy } == 1", v, &r), 0);
	assert_int_equal(r, 1);
	json_decref(v);
}

static void test_expr_short_circuit_skips_missing_values(void **state)
{
	(void)state;
	json_t *v = json_object();
	int r = -1;
	/* steps.x is absent, but `false and ...` never looks it up */
	assert_int_equal(eval_src("false and ${steps.x.metrics.m} > 1", v, &r), 0);
	assert_int_equal(r, 0);
	assert_int_equal(eval_src("true or ${steps.x.metrics.m} > 1", v, &r), 0);
	assert_int_equal(r, 1);
	assert_int_equal(eval_src("${steps.x.metrics.m} > 1", v, &r), -ENOENT);
	json_decref(v);
}

static void test_expr_runtime_types(void **state)
{
	(void)state;
	/* outputs are typed at run time: numeric strings compare as numbers */
	json_t *v =
	    json_pack("{s:s, s:s}", "steps.r.outputs.version", "12", "steps.r.outputs.name", "abc");
	int r = -1;
	assert_int_equal(eval_src("${steps.r.outputs.version} > 9", v, &r), 0);
	assert_int_equal(r, 1);
	assert_int_equal(eval_src("${steps.r.outputs.name} > 9", v, &r), -EINVAL);
	json_decref(v);
}

static void test_expr_syntax_errors_have_columns(void **state)
{
	(void)state;
	/* the source starts at column 9, so offset k is column 9 + k */
	expect_error("1 >", 12, "expression ends");
	expect_error("(1 < 2", 15, "expected ')'");
	expect_error("x == 1", 9, "unknown word 'x'");
	expect_error("1 = 2", 11, "'=' is not an operator");
	expect_error("1 < 2 < 3", 15, "do not chain");
	expect_error("1 < 2 3", 15, "unexpected text");
	expect_error("'abc", 9, "unterminated string");
	expect_error("${params.n", 9, "unterminated reference");
	expect_error("${foo.bar} == 1", 9, "bad reference");
	expect_error("${steps.a.logs.x} == 1", 9, "bad reference");
	expect_error("", 9, "empty expression");
	expect_error("1 # 2", 11, "unexpected character '#'");
	expect_error("12abc > 1", 9, "malformed number");
}

static void test_expr_type_errors_have_columns(void **state)
{
	(void)state;
	expect_error("${params.n} > 'x'", 9, "cannot compare a number with a string");
	expect_error("${params.n} and true", 9, "'and' needs boolean operands, got a number");
	expect_error("true or 1", 17, "'or' needs boolean operands, got a number");
	expect_error("not ${params.s}", 9, "'not' needs a boolean, got a string");
	expect_error("${params.b} < true", 9, "booleans cannot be ordered");
	expect_error("${params.l} == 1", 9, "lists cannot be compared");
	expect_error("${params.n}", 9, "a condition must be true or false");
	expect_error("${params.zz} > 1", 9, "unknown param 'zz'");
}

static void test_expr_nesting_is_capped(void **state)
{
	(void)state;
	size_t n = 100000;
	char *src = malloc(2 * n + 30000 * 9);
	memset(src, '(', n);
	strcpy(src + n, "true");
	memset(src + n + 4, ')', n);
	src[2 * n + 4] = '\0';
	struct tf_diag_list d = {0};
	struct tf_expr *e = tf_expr_parse(src, "t", 1, 1, 1, &d);
	assert_null(e);
	assert_non_null(strstr(d.items[0].message, "nested too deeply"));
	tf_diag_list_release(&d);
	memset(src, 0, 2 * n + 8);
	for (size_t i = 0; i < 200; i++)
		memcpy(src + 4 * i, "not ", 4);
	strcpy(src + 800, "true");
	e = tf_expr_parse(src, "t", 1, 1, 1, &d);
	assert_null(e);
	tf_diag_list_release(&d);
	/* a long flat chain builds a deep tree: the term count is capped */
	size_t off = 0;
	for (int i = 0; i < 30000; i++)
		off += (size_t)sprintf(src + off, "%strue", i ? " and " : "");
	e = tf_expr_parse(src, "t", 1, 1, 1, &d);
	assert_null(e);
	assert_non_null(strstr(d.items[0].message, "expression too long"));
	tf_diag_list_release(&d);
	free(src);
}

static void count_ref(void *ctx, struct tf_ref *r)
{
	int *n = ctx;
	(*n)++;
	assert_true(r->line == 3 && r->col >= 9);
}

static void test_expr_visit_counts_refs(void **state)
{
	(void)state;
	struct tf_diag_list d = {0};
	struct tf_expr *e =
	    compile("${params.n} > 1 and (${steps.a.metrics.m} < 2 or ${params.b})", &d);
	assert_non_null(e);
	int n = 0;
	tf_expr_visit_refs(e, count_ref, &n);
	assert_int_equal(n, 3);
	/* the second reference starts at offset 21 */
	assert_int_equal(e->b->a->a->ref->col, 9 + 21);
	assert_string_equal(e->b->a->a->ref->step, "a");
	assert_int_equal(e->b->a->a->ref->kind, TF_REF_METRIC);
	tf_expr_free(e);
	tf_diag_list_release(&d);
}

static void test_expr_ref_parse(void **state)
{
	(void)state;
	struct tf_ref r;
	char err[200];
	assert_int_equal(tf_ref_parse("params.epochs", &r, err, sizeof(err)), 0);
	assert_int_equal(r.kind, TF_REF_PARAM);
	assert_string_equal(r.name, "epochs");
	assert_null(r.step);
	assert_int_equal(r.step_index, -1);
	tf_ref_release(&r);
	assert_int_equal(tf_ref_parse("steps.train.outputs.bundle", &r, err, sizeof(err)), 0);
	assert_int_equal(r.kind, TF_REF_OUTPUT);
	assert_string_equal(r.step, "train");
	assert_string_equal(r.name, "bundle");
	tf_ref_release(&r);
	/* the run's own facts and environment variables */
	assert_int_equal(tf_ref_parse("run.id", &r, err, sizeof(err)), 0);
	assert_int_equal(r.kind, TF_REF_RUN);
	assert_string_equal(r.name, "id");
	tf_ref_release(&r);
	assert_int_equal(tf_ref_parse("env.HOME", &r, err, sizeof(err)), 0);
	assert_int_equal(r.kind, TF_REF_ENV);
	assert_string_equal(r.name, "HOME");
	assert_null(r.step);
	tf_ref_release(&r);
	static const char *const bad[] = {"params",
	                                  "params.",
	                                  "params.a.b",
	                                  "steps.a.metrics",
	                                  "steps.a.outputs.b.c",
	                                  "steps..outputs.b",
	                                  "envs.HOME",
	                                  "env.1X",
	                                  "env.A-B",
	                                  "env.A.B",
	                                  "run.nope",
	                                  "run",
	                                  "params.1x",
	                                  ""};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(tf_ref_parse(bad[i], &r, err, sizeof(err)), -EINVAL);
}

static void test_expr_template_parse_and_render(void **state)
{
	(void)state;
	struct tf_diag_list d = {0};
	struct tf_template t;
	assert_int_equal(tf_template_parse("runs/${params.tag}/$${literal}/${steps.t.metrics.acc}",
	                                   "t", 7, 5, 1, &t, &d),
	                 0);
	assert_int_equal(t.nparts, 4);
	assert_string_equal(t.parts[0].text, "runs/");
	assert_int_equal(t.parts[1].ref->col, 5 + 5);
	assert_int_equal(t.parts[1].ref->line, 7);
	assert_string_equal(t.parts[2].text, "/${literal}/");
	assert_false(t.whole_ref);
	json_t *v = json_pack("{s:s, s:f}", "params.tag", "v1", "steps.t.metrics.acc", 0.875);
	char err[200];
	char *s = tf_template_render(&t, obj_lookup, v, err, sizeof(err));
	assert_string_equal(s, "runs/v1/${literal}/0.875");
	free(s);
	json_object_del(v, "params.tag");
	assert_null(tf_template_render(&t, obj_lookup, v, err, sizeof(err)));
	assert_non_null(strstr(err, "params.tag"));
	tf_template_release(&t);

	/* a whole reference keeps its JSON type */
	assert_int_equal(tf_template_parse("${params.hidden}", "t", 1, 1, 1, &t, &d), 0);
	assert_true(t.whole_ref);
	json_object_set_new(v, "params.hidden", json_pack("[i,i]", 256, 128));
	json_t *j = tf_template_render_json(&t, obj_lookup, v, err, sizeof(err));
	assert_true(json_is_array(j));
	assert_int_equal(json_array_size(j), 2);
	json_decref(j);
	s = tf_template_render(&t, obj_lookup, v, err, sizeof(err));
	assert_string_equal(s, "[256,128]");
	free(s);
	tf_template_release(&t);
	json_decref(v);

	/* errors keep going and carry columns */
	assert_int_equal(
	    tf_template_parse("a ${} b ${nope.x} c ${params.ok", "t", 2, 10, 1, &t, &d), -EINVAL);
	assert_int_equal(d.n, 3);
	assert_int_equal(d.items[0].col, 12);
	assert_int_equal(d.items[1].col, 18);
	assert_int_equal(d.items[2].col, 30);
	tf_template_release(&t);
	tf_diag_list_release(&d);

	/* not column-exact (folded text): every position is the string's start */
	assert_int_equal(tf_template_parse("x ${bad}", "t", 4, 3, 0, &t, &d), -EINVAL);
	assert_int_equal(d.items[0].col, 3);
	tf_template_release(&t);
	tf_diag_list_release(&d);
}

static void test_expr_diag_suggest_and_print(void **state)
{
	(void)state;
	assert_int_equal(tf_diag_edit_distance("retires", "retries", 5), 1);
	assert_int_equal(tf_diag_edit_distance("ca", "abc", 5), 3);
	assert_int_equal(tf_diag_edit_distance("kitten", "sitting", 5), 3);
	assert_int_equal(tf_diag_edit_distance("abc", "abcdefgh", 2), 3); /* capped */
	static const char *const keys[] = {"retries", "timeout", "needs", "type", NULL};
	assert_string_equal(tf_diag_suggest("retires", keys), "retries");
	assert_string_equal(tf_diag_suggest("neds", keys), "needs");
	assert_string_equal(tf_diag_suggest("tpye", keys), "type");
	assert_null(tf_diag_suggest("zzzzzz", keys));
	assert_null(tf_diag_suggest("ab", keys));

	struct tf_diag_list d;
	tf_diag_list_init(&d);
	tf_diag_add(&d, TF_DIAG_ERROR, "b.yaml", 2, 1, NULL, "second");
	tf_diag_add(&d, TF_DIAG_ERROR, "a.yaml", 9, 3, "do this", "first %d", 1);
	tf_diag_add(&d, TF_DIAG_WARNING, "b.yaml", 1, 5, NULL, "w");
	tf_diag_sort(&d);
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	tf_diag_print(&d, f);
	fclose(f);
	assert_string_equal(buf, "a.yaml:9:3: error: first 1\n  hint: do this\n"
	                         "b.yaml:1:5: warning: w\n"
	                         "b.yaml:2:1: error: second\n");
	free(buf);
	assert_int_equal(d.nerrors, 2);
	assert_int_equal(d.nwarnings, 1);
	json_t *j = tf_diag_to_json(&d);
	assert_int_equal(json_array_size(j), 3);
	assert_string_equal(json_string_value(json_object_get(json_array_get(j, 0), "hint")),
	                    "do this");
	json_decref(j);
	for (int i = 0; i < TF_DIAG_MAX + 10; i++)
		tf_diag_error(&d, "x", 1, 1, "e");
	assert_int_equal(d.n, TF_DIAG_MAX);
	assert_int_equal(d.ndropped, 13);
	tf_diag_list_release(&d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_expr_precedence_and_values),
	    cmocka_unit_test(test_expr_short_circuit_skips_missing_values),
	    cmocka_unit_test(test_expr_runtime_types),
	    cmocka_unit_test(test_expr_syntax_errors_have_columns),
	    cmocka_unit_test(test_expr_type_errors_have_columns),
	    cmocka_unit_test(test_expr_nesting_is_capped),
	    cmocka_unit_test(test_expr_visit_counts_refs),
	    cmocka_unit_test(test_expr_ref_parse),
	    cmocka_unit_test(test_expr_template_parse_and_render),
	    cmocka_unit_test(test_expr_diag_suggest_and_print),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

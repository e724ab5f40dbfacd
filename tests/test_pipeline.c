/* test_pipeline.c — the pipeline loader: the example pipelines load into the expected
 * structs, every error class is reported at its exact line:col, hostile input (alias bombs,
 * huge files, deep nesting) is refused fast, param overrides are type-checked, plans have the
 * right levels, and `with` renders to typed JSON. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "common/common.h"
#include "orchestrator/pipeline.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Loads `yaml` as "p.yaml"; returns the loader's code. */
static int load(const char *yaml, const struct tf_param_override *ov, size_t nov, unsigned flags,
                struct tf_pipeline **p, struct tf_diag_list *d)
{
	tf_diag_list_init(d);
	*p = NULL;
	int rc = tf_pipeline_load_buffer("p.yaml", yaml, strlen(yaml), ov, nov, flags, p, d);
	tf_diag_sort(d);
	return rc;
}

/* Is there a diagnostic at line:col whose message contains `msg` (and whose hint contains
 * `hint` when hint is not NULL)? Prints the list when not, to make failures readable. */
static int has_diag(const struct tf_diag_list *d, int line, int col, const char *msg,
                    const char *hint)
{
	for (size_t i = 0; i < d->n; i++) {
		const struct tf_diag *x = &d->items[i];
		if (x->line == line && x->col == col && strstr(x->message, msg) &&
		    (!hint || (x->hint && strstr(x->hint, hint))))
			return 1;
	}
	fprintf(stderr, "wanted %d:%d '%s' (hint '%s'), got:\n", line, col, msg, hint ? hint : "");
	tf_diag_print(d, stderr);
	return 0;
}

/* Loads a file expected to fail and checks one diagnostic. */
static void expect(const char *yaml, int line, int col, const char *msg, const char *hint)
{
	struct tf_pipeline *p;
	struct tf_diag_list d;
	assert_int_not_equal(load(yaml, NULL, 0, TF_PIPELINE_ALLOW_UNSET, &p, &d), 0);
	assert_null(p);
	assert_true(has_diag(&d, line, col, msg, hint));
	tf_diag_list_release(&d);
}

/* The repository root, from $TPUFLOW_BIN (ROOT/BUILD/tpuflow). */
static char *repo_path(const char *rel)
{
	const char *bin = getenv("TPUFLOW_BIN");
	char *b = tf_xstrdup(bin ? bin : "./build/tpuflow");
	char *dir = dirname(dirname(b));
	char *r = tf_xasprintf("%s/%s", dir, rel);
	free(b);
	return r;
}

static void test_pipeline_demo_loads(void **state)
{
	(void)state;
	char *path = repo_path("pipelines/fashion-mnist.yaml");
	struct tf_diag_list d;
	struct tf_pipeline *p = NULL;
	tf_diag_list_init(&d);
	int rc = tf_pipeline_load(path, NULL, 0, 0, &p, &d);
	tf_diag_print(&d, stderr);
	assert_int_equal(rc, 0);
	assert_string_equal(p->name, "fashion-mnist");
	assert_int_equal(p->nsteps, 5);
	assert_int_equal(p->nlevels, 5);
	const char *order[] = {"prep", "train", "evaluate", "register", "deploy"};
	for (size_t i = 0; i < 5; i++) {
		assert_string_equal(p->steps[p->topo[i]].name, order[i]);
		assert_int_equal(p->steps[p->topo[i]].level, (int)i);
	}
	const struct tf_step *train = &p->steps[tf_pipeline_step_index(p, "train")];
	assert_int_equal(train->type, TF_STEP_TRAIN);
	assert_string_equal(train->accelerator, "v4-8");
	assert_int_equal(train->nneeds, 1);
	assert_int_equal(train->needs[0], 0);
	assert_true(train->timeout == 20 * 60);
	assert_int_equal(train->retries.limit, 2);
	assert_true(train->retries.backoff == 5 && train->retries.max_backoff == 60);
	assert_int_equal(train->retries.on, (1u << TF_FAIL_TIMEOUT) |
	                                        (1u << TF_FAIL_PREEMPTED) |
	                                        (1u << TF_FAIL_INFRA));
	const struct tf_param *min = tf_pipeline_param(p, "min_accuracy");
	assert_int_equal(min->type, TF_PARAM_FLOAT);
	assert_true(json_real_value(min->value) == 0.88);
	const struct tf_step *deploy = &p->steps[4];
	assert_non_null(deploy->when);
	assert_int_equal(deploy->when->op, TF_EXPR_GE);
	assert_int_equal(deploy->when->a->ref->step_index, 2);
	const struct tf_with_value *hidden = tf_step_with(train, "hidden");
	assert_int_equal(hidden->kind, TF_WITH_LIST);
	assert_int_equal(hidden->nitems, 2);
	/* the outputs the engine must produce, from the schema */
	assert_int_equal(train->noutputs, 2);
	assert_string_equal(train->outputs[1], "bundle");
	free(path);
	tf_pipeline_free(p);
	tf_diag_list_release(&d);

	/* the other examples load too */
	const char *others[] = {"pipelines/shell-hello.yaml", "pipelines/tabular-csv.yaml"};
	for (size_t i = 0; i < 2; i++) {
		path = repo_path(others[i]);
		tf_diag_list_init(&d);
		rc = tf_pipeline_load(path, NULL, 0, 0, &p, &d);
		tf_diag_print(&d, stderr);
		assert_int_equal(rc, 0);
		tf_pipeline_free(p);
		tf_diag_list_release(&d);
		free(path);
	}
}

/* The demo's deploy gate evaluated through a lookup: params from the pipeline, metrics from
 * a JSON object standing in for finished steps. */
static json_t *gate_lookup(void *ctx, const struct tf_ref *r)
{
	void **c = ctx;
	if (r->kind == TF_REF_PARAM)
		return tf_pipeline_lookup_param(c[0], r);
	json_t *v = json_object_get(c[1], r->path);
	return v ? json_incref(v) : NULL;
}

static void test_pipeline_when_gate_and_render(void **state)
{
	(void)state;
	char *path = repo_path("pipelines/fashion-mnist.yaml");
	struct tf_diag_list d;
	struct tf_pipeline *p = NULL;
	tf_diag_list_init(&d);
	struct tf_param_override ov[1];
	assert_int_equal(tf_param_override_parse("epochs=3", &ov[0]), 0);
	assert_int_equal(tf_pipeline_load(path, ov, 1, 0, &p, &d), 0);
	json_t *vals = json_pack("{s:f, s:s, s:s, s:s}", "steps.evaluate.metrics.accuracy", 0.9,
	                         "steps.prep.outputs.dataset", "runs/1/prep/manifest.json",
	                         "steps.train.outputs.bundle", "runs/1/train/bundle",
	                         "steps.register.outputs.version", "3");
	void *ctx[2] = {p, vals};
	char err[200];
	int go = -1;
	assert_int_equal(
	    tf_expr_eval_bool(p->steps[4].when, gate_lookup, ctx, &go, err, sizeof(err)), 0);
	assert_int_equal(go, 1);
	json_object_set_new(vals, "steps.evaluate.metrics.accuracy", json_real(0.85));
	assert_int_equal(
	    tf_expr_eval_bool(p->steps[4].when, gate_lookup, ctx, &go, err, sizeof(err)), 0);
	assert_int_equal(go, 0);

	json_t *w = tf_step_render_with(&p->steps[1], gate_lookup, ctx, err, sizeof(err));
	assert_non_null(w);
	assert_int_equal(json_integer_value(json_object_get(w, "epochs")), 3); /* overridden */
	assert_int_equal(json_integer_value(json_object_get(w, "batch")), 256);
	assert_true(json_real_value(json_object_get(w, "lr")) == 0.1);
	assert_string_equal(json_string_value(json_object_get(w, "optimizer")), "sgd");
	assert_string_equal(json_string_value(json_object_get(w, "dataset")),
	                    "runs/1/prep/manifest.json");
	assert_int_equal(json_integer_value(json_array_get(json_object_get(w, "hidden"), 1)), 128);
	json_decref(w);
	w = tf_step_render_with(&p->steps[3], gate_lookup, ctx, err, sizeof(err));
	assert_string_equal(
	    json_string_value(json_object_get(json_object_get(w, "tags"), "hidden")),
	    "256,128"); /* quoted in the file: stays a string */
	json_decref(w);
	json_object_del(vals, "steps.train.outputs.bundle");
	assert_null(tf_step_render_with(&p->steps[2], gate_lookup, ctx, err, sizeof(err)));
	assert_non_null(strstr(err, "steps.train.outputs.bundle"));
	json_decref(vals);
	tf_pipeline_free(p);
	tf_diag_list_release(&d);
	free(path);
}

/* Text-typed values (argv, env) are passed on as written, also when a number param reaches
 * them (its default or --param text: 1.10 stays 1.10, 012 stays 012); elsewhere a whole
 * reference keeps the param's type, and a number put into other text takes its shortest
 * exact form. */
static void test_pipeline_argv_keeps_source_text(void **state)
{
	(void)state;
	struct tf_pipeline *p;
	struct tf_diag_list d;
	static const char *const src =
	    "name: t\nparams:\n  f: {type: float, default: 1.10}\n  n: 012\nsteps:\n"
	    "  - {name: s, type: shell, with: {argv: [x, 1.10, 012, ~, 3, true, "
	    "1e3, '${params.f}', 'f=${params.f}', '${params.n}'], env: {A: 0.10, B: "
	    "'${params.f}'}}}\n";
	assert_int_equal(load(src, NULL, 0, 0, &p, &d), 0);
	void *ctx[2] = {p, NULL};
	char err[200];
	json_t *w = tf_step_render_with(&p->steps[0], gate_lookup, ctx, err, sizeof(err));
	assert_non_null(w);
	json_t *argv = json_object_get(w, "argv");
	static const char *const want[] = {"x",    "1.10", "012",  "~",      "3",
	                                   "true", "1e3",  "1.10", "f=1.10", "012"};
	for (size_t i = 0; i < TF_ARRAY_LEN(want); i++)
		assert_string_equal(json_string_value(json_array_get(argv, i)), want[i]);
	json_t *env = json_object_get(w, "env");
	assert_string_equal(json_string_value(json_object_get(env, "A")), "0.10");
	assert_string_equal(json_string_value(json_object_get(env, "B")), "1.10");
	json_decref(w);
	/* the value itself is a number: in JSON it is 1.1 */
	const struct tf_param *f = tf_pipeline_param(p, "f");
	assert_true(json_is_real(f->value));
	char *text = tf_template_value_text(f->value);
	assert_string_equal(text, "1.1");
	free(text);
	tf_pipeline_free(p);
	tf_diag_list_release(&d);

	/* --param text is passed on as written too */
	struct tf_param_override ov[] = {{.name = "f", .value = "2.50"}};
	assert_int_equal(load(src, ov, 1, 0, &p, &d), 0);
	ctx[0] = p;
	w = tf_step_render_with(&p->steps[0], gate_lookup, ctx, err, sizeof(err));
	assert_non_null(w);
	assert_string_equal(json_string_value(json_array_get(json_object_get(w, "argv"), 7)),
	                    "2.50");
	json_decref(w);
	tf_pipeline_free(p);
	tf_diag_list_release(&d);
}

static void test_pipeline_yaml_syntax_error(void **state)
{
	(void)state;
	expect("name: x\nsteps:\n  - name: a\n   type: shell\n", 4, 4,
	       "YAML syntax error: did not find expected '-' indicator", NULL);
	expect("name: x\nsteps: [a, b\n", 3, 1, "did not find expected ',' or ']'", NULL);
	expect("name: 'x\n", 2, 1, "found unexpected end of stream", NULL);
	expect("name: x\n---\nname: y\n", 2, 1, "more than one YAML document", NULL);
	expect("name: *nope\n", 1, 7, "unknown alias '*nope'", NULL);
	/* a tab, a 5,000-character name, `yes` for a bool: what to do, not only what failed */
	expect("name: x\nsteps:\n\t- {name: a}\n", 3, 1, "found character that cannot start",
	       "YAML does not allow tabs for indentation: indent with spaces");
	char *long_name = tf_xmalloc(5100);
	snprintf(long_name, 5100, "name: %0*d\nsteps: []\n", 5000, 0);
	memset(long_name + 6, 'a', 5000);
	expect(long_name, 1, 7, "bad pipeline name", "names are at most 64 characters");
	free(long_name);
	expect("name: x\nparams:\n  flag: {type: bool, default: yes}\nsteps: []\n", 3, 31,
	       "its default 'yes' is not", "write true or false");
	/* an unquoted reference inside a flow list: the hint says what to do */
	expect("name: x\nsteps:\n  - {name: a, type: shell, with: {argv: [${params.x}]}}\n", 3, 43,
	       "did not find expected ',' or ']'", "quote values that contain ${...}");
}

static const char *const base_ok = "name: ok\n"
                                   "steps:\n"
                                   "  - name: a\n"
                                   "    type: shell\n"
                                   "    with: {argv: [x]}\n";

static void test_pipeline_unknown_keys_suggest(void **state)
{
	(void)state;
	expect("name: x\nstep:\n  - name: a\n", 2, 1, "unknown key 'step' in the pipeline",
	       "did you mean 'steps'?");
	expect("name: x\nsteps:\n  - name: a\n    type: shell\n    retires: 3\n", 5, 5,
	       "unknown key 'retires' in step 'a'", "did you mean 'retries'?");
	expect("name: x\nsteps:\n  - name: a\n    type: shell\n    retries: {limt: 3}\n", 5, 15,
	       "unknown key 'limt' in 'retries'", "did you mean 'limit'?");
	expect("name: x\nsteps:\n  - name: a\n    type: train\n    with: {epoch: 3}\n", 5, 12,
	       "unknown key 'epoch' in 'with' of train step 'a'", "did you mean 'epochs'?");
	expect("name: x\nsteps:\n  - name: a\n    type: shell\n    zzzzzz: 1\n", 5, 5,
	       "unknown key 'zzzzzz'", "valid keys: name, type, needs");
	expect("name: x\nname: y\nsteps: []\n", 2, 1, "duplicate key 'name' in the pipeline",
	       "the first is at line 1, column 1");
	struct tf_pipeline *p;
	struct tf_diag_list d;
	assert_int_equal(load(base_ok, NULL, 0, 0, &p, &d), 0);
	tf_pipeline_free(p);
	tf_diag_list_release(&d);
}

static void test_pipeline_wrong_types(void **state)
{
	(void)state;
	expect("name: x\nsteps: {a: 1}\n", 2, 8, "'steps' must be a list, not a mapping", NULL);
	expect("name: x\nsteps:\n  - name: a\n    type: shell\n    cache: maybe\n", 5, 12,
	       "'cache' must be true or false, not 'maybe'", NULL);
	expect("name: x\nsteps:\n  - name: a\n    type: shell\n    retries: {limit: -1}\n", 5, 22,
	       "'retries.limit' must be between 0 and 1000", NULL);
	expect("name: x\nsteps:\n  - name: a\n    type: train\n    with: {epochs: ten}\n", 5, 20,
	       "'with.epochs' of step 'a' expects an integer, not 'ten'", NULL);
	expect("name: x\nsteps:\n  - name: a\n    type: train\n    with: {hidden: 256}\n", 5, 20,
	       "'with.hidden' of step 'a' must be a list", NULL);
	expect("name: x\nsteps:\n  - name: a\n    type: train\n    with: {hidden: [256, x]}\n", 5,
	       26, "expects an integer, not 'x'", NULL);
	expect("name: x\nsteps:\n  - name: a\n    type: train\n    with: {optimizer: adma}\n", 5,
	       23, "'with.optimizer' of step 'a': unknown value 'adma'", "did you mean 'adam'?");
	expect("name: x\nsteps:\n  - name: a\n    type: train\n    with: {lr: \"0.1\"}\n", 5, 16,
	       "expects a number, not '0.1'", "write it without quotes");
	expect("name: x\nparams:\n  n: {type: int, default: 1.5}\nsteps: []\n", 3, 27,
	       "param 'n' is an int, but its default '1.5' is not", NULL);
	expect("name: x\nparams:\n  n: {type: integer}\nsteps: []\n", 3, 13,
	       "unknown param type 'integer'", NULL);
	expect("name: x\nparams:\n  e: {type: float, default: 2}\n  h: {type: list}\n"
	       "steps:\n  - name: a\n    type: train\n    with: {epochs: '${params.e}', "
	       "hidden: '${params.e}'}\n",
	       8, 20, "'with.epochs' of step 'a' expects an integer, but '${params.e}' is a float",
	       NULL);
	expect("name: x\nparams:\n  e: {type: float, default: 2}\n"
	       "steps:\n  - name: a\n    type: train\n    with: {hidden: \"${params.e}\"}\n",
	       7, 20, "expects a list, but '${params.e}' is a number", NULL);
	expect("name: x\nsteps:\n  - name: a\n    type: shell\n    executor: inprocess\n    with: "
	       "{argv: [x]}\n",
	       5, 15, "cannot use the inprocess executor", "executor: local");
	expect("- a\n- b\n", 1, 1, "a pipeline must be a mapping, not a list", NULL);
	expect("", 1, 1, "the pipeline file is empty", NULL);
}

/* `priority` and `project`: top level, defaults and per step; each checked where it stands. */
static void test_pipeline_priority_and_project(void **state)
{
	(void)state;
	struct tf_pipeline *p;
	struct tf_diag_list d;
	assert_int_equal(load("name: x\npriority: 7\nproject: research\n"
	                      "defaults: {priority: 3, project: batch}\n"
	                      "steps:\n  - {name: a, type: shell, with: {argv: [x]}}\n"
	                      "  - {name: b, type: shell, priority: 9, project: prod, "
	                      "with: {argv: [x]}}\n",
	                      NULL, 0, 0, &p, &d),
	                 0);
	assert_int_equal(p->priority, 7);
	assert_string_equal(p->project, "research");
	assert_int_equal(p->steps[0].priority, 3);
	assert_string_equal(p->steps[0].project, "batch");
	assert_int_equal(p->steps[1].priority, 9);
	assert_string_equal(p->steps[1].project, "prod");
	tf_pipeline_free(p);
	tf_diag_list_release(&d);
	assert_int_equal(load("name: x\nsteps:\n  - {name: a, type: shell, with: {argv: [x]}}\n",
	                      NULL, 0, 0, &p, &d),
	                 0);
	assert_int_equal(p->priority, -1);
	assert_null(p->project);
	assert_int_equal(p->steps[0].priority, -1);
	assert_null(p->steps[0].project);
	tf_pipeline_free(p);
	tf_diag_list_release(&d);
	expect("name: x\npriority: 12\nsteps: []\n", 2, 11, "'priority' must be between 0 and 9",
	       NULL);
	expect("name: x\ndefaults: {priority: high}\nsteps: []\n", 2, 22, "'defaults.priority'",
	       NULL);
	expect("name: x\nsteps:\n  - name: a\n    type: shell\n    project: 'a b'\n", 5, 14,
	       "bad project name 'a b'", "letters, digits");
	expect("name: x\nsteps:\n  - name: a\n    type: shell\n    priorty: 3\n", 5, 5, "priorty",
	       "did you mean 'priority'?");
}

/* `schedule`: cron text (a bad part reported at its own column), zone, policies. */
static void test_pipeline_schedule(void **state)
{
	(void)state;
	struct tf_pipeline *p;
	struct tf_diag_list d;
	assert_int_equal(load("name: x\nschedule:\n  cron: '*/15 9-17 * * mon-fri'\n"
	                      "  timezone: Europe/Berlin\n  concurrency: replace\n  catchup: all\n"
	                      "  catchup_max: 3\n  starting_deadline: 10m\n"
	                      "steps:\n  - {name: a, type: shell, with: {argv: [x]}}\n",
	                      NULL, 0, 0, &p, &d),
	                 0);
	assert_non_null(p->schedule);
	assert_string_equal(p->schedule->cron, "*/15 9-17 * * mon-fri");
	assert_string_equal(p->schedule->timezone, "Europe/Berlin");
	assert_int_equal(p->schedule->concurrency, TF_CONCURRENCY_REPLACE);
	assert_int_equal(p->schedule->catchup, TF_CATCHUP_ALL);
	assert_int_equal(p->schedule->catchup_max, 3);
	assert_true(p->schedule->starting_deadline == 600);
	assert_int_equal(p->schedule->spec.dow, 0x3e);
	tf_pipeline_free(p);
	tf_diag_list_release(&d);
	assert_int_equal(load("name: x\nschedule: '@daily'\n"
	                      "steps:\n  - {name: a, type: shell, with: {argv: [x]}}\n",
	                      NULL, 0, 0, &p, &d),
	                 0);
	assert_string_equal(p->schedule->timezone, "UTC");
	assert_int_equal(p->schedule->concurrency, TF_CONCURRENCY_FORBID);
	assert_int_equal(p->schedule->catchup, TF_CATCHUP_LATEST);
	tf_pipeline_free(p);
	tf_diag_list_release(&d);
	/* the column of the bad field inside the cron text: quoted and plain */
	expect("name: x\nschedule: {cron: '0 25 * * *'}\nsteps: []\n", 2, 21,
	       "bad cron schedule: hour: '25' is out of range 0-23", "five fields");
	expect("name: x\nschedule:\n  cron: 0 0 * foo *\nsteps: []\n", 3, 15,
	       "month: 'foo' is not a number or a name", NULL);
	expect("name: x\nschedule: '@fortnightly'\nsteps: []\n", 2, 12, "unknown macro", NULL);
	expect("name: x\nschedule: {cron: '@daily', timezone: Mars/Olympus}\nsteps: []\n", 2, 38,
	       "unknown time zone 'Mars/Olympus'", NULL);
	expect("name: x\nschedule: {cron: '@daily', concurrency: forbidd}\nsteps: []\n", 2, 41,
	       "unknown concurrency policy 'forbidd'", "did you mean 'forbid'?");
	expect("name: x\nschedule: {cron: '@daily', catchup: some}\nsteps: []\n", 2, 37,
	       "unknown catch-up policy 'some'", NULL);
	expect("name: x\nschedule: {timezone: UTC}\nsteps: []\n", 2, 11, "'schedule' has no 'cron'",
	       NULL);
}

/* `executor`: a shell step cannot be inprocess (but `defaults.executor: inprocess` leaves it
 * local); `slurm` needs storage every node reaches, reported at the position of the
 * `executor` that asked for it; register/deploy stay in tpuflow; `slurm:` is checked. */
static void test_pipeline_executor_rules(void **state)
{
	(void)state;
	unsetenv("TPUFLOW_SHARED_STORAGE");
	expect("name: x\nsteps:\n  - name: a\n    type: train\n    executor: slurm\n", 5, 15,
	       "step 'a' runs on Slurm, but the run's storage (the state home's objects/) is not",
	       "storage: s3://");
	expect("name: x\nstorage: /tmp/o\ndefaults: {executor: slurm}\nsteps:\n  - name: a\n"
	       "    type: train\n",
	       3, 22, "storage '/tmp/o' is not one every node can reach", "TPUFLOW_SHARED_STORAGE");
	expect("name: x\nstorage: s3://b/p\nsteps:\n  - name: a\n    type: register\n"
	       "    executor: slurm\n",
	       6, 15, "a register step cannot run on Slurm", NULL);
	expect("name: x\nstorage: s3://b/p\nsteps:\n  - name: a\n    type: train\n"
	       "    slurm: {partition: tpu}\n",
	       6, 12, "'slurm' applies only to steps with 'executor: slurm'", NULL);
	expect("name: x\nstorage: s3://b/p\nsteps:\n  - name: a\n    type: train\n"
	       "    executor: slurm\n    slurm: {partition: 'a b'}\n",
	       7, 24, "bad 'slurm.partition' 'a b'", NULL);
	expect("name: x\nstorage: s3://b/p\nsteps:\n  - name: a\n    type: train\n"
	       "    executor: slurm\n    slurm: {args: [--mem=1G, mem]}\n",
	       7, 30, "'slurm.args' item 'mem' is not an sbatch option", NULL);
	expect("name: x\nstorage: s3://b/p\nsteps:\n  - name: a\n    type: train\n"
	       "    executor: slurm\n    slurm: {args: [--mem=1.5G]}\n",
	       7, 20, "'slurm.args' item '--mem=1.5G': sbatch reads memory as a whole number",
	       NULL);
	expect("name: x\nstorage: s3://b/p\nsteps:\n  - name: a\n    type: train\n"
	       "    executor: slurm\n    slurm: {args: [--time=20m]}\n",
	       7, 20, "'slurm.args' item '--time=20m': Slurm writes a time as MINUTES", NULL);
	expect("name: x\nstorage: s3://b/p\nsteps:\n  - name: a\n    type: train\n"
	       "    executor: slurm\n    slurm: {args: [--array=0-3]}\n",
	       7, 20, "'slurm.args' item '--array=0-3' cannot be given: an attempt is one job",
	       NULL);
	expect("name: x\nstorage: s3://b/p\nsteps:\n  - name: a\n    type: train\n"
	       "    executor: slurm\n    slurm: {queue: q}\n",
	       7, 13, "unknown", NULL);
	expect("name: x\nsteps:\n  - name: a\n    type: shell\n    executor: inprocess\n"
	       "    with: {argv: [x]}\n",
	       5, 15, "step 'a': a shell step runs a program and cannot use the inprocess executor",
	       "executor: local");
	struct tf_pipeline *p;
	struct tf_diag_list d;
	assert_int_equal(load("name: x\ndefaults: {executor: inprocess}\nsteps:\n"
	                      "  - name: a\n    type: shell\n    with: {argv: [x]}\n"
	                      "  - name: b\n    type: train\n"
	                      "  - name: c\n    type: evaluate\n    executor: local\n",
	                      NULL, 0, TF_PIPELINE_ALLOW_UNSET, &p, &d),
	                 0);
	assert_int_equal(p->steps[0].executor, TF_EXECUTOR_LOCAL);
	assert_int_equal(p->steps[1].executor, TF_EXECUTOR_INPROCESS);
	assert_int_equal(p->steps[2].executor, TF_EXECUTOR_LOCAL);
	tf_pipeline_free(p);
	tf_diag_list_release(&d);
	/* slurm: defaults' options under the step's, register stays in tpuflow, a file:// path
	 * declared shared is accepted */
	setenv("TPUFLOW_SHARED_STORAGE", "/nfs/a:/shared/", 1);
	assert_int_equal(load("name: x\nstorage: file:///shared/objects\n"
	                      "defaults:\n  executor: slurm\n"
	                      "  slurm: {partition: tpu, account: ml, args: [--mem=1G]}\n"
	                      "steps:\n  - name: a\n    type: train\n    slurm: {account: other}\n"
	                      "  - name: b\n    type: register\n",
	                      NULL, 0, TF_PIPELINE_ALLOW_UNSET, &p, &d),
	                 0);
	assert_int_equal(p->steps[0].executor, TF_EXECUTOR_SLURM);
	assert_string_equal(p->steps[0].slurm.partition, "tpu");
	assert_string_equal(p->steps[0].slurm.account, "other");
	assert_int_equal(p->steps[0].slurm.nargs, 1);
	assert_string_equal(p->steps[0].slurm.args[0], "--mem=1G");
	assert_int_equal(p->steps[1].executor, TF_EXECUTOR_INPROCESS);
	tf_pipeline_free(p);
	tf_diag_list_release(&d);
	assert_true(tf_storage_shared("s3://b/p"));
	assert_true(tf_storage_shared("/nfs/a/x"));
	assert_false(tf_storage_shared("/nfs/ab/x"));
	assert_false(tf_storage_shared("file://relative"));
	unsetenv("TPUFLOW_SHARED_STORAGE");
	assert_int_equal(load("name: x\ndefaults: {executor: local}\nsteps:\n"
	                      "  - name: a\n    type: data_prep\n",
	                      NULL, 0, TF_PIPELINE_ALLOW_UNSET, &p, &d),
	                 0);
	assert_int_equal(p->steps[0].executor, TF_EXECUTOR_LOCAL);
	tf_pipeline_free(p);
	tf_diag_list_release(&d);
}

/* `cache`: off by default for shell steps only, on for them when asked on the step or under
 * `defaults`; `cache_inputs` needs a cached step and names files relative to the pipeline. */
static void test_pipeline_shell_cache_defaults(void **state)
{
	(void)state;
	struct tf_pipeline *p;
	struct tf_diag_list d;
	assert_int_equal(load("name: c\nsteps:\n"
	                      "  - {name: s, type: shell, with: {argv: [x]}}\n"
	                      "  - {name: t, type: shell, cache: true, cache_inputs: [run.sh, "
	                      "/etc/hostname], with: {argv: [x]}}\n"
	                      "  - {name: d, type: data_prep, with: {source: fashion-mnist}}\n",
	                      NULL, 0, 0, &p, &d),
	                 0);
	assert_int_equal(p->steps[0].cache, 0);
	assert_int_equal(p->steps[1].cache, 1);
	assert_int_equal(p->steps[2].cache, 1);
	assert_int_equal(p->steps[1].ncache_inputs, 2);
	char cwd[4096], *want;
	assert_non_null(getcwd(cwd, sizeof(cwd)));
	want = tf_xasprintf("%s/run.sh", cwd);
	assert_string_equal(p->steps[1].cache_inputs[0], want);
	assert_string_equal(p->steps[1].cache_inputs[1], "/etc/hostname");
	free(want);
	tf_pipeline_free(p);
	tf_diag_list_release(&d);
	assert_int_equal(load("name: c\ndefaults: {cache: true}\nsteps:\n"
	                      "  - {name: s, type: shell, with: {argv: [x]}}\n",
	                      NULL, 0, 0, &p, &d),
	                 0);
	assert_int_equal(p->steps[0].cache, 1);
	tf_pipeline_free(p);
	tf_diag_list_release(&d);
	expect("name: x\nsteps:\n  - name: a\n    type: shell\n    cache_inputs: [run.sh]\n"
	       "    with: {argv: [x]}\n",
	       5, 19, "'cache_inputs' has no effect on a step that is not cached", "cache: true");
	expect("name: x\nsteps:\n  - name: a\n    type: shell\n    cache: true\n"
	       "    cache_inputs: run.sh\n    with: {argv: [x]}\n",
	       6, 19, "'cache_inputs' must be a list", NULL);
	expect("name: x\nsteps:\n  - name: a\n    type: shell\n    cache: true\n"
	       "    cache_inputs: ['']\n    with: {argv: [x]}\n",
	       6, 20, "empty or binary path in 'cache_inputs'", NULL);
}

/* expect() at the position of the first occurrence of `at` in yaml. */
static void expect_at(const char *yaml, const char *at, const char *msg, const char *hint)
{
	const char *p = strstr(yaml, at);
	assert_non_null(p);
	int line = 1, col = 1;
	for (const char *c = yaml; c < p; c++, col++)
		if (*c == '\n')
			line++, col = 0;
	expect(yaml, line, col, msg, hint);
}

/* Values that fail at run time are refused at load with their position: the bounds and
 * rules live in the per-kind `with` schema rows. */
static void test_pipeline_with_values_checked_at_load(void **state)
{
	(void)state;
	static const struct {
		const char *yaml, *at, *msg;
	} cases[] = {
	    {"name: x\nsteps:\n  - {name: a, type: shell, with: {argv: []}}\n", "[]}",
	     "'with.argv' of step 'a' must not be empty"},
	    {"name: x\nsteps:\n  - {name: a, type: train, with: {hidden: [-5, 0]}}\n", "-5",
	     "'with.hidden' of step 'a' must be between 1 and 1000000, not -5"},
	    {"name: x\nsteps:\n  - {name: a, type: train, with: {hidden: [5, 0]}}\n", "0]",
	     "must be between 1 and 1000000, not 0"},
	    {"name: x\nsteps:\n  - {name: a, type: train, with: {epochs: -1}}\n", "-1",
	     "'with.epochs' of step 'a' must be between 1 and"},
	    {"name: x\nsteps:\n  - {name: a, type: train, with: {batch: 0}}\n", "0}",
	     "'with.batch' of step 'a' must be between 1 and"},
	    {"name: x\nsteps:\n  - {name: a, type: train, with: {lr: -1}}\n", "-1",
	     "'with.lr' of step 'a' must be greater than 0, not -1"},
	    {"name: x\nsteps:\n  - {name: a, type: deploy, with: {model_name: m, version: '1', "
	     "canary_percent: 150}}\n",
	     "150", "'with.canary_percent' of step 'a' must be at least 0 and less than 100"},
	    {"name: x\nsteps:\n  - {name: a, type: deploy, with: {model_name: m, version: '1', "
	     "rollout_steps: [10], rollout_max_disagreement_vs_production: 1.5}}\n",
	     "1.5", "'with.rollout_max_disagreement_vs_production' of step 'a' must be between 0 "
	            "and 1, not 1.5"},
	    {"name: x\nsteps:\n  - {name: a, type: deploy, with: {model_name: m, version: '1', "
	     "rollout_steps: [10], rollout_shadow_percent: 0}}\n",
	     "0}", "'with.rollout_shadow_percent' of step 'a' must be greater than 0 and at most "
	           "100"},
	    /* rollout_soak_s is a duration, as the pipeline's timeouts and backoffs */
	    {"name: x\nsteps:\n  - {name: a, type: deploy, with: {model_name: m, version: '1', "
	     "rollout_steps: [10], rollout_soak_s: 10 minutes}}\n",
	     "10 minutes", "'with.rollout_soak_s' of step 'a' expects a duration, not '10 minutes'"},
	    {"name: x\nsteps:\n  - {name: a, type: deploy, with: {model_name: m, version: '1', "
	     "rollout_steps: [10], rollout_soak_s: 31d}}\n",
	     "31d", "'with.rollout_soak_s' of step 'a' must be between 0 and 2592000 seconds, not 31d"},
	    {"name: x\nparams:\n  soak: {type: string, default: soon}\nsteps:\n  - {name: a, "
	     "type: deploy, with: {model_name: m, version: '1', rollout_steps: [10], "
	     "rollout_soak_s: '${params.soak}'}}\n",
	     "'${", "expects a duration, not 'soon' (the value of ${params.soak})"},
	    {"name: x\nsteps:\n  - {name: a, type: deploy, with: {model_name: m, version: '1', "
	     "alias: ''}}\n",
	     "''", "the alias is empty"},
	    {"name: x\nsteps:\n  - {name: a, type: deploy, with: {model_name: m, version: '1', "
	     "alias: a/b}}\n",
	     "a/b", "alias 'a/b': use 1 to 64 characters"},
	    {"name: x\nsteps:\n  - {name: a, type: deploy, with: {model_name: m, version: '1', "
	     "alias: latest}}\n",
	     "latest", "alias 'latest' reads as a version"},
	    {"name: x\nsteps:\n  - {name: a, type: deploy, with: {model_name: m, version: '1', "
	     "alias: '7'}}\n",
	     "'7'", "alias '7' reads as a version"},
	    {"name: x\nsteps:\n  - {name: a, type: deploy, with: {model_name: m, version: -5}}\n",
	     "-5", "version '-5': versions are numbered from 1"},
	    {"name: x\nsteps:\n  - {name: a, type: deploy, with: {model_name: 'bad name! "
	     "../../x', version: '1'}}\n",
	     "'bad", "model name 'bad name! ../../x': use 1 to 64 characters"},
	    {"name: x\nsteps:\n  - {name: a, type: data_prep, with: {shards: 0}}\n", "0}",
	     "'with.shards' of step 'a' must be between 1 and 4096, not 0"},
	    {"name: x\nsteps:\n  - {name: a, type: data_prep, with: {source: csv, path: f.csv, "
	     "test_fraction: 2}}\n",
	     "2}", "'with.test_fraction' of step 'a' must be greater than 0 and less than 1"},
	    {"name: x\nsteps:\n  - {name: a, type: data_prep, with: {source: csv}}\n", "csv",
	     "'with.source: csv' of step 'a' needs 'with.path'"},
	    {"name: x\nsteps:\n  - {name: a, type: shell, with: {argv: [x], outputs: [o, p, o]}}\n",
	     "o]", "'with.outputs' of step 'a' lists 'o' twice"},
	    {"name: x\nsteps:\n  - {name: a, type: shell, with: {argv: [x], env: {'A=B': v}}}\n",
	     "'A=B'", "'A=B' is not an environment variable name"},
	    {"name: x\nsteps:\n  - {name: a, type: shell, with: {argv: [x], env: {'': v}}}\n",
	     "'':", "'' is not an environment variable name"},
	    {"name: x\nsteps:\n  - {name: a, type: shell, with: {argv: [x], env: {1X: v}}}\n",
	     "1X", "'1X' is not an environment variable name"},
	    /* a param's value is known at load: the same bounds apply */
	    {"name: x\nparams:\n  e: {type: int, default: 0}\nsteps:\n  - {name: a, type: train, "
	     "with: {epochs: '${params.e}'}}\n",
	     "'${", "must be between 1 and 1073741824, not 0 (the value of ${params.e})"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		expect_at(cases[i].yaml, cases[i].at, cases[i].msg, NULL);
	/* the good side of each bound loads */
	struct tf_pipeline *p;
	struct tf_diag_list d;
	assert_int_equal(
	    load("name: x\nsteps:\n"
	         "  - {name: p, type: data_prep, with: {source: csv, path: f.csv, shards: 1, "
	         "test_fraction: 0.2}}\n"
	         "  - {name: t, type: train, needs: [p], with: {hidden: [1], epochs: 1, batch: 1, "
	         "lr: 0.001}}\n"
	         "  - {name: s, type: shell, with: {argv: [x], env: {_A1: v}, outputs: [o, q]}}\n"
	         "  - {name: d, type: deploy, with: {model_name: fashion-mnist.v2_a, version: v3, "
	         "alias: production, canary_percent: 0}}\n"
	         "  - {name: e, type: deploy, with: {model_name: m, version: latest, alias: "
	         "canary, canary_percent: 99.5}}\n"
	         "  - {name: f, type: deploy, with: {model_name: m, version: '1', alias: a, "
	         "canary_percent: 5, rollout_steps: [10], rollout_soak_s: 1h30m}}\n"
	         "  - {name: g, type: deploy, with: {model_name: m, version: '1', alias: b, "
	         "canary_percent: 5, rollout_steps: [10], rollout_soak_s: 600}}\n",
	         NULL, 0, 0, &p, &d),
	    0);
	tf_pipeline_free(p);
	tf_diag_list_release(&d);
}

static void test_pipeline_bad_durations(void **state)
{
	(void)state;
	static const struct {
		const char *s;
		double v;
	} good[] = {{"30s", 30}, {"5m", 300},   {"1h30m", 5400}, {"250ms", 0.25},
	            {"90", 90},  {"1.5", 1.5},  {"2d", 172800},  {"1h0m30s", 3630},
	            {"0", 0},    {"1.5h", 5400}};
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		double v = -1;
		assert_int_equal(tf_duration_parse(good[i].s, &v), 0);
		assert_true(v == good[i].v);
	}
	static const char *const bad[] = {"",   "5x",    "-3",  "m",   "5 m", "1h-3m",
	                                  "s5", "1e400", "5mm", "inf", "nan", "3ms5"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		double v;
		if (!strcmp(bad[i], "3ms5"))
			continue; /* "3ms" then a bare 5: checked below as a whole */
		assert_int_equal(tf_duration_parse(bad[i], &v), -EINVAL);
	}
	double v;
	assert_int_equal(tf_duration_parse("3ms5", &v), -EINVAL);
	expect("name: x\ndefaults:\n  timeout: 5x\nsteps: []\n", 3, 12,
	       "'timeout': bad duration '5x'", "30s, 5m, 1h30m, 250ms");
	expect("name: x\nsteps:\n  - name: a\n    type: shell\n    timeout: -3\n", 5, 14,
	       "bad duration '-3'", NULL);
	expect("name: x\nsteps:\n  - name: a\n    type: shell\n    retries: {backoff: soon}\n", 5,
	       24, "'retries.backoff': bad duration 'soon'", NULL);
}

static void test_pipeline_duplicate_step_names(void **state)
{
	(void)state;
	expect("name: x\nsteps:\n  - name: a\n    type: shell\n    with: {argv: [x]}\n"
	       "  - name: b\n    type: shell\n    with: {argv: [x]}\n"
	       "  - name: a\n    type: train\n",
	       9, 11, "duplicate step name 'a'", "the first is at line 3, column 11");
}

static void test_pipeline_unknown_needs(void **state)
{
	(void)state;
	expect("name: x\nsteps:\n  - name: prep\n    type: shell\n    with: {argv: [x]}\n"
	       "  - name: b\n    type: shell\n    needs: [perp, zzz]\n    with: {argv: [x]}\n",
	       8, 13, "step 'b' needs unknown step 'perp'", "did you mean 'prep'?");
	expect("name: x\nsteps:\n  - name: prep\n    type: shell\n    with: {argv: [x]}\n"
	       "  - name: b\n    type: shell\n    needs: [perp, zzz]\n    with: {argv: [x]}\n",
	       8, 19, "step 'b' needs unknown step 'zzz'", NULL);
}

static void test_pipeline_cycles(void **state)
{
	(void)state;
	const char *y =
	    "name: x\nsteps:\n"
	    "  - name: a\n    type: shell\n    needs: [c]\n    with: {argv: [x]}\n"
	    "  - name: b\n    type: shell\n    needs: [a]\n    with: {argv: [x]}\n"
	    "  - name: c\n    type: shell\n    needs: [b]\n    with: {argv: [x]}\n"
	    "  - name: d\n    type: shell\n    needs: [d, nope]\n    with: {argv: [x]}\n";
	/* reported where the cycle closes, in run order (b runs before c before a) */
	expect(y, 9, 13, "dependency cycle: b -> c -> a -> b", "cannot depend on itself");
	expect(y, 17, 13, "dependency cycle: d -> d", NULL);
	expect(y, 17, 16, "needs unknown step 'nope'", NULL); /* and the typo is reported too */
}

static void test_pipeline_reference_errors(void **state)
{
	(void)state;
	const char *y =
	    "name: x\n"
	    "params:\n"
	    "  epochs: 3\n"
	    "steps:\n"
	    "  - name: prep\n"
	    "    type: data_prep\n"
	    "  - name: train\n"
	    "    type: train\n"
	    "    needs: [prep]\n"
	    "    with:\n"
	    "      dataset: ${steps.prep.outputs.datset}\n"
	    "      epochs: ${params.epoch}\n"
	    "      seed: ${steps.nope.metrics.x}\n"
	    "      lr: ${steps.prep.metrics.loss}\n"
	    "  - name: side\n"
	    "    type: shell\n"
	    "    with: {argv: [\"${steps.train.outputs.bundle}\", \"${steps.side.outputs.o}\"], "
	    "outputs: [o]}\n"
	    "  - name: reg\n"
	    "    type: register\n"
	    "    needs: [train]\n"
	    "    with: {bundle: \"x-${steps.side.outputs.o}\", metrics_from: side}\n"
	    "    when: ${steps.prep.metrics.examples} > 10 and ${steps.train.metrics.acc} > 1\n"
	    "  - name: ev\n"
	    "    type: evaluate\n"
	    "    needs: [train]\n"
	    "    when: ${steps.ev.metrics.loss} < 1\n";
	expect(y, 11, 16, "step 'prep' (data_prep) has no output 'datset'",
	       "did you mean 'dataset'?");
	expect(y, 12, 15, "unknown param 'epoch' in '${params.epoch}'", "did you mean 'epochs'?");
	expect(y, 13, 13, "unknown step 'nope' in '${steps.nope.metrics.x}'", NULL);
	expect(y, 14, 11, "step 'prep' (data_prep) has no metric 'loss'", "its metrics: examples");
	/* not upstream: side does not need train */
	expect(y, 17, 20,
	       "step 'side' uses '${steps.train.outputs.bundle}' but does not depend on "
	       "step 'train'",
	       "add 'train' to the needs of 'side'");
	expect(y, 17, 53, "step 'side' refers to its own outputs", NULL);
	expect(y, 21, 23, "step 'reg' uses '${steps.side.outputs.o}' but does not depend", NULL);
	expect(y, 21, 63, "'with.metrics_from' of step 'reg': step 'side' is not upstream", NULL);
	/* transitive needs count: prep is upstream of reg through train */
	expect(y, 22, 51, "step 'train' (train) has no metric 'acc'", "did you mean 'auc'?");
	expect(y, 26, 11, "step 'ev' refers to its own metrics", NULL);
	struct tf_pipeline *p;
	struct tf_diag_list d;
	assert_int_equal(load(y, NULL, 0, 0, &p, &d), -EINVAL);
	assert_int_equal(d.nerrors, 10); /* every problem, nothing more */
	tf_diag_list_release(&d);
}

/* ${run.id}, ${run.pipeline}, ${env.NAME} and `finally:` steps: checked at load with
 * positions; an unset ${env.NAME} is an error for a new run (naming the variable), a warning
 * for validate, and left to the step otherwise (a resumed run). */
static void test_pipeline_run_env_refs_and_finally(void **state)
{
	(void)state;
	unsetenv("TF_TEST_UNSET_VAR");
	setenv("TF_TEST_SET_VAR", "s3cret", 1);
	const char *y = "name: x\n"
	                "steps:\n"
	                "  - name: a\n"
	                "    type: shell\n"
	                "    with: {argv: [\"${run.id}\", \"${run.pipeline}\", \"${env.TF_TEST_SET_VAR}\"]}\n"
	                "finally:\n"
	                "  - name: f\n"
	                "    type: shell\n"
	                "    when: ${run.state} == 'failed'\n"
	                "    with: {argv: [\"${run.state}\", \"${steps.a.outputs.o}\"]}\n";
	struct tf_pipeline *p;
	struct tf_diag_list d;
	/* outputs of `a` are not declared: the only error */
	expect(y, 10, 36, "step 'a' (shell) has no output 'o'", NULL);
	const char *ok = "name: x\n"
	                 "steps:\n"
	                 "  - {name: a, type: shell, with: {argv: [\"${env.TF_TEST_SET_VAR}\"]}}\n"
	                 "  - {name: b, type: shell, needs: [a], with: {argv: [/bin/true]}}\n"
	                 "finally:\n"
	                 "  - {name: f, type: shell, with: {argv: [\"${run.state}\"]}}\n"
	                 "  - {name: g, type: shell, needs: [f], with: {argv: [/bin/true]}}\n";
	assert_int_equal(load(ok, NULL, 0, TF_PIPELINE_ENV_SET, &p, &d), 0);
	assert_int_equal(p->nsteps, 4);
	assert_int_equal(p->nmain, 2);
	assert_true(p->steps[0].uses_env && !p->steps[1].uses_env);
	assert_true(p->steps[2].final && p->steps[3].final && !p->steps[1].final);
	assert_int_equal(p->steps[2].nneeds, 2); /* every step of `steps` */
	assert_int_equal(p->steps[3].nneeds, 3); /* f, then a and b */
	assert_true(p->steps[3].level > p->steps[2].level);
	tf_pipeline_free(p);
	tf_diag_list_release(&d);

	/* bad references, run.state outside finally, a step that needs a finally step */
	const char *bad = "name: x\n"
	                  "steps:\n"
	                  "  - {name: a, type: shell, with: {argv: [\"${run.nope}\", \"${env.1X}\"]}}\n"
	                  "  - {name: b, type: shell, needs: [f], with: {argv: [\"${run.state}\"]}}\n"
	                  "finally:\n"
	                  "  - {name: f, type: shell, with: {argv: [/bin/true]}}\n";
	expect(bad, 3, 43, "bad reference '${run.nope}': write '${run.id}'", NULL);
	expect(bad, 3, 58, "bad reference '${env.1X}'", NULL);
	expect(bad, 4, 36, "step 'b' needs 'f', a finally step", NULL);
	expect(bad, 4, 55, "'${run.state}' (the outcome of the run's steps) is known only to "
	                   "finally steps, and 'b' is not one",
	       "move the step under 'finally:'");

	/* an alert route's when knows the run's id and pipeline, not the environment */
	expect("name: x\nsteps:\n  - {name: a, type: shell, with: {argv: [/bin/true]}}\n"
	       "alerts:\n  - {on: run_failed, to: h, when: \"${run.pipeline} == 'x' and "
	       "${env.X} == 'y'\"}\n",
	       5, 63, "'${env.X}' is not known to an alert route", NULL);

	/* an unset variable: an error naming it for a new run, a warning for validate, nothing
	 * for a resumed run (the step that uses it fails then) */
	const char *env = "name: x\n"
	                  "steps:\n"
	                  "  - {name: a, type: shell, with: {argv: [\"${env.TF_TEST_UNSET_VAR}\"]}}\n";
	assert_int_equal(load(env, NULL, 0, TF_PIPELINE_ENV_SET, &p, &d), -EINVAL);
	assert_true(has_diag(&d, 3, 43, "environment variable TF_TEST_UNSET_VAR is not set", NULL));
	tf_diag_list_release(&d);
	assert_int_equal(load(env, NULL, 0, TF_PIPELINE_ALLOW_UNSET, &p, &d), 0);
	assert_int_equal(d.n, 1);
	assert_int_equal(d.items[0].severity, TF_DIAG_WARNING);
	tf_pipeline_free(p);
	tf_diag_list_release(&d);
	assert_int_equal(load(env, NULL, 0, 0, &p, &d), 0);
	assert_int_equal(d.n, 0);
	char err[256];
	json_t *w = tf_step_render_with(&p->steps[0], NULL, NULL, err, sizeof(err));
	assert_null(w);
	assert_non_null(strstr(err, "environment variable TF_TEST_UNSET_VAR is not set"));
	tf_pipeline_free(p);
	tf_diag_list_release(&d);
	unsetenv("TF_TEST_SET_VAR");
}

static void test_pipeline_unknown_step_type(void **state)
{
	(void)state;
	expect("name: x\nsteps:\n  - name: a\n    type: trian\n", 4, 11,
	       "unknown step type 'trian'", "did you mean 'train'?");
	expect("name: x\nsteps:\n  - name: a\n    type: sql\n", 4, 11, "unknown step type 'sql'",
	       "choose one of: data_prep, train, evaluate, register, deploy, shell");
	expect("name: x\nsteps:\n  - name: a\n", 3, 5, "step 'a' has no 'type'", NULL);
}

static void test_pipeline_unknown_accelerator(void **state)
{
	(void)state;
	expect("name: x\nsteps:\n  - name: a\n    type: train\n    accelerator: v9-8\n", 5, 18,
	       "unknown TPU generation", NULL);
	expect("name: x\nsteps:\n  - name: a\n    type: train\n    accelerator: v4-7\n", 5, 18,
	       "v4-7", NULL);
	struct tf_pipeline *p;
	struct tf_diag_list d;
	assert_int_equal(
	    load("name: x\nsteps:\n  - {name: a, type: train, accelerator: 'v4:2x2x4'}\n", NULL, 0,
	         0, &p, &d),
	    0);
	assert_string_equal(p->steps[0].accelerator, "v4-32"); /* canonical name */
	tf_pipeline_free(p);
	tf_diag_list_release(&d);
}

static void test_pipeline_when_errors(void **state)
{
	(void)state;
	const char *y =
	    "name: x\nparams:\n  go: true\n  min: 0.5\nsteps:\n"
	    "  - name: a\n    type: evaluate\n"
	    "  - name: b\n    type: deploy\n    needs: [a]\n"
	    "    when: ${steps.a.metrics.accuracy} >= ${params.min} and ${params.go} > false\n"
	    "  - name: c\n    type: deploy\n    needs: [a]\n    when: ${params.min} =< 1\n";
	expect(y, 11, 60, "booleans cannot be ordered with '>'", NULL);
	expect(y, 15, 25, "'=' is not an operator", "compare with '=='");
	/* every metric the train step records can be named, early_stopped too */
	const char *ok = "name: x\nsteps:\n  - name: t\n    type: train\n"
	                 "  - name: d\n    type: deploy\n    needs: [t]\n"
	                 "    when: ${steps.t.metrics.early_stopped} == 0 and "
	                 "${steps.t.metrics.input_wait} < 1\n";
	struct tf_pipeline *p;
	struct tf_diag_list d;
	assert_int_equal(load(ok, NULL, 0, TF_PIPELINE_ALLOW_UNSET, &p, &d), 0);
	tf_pipeline_free(p);
	tf_diag_list_release(&d);
}

static void test_pipeline_param_overrides(void **state)
{
	(void)state;
	/* a run's recorded overrides (runs.params) back into overrides */
	json_t *rec = json_pack("{s:s, s:i}", "n", "2", "odd", 7);
	size_t nrec = 9;
	struct tf_param_override *got = tf_param_overrides_from_json(rec, &nrec);
	assert_int_equal(nrec, 2);
	assert_string_equal(got[0].name, "n");
	assert_string_equal(got[0].value, "2");
	assert_string_equal(got[1].value, ""); /* not a string */
	free(got);
	json_decref(rec);
	got = tf_param_overrides_from_json(NULL, &nrec);
	assert_int_equal(nrec, 0);
	free(got);
	const char *y = "name: x\n"
	                "params:\n"
	                "  n: {type: int, default: 1}\n"
	                "  f: {type: float, default: 0.5}\n"
	                "  s: {type: string, default: a}\n"
	                "  b: {type: bool, default: false}\n"
	                "  l: {type: list, default: [1, 2]}\n"
	                "  req: {type: int}\n"
	                "steps:\n  - {name: a, type: shell, with: {argv: [x]}}\n";
	struct tf_param_override ov[8];
	const char *args[] = {"n=42", "f=3", "s=x=y", "b=yes", "l=[256,128]", "req=7"};
	for (size_t i = 0; i < 6; i++)
		assert_int_equal(tf_param_override_parse(args[i], &ov[i]), 0);
	assert_int_equal(tf_param_override_parse("novalue", &ov[7]), -EINVAL);
	assert_int_equal(tf_param_override_parse("=3", &ov[7]), -EINVAL);
	struct tf_pipeline *p;
	struct tf_diag_list d;
	assert_int_equal(load(y, ov, 6, 0, &p, &d), 0);
	assert_int_equal(json_integer_value(tf_pipeline_param(p, "n")->value), 42);
	assert_true(json_real_value(tf_pipeline_param(p, "f")->value) == 3.0);
	assert_string_equal(json_string_value(tf_pipeline_param(p, "s")->value), "x=y");
	assert_true(json_is_true(tf_pipeline_param(p, "b")->value));
	assert_int_equal(json_array_size(tf_pipeline_param(p, "l")->value), 2);
	assert_true(tf_pipeline_param(p, "n")->overridden);
	assert_int_equal(json_integer_value(tf_pipeline_param(p, "n")->default_value), 1);
	tf_pipeline_free(p);
	tf_diag_list_release(&d);

	/* a,b,c lists, typed by their looks */
	assert_int_equal(tf_param_override_parse("l=a,2,true", &ov[0]), 0);
	assert_int_equal(load(y, ov, 1, TF_PIPELINE_ALLOW_UNSET, &p, &d), 0);
	json_t *l = tf_pipeline_param(p, "l")->value;
	assert_string_equal(json_string_value(json_array_get(l, 0)), "a");
	assert_int_equal(json_integer_value(json_array_get(l, 1)), 2);
	assert_true(json_is_true(json_array_get(l, 2)));
	assert_null(tf_pipeline_param(p, "req")->value); /* allowed unset */
	tf_pipeline_free(p);
	tf_diag_list_release(&d);

	/* every bad override is reported; a param without value is an error for runs */
	const char *bad[] = {"n=4.5", "f=fast", "b=maybe", "l=[1,[2]]", "nn=3"};
	for (size_t i = 0; i < 5; i++)
		assert_int_equal(tf_param_override_parse(bad[i], &ov[i]), 0);
	assert_int_equal(load(y, ov, 5, 0, &p, &d), -EINVAL);
	assert_null(p);
	assert_int_equal(d.nerrors, 6);
	assert_true(has_diag(
	    &d, 0, 0, "--param n: param 'n' is an int: expected an integer, got '4.5'", NULL));
	assert_true(has_diag(&d, 0, 0, "--param f: param 'f' is a float: expected a number", NULL));
	assert_true(
	    has_diag(&d, 0, 0, "--param b: param 'b' is a bool: expected true or false", NULL));
	assert_true(
	    has_diag(&d, 0, 0, "--param l: param 'l' is a list: list items must be scalars", NULL));
	assert_true(
	    has_diag(&d, 0, 0, "--param nn: the pipeline has no param 'nn'", "did you mean 'n'?"));
	assert_true(has_diag(&d, 8, 3, "param 'req' has no value", "--param NAME=VALUE"));
	tf_diag_list_release(&d);
}

static void test_pipeline_plan_levels(void **state)
{
	(void)state;
	/* a diamond plus an independent chain, listed out of order */
	const char *y = "name: diamond\nsteps:\n"
	                "  - {name: join, type: shell, needs: [left, right], with: {argv: [x]}}\n"
	                "  - {name: left, type: shell, needs: [root], with: {argv: [x]}}\n"
	                "  - {name: right, type: shell, needs: root, with: {argv: [x]}}\n"
	                "  - {name: root, type: shell, with: {argv: [x]}}\n"
	                "  - {name: solo, type: shell, with: {argv: [x]}}\n"
	                "  - {name: tail, type: shell, needs: [join, solo], with: {argv: [x]}}\n";
	struct tf_pipeline *p;
	struct tf_diag_list d;
	assert_int_equal(load(y, NULL, 0, 0, &p, &d), 0);
	assert_int_equal(p->nlevels, 4);
	const char *order[] = {"root", "solo", "left", "right", "join", "tail"};
	const int levels[] = {0, 0, 1, 1, 2, 3};
	for (size_t i = 0; i < 6; i++) {
		assert_string_equal(p->steps[p->topo[i]].name, order[i]);
		assert_int_equal(p->steps[p->topo[i]].level, levels[i]);
	}
	json_t *j = tf_pipeline_plan_json(p);
	json_t *lv = json_object_get(j, "levels");
	assert_int_equal(json_array_size(lv), 4);
	assert_int_equal(json_array_size(json_array_get(lv, 1)), 2);
	assert_string_equal(json_string_value(json_array_get(json_array_get(lv, 3), 0)), "tail");
	json_decref(j);
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	tf_pipeline_plan_dot(p, f);
	fclose(f);
	assert_non_null(strstr(buf, "digraph \"diamond\""));
	assert_non_null(strstr(buf, "\"root\" -> \"left\";"));
	assert_non_null(strstr(buf, "{ rank=same; \"root\"; \"solo\"; }"));
	free(buf);
	tf_pipeline_free(p);
	tf_diag_list_release(&d);
}

static void test_pipeline_alias_bomb_refused_fast(void **state)
{
	(void)state;
	/* billion laughs: 9 levels of 9 aliases each = 9^9 nodes once expanded */
	char y[4096];
	size_t off = (size_t)snprintf(y, sizeof(y),
	                              "a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
	for (int i = 1; i < 10; i++) {
		off += (size_t)snprintf(y + off, sizeof(y) - off, "a%d: &a%d [", i, i);
		for (int k = 0; k < 9; k++)
			off += (size_t)snprintf(y + off, sizeof(y) - off, "%s*a%d", k ? ", " : "",
			                        i - 1);
		off += (size_t)snprintf(y + off, sizeof(y) - off, "]\n");
	}
	double t0 = tf_now_monotonic();
	struct tf_pipeline *p;
	struct tf_diag_list d;
	assert_int_equal(load(y, NULL, 0, 0, &p, &d), -E2BIG);
	double dt = tf_now_monotonic() - t0;
	assert_null(p);
	assert_true(has_diag(&d, 6, 20, "alias '*a4' expands the document past 250000 nodes",
	                     "alias bomb"));
	assert_true(dt < 2.0); /* generous bound; it takes well under a millisecond */
	tf_diag_list_release(&d);

	/* many cheap aliases hit the alias count instead */
	char *big = malloc(64 * 1024);
	off = (size_t)snprintf(big, 64 * 1024, "x: &x 1\nl: [");
	for (int i = 0; i < 1200; i++)
		off += (size_t)snprintf(big + off, 64 * 1024 - off, "*x, ");
	snprintf(big + off, 64 * 1024 - off, "]\n");
	assert_int_equal(load(big, NULL, 0, 0, &p, &d), -E2BIG);
	assert_non_null(strstr(d.items[0].message, "too many aliases: more than 1000"));
	tf_diag_list_release(&d);
	free(big);
}

static void test_pipeline_huge_and_deep_files_refused_fast(void **state)
{
	(void)state;
	/* a 100 MB file (sparse: it costs no disk) is refused by its size before reading */
	int fd = open("huge.yaml", O_CREAT | O_WRONLY | O_TRUNC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, 100L * 1024 * 1024), 0);
	close(fd);
	double t0 = tf_now_monotonic();
	struct tf_pipeline *p = NULL;
	struct tf_diag_list d;
	tf_diag_list_init(&d);
	assert_int_equal(tf_pipeline_load("huge.yaml", NULL, 0, 0, &p, &d), -EFBIG);
	assert_true(tf_now_monotonic() - t0 < 2.0);
	assert_true(has_diag(&d, 0, 0,
	                     "file too large: 104857600 bytes (pipelines are limited to "
	                     "1048576 bytes)",
	                     NULL));
	tf_diag_list_release(&d);
	unlink("huge.yaml");

	/* the same from memory */
	size_t n = TF_PIPELINE_MAX_BYTES + 1;
	char *buf = malloc(n);
	memset(buf, ' ', n);
	assert_int_equal(tf_pipeline_load_buffer("m.yaml", buf, n, NULL, 0, 0, &p, &d), -EFBIG);
	tf_diag_list_release(&d);

	/* deep nesting: 100000 '[' stops at the depth cap, no stack overflow */
	memset(buf, '[', 100000);
	buf[100000] = '\0';
	t0 = tf_now_monotonic();
	assert_int_equal(load(buf, NULL, 0, 0, &p, &d), -E2BIG);
	assert_true(tf_now_monotonic() - t0 < 2.0);
	assert_true(has_diag(&d, 1, 33, "nesting too deep: more than 32 levels", NULL));
	tf_diag_list_release(&d);

	/* a flat list of 300000 scalars trips the node limit */
	size_t off = 0;
	off += (size_t)snprintf(buf, n, "l: [");
	for (int i = 0; i < 300000 && off + 8 < n; i++)
		off += (size_t)snprintf(buf + off, n - off, "%d,", i % 10);
	snprintf(buf + off, n - off, "]\n");
	assert_int_equal(load(buf, NULL, 0, 0, &p, &d), -E2BIG);
	assert_non_null(
	    strstr(d.items[0].message, "document too large: more than 250000 YAML nodes"));
	tf_diag_list_release(&d);
	free(buf);

	/* a missing file is a diagnostic, not a crash */
	tf_diag_list_init(&d);
	assert_int_equal(tf_pipeline_load("missing.yaml", NULL, 0, 0, &p, &d), -ENOENT);
	assert_true(has_diag(&d, 0, 0, "cannot read the file", NULL));
	tf_diag_list_release(&d);
}

static void test_pipeline_many_steps_and_many_errors(void **state)
{
	(void)state;
	/* a 3000-step chain loads quickly, and 3000 unknown needs stay a bounded list */
	size_t cap = 800 * 1024, off = 0;
	char *y = malloc(cap);
	off += (size_t)snprintf(y, cap, "name: chain\nsteps:\n");
	for (int i = 0; i < 3000; i++)
		off += (size_t)snprintf(
		    y + off, cap - off,
		    "  - {name: s%d, type: shell, needs: [s%d], with: {argv: [x]}}\n", i,
		    i ? i - 1 : 2999 + 1);
	struct tf_pipeline *p;
	struct tf_diag_list d;
	double t0 = tf_now_monotonic();
	assert_int_equal(load(y, NULL, 0, 0, &p, &d), -EINVAL); /* s0 needs s3000: unknown */
	assert_int_equal(d.nerrors, 1);
	tf_diag_list_release(&d);
	char *fix = strstr(y, "needs: [s3000]");
	memcpy(fix, "needs: []     ", 14);
	assert_int_equal(load(y, NULL, 0, 0, &p, &d), 0);
	assert_int_equal(p->nlevels, 3000);
	assert_true(tf_now_monotonic() - t0 < 2.0);
	tf_pipeline_free(p);
	tf_diag_list_release(&d);

	off = (size_t)snprintf(y, cap, "name: bad\nsteps:\n");
	for (int i = 0; i < 3000; i++)
		off += (size_t)snprintf(
		    y + off, cap - off,
		    "  - {name: s%d, type: shell, needs: [q%d], with: {argv: [x]}}\n", i, i);
	assert_int_equal(load(y, NULL, 0, 0, &p, &d), -EINVAL);
	assert_int_equal(d.nerrors, 3000);
	assert_int_equal(d.n, TF_DIAG_MAX);
	tf_diag_list_release(&d);
	free(y);
}

/* Runs a shell command line and returns its exit status. */
static int run(const char *cmd)
{
	int st = system(cmd);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_pipeline_cli_validate_and_plan(void **state)
{
	(void)state;
	const char *bin = getenv("TPUFLOW_BIN");
	if (!bin)
		skip();
	char *demo = repo_path("pipelines/fashion-mnist.yaml");
	FILE *f = fopen("bad.yaml", "w");
	fputs("name: bad\nsteps:\n  - name: a\n    type: shel\n  - name: b\n    type: shell\n"
	      "    neds: [a]\n",
	      f);
	fclose(f);
	char *cmd = tf_xasprintf("'%s' validate '%s' bad.yaml >out.txt 2>err.txt", bin, demo);
	assert_int_equal(run(cmd), 65); /* every file checked, the bad one fails the lot */
	free(cmd);
	char *out = NULL, *err = NULL;
	assert_int_equal(tf_read_file("err.txt", 1 << 20, &err, NULL), 0);
	assert_non_null(strstr(err, "bad.yaml:4:11: error: unknown step type 'shel'\n"
	                            "  hint: did you mean 'shell'?\n"));
	assert_non_null(strstr(err, "bad.yaml:7:5: error: unknown key 'neds' in step 'b'\n"
	                            "  hint: did you mean 'needs'?\n"));
	assert_int_equal(tf_read_file("out.txt", 1 << 20, &out, NULL), 0);
	assert_non_null(strstr(out, "fashion-mnist.yaml: ok (5 steps, 5 levels)"));
	assert_non_null(strstr(out, "bad.yaml: 2 errors"));
	free(out);
	free(err);

	cmd = tf_xasprintf("'%s' validate --param epochs=3 '%s' >/dev/null 2>&1", bin, demo);
	assert_int_equal(run(cmd), 0);
	free(cmd);
	cmd = tf_xasprintf("'%s' validate --param epochs=many '%s' 2>/dev/null >/dev/null", bin,
	                   demo);
	assert_int_equal(run(cmd), 65);
	free(cmd);
	cmd = tf_xasprintf("'%s' validate --param epochs '%s' 2>/dev/null", bin, demo);
	assert_int_equal(run(cmd), 64);
	free(cmd);

	cmd = tf_xasprintf("'%s' plan --json --param min_accuracy=0.9 '%s' >plan.json", bin, demo);
	assert_int_equal(run(cmd), 0);
	free(cmd);
	json_error_t je;
	json_t *plan = json_load_file("plan.json", 0, &je);
	assert_non_null(plan);
	assert_int_equal(json_array_size(json_object_get(plan, "levels")), 5);
	assert_true(json_real_value(
	                json_object_get(json_object_get(plan, "params"), "min_accuracy")) == 0.9);
	json_decref(plan);
	cmd = tf_xasprintf("'%s' plan --dot '%s' >plan.dot", bin, demo);
	assert_int_equal(run(cmd), 0);
	free(cmd);
	assert_int_equal(tf_read_file("plan.dot", 1 << 20, &out, NULL), 0);
	assert_non_null(strstr(out, "\"train\" -> \"evaluate\";"));
	free(out);
	cmd = tf_xasprintf("'%s' plan --json --dot '%s' 2>/dev/null", bin, demo);
	assert_int_equal(run(cmd), 64);
	free(cmd);
	cmd = tf_xasprintf("'%s' --json validate bad.yaml >v.json 2>/dev/null", bin);
	assert_int_equal(run(cmd), 65);
	free(cmd);
	json_t *v = json_load_file("v.json", 0, &je);
	assert_non_null(v);
	assert_true(json_is_false(json_object_get(v, "ok")));
	json_t *d0 = json_array_get(
	    json_object_get(json_array_get(json_object_get(v, "files"), 0), "diagnostics"), 0);
	assert_int_equal(json_integer_value(json_object_get(d0, "line")), 4);
	assert_int_equal(json_integer_value(json_object_get(d0, "col")), 11);
	json_decref(v);
	free(demo);
}

/* The top-level name of text that came without a file (diagnostics of a posted pipeline). */
static void test_pipeline_peek_name(void **state)
{
	(void)state;
	static const struct {
		const char *text, *name;
	} cases[] = {
	    {"name: mnist\nsteps: []\n", "mnist"},
	    {"steps:\n  - {name: a, type: shell}\nname: \"after steps\"\n", "after steps"},
	    {"params: {name: x}\nsteps: [{name: a}]\n", NULL}, /* only nested names */
	    {"steps: [\nname: x\n", NULL},                       /* broken before it */
	    {"- name: a list\n", NULL},
	    {"name: [not, a, scalar]\n", NULL},
	    {"", NULL},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *got = tf_pipeline_peek_name(cases[i].text, strlen(cases[i].text));
		if (cases[i].name)
			assert_string_equal(got, cases[i].name);
		else
			assert_null(got);
		free(got);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_pipeline_demo_loads),
	    cmocka_unit_test(test_pipeline_when_gate_and_render),
	    cmocka_unit_test(test_pipeline_yaml_syntax_error),
	    cmocka_unit_test(test_pipeline_unknown_keys_suggest),
	    cmocka_unit_test(test_pipeline_wrong_types),
	    cmocka_unit_test(test_pipeline_shell_cache_defaults),
	    cmocka_unit_test(test_pipeline_with_values_checked_at_load),
	    cmocka_unit_test(test_pipeline_argv_keeps_source_text),
	    cmocka_unit_test(test_pipeline_bad_durations),
	    cmocka_unit_test(test_pipeline_executor_rules),
	    cmocka_unit_test(test_pipeline_priority_and_project),
	    cmocka_unit_test(test_pipeline_schedule),
	    cmocka_unit_test(test_pipeline_duplicate_step_names),
	    cmocka_unit_test(test_pipeline_unknown_needs),
	    cmocka_unit_test(test_pipeline_cycles),
	    cmocka_unit_test(test_pipeline_reference_errors),
	    cmocka_unit_test(test_pipeline_run_env_refs_and_finally),
	    cmocka_unit_test(test_pipeline_unknown_step_type),
	    cmocka_unit_test(test_pipeline_unknown_accelerator),
	    cmocka_unit_test(test_pipeline_when_errors),
	    cmocka_unit_test(test_pipeline_param_overrides),
	    cmocka_unit_test(test_pipeline_plan_levels),
	    cmocka_unit_test(test_pipeline_alias_bomb_refused_fast),
	    cmocka_unit_test(test_pipeline_huge_and_deep_files_refused_fast),
	    cmocka_unit_test(test_pipeline_many_steps_and_many_errors),
	    cmocka_unit_test(test_pipeline_cli_validate_and_plan),
	    cmocka_unit_test(test_pipeline_peek_name),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

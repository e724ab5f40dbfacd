/* test_engine.c — the run engine with in-process test kinds: parallel DAGs, retries with
 * backoff, timeouts, gates, references, the cache, interruption and resume; plus register and
 * deploy through the registry. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "common/buf.h"
#include "common/common.h"
#include "orchestrator/engine.h"
#include "orchestrator/kinds.h"
#include "orchestrator/registry.h"
#include "storage/objstore.h"
#include "tests/testutil.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- test kinds ------------------------------------------------------------------------ */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int calls[64]; /* calls per step index (by name hash below) */
static char names[64][32];
static double t_start[64][8]; /* monotonic start of each attempt */
static double t_end[64][8];
static int concurrent, max_concurrent;

static int slot(const char *name)
{
	for (int i = 0; i < 64; i++) {
		if (!names[i][0]) {
			snprintf(names[i], sizeof(names[i]), "%s", name);
			return i;
		}
		if (!strcmp(names[i], name))
			return i;
	}
	return 63;
}

static void reset(void)
{
	memset(calls, 0, sizeof(calls));
	memset(names, 0, sizeof(names));
	memset(t_start, 0, sizeof(t_start));
	memset(t_end, 0, sizeof(t_end));
	concurrent = max_concurrent = 0;
}

static int ncalls(const char *name)
{
	pthread_mutex_lock(&mu);
	int n = calls[slot(name)];
	pthread_mutex_unlock(&mu);
	return n;
}

/* Behaviour from `with`: argv[0] is a verb: ok | fail N (fail the first N calls) | sleep S |
 * hang (until cancelled) | wait S (until cancelled, fails then, at most S seconds) | timed S
 * (says its executor counts the timeout, tf_step_run_timed_by_executor, then waits) | put KEY (writes the object KEY to the run's store) | bundle PREFIX
 * (writes a small real model bundle there) | nolog (logs a line, then puts an object where
 * the log's upload needs a directory). Outputs:
 * out=<value>; metrics: metric=<number>. */
static int test_kind(struct tf_step_run *r)
{
	json_t *argv = json_object_get(r->with, "argv");
	const char *verb = json_string_value(json_array_get(argv, 0));
	const char *arg = json_string_value(json_array_get(argv, 1));
	pthread_mutex_lock(&mu);
	int s = slot(r->step), n = calls[s]++;
	if (n < 8)
		t_start[s][n] = tf_now_monotonic();
	if (++concurrent > max_concurrent)
		max_concurrent = concurrent;
	pthread_mutex_unlock(&mu);
	int rc = 0;
	if (verb && !strcmp(verb, "fail") && n < atoi(arg)) {
		snprintf(r->err, sizeof(r->err), "planned failure %d", n + 1);
		r->exit_code = 3;
		rc = -EIO;
	} else if (!verb) {
		usleep(50000); /* a step without argv (train) takes a little while */
	} else if (verb && !strcmp(verb, "sleep")) {
		double until = tf_now_monotonic() + atof(arg);
		while (tf_now_monotonic() < until && !*r->cancel)
			usleep(1000);
	} else if (verb && (!strcmp(verb, "wait") || !strcmp(verb, "timed"))) {
		if (!strcmp(verb, "timed"))
			tf_step_run_timed_by_executor(r);
		double until = tf_now_monotonic() + atof(arg);
		while (tf_now_monotonic() < until && !*r->cancel)
			usleep(1000);
		if (*r->cancel) {
			snprintf(r->err, sizeof(r->err), "stopped");
			rc = -EINTR;
		}
	} else if (verb && !strcmp(verb, "put")) {
		rc = tf_objstore_put(r->objstore, arg, "x", 1, 0);
	} else if (verb && !strcmp(verb, "nolog")) {
		r->progress(r->progress_data, "a line for the log");
		char *key = tf_xasprintf("%slogs", r->prefix);
		rc = tf_objstore_put(r->objstore, key, "x", 1, 0);
		free(key);
	} else if (verb && !strcmp(verb, "bundle")) {
		rc = tf_test_write_bundle(r->storage_url, arg);
	} else if (verb && !strcmp(verb, "hang") && (!arg || n < atoi(arg))) {
		while (!*r->cancel)
			usleep(1000);
		snprintf(r->err, sizeof(r->err), "stopped");
		rc = -EINTR;
	}
	for (size_t i = 1; argv && i < json_array_size(argv); i++) {
		const char *a = json_string_value(json_array_get(argv, i));
		if (a && !strncmp(a, "out=", 4))
			json_object_set_new(r->outputs, "out", json_string(a + 4));
		if (a && !strncmp(a, "metric=", 7))
			json_object_set_new(r->metrics, "metric", json_real(atof(a + 7)));
	}
	pthread_mutex_lock(&mu);
	concurrent--;
	if (n < 8)
		t_end[s][n] = tf_now_monotonic();
	pthread_mutex_unlock(&mu);
	return rc;
}

static struct tf_engine_opts opts(void)
{
	struct tf_engine_opts o = {.home = "home", .workers = 4};
	o.kinds[TF_STEP_SHELL] = test_kind;
	return o;
}

static const char *sstate(json_t *summary, const char *name)
{
	return json_string_value(json_object_get(tf_test_step_of(summary, name), "state"));
}

/* The `out` output of step `name` in a summary ("" when it has none). */
static const char *step_out(json_t *summary, const char *name)
{
	const char *v = json_string_value(
	    json_object_get(json_object_get(tf_test_step_of(summary, name), "outputs"), "out"));
	return v ? v : "";
}

static int run_yaml(const char *yaml, const struct tf_engine_opts *o,
                    const struct tf_param_override *ov, size_t nov, struct tf_engine_result *res)
{
	tf_test_write_file("p.yaml", yaml);
	struct tf_diag_list diags = {0};
	char err[512] = "";
	memset(res, 0, sizeof(*res));
	int rc = tf_engine_run_file(o, "p.yaml", ov, nov, &diags, res, err, sizeof(err));
	if (rc) {
		tf_diag_print(&diags, stderr);
		fprintf(stderr, "engine: %s\n", err);
	}
	tf_diag_list_release(&diags);
	return rc;
}

/* Starts a run of `yaml` (written to `file`) on `o`; the engine is the caller's. */
static struct tf_engine *start_run(const struct tf_engine_opts *o, const char *file,
                                   const char *yaml)
{
	tf_test_write_file(file, yaml);
	struct tf_engine_req rq = {.path = file};
	struct tf_diag_list diags = {0};
	struct tf_engine *e = NULL;
	char err[256] = "";
	int rc = tf_engine_start(o, &rq, &e, &diags, err, sizeof(err));
	if (rc)
		fprintf(stderr, "engine: %s\n", err);
	assert_int_equal(rc, 0);
	tf_diag_list_release(&diags);
	return e;
}

/* ---- tests ------------------------------------------------------------------------------ */

static void test_engine_parallel_dag_with_references(void **state)
{
	(void)state;
	reset();
	struct tf_engine_opts o = opts();
	struct tf_engine_result res;
	assert_int_equal(
	    run_yaml("name: dag\n"
	             "params:\n  tag: {type: string, default: v1}\n"
	             "steps:\n"
	             "  - {name: a, type: shell, with: {argv: [sleep, '0.2', 'out=${params.tag}'], "
	             "outputs: [out]}}\n"
	             "  - {name: b, type: shell, with: {argv: [sleep, '0.2', 'metric=0.5'], "
	             "metrics: [metric]}}\n"
	             "  - name: c\n    type: shell\n    needs: [a, b]\n"
	             "    with: {argv: [ok, "
	             "'out=${steps.a.outputs.out}-${steps.b.metrics.metric}'], outputs: [out]}\n",
	             &o, NULL, 0, &res),
	    0);
	assert_int_equal(res.state, TF_RUN_SUCCEEDED);
	assert_int_equal(max_concurrent, 2); /* a and b ran at the same time */
	json_t *c = tf_test_step_of(res.summary, "c");
	assert_string_equal(
	    json_string_value(json_object_get(json_object_get(c, "outputs"), "out")), "v1-0.5");
	assert_string_equal(json_string_value(json_object_get(res.summary, "status")), "succeeded");
	json_decref(res.summary);
}

/* A step kind added from this file alone: one row of the step-kind table and its function.
 * The loader checks its `with` against the row, the engine runs it and caches it, and a
 * later step reads its outputs and metrics. */
static int scale_kind(struct tf_step_run *r)
{
	double x = json_number_value(json_object_get(r->with, "x"));
	json_int_t f = json_integer_value(json_object_get(r->with, "factor"));
	json_object_set_new(r->metrics, "y", json_real(x * (double)f));
	json_object_set_new(r->outputs, "label", json_string("scaled"));
	return 0;
}

static void test_engine_a_kind_added_from_a_test_runs_in_a_pipeline(void **state)
{
	(void)state;
	reset();
	static const struct tf_with_key scale_with[] = {{.key = "x",
	                                                 .check = TF_WCHECK_NUMBER,
	                                                 .help = "the number to scale",
	                                                 .rules = TF_WRULE_MIN | TF_WRULE_MAX,
	                                                 .min = 0,
	                                                 .max = 1000},
	                                                {.key = "factor",
	                                                 .check = TF_WCHECK_INT,
	                                                 .help = "by how much",
	                                                 .rules = TF_WRULE_MIN,
	                                                 .min = 1},
	                                                {.key = NULL}};
	static const char *const scale_out[] = {"label", NULL};
	static const char *const scale_met[] = {"y", NULL};
	static const struct tf_step_schema row = {.name = "scale",
	                                          .with = scale_with,
	                                          .outputs = scale_out,
	                                          .metrics = scale_met,
	                                          .cacheable = 1,
	                                          .run = scale_kind};
	enum tf_step_type type;
	if (!tf_step_schema_find("scale"))
		assert_int_equal(tf_step_kind_add(&row, &type), 0);
	assert_int_equal(tf_step_kind_add(&row, &type), -EEXIST);
	const struct tf_step_schema *sc = tf_step_schema_find("scale");
	assert_non_null(sc);
	assert_true(sc->type >= TF_STEP_LAST);
	assert_string_equal(tf_step_type_name(sc->type), "scale");

	/* the row's `with` schema is the loader's: out of range and unknown keys are refused */
	const char *bad = "name: bad\nsteps:\n"
	                  "  - {name: a, type: scale, with: {x: 2, factor: 0, size: 3}}\n";
	struct tf_diag_list diags = {0};
	struct tf_pipeline *p = NULL;
	assert_int_equal(
	    tf_pipeline_load_buffer("bad.yaml", bad, strlen(bad), NULL, 0, 0, &p, &diags), -EINVAL);
	assert_int_equal(diags.n, 2);
	tf_diag_list_release(&diags);

	struct tf_engine_opts o = opts();
	struct tf_engine_result res;
	const char *yaml =
	    "name: scaled\nsteps:\n"
	    "  - {name: a, type: scale, with: {x: 2.5, factor: 3}}\n"
	    "  - name: b\n    type: shell\n    needs: [a]\n"
	    "    with: {argv: [ok, 'out=${steps.a.outputs.label}-${steps.a.metrics.y}'],"
	    " outputs: [out]}\n";
	assert_int_equal(run_yaml(yaml, &o, NULL, 0, &res), 0);
	assert_int_equal(res.state, TF_RUN_SUCCEEDED);
	json_t *a = tf_test_step_of(res.summary, "a");
	assert_string_equal(json_string_value(json_object_get(a, "type")), "scale");
	assert_true(json_real_value(json_object_get(json_object_get(a, "metrics"), "y")) == 7.5);
	json_t *b = tf_test_step_of(res.summary, "b");
	assert_string_equal(
	    json_string_value(json_object_get(json_object_get(b, "outputs"), "out")), "scaled-7.5");
	json_decref(res.summary);

	/* cacheable in its row: the same inputs again come from the cache */
	assert_int_equal(run_yaml(yaml, &o, NULL, 0, &res), 0);
	assert_string_equal(sstate(res.summary, "a"), "cached");
	json_decref(res.summary);
}

/* What a step sees of itself in the database when its kind starts, through the worker's own
 * connection: only committed state is visible there. */
static int seen_uncommitted, seen_steps;

static int durable_kind(struct tf_step_run *r)
{
	char *st = NULL, *at = NULL;
	int ok =
	    tf_store_query_text(r->db, &st, "SELECT state FROM steps WHERE run_id=? AND name=?",
	                        "tt", r->run_id, r->step) == 0 &&
	    tf_store_query_text(r->db, &at,
	                        "SELECT state FROM attempts WHERE run_id=? AND step=? AND n=?",
	                        "tti", r->run_id, r->step, (int64_t)r->attempt) == 0 &&
	    st && at && !strcmp(st, "running") && !strcmp(at, "running");
	free(st);
	free(at);
	pthread_mutex_lock(&mu);
	seen_steps++;
	seen_uncommitted += !ok;
	pthread_mutex_unlock(&mu);
	return 0;
}

/* Commit before acting, whoever coordinates: a worker that coordinates the finish of its own
 * step (a chain) and a fan-out whose starts are committed in chunks while the first children
 * already run. Every step must find its running state and attempt committed when it starts. */
static void test_engine_steps_start_only_after_their_start_is_committed(void **state)
{
	(void)state;
	reset();
	seen_uncommitted = seen_steps = 0;
	struct tf_engine_opts o = opts();
	o.kinds[TF_STEP_SHELL] = durable_kind;
	char yaml[8192];
	int n =
	    snprintf(yaml, sizeof(yaml),
	             "name: durable\nsteps:\n  - {name: root, type: shell, with: {argv: [ok]}}\n");
	for (int i = 0; i < 40; i++) /* fan-out: chunks of 4, 8, 16, 32 with 4 workers */
		n += snprintf(yaml + n, sizeof(yaml) - (size_t)n,
		              "  - {name: f%d, type: shell, needs: [root], with: {argv: [ok]}}\n",
		              i);
	for (int i = 0; i < 20; i++) { /* then a chain */
		char need[16] = "f39";
		if (i)
			snprintf(need, sizeof(need), "c%d", i - 1);
		n += snprintf(yaml + n, sizeof(yaml) - (size_t)n,
		              "  - {name: c%d, type: shell, needs: [%s], with: {argv: [ok]}}\n", i,
		              need);
	}
	struct tf_engine_result res;
	assert_int_equal(run_yaml(yaml, &o, NULL, 0, &res), 0);
	assert_int_equal(res.state, TF_RUN_SUCCEEDED);
	assert_int_equal(seen_steps, 61);
	assert_int_equal(seen_uncommitted, 0);
	json_decref(res.summary);
}

static void test_engine_retries_with_backoff_then_succeeds(void **state)
{
	(void)state;
	reset();
	struct tf_engine_opts o = opts();
	struct tf_engine_result res;
	assert_int_equal(run_yaml("name: flaky\n"
	                          "steps:\n"
	                          "  - name: f\n    type: shell\n"
	                          "    retries: {limit: 3, backoff: 100ms, factor: 2, max_backoff: "
	                          "150ms, on: [error]}\n"
	                          "    with: {argv: [fail, '2']}\n",
	                          &o, NULL, 0, &res),
	                 0);
	assert_int_equal(res.state, TF_RUN_SUCCEEDED);
	assert_int_equal(ncalls("f"), 3);
	json_t *f = tf_test_step_of(res.summary, "f");
	assert_int_equal(json_integer_value(json_object_get(f, "attempts")), 3);

	/* Each recorded backoff is within [0, cap] and was waited out before the next start. */
	struct tf_store *st = NULL;
	char err[256];
	assert_int_equal(tf_store_open("home/tpuflow.db", 0, &st, err, sizeof(err)), 0);
	json_t *d = NULL;
	assert_int_equal(tf_run_describe(st, res.run_id, &d), 0);
	json_t *att =
	    json_object_get(json_array_get(json_object_get(d, "steps"), 0), "attempts_detail");
	assert_int_equal(json_array_size(att), 3);
	int s = slot("f");
	for (int i = 0; i < 2; i++) {
		json_t *a = json_array_get(att, (size_t)i);
		assert_string_equal(json_string_value(json_object_get(a, "state")), "failed");
		assert_string_equal(json_string_value(json_object_get(a, "failure_class")),
		                    "error");
		assert_int_equal(json_integer_value(json_object_get(a, "exit_code")), 3);
		double b = json_real_value(json_object_get(a, "backoff"));
		double cap = i == 0 ? 0.1 : 0.15;
		assert_true(b >= 0 && b <= cap + 1e-9);
		assert_true(t_start[s][i + 1] - t_end[s][i] >= b - 0.002);
	}
	assert_string_equal(json_string_value(json_object_get(json_array_get(att, 2), "state")),
	                    "succeeded");
	json_decref(d);
	tf_store_close(st);
	json_decref(res.summary);
}

static void test_engine_failure_class_not_retried_fails_run(void **state)
{
	(void)state;
	reset();
	struct tf_engine_opts o = opts();
	struct tf_engine_result res;
	assert_int_equal(run_yaml("name: noretry\n"
	                          "steps:\n"
	                          "  - {name: f, type: shell, retries: {limit: 3, backoff: 10ms, "
	                          "on: [infra]}, with: {argv: [fail, '9']}}\n"
	                          "  - {name: g, type: shell, needs: [f], with: {argv: [ok]}}\n",
	                          &o, NULL, 0, &res),
	                 0);
	assert_int_equal(res.state, TF_RUN_FAILED);
	assert_int_equal(ncalls("f"), 1);
	assert_string_equal(sstate(res.summary, "f"), "failed");
	assert_string_equal(sstate(res.summary, "g"), "skipped");
	assert_int_equal(ncalls("g"), 0);
	json_decref(res.summary);
}

static void test_engine_timeout_cancels_step(void **state)
{
	(void)state;
	reset();
	struct tf_engine_opts o = opts();
	struct tf_engine_result res;
	double t0 = tf_now_monotonic();
	assert_int_equal(
	    run_yaml("name: slow\n"
	             "steps:\n"
	             "  - {name: h, type: shell, timeout: 150ms, with: {argv: [hang]}}\n",
	             &o, NULL, 0, &res),
	    0);
	double took = tf_now_monotonic() - t0;
	assert_true(took < 2.0);
	assert_int_equal(res.state, TF_RUN_FAILED);
	json_t *h = tf_test_step_of(res.summary, "h");
	assert_string_equal(json_string_value(json_object_get(h, "state")), "failed");
	assert_non_null(strstr(json_string_value(json_object_get(h, "reason")), "timeout"));
	json_decref(res.summary);
}

/* The engine's deadline is dropped only for an attempt whose executor counts the timeout
 * itself, as the Slurm executor does (the job's run time), not for every step that declares
 * `executor: slurm`: a kind that ignores the executor (the test kind, standing for one added
 * later) is still stopped at its timeout; one that says its executor times it is not. */
static void test_engine_timeout_skipped_only_when_the_executor_counts_it(void **state)
{
	(void)state;
	reset();
	char cwd[512];
	assert_non_null(getcwd(cwd, sizeof(cwd)));
	setenv("TPUFLOW_SHARED_STORAGE", cwd, 1);
	struct tf_engine_opts o = opts();
	struct tf_engine_result res;
	struct tf_buf yaml = {0};
	tf_buf_printf(&yaml,
	              "name: slurmish\nstorage: file://%s/objs\nsteps:\n"
	              "  - {name: ignores, type: shell, executor: slurm, timeout: 150ms,"
	              " retries: 0, with: {argv: [wait, '5']}}\n"
	              "  - {name: timed, type: shell, executor: slurm, timeout: 150ms,"
	              " retries: 0, with: {argv: [timed, '0.6']}}\n",
	              cwd);
	double t0 = tf_now_monotonic();
	assert_int_equal(run_yaml(tf_buf_str(&yaml), &o, NULL, 0, &res), 0);
	double took = tf_now_monotonic() - t0;
	tf_buf_release(&yaml);
	unsetenv("TPUFLOW_SHARED_STORAGE");
	assert_true(took < 4.0);
	json_t *ign = tf_test_step_of(res.summary, "ignores");
	assert_string_equal(json_string_value(json_object_get(ign, "state")), "failed");
	assert_non_null(strstr(json_string_value(json_object_get(ign, "reason")), "timeout"));
	assert_string_equal(sstate(res.summary, "timed"), "succeeded");
	json_decref(res.summary);
}

/* A step's timeout counts from when its attempt runs, not while it waits for a worker:
 * twelve 1 s steps with a 5 s timeout on two workers take about 6 s, and the last ones
 * would have timed out if the wait counted. Waiting steps are queued, not running, in the
 * database and in the view. Margins are wide (a step may take up to 5x longer). */
static void test_engine_timeout_starts_when_a_worker_runs_the_step(void **state)
{
	(void)state;
	reset();
	struct tf_engine_opts o = opts();
	o.workers = 2;
	char *view = NULL;
	size_t viewlen = 0;
	o.out = open_memstream(&view, &viewlen);
	struct tf_buf yaml = {0};
	tf_buf_printf(&yaml, "name: fan\nsteps:\n");
	for (int i = 0; i < 12; i++)
		tf_buf_printf(&yaml,
		              "  - {name: s%02d, type: shell, timeout: 5s, with: {argv: [sleep, '1']}}\n",
		              i);
	struct tf_engine_result res;
	assert_int_equal(run_yaml(tf_buf_str(&yaml), &o, NULL, 0, &res), 0);
	tf_buf_release(&yaml);
	fclose(o.out);
	assert_int_equal(res.state, TF_RUN_SUCCEEDED);
	assert_int_equal(max_concurrent, 2);
	for (int i = 0; i < 12; i++) {
		char name[16];
		snprintf(name, sizeof(name), "s%02d", i);
		assert_string_equal(sstate(res.summary, name), "succeeded");
		assert_int_equal(ncalls(name), 1);
	}
	json_decref(res.summary);
	/* ten steps waited in state queued, with no attempt of their own while they waited */
	struct tf_store *st = NULL;
	char err[256];
	assert_int_equal(tf_store_open("home/tpuflow.db", 0, &st, err, sizeof(err)), 0);
	int64_t nq = 0, na = 0;
	assert_int_equal(tf_store_query_int(st, &nq,
	                                    "SELECT count(*) FROM events WHERE run_id=? AND "
	                                    "kind='step' AND to_state='queued'",
	                                    "t", res.run_id),
	                 0);
	assert_int_equal(nq, 10);
	assert_int_equal(
	    tf_store_query_int(st, &na, "SELECT count(*) FROM attempts WHERE run_id=?", "t",
	                       res.run_id),
	    0);
	assert_int_equal(na, 12);
	tf_store_close(st);
	assert_non_null(strstr(view, "queued"));
	assert_non_null(strstr(view, "(waiting for a worker)"));
	free(view);
}

/* A log that cannot be uploaded does not fail the step, but the attempt records it (an event
 * on the attempt, in `runs logs`) and its log key stays empty. */
static void test_engine_log_upload_failure_recorded(void **state)
{
	(void)state;
	reset();
	struct tf_engine_opts o = opts();
	struct tf_engine_result res;
	assert_int_equal(run_yaml("name: nolog\nsteps:\n"
	                          "  - {name: a, type: shell, with: {argv: [nolog]}}\n",
	                          &o, NULL, 0, &res),
	                 0);
	assert_int_equal(res.state, TF_RUN_SUCCEEDED);
	json_decref(res.summary);
	struct tf_store *st = NULL;
	char err[256];
	int64_t nev = 0, nkey = -1;
	assert_int_equal(tf_store_open("home/tpuflow.db", 0, &st, err, sizeof(err)), 0);
	assert_int_equal(tf_store_query_int(st, &nev,
	                                    "SELECT count(*) FROM events WHERE run_id=? AND "
	                                    "step='a' AND attempt=1 AND kind='log' AND message "
	                                    "LIKE 'log not uploaded to the object store%stays in%'",
	                                    "t", res.run_id),
	                 0);
	assert_int_equal(nev, 1);
	assert_int_equal(tf_store_query_int(st, &nkey,
	                                    "SELECT count(*) FROM attempts WHERE run_id=? AND "
	                                    "step='a' AND log_key IS NOT NULL",
	                                    "t", res.run_id),
	                 0);
	assert_int_equal(nkey, 0);
	tf_store_close(st);
}

static void test_engine_gate_skips_below_threshold(void **state)
{
	(void)state;
	reset();
	struct tf_engine_opts o = opts();
	struct tf_engine_result res;
	const char *yaml =
	    "name: gate\n"
	    "params:\n  min: {type: float, default: 0.9}\n"
	    "steps:\n"
	    "  - {name: eval, type: shell, with: {argv: [ok, 'metric=0.8'], metrics: [metric]}}\n"
	    "  - name: ship\n    type: shell\n    needs: [eval]\n"
	    "    when: ${steps.eval.metrics.metric} >= ${params.min}\n"
	    "    with: {argv: [ok]}\n"
	    "  - {name: after, type: shell, needs: [ship], with: {argv: [ok]}}\n";
	assert_int_equal(run_yaml(yaml, &o, NULL, 0, &res), 0);
	assert_int_equal(res.state, TF_RUN_SUCCEEDED);
	assert_string_equal(sstate(res.summary, "ship"), "skipped");
	json_t *ship = tf_test_step_of(res.summary, "ship");
	assert_non_null(strstr(json_string_value(json_object_get(ship, "reason")), "is false"));
	assert_string_equal(sstate(res.summary, "after"), "skipped");
	assert_int_equal(ncalls("ship"), 0);
	json_decref(res.summary);
	/* with a lower threshold it runs */
	struct tf_param_override ov = {"min", "0.5"};
	assert_int_equal(run_yaml(yaml, &o, &ov, 1, &res), 0);
	assert_string_equal(sstate(res.summary, "ship"), "succeeded");
	assert_string_equal(sstate(res.summary, "after"), "succeeded");
	json_decref(res.summary);
}

static void test_engine_second_run_hits_cache(void **state)
{
	(void)state;
	reset();
	struct tf_engine_opts o = opts();
	struct tf_engine_result res;
	const char *yaml =
	    "name: cached\n"
	    "defaults: {cache: true}\n"
	    "steps:\n"
	    "  - {name: a, type: shell, with: {argv: [ok, 'out=x'], outputs: [out]}}\n"
	    "  - {name: b, type: shell, needs: [a], with: {argv: [ok, "
	    "'out=${steps.a.outputs.out}y'], outputs: [out]}}\n"
	    "  - {name: c, type: shell, cache: false, needs: [b], with: {argv: [ok]}}\n";
	assert_int_equal(run_yaml(yaml, &o, NULL, 0, &res), 0);
	assert_int_equal(json_integer_value(json_object_get(res.summary, "cache_hits")), 0);
	json_decref(res.summary);
	assert_int_equal(run_yaml(yaml, &o, NULL, 0, &res), 0);
	assert_int_equal(res.state, TF_RUN_SUCCEEDED);
	assert_string_equal(sstate(res.summary, "a"), "cached");
	assert_string_equal(sstate(res.summary, "b"), "cached");
	assert_string_equal(sstate(res.summary, "c"), "succeeded");
	assert_int_equal(json_integer_value(json_object_get(res.summary, "cache_hits")), 2);
	json_t *b = tf_test_step_of(res.summary, "b");
	assert_string_equal(
	    json_string_value(json_object_get(json_object_get(b, "outputs"), "out")), "xy");
	assert_int_equal(ncalls("a"), 1);
	assert_int_equal(ncalls("b"), 1);
	assert_int_equal(ncalls("c"), 2);
	json_decref(res.summary);
}

static char *step_cache_key(const char *run, const char *step)
{
	struct tf_store *st = NULL;
	char err[256], *key = NULL;
	assert_int_equal(tf_store_open("home/tpuflow.db", 0, &st, err, sizeof(err)), 0);
	assert_int_equal(tf_store_query_text(st, &key,
	                                     "SELECT cache_key FROM steps WHERE run_id=? AND name=?",
	                                     "tt", run, step),
	                 0);
	tf_store_close(st);
	return key;
}

static char *store_url(const char *dir)
{
	char cwd[4096];
	assert_non_null(getcwd(cwd, sizeof(cwd)));
	return tf_xasprintf("file://%s/%s", cwd, dir);
}

/* The cache key names the object store: a run on another store (and `runs retry` of a run
 * there) does not take results whose objects live in the first one. */
static void test_engine_cache_key_includes_the_store(void **state)
{
	(void)state;
	reset();
	struct tf_engine_opts o = opts();
	char *a_url = store_url("storeA"), *b_url = store_url("storeB");
	const char *yaml =
	    "name: stores\n"
	    "steps:\n"
	    "  - {name: g, type: shell, with: {argv: [ok]}}\n"
	    "  - {name: a, type: shell, cache: true, needs: [g], with: {argv: [put, data/a.bin, "
	    "'out=data/a.bin'], outputs: [out]}}\n";
	struct tf_engine_result r1, r2, r3;
	o.storage = a_url;
	assert_int_equal(run_yaml(yaml, &o, NULL, 0, &r1), 0);
	assert_int_equal(r1.state, TF_RUN_SUCCEEDED);
	json_decref(r1.summary);
	/* same store: a hit */
	assert_int_equal(run_yaml(yaml, &o, NULL, 0, &r2), 0);
	assert_string_equal(sstate(r2.summary, "a"), "cached");
	assert_int_equal(ncalls("a"), 1);
	json_decref(r2.summary);

	/* another store, where g fails first: the run fails, then `runs retry` continues it */
	reset();
	const char *yaml_b =
	    "name: stores\n"
	    "steps:\n"
	    "  - {name: g, type: shell, with: {argv: [fail, '1']}}\n"
	    "  - {name: a, type: shell, cache: true, needs: [g], with: {argv: [put, data/a.bin, "
	    "'out=data/a.bin'], outputs: [out]}}\n";
	o.storage = b_url;
	assert_int_equal(run_yaml(yaml_b, &o, NULL, 0, &r3), 0);
	assert_int_equal(r3.state, TF_RUN_FAILED);
	json_decref(r3.summary);
	char err[256] = "";
	struct tf_engine_result r4 = {0};
	assert_int_equal(tf_engine_resume(&o, r3.run_id, 0, &r4, err, sizeof(err)), 0);
	assert_int_equal(r4.state, TF_RUN_SUCCEEDED);
	assert_string_equal(sstate(r4.summary, "a"), "succeeded");
	assert_int_equal(ncalls("a"), 1);
	json_decref(r4.summary);
	char *ka = step_cache_key(r1.run_id, "a"), *kb = step_cache_key(r3.run_id, "a");
	assert_non_null(ka);
	assert_non_null(kb);
	assert_string_not_equal(ka, kb);
	free(ka);
	free(kb);
	free(a_url);
	free(b_url);
}

/* A cache hit must still be there in the store: an object the step recorded as its
 * artifact, or objects under an output that names a prefix ("…/"); else it is a miss, and an
 * event says why. */
static void test_engine_cache_hit_verified_in_the_store(void **state)
{
	(void)state;
	reset();
	struct tf_engine_opts o = opts();
	char *url = store_url("storeV");
	o.storage = url;
	const char *yaml =
	    "name: verify\n"
	    "defaults: {cache: true}\n"
	    "steps:\n"
	    "  - {name: a, type: shell, with: {argv: [put, data/a.bin, 'out=data/a.bin'], "
	    "outputs: [out]}}\n"
	    "  - {name: p, type: shell, with: {argv: [put, pre/x.bin, 'out=pre/'], "
	    "outputs: [out]}}\n";
	struct tf_engine_result r;
	assert_int_equal(run_yaml(yaml, &o, NULL, 0, &r), 0);
	json_decref(r.summary);
	assert_int_equal(run_yaml(yaml, &o, NULL, 0, &r), 0);
	assert_string_equal(sstate(r.summary, "a"), "cached");
	assert_string_equal(sstate(r.summary, "p"), "cached");
	json_decref(r.summary);
	/* both objects go */
	struct tf_objstore *os = NULL;
	char err[256];
	assert_int_equal(tf_objstore_open(url, &os, err, sizeof(err)), 0);
	assert_int_equal(tf_objstore_delete(os, "data/a.bin"), 0);
	assert_int_equal(tf_objstore_delete(os, "pre/x.bin"), 0);
	tf_objstore_free(os);
	assert_int_equal(run_yaml(yaml, &o, NULL, 0, &r), 0);
	assert_int_equal(r.state, TF_RUN_SUCCEEDED);
	assert_string_equal(sstate(r.summary, "a"), "succeeded");
	assert_string_equal(sstate(r.summary, "p"), "succeeded");
	assert_int_equal(ncalls("a"), 2);
	assert_int_equal(ncalls("p"), 2);
	json_decref(r.summary);
	struct tf_store *st = NULL;
	assert_int_equal(tf_store_open("home/tpuflow.db", 0, &st, err, sizeof(err)), 0);
	int64_t nev = 0;
	assert_int_equal(
	    tf_store_query_int(st, &nev,
	                       "SELECT count(*) FROM events WHERE run_id=? AND kind='cache' AND "
	                       "((step='a' AND message LIKE '%object ''data/a.bin'' is not%') OR "
	                       "(step='p' AND message LIKE '%nothing under ''pre/''%'))",
	                       "t", r.run_id),
	    0);
	assert_int_equal(nev, 2);
	tf_store_close(st);
	free(url);
}

/* Shell steps are not cached unless asked; `cache_inputs` files join the key; `--no-cache`
 * and `--force STEP` run cached steps again. */
static void test_engine_shell_cache_is_opt_in(void **state)
{
	(void)state;
	reset();
	struct tf_engine_opts o = opts();
	struct tf_engine_result r;
	tf_test_write_file("prog.sh", "echo one\n");
	const char *yaml = "name: optin\n"
	                   "steps:\n"
	                   "  - {name: plain, type: shell, with: {argv: [ok]}}\n"
	                   "  - {name: opted, type: shell, cache: true, cache_inputs: [prog.sh], "
	                   "with: {argv: [ok]}}\n"
	                   "  - {name: other, type: shell, cache: true, with: {argv: [ok]}}\n";
	assert_int_equal(run_yaml(yaml, &o, NULL, 0, &r), 0);
	json_decref(r.summary);
	assert_int_equal(run_yaml(yaml, &o, NULL, 0, &r), 0);
	assert_string_equal(sstate(r.summary, "plain"), "succeeded");
	assert_string_equal(sstate(r.summary, "opted"), "cached");
	assert_string_equal(sstate(r.summary, "other"), "cached");
	json_decref(r.summary);
	/* the program changed: its step runs again, the other stays cached */
	tf_test_write_file("prog.sh", "echo two\n");
	assert_int_equal(run_yaml(yaml, &o, NULL, 0, &r), 0);
	assert_string_equal(sstate(r.summary, "opted"), "succeeded");
	assert_string_equal(sstate(r.summary, "other"), "cached");
	json_decref(r.summary);
	assert_int_equal(ncalls("plain"), 3);
	assert_int_equal(ncalls("opted"), 2);
	assert_int_equal(ncalls("other"), 1);
	/* --force STEP */
	const char *force[] = {"other"};
	o.force = force;
	o.nforce = 1;
	assert_int_equal(run_yaml(yaml, &o, NULL, 0, &r), 0);
	assert_string_equal(sstate(r.summary, "opted"), "cached");
	assert_string_equal(sstate(r.summary, "other"), "succeeded");
	json_decref(r.summary);
	/* --no-cache */
	o.nforce = 0;
	o.no_cache = 1;
	assert_int_equal(run_yaml(yaml, &o, NULL, 0, &r), 0);
	assert_string_equal(sstate(r.summary, "opted"), "succeeded");
	assert_string_equal(sstate(r.summary, "other"), "succeeded");
	json_decref(r.summary);
	assert_int_equal(ncalls("opted"), 3);
	assert_int_equal(ncalls("other"), 3);
	/* a missing cache input fails the step with the file named */
	o.no_cache = 0;
	unlink("prog.sh");
	assert_int_equal(run_yaml(yaml, &o, NULL, 0, &r), 0);
	assert_int_equal(r.state, TF_RUN_FAILED);
	json_t *op = tf_test_step_of(r.summary, "opted");
	assert_non_null(strstr(json_string_value(json_object_get(op, "reason")), "prog.sh"));
	json_decref(r.summary);
	/* --force names a step that is not there */
	force[0] = "nosuch";
	o.nforce = 1;
	struct tf_diag_list diags = {0};
	char err[512] = "";
	assert_int_equal(tf_engine_run_file(&o, "p.yaml", NULL, 0, &diags, &r, err, sizeof(err)),
	                 -EINVAL);
	assert_non_null(strstr(err, "nosuch"));
	tf_diag_list_release(&diags);
}

static void test_engine_register_and_deploy_idempotent(void **state)
{
	(void)state;
	reset();
	struct tf_engine_opts o = opts();
	struct tf_engine_result res;
	const char *yaml =
	    "name: reg\n"
	    "steps:\n"
	    "  - {name: train, type: shell, with: {argv: [bundle, bundles/b1/, 'out=bundles/b1/'], "
	    "outputs: [out]}}\n"
	    "  - {name: ev, type: shell, needs: [train], with: {argv: [ok, 'metric=0.91'], "
	    "metrics: [metric]}}\n"
	    "  - name: register\n    type: register\n    needs: [ev]\n"
	    "    with: {model_name: m, bundle: '${steps.train.outputs.out}', metrics_from: ev, "
	    "tags: {k: v}}\n"
	    "  - name: deploy\n    type: deploy\n    needs: [register]\n"
	    "    with: {model_name: m, version: '${steps.register.outputs.version}', alias: "
	    "production}\n";
	assert_int_equal(run_yaml(yaml, &o, NULL, 0, &res), 0);
	assert_int_equal(res.state, TF_RUN_SUCCEEDED);
	json_t *m = json_object_get(res.summary, "model");
	assert_int_equal(json_integer_value(json_object_get(m, "version")), 1);
	assert_true(json_real_value(json_object_get(json_object_get(m, "metrics"), "metric")) ==
	            0.91);
	assert_int_equal(json_array_size(json_object_get(res.summary, "deployments")), 1);
	json_decref(res.summary);

	struct tf_store *st = NULL;
	char err[256];
	assert_int_equal(tf_store_open("home/tpuflow.db", 0, &st, err, sizeof(err)), 0);
	int64_t v = 0;
	assert_int_equal(tf_registry_resolve(st, "m", "production", &v), 0);
	assert_int_equal(v, 1);
	/* registering and deploying left an event each in the run's log, under their steps */
	int64_t nev = 0;
	assert_int_equal(
	    tf_store_query_int(st, &nev,
	                       "SELECT count(*) FROM events WHERE run_id=? AND "
	                       "attempt IS NULL AND ((step='register' AND kind='model' AND "
	                       "message='registered m version 1') OR (step='deploy' AND "
	                       "kind='deploy' AND message='m ''production'' -> version 1'))",
	                       "t", res.run_id),
	    0);
	assert_int_equal(nev, 2);
	/* the same run+step again gives the same version */
	struct tf_model_version_spec spec = {
	    .model = "m", .run_id = res.run_id, .step = "register", .bundle = "bundles/other"};
	int existed = 0;
	assert_int_equal(tf_registry_register(st, &spec, &v, &existed), 0);
	assert_int_equal(v, 1);
	assert_int_equal(existed, 1);
	/* a new bundle from elsewhere makes version 2; a canary deployment keeps production */
	struct tf_model_version_spec spec2 = {
	    .model = "m", .run_id = "manual", .step = "x", .bundle = "bundles/b2"};
	assert_int_equal(tf_registry_register(st, &spec2, &v, &existed), 0);
	assert_int_equal(v, 2);
	struct tf_deploy_spec d = {
	    .model = "m", .alias = "production", .version = 2, .canary_percent = 10};
	json_t *dep = NULL;
	assert_int_equal(tf_registry_deploy(st, &d, &dep), 0);
	assert_int_equal(json_integer_value(json_object_get(dep, "version")), 1);
	assert_int_equal(json_integer_value(json_object_get(dep, "canary_version")), 2);
	json_decref(dep);
	assert_int_equal(tf_registry_resolve(st, "m", "canary", &v), 0);
	assert_int_equal(v, 2);
	assert_int_equal(tf_registry_resolve(st, "m", "production", &v), 0);
	assert_int_equal(v, 1);
	assert_int_equal(tf_registry_resolve(st, "m", "latest", &v), 0);
	assert_int_equal(v, 2);
	tf_store_close(st);
}

/* register records only a bundle that loads (manifest, signature, checksums); names and
 * aliases that arrive through references are checked when the step runs. */
static void test_engine_register_verifies_bundle_and_names(void **state)
{
	(void)state;
	reset();
	struct tf_engine_opts o = opts();
	o.home = "home-reg";
	struct tf_engine_result res;
	char yaml[1024];
	const char *fmt =
	    "name: regcheck\n"
	    "steps:\n"
	    "  - {name: train, type: shell, with: {argv: [%s, 'out=%s'], outputs: [out]}}\n"
	    "  - name: register\n    type: register\n    needs: [train]\n"
	    "    with: {model_name: '%s', bundle: '${steps.train.outputs.out}'}\n";
	struct {
		const char *argv0, *bundle, *model, *want;
	} cases[] = {
	    /* nothing there */
	    {"ok", "bundles/none/", "m", "bundle 'bundles/none/' is not in the store"},
	    /* one stray object under the prefix: not a bundle */
	    {"put, bundles/junk/signature.json", "bundles/junk/", "m", "bundle 'bundles/junk/'"},
	    /* a good bundle, but the model name from a reference breaks the name rule */
	    {"bundle, bundles/good/", "bundles/good/", "${steps.train.outputs.out}",
	     "model name 'bundles/good/'"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		snprintf(yaml, sizeof(yaml), fmt, cases[i].argv0, cases[i].bundle, cases[i].model);
		assert_int_equal(run_yaml(yaml, &o, NULL, 0, &res), 0);
		assert_int_equal(res.state, TF_RUN_FAILED);
		json_t *reg = tf_test_step_of(res.summary, "register");
		const char *why = json_string_value(json_object_get(reg, "reason"));
		if (!why || !strstr(why, cases[i].want))
			fail_msg("case %zu: reason '%s', want '%s'", i, why ? why : "(none)",
			         cases[i].want);
		json_decref(res.summary);
	}
	/* nothing was registered */
	struct tf_store *st = NULL;
	char err[256];
	int64_t n = -1;
	assert_int_equal(tf_store_open("home-reg/tpuflow.db", 0, &st, err, sizeof(err)), 0);
	assert_int_equal(tf_store_query_int(st, &n, "SELECT count(*) FROM model_versions", ""), 0);
	assert_int_equal(n, 0);
	tf_store_close(st);

	/* a damaged bundle (one flipped byte in its weights) is refused too */
	reset();
	snprintf(yaml, sizeof(yaml), fmt, "bundle, bundles/flip/", "bundles/flip/", "m");
	assert_int_equal(run_yaml(yaml, &o, NULL, 0, &res), 0);
	assert_int_equal(res.state, TF_RUN_SUCCEEDED);
	json_decref(res.summary);
	FILE *f = fopen("home-reg/objects/bundles/flip/model.safetensors", "r+b");
	assert_non_null(f);
	assert_int_equal(fseek(f, -3, SEEK_END), 0);
	int c = fgetc(f);
	assert_int_equal(fseek(f, -3, SEEK_END), 0);
	fputc(c ^ 0x40, f);
	fclose(f);
	snprintf(yaml, sizeof(yaml), fmt, "ok", "bundles/flip/", "m");
	assert_int_equal(run_yaml(yaml, &o, NULL, 0, &res), 0);
	assert_int_equal(res.state, TF_RUN_FAILED);
	assert_non_null(strstr(json_string_value(json_object_get(
	                            tf_test_step_of(res.summary, "register"), "reason")),
	                        "does not load"));
	json_decref(res.summary);

	/* an alias that arrives through a reference and reads as a version is refused */
	const char *dep = "name: depcheck\n"
	                  "steps:\n"
	                  "  - {name: pick, type: shell, with: {argv: [ok, 'out=latest'], "
	                  "outputs: [out]}}\n"
	                  "  - name: deploy\n    type: deploy\n    needs: [pick]\n"
	                  "    with: {model_name: m, version: '1', alias: "
	                  "'${steps.pick.outputs.out}'}\n";
	assert_int_equal(run_yaml(dep, &o, NULL, 0, &res), 0);
	assert_int_equal(res.state, TF_RUN_FAILED);
	assert_non_null(strstr(
	    json_string_value(json_object_get(tf_test_step_of(res.summary, "deploy"), "reason")),
	    "alias 'latest' reads as a version"));
	json_decref(res.summary);

	/* a rollout policy from the deploy step's rollout_* keys: the canary starts at the first
	 * share and carries the policy; a policy without a canary is refused */
	snprintf(yaml, sizeof(yaml), fmt, "bundle, bundles/two/", "bundles/two/", "m");
	assert_int_equal(run_yaml(yaml, &o, NULL, 0, &res), 0); /* version 2 */
	assert_int_equal(res.state, TF_RUN_SUCCEEDED);
	json_decref(res.summary);
	const char *roll[][2] = {
	    {"{model_name: m, version: '1', alias: production}", NULL},
	    {"{model_name: m, version: '2', alias: production, rollout_steps: [10, 50], "
	     "rollout_soak_s: 1m30s, rollout_max_p99_ms: 20, rollout_min_requests: 5, "
	     "rollout_max_error_rate_vs_production: 0.01, rollout_max_p99_ratio_vs_production: 1.5}",
	     NULL},
	    {"{model_name: m, version: '2', alias: production, rollout_min_requests: 5}",
	     "a rollout policy needs a canary"},
	    {"{model_name: m, version: '1', alias: staging}", NULL},
	    {"{model_name: m, version: '2', alias: staging, rollout_steps: [10]}", NULL},
	};
	for (size_t i = 0; i < 5; i++) {
		snprintf(yaml, sizeof(yaml),
		         "name: roll%zu\nsteps:\n  - {name: deploy, type: deploy, with: %s}\n", i,
		         roll[i][0]);
		assert_int_equal(run_yaml(yaml, &o, NULL, 0, &res), 0);
		assert_int_equal(res.state, roll[i][1] ? TF_RUN_FAILED : TF_RUN_SUCCEEDED);
		if (roll[i][1])
			assert_non_null(strstr(json_string_value(json_object_get(
			                           tf_test_step_of(res.summary, "deploy"), "reason")),
			                       roll[i][1]));
		json_decref(res.summary);
	}
	/* a rollout number that arrives through a reference and does not read as one is
	 * refused, naming the key (not read as 0, nor left out of the policy) */
	const char *late[][2] = {{"rollout_steps: [5, '${steps.pick.outputs.out}']",
	                          "with.rollout_steps[1] must be a number"},
	                         {"rollout_steps: [5], rollout_soak_s: '${steps.pick.outputs.out}'",
	                          "with.rollout_soak_s must be a duration (seconds, or 30s, 10m, "
	                          "1h30m), not 'ten'"}};
	for (size_t i = 0; i < 2; i++) {
		snprintf(yaml, sizeof(yaml),
		         "name: late%zu\nsteps:\n"
		         "  - {name: pick, type: shell, with: {argv: [ok, 'out=ten'], outputs: [out]}}\n"
		         "  - {name: deploy, type: deploy, needs: [pick], with: {model_name: m, "
		         "version: '2', alias: production, %s}}\n",
		         i, late[i][0]);
		assert_int_equal(run_yaml(yaml, &o, NULL, 0, &res), 0);
		assert_int_equal(res.state, TF_RUN_FAILED);
		assert_non_null(strstr(json_string_value(json_object_get(
		                           tf_test_step_of(res.summary, "deploy"), "reason")),
		                       late[i][1]));
		json_decref(res.summary);
	}
	json_t *d = NULL;
	assert_int_equal(tf_store_open("home-reg/tpuflow.db", 0, &st, err, sizeof(err)), 0);
	assert_int_equal(tf_registry_deployment(st, "m", "production", &d), 0);
	assert_int_equal(json_integer_value(json_object_get(d, "canary_version")), 2);
	assert_true(json_number_value(json_object_get(d, "canary_percent")) == 10);
	json_t *pol = json_object_get(d, "rollout");
	assert_int_equal(json_array_size(json_object_get(pol, "steps")), 2);
	assert_int_equal(json_integer_value(json_object_get(pol, "min_requests")), 5);
	assert_true(json_number_value(json_object_get(pol, "soak_s")) == 90); /* 1m30s */
	assert_true(json_number_value(json_object_get(pol, "max_p99_ms")) == 20);
	assert_true(json_number_value(json_object_get(pol, "max_error_rate_vs_production")) == 0.01);
	assert_true(json_number_value(json_object_get(pol, "max_p99_ratio_vs_production")) == 1.5);
	json_decref(d);
	/* another alias's canary carries its policy too, and its own canary alias */
	assert_int_equal(tf_registry_deployment(st, "m", "staging", &d), 0);
	assert_int_equal(json_integer_value(json_object_get(d, "canary_version")), 2);
	assert_non_null(json_object_get(json_object_get(d, "rollout"), "steps"));
	json_decref(d);
	int64_t cv;
	assert_int_equal(tf_registry_resolve(st, "m", "staging-canary", &cv), 0);
	assert_int_equal(cv, 2);
	tf_store_close(st);
}

static int run_cli(const char *args)
{
	char cmd[1024];
	snprintf(cmd, sizeof(cmd), "'%s' --home home %s >cli.out 2>cli.err", getenv("TPUFLOW_BIN"),
	         args);
	int st = system(cmd);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_engine_cli_models_and_runs(void **state)
{
	(void)state;
	if (!getenv("TPUFLOW_BIN"))
		skip();
	/* after the registry test: model m has versions 1 and 2 */
	assert_int_equal(run_cli("models compare m 1 2 --json"), 0);
	json_t *j = json_load_file("cli.out", 0, NULL);
	assert_non_null(j);
	assert_int_equal(json_integer_value(json_object_get(j, "a")), 1);
	json_decref(j);
	assert_int_equal(run_cli("models alias m staging latest"), 0);
	assert_int_equal(run_cli("models show m staging --json"), 0);
	j = json_load_file("cli.out", 0, NULL);
	assert_int_equal(json_integer_value(json_object_get(j, "version")), 2);
	json_decref(j);
	assert_int_equal(run_cli("models show m nosuch"), TF_EXIT_NOTFOUND);
	assert_int_equal(run_cli("runs list --json"), 0);
	j = json_load_file("cli.out", 0, NULL);
	assert_true(json_array_size(j) >= 1);
	json_decref(j);
	assert_int_equal(run_cli("runs show latest --json"), 0);
	assert_int_equal(run_cli("runs logs latest"), 0);
	assert_int_equal(run_cli("runs show nosuchrun"), TF_EXIT_NOTFOUND);
	assert_int_equal(run_cli("run missing.yaml"), 65);
}

static void test_engine_backoff_full_jitter_and_cap(void **state)
{
	(void)state;
	struct tf_retry_policy p = {.limit = 5, .backoff = 1, .factor = 2, .max_backoff = 5};
	assert_true(tf_engine_backoff(&p, 1, 0.999999) <= 1.0);
	assert_true(tf_engine_backoff(&p, 3, 0.5) == 2.0);
	assert_true(tf_engine_backoff(&p, 10, 0.999999) <= 5.0);
	assert_true(tf_engine_backoff(&p, 10, 0.0) == 0.0);
}

static void test_engine_train_steps_get_slices(void **state)
{
	(void)state;
	reset();
	struct tf_engine_opts o = opts();
	o.kinds[TF_STEP_TRAIN] = test_kind;
	struct tf_engine_result res;
	assert_int_equal(
	    run_yaml("name: slices\n"
	             "steps:\n"
	             "  - {name: t1, type: train, accelerator: v4-32, with: {dataset: d}}\n"
	             "  - {name: t2, type: train, accelerator: v4-8, with: {dataset: d}}\n",
	             &o, NULL, 0, &res),
	    0);
	assert_int_equal(res.state, TF_RUN_SUCCEEDED);
	assert_int_equal(max_concurrent, 2);
	json_t *t1 = tf_test_step_of(res.summary, "t1");
	assert_string_equal(json_string_value(json_object_get(t1, "slice")), "v4-32");
	assert_true(json_real_value(json_object_get(t1, "slice_seconds")) >= 0.04);
	assert_true(json_real_value(json_object_get(res.summary, "slice_seconds")) >= 0.08);
	json_decref(res.summary);
	struct tf_store *st = NULL;
	char err[256];
	assert_int_equal(tf_store_open("home/tpuflow.db", 0, &st, err, sizeof(err)), 0);
	int64_t chips = 0;
	assert_int_equal(
	    tf_store_query_int(st, &chips,
	                       "SELECT chips FROM slice_jobs WHERE run_id=? AND step='t1'", "t",
	                       res.run_id),
	    0);
	assert_int_equal(chips, 16); /* v4-32: 32 TensorCores = 16 chips (2x2x4) */
	tf_store_close(st);
}

static void test_engine_shell_fails_twice_then_succeeds(void **state)
{
	(void)state;
	struct tf_engine_opts o = {.home = "home", .workers = 2};
	struct tf_engine_result res;
	/* The program counts its runs in a file and fails the first two. */
	const char *yaml = "name: shellflaky\n"
	                   "steps:\n"
	                   "  - name: s\n    type: shell\n"
	                   "    retries: {limit: 2, backoff: 50ms, factor: 2, on: [error]}\n"
	                   "    with:\n"
	                   "      argv: [/bin/sh, -c, 'n=$(cat ../../../../count 2>/dev/null || "
	                   "echo 0); n=$((n+1)); echo $n > ../../../../count; echo \"try $n\"; [ "
	                   "$n -ge 3 ] || exit 7; echo \"n=$n\" > \"$TPUFLOW_METRICS\"; echo "
	                   "\"{\\\"path\\\": \\\"x;y\\\"}\" > \"$TPUFLOW_OUTPUTS\"']\n"
	                   "      outputs: [path]\n"
	                   "      metrics: [n]\n";
	assert_int_equal(run_yaml(yaml, &o, NULL, 0, &res), 0);
	assert_int_equal(res.state, TF_RUN_SUCCEEDED);
	json_t *st = tf_test_step_of(res.summary, "s");
	assert_int_equal(json_integer_value(json_object_get(st, "attempts")), 3);
	assert_true(json_real_value(json_object_get(json_object_get(st, "metrics"), "n")) == 3.0);
	assert_string_equal(
	    json_string_value(json_object_get(json_object_get(st, "outputs"), "path")), "x;y");
	json_decref(res.summary);
	struct tf_store *db = NULL;
	char err[256];
	assert_int_equal(tf_store_open("home/tpuflow.db", 0, &db, err, sizeof(err)), 0);
	json_t *d = NULL;
	assert_int_equal(tf_run_describe(db, res.run_id, &d), 0);
	json_t *att =
	    json_object_get(json_array_get(json_object_get(d, "steps"), 0), "attempts_detail");
	assert_int_equal(json_array_size(att), 3);
	for (size_t i = 0; i < 2; i++) {
		json_t *a = json_array_get(att, i);
		assert_int_equal(json_integer_value(json_object_get(a, "exit_code")), 7);
		assert_string_equal(json_string_value(json_object_get(a, "failure_class")),
		                    "error");
		/* the next attempt started no earlier than the recorded backoff */
		double next =
		    json_real_value(json_object_get(json_array_get(att, i + 1), "started_at"));
		double end = json_real_value(json_object_get(a, "finished_at"));
		assert_true(next - end >= json_real_value(json_object_get(a, "backoff")) - 0.002);
		assert_non_null(json_object_get(a, "log"));
	}
	json_decref(d);
	tf_store_close(db);
}

/* While a chain step's program runs, the engine makes the work directory of the step that
 * starts when it ends (off the path from one program's end to the next one's start): the
 * first program waits to see it; the second finds it empty. When the first fails, the second
 * never runs and its directory stays, empty, and nothing else minds. */
static void test_engine_next_step_dir_made_while_this_one_runs(void **state)
{
	(void)state;
	struct tf_engine_opts o = {.home = "home", .workers = 2};
	struct tf_engine_result res;
	/* a: exits 0 once ../b exists (at most ~10 s), else 3 (or `code` when it does) */
	const char *wait_b = "i=0; while [ ! -d ../b ] && [ $i -lt 1000 ]; do sleep 0.01; "
	                     "i=$((i+1)); done; [ -d ../b ] || exit 3; exit ${params.code}";
	char *yaml = tf_xasprintf(
	    "name: premade\nparams:\n  code: {type: int, default: 0}\nsteps:\n"
	    "  - {name: a, type: shell, with: {argv: [/bin/sh, -c, '%s']}}\n"
	    "  - {name: b, type: shell, needs: [a], with: {argv: [/bin/sh, -c, 'echo "
	    "\"n=$(ls -A | wc -l)\" > \"$TPUFLOW_METRICS\"'], metrics: [n]}}\n",
	    wait_b);
	assert_int_equal(run_yaml(yaml, &o, NULL, 0, &res), 0);
	assert_int_equal(res.state, TF_RUN_SUCCEEDED);
	json_t *b = tf_test_step_of(res.summary, "b");
	assert_true(json_real_value(json_object_get(json_object_get(b, "metrics"), "n")) == 0.0);
	json_decref(res.summary);

	struct tf_param_override fail = {.name = "code", .value = "4"};
	assert_int_equal(run_yaml(yaml, &o, &fail, 1, &res), 0);
	free(yaml);
	assert_int_equal(res.state, TF_RUN_FAILED);
	assert_string_equal(sstate(res.summary, "a"), "failed");
	assert_string_equal(sstate(res.summary, "b"), "skipped");
	json_decref(res.summary);
	char *dir = tf_xasprintf("home/work/%s/b", res.run_id);
	assert_int_equal(rmdir(dir), 0); /* there, and empty */
	free(dir);
	struct tf_store *db = NULL;
	char err[256];
	assert_int_equal(tf_store_open("home/tpuflow.db", 0, &db, err, sizeof(err)), 0);
	json_t *d = NULL;
	assert_int_equal(tf_run_describe(db, res.run_id, &d), 0);
	assert_int_equal(json_array_size(json_object_get(d, "steps")), 2);
	json_decref(d);
	tf_store_close(db);
}

static void test_engine_shell_timeout_kills_process_group(void **state)
{
	(void)state;
	struct tf_engine_opts o = {.home = "home", .workers = 2};
	struct tf_engine_result res;
	double t0 = tf_now_monotonic();
	/* The child starts a grandchild; both must die at the timeout. */
	assert_int_equal(run_yaml("name: shellslow\n"
	                          "steps:\n"
	                          "  - name: s\n    type: shell\n    timeout: 200ms\n"
	                          "    with: {argv: [/bin/sh, -c, 'sleep 30 & echo $! > "
	                          "../../../../grandchild; wait']}\n",
	                          &o, NULL, 0, &res),
	                 0);
	assert_true(tf_now_monotonic() - t0 < 5.0);
	assert_int_equal(res.state, TF_RUN_FAILED);
	json_t *s = tf_test_step_of(res.summary, "s");
	assert_non_null(strstr(json_string_value(json_object_get(s, "reason")), "timeout"));
	json_decref(res.summary);
	char *pidtext = NULL;
	size_t len;
	assert_int_equal(tf_read_file("grandchild", 100, &pidtext, &len), 0);
	pid_t gc = (pid_t)atoi(pidtext);
	free(pidtext);
	usleep(100000);
	assert_true(gc > 0);
	/* gone, or a zombie waiting for an init that does not reap (containers) */
	char path[64], *stat = NULL;
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)gc);
	if (tf_read_file(path, 4096, &stat, &len) == 0) {
		const char *close_paren = strrchr(stat, ')');
		assert_non_null(close_paren);
		assert_int_equal(close_paren[2], 'Z');
		free(stat);
	}
}

/* The engine as a handle: start returns with the run recorded, cancel (what Ctrl-C does in
 * the CLI) stops it cleanly, wait gives the outcome; the run resumes where it stopped. */
static void test_engine_interrupt_then_resume(void **state)
{
	(void)state;
	reset();
	struct tf_engine_opts o = opts();
	struct tf_engine_result res = {0};
	const char *yaml = "name: stop\n"
	                   "steps:\n"
	                   "  - {name: a, type: shell, with: {argv: [ok]}}\n"
	                   "  - {name: h, type: shell, needs: [a], with: {argv: [hang, '1']}}\n"
	                   "  - {name: z, type: shell, needs: [h], with: {argv: [ok]}}\n"
	                   "finally:\n"
	                   "  - {name: fin, type: shell, with: {argv: [ok, 'out=${run.state}']}}\n";
	struct tf_engine *e = start_run(&o, "p.yaml", yaml);
	char err[256] = "";
	/* committed before start returns: the run is in the database, running */
	struct tf_store *st = NULL;
	assert_int_equal(tf_store_open("home/tpuflow.db", 0, &st, err, sizeof(err)), 0);
	enum tf_run_state rs;
	assert_int_equal(tf_run_get_state(st, tf_engine_run_id(e), &rs), 0);
	assert_int_equal(rs, TF_RUN_RUNNING);
	tf_store_close(st);
	while (ncalls("h") == 0)
		usleep(1000);
	usleep(50000);
	assert_false(tf_engine_done(e));
	tf_engine_cancel(e);
	assert_int_equal(tf_engine_wait(e, &res, err, sizeof(err)), 0);
	assert_true(tf_engine_done(e));
	tf_engine_free(e);
	assert_int_equal(res.state, TF_RUN_INTERRUPTED);
	assert_string_equal(sstate(res.summary, "a"), "succeeded");
	assert_string_equal(sstate(res.summary, "h"), "pending");
	/* an interrupted run has not ended: its finally steps run when the resumed run ends */
	assert_string_equal(sstate(res.summary, "fin"), "pending");
	assert_int_equal(ncalls("fin"), 0);
	json_decref(res.summary);

	/* Resume: h's second call finishes; a is not run again. */
	struct tf_engine_result r2 = {0};
	assert_int_equal(tf_engine_resume(&o, res.run_id, 0, &r2, err, sizeof(err)), 0);
	assert_int_equal(r2.state, TF_RUN_SUCCEEDED);
	assert_string_equal(r2.run_id, res.run_id);
	assert_int_equal(ncalls("a"), 1);
	assert_int_equal(ncalls("h"), 2);
	assert_int_equal(ncalls("z"), 1);
	json_t *h = tf_test_step_of(r2.summary, "h");
	assert_int_equal(json_integer_value(json_object_get(h, "attempts")), 2);
	assert_int_equal(ncalls("fin"), 1);
	assert_string_equal(step_out(r2.summary, "fin"), "succeeded");
	json_decref(r2.summary);
	/* a succeeded run cannot be resumed */
	assert_int_equal(tf_engine_resume(&o, res.run_id, 0, &r2, err, sizeof(err)), -EALREADY);
}

/* Waits (at most a minute) until the test kind has been called n times for `name`. */
static void wait_calls(const char *name, int n)
{
	for (int i = 0; i < 60000 && ncalls(name) < n; i++)
		usleep(1000);
	assert_true(ncalls(name) >= n);
}

/* `runs cancel` as another process asks it: through the database. */
static void request_cancel(const char *run)
{
	struct tf_store *st = NULL;
	char err[256];
	enum tf_run_state rs;
	assert_int_equal(tf_store_open("home/tpuflow.db", 0, &st, err, sizeof(err)), 0);
	assert_int_equal(tf_run_request_cancel(st, run, &rs), 0);
	assert_int_equal(rs, TF_RUN_RUNNING);
	tf_store_close(st);
}

/* `runs cancel` is Argo's `argo stop`: the steps of `steps` stop, then the finally steps run
 * and see ${run.state} == 'cancelled'; the run ends failed ("cancelled") whatever they do. A
 * second cancel is `argo terminate`: it stops the finally steps too. A retry of the cancelled
 * run starts over: the cancel is over. */
static void test_engine_cancel_runs_finally_steps(void **state)
{
	(void)state;
	reset();
	struct tf_engine_opts o = opts();
	struct tf_engine_result res = {0};
	char err[256] = "";
	struct tf_engine *e = start_run(
	    &o, "p.yaml",
	    "name: fin\n"
	    "steps:\n"
	    "  - {name: a, type: shell, with: {argv: [ok]}}\n"
	    "  - {name: h, type: shell, needs: [a], with: {argv: [hang, '1']}}\n"
	    "  - {name: z, type: shell, needs: [h], with: {argv: [ok]}}\n"
	    "finally:\n"
	    "  - {name: report, type: shell, with: {argv: [ok, 'out=${run.state}']}}\n"
	    "  - {name: broken, type: shell, with: {argv: [fail, '1']}}\n"
	    "  - {name: slow, type: shell, needs: [report], with: {argv: [hang, '1']}}\n");
	char run[32];
	snprintf(run, sizeof(run), "%s", tf_engine_run_id(e));
	wait_calls("h", 1);
	request_cancel(run);
	wait_calls("slow", 1); /* the finally steps run after h stopped */
	assert_int_equal(ncalls("report"), 1);
	assert_int_equal(ncalls("z"), 0);
	request_cancel(run); /* again: slow stops too */
	assert_int_equal(tf_engine_wait(e, &res, err, sizeof(err)), 0);
	tf_engine_free(e);
	assert_int_equal(res.state, TF_RUN_FAILED);
	assert_string_equal(sstate(res.summary, "a"), "succeeded");
	assert_string_equal(sstate(res.summary, "h"), "pending");
	assert_string_equal(sstate(res.summary, "z"), "pending");
	assert_string_equal(sstate(res.summary, "report"), "succeeded");
	assert_string_equal(step_out(res.summary, "report"), "cancelled");
	assert_string_equal(sstate(res.summary, "broken"), "failed"); /* the run stays cancelled */
	assert_string_equal(sstate(res.summary, "slow"), "pending");
	const char *why = json_string_value(json_object_get(res.summary, "error"));
	assert_non_null(why);
	assert_non_null(strstr(why, "cancelled"));
	assert_non_null(strstr(why, "a second cancel stopped its finally steps"));
	json_decref(res.summary);

	/* retried: a new end, not cancelled; h's second call returns at once; every finally
	 * step runs again at the new end, report too although it succeeded at the first one */
	assert_int_equal(tf_engine_resume(&o, run, TF_ENGINE_RETRY, &res, err, sizeof(err)), 0);
	assert_int_equal(res.state, TF_RUN_SUCCEEDED);
	assert_int_equal(ncalls("a"), 1);
	assert_int_equal(ncalls("z"), 1);
	assert_int_equal(ncalls("slow"), 2);
	assert_int_equal(ncalls("report"), 2);
	assert_int_equal(ncalls("broken"), 2);
	assert_string_equal(step_out(res.summary, "report"), "succeeded");
	json_t *rep = tf_test_step_of(res.summary, "report");
	assert_int_equal(json_integer_value(json_object_get(rep, "attempts")), 2);
	json_decref(res.summary);
}

/* A cancelled run stopped by Ctrl-C (or a drain) while its finally steps run is interrupted;
 * the run that continues it runs only the finally steps not yet done and ends cancelled. */
static void test_engine_cancel_holds_across_an_interrupt(void **state)
{
	(void)state;
	reset();
	struct tf_engine_opts o = opts();
	struct tf_engine_result res = {0};
	char err[256] = "";
	struct tf_engine *e = start_run(
	    &o, "p.yaml",
	    "name: fin2\n"
	    "steps:\n"
	    "  - {name: h, type: shell, with: {argv: [hang]}}\n"
	    "  - {name: z, type: shell, needs: [h], with: {argv: [ok]}}\n"
	    "finally:\n"
	    "  - {name: g, type: shell, with: {argv: [ok]}}\n"
	    "  - {name: f, type: shell, with: {argv: [hang, '1', 'out=${run.state}']}}\n");
	char run[32];
	snprintf(run, sizeof(run), "%s", tf_engine_run_id(e));
	wait_calls("h", 1);
	request_cancel(run);
	wait_calls("f", 1);
	wait_calls("g", 1); /* called: it ends succeeded (its kind does not look at cancel) */
	tf_engine_cancel(e); /* Ctrl-C */
	assert_int_equal(tf_engine_wait(e, &res, err, sizeof(err)), 0);
	tf_engine_free(e);
	assert_int_equal(res.state, TF_RUN_INTERRUPTED);
	assert_string_equal(sstate(res.summary, "f"), "pending");
	json_decref(res.summary);

	assert_int_equal(tf_engine_resume(&o, run, 0, &res, err, sizeof(err)), 0);
	assert_int_equal(res.state, TF_RUN_FAILED);
	assert_int_equal(ncalls("h"), 1); /* not run again: the run is cancelled */
	assert_int_equal(ncalls("z"), 0);
	assert_int_equal(ncalls("g"), 1); /* the same end: a finally step that ran stays */
	assert_string_equal(sstate(res.summary, "h"), "pending");
	assert_string_equal(sstate(res.summary, "f"), "succeeded");
	assert_string_equal(step_out(res.summary, "f"), "cancelled");
	assert_non_null(strstr(json_string_value(json_object_get(res.summary, "error")), "cancelled"));
	json_decref(res.summary);
}

/* Submission: valid text becomes a pending run with its trigger (inside the caller's
 * transaction when one is open, so a rollback leaves nothing); bad text is refused with its
 * problems as diagnostics and records nothing. A pending run is then driven by whoever claims
 * it, through the handle. */
static void test_engine_submit_then_drive_pending_run(void **state)
{
	(void)state;
	reset();
	struct tf_store *st = NULL;
	char err[512] = "", run[32], other[32];
	assert_int_equal(tf_store_open_home("home", &st, err, sizeof(err)), 0);
	const char *yaml = "name: sub\nsteps:\n  - {name: a, type: shell, with: {argv: [ok]}}\n";
	struct tf_engine_submit sub = {
	    .path = "api", .yaml = yaml, .yaml_len = strlen(yaml), .trigger = "api"};
	struct tf_diag_list diags = {0};
	assert_int_equal(tf_store_begin(st), 0);
	assert_int_equal(tf_engine_submit(st, "home", &sub, other, &diags, err, sizeof(err)), 0);
	tf_store_rollback(st);
	assert_int_equal(tf_run_find(st, other, run), -ENOENT);
	assert_int_equal(tf_engine_submit(st, "home", &sub, run, &diags, err, sizeof(err)), 0);
	enum tf_run_state rs;
	assert_int_equal(tf_run_get_state(st, run, &rs), 0);
	assert_int_equal(rs, TF_RUN_PENDING);
	char *trigger = NULL;
	assert_int_equal(
	    tf_store_query_text(st, &trigger, "SELECT trigger FROM runs WHERE id=?", "t", run), 0);
	assert_string_equal(trigger, "api");
	free(trigger);
	const char *bad = "name: sub\nsteps:\n  - {name: a, type: nosuchtype}\n";
	struct tf_engine_submit sb = {.path = "api", .yaml = bad, .yaml_len = strlen(bad)};
	assert_int_equal(tf_engine_submit(st, "home", &sb, other, &diags, err, sizeof(err)),
	                 -EINVAL);
	assert_true(diags.nerrors > 0);
	assert_int_equal(diags.items[0].line, 3);
	tf_diag_list_release(&diags);
	tf_store_close(st);

	struct tf_engine_opts o = opts();
	struct tf_engine_req rq = {.run_id = run};
	struct tf_engine *e = NULL;
	assert_int_equal(tf_engine_start(&o, &rq, &e, &diags, err, sizeof(err)), 0);
	assert_string_equal(tf_engine_run_id(e), run);
	struct tf_engine_result res = {0};
	assert_int_equal(tf_engine_wait(e, &res, err, sizeof(err)), 0);
	assert_int_equal(res.state, TF_RUN_SUCCEEDED);
	json_decref(res.summary);
	tf_engine_free(e);
	/* ended: a second claim is refused by the state rule */
	assert_int_equal(tf_engine_start(&o, &rq, &e, &diags, err, sizeof(err)), -EALREADY);
	tf_diag_list_release(&diags);
}

/* A captured stream that does not end in a newline gets one, so the next "==>" title starts
 * its own line, also when the stream is a whole number of read buffers long. */
static void test_engine_append_log_keeps_titles_on_their_own_lines(void **state)
{
	(void)state;
	static const size_t sizes[] = {5, 8192, 16384};
	for (size_t i = 0; i < TF_ARRAY_LEN(sizes); i++) {
		FILE *f = fopen("out.txt", "w");
		assert_non_null(f);
		for (size_t k = 0; k < sizes[i]; k++)
			fputc(k % 64 == 62 ? '\n' : 'x', f);
		fclose(f);
		tf_test_write_file("err.txt", "oops\n");
		FILE *log = fopen("attempt.log", "w");
		assert_non_null(log);
		tf_kind_append_log(log, "stdout", "out.txt");
		tf_kind_append_log(log, "stderr", "err.txt");
		tf_kind_append_log(log, "missing", "no-such-file");
		fclose(log);
		char *text = NULL;
		size_t len = 0;
		assert_int_equal(tf_read_file("attempt.log", 1 << 20, &text, &len), 0);
		assert_int_equal(len, strlen("==> stdout <==\n") + sizes[i] + 1 +
		                          strlen("==> stderr <==\noops\n"));
		assert_non_null(strstr(text, "x\n==> stderr <==\noops\n"));
		assert_null(strstr(text, "missing"));
		free(text);
	}
}

/* ---- the shared worker pool (orchestrator/pool.h) ----------------------------------------- */

static void finish_run(struct tf_engine *e)
{
	struct tf_engine_result res = {0};
	char err[256] = "";
	assert_int_equal(tf_engine_wait(e, &res, err, sizeof(err)), 0);
	assert_int_equal(res.state, TF_RUN_SUCCEEDED);
	json_decref(res.summary);
	tf_engine_free(e);
}

/* Three runs of five independent steps on a pool of two threads: never more than two steps
 * run at once in the process (each run alone would take four), and every step runs. */
static void test_engine_pool_caps_steps_across_runs(void **state)
{
	(void)state;
	reset();
	struct tf_pool *pool = tf_engine_pool_new(2);
	assert_non_null(pool);
	struct tf_engine_opts o = opts(); /* workers = 4 per run */
	o.pool = pool;
	const char *yaml = "name: %s\nsteps:\n"
	                   "  - {name: a, type: shell, with: {argv: [sleep, '0.03']}}\n"
	                   "  - {name: b, type: shell, with: {argv: [sleep, '0.03']}}\n"
	                   "  - {name: c, type: shell, with: {argv: [sleep, '0.03']}}\n"
	                   "  - {name: d, type: shell, with: {argv: [sleep, '0.03']}}\n"
	                   "  - {name: e, type: shell, needs: [a, b, c, d], with: {argv: [ok]}}\n";
	struct tf_engine *e[3];
	for (int i = 0; i < 3; i++) {
		char name[24], file[32], text[512];
		snprintf(name, sizeof(name), "r%d", i);
		snprintf(file, sizeof(file), "r%d.yaml", i);
		snprintf(text, sizeof(text), yaml, name);
		e[i] = start_run(&o, file, text);
	}
	for (int i = 0; i < 3; i++)
		finish_run(e[i]);
	int busy = -1, busy_max = -1;
	tf_pool_stats(pool, &busy, &busy_max);
	assert_int_equal(busy, 0);
	assert_true(busy_max >= 1 && busy_max <= 2);
	pthread_mutex_lock(&mu);
	assert_true(max_concurrent >= 1 && max_concurrent <= 2);
	int total = 0;
	for (int i = 0; i < 64; i++)
		total += calls[i];
	pthread_mutex_unlock(&mu);
	assert_int_equal(total, 15); /* five steps in each of the three runs, each once */
	assert_int_equal(ncalls("a"), 3);
	assert_int_equal(ncalls("e"), 3);
	tf_pool_free(pool);
}

/* The order steps start in, and a gate the first one waits at. */
static char order[16][8];
static int norder, gate_open;
static pthread_cond_t gate_cv = PTHREAD_COND_INITIALIZER;

static int order_kind(struct tf_step_run *r)
{
	pthread_mutex_lock(&mu);
	if (norder < 16)
		snprintf(order[norder++], sizeof(order[0]), "%s", r->step);
	pthread_cond_broadcast(&gate_cv);
	while (!strcmp(r->step, "l1") && !gate_open)
		pthread_cond_wait(&gate_cv, &mu);
	pthread_mutex_unlock(&mu);
	return 0;
}

/* One thread in the pool, a priority-0 run with five steps holding it; a priority-9 run with
 * two steps arrives while the first step runs: the next two slots are the urgent run's, then
 * the rest of the first run's steps (the order of events, not durations). */
static void test_engine_pool_serves_higher_priority_first(void **state)
{
	(void)state;
	reset();
	norder = gate_open = 0;
	struct tf_pool *pool = tf_engine_pool_new(1);
	struct tf_engine_opts lo = opts(), hi;
	lo.kinds[TF_STEP_SHELL] = order_kind;
	lo.pool = pool;
	lo.has_priority = 1;
	lo.priority = 0;
	hi = lo;
	hi.priority = 9;
	struct tf_engine *l = start_run(&lo, "low.yaml",
	                                "name: low\nsteps:\n"
	                                "  - {name: l1, type: shell, with: {argv: [ok]}}\n"
	                                "  - {name: l2, type: shell, with: {argv: [ok]}}\n"
	                                "  - {name: l3, type: shell, with: {argv: [ok]}}\n"
	                                "  - {name: l4, type: shell, with: {argv: [ok]}}\n"
	                                "  - {name: l5, type: shell, with: {argv: [ok]}}\n");
	pthread_mutex_lock(&mu);
	while (norder == 0)
		pthread_cond_wait(&gate_cv, &mu);
	pthread_mutex_unlock(&mu);
	/* l1 holds the only thread; the urgent run's first round finds no slot and waits */
	struct tf_engine *h = start_run(&hi, "high.yaml",
	                                "name: high\nsteps:\n"
	                                "  - {name: h1, type: shell, with: {argv: [ok]}}\n"
	                                "  - {name: h2, type: shell, with: {argv: [ok]}}\n");
	pthread_mutex_lock(&mu);
	gate_open = 1;
	pthread_cond_broadcast(&gate_cv);
	pthread_mutex_unlock(&mu);
	finish_run(h);
	finish_run(l);
	assert_int_equal(norder, 7);
	assert_string_equal(order[0], "l1");
	assert_string_equal(order[1], "h1");
	assert_string_equal(order[2], "h2");
	for (int i = 3; i < 7; i++)
		assert_int_equal(order[i][0], 'l');
	tf_pool_free(pool);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_engine_backoff_full_jitter_and_cap),
	    cmocka_unit_test(test_engine_parallel_dag_with_references),
	    cmocka_unit_test(test_engine_a_kind_added_from_a_test_runs_in_a_pipeline),
	    cmocka_unit_test(test_engine_steps_start_only_after_their_start_is_committed),
	    cmocka_unit_test(test_engine_retries_with_backoff_then_succeeds),
	    cmocka_unit_test(test_engine_failure_class_not_retried_fails_run),
	    cmocka_unit_test(test_engine_timeout_cancels_step),
	    cmocka_unit_test(test_engine_timeout_skipped_only_when_the_executor_counts_it),
	    cmocka_unit_test(test_engine_log_upload_failure_recorded),
	    cmocka_unit_test(test_engine_timeout_starts_when_a_worker_runs_the_step),
	    cmocka_unit_test(test_engine_gate_skips_below_threshold),
	    cmocka_unit_test(test_engine_second_run_hits_cache),
	    cmocka_unit_test(test_engine_cache_key_includes_the_store),
	    cmocka_unit_test(test_engine_cache_hit_verified_in_the_store),
	    cmocka_unit_test(test_engine_shell_cache_is_opt_in),
	    cmocka_unit_test(test_engine_register_and_deploy_idempotent),
	    cmocka_unit_test(test_engine_register_verifies_bundle_and_names),
	    cmocka_unit_test(test_engine_cli_models_and_runs),
	    cmocka_unit_test(test_engine_train_steps_get_slices),
	    cmocka_unit_test(test_engine_shell_fails_twice_then_succeeds),
	    cmocka_unit_test(test_engine_shell_timeout_kills_process_group),
	    cmocka_unit_test(test_engine_next_step_dir_made_while_this_one_runs),
	    cmocka_unit_test(test_engine_interrupt_then_resume),
	    cmocka_unit_test(test_engine_cancel_runs_finally_steps),
	    cmocka_unit_test(test_engine_cancel_holds_across_an_interrupt),
	    cmocka_unit_test(test_engine_submit_then_drive_pending_run),
	    cmocka_unit_test(test_engine_append_log_keeps_titles_on_their_own_lines),
	    cmocka_unit_test(test_engine_pool_caps_steps_across_runs),
	    cmocka_unit_test(test_engine_pool_serves_higher_priority_first),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

/* test_cli.c — the tpuflow binary's shared option handling: numeric option values are whole
 * numbers in range or a usage error (exit 64) naming the flag and the value; and what
 * `runs logs` shows of a log that is not UTF-8. Runs $TPUFLOW_BIN in the test's temp
 * directory. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "common/common.h"
#include "tests/testutil.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

/* Runs `tpuflow ARGV...` with the state home in ./home; returns its exit code and its stderr
 * in *ERR (owned by the caller). */
static int run(const char *const args[], char **err)
{
	return tf_test_cli(args, NULL, err);
}

static void test_cli_numeric_options_refuse_junk_and_overflow(void **state)
{
	(void)state;
	static const struct {
		const char *args[8];
		const char *says;
	} bad[] = {
	    {{"run", "--workers", "4abc", "p.yaml"}, "--workers wants"},
	    {{"run", "--workers", "0", "p.yaml"}, "not '0'"},
	    {{"runs", "list", "--limit", "abc"}, "--limit wants"},
	    {{"runs", "list", "--limit", "-3"}, "not '-3'"},
	    /* 2^32 + 1 once wrapped to 1 job */
	    {{"sched", "simulate", "--jobs", "4294967297"}, "--jobs wants"},
	    {{"sched", "simulate", "--jobs", "10", "--failures", ""}, "--failures wants"},
	    {{"ckpt", "--keep", "0"}, "--keep wants"},
	    /* the flags of data prep and train are the step kinds' rows, with their checks */
	    {{"train", "--epochs", "0"}, "--epochs wants an integer, between 1 and"},
	    {{"train", "--optimizer", "adma"}, "--optimizer wants one of sgd, adam, adamw or lars"},
	    {{"train", "--hidden", "256,0"}, "--hidden wants a list of integers, each between 1"},
	    {{"data", "prep", "--shards", "5000"}, "--shards wants an integer, between 1 and 4096"},
	    {{"data", "prep", "--test-fraction", "1"}, "--test-fraction wants a number"},
	};
	for (size_t i = 0; i < TF_ARRAY_LEN(bad); i++) {
		char *err = NULL;
		int rc = run(bad[i].args, &err);
		if (rc != TF_EXIT_USAGE || !strstr(err, bad[i].says))
			fail_msg("case %zu: exit %d, stderr: %s", i, rc, err);
		free(err);
	}
	/* in range still works */
	static const char *const ok[] = {"runs", "list", "--limit", "0", NULL};
	char *err = NULL;
	assert_int_equal(run(ok, &err), 0);
	free(err);
}

/* A log is bytes: `runs logs` (text and --json) shows it with every invalid sequence
 * replaced by U+FFFD; one bad byte once hid the whole log. A metric of inf and an output that
 * is not UTF-8 are reported as such, not as "did not write". */
static void test_cli_logs_with_invalid_utf8_are_shown(void **state)
{
	(void)state;
	tf_test_write_file("p.yaml", "name: bytes\nsteps:\n"
	                             "  - {name: s, type: shell, with: {argv: [/bin/sh, -c, "
	                             "\"printf 'before \\\\377\\\\300\\\\200 after\\\\n'\"]}}\n");
	static const char *const run_args[] = {"run", "p.yaml", "--plain", NULL};
	char *err = NULL;
	assert_int_equal(run(run_args, &err), 0);
	free(err);
	static const char *const logs[] = {"runs", "logs", "latest", "s", NULL};
	assert_int_equal(run(logs, &err), 0);
	free(err);
	char *out = NULL;
	size_t len;
	assert_int_equal(tf_read_file("out.txt", 1 << 20, &out, &len), 0);
	if (!strstr(out, "before \xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd after"))
		fail_msg("runs logs printed: %s", out);
	free(out);
	static const char *const logs_json[] = {"runs", "logs", "latest", "s", "--json", NULL};
	assert_int_equal(run(logs_json, &err), 0);
	free(err);
	json_t *doc = tf_test_load_json("out.txt");
	assert_non_null(doc);
	json_t *l = json_array_get(json_object_get(doc, "logs"), 0);
	assert_non_null(l);
	assert_non_null(strstr(json_string_value(json_object_get(l, "text")), "after"));
	json_decref(doc);

	static const struct {
		const char *line, *says;
	} bad[] = {
	    {"echo m=inf > \\\"$TPUFLOW_METRICS\\\"", "metric 'm' is inf; metrics must be finite"},
	    {"echo m=notanumber > \\\"$TPUFLOW_METRICS\\\"", "metric 'm' is 'notanumber', not a number"},
	    {"printf 'o=\\\\377\\\\n' > \\\"$TPUFLOW_OUTPUTS\\\"", "line 1: the value is not valid UTF-8"},
	};
	for (size_t i = 0; i < TF_ARRAY_LEN(bad); i++) {
		char *q = tf_xasprintf(
		    "name: bad\nsteps:\n"
		    "  - {name: s, type: shell, with: {argv: [/bin/sh, -c, \"%s\"], outputs: [o], "
		    "metrics: [m]}}\n",
		    bad[i].line);
		tf_test_write_file("q.yaml", q);
		free(q);
		static const char *const q_args[] = {"run", "q.yaml", "--plain", NULL};
		assert_int_equal(run(q_args, &err), TF_EXIT_FAILED);
		free(err);
		assert_int_equal(tf_read_file("out.txt", 1 << 20, &out, &len), 0);
		if (!strstr(out, bad[i].says))
			fail_msg("case %zu: run printed: %s", i, out);
		free(out);
	}
}

/* A relative store URL (in the pipeline or --storage) is recorded absolute, so the run's logs
 * and a resume from another directory find the same store. */
static void test_cli_relative_storage_recorded_absolute(void **state)
{
	(void)state;
	tf_test_write_file("rel.yaml",
	                   "name: rel\nstorage: file://relstore\nsteps:\n"
	                   "  - {name: s, type: shell, with: {argv: [/bin/sh, -c, 'echo hi']}}\n");
	char cwd[4096];
	assert_non_null(getcwd(cwd, sizeof(cwd)));
	static const struct {
		const char *args[6];
		const char *dir;
	} cases[] = {
	    {{"run", "rel.yaml", "--plain", NULL}, "relstore"},
	    {{"run", "rel.yaml", "--plain", "--storage", "./other", NULL}, "other"},
	};
	for (size_t i = 0; i < TF_ARRAY_LEN(cases); i++) {
		char *err = NULL;
		assert_int_equal(tf_test_cli(cases[i].args, NULL, &err), 0);
		free(err);
		static const char *const show[] = {"runs", "show", "latest", "--json", NULL};
		assert_int_equal(tf_test_cli(show, NULL, NULL), 0);
		json_t *doc = tf_test_load_json("out.txt");
		assert_non_null(doc);
		char *want = tf_xasprintf("file://%s/%s", cwd, cases[i].dir);
		assert_string_equal(json_string_value(json_object_get(doc, "storage")), want);
		free(want);
		/* times keep their sub-second part (they were printed to whole seconds) */
		double t = json_number_value(json_object_get(doc, "created_at"));
		json_t *a = json_array_get(
		    json_object_get(json_array_get(json_object_get(doc, "steps"), 0), "attempts_detail"),
		    0);
		double u = json_number_value(json_object_get(a, "started_at"));
		assert_true(t > 1e9 && u > 1e9);
		assert_true(t != (double)(long long)t || u != (double)(long long)u);
		json_decref(doc);
	}
}

/* An in-process data_prep stops at its timeout (it once ran its whole course past a 10 ms
 * limit and was recorded as succeeded); the attempt ends with class timeout. */
static void test_cli_inprocess_data_prep_honours_timeout(void **state)
{
	(void)state;
	if (access("/usr/share/datasets/fashion-mnist", R_OK))
		skip();
	tf_test_write_file("prep.yaml",
	                   "name: prep\nsteps:\n"
	                   "  - {name: prep, type: data_prep, executor: inprocess, timeout: 10ms,\n"
	                   "     with: {source: fashion-mnist}}\n");
	static const char *const args[] = {"run", "prep.yaml", "--plain", NULL};
	char *err = NULL;
	assert_int_equal(tf_test_cli(args, NULL, &err), TF_EXIT_FAILED);
	free(err);
	static const char *const show[] = {"runs", "show", "latest", "--json", NULL};
	assert_int_equal(tf_test_cli(show, NULL, NULL), 0);
	json_t *doc = tf_test_load_json("out.txt");
	assert_non_null(doc);
	json_t *a = json_array_get(
	    json_object_get(json_array_get(json_object_get(doc, "steps"), 0), "attempts_detail"), 0);
	assert_string_equal(json_string_value(json_object_get(a, "failure_class")), "timeout");
	json_decref(doc);
}

/* What is not there exits 66 (documented in `help`), not 1 ("the run failed"); unknown verbs
 * and extra arguments are usage errors; a zero-byte database is refused, not taken as new. */
static void test_cli_not_found_and_usage_exit_codes(void **state)
{
	(void)state;
	tf_test_write_file("one.yaml", "name: one\nsteps:\n  - {name: s, type: shell, with: {argv: "
	                               "[/bin/sh, -c, 'echo hi']}}\n");
	static const char *const ok[] = {"run", "one.yaml", "--plain", NULL};
	assert_int_equal(tf_test_cli(ok, NULL, NULL), 0);
	static const struct {
		const char *args[6];
		int code;
		const char *says;
	} cases[] = {
	    {{"runs", "show", "nosuchrun"}, TF_EXIT_NOTFOUND, "no run 'nosuchrun'"},
	    {{"runs", "logs", "nosuchrun"}, TF_EXIT_NOTFOUND, "no run"},
	    {{"runs", "logs", "latest", "nosuchstep"}, TF_EXIT_NOTFOUND, "no step 'nosuchstep'"},
	    {{"models", "show", "nosuchmodel"}, TF_EXIT_NOTFOUND, "no model 'nosuchmodel'"},
	    {{"hooks", "rm", "nosuchhook"}, TF_EXIT_NOTFOUND, "no hook 'nosuchhook'"},
	    {{"hooks", "test", "nosuchhook"}, TF_EXIT_NOTFOUND, "no hook 'nosuchhook'"},
	    {{"alerts", "show", "999"}, TF_EXIT_NOTFOUND, "no alert '999'"},
	    {{"alerts", "redeliver", "999"}, TF_EXIT_NOTFOUND, "no alert '999'"},
	    {{"pipelines", "rm", "nosuchpl"},
	     TF_EXIT_NOTFOUND,
	     "no registered pipeline 'nosuchpl'"},
	    {{"tokens", "revoke", "nosuchtoken"}, TF_EXIT_NOTFOUND, "no token 'nosuchtoken'"},
	    {{"runs", "nosuchverb"}, TF_EXIT_USAGE, "unknown subcommand 'nosuchverb'"},
	    {{"runs", "nosuchverb", "x"}, TF_EXIT_USAGE, "unknown subcommand 'nosuchverb'"},
	    {{"version", "extra"}, TF_EXIT_USAGE, "unexpected argument 'extra'"},
	};
	for (size_t i = 0; i < TF_ARRAY_LEN(cases); i++) {
		char *err = NULL;
		int rc = tf_test_cli(cases[i].args, NULL, &err);
		if (rc != cases[i].code || !strstr(err, cases[i].says))
			fail_msg("case %zu: exit %d, stderr: %s", i, rc, err);
		free(err);
	}
	assert_int_equal(mkdir("zero", 0755), 0);
	tf_test_write_file("zero/tpuflow.db", "");
	struct timeval old[2] = {{.tv_sec = time(NULL) - 3600}, {.tv_sec = time(NULL) - 3600}};
	assert_int_equal(utimes("zero/tpuflow.db", old), 0);
	char *argv[] = {getenv("TPUFLOW_BIN"), "--home", "zero", "runs", "list", NULL};
	int rc = tf_test_wait_exit(tf_test_spawn(argv, "out.txt", "err.txt"));
	char *err = NULL;
	size_t len;
	assert_int_equal(tf_read_file("err.txt", 1 << 20, &err, &len), 0);
	if (rc == 0 || !strstr(err, "is empty (0 bytes)"))
		fail_msg("a zero-byte database: exit %d, stderr: %s", rc, err);
	free(err);
	struct stat sb;
	assert_int_equal(stat("zero/tpuflow.db", &sb), 0);
	assert_int_equal(sb.st_size, 0); /* left as it was */

	/* run --json on a pipeline with errors: one JSON document, problems in file order */
	tf_test_write_file("bad.yaml",
	                   "name: bad\nparams:\n  flag: {type: bool, default: yes}\nsteps:\n"
	                   "  - {name: a, type: shell, needs: [nosuch], with: {argv: [x]}}\n"
	                   "  - {name: b, type: nosuchtype}\n");
	static const char *const bad_run[] = {"run", "bad.yaml", "--json", NULL};
	err = NULL;
	assert_int_equal(tf_test_cli(bad_run, NULL, &err), TF_EXIT_DATAERR);
	free(err);
	json_t *doc = tf_test_load_json("out.txt");
	assert_non_null(doc);
	assert_true(json_is_false(json_object_get(doc, "ok")));
	json_t *diags = json_object_get(doc, "diagnostics");
	assert_true(json_array_size(diags) >= 3);
	for (size_t i = 1; i < json_array_size(diags); i++)
		assert_true(json_integer_value(json_object_get(json_array_get(diags, i - 1), "line")) <=
		            json_integer_value(json_object_get(json_array_get(diags, i), "line")));
	json_decref(doc);

	/* a NUL byte in a pipeline: line and column (it was a byte offset) and why */
	FILE *f = fopen("nul.yaml", "wb");
	assert_non_null(f);
	fwrite("name: x\nsteps: []\n\0\0", 1, 20, f);
	fclose(f);
	static const char *const nul[] = {"validate", "nul.yaml", NULL};
	err = NULL;
	assert_int_equal(tf_test_cli(nul, NULL, &err), TF_EXIT_DATAERR);
	if (!strstr(err, "nul.yaml:3:1: error:") || !strstr(err, "NUL byte"))
		fail_msg("validate of a file with a NUL byte said: %s", err);
	free(err);
}

/* runs list: skipped steps are not counted as done; a running run whose process is gone is
 * shown as orphaned (it stayed "running" forever); each run has a duration. */
static void test_cli_runs_list_skipped_orphaned_duration(void **state)
{
	(void)state;
	tf_test_write_file("sk.yaml",
	                   "name: sk\nsteps:\n  - {name: a, type: shell, with: {argv: ['false']}}\n"
	                   "  - {name: b, type: shell, needs: [a], with: {argv: ['true']}}\n"
	                   "  - {name: c, type: shell, with: {argv: ['true']}}\n");
	static const char *const sk[] = {"run", "sk.yaml", "--plain", NULL};
	assert_int_equal(tf_test_cli(sk, NULL, NULL), TF_EXIT_FAILED);
	static const char *const list[] = {"runs", "list", "--json", NULL};
	assert_int_equal(tf_test_cli(list, NULL, NULL), 0);
	json_t *doc = tf_test_load_json("out.txt");
	json_t *r = json_array_get(doc, 0);
	assert_int_equal(json_integer_value(json_object_get(r, "done")), 1);
	assert_int_equal(json_integer_value(json_object_get(r, "skipped")), 1);
	assert_true(json_is_number(json_object_get(r, "duration")));
	json_decref(doc);

	tf_test_write_file(
	    "long.yaml",
	    "name: long\nsteps:\n  - {name: s, type: shell, with: {argv: [sleep, '30']}}\n");
	char *argv[] = {getenv("TPUFLOW_BIN"), "--home", "home", "run", "long.yaml", "--plain",
	                NULL};
	pid_t pid = tf_test_spawn(argv, "run.out", "run.err");
	int running = 0;
	for (int i = 0; i < 600 && !running; i++) {
		usleep(50000);
		if (tf_test_cli(list, NULL, NULL) != 0)
			continue;
		doc = tf_test_load_json("out.txt");
		r = json_array_get(doc, 0);
		running = !strcmp(json_string_value(json_object_get(r, "pipeline")), "long") &&
		          !strcmp(json_string_value(json_object_get(r, "state")), "running");
		if (running)
			assert_false(json_is_true(json_object_get(r, "orphaned")));
		json_decref(doc);
	}
	assert_true(running);
	kill(pid, SIGKILL);
	tf_test_wait_exit(pid);
	char *out = NULL;
	static const char *const text[] = {"runs", "list", NULL};
	assert_int_equal(tf_test_cli(text, &out, NULL), 0);
	if (!strstr(out, "orphaned") || !strstr(out, "runs resume"))
		fail_msg("runs list after kill -9 of the run's process: %s", out);
	free(out);
}

/* Input echoed to the terminal cannot drive it: control characters in a key come back as
 * \xNN. And `plan` says "cache on" for a step whose results may be reused, nothing for kinds
 * that are never cached ("cached" is a state a step ends in). */
static void test_cli_terminal_escapes_and_plan_cache_words(void **state)
{
	(void)state;
	tf_test_write_file("ctl.yaml", "name: ctl\nsteps:\n  - {name: a, type: shell, with: {argv: "
	                               "[x]}, \"\\e[31mred\": 1}\n");
	static const char *const v[] = {"validate", "ctl.yaml", NULL};
	char *err = NULL;
	assert_int_equal(tf_test_cli(v, NULL, &err), TF_EXIT_DATAERR);
	if (strchr(err, '\033') || !strstr(err, "\\x1b[31mred"))
		fail_msg("validate echoed: %s", err);
	free(err);
	tf_test_write_file(
	    "plan.yaml",
	    "name: plan\nsteps:\n"
	    "  - {name: p, type: data_prep, with: {source: csv, path: x.csv}}\n"
	    "  - {name: r, type: register, needs: [p], with: {model_name: m, bundle: b}}\n");
	static const char *const pl[] = {"plan", "plan.yaml", NULL};
	char *out = NULL;
	assert_int_equal(tf_test_cli(pl, &out, NULL), 0);
	if (strstr(out, "cached") || !strstr(out, "cache on"))
		fail_msg("plan printed: %s", out);
	const char *reg = strstr(out, "  r ");
	assert_non_null(reg);
	assert_null(strstr(reg, "cache on"));
	free(out);
}

/* `--param k=v` is recorded under its name k (it was recorded under "k=v"). */
static void test_cli_param_override_recorded_by_name(void **state)
{
	(void)state;
	tf_test_write_file(
	    "prm.yaml", "name: prm\nparams:\n  n: {type: int, default: 1}\nsteps:\n"
	                "  - {name: s, type: shell, with: {argv: [/bin/echo, '${params.n}']}}\n");
	static const char *const args[] = {"run", "prm.yaml", "--plain", "--param", "n=5", NULL};
	char *err = NULL;
	assert_int_equal(run(args, &err), 0);
	free(err);
	static const char *const show[] = {"runs", "show", "latest", "--json", NULL};
	assert_int_equal(tf_test_cli(show, NULL, NULL), 0);
	json_t *doc = tf_test_load_json("out.txt");
	assert_non_null(doc);
	json_t *params = json_object_get(doc, "params");
	assert_non_null(params);
	assert_null(json_object_get(params, "n=5"));
	assert_string_equal(json_string_value(json_object_get(params, "n")), "5");
	json_decref(doc);
}

/* docs/pipeline.md's step reference is what `tpuflow kinds --markdown` prints from the
 * step-kind table, to the byte: a row changed without the doc (or the doc by hand) fails here.
 * The doc is found next to the binary's build folder. */
static void test_cli_kinds_markdown_is_the_doc(void **state)
{
	(void)state;
	static const char *const md[] = {"kinds", "--markdown", NULL};
	char *out = NULL;
	assert_int_equal(tf_test_cli(md, &out, NULL), 0);
	char *bin = tf_xstrdup(getenv("TPUFLOW_BIN")), *slash = strrchr(bin, '/');
	assert_non_null(slash);
	*slash = '\0'; /* BUILD */
	slash = strrchr(bin, '/');
	assert_non_null(slash);
	*slash = '\0'; /* the tree */
	char *path = tf_xasprintf("%s/docs/pipeline.md", bin), *doc = NULL;
	size_t len;
	assert_int_equal(tf_read_file(path, 1 << 20, &doc, &len), 0);
	const char *begin = "<!-- BEGIN tpuflow kinds --markdown", *end = "<!-- END tpuflow kinds";
	char *b = strstr(doc, begin), *e = strstr(doc, end);
	assert_non_null(b);
	assert_non_null(e);
	b = strchr(b, '\n') + 1;
	*e = '\0';
	if (strcmp(b, out))
		fail_msg(
		    "docs/pipeline.md's step reference differs from `tpuflow kinds --markdown`; "
		    "run scripts/docs-kinds.sh");
	assert_non_null(strstr(out, "| `optimizer` | one of `sgd`, `adam`, `adamw` or `lars` |"));
	free(doc);
	free(path);
	free(bin);
	free(out);
	/* the text and JSON forms come from the same rows */
	static const char *const js[] = {"kinds", "train", "--json", NULL};
	assert_int_equal(tf_test_cli(js, NULL, NULL), 0);
	json_t *k = tf_test_load_json("out.txt");
	assert_non_null(k);
	assert_string_equal(json_string_value(json_object_get(json_array_get(k, 0), "name")),
	                    "train");
	assert_true(json_is_true(json_object_get(json_array_get(k, 0), "needs_slice")));
	json_decref(k);
	static const char *const bad[] = {"kinds", "nosuchkind", NULL};
	assert_int_equal(tf_test_cli(bad, NULL, NULL), TF_EXIT_USAGE);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_cli_numeric_options_refuse_junk_and_overflow),
	    cmocka_unit_test(test_cli_logs_with_invalid_utf8_are_shown),
	    cmocka_unit_test(test_cli_relative_storage_recorded_absolute),
	    cmocka_unit_test(test_cli_inprocess_data_prep_honours_timeout),
	    cmocka_unit_test(test_cli_not_found_and_usage_exit_codes),
	    cmocka_unit_test(test_cli_runs_list_skipped_orphaned_duration),
	    cmocka_unit_test(test_cli_terminal_escapes_and_plan_cache_words),
	    cmocka_unit_test(test_cli_param_override_recorded_by_name),
	    cmocka_unit_test(test_cli_kinds_markdown_is_the_doc),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

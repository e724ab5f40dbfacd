/* test_exec_self.c — ml steps with `executor: local`: the engine re-executes tpuflow
 * (`tpuflow step exec`, $TPUFLOW_BIN) for data_prep, train and evaluate. The results match an
 * in-process run bit for bit; a train child killed by its timeout is retried and the next
 * attempt resumes from the checkpoint, and no process of the killed child is left; a
 * permanent failure in the child comes back with its message and class `error`. Skipped when
 * this build has no training workload or the dataset is not installed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "common/common.h"
#include "orchestrator/engine.h"
#include "orchestrator/store.h"
#include "tests/testutil.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int have_ml(void)
{
	return access(TF_TEST_FMNIST, R_OK) == 0 && getenv("TPUFLOW_BIN");
}

static int run_yaml(const char *home, const char *yaml, struct tf_engine_result *res)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s.yaml", home);
	tf_test_write_file(path, yaml);
	struct tf_engine_opts o = {.home = home, .workers = 2, .self_exe = getenv("TPUFLOW_BIN")};
	struct tf_diag_list diags = {0};
	char err[512] = "";
	memset(res, 0, sizeof(*res));
	int rc = tf_engine_run_file(&o, path, NULL, 0, &diags, res, err, sizeof(err));
	if (rc) {
		tf_diag_print(&diags, stderr);
		fprintf(stderr, "engine: %s\n", err);
	}
	tf_diag_list_release(&diags);
	return rc;
}

/* The three ml steps on a tiny subset; DEFAULTS is the `defaults:` mapping. */
static char *small_pipeline(const char *defaults)
{
	return tf_xasprintf(
	    "name: small\n"
	    "defaults: %s\n"
	    "steps:\n"
	    "  - name: prep\n    type: data_prep\n"
	    "    with: {source: fashion-mnist, shards: 2, seed: 1, limit_train: 2000,\n"
	    "           limit_test: 500}\n"
	    "  - name: train\n    type: train\n    needs: [prep]\n    accelerator: v4-8\n"
	    "    with: {dataset: '${steps.prep.outputs.dataset}', hidden: [32], epochs: 4,\n"
	    "           batch: 64, optimizer: sgd, lr: 0.1, momentum: 0.9, seed: 3,\n"
	    "           max_steps: 100, checkpoint_every: 25}\n"
	    "  - name: evaluate\n    type: evaluate\n    needs: [train]\n"
	    "    with: {model: '${steps.train.outputs.bundle}',\n"
	    "           dataset: '${steps.prep.outputs.dataset}'}\n",
	    defaults);
}

static char *read_log(const char *home, const char *run, const char *step, int attempt)
{
	char path[PATH_MAX], *text = NULL;
	size_t len;
	snprintf(path, sizeof(path), "%s/objects/runs/%s/%s/logs/attempt-%d.log", home, run, step,
	         attempt);
	if (tf_read_file(path, 1 << 24, &text, &len))
		return NULL;
	return text;
}

static void test_exec_self_local_matches_inprocess(void **state)
{
	(void)state;
	if (!have_ml())
		skip();
	struct tf_engine_result a, b;
	char *ya = small_pipeline("{cache: false}");
	char *yb = small_pipeline("{cache: false, executor: local}");
	assert_int_equal(run_yaml("inproc", ya, &a), 0);
	assert_int_equal(run_yaml("local", yb, &b), 0);
	free(ya);
	free(yb);
	assert_int_equal(a.state, TF_RUN_SUCCEEDED);
	assert_int_equal(b.state, TF_RUN_SUCCEEDED);
	/* the same numbers to the last bit (JSON reals carry 17 significant digits) */
	const struct {
		const char *step, *metric;
	} same[] = {
	    {"prep", "examples"}, {"train", "loss"},           {"train", "accuracy"},
	    {"train", "auc"},     {"evaluate", "loss"},        {"evaluate", "accuracy"},
	    {"evaluate", "auc"},  {"train", "device_seconds"},
	};
	for (size_t i = 0; i < TF_ARRAY_LEN(same); i++) {
		json_t *ma = json_object_get(tf_test_step_of(a.summary, same[i].step), "metrics");
		json_t *mb = json_object_get(tf_test_step_of(b.summary, same[i].step), "metrics");
		json_t *va = json_object_get(ma, same[i].metric);
		json_t *vb = json_object_get(mb, same[i].metric);
		assert_non_null(va);
		assert_non_null(vb);
		if (json_number_value(va) != json_number_value(vb))
			fail_msg("%s.%s: inprocess %.17g, local %.17g", same[i].step,
			         same[i].metric, json_number_value(va), json_number_value(vb));
	}
	json_t *ev = json_object_get(tf_test_step_of(b.summary, "evaluate"), "metrics");
	assert_true(json_number_value(json_object_get(ev, "accuracy")) > 0.5);
	/* the local train step's progress came through the view's channel into its log, and
	 * the log says where it ran */
	char *log = read_log("local", b.run_id, "train", 1);
	assert_non_null(log);
	assert_non_null(strstr(log, "\"event\":\"done\""));
	assert_non_null(strstr(log, "tpuflow step exec --kind train: exit 0"));
	free(log);
	log = read_log("inproc", a.run_id, "train", 1);
	assert_non_null(log);
	assert_null(strstr(log, "step exec"));
	free(log);
	json_decref(a.summary);
	json_decref(b.summary);
}

/* ---- watching for the child processes ---------------------------------------------------- */

static volatile int watching;
static pid_t seen[256];
static int nseen;
static char mycwd[PATH_MAX];

/* 1 when /proc/PID is a `tpuflow step exec` started in our directory. */
static int is_step_exec(const char *pid)
{
	char path[64], link[PATH_MAX], *cmd = NULL;
	size_t len = 0;
	snprintf(path, sizeof(path), "/proc/%s/cwd", pid);
	ssize_t n = readlink(path, link, sizeof(link) - 1);
	if (n <= 0)
		return 0;
	link[n] = '\0';
	if (strcmp(link, mycwd))
		return 0;
	snprintf(path, sizeof(path), "/proc/%s/cmdline", pid);
	if (tf_read_file(path, 1 << 16, &cmd, &len))
		return 0;
	const char *a1 = len ? cmd + strlen(cmd) + 1 : NULL;
	int yes = a1 && a1 < cmd + len && !strcmp(a1, "step") && a1 + 5 < cmd + len &&
	          !strcmp(a1 + 5, "exec");
	free(cmd);
	return yes;
}

static void *watch_main(void *arg)
{
	(void)arg;
	while (watching) {
		DIR *d = opendir("/proc");
		struct dirent *de;
		while (d && (de = readdir(d))) {
			if (de->d_name[0] < '1' || de->d_name[0] > '9' || !is_step_exec(de->d_name))
				continue;
			pid_t p = (pid_t)atoi(de->d_name);
			int known = 0;
			for (int i = 0; i < nseen; i++)
				known |= seen[i] == p;
			if (!known && nseen < (int)TF_ARRAY_LEN(seen))
				seen[nseen++] = p;
		}
		if (d)
			closedir(d);
		usleep(5000);
	}
	return NULL;
}

/* The process group of /proc/PID/stat ("pid (comm) state ppid pgrp ..."), -1 if gone. State
 * in *st. */
static long pgrp_of(const char *pid, char *st)
{
	char path[64], *text = NULL;
	size_t len;
	snprintf(path, sizeof(path), "/proc/%s/stat", pid);
	if (tf_read_file(path, 4096, &text, &len))
		return -1;
	const char *p = strrchr(text, ')');
	char state = 0;
	long ppid = 0, pgrp = -1;
	if (!p || sscanf(p + 1, " %c %ld %ld", &state, &ppid, &pgrp) != 3)
		pgrp = -1;
	*st = state;
	free(text);
	return pgrp;
}

/* Nothing alive (zombies aside) is in the process group led by `leader`. */
static void assert_group_gone(pid_t leader)
{
	DIR *d = opendir("/proc");
	struct dirent *de;
	assert_non_null(d);
	while ((de = readdir(d))) {
		if (de->d_name[0] < '1' || de->d_name[0] > '9')
			continue;
		char st = 0;
		long g = pgrp_of(de->d_name, &st);
		if (g == (long)leader && st != 'Z')
			fail_msg("process %s of the step's group %d is still alive (state %c)",
			         de->d_name, (int)leader, st);
	}
	closedir(d);
}

static void test_exec_self_timeout_kills_child_then_resumes(void **state)
{
	(void)state;
	if (!have_ml())
		skip();
	assert_non_null(getcwd(mycwd, sizeof(mycwd)));
	/* ~3 s of training (on an idle machine) with a 1 s timeout: every attempt is killed
	 * after some checkpoints and the next resumes from the newest (retries without backoff
	 * until it is done). A loaded machine needs many more attempts (12 were seen with a load
	 * of 8 on 2 cores), hence the generous retry limit. */
	const char *yaml =
	    "name: slow\n"
	    "defaults: {cache: false}\n"
	    "steps:\n"
	    "  - name: prep\n    type: data_prep\n"
	    "    with: {source: fashion-mnist, shards: 2, seed: 1, limit_train: 2000,\n"
	    "           limit_test: 500}\n"
	    "  - name: train\n    type: train\n    needs: [prep]\n    executor: local\n"
	    "    timeout: 1s\n"
	    "    retries: {limit: 60, backoff: 0, on: [timeout]}\n"
	    "    with: {dataset: '${steps.prep.outputs.dataset}', hidden: [128], epochs: 100,\n"
	    "           batch: 64, optimizer: sgd, lr: 0.05, seed: 1, max_steps: 1500,\n"
	    "           checkpoint_every: 10}\n";
	pthread_t th;
	watching = 1;
	nseen = 0;
	assert_int_equal(pthread_create(&th, NULL, watch_main, NULL), 0);
	struct tf_engine_result res;
	int rc = run_yaml("slow", yaml, &res);
	watching = 0;
	pthread_join(th, NULL);
	assert_int_equal(rc, 0);
	assert_int_equal(res.state, TF_RUN_SUCCEEDED);
	json_t *tr = tf_test_step_of(res.summary, "train");
	int attempts = (int)json_integer_value(json_object_get(tr, "attempts"));
	assert_true(attempts >= 2);

	struct tf_store *st = NULL;
	char err[256], *cls = NULL;
	assert_int_equal(tf_store_open("slow/tpuflow.db", 0, &st, err, sizeof(err)), 0);
	assert_int_equal(
	    tf_store_query_text(st, &cls,
	                        "SELECT failure_class FROM attempts WHERE run_id=? AND "
	                        "step='train' AND n=1",
	                        "t", res.run_id),
	    0);
	assert_string_equal(cls, "timeout");
	free(cls);
	tf_store_close(st);
	/* the second attempt continued from a checkpoint of the first */
	char *log = read_log("slow", res.run_id, "train", 2);
	assert_non_null(log);
	const char *ev = strstr(log, "\"event\":\"resume\"");
	assert_non_null(ev);
	const char *step = strstr(ev, "\"step\":");
	assert_non_null(step);
	assert_true(atoi(step + 7) > 0);
	free(log);
	log = read_log("slow", res.run_id, "train", 1);
	assert_non_null(log);
	assert_non_null(strstr(log, "after timeout"));
	free(log);
	json_decref(res.summary);

	/* one child per attempt was seen while running; none of them, nor anything in their
	 * process groups, is left */
	assert_true(nseen >= 1);
	for (int i = 0; i < nseen; i++) {
		char pid[16], state_c = 0;
		snprintf(pid, sizeof(pid), "%d", (int)seen[i]);
		long g = pgrp_of(pid, &state_c);
		assert_true(g < 0 || state_c == 'Z');
		assert_group_gone(seen[i]);
	}
}

static void test_exec_self_child_error_is_permanent(void **state)
{
	(void)state;
	if (!have_ml())
		skip();
	const char *yaml =
	    "name: bad\n"
	    "steps:\n"
	    "  - name: train\n    type: train\n    executor: local\n"
	    "    retries: {limit: 3, backoff: 0, on: [infra, timeout]}\n"
	    "    with: {dataset: no/such/manifest.json, hidden: [8], max_steps: 5}\n";
	struct tf_engine_result res;
	assert_int_equal(run_yaml("bad", yaml, &res), 0);
	assert_int_equal(res.state, TF_RUN_FAILED);
	json_t *tr = tf_test_step_of(res.summary, "train");
	assert_int_equal(json_integer_value(json_object_get(tr, "attempts")), 1);
	const char *reason = json_string_value(json_object_get(tr, "reason"));
	assert_non_null(reason);
	assert_non_null(strstr(reason, "no/such/manifest.json"));
	assert_non_null(strstr(reason, "step process: exit 1"));
	assert_non_null(strstr(reason, "(error, attempt 1)"));
	json_decref(res.summary);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_exec_self_local_matches_inprocess),
	    cmocka_unit_test(test_exec_self_timeout_kills_child_then_resumes),
	    cmocka_unit_test(test_exec_self_child_error_is_permanent),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

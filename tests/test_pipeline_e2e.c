/* test_pipeline_e2e.c — the five stages end to end on a small configuration (a short
 * training run on Fashion-MNIST): data_prep -> train (on an emulated v4-8 slice) -> evaluate
 * -> register -> deploy, through `tpuflow run` as a child process; then kill -9 during
 * training and `runs resume`: no completed step runs again, training continues from its
 * newest checkpoint, exactly one model version, integrity_check ok. Skipped when this build
 * has no training workload (ml/steps.h) or the dataset is not installed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "common/common.h"
#include "orchestrator/registry.h"
#include "orchestrator/state.h"
#include "orchestrator/store.h"
#include "storage/objstore.h"
#include "tests/testutil.h"

#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *yaml =
    "name: e2e\n"
    "params:\n"
    "  min_accuracy: {type: float, default: 0.5}\n"
    "  max_steps: {type: int, default: 120}\n"
    "steps:\n"
    "  - name: prep\n    type: data_prep\n"
    "    with: {source: fashion-mnist, shards: 2, seed: 1}\n"
    "  - name: train\n    type: train\n    needs: [prep]\n    accelerator: v4-8\n"
    "    with: {dataset: '${steps.prep.outputs.dataset}', hidden: [64], epochs: 1, batch: 256,\n"
    "           optimizer: sgd, lr: 0.1, momentum: 0.9, seed: 1, max_steps: "
    "'${params.max_steps}',\n"
    "           checkpoint_every: 20}\n"
    "  - name: evaluate\n    type: evaluate\n    needs: [train]\n"
    "    with: {model: '${steps.train.outputs.bundle}', dataset: '${steps.prep.outputs.dataset}'}\n"
    "  - name: register\n    type: register\n    needs: [evaluate]\n"
    "    with: {model_name: fmnist, bundle: '${steps.train.outputs.bundle}', metrics_from: "
    "evaluate}\n"
    "  - name: deploy\n    type: deploy\n    needs: [register]\n"
    "    when: ${steps.evaluate.metrics.accuracy} >= ${params.min_accuracy}\n"
    "    with: {model_name: fmnist, version: '${steps.register.outputs.version}', alias: "
    "production}\n";

static int have_ml(void)
{
	return access(TF_TEST_FMNIST, R_OK) == 0;
}

static void write_yaml(void)
{
	tf_test_write_file("e2e.yaml", yaml);
}

static void test_e2e_five_stages_registered_and_deployed(void **state)
{
	(void)state;
	if (!have_ml())
		skip();
	write_yaml();
	const char *bin = getenv("TPUFLOW_BIN");
	char *argv[] = {(char *)bin, "--home", "home", "run", "e2e.yaml", "--json", NULL};
	assert_int_equal(tf_test_wait_exit(tf_test_spawn(argv, "run1.json", NULL)), 0);
	json_t *sum = tf_test_load_json("run1.json");
	assert_non_null(sum);
	assert_string_equal(json_string_value(json_object_get(sum, "status")), "succeeded");
	const char *stages[] = {"prep", "train", "evaluate", "register", "deploy"};
	for (size_t i = 0; i < 5; i++) {
		json_t *s = json_object_get(tf_test_step_of(sum, stages[i]), "state");
		assert_string_equal(json_string_value(s), "succeeded");
	}
	json_t *ev = json_object_get(tf_test_step_of(sum, "evaluate"), "metrics");
	json_t *acc = json_object_get(ev, "accuracy");
	assert_true(json_is_number(acc) && json_number_value(acc) > 0.5);
	json_t *m = json_object_get(sum, "model");
	assert_int_equal(json_integer_value(json_object_get(m, "version")), 1);
	assert_true(json_number_value(json_object_get(sum, "slice_seconds")) > 0);
	json_decref(sum);

	struct tf_store *st = NULL;
	char err[256];
	int64_t v = 0;
	assert_int_equal(tf_store_open("home/tpuflow.db", 0, &st, err, sizeof(err)), 0);
	assert_int_equal(tf_registry_resolve(st, "fmnist", "production", &v), 0);
	assert_int_equal(v, 1);
	json_t *dep = NULL;
	assert_int_equal(tf_registry_deployment(st, "fmnist", "production", &dep), 0);
	assert_int_equal(json_integer_value(json_object_get(dep, "version")), 1);
	json_decref(dep);
	json_t *ver = NULL;
	assert_int_equal(tf_registry_version(st, "fmnist", 1, &ver), 0);
	assert_non_null(json_string_value(json_object_get(ver, "dataset"))); /* lineage */
	json_decref(ver);
	tf_store_close(st);
}

static int newest_manifest(const char *run, char *key, size_t len)
{
	struct tf_objstore *os = NULL;
	char err[256], prefix[128];
	if (tf_objstore_open("home2/objects", &os, err, sizeof(err)))
		return 0;
	struct tf_obj_list l = {0};
	snprintf(prefix, sizeof(prefix), "runs/%s/train/", run);
	int found = 0;
	if (tf_objstore_list(os, prefix, &l) == 0)
		for (size_t i = 0; i < l.n; i++)
			if (strstr(l.v[i].key, "manifest")) {
				snprintf(key, len, "%s", l.v[i].key);
				found++;
			}
	tf_obj_list_release(&l);
	tf_objstore_free(os);
	return found;
}

static void test_e2e_kill9_during_training_then_resume(void **state)
{
	(void)state;
	if (!have_ml())
		skip();
	write_yaml();
	const char *bin = getenv("TPUFLOW_BIN");
	char *argv[] = {(char *)bin, "--home",  "home2",         "run", "e2e.yaml",
	                "--json",    "--param", "max_steps=400", NULL};
	pid_t pid = tf_test_spawn(argv, "run.json", NULL);
	char run[32] = "", key[512] = "";
	/* Wait for the first checkpoint of the training step, then kill -9. */
	for (int i = 0; i < 3000; i++) {
		struct tf_store *st = NULL;
		char err[256];
		if (!run[0] && tf_store_open("home2/tpuflow.db", TF_STORE_READONLY, &st, err,
		                             sizeof(err)) == 0) {
			if (tf_run_find(st, "latest", run))
				run[0] = '\0';
			tf_store_close(st);
		}
		if (run[0] && newest_manifest(run, key, sizeof(key)) > 0)
			break;
		usleep(20000);
	}
	assert_true(key[0]);
	kill(pid, SIGKILL);
	assert_int_equal(tf_test_wait_exit(pid), 128 + SIGKILL);

	char *rargv[] = {(char *)bin, "--home", "home2", "runs", "resume", run, "--json", NULL};
	assert_int_equal(tf_test_wait_exit(tf_test_spawn(rargv, "resume.json", NULL)), 0);
	json_t *sum = tf_test_load_json("resume.json");
	assert_non_null(sum);
	assert_string_equal(json_string_value(json_object_get(sum, "status")), "succeeded");
	json_t *prep = tf_test_step_of(sum, "prep"), *train = tf_test_step_of(sum, "train");
	assert_int_equal(json_integer_value(json_object_get(prep, "attempts")), 1);
	assert_int_equal(json_integer_value(json_object_get(train, "attempts")), 2);
	json_decref(sum);

	struct tf_store *st = NULL;
	char err[256];
	assert_int_equal(tf_store_open("home2/tpuflow.db", 0, &st, err, sizeof(err)), 0);
	assert_int_equal(tf_store_integrity_check(st), 0);
	int64_t n = 0;
	assert_int_equal(tf_store_query_int(st, &n, "SELECT count(*) FROM model_versions", ""), 0);
	assert_int_equal(n, 1);
	/* the killed attempt is recorded as lost; the second attempt started from a checkpoint:
	 * its progress log names the step it resumed from */
	char *s1 = NULL;
	assert_int_equal(tf_store_query_text(st, &s1,
	                                     "SELECT state FROM attempts WHERE run_id=? AND "
	                                     "step='train' AND n=1",
	                                     "t", run),
	                 0);
	assert_string_equal(s1, "lost");
	free(s1);
	tf_store_close(st);
	char path[600], *log = NULL;
	size_t len;
	snprintf(path, sizeof(path), "home2/objects/runs/%s/train/logs/attempt-2.log", run);
	assert_int_equal(tf_read_file(path, 1 << 24, &log, &len), 0);
	assert_non_null(strstr(log, "resum"));
	free(log);
	/* the killed attempt's log was uploaded on resume, and shows its training progress */
	snprintf(path, sizeof(path), "home2/objects/runs/%s/train/logs/attempt-1.log", run);
	assert_int_equal(tf_read_file(path, 1 << 24, &log, &len), 0);
	assert_non_null(strstr(log, "\"event\":\"start\""));
	free(log);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_e2e_five_stages_registered_and_deployed),
	    cmocka_unit_test(test_e2e_kill9_during_training_then_resume),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

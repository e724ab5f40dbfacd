/* testutil.c — the helpers of testutil.h: spawning and waiting for child processes, loading
 * JSON files, finding a step in a run summary and writing a small model bundle. Linked into every
 * test binary, so it has no main and no tests of its own. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "common/common.h"
#include "ml/bundle.h"
#include "storage/objstore.h"
#include "tests/testutil.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void redirect(const char *path, int to)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
	if (fd >= 0) {
		dup2(fd, to);
		close(fd);
	}
}

pid_t tf_test_spawn(char *const argv[], const char *out, const char *err)
{
	pid_t pid = fork();
	if (pid == 0) {
		redirect(out, 1);
		if (err)
			redirect(err, 2);
		execv(argv[0], argv);
		_exit(127);
	}
	return pid;
}

int tf_test_wait_exit(pid_t pid)
{
	int status = 0;
	waitpid(pid, &status, 0);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

const char *tf_test_tmp(void)
{
	static char *dir;
	if (dir)
		return dir;
	const char *t = getenv("TF_TEST_TMP");
	if (t && *t)
		return dir = tf_xstrdup(t);
	t = getenv("TMPDIR");
	dir = tf_xasprintf("%s/tpuflow-test.XXXXXX", t && *t ? t : "/tmp");
	assert_non_null(mkdtemp(dir));
	return dir;
}

/* A test binary run by hand (no TF_TEST_TMP: tests/run.sh gives one and runs the binary in it)
 * works in its own new directory, as under run.sh, instead of leaving relative files in
 * whatever directory it was started from. TPUFLOW_BIN is made absolute first. */
__attribute__((constructor)) static void work_in_test_tmp(void)
{
	const char *t = getenv("TF_TEST_TMP");
	if (t && *t)
		return;
	const char *bin = getenv("TPUFLOW_BIN");
	char *abs = bin && *bin ? realpath(bin, NULL) : NULL;
	if (abs) {
		setenv("TPUFLOW_BIN", abs, 1);
		free(abs);
	}
	if (chdir(tf_test_tmp()) != 0) {
		perror(tf_test_tmp());
		exit(1);
	}
}

int tf_test_cli(const char *const args[], char **out, char **err)
{
	char *argv[16] = {getenv("TPUFLOW_BIN"), "--home", "home"};
	size_t n = 3;
	for (; args[n - 3] && n < 15; n++)
		argv[n] = (char *)args[n - 3];
	argv[n] = NULL;
	assert_non_null(argv[0]);
	unlink("out.txt");
	unlink("err.txt");
	int rc = tf_test_wait_exit(tf_test_spawn(argv, "out.txt", "err.txt"));
	size_t len;
	if (out)
		assert_int_equal(tf_read_file("out.txt", 1 << 20, out, &len), 0);
	if (err)
		assert_int_equal(tf_read_file("err.txt", 1 << 20, err, &len), 0);
	return rc;
}

void tf_test_write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

json_t *tf_test_load_json(const char *path)
{
	json_error_t je;
	json_t *j = json_load_file(path, 0, &je);
	if (!j)
		fprintf(stderr, "%s: %s\n", path, je.text);
	return j;
}

json_t *tf_test_step_of(json_t *summary, const char *name)
{
	size_t i;
	json_t *s;
	json_array_foreach(json_object_get(summary, "steps"), i, s)
	{
		if (!strcmp(json_string_value(json_object_get(s, "name")), name))
			return s;
	}
	fail_msg("no step %s in summary", name);
	return NULL;
}

int tf_test_write_bundle(const char *url, const char *prefix)
{
	struct tf_objstore *os = NULL;
	char err[512];
	int rc = tf_objstore_open(url, &os, err, sizeof(err));
	if (rc)
		return rc;
	struct tf_mlp m;
	size_t hidden[] = {3};
	rc = tf_mlp_init(&m, 4, hidden, 1, 2, 0);
	if (rc == 0) {
		tf_mlp_init_params(&m, 7);
		float mean[4] = {0, 0, 0, 0}, inv_std[4] = {1, 1, 1, 1};
		char *names[2] = {"no", "yes"};
		struct tf_dataset d = {.source = "csv", .dim = 4, .num_classes = 2,
		                       .class_names = names,
		                       .pre = {.image = 0, .dim = 4, .mean = mean, .inv_std = inv_std}};
		struct tf_mxu_cfg mxu;
		tf_mxu_cfg_init(&mxu);
		rc = tf_bundle_export(os, prefix, &m, &d, &mxu, NULL, err, sizeof(err));
		if (rc)
			fprintf(stderr, "tf_test_write_bundle: %s\n", err);
		tf_mlp_release(&m);
	}
	tf_objstore_free(os);
	return rc;
}

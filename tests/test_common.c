/* test_common.c — the shared helpers: whole-file reads with a size cap, mkdir -p. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "common/buf.h"
#include "common/common.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static void test_common_read_file_caps_size(void **state)
{
	(void)state;
	FILE *f = fopen("big.txt", "w");
	assert_non_null(f);
	for (int i = 0; i < 100000; i++)
		fputc('x', f);
	fclose(f);
	char *buf = NULL;
	size_t len = 0;
	assert_int_equal(tf_read_file("big.txt", 1000, &buf, &len), -EFBIG);
	assert_null(buf);
	assert_int_equal(tf_read_file("big.txt", 200000, &buf, &len), 0);
	assert_int_equal(len, 100000);
	assert_int_equal(buf[len], '\0');
	free(buf);
	assert_int_equal(tf_read_file("missing.txt", 10, &buf, &len), -ENOENT);
}

static void test_common_mkdir_p_creates_parents(void **state)
{
	(void)state;
	struct stat st;
	assert_int_equal(tf_mkdir_p("a/b/c"), 0);
	assert_int_equal(stat("a/b/c", &st), 0);
	assert_true(S_ISDIR(st.st_mode));
	assert_int_equal(tf_mkdir_p("a/b/c"), 0); /* idempotent */
	assert_int_equal(tf_mkdir_p("a//b/d/e/"), 0); /* doubled and trailing slashes */
	assert_int_equal(stat("a/b/d/e", &st), 0);
	assert_true(S_ISDIR(st.st_mode));
	FILE *f = fopen("a/file", "w");
	assert_non_null(f);
	fclose(f);
	assert_int_equal(tf_mkdir_p("a/file/x/y"), -ENOTDIR); /* a file in the way */
	char *cwd = getcwd(NULL, 0);
	assert_non_null(cwd);
	char *abs = tf_xasprintf("%s/a/b/c/d", cwd);
	assert_int_equal(tf_mkdir_p(abs), 0);
	assert_int_equal(stat("a/b/c/d", &st), 0);
	free(abs);
	free(cwd);
}

static void test_common_asprintf(void **state)
{
	(void)state;
	char *s = tf_xasprintf("%s-%d", "v4", 8);
	assert_string_equal(s, "v4-8");
	free(s);
}

/* tf_buf: text of any length without fixed widths; err/errlen get a truncated copy. */
static void test_common_buf_grows_and_copies(void **state)
{
	(void)state;
	struct tf_buf b = {0};
	assert_string_equal(tf_buf_str(&b), "");
	char big[5000];
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	tf_buf_printf(&b, "cannot read '%s': %s", big, "No such file");
	assert_int_equal(b.len, strlen(big) + strlen("cannot read '': No such file"));
	assert_int_equal(strlen(tf_buf_str(&b)), b.len);
	assert_string_equal(tf_buf_str(&b) + b.len - 15, "': No such file");
	char err[16];
	tf_buf_copy_to(&b, err, sizeof(err));
	assert_string_equal(err, "cannot read 'xx");
	tf_buf_append(&b, "!", 1);
	char *s = tf_buf_detach(&b);
	assert_int_equal(s[strlen(s) - 1], '!');
	assert_null(b.data);
	free(s);
	tf_buf_release(&b);
	tf_buf_release(NULL);
}

static void test_common_pid_alive_treats_zombies_as_gone(void **state)
{
	(void)state;
	assert_true(tf_pid_alive((long)getpid()));
	assert_false(tf_pid_alive(0));
	pid_t child = fork();
	assert_true(child >= 0);
	if (child == 0) {
		pause();
		_exit(0);
	}
	assert_true(tf_pid_alive((long)child));
	kill(child, SIGKILL);
	/* killed but not reaped yet: a zombie, which counts as gone */
	for (int i = 0; i < 500 && tf_pid_alive((long)child); i++)
		usleep(2000);
	assert_false(tf_pid_alive((long)child));
	assert_int_equal(waitpid(child, NULL, 0), child);
	assert_false(tf_pid_alive((long)child));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_common_read_file_caps_size),
	    cmocka_unit_test(test_common_mkdir_p_creates_parents),
	    cmocka_unit_test(test_common_asprintf),
	    cmocka_unit_test(test_common_buf_grows_and_copies),
	    cmocka_unit_test(test_common_pid_alive_treats_zombies_as_gone),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

/* test_cli_store.c — `tpuflow store` for people: help names every verb, `store ls` with no
 * LOCATION lists the state home's store, and a symbolic link planted in a file:// store is
 * refused with exit 65 (what it would reach outside stays untouched). Runs $TPUFLOW_BIN in
 * the test's temp directory. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "common/common.h"
#include "tests/testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void test_cli_store_help_and_ls_without_location(void **state)
{
	(void)state;
	char *out, *err;
	const char *help[] = {"help", NULL};
	assert_int_equal(tf_test_cli(help, &out, &err), 0);
	const char *line = strstr(out, "store ");
	assert_non_null(line);
	assert_non_null(strstr(line, "get"));
	assert_non_null(strstr(line, "mb"));
	free(out);
	free(err);

	FILE *f = fopen("hello.txt", "w");
	fputs("hello\n", f);
	fclose(f);
	const char *put[] = {"store", "put", "docs/hello.txt", "hello.txt", NULL};
	assert_int_equal(tf_test_cli(put, &out, &err), 0);
	free(out);
	free(err);
	const char *ls[] = {"store", "ls", NULL};
	assert_int_equal(tf_test_cli(ls, &out, &err), 0);
	assert_non_null(strstr(out, "docs/hello.txt"));
	free(out);
	free(err);
}

static void test_cli_store_refuses_planted_symlinks(void **state)
{
	(void)state;
	char *out, *err;
	FILE *f = fopen("secret.txt", "w");
	fputs("secret\n", f);
	fclose(f);
	const char *put[] = {"store", "put", "x/y", "secret.txt", NULL};
	assert_int_equal(tf_test_cli(put, &out, &err), 0);
	free(out);
	free(err);
	char *cwd = getcwd(NULL, 0);
	char *target = tf_xasprintf("%s/secret.txt", cwd);
	assert_int_equal(symlink(target, "home/objects/x/leak"), 0);
	assert_int_equal(symlink(cwd, "home/objects/up"), 0);
	free(target);
	free(cwd);
	f = fopen("evil.txt", "w");
	fputs("evil\n", f);
	fclose(f);
	static const char *const cases[][5] = {
	    {"store", "cat", "x/leak", NULL},
	    {"store", "cat", "up/secret.txt", NULL},
	    {"store", "rm", "up/secret.txt", NULL},
	    {"store", "rm", "x/leak", NULL},
	    {"store", "put", "up/secret.txt", "evil.txt"},
	    {"store", "ls", "up/", NULL},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		assert_int_equal(tf_test_cli(cases[i], &out, &err), 65);
		assert_non_null(strstr(err, "symbolic link"));
		assert_null(strstr(out, "secret"));
		free(out);
		free(err);
	}
	char *text;
	size_t len;
	assert_int_equal(tf_read_file("secret.txt", 1 << 10, &text, &len), 0);
	assert_string_equal(text, "secret\n");
	free(text);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_cli_store_help_and_ls_without_location),
	    cmocka_unit_test(test_cli_store_refuses_planted_symlinks),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

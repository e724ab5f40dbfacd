/* test_cli.c — the tpuflow binary's shared option handling: numeric option values are whole
 * numbers in range or a usage error (exit 64) naming the flag and the value. Runs
 * $TPUFLOW_BIN in the test's temp directory. */
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

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_cli_numeric_options_refuse_junk_and_overflow),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

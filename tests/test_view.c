/* test_view.c — the live view: lines drawn in place fit the terminal, so moving the cursor up
 * by the number of lines drawn lands on the first row again (a wrapped line once left stale
 * copies of the rows above it on the screen). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "orchestrator/view.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Visible columns of a line: ANSI escape sequences take none. */
static size_t visible_len(const char *s, size_t n)
{
	size_t cols = 0;
	for (size_t i = 0; i < n; i++) {
		if (s[i] == '\033') {
			while (i < n &&
			       !((s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= 'a' && s[i] <= 'z')))
				i++;
			continue;
		}
		cols++;
	}
	return cols;
}

static void test_view_tty_lines_fit_the_terminal(void **state)
{
	(void)state;
	FILE *f = tmpfile(); /* not a terminal: the view assumes 80 columns */
	assert_non_null(f);
	struct tf_view *v = tf_view_new(f, 1, "20261130-000000-abcdef", "p");
	char progress[] = "{\"event\":\"step\",\"fraction\":0.5,\"step\":850,\"epoch\":3.25,"
	                  "\"loss\":0.3337,\"accuracy\":0.8762,\"examples_per_second\":34160.5,"
	                  "\"eta_seconds\":16.17,\"lr\":0.09369}";
	struct tf_view_row rows[] = {
	    {"prep", "data_prep", "succeeded", 1, 0.4, NULL, NULL},
	    {"train-with-a-rather-long-name", "train", "running", 1, 2.0, progress, NULL},
	    {"deploy", "deploy", "pending", 0, -1, NULL, NULL},
	};
	for (int i = 0; i < 3; i++)
		tf_view_update(v, rows, 3);
	tf_view_free(v);
	fflush(f);
	long size = ftell(f);
	assert_true(size > 0);
	char *buf = malloc((size_t)size + 1);
	rewind(f);
	assert_int_equal(fread(buf, 1, (size_t)size, f), (size_t)size);
	buf[size] = '\0';
	fclose(f);
	size_t lines = 0;
	for (char *p = buf, *nl; (nl = strchr(p, '\n')); p = nl + 1, lines++)
		assert_true(visible_len(p, (size_t)(nl - p)) < 80);
	assert_true(lines >= 12); /* three frames of 3 rows + a count line */
	free(buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_view_tty_lines_fit_the_terminal),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

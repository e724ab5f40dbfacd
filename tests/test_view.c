/* test_view.c — the live view: lines drawn in place fit the terminal, so moving the cursor up
 * by the number of lines drawn lands on the first row again (a wrapped line once left stale
 * copies of the rows above it on the screen); a header; names that stay told apart; percent
 * and ETA kept on narrow terminals; epoch events as a bar, not a key=value dump; human units;
 * a DAG taller than the terminal ends with "… N more"; no stale waiting notes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "orchestrator/view.h"

#include <errno.h>
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
		if (((unsigned char)s[i] & 0xc0) != 0x80) /* UTF-8: count characters, not bytes */
			cols++;
	}
	return cols;
}

/* Draws `frames` frames of rows on a fake terminal of cols x lines (not a TTY: the view reads
 * $COLUMNS and $LINES) and returns everything written (caller frees). */
static char *draw(struct tf_view_row *rows, size_t n, int cols, int lines, int tty, int frames)
{
	char c[16], l[16];
	snprintf(c, sizeof(c), "%d", cols);
	snprintf(l, sizeof(l), "%d", lines);
	setenv("COLUMNS", c, 1);
	setenv("LINES", l, 1);
	FILE *f = tmpfile();
	assert_non_null(f);
	struct tf_view *v = tf_view_new(f, tty, "20261130-000000-abcdef", "p");
	for (int i = 0; i < frames; i++)
		tf_view_update(v, rows, n);
	tf_view_free(v);
	long size = ftell(f);
	char *buf = malloc((size_t)size + 1);
	rewind(f);
	assert_int_equal(fread(buf, 1, (size_t)size, f), (size_t)size);
	buf[size] = '\0';
	fclose(f);
	/* every line fits */
	for (char *p = buf, *nl; (nl = strchr(p, '\n')); p = nl + 1)
		if (visible_len(p, (size_t)(nl - p)) >= (size_t)cols)
			fail_msg("a line is %zu columns wide on a %d-column terminal: %.*s",
			         visible_len(p, (size_t)(nl - p)), cols, (int)(nl - p), p);
	unsetenv("COLUMNS");
	unsetenv("LINES");
	return buf;
}

static const char step_line[] =
    "{\"event\":\"step\",\"fraction\":0.5,\"step\":850,\"epoch\":3.25,\"epochs\":15,"
    "\"loss\":0.3337,\"accuracy\":0.8762,\"examples_per_second\":28720.5,"
    "\"eta_seconds\":17.35,\"lr\":0.09369}";

/* A header names the columns; units read as people write them. */
static void test_view_header_and_human_units(void **state)
{
	(void)state;
	char progress[sizeof(step_line)];
	memcpy(progress, step_line, sizeof(step_line));
	struct tf_view_row rows[] = {{"train", "train", "running", 1, 2.0, progress, NULL}};
	char *out = draw(rows, 1, 140, 24, 1, 1);
	assert_non_null(strstr(out, "STEP"));
	assert_non_null(strstr(out, "STATE"));
	assert_non_null(strstr(out, "PROGRESS"));
	assert_non_null(strstr(out, "ETA 17 s"));
	assert_non_null(strstr(out, "28.7k ex/s"));
	assert_non_null(strstr(out, "acc 87.6%"));
	assert_null(strstr(out, "examples_per_second"));
	assert_null(strstr(out, "eta_seconds"));
	free(out);
}

/* Forty names with one long shared prefix stay told apart (they were cut to 18 characters). */
static void test_view_similar_names_stay_distinct(void **state)
{
	(void)state;
	struct tf_view_row rows[40];
	char names[40][64];
	for (int i = 0; i < 40; i++) {
		snprintf(names[i], sizeof(names[i]), "evaluate-candidate-model-on-holdout-%02d", i);
		rows[i] = (struct tf_view_row){names[i], "shell", "running", 1, 1.0, NULL, NULL};
	}
	char *out = draw(rows, 40, 80, 60, 1, 1);
	int seen = 0;
	for (int i = 0; i < 40; i++) {
		char tail[16];
		snprintf(tail, sizeof(tail), "-%02d ", i);
		if (strstr(out, tail))
			seen++;
	}
	/* 30 rows at most on screen, all of them distinguishable */
	assert_true(seen >= 25);
	free(out);
}

/* At 60 columns the bar shrinks or goes, percent and ETA stay. */
static void test_view_narrow_keeps_percent_and_eta(void **state)
{
	(void)state;
	char progress[sizeof(step_line)];
	memcpy(progress, step_line, sizeof(step_line));
	struct tf_view_row rows[] = {{"train", "train", "running", 1, 2.0, progress, NULL}};
	char *out = draw(rows, 1, 60, 24, 1, 1);
	assert_non_null(strstr(out, "50%"));
	assert_non_null(strstr(out, "ETA 17 s"));
	free(out);
}

/* An epoch event keeps the bar (from epoch/epochs) and names the event. */
static void test_view_epoch_event_keeps_the_bar(void **state)
{
	(void)state;
	char progress[] = "{\"event\":\"epoch\",\"step\":850,\"epoch\":3,\"epochs\":12,"
	                  "\"train_loss\":0.41,\"train_accuracy\":0.85,\"loss\":0.44,"
	                  "\"accuracy\":0.84,\"auc\":0.97,\"examples_per_second\":30100,"
	                  "\"device_seconds\":1.5,\"utilization\":0.61,\"input_wait\":0.01,"
	                  "\"eta_seconds\":125}";
	struct tf_view_row rows[] = {{"train", "train", "running", 1, 20.0, progress, NULL}};
	char *out = draw(rows, 1, 100, 24, 1, 1);
	assert_non_null(strstr(out, "[#####"));
	assert_non_null(strstr(out, " 25%"));
	assert_non_null(strstr(out, "ETA 2m05s"));
	assert_non_null(strstr(out, "epoch"));
	assert_null(strstr(out, "train_loss="));
	assert_null(strstr(out, "="));
	free(out);
}

/* A DAG taller than the terminal: the frame fits, and says how many rows are not shown. */
static void test_view_tall_dag_says_how_many_more(void **state)
{
	(void)state;
	struct tf_view_row rows[60];
	char names[60][32];
	for (int i = 0; i < 60; i++) {
		snprintf(names[i], sizeof(names[i]), "s%02d", i);
		rows[i] = (struct tf_view_row){
		    names[i], "shell", i < 40 ? "running" : "pending", 1, 1.0, NULL, NULL};
	}
	char *out = draw(rows, 60, 80, 24, 1, 1);
	size_t lines = 0;
	for (char *p = out; (p = strchr(p, '\n')); p++)
		lines++;
	assert_true(lines <= 24); /* the run line and one frame */
	assert_non_null(strstr(out, "\xe2\x80\xa6 40 more"));
	free(out);
}

/* A waiting note does not outlive the wait. */
static void test_view_no_stale_waiting_note(void **state)
{
	(void)state;
	struct tf_view_row rows[] = {
	    {"train", "train", "succeeded", 1, 3.0, NULL, "waiting for a v4-8 slice"},
	    {"eval", "evaluate", "running", 1, 0.5, NULL, "waiting for a worker"},
	    {"next", "train", "queued", 0, -1, NULL, "waiting for a v4-8 slice: busy"},
	};
	for (int tty = 0; tty < 2; tty++) {
		char *out = draw(rows, 3, 100, 24, tty, 1);
		assert_null(strstr(out, "waiting for a worker"));
		char *first = strstr(out, "waiting for a v4-8 slice");
		assert_non_null(first); /* the queued step's */
		assert_non_null(strstr(first, "busy"));
		assert_null(strstr(first + 1, "waiting for a v4-8 slice"));
		free(out);
	}
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

/* Plain mode shown only the rows that changed: each change is one line, rows not passed keep
 * what was printed (nothing repeated), and a TTY view refuses (its table needs every row). */
static void test_view_plain_rows_that_changed(void **state)
{
	(void)state;
	FILE *f = tmpfile();
	assert_non_null(f);
	struct tf_view *v = tf_view_new(f, 0, "20261130-000000-abcdef", "p");
	struct tf_view_row all[3] = {{"a", "shell", "pending", 0, -1, NULL, NULL},
	                             {"b", "shell", "pending", 0, -1, NULL, NULL},
	                             {"c", "shell", "pending", 0, -1, NULL, NULL}};
	tf_view_update(v, all, 3); /* nothing has moved yet: no line */
	struct tf_view_row one = {"c", "shell", "running", 1, 0.5, NULL, NULL};
	size_t at = 2;
	assert_int_equal(tf_view_update_rows(v, &one, &at, 1, 3), 0);
	assert_int_equal(tf_view_update_rows(v, &one, &at, 1, 3), 0); /* unchanged: no line */
	one.state = "succeeded";
	assert_int_equal(tf_view_update_rows(v, &one, &at, 1, 3), 0);
	all[2] = one;
	tf_view_update(v, all, 3); /* every row again: nothing new to say */
	tf_view_free(v);
	long size = ftell(f);
	char *buf = calloc(1, (size_t)size + 1);
	rewind(f);
	assert_int_equal(fread(buf, 1, (size_t)size, f), (size_t)size);
	fclose(f);
	int lines = 0;
	for (char *p = buf; (p = strchr(p, '\n')); p++)
		lines++;
	assert_int_equal(lines, 3); /* the header, c running, c succeeded */
	assert_non_null(strstr(buf, "c                  running   attempt 1"));
	assert_non_null(strstr(buf, "c                  succeeded"));
	assert_null(strstr(buf, " a "));
	free(buf);

	FILE *t = tmpfile();
	struct tf_view *tv = tf_view_new(t, 1, "20261130-000000-abcdef", "p");
	assert_int_equal(tf_view_update_rows(tv, &one, &at, 1, 3), -EINVAL);
	tf_view_free(tv);
	fclose(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_view_tty_lines_fit_the_terminal),
	    cmocka_unit_test(test_view_header_and_human_units),
	    cmocka_unit_test(test_view_similar_names_stay_distinct),
	    cmocka_unit_test(test_view_narrow_keeps_percent_and_eta),
	    cmocka_unit_test(test_view_epoch_event_keeps_the_bar),
	    cmocka_unit_test(test_view_tall_dag_says_how_many_more),
	    cmocka_unit_test(test_view_no_stale_waiting_note),
	    cmocka_unit_test(test_view_plain_rows_that_changed),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

/* test_schedules.c — registered pipelines and their schedules: missed ticks after downtime
 * fire by the catch-up policy (none, latest, all with a cap, starting_deadline), exactly once
 * (calling again, or from two handles at once, fires nothing more), `forbid` skips while a run
 * is active and `allow` does not, the registered text is what fires, and a bad registration
 * reports the cron text's column; a paused schedule handles no tick. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "common/common.h"
#include "orchestrator/schedules.h"
#include "orchestrator/state.h"
#include "orchestrator/store.h"
#include "tests/testutil.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define T0 1767225600.0 /* 2026-01-01 00:00 UTC */

static struct tf_store *home(const char *dir)
{
	struct tf_store *st = NULL;
	char err[256];
	mkdir(dir, 0755);
	assert_int_equal(tf_store_open_home(dir, &st, err, sizeof(err)), 0);
	return st;
}

/* Registers a pipeline `name` with the schedule map `sched` at time T0. */
static void add(struct tf_store *st, const char *name, const char *sched)
{
	char path[128];
	snprintf(path, sizeof(path), "%s.yaml", name);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fprintf(
	    f, "name: %s\nschedule: %s\nsteps:\n  - {name: a, type: shell, with: {argv: [true]}}\n",
	    name, sched);
	fclose(f);
	struct tf_diag_list d = {0};
	char *got = NULL;
	int rc = tf_pipelines_add(st, path, T0, &got, &d);
	if (rc)
		tf_diag_print(&d, stderr);
	assert_int_equal(rc, 0);
	assert_string_equal(got, name);
	free(got);
	tf_diag_list_release(&d);
}

static int64_t count(struct tf_store *st, const char *sql, const char *arg)
{
	int64_t n = -1;
	assert_int_equal(tf_store_query_int(st, &n, sql, "t", arg), 0);
	return n;
}

static int64_t fired(struct tf_store *st, const char *name)
{
	return count(st, "SELECT count(*) FROM schedule_fires WHERE pipeline=? AND outcome='fired'",
	             name);
}

static int64_t missed(struct tf_store *st, const char *name)
{
	return count(
	    st, "SELECT count(*) FROM schedule_fires WHERE pipeline=? AND outcome='missed'", name);
}

static int64_t runs_of(struct tf_store *st, const char *name)
{
	return count(st, "SELECT count(*) FROM runs WHERE pipeline=?", name);
}

/* Finishes the pipeline's pending runs (as if they ran), so `forbid` lets the next through. */
static void finish_runs(struct tf_store *st, const char *name)
{
	assert_int_equal(
	    tf_store_run(st, "UPDATE runs SET state='succeeded' WHERE pipeline=?", "t", name), 0);
}

static void test_schedules_catchup_policies(void **state)
{
	(void)state;
	struct tf_store *st = home("h1");
	add(st, "latest", "{cron: '*/10 * * * *', catchup: latest}");
	add(st, "all", "{cron: '*/10 * * * *', catchup: all, catchup_max: 2, concurrency: allow}");
	add(st, "none", "{cron: '*/10 * * * *', catchup: none}");
	add(st, "late",
	    "{cron: '*/10 * * * *', catchup: all, starting_deadline: 25m, "
	    "concurrency: allow}");
	/* down for an hour: six ticks (00:10 .. 01:00) are due at 01:00:30 */
	json_t *rep = NULL;
	assert_int_equal(tf_schedules_fire_due(st, T0 + 3630, NULL, &rep), 0);
	assert_int_equal(fired(st, "latest"), 1);
	assert_int_equal(missed(st, "latest"), 5);
	assert_int_equal(fired(st, "all"), 2);
	assert_int_equal(missed(st, "all"), 4);
	assert_int_equal(fired(st, "none"), 1); /* 01:00 is 30 s old: on time */
	assert_int_equal(missed(st, "none"), 5);
	assert_int_equal(fired(st, "late"), 3); /* 00:40, 00:50, 01:00 within 25 minutes */
	assert_int_equal(missed(st, "late"), 3);
	assert_int_equal(runs_of(st, "all"), 2);
	/* each run was created saying what submitted it, with the home's object store */
	assert_int_equal(count(st,
	                       "SELECT count(*) FROM runs WHERE pipeline=? AND trigger='schedule' "
	                       "AND storage LIKE 'file:///%/h1/objects'",
	                       "all"),
	                 2);
	assert_int_equal(json_array_size(rep), 24);
	json_decref(rep);
	/* the newest tick of `latest` is the one that ran */
	int64_t tick = 0;
	assert_int_equal(tf_store_query_int(st, &tick,
	                                    "SELECT tick FROM schedule_fires WHERE "
	                                    "pipeline='latest' AND outcome='fired'",
	                                    ""),
	                 0);
	assert_int_equal(tick, (int64_t)T0 + 3600);
	/* again at the same time: nothing more; the fire keys are unique */
	assert_int_equal(tf_schedules_fire_due(st, T0 + 3630, NULL, &rep), 0);
	assert_int_equal(json_array_size(rep), 0);
	json_decref(rep);
	assert_int_equal(fired(st, "all"), 2);
	/* `none` after a short gap: the tick two minutes late is missed */
	finish_runs(st, "none");
	assert_int_equal(tf_schedules_fire_due(st, T0 + 4200 + 120, NULL, NULL), 0);
	assert_int_equal(fired(st, "none"), 1);
	assert_int_equal(missed(st, "none"), 6);
	tf_store_close(st);
}

static void test_schedules_concurrency(void **state)
{
	(void)state;
	struct tf_store *st = home("h2");
	add(st, "forbid", "{cron: '@hourly', concurrency: forbid}");
	add(st, "allow", "{cron: '@hourly', concurrency: allow}");
	assert_int_equal(tf_schedules_fire_due(st, T0 + 3600, NULL, NULL), 0);
	assert_int_equal(runs_of(st, "forbid"), 1);
	assert_int_equal(runs_of(st, "allow"), 1);
	/* the first runs are still pending at the next tick */
	json_t *rep = NULL;
	assert_int_equal(tf_schedules_fire_due(st, T0 + 7200, NULL, &rep), 0);
	assert_int_equal(runs_of(st, "forbid"), 1);
	assert_int_equal(runs_of(st, "allow"), 2);
	json_t *f = json_array_get(rep, 1); /* sorted by name: allow, forbid */
	assert_string_equal(json_string_value(json_object_get(f, "pipeline")), "forbid");
	assert_string_equal(json_string_value(json_object_get(f, "outcome")), "skipped");
	assert_non_null(strstr(json_string_value(json_object_get(f, "reason")), "still active"));
	json_decref(rep);
	/* once it is over, the next tick runs */
	finish_runs(st, "forbid");
	assert_int_equal(tf_schedules_fire_due(st, T0 + 10800, NULL, NULL), 0);
	assert_int_equal(runs_of(st, "forbid"), 2);
	/* the run holds the registered text */
	char *src = NULL;
	assert_int_equal(tf_store_query_text(st, &src,
	                                     "SELECT p.source FROM runs r JOIN pipelines p ON "
	                                     "p.id = r.pipeline_id WHERE r.pipeline='forbid' "
	                                     "LIMIT 1",
	                                     ""),
	                 0);
	assert_non_null(strstr(src, "concurrency: forbid"));
	free(src);
	/* unregistered: nothing fires any more */
	assert_int_equal(tf_pipelines_remove(st, "allow"), 0);
	assert_int_equal(tf_pipelines_remove(st, "allow"), -ENOENT);
	assert_int_equal(tf_schedules_fire_due(st, T0 + 14400, NULL, NULL), 0);
	assert_int_equal(runs_of(st, "allow"), 3);
	tf_store_close(st);
}

/* Two handles fire the same due ticks at once: each tick fires once. */
static void *fire_thread(void *arg)
{
	int *rc = arg;
	struct tf_store *st = NULL;
	char err[256];
	*rc = tf_store_open_home("h3", &st, err, sizeof(err));
	for (int i = 0; i < 5 && *rc == 0; i++)
		*rc = tf_schedules_fire_due(st, T0 + 86400, NULL, NULL);
	tf_store_close(st);
	return NULL;
}

static void test_schedules_fire_exactly_once_from_two_handles(void **state)
{
	(void)state;
	struct tf_store *st = home("h3");
	add(st, "twice",
	    "{cron: '*/30 * * * *', catchup: all, catchup_max: 1000, concurrency: allow}");
	int rc1 = -1, rc2 = -1;
	pthread_t a, b;
	assert_int_equal(pthread_create(&a, NULL, fire_thread, &rc1), 0);
	assert_int_equal(pthread_create(&b, NULL, fire_thread, &rc2), 0);
	pthread_join(a, NULL);
	pthread_join(b, NULL);
	assert_int_equal(rc1, 0);
	assert_int_equal(rc2, 0);
	assert_int_equal(fired(st, "twice"), 48);
	assert_int_equal(runs_of(st, "twice"), 48);
	tf_store_close(st);
}

static void test_schedules_bad_registration(void **state)
{
	(void)state;
	struct tf_store *st = home("h4");
	tf_test_write_file("bad.yaml", "name: bad\nschedule: {cron: '0 0 * foo *'}\nsteps:\n"
	                               "  - {name: a, type: shell, with: {argv: [true]}}\n");
	struct tf_diag_list d = {0};
	assert_int_equal(tf_pipelines_add(st, "bad.yaml", T0, NULL, &d), -EINVAL);
	assert_true(d.n >= 1);
	assert_int_equal(d.items[0].line, 2);
	assert_int_equal(d.items[0].col, 25);
	assert_non_null(strstr(d.items[0].message, "month: 'foo'"));
	tf_diag_list_release(&d);
	json_t *list = NULL;
	assert_int_equal(tf_pipelines_list(st, T0, 1, &list), 0);
	assert_int_equal(json_array_size(list), 0);
	json_decref(list);
	tf_store_close(st);
}

/* A paused schedule handles no tick (nothing fired, missed or alerted); resuming goes on from
 * the first tick after the resume, saying how many ticks of the pause were passed over; adding
 * the pipeline again keeps it paused; a pipeline without a schedule cannot be paused. */
static void test_schedules_pause_resume(void **state)
{
	(void)state;
	struct tf_store *st = home("h5");
	add(st, "p", "{cron: '*/10 * * * *', catchup: all, concurrency: allow}");
	assert_int_equal(tf_schedules_pause(st, "p", 1, T0 + 5, NULL), 0);
	assert_int_equal(tf_schedules_pause(st, "p", 1, T0 + 6, NULL), 0); /* again: no change */
	add(st, "p", "{cron: '*/10 * * * *', catchup: all, concurrency: allow}");
	json_t *rep = NULL, *list = NULL;
	assert_int_equal(tf_schedules_fire_due(st, T0 + 3630, NULL, &rep), 0);
	assert_int_equal(json_array_size(rep), 0);
	json_decref(rep);
	assert_int_equal(fired(st, "p") + missed(st, "p"), 0);
	assert_int_equal(tf_pipelines_list(st, T0 + 3630, 3, &list), 0);
	json_t *sc = json_object_get(json_array_get(list, 0), "schedule");
	assert_true(json_is_true(json_object_get(sc, "paused")));
	assert_int_equal(json_array_size(json_object_get(sc, "next")), 0);
	json_t *one = NULL; /* the same entry, read alone */
	assert_int_equal(tf_pipelines_get(st, "p", T0 + 3630, 3, &one), 0);
	assert_true(json_equal(one, json_array_get(list, 0)));
	json_decref(one);
	assert_int_equal(tf_pipelines_get(st, "q", T0 + 3630, 3, &one), -ENOENT);
	json_decref(list);
	/* resumed at 01:00:30: ticks 00:10 .. 01:00 (six) are passed over, 01:10 is next */
	int passed = -1;
	assert_int_equal(tf_schedules_pause(st, "p", 0, T0 + 3630, &passed), 0);
	assert_int_equal(passed, 6);
	assert_int_equal(tf_schedules_fire_due(st, T0 + 3630, NULL, NULL), 0);
	assert_int_equal(fired(st, "p") + missed(st, "p"), 0);
	assert_int_equal(tf_schedules_fire_due(st, T0 + 4200 + 5, NULL, NULL), 0);
	assert_int_equal(fired(st, "p"), 1);
	assert_int_equal(missed(st, "p"), 0);
	assert_int_equal(tf_schedules_pause(st, "p", 0, T0 + 4300, &passed), 0); /* not paused */
	assert_int_equal(passed, 0);
	assert_int_equal(tf_schedules_pause(st, "nosuch", 1, T0, NULL), -ENOENT);
	FILE *f = fopen("plain.yaml", "w");
	fprintf(f, "name: plain\nsteps:\n  - {name: a, type: shell, with: {argv: [true]}}\n");
	fclose(f);
	struct tf_diag_list d = {0};
	assert_int_equal(tf_pipelines_add(st, "plain.yaml", T0, NULL, &d), 0);
	assert_int_equal(tf_schedules_pause(st, "plain", 1, T0, NULL), -EINVAL);
	tf_store_close(st);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_schedules_catchup_policies),
	    cmocka_unit_test(test_schedules_concurrency),
	    cmocka_unit_test(test_schedules_fire_exactly_once_from_two_handles),
	    cmocka_unit_test(test_schedules_bad_registration),
	    cmocka_unit_test(test_schedules_pause_resume),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

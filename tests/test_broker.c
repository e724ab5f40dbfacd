/* test_broker.c — the slice broker over the database: two requests on a pool that fits one
 * never hold the same chip (asserted from the slice_jobs rows, also with two store handles
 * deciding from two threads at once), a more urgent request reclaims a running one (once) and
 * gets its box when it is released, a failed chip reclaims the grant on it as infra and the
 * request is placed again on healthy chips (the view draws the chip as failed), and a slice no
 * pool can hold is refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "common/common.h"
#include "orchestrator/broker.h"
#include "orchestrator/slices.h"
#include "orchestrator/state.h"
#include "orchestrator/store.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static struct tf_store *open_home(const char *home)
{
	struct tf_store *st = NULL;
	char err[256];
	mkdir(home, 0755);
	assert_int_equal(tf_store_open_home(home, &st, err, sizeof(err)), 0);
	return st;
}

/* A running run with one train step in a running attempt `n`. */
static void make_run(struct tf_store *st, const char *pipeline, char id[32])
{
	struct tf_run_step_def defs[1] = {{"train", "train"}};
	assert_int_equal(
	    tf_run_create(st, pipeline, "name: x\n", NULL, "{}", NULL, defs, 1, NULL, id), 0);
	struct tf_run_owner holder; /* driven by this process: owner, pid, heartbeat */
	assert_int_equal(tf_run_claim(st, id, "0123456789abcdef0123456789abcdef",
	                              1u << TF_RUN_PENDING, 0, &holder),
	                 0);
	struct tf_step_update u = {0};
	assert_int_equal(tf_step_set_state(st, id, "train", TF_STEP_RUNNING, &u), 0);
	assert_int_equal(tf_attempt_create(st, id, "train", 1), 0);
}

static int64_t ask(struct tf_broker *b, const char *run, int attempt, int priority)
{
	struct tf_slice_request r = {.run = run,
	                             .step = "train",
	                             .attempt = attempt,
	                             .slice = "v4-8",
	                             .priority = priority,
	                             .preemptible = 1};
	int64_t t = 0;
	char err[256];
	assert_int_equal(tf_broker_request(b, &r, tf_now_wall(), &t, err, sizeof(err)), 0);
	assert_true(t > 0);
	return t;
}

static enum tf_slice_state state_of(struct tf_broker *b, int64_t t, struct tf_slice_status *s)
{
	assert_int_equal(tf_broker_status(b, t, s), 0);
	return s->state;
}

/* Open rows with a box (chips held now, as the database says). */
static int64_t held(struct tf_store *st)
{
	int64_t n = -1;
	assert_int_equal(tf_store_query_int(st, &n,
	                                    "SELECT count(*) FROM slice_jobs WHERE finished_at IS "
	                                    "NULL AND box_a IS NOT NULL",
	                                    ""),
	                 0);
	return n;
}

static void test_broker_pool_for_one_grants_one(void **state)
{
	(void)state;
	setenv("TPUFLOW_POOLS", "v4:2x2x1", 1);
	struct tf_store *st = open_home("one");
	struct tf_broker *b;
	char a[32], c[32];
	make_run(st, "a", a);
	make_run(st, "c", c);
	assert_int_equal(tf_broker_db_new(st, &b), 0);
	int64_t ta = ask(b, a, 1, 5), tc = ask(b, c, 1, 5);
	assert_int_equal(tf_broker_schedule(b, tf_now_wall()), 0);
	struct tf_slice_status sa, sc;
	assert_int_equal(state_of(b, ta, &sa), TF_SLICE_GRANTED);
	assert_int_equal(state_of(b, tc, &sc), TF_SLICE_WAITING);
	assert_string_equal(sa.pool, "v4");
	assert_int_equal(sa.chips, 4);
	assert_non_null(strstr(sc.reason, "needs 2x2x1"));
	assert_int_equal(held(st), 1);
	/* deciding again changes nothing */
	assert_int_equal(tf_broker_schedule(b, tf_now_wall()), 0);
	assert_int_equal(state_of(b, tc, &sc), TF_SLICE_WAITING);
	assert_int_equal(held(st), 1);
	/* a released, c placed on the same chips; the accounting has a's seconds */
	double secs = -1;
	assert_int_equal(tf_broker_release(b, ta, tf_now_wall() + 2, &secs), 0);
	assert_true(secs >= 2);
	assert_int_equal(tf_broker_status(b, ta, &sa), -ENOENT);
	assert_int_equal(tf_broker_schedule(b, tf_now_wall()), 0);
	assert_int_equal(state_of(b, tc, &sc), TF_SLICE_GRANTED);
	assert_int_equal(held(st), 1);
	/* a request withdrawn before placement leaves no row */
	int64_t t3 = ask(b, a, 2, 5);
	assert_int_equal(tf_broker_release(b, t3, tf_now_wall(), &secs), 0);
	assert_true(secs == 0);
	int64_t n = -1;
	assert_int_equal(
	    tf_store_query_int(st, &n, "SELECT count(*) FROM slice_jobs WHERE id=?", "i", t3), 0);
	assert_int_equal(n, 0);
	tf_broker_free(b);
	tf_store_close(st);
	unsetenv("TPUFLOW_POOLS");
}

/* Two handles (as two processes would have) ask and decide at once, many times: at no
 * commit do two open rows share a chip. Threads only record what they saw (cmocka asserts
 * belong to the main thread). */
struct racer {
	const char *run;
	int rounds;
	int granted; /* times this racer held the pool */
	int bad;     /* times the database showed another holder, or a call failed */
};

static void *race(void *arg)
{
	struct racer *r = arg;
	struct tf_store *st = NULL;
	struct tf_broker *b = NULL;
	char err[256];
	if (tf_store_open_home("race", &st, err, sizeof(err)) || tf_broker_db_new(st, &b)) {
		r->bad++;
		tf_store_close(st);
		return NULL;
	}
	struct tf_slice_request q = {
	    .run = r->run, .step = "train", .attempt = 1, .slice = "v4-8", .priority = 5};
	for (int i = 0; i < r->rounds && !r->bad; i++) {
		int64_t t = 0;
		struct tf_slice_status s = {0};
		if (tf_broker_request(b, &q, tf_now_wall(), &t, err, sizeof(err))) {
			r->bad++;
			break;
		}
		do {
			if (tf_broker_schedule(b, tf_now_wall()) || tf_broker_status(b, t, &s)) {
				r->bad++;
				break;
			}
			if (s.state != TF_SLICE_GRANTED)
				usleep(1000);
		} while (s.state != TF_SLICE_GRANTED);
		int64_t n = -1;
		if (tf_store_query_int(st, &n,
		                       "SELECT count(*) FROM slice_jobs WHERE finished_at IS NULL "
		                       "AND box_a IS NOT NULL",
		                       "") ||
		    n != 1)
			r->bad++;
		r->granted++;
		if (tf_broker_release(b, t, tf_now_wall(), NULL))
			r->bad++;
	}
	tf_broker_free(b);
	tf_store_close(st);
	return NULL;
}

static void test_broker_two_handles_never_share_a_chip(void **state)
{
	(void)state;
	setenv("TPUFLOW_POOLS", "v4:2x2x1", 1);
	struct tf_store *st = open_home("race");
	char a[32], c[32];
	make_run(st, "a", a);
	make_run(st, "c", c);
	tf_store_close(st);
	struct racer ra = {.run = a, .rounds = 20}, rc = {.run = c, .rounds = 20};
	pthread_t t1, t2;
	assert_int_equal(pthread_create(&t1, NULL, race, &ra), 0);
	assert_int_equal(pthread_create(&t2, NULL, race, &rc), 0);
	pthread_join(t1, NULL);
	pthread_join(t2, NULL);
	assert_int_equal(ra.bad + rc.bad, 0);
	assert_int_equal(ra.granted, 20);
	assert_int_equal(rc.granted, 20);
	unsetenv("TPUFLOW_POOLS");
}

static void test_broker_priority_reclaims_once(void **state)
{
	(void)state;
	setenv("TPUFLOW_POOLS", "v4:2x2x1", 1);
	struct tf_store *st = open_home("prio");
	struct tf_broker *b;
	char lo[32], hi[32];
	make_run(st, "lo", lo);
	make_run(st, "hi", hi);
	assert_int_equal(tf_broker_db_new(st, &b), 0);
	int64_t tl = ask(b, lo, 1, 2);
	assert_int_equal(tf_broker_schedule(b, tf_now_wall()), 0);
	struct tf_slice_status sl, sh;
	assert_int_equal(state_of(b, tl, &sl), TF_SLICE_GRANTED);
	/* the urgent request: lo is asked to give its chips back, hi waits for them */
	int64_t th = ask(b, hi, 1, 8);
	for (int i = 0; i < 3; i++) { /* the same decision however often it is taken */
		assert_int_equal(tf_broker_schedule(b, tf_now_wall()), 0);
		assert_int_equal(state_of(b, tl, &sl), TF_SLICE_RECLAIMED);
		assert_int_equal(sl.reclaim, TF_FAIL_PREEMPTED);
		assert_non_null(strstr(sl.reason, hi));
		assert_int_equal(state_of(b, th, &sh), TF_SLICE_WAITING);
		assert_non_null(strstr(sh.reason, "preempted"));
	}
	char *hold = NULL;
	assert_int_equal(
	    tf_store_query_text(st, &hold, "SELECT hold FROM slice_jobs WHERE id=?", "i", th), 0);
	assert_string_equal(hold, "0,0,0+2,2,1");
	free(hold);
	/* lo checkpoints, releases and asks again (attempt 2): hi gets the box, lo waits */
	assert_int_equal(tf_broker_release(b, tl, tf_now_wall(), NULL), 0);
	assert_int_equal(tf_attempt_create(st, lo, "train", 2), 0);
	int64_t tl2 = ask(b, lo, 2, 2);
	assert_int_equal(tf_broker_schedule(b, tf_now_wall()), 0);
	assert_int_equal(state_of(b, th, &sh), TF_SLICE_GRANTED);
	assert_int_equal(state_of(b, tl2, &sl), TF_SLICE_WAITING);
	assert_int_equal(held(st), 1);
	/* hi done: lo resumes */
	assert_int_equal(tf_broker_release(b, th, tf_now_wall(), NULL), 0);
	assert_int_equal(tf_broker_schedule(b, tf_now_wall()), 0);
	assert_int_equal(state_of(b, tl2, &sl), TF_SLICE_GRANTED);
	tf_broker_free(b);
	tf_store_close(st);
	unsetenv("TPUFLOW_POOLS");
}

static void test_broker_failed_chip_requeues_on_healthy_chips(void **state)
{
	(void)state;
	setenv("TPUFLOW_POOLS", "v4:2x2x2", 1);
	struct tf_store *st = open_home("fail");
	struct tf_broker *b;
	char a[32];
	make_run(st, "a", a);
	assert_int_equal(tf_broker_db_new(st, &b), 0);
	int64_t t = ask(b, a, 1, 5);
	assert_int_equal(tf_broker_schedule(b, tf_now_wall()), 0);
	struct tf_slice_status s;
	assert_int_equal(state_of(b, t, &s), TF_SLICE_GRANTED);
	int z = s.box.origin[2];
	int chip[3] = {1, 1, z};
	assert_int_equal(tf_broker_chip_fail(st, "v4", chip, tf_now_wall(), "test"), 0);
	assert_int_equal(tf_broker_schedule(b, tf_now_wall()), 0);
	assert_int_equal(state_of(b, t, &s), TF_SLICE_RECLAIMED);
	assert_int_equal(s.reclaim, TF_FAIL_INFRA);
	assert_non_null(strstr(s.reason, "failed"));
	/* released and asked again: placed on the other half, away from the failed chip */
	assert_int_equal(tf_broker_release(b, t, tf_now_wall(), NULL), 0);
	assert_int_equal(tf_attempt_create(st, a, "train", 2), 0);
	int64_t t2 = ask(b, a, 2, 5);
	assert_int_equal(tf_broker_schedule(b, tf_now_wall()), 0);
	assert_int_equal(state_of(b, t2, &s), TF_SLICE_GRANTED);
	assert_int_equal(s.box.origin[2], 1 - z);
	/* `tpuflow slices` draws the chip as failed */
	struct tf_slices_view v = {0};
	char verr[256];
	assert_int_equal(
	    tf_slices_view_load("fail", NULL, 0, tf_now_wall(), &v, verr, sizeof(verr)), 0);
	json_t *doc = tf_sched_describe_json(v.sched, 0);
	json_t *pool = json_array_get(json_object_get(doc, "pools"), 0);
	assert_int_equal(json_integer_value(json_object_get(pool, "failed")), 1);
	json_decref(doc);
	tf_slices_view_release(&v);
	/* repair: the chip is usable again (a second request fits beside) */
	assert_int_equal(tf_broker_chip_repair(st, "v4", chip), 0);
	assert_int_equal(tf_broker_chip_repair(st, "v4", chip), -ENOENT);
	char c[32];
	make_run(st, "c", c);
	int64_t t3 = ask(b, c, 1, 5);
	assert_int_equal(tf_broker_schedule(b, tf_now_wall()), 0);
	assert_int_equal(state_of(b, t3, &s), TF_SLICE_GRANTED);
	assert_int_equal(s.box.origin[2], z);
	tf_broker_free(b);
	tf_store_close(st);
	unsetenv("TPUFLOW_POOLS");
}

static void test_broker_refuses_a_slice_no_pool_holds(void **state)
{
	(void)state;
	setenv("TPUFLOW_POOLS", "v4:2x2x1", 1);
	struct tf_store *st = open_home("big");
	struct tf_broker *b;
	char a[32], err[256] = "";
	make_run(st, "a", a);
	assert_int_equal(tf_broker_db_new(st, &b), 0);
	struct tf_slice_request r = {
	    .run = a, .step = "train", .attempt = 1, .slice = "v4-32", .priority = 5};
	int64_t t = 0;
	assert_int_equal(tf_broker_request(b, &r, tf_now_wall(), &t, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "v4-32"));
	tf_broker_free(b);
	tf_store_close(st);
	unsetenv("TPUFLOW_POOLS");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_broker_pool_for_one_grants_one),
	    cmocka_unit_test(test_broker_two_handles_never_share_a_chip),
	    cmocka_unit_test(test_broker_priority_reclaims_once),
	    cmocka_unit_test(test_broker_failed_chip_requeues_on_healthy_chips),
	    cmocka_unit_test(test_broker_refuses_a_slice_no_pool_holds),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

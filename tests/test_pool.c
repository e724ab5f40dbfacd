/* test_pool.c — the shared worker pool's slots (orchestrator/pool.h): a freed slot goes to the
 * waiting run of highest priority, then to the one holding the fewest slots, then to the one
 * waiting longest, and that run is kicked; a run that leaves gives its reserved slots to the
 * next; jobs run on the pool's threads, each thread keeping its local state. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "orchestrator/pool.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static char kicked[16];
static int nkicked;

static void kick(void *ctx)
{
	kicked[nkicked++] = *(const char *)ctx;
}

static struct tf_pool_client client(const char *name)
{
	return (struct tf_pool_client){.kick = kick, .ctx = (void *)name};
}

static void test_pool_slots_by_priority_then_fair_share(void **state)
{
	(void)state;
	nkicked = 0;
	struct tf_pool *p = tf_pool_new(2, NULL);
	assert_non_null(p);
	struct tf_pool_client a = client("a"), b = client("b"), c = client("c"), d = client("d");
	/* a (priority 0) takes both slots; b (0), c (0) and d (7) wait, in that order */
	assert_int_equal(tf_pool_acquire(p, &a, 0), 1);
	assert_int_equal(tf_pool_acquire(p, &a, 0), 1);
	assert_int_equal(tf_pool_acquire(p, &b, 0), 0);
	assert_int_equal(tf_pool_acquire(p, &c, 0), 0);
	assert_int_equal(tf_pool_acquire(p, &d, 7), 0);
	assert_int_equal(tf_pool_acquire(p, &b, 0), 0); /* asking again keeps its place */
	/* the first slot back goes to d (priority), the second to b (holds none, waited first) */
	tf_pool_release(p, &a);
	tf_pool_release(p, &a);
	assert_int_equal(nkicked, 2);
	assert_memory_equal(kicked, "db", 2);
	assert_int_equal(tf_pool_acquire(p, &d, 7), 1);
	assert_int_equal(tf_pool_acquire(p, &b, 0), 1);
	int busy, top;
	tf_pool_stats(p, &busy, &top);
	assert_int_equal(busy, 2);
	assert_int_equal(top, 2);
	/* b asks for more: now b holds one and c none, so the next slot is c's (fair share) */
	assert_int_equal(tf_pool_acquire(p, &b, 0), 0);
	assert_int_equal(tf_pool_acquire(p, &c, 0), 0);
	tf_pool_release(p, &d);
	assert_int_equal(kicked[nkicked - 1], 'c');
	/* c leaves without taking it: the reserved slot goes on to b */
	tf_pool_leave(p, &c);
	assert_int_equal(kicked[nkicked - 1], 'b');
	assert_int_equal(tf_pool_acquire(p, &b, 0), 1);
	tf_pool_release(p, &b);
	tf_pool_release(p, &b);
	tf_pool_stats(p, &busy, &top);
	assert_int_equal(busy, 0);
	tf_pool_leave(p, &a);
	tf_pool_leave(p, &b);
	tf_pool_leave(p, &d);
	tf_pool_free(p);
}

/* Jobs: all run, on the pool's threads, and each thread's local slot persists between them. */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int ran, locals_made, locals_freed;

static void job(void *arg, void **local)
{
	(void)arg;
	pthread_mutex_lock(&mu);
	if (!*local) {
		*local = malloc(1);
		locals_made++;
	}
	ran++;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
}

static void local_free(void *local)
{
	pthread_mutex_lock(&mu);
	locals_freed++;
	pthread_mutex_unlock(&mu);
	free(local);
}

static void test_pool_jobs_run_on_its_threads(void **state)
{
	(void)state;
	struct tf_pool *p = tf_pool_new(3, local_free);
	assert_int_equal(tf_pool_size(p), 3);
	for (int i = 0; i < 100; i++)
		tf_pool_run(p, job, NULL);
	pthread_mutex_lock(&mu);
	while (ran < 100)
		pthread_cond_wait(&cv, &mu);
	pthread_mutex_unlock(&mu);
	tf_pool_free(p);
	assert_int_equal(ran, 100);
	assert_true(locals_made >= 1 && locals_made <= 3); /* at most one per thread */
	assert_int_equal(locals_freed, locals_made);
	assert_null(tf_pool_new(0, NULL));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_pool_slots_by_priority_then_fair_share),
	    cmocka_unit_test(test_pool_jobs_run_on_its_threads),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

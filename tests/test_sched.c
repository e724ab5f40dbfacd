/* test_sched.c — the slice scheduler as tables of cases: fits / does not fit, rotation,
 * wrap-around, holes kept whole, priorities, quotas and borrowing, fair share over time,
 * backfill never delaying the head's reservation, minimal preemption, chip failures,
 * accounting, slice names and the descriptions. Time is passed in; nothing sleeps. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "scheduler/sched.h"
#include "scheduler/sched_int.h"
#include "scheduler/torus.h"
#include "scheduler/sim.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ---- */

static struct tf_sched *mk(const char *pool, enum tf_sched_policy pol)
{
	struct tf_sched_config cfg;
	tf_sched_config_default(&cfg);
	cfg.policy = pol;
	struct tf_sched *s;
	assert_int_equal(tf_sched_new(&cfg, &s), 0);
	char err[256];
	int rc = tf_sched_add_pool(s, "p", pool, err, sizeof(err));
	if (rc < 0)
		fail_msg("add_pool %s: %s", pool, err);
	return s;
}

static int submit(struct tf_sched *s, const char *slice, const char *project, int prio,
                  int preemptible, double est, double now)
{
	struct tf_sched_job_spec sp = {.slice = slice,
	                               .project = project,
	                               .priority = prio,
	                               .preemptible = preemptible,
	                               .est_seconds = est};
	char err[256];
	int id = 0;
	int rc = tf_sched_submit(s, &sp, now, &id, err, sizeof(err));
	if (rc < 0)
		fail_msg("submit %s: %s", slice, err);
	return id;
}

/* The invariants listed in sched_int.h, checked after steps of the longer scenarios. */
static void check_invariants(const struct tf_sched *s)
{
	for (int pi = 0; pi < s->npools; pi++) {
		const struct pool *p = &s->pools[pi];
		int busy = 0;
		for (int r = 0; r < p->t.nrows; r++) {
			uint64_t want = ~(p->busy[r] | p->failed[r] | p->reserved[r]) & p->t.xmask;
			assert_true(p->free[r] == want);
			busy += __builtin_popcountll(p->busy[r]);
		}
		assert_int_equal(busy, p->busy_chips);
		for (int c = 0; c < p->t.nchips; c++) {
			int o = p->owner[c], x = c % p->t.dims[0], r = c / p->t.dims[0];
			assert_int_equal(o != 0, (int)((p->busy[r] >> x) & 1));
			if (o) {
				const struct job *j = &s->jobs[o];
				assert_true(j->state == TF_JOB_RUNNING ||
				            j->state == TF_JOB_DRAINING);
				assert_true(tf_torus_box_contains(&p->t, &j->box, c));
				assert_false((p->failed[r] >> x) & 1);
			}
		}
		/* invariant 3: each queued job has one live entry, in its own list; every list
		 * is ordered by id, counts its dead entries and has none past dead_hi */
		int queued = 0;
		for (int k = 0; k < s->nprojects * NPRIO; k++) {
			const struct qlist *q = &p->q[k];
			int dead = 0;
			for (int i = q->lo; i < q->n; i++) {
				const struct qent *e = &q->v[i];
				assert_true(i == q->lo || q->v[i - 1].id < e->id);
				if (!(e->flags & QE_LIVE)) {
					dead++;
					assert_true(i <= q->dead_hi);
					continue;
				}
				const struct job *j = &s->jobs[e->id];
				assert_int_equal(j->state, TF_JOB_QUEUED);
				assert_int_equal(j->pool, pi);
				assert_int_equal(j->project * NPRIO + j->prio, k);
				assert_int_equal(e->chips, j->chips);
				assert_int_equal(!!(e->flags & QE_TARGET), j->has_target);
				queued++;
			}
			assert_int_equal(dead, q->dead);
		}
		assert_int_equal(queued, p->queued);
		int want = 0;
		for (int id = 1; id < s->njobs; id++)
			want += s->jobs[id].state == TF_JOB_QUEUED && s->jobs[id].pool == pi;
		assert_int_equal(queued, want);
	}
}

static int count_action(const struct tf_sched_decisions *d, enum tf_sched_action a)
{
	int n = 0;
	for (size_t i = 0; i < d->n; i++)
		n += d->v[i].action == a;
	return n;
}

static int started(const struct tf_sched_decisions *d, int id)
{
	for (size_t i = 0; i < d->n; i++)
		if (d->v[i].action == TF_SCHED_START && d->v[i].job == id)
			return 1;
	return 0;
}

/* ---- geometry ---- */

struct fit_case {
	const char *what;
	int ndims, dims[3], wrap[3];
	struct tf_box busy[4]; /* boxes already taken (shape 0: unused) */
	int want[3];
	int fits;
	int origin[3]; /* expected origin when fits and check_origin */
	int check_origin;
	int shape[3]; /* expected rotation when check_shape */
	int check_shape;
};

#define BOX(x, y, z, a, b, c)                                                                      \
	{                                                                                          \
		{x, y, z},                                                                         \
		{                                                                                  \
			a, b, c                                                                    \
		}                                                                                  \
	}
static const struct fit_case fit_cases[] = {
    {.what = "empty pool fits",
     .ndims = 3,
     .dims = {4, 4, 8},
     .wrap = {1, 1, 1},
     .want = {2, 2, 4},
     .fits = 1},
    {.what = "bigger than the pool",
     .ndims = 3,
     .dims = {4, 4, 8},
     .wrap = {1, 1, 1},
     .want = {4, 4, 16},
     .fits = 0},
    {.what = "rotation: 8 along x only fits along z",
     .ndims = 3,
     .dims = {4, 4, 8},
     .want = {8, 2, 2},
     .fits = 1,
     .shape = {2, 2, 8},
     .check_shape = 1},
    {.what = "rotation in 2D: 2x8 in an 8x4 hole",
     .ndims = 2,
     .dims = {8, 8, 1},
     .busy = {BOX(0, 4, 0, 8, 4, 1)},
     .want = {2, 8, 1},
     .fits = 1,
     .shape = {8, 2, 1},
     .check_shape = 1},
    {.what = "no fit: enough free chips but split",
     .ndims = 3,
     .dims = {4, 4, 4},
     .busy = {BOX(0, 0, 1, 4, 4, 2)},
     .want = {4, 4, 2},
     .fits = 0},
    {.what = "wrap-around in x on a 16-ring",
     .ndims = 2,
     .dims = {16, 16, 1},
     .wrap = {1, 1, 0},
     .busy = {BOX(4, 0, 0, 8, 16, 1)},
     .want = {8, 16, 1},
     .fits = 1,
     .origin = {12, 0, 0},
     .check_origin = 1},
    {.what = "no wrap on a mesh edge",
     .ndims = 2,
     .dims = {16, 16, 1},
     .busy = {BOX(4, 0, 0, 8, 16, 1)},
     .want = {8, 16, 1},
     .fits = 0},
    {.what = "wrap-around in z of a v4 torus",
     .ndims = 3,
     .dims = {4, 4, 8},
     .wrap = {1, 1, 1},
     .busy = {BOX(0, 0, 2, 4, 4, 4)},
     .want = {4, 4, 4},
     .fits = 1,
     .origin = {0, 0, 6},
     .check_origin = 1},
    {.what = "same hole without wrap (z of 6 is no ring)",
     .ndims = 3,
     .dims = {4, 4, 6},
     .wrap = {1, 1, 0},
     .busy = {BOX(0, 0, 2, 4, 4, 2)},
     .want = {4, 4, 4},
     .fits = 0},
    {.what = "wrap in y only where y wraps",
     .ndims = 3,
     .dims = {4, 8, 4},
     .wrap = {0, 1, 0},
     .busy = {BOX(0, 2, 0, 4, 4, 4)},
     .want = {4, 4, 4},
     .fits = 1,
     .origin = {0, 6, 0},
     .check_origin = 1},
    {.what = "exact fill of the last hole",
     .ndims = 3,
     .dims = {4, 4, 4},
     .wrap = {1, 1, 1},
     .busy = {BOX(0, 0, 0, 4, 4, 3)},
     .want = {4, 4, 1},
     .fits = 1,
     .origin = {0, 0, 3},
     .check_origin = 1},
    {.what = "two holes: the snug one is chosen",
     .ndims = 3,
     .dims = {4, 4, 4},
     .busy = {BOX(0, 0, 0, 4, 4, 1), BOX(0, 0, 2, 4, 4, 2), BOX(2, 0, 1, 2, 4, 1)},
     .want = {2, 4, 1},
     .fits = 1,
     .origin = {0, 0, 1},
     .check_origin = 1},
};

/* The job diagram of sched.h, as the public operations see it: each one on a job in each
 * state either moves it where the diagram says or is refused with -EINVAL and leaves it as it
 * was. Turning off the transition table in sched.c makes this fail. */
static struct tf_sched *job_in_state(enum tf_sched_job_state st, int *id)
{
	struct tf_sched *s = mk("v4:4x4x4", TF_SCHED_FIFO);
	struct tf_sched_decisions d = {0};
	*id = submit(s, "v4-8", "a", 0, 1, 100, 0);
	if (st != TF_JOB_QUEUED && st != TF_JOB_CANCELLED)
		tf_sched_tick(s, 0, &d);
	tf_sched_decisions_release(&d);
	if (st == TF_JOB_DRAINING)
		assert_int_equal(tf_sched_drain_at(s, *id, 50), 0);
	if (st == TF_JOB_DONE || st == TF_JOB_FAILED)
		assert_int_equal(tf_sched_finish(s, *id, 10, st == TF_JOB_DONE), 0);
	if (st == TF_JOB_CANCELLED)
		assert_int_equal(tf_sched_cancel(s, *id, 0), 0);
	struct tf_sched_job_info info;
	assert_int_equal(tf_sched_job_info(s, *id, 0, &info), 0);
	assert_int_equal(info.state, st);
	return s;
}

static void test_sched_refuses_every_move_the_diagram_lacks(void **state)
{
	(void)state;
	enum op { FINISH, CANCEL, DRAIN, REQUEUE, NOPS };
	static const char *const op_names[NOPS] = {"finish", "cancel", "drain_at", "requeue"};
	/* where each operation takes a job in each state; TF_JOB_STATE_LAST: refused */
	const enum tf_sched_job_state L = TF_JOB_STATE_LAST;
	const enum tf_sched_job_state to[TF_JOB_STATE_LAST][NOPS] = {
	    [TF_JOB_QUEUED] = {L, TF_JOB_CANCELLED, L, L},
	    [TF_JOB_RUNNING] = {TF_JOB_DONE, TF_JOB_CANCELLED, TF_JOB_DRAINING, L},
	    [TF_JOB_DRAINING] = {TF_JOB_DONE, TF_JOB_CANCELLED, L, TF_JOB_QUEUED},
	    [TF_JOB_DONE] = {L, L, L, L},
	    [TF_JOB_FAILED] = {L, L, L, L},
	    [TF_JOB_CANCELLED] = {L, L, L, L},
	};
	for (int st = 0; st < TF_JOB_STATE_LAST; st++)
		for (int op = 0; op < NOPS; op++) {
			int id;
			struct tf_sched *s = job_in_state((enum tf_sched_job_state)st, &id);
			int rc = op == FINISH   ? tf_sched_finish(s, id, 20, 1)
			         : op == CANCEL ? tf_sched_cancel(s, id, 20)
			         : op == DRAIN  ? tf_sched_drain_at(s, id, 60)
			                        : tf_sched_requeue(s, id, 20);
			struct tf_sched_job_info info;
			assert_int_equal(tf_sched_job_info(s, id, 20, &info), 0);
			enum tf_sched_job_state want =
			    to[st][op] == L ? (enum tf_sched_job_state)st : to[st][op];
			if (rc != (to[st][op] == L ? -EINVAL : 0) || info.state != want)
				fail_msg("%s on a job in state %d: rc %d, state %d (want rc %d, "
				         "state %d)",
				         op_names[op], st, rc, info.state,
				         to[st][op] == L ? -EINVAL : 0, want);
			check_invariants(s);
			tf_sched_free(s);
		}
}

static void test_sched_fit_table(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(fit_cases) / sizeof(fit_cases[0]); i++) {
		const struct fit_case *c = &fit_cases[i];
		struct tf_torus t;
		assert_int_equal(tf_torus_init(&t, c->ndims, c->dims, c->wrap), 0);
		uint64_t *busy = calloc((size_t)t.nrows, sizeof(uint64_t));
		uint64_t *avail = calloc((size_t)t.nrows, sizeof(uint64_t));
		for (int k = 0; k < 4 && c->busy[k].shape[0]; k++)
			tf_torus_box_set(&t, busy, &c->busy[k], 1);
		for (int r = 0; r < t.nrows; r++)
			avail[r] = ~busy[r] & t.xmask;
		for (int mode = TF_TORUS_ANY; mode <= TF_TORUS_BEST; mode++) {
			int check = mode == TF_TORUS_BEST || !strstr(c->what, "snug");
			struct tf_box b;
			int got = tf_torus_find(&t, avail, c->want, (enum tf_torus_mode)mode, &b);
			if (got != c->fits)
				fail_msg("case '%s' mode %d: fits=%d, want %d", c->what, mode, got,
				         c->fits);
			if (!got)
				continue;
			/* the box is free and has the requested extents in some order */
			assert_true(tf_torus_box_all(&t, avail, &b));
			int a[3] = {b.shape[0], b.shape[1], b.shape[2]};
			assert_int_equal(a[0] * a[1] * a[2], c->want[0] * c->want[1] * c->want[2]);
			if (check && c->check_origin &&
			    memcmp(b.origin, c->origin, sizeof(b.origin)))
				fail_msg("case '%s': origin %d,%d,%d want %d,%d,%d", c->what,
				         b.origin[0], b.origin[1], b.origin[2], c->origin[0],
				         c->origin[1], c->origin[2]);
			if (c->check_shape && memcmp(b.shape, c->shape, sizeof(b.shape)))
				fail_msg("case '%s': shape %dx%dx%d", c->what, b.shape[0],
				         b.shape[1], b.shape[2]);
		}
		free(busy);
		free(avail);
		tf_torus_release(&t);
	}
}

static void test_sched_largest_free_box(void **state)
{
	(void)state;
	struct tf_torus t;
	int dims[3] = {4, 4, 8}, wrap[3] = {1, 1, 1};
	assert_int_equal(tf_torus_init(&t, 3, dims, wrap), 0);
	uint64_t avail[32];
	for (int r = 0; r < 32; r++)
		avail[r] = t.xmask;
	struct tf_box b, used = {{0, 0, 0}, {4, 4, 6}};
	tf_torus_box_set(&t, avail, &used, 0);
	assert_true(tf_torus_largest(&t, avail, &b));
	assert_int_equal(b.shape[0] * b.shape[1] * b.shape[2], 32);
	tf_torus_release(&t);
}

/* The largest free box against brute force (every oriented extent at every origin the
 * wrap rules allow) on random occupancies of rings, meshes and mixes, 2D and 3D: the volume
 * agrees, and the box is free with that volume. */
static void test_sched_largest_free_box_random(void **state)
{
	(void)state;
	static const struct {
		int nd, dims[3], wrap[3];
	} tori[] = {{3, {4, 4, 8}, {1, 1, 1}},
	            {3, {4, 4, 6}, {1, 1, 0}},
	            {3, {5, 3, 4}, {0, 1, 1}},
	            {2, {8, 8, 1}, {0, 0, 0}},
	            {2, {16, 16, 1}, {1, 1, 0}}};
	uint64_t rng = 12345;
	for (size_t k = 0; k < sizeof(tori) / sizeof(tori[0]); k++) {
		struct tf_torus t;
		assert_int_equal(tf_torus_init(&t, tori[k].nd, tori[k].dims, tori[k].wrap), 0);
		uint64_t *avail = calloc((size_t)t.nrows, sizeof(uint64_t));
		for (int round = 0; round < 40; round++) {
			int busy_pct = 10 + round * 2; /* 10% .. 88% of chips taken */
			for (int r = 0; r < t.nrows; r++) {
				avail[r] = 0;
				for (int x = 0; x < t.dims[0]; x++) {
					rng = rng * 6364136223846793005ull + 1442695040888963407ull;
					if ((int)((rng >> 33) % 100) >= busy_pct)
						avail[r] |= (uint64_t)1 << x;
				}
			}
			int want = 0;
			for (int a = 1; a <= t.dims[0]; a++)
				for (int b = 1; b <= t.dims[1]; b++)
					for (int c = 1; c <= t.dims[2]; c++) {
						if (a * b * c <= want)
							continue;
						for (int z = 0; z < t.dims[2]; z++)
							for (int y = 0; y < t.dims[1]; y++)
								for (int x = 0; x < t.dims[0];
								     x++) {
									int o[3] = {x, y, z},
									    sh[3] = {a, b, c},
									    ok = 1;
									for (int d = 0; d < 3; d++)
										ok &=
										    t.wrap[d] ||
										    o[d] + sh[d] <=
										        t.dims[d];
									struct tf_box bx = {
									    {x, y, z}, {a, b, c}};
									if (ok &&
									    tf_torus_box_all(
									        &t, avail, &bx))
										want = a * b * c;
								}
					}
			struct tf_box got;
			int found = tf_torus_largest(&t, avail, &got);
			if (!want) {
				assert_false(found);
				continue;
			}
			assert_true(found);
			assert_true(tf_torus_box_all(&t, avail, &got));
			if (got.shape[0] * got.shape[1] * got.shape[2] != want)
				fail_msg(
				    "torus %zu round %d: largest %dx%dx%d, brute force volume %d",
				    k, round, got.shape[0], got.shape[1], got.shape[2], want);
		}
		free(avail);
		tf_torus_release(&t);
	}
}

/* Small jobs placed one by one keep the big hole whole: after eight 2x2x1 jobs on a 4x4x4
 * pool, the 32 free chips still form one 4x4x2 box. */
static void test_sched_fragmentation_keeps_holes(void **state)
{
	(void)state;
	const char *pools[] = {"v4:4x4x4", "v4:4x4x6"};
	for (size_t k = 0; k < 2; k++) {
		struct tf_sched *s = mk(pools[k], TF_SCHED_BACKFILL);
		struct tf_sched_decisions d = {0};
		for (int i = 0; i < 8; i++) {
			submit(s, "v4-8", "a", 0, 0, 100, i);
			tf_sched_tick(s, i, &d);
			assert_int_equal(count_action(&d, TF_SCHED_START), 1);
		}
		assert_true(tf_sched_fragmentation(s, 0) < 1e-9);
		check_invariants(s);
		tf_sched_decisions_release(&d);
		tf_sched_free(s);
	}
}

/* ---- queueing ---- */

static void test_sched_priority_then_fifo(void **state)
{
	(void)state;
	struct tf_sched *s = mk("v4:4x4x4", TF_SCHED_FIFO);
	struct tf_sched_decisions d = {0};
	int big = submit(s, "v4:4x4x4", "a", 0, 0, 100, 0);
	tf_sched_tick(s, 0, &d);
	assert_true(started(&d, big));
	int a = submit(s, "v4:2x4x4", "a", 3, 0, 100, 1);
	int b = submit(s, "v4:2x4x4", "a", 3, 0, 100, 2);
	int c = submit(s, "v4:4x4x4", "a", 7, 0, 100, 3);
	tf_sched_tick(s, 4, &d);
	assert_int_equal(d.n, 0); /* nothing free */
	assert_int_equal(tf_sched_finish(s, big, 100, 1), 0);
	tf_sched_tick(s, 100, &d);
	assert_int_equal(d.n, 1); /* the urgent one first */
	assert_true(started(&d, c));
	tf_sched_finish(s, c, 200, 1);
	tf_sched_tick(s, 200, &d);
	assert_int_equal(d.n, 2); /* then both of priority 3, in submit order */
	assert_int_equal(d.v[0].job, a);
	assert_int_equal(d.v[1].job, b);
	check_invariants(s);
	tf_sched_decisions_release(&d);
	tf_sched_free(s);
}

struct quota_case {
	const char *what;
	int quota_a, borrow_a;
	int preemptible;
	int want_started; /* of 4 jobs of 8 chips from project a on an idle 64-chip pool */
	int want_borrowed;
};

static const struct quota_case quota_cases[] = {
    {"no quota", 0, 0, 1, 4, 0},
    {"quota 16, no borrowing", 16, 0, 1, 2, 0},
    {"quota 16, borrowing preemptible", 16, 1, 1, 4, 2},
    {"quota 16, borrowing but not preemptible", 16, 1, 0, 2, 0},
};

static void test_sched_quota_table(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(quota_cases) / sizeof(quota_cases[0]); i++) {
		const struct quota_case *c = &quota_cases[i];
		struct tf_sched *s = mk("v4:4x4x4", TF_SCHED_BACKFILL);
		struct tf_sched_decisions d = {0};
		assert_int_equal(tf_sched_set_project(s, "a", 1, c->quota_a, c->borrow_a), 0);
		int ids[4];
		for (int k = 0; k < 4; k++)
			ids[k] = submit(s, "v4:2x2x2", "a", 1, c->preemptible, 100, 0);
		tf_sched_tick(s, 0, &d);
		int borrowed = 0;
		for (int k = 0; k < 4; k++) {
			struct tf_sched_job_info ji;
			tf_sched_job_info(s, ids[k], 0, &ji);
			borrowed += ji.borrowed;
		}
		if (count_action(&d, TF_SCHED_START) != c->want_started ||
		    borrowed != c->want_borrowed)
			fail_msg("case '%s': started %d borrowed %d", c->what,
			         count_action(&d, TF_SCHED_START), borrowed);
		if (c->want_started < 4) {
			char why[160];
			tf_sched_job_reason(s, ids[3], why, sizeof(why));
			assert_non_null(strstr(why, "quota"));
		}
		tf_sched_decisions_release(&d);
		tf_sched_free(s);
	}
}

/* A project within its quota takes borrowed capacity back by preempting the borrowers. */
static void test_sched_quota_reclaims_borrowed(void **state)
{
	(void)state;
	struct tf_sched *s = mk("v4:4x4x4", TF_SCHED_BACKFILL);
	struct tf_sched_decisions d = {0};
	tf_sched_set_project(s, "a", 1, 32, 1);
	tf_sched_set_project(s, "b", 1, 32, 0);
	for (int k = 0; k < 8; k++)
		submit(s, "v4:2x2x2", "a", 1, 1, 1000, 0);
	tf_sched_tick(s, 0, &d);
	assert_int_equal(count_action(&d, TF_SCHED_START), 8); /* 4 in quota, 4 borrowed */
	int b = submit(s, "v4:2x4x4", "b", 1, 0, 100, 10);
	tf_sched_tick(s, 10, &d);
	/* same priority: only borrowed jobs may go, and exactly the 32 chips needed */
	assert_int_equal(count_action(&d, TF_SCHED_PREEMPT), 4);
	for (size_t i = 0; i < d.n; i++) {
		struct tf_sched_job_info ji;
		tf_sched_job_info(s, d.v[i].job, 10, &ji);
		assert_true(ji.borrowed);
		assert_int_equal(d.v[i].cause, b);
		tf_sched_requeue(s, d.v[i].job, 15);
	}
	check_invariants(s);
	tf_sched_tick(s, 15, &d);
	assert_true(started(&d, b));
	check_invariants(s);
	tf_sched_decisions_release(&d);
	tf_sched_free(s);
}

/* Two projects with weights 3:1 flooding the pool with equal jobs get chip-seconds 3:1. */
static void test_sched_fair_share_over_time(void **state)
{
	(void)state;
	struct tf_sched *s = mk("v4:4x4x4", TF_SCHED_BACKFILL);
	struct tf_sched_decisions d = {0};
	tf_sched_set_project(s, "a", 3, 0, 0);
	tf_sched_set_project(s, "b", 1, 0, 0);
	for (int k = 0; k < 800; k++) {
		submit(s, "v4-8", "a", 1, 0, 100, 0);
		submit(s, "v4-8", "b", 1, 0, 100, 0);
	}
	int running[64], nrun = 0;
	for (double now = 0; now <= 4000; now += 100) {
		for (int k = 0; k < nrun; k++)
			tf_sched_finish(s, running[k], now, 1);
		nrun = 0;
		tf_sched_tick(s, now, &d);
		for (size_t i = 0; i < d.n; i++)
			running[nrun++] = d.v[i].job;
		assert_int_equal(nrun, 16); /* the pool stays full */
	}
	struct tf_sched_usage ua, ub;
	tf_sched_project_usage(s, "a", 4000, &ua);
	tf_sched_project_usage(s, "b", 4000, &ub);
	double ratio = ua.chip_seconds / ub.chip_seconds;
	if (fabs(ratio - 3) > 0.3)
		fail_msg("chip-seconds a/b = %.2f, want 3", ratio);
	check_invariants(s);
	tf_sched_decisions_release(&d);
	tf_sched_free(s);
}

/* ---- backfill ---- */

/* The head (4x4x4) waits for two 4x4x2 jobs ending at 100 and 1000: reservation t=1000 on the
 * whole pool. A short job may use the half freed at 100; a long one may not. */
static void test_sched_backfill_table(void **state)
{
	(void)state;
	const struct {
		enum tf_sched_policy pol;
		double est_small;
		int want_small_started;
	} cases[] = {
	    {TF_SCHED_BACKFILL, 500, 1},  /* ends at 600 < 1000: backfilled */
	    {TF_SCHED_BACKFILL, 5000, 0}, /* would delay the head */
	    {TF_SCHED_FIFO, 500, 0},      /* FIFO never jumps the head */
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct tf_sched *s = mk("v4:4x4x4", cases[i].pol);
		struct tf_sched_decisions d = {0};
		int a = submit(s, "v4:2x4x4", "x", 1, 0, 100, 0);
		submit(s, "v4:2x4x4", "x", 1, 0, 1000, 0);
		tf_sched_tick(s, 0, &d);
		assert_int_equal(count_action(&d, TF_SCHED_START), 2);
		int head = submit(s, "v4:4x4x4", "x", 1, 0, 100, 1);
		tf_sched_finish(s, a, 100, 1);
		int small = submit(s, "v4-8", "x", 1, 0, cases[i].est_small, 100);
		tf_sched_tick(s, 100, &d);
		assert_int_equal(started(&d, small), cases[i].want_small_started);
		assert_false(started(&d, head));
		assert_int_equal(s->pools[0].resv_job, head);
		assert_true(fabs(s->pools[0].resv_time - 1000) < 1e-9);
		char why[160];
		tf_sched_job_reason(s, head, why, sizeof(why));
		assert_non_null(strstr(why, "needs 4x4x4, largest free"));
		if (!cases[i].want_small_started) {
			tf_sched_job_reason(s, small, why, sizeof(why));
			assert_non_null(
			    strstr(why, cases[i].pol == TF_SCHED_FIFO ? "behind" : "would delay"));
		}
		tf_sched_decisions_release(&d);
		tf_sched_free(s);
	}
}

struct bf_job {
	double arrive, dur;
	const char *slice;
	int id;
	double resv; /* first reservation promised to it, -1: none */
	double start;
};

/* Property over random workloads (estimates exact, one priority): no job ever starts later
 * than the first reservation it was promised as the head. */
static void test_sched_backfill_never_delays_head(void **state)
{
	(void)state;
	static const char *slices[] = {"v4-8",     "v4:2x2x2", "v4:2x2x4",
	                               "v4:2x4x4", "v4:4x4x4", "v4:2x4x4"};
	int checked = 0;
	for (uint64_t seed = 1; seed <= 30; seed++) {
		struct tf_sched *s = mk("v4:4x4x4", TF_SCHED_BACKFILL);
		struct tf_sched_decisions d = {0};
		enum { N = 60 };
		struct bf_job jobs[N];
		uint64_t st = seed * 7919;
		double t = 0;
		for (int i = 0; i < N; i++) {
			st = st * 6364136223846793005ull + 1442695040888963407ull;
			t += (double)((st >> 33) % 40);
			jobs[i] = (struct bf_job){
			    t, 10 + (double)((st >> 20) % 300), slices[(st >> 40) % 6], 0, -1, -1};
		}
		/* event loop on whole seconds */
		int next = 0, done = 0;
		for (double now = 0; done < N && now < 1e6; now += 1) {
			for (int i = 0; i < N; i++)
				if (jobs[i].start >= 0 && jobs[i].id &&
				    fabs(jobs[i].start + jobs[i].dur - now) < 1e-9) {
					tf_sched_finish(s, jobs[i].id, now, 1);
					done++;
				}
			while (next < N && jobs[next].arrive <= now) {
				jobs[next].id =
				    submit(s, jobs[next].slice, "x", 1, 0, jobs[next].dur, now);
				next++;
			}
			tf_sched_tick(s, now, &d);
			for (size_t k = 0; k < d.n; k++)
				for (int i = 0; i < N; i++)
					if (jobs[i].id == d.v[k].job)
						jobs[i].start = now;
			const struct pool *p = &s->pools[0];
			if (p->resv_job && p->resv_ok)
				for (int i = 0; i < N; i++)
					if (jobs[i].id == p->resv_job && jobs[i].resv < 0 &&
					    jobs[i].start < 0)
						jobs[i].resv = p->resv_time;
			check_invariants(s);
		}
		assert_int_equal(done, N);
		for (int i = 0; i < N; i++)
			if (jobs[i].resv >= 0) {
				checked++;
				if (jobs[i].start > jobs[i].resv + 1e-9)
					fail_msg("seed %llu job %d started at %.0f after its "
					         "reservation "
					         "%.0f",
					         (unsigned long long)seed, jobs[i].id,
					         jobs[i].start, jobs[i].resv);
			}
		tf_sched_decisions_release(&d);
		tf_sched_free(s);
	}
	assert_true(checked > 30); /* the property was exercised */
}

/* ---- preemption ---- */

struct preempt_case {
	const char *what;
	int prio[3], preemptible[3]; /* the 32-chip job and the two 16-chip jobs */
	int want_victim;             /* index 0..2, -1: no preemption */
};

static const struct preempt_case preempt_cases[] = {
    {"the smallest victim", {1, 1, 1}, {1, 1, 1}, 1},
    {"skips a non-preemptible job", {1, 1, 1}, {1, 0, 1}, 2},
    {"only lower priorities", {1, 7, 7}, {1, 1, 1}, 0},
    {"nothing eligible", {7, 7, 7}, {1, 1, 1}, -1},
    {"nothing preemptible", {1, 1, 1}, {0, 0, 0}, -1},
};

static void test_sched_preemption_minimal_victims(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(preempt_cases) / sizeof(preempt_cases[0]); i++) {
		const struct preempt_case *c = &preempt_cases[i];
		struct tf_sched *s = mk("v4:4x4x4", TF_SCHED_BACKFILL);
		struct tf_sched_decisions d = {0};
		int v[3];
		v[0] = submit(s, "v4:2x4x4", "x", c->prio[0], c->preemptible[0], 1000, 0);
		v[1] = submit(s, "v4:1x4x4", "x", c->prio[1], c->preemptible[1], 1000, 0);
		v[2] = submit(s, "v4:1x4x4", "x", c->prio[2], c->preemptible[2], 1000, 0);
		tf_sched_tick(s, 0, &d);
		assert_int_equal(count_action(&d, TF_SCHED_START), 3);
		int h = submit(s, "v4:1x4x4", "x", 5, 0, 100, 10);
		tf_sched_tick(s, 10, &d);
		int npre = count_action(&d, TF_SCHED_PREEMPT);
		if (c->want_victim < 0) {
			assert_int_equal(npre, 0);
		} else {
			if (npre != 1 || d.v[0].job != v[c->want_victim])
				fail_msg("case '%s': %d preemptions, first job %d, want job %d",
				         c->what, npre, d.n ? d.v[0].job : 0, v[c->want_victim]);
			assert_int_equal(d.v[0].cause, h);
			assert_true(fabs(d.v[0].deadline - 40) < 1e-9); /* 30 s grace */
			int victim = d.v[0].job;
			char why[160];
			tf_sched_job_reason(s, h, why, sizeof(why));
			assert_non_null(strstr(why, "preempted"));
			/* the victim checkpoints and exits; the head starts on its chips */
			assert_int_equal(tf_sched_requeue(s, victim, 20), 0);
			check_invariants(s);
			tf_sched_tick(s, 20, &d);
			assert_true(started(&d, h));
			struct tf_sched_job_info ji;
			tf_sched_job_info(s, victim, 20, &ji);
			assert_int_equal(ji.state, TF_JOB_QUEUED);
			assert_int_equal(ji.preemptions, 1);
			/* ... and resumes when room returns */
			tf_sched_finish(s, h, 120, 1);
			tf_sched_tick(s, 120, &d);
			assert_true(started(&d, victim));
			assert_int_equal(d.v[0].attempt, 2);
		}
		check_invariants(s);
		tf_sched_decisions_release(&d);
		tf_sched_free(s);
	}
}

/* A victim that does not release within the grace period is killed and requeued. */
static void test_sched_preemption_grace_kill(void **state)
{
	(void)state;
	struct tf_sched *s = mk("v4:4x4x4", TF_SCHED_BACKFILL);
	struct tf_sched_decisions d = {0};
	int low = submit(s, "v4:4x4x4", "x", 0, 1, 1000, 0);
	tf_sched_tick(s, 0, &d);
	int high = submit(s, "v4-8", "x", 9, 0, 100, 1);
	tf_sched_tick(s, 1, &d);
	assert_int_equal(count_action(&d, TF_SCHED_PREEMPT), 1);
	tf_sched_tick(s, 30, &d);
	assert_int_equal(d.n, 0); /* still in grace */
	tf_sched_tick(s, 31, &d);
	assert_int_equal(count_action(&d, TF_SCHED_KILL), 1);
	assert_int_equal(d.v[0].job, low);
	assert_true(started(&d, high));
	struct tf_sched_job_info ji;
	tf_sched_job_info(s, low, 31, &ji);
	assert_int_equal(ji.state, TF_JOB_QUEUED);
	assert_true(fabs(ji.chip_seconds - 31 * 64) < 1e-6); /* accounted up to the kill */
	check_invariants(s);
	tf_sched_decisions_release(&d);
	tf_sched_free(s);
}

/* ---- chip failures ---- */

static void test_sched_chip_failure_requeues_elsewhere(void **state)
{
	(void)state;
	struct tf_sched *s = mk("v4:4x4x4", TF_SCHED_BACKFILL);
	struct tf_sched_decisions d = {0};
	int id = submit(s, "v4:2x2x2", "x", 1, 0, 100, 0);
	tf_sched_tick(s, 0, &d);
	int chips[8];
	assert_int_equal(tf_sched_job_chips(s, id, chips, 8), 8);
	assert_int_equal(tf_sched_chip_fail(s, 0, chips[3], 50, &d), 0);
	assert_int_equal(d.n, 1);
	assert_int_equal(d.v[0].action, TF_SCHED_FAIL_INFRA);
	assert_int_equal(d.v[0].cause, chips[3]);
	struct tf_sched_job_info ji;
	tf_sched_job_info(s, id, 50, &ji);
	assert_int_equal(ji.state, TF_JOB_QUEUED);
	assert_int_equal(ji.infra_failures, 1);
	tf_sched_tick(s, 50, &d);
	assert_true(started(&d, id));
	assert_int_equal(d.v[0].attempt, 2);
	const struct tf_torus *t = tf_sched_pool_torus(s, 0);
	assert_false(tf_torus_box_contains(t, &d.v[0].box, chips[3]));
	check_invariants(s);
	/* a job that needs every chip waits until the repair */
	int all = submit(s, "v4:4x4x4", "x", 9, 0, 100, 60);
	tf_sched_finish(s, id, 60, 1);
	tf_sched_tick(s, 60, &d);
	assert_false(started(&d, all));
	tf_sched_chip_repair(s, 0, chips[3]);
	tf_sched_tick(s, 70, &d);
	assert_true(started(&d, all));
	/* a chip failing under a host shows in the map */
	assert_int_equal(tf_sched_chip_fail(s, 0, 0, 80, &d), 0);
	assert_int_equal(count_action(&d, TF_SCHED_FAIL_INFRA), 1);
	char *txt = tf_sched_describe_text(s, 80);
	assert_non_null(strstr(txt, "x"));
	free(txt);
	/* a whole host (4 chips on v4) goes down: nothing is placed on it afterwards */
	int small1 = submit(s, "v4-8", "x", 1, 0, 100, 90);
	int small2 = submit(s, "v4-8", "x", 1, 0, 100, 90);
	assert_int_equal(tf_sched_cancel(s, all, 90), 0); /* requeued by the failure: withdraw */
	tf_sched_chip_repair(s, 0, 0);
	tf_sched_tick(s, 90, &d);
	assert_int_equal(count_action(&d, TF_SCHED_START), 2);
	int host = tf_sched_chip_host(s, 0, 0);
	assert_int_equal(tf_sched_host_fail(s, 0, host, 95, &d), 0);
	assert_int_equal(s->pools[0].failed_chips, 4);
	tf_sched_tick(s, 95, &d);
	for (size_t i = 0; i < d.n; i++)
		for (int c = 0; c < 4; c++)
			assert_false(tf_sched_chip_host(s, 0, c) == host &&
			             tf_torus_box_contains(t, &d.v[i].box, c));
	(void)small1;
	(void)small2;
	assert_int_equal(tf_sched_host_fail(s, 0, 999, 95, &d), -EINVAL);
	check_invariants(s);
	tf_sched_decisions_release(&d);
	tf_sched_free(s);
}

/* ---- placing at a given box (placements decided elsewhere) ---- */

static void test_sched_place_at_table(void **state)
{
	(void)state;
	/* each case on a fresh pool already holding a v4-8 job at (0,0,0)+2x2x1 */
	const struct {
		const char *pool, *slice;
		int origin[3], shape[3];
		int rc;              /* 0, -EINVAL or -EBUSY */
		const char *err_has; /* substring of err on failure */
	} cases[] = {
	    {"v4:4x4x8", "v4-8", {2, 0, 0}, {2, 2, 1}, 0, NULL},
	    {"v4:4x4x8", "v4-8", {0, 2, 5}, {1, 2, 2}, 0, NULL},     /* rotated */
	    {"v4:4x4x8", "v4-32", {2, 2, 6}, {2, 2, 4}, 0, NULL},    /* wraps z: 6,7,0,1 */
	    {"v4:4x4x8", "v4:2x2x4", {3, 0, 1}, {2, 2, 4}, 0, NULL}, /* wraps x */
	    {"v4:4x4x6", "v4-8", {0, 0, 5}, {2, 1, 2}, -EINVAL, "does not wrap"},
	    {"v4:4x4x8", "v4-8", {1, 1, 0}, {2, 2, 1}, -EBUSY, "held by job 1 'first'"},
	    {"v4:4x4x8", "v4-8", {0, 0, 0}, {2, 2, 2}, -EINVAL, "any rotation"},
	    {"v4:4x4x8", "v4-8", {4, 0, 0}, {2, 2, 1}, -EINVAL, "does not fit"},
	    {"v4:4x4x8", "v4-8", {-1, 0, 0}, {2, 2, 1}, -EINVAL, "does not fit"},
	    {"v4:4x4x8", "v5litepod-4", {2, 2, 0}, {2, 2, 1}, -EINVAL, "v5e"},
	    {"v5e:8x8", "v5litepod-16", {4, 4, 0}, {4, 4, 1}, 0, NULL},
	    {"v5e:8x8", "v5litepod-16", {6, 0, 0}, {4, 4, 1}, -EINVAL, "does not wrap"},
	    {"v4:4x4x8", "2x2x2", {2, 2, 2}, {2, 2, 2}, 0, NULL}, /* bare shape */
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct tf_sched *s = mk(cases[i].pool, TF_SCHED_BACKFILL);
		const int first_box_is_2d = !strncmp(cases[i].pool, "v5e", 3);
		struct tf_box b0 = {{0, 0, 0}, {2, 2, 1}};
		struct tf_sched_job_spec f = {.name = "first",
		                              .run = "r0",
		                              .slice = first_box_is_2d ? "v5litepod-4" : "v4-8"};
		char err[256] = "";
		int id0 = 0, id = 0;
		assert_int_equal(tf_sched_place_at(s, 0, &b0, &f, 100, &id0, err, sizeof(err)), 0);
		assert_int_equal(id0, 1);
		struct tf_box b = {{cases[i].origin[0], cases[i].origin[1], cases[i].origin[2]},
		                   {cases[i].shape[0], cases[i].shape[1], cases[i].shape[2]}};
		struct tf_sched_job_spec sp = {
		    .name = "second", .run = "r1", .slice = cases[i].slice};
		err[0] = '\0';
		int rc = tf_sched_place_at(s, 0, &b, &sp, 150, &id, err, sizeof(err));
		if (rc != cases[i].rc)
			fail_msg("case %zu (%s at %d,%d,%d): rc %d, want %d (%s)", i,
			         cases[i].slice, b.origin[0], b.origin[1], b.origin[2], rc,
			         cases[i].rc, err);
		check_invariants(s);
		if (rc == 0) {
			struct tf_sched_job_info ji;
			assert_int_equal(tf_sched_job_info(s, id, 200, &ji), 0);
			assert_int_equal(ji.state, TF_JOB_RUNNING);
			assert_memory_equal(&ji.box, &b, sizeof(b));
			assert_true(fabs(ji.slice_seconds - 50) < 1e-9);
			int chips[64];
			int n = tf_sched_job_chips(s, id, chips, 64);
			assert_int_equal(n, ji.chips);
			for (int k = 0; k < n; k++)
				assert_int_equal(s->pools[0].owner[chips[k]], id);
			assert_int_equal(s->pools[0].busy_chips, 4 + ji.chips);
			/* nothing was queued and a tick decides nothing */
			struct tf_sched_decisions d = {0};
			tf_sched_tick(s, 200, &d);
			assert_int_equal((int)d.n, 0);
			tf_sched_decisions_release(&d);
			/* finishing books its time to its run */
			struct tf_sched_usage u;
			assert_int_equal(tf_sched_finish(s, id, 250, 1), 0);
			assert_int_equal(tf_sched_run_usage(s, "r1", 250, &u), 0);
			assert_true(fabs(u.slice_seconds - 100) < 1e-9);
		} else {
			assert_non_null(strstr(err, cases[i].err_has));
			assert_int_equal(s->pools[0].busy_chips, 4);
			assert_int_equal(s->njobs, 2); /* no job left behind */
		}
		tf_sched_free(s);
	}
	/* a pool added after jobs exist takes jobs too (its queues are made for every project) */
	{
		struct tf_sched *s2 = mk("v4:4x4x4", TF_SCHED_BACKFILL);
		struct tf_box b0 = {{0, 0, 0}, {2, 2, 1}};
		struct tf_sched_job_spec sp0 = {.slice = "v4-8", .project = "research"};
		char e2[256];
		int id2;
		assert_int_equal(tf_sched_place_at(s2, 0, &b0, &sp0, 0, &id2, e2, sizeof(e2)), 0);
		assert_int_equal(tf_sched_add_pool(s2, "e", "v5e:16x16", e2, sizeof(e2)), 1);
		struct tf_sched_job_spec sp1 = {.slice = "v5litepod-16", .project = "research"};
		assert_int_equal(tf_sched_place_at(s2, 1, &b0, &sp1, 0, &id2, e2, sizeof(e2)),
		                 -EINVAL); /* 2x2x1 is not 4x4 */
		struct tf_box b1 = {{12, 12, 0}, {4, 4, 1}};
		assert_int_equal(tf_sched_place_at(s2, 1, &b1, &sp1, 0, &id2, e2, sizeof(e2)), 0);
		submit(s2, "v5litepod-16", "research", 0, 1, 0, 0);
		struct tf_sched_decisions d2 = {0};
		tf_sched_tick(s2, 1, &d2);
		assert_int_equal((int)d2.n, 1);
		check_invariants(s2);
		tf_sched_decisions_release(&d2);
		tf_sched_free(s2);
	}
	/* a failed chip refuses the box; out-of-range pool */
	struct tf_sched *s = mk("v4:4x4x4", TF_SCHED_BACKFILL);
	struct tf_sched_decisions d = {0};
	tf_sched_chip_fail(s, 0, 5, 0, &d); /* chip (1,1,0) */
	struct tf_box b = {{0, 0, 0}, {2, 2, 1}};
	struct tf_sched_job_spec sp = {.slice = "v4-8"};
	char err[256];
	int id;
	assert_int_equal(tf_sched_place_at(s, 0, &b, &sp, 0, &id, err, sizeof(err)), -EBUSY);
	assert_non_null(strstr(err, "failed"));
	assert_int_equal(tf_sched_place_at(s, 3, &b, &sp, 0, &id, err, sizeof(err)), -EINVAL);
	tf_sched_decisions_release(&d);
	tf_sched_free(s);
}

static void test_sched_default_pools(void **state)
{
	(void)state;
	const struct {
		const char *gen, *spec;
	} cases[] = {{"v4", "v4:4x4x8"}, {"v5p", "v5p:4x4x4"}, {"v5e", "v5e:16x16"},
	             {"v2", "v2:16x16"}, {"v6e", "v6e:16x16"}, {"v9", NULL}};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char spec[64] = "";
		int rc = tf_sched_default_pool(cases[i].gen, spec, sizeof(spec));
		if (!cases[i].spec) {
			assert_int_equal(rc, -EINVAL);
			continue;
		}
		assert_int_equal(rc, 0);
		assert_string_equal(spec, cases[i].spec);
		struct tf_sched *s =
		    mk(spec, TF_SCHED_BACKFILL); /* every default is a valid pool */
		tf_sched_free(s);
	}
}

/* ---- slices, accounting, descriptions ---- */

static void test_sched_slice_names(void **state)
{
	(void)state;
	const struct {
		const char *pool, *slice;
		int shape[3];
		int ok;
	} cases[] = {
	    {"v4:4x4x8", "v4-8", {2, 2, 1}, 1},
	    {"v4:4x4x8", "v4-32", {2, 2, 4}, 1},
	    {"v4:4x4x8", "v4:2x2x4", {2, 2, 4}, 1},
	    {"v4:4x4x8", "2x2x2", {2, 2, 2}, 1},
	    {"v5e:16x16", "v5litepod-16", {4, 4, 1}, 1},
	    {"v5e:16x16", "v4-8", {0}, 0},   /* wrong generation */
	    {"v4:4x4x8", "v4-4096", {0}, 0}, /* larger than the pool */
	    {"v4:4x4x8", "v9-8", {0}, 0},    /* unknown generation */
	    {"v4:4x4x8", "banana", {0}, 0},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct tf_sched *s = mk(cases[i].pool, TF_SCHED_BACKFILL);
		struct tf_sched_job_spec sp = {.slice = cases[i].slice};
		char err[256] = "";
		int id = 0, rc = tf_sched_submit(s, &sp, 0, &id, err, sizeof(err));
		if ((rc == 0) != cases[i].ok)
			fail_msg("slice '%s' on %s: rc %d (%s)", cases[i].slice, cases[i].pool, rc,
			         err);
		if (rc == 0) {
			struct tf_sched_job_info ji;
			tf_sched_job_info(s, id, 0, &ji);
			assert_memory_equal(ji.shape, cases[i].shape, sizeof(ji.shape));
		} else {
			assert_true(strlen(err) > 10);
		}
		tf_sched_free(s);
	}
	struct tf_sched *s;
	char err[256];
	tf_sched_new(NULL, &s);
	assert_int_equal(tf_sched_add_pool(s, "x", "v4:4x4", err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "3D"));
	assert_int_equal(tf_sched_add_pool(s, "x", "tpu", err, sizeof(err)), -EINVAL);
	assert_int_equal(tf_sched_add_pool(s, "x", "v5e:16x16", err, sizeof(err)), 0);
	assert_int_equal(tf_sched_add_pool(s, "y", "v4:4x4x8", err, sizeof(err)), 1);
	assert_int_equal(tf_sched_pool_count(s), 2);
	/* v5e hosts hold 8 chips (2x4, as v5litepod-8); v4 hosts 4 (2x2x1) */
	assert_int_equal(tf_sched_chip_host(s, 0, 1), 0);
	assert_int_equal(tf_sched_chip_host(s, 0, 16 + 1), 0);
	assert_int_equal(tf_sched_chip_host(s, 0, 2), 1);
	assert_int_equal(tf_sched_chip_host(s, 1, 1), 0);
	assert_int_equal(tf_sched_chip_host(s, 1, 2), 1);
	tf_sched_free(s);
}

static void test_sched_accounting(void **state)
{
	(void)state;
	struct tf_sched *s = mk("v4:4x4x4", TF_SCHED_BACKFILL);
	struct tf_sched_decisions d = {0};
	struct tf_sched_job_spec sp = {.slice = "v4:2x2x2", .project = "p", .run = "run-1"};
	char err[128];
	int a, b;
	tf_sched_submit(s, &sp, 0, &a, err, sizeof(err));
	sp.slice = "v4-8";
	tf_sched_submit(s, &sp, 0, &b, err, sizeof(err));
	tf_sched_tick(s, 10, &d);
	tf_sched_finish(s, a, 110, 1);
	struct tf_sched_usage u;
	assert_int_equal(tf_sched_run_usage(s, "run-1", 110, &u), 0);
	assert_true(fabs(u.chip_seconds - (100 * 8 + 100 * 4)) < 1e-9);
	assert_int_equal(tf_sched_project_usage(s, "p", 210, &u), 0);
	assert_true(fabs(u.chip_seconds - (100 * 8 + 200 * 4)) < 1e-9);
	assert_true(fabs(u.slice_seconds - 300) < 1e-9);
	assert_int_equal(u.running_chips, 4);
	assert_int_equal(u.jobs, 2);
	assert_int_equal(tf_sched_project_usage(s, "nope", 0, &u), -ENOENT);
	assert_true(fabs(tf_sched_utilization(s, 0) - 4.0 / 64) < 1e-9);
	tf_sched_decisions_release(&d);
	tf_sched_free(s);
}

static void test_sched_describe_json_and_text(void **state)
{
	(void)state;
	struct tf_sched *s = mk("v4:4x4x4", TF_SCHED_BACKFILL);
	struct tf_sched_decisions d = {0};
	int a = submit(s, "v4:2x4x4", "research", 1, 0, 100, 0);
	submit(s, "v4:4x4x4", "research", 1, 0, 100, 0);
	tf_sched_tick(s, 0, &d);
	json_t *j = tf_sched_describe_json(s, 5);
	json_t *pool = json_array_get(json_object_get(j, "pools"), 0);
	assert_int_equal(json_integer_value(json_object_get(pool, "busy")), 32);
	json_t *occ = json_object_get(pool, "occupancy");
	assert_int_equal(json_array_size(occ), 64);
	int held = 0;
	for (size_t i = 0; i < 64; i++)
		held += json_integer_value(json_array_get(occ, i)) == a;
	assert_int_equal(held, 32);
	json_t *q = json_array_get(json_object_get(j, "queue"), 0);
	assert_non_null(
	    strstr(json_string_value(json_object_get(q, "reason")), "needs 4x4x4, largest free "));
	assert_true(json_real_value(json_object_get(j, "utilization")) == 0.5);
	json_decref(j);
	char *txt = tf_sched_describe_text(s, 5);
	assert_non_null(strstr(txt, "AA"));
	assert_non_null(strstr(txt, "needs 4x4x4, largest free "));
	free(txt);
	tf_sched_decisions_release(&d);
	tf_sched_free(s);
}

static void test_sched_cancel_and_bad_calls(void **state)
{
	(void)state;
	struct tf_sched *s = mk("v4:4x4x4", TF_SCHED_BACKFILL);
	struct tf_sched_decisions d = {0};
	int a = submit(s, "v4:4x4x4", "x", 1, 0, 100, 0);
	int b = submit(s, "v4:4x4x4", "x", 1, 0, 100, 0);
	tf_sched_tick(s, 0, &d);
	assert_int_equal(tf_sched_cancel(s, b, 1), 0);
	assert_int_equal(tf_sched_cancel(s, b, 1), -EINVAL);
	assert_int_equal(tf_sched_requeue(s, a, 1), -EINVAL); /* not draining */
	assert_int_equal(tf_sched_finish(s, 999, 1, 1), -ENOENT);
	assert_int_equal(tf_sched_cancel(s, a, 2), 0);
	assert_true(tf_sched_utilization(s, 0) == 0);
	check_invariants(s);
	tf_sched_decisions_release(&d);
	tf_sched_free(s);
}

/* A queue list keeps its order and its dead entries in account while jobs leave it (cancel,
 * start) and come back into it (a chip failure requeues a job older than every queued one),
 * and the next walks start what is left in order. */
static void test_sched_queue_leave_and_return(void **state)
{
	(void)state;
	struct tf_sched *s = mk("v4:4x4x4", TF_SCHED_FIFO);
	struct tf_sched_decisions d = {0};
	int first = submit(s, "v4:2x2x1", "x", 1, 0, 100, 0);
	tf_sched_tick(s, 0, &d);
	assert_true(started(&d, first));
	int big[8];
	for (int i = 0; i < 8; i++)
		big[i] = submit(s, "v4:4x4x4", "x", 1, 0, 100, 1);
	assert_int_equal(tf_sched_cancel(s, big[5], 2), 0); /* a dead entry mid-list */
	check_invariants(s);
	struct tf_sched_job_info info;
	assert_int_equal(tf_sched_job_info(s, first, 3, &info), 0);
	int chip = info.box.origin[0] + 4 * (info.box.origin[1] + 4 * info.box.origin[2]);
	assert_int_equal(tf_sched_chip_fail(s, 0, chip, 3, &d), 0); /* first goes back in front */
	assert_int_equal(count_action(&d, TF_SCHED_FAIL_INFRA), 1);
	check_invariants(s);
	assert_int_equal(tf_sched_chip_repair(s, 0, chip), 0);
	assert_int_equal(tf_sched_cancel(s, big[1], 4), 0);
	tf_sched_tick(s, 5, &d); /* first again, in front of the pod-size jobs */
	assert_true(started(&d, first));
	check_invariants(s);
	int order[] = {big[0], big[2], big[3], big[4], big[6], big[7]};
	double now = 6;
	assert_int_equal(tf_sched_finish(s, first, now, 1), 0);
	for (size_t i = 0; i < sizeof(order) / sizeof(order[0]); i++) {
		tf_sched_tick(s, now, &d);
		assert_int_equal(count_action(&d, TF_SCHED_START), 1);
		assert_true(started(&d, order[i]));
		check_invariants(s);
		assert_int_equal(tf_sched_finish(s, order[i], ++now, 1), 0);
	}
	tf_sched_tick(s, now, &d);
	assert_int_equal(d.n, 0);
	check_invariants(s);
	tf_sched_decisions_release(&d);
	tf_sched_free(s);
}

/* The simulator is deterministic in its decisions and backfill beats FIFO on utilization. */
static void test_sched_simulate_small(void **state)
{
	(void)state;
	struct tf_sched_sim_opts o = {.pool = "v4:8x8x8",
	                              .jobs = 400,
	                              .seed = 3,
	                              .policy = TF_SCHED_BACKFILL,
	                              .load = 1.2,
	                              .failures = 3};
	struct tf_sched_sim_result a, b, f;
	char err[128];
	assert_int_equal(tf_sched_simulate(&o, &a, err, sizeof(err)), 0);
	assert_int_equal(tf_sched_simulate(&o, &b, err, sizeof(err)), 0);
	assert_int_equal(a.completed, 400);
	assert_int_equal(a.decisions, b.decisions);
	assert_true(a.makespan == b.makespan);
	assert_int_equal(a.infra_failures, b.infra_failures);
	o.policy = TF_SCHED_FIFO;
	assert_int_equal(tf_sched_simulate(&o, &f, err, sizeof(err)), 0);
	assert_int_equal(f.completed, 400);
	assert_true(a.utilization > f.utilization);
	o.pool = "v4:4x4";
	assert_int_equal(tf_sched_simulate(&o, &f, err, sizeof(err)), -EINVAL);
}

/* The decisions themselves, pinned: the digest of the whole decision trace (every START,
 * PREEMPT, KILL and FAIL_INFRA with its time, job, attempt, box and deadline) for a few seeded
 * workloads under both policies — a small pod with chip failures, a queue deep enough that a
 * tick walks its whole backfill_depth, a 2D pool. A change meant to make the scheduler faster
 * must leave these alone; one that means to decide differently records the new digests here
 * and says why. (Recorded on x86-64 with glibc: the workload draws durations with exp/log.) */
static void test_sched_simulate_trace_pinned(void **state)
{
	(void)state;
	static const struct {
		const char *pool;
		int jobs, seed, failures;
		double load;
		enum tf_sched_policy policy;
		uint64_t digest;
		uint64_t decisions;
	} cases[] = {
	    {"v4:8x8x8", 400, 3, 3, 1.2, TF_SCHED_BACKFILL, 0x00fa751f23ab7225ull, 452},
	    {"v4:8x8x8", 400, 3, 3, 1.2, TF_SCHED_FIFO, 0xa1d0668b05c8cda4ull, 460},
	    {"v4:16x16x16", 3000, 1, 0, 2.5, TF_SCHED_BACKFILL, 0xcf8cf1701bb9d0f5ull, 3751},
	    {"v4:16x16x16", 3000, 1, 0, 2.5, TF_SCHED_FIFO, 0x8ad2104d0a268b7full, 3157},
	    {"v5e:16x16", 1000, 2, 10, 1.2, TF_SCHED_BACKFILL, 0xfe8496d3d30a08feull, 1254},
	    {"v5e:16x16", 1000, 2, 10, 1.2, TF_SCHED_FIFO, 0x29e1f8183d4241f3ull, 1252},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct tf_sched_sim_opts o = {.pool = cases[i].pool,
		                              .jobs = cases[i].jobs,
		                              .seed = (uint64_t)cases[i].seed,
		                              .policy = cases[i].policy,
		                              .load = cases[i].load,
		                              .failures = cases[i].failures};
		struct tf_sched_sim_result r;
		char err[128];
		assert_int_equal(tf_sched_simulate(&o, &r, err, sizeof(err)), 0);
		if (r.trace_digest != cases[i].digest)
			fail_msg("%s, %d jobs, seed %d, %s: decision trace digest %016llx, pinned "
			         "%016llx (%llu decisions, pinned %llu)",
			         cases[i].pool, cases[i].jobs, cases[i].seed,
			         tf_sched_policy_name(cases[i].policy),
			         (unsigned long long)r.trace_digest,
			         (unsigned long long)cases[i].digest,
			         (unsigned long long)r.decisions,
			         (unsigned long long)cases[i].decisions);
		assert_int_equal(r.completed, cases[i].jobs);
	}
}

/* ---- quotas and preemption: reclaim, in-project priority, the urgent head ---- */

/* Invariant 5 of sched_int.h: quota_used = in-quota running/draining jobs + drain targets. */
static void check_quota(const struct tf_sched *s)
{
	for (int k = 0; k < s->nprojects; k++) {
		int used = 0;
		for (int id = 1; id < s->njobs; id++) {
			const struct job *j = &s->jobs[id];
			if (j->project != k)
				continue;
			if ((j->state == TF_JOB_RUNNING || j->state == TF_JOB_DRAINING) &&
			    !j->borrowed)
				used += j->chips;
			if (j->state == TF_JOB_QUEUED && j->has_target)
				used += j->chips;
		}
		assert_int_equal(used, s->projects[k].quota_used);
	}
}

struct qjob {
	const char *slice, *project;
	int prio, preemptible;
	int phase; /* submitted and ticked in phase 0 or 1, so later jobs find quotas in use */
};

struct reclaim_case {
	const char *what;
	int quota_a, quota_b; /* both projects may borrow */
	struct qjob run[4];   /* jobs filling the 64-chip pool (slice NULL: unused) */
	struct qjob urgent;   /* the job looking for room (project b) */
	int victims[4];       /* 1: this running job must be preempted, 2: any one of these */
	int want_preemptions; /* PREEMPT decisions expected */
	int check_borrowed;   /* every victim ran on borrowed capacity */
};

#define QJ(sl, pr, prio, pre, ph)                                                                  \
	{                                                                                          \
		sl, pr, prio, pre, ph                                                              \
	}
static const struct reclaim_case reclaim_cases[] = {
    {"borrowed capacity before lower-priority jobs within a quota",
     32,
     32,
     {QJ("v4:1x4x4", "a", 1, 1, 0), QJ("v4:1x4x4", "a", 1, 1, 0), QJ("v4:1x4x4", "a", 5, 1, 1),
      QJ("v4:1x4x4", "a", 5, 1, 1)},
     QJ("v4:1x4x4", "b", 3, 0, 0),
     {0, 0, 2, 2},
     1,
     1},
    {"the smallest borrower: fewest chips disturbed",
     16,
     48,
     {QJ("v4:1x4x4", "a", 1, 1, 0), QJ("v4:2x4x4", "a", 1, 1, 1), QJ("v4:1x4x4", "a", 1, 1, 1)},
     QJ("v4:1x4x4", "b", 1, 0, 0),
     {0, 0, 1, 0},
     1,
     1},
    {"borrowers at any priority, never in-quota jobs of equal priority",
     16,
     48,
     {QJ("v4:1x4x4", "a", 9, 1, 0), QJ("v4:1x4x4", "a", 9, 1, 1), QJ("v4:2x4x4", "c", 9, 0, 1)},
     QJ("v4:1x4x4", "b", 1, 0, 0),
     {0, 1, 0, 0},
     1,
     1},
    {"a job that must borrow does not reclaim",
     16,
     16,
     {QJ("v4:1x4x4", "a", 1, 1, 0), QJ("v4:1x4x4", "b", 9, 0, 0), QJ("v4:2x4x4", "a", 1, 1, 1)},
     QJ("v4:1x4x4", "b", 1, 1, 0),
     {0, 0, 0, 0},
     0,
     0},
};

/* Reclaim: a job within its quota takes back lent capacity, borrowers first, fewest chips. */
static void test_sched_reclaim_borrowers_first(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(reclaim_cases) / sizeof(reclaim_cases[0]); i++) {
		const struct reclaim_case *c = &reclaim_cases[i];
		struct tf_sched *s = mk("v4:4x4x4", TF_SCHED_BACKFILL);
		struct tf_sched_decisions d = {0};
		tf_sched_set_project(s, "a", 1, c->quota_a, 1);
		tf_sched_set_project(s, "b", 1, c->quota_b, 1);
		int ids[4] = {0}, nstart = 0;
		for (int ph = 0; ph < 2; ph++) {
			for (int k = 0; k < 4; k++)
				if (c->run[k].slice && c->run[k].phase == ph)
					ids[k] =
					    submit(s, c->run[k].slice, c->run[k].project,
					           c->run[k].prio, c->run[k].preemptible, 1000, ph);
			tf_sched_tick(s, ph, &d);
			nstart += count_action(&d, TF_SCHED_START);
		}
		int want_run = 0;
		for (int k = 0; k < 4; k++)
			want_run += c->run[k].slice != NULL;
		assert_int_equal(nstart, want_run);
		assert_int_equal(s->pools[0].busy_chips, 64);
		int u = submit(s, c->urgent.slice, c->urgent.project, c->urgent.prio,
		               c->urgent.preemptible, 100, 10);
		tf_sched_tick(s, 10, &d);
		int npre = count_action(&d, TF_SCHED_PREEMPT), any_of = 0;
		if (npre != c->want_preemptions)
			fail_msg("case '%s': %d preemptions, want %d", c->what, npre,
			         c->want_preemptions);
		for (size_t k = 0; k < d.n; k++) {
			if (d.v[k].action != TF_SCHED_PREEMPT)
				continue;
			int idx = -1;
			for (int m = 0; m < 4; m++)
				if (ids[m] == d.v[k].job)
					idx = m;
			if (idx < 0 || !c->victims[idx])
				fail_msg("case '%s': preempted job %d, not an expected victim",
				         c->what, d.v[k].job);
			any_of += c->victims[idx] == 2;
			assert_int_equal(d.v[k].cause, u);
			struct tf_sched_job_info ji;
			tf_sched_job_info(s, d.v[k].job, 10, &ji);
			if (c->check_borrowed)
				assert_true(ji.borrowed);
		}
		for (int m = 0; m < 4; m++)
			if (c->victims[m] == 1) {
				struct tf_sched_job_info ji;
				tf_sched_job_info(s, ids[m], 10, &ji);
				assert_int_equal(ji.state, TF_JOB_DRAINING);
			}
		assert_true(any_of <= 1);
		check_quota(s);
		check_invariants(s);
		if (npre) {
			for (size_t k = 0; k < d.n; k++)
				if (d.v[k].action == TF_SCHED_PREEMPT)
					tf_sched_requeue(s, d.v[k].job, 15);
			tf_sched_tick(s, 15, &d);
			assert_true(started(&d, u));
			check_quota(s);
			check_invariants(s);
		}
		tf_sched_decisions_release(&d);
		tf_sched_free(s);
	}
}

struct inproject_case {
	const char *what;
	int quota_b;
	struct qjob run[4]; /* a holds 32 chips within its quota; b's jobs as listed */
	struct qjob urgent; /* project b */
	int victims[4];     /* 1: must be preempted, 2: any one of these */
	int want_preemptions;
	const char *reason; /* when nothing is preempted: a fragment of the urgent job's reason */
};

static const struct inproject_case inproject_cases[] = {
    {"over its quota: preempts its own lower-priority job",
     32,
     {QJ("v4:1x4x4", "b", 1, 1, 0), QJ("v4:1x4x4", "b", 1, 1, 0)},
     QJ("v4:1x4x4", "b", 8, 0, 1),
     {2, 2, 0, 0},
     1,
     NULL},
    {"its own lower priority before another project's",
     48,
     {QJ("v4:1x4x4", "b", 1, 1, 0), QJ("v4:1x4x4", "b", 1, 1, 0)},
     QJ("v4:1x4x4", "b", 8, 0, 1),
     {2, 2, 0, 0},
     1,
     NULL},
    {"a gang job of its own goes whole",
     32,
     {QJ("v4:2x4x4", "b", 1, 1, 0)},
     QJ("v4:1x4x4", "b", 8, 0, 1),
     {1, 0, 0, 0},
     1,
     NULL},
    {"never its own equal-priority or non-preemptible jobs",
     32,
     {QJ("v4:1x4x4", "b", 8, 1, 0), QJ("v4:1x4x4", "b", 1, 0, 0)},
     QJ("v4:1x4x4", "b", 8, 0, 1),
     {0, 0, 0, 0},
     0,
     "at quota"},
    {"room in the pool, none in the quota: an own job elsewhere goes",
     16,
     {QJ("v4:2x2x4", "b", 1, 1, 0)},
     QJ("v4:2x2x4", "b", 8, 0, 1),
     {1, 0, 0, 0},
     1,
     NULL},
};

/* Within a project, a higher-priority job makes quota room by preempting the project's own
 * lower-priority preemptible jobs, and the quota it waits for is not taken by jobs behind
 * it. Project a always holds 32 chips within its quota at priority 1, preemptible. */
static void test_sched_inproject_preemption_by_priority(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(inproject_cases) / sizeof(inproject_cases[0]); i++) {
		const struct inproject_case *c = &inproject_cases[i];
		struct tf_sched *s = mk("v4:4x4x4", TF_SCHED_BACKFILL);
		struct tf_sched_decisions d = {0};
		tf_sched_set_project(s, "a", 1, 32, 0);
		tf_sched_set_project(s, "b", 1, c->quota_b, 0);
		int ids[4] = {0};
		submit(s, "v4:2x4x4", "a", 1, 1, 1000, 0);
		for (int k = 0; k < 4; k++)
			if (c->run[k].slice)
				ids[k] = submit(s, c->run[k].slice, c->run[k].project,
				                c->run[k].prio, c->run[k].preemptible, 1000, 0);
		tf_sched_tick(s, 0, &d);
		for (int k = 0; k < 4; k++)
			if (ids[k])
				assert_true(started(&d, ids[k]));
		int u = submit(s, c->urgent.slice, c->urgent.project, c->urgent.prio,
		               c->urgent.preemptible, 100, 10);
		/* a lower-priority job of b behind it may not take the quota it waits for */
		int behind = submit(s, "v4-8", "b", 1, 0, 100, 10);
		tf_sched_tick(s, 10, &d);
		assert_false(started(&d, behind));
		int npre = count_action(&d, TF_SCHED_PREEMPT);
		if (npre != c->want_preemptions)
			fail_msg("case '%s': %d preemptions, want %d", c->what, npre,
			         c->want_preemptions);
		int any_of = 0;
		for (size_t k = 0; k < d.n; k++) {
			if (d.v[k].action != TF_SCHED_PREEMPT)
				continue;
			int idx = -1;
			for (int m = 0; m < 4; m++)
				if (ids[m] == d.v[k].job)
					idx = m;
			if (idx < 0 || !c->victims[idx])
				fail_msg("case '%s': preempted job %d, not an expected victim",
				         c->what, d.v[k].job);
			any_of += c->victims[idx] == 2;
			assert_int_equal(d.v[k].cause, u);
		}
		assert_true(any_of <= 1);
		check_quota(s);
		check_invariants(s);
		if (c->reason) {
			char why[200];
			tf_sched_job_reason(s, u, why, sizeof(why));
			if (!strstr(why, c->reason))
				fail_msg("case '%s': reason '%s'", c->what, why);
		} else {
			/* the victims checkpoint and exit; the urgent job starts within its quota
			 */
			for (size_t k = 0; k < d.n; k++)
				if (d.v[k].action == TF_SCHED_PREEMPT)
					tf_sched_requeue(s, d.v[k].job, 15);
			tf_sched_tick(s, 15, &d);
			assert_true(started(&d, u));
			struct tf_sched_job_info ji;
			tf_sched_job_info(s, u, 15, &ji);
			assert_false(ji.borrowed);
			if (s->projects[1].quota_used > c->quota_b)
				fail_msg("case '%s': b uses %d of its quota %d", c->what,
				         s->projects[1].quota_used, c->quota_b);
			check_quota(s);
			check_invariants(s);
		}
		tf_sched_decisions_release(&d);
		tf_sched_free(s);
	}
}

/* Property over random workloads with exact estimates: priority-8 non-preemptible jobs (the
 * only ones of that priority) never start later than the first reservation they were given
 * as the head, while lower-priority jobs of two projects with quotas borrow, backfill and
 * preempt each other around them. */
static void test_sched_urgent_never_starved_past_reservation(void **state)
{
	(void)state;
	static const char *slices[] = {"v4-8", "v4:2x2x2", "v4:2x2x4", "v4:2x4x4", "v4:4x4x4"};
	static const char *projects[] = {"a", "b"};
	int checked = 0;
	for (uint64_t seed = 1; seed <= 30; seed++) {
		struct tf_sched *s = mk("v4:4x4x4", TF_SCHED_BACKFILL);
		struct tf_sched_decisions d = {0};
		tf_sched_set_project(s, "a", 2, 32, 1);
		tf_sched_set_project(s, "b", 1, 32, 1);
		tf_sched_set_project(s, "u", 1, 64, 0);
		tf_sched_set_project(s, "c", 1, 64, 0); /* large jobs of a and b */
		enum { N = 60 };
		struct {
			double arrive, dur, start, resv, release;
			const char *slice, *project;
			int prio, preemptible, id, done;
		} jobs[N];
		uint64_t st = seed * 104729;
		double t = 0;
		for (int i = 0; i < N; i++) {
			st = st * 6364136223846793005ull + 1442695040888963407ull;
			t += (double)((st >> 33) % 30);
			int urgent = (st >> 50) % 8 == 0;
			jobs[i].arrive = t;
			jobs[i].dur = 10 + (double)((st >> 20) % 300);
			jobs[i].slice = slices[(st >> 40) % 5];
			jobs[i].project = urgent ? "u" : projects[(st >> 45) % 2];
			if (!urgent && !strcmp(jobs[i].slice, "v4:4x4x4"))
				jobs[i].project = "c"; /* beyond a's and b's quotas */
			jobs[i].prio = urgent ? 8 : 1 + (int)((st >> 47) % 5);
			jobs[i].preemptible = !urgent && (st >> 53) % 4 != 0;
			jobs[i].start = jobs[i].resv = jobs[i].release = -1;
			jobs[i].id = jobs[i].done = 0;
		}
		int next = 0, done = 0;
		for (double now = 0; done < N && now < 1e6; now += 1) {
			for (int i = 0; i < N; i++) {
				if (jobs[i].done || !jobs[i].id)
					continue;
				if (jobs[i].release >= 0 && jobs[i].release <= now) {
					tf_sched_requeue(s, jobs[i].id, now);
					jobs[i].release = -1;
					jobs[i].start = -1;
				} else if (jobs[i].start >= 0 && jobs[i].release < 0 &&
				           jobs[i].start + jobs[i].dur <= now) {
					tf_sched_finish(s, jobs[i].id, now, 1);
					jobs[i].done = 1;
					done++;
				}
			}
			while (next < N && jobs[next].arrive <= now) {
				jobs[next].id =
				    submit(s, jobs[next].slice, jobs[next].project, jobs[next].prio,
				           jobs[next].preemptible, jobs[next].dur, now);
				next++;
			}
			tf_sched_tick(s, now, &d);
			for (size_t k = 0; k < d.n; k++)
				for (int i = 0; i < N; i++) {
					if (jobs[i].id != d.v[k].job)
						continue;
					if (d.v[k].action == TF_SCHED_START)
						jobs[i].start = now;
					else if (d.v[k].action == TF_SCHED_PREEMPT)
						jobs[i].release = now + 5;
					else if (d.v[k].action == TF_SCHED_KILL)
						jobs[i].start = jobs[i].release = -1;
				}
			const struct pool *p = &s->pools[0];
			if (p->resv_job && p->resv_ok)
				for (int i = 0; i < N; i++)
					if (jobs[i].id == p->resv_job && jobs[i].prio == 8 &&
					    jobs[i].resv < 0 && jobs[i].start < 0)
						jobs[i].resv = p->resv_time;
			check_invariants(s);
			check_quota(s);
		}
		assert_int_equal(done, N);
		for (int i = 0; i < N; i++)
			if (jobs[i].resv >= 0) {
				checked++;
				if (jobs[i].start > jobs[i].resv + 1e-9)
					fail_msg(
					    "seed %llu urgent job %d started at %.0f after its "
					    "reservation %.0f",
					    (unsigned long long)seed, jobs[i].id, jobs[i].start,
					    jobs[i].resv);
			}
		tf_sched_decisions_release(&d);
		tf_sched_free(s);
	}
	assert_true(checked >= 15); /* the property was exercised (22 urgent heads) */
}

/* Fair share with quotas: weights 3:1 decide the split within quotas and of borrowed
 * capacity; a quota without borrowing caps a project whatever its weight. */
static void test_sched_fair_share_with_quotas(void **state)
{
	(void)state;
	const struct {
		int quota, borrow, preemptible;
		double want_ratio; /* chip-seconds a / b */
		int want_running;  /* jobs running per step (16 v4-8 fill the pool) */
	} cases[] = {
	    {48, 0, 0, 3, 16}, /* overcommitted quotas: weights decide */
	    {16, 1, 1, 3, 16}, /* 16 each within quota, the rest borrowed by weight */
	    {16, 0, 0, 1, 8},  /* no borrowing: quotas cap both, half the pool idle */
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct tf_sched *s = mk("v4:4x4x4", TF_SCHED_BACKFILL);
		struct tf_sched_decisions d = {0};
		tf_sched_set_project(s, "a", 3, cases[i].quota, cases[i].borrow);
		tf_sched_set_project(s, "b", 1, cases[i].quota, cases[i].borrow);
		for (int k = 0; k < 800; k++) {
			submit(s, "v4-8", "a", 1, cases[i].preemptible, 100, 0);
			submit(s, "v4-8", "b", 1, cases[i].preemptible, 100, 0);
		}
		int running[64], nrun = 0;
		for (double now = 0; now <= 4000; now += 100) {
			for (int k = 0; k < nrun; k++)
				tf_sched_finish(s, running[k], now, 1);
			nrun = 0;
			tf_sched_tick(s, now, &d);
			assert_int_equal(count_action(&d, TF_SCHED_PREEMPT), 0);
			for (size_t k = 0; k < d.n; k++)
				running[nrun++] = d.v[k].job;
			assert_int_equal(nrun, cases[i].want_running);
			check_quota(s);
		}
		struct tf_sched_usage ua, ub;
		tf_sched_project_usage(s, "a", 4000, &ua);
		tf_sched_project_usage(s, "b", 4000, &ub);
		double ratio = ua.chip_seconds / ub.chip_seconds;
		if (fabs(ratio - cases[i].want_ratio) > 0.1 * cases[i].want_ratio)
			fail_msg("case %zu: chip-seconds a/b = %.2f, want %.2f", i, ratio,
			         cases[i].want_ratio);
		tf_sched_decisions_release(&d);
		tf_sched_free(s);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_sched_fit_table),
	    cmocka_unit_test(test_sched_refuses_every_move_the_diagram_lacks),
	    cmocka_unit_test(test_sched_largest_free_box),
	    cmocka_unit_test(test_sched_largest_free_box_random),
	    cmocka_unit_test(test_sched_fragmentation_keeps_holes),
	    cmocka_unit_test(test_sched_priority_then_fifo),
	    cmocka_unit_test(test_sched_quota_table),
	    cmocka_unit_test(test_sched_quota_reclaims_borrowed),
	    cmocka_unit_test(test_sched_fair_share_over_time),
	    cmocka_unit_test(test_sched_backfill_table),
	    cmocka_unit_test(test_sched_backfill_never_delays_head),
	    cmocka_unit_test(test_sched_preemption_minimal_victims),
	    cmocka_unit_test(test_sched_preemption_grace_kill),
	    cmocka_unit_test(test_sched_chip_failure_requeues_elsewhere),
	    cmocka_unit_test(test_sched_slice_names),
	    cmocka_unit_test(test_sched_accounting),
	    cmocka_unit_test(test_sched_describe_json_and_text),
	    cmocka_unit_test(test_sched_cancel_and_bad_calls),
	    cmocka_unit_test(test_sched_queue_leave_and_return),
	    cmocka_unit_test(test_sched_simulate_small),
	    cmocka_unit_test(test_sched_simulate_trace_pinned),
	    cmocka_unit_test(test_sched_place_at_table),
	    cmocka_unit_test(test_sched_default_pools),
	    cmocka_unit_test(test_sched_reclaim_borrowers_first),
	    cmocka_unit_test(test_sched_inproject_preemption_by_priority),
	    cmocka_unit_test(test_sched_urgent_never_starved_past_reservation),
	    cmocka_unit_test(test_sched_fair_share_with_quotas),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

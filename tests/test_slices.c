/* test_slices.c — what `tpuflow slices` shows of the train attempts `tpuflow run` processes
 * record: a running attempt on the map at its recorded chips (through the engine with a test
 * train kind, and through the binary), finished attempts' slice-seconds in the accounting,
 * rows of runs that are no longer driven or that collide skipped with a reason, the shared
 * default pools, and no database created for a home without one. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "common/common.h"
#include "orchestrator/engine.h"
#include "orchestrator/slices.h"
#include "orchestrator/state.h"
#include "orchestrator/store.h"
#include "tests/testutil.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* Runs `tpuflow ARGS` and returns its stdout parsed as JSON (NULL on failure). */
static json_t *tpuflow_json(const char *args)
{
	char cmd[1024];
	snprintf(cmd, sizeof(cmd), "\"%s\" %s", getenv("TPUFLOW_BIN"), args);
	FILE *p = popen(cmd, "r");
	if (!p)
		return NULL;
	json_error_t je;
	json_t *doc = json_loadf(p, 0, &je);
	int st = pclose(p);
	if (st != 0) {
		json_decref(doc);
		return NULL;
	}
	return doc;
}

/* The chip indices (x + X*(y + Y*z)) of a recorded box in a pool of dims D. */
static int box_chips(json_t *box, const int D[3], int *out)
{
	json_t *o = json_object_get(box, "origin"), *s = json_object_get(box, "shape");
	int n = 0;
	for (int dz = 0; dz < json_integer_value(json_array_get(s, 2)); dz++)
		for (int dy = 0; dy < json_integer_value(json_array_get(s, 1)); dy++)
			for (int dx = 0; dx < json_integer_value(json_array_get(s, 0)); dx++) {
				int x = (int)(json_integer_value(json_array_get(o, 0)) + dx) % D[0];
				int y = (int)(json_integer_value(json_array_get(o, 1)) + dy) % D[1];
				int z = (int)(json_integer_value(json_array_get(o, 2)) + dz) % D[2];
				out[n++] = x + D[0] * (y + D[1] * z);
			}
	return n;
}

static json_t *pool_named(json_t *doc, const char *name)
{
	size_t i;
	json_t *p;
	json_array_foreach(json_object_get(doc, "pools"), i, p)
	{
		if (!strcmp(json_string_value(json_object_get(p, "name")), name))
			return p;
	}
	return NULL;
}

/* Checks that every recorded running attempt of `doc` (a `tpuflow slices --json` document)
 * holds exactly its box's chips on its pool's map, under the job named RUN/STEP. */
static void check_on_map(json_t *doc)
{
	size_t i, k;
	json_t *r, *j;
	json_array_foreach(json_object_get(json_object_get(doc, "recorded"), "running"), i, r)
	{
		json_t *pool = pool_named(doc, json_string_value(json_object_get(r, "pool")));
		assert_non_null(pool);
		json_t *dims = json_object_get(pool, "dims"),
		       *occ = json_object_get(pool, "occupancy");
		int D[3] = {(int)json_integer_value(json_array_get(dims, 0)),
		            (int)json_integer_value(json_array_get(dims, 1)),
		            (int)json_integer_value(json_array_get(dims, 2))};
		int chips[4096], n = box_chips(json_object_get(r, "box"), D, chips);
		json_int_t id = json_integer_value(json_object_get(r, "job"));
		assert_int_equal(n, json_integer_value(json_object_get(r, "chips")));
		int held = 0;
		for (size_t c = 0; c < json_array_size(occ); c++)
			held += json_integer_value(json_array_get(occ, c)) == id;
		assert_int_equal(held, n);
		for (int c = 0; c < n; c++)
			assert_int_equal(json_integer_value(json_array_get(occ, (size_t)chips[c])),
			                 id);
		/* the scheduler's running list names the job RUN/STEP */
		char name[256];
		snprintf(name, sizeof(name), "%s/%s", json_string_value(json_object_get(r, "run")),
		         json_string_value(json_object_get(r, "step")));
		int found = 0;
		json_array_foreach(json_object_get(doc, "running"), k, j)
		{
			if (json_integer_value(json_object_get(j, "id")) == id) {
				assert_string_equal(json_string_value(json_object_get(j, "name")),
				                    name);
				found = 1;
			}
		}
		assert_true(found);
	}
}

/* ---- a run's train steps, seen while they run ---- */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static json_t *seen_cli;  /* `tpuflow slices --json` taken while both train steps ran */
static json_t *seen_view; /* tf_slices_view_load's record at the same moment */
static int probed;

/* t2 (the short one) looks at the slices while t1 still holds its slice; t1 waits for it. */
static int probe_kind(struct tf_step_run *r)
{
	if (!strcmp(r->step, "t2") || !strcmp(r->step, "big")) {
		json_t *doc = tpuflow_json("slices --json --home home");
		struct tf_slices_view v = {0};
		char err[256];
		json_t *rec = NULL;
		if (tf_slices_view_load(r->home, NULL, 0, tf_now_wall(), &v, err, sizeof(err)) == 0)
			rec = json_incref(v.recorded);
		tf_slices_view_release(&v);
		pthread_mutex_lock(&mu);
		seen_cli = doc;
		seen_view = rec;
		probed = 1;
		pthread_mutex_unlock(&mu);
		return 0;
	}
	for (int i = 0; i < 500; i++) {
		pthread_mutex_lock(&mu);
		int done = probed;
		pthread_mutex_unlock(&mu);
		if (done || *r->cancel)
			break;
		usleep(10000);
	}
	usleep(50000);
	return 0;
}

static void test_slices_running_train_steps_on_the_map(void **state)
{
	(void)state;
	tf_test_write_file("p.yaml",
	                   "name: slicesview\n"
	                   "steps:\n"
	                   "  - {name: t1, type: train, accelerator: v4-32, with: {dataset: d}}\n"
	                   "  - {name: t2, type: train, accelerator: v4-8, with: {dataset: d}}\n");
	struct tf_engine_opts o = {.home = "home", .workers = 4};
	o.kinds[TF_STEP_TRAIN] = probe_kind;
	struct tf_engine_result res;
	struct tf_diag_list diags = {0};
	char err[512] = "";
	memset(&res, 0, sizeof(res));
	assert_int_equal(tf_engine_run_file(&o, "p.yaml", NULL, 0, &diags, &res, err, sizeof(err)),
	                 0);
	tf_diag_list_release(&diags);
	assert_int_equal(res.state, TF_RUN_SUCCEEDED);
	json_decref(res.summary);

	/* while they ran: both on the v4 pool, at their recorded boxes, named RUN/STEP */
	assert_non_null(seen_cli);
	json_t *rec = json_object_get(seen_cli, "recorded");
	assert_int_equal(json_array_size(json_object_get(rec, "running")), 2);
	assert_int_equal(json_array_size(json_object_get(rec, "skipped")), 0);
	check_on_map(seen_cli);
	json_t *v4 = pool_named(seen_cli, "v4");
	assert_non_null(v4);
	assert_string_equal(json_string_value(json_object_get(v4, "spec")), "v4:4x4x8");
	assert_int_equal(json_integer_value(json_object_get(v4, "busy")), 16 + 4);
	size_t i;
	json_t *r;
	json_array_foreach(json_object_get(rec, "running"), i, r)
	{
		assert_string_equal(json_string_value(json_object_get(r, "run")), res.run_id);
		assert_true(json_real_value(json_object_get(r, "running_seconds")) >= 0);
		const char *step = json_string_value(json_object_get(r, "step"));
		assert_int_equal(json_integer_value(json_object_get(r, "chips")),
		                 !strcmp(step, "t1") ? 16 : 4);
	}
	/* the library call saw the same placements */
	assert_non_null(seen_view);
	assert_int_equal(json_array_size(json_object_get(seen_view, "running")), 2);
	json_decref(seen_cli);
	json_decref(seen_view);

	/* afterwards: nothing holds a slice; both attempts are in the accounting */
	json_t *doc = tpuflow_json("slices --json --home home");
	assert_non_null(doc);
	rec = json_object_get(doc, "recorded");
	assert_int_equal(json_array_size(json_object_get(rec, "running")), 0);
	assert_int_equal(json_integer_value(json_object_get(pool_named(doc, "v4"), "busy")), 0);
	json_t *acct = json_object_get(rec, "accounting");
	json_t *run0 = json_array_get(json_object_get(acct, "runs"), 0);
	assert_string_equal(json_string_value(json_object_get(run0, "run")), res.run_id);
	assert_string_equal(json_string_value(json_object_get(run0, "pipeline")), "slicesview");
	assert_int_equal(json_integer_value(json_object_get(run0, "attempts")), 2);
	double ss = json_real_value(json_object_get(run0, "slice_seconds"));
	assert_true(ss >= 0.05);
	json_t *pr = json_array_get(json_object_get(acct, "projects"), 0);
	assert_string_equal(json_string_value(json_object_get(pr, "project")), "default");
	assert_true(fabs(json_real_value(json_object_get(pr, "slice_seconds")) - ss) < 1e-6);
	/* the rows carry the structured placement and were completed */
	struct tf_store *st;
	assert_int_equal(tf_store_open("home/tpuflow.db", 0, &st, err, sizeof(err)), 0);
	int64_t n = -1;
	assert_int_equal(tf_store_query_int(st, &n,
	                                    "SELECT count(*) FROM slice_jobs WHERE run_id=? AND "
	                                    "finished_at IS NOT NULL AND pool_spec='v4:4x4x8' AND "
	                                    "box_a*box_b*box_c = chips AND slice_seconds > 0",
	                                    "t", res.run_id),
	                 0);
	assert_int_equal(n, 2);
	tf_store_close(st);
	json_decref(doc);
}

/* A train attempt that cannot be placed yet is listed as waiting, with its run's reason. */
static void test_slices_waiting_attempt_has_its_reason(void **state)
{
	(void)state;
	tf_test_write_file(
	    "w.yaml", "name: waits\n"
	              "steps:\n"
	              "  - {name: big, type: train, accelerator: 'v4:4x4x8', with: {dataset: d}}\n"
	              "  - {name: small, type: train, accelerator: v4-8, with: {dataset: d}}\n");
	struct tf_engine_opts o = {.home = "whome", .workers = 4};
	o.kinds[TF_STEP_TRAIN] = probe_kind;
	struct tf_engine_result res;
	struct tf_diag_list diags = {0};
	char err[512] = "";
	memset(&res, 0, sizeof(res));
	probed = 1; /* small returns at once when it runs */
	assert_int_equal(tf_engine_run_file(&o, "w.yaml", NULL, 0, &diags, &res, err, sizeof(err)),
	                 0);
	tf_diag_list_release(&diags);
	assert_int_equal(res.state, TF_RUN_SUCCEEDED);
	json_decref(res.summary);
	json_decref(seen_cli);
	/* while big held the whole pool, small waited in its run's scheduler */
	assert_non_null(seen_view);
	assert_int_equal(json_array_size(json_object_get(seen_view, "running")), 1);
	json_t *w = json_array_get(json_object_get(seen_view, "waiting"), 0);
	assert_non_null(w);
	assert_string_equal(json_string_value(json_object_get(w, "step")), "small");
	assert_int_equal(json_integer_value(json_object_get(w, "chips")), 4);
	assert_non_null(strstr(json_string_value(json_object_get(w, "reason")), "needs 2x2x1"));
	json_decref(seen_view);
	seen_view = seen_cli = NULL;
	/* both held a slice in the end: two finished rows, none open */
	struct tf_store *st;
	int64_t n = -1;
	assert_int_equal(tf_store_open("whome/tpuflow.db", 0, &st, err, sizeof(err)), 0);
	assert_int_equal(
	    tf_store_query_int(st, &n,
	                       "SELECT count(*) FROM slice_jobs WHERE finished_at IS NOT "
	                       "NULL AND box_a IS NOT NULL AND wait_reason IS NULL",
	                       ""),
	    0);
	assert_int_equal(n, 2);
	tf_store_close(st);
}

/* ---- rows that must not break the view ---- */

/* A run with `nsteps` train steps each in a running attempt 1; returns its id in id. */
static void make_run(struct tf_store *st, const char *pipeline, int nsteps, char id[32])
{
	struct tf_run_step_def defs[4] = {
	    {"a", "train"}, {"b", "train"}, {"c", "train"}, {"d", "train"}};
	assert_int_equal(tf_run_create(st, pipeline, "name: x\n", NULL, "{}", NULL, defs,
	                               (size_t)nsteps, NULL, id),
	                 0);
	struct tf_run_owner holder; /* driven by this process: owner, pid, heartbeat */
	assert_int_equal(tf_run_claim(st, id, "0123456789abcdef0123456789abcdef",
	                              1u << TF_RUN_PENDING, 0, &holder),
	                 0);
	for (int i = 0; i < nsteps; i++) {
		struct tf_step_update u = {0};
		assert_int_equal(tf_step_set_state(st, id, defs[i].name, TF_STEP_RUNNING, &u), 0);
		assert_int_equal(tf_attempt_create(st, id, defs[i].name, 1), 0);
	}
}

static int64_t place(struct tf_store *st, const char *run, const char *step, const char *slice,
                     const char *pool_spec, int x, int y, int z, int a, int b, int c, double t)
{
	char pool[16];
	snprintf(pool, sizeof(pool), "%.*s", (int)(strchr(pool_spec, ':') - pool_spec), pool_spec);
	struct tf_slice_placement p = {.run = run,
	                               .step = step,
	                               .attempt = 1,
	                               .slice = slice,
	                               .pool = pool,
	                               .pool_spec = pool_spec,
	                               .box = {{x, y, z}, {a, b, c}},
	                               .chips = a * b * c,
	                               .priority = 5,
	                               .started_at = t};
	int64_t id = 0;
	assert_int_equal(tf_slice_job_started(st, &p, &id), 0);
	assert_true(id > 0);
	return id;
}

static const char *skip_reason(json_t *rec, const char *run, const char *step)
{
	size_t i;
	json_t *s;
	json_array_foreach(json_object_get(rec, "skipped"), i, s)
	{
		if (!strcmp(json_string_value(json_object_get(s, "run")), run) &&
		    !strcmp(json_string_value(json_object_get(s, "step")), step))
			return json_string_value(json_object_get(s, "reason"));
	}
	return NULL;
}

static void test_slices_stale_and_conflicting_rows_are_skipped(void **state)
{
	(void)state;
	struct tf_store *st;
	char err[256], live[32], gone[32], dead[32], other[32], stale[32];
	assert_int_equal(mkdir("h", 0755), 0);
	assert_int_equal(tf_store_open_home("h", &st, err, sizeof(err)), 0);
	double now = tf_now_wall();
	make_run(st, "live", 4, live);
	make_run(st, "gone", 1, gone);
	make_run(st, "dead", 1, dead);
	make_run(st, "other", 1, other);
	make_run(st, "stale", 1, stale);
	/* live: a at the origin, b elsewhere, c on a v5e pool (added to the view), d where a is */
	place(st, live, "a", "v4-8", "v4:4x4x8", 0, 0, 0, 2, 2, 1, now - 100);
	place(st, live, "b", "v4-32", "v4:4x4x8", 2, 2, 6, 2, 2, 4, now - 50); /* wraps z */
	place(st, live, "c", "v5litepod-16", "v5e:16x16", 4, 4, 0, 4, 4, 1, now - 10);
	place(st, live, "d", "v4-8", "v4:4x4x8", 1, 1, 0, 2, 2, 1, now - 5);
	/* gone: the run was interrupted without recording the attempt's end */
	place(st, gone, "a", "v4-8", "v4:4x4x8", 2, 0, 0, 2, 2, 1, now - 60);
	assert_int_equal(tf_run_set_state(st, gone, TF_RUN_INTERRUPTED, "stopped"), 0);
	/* dead: still "running" in the database, but its process exited */
	place(st, dead, "a", "v4-8", "v4:4x4x8", 0, 2, 0, 2, 2, 1, now - 60);
	pid_t child = fork();
	if (child == 0)
		_exit(0);
	waitpid(child, NULL, 0);
	assert_int_equal(
	    tf_store_run(st, "UPDATE runs SET pid=? WHERE id=?", "it", (int64_t)child, dead), 0);
	/* stale: its process lives, but its owner stopped renewing the heartbeat (an engine
	 * inside a daemon that no longer drives it) */
	place(st, stale, "a", "v4-8", "v4:4x4x8", 2, 0, 4, 2, 2, 1, now - 60);
	assert_int_equal(tf_store_run(st, "UPDATE runs SET heartbeat_at=? WHERE id=?", "dt",
	                              now - 2 * TF_RUN_LEASE_S, stale),
	                 0);
	/* other: its attempt already ended (lost) */
	place(st, other, "a", "v4-8", "v4:4x4x8", 0, 0, 4, 2, 2, 1, now - 60);
	struct tf_attempt_result ar = {.failure = TF_FAIL_INFRA, .exit_code = -1, .error = "lost"};
	assert_int_equal(tf_attempt_set_state(st, other, "a", 1, TF_ATTEMPT_LOST, &ar), 0);
	/* a finished attempt for the accounting */
	int64_t fin = place(st, live, "a", "v4-8", "v4:4x4x8", 0, 0, 2, 2, 2, 1, now - 400);
	assert_int_equal(tf_slice_job_finished(st, fin, now - 300, 100), 0);
	assert_int_equal(tf_slice_job_finished(st, 99999, now, 1), -ENOENT);
	tf_store_close(st);

	struct tf_slices_view v = {0};
	assert_int_equal(tf_slices_view_load("h", NULL, 0, now, &v, err, sizeof(err)), 0);
	json_t *rec = v.recorded;
	assert_int_equal(json_array_size(json_object_get(rec, "running")), 3);
	const char *why = skip_reason(rec, live, "d");
	assert_non_null(why);
	assert_non_null(strstr(why, "is held by job"));
	why = skip_reason(rec, gone, "a");
	assert_non_null(why);
	assert_non_null(strstr(why, "interrupted"));
	why = skip_reason(rec, dead, "a");
	assert_non_null(why);
	assert_non_null(strstr(why, "is gone"));
	why = skip_reason(rec, stale, "a");
	assert_non_null(why);
	assert_non_null(strstr(why, "has not renewed its heartbeat"));
	why = skip_reason(rec, other, "a");
	assert_non_null(why);
	assert_non_null(strstr(why, "lost"));
	/* the v5e pool was added for the row recorded on it */
	assert_int_equal(tf_sched_pool_count(v.sched), 2);
	assert_string_equal(tf_sched_pool_spec(v.sched, 1), "v5e:16x16");
	assert_true(fabs(tf_sched_utilization(v.sched, 0) - 20.0 / 128) < 1e-9);
	/* b has held its 16 chips for 50 s */
	json_t *b = json_array_get(json_object_get(rec, "running"), 1);
	assert_string_equal(json_string_value(json_object_get(b, "step")), "b");
	assert_true(fabs(json_real_value(json_object_get(b, "slice_seconds")) - 50) < 1e-6);
	assert_true(fabs(json_real_value(json_object_get(b, "chip_seconds")) - 800) < 1e-6);
	json_t *acct = json_object_get(rec, "accounting");
	assert_true(fabs(json_real_value(json_object_get(acct, "slice_seconds")) - 100) < 1e-6);
	assert_true(fabs(json_real_value(json_object_get(acct, "chip_seconds")) - 400) < 1e-6);
	tf_slices_view_release(&v);

	/* the binary: the same three on the map, the notes in text */
	json_t *doc = tpuflow_json("slices --json --home h");
	assert_non_null(doc);
	assert_int_equal(
	    json_array_size(json_object_get(json_object_get(doc, "recorded"), "running")), 3);
	check_on_map(doc);
	json_decref(doc);
	char cmd[512], out[16384];
	snprintf(cmd, sizeof(cmd), "\"%s\" slices --home h", getenv("TPUFLOW_BIN"));
	FILE *p = popen(cmd, "r");
	size_t n = fread(out, 1, sizeof(out) - 1, p);
	out[n] = '\0';
	assert_int_equal(pclose(p), 0);
	assert_non_null(strstr(out, "train attempts holding a slice now"));
	assert_non_null(strstr(out, "not shown"));
	assert_non_null(strstr(out, "v4 2,2,6+2x2x4"));
	assert_non_null(strstr(out, "slice-seconds of finished attempts: 100.0"));

	/* resuming the dead run closes what its process left open: the placed row is finished
	 * with unknown seconds, a request never placed disappears */
	assert_int_equal(tf_store_open_home("h", &st, err, sizeof(err)), 0);
	struct tf_slice_placement q = {
	    .run = dead, .step = "a", .attempt = 1, .slice = "v4-8", .chips = 4};
	int64_t qid = 0, cnt = -1;
	assert_int_equal(tf_slice_job_queued(st, &q, now, &qid), 0);
	assert_int_equal(tf_slice_job_waiting(st, qid, "needs 2x2x1"), 0);
	assert_int_equal(tf_slice_jobs_close_run(st, dead, now + 1), 0);
	assert_int_equal(tf_store_query_int(
	                     st, &cnt, "SELECT count(*) FROM slice_jobs WHERE run_id=?", "t", dead),
	                 0);
	assert_int_equal(cnt, 1);
	assert_int_equal(tf_store_query_int(st, &cnt,
	                                    "SELECT count(*) FROM slice_jobs WHERE run_id=? AND "
	                                    "finished_at IS NOT NULL AND slice_seconds IS NULL",
	                                    "t", dead),
	                 0);
	assert_int_equal(cnt, 1);
	assert_int_equal(tf_slice_job_forget(st, qid), -ENOENT);
	tf_store_close(st);
	assert_int_equal(tf_slices_view_load("h", NULL, 0, now, &v, err, sizeof(err)), 0);
	assert_null(skip_reason(v.recorded, dead, "a"));
	tf_slices_view_release(&v);
}

/* ---- pools ---- */

static void test_slices_pools_from_env_and_default(void **state)
{
	(void)state;
	char spec[64], err[256];
	unsetenv("TPUFLOW_POOLS");
	assert_int_equal(tf_slices_pool_for("v4", spec, sizeof(spec)), 0);
	assert_string_equal(spec, "v4:4x4x8");
	assert_int_equal(tf_slices_pool_for("v5e", spec, sizeof(spec)), 0);
	assert_string_equal(spec, "v5e:16x16");
	setenv("TPUFLOW_POOLS", "v5e:8x8, v4:4x4x4,v4:16x16x16", 1);
	assert_int_equal(tf_slices_pool_for("v4", spec, sizeof(spec)), 0);
	assert_string_equal(spec, "v4:4x4x4");
	assert_int_equal(tf_slices_pool_for("v5p", spec, sizeof(spec)), 0);
	assert_string_equal(spec, "v5p:4x4x4");
	assert_int_equal(tf_slices_pool_for("v9", spec, sizeof(spec)), -EINVAL);
	/* the view uses the same pools, named after their generation; nothing is created */
	struct tf_slices_view v = {0};
	assert_int_equal(tf_slices_view_load("nohome", NULL, 0, 0, &v, err, sizeof(err)), 0);
	assert_int_equal(tf_sched_pool_count(v.sched), 3);
	assert_string_equal(tf_sched_pool_name(v.sched, 0), "v5e");
	assert_string_equal(tf_sched_pool_name(v.sched, 1), "v4");
	assert_string_equal(tf_sched_pool_name(v.sched, 2), "v4-2");
	assert_true(json_is_null(json_object_get(v.recorded, "database")));
	tf_slices_view_release(&v);
	assert_int_equal(access("nohome", F_OK), -1);
	const char *bad[] = {"v4:4x4"};
	assert_int_equal(tf_slices_view_load("nohome", bad, 1, 0, &v, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "3D"));
	unsetenv("TPUFLOW_POOLS");
	/* a train step under $TPUFLOW_POOLS runs on that pool */
	setenv("TPUFLOW_POOLS", "v4:2x2x4", 1);
	FILE *f = fopen("q.yaml", "w");
	fputs("name: envpool\nsteps:\n  - {name: t, type: train, accelerator: v4-8, with: "
	      "{dataset: d}}\n",
	      f);
	fclose(f);
	struct tf_engine_opts o = {.home = "home2", .workers = 2};
	o.kinds[TF_STEP_TRAIN] = probe_kind;
	struct tf_engine_result res;
	struct tf_diag_list diags = {0};
	memset(&res, 0, sizeof(res));
	probed = 1; /* t is not t2: return at once */
	assert_int_equal(tf_engine_run_file(&o, "q.yaml", NULL, 0, &diags, &res, err, sizeof(err)),
	                 0);
	tf_diag_list_release(&diags);
	json_decref(res.summary);
	unsetenv("TPUFLOW_POOLS");
	struct tf_store *st;
	char *ps = NULL;
	assert_int_equal(tf_store_open("home2/tpuflow.db", 0, &st, err, sizeof(err)), 0);
	assert_int_equal(tf_store_query_text(st, &ps, "SELECT pool_spec FROM slice_jobs", ""), 0);
	assert_string_equal(ps, "v4:2x2x4");
	free(ps);
	tf_store_close(st);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_slices_running_train_steps_on_the_map),
	    cmocka_unit_test(test_slices_waiting_attempt_has_its_reason),
	    cmocka_unit_test(test_slices_stale_and_conflicting_rows_are_skipped),
	    cmocka_unit_test(test_slices_pools_from_env_and_default),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

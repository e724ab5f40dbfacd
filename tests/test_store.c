/* test_store.c — the state database: migrations, version guard, pragmas, the statement API and
 * the run/step/attempt state machines with their events. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "orchestrator/state.h"
#include "orchestrator/store.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static struct tf_store *open_db(const char *path)
{
	struct tf_store *st = NULL;
	char err[256];
	assert_int_equal(tf_store_open(path, TF_STORE_MIGRATE, &st, err, sizeof(err)), 0);
	return st;
}

static void test_store_migrates_to_latest_and_is_idempotent(void **state)
{
	(void)state;
	struct tf_store *st = open_db("m.db");
	int v = -1;
	assert_int_equal(tf_store_version(st, &v), 0);
	assert_int_equal(v, tf_store_latest_version());
	assert_true(v >= 1);
	int applied = -1;
	assert_int_equal(tf_store_migrate(st, &applied), 0);
	assert_int_equal(applied, 0);
	char *mode = NULL;
	assert_int_equal(tf_store_query_text(st, &mode, "PRAGMA journal_mode", ""), 0);
	assert_string_equal(mode, "wal");
	free(mode);
	int64_t sync = 0;
	assert_int_equal(tf_store_query_int(st, &sync, "PRAGMA synchronous", ""), 0);
	assert_int_equal(sync, 1); /* NORMAL: commits are synced by group commit (store.c) */
	const char *tables[] = {"pipelines", "runs",       "steps",       "attempts",
	                        "events",    "artifacts",  "models",      "model_versions",
	                        "aliases",   "step_cache", "deployments", "slice_jobs"};
	for (size_t i = 0; i < sizeof(tables) / sizeof(tables[0]); i++) {
		int64_t n = 0;
		assert_int_equal(tf_store_query_int(st, &n,
		                                    "SELECT count(*) FROM sqlite_master WHERE "
		                                    "type='table' AND name=?",
		                                    "t", tables[i]),
		                 0);
		assert_int_equal(n, 1);
	}
	/* runs.retry_of, which nothing wrote, is dropped (migration 0018) */
	int64_t cols = -1;
	assert_int_equal(tf_store_query_int(st, &cols,
	                                    "SELECT count(*) FROM pragma_table_info('runs') "
	                                    "WHERE name='retry_of'",
	                                    ""),
	                 0);
	assert_int_equal(cols, 0);
	assert_int_equal(tf_store_integrity_check(st), 0);
	tf_store_close(st);
	st = open_db("m.db");
	tf_store_close(st);
}

static void test_store_refuses_newer_database(void **state)
{
	(void)state;
	struct tf_store *st = open_db("new.db");
	char pragma[64];
	snprintf(pragma, sizeof(pragma), "PRAGMA user_version = %d", tf_store_latest_version() + 1);
	assert_int_equal(tf_store_exec(st, pragma), 0);
	tf_store_close(st);
	char err[256] = "";
	st = NULL;
	assert_int_equal(tf_store_open("new.db", TF_STORE_MIGRATE, &st, err, sizeof(err)), -EPROTO);
	assert_null(st);
	assert_non_null(strstr(err, "newer tpuflow"));
}

/* Group commit (store.c, invariant 6): commits of many threads all land, each commit returned
 * after a sync that covers it, and deferred commits share one fsync. */
struct committer {
	const char *path;
	int id, failures;
};

static void *commit_many(void *arg)
{
	struct committer *c = arg;
	struct tf_store *st = NULL;
	char err[256];
	if (tf_store_open(c->path, 0, &st, err, sizeof(err))) {
		c->failures = 25;
		return NULL;
	}
	for (int i = 0; i < 25; i++)
		c->failures += tf_store_run(st, "INSERT INTO g(thread, n) VALUES(?, ?)", "ii",
		                            (int64_t)c->id, (int64_t)i) != 0;
	tf_store_close(st);
	return NULL;
}

static void test_store_group_commit(void **state)
{
	(void)state;
	struct tf_store *st = open_db("g.db");
	assert_int_equal(tf_store_exec(st, "CREATE TABLE g(thread INTEGER, n INTEGER)"), 0);
	uint64_t c0, s0, c1, s1;
	tf_store_sync_stats(&c0, &s0);
	pthread_t th[8];
	struct committer cs[8];
	for (int i = 0; i < 8; i++) {
		cs[i] = (struct committer){.path = "g.db", .id = i};
		assert_int_equal(pthread_create(&th[i], NULL, commit_many, &cs[i]), 0);
	}
	for (int i = 0; i < 8; i++) {
		pthread_join(th[i], NULL);
		assert_int_equal(cs[i].failures, 0);
	}
	tf_store_sync_stats(&c1, &s1);
	assert_int_equal(c1 - c0, 200);
	assert_true(s1 - s0 >= 1 && s1 - s0 <= 200); /* fewer when commits overlapped */
	int64_t n = 0;
	assert_int_equal(tf_store_query_int(st, &n, "SELECT count(*) FROM g", ""), 0);
	assert_int_equal(n, 200);

	/* three deferred commits on three handles, then one wait: one fsync for the three */
	struct tf_store *h[3];
	for (int i = 0; i < 3; i++) {
		h[i] = open_db("g.db");
		tf_store_defer_sync(h[i], 1);
	}
	tf_store_sync_stats(&c0, &s0);
	for (int i = 0; i < 3; i++)
		assert_int_equal(tf_store_run(h[i], "INSERT INTO g(thread, n) VALUES(9, ?)", "i",
		                              (int64_t)i),
		                 0);
	tf_store_sync_stats(&c1, &s1);
	assert_int_equal(c1 - c0, 3);
	assert_int_equal(s1 - s0, 0); /* written, none synced yet */
	assert_int_equal(tf_store_sync(h[0]), 0);
	tf_store_sync_stats(&c1, &s1);
	assert_int_equal(s1 - s0, 1);
	assert_int_equal(tf_store_sync(h[2]), 0); /* already covered: no second fsync */
	tf_store_sync_stats(&c1, &s1);
	assert_int_equal(s1 - s0, 1);
	for (int i = 0; i < 3; i++)
		tf_store_close(h[i]);
	assert_int_equal(tf_store_query_int(st, &n, "SELECT count(*) FROM g", ""), 0);
	assert_int_equal(n, 203);
	tf_store_close(st);
}

static void test_store_statements_and_constraints(void **state)
{
	(void)state;
	struct tf_store *st = open_db("s.db");
	assert_int_equal(tf_store_exec(st, "CREATE TABLE t(a TEXT PRIMARY KEY, b INTEGER, c REAL)"),
	                 0);
	assert_int_equal(tf_store_begin(st), 0);
	assert_true(tf_store_in_transaction(st));
	assert_int_equal(
	    tf_store_run(st, "INSERT INTO t VALUES(?,?,?)", "tid", "x", (int64_t)7, 1.5), 0);
	assert_int_equal(tf_store_run(st, "INSERT INTO t VALUES(?,?,?)", "tnd", "y", 2.5), 0);
	assert_int_equal(tf_store_commit(st), 0);
	assert_false(tf_store_in_transaction(st));
	assert_int_equal(
	    tf_store_run(st, "INSERT INTO t VALUES(?,?,?)", "tid", "x", (int64_t)1, 0.0), -EEXIST);
	struct tf_stmt *s = tf_store_query(st, "SELECT a, b, c FROM t ORDER BY a", "");
	assert_non_null(s);
	assert_int_equal(tf_stmt_step(s), 1);
	assert_string_equal(tf_stmt_text(s, 0), "x");
	assert_int_equal(tf_stmt_int(s, 1), 7);
	assert_true(tf_stmt_double(s, 2) == 1.5);
	assert_int_equal(tf_stmt_step(s), 1);
	assert_true(tf_stmt_is_null(s, 1));
	assert_int_equal(tf_stmt_step(s), 0);
	tf_stmt_done(s);
	/* rollback discards */
	assert_int_equal(tf_store_begin(st), 0);
	assert_int_equal(tf_store_run(st, "DELETE FROM t", ""), 0);
	tf_store_rollback(st);
	int64_t n = 0;
	assert_int_equal(tf_store_query_int(st, &n, "SELECT count(*) FROM t", ""), 0);
	assert_int_equal(n, 2);
	assert_int_equal(tf_store_query_int(st, &n, "SELECT b FROM t WHERE a='zz'", ""), -ENOENT);
	/* statements are cached by their text, not by where it is: a buffer written again with
	 * other SQL runs the other SQL */
	char sql[64];
	snprintf(sql, sizeof(sql), "SELECT b FROM t WHERE a='x'");
	assert_int_equal(tf_store_query_int(st, &n, sql, ""), 0);
	assert_int_equal(n, 7);
	snprintf(sql, sizeof(sql), "SELECT count(*) FROM t");
	assert_int_equal(tf_store_query_int(st, &n, sql, ""), 0);
	assert_int_equal(n, 2);
	tf_store_close(st);
}

static void make_run(struct tf_store *st, char id[32])
{
	const struct tf_run_step_def steps[] = {{"a", "shell"}, {"b", "shell"}};
	assert_int_equal(
	    tf_run_create(st, "p", "name: p\n", "p.yaml", "{}", "file://x", steps, 2, NULL, id), 0);
}

static void test_store_run_state_machine(void **state)
{
	(void)state;
	struct tf_store *st = open_db("r.db");
	char id[32];
	make_run(st, id);
	enum tf_run_state rs;
	assert_int_equal(tf_run_get_state(st, id, &rs), 0);
	assert_int_equal(rs, TF_RUN_PENDING);
	assert_int_equal(tf_run_set_state(st, id, TF_RUN_SUCCEEDED, NULL), -EINVAL);
	assert_int_equal(tf_run_set_state(st, id, TF_RUN_RUNNING, NULL), 0);
	assert_int_equal(tf_run_set_state(st, id, TF_RUN_INTERRUPTED, "stopped"), 0);
	assert_int_equal(tf_run_set_state(st, id, TF_RUN_RUNNING, NULL), 0);
	assert_int_equal(tf_run_set_state(st, id, TF_RUN_SUCCEEDED, NULL), 0);
	assert_int_equal(tf_run_set_state(st, id, TF_RUN_RUNNING, NULL), -EINVAL);
	assert_int_equal(tf_run_set_state(st, "nope", TF_RUN_RUNNING, NULL), -ENOENT);
	tf_store_close(st);
}

/* The claim is a compare-and-set on the owner token: unowned or own runs are taken, a live
 * owner is refused (-EBUSY), a stale heartbeat or a dead pid is taken over, --force takes
 * anything, states outside the mask are refused (-EALREADY), and only the owner may heartbeat
 * or finish. */
static void test_store_run_claim_is_compare_and_set(void **state)
{
	(void)state;
	struct tf_store *st = open_db("c.db");
	char id[32];
	struct tf_run_owner h;
	const unsigned any = ~0u & ~(1u << TF_RUN_SUCCEEDED);
	const char *A = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", *B = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
	make_run(st, id);
	assert_int_equal(tf_run_claim(st, id, A, 1u << TF_RUN_PENDING, 0, &h), 0);
	assert_int_equal(h.state, TF_RUN_PENDING);
	assert_int_equal(tf_run_claim(st, id, A, any, 0, &h), 0); /* its own: again */
	assert_int_equal(tf_run_claim(st, id, B, any, 0, &h), -EBUSY);
	assert_string_equal(h.token, A);
	assert_int_equal(h.pid, (long)getpid());
	/* a live pid (this process) but a heartbeat older than the lease: gone */
	assert_int_equal(tf_store_run(st, "UPDATE runs SET heartbeat_at=heartbeat_at-? WHERE id=?",
	                              "dt", TF_RUN_LEASE_S + 1, id),
	                 0);
	assert_int_equal(tf_run_claim(st, id, B, any, 0, &h), 0);
	assert_int_equal(tf_run_heartbeat(st, id, A, NULL), -ESTALE);
	int cancel = -1;
	assert_int_equal(tf_run_heartbeat(st, id, B, &cancel), 0);
	assert_int_equal(cancel, 0);
	/* a fresh heartbeat but a pid that is gone: gone */
	pid_t child = fork();
	if (child == 0)
		_exit(0);
	waitpid(child, NULL, 0);
	assert_int_equal(
	    tf_store_run(st, "UPDATE runs SET pid=? WHERE id=?", "it", (int64_t)child, id), 0);
	assert_int_equal(tf_run_claim(st, id, A, any, 0, &h), 0);
	/* force: from a live owner */
	assert_int_equal(tf_run_claim(st, id, B, any, 0, &h), -EBUSY);
	assert_int_equal(tf_run_claim(st, id, B, any, 1, &h), 0);
	/* cancel request seen by the owner's heartbeat */
	enum tf_run_state rs;
	assert_int_equal(tf_run_request_cancel(st, id, &rs), 0);
	assert_int_equal(rs, TF_RUN_RUNNING);
	assert_int_equal(tf_run_heartbeat(st, id, B, &cancel), 0);
	assert_int_equal(cancel, TF_CANCEL_FIRST);
	/* taken by that heartbeat: the next sees nothing, a new request is a second cancel */
	assert_int_equal(tf_run_heartbeat(st, id, B, &cancel), 0);
	assert_int_equal(cancel, TF_CANCEL_NONE);
	assert_int_equal(tf_run_request_cancel(st, id, &rs), 0);
	assert_int_equal(tf_run_heartbeat(st, id, B, &cancel), 0);
	assert_int_equal(cancel, TF_CANCEL_AGAIN);
	/* only the owner ends it; the end releases it */
	assert_int_equal(tf_run_finish(st, id, A, TF_RUN_FAILED, "x", 0), -ESTALE);
	assert_int_equal(tf_run_finish(st, id, B, TF_RUN_SUCCEEDED, NULL, 0), 0);
	assert_int_equal(tf_run_owner_get(st, id, &h), 0);
	assert_string_equal(h.token, "");
	assert_int_equal(tf_run_claim(st, id, A, any, 0, &h), -EALREADY);
	/* a pending run nobody drives is cancelled at once */
	make_run(st, id);
	assert_int_equal(tf_run_request_cancel(st, id, &rs), 0);
	assert_int_equal(rs, TF_RUN_FAILED);
	tf_store_close(st);
}

static void test_store_step_and_attempt_transitions_log_events(void **state)
{
	(void)state;
	struct tf_store *st = open_db("e.db");
	char id[32];
	make_run(st, id);
	assert_int_equal(tf_step_set_state(st, id, "a", TF_STEP_SUCCEEDED, NULL), -EINVAL);
	assert_int_equal(tf_step_set_state(st, id, "a", TF_STEP_RUNNING, NULL), 0);
	assert_int_equal(tf_attempt_create(st, id, "a", 1), 0);
	struct tf_attempt_result r = {.failure = TF_FAIL_TIMEOUT,
	                              .exit_code = -1,
	                              .error = "timed out after 1s",
	                              .backoff = 0.5};
	assert_int_equal(tf_attempt_set_state(st, id, "a", 1, TF_ATTEMPT_FAILED, &r), 0);
	assert_int_equal(tf_attempt_set_state(st, id, "a", 1, TF_ATTEMPT_SUCCEEDED, NULL), -EINVAL);
	struct tf_step_update u = {.next_attempt_at = 1.0};
	assert_int_equal(tf_step_set_state(st, id, "a", TF_STEP_RETRYING, &u), 0);
	assert_int_equal(tf_step_set_state(st, id, "a", TF_STEP_RUNNING, NULL), 0);
	assert_int_equal(tf_attempt_create(st, id, "a", 2), 0);
	struct tf_attempt_result ok = {.exit_code = 0};
	assert_int_equal(tf_attempt_set_state(st, id, "a", 2, TF_ATTEMPT_SUCCEEDED, &ok), 0);
	struct tf_step_update done = {.outputs = "{\"x\":\"1\"}", .metrics = "{\"acc\":0.9}"};
	assert_int_equal(tf_step_set_state(st, id, "a", TF_STEP_SUCCEEDED, &done), 0);
	assert_int_equal(tf_step_set_state(st, id, "a", TF_STEP_PENDING, NULL), -EINVAL);
	struct tf_step_update skip = {.reason = "when: false"};
	assert_int_equal(tf_step_set_state(st, id, "b", TF_STEP_SKIPPED, &skip), 0);

	json_t *doc = NULL;
	assert_int_equal(tf_run_describe(st, id, &doc), 0);
	json_t *steps = json_object_get(doc, "steps");
	assert_int_equal(json_array_size(steps), 2);
	json_t *a = json_array_get(steps, 0);
	assert_string_equal(json_string_value(json_object_get(a, "state")), "succeeded");
	assert_int_equal(json_integer_value(json_object_get(a, "attempts")), 2);
	json_t *att = json_object_get(a, "attempts_detail");
	assert_int_equal(json_array_size(att), 2);
	assert_string_equal(
	    json_string_value(json_object_get(json_array_get(att, 0), "failure_class")), "timeout");
	assert_true(json_is_null(json_object_get(json_array_get(att, 0), "exit_code")));
	assert_int_equal(json_integer_value(json_object_get(json_array_get(att, 1), "exit_code")),
	                 0);
	assert_true(json_real_value(json_object_get(json_object_get(a, "metrics"), "acc")) == 0.9);
	json_t *b = json_array_get(steps, 1);
	assert_string_equal(json_string_value(json_object_get(b, "reason")), "when: false");
	json_decref(doc);

	json_t *ev = NULL;
	assert_int_equal(tf_run_events(st, id, "a", &ev), 0);
	/* step: running, retrying, running, succeeded; attempts: 2 created + 2 finished */
	assert_int_equal(json_array_size(ev), 8);
	json_decref(ev);

	/* group commit: transitions inside a caller's transaction vanish on rollback */
	assert_int_equal(tf_store_begin(st), 0);
	assert_int_equal(tf_step_set_state(st, id, "b", TF_STEP_PENDING, NULL), 0);
	tf_store_rollback(st);
	enum tf_step_state ss;
	assert_int_equal(tf_step_get_state(st, id, "b", &ss, NULL), 0);
	assert_int_equal(ss, TF_STEP_SKIPPED);

	char found[32];
	assert_int_equal(tf_run_find(st, "latest", found), 0);
	assert_string_equal(found, id);
	assert_int_equal(tf_run_find(st, id, found), 0);
	assert_int_equal(tf_run_find(st, "zzz", found), -ENOENT);
	tf_store_close(st);
}

static int run_cli(const char *args)
{
	char cmd[1024];
	snprintf(cmd, sizeof(cmd), "'%s' %s >cli.out 2>cli.err", getenv("TPUFLOW_BIN"), args);
	int st = system(cmd);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The process group goes in without waiting for a sync: a child process writes it and dies
 * without closing anything (as under kill -9); a new handle reads it. Inside a transaction
 * the row is written with the caller's transaction. */
static void test_store_pgid_unsynced_survives_the_process(void **state)
{
	(void)state;
	struct tf_store *st = open_db("pg.db");
	char id[32];
	make_run(st, id);
	assert_int_equal(tf_step_set_state(st, id, "a", TF_STEP_RUNNING, NULL), 0);
	assert_int_equal(tf_attempt_create(st, id, "a", 1), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct tf_store *c = NULL;
		char err[256];
		if (tf_store_open("pg.db", 0, &c, err, sizeof(err)) ||
		    tf_attempt_set_pgid(c, id, "a", 1, 4242))
			_exit(1);
		_exit(0); /* no close, no checkpoint */
	}
	int status = 0;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	struct tf_store *again = open_db("pg.db");
	int64_t v = 0;
	assert_int_equal(
	    tf_store_query_int(again, &v, "SELECT pgid FROM attempts WHERE run_id=?", "t", id), 0);
	assert_int_equal(v, 4242);
	assert_int_equal(tf_attempt_set_pgid(again, id, "a", 1, 77), 0);
	assert_int_equal(tf_store_begin(again), 0);
	assert_int_equal(tf_attempt_set_pgid(again, id, "a", 1, 78), 0);
	assert_int_equal(tf_store_commit(again), 0);
	assert_int_equal(
	    tf_store_query_int(st, &v, "SELECT pgid FROM attempts WHERE run_id=?", "t", id), 0);
	assert_int_equal(v, 78);
	tf_store_close(again);
	tf_store_close(st);
}

/* The reason tpuflow cancels a Slurm job is committed before the scancel: a process that
 * records it and dies without closing anything (as a coordinator killed with -9 right
 * after its scancel) leaves it for the next one, per attempt; an attempt with none reads
 * none. */
static void test_store_stop_intent_survives_the_process(void **state)
{
	(void)state;
	struct tf_store *st = open_db("stop.db");
	char id[32];
	make_run(st, id);
	assert_int_equal(tf_step_set_state(st, id, "a", TF_STEP_RUNNING, NULL), 0);
	assert_int_equal(tf_attempt_create(st, id, "a", 1), 0);
	assert_int_equal(tf_attempt_create(st, id, "a", 2), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct tf_store *c = NULL;
		char err[256];
		if (tf_store_open("stop.db", 0, &c, err, sizeof(err)) ||
		    tf_attempt_stop_record(c, id, "a", 2, 12, TF_FAIL_TIMEOUT))
			_exit(1);
		_exit(0); /* no close, no checkpoint */
	}
	int status = 0;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	struct tf_store *again = open_db("stop.db");
	enum tf_fail_class why = TF_FAIL_ERROR;
	assert_int_equal(tf_attempt_stop_intent(again, id, "a", 2, &why), 0);
	assert_int_equal(why, TF_FAIL_TIMEOUT);
	assert_int_equal(tf_attempt_stop_intent(again, id, "a", 1, &why), 0);
	assert_int_equal(why, TF_FAIL_NONE);
	assert_int_equal(tf_attempt_stop_record(again, id, "a", 1, 11, TF_FAIL_NONE), -EINVAL);
	json_t *ev = NULL;
	assert_int_equal(tf_run_events(again, id, "a", &ev), 0);
	int said = 0;
	for (size_t i = 0; i < json_array_size(ev); i++) {
		const char *m = json_string_value(json_object_get(json_array_get(ev, i), "message"));
		said |= m && strstr(m, "tpuflow cancels Slurm job 12 (scancel): it ran past") != NULL;
	}
	assert_true(said);
	json_decref(ev);
	tf_store_close(again);
	tf_store_close(st);
}

static void test_store_db_command_status_migrate_and_refusal(void **state)
{
	(void)state;
	if (!getenv("TPUFLOW_BIN"))
		skip();
	assert_int_equal(run_cli("--home h db status --json"), 0);
	json_t *j = json_load_file("cli.out", 0, NULL);
	assert_int_equal(json_integer_value(json_object_get(j, "version")), 0);
	assert_int_equal(json_array_size(json_object_get(j, "pending")),
	                 (size_t)tf_store_latest_version());
	json_decref(j);
	assert_int_equal(run_cli("--home h db migrate --json"), 0);
	j = json_load_file("cli.out", 0, NULL);
	assert_int_equal(json_integer_value(json_object_get(j, "version")),
	                 tf_store_latest_version());
	json_decref(j);
	/* a user_version set back below the tables: migrate says what happened */
	struct tf_store *st = open_db("h/tpuflow.db");
	assert_int_equal(tf_store_exec(st, "PRAGMA user_version = 3"), 0);
	tf_store_close(st);
	char err[1024] = "";
	st = NULL;
	assert_int_not_equal(tf_store_open("h/tpuflow.db", TF_STORE_MIGRATE, &st, err, sizeof(err)),
	                     0);
	if (!strstr(err, "newer than its schema version"))
		fail_msg("migrate over tables ahead of user_version said: %s", err);
	assert_int_equal(tf_store_open("h/tpuflow.db", 0, &st, err, sizeof(err)), 0);
	assert_int_equal(tf_store_exec(st, "PRAGMA user_version = 999"), 0);
	tf_store_close(st);
	/* status reports a newer database (78, and what it is) instead of refusing to look */
	assert_int_equal(run_cli("--home h db status --json"), 78);
	j = json_load_file("cli.out", 0, NULL);
	assert_non_null(j);
	assert_int_equal(json_integer_value(json_object_get(j, "version")), 999);
	assert_true(json_is_true(json_object_get(j, "newer")));
	json_decref(j);
	assert_int_equal(run_cli("--home h runs list"), 78);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_store_migrates_to_latest_and_is_idempotent),
	    cmocka_unit_test(test_store_refuses_newer_database),
	    cmocka_unit_test(test_store_statements_and_constraints),
	    cmocka_unit_test(test_store_group_commit),
	    cmocka_unit_test(test_store_run_state_machine),
	    cmocka_unit_test(test_store_run_claim_is_compare_and_set),
	    cmocka_unit_test(test_store_step_and_attempt_transitions_log_events),
	    cmocka_unit_test(test_store_pgid_unsynced_survives_the_process),
	    cmocka_unit_test(test_store_stop_intent_survives_the_process),
	    cmocka_unit_test(test_store_db_command_status_migrate_and_refusal),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

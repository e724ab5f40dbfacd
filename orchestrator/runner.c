/* runner.c — owns the runs a long-lived process drives (runner.h): the slots of engine
 * handles, the choice of what to take from the database, draining; and the client side of
 * finding and waking the daemon of a home. */
#include "orchestrator/runner.h"
#include "orchestrator/state.h"

#define TF_LOG_TAG "runner"
#include "common/common.h"
#include "common/log.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* ---- the client side ---------------------------------------------------------------- */

int tf_daemon_find(const char *home, struct tf_daemon_info *info)
{
	char *lock = tf_xasprintf("%s/%s", home, TF_DAEMON_LOCK);
	int fd = open(lock, O_RDONLY | O_CLOEXEC), live = 0;
	free(lock);
	if (fd < 0)
		return 0;
	if (flock(fd, LOCK_SH | LOCK_NB) < 0)
		live = errno == EWOULDBLOCK;
	else
		flock(fd, LOCK_UN);
	close(fd);
	if (!live)
		return 0;
	if (info) {
		memset(info, 0, sizeof(*info));
		char *path = tf_xasprintf("%s/%s", home, TF_DAEMON_JSON);
		json_t *j = json_load_file(path, 0, NULL);
		free(path);
		info->pid = (long)json_integer_value(json_object_get(j, "pid"));
		snprintf(info->listen, sizeof(info->listen), "%s",
		         json_string_value(json_object_get(j, "listen"))
		             ? json_string_value(json_object_get(j, "listen"))
		             : "");
		snprintf(info->version, sizeof(info->version), "%s",
		         json_string_value(json_object_get(j, "version"))
		             ? json_string_value(json_object_get(j, "version"))
		             : "");
		info->started_at = json_number_value(json_object_get(j, "started_at"));
		json_decref(j);
	}
	return 1;
}

int tf_daemon_wake(const char *home)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	int n = snprintf(a.sun_path, sizeof(a.sun_path), "%s/%s", home, TF_DAEMON_SOCK);
	if (n < 0 || (size_t)n >= sizeof(a.sun_path))
		return -ENAMETOOLONG;
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	int rc =
	    sendto(fd, "wake", 4, MSG_DONTWAIT, (struct sockaddr *)&a, sizeof(a)) < 0 ? -errno : 0;
	close(fd);
	return rc;
}

/* ---- the runner ----------------------------------------------------------------------- */

struct slot {
	struct tf_engine *e;  /* the engine driving the run */
	struct tf_store *db;  /* the handle its coordinator borrows */
	char run[32];
};

struct tf_runner {
	char *home;
	int max_runs, workers;
	int pool_size;         /* threads of the shared pool (made at the first run) */
	struct tf_pool *pool;  /* runs every step of every run driven here */
	double grace; /* SIGTERM to SIGKILL for step processes (tf_engine_opts.grace) */
	int draining;
	struct tf_store *db;    /* the runner's own handle (choosing runs) */
	struct slot *slots;     /* runs driven now */
	int nslots, cap;
	struct tf_store **idle; /* handles of engines that ended, for the next ones: a new
	                           connection costs an open and, at its first commit, a sync
	                           of the home directory (SQLite's for a new WAL handle) */
	int nidle;
};

struct tf_runner *tf_runner_new(const struct tf_runner_opts *o, char *err, size_t errlen)
{
	struct tf_runner *r = tf_xcalloc(1, sizeof(*r));
	r->home = tf_xstrdup(o->home);
	r->grace = o->grace;
	tf_runner_set_limits(r, o->max_runs, o->workers, o->pool);
	if (tf_store_open_home(r->home, &r->db, err, errlen)) {
		free(r->home);
		free(r);
		return NULL;
	}
	return r;
}

void tf_runner_set_limits(struct tf_runner *r, int max_runs, int workers, int pool)
{
	r->max_runs = max_runs > 0 ? max_runs : 4;
	r->workers = workers > 0 ? workers : 0;
	pool = pool > 0 ? pool : TF_RUNNER_POOL_DEFAULT;
	if (r->pool && pool != r->pool_size)
		tf_warn("pool=%d takes effect when the daemon starts again (the pool has %d threads)",
		        pool, r->pool_size);
	else
		r->pool_size = pool;
}

int tf_runner_count(const struct tf_runner *r)
{
	return r->nslots;
}

static int driving(const struct tf_runner *r, const char *run)
{
	for (int i = 0; i < r->nslots; i++)
		if (!strcmp(r->slots[i].run, run))
			return 1;
	return 0;
}

static void idle_put(struct tf_runner *r, struct tf_store *db)
{
	if (!db)
		return;
	if (r->nidle >= r->max_runs) {
		tf_store_close(db);
		return;
	}
	r->idle = tf_xrealloc(r->idle, (size_t)(r->nidle + 1) * sizeof(*r->idle));
	r->idle[r->nidle++] = db;
}

/* Starts an engine on `run` (claimed inside tf_engine_start). */
static int take(struct tf_runner *r, const char *run)
{
	if (!r->pool && !(r->pool = tf_engine_pool_new(r->pool_size))) {
		tf_error("run '%s' cannot be started: no worker pool of %d threads", run,
		         r->pool_size);
		return 0;
	}
	struct tf_engine_opts o = {.home = r->home,
	                           .workers = r->workers,
	                           .grace = r->grace,
	                           .pool = r->pool,
	                           .ml_local = 1}; /* a crashing trainer never takes us down */
	struct tf_engine_req rq = {.run_id = run};
	struct tf_diag_list diags = {0};
	struct tf_engine *e = NULL;
	char err[1024] = "";
	if (r->nidle)
		o.db = r->idle[--r->nidle];
	else if (tf_store_open_home(r->home, &o.db, err, sizeof(err))) {
		tf_error("run '%s' cannot be started: %s", run, err);
		return 0;
	}
	int rc = tf_engine_start(&o, &rq, &e, &diags, err, sizeof(err));
	tf_diag_list_release(&diags);
	if (rc)
		idle_put(r, o.db);
	if (rc == -EBUSY || rc == -EALREADY)
		return 0; /* another process took it first, or it ended meanwhile */
	if (rc) {
		tf_error("run '%s' cannot be started: %s", run, err);
		/* a run that can never start (its pipeline no longer loads) is failed, so it is
		 * not picked again and again */
		enum tf_run_state st;
		if (rc == -EINVAL && tf_run_get_state(r->db, run, &st) == 0 && st == TF_RUN_PENDING)
			tf_run_set_state(r->db, run, TF_RUN_FAILED, err);
		return 0;
	}
	if (r->nslots == r->cap) {
		r->cap = r->cap ? 2 * r->cap : 8;
		r->slots = tf_xrealloc(r->slots, (size_t)r->cap * sizeof(*r->slots));
	}
	r->slots[r->nslots].e = e;
	r->slots[r->nslots].db = o.db;
	snprintf(r->slots[r->nslots].run, sizeof(r->slots[0].run), "%s", run);
	r->nslots++;
	tf_info("run '%s' started", run);
	return 1;
}

int tf_runner_poll(struct tf_runner *r)
{
	if (r->draining || r->nslots >= r->max_runs)
		return 0;
	/* candidates, best first; the claim inside tf_engine_start decides */
	struct tf_stmt *q = tf_store_query(
	    r->db,
	    "SELECT id, state FROM runs WHERE (state='pending' AND owner IS NULL) OR "
	    "(state IN ('interrupted', 'failed') AND resume_on_start=1) OR state='running' "
	    "ORDER BY state='running' DESC, priority DESC, created_at LIMIT 256",
	    "");
	char(*ids)[32] = NULL;
	int n = 0, cap = 0, started = 0;
	while (q && tf_stmt_step(q) == 1) {
		const char *id = tf_stmt_text(q, 0);
		if (!id || strlen(id) >= 32 || driving(r, id))
			continue;
		if (n == cap) {
			cap = cap ? 2 * cap : 16;
			ids = tf_xrealloc(ids, (size_t)cap * sizeof(*ids));
		}
		snprintf(ids[n++], 32, "%s", id);
	}
	tf_stmt_done(q);
	for (int i = 0; i < n && r->nslots < r->max_runs; i++) {
		struct tf_run_owner h;
		if (tf_run_owner_get(r->db, ids[i], &h))
			continue;
		if (tf_run_owner_live(&h))
			continue; /* a live process drives it */
		if (h.state == TF_RUN_RUNNING)
			tf_info("run '%s': its owner (pid %ld) is gone: adopting it", ids[i],
			        h.pid);
		started += take(r, ids[i]);
	}
	free(ids);
	return started;
}

static void end_slot(struct tf_runner *r, int i)
{
	struct tf_engine_result res = {0};
	char err[1024] = "";
	int rc = tf_engine_wait(r->slots[i].e, &res, err, sizeof(err));
	if (rc)
		tf_warn("run '%s': %s", r->slots[i].run, err);
	else
		tf_info("run '%s' %s", r->slots[i].run, tf_run_state_name(res.state));
	json_decref(res.summary);
	tf_engine_free(r->slots[i].e);
	idle_put(r, r->slots[i].db);
	r->slots[i] = r->slots[--r->nslots];
}

int tf_runner_reap(struct tf_runner *r)
{
	for (int i = 0; i < r->nslots;)
		if (tf_engine_done(r->slots[i].e))
			end_slot(r, i);
		else
			i++;
	return r->nslots;
}

int tf_runner_drain(struct tf_runner *r, double grace)
{
	r->draining = 1;
	for (int i = 0; i < r->nslots; i++)
		tf_engine_drain(r->slots[i].e);
	double t0 = tf_now_monotonic();
	while (tf_runner_reap(r) > 0 && tf_now_monotonic() - t0 < grace) {
		struct timespec ts = {0, 20 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	return r->nslots;
}

void tf_runner_free(struct tf_runner *r)
{
	if (!r)
		return;
	for (int i = 0; i < r->nslots; i++)
		tf_engine_cancel(r->slots[i].e);
	while (r->nslots)
		end_slot(r, r->nslots - 1);
	free(r->slots);
	tf_pool_free(r->pool); /* every engine has ended */
	while (r->nidle)
		tf_store_close(r->idle[--r->nidle]);
	free(r->idle);
	tf_store_close(r->db);
	free(r->home);
	free(r);
}

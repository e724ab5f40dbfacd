/* runner.h — the runs a long-lived process drives (the daemon, web/daemon.c): it takes
 * submitted runs and runs a dead owner left behind out of the database, drives each through
 * an engine handle, and drains them on shutdown. The steps of all its runs run on one worker
 * pool (orchestrator/pool.h), so `pool` steps at most run at once in the process, ordered by
 * run priority, then fair share; `max_runs` caps the runs driven (each has a coordinator
 * thread that mostly sleeps) and `workers` one run's share of the pool. Also the client side that every process uses
 * to find the daemon serving a home and to wake it.
 *
 * How a client finds the daemon (docs/daemon.md): the daemon holds an exclusive flock on
 * HOME/daemon.lock for as long as it runs and describes itself in HOME/daemon.json (address,
 * pid, version, start time). A client that cannot take a shared lock on daemon.lock knows a
 * daemon is alive; it reads daemon.json for the rest. A submitted run is committed to the
 * database first; then the client sends one datagram to the unix socket HOME/daemon.sock so
 * the daemon looks at once (without it, the daemon still finds the run within a second).
 */
#ifndef TF_RUNNER_H
#define TF_RUNNER_H

#include "orchestrator/engine.h"

#include <limits.h>

/* ---- the client side ---------------------------------------------------------------- */

#define TF_DAEMON_LOCK "daemon.lock"
#define TF_DAEMON_JSON "daemon.json"
#define TF_DAEMON_SOCK "daemon.sock"

struct tf_daemon_info {
	long pid;          /* the daemon's process */
	char listen[128];  /* its HTTP address, HOST:PORT */
	char version[32];  /* its tpuflow version */
	double started_at; /* wall time it started */
};

/* 1 and *info (may be NULL) when a live daemon serves `home`, 0 when none does. */
int tf_daemon_find(const char *home, struct tf_daemon_info *info);

/* Tells the daemon of `home` that there is work (a datagram to HOME/daemon.sock). 0, or a
 * negative errno when no daemon listens (it still finds the work on its own). */
int tf_daemon_wake(const char *home);

/* ---- the runner ----------------------------------------------------------------------- */

struct tf_runner;

#define TF_RUNNER_POOL_DEFAULT 8

struct tf_runner_opts {
	const char *home; /* state home (borrowed for the runner's life) */
	int max_runs;     /* runs driven at once (0: 4) */
	int workers;      /* steps at once per run (0: the engine's default) */
	int pool;         /* steps at once across all runs: the shared pool's threads
	                     (0: TF_RUNNER_POOL_DEFAULT) */
	double grace;     /* seconds a step's process gets to stop (checkpoint) after SIGTERM
	                     when a run is drained, preempted or cancelled (0: 10 s) */
};

/* A runner over `home` (migrated); NULL on failure with a message in err. */
struct tf_runner *tf_runner_new(const struct tf_runner_opts *o, char *err, size_t errlen);

/* Changes the limits (SIGHUP re-reads them); runs already driven keep theirs. The pool's size
 * is fixed once the first run started (a change is logged and waits for a restart). */
void tf_runner_set_limits(struct tf_runner *r, int max_runs, int workers, int pool);

/* Takes what the database holds for it, up to max_runs at once: pending runs nobody drives
 * (highest priority, then oldest first), runs left `running` by an owner that is gone (the
 * rule of `runs resume`), and `interrupted` runs a draining daemon marked for the next one.
 * Returns how many it started (a run another process claimed first is skipped). */
int tf_runner_poll(struct tf_runner *r);

/* Frees the engines whose run ended; returns how many runs are still driven. */
int tf_runner_reap(struct tf_runner *r);

/* Runs driven now. */
int tf_runner_count(const struct tf_runner *r);

/* Stops taking runs and drains the ones it drives: their running steps are cancelled (a train
 * step's process gets SIGTERM, writes a checkpoint and exits), and each run ends `interrupted`
 * and marked for the next daemon. Waits up to `grace` seconds; returns how many runs had not
 * ended by then (they stay `running` under this owner and are adopted as orphans later). */
int tf_runner_drain(struct tf_runner *r, double grace);

/* Frees the runner; runs still driven are cancelled and waited for first. NULL: no-op. */
void tf_runner_free(struct tf_runner *r);

#endif

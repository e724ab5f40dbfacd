/* pool.h — a fixed pool of worker threads that a long-lived process (the daemon) shares between
 * every run it drives, and the slots that decide which run's step runs next.
 *
 * A slot is the right to run one step: the pool has as many as it has threads, so the steps
 * running at once in the process never exceed the pool, however many runs there are. An
 * engine (orchestrator/engine.h, tf_engine_opts.pool) takes a slot when it admits a step and
 * gives it back when the step's end is applied; a step that finds no slot waits, and its run
 * is put on the pool's waiting list. When a slot is given back and runs wait, it is reserved
 * for one of them and that run is woken (its `kick`):
 *
 *   - the highest run priority first (runs.priority: what the scheduler orders by),
 *   - among equal priorities, the run holding the fewest slots (fair share),
 *   - then the one waiting longest.
 *
 * So a high-priority run's steps take the next slots however many steps a low-priority run
 * has queued, and runs of one priority share the pool evenly. Work is handed to the threads
 * as jobs (tf_pool_run), taken in order.
 *
 * Locking: the pool's mutex is taken before an engine's (a kick runs under the pool's mutex
 * and takes the engine's); so no pool function may be called while holding an engine's mutex.
 */
#ifndef TF_POOL_H
#define TF_POOL_H

struct tf_pool;

/* What the pool knows of one run that uses it (embedded in the engine; fields are the pool's,
 * under its mutex, except those the caller fills before the first call). */
struct tf_pool_client {
	void (*kick)(void *ctx); /* a slot was reserved for it: look again (caller fills) */
	void *ctx;               /* (caller fills) */
	int priority;            /* its run's priority, 0..9 (as of its last tf_pool_acquire) */
	int held;                /* slots it holds */
	int reserved;            /* slots reserved for it, not yet taken */
	int waiting;             /* on the waiting list */
	unsigned long long since; /* when it started waiting (a sequence number) */
	struct tf_pool_client *next;
};

/* A pool of `nthreads` threads (1..1024); `local_free` (may be NULL) frees what a job left in
 * its thread's local slot when the thread ends. NULL when no thread could be started. */
struct tf_pool *tf_pool_new(int nthreads, void (*local_free)(void *local));
/* Joins the threads once every job ran. Every client must have left. NULL: no-op. */
void tf_pool_free(struct tf_pool *p);
int tf_pool_size(const struct tf_pool *p);

/* Takes a slot for c, whose run has `priority` (0..9): 1 when it has one, 0 when it must wait
 * (c is then on the waiting list and c->kick is called once a slot is reserved for it; it
 * takes it by calling again). */
int tf_pool_acquire(struct tf_pool *p, struct tf_pool_client *c, int priority);
/* Gives back a slot c held; reserves it for the best waiting run, if any, and kicks it. */
void tf_pool_release(struct tf_pool *p, struct tf_pool_client *c);
/* c waits for no slot any more: off the waiting list, its reserved slots go to others. */
void tf_pool_leave(struct tf_pool *p, struct tf_pool_client *c);

/* Runs fn(arg, local) on one of the threads, in submission order; `local` is that thread's
 * slot for state it keeps between jobs (handles), NULL at first. */
void tf_pool_run(struct tf_pool *p, void (*fn)(void *arg, void **local), void *arg);

/* Slots in use now, and the most ever in use at once (for tests and /metrics). */
void tf_pool_stats(struct tf_pool *p, int *busy, int *busy_max);

#endif

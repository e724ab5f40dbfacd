/* pool.c — owns the shared worker pool (pool.h): its threads, the job queue they take from,
 * and the slots with the waiting list that orders runs by priority, then fair share. */
#include "orchestrator/pool.h"

#define TF_LOG_TAG "pool"
#include "common/common.h"
#include "common/log.h"

#include <pthread.h>
#include <stdlib.h>

struct job {
	void (*fn)(void *arg, void **local);
	void *arg;
	struct job *next;
};

struct tf_pool {
	pthread_mutex_t mu;
	pthread_cond_t cv; /* threads: a job was queued, or quit */
	pthread_t *threads;
	int nthreads;
	void (*local_free)(void *local);
	struct job *head, *tail; /* jobs not taken yet */
	int quit;
	int free_slots; /* slots neither held nor reserved */
	int held;       /* slots held: steps admitted */
	int held_max;
	struct tf_pool_client *waiting; /* runs waiting for a slot (unordered) */
	unsigned long long seq;
};

static void *thread_main(void *arg)
{
	struct tf_pool *p = arg;
	void *local = NULL;
	pthread_mutex_lock(&p->mu);
	for (;;) {
		while (!p->quit && !p->head)
			pthread_cond_wait(&p->cv, &p->mu);
		if (!p->head)
			break; /* quit, and every job ran */
		struct job *j = p->head;
		p->head = j->next;
		if (!p->head)
			p->tail = NULL;
		pthread_mutex_unlock(&p->mu);
		j->fn(j->arg, &local);
		free(j);
		pthread_mutex_lock(&p->mu);
	}
	pthread_mutex_unlock(&p->mu);
	if (local && p->local_free)
		p->local_free(local);
	return NULL;
}

struct tf_pool *tf_pool_new(int nthreads, void (*local_free)(void *local))
{
	if (nthreads < 1 || nthreads > 1024)
		return NULL;
	struct tf_pool *p = tf_xcalloc(1, sizeof(*p));
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cv, NULL);
	p->local_free = local_free;
	p->free_slots = nthreads;
	p->threads = tf_xcalloc((size_t)nthreads, sizeof(*p->threads));
	for (; p->nthreads < nthreads; p->nthreads++)
		if (pthread_create(&p->threads[p->nthreads], NULL, thread_main, p))
			break;
	if (p->nthreads < nthreads) {
		tf_error("cannot start the worker pool's thread %d of %d", p->nthreads + 1,
		         nthreads);
		tf_pool_free(p);
		return NULL;
	}
	return p;
}

void tf_pool_free(struct tf_pool *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	TF_ASSERT(!p->waiting); /* every client left */
	p->quit = 1;
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
	for (int i = 0; i < p->nthreads; i++)
		pthread_join(p->threads[i], NULL);
	free(p->threads);
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->cv);
	free(p);
}

int tf_pool_size(const struct tf_pool *p)
{
	return p->nthreads;
}

/* ---- slots (under p->mu) ---------------------------------------------------------------- */

static void unwait(struct tf_pool *p, struct tf_pool_client *c)
{
	if (!c->waiting)
		return;
	struct tf_pool_client **pp = &p->waiting;
	while (*pp != c)
		pp = &(*pp)->next;
	*pp = c->next;
	c->next = NULL;
	c->waiting = 0;
}

/* The run the next free slot goes to: highest priority, then fewest slots, then oldest. */
static struct tf_pool_client *best_waiting(struct tf_pool *p)
{
	struct tf_pool_client *best = NULL;
	for (struct tf_pool_client *c = p->waiting; c; c = c->next) {
		if (!best || c->priority > best->priority ||
		    (c->priority == best->priority &&
		     (c->held + c->reserved < best->held + best->reserved ||
		      (c->held + c->reserved == best->held + best->reserved &&
		       c->since < best->since))))
			best = c;
	}
	return best;
}

/* Free slots go to the waiting runs, each woken once it has one. */
static void grant(struct tf_pool *p)
{
	while (p->free_slots > 0 && p->waiting) {
		struct tf_pool_client *c = best_waiting(p);
		unwait(p, c);
		p->free_slots--;
		c->reserved++;
		c->kick(c->ctx); /* under p->mu: the client cannot leave meanwhile */
	}
}

int tf_pool_acquire(struct tf_pool *p, struct tf_pool_client *c, int priority)
{
	int got = 0;
	pthread_mutex_lock(&p->mu);
	c->priority = priority;
	if (c->reserved > 0) {
		c->reserved--;
		got = 1;
	} else if (p->free_slots > 0 && (!p->waiting || best_waiting(p) == c)) {
		p->free_slots--;
		got = 1;
	}
	if (got) {
		c->held++;
		if (++p->held > p->held_max)
			p->held_max = p->held;
		unwait(p, c);
	} else if (!c->waiting) {
		c->waiting = 1;
		c->since = ++p->seq;
		c->next = p->waiting;
		p->waiting = c;
	}
	pthread_mutex_unlock(&p->mu);
	return got;
}

void tf_pool_release(struct tf_pool *p, struct tf_pool_client *c)
{
	pthread_mutex_lock(&p->mu);
	TF_ASSERT(c->held > 0);
	c->held--;
	p->held--;
	p->free_slots++;
	grant(p);
	pthread_mutex_unlock(&p->mu);
}

void tf_pool_leave(struct tf_pool *p, struct tf_pool_client *c)
{
	pthread_mutex_lock(&p->mu);
	unwait(p, c);
	p->free_slots += c->reserved;
	c->reserved = 0;
	grant(p);
	pthread_mutex_unlock(&p->mu);
}

void tf_pool_run(struct tf_pool *p, void (*fn)(void *arg, void **local), void *arg)
{
	struct job *j = tf_xcalloc(1, sizeof(*j));
	j->fn = fn;
	j->arg = arg;
	pthread_mutex_lock(&p->mu);
	if (p->tail)
		p->tail->next = j;
	else
		p->head = j;
	p->tail = j;
	pthread_cond_signal(&p->cv);
	pthread_mutex_unlock(&p->mu);
}

void tf_pool_stats(struct tf_pool *p, int *busy, int *busy_max)
{
	pthread_mutex_lock(&p->mu);
	*busy = p->held;
	*busy_max = p->held_max;
	pthread_mutex_unlock(&p->mu);
}

/* input.c — the input pipeline (see input.h for the design and its determinism argument).
 *
 * Invariants:
 *  1. batch k holds elements order(k / spe)[(k % spe) * B ...], nothing else decides content;
 *  2. a worker decodes an element from a shard buffer loaded for the batch's epoch or later
 *     (identical bytes, checked against the manifest CRC), or from the cache;
 *  3. slot k % P is written only by the worker that claimed k, and only after the consumer
 *     released batch k - P. */
#define TF_LOG_TAG "input"
#include "ml/input.h"

#include "accel/slice.h"

#include "common/common.h"
#include "common/log.h"
#include "ml/rng.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ORDERS 8

/* A loaded shard, shared by reference between the slot and the workers decoding from it. */
struct shard_buf {
	void *data;                     /* the whole shard file */
	struct tf_tfrecord_span *spans; /* its records */
	int refs;                       /* owners (slot + workers), under the lock */
};

struct shard_slot {
	struct shard_buf *buf; /* newest loaded copy, or NULL */
	int64_t epoch;         /* epoch buf was loaded for (-1: none) */
	int64_t want;          /* newest epoch a load was queued for (-1: none) */
};

struct epoch_order {
	int64_t epoch;  /* -1: free */
	uint32_t *ids;  /* element ids of the whole epoch, in delivery order */
	size_t *shards; /* shard load order (the epoch's shard permutation) */
};

struct slot {
	float *x;   /* batch inputs */
	int32_t *y; /* batch labels */
	size_t n;   /* examples in it */
	uint64_t k; /* batch number it holds */
	int ready;  /* 1 when built */
};

struct load_job {
	int64_t epoch; /* load for this epoch */
	size_t shard;  /* which shard */
};

struct tf_input {
	struct tf_input_opts o;            /* options with defaults filled in */
	const struct tf_dataset *d;        /* dataset (borrowed) */
	const struct tf_dataset_split *sp; /* its split */
	char *url;                         /* store URL for reader handles */
	size_t n;                          /* elements in the split */
	size_t *base;                      /* first element id of each shard (nshards + 1) */
	uint64_t spe;                      /* batches per epoch */
	uint64_t total;                    /* batches to deliver in all (UINT64_MAX: endless) */

	pthread_mutex_t mu;                    /* guards everything below */
	pthread_cond_t cv;                     /* any state change */
	struct shard_slot *shards;             /* per shard */
	struct epoch_order orders[MAX_ORDERS]; /* computed epoch orders */
	struct load_job *jobs;                 /* reader queue (ring) */
	size_t jcap, jhead, jlen;              /* ring capacity, head, length */
	struct slot *slots;                    /* prefetch ring (1 slot when prefetch is 0) */
	int nslots;                            /* ring size */
	uint64_t next_claim;                   /* next batch a worker may build */
	uint64_t next_deliver;                 /* next batch the consumer takes */
	uint64_t released; /* batches the consumer is done with (slots reusable) */
	int stop;          /* threads exit */
	int failed;        /* an error happened: err holds it */
	int fail_rc;       /* its code */
	char err[1024];    /* first error text */

	unsigned char *cache_u8; /* cached raw image bytes (n*dim) */
	float *cache_f32;        /* cached raw float features (n*dim) */
	int32_t *cache_y;        /* cached labels */
	unsigned char *cached;   /* per element: 1 once cached (atomic) */
	size_t ncached;          /* elements cached (atomic) */

	pthread_t *readers, *workers; /* threads */
	int nreaders, nworkers;       /* counts started */
	double wait;                  /* consumer wait seconds */
};

void tf_input_replica_rows(size_t n, int replicas, int r, size_t *lo, size_t *hi)
{
	size_t start, count;
	tf_slice_shard(n, replicas, r, &start, &count); /* the slice's own sharding rule */
	*lo = start;
	*hi = start + count;
}

uint64_t tf_input_steps_per_epoch(const struct tf_input *in)
{
	return in->spe;
}

double tf_input_wait_seconds(const struct tf_input *in)
{
	return in->wait;
}

static void set_failed(struct tf_input *in, int rc, const char *msg)
{
	if (!in->failed) {
		in->failed = 1;
		in->fail_rc = rc;
		snprintf(in->err, sizeof in->err, "%s", msg);
	}
	pthread_cond_broadcast(&in->cv);
}

static void buf_unref(struct shard_buf *b)
{
	if (b && --b->refs == 0) {
		free(b->data);
		free(b->spans);
		free(b);
	}
}

/* Computes the order of epoch e (pure function of seed, e and the shard sizes). */
static void compute_order(const struct tf_input *in, int64_t e, uint32_t *ids, size_t *perm)
{
	size_t ns = in->sp->nshards;
	uint64_t rs = tf_rng_seed(in->o.seed, (uint64_t)e, 1);
	for (size_t i = 0; i < ns; i++)
		perm[i] = i;
	if (in->o.shuffle)
		for (size_t i = ns; i > 1; i--) {
			size_t j = tf_rng_below(&rs, (uint32_t)i), t = perm[i - 1];
			perm[i - 1] = perm[j];
			perm[j] = t;
		}
	/* interleave: `cycle` shards open at once, one element from each in turn; an
	 * exhausted shard's place goes to the next shard in the permutation */
	size_t c = (size_t)in->o.cycle < ns ? (size_t)in->o.cycle : ns;
	size_t *act = tf_xmalloc(c * sizeof *act), *pos = tf_xcalloc(c, sizeof *pos);
	size_t nact = c, nextsh = c, cur = 0, out = 0;
	for (size_t i = 0; i < c; i++)
		act[i] = perm[i];
	while (nact) {
		size_t s = act[cur];
		if (pos[cur] < in->sp->counts[s])
			ids[out++] = (uint32_t)(in->base[s] + pos[cur]++);
		if (pos[cur] >= in->sp->counts[s]) {
			if (nextsh < ns) {
				act[cur] = perm[nextsh++];
				pos[cur] = 0;
				cur = (cur + 1) % nact;
			} else {
				memmove(act + cur, act + cur + 1, (nact - cur - 1) * sizeof *act);
				memmove(pos + cur, pos + cur + 1, (nact - cur - 1) * sizeof *pos);
				nact--;
				if (cur >= nact)
					cur = 0;
			}
		} else {
			cur = (cur + 1) % nact;
		}
	}
	free(act);
	free(pos);
	if (!in->o.shuffle)
		return;
	/* shuffle buffer: fill, then each incoming element replaces a uniformly drawn one that
	 * is emitted; finally drain the buffer in random order */
	uint64_t rb = tf_rng_seed(in->o.seed, (uint64_t)e, 2);
	size_t bsz = in->o.shuffle_buffer < in->n ? in->o.shuffle_buffer : in->n;
	uint32_t *buf = tf_xmalloc(bsz * sizeof *buf), *src = tf_xmalloc(in->n * sizeof *src);
	memcpy(src, ids, in->n * sizeof *src);
	size_t fill = 0, o = 0;
	for (size_t i = 0; i < in->n; i++) {
		if (fill < bsz) {
			buf[fill++] = src[i];
			continue;
		}
		uint32_t j = tf_rng_below(&rb, (uint32_t)fill);
		ids[o++] = buf[j];
		buf[j] = src[i];
	}
	while (fill) {
		uint32_t j = tf_rng_below(&rb, (uint32_t)fill);
		ids[o++] = buf[j];
		buf[j] = buf[--fill];
	}
	free(buf);
	free(src);
}

/* Returns epoch e's order, computing it (and queueing its shard loads) if needed.
 * Called with the lock held; drops it while computing. */
static struct epoch_order *get_order(struct tf_input *in, int64_t e)
{
	for (int i = 0; i < MAX_ORDERS; i++)
		if (in->orders[i].epoch == e)
			return &in->orders[i];
	pthread_mutex_unlock(&in->mu);
	uint32_t *ids = tf_xmalloc(in->n * sizeof *ids);
	size_t *perm = tf_xmalloc(in->sp->nshards * sizeof *perm);
	compute_order(in, e, ids, perm);
	pthread_mutex_lock(&in->mu);
	for (int i = 0; i < MAX_ORDERS; i++)
		if (in->orders[i].epoch == e) { /* another thread won */
			free(ids);
			free(perm);
			return &in->orders[i];
		}
	/* evict the oldest epoch no longer deliverable */
	int victim = -1;
	int64_t done_epoch = (int64_t)(in->next_deliver / in->spe);
	for (int i = 0; i < MAX_ORDERS; i++) {
		if (in->orders[i].epoch < 0) {
			victim = i;
			break;
		}
		if (in->orders[i].epoch < done_epoch &&
		    (victim < 0 || in->orders[i].epoch < in->orders[victim].epoch))
			victim = i;
	}
	if (victim < 0) { /* cannot happen: at most prefetch+workers batches in flight */
		victim = 0;
		for (int i = 1; i < MAX_ORDERS; i++)
			if (in->orders[i].epoch < in->orders[victim].epoch)
				victim = i;
	}
	struct epoch_order *eo = &in->orders[victim];
	free(eo->ids);
	free(eo->shards);
	eo->epoch = e;
	eo->ids = ids;
	eo->shards = perm;
	/* queue this epoch's shard reads in the order the interleave consumes them, unless
	 * every element is already cached */
	if (!(in->o.cache && __atomic_load_n(&in->ncached, __ATOMIC_ACQUIRE) == in->n)) {
		for (size_t i = 0; i < in->sp->nshards; i++) {
			size_t s = perm[i];
			if (in->shards[s].want >= e)
				continue;
			in->shards[s].want = e;
			if (in->jlen == in->jcap) {
				size_t nc = in->jcap ? 2 * in->jcap : 64;
				struct load_job *nj = tf_xmalloc(nc * sizeof *nj);
				for (size_t q = 0; q < in->jlen; q++)
					nj[q] = in->jobs[(in->jhead + q) % in->jcap];
				free(in->jobs);
				in->jobs = nj;
				in->jcap = nc;
				in->jhead = 0;
			}
			in->jobs[(in->jhead + in->jlen++) % in->jcap] =
			    (struct load_job){.epoch = e, .shard = s};
		}
		pthread_cond_broadcast(&in->cv);
	}
	return eo;
}

static void *reader_main(void *arg)
{
	struct tf_input *in = arg;
	struct tf_objstore *s = NULL;
	char err[512];
	if (tf_objstore_open(in->url, &s, err, sizeof err)) {
		pthread_mutex_lock(&in->mu);
		set_failed(in, -EIO, err);
		pthread_mutex_unlock(&in->mu);
		return NULL;
	}
	pthread_mutex_lock(&in->mu);
	for (;;) {
		while (!in->stop && !in->jlen)
			pthread_cond_wait(&in->cv, &in->mu);
		if (in->stop)
			break;
		struct load_job j = in->jobs[in->jhead];
		in->jhead = (in->jhead + 1) % in->jcap;
		in->jlen--;
		pthread_mutex_unlock(&in->mu);
		struct shard_buf *b = tf_xcalloc(1, sizeof *b);
		int rc = tf_dataset_load_shard(s, in->d, in->o.split, j.shard, &b->data, &b->spans,
		                               err, sizeof err);
		pthread_mutex_lock(&in->mu);
		if (rc) {
			free(b);
			set_failed(in, rc, err);
			continue;
		}
		b->refs = 1;
		struct shard_slot *sl = &in->shards[j.shard];
		if (sl->epoch < j.epoch) {
			buf_unref(sl->buf);
			sl->buf = b;
			sl->epoch = j.epoch;
		} else {
			buf_unref(b);
		}
		pthread_cond_broadcast(&in->cv);
	}
	pthread_mutex_unlock(&in->mu);
	tf_objstore_free(s);
	return NULL;
}

static size_t shard_of(const struct tf_input *in, uint32_t id)
{
	size_t lo = 0, hi = in->sp->nshards; /* base[lo] <= id < base[hi] */
	while (hi - lo > 1) {
		size_t mid = (lo + hi) / 2;
		if (in->base[mid] <= id)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

/* Builds batch k into sl. Called without the lock; returns 0 or a negative code. */
static int build_batch(struct tf_input *in, uint64_t k, struct slot *sl)
{
	int64_t e = (int64_t)(k / in->spe);
	size_t step = (size_t)(k % in->spe), B = in->o.batch, dim = in->d->dim;
	size_t lo = step * B, hi = lo + B < in->n ? lo + B : in->n;
	size_t ns = in->sp->nshards;
	struct shard_buf **held = tf_xcalloc(ns, sizeof *held);
	unsigned char *u8 = tf_xmalloc(dim);
	float *f32 = tf_xmalloc(dim * sizeof(float));
	char err[400];
	int rc = 0;

	pthread_mutex_lock(&in->mu);
	const uint32_t *ids = get_order(in, e)->ids;
	pthread_mutex_unlock(&in->mu);
	/* ids stays valid: its epoch is not evicted before batch k is delivered */
	for (size_t i = lo; i < hi; i++) {
		uint32_t id = ids[i];
		const unsigned char *ru8 = NULL;
		const float *rf32 = NULL;
		int32_t label;
		if (in->o.cache && __atomic_load_n(&in->cached[id], __ATOMIC_ACQUIRE)) {
			ru8 = in->cache_u8 ? in->cache_u8 + (size_t)id * dim : NULL;
			rf32 = in->cache_f32 ? in->cache_f32 + (size_t)id * dim : NULL;
			label = in->cache_y[id];
		} else {
			size_t s = shard_of(in, id);
			if (!held[s]) {
				pthread_mutex_lock(&in->mu);
				/* an uncached element means its epoch queued the shard loads
				 * (invariant 2): wait for this one */
				while (!in->failed && !in->stop && in->shards[s].epoch < e)
					pthread_cond_wait(&in->cv, &in->mu);
				if (in->failed || in->stop) {
					rc = in->failed ? in->fail_rc : -ECANCELED;
					pthread_mutex_unlock(&in->mu);
					goto out;
				}
				held[s] = in->shards[s].buf;
				held[s]->refs++;
				pthread_mutex_unlock(&in->mu);
			}
			const struct tf_tfrecord_span *sp = &held[s]->spans[id - in->base[s]];
			rc = tf_dataset_decode(in->d, (const char *)held[s]->data + sp->off,
			                       sp->len, u8, f32, &label, err, sizeof err);
			if (rc) {
				char msg[1000];
				snprintf(msg, sizeof msg, "%s (record %zu of '%s')", err,
				         (size_t)(id - in->base[s]), in->sp->keys[s]);
				pthread_mutex_lock(&in->mu);
				set_failed(in, rc, msg);
				pthread_mutex_unlock(&in->mu);
				goto out;
			}
			ru8 = u8;
			rf32 = f32;
			if (in->o.cache) {
				if (in->cache_u8)
					memcpy(in->cache_u8 + (size_t)id * dim, u8, dim);
				else
					memcpy(in->cache_f32 + (size_t)id * dim, f32,
					       dim * sizeof(float));
				in->cache_y[id] = label;
				if (!__atomic_exchange_n(&in->cached[id], 1, __ATOMIC_ACQ_REL))
					__atomic_fetch_add(&in->ncached, 1, __ATOMIC_ACQ_REL);
			}
		}
		tf_preproc_apply(&in->d->pre, ru8, rf32, sl->x + (i - lo) * dim);
		sl->y[i - lo] = label;
	}
	sl->n = hi - lo;
	sl->k = k;
out:
	pthread_mutex_lock(&in->mu);
	for (size_t s = 0; s < ns; s++)
		buf_unref(held[s]);
	pthread_mutex_unlock(&in->mu);
	free(held);
	free(u8);
	free(f32);
	return rc;
}

static void *worker_main(void *arg)
{
	struct tf_input *in = arg;
	pthread_mutex_lock(&in->mu);
	for (;;) {
		while (!in->stop && !in->failed &&
		       (in->next_claim >= in->total ||
		        in->next_claim >= in->released + (uint64_t)in->nslots))
			pthread_cond_wait(&in->cv, &in->mu);
		if (in->stop || in->failed)
			break;
		uint64_t k = in->next_claim++;
		struct slot *sl = &in->slots[k % (uint64_t)in->nslots];
		sl->ready = 0; /* batch k - nslots was released: the slot is free */
		pthread_mutex_unlock(&in->mu);
		int rc = build_batch(in, k, sl);
		pthread_mutex_lock(&in->mu);
		if (rc)
			break;
		sl->ready = 1;
		pthread_cond_broadcast(&in->cv);
	}
	pthread_mutex_unlock(&in->mu);
	return NULL;
}

int tf_input_open(struct tf_objstore *s, const struct tf_dataset *d, const struct tf_input_opts *o,
                  struct tf_input **out, char *err, size_t errlen)
{
	int rc = tf_dataset_check_shards(s, d, o->split, err, errlen);
	if (rc)
		return rc;
	struct tf_input *in = tf_xcalloc(1, sizeof *in);
	in->o = *o;
	in->d = d;
	in->sp = &d->split[o->split];
	in->n = in->sp->examples;
	if (!in->o.shuffle_buffer)
		in->o.shuffle_buffer = 10000;
	if (in->o.cycle <= 0)
		in->o.cycle = 4;
	if (in->o.readers <= 0)
		in->o.readers = 2;
	if (in->o.workers <= 0)
		in->o.workers = 2;
	if (in->o.batch == 0 || in->n == 0 || in->n > UINT32_MAX ||
	    (in->o.drop_remainder && in->o.batch > in->n)) {
		tf_errf(err, errlen, "batch %zu does not fit the %zu examples of the split",
		        in->o.batch, in->n);
		free(in);
		return -EINVAL;
	}
	in->spe =
	    in->o.drop_remainder ? in->n / in->o.batch : (in->n + in->o.batch - 1) / in->o.batch;
	in->total = in->o.epochs ? in->o.epochs * in->spe : UINT64_MAX;
	in->url = tf_xstrdup(tf_objstore_url(s));
	in->base = tf_xmalloc((in->sp->nshards + 1) * sizeof *in->base);
	in->base[0] = 0;
	for (size_t i = 0; i < in->sp->nshards; i++)
		in->base[i + 1] = in->base[i] + in->sp->counts[i];
	in->shards = tf_xcalloc(in->sp->nshards, sizeof *in->shards);
	for (size_t i = 0; i < in->sp->nshards; i++)
		in->shards[i].epoch = in->shards[i].want = -1;
	for (int i = 0; i < MAX_ORDERS; i++)
		in->orders[i].epoch = -1;
	/* reader queue large enough for MAX_ORDERS epochs of loads, so it never has to grow
	 * while a worker holds the lock waiting on it */
	in->jcap = in->sp->nshards * (MAX_ORDERS + 1);
	in->jobs = tf_xmalloc(in->jcap * sizeof *in->jobs);
	/* prefetch batches ready beyond the one the consumer holds */
	in->nslots = o->prefetch > 0 ? o->prefetch + 1 : 1;
	/* batches in flight must span fewer epochs than the orders kept (invariant 1) */
	if ((uint64_t)in->nslots > (MAX_ORDERS - 2) * in->spe)
		in->nslots = (int)((MAX_ORDERS - 2) * in->spe);
	in->slots = tf_xcalloc((size_t)in->nslots, sizeof *in->slots);
	for (int i = 0; i < in->nslots; i++) {
		in->slots[i].x = tf_xmalloc(in->o.batch * d->dim * sizeof(float));
		in->slots[i].y = tf_xmalloc(in->o.batch * sizeof(int32_t));
	}
	if (in->o.cache) {
		if (d->pre.image)
			in->cache_u8 = tf_xmalloc(in->n * d->dim);
		else
			in->cache_f32 = tf_xmalloc(in->n * d->dim * sizeof(float));
		in->cache_y = tf_xmalloc(in->n * sizeof(int32_t));
		in->cached = tf_xcalloc(in->n, 1);
	}
	in->next_claim = in->next_deliver = in->released = in->o.start_batch;
	pthread_mutex_init(&in->mu, NULL);
	pthread_cond_init(&in->cv, NULL);
	in->readers = tf_xcalloc((size_t)in->o.readers, sizeof(pthread_t));
	for (int i = 0; i < in->o.readers; i++, in->nreaders++)
		if (pthread_create(&in->readers[i], NULL, reader_main, in))
			break;
	if (o->prefetch > 0) {
		in->workers = tf_xcalloc((size_t)in->o.workers, sizeof(pthread_t));
		for (int i = 0; i < in->o.workers; i++, in->nworkers++)
			if (pthread_create(&in->workers[i], NULL, worker_main, in))
				break;
	}
	if (!in->nreaders || (o->prefetch > 0 && !in->nworkers)) {
		tf_errf(err, errlen, "cannot start input pipeline threads");
		tf_input_free(in);
		return -EAGAIN;
	}
	*out = in;
	return 0;
}

int tf_input_next(struct tf_input *in, struct tf_batch *b, char *err, size_t errlen)
{
	double t0 = tf_now_monotonic();
	int rc = 0;
	pthread_mutex_lock(&in->mu);
	/* release the batch delivered last time: its slot may be refilled */
	if (in->released < in->next_deliver) {
		in->released = in->next_deliver;
		pthread_cond_broadcast(&in->cv);
	}
	if (in->next_deliver >= in->total) {
		pthread_mutex_unlock(&in->mu);
		return 1;
	}
	uint64_t k = in->next_deliver;
	struct slot *sl = &in->slots[k % (uint64_t)in->nslots];
	if (in->o.prefetch > 0 && in->next_claim == k) {
		/* no worker has started this batch (they are starved of CPU): build it here
		 * rather than wait; its slot is free since batch k - nslots was released */
		in->next_claim++;
		sl->ready = 0;
		pthread_mutex_unlock(&in->mu);
		rc = build_batch(in, k, sl);
	} else if (in->o.prefetch > 0) {
		while (!in->failed && !(sl->ready && sl->k == k))
			pthread_cond_wait(&in->cv, &in->mu);
		pthread_mutex_unlock(&in->mu);
	} else {
		int failed = in->failed;
		pthread_mutex_unlock(&in->mu);
		if (!failed)
			rc = build_batch(in, k, sl);
	}
	pthread_mutex_lock(&in->mu);
	if (in->failed) {
		tf_errf(err, errlen, "%s", in->err);
		rc = in->fail_rc ? in->fail_rc : -EIO;
	} else if (rc == 0) {
		in->next_deliver = k + 1;
		pthread_cond_broadcast(&in->cv);
	}
	pthread_mutex_unlock(&in->mu);
	if (rc == 0) {
		*b = (struct tf_batch){.n = sl->n,
		                       .dim = in->d->dim,
		                       .x = sl->x,
		                       .y = sl->y,
		                       .index = k,
		                       .epoch = k / in->spe,
		                       .step = (size_t)(k % in->spe)};
	}
	in->wait += tf_now_monotonic() - t0;
	return rc;
}

void tf_input_free(struct tf_input *in)
{
	if (!in)
		return;
	pthread_mutex_lock(&in->mu);
	in->stop = 1;
	pthread_cond_broadcast(&in->cv);
	pthread_mutex_unlock(&in->mu);
	for (int i = 0; i < in->nreaders; i++)
		pthread_join(in->readers[i], NULL);
	for (int i = 0; i < in->nworkers; i++)
		pthread_join(in->workers[i], NULL);
	for (size_t i = 0; i < in->sp->nshards; i++)
		buf_unref(in->shards[i].buf);
	for (int i = 0; i < MAX_ORDERS; i++) {
		free(in->orders[i].ids);
		free(in->orders[i].shards);
	}
	for (int i = 0; i < in->nslots; i++) {
		free(in->slots[i].x);
		free(in->slots[i].y);
	}
	pthread_mutex_destroy(&in->mu);
	pthread_cond_destroy(&in->cv);
	free(in->slots);
	free(in->readers);
	free(in->workers);
	free(in->jobs);
	free(in->shards);
	free(in->base);
	free(in->url);
	free(in->cache_u8);
	free(in->cache_f32);
	free(in->cache_y);
	free(in->cached);
	free(in);
}

int tf_input_load_split(struct tf_objstore *s, const struct tf_dataset *d, enum tf_split sp,
                        float **x, int32_t **y, unsigned char **raw, size_t *n,
                        volatile int *cancel, char *err, size_t errlen)
{
	const struct tf_dataset_split *p = &d->split[sp];
	size_t total = p->examples, dim = d->dim, at = 0;
	float *xs = NULL;
	int32_t *ys = NULL;
	unsigned char *rs = NULL;
	/* sized by the manifest's counts only once the shards' real sizes bound them */
	int rc = tf_dataset_check_shards(s, d, sp, err, errlen);
	if (!rc) {
		xs = malloc(total * dim * sizeof(float) + 1);
		ys = malloc(total * sizeof(int32_t) + 1);
		rs = d->pre.image ? malloc(total * dim + 1) : NULL;
		if (!xs || !ys || (d->pre.image && !rs)) {
			tf_errf(err, errlen,
			        "dataset '%s': no memory for %zu examples of %zu values",
			        d->manifest_key, total, dim);
			rc = -ENOMEM;
		}
	}
	float *f32 = tf_xmalloc(dim * sizeof(float));
	unsigned char *u8 = tf_xmalloc(dim);
	for (size_t k = 0; k < p->nshards && !rc; k++) {
		void *data;
		struct tf_tfrecord_span *spans;
		if ((rc = tf_dataset_load_shard(s, d, sp, k, &data, &spans, err, errlen)))
			break;
		for (size_t i = 0; i < p->counts[k] && !rc; i++, at++) {
			if (i % 1024 == 0 && cancel && *cancel) {
				snprintf(err, errlen, "loading dataset '%s' stopped: cancelled",
				         d->manifest_key);
				rc = -ECANCELED;
				break;
			}
			rc = tf_dataset_decode(d, (char *)data + spans[i].off, spans[i].len,
			                       rs ? rs + at * dim : u8, f32, &ys[at], err, errlen);
			if (!rc)
				tf_preproc_apply(&d->pre, rs ? rs + at * dim : u8, f32,
				                 xs + at * dim);
		}
		free(data);
		free(spans);
	}
	free(f32);
	free(u8);
	if (rc) {
		free(xs);
		free(ys);
		free(rs);
		return rc;
	}
	*x = xs;
	*y = ys;
	if (raw)
		*raw = rs;
	else
		free(rs);
	*n = total;
	return 0;
}

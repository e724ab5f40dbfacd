/* slice.c — the slice runtime: replica thread pool, deterministic ring all-reduce, device time
 * and HBM accounting (slice.h).
 *
 * Pool: threads-1 workers plus the caller. tf_slice_run publishes (fn, arg) under a new
 * generation number; every participant takes replica indices from a shared counter until none
 * are left; the caller waits until all have finished. Idle workers spin ~100 us before
 * sleeping, so back-to-back runs of a training loop do not pay a wake-up each. Replicas are
 * independent, so the assignment of indices to threads does not affect any result.
 *
 * Device time: per GEMM the roofline max(MXU cycles, HBM bytes / the core's HBM bandwidth);
 * per run the slowest replica; per all-reduce the alpha-beta time (slice.h).
 *
 * All-reduce: the emulation computes, for each ring, exactly what a ring reduce-scatter
 * followed by an all-gather produces: chunk j of the buffer is summed starting at member j+1
 * and going round to member j, (((x[j+1] + x[j+2]) + ...) + x[j]), and the total is copied to
 * every member. Rings run per dimension in a fixed order (cores of a chip, then x, y, z), so
 * the bits depend only on the slice shape and the inputs. */
#include "accel/slice.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "accel/mxu_int.h"
#include "common/common.h"

struct tf_slice_rt {
	struct tf_tpu_slice slice;    /* copy of the slice description */
	int replicas;                 /* slice.cores */
	int threads;                  /* pool size including the caller */
	int host_threads;             /* threads allowed (<= host cores), before the replica cap */
	int ftz;                      /* MXU flush-to-zero mode */
	struct tf_slice_replica *rep; /* replicas, index order */
	pthread_t *tids;              /* threads-1 workers */
	pthread_mutex_t mu;           /* guards the fields below */
	pthread_cond_t work_cv;       /* a new generation or stop */
	pthread_cond_t done_cv;       /* a participant finished its share */
	_Atomic uint64_t gen;         /* bumped by each tf_slice_run (and by stop) */
	_Atomic int stop;             /* workers exit */
	void (*task)(struct tf_slice_rt *rt, int task, int participant); /* current job */
	int ntasks;               /* tasks in the current job */
	tf_slice_fn fn;           /* tf_slice_run's program */
	void *arg;                /* its argument */
	int next;                 /* next task index to hand out */
	_Atomic int active;       /* participants still working on this generation */
	struct tf_slice_stats st; /* accumulated accounting */
	/* The current all-reduce (see tf_slice_allreduce). */
	float *const *ar_bufs; /* replica buffers */
	size_t *ar_lo, *ar_hi; /* element range of each block task */
	size_t ar_cap;         /* capacity of ar_lo / ar_hi */
	float **ar_tmp;        /* per participant: 2 banks x replicas x block floats */
	float ***ar_val;       /* per participant: replicas pointers (layer values) */
	float **ar_gtmp;       /* per participant: replicas x block floats (generated values) */
	size_t ar_n;           /* floats per replica buffer */
	size_t ar_block;       /* block length in floats */
	size_t ar_tcap, ar_gcap; /* floats in each ar_tmp, each ar_gtmp */
	int ar_first;          /* only replica 0's buffer receives the sum */
	tf_slice_gen_fn ar_gen; /* tf_slice_allreduce_gen: the generator, its argument and */
	void *ar_gen_arg;       /* where the sum goes */
	float *ar_sum;
};

/* Takes task indices until none are left. Called with mu unlocked. */
static void drain(struct tf_slice_rt *rt, int participant)
{
	for (;;) {
		pthread_mutex_lock(&rt->mu);
		int i = rt->next < rt->ntasks ? rt->next++ : -1;
		pthread_mutex_unlock(&rt->mu);
		if (i < 0)
			return;
		rt->task(rt, i, participant);
	}
}

/* Spins until *v != old (1) or SPIN_SECONDS pass (0): consecutive tf_slice_run calls of a
 * training loop then start without a sleep/wake-up round trip. */
#define SPIN_SECONDS 100e-6

static int spin_until_changed(_Atomic uint64_t *v, uint64_t old)
{
	double t0 = tf_now_monotonic();
	for (;;) {
		for (int i = 0; i < 64; i++) {
			if (atomic_load(v) != old)
				return 1;
#if defined(__x86_64__) || defined(__i386__)
			__builtin_ia32_pause();
#endif
		}
		if (tf_now_monotonic() - t0 > SPIN_SECONDS)
			return 0;
	}
}

/* Worker threads get their participant number through this. */
struct worker_arg {
	struct tf_slice_rt *rt; /* the runtime */
	int id;                 /* 1 .. threads-1 */
};

static void *worker(void *arg)
{
	struct worker_arg wa = *(struct worker_arg *)arg;
	struct tf_slice_rt *rt = wa.rt;
	free(arg);
	uint64_t seen = 0;
	for (;;) {
		if (!spin_until_changed(&rt->gen, seen)) {
			pthread_mutex_lock(&rt->mu);
			while (atomic_load(&rt->gen) == seen)
				pthread_cond_wait(&rt->work_cv, &rt->mu);
			pthread_mutex_unlock(&rt->mu);
		}
		if (atomic_load(&rt->stop))
			return NULL;
		seen = atomic_load(&rt->gen);
		drain(rt, wa.id);
		if (atomic_fetch_sub(&rt->active, 1) == 1) {
			pthread_mutex_lock(&rt->mu);
			pthread_cond_signal(&rt->done_cv);
			pthread_mutex_unlock(&rt->mu);
		}
	}
}

int tf_slice_rt_new(const struct tf_tpu_slice *slice, int host_threads, int ftz,
                    struct tf_slice_rt **out)
{
	if (!slice || !slice->gen || slice->cores < 1 || host_threads < 0)
		return -EINVAL;
	struct tf_slice_rt *rt = tf_xcalloc(1, sizeof *rt);
	rt->slice = *slice;
	rt->replicas = slice->cores;
	rt->ftz = ftz ? 1 : 0;
	int ncpu = tf_ncpus();
	int t = host_threads ? host_threads : ncpu;
	if (t > ncpu)
		t = ncpu;
	rt->host_threads = t < 1 ? 1 : t;
	if (t > rt->replicas)
		t = rt->replicas;
	rt->threads = t < 1 ? 1 : t;
	rt->rep = tf_xcalloc((size_t)rt->replicas, sizeof *rt->rep);
	int cpc = slice->gen->cores_per_chip;
	for (int i = 0; i < rt->replicas; i++) {
		struct tf_slice_replica *r = &rt->rep[i];
		r->index = i;
		r->replicas = rt->replicas;
		r->chip = i / cpc;
		r->core = i % cpc;
		r->coords[0] = r->chip % slice->dims[0];
		r->coords[1] = (r->chip / slice->dims[0]) % slice->dims[1];
		r->coords[2] = r->chip / (slice->dims[0] * slice->dims[1]);
		r->rt = rt;
	}
	pthread_mutex_init(&rt->mu, NULL);
	pthread_cond_init(&rt->work_cv, NULL);
	pthread_cond_init(&rt->done_cv, NULL);
	rt->tids = tf_xcalloc((size_t)rt->threads, sizeof *rt->tids);
	rt->ar_tmp = tf_xcalloc((size_t)rt->threads, sizeof *rt->ar_tmp);
	rt->ar_val = tf_xcalloc((size_t)rt->threads, sizeof *rt->ar_val);
	rt->ar_gtmp = tf_xcalloc((size_t)rt->threads, sizeof *rt->ar_gtmp);
	for (int i = 1; i < rt->threads; i++) {
		struct worker_arg *wa = tf_xmalloc(sizeof *wa);
		wa->rt = rt;
		wa->id = i;
		if (pthread_create(&rt->tids[i - 1], NULL, worker, wa) != 0) {
			free(wa);
			rt->threads = i; /* fewer threads: same results, slower */
			break;
		}
	}
	*out = rt;
	return 0;
}

void tf_slice_rt_free(struct tf_slice_rt *rt)
{
	if (!rt)
		return;
	pthread_mutex_lock(&rt->mu);
	atomic_store(&rt->stop, 1);
	atomic_fetch_add(&rt->gen, 1);
	pthread_cond_broadcast(&rt->work_cv);
	pthread_mutex_unlock(&rt->mu);
	for (int i = 1; i < rt->threads; i++)
		pthread_join(rt->tids[i - 1], NULL);
	pthread_mutex_destroy(&rt->mu);
	pthread_cond_destroy(&rt->work_cv);
	pthread_cond_destroy(&rt->done_cv);
	for (int i = 0; i < rt->threads; i++) {
		free(rt->ar_tmp[i]);
		free(rt->ar_val[i]);
		free(rt->ar_gtmp[i]);
	}
	free(rt->ar_tmp);
	free(rt->ar_val);
	free(rt->ar_gtmp);
	free(rt->ar_lo);
	free(rt->ar_hi);
	free(rt->tids);
	free(rt->rep);
	free(rt);
}

const struct tf_tpu_slice *tf_slice_rt_slice(const struct tf_slice_rt *rt)
{
	return &rt->slice;
}

int tf_slice_rt_replicas(const struct tf_slice_rt *rt)
{
	return rt->replicas;
}

int tf_slice_rt_threads(const struct tf_slice_rt *rt)
{
	return rt->threads;
}

/* Runs task(rt, 0..ntasks-1, participant) on the pool and waits for all of them. */
static void pool_exec(struct tf_slice_rt *rt, int ntasks,
                      void (*task)(struct tf_slice_rt *, int, int))
{
	pthread_mutex_lock(&rt->mu);
	rt->task = task;
	rt->ntasks = ntasks;
	rt->next = 0;
	atomic_store(&rt->active, rt->threads - 1);
	atomic_fetch_add(&rt->gen, 1);
	pthread_cond_broadcast(&rt->work_cv);
	pthread_mutex_unlock(&rt->mu);
	drain(rt, 0);
	double t0 = tf_now_monotonic();
	while (atomic_load(&rt->active) > 0 && tf_now_monotonic() - t0 < SPIN_SECONDS)
		;
	if (atomic_load(&rt->active) > 0) {
		pthread_mutex_lock(&rt->mu);
		while (atomic_load(&rt->active) > 0)
			pthread_cond_wait(&rt->done_cv, &rt->mu);
		pthread_mutex_unlock(&rt->mu);
	}
}

static void replica_task(struct tf_slice_rt *rt, int task, int participant)
{
	(void)participant;
	rt->fn(&rt->rep[task], rt->arg);
}

void tf_slice_run(struct tf_slice_rt *rt, tf_slice_fn fn, void *arg)
{
	for (int i = 0; i < rt->replicas; i++)
		rt->rep[i].cycles = rt->rep[i].macs = rt->rep[i].hbm_bytes = rt->rep[i].hbm_extra =
		    0;
	rt->fn = fn;
	rt->arg = arg;
	pool_exec(rt, rt->replicas, replica_task);

	uint64_t most = 0, extra = 0;
	for (int i = 0; i < rt->replicas; i++) {
		if (rt->rep[i].cycles > most) {
			most = rt->rep[i].cycles;
			extra = rt->rep[i].hbm_extra;
		}
		rt->st.macs += rt->rep[i].macs;
		rt->st.hbm_bytes += (double)rt->rep[i].hbm_bytes;
	}
	rt->st.hbm_bound_cycles += extra;
	rt->st.runs++;
	rt->st.cycles += most;
	double secs = (double)most / rt->slice.gen->clock_hz;
	rt->st.compute_seconds += secs;
	rt->st.device_seconds += secs;
}

void tf_slice_mxu_cfg(const struct tf_slice_rt *rt, struct tf_mxu_cfg *cfg)
{
	const struct tf_tpu_gen *g = rt->slice.gen;
	*cfg = (struct tf_mxu_cfg){
	    .rows = g->mxu_rows,
	    .cols = g->mxu_cols,
	    .ftz = rt->ftz,
	    .threads = 1,
	    .mxus = g->mxus_per_core,
	};
	/* Spare host threads (fewer replicas than threads) help inside the GEMM. */
	if (rt->replicas < rt->host_threads)
		cfg->threads = rt->host_threads / rt->replicas;
}

/* Counts a GEMM against its replica: its roofline cycles, HBM traffic and multiply-adds. */
static void count_gemm(struct tf_slice_replica *r, size_t M, size_t K, size_t N,
                       const struct tf_mxu_stats *st)
{
	uint64_t bytes,
	    cycles = tf_slice_gemm_cycles(r->rt->slice.gen, M, K, N, st->cycles, &bytes);
	r->cycles += cycles;
	r->hbm_extra += cycles - st->cycles;
	r->hbm_bytes += bytes;
	r->macs += st->macs;
}

void tf_slice_gemm_count(struct tf_slice_replica *r, size_t M, size_t K, size_t N)
{
	struct tf_mxu_cfg cfg, norm;
	tf_slice_mxu_cfg(r->rt, &cfg);
	tf_mxu_cfg_norm(&cfg, &norm);
	struct tf_mxu_model m;
	tf_mxu_model(TF_MXU_WS, M, K, N, norm.rows, norm.cols, norm.mxus, &m);
	struct tf_mxu_stats st;
	tf_mxu_stats_fill(&norm, M, K, N, m.core_cycles, &st); /* what tf_mxu_gemm reports */
	count_gemm(r, M, K, N, &st);
}

void tf_slice_gemm(struct tf_slice_replica *r, int trans_x, int trans_w, size_t M, size_t K,
                   size_t N, const float *X, size_t ldx, const float *W, size_t ldw, float *C,
                   size_t ldc)
{
	struct tf_mxu_cfg cfg;
	tf_slice_mxu_cfg(r->rt, &cfg);
	struct tf_mxu_stats st;
	tf_mxu_gemm(&cfg, trans_x, trans_w, M, K, N, X, ldx, W, ldw, C, ldc, &st);
	count_gemm(r, M, K, N, &st);
}

void tf_slice_gemm_wpack(struct tf_slice_replica *r, int trans_x, size_t M, const float *X,
                         size_t ldx, const struct tf_mxu_wpack *w, float *C, size_t ldc)
{
	struct tf_mxu_cfg cfg;
	tf_slice_mxu_cfg(r->rt, &cfg);
	struct tf_mxu_stats st;
	tf_mxu_gemm_wpack(&cfg, trans_x, M, X, ldx, w, C, ldc, &st);
	size_t K, N;
	tf_mxu_wpack_shape(w, &K, &N);
	count_gemm(r, M, K, N, &st);
}

uint64_t tf_slice_gemm_cycles(const struct tf_tpu_gen *g, size_t M, size_t K, size_t N,
                              uint64_t compute, uint64_t *bytes)
{
	double b = ((double)M * K + (double)K * N) * 2.0 + (double)M * N * 4.0;
	double per_cycle = g->hbm_bw / g->cores_per_chip / g->clock_hz;
	uint64_t mem = (uint64_t)ceil(b / per_cycle);
	if (bytes)
		*bytes = (uint64_t)b;
	return mem > compute ? mem : compute;
}

/* Ring dimensions in reduction order: size and replica-index stride, and whether the ring is
 * on one chip. */
struct ring_dim {
	int size, stride, on_chip;
};

static int ring_dims(const struct tf_tpu_slice *s, struct ring_dim d[4])
{
	int cpc = s->gen->cores_per_chip;
	d[0] = (struct ring_dim){cpc, 1, 1};
	d[1] = (struct ring_dim){s->dims[0], cpc, 0};
	d[2] = (struct ring_dim){s->dims[1], cpc * s->dims[0], 0};
	d[3] = (struct ring_dim){s->dims[2], cpc * s->dims[0] * s->dims[1], 0};
	return 4;
}

double tf_slice_allreduce_seconds(const struct tf_tpu_slice *slice, double bytes)
{
	struct ring_dim d[4];
	int nd = ring_dims(slice, d);
	double t = 0;
	for (int i = 0; i < nd; i++) {
		int p = d[i].size;
		if (p <= 1)
			continue;
		double alpha = d[i].on_chip ? 0.0 : slice->gen->ici_alpha;
		double bw = d[i].on_chip ? slice->gen->hbm_bw : slice->gen->ici_bw;
		/* With wrap-around links the ring runs both ways at once, half the payload each
		 * way; on a mesh dimension it folds back along the line (one direction each). */
		if (!d[i].on_chip && slice->wrap[i - 1])
			bw *= 2.0;
		t += 2.0 * (p - 1) * alpha + 2.0 * (p - 1) / p * bytes / bw;
	}
	return t;
}

/* out[i] = a[i] + b[i] and out[i] += a[i]: plain loops the compiler vectorises (restrict:
 * the buffers never overlap); each element is still one IEEE add in the documented order.
 * With SSE2 the MXCSR's FTZ/DAZ apply; elsewhere ftz flushes each sum in software. */
static void add2(float *restrict out, const float *restrict a, const float *restrict b, size_t n,
                 int ftz)
{
	(void)ftz;
	size_t i = 0;
#ifdef __SSE2__
	for (; i + 8 <= n; i += 8) {
		_mm_storeu_ps(out + i, _mm_add_ps(_mm_loadu_ps(a + i), _mm_loadu_ps(b + i)));
		_mm_storeu_ps(out + i + 4,
		              _mm_add_ps(_mm_loadu_ps(a + i + 4), _mm_loadu_ps(b + i + 4)));
	}
#else
	if (ftz) {
		for (; i < n; i++)
			out[i] = tf_mxu_ftz(a[i] + b[i]);
		return;
	}
#endif
	for (; i < n; i++)
		out[i] = a[i] + b[i];
}

static void add_to(float *restrict out, const float *restrict a, size_t n, int ftz)
{
	(void)ftz;
	size_t i = 0;
#ifdef __SSE2__
	for (; i + 8 <= n; i += 8) {
		_mm_storeu_ps(out + i, _mm_add_ps(_mm_loadu_ps(out + i), _mm_loadu_ps(a + i)));
		_mm_storeu_ps(out + i + 4,
		              _mm_add_ps(_mm_loadu_ps(out + i + 4), _mm_loadu_ps(a + i + 4)));
	}
#else
	if (ftz) {
		for (; i < n; i++)
			out[i] = tf_mxu_ftz(out[i] + a[i]);
		return;
	}
#endif
	for (; i < n; i++)
		out[i] = out[i] + a[i];
}

/* One block of the all-reduce: elements [lo, lo + len) of the n-float buffers, which lie within
 * one chunk of every ring dimension; val[i] points at replica i's value of element lo (val is
 * used up). Layer by layer (one per dimension), each ring's members are summed in ring order
 * into a temporary of tmp owned by the ring's first member (into `last`, when not NULL, for the
 * last layer); returns where the total is (replica 0's value when there is one replica). */
static const float *reduce_block(struct tf_slice_rt *rt, size_t lo, size_t len, const float **val,
                                 float *tmp, float *last)
{
	struct ring_dim d[4];
	int nd = ring_dims(&rt->slice, d);
	size_t n = rt->ar_n;
	int R = rt->replicas, final = -1;
	for (int di = 0; di < nd; di++)
		if (d[di].size > 1)
			final = di;
	unsigned saved = tf_mxu_csr_enter(rt->ftz); /* the adds run in the MXU's FTZ/DAZ mode */
	int bank = 0;
	for (int di = 0; di < nd; di++) {
		int p = d[di].size, st = d[di].stride;
		if (p <= 1)
			continue;
		/* this block's chunk of the ring's split of [0, n) */
		int j = (int)((uint64_t)lo * (uint64_t)p / (n ? n : 1));
		while (j + 1 < p && (size_t)((uint64_t)n * (uint64_t)(j + 1) / (uint64_t)p) <= lo)
			j++;
		while (j > 0 && (size_t)((uint64_t)n * (uint64_t)j / (uint64_t)p) > lo)
			j--;
		for (int base = 0; base < R; base++) {
			if ((base / st) % p != 0 || val[base] == NULL)
				continue; /* not the first member of a ring of this layer */
			float *out = di == final && last
			                 ? last
			                 : tmp + ((size_t)bank * R + (size_t)base) * rt->ar_block;
			add2(out, val[base + ((j + 1) % p) * st], val[base + ((j + 2) % p) * st],
			     len, rt->ftz);
			for (int k = 3; k <= p; k++)
				add_to(out, val[base + ((j + k) % p) * st], len, rt->ftz);
			for (int m = 1; m < p; m++)
				val[base + m * st] = NULL; /* folded into base */
			val[base] = out;
		}
		bank ^= 1;
	}
	tf_mxu_csr_leave(saved);
	return val[0];
}

/* A block of tf_slice_allreduce(_first): the total is copied to every replica's buffer (or
 * only to replica 0's). */
static void reduce_task(struct tf_slice_rt *rt, int task, int participant)
{
	size_t lo = rt->ar_lo[task], len = rt->ar_hi[task] - lo;
	int R = rt->replicas;
	const float **val = (const float **)rt->ar_val[participant];
	for (int i = 0; i < R; i++)
		val[i] = rt->ar_bufs[i] + lo;
	const float *total = reduce_block(rt, lo, len, val, rt->ar_tmp[participant], NULL);
	for (int i = 0; i < (rt->ar_first ? 1 : R); i++)
		if (rt->ar_bufs[i] + lo != total)
			memcpy(rt->ar_bufs[i] + lo, total, len * sizeof(float));
}

/* A block of tf_slice_allreduce_gen: every replica's values generated next to each other,
 * then summed straight into the sum buffer. */
static void gen_task(struct tf_slice_rt *rt, int task, int participant)
{
	size_t lo = rt->ar_lo[task], hi = rt->ar_hi[task], len = hi - lo;
	int R = rt->replicas;
	const float **val = (const float **)rt->ar_val[participant];
	float *g = rt->ar_gtmp[participant];
	for (int i = 0; i < R; i++) {
		float *v = g + (size_t)i * rt->ar_block;
		rt->ar_gen(i, lo, hi, v, rt->ar_gen_arg);
		val[i] = v;
	}
	const float *total =
	    reduce_block(rt, lo, len, val, rt->ar_tmp[participant], rt->ar_sum + lo);
	if (total != rt->ar_sum + lo) /* one replica: nothing to add */
		memcpy(rt->ar_sum + lo, total, len * sizeof(float));
}

/* Cuts [0, n) into blocks of at most `block` floats for the pool: at every multiple of block
 * and at every ring's chunk boundary (a block lies in one chunk of each ring); makes the
 * per-participant temporaries (2 banks x replicas blocks, and with `gen` replicas blocks for
 * the generated values). Returns the number of blocks (ar_lo, ar_hi). */
static size_t plan_blocks(struct tf_slice_rt *rt, size_t n, size_t block, int gen)
{
	struct ring_dim d[4];
	int nd = ring_dims(&rt->slice, d);
	int R = rt->replicas;
	size_t tneed = 2 * (size_t)R * block, gneed = gen ? (size_t)R * block : 0;
	for (int i = 0; i < rt->threads; i++) {
		if (tneed > rt->ar_tcap) {
			free(rt->ar_tmp[i]);
			rt->ar_tmp[i] = tf_xmalloc(tneed * sizeof(float));
		}
		if (gneed > rt->ar_gcap) {
			free(rt->ar_gtmp[i]);
			rt->ar_gtmp[i] = tf_xmalloc(gneed * sizeof(float));
		}
		if (!rt->ar_val[i])
			rt->ar_val[i] = tf_xcalloc((size_t)R, sizeof(float *));
	}
	rt->ar_tcap = tneed > rt->ar_tcap ? tneed : rt->ar_tcap;
	rt->ar_gcap = gneed > rt->ar_gcap ? gneed : rt->ar_gcap;
	rt->ar_block = block;
	size_t nb = 0;
	for (size_t lo = 0; lo < n;) {
		size_t hi = (lo / block + 1) * block;
		hi = hi < n ? hi : n;
		for (int di = 0; di < nd; di++) {
			uint64_t p = (uint64_t)d[di].size;
			if (p <= 1)
				continue;
			for (uint64_t j = 1; j < p; j++) {
				size_t b = (size_t)((uint64_t)n * j / p);
				if (b > lo && b < hi)
					hi = b;
			}
		}
		if (nb == rt->ar_cap) {
			rt->ar_cap = rt->ar_cap ? 2 * rt->ar_cap : 256;
			rt->ar_lo = tf_xrealloc(rt->ar_lo, rt->ar_cap * sizeof *rt->ar_lo);
			rt->ar_hi = tf_xrealloc(rt->ar_hi, rt->ar_cap * sizeof *rt->ar_hi);
		}
		rt->ar_lo[nb] = lo;
		rt->ar_hi[nb] = hi;
		nb++;
		lo = hi;
	}
	rt->ar_n = n;
	return nb;
}

/* The alpha-beta time of an all-reduce of n floats per replica. */
static void account_allreduce(struct tf_slice_rt *rt, size_t n)
{
	double bytes = (double)n * sizeof(float);
	double t = tf_slice_allreduce_seconds(&rt->slice, bytes);
	rt->st.allreduces++;
	rt->st.bytes_reduced += bytes;
	rt->st.collective_seconds += t;
	rt->st.device_seconds += t;
}

static void allreduce(struct tf_slice_rt *rt, float *const *bufs, size_t n, int first)
{
	int R = rt->replicas;
	/* Temporaries: 2 banks x replicas blocks per participant, at most ~16 MB each. */
	size_t block = (size_t)1 << 11;
	while (block > 64 && 2 * (size_t)R * block > ((size_t)1 << 22))
		block >>= 1;
	size_t nb = plan_blocks(rt, n, block, 0);
	rt->ar_bufs = bufs;
	rt->ar_first = first;
	if (R > 1 && nb)
		pool_exec(rt, (int)nb, reduce_task);
	account_allreduce(rt, n);
}

void tf_slice_allreduce_gen(struct tf_slice_rt *rt, size_t n, tf_slice_gen_fn gen, void *arg,
                            float *sum)
{
	int R = rt->replicas;
	/* The replicas' values of a block and the sums of its first layer stay in L2: ~128 KB
	 * of generated values per participant (16 rows of a 256-wide gradient on 8 replicas). */
	size_t block = (size_t)1 << 12;
	while (block > 64 && (size_t)R * block > ((size_t)1 << 15))
		block >>= 1;
	size_t nb = plan_blocks(rt, n, block, 1);
	rt->ar_gen = gen;
	rt->ar_gen_arg = arg;
	rt->ar_sum = sum;
	if (nb)
		pool_exec(rt, (int)nb, gen_task);
	account_allreduce(rt, n);
}

void tf_slice_allreduce(struct tf_slice_rt *rt, float *const *bufs, size_t n)
{
	allreduce(rt, bufs, n, 0);
}

void tf_slice_allreduce_first(struct tf_slice_rt *rt, float *const *bufs, size_t n)
{
	allreduce(rt, bufs, n, 1);
}

int tf_slice_check_hbm(const struct tf_tpu_slice *slice, double bytes_per_replica, char *err,
                       size_t errlen)
{
	double cap = slice->gen->hbm_bytes / slice->gen->cores_per_chip;
	if (bytes_per_replica <= cap)
		return 0;
	if (err && errlen)
		snprintf(err, errlen,
		         "a replica needs %.3g GB but a %s TensorCore has %.3g GB of HBM: use a "
		         "smaller batch or model, or a generation with more HBM",
		         bytes_per_replica / 1e9, slice->gen->name, cap / 1e9);
	return -ENOMEM;
}

void tf_slice_shard(size_t total, int replicas, int index, size_t *start, size_t *count)
{
	size_t r = replicas > 0 ? (size_t)replicas : 1, i = (size_t)index;
	size_t base = total / r, extra = total % r;
	*start = i * base + (i < extra ? i : extra);
	*count = base + (i < extra);
}

void tf_slice_stats(const struct tf_slice_rt *rt, struct tf_slice_stats *out)
{
	*out = rt->st;
	const struct tf_tpu_gen *g = rt->slice.gen;
	double denom =
	    (double)rt->st.cycles * g->mxu_rows * g->mxu_cols * g->mxus_per_core * rt->replicas;
	out->mxu_utilization = denom > 0 ? (double)rt->st.macs / denom : 0.0;
}

void tf_slice_stats_reset(struct tf_slice_rt *rt)
{
	memset(&rt->st, 0, sizeof rt->st);
}

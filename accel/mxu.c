/* mxu.c — the fast MXU kernel: packing, blocking, threads over M/N, run-time kernel choice.
 *
 * Loop nest (BLIS-style, one per thread on its own block of C):
 *     for jc over N by NC:            pack op(W)[pc.., jc..] into NR-wide panels (bf16-rounded)
 *       for pc over K by KC:          KC is a multiple of R, so K-tiles never straddle blocks
 *         for ic over M by MC:        pack op(X)[ic.., pc..] into MR-tall panels (bf16-rounded)
 *           for jr, ir:               microkernel: per K-tile, s = fma chain in k order, C += s
 *                                     (a small B block: one call per A panel covers every jr)
 * Narrow outputs (N < 16) take another path on AVX2, vectorised over M (mxu_avx2.c).
 * In TPU mode (ftz) with an even K-tile length, CPUs with AVX512-BF16 run the AVX-512 path
 * instead (mxu_avx512.c: bf16 pairs and VDPBF16PS, its own blocking of the same nest), and
 * a caller can pack op(W) once for many GEMMs (tf_mxu_wpack).
 * K is walked in ascending order and each tile's sum is added to C as soon as it is complete,
 * so every output sees exactly the contract's sequence of roundings (mxu.h). The first tile
 * writes C = +0 + s without reading C, the last one canonicalises NaNs. Vector lanes and
 * threads cover different outputs (N, M), never different k.
 *
 * Invariants: (1) pc blocks start at multiples of R; (2) packing never pads K (a padded k would
 * add fma(0, 0, s), turning s = -0 into +0); M/N padding rows and columns are computed into a
 * scratch tile and discarded. */
#include "accel/mxu.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "accel/bf16.h"
#include "accel/mxu_int.h"
#include "common/common.h"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define HAVE_MXCSR 1
#endif

#define MR TF_MXU_MR
#define NR TF_MXU_NR
#define MC 144  /* rows of op(X) packed at once: 24 microkernel panels, ~150 KB at KC=256 */
#define NC 4080 /* columns of op(W) packed at once (multiple of NR) */
#define MAX_THREADS 64
#define SMALL_B 4096 /* floats of packed B (16 KB) run against each A panel in one call */
/* Below this many multiply-adds per thread a GEMM uses fewer threads: waking workers costs
 * more than it saves (results are the same either way). Tests set it to 0. */
size_t tf_mxu_min_macs_per_thread = 1u << 18;

_Atomic uint64_t tf_mxu_worker_parts;

/* The fast paths, best last. */
enum kernel { K_PORTABLE, K_AVX2, K_AVX512 };
static const char *const kernel_names[] = {"portable", "avx2", "avx512"};
static _Atomic int forced = -1; /* tf_mxu_force_kernel; -1: the best this CPU has */
static int best = K_PORTABLE;
static pthread_once_t best_once = PTHREAD_ONCE_INIT;

static void best_init(void)
{
	if (!tf_bf16_have_avx2())
		return;
	best = K_AVX2;
#if defined(__x86_64__) || defined(__i386__)
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
	    __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16")) {
		unsigned saved = tf_mxu_csr_enter(1);
		if (tf_mxu_avx512_probe())
			best = K_AVX512;
		tf_mxu_csr_leave(saved);
	}
#endif
}

static int kernel_best(void)
{
	pthread_once(&best_once, best_init);
	return best;
}

static int kernel_now(void)
{
	int f = atomic_load(&forced);
	return f >= 0 ? f : kernel_best();
}

/* The AVX-512 path covers TPU mode with an even K-tile length; the rest runs on AVX2. */
static int kernel_for(const struct tf_mxu_cfg *cfg)
{
	int k = kernel_now();
	return k == K_AVX512 && !(cfg->ftz && cfg->rows % 2 == 0) ? K_AVX2 : k;
}

void tf_mxu_cfg_init(struct tf_mxu_cfg *cfg)
{
	cfg->rows = 128;
	cfg->cols = 128;
	cfg->ftz = 1;
	cfg->threads = 1;
	cfg->mxus = 1;
}

void tf_mxu_cfg_norm(const struct tf_mxu_cfg *in, struct tf_mxu_cfg *out)
{
	*out = *in;
	if (out->rows <= 0)
		out->rows = 128;
	if (out->cols <= 0)
		out->cols = 128;
	if (out->threads <= 0)
		out->threads = 1;
	if (out->mxus <= 0)
		out->mxus = 1;
	out->ftz = in->ftz ? 1 : 0;
}

unsigned tf_mxu_csr_enter(int ftz)
{
#ifdef HAVE_MXCSR
	unsigned saved = _mm_getcsr();
	/* 0x1F80: all exceptions masked, round to nearest; 0x8000 FTZ, 0x0040 DAZ. */
	_mm_setcsr(0x1f80u | (ftz ? 0x8040u : 0u));
	return saved;
#else
	(void)ftz;
	return 0;
#endif
}

void tf_mxu_csr_leave(unsigned saved)
{
#ifdef HAVE_MXCSR
	_mm_setcsr(saved);
#else
	(void)saved;
#endif
}

void tf_mxu_canon_nan(size_t M, size_t N, float *C, size_t ldc)
{
	const uint32_t qnan = 0x7fc00000u;
	for (size_t i = 0; i < M; i++) {
		float *row = C + i * ldc;
		for (size_t j = 0; j < N; j++) {
			uint32_t u;
			memcpy(&u, &row[j], sizeof u);
			if ((u & 0x7fffffffu) > 0x7f800000u)
				memcpy(&row[j], &qnan, sizeof qnan);
		}
	}
}

void tf_mxu_stats_fill(const struct tf_mxu_cfg *cfg, size_t M, size_t K, size_t N, uint64_t cycles,
                       struct tf_mxu_stats *stats)
{
	struct tf_mxu_model m;
	tf_mxu_model(TF_MXU_WS, M, K, N, cfg->rows, cfg->cols, cfg->mxus, &m);
	memset(stats, 0, sizeof *stats);
	stats->cycles = cycles;
	stats->folds = m.folds;
	stats->macs = (uint64_t)M * K * N;
	stats->mapping_efficiency = m.mapping_efficiency;
	if (cycles)
		stats->utilization =
		    (double)stats->macs / ((double)cycles * cfg->rows * cfg->cols * cfg->mxus);
}

const char *tf_mxu_kernel_name(void)
{
	return kernel_names[kernel_now()];
}

int tf_mxu_force_kernel(const char *name)
{
	if (!name || !*name) {
		atomic_store(&forced, -1);
		return 0;
	}
	for (int k = 0; k <= K_AVX512; k++) {
		if (strcmp(name, kernel_names[k]) != 0)
			continue;
		if (k > kernel_best())
			return -ENOTSUP;
		atomic_store(&forced, k);
		return 0;
	}
	return -EINVAL;
}

/* The problem one thread works on: a block of C with op(X) rows and op(W) columns. */
struct part {
	const struct tf_mxu_cfg *cfg; /* normalised */
	int trans_x, trans_w;         /* as given to tf_mxu_gemm */
	size_t M, K, N;               /* this block's sizes (K is whole) */
	const float *X, *W;           /* already offset to the block's first row / column */
	size_t ldx, ldw, ldc;
	size_t x_avail;         /* floats of a stored X row readable from X (ldx; transposed:
	                           M - offset, as X may be a block of a wider array) */
	float *C;               /* block's top-left output */
	int kernel;             /* enum kernel, already fitted to cfg (kernel_for) */
	const uint32_t *packed; /* AVX-512 only: op(W) from tf_mxu_wpack, packed_n columns */
	size_t packed_n;
	uint32_t packed_max; /* the largest magnitude in packed, as float bits */
};

/* Portable packing: same layouts as the AVX2 code (mxu_int.h). */
static void pack_a_c(int trans, const float *X, size_t ldx, size_t avail, size_t i0, size_t mr,
                     size_t p0, size_t kc, int ftz, float *a, uint32_t *maxbits)
{
	(void)avail;
	(void)maxbits; /* run_part asks only the AVX2 packing for bounds */
	for (size_t i = 0; i < MR; i++) {
		for (size_t k = 0; k < kc; k++) {
			float v = 0.0f;
			if (i < mr)
				v = tf_mxu_rnd(trans ? X[(p0 + k) * ldx + i0 + i]
				                     : X[(i0 + i) * ldx + p0 + k],
				               ftz);
			if (trans)
				a[k * MR + i] = v;
			else
				a[i * kc + k] = v;
		}
	}
}

static void pack_b_c(int trans, const float *W, size_t ldw, size_t j0, size_t nr, size_t p0,
                     size_t kc, int ftz, float *b, uint32_t *maxbits)
{
	(void)maxbits;
	for (size_t k = 0; k < kc; k++)
		for (size_t j = 0; j < NR; j++)
			b[k * NR + j] = j >= nr ? 0.0f
			                        : tf_mxu_rnd(trans ? W[(j0 + j) * ldw + p0 + k]
			                                           : W[(p0 + k) * ldw + j0 + j],
			                                     ftz);
}

/* Portable microkernel: the contract written out with fmaf; flags as for the AVX2 one. */
static void ukernel_block(size_t kc, size_t R, const float *a, size_t ais, size_t aks,
                          const float *b, float *c, size_t ldc, size_t mr, size_t nr, int flags)
{
	for (size_t t0 = 0; t0 < kc; t0 += R) {
		size_t len = kc - t0 < R ? kc - t0 : R;
		int first = t0 == 0 && (flags & TF_MXU_FIRST);
		int last = t0 + len == kc && (flags & TF_MXU_LAST);
		int ftz = flags & TF_MXU_SOFT_FTZ;
		float s[MR][NR];
		for (size_t i = 0; i < MR; i++)
			for (size_t j = 0; j < NR; j++)
				s[i][j] = 0.0f;
		for (size_t k = t0; k < t0 + len; k++)
			for (size_t i = 0; i < MR; i++)
				for (size_t j = 0; j < NR; j++) {
					s[i][j] =
					    fmaf(a[i * ais + k * aks], b[k * NR + j], s[i][j]);
					if (ftz)
						s[i][j] = tf_mxu_ftz(s[i][j]);
				}
		for (size_t i = 0; i < mr; i++) {
			for (size_t j = 0; j < nr; j++) {
				float acc = first ? 0.0f : c[i * ldc + j];
				acc = acc + s[i][j];
				c[i * ldc + j] = ftz ? tf_mxu_ftz(acc) : acc;
			}
		}
		if (last)
			tf_mxu_canon_nan(mr, nr, c, ldc);
	}
}

/* Column panels side by side, as tf_mxu_ukernel_avx2. */
static void ukernel_c(size_t kc, size_t R, const float *a, size_t ais, size_t aks, const float *b,
                      float *c, size_t ldc, size_t mr, size_t nc, int flags)
{
	for (size_t jr = 0; jr < nc; jr += NR)
		ukernel_block(kc, R, a, ais, aks, b + jr * kc, c + jr, ldc, mr,
		              nc - jr < NR ? nc - jr : NR, flags);
}

/* Rows in the next A panel when `left` rows remain: 6, except that 8 becomes 4 + 4 and 4 or
 * fewer are one panel, so a 2-row remainder (a 6-row block doing a third of its work) only
 * happens when it cannot be avoided. The AVX2 kernel runs panels of <= 4 rows with its
 * 4-row variant at full speed. */
static size_t panel_rows(size_t left)
{
	if (left == 8)
		return 4;
	return left < MR ? left : MR;
}

/* Per-thread packing buffers, kept between calls (freed when the thread exits). */
struct bufs {
	float *a, *b;      /* A and B panels */
	size_t acap, bcap; /* their capacities in floats */
};

static pthread_key_t bufs_key;
static pthread_once_t bufs_once = PTHREAD_ONCE_INIT;

static void bufs_free(void *p)
{
	struct bufs *bf = p;
	free(bf->a);
	free(bf->b);
	free(bf);
}

static void bufs_key_init(void)
{
	if (pthread_key_create(&bufs_key, bufs_free) != 0)
		abort();
}

static struct bufs *thread_bufs(size_t acap, size_t bcap)
{
	pthread_once(&bufs_once, bufs_key_init);
	struct bufs *bf = pthread_getspecific(bufs_key);
	if (!bf) {
		bf = tf_xcalloc(1, sizeof *bf);
		pthread_setspecific(bufs_key, bf);
	}
	if (bf->acap < acap) {
		free(bf->a);
		bf->a = tf_xmalloc(acap * sizeof(float));
		bf->acap = acap;
	}
	if (bf->bcap < bcap) {
		free(bf->b);
		bf->b = tf_xmalloc(bcap * sizeof(float));
		bf->bcap = bcap;
	}
	return bf;
}

static void run_part(const struct part *p)
{
	const size_t R = (size_t)p->cfg->rows;
	const size_t KC = R >= 256 ? R : R * (256 / R);
	const size_t M = p->M, K = p->K, N = p->N;
	const int ftz = p->cfg->ftz;
	const int portable = p->kernel == K_PORTABLE;
	void (*uk)(size_t, size_t, const float *, size_t, size_t, const float *, float *, size_t,
	           size_t, size_t, int) = portable ? ukernel_c : tf_mxu_ukernel_avx2;
	void (*pa)(int, const float *, size_t, size_t, size_t, size_t, size_t, size_t, int, float *,
	           uint32_t *) = portable ? pack_a_c : tf_mxu_pack_a_avx2;
	void (*pb)(int, const float *, size_t, size_t, size_t, size_t, size_t, int, float *,
	           uint32_t *) = portable ? pack_b_c : tf_mxu_pack_b_avx2;

	if (!K) /* no tiles: acc stays +0 */
		for (size_t i = 0; i < M; i++)
			memset(p->C + i * p->ldc, 0, N * sizeof(float));
	if (!M || !N || !K)
		return;

	if (p->kernel == K_AVX512) {
		size_t aw = tf_mxu_avx512_abuf_words(M, K, N, R);
		size_t bw = p->packed ? 0 : tf_mxu_avx512_bbuf_words(K, N, R);
		struct bufs *zb = thread_bufs(aw, bw);
		/* the scratch (allocated memory, no declared type) holds bf16 pairs as 32-bit words */
		uint32_t *za = (void *)zb->a, *zbw = (void *)zb->b;
		tf_mxu_avx512_run(p->trans_x, p->trans_w, M, K, N, p->X, p->ldx, p->W, p->ldw, p->C,
		                  p->ldc, R, p->packed, p->packed_n, p->packed_max, za, zbw);
		return;
	}

	/* Narrow outputs: vectorised over M instead (mxu_avx2.c) */
	if (!portable && N < NR && K * N <= TF_MXU_NARROW_MAX_KN) {
		struct bufs *nb = thread_bufs(16 * K + 8, K * N + 8);
		tf_mxu_narrow_avx2(p->trans_x, p->trans_w, M, K, N, p->X, p->ldx, p->W, p->ldw,
		                   p->C, p->ldc, R, ftz, nb->a, nb->b);
		return;
	}

	size_t nc_max = N < NC ? N : NC, kc_max = K < KC ? K : KC;
	size_t mc_max = M < MC ? M : MC;
	/* A: up to mc/4 + 1 panels of MR x kc slots, plus 8 floats of slack for the packing's
	 * whole-vector stores past a row's end (mxu_avx2.c) */
	struct bufs *bf =
	    thread_bufs((mc_max / 4 + 1) * MR * kc_max + 8, (nc_max + NR - 1) / NR * NR * kc_max);

	for (size_t jc = 0; jc < N; jc += NC) {
		size_t nc = N - jc < NC ? N - jc : NC;
		for (size_t pc = 0; pc < K; pc += KC) {
			size_t kc = K - pc < KC ? K - pc : KC;
			/* With all of K in one block, the packing bounds |x| and |w|: when
			 * K * max|x| * max|w| <= 2^120, no partial sum can reach Inf (rounding
			 * grows a sum by at most (1 + 2^-24)^K), so no output is NaN and the
			 * kernel skips canonicalising them (TF_MXU_LAST), which for short K is a
			 * good part of its work. */
			int bound = kc == K && !portable;
			uint32_t bmax = 0;
			for (size_t jr = 0; jr < nc; jr += NR) {
				size_t nr = nc - jr < NR ? nc - jr : NR;
				uint32_t m = 0;
				pb(p->trans_w, p->W, p->ldw, jc + jr, nr, pc, kc, ftz,
				   bf->b + jr * kc, bound ? &m : NULL);
				bmax = m > bmax ? m : bmax;
			}
			for (size_t ic = 0; ic < M; ic += MC) {
				size_t mc = M - ic < MC ? M - ic : MC;
				uint32_t amax = 0;
				for (size_t ir = 0, q = 0; ir < mc;
				     ir += panel_rows(mc - ir), q++) {
					uint32_t m = 0;
					pa(p->trans_x, p->X, p->ldx, p->x_avail, ic + ir,
					   panel_rows(mc - ir), pc, kc, ftz, bf->a + q * MR * kc,
					   bound ? &m : NULL);
					amax = m > amax ? m : amax;
				}
				size_t ais = p->trans_x ? 1 : kc, aks = p->trans_x ? MR : 1;
				int flags = (pc == 0 ? TF_MXU_FIRST : 0) |
				            (pc + kc == K ? TF_MXU_LAST : 0) |
				            (portable && ftz ? TF_MXU_SOFT_FTZ : 0);
				if (bound && !tf_mxu_may_overflow(amax, bmax, K))
					flags &= ~TF_MXU_LAST;
				/* A small packed B (short K, e.g. dY.W^T of a 10-class layer) stays
				 * in L1 while each A panel runs against all of it in one call; a
				 * large one is walked one column panel at a time against the A
				 * block instead. */
				size_t jstep = nc * kc <= SMALL_B ? nc : NR;
				for (size_t jr = 0; jr < nc; jr += jstep) {
					size_t nr = nc - jr < jstep ? nc - jr : jstep;
					const float *b = bf->b + jr * kc;
					for (size_t ir = 0, q = 0; ir < mc;
					     ir += panel_rows(mc - ir), q++) {
						size_t mr = panel_rows(mc - ir);
						uk(kc, R, bf->a + q * MR * kc, ais, aks, b,
						   p->C + (ic + ir) * p->ldc + jc + jr, p->ldc, mr,
						   nr, flags);
					}
				}
			}
		}
	}
}

/* The worker pool for multi-threaded GEMMs: started on first use, grown on demand. Between
 * calls a worker spins for up to SPIN_SECONDS watching `gen` (back-to-back GEMMs of a training
 * step then start without a wake-up, which on a VM costs tens of microseconds), then sleeps
 * on work_cv. One multi-threaded GEMM at a time uses the pool (call_mu); single-threaded
 * GEMMs never touch it, so slice replicas calling from their own threads do not contend.
 * `gen` and `remaining` are atomics so spinning needs no lock; they are also changed under
 * `mu` when a sleeper must be woken. */
#define SPIN_SECONDS 100e-6

static struct {
	pthread_mutex_t call_mu;  /* one multi-threaded GEMM at a time */
	pthread_mutex_t mu;       /* pairs with the condition variables */
	pthread_cond_t work_cv;   /* new generation */
	pthread_cond_t done_cv;   /* remaining reached 0 */
	int nworkers;             /* started workers (ids 1..nworkers), under mu */
	_Atomic uint64_t gen;     /* bumped per call, after parts/nparts/ftz are set */
	const struct part *parts; /* this call's parts; part 0 runs on the caller */
	int nparts;               /* parts in this call */
	int ftz;                  /* MXCSR mode for this call */
	_Atomic int remaining;    /* workers that have not finished this call */
} pool = {.call_mu = PTHREAD_MUTEX_INITIALIZER,
          .mu = PTHREAD_MUTEX_INITIALIZER,
          .work_cv = PTHREAD_COND_INITIALIZER,
          .done_cv = PTHREAD_COND_INITIALIZER};

static inline void cpu_relax(void)
{
#ifdef HAVE_MXCSR
	_mm_pause();
#endif
}

/* Spins until *v != old (returns 1) or SPIN_SECONDS pass (returns 0). */
static int spin_until_changed(_Atomic uint64_t *v, uint64_t old)
{
	double t0 = tf_now_monotonic();
	for (;;) {
		for (int i = 0; i < 64; i++) {
			if (atomic_load_explicit(v, memory_order_acquire) != old)
				return 1;
			cpu_relax();
		}
		if (tf_now_monotonic() - t0 > SPIN_SECONDS)
			return 0;
	}
}

/* What a new worker is told: its number and the generation current when it was created. */
struct worker_start {
	int id;        /* 1 .. nworkers */
	uint64_t seen; /* pool.gen at creation; the creating call bumps it next */
};

static void *pool_worker(void *arg)
{
	struct worker_start ws = *(struct worker_start *)arg;
	free(arg);
	int id = ws.id;
	/* Created by the call that needs it, under pool.mu and before that call bumps gen: it
	 * takes part from that call on. */
	uint64_t seen = ws.seen;
	for (;;) {
		if (!spin_until_changed(&pool.gen, seen)) {
			pthread_mutex_lock(&pool.mu);
			while (atomic_load(&pool.gen) == seen)
				pthread_cond_wait(&pool.work_cv, &pool.mu);
			pthread_mutex_unlock(&pool.mu);
		}
		seen = atomic_load_explicit(&pool.gen, memory_order_acquire);
		if (id < pool.nparts) {
			unsigned saved = tf_mxu_csr_enter(pool.ftz);
			run_part(&pool.parts[id]);
			tf_mxu_csr_leave(saved);
			atomic_fetch_add(&tf_mxu_worker_parts, 1);
		}
		/* Every worker acknowledges every call, with or without a part, so none can
		 * still be reading this call's fields when the next call rewrites them. */
		if (atomic_fetch_sub(&pool.remaining, 1) == 1) {
			pthread_mutex_lock(&pool.mu);
			pthread_cond_signal(&pool.done_cv);
			pthread_mutex_unlock(&pool.mu);
		}
	}
	return NULL;
}

/* A forked child has none of the parent's workers: start from an empty pool. */
static void pool_atfork_child(void)
{
	pthread_mutex_init(&pool.call_mu, NULL);
	pthread_mutex_init(&pool.mu, NULL);
	pthread_cond_init(&pool.work_cv, NULL);
	pthread_cond_init(&pool.done_cv, NULL);
	pool.nworkers = 0;
	atomic_store(&pool.remaining, 0);
}

static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void atfork_init(void)
{
	pthread_atfork(NULL, NULL, pool_atfork_child);
}

/* Runs parts[1..n) on workers and parts[0] here; returns when all are done. */
static void pool_run(const struct part *parts, int n, int ftz)
{
	pthread_once(&atfork_once, atfork_init);
	pthread_mutex_lock(&pool.call_mu);
	pthread_mutex_lock(&pool.mu);
	while (pool.nworkers < n - 1) {
		pthread_t tid;
		pthread_attr_t attr;
		pthread_attr_init(&attr);
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		struct worker_start *ws = tf_xmalloc(sizeof *ws);
		ws->id = pool.nworkers + 1;
		ws->seen = atomic_load(&pool.gen);
		int rc = pthread_create(&tid, &attr, pool_worker, ws);
		pthread_attr_destroy(&attr);
		if (rc != 0) {
			free(ws);
			break;
		}
		pool.nworkers++;
	}
	int nw = n - 1 < pool.nworkers ? n - 1 : pool.nworkers;
	pool.parts = parts;
	pool.nparts = nw + 1;
	pool.ftz = ftz;
	atomic_store(&pool.remaining, pool.nworkers);
	atomic_fetch_add_explicit(&pool.gen, 1, memory_order_release);
	pthread_cond_broadcast(&pool.work_cv);
	pthread_mutex_unlock(&pool.mu);

	unsigned saved = tf_mxu_csr_enter(ftz);
	run_part(&parts[0]);
	for (int i = nw + 1; i < n; i++)
		run_part(&parts[i]); /* no worker for it: same result, on this thread */
	tf_mxu_csr_leave(saved);

	double t0 = tf_now_monotonic();
	while (atomic_load(&pool.remaining) > 0 && tf_now_monotonic() - t0 < SPIN_SECONDS)
		cpu_relax();
	if (atomic_load(&pool.remaining) > 0) {
		pthread_mutex_lock(&pool.mu);
		while (atomic_load(&pool.remaining) > 0)
			pthread_cond_wait(&pool.done_cv, &pool.mu);
		pthread_mutex_unlock(&pool.mu);
	}
	pthread_mutex_unlock(&pool.call_mu);
}

/* Runs `whole` on cfg->threads threads (fewer for small GEMMs): C is split into blocks along
 * the longer of M and N (in whole microkernel panels; along M only when split_n_ok is 0),
 * never along K. */
static void run_split(const struct tf_mxu_cfg *cfg, const struct part *whole, int split_n_ok)
{
	size_t M = whole->M, K = whole->K, N = whole->N;
	int nt = cfg->threads > MAX_THREADS ? MAX_THREADS : cfg->threads;
	double macs = (double)M * (double)K * (double)N;
	if (tf_mxu_min_macs_per_thread && macs < (double)tf_mxu_min_macs_per_thread * nt)
		nt = (int)(macs / (double)tf_mxu_min_macs_per_thread);
	int split_n = split_n_ok && N >= M, z = whole->kernel == K_AVX512;
	size_t unit = split_n ? (z ? 32 : NR) : (z ? TF_MXU_ZMR : MR), len = split_n ? N : M;
	size_t units = (len + unit - 1) / unit;
	if ((size_t)nt > units)
		nt = (int)units;
	if (nt <= 1) {
		unsigned saved = tf_mxu_csr_enter(cfg->ftz);
		run_part(whole);
		tf_mxu_csr_leave(saved);
		return;
	}
	struct part parts[MAX_THREADS];
	size_t start = 0;
	for (int t = 0; t < nt; t++) {
		size_t cnt = units / (size_t)nt + ((size_t)t < units % (size_t)nt);
		size_t b0 = start * unit, b1 = (start + cnt) * unit;
		if (b1 > len)
			b1 = len;
		start += cnt;
		struct part *p = &parts[t];
		*p = *whole;
		if (split_n) {
			p->N = b1 - b0;
			p->W = whole->trans_w ? whole->W + b0 * whole->ldw : whole->W + b0;
			p->C = whole->C + b0;
		} else {
			p->M = b1 - b0;
			p->X = whole->trans_x ? whole->X + b0 : whole->X + b0 * whole->ldx;
			p->x_avail = whole->trans_x ? whole->x_avail - b0 : whole->ldx;
			p->C = whole->C + b0 * whole->ldc;
		}
	}
	pool_run(parts, nt, cfg->ftz);
}

static void fill_stats(const struct tf_mxu_cfg *cfg, size_t M, size_t K, size_t N,
                       struct tf_mxu_stats *stats)
{
	if (stats) {
		struct tf_mxu_model m;
		tf_mxu_model(TF_MXU_WS, M, K, N, cfg->rows, cfg->cols, cfg->mxus, &m);
		tf_mxu_stats_fill(cfg, M, K, N, m.core_cycles, stats);
	}
}

void tf_mxu_gemm(const struct tf_mxu_cfg *cfg_in, int trans_x, int trans_w, size_t M, size_t K,
                 size_t N, const float *X, size_t ldx, const float *W, size_t ldw, float *C,
                 size_t ldc, struct tf_mxu_stats *stats)
{
	struct tf_mxu_cfg cfg;
	tf_mxu_cfg_norm(cfg_in, &cfg);
	int kernel = kernel_for(&cfg);

	/* Narrow outputs (N < 16, e.g. the weight gradient of a 10-class layer) would fill few
	 * vector lanes. With AVX2, run_part vectorises them over M (mxu_avx2.c); the AVX-512
	 * path uses 16-column panels with masked stores. Otherwise (the portable kernel, or
	 * K * N too large for the AVX2 path's packed W), with trans_x compute
	 * C^T = op(W)^T . op(X)^T instead, whose rows are the narrow side. Each output still gets
	 * the same fma chain, since fmaf(w, x, s) == fmaf(x, w, s) exactly, so the bits are the
	 * contract's (tests compare both against the reference). Only with trans_x: then
	 * op(X)^T is X as stored and packs without a transpose. */
	if (kernel != K_AVX512 && trans_x && N < NR && M >= 2 * NR && K > 0 &&
	    (kernel == K_PORTABLE || K * N > TF_MXU_NARROW_MAX_KN)) {
		float *T = tf_xmalloc(N * M * sizeof *T);
		tf_mxu_gemm(&cfg, !trans_w, !trans_x, N, K, M, W, ldw, X, ldx, T, M, NULL);
		for (size_t m = 0; m < M; m++)
			for (size_t n = 0; n < N; n++)
				C[m * ldc + n] = T[n * M + m];
		free(T);
		fill_stats(&cfg, M, K, N, stats);
		return;
	}

	struct part whole = {
	    .cfg = &cfg,
	    .trans_x = trans_x,
	    .trans_w = trans_w,
	    .M = M,
	    .K = K,
	    .N = N,
	    .X = X,
	    .W = W,
	    .ldx = ldx,
	    .ldw = ldw,
	    .ldc = ldc,
	    .C = C,
	    .x_avail = trans_x ? M : ldx, /* a transposed X may be a block of a wider array */
	    .kernel = kernel,
	};
	run_split(&cfg, &whole, 1);
	fill_stats(&cfg, M, K, N, stats);
}

/* ---- op(W) packed once for many GEMMs ---- */

struct tf_mxu_wpack {
	int trans_w;     /* as for tf_mxu_gemm */
	size_t K, N;     /* op(W) is K x N */
	const float *W;  /* the caller's W (read when the packed form cannot be used) */
	size_t ldw;      /* its leading dimension */
	int rows, ftz;   /* configuration the packing was made for */
	bool packed;     /* words hold op(W) for the AVX-512 path */
	uint32_t *words; /* tf_mxu_avx512_pack_w's layout */
	uint32_t maxbits; /* the largest magnitude in words, as float bits */
	size_t cap;      /* words allocated */
};

struct tf_mxu_wpack *tf_mxu_wpack_new(void)
{
	return tf_xcalloc(1, sizeof(struct tf_mxu_wpack));
}

void tf_mxu_wpack_shape(const struct tf_mxu_wpack *p, size_t *K, size_t *N)
{
	*K = p->K;
	*N = p->N;
}

void tf_mxu_wpack_free(struct tf_mxu_wpack *p)
{
	if (!p)
		return;
	free(p->words);
	free(p);
}

void tf_mxu_wpack_set(struct tf_mxu_wpack *p, const struct tf_mxu_cfg *cfg_in, int trans_w,
                      size_t K, size_t N, const float *W, size_t ldw)
{
	struct tf_mxu_cfg cfg;
	tf_mxu_cfg_norm(cfg_in, &cfg);
	p->trans_w = trans_w;
	p->K = K;
	p->N = N;
	p->W = W;
	p->ldw = ldw;
	p->rows = cfg.rows;
	p->ftz = cfg.ftz;
	p->packed = kernel_for(&cfg) == K_AVX512 && K && N;
	if (!p->packed)
		return;
	size_t need = tf_mxu_avx512_packed_words(K, N, (size_t)cfg.rows);
	if (need > p->cap) {
		free(p->words);
		p->words = tf_xmalloc(need * sizeof *p->words);
		p->cap = need;
	}
	p->maxbits = tf_mxu_avx512_pack_w(trans_w, K, N, W, ldw, (size_t)cfg.rows, p->words);
}

void tf_mxu_gemm_wpack(const struct tf_mxu_cfg *cfg_in, int trans_x, size_t M, const float *X,
                       size_t ldx, const struct tf_mxu_wpack *p, float *C, size_t ldc,
                       struct tf_mxu_stats *stats)
{
	struct tf_mxu_cfg cfg;
	tf_mxu_cfg_norm(cfg_in, &cfg);
	if (!p->packed || kernel_for(&cfg) != K_AVX512 || cfg.rows != p->rows ||
	    cfg.ftz != p->ftz) {
		tf_mxu_gemm(&cfg, trans_x, p->trans_w, M, p->K, p->N, X, ldx, p->W, p->ldw, C, ldc,
		            stats);
		return;
	}
	struct part whole = {
	    .cfg = &cfg,
	    .trans_x = trans_x,
	    .trans_w = p->trans_w,
	    .M = M,
	    .K = p->K,
	    .N = p->N,
	    .X = X,
	    .W = p->W,
	    .ldx = ldx,
	    .ldw = p->ldw,
	    .ldc = ldc,
	    .C = C,
	    .x_avail = trans_x ? M : ldx,
	    .kernel = K_AVX512,
	    .packed = p->words,
	    .packed_n = p->N,
	    .packed_max = p->maxbits,
	};
	run_split(&cfg, &whole, 0); /* the packed panels span all of N */
	fill_stats(&cfg, M, p->K, p->N, stats);
}

/* Columns [c0, c1) of one row of op(X) . op(W), op(W) read from the pack's borrowed W. */
static void row_columns(const struct tf_mxu_cfg *cfg, int trans_x, const float *xrow, size_t ldx,
                        const struct tf_mxu_wpack *p, size_t c0, size_t c1, float *out)
{
	tf_mxu_gemm(cfg, trans_x, p->trans_w, 1, p->K, c1 - c0, xrow, ldx,
	            p->trans_w ? p->W + c0 * p->ldw : p->W + c0, p->ldw, out, p->N, NULL);
}

void tf_mxu_gemm_wpack_range(const struct tf_mxu_cfg *cfg, int trans_x, size_t M, const float *X,
                             size_t ldx, const struct tf_mxu_wpack *p, size_t lo, size_t hi,
                             float *out)
{
	size_t N = p->N;
	if (hi > M * N)
		hi = M * N;
	if (lo >= hi)
		return;
	/* op(X) row i starts at X + i (transposed) or X + i * ldx */
	size_t xrow = trans_x ? 1 : ldx;
	size_t r0 = lo / N, c0 = lo % N, r1 = hi / N, c1 = hi % N;
	if (r0 == r1) { /* within one row */
		row_columns(cfg, trans_x, X + r0 * xrow, ldx, p, c0, c1, out);
		return;
	}
	if (c0) { /* the end of row r0 */
		row_columns(cfg, trans_x, X + r0 * xrow, ldx, p, c0, N, out);
		out += N - c0;
		r0++;
	}
	if (r1 > r0) { /* whole rows */
		tf_mxu_gemm_wpack(cfg, trans_x, r1 - r0, X + r0 * xrow, ldx, p, out, N, NULL);
		out += (r1 - r0) * N;
	}
	if (c1) /* the start of row r1 */
		row_columns(cfg, trans_x, X + r1 * xrow, ldx, p, 0, c1, out);
}

/* mxu.c — the fast MXU kernel: packing, blocking, threads over M/N, run-time kernel choice.
 *
 * Loop nest (BLIS-style, one per thread on its own block of C):
 *     C = +0
 *     for jc over N by NC:            pack op(W)[pc.., jc..] into NR-wide panels (bf16-rounded)
 *       for pc over K by KC:          KC is a multiple of R, so K-tiles never straddle blocks
 *         for ic over M by MC:        pack op(X)[ic.., pc..] into MR-tall panels (bf16-rounded)
 *           for jr, ir:               microkernel: per K-tile, s = fma chain in k order, C += s
 * K is walked in ascending order and each tile's sum is added to C as soon as it is complete,
 * so every output sees exactly the contract's sequence of roundings (mxu.h). Vector lanes and
 * threads cover different outputs (N, M), never different k.
 *
 * Invariants: (1) pc blocks start at multiples of R; (2) packing never pads K (a padded k would
 * add fma(0, 0, s), turning s = -0 into +0); M/N padding rows and columns are computed into a
 * scratch tile and discarded. */
#include "accel/mxu.h"

#include <math.h>
#include <pthread.h>
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

static int force_portable;

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

void tf_mxu_stats_fill(const struct tf_mxu_cfg *cfg, size_t M, size_t K, size_t N,
		       uint64_t cycles, struct tf_mxu_stats *stats)
{
	struct tf_mxu_model m;
	tf_mxu_model(TF_MXU_WS, M, K, N, cfg->rows, cfg->cols, cfg->mxus, &m);
	memset(stats, 0, sizeof *stats);
	stats->cycles = cycles;
	stats->folds = m.folds;
	stats->macs = (uint64_t)M * K * N;
	stats->mapping_efficiency = m.mapping_efficiency;
	if (cycles)
		stats->utilization = (double)stats->macs /
				     ((double)cycles * cfg->rows * cfg->cols * cfg->mxus);
}

const char *tf_mxu_kernel_name(void)
{
	return (!force_portable && tf_bf16_have_avx2()) ? "avx2" : "portable";
}

void tf_mxu_force_portable(int on)
{
	force_portable = on;
}

/* Same rounding as tf_bf16_round, inlined for the packing loops. */
static inline float rnd(float f, int ftz)
{
	uint32_t u;
	memcpy(&u, &f, sizeof u);
	if ((u & 0x7fffffffu) > 0x7f800000u) {
		u = 0x7fc00000u;
	} else {
		if (ftz && (u & 0x7f800000u) == 0)
			u &= 0x80000000u;
		u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
	}
	memcpy(&f, &u, sizeof f);
	return f;
}

/* The problem one thread works on: a block of C with op(X) rows and op(W) columns. */
struct part {
	const struct tf_mxu_cfg *cfg; /* normalised */
	int trans_x, trans_w;         /* as given to tf_mxu_gemm */
	size_t M, K, N;               /* this block's sizes (K is whole) */
	const float *X, *W;           /* already offset to the block's first row / column */
	size_t ldx, ldw, ldc;
	float *C;                     /* block's top-left output */
	int portable;                 /* run the C microkernel */
};

/* op(X)[i0 + i, p0 + k] for the packed A panel [kc][MR]; rows past mr are zero. */
static void pack_a(const struct part *p, size_t i0, size_t mr, size_t p0, size_t kc, float *a)
{
	int ftz = p->cfg->ftz;
	for (size_t i = 0; i < MR; i++) {
		if (i >= mr) {
			for (size_t k = 0; k < kc; k++)
				a[k * MR + i] = 0.0f;
			continue;
		}
		if (!p->trans_x) {
			const float *src = p->X + (i0 + i) * p->ldx + p0;
			for (size_t k = 0; k < kc; k++)
				a[k * MR + i] = rnd(src[k], ftz);
		} else {
			const float *src = p->X + p0 * p->ldx + i0 + i;
			for (size_t k = 0; k < kc; k++)
				a[k * MR + i] = rnd(src[k * p->ldx], ftz);
		}
	}
}

/* op(W)[p0 + k, j0 + j] for the packed B panel [kc][NR]; columns past nr are zero. */
static void pack_b(const struct part *p, size_t j0, size_t nr, size_t p0, size_t kc, float *b)
{
	int ftz = p->cfg->ftz;
	if (!p->trans_w) {
		for (size_t k = 0; k < kc; k++) {
			const float *src = p->W + (p0 + k) * p->ldw + j0;
			float *dst = b + k * NR;
			size_t j = 0;
			for (; j < nr; j++)
				dst[j] = rnd(src[j], ftz);
			for (; j < NR; j++)
				dst[j] = 0.0f;
		}
	} else {
		for (size_t j = 0; j < NR; j++) {
			if (j >= nr) {
				for (size_t k = 0; k < kc; k++)
					b[k * NR + j] = 0.0f;
				continue;
			}
			const float *src = p->W + (j0 + j) * p->ldw + p0;
			for (size_t k = 0; k < kc; k++)
				b[k * NR + j] = rnd(src[k], ftz);
		}
	}
}

/* Portable microkernel: the contract written out with fmaf. */
static void ukernel_c(size_t kc, size_t R, const float *a, const float *b, float *c, size_t ldc)
{
	for (size_t t0 = 0; t0 < kc; t0 += R) {
		size_t len = kc - t0 < R ? kc - t0 : R;
		float s[MR][NR];
		for (size_t i = 0; i < MR; i++)
			for (size_t j = 0; j < NR; j++)
				s[i][j] = 0.0f;
		for (size_t k = t0; k < t0 + len; k++)
			for (size_t i = 0; i < MR; i++)
				for (size_t j = 0; j < NR; j++)
					s[i][j] = fmaf(a[k * MR + i], b[k * NR + j], s[i][j]);
		for (size_t i = 0; i < MR; i++)
			for (size_t j = 0; j < NR; j++)
				c[i * ldc + j] = c[i * ldc + j] + s[i][j];
	}
}

static void run_part(const struct part *p)
{
	size_t R = (size_t)p->cfg->rows;
	size_t KC = R >= 256 ? R : R * (256 / R);
	size_t M = p->M, K = p->K, N = p->N;
	void (*uk)(size_t, size_t, const float *, const float *, float *, size_t) =
		p->portable ? ukernel_c : tf_mxu_ukernel_avx2;

	for (size_t i = 0; i < M; i++)
		memset(p->C + i * p->ldc, 0, N * sizeof(float));
	if (!M || !N || !K)
		return;

	size_t nc_max = N < NC ? N : NC;
	size_t kc_max = K < KC ? K : KC;
	float *bpack = tf_xmalloc(((nc_max + NR - 1) / NR) * NR * kc_max * sizeof(float));
	float *apack = tf_xmalloc(((MC + MR - 1) / MR) * MR * kc_max * sizeof(float));
	float edge[MR * NR];

	for (size_t jc = 0; jc < N; jc += NC) {
		size_t nc = N - jc < NC ? N - jc : NC;
		for (size_t pc = 0; pc < K; pc += KC) {
			size_t kc = K - pc < KC ? K - pc : KC;
			for (size_t jr = 0; jr < nc; jr += NR) {
				size_t nr = nc - jr < NR ? nc - jr : NR;
				pack_b(p, jc + jr, nr, pc, kc, bpack + (jr / NR) * NR * kc);
			}
			for (size_t ic = 0; ic < M; ic += MC) {
				size_t mc = M - ic < MC ? M - ic : MC;
				for (size_t ir = 0; ir < mc; ir += MR) {
					size_t mr = mc - ir < MR ? mc - ir : MR;
					pack_a(p, ic + ir, mr, pc, kc, apack + (ir / MR) * MR * kc);
				}
				for (size_t jr = 0; jr < nc; jr += NR) {
					size_t nr = nc - jr < NR ? nc - jr : NR;
					const float *b = bpack + (jr / NR) * NR * kc;
					for (size_t ir = 0; ir < mc; ir += MR) {
						size_t mr = mc - ir < MR ? mc - ir : MR;
						const float *a = apack + (ir / MR) * MR * kc;
						float *c = p->C + (ic + ir) * p->ldc + jc + jr;
						if (mr == MR && nr == NR) {
							uk(kc, R, a, b, c, p->ldc);
							continue;
						}
						memset(edge, 0, sizeof edge);
						for (size_t i = 0; i < mr; i++)
							memcpy(edge + i * NR, c + i * p->ldc,
							       nr * sizeof(float));
						uk(kc, R, a, b, edge, NR);
						for (size_t i = 0; i < mr; i++)
							memcpy(c + i * p->ldc, edge + i * NR,
							       nr * sizeof(float));
					}
				}
			}
		}
	}
	tf_mxu_canon_nan(M, N, p->C, p->ldc);
	free(bpack);
	free(apack);
}

struct worker {
	struct part part; /* the block this thread computes */
	int ftz;          /* MXCSR mode to enter */
	pthread_t tid;    /* valid when started */
	int started;      /* 1 when tid is a running thread */
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	unsigned saved = tf_mxu_csr_enter(w->ftz);
	run_part(&w->part);
	tf_mxu_csr_leave(saved);
	return NULL;
}

void tf_mxu_gemm(const struct tf_mxu_cfg *cfg_in, int trans_x, int trans_w, size_t M, size_t K,
		 size_t N, const float *X, size_t ldx, const float *W, size_t ldw, float *C,
		 size_t ldc, struct tf_mxu_stats *stats)
{
	struct tf_mxu_cfg cfg;
	tf_mxu_cfg_norm(cfg_in, &cfg);
	struct part whole = {
		.cfg = &cfg, .trans_x = trans_x, .trans_w = trans_w, .M = M, .K = K, .N = N,
		.X = X, .W = W, .ldx = ldx, .ldw = ldw, .ldc = ldc, .C = C,
		.portable = !(tf_bf16_have_avx2() && !force_portable),
	};

	/* Split C into `threads` blocks along the longer of M and N (in whole microkernel
	 * panels), never along K. */
	int nt = cfg.threads;
	int split_n = N >= M;
	size_t unit = split_n ? NR : MR, len = split_n ? N : M;
	size_t units = (len + unit - 1) / unit;
	if ((size_t)nt > units)
		nt = units ? (int)units : 1;
	if (nt < 1)
		nt = 1;

	struct worker stackw[4];
	struct worker *w = nt <= 4 ? stackw : tf_xcalloc((size_t)nt, sizeof *w);
	size_t start = 0;
	for (int t = 0; t < nt; t++) {
		size_t cnt = units / (size_t)nt + ((size_t)t < units % (size_t)nt);
		size_t b0 = start * unit, b1 = (start + cnt) * unit;
		if (b1 > len)
			b1 = len;
		start += cnt;
		struct part pt = whole;
		if (split_n) {
			pt.N = b1 - b0;
			pt.W = trans_w ? W + b0 * ldw : W + b0;
			pt.C = C + b0;
		} else {
			pt.M = b1 - b0;
			pt.X = trans_x ? X + b0 : X + b0 * ldx;
			pt.C = C + b0 * ldc;
		}
		w[t].part = pt;
		w[t].ftz = cfg.ftz;
		w[t].started = 0;
	}
	for (int t = 1; t < nt; t++)
		w[t].started = pthread_create(&w[t].tid, NULL, worker_main, &w[t]) == 0;
	worker_main(&w[0]);
	for (int t = 1; t < nt; t++) {
		if (w[t].started)
			pthread_join(w[t].tid, NULL);
		else
			worker_main(&w[t]); /* no thread available: same result, serially */
	}
	if (w != stackw)
		free(w);

	if (stats) {
		struct tf_mxu_model m;
		tf_mxu_model(TF_MXU_WS, M, K, N, cfg.rows, cfg.cols, cfg.mxus, &m);
		tf_mxu_stats_fill(&cfg, M, K, N, m.core_cycles, stats);
	}
}

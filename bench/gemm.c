/* bench/gemm.c — the fast MXU kernel against OpenBLAS cblas_sgemm in the same run: 1 and 2
 * threads, square 512/1024/2048 and the demo MLP's forward and backward shapes (batch 256,
 * 784-256-128-10), GFLOP/s and the ratio; then the cycle-level reference model's speed.
 *
 * The MXU kernel does more work than sgemm (it rounds every input to bf16 while packing and
 * keeps the systolic accumulation order); the ratio is what it costs to emulate the TPU's
 * numerics at CPU speed. Each figure is the median of 7 interleaved trials (MXU, then OpenBLAS),
 * the ratio the median of the trials' ratios, printed with their range; at 1 thread, where
 * both run on the calling thread, also the median ratio of their CPU times ("cpu"), which
 * leaves out the time other processes held the core. Before each 2-thread trial the program
 * sleeps 0.2 s so that OpenBLAS's spinning workers release the second core.
 * Usage: build/bench/gemm [--quick] [--only WORD,...]
 *   --quick: fewer shapes, for a smoke run; --only: just the shapes whose name contains one
 *   of the comma-separated words (no sums or reference model; the word "slice" runs the
 *   v4-8 data-parallel step). */
#include <cblas.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "accel/mxu.h"
#include "accel/slice.h"
#include "common/common.h"

struct shape {
	const char *name;
	int tx, tw; /* MXU transposes; passed to sgemm too */
	size_t M, K, N;
};

static const struct shape shapes[] = {
    {"square 512", 0, 0, 512, 512, 512},
    {"square 1024", 0, 0, 1024, 1024, 1024},
    {"square 2048", 0, 0, 2048, 2048, 2048},
    {"mlp fwd1 X.W1", 0, 0, 256, 784, 256},
    {"mlp fwd2 H1.W2", 0, 0, 256, 256, 128},
    {"mlp fwd3 H2.W3", 0, 0, 256, 128, 10},
    {"mlp dW1 X^T.dY1", 1, 0, 784, 256, 256},
    {"mlp dW2 H1^T.dY2", 1, 0, 256, 256, 128},
    {"mlp dW3 H2^T.dY3", 1, 0, 128, 256, 10},
    {"mlp dX2 dY2.W2^T", 0, 1, 256, 128, 256},
    {"mlp dX3 dY3.W3^T", 0, 1, 256, 10, 128},
    /* one replica of a v4-8 slice: 8 TensorCores share the batch of 256 */
    {"rep32 fwd1", 0, 0, 32, 784, 256},
    {"rep32 fwd2", 0, 0, 32, 256, 128},
    {"rep32 fwd3", 0, 0, 32, 128, 10},
    {"rep32 dW1", 1, 0, 784, 32, 256},
    {"rep32 dW2", 1, 0, 256, 32, 128},
    {"rep32 dW3", 1, 0, 128, 32, 10},
    {"rep32 dX2", 0, 1, 32, 128, 256},
    {"rep32 dX3", 0, 1, 32, 10, 128},
};

struct ops {
	const struct shape *s;
	float *X, *W, *C;
	size_t ldx, ldw;
	struct tf_mxu_cfg cfg;
};

static void run_mxu(struct ops *o)
{
	const struct shape *s = o->s;
	tf_mxu_gemm(&o->cfg, s->tx, s->tw, s->M, s->K, s->N, o->X, o->ldx, o->W, o->ldw, o->C, s->N,
	            NULL);
}

static void run_blas(struct ops *o)
{
	const struct shape *s = o->s;
	cblas_sgemm(CblasRowMajor, s->tx ? CblasTrans : CblasNoTrans,
	            s->tw ? CblasTrans : CblasNoTrans, (int)s->M, (int)s->N, (int)s->K, 1.0f, o->X,
	            (int)o->ldx, o->W, (int)o->ldw, 0.0f, o->C, (int)s->N);
}

/* Interleaved trials per shape and thread count; the figures are their medians. */
#define TRIALS 7

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* The median of v[0..n) (v is left unchanged). */
static double median(const double *v, int n)
{
	double s[TRIALS];
	memcpy(s, v, (size_t)n * sizeof *s);
	qsort(s, (size_t)n, sizeof *s, cmp_double);
	return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

/* The smallest and largest of v[0..n), n >= 1. */
static void spread(const double *v, int n, double *lo, double *hi)
{
	*lo = *hi = v[0];
	for (int i = 1; i < n; i++) {
		*lo = v[i] < *lo ? v[i] : *lo;
		*hi = v[i] > *hi ? v[i] : *hi;
	}
}

/* CPU time of the calling thread: what a 1-thread trial costs, without the time other
 * processes held the core (on a shared machine the wall time includes it). */
static double thread_cpu(void)
{
	struct timespec t;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Wall time per call of fn; *cpu (may be NULL) gets the thread's CPU time per call. */
static double timed(void (*fn)(struct ops *), struct ops *o, int reps, double *cpu)
{
	double t0 = tf_now_monotonic(), c0 = thread_cpu();
	for (int i = 0; i < reps; i++)
		fn(o);
	if (cpu)
		*cpu = (thread_cpu() - c0) / reps;
	return (tf_now_monotonic() - t0) / reps;
}

/* A data-parallel MLP step (784-256-128-10, global batch 256) on an emulated v4-8 slice: each
 * of 8 replicas runs the 8 GEMMs of forward and backward on its 32 rows, and the gradients
 * (235,146 floats) are all-reduced, the 3 weight-gradient GEMMs made block by block inside the
 * all-reduce as training does. Peer: the same 8 GEMMs on the whole batch with OpenBLAS. */
struct mlp_bufs {
	float *X, *W1, *W2, *W3, *H1, *H2, *H3, *dW1, *dW2, *dW3, *dH1, *dH2;
};

static void mlp_alloc(struct mlp_bufs *b, size_t B)
{
	b->X = tf_xcalloc(B * 784, 4);
	b->W1 = tf_xcalloc(784 * 256, 4);
	b->W2 = tf_xcalloc(256 * 128, 4);
	b->W3 = tf_xcalloc(128 * 10, 4);
	b->H1 = tf_xcalloc(B * 256, 4);
	b->H2 = tf_xcalloc(B * 128, 4);
	b->H3 = tf_xcalloc(B * 10, 4);
	b->dW1 = tf_xcalloc(784 * 256 + 256 * 128 + 128 * 10, 4); /* one buffer: all-reduced */
	b->dW2 = b->dW1 + 784 * 256;
	b->dW3 = b->dW2 + 256 * 128;
	b->dH1 = tf_xcalloc(B * 256, 4);
	b->dH2 = tf_xcalloc(B * 128, 4);
	for (size_t i = 0; i < B * 784; i++)
		b->X[i] = (float)rand() / RAND_MAX;
	for (size_t i = 0; i < 784 * 256; i++)
		b->W1[i] = (float)rand() / RAND_MAX - 0.5f;
}

static void mlp_free(struct mlp_bufs *b)
{
	free(b->X), free(b->W1), free(b->W2), free(b->W3), free(b->H1), free(b->H2);
	free(b->H3), free(b->dW1), free(b->dH1), free(b->dH2);
}

struct slice_ctx {
	struct mlp_bufs *rep; /* per replica */
	/* the shared weights packed once per step, as training does (ml/train.c): W1, W2, W3
	 * for the forward pass, W3^T and W2^T for dH2 and dH1 */
	struct tf_mxu_wpack *w1, *w2, *w3, *w3t, *w2t;
	/* per replica, the backward pass's dY of each layer packed for its weight gradient */
	struct tf_mxu_wpack *dy1[8], *dy2[8], *dy3[8];
	struct tf_mxu_cfg gen_cfg; /* the replicas' GEMMs, one host thread each */
};

/* As training does (ml/mlp.c, tf_mlp_train_pass_deferred): forward and backward, the weight
 * gradients counted here and made block by block by grad_gen inside the all-reduce. */
static void replica_step(struct tf_slice_replica *r, void *arg)
{
	struct slice_ctx *c = arg;
	struct mlp_bufs *b = &c->rep[r->index];
	size_t B = 32;
	int i = r->index;
	tf_slice_gemm_wpack(r, 0, B, b->X, 784, c->w1, b->H1, 256);
	tf_slice_gemm_wpack(r, 0, B, b->H1, 256, c->w2, b->H2, 128);
	tf_slice_gemm_wpack(r, 0, B, b->H2, 128, c->w3, b->H3, 10);
	tf_mxu_wpack_set(c->dy3[i], &c->gen_cfg, 0, B, 10, b->H3, 10);
	tf_slice_gemm_count(r, 128, B, 10);
	tf_slice_gemm_wpack(r, 0, B, b->H3, 10, c->w3t, b->dH2, 128);
	tf_mxu_wpack_set(c->dy2[i], &c->gen_cfg, 0, B, 128, b->dH2, 128);
	tf_slice_gemm_count(r, 256, B, 128);
	tf_slice_gemm_wpack(r, 0, B, b->dH2, 128, c->w2t, b->dH1, 256);
	tf_mxu_wpack_set(c->dy1[i], &c->gen_cfg, 0, B, 256, b->dH1, 256);
	tf_slice_gemm_count(r, 784, B, 256);
}

/* Elements [lo, hi) of a replica's gradient (dW1, dW2, dW3 in one buffer). */
static void grad_gen(int replica, size_t lo, size_t hi, float *out, void *arg)
{
	struct slice_ctx *c = arg;
	struct mlp_bufs *b = &c->rep[replica];
	const struct {
		size_t K;
		const float *A;
		const struct tf_mxu_wpack *dy;
	} seg[3] = {{784, b->X, c->dy1[replica]},
	            {256, b->H1, c->dy2[replica]},
	            {128, b->H2, c->dy3[replica]}};
	size_t off = 0;
	for (int l = 0; l < 3 && lo < hi; l++) {
		size_t K, N;
		tf_mxu_wpack_shape(seg[l].dy, &K, &N);
		size_t end = off + seg[l].K * N;
		if (lo < end) {
			size_t e = hi < end ? hi : end;
			tf_mxu_gemm_wpack_range(&c->gen_cfg, 1, seg[l].K, seg[l].A, seg[l].K,
			                        seg[l].dy, lo - off, e - off, out);
			out += e - lo;
			lo = e;
		}
		off = end;
	}
}

static void blas_step(struct mlp_bufs *b, int B)
{
	const CBLAS_LAYOUT L = CblasRowMajor;
	const CBLAS_TRANSPOSE N = CblasNoTrans, T = CblasTrans;
	cblas_sgemm(L, N, N, B, 256, 784, 1, b->X, 784, b->W1, 256, 0, b->H1, 256);
	cblas_sgemm(L, N, N, B, 128, 256, 1, b->H1, 256, b->W2, 128, 0, b->H2, 128);
	cblas_sgemm(L, N, N, B, 10, 128, 1, b->H2, 128, b->W3, 10, 0, b->H3, 10);
	cblas_sgemm(L, T, N, 128, 10, B, 1, b->H2, 128, b->H3, 10, 0, b->dW3, 10);
	cblas_sgemm(L, N, T, B, 128, 10, 1, b->H3, 10, b->W3, 10, 0, b->dH2, 128);
	cblas_sgemm(L, T, N, 256, 128, B, 1, b->H1, 256, b->dH2, 128, 0, b->dW2, 128);
	cblas_sgemm(L, N, T, B, 256, 128, 1, b->dH2, 128, b->W2, 128, 0, b->dH1, 256);
	cblas_sgemm(L, T, N, 784, 256, B, 1, b->X, 784, b->dH1, 256, 0, b->dW1, 256);
}

static void slice_step(int quick)
{
	struct tf_tpu_slice s;
	char err[256];
	if (tf_tpu_slice_parse("v4-8", &s, err, sizeof err)) {
		fprintf(stderr, "%s\n", err);
		return;
	}
	int steps = quick ? 20 : 100;
	struct mlp_bufs whole, rep[8];
	mlp_alloc(&whole, 256);
	for (int i = 0; i < 8; i++) {
		mlp_alloc(&rep[i], 32);
		/* replicas hold identical weights: share one read-only copy, as a host
		 * implementation of data parallelism would */
		if (i) {
			free(rep[i].W1), free(rep[i].W2), free(rep[i].W3);
			rep[i].W1 = rep[0].W1, rep[i].W2 = rep[0].W2, rep[i].W3 = rep[0].W3;
		}
	}
	struct slice_ctx ctx = {.rep = rep,
	                        .w1 = tf_mxu_wpack_new(),
	                        .w2 = tf_mxu_wpack_new(),
	                        .w3 = tf_mxu_wpack_new(),
	                        .w3t = tf_mxu_wpack_new(),
	                        .w2t = tf_mxu_wpack_new()};
	for (int i = 0; i < 8; i++) {
		ctx.dy1[i] = tf_mxu_wpack_new();
		ctx.dy2[i] = tf_mxu_wpack_new();
		ctx.dy3[i] = tf_mxu_wpack_new();
	}
	size_t ngrad = 784 * 256 + 256 * 128 + 128 * 10;
	float *gsum = tf_xmalloc(ngrad * sizeof *gsum);
	for (int thr = 1; thr <= 2; thr++) {
		struct tf_slice_rt *rt;
		if (tf_slice_rt_new(&s, thr, 1, &rt))
			return;
		openblas_set_num_threads(thr);
		int trials = quick ? 3 : TRIALS;
		double ts[TRIALS], tb[TRIALS], ratio[TRIALS], cratio[TRIALS];
		for (int trial = 0; trial < trials; trial++) {
			if (thr > 1)
				nanosleep(&(struct timespec){0, 200 * 1000 * 1000}, NULL);
			double t0 = tf_now_monotonic(), c0 = thread_cpu();
			for (int i = 0; i < steps; i++) {
				struct tf_mxu_cfg cfg;
				tf_slice_mxu_cfg(rt, &cfg);
				ctx.gen_cfg = cfg;
				ctx.gen_cfg.threads = 1;
				tf_mxu_wpack_set(ctx.w1, &cfg, 0, 784, 256, rep[0].W1, 256);
				tf_mxu_wpack_set(ctx.w2, &cfg, 0, 256, 128, rep[0].W2, 128);
				tf_mxu_wpack_set(ctx.w3, &cfg, 0, 128, 10, rep[0].W3, 10);
				tf_mxu_wpack_set(ctx.w3t, &cfg, 1, 10, 128, rep[0].W3, 10);
				tf_mxu_wpack_set(ctx.w2t, &cfg, 1, 128, 256, rep[0].W2, 128);
				tf_slice_run(rt, replica_step, &ctx);
				tf_slice_allreduce_gen(rt, ngrad, grad_gen, &ctx, gsum);
			}
			ts[trial] = (tf_now_monotonic() - t0) / steps;
			double cs = thread_cpu() - c0;
			t0 = tf_now_monotonic(), c0 = thread_cpu();
			for (int i = 0; i < steps; i++)
				blas_step(&whole, 256);
			tb[trial] = (tf_now_monotonic() - t0) / steps;
			ratio[trial] = tb[trial] / ts[trial];
			cratio[trial] = (thread_cpu() - c0) / cs;
		}
		double rlo, rhi;
		spread(ratio, trials, &rlo, &rhi);
		struct tf_slice_stats st;
		tf_slice_stats(rt, &st);
		printf("v4-8 data-parallel MLP step, %d host thread%s: %.0f us (device %.1f us, "
		       "MXU utilization %.3f); OpenBLAS whole batch: %.0f us; ratio %.2f "
		       "(range %.2f-%.2f, %d trials)",
		       thr, thr > 1 ? "s" : "", median(ts, trials) * 1e6,
		       st.device_seconds / st.runs * 1e6, st.mxu_utilization, median(tb, trials) * 1e6,
		       median(ratio, trials), rlo, rhi, trials);
		/* one host thread: the step and OpenBLAS run on this thread */
		if (thr == 1)
			printf("; CPU time ratio %.2f", median(cratio, trials));
		printf("\n");
		tf_slice_rt_free(rt);
	}
	mlp_free(&whole);
	tf_mxu_wpack_free(ctx.w1), tf_mxu_wpack_free(ctx.w2), tf_mxu_wpack_free(ctx.w3);
	tf_mxu_wpack_free(ctx.w3t), tf_mxu_wpack_free(ctx.w2t);
	for (int i = 0; i < 8; i++) {
		tf_mxu_wpack_free(ctx.dy1[i]), tf_mxu_wpack_free(ctx.dy2[i]);
		tf_mxu_wpack_free(ctx.dy3[i]);
	}
	free(gsum);
	for (int i = 1; i < 8; i++)
		rep[i].W1 = rep[i].W2 = rep[i].W3 = NULL; /* shared with replica 0 */
	for (int i = 0; i < 8; i++)
		mlp_free(&rep[i]);
}

#if defined(__x86_64__)
/* Peaks of one core, measured: 12 independent chains of one instruction (enough to hide its
 * latency on two pipes), the best of 5 trials of `once`, which returns a trial's GFLOP/s. */
static double best_of_5(double (*once)(void))
{
	double best = 0;
	for (int trial = 0; trial < 5; trial++) {
		double gf = once();
		best = gf > best ? gf : best;
	}
	return best;
}

/* fp32 FMA: 8-wide fused multiply-adds (2 flops per lane). */
__attribute__((target("avx2,fma"))) static double fma_once(void)
{
	__m256 c[12], a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(1e-3f);
	for (int i = 0; i < 12; i++)
		c[i] = _mm256_set1_ps((float)i);
	long n = 20 * 1000 * 1000;
	double t0 = tf_now_monotonic();
	for (long i = 0; i < n; i++) {
#pragma GCC unroll 12
		for (int j = 0; j < 12; j++)
			c[j] = _mm256_fmadd_ps(c[j], a, b);
		__asm__ volatile("" : "+x"(a));
	}
	double t = tf_now_monotonic() - t0;
	float sink[8];
	for (int i = 1; i < 12; i++)
		c[0] = _mm256_add_ps(c[0], c[i]);
	_mm256_storeu_ps(sink, c[0]);
	__asm__ volatile("" : : "r"(sink) : "memory");
	return (double)n * 12 * 8 * 2 / t / 1e9;
}

/* VDPBF16PS, the instruction of the MXU kernel's AVX-512 path: 16-lane bf16-pair dot
 * products, each lane two multiply-adds (4 flops). */
__attribute__((target("avx512f,avx512bf16"))) static double dpbf16_once(void)
{
	__m512 c[12];
	__m512bh a = (__m512bh)_mm512_set1_epi32(0x3f803f80); /* pairs of 1.0 */
	__m512bh b = (__m512bh)_mm512_set1_epi32(0x3a803a80); /* pairs of ~0.001 */
	for (int i = 0; i < 12; i++)
		c[i] = _mm512_set1_ps((float)i);
	long n = 10 * 1000 * 1000;
	double t0 = tf_now_monotonic();
	for (long i = 0; i < n; i++) {
#pragma GCC unroll 12
		for (int j = 0; j < 12; j++)
			c[j] = _mm512_dpbf16_ps(c[j], a, b);
		__asm__ volatile("" : "+v"(a));
	}
	double t = tf_now_monotonic() - t0;
	float sink[16];
	for (int i = 1; i < 12; i++)
		c[0] = _mm512_add_ps(c[0], c[i]);
	_mm512_storeu_ps(sink, c[0]);
	__asm__ volatile("" : : "r"(sink) : "memory");
	return (double)n * 12 * 16 * 4 / t / 1e9;
}

/* GFLOP/s; 0 when the CPU lacks the instruction. */
static double fma_peak(void)
{
	return __builtin_cpu_supports("fma") ? best_of_5(fma_once) : 0;
}

static double dpbf16_peak(void)
{
	return __builtin_cpu_supports("avx512bf16") ? best_of_5(dpbf16_once) : 0;
}
#else
static double fma_peak(void)
{
	return 0;
}

static double dpbf16_peak(void)
{
	return 0;
}
#endif

/* Whether name contains one of the comma-separated words of list. */
static int selected(const char *name, const char *list)
{
	char buf[256];
	snprintf(buf, sizeof buf, "%s", list);
	for (char *save = NULL, *w = strtok_r(buf, ",", &save); w; w = strtok_r(NULL, ",", &save))
		if (strstr(name, w))
			return 1;
	return 0;
}

int main(int argc, char **argv)
{
	int quick = 0;
	const char *only = NULL;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--quick") == 0) {
			quick = 1;
		} else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
			only = argv[++i];
		} else {
			fprintf(stderr, "usage: %s [--quick] [--only WORD,...]\n", argv[0]);
			return 64;
		}
	}
	double peak = fma_peak(), dpeak = dpbf16_peak();
	printf("MXU kernel: %s; OpenBLAS %s, kernel %s; measured peaks of one core (12 chains): "
	       "fp32 FMA %.1f GFLOP/s, VDPBF16PS %.1f GFLOP/s\n",
	       tf_mxu_kernel_name(), openblas_get_config(), openblas_get_corename(), peak, dpeak);
	printf("%-20s %3s %9s %9s %7s %11s %6s\n", "shape", "thr", "mxu GF/s", "blas GF/s", "ratio",
	       "range", "cpu");
	double mlp_mxu[3] = {0}, mlp_blas[3] = {0}, rep_mxu[3] = {0}, rep_blas[3] = {0};
	double sq1024 = 0; /* MXU GFLOP/s on 1024^3 at 1 thread */
	for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
		const struct shape *s = &shapes[si];
		if (quick && s->M * s->K * s->N > 600 * 600 * 600)
			continue;
		if (only && !selected(s->name, only))
			continue;
		struct ops o = {.s = s};
		size_t xr = s->tx ? s->K : s->M, xc = s->tx ? s->M : s->K;
		size_t wr = s->tw ? s->N : s->K, wc = s->tw ? s->K : s->N;
		o.ldx = xc;
		o.ldw = wc;
		o.X = tf_xmalloc(xr * xc * sizeof(float));
		o.W = tf_xmalloc(wr * wc * sizeof(float));
		o.C = tf_xmalloc(s->M * s->N * sizeof(float));
		srand(1);
		for (size_t i = 0; i < xr * xc; i++)
			o.X[i] = (float)rand() / RAND_MAX - 0.5f;
		for (size_t i = 0; i < wr * wc; i++)
			o.W[i] = (float)rand() / RAND_MAX - 0.5f;
		double flop = 2.0 * s->M * s->N * s->K;
		int maxthr = strncmp(s->name, "rep32", 5) == 0 ? 1 : 2;
		for (int thr = 1; thr <= maxthr; thr++) {
			tf_mxu_cfg_init(&o.cfg);
			o.cfg.threads = thr;
			openblas_set_num_threads(thr);
			run_mxu(&o);
			run_blas(&o);
			double est = timed(run_mxu, &o, 1, NULL);
			int reps = (int)(0.05 / (est > 1e-7 ? est : 1e-7)) + 1;
			if (reps > 2000)
				reps = 2000;
			int trials = quick ? 3 : TRIALS;
			double tm[TRIALS], tb[TRIALS], ratio[TRIALS], cratio[TRIALS];
			for (int trial = 0; trial < trials; trial++) {
				/* OpenBLAS workers spin for a while after a call and would hold the
				 * second core during the MXU trial: let them go idle first. */
				if (thr > 1)
					nanosleep(&(struct timespec){0, 200 * 1000 * 1000}, NULL);
				double cm, cb;
				tm[trial] = timed(run_mxu, &o, reps, &cm);
				tb[trial] = timed(run_blas, &o, reps, &cb);
				ratio[trial] = tb[trial] / tm[trial];
				cratio[trial] = cb / cm;
			}
			double bm = median(tm, trials), bb = median(tb, trials);
			double rlo, rhi;
			spread(ratio, trials, &rlo, &rhi);
			printf("%-20s %3d %9.1f %9.1f %7.2f %5.2f-%-5.2f", s->name, thr,
			       flop / bm / 1e9, flop / bb / 1e9, median(ratio, trials), rlo, rhi);
			/* at 1 thread both run on this thread: the ratio of CPU times too */
			if (thr == 1)
				printf(" %6.2f", median(cratio, trials));
			else
				printf(" %6s", "");
			if (peak > 0)
				printf("   mxu %.0f%% of %d x FMA peak", 100 * flop / bm / 1e9 / (peak * thr),
				       thr);
			printf("\n");
			if (strcmp(s->name, "square 1024") == 0 && thr == 1)
				sq1024 = flop / bm / 1e9;
			if (strncmp(s->name, "mlp", 3) == 0) {
				mlp_mxu[thr] += bm;
				mlp_blas[thr] += bb;
			}
			if (strncmp(s->name, "rep32", 5) == 0) {
				rep_mxu[thr] += bm;
				rep_blas[thr] += bb;
			}
		}
		free(o.X);
		free(o.W);
		free(o.C);
	}
	if (only) {
		if (selected("slice", only))
			slice_step(quick);
		return 0;
	}
	/* Other work on the machine lowers the peaks measured at the start: measure them again
	 * and state the 1024^3 rate against the higher of the two. */
	double peak2 = fma_peak(), best_peak = peak2 > peak ? peak2 : peak;
	double dpeak2 = dpbf16_peak(), best_dpeak = dpeak2 > dpeak ? dpeak2 : dpeak;
	if (best_peak > 0 && sq1024 > 0)
		printf("square 1024, 1 thread: %.1f GFLOP/s = %.0f%% of the fp32 FMA peak (%.1f "
		       "GFLOP/s, the higher of %.1f at the start and %.1f now), %.0f%% of the "
		       "VDPBF16PS peak (%.1f GFLOP/s, of %.1f and %.1f)\n",
		       sq1024, 100 * sq1024 / best_peak, best_peak, peak, peak2,
		       best_dpeak > 0 ? 100 * sq1024 / best_dpeak : 0.0, best_dpeak, dpeak, dpeak2);
	for (int thr = 1; thr <= 2; thr++)
		printf("%-20s %3d %8.1fus %8.1fus %7.2f\n", "mlp step (sum)", thr,
		       mlp_mxu[thr] * 1e6, mlp_blas[thr] * 1e6, mlp_blas[thr] / mlp_mxu[thr]);
	printf("%-20s %3d %8.1fus %8.1fus %7.2f\n", "rep32 step (sum)", 1, rep_mxu[1] * 1e6,
	       rep_blas[1] * 1e6, rep_blas[1] / rep_mxu[1]);

	slice_step(quick);

	/* The cycle-level reference on the MLP's first layer (one 128x128 array). */
	size_t M = quick ? 64 : 256, K = 784, N = 256;
	float *X = tf_xmalloc(M * K * sizeof(float)), *W = tf_xmalloc(K * N * sizeof(float));
	float *C = tf_xmalloc(M * N * sizeof(float));
	for (size_t i = 0; i < M * K; i++)
		X[i] = (float)rand() / RAND_MAX;
	for (size_t i = 0; i < K * N; i++)
		W[i] = (float)rand() / RAND_MAX;
	struct tf_mxu_cfg cfg;
	struct tf_mxu_stats st;
	tf_mxu_cfg_init(&cfg);
	double t0 = tf_now_monotonic();
	tf_mxu_gemm_reference(&cfg, 0, 0, M, K, N, X, K, W, N, C, N, &st);
	double t = tf_now_monotonic() - t0;
	double pe_steps = (double)st.cycles * cfg.rows * cfg.cols;
	t0 = tf_now_monotonic();
	tf_mxu_gemm(&cfg, 0, 0, M, K, N, X, K, W, N, C, N, NULL);
	double tf = tf_now_monotonic() - t0;
	printf("reference model %zux%zux%zu on 128x128: %.3f s, %llu cycles simulated, "
	       "%.1f M PE-steps/s, %.3f GFLOP/s (fast kernel %.1f GFLOP/s, %.0fx)\n",
	       M, K, N, t, (unsigned long long)st.cycles, pe_steps / t / 1e6,
	       2.0 * M * K * N / t / 1e9, 2.0 * M * K * N / tf / 1e9, t / tf);
	free(X);
	free(W);
	free(C);
	return 0;
}

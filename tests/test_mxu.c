/* test_mxu.c — the MXU contract: the fast kernel (AVX-512, AVX2 and portable) and the cycle-level
 * reference give the same bits as the contract written out naively, over shapes, value
 * classes, transposes and thread counts; the order canary; the cycle model. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "accel/bf16.h"
#include "accel/mxu.h"
#include "accel/mxu_int.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* The contract of mxu.h, written out directly from its text. */
static void naive(int R, int ftz, size_t M, size_t K, size_t N, const float *X, size_t ldx,
                  const float *W, size_t ldw, float *C, size_t ldc)
{
	unsigned saved = tf_mxu_csr_enter(ftz);
	for (size_t m = 0; m < M; m++) {
		for (size_t n = 0; n < N; n++) {
			float acc = 0.0f;
			for (size_t t0 = 0; t0 < K; t0 += (size_t)R) {
				float s = 0.0f;
				for (size_t k = t0; k < K && k < t0 + (size_t)R; k++)
					s = fmaf(tf_bf16_round(X[m * ldx + k], ftz),
					         tf_bf16_round(W[k * ldw + n], ftz), s);
				acc = acc + s;
			}
			C[m * ldc + n] = acc;
		}
	}
	tf_mxu_csr_leave(saved);
	tf_mxu_canon_nan(M, N, C, ldc);
}

enum vclass { V_NORMAL, V_WIDE, V_UNDERFLOW, V_OVERFLOW, V_ZEROS, V_NAN, V_LAST };
static const char *const vclass_name[] = {"normal",   "wide",         "underflow",
                                          "overflow", "signed-zeros", "nan-inf"};

static uint64_t rng_state = 88172645463325252ull;
static uint64_t rnd64(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}
static double unif(void)
{
	return (double)(rnd64() >> 11) / 9007199254740992.0;
}

static float gen(enum vclass c)
{
	double sign = (rnd64() & 1) ? -1.0 : 1.0;
	switch (c) {
	case V_NORMAL:
		return (float)(2.0 * unif() - 1.0);
	case V_WIDE:
		return (float)(sign * (1.0 + unif()) * ldexp(1.0, (int)(rnd64() % 121) - 60));
	case V_UNDERFLOW: /* products near or below 2^-126: subnormal or zero */
		return (float)(sign * (1.0 + unif()) * ldexp(1.0, -(int)(rnd64() % 20) - 58));
	case V_OVERFLOW: /* products beyond FLT_MAX: Inf, and Inf - Inf = NaN in the sums */
		return (float)(sign * (1.0 + unif()) * ldexp(1.0, 55 + (int)(rnd64() % 20)));
	case V_ZEROS: {
		uint64_t r = rnd64() % 4;
		return r == 0 ? 0.0f : r == 1 ? -0.0f : (float)(sign * ldexp(unif(), -130));
	}
	case V_NAN: {
		uint64_t r = rnd64() % 16;
		if (r == 0)
			return NAN;
		if (r == 1)
			return -NAN;
		if (r == 2)
			return (float)(sign * INFINITY);
		return (float)(2.0 * unif() - 1.0);
	}
	default:
		return 0.0f;
	}
}

static float *fill(size_t rows, size_t ld, enum vclass c)
{
	float *a = malloc((rows * ld + 1) * sizeof *a);
	assert_non_null(a);
	for (size_t i = 0; i < rows * ld + 1; i++)
		a[i] = gen(c);
	return a;
}

static float *transpose(const float *a, size_t rows, size_t cols, size_t ld, size_t ldt)
{
	float *t = malloc((cols * ldt + 1) * sizeof *t);
	assert_non_null(t);
	for (size_t i = 0; i < cols * ldt + 1; i++)
		t[i] = 12345.0f; /* padding that must never be read into a result */
	for (size_t i = 0; i < rows; i++)
		for (size_t j = 0; j < cols; j++)
			t[j * ldt + i] = a[i * ld + j];
	return t;
}

/* The fast paths; those this CPU lacks are left out (kernel_count says how many ran). */
static const char *const kname[] = {"avx512", "avx2", "portable"};
enum { NKERNELS = 3 };

static int kernel_ok(int ki)
{
	int rc = tf_mxu_force_kernel(kname[ki]);
	tf_mxu_force_kernel(NULL);
	return rc == 0;
}

static void same_bits(const float *a, const float *b, size_t M, size_t N, size_t ldc,
                      const char *what)
{
	for (size_t m = 0; m < M; m++) {
		if (memcmp(a + m * ldc, b + m * ldc, N * sizeof *a) == 0)
			continue;
		for (size_t n = 0; n < N; n++) {
			uint32_t x, y;
			memcpy(&x, &a[m * ldc + n], 4);
			memcpy(&y, &b[m * ldc + n], 4);
			if (x != y)
				fail_msg("%s: C[%zu,%zu] %08x (%g) != %08x (%g)", what, m, n, x,
				         (double)a[m * ldc + n], y, (double)b[m * ldc + n]);
		}
	}
}

/* tf_mxu_gemm_wpack_range over ranges that start and end inside rows, on row boundaries,
 * within one row, cover all or nothing, and past the end: each element the same bits as the
 * whole product (want, leading dimension ldc), nothing written outside the range. */
static void ranges_case(const struct tf_mxu_cfg *cfg, int tx, size_t M, size_t N, const float *X,
                        size_t ldx, const struct tf_mxu_wpack *wp, const float *want, size_t ldc,
                        const char *what)
{
	size_t MN = M * N;
	const size_t r[][2] = {{0, MN},          {0, 0},          {1, N > 1 ? N - 1 : 1},
	                       {N / 2, N / 2 + N + 3}, {N, 3 * N},   {N + 1, 3 * N + 1},
	                       {MN / 3, MN},     {MN - 1, MN + 5}, {MN / 2, MN / 2 + 1}};
	float *out = malloc((MN + 8) * sizeof *out);
	assert_non_null(out);
	char w[480];
	for (size_t i = 0; i < sizeof r / sizeof r[0]; i++) {
		size_t lo = r[i][0] < MN ? r[i][0] : MN, hi = r[i][1] < MN ? r[i][1] : MN;
		if (hi < lo)
			hi = lo;
		memset(out, 0x7f, (MN + 8) * sizeof *out);
		tf_mxu_gemm_wpack_range(cfg, tx, M, X, ldx, wp, lo, r[i][1] < lo ? lo : r[i][1],
		                        out);
		snprintf(w, sizeof w, "%s range [%zu, %zu)", what, lo, hi);
		for (size_t e = lo; e < hi; e++)
			if (memcmp(&out[e - lo], &want[e / N * ldc + e % N], 4))
				fail_msg("%s: element %zu differs", w, e);
		for (size_t e = hi - lo; e < MN + 8; e++)
			if (out[e] != out[MN + 7]) /* 0x7f7f7f7f: untouched */
				fail_msg("%s: wrote past the range at %zu", w, e);
	}
	free(out);
}

/* Runs one case through every implementation and variant. */
static void one_case(int R, int Cc, int ftz, size_t M, size_t K, size_t N, enum vclass vc,
                     int with_reference)
{
	char what[160];
	size_t ldx = K + 3, ldw = N + 1, ldc = N + 2;
	float *X = fill(M, ldx, vc), *W = fill(K, ldw, vc);
	float *want = calloc(M * ldc + 1, sizeof(float)), *got = calloc(M * ldc + 1, sizeof(float));
	assert_non_null(want);
	assert_non_null(got);
	naive(R, ftz, M, K, N, X, ldx, W, ldw, want, ldc);

	struct tf_mxu_cfg cfg;
	tf_mxu_cfg_init(&cfg);
	cfg.rows = R;
	cfg.cols = Cc;
	cfg.ftz = ftz;
	snprintf(what, sizeof what, "%dx%d ftz=%d M=%zu K=%zu N=%zu %s", R, Cc, ftz, M, K, N,
	         vclass_name[vc]);

	float *xt = transpose(X, M, K, ldx, M + 2), *wt = transpose(W, K, N, ldw, K + 1);
	for (int ki = 0; ki < NKERNELS; ki++) {
		if (!kernel_ok(ki))
			continue;
		assert_int_equal(tf_mxu_force_kernel(kname[ki]), 0);
		for (int threads = 1; threads <= 3; threads++) {
			cfg.threads = threads;
			char w2[400];
			for (int tx = 0; tx <= 1; tx++) {
				for (int tw = 0; tw <= 1; tw++) {
					memset(got, 0x7f, (M * ldc + 1) * sizeof(float));
					tf_mxu_gemm(&cfg, tx, tw, M, K, N, tx ? xt : X,
					            tx ? M + 2 : ldx, tw ? wt : W, tw ? K + 1 : ldw,
					            got, ldc, NULL);
					snprintf(w2, sizeof w2, "%s %s threads=%d tx=%d tw=%d",
					         what, tf_mxu_kernel_name(), threads, tx, tw);
					same_bits(want, got, M, N, ldc, w2);
					/* op(W) packed once, as the replicas of a step share it */
					struct tf_mxu_wpack *wp = tf_mxu_wpack_new();
					tf_mxu_wpack_set(wp, &cfg, tw, K, N, tw ? wt : W,
					                 tw ? K + 1 : ldw);
					memset(got, 0x7f, (M * ldc + 1) * sizeof(float));
					tf_mxu_gemm_wpack(&cfg, tx, M, tx ? xt : X, tx ? M + 2 : ldx,
					                  wp, got, ldc, NULL);
					strncat(w2, " packed W", sizeof w2 - strlen(w2) - 1);
					same_bits(want, got, M, N, ldc, w2);
					if (threads == 1)
						ranges_case(&cfg, tx, M, N, tx ? xt : X,
						            tx ? M + 2 : ldx, wp, want, ldc, w2);
					tf_mxu_wpack_free(wp);
				}
			}
		}
	}
	tf_mxu_force_kernel(NULL);
	if (with_reference) {
		struct tf_mxu_stats st;
		struct tf_mxu_model mod;
		memset(got, 0, (M * ldc + 1) * sizeof(float));
		tf_mxu_gemm_reference(&cfg, 0, 0, M, K, N, X, ldx, W, ldw, got, ldc, &st);
		same_bits(want, got, M, N, ldc, what);
		tf_mxu_model(TF_MXU_WS, M, K, N, R, Cc, 1, &mod);
		assert_int_equal(st.cycles, mod.cycles);
		/* a transposed case through the reference too */
		tf_mxu_gemm_reference(&cfg, 1, 1, M, K, N, xt, M + 2, wt, K + 1, got, ldc, NULL);
		same_bits(want, got, M, N, ldc, what);
	}
	free(xt);
	free(wt);
	free(X);
	free(W);
	free(want);
	free(got);
}

static void test_mxu_order_canary(void **state)
{
	(void)state;
	const float x[4] = {16777216.0f, 1.0f, 1.0f, -16777216.0f};
	const float w[4] = {1.0f, 1.0f, 1.0f, 1.0f};
	struct tf_mxu_cfg cfg;
	tf_mxu_cfg_init(&cfg);
	/* R=2: tiles (2^24 + 1 -> 2^24) and (1 - 2^24), sum 1. R>=4: one tile, the ones are
	 * lost against 2^24, sum 0. R=1 and R=3 lose them too. */
	static const struct {
		int R;
		float want;
	} cases[] = {{2, 1.0f}, {4, 0.0f}, {128, 0.0f}, {1, 0.0f}, {3, 0.0f}};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		float c = -1.0f, r = -1.0f;
		cfg.rows = cases[i].R;
		cfg.cols = 4;
		for (int threads = 1; threads <= 2; threads++) {
			cfg.threads = threads;
			tf_mxu_gemm(&cfg, 0, 0, 1, 4, 1, x, 4, w, 1, &c, 1, NULL);
			assert_true(c == cases[i].want);
		}
		tf_mxu_gemm_reference(&cfg, 0, 0, 1, 4, 1, x, 4, w, 1, &r, 1, NULL);
		assert_true(r == cases[i].want);
		/* the transposed forms see the same order */
		tf_mxu_gemm(&cfg, 1, 1, 1, 4, 1, x, 1, w, 4, &c, 1, NULL);
		assert_true(c == cases[i].want);
	}
}

static void test_mxu_shapes_match_reference(void **state)
{
	(void)state;
	/* (R, C, M, K, N) */
	static const int shapes[][5] = {
	    {4, 4, 1, 1, 1},
	    {4, 4, 5, 4, 4},
	    {4, 4, 7, 5, 9},
	    {4, 4, 1, 13, 3},
	    {8, 16, 9, 8, 16},
	    {8, 16, 13, 9, 33},
	    {8, 16, 6, 17, 31},
	    {8, 16, 1, 1, 17},
	    {128, 128, 3, 128, 20},
	    {128, 128, 7, 129, 130},
	    {128, 128, 13, 300, 150},
	    {2, 4, 11, 7, 5},
	    /* narrow N: with trans_x computed as C^T = op(W)^T . op(X)^T */
	    {8, 16, 40, 20, 3},
	    {16, 8, 64, 37, 10},
	    {128, 128, 100, 300, 10},
	    {4, 4, 33, 9, 15},
	    {8, 8, 32, 5, 1},
	};
	for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
		const int *s = shapes[i];
		for (int vc = 0; vc < V_LAST; vc++)
			one_case(s[0], s[1], vc & 1, (size_t)s[2], (size_t)s[3], (size_t)s[4],
			         (enum vclass)vc, 1);
	}
}

/* The narrow-output path (N < 16, vectorised over M on AVX2) and short K (one K-tile, where
 * acc = 0 + s and the kernel may skip NaN canonicalisation when packing bounds the values):
 * the MLP's 10-class shapes and their 32-row replica forms, edges of the 16-row panels and the
 * 6-column groups, K tails, several K-tiles, every value class with ftz on and off (so signed
 * zeros, NaN/Inf inputs, overflow and subnormal products), all transposes, 1-3 threads, the
 * portable kernel, and the cycle-level reference on the smaller ones. */
static void test_mxu_narrow_and_short_k_match_reference(void **state)
{
	(void)state;
	/* (R, C, M, K, N, reference) */
	static const int shapes[][6] = {
	    {128, 128, 256, 128, 10, 0}, /* fwd3 H2.W3 */
	    {128, 128, 256, 10, 128, 0}, /* dX3 dY3.W3^T */
	    {128, 128, 128, 256, 10, 0}, /* dW3 H2^T.dY3 (2 K-tiles) */
	    {128, 128, 32, 128, 10, 1},  /* rep32 fwd3 */
	    {128, 128, 32, 10, 128, 1},  /* rep32 dX3 */
	    {128, 128, 128, 32, 10, 1},  /* rep32 dW3 */
	    {16, 8, 45, 33, 14, 1},      /* 3 K-tiles, 16-row panel edge, 2 column groups */
	    {8, 8, 17, 3, 7, 1},         /* K < 8: transposed packing of a short block */
	    {128, 128, 37, 10, 13, 1},   /* 13 columns: groups of 7 and 6 */
	    {32, 32, 64, 40, 15, 0},     /* 15 columns, K tail of 8 */
	    {4, 4, 50, 9, 6, 1},         /* one full 6-column group, 3 K-tiles */
	    {128, 128, 33, 1, 2, 1},     /* K = 1 */
	    {64, 64, 31, 64, 16, 0},     /* N = 16: the 16-wide kernel, K = R */
	    {128, 128, 1, 784, 256, 0},  /* one example's forward pass (serving): layer 1 */
	    {128, 128, 1, 256, 128, 0},  /* layer 2 */
	    {128, 128, 1, 128, 10, 0},   /* layer 3 */
	};
	for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
		const int *s = shapes[i];
		for (int vc = 0; vc < V_LAST; vc++)
			for (int ftz = 0; ftz <= 1; ftz++)
				one_case(s[0], s[1], ftz, (size_t)s[2], (size_t)s[3], (size_t)s[4],
				         (enum vclass)vc, s[5]);
	}
}

/* Finite inputs whose tile sums overflow to +Inf and -Inf: acc = Inf + -Inf is NaN and must be
 * written as 0x7FC00000 (the hardware gives 0xFFC00000), although every input is finite and
 * the bound the packing computes is what decides whether to canonicalise. */
static void test_mxu_finite_inputs_nan_is_canonical(void **state)
{
	(void)state;
	enum { M = 20, K = 4, N = 20 };
	float X[M * K], W[K * N], C[M * N];
	for (int m = 0; m < M; m++)
		for (int k = 0; k < K; k++)
			X[m * K + k] = ldexpf(1.0f, 100);
	for (int k = 0; k < K; k++)
		for (int n = 0; n < N; n++)
			W[k * N + n] = k < 2 ? ldexpf(1.0f, 100) : -ldexpf(1.0f, 100);
	struct tf_mxu_cfg cfg;
	tf_mxu_cfg_init(&cfg);
	cfg.rows = 2; /* tiles {0,1} -> +Inf and {2,3} -> -Inf */
	for (int ki = 0; ki < NKERNELS; ki++) {
		if (!kernel_ok(ki))
			continue;
		assert_int_equal(tf_mxu_force_kernel(kname[ki]), 0);
		for (int threads = 1; threads <= 2; threads++) {
			cfg.threads = threads;
			for (int n = 1; n <= N; n += N - 1) /* narrow (1) and wide (20) */
				for (int packed = 0; packed <= 1; packed++) {
					memset(C, 0, sizeof C);
					if (packed) { /* the bound kept with a packed W */
						struct tf_mxu_wpack *wp = tf_mxu_wpack_new();
						tf_mxu_wpack_set(wp, &cfg, 0, K, (size_t)n, W, N);
						tf_mxu_gemm_wpack(&cfg, 0, M, X, K, wp, C, (size_t)n,
						                  NULL);
						tf_mxu_wpack_free(wp);
					} else {
						tf_mxu_gemm(&cfg, 0, 0, M, K, (size_t)n, X, K, W, N,
						            C, (size_t)n, NULL);
					}
					for (int i = 0; i < M * n; i++) {
						uint32_t u;
						memcpy(&u, &C[i], 4);
						assert_int_equal(u, 0x7fc00000u);
					}
				}
		}
	}
	tf_mxu_force_kernel(NULL);
	float r[M * N];
	tf_mxu_gemm_reference(&cfg, 0, 0, M, K, N, X, K, W, N, r, N, NULL);
	for (int i = 0; i < M * N; i++) {
		uint32_t u;
		memcpy(&u, &r[i], 4);
		assert_int_equal(u, 0x7fc00000u);
	}
}

static void test_mxu_value_classes_ftz_both(void **state)
{
	(void)state;
	for (int vc = 0; vc < V_LAST; vc++)
		for (int ftz = 0; ftz <= 1; ftz++)
			one_case(8, 8, ftz, 10, 19, 21, (enum vclass)vc, 1);
}

static void test_mxu_fast_blocking_boundaries(void **state)
{
	(void)state;
	/* Past the packing blocks (MC=144, KC=256, NC=4080) and odd edges; fast vs naive. */
	one_case(128, 128, 1, 150, 513, 70, V_NORMAL, 0);
	one_case(128, 128, 1, 300, 257, 49, V_WIDE, 0);
	one_case(100, 128, 0, 37, 700, 35, V_NORMAL, 0);
	one_case(512, 512, 1, 13, 1100, 17, V_NORMAL, 0);
	one_case(128, 128, 1, 5, 3, 4100, V_NORMAL, 0);
	one_case(128, 128, 1, 1, 784, 256, V_NORMAL, 0);
	one_case(3, 128, 1, 8, 50, 40, V_NORMAL, 0);
}

static void test_mxu_underflow_depends_on_ftz(void **state)
{
	(void)state;
	/* x = w = 2^-64: the product 2^-128 is subnormal. */
	float x = ldexpf(1.0f, -64), w = ldexpf(1.0f, -64), c;
	struct tf_mxu_cfg cfg;
	tf_mxu_cfg_init(&cfg);
	tf_mxu_gemm(&cfg, 0, 0, 1, 1, 1, &x, 1, &w, 1, &c, 1, NULL);
	assert_true(c == 0.0f);
	cfg.ftz = 0;
	tf_mxu_gemm(&cfg, 0, 0, 1, 1, 1, &x, 1, &w, 1, &c, 1, NULL);
	assert_true(c == ldexpf(1.0f, -128));
	tf_mxu_gemm_reference(&cfg, 0, 0, 1, 1, 1, &x, 1, &w, 1, &c, 1, NULL);
	assert_true(c == ldexpf(1.0f, -128));
}

/* Rule 4: FTZ flushes each fma *result* that is subnormal, not each product, so the sum of
 * the products 2^-126 (normal) and 2^-127 (subnormal) depends on their order: 2^-126 first
 * gives 1.5 * 2^-126 (the tiny product joins a normal sum); 2^-127 first flushes it (fma with
 * s = 0 gives the subnormal 2^-127 -> 0) and gives 2^-126. Fast, portable and reference
 * kernels agree, and without ftz both orders give 1.5 * 2^-126. */
static void test_mxu_ftz_order_dependent(void **state)
{
	(void)state;
	const float big = ldexpf(1.0f, -63), small = ldexpf(1.0f, -64); /* bf16-exact normals */
	const float x[2] = {big, big};
	const float w_first_normal[2] = {big, small}; /* products 2^-126, 2^-127 */
	const float w_first_tiny[2] = {small, big};   /* products 2^-127, 2^-126 */
	const float sum = 1.5f * ldexpf(1.0f, -126);
	for (int ki = 0; ki < NKERNELS; ki++) {
		if (!kernel_ok(ki))
			continue;
		assert_int_equal(tf_mxu_force_kernel(kname[ki]), 0);
		for (int ftz = 0; ftz < 2; ftz++) {
			struct tf_mxu_cfg cfg;
			tf_mxu_cfg_init(&cfg);
			cfg.ftz = ftz;
			float c1, c2, r1, r2;
			tf_mxu_gemm(&cfg, 0, 0, 1, 2, 1, x, 2, w_first_normal, 1, &c1, 1, NULL);
			tf_mxu_gemm(&cfg, 0, 0, 1, 2, 1, x, 2, w_first_tiny, 1, &c2, 1, NULL);
			tf_mxu_gemm_reference(&cfg, 0, 0, 1, 2, 1, x, 2, w_first_normal, 1, &r1, 1,
			                      NULL);
			tf_mxu_gemm_reference(&cfg, 0, 0, 1, 2, 1, x, 2, w_first_tiny, 1, &r2, 1,
			                      NULL);
			assert_true(c1 == sum);
			assert_true(r1 == sum);
			assert_true(c2 == (ftz ? ldexpf(1.0f, -126) : sum));
			assert_true(r2 == c2);
		}
	}
	tf_mxu_force_kernel(NULL);
	/* the software flush used where there is no MXCSR */
	assert_true(tf_mxu_ftz(ldexpf(1.0f, -127)) == 0.0f);
	assert_true(signbit(tf_mxu_ftz(-ldexpf(1.0f, -149))));
	assert_true(tf_mxu_ftz(-ldexpf(1.0f, -149)) == 0.0f);
	assert_true(tf_mxu_ftz(ldexpf(1.0f, -126)) == ldexpf(1.0f, -126));
	assert_true(isnan(tf_mxu_ftz(NAN)));
}

static void test_mxu_zero_sizes_and_k0(void **state)
{
	(void)state;
	float C[6], X[1] = {1.0f}, W[1] = {1.0f};
	struct tf_mxu_cfg cfg;
	struct tf_mxu_stats st;
	tf_mxu_cfg_init(&cfg);
	for (int i = 0; i < 6; i++)
		C[i] = 7.0f;
	tf_mxu_gemm(&cfg, 0, 0, 2, 0, 3, X, 1, W, 3, C, 3, &st);
	for (int i = 0; i < 6; i++)
		assert_true(C[i] == 0.0f && !signbit(C[i]));
	assert_int_equal(st.cycles, 0);
	assert_int_equal(st.folds, 0);
	tf_mxu_gemm(&cfg, 0, 0, 0, 5, 3, X, 5, W, 3, C, 3, &st);
	assert_int_equal(st.macs, 0);
}

static void test_mxu_model_ws_formula(void **state)
{
	(void)state;
	struct tf_mxu_model m;
	assert_int_equal(tf_mxu_model(TF_MXU_WS, 128, 128, 128, 128, 128, 1, &m), 0);
	assert_int_equal(m.folds, 1);
	assert_int_equal(m.cycles_per_fold, 510);
	assert_int_equal(m.scalesim_total, 509);
	assert_true(fabs(m.mapping_efficiency - 1.0) < 1e-12);
	assert_true(fabs(m.utilization - 128.0 / 510.0) < 1e-12);
	/* 256 x 784 . 784 x 256 on 128x128: 7 K-tiles x 2 N-tiles */
	assert_int_equal(tf_mxu_model(TF_MXU_WS, 256, 784, 256, 128, 128, 4, &m), 0);
	assert_int_equal(m.folds, 14);
	assert_int_equal(m.cycles_per_fold, 2 * 128 + 128 + 256 - 2);
	assert_int_equal(m.cycles, 14 * 638);
	assert_int_equal(m.core_cycles, 4 * 638);
	assert_true(fabs(m.mapping_efficiency - 784.0 * 256 / (14.0 * 16384)) < 1e-12);
	/* brute-force the mean mapping efficiency over folds */
	uint64_t M = 10, K = 300, N = 200;
	int R = 64, C = 48;
	assert_int_equal(tf_mxu_model(TF_MXU_WS, M, K, N, R, C, 1, &m), 0);
	double sum = 0;
	int folds = 0;
	for (uint64_t k0 = 0; k0 < K; k0 += R)
		for (uint64_t n0 = 0; n0 < N; n0 += C, folds++)
			sum += (double)((K - k0 < (uint64_t)R ? K - k0 : (uint64_t)R) *
			                (N - n0 < (uint64_t)C ? N - n0 : (uint64_t)C)) /
			       (R * C);
	assert_int_equal(m.folds, folds);
	assert_true(fabs(m.mapping_efficiency - sum / folds) < 1e-12);
	assert_int_equal(m.scalesim_total, (uint64_t)folds * (2 * R + C + M - 2) - 1);
	/* output stationary */
	assert_int_equal(tf_mxu_model(TF_MXU_OS, 256, 784, 256, 128, 128, 1, &m), 0);
	assert_int_equal(m.folds, 4);
	assert_int_equal(m.cycles_per_fold, 128 + 128 + 784 - 2);
	assert_int_equal(tf_mxu_model(TF_MXU_WS, 1, 1, 1, 0, 128, 1, &m), -22);
	/* huge sizes: refused, not wrapped into a negative or tiny count */
	assert_int_equal(tf_mxu_model(TF_MXU_WS, 1ull << 40, 1ull << 40, 1ull << 40, 128, 128, 1,
	                              &m),
	                 -EOVERFLOW);
	assert_int_equal(tf_mxu_model(TF_MXU_OS, 4000000000ull, 4000000000ull, 4000000000ull, 128,
	                              128, 1, &m),
	                 -EOVERFLOW);
	assert_int_equal(tf_mxu_model(TF_MXU_DATAFLOW_LAST, 1, 1, 1, 4, 4, 1, &m), -22);
}

static void test_mxu_reference_cycles_equal_model(void **state)
{
	(void)state;
	static const int cases[][6] = {
	    /* R, C, M, K, N, mxus */
	    {4, 4, 1, 1, 1, 1},    {4, 4, 9, 13, 6, 1},        {8, 16, 3, 20, 40, 2},
	    {16, 8, 30, 16, 8, 4}, {128, 128, 5, 200, 130, 4}, {2, 3, 7, 9, 10, 3},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		const int *c = cases[i];
		size_t M = (size_t)c[2], K = (size_t)c[3], N = (size_t)c[4];
		float *X = fill(M, K, V_NORMAL), *W = fill(K, N, V_NORMAL);
		float *out = calloc(M * N, sizeof(float));
		struct tf_mxu_cfg cfg;
		struct tf_mxu_stats rs, fs;
		struct tf_mxu_model m;
		tf_mxu_cfg_init(&cfg);
		cfg.rows = c[0];
		cfg.cols = c[1];
		cfg.mxus = c[5];
		tf_mxu_gemm_reference(&cfg, 0, 0, M, K, N, X, K, W, N, out, N, &rs);
		tf_mxu_gemm(&cfg, 0, 0, M, K, N, X, K, W, N, out, N, &fs);
		tf_mxu_model(TF_MXU_WS, M, K, N, c[0], c[1], c[5], &m);
		assert_int_equal(rs.cycles, m.core_cycles);
		assert_int_equal(fs.cycles, m.core_cycles);
		assert_int_equal(rs.folds, m.folds);
		assert_true(rs.utilization > 0 && rs.utilization <= 1.0);
		assert_true(fabs(rs.utilization - m.core_utilization) < 1e-12);
		free(X);
		free(W);
		free(out);
	}
}

static void test_mxu_random_shapes_match_reference(void **state)
{
	(void)state;
	rng_state = 0x9e3779b97f4a7c15ull;
	for (int i = 0; i < 40; i++) {
		int R = 1 + (int)(rnd64() % 20), Cc = 1 + (int)(rnd64() % 20);
		size_t M = 1 + rnd64() % 30, K = 1 + rnd64() % 60, N = 1 + rnd64() % 40;
		one_case(R, Cc, (int)(rnd64() & 1), M, K, N, (enum vclass)(rnd64() % V_LAST), 1);
	}
}

/* Several callers asking for 2 threads at once share the worker pool without deadlock and
 * still get the contract's bits. */
struct conc {
	float *X, *W, *C, *want;
	size_t M, K, N;
};

static void *conc_main(void *arg)
{
	struct conc *c = arg;
	struct tf_mxu_cfg cfg;
	tf_mxu_cfg_init(&cfg);
	cfg.threads = 2;
	for (int r = 0; r < 20; r++) {
		tf_mxu_gemm(&cfg, 0, 0, c->M, c->K, c->N, c->X, c->K, c->W, c->N, c->C, c->N, NULL);
		if (memcmp(c->C, c->want, c->M * c->N * sizeof(float)) != 0)
			return (void *)1;
	}
	return NULL;
}

static void test_mxu_concurrent_callers(void **state)
{
	(void)state;
	enum { T = 3 };
	struct conc c[T];
	pthread_t tid[T];
	for (int t = 0; t < T; t++) {
		c[t].M = 40 + 7 * (size_t)t;
		c[t].K = 150;
		c[t].N = 33;
		c[t].X = fill(c[t].M, c[t].K, V_NORMAL);
		c[t].W = fill(c[t].K, c[t].N, V_WIDE);
		c[t].C = calloc(c[t].M * c[t].N, sizeof(float));
		c[t].want = calloc(c[t].M * c[t].N, sizeof(float));
		naive(128, 1, c[t].M, c[t].K, c[t].N, c[t].X, c[t].K, c[t].W, c[t].N, c[t].want,
		      c[t].N);
	}
	for (int t = 0; t < T; t++)
		assert_int_equal(pthread_create(&tid[t], NULL, conc_main, &c[t]), 0);
	for (int t = 0; t < T; t++) {
		void *ret;
		pthread_join(tid[t], &ret);
		assert_null(ret);
		free(c[t].X);
		free(c[t].W);
		free(c[t].C);
		free(c[t].want);
	}
}

/* Each part of a multi-threaded GEMM runs exactly once, also while the pool grows (a worker
 * created during a call once could run that call's part twice). */
static void test_mxu_pool_runs_each_part_once(void **state)
{
	(void)state;
	float *X = fill(60, 40, V_NORMAL), *W = fill(40, 50, V_NORMAL);
	float *C = calloc(60 * 50, sizeof(float));
	struct tf_mxu_cfg cfg;
	tf_mxu_cfg_init(&cfg);
	uint64_t before = atomic_load(&tf_mxu_worker_parts), want = 0;
	for (int round = 0; round < 50; round++) {
		for (int t = 1; t <= 6; t++) {
			cfg.threads = t;
			tf_mxu_gemm(&cfg, 0, 0, 60, 40, 50, X, 40, W, 50, C, 50, NULL);
			want += (uint64_t)t - 1; /* 60 rows or 50 columns: >= 6 panels */
		}
	}
	assert_int_equal(atomic_load(&tf_mxu_worker_parts) - before, want);
	free(X);
	free(W);
	free(C);
}

int main(void)
{
	tf_mxu_min_macs_per_thread = 0; /* use every requested thread even on tiny shapes */
	for (int ki = 0; ki < NKERNELS; ki++)
		printf("# MXU kernel %s: %s\n", kname[ki], kernel_ok(ki) ? "tested" : "not on this CPU");
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_mxu_order_canary),
	    cmocka_unit_test(test_mxu_underflow_depends_on_ftz),
	    cmocka_unit_test(test_mxu_ftz_order_dependent),
	    cmocka_unit_test(test_mxu_zero_sizes_and_k0),
	    cmocka_unit_test(test_mxu_model_ws_formula),
	    cmocka_unit_test(test_mxu_reference_cycles_equal_model),
	    cmocka_unit_test(test_mxu_value_classes_ftz_both),
	    cmocka_unit_test(test_mxu_shapes_match_reference),
	    cmocka_unit_test(test_mxu_fast_blocking_boundaries),
	    cmocka_unit_test(test_mxu_narrow_and_short_k_match_reference),
	    cmocka_unit_test(test_mxu_finite_inputs_nan_is_canonical),
	    cmocka_unit_test(test_mxu_random_shapes_match_reference),
	    cmocka_unit_test(test_mxu_concurrent_callers),
	    cmocka_unit_test(test_mxu_pool_runs_each_part_once),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

/* mxu_avx2.c — the 6x16 AVX2/FMA microkernel of the fast MXU path.
 *
 * Twelve ymm registers hold the running tile sums s for 6 rows x 16 columns. For each k of a
 * K-tile it broadcasts x[m,k] for the 6 rows and does s = fma(x, w[k, n..n+15], s): lanes are
 * different outputs, k advances one step at a time, so each lane performs exactly the
 * contract's fmaf chain. At the end of the tile, C += s (one add per output, tile order). */
#include <immintrin.h>

#include "accel/mxu_int.h"

/* One k step: two W vectors, six broadcasts, twelve fmas. */
#define STEP(a, b)                                                        \
	do {                                                              \
		__m256 b0 = _mm256_loadu_ps(b);                           \
		__m256 b1 = _mm256_loadu_ps((b) + 8);                     \
		__m256 x;                                                 \
		x = _mm256_broadcast_ss((a) + 0);                         \
		s00 = _mm256_fmadd_ps(x, b0, s00);                        \
		s01 = _mm256_fmadd_ps(x, b1, s01);                        \
		x = _mm256_broadcast_ss((a) + 1);                         \
		s10 = _mm256_fmadd_ps(x, b0, s10);                        \
		s11 = _mm256_fmadd_ps(x, b1, s11);                        \
		x = _mm256_broadcast_ss((a) + 2);                         \
		s20 = _mm256_fmadd_ps(x, b0, s20);                        \
		s21 = _mm256_fmadd_ps(x, b1, s21);                        \
		x = _mm256_broadcast_ss((a) + 3);                         \
		s30 = _mm256_fmadd_ps(x, b0, s30);                        \
		s31 = _mm256_fmadd_ps(x, b1, s31);                        \
		x = _mm256_broadcast_ss((a) + 4);                         \
		s40 = _mm256_fmadd_ps(x, b0, s40);                        \
		s41 = _mm256_fmadd_ps(x, b1, s41);                        \
		x = _mm256_broadcast_ss((a) + 5);                         \
		s50 = _mm256_fmadd_ps(x, b0, s50);                        \
		s51 = _mm256_fmadd_ps(x, b1, s51);                        \
	} while (0)

#define ADDC(i, lo, hi)                                                          \
	do {                                                                     \
		float *row = c + (i) * ldc;                                      \
		_mm256_storeu_ps(row, _mm256_add_ps(_mm256_loadu_ps(row), lo));  \
		_mm256_storeu_ps(row + 8, _mm256_add_ps(_mm256_loadu_ps(row + 8), hi)); \
	} while (0)

void tf_mxu_ukernel_avx2(size_t kc, size_t R, const float *a, const float *b, float *c,
			 size_t ldc)
{
	for (size_t t0 = 0; t0 < kc; t0 += R) {
		size_t len = kc - t0 < R ? kc - t0 : R;
		__m256 s00 = _mm256_setzero_ps(), s01 = _mm256_setzero_ps();
		__m256 s10 = _mm256_setzero_ps(), s11 = _mm256_setzero_ps();
		__m256 s20 = _mm256_setzero_ps(), s21 = _mm256_setzero_ps();
		__m256 s30 = _mm256_setzero_ps(), s31 = _mm256_setzero_ps();
		__m256 s40 = _mm256_setzero_ps(), s41 = _mm256_setzero_ps();
		__m256 s50 = _mm256_setzero_ps(), s51 = _mm256_setzero_ps();
		const float *pa = a + t0 * TF_MXU_MR;
		const float *pb = b + t0 * TF_MXU_NR;
		size_t k = 0;
		for (; k + 4 <= len; k += 4) {
			STEP(pa, pb);
			STEP(pa + TF_MXU_MR, pb + TF_MXU_NR);
			STEP(pa + 2 * TF_MXU_MR, pb + 2 * TF_MXU_NR);
			STEP(pa + 3 * TF_MXU_MR, pb + 3 * TF_MXU_NR);
			pa += 4 * TF_MXU_MR;
			pb += 4 * TF_MXU_NR;
		}
		for (; k < len; k++) {
			STEP(pa, pb);
			pa += TF_MXU_MR;
			pb += TF_MXU_NR;
		}
		ADDC(0, s00, s01);
		ADDC(1, s10, s11);
		ADDC(2, s20, s21);
		ADDC(3, s30, s31);
		ADDC(4, s40, s41);
		ADDC(5, s50, s51);
	}
}

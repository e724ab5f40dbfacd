/* bf16_avx2.c — the AVX2 form of fp32 -> bf16 conversion (8 values per step), integer-only so
 * that it equals the scalar rule in bf16.c bit for bit and ignores MXCSR. */
#include "accel/bf16.h"

#include <immintrin.h>

void tf_bf16_from_f32_array_avx2(const float *in, uint16_t *out, size_t n, int ftz);
void tf_bf16_round_array_avx2(const float *in, float *out, size_t n, int ftz);

/* Rounds 8 fp32 bit patterns; returns the bf16 bits in the low 16 bits of each lane. */
static inline __m256i round8(__m256i u, int ftz)
{
	const __m256i absmask = _mm256_set1_epi32(0x7fffffff);
	const __m256i inf = _mm256_set1_epi32(0x7f800000);
	const __m256i one = _mm256_set1_epi32(1);
	const __m256i bias = _mm256_set1_epi32(0x7fff);
	const __m256i qnan = _mm256_set1_epi32(0x7fc0);
	/* abs fits in 31 bits, so the signed compare is an unsigned one. */
	__m256i isnan = _mm256_cmpgt_epi32(_mm256_and_si256(u, absmask), inf);
	if (ftz) {
		__m256i expo = _mm256_and_si256(u, inf);
		__m256i tiny = _mm256_cmpeq_epi32(expo, _mm256_setzero_si256());
		__m256i sign = _mm256_andnot_si256(absmask, u);
		u = _mm256_blendv_epi8(u, sign, tiny);
	}
	__m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), one);
	__m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(bias, lsb)), 16);
	return _mm256_blendv_epi8(r, qnan, isnan);
}

void tf_bf16_from_f32_array_avx2(const float *in, uint16_t *out, size_t n, int ftz)
{
	size_t i = 0;
	for (; i + 16 <= n; i += 16) {
		__m256i a = round8(_mm256_loadu_si256((const __m256i *)(in + i)), ftz);
		__m256i b = round8(_mm256_loadu_si256((const __m256i *)(in + i + 8)), ftz);
		/* packus works per 128-bit lane: a0 b0 a1 b1 -> reorder to a0 a1 b0 b1. */
		__m256i p = _mm256_packus_epi32(a, b);
		p = _mm256_permute4x64_epi64(p, 0xd8);
		_mm256_storeu_si256((__m256i *)(out + i), p);
	}
	for (; i < n; i++)
		out[i] = tf_bf16_from_f32(in[i], ftz);
}

void tf_bf16_round_array_avx2(const float *in, float *out, size_t n, int ftz)
{
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		__m256i r = round8(_mm256_loadu_si256((const __m256i *)(in + i)), ftz);
		_mm256_storeu_si256((__m256i *)(out + i), _mm256_slli_epi32(r, 16));
	}
	for (; i < n; i++)
		out[i] = tf_bf16_round(in[i], ftz);
}

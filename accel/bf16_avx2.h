/* bf16_avx2.h — the 8-lane fp32 -> bf16 rounding step shared by the AVX2 files of accel/
 * (include only from files compiled with -mavx2). Integer-only, equal to tf_bf16_from_f32. */
#ifndef TF_BF16_AVX2_H
#define TF_BF16_AVX2_H

#include <immintrin.h>

/* Rounds 8 fp32 bit patterns; returns the bf16 bits in the low 16 bits of each lane. */
static inline __m256i tf_bf16_round8_bits(__m256i u, int ftz)
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

/* fp32 -> bf16 -> fp32 for 8 floats. */
static inline __m256 tf_bf16_round8(__m256 f, int ftz)
{
	__m256i r = tf_bf16_round8_bits(_mm256_castps_si256(f), ftz);
	return _mm256_castsi256_ps(_mm256_slli_epi32(r, 16));
}

#endif

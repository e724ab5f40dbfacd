/* bf16_avx2.c — the AVX2 form of fp32 -> bf16 conversion (8 values per step), integer-only so
 * that it equals the scalar rule in bf16.c bit for bit and ignores MXCSR. */
#include "accel/bf16.h"

#include <immintrin.h>

#include "accel/bf16_avx2.h"

void tf_bf16_from_f32_array_avx2(const float *in, uint16_t *out, size_t n, int ftz);
void tf_bf16_round_array_avx2(const float *in, float *out, size_t n, int ftz);

void tf_bf16_from_f32_array_avx2(const float *in, uint16_t *out, size_t n, int ftz)
{
	size_t i = 0;
	for (; i + 16 <= n; i += 16) {
		__m256i a = tf_bf16_round8_bits(_mm256_loadu_si256((const __m256i *)(in + i)), ftz);
		__m256i b =
		    tf_bf16_round8_bits(_mm256_loadu_si256((const __m256i *)(in + i + 8)), ftz);
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
		__m256i r = tf_bf16_round8_bits(_mm256_loadu_si256((const __m256i *)(in + i)), ftz);
		_mm256_storeu_si256((__m256i *)(out + i), _mm256_slli_epi32(r, 16));
	}
	for (; i < n; i++)
		out[i] = tf_bf16_round(in[i], ftz);
}

/* bf16.c — scalar bfloat16 conversion and the run-time choice of the vectorised array path.
 *
 * All arithmetic is on the integer bits (memcpy, no floating-point operations), so the result
 * does not depend on the thread's MXCSR FTZ/DAZ state. */
#include "accel/bf16.h"

#include <string.h>

/* Implemented in bf16_avx2.c (compiled with -mavx2); only called when the CPU has AVX2. */
void tf_bf16_from_f32_array_avx2(const float *in, uint16_t *out, size_t n, int ftz);
void tf_bf16_round_array_avx2(const float *in, float *out, size_t n, int ftz);

static uint32_t f32_bits(float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof u);
	return u;
}

static float bits_f32(uint32_t u)
{
	float f;
	memcpy(&f, &u, sizeof f);
	return f;
}

/* Written with selects rather than early returns so the loops over arrays stay branch-free;
 * the rule is the one stated in bf16.h. */
static inline uint16_t from_bits(uint32_t u, int ftz)
{
	int nan = (u & 0x7fffffffu) > 0x7f800000u; /* any NaN -> canonical quiet NaN */
	int tiny = ftz && (u & 0x7f800000u) == 0;  /* subnormal -> signed zero, before rounding */
	uint32_t v = tiny ? (u & 0x80000000u) : u;
	v = (v + 0x7fffu + ((v >> 16) & 1u)) >> 16;
	return (uint16_t)(nan ? 0x7fc0u : v);
}

uint16_t tf_bf16_from_f32(float f, int ftz)
{
	return from_bits(f32_bits(f), ftz);
}

float tf_bf16_to_f32(uint16_t h)
{
	return bits_f32((uint32_t)h << 16);
}

float tf_bf16_round(float f, int ftz)
{
	return bits_f32((uint32_t)from_bits(f32_bits(f), ftz) << 16);
}

void tf_bf16_from_f32_array_scalar(const float *in, uint16_t *out, size_t n, int ftz)
{
	for (size_t i = 0; i < n; i++)
		out[i] = tf_bf16_from_f32(in[i], ftz);
}

void tf_bf16_round_array_scalar(const float *in, float *out, size_t n, int ftz)
{
	for (size_t i = 0; i < n; i++)
		out[i] = tf_bf16_round(in[i], ftz);
}

int tf_bf16_have_avx2(void)
{
#if defined(__x86_64__) || defined(__i386__)
	static int cached = -1;
	if (cached < 0) {
		__builtin_cpu_init();
		cached = __builtin_cpu_supports("avx2") ? 1 : 0;
	}
	return cached;
#else
	return 0;
#endif
}

void tf_bf16_from_f32_array(const float *in, uint16_t *out, size_t n, int ftz)
{
	if (tf_bf16_have_avx2())
		tf_bf16_from_f32_array_avx2(in, out, n, ftz);
	else
		tf_bf16_from_f32_array_scalar(in, out, n, ftz);
}

void tf_bf16_round_array(const float *in, float *out, size_t n, int ftz)
{
	if (tf_bf16_have_avx2())
		tf_bf16_round_array_avx2(in, out, n, ftz);
	else
		tf_bf16_round_array_scalar(in, out, n, ftz);
}

void tf_bf16_to_f32_array(const uint16_t *in, float *out, size_t n)
{
	for (size_t i = 0; i < n; i++)
		out[i] = tf_bf16_to_f32(in[i]);
}

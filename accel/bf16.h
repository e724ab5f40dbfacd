/* bf16.h — bfloat16 as TPUs use it: fp32 -> bf16 round to nearest, ties to even.
 *
 * Conversion rule (https://cloud.google.com/tpu/docs/bfloat16; the logic of
 * PyTorch's c10/util/BFloat16.h round_to_nearest_even and TensorFlow's bfloat16): a NaN becomes the
 * canonical quiet NaN 0x7FC0 (sign dropped); otherwise u += 0x7FFF + ((u >> 16) & 1) and the
 * top 16 bits are kept, so values near FLT_MAX round to Inf. With `ftz` set, a subnormal fp32
 * input is flushed to a zero of the same sign BEFORE rounding (TPU mode, the default in
 * tf_mxu_cfg): 0x007FFFFF gives 0x0000 with ftz and 0x0080 (the smallest normal) without.
 * bf16 -> fp32 is exact (the low 16 bits are zero).
 *
 * The array variants use AVX2 when the CPU has it (chosen at run time) and a scalar loop
 * otherwise; both give the same bits for every input (tests/test_bf16.c checks all 2^32). */
#ifndef TF_BF16_H
#define TF_BF16_H

#include <stddef.h>
#include <stdint.h>

/* fp32 -> bf16 bits. */
uint16_t tf_bf16_from_f32(float f, int ftz);
/* bf16 bits -> fp32 (exact). */
float tf_bf16_to_f32(uint16_t h);
/* fp32 -> bf16 -> fp32: the value an MXU multiplies. */
float tf_bf16_round(float f, int ftz);

/* Array forms; `in` and `out` may be the same buffer for tf_bf16_round_array. */
void tf_bf16_from_f32_array(const float *in, uint16_t *out, size_t n, int ftz);
void tf_bf16_to_f32_array(const uint16_t *in, float *out, size_t n);
void tf_bf16_round_array(const float *in, float *out, size_t n, int ftz);

/* The scalar loops the vectorised forms must equal, exported for the tests. */
void tf_bf16_from_f32_array_scalar(const float *in, uint16_t *out, size_t n, int ftz);
void tf_bf16_round_array_scalar(const float *in, float *out, size_t n, int ftz);

/* 1 when the array forms run the AVX2 code on this CPU. */
int tf_bf16_have_avx2(void);

#endif

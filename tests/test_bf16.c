/* test_bf16.c — bfloat16 conversion: the facts.md vectors, NaN/Inf/FTZ rules, and the
 * vectorised array path equal to the scalar rule for every one of the 2^32 fp32 inputs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "accel/bf16.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float f_of(uint32_t u)
{
	float f;
	memcpy(&f, &u, sizeof f);
	return f;
}

static uint32_t u_of(float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof u);
	return u;
}

static void test_bf16_vectors(void **state)
{
	(void)state;
	static const struct { uint32_t in; uint16_t out; } v[] = {
		{ 0x3F800000, 0x3F80 }, { 0x3F808000, 0x3F80 }, { 0x3F818000, 0x3F82 },
		{ 0x3F808001, 0x3F81 }, { 0x7F7FFFFF, 0x7F80 }, { 0x7F800001, 0x7FC0 },
		{ 0x7F800000, 0x7F80 }, { 0xFF800000, 0xFF80 }, { 0x00000000, 0x0000 },
		{ 0x80000000, 0x8000 }, { 0xFFC00001, 0x7FC0 }, { 0xBF808000, 0xBF80 },
		{ 0xBF818000, 0xBF82 }, { 0x3F80FFFF, 0x3F81 }, { 0x3F7FFFFF, 0x3F80 },
	};
	for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
		assert_int_equal(tf_bf16_from_f32(f_of(v[i].in), 1), v[i].out);
		assert_int_equal(tf_bf16_from_f32(f_of(v[i].in), 0), v[i].out);
	}
}

static void test_bf16_ftz_flushes_subnormals_before_rounding(void **state)
{
	(void)state;
	/* The largest subnormal rounds up to the smallest normal without FTZ. */
	assert_int_equal(tf_bf16_from_f32(f_of(0x007FFFFF), 0), 0x0080);
	assert_int_equal(tf_bf16_from_f32(f_of(0x007FFFFF), 1), 0x0000);
	assert_int_equal(tf_bf16_from_f32(f_of(0x807FFFFF), 1), 0x8000);
	assert_int_equal(tf_bf16_from_f32(f_of(0x00010000), 0), 0x0001);
	assert_int_equal(tf_bf16_from_f32(f_of(0x00010000), 1), 0x0000);
	/* The smallest normal is kept. */
	assert_int_equal(tf_bf16_from_f32(f_of(0x00800000), 1), 0x0080);
}

static void test_bf16_round_trip_and_round(void **state)
{
	(void)state;
	for (uint32_t h = 0; h < 0x10000; h++) {
		float f = tf_bf16_to_f32((uint16_t)h);
		assert_int_equal(u_of(f), h << 16);
		int nan = (h & 0x7fff) > 0x7f80;
		/* bf16 values are fixed points of the conversion (NaN becomes canonical;
		 * subnormals flush only with ftz). */
		uint16_t back = tf_bf16_from_f32(f, 0);
		assert_int_equal(back, nan ? 0x7fc0 : h);
		assert_int_equal(u_of(tf_bf16_round(f, 0)), (uint32_t)back << 16);
	}
	assert_true(isinf(tf_bf16_round(3.4e38f, 1)));
	assert_true(isnan(tf_bf16_round(NAN, 1)));
	assert_true(tf_bf16_round(1.00390625f, 1) == 1.0f); /* tie to even */
}

/* Every fp32 bit pattern through the vectorised array functions equals the scalar rule, with
 * and without FTZ. ~2 x 4.3e9 conversions per path. */
static void test_bf16_vector_equals_scalar_all_inputs(void **state)
{
	(void)state;
	enum { CH = 1 << 16 };
	float *in = malloc(CH * sizeof *in);
	uint16_t *hv = malloc(CH * sizeof *hv), *hs = malloc(CH * sizeof *hs);
	float *fv = malloc(CH * sizeof *fv), *fs = malloc(CH * sizeof *fs);
	assert_non_null(in);
	assert_non_null(hv);
	assert_non_null(hs);
	assert_non_null(fv);
	assert_non_null(fs);
	const char *stride_env = getenv("TF_BF16_SWEEP_STRIDE");
	uint64_t stride = stride_env ? strtoull(stride_env, NULL, 10) : 1;
	if (stride < 1)
		stride = 1;
	for (int ftz = 0; ftz <= 1; ftz++) {
		for (uint64_t base = 0; base < (1ull << 32); base += (uint64_t)CH * stride) {
			for (uint32_t i = 0; i < CH; i++) {
				uint32_t u = (uint32_t)base + i;
				memcpy(&in[i], &u, sizeof u);
			}
			tf_bf16_from_f32_array(in, hv, CH, ftz);
			tf_bf16_from_f32_array_scalar(in, hs, CH, ftz);
			if (memcmp(hv, hs, CH * sizeof *hv) != 0) {
				for (uint32_t i = 0; i < CH; i++)
					if (hv[i] != hs[i])
						fail_msg("from_f32 ftz=%d input 0x%08x: vector %04x "
							 "scalar %04x", ftz, u_of(in[i]), hv[i], hs[i]);
			}
			tf_bf16_round_array(in, fv, CH, ftz);
			tf_bf16_round_array_scalar(in, fs, CH, ftz);
			if (memcmp(fv, fs, CH * sizeof *fv) != 0)
				fail_msg("round_array differs in block 0x%08llx ftz=%d",
					 (unsigned long long)base, ftz);
		}
	}
	printf("bf16 sweep: %s path, stride %llu blocks\n",
	       tf_bf16_have_avx2() ? "avx2" : "scalar", (unsigned long long)stride);
	free(in);
	free(hv);
	free(hs);
	free(fv);
	free(fs);
}

static void test_bf16_array_tails_and_in_place(void **state)
{
	(void)state;
	float buf[37], ref[37];
	uint16_t h[37];
	for (int i = 0; i < 37; i++)
		buf[i] = ref[i] = 1.0f + (float)i / 3.0f;
	tf_bf16_from_f32_array(buf, h, 37, 1);
	tf_bf16_round_array(buf, buf, 37, 1); /* in place */
	for (int i = 0; i < 37; i++) {
		assert_int_equal(h[i], tf_bf16_from_f32(ref[i], 1));
		assert_int_equal(u_of(buf[i]), u_of(tf_bf16_round(ref[i], 1)));
	}
	float back[37];
	tf_bf16_to_f32_array(h, back, 37);
	assert_memory_equal(back, buf, sizeof back);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bf16_vectors),
		cmocka_unit_test(test_bf16_ftz_flushes_subnormals_before_rounding),
		cmocka_unit_test(test_bf16_round_trip_and_round),
		cmocka_unit_test(test_bf16_array_tails_and_in_place),
		cmocka_unit_test(test_bf16_vector_equals_scalar_all_inputs),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

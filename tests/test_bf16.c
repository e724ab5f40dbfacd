/* test_bf16.c — bfloat16 conversion: known vectors, NaN/Inf/FTZ rules, and the
 * vectorised array path equal to the scalar rule for every one of the 2^32 fp32 inputs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "accel/bf16.h"

#include <math.h>
#include <pthread.h>
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
	static const struct {
		uint32_t in;
		uint16_t out;
	} v[] = {
	    {0x3F800000, 0x3F80}, {0x3F808000, 0x3F80}, {0x3F818000, 0x3F82}, {0x3F808001, 0x3F81},
	    {0x7F7FFFFF, 0x7F80}, {0x7F800001, 0x7FC0}, {0x7F800000, 0x7F80}, {0xFF800000, 0xFF80},
	    {0x00000000, 0x0000}, {0x80000000, 0x8000}, {0xFFC00001, 0x7FC0}, {0xBF808000, 0xBF80},
	    {0xBF818000, 0xBF82}, {0x3F80FFFF, 0x3F81}, {0x3F7FFFFF, 0x3F80},
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

/* One half of the sweep, run on its own thread. */
struct sweep {
	uint64_t lo, hi;    /* input range [lo, hi) */
	uint64_t stride;    /* blocks skipped (1 = every input) */
	uint64_t checked;   /* inputs compared */
	int bad;            /* 1 when a difference was found */
	uint32_t bad_input; /* the first one */
	int bad_ftz;        /* its mode */
	char what[16];      /* which function differed */
};

static void *sweep_main(void *arg)
{
	enum { CH = 1 << 16 };
	struct sweep *sw = arg;
	float *in = malloc(CH * sizeof *in), *fv = malloc(CH * sizeof *fv);
	uint16_t *hv = malloc(CH * sizeof *hv), *hs = malloc(CH * sizeof *hs);
	if (!in || !fv || !hv || !hs)
		abort();
	for (int ftz = 0; ftz <= 1 && !sw->bad; ftz++) {
		for (uint64_t base = sw->lo; base < sw->hi && !sw->bad; base += CH * sw->stride) {
			for (uint32_t i = 0; i < CH; i++) {
				uint32_t u = (uint32_t)(base + i);
				memcpy(&in[i], &u, sizeof u);
			}
			tf_bf16_from_f32_array(in, hv, CH, ftz);
			tf_bf16_from_f32_array_scalar(in, hs, CH, ftz);
			tf_bf16_round_array(in, fv, CH, ftz);
			for (uint32_t i = 0; i < CH; i++) {
				/* round = from << 16 by definition; check it against the scalar
				 * conversion rather than a second scalar pass */
				if (hv[i] != hs[i] || u_of(fv[i]) != (uint32_t)hs[i] << 16) {
					sw->bad = 1;
					sw->bad_input = (uint32_t)(base + i);
					sw->bad_ftz = ftz;
					snprintf(sw->what, sizeof sw->what, "%s",
					         hv[i] != hs[i] ? "from_f32" : "round");
					break;
				}
			}
			sw->checked += CH;
		}
	}
	free(in);
	free(fv);
	free(hv);
	free(hs);
	return NULL;
}

/* Every fp32 bit pattern through the vectorised array functions equals the scalar rule, with
 * and without FTZ: 2 x 2^32 conversions per path, split over two threads (~10 s).
 * TF_BF16_SWEEP_STRIDE=n checks every n-th block of 65536 inputs only (for slow builds such
 * as the sanitizer one). */
static void test_bf16_vector_equals_scalar_all_inputs(void **state)
{
	(void)state;
	const char *stride_env = getenv("TF_BF16_SWEEP_STRIDE");
	uint64_t stride = stride_env ? strtoull(stride_env, NULL, 10) : 1;
	if (getenv("TF_ASAN") && !stride_env)
		stride = 64;
	if (stride < 1)
		stride = 1;
	struct sweep sw[2] = {{.lo = 0, .hi = 1ull << 31, .stride = stride},
	                      {.lo = 1ull << 31, .hi = 1ull << 32, .stride = stride}};
	pthread_t tid;
	int threaded = pthread_create(&tid, NULL, sweep_main, &sw[1]) == 0;
	sweep_main(&sw[0]);
	if (threaded)
		pthread_join(tid, NULL);
	else
		sweep_main(&sw[1]);
	for (int i = 0; i < 2; i++)
		if (sw[i].bad)
			fail_msg("%s differs for input 0x%08x with ftz=%d", sw[i].what,
			         sw[i].bad_input, sw[i].bad_ftz);
	uint64_t checked = sw[0].checked + sw[1].checked;
	printf("bf16 sweep: %s path, %llu inputs x 2 modes checked\n",
	       tf_bf16_have_avx2() ? "avx2" : "scalar", (unsigned long long)(checked / 2));
	if (stride == 1)
		assert_true(checked == 2 * (1ull << 32));
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
	float sc[37];
	tf_bf16_round_array_scalar(ref, sc, 37, 1);
	assert_memory_equal(sc, buf, sizeof sc);
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

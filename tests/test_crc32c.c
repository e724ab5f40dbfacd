/* test_crc32c.c — CRC-32C against RFC 3720 vectors; hardware and table paths agree. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "common/crc32c.h"

#include <stdlib.h>
#include <string.h>

static void test_crc32c_rfc3720_vectors(void **state)
{
	(void)state;
	unsigned char buf[32];
	memset(buf, 0, sizeof buf);
	assert_int_equal(tf_crc32c(buf, 32), 0x8A9136AA);
	memset(buf, 0xff, sizeof buf);
	assert_int_equal(tf_crc32c(buf, 32), 0x62A8AB43);
	for (int i = 0; i < 32; i++)
		buf[i] = (unsigned char)i;
	assert_int_equal(tf_crc32c(buf, 32), 0x46DD794E);
	assert_int_equal(tf_crc32c("123456789", 9), 0xE3069283);
}

static void test_crc32c_paths_agree_and_extend(void **state)
{
	(void)state;
	unsigned char buf[1000];
	srand(7);
	for (size_t i = 0; i < sizeof buf; i++)
		buf[i] = (unsigned char)rand();
	for (size_t n = 0; n < sizeof buf; n += 37) {
		uint32_t whole = tf_crc32c(buf, n);
		assert_int_equal(whole, tf_crc32c_extend_sw(0, buf, n));
		assert_int_equal(whole,
		                 tf_crc32c_extend(tf_crc32c(buf, n / 3), buf + n / 3, n - n / 3));
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_crc32c_rfc3720_vectors),
	    cmocka_unit_test(test_crc32c_paths_agree_and_extend),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

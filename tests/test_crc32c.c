/* test_crc32c.c — CRC-32C against RFC 3720 vectors; hardware and table paths agree; combined
 * pieces give the one-pass CRC. */
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

/* The CRC of buf[0..n) by both paths, whole, extended and from an unaligned start. */
static void check_paths(const unsigned char *buf, size_t n)
{
	uint32_t whole = tf_crc32c(buf, n);
	assert_int_equal(whole, tf_crc32c_extend_sw(0, buf, n));
	assert_int_equal(whole, tf_crc32c_extend(tf_crc32c(buf, n / 3), buf + n / 3, n - n / 3));
	if (n)
		assert_int_equal(tf_crc32c(buf + 1, n - 1), tf_crc32c_extend_sw(0, buf + 1, n - 1));
}

static void test_crc32c_paths_agree_and_extend(void **state)
{
	(void)state;
	static unsigned char buf[100000];
	srand(7);
	for (size_t i = 0; i < sizeof buf; i++)
		buf[i] = (unsigned char)rand();
	for (size_t n = 0; n < 1000; n += 37)
		check_paths(buf, n);
	/* around the hardware path's three-lane blocks (12 KiB), and over several of them */
	size_t lens[] = {12287, 12288, 12289, 24575, 24576, 24577, 36871, sizeof buf - 3};
	for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++)
		check_paths(buf, lens[i]);
}

static void test_crc32c_combine_matches_one_pass(void **state)
{
	(void)state;
	size_t len = 3u << 20;
	unsigned char *buf = malloc(len);
	assert_non_null(buf);
	srand(11);
	for (size_t i = 0; i < len; i++)
		buf[i] = (unsigned char)rand();
	size_t cuts[] = {0, 1, 7, 8, 4096, 1u << 20, len - 1, len};
	for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
		size_t a = cuts[i];
		assert_int_equal(
		    tf_crc32c_combine(tf_crc32c(buf, a), tf_crc32c(buf + a, len - a), len - a),
		    tf_crc32c(buf, len));
	}
	/* three pieces, folded left to right as a multipart upload's parts are */
	uint32_t c = 0;
	size_t part = 1234567;
	for (size_t off = 0; off < len; off += part) {
		size_t n = len - off < part ? len - off : part;
		c = tf_crc32c_combine(c, tf_crc32c(buf + off, n), n);
	}
	assert_int_equal(c, tf_crc32c(buf, len));
	assert_int_equal(tf_crc32c_combine(0x12345678, 0, 0), 0x12345678);
	free(buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_crc32c_rfc3720_vectors),
	    cmocka_unit_test(test_crc32c_paths_agree_and_extend),
	    cmocka_unit_test(test_crc32c_combine_matches_one_pass),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

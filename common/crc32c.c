/* crc32c.c — CRC-32C: a slicing-by-8 table version for any CPU and an SSE4.2 version chosen
 * once at run time, and the combination of two CRCs of adjacent pieces. Both paths are checked
 * against each other and the RFC 3720 vectors in tests, the combination against one pass.
 *
 * The SSE4.2 crc32 instruction takes 3 cycles but a new one can start every cycle, so one
 * chain of them runs at a third of the unit's speed: long inputs go through three chains over
 * three adjacent lanes at once, joined by the same algebra as tf_crc32c_combine. */
#include "common/crc32c.h"

#include <pthread.h>
#include <string.h>

#define POLY 0x82F63B78u /* reflected 0x1EDC6F41 */

static uint32_t table[8][256];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;
static int have_sse42;
#define LANE 4096u            /* bytes per lane of the three-chain loop */
static uint32_t lane_shift[2]; /* x^(8 * LANE) and x^(16 * LANE) mod P, for joining lanes */

static uint32_t xpow8n(uint64_t n);

static void table_init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = (c >> 1) ^ (POLY & (0u - (c & 1)));
		table[0][i] = c;
	}
	for (int t = 1; t < 8; t++)
		for (int i = 0; i < 256; i++)
			table[t][i] = (table[t - 1][i] >> 8) ^ table[0][table[t - 1][i] & 0xff];
#if defined(__x86_64__)
	__builtin_cpu_init();
	have_sse42 = __builtin_cpu_supports("sse4.2");
#endif
	lane_shift[0] = xpow8n(LANE);
	lane_shift[1] = xpow8n(2 * LANE);
}

uint32_t tf_crc32c_extend_sw(uint32_t crc, const void *data, size_t n)
{
	const unsigned char *p = data;
	pthread_once(&table_once, table_init);
	crc = ~crc;
	while (n >= 8) {
		uint32_t lo, hi;
		memcpy(&lo, p, 4);
		memcpy(&hi, p + 4, 4);
		lo ^= crc;
		crc = table[7][lo & 0xff] ^ table[6][(lo >> 8) & 0xff] ^
		      table[5][(lo >> 16) & 0xff] ^ table[4][lo >> 24] ^ table[3][hi & 0xff] ^
		      table[2][(hi >> 8) & 0xff] ^ table[1][(hi >> 16) & 0xff] ^ table[0][hi >> 24];
		p += 8;
		n -= 8;
	}
	while (n--)
		crc = (crc >> 8) ^ table[0][(crc ^ *p++) & 0xff];
	return ~crc;
}

static uint32_t mul_mod_p(uint32_t a, uint32_t b);

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t extend_hw(uint32_t crc, const void *data,
                                                            size_t n)
{
	const unsigned char *p = data;
	uint64_t c = ~crc;
	/* The CRC register is linear in its start value and the data: the register after
	 * lanes A B C from c is shift(A's from c, 2 lanes) ^ shift(B's from 0, 1 lane) ^ C's
	 * from 0. */
	while (n >= 3 * LANE) {
		uint64_t c1 = 0, c2 = 0;
		for (size_t i = 0; i < LANE; i += 8) {
			uint64_t v0, v1, v2;
			memcpy(&v0, p + i, 8);
			memcpy(&v1, p + LANE + i, 8);
			memcpy(&v2, p + 2 * LANE + i, 8);
			c = __builtin_ia32_crc32di(c, v0);
			c1 = __builtin_ia32_crc32di(c1, v1);
			c2 = __builtin_ia32_crc32di(c2, v2);
		}
		c = mul_mod_p((uint32_t)c, lane_shift[1]) ^ mul_mod_p((uint32_t)c1, lane_shift[0]) ^
		    (uint32_t)c2;
		p += 3 * LANE;
		n -= 3 * LANE;
	}
	while (n >= 8) {
		uint64_t v;
		memcpy(&v, p, 8);
		c = __builtin_ia32_crc32di(c, v);
		p += 8;
		n -= 8;
	}
	uint32_t c32 = (uint32_t)c;
	while (n--)
		c32 = __builtin_ia32_crc32qi(c32, *p++);
	return ~c32;
}
#endif

uint32_t tf_crc32c_extend(uint32_t crc, const void *data, size_t n)
{
	pthread_once(&table_once, table_init);
#if defined(__x86_64__)
	if (have_sse42)
		return extend_hw(crc, data, n);
#endif
	return tf_crc32c_extend_sw(crc, data, n);
}

/* Polynomials mod P are kept reflected, like the CRC itself: bit 31 holds x^0. */
static uint32_t mul_mod_p(uint32_t a, uint32_t b)
{
	uint32_t p = 0;
	for (uint32_t m = 1u << 31; m; m >>= 1) {
		if (a & m)
			p ^= b;
		b = b & 1 ? (b >> 1) ^ POLY : b >> 1; /* b *= x */
	}
	return p;
}

/* x^(8n) mod P (n bytes of shift), built from the squares x^(2^k), one multiplication per set
 * bit of n. */
static uint32_t xpow8n(uint64_t n)
{
	uint32_t sq = 1u << 30; /* x^1 */
	for (int k = 0; k < 3; k++)
		sq = mul_mod_p(sq, sq); /* x^8: one byte */
	uint32_t shift = 1u << 31;      /* x^0 */
	for (; n; n >>= 1) {
		if (n & 1)
			shift = mul_mod_p(shift, sq);
		sq = mul_mod_p(sq, sq);
	}
	return shift;
}

/* crc(A || B) = crc(A) * x^(8 * |B|) + crc(B) mod P: the pre- and post-inversions of the two
 * CRCs cancel out, so the finished values combine directly. */
uint32_t tf_crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b)
{
	return mul_mod_p(crc_a, xpow8n(len_b)) ^ crc_b;
}

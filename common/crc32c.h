/* crc32c.h — CRC-32C (Castagnoli), as used by TFRecord framing and S3 x-amz-checksum-crc32c. */
#ifndef TF_CRC32C_H
#define TF_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Extends crc (0 to start) over n bytes; uses SSE4.2's crc32 instruction when the CPU has it. */
uint32_t tf_crc32c_extend(uint32_t crc, const void *data, size_t n);
/* The portable table path alone (the tests compare both paths). */
uint32_t tf_crc32c_extend_sw(uint32_t crc, const void *data, size_t n);

/* The CRC-32C of A followed by B, from crc_a = CRC-32C(A), crc_b = CRC-32C(B) and B's length:
 * pieces checksummed apart (in parallel) give the whole's CRC without reading it again. */
uint32_t tf_crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);

static inline uint32_t tf_crc32c(const void *data, size_t n)
{
	return tf_crc32c_extend(0, data, n);
}

/* TFRecord's masked CRC: ((c >> 15) | (c << 17)) + 0xa282ead8 (tensorflow/core/lib/hash/crc32c.h,
 * Mask). */
static inline uint32_t tf_crc32c_mask(uint32_t c)
{
	return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

#endif

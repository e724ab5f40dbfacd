/* tfrecord.c — TFRecord record framing and verification (see tfrecord.h). */
#include "ml/tfrecord.h"

#include "common/common.h"
#include "common/crc32c.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void put_le32(unsigned char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get_le32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

void tf_tfrecord_append(struct tf_buf *out, const void *payload, size_t n)
{
	unsigned char hdr[12], tail[4];
	uint64_t len = n;
	for (int i = 0; i < 8; i++)
		hdr[i] = (unsigned char)(len >> (8 * i));
	put_le32(hdr + 8, tf_crc32c_mask(tf_crc32c(hdr, 8)));
	put_le32(tail, tf_crc32c_mask(tf_crc32c(payload, n)));
	tf_buf_append(out, hdr, sizeof hdr);
	tf_buf_append(out, payload, n);
	tf_buf_append(out, tail, sizeof tail);
}

int tf_tfrecord_index(const char *name, const void *data, size_t len,
                      struct tf_tfrecord_span **spans, size_t *count, char *err, size_t errlen)
{
	const unsigned char *p = data;
	size_t pos = 0, n = 0, cap = 0;
	struct tf_tfrecord_span *v = NULL;
	int rc = 0;

	while (pos < len) {
		if (len - pos < 12) {
			tf_errf(err, errlen,
			        "'%s': record %zu: truncated header (%zu bytes left); "
			        "the file is damaged, run data prep again",
			        name, n, len - pos);
			rc = -EBADMSG;
			goto out;
		}
		uint64_t rlen = 0;
		for (int i = 0; i < 8; i++)
			rlen |= (uint64_t)p[pos + i] << (8 * i);
		if (get_le32(p + pos + 8) != tf_crc32c_mask(tf_crc32c(p + pos, 8))) {
			tf_errf(err, errlen,
			        "'%s': record %zu: length CRC mismatch at byte %zu; "
			        "the file is corrupt, run data prep again",
			        name, n, pos);
			rc = -EBADMSG;
			goto out;
		}
		if (rlen > len - pos - 12 || len - pos - 12 - rlen < 4) {
			tf_errf(err, errlen,
			        "'%s': record %zu: truncated payload (length %llu, %zu "
			        "bytes left); the file is damaged, run data prep again",
			        name, n, (unsigned long long)rlen, len - pos - 12);
			rc = -EBADMSG;
			goto out;
		}
		const unsigned char *payload = p + pos + 12;
		if (get_le32(payload + rlen) != tf_crc32c_mask(tf_crc32c(payload, rlen))) {
			tf_errf(err, errlen,
			        "'%s': record %zu: data CRC mismatch at byte %zu; "
			        "the file is corrupt, run data prep again",
			        name, n, pos);
			rc = -EBADMSG;
			goto out;
		}
		if (n == cap) {
			cap = cap ? cap * 2 : 1024;
			v = tf_xrealloc(v, cap * sizeof *v);
		}
		v[n].off = pos + 12;
		v[n].len = rlen;
		n++;
		pos += 12 + rlen + 4;
	}
	*spans = v;
	*count = n;
	v = NULL;
out:
	free(v);
	return rc;
}

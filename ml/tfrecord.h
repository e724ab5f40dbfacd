/* tfrecord.h — TFRecord framing: uint64 length (LE), masked CRC32C of the length bytes, the
 * payload, masked CRC32C of the payload (https://www.tensorflow.org/tutorials/load_data/tfrecord). Writer appends to a growable buffer (the
 * caller stores it as a shard object); reader walks a buffer in memory and names the shard and
 * the record index in every error so a corrupt file can be found. */
#ifndef TF_ML_TFRECORD_H
#define TF_ML_TFRECORD_H

#include "common/buf.h"
#include <stddef.h>
#include <stdint.h>

/* The smallest framed record (an empty payload): length 8 + its CRC 4 + payload CRC 4. */
#define TF_TFRECORD_MIN_RECORD 16

/* Appends one framed record holding payload[0..n) to out. */
void tf_tfrecord_append(struct tf_buf *out, const void *payload, size_t n);

/* Where one record's payload sits inside a shard buffer. */
struct tf_tfrecord_span {
	uint64_t off; /* payload offset in the shard */
	uint64_t len; /* payload length */
};

/* Indexes every record of a shard held in memory, checking both CRCs of each record.
 * On success *spans (caller frees) holds *count entries pointing into data. On a truncated or
 * corrupt record returns -EBADMSG with err naming `name` and the 0-based record index. */
int tf_tfrecord_index(const char *name, const void *data, size_t len,
                      struct tf_tfrecord_span **spans, size_t *count, char *err, size_t errlen);

#endif

/* fuzz_tfrecord.c — libFuzzer target for the TFRecord reader and the tf.train.Example decoder:
 * any bytes are either indexed and decoded or refused with -EBADMSG, never a crash, an
 * out-of-bounds read or a leak. `make fuzz` builds and runs it. */
#include "ml/example.h"
#include "ml/tfrecord.h"

#include <stdint.h>
#include <stdlib.h>

static void decode_example(const unsigned char *p, size_t n)
{
	struct tf_feature_view v[8];
	int nf = tf_example_decode(p, n, v, 8);
	for (int i = 0; i < nf && i < 8; i++) {
		const unsigned char *b;
		size_t blen;
		int64_t iv[4];
		float fv[4];
		(void)tf_feature_bytes(&v[i], &b, &blen);
		(void)tf_feature_int64s(&v[i], iv, 4);
		(void)tf_feature_floats(&v[i], fv, 4);
	}
	(void)tf_example_find(v, nf > 8 ? 8 : (size_t)(nf < 0 ? 0 : nf), "image");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct tf_tfrecord_span *spans = NULL;
	size_t count = 0;
	char err[256];
	/* The bytes as a shard, and the same bytes as one bare Example payload. */
	if (tf_tfrecord_index("fuzz", data, size, &spans, &count, err, sizeof(err)) == 0) {
		for (size_t i = 0; i < count; i++)
			decode_example(data + spans[i].off, spans[i].len);
		free(spans);
	}
	decode_example(data, size);
	return 0;
}

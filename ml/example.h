/* example.h — tf.train.Example protobuf encoding and decoding, written against the public
 * schema (tests/proto/example.proto, feature.proto):
 *   Example { Features features = 1; }   Features { map<string, Feature> feature = 1; }
 *   Feature { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2;
 *                          Int64List int64_list = 3; } }
 *   BytesList { repeated bytes value = 1; }  FloatList { repeated float value = 1 [packed]; }
 *   Int64List { repeated int64 value = 1 [packed]; }
 * The encoder writes packed lists as proto3 does; the decoder accepts packed and unpacked
 * lists and skips unknown fields, as any protobuf reader must. */
#ifndef TF_ML_EXAMPLE_H
#define TF_ML_EXAMPLE_H

#include "ml/tfrecord.h"

#include <stddef.h>
#include <stdint.h>

enum tf_feature_kind {
	TF_FEATURE_NONE,  /* Feature with no kind set */
	TF_FEATURE_BYTES, /* BytesList */
	TF_FEATURE_FLOAT, /* FloatList */
	TF_FEATURE_INT64, /* Int64List */
	TF_FEATURE_LAST
};

/* One feature to encode: name -> a list of `count` values of the kind. For BYTES, `data`
 * points to `count` == 1 byte string of `bytes` length (one value per feature is all tpuflow
 * writes); for FLOAT to `count` floats; for INT64 to `count` int64_t. */
struct tf_feature_in {
	const char *name;          /* map key */
	enum tf_feature_kind kind; /* list type */
	const void *data;          /* values (borrowed) */
	size_t count;              /* number of values (1 for BYTES) */
	size_t bytes;              /* BYTES only: length of the single value */
};

/* Appends the serialized Example to out. Features are written in the order given. */
void tf_example_encode(const struct tf_feature_in *f, size_t n, struct tf_buf *out);

/* One decoded feature: spans point into the decoded buffer (borrowed). */
struct tf_feature_view {
	const unsigned char *name; /* key bytes, not NUL-terminated */
	size_t name_len;           /* key length */
	enum tf_feature_kind kind; /* which list */
	const unsigned char *list; /* the list message's bytes */
	size_t list_len;           /* its length */
};

/* Decodes up to `max` features of an Example into views. Returns the number of features
 * (which may exceed max: only the first max are stored) or -EBADMSG on malformed input. */
int tf_example_decode(const void *data, size_t len, struct tf_feature_view *views, size_t max);

/* Finds a feature by name among n views; NULL when absent. */
const struct tf_feature_view *tf_example_find(const struct tf_feature_view *v, size_t n,
                                              const char *name);

/* The first value of a BytesList: 0 and its span, or -EBADMSG / -ENOENT. */
int tf_feature_bytes(const struct tf_feature_view *v, const unsigned char **p, size_t *len);
/* Int64List / FloatList values into out[0..max); returns the count (may exceed max: only
 * max stored) or -EBADMSG when malformed or of another kind. */
int tf_feature_int64s(const struct tf_feature_view *v, int64_t *out, size_t max);
int tf_feature_floats(const struct tf_feature_view *v, float *out, size_t max);

#endif

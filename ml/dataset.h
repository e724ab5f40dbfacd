/* dataset.h — a prepared dataset in object storage: sharded TFRecord files of
 * tf.train.Example records per split, plus a manifest (JSON, written last) with counts, the
 * feature schema, the preprocessing the model must apply, class names and per-shard checksums.
 *
 * Layout under a prefix P:   P/train-00000-of-00008.tfrecord ...   P/test-00000-of-00002...
 *                            P/manifest.json   (shard names in it are relative to P)
 * Example features: image datasets {image: bytes (rows*cols uint8), label: int64};
 * tabular (CSV) datasets {features: float list (dim), label: int64}. */
#ifndef TF_ML_DATASET_H
#define TF_ML_DATASET_H

#include "ml/source.h"
#include "ml/tfrecord.h"
#include "storage/objstore.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

enum tf_split { TF_SPLIT_TRAIN, TF_SPLIT_TEST, TF_SPLIT_LAST };

/* How raw features become model inputs: x = (raw - mean[j]) / std[j] in fp32, raw being the
 * pixel value (0..255) or the CSV float. Images use one mean/std for every pixel. */
struct tf_preproc {
	int image;      /* 1: uint8 image bytes; 0: float features */
	size_t dim;     /* features per example */
	float *mean;    /* dim values (owned) */
	float *inv_std; /* dim values of 1/std (owned) */
};

/* Preprocesses one example: u8 (images) or f32 (tabular) raw values into out[dim]. */
void tf_preproc_apply(const struct tf_preproc *p, const unsigned char *u8, const float *f32,
                      float *out);
void tf_preproc_release(struct tf_preproc *p); /* NULL is a no-op */
/* {"kind": "standardize", "input": "uint8"|"float32", "mean": [...], "std": [...]} */
json_t *tf_preproc_to_json(const struct tf_preproc *p);
int tf_preproc_from_json(const json_t *j, size_t dim, struct tf_preproc *out);

/* One split of an opened dataset. */
struct tf_dataset_split {
	size_t examples;  /* total records */
	size_t nshards;   /* shard files */
	char **keys;      /* full object keys of the shards (owned) */
	size_t *counts;   /* records per shard */
	uint64_t *bytes;  /* size of each shard */
	uint32_t *crc32c; /* CRC-32C of each whole shard file */
};

/* An opened dataset (manifest parsed). */
struct tf_dataset {
	char *manifest_key;    /* object key of the manifest (owned) */
	char *source;          /* "fashion-mnist" or "csv" */
	size_t dim;            /* input features */
	int rows, cols;        /* image shape, 0 for tabular */
	int num_classes;       /* label classes */
	char **class_names;    /* num_classes names (owned) */
	struct tf_preproc pre; /* the model's input preprocessing */
	struct tf_dataset_split split[TF_SPLIT_LAST];
	json_t *manifest; /* the parsed manifest (owned reference) */
};

/* The raw data data prep reads, NULL-terminated: fashion-mnist (the default), csv. */
extern const char *const tf_dataset_sources[];

/* Options for data prep. */
struct tf_prep_opts {
	const char *source;    /* "fashion-mnist" (default) or "csv" */
	const char *path;      /* dataset directory (fashion) or CSV file */
	const char *csv_label; /* label column of the CSV (default "label") */
	int shards;            /* train shards (default 8); test gets max(1, shards/4) */
	double test_fraction;  /* CSV: fraction held out for test (default 0.2) */
	uint64_t seed;         /* CSV: split shuffle seed */
	size_t limit_train;    /* keep only the first N train examples (0: all) */
	size_t limit_test;     /* keep only the first N test examples (0: all) */
	volatile int *cancel;  /* nonzero: stop soon with -ECANCELED (may be NULL) */
};

/* Reads the source, writes shards then the manifest under prefix (a key prefix, "" or ending
 * in '/'). *manifest_key (caller frees) names the manifest. Errors: -ENOENT missing source,
 * -EBADMSG bad data, -ECANCELED when o->cancel was raised, or an object-store code (see
 * objstore.h); err says what to do. */
int tf_dataset_prep(struct tf_objstore *s, const char *prefix, const struct tf_prep_opts *o,
                    char **manifest_key, json_t **manifest, char *err, size_t errlen);

/* Opens a dataset by its manifest key. Caller frees with tf_dataset_free. */
int tf_dataset_open(struct tf_objstore *s, const char *manifest_key, struct tf_dataset **out,
                    char *err, size_t errlen);
void tf_dataset_free(struct tf_dataset *d);

/* Checks that every shard of split sp exists with the size the manifest gives, so counts
 * derived from the manifest are bounded by real data before anything is sized by them.
 * -EBADMSG with err naming the shard when a size differs, or an object-store code. */
int tf_dataset_check_shards(struct tf_objstore *s, const struct tf_dataset *d, enum tf_split sp,
                            char *err, size_t errlen);

/* Loads one shard: fetches it, checks its CRC-32C against the manifest and indexes its
 * records (each CRC-checked). On success *data and *spans are the caller's to free. */
int tf_dataset_load_shard(struct tf_objstore *s, const struct tf_dataset *d, enum tf_split sp,
                          size_t shard, void **data, struct tf_tfrecord_span **spans, char *err,
                          size_t errlen);

/* Decodes one Example record into raw features (u8 for images, f32 for tabular; exactly one
 * non-NULL, dim values) and its label. -EBADMSG with err naming the record when malformed. */
int tf_dataset_decode(const struct tf_dataset *d, const void *rec, size_t len, unsigned char *u8,
                      float *f32, int32_t *label, char *err, size_t errlen);

#endif

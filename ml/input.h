/* input.h — a tf.data-style input pipeline over a prepared dataset:
 *
 *   shards --(reader threads, interleave cycle)--> records --(seeded shuffle buffer)-->
 *   --(decode + preprocess on worker threads)--> global batches --(prefetch ring)--> trainer
 *
 * Determinism: the order of every epoch is computed first, over element ids, from the seed
 * and the epoch number alone (shard permutation, round-robin interleave of `cycle` shards,
 * shuffle buffer). Threads only fill in the data, so batches are identical for a seed whatever
 * the thread timing, prefetch depth or cache setting, and a run can restart at any batch
 * (start_batch) and see exactly what it would have seen.
 *
 * Threads: readers fetch and verify whole shards (one object-store handle each); workers
 * build batches ahead of the consumer into a ring of `prefetch` slots. With prefetch 0 the
 * consumer builds each batch itself when it asks for it. */
#ifndef TF_ML_INPUT_H
#define TF_ML_INPUT_H

#include "ml/dataset.h"

#include <stddef.h>
#include <stdint.h>

struct tf_input_opts {
	enum tf_split split;   /* which split to read */
	size_t batch;          /* global batch size */
	uint64_t seed;         /* order seed */
	int shuffle;           /* 1: shuffle shards and elements; 0: file order */
	size_t shuffle_buffer; /* shuffle buffer (0: 10,000); elements draw from it */
	int cycle;             /* shards read in an interleave cycle (0: 4) */
	int readers;           /* reader threads (0: 2) */
	int workers;           /* decode threads building batches (0: 2) */
	int prefetch;          /* batches prepared ahead (0: built on demand) */
	int cache;             /* keep decoded examples in memory after their first read */
	int drop_remainder;    /* 1: only full batches (training) */
	uint64_t epochs;       /* stop after this many epochs (0: endless) */
	uint64_t start_batch;  /* first batch to deliver (resume position) */
};

/* One batch, valid until the next tf_input_next or tf_input_free. */
struct tf_batch {
	size_t n;         /* examples (== batch except a final partial one) */
	size_t dim;       /* features per example */
	const float *x;   /* n x dim preprocessed inputs, row-major */
	const int32_t *y; /* n labels */
	uint64_t index;   /* global batch number since epoch 0 */
	uint64_t epoch;   /* epoch it belongs to */
	size_t step;      /* batch number within the epoch */
};

struct tf_input;

/* Opens a pipeline on dataset d (borrowed; must outlive the pipeline). Store handles for the
 * readers are opened from s's URL. Threads start at once. */
int tf_input_open(struct tf_objstore *s, const struct tf_dataset *d, const struct tf_input_opts *o,
                  struct tf_input **out, char *err, size_t errlen);

/* Batches per epoch under the options. */
uint64_t tf_input_steps_per_epoch(const struct tf_input *in);

/* Delivers the next batch: 0, 1 at the end (epochs done), or a negative code with err set
 * (a corrupt shard names the file and record). */
int tf_input_next(struct tf_input *in, struct tf_batch *b, char *err, size_t errlen);

/* Seconds the consumer spent waiting inside tf_input_next since open. */
double tf_input_wait_seconds(const struct tf_input *in);

/* Stops the threads and frees everything. NULL is a no-op. */
void tf_input_free(struct tf_input *in);

/* Rows [lo, hi) of a batch of n that replica r of R gets: contiguous, sizes differing by at
 * most one (earlier replicas take the extra rows), in replica order — tf_slice_shard's rule,
 * which the training loop uses. */
void tf_input_replica_rows(size_t n, int replicas, int r, size_t *lo, size_t *hi);

/* Decodes a whole split in file order into x (n*dim, preprocessed) and y (caller frees):
 * what evaluation uses. raw (may be NULL) also receives the raw image bytes (n*dim) for
 * image datasets, NULL for tabular ones. A raised *cancel (may be NULL: none) stops it
 * within a shard's 1024 records: -ECANCELED. */
int tf_input_load_split(struct tf_objstore *s, const struct tf_dataset *d, enum tf_split sp,
                        float **x, int32_t **y, unsigned char **raw, size_t *n,
                        volatile int *cancel, char *err, size_t errlen);

#endif

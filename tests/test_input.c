/* test_input.c — the input pipeline: data prep into a file:// store, determinism for a seed
 * (whatever prefetch, threads and cache), shuffling, resume at a batch, replica split, and a
 * corrupt shard reported by name. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "ml/dataset.h"
#include "ml/input.h"
#include "storage/objstore.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct fixture {
	struct tf_objstore *s;
	struct tf_dataset *d;
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof *f);
	char err[512];
	char *key = NULL;
	if (tf_objstore_open("file://store", &f->s, err, sizeof err))
		return -1;
	struct tf_prep_opts o = {
	    .source = "fashion-mnist", .shards = 5, .limit_train = 1000, .limit_test = 300};
	int rc = tf_dataset_prep(f->s, "ds/", &o, &key, NULL, err, sizeof err);
	if (rc) {
		fprintf(stderr, "prep: %s\n", err);
		return -1;
	}
	if (tf_dataset_open(f->s, key, &f->d, err, sizeof err))
		return -1;
	free(key);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	tf_dataset_free(f->d);
	tf_objstore_free(f->s);
	free(f);
	return 0;
}

/* Reads `batches` batches and returns a hash of their labels and inputs in order. */
static uint64_t run(struct fixture *f, struct tf_input_opts o, int batches, int32_t *first_y)
{
	struct tf_input *in;
	char err[512];
	assert_int_equal(tf_input_open(f->s, f->d, &o, &in, err, sizeof err), 0);
	uint64_t h = 1469598103934665603ull;
	for (int i = 0; i < batches; i++) {
		struct tf_batch b;
		int rc = tf_input_next(in, &b, err, sizeof err);
		if (rc)
			fprintf(stderr, "next: %s\n", err);
		assert_int_equal(rc, 0);
		assert_int_equal(b.index, o.start_batch + (uint64_t)i);
		if (i == 0 && first_y)
			memcpy(first_y, b.y, b.n * sizeof *b.y);
		const unsigned char *p = (const unsigned char *)b.x;
		for (size_t j = 0; j < b.n * b.dim * sizeof(float); j++)
			h = (h ^ p[j]) * 1099511628211ull;
		for (size_t j = 0; j < b.n; j++)
			h = (h ^ (uint64_t)b.y[j]) * 1099511628211ull;
	}
	tf_input_free(in);
	return h;
}

static void test_input_manifest_counts(void **state)
{
	struct fixture *f = *state;
	assert_int_equal(f->d->split[TF_SPLIT_TRAIN].examples, 1000);
	assert_int_equal(f->d->split[TF_SPLIT_TRAIN].nshards, 5);
	assert_int_equal(f->d->split[TF_SPLIT_TEST].examples, 300);
	assert_int_equal(f->d->dim, 784);
	assert_int_equal(f->d->num_classes, 10);
	assert_string_equal(f->d->class_names[9], "Ankle boot");
}

static void test_input_deterministic_across_threads_prefetch_cache(void **state)
{
	struct fixture *f = *state;
	struct tf_input_opts o = {.split = TF_SPLIT_TRAIN,
	                          .batch = 64,
	                          .seed = 42,
	                          .shuffle = 1,
	                          .shuffle_buffer = 300,
	                          .drop_remainder = 1};
	/* 15 batches per epoch: 40 batches cross two epoch boundaries */
	uint64_t h0 = run(f, o, 40, NULL);
	o.prefetch = 4;
	o.workers = 3;
	o.readers = 3;
	assert_true(run(f, o, 40, NULL) == h0);
	o.cache = 1;
	assert_true(run(f, o, 40, NULL) == h0);
	o.prefetch = 0;
	assert_true(run(f, o, 40, NULL) == h0);
	o.seed = 43;
	assert_true(run(f, o, 40, NULL) != h0);
}

static void test_input_shuffle_changes_order_per_epoch(void **state)
{
	struct fixture *f = *state;
	struct tf_input_opts o = {.split = TF_SPLIT_TRAIN,
	                          .batch = 1000,
	                          .seed = 1,
	                          .shuffle = 1,
	                          .drop_remainder = 1,
	                          .prefetch = 2};
	struct tf_input *in;
	char err[512];
	assert_int_equal(tf_input_open(f->s, f->d, &o, &in, err, sizeof err), 0);
	int32_t e0[1000], e1[1000];
	struct tf_batch b;
	assert_int_equal(tf_input_next(in, &b, err, sizeof err), 0);
	memcpy(e0, b.y, sizeof e0);
	assert_int_equal(tf_input_next(in, &b, err, sizeof err), 0);
	memcpy(e1, b.y, sizeof e1);
	assert_int_equal(b.epoch, 1);
	tf_input_free(in);
	/* every epoch is a permutation: same label histogram, different order */
	int h0[10] = {0}, h1[10] = {0}, same = 0;
	for (int i = 0; i < 1000; i++) {
		h0[e0[i]]++;
		h1[e1[i]]++;
		same += e0[i] == e1[i];
	}
	assert_memory_equal(h0, h1, sizeof h0);
	assert_true(same < 300); /* ~10% expected by chance */

	/* unshuffled: file order, the labels as stored */
	o.shuffle = 0;
	int32_t plain[1000];
	run(f, o, 1, plain);
	float *x;
	int32_t *y;
	size_t n;
	assert_int_equal(
	    tf_input_load_split(f->s, f->d, TF_SPLIT_TRAIN, &x, &y, NULL, &n, NULL, err, sizeof err), 0);
	assert_int_equal(n, 1000);
	/* cycle 4 interleave of 5 shards of 200: first element from shard 0, then shard 1 */
	assert_int_equal(plain[0], y[0]);
	assert_int_equal(plain[1], y[200]);
	free(x);
	free(y);
	/* a raised cancel flag (an evaluate or train step's timeout) stops the load */
	volatile int cancel = 1;
	x = NULL;
	assert_int_equal(tf_input_load_split(f->s, f->d, TF_SPLIT_TRAIN, &x, &y, NULL, &n, &cancel,
	                                     err, sizeof err),
	                 -ECANCELED);
	assert_null(x);
	assert_non_null(strstr(err, "cancelled"));
}

static void test_input_resume_at_batch(void **state)
{
	struct fixture *f = *state;
	struct tf_input_opts o = {.split = TF_SPLIT_TRAIN,
	                          .batch = 100,
	                          .seed = 9,
	                          .shuffle = 1,
	                          .shuffle_buffer = 500,
	                          .drop_remainder = 1,
	                          .prefetch = 3};
	struct tf_input *in;
	char err[512];
	assert_int_equal(tf_input_open(f->s, f->d, &o, &in, err, sizeof err), 0);
	struct tf_batch b;
	int32_t want[100];
	for (int i = 0; i < 17; i++)
		assert_int_equal(tf_input_next(in, &b, err, sizeof err), 0);
	memcpy(want, b.y, sizeof want);
	tf_input_free(in);
	o.start_batch = 16;
	int32_t got[100];
	run(f, o, 1, got);
	assert_memory_equal(got, want, sizeof want);
}

static void test_input_epochs_end_and_replica_split(void **state)
{
	struct fixture *f = *state;
	struct tf_input_opts o = {.split = TF_SPLIT_TEST, .batch = 128, .epochs = 1, .prefetch = 2};
	struct tf_input *in;
	char err[512];
	assert_int_equal(tf_input_open(f->s, f->d, &o, &in, err, sizeof err), 0);
	assert_int_equal(tf_input_steps_per_epoch(in), 3);
	struct tf_batch b;
	size_t total = 0;
	int rc;
	while ((rc = tf_input_next(in, &b, err, sizeof err)) == 0)
		total += b.n;
	assert_int_equal(rc, 1);
	assert_int_equal(total, 300);
	assert_true(tf_input_wait_seconds(in) >= 0);
	tf_input_free(in);

	size_t lo, hi, covered = 0;
	for (int r = 0; r < 8; r++) {
		tf_input_replica_rows(44, 8, r, &lo, &hi);
		assert_int_equal(lo, covered);
		assert_true(hi - lo == 5 || hi - lo == 6);
		covered = hi;
	}
	assert_int_equal(covered, 44);
}

static void test_input_corrupt_shard_is_named(void **state)
{
	struct fixture *f = *state;
	/* flip a byte inside shard 2 of the train split */
	const char *key = f->d->split[TF_SPLIT_TRAIN].keys[2];
	void *data;
	size_t len;
	assert_int_equal(tf_objstore_get(f->s, key, &data, &len), 0);
	((unsigned char *)data)[len / 2] ^= 0x10;
	assert_int_equal(tf_objstore_put(f->s, key, data, len, 0), 0);
	struct tf_input_opts o = {.split = TF_SPLIT_TRAIN,
	                          .batch = 100,
	                          .seed = 3,
	                          .shuffle = 1,
	                          .drop_remainder = 1,
	                          .prefetch = 2};
	struct tf_input *in;
	char err[1024];
	assert_int_equal(tf_input_open(f->s, f->d, &o, &in, err, sizeof err), 0);
	struct tf_batch b;
	int rc = 0;
	for (int i = 0; i < 10 && rc == 0; i++)
		rc = tf_input_next(in, &b, err, sizeof err);
	assert_int_equal(rc, -EBADMSG);
	assert_non_null(strstr(err, "train-00002-of-00005.tfrecord"));
	tf_input_free(in);
	((unsigned char *)data)[len / 2] ^= 0x10;
	assert_int_equal(tf_objstore_put(f->s, key, data, len, 0), 0);
	free(data);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_input_manifest_counts),
	    cmocka_unit_test(test_input_deterministic_across_threads_prefetch_cache),
	    cmocka_unit_test(test_input_shuffle_changes_order_per_epoch),
	    cmocka_unit_test(test_input_resume_at_batch),
	    cmocka_unit_test(test_input_epochs_end_and_replica_split),
	    cmocka_unit_test(test_input_corrupt_shard_is_named),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}

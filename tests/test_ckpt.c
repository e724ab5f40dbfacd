/* test_ckpt.c — the checkpoint manager on file://: save/load round trips, latest, list,
 * write-once steps, corruption detection, retention with pinned steps, orphan GC. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "common/common.h"
#include "storage/ckpt.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int fresh_store(void **state)
{
	static int n;
	char dir[64], err[256];
	snprintf(dir, sizeof dir, "store%d", n++);
	struct tf_objstore *s = NULL;
	if (tf_objstore_open(dir, &s, err, sizeof err))
		return -1;
	*state = s;
	return 0;
}

static int close_store(void **state)
{
	tf_objstore_free(*state);
	return 0;
}

static float w1[1000];
static double w2[77];

static int save_step(struct tf_objstore *s, const char *prefix, int64_t step)
{
	for (size_t i = 0; i < TF_ARRAY_LEN(w1); i++)
		w1[i] = (float)i * 0.5f + (float)step;
	for (size_t i = 0; i < TF_ARRAY_LEN(w2); i++)
		w2[i] = (double)i - (double)step;
	struct tf_ckpt_tensor t[] = {
	    {"layer0/w", w1, sizeof w1},
	    {"layer0/b", w2, sizeof w2},
	    {"empty", NULL, 0},
	};
	char meta[128];
	snprintf(meta, sizeof meta, "{\"step\": %lld, \"rng\": [1, 2], \"input_pos\": 42}",
	         (long long)step);
	return tf_ckpt_save(s, prefix, step, t, TF_ARRAY_LEN(t), meta);
}

static void test_ckpt_save_load_round_trip(void **state)
{
	struct tf_objstore *s = *state;
	assert_int_equal(save_step(s, "run/ckpt", 10), 0);
	struct tf_ckpt *c = NULL;
	assert_int_equal(tf_ckpt_load(s, "run/ckpt/", 10, &c), 0);
	assert_int_equal(tf_ckpt_step(c), 10);
	assert_int_equal(tf_ckpt_count(c), 3);
	size_t bytes = 0;
	const float *w = tf_ckpt_tensor(c, "layer0/w", &bytes);
	assert_non_null(w);
	assert_int_equal(bytes, sizeof w1);
	assert_memory_equal(w, w1, sizeof w1);
	const double *b = tf_ckpt_tensor(c, "layer0/b", &bytes);
	assert_int_equal(bytes, sizeof w2);
	assert_memory_equal(b, w2, sizeof w2);
	tf_ckpt_tensor(c, "empty", &bytes);
	assert_int_equal(bytes, 0);
	assert_null(tf_ckpt_tensor(c, "nope", NULL));
	const void *d;
	assert_string_equal(tf_ckpt_tensor_at(c, 1, &d, &bytes), "layer0/b");
	assert_null(tf_ckpt_tensor_at(c, 3, &d, &bytes));
	assert_string_equal(tf_ckpt_meta(c), "{\"step\":10,\"rng\":[1,2],\"input_pos\":42}");
	tf_ckpt_free(c);
	tf_ckpt_free(NULL);

	char *json = NULL;
	assert_int_equal(tf_ckpt_manifest(s, "run/ckpt", 10, &json), 0);
	assert_non_null(strstr(json, "\"format\":\"" TF_CKPT_FORMAT "\""));
	assert_non_null(strstr(json, "\"crc32c\":"));
	free(json);
}

static void test_ckpt_latest_and_list(void **state)
{
	struct tf_objstore *s = *state;
	int64_t step = -1;
	assert_int_equal(tf_ckpt_latest(s, "p", &step), -ENOENT);
	assert_int_equal(step, -1);
	assert_non_null(strstr(tf_objstore_errmsg(s), "no complete checkpoint"));
	assert_int_equal(save_step(s, "p", 9), 0);
	assert_int_equal(save_step(s, "p", 100), 0);
	assert_int_equal(save_step(s, "p", 20), 0);
	assert_int_equal(save_step(s, "other", 500), 0);
	/* a save that never wrote its manifest does not count */
	assert_int_equal(tf_objstore_put(s, "p/step-000000000200/deadbeef.t0000", "x", 1, 0), 0);
	assert_int_equal(tf_ckpt_latest(s, "p", &step), 0);
	assert_int_equal(step, 100);

	struct tf_ckpt_info *v = NULL;
	size_t n = 0;
	assert_int_equal(tf_ckpt_list(s, "p/", &v, &n), 0);
	assert_int_equal(n, 3);
	assert_int_equal(v[0].step, 9);
	assert_int_equal(v[1].step, 20);
	assert_int_equal(v[2].step, 100);
	assert_int_equal(v[2].tensors, 3);
	assert_int_equal(v[2].bytes, sizeof w1 + sizeof w2);
	assert_true(v[2].created > 1e9);
	free(v);

	struct tf_ckpt *c = NULL;
	assert_int_equal(tf_ckpt_load(s, "p", 200, &c), -ENOENT);
	assert_null(c);
	assert_non_null(strstr(tf_objstore_errmsg(s), "step 200"));
}

static void test_ckpt_step_is_write_once(void **state)
{
	struct tf_objstore *s = *state;
	assert_int_equal(save_step(s, "p", 5), 0);
	assert_int_equal(save_step(s, "p", 5), -EEXIST);
	assert_non_null(strstr(tf_objstore_errmsg(s), "already exists"));
	assert_int_equal(tf_ckpt_save(s, "p", -1, NULL, 0, NULL), -EINVAL);
	assert_int_equal(tf_ckpt_save(s, "p", 6, NULL, 0, "{bad json"), -EINVAL);
	assert_non_null(strstr(tf_objstore_errmsg(s), "not valid JSON"));
	struct tf_ckpt_tensor dup[] = {{"a", w1, 4}, {"a", w1, 4}};
	assert_int_equal(tf_ckpt_save(s, "p", 6, dup, 2, NULL), -EINVAL);
	assert_non_null(strstr(tf_objstore_errmsg(s), "'a'"));
	int64_t step;
	assert_int_equal(tf_ckpt_latest(s, "p", &step), 0);
	assert_int_equal(step, 5);
	/* a checkpoint with no tensors and no metadata is still a checkpoint */
	assert_int_equal(tf_ckpt_save(s, "p", 7, NULL, 0, NULL), 0);
	struct tf_ckpt *c;
	assert_int_equal(tf_ckpt_load(s, "p", 7, &c), 0);
	assert_string_equal(tf_ckpt_meta(c), "null");
	tf_ckpt_free(c);
}

/* Finds the shard file of tensor i of step under store dir root. */
static char *shard_path(struct tf_objstore *s, const char *prefix, int64_t step, size_t i)
{
	struct tf_obj_list l = {0};
	char *lp = tf_xasprintf("%s/step-%012lld/", prefix, (long long)step);
	assert_int_equal(tf_objstore_list(s, lp, &l), 0);
	char suffix[16];
	snprintf(suffix, sizeof suffix, ".t%04zu", i);
	char *path = NULL;
	for (size_t j = 0; j < l.n; j++)
		if (strstr(l.v[j].key, suffix))
			path = tf_xasprintf("%s/%s", tf_objstore_url(s) + 7, l.v[j].key);
	tf_obj_list_release(&l);
	free(lp);
	assert_non_null(path);
	return path;
}

static void test_ckpt_load_detects_corruption(void **state)
{
	struct tf_objstore *s = *state;
	assert_int_equal(save_step(s, "p", 1), 0);
	char *path = shard_path(s, "p", 1, 0);
	FILE *f = fopen(path, "r+b");
	assert_non_null(f);
	fseek(f, 100, SEEK_SET);
	fputc(0x5a, f);
	fclose(f);
	struct tf_ckpt *c = NULL;
	assert_int_equal(tf_ckpt_load(s, "p", 1, &c), -EBADMSG);
	assert_non_null(strstr(tf_objstore_errmsg(s), "fails its check"));

	/* truncated shard */
	assert_int_equal(truncate(path, 10), 0);
	assert_int_equal(tf_ckpt_load(s, "p", 1, &c), -EBADMSG);
	/* missing shard */
	unlink(path);
	assert_int_equal(tf_ckpt_load(s, "p", 1, &c), -EBADMSG);
	assert_non_null(strstr(tf_objstore_errmsg(s), "missing"));
	free(path);

	/* a damaged manifest */
	assert_int_equal(
	    tf_objstore_put(s, "q/step-000000000003/manifest.json", "{\"format\":1}", 12, 0), 0);
	assert_int_equal(tf_ckpt_load(s, "q", 3, &c), -EBADMSG);
	assert_non_null(strstr(tf_objstore_errmsg(s), "manifest"));
}

/* Flips one byte at offset off of the file at path. */
static void flip_byte(const char *path, long off)
{
	FILE *f = fopen(path, "r+b");
	assert_non_null(f);
	assert_int_equal(fseek(f, off, SEEK_SET), 0);
	int c = fgetc(f);
	assert_true(c != EOF);
	assert_int_equal(fseek(f, off, SEEK_SET), 0);
	fputc(c ^ 0x01, f);
	assert_int_equal(fclose(f), 0);
}

struct skipped {
	int64_t steps[8]; /* steps passed over, newest first */
	int n;
};

static void on_skip(void *data, int64_t step, const char *why)
{
	struct skipped *k = data;
	assert_non_null(why);
	if (k->n < 8)
		k->steps[k->n++] = step;
}

static void test_ckpt_load_latest_falls_back_past_damage(void **state)
{
	struct tf_objstore *s = *state;
	struct tf_ckpt *c = NULL;
	struct skipped k = {0};
	assert_int_equal(tf_ckpt_load_latest(s, "p", &c, on_skip, &k), -ENOENT);
	for (int64_t step = 1; step <= 4; step++)
		assert_int_equal(save_step(s, "p", step), 0);
	/* one flipped byte in the newest shard: step 3 is loaded, 4 reported */
	char *path = shard_path(s, "p", 4, 1);
	flip_byte(path, 17);
	free(path);
	assert_int_equal(tf_ckpt_load_latest(s, "p", &c, on_skip, &k), 0);
	assert_int_equal(tf_ckpt_step(c), 3);
	tf_ckpt_free(c);
	assert_int_equal(k.n, 1);
	assert_int_equal(k.steps[0], 4);
	/* one flipped byte in step 3's manifest, inside the metadata (still valid JSON, the
	 * shards intact): its own checksum catches it */
	char *mpath = tf_xasprintf("%s/p/step-000000000003/manifest.json", tf_objstore_url(s) + 7);
	char *text;
	size_t len;
	assert_int_equal(tf_read_file(mpath, 1 << 20, &text, &len), 0);
	const char *at = strstr(text, "\"input_pos\": 42");
	assert_non_null(at);
	flip_byte(mpath, (long)(at - text) + 14); /* 42 -> 43 */
	free(text);
	k.n = 0;
	assert_int_equal(tf_ckpt_load(s, "p", 3, &c), -EBADMSG);
	assert_non_null(strstr(tf_objstore_errmsg(s), "own CRC-32C"));
	assert_int_equal(tf_ckpt_load_latest(s, "p", &c, on_skip, &k), 0);
	assert_int_equal(tf_ckpt_step(c), 2);
	assert_non_null(strstr(tf_ckpt_meta(c), "\"input_pos\":42"));
	tf_ckpt_free(c);
	assert_int_equal(k.n, 2);
	assert_int_equal(k.steps[1], 3);
	/* when none verifies: -EBADMSG naming the newest one's problem */
	flip_byte(mpath, 0);
	for (int64_t step = 1; step <= 2; step++) {
		path = shard_path(s, "p", step, 0);
		flip_byte(path, 0);
		free(path);
	}
	c = NULL;
	assert_int_equal(tf_ckpt_load_latest(s, "p", &c, NULL, NULL), -EBADMSG);
	assert_null(c);
	assert_non_null(strstr(tf_objstore_errmsg(s), "no checkpoint"));
	assert_non_null(strstr(tf_objstore_errmsg(s), "4 tried"));
	free(mpath);
}

static void test_ckpt_gc_keeps_last_and_pinned(void **state)
{
	struct tf_objstore *s = *state;
	for (int64_t st = 1; st <= 6; st++)
		assert_int_equal(save_step(s, "p", st * 10), 0);
	int64_t pinned[] = {20};
	struct tf_ckpt_gc_opts o = {.keep_last = 2, .pinned = pinned, .npinned = 1};
	struct tf_ckpt_gc_result r;
	o.dry_run = 1;
	assert_int_equal(tf_ckpt_gc(s, "p", &o, &r), 0);
	assert_int_equal(r.ckpts_deleted, 3);
	struct tf_ckpt_info *v;
	size_t n;
	assert_int_equal(tf_ckpt_list(s, "p", &v, &n), 0);
	assert_int_equal(n, 6); /* dry run deleted nothing */
	free(v);

	o.dry_run = 0;
	assert_int_equal(tf_ckpt_gc(s, "p", &o, &r), 0);
	assert_int_equal(r.ckpts_deleted, 3);
	assert_int_equal(r.orphans_deleted, 0);
	assert_int_equal(r.bytes_freed, 3 * (sizeof w1 + sizeof w2));
	assert_int_equal(tf_ckpt_list(s, "p", &v, &n), 0);
	assert_int_equal(n, 3);
	assert_int_equal(v[0].step, 20);
	assert_int_equal(v[1].step, 50);
	assert_int_equal(v[2].step, 60);
	free(v);
	/* nothing of the retired steps is left (the file store prunes their directories) */
	struct tf_obj_list l = {0};
	assert_int_equal(tf_objstore_list(s, "p/step-000000000010", &l), 0);
	assert_int_equal(l.n, 0);
	assert_int_equal(tf_objstore_list(s, "p/", &l), 0);
	assert_int_equal(l.n, 3 * 4);
	tf_obj_list_release(&l);
	/* every kept checkpoint still loads */
	struct tf_ckpt *c;
	assert_int_equal(tf_ckpt_load(s, "p", 20, &c), 0);
	tf_ckpt_free(c);
	/* a second pass has nothing to do */
	assert_int_equal(tf_ckpt_gc(s, "p", &o, &r), 0);
	assert_int_equal(r.ckpts_deleted + r.orphans_deleted, 0);
}

static void test_ckpt_gc_removes_orphans_after_grace(void **state)
{
	struct tf_objstore *s = *state;
	assert_int_equal(save_step(s, "p", 1), 0);
	/* an abandoned save (no manifest) and a stray shard next to a complete checkpoint */
	assert_int_equal(tf_objstore_put(s, "p/step-000000000002/0badc0de.t0000", "xy", 2, 0), 0);
	assert_int_equal(tf_objstore_put(s, "p/step-000000000001/0badc0de.t0000", "xyz", 3, 0), 0);
	assert_int_equal(tf_objstore_put(s, "p/notes.txt", "keep", 4, 0), 0);
	struct tf_ckpt_gc_opts o = {.grace = 3600};
	struct tf_ckpt_gc_result r;
	assert_int_equal(tf_ckpt_gc(s, "p", &o, &r), 0);
	assert_int_equal(r.orphans_deleted, 0); /* too young: a save may be writing them */
	o.grace = 0;
	assert_int_equal(tf_ckpt_gc(s, "p", &o, &r), 0);
	assert_int_equal(r.orphans_deleted, 2);
	assert_int_equal(r.bytes_freed, 5);
	assert_int_equal(r.ckpts_deleted, 0);
	struct tf_ckpt *c;
	assert_int_equal(tf_ckpt_load(s, "p", 1, &c), 0);
	tf_ckpt_free(c);
	struct tf_obj_info info;
	assert_int_equal(tf_objstore_head(s, "p/notes.txt", &info), 0);
	assert_int_equal(tf_objstore_head(s, "p/step-000000000002/0badc0de.t0000", &info), -ENOENT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_ckpt_save_load_round_trip, fresh_store,
	                                    close_store),
	    cmocka_unit_test_setup_teardown(test_ckpt_latest_and_list, fresh_store, close_store),
	    cmocka_unit_test_setup_teardown(test_ckpt_step_is_write_once, fresh_store, close_store),
	    cmocka_unit_test_setup_teardown(test_ckpt_load_detects_corruption, fresh_store,
	                                    close_store),
	    cmocka_unit_test_setup_teardown(test_ckpt_load_latest_falls_back_past_damage,
	                                    fresh_store, close_store),
	    cmocka_unit_test_setup_teardown(test_ckpt_gc_keeps_last_and_pinned, fresh_store,
	                                    close_store),
	    cmocka_unit_test_setup_teardown(test_ckpt_gc_removes_orphans_after_grace, fresh_store,
	                                    close_store),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

/* test_s3_live.c — the s3:// backend and the checkpoint manager against a real S3 server
 * (Swift + s3api, started by tests/it_s3.sh). Skips with a message when TF_S3_TEST_ENDPOINT
 * is unset, so plain unit runs pass without a server.
 *   TF_S3_TEST_ENDPOINT  the server (credentials from AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY)
 *   TF_S3_TEST_BUCKET    bucket to create and use (default tf-test-PID-TIME)
 *   TF_S3_FAULT_ENDPOINT a fault-injecting proxy in front of it (tests/s3_fault_proxy.py);
 *                        the fault tests skip without it */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "common/common.h"
#include "common/crc32c.h"
#include "storage/ckpt.h"
#include "storage/objstore.h"
#include "storage/objstore_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char bucket[64];

static struct tf_objstore *open_s3(const char *endpoint, const char *prefix,
                                   const struct tf_objstore_opts *extra)
{
	struct tf_objstore_opts o;
	memset(&o, 0, sizeof o);
	if (extra)
		o = *extra;
	o.endpoint = endpoint;
	o.retry_base = o.retry_base > 0 ? o.retry_base : 0.02;
	o.retry_cap = o.retry_cap > 0 ? o.retry_cap : 0.5;
	char *url = tf_xasprintf("s3://%s/%s", bucket, prefix);
	struct tf_objstore *s = NULL;
	char err[512];
	int rc = tf_objstore_open_opts(url, &o, &s, err, sizeof err);
	if (rc)
		fail_msg("open %s: %s", url, err);
	free(url);
	return s;
}

static const char *endpoint(void)
{
	return getenv("TF_S3_TEST_ENDPOINT");
}

static int have_server(void)
{
	if (endpoint() && *endpoint())
		return 1;
	return 0;
}

static unsigned char *pattern(size_t n, unsigned seed)
{
	unsigned char *b = tf_xmalloc(n);
	uint32_t x = seed * 2654435761u + 1;
	for (size_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		b[i] = (unsigned char)x;
	}
	return b;
}

static void test_s3_live_round_trip(void **state)
{
	(void)state;
	struct tf_objstore *s = open_s3(endpoint(), "rt", NULL);
	char *want = tf_xasprintf("s3://%s/rt", bucket);
	assert_string_equal(tf_objstore_url(s), want);
	free(want);
	const char *keys[] = {"a.txt", "dir/with space/ünï.bin", "x+y=z&q?.dat"};
	for (size_t i = 0; i < TF_ARRAY_LEN(keys); i++) {
		size_t n = 1000 + i * 777;
		unsigned char *b = pattern(n, (unsigned)i);
		if (tf_objstore_put(s, keys[i], b, n, 0))
			fail_msg("put %s: %s", keys[i], tf_objstore_errmsg(s));
		void *d;
		size_t len;
		if (tf_objstore_get(s, keys[i], &d, &len))
			fail_msg("get %s: %s", keys[i], tf_objstore_errmsg(s));
		assert_int_equal(len, n);
		assert_memory_equal(d, b, n);
		free(d);
		struct tf_obj_info info;
		assert_int_equal(tf_objstore_head(s, keys[i], &info), 0);
		assert_int_equal(info.size, n);
		assert_true(info.has_crc32c);
		assert_int_equal(info.crc32c, tf_crc32c(b, n));
		assert_true(info.mtime > 1e9);
		free(b);
	}
	assert_int_equal(tf_objstore_put(s, "empty", NULL, 0, 0), 0);
	void *d;
	size_t len = 99;
	assert_int_equal(tf_objstore_get(s, "empty", &d, &len), 0);
	assert_int_equal(len, 0);
	free(d);
	assert_int_equal(tf_objstore_get(s, "missing", &d, &len), -ENOENT);
	assert_non_null(strstr(tf_objstore_errmsg(s), "'missing'"));
	assert_int_equal(tf_objstore_delete(s, "a.txt"), 0);
	assert_int_equal(tf_objstore_get(s, "a.txt", &d, &len), -ENOENT);
	assert_int_equal(tf_objstore_delete(s, "a.txt"), 0); /* S3: absent is fine */

	/* write-once: the server refuses If-None-Match (Swift) or honours it; either way */
	assert_int_equal(tf_objstore_put(s, "once", "1", 1, TF_OBJ_IF_NONE_MATCH), 0);
	assert_int_equal(tf_objstore_put(s, "once", "2", 1, TF_OBJ_IF_NONE_MATCH), -EEXIST);
	assert_int_equal(tf_objstore_get(s, "once", &d, &len), 0);
	assert_memory_equal(d, "1", 1);
	free(d);
	tf_objstore_free(s);
}

static void test_s3_live_multipart_12mib(void **state)
{
	(void)state;
	struct tf_objstore_opts o = {.part_size = 5u << 20, .multipart_threshold = 5u << 20};
	struct tf_objstore *s = open_s3(endpoint(), "mp", &o);
	size_t n = 12u << 20;
	unsigned char *b = pattern(n, 12);
	assert_int_equal(tf_objstore_put(s, "big.bin", b, n, 0), 0);
	struct tf_obj_info info;
	assert_int_equal(tf_objstore_head(s, "big.bin", &info), 0);
	assert_int_equal(info.size, n);
	assert_non_null(strchr(info.etag, '-')); /* a multipart ETag: md5-of-md5s-N */
	assert_true(info.has_crc32c);
	void *d;
	size_t len;
	assert_int_equal(tf_objstore_get(s, "big.bin", &d, &len), 0);
	assert_int_equal(len, n);
	assert_memory_equal(d, b, n);
	free(d);

	/* streaming from and to files, 3 parts (5 + 5 + 2 MiB) uploaded in parallel */
	FILE *f = fopen("up.bin", "wb");
	assert_int_equal(fwrite(b, 1, n, f), n);
	fclose(f);
	assert_int_equal(tf_objstore_put_file(s, "big-file.bin", "up.bin", 0), 0);
	assert_int_equal(tf_objstore_get_file(s, "big-file.bin", "down.bin"), 0);
	char *back;
	assert_int_equal(tf_read_file("down.bin", n + 1, &back, &len), 0);
	assert_int_equal(len, n);
	assert_memory_equal(back, b, n);
	free(back);
	/* a multipart write-once on an existing key is refused before any part is sent */
	assert_int_equal(tf_objstore_put(s, "big.bin", b, n, TF_OBJ_IF_NONE_MATCH), -EEXIST);
	free(b);
	struct tf_obj_stats st;
	tf_objstore_stats(s, &st);
	assert_true(st.bytes_up >= 2 * n);
	tf_objstore_free(s);
}

/* Above the threshold, an object that the default part size (at least 32 MiB) leaves in one
 * part goes as a single PUT: one request, a plain-MD5 ETag. */
static void test_s3_live_one_part_goes_as_one_put(void **state)
{
	(void)state;
	struct tf_objstore_opts o = {.multipart_threshold = 5u << 20};
	struct tf_objstore *s = open_s3(endpoint(), "onepart", &o);
	size_t n = 12u << 20;
	unsigned char *b = pattern(n, 5);
	struct tf_obj_stats before, after;
	tf_objstore_stats(s, &before);
	assert_int_equal(tf_objstore_put(s, "one.bin", b, n, 0), 0);
	tf_objstore_stats(s, &after);
	assert_int_equal(after.requests - before.requests, 1);
	struct tf_obj_info info;
	assert_int_equal(tf_objstore_head(s, "one.bin", &info), 0);
	assert_int_equal(info.size, n);
	assert_null(strchr(info.etag, '-'));
	assert_int_equal(info.crc32c, tf_crc32c(b, n));
	free(b);
	tf_objstore_free(s);
}

/* Files go up streamed (no copy in memory), as one PUT below the threshold and as parts above
 * it, with the signed SHA-256 alone and with Content-MD5 too (TPUFLOW_S3_CONTENT_MD5=1, which
 * also checks every ETag against the MD5 sent); they come back identical. */
static void test_s3_live_streams_files_with_and_without_content_md5(void **state)
{
	(void)state;
	size_t small = (1u << 20) + 17, big = (11u << 20) + 5;
	unsigned char *b = pattern(big, 31);
	FILE *f = fopen("small.bin", "wb");
	assert_int_equal(fwrite(b, 1, small, f), small);
	fclose(f);
	f = fopen("big.bin", "wb");
	assert_int_equal(fwrite(b, 1, big, f), big);
	fclose(f);
	for (int md5 = 0; md5 < 2; md5++) {
		if (md5)
			setenv("TPUFLOW_S3_CONTENT_MD5", "1", 1);
		struct tf_objstore_opts o = {.part_size = 5u << 20,
		                             .multipart_threshold = 5u << 20};
		struct tf_objstore *s = open_s3(endpoint(), md5 ? "stream-md5" : "stream", &o);
		const char *files[] = {"small.bin", "big.bin"};
		size_t sizes[] = {small, big};
		for (int i = 0; i < 2; i++) {
			assert_int_equal(tf_objstore_put_file(s, files[i], files[i], 0), 0);
			struct tf_obj_info info;
			assert_int_equal(tf_objstore_head(s, files[i], &info), 0);
			assert_int_equal(info.size, sizes[i]);
			assert_true(info.has_crc32c);
			assert_int_equal(info.crc32c, tf_crc32c(b, sizes[i]));
			assert_int_equal(tf_objstore_get_file(s, files[i], "back.bin"), 0);
			char *back;
			size_t len;
			assert_int_equal(tf_read_file("back.bin", big + 1, &back, &len), 0);
			assert_int_equal(len, sizes[i]);
			assert_memory_equal(back, b, sizes[i]);
			free(back);
		}
		/* a missing file is an error that names it, not an empty object */
		assert_int_equal(tf_objstore_put_file(s, "none", "no-such-file", 0), -ENOENT);
		assert_non_null(strstr(tf_objstore_errmsg(s), "no-such-file"));
		tf_objstore_free(s);
		unsetenv("TPUFLOW_S3_CONTENT_MD5");
	}
	free(b);
}

static void test_s3_live_list_prefixes_and_pages(void **state)
{
	(void)state;
	struct tf_objstore_opts o = {.list_page = 2};
	struct tf_objstore *s = open_s3(endpoint(), "ls", &o);
	const char *keys[] = {"a/1", "a/2", "a/3", "a/sub/4", "ab", "b/5", "a/&<odd>"};
	for (size_t i = 0; i < TF_ARRAY_LEN(keys); i++)
		assert_int_equal(tf_objstore_put(s, keys[i], keys[i], strlen(keys[i]), 0), 0);
	struct tf_obj_list l = {0};
	assert_int_equal(tf_objstore_list(s, "a/", &l), 0); /* 5 keys over 3 pages */
	assert_int_equal(l.n, 5);
	assert_string_equal(l.v[0].key, "a/&<odd>");
	assert_string_equal(l.v[1].key, "a/1");
	assert_string_equal(l.v[4].key, "a/sub/4");
	assert_int_equal(l.v[4].size, 7);
	assert_true(l.v[4].mtime > 1e9);
	tf_obj_list_release(&l);
	assert_int_equal(tf_objstore_list(s, "a", &l), 0);
	assert_int_equal(l.n, 6);
	tf_obj_list_release(&l);
	assert_int_equal(tf_objstore_list(s, "", &l), 0);
	assert_int_equal(l.n, 7);
	tf_obj_list_release(&l);
	assert_int_equal(tf_objstore_list(s, "zzz", &l), 0);
	assert_int_equal(l.n, 0);
	tf_objstore_free(s);
}

static void test_s3_live_wrong_secret_is_clear(void **state)
{
	(void)state;
	struct tf_objstore_opts o = {.secret_key = "not-the-secret", .max_attempts = 2};
	struct tf_objstore *s = open_s3(endpoint(), "x", &o);
	void *d;
	size_t len;
	assert_int_equal(tf_objstore_get(s, "anything", &d, &len), -EACCES);
	char *want = tf_xasprintf("the credentials were rejected by %s", endpoint());
	assert_non_null(strstr(tf_objstore_errmsg(s), want));
	assert_non_null(strstr(tf_objstore_errmsg(s), "SignatureDoesNotMatch"));
	free(want);
	assert_int_equal(tf_objstore_put(s, "k", "v", 1, 0), -EACCES);
	struct tf_obj_list l = {0};
	assert_int_equal(tf_objstore_list(s, "", &l), -EACCES);
	assert_int_equal(l.n, 0);
	struct tf_obj_stats st;
	tf_objstore_stats(s, &st);
	assert_int_equal(st.retries, 0); /* a 403 is final: no retries spent */
	tf_objstore_free(s);

	/* a bucket that does not exist is named */
	char saved[64];
	memcpy(saved, bucket, sizeof saved);
	snprintf(bucket, sizeof bucket, "no-such-bucket-%d", (int)getpid());
	s = open_s3(endpoint(), "", NULL);
	assert_int_equal(tf_objstore_put(s, "k", "v", 1, 0), -ENOENT);
	assert_non_null(strstr(tf_objstore_errmsg(s), bucket));
	assert_non_null(strstr(tf_objstore_errmsg(s), "does not exist"));
	tf_objstore_free(s);
	memcpy(bucket, saved, sizeof saved);

	/* nothing listening: a connection error after the retries, quickly */
	struct tf_objstore_opts o2 = {.max_attempts = 2, .connect_timeout = 1};
	s = open_s3("http://127.0.0.1:1", "", &o2);
	double t0 = tf_now_monotonic();
	assert_int_equal(tf_objstore_get(s, "k", &d, &len), -ECONNREFUSED);
	assert_true(tf_now_monotonic() - t0 < 5);
	assert_int_equal(tf_objstore_retryable(-ECONNREFUSED), 1);
	assert_non_null(strstr(tf_objstore_errmsg(s), "failed 2 times"));
	tf_objstore_free(s);
}

static void test_s3_live_virtual_hosted(void **state)
{
	(void)state;
	/* BUCKET.localhost:PORT: the server is configured with storage_domain = localhost */
	const char *port = strrchr(endpoint(), ':');
	char *ep = tf_xasprintf("http://localhost%s", port);
	struct tf_objstore_opts o = {.addressing = 2};
	struct tf_objstore *s = open_s3(ep, "vh", &o);
	assert_int_equal(tf_objstore_put(s, "a/b", "virtual", 7, 0), 0);
	struct tf_obj_list l = {0};
	assert_int_equal(tf_objstore_list(s, "a/", &l), 0);
	assert_int_equal(l.n, 1);
	assert_string_equal(l.v[0].key, "a/b");
	tf_obj_list_release(&l);
	tf_objstore_free(s);
	/* the same object through path-style addressing */
	s = open_s3(endpoint(), "vh", NULL);
	void *d;
	size_t len;
	assert_int_equal(tf_objstore_get(s, "a/b", &d, &len), 0);
	assert_int_equal(len, 7);
	assert_memory_equal(d, "virtual", 7);
	free(d);
	tf_objstore_free(s);
	free(ep);
}

static float w[3000];

static void test_s3_live_checkpoints(void **state)
{
	(void)state;
	struct tf_objstore *s = open_s3(endpoint(), "run1", NULL);
	for (int64_t step = 100; step <= 500; step += 100) {
		for (size_t i = 0; i < TF_ARRAY_LEN(w); i++)
			w[i] = (float)step + (float)i;
		struct tf_ckpt_tensor t[] = {{"w", w, sizeof w}, {"step", &step, sizeof step}};
		assert_int_equal(tf_ckpt_save(s, "ckpt", step, t, 2, "{\"rng\":7}"), 0);
	}
	int64_t latest;
	assert_int_equal(tf_ckpt_latest(s, "ckpt", &latest), 0);
	assert_int_equal(latest, 500);
	struct tf_ckpt *c;
	assert_int_equal(tf_ckpt_load(s, "ckpt", latest, &c), 0);
	size_t bytes;
	const float *back = tf_ckpt_tensor(c, "w", &bytes);
	assert_int_equal(bytes, sizeof w);
	assert_memory_equal(back, w, sizeof w);
	assert_string_equal(tf_ckpt_meta(c), "{\"rng\":7}");
	tf_ckpt_free(c);
	struct tf_ckpt_info *v;
	size_t n;
	assert_int_equal(tf_ckpt_list(s, "ckpt", &v, &n), 0);
	assert_int_equal(n, 5);
	free(v);

	/* an abandoned save and an abandoned multipart upload, then gc keeps 2 + pinned 100 */
	assert_int_equal(tf_objstore_put(s, "ckpt/step-000000000600/dead0000.t0000", "x", 1, 0), 0);
	char id[512];
	assert_int_equal(
	    tf_objstore_s3_begin_upload(s, "ckpt/step-000000000600/dead0000.t0001", id, sizeof id),
	    0);
	int64_t pinned[] = {100};
	struct tf_ckpt_gc_opts o = {.keep_last = 2, .pinned = pinned, .npinned = 1};
	struct tf_ckpt_gc_result r;
	assert_int_equal(tf_ckpt_gc(s, "ckpt", &o, &r), 0);
	assert_int_equal(r.ckpts_deleted, 2);
	assert_int_equal(r.orphans_deleted, 1);
	assert_int_equal(r.uploads_aborted, 1);
	assert_int_equal(tf_ckpt_list(s, "ckpt", &v, &n), 0);
	assert_int_equal(n, 3);
	assert_int_equal(v[0].step, 100);
	assert_int_equal(v[1].step, 400);
	assert_int_equal(v[2].step, 500);
	free(v);
	struct tf_obj_list l = {0};
	assert_int_equal(tf_objstore_list(s, "ckpt/", &l), 0);
	assert_int_equal(l.n, 3 * 3); /* manifest + 2 shards each, nothing else */
	tf_obj_list_release(&l);
	/* resume: latest complete is still 500 */
	assert_int_equal(tf_ckpt_latest(s, "ckpt", &latest), 0);
	assert_int_equal(latest, 500);
	tf_objstore_free(s);
}

/* Checks every manifest under prefix directly against the server: every shard it names is
 * there with the recorded size and CRC-32C. Returns the number of checkpoints. */
static size_t verify_all_manifests(const char *prefix)
{
	struct tf_objstore *d = open_s3(endpoint(), "", NULL);
	struct tf_ckpt_info *v;
	size_t n;
	assert_int_equal(tf_ckpt_list(d, prefix, &v, &n), 0);
	for (size_t i = 0; i < n; i++) {
		struct tf_ckpt *c;
		int rc = tf_ckpt_load(d, prefix, v[i].step, &c);
		if (rc)
			fail_msg("step %" PRId64 ": %s", v[i].step, tf_objstore_errmsg(d));
		tf_ckpt_free(c);
	}
	free(v);
	tf_objstore_free(d);
	return n;
}

static void test_s3_live_faults_every_checkpoint_commits(void **state)
{
	(void)state;
	const char *proxy = getenv("TF_S3_FAULT_ENDPOINT");
	if (!proxy || !*proxy) {
		fprintf(stderr,
		        "skipped: TF_S3_FAULT_ENDPOINT is unset (tests/it_s3.sh sets it)\n");
		skip();
	}
	/* 30% of requests fail at the proxy: retries must absorb it, within a generous budget */
	struct tf_objstore_opts o = {.max_attempts = 10,
	                             .part_size = 5u << 20,
	                             .multipart_threshold = 5u << 20,
	                             .timeout = 5};
	struct tf_objstore *s = open_s3(proxy, "faulty", &o);
	size_t big = (5u << 20) + 12345;
	unsigned char *wbig = pattern(big, 99);
	int saves = 0;
	for (int64_t step = 1; step <= 12; step++) {
		unsigned char *small = pattern(20000 + (size_t)step * 100, (unsigned)step);
		struct tf_ckpt_tensor t[3] = {
		    {"small", small, 20000 + (size_t)step * 100},
		    {"meta", &step, sizeof step},
		    {"big", wbig, big},
		};
		size_t nt = step % 4 == 0 ? 3 : 2; /* every fourth save has a multipart shard */
		int rc = tf_ckpt_save(s, "ckpt", step, t, nt, "{}");
		if (rc)
			fail_msg("save %" PRId64 ": %s", step, tf_objstore_errmsg(s));
		saves++;
		struct tf_ckpt *c;
		rc = tf_ckpt_load(s, "ckpt", step, &c);
		if (rc)
			fail_msg("load %" PRId64 ": %s", step, tf_objstore_errmsg(s));
		const void *p = tf_ckpt_tensor(c, "small", NULL);
		assert_memory_equal(p, small, t[0].bytes);
		tf_ckpt_free(c);
		free(small);
	}
	free(wbig);
	int64_t latest;
	assert_int_equal(tf_ckpt_latest(s, "ckpt", &latest), 0);
	assert_int_equal(latest, 12);
	struct tf_ckpt_gc_opts go = {.keep_last = 5};
	struct tf_ckpt_gc_result r;
	int rc = tf_ckpt_gc(s, "faulty-none", &go, &r); /* gc under faults, on an empty prefix */
	assert_int_equal(rc, 0);
	rc = tf_ckpt_gc(s, "ckpt", &go, &r);
	if (rc)
		fail_msg("gc: %s", tf_objstore_errmsg(s));
	struct tf_obj_stats st;
	tf_objstore_stats(s, &st);
	fprintf(stderr,
	        "fault run: %d checkpoints committed; %" PRIu64 " requests, %" PRIu64
	        " retries, %" PRIu64 " corrupt downloads detected and re-read\n",
	        saves, st.requests, st.retries, st.corrupt);
	assert_true(st.retries > 0);
	assert_true(st.corrupt > 0);
	tf_objstore_free(s);
	/* straight to the server: every manifest names shards that are there and intact */
	assert_int_equal(verify_all_manifests("faulty/ckpt"), 5);
}

static int group_setup(void **state)
{
	(void)state;
	if (!have_server())
		return 0;
	const char *b = getenv("TF_S3_TEST_BUCKET");
	if (b && *b)
		snprintf(bucket, sizeof bucket, "%s", b);
	else
		snprintf(bucket, sizeof bucket, "tf-test-%d-%ld", (int)getpid(),
		         (long)tf_now_wall());
	struct tf_objstore *s = open_s3(endpoint(), "", NULL);
	int rc = tf_objstore_create_bucket(s);
	if (rc)
		fprintf(stderr, "create bucket: %s\n", tf_objstore_errmsg(s));
	assert_int_equal(tf_objstore_create_bucket(s), 0); /* ours already: fine */
	tf_objstore_free(s);
	return rc;
}

int main(void)
{
	if (!have_server()) {
		printf("test_s3_live: skipped: TF_S3_TEST_ENDPOINT is unset (tests/it_s3.sh starts "
		       "a local S3 server and runs this with it)\n");
		return 77; /* tests/run.sh counts exit 77 as skipped */
	}
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_s3_live_round_trip),
	    cmocka_unit_test(test_s3_live_multipart_12mib),
	    cmocka_unit_test(test_s3_live_one_part_goes_as_one_put),
	    cmocka_unit_test(test_s3_live_streams_files_with_and_without_content_md5),
	    cmocka_unit_test(test_s3_live_list_prefixes_and_pages),
	    cmocka_unit_test(test_s3_live_wrong_secret_is_clear),
	    cmocka_unit_test(test_s3_live_virtual_hosted),
	    cmocka_unit_test(test_s3_live_checkpoints),
	    cmocka_unit_test(test_s3_live_faults_every_checkpoint_commits),
	};
	return cmocka_run_group_tests(tests, group_setup, NULL);
}

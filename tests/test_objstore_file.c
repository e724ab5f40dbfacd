/* test_objstore_file.c — the file:// backend: round trips, write-once, atomicity, key rules,
 * listing with prefixes, streaming, deletes that prune directories, symbolic links planted
 * inside the root refused, a full disk named as such. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "common/common.h"
#include "storage/objstore.h"
#include "tests/testutil.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* Each test runs in its own fresh directory below the binary's temp dir. */
static int fresh_dir(void **state)
{
	(void)state;
	static int n;
	static char base[4096];
	if (!base[0] && !getcwd(base, sizeof base))
		return -1;
	char *dir = tf_xasprintf("%s/t%d", base, n++);
	int rc = mkdir(dir, 0755) || chdir(dir) ? -1 : 0;
	free(dir);
	return rc;
}

static struct tf_objstore *open_store(const char *url)
{
	struct tf_objstore *s = NULL;
	char err[256];
	int rc = tf_objstore_open(url, &s, err, sizeof err);
	if (rc)
		fail_msg("open %s: %s", url, err);
	return s;
}

static void test_objstore_file_round_trip(void **state)
{
	(void)state;
	struct tf_objstore *s = open_store("file://store");
	char cwd[4096];
	assert_non_null(getcwd(cwd, sizeof cwd));
	char *want = tf_xasprintf("file://%s/store", cwd);
	assert_string_equal(tf_objstore_url(s), want);
	free(want);

	assert_int_equal(tf_objstore_put(s, "a/b/c.bin", "hello", 5, 0), 0);
	void *data = NULL;
	size_t len = 0;
	assert_int_equal(tf_objstore_get(s, "a/b/c.bin", &data, &len), 0);
	assert_int_equal(len, 5);
	assert_memory_equal(data, "hello", 5);
	assert_int_equal(((char *)data)[5], '\0');
	free(data);

	/* overwrite, and an empty object */
	assert_int_equal(tf_objstore_put(s, "a/b/c.bin", "bye", 3, 0), 0);
	assert_int_equal(tf_objstore_put(s, "empty", NULL, 0, 0), 0);
	assert_int_equal(tf_objstore_get(s, "empty", &data, &len), 0);
	assert_int_equal(len, 0);
	free(data);

	struct tf_obj_info info;
	assert_int_equal(tf_objstore_head(s, "a/b/c.bin", &info), 0);
	assert_int_equal(info.size, 3);
	assert_true(info.mtime > 1e9);

	/* absent objects and prefixes (directories) are -ENOENT with a message naming the key */
	data = (void *)0x1;
	assert_int_equal(tf_objstore_get(s, "nope", &data, &len), -ENOENT);
	assert_ptr_equal(data, (void *)0x1); /* out-params untouched on failure */
	assert_non_null(strstr(tf_objstore_errmsg(s), "'nope'"));
	assert_int_equal(tf_objstore_get(s, "a/b", &data, &len), -ENOENT);
	assert_int_equal(tf_objstore_head(s, "a", &info), -ENOENT);
	tf_objstore_free(s);
}

static void test_objstore_file_plain_path_and_abs_url(void **state)
{
	(void)state;
	char cwd[4096];
	assert_non_null(getcwd(cwd, sizeof cwd));
	char *url = tf_xasprintf("file://%s/abs/", cwd);
	struct tf_objstore *s = open_store(url);
	assert_int_equal(tf_objstore_put(s, "k", "1", 1, 0), 0);
	tf_objstore_free(s);
	s = open_store("abs"); /* a plain relative path reaches the same store */
	void *data;
	size_t len;
	assert_int_equal(tf_objstore_get(s, "k", &data, &len), 0);
	free(data);
	tf_objstore_free(s);
	free(url);

	char err[256];
	assert_int_equal(tf_objstore_open("ftp://x", &s, err, sizeof err), -EINVAL);
	assert_non_null(strstr(err, "ftp://x"));
	assert_int_equal(tf_objstore_open("", &s, err, sizeof err), -EINVAL);
	/* a file where the directory should be */
	FILE *f = fopen("afile", "w");
	fclose(f);
	assert_int_equal(tf_objstore_open("afile", &s, err, sizeof err), -ENOTDIR);
	assert_non_null(strstr(err, "afile"));
}

static void test_objstore_file_write_once(void **state)
{
	(void)state;
	struct tf_objstore *s = open_store("store");
	assert_int_equal(tf_objstore_put(s, "once", "v1", 2, TF_OBJ_IF_NONE_MATCH), 0);
	assert_int_equal(tf_objstore_put(s, "once", "v2", 2, TF_OBJ_IF_NONE_MATCH), -EEXIST);
	assert_non_null(strstr(tf_objstore_errmsg(s), "already exists"));
	void *data;
	size_t len;
	assert_int_equal(tf_objstore_get(s, "once", &data, &len), 0);
	assert_memory_equal(data, "v1", 2);
	free(data);
	/* no temp files left behind by the refused write */
	struct tf_obj_list l = {0};
	assert_int_equal(tf_objstore_list(s, "", &l), 0);
	assert_int_equal(l.n, 1);
	tf_obj_list_release(&l);
	tf_objstore_free(s);
}

static void test_objstore_file_refuses_escaping_keys(void **state)
{
	(void)state;
	struct tf_objstore *s = open_store("store");
	const char *bad[] = {"",         "/etc/passwd",   "../x", "a/../../x", "a/..",
	                     "..",       "./a",           "a//b", "a/",        "a\nb",
	                     "a\\..\\b", ".x.tf-tmp.abc", "a/./b"};
	for (size_t i = 0; i < TF_ARRAY_LEN(bad); i++) {
		assert_int_equal(tf_objstore_put(s, bad[i], "x", 1, 0), -EINVAL);
		assert_non_null(strstr(tf_objstore_errmsg(s), "invalid object key"));
		void *d;
		size_t n;
		assert_int_equal(tf_objstore_get(s, bad[i], &d, &n), -EINVAL);
		assert_int_equal(tf_objstore_delete(s, bad[i]), -EINVAL);
	}
	assert_int_equal(tf_objstore_put(s, NULL, "x", 1, 0), -EINVAL);
	char *longkey = tf_xcalloc(1, TF_OBJ_KEY_MAX + 2);
	memset(longkey, 'k', TF_OBJ_KEY_MAX + 1);
	assert_int_equal(tf_objstore_key_check(longkey), -EINVAL);
	free(longkey);
	assert_int_equal(tf_objstore_key_check("a..b/.c/d."), 0);
	struct tf_obj_list l = {0};
	assert_int_equal(tf_objstore_list(s, "../", &l), -EINVAL);
	assert_int_equal(tf_objstore_list(s, "/", &l), -EINVAL);
	/* nothing was written outside (or inside) the root */
	struct stat st;
	assert_int_equal(stat("x", &st), -1);
	assert_int_equal(tf_objstore_list(s, "", &l), 0);
	assert_int_equal(l.n, 0);
	tf_objstore_free(s);
}

static void test_objstore_file_list_prefixes(void **state)
{
	(void)state;
	struct tf_objstore *s = open_store("store");
	const char *keys[] = {"ckpt/step-00000010/manifest.json",
	                      "ckpt/step-00000010/w0",
	                      "ckpt/step-00000002/w0",
	                      "ckpt/steps.txt",
	                      "data/x",
	                      "ck"};
	for (size_t i = 0; i < TF_ARRAY_LEN(keys); i++)
		assert_int_equal(tf_objstore_put(s, keys[i], keys[i], strlen(keys[i]), 0), 0);
	/* a crashed writer's temp file stays invisible */
	FILE *f = fopen("store/ckpt/.w1"
	                ".tf-tmp.ABCDEF",
	                "w");
	assert_non_null(f);
	fclose(f);

	struct tf_obj_list l = {0};
	assert_int_equal(tf_objstore_list(s, "ckpt/step-", &l), 0);
	assert_int_equal(l.n, 3);
	assert_string_equal(l.v[0].key, "ckpt/step-00000002/w0");
	assert_string_equal(l.v[1].key, "ckpt/step-00000010/manifest.json");
	assert_string_equal(l.v[2].key, "ckpt/step-00000010/w0");
	assert_int_equal(l.v[2].size, strlen(keys[1]));
	tf_obj_list_release(&l);

	assert_int_equal(tf_objstore_list(s, "ck", &l), 0);
	assert_int_equal(l.n, 5);
	assert_string_equal(l.v[0].key, "ck");
	/* appending to a non-empty list keeps the earlier entries */
	assert_int_equal(tf_objstore_list(s, "data/", &l), 0);
	assert_int_equal(l.n, 6);
	assert_string_equal(l.v[5].key, "data/x");
	tf_obj_list_release(&l);
	assert_null(l.v);

	assert_int_equal(tf_objstore_list(s, "", &l), 0);
	assert_int_equal(l.n, 6);
	for (size_t i = 1; i < l.n; i++)
		assert_true(strcmp(l.v[i - 1].key, l.v[i].key) < 0);
	tf_obj_list_release(&l);
	assert_int_equal(tf_objstore_list(s, "nothing/here", &l), 0);
	assert_int_equal(l.n, 0);
	tf_objstore_free(s);
}

static void test_objstore_file_delete_prunes_dirs(void **state)
{
	(void)state;
	struct tf_objstore *s = open_store("store");
	assert_int_equal(tf_objstore_put(s, "x/y/z", "1", 1, 0), 0);
	assert_int_equal(tf_objstore_put(s, "x/keep", "1", 1, 0), 0);
	assert_int_equal(tf_objstore_delete(s, "x/y/z"), 0);
	struct stat st;
	assert_int_equal(stat("store/x/y", &st), -1);
	assert_int_equal(stat("store/x", &st), 0);
	assert_int_equal(tf_objstore_delete(s, "x/y/z"), -ENOENT);
	assert_int_equal(tf_objstore_delete(s, "x"), -ENOENT);
	assert_int_equal(tf_objstore_delete(s, "x/keep"), 0);
	assert_int_equal(stat("store/x", &st), -1);
	assert_int_equal(stat("store", &st), 0);
	/* a put after pruning re-creates the directories */
	assert_int_equal(tf_objstore_put(s, "x/y/z", "2", 1, 0), 0);
	tf_objstore_free(s);
}

static void test_objstore_file_streaming(void **state)
{
	(void)state;
	struct tf_objstore *s = open_store("store");
	size_t n = (3u << 20) + 17;
	unsigned char *buf = tf_xmalloc(n);
	for (size_t i = 0; i < n; i++)
		buf[i] = (unsigned char)(i * 131 + 7);
	FILE *f = fopen("src.bin", "wb");
	assert_int_equal(fwrite(buf, 1, n, f), n);
	fclose(f);
	assert_int_equal(tf_objstore_put_file(s, "big/blob", "src.bin", 0), 0);
	assert_int_equal(tf_objstore_get_file(s, "big/blob", "dst.bin"), 0);
	char *back;
	size_t len;
	assert_int_equal(tf_read_file("dst.bin", n + 1, &back, &len), 0);
	assert_int_equal(len, n);
	assert_memory_equal(back, buf, n);
	free(back);
	assert_int_equal(tf_objstore_put_file(s, "big/blob2", "missing.bin", 0), -ENOENT);
	assert_non_null(strstr(tf_objstore_errmsg(s), "missing.bin"));
	assert_int_equal(tf_objstore_get_file(s, "big/none", "dst.bin"), -ENOENT);
	/* dst.bin was not clobbered by the failed download */
	assert_int_equal(tf_read_file("dst.bin", n + 1, &back, &len), 0);
	assert_int_equal(len, n);
	free(back);
	free(buf);
	tf_objstore_free(s);
}

static void test_objstore_file_key_vs_prefix_conflict(void **state)
{
	(void)state;
	struct tf_objstore *s = open_store("store");
	assert_int_equal(tf_objstore_put(s, "a/b", "1", 1, 0), 0);
	assert_int_equal(tf_objstore_put(s, "a", "1", 1, 0), -EISDIR);
	assert_non_null(strstr(tf_objstore_errmsg(s), "'a'"));
	assert_int_equal(tf_objstore_put(s, "a/b/c", "1", 1, 0), -ENOTDIR);
	assert_int_equal(tf_objstore_gc_uploads(s, "", 0, NULL), 0);
	tf_objstore_free(s);
}

static void write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	assert_int_equal(fclose(f), 0);
}

static void assert_file_is(const char *path, const char *text)
{
	char *got;
	size_t len;
	assert_int_equal(tf_read_file(path, 1 << 20, &got, &len), 0);
	assert_string_equal(got, text);
	free(got);
}

/* Links planted inside the root, to a directory and to a file outside it: get, head, put,
 * delete and list refuse them (-ELOOP, a message naming the link rule) and nothing outside is
 * read, written or removed. */
static void test_objstore_file_refuses_planted_symlinks(void **state)
{
	(void)state;
	struct tf_objstore *s = open_store("store");
	assert_int_equal(tf_objstore_put(s, "sub/ok", "fine", 4, 0), 0);
	assert_int_equal(mkdir("outside", 0755), 0);
	write_text("outside/secret", "s");
	write_text("outside.txt", "o");
	assert_int_equal(symlink("../outside", "store/lnkdir"), 0);
	assert_int_equal(symlink("../../outside", "store/sub/lnkdir"), 0);
	assert_int_equal(symlink("../outside.txt", "store/lnkfile"), 0);
	static const char *const through[] = {"lnkdir/secret", "sub/lnkdir/secret", "lnkfile",
	                                      "lnkdir/new"};
	for (size_t i = 0; i < sizeof through / sizeof through[0]; i++) {
		const char *key = through[i];
		void *data = NULL;
		size_t len;
		struct tf_obj_info info;
		assert_int_equal(tf_objstore_get(s, key, &data, &len), -ELOOP);
		assert_null(data);
		assert_non_null(strstr(tf_objstore_errmsg(s), "symbolic link"));
		assert_int_equal(tf_objstore_head(s, key, &info), -ELOOP);
		assert_int_equal(tf_objstore_get_file(s, key, "copy.bin"), -ELOOP);
		assert_int_equal(tf_objstore_put(s, key, "evil", 4, 0), -ELOOP);
		assert_int_equal(tf_objstore_put(s, key, "evil", 4, TF_OBJ_IF_NONE_MATCH), -ELOOP);
		assert_int_equal(tf_objstore_delete(s, key), -ELOOP);
	}
	assert_file_is("outside/secret", "s");
	assert_file_is("outside.txt", "o");
	struct stat st;
	assert_int_equal(stat("outside/new", &st), -1);
	assert_int_equal(stat("copy.bin", &st), -1);
	assert_int_equal(lstat("store/lnkfile", &st), 0); /* the link itself stays too */
	/* listing: links are neither listed nor followed; a prefix through one is refused */
	struct tf_obj_list l = {0};
	assert_int_equal(tf_objstore_list(s, "", &l), 0);
	assert_int_equal(l.n, 1);
	assert_string_equal(l.v[0].key, "sub/ok");
	tf_obj_list_release(&l);
	assert_int_equal(tf_objstore_list(s, "lnkdir/", &l), -ELOOP);
	assert_int_equal(tf_objstore_list(s, "sub/lnkdir/se", &l), -ELOOP);
	assert_int_equal(l.n, 0);
	/* the objects that are not links still work */
	void *data;
	size_t len;
	assert_int_equal(tf_objstore_get(s, "sub/ok", &data, &len), 0);
	free(data);
	/* a FIFO planted in the root is not an object, and opening it does not block */
	assert_int_equal(mkfifo("store/fifo", 0644), 0);
	alarm(30);
	assert_int_equal(tf_objstore_get(s, "fifo", &data, &len), -ENOENT);
	alarm(0);
	tf_objstore_free(s);
}

/* A put on a full file system says the disk is full. Runs in a child with its own mount
 * namespace and a 64 KiB tmpfs; skipped where mounting is not allowed. */
static void test_objstore_file_disk_full_is_named(void **state)
{
	(void)state;
	assert_int_equal(mkdir("small", 0755), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		if (unshare(CLONE_NEWNS) || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) ||
		    mount("tmpfs", "small", "tmpfs", 0, "size=64k"))
			_exit(77);
		struct tf_objstore *s = open_store("small");
		static char big[1 << 20];
		int rc = tf_objstore_put(s, "a/big", big, sizeof big, 0);
		int ok = rc == -ENOSPC && strstr(tf_objstore_errmsg(s), "disk is full");
		if (!ok)
			fprintf(stderr, "put: %d %s\n", rc, tf_objstore_errmsg(s));
		/* the failed put left no temp file behind */
		struct tf_obj_list l = {0};
		ok = ok && !tf_objstore_list(s, "", &l) && l.n == 0;
		tf_objstore_free(s);
		_exit(ok ? 0 : 1);
	}
	int rc = tf_test_wait_exit(pid);
	if (rc == 77)
		skip();
	assert_int_equal(rc, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup(test_objstore_file_round_trip, fresh_dir),
	    cmocka_unit_test_setup(test_objstore_file_plain_path_and_abs_url, fresh_dir),
	    cmocka_unit_test_setup(test_objstore_file_write_once, fresh_dir),
	    cmocka_unit_test_setup(test_objstore_file_refuses_escaping_keys, fresh_dir),
	    cmocka_unit_test_setup(test_objstore_file_list_prefixes, fresh_dir),
	    cmocka_unit_test_setup(test_objstore_file_delete_prunes_dirs, fresh_dir),
	    cmocka_unit_test_setup(test_objstore_file_streaming, fresh_dir),
	    cmocka_unit_test_setup(test_objstore_file_key_vs_prefix_conflict, fresh_dir),
	    cmocka_unit_test_setup(test_objstore_file_refuses_planted_symlinks, fresh_dir),
	    cmocka_unit_test_setup(test_objstore_file_disk_full_is_named, fresh_dir),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

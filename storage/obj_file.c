/* obj_file.c — the file:// object-store backend: each key is a file below the root directory.
 *
 * Invariants:
 *   1. A reader never sees a partial object: writes go to a hidden temp file in the target's
 *      directory, are fsynced, then renamed over the key (or hard-linked for write-once, which
 *      fails atomically when the key exists), and the directory is fsynced so the name
 *      survives a crash.
 *   2. Keys never escape the root: the dispatcher refuses '..', absolute and control-character
 *      keys, and this backend also refuses names containing TMP_MARK so its temp files
 *      cannot be addressed.
 *   3. Temp files (left behind by a crash) are invisible to list/get/head.
 *   4. Deleting the last object of a directory removes the empty directories up to the root,
 *      so garbage collection leaves no litter; a racing put re-creates them (it retries once).
 */
#include "storage/objstore_int.h"

#include "common/common.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TMP_MARK ".tf-tmp."
#define IO_CHUNK (1u << 20)

struct file_impl {
	char *root; /* absolute directory path without trailing '/' */
};

static const char *root_of(const struct tf_objstore *s)
{
	return ((const struct file_impl *)s->impl)->root;
}

static char *key_path(const struct tf_objstore *s, const char *key)
{
	return tf_xasprintf("%s/%s", root_of(s), key);
}

int tf_objstore_file_open(struct tf_objstore *s, const char *path, char *err, size_t errlen)
{
	if (!*path) {
		snprintf(err, errlen,
		         "empty directory in file:// URL: give file:///ABS/DIR or a path");
		return -EINVAL;
	}
	char *abs;
	if (path[0] == '/') {
		abs = tf_xstrdup(path);
	} else {
		char cwd[PATH_MAX];
		if (!getcwd(cwd, sizeof cwd)) {
			int rc = -errno;
			snprintf(err, errlen, "cannot resolve object store path '%s': %s", path,
			         strerror(errno));
			return rc;
		}
		abs = tf_xasprintf("%s/%s", cwd, path);
	}
	size_t n = strlen(abs);
	while (n > 1 && abs[n - 1] == '/')
		abs[--n] = '\0';
	int rc = tf_mkdir_p(abs);
	struct stat st;
	if (!rc && stat(abs, &st))
		rc = -errno;
	if (!rc && !S_ISDIR(st.st_mode))
		rc = -ENOTDIR;
	if (rc) {
		snprintf(err, errlen, "cannot use '%s' as an object store directory: %s", abs,
		         strerror(-rc));
		free(abs);
		return rc;
	}
	struct file_impl *fi = tf_xcalloc(1, sizeof *fi);
	fi->root = abs;
	s->impl = fi;
	s->ops = &tf_objstore_file_ops;
	s->url = tf_xasprintf("file://%s", abs);
	return 0;
}

static void file_free(struct tf_objstore *s)
{
	struct file_impl *fi = s->impl;
	free(fi->root);
	free(fi);
	s->impl = NULL;
}

static int fsync_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	int rc = fsync(fd) ? -errno : 0;
	close(fd);
	return rc;
}

static int write_all(int fd, const void *data, size_t len)
{
	const char *p = data;
	while (len) {
		ssize_t w = write(fd, p, len);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += w;
		len -= (size_t)w;
	}
	return 0;
}

/* Copies everything from src_fd to fd. */
static int copy_fd(int fd, int src_fd)
{
	char *buf = tf_xmalloc(IO_CHUNK);
	int rc = 0;
	for (;;) {
		ssize_t r = read(src_fd, buf, IO_CHUNK);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			rc = -errno;
			break;
		}
		if (r == 0)
			break;
		rc = write_all(fd, buf, (size_t)r);
		if (rc)
			break;
	}
	free(buf);
	return rc;
}

/* Where an atomic write's bytes come from: a memory buffer or an open file. */
struct source {
	const void *data; /* memory source, or NULL */
	size_t len;       /* its length */
	int fd;           /* file source when data is NULL */
};

/* Writes src to `path` atomically (invariant 1). exclusive: fail with -EEXIST when path
 * exists. *what receives the failing step for the error message. */
static int atomic_write(const char *path, const struct source *src, int exclusive,
                        const char **what)
{
	char *dir = tf_xstrdup(path);
	char *slash = strrchr(dir, '/');
	const char *base = slash + 1;
	*slash = '\0';
	char *tmp = tf_xasprintf("%s/.%s" TMP_MARK "XXXXXX", dir, base);
	int fd = -1, rc = 0, linked = 0;

	*what = "create its directory";
	for (int attempt = 0; attempt < 2; attempt++) {
		rc = tf_mkdir_p(dir);
		if (rc)
			goto out;
		fd = mkostemp(tmp, O_CLOEXEC);
		if (fd >= 0 || errno != ENOENT)
			break;
		/* a concurrent delete pruned the directory between mkdir and mkstemp */
		memcpy(tmp + strlen(tmp) - 6, "XXXXXX", 6);
	}
	*what = "create a temporary file";
	if (fd < 0) {
		rc = -errno;
		goto out;
	}
	*what = "write";
	rc = src->data ? write_all(fd, src->data, src->len) : copy_fd(fd, src->fd);
	if (rc)
		goto out;
	*what = "flush";
	if (fchmod(fd, 0644) || fsync(fd)) {
		rc = -errno;
		goto out;
	}
	if (close(fd)) {
		fd = -1;
		rc = -errno;
		goto out;
	}
	fd = -1;
	*what = "commit";
	if (exclusive) {
		if (link(tmp, path)) {
			rc = -errno;
			goto out;
		}
		linked = 1;
	} else if (rename(tmp, path)) {
		rc = -errno;
		goto out;
	}
	*what = "flush the directory of";
	rc = fsync_dir(dir);
out:
	if (fd >= 0)
		close(fd);
	if (rc || linked)
		unlink(tmp);
	free(tmp);
	free(dir);
	return rc;
}

/* The file backend's own key rule (invariant 2). */
static int file_key_ok(struct tf_objstore *s, const char *key)
{
	if (strstr(key, TMP_MARK))
		return tf_objstore_seterr(s, -EINVAL,
		                          "invalid object key '%s': names containing '" TMP_MARK
		                          "' are reserved for temporary files",
		                          key);
	return 0;
}

static int put_source(struct tf_objstore *s, const char *key, const struct source *src,
                      unsigned flags)
{
	int rc = file_key_ok(s, key);
	if (rc)
		return rc;
	char *path = key_path(s, key);
	const char *what = "";
	rc = atomic_write(path, src, (flags & TF_OBJ_IF_NONE_MATCH) != 0, &what);
	if (rc == -EEXIST && (flags & TF_OBJ_IF_NONE_MATCH))
		tf_objstore_seterr(s, rc, "object '%s' already exists in %s (write-once)", key,
		                   s->url);
	else if (rc == -EISDIR || rc == -ENOTDIR)
		tf_objstore_seterr(
		    s, rc,
		    "cannot write object '%s' in %s: a key and a key prefix with the "
		    "same name cannot both exist on a file:// store",
		    key, s->url);
	else if (rc)
		tf_objstore_seterr(s, rc, "cannot %s object '%s' in %s: %s", what, key, s->url,
		                   strerror(-rc));
	free(path);
	return rc;
}

static int file_put(struct tf_objstore *s, const char *key, const void *data, size_t len,
                    unsigned flags)
{
	static const char empty = 0;
	struct source src = {data ? data : &empty, len, -1};
	return put_source(s, key, &src, flags);
}

static int file_put_file(struct tf_objstore *s, const char *key, const char *path, unsigned flags)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return tf_objstore_seterr(s, -errno, "cannot read '%s': %s", path, strerror(errno));
	struct source src = {NULL, 0, fd};
	int rc = put_source(s, key, &src, flags);
	close(fd);
	return rc;
}

/* Opens an object for reading; a directory (a key prefix) counts as absent. */
static int open_object(struct tf_objstore *s, const char *key, int *fd_out, struct stat *st)
{
	int rc = file_key_ok(s, key);
	if (rc)
		return rc;
	char *path = key_path(s, key);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		rc = -errno;
	else if (fstat(fd, st))
		rc = -errno;
	else if (!S_ISREG(st->st_mode))
		rc = -ENOENT;
	if (rc == -ENOENT || rc == -ENOTDIR)
		rc = tf_objstore_seterr(s, -ENOENT, "no object '%s' in %s", key, s->url);
	else if (rc)
		tf_objstore_seterr(s, rc, "cannot read object '%s' in %s: %s", key, s->url,
		                   strerror(-rc));
	free(path);
	if (rc) {
		if (fd >= 0)
			close(fd);
		return rc;
	}
	*fd_out = fd;
	return 0;
}

static int file_get(struct tf_objstore *s, const char *key, void **data, size_t *len)
{
	int fd;
	struct stat st;
	int rc = open_object(s, key, &fd, &st);
	if (rc)
		return rc;
	size_t cap = (size_t)st.st_size, n = 0;
	char *buf = tf_xmalloc(cap + 1);
	for (;;) {
		if (n == cap) {
			cap = cap ? cap * 2 : 4096;
			buf = tf_xrealloc(buf, cap + 1);
		}
		ssize_t r = read(fd, buf + n, cap - n);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			rc = tf_objstore_seterr(s, -errno, "cannot read object '%s' in %s: %s", key,
			                        s->url, strerror(errno));
			break;
		}
		if (r == 0)
			break;
		n += (size_t)r;
	}
	close(fd);
	if (rc) {
		free(buf);
		return rc;
	}
	buf[n] = '\0';
	*data = buf;
	*len = n;
	return 0;
}

static int file_get_file(struct tf_objstore *s, const char *key, const char *path)
{
	int fd;
	struct stat st;
	int rc = open_object(s, key, &fd, &st);
	if (rc)
		return rc;
	char *dest = strchr(path, '/') ? tf_xstrdup(path) : tf_xasprintf("./%s", path);
	struct source src = {NULL, 0, fd};
	const char *what = "";
	rc = atomic_write(dest, &src, 0, &what);
	if (rc)
		tf_objstore_seterr(s, rc, "cannot %s '%s' while copying object '%s': %s", what,
		                   path, key, strerror(-rc));
	free(dest);
	close(fd);
	return rc;
}

static int file_head(struct tf_objstore *s, const char *key, struct tf_obj_info *info)
{
	int fd;
	struct stat st;
	int rc = open_object(s, key, &fd, &st);
	if (rc)
		return rc;
	close(fd);
	info->size = (uint64_t)st.st_size;
	info->mtime = (double)st.st_mtim.tv_sec + (double)st.st_mtim.tv_nsec * 1e-9;
	return 0;
}

static int file_del(struct tf_objstore *s, const char *key)
{
	int rc = file_key_ok(s, key);
	if (rc)
		return rc;
	char *path = key_path(s, key);
	struct stat st;
	if (lstat(path, &st) || S_ISDIR(st.st_mode)) {
		rc = tf_objstore_seterr(s, -ENOENT, "no object '%s' in %s", key, s->url);
		goto out;
	}
	if (unlink(path)) {
		rc = errno == ENOENT ? -ENOENT : -errno;
		tf_objstore_seterr(s, rc, "cannot delete object '%s' in %s: %s", key, s->url,
		                   strerror(-rc));
		goto out;
	}
	/* invariant 4: prune empty directories up to (not including) the root */
	char *slash;
	size_t rootlen = strlen(root_of(s));
	while ((slash = strrchr(path, '/')) && (size_t)(slash - path) > rootlen) {
		*slash = '\0';
		if (rmdir(path))
			break;
	}
	slash = strrchr(path, '/');
	if (slash) {
		*slash = '\0';
		fsync_dir((size_t)(slash - path) >= rootlen ? path : root_of(s));
	}
out:
	free(path);
	return rc;
}

/* Recursively lists directory `rel` (a key prefix ending in '/', or "" for the root). */
static int walk(struct tf_objstore *s, const char *rel, const char *prefix, struct tf_obj_list *out)
{
	char *dirpath = *rel ? tf_xasprintf("%s/%s", root_of(s), rel) : tf_xstrdup(root_of(s));
	DIR *d = opendir(dirpath);
	int rc = 0;
	if (!d) {
		if (errno != ENOENT && errno != ENOTDIR)
			rc = tf_objstore_seterr(s, -errno, "cannot list '%s': %s", dirpath,
			                        strerror(errno));
		free(dirpath);
		return rc;
	}
	size_t plen = strlen(prefix);
	struct dirent *e;
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") ||
		    strstr(e->d_name, TMP_MARK))
			continue;
		char *key = tf_xasprintf("%s%s", rel, e->d_name);
		struct stat st;
		if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW)) {
			free(key);
			continue; /* removed while listing */
		}
		size_t klen = strlen(key);
		if (S_ISDIR(st.st_mode)) {
			/* descend only where keys below can match the prefix */
			char *sub = tf_xasprintf("%s/", key);
			size_t slen = klen + 1;
			if (!strncmp(sub, prefix, slen < plen ? slen : plen))
				rc = walk(s, sub, prefix, out);
			free(sub);
		} else if (S_ISREG(st.st_mode) && !strncmp(key, prefix, plen)) {
			tf_obj_list_push(out, key, (uint64_t)st.st_size,
			                 (double)st.st_mtim.tv_sec +
			                     (double)st.st_mtim.tv_nsec * 1e-9);
		}
		free(key);
		if (rc)
			break;
	}
	closedir(d);
	free(dirpath);
	return rc;
}

static int file_list(struct tf_objstore *s, const char *prefix, struct tf_obj_list *out)
{
	/* start at the deepest directory the prefix names */
	char *rel = tf_xstrdup(prefix);
	char *slash = strrchr(rel, '/');
	if (slash)
		slash[1] = '\0';
	else
		rel[0] = '\0';
	int rc = walk(s, rel, prefix, out);
	free(rel);
	return rc;
}

static int file_gc_uploads(struct tf_objstore *s, const char *prefix, double older_than,
                           int *aborted)
{
	(void)s;
	(void)prefix;
	(void)older_than;
	*aborted = 0; /* file:// has no multipart uploads; its temp files are never visible */
	return 0;
}

static int file_mkbucket(struct tf_objstore *s)
{
	(void)s; /* the root was created by open */
	return 0;
}

const struct tf_objstore_ops tf_objstore_file_ops = {
    .scheme = "file",
    .put = file_put,
    .get = file_get,
    .put_file = file_put_file,
    .get_file = file_get_file,
    .head = file_head,
    .del = file_del,
    .list = file_list,
    .gc_uploads = file_gc_uploads,
    .mkbucket = file_mkbucket,
    .free = file_free,
};

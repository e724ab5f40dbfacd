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
 *   5. No symbolic link below the root is ever followed: every call walks from the root one
 *      name at a time with openat(O_NOFOLLOW) (open_parent), opens or replaces the last name
 *      relative to that directory, and refuses a link anywhere on the way with -ELOOP. A link
 *      planted inside the store therefore cannot make get, put, delete or list reach outside
 *      it. (The root itself is resolved once per call like any path: the user named it.)
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

/* Sets the error for a key that passes through (or names) a symbolic link (invariant 5). */
static int link_refused(struct tf_objstore *s, const char *key)
{
	return tf_objstore_seterr(s, -ELOOP,
	                          "object key '%s' in %s passes through a symbolic link; a "
	                          "file:// store does not follow links below its root (remove "
	                          "the link, or open the store at the directory it points to)",
	                          key, s->url);
}

/* Opens the directory that holds the last name of key (everything after the last '/', which
 * may be empty), walking from the root one name at a time without following links
 * (invariant 5). create: missing directories are made. *base points into key. Returns 0, or
 * -ELOOP for a link on the way, -ENOENT/-ENOTDIR when a directory is missing or is a file,
 * or another negative errno; the caller words the message. */
static int open_parent(const struct tf_objstore *s, const char *key, int create, int *dirfd,
                       const char **base)
{
	int fd = open(root_of(s), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	const char *p = key, *slash;
	while ((slash = strchr(p, '/'))) {
		char name[NAME_MAX + 1];
		size_t len = (size_t)(slash - p);
		if (len > NAME_MAX) {
			close(fd);
			return -ENAMETOOLONG;
		}
		memcpy(name, p, len);
		name[len] = '\0';
		int nfd = openat(fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (nfd < 0 && errno == ENOENT && create) {
			if (mkdirat(fd, name, 0755) == 0 || errno == EEXIST)
				nfd = openat(fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		}
		if (nfd < 0) {
			int rc = -errno;
			struct stat st;
			/* O_DIRECTORY may report a link to a directory as ENOTDIR */
			if (rc == -ENOTDIR && !fstatat(fd, name, &st, AT_SYMLINK_NOFOLLOW) &&
			    S_ISLNK(st.st_mode))
				rc = -ELOOP;
			close(fd);
			return rc;
		}
		close(fd);
		fd = nfd;
		p = slash + 1;
	}
	*dirfd = fd;
	*base = p;
	return 0;
}

int tf_objstore_file_open(struct tf_objstore *s, const char *path, char *err, size_t errlen)
{
	if (!*path) {
		tf_errf(err, errlen,
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
			tf_errf(err, errlen, "cannot resolve object store path '%s': %s", path,
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
		tf_errf(err, errlen, "cannot use '%s' as an object store directory: %s", abs,
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

/* Writes src to the name base in directory dirfd atomically (invariant 1), never through a
 * link: the temp file is created with O_EXCL|O_NOFOLLOW, and rename/link replace or add the
 * name itself. exclusive: fail with -EEXIST when base exists. *what receives the failing step
 * for the error message. */
static int atomic_write_at(int dirfd, const char *base, const struct source *src, int exclusive,
                           const char **what)
{
	char *tmp = NULL;
	int fd = -1, rc = 0, linked = 0;
	*what = "create a temporary file";
	for (int attempt = 0; attempt < 100 && fd < 0; attempt++) {
		char r[9];
		if (tf_random_hex(r, 4))
			snprintf(r, sizeof r, "%08x", (unsigned)attempt);
		free(tmp);
		tmp = tf_xasprintf(".%.*s" TMP_MARK "%s", 200, base, r);
		fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd < 0 && errno != EEXIST)
			break;
	}
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
		if (linkat(dirfd, tmp, dirfd, base, 0)) {
			rc = -errno;
			goto out;
		}
		linked = 1;
	} else if (renameat(dirfd, tmp, dirfd, base)) {
		rc = -errno;
		goto out;
	}
	*what = "flush the directory of";
	rc = fsync(dirfd) ? -errno : 0;
out:
	if (fd >= 0)
		close(fd);
	if (tmp && (rc || linked))
		unlinkat(dirfd, tmp, 0);
	free(tmp);
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
	const char *what = "create its directory", *base;
	for (int attempt = 0; attempt < 2; attempt++) {
		int dirfd;
		rc = open_parent(s, key, 1, &dirfd, &base);
		if (rc)
			break;
		struct stat st;
		if (!fstatat(dirfd, base, &st, AT_SYMLINK_NOFOLLOW) && S_ISLNK(st.st_mode))
			rc = -ELOOP; /* replacing the link would be harmless, but say it is there */
		else
			rc = atomic_write_at(dirfd, base, src, (flags & TF_OBJ_IF_NONE_MATCH) != 0,
			                     &what);
		close(dirfd);
		/* a concurrent delete pruned the directory between the walk and the create */
		if (rc != -ENOENT || strcmp(what, "create a temporary file"))
			break;
	}
	if (rc == -ELOOP)
		link_refused(s, key);
	else if (rc == -EEXIST && (flags & TF_OBJ_IF_NONE_MATCH))
		tf_objstore_seterr(s, rc, "object '%s' already exists in %s (write-once)", key,
		                   s->url);
	else if (rc == -EISDIR || rc == -ENOTDIR || rc == -EEXIST)
		tf_objstore_seterr(
		    s, rc,
		    "cannot write object '%s' in %s: a key and a key prefix with the "
		    "same name cannot both exist on a file:// store",
		    key, s->url);
	else if (rc == -ENOSPC || rc == -EDQUOT)
		tf_objstore_seterr(s, rc,
		                   "cannot %s object '%s' in %s: the disk is full (%s); free space "
		                   "or use another store",
		                   what, key, s->url, strerror(-rc));
	else if (rc)
		tf_objstore_seterr(s, rc, "cannot %s object '%s' in %s: %s", what, key, s->url,
		                   strerror(-rc));
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

/* Opens an object for reading; a directory (a key prefix) counts as absent, a link is
 * refused (invariant 5). O_NONBLOCK: a FIFO planted in the root cannot block the open. */
static int open_object(struct tf_objstore *s, const char *key, int *fd_out, struct stat *st)
{
	int rc = file_key_ok(s, key);
	if (rc)
		return rc;
	int dirfd, fd = -1;
	const char *base;
	rc = open_parent(s, key, 0, &dirfd, &base);
	if (!rc) {
		fd = openat(dirfd, base, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
		if (fd < 0)
			rc = -errno;
		else if (fstat(fd, st))
			rc = -errno;
		else if (!S_ISREG(st->st_mode))
			rc = -ENOENT;
		close(dirfd);
	}
	if (rc == -ELOOP)
		link_refused(s, key);
	else if (rc == -ENOENT || rc == -ENOTDIR)
		rc = tf_objstore_seterr(s, -ENOENT, "no object '%s' in %s", key, s->url);
	else if (rc)
		tf_objstore_seterr(s, rc, "cannot read object '%s' in %s: %s", key, s->url,
		                   strerror(-rc));
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
	/* the destination is the caller's own path: its directory is opened as given */
	char *dir = strchr(path, '/') ? tf_xstrdup(path) : tf_xasprintf("./%s", path);
	char *slash = strrchr(dir, '/');
	*slash = '\0';
	struct source src = {NULL, 0, fd};
	const char *what = "open the directory of";
	int dfd = open(*dir ? dir : "/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	rc = dfd < 0 ? -errno : atomic_write_at(dfd, slash + 1, &src, 0, &what);
	if (rc)
		tf_objstore_seterr(s, rc, "cannot %s '%s' while copying object '%s': %s", what,
		                   path, key, strerror(-rc));
	if (dfd >= 0)
		close(dfd);
	free(dir);
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

/* Removes the directory named by the key prefix dir ("a/b") and then its parents while they
 * are empty, up to (not including) the root (invariant 4); fsyncs the last parent. */
static void prune_dirs(struct tf_objstore *s, char *dir)
{
	for (;;) {
		int dirfd;
		const char *base;
		if (open_parent(s, dir, 0, &dirfd, &base))
			return;
		int gone = !unlinkat(dirfd, base, AT_REMOVEDIR);
		char *slash = strrchr(dir, '/');
		if (!gone || !slash) {
			fsync(dirfd);
			close(dirfd);
			return;
		}
		close(dirfd);
		*slash = '\0';
	}
}

static int file_del(struct tf_objstore *s, const char *key)
{
	int rc = file_key_ok(s, key);
	if (rc)
		return rc;
	int dirfd = -1;
	const char *base;
	struct stat st;
	rc = open_parent(s, key, 0, &dirfd, &base);
	if (!rc && fstatat(dirfd, base, &st, AT_SYMLINK_NOFOLLOW))
		rc = -errno;
	if (!rc && S_ISLNK(st.st_mode))
		rc = -ELOOP;
	else if (!rc && S_ISDIR(st.st_mode))
		rc = -ENOENT;
	if (!rc && unlinkat(dirfd, base, 0))
		rc = -errno;
	if (dirfd >= 0)
		close(dirfd);
	if (rc == -ELOOP)
		return link_refused(s, key);
	if (rc == -ENOENT || rc == -ENOTDIR)
		return tf_objstore_seterr(s, -ENOENT, "no object '%s' in %s", key, s->url);
	if (rc)
		return tf_objstore_seterr(s, rc, "cannot delete object '%s' in %s: %s", key,
		                          s->url, strerror(-rc));
	const char *slash = strrchr(key, '/');
	if (slash) {
		char *dir = tf_xasprintf("%.*s", (int)(slash - key), key);
		prune_dirs(s, dir);
		free(dir);
	} else {
		int fd = open(root_of(s), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (fd >= 0) {
			fsync(fd);
			close(fd);
		}
	}
	return 0;
}

/* Recursively lists the directory open as dfd (taken over and closed), whose keys start with
 * rel (a key prefix ending in '/', or "" for the root). Links are neither listed nor
 * descended into (invariant 5). */
static int walk(struct tf_objstore *s, int dfd, const char *rel, const char *prefix,
                struct tf_obj_list *out)
{
	DIR *d = fdopendir(dfd);
	if (!d) {
		int rc = -errno;
		close(dfd);
		return tf_objstore_seterr(s, rc, "cannot list '%s' in %s: %s", rel, s->url,
		                          strerror(-rc));
	}
	int rc = 0;
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
			if (!strncmp(sub, prefix, slen < plen ? slen : plen)) {
				int sfd = openat(dirfd(d), e->d_name,
				                 O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
				if (sfd >= 0)
					rc = walk(s, sfd, sub, prefix, out);
			}
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
	int dfd;
	const char *base;
	int rc = open_parent(s, rel, 0, &dfd, &base);
	if (!rc)
		rc = walk(s, dfd, rel, prefix, out);
	else if (rc == -ELOOP)
		link_refused(s, rel);
	else if (rc == -ENOENT || rc == -ENOTDIR)
		rc = 0; /* nothing under that prefix */
	else
		tf_objstore_seterr(s, rc, "cannot list '%s' in %s: %s", rel, s->url,
		                   strerror(-rc));
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

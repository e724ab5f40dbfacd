/* objstore.c — the object-store front door: parses the URL, picks the backend, checks every
 * key before a backend sees it, keeps the last error, and sorts listings. The backends
 * (obj_file.c, obj_s3.c) implement struct tf_objstore_ops from objstore_int.h. */
#include "storage/objstore_int.h"

#include "common/common.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int tf_objstore_key_check(const char *key)
{
	if (!key || !*key)
		return -EINVAL;
	size_t n = strlen(key);
	if (n > TF_OBJ_KEY_MAX || key[0] == '/' || key[n - 1] == '/')
		return -EINVAL;
	const char *seg = key;
	for (const char *p = key;; p++) {
		unsigned char c = (unsigned char)*p;
		if (c == '/' || c == '\0') {
			size_t len = (size_t)(p - seg);
			if (len == 0 || (len == 1 && seg[0] == '.') ||
			    (len == 2 && seg[0] == '.' && seg[1] == '.'))
				return -EINVAL;
			if (c == '\0')
				break;
			seg = p + 1;
		} else if (c < 0x20 || c == 0x7f || c == '\\') {
			return -EINVAL;
		}
	}
	return 0;
}

/* A prefix may be "" or any string whose directory part (up to the last '/') is a valid key;
 * the part after the last '/' is a partial name ("step-00" matches "step-0001"). */
static int prefix_check(const char *prefix)
{
	if (!*prefix)
		return 0;
	if (prefix[0] == '/')
		return -EINVAL;
	const char *slash = strrchr(prefix, '/');
	for (const char *p = slash ? slash + 1 : prefix; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f || *p == '\\')
			return -EINVAL;
	if (!slash)
		return 0;
	char *dir = tf_xstrdup(prefix);
	dir[slash - prefix] = '\0';
	int rc = tf_objstore_key_check(dir);
	free(dir);
	return rc;
}

int tf_objstore_seterr(struct tf_objstore *s, int rc, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(s->err, sizeof s->err, fmt, ap);
	va_end(ap);
	return rc;
}

int tf_objstore_open(const char *url, struct tf_objstore **out, char *err, size_t errlen)
{
	return tf_objstore_open_opts(url, NULL, out, err, errlen);
}

int tf_objstore_open_opts(const char *url, const struct tf_objstore_opts *opts,
                          struct tf_objstore **out, char *err, size_t errlen)
{
	static const struct tf_objstore_opts none;
	if (!opts)
		opts = &none;
	if (!url || !*url) {
		tf_errf(err, errlen,
		        "empty object store URL: give file:///DIR, a path or s3://BUCKET/PREFIX");
		return -EINVAL;
	}
	struct tf_objstore *s = tf_xcalloc(1, sizeof *s);
	int rc;
	if (!strncmp(url, "s3://", 5)) {
		rc = tf_objstore_s3_open(s, url + 5, opts, err, errlen);
	} else if (!strncmp(url, "file://", 7)) {
		rc = tf_objstore_file_open(s, url + 7, err, errlen);
	} else if (strstr(url, "://")) {
		tf_errf(err, errlen,
		        "unsupported object store URL '%s': use file:///DIR, a path or "
		        "s3://BUCKET/PREFIX",
		        url);
		rc = -EINVAL;
	} else {
		rc = tf_objstore_file_open(s, url, err, errlen);
	}
	if (rc) {
		tf_objstore_free(s);
		return rc;
	}
	*out = s;
	return 0;
}

void tf_objstore_free(struct tf_objstore *s)
{
	if (!s)
		return;
	if (s->ops && s->impl)
		s->ops->free(s);
	free(s->url);
	free(s);
}

char *tf_objstore_home_url(const char *home)
{
	const char *env = getenv("TPUFLOW_STORE");
	if (env && *env)
		return tf_xstrdup(env);
	if (home[0] == '/')
		return tf_xasprintf("file://%s/objects", home);
	char cwd[4096];
	if (!getcwd(cwd, sizeof cwd))
		return tf_xasprintf("file://%s/objects", home);
	return tf_xasprintf("file://%s/%s/objects", cwd, home);
}

char *tf_objstore_url_absolute(const char *url)
{
	const char *path = !strncmp(url, "file://", 7) ? url + 7 : strstr(url, "://") ? NULL : url;
	char cwd[4096];
	if (!path || path[0] == '/' || !getcwd(cwd, sizeof cwd))
		return tf_xstrdup(url);
	while (path[0] == '.' && path[1] == '/')
		path += 2;
	return tf_xasprintf("file://%s/%s", cwd, path);
}

const char *tf_objstore_url(const struct tf_objstore *s)
{
	return s->url ? s->url : "";
}

const char *tf_objstore_errmsg(const struct tf_objstore *s)
{
	return s->err;
}

int tf_objstore_retryable(int rc)
{
	switch (rc) {
	case -EAGAIN:
	case -ETIMEDOUT:
	case -ECONNREFUSED:
	case -ECONNRESET:
	case -EHOSTUNREACH:
	case -ENETUNREACH:
	case -EIO:
	case -ENOSPC: /* file://: a full disk is freed, like a server that comes back */
	case -EDQUOT:
		return 1;
	default:
		return 0;
	}
}

static int bad_key(struct tf_objstore *s, const char *key)
{
	return tf_objstore_seterr(
	    s, -EINVAL,
	    "invalid object key '%s': keys are relative names without empty, '.' "
	    "or '..' segments, control characters or backslashes",
	    key ? key : "(null)");
}

int tf_objstore_put(struct tf_objstore *s, const char *key, const void *data, size_t len,
                    unsigned flags)
{
	s->err[0] = '\0';
	if (tf_objstore_key_check(key))
		return bad_key(s, key);
	return s->ops->put(s, key, data, len, flags);
}

int tf_objstore_get(struct tf_objstore *s, const char *key, void **data, size_t *len)
{
	s->err[0] = '\0';
	if (tf_objstore_key_check(key))
		return bad_key(s, key);
	return s->ops->get(s, key, data, len);
}

int tf_objstore_put_file(struct tf_objstore *s, const char *key, const char *path, unsigned flags)
{
	s->err[0] = '\0';
	if (tf_objstore_key_check(key))
		return bad_key(s, key);
	return s->ops->put_file(s, key, path, flags);
}

int tf_objstore_get_file(struct tf_objstore *s, const char *key, const char *path)
{
	s->err[0] = '\0';
	if (tf_objstore_key_check(key))
		return bad_key(s, key);
	return s->ops->get_file(s, key, path);
}

int tf_objstore_head(struct tf_objstore *s, const char *key, struct tf_obj_info *info)
{
	s->err[0] = '\0';
	if (tf_objstore_key_check(key))
		return bad_key(s, key);
	struct tf_obj_info tmp;
	memset(&tmp, 0, sizeof tmp);
	int rc = s->ops->head(s, key, &tmp);
	if (!rc)
		*info = tmp;
	return rc;
}

int tf_objstore_delete(struct tf_objstore *s, const char *key)
{
	s->err[0] = '\0';
	if (tf_objstore_key_check(key))
		return bad_key(s, key);
	return s->ops->del(s, key);
}

static int entry_cmp(const void *a, const void *b)
{
	const struct tf_obj_entry *x = a, *y = b;
	return strcmp(x->key, y->key);
}

int tf_objstore_list(struct tf_objstore *s, const char *prefix, struct tf_obj_list *out)
{
	s->err[0] = '\0';
	if (!prefix)
		prefix = "";
	if (prefix_check(prefix))
		return tf_objstore_seterr(s, -EINVAL, "invalid listing prefix '%s'", prefix);
	size_t start = out->n;
	int rc = s->ops->list(s, prefix, out);
	if (rc) {
		for (size_t i = start; i < out->n; i++)
			free(out->v[i].key);
		out->n = start;
		return rc;
	}
	if (out->n > start)
		qsort(out->v + start, out->n - start, sizeof *out->v, entry_cmp);
	return 0;
}

int tf_objstore_gc_uploads(struct tf_objstore *s, const char *prefix, double older_than,
                           int *aborted)
{
	s->err[0] = '\0';
	if (!prefix)
		prefix = "";
	if (prefix_check(prefix))
		return tf_objstore_seterr(s, -EINVAL, "invalid prefix '%s'", prefix);
	int n = 0;
	int rc = s->ops->gc_uploads(s, prefix, older_than, &n);
	if (!rc && aborted)
		*aborted = n;
	return rc;
}

int tf_objstore_create_bucket(struct tf_objstore *s)
{
	s->err[0] = '\0';
	return s->ops->mkbucket(s);
}

void tf_objstore_stats(const struct tf_objstore *s, struct tf_obj_stats *out)
{
	memset(out, 0, sizeof *out);
	if (s->ops->stats)
		s->ops->stats(s, out);
}

void tf_obj_list_push(struct tf_obj_list *l, const char *key, uint64_t size, double mtime)
{
	if (l->n == l->cap) {
		l->cap = l->cap ? l->cap * 2 : 64;
		l->v = tf_xrealloc(l->v, l->cap * sizeof *l->v);
	}
	l->v[l->n].key = tf_xstrdup(key);
	l->v[l->n].size = size;
	l->v[l->n].mtime = mtime;
	l->n++;
}

void tf_obj_list_release(struct tf_obj_list *l)
{
	if (!l)
		return;
	for (size_t i = 0; i < l->n; i++)
		free(l->v[i].key);
	free(l->v);
	memset(l, 0, sizeof *l);
}

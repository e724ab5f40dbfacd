/* objstore_int.h — what a backend implements, and the helpers objstore.c shares with them.
 * Private to storage/: other folders use storage/objstore.h only.
 *
 * Invariants the dispatcher (objstore.c) guarantees before a backend op runs:
 *   1. the key passed tf_objstore_key_check (backends never see an escaping key);
 *   2. the error message was cleared, so a backend sets it only when it fails;
 *   3. out-parameters are the caller's and are written only on success.
 */
#ifndef TF_OBJSTORE_INT_H
#define TF_OBJSTORE_INT_H

#include "storage/objstore.h"

#include <stdarg.h>

/* One backend: one exported const instance per scheme (tf_objstore_file_ops, ...). */
struct tf_objstore_ops {
	const char *scheme; /* "file", "s3" */
	int (*put)(struct tf_objstore *s, const char *key, const void *data, size_t len,
	           unsigned flags);
	int (*get)(struct tf_objstore *s, const char *key, void **data, size_t *len);
	int (*put_file)(struct tf_objstore *s, const char *key, const char *path, unsigned flags);
	int (*get_file)(struct tf_objstore *s, const char *key, const char *path);
	int (*head)(struct tf_objstore *s, const char *key, struct tf_obj_info *info);
	int (*del)(struct tf_objstore *s, const char *key);
	/* appends to out (the dispatcher sorts and rolls back on failure) */
	int (*list)(struct tf_objstore *s, const char *prefix, struct tf_obj_list *out);
	int (*gc_uploads)(struct tf_objstore *s, const char *prefix, double older_than,
	                  int *aborted);
	int (*mkbucket)(struct tf_objstore *s);
	void (*stats)(const struct tf_objstore *s, struct tf_obj_stats *out); /* NULL: zeros */
	void (*free)(struct tf_objstore *s); /* frees s->impl only */
};

struct tf_objstore {
	const struct tf_objstore_ops *ops; /* the backend */
	void *impl;                        /* the backend's state */
	char *url;                         /* normalised URL (owned) */
	char err[1024];                    /* last error for people */
};

extern const struct tf_objstore_ops tf_objstore_file_ops;
extern const struct tf_objstore_ops tf_objstore_s3_ops;

/* Backend constructors: fill s->impl (and may normalise s->url); on failure write err. */
int tf_objstore_file_open(struct tf_objstore *s, const char *path, char *err, size_t errlen);
int tf_objstore_s3_open(struct tf_objstore *s, const char *bucket_and_prefix,
                        const struct tf_objstore_opts *opts, char *err, size_t errlen);

/* For tests and tools: starts a multipart upload of key on an s3:// store and leaves it
 * open, as a writer that crashed would; its id goes to id. */
int tf_objstore_s3_begin_upload(struct tf_objstore *s, const char *key, char *id, size_t idlen);

/* Sets s->err (printf style) and returns rc, so a backend can `return seterr(...)`-style set
 * and propagate in one line at its single exit. */
int tf_objstore_seterr(struct tf_objstore *s, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Appends one entry (key copied). */
void tf_obj_list_push(struct tf_obj_list *l, const char *key, uint64_t size, double mtime);

#endif

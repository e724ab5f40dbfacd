/* objstore.h — one small object-storage interface with two backends:
 *
 *   file://DIR           the embedded default (under the state home): each key is a file below
 *                        DIR, written atomically (temp file, fsync, rename, fsync directory)
 *   s3://bucket/prefix   any S3-compatible server over libcurl, SigV4 signed by tpuflow,
 *                        multipart above a threshold, checksums, retries with full jitter
 *
 * Keys are '/'-separated relative names ("runs/7/train/ckpt/step-10/manifest.json"). A key must
 * be non-empty, at most TF_OBJ_KEY_MAX bytes, must not start or end with '/', and must not
 * contain empty, "." or ".." segments or control characters: such keys are refused with
 * -EINVAL on every backend, so no key can escape the store's root.
 *
 * Errors: every call returns 0 or a negative errno-style code; the text for people (what
 * failed, where, and what to do) is then in tf_objstore_errmsg(). Codes that callers act on:
 *   -ENOENT    the object (or for s3, the bucket) does not exist
 *   -EEXIST    TF_OBJ_IF_NONE_MATCH and the object already exists
 *   -EACCES    the credentials were rejected
 *   -EBADMSG   the data failed its integrity check (after retries)
 *   -EAGAIN    the server kept failing (5xx, throttling, resets) until the retry budget ran out
 *   -ETIMEDOUT, -ECONNREFUSED, -EHOSTUNREACH: the endpoint could not be reached
 *   -EINVAL    bad key or URL; -ENOTSUP: an operation the backend cannot do
 *   -ELOOP     file://: the key passes through a symbolic link below the root (refused)
 *   -ENOSPC    file://: the disk is full (-EDQUOT: over quota)
 * tf_objstore_retryable(rc) tells transient codes apart from permanent ones (a full disk is
 * transient: steps that fail on it are infrastructure failures, retried by `on: [infra]`).
 *
 * Threads: one handle is used by one thread at a time (it keeps the last error and a
 * connection cache); open one handle per thread. The s3 backend uses its own worker threads
 * for multipart transfers internally.
 */
#ifndef TF_OBJSTORE_H
#define TF_OBJSTORE_H

#include <stddef.h>
#include <stdint.h>

#define TF_OBJ_KEY_MAX 1024

/* Flags for the put calls. */
enum {
	TF_OBJ_IF_NONE_MATCH = 1u << 0, /* write-once: fail with -EEXIST if the key exists */
};

struct tf_objstore; /* opaque; a backend behind a struct of function pointers */

/* Metadata of one object. */
struct tf_obj_info {
	uint64_t size;   /* bytes */
	double mtime;    /* last modified, seconds since the epoch (0 if unknown) */
	char etag[80];   /* the server's ETag without quotes ("" for file://) */
	uint32_t crc32c; /* CRC-32C of the whole object when has_crc32c */
	int has_crc32c;  /* 1 when the backend knows the object's CRC-32C */
};

/* One listed object. */
struct tf_obj_entry {
	char *key;     /* key relative to the store's root (owned by the list) */
	uint64_t size; /* bytes */
	double mtime;  /* last modified, seconds since the epoch */
};

/* A growable array of listed objects, sorted by key (bytewise). Zero-initialise, pass to
 * tf_objstore_list, release with tf_obj_list_release. */
struct tf_obj_list {
	struct tf_obj_entry *v; /* entries */
	size_t n;               /* used */
	size_t cap;             /* allocated */
};

/* Settings for opening a store. Fields left zero/NULL take their defaults: for s3 the standard
 * AWS environment variables (AWS_ENDPOINT_URL, AWS_REGION / AWS_DEFAULT_REGION,
 * AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN), then the built-in defaults. */
struct tf_objstore_opts {
	const char
	    *endpoint;      /* "http://127.0.0.1:18080"; default https://s3.REGION.amazonaws.com */
	const char *region; /* default "us-east-1" */
	const char *access_key; /* may contain ':' (e.g. Swift's "account:user") */
	const char *secret_key;
	const char *session_token;  /* optional, sent as x-amz-security-token */
	int addressing;             /* 0 auto: path-style for custom endpoints, else virtual-hosted
	                               (env TPUFLOW_S3_ADDRESSING=path|virtual); 1 path, 2 virtual */
	size_t multipart_threshold; /* objects at least this large go multipart (unless they
	                               would be one part); default 8 MiB */
	size_t part_size;           /* multipart part size (>= 5 MiB); default: the object in
	                               `parallel` parts of 32-64 MiB */
	int parallel;               /* parts in flight at once; default 4 */
	int max_attempts;           /* attempts per request, first included; default 5 */
	double retry_base;          /* backoff base in seconds; default 0.1 */
	double retry_cap;           /* backoff cap in seconds; default 20 */
	int retry_budget;           /* retries the handle may spend in total; default 500 */
	double connect_timeout;     /* seconds; default 10 */
	double timeout; /* seconds without progress before a transfer fails; default 60 */
	int list_page;  /* keys per listing request (1..1000); default 1000 */
};

/* Opens a store. url: "file:///abs/dir", "file://rel/dir", a plain path, or
 * "s3://bucket[/prefix]". opts may be NULL. On success *out is a new handle the caller owns
 * (tf_objstore_free); on failure a message is written to err (if errlen > 0). The file
 * backend creates DIR if missing. */
int tf_objstore_open(const char *url, struct tf_objstore **out, char *err, size_t errlen);
int tf_objstore_open_opts(const char *url, const struct tf_objstore_opts *opts,
                          struct tf_objstore **out, char *err, size_t errlen);
void tf_objstore_free(struct tf_objstore *s);

/* The store of a state home: $TPUFLOW_STORE when set (e.g. "s3://bucket/tpuflow"), else
 * "file://HOME/objects" (HOME made absolute). Returns a new string the caller frees. */
char *tf_objstore_home_url(const char *home);

/* url with a relative file:// path (or a bare relative path) made absolute against the
 * current directory, so a URL recorded with a run means the same store from anywhere; other
 * URLs are copied as they are. Returns a new string the caller frees. */
char *tf_objstore_url_absolute(const char *url);

/* The URL the store was opened with, normalised ("file:///abs/dir", "s3://bucket/prefix"). */
const char *tf_objstore_url(const struct tf_objstore *s);
/* The last error, for people ("" after a success). Valid until the next call on s. */
const char *tf_objstore_errmsg(const struct tf_objstore *s);
/* 1 when rc is worth retrying later (-EAGAIN, timeouts, connection errors), else 0. */
int tf_objstore_retryable(int rc);

/* Writes an object from memory (data is copied/sent; the caller keeps it). */
int tf_objstore_put(struct tf_objstore *s, const char *key, const void *data, size_t len,
                    unsigned flags);
/* Reads a whole object into a new buffer the caller frees (NUL-terminated for convenience;
 * *len excludes the NUL). -ENOENT when absent. */
int tf_objstore_get(struct tf_objstore *s, const char *key, void **data, size_t *len);
/* Streams a local file into an object (large files go multipart on s3). */
int tf_objstore_put_file(struct tf_objstore *s, const char *key, const char *path, unsigned flags);
/* Streams an object into a local file, replacing it atomically (temp file + rename). */
int tf_objstore_get_file(struct tf_objstore *s, const char *key, const char *path);
/* Object metadata; -ENOENT when absent. */
int tf_objstore_head(struct tf_objstore *s, const char *key, struct tf_obj_info *info);
/* Removes an object. -ENOENT when it did not exist on file://; S3 does not say whether a key
 * existed, so on s3:// deleting an absent key succeeds. */
int tf_objstore_delete(struct tf_objstore *s, const char *key);
/* Appends every object whose key starts with prefix ("" for all) to *out, sorted by key;
 * the s3 backend follows pagination. On failure *out is left as it was. */
int tf_objstore_list(struct tf_objstore *s, const char *prefix, struct tf_obj_list *out);
/* Aborts multipart uploads under prefix that were started more than older_than seconds ago
 * (abandoned by a crashed writer); *aborted (may be NULL) receives how many. A no-op
 * returning 0 on file://. */
int tf_objstore_gc_uploads(struct tf_objstore *s, const char *prefix, double older_than,
                           int *aborted);

/* Creates the bucket of an s3:// store (succeeds when it exists and is ours); on file://
 * the root directory already exists and this returns 0. */
int tf_objstore_create_bucket(struct tf_objstore *s);

/* Counters of a handle's traffic since it was opened (all zero on file://). */
struct tf_obj_stats {
	uint64_t requests;   /* HTTP requests sent, retries included */
	uint64_t retries;    /* requests sent again after a transient failure */
	uint64_t corrupt;    /* downloads whose checksum did not match (then retried) */
	uint64_t bytes_up;   /* payload bytes sent */
	uint64_t bytes_down; /* payload bytes received */
};
void tf_objstore_stats(const struct tf_objstore *s, struct tf_obj_stats *out);

/* Frees the entries and the array; the list is zeroed and may be reused. */
void tf_obj_list_release(struct tf_obj_list *l);

/* 0 when key is acceptable (see the rules above), else -EINVAL. */
int tf_objstore_key_check(const char *key);

#endif

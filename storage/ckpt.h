/* ckpt.h — the checkpoint manager: named tensors saved as shards, then a manifest written
 * last; only a checkpoint with a manifest exists.
 *
 * Layout under a key prefix P (a trailing '/' is added when missing):
 *   P/step-000000000010/manifest.json          written last, write-once
 *   P/step-000000000010/<save-id>.t0000 ...    one shard per tensor
 * The save id is random per save, so an abandoned or concurrent attempt at the same step
 * never overwrites shards a manifest points to. The manifest (JSON) records the format, the
 * step, the creation time, the caller's metadata and, per tensor, its name, shard key
 * (relative to P), size and CRC-32C, and its own CRC-32C (manifest_crc32c, over the compact
 * dump with sorted keys of everything else). Loading verifies the manifest and every shard.
 *
 * Errors are negative errno codes with the text in tf_objstore_errmsg(s) (the checkpoint
 * manager writes its own messages there too): -ENOENT no checkpoint, -EEXIST the step is
 * already saved, -EBADMSG a shard or manifest failed its check, -EINVAL bad arguments.
 */
#ifndef TF_CKPT_H
#define TF_CKPT_H

#include "storage/objstore.h"

#include <stddef.h>
#include <stdint.h>

#define TF_CKPT_FORMAT "tpuflow-ckpt/1"

/* One tensor to save (borrowed by tf_ckpt_save). */
struct tf_ckpt_tensor {
	const char *name; /* unique within a checkpoint, 1..255 bytes */
	const void *data; /* bytes as they are in memory */
	size_t bytes;
};

struct tf_ckpt; /* a loaded checkpoint (opaque) */

/* Saves tensors t[0..n) as checkpoint `step` under prefix, then its manifest. meta_json is a
 * JSON document (object recommended: RNG state, input position, optimizer layout) or NULL.
 * -EEXIST when that step already has a manifest. */
int tf_ckpt_save(struct tf_objstore *s, const char *prefix, int64_t step,
                 const struct tf_ckpt_tensor *t, size_t n, const char *meta_json);

/* The newest step under prefix that has a manifest; -ENOENT when there is none. */
int tf_ckpt_latest(struct tf_objstore *s, const char *prefix, int64_t *step);

/* Loads checkpoint `step` (every shard read and verified). *out is new, caller frees it with
 * tf_ckpt_free. -ENOENT when the step has no manifest; -EBADMSG when a shard stays corrupt
 * after re-reads. */
int tf_ckpt_load(struct tf_objstore *s, const char *prefix, int64_t step, struct tf_ckpt **out);

/* Called for each checkpoint tf_ckpt_load_latest passes over: its step and why (the
 * store's error text, valid during the call). */
typedef void (*tf_ckpt_skip_fn)(void *data, int64_t step, const char *why);

/* Loads the newest checkpoint under prefix that verifies: a checkpoint whose manifest or a
 * shard fails its check (-EBADMSG) is passed over with a warning in the log and a call of
 * on_skip (may be NULL), and the next older one is tried. *out (caller frees) is set only on
 * success. -ENOENT when there is no checkpoint, -EBADMSG when none verifies (the message
 * names the newest one's problem), or a store error, which stops the search. */
int tf_ckpt_load_latest(struct tf_objstore *s, const char *prefix, struct tf_ckpt **out,
                        tf_ckpt_skip_fn on_skip, void *data);

/* Accessors of a loaded checkpoint; pointers live as long as c. */
int64_t tf_ckpt_step(const struct tf_ckpt *c);
const char *tf_ckpt_meta(const struct tf_ckpt *c); /* compact JSON, "null" when none */
size_t tf_ckpt_count(const struct tf_ckpt *c);
/* The tensor called name (NULL when absent); *bytes (may be NULL) receives its size. */
const void *tf_ckpt_tensor(const struct tf_ckpt *c, const char *name, size_t *bytes);
/* The i-th tensor in save order: its name, data and size. */
const char *tf_ckpt_tensor_at(const struct tf_ckpt *c, size_t i, const void **data, size_t *bytes);
void tf_ckpt_free(struct tf_ckpt *c);

/* A summary of one complete checkpoint. */
struct tf_ckpt_info {
	int64_t step;   /* training step */
	double created; /* seconds since the epoch, from the manifest */
	size_t tensors; /* number of shards */
	uint64_t bytes; /* total shard bytes */
};

/* Complete checkpoints under prefix, oldest step first. *out is a new array the caller frees
 * (NULL when *n is 0). Checkpoints whose manifest cannot be parsed are skipped with a
 * warning in the log. */
int tf_ckpt_list(struct tf_objstore *s, const char *prefix, struct tf_ckpt_info **out, size_t *n);

/* The manifest of `step` as a new compact JSON string the caller frees. */
int tf_ckpt_manifest(struct tf_objstore *s, const char *prefix, int64_t step, char **json);

/* Retention and garbage collection. */
struct tf_ckpt_gc_opts {
	int keep_last;         /* keep the newest N complete checkpoints; <= 0 keeps all */
	const int64_t *pinned; /* steps that are kept whatever keep_last says (model versions) */
	size_t npinned;
	double grace; /* orphans and uploads younger than this many seconds are left
	                 alone, since a save may still be writing them; default 0 */
	int dry_run;  /* report what would go, delete nothing */
};

struct tf_ckpt_gc_result {
	size_t ckpts_deleted;   /* complete checkpoints removed by retention */
	size_t orphans_deleted; /* shards no manifest points to (abandoned saves) */
	size_t uploads_aborted; /* abandoned multipart uploads (s3) */
	uint64_t bytes_freed;   /* bytes of deleted objects */
};

/* Applies retention, then removes orphaned shards and abandoned multipart uploads under
 * prefix. A retired checkpoint's manifest is deleted before its shards, so no manifest ever
 * points to a missing shard. r may be NULL. */
int tf_ckpt_gc(struct tf_objstore *s, const char *prefix, const struct tf_ckpt_gc_opts *o,
               struct tf_ckpt_gc_result *r);

#endif

/* ckpt.c — the checkpoint manager (see ckpt.h for the layout).
 *
 * Invariants:
 *   1. A manifest is written only after every shard it names was written successfully, and
 *      it is written once (TF_OBJ_IF_NONE_MATCH): a checkpoint exists iff its manifest does.
 *   2. Shard keys carry a random save id, so no two saves share a shard key and a manifest's
 *      shards are never overwritten afterwards.
 *   3. Retention deletes a manifest before its shards; GC deletes a shard only when no
 *      manifest names it and it is older than the grace period. Together: no manifest ever
 *      points to a missing shard.
 *   4. Loading checks every shard's size and CRC-32C; a mismatch is re-read (a transfer may
 *      have been corrupted) before it is reported as -EBADMSG.
 */
#define TF_LOG_TAG "ckpt"
#include "storage/ckpt.h"

#include "common/common.h"
#include "common/crc32c.h"
#include "common/log.h"
#include "storage/objstore_int.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#define MANIFEST_NAME "manifest.json"
#define MANIFEST_MAX (64u << 20)
#define LOAD_ATTEMPTS 3

/* One tensor entry of a manifest. */
struct mtensor {
	char *name;     /* tensor name */
	char *key;      /* shard key relative to the prefix */
	uint64_t bytes; /* shard size */
	uint32_t crc;   /* CRC-32C of the shard */
	void *data;     /* loaded bytes (tf_ckpt only) */
};

struct tf_ckpt {
	int64_t step;      /* training step */
	double created;    /* wall time of the save */
	char *meta;        /* compact JSON of the caller's metadata */
	size_t n;          /* tensors */
	struct mtensor *t; /* in save order */
};

/* "a/b" -> "a/b/", "" stays "". Caller frees. */
static char *norm_prefix(const char *prefix)
{
	if (!prefix || !*prefix)
		return tf_xstrdup("");
	size_t n = strlen(prefix);
	return prefix[n - 1] == '/' ? tf_xstrdup(prefix) : tf_xasprintf("%s/", prefix);
}

static char *step_dir(const char *p, int64_t step)
{
	return tf_xasprintf("%sstep-%012" PRId64 "/", p, step);
}

/* Parses "<p>step-DIGITS/<rest>" into the step; returns the pointer to rest or NULL. */
static const char *parse_step_key(const char *key, const char *p, int64_t *step)
{
	size_t plen = strlen(p);
	if (strncmp(key, p, plen) || strncmp(key + plen, "step-", 5))
		return NULL;
	const char *d = key + plen + 5, *e = d;
	int64_t v = 0;
	while (*e >= '0' && *e <= '9' && e - d < 18)
		v = v * 10 + (*e++ - '0');
	if (e == d || *e != '/')
		return NULL;
	*step = v;
	return e + 1;
}

static void manifest_clear(struct tf_ckpt *c)
{
	for (size_t i = 0; i < c->n; i++) {
		free(c->t[i].name);
		free(c->t[i].key);
		free(c->t[i].data);
	}
	free(c->t);
	free(c->meta);
	memset(c, 0, sizeof *c);
}

void tf_ckpt_free(struct tf_ckpt *c)
{
	if (!c)
		return;
	manifest_clear(c);
	free(c);
}

/* CRC-32C of a manifest without its manifest_crc32c member, over its compact dump with
 * sorted keys: jansson prints numbers so that they parse back to the same value, so the
 * writer and every reader compute it over the same bytes. */
static uint32_t manifest_crc(json_t *root)
{
	json_t *copy = json_copy(root);
	json_object_del(copy, "manifest_crc32c");
	char *text = json_dumps(copy, JSON_COMPACT | JSON_SORT_KEYS);
	uint32_t crc = text ? tf_crc32c(text, strlen(text)) : 0;
	free(text);
	json_decref(copy);
	return crc;
}

/* Parses manifest text into c (zeroed by the caller). */
static int manifest_parse(struct tf_objstore *s, const char *where, const char *text, size_t len,
                          struct tf_ckpt *c)
{
	json_error_t jerr;
	json_t *root = json_loadb(text, len, 0, &jerr);
	int rc = -EBADMSG;
	if (!root) {
		tf_objstore_seterr(s, rc,
		                   "checkpoint manifest '%s' is not valid JSON (line %d: %s)",
		                   where, jerr.line, jerr.text);
		return rc;
	}
	/* the manifest's own checksum (absent in manifests of older versions): a flipped byte
	 * in the metadata would otherwise restore a wrong training state silently */
	json_t *mcrc = json_object_get(root, "manifest_crc32c");
	if (mcrc) {
		char want[16];
		snprintf(want, sizeof want, "%08x", manifest_crc(root));
		if (!json_is_string(mcrc) || strcmp(json_string_value(mcrc), want)) {
			tf_objstore_seterr(s, rc,
			                   "checkpoint manifest '%s' fails its own CRC-32C (%s, "
			                   "expected %s): it is damaged",
			                   where, json_string_value(mcrc) ?: "?", want);
			goto out;
		}
	}
	const char *format = json_string_value(json_object_get(root, "format"));
	json_t *step = json_object_get(root, "step");
	json_t *tensors = json_object_get(root, "tensors");
	if (!format || strcmp(format, TF_CKPT_FORMAT) || !json_is_integer(step) ||
	    !json_is_array(tensors)) {
		tf_objstore_seterr(s, rc,
		                   "checkpoint manifest '%s' is not a " TF_CKPT_FORMAT
		                   " manifest (format, step or tensors missing)",
		                   where);
		goto out;
	}
	c->step = json_integer_value(step);
	c->created = json_number_value(json_object_get(root, "created"));
	json_t *meta = json_object_get(root, "meta");
	c->meta = json_dumps(meta ? meta : json_null(), JSON_COMPACT | JSON_ENCODE_ANY);
	c->n = json_array_size(tensors);
	c->t = tf_xcalloc(c->n ? c->n : 1, sizeof *c->t);
	for (size_t i = 0; i < c->n; i++) {
		json_t *e = json_array_get(tensors, i);
		const char *name = json_string_value(json_object_get(e, "name"));
		const char *key = json_string_value(json_object_get(e, "key"));
		json_t *bytes = json_object_get(e, "bytes");
		const char *crc = json_string_value(json_object_get(e, "crc32c"));
		char *end = NULL;
		unsigned long crcv = crc ? strtoul(crc, &end, 16) : 0;
		if (!name || !key || !json_is_integer(bytes) || json_integer_value(bytes) < 0 ||
		    !crc || strlen(crc) != 8 || *end) {
			tf_objstore_seterr(
			    s, rc, "checkpoint manifest '%s': tensor %zu is malformed", where, i);
			goto out;
		}
		c->t[i].name = tf_xstrdup(name);
		c->t[i].key = tf_xstrdup(key);
		c->t[i].bytes = (uint64_t)json_integer_value(bytes);
		c->t[i].crc = (uint32_t)crcv;
	}
	rc = 0;
out:
	json_decref(root);
	return rc;
}

static int manifest_read(struct tf_objstore *s, const char *p, int64_t step, struct tf_ckpt *c)
{
	char *dir = step_dir(p, step);
	char *key = tf_xasprintf("%s" MANIFEST_NAME, dir);
	void *text = NULL;
	size_t len = 0;
	int rc = tf_objstore_get(s, key, &text, &len);
	if (rc == -ENOENT)
		tf_objstore_seterr(s, rc, "no checkpoint at step %" PRId64 " under '%s' in %s",
		                   step, p, tf_objstore_url(s));
	if (!rc)
		rc = manifest_parse(s, key, text, len, c);
	if (!rc && c->step != step)
		rc = tf_objstore_seterr(s, -EBADMSG, "checkpoint manifest '%s' says step %" PRId64,
		                        key, c->step);
	if (rc)
		manifest_clear(c);
	free(text);
	free(key);
	free(dir);
	return rc;
}

int tf_ckpt_manifest(struct tf_objstore *s, const char *prefix, int64_t step, char **json)
{
	char *p = norm_prefix(prefix);
	char *key = step_dir(p, step);
	char *mkey = tf_xasprintf("%s" MANIFEST_NAME, key);
	void *text = NULL;
	size_t len = 0;
	int rc = tf_objstore_get(s, mkey, &text, &len);
	if (rc == -ENOENT)
		tf_objstore_seterr(s, rc, "no checkpoint at step %" PRId64 " under '%s' in %s",
		                   step, p, tf_objstore_url(s));
	if (!rc) {
		json_error_t jerr;
		json_t *root = json_loadb(text, len, 0, &jerr);
		if (!root) {
			rc = tf_objstore_seterr(s, -EBADMSG,
			                        "checkpoint manifest '%s' is not valid JSON", mkey);
		} else {
			*json = json_dumps(root, JSON_COMPACT);
			json_decref(root);
		}
	}
	free(text);
	free(mkey);
	free(key);
	free(p);
	return rc;
}

static void random_id(char out[9])
{
	unsigned char b[4];
	if (getrandom(b, sizeof b, 0) != (ssize_t)sizeof b) {
		/* entropy is unavailable only in odd sandboxes: fall back to time and address */
		uint64_t v = (uint64_t)(tf_now_wall() * 1e9) ^ (uint64_t)(uintptr_t)out;
		memcpy(b, &v, sizeof b);
	}
	snprintf(out, 9, "%02x%02x%02x%02x", b[0], b[1], b[2], b[3]);
}

int tf_ckpt_save(struct tf_objstore *s, const char *prefix, int64_t step,
                 const struct tf_ckpt_tensor *t, size_t n, const char *meta_json)
{
	char *p = norm_prefix(prefix);
	char *dir = step_dir(p, step);
	char *mkey = tf_xasprintf("%s" MANIFEST_NAME, dir);
	json_t *root = NULL, *meta = NULL;
	char *text = NULL;
	int rc = 0;

	if (step < 0 || step > 999999999999LL) {
		rc = tf_objstore_seterr(s, -EINVAL, "checkpoint step %" PRId64 " is out of range",
		                        step);
		goto out;
	}
	if (meta_json) {
		json_error_t jerr;
		meta = json_loads(meta_json, JSON_DECODE_ANY, &jerr);
		if (!meta) {
			rc = tf_objstore_seterr(
			    s, -EINVAL, "checkpoint metadata is not valid JSON: %s at column %d",
			    jerr.text, jerr.column);
			goto out;
		}
	}
	for (size_t i = 0; i < n; i++) {
		size_t len = t[i].name ? strlen(t[i].name) : 0;
		if (len == 0 || len > 255 || (t[i].bytes && !t[i].data)) {
			rc = tf_objstore_seterr(s, -EINVAL,
			                        "checkpoint tensor %zu has no name, a name "
			                        "over 255 bytes, or no data",
			                        i);
			goto out;
		}
		for (size_t j = 0; j < i; j++)
			if (!strcmp(t[i].name, t[j].name)) {
				rc = tf_objstore_seterr(s, -EINVAL,
				                        "checkpoint tensor name '%s' is used twice",
				                        t[i].name);
				goto out;
			}
	}
	struct tf_obj_info info;
	rc = tf_objstore_head(s, mkey, &info);
	if (!rc) {
		rc = tf_objstore_seterr(
		    s, -EEXIST, "checkpoint step %" PRId64 " already exists under '%s' in %s", step,
		    p, tf_objstore_url(s));
		goto out;
	}
	if (rc != -ENOENT)
		goto out;

	char id[9];
	random_id(id);
	root = json_object();
	json_object_set_new(root, "format", json_string(TF_CKPT_FORMAT));
	json_object_set_new(root, "step", json_integer(step));
	json_object_set_new(root, "created", json_real(tf_now_wall()));
	json_object_set_new(root, "save_id", json_string(id));
	json_object_set_new(root, "meta", meta ? meta : json_null());
	meta = NULL;
	json_t *arr = json_array();
	json_object_set_new(root, "tensors", arr);
	double t0 = tf_now_monotonic();
	uint64_t total = 0;
	for (size_t i = 0; i < n; i++) {
		char *rel = tf_xasprintf("step-%012" PRId64 "/%s.t%04zu", step, id, i);
		char *key = tf_xasprintf("%s%s", p, rel);
		rc = tf_objstore_put(s, key, t[i].data, t[i].bytes, 0);
		free(key);
		if (rc) {
			free(rel);
			goto out; /* the shards written so far are orphans for gc */
		}
		char crc[9];
		snprintf(crc, sizeof crc, "%08x", tf_crc32c(t[i].data, t[i].bytes));
		json_t *e = json_object();
		json_object_set_new(e, "name", json_string(t[i].name));
		json_object_set_new(e, "key", json_string(rel));
		json_object_set_new(e, "bytes", json_integer((json_int_t)t[i].bytes));
		json_object_set_new(e, "crc32c", json_string(crc));
		json_array_append_new(arr, e);
		total += t[i].bytes;
		free(rel);
	}
	char mcrc[16];
	snprintf(mcrc, sizeof mcrc, "%08x", manifest_crc(root));
	json_object_set_new(root, "manifest_crc32c", json_string(mcrc));
	text = json_dumps(root, JSON_INDENT(1));
	rc = tf_objstore_put(s, mkey, text, strlen(text), TF_OBJ_IF_NONE_MATCH);
	if (rc == -EEXIST) {
		/* A retried PUT whose first attempt landed reports "exists": it is ours when the
		 * stored manifest is byte-identical (the save id makes that unambiguous). */
		void *back = NULL;
		size_t blen = 0;
		if (!tf_objstore_get(s, mkey, &back, &blen) && blen == strlen(text) &&
		    !memcmp(back, text, blen))
			rc = 0;
		else
			tf_objstore_seterr(s, -EEXIST,
			                   "checkpoint step %" PRId64
			                   " was saved concurrently by another writer under '%s'",
			                   step, p);
		free(back);
	}
	if (!rc)
		tf_info("saved checkpoint step %" PRId64 " (%zu tensors, %" PRIu64
		        " bytes) in %.3f s under %s%s",
		        step, n, total, tf_now_monotonic() - t0, tf_objstore_url(s), p);
out:
	json_decref(meta);
	json_decref(root);
	free(text);
	free(mkey);
	free(dir);
	free(p);
	return rc;
}

/* Steps that have a manifest, ascending; from one listing of the prefix. If `all` is not
 * NULL the listing itself is handed back. */
static int complete_steps(struct tf_objstore *s, const char *p, int64_t **steps, size_t *n,
                          struct tf_obj_list *all)
{
	struct tf_obj_list l = {0};
	char *lp = tf_xasprintf("%sstep-", p);
	int rc = tf_objstore_list(s, lp, &l);
	free(lp);
	if (rc)
		return rc;
	int64_t *v = NULL;
	size_t cnt = 0;
	for (size_t i = 0; i < l.n; i++) {
		int64_t step;
		const char *rest = parse_step_key(l.v[i].key, p, &step);
		if (rest && !strcmp(rest, MANIFEST_NAME)) {
			v = tf_xrealloc(v, (cnt + 1) * sizeof *v);
			v[cnt++] = step;
		}
	}
	/* keys sort bytewise and step dirs are zero-padded, so v is ascending already */
	*steps = v;
	*n = cnt;
	if (all)
		*all = l;
	else
		tf_obj_list_release(&l);
	return 0;
}

int tf_ckpt_latest(struct tf_objstore *s, const char *prefix, int64_t *step)
{
	char *p = norm_prefix(prefix);
	int64_t *v = NULL;
	size_t n = 0;
	int rc = complete_steps(s, p, &v, &n, NULL);
	if (!rc && n == 0)
		rc = tf_objstore_seterr(s, -ENOENT, "no complete checkpoint under '%s' in %s", p,
		                        tf_objstore_url(s));
	if (!rc)
		*step = v[n - 1];
	free(v);
	free(p);
	return rc;
}

int tf_ckpt_load(struct tf_objstore *s, const char *prefix, int64_t step, struct tf_ckpt **out)
{
	char *p = norm_prefix(prefix);
	struct tf_ckpt *c = tf_xcalloc(1, sizeof *c);
	int rc = manifest_read(s, p, step, c);
	for (size_t i = 0; !rc && i < c->n; i++) {
		char *key = tf_xasprintf("%s%s", p, c->t[i].key);
		for (int attempt = 1;; attempt++) {
			void *data = NULL;
			size_t len = 0;
			rc = tf_objstore_get(s, key, &data, &len);
			if (rc == -ENOENT) {
				tf_objstore_seterr(
				    s, -EBADMSG,
				    "checkpoint step %" PRId64
				    " is damaged: its manifest names shard '%s', which is "
				    "missing",
				    step, key);
				rc = -EBADMSG;
				break;
			}
			if (rc)
				break;
			uint32_t crc = tf_crc32c(data, len);
			if (len == c->t[i].bytes && crc == c->t[i].crc) {
				c->t[i].data = data;
				break;
			}
			free(data);
			tf_warn("shard '%s' read %zu bytes crc32c %08x, expected %" PRIu64
			        " bytes crc32c %08x (attempt %d of %d)",
			        key, len, crc, c->t[i].bytes, c->t[i].crc, attempt, LOAD_ATTEMPTS);
			if (attempt == LOAD_ATTEMPTS) {
				rc = tf_objstore_seterr(
				    s, -EBADMSG,
				    "checkpoint shard '%s' fails its check (size %zu, "
				    "crc32c %08x; the manifest says %" PRIu64
				    " bytes, crc32c %08x)",
				    key, len, crc, c->t[i].bytes, c->t[i].crc);
				break;
			}
		}
		free(key);
	}
	free(p);
	if (rc) {
		tf_ckpt_free(c);
		return rc;
	}
	*out = c;
	return 0;
}

int tf_ckpt_load_latest(struct tf_objstore *s, const char *prefix, struct tf_ckpt **out,
                        tf_ckpt_skip_fn on_skip, void *data)
{
	char *p = norm_prefix(prefix);
	int64_t *v = NULL;
	size_t n = 0, tried = 0;
	char *first = NULL; /* why the newest checkpoint tried was refused */
	struct tf_ckpt *c = NULL;
	int rc = complete_steps(s, p, &v, &n, NULL);
	for (size_t i = n; !rc && !c && i-- > 0;) {
		rc = tf_ckpt_load(s, p, v[i], &c);
		if (rc != -ENOENT && rc != -EBADMSG)
			break; /* loaded, or the store failed: nothing to fall back on */
		if (rc == -EBADMSG) {
			const char *why = tf_objstore_errmsg(s);
			tf_warn("checkpoint step %" PRId64 " under '%s' in %s fails verification; "
			        "trying an older one: %s",
			        v[i], p, tf_objstore_url(s), why);
			if (on_skip)
				on_skip(data, v[i], why);
			if (!first)
				first = tf_xstrdup(why);
			tried++;
		}
		rc = 0; /* -ENOENT: retired by a concurrent gc since the listing */
	}
	if (!rc && !c && first)
		rc = tf_objstore_seterr(s, -EBADMSG,
		                        "no checkpoint under '%s' in %s verifies (%zu tried); the "
		                        "newest: %s",
		                        p, tf_objstore_url(s), tried, first);
	else if (!rc && !c)
		rc = tf_objstore_seterr(s, -ENOENT, "no complete checkpoint under '%s' in %s", p,
		                        tf_objstore_url(s));
	if (!rc)
		*out = c;
	free(first);
	free(v);
	free(p);
	return rc;
}

int64_t tf_ckpt_step(const struct tf_ckpt *c)
{
	return c->step;
}

const char *tf_ckpt_meta(const struct tf_ckpt *c)
{
	return c->meta ? c->meta : "null";
}

size_t tf_ckpt_count(const struct tf_ckpt *c)
{
	return c->n;
}

const void *tf_ckpt_tensor(const struct tf_ckpt *c, const char *name, size_t *bytes)
{
	for (size_t i = 0; i < c->n; i++)
		if (!strcmp(c->t[i].name, name)) {
			if (bytes)
				*bytes = (size_t)c->t[i].bytes;
			return c->t[i].data;
		}
	return NULL;
}

const char *tf_ckpt_tensor_at(const struct tf_ckpt *c, size_t i, const void **data, size_t *bytes)
{
	if (i >= c->n)
		return NULL;
	if (data)
		*data = c->t[i].data;
	if (bytes)
		*bytes = (size_t)c->t[i].bytes;
	return c->t[i].name;
}

int tf_ckpt_list(struct tf_objstore *s, const char *prefix, struct tf_ckpt_info **out, size_t *n)
{
	char *p = norm_prefix(prefix);
	int64_t *steps = NULL;
	size_t ns = 0, cnt = 0;
	struct tf_ckpt_info *v = NULL;
	int rc = complete_steps(s, p, &steps, &ns, NULL);
	for (size_t i = 0; !rc && i < ns; i++) {
		struct tf_ckpt c;
		memset(&c, 0, sizeof c);
		int r = manifest_read(s, p, steps[i], &c);
		if (r == -ENOENT || r == -EBADMSG) {
			/* deleted since the listing, or unreadable: say so and go on */
			tf_warn("%s", tf_objstore_errmsg(s));
			continue;
		}
		if (r) {
			rc = r;
			break;
		}
		v = tf_xrealloc(v, (cnt + 1) * sizeof *v);
		v[cnt].step = c.step;
		v[cnt].created = c.created;
		v[cnt].tensors = c.n;
		v[cnt].bytes = 0;
		for (size_t j = 0; j < c.n; j++)
			v[cnt].bytes += c.t[j].bytes;
		cnt++;
		manifest_clear(&c);
	}
	free(steps);
	free(p);
	if (rc) {
		free(v);
		return rc;
	}
	s->err[0] = '\0';
	*out = v;
	*n = cnt;
	return 0;
}

static int is_kept(int64_t step, size_t idx, size_t n, const struct tf_ckpt_gc_opts *o)
{
	if (o->keep_last <= 0 || idx + (size_t)o->keep_last >= n)
		return 1;
	for (size_t i = 0; i < o->npinned; i++)
		if (o->pinned[i] == step)
			return 1;
	return 0;
}

/* Is key named by one of the kept manifests? refs is sorted. */
static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int tf_ckpt_gc(struct tf_objstore *s, const char *prefix, const struct tf_ckpt_gc_opts *o,
               struct tf_ckpt_gc_result *r)
{
	static const struct tf_ckpt_gc_opts defaults;
	if (!o)
		o = &defaults;
	struct tf_ckpt_gc_result res;
	memset(&res, 0, sizeof res);
	char *p = norm_prefix(prefix);
	int64_t *steps = NULL;
	size_t ns = 0, nrefs = 0;
	char **refs = NULL;
	struct tf_obj_list all = {0};
	double now = tf_now_wall();
	char *retired = NULL; /* retired[i]: steps[i] was retired by retention */
	int rc = complete_steps(s, p, &steps, &ns, &all);
	if (rc)
		goto out;
	retired = tf_xcalloc(ns ? ns : 1, 1);

	/* 1. retention: retire manifests first (invariant 3), remember kept shard keys */
	for (size_t i = 0; i < ns; i++) {
		struct tf_ckpt c;
		memset(&c, 0, sizeof c);
		rc = manifest_read(s, p, steps[i], &c);
		if (rc == -ENOENT) {
			rc = 0;
			continue;
		}
		if (rc == -EBADMSG) {
			/* an unreadable manifest names nothing we can trust; keep its directory
			 * untouched rather than guess, and say so */
			tf_warn("gc: leaving step %" PRId64 " alone: %s", steps[i],
			        tf_objstore_errmsg(s));
			char *d = step_dir(p, steps[i]);
			refs = tf_xrealloc(refs, (nrefs + 1) * sizeof *refs);
			refs[nrefs++] = d; /* a directory prefix: matched below */
			rc = 0;
			continue;
		}
		if (rc)
			goto out;
		if (is_kept(steps[i], i, ns, o)) {
			for (size_t j = 0; j < c.n; j++) {
				refs = tf_xrealloc(refs, (nrefs + 1) * sizeof *refs);
				refs[nrefs++] = tf_xasprintf("%s%s", p, c.t[j].key);
			}
		} else {
			char *mkey = step_dir(p, steps[i]);
			char *m = tf_xasprintf("%s" MANIFEST_NAME, mkey);
			rc = o->dry_run ? 0 : tf_objstore_delete(s, m);
			if (rc == -ENOENT)
				rc = 0;
			free(m);
			free(mkey);
			if (rc) {
				manifest_clear(&c);
				goto out;
			}
			res.ckpts_deleted++;
			retired[i] = 1;
			tf_info("gc: retired checkpoint step %" PRId64 " under %s%s", steps[i],
			        tf_objstore_url(s), p);
		}
		manifest_clear(&c);
	}
	if (nrefs)
		qsort(refs, nrefs, sizeof *refs, cmp_str);

	/* 2. every other object under step-*: shards of retired checkpoints (any age) and
	 * orphans of abandoned saves (older than the grace period) */
	for (size_t i = 0; i < all.n; i++) {
		int64_t step;
		const char *key = all.v[i].key;
		const char *rest = parse_step_key(key, p, &step);
		if (!rest)
			continue;
		if (!strcmp(rest, MANIFEST_NAME))
			continue; /* kept manifests stay; retired ones were deleted above */
		if (nrefs && bsearch(&key, refs, nrefs, sizeof *refs, cmp_str))
			continue;
		int protected_dir = 0;
		for (size_t j = 0; j < nrefs && !protected_dir; j++) {
			size_t l = strlen(refs[j]);
			protected_dir = refs[j][l - 1] == '/' && !strncmp(key, refs[j], l);
		}
		if (protected_dir)
			continue;
		int gone = 0;
		for (size_t j = 0; j < ns; j++)
			gone |= retired[j] && steps[j] == step;
		/* a retired step's shards go now; anything else may belong to a save in flight */
		if (!gone && o->grace > 0 && now - all.v[i].mtime < o->grace)
			continue;
		rc = o->dry_run ? 0 : tf_objstore_delete(s, key);
		if (rc == -ENOENT)
			rc = 0;
		if (rc)
			goto out;
		res.bytes_freed += all.v[i].size;
		if (gone)
			continue;
		res.orphans_deleted++;
		tf_info("gc: removed orphaned shard '%s'", key);
	}

	/* 3. abandoned multipart uploads */
	if (!o->dry_run) {
		int aborted = 0;
		rc = tf_objstore_gc_uploads(s, p, o->grace, &aborted);
		if (rc)
			goto out;
		res.uploads_aborted = (size_t)aborted;
	}
out:
	for (size_t i = 0; i < nrefs; i++)
		free(refs[i]);
	free(refs);
	free(retired);
	free(steps);
	tf_obj_list_release(&all);
	free(p);
	if (!rc && r)
		*r = res;
	return rc;
}

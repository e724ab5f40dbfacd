/* engine_cache.c — the step cache and the artifacts of a run: a step's cache key, the lookup
 * of a cached result (valid only while what it names is still in the object store), and the
 * artifacts rows of a step's outputs.
 *
 * Cache key of a step (hex SHA-256): program version, the object store's normalised URL,
 * step type, step name, accelerator, the resolved `with` as canonical JSON (sorted keys), the
 * contents of its `cache_inputs` files, and for every need its outputs and metrics as
 * canonical JSON plus the size/checksum of each output that names an object in the store.
 * A hit counts only when what the cached step left in the store is still there
 * (cache_in_store). register and deploy are never cached (they act on the registry).
 */
#include "orchestrator/engine_int.h"
#include "common/digest.h"

#define TF_LOG_TAG "engine"
#include "common/common.h"
#include "common/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef TF_VERSION
#define TF_VERSION "0"
#endif

char *tf_engine_canon(const json_t *v)
{
	if (!v)
		return tf_xstrdup("null");
	char *s = json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
	return s ? s : tf_xstrdup("null");
}

/* ---- the step cache ------------------------------------------------------------------ */

/* The step's cache key into out; -errno with err set when a `cache_inputs` file cannot be
 * read. */
int tf_engine_cache_key(struct engine *e, struct estep *s, struct tf_objstore *os, char out[65],
                        char *err, size_t errlen)
{
	struct tf_sha256 *h = tf_sha256_new();
	char *w = tf_engine_canon(s->with);
	tf_sha256_update_str(h, "tpuflow-step-cache-2");
	tf_sha256_update_str(h, TF_VERSION);
	tf_sha256_update_str(h, os ? tf_objstore_url(os) : e->storage_url);
	tf_sha256_update_str(h, tf_step_type_name(s->def->type));
	tf_sha256_update_str(h, s->def->name);
	tf_sha256_update_str(h, s->def->accelerator);
	tf_sha256_update_str(h, w);
	free(w);
	int rc = 0;
	for (size_t i = 0; i < s->def->ncache_inputs && rc == 0; i++) {
		tf_sha256_update_str(h, s->def->cache_inputs[i]);
		rc = tf_sha256_update_file(h, s->def->cache_inputs[i]);
		if (rc)
			tf_errf(err, errlen, "cache_inputs: cannot read '%s': %s",
			        s->def->cache_inputs[i], strerror(-rc));
	}
	for (size_t i = 0; i < s->def->nneeds; i++) {
		struct estep *u = &e->steps[s->def->needs[i]];
		char *a = tf_engine_canon(u->outputs), *b = tf_engine_canon(u->metrics);
		tf_sha256_update_str(h, u->def->name);
		tf_sha256_update_str(h, a);
		tf_sha256_update_str(h, b);
		free(a);
		free(b);
		/* Digest of upstream artifacts that are objects in the store. */
		const char *k;
		json_t *v;
		json_object_foreach(u->outputs, k, v)
		{
			struct tf_obj_info info;
			const char *key = json_string_value(v);
			if (!os || !key || tf_objstore_key_check(key) ||
			    tf_objstore_head(os, key, &info))
				continue;
			char buf[160];
			snprintf(buf, sizeof(buf), "%llu/%s/%08x", (unsigned long long)info.size,
			         info.etag, info.has_crc32c ? info.crc32c : 0u);
			tf_sha256_update_str(h, buf);
		}
	}
	tf_sha256_final(h, out);
	return rc;
}

/* Whether the store still holds what a cached step left there: every object recorded as its
 * artifact, and at least one object under each output that names a prefix ("…/": a
 * checkpoint, a bundle). Else *missing says what is gone. */
static int cache_in_store(struct engine *e, struct tf_objstore *os, const char *run,
                          const char *step, json_t *outputs, char *missing, size_t len)
{
	if (!os) {
		tf_errf(missing, len, "the store %s cannot be opened", e->storage_url);
		return 0;
	}
	int ok = 1;
	struct tf_stmt *q = tf_store_query(
	    e->db, "SELECT uri FROM artifacts WHERE run_id=? AND step=? ORDER BY name", "tt", run,
	    step);
	if (!q)
		return 0;
	while (ok && tf_stmt_step(q) == 1) {
		struct tf_obj_info info;
		const char *uri = tf_stmt_text(q, 0);
		if (uri && tf_objstore_head(os, uri, &info)) {
			tf_errf(missing, len, "object '%s' is not in the store", uri);
			ok = 0;
		}
	}
	tf_stmt_done(q);
	const char *k;
	json_t *v;
	json_object_foreach(outputs, k, v)
	{
		const char *key = json_string_value(v);
		size_t n = key ? strlen(key) : 0;
		if (!ok || n < 2 || n > 1024 || key[n - 1] != '/')
			continue;
		char dir[1025];
		memcpy(dir, key, n - 1);
		dir[n - 1] = '\0';
		if (tf_objstore_key_check(dir))
			continue; /* not a place in the store */
		struct tf_obj_list l = {0};
		if (tf_objstore_list(os, key, &l) || l.n == 0) {
			tf_errf(missing, len, "nothing under '%s' in the store", key);
			ok = 0;
		}
		tf_obj_list_release(&l);
	}
	return ok;
}

/* A valid cache entry for `key`: 0 with *outputs and *metrics (caller owns), -ENOENT when
 * there is none or what it names is no longer in the store (an event says so). */
int tf_engine_cache_lookup(struct engine *e, struct tf_objstore *os, struct estep *s,
                           const char *key, json_t **outputs, json_t **metrics)
{
	struct tf_stmt *q = tf_store_query(
	    e->db, "SELECT outputs, metrics, run_id, step FROM step_cache WHERE key=?", "t", key);
	if (!q)
		return -EIO;
	int rc = tf_stmt_step(q);
	char missing[400] = "";
	if (rc == 1) {
		*outputs = json_loads(tf_stmt_text(q, 0), 0, NULL);
		*metrics = json_loads(tf_stmt_text(q, 1), 0, NULL);
		rc = (*outputs && *metrics) ? 0 : -ENOENT;
		if (rc == 0 && !cache_in_store(e, os, tf_stmt_text(q, 2), tf_stmt_text(q, 3),
		                               *outputs, missing, sizeof(missing)))
			rc = -ENOENT;
		if (rc) {
			json_decref(*outputs);
			json_decref(*metrics);
			*outputs = *metrics = NULL;
		}
	} else if (rc == 0) {
		rc = -ENOENT;
	}
	tf_stmt_done(q);
	if (missing[0]) {
		char msg[500];
		snprintf(msg, sizeof(msg), "cache entry not used: %s", missing);
		tf_event_add(e->db, e->run_id, s->def->name, 0, "cache", msg);
	}
	return rc;
}

/* Whether the step's results may come from the cache in this run (not `--no-cache`, not
 * `--force STEP`). */
int tf_engine_cache_allowed(const struct engine *e, const struct estep *s)
{
	if (e->o->no_cache || s->forced)
		return 0;
	for (size_t i = 0; i < e->o->nforce; i++)
		if (!strcmp(e->o->force[i], s->def->name))
			return 0;
	return 1;
}

/* Outputs that name objects in the store are recorded as the step's artifacts (size and
 * checksum as the store reports them). Best effort: a failure here fails nothing. */
void tf_engine_record_artifacts(struct wctx *w, const char *run, const char *step, json_t *outputs)
{
	const char *k;
	json_t *v;
	json_object_foreach(outputs, k, v)
	{
		struct tf_obj_info info;
		const char *key = json_string_value(v);
		if (!key || tf_objstore_key_check(key) || tf_objstore_head(w->os, key, &info))
			continue;
		char digest[100];
		if (info.has_crc32c)
			snprintf(digest, sizeof(digest), "crc32c:%08x", info.crc32c);
		else
			snprintf(digest, sizeof(digest), "etag:%s", info.etag);
		if (tf_store_run(
		        w->db,
		        "INSERT OR REPLACE INTO artifacts(run_id, step, name, uri, digest, size, "
		        "created_at) VALUES(?,?,?,?,?,?,?)",
		        "tttttid", run, step, k, key, digest, (int64_t)info.size, tf_now_wall()))
			tf_warn("run '%s' step '%s': artifact '%s' not recorded: %s", run, step, k,
			        tf_store_errmsg(w->db));
	}
}

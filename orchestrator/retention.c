/* retention.c — owns deleting runs (`tpuflow runs delete`) and choosing the runs a retention
 * policy removes (`tpuflow gc`); retention.h says what a delete removes and keeps.
 */
#include "orchestrator/retention.h"
#include "orchestrator/state.h"
#include "storage/objstore.h"

#define TF_LOG_TAG "retention"
#include "common/common.h"
#include "common/log.h"

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void tf_run_delete_report_release(struct tf_run_delete_report *r)
{
	json_decref(r->kept_by);
	memset(r, 0, sizeof(*r));
}

json_t *tf_run_delete_report_json(const char *run, int rc, int dry_run, const char *err,
                                  const struct tf_run_delete_report *r)
{
	const char *reason = !rc             ? NULL
	                     : rc == -ENOENT ? "not_found"
	                     : rc == -EBUSY  ? "busy"
	                     : rc == -EIO    ? "unavailable"
	                                     : "failed";
	return json_pack("{s:s, s:b, s:s?, s:s?, s:I, s:I, s:I, s:o}", "run", run, "deleted",
	                 rc == 0 && !dry_run, "error", rc ? err : NULL, "reason", reason, "objects",
	                 (json_int_t)r->objects, "bytes", (json_int_t)r->bytes, "kept",
	                 (json_int_t)r->kept, "kept_for",
	                 r->kept_by ? json_incref(r->kept_by) : json_array());
}

/* The directory part of what `ref` names under `runs_prefix` ("runs/RUN/"): a key ending in
 * '/' is a directory itself, a file key keeps its directory (a dataset manifest keeps its
 * shards). Appended to `keep` (an array of prefixes) with who uses it. */
static void keep_ref(json_t *keep, json_t *by, const char *ref, const char *runs_prefix,
                     const char *who)
{
	const char *k = ref ? strstr(ref, runs_prefix) : NULL;
	if (!k)
		return;
	const char *slash = strrchr(k, '/');
	json_array_append_new(keep, json_stringn(k, (size_t)(slash - k) + 1));
	size_t i;
	json_t *v;
	json_array_foreach(by, i, v) if (!strcmp(json_string_value(v), who)) return;
	json_array_append_new(by, json_string(who));
}

/* Prefixes under runs/RUN/ that something outside the run still uses. */
static int collect_keep(struct tf_store *st, const char *run, const char *runs_prefix,
                        json_t *keep, json_t *by)
{
	struct tf_stmt *s = tf_store_query(
	    st,
	    "SELECT m.name, v.version, v.bundle, v.checkpoint, v.dataset FROM model_versions v "
	    "JOIN models m ON m.id = v.model_id WHERE instr(v.bundle, ?1) OR "
	    "instr(coalesce(v.checkpoint, ''), ?1) OR instr(coalesce(v.dataset, ''), ?1)",
	    "t", runs_prefix);
	if (!s)
		return -EIO;
	int rc;
	while ((rc = tf_stmt_step(s)) == 1) {
		char *who = tf_xasprintf("model %s v%lld", tf_stmt_text(s, 0),
		                         (long long)tf_stmt_int(s, 1));
		for (int c = 2; c <= 4; c++)
			keep_ref(keep, by, tf_stmt_text(s, c), runs_prefix, who);
		free(who);
	}
	tf_stmt_done(s);
	if (rc < 0)
		return rc;
	/* a later run's step that took its results from this run's cache names its objects */
	s = tf_store_query(st,
	                   "SELECT run_id, name, outputs FROM steps WHERE run_id != ?1 AND "
	                   "instr(outputs, ?2)",
	                   "tt", run, runs_prefix);
	if (!s)
		return -EIO;
	while ((rc = tf_stmt_step(s)) == 1) {
		json_t *o = json_loads(tf_stmt_text(s, 2), 0, NULL);
		char *who = tf_xasprintf("run %s step %s", tf_stmt_text(s, 0), tf_stmt_text(s, 1));
		const char *k;
		json_t *v;
		json_object_foreach(o, k, v) keep_ref(keep, by, json_string_value(v), runs_prefix, who);
		free(who);
		json_decref(o);
	}
	tf_stmt_done(s);
	return rc < 0 ? rc : 0;
}

static int kept(const json_t *keep, const char *key)
{
	size_t i;
	json_t *v;
	json_array_foreach(keep, i, v)
	{
		const char *p = json_string_value(v);
		if (!strncmp(key, p, strlen(p)))
			return 1;
	}
	return 0;
}

/* Whether the run may be deleted now: final, or running with its owner gone. */
static int deletable(struct tf_store *st, const char *run, char *err, size_t errlen)
{
	struct tf_run_owner o;
	int rc = tf_run_owner_get(st, run, &o);
	if (rc == -ENOENT) {
		tf_errf(err, errlen, "no run '%s'", run);
		return rc;
	}
	if (rc) {
		tf_errf(err, errlen, "run '%s': %s", run, tf_store_errmsg(st));
		return rc;
	}
	if (o.state == TF_RUN_PENDING) {
		tf_errf(err, errlen,
		        "run '%s' is pending (waiting for the daemon to take it): cancel it first "
		        "('tpuflow runs cancel %s')",
		        run, run);
		return -EBUSY;
	}
	if (tf_run_owner_live(&o)) {
		tf_errf(err, errlen,
		        "run '%s' is running (process %ld, heartbeat %.1f s ago): cancel it first "
		        "('tpuflow runs cancel %s') and delete it once it has stopped",
		        run, o.pid, o.heartbeat_age, run);
		return -EBUSY;
	}
	return 0;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(path) && errno != ENOENT ? -1 : 0;
}

/* The run's rows, in one transaction that checks again that nobody took the run meanwhile.
 * Children before parents (foreign keys). */
static int delete_rows(struct tf_store *st, const char *run, char *err, size_t errlen)
{
	static const char *const sql[] = {
	    "DELETE FROM event_seq WHERE run_id=?", "DELETE FROM events WHERE run_id=?",
	    "DELETE FROM attempts WHERE run_id=?",  "DELETE FROM slice_jobs WHERE run_id=?",
	    "DELETE FROM artifacts WHERE run_id=?", "DELETE FROM step_cache WHERE run_id=?",
	    "DELETE FROM run_labels WHERE run_id=?", "DELETE FROM steps WHERE run_id=?",
	    "DELETE FROM runs WHERE id=?",
	};
	int rc = tf_store_begin(st);
	if (rc) {
		tf_errf(err, errlen, "%s", tf_store_errmsg(st));
		return rc;
	}
	rc = deletable(st, run, err, errlen);
	for (size_t i = 0; rc == 0 && i < TF_ARRAY_LEN(sql); i++) {
		rc = tf_store_run(st, sql[i], "t", run);
		if (rc)
			tf_errf(err, errlen, "run '%s': %s", run, tf_store_errmsg(st));
	}
	if (rc) {
		tf_store_rollback(st);
		return rc;
	}
	rc = tf_store_commit(st);
	if (rc)
		tf_errf(err, errlen, "run '%s': %s", run, tf_store_errmsg(st));
	return rc;
}

int tf_run_delete(struct tf_store *st, const char *home, const char *run, int dry_run,
                  struct tf_run_delete_report *r, char *err, size_t errlen)
{
	memset(r, 0, sizeof(*r));
	r->kept_by = json_array();
	int rc = deletable(st, run, err, errlen);
	if (rc)
		return rc;
	char *storage = NULL, *prefix = tf_xasprintf("runs/%s/", run);
	json_t *keep = json_array();
	struct tf_objstore *os = NULL;
	struct tf_obj_list l = {0};
	rc = tf_store_query_text(st, &storage, "SELECT storage FROM runs WHERE id=?", "t", run);
	if (rc == 0)
		rc = collect_keep(st, run, prefix, keep, r->kept_by);
	if (rc) {
		tf_errf(err, errlen, "run '%s': %s", run, tf_store_errmsg(st));
		goto out;
	}
	if (storage) {
		char oerr[512] = "";
		rc = tf_objstore_open(storage, &os, oerr, sizeof(oerr));
		if (rc == 0)
			rc = tf_objstore_list(os, prefix, &l);
		if (rc) {
			tf_errf(err, errlen,
			        "run '%s': its object store %s cannot be listed (%s); nothing was "
			        "deleted: try again when it is reachable",
			        run, storage, os ? tf_objstore_errmsg(os) : oerr);
			rc = -EIO;
			goto out;
		}
	}
	for (size_t i = 0; i < l.n; i++) {
		if (kept(keep, l.v[i].key)) {
			r->kept++;
			continue;
		}
		if (!dry_run) {
			int d = tf_objstore_delete(os, l.v[i].key);
			if (d && d != -ENOENT) {
				if (!r->failed++)
					tf_errf(err, errlen,
					        "run '%s': the store did not delete %s (%s); the run stays "
					        "listed: run the command again",
					        run, l.v[i].key, tf_objstore_errmsg(os));
				continue;
			}
		}
		r->objects++;
		r->bytes += l.v[i].size;
	}
	if (r->failed) {
		rc = -EIO;
		goto out;
	}
	if (dry_run)
		goto out;
	char *work = tf_xasprintf("%s/work/%s", home, run);
	if (nftw(work, rm_entry, 16, FTW_DEPTH | FTW_PHYS) && errno != ENOENT)
		tf_warn("run '%s': its scratch directory %s was not removed entirely", run, work);
	free(work);
	rc = delete_rows(st, run, err, errlen);
out:
	tf_obj_list_release(&l);
	tf_objstore_free(os);
	json_decref(keep);
	free(storage);
	free(prefix);
	return rc;
}

int tf_gc_select(struct tf_store *st, const struct tf_gc_policy *p, json_t **out)
{
	if (p->keep_last < 0 && p->older_than <= 0)
		return -EINVAL;
	double before = p->older_than > 0 ? tf_now_wall() - p->older_than : 0;
	struct tf_stmt *s = tf_store_query(
	    st,
	    "SELECT id, pipeline, state, created_at FROM (SELECT id, pipeline, state, created_at, "
	    "row_number() OVER (PARTITION BY pipeline ORDER BY created_at DESC, id DESC) AS rn "
	    "FROM runs WHERE ?1 IS NULL OR pipeline=?1) "
	    "WHERE state IN ('succeeded', 'failed', 'interrupted') AND (?2 < 0 OR rn > ?2) "
	    "AND (?3 <= 0 OR created_at < ?3) ORDER BY created_at, id",
	    "tid", p->pipeline, (int64_t)p->keep_last, before);
	if (!s)
		return -EIO;
	json_t *arr = json_array();
	int rc;
	while ((rc = tf_stmt_step(s)) == 1)
		json_array_append_new(arr, json_pack("{s:s, s:s, s:s, s:f}", "id", tf_stmt_text(s, 0),
		                                     "pipeline", tf_stmt_text(s, 1), "state",
		                                     tf_stmt_text(s, 2), "created_at",
		                                     tf_stmt_double(s, 3)));
	tf_stmt_done(s);
	if (rc < 0) {
		json_decref(arr);
		return rc;
	}
	*out = arr;
	return 0;
}

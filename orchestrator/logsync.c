/* logsync.c — owns the late upload of attempt logs (logsync.h): those the object store refused
 * at the time, and those of attempts whose process died before it could upload them. The work
 * directory keeps such a log until its key is recorded; the key is written only after the
 * object is in the store, so a crash in between uploads it again (puts overwrite), never
 * loses it. */
#include "orchestrator/logsync.h"

#define TF_LOG_TAG "logs"
#include "common/common.h"
#include "common/log.h"
#include "orchestrator/state.h"
#include "orchestrator/store.h"
#include "storage/objstore.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct pending {
	char *step;
	int n;
};

/* Which attempts of a run upload() takes: their log_key is NULL and their log is on disk. */
static const char SQL_ENDED[] = "SELECT step, n FROM attempts WHERE run_id=? AND log_key IS NULL "
                                "AND state NOT IN ('running', 'queued')";
static const char SQL_LOST[] = "SELECT step, n FROM attempts WHERE run_id=? AND log_key IS NULL "
                               "AND state='running'";

static char *log_path(const char *home, const char *run_id, const char *step, int n)
{
	return tf_xasprintf("%s/work/%s/%s/attempt-%d.log", home, run_id, step, n);
}

/* Uploads the local logs of run_id's attempts and records each key: those of the attempts that
 * ended (SQL_ENDED), each with a "log" event, or with `lost` those still recorded running
 * (SQL_LOST), warning of each log that stays local. Returns 0 or a negative database error. */
static int upload(struct tf_store *db, const char *storage_url, const char *home,
                  const char *run_id, int lost, int *uploaded, int *left)
{
	struct pending *p = NULL;
	size_t np = 0, cap = 0;
	int rc = 0, up = 0, still = 0;
	struct tf_stmt *q = tf_store_query(db, lost ? SQL_LOST : SQL_ENDED, "t", run_id);
	if (!q)
		return -EIO;
	while ((rc = tf_stmt_step(q)) == 1) {
		char *path = log_path(home, run_id, tf_stmt_text(q, 0), (int)tf_stmt_int(q, 1));
		struct stat sb;
		if (stat(path, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size > 0) {
			if (np == cap)
				p = tf_xrealloc(p, (cap = cap ? 2 * cap : 8) * sizeof(*p));
			p[np++] = (struct pending){tf_xstrdup(tf_stmt_text(q, 0)),
			                           (int)tf_stmt_int(q, 1)};
		}
		free(path);
	}
	tf_stmt_done(q);
	struct tf_objstore *os = NULL;
	char err[256];
	if (rc == 0 && np && tf_objstore_open(storage_url, &os, err, sizeof(err)))
		os = NULL;
	for (size_t i = 0; i < np; i++) {
		char *path = log_path(home, run_id, p[i].step, p[i].n);
		char *key =
		    tf_xasprintf("runs/%s/%s/logs/attempt-%d.log", run_id, p[i].step, p[i].n);
		if (rc == 0 && os && tf_objstore_put_file(os, key, path, 0) == 0) {
			unlink(path);
			rc = tf_store_run(
			    db,
			    "UPDATE attempts SET log_key=? WHERE run_id=? AND step=? AND "
			    "n=? AND log_key IS NULL",
			    "ttti", key, run_id, p[i].step, (int64_t)p[i].n);
			if (rc == 0 && !lost)
				rc = tf_event_add(
				    db, run_id, p[i].step, p[i].n, "log",
				    "log uploaded to the object store after its attempt");
			if (rc == 0)
				up++;
		} else {
			still++;
			if (lost)
				tf_warn("run '%s' step '%s' attempt %d: its log was not uploaded; it "
				        "stays in %s",
				        run_id, p[i].step, p[i].n, path);
		}
		free(key);
		free(path);
	}
	tf_objstore_free(os);
	for (size_t i = 0; i < np; i++)
		free(p[i].step);
	free(p);
	if (uploaded)
		*uploaded = up;
	if (left)
		*left = still;
	return rc < 0 ? rc : 0;
}

int tf_logs_upload_pending(struct tf_store *db, const char *storage_url, const char *home,
                           const char *run_id, int *uploaded, int *left)
{
	int up = 0;
	int rc = upload(db, storage_url, home, run_id, 0, &up, left);
	if (up)
		tf_info("run '%s': %d attempt log(s) uploaded after their attempts", run_id, up);
	if (uploaded)
		*uploaded = up;
	return rc;
}

int tf_logs_upload_lost(struct tf_store *db, const char *storage_url, const char *home,
                        const char *run_id)
{
	return upload(db, storage_url, home, run_id, 1, NULL, NULL);
}

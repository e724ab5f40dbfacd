/* logsync.h — attempt logs that could not be uploaded when their attempt ended.
 *
 * An attempt's log is written to HOME/work/RUN/STEP/attempt-N.log and uploaded to the run's
 * object store as runs/RUN/STEP/logs/attempt-N.log when the attempt ends. When the store is
 * unreachable or full at that moment the file stays in the work directory and the attempt's
 * log_key stays NULL; tf_logs_upload_pending() uploads such files later (when a later upload
 * succeeds, at the end of the run, on resume and retry) and records their keys. An attempt
 * whose process died never uploaded its log: tf_logs_upload_lost() does, when the run is
 * continued.
 */
#ifndef TF_LOGSYNC_H
#define TF_LOGSYNC_H

struct tf_store;

/* Uploads every finished attempt log of run_id that is still only on local disk to the store
 * at storage_url, recording each key on its attempt (with a "log" event). *uploaded (may be
 * NULL) gets how many went up, *left how many are still local (may be NULL). Returns 0 (also
 * when the store is still unreachable: the files stay for the next call) or a negative
 * database error. */
int tf_logs_upload_pending(struct tf_store *db, const char *storage_url, const char *home,
                           const char *run_id, int *uploaded, int *left);

/* The same for the attempts of run_id still recorded running (their process is gone: the
 * caller claimed the run and ended what they left), each key recorded before the attempt is
 * ended lost; a log that cannot go up stays local with a warning, for the call above. Outside
 * any transaction: it talks to the store. Returns 0 or a negative database error. */
int tf_logs_upload_lost(struct tf_store *db, const char *storage_url, const char *home,
                        const char *run_id);

#endif

/* alerts.h — alerting hooks: the events that alert, the hooks of a home, the outbox alerts are
 * delivered from, and the worker that delivers them (docs/alerts.md).
 *
 * An alert is written in the same transaction as the state change that causes it
 * (tf_alerts_emit joins the caller's transaction): one outbox row per alert and hook, with a
 * stable msg_id (the Standard Webhooks `webhook-id`). A worker (alerts_send.c) sends due rows
 * and records each outcome, so delivery is at least once: a process killed between the commit
 * and the POST leaves the row pending, and the next worker on the home sends it.
 *
 * Secrets are never stored: a hook names an environment variable or a file, read by the
 * process that sends (the daemon, or `tpuflow run` when it drives the run itself). */
#ifndef TF_ALERTS_H
#define TF_ALERTS_H

#include <jansson.h>
#include <stddef.h>

#include "orchestrator/state.h"
#include "orchestrator/store.h"

/* ---- events ------------------------------------------------------------------------- */

/* An event that can alert: its name (what `alerts: on:` and `hooks add --on` take), a line
 * for people, and the severity an Alertmanager alert carries. */
struct tf_alert_event {
	const char *name;     /* e.g. "run_failed" */
	const char *summary;  /* "a run failed" */
	const char *severity; /* critical, warning or info */
};

/* The event table, `n` entries; NULL when `name` is not an event. */
const struct tf_alert_event *tf_alert_events(size_t *n);
const struct tf_alert_event *tf_alert_event_find(const char *name);

/* ---- configuration: HOME/alerts.conf ------------------------------------------------ */

/* Lines of KEY=VALUE; every key is optional (defaults in brackets):
 *   allow_hosts=h1,h2   hosts a hook's URL may name besides loopback [none]
 *   max_attempts=N      attempts before an alert is dead-lettered [12]
 *   horizon=DURATION    age after which a failing alert is dead-lettered [24h]
 *   backoff=DURATION    delay before the first retry, doubled each time, with jitter [5s]
 *   max_backoff=DURATION  cap on one delay [1h]
 *   timeout=DURATION    total time one POST may take [15s]
 *   dashboard_url=URL   where Slack links and generatorURL point [the daemon's URL]
 *   drain=DURATION      how long `tpuflow run` keeps delivering after its run ends [10s]
 *   regression_threshold=X  metric_regressed when a new version's accuracy or auc is lower
 *                       (loss higher) than the production version's by more than X [0.01]
 *   job_wait=DURATION   job_waiting when a train attempt has waited longer for its slice [10m]
 *   refire=DURATION     how often Alertmanager alerts still firing are posted again [1m] */
struct tf_alerts_config {
	char *allow_hosts;           /* comma-separated (owned), "" for none */
	int max_attempts;            /* >= 1 */
	double horizon;              /* seconds */
	double backoff;              /* seconds */
	double max_backoff;          /* seconds */
	double timeout;              /* seconds */
	char *dashboard_url;         /* no trailing slash (owned), NULL when none is known */
	double drain;                /* seconds */
	double regression_threshold; /* metric units */
	double job_wait;             /* seconds */
	double refire;               /* seconds */
};

/* Reads HOME/alerts.conf (absent: defaults). Bad lines are reported in err and -EINVAL is
 * returned, with the defaults kept for them. Release with tf_alerts_config_release. */
int tf_alerts_config_load(const char *home, struct tf_alerts_config *cfg, char *err, size_t errlen);
void tf_alerts_config_release(struct tf_alerts_config *cfg);

/* Whether the URL may be posted to: http or https, and a host that is loopback or on
 * allow_hosts. 0, or -EPERM/-EINVAL with the reason in err. */
int tf_alerts_url_allowed(const struct tf_alerts_config *cfg, const char *url, char *err,
                          size_t errlen);

/* The delay before attempt `attempts + 1` after `attempts` failed ones: backoff * 2^(attempts-1)
 * capped at max_backoff, the upper half drawn at random (`rnd` uniform in [0,1)), and never
 * less than the receiver's Retry-After (`retry_after` seconds, 0: none). */
double tf_alerts_backoff(const struct tf_alerts_config *cfg, int attempts, double retry_after,
                         double rnd);

/* A Retry-After header's value (RFC 9110 section 10.2.3: delay-seconds or an HTTP-date) as
 * seconds from `now` (wall clock), at most a day; 0 when absent, past or not readable. */
double tf_alerts_retry_after(const char *value, double now);

/* ---- hooks -------------------------------------------------------------------------- */

/* 1 when `name` is a hook's name: 1 to 64 of a-z, 0-9, '_' and '-'; else 0. */
int tf_alerts_hook_name_ok(const char *name);

struct tf_hook {
	const char *name;        /* [a-z0-9_-]{1,64} */
	const char *url;         /* http(s)://... */
	const char *format;      /* standard, slack or alertmanager */
	const char *secret_env;  /* an environment variable's name, or NULL */
	const char *secret_file; /* an absolute path, or NULL */
	const char *events;      /* home-wide route: comma-separated event names, "" or NULL */
};

/* Adds (or replaces) a hook after checking every field against cfg; the secret is read once
 * to check its form but never stored. 0, or -EINVAL with the reason in err. */
int tf_hooks_add(struct tf_store *st, const struct tf_alerts_config *cfg, const struct tf_hook *h,
                 char *err, size_t errlen);
int tf_hooks_remove(struct tf_store *st, const char *name); /* -ENOENT when there is none */
/* The hooks as a new JSON array the caller owns. */
int tf_hooks_list(struct tf_store *st, json_t **out);

/* The secret of a hook from its environment variable or file, as a new string (caller frees
 * and should wipe it). -ENOENT when unset/unreadable, with the reason (never the secret). */
int tf_hook_secret(const char *env, const char *file, char **out, char *err, size_t errlen);

/* ---- emitting ----------------------------------------------------------------------- */

/* Queues `event` for every hook routed to it, in the caller's transaction (or its own).
 * `run`, `step`, `message` may be NULL; `extra` (borrowed, may be NULL) is merged into the
 * payload's data. A run_succeeded also resolves the Alertmanager alerts firing for its
 * pipeline, a model_deployed or model_promoted those of a rollback of the same model and
 * alias. Returns 0 or a store error (which fails the caller's transaction). */
int tf_alerts_emit(struct tf_store *st, const char *event, const char *run, const char *step,
                   const char *message, json_t *extra);

/* What state.c calls with every run and step change it commits: the changes that alert are
 * turned into events (run failed/succeeded/cancelled, step retried/failed for good, training
 * diverged or stopped early); a run that starts has its routes checked for hooks the home
 * lacks (an error names each). `metrics` is the step's new metrics JSON, or NULL. */
int tf_alerts_on_run(struct tf_store *st, const char *run, enum tf_run_state to, const char *error);
int tf_alerts_on_step(struct tf_store *st, const char *run, const char *step, enum tf_step_state to,
                      const char *reason, const char *metrics);

/* What the slice broker calls when a failed chip is repaired, in its transaction: the
 * chip_failed alerts still firing for it (Alertmanager) are resolved. */
int tf_alerts_on_chip_repaired(struct tf_store *st, const char *pool, const int xyz[3]);

/* What the registry calls when it records a new model version: model_registered, and
 * metric_regressed for each of accuracy, auc, loss worse than the `production` version's by
 * more than regression_threshold (a metric not worse resolves the model's metric_regressed
 * alerts still firing for it). In the caller's transaction. */
int tf_alerts_on_register(struct tf_store *st, const char *model, int64_t version, const char *run,
                          const char *step, const char *metrics);

/* What the slice broker calls for each request still waiting: job_waiting once per attempt
 * when it has waited longer than job_wait (recorded in the run's events, so never twice). */
int tf_alerts_on_waiting(struct tf_store *st, const char *run, const char *step, int attempt,
                         double waited, const char *why);

/* Queues a `test` event for hook `name` only; *id receives the outbox row. */
int tf_alerts_queue_test(struct tf_store *st, const char *name, int64_t *id);

/* ---- the outbox --------------------------------------------------------------------- */

/* Alerts, newest first, as a new JSON array: all, or only the dead-lettered ones. */
int tf_alerts_list(struct tf_store *st, int dead_only, int limit, json_t **out);
/* One alert (by row id or msg_id) with its payload; -ENOENT when there is none. */
int tf_alerts_show(struct tf_store *st, const char *id, json_t **out);
/* Queues a dead (or delivered) alert again with its msg_id kept: `id`, or every dead one
 * when id is NULL. *n receives how many. */
int tf_alerts_redeliver(struct tf_store *st, const char *id, int64_t *n);

/* ---- delivery (alerts_send.c) ------------------------------------------------------- */

/* The body a hook of `format` receives for a payload (stored JSON text), as a new string
 * (caller frees); NULL with err when the payload cannot be read. */
char *tf_alert_body(const char *format, const char *payload, const struct tf_alerts_config *cfg,
                    char *err, size_t errlen);
/* The same, for a firing Alertmanager alert that is posted again every `refire`: valid_until
 * (wall seconds; 0: none) is its endsAt, unless the payload has an end of its own (a
 * resolution). Alertmanager ends the alert then if no later post moves it. */
char *tf_alert_body_until(const char *format, const char *payload, double valid_until,
                          const struct tf_alerts_config *cfg, char *err, size_t errlen);
/* t (wall seconds) as RFC 3339 in UTC with milliseconds: 2026-12-01T17:11:00.492Z. */
void tf_alert_time(double t, char out[32]);

/* webhook-signature for a Standard Webhooks message: "v1," and the base64 of
 * HMAC-SHA256(key, "ID.TIMESTAMP.BODY"), where the key is the base64 after "whsec_".
 * 0, or -EINVAL when the secret is not of that form. out has room for 128 bytes. */
int tf_alert_sign(const char *secret, const char *msg_id, long long timestamp, const char *body,
                  size_t len, char out[128]);
/* The whole webhook-signature value for `secrets`, one or more whsec_ secrets separated by
 * blanks (the new and the old one while a secret is rotated): their signatures, separated by
 * spaces, as a new string in *out (caller frees). -EINVAL when one is malformed or none is
 * given. */
int tf_alert_signatures(const char *secrets, const char *msg_id, long long timestamp,
                        const char *body, size_t len, char **out);

/* Sends the due alerts of the home once each (at most `max` of them, 0: no limit), to
 * different hooks at once and to one hook in queue order (a hook whose alert is delivered
 * sends its next one, if due, in the same call); returns when every answer is in. *sent and
 * *failed (may be NULL) are added the outcomes. *next_due receives the seconds until the
 * next pending alert is due (-1: none pending). */
int tf_alerts_deliver_due(struct tf_store *st, const struct tf_alerts_config *cfg, int max,
                          int *sent, int *failed, double *next_due);
/* Sends one alert now whatever its due time (hooks test); 0 when delivered, else the reason
 * in err. */
int tf_alerts_deliver_one(struct tf_store *st, const struct tf_alerts_config *cfg, int64_t id,
                          char *err, size_t errlen);

/* Posts the Alertmanager alerts still firing again (Alertmanager resolves an alert it has
 * not heard of for its resolve_timeout), and the resolving alerts delivered in the last five
 * minutes (so an Alertmanager restarted meanwhile still notifies the resolution); *sent (may
 * be NULL) is added those accepted. Each re-post is leased as an outbox row is: one process
 * posts an alert again at a time, and no other request of its hook is in flight meanwhile;
 * an alert is not posted again once a newer one of its hook has the same labels.
 * The delivery worker does this every `refire` seconds. */
int tf_alerts_refire(struct tf_store *st, const struct tf_alerts_config *cfg, int *sent);

/* A thread that keeps delivering a home's alerts: it opens its own store handle, starts what
 * is due on each hook with no request in flight, and waits for an answer, the next due
 * alert (at most half a second) or a kick; a receiver that hangs holds back only its own
 * hook. NULL when the home has neither hooks nor pending alerts (nothing to do). */
struct tf_alerts_worker;
struct tf_alerts_worker *tf_alerts_worker_start(const char *home);
void tf_alerts_worker_kick(struct tf_alerts_worker *w);
/* Stops the worker after a last stretch of delivery: it keeps sending while alerts are due
 * within `drain` seconds (negative: the home's configured drain) and until the requests in
 * flight are answered or time out, then joins the thread and frees it. *left (may be NULL)
 * receives the alerts still pending. NULL is a no-op. */
void tf_alerts_worker_stop(struct tf_alerts_worker *w, double drain, int *left);

#endif

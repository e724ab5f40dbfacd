/* alerts.c — owns the events that alert, the hooks of a home (table hooks), the outbox rows
 * (table alerts) and the Alertmanager alerts still firing (table alert_firing); delivery is
 * alerts_send.c. docs/alerts.md is the user's reference.
 *
 * Invariants:
 *  1. An outbox row is inserted in the transaction of the state change that causes it
 *     (tf_alerts_emit joins the caller's), so an event is committed with its alerts or not
 *     at all.
 *  2. A row's msg_id and payload never change: every attempt sends the same id and the same
 *     bytes (a format renders the payload the same way each time).
 *  3. A secret is read from its environment variable or file when it is needed and never
 *     written anywhere: not to the database, not to a log, not to an error message. */
#include "orchestrator/alerts.h"
#include "ml/train.h"
#include "orchestrator/pipeline.h"

#define TF_LOG_TAG "alerts"
#include "common/common.h"
#include "common/log.h"

#include <ctype.h>
#include <pthread.h>
#include <curl/curl.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const struct tf_alert_event events[] = {
    {"run_failed", "a run failed", "critical"},
    {"run_succeeded", "a run succeeded", "info"},
    {"run_cancelled", "a run was cancelled", "warning"},
    {"step_retried", "a step failed and will be retried", "warning"},
    {"step_failed", "a step failed for good", "critical"},
    {"training_diverged", "training diverged (loss exploded or not a number)", "critical"},
    {"training_stopped_early", "training stopped early", "info"},
    {"metric_regressed", "a metric is worse than the production version's", "critical"},
    {"model_registered", "a model version was registered", "info"},
    {"model_deployed", "an alias was pointed at a model version", "info"},
    {"model_promoted", "a model version was promoted", "info"},
    {"model_rolled_back", "a model alias was rolled back", "warning"},
    {"chip_failed", "an accelerator chip failed", "critical"},
    {"job_waiting", "a job has waited for a slice longer than its threshold", "warning"},
    {"schedule_missed", "a schedule missed a tick", "warning"},
    {"daemon_unclean_stop", "the daemon started after an unclean stop", "warning"},
    {"test", "a test alert (tpuflow hooks test)", "info"},
};

const struct tf_alert_event *tf_alert_events(size_t *n)
{
	*n = TF_ARRAY_LEN(events);
	return events;
}

const struct tf_alert_event *tf_alert_event_find(const char *name)
{
	for (size_t i = 0; name && i < TF_ARRAY_LEN(events); i++)
		if (!strcmp(events[i].name, name))
			return &events[i];
	return NULL;
}

/* ---- configuration ------------------------------------------------------------------- */

static void config_defaults(struct tf_alerts_config *c)
{
	*c = (struct tf_alerts_config){.allow_hosts = tf_xstrdup(""),
	                               .max_attempts = 12,
	                               .horizon = 24 * 3600,
	                               .backoff = 5,
	                               .max_backoff = 3600,
	                               .timeout = 15,
	                               .drain = 10,
	                               .regression_threshold = 0.01,
	                               .job_wait = 600,
	                               .refire = 60};
}

/* The daemon's URL from HOME/daemon.json, where the dashboard is served; NULL when none. */
static char *daemon_url(const char *home)
{
	char *path = tf_xasprintf("%s/daemon.json", home);
	json_t *j = json_load_file(path, 0, NULL);
	free(path);
	const char *u = json_string_value(json_object_get(j, "url"));
	char *out = u && *u ? tf_xstrdup(u) : NULL;
	json_decref(j);
	return out;
}

static void trim_slash(char *s)
{
	size_t n = s ? strlen(s) : 0;
	while (n > 0 && s[n - 1] == '/')
		s[--n] = '\0';
}

int tf_alerts_config_load(const char *home, struct tf_alerts_config *cfg, char *err, size_t errlen)
{
	config_defaults(cfg);
	char *path = tf_xasprintf("%s/alerts.conf", home), *text = NULL;
	size_t len = 0;
	int rc = 0, line = 0;
	if (tf_read_file(path, 1 << 16, &text, &len) == 0) {
		char *save = NULL;
		for (char *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
			line++;
			while (*l == ' ' || *l == '\t')
				l++;
			if (!*l || *l == '#')
				continue;
			char *eq = strchr(l, '='), *v = eq ? eq + 1 : NULL, *end = NULL;
			if (eq)
				*eq = '\0';
			double d = 0;
			long long n = 0;
			int ok = eq != NULL;
			if (ok && !strcmp(l, "allow_hosts")) {
				free(cfg->allow_hosts);
				cfg->allow_hosts = tf_xstrdup(v);
			} else if (ok && !strcmp(l, "dashboard_url")) {
				free(cfg->dashboard_url);
				cfg->dashboard_url = tf_xstrdup(v);
			} else if (ok && !strcmp(l, "max_attempts")) {
				n = strtoll(v, &end, 10);
				ok = end != v && !*end && n >= 1 && n <= 1000;
				if (ok)
					cfg->max_attempts = (int)n;
			} else if (ok && !strcmp(l, "regression_threshold")) {
				d = strtod(v, &end);
				ok = end != v && !*end && d >= 0 && d < 1e9;
				if (ok)
					cfg->regression_threshold = d;
			} else if (ok && (ok = tf_duration_parse(v, &d) == 0 && d > 0)) {
				if (!strcmp(l, "horizon"))
					cfg->horizon = d;
				else if (!strcmp(l, "backoff"))
					cfg->backoff = d;
				else if (!strcmp(l, "max_backoff"))
					cfg->max_backoff = d;
				else if (!strcmp(l, "timeout"))
					cfg->timeout = d;
				else if (!strcmp(l, "drain"))
					cfg->drain = d;
				else if (!strcmp(l, "job_wait"))
					cfg->job_wait = d;
				else if (!strcmp(l, "refire"))
					cfg->refire = d;
				else
					ok = 0;
			}
			if (!ok && rc == 0) {
				tf_errf(
				    err, errlen,
				    "%s:%d: '%s' ignored (expected allow_hosts=, dashboard_url=, "
				    "max_attempts=1..1000, regression_threshold=NUMBER, or "
				    "horizon=, backoff=, max_backoff=, "
				    "timeout=, drain=, job_wait=, refire= with a duration such as "
				    "30s)",
				    path, line, l);
				rc = -EINVAL;
			}
		}
	}
	free(text);
	free(path);
	if (!cfg->dashboard_url)
		cfg->dashboard_url = daemon_url(home);
	trim_slash(cfg->dashboard_url);
	return rc;
}

void tf_alerts_config_release(struct tf_alerts_config *cfg)
{
	if (!cfg)
		return;
	free(cfg->allow_hosts);
	free(cfg->dashboard_url);
	cfg->allow_hosts = cfg->dashboard_url = NULL;
}

static int list_has(const char *list, const char *word)
{
	size_t n = strlen(word);
	for (const char *p = list; p && *p;) {
		while (*p == ',' || *p == ' ')
			p++;
		const char *e = p;
		while (*e && *e != ',' && *e != ' ')
			e++;
		if ((size_t)(e - p) == n && !strncasecmp(p, word, n))
			return 1;
		p = e;
	}
	return 0;
}

static int loopback_host(const char *h)
{
	return !strcmp(h, "localhost") || !strncmp(h, "127.", 4) || !strcmp(h, "::1") ||
	       !strcmp(h, "[::1]");
}

int tf_alerts_url_allowed(const struct tf_alerts_config *cfg, const char *url, char *err,
                          size_t errlen)
{
	CURLU *u = curl_url();
	char *scheme = NULL, *host = NULL;
	int rc = 0;
	if (!u || curl_url_set(u, CURLUPART_URL, url, 0) != CURLUE_OK ||
	    curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
	    curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK) {
		tf_errf(err, errlen, "'%s' is not a URL (expected http://HOST[:PORT]/PATH)", url);
		rc = -EINVAL;
	} else if (strcmp(scheme, "http") && strcmp(scheme, "https")) {
		tf_errf(err, errlen, "'%s': only http and https URLs can be hooks", url);
		rc = -EINVAL;
	} else if (!loopback_host(host) && !list_has(cfg->allow_hosts, host)) {
		tf_errf(err, errlen,
		        "host '%s' is not on the allowlist: add 'allow_hosts=%s' to the home's "
		        "alerts.conf (only loopback is allowed by default)",
		        host, host);
		rc = -EPERM;
	}
	curl_free(scheme);
	curl_free(host);
	curl_url_cleanup(u);
	return rc;
}

double tf_alerts_retry_after(const char *value, double now)
{
	while (*value == ' ' || *value == '\t')
		value++;
	char *end;
	double d = strtod(value, &end);
	if (end == value || (*end && *end != '\r' && *end != '\n' && *end != ' ')) {
		time_t at = curl_getdate(value, NULL); /* IMF-fixdate and the obsolete forms */
		d = at == -1 ? 0 : (double)at - now;
	}
	return d > 0 ? (d < 86400 ? d : 86400) : 0;
}

double tf_alerts_backoff(const struct tf_alerts_config *cfg, int attempts, double retry_after,
                         double rnd)
{
	double d =
	    cfg->backoff * ldexp(1.0, attempts > 1 ? (attempts > 40 ? 40 : attempts - 1) : 0);
	if (d > cfg->max_backoff)
		d = cfg->max_backoff;
	d = d / 2 + d / 2 * rnd; /* "equal jitter": spread retries, never retry at once */
	if (retry_after > d)
		d = retry_after;
	return d;
}

/* ---- hooks ----------------------------------------------------------------------------- */

int tf_alerts_hook_name_ok(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > 64)
		return 0;
	for (; *s; s++)
		if (!islower((unsigned char)*s) && !isdigit((unsigned char)*s) && *s != '_' &&
		    *s != '-')
			return 0;
	return 1;
}

int tf_hook_secret(const char *env, const char *file, char **out, char *err, size_t errlen)
{
	if (env && *env) {
		const char *v = getenv(env);
		if (!v || !*v) {
			tf_errf(err, errlen,
			        "the hook's secret variable $%s is not set in this process's "
			        "environment",
			        env);
			return -ENOENT;
		}
		*out = tf_xstrdup(v);
		return 0;
	}
	if (file && *file) {
		char *text = NULL;
		size_t len = 0;
		int rc = tf_read_file(file, 4096, &text, &len);
		if (rc) {
			tf_errf(err, errlen, "cannot read the hook's secret file '%s': %s", file,
			        strerror(-rc));
			return -ENOENT;
		}
		while (len > 0 &&
		       (text[len - 1] == '\n' || text[len - 1] == '\r' || text[len - 1] == ' '))
			text[--len] = '\0';
		*out = text;
		return 0;
	}
	tf_errf(err, errlen, "the hook has no secret (--secret-env or --secret-file)");
	return -ENOENT;
}

int tf_hooks_add(struct tf_store *st, const struct tf_alerts_config *cfg, const struct tf_hook *h,
                 char *err, size_t errlen)
{
	if (!h->name || !tf_alerts_hook_name_ok(h->name)) {
		tf_errf(err, errlen, "hook name '%s': use 1 to 64 of a-z, 0-9, '_' and '-'",
		        h->name ? h->name : "");
		return -EINVAL;
	}
	if (!h->url || !*h->url) {
		tf_errf(err, errlen, "--url is required");
		return -EINVAL;
	}
	int rc = tf_alerts_url_allowed(cfg, h->url, err, errlen);
	if (rc)
		return -EINVAL;
	const char *f = h->format ? h->format : "standard";
	if (strcmp(f, "standard") && strcmp(f, "slack") && strcmp(f, "alertmanager")) {
		tf_errf(err, errlen, "--format '%s': use standard, slack or alertmanager", f);
		return -EINVAL;
	}
	if (h->secret_env && h->secret_file) {
		tf_errf(err, errlen, "give --secret-env or --secret-file, not both");
		return -EINVAL;
	}
	if (h->secret_env) {
		int ok = *h->secret_env && !isdigit((unsigned char)*h->secret_env);
		for (const char *p = h->secret_env; *p; p++)
			ok = ok && (isalnum((unsigned char)*p) || *p == '_');
		if (!ok) {
			tf_errf(err, errlen, "--secret-env '%s' is not a variable name",
			        h->secret_env);
			return -EINVAL;
		}
	}
	if (h->secret_file && h->secret_file[0] != '/') {
		tf_errf(err, errlen, "--secret-file '%s': give an absolute path", h->secret_file);
		return -EINVAL;
	}
	if (!strcmp(f, "standard") && !h->secret_env && !h->secret_file) {
		tf_errf(err, errlen,
		        "a standard hook signs every message: give --secret-env VAR or "
		        "--secret-file PATH holding a whsec_ secret");
		return -EINVAL;
	}
	/* the secret, when this process can read it, must be usable: checked, never kept */
	char *secret = NULL, serr[256];
	if ((h->secret_env || h->secret_file) && !strcmp(f, "standard") &&
	    tf_hook_secret(h->secret_env, h->secret_file, &secret, serr, sizeof(serr)) == 0) {
		char *sig = NULL;
		rc = tf_alert_signatures(secret, "msg_check", 0, "", 0, &sig);
		explicit_bzero(secret, strlen(secret));
		free(secret);
		free(sig);
		if (rc) {
			tf_errf(err, errlen,
			        "the secret in %s%s is not a Standard Webhooks secret: expected "
			        "whsec_ followed by the base64 of 24 to 64 random bytes (several, "
			        "separated by spaces, while one is rotated)",
			        h->secret_env ? "$" : "",
			        h->secret_env ? h->secret_env : h->secret_file);
			return -EINVAL;
		}
	}
	char *evs = tf_xstrdup(h->events ? h->events : ""), *save = NULL;
	json_t *names = json_array();
	for (char *w = strtok_r(evs, ", ", &save); w; w = strtok_r(NULL, ", ", &save)) {
		if (!tf_alert_event_find(w) || !strcmp(w, "test")) {
			tf_errf(err, errlen,
			        "--on: unknown event '%s' (events: see 'tpuflow hooks "
			        "events')",
			        w);
			free(evs);
			json_decref(names);
			return -EINVAL;
		}
		json_array_append_new(names, json_string(w));
	}
	free(evs);
	size_t i;
	json_t *v;
	char *joined = tf_xstrdup("");
	json_array_foreach(names, i, v)
	{
		char *n = tf_xasprintf("%s%s%s", joined, i ? "," : "", json_string_value(v));
		free(joined);
		joined = n;
	}
	json_decref(names);
	rc = tf_store_run(st,
	                  "INSERT INTO hooks(name, url, format, secret_env, secret_file, events, "
	                  "created_at) VALUES(?,?,?,?,?,?,?) ON CONFLICT(name) DO UPDATE SET "
	                  "url=excluded.url, format=excluded.format, "
	                  "secret_env=excluded.secret_env, secret_file=excluded.secret_file, "
	                  "events=excluded.events, disabled_at=NULL, disabled_reason=NULL",
	                  "ttttttd", h->name, h->url, f, h->secret_env, h->secret_file, joined,
	                  tf_now_wall());
	free(joined);
	if (rc)
		tf_errf(err, errlen, "%s", tf_store_errmsg(st));
	return rc;
}

int tf_hooks_remove(struct tf_store *st, const char *name)
{
	int rc = tf_store_run(st, "DELETE FROM hooks WHERE name=?", "t", name);
	if (rc == 0 && tf_store_changes(st) == 0)
		rc = -ENOENT;
	return rc;
}

int tf_hooks_list(struct tf_store *st, json_t **out)
{
	struct tf_stmt *q = tf_store_query(st,
	                                   "SELECT name, url, format, secret_env, secret_file, "
	                                   "events, created_at, disabled_at, disabled_reason "
	                                   "FROM hooks ORDER BY name",
	                                   "");
	if (!q)
		return -EIO;
	json_t *arr = json_array();
	int rc;
	while ((rc = tf_stmt_step(q)) == 1) {
		json_t *h = json_pack("{s:s, s:s, s:s, s:f}", "name", tf_stmt_text(q, 0), "url",
		                      tf_stmt_text(q, 1), "format", tf_stmt_text(q, 2),
		                      "created_at", tf_stmt_double(q, 6));
		if (tf_stmt_text(q, 3))
			json_object_set_new(h, "secret_env", json_string(tf_stmt_text(q, 3)));
		if (tf_stmt_text(q, 4))
			json_object_set_new(h, "secret_file", json_string(tf_stmt_text(q, 4)));
		json_object_set_new(h, "on", json_string(tf_stmt_text(q, 5)));
		if (tf_stmt_text(q, 8)) {
			json_object_set_new(h, "disabled_at", json_real(tf_stmt_double(q, 7)));
			json_object_set_new(h, "disabled", json_string(tf_stmt_text(q, 8)));
		}
		json_array_append_new(arr, h);
	}
	tf_stmt_done(q);
	if (rc < 0) {
		json_decref(arr);
		return rc;
	}
	*out = arr;
	return 0;
}

/* ---- emitting -------------------------------------------------------------------------- */

static int dstr_ok(json_t *data, const char *key)
{
	return json_string_value(json_object_get(data, key)) != NULL;
}

void tf_alert_time(double t, char out[32])
{
	time_t s = (time_t)t;
	struct tm tm;
	gmtime_r(&s, &tm);
	size_t n = strftime(out, 32, "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(out + n, 32 - n, ".%03dZ", (int)((t - (double)s) * 1000) % 1000);
}

static int insert_alert(struct tf_store *st, const char *event, const char *hook, const char *run,
                        const char *step, const char *payload, int64_t resolves, int64_t *id)
{
	char hex[33], msg[40];
	int rc = tf_random_hex(hex, 16);
	if (rc)
		return rc;
	snprintf(msg, sizeof(msg), "msg_%s", hex);
	double now = tf_now_wall();
	/* resolves: 'n' binds NULL for a row that resolves nothing */
	rc = tf_store_run(st,
	                  "INSERT INTO alerts(msg_id, event, hook, run_id, step, payload, "
	                  "next_attempt_at, created_at, queued_at, resolves) "
	                  "VALUES(?,?,?,?,?,?,?,?,?,?)",
	                  resolves ? "ttttttdddi" : "ttttttdddn", msg, event, hook, run, step,
	                  payload, now, now, now, resolves);
	if (rc == 0 && id)
		*id = tf_store_last_rowid(st);
	return rc;
}

/* ---- routing ---------------------------------------------------------------------------- */

/* Pipelines loaded for their routes, each with the text, path and params it was loaded from
 * (its key): a run's pipeline and params never change, so the events of a run parse its
 * pipeline once, not once each. A few runs' worth, replaced in turn; under `mu`, which is
 * taken inside the caller's write transaction and held only while the routes are read. */
static struct {
	pthread_mutex_t mu;
	struct kept_pipeline {
		char *src, *path, *params;
		struct tf_pipeline *p;
	} slot[8];
	size_t next; /* the slot a new load replaces */
} routes_kept = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* The pipeline a run was created from, loaded with the run's params; NULL when its text has
 * no `alerts:` (then it is not parsed at all) or cannot be loaded. Call it holding
 * routes_kept.mu: the pipeline is borrowed from routes_kept until that is released. */
static const struct tf_pipeline *run_pipeline(struct tf_store *st, const char *run)
{
	struct tf_stmt *q = tf_store_query(st,
	                                   "SELECT p.source, p.path, r.params FROM runs r JOIN "
	                                   "pipelines p ON p.id=r.pipeline_id WHERE r.id=?",
	                                   "t", run);
	if (!q)
		return NULL;
	const char *src = NULL, *path = NULL, *params = NULL;
	if (tf_stmt_step(q) == 1) {
		src = tf_stmt_text(q, 0);
		path = tf_stmt_text(q, 1) ? tf_stmt_text(q, 1) : "pipeline";
		params = tf_stmt_text(q, 2) ? tf_stmt_text(q, 2) : "{}";
	}
	struct tf_pipeline *p = NULL;
	for (size_t i = 0; src && i < TF_ARRAY_LEN(routes_kept.slot) && !p; i++) {
		struct kept_pipeline *k = &routes_kept.slot[i];
		if (k->p && !strcmp(k->src, src) && !strcmp(k->path, path) &&
		    !strcmp(k->params, params))
			p = k->p;
	}
	if (!p && src && strstr(src, "alerts")) {
		json_t *pj = json_loads(params, 0, NULL);
		size_t nov;
		struct tf_param_override *ov = tf_param_overrides_from_json(pj, &nov);
		struct tf_diag_list d = {0};
		if (tf_pipeline_load_buffer(path, src, strlen(src), ov, nov,
		                            TF_PIPELINE_ALLOW_UNSET, &p, &d) == 0) {
			struct kept_pipeline *k = &routes_kept.slot[routes_kept.next];
			routes_kept.next = (routes_kept.next + 1) % TF_ARRAY_LEN(routes_kept.slot);
			free(k->src);
			free(k->path);
			free(k->params);
			tf_pipeline_free(k->p);
			*k = (struct kept_pipeline){tf_xstrdup(src), tf_xstrdup(path),
			                            tf_xstrdup(params), p};
		} else {
			tf_warn("run '%s': the alert routes of its pipeline cannot be read", run);
		}
		tf_diag_list_release(&d);
		free(ov);
		json_decref(pj);
	}
	tf_stmt_done(q);
	return p;
}

struct route_ctx {
	struct tf_store *st;
	const char *run;
	const struct tf_pipeline *p;
};

/* Values for a route's `when`: params, and the metrics and outputs the run's steps have. */
static json_t *route_lookup(void *ctx, const struct tf_ref *ref)
{
	struct route_ctx *c = ctx;
	if (ref->kind == TF_REF_PARAM)
		return tf_pipeline_lookup_param((void *)c->p, ref);
	if (ref->kind == TF_REF_RUN) /* the loader allows id and pipeline */
		return json_string(!strcmp(ref->name, "id") ? c->run : c->p->name);
	if (ref->kind == TF_REF_ENV)
		return NULL;
	char *text = NULL;
	int rc = ref->kind == TF_REF_METRIC
	             ? tf_store_query_text(c->st, &text,
	                                   "SELECT metrics FROM steps WHERE run_id=? AND name=?",
	                                   "tt", c->run, ref->step)
	             : tf_store_query_text(c->st, &text,
	                                   "SELECT outputs FROM steps WHERE run_id=? AND name=?",
	                                   "tt", c->run, ref->step);
	if (rc || !text)
		return NULL;
	json_t *all = json_loads(text, 0, NULL);
	free(text);
	json_t *v = json_incref(json_object_get(all, ref->name));
	json_decref(all);
	return v;
}

/* Adds hook `name` to the targets once: {name, format}, or {name, missing: WHERE} when the home
 * has no such hook (WHERE: the route's position). */
static int add_target(struct tf_store *st, json_t *to, const char *name, const char *where)
{
	size_t i;
	json_t *t;
	json_array_foreach(
	    to, i, t) if (!strcmp(json_string_value(json_object_get(t, "name")), name)) return 0;
	char *format = NULL;
	int rc =
	    tf_store_query_text(st, &format, "SELECT format FROM hooks WHERE name=?", "t", name);
	if (rc == 0)
		json_array_append_new(to, json_pack("{s:s, s:s}", "name", name, "format", format));
	else if (rc == -ENOENT)
		json_array_append_new(
		    to, json_pack("{s:s, s:s}", "name", name, "missing", where ? where : "?"));
	free(format);
	return rc == -ENOENT ? 0 : rc;
}

/* The hooks an event goes to: the home-wide routes (hooks.events), then the routes of the
 * run's pipeline whose `on` names it and whose `when` holds (a `when` that cannot be
 * evaluated, e.g. a metric of a step that did not run, does not hold). */
static int route(struct tf_store *st, const char *event, const char *run, json_t *to)
{
	struct tf_stmt *q = tf_store_query(st, "SELECT name, events FROM hooks", "");
	if (!q)
		return -EIO;
	json_t *home = json_array();
	int rc;
	while ((rc = tf_stmt_step(q)) == 1)
		if (list_has(tf_stmt_text(q, 1), event))
			json_array_append_new(home, json_string(tf_stmt_text(q, 0)));
	tf_stmt_done(q);
	size_t i;
	json_t *h;
	json_array_foreach(home, i, h) if (rc == 0) rc =
	    add_target(st, to, json_string_value(h), NULL);
	json_decref(home);
	pthread_mutex_lock(&routes_kept.mu);
	const struct tf_pipeline *p = rc == 0 && run ? run_pipeline(st, run) : NULL;
	for (size_t r = 0; p && rc == 0 && r < p->nalerts; r++) {
		const struct tf_alert_route *ar = &p->alerts[r];
		int on = 0;
		for (size_t k = 0; k < ar->non; k++)
			on = on || !strcmp(ar->on[k], event);
		if (!on)
			continue;
		if (ar->when) {
			struct route_ctx c = {st, run, p};
			char err[256];
			int yes = 0;
			if (tf_expr_eval_bool(ar->when, route_lookup, &c, &yes, err, sizeof(err)))
				tf_debug("run '%s': %s:%d:%d: %s: %s not routed", run, p->path,
				         ar->line, ar->col, err, event);
			if (!yes)
				continue;
		}
		for (size_t k = 0; rc == 0 && k < ar->nto; k++) {
			char where[300];
			snprintf(where, sizeof(where), "%s:%d:%d", p->path, ar->to_lines[2 * k],
			         ar->to_lines[2 * k + 1]);
			rc = add_target(st, to, ar->to[k], where);
		}
	}
	pthread_mutex_unlock(&routes_kept.mu);
	return rc;
}

/* When a run starts: a route to a hook the home does not have is an error naming it (its
 * alerts are dead-lettered saying the same). */
static void check_routes(struct tf_store *st, const char *run)
{
	pthread_mutex_lock(&routes_kept.mu);
	const struct tf_pipeline *p = run_pipeline(st, run);
	for (size_t r = 0; p && r < p->nalerts; r++)
		for (size_t k = 0; k < p->alerts[r].nto; k++) {
			const char *hook = p->alerts[r].to[k];
			char *format = NULL;
			if (tf_store_query_text(st, &format,
			                        "SELECT format FROM hooks WHERE name=?", "t",
			                        hook) == -ENOENT)
				tf_error(
				    "%s:%d:%d: run '%s': alert route to hook '%s', which this home "
				    "does not have: its alerts are dead-lettered (add it: tpuflow "
				    "hooks add %s --url URL)",
				    p->path, p->alerts[r].to_lines[2 * k],
				    p->alerts[r].to_lines[2 * k + 1], run, hook, hook);
			free(format);
		}
	pthread_mutex_unlock(&routes_kept.mu);
}

/* Resolves Alertmanager alerts still firing: those of `pipeline` (NULL: of any pipeline or of
 * none), of `event` (NULL: any) and whose payload's data has each member of `about` (NULL:
 * all) with the same value. Each gets a resolving row with the same payload (so the same
 * labels) and ends_at set, and leaves alert_firing, in the caller's transaction. */
static int resolve_firing(struct tf_store *st, const char *pipeline, const char *event,
                          json_t *about, double now)
{
	struct tf_stmt *q = tf_store_query(st,
	                                   "SELECT f.alert_id, f.hook, a.event, a.run_id, a.step, "
	                                   "a.payload FROM alert_firing f JOIN alerts a ON "
	                                   "a.id=f.alert_id WHERE (?1 IS NULL OR f.pipeline=?1) "
	                                   "AND (?2 IS NULL OR f.event=?2) ORDER BY f.alert_id",
	                                   "tt", pipeline, event);
	if (!q)
		return -EIO;
	json_t *rows = json_array();
	int rc;
	while ((rc = tf_stmt_step(q)) == 1)
		json_array_append_new(
		    rows, json_pack("{s:I, s:s, s:s, s:s?, s:s?, s:s}", "id",
		                    (json_int_t)tf_stmt_int(q, 0), "hook", tf_stmt_text(q, 1),
		                    "event", tf_stmt_text(q, 2), "run", tf_stmt_text(q, 3), "step",
		                    tf_stmt_text(q, 4), "payload", tf_stmt_text(q, 5)));
	tf_stmt_done(q);
	size_t i;
	json_t *r;
	char ends[32];
	tf_alert_time(now, ends);
	json_array_foreach(rows, i, r)
	{
		if (rc < 0)
			break;
		json_t *p = json_loads(json_string_value(json_object_get(r, "payload")), 0, NULL);
		json_t *data = json_object_get(p, "data");
		const char *key;
		json_t *want;
		int match = json_is_object(data);
		json_object_foreach(about, key, want)
		{
			match = match && json_equal(json_object_get(data, key), want);
		}
		if (!match) {
			json_decref(p);
			continue;
		}
		json_object_set_new(data, "resolved", json_true());
		json_object_set_new(data, "ends_at", json_string(ends));
		char *text = json_dumps(p, JSON_COMPACT | JSON_SORT_KEYS);
		json_int_t fid = json_integer_value(json_object_get(r, "id"));
		rc = insert_alert(st, json_string_value(json_object_get(r, "event")),
		                  json_string_value(json_object_get(r, "hook")),
		                  json_string_value(json_object_get(r, "run")),
		                  json_string_value(json_object_get(r, "step")), text, fid, NULL);
		if (rc == 0)
			rc = tf_store_run(st, "DELETE FROM alert_firing WHERE alert_id=?", "i",
			                  (int64_t)fid);
		free(text);
		json_decref(p);
	}
	json_decref(rows);
	return rc < 0 ? rc : 0;
}

/* Whether an Alertmanager alert of `ev` stays firing (re-posted by the delivery worker) until
 * something ends its condition: a run of its pipeline that succeeds; the chip repaired
 * (tf_alerts_on_chip_repaired); the model's alias deployed or promoted again after a
 * rollback; a version of the model registered that is not worse on the metric. Alerts of
 * severity info, and those of an event that ends as it happens (daemon_unclean_stop), are
 * posted once: Alertmanager ends them after its resolve_timeout. */
static int stays_firing(const struct tf_alert_event *ev, const char *pipeline, json_t *data)
{
	if (!strcmp(ev->severity, "info"))
		return 0;
	if (pipeline)
		return 1;
	if (!strcmp(ev->name, "chip_failed"))
		return dstr_ok(data, "pool") && json_array_size(json_object_get(data, "chip")) == 3;
	if (!strcmp(ev->name, "model_rolled_back"))
		return dstr_ok(data, "model") && dstr_ok(data, "alias");
	if (!strcmp(ev->name, "metric_regressed"))
		return dstr_ok(data, "model") && dstr_ok(data, "metric");
	return 0;
}

int tf_alerts_emit(struct tf_store *st, const char *event, const char *run, const char *step,
                   const char *message, json_t *extra)
{
	const struct tf_alert_event *ev = tf_alert_event_find(event);
	if (!ev)
		return -EINVAL;
	int own, rc = tf_store_join(st, &own);
	if (rc)
		return rc;
	json_t *to = json_array();
	rc = route(st, event, run, to);
	/* the run's pipeline: only when an alert is written or firing ones may resolve */
	char *pipeline = NULL;
	if (rc == 0 && run && (json_array_size(to) || !strcmp(event, "run_succeeded")))
		tf_store_query_text(st, &pipeline, "SELECT pipeline FROM runs WHERE id=?", "t",
		                    run);
	/* an event of no run that is about a pipeline (schedule_missed) belongs to it too */
	if (!pipeline && json_is_string(json_object_get(extra, "pipeline")))
		pipeline = tf_xstrdup(json_string_value(json_object_get(extra, "pipeline")));
	double now = tf_now_wall();
	if (rc == 0 && json_array_size(to)) {
		char at[32];
		tf_alert_time(now, at);
		json_t *data = json_pack("{s:s, s:s, s:s}", "event", event, "summary", ev->summary,
		                         "severity", ev->severity);
		if (run)
			json_object_set_new(data, "run", json_string(run));
		if (pipeline)
			json_object_set_new(data, "pipeline", json_string(pipeline));
		if (step)
			json_object_set_new(data, "step", json_string(step));
		if (message)
			json_object_set_new(data, "message", json_string(message));
		if (extra)
			json_object_update_missing(data, extra);
		int firing = stays_firing(ev, pipeline, data);
		json_t *p =
		    json_pack("{s:s, s:s, s:o}", "type", event, "timestamp", at, "data", data);
		char *text = json_dumps(p, JSON_COMPACT | JSON_SORT_KEYS);
		json_decref(p);
		size_t i;
		json_t *h;
		json_array_foreach(to, i, h)
		{
			int64_t id = 0;
			const char *hook = json_string_value(json_object_get(h, "name"));
			const char *missing = json_string_value(json_object_get(h, "missing"));
			rc = insert_alert(st, event, hook, run, step, text, 0, &id);
			if (rc == 0 && missing) { /* dead at once, saying why */
				char why[512];
				snprintf(why, sizeof(why),
				         "no hook '%s' in this home (routed at %s): add it with "
				         "'tpuflow hooks add %s --url URL', then 'tpuflow alerts "
				         "redeliver %lld'",
				         hook, missing, hook, (long long)id);
				tf_error("%s: %s", event, why);
				rc = tf_store_run(st,
				                  "UPDATE alerts SET state='dead', dead_at=?, "
				                  "last_error=? WHERE id=?",
				                  "dti", now, why, id);
				if (rc)
					break;
				continue;
			}
			/* an Alertmanager alert stays firing until its condition ends
			 * (stays_firing); pipeline '' for one of no pipeline */
			if (rc == 0 && firing &&
			    !strcmp(json_string_value(json_object_get(h, "format")),
			            "alertmanager"))
				rc = tf_store_run(
				    st,
				    "INSERT INTO alert_firing(alert_id, hook, pipeline, "
				    "event) VALUES(?,?,?,?)",
				    "ittt", id, hook, pipeline ? pipeline : "", event);
			if (rc)
				break;
		}
		free(text);
	}
	json_decref(to);
	if (rc == 0 && pipeline && run && !strcmp(event, "run_succeeded"))
		rc = resolve_firing(st, pipeline, NULL, NULL, now);
	/* the alias deployed (or its canary promoted) again: its rollback is over */
	if (rc == 0 && (!strcmp(event, "model_deployed") || !strcmp(event, "model_promoted")) &&
	    dstr_ok(extra, "model") && dstr_ok(extra, "alias")) {
		json_t *about = json_pack("{s:O, s:O}", "model", json_object_get(extra, "model"),
		                          "alias", json_object_get(extra, "alias"));
		rc = resolve_firing(st, NULL, "model_rolled_back", about, now);
		json_decref(about);
	}
	free(pipeline);
	return tf_store_leave(st, own, rc);
}

int tf_alerts_on_chip_repaired(struct tf_store *st, const char *pool, const int xyz[3])
{
	int own, rc = tf_store_join(st, &own);
	if (rc)
		return rc;
	json_t *about = json_pack("{s:s, s:[i,i,i]}", "pool", pool, "chip", xyz[0], xyz[1], xyz[2]);
	rc = resolve_firing(st, NULL, "chip_failed", about, tf_now_wall());
	json_decref(about);
	return tf_store_leave(st, own, rc);
}

int tf_alerts_on_run(struct tf_store *st, const char *run, enum tf_run_state to, const char *error)
{
	if (to == TF_RUN_RUNNING) {
		check_routes(st, run);
		return 0;
	}
	if (to == TF_RUN_SUCCEEDED)
		return tf_alerts_emit(st, "run_succeeded", run, NULL, NULL, NULL);
	if (to != TF_RUN_FAILED)
		return 0;
	/* a cancel is asked through the row (runs cancel), or ends a run that had not started */
	int64_t asked = 0;
	tf_store_query_int(st, &asked,
	                   "SELECT cancel_requested_at IS NOT NULL OR cancelled_at IS NOT NULL "
	                   "FROM runs WHERE id=?",
	                   "t", run);
	int cancelled = asked || (error && !strncmp(error, "cancelled", 9));
	return tf_alerts_emit(st, cancelled ? "run_cancelled" : "run_failed", run, NULL, error,
	                      NULL);
}

int tf_alerts_on_step(struct tf_store *st, const char *run, const char *step, enum tf_step_state to,
                      const char *reason, const char *metrics)
{
	int rc = 0;
	/* no failure class says so (a diverged training is an error like any other): the
	 * words of ml/train.h in the attempt's error do, whichever process ran the step */
	if ((to == TF_STEP_RETRYING || to == TF_STEP_FAILED) && reason &&
	    strstr(reason, TF_TRAIN_DIVERGED))
		rc = tf_alerts_emit(st, "training_diverged", run, step, reason, NULL);
	if (rc == 0 && to == TF_STEP_RETRYING)
		rc = tf_alerts_emit(st, "step_retried", run, step, reason, NULL);
	else if (rc == 0 && to == TF_STEP_FAILED)
		rc = tf_alerts_emit(st, "step_failed", run, step, reason, NULL);
	else if (rc == 0 && to == TF_STEP_SUCCEEDED && metrics &&
	         strstr(metrics, "early_stopped")) {
		json_t *m = json_loads(metrics, 0, NULL);
		json_t *es = json_object_get(m, "early_stopped");
		if (json_number_value(es) > 0 || json_is_true(es))
			rc = tf_alerts_emit(st, "training_stopped_early", run, step,
			                    "early stopping ended training (patience)", m);
		json_decref(m);
	}
	return rc;
}

/* The configuration of the home a store belongs to (HOME/tpuflow.db), read again when the
 * copy kept here is older than two seconds (the broker asks on every decision). */
static void store_config(struct tf_store *st, struct tf_alerts_config *cfg)
{
	static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
	static char *home;
	static double loaded;
	static struct tf_alerts_config kept;
	char *h = tf_xstrdup(tf_store_path(st)), *slash = strrchr(h, '/'), err[512];
	if (slash)
		*slash = '\0';
	pthread_mutex_lock(&mu);
	double now = tf_now_monotonic();
	if (!home || strcmp(home, slash ? h : ".") || now - loaded > 2) {
		tf_alerts_config_release(&kept);
		if (tf_alerts_config_load(slash ? h : ".", &kept, err, sizeof(err)))
			tf_warn("%s", err);
		free(home);
		home = tf_xstrdup(slash ? h : ".");
		loaded = now;
	}
	*cfg = kept;
	cfg->allow_hosts = tf_xstrdup(kept.allow_hosts);
	cfg->dashboard_url = kept.dashboard_url ? tf_xstrdup(kept.dashboard_url) : NULL;
	pthread_mutex_unlock(&mu);
	free(h);
}

/* Metrics where a higher value is better; any other known metric is better lower (loss). */
static int higher_better(const char *metric)
{
	return !strcmp(metric, "accuracy") || !strcmp(metric, "auc");
}

int tf_alerts_on_register(struct tf_store *st, const char *model, int64_t version, const char *run,
                          const char *step, const char *metrics)
{
	char msg[300];
	snprintf(msg, sizeof(msg), "registered %s version %lld", model, (long long)version);
	json_t *m = json_loads(metrics ? metrics : "{}", 0, NULL);
	json_t *extra = json_pack("{s:s, s:I, s:O}", "model", model, "version", (json_int_t)version,
	                          "metrics", m ? m : json_object());
	int rc = tf_alerts_emit(st, "model_registered", run, step, msg, extra);
	json_decref(extra);
	/* compared with the version the `production` alias points at */
	char *prod = NULL;
	int64_t pv = 0;
	if (rc == 0 && json_is_object(m) &&
	    tf_store_query_int(st, &pv,
	                       "SELECT a.version FROM aliases a JOIN models md ON md.id=a.model_id "
	                       "WHERE md.name=? AND a.alias='production'",
	                       "t", model) == 0 &&
	    pv != version &&
	    tf_store_query_text(st, &prod,
	                        "SELECT v.metrics FROM model_versions v JOIN models md ON "
	                        "md.id=v.model_id WHERE md.name=? AND v.version=?",
	                        "ti", model, pv) == 0) {
		struct tf_alerts_config cfg;
		store_config(st, &cfg);
		json_t *pm = json_loads(prod ? prod : "{}", 0, NULL);
		static const char *const watched[] = {"accuracy", "auc", "loss"};
		for (size_t i = 0; rc == 0 && i < TF_ARRAY_LEN(watched); i++) {
			json_t *a = json_object_get(m, watched[i]),
			       *b = json_object_get(pm, watched[i]);
			if (!json_is_number(a) || !json_is_number(b))
				continue;
			double now = json_number_value(a), was = json_number_value(b);
			double worse = higher_better(watched[i]) ? was - now : now - was;
			if (!(worse > cfg.regression_threshold)) { /* a regression of it is over */
				json_t *about =
				    json_pack("{s:s, s:s}", "model", model, "metric", watched[i]);
				rc = resolve_firing(st, NULL, "metric_regressed", about,
				                    tf_now_wall());
				json_decref(about);
				continue;
			}
			snprintf(
			    msg, sizeof(msg),
			    "%s version %lld: %s %.4g is worse than production (version %lld) %.4g "
			    "by %.4g, more than the threshold %.4g",
			    model, (long long)version, watched[i], now, (long long)pv, was, worse,
			    cfg.regression_threshold);
			json_t *x = json_pack("{s:s, s:I, s:I, s:s, s:f, s:f, s:f}", "model", model,
			                      "version", (json_int_t)version, "production_version",
			                      (json_int_t)pv, "metric", watched[i], "value", now,
			                      "production_value", was, "threshold",
			                      cfg.regression_threshold);
			rc = tf_alerts_emit(st, "metric_regressed", run, step, msg, x);
			json_decref(x);
		}
		json_decref(pm);
		tf_alerts_config_release(&cfg);
	}
	free(prod);
	json_decref(m);
	return rc;
}

int tf_alerts_on_waiting(struct tf_store *st, const char *run, const char *step, int attempt,
                         double waited, const char *why)
{
	struct tf_alerts_config cfg;
	store_config(st, &cfg);
	double limit = cfg.job_wait;
	tf_alerts_config_release(&cfg);
	if (waited < limit)
		return 0;
	/* Told already? The broker asks on every decision for every request waiting past the
	 * limit, and the answer is the alert's event, among the newest of the run once written:
	 * looked for from the newest event back (the run's key order), not from the run's
	 * first event on. */
	int64_t told;
	int rc = tf_store_query_int(st, &told,
	                            "SELECT id FROM events WHERE run_id=? AND step=? AND attempt=? "
	                            "AND kind='alert' AND message LIKE 'job_waiting%' "
	                            "ORDER BY id DESC LIMIT 1",
	                            "tti", run, step, (int64_t)attempt);
	if (rc != -ENOENT)
		return rc;
	char msg[400];
	snprintf(msg, sizeof(msg),
	         "job_waiting: attempt %d has waited %.0f s for its slice (more "
	         "than %.0f s): %s",
	         attempt, waited, limit, why ? why : "");
	rc = tf_event_add(st, run, step, attempt, "alert", msg); /* once per attempt */
	json_t *x = json_pack("{s:i, s:f, s:f}", "attempt", attempt, "waited_seconds", waited,
	                      "threshold_seconds", limit);
	if (rc == 0)
		rc = tf_alerts_emit(st, "job_waiting", run, step, msg + 13, x);
	json_decref(x);
	return rc;
}

int tf_alerts_queue_test(struct tf_store *st, const char *name, int64_t *id)
{
	char *format = NULL;
	int own, rc = tf_store_join(st, &own);
	if (rc)
		return rc;
	rc = tf_store_query_text(st, &format, "SELECT format FROM hooks WHERE name=?", "t", name);
	if (rc == 0) {
		char at[32];
		tf_alert_time(tf_now_wall(), at);
		const struct tf_alert_event *ev = tf_alert_event_find("test");
		json_t *p = json_pack("{s:s, s:s, s:{s:s, s:s, s:s, s:s, s:s}}", "type", "test",
		                      "timestamp", at, "data", "event", "test", "summary",
		                      ev->summary, "severity", ev->severity, "pipeline", "tpuflow",
		                      "message", "a test alert from 'tpuflow hooks test'");
		char *text = json_dumps(p, JSON_COMPACT | JSON_SORT_KEYS);
		rc = insert_alert(st, "test", name, NULL, NULL, text, 0, id);
		free(text);
		json_decref(p);
	}
	free(format);
	return tf_store_leave(st, own, rc);
}

/* ---- the outbox ------------------------------------------------------------------------ */

#define ALERT_COLS                                                                                 \
	"id, msg_id, event, hook, run_id, step, state, attempts, next_attempt_at, last_status, "   \
	"last_error, created_at, delivered_at, dead_at, resolves, payload"

static json_t *alert_row(struct tf_stmt *q, int with_payload)
{
	json_t *a =
	    json_pack("{s:I, s:s, s:s, s:s, s:s, s:I, s:f}", "id", (json_int_t)tf_stmt_int(q, 0),
	              "msg_id", tf_stmt_text(q, 1), "event", tf_stmt_text(q, 2), "hook",
	              tf_stmt_text(q, 3), "state", tf_stmt_text(q, 6), "attempts",
	              (json_int_t)tf_stmt_int(q, 7), "created_at", tf_stmt_double(q, 11));
	static const struct {
		int col;
		const char *key;
		char type; /* t text, i int, d double */
	} opt[] = {{4, "run", 't'},         {5, "step", 't'},        {8, "next_attempt_at", 'd'},
	           {9, "last_status", 'i'}, {10, "last_error", 't'}, {12, "delivered_at", 'd'},
	           {13, "dead_at", 'd'},    {14, "resolves", 'i'}};
	for (size_t i = 0; i < TF_ARRAY_LEN(opt); i++) {
		if (tf_stmt_is_null(q, opt[i].col))
			continue;
		json_object_set_new(a, opt[i].key,
		                    opt[i].type == 't' ? json_string(tf_stmt_text(q, opt[i].col))
		                    : opt[i].type == 'i'
		                        ? json_integer(tf_stmt_int(q, opt[i].col))
		                        : json_real(tf_stmt_double(q, opt[i].col)));
	}
	if (with_payload)
		json_object_set_new(a, "payload", json_loads(tf_stmt_text(q, 15), 0, NULL));
	return a;
}

int tf_alerts_list(struct tf_store *st, int dead_only, int limit, json_t **out)
{
	struct tf_stmt *q =
	    tf_store_query(st,
	                   "SELECT " ALERT_COLS " FROM alerts WHERE (?1 = 0 OR "
	                   "state = 'dead') ORDER BY id DESC LIMIT ?2",
	                   "ii", (int64_t)(dead_only != 0), (int64_t)(limit > 0 ? limit : 100));
	if (!q)
		return -EIO;
	json_t *arr = json_array();
	int rc;
	while ((rc = tf_stmt_step(q)) == 1)
		json_array_append_new(arr, alert_row(q, 0));
	tf_stmt_done(q);
	if (rc < 0) {
		json_decref(arr);
		return rc;
	}
	*out = arr;
	return 0;
}

int tf_alerts_show(struct tf_store *st, const char *id, json_t **out)
{
	struct tf_stmt *q = tf_store_query(
	    st, "SELECT " ALERT_COLS " FROM alerts WHERE msg_id=?1 OR CAST(id AS TEXT)=?1", "t",
	    id);
	if (!q)
		return -EIO;
	int rc = tf_stmt_step(q);
	if (rc == 1) {
		*out = alert_row(q, 1);
		rc = 0;
	} else if (rc == 0) {
		rc = -ENOENT;
	}
	tf_stmt_done(q);
	return rc;
}

int tf_alerts_redeliver(struct tf_store *st, const char *id, int64_t *n)
{
	double now = tf_now_wall();
	int rc =
	    tf_store_run(st,
	                 "UPDATE alerts SET state='pending', attempts=0, next_attempt_at=?1, "
	                 "queued_at=?1, dead_at=NULL, lease_until=NULL WHERE "
	                 "(?2 IS NULL AND state='dead') OR (?2 IS NOT NULL AND state!='pending' "
	                 "AND (msg_id=?2 OR CAST(id AS TEXT)=?2))",
	                 "dt", now, id);
	if (rc == 0) {
		*n = tf_store_changes(st);
		if (id && *n == 0) {
			json_t *a = NULL;
			rc = tf_alerts_show(st, id, &a); /* -ENOENT, or it is pending already */
			json_decref(a);
			if (rc == 0)
				rc = -EALREADY;
		}
	}
	return rc;
}

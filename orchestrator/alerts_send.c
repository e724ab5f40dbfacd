/* alerts_send.c — owns delivering the outbox (orchestrator/alerts.c): the three body formats,
 * Standard Webhooks signing, the POST (libcurl), what each answer means for the row, and the
 * worker thread that keeps a home's alerts moving.
 *
 * A pass takes the due rows in one write transaction and leases them (lease_until), so two
 * processes on a home (the daemon and a `tpuflow run`) do not send the same row at once; it
 * posts them outside any transaction, then records each outcome in one short transaction:
 *   2xx                      delivered
 *   other 4xx, 5xx, no answer, timeout, secret unreadable
 *                            another attempt after tf_alerts_backoff (Retry-After honoured),
 *                            dead once max_attempts were made or the horizon has passed
 *   3xx (never followed), 400, 410, 413, 422, host not allowed
 *                            dead at once: the receiver refuses this body or this sender;
 *                            410 Gone also disables the hook (its later alerts are dead
 *                            without a request until `hooks add` sets it again)
 * A hook's alerts go in the order they were queued: a pass takes the oldest pending row of
 * each hook, and the next one only once it is delivered or dead, so a receiver that is down
 * gets one request per backoff, not one per queued alert, and a firing alert reaches
 * Alertmanager before the alert that resolves it. A process killed while posting leaves the
 * lease to run out: the row is sent again by the next pass, with the same msg_id (at least
 * once). */
#include "orchestrator/alerts.h"

#define TF_LOG_TAG "alerts"
#include "common/common.h"
#include "common/log.h"

#include <curl/curl.h>
#include <errno.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef TF_VERSION
#define TF_VERSION "0"
#endif

#define LEASE_MARGIN 5.0       /* seconds a lease outlives the POST's own timeout */
#define REFIRE_S 60.0          /* firing Alertmanager alerts are posted again this often */
#define RESOLVED_S 300.0       /* and resolving ones for this long after their delivery */
#define BODY_CAP (16 * 1024)   /* bytes of an answer kept (the rest is refused) */
#define SLACK_SECTION_MAX 2900 /* Slack: a section's text is at most 3000 characters */
#define SLACK_HEADER_MAX 150   /* Slack: a header's plain_text is at most 150 characters */

/* ---- formats ---------------------------------------------------------------------------- */

static const char *dstr(json_t *data, const char *key)
{
	return json_string_value(json_object_get(data, key));
}

static char *run_link(const struct tf_alerts_config *cfg, const char *run)
{
	if (!cfg->dashboard_url || !run)
		return NULL;
	return tf_xasprintf("%s/#/runs/%s", cfg->dashboard_url, run);
}

/* The longest start of s, at most max bytes, that does not end inside a UTF-8 sequence (a
 * text cut in the middle of a character is not UTF-8, and no JSON encoder takes it). */
static size_t utf8_cut(const char *s, size_t max)
{
	size_t n = strlen(s);
	if (n <= max)
		return n;
	while (max > 0 && ((unsigned char)s[max] & 0xC0) == 0x80)
		max--;
	return max;
}

/* Cuts an escaped mrkdwn text in place to at most max bytes, on a character and not inside
 * an entity (&amp; &lt; &gt;). */
static void slack_cut(char *s, size_t max)
{
	size_t n = utf8_cut(s, max);
	char *amp = memrchr(s, '&', n);
	if (amp && !memchr(amp, ';', n - (size_t)(amp - s)))
		n = (size_t)(amp - s);
	s[n] = '\0';
}

/* Slack's mrkdwn needs &, < and > escaped (https://api.slack.com/reference/surfaces/formatting):
 * s escaped, from at most max bytes of it cut on a character. */
static char *slack_text(const char *s, size_t max)
{
	size_t n = s ? utf8_cut(s, max) : 0, len = 0;
	char *out = tf_xmalloc(5 * n + 1);
	for (size_t i = 0; i < n; i++) {
		const char *rep = s[i] == '&'   ? "&amp;"
		                  : s[i] == '<' ? "&lt;"
		                  : s[i] == '>' ? "&gt;"
		                                : NULL;
		size_t k = rep ? strlen(rep) : 1;
		memcpy(out + len, rep ? rep : s + i, k);
		len += k;
	}
	out[len] = '\0';
	return out;
}

/* An incoming-webhook message (https://api.slack.com/messaging/webhooks): `text` as the
 * notification fallback, and blocks: a header, a section with the facts and the message, a
 * context line. */
static json_t *slack_body(json_t *p, const struct tf_alerts_config *cfg)
{
	json_t *d = json_object_get(p, "data");
	const char *run = dstr(d, "run"), *pipeline = dstr(d, "pipeline"), *step = dstr(d, "step");
	int resolved = json_is_true(json_object_get(d, "resolved"));
	char *link = run_link(cfg, run);
	char *summary = tf_xasprintf("%s%s", resolved ? "resolved: " : "", dstr(d, "summary"));
	char *head = tf_xasprintf("tpuflow: %s", summary);
	head[utf8_cut(head, SLACK_HEADER_MAX)] = '\0'; /* plain_text: no escaping */
	char *raw = tf_xasprintf("tpuflow %s%s%s%s%s%s%s", dstr(p, "type"),
	                         pipeline ? " pipeline " : "", pipeline ? pipeline : "",
	                         run ? " run " : "", run ? run : "", dstr(d, "message") ? ": " : "",
	                         dstr(d, "message") ? dstr(d, "message") : "");
	char *fallback = slack_text(raw, SLACK_SECTION_MAX); /* `text` is mrkdwn too */
	slack_cut(fallback, SLACK_SECTION_MAX);
	free(raw);
	char *epipe = slack_text(pipeline, 200), *erun = slack_text(run, 64),
	     *estep = slack_text(step, 200), *emsg = slack_text(dstr(d, "message"), 2000);
	char *runpart = !run   ? tf_xstrdup("")
	                : link ? tf_xasprintf("\n*Run* <%s|%s>", link, erun)
	                       : tf_xasprintf("\n*Run* `%s`", erun);
	char *facts =
	    tf_xasprintf("*%s*%s%s%s%s%s%s%s%s", summary, pipeline ? "\n*Pipeline* `" : "",
	                 pipeline ? epipe : "", pipeline ? "`" : "", runpart,
	                 step ? "\n*Step* `" : "", step ? estep : "", step ? "`" : "", "");
	char *section = emsg[0] ? tf_xasprintf("%s\n>%s", facts, emsg) : tf_xstrdup(facts);
	slack_cut(section, SLACK_SECTION_MAX);
	char *ctx = tf_xasprintf("%s · %s · %s", dstr(p, "type"), dstr(d, "severity"),
	                         dstr(p, "timestamp"));
	json_t *body =
	    json_pack("{s:s, s:[{s:s, s:{s:s, s:s}}, {s:s, s:{s:s, s:s}}, {s:s, s:[{s:s, s:s}]}]}",
	              "text", fallback, "blocks", "type", "header", "text", "type", "plain_text",
	              "text", head, "type", "section", "text", "type", "mrkdwn", "text", section,
	              "type", "context", "elements", "type", "mrkdwn", "text", ctx);
	free(link);
	free(summary);
	free(head);
	free(fallback);
	free(epipe);
	free(erun);
	free(estep);
	free(emsg);
	free(runpart);
	free(facts);
	free(section);
	free(ctx);
	return body;
}

/* One alert for Alertmanager's POST /api/v2/alerts (a JSON array): labels identify it (the
 * event and what it is about: the pipeline and step, so a later run resolves the same alert;
 * the model, alias, metric; the pool and chip), annotations describe this occurrence (the
 * run, the version); a resolving row carries endsAt. */
static json_t *alertmanager_body(json_t *p, const struct tf_alerts_config *cfg)
{
	json_t *d = json_object_get(p, "data");
	json_t *labels = json_pack("{s:s, s:s, s:s}", "alertname", dstr(p, "type"), "severity",
	                           dstr(d, "severity"), "source", "tpuflow");
	/* what the alert is about: two failed chips, or regressions of two models, are two
	 * alerts (the same labels would make the second an update of the first, and
	 * Alertmanager does not notify an update) */
	static const char *const about[] = {"pipeline", "step", "model", "alias", "metric", "pool"};
	for (size_t i = 0; i < TF_ARRAY_LEN(about); i++)
		if (dstr(d, about[i]))
			json_object_set_new(labels, about[i], json_string(dstr(d, about[i])));
	json_t *chip = json_object_get(d, "chip");
	if (json_array_size(chip) == 3) {
		char *xyz = tf_xasprintf("%lld,%lld,%lld",
		                         (long long)json_integer_value(json_array_get(chip, 0)),
		                         (long long)json_integer_value(json_array_get(chip, 1)),
		                         (long long)json_integer_value(json_array_get(chip, 2)));
		json_object_set_new(labels, "chip", json_string(xyz));
		free(xyz);
	}
	json_t *ann = json_pack("{s:s}", "summary", dstr(d, "summary"));
	if (dstr(d, "message"))
		json_object_set_new(ann, "description", json_string(dstr(d, "message")));
	if (dstr(d, "run"))
		json_object_set_new(ann, "run", json_string(dstr(d, "run")));
	if (json_is_integer(json_object_get(d, "version"))) {
		char *v = tf_xasprintf(
		    "%lld", (long long)json_integer_value(json_object_get(d, "version")));
		json_object_set_new(ann, "version", json_string(v));
		free(v);
	}
	json_t *a = json_pack("{s:o, s:o, s:s}", "labels", labels, "annotations", ann, "startsAt",
	                      dstr(p, "timestamp"));
	if (dstr(d, "ends_at"))
		json_object_set_new(a, "endsAt", json_string(dstr(d, "ends_at")));
	char *link = run_link(cfg, dstr(d, "run"));
	if (link)
		json_object_set_new(a, "generatorURL", json_string(link));
	free(link);
	return json_pack("[o]", a);
}

char *tf_alert_body(const char *format, const char *payload, const struct tf_alerts_config *cfg,
                    char *err, size_t errlen)
{
	if (!strcmp(format, "standard"))
		return tf_xstrdup(payload); /* the stored bytes, the same on every attempt */
	json_error_t je;
	json_t *p = json_loads(payload, 0, &je);
	if (!json_is_object(json_object_get(p, "data")) || !dstr(p, "type")) {
		tf_errf(err, errlen, "the alert's payload is unreadable: %s", je.text);
		json_decref(p);
		return NULL;
	}
	json_t *b = NULL;
	if (!strcmp(format, "slack"))
		b = slack_body(p, cfg);
	else if (!strcmp(format, "alertmanager"))
		b = alertmanager_body(p, cfg);
	json_decref(p);
	if (!b) {
		tf_errf(err, errlen, "unknown hook format '%s'", format);
		return NULL;
	}
	char *s = json_dumps(b, JSON_COMPACT);
	json_decref(b);
	return s;
}

int tf_alert_sign(const char *secret, const char *msg_id, long long timestamp, const char *body,
                  size_t len, char out[128])
{
	static const char prefix[] = "whsec_";
	if (strncmp(secret, prefix, sizeof(prefix) - 1))
		return -EINVAL;
	const char *b64 = secret + sizeof(prefix) - 1;
	size_t n = strlen(b64);
	if (n == 0 || n % 4 || n > 128)
		return -EINVAL;
	unsigned char key[96];
	int klen = EVP_DecodeBlock(key, (const unsigned char *)b64, (int)n);
	if (klen < 0)
		return -EINVAL;
	klen -= (b64[n - 1] == '=') + (n > 1 && b64[n - 2] == '=');
	if (klen < 24 || klen > 64) {
		explicit_bzero(key, sizeof(key));
		return -EINVAL;
	}
	char *head = tf_xasprintf("%s.%lld.", msg_id, timestamp);
	size_t hl = strlen(head);
	unsigned char *msg = tf_xmalloc(hl + len + 1), md[EVP_MAX_MD_SIZE];
	memcpy(msg, head, hl);
	if (len)
		memcpy(msg + hl, body, len);
	unsigned mdlen = 0;
	HMAC(EVP_sha256(), key, klen, msg, hl + len, md, &mdlen);
	explicit_bzero(key, sizeof(key));
	memcpy(out, "v1,", 3);
	EVP_EncodeBlock((unsigned char *)out + 3, md, (int)mdlen);
	free(head);
	free(msg);
	return 0;
}

int tf_alert_signatures(const char *secrets, const char *msg_id, long long timestamp,
                        const char *body, size_t len, char **out)
{
	char *copy = tf_xstrdup(secrets), *save = NULL, *joined = tf_xstrdup("");
	size_t clen = strlen(copy); /* strtok_r cuts it: wiped whole below */
	int rc = -EINVAL;
	for (char *w = strtok_r(copy, " \t\r\n", &save); w; w = strtok_r(NULL, " \t\r\n", &save)) {
		char sig[128];
		rc = tf_alert_sign(w, msg_id, timestamp, body, len, sig);
		if (rc)
			break;
		char *n = tf_xasprintf("%s%s%s", joined, joined[0] ? " " : "", sig);
		free(joined);
		joined = n;
	}
	explicit_bzero(copy, clen);
	free(copy);
	if (rc) {
		free(joined);
		return rc;
	}
	*out = joined;
	return 0;
}

/* ---- one POST --------------------------------------------------------------------------- */

struct answer {
	char *body;         /* the first BODY_CAP bytes (owned) */
	size_t len;         /* bytes kept */
	int too_big;        /* more came than BODY_CAP */
	double retry_after; /* Retry-After in seconds, 0: none */
};

static size_t on_body(char *p, size_t sz, size_t nm, void *ud)
{
	struct answer *a = ud;
	size_t n = sz * nm;
	if (a->len + n > BODY_CAP) {
		a->too_big = 1;
		return 0; /* stop reading: the status is already known */
	}
	a->body = tf_xrealloc(a->body, a->len + n + 1);
	memcpy(a->body + a->len, p, n);
	a->len += n;
	a->body[a->len] = '\0';
	return n;
}

static size_t on_header(char *p, size_t sz, size_t nm, void *ud)
{
	struct answer *a = ud;
	size_t n = sz * nm;
	if (n > 12 && !strncasecmp(p, "Retry-After:", 12)) {
		char buf[64];
		snprintf(buf, sizeof(buf), "%.*s", (int)(n - 12 < 63 ? n - 12 : 63), p + 12);
		a->retry_after = tf_alerts_retry_after(buf, tf_now_wall());
	}
	return n;
}

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init_once(void)
{
	curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* Outcome of one attempt. */
enum outcome { SENT, RETRY, DEAD };

struct target {
	int64_t id;
	char *msg_id, *hook, *payload, *url, *format, *secret_env, *secret_file;
	char *disabled; /* why the hook is disabled (410 Gone), or NULL */
	int attempts;
	double queued_at;
	int has_hook;
};

static void target_free(struct target *t)
{
	free(t->msg_id);
	free(t->hook);
	free(t->payload);
	free(t->url);
	free(t->format);
	free(t->secret_env);
	free(t->secret_file);
	free(t->disabled);
}

/* Posts one alert; *status gets the HTTP status (0: none), err the reason when not SENT. */
static enum outcome post(const struct tf_alerts_config *cfg, const struct target *t, long *status,
                         struct answer *a, char *err, size_t errlen)
{
	*status = 0;
	if (!t->has_hook) {
		tf_errf(err, errlen, "no hook '%s' in this home (tpuflow hooks add %s --url ...)",
		        t->hook, t->hook);
		return DEAD;
	}
	if (t->disabled) {
		tf_errf(err, errlen,
		        "hook '%s' is disabled: %s; 'tpuflow hooks add %s --url ...' enables it, "
		        "then 'tpuflow alerts redeliver --dead'",
		        t->hook, t->disabled, t->hook);
		return DEAD;
	}
	if (tf_alerts_url_allowed(cfg, t->url, err, errlen))
		return DEAD;
	char *body = tf_alert_body(t->format, t->payload, cfg, err, errlen);
	if (!body)
		return DEAD;
	char *secret = NULL, *sig = NULL;
	long long ts = (long long)tf_now_wall();
	enum outcome out = RETRY;
	if (t->secret_env || t->secret_file) {
		if (tf_hook_secret(t->secret_env, t->secret_file, &secret, err, errlen)) {
			free(body);
			return RETRY; /* may be set in a process that sends later (the daemon) */
		}
		int rc = tf_alert_signatures(secret, t->msg_id, ts, body, strlen(body), &sig);
		explicit_bzero(secret, strlen(secret));
		free(secret);
		if (rc && !strcmp(t->format, "standard")) {
			tf_errf(err, errlen, "the secret of hook '%s' is not whsec_ and base64",
			        t->hook);
			free(body);
			return RETRY;
		}
	}
	pthread_once(&curl_once, curl_init_once);
	CURL *c = curl_easy_init();
	struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
	char line[200];
	snprintf(line, sizeof(line), "webhook-id: %s", t->msg_id);
	h = curl_slist_append(h, line);
	snprintf(line, sizeof(line), "webhook-timestamp: %lld", ts);
	h = curl_slist_append(h, line);
	if (sig) { /* one per secret: several while a secret is being rotated */
		char *sl = tf_xasprintf("webhook-signature: %s", sig);
		h = curl_slist_append(h, sl);
		free(sl);
		free(sig);
	}
	h = curl_slist_append(h, "User-Agent: tpuflow/" TF_VERSION);
	h = curl_slist_append(h, "Expect:");
	curl_easy_setopt(c, CURLOPT_URL, t->url);
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, a);
	curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(c, CURLOPT_HEADERDATA, a);
	long ms = (long)(cfg->timeout * 1000);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, ms < 5000 ? ms : 5000L);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, ms);
	CURLcode cc = curl_easy_perform(c);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
	if (cc != CURLE_OK && !(cc == CURLE_WRITE_ERROR && a->too_big && *status)) {
		tf_errf(err, errlen, "%s", curl_easy_strerror(cc));
		*status = 0;
		out = RETRY;
	} else if (*status >= 200 && *status < 300) {
		out = SENT;
	} else {
		/* The specification treats every other answer as a failure to try again, but for
		 * those that refuse this body (400, 413, 422) or this sender (410 Gone): the same
		 * request would get the same answer. */
		int again = *status >= 400 && *status != 400 && *status != 410 && *status != 413 &&
		            *status != 422;
		tf_errf(err, errlen, "HTTP %ld%s%.200s", *status, a->len ? ": " : "",
		        a->body ? a->body : "");
		if (*status >= 300 && *status < 400)
			tf_errf(err, errlen,
			        "HTTP %ld: redirects are not followed; give the "
			        "hook the final URL",
			        *status);
		out = again ? RETRY : DEAD;
	}
	curl_slist_free_all(h);
	curl_easy_cleanup(c);
	free(body);
	return out;
}

/* ---- the outbox pass --------------------------------------------------------------------- */

static double rnd01(void)
{
	char hex[9];
	if (tf_random_hex(hex, 4))
		return 0.5;
	return (double)strtoul(hex, NULL, 16) / 4294967296.0;
}

/* Records the outcome of one attempt in its own transaction. */
static int record(struct tf_store *st, const struct tf_alerts_config *cfg, const struct target *t,
                  enum outcome o, long status, double retry_after, const char *err)
{
	double now = tf_now_wall();
	int attempts = t->attempts + 1;
	double delay = tf_alerts_backoff(cfg, attempts, retry_after, rnd01());
	if (o == RETRY &&
	    (attempts >= cfg->max_attempts || now + delay - t->queued_at > cfg->horizon))
		o = DEAD;
	const char *state = o == SENT ? "delivered" : o == DEAD ? "dead" : "pending";
	int own, rc = tf_store_join(st, &own);
	if (rc)
		return rc;
	if (status == 410) { /* the receiver wants no more alerts from here */
		char why[300];
		snprintf(why, sizeof(why), "%.200s answered 410 Gone", t->url);
		rc = tf_store_run(st,
		                  "UPDATE hooks SET disabled_at=?, disabled_reason=? WHERE name=?",
		                  "dtt", now, why, t->hook);
		if (rc == 0)
			tf_warn("hook '%s' disabled: %s", t->hook, why);
	}
	if (rc == 0)
		rc = tf_store_run(st,
		                  "UPDATE alerts SET state=?1, attempts=?2, lease_until=NULL, "
		                  "last_status=nullif(?3, 0), "
		                  "last_error=?4, next_attempt_at=?5, delivered_at=CASE WHEN "
		                  "?1='delivered' THEN ?6 "
		                  "END, dead_at=CASE WHEN ?1='dead' THEN ?6 END WHERE id=?7",
		                  "tiitddi", state, (int64_t)attempts, (int64_t)status,
		                  o == SENT ? NULL : err, now + (o == RETRY ? delay : 0), now,
		                  t->id);
	rc = tf_store_leave(st, own, rc);
	if (o == SENT)
		tf_debug("alert %s (%s) delivered to hook '%s'", t->msg_id, t->payload, t->hook);
	else if (o == DEAD)
		tf_warn("alert %s to hook '%s' dead-lettered after %d attempt(s): %s", t->msg_id,
		        t->hook, attempts, err);
	else
		tf_info("alert %s to hook '%s' failed (%s); attempt %d in %.1f s", t->msg_id,
		        t->hook, err, attempts + 1, delay);
	return rc;
}

/* A row no older row of its hook waits before: the next of its hook to send. */
#define HOOK_HEAD                                                                                  \
	"NOT EXISTS (SELECT 1 FROM alerts o WHERE o.state='pending' AND o.hook=a.hook AND "        \
	"o.id<a.id)"

/* Takes up to max due rows, the oldest pending of each hook (or row `only`), and leases
 * them, in one transaction. */
static int claim(struct tf_store *st, const struct tf_alerts_config *cfg, int max, int64_t only,
                 struct target **out, size_t *n)
{
	double now = tf_now_wall();
	*out = NULL;
	*n = 0;
	int rc = tf_store_begin(st);
	if (rc)
		return rc;
	struct tf_stmt *q = tf_store_query(
	    st,
	    "SELECT a.id, a.msg_id, a.hook, a.payload, a.attempts, a.queued_at, h.name IS NOT "
	    "NULL, "
	    "h.url, h.format, h.secret_env, h.secret_file, h.disabled_reason FROM alerts a "
	    "LEFT JOIN hooks h ON "
	    "h.name=a.hook WHERE (?1 = 0 AND a.state='pending' AND a.next_attempt_at <= ?2 AND "
	    "(a.lease_until IS NULL OR a.lease_until < ?2) AND " HOOK_HEAD ") OR a.id=?1 "
	    "ORDER BY a.id LIMIT ?3",
	    "idi", only, now, (int64_t)(max > 0 ? max : 64));
	if (!q) {
		tf_store_rollback(st);
		return -EIO;
	}
	size_t cap = 0;
	while ((rc = tf_stmt_step(q)) == 1) {
		if (*n == cap) {
			cap = cap ? cap * 2 : 8;
			*out = tf_xrealloc(*out, cap * sizeof(**out));
		}
		struct target *t = &(*out)[(*n)++];
		*t = (struct target){.id = tf_stmt_int(q, 0),
		                     .msg_id = tf_stmt_strdup(q, 1),
		                     .hook = tf_stmt_strdup(q, 2),
		                     .payload = tf_stmt_strdup(q, 3),
		                     .attempts = (int)tf_stmt_int(q, 4),
		                     .queued_at = tf_stmt_double(q, 5),
		                     .has_hook = (int)tf_stmt_int(q, 6),
		                     .url = tf_stmt_strdup(q, 7),
		                     .format = tf_stmt_strdup(q, 8),
		                     .secret_env = tf_stmt_strdup(q, 9),
		                     .secret_file = tf_stmt_strdup(q, 10),
		                     .disabled = tf_stmt_strdup(q, 11)};
	}
	tf_stmt_done(q);
	/* the rows are posted one after the other: row i's lease covers the i posts before it */
	for (size_t i = 0; rc == 0 && i < *n; i++)
		rc = tf_store_run(st, "UPDATE alerts SET lease_until=? WHERE id=?", "di",
		                  now + (double)(i + 1) * (cfg->timeout + LEASE_MARGIN),
		                  (*out)[i].id);
	if (rc == 0)
		rc = tf_store_commit(st);
	if (rc) {
		tf_store_rollback(st);
		for (size_t i = 0; i < *n; i++)
			target_free(&(*out)[i]);
		free(*out);
		*out = NULL;
		*n = 0;
	}
	return rc;
}

static int send_claimed(struct tf_store *st, const struct tf_alerts_config *cfg, struct target *ts,
                        size_t n, int *sent, int *failed, char *err, size_t errlen)
{
	int rc = 0;
	for (size_t i = 0; i < n; i++) {
		struct answer a = {0};
		long status = 0;
		char why[512] = "";
		enum outcome o = post(cfg, &ts[i], &status, &a, why, sizeof(why));
		int r = record(st, cfg, &ts[i], o, status, a.retry_after, why);
		if (r && !rc)
			rc = r;
		if (o == SENT && sent)
			(*sent)++;
		else if (o != SENT && failed)
			(*failed)++;
		if (o != SENT && err)
			tf_errf(err, errlen, "%s", why);
		free(a.body);
		target_free(&ts[i]);
	}
	free(ts);
	return rc;
}

int tf_alerts_deliver_due(struct tf_store *st, const struct tf_alerts_config *cfg, int max,
                          int *sent, int *failed, double *next_due)
{
	struct target *ts;
	size_t n;
	int rc = claim(st, cfg, max, 0, &ts, &n);
	if (rc == 0)
		rc = send_claimed(st, cfg, ts, n, sent, failed, NULL, 0);
	if (rc == 0 && next_due) {
		double next = -1;
		struct tf_stmt *q = tf_store_query(st,
		                                   "SELECT min(max(next_attempt_at, "
		                                   "coalesce(lease_until, 0))) FROM alerts a WHERE "
		                                   "state='pending' AND " HOOK_HEAD,
		                                   "");
		if (q && tf_stmt_step(q) == 1 && !tf_stmt_is_null(q, 0)) {
			next = tf_stmt_double(q, 0) - tf_now_wall();
			if (next < 0)
				next = 0;
		}
		tf_stmt_done(q);
		*next_due = next;
	}
	return rc;
}

int tf_alerts_deliver_one(struct tf_store *st, const struct tf_alerts_config *cfg, int64_t id,
                          char *err, size_t errlen)
{
	struct target *ts;
	size_t n;
	int sent = 0, rc = claim(st, cfg, 1, id, &ts, &n);
	if (rc == 0 && n == 0)
		rc = -ENOENT;
	else if (rc == 0)
		rc = send_claimed(st, cfg, ts, n, &sent, NULL, err, errlen);
	if (rc == 0 && !sent)
		rc = -EIO;
	return rc;
}

/* Alertmanager forgets an alert `resolve_timeout` after it last received it, so the alerts
 * still firing (table alert_firing) are posted again, as they were, every REFIRE_S seconds;
 * and, as its alerts API documentation asks of clients, resolved alerts are posted again for
 * RESOLVED_S (five minutes) after the resolution, so that an Alertmanager that restarted
 * meanwhile still sends the resolved notification. Best effort: an answer other than 2xx is
 * logged; the next round tries again. */
int tf_alerts_refire(struct tf_store *st, const struct tf_alerts_config *cfg, int *sent)
{
	struct tf_stmt *q = tf_store_query(
	    st,
	    "SELECT a.id, a.msg_id, a.hook, a.payload, h.url, h.format, h.secret_env, "
	    "h.secret_file "
	    "FROM alerts a JOIN hooks h ON h.name=a.hook WHERE a.state='delivered' AND "
	    "h.disabled_at IS NULL AND "
	    "(a.id IN (SELECT alert_id FROM alert_firing) OR (a.resolves IS NOT NULL AND "
	    "h.format='alertmanager' AND a.delivered_at > ?)) ORDER BY a.id",
	    "d", tf_now_wall() - RESOLVED_S);
	if (!q)
		return -EIO;
	struct target *ts = NULL;
	size_t n = 0, cap = 0;
	int rc;
	while ((rc = tf_stmt_step(q)) == 1) {
		if (n == cap) {
			cap = cap ? cap * 2 : 8;
			ts = tf_xrealloc(ts, cap * sizeof(*ts));
		}
		ts[n++] = (struct target){.id = tf_stmt_int(q, 0),
		                          .msg_id = tf_stmt_strdup(q, 1),
		                          .hook = tf_stmt_strdup(q, 2),
		                          .payload = tf_stmt_strdup(q, 3),
		                          .url = tf_stmt_strdup(q, 4),
		                          .format = tf_stmt_strdup(q, 5),
		                          .secret_env = tf_stmt_strdup(q, 6),
		                          .secret_file = tf_stmt_strdup(q, 7),
		                          .has_hook = 1};
	}
	tf_stmt_done(q);
	for (size_t i = 0; i < n; i++) {
		struct answer a = {0};
		long status = 0;
		char why[512] = "";
		int64_t still = 0; /* not resolved meanwhile (or a resolution) */
		tf_store_query_int(
		    st, &still,
		    "SELECT EXISTS(SELECT 1 FROM alert_firing WHERE alert_id=?1) OR "
		    "EXISTS(SELECT 1 FROM alerts WHERE id=?1 AND resolves IS NOT NULL)",
		    "i", ts[i].id);
		enum outcome o = still ? post(cfg, &ts[i], &status, &a, why, sizeof(why)) : DEAD;
		if (o == SENT && sent)
			(*sent)++;
		else if (still && o != SENT)
			tf_info("alert %s to hook '%s' not sent again: %s", ts[i].msg_id,
			        ts[i].hook, why);
		free(a.body);
		target_free(&ts[i]);
	}
	free(ts);
	return rc < 0 ? rc : 0;
}

/* ---- the worker thread ----------------------------------------------------------------- */

struct tf_alerts_worker {
	char *home;
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int kicked;       /* [mu] deliver now */
	int stopping;     /* [mu] drain, then end */
	double drain_end; /* [mu] monotonic time the drain ends */
	int left;         /* alerts pending when the thread ended */
	double refired;   /* [thread] monotonic time firing alerts were last posted again */
};

static int64_t pending_count(struct tf_store *st)
{
	int64_t n = 0;
	tf_store_query_int(st, &n, "SELECT count(*) FROM alerts WHERE state='pending'", "");
	return n;
}

static void *worker_main(void *arg)
{
	struct tf_alerts_worker *w = arg;
	struct tf_store *st = NULL;
	char err[512];
	if (tf_store_open_home(w->home, &st, err, sizeof(err))) {
		tf_error("alerts: %s", err);
		return NULL;
	}
	for (;;) {
		/* stop only after a whole pass begun once the stop was asked: an alert committed
		 * while a pass was under way (a run's last state) is still taken by the next one */
		pthread_mutex_lock(&w->mu);
		int last = w->stopping;
		pthread_mutex_unlock(&w->mu);
		struct tf_alerts_config cfg;
		if (tf_alerts_config_load(w->home, &cfg, err, sizeof(err)))
			tf_warn("%s", err);
		double next = -1;
		if (tf_alerts_deliver_due(st, &cfg, 64, NULL, NULL, &next))
			tf_warn("alerts: %s", tf_store_errmsg(st));
		if (tf_now_monotonic() - w->refired >= REFIRE_S) {
			w->refired = tf_now_monotonic();
			if (tf_alerts_refire(st, &cfg, NULL))
				tf_warn("alerts: %s", tf_store_errmsg(st));
		}
		tf_alerts_config_release(&cfg);
		pthread_mutex_lock(&w->mu);
		double now = tf_now_monotonic();
		if (last && (next < 0 || now + next > w->drain_end)) {
			pthread_mutex_unlock(&w->mu);
			break;
		}
		double wait = next < 0 || next > 0.5 ? 0.5 : next;
		if (!w->kicked && wait > 0) {
			struct timespec ts;
			clock_gettime(CLOCK_REALTIME, &ts);
			double t = (double)ts.tv_sec + ts.tv_nsec / 1e9 + wait;
			ts.tv_sec = (time_t)t;
			ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
			pthread_cond_timedwait(&w->cv, &w->mu, &ts);
		}
		w->kicked = 0;
		pthread_mutex_unlock(&w->mu);
	}
	w->left = (int)pending_count(st);
	tf_store_close(st);
	return NULL;
}

struct tf_alerts_worker *tf_alerts_worker_start(const char *home)
{
	struct tf_store *st = NULL;
	char err[512];
	if (tf_store_open_home(home, &st, err, sizeof(err))) {
		tf_warn("alerts: %s", err);
		return NULL;
	}
	int64_t any = 0;
	tf_store_query_int(st, &any,
	                   "SELECT EXISTS(SELECT 1 FROM hooks) OR EXISTS(SELECT 1 FROM alerts "
	                   "WHERE state='pending')",
	                   "");
	tf_store_close(st);
	if (!any)
		return NULL;
	struct tf_alerts_worker *w = tf_xcalloc(1, sizeof(*w));
	w->home = tf_xstrdup(home);
	pthread_mutex_init(&w->mu, NULL);
	pthread_cond_init(&w->cv, NULL);
	if (pthread_create(&w->thread, NULL, worker_main, w)) {
		tf_warn("alerts: cannot start the delivery thread");
		free(w->home);
		free(w);
		return NULL;
	}
	return w;
}

void tf_alerts_worker_kick(struct tf_alerts_worker *w)
{
	if (!w)
		return;
	pthread_mutex_lock(&w->mu);
	w->kicked = 1;
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->mu);
}

void tf_alerts_worker_stop(struct tf_alerts_worker *w, double drain, int *left)
{
	if (left)
		*left = 0;
	if (!w)
		return;
	if (drain < 0) {
		struct tf_alerts_config cfg;
		char err[512];
		tf_alerts_config_load(w->home, &cfg, err, sizeof(err));
		drain = cfg.drain;
		tf_alerts_config_release(&cfg);
	}
	pthread_mutex_lock(&w->mu);
	w->stopping = 1;
	w->kicked = 1;
	w->drain_end = tf_now_monotonic() + drain;
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->mu);
	pthread_join(w->thread, NULL);
	if (left)
		*left = w->left;
	pthread_mutex_destroy(&w->mu);
	pthread_cond_destroy(&w->cv);
	free(w->home);
	free(w);
}

/* alerts_send.c — owns delivering the outbox (orchestrator/alerts.c): the three body formats,
 * Standard Webhooks signing, the POST (libcurl), what each answer means for the row, and the
 * worker thread that keeps a home's alerts moving.
 *
 * A pass takes the due rows in one write transaction and leases them (lease_until), so two
 * processes on a home (the daemon and a `tpuflow run`) do not send the same row at once; it
 * posts them outside any transaction, all at once (libcurl's multi interface: a receiver that
 * hangs costs its own hook a timeout and the others nothing), then records each outcome, as
 * its answer comes, in one short transaction:
 *   2xx                      delivered
 *   other 4xx, 5xx, no answer, timeout, secret unreadable
 *                            another attempt after tf_alerts_backoff (Retry-After honoured),
 *                            dead once max_attempts were made or the horizon has passed
 *   3xx (never followed), 400, 410, 413, 422, host not allowed
 *                            dead at once: the receiver refuses this body or this sender;
 *                            410 Gone also disables the hook (its later alerts are dead
 *                            without a request until `hooks add` sets it again)
 * A hook's alerts go in the order they were queued: a pass takes the oldest pending row of
 * each hook with no request in flight, and the next one only once it is delivered or dead,
 * so a receiver that is down gets one request per backoff, not one per queued alert, and a
 * firing alert reaches Alertmanager before the alert that resolves it (the re-posts of its
 * firing alerts hold their hook as a row does, and go when it has no row due: a new alert
 * does not wait for a round of re-posts). A row's request starts when it is taken, so its
 * lease is the POST's timeout and a margin. A process killed while posting leaves the lease
 * to run out: the row is sent again by the next pass, with the same msg_id (at least once).
 *
 * A re-post (tf_alerts_refire) is leased as a row is, on the delivered row it posts again, in
 * the transaction that checks the alert is still firing: while it is in flight no process
 * takes another request for its hook, and a re-post is not taken while another request of
 * its hook is in flight anywhere. So every process on a home keeps one request per hook in
 * flight, and the resolution of a firing alert, queued while the alert is being posted again
 * by another process, goes only once that re-post is answered. A re-post goes only while its
 * alert is the newest state of its labels at the hook (superseded): Alertmanager keeps the
 * state it received last, so an older resolution or firing alert is not posted over a newer
 * alert with the same labels. */
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
#define VALID_REFIRES 4        /* a firing Alertmanager alert's endsAt, in `refire`s after a post */
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

/* The labels of a payload's Alertmanager alert, which identify it: the event and what it is
 * about (the pipeline and step, so a later run resolves the same alert; the model, alias,
 * metric; the pool and chip). A new object; NULL when the payload lacks them. */
static json_t *alertmanager_labels(json_t *p)
{
	json_t *d = json_object_get(p, "data");
	if (!json_is_object(d) || !dstr(p, "type"))
		return NULL;
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
	return labels;
}

/* One alert for Alertmanager's POST /api/v2/alerts (a JSON array): labels identify it
 * (alertmanager_labels), annotations describe this occurrence (the run, the version); a
 * resolving row carries endsAt, its end, and a firing one valid_until (when not 0). */
static json_t *alertmanager_body(json_t *p, double valid_until, const struct tf_alerts_config *cfg)
{
	json_t *d = json_object_get(p, "data");
	json_t *labels = alertmanager_labels(p);
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
	if (dstr(d, "ends_at")) {
		json_object_set_new(a, "endsAt", json_string(dstr(d, "ends_at")));
	} else if (valid_until > 0) {
		char until[32];
		tf_alert_time(valid_until, until);
		json_object_set_new(a, "endsAt", json_string(until));
	}
	char *link = run_link(cfg, dstr(d, "run"));
	if (link)
		json_object_set_new(a, "generatorURL", json_string(link));
	free(link);
	return json_pack("[o]", a);
}

char *tf_alert_body(const char *format, const char *payload, const struct tf_alerts_config *cfg,
                    char *err, size_t errlen)
{
	return tf_alert_body_until(format, payload, 0, cfg, err, errlen);
}

char *tf_alert_body_until(const char *format, const char *payload, double valid_until,
                          const struct tf_alerts_config *cfg, char *err, size_t errlen)
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
		b = alertmanager_body(p, valid_until, cfg);
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

/* Outcome of one attempt; POSTING: its request is under way. */
enum outcome { SENT, RETRY, DEAD, POSTING };

struct target {
	int64_t id;
	char *msg_id, *hook, *payload, *url, *format, *secret_env, *secret_file;
	char *disabled; /* why the hook is disabled (410 Gone), or NULL */
	int attempts;
	double queued_at;
	int has_hook;
	int firing; /* in alert_firing: posted again every `refire` while its condition lasts */
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

/* One POST: an outbox row's attempt, or a delivered Alertmanager alert posted again. */
struct flight {
	struct target t;            /* what is posted (owned) */
	int repost;                 /* posted again: the row's state is not touched */
	double repost_lease;        /* a re-post's lease_until, released when it is answered */
	CURL *easy;                 /* the request, NULL until it is built */
	struct curl_slist *headers; /* owned; libcurl borrows them */
	char *body;                 /* owned; libcurl borrows it */
	struct answer a;            /* what came back */
};

static void flight_free(struct flight *f)
{
	if (!f)
		return;
	curl_easy_cleanup(f->easy);
	curl_slist_free_all(f->headers);
	free(f->body);
	free(f->a.body);
	target_free(&f->t);
	free(f);
}

/* Builds the request of f (f->easy), or decides at once without one: DEAD or RETRY with the
 * reason in err. POSTING when the request is ready to go. */
static enum outcome post_begin(const struct tf_alerts_config *cfg, struct flight *f, char *err,
                               size_t errlen)
{
	const struct target *t = &f->t;
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
	/* As Prometheus does with the alerts it sends again, a firing alert is valid until four
	 * times the interval of its re-posts: three re-posts may come late or fail before
	 * Alertmanager ends it, which it would otherwise do `resolve_timeout` after the last
	 * post it received */
	double until = t->firing ? tf_now_wall() + VALID_REFIRES * cfg->refire : 0;
	char *body = tf_alert_body_until(t->format, t->payload, until, cfg, err, errlen);
	if (!body)
		return DEAD;
	char *secret = NULL, *sig = NULL;
	long long ts = (long long)tf_now_wall();
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
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &f->a);
	curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(c, CURLOPT_HEADERDATA, &f->a);
	curl_easy_setopt(c, CURLOPT_PRIVATE, f);
	long ms = (long)(cfg->timeout * 1000);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, ms < 5000 ? ms : 5000L);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, ms);
	f->easy = c;
	f->headers = h;
	f->body = body;
	return POSTING;
}

/* What the finished request of f means; *status gets the HTTP status (0: none), err the
 * reason when not SENT. */
static enum outcome post_end(struct flight *f, CURLcode cc, long *status, char *err, size_t errlen)
{
	const struct answer *a = &f->a;
	*status = 0;
	curl_easy_getinfo(f->easy, CURLINFO_RESPONSE_CODE, status);
	if (cc != CURLE_OK && !(cc == CURLE_WRITE_ERROR && a->too_big && *status)) {
		tf_errf(err, errlen, "%s", curl_easy_strerror(cc));
		*status = 0;
		return RETRY;
	}
	if (*status >= 200 && *status < 300)
		return SENT;
	/* The specification treats every other answer as a failure to try again, but for those
	 * that refuse this body (400, 413, 422) or this sender (410 Gone): the same request
	 * would get the same answer. */
	int again =
	    *status >= 400 && *status != 400 && *status != 410 && *status != 413 && *status != 422;
	tf_errf(err, errlen, "HTTP %ld%s%.200s", *status, a->len ? ": " : "",
	        a->body ? a->body : "");
	if (*status >= 300 && *status < 400)
		tf_errf(err, errlen,
		        "HTTP %ld: redirects are not followed; give the hook the final URL",
		        *status);
	return again ? RETRY : DEAD;
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

/* ---- the courier: the POSTs in flight ------------------------------------------------------
 *
 * A worker's requests go out together on one libcurl multi handle, so a receiver that
 * hangs costs its own hook the POST's timeout and no other hook anything. At most one
 * request per hook is in flight: a hook's alerts still go one after the other, in queue
 * order (a firing Alertmanager alert before the one that resolves it), and so do the
 * re-posts of its firing alerts, each when the hook has nothing in flight and no outbox row
 * due: repost_claim checks, when a re-post's turn comes, that what it would post is still
 * the newest state of its labels, so a row sent first never has an older state posted
 * after it. */
struct courier {
	CURLM *multi;
	struct flight **fl; /* in flight (owned), at most one per hook */
	size_t nfl, capfl;
	struct target *wait; /* re-posts waiting for their hook, in row order (owned) */
	size_t nwait, capwait;
	int sent, failed; /* outbox attempts delivered, and not */
	int reposted;     /* re-posts accepted */
	char err[512];    /* why the last outbox attempt was not delivered */
};

static void courier_init(struct courier *c)
{
	pthread_once(&curl_once, curl_init_once);
	*c = (struct courier){.multi = curl_multi_init()};
}

/* Ends what is in flight (an outbox row's lease runs out: the next pass sends it again) and
 * frees the courier's contents. */
static void courier_release(struct courier *c)
{
	for (size_t i = 0; i < c->nfl; i++) {
		curl_multi_remove_handle(c->multi, c->fl[i]->easy);
		flight_free(c->fl[i]);
	}
	for (size_t i = 0; i < c->nwait; i++)
		target_free(&c->wait[i]);
	free(c->fl);
	free(c->wait);
	curl_multi_cleanup(c->multi);
	*c = (struct courier){0};
}

static int courier_busy(const struct courier *c, const char *hook)
{
	for (size_t i = 0; i < c->nfl; i++)
		if (!strcmp(c->fl[i]->t.hook, hook))
			return 1;
	return 0;
}

/* Counts, logs and records the outcome of f (an outbox row's attempt, or the end of a
 * re-post's lease), then frees it. */
static int courier_done(struct courier *c, struct tf_store *st, const struct tf_alerts_config *cfg,
                        struct flight *f, enum outcome o, long status, const char *why)
{
	int rc = 0;
	if (f->repost) {
		if (o == SENT)
			c->reposted++;
		else
			tf_info("alert %s to hook '%s' not sent again: %s", f->t.msg_id, f->t.hook,
			        why);
		/* the hook is free again; a lease that ran out and was taken since is not ours.
		 * Like the lease, its end is seen by the other processes once written, without
		 * waiting for a sync: lost with the machine, the lease runs out anyway */
		tf_store_defer_sync(st, 1);
		rc = tf_store_run(st,
		                  "UPDATE alerts SET lease_until=NULL, next_attempt_at=?1 WHERE "
		                  "id=?2 AND lease_until=?3",
		                  "did", tf_now_wall(), f->t.id, f->repost_lease);
		tf_store_defer_sync(st, 0);
	} else {
		rc = record(st, cfg, &f->t, o, status, f->a.retry_after, why);
		if (o == SENT) {
			c->sent++;
		} else {
			c->failed++;
			snprintf(c->err, sizeof(c->err), "%s", why);
		}
	}
	flight_free(f);
	return rc;
}

/* Sends *t (taken over: *t is cleared): its request joins the others in flight, or its
 * outcome is known at once and recorded. repost_lease: 0 for an outbox row (leased by
 * courier_claim), else the lease repost_claim took for this re-post. */
static int courier_start(struct courier *c, struct tf_store *st, const struct tf_alerts_config *cfg,
                         struct target *t, double repost_lease)
{
	struct flight *f = tf_xcalloc(1, sizeof(*f));
	f->t = *t;
	f->repost = repost_lease > 0;
	f->repost_lease = repost_lease;
	*t = (struct target){0};
	char why[512] = "";
	enum outcome o = post_begin(cfg, f, why, sizeof(why));
	if (o != POSTING)
		return courier_done(c, st, cfg, f, o, 0, why);
	if (curl_multi_add_handle(c->multi, f->easy) != CURLM_OK)
		return courier_done(c, st, cfg, f, RETRY, 0, "cannot start the request (libcurl)");
	if (c->nfl == c->capfl) {
		c->capfl = c->capfl ? c->capfl * 2 : 8;
		c->fl = tf_xrealloc(c->fl, c->capfl * sizeof(*c->fl));
	}
	c->fl[c->nfl++] = f;
	return 0;
}

/* What repost_claim decided for a re-post. */
enum claim {
	TAKEN, /* leased to this process: post it */
	GONE,  /* not to be posted: resolved since it was listed, too old, a newer state of its
	        * labels queued, its hook removed or disabled, or another process posting it */
	BUSY,  /* its hook has another request in flight in another process: try again later */
};

/* Whether a request to hook ?1 is in flight anywhere on the home at ?2 (now): an outbox
 * row's (leased while pending) or a re-post's (a delivered row leased; its next_attempt_at is
 * moved to the lease's end, so the index alerts_due finds the few that are, not every
 * delivered row). */
#define HOOK_IN_FLIGHT                                                                             \
	"EXISTS (SELECT 1 FROM alerts p WHERE p.state='pending' AND p.hook=?1 AND "                \
	"p.lease_until >= ?2) OR EXISTS (SELECT 1 FROM alerts r WHERE r.state='delivered' AND "    \
	"r.next_attempt_at >= ?2 AND r.hook=?1 AND r.lease_until >= ?2)"

/* Whether a row of t's hook newer than t has the same Alertmanager labels and is, or is to
 * be, at Alertmanager (not dead): a firing alert (alert_firing), or a resolution. Alertmanager
 * keeps one alert per label set, the one it received last: posting t again would put an
 * older state of those labels over a newer one (a resolution of the last failure over the
 * new failure of the same pipeline). *out receives 1 when so. The rows looked at are the few
 * firing (CROSS JOIN keeps SQLite from walking every newer row to find them), and, for a
 * resolution (delivered within RESOLVED_S), the rows queued since. */
static int superseded(struct tf_store *st, const struct target *t, int *out)
{
	json_t *p = json_loads(t->payload, 0, NULL);
	json_t *mine = alertmanager_labels(p);
	json_decref(p);
	*out = 0;
	if (!mine)
		return 0;
	struct tf_stmt *q = tf_store_query(
	    st,
	    "SELECT o.payload FROM alerts a CROSS JOIN alert_firing f CROSS JOIN alerts o WHERE "
	    "a.id=?1 AND f.alert_id>a.id AND f.hook=a.hook AND f.event=a.event AND "
	    "o.id=f.alert_id AND o.state!='dead' UNION ALL SELECT o.payload FROM alerts a JOIN "
	    "alerts o ON o.id>a.id "
	    "WHERE a.id=?1 AND a.resolves IS NOT NULL AND o.hook=a.hook AND o.event=a.event AND "
	    "o.resolves IS NOT NULL AND o.state!='dead'",
	    "i", t->id);
	if (!q) {
		json_decref(mine);
		return -EIO;
	}
	int rc = 0;
	while (!*out && (rc = tf_stmt_step(q)) == 1) {
		json_t *np = json_loads(tf_stmt_text(q, 0), 0, NULL);
		json_t *theirs = alertmanager_labels(np);
		*out = theirs && json_equal(mine, theirs);
		json_decref(theirs);
		json_decref(np);
	}
	tf_stmt_done(q);
	json_decref(mine);
	return rc < 0 ? rc : 0;
}

/* Takes the re-post of delivered row t for this process, in one write transaction, as
 * courier_claim takes an outbox row: only while the alert is still firing (or is a resolution
 * delivered within RESOLVED_S) and the newest state of its labels (superseded), and no
 * request to its hook is in flight in any process. Its lease (lease_until, and
 * next_attempt_at for the index) covers one POST, as an outbox row's does: until it is
 * released (courier_done) or runs out, no process posts the alert again nor any other alert
 * of its hook, so the resolution of a firing alert cannot overtake the firing alert's
 * re-post. The commit does not wait for a sync (store.c, invariant 6): other processes see
 * it once it is written, and a lease lost with the machine protected nothing, its process
 * being gone too. *out receives the decision, *lease the lease's end. */
static int repost_claim(struct tf_store *st, const struct tf_alerts_config *cfg,
                        const struct target *t, enum claim *out, double *lease)
{
	double now = tf_now_wall();
	int rc = tf_store_begin(st);
	if (rc)
		return rc;
	int64_t still = 0, busy = 0;
	rc = tf_store_query_int(st, &still,
	                        "SELECT count(*) FROM alerts a JOIN hooks h ON h.name=a.hook WHERE "
	                        "a.id=?1 AND a.state='delivered' AND h.disabled_at IS NULL AND "
	                        "coalesce(a.lease_until < ?2, 1) AND (a.id IN (SELECT alert_id "
	                        "FROM alert_firing) OR (a.resolves IS NOT NULL AND "
	                        "a.delivered_at > ?3))",
	                        "idd", t->id, now, now - RESOLVED_S);
	int newer = 0;
	if (rc == 0 && still)
		rc = superseded(st, t, &newer);
	if (rc == 0 && still && !newer)
		rc = tf_store_query_int(st, &busy, "SELECT " HOOK_IN_FLIGHT, "td", t->hook, now);
	enum claim cl = !still || newer ? GONE : busy ? BUSY : TAKEN;
	*lease = now + cfg->timeout + LEASE_MARGIN;
	if (rc == 0 && cl == TAKEN)
		rc = tf_store_run(
		    st, "UPDATE alerts SET lease_until=?1, next_attempt_at=?1 WHERE id=?2", "di",
		    *lease, t->id);
	if (rc == 0 && cl == TAKEN) {
		tf_store_defer_sync(st, 1);
		rc = tf_store_commit(st);
		tf_store_defer_sync(st, 0);
	}
	if (rc || cl != TAKEN)
		tf_store_rollback(st);
	if (rc == 0)
		*out = cl;
	return rc;
}

/* Starts the waiting re-posts whose hook has nothing in flight here or in another process,
 * the oldest of each; drops those no longer to be posted (repost_claim). */
static int courier_start_waiting(struct courier *c, struct tf_store *st,
                                 const struct tf_alerts_config *cfg)
{
	int rc = 0;
	size_t kept = 0;
	for (size_t i = 0; i < c->nwait; i++) {
		enum claim cl = BUSY;
		double lease = 0;
		int r = 0;
		if (!courier_busy(c, c->wait[i].hook))
			r = repost_claim(st, cfg, &c->wait[i], &cl, &lease);
		if (r == 0 && cl == TAKEN)
			r = courier_start(c, st, cfg, &c->wait[i], lease);
		else if (r == 0 && cl == BUSY)
			c->wait[kept++] = c->wait[i];
		else
			target_free(&c->wait[i]);
		if (r && !rc)
			rc = r;
	}
	c->nwait = kept;
	return rc;
}

/* Lets the requests in flight progress, waiting up to wait_ms for one of them (or a
 * curl_multi_wakeup), and records each that finished. */
static int courier_run(struct courier *c, struct tf_store *st, const struct tf_alerts_config *cfg,
                       int wait_ms)
{
	int running = 0, rc = 0;
	curl_multi_perform(c->multi, &running);
	if (wait_ms > 0)
		curl_multi_poll(c->multi, NULL, 0, wait_ms, NULL);
	curl_multi_perform(c->multi, &running);
	CURLMsg *m;
	int left;
	while ((m = curl_multi_info_read(c->multi, &left))) {
		if (m->msg != CURLMSG_DONE)
			continue;
		CURL *easy = m->easy_handle;
		CURLcode cc = m->data.result; /* m is not to be read once the handle is removed */
		struct flight *f = NULL;
		curl_easy_getinfo(easy, CURLINFO_PRIVATE, (char **)&f);
		curl_multi_remove_handle(c->multi, easy);
		for (size_t i = 0; i < c->nfl; i++)
			if (c->fl[i] == f) {
				c->fl[i] = c->fl[--c->nfl];
				break;
			}
		long status = 0;
		char why[512] = "";
		enum outcome o = post_end(f, cc, &status, why, sizeof(why));
		int r = courier_done(c, st, cfg, f, o, status, why);
		if (r && !rc)
			rc = r;
	}
	return rc;
}

/* A row no older row of its hook waits before: the next of its hook to send. */
#define HOOK_HEAD                                                                                  \
	"NOT EXISTS (SELECT 1 FROM alerts o WHERE o.state='pending' AND o.hook=a.hook AND "        \
	"o.id<a.id)"

/* Takes up to max due rows, the oldest pending of each hook with nothing in flight here or,
 * as a re-post, in another process (or row `only`), leases them and starts them; *n receives
 * how many. Each row's request starts when it is taken, so its lease covers one POST (the
 * timeout and a margin). */
static int courier_claim(struct courier *c, struct tf_store *st, const struct tf_alerts_config *cfg,
                         int max, int64_t only, int *n)
{
	double now = tf_now_wall();
	*n = 0;
	int rc = tf_store_begin(st);
	if (rc)
		return rc;
	struct tf_stmt *q = tf_store_query(
	    st,
	    "SELECT a.id, a.msg_id, a.hook, a.payload, a.attempts, a.queued_at, h.name IS NOT "
	    "NULL, "
	    "h.url, h.format, h.secret_env, h.secret_file, h.disabled_reason, a.id IN (SELECT "
	    "alert_id FROM alert_firing) FROM alerts a "
	    "LEFT JOIN hooks h ON "
	    "h.name=a.hook WHERE (?1 = 0 AND a.state='pending' AND a.next_attempt_at <= ?2 AND "
	    "(a.lease_until IS NULL OR a.lease_until < ?2) AND " HOOK_HEAD " AND NOT "
	    "EXISTS (SELECT 1 FROM alerts r WHERE r.state='delivered' AND r.next_attempt_at >= ?2 "
	    "AND r.hook=a.hook AND r.lease_until >= ?2)) OR a.id=?1 "
	    "ORDER BY a.id LIMIT ?3",
	    "idi", only, now, (int64_t)((max > 0 ? max : 64) + (int)c->nfl));
	if (!q) {
		tf_store_rollback(st);
		return -EIO;
	}
	struct target *ts = NULL;
	size_t nt = 0, cap = 0;
	while ((rc = tf_stmt_step(q)) == 1 && (max <= 0 || nt < (size_t)max)) {
		if (courier_busy(c, tf_stmt_text(q, 2)))
			continue; /* a re-post is in flight: its answer first */
		if (nt == cap) {
			cap = cap ? cap * 2 : 8;
			ts = tf_xrealloc(ts, cap * sizeof(*ts));
		}
		ts[nt++] = (struct target){.id = tf_stmt_int(q, 0),
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
		                           .disabled = tf_stmt_strdup(q, 11),
		                           .firing = (int)tf_stmt_int(q, 12)};
	}
	tf_stmt_done(q);
	if (rc > 0)
		rc = 0;
	for (size_t i = 0; rc == 0 && i < nt; i++)
		rc = tf_store_run(st, "UPDATE alerts SET lease_until=? WHERE id=?", "di",
		                  now + cfg->timeout + LEASE_MARGIN, ts[i].id);
	if (rc == 0)
		rc = tf_store_commit(st);
	if (rc)
		tf_store_rollback(st);
	for (size_t i = 0; i < nt; i++) {
		if (rc == 0) {
			int r = courier_start(c, st, cfg, &ts[i], 0.0);
			if (r && !rc)
				rc = r;
			(*n)++;
		}
		target_free(&ts[i]);
	}
	free(ts);
	return rc;
}

/* Seconds until the next pending row is due (-1: none pending). */
static double next_due(struct tf_store *st)
{
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
	return next;
}

int tf_alerts_deliver_due(struct tf_store *st, const struct tf_alerts_config *cfg, int max,
                          int *sent, int *failed, double *next)
{
	struct courier c;
	courier_init(&c);
	int rc = 0, taken = 0;
	for (;;) { /* a hook whose row is done sends its next one, if due, in the same call */
		int n = 0;
		if (max <= 0 || taken < max) {
			int r = courier_claim(&c, st, cfg, max > 0 ? max - taken : 0, 0, &n);
			if (r && !rc)
				rc = r;
			taken += n;
			if (r)
				n = 0;
		}
		if (n == 0 && c.nfl == 0)
			break;
		if (c.nfl == 0)
			continue; /* decided without a request (a dead hook): the next row */
		int r = courier_run(&c, st, cfg, 200);
		if (r && !rc)
			rc = r;
	}
	if (sent)
		*sent += c.sent;
	if (failed)
		*failed += c.failed;
	courier_release(&c);
	if (rc == 0 && next)
		*next = next_due(st);
	return rc;
}

int tf_alerts_deliver_one(struct tf_store *st, const struct tf_alerts_config *cfg, int64_t id,
                          char *err, size_t errlen)
{
	struct courier c;
	courier_init(&c);
	int n = 0, rc = courier_claim(&c, st, cfg, 1, id, &n);
	while (rc == 0 && c.nfl > 0)
		rc = courier_run(&c, st, cfg, 200);
	if (rc == 0 && n == 0)
		rc = -ENOENT;
	else if (rc == 0 && !c.sent) {
		tf_errf(err, errlen, "%s", c.err);
		rc = -EIO;
	}
	courier_release(&c);
	return rc;
}

/* Alertmanager forgets an alert `resolve_timeout` after it last received it, so the alerts
 * still firing (table alert_firing) are posted again, as they were, every `refire` seconds;
 * and, as its alerts API documentation asks of clients, resolved alerts are posted again for
 * RESOLVED_S (five minutes) after the resolution, so that an Alertmanager that restarted
 * meanwhile still sends the resolved notification. Best effort: an answer other than 2xx is
 * logged; the next round tries again. Queues them on the courier (those not already waiting
 * or in flight), each to go when its hook has nothing in flight (repost_claim decides,
 * when it is its turn, whether it still goes). */
static int courier_queue_reposts(struct courier *c, struct tf_store *st)
{
	struct tf_stmt *q = tf_store_query(
	    st,
	    "SELECT a.id, a.msg_id, a.hook, a.payload, h.url, h.format, h.secret_env, "
	    "h.secret_file, a.id IN (SELECT alert_id FROM alert_firing) "
	    "FROM alerts a JOIN hooks h ON h.name=a.hook WHERE a.state='delivered' AND "
	    "h.disabled_at IS NULL AND "
	    "(a.id IN (SELECT alert_id FROM alert_firing) OR (a.resolves IS NOT NULL AND "
	    "h.format='alertmanager' AND a.delivered_at > ?)) ORDER BY a.id",
	    "d", tf_now_wall() - RESOLVED_S);
	if (!q)
		return -EIO;
	int rc;
	while ((rc = tf_stmt_step(q)) == 1) {
		int64_t id = tf_stmt_int(q, 0);
		int queued = 0;
		for (size_t i = 0; i < c->nwait && !queued; i++)
			queued = c->wait[i].id == id;
		for (size_t i = 0; i < c->nfl && !queued; i++)
			queued = c->fl[i]->repost && c->fl[i]->t.id == id;
		if (queued)
			continue;
		if (c->nwait == c->capwait) {
			c->capwait = c->capwait ? c->capwait * 2 : 8;
			c->wait = tf_xrealloc(c->wait, c->capwait * sizeof(*c->wait));
		}
		c->wait[c->nwait++] = (struct target){.id = id,
		                                      .msg_id = tf_stmt_strdup(q, 1),
		                                      .hook = tf_stmt_strdup(q, 2),
		                                      .payload = tf_stmt_strdup(q, 3),
		                                      .url = tf_stmt_strdup(q, 4),
		                                      .format = tf_stmt_strdup(q, 5),
		                                      .secret_env = tf_stmt_strdup(q, 6),
		                                      .secret_file = tf_stmt_strdup(q, 7),
		                                      .has_hook = 1,
		                                      .firing = (int)tf_stmt_int(q, 8)};
	}
	tf_stmt_done(q);
	return rc < 0 ? rc : 0;
}

int tf_alerts_refire(struct tf_store *st, const struct tf_alerts_config *cfg, int *sent)
{
	struct courier c;
	courier_init(&c);
	int rc = courier_queue_reposts(&c, st);
	while (rc == 0 && (c.nwait > 0 || c.nfl > 0)) {
		rc = courier_start_waiting(&c, st, cfg);
		if (rc == 0 && (c.nwait > 0 || c.nfl > 0)) /* an answer, or another process's */
			rc = courier_run(&c, st, cfg, 200);
	}
	if (sent)
		*sent += c.reposted;
	courier_release(&c);
	return rc;
}

/* ---- the worker thread ----------------------------------------------------------------- */

struct tf_alerts_worker {
	char *home;
	pthread_t thread;
	pthread_mutex_t mu;
	struct courier c; /* [thread] its requests in flight; c.multi's wakeup is any thread's */
	int kicked;       /* [mu] deliver now */
	int stopping;     /* [mu] drain, then end */
	double drain_end; /* [mu] monotonic time the drain ends */
	int left;         /* alerts pending when the thread ended */
	double refired;   /* [thread] monotonic time firing alerts were last queued again */
};

static int64_t pending_count(struct tf_store *st)
{
	int64_t n = 0;
	tf_store_query_int(st, &n, "SELECT count(*) FROM alerts WHERE state='pending'", "");
	return n;
}

/* The thread's loop: start what is due on hooks with nothing in flight, then wait for a
 * request to finish, the next due row (at most half a second) or a kick. A hook whose
 * receiver hangs holds only its own alerts back. */
static void *worker_main(void *arg)
{
	struct tf_alerts_worker *w = arg;
	struct courier *c = &w->c;
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
		double drain_end = w->drain_end;
		w->kicked = 0;
		pthread_mutex_unlock(&w->mu);
		struct tf_alerts_config cfg;
		if (tf_alerts_config_load(w->home, &cfg, err, sizeof(err)))
			tf_warn("%s", err);
		double now = tf_now_monotonic();
		int n = 0;
		if (!last || now <= drain_end) {
			if (now - w->refired >= cfg.refire) {
				w->refired = now;
				if (courier_queue_reposts(c, st))
					tf_warn("alerts: %s", tf_store_errmsg(st));
			}
			/* new alerts first: a round of re-posts of a hook's firing alerts
			 * (one at a time) would otherwise hold them back for as long */
			if (courier_claim(c, st, &cfg, 64, 0, &n))
				tf_warn("alerts: %s", tf_store_errmsg(st));
			if (courier_start_waiting(c, st, &cfg))
				tf_warn("alerts: %s", tf_store_errmsg(st));
		}
		double next = next_due(st);
		if (last && c->nfl == 0 && (c->nwait == 0 || now > drain_end) &&
		    (next < 0 || now + next > drain_end)) {
			tf_alerts_config_release(&cfg);
			break;
		}
		/* a row due now whose hook has a request in flight waits for that request: the
		 * wait ends when one of them progresses */
		double wait = next > 0 && next < 0.5 ? next : 0.5;
		pthread_mutex_lock(&w->mu);
		if (w->kicked || n >= 64)
			wait = 0; /* a kick, or more due than one claim takes */
		pthread_mutex_unlock(&w->mu);
		if (courier_run(c, st, &cfg, (int)(wait * 1000)))
			tf_warn("alerts: %s", tf_store_errmsg(st));
		tf_alerts_config_release(&cfg);
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
	courier_init(&w->c);
	if (!w->c.multi || pthread_create(&w->thread, NULL, worker_main, w)) {
		tf_warn("alerts: cannot start the delivery thread");
		courier_release(&w->c);
		pthread_mutex_destroy(&w->mu);
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
	pthread_mutex_unlock(&w->mu);
	curl_multi_wakeup(w->c.multi); /* ends the thread's wait, or its next one at once */
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
	pthread_mutex_unlock(&w->mu);
	curl_multi_wakeup(w->c.multi);
	pthread_join(w->thread, NULL);
	if (left)
		*left = w->left;
	courier_release(&w->c);
	pthread_mutex_destroy(&w->mu);
	free(w->home);
	free(w);
}

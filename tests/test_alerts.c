/* test_alerts.c — the alert outbox and its formats: Standard Webhooks signatures (the
 * specification's published example), secrets refused when malformed, backoff bounds with
 * jitter and Retry-After, the host allowlist, alerts written in the transaction of their state
 * change (and gone with it when it rolls back), routing by home-wide events, Alertmanager
 * alerts resolved by the next successful run of the pipeline, the Slack and Alertmanager
 * bodies (texts cut on a character, labels that tell alerts apart), dead-lettering after
 * max_attempts, redelivery with the same id, what each HTTP answer means, a hook's alerts in
 * queue order, hooks posted to at once with a lease per POST, re-posts leased across two
 * processes (a resolution never overtaken by a re-post), the newest state of a label set
 * posted last, a receiver that hangs holding
 * back no other hook, both signatures while a secret is rotated, and a resolving alert
 * queued during the delivery thread's last pass still sent.
 * Delivery to real receivers is tests/it_alerts.sh. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "common/common.h"
#include "orchestrator/alerts.h"
#include "orchestrator/broker.h"
#include "orchestrator/pipeline.h"
#include "orchestrator/registry.h"
#include "orchestrator/schedules.h"
#include "orchestrator/state.h"
#include "orchestrator/store.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <netinet/in.h>
#include <unistd.h>

static struct tf_store *open_home(void)
{
	struct tf_store *st = NULL;
	char err[256];
	assert_int_equal(tf_store_open_home(".", &st, err, sizeof(err)), 0);
	return st;
}

/* The home with no alerts queued and none firing (an earlier case's are gone). */
static struct tf_store *open_empty_home(void)
{
	struct tf_store *st = open_home();
	tf_store_run(st, "DELETE FROM alerts", "");
	tf_store_run(st, "DELETE FROM alert_firing", "");
	return st;
}

static void config(struct tf_alerts_config *cfg)
{
	char err[256];
	unlink("alerts.conf");
	assert_int_equal(tf_alerts_config_load(".", cfg, err, sizeof(err)), 0);
}

/* The endsAt of the one alert of an Alertmanager body, in wall seconds (0: none). */
static double am_ends(const char *body)
{
	json_t *b = json_loads(body, 0, NULL);
	const char *e = json_string_value(json_object_get(json_array_get(b, 0), "endsAt"));
	struct tm tm = {0};
	int ms = 0;
	double t = 0;
	if (e && sscanf(e, "%d-%d-%dT%d:%d:%d.%dZ", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
	                &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &ms) == 7) {
		tm.tm_year -= 1900;
		tm.tm_mon -= 1;
		t = (double)timegm(&tm) + ms / 1000.0;
	}
	json_decref(b);
	return t;
}

/* Whether an Alertmanager body received at `at` is a resolution: its endsAt had come (a
 * firing alert's, the end of its validity, was ahead). */
static int am_resolution_at(const char *body, double at)
{
	double e = am_ends(body);
	return e > 0 && e <= at;
}

/* Whether two Alertmanager bodies are the same alert but for endsAt (a firing alert's
 * moves with each post). */
static int am_same_alert(const char *x, const char *y)
{
	json_t *a = json_loads(x, 0, NULL), *b = json_loads(y, 0, NULL);
	json_object_del(json_array_get(a, 0), "endsAt");
	json_object_del(json_array_get(b, 0), "endsAt");
	int same = a && json_equal(a, b);
	json_decref(a);
	json_decref(b);
	return same;
}

static int64_t count(struct tf_store *st, const char *sql)
{
	int64_t n = -1;
	assert_int_equal(tf_store_query_int(st, &n, sql, ""), 0);
	return n;
}

static void add_hook(struct tf_store *st, const char *name, const char *url, const char *format,
                     const char *on)
{
	struct tf_alerts_config cfg;
	config(&cfg);
	struct tf_hook h = {.name = name,
	                    .url = url,
	                    .format = format,
	                    .secret_env = !strcmp(format, "standard") ? "TEST_WH_SECRET" : NULL,
	                    .events = on};
	char err[256] = "";
	int rc = tf_hooks_add(st, &cfg, &h, err, sizeof(err));
	if (rc)
		fprintf(stderr, "%s\n", err);
	assert_int_equal(rc, 0);
	tf_alerts_config_release(&cfg);
}

static void new_run(struct tf_store *st, const char *pipeline, char id[32])
{
	struct tf_run_step_def s = {.name = "a", .type = "shell"};
	assert_int_equal(
	    tf_run_create(st, pipeline, "name: x", "x.yaml", "{}", "file:///tmp", &s, 1, NULL, id),
	    0);
	assert_int_equal(tf_run_set_state(st, id, TF_RUN_RUNNING, NULL), 0);
}

/* The example of the Standard Webhooks specification (also what the npm package computes). */
static void test_alerts_sign_spec_example(void **state)
{
	(void)state;
	char sig[128];
	const char *body = "{\"test\": 2432232314}";
	assert_int_equal(tf_alert_sign("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
	                               "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body,
	                               strlen(body), sig),
	                 0);
	assert_string_equal(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
	/* a different body, id or time gives a different signature */
	char other[128];
	assert_int_equal(tf_alert_sign("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
	                               "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265331, body,
	                               strlen(body), other),
	                 0);
	assert_string_not_equal(sig, other);
}

static void test_alerts_sign_refuses_bad_secrets(void **state)
{
	(void)state;
	char sig[128];
	assert_int_equal(tf_alert_sign("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "m", 1, "", 0, sig),
	                 -EINVAL); /* no whsec_ */
	assert_int_equal(tf_alert_sign("whsec_c2hvcnQ=", "m", 1, "", 0, sig), -EINVAL); /* 5 B */
	assert_int_equal(tf_alert_sign("whsec_!!!!", "m", 1, "", 0, sig), -EINVAL);
	assert_int_equal(tf_alert_sign("whsec_", "m", 1, "", 0, sig), -EINVAL);
}

static void test_alerts_backoff_bounds(void **state)
{
	(void)state;
	struct tf_alerts_config cfg;
	config(&cfg);
	cfg.backoff = 2;
	cfg.max_backoff = 60;
	for (int a = 1; a < 12; a++) {
		double full = 2.0 * (1 << (a - 1));
		if (full > 60)
			full = 60;
		assert_true(tf_alerts_backoff(&cfg, a, 0, 0.0) >= full / 2 - 1e-9);
		assert_true(tf_alerts_backoff(&cfg, a, 0, 0.999) <= full + 1e-9);
	}
	assert_true(tf_alerts_backoff(&cfg, 1, 30, 0.5) >= 30); /* Retry-After wins */
	assert_true(tf_alerts_backoff(&cfg, 1000, 0, 0.5) <= 60);
	tf_alerts_config_release(&cfg);
}

/* Retry-After is delay-seconds or an HTTP-date (RFC 9110 section 10.2.3); both count. */
static void test_alerts_retry_after_both_forms(void **state)
{
	(void)state;
	const double at = 1445412480; /* Wed, 21 Oct 2015 07:28:00 GMT */
	assert_true(tf_alerts_retry_after("120", at) == 120);
	assert_true(tf_alerts_retry_after(" 7\r\n", at) == 7);
	assert_true(tf_alerts_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", at - 30) == 30);
	assert_true(tf_alerts_retry_after("Wed, 21 Oct 2015 07:28:00 GMT\r\n", at - 90) == 90);
	assert_true(tf_alerts_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", at + 5) == 0); /* past */
	assert_true(tf_alerts_retry_after("999999999", at) == 86400); /* at most a day */
	assert_true(tf_alerts_retry_after("soon", at) == 0);
	assert_true(tf_alerts_retry_after("", at) == 0);
}

static void test_alerts_allowlist(void **state)
{
	(void)state;
	struct tf_alerts_config cfg;
	char err[256];
	config(&cfg);
	assert_int_equal(tf_alerts_url_allowed(&cfg, "http://127.0.0.1:9/x", err, sizeof(err)), 0);
	assert_int_equal(tf_alerts_url_allowed(&cfg, "http://localhost/x", err, sizeof(err)), 0);
	assert_int_equal(
	    tf_alerts_url_allowed(&cfg, "https://hooks.slack.com/services/T/B/x", err, sizeof(err)),
	    -EPERM);
	assert_non_null(strstr(err, "allow_hosts=hooks.slack.com"));
	assert_int_equal(tf_alerts_url_allowed(&cfg, "ftp://127.0.0.1/x", err, sizeof(err)),
	                 -EINVAL);
	FILE *f = fopen("alerts.conf", "w");
	fprintf(f, "# hosts\nallow_hosts=hooks.slack.com, am.example\nmax_attempts=3\n");
	fclose(f);
	tf_alerts_config_release(&cfg);
	assert_int_equal(tf_alerts_config_load(".", &cfg, err, sizeof(err)), 0);
	assert_int_equal(cfg.max_attempts, 3);
	assert_int_equal(
	    tf_alerts_url_allowed(&cfg, "https://hooks.slack.com/services/T/B/x", err, sizeof(err)),
	    0);
	assert_int_equal(
	    tf_alerts_url_allowed(&cfg, "http://am.example:9093/api/v2/alerts", err, sizeof(err)),
	    0);
	tf_alerts_config_release(&cfg);
	f = fopen("alerts.conf", "w");
	fprintf(f, "backoff=soon\n");
	fclose(f);
	assert_int_equal(tf_alerts_config_load(".", &cfg, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "alerts.conf:1"));
	tf_alerts_config_release(&cfg);
	unlink("alerts.conf");
}

static void test_alerts_hook_checks(void **state)
{
	(void)state;
	struct tf_store *st = open_home();
	struct tf_alerts_config cfg;
	config(&cfg);
	char err[256];
	struct tf_hook h = {.name = "Bad Name", .url = "http://127.0.0.1/x", .format = "slack"};
	assert_int_equal(tf_hooks_add(st, &cfg, &h, err, sizeof(err)), -EINVAL);
	h.name = "ok";
	h.format = "standard"; /* a standard hook needs a secret */
	assert_int_equal(tf_hooks_add(st, &cfg, &h, err, sizeof(err)), -EINVAL);
	h.secret_env = "TEST_WH_BAD";
	setenv("TEST_WH_BAD", "not-a-secret", 1);
	assert_int_equal(tf_hooks_add(st, &cfg, &h, err, sizeof(err)), -EINVAL);
	assert_null(strstr(err, "not-a-secret")); /* never shown */
	h.secret_env = "TEST_WH_SECRET";
	h.events = "run_failed,no_such_event";
	assert_int_equal(tf_hooks_add(st, &cfg, &h, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "no_such_event"));
	h.events = "run_failed";
	assert_int_equal(tf_hooks_add(st, &cfg, &h, err, sizeof(err)), 0);
	assert_int_equal(count(st, "SELECT count(*) FROM hooks WHERE secret_env='TEST_WH_SECRET'"),
	                 1);
	assert_int_equal(tf_hooks_remove(st, "ok"), 0);
	assert_int_equal(tf_hooks_remove(st, "ok"), -ENOENT);
	tf_alerts_config_release(&cfg);
	tf_store_close(st);
}

/* The alert row commits with its state change, and rolls back with it. */
static void test_alerts_same_transaction(void **state)
{
	(void)state;
	struct tf_store *st = open_home();
	add_hook(st, "tx", "http://127.0.0.1:9/x", "standard", "run_failed");
	char id[32];
	new_run(st, "txp", id);
	int64_t before = count(st, "SELECT count(*) FROM alerts");
	assert_int_equal(tf_store_begin(st), 0);
	assert_int_equal(tf_run_set_state(st, id, TF_RUN_FAILED, "boom"), 0);
	assert_int_equal(count(st, "SELECT count(*) FROM alerts"), before + 1);
	tf_store_rollback(st);
	assert_int_equal(count(st, "SELECT count(*) FROM alerts"), before);
	assert_int_equal(tf_run_set_state(st, id, TF_RUN_FAILED, "boom"), 0);
	assert_int_equal(count(st, "SELECT count(*) FROM alerts WHERE event='run_failed' AND "
	                           "state='pending' AND msg_id LIKE 'msg_%'"),
	                 before + 1);
	assert_int_equal(tf_hooks_remove(st, "tx"), 0);
	tf_store_close(st);
}

/* Home-wide routes: each hook gets the events it names, a cancel is run_cancelled. */
static void test_alerts_routing(void **state)
{
	(void)state;
	struct tf_store *st = open_home();
	add_hook(st, "r1", "http://127.0.0.1:9/a", "slack", "run_failed,step_retried");
	add_hook(st, "r2", "http://127.0.0.1:9/b", "slack", "run_succeeded,run_cancelled");
	tf_store_run(st, "DELETE FROM alerts", "");
	char a[32], b[32], c[32];
	new_run(st, "routep", a);
	assert_int_equal(tf_step_set_state(st, a, "a", TF_STEP_RUNNING, NULL), 0);
	struct tf_step_update u = {.reason = "exit 1", .next_attempt_at = tf_now_wall() + 1};
	assert_int_equal(tf_step_set_state(st, a, "a", TF_STEP_RETRYING, &u), 0);
	assert_int_equal(tf_run_set_state(st, a, TF_RUN_FAILED, "step 'a' failed"), 0);
	new_run(st, "routep", b);
	assert_int_equal(tf_run_set_state(st, b, TF_RUN_SUCCEEDED, NULL), 0);
	new_run(st, "routep", c);
	enum tf_run_state rs;
	assert_int_equal(tf_run_request_cancel(st, c, &rs), 0);
	assert_int_equal(tf_run_set_state(st, c, TF_RUN_FAILED, "cancelled"), 0);
	assert_int_equal(count(st, "SELECT count(*) FROM alerts WHERE hook='r1'"), 2);
	assert_int_equal(count(st, "SELECT count(*) FROM alerts WHERE hook='r1' AND "
	                           "event='step_retried' AND step='a'"),
	                 1);
	assert_int_equal(count(st, "SELECT count(*) FROM alerts WHERE hook='r2'"), 2);
	assert_int_equal(count(st, "SELECT count(*) FROM alerts WHERE hook='r2' AND "
	                           "event='run_cancelled'"),
	                 1);
	json_t *list = NULL;
	assert_int_equal(tf_alerts_list(st, 0, 10, &list), 0);
	assert_int_equal(json_array_size(list), 4);
	json_decref(list);
	tf_hooks_remove(st, "r1");
	tf_hooks_remove(st, "r2");
	tf_store_close(st);
}

/* An Alertmanager alert of a pipeline is resolved by its next successful run: same labels,
 * endsAt set. */
static void test_alerts_alertmanager_resolve(void **state)
{
	(void)state;
	struct tf_store *st = open_home();
	struct tf_alerts_config cfg;
	config(&cfg);
	add_hook(st, "am", "http://127.0.0.1:9/api/v2/alerts", "alertmanager", "run_failed");
	tf_store_run(st, "DELETE FROM alerts", "");
	char a[32], b[32], err[256];
	new_run(st, "nightly", a);
	assert_int_equal(tf_run_set_state(st, a, TF_RUN_FAILED, "step 'x' failed"), 0);
	assert_int_equal(count(st, "SELECT count(*) FROM alert_firing"), 1);
	new_run(st, "nightly", b);
	assert_int_equal(tf_run_set_state(st, b, TF_RUN_SUCCEEDED, NULL), 0);
	assert_int_equal(count(st, "SELECT count(*) FROM alert_firing"), 0);
	assert_int_equal(count(st, "SELECT count(*) FROM alerts"), 2);
	char *fire = NULL, *res = NULL;
	assert_int_equal(tf_store_query_text(st, &fire,
	                                     "SELECT payload FROM alerts WHERE "
	                                     "resolves IS NULL",
	                                     ""),
	                 0);
	assert_int_equal(tf_store_query_text(
	                     st, &res, "SELECT payload FROM alerts WHERE resolves IS NOT NULL", ""),
	                 0);
	char *fb = tf_alert_body("alertmanager", fire, &cfg, err, sizeof(err));
	char *rb = tf_alert_body("alertmanager", res, &cfg, err, sizeof(err));
	json_t *f = json_loads(fb, 0, NULL), *r = json_loads(rb, 0, NULL);
	assert_true(json_is_array(f) && json_array_size(f) == 1);
	json_t *fa = json_array_get(f, 0), *ra = json_array_get(r, 0);
	assert_true(json_equal(json_object_get(fa, "labels"), json_object_get(ra, "labels")));
	assert_string_equal(
	    json_string_value(json_object_get(json_object_get(fa, "labels"), "alertname")),
	    "run_failed");
	assert_string_equal(
	    json_string_value(json_object_get(json_object_get(fa, "labels"), "pipeline")),
	    "nightly");
	assert_null(json_object_get(fa, "endsAt"));
	assert_non_null(json_string_value(json_object_get(ra, "endsAt")));
	assert_string_equal(json_string_value(json_object_get(ra, "startsAt")),
	                    json_string_value(json_object_get(fa, "startsAt")));
	json_decref(f);
	json_decref(r);
	free(fb);
	free(rb);
	free(fire);
	free(res);
	tf_hooks_remove(st, "am");
	tf_alerts_config_release(&cfg);
	tf_store_close(st);
}

static void test_alerts_slack_body(void **state)
{
	(void)state;
	struct tf_alerts_config cfg;
	config(&cfg);
	free(cfg.dashboard_url);
	cfg.dashboard_url = tf_xstrdup("http://127.0.0.1:8470");
	char err[256];
	const char *p = "{\"type\":\"run_failed\",\"timestamp\":\"2026-01-01T00:00:00.000Z\","
	                "\"data\":{\"event\":\"run_failed\",\"summary\":\"a run failed\","
	                "\"severity\":\"critical\",\"run\":\"R1\",\"pipeline\":\"p<1>\","
	                "\"message\":\"a & b\"}}";
	char *b = tf_alert_body("slack", p, &cfg, err, sizeof(err));
	json_t *j = json_loads(b, 0, NULL);
	assert_non_null(json_string_value(json_object_get(j, "text")));
	json_t *blocks = json_object_get(j, "blocks");
	assert_int_equal(json_array_size(blocks), 3);
	const char *sect = json_string_value(
	    json_object_get(json_object_get(json_array_get(blocks, 1), "text"), "text"));
	assert_non_null(strstr(sect, "<http://127.0.0.1:8470/#/runs/R1|R1>"));
	assert_non_null(strstr(sect, "p&lt;1&gt;"));
	assert_non_null(strstr(sect, "a &amp; b"));
	json_decref(j);
	free(b);
	assert_null(tf_alert_body("slack", "{not json", &cfg, err, sizeof(err)));
	tf_alerts_config_release(&cfg);
}

/* A long message of multi-byte characters and of characters Slack escapes: the texts are cut
 * on a character (a cut inside one made the body fail to encode, and the alert dead) and not
 * inside an entity, stay within Block Kit's limits, and the fallback `text` is escaped too
 * (it is mrkdwn: an unescaped `<!channel>` in a step's message would notify everyone). */
static void test_alerts_slack_long_utf8(void **state)
{
	(void)state;
	struct tf_alerts_config cfg;
	config(&cfg);
	char err[256] = "";
	for (int variant = 0; variant < 2; variant++) {
		char msg[8000] = "<!channel> x";
		for (int i = 0; i < 1500; i++) /* é (2 bytes), or & (5 bytes once escaped) */
			strcat(msg, variant ? "&" : "\xc3\xa9");
		json_t *p =
		    json_pack("{s:s, s:s, s:{s:s, s:s, s:s, s:s, s:s, s:s}}", "type", "step_failed",
		              "timestamp", "2026-01-01T00:00:00.000Z", "data", "event",
		              "step_failed", "summary", "a step failed", "severity", "critical",
		              "run", "R1", "pipeline", "nightly", "message", msg);
		char *text = json_dumps(p, JSON_COMPACT);
		char *b = tf_alert_body("slack", text, &cfg, err, sizeof(err));
		if (!b)
			fprintf(stderr, "%s\n", err);
		assert_non_null(b);
		json_t *j = json_loads(b, 0, NULL); /* jansson refuses text that is not UTF-8 */
		assert_non_null(j);
		const char *fallback = json_string_value(json_object_get(j, "text"));
		assert_non_null(strstr(fallback, "&lt;!channel&gt; x"));
		assert_null(strstr(fallback, "<!channel>"));
		const char *sect = json_string_value(json_object_get(
		    json_object_get(json_array_get(json_object_get(j, "blocks"), 1), "text"),
		    "text"));
		assert_true(strlen(sect) <= 3000 && strlen(fallback) <= 3000);
		assert_non_null(strstr(sect, "&lt;!channel&gt; x"));
		const char *amp = strrchr(sect, '&');
		assert_true(!amp || !strcmp(amp, "&amp;") || strchr(amp, ';'));
		json_decref(j);
		free(b);
		free(text);
		json_decref(p);
	}
	tf_alerts_config_release(&cfg);
}

/* Alertmanager identifies an alert by its labels: alerts about two chips, or two models, carry
 * labels that tell them apart (with the same labels the second would only update the first,
 * and Alertmanager notifies nobody of an update). */
static void test_alerts_alertmanager_labels(void **state)
{
	(void)state;
	struct tf_alerts_config cfg;
	config(&cfg);
	char err[256] = "";
	const char *payloads[] = {
	    "{\"type\":\"chip_failed\",\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"data\":{"
	    "\"event\":\"chip_failed\",\"summary\":\"a chip failed\",\"severity\":\"critical\","
	    "\"pool\":\"v5e\",\"chip\":[0,1,0]}}",
	    "{\"type\":\"chip_failed\",\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"data\":{"
	    "\"event\":\"chip_failed\",\"summary\":\"a chip failed\",\"severity\":\"critical\","
	    "\"pool\":\"v5e\",\"chip\":[1,1,0]}}",
	    "{\"type\":\"metric_regressed\",\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"data\":{"
	    "\"event\":\"metric_regressed\",\"summary\":\"worse\",\"severity\":\"critical\","
	    "\"model\":\"fraud\",\"version\":4,\"metric\":\"auc\"}}",
	    "{\"type\":\"metric_regressed\",\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"data\":{"
	    "\"event\":\"metric_regressed\",\"summary\":\"worse\",\"severity\":\"critical\","
	    "\"model\":\"churn\",\"version\":2,\"metric\":\"auc\"}}",
	};
	json_t *labels[4];
	for (int i = 0; i < 4; i++) {
		char *b = tf_alert_body("alertmanager", payloads[i], &cfg, err, sizeof(err));
		assert_non_null(b);
		json_t *arr = json_loads(b, 0, NULL), *a = json_array_get(arr, 0);
		labels[i] = json_incref(json_object_get(a, "labels"));
		if (i == 2)
			assert_string_equal(json_string_value(json_object_get(
			                        json_object_get(a, "annotations"), "version")),
			                    "4");
		json_decref(arr);
		free(b);
	}
	assert_string_equal(json_string_value(json_object_get(labels[0], "pool")), "v5e");
	assert_string_equal(json_string_value(json_object_get(labels[0], "chip")), "0,1,0");
	assert_false(json_equal(labels[0], labels[1]));
	assert_string_equal(json_string_value(json_object_get(labels[2], "model")), "fraud");
	assert_string_equal(json_string_value(json_object_get(labels[2], "metric")), "auc");
	assert_false(json_equal(labels[2], labels[3]));
	for (int i = 0; i < 4; i++)
		json_decref(labels[i]);
	tf_alerts_config_release(&cfg);
}

/* Nothing listens on the port: every attempt fails, and after max_attempts the alert is
 * dead; redeliver queues it again with its msg_id. */
static void test_alerts_dead_letter_and_redeliver(void **state)
{
	(void)state;
	int s = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof(a);
	assert_int_equal(bind(s, (struct sockaddr *)&a, sizeof(a)), 0);
	getsockname(s, (struct sockaddr *)&a, &al);
	close(s); /* a port nobody listens on */
	char url[64];
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/x", ntohs(a.sin_port));
	struct tf_store *st = open_home();
	add_hook(st, "gone", url, "slack", "");
	tf_store_run(st, "DELETE FROM alerts", "");
	int64_t id = 0;
	assert_int_equal(tf_alerts_queue_test(st, "gone", &id), 0);
	struct tf_alerts_config cfg;
	config(&cfg);
	cfg.max_attempts = 2;
	cfg.backoff = 0.01;
	char err[256];
	assert_int_equal(tf_alerts_deliver_one(st, &cfg, id, err, sizeof(err)), -EIO);
	assert_int_equal(count(st, "SELECT count(*) FROM alerts WHERE state='pending' AND "
	                           "attempts=1 AND last_error IS NOT NULL"),
	                 1);
	assert_int_equal(tf_alerts_deliver_one(st, &cfg, id, err, sizeof(err)), -EIO);
	json_t *dead = NULL;
	assert_int_equal(tf_alerts_list(st, 1, 10, &dead), 0);
	assert_int_equal(json_array_size(dead), 1);
	char *msg =
	    tf_xstrdup(json_string_value(json_object_get(json_array_get(dead, 0), "msg_id")));
	json_decref(dead);
	int64_t n = 0;
	assert_int_equal(tf_alerts_redeliver(st, NULL, &n), 0);
	assert_int_equal(n, 1);
	assert_int_equal(tf_alerts_redeliver(st, msg, &n), -EALREADY);
	json_t *one = NULL;
	assert_int_equal(tf_alerts_show(st, msg, &one), 0);
	assert_string_equal(json_string_value(json_object_get(one, "state")), "pending");
	assert_string_equal(json_string_value(json_object_get(one, "msg_id")), msg);
	json_decref(one);
	assert_int_equal(tf_alerts_show(st, "msg_nope", &one), -ENOENT);
	/* a hook removed meanwhile: the alert is dead at its next attempt, saying why */
	assert_int_equal(tf_hooks_remove(st, "gone"), 0);
	assert_int_equal(tf_alerts_deliver_one(st, &cfg, id, err, sizeof(err)), -EIO);
	assert_non_null(strstr(err, "no hook 'gone'"));
	free(msg);
	tf_alerts_config_release(&cfg);
	tf_store_close(st);
}

/* A registered version worse than production's by more than the threshold alerts. */
static void test_alerts_metric_regressed(void **state)
{
	(void)state;
	struct tf_store *st = open_home();
	add_hook(st, "ml", "http://127.0.0.1:9/m", "slack", "metric_regressed,model_registered");
	tf_store_run(st, "DELETE FROM alerts", "");
	struct tf_model_version_spec v = {
	    .model = "clf", .bundle = "b1", .metrics = "{\"auc\":0.95}"};
	int64_t v1 = 0, v2 = 0, v3 = 0;
	assert_int_equal(tf_registry_register(st, &v, &v1, NULL), 0);
	assert_int_equal(tf_registry_set_alias(st, "clf", "production", v1), 0);
	v.bundle = "b2";
	v.run_id = "r2";
	v.metrics = "{\"auc\":0.945,\"loss\":0.3}"; /* 0.005 worse: within the threshold */
	assert_int_equal(tf_registry_register(st, &v, &v2, NULL), 0);
	assert_int_equal(count(st, "SELECT count(*) FROM alerts WHERE event='metric_regressed'"),
	                 0);
	v.bundle = "b3";
	v.run_id = "r3";
	v.metrics = "{\"auc\":0.90}";
	assert_int_equal(tf_registry_register(st, &v, &v3, NULL), 0);
	assert_int_equal(count(st, "SELECT count(*) FROM alerts WHERE event='metric_regressed' AND "
	                           "payload LIKE '%\"metric\":\"auc\"%'"),
	                 1);
	assert_int_equal(count(st, "SELECT count(*) FROM alerts WHERE event='model_registered'"),
	                 3);
	tf_hooks_remove(st, "ml");
	tf_store_close(st);
}

/* ---- a minimal HTTP receiver on a thread: answers `status` to each request, keeps bodies */

struct responder {
	int fd, port;
	_Atomic int n; /* requests answered (read by the test while the thread runs) */
	_Atomic int status, delay_ms;           /* the answer, and how long it takes */
	char bodies[16][4096], heads[16][1024]; /* the first 16 requests */
	double at[16];                          /* when each was received (wall) */
	pthread_t t;
};

/* Whether request k of r was an Alertmanager resolution. */
static int am_resolution(const struct responder *r, int k)
{
	return am_resolution_at(r->bodies[k], r->at[k]);
}

static void *responder_main(void *arg)
{
	struct responder *r = arg;
	for (;;) {
		int c = accept(r->fd, NULL, NULL);
		if (c < 0)
			return NULL;
		char buf[8192];
		size_t got = 0;
		ssize_t k;
		char *body = NULL;
		long len = -1;
		while (got < sizeof(buf) - 1 &&
		       (k = read(c, buf + got, sizeof(buf) - 1 - got)) > 0) {
			got += (size_t)k;
			buf[got] = '\0';
			char *end = strstr(buf, "\r\n\r\n");
			if (end && len < 0) {
				char *cl = strcasestr(buf, "content-length:");
				len = cl ? strtol(cl + 15, NULL, 10) : 0;
				body = end + 4;
			}
			if (body && (long)(got - (size_t)(body - buf)) >= len)
				break;
		}
		if (r->n < 16 && body) {
			r->at[r->n] = tf_now_wall();
			snprintf(r->bodies[r->n], sizeof(r->bodies[0]), "%s", body);
			snprintf(r->heads[r->n], sizeof(r->heads[0]), "%.*s", (int)(body - buf),
			         buf);
		}
		r->n++;
		if (atomic_load(&r->delay_ms))
			usleep(1000 * (unsigned)atomic_load(&r->delay_ms));
		char out[128];
		int m = snprintf(out, sizeof(out),
		                 "HTTP/1.1 %d X\r\nContent-Length: 0\r\n"
		                 "Connection: close\r\n\r\n",
		                 atomic_load(&r->status));
		if (write(c, out, (size_t)m) < 0) {
		}
		close(c);
	}
}

/* ---- what a case starts that would outlive it: receivers on threads, silent sockets, a
 * delivery thread. The case's fixture owns them, and its teardown (which cmocka runs whether
 * the case passed or failed partway) stops them all and removes the hooks (every case starts
 * with none): a failed case reports itself only, its receiver no longer answering the next
 * cases' requests or writing to a stack that is gone, its hooks no longer routing their
 * alerts. */

struct fixture {
	struct responder *rx[4]; /* receivers running (responder_start), freed by the teardown */
	int silent[2];           /* silent receivers' sockets (silent_receiver) */
	size_t nrx, nsilent;
	struct tf_alerts_worker *worker; /* a delivery thread a case started, NULL once stopped */
	pthread_t deliver;               /* a pass on a thread of its own (deliver_thread) */
	int delivering;                  /* 1 until the teardown joins it */
	struct tf_alerts_config cfg;     /* that pass's configuration */
	int has_cfg;
};

static int fixture_setup(void **state)
{
	*state = tf_xcalloc(1, sizeof(struct fixture));
	return 0;
}

static void responder_free(struct responder *r)
{
	shutdown(r->fd, SHUT_RDWR);
	close(r->fd);
	pthread_join(r->t, NULL);
	free(r);
}

static int fixture_teardown(void **state)
{
	struct fixture *fx = *state;
	if (fx->worker) /* first: it may be posting to the receivers */
		tf_alerts_worker_stop(fx->worker, 0, NULL);
	if (fx->delivering)
		pthread_join(fx->deliver, NULL);
	if (fx->has_cfg)
		tf_alerts_config_release(&fx->cfg);
	for (size_t i = 0; i < fx->nrx; i++)
		responder_free(fx->rx[i]);
	for (size_t i = 0; i < fx->nsilent; i++)
		close(fx->silent[i]);
	struct tf_store *st = NULL;
	char err[256];
	if (tf_store_open_home(".", &st, err, sizeof(err)) == 0) {
		tf_store_run(st, "DELETE FROM hooks", "");
		tf_store_close(st);
	}
	unlink("alerts.conf"); /* a case's own settings (each case loads its configuration anew) */
	free(fx);
	return 0;
}

/* A receiver answering `status`, on a thread until the case's teardown (or responder_stop). */
static struct responder *responder_start(struct fixture *fx, int status)
{
	assert_true(fx->nrx < TF_ARRAY_LEN(fx->rx));
	struct responder *r = tf_xcalloc(1, sizeof(*r));
	atomic_store(&r->status, status);
	r->fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof(a);
	if (bind(r->fd, (struct sockaddr *)&a, sizeof(a)) || listen(r->fd, 8) ||
	    getsockname(r->fd, (struct sockaddr *)&a, &al) ||
	    pthread_create(&r->t, NULL, responder_main, r)) {
		int e = errno;
		close(r->fd);
		free(r);
		fail_msg("cannot start a receiver on 127.0.0.1: %s", strerror(e));
	}
	r->port = ntohs(a.sin_port);
	fx->rx[fx->nrx++] = r;
	return r;
}

/* Stops r before the case ends (its slot is free for another). */
static void responder_stop(struct fixture *fx, struct responder *r)
{
	for (size_t i = 0; i < fx->nrx; i++)
		if (fx->rx[i] == r) {
			fx->rx[i] = fx->rx[--fx->nrx];
			responder_free(r);
			return;
		}
}

/* A firing Alertmanager alert is posted again, as it was, until a success resolves it; the
 * resolving alert for five minutes after. */
static void test_alerts_alertmanager_refire(void **state)
{
	struct fixture *fx = *state;
	struct responder *r = responder_start(fx, 200);
	char url[96];
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/api/v2/alerts", r->port);
	struct tf_store *st = open_empty_home();
	add_hook(st, "am2", url, "alertmanager", "run_failed");
	struct tf_alerts_config cfg;
	config(&cfg);
	char a[32], b[32];
	new_run(st, "refired", a);
	assert_int_equal(tf_run_set_state(st, a, TF_RUN_FAILED, "boom"), 0);
	int sent = 0, failed = 0;
	assert_int_equal(tf_alerts_deliver_due(st, &cfg, 0, &sent, &failed, NULL), 0);
	assert_int_equal(sent, 1);
	sent = 0;
	assert_int_equal(tf_alerts_refire(st, &cfg, &sent), 0);
	assert_int_equal(sent, 1);
	assert_int_equal(r->n, 2);
	assert_true(am_same_alert(r->bodies[0], r->bodies[1]));
	assert_non_null(strstr(r->bodies[1], "\"alertname\":\"run_failed\""));
	/* each post says until when it holds: four times the re-post interval, so a re-post
	 * that comes late does not let Alertmanager end the alert (its resolve_timeout) */
	for (int k = 0; k < 2; k++) {
		double left = am_ends(r->bodies[k]) - tf_now_wall();
		assert_true(left > 4 * cfg.refire - 30 && left <= 4 * cfg.refire);
	}
	new_run(st, "refired", b);
	assert_int_equal(tf_run_set_state(st, b, TF_RUN_SUCCEEDED, NULL), 0);
	sent = 0;
	assert_int_equal(tf_alerts_refire(st, &cfg, &sent), 0);
	assert_int_equal(sent, 0); /* resolved: nothing firing */
	assert_int_equal(tf_alerts_deliver_due(st, &cfg, 0, &sent, &failed, NULL), 0);
	assert_int_equal(r->n, 3);
	assert_true(am_resolution(r, 2));
	/* the resolution is posted again, as it was, for five minutes after its delivery */
	sent = 0;
	assert_int_equal(tf_alerts_refire(st, &cfg, &sent), 0);
	assert_int_equal(sent, 1);
	assert_int_equal(r->n, 4);
	assert_string_equal(r->bodies[3], r->bodies[2]);
	assert_int_equal(tf_store_run(st,
	                              "UPDATE alerts SET delivered_at=delivered_at-301 WHERE "
	                              "resolves IS NOT NULL",
	                              ""),
	                 0);
	sent = 0;
	assert_int_equal(tf_alerts_refire(st, &cfg, &sent), 0);
	assert_int_equal(sent, 0);
	assert_int_equal(r->n, 4);
	tf_hooks_remove(st, "am2");
	tf_alerts_config_release(&cfg);
	tf_store_close(st);
}

static int64_t firing_count(struct tf_store *st, const char *event)
{
	int64_t n = -1;
	assert_int_equal(tf_store_query_int(
	                     st, &n, "SELECT count(*) FROM alert_firing WHERE event=?", "t", event),
	                 0);
	return n;
}

/* Alertmanager alerts of no run stay firing, posted again as those of a pipeline are, until
 * their condition ends: a failed chip until it is repaired, a rollback until the alias is
 * deployed again, a regression until a version no worse on the metric, a missed schedule
 * until a run of the pipeline succeeds. An event that ends as it happens
 * (daemon_unclean_stop) and info events are posted once. */
static void test_alerts_alertmanager_refire_not_of_a_run(void **state)
{
	struct fixture *fx = *state;
	struct responder *r = responder_start(fx, 200);
	char url[96];
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/api/v2/alerts", r->port);
	struct tf_store *st = open_empty_home();
	add_hook(st, "am4", url, "alertmanager",
	         "chip_failed,model_rolled_back,model_deployed,metric_regressed,schedule_missed,"
	         "daemon_unclean_stop");
	struct tf_alerts_config cfg;
	config(&cfg);
	int xyz[3] = {2, 1, 0};
	assert_int_equal(tf_broker_chip_fail(st, "v5", xyz, tf_now_wall(), "ECC errors"), 0);
	assert_int_equal(firing_count(st, "chip_failed"), 1);
	int sent = 0;
	assert_int_equal(tf_alerts_deliver_due(st, &cfg, 0, &sent, NULL, NULL), 0);
	assert_int_equal(sent, 1);
	sent = 0;
	assert_int_equal(tf_alerts_refire(st, &cfg, &sent), 0);
	assert_int_equal(sent, 1); /* posted again while the chip is failed */
	assert_int_equal(r->n, 2);
	assert_true(am_same_alert(r->bodies[0], r->bodies[1]));
	assert_false(am_resolution(r, 1));
	assert_non_null(strstr(r->bodies[1], "\"chip\":\"2,1,0\""));
	/* another chip's repair does not resolve it; its own does */
	int other[3] = {0, 0, 0};
	assert_int_equal(tf_broker_chip_fail(st, "v5", other, tf_now_wall(), "link down"), 0);
	assert_int_equal(tf_broker_chip_repair(st, "v5", other), 0);
	assert_int_equal(firing_count(st, "chip_failed"), 1);
	assert_int_equal(tf_broker_chip_repair(st, "v5", xyz), 0);
	assert_int_equal(firing_count(st, "chip_failed"), 0);
	tf_store_run(st, "DELETE FROM alerts WHERE payload LIKE '%link down%'", "");
	int before = r->n;
	assert_int_equal(tf_alerts_deliver_due(st, &cfg, 0, NULL, NULL, NULL), 0);
	assert_int_equal(r->n, before + 1);
	json_t *res = json_loads(r->bodies[r->n - 1], 0, NULL),
	       *fire = json_loads(r->bodies[0], 0, NULL);
	assert_true(am_resolution(r, r->n - 1));
	assert_true(json_equal(json_object_get(json_array_get(res, 0), "labels"),
	                       json_object_get(json_array_get(fire, 0), "labels")));
	json_decref(res);
	json_decref(fire);
	/* a rollback, until the alias is deployed again */
	struct tf_model_version_spec v = {.model = "ranker", .run_id = "rk1", .bundle = "rb1"};
	int64_t v1 = 0, v2 = 0;
	assert_int_equal(tf_registry_register(st, &v, &v1, NULL), 0);
	v.bundle = "rb2";
	v.run_id = "rk2";
	assert_int_equal(tf_registry_register(st, &v, &v2, NULL), 0);
	struct tf_deploy_spec d = {
	    .model = "ranker", .alias = "production", .version = v1, .event = "model_rolled_back"};
	assert_int_equal(tf_registry_deploy(st, &d, NULL), 0);
	assert_int_equal(firing_count(st, "model_rolled_back"), 1);
	d.alias = "staging";
	d.event = NULL; /* model_deployed of another alias */
	assert_int_equal(tf_registry_deploy(st, &d, NULL), 0);
	assert_int_equal(firing_count(st, "model_rolled_back"), 1);
	d.alias = "production";
	d.version = v2;
	assert_int_equal(tf_registry_deploy(st, &d, NULL), 0);
	assert_int_equal(firing_count(st, "model_rolled_back"), 0);
	assert_int_equal(count(st,
	                       "SELECT count(*) FROM alerts WHERE event='model_rolled_back' AND "
	                       "resolves IS NOT NULL"),
	                 1);
	/* a regression, until a version no worse on the metric */
	assert_int_equal(tf_registry_set_alias(st, "ranker", "production", v2), 0);
	tf_store_run(st, "UPDATE model_versions SET metrics='{\"auc\":0.95}'", "");
	v.bundle = "rb3";
	v.run_id = "rk3";
	v.metrics = "{\"auc\":0.90}";
	int64_t v3 = 0, v4 = 0;
	assert_int_equal(tf_registry_register(st, &v, &v3, NULL), 0);
	assert_int_equal(firing_count(st, "metric_regressed"), 1);
	v.bundle = "rb4";
	v.run_id = "rk4";
	v.metrics = "{\"auc\":0.951}";
	assert_int_equal(tf_registry_register(st, &v, &v4, NULL), 0);
	assert_int_equal(firing_count(st, "metric_regressed"), 0);
	/* a missed schedule belongs to its pipeline */
	json_t *x = json_pack("{s:s, s:i}", "pipeline", "cronned", "missed", 2);
	assert_int_equal(tf_alerts_emit(st, "schedule_missed", NULL, NULL, "missed", x), 0);
	json_decref(x);
	assert_int_equal(firing_count(st, "schedule_missed"), 1);
	char run[32];
	new_run(st, "cronned", run);
	assert_int_equal(tf_run_set_state(st, run, TF_RUN_SUCCEEDED, NULL), 0);
	assert_int_equal(firing_count(st, "schedule_missed"), 0);
	/* over as it happens: posted once */
	assert_int_equal(tf_alerts_emit(st, "daemon_unclean_stop", NULL, NULL, "killed", NULL), 0);
	assert_int_equal(count(st, "SELECT count(*) FROM alert_firing"), 0);
	assert_int_equal(count(st, "SELECT count(*) FROM alerts WHERE event='daemon_unclean_stop'"),
	                 1);
	tf_hooks_remove(st, "am4");
	tf_alerts_config_release(&cfg);
	tf_store_close(st);
}

/* Two processes on a home delivering its alerts (the daemon and a `tpuflow run`): a re-post of a
 * firing Alertmanager alert by one of them holds its hook as an outbox row's POST does. While
 * it is in flight the other process neither posts the same alert again nor the alert that
 * resolves it, so Alertmanager gets the firing state, then the resolution, never the
 * firing state after the resolution. The other process is a real one (fork), started before
 * this case opens the database and told by a pipe when to re-post. */
static void test_alerts_refire_leased_across_processes(void **state)
{
	struct fixture *fx = *state;
	struct responder *r = responder_start(fx, 200);
	char url[96];
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/api/v2/alerts", r->port);
	int go[2];
	assert_int_equal(pipe(go), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) { /* the other process: re-posts what is firing once told to */
		close(go[1]);
		char b;
		struct tf_store *own = NULL;
		struct tf_alerts_config cfg;
		char err[256];
		int sent = 0;
		int ok = read(go[0], &b, 1) == 1 &&
		         tf_store_open_home(".", &own, err, sizeof(err)) == 0 &&
		         tf_alerts_config_load(".", &cfg, err, sizeof(err)) == 0 &&
		         tf_alerts_refire(own, &cfg, &sent) == 0 && sent == 1;
		_exit(ok ? 0 : 1);
	}
	close(go[0]);
	struct tf_store *st = open_empty_home();
	add_hook(st, "am5", url, "alertmanager", "run_failed");
	struct tf_alerts_config cfg;
	config(&cfg);
	char a[32], b[32];
	new_run(st, "leased", a);
	assert_int_equal(tf_run_set_state(st, a, TF_RUN_FAILED, "boom"), 0);
	int sent = 0;
	assert_int_equal(tf_alerts_deliver_due(st, &cfg, 0, &sent, NULL, NULL), 0);
	assert_int_equal(sent, 1);
	atomic_store(&r->delay_ms, 1500); /* the other process's re-post takes 1.5 s */
	assert_int_equal(write(go[1], "g", 1), 1);
	close(go[1]);
	for (int i = 0; i < 3000 && r->n < 2; i++)
		usleep(5000);
	assert_int_equal(r->n, 2); /* its re-post is in flight */
	atomic_store(&r->delay_ms, 0);
	sent = 0;
	assert_int_equal(tf_alerts_refire(st, &cfg, &sent), 0);
	assert_int_equal(sent, 0); /* not posted twice at once */
	new_run(st, "leased", b);
	assert_int_equal(tf_run_set_state(st, b, TF_RUN_SUCCEEDED, NULL), 0);
	assert_int_equal(tf_alerts_deliver_due(st, &cfg, 0, &sent, NULL, NULL), 0);
	assert_int_equal(sent, 0); /* the resolution waits for the re-post's answer */
	assert_int_equal(r->n, 2);
	int status = 0;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	assert_int_equal(tf_alerts_deliver_due(st, &cfg, 0, &sent, NULL, NULL), 0);
	assert_int_equal(sent, 1);
	assert_int_equal(r->n, 3);
	assert_false(am_resolution(r, 1));
	assert_true(am_resolution(r, 2));
	tf_hooks_remove(st, "am5");
	tf_alerts_config_release(&cfg);
	tf_store_close(st);
}

/* The newest state of an alert's labels wins at Alertmanager. A resolution is posted again
 * for five minutes after its delivery; once the pipeline fails again, the new firing alert
 * has the same labels, and the older resolution must not be posted after it. Here the new
 * alert's first POST is slow, so the delivery thread's next re-post round (every second)
 * comes while it is in flight: the resolution it listed then waited for the hook and went
 * right after the firing alert, and Alertmanager showed the alert resolved while it fired. */
static void test_alerts_refire_newest_state_wins(void **state)
{
	struct fixture *fx = *state;
	struct responder *r = responder_start(fx, 200);
	char url[96];
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/api/v2/alerts", r->port);
	struct tf_store *st = open_empty_home();
	add_hook(st, "am6", url, "alertmanager", "run_failed");
	struct tf_alerts_config cfg;
	config(&cfg);
	char a[32], b[32], c[32];
	new_run(st, "flapping", a);
	assert_int_equal(tf_run_set_state(st, a, TF_RUN_FAILED, "boom"), 0);
	assert_int_equal(tf_alerts_deliver_due(st, &cfg, 0, NULL, NULL, NULL), 0);
	new_run(st, "flapping", b);
	assert_int_equal(tf_run_set_state(st, b, TF_RUN_SUCCEEDED, NULL), 0);
	assert_int_equal(tf_alerts_deliver_due(st, &cfg, 0, NULL, NULL, NULL), 0);
	assert_int_equal(r->n, 2); /* firing, resolved */
	FILE *f = fopen("alerts.conf", "w");
	fprintf(f, "refire=1s\n");
	fclose(f);
	struct tf_alerts_worker *w = fx->worker = tf_alerts_worker_start(".");
	assert_non_null(w);
	for (int i = 0; i < 3000 && r->n < 3; i++) /* its first round: the resolution again */
		usleep(5000);
	assert_true(r->n >= 3);
	atomic_store(&r->delay_ms, 2500);
	new_run(st, "flapping", c);
	assert_int_equal(tf_run_set_state(st, c, TF_RUN_FAILED, "boom again"), 0);
	tf_alerts_worker_kick(w);
	int first = -1; /* the request of the new failure */
	for (int i = 0; i < 4000 && first < 0; i++) {
		for (int k = 3; k < r->n && k < 16 && first < 0; k++)
			if (strstr(r->bodies[k], c))
				first = k;
		usleep(5000);
	}
	assert_true(first >= 3 && first < 12);
	atomic_store(&r->delay_ms, 0);
	for (int i = 0; i < 4000 && r->n < first + 3; i++) /* two rounds after it */
		usleep(5000);
	assert_true(r->n >= first + 3);
	for (int k = first; k < first + 3; k++) {
		if (am_resolution(r, k))
			fail_msg("request %d after the new failure is the old resolution: %s", k,
			         r->bodies[k]);
		assert_non_null(strstr(r->bodies[k], c));
	}
	tf_alerts_worker_stop(w, 0, NULL);
	fx->worker = NULL;
	/* of two firing alerts with the same labels, the newer one is posted again */
	char d[32];
	new_run(st, "flapping", d);
	assert_int_equal(tf_run_set_state(st, d, TF_RUN_FAILED, "and again"), 0);
	assert_int_equal(firing_count(st, "run_failed"), 2);
	assert_int_equal(tf_alerts_deliver_due(st, &cfg, 0, NULL, NULL, NULL), 0);
	int sent = 0, before = r->n;
	assert_int_equal(tf_alerts_refire(st, &cfg, &sent), 0);
	assert_int_equal(sent, 1);
	assert_int_equal(r->n, before + 1);
	assert_true(before < 16);
	assert_non_null(strstr(r->bodies[before], d));
	unlink("alerts.conf");
	tf_hooks_remove(st, "am6");
	tf_alerts_config_release(&cfg);
	tf_store_close(st);
}

/* The value of header `name` in a request head, copied to out. */
static const char *header(const char *head, const char *name, char *out, size_t n)
{
	const char *h = strcasestr(head, name);
	out[0] = '\0';
	if (h) {
		h += strlen(name);
		snprintf(out, n, "%.*s", (int)strcspn(h, "\r\n"), h);
	}
	return out;
}

/* A hook's alerts go in the order they were queued, one request per pass while its receiver
 * fails (the others wait behind the oldest), and a failing hook does not hold back another
 * one's alerts. */
static void test_alerts_order_per_hook(void **state)
{
	struct fixture *fx = *state;
	struct responder *down = responder_start(fx, 503), *up = responder_start(fx, 200);
	char url[96];
	struct tf_store *st = open_home();
	tf_store_run(st, "DELETE FROM alerts", "");
	setenv("TEST_WH_SECRET", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", 1);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/a", down->port);
	add_hook(st, "ordered", url, "standard", "");
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/b", up->port);
	add_hook(st, "other", url, "slack", "");
	int64_t ids[3], other;
	for (int i = 0; i < 3; i++)
		assert_int_equal(tf_alerts_queue_test(st, "ordered", &ids[i]), 0);
	assert_int_equal(tf_alerts_queue_test(st, "other", &other), 0);
	struct tf_alerts_config cfg;
	config(&cfg);
	cfg.backoff = 60; /* the failed one is not due again in this test unless told */
	cfg.max_backoff = 60;
	int sent = 0, failed = 0;
	double next = -1;
	assert_int_equal(tf_alerts_deliver_due(st, &cfg, 0, &sent, &failed, &next), 0);
	assert_int_equal(down->n, 1); /* the oldest only: the others wait behind it */
	assert_int_equal(up->n, 1);   /* the other hook's alert went in the same pass */
	assert_int_equal(sent, 1);
	assert_int_equal(failed, 1);
	assert_true(next > 30); /* nothing due until the oldest is: no busy loop */
	assert_int_equal(count(st, "SELECT count(*) FROM alerts WHERE hook='ordered' AND "
	                           "attempts=0 AND state='pending'"),
	                 2);
	atomic_store(&down->status, 200);
	assert_int_equal(
	    tf_store_run(st, "UPDATE alerts SET next_attempt_at=0 WHERE id=?", "i", ids[0]), 0);
	for (int pass = 0; pass < 5; pass++)
		assert_int_equal(tf_alerts_deliver_due(st, &cfg, 0, NULL, NULL, NULL), 0);
	assert_int_equal(count(st, "SELECT count(*) FROM alerts WHERE state='delivered'"), 4);
	assert_int_equal(down->n, 4);
	char got[64], want[64];
	for (int i = 0; i < 3; i++) { /* requests 1..3: ids[0] again, then ids[1], ids[2] */
		char *msg = NULL;
		assert_int_equal(tf_store_query_text(
		                     st, &msg, "SELECT msg_id FROM alerts WHERE id=?", "i", ids[i]),
		                 0);
		snprintf(want, sizeof(want), "%s", msg);
		free(msg);
		assert_string_equal(header(down->heads[i + 1], "webhook-id: ", got, sizeof(got)),
		                    want);
	}
	tf_hooks_remove(st, "ordered");
	tf_hooks_remove(st, "other");
	tf_alerts_config_release(&cfg);
	tf_store_close(st);
}

/* The delivery thread of `tpuflow run` is stopped right after the run's last state commits.
 * Its first pass posts the firing Alertmanager alerts again (a slow receiver here); a
 * success committed meanwhile queues the resolving alert, which that pass did not see: the
 * stop must still deliver it (one more pass, begun after the stop was asked). */
static void test_alerts_worker_stop_takes_late_rows(void **state)
{
	struct fixture *fx = *state;
	struct responder *r = responder_start(fx, 200);
	char url[96];
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/api/v2/alerts", r->port);
	struct tf_store *st = open_empty_home();
	add_hook(st, "late", url, "alertmanager", "run_failed");
	struct tf_alerts_config cfg;
	config(&cfg);
	char a[32], b[32];
	new_run(st, "late", a);
	assert_int_equal(tf_run_set_state(st, a, TF_RUN_FAILED, "boom"), 0);
	assert_int_equal(tf_alerts_deliver_due(st, &cfg, 0, NULL, NULL, NULL), 0);
	assert_int_equal(r->n, 1); /* firing */
	atomic_store(&r->delay_ms, 300);
	struct tf_alerts_worker *w = fx->worker = tf_alerts_worker_start(".");
	assert_non_null(w);
	while (r->n < 2) /* the thread's first pass is posting the firing alert again */
		usleep(1000);
	new_run(st, "late", b);
	assert_int_equal(tf_run_set_state(st, b, TF_RUN_SUCCEEDED, NULL), 0);
	int left = -1;
	tf_alerts_worker_stop(w, 10, &left);
	fx->worker = NULL;
	assert_int_equal(left, 0);
	assert_int_equal(count(st, "SELECT count(*) FROM alerts WHERE resolves IS NOT NULL AND "
	                           "state='delivered'"),
	                 1);
	assert_true(am_resolution(r, 2));
	tf_hooks_remove(st, "late");
	tf_alerts_config_release(&cfg);
	tf_store_close(st);
}

/* What each answer means: 404 (a receiver being deployed, a wrong path fixed later) is tried
 * again, as the Standard Webhooks specification treats every non-2xx answer; 400, 410 Gone,
 * 413 and 422 refuse this body or this sender, and the alert is dead at once. 410 also
 * disables the hook: its next alert is dead without a request, until `hooks add` again. */
static void test_alerts_answers(void **state)
{
	struct fixture *fx = *state;
	static const struct {
		int status;
		const char *state;
	} cases[] = {{404, "pending"}, {401, "pending"},  {429, "pending"}, {502, "pending"},
	             {400, "dead"},    {410, "dead"},     {413, "dead"},    {422, "dead"},
	             {301, "dead"},    {204, "delivered"}};
	struct tf_store *st = open_home();
	struct tf_alerts_config cfg;
	config(&cfg);
	for (size_t i = 0; i < TF_ARRAY_LEN(cases); i++) {
		struct responder *r = responder_start(fx, cases[i].status);
		char url[96];
		snprintf(url, sizeof(url), "http://127.0.0.1:%d/x", r->port);
		tf_store_run(st, "DELETE FROM alerts", "");
		add_hook(st, "answers", url, "slack", "");
		int64_t id;
		assert_int_equal(tf_alerts_queue_test(st, "answers", &id), 0);
		assert_int_equal(tf_alerts_deliver_due(st, &cfg, 0, NULL, NULL, NULL), 0);
		char *got = NULL;
		assert_int_equal(
		    tf_store_query_text(st, &got, "SELECT state FROM alerts WHERE id=?", "i", id),
		    0);
		if (strcmp(got, cases[i].state))
			fprintf(stderr, "HTTP %d: %s, expected %s\n", cases[i].status, got,
			        cases[i].state);
		assert_string_equal(got, cases[i].state);
		free(got);
		if (cases[i].status == 410) { /* Gone: the hook is disabled, nothing more is sent */
			json_t *hooks = NULL;
			assert_int_equal(tf_hooks_list(st, &hooks), 0);
			assert_non_null(strstr(json_string_value(json_object_get(
			                           json_array_get(hooks, 0), "disabled")),
			                       "410 Gone"));
			json_decref(hooks);
			assert_int_equal(tf_alerts_queue_test(st, "answers", &id), 0);
			assert_int_equal(tf_alerts_deliver_due(st, &cfg, 0, NULL, NULL, NULL), 0);
			assert_int_equal(r->n, 1);
			assert_int_equal(
			    tf_store_query_text(st, &got,
			                        "SELECT state || ' ' || last_error FROM "
			                        "alerts WHERE id=?",
			                        "i", id),
			    0);
			assert_non_null(strstr(got, "dead hook 'answers' is disabled"));
			free(got);
		}
		responder_stop(fx, r);
	}
	tf_hooks_remove(st, "answers");
	tf_alerts_config_release(&cfg);
	tf_store_close(st);
}

/* Secret rotation: a hook whose secret holds the new and the old whsec_ secret sends both
 * signatures, space-separated; each verifies with its own secret alone. */
static void test_alerts_secret_rotation(void **state)
{
	struct fixture *fx = *state;
	const char *old = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
	const char *new = "whsec_QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVphYmNkZWY=";
	char both[200];
	snprintf(both, sizeof(both), "%s %s", new, old);
	struct responder *r = responder_start(fx, 200);
	char url[96];
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/x", r->port);
	struct tf_store *st = open_home();
	tf_store_run(st, "DELETE FROM alerts", "");
	setenv("TEST_WH_SECRET", both, 1);
	add_hook(st, "rotating", url, "standard", "");
	int64_t id;
	assert_int_equal(tf_alerts_queue_test(st, "rotating", &id), 0);
	struct tf_alerts_config cfg;
	config(&cfg);
	assert_int_equal(tf_alerts_deliver_due(st, &cfg, 0, NULL, NULL, NULL), 0);
	assert_int_equal(r->n, 1);
	char msg_id[64], ts[32], sig[400], a[128], b[128];
	header(r->heads[0], "webhook-id: ", msg_id, sizeof(msg_id));
	header(r->heads[0], "webhook-timestamp: ", ts, sizeof(ts));
	header(r->heads[0], "webhook-signature: ", sig, sizeof(sig));
	const char *body = r->bodies[0];
	assert_int_equal(tf_alert_sign(new, msg_id, atoll(ts), body, strlen(body), a), 0);
	assert_int_equal(tf_alert_sign(old, msg_id, atoll(ts), body, strlen(body), b), 0);
	char expect[300];
	snprintf(expect, sizeof(expect), "%s %s", a, b);
	assert_string_equal(sig, expect);
	/* one malformed secret among them: refused when the hook is added */
	snprintf(both, sizeof(both), "%s whsec_short", new);
	setenv("TEST_WH_SECRET", both, 1);
	struct tf_hook h = {.name = "rotating",
	                    .url = url,
	                    .format = "standard",
	                    .secret_env = "TEST_WH_SECRET",
	                    .events = ""};
	char err[512] = "";
	assert_int_equal(tf_hooks_add(st, &cfg, &h, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "rotated"));
	setenv("TEST_WH_SECRET", old, 1);
	tf_hooks_remove(st, "rotating");
	tf_alerts_config_release(&cfg);
	tf_store_close(st);
}

/* One pass with the fixture's configuration (fx->cfg), on fx->deliver. */
static void *deliver_thread(void *arg)
{
	struct fixture *fx = arg;
	struct tf_store *st = open_home();
	tf_alerts_deliver_due(st, &fx->cfg, 0, NULL, NULL, NULL);
	tf_store_close(st);
	return NULL;
}

/* A receiver that takes connections (the kernel's backlog) and never answers, until the
 * case's teardown closes it: its URL in url. */
static void silent_receiver(struct fixture *fx, char url[96])
{
	assert_true(fx->nsilent < TF_ARRAY_LEN(fx->silent));
	int s = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(s >= 0);
	fx->silent[fx->nsilent++] = s;
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof(a);
	assert_int_equal(bind(s, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(s, 8), 0);
	getsockname(s, (struct sockaddr *)&a, &al);
	snprintf(url, 96, "http://127.0.0.1:%d/x", ntohs(a.sin_port));
}

/* A pass posts to its hooks at once: three receivers that never answer cost the pass one
 * timeout, not three; and each row's lease, taken when its POST starts, covers that POST
 * (another process, the daemon beside a `tpuflow run`, must not take it meanwhile). */
static void test_alerts_leases_cover_the_pass(void **state)
{
	struct fixture *fx = *state;
	char url[96];
	silent_receiver(fx, url);
	struct tf_store *st = open_home();
	tf_store_run(st, "DELETE FROM alerts", "");
	static const char *const names[] = {"silent1", "silent2", "silent3"};
	for (int i = 0; i < 3; i++) {
		add_hook(st, names[i], url, "slack", "");
		assert_int_equal(tf_alerts_queue_test(st, names[i], NULL), 0);
	}
	config(&fx->cfg);
	fx->has_cfg = 1;
	fx->cfg.timeout = 1;
	double start = tf_now_wall();
	assert_int_equal(pthread_create(&fx->deliver, NULL, deliver_thread, fx), 0);
	fx->delivering = 1;
	int64_t leased = 0;
	for (int i = 0; i < 2000 && leased < 3; i++) { /* the claim commits all three leases */
		usleep(5000);
		tf_store_query_int(st, &leased,
		                   "SELECT count(*) FROM alerts WHERE lease_until IS NOT NULL", "");
	}
	assert_int_equal(leased, 3);
	double lease[3];
	struct tf_stmt *q = tf_store_query(
	    st, "SELECT lease_until FROM alerts WHERE lease_until IS NOT NULL ORDER BY id", "");
	for (int i = 0; i < 3; i++) {
		assert_int_equal(tf_stmt_step(q), 1);
		lease[i] = tf_stmt_double(q, 0);
	}
	tf_stmt_done(q);
	pthread_join(fx->deliver, NULL);
	fx->delivering = 0;
	double took = tf_now_wall() - start;
	for (int i = 0; i < 3; i++) /* the POST's timeout and the margin, from its start */
		assert_true(lease[i] - start >= fx->cfg.timeout + 5.0);
	assert_int_equal(count(st, "SELECT count(*) FROM alerts WHERE attempts=1 AND "
	                           "state='pending' AND lease_until IS NULL"),
	                 3);
	if (took >= 2.5)
		fprintf(stderr, "the pass took %.2f s for three 1 s timeouts\n", took);
	assert_true(took < 2.5); /* one after the other: 3 s */
	for (int i = 0; i < 3; i++)
		tf_hooks_remove(st, names[i]);
	tf_store_close(st);
}

/* The delivery thread: a hook whose receiver hangs holds back its own alerts only. Another
 * hook's alert queued after the hanging one is delivered at once, and so is the next one
 * queued while the hanging POST is still under way (it waited for that POST's timeout, 6 s
 * here, when a pass posted one row after the other and began only when the last ended). */
static void test_alerts_hanging_hook_delays_no_other(void **state)
{
	struct fixture *fx = *state;
	struct responder *up = responder_start(fx, 200);
	char stuck_url[96], up_url[96];
	silent_receiver(fx, stuck_url);
	snprintf(up_url, sizeof(up_url), "http://127.0.0.1:%d/up", up->port);
	struct tf_store *st = open_empty_home();
	add_hook(st, "stuck", stuck_url, "slack", "");
	add_hook(st, "healthy", up_url, "slack", "");
	FILE *f = fopen("alerts.conf", "w");
	fprintf(f, "timeout=6s\n");
	fclose(f);
	int64_t stuck, h1, h2, n = 0;
	assert_int_equal(tf_alerts_queue_test(st, "stuck", &stuck), 0); /* the older row */
	assert_int_equal(tf_alerts_queue_test(st, "healthy", &h1), 0);
	double t0 = tf_now_monotonic();
	struct tf_alerts_worker *w = fx->worker = tf_alerts_worker_start(".");
	assert_non_null(w);
	static const char delivered[] = "SELECT count(*) FROM alerts WHERE id=? AND "
	                                "state='delivered'";
	for (int i = 0; i < 1000 && (tf_store_query_int(st, &n, delivered, "i", h1), !n); i++)
		usleep(10000);
	double d1 = tf_now_monotonic() - t0;
	assert_int_equal(tf_alerts_queue_test(st, "healthy", &h2), 0);
	tf_alerts_worker_kick(w);
	n = 0;
	for (int i = 0; i < 1000 && (tf_store_query_int(st, &n, delivered, "i", h2), !n); i++)
		usleep(10000);
	double d2 = tf_now_monotonic() - t0;
	/* the hanging POST has not ended: its row has no attempt recorded yet */
	int64_t stuck_attempts = -1;
	tf_store_query_int(st, &stuck_attempts, "SELECT attempts FROM alerts WHERE id=?", "i",
	                   stuck);
	if (d2 >= 3 || stuck_attempts != 0)
		fprintf(stderr, "healthy hook: %.2f s and %.2f s; stuck hook: %lld attempt(s)\n",
		        d1, d2, (long long)stuck_attempts);
	assert_int_equal(stuck_attempts, 0);
	assert_true(d2 < 3.0);
	assert_int_equal(up->n, 2);
	tf_alerts_worker_stop(w, 0, NULL); /* after the hanging POST times out */
	fx->worker = NULL;
	assert_int_equal(tf_store_query_int(st, &n,
	                                    "SELECT count(*) FROM alerts WHERE id=? AND "
	                                    "attempts=1 AND state='pending' AND last_error "
	                                    "LIKE '%imeout%'",
	                                    "i", stuck),
	                 0);
	assert_int_equal(n, 1);
	unlink("alerts.conf");
	tf_hooks_remove(st, "stuck");
	tf_hooks_remove(st, "healthy");
	tf_store_close(st);
}

/* Events from the registry, the broker, the train kind's results: each reaches a home route
 * in the transaction of its change. */
static void test_alerts_more_events(void **state)
{
	(void)state;
	struct tf_store *st = open_home();
	add_hook(st, "all", "http://127.0.0.1:9/all", "slack",
	         "chip_failed,model_deployed,model_promoted,model_rolled_back,training_diverged,"
	         "training_stopped_early,job_waiting,step_failed");
	tf_store_run(st, "DELETE FROM alerts", "");
	/* chip failure */
	int xyz[3] = {1, 0, 0};
	assert_int_equal(tf_broker_chip_fail(st, "v4", xyz, tf_now_wall(), "ECC errors"), 0);
	assert_int_equal(count(st, "SELECT count(*) FROM alerts WHERE event='chip_failed' AND "
	                           "payload LIKE '%chip 1,0,0 of pool ''v4'' failed: ECC errors%'"),
	                 1);
	/* deploy, promote, roll back */
	struct tf_model_version_spec v = {
	    .model = "m", .run_id = "r9", .step = "reg", .bundle = "b"};
	int64_t ver = 0;
	assert_int_equal(tf_registry_register(st, &v, &ver, NULL), 0);
	struct tf_deploy_spec d = {.model = "m", .alias = "production", .version = ver};
	assert_int_equal(tf_registry_deploy(st, &d, NULL), 0);
	d.event = "model_promoted";
	assert_int_equal(tf_registry_deploy(st, &d, NULL), 0);
	d.event = "model_rolled_back";
	assert_int_equal(tf_registry_deploy(st, &d, NULL), 0);
	assert_int_equal(count(st, "SELECT count(*) FROM alerts WHERE event IN ('model_deployed', "
	                           "'model_promoted', 'model_rolled_back')"),
	                 3);
	/* a train step that diverged, one that stopped early */
	char id[32];
	struct tf_run_step_def s = {.name = "a", .type = "train"};
	assert_int_equal(
	    tf_run_create(st, "ml", "name: ml", "ml.yaml", "{}", "file:///t", &s, 1, NULL, id), 0);
	assert_int_equal(tf_run_set_state(st, id, TF_RUN_RUNNING, NULL), 0);
	assert_int_equal(tf_step_set_state(st, id, "a", TF_STEP_RUNNING, NULL), 0);
	struct tf_step_update u = {.reason = "loss is NaN at step 7 (epoch 0; first loss 2.3): "
	                                     "training diverged; lower the learning rate"};
	assert_int_equal(tf_step_set_state(st, id, "a", TF_STEP_FAILED, &u), 0);
	assert_int_equal(count(st, "SELECT count(*) FROM alerts WHERE event='training_diverged'"),
	                 1);
	assert_int_equal(count(st, "SELECT count(*) FROM alerts WHERE event='step_failed'"), 1);
	assert_int_equal(tf_step_set_state(st, id, "a", TF_STEP_PENDING, NULL), 0);
	assert_int_equal(tf_step_set_state(st, id, "a", TF_STEP_RUNNING, NULL), 0);
	struct tf_step_update ok = {.metrics = "{\"loss\":0.4,\"early_stopped\":1}"};
	assert_int_equal(tf_step_set_state(st, id, "a", TF_STEP_SUCCEEDED, &ok), 0);
	assert_int_equal(
	    count(st, "SELECT count(*) FROM alerts WHERE event='training_stopped_early'"), 1);
	/* waiting past job_wait: once per attempt */
	FILE *f = fopen("alerts.conf", "w");
	fprintf(f, "job_wait=30s\n");
	fclose(f);
	sleep(3); /* the broker's copy of alerts.conf is at most 2 s old */
	assert_int_equal(tf_alerts_on_waiting(st, id, "a", 2, 10, "no free v4-8"), 0);
	assert_int_equal(count(st, "SELECT count(*) FROM alerts WHERE event='job_waiting'"), 0);
	assert_int_equal(tf_alerts_on_waiting(st, id, "a", 2, 45, "no free v4-8"), 0);
	assert_int_equal(tf_alerts_on_waiting(st, id, "a", 2, 50, "no free v4-8"), 0);
	assert_int_equal(count(st, "SELECT count(*) FROM alerts WHERE event='job_waiting'"), 1);
	unlink("alerts.conf");
	tf_hooks_remove(st, "all");
	tf_store_close(st);
}

/* A schedule's pass that misses ticks raises one schedule_missed for the pipeline. */
static void test_alerts_schedule_missed(void **state)
{
	(void)state;
	struct tf_store *st = open_home();
	add_hook(st, "sched", "http://127.0.0.1:9/s", "slack", "schedule_missed");
	tf_store_run(st, "DELETE FROM alerts", "");
	FILE *f = fopen("nightly.yaml", "w");
	fprintf(f, "name: nightly\nschedule: {cron: '*/10 * * * *', catchup: latest}\n"
	           "steps:\n  - {name: a, type: shell, with: {argv: [\"true\"]}}\n");
	fclose(f);
	const double t0 = 1767225600.0; /* 2026-01-01 00:00 UTC */
	struct tf_diag_list d = {0};
	char *name = NULL;
	assert_int_equal(tf_pipelines_add(st, "nightly.yaml", t0, &name, &d), 0);
	free(name);
	tf_diag_list_release(&d);
	/* down for an hour: five of the six ticks are missed, the newest runs */
	assert_int_equal(tf_schedules_fire_due(st, t0 + 3630, NULL, NULL), 0);
	assert_int_equal(count(st, "SELECT count(*) FROM alerts WHERE event='schedule_missed' AND "
	                           "payload LIKE '%\"missed\":5%' AND payload LIKE "
	                           "'%\"pipeline\":\"nightly\"%'"),
	                 1);
	tf_hooks_remove(st, "sched");
	tf_store_close(st);
}

/* ---- routes from the pipeline -------------------------------------------------------------- */

static const char routed_yaml[] =
    "name: routed\n"
    "params: {env: {type: string, default: dev}}\n"
    "alerts:\n"
    "  - {on: [run_failed], to: [pager], when: \"${params.env} == 'prod'\"}\n"
    "  - on: [run_failed, step_failed]\n"
    "    to: [chat, nobody]\n"
    "steps:\n"
    "  - {name: a, type: shell, with: {argv: [\"true\"]}}\n";

static int load_diags(const char *yaml, struct tf_diag_list *d)
{
	struct tf_pipeline *p = NULL;
	int rc = tf_pipeline_load_buffer("p.yaml", yaml, strlen(yaml), NULL, 0, 0, &p, d);
	tf_pipeline_free(p);
	return rc;
}

static int has_diag(const struct tf_diag_list *d, int line, int col, const char *text)
{
	for (size_t i = 0; i < d->n; i++)
		if (d->items[i].line == line && d->items[i].col == col &&
		    strstr(d->items[i].message, text))
			return 1;
	return 0;
}

static void test_alerts_pipeline_routes_validated(void **state)
{
	(void)state;
	struct tf_diag_list d = {0};
	assert_int_equal(load_diags(routed_yaml, &d), 0);
	tf_diag_list_release(&d);
	const char *bad =
	    "name: bad\n"
	    "alerts:\n"
	    "  - {on: [run_failed, run_exploded], to: [pager]}\n"
	    "  - {on: run_failed, to: [Pager!], when: \"${steps.a.metrics.nope} > 1\"}\n"
	    "  - {on: [run_failed], cc: [x]}\n"
	    "steps:\n"
	    "  - {name: a, type: evaluate, with: {model: m, dataset: d}}\n";
	assert_int_equal(load_diags(bad, &d), -EINVAL);
	assert_true(has_diag(&d, 3, 23, "unknown event 'run_exploded'"));
	assert_true(has_diag(&d, 4, 27, "bad hook name 'Pager!'"));
	assert_true(has_diag(&d, 4, 43, "has no metric 'nope'"));
	assert_true(has_diag(&d, 5, 24, "unknown key 'cc'"));
	assert_true(has_diag(&d, 5, 5, "has no 'to'"));
	tf_diag_list_release(&d);
}

static void routed_run(struct tf_store *st, const char *params, char id[32])
{
	struct tf_run_step_def s = {.name = "a", .type = "shell"};
	assert_int_equal(tf_run_create(st, "routed", routed_yaml, "routed.yaml", params,
	                               "file:///t", &s, 1, NULL, id),
	                 0);
	assert_int_equal(tf_run_set_state(st, id, TF_RUN_RUNNING, NULL), 0);
	assert_int_equal(tf_run_set_state(st, id, TF_RUN_FAILED, "step 'a' failed"), 0);
}

/* A run's pipeline routes its events: `when` over params, each hook once, and a hook the home
 * lacks dead-lettered with an error naming it and the route's position. */
static void test_alerts_pipeline_routes(void **state)
{
	(void)state;
	struct tf_store *st = open_home();
	add_hook(st, "pager", "http://127.0.0.1:9/p", "slack", "");
	add_hook(st, "chat", "http://127.0.0.1:9/c", "slack", "run_failed");
	tf_store_run(st, "DELETE FROM alerts", "");
	char dev[32], prod[32];
	routed_run(st, "{}", dev);
	assert_int_equal(count(st, "SELECT count(*) FROM alerts WHERE hook='pager'"), 0);
	assert_int_equal(count(st, "SELECT count(*) FROM alerts WHERE hook='chat'"), 1);
	assert_int_equal(count(st,
	                       "SELECT count(*) FROM alerts WHERE hook='nobody' AND state='dead' "
	                       "AND last_error LIKE '%no hook ''nobody''%routed.yaml:6:%'"),
	                 1);
	routed_run(st, "{\"env\":\"prod\"}", prod);
	assert_int_equal(count(st, "SELECT count(*) FROM alerts WHERE hook='pager'"), 1);
	assert_int_equal(count(st, "SELECT count(*) FROM alerts WHERE hook='chat'"), 2);
	tf_hooks_remove(st, "pager");
	tf_hooks_remove(st, "chat");
	tf_store_close(st);
}

int main(void)
{
	setenv("TEST_WH_SECRET", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", 1);
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_alerts_sign_spec_example, fixture_setup,
	                                    fixture_teardown),
	    cmocka_unit_test_setup_teardown(test_alerts_sign_refuses_bad_secrets, fixture_setup,
	                                    fixture_teardown),
	    cmocka_unit_test_setup_teardown(test_alerts_backoff_bounds, fixture_setup,
	                                    fixture_teardown),
	    cmocka_unit_test_setup_teardown(test_alerts_retry_after_both_forms, fixture_setup,
	                                    fixture_teardown),
	    cmocka_unit_test_setup_teardown(test_alerts_allowlist, fixture_setup, fixture_teardown),
	    cmocka_unit_test_setup_teardown(test_alerts_hook_checks, fixture_setup,
	                                    fixture_teardown),
	    cmocka_unit_test_setup_teardown(test_alerts_same_transaction, fixture_setup,
	                                    fixture_teardown),
	    cmocka_unit_test_setup_teardown(test_alerts_routing, fixture_setup, fixture_teardown),
	    cmocka_unit_test_setup_teardown(test_alerts_alertmanager_resolve, fixture_setup,
	                                    fixture_teardown),
	    cmocka_unit_test_setup_teardown(test_alerts_slack_body, fixture_setup,
	                                    fixture_teardown),
	    cmocka_unit_test_setup_teardown(test_alerts_slack_long_utf8, fixture_setup,
	                                    fixture_teardown),
	    cmocka_unit_test_setup_teardown(test_alerts_alertmanager_labels, fixture_setup,
	                                    fixture_teardown),
	    cmocka_unit_test_setup_teardown(test_alerts_dead_letter_and_redeliver, fixture_setup,
	                                    fixture_teardown),
	    cmocka_unit_test_setup_teardown(test_alerts_metric_regressed, fixture_setup,
	                                    fixture_teardown),
	    cmocka_unit_test_setup_teardown(test_alerts_alertmanager_refire, fixture_setup,
	                                    fixture_teardown),
	    cmocka_unit_test_setup_teardown(test_alerts_alertmanager_refire_not_of_a_run,
	                                    fixture_setup, fixture_teardown),
	    cmocka_unit_test_setup_teardown(test_alerts_refire_leased_across_processes,
	                                    fixture_setup, fixture_teardown),
	    cmocka_unit_test_setup_teardown(test_alerts_refire_newest_state_wins, fixture_setup,
	                                    fixture_teardown),
	    cmocka_unit_test_setup_teardown(test_alerts_order_per_hook, fixture_setup,
	                                    fixture_teardown),
	    cmocka_unit_test_setup_teardown(test_alerts_answers, fixture_setup, fixture_teardown),
	    cmocka_unit_test_setup_teardown(test_alerts_secret_rotation, fixture_setup,
	                                    fixture_teardown),
	    cmocka_unit_test_setup_teardown(test_alerts_leases_cover_the_pass, fixture_setup,
	                                    fixture_teardown),
	    cmocka_unit_test_setup_teardown(test_alerts_hanging_hook_delays_no_other, fixture_setup,
	                                    fixture_teardown),
	    cmocka_unit_test_setup_teardown(test_alerts_more_events, fixture_setup,
	                                    fixture_teardown),
	    cmocka_unit_test_setup_teardown(test_alerts_schedule_missed, fixture_setup,
	                                    fixture_teardown),
	    cmocka_unit_test_setup_teardown(test_alerts_pipeline_routes_validated, fixture_setup,
	                                    fixture_teardown),
	    cmocka_unit_test_setup_teardown(test_alerts_pipeline_routes, fixture_setup,
	                                    fixture_teardown),
	    cmocka_unit_test_setup_teardown(test_alerts_worker_stop_takes_late_rows, fixture_setup,
	                                    fixture_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

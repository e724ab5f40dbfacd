/* cmd_hooks.c — `tpuflow hooks add|list|rm|test|events` (where alerts go) and `tpuflow alerts
 * list|show|redeliver|deliver` (the outbox). docs/alerts.md. */
#include "cli/cli.h"
#include "common/common.h"
#include "orchestrator/alerts.h"
#include "orchestrator/store.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The home's alerts.conf; a problem with it is a warning (the defaults stand). */
static void load_config(const struct tf_cli *cli, const char *cmd, struct tf_alerts_config *cfg)
{
	char err[512];
	if (tf_alerts_config_load(cli->home, cfg, err, sizeof(err)))
		fprintf(stderr, "tpuflow %s: warning: %s\n", cmd, err);
}

/* ---- hooks ---- */

static void hooks_usage(FILE *f)
{
	fprintf(
	    f,
	    "usage: tpuflow hooks add NAME --url URL [--format standard|slack|alertmanager]\n"
	    "                         [--secret-env VAR | --secret-file PATH] [--on EVENT,...]\n"
	    "       tpuflow hooks list | rm NAME | test NAME | events   [--home DIR] [--json]\n\n"
	    "add     defines (or replaces) a hook: where alerts are posted and in which format.\n"
	    "        standard  Standard Webhooks, signed with the whsec_ secret in $VAR or PATH\n"
	    "        slack     a Slack incoming-webhook message\n"
	    "        alertmanager  Prometheus Alertmanager's POST /api/v2/alerts\n"
	    "        The secret is read when an alert is sent, by the process that sends it (the\n"
	    "        daemon, or tpuflow run): it is never stored. --on routes events of every\n"
	    "        run and of the daemon to the hook; pipelines route more in `alerts:`.\n"
	    "        The URL's host must be loopback or in allow_hosts of HOME/alerts.conf.\n"
	    "list    the hooks\n"
	    "rm      removes a hook (alerts still queued for it are dead-lettered)\n"
	    "test    sends a test alert to the hook now and says what it answered\n"
	    "events  the events that can alert\n");
}

int cmd_hooks(int argc, char **argv, struct tf_cli *cli)
{
	enum { OPT_URL = 1, OPT_FORMAT, OPT_SENV, OPT_SFILE, OPT_ON };
	static const struct option opts[] = {TF_CLI_COMMON_OPTIONS,
	                                     {"url", required_argument, NULL, OPT_URL},
	                                     {"format", required_argument, NULL, OPT_FORMAT},
	                                     {"secret-env", required_argument, NULL, OPT_SENV},
	                                     {"secret-file", required_argument, NULL, OPT_SFILE},
	                                     {"on", required_argument, NULL, OPT_ON},
	                                     {NULL, 0, NULL, 0}};
	struct tf_hook h = {0};
	int c;
	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		if (tf_cli_common_option(cli, c, optarg))
			continue;
		switch (c) {
		case OPT_URL:
			h.url = optarg;
			break;
		case OPT_FORMAT:
			h.format = optarg;
			break;
		case OPT_SENV:
			h.secret_env = optarg;
			break;
		case OPT_SFILE:
			h.secret_file = optarg;
			break;
		case OPT_ON:
			h.events = optarg;
			break;
		case 'h':
			hooks_usage(stdout);
			return TF_EXIT_OK;
		default:
			return tf_cli_usage_error("hooks", "unknown option");
		}
	}
	const char *sub = optind < argc ? argv[optind] : "list";
	int nargs = argc - optind - (optind < argc);
	const char *name = nargs > 0 ? argv[optind + 1] : NULL;
	int wants_name = !strcmp(sub, "add") || !strcmp(sub, "rm") || !strcmp(sub, "test");
	if (!wants_name && strcmp(sub, "list") && strcmp(sub, "events"))
		return tf_cli_usage_error(
		    "hooks", "unknown subcommand '%s': use add, list, rm, test or events", sub);
	if (nargs != wants_name)
		return tf_cli_usage_error("hooks", "%s %s", sub,
		                          wants_name ? "wants a hook name" : "takes no argument");
	if (strcmp(sub, "add") && (h.url || h.format || h.secret_env || h.secret_file || h.events))
		return tf_cli_usage_error("hooks",
		                          "--url, --format, --secret-* and --on are for add");
	if (!strcmp(sub, "events")) {
		size_t n;
		const struct tf_alert_event *ev = tf_alert_events(&n);
		json_t *arr = json_array();
		for (size_t i = 0; i < n; i++) {
			if (cli->json)
				json_array_append_new(
				    arr, json_pack("{s:s, s:s, s:s}", "name", ev[i].name, "summary",
				                   ev[i].summary, "severity", ev[i].severity));
			else
				printf("%-24s %-9s %s\n", ev[i].name, ev[i].severity,
				       ev[i].summary);
		}
		if (cli->json)
			tf_cli_print_json(stdout, arr);
		json_decref(arr);
		return TF_EXIT_OK;
	}
	int ret = TF_EXIT_OK;
	struct tf_alerts_config cfg;
	struct tf_store *st = cli->db;
	load_config(cli, "hooks", &cfg);
	char err[512] = "";
	if (!strcmp(sub, "add")) {
		h.name = name;
		int rc = tf_hooks_add(st, &cfg, &h, err, sizeof(err));
		if (rc) {
			fprintf(stderr, "tpuflow hooks: %s\n", err);
			ret = rc == -EINVAL ? TF_EXIT_USAGE : TF_EXIT_UNAVAILABLE;
		} else if (cli->json) {
			json_t *doc = json_pack("{s:s}", "added", name);
			tf_cli_print_json(stdout, doc);
			json_decref(doc);
		} else {
			printf("hook '%s' posts %s alerts to %s\n", name,
			       h.format ? h.format : "standard", h.url);
			const char *env = h.secret_env;
			if (env && !getenv(env))
				printf(
				    "note: $%s is not set here; the process that sends alerts (the "
				    "daemon, tpuflow run) needs it in its environment\n",
				    env);
		}
	} else if (!strcmp(sub, "rm")) {
		ret = tf_cli_named_outcome(cli, "hooks", st, tf_hooks_remove(st, name), "hook",
		                           name, "removed", "removed");
	} else if (!strcmp(sub, "test")) {
		int64_t id = 0;
		int rc = tf_alerts_queue_test(st, name, &id);
		if (rc == -ENOENT) {
			fprintf(stderr, "tpuflow hooks: no hook '%s'\n", name);
			ret = TF_EXIT_NOTFOUND;
		} else if (rc) {
			fprintf(stderr, "tpuflow hooks: %s\n", tf_store_errmsg(st));
			ret = TF_EXIT_UNAVAILABLE;
		} else {
			rc = tf_alerts_deliver_one(st, &cfg, id, err, sizeof(err));
			json_t *a = NULL;
			char idtext[32];
			snprintf(idtext, sizeof(idtext), "%lld", (long long)id);
			tf_alerts_show(st, idtext, &a);
			if (cli->json)
				tf_cli_print_json(stdout, a);
			else if (rc == 0)
				printf("hook '%s' accepted test alert %s (HTTP %lld)\n", name,
				       json_string_value(json_object_get(a, "msg_id")),
				       (long long)json_integer_value(
				           json_object_get(a, "last_status")));
			if (rc) {
				fprintf(stderr,
				        "tpuflow hooks: test alert to '%s' not delivered: %s\n",
				        name, err[0] ? err : tf_store_errmsg(st));
				ret = TF_EXIT_UNAVAILABLE;
			}
			json_decref(a);
		}
	} else {
		json_t *list = NULL;
		if (tf_hooks_list(st, &list)) {
			fprintf(stderr, "tpuflow hooks: %s\n", tf_store_errmsg(st));
			ret = TF_EXIT_UNAVAILABLE;
		} else if (cli->json) {
			tf_cli_print_json(stdout, list);
		} else {
			size_t k;
			json_t *p;
			printf("%-16s %-13s %-22s %-40s %s\n", "NAME", "FORMAT", "SECRET", "URL",
			       "ON");
			json_array_foreach(list, k, p)
			{
				const char *env =
				    json_string_value(json_object_get(p, "secret_env"));
				const char *file =
				    json_string_value(json_object_get(p, "secret_file"));
				char secret[300];
				snprintf(secret, sizeof(secret), "%s%s", env ? "$" : "",
				         env    ? env
				         : file ? file
				                : "-");
				const char *off = json_string_value(json_object_get(p, "disabled"));
				printf("%-16s %-13s %-22s %-40s %s%s%s\n",
				       json_string_value(json_object_get(p, "name")),
				       json_string_value(json_object_get(p, "format")), secret,
				       json_string_value(json_object_get(p, "url")),
				       json_string_value(json_object_get(p, "on")),
				       off ? "  DISABLED: " : "", off ? off : "");
			}
		}
		json_decref(list);
	}
	tf_alerts_config_release(&cfg);
	return ret;
}

/* ---- alerts ---- */

static void alerts_usage(FILE *f)
{
	fprintf(f,
	        "usage: tpuflow alerts list [--dead] [--limit N]\n"
	        "       tpuflow alerts show ID\n"
	        "       tpuflow alerts redeliver ID | --dead   (also: retry)\n"
	        "       tpuflow alerts deliver\n"
	        "  (common: --home DIR, --json; ID is the row number or the msg_... id)\n\n"
	        "list       the outbox, newest first: pending, delivered and dead alerts\n"
	        "show       one alert with its payload, attempts and last error\n"
	        "redeliver  queues a dead (or delivered) alert again, with the same id; --dead\n"
	        "           queues every dead one\n"
	        "deliver    sends the alerts due now once (what the daemon does continuously)\n");
}

static void print_alerts(json_t *list)
{
	size_t k;
	json_t *a;
	printf("%-6s %-36s %-20s %-12s %-9s %-4s %s\n", "ID", "MSG_ID", "EVENT", "HOOK", "STATE",
	       "TRY", "RUN / LAST ERROR");
	json_array_foreach(list, k, a)
	{
		const char *run = json_string_value(json_object_get(a, "run"));
		const char *e = json_string_value(json_object_get(a, "last_error"));
		printf("%-6lld %-36s %-20s %-12s %-9s %-4lld %s%s%s\n",
		       (long long)json_integer_value(json_object_get(a, "id")),
		       json_string_value(json_object_get(a, "msg_id")),
		       json_string_value(json_object_get(a, "event")),
		       json_string_value(json_object_get(a, "hook")),
		       json_string_value(json_object_get(a, "state")),
		       (long long)json_integer_value(json_object_get(a, "attempts")),
		       run ? run : "-", e ? " / " : "", e ? e : "");
	}
}

int cmd_alerts(int argc, char **argv, struct tf_cli *cli)
{
	enum { OPT_DEAD = 1, OPT_LIMIT };
	static const struct option opts[] = {TF_CLI_COMMON_OPTIONS,
	                                     {"dead", no_argument, NULL, OPT_DEAD},
	                                     {"limit", required_argument, NULL, OPT_LIMIT},
	                                     {NULL, 0, NULL, 0}};
	int c, dead = 0;
	long long limit = 100;
	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		if (tf_cli_common_option(cli, c, optarg))
			continue;
		if (c == OPT_DEAD) {
			dead = 1;
		} else if (c == OPT_LIMIT) {
			int r = tf_cli_parse_int("alerts", "--limit", optarg, 1, 100000, &limit);
			if (r)
				return r;
		} else if (c == 'h') {
			alerts_usage(stdout);
			return TF_EXIT_OK;
		} else {
			return tf_cli_usage_error("alerts", "unknown option");
		}
	}
	const char *sub = optind < argc ? argv[optind] : "list";
	int nargs = argc - optind - (optind < argc);
	const char *id = nargs > 0 ? argv[optind + 1] : NULL;
	if (!strcmp(sub, "retry"))
		sub = "redeliver";
	int ok = (!strcmp(sub, "list") && nargs == 0) || (!strcmp(sub, "show") && nargs == 1) ||
	         (!strcmp(sub, "redeliver") && nargs == (dead ? 0 : 1)) ||
	         (!strcmp(sub, "deliver") && nargs == 0);
	if (!ok)
		return tf_cli_usage_error("alerts",
		                          "use list [--dead], show ID, redeliver ID|--dead "
		                          "or deliver");
	int ret = TF_EXIT_OK;
	struct tf_alerts_config cfg;
	struct tf_store *st = cli->db;
	load_config(cli, "alerts", &cfg);
	json_t *doc = NULL;
	int rc = 0;
	if (!strcmp(sub, "list")) {
		rc = tf_alerts_list(st, dead, (int)limit, &doc);
		if (rc == 0 && !cli->json)
			print_alerts(doc);
	} else if (!strcmp(sub, "show")) {
		rc = tf_alerts_show(st, id, &doc);
		if (rc == -ENOENT)
			fprintf(stderr, "tpuflow alerts: no alert '%s'\n", id);
		else if (rc == 0 && !cli->json) {
			char *s = json_dumps(doc, JSON_INDENT(2));
			printf("%s\n", s);
			free(s);
		}
	} else if (!strcmp(sub, "redeliver")) {
		int64_t n = 0;
		rc = tf_alerts_redeliver(st, id, &n);
		if (rc == -ENOENT)
			fprintf(stderr, "tpuflow alerts: no alert '%s'\n", id);
		else if (rc == -EALREADY)
			fprintf(stderr, "tpuflow alerts: alert '%s' is pending already\n", id);
		else if (rc == 0 && !cli->json)
			printf("queued %lld alert(s) again\n", (long long)n);
		doc = json_pack("{s:I}", "queued", (json_int_t)n);
	} else {
		int sent = 0, failed = 0;
		rc = tf_alerts_deliver_due(st, &cfg, 0, &sent, &failed, NULL);
		if (rc == 0 && !cli->json)
			printf("delivered %d, failed %d\n", sent, failed);
		doc = json_pack("{s:i, s:i}", "delivered", sent, "failed", failed);
		if (rc == 0 && failed)
			ret = TF_EXIT_UNAVAILABLE;
	}
	if (rc == 0 && cli->json)
		tf_cli_print_json(stdout, doc);
	if (rc && rc != -ENOENT && rc != -EALREADY)
		fprintf(stderr, "tpuflow alerts: %s\n", tf_store_errmsg(st));
	if (rc)
		ret = rc == -ENOENT     ? TF_EXIT_NOTFOUND
		      : rc == -EALREADY ? TF_EXIT_USAGE
		                        : TF_EXIT_UNAVAILABLE;
	json_decref(doc);
	tf_alerts_config_release(&cfg);
	return ret;
}

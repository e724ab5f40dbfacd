/* cmd_schedules.c — `tpuflow pipelines add|list|rm` (registered pipelines: the text a schedule
 * fires) and `tpuflow schedules list|fire` (next fire times; handle the ticks due now). */
#include "cli/cli.h"
#include "common/common.h"
#include "orchestrator/schedules.h"
#include "orchestrator/store.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Parses the common options; returns the index of the first operand, or -1 (usage printed
 * or an error: *exit_code says which). */
static int parse_opts(int argc, char **argv, struct tf_cli *cli, const char *cmd,
                      void (*usage)(FILE *), int *exit_code)
{
	static const struct option opts[] = {TF_CLI_COMMON_OPTIONS, {NULL, 0, NULL, 0}};
	int c;
	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		if (tf_cli_common_option(cli, c, optarg))
			continue;
		if (c == 'h') {
			usage(stdout);
			*exit_code = TF_EXIT_OK;
		} else {
			*exit_code = tf_cli_usage_error(cmd, "unknown option");
		}
		return -1;
	}
	return optind;
}

static void fmt_time(int64_t t, char *buf, size_t len)
{
	time_t tt = (time_t)t;
	struct tm tm;
	gmtime_r(&tt, &tm);
	strftime(buf, len, "%Y-%m-%d %H:%M UTC", &tm);
}

/* ---- pipelines ---- */

static void pipelines_usage(FILE *f)
{
	fprintf(f, "usage: tpuflow pipelines add FILE | list | rm NAME   [--home DIR] [--json]\n\n"
	           "add   registers the pipeline in FILE: its text and digest are stored, so its\n"
	           "      `schedule` fires that text, not what the file holds later (adding\n"
	           "      again replaces it); every param needs a default\n"
	           "list  the registered pipelines with their schedules\n"
	           "rm    unregisters one (runs and past fires are kept)\n");
}

int cmd_pipelines(int argc, char **argv, struct tf_cli *cli)
{
	int ret = TF_EXIT_OK;
	int i = parse_opts(argc, argv, cli, "pipelines", pipelines_usage, &ret);
	if (i < 0)
		return ret;
	const char *sub = i < argc ? argv[i] : "list";
	int nargs = argc - i - (i < argc);
	if (strcmp(sub, "add") && strcmp(sub, "list") && strcmp(sub, "rm"))
		return tf_cli_usage_error("pipelines",
		                          "unknown subcommand '%s': use add, list or rm", sub);
	if (strcmp(sub, "list") ? nargs != 1 : nargs != 0)
		return tf_cli_usage_error("pipelines", "%s %s", sub,
		                          strcmp(sub, "list") ? "wants one argument"
		                                              : "takes none");
	struct tf_store *st = cli->db;
	const char *arg = argv[i + 1];
	if (!strcmp(sub, "add")) {
		struct tf_diag_list d = {0};
		char *name = NULL;
		int rc = tf_pipelines_add(st, arg, tf_now_wall(), &name, &d);
		if (rc) {
			tf_diag_print(&d, stderr);
			if (rc != -EINVAL)
				fprintf(stderr, "tpuflow pipelines: %s\n", tf_store_errmsg(st));
			ret = rc == -EINVAL ? TF_EXIT_DATAERR : TF_EXIT_UNAVAILABLE;
		} else if (cli->json) {
			json_t *doc = json_pack("{s:s}", "added", name);
			tf_cli_print_json(stdout, doc);
			json_decref(doc);
		} else {
			printf("registered pipeline '%s' from %s\n", name, arg);
		}
		free(name);
		tf_diag_list_release(&d);
	} else if (!strcmp(sub, "rm")) {
		ret = tf_cli_named_outcome(cli, "pipelines", st, tf_pipelines_remove(st, arg),
		                           "registered pipeline", arg, "unregistered", "removed");
	} else {
		json_t *list = NULL;
		if (tf_pipelines_list(st, tf_now_wall(), 1, &list)) {
			fprintf(stderr, "tpuflow pipelines: %s\n", tf_store_errmsg(st));
			ret = TF_EXIT_UNAVAILABLE;
		} else if (cli->json) {
			tf_cli_print_json(stdout, list);
		} else {
			size_t k;
			json_t *p;
			printf("%-24s %-26s %-18s %s\n", "NAME", "SCHEDULE", "DIGEST", "FILE");
			json_array_foreach(list, k, p)
			{
				json_t *sc = json_object_get(p, "schedule");
				char when[64];
				snprintf(when, sizeof(when), "%s%s%s",
				         json_is_object(sc)
				             ? json_string_value(json_object_get(sc, "cron"))
				             : "-",
				         json_is_object(sc) ? " " : "",
				         json_is_object(sc)
				             ? json_string_value(json_object_get(sc, "timezone"))
				             : "");
				printf("%-24s %-26s %-18.16s %s\n",
				       json_string_value(json_object_get(p, "name")), when,
				       json_string_value(json_object_get(p, "digest")),
				       json_string_value(json_object_get(p, "path")));
			}
		}
		json_decref(list);
	}
	return ret;
}

/* ---- schedules ---- */

static void schedules_usage(FILE *f)
{
	fprintf(f, "usage: tpuflow schedules list [--home DIR] [--json]\n"
	           "       tpuflow schedules fire [--home DIR] [--json]\n"
	           "       tpuflow schedules pause|resume PIPELINE [--home DIR] [--json]\n\n"
	           "list  the schedules of registered pipelines and their next fire times\n"
	           "pause   stops a pipeline's schedule: no tick is handled while it is paused\n"
	           "        (none fires, none is recorded missed); it stays paused when the\n"
	           "        pipeline is added again\n"
	           "resume  continues from the first tick after now; the ticks of the pause are\n"
	           "        passed over, not caught up (it says how many)\n"
	           "fire  handles the ticks due now (what the daemon does periodically): creates\n"
	           "      their runs by the catch-up and concurrency policies, once per tick, and\n"
	           "      prints them; a created run is pending until the daemon starts it or\n"
	           "      'tpuflow runs resume RUN' drives it\n");
}

static int pause_resume(struct tf_cli *cli, const char *name, int pause)
{
	int ret = TF_EXIT_OK, passed = 0;
	struct tf_store *st = cli->db;
	int rc = tf_schedules_pause(st, name, pause, tf_now_wall(), &passed);
	if (rc == -ENOENT || rc == -EINVAL) {
		fprintf(stderr, "tpuflow schedules: no registered pipeline '%s' with a schedule "
		                "(see 'tpuflow schedules list')\n", name);
		ret = TF_EXIT_NOTFOUND;
	} else if (rc) {
		fprintf(stderr, "tpuflow schedules: %s\n", tf_store_errmsg(st));
		ret = TF_EXIT_UNAVAILABLE;
	} else if (cli->json) {
		json_t *j = json_pack("{s:s, s:b}", "pipeline", name, "paused", pause);
		if (!pause)
			json_object_set_new(j, "passed_over", json_integer(passed));
		tf_cli_print_json(stdout, j);
		json_decref(j);
	} else if (pause) {
		printf("schedule of '%s' paused: no tick is handled until 'tpuflow schedules resume "
		       "%s'\n", name, name);
	} else {
		printf("schedule of '%s' resumed from the next tick; %d tick%s of the pause passed "
		       "over\n", name, passed, passed == 1 ? "" : "s");
	}
	return ret;
}

int cmd_schedules(int argc, char **argv, struct tf_cli *cli)
{
	int ret = TF_EXIT_OK;
	int i = parse_opts(argc, argv, cli, "schedules", schedules_usage, &ret);
	if (i < 0)
		return ret;
	const char *sub = i < argc ? argv[i] : "list";
	int pause = !strcmp(sub, "pause");
	if (pause || !strcmp(sub, "resume")) {
		if (argc - i != 2)
			return tf_cli_usage_error("schedules", "use 'schedules %s PIPELINE'", sub);
		return pause_resume(cli, argv[i + 1], pause);
	}
	if ((strcmp(sub, "list") && strcmp(sub, "fire")) || argc - i > 1)
		return tf_cli_usage_error("schedules", "use 'schedules list|fire|pause|resume'");
	struct tf_store *st = cli->db;
	json_t *doc = NULL;
	int rc = !strcmp(sub, "list") ? tf_pipelines_list(st, tf_now_wall(), 3, &doc)
	                              : tf_schedules_fire_due(st, tf_now_wall(), NULL, &doc);
	if (rc) {
		fprintf(stderr, "tpuflow schedules: %s\n", tf_store_errmsg(st));
		ret = TF_EXIT_UNAVAILABLE;
	} else if (cli->json) {
		tf_cli_print_json(stdout, doc);
	} else if (!strcmp(sub, "list")) {
		size_t k;
		json_t *p;
		printf("%-24s %-22s %-16s %-8s %-7s %s\n", "PIPELINE", "CRON", "TIMEZONE", "CONCUR",
		       "CATCHUP", "NEXT");
		json_array_foreach(doc, k, p)
		{
			json_t *sc = json_object_get(p, "schedule");
			if (!json_is_object(sc))
				continue;
			char next[40] = "never";
			json_t *n0 = json_array_get(json_object_get(sc, "next"), 0);
			if (json_is_true(json_object_get(sc, "paused")))
				snprintf(next, sizeof(next), "paused");
			else if (n0)
				fmt_time(json_integer_value(n0), next, sizeof(next));
			printf("%-24s %-22s %-16s %-8s %-7s %s\n",
			       json_string_value(json_object_get(p, "name")),
			       json_string_value(json_object_get(sc, "cron")),
			       json_string_value(json_object_get(sc, "timezone")),
			       json_string_value(json_object_get(sc, "concurrency")),
			       json_string_value(json_object_get(sc, "catchup")), next);
		}
	} else {
		size_t k;
		json_t *f;
		json_array_foreach(doc, k, f)
		{
			char when[40];
			fmt_time(json_integer_value(json_object_get(f, "tick")), when,
			         sizeof(when));
			const char *run = json_string_value(json_object_get(f, "run"));
			const char *why = json_string_value(json_object_get(f, "reason"));
			printf("%s %s %s%s%s%s%s\n",
			       json_string_value(json_object_get(f, "pipeline")), when,
			       json_string_value(json_object_get(f, "outcome")), run ? " run " : "",
			       run ? run : "", why ? ": " : "", why ? why : "");
		}
		if (json_array_size(doc) == 0)
			printf("no tick is due\n");
	}
	json_decref(doc);
	return ret;
}

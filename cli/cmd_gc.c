/* cmd_gc.c — `tpuflow runs delete RUN...` and `tpuflow gc`: removing runs with their rows,
 * logs, checkpoints and outputs, one by one or by a retention policy (orchestrator/retention.h
 * decides what goes and what stays). */
#include "cli/cli.h"
#include "common/common.h"
#include "orchestrator/pipeline.h"
#include "orchestrator/retention.h"
#include "orchestrator/state.h"
#include "orchestrator/store.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void human_bytes(uint64_t b, char *out, size_t n)
{
	const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
	double v = (double)b;
	int i = 0;
	while (v >= 1024 && i < 4)
		v /= 1024, i++;
	snprintf(out, n, i ? "%.1f %s" : "%.0f %s", v, u[i]);
}

/* The exit code for one run's delete report: by its reason (retention.h). */
static int report_exit(const json_t *rep)
{
	const char *reason = json_string_value(json_object_get(rep, "reason"));
	if (!reason && !json_string_value(json_object_get(rep, "error")))
		return TF_EXIT_OK;
	return !reason                          ? TF_EXIT_SOFTWARE
	       : !strcmp(reason, "not_found")   ? TF_EXIT_NOTFOUND
	       : !strcmp(reason, "busy")        ? TF_EXIT_TEMPFAIL
	       : !strcmp(reason, "unavailable") ? TF_EXIT_UNAVAILABLE
	                                        : TF_EXIT_SOFTWARE;
}

int tf_cli_delete_print(int json, json_t *rep, json_t *arr)
{
	int ret = report_exit(rep);
	if (json) {
		json_array_append(arr, rep);
	} else if (ret) {
		const char *err = json_string_value(json_object_get(rep, "error"));
		fprintf(stderr, "tpuflow: %s\n",
		        err ? err : json_string_value(json_object_get(rep, "reason")));
	} else {
		int deleted = json_is_true(json_object_get(rep, "deleted"));
		char size[32];
		human_bytes((uint64_t)json_integer_value(json_object_get(rep, "bytes")), size,
		            sizeof(size));
		printf("%s run %s: %lld object(s), %s%s\n", deleted ? "deleted" : "would delete",
		       json_string_value(json_object_get(rep, "run")),
		       (long long)json_integer_value(json_object_get(rep, "objects")), size,
		       deleted ? ", its rows and scratch directory" : "");
		if (json_integer_value(json_object_get(rep, "kept"))) {
			printf("  kept %lld object(s) still used by:",
			       (long long)json_integer_value(json_object_get(rep, "kept")));
			size_t i;
			json_t *v;
			json_array_foreach(json_object_get(rep, "kept_for"), i, v)
			    printf("%s %s", i ? "," : "", json_string_value(v));
			printf("\n");
		}
	}
	return ret;
}

int tf_cli_gc_print(int json, json_t *doc)
{
	json_t *runs = json_object_get(doc, "runs"), *rep;
	int ret = TF_EXIT_OK;
	size_t i;
	if (json)
		tf_cli_print_json(stdout, doc);
	else if (json_array_size(runs) == 0)
		printf("nothing to remove: no finished run is beyond the policy\n");
	json_array_foreach(runs, i, rep)
	{
		int e = json ? report_exit(rep) : tf_cli_delete_print(0, rep, NULL);
		if (e && !ret)
			ret = e;
	}
	if (!json && !json_is_true(json_object_get(doc, "applied")) && json_array_size(runs))
		printf("(dry run: nothing was removed; add --apply to remove these %zu run(s))\n",
		       json_array_size(runs));
	return ret;
}

/* Deletes (or with dry_run describes) one run; its report (the caller owns it). */
static json_t *delete_one(struct tf_store *st, const char *home, const char *run, int dry_run)
{
	struct tf_run_delete_report r;
	char err[1024] = "";
	int rc = tf_run_delete(st, home, run, dry_run, &r, err, sizeof(err));
	json_t *rep = tf_run_delete_report_json(run, rc, dry_run, err, &r);
	tf_run_delete_report_release(&r);
	return rep;
}

int tf_cli_runs_delete(struct tf_store *st, const struct tf_cli *cli, const char *home, char **runs,
                       int nruns, int dry_run)
{
	json_t *arr = json_array();
	int ret = TF_EXIT_OK;
	for (int i = 0; i < nruns; i++) {
		char id[32];
		int rc = tf_run_find(st, runs[i], id), e;
		if (rc) {
			e = tf_cli_run_unresolved("runs delete", runs[i], rc);
		} else {
			json_t *rep = delete_one(st, home, id, dry_run);
			e = tf_cli_delete_print(cli->json, rep, arr);
			json_decref(rep);
		}
		if (e && !ret)
			ret = e;
	}
	if (cli->json)
		tf_cli_print_json(stdout, arr);
	json_decref(arr);
	return ret;
}

static void gc_usage(FILE *f)
{
	fprintf(
	    f,
	    "usage: tpuflow gc [--keep-last N] [--older-than AGE] [--pipeline NAME]\n"
	    "                  [--dry-run | --apply] [--home DIR] [--json]\n\n"
	    "Removes runs by a retention policy, like 'tpuflow runs delete' each: its rows,\n"
	    "logs, checkpoints and outputs; objects a registered model version or a later\n"
	    "run still uses are kept. Only finished runs (succeeded, failed, interrupted) go.\n\n"
	    "  --keep-last N     keep the newest N runs of each pipeline (running ones count)\n"
	    "  --older-than AGE  remove only runs created longer ago than AGE (30d, 12h)\n"
	    "  --pipeline NAME   only this pipeline's runs\n"
	    "  --dry-run         print what would be removed (the default)\n"
	    "  --apply           remove it\n\n"
	    "With both limits a run goes when it is beyond both. exit: 0 done, 64 usage,\n"
	    "69 an object store could not be reached (those runs stay), 75 a run was busy.\n"
	    "With --remote URL (or $TPUFLOW_URL) a daemon does it (an admin token in\n"
	    "$TPUFLOW_TOKEN; without that scope: exit 78).\n");
}

int tf_cli_gc_options(int argc, char **argv, struct tf_cli *cli, struct tf_gc_policy *pol,
                      const char **older_than, int *apply)
{
	enum { OPT_KEEP = 1, OPT_OLDER, OPT_PIPELINE, OPT_DRY, OPT_APPLY };
	static const struct option opts[] = {TF_CLI_COMMON_OPTIONS,
	                                     {"keep-last", required_argument, NULL, OPT_KEEP},
	                                     {"older-than", required_argument, NULL, OPT_OLDER},
	                                     {"pipeline", required_argument, NULL, OPT_PIPELINE},
	                                     {"dry-run", no_argument, NULL, OPT_DRY},
	                                     {"apply", no_argument, NULL, OPT_APPLY},
	                                     {0, 0, 0, 0}};
	*pol = (struct tf_gc_policy){.keep_last = -1};
	*older_than = NULL;
	*apply = 0;
	int c, dry = 0;
	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		long long n;
		switch (c) {
		case 'h':
			gc_usage(stdout);
			return TF_EXIT_OK;
		case OPT_KEEP:
			if (tf_cli_parse_int("gc", "--keep-last", optarg, 0, INT_MAX, &n))
				return TF_EXIT_USAGE;
			pol->keep_last = (int)n;
			break;
		case OPT_OLDER:
			if (tf_duration_parse(optarg, &pol->older_than) || pol->older_than <= 0)
				return tf_cli_usage_error("gc",
				                          "--older-than wants an age such as 30d, "
				                          "12h or 90m, not '%s'",
				                          optarg);
			*older_than = optarg;
			break;
		case OPT_PIPELINE:
			pol->pipeline = optarg;
			break;
		case OPT_DRY:
			dry = 1;
			break;
		case OPT_APPLY:
			*apply = 1;
			break;
		default:
			if (!tf_cli_common_option(cli, c, optarg))
				return tf_cli_usage_error("gc", "unknown option");
		}
	}
	if (optind < argc)
		return tf_cli_usage_error("gc", "unexpected argument '%s'", argv[optind]);
	if (dry && *apply)
		return tf_cli_usage_error("gc", "--dry-run and --apply contradict each other");
	if (pol->keep_last < 0 && pol->older_than <= 0)
		return tf_cli_usage_error("gc",
		                          "give a policy: --keep-last N and/or --older-than AGE");
	return -1;
}

int cmd_gc(int argc, char **argv, struct tf_cli *cli)
{
	struct tf_gc_policy pol;
	const char *older_than;
	int apply, ret = tf_cli_gc_options(argc, argv, cli, &pol, &older_than, &apply);
	if (ret >= 0)
		return ret;
	struct tf_store *st = cli->db; /* NEED_DB (cli/main.c) */
	json_t *sel = NULL;
	if (tf_gc_select(st, &pol, &sel)) {
		fprintf(stderr, "tpuflow gc: %s\n", tf_store_errmsg(st));
		return TF_EXIT_SOFTWARE;
	}
	json_t *runs = json_array(), *r;
	size_t i;
	json_array_foreach(sel, i, r) json_array_append_new(
	    runs, delete_one(st, cli->home, json_string_value(json_object_get(r, "id")), !apply));
	json_t *doc = json_pack("{s:b, s:o}", "applied", apply, "runs", runs);
	ret = tf_cli_gc_print(cli->json, doc);
	json_decref(doc);
	json_decref(sel);
	return ret;
}

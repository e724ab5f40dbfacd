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

/* Deletes (or with dry_run describes) one run; one line for people, or an object appended to
 * `arr`. Returns an exit code. */
static int delete_one(struct tf_store *st, const struct tf_cli *cli, const char *home,
                      const char *run, int dry_run, json_t *arr)
{
	struct tf_run_delete_report r;
	char err[1024] = "";
	int rc = tf_run_delete(st, home, run, dry_run, &r, err, sizeof(err));
	char size[32];
	human_bytes(r.bytes, size, sizeof(size));
	if (cli->json) {
		json_array_append_new(arr, tf_run_delete_report_json(run, rc, dry_run, err, &r));
	} else if (rc) {
		fprintf(stderr, "tpuflow: %s\n", err);
	} else {
		printf("%s run %s: %zu object(s), %s%s\n", dry_run ? "would delete" : "deleted", run,
		       r.objects, size, dry_run ? "" : ", its rows and scratch directory");
		if (r.kept) {
			printf("  kept %zu object(s) still used by:", r.kept);
			size_t i;
			json_t *v;
			json_array_foreach(r.kept_by, i, v) printf("%s %s", i ? "," : "",
			                                           json_string_value(v));
			printf("\n");
		}
	}
	tf_run_delete_report_release(&r);
	return rc == 0          ? TF_EXIT_OK
	       : rc == -ENOENT  ? TF_EXIT_NOTFOUND
	       : rc == -EBUSY   ? TF_EXIT_TEMPFAIL
	       : rc == -EIO     ? TF_EXIT_UNAVAILABLE
	                        : TF_EXIT_SOFTWARE;
}

int tf_cli_runs_delete(struct tf_store *st, const struct tf_cli *cli, const char *home,
                       char **runs, int nruns, int dry_run)
{
	json_t *arr = json_array();
	int ret = TF_EXIT_OK;
	for (int i = 0; i < nruns; i++) {
		char id[32];
		int rc = tf_run_find(st, runs[i], id), e;
		if (rc) {
			fprintf(stderr,
			        rc == -EEXIST ? "tpuflow runs delete: run id prefix '%s' is ambiguous: "
			                        "give more characters\n"
			                      : "tpuflow runs delete: no run '%s' (see 'tpuflow runs "
			                        "list')\n",
			        runs[i]);
			e = rc == -EEXIST ? TF_EXIT_USAGE : TF_EXIT_NOTFOUND;
		} else {
			e = delete_one(st, cli, home, id, dry_run, arr);
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
	fprintf(f,
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
	        "69 an object store could not be reached (those runs stay), 75 a run was busy.\n");
}

int cmd_gc(int argc, char **argv, struct tf_cli *cli)
{
	enum { OPT_KEEP = 1, OPT_OLDER, OPT_PIPELINE, OPT_DRY, OPT_APPLY };
	static const struct option opts[] = {TF_CLI_COMMON_OPTIONS,
	                                     {"keep-last", required_argument, NULL, OPT_KEEP},
	                                     {"older-than", required_argument, NULL, OPT_OLDER},
	                                     {"pipeline", required_argument, NULL, OPT_PIPELINE},
	                                     {"dry-run", no_argument, NULL, OPT_DRY},
	                                     {"apply", no_argument, NULL, OPT_APPLY},
	                                     {0, 0, 0, 0}};
	struct tf_gc_policy pol = {.keep_last = -1};
	int c, dry = 0, apply = 0;
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
			pol.keep_last = (int)n;
			break;
		case OPT_OLDER:
			if (tf_duration_parse(optarg, &pol.older_than) || pol.older_than <= 0)
				return tf_cli_usage_error("gc", "--older-than wants an age such as 30d, "
				                                "12h or 90m, not '%s'",
				                          optarg);
			break;
		case OPT_PIPELINE:
			pol.pipeline = optarg;
			break;
		case OPT_DRY:
			dry = 1;
			break;
		case OPT_APPLY:
			apply = 1;
			break;
		default:
			if (!tf_cli_common_option(cli, c, optarg))
				return tf_cli_usage_error("gc", "unknown option");
		}
	}
	if (optind < argc)
		return tf_cli_usage_error("gc", "unexpected argument '%s'", argv[optind]);
	if (dry && apply)
		return tf_cli_usage_error("gc", "--dry-run and --apply contradict each other");
	if (pol.keep_last < 0 && pol.older_than <= 0)
		return tf_cli_usage_error("gc", "give a policy: --keep-last N and/or --older-than AGE");
	int ret = TF_EXIT_OK;
	struct tf_store *st = cli->db; /* NEED_DB (cli/main.c) */
	json_t *sel = NULL, *arr = json_array();
	if (tf_gc_select(st, &pol, &sel)) {
		fprintf(stderr, "tpuflow gc: %s\n", tf_store_errmsg(st));
		ret = TF_EXIT_SOFTWARE;
		goto out;
	}
	size_t i;
	json_t *r;
	if (!cli->json && json_array_size(sel) == 0)
		printf("nothing to remove: no finished run is beyond the policy\n");
	json_array_foreach(sel, i, r)
	{
		int e = delete_one(st, cli, cli->home, json_string_value(json_object_get(r, "id")),
		                   !apply, arr);
		if (e && !ret)
			ret = e;
	}
	if (cli->json) {
		json_t *doc = json_pack("{s:b, s:O}", "applied", apply, "runs", arr);
		tf_cli_print_json(stdout, doc);
		json_decref(doc);
	} else if (!apply && json_array_size(sel))
		printf("(dry run: nothing was removed; add --apply to remove these %zu run(s))\n",
		       json_array_size(sel));
out:
	json_decref(sel);
	json_decref(arr);
	return ret;
}

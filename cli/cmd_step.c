/* cmd_step.c — `tpuflow step exec`: runs one data_prep, train or evaluate step in this
 * process, the way the engine runs a step whose executor is `local` (it re-executes itself
 * with these arguments through executors/local.c). Internal plumbing, but usable by hand.
 *
 * Contract with the parent (orchestrator/kinds_ml.c):
 *  - `with` (references resolved) comes as a JSON object in a file;
 *  - progress events go to stdout, one JSON object per line, as they happen;
 *  - logs go to stderr;
 *  - the result file gets {"outputs": {...}, "metrics": {...}} on success, or
 *    {"error": MESSAGE, "class": "error" | "infra" | "cancelled"} on failure (written to a
 *    temporary name and renamed, so it is whole or absent);
 *  - the exit status classifies the outcome for executors/executor.h: 0 success, 1 the step
 *    failed (permanent), 69 retryable (storage trouble, or stopped by SIGTERM/SIGINT or the
 *    parent's death before finishing), 64 bad arguments, 70 the result could not be written.
 *  SIGTERM and SIGINT raise the step's cancel flag: training stops at its next step and the
 *  next attempt resumes from the newest checkpoint under the same prefix.
 *
 * On a Slurm compute node (executor: slurm, no filesystem shared with the coordinator) `with`
 * and the result travel through the object store instead (--with-key, --result-key), and
 * --chips-from-slurm checks that the job holds the TPU chips its slice needs, as Slurm
 * reports them (`scontrol show job -d $SLURM_JOB_ID`). */
#include "cli/cli.h"
#include "common/common.h"

#include "accel/tpu.h"
#include "executors/executor.h"
#include "ml/steps.h"
#include "orchestrator/pipeline.h"

#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

static const char step_usage[] =
    "usage: tpuflow step exec --kind KIND --with-json FILE --store URL --prefix PREFIX\n"
    "                         --result FILE [--accelerator SLICE] [--workdir DIR]\n"
    "                         [--parent-pid PID]\n"
    "       tpuflow step exec --kind KIND --with-key KEY --store URL --prefix PREFIX\n"
    "                         --result-key KEY [--accelerator SLICE] [--chips-from-slurm]\n"
    "       tpuflow step job --store URL --prefix KEY [--progress] [--results] -- PROGRAM ...\n"
    "                         (inside a Slurm job: 'tpuflow step job --help')\n"
    "Runs one data_prep, train or evaluate step in this process: what the run engine starts\n"
    "for a step with 'executor: local' (docs/runs.md). Internal plumbing, usable by hand.\n"
    "  --kind KIND         data_prep, train or evaluate\n"
    "  --with-json FILE    the step's 'with' as a JSON object (references resolved)\n"
    "  --store URL         the run's object store (file:///dir, s3://bucket/prefix)\n"
    "  --prefix PREFIX     the step's object-key prefix, e.g. runs/RUN/STEP/ (a train step\n"
    "                      resumes from the newest checkpoint under PREFIX/ckpt/)\n"
    "  --result FILE       where {\"outputs\":...,\"metrics\":...} or "
    "{\"error\":...,\"class\":...}\n"
    "                      is written\n"
    "  --accelerator SLICE the slice of a train step (default v4-8)\n"
    "  --workdir DIR       scratch directory\n"
    "  --parent-pid PID    stop (as if sent SIGTERM) when this process is no longer the parent\n"
    "  --with-key KEY      read 'with' from this object of the store instead of a file\n"
    "  --result-key KEY    write the result to this object of the store instead of a file\n"
    "  --chips-from-slurm  inside a Slurm job: check that the job holds the slice's TPU chips\n"
    "                      (the 'tpu' generic resource), as Slurm reports them\n"
    "  --help\n"
    "Progress events are printed to stdout as JSON lines. SIGTERM or SIGINT stops the step at\n"
    "its next check. Exit status: 0 done, 1 the step failed, 69 retryable failure or stopped,\n"
    "64 bad arguments, 70 the result file could not be written.\n";

/* Raised by SIGTERM/SIGINT (an int store is atomic on every target this builds for). */
static volatile int stop_flag;

static void on_stop(int sig)
{
	(void)sig;
	stop_flag = 1;
}

static void print_progress(void *data, const char *line)
{
	(void)data;
	fputs(line, stdout);
	fputc('\n', stdout);
	fflush(stdout);
}

/* Where the result goes: an object of the store (result_key) or a file. */
static struct tf_objstore *result_store;
static const char *result_key;

/* Writes `doc` to path via a temporary name, so readers see all of it or nothing (or to the
 * object result_key, which a store writes whole or not at all). */
static int write_result(const char *path, json_t *doc)
{
	if (result_key) {
		char *text = json_dumps(doc, JSON_COMPACT);
		int rc = text ? tf_objstore_put(result_store, result_key, text, strlen(text), 0)
		              : -ENOMEM;
		if (rc)
			fprintf(stderr, "tpuflow step exec: cannot write result '%s': %s\n",
			        result_key, tf_objstore_errmsg(result_store));
		free(text);
		return rc;
	}
	char *tmp = tf_xasprintf("%s.tmp", path);
	int rc = json_dump_file(doc, tmp, JSON_COMPACT) ? -EIO : 0;
	if (rc == 0 && rename(tmp, path) < 0)
		rc = -errno;
	if (rc) {
		fprintf(stderr, "tpuflow step exec: cannot write result '%s': %s\n", path,
		        strerror(-rc));
		unlink(tmp);
	}
	free(tmp);
	return rc;
}

/* Inside a Slurm job: the TPU chips Slurm gave the job must cover the slice. 0, -EIO when
 * Slurm cannot be asked, -ERANGE when there are too few chips (msg says so). */
static int check_slurm_chips(const char *acc, char *msg, size_t msglen)
{
	const char *id = getenv("SLURM_JOB_ID");
	long job = id ? strtol(id, NULL, 10) : 0;
	if (job <= 0) {
		snprintf(msg, msglen, "--chips-from-slurm outside a Slurm job (no SLURM_JOB_ID)");
		return -EINVAL;
	}
	int per_node = 0, nodes = 1;
	char err[300];
	if (tf_slurm_job_tpus(job, &per_node, &nodes, err, sizeof(err))) {
		snprintf(msg, msglen, "%s", err);
		return -EIO;
	}
	const char *host = getenv("SLURMD_NODENAME");
	fprintf(stderr,
	        "tpuflow step exec: Slurm job %ld on %s: %d TPU chip(s) on each of %d node(s)\n",
	        job, host ? host : "?", per_node, nodes);
	if (!acc)
		return 0;
	struct tf_tpu_slice sl;
	if (tf_tpu_slice_parse(acc, &sl, err, sizeof(err))) {
		snprintf(msg, msglen, "%s", err);
		return -EINVAL;
	}
	if (per_node * nodes < sl.chips) {
		snprintf(
		    msg, msglen,
		    "Slurm job %ld holds %d TPU chip(s) (%d per node on %d node(s)) but slice %s "
		    "needs %d: check the 'tpu' GRES of the partition's nodes",
		    job, per_node * nodes, per_node, nodes, sl.name, sl.chips);
		return -ERANGE;
	}
	return 0;
}

static int fail(const char *result, const char *cls, const char *msg, int code)
{
	fprintf(stderr, "tpuflow step exec: %s\n", msg);
	json_t *doc = json_pack("{s:s, s:s}", "error", msg, "class", cls);
	int rc = write_result(result, doc);
	json_decref(doc);
	return rc ? TF_EXIT_SOFTWARE : code;
}

int cmd_step(int argc, char **argv, struct tf_cli *cli)
{
	enum {
		O_KIND = 1,
		O_WITH,
		O_STORE,
		O_PREFIX,
		O_RESULT,
		O_ACC,
		O_WORKDIR,
		O_PARENT,
		O_WITH_KEY,
		O_RESULT_KEY,
		O_SLURM
	};
	static const struct option opts[] = {
	    TF_CLI_COMMON_OPTIONS,
	    {"kind", required_argument, NULL, O_KIND},
	    {"with-json", required_argument, NULL, O_WITH},
	    {"store", required_argument, NULL, O_STORE},
	    {"prefix", required_argument, NULL, O_PREFIX},
	    {"result", required_argument, NULL, O_RESULT},
	    {"accelerator", required_argument, NULL, O_ACC},
	    {"workdir", required_argument, NULL, O_WORKDIR},
	    {"parent-pid", required_argument, NULL, O_PARENT},
	    {"with-key", required_argument, NULL, O_WITH_KEY},
	    {"result-key", required_argument, NULL, O_RESULT_KEY},
	    {"chips-from-slurm", no_argument, NULL, O_SLURM},
	    {0},
	};
	const char *kind = NULL, *with_path = NULL, *store_url = NULL, *prefix = NULL,
	           *result = NULL, *acc = NULL, *workdir = NULL, *with_key = NULL;
	long parent = 0;
	int slurm_chips = 0;
	int c;
	if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
		fputs(step_usage, stdout);
		return TF_EXIT_OK;
	}
	if (argc >= 2 && !strcmp(argv[1], "job"))
		return cmd_step_job(argc - 1, argv + 1, cli);
	if (argc < 2 || strcmp(argv[1], "exec"))
		return tf_cli_usage_error("step", "the subcommand is 'exec' or 'job'");
	argc--;
	argv++;
	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'h':
			fputs(step_usage, stdout);
			return TF_EXIT_OK;
		case O_KIND:
			kind = optarg;
			break;
		case O_WITH:
			with_path = optarg;
			break;
		case O_STORE:
			store_url = optarg;
			break;
		case O_PREFIX:
			prefix = optarg;
			break;
		case O_RESULT:
			result = optarg;
			break;
		case O_ACC:
			acc = optarg;
			break;
		case O_WORKDIR:
			workdir = optarg;
			break;
		case O_WITH_KEY:
			with_key = optarg;
			break;
		case O_RESULT_KEY:
			result_key = optarg;
			break;
		case O_SLURM:
			slurm_chips = 1;
			break;
		case O_PARENT: {
			char *end;
			parent = strtol(optarg, &end, 10);
			if (!*optarg || *end || parent <= 0)
				return tf_cli_usage_error("step",
				                          "--parent-pid wants a process id, "
				                          "not '%s'",
				                          optarg);
			break;
		}
		default:
			if (!tf_cli_common_option(cli, c, optarg))
				return tf_cli_usage_error("step", "unknown option");
		}
	}
	if (optind < argc)
		return tf_cli_usage_error("step", "unexpected argument '%s'", argv[optind]);
	if (!kind || !(with_path || with_key) || !store_url || !prefix || !(result || result_key))
		return tf_cli_usage_error(
		    "step", "exec needs --kind, --with-json (or --with-key), --store, "
		            "--prefix and --result (or --result-key)");
	const struct tf_step_schema *sc = tf_step_schema_find(kind);
	if (!sc || !sc->ml)
		return tf_cli_usage_error("step", "--kind '%s' is not data_prep, train or evaluate",
		                          kind);
	int (*fn)(const json_t *, const struct tf_ml_ctx *, json_t *, json_t *, char *, size_t) =
	    sc->ml;

	struct sigaction sa = {.sa_handler = on_stop};
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	if (parent) {
		/* the engine died (crash, kill -9): stop like on SIGTERM rather than train on */
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		if (getppid() != (pid_t)parent)
			stop_flag = 1;
	}

	char msg[1024] = "";
	struct tf_objstore *os = NULL;
	char err[1024] = "";
	int rc = tf_objstore_open(store_url, &os, err, sizeof(err));
	if (rc) {
		tf_errf(msg, sizeof(msg), "object store: %s", err);
		if (result_key) {
			/* nowhere to put the result: the exit status says it all */
			fprintf(stderr, "tpuflow step exec: %s\n", msg);
			return tf_ml_retryable(rc) ? TF_EXIT_UNAVAILABLE : TF_EXIT_FAILED;
		}
		return fail(result, tf_ml_retryable(rc) ? "infra" : "error", msg,
		            tf_ml_retryable(rc) ? TF_EXIT_UNAVAILABLE : TF_EXIT_FAILED);
	}
	result_store = os;
	json_error_t je;
	json_t *with = NULL;
	if (with_key) {
		void *buf = NULL;
		size_t blen = 0;
		rc = tf_objstore_get(os, with_key, &buf, &blen);
		if (rc) {
			tf_errf(msg, sizeof(msg), "cannot read '%s': %s", with_key,
			        tf_objstore_errmsg(os));
			tf_objstore_free(os);
			return fail(result, tf_ml_retryable(rc) ? "infra" : "error", msg,
			            tf_ml_retryable(rc) ? TF_EXIT_UNAVAILABLE : TF_EXIT_FAILED);
		}
		with = json_loadb(buf, blen, 0, &je);
		free(buf);
	} else {
		with = json_load_file(with_path, 0, &je);
	}
	if (!json_is_object(with)) {
		snprintf(msg, sizeof(msg),
		         "'%s' line %d: %s (it must hold the step's 'with' as a "
		         "JSON object)",
		         with_key ? with_key : with_path, je.line,
		         with ? "not an object" : je.text);
		json_decref(with);
		rc = fail(result, "error", msg, TF_EXIT_USAGE);
		tf_objstore_free(os);
		return rc;
	}
	if (slurm_chips && (rc = check_slurm_chips(acc, msg, sizeof(msg)))) {
		json_decref(with);
		rc = fail(result, rc == -EIO ? "infra" : "error", msg,
		          rc == -EIO ? TF_EXIT_UNAVAILABLE : TF_EXIT_FAILED);
		tf_objstore_free(os);
		return rc;
	}
	struct tf_ml_ctx ctx = {
	    .store = os,
	    .prefix = prefix,
	    .workdir = workdir,
	    .accelerator = acc,
	    .cancel = &stop_flag,
	    .progress = print_progress,
	};
	json_t *outputs = json_object(), *metrics = json_object();
	rc = fn(with, &ctx, outputs, metrics, err, sizeof(err));
	int code;
	if (rc == 0) {
		json_t *doc = json_pack("{s:O, s:O}", "outputs", outputs, "metrics", metrics);
		code = write_result(result, doc) ? TF_EXIT_SOFTWARE : TF_EXIT_OK;
		json_decref(doc);
	} else {
		snprintf(msg, sizeof(msg), "%s", err[0] ? err : strerror(-rc));
		if (rc == -ECANCELED || rc == -EINTR || stop_flag)
			code = fail(result, "cancelled", msg, TF_EXIT_UNAVAILABLE);
		else if (tf_ml_retryable(rc))
			code = fail(result, "infra", msg, TF_EXIT_UNAVAILABLE);
		else
			code = fail(result, "error", msg, TF_EXIT_FAILED);
	}
	json_decref(outputs);
	json_decref(metrics);
	json_decref(with);
	tf_objstore_free(os);
	return code;
}

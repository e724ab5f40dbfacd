/* main.c — the `tpuflow` program: global options, then one subcommand from the table below
 * (git style). Each subcommand lives in cli/cmd_GROUP.c and returns an exit code. */
#include "cli/cli.h"
#include "common/common.h"
#include "common/log.h"
#include "orchestrator/pipeline.h"
#include "orchestrator/store.h"
#include "storage/objstore.h"

#include <errno.h>
#include <malloc.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int cmd_help(int argc, char **argv, struct tf_cli *cli);
static int cmd_version(int argc, char **argv, struct tf_cli *cli);

/* What main prepares before a command runs (git's RUN_SETUP): the command finds it in cli
 * and main releases it after. Without a flag a command gets only cli->home (the path). */
enum {
	NEED_HOME = 1 << 0, /* the state home exists (created if missing) */
	NEED_DB = 1 << 1,   /* and its database is open and migrated in cli->db */
	/* the database as it is, to look at: open read-only at whatever schema version it has
	 * (a newer one too), neither created nor migrated; cli->db is NULL when there is none
	 * yet (`db status` reports on a home without touching it) */
	NEED_DB_AS_IS = 1 << 2,
	/* with --dry-run nothing of the above is prepared: a dry run creates nothing */
	DRY_RUN_FREE = 1 << 3,
};

struct tf_cmd {
	const char *name;                                     /* subcommand word */
	int (*fn)(int argc, char **argv, struct tf_cli *cli); /* entry point */
	unsigned needs;                                       /* NEED_* */
	const char *summary;                                  /* one line for `tpuflow help` */
};

/* clang-format off */
static const struct tf_cmd commands[] = {
    {"help", cmd_help, 0, "show commands, exit codes and environment"},
    {"version", cmd_version, 0, "print the version"},
    {"validate", cmd_validate, 0, "check pipeline files, reporting every error as FILE:LINE:COL"},
    {"plan", cmd_plan, 0, "show a pipeline's DAG as levels (--json, --dot)"},
    {"kinds", cmd_kinds, 0, "the step kinds: their with keys, outputs and metrics"},
    {"db", cmd_db, NEED_DB_AS_IS, "state database: status, migrate"},
    {"run", cmd_run, NEED_DB | DRY_RUN_FREE, "run a pipeline durably: parallel steps, retries, cache, live view"},
    {"runs", cmd_runs, NEED_DB, "runs: list, show, logs, watch, cancel, resume, retry, delete"},
    {"gc", cmd_gc, NEED_DB, "remove old runs by a retention policy (--keep-last N, --older-than AGE)"},
    {"daemon", cmd_daemon, NEED_HOME, "drive every run of a home and serve the HTTP API (foreground)"},
    {"models", cmd_models, NEED_DB, "model registry: list, show, alias, compare"},
    {"tokens", cmd_tokens, NEED_DB, "REST API bearer tokens: create, list, revoke"},
    {"hooks", cmd_hooks, NEED_DB, "alerting hooks: add, list, rm, test, events"},
    {"alerts", cmd_alerts, NEED_DB, "the alert outbox: list [--dead], show, redeliver, deliver"},
    {"accel", cmd_accel, 0, "the emulated TPU: matmul, cycles, slices, info"},
    {"store", cmd_store, 0, "object storage: ls, cat, get, put, rm, mb"},
    {"ckpt", cmd_ckpt, 0, "checkpoints: list, show, gc"},
    {"slices", cmd_slices, 0, "the TPU slice pool: occupancy map, queue, utilization"},
    {"pipelines", cmd_pipelines, NEED_DB, "registered pipelines (what schedules fire): add, list, rm"},
    {"schedules", cmd_schedules, NEED_DB, "cron schedules: list (next fire times), fire (the ticks due), pause, resume"},
    {"sched", cmd_sched, 0, "the scheduler: simulate a workload against a pool"},
    {"data", cmd_data, 0, "datasets: prep (raw data -> sharded TFRecord + manifest)"},
    {"train", cmd_train, 0, "train an MLP on an emulated TPU slice (checkpoints, export)"},
    {"eval", cmd_eval, 0, "evaluate a model bundle on a dataset's test split"},
    {"predict", cmd_predict, 0, "CPU inference from a model bundle (.npy in, .npy out)"},
    {"serve", cmd_serve, NEED_DB, "serve a model's predictions (TensorFlow Serving REST, KServe v2)"},
    {"step", cmd_step, 0, "run one ml step in this process (what executor: local starts)"},
};
/* clang-format on */

int tf_cli_common_option(struct tf_cli *cli, int opt, const char *arg)
{
	switch (opt) {
	case TF_OPT_HOME:
		cli->home_opt = arg;
		return 1;
	case TF_OPT_JSON:
		cli->json = 1;
		return 1;
	default:
		return 0;
	}
}

int tf_cli_print_json(FILE *out, const json_t *doc)
{
	/* 15 digits: timestamps keep their sub-second part and short decimals such as 0.8762
	 * still print as written (17 would show 0.87619999999999998) */
	char *s = json_dumps(doc, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY |
	                              JSON_REAL_PRECISION(15));
	if (!s)
		return TF_EXIT_SOFTWARE;
	fprintf(out, "%s\n", s);
	free(s);
	return 0;
}

/* The state home's path: --home, else $TPUFLOW_HOME, else ./.tpuflow. */
static const char *home_path(const struct tf_cli *cli)
{
	const char *h = cli->home_opt;
	if (!h || !*h)
		h = getenv("TPUFLOW_HOME");
	return h && *h ? h : ".tpuflow";
}

char *tf_cli_home(const struct tf_cli *cli, int create)
{
	char *home = tf_xstrdup(home_path(cli));
	if (create) {
		int rc = tf_mkdir_p(home);
		if (rc) {
			fprintf(stderr, "tpuflow: cannot create state home '%s': %s\n", home,
			        strerror(-rc));
			free(home);
			return NULL;
		}
	}
	return home;
}

char *tf_cli_home_store_url(const struct tf_cli *cli)
{
	char *home = tf_cli_home(cli, 1);
	char *url = home ? tf_objstore_home_url(home) : NULL;
	free(home);
	return url;
}

/* A database that could not be opened (rc, err from tf_store_open): said on stderr; the exit
 * code (a schema newer than this program is a configuration problem). */
static int open_failed(const char *cmd, int rc, const char *err)
{
	fprintf(stderr, "tpuflow %s: %s\n", cmd, err);
	return rc == -EPROTO ? TF_EXIT_CONFIG : TF_EXIT_UNAVAILABLE;
}

struct tf_store *tf_cli_open_store(const struct tf_cli *cli, const char *cmd, int *exit_code)
{
	char *home = tf_cli_home(cli, 1), err[512] = "no state home";
	struct tf_store *st = NULL;
	int rc = home ? tf_store_open_home(home, &st, err, sizeof(err)) : -ENOENT;
	free(home);
	if (rc) {
		*exit_code = open_failed(cmd, rc, err);
		return NULL;
	}
	return st;
}

/* NEED_DB_AS_IS: HOME/tpuflow.db read-only at any version into cli->db, or NULL when there
 * is no such file. 0, or the exit code (said on stderr). */
static int open_db_as_is(struct tf_cli *cli, const char *cmd)
{
	char *path = tf_xasprintf("%s/%s", cli->home, TF_STORE_FILE), err[512] = "";
	int rc = access(path, F_OK) ? 0
	                            : tf_store_open(path, TF_STORE_READONLY | TF_STORE_ANY_VERSION,
	                                            &cli->db, err, sizeof(err));
	free(path);
	return rc ? open_failed(cmd, rc, err) : 0;
}

/* What a command's `needs` ask for, before it runs. --home may stand anywhere among the
 * command's own arguments (before a "--"), so main looks for it there as getopt_long would
 * take it; with --help or -h nothing is prepared (help never touches the home), nor with
 * --dry-run for a DRY_RUN_FREE command. 0, or the exit code of what failed (said on
 * stderr). */
static int setup(const struct tf_cmd *c, int argc, char **argv, struct tf_cli *cli)
{
	int help = 0, code = 0;
	for (int i = 1; i < argc && strcmp(argv[i], "--"); i++) {
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h") ||
		    ((c->needs & DRY_RUN_FREE) && !strcmp(argv[i], "--dry-run")))
			help = 1;
		else if (!strcmp(argv[i], "--home") && i + 1 < argc)
			cli->home_opt = argv[++i];
		else if (!strncmp(argv[i], "--home=", 7))
			cli->home_opt = argv[i] + 7;
	}
	cli->home = home_path(cli);
	if (help)
		return 0;
	if ((c->needs & NEED_DB) && !(cli->db = tf_cli_open_store(cli, c->name, &code)))
		return code;
	if (c->needs & NEED_DB_AS_IS)
		return open_db_as_is(cli, c->name);
	if ((c->needs & NEED_HOME) && !(c->needs & NEED_DB)) {
		char *made = tf_cli_home(cli, 1);
		if (!made)
			return TF_EXIT_CONFIG;
		free(made);
	}
	return 0;
}

static int run_command(const struct tf_cmd *c, int argc, char **argv, struct tf_cli *cli)
{
	int code = setup(c, argc, argv, cli);
	if (code == 0)
		code = c->fn(argc, argv, cli);
	tf_store_close(cli->db);
	cli->db = NULL;
	return code;
}

int tf_cli_named_outcome(const struct tf_cli *cli, const char *cmd, struct tf_store *st, int rc,
                         const char *what, const char *name, const char *done, const char *json_key)
{
	if (rc == -ENOENT) {
		fprintf(stderr, "tpuflow %s: no %s '%s'\n", cmd, what, name);
		return TF_EXIT_NOTFOUND;
	}
	if (rc) {
		fprintf(stderr, "tpuflow %s: %s\n", cmd, tf_store_errmsg(st));
		return TF_EXIT_UNAVAILABLE;
	}
	if (cli->json) {
		json_t *doc = json_pack("{s:s}", json_key, name);
		rc = tf_cli_print_json(stdout, doc);
		json_decref(doc);
		return rc;
	}
	printf("%s %s '%s'\n", done, what, name);
	return TF_EXIT_OK;
}

int tf_cli_usage_error(const char *cmd, const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "tpuflow %s: ", cmd);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n(see 'tpuflow %s --help')\n", cmd);
	return TF_EXIT_USAGE;
}

int tf_cli_parse_int(const char *cmd, const char *flag, const char *s, long long min, long long max,
                     long long *out)
{
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (end == s || *end || errno || v < min || v > max)
		return tf_cli_usage_error(
		    cmd, "%s wants a whole number from %lld to %lld, not '%s'", flag, min, max, s);
	*out = v;
	return 0;
}

int tf_cli_parse_since(const char *cmd, const char *flag, const char *s, double *out)
{
	double d;
	struct tm tm = {0};
	const char *end = NULL;
	if (tf_duration_parse(s, &d) == 0 && d >= 0) { /* 2d, 3h30m, 90 */
		*out = tf_now_wall() - d;
		return 0;
	}
	if ((end = strptime(s, "%Y-%m-%d", &tm)) != NULL) {
		if (*end == ' ' || *end == 'T') {
			const char *t = strptime(end + 1, "%H:%M:%S", &tm);
			end = t ? t : strptime(end + 1, "%H:%M", &tm);
		}
		if (end && !*end) {
			tm.tm_isdst = -1; /* local time, as the listings print it */
			*out = (double)mktime(&tm);
			return 0;
		}
	}
	return tf_cli_usage_error(cmd,
	                          "%s wants an age (30m, 2d, 1h30m) or a local date and time "
	                          "(2026-11-29, '2026-11-29 14:00'), not '%s'",
	                          flag, s);
}

int tf_cli_run_unresolved(const char *cmd, const char *arg, int rc)
{
	if (rc == -EEXIST) {
		fprintf(stderr,
		        "tpuflow %s: run id prefix '%s' is ambiguous: give more characters\n", cmd,
		        arg);
		return TF_EXIT_USAGE;
	}
	fprintf(stderr, "tpuflow %s: no run '%s' (see 'tpuflow runs list')\n", cmd, arg);
	return TF_EXIT_NOTFOUND;
}

void tf_cli_fmt_time(json_t *v, char *out, size_t n)
{
	if (!json_is_number(v)) {
		snprintf(out, n, "-");
		return;
	}
	time_t t = (time_t)json_number_value(v);
	struct tm tm;
	localtime_r(&t, &tm);
	strftime(out, n, "%Y-%m-%d %H:%M:%S", &tm);
}

static void print_usage(FILE *f)
{
	fprintf(f, "usage: tpuflow [--home DIR | --remote URL] [--json] COMMAND [ARGS...]\n\n"
	           "commands:\n");
	for (size_t i = 0; i < TF_ARRAY_LEN(commands); i++)
		fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
	fprintf(f, "\n'tpuflow COMMAND --help' describes one command.\n");
}

/* True when argv[1..] holds `flag`: the two built-in commands take only --json/--help. */
static int has_flag(int argc, char **argv, const char *flag)
{
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], flag))
			return 1;
	return 0;
}

static int cmd_help(int argc, char **argv, struct tf_cli *cli)
{
	if (has_flag(argc, argv, "--json"))
		cli->json = 1;
	if (argc > 1 && argv[1][0] != '-') {
		char *sub[] = {argv[1], "--help", NULL};
		for (size_t i = 0; i < TF_ARRAY_LEN(commands); i++)
			if (!strcmp(commands[i].name, argv[1]))
				return run_command(&commands[i], 2, sub, cli);
		return tf_cli_usage_error("help", "unknown command '%s'", argv[1]);
	}
	if (cli->json) {
		printf("{\"commands\":[");
		for (size_t i = 0; i < TF_ARRAY_LEN(commands); i++)
			printf("%s{\"name\":\"%s\",\"summary\":\"%s\"}", i ? "," : "",
			       commands[i].name, commands[i].summary);
		printf("],\"exit_codes\":{\"0\":\"ok\",\"1\":\"run or step failed\","
		       "\"64\":\"usage\",\"65\":\"bad input data\",\"69\":\"service "
		       "unavailable\",\"70\":\"internal error\",\"75\":\"busy: another "
		       "process drives the run or serves the home\",\"78\":\"bad "
		       "configuration\"}}\n");
		return TF_EXIT_OK;
	}
	print_usage(stdout);
	printf(
	    "\nglobal options:\n"
	    "  --home DIR   state home (SQLite database, local object store); else $TPUFLOW_HOME,\n"
	    "               else ./.tpuflow\n"
	    "  --json       print one JSON document on stdout (every command that prints data)\n"
	    "  --remote URL run, runs, gc and models talk to a daemon's REST API (else\n"
	    "               $TPUFLOW_URL); the bearer token comes from $TPUFLOW_TOKEN (401 or "
	    "403:\n"
	    "               exit 78)\n"
	    "\nexit codes:\n"
	    "  0  ok                      64  usage error\n"
	    "  1  the run or a step failed 65  bad input data (pipeline, dataset, request)\n"
	    "  66 no such run, step, model, version or alias\n"
	    "  69 a service unavailable   70  internal error\n"
	    "  75 busy: another live process drives the run (runs resume) or serves the\n"
	    "     home (daemon); try later, or see --force\n"
	    "  78 bad configuration (e.g. a database newer than this program)\n"
	    "\nenvironment:\n"
	    "  TPUFLOW_HOME        state home\n"
	    "  TPUFLOW_URL         a daemon's URL for run, runs, gc and models (like --remote)\n"
	    "  TPUFLOW_TOKEN       bearer token for TPUFLOW_URL (tpuflow tokens create)\n"
	    "  TPUFLOW_CACERT      CA certificate (PEM) of an https:// TPUFLOW_URL's certificate\n"
	    "  TPUFLOW_RETRIES     times --remote sends a request the daemon asked to retry later\n"
	    "                      (429/503 with Retry-After, at most 30 s each; default 4)\n"
	    "  TPUFLOW_LOG         debug|info|warn|error (default warn)\n"
	    "  TPUFLOW_LOG_FORMAT  text|json\n"
	    "  TPUFLOW_LOG_MAX     cap on each output stream of a step's log (default 64M)\n"
	    "  AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,\n"
	    "  AWS_SESSION_TOKEN   settings for s3:// object storage\n");
	return TF_EXIT_OK;
}

static int cmd_version(int argc, char **argv, struct tf_cli *cli)
{
	if (has_flag(argc, argv, "--help")) {
		printf("usage: tpuflow version [--json]\n");
		return TF_EXIT_OK;
	}
	if (has_flag(argc, argv, "--json"))
		cli->json = 1;
	for (int i = 1; i < argc; i++)
		if (strcmp(argv[i], "--json"))
			return tf_cli_usage_error("version", "unexpected argument '%s'", argv[i]);
	if (cli->json)
		printf("{\"version\":\"%s\"}\n", TF_VERSION);
	else
		printf("tpuflow %s\n", TF_VERSION);
	return TF_EXIT_OK;
}

/* Writes to a closed pipe (`tpuflow run ... | head`) fail with EPIPE instead of killing the
 * process: a run goes on to its end when its reader leaves. Step processes get the default
 * disposition back before exec (executors/local.c).
 *
 * Free memory at the top of a thread's heap is given back to the kernel only past 1 MiB:
 * SQLite's statements that fire triggers (a step's state change) take and free ~100 KiB
 * each, and glibc's default (128 KiB, adjusted upwards only by freed mmap blocks) gave it
 * back and faulted it in again at every step (strace: 2 madvise and 3 mprotect calls per
 * chain step, perf: 4% of the engine's time in page faults). */
int main(int argc, char **argv)
{
	struct tf_cli cli = {.argv0 = argv[0]};
	int i = 1;

	mallopt(M_TRIM_THRESHOLD, 1 << 20);
	mallopt(M_MMAP_THRESHOLD, 1 << 20);
	signal(SIGPIPE, SIG_IGN);
	tf_log_init();
	for (; i < argc && argv[i][0] == '-'; i++) {
		if (!strcmp(argv[i], "--json")) {
			cli.json = 1;
		} else if (!strcmp(argv[i], "--home") && i + 1 < argc) {
			cli.home_opt = argv[++i];
		} else if (!strncmp(argv[i], "--home=", 7)) {
			cli.home_opt = argv[i] + 7;
		} else if (!strcmp(argv[i], "--remote") && i + 1 < argc) {
			cli.remote = argv[++i];
		} else if (!strncmp(argv[i], "--remote=", 9)) {
			cli.remote = argv[i] + 9;
		} else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			print_usage(stdout);
			return TF_EXIT_OK;
		} else if (!strcmp(argv[i], "--version")) {
			return cmd_version(0, NULL, &cli);
		} else {
			fprintf(stderr, "tpuflow: unknown option '%s'\n", argv[i]);
			print_usage(stderr);
			return TF_EXIT_USAGE;
		}
	}
	if (i >= argc) {
		print_usage(stderr);
		return TF_EXIT_USAGE;
	}
	if (!cli.remote && getenv("TPUFLOW_URL") && *getenv("TPUFLOW_URL"))
		cli.remote = getenv("TPUFLOW_URL");
	if (cli.remote &&
	    (!strcmp(argv[i], "run") || !strcmp(argv[i], "runs") || !strcmp(argv[i], "gc") ||
	     !strcmp(argv[i], "models")) &&
	    !has_flag(argc - i, argv + i, "--help"))
		return tf_cli_remote(&cli, cli.remote, argc - i, argv + i);
	for (size_t c = 0; c < TF_ARRAY_LEN(commands); c++)
		if (!strcmp(commands[c].name, argv[i]))
			return run_command(&commands[c], argc - i, argv + i, &cli);
	fprintf(stderr, "tpuflow: '%s' is not a command; see 'tpuflow help'\n", argv[i]);
	return TF_EXIT_USAGE;
}

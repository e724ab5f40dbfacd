/* cmd_run.c — `tpuflow run FILE` and `tpuflow runs list|show|logs|retry|resume`: driving
 * pipeline runs and looking at them afterwards. */
#include "cli/cli.h"
#include "common/common.h"
#include "orchestrator/alerts.h"
#include "orchestrator/engine.h"
#include "orchestrator/runner.h"
#include "orchestrator/state.h"
#include "orchestrator/store.h"
#include "storage/objstore.h"

#include <ctype.h>
#include <pthread.h>
#include <signal.h>
#include <errno.h>
#include <limits.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "orchestrator/view.h"
#include <unistd.h>

#define EXIT_INTERRUPTED 130 /* like a shell after Ctrl-C */

static int exit_for_state(enum tf_run_state s)
{
	switch (s) {
	case TF_RUN_SUCCEEDED:
		return TF_EXIT_OK;
	case TF_RUN_INTERRUPTED:
		return EXIT_INTERRUPTED;
	default:
		return TF_EXIT_FAILED;
	}
}

static int exit_for_rc(int rc)
{
	switch (rc) {
	case -EPROTO:
		return TF_EXIT_CONFIG;
	case -EINVAL:
		return TF_EXIT_DATAERR;
	case -EBUSY:
	case -ESTALE:
		return TF_EXIT_TEMPFAIL;
	case -EALREADY:
	case -ENOENT:
		return TF_EXIT_FAILED;
	default:
		return TF_EXIT_SOFTWARE;
	}
}

/* A run that could not start: its problems in file order on stderr and, with --json, the
 * same as one document on stdout ({"ok": false, "error", "diagnostics"}, as validate's). */
static void report_refused(const struct tf_cli *cli, const char *file,
                           struct tf_diag_list *diags, const char *err)
{
	tf_diag_sort(diags);
	tf_diag_print(diags, stderr);
	fprintf(stderr, "tpuflow run: %s\n", err);
	if (cli->json) {
		json_t *doc = json_pack("{s:b, s:s?, s:s, s:o}", "ok", 0, "file", file, "error", err,
		                        "diagnostics", tf_diag_to_json(diags));
		tf_cli_print_json(stdout, doc);
		json_decref(doc);
	}
}

static void run_usage(FILE *f)
{
	fprintf(
	    f,
	    "usage: tpuflow run FILE [--param NAME=VALUE]... [--workers N] [--storage URL]\n"
	    "                    [--no-cache] [--force STEP]... [--priority 0-9] [--project NAME]\n"
	    "                    [--label NAME=VALUE]... [--only STEP[,STEP]... | --from STEP]\n"
	    "                    [--dry-run] [--detach | --wait] [--embedded] [--plain]\n"
	    "                    [--home DIR] [--json]\n\n"
	    "Runs a pipeline to the end in this process, recording every state change in\n"
	    "HOME/" TF_STORE_FILE " before acting on it. Independent steps run in parallel.\n\n"
	    "  --param NAME=VALUE  override a pipeline param (type-checked); repeatable\n"
	    "  --label NAME=VALUE  a label kept with the run (runs list --label selects by\n"
	    "                      it); repeatable\n"
	    "  --workers N         steps running at once (default 8)\n"
	    "  --storage URL       object store (default: the pipeline's `storage`, else\n"
	    "                      file://HOME/objects)\n"
	    "  --no-cache          take no step's results from the cache (they are still\n"
	    "                      recorded for later runs)\n"
	    "  --force STEP        run STEP even if its results are cached; repeatable\n"
	    "  --only STEP,...     run only these steps; what they need is reused from the\n"
	    "                      newest succeeded run of the pipeline (on the same store),\n"
	    "                      the other steps are skipped\n"
	    "  --from STEP         run STEP and the steps after it; the steps before it are\n"
	    "                      reused from the newest succeeded run\n"
	    "  --dry-run           print the plan (params, what each step would do) and exit:\n"
	    "                      nothing runs, nothing is recorded\n"
	    "  --priority N        priority of the run's train slices, 0-9 (default: the\n"
	    "                      pipeline's `priority`, else 5); a more urgent run may\n"
	    "                      preempt a less urgent one on the shared pool\n"
	    "  --project NAME      project the run's slices are accounted to (default: the\n"
	    "                      pipeline's `project`, else default)\n"
	    "  --plain             one line per change even on a terminal\n"
	    "  --json              progress on stderr, then the run summary as JSON on stdout\n\n"
	    "Ctrl-C stops cleanly (running steps are cancelled, the run is left 'interrupted');\n"
	    "continue it with 'tpuflow runs resume RUN'. A second Ctrl-C leaves at once.\n\n"
	    "When a daemon serves the home ('tpuflow daemon', docs/daemon.md), the run is\n"
	    "submitted to it and followed from the database; Ctrl-C then stops following only.\n"
	    "  --detach            print the run id at once (needs a daemon)\n"
	    "  --wait              no live view: wait and exit with the run's result\n"
	    "  --embedded          drive the run in this process even when a daemon serves\n"
	    "                      the home (implied by --no-cache, --force, --only, --from)\n\n"
	    "exit: 0 succeeded, 1 a step failed, 65 the pipeline has errors, 130 interrupted\n");
}

/* As the pipeline's `project` key: letters, digits, '_' and '-', starting with a letter. */
static int project_name_ok(const char *s)
{
	if (!isalpha((unsigned char)s[0]) || strlen(s) > 63)
		return 0;
	for (; *s; s++)
		if (!isalnum((unsigned char)*s) && *s != '_' && *s != '-')
			return 0;
	return 1;
}

static int finish(struct tf_cli *cli, struct tf_engine_result *res)
{
	if (cli->json)
		tf_cli_print_json(stdout, res->summary);
	else
		tf_engine_print_summary(stdout, res->summary);
	json_decref(res->summary);
	return exit_for_state(res->state);
}

/* ---- driving a run in this process, with Ctrl-C ------------------------------------------ */

static void *signal_main(void *arg)
{
	struct tf_engine *e = arg;
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGUSR2);
	for (int n = 0;;) {
		int sig = 0;
		if (sigwait(&set, &sig))
			continue;
		if (sig == SIGUSR2)
			break; /* the run ended */
		if (n++ == 0) {
			tf_engine_cancel(e); /* stop cleanly: the run stays resumable */
			continue;
		}
		/* a second Ctrl-C: leave now, like a crash; the run stays resumable */
		static const char msg[] = "\ntpuflow: stopped; resume with 'tpuflow runs resume'\n";
		if (write(2, msg, sizeof(msg) - 1) < 0) {
		}
		_exit(EXIT_INTERRUPTED);
	}
	return NULL;
}

/* Starts the run on engine threads and waits for it; SIGINT/SIGTERM cancel it (the first) or
 * leave at once (the second). */
static int drive_here(const struct tf_engine_opts *o, const struct tf_engine_req *rq,
                      struct tf_diag_list *diags, struct tf_engine_result *res, char *err,
                      size_t errlen)
{
	sigset_t set, old;
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGUSR2);
	pthread_sigmask(SIG_BLOCK, &set, &old); /* inherited by the engine's threads */
	struct tf_engine *e = NULL;
	/* alerts of this home are delivered while the run goes on and for a while after it */
	struct tf_alerts_worker *alerts = tf_alerts_worker_start(o->home);
	int rc = tf_engine_start(o, rq, &e, diags, err, errlen), left = 0;
	if (rc == 0) {
		pthread_t t;
		int have = pthread_create(&t, NULL, signal_main, e) == 0;
		rc = tf_engine_wait(e, res, err, errlen);
		if (have) {
			pthread_kill(t, SIGUSR2);
			pthread_join(t, NULL);
		}
		tf_engine_free(e);
	}
	if (!alerts) /* hooks may have been added while the run went on */
		alerts = tf_alerts_worker_start(o->home);
	tf_alerts_worker_stop(alerts, -1, &left);
	if (left)
		fprintf(stderr,
		        "tpuflow: %d alert(s) not delivered yet: they are sent by the daemon or the "
		        "next run ('tpuflow alerts list')\n",
		        left);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return rc;
}

/* ---- following a run through the database (a daemon drives it) ------------------------- */

static volatile sig_atomic_t follow_stop;
static void on_follow_signal(int sig)
{
	(void)sig;
	follow_stop = 1;
}

/* Shows the run's progress from the database (cli->db) until it ends (quiet: no view), then
 * its summary. Ctrl-C stops following only. Returns the exit code. */
static int follow(struct tf_cli *cli, const char *run, int plain, int quiet)
{
	struct tf_store *st = cli->db;
	int rc, ret;
	FILE *out = cli->json ? stderr : stdout;
	int tty = !plain && isatty(fileno(out)) && getenv("TERM") && strcmp(getenv("TERM"), "dumb");
	struct sigaction sa = {.sa_handler = on_follow_signal}, old_int, old_term;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, &old_int);
	sigaction(SIGTERM, &sa, &old_term);
	follow_stop = 0;
	struct tf_view *view = NULL;
	enum tf_run_state state = TF_RUN_PENDING;
	for (;;) {
		json_t *d = NULL;
		rc = tf_run_describe(st, run, &d);
		if (rc) {
			fprintf(stderr, "tpuflow: run '%s': %s\n", run, tf_store_errmsg(st));
			ret = exit_for_rc(rc);
			goto out;
		}
		tf_run_state_parse(json_string_value(json_object_get(d, "state")), &state);
		if (!quiet) {
			if (!view)
				view = tf_view_new(out, tty, run,
				                   json_string_value(json_object_get(d, "pipeline")));
			json_t *steps = json_object_get(d, "steps"), *s;
			size_t n = json_array_size(steps), i;
			struct tf_view_row *rows = tf_xcalloc(n + 1, sizeof(*rows));
			double now = tf_now_wall();
			json_array_foreach(steps, i, s)
			{
				json_t *t0 = json_object_get(s, "started_at"),
				       *t1 = json_object_get(s, "finished_at");
				rows[i].name = json_string_value(json_object_get(s, "name"));
				rows[i].type = json_string_value(json_object_get(s, "type"));
				rows[i].state = json_string_value(json_object_get(s, "state"));
				rows[i].attempt = (int)json_integer_value(json_object_get(s, "attempts"));
				rows[i].duration = json_is_number(t0)
				                       ? (json_is_number(t1) ? json_number_value(t1) : now) -
				                             json_number_value(t0)
				                       : -1;
				json_t *pg = json_object_get(s, "progress");
				rows[i].progress = json_is_object(pg) && rows[i].state &&
				                           !strcmp(rows[i].state, "running")
				                       ? json_dumps(pg, JSON_COMPACT)
				                       : NULL;
				rows[i].reason = json_string_value(json_object_get(s, "reason"));
			}
			tf_view_update(view, rows, n);
			for (i = 0; i < n; i++)
				free(rows[i].progress);
			free(rows);
		}
		json_decref(d);
		if (state == TF_RUN_SUCCEEDED || state == TF_RUN_FAILED ||
		    state == TF_RUN_INTERRUPTED)
			break;
		if (follow_stop) {
			fprintf(stderr,
			        "\ntpuflow: stopped following; run %s goes on.\n"
			        "  re-attach: tpuflow runs watch %s\n"
			        "  cancel:    tpuflow runs cancel %s\n",
			        run, run, run);
			ret = EXIT_INTERRUPTED;
			goto out;
		}
		struct timespec ts = {0, 100 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	json_t *sum = NULL;
	if (tf_engine_summary(st, run, &sum)) {
		fprintf(stderr, "tpuflow: run '%s': %s\n", run, tf_store_errmsg(st));
		ret = TF_EXIT_SOFTWARE;
		goto out;
	}
	struct tf_engine_result res = {.state = state, .summary = sum};
	snprintf(res.run_id, sizeof(res.run_id), "%s", run);
	ret = finish(cli, &res);
out:
	tf_view_free(view);
	sigaction(SIGINT, &old_int, NULL);
	sigaction(SIGTERM, &old_term, NULL);
	return ret;
}

/* `tpuflow run FILE` when a daemon serves the home: the run is submitted to it. */
static int run_by_daemon(struct tf_cli *cli, const char *home, const char *file,
                         const struct tf_engine_opts *o, const struct tf_engine_req *rq,
                         int detach, int wait, int plain)
{
	char *text = NULL, err[1024] = "", run[32];
	size_t len = 0;
	int rc = tf_read_file(file, 16u << 20, &text, &len);
	if (rc) {
		fprintf(stderr, "tpuflow run: cannot read '%s': %s\n", file, strerror(-rc));
		return TF_EXIT_DATAERR;
	}
	struct tf_store *st = cli->db;
	struct tf_engine_submit sub = {.path = file,
	                               .yaml = text,
	                               .yaml_len = len,
	                               .ov = rq->ov,
	                               .nov = rq->nov,
	                               .labels = rq->labels,
	                               .nlabels = rq->nlabels,
	                               .storage = o->storage,
	                               .trigger = "cli",
	                               .has_priority = o->has_priority,
	                               .priority = o->priority,
	                               .project = o->project};
	struct tf_diag_list diags = {0};
	/* The daemon is woken as soon as the run is written, and the run is reported once it is
	 * on disk: the daemon's commit that starts the run syncs it too (store.h), so nothing of
	 * it runs before it is durable, and the two syncs overlap. */
	tf_store_defer_sync(st, 1);
	rc = tf_engine_submit(st, home, &sub, run, &diags, err, sizeof(err));
	if (rc == 0) {
		tf_daemon_wake(home); /* best effort: the daemon also looks every second */
		if (tf_store_sync(st)) {
			snprintf(err, sizeof(err), "%s", tf_store_errmsg(st));
			rc = -EIO;
		}
	}
	free(text);
	if (rc) {
		report_refused(cli, file, &diags, err);
		tf_diag_list_release(&diags);
		return exit_for_rc(rc);
	}
	tf_diag_list_release(&diags);
	if (detach) {
		if (cli->json)
			printf("{\"run_id\": \"%s\"}\n", run);
		else
			printf("%s\n", run);
		return TF_EXIT_OK;
	}
	if (!cli->json && !wait)
		fprintf(stdout, "run %s submitted to the daemon of %s\n", run, home);
	return follow(cli, run, plain, wait);
}

/* Params as `runs show` and `run --dry-run` print them: "    epochs = 5  (--param)". */
static void print_params(json_t *params)
{
	size_t i;
	json_t *pa;
	json_array_foreach(params, i, pa)
	{
		const char *t = json_string_value(json_object_get(pa, "text"));
		printf("%s    %s = %s  (%s)\n", i ? "" : "  params:\n",
		       json_string_value(json_object_get(pa, "name")), t ? t : "(unset)",
		       strcmp(json_string_value(json_object_get(pa, "source")), "default")
		           ? "--param"
		           : "default");
	}
}

/* `run --dry-run`: the plan, nothing run or recorded. */
static int dry_run_print(struct tf_cli *cli, const struct tf_engine_opts *o,
                         const struct tf_engine_req *rq)
{
	json_t *plan = NULL;
	struct tf_diag_list diags = {0};
	char err[1024] = "";
	int rc = tf_engine_dry_run(o, rq, &plan, &diags, err, sizeof(err));
	if (rc) {
		report_refused(cli, rq->path, &diags, err);
		tf_diag_list_release(&diags);
		return rc == -ENOENT ? TF_EXIT_NOTFOUND : exit_for_rc(rc);
	}
	tf_diag_print(&diags, stderr); /* warnings */
	tf_diag_list_release(&diags);
	if (cli->json) {
		tf_cli_print_json(stdout, plan);
		json_decref(plan);
		return TF_EXIT_OK;
	}
	const char *src = json_string_value(json_object_get(plan, "reuse_from"));
	printf("dry run of pipeline %s: nothing runs, nothing is recorded\n",
	       json_string_value(json_object_get(plan, "pipeline")));
	printf("  storage: %s\n", json_string_value(json_object_get(plan, "storage")));
	if (json_string_value(json_object_get(plan, "selection")))
		printf("  selection: %s%s%s\n",
		       json_string_value(json_object_get(plan, "selection")),
		       src ? "; the steps it does not run come from run " : "", src ? src : "");
	print_params(json_object_get(plan, "params"));
	size_t i;
	json_t *v;
	printf("\n  %-5s %-24s %-10s %s\n", "LEVEL", "STEP", "TYPE", "WHAT");
	json_array_foreach(json_object_get(plan, "steps"), i, v)
	{
		const char *act = json_string_value(json_object_get(v, "action"));
		const char *when = json_string_value(json_object_get(v, "when"));
		char what[256];
		snprintf(what, sizeof(what), "%s%s%s%s%s%s",
		         !strcmp(act, "run")     ? "runs"
		         : !strcmp(act, "reuse") ? "reused from run "
		                                 : "skipped (not selected)",
		         !strcmp(act, "reuse") && src ? src : "",
		         json_is_true(json_object_get(v, "finally")) ? ", finally" : "",
		         !strcmp(act, "run") && json_is_true(json_object_get(v, "cache")) &&
		                 !json_string_value(json_object_get(plan, "selection"))
		             ? ", unless cached"
		             : "",
		         when && !strcmp(act, "run") ? ", when " : "",
		         when && !strcmp(act, "run") ? when : "");
		printf("  %-5lld %-24s %-10s %s\n",
		       (long long)json_integer_value(json_object_get(v, "level")),
		       json_string_value(json_object_get(v, "name")),
		       json_string_value(json_object_get(v, "type")), what);
	}
	json_decref(plan);
	return TF_EXIT_OK;
}

int cmd_run(int argc, char **argv, struct tf_cli *cli)
{
	enum {
		OPT_PARAM = 1,
		OPT_WORKERS,
		OPT_STORAGE,
		OPT_PLAIN,
		OPT_NO_CACHE,
		OPT_FORCE,
		OPT_PRIORITY,
		OPT_PROJECT,
		OPT_DETACH,
		OPT_WAIT,
		OPT_EMBEDDED,
		OPT_LABEL,
		OPT_ONLY,
		OPT_FROM,
		OPT_DRY_RUN
	};
	static const struct option opts[] = {TF_CLI_COMMON_OPTIONS,
	                                     {"param", required_argument, NULL, OPT_PARAM},
	                                     {"workers", required_argument, NULL, OPT_WORKERS},
	                                     {"storage", required_argument, NULL, OPT_STORAGE},
	                                     {"plain", no_argument, NULL, OPT_PLAIN},
	                                     {"no-cache", no_argument, NULL, OPT_NO_CACHE},
	                                     {"force", required_argument, NULL, OPT_FORCE},
	                                     {"priority", required_argument, NULL, OPT_PRIORITY},
	                                     {"project", required_argument, NULL, OPT_PROJECT},
	                                     {"detach", no_argument, NULL, OPT_DETACH},
	                                     {"wait", no_argument, NULL, OPT_WAIT},
	                                     {"embedded", no_argument, NULL, OPT_EMBEDDED},
	                                     {"label", required_argument, NULL, OPT_LABEL},
	                                     {"only", required_argument, NULL, OPT_ONLY},
	                                     {"from", required_argument, NULL, OPT_FROM},
	                                     {"dry-run", no_argument, NULL, OPT_DRY_RUN},
	                                     {0, 0, 0, 0}};
	const char **only = tf_xcalloc((size_t)argc + 1, sizeof(*only));
	size_t nonly = 0;
	const char *from = NULL;
	int dry_run = 0;
	struct tf_run_label *labels = tf_xcalloc((size_t)argc + 1, sizeof(*labels));
	size_t nlabels = 0;
	struct tf_param_override *ov = tf_xcalloc((size_t)argc + 1, sizeof(*ov));
	const char **force = tf_xcalloc((size_t)argc + 1, sizeof(*force));
	size_t nov = 0;
	struct tf_engine_opts o = {0};
	int c, plain = 0, ret, detach = 0, wait = 0, embedded = 0;
	char err[1024] = "";
	const char *home = cli->home; /* created, its database open, unless --dry-run */

	optind = 1;
	while ((c = getopt_long(argc, argv, "hp:", opts, NULL)) != -1) {
		switch (c) {
		case 'h':
			run_usage(stdout);
			ret = TF_EXIT_OK;
			goto out;
		case 'p':
		case OPT_PARAM:
			if (tf_param_override_parse(optarg, &ov[nov])) {
				ret = tf_cli_usage_error(
				    "run", "--param wants NAME=VALUE, not '%s'", optarg);
				goto out;
			}
			nov++;
			break;
		case OPT_WORKERS: {
			long long w;
			ret = tf_cli_parse_int("run", "--workers", optarg, 1, 1024, &w);
			if (ret)
				goto out;
			o.workers = (int)w;
			break;
		}
		case OPT_STORAGE:
			o.storage = optarg;
			break;
		case OPT_PLAIN:
			plain = 1;
			break;
		case OPT_NO_CACHE:
			o.no_cache = 1;
			break;
		case OPT_FORCE:
			force[o.nforce++] = optarg;
			break;
		case OPT_PRIORITY: {
			long long p;
			ret = tf_cli_parse_int("run", "--priority", optarg, 0, 9, &p);
			if (ret)
				goto out;
			o.priority = (int)p;
			o.has_priority = 1;
			break;
		}
		case OPT_PROJECT:
			if (!project_name_ok(optarg)) {
				ret = tf_cli_usage_error(
				    "run",
				    "bad --project '%s': use letters, digits, '_' "
				    "and '-', starting with a letter",
				    optarg);
				goto out;
			}
			o.project = optarg;
			break;
		case OPT_DETACH:
			detach = 1;
			break;
		case OPT_WAIT:
			wait = 1;
			break;
		case OPT_EMBEDDED:
			embedded = 1;
			break;
		case OPT_ONLY: /* STEP[,STEP...], repeatable */
			for (char *t = strtok(optarg, ","); t; t = strtok(NULL, ","))
				only[nonly++] = t;
			break;
		case OPT_FROM:
			from = optarg;
			break;
		case OPT_DRY_RUN:
			dry_run = 1;
			break;
		case OPT_LABEL: {
			struct tf_param_override kv;
			if (tf_param_override_parse(optarg, &kv)) {
				ret = tf_cli_usage_error("run", "--label wants NAME=VALUE, not '%s'",
				                         optarg);
				goto out;
			}
			/* the name runs up to the '=' inside optarg */
			char *eq = strchr(optarg, '=');
			*eq = '\0';
			if (tf_run_label_check(optarg, eq + 1, err, sizeof(err))) {
				ret = tf_cli_usage_error("run", "--label: %s", err);
				goto out;
			}
			labels[nlabels].key = optarg;
			labels[nlabels++].value = eq + 1;
			break;
		}
		default:
			if (!tf_cli_common_option(cli, c, optarg)) {
				ret = tf_cli_usage_error("run", "unknown option");
				goto out;
			}
		}
	}
	if (optind + 1 != argc) {
		ret = tf_cli_usage_error("run", "expected one pipeline file");
		goto out;
	}
	o.home = home;
	o.force = force;
	struct tf_engine_req rq = {.path = argv[optind],
	                           .ov = ov,
	                           .nov = nov,
	                           .labels = labels,
	                           .nlabels = nlabels,
	                           .only = only,
	                           .nonly = nonly,
	                           .from = from};
	if (nonly && from) {
		ret = tf_cli_usage_error("run", "--only and --from choose steps in two ways: give one");
		goto out;
	}
	if (dry_run) {
		ret = dry_run_print(cli, &o, &rq);
		goto out;
	}
	if (!embedded && !o.no_cache && !o.nforce && !nonly && !from &&
	    tf_daemon_find(home, NULL)) {
		ret = run_by_daemon(cli, home, argv[optind], &o, &rq, detach, wait, plain);
		goto out;
	}
	if (detach) {
		ret = tf_cli_usage_error("run", "--detach needs a daemon serving the home "
		                                "('tpuflow daemon --home %s')",
		                         home);
		goto out;
	}
	o.out = cli->json || wait ? stderr : stdout;
	o.tty = !plain && isatty(fileno(o.out)) && getenv("TERM") && strcmp(getenv("TERM"), "dumb");
	struct tf_diag_list diags = {0};
	struct tf_engine_result res = {0};
	int rc = drive_here(&o, &rq, &diags, &res, err, sizeof(err));
	if (rc) {
		report_refused(cli, argv[optind], &diags, err);
		tf_diag_list_release(&diags);
		/* -ENOENT: --only/--from found no succeeded run to reuse steps from */
		ret = rc == -ENOENT ? TF_EXIT_NOTFOUND : exit_for_rc(rc);
		goto out;
	}
	tf_diag_list_release(&diags);
	ret = finish(cli, &res);
out:
	free(ov);
	free(only);
	free(labels);
	free(force);
	return ret;
}

/* ---- runs ------------------------------------------------------------------------------ */

static void runs_usage(FILE *f)
{
	fprintf(
	    f,
	    "usage: tpuflow runs list [--limit N] [--pipeline NAME] [--state STATE]\n"
	    "                         [--since AGE|DATE] [--label NAME[=VALUE]]\n"
	    "       tpuflow runs show RUN\n"
	    "       tpuflow runs logs RUN [STEP]\n"
	    "       tpuflow runs resume RUN [--force]  continue an interrupted or crashed run\n"
	    "       tpuflow runs retry RUN      run again what failed, reusing what succeeded\n"
	    "       tpuflow runs cancel RUN     stop a run (its driving process stops it within\n"
	    "                                   a few seconds, runs its finally steps, and the\n"
	    "                                   run ends failed); again: stop the finally steps\n"
	    "       tpuflow runs watch RUN      follow a run driven by another process (the\n"
	    "                                   daemon, another terminal) until it ends\n"
	    "       tpuflow runs delete RUN... [--dry-run]  remove runs: rows, logs,\n"
	    "                                   checkpoints, outputs (not what a registered\n"
	    "                                   model version or a later run still uses)\n"
	    "  (common: --home DIR, --json; RUN is an id, a unique prefix of one, or 'latest')\n\n"
	    "list: --state is pending, running, succeeded, failed, interrupted or orphaned\n"
	    "(running, but its process is gone); --since takes an age (2d, 3h) or a local\n"
	    "date ('2026-11-29 14:00'); filters combine.\n"
	    "resume/retry exit 75 when another live process drives the run; --force takes it\n"
	    "over anyway (with a warning) when that process is stuck.\n");
}

/* Seconds as a duration column: 12.3s, 4m05s, 2h03m. */
static void fmt_span(double s, char *buf, size_t len)
{
	if (s < 60)
		snprintf(buf, len, "%.1fs", s);
	else if (s < 3600)
		snprintf(buf, len, "%dm%02ds", (int)(s / 60), (int)s % 60);
	else
		snprintf(buf, len, "%dh%02dm", (int)(s / 3600), (int)(s / 60) % 60);
}

/* The labels of a run document as "k=v,k2=v2" into buf ("" when none). */
static void labels_text(json_t *labels, char *buf, size_t n)
{
	size_t off = 0;
	const char *k;
	json_t *v;
	buf[0] = '\0';
	json_object_foreach(labels, k, v)
	{
		if (off < n)
			off += (size_t)snprintf(buf + off, n - off, "%s%s=%s", off ? "," : "", k,
			                        json_string_value(v));
	}
}

static int runs_list(struct tf_store *st, struct tf_cli *cli, const struct tf_runs_filter *f)
{
	json_t *arr = NULL;
	int rc = tf_runs_list(st, f, &arr);
	if (rc) {
		fprintf(stderr, "tpuflow runs: %s\n", tf_store_errmsg(st));
		return TF_EXIT_SOFTWARE;
	}
	if (cli->json) {
		tf_cli_print_json(stdout, arr);
	} else {
		printf("%-24s %-20s %-11s %-19s %9s %s\n", "RUN", "PIPELINE", "STATE", "CREATED",
		       "DURATION", "STEPS");
		size_t i;
		json_t *r;
		json_array_foreach(arr, i, r)
		{
			char when[32];
			tf_cli_fmt_time(json_object_get(r, "created_at"), when, sizeof(when));
			char dur[32] = "-", skipped[48] = "";
			json_t *d = json_object_get(r, "duration");
			if (json_is_number(d))
				fmt_span(json_number_value(d), dur, sizeof(dur));
			long long nskip = json_integer_value(json_object_get(r, "skipped"));
			if (nskip)
				snprintf(skipped, sizeof(skipped), " (%lld skipped)", nskip);
			int orphaned = json_is_true(json_object_get(r, "orphaned"));
			char labels[256];
			labels_text(json_object_get(r, "labels"), labels, sizeof(labels));
			printf("%-24s %-20s %-11s %-19s %9s %lld/%lld%s%s%s%s\n",
			       json_string_value(json_object_get(r, "id")),
			       json_string_value(json_object_get(r, "pipeline")),
			       orphaned ? "orphaned" : json_string_value(json_object_get(r, "state")),
			       when, dur, (long long)json_integer_value(json_object_get(r, "done")),
			       (long long)json_integer_value(json_object_get(r, "steps")), skipped,
			       orphaned ? "  its process is gone: tpuflow runs resume" : "",
			       labels[0] ? "  " : "", labels);
		}
	}
	json_decref(arr);
	return TF_EXIT_OK;
}

/* The selection a run was made with (runs.selection: {"only": [...]} or {"from": S}) in the
 * words of `run`'s options: "--only a,b" or "--from train" ("" without one). */
static void selection_text(json_t *sel, char *buf, size_t n)
{
	size_t off = 0;
	buf[0] = '\0';
	if (json_string_value(json_object_get(sel, "from"))) {
		snprintf(buf, n, "--from %s", json_string_value(json_object_get(sel, "from")));
		return;
	}
	size_t i;
	json_t *v;
	json_array_foreach(json_object_get(sel, "only"), i, v)
	{
		if (off < n)
			off += (size_t)snprintf(buf + off, n - off, "%s%s", i ? "," : "--only ",
			                        json_string_value(v));
	}
}

void tf_cli_runs_show_print(json_t *d)
{
	char when[32];
	tf_cli_fmt_time(json_object_get(d, "created_at"), when, sizeof(when));
	int orphaned = json_is_true(json_object_get(d, "orphaned"));
	const char *run = json_string_value(json_object_get(d, "id"));
	printf("run %s  pipeline %s  %s  created %s\n", run,
	       json_string_value(json_object_get(d, "pipeline")),
	       orphaned ? "orphaned" : json_string_value(json_object_get(d, "state")), when);
	if (orphaned)
		printf("  its process is gone: 'tpuflow runs resume %s' continues it\n", run);
	if (json_string_value(json_object_get(d, "error")))
		printf("  %s\n", json_string_value(json_object_get(d, "error")));
	char labels[1024];
	labels_text(json_object_get(d, "labels"), labels, sizeof(labels));
	if (labels[0])
		printf("  labels: %s\n", labels);
	char sel[512];
	selection_text(json_object_get(d, "selection"), sel, sizeof(sel));
	if (sel[0])
		printf("  selection: %s\n", sel);
	if (json_is_number(json_object_get(d, "cancelled_at"))) {
		tf_cli_fmt_time(json_object_get(d, "cancelled_at"), when, sizeof(when));
		printf("  cancelled at %s\n", when);
	}
	print_params(json_object_get(d, "param_values"));
	printf("\n  %-18s %-10s %-10s %3s %9s  %s\n", "STEP", "TYPE", "STATE", "ATT", "DURATION",
	       "DETAIL");
	size_t i;
	json_t *s;
	json_array_foreach(json_object_get(d, "steps"), i, s)
	{
		char dur[32] = "-", detail[512] = "";
		json_t *du = json_object_get(s, "duration");
		if (json_is_number(du))
			snprintf(dur, sizeof(dur), "%.2fs", json_number_value(du));
		size_t off = 0;
		const char *k;
		json_t *v;
		json_object_foreach(json_object_get(s, "metrics"), k, v)
		{
			if (json_is_number(v) && off < sizeof(detail))
				off += (size_t)snprintf(detail + off, sizeof(detail) - off,
				                        "%s=%.4g ", k, json_number_value(v));
		}
		const char *reason = json_string_value(json_object_get(s, "reason"));
		if (reason && off < sizeof(detail))
			snprintf(detail + off, sizeof(detail) - off, "%s", reason);
		printf("  %-18s %-10s %-10s %3lld %9s  %s\n",
		       json_string_value(json_object_get(s, "name")),
		       json_string_value(json_object_get(s, "type")),
		       json_string_value(json_object_get(s, "state")),
		       (long long)json_integer_value(json_object_get(s, "attempts")), dur, detail);
		size_t j;
		json_t *a;
		json_array_foreach(json_object_get(s, "attempts_detail"), j, a)
		{
			if (!strcmp(json_string_value(json_object_get(a, "state")), "succeeded"))
				continue;
			printf("  %18s attempt %lld %s", "",
			       (long long)json_integer_value(json_object_get(a, "n")),
			       json_string_value(json_object_get(a, "state")));
			if (json_string_value(json_object_get(a, "failure_class")))
				printf(" (%s)",
				       json_string_value(json_object_get(a, "failure_class")));
			if (json_string_value(json_object_get(a, "error")))
				printf(": %s", json_string_value(json_object_get(a, "error")));
			if (json_is_number(json_object_get(a, "backoff")) &&
			    json_number_value(json_object_get(a, "backoff")) > 0)
				printf("; waited %.2fs",
				       json_number_value(json_object_get(a, "backoff")));
			printf("\n");
		}
	}
	json_t *m = json_object_get(d, "model");
	if (m)
		printf("\n  model: %s version %lld\n",
		       json_string_value(json_object_get(m, "name")),
		       (long long)json_integer_value(json_object_get(m, "version")));
}

static int runs_show(struct tf_store *st, struct tf_cli *cli, const char *run)
{
	json_t *d = NULL;
	int rc = tf_run_describe(st, run, &d);
	if (rc) {
		fprintf(stderr, "tpuflow runs: %s\n", tf_store_errmsg(st));
		return TF_EXIT_SOFTWARE;
	}
	json_t *pv = tf_run_param_values(st, run, json_object_get(d, "params"));
	if (pv)
		json_object_set_new(d, "param_values", pv);
	if (cli->json) {
		tf_cli_print_json(stdout, d);
		json_decref(d);
		return TF_EXIT_OK;
	}
	tf_cli_runs_show_print(d);
	json_decref(d);
	return TF_EXIT_OK;
}

/* Length of the UTF-8 sequence at p (at most n bytes), 0 when it is not one (RFC 3629:
 * shortest form, no surrogates, at most U+10FFFF). */
static size_t utf8_seq(const unsigned char *p, size_t n)
{
	unsigned char c = p[0];
	size_t len = c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3
	                         : c >= 0xf0 && c <= 0xf4                  ? 4
	                                                                   : 0;
	if (len == 0 || len > n)
		return 0;
	unsigned char lo = 0x80, hi = 0xbf; /* the second byte's range */
	if (c == 0xe0)
		lo = 0xa0;
	else if (c == 0xed)
		hi = 0x9f;
	else if (c == 0xf0)
		lo = 0x90;
	else if (c == 0xf4)
		hi = 0x8f;
	for (size_t i = 1; i < len; i++)
		if (p[i] < (i == 1 ? lo : 0x80) || p[i] > (i == 1 ? hi : 0xbf))
			return 0;
	return len;
}

/* The log object `key` as an open file (a temporary copy, already unlinked), or NULL. */
static FILE *open_log(struct tf_objstore *os, const char *key)
{
	char tmp[] = "/tmp/tpuflow-log.XXXXXX";
	int fd = mkstemp(tmp);
	if (fd < 0)
		return NULL;
	close(fd);
	int rc = tf_objstore_get_file(os, key, tmp);
	FILE *in = rc ? NULL : fopen(tmp, "rb");
	unlink(tmp);
	return in;
}

/* Writes one UTF-8 sequence (or U+FFFD) to stdout, as JSON string content when `json`. */
static void put_text(const unsigned char *p, size_t k, int json)
{
	if (!json || k > 1 || (p[0] >= 0x20 && p[0] != '"' && p[0] != '\\')) {
		fwrite(p, 1, k, stdout);
		return;
	}
	if (p[0] == '"' || p[0] == '\\')
		printf("\\%c", p[0]);
	else if (p[0] == '\n')
		fputs("\\n", stdout);
	else if (p[0] == '\t')
		fputs("\\t", stdout);
	else
		printf("\\u%04x", p[0]);
}

/* Copies a log to stdout in pieces, memory small whatever its size: as text, or (json) as the
 * content of a JSON string. A log is bytes: each byte that does not start a UTF-8 sequence,
 * and each NUL, becomes U+FFFD (the replacement character), so one stray byte cannot hide a
 * log. Closes `in`. */
static void copy_log(FILE *in, int json)
{
	unsigned char buf[65536 + 4];
	size_t have = 0, n;
	int eof = 0;
	while (!eof) {
		n = fread(buf + have, 1, sizeof(buf) - 4 - have, in);
		eof = n == 0;
		have += n;
		/* a sequence cut by the end of this piece waits for the next one */
		size_t upto = eof ? have : have > 3 ? have - 3 : 0, i = 0;
		while (i < upto) {
			size_t k = buf[i] ? utf8_seq(buf + i, have - i) : 0;
			if (k) {
				put_text(buf + i, k, json);
				i += k;
			} else {
				fputs("\xef\xbf\xbd", stdout);
				i++;
			}
		}
		memmove(buf, buf + i, have - i);
		have -= i;
	}
	fclose(in);
}

/* `runs logs --json`: {run_id, events, logs: [{step, attempt, key, text}]}, each log's text
 * streamed from its file into the document (the logs are never all in memory). */
static void print_logs_json(const char *run, json_t *ev, json_t *logs, struct tf_objstore *os)
{
	json_t *id = json_string(run);
	char *ids = json_dumps(id, JSON_ENCODE_ANY);
	printf("{\n  \"run_id\": %s,\n  \"events\": ", ids);
	free(ids);
	json_decref(id);
	tf_cli_print_json(stdout, ev);
	printf("  ,\"logs\": [");
	size_t i, n = 0;
	json_t *e;
	json_array_foreach(logs, i, e)
	{
		FILE *in = open_log(os, json_string_value(json_object_get(e, "key")));
		if (!in)
			continue; /* not readable from the store: left out, as before */
		char *head = json_dumps(e, JSON_COMPACT | JSON_PRESERVE_ORDER);
		head[strlen(head) - 1] = '\0'; /* the object stays open for its text */
		printf("%s\n    %s, \"text\": \"", n++ ? "," : "", head);
		free(head);
		copy_log(in, 1);
		printf("\"}");
	}
	printf("\n  ]\n}\n");
}

static int runs_logs(struct tf_store *st, struct tf_cli *cli, const char *run, const char *step)
{
	json_t *ev = NULL, *d = NULL;
	int rc = tf_run_events(st, run, step, &ev);
	if (rc == 0)
		rc = tf_run_describe(st, run, &d);
	if (rc) {
		fprintf(stderr, "tpuflow runs: %s\n", tf_store_errmsg(st));
		json_decref(ev);
		return TF_EXIT_SOFTWARE;
	}
	struct tf_objstore *os = NULL;
	char err[512];
	const char *url = json_string_value(json_object_get(d, "storage"));
	if (url && tf_objstore_open(url, &os, err, sizeof(err)))
		os = NULL;
	json_t *logs = json_array();
	size_t i;
	json_t *s;
	int found = 0;
	json_array_foreach(json_object_get(d, "steps"), i, s)
	{
		const char *name = json_string_value(json_object_get(s, "name"));
		if (step && strcmp(step, name))
			continue;
		found = 1;
		size_t j;
		json_t *a;
		json_array_foreach(json_object_get(s, "attempts_detail"), j, a)
		{
			const char *key = json_string_value(json_object_get(a, "log"));
			if (key && os) /* streamed after the events */
				json_array_append_new(
				    logs, json_pack("{s:s, s:I, s:s}", "step", name, "attempt",
				                    json_integer_value(json_object_get(a, "n")), "key", key));
		}
	}
	if (step && !found) {
		fprintf(stderr, "tpuflow runs logs: run %s has no step '%s' (see 'tpuflow runs show %s')\n",
		        run, step, run);
		json_decref(ev);
		json_decref(logs);
		tf_objstore_free(os);
		json_decref(d);
		return TF_EXIT_NOTFOUND;
	}
	if (cli->json) {
		print_logs_json(run, ev, logs, os);
		json_decref(ev);
		json_decref(logs);
	} else {
		json_t *e;
		json_array_foreach(ev, i, e)
		{
			char when[32];
			tf_cli_fmt_time(json_object_get(e, "at"), when, sizeof(when));
			printf("%s  %-8s %-14s", when,
			       json_string_value(json_object_get(e, "kind")),
			       json_string_value(json_object_get(e, "step"))
			           ? json_string_value(json_object_get(e, "step"))
			           : "-");
			if (json_is_integer(json_object_get(e, "attempt")))
				printf(" #%lld", (long long)json_integer_value(
				                     json_object_get(e, "attempt")));
			if (json_string_value(json_object_get(e, "to")))
				printf(" %s -> %s",
				       json_string_value(json_object_get(e, "from"))
				           ? json_string_value(json_object_get(e, "from"))
				           : "(new)",
				       json_string_value(json_object_get(e, "to")));
			if (json_string_value(json_object_get(e, "message")))
				printf("  %s", json_string_value(json_object_get(e, "message")));
			printf("\n");
		}
		json_array_foreach(logs, i, e)
		{
			const char *key = json_string_value(json_object_get(e, "key"));
			printf("\n==> %s attempt %lld (%s) <==\n",
			       json_string_value(json_object_get(e, "step")),
			       (long long)json_integer_value(json_object_get(e, "attempt")), key);
			FILE *in = open_log(os, key);
			if (in)
				copy_log(in, 0);
			else
				printf("(log not readable from the store: %s)\n", tf_objstore_errmsg(os));
		}
		json_decref(ev);
		json_decref(logs);
	}
	tf_objstore_free(os);
	json_decref(d);
	return TF_EXIT_OK;
}

/* `runs cancel`: recorded in the database; the run's owner (this machine's `tpuflow run`,
 * `runs resume` or daemon) sees it at its next heartbeat and stops the run. */
static int runs_cancel(struct tf_store *st, const char *run)
{
	enum tf_run_state state;
	int rc = tf_run_request_cancel(st, run, &state);
	if (rc) {
		fprintf(stderr, "tpuflow runs cancel: %s\n", tf_store_errmsg(st));
		return exit_for_rc(rc);
	}
	int again = 0;
	switch (state) {
	case TF_RUN_RUNNING:
		tf_run_cancelled(st, run, &again);
		if (again)
			printf("run %s was cancelled and runs its finally steps: its finally steps "
			       "stop too within %.0f s\n",
			       run, TF_RUN_HEARTBEAT_S + 1);
		else
			printf("cancel of run %s requested: its process stops its steps within "
			       "%.0f s, then runs its finally steps (cancel again to stop those)\n",
			       run, TF_RUN_HEARTBEAT_S + 1);
		return TF_EXIT_OK;
	case TF_RUN_FAILED:
		printf("run %s is failed%s\n", run,
		       " (cancelled before it started, or it had already failed)");
		return TF_EXIT_OK;
	default:
		printf("run %s is %s: nothing runs to cancel\n", run, tf_run_state_name(state));
		return TF_EXIT_OK;
	}
}

int cmd_runs(int argc, char **argv, struct tf_cli *cli)
{
	enum {
		OPT_LIMIT = 1,
		OPT_PLAIN,
		OPT_FORCE,
		OPT_PIPELINE,
		OPT_STATE,
		OPT_SINCE,
		OPT_LABEL,
		OPT_DRY_RUN
	};
	static const struct option opts[] = {TF_CLI_COMMON_OPTIONS,
	                                     {"limit", required_argument, NULL, OPT_LIMIT},
	                                     {"plain", no_argument, NULL, OPT_PLAIN},
	                                     {"force", no_argument, NULL, OPT_FORCE},
	                                     {"pipeline", required_argument, NULL, OPT_PIPELINE},
	                                     {"state", required_argument, NULL, OPT_STATE},
	                                     {"since", required_argument, NULL, OPT_SINCE},
	                                     {"label", required_argument, NULL, OPT_LABEL},
	                                     {"dry-run", no_argument, NULL, OPT_DRY_RUN},
	                                     {0, 0, 0, 0}};
	struct tf_runs_filter filter = {.limit = 50};
	int c, plain = 0, force = 0, dry_run = 0, ret = TF_EXIT_OK, rc;
	char err[1024] = "", run[32];
	const char *home = cli->home;
	struct tf_store *st = cli->db; /* NEED_DB */

	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		if (c == 'h') {
			runs_usage(stdout);
			return TF_EXIT_OK;
		} else if (c == OPT_LIMIT) {
			long long n;
			int e = tf_cli_parse_int("runs", "--limit", optarg, 0, INT_MAX, &n);
			if (e)
				return e;
			filter.limit = (int)n;
		} else if (c == OPT_PIPELINE) {
			filter.pipeline = optarg;
		} else if (c == OPT_STATE) {
			enum tf_run_state rs;
			if (strcmp(optarg, "orphaned") && tf_run_state_parse(optarg, &rs))
				return tf_cli_usage_error("runs",
				                          "--state wants pending, running, succeeded, "
				                          "failed, interrupted or orphaned, not '%s'",
				                          optarg);
			filter.state = optarg;
		} else if (c == OPT_SINCE) {
			if (tf_cli_parse_since("runs", "--since", optarg, &filter.since))
				return TF_EXIT_USAGE;
		} else if (c == OPT_LABEL) {
			char *eq = strchr(optarg, '=');
			if (eq)
				*eq = '\0';
			if (!*optarg)
				return tf_cli_usage_error("runs", "--label wants NAME or NAME=VALUE");
			filter.label_key = optarg;
			filter.label_value = eq ? eq + 1 : NULL;
		} else if (c == OPT_DRY_RUN) {
			dry_run = 1;
		} else if (c == OPT_PLAIN) {
			plain = 1;
		} else if (c == OPT_FORCE) {
			force = 1;
		} else if (!tf_cli_common_option(cli, c, optarg)) {
			return tf_cli_usage_error("runs", "unknown option");
		}
	}
	if (optind >= argc)
		return tf_cli_usage_error(
		    "runs", "expected list, show, logs, watch, resume, retry, cancel or delete");
	const char *sub = argv[optind];
	const char *arg = optind + 1 < argc ? argv[optind + 1] : NULL;
	static const char *const verbs[] = {"list",  "show",   "logs",  "watch",
	                                    "resume", "retry", "cancel", "delete"};
	size_t vi = 0;
	while (vi < TF_ARRAY_LEN(verbs) && strcmp(sub, verbs[vi]))
		vi++;
	if (vi == TF_ARRAY_LEN(verbs))
		return tf_cli_usage_error(
		    "runs", "unknown subcommand '%s': use list, show, logs, watch, resume, retry, "
		            "cancel or delete",
		    sub);
	if (strcmp(sub, "list") && !arg)
		return tf_cli_usage_error("runs", "'%s' needs a run id", sub);
	if (!strcmp(sub, "list")) {
		ret = runs_list(st, cli, &filter);
		goto out;
	}
	if (!strcmp(sub, "delete")) {
		ret = tf_cli_runs_delete(st, cli, home, argv + optind + 1, argc - optind - 1,
		                         dry_run);
		goto out;
	}
	rc = tf_run_find(st, arg, run);
	if (rc) {
		ret = tf_cli_run_unresolved("runs", arg, rc);
		goto out;
	}
	if (!strcmp(sub, "show")) {
		ret = runs_show(st, cli, run);
	} else if (!strcmp(sub, "logs")) {
		ret = runs_logs(st, cli, run, optind + 2 < argc ? argv[optind + 2] : NULL);
	} else if (!strcmp(sub, "cancel")) {
		ret = runs_cancel(st, run);
	} else if (!strcmp(sub, "watch")) {
		ret = follow(cli, run, plain, 0);
	} else { /* resume or retry: the verbs are checked above */
		struct tf_engine_opts o = {.home = home};
		o.out = cli->json ? stderr : stdout;
		o.tty = !plain && isatty(fileno(o.out)) && getenv("TERM") &&
		        strcmp(getenv("TERM"), "dumb");
		struct tf_engine_result res = {0};
		unsigned flags =
		    (!strcmp(sub, "retry") ? TF_ENGINE_RETRY : 0) | (force ? TF_ENGINE_FORCE : 0);
		struct tf_engine_req rq = {.run_id = run, .flags = flags};
		struct tf_diag_list diags = {0};
		rc = drive_here(&o, &rq, &diags, &res, err, sizeof(err));
		tf_diag_print(&diags, stderr);
		tf_diag_list_release(&diags);
		if (rc) {
			fprintf(stderr, "tpuflow runs %s: %s\n", sub, err);
			ret = exit_for_rc(rc);
			goto out;
		}
		ret = finish(cli, &res);
	}
out:
	return ret;
}

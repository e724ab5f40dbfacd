/* cmd_sched.c — `tpuflow slices` (the pool map, queue and utilization) and `tpuflow sched
 * simulate` (the scheduler replaying a seeded workload against a pool, FIFO as the baseline). */
#include "cli/cli.h"
#include "common/common.h"
#include "orchestrator/broker.h"
#include "orchestrator/slices.h"
#include "scheduler/sched.h"
#include "scheduler/sim.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int tf_cli_slices_print(struct tf_sched *s, double now, int json, FILE *out)
{
	if (json) {
		json_t *doc = tf_sched_describe_json(s, now);
		int rc = tf_cli_print_json(out, doc);
		json_decref(doc);
		if (rc)
			return rc;
	} else {
		char *txt = tf_sched_describe_text(s, now);
		fputs(txt, out);
		free(txt);
	}
	return TF_EXIT_OK;
}

/* The attempts `tpuflow run` processes recorded, for people: running ones with their box and
 * time so far, the ones left off the map and why, and slice-seconds of finished ones. */
static void recorded_text(json_t *rec, FILE *out)
{
	json_t *running = json_object_get(rec, "running"),
	       *skipped = json_object_get(rec, "skipped");
	json_t *acct = json_object_get(rec, "accounting"), *v;
	const char *db = json_string_value(json_object_get(rec, "database"));
	size_t i;
	if (!db) {
		fprintf(out, "\nno state database in this home yet: no train attempts recorded\n");
		return;
	}
	fprintf(out, "\ntrain attempts holding a slice now (%s): %zu\n", db,
	        json_array_size(running));
	if (json_array_size(running))
		fprintf(out, "  %-24s %-14s %-3s %-8s %-22s %5s %10s %12s\n", "RUN", "STEP", "ATT",
		        "SLICE", "PLACEMENT", "CHIPS", "RUNNING", "SLICE-S");
	json_array_foreach(running, i, v)
	{
		json_t *box = json_object_get(v, "box"), *o = json_object_get(box, "origin"),
		       *sh = json_object_get(box, "shape");
		char place[64];
		snprintf(place, sizeof(place), "%s %lld,%lld,%lld+%lldx%lldx%lld",
		         json_string_value(json_object_get(v, "pool")),
		         json_integer_value(json_array_get(o, 0)),
		         json_integer_value(json_array_get(o, 1)),
		         json_integer_value(json_array_get(o, 2)),
		         json_integer_value(json_array_get(sh, 0)),
		         json_integer_value(json_array_get(sh, 1)),
		         json_integer_value(json_array_get(sh, 2)));
		fprintf(out, "  %-24s %-14s %-3lld %-8s %-22s %5lld %9.0fs %12.1f\n",
		        json_string_value(json_object_get(v, "run")),
		        json_string_value(json_object_get(v, "step")),
		        json_integer_value(json_object_get(v, "attempt")),
		        json_string_value(json_object_get(v, "slice")), place,
		        json_integer_value(json_object_get(v, "chips")),
		        json_number_value(json_object_get(v, "running_seconds")),
		        json_number_value(json_object_get(v, "slice_seconds")));
	}
	json_t *slurm = json_object_get(rec, "slurm");
	if (json_array_size(slurm))
		fprintf(
		    out, "steps running as Slurm jobs: %zu\n  %-24s %-14s %-3s %-10s %-11s %s\n",
		    json_array_size(slurm), "RUN", "STEP", "ATT", "SLURM-JOB", "STATE", "NODES");
	json_array_foreach(slurm, i, v)
	{
		const char *nodes = json_string_value(json_object_get(v, "nodes"));
		const char *state = json_string_value(json_object_get(v, "state"));
		fprintf(out, "  %-24s %-14s %-3lld %-10lld %-11s %s\n",
		        json_string_value(json_object_get(v, "run")),
		        json_string_value(json_object_get(v, "step")),
		        json_integer_value(json_object_get(v, "attempt")),
		        json_integer_value(json_object_get(v, "slurm_job")), state ? state : "-",
		        nodes ? nodes : "(pending)");
	}
	size_t nw = json_array_size(json_object_get(rec, "waiting"));
	if (nw)
		fprintf(out, "train attempts waiting for a slice (in their run's pool): %zu\n", nw);
	json_array_foreach(json_object_get(rec, "waiting"), i, v)
	    fprintf(out, "  %s/%s attempt %lld %s waiting %.0fs: %s\n",
	            json_string_value(json_object_get(v, "run")),
	            json_string_value(json_object_get(v, "step")),
	            json_integer_value(json_object_get(v, "attempt")),
	            json_string_value(json_object_get(v, "slice")),
	            json_number_value(json_object_get(v, "waiting_seconds")),
	            json_string_value(json_object_get(v, "reason")));
	size_t nskip = json_array_size(skipped);
	json_array_foreach(skipped, i, v)
	{
		if (i == 10) {
			fprintf(out, "  note: %zu more attempts not shown (see --json)\n",
			        nskip - 10);
			break;
		}
		fprintf(out, "  note: run %s step %s attempt %lld not shown: %s\n",
		        json_string_value(json_object_get(v, "run")),
		        json_string_value(json_object_get(v, "step")),
		        json_integer_value(json_object_get(v, "attempt")),
		        json_string_value(json_object_get(v, "reason")));
	}
	fprintf(out, "\nslice-seconds of finished attempts: %.1f (%.1f chip-seconds)\n",
	        json_number_value(json_object_get(acct, "slice_seconds")),
	        json_number_value(json_object_get(acct, "chip_seconds")));
	json_array_foreach(json_object_get(acct, "projects"), i, v)
	    fprintf(out, "  project %-18s %4lld attempts %12.1f slice-s %12.1f chip-s\n",
	            json_string_value(json_object_get(v, "project")),
	            json_integer_value(json_object_get(v, "attempts")),
	            json_number_value(json_object_get(v, "slice_seconds")),
	            json_number_value(json_object_get(v, "chip_seconds")));
	size_t nruns = json_array_size(json_object_get(acct, "runs"));
	json_array_foreach(json_object_get(acct, "runs"), i, v)
	{
		/* the newest 20 runs */
		if (nruns > 20 && i < nruns - 20)
			continue;
		const char *pl = json_string_value(json_object_get(v, "pipeline"));
		fprintf(out, "  run %-24s %-16s %4lld attempts %12.1f slice-s %12.1f chip-s\n",
		        json_string_value(json_object_get(v, "run")), pl ? pl : "?",
		        json_integer_value(json_object_get(v, "attempts")),
		        json_number_value(json_object_get(v, "slice_seconds")),
		        json_number_value(json_object_get(v, "chip_seconds")));
	}
	if (nruns > 20)
		fprintf(out, "  (%zu older runs in --json)\n", nruns - 20);
}

static void slices_usage(FILE *f)
{
	char def[64];
	tf_sched_default_pool("v4", def, sizeof(def));
	fprintf(
	    f,
	    "usage: tpuflow slices [--pool SPEC]... [--submit SLICE[@PROJECT[@PRIO]]]... "
	    "[--json]\n"
	    "       tpuflow slices fail|repair [POOL:]X,Y,Z [--reason TEXT]\n"
	    "\n"
	    "Shows each TPU pool as a map of its chips (which job holds each), the queue with\n"
	    "the reason every job waits, and utilization. The train attempts of 'tpuflow run'\n"
	    "processes that hold a slice now are read from the state database (--home) and\n"
	    "drawn at the chips the shared broker gave them, named RUN/STEP; finished\n"
	    "attempts are summed into slice-seconds per run and per project.\n"
	    "\n"
	    "  --pool SPEC     a pool GEN:AxBxC, e.g. v4:4x4x8 or v5e:16x16 (repeatable;\n"
	    "                  default $TPUFLOW_POOLS, comma-separated, else %s; the pool\n"
	    "                  of a recorded attempt is added when none matches)\n"
	    "  --submit SLICE  place a job of this slice (v4-8, v4:2x2x4, ...) before showing,\n"
	    "                  optionally for a project and priority 0-9: v4-32@research@5\n"
	    "  --home DIR      state home to read (default $TPUFLOW_HOME, else ./.tpuflow)\n"
	    "  --json          one JSON document: pools with per-chip occupancy, running jobs,\n"
	    "                  queue with reasons, projects' chip-seconds and slice-seconds,\n"
	    "                  and under \"recorded\" the attempts read from the database\n",
	    def);
}

/* `tpuflow slices fail|repair [POOL:]X,Y,Z [--reason TEXT]`: recorded in the database, so
 * the broker of every process on the home acts on it at its next decision. */
static int slices_chip(int argc, char **argv, struct tf_cli *cli)
{
	static const struct option opts[] = {
	    TF_CLI_COMMON_OPTIONS, {"reason", required_argument, NULL, 'r'}, {NULL, 0, NULL, 0}};
	const char *sub = argv[0], *reason = "marked failed with 'tpuflow slices fail'";
	int c;
	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		if (tf_cli_common_option(cli, c, optarg))
			continue;
		if (c == 'r') {
			reason = optarg;
		} else if (c == 'h') {
			printf(
			    "usage: tpuflow slices %s [POOL:]X,Y,Z [--reason TEXT] [--home DIR]\n\n"
			    "fail: the chip is out of service: a train attempt holding it is "
			    "asked\n"
			    "to give its slice back (failure class infra) and is placed again on\n"
			    "healthy chips; nothing is placed on it until 'tpuflow slices "
			    "repair'.\n"
			    "POOL is a pool name as 'tpuflow slices' shows it (default v4).\n",
			    sub);
			return TF_EXIT_OK;
		} else {
			return tf_cli_usage_error("slices", "unknown option");
		}
	}
	if (optind + 1 != argc)
		return tf_cli_usage_error("slices", "%s wants one chip, like v4:0,1,0", sub);
	char pool[40] = "v4", rest[64];
	const char *chip = argv[optind], *colon = strchr(chip, ':');
	if (colon) {
		snprintf(pool, sizeof(pool), "%.*s", (int)(colon - chip), chip);
		chip = colon + 1;
	}
	int xyz[3], end = 0;
	snprintf(rest, sizeof(rest), "%s", chip);
	if (sscanf(rest, "%d,%d,%d%n", &xyz[0], &xyz[1], &xyz[2], &end) != 3 || rest[end] ||
	    xyz[0] < 0 || xyz[1] < 0 || xyz[2] < 0 || !pool[0])
		return tf_cli_usage_error(
		    "slices", "bad chip '%s': use [POOL:]X,Y,Z, e.g. v4:0,1,0", argv[optind]);
	int rc = 0;
	struct tf_store *st = tf_cli_open_store(cli, "slices", &rc);
	if (!st)
		return rc;
	int fail = !strcmp(sub, "fail");
	rc = fail ? tf_broker_chip_fail(st, pool, xyz, tf_now_wall(), reason)
	          : tf_broker_chip_repair(st, pool, xyz);
	if (rc == -ENOENT)
		fprintf(stderr, "tpuflow slices: chip %s:%d,%d,%d is not marked failed\n", pool,
		        xyz[0], xyz[1], xyz[2]);
	else if (rc)
		fprintf(stderr, "tpuflow slices: %s\n", tf_store_errmsg(st));
	else
		printf("chip %s:%d,%d,%d %s\n", pool, xyz[0], xyz[1], xyz[2],
		       fail ? "marked failed" : "repaired");
	tf_store_close(st);
	return rc == -ENOENT ? TF_EXIT_USAGE : rc ? TF_EXIT_UNAVAILABLE : TF_EXIT_OK;
}

int cmd_slices(int argc, char **argv, struct tf_cli *cli)
{
	if (argc > 1 && (!strcmp(argv[1], "fail") || !strcmp(argv[1], "repair")))
		return slices_chip(argc - 1, argv + 1, cli);
	static const struct option opts[] = {TF_CLI_COMMON_OPTIONS,
	                                     {"pool", required_argument, NULL, 'p'},
	                                     {"submit", required_argument, NULL, 's'},
	                                     {NULL, 0, NULL, 0}};
	const char *pools[16], *subs[256];
	int npools = 0, nsubs = 0, c, rc = TF_EXIT_OK;
	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		if (tf_cli_common_option(cli, c, optarg))
			continue;
		switch (c) {
		case 'p':
			if (npools == (int)TF_ARRAY_LEN(pools))
				return tf_cli_usage_error(argv[0], "at most %zu pools",
				                          TF_ARRAY_LEN(pools));
			pools[npools++] = optarg;
			break;
		case 's':
			if (nsubs == (int)TF_ARRAY_LEN(subs))
				return tf_cli_usage_error(argv[0], "at most %zu jobs",
				                          TF_ARRAY_LEN(subs));
			subs[nsubs++] = optarg;
			break;
		case 'h':
			slices_usage(stdout);
			return TF_EXIT_OK;
		default:
			return tf_cli_usage_error(argv[0], "unknown option");
		}
	}
	if (optind < argc)
		return tf_cli_usage_error(argv[0], "unexpected argument '%s'", argv[optind]);
	char err[512];
	struct tf_slices_view view = {0};
	double now = tf_now_wall();
	int lrc = tf_slices_view_load(cli->home, pools, npools, now, &view, err, sizeof(err));
	if (lrc < 0) {
		fprintf(stderr, "tpuflow slices: %s\n", err);
		return lrc == -EINVAL   ? TF_EXIT_USAGE
		       : lrc == -EPROTO ? TF_EXIT_CONFIG
		                        : TF_EXIT_UNAVAILABLE;
	}
	struct tf_sched *s = view.sched;
	for (int i = 0; i < nsubs; i++) {
		char spec[128], *project = NULL, *prio = NULL;
		snprintf(spec, sizeof(spec), "%s", subs[i]);
		project = strchr(spec, '@');
		if (project) {
			*project++ = '\0';
			prio = strchr(project, '@');
			if (prio)
				*prio++ = '\0';
		}
		struct tf_sched_job_spec js = {.slice = spec,
		                               .project = project,
		                               .priority = prio ? atoi(prio) : 0,
		                               .preemptible = 1};
		int id;
		if (tf_sched_submit(s, &js, 0, &id, err, sizeof(err)) < 0) {
			fprintf(stderr, "tpuflow slices: %s\n", err);
			rc = TF_EXIT_USAGE;
			goto out;
		}
	}
	if (nsubs) {
		struct tf_sched_decisions d = {0};
		tf_sched_tick(s, 0, &d);
		tf_sched_decisions_release(&d);
	}
	if (cli->json) {
		json_t *doc = tf_sched_describe_json(s, 0);
		json_object_set(doc, "recorded", view.recorded);
		rc = tf_cli_print_json(stdout, doc);
		json_decref(doc);
	} else {
		rc = tf_cli_slices_print(s, 0, 0, stdout);
		recorded_text(view.recorded, stdout);
	}
out:
	tf_slices_view_release(&view);
	return rc;
}

static void simulate_usage(FILE *f)
{
	fprintf(
	    f,
	    "usage: tpuflow sched simulate [--pool SPEC] [--jobs N] [--seed S]\n"
	    "                              [--policy fifo|backfill] [--load L] [--failures N]\n"
	    "                              [--json]\n"
	    "\n"
	    "Replays a seeded mix of gang jobs (slice sizes, priorities, projects with quotas\n"
	    "and fair-share weights, durations) through the scheduler on a simulated clock and\n"
	    "reports decisions per second of scheduler time, utilization, wait per priority,\n"
	    "preemptions and fragmentation. FIFO without backfill runs on the same workload as\n"
	    "the baseline.\n"
	    "\n"
	    "  --pool SPEC       pool to schedule on (default v4:16x16x16, a 4096-chip pod)\n"
	    "  --jobs N          jobs in the workload (default 10000)\n"
	    "  --seed S          workload seed (default 1)\n"
	    "  --policy P        backfill (default) or fifo\n"
	    "  --load L          offered load: work / (chips x arrival span) (default 1.2)\n"
	    "  --failures N      chip failures injected, each repaired an hour later (default 0)\n"
	    "  --json            one JSON document\n");
}

static json_t *result_json(const struct tf_sched_sim_result *r)
{
	json_t *w = json_object();
	for (int p = TF_SCHED_PRIO_MAX; p >= 0; p--) {
		if (!r->wait_jobs[p])
			continue;
		char k[16];
		snprintf(k, sizeof(k), "%d", p);
		json_object_set_new(w, k,
		                    json_pack("{s:i, s:f, s:f}", "jobs", r->wait_jobs[p],
		                              "mean_seconds", r->wait_mean[p], "p95_seconds",
		                              r->wait_p95[p]));
	}
	json_t *o = json_pack(
	    "{s:s, s:i, s:i, s:I, s:I, s:f, s:f, s:f, s:f, s:f, s:i, s:i, s:i, "
	    "s:f}",
	    "policy", tf_sched_policy_name(r->policy), "jobs", r->jobs, "completed", r->completed,
	    "decisions", (json_int_t)r->decisions, "ticks", (json_int_t)r->ticks,
	    "scheduler_seconds", r->sched_seconds, "decisions_per_second", r->decisions_per_second,
	    "makespan_seconds", r->makespan, "utilization", r->utilization, "busy_fraction",
	    r->busy_fraction, "preemptions", r->preemptions, "kills", r->kills, "infra_failures",
	    r->infra_failures, "fragmentation", r->fragmentation);
	json_object_set_new(o, "wait_by_priority", w);
	char dg[17];
	snprintf(dg, sizeof(dg), "%016llx", (unsigned long long)r->trace_digest);
	json_object_set_new(o, "trace_digest", json_string(dg));
	return o;
}

static void result_text(const struct tf_sched_sim_result *r)
{
	printf("%s: %d/%d jobs done, %llu decisions in %.3f s of scheduler time = %.0f "
	       "decisions/s (%llu ticks)\n",
	       tf_sched_policy_name(r->policy), r->completed, r->jobs,
	       (unsigned long long)r->decisions, r->sched_seconds, r->decisions_per_second,
	       (unsigned long long)r->ticks);
	printf("  utilization %.1f%% (busy %.1f%%), makespan %.0f s, fragmentation %.3f, "
	       "preemptions %d, kills %d, infra failures %d\n",
	       100 * r->utilization, 100 * r->busy_fraction, r->makespan, r->fragmentation,
	       r->preemptions, r->kills, r->infra_failures);
	printf("  decision trace digest %016llx\n", (unsigned long long)r->trace_digest);
	for (int p = TF_SCHED_PRIO_MAX; p >= 0; p--)
		if (r->wait_jobs[p])
			printf("  priority %d: %5d jobs, wait mean %8.0f s, p95 %8.0f s\n", p,
			       r->wait_jobs[p], r->wait_mean[p], r->wait_p95[p]);
}

/* The scheduler's calls are timed in this thread's CPU seconds: on a shared machine the
 * monotonic clock also counted the time other processes held the CPU (a loaded 2-core VM
 * showed a tenth of the rate for the same work). */
static double thread_cpu_seconds(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int sched_simulate(int argc, char **argv, struct tf_cli *cli)
{
	static const struct option opts[] = {TF_CLI_COMMON_OPTIONS,
	                                     {"pool", required_argument, NULL, 'p'},
	                                     {"jobs", required_argument, NULL, 'n'},
	                                     {"seed", required_argument, NULL, 's'},
	                                     {"policy", required_argument, NULL, 'P'},
	                                     {"load", required_argument, NULL, 'l'},
	                                     {"failures", required_argument, NULL, 'f'},
	                                     {NULL, 0, NULL, 0}};
	struct tf_sched_sim_opts o = {.pool = "v4:16x16x16",
	                              .jobs = 10000,
	                              .seed = 1,
	                              .policy = TF_SCHED_BACKFILL,
	                              .load = 1.2,
	                              .clock = thread_cpu_seconds};
	int c;
	char *end;
	long long n;
	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		if (tf_cli_common_option(cli, c, optarg))
			continue;
		switch (c) {
		case 'p':
			o.pool = optarg;
			break;
		case 'n':
			if (tf_cli_parse_int("sched simulate", "--jobs", optarg, 1, 10000000, &n))
				return TF_EXIT_USAGE;
			o.jobs = (int)n;
			break;
		case 's':
			o.seed = strtoull(optarg, &end, 10);
			if (*end || !*optarg)
				return tf_cli_usage_error("sched simulate",
				                          "--seed '%s' must be a number", optarg);
			break;
		case 'P':
			if (tf_sched_policy_parse(optarg, &o.policy) < 0)
				return tf_cli_usage_error(
				    "sched simulate", "unknown --policy '%s': use fifo or backfill",
				    optarg);
			break;
		case 'l':
			o.load = strtod(optarg, &end);
			if (*end || !(o.load > 0.01 && o.load < 100))
				return tf_cli_usage_error(
				    "sched simulate", "--load '%s' must be in 0.01..100", optarg);
			break;
		case 'f':
			if (tf_cli_parse_int("sched simulate", "--failures", optarg, 0, 1000000,
			                     &n))
				return TF_EXIT_USAGE;
			o.failures = (int)n;
			break;
		case 'h':
			simulate_usage(stdout);
			return TF_EXIT_OK;
		default:
			return tf_cli_usage_error("sched simulate", "unknown option");
		}
	}
	if (optind < argc)
		return tf_cli_usage_error("sched simulate", "unexpected argument '%s'",
		                          argv[optind]);
	struct tf_sched_sim_result main_r, base_r;
	char err[256];
	if (tf_sched_simulate(&o, &main_r, err, sizeof(err)) < 0) {
		fprintf(stderr, "tpuflow sched simulate: %s\n", err);
		return TF_EXIT_USAGE;
	}
	int have_base = o.policy != TF_SCHED_FIFO;
	if (have_base) {
		struct tf_sched_sim_opts b = o;
		b.policy = TF_SCHED_FIFO;
		tf_sched_simulate(&b, &base_r, err, sizeof(err));
	}
	if (cli->json) {
		json_t *doc = json_pack(
		    "{s:s, s:i, s:I, s:s, s:f, s:i, s:f, s:f}", "pool", o.pool, "jobs", o.jobs,
		    "seed", (json_int_t)o.seed, "policy", tf_sched_policy_name(o.policy), "load",
		    o.load, "failures", o.failures, "decisions_per_second",
		    main_r.decisions_per_second, "utilization", main_r.utilization);
		json_object_set_new(doc, "result", result_json(&main_r));
		if (have_base) {
			json_object_set_new(doc, "baseline", result_json(&base_r));
			json_object_set_new(doc, "utilization_vs_fifo",
			                    json_real(base_r.utilization > 0
			                                  ? main_r.utilization / base_r.utilization
			                                  : 0));
		}
		tf_cli_print_json(stdout, doc);
		json_decref(doc);
		return TF_EXIT_OK;
	}
	printf("pool %s, %d jobs, seed %llu, offered load %.2f, %d chip failures\n", o.pool, o.jobs,
	       (unsigned long long)o.seed, o.load, o.failures);
	result_text(&main_r);
	if (have_base) {
		result_text(&base_r);
		printf("backfill vs fifo: utilization x%.3f, makespan x%.3f\n",
		       base_r.utilization > 0 ? main_r.utilization / base_r.utilization : 0,
		       base_r.makespan > 0 ? main_r.makespan / base_r.makespan : 0);
	}
	return TF_EXIT_OK;
}

int cmd_sched(int argc, char **argv, struct tf_cli *cli)
{
	if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		FILE *f = argc < 2 ? stderr : stdout;
		fprintf(f, "usage: tpuflow sched simulate [OPTIONS]   (see 'tpuflow sched simulate "
		           "--help')\n");
		return argc < 2 ? TF_EXIT_USAGE : TF_EXIT_OK;
	}
	if (!strcmp(argv[1], "simulate"))
		return sched_simulate(argc - 1, argv + 1, cli);
	return tf_cli_usage_error("sched", "unknown subcommand '%s': use simulate", argv[1]);
}

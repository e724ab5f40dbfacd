/* dag.c — the orchestrator's own overhead: a 1000-step no-op DAG (a chain, then a fan-out)
 * run by the engine with durable state (SQLite WAL, each commit synced before it returns, one
 * commit per batch), steps running in-process. Prints wall time, per-step overhead and the
 * step-to-step latency (a dependent step's start minus its upstream's end) p50/p99. Then what users
 * run: real `shell` steps (/usr/bin/touch) through `tpuflow run --plain` (the binary named by
 * TPUFLOW_BIN, else build/tpuflow), a 200- and a STEPS-step chain and a STEPS-step fan-out,
 * each beside Snakemake (--cores 2) on the same DAG of `touch` jobs when `snakemake` is
 * installed (`make bench` installs it; the tests never use it), TF_BENCH_REPS rounds each
 * (default 3) with medians and ranges, and for the chains the floor measured in the same
 * rounds (posix_spawn+waitpid of the same `touch`, with and without a fresh directory per
 * step), what each adds over it, and Snakemake over it (the most any orchestrator starting a
 * process per step could reach here); then a 10*STEPS-step fan-out against a STEPS-step one
 * (per-step cost against width); TF_BENCH_DAG=width runs only that comparison,
 * TF_BENCH_DAG=chain only the two chains of shell steps beside Snakemake's. TF_BENCH_BASELINE=BIN
 * runs an earlier build in the same rounds (before and after in one run).
 *
 *   build/bench/dag [STEPS]      (default 1000)
 */
#include "common/common.h"
#include "orchestrator/engine.h"

#include <jansson.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static double *t_start, *t_end;
static int nsteps;

static int noop_kind(struct tf_step_run *r)
{
	double now = tf_now_monotonic();
	int i = atoi(r->step + 1); /* steps are named sN */
	if (i >= 0 && i < nsteps) {
		t_start[i] = now;
		t_end[i] = tf_now_monotonic();
	}
	return 0;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double pct(double *v, int n, double p)
{
	qsort(v, (size_t)n, sizeof(*v), cmp);
	int k = (int)(p * (n - 1) + 0.5);
	return v[k];
}

static void write_pipeline(const char *path, int n, int fanout)
{
	FILE *f = fopen(path, "w");
	if (!f) {
		perror(path);
		exit(1);
	}
	fprintf(f, "name: bench-%s\nsteps:\n", fanout ? "fanout" : "chain");
	for (int i = 0; i < n; i++) {
		fprintf(f, "  - {name: s%d, type: shell, with: {argv: [noop]}", i);
		if (i > 0)
			fprintf(f, ", needs: [s%d]", fanout ? 0 : i - 1);
		fprintf(f, "}\n");
	}
	fclose(f);
}

static double run(const char *home, int n, int fanout, int workers)
{
	struct tf_engine_opts o = {.home = home, .workers = workers};
	o.kinds[TF_STEP_SHELL] = noop_kind;
	struct tf_diag_list diags = {0};
	struct tf_engine_result res = {0};
	char err[512], path[256];
	snprintf(path, sizeof(path), "%s.yaml", home);
	write_pipeline(path, n, fanout);
	double t0 = tf_now_monotonic();
	int rc = tf_engine_run_file(&o, path, NULL, 0, &diags, &res, err, sizeof(err));
	double wall = tf_now_monotonic() - t0;
	if (rc || res.state != TF_RUN_SUCCEEDED) {
		tf_diag_print(&diags, stderr);
		fprintf(stderr, "dag: run failed: %s\n", err);
		exit(1);
	}
	tf_diag_list_release(&diags);
	json_decref(res.summary);
	return wall;
}

/* Snakemake on the same DAG of `touch` jobs (a chain, or one root and n - 1 children), with
 * --cores 2 (both cores of the machine, as tpuflow uses them). Wall seconds, -1 when snakemake
 * is missing or fails. */
static double snakemake_dag(const char *dir, int n, int fanout)
{
	char cmd[1024];
	snprintf(cmd, sizeof(cmd), "command -v snakemake >/dev/null 2>&1");
	if (system(cmd) != 0)
		return -1;
	snprintf(cmd, sizeof(cmd), "%s/Snakefile", dir);
	FILE *f = fopen(cmd, "w");
	if (!f)
		return -1;
	/* a chain of n rules is resolved recursively: Python's default limit (1000) stops
	 * Snakemake at ~500 rules ("RecursionError ... maximum recursion depth exceeded") */
	fprintf(f, "import sys\nsys.setrecursionlimit(100000)\n");
	if (fanout)
		fprintf(f, "rule all:\n    input: [\"f%%d\" %% i for i in range(1, %d)]\n", n);
	else
		fprintf(f, "rule all:\n    input: \"f%d\"\n", n - 1);
	fprintf(f, "rule r0:\n    output: \"f0\"\n    shell: \"touch {output}\"\n");
	for (int i = 1; i < n; i++)
		fprintf(f,
		        "rule r%d:\n    input: \"f%d\"\n    output: \"f%d\"\n    shell: \"touch "
		        "{output}\"\n",
		        i, fanout ? 0 : i - 1, i);
	fclose(f);
	snprintf(cmd, sizeof(cmd), "cd %s && snakemake --cores 2 --quiet >/dev/null 2>&1", dir);
	double t0 = tf_now_monotonic();
	int rc = system(cmd);
	double wall = tf_now_monotonic() - t0;
	return rc == 0 ? wall : -1;
}

/* What users run: `tpuflow run FILE --plain` (the binary, a home on this disk) of n real
 * `shell` steps, each running /usr/bin/touch on its own file. Wall seconds, -1 on failure. */
static double tpuflow_shell_dag(const char *bin, const char *dir, int n, int fanout)
{
	char path[700], cmd[2048];
	snprintf(path, sizeof(path), "%s/shell.yaml", dir);
	FILE *f = fopen(path, "w");
	if (!f)
		return -1;
	/* the directory once, as a param: 10,000 steps stay under the 1 MiB pipeline limit */
	fprintf(f, "name: bench-shell-%s\nparams:\n  d: {type: string, default: '%s'}\nsteps:\n",
	        fanout ? "fanout" : "chain", dir);
	for (int i = 0; i < n; i++) {
		fprintf(f,
		        "  - {name: s%d, type: shell, with: {argv: [/usr/bin/touch, "
		        "'${params.d}/f%d']}",
		        i, i);
		if (i > 0)
			fprintf(f, ", needs: [s%d]", fanout ? 0 : i - 1);
		fprintf(f, "}\n");
	}
	fclose(f);
	snprintf(cmd, sizeof(cmd), "'%s' --home '%s/home' run '%s' --plain >/dev/null 2>&1", bin,
	         dir, path);
	double t0 = tf_now_monotonic();
	int rc = system(cmd);
	double wall = tf_now_monotonic() - t0;
	return rc == 0 ? wall : -1;
}

/* The floor of a process-per-step chain on this machine, measured beside the orchestrators:
 * n times, one after the other, what a chain step cannot do without — posix_spawn of the same
 * `/usr/bin/touch FILE` with the same environment as tpuflow gives its steps (this process's,
 * plus the eight TPUFLOW_* variables), in the step's working directory, then waitpid. With
 * `fresh_dir`, each step first makes a fresh directory to run in (as every orchestrator that
 * gives a step its own working directory must, tpuflow among them); without, all run in one.
 * Wall seconds, -1 on failure. */
static double spawn_floor(const char *dir, int n, int fresh_dir)
{
	size_t nenv = 0;
	for (char **e = environ; *e; e++)
		nenv++;
	char **envp = tf_xcalloc(nenv + 9, sizeof(*envp));
	for (size_t i = 0; i < nenv; i++)
		envp[i] = environ[i];
	char *own[8];
	int nown = 0;
	own[nown++] = tf_xasprintf("TPUFLOW_OUTPUTS=%s/d/outputs-1", dir);
	own[nown++] = tf_xasprintf("TPUFLOW_METRICS=%s/d/metrics-1", dir);
	own[nown++] = tf_xasprintf("TPUFLOW_RESULT=%s/d/result-1.json", dir);
	own[nown++] = tf_xasprintf("TPUFLOW_RUN=r-20260101-000000-0000");
	own[nown++] = tf_xasprintf("TPUFLOW_STEP=s%d", n / 2);
	own[nown++] = tf_xasprintf("TPUFLOW_ATTEMPT=1");
	own[nown++] = tf_xasprintf("TPUFLOW_PREFIX=%s/art", dir);
	own[nown++] = tf_xasprintf("TPUFLOW_WORKDIR=%s/d", dir);
	for (int i = 0; i < nown; i++)
		envp[nenv + (size_t)i] = own[i];
	double wall = -1, t0 = tf_now_monotonic();
	int i;
	for (i = 0; i < n; i++) {
		char file[700], cwd[700];
		snprintf(file, sizeof(file), "%s/f%d", dir, i);
		snprintf(cwd, sizeof(cwd), "%s/d%d", dir, i);
		if (fresh_dir && mkdir(cwd, 0755) < 0)
			break;
		posix_spawn_file_actions_t fa;
		posix_spawn_file_actions_init(&fa);
		posix_spawn_file_actions_addchdir_np(&fa, fresh_dir ? cwd : dir);
		char *argv[] = {"/usr/bin/touch", file, NULL};
		pid_t pid;
		int rc = posix_spawn(&pid, argv[0], &fa, NULL, argv, envp);
		posix_spawn_file_actions_destroy(&fa);
		int st = 0;
		if (rc || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st))
			break;
	}
	if (i == n)
		wall = tf_now_monotonic() - t0;
	for (int j = 0; j < nown; j++)
		free(own[j]);
	free(envp);
	return wall;
}

/* CPU seconds (user + system) of this process and of the children it has waited for: around
 * one orchestrator's run, what it and its programs spent, a figure that a loaded machine
 * inflates far less than wall time. */
static double cpu_seconds(void)
{
	struct rusage self, kids;
	getrusage(RUSAGE_SELF, &self);
	getrusage(RUSAGE_CHILDREN, &kids);
	return (double)(self.ru_utime.tv_sec + self.ru_stime.tv_sec + kids.ru_utime.tv_sec +
	                kids.ru_stime.tv_sec) +
	       (double)(self.ru_utime.tv_usec + self.ru_stime.tv_usec + kids.ru_utime.tv_usec +
	                kids.ru_stime.tv_usec) *
	           1e-6;
}

/* Median, min and max of v[0..n) (sorted in place). */
static void spread(double *v, int n, double *med, double *lo, double *hi)
{
	qsort(v, (size_t)n, sizeof(*v), cmp);
	*med = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
	*lo = v[0];
	*hi = v[n - 1];
}

/* Prints "LABEL MED UNIT (LO-HI)" of the n values in v (sorted in place), or "LABEL failed";
 * a unit starting with 'x' follows the figure without a space ("7.1x"). */
static void print_spread(const char *label, double *v, int n, const char *unit)
{
	double med, lo, hi;
	if (!n) {
		printf("%s failed", label);
		return;
	}
	spread(v, n, &med, &lo, &hi);
	int ratio = unit[0] == 'x';
	printf(ratio ? "%s %.1f%s (%.1f-%.1f)" : "%s %.2f %s (%.2f-%.2f)", label, med, unit, lo,
	       hi);
}

/* Real shell steps beside Snakemake's jobs, same DAG, same run: `reps` rounds, each running
 * tpuflow, Snakemake and, for a chain, the spawn floors (spawn_floor()) on fresh directories,
 * the order turning by one each round, so all meet the same moments of a machine whose load
 * drifts and none always follows another's deletions (Snakemake removes a marker file per
 * job; on a journal-less ext4, such as this VM's disk, each inode made in the next ~30 s
 * scans past those recently freed). Nothing is deleted between rounds. With
 * TF_BENCH_BASELINE naming another tpuflow binary (an earlier build), each round runs it too.
 * Prints the medians (and ranges) of the per-step times and of the per-round ratios; for a
 * chain also the floors, what each orchestrator adds over the floor with a directory per
 * step, and Snakemake over the floors: the best ratio any orchestrator starting a process per
 * step could reach here. */
static void shell_vs_snakemake(const char *dir, int n, int fanout, int reps)
{
	/* who runs; then the per-round figures derived from their times */
	enum { TF, BASE, SNAKE, FLOOR_DIR, FLOOR, NWHO };
	enum { X_TF = NWHO, X_BASE, O_TF, O_BASE, O_SNAKE, O_RATIO, B_DIR, B_FLAT, CPU0 };
	enum { NFIG = CPU0 + NWHO }; /* then each one's CPU time per step */
	static const char *const who_dir[NWHO] = {"shell", "base", "snake", "floordir", "floor"};
	const char *bin = getenv("TPUFLOW_BIN") ? getenv("TPUFLOW_BIN") : "build/tpuflow";
	const char *base = getenv("TF_BENCH_BASELINE");
	const char *kind = fanout ? "fan" : "chain";
	double *fig[NFIG]; /* each figure's successful per-round values */
	int nfig[NFIG] = {0};
	for (int f = 0; f < NFIG; f++)
		fig[f] = tf_xcalloc((size_t)reps, sizeof(double));
#define ADD(f, x) (fig[f][nfig[f]++] = (x))
	for (int k = 0; k < reps; k++) {
		double v[NWHO]; /* ms per step this round, -1: failed or not run */
		for (int j = 0; j < NWHO; j++) {
			int w = (j + k) % NWHO; /* turn the order each round */
			v[w] = -1;
			if ((w == BASE && !base) || (fanout && (w == FLOOR_DIR || w == FLOOR)))
				continue;
			char sub[600];
			snprintf(sub, sizeof(sub), "%s/%s-%s-%d-%d", dir, who_dir[w], kind, n, k);
			if (tf_mkdir_p(sub))
				continue;
			double c0 = cpu_seconds();
			double s = w == TF      ? tpuflow_shell_dag(bin, sub, n, fanout)
			           : w == BASE  ? tpuflow_shell_dag(base, sub, n, fanout)
			           : w == SNAKE ? snakemake_dag(sub, n, fanout)
			                        : spawn_floor(sub, n, w == FLOOR_DIR);
			if (s > 0) {
				ADD(w, v[w] = s * 1e3 / n);
				ADD(CPU0 + w, (cpu_seconds() - c0) * 1e3 / n);
			}
		}
		double fd = v[FLOOR_DIR], sm = v[SNAKE];
		if (sm > 0 && v[TF] > 0)
			ADD(X_TF, sm / v[TF]);
		if (sm > 0 && v[BASE] > 0)
			ADD(X_BASE, sm / v[BASE]);
		if (fd > 0) {
			if (v[TF] > 0)
				ADD(O_TF, v[TF] - fd);
			if (v[BASE] > 0)
				ADD(O_BASE, v[BASE] - fd);
			if (sm > 0)
				ADD(O_SNAKE, sm - fd);
			if (sm > 0 && v[TF] > fd)
				ADD(O_RATIO, (sm - fd) / (v[TF] - fd));
			if (sm > 0)
				ADD(B_DIR, sm / fd);
		}
		if (v[FLOOR] > 0 && sm > 0)
			ADD(B_FLAT, sm / v[FLOOR]);
	}
#undef ADD
	printf("  shell %-7s %5d, %d rounds: ", fanout ? "fan-out" : "chain", n, reps);
	print_spread("tpuflow", fig[TF], nfig[TF], "ms/step");
	if (nfig[SNAKE])
		print_spread("; snakemake --cores 2", fig[SNAKE], nfig[SNAKE], "ms/job");
	else
		printf("; snakemake: not installed or failed");
	if (nfig[X_TF])
		print_spread("; tpuflow", fig[X_TF], nfig[X_TF], "x faster per step");
	if (base) {
		print_spread("; baseline", fig[BASE], nfig[BASE], "ms/step");
		if (nfig[X_BASE])
			print_spread(",", fig[X_BASE], nfig[X_BASE], "x Snakemake");
	}
	printf("\n");
	if (!fanout) {
		printf("    floor (posix_spawn+waitpid of the same touch, same environment):");
		print_spread(" with a fresh directory per step", fig[FLOOR_DIR], nfig[FLOOR_DIR],
		             "ms/step");
		print_spread("; in one directory", fig[FLOOR], nfig[FLOOR], "ms/step");
		printf("\n    over the floor with a directory, per step (per-round):");
		print_spread(" tpuflow", fig[O_TF], nfig[O_TF], "ms");
		if (base)
			print_spread("; baseline", fig[O_BASE], nfig[O_BASE], "ms");
		print_spread("; snakemake", fig[O_SNAKE], nfig[O_SNAKE], "ms");
		print_spread("; snakemake's / tpuflow's", fig[O_RATIO], nfig[O_RATIO], "x");
		printf("\n    best ratio any process-per-step orchestrator can reach here = "
		       "snakemake / floor:");
		print_spread(" with a directory per step", fig[B_DIR], nfig[B_DIR], "x");
		print_spread("; without", fig[B_FLAT], nfig[B_FLAT], "x");
		printf("\n    CPU time per step (user + system, the orchestrator's and its "
		       "programs'):");
		print_spread(" tpuflow", fig[CPU0 + TF], nfig[CPU0 + TF], "ms");
		if (base)
			print_spread("; baseline", fig[CPU0 + BASE], nfig[CPU0 + BASE], "ms");
		print_spread("; snakemake", fig[CPU0 + SNAKE], nfig[CPU0 + SNAKE], "ms");
		print_spread("; floor with a directory", fig[CPU0 + FLOOR_DIR],
		             nfig[CPU0 + FLOOR_DIR], "ms");
		print_spread("; in one", fig[CPU0 + FLOOR], nfig[CPU0 + FLOOR], "ms");
		printf("\n");
	}
	for (int f = 0; f < NFIG; f++)
		free(fig[f]);
}

/* Per-step cost against the width of a fan-out: `reps` rounds of a 10x-wide and a 1x-wide
 * fan-out of real shell steps, alternating; the ratio of their per-step times. */
static void shell_fanout_width(const char *dir, int n, int reps)
{
	const char *bin = getenv("TPUFLOW_BIN") ? getenv("TPUFLOW_BIN") : "build/tpuflow";
	double *narrow = tf_xcalloc((size_t)reps, sizeof(double));
	double *wide = tf_xcalloc((size_t)reps, sizeof(double));
	double *ratio = tf_xcalloc((size_t)reps, sizeof(double));
	int nn = 0, nw = 0, nr = 0;
	for (int k = 0; k < reps; k++) {
		char sub[600];
		snprintf(sub, sizeof(sub), "%s/width-%d-%d", dir, n, k);
		double a = tf_mkdir_p(sub) == 0 ? tpuflow_shell_dag(bin, sub, n, 1) : -1;
		snprintf(sub, sizeof(sub), "%s/width-%d-%d", dir, n * 10, k);
		double b = tf_mkdir_p(sub) == 0 ? tpuflow_shell_dag(bin, sub, n * 10, 1) : -1;
		if (a > 0)
			narrow[nn++] = a * 1e3 / n;
		if (b > 0)
			wide[nw++] = b * 1e3 / (n * 10);
		if (a > 0 && b > 0)
			ratio[nr++] = (b / (n * 10)) / (a / n);
	}
	double med, lo, hi;
	printf("  shell fan-out width, %d rounds: ", reps);
	if (nn) {
		spread(narrow, nn, &med, &lo, &hi);
		printf("%d steps %.2f ms/step (%.2f-%.2f)", n, med, lo, hi);
	}
	if (nw) {
		spread(wide, nw, &med, &lo, &hi);
		printf("; %d steps %.2f ms/step (%.2f-%.2f)", n * 10, med, lo, hi);
	}
	if (nr) {
		spread(ratio, nr, &med, &lo, &hi);
		printf("; per-step cost %.2fx that of the narrower (%.2f-%.2f)", med, lo, hi);
	}
	if (!nn || !nw)
		printf(" failed");
	printf("\n");
	free(narrow);
	free(wide);
	free(ratio);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0); /* each figure as it comes (the runs are long) */
	const char *r = getenv("TF_BENCH_REPS");
	int reps = r && atoi(r) > 0 ? atoi(r) : 3;
	nsteps = argc > 1 ? atoi(argv[1]) : 1000;
	if (nsteps < 2)
		nsteps = 2;
	char tmpl[] = "/tmp/tpuflow-bench-dag.XXXXXX";
	char *dir = mkdtemp(tmpl);
	if (!dir) {
		perror("mkdtemp");
		return 1;
	}
	t_start = tf_xcalloc((size_t)nsteps, sizeof(double));
	t_end = tf_xcalloc((size_t)nsteps, sizeof(double));
	double *lat = tf_xcalloc((size_t)nsteps, sizeof(double));
	char home[512];

	/* TF_BENCH_DAG=width: only the fan-out width comparison (the rest takes ~20 minutes) */
	const char *only = getenv("TF_BENCH_DAG");
	int width_only = only && !strcmp(only, "width");
	int chain_only = only && !strcmp(only, "chain");
	if (width_only)
		goto width;
	if (chain_only)
		goto shell;
	printf("dag: %d no-op steps run in-process (no program started), durable state (SQLite "
	       "WAL, every commit synced)\n",
	       nsteps);
	/* chain */
	snprintf(home, sizeof(home), "%s/chain", dir);
	double wall_chain = run(home, nsteps, 0, 4);
	for (int i = 1; i < nsteps; i++)
		lat[i - 1] = t_start[i] - t_end[i - 1];
	double p50 = pct(lat, nsteps - 1, 0.50), p99 = pct(lat, nsteps - 1, 0.99);
	double maxl = lat[nsteps - 2];
	printf(
	    "  chain:   wall %.3f s, %.3f ms/step; step-to-step latency p50 %.3f ms, p99 %.3f ms, "
	    "max %.3f ms\n",
	    wall_chain, wall_chain * 1e3 / nsteps, p50 * 1e3, p99 * 1e3, maxl * 1e3);
	/* fan-out */
	snprintf(home, sizeof(home), "%s/fanout", dir);
	memset(t_start, 0, (size_t)nsteps * sizeof(double));
	double wall_fan = run(home, nsteps, 1, 8);
	double first = 1e300, last = 0;
	for (int i = 1; i < nsteps; i++) {
		if (t_start[i] < first)
			first = t_start[i];
		if (t_end[i] > last)
			last = t_end[i];
	}
	printf("  fan-out: wall %.3f s, %.3f ms/step; root end to first child start %.3f ms, "
	       "to last child end %.1f ms\n",
	       wall_fan, wall_fan * 1e3 / nsteps, (first - t_end[0]) * 1e3,
	       (last - t_end[0]) * 1e3);
	printf("  targets: wall <= 1 s per 1000 steps; step-to-step p99 <= 5 ms\n");

shell:
	printf("dag: real shell steps (/usr/bin/touch) through `%s run --plain`, home on this "
	       "disk, beside Snakemake on the same DAG of touch jobs\n",
	       getenv("TPUFLOW_BIN") ? getenv("TPUFLOW_BIN") : "build/tpuflow");
	shell_vs_snakemake(dir, 200, 0, reps);
	shell_vs_snakemake(dir, nsteps, 0, reps);
	if (chain_only)
		goto out;
	shell_vs_snakemake(dir, nsteps, 1, reps);
width:
	printf(
	    "  targets: chain >= 8x faster per step than Snakemake's; per-step cost of a %d-step "
	    "fan-out <= 1.2x that of a %d-step one\n",
	    nsteps * 10, nsteps);
	shell_fanout_width(dir, nsteps, reps);
out:;
	char cmd[600];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "dag: could not remove %s\n", dir);
	free(t_start);
	free(t_end);
	free(lat);
	return 0;
}

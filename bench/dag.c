/* dag.c — the orchestrator's own overhead: a 1000-step no-op DAG (a chain, then a fan-out)
 * run by the engine with durable state (SQLite WAL, each commit synced before it returns, one commit per batch),
 * steps running in-process. Prints wall time, per-step overhead and the step-to-step latency
 * (a dependent step's start minus its upstream's end) p50/p99. Then what users run: real
 * `shell` steps (/usr/bin/touch) through `tpuflow run --plain` (the binary named by
 * TPUFLOW_BIN, else build/tpuflow), a 200- and a STEPS-step chain and a STEPS-step fan-out,
 * each beside Snakemake (--cores 2) on the same DAG of `touch` jobs when `snakemake` is
 * installed (`make bench` installs it; the tests never use it).
 *
 *   build/bench/dag [STEPS]      (default 1000)
 */
#include "common/common.h"
#include "orchestrator/engine.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

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
	fprintf(f, "name: bench-shell-%s\nsteps:\n", fanout ? "fanout" : "chain");
	for (int i = 0; i < n; i++) {
		fprintf(f, "  - {name: s%d, type: shell, with: {argv: [/usr/bin/touch, %s/f%d]}", i,
		        dir, i);
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

/* Real shell steps beside Snakemake's jobs, same DAG, same run. */
static void shell_vs_snakemake(const char *dir, int n, int fanout)
{
	const char *bin = getenv("TPUFLOW_BIN") ? getenv("TPUFLOW_BIN") : "build/tpuflow";
	char sub[600];
	snprintf(sub, sizeof(sub), "%s/shell-%s-%d", dir, fanout ? "fan" : "chain", n);
	double tf = tf_mkdir_p(sub) == 0 ? tpuflow_shell_dag(bin, sub, n, fanout) : -1;
	snprintf(sub, sizeof(sub), "%s/snake-%s-%d", dir, fanout ? "fan" : "chain", n);
	double sm = tf_mkdir_p(sub) == 0 ? snakemake_dag(sub, n, fanout) : -1;
	printf("  shell %-7s %4d: tpuflow %s", fanout ? "fan-out" : "chain", n,
	       tf > 0 ? "" : "failed");
	if (tf > 0)
		printf("%.3f s, %.2f ms/step", tf, tf * 1e3 / n);
	if (sm > 0)
		printf("; snakemake --cores 2 %.3f s, %.2f ms/job", sm, sm * 1e3 / n);
	else
		printf("; snakemake: not installed or failed");
	if (tf > 0 && sm > 0)
		printf("; tpuflow %.1fx faster per step", sm / tf);
	printf("\n");
}

int main(int argc, char **argv)
{
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

	printf("dag: real shell steps (/usr/bin/touch) through `%s run --plain`, home on this "
	       "disk, beside Snakemake on the same DAG of touch jobs\n",
	       getenv("TPUFLOW_BIN") ? getenv("TPUFLOW_BIN") : "build/tpuflow");
	shell_vs_snakemake(dir, 200, 0);
	shell_vs_snakemake(dir, nsteps, 0);
	shell_vs_snakemake(dir, nsteps, 1);
	char cmd[600];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "dag: could not remove %s\n", dir);
	free(t_start);
	free(t_end);
	free(lat);
	return 0;
}

/* cmd_step_job.c — `tpuflow step job`: what a Slurm batch job of an attempt runs on its compute
 * node (executor: slurm, docs/slurm.md). It runs the attempt's argv as a child (through
 * executors/local.c: own process group, stdout and stderr to files in a node-local temporary
 * directory), and because the node shares no filesystem with the coordinator it hands what
 * the coordinator needs over the object store:
 *  - the newest progress line (a stdout line that is a JSON object) as PREFIX + progress.json,
 *    at most once a second and once more at the end, which the coordinator reads while the job
 *    runs (the live view, `runs watch`);
 *  - both logs as PREFIX + stdout.log and stderr.log when the child has ended, which the
 *    coordinator fetches as the attempt's log;
 *  - with --results (a shell step), the files the program wrote to $TPUFLOW_OUTPUTS,
 *    $TPUFLOW_METRICS and $TPUFLOW_RESULT as PREFIX + outputs, metrics and result.json, after
 *    a successful exit, which the coordinator reads as the step's outputs and metrics.
 * The logs live in one node-local directory ($TMPDIR when it is a directory, else /tmp),
 * removed at the end; with --results so do the result files and the child's working directory
 * ($TPUFLOW_WORKDIR, a subdirectory), whatever the child left in it.
 * SIGTERM or SIGINT (scancel, a requeue, Slurm's time limit) is passed on to the child, whose
 * logs are still uploaded. The exit status is the child's (a child killed by a signal is
 * re-raised), so Slurm reports the job as the child ended. */
#include "cli/cli.h"
#include "common/common.h"
#include "orchestrator/step_kind.h"

#include "executors/executor.h"
#include "storage/objstore.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

extern char **environ;

#define PROGRESS_EVERY_S 1.0 /* the progress object is rewritten at most this often */
#define LINE_MAX_BYTES (64 * 1024)

static const char job_usage[] =
    "usage: tpuflow step job --store URL --prefix KEY [--progress] [--results] -- PROGRAM\n"
    "                        [ARG...]\n"
    "Runs PROGRAM inside a Slurm job of an attempt (executor: slurm) and hands its logs and\n"
    "progress to the coordinator through the object store (docs/slurm.md):\n"
    "  --store URL    the run's object store\n"
    "  --prefix KEY   where the logs go: KEY + stdout.log, KEY + stderr.log\n"
    "  --progress     also put the newest stdout line that is a JSON object in\n"
    "                 KEY + progress.json while PROGRAM runs\n"
    "  --results      run PROGRAM in a node-local directory ($TPUFLOW_WORKDIR) with\n"
    "                 $TPUFLOW_OUTPUTS, $TPUFLOW_METRICS and $TPUFLOW_RESULT naming files\n"
    "                 there; after a successful exit put those it wrote in KEY + outputs,\n"
    "                 KEY + metrics and KEY + result.json (a shell step's results)\n"
    "Exit status: PROGRAM's; 64 bad arguments, 69 the store cannot be reached, 75 PROGRAM\n"
    "succeeded but its results did not reach the store, 1 a result file over 1 MiB.\n";

/* The files a shell step's program may write (docs/runs.md), by variable: each goes to the
 * store as PREFIX + object when it exists after a successful exit. */
static const struct {
	const char *var, *object;
} result_files[] = {{"TPUFLOW_OUTPUTS", "outputs"},
                    {"TPUFLOW_METRICS", "metrics"},
                    {"TPUFLOW_RESULT", "result.json"}};

static volatile sig_atomic_t stop_sig; /* the signal asking us to stop, 0: none */

static void on_stop(int sig)
{
	stop_sig = sig;
}

/* Follows the child's stdout file and keeps its newest complete JSON-object line. */
struct follow {
	int fd;
	char *buf; /* an incomplete last line */
	size_t len;
	char *last;    /* the newest progress line (owned), NULL: none yet */
	int fresh;     /* last has not been put yet */
	double put_at; /* when it was last put (monotonic) */
	char *key;     /* PREFIX + progress.json */
};

static void follow_read(struct follow *f)
{
	for (;;) {
		ssize_t n = read(f->fd, f->buf + f->len, LINE_MAX_BYTES - f->len);
		if (n <= 0)
			return;
		f->len += (size_t)n;
		size_t start = 0;
		for (size_t i = 0; i < f->len; i++) {
			if (f->buf[i] != '\n')
				continue;
			if (f->buf[start] == '{') {
				free(f->last);
				f->last = tf_xasprintf("%.*s", (int)(i - start), f->buf + start);
				f->fresh = 1;
			}
			start = i + 1;
		}
		if (start == 0 && f->len == LINE_MAX_BYTES)
			start = f->len; /* a line longer than the buffer is not progress */
		memmove(f->buf, f->buf + start, f->len - start);
		f->len -= start;
	}
}

static void follow_put(struct follow *f, struct tf_objstore *os, int force)
{
	double now = tf_now_monotonic();
	if (!f->fresh || (!force && now - f->put_at < PROGRESS_EVERY_S))
		return;
	if (tf_objstore_put(os, f->key, f->last, strlen(f->last), 0) == 0) {
		f->fresh = 0;
		f->put_at = now;
	} else {
		fprintf(stderr, "tpuflow step job: cannot put progress '%s': %s\n", f->key,
		        tf_objstore_errmsg(os));
		f->put_at = now; /* try again a second later */
	}
}

/* Makes the job's node-local directory: under $TMPDIR when that is a directory (the
 * submitter's may not exist on the node), else /tmp. Returns it (the caller frees) or NULL. */
static char *make_dir(void)
{
	const char *tmp = getenv("TMPDIR");
	struct stat sb;
	if (!tmp || !*tmp || stat(tmp, &sb) || !S_ISDIR(sb.st_mode))
		tmp = "/tmp";
	char *dir = tf_xasprintf("%s/tpuflow-job.XXXXXX", tmp);
	if (!mkdtemp(dir)) {
		fprintf(stderr, "tpuflow step job: cannot create a directory under '%s': %s\n", tmp,
		        strerror(errno));
		free(dir);
		return NULL;
	}
	return dir;
}

static int remove_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)ftw;
	if ((flag == FTW_DP ? rmdir(path) : unlink(path)) && errno != ENOENT)
		fprintf(stderr, "tpuflow step job: cannot remove '%s': %s\n", path,
		        strerror(errno));
	return 0;
}

/* The child's environment with --results: ours, with TPUFLOW_WORKDIR and the result files
 * pointing into dir (whatever the submitter had for them names its own machine). A new
 * NULL-terminated array; the caller frees it and its strings. */
static char **results_env(const char *dir)
{
	size_t n = 0;
	for (char **e = environ; *e; e++)
		n++;
	char **env = tf_xcalloc(n + TF_ARRAY_LEN(result_files) + 2, sizeof(char *));
	size_t k = 0;
	for (char **e = environ; *e; e++) {
		size_t len = strcspn(*e, "=");
		int ours = len == 15 && !strncmp(*e, "TPUFLOW_WORKDIR", len);
		for (size_t i = 0; i < TF_ARRAY_LEN(result_files); i++)
			ours |= strlen(result_files[i].var) == len &&
			        !strncmp(*e, result_files[i].var, len);
		if (!ours)
			env[k++] = tf_xstrdup(*e);
	}
	env[k++] = tf_xasprintf("TPUFLOW_WORKDIR=%s/work", dir);
	for (size_t i = 0; i < TF_ARRAY_LEN(result_files); i++)
		env[k++] =
		    tf_xasprintf("%s=%s/%s", result_files[i].var, dir, result_files[i].object);
	return env;
}

/* Puts the result files the program wrote (those that exist) in the store, saying what went
 * wrong on stderr and in log (the program's stderr log, which the coordinator shows).
 * TF_EXIT_OK; TF_EXIT_FAILED when a file is larger than a shell step's result file may be
 * (the program's fault, as it is on the coordinator); TF_EXIT_TEMPFAIL when one did not
 * reach the store. */
static int put_results(struct tf_objstore *os, const char *dir, const char *prefix, FILE *log)
{
	int rc = TF_EXIT_OK;
	for (size_t i = 0; i < TF_ARRAY_LEN(result_files) && rc != TF_EXIT_FAILED; i++) {
		char *path = tf_xasprintf("%s/%s", dir, result_files[i].object);
		char *key = tf_xasprintf("%s%s", prefix, result_files[i].object);
		char msg[512] = "";
		struct stat sb;
		if (stat(path, &sb)) {
			/* not written: nothing to put */
		} else if (sb.st_size > TF_SHELL_FILE_MAX) {
			snprintf(msg, sizeof(msg),
			         "$%s is %lld bytes: a result file holds at most %u (docs/runs.md)",
			         result_files[i].var, (long long)sb.st_size, TF_SHELL_FILE_MAX);
			rc = TF_EXIT_FAILED;
		} else if (tf_objstore_put_file(os, key, path, 0)) {
			snprintf(msg, sizeof(msg), "cannot put $%s as '%s': %s",
			         result_files[i].var, key, tf_objstore_errmsg(os));
			rc = TF_EXIT_TEMPFAIL;
		}
		if (msg[0]) {
			fprintf(stderr, "tpuflow step job: %s\n", msg);
			if (log)
				fprintf(log, "tpuflow step job: %s\n", msg);
		}
		free(path);
		free(key);
	}
	return rc;
}

int cmd_step_job(int argc, char **argv, struct tf_cli *cli)
{
	(void)cli;
	const char *store_url = NULL, *prefix = NULL;
	int progress = 0, results = 0, i;
	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--"))
			break;
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			fputs(job_usage, stdout);
			return TF_EXIT_OK;
		}
		if (!strcmp(argv[i], "--progress")) {
			progress = 1;
		} else if (!strcmp(argv[i], "--results")) {
			results = 1;
		} else if (i + 1 < argc && !strcmp(argv[i], "--store")) {
			store_url = argv[++i];
		} else if (i + 1 < argc && !strcmp(argv[i], "--prefix")) {
			prefix = argv[++i];
		} else {
			return tf_cli_usage_error("step", "job: unknown argument '%s'", argv[i]);
		}
	}
	if (!store_url || !prefix || i + 1 >= argc)
		return tf_cli_usage_error("step",
		                          "job needs --store URL --prefix KEY -- PROGRAM [ARG...]");
	char *const *child_argv = argv + i + 1;

	char err[512];
	struct tf_objstore *os = NULL;
	if (tf_objstore_open(store_url, &os, err, sizeof(err))) {
		fprintf(stderr, "tpuflow step job: object store: %s\n", err);
		return TF_EXIT_UNAVAILABLE;
	}
	struct sigaction sa = {.sa_handler = on_stop};
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);

	char *dir = make_dir();
	if (!dir) {
		tf_objstore_free(os);
		return TF_EXIT_UNAVAILABLE;
	}
	char *work = tf_xasprintf("%s/work", dir);
	int rc;
	char **env = NULL;
	if (results) {
		env = results_env(dir);
		if (mkdir(work, 0700)) {
			fprintf(stderr, "tpuflow step job: cannot create '%s': %s\n", work,
			        strerror(errno));
			rc = TF_EXIT_UNAVAILABLE;
			goto out;
		}
	}
	/* Slurm sends SIGKILL KillWait seconds (30 by default) after SIGTERM: the child gets
	 * as long to checkpoint */
	struct tf_exec_spec spec = {.argv = child_argv,
	                            .envp = env,
	                            .cwd = results ? work : NULL,
	                            .log_dir = dir,
	                            .grace = 30};
	struct tf_exec *x = NULL;
	struct tf_exec_result res;
	rc = tf_exec_start(&tf_executor_local, &spec, &x, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "tpuflow step job: cannot start '%s': %s\n", child_argv[0], err);
		rc = rc == -ENOENT || rc == -EACCES ? TF_EXIT_FAILED : TF_EXIT_UNAVAILABLE;
		goto out;
	}
	struct follow f = {.fd = -1, .key = tf_xasprintf("%sprogress.json", prefix)};
	f.buf = tf_xmalloc(LINE_MAX_BYTES);
	int stopping = 0;
	for (;;) {
		rc = tf_exec_wait(x, 0.2, &res);
		if (progress) {
			if (f.fd < 0)
				f.fd = open(tf_executor_local.log_path(x, 1), O_RDONLY | O_CLOEXEC);
			if (f.fd >= 0)
				follow_read(&f);
			follow_put(&f, os, rc == 0);
		}
		if (rc == 0)
			break;
		if (stop_sig && !stopping) {
			tf_exec_cancel(x, TF_FAIL_CANCELLED);
			stopping = 1;
		}
	}
	/* the results before the logs, so that what went wrong with them is in stderr.log, which
	 * ends with how the program ended */
	FILE *e = fopen(tf_executor_local.log_path(x, 2), "a");
	int unsent = results && res.fclass == TF_FAIL_NONE ? put_results(os, dir, prefix, e) : 0;
	if (e) {
		fprintf(e, "==> %s%s <==\n", res.message,
		        stopping ? " (stopped: the job was signalled)" : "");
		fclose(e);
	}
	static const char *const names[2] = {"stdout.log", "stderr.log"};
	int lost = 0;
	for (int s = 0; s < 2; s++) {
		char *key = tf_xasprintf("%s%s", prefix, names[s]);
		if (tf_objstore_put_file(os, key, tf_executor_local.log_path(x, s + 1), 0)) {
			fprintf(stderr, "tpuflow step job: cannot put log '%s': %s\n", key,
			        tf_objstore_errmsg(os));
			lost = 1;
		}
		free(key);
	}
	if (f.fd >= 0)
		close(f.fd);
	free(f.buf);
	free(f.last);
	free(f.key);
	tf_exec_free(x);
	if (lost) /* the coordinator says so on the attempt; the program's outcome stands */
		fprintf(stderr, "tpuflow step job: the logs of '%s' did not reach the store\n",
		        child_argv[0]);
	/* a program that succeeded but whose results are not in the store: put_results' code
	 * (EX_TEMPFAIL, which the coordinator counts as infra and retries, when the store failed)
	 */
	rc = unsent               ? unsent
	     : res.signal         ? -res.signal
	     : res.exit_code >= 0 ? res.exit_code
	                          : TF_EXIT_SOFTWARE;
out:
	nftw(dir, remove_one, 16, FTW_DEPTH | FTW_PHYS);
	free(dir);
	free(work);
	for (size_t k = 0; env && env[k]; k++)
		free(env[k]);
	free(env);
	tf_objstore_free(os);
	if (rc < 0) { /* killed by a signal: so is the job */
		signal(-rc, SIG_DFL);
		raise(-rc);
	}
	return rc;
}

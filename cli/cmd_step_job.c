/* cmd_step_job.c — `tpuflow step job`: what a Slurm batch job of an attempt runs on its compute
 * node (executor: slurm, docs/slurm.md). It runs the attempt's argv as a child (through
 * executors/local.c: own process group, stdout and stderr to files in a node-local temporary
 * directory), and because the node shares no filesystem with the coordinator it hands what
 * the coordinator needs over the object store:
 *  - the newest progress line (a stdout line that is a JSON object) as PREFIX + progress.json,
 *    at most once a second and once more at the end, which the coordinator reads while the job
 *    runs (the live view, `runs watch`);
 *  - both logs as PREFIX + stdout.log and stderr.log when the child has ended, which the
 *    coordinator fetches as the attempt's log.
 * SIGTERM or SIGINT (scancel, a requeue, Slurm's time limit) is passed on to the child, whose
 * logs are still uploaded. The exit status is the child's (a child killed by a signal is
 * re-raised), so Slurm reports the job as the child ended. */
#include "cli/cli.h"
#include "common/common.h"

#include "executors/executor.h"
#include "storage/objstore.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PROGRESS_EVERY_S 1.0 /* the progress object is rewritten at most this often */
#define LINE_MAX_BYTES (64 * 1024)

static const char job_usage[] =
    "usage: tpuflow step job --store URL --prefix KEY [--progress] -- PROGRAM [ARG...]\n"
    "Runs PROGRAM inside a Slurm job of an attempt (executor: slurm) and hands its logs and\n"
    "progress to the coordinator through the object store (docs/slurm.md):\n"
    "  --store URL    the run's object store\n"
    "  --prefix KEY   where the logs go: KEY + stdout.log, KEY + stderr.log\n"
    "  --progress     also put the newest stdout line that is a JSON object in\n"
    "                 KEY + progress.json while PROGRAM runs\n"
    "Exit status: PROGRAM's; 64 bad arguments, 69 the store cannot be reached.\n";

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

int cmd_step_job(int argc, char **argv, struct tf_cli *cli)
{
	(void)cli;
	const char *store_url = NULL, *prefix = NULL;
	int progress = 0, i;
	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--"))
			break;
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			fputs(job_usage, stdout);
			return TF_EXIT_OK;
		}
		if (!strcmp(argv[i], "--progress")) {
			progress = 1;
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

	/* Slurm sends SIGKILL KillWait seconds (30 by default) after SIGTERM: the child gets
	 * as long to checkpoint */
	struct tf_exec_spec spec = {.argv = child_argv, .grace = 30};
	struct tf_exec *x = NULL;
	struct tf_exec_result res;
	int rc = tf_exec_start(&tf_executor_local, &spec, &x, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "tpuflow step job: cannot start '%s': %s\n", child_argv[0], err);
		tf_objstore_free(os);
		return rc == -ENOENT || rc == -EACCES ? TF_EXIT_FAILED : TF_EXIT_UNAVAILABLE;
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
	/* the logs, with how the program ended at the end of stderr */
	FILE *e = fopen(tf_executor_local.log_path(x, 2), "a");
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
	tf_objstore_free(os);
	if (res.signal) {
		signal(res.signal, SIG_DFL);
		raise(res.signal);
	}
	if (lost) /* the coordinator says so on the attempt; the program's outcome stands */
		fprintf(stderr, "tpuflow step job: the logs of '%s' did not reach the store\n",
		        child_argv[0]);
	return res.exit_code >= 0 ? res.exit_code : TF_EXIT_SOFTWARE;
}

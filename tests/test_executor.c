/* test_executor.c — the executors: a timeout kills the whole process group (grandchild
 * included, even one ignoring SIGTERM), argv with shell metacharacters arrives verbatim, logs
 * are captured (and uploaded), the program starts with default signal dispositions, killed
 * children are reported as such, exit codes and return
 * codes map to failure classes, cancel and preemption, the in-process backend. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "executors/executor.h"
#include "storage/objstore.h"
#include "common/buf.h"
#include "common/common.h"
#include "tests/testutil.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static struct tf_exec *start_local(char *const *argv, double timeout, double grace, const char *dir)
{
	struct tf_exec_spec spec = {
	    .argv = argv, .timeout = timeout, .grace = grace, .log_dir = dir};
	struct tf_exec *x = NULL;
	char err[256];
	int rc = tf_exec_start(&tf_executor_local, &spec, &x, err, sizeof(err));
	if (rc)
		fail_msg("start %s: %s", argv[0], err);
	return x;
}

static char *logs(struct tf_exec *x, int stream)
{
	char *buf = NULL;
	size_t len;
	assert_int_equal(tf_exec_logs(x, stream, &buf, &len), 0);
	return buf;
}

/* A process is gone when it no longer exists or is a zombie nobody reaps (a container's
 * init may not). Waits up to 3 s. */
static int gone(pid_t pid)
{
	for (int i = 0; i < 300; i++) {
		if (kill(pid, 0) < 0 && errno == ESRCH)
			return 1;
		char path[64], buf[256];
		snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
		FILE *f = fopen(path, "r");
		if (f) {
			size_t n = fread(buf, 1, sizeof(buf) - 1, f);
			fclose(f);
			buf[n] = '\0';
			char *rp = strrchr(buf, ')');
			if (rp && rp[1] == ' ' && rp[2] == 'Z')
				return 1;
		}
		struct timespec ts = {0, 10000000};
		nanosleep(&ts, NULL);
	}
	return 0;
}

static pid_t read_pid(const char *path)
{
	for (int i = 0; i < 300; i++) {
		FILE *f = fopen(path, "r");
		int pid = 0;
		if (f) {
			if (fscanf(f, "%d", &pid) != 1)
				pid = 0;
			fclose(f);
		}
		if (pid > 0)
			return pid;
		struct timespec ts = {0, 10000000};
		nanosleep(&ts, NULL);
	}
	return 0;
}

static void test_executor_argv_verbatim(void **state)
{
	(void)state;
	char *argv[] = {"printf",      "[%s]\\n", "a b", "$(touch pwned)", ";|&", "*", "'q'\"",
	                "back\\slash", "",        NULL};
	struct tf_exec *x = start_local(argv, 10, 1, "argv");
	struct tf_exec_result r;
	assert_int_equal(tf_exec_wait(x, -1, &r), 0);
	assert_int_equal(r.fclass, TF_FAIL_NONE);
	assert_int_equal(r.exit_code, 0);
	char *out = logs(x, 1);
	assert_string_equal(out,
	                    "[a b]\n[$(touch pwned)]\n[;|&]\n[*]\n['q'\"]\n[back\\slash]\n[]\n");
	free(out);
	struct stat st;
	assert_int_equal(stat("pwned", &st), -1);
	tf_exec_free(x);
}

/* The hexadecimal mask after key in a /proc status text; all ones when key is missing. */
__attribute__((noinline)) static uint64_t status_hex(const char *text, const char *key)
{
	const char *p = strstr(text, key);
	return p ? strtoull(p + strlen(key), NULL, 16) : ~0ull;
}

static void on_usr1(int sig)
{
	(void)sig;
}

/* The program starts with every signal at its default disposition, whatever this process
 * ignores (SIGPIPE, as tpuflow does) or catches (SIGUSR1, SIGTERM): the kernel's own
 * account of the child, /proc/self/status, shows no ignored and no caught signal. */
static void test_executor_child_signals_default(void **state)
{
	(void)state;
	struct sigaction sa = {.sa_handler = on_usr1}, old_usr1, old_term;
	sigemptyset(&sa.sa_mask);
	assert_int_equal(sigaction(SIGUSR1, &sa, &old_usr1), 0);
	assert_int_equal(sigaction(SIGTERM, &sa, &old_term), 0);
	void (*old_pipe)(int) = signal(SIGPIPE, SIG_IGN);
	char *argv[] = {"/bin/cat", "/proc/self/status", NULL}; /* cat catches nothing itself */
	struct tf_exec *x = start_local(argv, 10, 1, "signals");
	struct tf_exec_result r;
	assert_int_equal(tf_exec_wait(x, -1, &r), 0);
	signal(SIGPIPE, old_pipe);
	sigaction(SIGUSR1, &old_usr1, NULL);
	sigaction(SIGTERM, &old_term, NULL);
	assert_int_equal(r.fclass, TF_FAIL_NONE);
	char *out = logs(x, 1);
	/* all 64, glibc's own 32 and 33 (SIGCANCEL, SIGSETXID) too: GNU make 4.3 runs its
	 * recipes, `make test` among them, with both ignored */
	uint64_t ignored = status_hex(out, "\nSigIgn:\t"), caught = status_hex(out, "\nSigCgt:\t");
	free(out);
	assert_int_equal(ignored, 0);
	assert_int_equal(caught, 0);
	tf_exec_free(x);
}

static void test_executor_logs_and_exit_code(void **state)
{
	(void)state;
	char *argv[] = {"/bin/sh", "-c", "echo to-out; echo to-err >&2; exit 3", NULL};
	struct tf_exec *x = start_local(argv, 10, 1, "logs");
	struct tf_exec_result r;
	assert_int_equal(tf_exec_wait(x, -1, &r), 0);
	assert_int_equal(r.fclass, TF_FAIL_ERROR);
	assert_int_equal(r.exit_code, 3);
	assert_int_equal(r.signal, 0);
	assert_string_equal(r.message, "exit 3");
	char *o = logs(x, 1), *e = logs(x, 2);
	assert_string_equal(o, "to-out\n");
	assert_string_equal(e, "to-err\n");
	free(o);
	free(e);
	assert_int_equal(access("logs/stdout.log", R_OK), 0);
	tf_exec_free(x);
}

/* A stream past TPUFLOW_LOG_MAX keeps its head (3/4 of the cap), a line saying what was cut
 * and its last bytes (1/4), exactly, whatever sizes the pipe hands over. */
static void test_executor_log_cap_keeps_head_and_tail(void **state)
{
	(void)state;
	setenv("TPUFLOW_LOG_MAX", "4096", 1);
	char *argv[] = {"seq", "1", "20000", NULL};
	struct tf_exec *x = start_local(argv, 30, 1, "logcap");
	unsetenv("TPUFLOW_LOG_MAX");
	struct tf_exec_result r;
	assert_int_equal(tf_exec_wait(x, -1, &r), 0);
	assert_int_equal(r.fclass, TF_FAIL_NONE);
	struct tf_buf all = {0};
	for (int i = 1; i <= 20000; i++)
		tf_buf_printf(&all, "%d\n", i);
	size_t head = 3072, tail = 1024;
	struct tf_buf want = {0};
	tf_buf_append(&want, all.data, head);
	tf_buf_printf(&want,
	              "\n[tpuflow: %zu bytes of stdout cut here (TPUFLOW_LOG_MAX); the last %zu "
	              "follow]\n",
	              all.len - head - tail, tail);
	tf_buf_append(&want, all.data + all.len - tail, tail);
	char *out = logs(x, 1);
	assert_string_equal(out, tf_buf_str(&want));
	free(out);
	tf_buf_release(&all);
	tf_buf_release(&want);
	tf_exec_free(x);
}

/* Lazy logs: a silent program leaves neither the log directory nor a log file; a program
 * that writes to one stream gets that stream's file only, holding what it wrote. */
static void test_executor_lazy_logs(void **state)
{
	(void)state;
	char *quiet[] = {"/bin/sh", "-c", "exit 0", NULL};
	char *chatty[] = {"/bin/sh", "-c", "echo only-err >&2; exit 4", NULL};
	struct tf_exec_spec spec = {
	    .argv = quiet, .timeout = 10, .log_dir = "lazy/a", .lazy_logs = 1};
	struct tf_exec *x = NULL;
	char err[256];
	struct tf_exec_result r;
	assert_int_equal(tf_exec_start(&tf_executor_local, &spec, &x, err, sizeof(err)), 0);
	assert_int_equal(tf_exec_wait(x, -1, &r), 0);
	assert_int_equal(r.fclass, TF_FAIL_NONE);
	assert_null(tf_executor_local.log_path(x, 1));
	assert_null(tf_executor_local.log_path(x, 2));
	char *buf = NULL;
	size_t len = 0;
	assert_int_equal(tf_exec_logs(x, 1, &buf, &len), -ENOENT);
	tf_exec_free(x);
	struct stat sb;
	assert_int_equal(stat("lazy/a", &sb), -1);
	assert_int_equal(errno, ENOENT);

	spec.argv = chatty;
	spec.log_dir = "lazy/b";
	assert_int_equal(tf_exec_start(&tf_executor_local, &spec, &x, err, sizeof(err)), 0);
	assert_int_equal(tf_exec_wait(x, -1, &r), 0);
	assert_int_equal(r.fclass, TF_FAIL_ERROR);
	assert_null(tf_executor_local.log_path(x, 1));
	assert_string_equal(tf_executor_local.log_path(x, 2), "lazy/b/stderr.log");
	char *e = logs(x, 2);
	assert_string_equal(e, "only-err\n");
	free(e);
	assert_int_equal(access("lazy/b/stdout.log", F_OK), -1);
	tf_exec_free(x);
}

/* The shell and its background grandchild both ignore SIGTERM: the timeout's SIGTERM does
 * nothing, SIGKILL after the grace takes the whole group. */
static void test_executor_timeout_kills_group(void **state)
{
	(void)state;
	const char *scripts[] = {
	    "sleep 30 & echo $! > gc1.pid; wait",
	    "trap '' TERM; sleep 30 & echo $! > gc2.pid; wait; wait",
	};
	const int want_sig[] = {SIGTERM, SIGKILL};
	const char *pidfile[] = {"gc1.pid", "gc2.pid"};
	for (int i = 0; i < 2; i++) {
		char *argv[] = {"/bin/sh", "-c", (char *)scripts[i], NULL};
		double t0 = tf_now_monotonic();
		struct tf_exec *x = start_local(argv, 0.3, 0.3, "timeout");
		pid_t gc = read_pid(pidfile[i]);
		assert_true(gc > 0);
		struct tf_exec_result r;
		assert_int_equal(tf_exec_wait(x, -1, &r), 0);
		double took = tf_now_monotonic() - t0;
		assert_int_equal(r.fclass, TF_FAIL_TIMEOUT);
		assert_int_equal(r.signal, want_sig[i]);
		assert_non_null(strstr(r.message, "timeout"));
		assert_true(took < 5);
		assert_true(gone(gc));
		tf_exec_free(x);
	}
}

static void test_executor_killed_child_reported(void **state)
{
	(void)state;
	const struct {
		const char *script;
		enum tf_fail_class want;
		int sig;
		const char *msg;
	} cases[] = {
	    {"kill -SEGV $$", TF_FAIL_ERROR, SIGSEGV, "killed by SIGSEGV"},
	    {"kill -KILL $$", TF_FAIL_INFRA, SIGKILL, "killed by SIGKILL"},
	    {"kill -TERM $$", TF_FAIL_ERROR, SIGTERM, "killed by SIGTERM"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *argv[] = {"/bin/sh", "-c", (char *)cases[i].script, NULL};
		struct tf_exec *x = start_local(argv, 10, 1, NULL);
		struct tf_exec_result r;
		assert_int_equal(tf_exec_wait(x, -1, &r), 0);
		assert_int_equal(r.fclass, cases[i].want);
		assert_int_equal(r.signal, cases[i].sig);
		assert_int_equal(r.exit_code, -1);
		assert_non_null(strstr(r.message, cases[i].msg));
		tf_exec_free(x);
	}
}

static void test_executor_exit_codes_mapped(void **state)
{
	(void)state;
	const struct {
		int wstatus;
		enum tf_fail_class requested, want;
	} cases[] = {
	    {0 << 8, TF_FAIL_NONE, TF_FAIL_NONE},
	    {1 << 8, TF_FAIL_NONE, TF_FAIL_ERROR},
	    {2 << 8, TF_FAIL_NONE, TF_FAIL_ERROR},
	    {75 << 8, TF_FAIL_NONE, TF_FAIL_INFRA},
	    {69 << 8, TF_FAIL_NONE, TF_FAIL_INFRA},
	    {127 << 8, TF_FAIL_NONE, TF_FAIL_ERROR},
	    {SIGKILL, TF_FAIL_NONE, TF_FAIL_INFRA},
	    {SIGABRT, TF_FAIL_NONE, TF_FAIL_ERROR},
	    {SIGTERM, TF_FAIL_TIMEOUT, TF_FAIL_TIMEOUT},
	    {SIGKILL, TF_FAIL_PREEMPTED, TF_FAIL_PREEMPTED},
	    {0 << 8, TF_FAIL_CANCELLED, TF_FAIL_CANCELLED},
	    {1 << 8, TF_FAIL_PREEMPTED, TF_FAIL_PREEMPTED},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char msg[128];
		enum tf_fail_class c =
		    tf_exec_classify_status(cases[i].wstatus, cases[i].requested, msg, sizeof(msg));
		if (c != cases[i].want)
			fail_msg("case %zu: status 0x%x gives %s (%s), want %s", i,
			         (unsigned)cases[i].wstatus, tf_fail_class_name(c), msg,
			         tf_fail_class_name(cases[i].want));
		assert_true(strlen(msg) > 0);
	}
	/* real processes for the sysexits cases */
	const struct {
		const char *script;
		enum tf_fail_class want;
	} real[] = {
	    {"exit 0", TF_FAIL_NONE}, {"exit 75", TF_FAIL_INFRA}, {"exit 9", TF_FAIL_ERROR}};
	for (size_t i = 0; i < sizeof(real) / sizeof(real[0]); i++) {
		char *argv[] = {"/bin/sh", "-c", (char *)real[i].script, NULL};
		struct tf_exec *x = start_local(argv, 10, 1, NULL);
		struct tf_exec_result r;
		assert_int_equal(tf_exec_wait(x, -1, &r), 0);
		assert_int_equal(r.fclass, real[i].want);
		tf_exec_free(x);
	}
	/* one name table: every class reads back from its name, and nothing else does */
	for (int c = TF_FAIL_NONE; c < TF_FAIL_LAST; c++) {
		enum tf_fail_class back = TF_FAIL_LAST;
		assert_int_equal(tf_fail_class_parse(tf_fail_class_name((enum tf_fail_class)c), &back),
		                 0);
		assert_int_equal(back, c);
	}
	enum tf_fail_class none;
	assert_int_equal(tf_fail_class_parse("oom", &none), -EINVAL);
	assert_string_equal(tf_fail_class_name(TF_FAIL_LAST), "?");
}

static void test_executor_cancel_and_preempt(void **state)
{
	(void)state;
	const enum tf_fail_class why[] = {TF_FAIL_CANCELLED, TF_FAIL_PREEMPTED};
	for (int i = 0; i < 2; i++) {
		char *argv[] = {"sleep", "30", NULL};
		struct tf_exec *x = start_local(argv, 0, 1, NULL);
		struct tf_exec_result r;
		assert_int_equal(tf_exec_poll(x, &r), -EAGAIN);
		assert_int_equal(tf_exec_wait(x, 0.05, &r), -ETIMEDOUT);
		assert_int_equal(tf_exec_cancel(x, why[i]), 0);
		assert_int_equal(tf_exec_wait(x, 5, &r), 0);
		assert_int_equal(r.fclass, why[i]);
		assert_int_equal(r.signal, SIGTERM);
		tf_exec_free(x);
	}
	/* freeing a running attempt stops it */
	char *argv[] = {"/bin/sh", "-c", "sleep 30 & echo $! > gcf.pid; wait", NULL};
	struct tf_exec *x = start_local(argv, 0, 1, NULL);
	pid_t gc = read_pid("gcf.pid");
	tf_exec_free(x);
	assert_true(gc > 0 && gone(gc));
}

static void test_executor_spawn_failure(void **state)
{
	(void)state;
	char *argv[] = {"/nonexistent/program", NULL};
	struct tf_exec_spec spec = {.argv = argv};
	struct tf_exec *x = NULL;
	char err[256];
	assert_int_equal(tf_exec_start(&tf_executor_local, &spec, &x, err, sizeof(err)), -ENOENT);
	assert_null(x);
	assert_non_null(strstr(err, "/nonexistent/program"));
	struct tf_exec_spec empty = {0};
	assert_int_equal(tf_exec_start(&tf_executor_local, &empty, &x, err, sizeof(err)), -EINVAL);
	/* slurm refuses a spec without its options */
	struct tf_exec_spec no_opts = {.argv = (char *const[]){"true", NULL}};
	assert_int_equal(tf_exec_start(&tf_executor_slurm, &no_opts, &x, err, sizeof(err)),
	                 -EINVAL);
}

/* Slurm job states to failure classes (the table of docs/slurm.md). */
static void test_executor_slurm_states(void **state)
{
	(void)state;
	static const struct {
		const char *state;
		int requested;
		int wstatus;
		enum tf_fail_class want;
	} cases[] = {
	    {"COMPLETED", 0, 0, TF_FAIL_NONE},
	    {"FAILED", 0, 3 << 8, TF_FAIL_ERROR},
	    {"FAILED", 0, 69 << 8, TF_FAIL_INFRA},
	    {"OUT_OF_MEMORY", 0, 0, TF_FAIL_ERROR},
	    {"TIMEOUT", 0, 0, TF_FAIL_TIMEOUT},
	    {"DEADLINE", 0, 0, TF_FAIL_TIMEOUT},
	    {"PREEMPTED", 0, 0, TF_FAIL_PREEMPTED},
	    {"NODE_FAIL", 0, 0, TF_FAIL_INFRA},
	    {"BOOT_FAIL", 0, 0, TF_FAIL_INFRA},
	    {"CANCELLED", 0, 0, TF_FAIL_CANCELLED},
	    {"CANCELLED", TF_FAIL_CANCELLED, 0, TF_FAIL_CANCELLED},
	    {"CANCELLED", TF_FAIL_TIMEOUT, 0, TF_FAIL_TIMEOUT},
	    {"CANCELLED", TF_FAIL_PREEMPTED, 0, TF_FAIL_PREEMPTED},
	    {"CANCELLED", TF_FAIL_INFRA, 0, TF_FAIL_INFRA},
	    {"CANCELLED", TF_FAIL_ERROR, 0, TF_FAIL_ERROR}, /* pending for ever: we cancelled */
	    {"PENDING", 0, 0, TF_FAIL_LAST},
	    {"RUNNING", 0, 0, TF_FAIL_LAST},
	    {"COMPLETING", 0, 0, TF_FAIL_LAST},
	};
	char msg[128];
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		enum tf_fail_class c = tf_slurm_classify(cases[i].state, cases[i].requested,
		                                         cases[i].wstatus, msg, sizeof(msg));
		if (c != cases[i].want)
			fail_msg("%s (requested %d): got %s, want %s", cases[i].state,
			         cases[i].requested, tf_fail_class_name(c),
			         tf_fail_class_name(cases[i].want));
	}
	tf_slurm_classify("FAILED", 0, 3 << 8, msg, sizeof(msg));
	assert_string_equal(msg, "FAILED (exit 3)");
	tf_slurm_classify("CANCELLED", 0, 0, msg, sizeof(msg));
	assert_non_null(strstr(msg, "by someone else"));
}

/* What sbatch's failures mean, from the messages of Slurm 22.05's sbatch: the controller
 * away (wait and submit again), the job refused as asked for (error), anything else (infra). */
static void test_executor_slurm_sbatch_failures(void **state)
{
	(void)state;
	static const struct {
		const char *text;
		enum tf_fail_class want;
	} cases[] = {
	    {"sbatch: error: Batch job submission failed: Unable to contact slurm controller "
	     "(connect failure)",
	     TF_FAIL_LAST},
	    {"sbatch: error: Batch job submission failed: Socket timed out on send/recv operation",
	     TF_FAIL_LAST},
	    {"sbatch: error: Batch job submission failed: Zero Bytes were transmitted or received",
	     TF_FAIL_LAST},
	    {"sbatch: error: Slurm temporarily unable to accept job, sleeping and retrying",
	     TF_FAIL_LAST},
	    {"'sbatch' took longer than 60s", TF_FAIL_LAST},
	    {"sbatch: error: Batch job submission failed: Invalid partition name specified",
	     TF_FAIL_ERROR},
	    {"sbatch: error: Batch job submission failed: Invalid account or account/partition "
	     "combination specified",
	     TF_FAIL_ERROR},
	    {"sbatch: error: Batch job submission failed: Invalid qos specification",
	     TF_FAIL_ERROR},
	    {"sbatch: error: Batch job submission failed: Requested node configuration is not "
	     "available",
	     TF_FAIL_ERROR},
	    {"sbatch: error: Invalid generic resource (gres) specification", TF_FAIL_ERROR},
	    {"sbatch: error: Invalid --mem specification", TF_FAIL_ERROR},
	    {"sbatch: unrecognized option '--frobnicate'", TF_FAIL_ERROR},
	    {"sbatch: error: Batch job submission failed: Job violates accounting/QOS policy (job "
	     "submit limit, user's size and/or time limits)",
	     TF_FAIL_INFRA},
	    {"", TF_FAIL_INFRA},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		enum tf_fail_class c = tf_slurm_sbatch_class(cases[i].text);
		if (c != cases[i].want)
			fail_msg("'%s': got %d, want %d", cases[i].text, (int)c,
			         (int)cases[i].want);
	}
}

/* Further sbatch options of a step: what tpuflow owns is refused, --time, --mem and --gres
 * values are read as sbatch reads them (checked against sbatch 22.05 --test-only). */
static void test_executor_slurm_args(void **state)
{
	(void)state;
	static const char *const ok[] = {
	    "--mem=16G",
	    "--mem=100",
	    "--mem=1T",
	    "--mem-per-cpu=2g",
	    "--time=90",
	    "--time=1:30",
	    "--time=1:00:00",
	    "--time=1-2",
	    "--time=1-2:3:4",
	    "--time=UNLIMITED",
	    "-t10",
	    "--gres=tpu:4",
	    "--gres=tpu",
	    "--gres=tpu:v4:2,gpu:1",
	    "--constraint=v4",
	    "--qos=high",
	    "-pdebug",
	    "--exclusive",
	    "--wait-all-nodes=1",
	    "--comment=a b",
	    "--requeue",
	};
	static const struct {
		const char *arg, *says;
	} bad[] = {
	    {"mem", "is not an sbatch option"},
	    {"--mem 16G", "joined by '='"},
	    {"--array=1-4", "not a job array"},
	    {"--arr=1-4", "not a job array"},
	    {"-a1-4", "not a job array"},
	    {"--wait", "return at once"},
	    {"-W", "return at once"},
	    {"--hold", "never starts"},
	    {"--job-name=x", "finds it by that name"},
	    {"-Jx", "finds it by that name"},
	    {"--output=/tmp/o", "object store"},
	    {"-e/tmp/e", "object store"},
	    {"--export=ALL", "by name"},
	    {"--wrap=true", "script tpuflow writes"},
	    {"--test-only", "submits nothing"},
	    {"-Mother", "default cluster"},
	    {"--time=1h", "Slurm writes a time"},
	    {"--time=1:2:3:4", "Slurm writes a time"},
	    {"--time=1-", "Slurm writes a time"},
	    {"--time", "needs its value"},
	    {"--mem=1.5G", "whole number"},
	    {"--mem=16GiB", "whole number"},
	    {"--gres=tpu::4", "NAME[:TYPE][:COUNT]"},
	    {"--gres=a:b:c:d", "NAME[:TYPE][:COUNT]"},
	    {"--gres=tpu 4", "NAME[:TYPE][:COUNT]"},
	};
	char err[300];
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
		if (tf_slurm_arg_check(ok[i], err, sizeof(err)))
			fail_msg("'%s' refused: %s", ok[i], err);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = '\0';
		assert_int_equal(tf_slurm_arg_check(bad[i].arg, err, sizeof(err)), -EINVAL);
		if (!strstr(err, bad[i].says) || !strstr(err, bad[i].arg))
			fail_msg("'%s': '%s' does not say '%s'", bad[i].arg, err, bad[i].says);
	}
}

/* Slurm's elapsed times as squeue (TimeUsed) and sacct (ElapsedRaw) print them. */
static void test_executor_slurm_elapsed(void **state)
{
	(void)state;
	static const struct {
		const char *text;
		long want; /* -1: refused */
	} cases[] = {
	    {"0:00", 0},   {"0:04", 4},   {"12:34", 754},  {"1:02:03", 3723}, {"1-02:03:04", 93784},
	    {"30", 30},    {"N/A", -1},   {"", -1},        {"1-02:03", -1},   {"1:2:3:4", -1},
	    {"-1:00", -1}, {"0:04x", -1}, {"INVALID", -1},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		long got = -1;
		int rc = tf_slurm_elapsed_parse(cases[i].text, &got);
		if (cases[i].want < 0 ? rc != -EINVAL : rc != 0 || got != cases[i].want)
			fail_msg("'%s': rc %d, %ld s; want %ld", cases[i].text, rc, got,
			         cases[i].want);
	}
}

/* A lost attempt's job is followed again while it is queued or running and when it ended in
 * a state the executor classifies; only an unknown state is submitted anew. */
static void test_executor_slurm_followable(void **state)
{
	(void)state;
	static const struct {
		const char *state;
		int want;
	} cases[] = {
	    {"PENDING", 1},   {"RUNNING", 1},       {"SUSPENDED", 1}, {"COMPLETING", 1},
	    {"REQUEUED", 1},  {"COMPLETED", 2},     {"FAILED", 2},    {"TIMEOUT", 2},
	    {"CANCELLED", 2}, {"OUT_OF_MEMORY", 2}, {"NODE_FAIL", 2}, {"PREEMPTED", 2},
	    {"DEADLINE", 2},  {"BOOT_FAIL", 2},     {"REVOKED", 0},   {"", 0},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		if (tf_slurm_state_followable(cases[i].state) != cases[i].want)
			fail_msg("%s: %d, want %d", cases[i].state,
			         tf_slurm_state_followable(cases[i].state), cases[i].want);
}

/* ---- the Slurm executor against fake client commands ---- */

static char fake_dir[512];

/* Writes an executable script NAME in fake_dir. */
static void fake_tool(const char *name, const char *body)
{
	char path[600];
	snprintf(path, sizeof(path), "%s/%s", fake_dir, name);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fprintf(f, "#!/bin/sh\nD='%s'\n%s", fake_dir, body);
	fclose(f);
	assert_int_equal(chmod(path, 0755), 0);
}

/* What the fake squeue prints for job 7: STATE, TimeUsed and Start/EndTime (Unix seconds or
 * N/A); SubmitTime is 1000. */
static void fake_row(const char *st, const char *used, const char *start, const char *end)
{
	char path[600], row[256];
	snprintf(path, sizeof(path), "%s/row", fake_dir);
	snprintf(row, sizeof(row), "7|%s|node1|0|0|None|%s|1000|%s|%s|\n", st, used, start, end);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(row, f);
	fclose(f);
}

static int fake_scancelled(void)
{
	char path[600];
	snprintf(path, sizeof(path), "%s/scancel.txt", fake_dir);
	return access(path, F_OK) == 0;
}

/* The step's timeout counts the job's run time as Slurm does (TimeUsed): not while it is
 * pending in the queue, nor while it is suspended; past it the job is cancelled and the
 * attempt is a timeout, also while squeue cannot be asked (a running job's time goes on). */
static void test_executor_slurm_timeout_counts_run_time(void **state)
{
	(void)state;
	snprintf(fake_dir, sizeof(fake_dir), "%s/fake-slurm", tf_test_tmp());
	mkdir(fake_dir, 0755);
	fake_tool("sbatch", "echo 7\n");
	fake_tool("squeue", "echo \"$SLURM_TIME_FORMAT\" > \"$D/time-format\"\n"
	                    "if [ -e \"$D/away\" ]; then\n"
	                    "  echo 'squeue: error: Unable to contact slurm controller' >&2\n"
	                    "  exit 1\n"
	                    "fi\n"
	                    "cat \"$D/row\"\n");
	fake_tool("scancel", "echo \"$*\" >> \"$D/scancel.txt\"\n");
	fake_tool("sacct", "echo 'Slurm accounting storage is disabled' >&2; exit 1\n");
	char *old_path = tf_xstrdup(getenv("PATH"));
	char *path = tf_xasprintf("%s:%s", fake_dir, old_path);
	setenv("PATH", path, 1);
	setenv("TPUFLOW_SLURM_POLL", "0.05", 1);

	fake_row("PENDING", "0:00", "N/A", "N/A");
	char logs_dir[600];
	snprintf(logs_dir, sizeof(logs_dir), "%s/logs", fake_dir);
	struct tf_slurm_spec so = {.job_name = "tpuflow-r-s-1"};
	struct tf_exec_spec spec = {
	    .argv = (char *const[]){"true", NULL}, .timeout = 1, .log_dir = logs_dir, .slurm = &so};
	struct tf_exec *x = NULL;
	struct tf_exec_result res;
	char err[256];
	assert_int_equal(tf_exec_start(&tf_executor_slurm, &spec, &x, err, sizeof(err)), 0);
	assert_int_equal(tf_exec_slurm_job(x, NULL, 0, NULL, 0), 7);
	/* 1.5 s in the queue: not run time */
	assert_int_equal(tf_exec_wait(x, 1.5, &res), -ETIMEDOUT);
	assert_false(fake_scancelled());
	double queued, ran;
	tf_exec_slurm_times(x, &queued, &ran);
	assert_true(queued < 0);
	/* running, then suspended for 1.5 s: not run time either */
	fake_row("RUNNING", "0:00", "1010", "1070");
	assert_int_equal(tf_exec_wait(x, 0.3, &res), -ETIMEDOUT);
	tf_exec_slurm_times(x, &queued, &ran);
	assert_true(queued == 10);
	fake_row("SUSPENDED", "0:00", "1010", "1070");
	assert_int_equal(tf_exec_wait(x, 1.5, &res), -ETIMEDOUT);
	assert_false(fake_scancelled());
	/* running again, and squeue stops answering: its time goes on, and past 1 s it is
	 * cancelled */
	fake_row("RUNNING", "0:00", "1010", "1070");
	double t0 = tf_now_monotonic();
	assert_int_equal(tf_exec_wait(x, 0.2, &res), -ETIMEDOUT);
	char away[600];
	snprintf(away, sizeof(away), "%s/away", fake_dir);
	tf_test_write_file(away, "");
	while (!fake_scancelled() && tf_now_monotonic() - t0 < 10)
		assert_int_equal(tf_exec_wait(x, 0.05, &res), -ETIMEDOUT);
	double took = tf_now_monotonic() - t0;
	if (!fake_scancelled() || took < 1.0)
		fail_msg("scancel after %.2f s of running (timeout 1 s): %s", took,
		         fake_scancelled() ? "too early" : "never");
	unlink(away);
	/* Slurm says it was cancelled: a timeout, with the times it waited, ran and stood */
	fake_row("CANCELLED", "0:01", "1010", "1013");
	assert_int_equal(tf_exec_wait(x, 5, &res), 0);
	assert_int_equal(res.fclass, TF_FAIL_TIMEOUT);
	if (!strstr(res.message, "past the step's timeout of 1s") ||
	    !strstr(res.message, "queued 10s, ran 1s, suspended 2s"))
		fail_msg("message: %s", res.message);
	char fmt_path[600];
	snprintf(fmt_path, sizeof(fmt_path), "%s/time-format", fake_dir);
	FILE *f = fopen(fmt_path, "r");
	char fmt[32] = "";
	assert_non_null(f);
	assert_non_null(fgets(fmt, sizeof(fmt), f));
	fclose(f);
	assert_string_equal(fmt, "%s\n"); /* squeue printed its times as Unix seconds */
	tf_exec_free(x);
	setenv("PATH", old_path, 1);
	unsetenv("TPUFLOW_SLURM_POLL");
	free(old_path);
	free(path);
}

/* tpuflow re-executing itself as a step. */
static void test_executor_reexec_self(void **state)
{
	(void)state;
	const char *bin = getenv("TPUFLOW_BIN");
	if (!bin || access(bin, X_OK) != 0)
		skip();
	char *argv[] = {(char *)bin, "version", NULL};
	struct tf_exec *x = start_local(argv, 10, 1, NULL);
	struct tf_exec_result r;
	assert_int_equal(tf_exec_wait(x, -1, &r), 0);
	assert_int_equal(r.fclass, TF_FAIL_NONE);
	char *out = logs(x, 1);
	assert_non_null(strstr(out, "tpuflow"));
	free(out);
	tf_exec_free(x);
	char *self = tf_exec_self_path();
	assert_non_null(self);
	assert_true(self[0] == '/');
	free(self);
}

static void test_executor_logs_uploaded(void **state)
{
	(void)state;
	struct tf_objstore *st;
	char err[256];
	char *url =
	    tf_xasprintf("file://%s/objects", getenv("TF_TEST_TMP") ? getenv("TF_TEST_TMP") : ".");
	assert_int_equal(tf_objstore_open(url, &st, err, sizeof(err)), 0);
	free(url);
	char *argv[] = {"/bin/sh", "-c", "echo hello; echo oops >&2", NULL};
	struct tf_exec_spec spec = {.argv = argv, .store = st, .log_prefix = "runs/1/train/"};
	struct tf_exec *x;
	assert_int_equal(tf_exec_start(&tf_executor_local, &spec, &x, err, sizeof(err)), 0);
	struct tf_exec_result r;
	assert_int_equal(tf_exec_wait(x, -1, &r), 0);
	assert_int_equal(r.logs_uploaded, 1);
	void *data;
	size_t len;
	assert_int_equal(tf_objstore_get(st, "runs/1/train/stdout.log", &data, &len), 0);
	assert_int_equal(len, 6);
	assert_memory_equal(data, "hello\n", 6);
	free(data);
	assert_int_equal(tf_objstore_get(st, "runs/1/train/stderr.log", &data, &len), 0);
	assert_memory_equal(data, "oops\n", 5);
	free(data);
	tf_exec_free(x);
	tf_objstore_free(st);
}

/* ---- in-process ---- */

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_executor_argv_verbatim),
	    cmocka_unit_test(test_executor_logs_and_exit_code),
	    cmocka_unit_test(test_executor_child_signals_default),
	    cmocka_unit_test(test_executor_log_cap_keeps_head_and_tail),
	    cmocka_unit_test(test_executor_lazy_logs),
	    cmocka_unit_test(test_executor_timeout_kills_group),
	    cmocka_unit_test(test_executor_killed_child_reported),
	    cmocka_unit_test(test_executor_exit_codes_mapped),
	    cmocka_unit_test(test_executor_cancel_and_preempt),
	    cmocka_unit_test(test_executor_spawn_failure),
	    cmocka_unit_test(test_executor_reexec_self),
	    cmocka_unit_test(test_executor_logs_uploaded),
	    cmocka_unit_test(test_executor_slurm_states),
	    cmocka_unit_test(test_executor_slurm_sbatch_failures),
	    cmocka_unit_test(test_executor_slurm_args),
	    cmocka_unit_test(test_executor_slurm_elapsed),
	    cmocka_unit_test(test_executor_slurm_followable),
	    cmocka_unit_test(test_executor_slurm_timeout_counts_run_time),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

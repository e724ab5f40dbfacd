/* local.c — the local child-process executor: clone+exec of an argv (no shell) into its own
 * process group, stdout/stderr to log files, timeouts and cancels as SIGTERM to the group then
 * SIGKILL after the grace period, and the exit status mapped to a failure class.
 *
 * The child is made as posix_spawn makes it, by clone(CLONE_VM | CLONE_VFORK) on a stack of
 * its own (not posix_spawn itself, because the child must arm PR_SET_PDEATHSIG before it runs
 * the program): it shares the parent's memory until it calls execve, so starting it costs
 * the same whatever the engine's size. fork() copied the page tables of the whole process
 * and the exec threw them away again: with a 10,000-step run in memory (~90 MB) that was
 * three quarters of a step's CPU time (perf), so a step cost more the wider the run.
 * Until the exec the child runs only async-signal-safe calls on its own stack, with every
 * signal blocked (the parent's handlers must not run in it), and the parent waits. It must
 * arm PR_SET_PDEATHSIG before it runs the program: when the thread that started it dies
 * (the engine was killed with kill -9, or crashed), the kernel sends the child SIGTERM, so a
 * step does not run on unowned. The
 * death signal reaches the leader only; what the leader started stays in its process group,
 * which the engine records with the attempt and ends on resume (orchestrator/engine.c). The
 * thread that starts a child must therefore wait for it (the step kinds do).
 *
 * The child leads its own process group (setpgid in both parent and child), so signalling -pid
 * reaches everything it started that stayed in the group. When the leader exits, the leader is left
 * unreaped (waitid WNOWAIT) while the rest of the group is killed, so the group id cannot be
 * reused by an unrelated process between the two; then it is reaped. A step's processes
 * therefore never outlive its attempt.
 *
 * Output goes through pipes that local_wait() drains into stdout.log and stderr.log (with
 * tf_exec_spec.lazy_logs created at the stream's first byte: a silent program costs no
 * file), each capped at $TPUFLOW_LOG_MAX bytes (default 64 MiB, tf_exec_log_cap()): past the
 * cap the file keeps its first part and, after a line saying how much was cut, the last
 * min(cap/4, 1 MiB) bytes, so neither the disk nor the log store grows with a chatty
 * program. A program that writes faster than the engine drains waits on the pipe. */
#define TF_LOG_TAG "exec"
#include "executors/exec_int.h"
#include "common/common.h"
#include "common/log.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* One output stream of the child: pipe -> capped log file. */
struct sink {
	int in, file;       /* read end of the pipe, the log file; -1 once closed */
	const char *lazy;   /* the log's path while it is to be created at the first byte
	                       (tf_exec_spec.lazy_logs), else NULL */
	const char *dir;    /* the directory it goes in, made then too */
	int made;           /* the log file exists (created at start, or at the first byte) */
	uint64_t kept, cut; /* bytes written to the file's head; bytes past the cap */
	char *tail;         /* ring of the last tail_cap bytes past the head (or NULL) */
	size_t tail_cap;    /* size of the ring */
	size_t tail_pos;    /* bytes ever put in the ring (the next slot, modulo tail_cap) */
	const char *cap_by; /* where the cap came from, for the cut line ("log_max") */
};

struct local {
	struct tf_exec head;       /* common part: first */
	pid_t pid;                 /* the child, leader of its process group */
	int pidfd;                 /* pidfd_open(pid), -1 when the kernel has none */
	double timeout, grace;     /* seconds */
	double term_at;            /* when SIGTERM went to the group, 0: not yet */
	int killed;                /* SIGKILL sent */
	volatile int requested;    /* enum tf_fail_class asked for (cancel, preempt, timeout) */
	int done;                  /* reaped; res holds the outcome */
	struct tf_exec_result res; /* the outcome once done */
	struct sink sink[2];       /* stdout, stderr */
	uint64_t head_cap; /* bytes of each stream written before the tail ring takes over */
};

/* Moves what the pipe holds into the file (head) or the tail ring; closes the pipe at EOF. */
static void sink_pump(struct sink *k, uint64_t head_cap)
{
	char buf[65536];
	while (k->in >= 0) {
		ssize_t n = read(k->in, buf, sizeof(buf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			if (n == 0 || errno != EAGAIN) {
				close(k->in);
				k->in = -1;
			}
			return;
		}
		size_t off = 0;
		if (k->lazy) {
			/* the first byte: now the log needs its file (and its directory) */
			int rc = tf_mkdir_p(k->dir);
			k->file =
			    rc ? -1 : open(k->lazy, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
			if (k->file < 0)
				tf_warn("cannot create log '%s': %s (its output is dropped)",
				        k->lazy, strerror(rc ? -rc : errno));
			k->made = k->file >= 0;
			k->lazy = NULL;
		}
		if (k->kept < head_cap) {
			size_t h = (uint64_t)n < head_cap - k->kept ? (size_t)n
			                                            : (size_t)(head_cap - k->kept);
			if (k->file >= 0 && write(k->file, buf, h) != (ssize_t)h)
				tf_debug("log write: %s",
				         strerror(errno)); /* a full disk: keep draining */
			k->kept += h;
			off = h;
		}
		size_t rest = (size_t)n - off;
		if (rest && k->tail_cap) {
			if (!k->tail)
				k->tail = tf_xmalloc(k->tail_cap);
			if (rest > k->tail_cap) { /* what the ring would overwrite at once */
				size_t skip = rest - k->tail_cap;
				k->tail_pos += skip;
				k->cut += skip;
				off += skip;
				rest = k->tail_cap;
			}
			size_t at = k->tail_pos % k->tail_cap;
			size_t first = rest < k->tail_cap - at ? rest : k->tail_cap - at;
			memcpy(k->tail + at, buf + off, first);
			memcpy(k->tail, buf + off + first, rest - first);
			k->tail_pos += rest;
			k->cut += rest;
		}
	}
}

/* At the end: what was cut, then the ring in order; closes the file. */
static void sink_close(struct sink *k, const char *name)
{
	if (k->file >= 0 && k->cut) {
		size_t have = k->cut < k->tail_cap ? (size_t)k->cut : k->tail_cap;
		char line[200];
		int n =
		    snprintf(line, sizeof(line),
		             "\n[tpuflow: %llu bytes of %s cut here (%s); the last %zu follow]\n",
		             (unsigned long long)(k->cut - have), name, k->cap_by, have);
		size_t start = k->cut < k->tail_cap ? 0 : k->tail_pos % k->tail_cap;
		if (write(k->file, line, (size_t)n) != n ||
		    write(k->file, k->tail + start, have - start) != (ssize_t)(have - start) ||
		    write(k->file, k->tail, start) != (ssize_t)start)
			tf_debug("log write: %s", strerror(errno));
	}
	if (k->in >= 0)
		close(k->in);
	if (k->file >= 0)
		close(k->file);
	free(k->tail);
	k->in = k->file = -1;
	k->tail = NULL;
}

/* Reads both pipes until the writers are gone (the group was killed), at most ~2 s for
 * processes that left the group holding them. */
static void drain(struct local *l)
{
	double until = tf_now_monotonic() + 2;
	while ((l->sink[0].in >= 0 || l->sink[1].in >= 0) && tf_now_monotonic() < until) {
		struct pollfd pf[2] = {{.fd = l->sink[0].in, .events = POLLIN},
		                       {.fd = l->sink[1].in, .events = POLLIN}};
		poll(pf, 2, 100);
		sink_pump(&l->sink[0], l->head_cap);
		sink_pump(&l->sink[1], l->head_cap);
	}
	sink_close(&l->sink[0], "stdout");
	sink_close(&l->sink[1], "stderr");
}

static const char *local_log_path(const struct tf_exec *x, int stream)
{
	const struct local *l = (const struct local *)x;
	if (stream != 1 && stream != 2)
		return NULL;
	if (!l->sink[stream - 1].made)
		return NULL; /* lazy, and nothing was written */
	return stream == 1 ? x->out_path : x->err_path;
}

/* The program argv[0] names: itself when it holds a '/', else the first executable match in
 * $PATH (as execvp would look, but before fork, where looking may allocate). A new string, or
 * NULL with *err_no set (ENOENT, EACCES). */
static char *find_program(const char *name, int *err_no)
{
	if (strchr(name, '/')) {
		*err_no = 0;
		return tf_xstrdup(name);
	}
	const char *path = getenv("PATH");
	if (!path || !*path)
		path = "/usr/local/bin:/usr/bin:/bin";
	*err_no = ENOENT;
	for (const char *p = path;; p++) {
		const char *colon = strchr(p, ':');
		size_t n = colon ? (size_t)(colon - p) : strlen(p);
		char *cand =
		    n ? tf_xasprintf("%.*s/%s", (int)n, p, name) : tf_xasprintf("./%s", name);
		struct stat sb;
		if (stat(cand, &sb) == 0 && S_ISREG(sb.st_mode)) {
			if (access(cand, X_OK) == 0)
				return cand;
			*err_no = EACCES;
		}
		free(cand);
		if (!colon)
			break;
		p = colon;
	}
	return NULL;
}

/* What the child needs between clone and exec (the parent's, read only but for err). */
struct child_args {
	const char *prog;
	char *const *argv, *const *envp;
	const char *cwd;
	int infd;         /* its stdin (/dev/null, close-on-exec here) */
	int outfd, errfd; /* its stdout, stderr */
	pid_t parent;     /* getpid() of the parent */
	int err;          /* written by the child: why it could not exec (0: it did) */
};

/* The process's one descriptor on /dev/null (close-on-exec, never closed), every child's
 * stdin, opened by the first start that finds none: one that cannot open it (EMFILE) fails
 * with its own errno and the next start tries again. Or a negative errno. */
static int devnull(void)
{
	static atomic_int fd = -1;
	int cur = atomic_load(&fd);
	if (cur >= 0)
		return cur;
	int mine = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (mine < 0)
		return -errno;
	if (atomic_compare_exchange_strong(&fd, &cur, mine))
		return mine;
	close(mine); /* another start's came first: cur holds it */
	return cur;
}

/* Sets sig's disposition back to the default with the kernel's own call, not glibc's
 * sigaction, which refuses glibc's signals 32 and 33 (SIGCANCEL, SIGSETXID): a parent may
 * have ignored those too (GNU make 4.3 runs its recipes so), and an ignored signal outlives
 * the exec. An all-zero kernel sigaction is SIG_DFL, no flags, an empty mask, whatever the
 * architecture's layout; the kernel reads its own size of it and a sigset of (NSIG - 1) / 8
 * bytes. EINVAL for SIGKILL and SIGSTOP, which are never other than the default. In the
 * child: async-signal-safe. */
static void signal_default(int sig)
{
	unsigned long zero[16] = {0};
	syscall(SYS_rt_sigaction, sig, zero, NULL, (size_t)(NSIG - 1) / 8);
}

/* 1 when sig's disposition is the all-zero kernel sigaction above (the default, no flags),
 * read with the kernel's own call; else 0, also for a default with flags or a restorer
 * (glibc's sigaction gives every action one), which is then set again to no harm. In the
 * child: async-signal-safe. */
static int signal_is_default(int sig)
{
	unsigned long cur[16] = {0};
	if (syscall(SYS_rt_sigaction, sig, NULL, cur, (size_t)(NSIG - 1) / 8) < 0)
		return 1; /* not a signal this kernel has */
	for (size_t i = 0; i < TF_ARRAY_LEN(cur); i++)
		if (cur[i])
			return 0;
	return 1;
}

/* The child between clone and exec, in the parent's memory: only async-signal-safe calls,
 * nothing written but its own stack and a->err. Reports a failure as its errno in a->err,
 * which the parent reads once it runs again (CLONE_VFORK: after the exec or the exit), as
 * posix_spawn does. */
static int child_exec(void *arg)
{
	struct child_args *a = arg;
	const char *prog = a->prog, *cwd = a->cwd;
	char *const *argv = a->argv, *const *envp = a->envp;
	int infd = a->infd, outfd = a->outfd, errfd = a->errfd;
	pid_t parent = a->parent;
	int e = 0;
	/* its own process group, and it dies (SIGTERM) when the thread that started it does:
	 * a killed engine leaves no step process running on its own */
	if (setpgid(0, 0) < 0 || prctl(PR_SET_PDEATHSIG, SIGTERM) < 0)
		e = errno;
	if (!e && getppid() != parent)
		_exit(127); /* the parent died before the death signal was armed */
	/* every disposition back to the default: the ignored ones would outlive the exec, and a
	 * handler of the parent's must not run here once signals are unblocked. Only those not
	 * at the default already are set (a few, against 64), found by asking the kernel for
	 * each (as posix_spawn does): reading the kernel's summary in /proc/self/status
	 * instead cost more (the child's CPU per start in a process of ten threads and an
	 * 80 MB heap: 44-57 us with it, 32-43 with the 64 questions, 12-19 with neither),
	 * mostly in looking up the new process's /proc entry */
	for (int sig = 1; !e && sig < NSIG && sig <= 64; sig++)
		if (!signal_is_default(sig))
			signal_default(sig);
	sigset_t none;
	sigemptyset(&none);
	if (!e)
		sigprocmask(SIG_SETMASK, &none, NULL);
	if (!e && (dup2(infd, 0) < 0 || dup2(outfd, 1) < 0 || dup2(errfd, 2) < 0))
		e = errno;
	if (!e && cwd && chdir(cwd) < 0)
		e = errno;
	if (!e) {
		execve(prog, argv, envp);
		e = errno;
	}
	a->err = e ? e : EIO;
	_exit(127);
}

/* Starts child_exec(a) sharing this process's memory; returns when it has called execve or
 * exited (CLONE_VFORK). The child's pid, or -1 with errno set. */
static pid_t spawn(struct child_args *a)
{
	/* The child's stack is in this frame, which waits unused until the child has called
	 * execve or exited (CLONE_VFORK), as musl's posix_spawn does it. A stack malloc'd per
	 * start (64 KiB, aligned) grew the thread's heap by 64 KiB per step of a chain: freed
	 * between live allocations, the chunk was too small for the next aligned request, and
	 * each new one came from the top of the heap (a page fault per new page; a 1,000-step
	 * chain's run peaked at 90 MB, 28 MB with the stack here). */
	_Alignas(64) char stack[64 * 1024];
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	pid_t pid = clone(child_exec, stack + sizeof(stack), CLONE_VM | CLONE_VFORK | SIGCHLD, a);
	int e = errno;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	errno = e;
	return pid;
}

static int local_start(const struct tf_exec_spec *spec, struct tf_exec **out, char *err,
                       size_t errlen)
{
	if (!spec->argv || !spec->argv[0] || !spec->argv[0][0]) {
		tf_errf(err, errlen, "local executor needs an argv with a program");
		return -EINVAL;
	}
	struct local *l = tf_xcalloc(1, sizeof(*l));
	int rc = tf_exec_head_init(&l->head, &tf_executor_local, spec, err, errlen);
	int outfd = -1, errfd = -1, e = 0;
	int pout[2] = {-1, -1}, perr[2] = {-1, -1};
	char *prog = NULL;
	if (rc)
		goto out;
	l->timeout = spec->timeout;
	l->grace = spec->grace > 0 ? spec->grace : 10;
	l->pidfd = -1;
	if (!spec->lazy_logs) {
		outfd = open(l->head.out_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		errfd = open(l->head.err_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	}
	if (!spec->lazy_logs && (outfd < 0 || errfd < 0)) {
		rc = -errno;
		tf_errf(err, errlen, "cannot create logs in '%s': %s", l->head.dir, strerror(-rc));
		goto out;
	}
	if (pipe2(pout, O_CLOEXEC) < 0 || pipe2(perr, O_CLOEXEC) < 0) {
		rc = -errno;
		tf_errf(err, errlen, "cannot create pipes: %s", strerror(-rc));
		goto out;
	}
	int in = devnull();
	if (in < 0) {
		rc = in;
		tf_errf(err, errlen, "cannot open /dev/null: %s", strerror(-rc));
		goto out;
	}
	prog = find_program(spec->argv[0], &e);
	if (!prog) {
		rc = -e;
		goto spawn_failed;
	}
	struct child_args ca = {.prog = prog,
	                        .argv = spec->argv,
	                        .envp = spec->envp ? spec->envp : environ,
	                        .cwd = spec->cwd,
	                        .infd = in,
	                        .outfd = pout[1],
	                        .errfd = perr[1],
	                        .parent = getpid()};
	l->pid = spawn(&ca);
	if (l->pid < 0) {
		rc = -errno;
		goto spawn_failed;
	}
	/* the child made its group before it exec'd (EACCES here then) or failed to; either way
	 * the group exists from here on */
	setpgid(l->pid, l->pid);
	if (ca.err) {
		/* exec failed: the child said why and exits */
		int st;
		while (waitpid(l->pid, &st, 0) < 0 && errno == EINTR)
			;
		rc = -ca.err;
		goto spawn_failed;
	}
	l->head.pgid = l->pid;
	uint64_t cap = spec->log_max >= 4096 ? spec->log_max : tf_exec_log_cap();
	for (int i = 0; i < 2; i++) {
		int *p = i ? perr : pout;
		close(p[1]);
		fcntl(p[0], F_SETFL, O_NONBLOCK); /* a new pipe's end has no other status flag */
		l->sink[i] = (struct sink){.in = p[0],
		                           .file = i ? errfd : outfd,
		                           .cap_by = spec->log_max >= 4096 ? "log_max"
		                                                           : "TPUFLOW_LOG_MAX",
		                           .lazy = !spec->lazy_logs ? NULL
		                                   : i              ? l->head.err_path
		                                                    : l->head.out_path,
		                           .dir = l->head.dir,
		                           .made = !spec->lazy_logs};
		l->sink[i].tail_cap = cap / 4 < (1u << 20) ? (size_t)(cap / 4) : (1u << 20);
		p[0] = p[1] = -1;
	}
	l->head_cap = cap - l->sink[0].tail_cap;
	outfd = errfd = -1;
#ifdef SYS_pidfd_open
	l->pidfd = (int)syscall(SYS_pidfd_open, l->pid, 0);
#endif
	tf_debug("started pid %d: %s", (int)l->pid, spec->argv[0]);
	*out = &l->head;
	l = NULL;
	goto out;
spawn_failed:
	tf_errf(err, errlen, "cannot start '%s': %s%s", spec->argv[0], strerror(-rc),
	        rc == -ENOENT ? " (not found: check the path or PATH)" : "");
out:
	free(prog);
	if (outfd >= 0)
		close(outfd);
	if (errfd >= 0)
		close(errfd);
	for (int i = 0; i < 2; i++) {
		if (pout[i] >= 0)
			close(pout[i]);
		if (perr[i] >= 0)
			close(perr[i]);
	}
	if (l) {
		tf_exec_head_release(&l->head);
		free(l);
	}
	return rc;
}

static void signal_group(struct local *l, int sig)
{
	if (kill(-l->pid, sig) < 0 && errno != ESRCH)
		tf_warn("cannot signal process group %d: %s", (int)l->pid, strerror(errno));
}

/* Sends what the deadlines call for: SIGTERM at the timeout, SIGKILL after the grace.
 * Returns 1 when it sent a signal. */
static int enforce(struct local *l, double now)
{
	int sent = 0;
	if (!l->term_at && l->timeout > 0 && now - l->head.started >= l->timeout) {
		l->requested = TF_FAIL_TIMEOUT;
		l->term_at = now;
		signal_group(l, SIGTERM);
		sent = 1;
	}
	if (l->term_at && !l->killed && now - l->term_at >= l->grace) {
		l->killed = 1;
		signal_group(l, SIGKILL);
		sent = 1;
	}
	return sent;
}

/* The next moment enforce() has something to do, in seconds from now (-1: none). */
static double next_deadline(const struct local *l, double now)
{
	double t;
	if (!l->term_at && l->timeout > 0)
		t = l->head.started + l->timeout - now;
	else if (l->term_at && !l->killed)
		t = l->term_at + l->grace - now;
	else
		return -1;
	return t > 0 ? t : 0;
}

/* Checks for the leader's exit without blocking; on exit kills what is left of the group,
 * reaps the leader and fills l->res. Returns 1 when done. */
static int reap(struct local *l)
{
	if (l->done)
		return 1;
	siginfo_t si;
	memset(&si, 0, sizeof(si));
	if (waitid(P_PID, (id_t)l->pid, &si, WEXITED | WNOHANG | WNOWAIT) < 0 || si.si_pid == 0)
		return 0;
	/* the leader is a zombie: its group id stays reserved while we clear the group */
	kill(-l->pid, SIGKILL);
	int status = 0;
	while (waitpid(l->pid, &status, 0) < 0 && errno == EINTR)
		;
	drain(l);
	l->done = 1;
	struct tf_exec_result *r = &l->res;
	memset(r, 0, sizeof(*r));
	r->seconds = tf_now_monotonic() - l->head.started;
	r->fclass = tf_exec_classify_status(status, (enum tf_fail_class)l->requested, r->message,
	                                    sizeof(r->message));
	r->exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
	r->signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
	if (l->requested == TF_FAIL_TIMEOUT) {
		size_t n = strlen(r->message);
		snprintf(r->message + n, sizeof(r->message) - n, " %gs", l->timeout);
	}
	if (l->pidfd >= 0) {
		close(l->pidfd);
		l->pidfd = -1;
	}
	tf_exec_head_finish(&l->head, r);
	tf_debug("pid %d ended: %s (%s)", (int)l->pid, r->message, tf_fail_class_name(r->fclass));
	return 1;
}

static int local_poll(struct tf_exec *x, struct tf_exec_result *res)
{
	struct local *l = (struct local *)x;
	sink_pump(&l->sink[0], l->head_cap);
	sink_pump(&l->sink[1], l->head_cap);
	if (!reap(l) && !(enforce(l, tf_now_monotonic()) && reap(l)))
		return -EAGAIN;
	*res = l->res;
	return 0;
}

static int local_wait(struct tf_exec *x, double timeout, struct tf_exec_result *res)
{
	struct local *l = (struct local *)x;
	double start = tf_now_monotonic();
	for (;;) {
		if (local_poll(x, res) == 0)
			return 0;
		double now = tf_now_monotonic();
		if (timeout >= 0 && now - start >= timeout)
			return -ETIMEDOUT;
		/* sleep until the child exits, a signal deadline, or our own timeout */
		double nap = next_deadline(l, now);
		if (timeout >= 0 && (nap < 0 || timeout - (now - start) < nap))
			nap = timeout - (now - start);
		struct pollfd pf[3] = {{.fd = l->sink[0].in, .events = POLLIN},
		                       {.fd = l->sink[1].in, .events = POLLIN},
		                       {.fd = l->pidfd, .events = POLLIN}};
		/* no pidfd: poll the child every millisecond */
		int ms = l->pidfd < 0 ? 1 : nap < 0 ? -1 : (int)(nap * 1000) + 1;
		poll(pf, 3, ms);
		sink_pump(&l->sink[0], l->head_cap);
		sink_pump(&l->sink[1], l->head_cap);
	}
}

static int local_cancel(struct tf_exec *x, enum tf_fail_class why)
{
	struct local *l = (struct local *)x;
	if (l->done)
		return 0;
	if (!l->term_at) {
		l->requested = why;
		l->term_at = tf_now_monotonic();
		signal_group(l, SIGTERM);
	}
	return 0;
}

static void local_free(struct tf_exec *x)
{
	struct local *l = (struct local *)x;
	if (!l->done) {
		/* freeing a running attempt: stop it rather than leak a process group */
		signal_group(l, SIGKILL);
		int st;
		while (waitpid(l->pid, &st, 0) < 0 && errno == EINTR)
			;
		sink_close(&l->sink[0], "stdout");
		sink_close(&l->sink[1], "stderr");
	}
	if (l->pidfd >= 0)
		close(l->pidfd);
	tf_exec_head_release(&l->head);
	free(l);
}

const struct tf_executor_ops tf_executor_local = {
    .name = "local",
    .start = local_start,
    .poll = local_poll,
    .wait = local_wait,
    .cancel = local_cancel,
    .log_path = local_log_path,
    .free = local_free,
};

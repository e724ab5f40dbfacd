/* slurm.c — the Slurm executor: an attempt is one batch job submitted with `sbatch
 * --parsable`, followed with `squeue`, stopped with `scancel` (docs/slurm.md).
 *
 * Submission: the argv becomes a two-line /bin/sh script (`exec` of the quoted words) handed
 * to sbatch as a file; resources, limits and the job name are command-line options; the
 * environment goes by name only (--export=NAMES), its values taken by sbatch from the
 * environment it is started with, so no secret is ever written into the script. With an
 * object store (tf_exec_spec.store) the job puts its own stdout and stderr there (its argv
 * is `tpuflow step job ...`, cli/cmd_step_job.c: the compute node shares no filesystem with
 * us), Slurm's own output goes to /dev/null, and the logs are fetched into the log directory
 * when the job has ended. Without one Slurm writes them to the log directory (--output/
 * --error), which must then be on a filesystem the node shares.
 *
 * Polling: every live job of this process is on one list; whichever handle polls first after
 * the interval (TPUFLOW_SLURM_POLL seconds, default 2) runs ONE `squeue -j ID,ID,...` for all
 * of them and updates each; the others read what it found. Jobs squeue has stopped listing
 * for three sweeps are asked of accounting with ONE `sacct -j ID,ID,...` in the same sweep.
 * Slurm's states map to classes:
 *
 *   COMPLETED                         none (success)
 *   FAILED, OUT_OF_MEMORY             error
 *   TIMEOUT, DEADLINE                 timeout
 *   PREEMPTED                         preempted
 *   NODE_FAIL, BOOT_FAIL              infra
 *   CANCELLED                         what we asked for (cancel, timeout), else cancelled
 *                                     (someone ran scancel). What we ask for is recorded
 *                                     before the scancel goes out (send_stop), so the
 *                                     coordinator that follows the job after a crash knows
 *                                     it (tf_slurm_spec.attach_requested)
 *   PENDING for a reason that never   error: cancelled here (never_starts: a dependency that
 *   passes                            cannot be met, constraints, account or QOS)
 *   requeued (its restart count grew) infra when the node it ran on is down, drained or
 *                                     failing; else preempted. The requeued job is cancelled:
 *                                     the retry policy starts the next attempt, which resumes
 *                                     from the step's newest checkpoint.
 *
 * Timeouts: the step's timeout counts the job's run time as Slurm counts it (squeue's
 * TimeUsed: not while it is pending in the queue, nor while it is suspended), so time spent
 * waiting for the cluster is never taken from the work. Each sweep records TimeUsed; between
 * sweeps a running job's run time grows with the clock (also while squeue cannot answer);
 * past the timeout the job is cancelled here and classed as a timeout. --time is the timeout
 * rounded up to whole minutes (Slurm's unit): Slurm ends the job by itself (TIMEOUT) when no
 * coordinator is there to. Queue, run and suspended times go into the result's message
 * (Slurm's SubmitTime, StartTime, EndTime and TimeUsed, asked for as Unix seconds).
 *
 * A job squeue no longer lists is looked up with `sacct` (when accounting keeps it, or the
 * job completion log of jobcomp/filetxt: `sacct -c`), then
 * `scontrol show job` for those sacct does not know; if Slurm says it has forgotten it, the
 * attempt is an infra failure.
 *
 * An unreachable controller is waited for, never taken for an outcome: while squeue fails
 * the job is followed on (a job outlives its controller's restart); sbatch failing for want
 * of the controller is tried again from poll (SUBMIT_WAIT at most), after asking squeue for
 * a job of the attempt's name, since a submission whose answer was lost may have been
 * accepted; a stop asked meanwhile is scancelled once Slurm answers, or given up after
 * STOP_WAIT with the job named. sbatch refusing the job itself (a bad partition, account or
 * option) is an error, not retried (tf_slurm_sbatch_class).
 *
 * Freeing a handle stops nothing: a job outlives the process that submitted it, and a
 * restarted coordinator follows it again by its id (tf_slurm_spec.attach_job). */
#define TF_LOG_TAG "slurm"
#include "executors/exec_int.h"
#include "common/buf.h"
#include "common/common.h"
#include "common/log.h"
#include "storage/objstore.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define TOOL_OUT_MAX (4u << 20) /* bytes kept of a Slurm command's stdout */
#define TOOL_TIMEOUT 60.0       /* seconds a Slurm command may take */
#define LOST_SWEEPS 3           /* sweeps a job may be missing before scontrol is asked */
#define SUBMIT_WAIT 300.0       /* seconds sbatch may fail for want of the controller */
#define STOP_WAIT 300.0         /* seconds a stop waits for an unreachable Slurm */
#define WARN_EVERY 60.0         /* seconds between warnings that Slurm cannot be reached */

struct slurm {
	struct tf_exec head; /* common part: first */
	long job;            /* the job id */
	double limit;        /* --time in seconds (0: none) */
	double timeout;      /* the step's timeout: the run time allowed, seconds (0: none) */
	int requested;       /* enum tf_fail_class asked for (cancel, timeout), 0: none */
	int scancelled;      /* scancel succeeded (or found the job gone) */
	int (*stopping)(void *data, long job, enum tf_fail_class why); /* tf_slurm_spec's */
	void *stopping_data;
	int intent_told;     /* stopping was called for this stop (the polling thread's) */
	double stop_since;   /* monotonic time the stop was asked, 0: none */
	double scancel_at;   /* monotonic time of the last scancel tried */
	/* a submission waiting for the controller (job 0 meanwhile) */
	char **sbatch;       /* sbatch's argv, owned, NULL once submitted */
	char **envp;         /* its environment, owned (NULL: ours) */
	char *name;          /* the job name, owned */
	double submit_since; /* monotonic time of the first failed try */
	double submit_next;  /* when to try again */
	int submit_tries;
	char submit_err[256]; /* what the last try said */
	/* what the last sweep saw (guarded by reg_lock) */
	char state[32];       /* Slurm job state, "" before the first sighting */
	char reason[64];      /* why it is pending (squeue's Reason), "" when not */
	char never[64];       /* the reason that made us cancel a job that could never start */
	char nodes[256];      /* nodes the job runs or ran on */
	int restarts;         /* restart count as last seen */
	int base_restarts;    /* restart count at the first sighting (-1: not seen yet) */
	int wstatus;          /* exit status as a wait status */
	int missing;          /* consecutive sweeps that did not list the job */
	int lookup;           /* the last lookup of a job squeue stopped listing: 1 sacct or
	                         scontrol knew it (state set), -1 neither did, 0 none yet */
	double used;          /* its run time as Slurm counts it (TimeUsed: not while pending
	                         or suspended), seconds ... */
	double used_at;       /* ... as of this monotonic time (0: not seen yet) */
	long submit_t;        /* Slurm's SubmitTime, StartTime and EndTime (Unix seconds; 0: */
	long start_t;         /* unknown); StartTime is an estimate while the job is pending */
	long end_t;           /* and EndTime one while it runs */
	int done;             /* res holds the outcome */
	struct tf_exec_result res;
	struct slurm *next; /* on the live list */
};

/* ---- running Slurm's commands ---------------------------------------------------------- */

/* Runs argv (no shell) with envp (NULL: ours), stdin from /dev/null; collects stdout into
 * *out (NUL-terminated, the caller frees) and the start of stderr into errtxt. Returns the
 * exit code (>= 0) or a negative errno when it could not run or took too long. */
static int run_tool(char *const argv[], char *const envp[], char **out, char *errtxt, size_t errlen)
{
	int po[2] = {-1, -1}, pe[2] = {-1, -1};
	size_t olen = 0, elen = 0, ocap = 4096;
	char *obuf = tf_xmalloc(ocap);
	pid_t pid = -1;
	int rc;
	errtxt[0] = '\0';
	if (pipe2(po, O_CLOEXEC) < 0 || pipe2(pe, O_CLOEXEC) < 0) {
		rc = -errno;
		snprintf(errtxt, errlen, "pipe: %s", strerror(-rc));
		goto out;
	}
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_adddup2(&fa, po[1], 1);
	posix_spawn_file_actions_adddup2(&fa, pe[1], 2);
	rc = -posix_spawnp(&pid, argv[0], &fa, NULL, argv, envp ? envp : environ);
	posix_spawn_file_actions_destroy(&fa);
	close(po[1]);
	close(pe[1]);
	po[1] = pe[1] = -1;
	if (rc) {
		snprintf(errtxt, errlen, "cannot run '%s': %s%s", argv[0], strerror(-rc),
		         rc == -ENOENT ? " (is Slurm's client installed and on PATH?)" : "");
		pid = -1;
		goto out;
	}
	double start = tf_now_monotonic();
	struct pollfd pf[2] = {{.fd = po[0], .events = POLLIN}, {.fd = pe[0], .events = POLLIN}};
	int open_fds = 2;
	while (open_fds) {
		double left = TOOL_TIMEOUT - (tf_now_monotonic() - start);
		if (left <= 0) {
			kill(pid, SIGKILL);
			snprintf(errtxt, errlen, "'%s' took longer than %gs", argv[0],
			         TOOL_TIMEOUT);
			rc = -ETIMEDOUT;
			break;
		}
		if (poll(pf, 2, (int)(left * 1000) + 1) < 0 && errno != EINTR)
			break;
		for (int i = 0; i < 2; i++) {
			if (pf[i].fd < 0 || !(pf[i].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			char buf[4096];
			ssize_t n = read(pf[i].fd, buf, sizeof(buf));
			if (n <= 0) {
				pf[i].fd = -1;
				open_fds--;
				continue;
			}
			if (i == 0 && olen + (size_t)n < TOOL_OUT_MAX) {
				while (olen + (size_t)n + 1 > ocap)
					obuf = tf_xrealloc(obuf, ocap *= 2);
				memcpy(obuf + olen, buf, (size_t)n);
				olen += (size_t)n;
			} else if (i == 1 && elen + 1 < errlen) {
				size_t k =
				    (size_t)n < errlen - 1 - elen ? (size_t)n : errlen - 1 - elen;
				memcpy(errtxt + elen, buf, k);
				elen += k;
				errtxt[elen] = '\0';
			}
		}
	}
	int st = 0;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (rc == 0)
		rc = WIFEXITED(st) ? WEXITSTATUS(st) : -EIO;
	while (elen && (errtxt[elen - 1] == '\n' || errtxt[elen - 1] == ' '))
		errtxt[--elen] = '\0';
out:
	for (int i = 0; i < 2; i++) {
		if (po[i] >= 0)
			close(po[i]);
		if (pe[i] >= 0)
			close(pe[i]);
	}
	obuf[olen] = '\0';
	if (out)
		*out = obuf;
	else
		free(obuf);
	return rc;
}

/* Our environment with SLURM_TIME_FORMAT=%s, so squeue and sacct print their times as Unix
 * seconds whatever the user's own setting is (Slurm formats them with strftime, and glibc's
 * %s is the seconds since the Epoch). A new array of borrowed strings: the caller frees the
 * array only. */
static char **time_env(void)
{
	static char fmt[] = "SLURM_TIME_FORMAT=%s";
	size_t n = 0, k = 0;
	while (environ[n])
		n++;
	char **env = tf_xcalloc(n + 2, sizeof(char *));
	for (size_t i = 0; i < n; i++)
		if (strncmp(environ[i], "SLURM_TIME_FORMAT=", 18))
			env[k++] = environ[i];
	env[k] = fmt;
	return env;
}

/* Unix seconds as squeue or sacct print them under time_env(); 0 for "N/A", "Unknown" or
 * "None". */
static long unix_time(const char *text)
{
	char *end;
	long t = strtol(text, &end, 10);
	return end != text && !*end && t > 0 ? t : 0;
}

int tf_slurm_elapsed_parse(const char *text, long *secs)
{
	/* [DAYS-][HOURS:]MINUTES:SECONDS (squeue's TimeUsed), or plain seconds */
	long days = 0, part[3];
	int n = 0;
	const char *p = text;
	char *end;
	const char *dash = strchr(p, '-');
	if (dash) {
		days = strtol(p, &end, 10);
		if (end != dash || end == p || days < 0)
			return -EINVAL;
		p = dash + 1;
	}
	for (;;) {
		if (*p < '0' || *p > '9' || n == 3)
			return -EINVAL;
		part[n++] = strtol(p, &end, 10);
		if (*end != ':')
			break;
		p = end + 1;
	}
	if (*end || (dash && n != 3))
		return -EINVAL;
	long s = n == 1   ? part[0]
	         : n == 2 ? part[0] * 60 + part[1]
	                  : part[0] * 3600 + part[1] * 60 + part[2];
	*secs = days * 86400 + s;
	return 0;
}

/* `sacct -X -n -P -j IDS -o FIELDS` (times as Unix seconds) into *out, which the caller
 * frees. Without an accounting database (AccountingStorageType=accounting_storage/none, where
 * sacct says "Slurm accounting storage is disabled") the job completion log is asked instead:
 * `sacct -c` reads what JobCompType=jobcomp/filetxt wrote to JobCompLoc, a file on the
 * machine sacct runs on (sacct(1), Slurm 22.05). Returns run_tool's code. */
static int run_sacct(const char *ids, const char *fields, char **out, char *err, size_t errlen)
{
	char *argv[] = {"sacct", "-X", "-n", "-P", "-j", (char *)ids, "-o", (char *)fields, NULL};
	char *comp[] = {"sacct", "-c",         "-X", "-n", "-P", "-j", (char *)ids,
	                "-o",    (char *)fields, NULL};
	char **env = time_env();
	int rc = run_tool(argv, env, out, err, errlen);
	if (rc > 0 && strstr(err, "accounting storage is disabled")) {
		free(*out);
		rc = run_tool(comp, env, out, err, errlen);
	}
	free(env);
	return rc;
}

/* scancel JOB: 1 when it was cancelled or had ended already, 0 when Slurm could not be asked
 * (logged; the caller tries again). */
static int scancel_job(long job)
{
	char id[24], err[256];
	snprintf(id, sizeof(id), "%ld", job);
	char *argv[] = {"scancel", id, NULL};
	int rc = run_tool(argv, NULL, NULL, err, sizeof(err));
	if (rc == 0 || strstr(err, "already completing or completed") ||
	    strstr(err, "Invalid job id"))
		return 1;
	tf_warn("scancel %ld: %s", job, err[0] ? err : "failed");
	return 0;
}

/* ---- the live list and the batched sweep ------------------------------------------------ */

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct slurm *reg_head; /* live jobs of this process */
static double reg_last;        /* when the last sweep ran (monotonic), 0: never */
static double reg_fail_since;  /* when squeue started failing, 0: it works */
static double reg_warned;      /* when that was last logged */

static double poll_interval(void)
{
	const char *v = getenv("TPUFLOW_SLURM_POLL");
	char *end;
	double d = v && *v ? strtod(v, &end) : 2.0;
	if (v && *v && (*end || d < 0.05 || d > 3600)) {
		tf_warn("TPUFLOW_SLURM_POLL='%s' is not a number of seconds in [0.05, 3600]: "
		        "using 2",
		        v);
		d = 2.0;
	}
	return d;
}

/* Copies field i (0-based) of a '|'-separated row, trimmed. */
static void field(const char *row, int i, char *dst, size_t n)
{
	const char *p = row;
	for (; i > 0 && p; i--) {
		p = strchr(p, '|');
		if (p)
			p++;
	}
	dst[0] = '\0';
	if (!p)
		return;
	size_t len = strcspn(p, "|\n");
	while (len && p[len - 1] == ' ')
		len--;
	while (len && *p == ' ') {
		p++;
		len--;
	}
	if (len >= n)
		len = n - 1;
	memcpy(dst, p, len);
	dst[len] = '\0';
}

#define SQUEUE_FORMAT                                                                              \
	"JobID:|,State:|,NodeList:255|,RestartCnt:|,exit_code:|,Reason:|,TimeUsed:|,"              \
	"SubmitTime:|,StartTime:|,EndTime:|"

/* The times of a row of squeue or sacct into s: from column `first` on, the time the job has
 * run (as of `now`, monotonic), then when it was submitted, started and ended. */
static void apply_times(struct slurm *s, const char *row, int first, double now)
{
	char f[64];
	long used;
	field(row, first, f, sizeof(f));
	if (tf_slurm_elapsed_parse(f, &used) == 0) {
		s->used = (double)used;
		s->used_at = now;
	}
	field(row, first + 1, f, sizeof(f));
	s->submit_t = unix_time(f);
	field(row, first + 2, f, sizeof(f));
	s->start_t = unix_time(f);
	field(row, first + 3, f, sizeof(f));
	s->end_t = unix_time(f);
}

/* Applies one squeue row, from a sweep at monotonic time `now`, to the job it names. */
static void apply_row(const char *row, double now)
{
	char f[256];
	field(row, 0, f, sizeof(f));
	long id = strtol(f, NULL, 10);
	for (struct slurm *s = reg_head; s; s = s->next) {
		if (s->job != id)
			continue;
		field(row, 1, s->state, sizeof(s->state));
		field(row, 2, f, sizeof(f));
		if (f[0] && strcmp(f, "(null)"))
			snprintf(s->nodes, sizeof(s->nodes), "%s", f);
		field(row, 3, f, sizeof(f));
		s->restarts = atoi(f);
		if (s->base_restarts < 0)
			s->base_restarts = s->restarts;
		field(row, 4, f, sizeof(f));
		s->wstatus = atoi(f);
		field(row, 5, s->reason, sizeof(s->reason));
		apply_times(s, row, 6, now);
		s->missing = -1; /* seen: the caller turns it back into 0 */
	}
}

/* "ID,ID,..." of the live jobs missing from at least `missing` sweeps, or NULL when there
 * are none; the caller frees. Called with reg_lock held. */
static char *job_ids(int missing)
{
	size_t n = 0, cap = 64;
	char *ids = tf_xmalloc(cap);
	ids[0] = '\0';
	for (struct slurm *s = reg_head; s; s = s->next) {
		if (s->done || s->job <= 0 || s->missing < missing)
			continue;
		char one[24];
		int k = snprintf(one, sizeof(one), "%s%ld", n ? "," : "", s->job);
		while (n + (size_t)k + 1 > cap)
			ids = tf_xrealloc(ids, cap *= 2);
		memcpy(ids + n, one, (size_t)k + 1);
		n += (size_t)k;
	}
	if (!n) {
		free(ids);
		return NULL;
	}
	return ids;
}

static struct slurm *find_job(long id)
{
	for (struct slurm *s = reg_head; s; s = s->next)
		if (s->job == id && !s->done)
			return s;
	return NULL;
}

/* Jobs squeue stopped listing: ONE sacct for all of them (rows "ID|STATE|EXIT:SIGNAL", e.g.
 * "12|CANCELLED by 0|0:15"; without slurmdbd from the job completion log, run_sacct), then, for those it did not know,
 * the controller's memory (scontrol, which takes one id). Sets each one's lookup: 1 known,
 * -1 forgotten (scontrol said "Invalid job id"), 0 when scontrol could not be asked. Called
 * with reg_lock held. */
static void lookup_missing(void)
{
	char *ids = job_ids(LOST_SWEEPS), *out = NULL, err[256];
	if (!ids)
		return;
	for (struct slurm *s = reg_head; s; s = s->next)
		if (!s->done && s->job > 0 && s->missing >= LOST_SWEEPS)
			s->lookup = -1;
	int rc = run_sacct(ids, "JobID,State,ExitCode,ElapsedRaw,Submit,Start,End", &out, err,
	                   sizeof(err));
	double now = tf_now_monotonic();
	char *save = NULL;
	for (char *row = rc ? NULL : strtok_r(out, "\n", &save); row;
	     row = strtok_r(NULL, "\n", &save)) {
		struct slurm *s = find_job(strtol(row, NULL, 10));
		char f[64];
		int code = 0, sig = 0;
		field(row, 1, f, sizeof(f));
		if (!s || !f[0])
			continue;
		snprintf(s->state, sizeof(s->state), "%.*s", (int)strcspn(f, " "), f);
		field(row, 2, f, sizeof(f));
		if (sscanf(f, "%d:%d", &code, &sig) == 2)
			s->wstatus = sig ? sig : (code & 0xff) << 8;
		apply_times(s, row, 3, now);
		s->lookup = 1;
	}
	free(out);
	free(ids);
	for (struct slurm *s = reg_head; s; s = s->next) {
		if (s->done || s->lookup >= 0 || s->missing < LOST_SWEEPS)
			continue;
		char id[24];
		snprintf(id, sizeof(id), "%ld", s->job);
		char *scontrol[] = {"scontrol", "-o", "show", "job", id, NULL};
		out = NULL;
		if (run_tool(scontrol, NULL, &out, err, sizeof(err)) == 0) {
			const char *p = strstr(out, "JobState=");
			if (p) {
				snprintf(s->state, sizeof(s->state), "%.*s",
				         (int)strcspn(p + 9, " \n"), p + 9);
				s->lookup = 1;
			}
		} else if (!strstr(err, "Invalid job id")) {
			s->lookup = 0; /* not asked: try again at the next sweep */
		}
		free(out);
	}
}

/* One squeue for every live job, then one lookup for those it no longer lists. Called with
 * reg_lock held. */
static void sweep(void)
{
	char *ids = job_ids(INT_MIN);
	if (!ids)
		return;
	char *argv[] = {"squeue", "-h", "-t", "all", "-j", ids, "-O", SQUEUE_FORMAT, NULL};
	char *out = NULL, err[512], **env = time_env();
	int rc = run_tool(argv, env, &out, err, sizeof(err));
	free(env);
	reg_last = tf_now_monotonic();
	if (rc) {
		/* "Invalid job id specified" when every id is gone; otherwise squeue is down */
		if (!strstr(err, "Invalid job id")) {
			if (!reg_fail_since)
				reg_fail_since = reg_warned = reg_last;
			if (reg_last == reg_warned || reg_last - reg_warned >= WARN_EVERY) {
				reg_warned = reg_last;
				tf_warn("squeue: %s (failing for %.0fs; the jobs are followed "
				        "on once it answers)",
				        err[0] ? err : "failed", reg_last - reg_fail_since);
			}
			free(out);
			free(ids);
			return;
		}
	}
	if (reg_fail_since)
		tf_info("squeue answers again after %.0fs", reg_last - reg_fail_since);
	reg_fail_since = 0;
	for (struct slurm *s = reg_head; s; s = s->next)
		if (!s->done && s->job > 0)
			s->missing = s->missing < 0 ? 0 : s->missing;
	char *save = NULL;
	for (char *row = strtok_r(out, "\n", &save); row; row = strtok_r(NULL, "\n", &save))
		apply_row(row, reg_last);
	for (struct slurm *s = reg_head; s; s = s->next)
		if (!s->done && s->job > 0)
			s->missing = s->missing < 0 ? 0 : s->missing + 1;
	free(out);
	free(ids);
	lookup_missing();
}

static void reg_add(struct slurm *s)
{
	pthread_mutex_lock(&reg_lock);
	s->next = reg_head;
	reg_head = s;
	reg_last = 0; /* the new job is looked at by the next poll */
	pthread_mutex_unlock(&reg_lock);
}

static void reg_remove(struct slurm *s)
{
	pthread_mutex_lock(&reg_lock);
	for (struct slurm **p = &reg_head; *p; p = &(*p)->next)
		if (*p == s) {
			*p = s->next;
			break;
		}
	pthread_mutex_unlock(&reg_lock);
}

/* ---- states to classes ----------------------------------------------------------------- */

/* Whether a node state (sinfo %T) means the machine is unwell rather than taken away. */
static int node_unwell(const char *nodes)
{
	if (!nodes[0])
		return 0;
	char *argv[] = {"sinfo", "-h", "-N", "-n", (char *)nodes, "-o", "%T", NULL};
	char *out = NULL, err[256];
	int bad = 0;
	if (run_tool(argv, NULL, &out, err, sizeof(err)) == 0)
		bad = strstr(out, "down") || strstr(out, "drain") || strstr(out, "fail") ||
		      strstr(out, "not_responding") || strstr(out, "*");
	free(out);
	return bad;
}

enum tf_fail_class tf_slurm_classify(const char *state, int requested, int wstatus, char *msg,
                                     size_t msglen)
{
	if (!strcmp(state, "COMPLETED")) {
		snprintf(msg, msglen, "COMPLETED");
		return TF_FAIL_NONE;
	}
	if (!strcmp(state, "FAILED") || !strcmp(state, "OUT_OF_MEMORY")) {
		if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus))
			snprintf(msg, msglen, "%s (exit %d)", state, WEXITSTATUS(wstatus));
		else if (WIFSIGNALED(wstatus))
			snprintf(msg, msglen, "%s (killed by SIG%s)", state,
			         sigabbrev_np(WTERMSIG(wstatus)) ? sigabbrev_np(WTERMSIG(wstatus))
			                                         : "?");
		else
			snprintf(msg, msglen, "%s", state);
		/* our own sysexits for "the environment failed" keep their meaning */
		if (WIFEXITED(wstatus) &&
		    (WEXITSTATUS(wstatus) == 69 || WEXITSTATUS(wstatus) == 75))
			return TF_FAIL_INFRA;
		return TF_FAIL_ERROR;
	}
	if (!strcmp(state, "TIMEOUT") || !strcmp(state, "DEADLINE")) {
		snprintf(msg, msglen, "%s: ran past its Slurm time limit", state);
		return TF_FAIL_TIMEOUT;
	}
	if (!strcmp(state, "PREEMPTED")) {
		snprintf(msg, msglen, "PREEMPTED by Slurm");
		return TF_FAIL_PREEMPTED;
	}
	if (!strcmp(state, "NODE_FAIL") || !strcmp(state, "BOOT_FAIL")) {
		snprintf(msg, msglen, "%s: the node failed", state);
		return TF_FAIL_INFRA;
	}
	if (!strcmp(state, "CANCELLED")) {
		if (requested == TF_FAIL_TIMEOUT) {
			snprintf(msg, msglen, "CANCELLED after its timeout");
			return TF_FAIL_TIMEOUT;
		}
		if (requested == TF_FAIL_PREEMPTED || requested == TF_FAIL_INFRA) {
			snprintf(msg, msglen, "CANCELLED after a requeue");
			return (enum tf_fail_class)requested;
		}
		if (requested == TF_FAIL_ERROR) {
			snprintf(msg, msglen, "CANCELLED: it could never start");
			return TF_FAIL_ERROR;
		}
		snprintf(msg, msglen, "CANCELLED %s",
		         requested == TF_FAIL_CANCELLED ? "as asked" : "by someone else (scancel)");
		return TF_FAIL_CANCELLED;
	}
	return TF_FAIL_LAST; /* not finished */
}

/* Whether a pending job's reason (squeue's Reason) can never pass by itself: a dependency
 * that cannot be met, constraints no node has, an account or QOS it may not use. */
static int never_starts(const char *reason)
{
	static const char *const never[] = {"DependencyNeverSatisfied", "BadConstraints",
	                                    "InvalidAccount", "InvalidQOS", NULL};
	for (size_t i = 0; never[i]; i++)
		if (!strcmp(reason, never[i]))
			return 1;
	return 0;
}

/* The job's run time as Slurm counts it: TimeUsed as of the last sweep, plus the time since
 * while it runs (a job pending in the queue or suspended is not running). Called with
 * reg_lock held. */
static double run_time(const struct slurm *s, double now)
{
	if (!s->used_at)
		return 0;
	return s->used + (!strcmp(s->state, "RUNNING") ? now - s->used_at : 0);
}

/* Appends " (queued Qs, ran Rs, suspended Ss)" to buf for a job that has ended: how long it
 * waited in the queue (StartTime - SubmitTime), ran (TimeUsed) and stood suspended (the rest
 * of EndTime - StartTime); a figure Slurm did not give is left out. */
static void times_note(const struct slurm *s, char *buf, size_t len)
{
	struct tf_buf b = {0};
	if (strcmp(s->state, "PENDING") && s->submit_t && s->start_t >= s->submit_t)
		tf_buf_printf(&b, "queued %lds", s->start_t - s->submit_t);
	if (s->used_at)
		tf_buf_printf(&b, "%sran %.0fs", b.len ? ", " : "", s->used);
	/* EndTime is a forecast until the job has ended */
	char m[80];
	int ended = tf_slurm_classify(s->state, 0, 0, m, sizeof(m)) != TF_FAIL_LAST;
	long susp = ended && s->start_t && s->end_t ? s->end_t - s->start_t - (long)s->used : 0;
	if (s->used_at && susp > 1)
		tf_buf_printf(&b, "%ssuspended %lds", b.len ? ", " : "", susp);
	size_t n = strlen(buf);
	if (b.len)
		snprintf(buf + n, len - n, " (%s)", tf_buf_str(&b));
	tf_buf_release(&b);
}

/* Decides the job's outcome from the last sweep. Called with reg_lock held; returns 1 when
 * the job is over (s->res filled except logs). */
static int judge(struct slurm *s)
{
	struct tf_exec_result *r = &s->res;
	char msg[200];
	double now = tf_now_monotonic();
	if (s->base_restarts >= 0 && s->restarts > s->base_restarts && !s->requested) {
		/* requeued (scontrol requeue, preemption in requeue mode, a node failure) */
		int infra = node_unwell(s->nodes);
		s->requested = infra ? TF_FAIL_INFRA : TF_FAIL_PREEMPTED;
		tf_info("job %ld was requeued (%s): cancelling it; the retry policy decides what "
		        "runs next",
		        s->job, infra ? "its node is down or drained" : "preempted");
		s->stop_since = now;
	}
	if (!s->requested && s->timeout > 0 && run_time(s, now) > s->timeout) {
		tf_info("job %ld has run %.0fs, past the step's timeout of %gs: cancelling it",
		        s->job, run_time(s, now), s->timeout);
		s->requested = TF_FAIL_TIMEOUT;
		s->stop_since = now;
	}
	if (!s->requested && !strcmp(s->state, "PENDING") && never_starts(s->reason)) {
		tf_info("job %ld is pending for a reason that never passes (%s): cancelling it",
		        s->job, s->reason);
		s->requested = TF_FAIL_ERROR;
		s->stop_since = now;
		snprintf(s->never, sizeof(s->never), "%s", s->reason);
	}
	enum tf_fail_class c =
	    s->state[0] ? tf_slurm_classify(s->state, s->requested, s->wstatus, msg, sizeof(msg))
	                : TF_FAIL_LAST;
	if (c == TF_FAIL_ERROR && s->requested == TF_FAIL_ERROR)
		snprintf(msg, sizeof(msg),
		         "CANCELLED: it was pending for a reason that never "
		         "passes (%s%ssqueue's JOB REASON CODES)",
		         s->never, s->never[0] ? "; " : "");
	if (c == TF_FAIL_TIMEOUT && s->requested == TF_FAIL_TIMEOUT && s->timeout > 0)
		snprintf(msg, sizeof(msg), "CANCELLED: it ran past the step's timeout of %gs",
		         s->timeout);
	if (c == TF_FAIL_LAST && s->lookup && s->missing >= LOST_SWEEPS) {
		/* not listed any more: what accounting or the controller said (lookup_missing);
		 * a job neither knows is lost */
		int known = s->lookup > 0;
		s->lookup = 0;
		if (known) {
			s->missing = 0; /* still there after all: keep following it */
		} else {
			snprintf(msg, sizeof(msg), "Slurm no longer knows job %ld", s->job);
			c = TF_FAIL_INFRA;
		}
	}
	if (c == TF_FAIL_LAST && s->requested && now - s->stop_since > STOP_WAIT &&
	    (reg_fail_since || !s->scancelled)) {
		/* a stop cannot wait for ever on a controller that is away */
		if (s->scancelled)
			snprintf(msg, sizeof(msg),
			         "cancelled with scancel; squeue has not answered for %.0fs since",
			         now - s->stop_since);
		else
			snprintf(msg, sizeof(msg),
			         "scancel could not reach Slurm for %.0fs: the job may still be "
			         "queued or running (scancel %ld)",
			         now - s->stop_since, s->job);
		c = (enum tf_fail_class)s->requested;
	}
	if (c == TF_FAIL_LAST)
		return 0;
	memset(r, 0, sizeof(*r));
	r->fclass = c;
	/* the exit status means something only for a job that ended by itself; a requeued or
	 * cancelled one reports 0 */
	int ended = c == TF_FAIL_NONE || c == TF_FAIL_ERROR ||
	            (c == TF_FAIL_INFRA && !strcmp(s->state, "FAILED"));
	r->exit_code = ended && WIFEXITED(s->wstatus) ? WEXITSTATUS(s->wstatus) : -1;
	r->signal = ended && WIFSIGNALED(s->wstatus) ? WTERMSIG(s->wstatus) : 0;
	if (c != TF_FAIL_NONE && r->exit_code == 0)
		r->exit_code = -1; /* FAILED with exit 0: it never got to run (a launch failure) */
	r->seconds = now - s->head.started;
	times_note(s, msg, sizeof(msg));
	snprintf(r->message, sizeof(r->message), "Slurm job %ld%s%.60s: %.170s", s->job,
	         s->nodes[0] ? " on " : "", s->nodes, msg);
	s->done = 1;
	return 1;
}

/* ---- the backend ----------------------------------------------------------------------- */

static const char *slurm_log_path(const struct tf_exec *x, int stream)
{
	return stream == 1 ? x->out_path : stream == 2 ? x->err_path : NULL;
}

/* Appends s single-quoted for /bin/sh. */
static void sh_quote(FILE *f, const char *s)
{
	fputc('\'', f);
	for (; *s; s++) {
		if (*s == '\'')
			fputs("'\\''", f);
		else
			fputc(*s, f);
	}
	fputc('\'', f);
}

/* Writes the batch script: the argv, exec'd. Returns its path (the caller frees) or NULL. */
static char *write_script(const struct tf_exec *x, char *const *argv, char *err, size_t errlen)
{
	char *path = tf_xasprintf("%s/job.sh", x->dir);
	FILE *f = fopen(path, "w");
	if (!f) {
		snprintf(err, errlen, "cannot write '%s': %s", path, strerror(errno));
		free(path);
		return NULL;
	}
	fputs("#!/bin/sh\n# a tpuflow step attempt (docs/slurm.md)\nexec", f);
	for (size_t i = 0; argv[i]; i++) {
		fputc(' ', f);
		sh_quote(f, argv[i]);
	}
	fputc('\n', f);
	if (fclose(f)) {
		snprintf(err, errlen, "cannot write '%s': %s", path, strerror(errno));
		free(path);
		return NULL;
	}
	return path;
}

/* A NULL-terminated vector of strings, each owned, grown by one. */
static void strv_add(char ***v, size_t *n, char *owned)
{
	*v = tf_xrealloc(*v, (*n + 2) * sizeof(char *));
	(*v)[(*n)++] = owned;
	(*v)[*n] = NULL;
}

static void strv_free(char **v)
{
	for (size_t i = 0; v && v[i]; i++)
		free(v[i]);
	free(v);
}

/* The sbatch command line of the attempt (owned, strv_free), the script last. */
static char **sbatch_argv(const struct slurm *s, const struct tf_exec_spec *spec,
                          const char *script)
{
	const struct tf_slurm_spec *o = spec->slurm;
	char **w = NULL;
	size_t n = 0;
	strv_add(&w, &n, tf_xstrdup("sbatch"));
	strv_add(&w, &n, tf_xstrdup("--parsable"));
	strv_add(&w, &n, tf_xasprintf("--job-name=%s", s->name));
	if (o->comment)
		strv_add(&w, &n, tf_xasprintf("--comment=%s", o->comment));
	strv_add(&w, &n,
	         tf_xasprintf("--output=%s", s->head.store ? "/dev/null" : s->head.out_path));
	strv_add(&w, &n,
	         tf_xasprintf("--error=%s", s->head.store ? "/dev/null" : s->head.err_path));
	if (o->tpus_per_node > 0)
		strv_add(&w, &n, tf_xasprintf("--gres=tpu:%d", o->tpus_per_node));
	if (o->nodes > 1)
		strv_add(&w, &n, tf_xasprintf("--nodes=%d", o->nodes));
	if (s->limit > 0)
		strv_add(&w, &n, tf_xasprintf("--time=%ld", (long)(s->limit / 60)));
	if (o->partition)
		strv_add(&w, &n, tf_xasprintf("--partition=%s", o->partition));
	if (o->account)
		strv_add(&w, &n, tf_xasprintf("--account=%s", o->account));
	if (o->qos)
		strv_add(&w, &n, tf_xasprintf("--qos=%s", o->qos));
	/* the names only: sbatch reads their values from the environment it runs in */
	struct tf_buf names = {0};
	for (size_t i = 0; o->export_names && o->export_names[i]; i++)
		tf_buf_printf(&names, "%s%s", i ? "," : "", o->export_names[i]);
	strv_add(&w, &n, tf_xasprintf("--export=%s", names.len ? tf_buf_str(&names) : "NONE"));
	tf_buf_release(&names);
	for (size_t i = 0; o->extra && o->extra[i]; i++)
		strv_add(&w, &n, tf_xstrdup(o->extra[i]));
	strv_add(&w, &n, tf_xstrdup(script));
	return w;
}

enum tf_fail_class tf_slurm_sbatch_class(const char *text)
{
	/* Slurm's messages for a controller it cannot reach or that did not answer in time
	 * (slurm_errno.c), munge's for credentials it could not make */
	static const char *const away[] = {"Unable to contact slurm controller",
	                                   "Socket timed out",
	                                   "Zero Bytes were transmitted",
	                                   "Connection refused",
	                                   "Connection timed out",
	                                   "Connection reset",
	                                   "Communication connection failure",
	                                   "Communication send failure",
	                                   "Communication receive failure",
	                                   "backup controller in standby mode",
	                                   "temporarily unable",
	                                   "Resource temporarily unavailable",
	                                   "authentication error",
	                                   "Munge",
	                                   "took longer than",
	                                   NULL};
	/* the job as asked for is wrong: a partition, account, qos, GRES, time or memory it
	 * cannot have, an option sbatch does not know or cannot read */
	static const char *const refused[] = {"Invalid",
	                                      "invalid",
	                                      "unrecognized option",
	                                      "not available",
	                                      "can not be satisfied",
	                                      "cannot be satisfied",
	                                      "denied",
	                                      "not supported",
	                                      "requires an argument",
	                                      NULL};
	for (size_t i = 0; away[i]; i++)
		if (strstr(text, away[i]))
			return TF_FAIL_LAST;
	for (size_t i = 0; refused[i]; i++)
		if (strstr(text, refused[i]))
			return TF_FAIL_ERROR;
	return TF_FAIL_INFRA;
}

/* One sbatch: 0 with s->job set; -EAGAIN when the controller could not be reached (the job
 * may or may not exist), -EINVAL when sbatch refused the job as asked for, -EIO otherwise;
 * err says what sbatch said. */
static int try_submit(struct slurm *s, char *err, size_t errlen)
{
	char *out = NULL, terr[512];
	int rc = run_tool(s->sbatch, s->envp, &out, terr, sizeof(terr));
	if (rc == 0) {
		char *end;
		long job = strtol(out, &end, 10); /* "ID" or "ID;CLUSTER" */
		if (job <= 0 || (*end && *end != ';' && *end != '\n')) {
			snprintf(err, errlen, "sbatch printed no job id ('%.80s')", out);
			rc = -EPROTO;
		} else {
			s->job = job;
		}
	} else if (rc == -ENOENT) {
		snprintf(err, errlen, "%s", terr);
		rc = -EINVAL;
	} else {
		for (char *nl = strchr(terr, '\n'); nl; nl = strchr(nl, '\n'))
			*nl = ' '; /* sbatch may say it in two lines */
		enum tf_fail_class c = tf_slurm_sbatch_class(terr);
		tf_errf(err, errlen, "sbatch %s: %s%s",
		        c == TF_FAIL_ERROR ? "refused the job" : "failed",
		        terr[0] ? terr : "no message",
		        c == TF_FAIL_ERROR ? " (check the step's slurm: options and accelerator, "
		                             "docs/slurm.md)"
		                           : "");
		rc = c == TF_FAIL_LAST ? -EAGAIN : c == TF_FAIL_ERROR ? -EINVAL : -EIO;
	}
	free(out);
	return rc;
}

/* The newest job of this user named `name` that Slurm knows: its id, 0 when there is none,
 * -EAGAIN when squeue cannot be asked. */
static long job_by_name(const char *name)
{
	char *argv[] = {"squeue", "-h", "-t", "all", "--me", "-n", (char *)name, "-o", "%i", NULL};
	char *out = NULL, err[256];
	long id = run_tool(argv, NULL, &out, err, sizeof(err)) ? -EAGAIN : 0;
	char *save = NULL;
	for (char *row = id ? NULL : strtok_r(out, "\n", &save); row;
	     row = strtok_r(NULL, "\n", &save)) {
		long j = strtol(row, NULL, 10);
		if (j > id)
			id = j;
	}
	free(out);
	return id;
}

/* A submission that is waiting for the controller: tried again when due, after asking
 * whether an earlier try was taken after all. Gives up after SUBMIT_WAIT, or at once when a
 * stop is asked. Called with reg_lock held. */
static void submit_pending(struct slurm *s)
{
	double now = tf_now_monotonic();
	char err[256];
	int rc = -EAGAIN;
	if (s->requested) {
		tf_errf(err, sizeof(err), "stopped before Slurm took it (%s)", s->submit_err);
	} else if (now < s->submit_next) {
		return;
	} else {
		long id = job_by_name(s->name);
		if (id > 0) {
			tf_info("Slurm has a job %ld named %s: a submission whose answer was lost "
			        "was taken; following it",
			        id, s->name);
			s->job = id;
			rc = 0;
		} else if (id == 0) {
			rc = try_submit(s, err, sizeof(err));
		} else {
			snprintf(err, sizeof(err), "%s", s->submit_err);
		}
		if (rc == 0) {
			tf_info("submitted Slurm job %ld after %.0fs of waiting for the controller",
			        s->job, now - s->submit_since);
			strv_free(s->sbatch);
			s->sbatch = NULL;
			reg_last = 0; /* the new job is looked at by the next poll */
			return;
		}
		if (rc == -EAGAIN && now - s->submit_since < SUBMIT_WAIT) {
			snprintf(s->submit_err, sizeof(s->submit_err), "%s", err);
			double nap = 1 << (s->submit_tries < 5 ? s->submit_tries : 5);
			s->submit_tries++;
			s->submit_next = now + nap;
			return;
		}
		if (rc == -EAGAIN)
			tf_errf(err, sizeof(err), "%.200s; tried for %.0fs", s->submit_err,
			        now - s->submit_since);
	}
	struct tf_exec_result *r = &s->res;
	memset(r, 0, sizeof(*r));
	r->fclass = s->requested    ? (enum tf_fail_class)s->requested
	            : rc == -EINVAL ? TF_FAIL_ERROR
	                            : TF_FAIL_INFRA;
	r->exit_code = -1;
	r->seconds = now - s->head.started;
	tf_errf(r->message, sizeof(r->message), "no Slurm job: %s", err);
	s->done = 1;
}

static int slurm_start(const struct tf_exec_spec *spec, struct tf_exec **out, char *err,
                       size_t errlen)
{
	if (!spec->slurm || ((!spec->argv || !spec->argv[0]) && spec->slurm->attach_job <= 0)) {
		snprintf(err, errlen, "slurm executor needs an argv and its Slurm options");
		return -EINVAL;
	}
	struct slurm *s = tf_xcalloc(1, sizeof(*s));
	int rc = tf_exec_head_init(&s->head, &tf_executor_slurm, spec, err, errlen);
	if (rc)
		goto fail;
	s->base_restarts = -1;
	s->name = tf_xstrdup(spec->slurm->job_name ? spec->slurm->job_name : "tpuflow");
	if (spec->timeout > 0) {
		s->timeout = spec->timeout;
		s->limit = 60.0 * (double)(((long)ceil(spec->timeout) + 59) / 60);
	}
	s->stopping = spec->slurm->stopping;
	s->stopping_data = spec->slurm->stopping_data;
	if (spec->slurm->attach_job > 0) {
		s->job = spec->slurm->attach_job;
		tf_info("following Slurm job %ld again", s->job);
		if (spec->slurm->attach_requested > TF_FAIL_NONE &&
		    spec->slurm->attach_requested < TF_FAIL_LAST) {
			/* the stop its coordinator had asked for before it died: finished here
			 * (scancel again, recorded on this attempt), and a CANCELLED end is it */
			s->requested = spec->slurm->attach_requested;
			s->stop_since = tf_now_monotonic();
			tf_info("Slurm job %ld was being cancelled by tpuflow (%s) when its "
			        "coordinator stopped: finishing that",
			        s->job, tf_fail_class_name((enum tf_fail_class)s->requested));
		}
	} else {
		char *script = write_script(&s->head, spec->argv, err, errlen);
		if (!script) {
			rc = -EIO;
			goto fail;
		}
		s->sbatch = sbatch_argv(s, spec, script);
		free(script);
		for (size_t i = 0, n = 0; spec->envp && spec->envp[i]; i++)
			strv_add(&s->envp, &n, tf_xstrdup(spec->envp[i]));
		rc = try_submit(s, err, errlen);
		if (rc == -EAGAIN) { /* the controller is away: poll tries again */
			tf_warn("%s: trying again until Slurm answers (at most %.0fs)", err,
			        SUBMIT_WAIT);
			snprintf(s->submit_err, sizeof(s->submit_err), "%s", err);
			s->submit_since = tf_now_monotonic();
			s->submit_next = s->submit_since + 1;
			s->submit_tries = 1;
			rc = 0;
		} else if (rc) {
			goto fail;
		} else {
			strv_free(s->sbatch);
			s->sbatch = NULL;
			tf_debug("submitted Slurm job %ld", s->job);
		}
	}
	reg_add(s);
	*out = &s->head;
	return 0;
fail:
	strv_free(s->sbatch);
	strv_free(s->envp);
	free(s->name);
	tf_exec_head_release(&s->head);
	free(s);
	return rc;
}

/* The logs the job put in the store, fetched into the log directory once (the job has
 * ended). A job that never ran, or died before its logs were put, has none: said in the
 * result's message. */
static void fetch_logs(struct slurm *s)
{
	if (s->head.uploaded)
		return;
	tf_exec_head_fetch(&s->head, &s->res);
	if (!s->res.logs_uploaded) {
		/* 126/127 without logs: the node's shell could not run `tpuflow step job` */
		int exec = s->res.exit_code == 126 || s->res.exit_code == 127;
		size_t len = strlen(s->res.message);
		snprintf(s->res.message + len, sizeof(s->res.message) - len, "%s",
		         exec ? " (no logs of it in the object store: is tpuflow installed at the "
		                "same path on the node? docs/slurm.md)"
		              : " (no logs of it in the object store)");
	}
}

/* The one place a stop tpuflow decided on (s->requested: a cancel, the step's timeout, a
 * requeue, a job that can never start) reaches Slurm: its intent is handed to the record
 * first (tf_slurm_spec.stopping, once: commit before acting), then scancel, tried again each
 * poll interval until Slurm has taken it (the controller may be away). Called from poll,
 * without reg_lock: the record is a database commit. */
static void send_stop(struct slurm *s)
{
	pthread_mutex_lock(&reg_lock);
	double now = tf_now_monotonic();
	int go = s->requested && !s->scancelled && !s->done && s->job > 0 &&
	         now - s->scancel_at >= poll_interval();
	long job = s->job;
	enum tf_fail_class why = (enum tf_fail_class)s->requested;
	if (go)
		s->scancel_at = now;
	pthread_mutex_unlock(&reg_lock);
	if (!go)
		return;
	if (!s->intent_told && s->stopping) {
		int rc = s->stopping(s->stopping_data, job, why);
		if (rc)
			tf_warn("job %ld: the reason it is cancelled (%s) was not recorded (%s): "
			        "cancelling it all the same",
			        job, tf_fail_class_name(why), strerror(rc < 0 ? -rc : rc));
	}
	s->intent_told = 1;
	int taken = scancel_job(job);
	pthread_mutex_lock(&reg_lock);
	s->scancelled = taken;
	pthread_mutex_unlock(&reg_lock);
}

static int slurm_poll(struct tf_exec *x, struct tf_exec_result *res)
{
	struct slurm *s = (struct slurm *)x;
	pthread_mutex_lock(&reg_lock);
	if (!s->done && s->sbatch) {
		submit_pending(s);
	} else if (!s->done) {
		double now = tf_now_monotonic();
		if (!reg_last || now - reg_last >= poll_interval())
			sweep();
		judge(s);
	}
	int done = s->done;
	pthread_mutex_unlock(&reg_lock);
	if (!done) {
		send_stop(s);
		return -EAGAIN;
	}
	if (s->head.store && s->job > 0)
		fetch_logs(s);
	*res = s->res;
	return 0;
}

static int slurm_wait(struct tf_exec *x, double timeout, struct tf_exec_result *res)
{
	double start = tf_now_monotonic(), step = poll_interval();
	for (;;) {
		if (slurm_poll(x, res) == 0)
			return 0;
		double now = tf_now_monotonic();
		if (timeout >= 0 && now - start >= timeout)
			return -ETIMEDOUT;
		double nap = step / 4 < 0.05 ? 0.05 : step / 4;
		if (timeout >= 0 && timeout - (now - start) < nap)
			nap = timeout - (now - start);
		struct timespec ts = {(time_t)nap, (long)((nap - (double)(time_t)nap) * 1e9)};
		nanosleep(&ts, NULL);
	}
}

/* Only marks the stop: the next poll records it and sends it (send_stop), on the thread
 * that drives the handle, which the record's database handle belongs to. */
static int slurm_cancel(struct tf_exec *x, enum tf_fail_class why)
{
	struct slurm *s = (struct slurm *)x;
	pthread_mutex_lock(&reg_lock);
	if (!s->done && !s->requested) {
		s->requested = why;
		s->stop_since = tf_now_monotonic();
		s->scancel_at = 0; /* at once */
	}
	pthread_mutex_unlock(&reg_lock);
	return 0;
}

static void slurm_free(struct tf_exec *x)
{
	struct slurm *s = (struct slurm *)x;
	reg_remove(s);
	strv_free(s->sbatch);
	strv_free(s->envp);
	free(s->name);
	tf_exec_head_release(&s->head);
	free(s);
}

long tf_exec_slurm_job(struct tf_exec *x, char *nodes, size_t nodeslen, char *state,
                       size_t statelen)
{
	if (nodes && nodeslen)
		nodes[0] = '\0';
	if (state && statelen)
		state[0] = '\0';
	if (!x || x->ops != &tf_executor_slurm)
		return 0;
	struct slurm *s = (struct slurm *)x;
	pthread_mutex_lock(&reg_lock);
	if (nodes && nodeslen)
		snprintf(nodes, nodeslen, "%s", s->nodes);
	if (state && statelen)
		snprintf(state, statelen, "%s", s->state);
	long job = s->job;
	pthread_mutex_unlock(&reg_lock);
	return job;
}

int tf_slurm_state_followable(const char *state)
{
	static const char *const alive[] = {"PENDING",   "CONFIGURING", "RUNNING", "COMPLETING",
	                                    "SUSPENDED", "REQUEUED",    "STOPPED", "SIGNALING",
	                                    "STAGE_OUT", "RESIZING",    NULL};
	for (size_t i = 0; alive[i]; i++)
		if (!strcmp(state, alive[i]))
			return 1;
	char msg[128];
	return tf_slurm_classify(state, TF_FAIL_NONE, 0, msg, sizeof(msg)) != TF_FAIL_LAST ? 2 : 0;
}

void tf_exec_slurm_times(struct tf_exec *x, double *queued, double *ran)
{
	*queued = -1;
	*ran = 0;
	if (!x || x->ops != &tf_executor_slurm)
		return;
	struct slurm *s = (struct slurm *)x;
	pthread_mutex_lock(&reg_lock);
	if (strcmp(s->state, "PENDING") && s->submit_t && s->start_t >= s->submit_t)
		*queued = (double)(s->start_t - s->submit_t);
	*ran = run_time(s, tf_now_monotonic());
	pthread_mutex_unlock(&reg_lock);
}

int tf_slurm_job_state(long job, char *state, size_t statelen)
{
	char id[24], *out = NULL, err[256];
	snprintf(id, sizeof(id), "%ld", job);
	char *argv[] = {"squeue", "-h", "-t", "all", "-j", id, "-O", "State:|", NULL};
	int rc = run_tool(argv, NULL, &out, err, sizeof(err));
	if (rc == 0 && out[0]) {
		field(out, 0, state, statelen);
	} else if (rc == 0 || strstr(err, "Invalid job id")) {
		/* past MinJobAge: accounting may still know it ("CANCELLED by 0": the word) */
		free(out);
		out = NULL;
		rc = run_sacct(id, "State", &out, err, sizeof(err)) == 0 && out[0] ? 0 : -ENOENT;
		if (rc == 0)
			snprintf(state, statelen, "%.*s", (int)strcspn(out, " \n"), out);
	} else {
		snprintf(state, statelen, "%s", err[0] ? err : "squeue failed");
		rc = rc > 0 ? -EIO : rc;
	}
	free(out);
	return rc;
}

int tf_slurm_job_cancel(long job)
{
	return scancel_job(job) ? 0 : -EAGAIN;
}

int tf_slurm_job_tpus(long job, int *per_node, int *nodes, char *err, size_t errlen)
{
	char id[24], *out = NULL, terr[256];
	snprintf(id, sizeof(id), "%ld", job);
	char *argv[] = {"scontrol", "show", "job", "-d", id, NULL};
	int rc = run_tool(argv, NULL, &out, terr, sizeof(terr));
	if (rc) {
		snprintf(err, errlen, "scontrol show job %ld: %s", job, terr[0] ? terr : "failed");
		free(out);
		return rc > 0 ? -EIO : rc;
	}
	/* the detail line of each node: "Nodes=n1 CPU_IDs=0-3 Mem=0 GRES=tpu(CNT:4)" */
	const char *g = strstr(out, "GRES=tpu(CNT:");
	const char *nn = strstr(out, "NumNodes=");
	*per_node = g ? atoi(g + 13) : 0;
	*nodes = nn ? atoi(nn + 9) : 1;
	if (*nodes < 1)
		*nodes = 1;
	free(out);
	return 0;
}

const struct tf_executor_ops tf_executor_slurm = {
    .name = "slurm",
    .start = slurm_start,
    .poll = slurm_poll,
    .wait = slurm_wait,
    .cancel = slurm_cancel,
    .log_path = slurm_log_path,
    .free = slurm_free,
};

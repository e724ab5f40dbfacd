/* kinds_shell.c — owns the shell step: an argv list (never a shell string) run as a child
 * process in its own process group, with stdout/stderr captured into the attempt's log, a
 * timeout or Ctrl-C that kills the whole group (SIGTERM, then SIGKILL after a grace period),
 * and outputs/metrics read back from files the program writes (docs/runs.md):
 *
 *   TPUFLOW_OUTPUTS  JSON object or key=value lines     -> outputs
 *   TPUFLOW_METRICS  JSON object or key=value lines     -> metrics (numbers)
 *   TPUFLOW_RESULT   {"outputs": {...}, "metrics": {...}}
 *
 * The child is watched through a pidfd, so its exit is seen at once (no polling sleep); the
 * watcher wakes every 50 ms only to notice a raised cancel flag. */
#include "orchestrator/kinds.h"

#define TF_LOG_TAG "shell"
#include "common/common.h"
#include "common/log.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define KILL_GRACE_S 2.0 /* SIGTERM, then SIGKILL after this long */
#define RESULT_MAX (1u << 20)

static int pidfd_open_(pid_t pid)
{
#ifdef SYS_pidfd_open
	return (int)syscall(SYS_pidfd_open, pid, 0);
#else
	(void)pid;
	errno = ENOSYS;
	return -1;
#endif
}

/* Waits for the child; on cancel kills its process group. Returns the wait status. */
static int wait_child(pid_t pid, volatile int *cancel, int *killed)
{
	int status = 0, fd = pidfd_open_(pid);
	double term_at = 0;
	*killed = 0;
	for (;;) {
		pid_t w = waitpid(pid, &status, WNOHANG);
		if (w == pid)
			break;
		if (w < 0 && errno != EINTR)
			break;
		if (*cancel && !term_at) {
			kill(-pid, SIGTERM);
			term_at = tf_now_monotonic();
			*killed = 1;
		} else if (term_at && tf_now_monotonic() - term_at > KILL_GRACE_S) {
			kill(-pid, SIGKILL);
		}
		if (fd >= 0) {
			struct pollfd p = { .fd = fd, .events = POLLIN };
			poll(&p, 1, 50);
		} else {
			usleep(2000); /* no pidfd on this kernel */
		}
	}
	if (fd >= 0)
		close(fd);
	return status;
}

/* Parses a results file: a JSON object, or key=value lines. Numbers stay numbers when
 * `numbers` (metrics). Missing file: nothing added. */
static int read_kv(const char *path, json_t *into, int numbers, char *err, size_t errlen)
{
	char *buf = NULL;
	size_t len = 0;
	int rc = tf_read_file(path, RESULT_MAX, &buf, &len);
	if (rc == -ENOENT)
		return 0;
	if (rc) {
		snprintf(err, errlen, "cannot read '%s': %s", path, strerror(-rc));
		return rc;
	}
	const char *p = buf;
	while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
		p++;
	if (*p == '{') {
		json_error_t je;
		json_t *o = json_loads(p, 0, &je);
		if (!json_is_object(o)) {
			snprintf(err, errlen, "'%s' line %d: %s", path, je.line, je.text);
			json_decref(o);
			free(buf);
			return -EINVAL;
		}
		json_object_update(into, o);
		json_decref(o);
		free(buf);
		return 0;
	}
	char *save = NULL;
	for (char *line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *eq = strchr(line, '=');
		size_t n = strlen(line);
		if (n && line[n - 1] == '\r')
			line[n - 1] = '\0';
		if (!eq || eq == line)
			continue;
		*eq = '\0';
		const char *v = eq + 1;
		char *end = NULL;
		double d = strtod(v, &end);
		if (numbers && end != v && end && !*end)
			json_object_set_new(into, line, json_real(d));
		else
			json_object_set_new(into, line, json_string(v));
	}
	free(buf);
	return 0;
}

static int read_result(const char *path, json_t *outputs, json_t *metrics, char *err,
		       size_t errlen)
{
	char *buf = NULL;
	size_t len = 0;
	int rc = tf_read_file(path, RESULT_MAX, &buf, &len);
	if (rc == -ENOENT)
		return 0;
	if (rc) {
		snprintf(err, errlen, "cannot read '%s': %s", path, strerror(-rc));
		return rc;
	}
	json_error_t je;
	json_t *o = json_loads(buf, 0, &je);
	free(buf);
	if (!json_is_object(o)) {
		snprintf(err, errlen, "'%s' must hold {\"outputs\": {...}, \"metrics\": {...}}", path);
		json_decref(o);
		return -EINVAL;
	}
	if (json_is_object(json_object_get(o, "outputs")))
		json_object_update(outputs, json_object_get(o, "outputs"));
	if (json_is_object(json_object_get(o, "metrics")))
		json_object_update(metrics, json_object_get(o, "metrics"));
	json_decref(o);
	return 0;
}

static char *scalar_text(json_t *v)
{
	if (json_is_string(v))
		return tf_xstrdup(json_string_value(v));
	return json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
}

static int check_declared(json_t *names, json_t *have, const char *what, char *err,
			  size_t errlen)
{
	size_t i;
	json_t *n;
	json_array_foreach(names, i, n)
	{
		const char *name = json_string_value(n);
		if (name && !json_object_get(have, name)) {
			snprintf(err, errlen,
				 "the program did not write %s '%s' (write it to $TPUFLOW_%s or "
				 "$TPUFLOW_RESULT)",
				 what, name, !strcmp(what, "output") ? "OUTPUTS" : "METRICS");
			return -EINVAL;
		}
	}
	return 0;
}

static int kind_shell(struct tf_step_run *r)
{
	json_t *argv_j = json_object_get(r->with, "argv");
	json_t *env_j = json_object_get(r->with, "env");
	size_t argc = json_array_size(argv_j), nenv = 0, i;
	char **argv = NULL, **envp = NULL;
	char *f_out = NULL, *f_met = NULL, *f_res = NULL;
	int rc, killed = 0, logfd = -1;
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t at;
	pid_t pid = 0;

	if (!argc) {
		snprintf(r->err, sizeof(r->err), "shell step needs a non-empty with.argv list");
		return -EINVAL;
	}
	rc = tf_step_run_workdir(r);
	if (rc) {
		r->failure = TF_FAIL_INFRA;
		return rc;
	}
	f_out = tf_xasprintf("%s/outputs-%d", r->workdir, r->attempt);
	f_met = tf_xasprintf("%s/metrics-%d", r->workdir, r->attempt);
	f_res = tf_xasprintf("%s/result-%d.json", r->workdir, r->attempt);
	unlink(f_out);
	unlink(f_met);
	unlink(f_res);

	argv = tf_xcalloc(argc + 1, sizeof(*argv));
	for (i = 0; i < argc; i++)
		argv[i] = scalar_text(json_array_get(argv_j, i));
	for (char **e = environ; *e; e++)
		nenv++;
	envp = tf_xcalloc(nenv + json_object_size(env_j) + 16, sizeof(*envp));
	size_t k = 0;
	for (char **e = environ; *e; e++)
		if (strncmp(*e, "TPUFLOW_OUTPUTS=", 16) && strncmp(*e, "TPUFLOW_METRICS=", 16) &&
		    strncmp(*e, "TPUFLOW_RESULT=", 15))
			envp[k++] = tf_xstrdup(*e);
	const char *key;
	json_t *val;
	json_object_foreach(env_j, key, val)
	{
		char *t = scalar_text(val);
		envp[k++] = tf_xasprintf("%s=%s", key, t);
		free(t);
	}
	envp[k++] = tf_xasprintf("TPUFLOW_OUTPUTS=%s", f_out);
	envp[k++] = tf_xasprintf("TPUFLOW_METRICS=%s", f_met);
	envp[k++] = tf_xasprintf("TPUFLOW_RESULT=%s", f_res);
	envp[k++] = tf_xasprintf("TPUFLOW_RUN=%s", r->run_id);
	envp[k++] = tf_xasprintf("TPUFLOW_STEP=%s", r->step);
	envp[k++] = tf_xasprintf("TPUFLOW_ATTEMPT=%d", r->attempt);
	envp[k++] = tf_xasprintf("TPUFLOW_PREFIX=%s", r->prefix);
	envp[k++] = tf_xasprintf("TPUFLOW_WORKDIR=%s", r->workdir);

	logfd = open(r->log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (logfd < 0) {
		rc = -errno;
		snprintf(r->err, sizeof(r->err), "cannot open log '%s': %s", r->log_path,
			 strerror(errno));
		r->failure = TF_FAIL_INFRA;
		goto out;
	}
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_adddup2(&fa, logfd, 1);
	posix_spawn_file_actions_adddup2(&fa, logfd, 2);
	posix_spawn_file_actions_addchdir_np(&fa, r->workdir);
	posix_spawnattr_init(&at);
	/* Own process group (so a timeout kills everything it started) and default signal
	 * handling: the engine blocks SIGINT/SIGTERM in its threads. */
	sigset_t none, def;
	sigemptyset(&none);
	sigemptyset(&def);
	sigaddset(&def, SIGINT);
	sigaddset(&def, SIGTERM);
	sigaddset(&def, SIGPIPE);
	posix_spawnattr_setsigmask(&at, &none);
	posix_spawnattr_setsigdefault(&at, &def);
	posix_spawnattr_setpgroup(&at, 0);
	posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
					      POSIX_SPAWN_SETSIGDEF);
	rc = posix_spawnp(&pid, argv[0], &fa, &at, argv, envp);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&at);
	if (rc) {
		snprintf(r->err, sizeof(r->err), "cannot start '%s': %s", argv[0], strerror(rc));
		rc = -rc;
		r->failure = TF_FAIL_ERROR;
		goto out;
	}
	int status = wait_child(pid, r->cancel, &killed);
	if (WIFEXITED(status)) {
		r->exit_code = WEXITSTATUS(status);
		if (r->exit_code != 0) {
			snprintf(r->err, sizeof(r->err), "'%s' exited with status %d (see its log)",
				 argv[0], r->exit_code);
			rc = -EIO;
			r->failure = killed ? TF_FAIL_CANCELLED : TF_FAIL_ERROR;
			goto out;
		}
	} else if (WIFSIGNALED(status)) {
		r->exit_code = 128 + WTERMSIG(status);
		snprintf(r->err, sizeof(r->err), "'%s' was killed by signal %d%s", argv[0],
			 WTERMSIG(status), killed ? " (stopped by tpuflow)" : "");
		rc = -EINTR;
		r->failure = killed ? TF_FAIL_CANCELLED : TF_FAIL_ERROR;
		goto out;
	}
	rc = read_result(f_res, r->outputs, r->metrics, r->err, sizeof(r->err));
	if (rc == 0)
		rc = read_kv(f_out, r->outputs, 0, r->err, sizeof(r->err));
	if (rc == 0)
		rc = read_kv(f_met, r->metrics, 1, r->err, sizeof(r->err));
	if (rc == 0)
		rc = check_declared(json_object_get(r->with, "outputs"), r->outputs, "output", r->err,
				    sizeof(r->err));
	if (rc == 0)
		rc = check_declared(json_object_get(r->with, "metrics"), r->metrics, "metric", r->err,
				    sizeof(r->err));
out:
	if (logfd >= 0)
		close(logfd);
	for (i = 0; argv && i < argc; i++)
		free(argv[i]);
	free(argv);
	for (i = 0; envp && envp[i]; i++)
		free(envp[i]);
	free(envp);
	free(f_out);
	free(f_met);
	free(f_res);
	return rc;
}

const tf_step_kind_fn tf_kind_shell = kind_shell;

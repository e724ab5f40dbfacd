/* executor.c — the executor interface's shared half: dispatch, failure
 * classes (exit status to error/timeout/preempted/infra/cancelled), log
 * directories and the upload of captured logs to the object store. */
#define TF_LOG_TAG "exec"
#include "executors/exec_int.h"
#include "common/common.h"
#include "common/log.h"
#include "storage/objstore.h"

#include <ctype.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

int tf_exec_start(const struct tf_executor_ops *ops, const struct tf_exec_spec *spec,
                  struct tf_exec **out, char *err, size_t errlen)
{
	return ops->start(spec, out, err, errlen);
}

int tf_exec_poll(struct tf_exec *x, struct tf_exec_result *res)
{
	return x->ops->poll(x, res);
}

int tf_exec_wait(struct tf_exec *x, double timeout, struct tf_exec_result *res)
{
	return x->ops->wait(x, timeout, res);
}

int tf_exec_cancel(struct tf_exec *x, enum tf_fail_class why)
{
	if (why != TF_FAIL_CANCELLED && why != TF_FAIL_PREEMPTED && why != TF_FAIL_TIMEOUT)
		return -EINVAL;
	return x->ops->cancel(x, why);
}

int tf_exec_logs(struct tf_exec *x, int stream, char **out, size_t *len)
{
	if (stream != 1 && stream != 2)
		return -EINVAL;
	const char *p = x->ops->log_path(x, stream);
	if (!p)
		return -ENOENT; /* a lazy log never written */
	return tf_read_file(p, (size_t)64 << 20, out, len);
}

long tf_exec_pgid(const struct tf_exec *x)
{
	return x ? x->pgid : 0;
}

void tf_exec_free(struct tf_exec *x)
{
	if (x)
		x->ops->free(x);
}

static const char *const fail_names[TF_FAIL_LAST] = {"none",      "error", "timeout",
                                                     "preempted", "infra", "cancelled"};

const char *tf_fail_class_name(enum tf_fail_class c)
{
	return (unsigned)c < TF_FAIL_LAST ? fail_names[c] : "?";
}

int tf_fail_class_parse(const char *name, enum tf_fail_class *out)
{
	for (int i = 0; name && i < TF_FAIL_LAST; i++)
		if (!strcmp(fail_names[i], name)) {
			*out = (enum tf_fail_class)i;
			return 0;
		}
	return -EINVAL;
}

enum tf_fail_class tf_exec_classify_status(int wstatus, enum tf_fail_class requested, char *msg,
                                           size_t msglen)
{
	static const char *const why[] = {"", "", "timeout", "preemption", "", "cancel"};
	if (WIFEXITED(wstatus)) {
		int code = WEXITSTATUS(wstatus);
		if (code == 0 && requested == TF_FAIL_NONE) {
			snprintf(msg, msglen, "exit 0");
			return TF_FAIL_NONE;
		}
		if (requested != TF_FAIL_NONE) {
			snprintf(msg, msglen, "exit %d after %s", code, why[requested]);
			return requested;
		}
		/* sysexits: the environment failed, not the work */
		if (code == 75 || code == 69) {
			snprintf(msg, msglen, "exit %d (%s): infrastructure, retryable", code,
			         code == 75 ? "temporary failure" : "service unavailable");
			return TF_FAIL_INFRA;
		}
		snprintf(msg, msglen, "exit %d", code);
		return TF_FAIL_ERROR;
	}
	if (WIFSIGNALED(wstatus)) {
		int sig = WTERMSIG(wstatus);
		const char *name = sigabbrev_np(sig);
		if (requested != TF_FAIL_NONE) {
			snprintf(msg, msglen, "killed by SIG%s after %s", name ? name : "?",
			         why[requested]);
			return requested;
		}
		if (sig == SIGKILL) {
			/* nobody here sent it: the OOM killer or an operator */
			snprintf(msg, msglen,
			         "killed by SIGKILL (not sent by tpuflow: out of memory?)");
			return TF_FAIL_INFRA;
		}
		snprintf(msg, msglen, "killed by SIG%s (%s)", name ? name : "?", strsignal(sig));
		return TF_FAIL_ERROR;
	}
	snprintf(msg, msglen, "ended with unknown status 0x%x", (unsigned)wstatus);
	return TF_FAIL_ERROR;
}

char *tf_exec_self_path(void)
{
	char buf[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
	if (n <= 0)
		return NULL;
	buf[n] = '\0';
	return tf_xstrdup(buf);
}

int tf_exec_head_init(struct tf_exec *x, const struct tf_executor_ops *ops,
                      const struct tf_exec_spec *spec, char *err, size_t errlen)
{
	x->ops = ops;
	x->started = tf_now_monotonic();
	if (spec->log_dir) {
		int rc = spec->lazy_logs ? 0 : tf_mkdir_p(spec->log_dir);
		if (rc) {
			tf_errf(err, errlen, "cannot create log directory '%s': %s", spec->log_dir,
			        strerror(-rc));
			return rc;
		}
		snprintf(x->dir, sizeof(x->dir), "%s", spec->log_dir);
	} else {
		const char *tmp = getenv("TMPDIR");
		snprintf(x->dir, sizeof(x->dir), "%s/tpuflow-exec.XXXXXX",
		         tmp && *tmp ? tmp : "/tmp");
		if (!mkdtemp(x->dir)) {
			int e = errno;
			tf_errf(err, errlen, "cannot create a log directory under '%s': %s",
			        tmp && *tmp ? tmp : "/tmp", strerror(e));
			return -e;
		}
		x->own_dir = 1;
	}
	if ((size_t)snprintf(x->out_path, sizeof(x->out_path), "%s/stdout.log", x->dir) >=
	        sizeof(x->out_path) ||
	    (size_t)snprintf(x->err_path, sizeof(x->err_path), "%s/stderr.log", x->dir) >=
	        sizeof(x->err_path)) {
		tf_errf(err, errlen, "log directory path '%s' is too long", x->dir);
		return -ENAMETOOLONG;
	}
	x->store = spec->store;
	x->log_prefix = spec->log_prefix ? tf_xstrdup(spec->log_prefix) : NULL;
	return 0;
}

int tf_exec_size_parse(const char *s, uint64_t *out)
{
	char *end = NULL;
	errno = 0;
	if (!s || !isdigit((unsigned char)s[0]))
		return -EINVAL;
	unsigned long long n = strtoull(s, &end, 10);
	if (errno)
		return -EINVAL;
	const char *units = "kKmMgG", *u = *end ? strchr(units, *end) : NULL;
	unsigned shift = u ? 10u * (unsigned)(1 + (u - units) / 2) : 0;
	if (u)
		end++;
	if (*end || n > (UINT64_MAX >> shift) || (n << shift) < 4096)
		return -EINVAL;
	*out = n << shift;
	return 0;
}

uint64_t tf_exec_log_cap(void)
{
	const char *v = getenv("TPUFLOW_LOG_MAX");
	uint64_t n;
	if (!v || !*v)
		return TF_EXEC_LOG_CAP_DEFAULT;
	if (tf_exec_size_parse(v, &n)) {
		tf_warn("TPUFLOW_LOG_MAX='%s' is not a size of at least 4096 bytes (such as 64M); "
		        "using %llu",
		        v, (unsigned long long)TF_EXEC_LOG_CAP_DEFAULT);
		return TF_EXEC_LOG_CAP_DEFAULT;
	}
	return n;
}

/* Moves both logs once between the log directory and the store: up (put) or down (get, the
 * logs a job put itself; one that is not there is not worth a warning). */
static void move_logs(struct tf_exec *x, int down)
{
	static const char *const names[2] = {"stdout.log", "stderr.log"};
	x->uploaded = 1;
	for (int i = 0; i < 2; i++) {
		const char *path = x->ops->log_path(x, i + 1);
		if (!path)
			continue; /* a lazy log never written (tf_exec_spec.lazy_logs) */
		char *key = tf_xasprintf("%s%s", x->log_prefix ? x->log_prefix : "", names[i]);
		int rc = down ? tf_objstore_get_file(x->store, key, path)
		              : tf_objstore_put_file(x->store, key, path, 0);
		if (rc && !(down && rc == -ENOENT))
			tf_warn("log %s '%s' failed: %s", down ? "download from" : "upload to", key,
			        tf_objstore_errmsg(x->store));
		if (rc)
			x->uploaded = -1;
		free(key);
	}
}

void tf_exec_head_finish(struct tf_exec *x, struct tf_exec_result *res)
{
	if (x->store && !x->uploaded)
		move_logs(x, 0);
	res->logs_uploaded = x->uploaded == 1;
}

void tf_exec_head_fetch(struct tf_exec *x, struct tf_exec_result *res)
{
	if (x->store && !x->uploaded)
		move_logs(x, 1);
	res->logs_uploaded = x->uploaded == 1;
}

void tf_exec_head_release(struct tf_exec *x)
{
	if (x->own_dir) {
		unlink(x->out_path);
		unlink(x->err_path);
		rmdir(x->dir);
	}
	free(x->log_prefix);
	x->log_prefix = NULL;
}

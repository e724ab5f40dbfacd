/* kinds_ml.c — owns the glue between the engine and the training workload: data_prep, train
 * and evaluate steps call ml/steps.h with the step's object-store prefix (stable across
 * attempts and resumes, so train continues from its newest checkpoint), scratch directory,
 * slice, cancel flag and progress callback. Built only when ml/steps.h is present.
 *
 * Where the step runs follows its `executor`:
 *   inprocess  the adapter is called on this worker thread; cancel is the engine's flag
 *   local      tpuflow re-executes itself as `tpuflow step exec ...` (cli/cmd_step.c) through
 *              executors/local.c: its own process group, the step's timeout enforced by the
 *              executor, a raised cancel flag turned into SIGTERM (then SIGKILL after the
 *              grace period). The child prints progress as JSON lines on stdout, which are
 *              passed to the view as they arrive; stderr goes to the attempt's log; the result
 *              comes back in a file (outputs and metrics, or an error and its class). The same
 *              prefix means a killed train attempt resumes from its checkpoint next time.
 *   slurm      the same `tpuflow step exec` as a Slurm batch job (executors/slurm.c) with the
 *              slice's chips as `--gres=tpu:N`; the compute node shares no filesystem with
 *              this process, so `with`, the result, the logs and the newest progress line
 *              travel through the object store (PREFIX/slurm/attempt-N/; the job runs the
 *              step under `tpuflow step job`, cli/cmd_step_job.c). A lost attempt's job (the
 *              coordinator restarted) is followed again rather than submitted twice
 *              (kinds_slurm.c). */
#include "orchestrator/kinds.h"

#include "ml/steps.h"

#include "executors/executor.h"

#define TF_LOG_TAG "kinds_ml"
#include "common/common.h"
#include "common/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int (*ml_step_fn)(const json_t *with, const struct tf_ml_ctx *ctx, json_t *outputs,
                          json_t *metrics, char *err, size_t errlen);

/* Retryable codes (tf_ml_retryable: storage hiccups, timeouts) are infrastructure failures
 * the default retry policy retries; a cancelled step is reported as such (the engine turns it
 * into a timeout when its deadline caused it); anything else is the step's own error. */
static enum tf_fail_class classify(int rc)
{
	if (tf_ml_retryable(rc))
		return TF_FAIL_INFRA;
	if (rc == -ECANCELED || rc == -EINTR)
		return TF_FAIL_CANCELLED;
	return TF_FAIL_ERROR;
}

static int ml_call(struct tf_step_run *r, ml_step_fn fn)
{
	int rc = tf_step_run_workdir(r);
	if (rc < 0) {
		r->failure = TF_FAIL_INFRA;
		return rc;
	}
	rc = 0;
	struct tf_ml_ctx ctx = {
	    .store = r->objstore,
	    .prefix = r->prefix,
	    .workdir = r->workdir,
	    .accelerator = r->accelerator,
	    .cancel = r->cancel,
	    .progress = r->progress,
	    .progress_data = r->progress_data,
	};
	rc = fn(r->with, &ctx, r->outputs, r->metrics, r->err, sizeof(r->err));
	if (rc) {
		r->failure = classify(rc);
		if (!r->err[0])
			snprintf(r->err, sizeof(r->err), "%s", strerror(-rc));
	}
	return rc;
}

/* ---- executor: local ------------------------------------------------------------------ */

#define LINE_MAX_BYTES (64 * 1024) /* a longer stdout line is passed on in pieces */
#define RESULT_MAX (1u << 24)

/* Follows the child's stdout file as it grows: complete lines that are JSON objects are
 * progress events (to the view and the log), anything else goes to the log as is. */
struct tail {
	int fd;    /* the stdout log, read from where the last read stopped */
	char *buf; /* an incomplete last line */
	size_t len;
	FILE *log; /* the attempt's log for non-progress lines, opened on first use */
	const char *log_path;
};

static void tail_line(struct tail *t, struct tf_step_run *r, char *line)
{
	if (line[0] == '{' && r->progress) {
		r->progress(r->progress_data, line);
		return;
	}
	if (!t->log)
		t->log = fopen(t->log_path, "a");
	if (t->log) {
		fprintf(t->log, "%s\n", line);
		fflush(t->log);
	}
}

static void tail_pump(struct tail *t, struct tf_step_run *r, int final)
{
	if (t->fd < 0)
		return;
	for (;;) {
		ssize_t n = read(t->fd, t->buf + t->len, LINE_MAX_BYTES - t->len);
		if (n <= 0)
			break;
		t->len += (size_t)n;
		size_t start = 0;
		for (size_t i = 0; i < t->len; i++)
			if (t->buf[i] == '\n') {
				t->buf[i] = '\0';
				tail_line(t, r, t->buf + start);
				start = i + 1;
			}
		memmove(t->buf, t->buf + start, t->len - start);
		t->len -= start;
		if (t->len == LINE_MAX_BYTES) {
			t->buf[t->len] = '\0';
			tail_line(t, r, t->buf);
			t->len = 0;
		}
	}
	if (final && t->len) {
		t->buf[t->len] = '\0';
		tail_line(t, r, t->buf);
		t->len = 0;
	}
}

/* Reads the child's result (the file at path, or the object key when set) into r:
 * outputs/metrics on success, else its error text. */
static int read_child_result(struct tf_step_run *r, const char *path, const char *key, int ok,
                             char *msg, size_t msglen)
{
	char *buf = NULL;
	size_t len = 0;
	int rc = key ? tf_objstore_get(r->objstore, key, (void **)&buf, &len)
	             : tf_read_file(path, RESULT_MAX, &buf, &len);
	if (rc == 0 && len > RESULT_MAX)
		rc = -EFBIG;
	if (rc) {
		free(buf);
		snprintf(msg, msglen, "no result from the step's process ('%s': %s)",
		         key ? key : path, strerror(-rc));
		return rc;
	}
	if (key)
		path = key;
	json_t *o = json_loads(buf, 0, NULL);
	free(buf);
	if (!json_is_object(o)) {
		snprintf(msg, msglen, "the step's process wrote an unreadable result '%s'", path);
		json_decref(o);
		return -EBADMSG;
	}
	if (ok) {
		json_t *out = json_object_get(o, "outputs"), *met = json_object_get(o, "metrics");
		if (!json_is_object(out) || !json_is_object(met)) {
			snprintf(msg, msglen, "the step's process wrote no outputs/metrics to '%s'",
			         path);
			rc = -EBADMSG;
		} else {
			json_object_update(r->outputs, out);
			json_object_update(r->metrics, met);
		}
	} else {
		const char *e = json_string_value(json_object_get(o, "error"));
		snprintf(msg, msglen, "%s", e ? e : "");
	}
	json_decref(o);
	return rc;
}

/* executor: slurm — puts `with` where the job reads it (unless a lost attempt's job is
 * followed again: it has its own) and clears an old result. */
static int slurm_inputs(struct tf_step_run *r, const struct tf_kind_slurm *ks, const char *with_key,
                        const char *res_key)
{
	if (ks->spec.attach_job)
		return 0;
	char *text = json_dumps(r->with, JSON_COMPACT);
	int rc = text ? tf_objstore_put(r->objstore, with_key, text, strlen(text), 0) : -ENOMEM;
	free(text);
	if (rc == 0) {
		rc = tf_objstore_delete(r->objstore, res_key);
		rc = rc == -ENOENT ? 0 : rc;
	}
	if (rc) {
		snprintf(r->err, sizeof(r->err), "executor 'slurm': cannot write '%s': %s",
		         with_key, tf_objstore_errmsg(r->objstore));
		r->failure = TF_FAIL_INFRA;
	}
	return rc;
}

static int ml_child(struct tf_step_run *r, const char *kind)
{
	char *self = NULL, *with_path = NULL, *res_path = NULL, *log_dir = NULL;
	char *with_key = NULL, *res_key = NULL;
	char pid[24], xerr[256] = "", msg[400] = "";
	struct tail t = {.fd = -1, .log_path = r->log_path};
	struct tf_exec *x = NULL;
	struct tf_exec_result res;
	struct tf_kind_slurm ks = {0};
	int slurm = r->def && r->def->executor == TF_EXECUTOR_SLURM;
	const struct tf_executor_ops *ops = slurm ? &tf_executor_slurm : &tf_executor_local;
	int rc = tf_step_run_workdir(r);
	if (rc < 0) {
		r->failure = TF_FAIL_INFRA;
		return rc;
	}
	rc = 0;
	if (!r->storage_url) {
		snprintf(r->err, sizeof(r->err),
		         "executor '%s': the run has no object store URL "
		         "to give the step's process",
		         ops->name);
		return -EINVAL;
	}
	int att = r->attempt;
	if (slurm) {
		rc = tf_kind_slurm_prepare(r, &ks, NULL);
		if (rc)
			return rc;
		att = ks.attempt;
	}
	self = r->self_exe ? tf_xstrdup(r->self_exe) : tf_exec_self_path();
	if (!self) {
		snprintf(r->err, sizeof(r->err),
		         "executor 'local': cannot find this program's own "
		         "path (/proc/self/exe) to run the step; use 'executor: inprocess'");
		r->failure = TF_FAIL_INFRA;
		return -ENOENT;
	}
	with_path = tf_xasprintf("%s/with-%d.json", r->workdir, att);
	res_path = tf_xasprintf("%s/result-%d.json", r->workdir, att);
	log_dir = tf_xasprintf("%s/attempt-%d", r->workdir, att);
	unlink(res_path);
	if (slurm) {
		with_key = tf_xasprintf("%sslurm/attempt-%d/with.json", r->prefix, att);
		res_key = tf_xasprintf("%sslurm/attempt-%d/result.json", r->prefix, att);
		rc = slurm_inputs(r, &ks, with_key, res_key);
		if (rc)
			goto out;
	} else if (json_dump_file(r->with, with_path, JSON_COMPACT)) {
		snprintf(r->err, sizeof(r->err), "cannot write '%s'", with_path);
		r->failure = TF_FAIL_INFRA;
		rc = -EIO;
		goto out;
	}
	snprintf(pid, sizeof(pid), "%d", (int)getpid());
	const char *argv[24];
	size_t n = 0;
	argv[n++] = self;
	argv[n++] = "step";
	argv[n++] = "exec";
	argv[n++] = "--kind";
	argv[n++] = kind;
	argv[n++] = slurm ? "--with-key" : "--with-json";
	argv[n++] = slurm ? with_key : with_path;
	argv[n++] = "--store";
	argv[n++] = r->storage_url;
	argv[n++] = "--prefix";
	argv[n++] = r->prefix;
	argv[n++] = slurm ? "--result-key" : "--result";
	argv[n++] = slurm ? res_key : res_path;
	if (slurm) {
		/* no directory of ours exists there, and the job outlives us on purpose */
		argv[n++] = "--chips-from-slurm";
	} else {
		argv[n++] = "--workdir";
		argv[n++] = r->workdir;
		argv[n++] = "--parent-pid";
		argv[n++] = pid;
	}
	if (r->accelerator) {
		argv[n++] = "--accelerator";
		argv[n++] = r->accelerator;
	}
	argv[n] = NULL;
	/* cwd is inherited: a relative file:// store URL means the same directory */
	struct tf_exec_spec spec = {.argv = (char *const *)argv,
	                            .timeout = r->timeout,
	                            .grace = r->grace,
	                            .log_dir = log_dir,
	                            .log_max = r->def ? r->def->log_max : 0,
	                            .slurm = slurm ? &ks.spec : NULL};
	if (slurm) { /* logs and progress come back through the store */
		spec.argv =
		    tf_kind_slurm_wrap(r, &ks, self, (char *const *)argv, TF_KIND_SLURM_PROGRESS);
		spec.store = r->objstore;
		spec.log_prefix = ks.log_prefix;
	}
	rc = tf_exec_start(ops, &spec, &x, xerr, sizeof(xerr));
	if (rc) {
		snprintf(r->err, sizeof(r->err), "executor '%s': %s", ops->name, xerr);
		r->failure = rc == -EINVAL ? TF_FAIL_ERROR : TF_FAIL_INFRA;
		goto out;
	}
	if (slurm)
		tf_kind_slurm_note(r, &ks, x);
	else
		tf_step_run_child(r, tf_exec_pgid(x));
	t.buf = tf_xmalloc(LINE_MAX_BYTES + 1);
	int cancelled = 0;
	for (;;) {
		rc = tf_exec_wait(x, slurm ? 0.25 : 0.05, &res);
		if (slurm) {
			tf_kind_slurm_note(r, &ks, x);
			if (rc != 0)
				tf_kind_slurm_progress(r, &ks);
		}
		if (t.fd < 0 && (!slurm || rc == 0)) /* a Slurm job's is fetched at its end */
			t.fd = open(ops->log_path(x, 1), O_RDONLY | O_CLOEXEC);
		tail_pump(&t, r, rc == 0);
		if (rc == 0)
			break;
		if (*r->cancel && !cancelled) {
			tf_exec_cancel(x, *r->cancel == TF_CANCEL_TIMEOUT ? TF_FAIL_TIMEOUT
			                                                  : TF_FAIL_CANCELLED);
			cancelled = 1;
		}
	}
	if (t.log) {
		fclose(t.log);
		t.log = NULL;
	}
	if (!slurm) /* its lines went into the attempt's log as they came: one copy */
		unlink(ops->log_path(x, 1));
	FILE *log = fopen(r->log_path, "a");
	if (log) {
		tf_kind_append_log(log, "stderr", ops->log_path(x, 2));
		fprintf(log, "==> tpuflow step exec --kind %s: %s <==\n", kind, res.message);
		fclose(log);
	}
	r->exit_code = res.exit_code;
	/* Exit 0 means the step finished and its result is whole, even when a stop was asked
	 * for meanwhile: like an in-process step that returned 0, it succeeded. */
	if (res.fclass != TF_FAIL_NONE && !(res.exit_code == 0 && res.signal == 0)) {
		read_child_result(r, res_path, res_key, 0, msg, sizeof(msg));
		if (msg[0])
			snprintf(r->err, sizeof(r->err), "%.300s (step process: %.180s)", msg,
			         res.message);
		else
			snprintf(r->err, sizeof(r->err), "step process: %s (see its log)",
			         res.message);
		r->failure = res.fclass;
		rc = res.fclass == TF_FAIL_CANCELLED || res.fclass == TF_FAIL_TIMEOUT ? -ECANCELED
		                                                                      : -EIO;
		goto out;
	}
	rc = read_child_result(r, res_path, res_key, 1, msg, sizeof(msg));
	if (rc) {
		snprintf(r->err, sizeof(r->err), "%s", msg);
		r->failure = TF_FAIL_ERROR;
	}
out:
	if (t.fd >= 0)
		close(t.fd);
	free(t.buf);
	tf_exec_free(x);
	free(self);
	free(with_path);
	free(res_path);
	free(log_dir);
	free(with_key);
	free(res_key);
	tf_kind_slurm_release(&ks);
	return rc;
}

/* Runs the step where its executor says. */
static int ml_run(struct tf_step_run *r, ml_step_fn fn, const char *kind)
{
	switch (r->def ? r->def->executor : TF_EXECUTOR_INPROCESS) {
	case TF_EXECUTOR_INPROCESS:
		if (r->force_local) /* the daemon: a crash of the step stays in its process */
			return ml_child(r, kind);
		return ml_call(r, fn);
	case TF_EXECUTOR_LOCAL:
	case TF_EXECUTOR_SLURM:
		return ml_child(r, kind);
	default:
		snprintf(r->err, sizeof(r->err),
		         "step '%s': executor '%s' is not available in this build of tpuflow; use "
		         "'executor: local' or 'executor: inprocess'",
		         r->step, tf_executor_name(r->def->executor));
		r->failure = TF_FAIL_ERROR;
		return -ENOSYS;
	}
}

int tf_kind_ml(struct tf_step_run *r)
{
	const struct tf_step_schema *sc = tf_step_schema(r->def->type);
	return ml_run(r, sc->ml, sc->name);
}

/* kinds_shell.c — owns the shell step: an argv list (never a shell string) run through the
 * executors' `local` backend (executors/executor.h: clone+exec into its own process group that
 * dies with its engine, recorded with the attempt; a timeout or Ctrl-C kills the whole group
 * with SIGTERM then SIGKILL after a grace period),
 * stdout/stderr appended to the attempt's log, and outputs/metrics read back from files the
 * program writes (docs/runs.md; on Slurm the job writes them on its node and they come back
 * through the object store, kinds_slurm.c):
 *
 *   TPUFLOW_OUTPUTS  JSON object or key=value lines     -> outputs
 *   TPUFLOW_METRICS  JSON object or key=value lines     -> metrics (numbers)
 *   TPUFLOW_RESULT   {"outputs": {...}, "metrics": {...}}
 *
 * The executor watches the child through a pidfd, so its exit is seen at once; this thread
 * wakes every 50 ms only to pass on a raised cancel flag. */
#include "orchestrator/kinds.h"
#include "executors/executor.h"

#define TF_LOG_TAG "shell"
#include "common/common.h"
#include "common/log.h"

#include <errno.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

void tf_kind_append_log(FILE *log, const char *title, const char *path)
{
	FILE *in = path ? fopen(path, "r") : NULL;
	if (!in)
		return;
	char buf[8192];
	size_t n;
	int last = '\n'; /* the stream's last byte: the next title must start a line */
	for (int first = 1; (n = fread(buf, 1, sizeof(buf), in)) > 0; first = 0) {
		if (first)
			fprintf(log, "==> %s <==\n", title);
		fwrite(buf, 1, n, log);
		last = buf[n - 1];
	}
	if (last != '\n')
		fputc('\n', log);
	fclose(in);
	unlink(path); /* moved into the attempt's log: one copy on disk */
}

/* Whether the file at path has any bytes. */
static int has_bytes(const char *path)
{
	struct stat sb;
	return path && stat(path, &sb) == 0 && sb.st_size > 0;
}

/* Reads a file the step may have written into *BUF (the caller frees it). Returns 0, 1 when
 * there is no such file, or a negative code with ERR set. */
static int read_step_file(const char *path, char **buf, char *err, size_t errlen)
{
	size_t len = 0;
	int rc = tf_read_file(path, TF_SHELL_FILE_MAX, buf, &len);
	if (rc == -ENOENT)
		return 1;
	if (rc)
		tf_errf(err, errlen, "cannot read '%s': %s", path, strerror(-rc));
	return rc;
}

/* Parses a results file: a JSON object, or key=value lines. Numbers stay numbers when
 * `numbers` (metrics). Missing file: nothing added. */
static int read_kv(const char *path, json_t *into, int numbers, char *err, size_t errlen)
{
	char *buf = NULL;
	int rc = read_step_file(path, &buf, err, errlen);
	if (rc)
		return rc > 0 ? 0 : rc;
	const char *p = buf;
	while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
		p++;
	if (*p == '{') {
		json_error_t je;
		json_t *o = json_loads(p, 0, &je);
		if (!json_is_object(o)) {
			tf_errf(err, errlen, "'%s' line %d: %s", path, je.line, je.text);
			json_decref(o);
			free(buf);
			return -EINVAL;
		}
		json_object_update(into, o);
		json_decref(o);
		free(buf);
		return 0;
	}
	/* Line by line (not strtok: line numbers count empty lines too). A value jansson cannot
	 * hold (bytes that are not UTF-8, a metric that is not finite) is an error naming the
	 * line, not a silently missing key. */
	int lineno = 0;
	rc = 0;
	for (char *line = buf, *next; line && rc == 0; line = next) {
		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		lineno++;
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
		int is_num = numbers && end != v && end && !*end;
		json_t *key = json_string(line);                      /* NULL: not UTF-8 */
		json_t *val = is_num ? json_real(d) : json_string(v); /* NULL: not UTF-8, inf, nan */
		if (!key || (!val && !is_num))
			tf_errf(err, errlen,
			        "'%s' line %d: the %s is not valid UTF-8 (outputs and metrics are "
			        "text)",
			        path, lineno, key ? "value" : "name");
		else if (!val)
			tf_errf(
			    err, errlen,
			    "'%s' line %d: metric '%.60s' is %.20s; metrics must be finite numbers",
			    path, lineno, line, v);
		if (!key || !val) {
			rc = -EINVAL;
		} else {
			json_object_set_new(into, line, val);
			val = NULL;
		}
		json_decref(key);
		json_decref(val);
	}
	free(buf);
	return rc;
}

/* Metrics are numbers, whichever file they came from: a string such as "notanumber" once
 * stored fine and broke a later `when` comparing it. */
static int check_numbers(json_t *metrics, char *err, size_t errlen)
{
	const char *k;
	json_t *v;
	json_object_foreach(metrics, k, v)
	{
		if (json_is_number(v))
			continue;
		char *text =
		    json_is_string(v) ? NULL : json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
		tf_errf(err, errlen,
		        "metric '%.60s' is '%.40s', not a number: metrics must be numbers (write "
		        "text to $TPUFLOW_OUTPUTS)",
		        k,
		        json_is_string(v) ? json_string_value(v)
		        : text            ? text
		                          : "?");
		free(text);
		return -EINVAL;
	}
	return 0;
}

static int read_result(const char *path, json_t *outputs, json_t *metrics, char *err, size_t errlen)
{
	char *buf = NULL;
	int rc = read_step_file(path, &buf, err, errlen);
	if (rc)
		return rc > 0 ? 0 : rc;
	json_error_t je;
	json_t *o = json_loads(buf, 0, &je);
	free(buf);
	if (!json_is_object(o)) {
		tf_errf(err, errlen, "'%s' must hold {\"outputs\": {...}, \"metrics\": {...}}",
		        path);
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

static int check_declared(json_t *names, json_t *have, const char *what, char *err, size_t errlen)
{
	size_t i;
	json_t *n;
	json_array_foreach(names, i, n)
	{
		const char *name = json_string_value(n);
		if (name && !json_object_get(have, name)) {
			tf_errf(err, errlen,
			        "the program did not write %s '%s' (write it to $TPUFLOW_%s or "
			        "$TPUFLOW_RESULT)",
			        what, name, !strcmp(what, "output") ? "OUTPUTS" : "METRICS");
			return -EINVAL;
		}
	}
	return 0;
}

int tf_kind_shell(struct tf_step_run *r)
{
	json_t *argv_j = json_object_get(r->with, "argv");
	json_t *env_j = json_object_get(r->with, "env");
	size_t argc = json_array_size(argv_j), nenv = 0, i;
	char **argv = NULL, **envp = NULL;
	char *f_out = NULL, *f_met = NULL, *f_res = NULL;
	int rc;

	if (!argc) {
		snprintf(r->err, sizeof(r->err), "shell step needs a non-empty with.argv list");
		return -EINVAL;
	}
	rc = tf_step_run_workdir(r);
	if (rc < 0) {
		r->failure = TF_FAIL_INFRA;
		return rc;
	}
	int fresh = rc > 0; /* a new directory holds no result files of an earlier attempt */
	/* executor: slurm — the same argv as a batch job; the variables set below (and the usual
	 * ones) go to it by name, their values from the environment sbatch runs in, except the
	 * result files and the working directory, which `tpuflow step job` makes on the node and
	 * hands back through the object store (read below). A lost attempt's job followed again
	 * hands back those of its own attempt. */
	const struct tf_executor_ops *ops = &tf_executor_local;
	struct tf_kind_slurm ks = {0};
	int att = r->attempt;
	if (r->def && r->def->executor == TF_EXECUTOR_SLURM) {
		static const char *const own[] = {"TPUFLOW_RUN", "TPUFLOW_STEP", "TPUFLOW_ATTEMPT",
		                                  "TPUFLOW_PREFIX"};
		size_t nn = 0;
		char **names =
		    tf_xcalloc(json_object_size(env_j) + TF_ARRAY_LEN(own) + 1, sizeof(char *));
		const char *ekey;
		json_t *eval;
		json_object_foreach(env_j, ekey, eval)
		{
			names[nn++] = (char *)ekey;
		}
		for (size_t j = 0; j < TF_ARRAY_LEN(own); j++)
			names[nn++] = (char *)own[j];
		rc = tf_kind_slurm_prepare(r, &ks, names);
		free(names);
		if (rc)
			return rc;
		ops = &tf_executor_slurm;
		att = ks.attempt;
	}
	f_out = tf_xasprintf("%s/outputs-%d", r->workdir, att);
	f_met = tf_xasprintf("%s/metrics-%d", r->workdir, att);
	f_res = tf_xasprintf("%s/result-%d.json", r->workdir, att);
	if (!ks.spec.attach_job && !fresh) {
		unlink(f_out);
		unlink(f_met);
		unlink(f_res);
	}

	argv = tf_xcalloc(argc + 1, sizeof(*argv));
	for (i = 0; i < argc; i++)
		argv[i] = tf_template_value_text(json_array_get(argv_j, i));
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
		char *t = tf_template_value_text(val);
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

	char *log_dir = tf_xasprintf("%s/attempt-%d", r->workdir, att);
	struct tf_exec_spec spec = {.argv = argv,
	                            .envp = envp,
	                            .cwd = r->workdir,
	                            .timeout = r->timeout,
	                            .grace = r->grace,
	                            .log_dir = log_dir,
	                            .log_max = r->def ? r->def->log_max : 0,
	                            .lazy_logs = ops == &tf_executor_local, /* silent: no file */
	                            .slurm = ops == &tf_executor_slurm ? &ks.spec : NULL};
	char *self = NULL;
	if (ops == &tf_executor_slurm) { /* the job puts its logs in the store */
		self = r->self_exe ? tf_xstrdup(r->self_exe) : tf_exec_self_path();
		spec.argv = tf_kind_slurm_wrap(r, &ks, self ? self : "tpuflow", argv,
		                               TF_KIND_SLURM_RESULTS);
		spec.store = r->objstore;
		spec.log_prefix = ks.log_prefix;
	}
	struct tf_exec *x = NULL;
	struct tf_exec_result res;
	char xerr[256] = "";
	rc = tf_exec_start(ops, &spec, &x, xerr, sizeof(xerr));
	if (rc) {
		snprintf(r->err, sizeof(r->err), "cannot start '%s': %s", argv[0], xerr);
		r->failure =
		    rc == -ENOENT || rc == -EACCES || rc == -EINVAL ? TF_FAIL_ERROR : TF_FAIL_INFRA;
		free(log_dir);
		free(self);
		goto out;
	}
	if (ops == &tf_executor_slurm)
		tf_kind_slurm_note(r, &ks, x);
	else
		tf_step_run_child(r, tf_exec_pgid(x));
	int cancelled = 0;
	for (;;) {
		rc = tf_exec_wait(x, 0.05, &res);
		if (ops == &tf_executor_slurm)
			tf_kind_slurm_note(r, &ks, x);
		if (rc == 0)
			break;
		if (*r->cancel && !cancelled) {
			tf_exec_cancel(x, *r->cancel == TF_CANCEL_TIMEOUT ? TF_FAIL_TIMEOUT
			                                                  : TF_FAIL_CANCELLED);
			cancelled = 1;
		}
	}
	/* A program that succeeded without a byte of output leaves no log (nothing to store);
	 * otherwise its non-empty streams and how it ended. */
	const char *out_path = ops->log_path(x, 1);
	const char *err_path = ops->log_path(x, 2);
	FILE *log = res.fclass != TF_FAIL_NONE || has_bytes(out_path) || has_bytes(err_path)
	                ? fopen(r->log_path, "a")
	                : NULL;
	if (log) {
		tf_kind_append_log(log, "stdout", out_path);
		tf_kind_append_log(log, "stderr", err_path);
		fprintf(log, "==> %s <==\n", res.message);
		fclose(log);
	}
	tf_exec_free(x);
	free(log_dir);
	free(self);
	r->exit_code = res.exit_code;
	if (res.fclass != TF_FAIL_NONE) {
		snprintf(r->err, sizeof(r->err), "'%s': %s (see its log)", argv[0], res.message);
		r->failure = res.fclass;
		rc = res.exit_code > 0 ? -EIO : -EINTR;
		goto out;
	}
	if (ops == &tf_executor_slurm &&
	    ((rc = tf_kind_slurm_fetch(r, &ks, "outputs", f_out)) ||
	     (rc = tf_kind_slurm_fetch(r, &ks, "metrics", f_met)) ||
	     (rc = tf_kind_slurm_fetch(r, &ks, "result.json", f_res))))
		goto out;
	rc = read_result(f_res, r->outputs, r->metrics, r->err, sizeof(r->err));
	if (rc == 0)
		rc = read_kv(f_out, r->outputs, 0, r->err, sizeof(r->err));
	if (rc == 0)
		rc = read_kv(f_met, r->metrics, 1, r->err, sizeof(r->err));
	if (rc == 0)
		rc = check_numbers(r->metrics, r->err, sizeof(r->err));
	if (rc == 0)
		rc = check_declared(json_object_get(r->with, "outputs"), r->outputs, "output",
		                    r->err, sizeof(r->err));
	if (rc == 0)
		rc = check_declared(json_object_get(r->with, "metrics"), r->metrics, "metric",
		                    r->err, sizeof(r->err));
out:
	for (i = 0; argv && i < argc; i++)
		free(argv[i]);
	free(argv);
	for (i = 0; envp && envp[i]; i++)
		free(envp[i]);
	free(envp);
	free(f_out);
	free(f_met);
	free(f_res);
	tf_kind_slurm_release(&ks);
	return rc;
}


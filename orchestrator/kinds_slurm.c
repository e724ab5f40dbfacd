/* kinds_slurm.c — owns what the step kinds share to run an attempt on Slurm (executor:
 * slurm, executors/slurm.c): the job's name, its TPU chips and nodes from the step's slice
 * (one node per TPU host, the host's chips as `--gres=tpu:N`), the `slurm:` options, the
 * environment names it gets, the storage check, the wrapper the job runs (`tpuflow step job`:
 * logs, progress and a shell step's result files through the object store, since the node
 * shares no filesystem with us), the job id written on the attempt, and the re-attachment of
 * a restarted coordinator to a job still queued or running (docs/slurm.md). */
#include "orchestrator/kinds.h"

#include "accel/tpu.h"
#include "executors/executor.h"
#include "orchestrator/state.h"
#include "storage/objstore.h"

#define TF_LOG_TAG "slurm"
#include "common/common.h"
#include "common/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

/* Variables a job gets from the submitter's environment when they are set: the program's
 * search path and locale, the state home and object store, S3 credentials and endpoint. Not
 * TMPDIR: a temporary directory is the node's own. */
static const char *const pass_names[] = {"PATH",
                                         "HOME",
                                         "LANG",
                                         "LC_ALL",
                                         "TPUFLOW_HOME",
                                         "TPUFLOW_STORE",
                                         "TPUFLOW_LOG",
                                         "TPUFLOW_LOG_FORMAT",
                                         "AWS_ACCESS_KEY_ID",
                                         "AWS_SECRET_ACCESS_KEY",
                                         "AWS_SESSION_TOKEN",
                                         "AWS_REGION",
                                         "AWS_DEFAULT_REGION",
                                         "AWS_ENDPOINT_URL",
                                         "AWS_ENDPOINT_URL_S3",
                                         NULL};

static void add_name(struct tf_kind_slurm *ks, const char *name, size_t len)
{
	for (size_t i = 0; i < ks->nexport; i++)
		if (strlen(ks->export_names[i]) == len && !strncmp(ks->export_names[i], name, len))
			return;
	ks->export_names = tf_xrealloc(ks->export_names, (ks->nexport + 2) * sizeof(char *));
	ks->export_names[ks->nexport] = tf_xasprintf("%.*s", (int)len, name);
	ks->export_names[++ks->nexport] = NULL;
}

/* The Slurm job of this step's previous attempt when that attempt was lost (its coordinator
 * died) and the job is to be followed again rather than a new one submitted: the job id and
 * that attempt's number, or 0. A job still queued or running is followed on; so is one that
 * ended while no coordinator followed it (squeue, or accounting once squeue has forgotten
 * it, still knows how: completed, failed, timed out, cancelled), whose outcome becomes this
 * attempt's, so the retry policy acts on what happened instead of the step running twice;
 * and so is one that cannot be asked about now (the controller is away: it is followed,
 * never submitted twice). Only a job Slurm no longer knows at all, or in a state the
 * executor does not know, is submitted again, which the log and an event say.
 *
 * A stop tpuflow had recorded for that attempt before it died (tf_attempt_stop_record) goes
 * into *requested: the executor finishes it and classes a CANCELLED end by it (the step's
 * timeout, a requeue, a job that can never start), not as a cancel by someone else. A
 * cancel of the run's own (Ctrl-C, `runs cancel`) is no outcome of the step: as after a
 * cancelled attempt, the job is cancelled if it still runs and a new one is submitted. */
static long lost_job(struct tf_step_run *r, int *attempt, enum tf_fail_class *requested)
{
	*requested = TF_FAIL_NONE;
	if (!r->db)
		return 0;
	/* the attempt just before this one, if it was lost: an older lost attempt's job was
	 * dealt with by the attempts after it (followed, or found unknown), and following it
	 * again would hand an ended job's outcome to every retry */
	struct tf_stmt *q = tf_store_query(
	    r->db,
	    "SELECT n, slurm_job, state FROM attempts WHERE run_id=? AND step=? AND n<? "
	    "ORDER BY n DESC LIMIT 1",
	    "tti", r->run_id, r->step, (int64_t)r->attempt);
	long job = 0;
	if (q && tf_stmt_step(q) == 1 && tf_stmt_text(q, 2) &&
	    !strcmp(tf_stmt_text(q, 2), tf_attempt_state_name(TF_ATTEMPT_LOST))) {
		*attempt = (int)tf_stmt_int(q, 0);
		job = (long)tf_stmt_int(q, 1); /* 0 for NULL: it never got a job */
	}
	tf_stmt_done(q);
	if (!job)
		return 0;
	enum tf_fail_class intent = TF_FAIL_NONE;
	if (tf_attempt_stop_intent(r->db, r->run_id, r->step, *attempt, &intent))
		tf_warn("%s/%s: cannot read whether attempt %d's Slurm job %ld was being "
		        "cancelled: %s",
		        r->run_id, r->step, *attempt, job, tf_store_errmsg(r->db));
	char state[128], msg[400];
	int rc = tf_slurm_job_state(job, state, sizeof(state));
	int follow = rc == 0 ? tf_slurm_state_followable(state) : 0;
	if (intent == TF_FAIL_CANCELLED &&
	    (follow == 1 || (follow == 2 && !strcmp(state, "CANCELLED")))) {
		if (follow == 1 && tf_slurm_job_cancel(job))
			snprintf(msg, sizeof(msg),
			         "attempt %d's Slurm job %ld was being cancelled with its run when its "
			         "coordinator stopped, and scancel cannot reach Slurm now: it may "
			         "still run (scancel %ld); a new job is submitted",
			         *attempt, job, job);
		else
			snprintf(msg, sizeof(msg),
			         "attempt %d's Slurm job %ld was cancelled with its run when its "
			         "coordinator stopped (%s): a new job is submitted",
			         *attempt, job, follow == 1 ? "cancelled now" : "CANCELLED");
		tf_info("%s/%s: %s", r->run_id, r->step, msg);
		tf_event_add(r->db, r->run_id, r->step, r->attempt, "slurm", msg);
		return 0;
	}
	if (follow == 1) {
		tf_info("%s/%s: attempt %d's Slurm job %ld is %s: following it", r->run_id, r->step,
		        *attempt, job, state);
		*requested = intent;
		return job;
	}
	if (follow == 2) {
		tf_info("%s/%s: attempt %d's Slurm job %ld ended %s while no coordinator followed "
		        "it: taking its outcome",
		        r->run_id, r->step, *attempt, job, state);
		*requested = intent;
		return job;
	}
	if (rc && rc != -ENOENT) {
		tf_warn("%s/%s: attempt %d's Slurm job %ld cannot be asked about (%s): following "
		        "it until Slurm answers",
		        r->run_id, r->step, *attempt, job, state);
		*requested = intent;
		return job;
	}
	if (rc == -ENOENT)
		snprintf(
		    msg, sizeof(msg),
		    "attempt %d's Slurm job %ld is unknown to Slurm (squeue no longer lists it "
		    "and accounting, sacct, has no record of it): how it ended cannot be told, "
		    "so a new job is submitted",
		    *attempt, job);
	else
		snprintf(
		    msg, sizeof(msg),
		    "attempt %d's Slurm job %ld is in state %s, which tpuflow does not know: a "
		    "new job is submitted",
		    *attempt, job, state);
	tf_warn("%s/%s: %s", r->run_id, r->step, msg);
	tf_event_add(r->db, r->run_id, r->step, r->attempt, "slurm", msg);
	return 0;
}

/* executor 'slurm' (tf_slurm_spec.stopping): commits the stop tpuflow is about to send to the
 * job, on the attempt that follows it, before scancel goes out. */
static int record_stop(void *data, long job, enum tf_fail_class why)
{
	struct tf_step_run *r = data;
	if (!r->db)
		return 0;
	return tf_attempt_stop_record(r->db, r->run_id, r->step, r->attempt, job, why);
}

int tf_kind_slurm_prepare(struct tf_step_run *r, struct tf_kind_slurm *ks, char *const *extra_names)
{
	memset(ks, 0, sizeof(*ks));
	ks->attempt = r->attempt;
	/* the job's run time is the timeout's measure: the executor counts it (not the time
	 * the job waits in the queue), so the engine's deadline is not this attempt's */
	tf_step_run_timed_by_executor(r);
	if (!tf_storage_shared(r->storage_url)) {
		snprintf(
		    r->err, sizeof(r->err),
		    "executor 'slurm': the run's storage '%s' is not one every node can reach: "
		    "use an s3:// URL or a file:// path under TPUFLOW_SHARED_STORAGE",
		    r->storage_url ? r->storage_url : "(none)");
		r->failure = TF_FAIL_ERROR;
		return -EINVAL;
	}
	if (r->accelerator) {
		struct tf_tpu_slice sl;
		char err[256];
		if (tf_tpu_slice_parse(r->accelerator, &sl, err, sizeof(err))) {
			snprintf(r->err, sizeof(r->err), "executor 'slurm': %s", err);
			r->failure = TF_FAIL_ERROR;
			return -EINVAL;
		}
		/* one Slurm node per TPU host of the slice, each with its chips as GRES */
		ks->spec.nodes = sl.hosts;
		ks->spec.tpus_per_node = sl.chips_per_host;
	}
	const struct tf_slurm_opts *o = r->def ? &r->def->slurm : NULL;
	if (o) {
		ks->spec.partition = o->partition;
		ks->spec.account = o->account;
		ks->spec.qos = o->qos;
		ks->spec.extra = o->args;
	}
	for (size_t i = 0; pass_names[i]; i++)
		if (getenv(pass_names[i]))
			add_name(ks, pass_names[i], strlen(pass_names[i]));
	for (char **e = environ; *e; e++)
		if (!strncmp(*e, "TPUFLOW_S3_", 11))
			add_name(ks, *e, strcspn(*e, "="));
	for (size_t i = 0; extra_names && extra_names[i]; i++)
		add_name(ks, extra_names[i], strcspn(extra_names[i], "="));
	ks->spec.export_names = ks->export_names;
	ks->spec.stopping = record_stop;
	ks->spec.stopping_data = r;
	int lost = 0;
	enum tf_fail_class requested;
	long job = lost_job(r, &lost, &requested);
	if (job) {
		ks->spec.attach_job = job;
		ks->spec.attach_requested = (int)requested;
		ks->attempt = lost;
	}
	ks->job_name = tf_xasprintf("tpuflow-%s-%s-%d", r->run_id, r->step, ks->attempt);
	ks->spec.job_name = ks->job_name;
	ks->comment =
	    tf_xasprintf("tpuflow run=%s step=%s attempt=%d", r->run_id, r->step, ks->attempt);
	ks->spec.comment = ks->comment;
	ks->log_prefix =
	    tf_xasprintf("%sslurm/attempt-%d/", r->prefix ? r->prefix : "", ks->attempt);
	return 0;
}

char *const *tf_kind_slurm_wrap(struct tf_step_run *r, struct tf_kind_slurm *ks, const char *self,
                                char *const *argv, unsigned flags)
{
	size_t n = 0;
	while (argv[n])
		n++;
	free(ks->argv);
	ks->argv = tf_xcalloc(n + 10, sizeof(char *));
	size_t k = 0;
	ks->argv[k++] = (char *)self;
	ks->argv[k++] = "step";
	ks->argv[k++] = "job";
	ks->argv[k++] = "--store";
	ks->argv[k++] = (char *)r->storage_url;
	ks->argv[k++] = "--prefix";
	ks->argv[k++] = ks->log_prefix;
	if (flags & TF_KIND_SLURM_PROGRESS)
		ks->argv[k++] = "--progress";
	if (flags & TF_KIND_SLURM_RESULTS)
		ks->argv[k++] = "--results";
	ks->argv[k++] = "--";
	for (size_t i = 0; i < n; i++)
		ks->argv[k++] = argv[i];
	ks->argv[k] = NULL;
	return ks->argv;
}

void tf_kind_slurm_progress(struct tf_step_run *r, struct tf_kind_slurm *ks)
{
	double now = tf_now_monotonic();
	if (!r->progress || !r->objstore || now - ks->progress_at < 1.0)
		return;
	ks->progress_at = now;
	char *key = tf_xasprintf("%sprogress.json", ks->log_prefix);
	void *buf = NULL;
	size_t len = 0;
	if (tf_objstore_get(r->objstore, key, &buf, &len) == 0 && len < 65536) {
		char *line = tf_xasprintf("%.*s", (int)len, (const char *)buf);
		if (line[0] == '{' && (!ks->progress_seen || strcmp(line, ks->progress_seen))) {
			r->progress(r->progress_data, line);
			free(ks->progress_seen);
			ks->progress_seen = line;
			line = NULL;
		}
		free(line);
	}
	free(buf);
	free(key);
}

int tf_kind_slurm_fetch(struct tf_step_run *r, struct tf_kind_slurm *ks, const char *object,
                        const char *path)
{
	char *key = tf_xasprintf("%s%s", ks->log_prefix, object);
	int rc = r->objstore ? tf_objstore_get_file(r->objstore, key, path) : -EINVAL;
	if (rc == -ENOENT) {
		unlink(path); /* the program did not write it */
		rc = 0;
	} else if (rc) {
		snprintf(r->err, sizeof(r->err), "executor 'slurm': cannot fetch '%s': %s", key,
		         r->objstore ? tf_objstore_errmsg(r->objstore) : "no object store");
		r->failure = TF_FAIL_INFRA;
	}
	free(key);
	return rc;
}

void tf_kind_slurm_note(struct tf_step_run *r, struct tf_kind_slurm *ks, struct tf_exec *x)
{
	char nodes[256], state[32];
	long job = tf_exec_slurm_job(x, nodes, sizeof(nodes), state, sizeof(state));
	int first = !ks->noted_job;
	if (!job || !r->db ||
	    (!first && (ks->noted_nodes || !nodes[0]) && !strcmp(state, ks->noted_state)))
		return;
	int rc = tf_store_run(r->db,
	                      "UPDATE attempts SET slurm_job=?, slurm_nodes=coalesce(?, slurm_nodes), "
	                      "slurm_state=coalesce(?, slurm_state) WHERE run_id=? AND step=? AND n=?",
	                      "itttti", (int64_t)job, nodes[0] ? nodes : NULL,
	                      state[0] ? state : NULL, r->run_id, r->step, (int64_t)r->attempt);
	if (rc) {
		tf_warn("%s/%s: cannot record Slurm job %ld on attempt %d: %s", r->run_id, r->step,
		        job, r->attempt, tf_store_errmsg(r->db));
		return;
	}
	ks->noted_job = 1;
	ks->noted_nodes |= nodes[0] != '\0';
	int changed = strcmp(state, ks->noted_state) != 0;
	snprintf(ks->noted_state, sizeof(ks->noted_state), "%s", state);
	char msg[400];
	if (first) {
		snprintf(msg, sizeof(msg), "Slurm job %ld%s", job,
		         ks->spec.attach_job ? " (followed again after a restart)" : "");
		tf_event_add(r->db, r->run_id, r->step, r->attempt, "slurm", msg);
	}
	/* the time it waited is the cluster's, not the step's: its timeout counts from here.
	 * Started means placed on nodes and no longer pending: a sweep may first see it
	 * suspended, or already ended. */
	double queued, ran;
	if (!ks->noted_running && nodes[0] && strcmp(state, "PENDING")) {
		ks->noted_running = 1;
		tf_exec_slurm_times(x, &queued, &ran);
		if (queued >= 0)
			snprintf(msg, sizeof(msg),
			         "Slurm job %ld started on %s after %.0fs in the queue (the step's "
			         "timeout counts its run time only)",
			         job, nodes, queued);
		else
			snprintf(msg, sizeof(msg), "Slurm job %ld started on %s", job, nodes);
		tf_event_add(r->db, r->run_id, r->step, r->attempt, "slurm", msg);
	}
	if (changed && !strcmp(state, "SUSPENDED")) {
		tf_exec_slurm_times(x, &queued, &ran);
		snprintf(msg, sizeof(msg),
		         "Slurm job %ld suspended after running %.0fs (the time it stays suspended "
		         "does not count toward the step's timeout)",
		         job, ran);
		tf_event_add(r->db, r->run_id, r->step, r->attempt, "slurm", msg);
	}
}

void tf_kind_slurm_release(struct tf_kind_slurm *ks)
{
	for (size_t i = 0; i < ks->nexport; i++)
		free(ks->export_names[i]);
	free(ks->export_names);
	free(ks->job_name);
	free(ks->comment);
	free(ks->log_prefix);
	free(ks->argv);
	free(ks->progress_seen);
	memset(ks, 0, sizeof(*ks));
}

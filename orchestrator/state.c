/* state.c — owns the run, step and attempt state machines: every state change of the three
 * passes through one set_state function here, which checks it against the diagrams below,
 * writes it together with an event row and the alerts it causes (orchestrator/alerts.h), and
 * commits (or joins the caller's transaction).
 *
 * Run:
 *
 *     pending ──> running ──┬──> succeeded
 *        │          ^  │    ├──> failed ───────┐
 *        └──> failed (cancelled before it started)
 *                   │  │    └──> interrupted ──┤   (Ctrl-C / SIGTERM)
 *                   │  └─ running (resume after a crash: the new process takes over)
 *                   └──────────────────────────┘   (runs resume / runs retry)
 *
 * Ownership: a run that is running belongs to the process whose owner token is in the row
 * (tf_run_claim: one compare-and-set in one write transaction); the owner renews
 * heartbeat_at (tf_run_heartbeat) and gives the run up with its final state (tf_run_finish).
 * A cancel (tf_run_request_cancel) is a request the owner's heartbeat takes: cancelled_at is
 * set, and the run, while it stays running or interrupted, is cancelled (its finally steps
 * run, then it ends failed); a claim of a failed run clears it.
 *
 * Step:
 *
 *     pending ──┬──> running ──┬──> succeeded
 *        ^      │      │  ^    ├──> retrying ──> running   (backoff waited out)
 *        │      │      │  │    └──> failed
 *        │      ├──> queued ──> running   (every worker was busy; the timeout starts
 *        │      │               when it runs; retrying ──> queued likewise)
 *        │      ├──> cached │
 *        │      ├──> skipped (gate false, or a need failed/skipped)
 *        │      └──> failed (inputs could not be resolved)
 *        ├── queued, running, retrying (interrupted, or found so after a crash)
 *        ├── failed, skipped (runs retry / resume: try again)
 *        └── succeeded, cached: a finally step only, when a run that ended failed is
 *            continued (tf_step_update.new_end): it reports the run's end, and the run
 *            has a new one. Not in the table: every other step keeps its results for good.
 *
 * Attempt (created running):
 *
 *     running ──┬──> succeeded
 *               ├──> failed (failure class: error, timeout, preempted, infra)
 *               ├──> cancelled (Ctrl-C)
 *               └──> lost (the engine died while it ran; found on resume)
 */
#include "orchestrator/state.h"
#include "orchestrator/alerts.h"
#include "orchestrator/pipeline.h"
#include "common/digest.h"

#define TF_LOG_TAG "state"
#include "common/common.h"
#include "common/log.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *const run_names[TF_RUN_STATE_LAST] = {
    "pending", "running", "succeeded", "failed", "interrupted",
};
static const char *const step_names[TF_STEP_STATE_LAST] = {
    "pending", "queued", "running", "retrying", "succeeded", "cached", "skipped", "failed",
};
static const char *const attempt_names[TF_ATTEMPT_STATE_LAST] = {
    "running", "succeeded", "failed", "cancelled", "lost",
};

const char *tf_run_state_name(enum tf_run_state s)
{
	return (unsigned)s < TF_RUN_STATE_LAST ? run_names[s] : "?";
}

const char *tf_step_state_name(enum tf_step_state s)
{
	return (unsigned)s < TF_STEP_STATE_LAST ? step_names[s] : "?";
}

const char *tf_attempt_state_name(enum tf_attempt_state s)
{
	return (unsigned)s < TF_ATTEMPT_STATE_LAST ? attempt_names[s] : "?";
}

static int parse_name(const char *const *names, int n, const char *name, int *out)
{
	for (int i = 0; name && i < n; i++)
		if (!strcmp(names[i], name)) {
			*out = i;
			return 0;
		}
	return -EINVAL;
}

int tf_run_state_parse(const char *name, enum tf_run_state *out)
{
	int v, rc = parse_name(run_names, TF_RUN_STATE_LAST, name, &v);
	if (rc == 0)
		*out = (enum tf_run_state)v;
	return rc;
}

int tf_step_state_parse(const char *name, enum tf_step_state *out)
{
	int v, rc = parse_name(step_names, TF_STEP_STATE_LAST, name, &v);
	if (rc == 0)
		*out = (enum tf_step_state)v;
	return rc;
}

static int attempt_state_parse(const char *name, enum tf_attempt_state *out)
{
	int v, rc = parse_name(attempt_names, TF_ATTEMPT_STATE_LAST, name, &v);
	if (rc == 0)
		*out = (enum tf_attempt_state)v;
	return rc;
}

int tf_step_state_done(enum tf_step_state s)
{
	return s == TF_STEP_SUCCEEDED || s == TF_STEP_CACHED;
}

int tf_step_state_final(enum tf_step_state s)
{
	return s == TF_STEP_SUCCEEDED || s == TF_STEP_CACHED || s == TF_STEP_SKIPPED ||
	       s == TF_STEP_FAILED;
}

#define BIT(x) (1u << (x))

int tf_run_transition_ok(enum tf_run_state from, enum tf_run_state to)
{
	static const unsigned allowed[TF_RUN_STATE_LAST] = {
	    [TF_RUN_PENDING] = BIT(TF_RUN_RUNNING) | BIT(TF_RUN_FAILED),
	    [TF_RUN_RUNNING] = BIT(TF_RUN_SUCCEEDED) | BIT(TF_RUN_FAILED) |
	                       BIT(TF_RUN_INTERRUPTED) | BIT(TF_RUN_RUNNING),
	    [TF_RUN_SUCCEEDED] = 0,
	    [TF_RUN_FAILED] = BIT(TF_RUN_RUNNING),
	    [TF_RUN_INTERRUPTED] = BIT(TF_RUN_RUNNING),
	};
	if ((unsigned)from >= TF_RUN_STATE_LAST || (unsigned)to >= TF_RUN_STATE_LAST)
		return 0;
	return (allowed[from] & BIT(to)) != 0;
}

int tf_step_transition_ok(enum tf_step_state from, enum tf_step_state to)
{
	static const unsigned allowed[TF_STEP_STATE_LAST] = {
	    [TF_STEP_PENDING] = BIT(TF_STEP_QUEUED) | BIT(TF_STEP_RUNNING) | BIT(TF_STEP_CACHED) |
	                        BIT(TF_STEP_SKIPPED) | BIT(TF_STEP_FAILED),
	    [TF_STEP_QUEUED] = BIT(TF_STEP_RUNNING) | BIT(TF_STEP_PENDING),
	    [TF_STEP_RUNNING] = BIT(TF_STEP_SUCCEEDED) | BIT(TF_STEP_RETRYING) |
	                        BIT(TF_STEP_FAILED) | BIT(TF_STEP_PENDING),
	    [TF_STEP_RETRYING] = BIT(TF_STEP_QUEUED) | BIT(TF_STEP_RUNNING) | BIT(TF_STEP_PENDING) |
	                         BIT(TF_STEP_FAILED),
	    [TF_STEP_SUCCEEDED] = 0,
	    [TF_STEP_CACHED] = 0,
	    [TF_STEP_SKIPPED] = BIT(TF_STEP_PENDING),
	    [TF_STEP_FAILED] = BIT(TF_STEP_PENDING),
	};
	if ((unsigned)from >= TF_STEP_STATE_LAST || (unsigned)to >= TF_STEP_STATE_LAST)
		return 0;
	return (allowed[from] & BIT(to)) != 0;
}

int tf_attempt_transition_ok(enum tf_attempt_state from, enum tf_attempt_state to)
{
	return from == TF_ATTEMPT_RUNNING && to != TF_ATTEMPT_RUNNING &&
	       (unsigned)to < TF_ATTEMPT_STATE_LAST;
}

static int add_event(struct tf_store *st, const char *run, const char *step, int attempt,
                     const char *kind, const char *from, const char *to, const char *message)
{
	return tf_store_run(st,
	                    "INSERT INTO events(run_id, id, at, step, attempt, kind, from_state, "
	                    "to_state, message) VALUES(?1, "
	                    "(SELECT coalesce(max(id), 0) + 1 FROM events WHERE run_id=?1), "
	                    "?2, ?3, nullif(?4, 0), ?5, ?6, ?7, ?8)",
	                    "tdtitttt", run, tf_now_wall(), step,
	                    (int64_t)(attempt > 0 ? attempt : 0), kind, from, to, message);
}

static int add_event_noattempt(struct tf_store *st, const char *run, const char *step,
                               const char *kind, const char *from, const char *to,
                               const char *message)
{
	return add_event(st, run, step, 0, kind, from, to, message);
}

int tf_event_add(struct tf_store *st, const char *run, const char *step, int attempt,
                 const char *kind, const char *message)
{
	int own, rc = tf_store_join(st, &own);
	if (rc)
		return rc;
	rc = add_event(st, run, step, attempt, kind, NULL, NULL, message);
	return tf_store_leave(st, own, rc);
}

int tf_attempt_stop_record(struct tf_store *st, const char *run, const char *step, int n,
                           long job, enum tf_fail_class why)
{
	static const char *const because[TF_FAIL_LAST] = {
	    [TF_FAIL_ERROR] = "it can never start",
	    [TF_FAIL_TIMEOUT] = "it ran past the step's timeout",
	    [TF_FAIL_PREEMPTED] = "it was requeued (preempted)",
	    [TF_FAIL_INFRA] = "it was requeued off a failing node",
	    [TF_FAIL_CANCELLED] = "the run was cancelled or interrupted",
	};
	if (why <= TF_FAIL_NONE || why >= TF_FAIL_LAST)
		return -EINVAL;
	char msg[200];
	snprintf(msg, sizeof(msg), "tpuflow cancels Slurm job %ld (scancel): %s", job,
	         because[why]);
	int own, rc = tf_store_join(st, &own);
	if (rc)
		return rc;
	rc = add_event(st, run, step, n, "scancel", NULL, tf_fail_class_name(why), msg);
	return tf_store_leave(st, own, rc);
}

int tf_attempt_stop_intent(struct tf_store *st, const char *run, const char *step, int n,
                           enum tf_fail_class *why)
{
	char *cls = NULL;
	*why = TF_FAIL_NONE;
	int rc = tf_store_query_text(st, &cls,
	                             "SELECT to_state FROM events WHERE run_id=? AND step=? AND "
	                             "attempt=? AND kind='scancel' ORDER BY id DESC LIMIT 1",
	                             "tti", run, step, (int64_t)n);
	if (rc == -ENOENT)
		rc = 0; /* no stop was asked */
	if (rc == 0 && cls && tf_fail_class_parse(cls, why))
		*why = TF_FAIL_NONE;
	free(cls);
	return rc;
}

static void make_run_id(char out[32])
{
	time_t t = time(NULL);
	struct tm tm;
	unsigned char rnd[3] = {0};
	FILE *f = fopen("/dev/urandom", "rb");
	if (!f || fread(rnd, 1, sizeof(rnd), f) != sizeof(rnd)) {
		unsigned v = (unsigned)getpid() ^ (unsigned)(tf_now_monotonic() * 1e6);
		rnd[0] = (unsigned char)v;
		rnd[1] = (unsigned char)(v >> 8);
		rnd[2] = (unsigned char)(v >> 16);
	}
	if (f)
		fclose(f);
	gmtime_r(&t, &tm);
	size_t n = strftime(out, 32, "%Y%m%d-%H%M%S-", &tm);
	snprintf(out + n, 32 - n, "%02x%02x%02x", rnd[0], rnd[1], rnd[2]);
}

int tf_run_create(struct tf_store *st, const char *pipeline_name, const char *source,
                  const char *path, const char *params_json, const char *storage,
                  const struct tf_run_step_def *steps, size_t nsteps, const char *trigger,
                  char run_id[32])
{
	char digest[65], id[32];
	int64_t pid = 0;
	int own, rc;

	struct tf_sha256 *h = tf_sha256_new();
	tf_sha256_update(h, source, strlen(source));
	tf_sha256_final(h, digest);
	make_run_id(id);
	rc = tf_store_join(st, &own);
	if (rc)
		return rc;
	rc = tf_store_run(
	    st,
	    "INSERT INTO pipelines(name, digest, path, source, created_at) "
	    "VALUES(?,?,?,?,?) ON CONFLICT(name, digest) DO UPDATE SET path=excluded.path",
	    "ttttd", pipeline_name, digest, path, source, tf_now_wall());
	if (rc == 0)
		rc = tf_store_query_int(st, &pid,
		                        "SELECT id FROM pipelines WHERE name=? AND digest=?", "tt",
		                        pipeline_name, digest);
	/* Ids have one-second resolution and 24 random bits: thousands of runs in one second
	 * (an API burst) can draw the same id, so a taken id is drawn again. */
	for (int tries = 0; rc == 0 && tries < 16; tries++) {
		rc = tf_store_run(
		    st,
		    "INSERT INTO runs(id, pipeline_id, pipeline, state, params, storage, "
		    "trigger, created_at) VALUES(?,?,?,'pending',?,?,?,?)",
		    "tittttd", id, pid, pipeline_name, params_json ? params_json : "{}", storage,
		    trigger ? trigger : "cli", tf_now_wall());
		if (rc != -EEXIST)
			break;
		make_run_id(id);
		rc = 0;
	}
	for (size_t i = 0; rc == 0 && i < nsteps; i++)
		rc = tf_store_run(st,
		                  "INSERT INTO steps(run_id, name, idx, type, state) "
		                  "VALUES(?,?,?,?,'pending')",
		                  "ttit", id, steps[i].name, (int64_t)i, steps[i].type);
	if (rc == 0)
		rc = add_event_noattempt(st, id, NULL, "run", NULL, "pending", pipeline_name);
	rc = tf_store_leave(st, own, rc);
	if (rc == 0)
		memcpy(run_id, id, sizeof(id));
	return rc;
}

int tf_run_get_state(struct tf_store *st, const char *run, enum tf_run_state *out)
{
	char *s = NULL;
	int rc = tf_store_query_text(st, &s, "SELECT state FROM runs WHERE id=?", "t", run);
	if (rc == 0) {
		rc = tf_run_state_parse(s, out);
		free(s);
	}
	return rc;
}

int tf_run_set_state(struct tf_store *st, const char *run, enum tf_run_state to, const char *error)
{
	enum tf_run_state from;
	int own, rc = tf_store_join(st, &own);
	if (rc)
		return rc;
	rc = tf_run_get_state(st, run, &from);
	if (rc)
		goto out;
	if (!tf_run_transition_ok(from, to)) {
		tf_error("run '%s': transition %s -> %s refused", run, tf_run_state_name(from),
		         tf_run_state_name(to));
		rc = -EINVAL;
		goto out;
	}
	double now = tf_now_wall();
	int final = to == TF_RUN_SUCCEEDED || to == TF_RUN_FAILED || to == TF_RUN_INTERRUPTED;
	if (to == TF_RUN_RUNNING)
		rc = tf_store_run(st,
		                  "UPDATE runs SET state=?, error=NULL, pid=?, finished_at=NULL, "
		                  "started_at=coalesce(started_at, ?) WHERE id=?",
		                  "tidt", tf_run_state_name(to), (int64_t)getpid(), now, run);
	else
		rc = tf_store_run(st,
		                  "UPDATE runs SET state=?, error=?, pid=NULL, "
		                  "finished_at=CASE WHEN ? THEN ? ELSE finished_at END WHERE id=?",
		                  "ttidt", tf_run_state_name(to), final ? error : NULL,
		                  (int64_t) final, now, run);
	if (rc == 0)
		rc = add_event_noattempt(st, run, NULL, "run", tf_run_state_name(from),
		                         tf_run_state_name(to), error);
	if (rc == 0)
		rc = tf_alerts_on_run(st, run, to, error); /* its alerts, in this transaction */
out:
	return tf_store_leave(st, own, rc);
}

/* ---- ownership ------------------------------------------------------------------------ */

int tf_run_owner_read(struct tf_stmt *q, int col, struct tf_run_owner *o)
{
	memset(o, 0, sizeof(*o));
	snprintf(o->token, sizeof(o->token), "%s",
	         tf_stmt_text(q, col + 1) ? tf_stmt_text(q, col + 1) : "");
	o->pid = tf_stmt_is_null(q, col + 2) ? 0 : (long)tf_stmt_int(q, col + 2);
	o->heartbeat_age =
	    tf_stmt_is_null(q, col + 3) ? -1 : tf_now_wall() - tf_stmt_double(q, col + 3);
	return tf_run_state_parse(tf_stmt_text(q, col), &o->state);
}

int tf_run_owner_get(struct tf_store *st, const char *run, struct tf_run_owner *o)
{
	memset(o, 0, sizeof(*o));
	struct tf_stmt *q = tf_store_query(st,
	                                   "SELECT state, owner, pid, heartbeat_at, "
	                                   "cancel_requested_at IS NOT NULL FROM runs WHERE id=?",
	                                   "t", run);
	if (!q)
		return -EIO;
	int rc = tf_stmt_step(q);
	if (rc == 1) {
		rc = tf_run_owner_read(q, 0, o);
		o->cancel_requested = (int)tf_stmt_int(q, 4);
	} else if (rc == 0) {
		rc = -ENOENT;
	}
	tf_stmt_done(q);
	return rc;
}

int tf_run_owner_live(const struct tf_run_owner *o)
{
	return o->token[0] && o->state == TF_RUN_RUNNING && o->heartbeat_age >= 0 &&
	       o->heartbeat_age <= TF_RUN_LEASE_S && tf_pid_alive(o->pid);
}

int tf_run_claim(struct tf_store *st, const char *run, const char *token, unsigned from_states,
                 int force, struct tf_run_owner *holder)
{
	int own, rc = tf_store_join(st, &own);
	if (rc)
		return rc;
	rc = tf_run_owner_get(st, run, holder);
	if (rc)
		goto out;
	if (!(from_states & (1u << holder->state))) {
		rc = -EALREADY;
		goto out;
	}
	int mine = holder->token[0] && !strcmp(holder->token, token);
	if (!mine && !force && tf_run_owner_live(holder)) {
		rc = -EBUSY;
		goto out;
	}
	if (holder->state != TF_RUN_RUNNING || !mine)
		rc = tf_run_set_state(st, run, TF_RUN_RUNNING, NULL);
	/* a run that ended failed starts a new end: its cancel is over (one that was
	 * running or interrupted continues its cancel, if it had one) */
	if (rc == 0)
		rc = tf_store_run(st,
		                  "UPDATE runs SET owner=?, pid=?, heartbeat_at=?, "
		                  "cancel_requested_at=NULL, resume_on_start=0, "
		                  "cancelled_at=CASE WHEN ? THEN NULL ELSE cancelled_at END "
		                  "WHERE id=?",
		                  "tidit", token, (int64_t)getpid(), tf_now_wall(),
		                  (int64_t)(holder->state == TF_RUN_FAILED), run);
	if (rc == 0 && holder->token[0] && !mine)
		rc = add_event_noattempt(st, run, NULL, "owner", NULL, NULL,
		                         force ? "taken over by force from a live owner"
		                               : "taken over from an owner that is gone");
out:
	return tf_store_leave(st, own, rc);
}

int tf_run_heartbeat(struct tf_store *st, const char *run, const char *token, int *cancel)
{
	int own, rc = tf_store_join(st, &own);
	if (rc)
		return rc;
	rc = tf_store_run(st, "UPDATE runs SET heartbeat_at=? WHERE id=? AND owner=?", "dtt",
	                  tf_now_wall(), run, token);
	if (rc == 0 && tf_store_changes(st) != 1)
		rc = -ESTALE;
	int64_t seen = TF_CANCEL_NONE;
	if (rc == 0)
		rc = tf_store_query_int(st, &seen,
		                        "SELECT CASE WHEN cancel_requested_at IS NULL THEN ? "
		                        "WHEN cancelled_at IS NULL THEN ? ELSE ? END "
		                        "FROM runs WHERE id=?",
		                        "iiit", (int64_t)TF_CANCEL_NONE, (int64_t)TF_CANCEL_FIRST,
		                        (int64_t)TF_CANCEL_AGAIN, run);
	/* the first cancel is taken here, in the heartbeat's transaction: a request that comes
	 * after it is a second one */
	if (rc == 0 && seen == TF_CANCEL_FIRST)
		rc = tf_store_run(st,
		                  "UPDATE runs SET cancelled_at=?, cancel_requested_at=NULL "
		                  "WHERE id=?",
		                  "dt", tf_now_wall(), run);
	if (rc == 0 && seen == TF_CANCEL_FIRST)
		rc = add_event_noattempt(st, run, NULL, "cancel", NULL, NULL,
		                         "cancelled: its steps stop, its finally steps run");
	if (rc == 0 && cancel)
		*cancel = (int)seen;
	return tf_store_leave(st, own, rc);
}

int tf_run_finish(struct tf_store *st, const char *run, const char *token, enum tf_run_state to,
                  const char *error, int resume_on_start)
{
	int own, rc = tf_store_join(st, &own);
	if (rc)
		return rc;
	int64_t n = 0;
	rc = tf_store_query_int(st, &n, "SELECT count(*) FROM runs WHERE id=? AND owner=?", "tt",
	                        run, token);
	if (rc == 0 && n != 1)
		rc = -ESTALE;
	if (rc == 0)
		rc = tf_run_set_state(st, run, to, error);
	if (rc == 0)
		rc = tf_store_run(st,
		                  "UPDATE runs SET owner=NULL, cancel_requested_at=NULL, "
		                  "resume_on_start=? WHERE id=?",
		                  "it", (int64_t)(resume_on_start != 0), run);
	return tf_store_leave(st, own, rc);
}

int tf_run_cancelled(struct tf_store *st, const char *run, int *yes)
{
	int64_t v = 0;
	int rc = tf_store_query_int(st, &v, "SELECT cancelled_at IS NOT NULL FROM runs WHERE id=?",
	                            "t", run);
	if (rc == 0)
		*yes = v != 0;
	return rc;
}

int tf_run_request_cancel(struct tf_store *st, const char *run, enum tf_run_state *state)
{
	int own, rc = tf_store_join(st, &own);
	if (rc)
		return rc;
	rc = tf_run_get_state(st, run, state);
	if (rc == 0 && *state == TF_RUN_PENDING) {
		/* nobody drives it yet: it ends here */
		rc = tf_run_set_state(st, run, TF_RUN_FAILED, "cancelled before it started");
		*state = TF_RUN_FAILED;
	} else if (rc == 0 && *state == TF_RUN_RUNNING) {
		int taken = 0;
		rc = tf_run_cancelled(st, run, &taken);
		if (rc == 0)
			rc = tf_store_run(st,
			                  "UPDATE runs SET cancel_requested_at=coalesce("
			                  "cancel_requested_at, ?) WHERE id=?",
			                  "dt", tf_now_wall(), run);
		if (rc == 0)
			rc = add_event_noattempt(st, run, NULL, "cancel", NULL, NULL,
			                         taken ? "cancel requested again: the finally steps "
			                                 "stop too"
			                               : "cancel requested");
	} else if (rc == 0 && *state == TF_RUN_INTERRUPTED) {
		/* not running: it stays as it is, but a daemon no longer continues it */
		rc = tf_store_run(st, "UPDATE runs SET resume_on_start=0 WHERE id=?", "t", run);
	}
	return tf_store_leave(st, own, rc);
}

int tf_run_mark_resume(struct tf_store *st, const char *run, int retry, char *err, size_t errlen)
{
	struct tf_run_owner h;
	int own, rc = tf_store_join(st, &own);
	if (rc)
		return rc;
	rc = tf_run_owner_get(st, run, &h);
	if (rc == -ENOENT)
		tf_errf(err, errlen, "no run '%s'", run);
	else if (rc == 0 && tf_run_owner_live(&h)) {
		tf_errf(err, errlen, "run '%s' is being driven by process %ld", run, h.pid);
		rc = -EBUSY;
	} else if (rc == 0 && (h.state == TF_RUN_SUCCEEDED ||
	                       (retry && h.state != TF_RUN_FAILED && h.state != TF_RUN_INTERRUPTED))) {
		tf_errf(err, errlen, "run '%s' is %s: nothing to %s", run, tf_run_state_name(h.state),
		         retry ? "retry" : "resume");
		rc = -EALREADY;
	} else if (rc == 0)
		rc = tf_store_run(st, "UPDATE runs SET resume_on_start=1 WHERE id=?", "t", run);
	return tf_store_leave(st, own, rc);
}

int tf_attempt_set_pgid(struct tf_store *st, const char *run, const char *step, int n, long pgid)
{
	/* A process group means something only while its processes live, and they do not
	 * outlive the machine: the row must survive the death of this process (a resume ends
	 * the group it left; the page cache keeps the written commit), not a power loss, so its
	 * commit does not wait for a sync (one fdatasync less per child process, while the child
	 * starts); the next commit that waits carries it to disk. Inside a caller's transaction
	 * it is written with that transaction. */
	int own = !tf_store_in_transaction(st);
	if (own)
		tf_store_defer_sync(st, 1);
	int rc = tf_store_run(st, "UPDATE attempts SET pgid=? WHERE run_id=? AND step=? AND n=?",
	                      "itti", (int64_t)pgid, run, step, (int64_t)n);
	if (own)
		tf_store_defer_sync(st, 0);
	return rc;
}

int tf_step_get_state(struct tf_store *st, const char *run, const char *step,
                      enum tf_step_state *state, int *attempts)
{
	struct tf_stmt *s = tf_store_query(
	    st, "SELECT state, attempts FROM steps WHERE run_id=? AND name=?", "tt", run, step);
	if (!s)
		return -EIO;
	int rc = tf_stmt_step(s);
	if (rc == 1) {
		enum tf_step_state v;
		rc = tf_step_state_parse(tf_stmt_text(s, 0), &v);
		if (rc == 0) {
			*state = v;
			if (attempts)
				*attempts = (int)tf_stmt_int(s, 1);
		}
	} else if (rc == 0) {
		rc = -ENOENT;
	}
	tf_stmt_done(s);
	return rc;
}

/* Adds a step that just finished to the running totals of /metrics' step duration histogram
 * (step_duration_totals, migration 0019: the bounds are web/metrics.c's); a step that never
 * started (skipped) has no duration and is not counted. */
static int step_duration_add(struct tf_store *st, const char *run, const char *step)
{
	return tf_store_run(
	    st,
	    "INSERT INTO step_duration_totals(type, state, n, seconds, le_1, le_5, le_15, le_60, "
	    "le_300, le_900, le_3600, le_14400) "
	    "SELECT type, state, 1, d, d<=1, d<=5, d<=15, d<=60, d<=300, d<=900, d<=3600, "
	    "d<=14400 FROM (SELECT type, state, finished_at-started_at AS d FROM steps WHERE "
	    "run_id=?1 AND name=?2 AND finished_at IS NOT NULL AND started_at IS NOT NULL) "
	    "WHERE true ON CONFLICT(type, state) DO UPDATE SET n=n+1, "
	    "seconds=seconds+excluded.seconds, le_1=le_1+excluded.le_1, "
	    "le_5=le_5+excluded.le_5, le_15=le_15+excluded.le_15, le_60=le_60+excluded.le_60, "
	    "le_300=le_300+excluded.le_300, le_900=le_900+excluded.le_900, "
	    "le_3600=le_3600+excluded.le_3600, le_14400=le_14400+excluded.le_14400",
	    "tt", run, step);
}

int tf_step_set_state(struct tf_store *st, const char *run, const char *step, enum tf_step_state to,
                      const struct tf_step_update *u)
{
	static const struct tf_step_update none;
	enum tf_step_state from;
	int own, rc = tf_store_join(st, &own);
	if (rc)
		return rc;
	if (!u)
		u = &none;
	rc = tf_step_get_state(st, run, step, &from, NULL);
	if (rc)
		goto out;
	int new_end = u->new_end && to == TF_STEP_PENDING && tf_step_state_done(from);
	if (!tf_step_transition_ok(from, to) && !new_end) {
		tf_error("run '%s' step '%s': transition %s -> %s refused", run, step,
		         tf_step_state_name(from), tf_step_state_name(to));
		rc = -EINVAL;
		goto out;
	}
	double now = tf_now_wall();
	int final = tf_step_state_final(to);
	rc = tf_store_run(
	    st,
	    "UPDATE steps SET state=?1, reason=?2, outputs=coalesce(?3, outputs), "
	    "metrics=coalesce(?4, metrics), with_json=coalesce(?5, with_json), "
	    "cache_key=coalesce(?6, cache_key), cache_hit=?7, "
	    "attempts=attempts + (?1 = 'running'), "
	    "next_attempt_at=CASE WHEN ?1 = 'retrying' THEN ?8 ELSE NULL END, "
	    "started_at=CASE WHEN ?1 IN ('running','cached') AND started_at IS NULL THEN ?9 "
	    "WHEN ?1 = 'pending' THEN NULL ELSE started_at END, "
	    "finished_at=CASE WHEN ?10 THEN ?9 ELSE NULL END "
	    "WHERE run_id=?11 AND name=?12",
	    "ttttttidditt", tf_step_state_name(to), u->reason, u->outputs, u->metrics, u->with_json,
	    u->cache_key, (int64_t)(to == TF_STEP_CACHED || u->cache_hit), u->next_attempt_at, now,
	    (int64_t) final, run, step);
	if (rc == 0 && final)
		rc = step_duration_add(st, run, step);
	if (rc == 0)
		rc = add_event_noattempt(st, run, step, "step", tf_step_state_name(from),
		                         tf_step_state_name(to), u->reason);
	if (rc == 0)
		rc = tf_alerts_on_step(st, run, step, to, u->reason, u->metrics);
out:
	return tf_store_leave(st, own, rc);
}

int tf_step_set_progress(struct tf_store *st, const char *run, const char *step,
                         const char *json_line)
{
	return tf_store_run(st, "UPDATE steps SET progress=? WHERE run_id=? AND name=?", "ttt",
	                    json_line, run, step);
}

int tf_step_add_slice(struct tf_store *st, const char *run, const char *step, const char *slice,
                      double seconds)
{
	return tf_store_run(st,
	                    "UPDATE steps SET slice=coalesce(?, slice), "
	                    "slice_seconds=slice_seconds + ? WHERE run_id=? AND name=?",
	                    "tdtt", slice, seconds, run, step);
}

int tf_attempt_create(struct tf_store *st, const char *run, const char *step, int n)
{
	int own, rc = tf_store_join(st, &own);
	if (rc)
		return rc;
	rc = tf_store_run(st,
	                  "INSERT INTO attempts(run_id, step, n, state, started_at) "
	                  "VALUES(?,?,?,'running',?)",
	                  "ttid", run, step, (int64_t)n, tf_now_wall());
	if (rc == 0)
		rc = add_event(st, run, step, n, "attempt", NULL, "running", NULL);
	return tf_store_leave(st, own, rc);
}

int tf_attempt_set_state(struct tf_store *st, const char *run, const char *step, int n,
                         enum tf_attempt_state to, const struct tf_attempt_result *r)
{
	static const struct tf_attempt_result none = {.exit_code = -1};
	enum tf_attempt_state from;
	char *cur = NULL;
	int own, rc = tf_store_join(st, &own);
	if (rc)
		return rc;
	if (!r)
		r = &none;
	rc = tf_store_query_text(st, &cur,
	                         "SELECT state FROM attempts WHERE run_id=? AND step=? AND n=?",
	                         "tti", run, step, (int64_t)n);
	if (rc)
		goto out;
	rc = attempt_state_parse(cur, &from);
	if (rc)
		goto out;
	if (!tf_attempt_transition_ok(from, to)) {
		tf_error("run '%s' step '%s' attempt %d: transition %s -> %s refused", run, step, n,
		         tf_attempt_state_name(from), tf_attempt_state_name(to));
		rc = -EINVAL;
		goto out;
	}
	const char *fc = to == TF_ATTEMPT_SUCCEEDED   ? NULL
	                 : r->failure != TF_FAIL_NONE ? tf_fail_class_name(r->failure)
	                 : to == TF_ATTEMPT_CANCELLED ? "cancelled"
	                 : to == TF_ATTEMPT_LOST      ? "infra"
	                                              : "error";
	rc = tf_store_run(st,
	                  "UPDATE attempts SET state=?1, failure_class=?2, "
	                  "exit_code=CASE WHEN ?3 < 0 THEN NULL ELSE ?3 END, error=?4, "
	                  "backoff=?5, log_key=coalesce(?6, log_key), finished_at=?7 "
	                  "WHERE run_id=?8 AND step=?9 AND n=?10",
	                  "ttitdtdtti", tf_attempt_state_name(to), fc, (int64_t)r->exit_code,
	                  r->error, r->backoff, r->log_key, tf_now_wall(), run, step, (int64_t)n);
	if (rc == 0)
		rc = add_event(st, run, step, n, "attempt", tf_attempt_state_name(from),
		               tf_attempt_state_name(to), r->error);
out:
	free(cur);
	return tf_store_leave(st, own, rc);
}

static json_t *json_or_null(const char *text)
{
	if (!text)
		return json_null();
	json_t *v = json_loads(text, JSON_DECODE_ANY, NULL);
	return v ? v : json_string(text);
}

static json_t *real_or_null(struct tf_stmt *s, int col)
{
	return tf_stmt_is_null(s, col) ? json_null() : json_real(tf_stmt_double(s, col));
}

static json_t *int_or_null(struct tf_stmt *s, int col)
{
	return tf_stmt_is_null(s, col) ? json_null() : json_integer(tf_stmt_int(s, col));
}

static json_t *text_or_null(struct tf_stmt *s, int col)
{
	const char *t = tf_stmt_text(s, col);
	return t ? json_string(t) : json_null();
}

/* A time to the microsecond, as GET /api/v1/runs writes its items' times (web/routes_runs.c):
 * the nearest double to the same decimal, so the local and the remote `runs list --json`
 * print the same digits. */
static json_t *time_or_null(struct tf_stmt *s, int col)
{
	if (tf_stmt_is_null(s, col))
		return json_null();
	double v = tf_stmt_double(s, col);
	return json_real(v >= 0 && v < 9e9 ? (double)llround(v * 1e6) / 1e6 : v);
}

int tf_run_row_orphaned(struct tf_stmt *s, int col)
{
	struct tf_run_owner ow;
	return tf_run_owner_read(s, col, &ow) == 0 && ow.state == TF_RUN_RUNNING &&
	       !tf_run_owner_live(&ow);
}

double tf_run_row_duration(struct tf_stmt *s, int state, int started, int finished,
                           int heartbeat, int orphaned)
{
	/* A running run whose owner is gone runs no more: its time ends at the owner's last
	 * heartbeat rather than now. */
	const char *st8 = tf_stmt_text(s, state);
	double start = tf_stmt_is_null(s, started) ? -1 : tf_stmt_double(s, started);
	double end = !tf_stmt_is_null(s, finished) ? tf_stmt_double(s, finished)
	             : orphaned && !tf_stmt_is_null(s, heartbeat) ? tf_stmt_double(s, heartbeat)
	             : st8 && !strcmp(st8, "running") ? tf_now_wall()
	                                              : -1;
	return start >= 0 && end >= start ? end - start : -1;
}

#define SQL_PUT(b, s) tf_buf_append((b), (s), sizeof(s) - 1)

void tf_runs_where_sql(struct tf_buf *b, const struct tf_runs_where *w)
{
	SQL_PUT(b, "r.created_at>=?9");
	if (w->state)
		SQL_PUT(b, " AND r.state=?1");
	if (w->pipeline)
		SQL_PUT(b, " AND r.pipeline=?2");
	if (w->label_key && w->label_value)
		SQL_PUT(b,
		        " AND EXISTS (SELECT 1 FROM run_labels l WHERE l.run_id=r.id AND l.key=?3 "
		        "AND l.value=?4)");
	else if (w->label_key)
		SQL_PUT(
		    b, " AND EXISTS (SELECT 1 FROM run_labels l WHERE l.run_id=r.id AND l.key=?3)");
	if (w->trigger)
		SQL_PUT(b, " AND r.trigger=?5");
	if (w->text)
		SQL_PUT(b, " AND (instr(r.id, ?6) OR instr(r.pipeline, ?6) OR instr(r.error, ?6))");
	if (w->cursor)
		SQL_PUT(b, " AND (r.created_at, r.id) < (?8, ?7)");
}

int tf_runs_list(struct tf_store *st, const struct tf_runs_filter *f, json_t **out)
{
	static const struct tf_runs_filter all = {0};
	if (!f)
		f = &all;
	/* "orphaned" is a running run whose owner is gone: selected as running, then judged */
	int orphaned_only = f->state && !strcmp(f->state, "orphaned");
	const char *state = orphaned_only ? "running" : f->state;
	struct tf_runs_where w = {.state = state,
	                          .pipeline = f->pipeline,
	                          .label_key = f->label_key,
	                          .label_value = f->label_key ? f->label_value : NULL};
	struct tf_buf sql = {0};
	SQL_PUT(&sql, "SELECT r.id, r.pipeline, r.state, r.created_at, r.started_at, "
	              "r.finished_at, r.steps_total, r.steps_done, r.error, r.steps_skipped, "
	              "r.state, r.owner, r.pid, r.heartbeat_at FROM runs r WHERE ");
	tf_runs_where_sql(&sql, &w);
	SQL_PUT(&sql, " ORDER BY r.created_at DESC, r.id DESC");
	struct tf_stmt *s =
	    tf_store_query(st, tf_buf_str(&sql), "ttttttttd", state, f->pipeline, w.label_key,
	                   w.label_value, NULL, NULL, NULL, NULL, f->since);
	tf_buf_release(&sql);
	if (!s)
		return -EIO;
	json_t *arr = json_array();
	int rc;
	while ((rc = tf_stmt_step(s)) == 1) {
		/* a running run whose owner is gone runs no more: say so */
		int orphaned = tf_run_row_orphaned(s, 10);
		if (orphaned_only && !orphaned)
			continue;
		if (f->limit > 0 && json_array_size(arr) >= (size_t)f->limit)
			break;
		json_t *o = json_object();
		json_object_set_new(o, "id", text_or_null(s, 0));
		json_object_set_new(o, "pipeline", text_or_null(s, 1));
		json_object_set_new(o, "state", text_or_null(s, 2));
		json_object_set_new(o, "created_at", time_or_null(s, 3));
		json_object_set_new(o, "started_at", time_or_null(s, 4));
		json_object_set_new(o, "finished_at", time_or_null(s, 5));
		json_object_set_new(o, "steps", json_integer(tf_stmt_int(s, 6)));
		json_object_set_new(o, "done", json_integer(tf_stmt_int(s, 7)));
		json_object_set_new(o, "error", text_or_null(s, 8));
		json_object_set_new(o, "skipped", json_integer(tf_stmt_int(s, 9)));
		json_object_set_new(o, "orphaned", json_boolean(orphaned));
		double dur = tf_run_row_duration(s, 2, 4, 5, 13, orphaned);
		json_object_set_new(o, "duration", dur >= 0 ? json_real(dur) : json_null());
		json_array_append_new(arr, o);
	}
	tf_stmt_done(s);
	size_t i;
	json_t *o;
	json_array_foreach(arr, i, o) /* a page at most: one small query each */
	{
		json_t *labels = NULL;
		if (rc >= 0)
			rc = tf_run_labels(st, json_string_value(json_object_get(o, "id")), &labels);
		json_object_set_new(o, "labels", labels ? labels : json_object());
	}
	if (rc < 0) {
		json_decref(arr);
		return rc;
	}
	*out = arr;
	return 0;
}

int tf_run_labels(struct tf_store *st, const char *run, json_t **out)
{
	struct tf_stmt *s = tf_store_query(
	    st, "SELECT key, value FROM run_labels WHERE run_id=? ORDER BY key", "t", run);
	if (!s)
		return -EIO;
	json_t *o = json_object();
	int rc;
	while ((rc = tf_stmt_step(s)) == 1)
		json_object_set_new(o, tf_stmt_text(s, 0), json_string(tf_stmt_text(s, 1)));
	tf_stmt_done(s);
	if (rc < 0) {
		json_decref(o);
		return rc;
	}
	*out = o;
	return 0;
}

int tf_run_label_check(const char *key, const char *value, char *err, size_t errlen)
{
	size_t kn = strlen(key);
	if (kn == 0 || kn > 128 || strchr(key, '=')) {
		tf_errf(err, errlen, "label name '%s' must have 1 to 128 characters and no '='", key);
		return -EINVAL;
	}
	if (strlen(value) > 1024) {
		tf_errf(err, errlen, "label '%s': its value is longer than 1024 characters", key);
		return -EINVAL;
	}
	for (const char *p = key; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f) {
			tf_errf(err, errlen, "label name '%s' has a control character", key);
			return -EINVAL;
		}
	return 0;
}

int tf_run_set_labels(struct tf_store *st, const char *run, const struct tf_run_label *labels,
                      size_t n)
{
	int own, rc = tf_store_join(st, &own);
	for (size_t i = 0; rc == 0 && i < n; i++)
		rc = tf_store_run(st,
		                  "INSERT INTO run_labels(run_id, key, value) VALUES(?,?,?) "
		                  "ON CONFLICT(run_id, key) DO UPDATE SET value=excluded.value",
		                  "ttt", run, labels[i].key, labels[i].value);
	return tf_store_leave(st, own, rc);
}

/* Every attempt of a run, by step name: {step: [{n, state, ...}, ...]}, in one query (a
 * 1000-step run is described in one pass rather than one query per step). */
static int attempts_json(struct tf_store *st, const char *run, json_t **out)
{
	struct tf_stmt *s = tf_store_query(
	    st,
	    "SELECT step, n, state, failure_class, exit_code, error, backoff, log_key, "
	    "started_at, finished_at, slurm_job, slurm_nodes, pgid, slurm_state FROM attempts "
	    "WHERE run_id=? ORDER BY step, n",
	    "t", run);
	if (!s)
		return -EIO;
	json_t *by_step = json_object(), *arr = NULL;
	const char *cur = NULL;
	int rc;
	while ((rc = tf_stmt_step(s)) == 1) {
		const char *step = tf_stmt_text(s, 0);
		if (!step)
			continue;
		if (!cur || strcmp(cur, step)) {
			arr = json_array();
			json_object_set_new(by_step, step, arr);
			cur = json_object_iter_key(json_object_iter_at(by_step, step));
		}
		json_t *o = json_object();
		json_object_set_new(o, "n", json_integer(tf_stmt_int(s, 1)));
		json_object_set_new(o, "state", text_or_null(s, 2));
		json_object_set_new(o, "failure_class", text_or_null(s, 3));
		json_object_set_new(o, "exit_code", int_or_null(s, 4));
		json_object_set_new(o, "error", text_or_null(s, 5));
		json_object_set_new(o, "backoff", real_or_null(s, 6));
		json_object_set_new(o, "log", text_or_null(s, 7));
		json_object_set_new(o, "started_at", real_or_null(s, 8));
		json_object_set_new(o, "finished_at", real_or_null(s, 9));
		if (!tf_stmt_is_null(s, 10)) { /* executor: slurm */
			json_object_set_new(o, "slurm_job", int_or_null(s, 10));
			json_object_set_new(o, "slurm_nodes", text_or_null(s, 11));
			json_object_set_new(o, "slurm_state", text_or_null(s, 13));
		}
		json_object_set_new(o, "pgid", int_or_null(s, 12));
		json_array_append_new(arr, o);
	}
	tf_stmt_done(s);
	if (rc < 0) {
		json_decref(by_step);
		return rc;
	}
	*out = by_step;
	return 0;
}

int tf_run_describe(struct tf_store *st, const char *run, json_t **out)
{
	json_t *doc = NULL, *steps = NULL;
	struct tf_stmt *s = tf_store_query(
	    st,
	    "SELECT id, pipeline, state, params, storage, error, created_at, "
	    "started_at, finished_at, pid, owner, heartbeat_at, cancel_requested_at, trigger, "
	    "priority, project, state, owner, pid, heartbeat_at, cancelled_at, selection "
	    "FROM runs WHERE id=?",
	    "t", run);
	if (!s)
		return -EIO;
	int rc = tf_stmt_step(s);
	if (rc == 1) {
		doc = json_object();
		json_object_set_new(doc, "id", text_or_null(s, 0));
		json_object_set_new(doc, "pipeline", text_or_null(s, 1));
		json_object_set_new(doc, "state", text_or_null(s, 2));
		json_object_set_new(doc, "params", json_or_null(tf_stmt_text(s, 3)));
		json_object_set_new(doc, "storage", text_or_null(s, 4));
		json_object_set_new(doc, "error", text_or_null(s, 5));
		json_object_set_new(doc, "created_at", real_or_null(s, 6));
		json_object_set_new(doc, "started_at", real_or_null(s, 7));
		json_object_set_new(doc, "finished_at", real_or_null(s, 8));
		json_object_set_new(doc, "pid", int_or_null(s, 9));
		json_object_set_new(doc, "owner", text_or_null(s, 10));
		json_object_set_new(doc, "heartbeat_at", real_or_null(s, 11));
		json_object_set_new(doc, "cancel_requested_at", real_or_null(s, 12));
		json_object_set_new(doc, "trigger", text_or_null(s, 13));
		json_object_set_new(doc, "priority", int_or_null(s, 14));
		json_object_set_new(doc, "project", text_or_null(s, 15));
		json_object_set_new(doc, "orphaned", json_boolean(tf_run_row_orphaned(s, 16)));
		json_object_set_new(doc, "cancelled_at", real_or_null(s, 20));
		json_object_set_new(doc, "selection", json_or_null(tf_stmt_text(s, 21)));
		rc = 0;
	} else if (rc == 0) {
		rc = -ENOENT;
	}
	tf_stmt_done(s);
	if (rc)
		goto out;

	s = tf_store_query(
	    st,
	    "SELECT name, type, state, attempts, reason, cache_hit, outputs, metrics, "
	    "slice, slice_seconds, started_at, finished_at, progress, cache_key, with_json "
	    "FROM steps WHERE run_id=? ORDER BY idx",
	    "t", run);
	if (!s) {
		rc = -EIO;
		goto out;
	}
	steps = json_array();
	while ((rc = tf_stmt_step(s)) == 1) {
		json_t *o = json_object();
		json_object_set_new(o, "name", text_or_null(s, 0));
		json_object_set_new(o, "type", text_or_null(s, 1));
		json_object_set_new(o, "state", text_or_null(s, 2));
		json_object_set_new(o, "attempts", json_integer(tf_stmt_int(s, 3)));
		json_object_set_new(o, "reason", text_or_null(s, 4));
		json_object_set_new(o, "cache_hit", json_boolean(tf_stmt_int(s, 5)));
		json_t *outputs = json_or_null(tf_stmt_text(s, 6));
		json_object_set_new(o, "outputs", json_is_null(outputs) ? json_object() : outputs);
		if (json_is_null(outputs))
			json_decref(outputs);
		json_t *metrics = json_or_null(tf_stmt_text(s, 7));
		json_object_set_new(o, "metrics", json_is_null(metrics) ? json_object() : metrics);
		if (json_is_null(metrics))
			json_decref(metrics);
		json_object_set_new(o, "slice", text_or_null(s, 8));
		json_object_set_new(o, "slice_seconds", json_real(tf_stmt_double(s, 9)));
		json_object_set_new(o, "started_at", real_or_null(s, 10));
		json_object_set_new(o, "finished_at", real_or_null(s, 11));
		if (!tf_stmt_is_null(s, 10) && !tf_stmt_is_null(s, 11))
			json_object_set_new(
			    o, "duration",
			    json_real(tf_stmt_double(s, 11) - tf_stmt_double(s, 10)));
		json_object_set_new(o, "progress", json_or_null(tf_stmt_text(s, 12)));
		json_object_set_new(o, "cache_key", text_or_null(s, 13));
		json_object_set_new(o, "with", json_or_null(tf_stmt_text(s, 14)));
		json_array_append_new(steps, o);
	}
	tf_stmt_done(s);
	if (rc < 0)
		goto out;
	rc = 0;
	size_t i;
	json_t *o, *att = NULL;
	rc = attempts_json(st, run, &att);
	if (rc)
		goto out;
	json_array_foreach(steps, i, o)
	{
		json_t *a = json_object_get(att, json_string_value(json_object_get(o, "name")));
		json_object_set_new(o, "attempts_detail", a ? json_incref(a) : json_array());
	}
	json_decref(att);
	json_object_set(doc, "steps", steps);
	json_t *labels = NULL;
	rc = tf_run_labels(st, run, &labels);
	if (rc)
		goto out;
	json_object_set_new(doc, "labels", labels);

	/* Objects the steps produced. */
	s = tf_store_query(st,
	                   "SELECT step, name, uri, digest, size FROM artifacts WHERE run_id=? "
	                   "ORDER BY id",
	                   "t", run);
	if (!s) {
		rc = -EIO;
		goto out;
	}
	json_t *arts = json_array();
	while ((rc = tf_stmt_step(s)) == 1)
		json_array_append_new(
		    arts, json_pack("{s:s, s:s, s:s, s:o, s:I}", "step", tf_stmt_text(s, 0), "name",
		                    tf_stmt_text(s, 1), "uri", tf_stmt_text(s, 2), "digest",
		                    text_or_null(s, 3), "size", (json_int_t)tf_stmt_int(s, 4)));
	tf_stmt_done(s);
	json_object_set_new(doc, "artifacts", arts);
	if (rc < 0)
		goto out;

	/* The model version a register step of this run made, if any. */
	s = tf_store_query(
	    st,
	    "SELECT m.name, v.version, v.step FROM model_versions v "
	    "JOIN models m ON m.id = v.model_id WHERE v.run_id=? ORDER BY v.created_at",
	    "t", run);
	if (!s) {
		rc = -EIO;
		goto out;
	}
	while ((rc = tf_stmt_step(s)) == 1)
		json_object_set_new(doc, "model",
		                    json_pack("{s:s, s:I, s:s}", "name", tf_stmt_text(s, 0),
		                              "version", (json_int_t)tf_stmt_int(s, 1), "step",
		                              tf_stmt_text(s, 2)));
	tf_stmt_done(s);
	if (rc < 0)
		goto out;
	rc = 0;
	*out = doc;
	doc = NULL;
out:
	json_decref(steps);
	json_decref(doc);
	return rc;
}

int tf_run_events(struct tf_store *st, const char *run, const char *step, json_t **out)
{
	struct tf_stmt *s = tf_store_query(
	    st,
	    "SELECT at, step, attempt, kind, from_state, to_state, message FROM events "
	    "WHERE run_id=?1 AND (?2 IS NULL OR step=?2) ORDER BY id",
	    "tt", run, step);
	if (!s)
		return -EIO;
	json_t *arr = json_array();
	int rc;
	while ((rc = tf_stmt_step(s)) == 1) {
		json_t *o = json_object();
		json_object_set_new(o, "at", real_or_null(s, 0));
		json_object_set_new(o, "step", text_or_null(s, 1));
		json_object_set_new(o, "attempt", int_or_null(s, 2));
		json_object_set_new(o, "kind", text_or_null(s, 3));
		json_object_set_new(o, "from", text_or_null(s, 4));
		json_object_set_new(o, "to", text_or_null(s, 5));
		json_object_set_new(o, "message", text_or_null(s, 6));
		json_array_append_new(arr, o);
	}
	tf_stmt_done(s);
	if (rc < 0) {
		json_decref(arr);
		return rc;
	}
	*out = arr;
	return 0;
}

int tf_run_pipeline_source(struct tf_store *st, const char *run, char **source, char **path)
{
	struct tf_stmt *s = tf_store_query(st,
	                                   "SELECT p.source, p.path FROM runs r JOIN pipelines p "
	                                   "ON p.id = r.pipeline_id WHERE r.id=?",
	                                   "t", run);
	if (!s)
		return -EIO;
	int rc = tf_stmt_step(s);
	if (rc == 1) {
		*source = tf_stmt_strdup(s, 0);
		if (path)
			*path = tf_stmt_strdup(s, 1);
		rc = 0;
	} else if (rc == 0) {
		rc = -ENOENT;
	}
	tf_stmt_done(s);
	return rc;
}

json_t *tf_run_param_values(struct tf_store *st, const char *run, const json_t *overrides)
{
	char *src = NULL, *path = NULL;
	if (tf_run_pipeline_source(st, run, &src, &path))
		return NULL;
	size_t nov;
	struct tf_param_override *ov = tf_param_overrides_from_json(overrides, &nov);
	struct tf_pipeline *p = NULL;
	struct tf_diag_list diags = {0};
	json_t *arr = NULL;
	if (tf_pipeline_load_buffer(path ? path : "pipeline", src, strlen(src), ov, nov,
	                            TF_PIPELINE_ALLOW_UNSET, &p, &diags) == 0)
		arr = tf_pipeline_param_values(p);
	tf_diag_list_release(&diags);
	tf_pipeline_free(p);
	free(ov);
	free(src);
	free(path);
	return arr;
}

int tf_run_find(struct tf_store *st, const char *prefix, char run_id[32])
{
	struct tf_stmt *s;
	if (!strcmp(prefix, "latest"))
		s = tf_store_query(
		    st, "SELECT id FROM runs ORDER BY created_at DESC, id DESC LIMIT 1", "");
	else
		s = tf_store_query(st,
		                   "SELECT id FROM runs WHERE substr(id, 1, length(?1)) = ?1 "
		                   "ORDER BY id LIMIT 2",
		                   "t", prefix);
	if (!s)
		return -EIO;
	int rc = tf_stmt_step(s), n = 0;
	char found[32] = "";
	while (rc == 1) {
		if (!n++)
			snprintf(found, sizeof(found), "%s", tf_stmt_text(s, 0));
		if (!strcmp(tf_stmt_text(s, 0), prefix)) {
			n = 1;
			snprintf(found, sizeof(found), "%s", prefix);
			break;
		}
		rc = tf_stmt_step(s);
	}
	tf_stmt_done(s);
	if (rc < 0)
		return rc;
	if (n == 0)
		return -ENOENT;
	if (n > 1)
		return -EEXIST;
	memcpy(run_id, found, 32);
	return 0;
}

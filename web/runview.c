/* runview.c — owns the routes that show the inside of one run, as the dashboard's run page
 * reads them: the run's DAG (planned from the run's own pipeline source, so it is the graph
 * that ran, not the newest file of that name), a step's logs (stored, or followed live from
 * the work directory while an attempt runs) and a train step's checkpoints.
 *
 * Logs, attempt by attempt. An attempt's log has one text whatever moment it is read at:
 *  - once the attempt is finished, the object the engine stored (`attempts.log_key`), else
 *    the file it left in HOME/work/RUN/STEP/attempt-N.log when the upload failed;
 *  - while it runs, that same file as it grows (steps that report progress write it line by
 *    line), else the program's stdout.log under attempt-N/ with the "==> stdout <==" title
 *    the finished log will start with (orchestrator/kinds_shell.c).
 * So the bytes sent of attempt N are a prefix of its stored log, and following switches from
 * the live file to the stored object at the same offset without repeating or losing a byte.
 * The body (each attempt's log under its "==> attempt N <==" line) is therefore a prefix of
 * itself read later, which is what `?offset=N` rests on: a follower cut off asks again from
 * the bytes it has, and the server drops those before sending (it reads them: the stored
 * logs are whole objects, and a running attempt's header is only written once it has bytes).
 * A log is bytes, whatever a program wrote (NUL, invalid UTF-8): they are copied by length,
 * never as C strings, and sent as they are.
 */
#include "web/api.h"

#include "common/common.h"
#include "orchestrator/pipeline.h"
#include "orchestrator/state.h"
#include "storage/ckpt.h"
#include "storage/objstore.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define LIVE_CHUNK 65536 /* bytes read from a live log file per call */

static const char stdout_title[] = "==> stdout <==\n";

static struct tf_objstore *run_objstore(struct tf_store *st, const char *run)
{
	char *url = NULL;
	struct tf_objstore *os = NULL;
	char err[256];
	if (!tf_store_query_text(st, &url, "SELECT storage FROM runs WHERE id=?", "t", run) &&
	    url && tf_objstore_open(url, &os, err, sizeof(err)))
		os = NULL;
	free(url);
	return os;
}

/* ---- logs ---------------------------------------------------------------------------------- */

struct tf_web_log {
	struct tf_store *st;
	struct tf_objstore *os;
	char *workdir; /* HOME/work/RUN/STEP */
	char run[32], step[128];
	int n;         /* the attempt being sent, from 1 */
	size_t off;    /* bytes of attempt n's log sent */
	size_t skip;   /* bytes of the body still to drop (?offset=), not sent */
	char *pending; /* bytes not yet handed to the server */
	size_t plen, poff;
	int done;
};

/* Up to LIVE_CHUNK bytes of the file at path from off (a new buffer in *out, length *len);
 * 0, or -ENOENT when there is no such file. */
static int read_from(const char *path, size_t off, char **out, size_t *len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -ENOENT;
	char *buf = tf_xmalloc(LIVE_CHUNK);
	ssize_t n = pread(fd, buf, LIVE_CHUNK, (off_t)off);
	close(fd);
	*out = buf;
	*len = n > 0 ? (size_t)n : 0;
	return 0;
}

/* Bytes of attempt l->n's log from l->off that are there now (a new buffer, maybe empty);
 * *final is set when they are the last ones (the attempt is finished). -ENOENT when the
 * attempt does not exist (yet). */
static int attempt_bytes(struct tf_web_log *l, char **out, size_t *len, int *final)
{
	char *key = NULL;
	struct tf_stmt *s = tf_store_query(l->st,
	                                   "SELECT log_key, finished_at IS NOT NULL FROM attempts "
	                                   "WHERE run_id=? AND step=? AND n=?",
	                                   "tti", l->run, l->step, (int64_t)l->n);
	int rc = s ? tf_stmt_step(s) : -EIO;
	if (rc == 1) {
		if (tf_stmt_text(s, 0))
			key = tf_xstrdup(tf_stmt_text(s, 0));
		*final = (int)tf_stmt_int(s, 1);
	}
	tf_stmt_done(s);
	if (rc != 1)
		return rc == 0 ? -ENOENT : rc;
	*out = NULL;
	*len = 0;
	if (key) {
		void *data = NULL;
		size_t n = 0;
		if (l->os && tf_objstore_get(l->os, key, &data, &n) == 0 && n > l->off) {
			*len = n - l->off;
			*out = tf_xmalloc(*len);
			memcpy(*out, (char *)data + l->off, *len);
		}
		free(data);
		free(key);
		return 0;
	}
	char *path = tf_xasprintf("%s/attempt-%d.log", l->workdir, l->n);
	rc = read_from(path, l->off, out, len);
	free(path);
	if (rc == -ENOENT && !*final) { /* a program's output while it runs */
		const size_t tl = sizeof(stdout_title) - 1;
		path = tf_xasprintf("%s/attempt-%d/stdout.log", l->workdir, l->n);
		char *body = NULL;
		size_t blen = 0;
		if (read_from(path, l->off > tl ? l->off - tl : 0, &body, &blen) == 0 && blen) {
			size_t head = l->off < tl ? tl - l->off : 0;
			*out = tf_xmalloc(head + blen);
			memcpy(*out, stdout_title + (tl - head), head);
			memcpy(*out + head, body, blen);
			*len = head + blen;
		}
		free(body);
		free(path);
	}
	return 0;
}

/* Whether l's run is final: a step it left pending or queued (a cancelled run's) gets no
 * attempt unless the run is resumed, which a follower sees by asking again. */
static int run_final(struct tf_web_log *l)
{
	enum tf_run_state rs;
	return !tf_run_get_state(l->st, l->run, &rs) &&
	       (rs == TF_RUN_SUCCEEDED || rs == TF_RUN_FAILED || rs == TF_RUN_INTERRUPTED);
}

/* Fills l->pending with the next bytes: 1 when there are some, 0 when nothing is there now,
 * -1 at the end (every attempt sent and the step final). */
static int logs_next(struct tf_web_log *l)
{
	for (;;) {
		enum tf_step_state state;
		int attempts = 0;
		if (tf_step_get_state(l->st, l->run, l->step, &state, &attempts))
			return -1;
		if (l->n > attempts) /* a final run's unfinished step (cancelled) gets no more */
			return tf_step_state_final(state) || run_final(l) ? -1 : 0;
		char *bytes = NULL;
		size_t len = 0;
		int final = 0;
		int rc = attempt_bytes(l, &bytes, &len, &final);
		if (rc == -ENOENT && !tf_step_state_final(state)) /* counted, not written yet */
			return 0;
		if (rc == -ENOENT) { /* a final step's attempt without a record: none to send */
			l->n++;
			l->off = 0;
			continue;
		}
		if (rc)
			return -1;
		if (len) {
			free(l->pending);
			l->pending = bytes;
			l->plen = len;
			if (!l->off) { /* an attempt's first bytes come under its line */
				char head[32];
				size_t hl = (size_t)snprintf(head, sizeof(head),
				                             "==> attempt %d <==\n", l->n);
				l->pending = tf_xmalloc(hl + len);
				memcpy(l->pending, head, hl);
				memcpy(l->pending + hl, bytes, len); /* any byte, NUL too */
				l->plen = hl + len;
				free(bytes);
			}
			l->off += len;
			/* the first bytes of the body the client already has are dropped */
			l->poff = l->skip < l->plen ? l->skip : l->plen;
			l->skip -= l->poff;
			if (l->poff == l->plen)
				continue;
			return 1;
		}
		free(bytes);
		if (!final)
			return 0;
		l->n++;
		l->off = 0;
	}
}

static long logs_fill(void *ctx, char *buf, size_t max)
{
	struct tf_web_log *l = ctx;
	if (l->poff >= l->plen) {
		if (l->done)
			return -1;
		int rc = logs_next(l);
		if (rc < 0)
			l->done = 1;
		if (rc <= 0)
			return rc;
	}
	size_t n = l->plen - l->poff < max ? l->plen - l->poff : max;
	memcpy(buf, l->pending + l->poff, n);
	l->poff += n;
	return (long)n;
}

static void logs_free(void *ctx)
{
	struct tf_web_log *l = ctx;
	tf_store_close(l->st);
	tf_objstore_free(l->os);
	free(l->workdir);
	free(l->pending);
	free(l);
}

struct tf_web_log *tf_web_log_follow(struct tf_web_req *rq, struct tf_store *st, const char *run,
                                     const char *step, size_t skip)
{
	struct tf_web_log *l = tf_xcalloc(1, sizeof(*l));
	l->st = st;
	l->skip = skip;
	snprintf(l->run, sizeof(l->run), "%s", run);
	snprintf(l->step, sizeof(l->step), "%s", step);
	l->workdir = tf_xasprintf("%s/work/%s/%s", tf_web_home(rq->srv), run, step);
	l->os = run_objstore(rq->st, run);
	l->n = 1;
	return l;
}

long tf_web_log_fill(struct tf_web_log *l, char *buf, size_t max)
{
	return logs_fill(l, buf, max);
}

void tf_web_log_free(struct tf_web_log *l)
{
	if (!l)
		return;
	l->st = NULL; /* the caller's */
	logs_free(l);
}

/* The request's run id (into id) and step name: 0, or -1 with the problem in rs when the
 * run has no such step. */
static int step_param(struct tf_web_req *rq, struct tf_web_resp *rs, char id[32], const char **step)
{
	if (tf_web_run_param(rq, rs, id))
		return -1;
	*step = tf_web_param(rq, "step");
	enum tf_step_state state;
	int attempts = 0;
	if (!*step || strlen(*step) >= 128 ||
	    tf_step_get_state(rq->st, id, *step, &state, &attempts)) {
		tf_web_problem(rs, 404, rq->path, "run %s has no step '%s'", id,
		               *step ? *step : "");
		return -1;
	}
	return 0;
}

void tf_web_step_logs(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	char id[32];
	const char *step;
	if (step_param(rq, rs, id, &step))
		return;
	const char *follow = tf_web_query(rq, "follow"), *offset = tf_web_query(rq, "offset");
	if (follow && strcmp(follow, "true") && strcmp(follow, "false")) {
		tf_web_problem(rs, 400, rq->path, "query 'follow' wants true or false");
		return;
	}
	char *end = NULL;
	errno = 0;
	unsigned long long skip = offset ? strtoull(offset, &end, 10) : 0;
	if (offset && (*offset < '0' || *offset > '9' || *end || errno)) {
		tf_web_problem(rs, 400, rq->path,
		               "query 'offset' wants a byte count (0 or more), not '%s'", offset);
		return;
	}
	struct tf_web_log *l = tf_xcalloc(1, sizeof(*l));
	l->skip = (size_t)skip;
	snprintf(l->run, sizeof(l->run), "%s", id);
	snprintf(l->step, sizeof(l->step), "%s", step);
	l->workdir = tf_xasprintf("%s/work/%s/%s", tf_web_home(rq->srv), id, step);
	l->os = run_objstore(rq->st, id);
	l->n = 1;
	rs->status = 200;
	/* The body is the program's bytes, NUL and bytes that are not UTF-8 included; the
	 * charset only tells a browser how to show them (with nosniff it guesses nothing): as
	 * UTF-8, what programs write and what the dashboard decodes them as, bytes that are not
	 * shown as U+FFFD. application/octet-stream would have a browser save the log, not show
	 * it, and a text/plain without a charset would have it guess one (docs/api.md). */
	rs->type = "text/plain; charset=utf-8";
	if (!follow || strcmp(follow, "true")) {
		/* Not following: what is there now, as one body, read with the request's handle. */
		l->st = rq->st;
		FILE *f = open_memstream(&rs->body, &rs->len);
		while (logs_next(l) > 0)
			fwrite(l->pending + l->poff, 1, l->plen - l->poff, f);
		fclose(f);
		l->st = NULL;
		logs_free(l);
		return;
	}
	/* Followed, the stream outlives the request's store handle: it opens its own. */
	char err[256];
	char *path = tf_xasprintf("%s/%s", tf_web_home(rq->srv), TF_STORE_FILE);
	int rc = tf_store_open(path, 0, &l->st, err, sizeof(err));
	free(path);
	if (rc) {
		logs_free(l);
		tf_web_problem(rs, 503, rq->path, "cannot open the state database: %s", err);
		return;
	}
	rs->stream = logs_fill;
	rs->stream_ctx = l;
	rs->stream_free = logs_free;
}

/* ---- the DAG ------------------------------------------------------------------------------- */

void tf_web_run_graph(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	char id[32];
	if (tf_web_run_param(rq, rs, id))
		return;
	char *source = NULL;
	int rc = tf_store_query_text(rq->st, &source,
	                             "SELECT p.source FROM runs r JOIN pipelines p ON "
	                             "p.id=r.pipeline_id WHERE r.id=?",
	                             "t", id);
	if (rc || !source) {
		free(source);
		tf_web_problem_errno(rs, rc ? rc : -ENOENT, rq->path, tf_store_errmsg(rq->st));
		return;
	}
	struct tf_pipeline *p = NULL;
	struct tf_diag_list diags;
	tf_diag_list_init(&diags);
	rc = tf_pipeline_load_buffer("pipeline.yaml", source, strlen(source), NULL, 0,
	                             TF_PIPELINE_ALLOW_UNSET, &p, &diags);
	free(source);
	if (rc) {
		tf_web_problem_diags(
		    rs, 422, rq->path, &diags,
		    "the run's pipeline no longer loads in this version of tpuflow");
		tf_diag_list_release(&diags);
		return;
	}
	tf_diag_list_release(&diags);
	json_t *plan = tf_pipeline_plan_json(p);
	tf_pipeline_free(p);
	json_object_del(plan, "file");
	json_object_set_new(plan, "run_id", json_string(id));
	tf_web_json(rs, 200, plan);
}

/* ---- checkpoints --------------------------------------------------------------------------- */

void tf_web_step_checkpoints(struct tf_web_req *rq, struct tf_web_resp *rs)
{
	char id[32];
	const char *step;
	if (step_param(rq, rs, id, &step))
		return;
	/* Where a train step keeps them: runs/RUN/STEP/ckpt/ in the run's store (docs/storage.md).
	 */
	char *prefix = tf_xasprintf("runs/%s/%s/ckpt/", id, step);
	struct tf_objstore *os = run_objstore(rq->st, id);
	struct tf_ckpt_info *info = NULL;
	size_t n = 0;
	if (os && tf_ckpt_list(os, prefix, &info, &n))
		n = 0;
	json_t *items = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(items, json_pack("{s:I, s:f, s:I, s:I}", "step",
		                                       (json_int_t)info[i].step, "created_at",
		                                       info[i].created, "tensors",
		                                       (json_int_t)info[i].tensors, "bytes",
		                                       (json_int_t)info[i].bytes));
	free(info);
	tf_objstore_free(os);
	tf_web_json(rs, 200,
	            json_pack("{s:s, s:s, s:o}", "run_id", id, "prefix", prefix, "items", items));
	free(prefix);
}

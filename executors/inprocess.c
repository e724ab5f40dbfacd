/* inprocess.c — the in-process executor: the step's function runs on its own thread of this
 * process with log files for stdout/stderr. Cancel, preemption and timeouts are cooperative:
 * they raise ctx->cancel and the function is expected to return soon (the ML steps check it
 * between batches). A thread cannot be killed safely, so freeing a handle waits for the
 * function to return. */
#include "executors/exec_int.h"
#include "common/common.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct inproc {
	struct tf_exec head;                      /* common part: first */
	int (*fn)(const struct tf_exec_ctx *ctx); /* the work */
	struct tf_exec_ctx ctx;                   /* what fn receives */
	volatile int cancel;                      /* ctx.cancel points here */
	char errbuf[200];                         /* ctx.errbuf */
	double timeout;                           /* seconds, <= 0: none */
	pthread_t thread;
	pthread_mutex_t mu;        /* guards finished, rc, requested */
	pthread_cond_t cv;         /* signalled when finished */
	int finished;              /* fn returned */
	int rc;                    /* its return code */
	int requested;             /* enum tf_fail_class asked for */
	int joined;                /* thread joined and res filled */
	struct tf_exec_result res; /* the outcome once joined */
};

static void *run(void *arg)
{
	struct inproc *p = arg;
	int rc = p->fn(&p->ctx);
	fflush(p->ctx.out);
	fflush(p->ctx.err);
	pthread_mutex_lock(&p->mu);
	p->rc = rc;
	p->finished = 1;
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

static const char *inproc_log_path(const struct tf_exec *x, int stream)
{
	return stream == 1 ? x->out_path : stream == 2 ? x->err_path : NULL;
}

static int inproc_start(const struct tf_exec_spec *spec, struct tf_exec **out, char *err,
                        size_t errlen)
{
	if (!spec->fn) {
		snprintf(err, errlen, "in-process executor needs a function to run");
		return -EINVAL;
	}
	struct inproc *p = tf_xcalloc(1, sizeof(*p));
	int rc = tf_exec_head_init(&p->head, &tf_executor_inprocess, spec, err, errlen);
	if (rc)
		goto fail;
	p->fn = spec->fn;
	p->timeout = spec->timeout;
	p->ctx.arg = spec->arg;
	p->ctx.cancel = &p->cancel;
	p->ctx.errbuf = p->errbuf;
	p->ctx.errlen = sizeof(p->errbuf);
	p->ctx.out = fopen(p->head.out_path, "we");
	p->ctx.err = fopen(p->head.err_path, "we");
	if (!p->ctx.out || !p->ctx.err) {
		rc = -errno;
		snprintf(err, errlen, "cannot create logs in '%s': %s", p->head.dir, strerror(-rc));
		goto fail;
	}
	pthread_mutex_init(&p->mu, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&p->cv, &ca);
	pthread_condattr_destroy(&ca);
	rc = -pthread_create(&p->thread, NULL, run, p);
	if (rc) {
		snprintf(err, errlen, "cannot start a thread: %s", strerror(-rc));
		pthread_mutex_destroy(&p->mu);
		pthread_cond_destroy(&p->cv);
		goto fail;
	}
	*out = &p->head;
	return 0;
fail:
	if (p->ctx.out)
		fclose(p->ctx.out);
	if (p->ctx.err)
		fclose(p->ctx.err);
	tf_exec_head_release(&p->head);
	free(p);
	return rc;
}

/* Called with mu held once finished: joins and fills res. */
static void collect(struct inproc *p)
{
	if (p->joined)
		return;
	pthread_mutex_unlock(&p->mu);
	pthread_join(p->thread, NULL);
	pthread_mutex_lock(&p->mu);
	p->joined = 1;
	fclose(p->ctx.out);
	fclose(p->ctx.err);
	p->ctx.out = p->ctx.err = NULL;
	struct tf_exec_result *r = &p->res;
	memset(r, 0, sizeof(*r));
	r->seconds = tf_now_monotonic() - p->head.started;
	r->exit_code = p->rc;
	r->fclass = tf_exec_classify_return(p->rc, (enum tf_fail_class)p->requested);
	if (p->rc == 0 && r->fclass == TF_FAIL_NONE)
		snprintf(r->message, sizeof(r->message), "returned 0");
	else if (p->errbuf[0])
		snprintf(r->message, sizeof(r->message), "%s", p->errbuf);
	else
		snprintf(r->message, sizeof(r->message), "returned %d (%s)", p->rc,
		         p->rc < 0 ? strerror(-p->rc) : "error");
	if (p->requested == TF_FAIL_TIMEOUT) {
		size_t n = strlen(r->message);
		snprintf(r->message + n, sizeof(r->message) - n, " after timeout %gs", p->timeout);
	}
	tf_exec_head_finish(&p->head, r);
}

/* With mu held: raises cancel at the timeout. */
static void enforce(struct inproc *p)
{
	if (!p->requested && p->timeout > 0 && tf_now_monotonic() - p->head.started >= p->timeout) {
		p->requested = TF_FAIL_TIMEOUT;
		p->cancel = 1;
	}
}

static int inproc_poll(struct tf_exec *x, struct tf_exec_result *res)
{
	struct inproc *p = (struct inproc *)x;
	int rc = -EAGAIN;
	pthread_mutex_lock(&p->mu);
	if (!p->finished)
		enforce(p);
	if (p->finished) {
		collect(p);
		*res = p->res;
		rc = 0;
	}
	pthread_mutex_unlock(&p->mu);
	return rc;
}

static int inproc_wait(struct tf_exec *x, double timeout, struct tf_exec_result *res)
{
	struct inproc *p = (struct inproc *)x;
	double start = tf_now_monotonic();
	int rc = 0;
	pthread_mutex_lock(&p->mu);
	while (!p->finished) {
		enforce(p);
		double now = tf_now_monotonic(), until = -1;
		if (timeout >= 0)
			until = start + timeout;
		if (p->timeout > 0 && !p->requested &&
		    (until < 0 || p->head.started + p->timeout < until))
			until = p->head.started + p->timeout;
		if (timeout >= 0 && now >= start + timeout) {
			rc = -ETIMEDOUT;
			break;
		}
		if (until < 0) {
			pthread_cond_wait(&p->cv, &p->mu);
		} else {
			struct timespec ts;
			clock_gettime(CLOCK_MONOTONIC, &ts);
			double d = until - now;
			d = d > 0 ? d : 0;
			ts.tv_sec += (time_t)d;
			ts.tv_nsec += (long)((d - (double)(time_t)d) * 1e9);
			if (ts.tv_nsec >= 1000000000L) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000L;
			}
			pthread_cond_timedwait(&p->cv, &p->mu, &ts);
		}
	}
	if (p->finished) {
		collect(p);
		*res = p->res;
		rc = 0;
	}
	pthread_mutex_unlock(&p->mu);
	return rc;
}

static int inproc_cancel(struct tf_exec *x, enum tf_fail_class why)
{
	struct inproc *p = (struct inproc *)x;
	pthread_mutex_lock(&p->mu);
	if (!p->finished && !p->requested) {
		p->requested = why;
		p->cancel = 1;
	}
	pthread_mutex_unlock(&p->mu);
	return 0;
}

static void inproc_free(struct tf_exec *x)
{
	struct inproc *p = (struct inproc *)x;
	pthread_mutex_lock(&p->mu);
	if (!p->finished && !p->requested) {
		p->requested = TF_FAIL_CANCELLED;
		p->cancel = 1;
	}
	while (!p->finished)
		pthread_cond_wait(&p->cv, &p->mu);
	collect(p);
	pthread_mutex_unlock(&p->mu);
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->cv);
	tf_exec_head_release(&p->head);
	free(p);
}

const struct tf_executor_ops tf_executor_inprocess = {
    .name = "inprocess",
    .start = inproc_start,
    .poll = inproc_poll,
    .wait = inproc_wait,
    .cancel = inproc_cancel,
    .log_path = inproc_log_path,
    .free = inproc_free,
};

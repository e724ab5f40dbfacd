/* kinds_ml.c — owns the glue between the engine and the training workload: data_prep, train
 * and evaluate steps call ml/steps.h with the step's object-store prefix (stable across
 * attempts and resumes, so train continues from its newest checkpoint), scratch directory,
 * slice, cancel flag and progress callback. Built only when ml/steps.h is present. */
#include "orchestrator/kinds.h"

#if __has_include("ml/steps.h")
#include "ml/steps.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

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
	if (rc) {
		r->failure = TF_FAIL_INFRA;
		return rc;
	}
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

static int kind_data_prep(struct tf_step_run *r)
{
	return ml_call(r, tf_ml_data_prep_step);
}

static int kind_train(struct tf_step_run *r)
{
	return ml_call(r, tf_ml_train_step);
}

static int kind_evaluate(struct tf_step_run *r)
{
	return ml_call(r, tf_ml_evaluate_step);
}

const tf_step_kind_fn tf_kind_data_prep = kind_data_prep;
const tf_step_kind_fn tf_kind_train = kind_train;
const tf_step_kind_fn tf_kind_evaluate = kind_evaluate;

#else /* this build has no training workload */

const tf_step_kind_fn tf_kind_data_prep = NULL;
const tf_step_kind_fn tf_kind_train = NULL;
const tf_step_kind_fn tf_kind_evaluate = NULL;

#endif

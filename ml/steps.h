/* steps.h — the training workload as pipeline step kinds, for the run engine.
 *
 * Each adapter reads its `with` object (references already resolved; numbers may be JSON
 * numbers or numeric strings), does the work under ctx->prefix in ctx->store, and fills
 * `outputs` and `metrics` (jansson objects owned by the caller). The keys, their types and
 * ranges, the outputs and metrics are the rows of the step-kind table
 * (orchestrator/pipeline_schema.c, printed by `tpuflow kinds`); the allowed words are this
 * folder's own lists (tf_dataset_sources, tf_optim_names, tf_lr_schedule_names,
 * tf_train_monitors), which the table points at. A train step's checkpoints go under
 * PREFIX/ckpt/; a retried attempt resumes from the newest.
 *
 * Return codes: 0, or negative with err filled. Retryable (infrastructure) failures are the
 * object-store codes for which tf_ml_retryable() is 1 (-EAGAIN, timeouts, connection errors);
 * everything else is permanent: -EINVAL bad `with`, -ENOENT/-EBADMSG missing or bad data,
 * -ERANGE diverging loss, -ECANCELED cancelled through ctx->cancel. */
#ifndef TF_ML_STEPS_H
#define TF_ML_STEPS_H

#include "storage/objstore.h"

#include <jansson.h>
#include <stddef.h>

struct tf_ml_ctx {
	struct tf_objstore *store; /* the run's object store */
	const char *prefix;        /* this step's key prefix, stable across attempts
	                              ("runs/<run>/<step>/") */
	const char *workdir;       /* local scratch directory (may be NULL) */
	const char *accelerator;   /* slice, e.g. "v4-8" (NULL: v4-8) */
	volatile int *cancel;      /* nonzero: stop soon (may be NULL) */
	void (*progress)(void *data, const char *json_line); /* progress events (may be NULL) */
	void *progress_data;                                 /* passed to progress */
};

/* The options of data prep and training from a `with` object, checked (what the steps and
 * `tpuflow data prep|train` share); fields `with` does not name are left as they are. 0, or
 * -EINVAL with err. Strings point into `with`. */
struct tf_prep_opts;
struct tf_train_opts;
int tf_ml_prep_opts_from_with(const json_t *with, struct tf_prep_opts *o, char *err, size_t errlen);
int tf_ml_train_opts_from_with(const json_t *with, struct tf_train_opts *o, char *err,
                               size_t errlen);

int tf_ml_data_prep_step(const json_t *with, const struct tf_ml_ctx *ctx, json_t *outputs,
                         json_t *metrics, char *err, size_t errlen);
int tf_ml_train_step(const json_t *with, const struct tf_ml_ctx *ctx, json_t *outputs,
                     json_t *metrics, char *err, size_t errlen);
int tf_ml_evaluate_step(const json_t *with, const struct tf_ml_ctx *ctx, json_t *outputs,
                        json_t *metrics, char *err, size_t errlen);

/* 1 when a step's return code is worth retrying later (infrastructure), else 0. */
int tf_ml_retryable(int rc);

/* A number of `with`: a JSON number, a numeric string or a boolean (1/0). 0 and *out, or
 * -EINVAL when v is none of these. */
int tf_ml_number(const json_t *v, double *out);
/* tf_ml_number of with.KEY: 0 and *out when found, 1 when absent (or null), -EINVAL with err
 * ("with.KEY must be a number") otherwise. */
int tf_ml_with_number(const json_t *with, const char *key, double *out, char *err,
                      size_t errlen);

#endif

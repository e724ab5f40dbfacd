/* train.h — training an MLP on an emulated TPU slice, evaluation, checkpoints and export.
 *
 * One step: the input pipeline delivers a global batch; tf_slice_run gives every replica its
 * contiguous shard of rows (tf_slice_shard) to run forward and backward through the MXU; the
 * replicas' gradients are summed by the slice's deterministic all-reduce; the optimizer
 * updates the one copy of the weights every replica reads in the next step.
 *
 * Resume: checkpoints (storage/ckpt.h) hold the weights, optimizer moments, the step (which is
 * also the input pipeline's batch position), the epoch accumulators and the early-stopping
 * state. A run restarted under the same checkpoint prefix continues from the newest one and
 * ends with the same bits as a run that was never stopped. */
#ifndef TF_ML_TRAIN_H
#define TF_ML_TRAIN_H

#include "ml/mlp.h"
#include "ml/optim.h"
#include "storage/objstore.h"

#include <stddef.h>
#include <stdint.h>

/* Bytes of decoded train examples (and labels) an unset cache option keeps in memory. */
#define TF_TRAIN_CACHE_MAX ((size_t)1 << 30)

struct tf_train_opts {
	struct tf_objstore *store;        /* where the dataset, checkpoints and bundle live */
	const char *dataset;              /* manifest key of the dataset */
	const char *ckpt_prefix;          /* checkpoint key prefix (NULL: no checkpoints) */
	const char *export_prefix;        /* bundle key prefix (NULL: no export) */
	struct tf_objstore *export_store; /* where the bundle goes (NULL: store) */
	const char *accelerator;          /* slice, e.g. "v4-8" (default) */
	int host_threads;                 /* slice host threads (0: all cores) */
	size_t hidden[TF_MLP_MAX_LAYERS]; /* hidden layer widths */
	int nhidden;                      /* how many */
	int binary;                       /* sigmoid BCE for two-class data */
	uint64_t epochs;                  /* passes over the train split (default 10) */
	size_t batch;                     /* global batch (default 256) */
	struct tf_optim_cfg optim;        /* optimizer (warmup/total/decay steps filled in here) */
	double warmup_epochs;             /* linear warmup length in epochs */
	double decay_epochs;              /* step schedule: decay period in epochs (default 1/3
	                                     of the run) */
	uint64_t seed;                    /* init and data order */
	uint64_t checkpoint_every;        /* steps between checkpoints (0: only at the end) */
	int keep_checkpoints;             /* keep the newest N (0: 3) */
	uint64_t max_steps;               /* stop after this many steps in total (0: epochs) */
	int prefetch;                     /* input batches prepared ahead (0: none) */
	int cache;                        /* cache decoded examples in memory: 1 yes, 0 no,
	                                     -1 when the train split fits (TF_TRAIN_CACHE_MAX) */
	uint64_t log_every;               /* steps between progress lines (0: 50) */
	int patience;                     /* early stopping: epochs without improvement (0: off) */
	const char *monitor;   /* a tf_train_monitors word on the test split (NULL: accuracy) */
	double min_delta;      /* improvement needed to count */
	double diverge_factor; /* loss above factor x the first loss: stop (0: 10) */
	uint64_t halt_after;   /* stop this process after this step (0: never), as if it
	                          were killed: the checkpoint cadence is kept, no final
	                          checkpoint; for resume tests and drills */
	volatile int *cancel;  /* set to nonzero to stop at the next step (may be NULL) */
	void (*progress)(void *data,
	                 const char *json_line); /* JSON progress events (may be NULL) */
	void *progress_data;                     /* passed to progress */
};

/* What early stopping may watch, NULL-terminated: accuracy (the default), loss, auc. */
extern const char *const tf_train_monitors[];

struct tf_train_result {
	uint64_t steps;             /* steps done in total (including before a resume) */
	uint64_t resumed_from;      /* step restored from a checkpoint (0: fresh start) */
	double epochs_done;         /* steps / steps per epoch */
	double train_loss;          /* mean loss of the last (partial) epoch */
	double train_accuracy;      /* its accuracy */
	double loss, accuracy, auc; /* test split, at the end */
	double examples_per_second; /* training throughput in this process (wall) */
	double wall_seconds;        /* training loop wall time in this process */
	double device_seconds;      /* simulated device time (compute + collectives) */
	double utilization;         /* MXU utilization of the device time */
	double input_wait;          /* fraction of the loop's wall time spent waiting for input */
	int early_stopped;          /* 1 when early stopping ended the run */
	int halted;                 /* 1 when halt_after stopped it */
	int64_t checkpoint_step;    /* the newest checkpoint written (-1: none) */
	char checkpoint[512];       /* its key prefix, "" when none */
	char bundle[512];           /* the bundle's key prefix, "" when not exported */
};

/* Fills defaults for zero fields (epochs 10, batch 256, v4-8, sgd 0.1 ...). */
void tf_train_opts_defaults(struct tf_train_opts *o);

/* The words the error of a diverged training carries: they stay in the step's failure reason
 * whichever executor ran it, and orchestrator/alerts.c finds them there (training_diverged). */
#define TF_TRAIN_DIVERGED "training diverged"

/* Trains. Returns 0, or a negative code with err set: -EINVAL bad options, -EBADMSG bad data,
 * -ERANGE the loss became NaN or diverged (err says TF_TRAIN_DIVERGED), -ECANCELED cancelled,
 * -EINTR halted by halt_after, or an object-store code (tf_objstore_retryable tells retryable
 * ones). */
int tf_train_run(const struct tf_train_opts *o, struct tf_train_result *r, char *err,
                 size_t errlen);

/* Evaluation of a model on a slice: loss, accuracy and AUC over n rows; probs (n x
 * tf_mlp_outputs, may be NULL) receives the predictions. Rows are split over the replicas in
 * chunks of the given global batch. */
struct tf_eval_result {
	double loss, accuracy, auc; /* means over the rows */
	size_t n;                   /* rows */
};
void tf_train_evaluate(struct tf_slice_rt *rt, const struct tf_mlp *m, const float *x,
                       const int32_t *y, size_t n, size_t batch, float *probs,
                       struct tf_eval_result *out);

#endif

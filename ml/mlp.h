/* mlp.h — a multi-layer perceptron whose every GEMM runs through the MXU contract.
 *
 * Layers: dense(in -> h1), ReLU, ..., dense(h_last -> out). out = classes with softmax
 * cross-entropy, or 1 with sigmoid binary cross-entropy when the task has two classes and
 * `binary` is set. All parameters live in one flat fp32 buffer (kernels row-major in x out,
 * then biases, layer by layer), so a gradient all-reduce is one buffer and a checkpoint one
 * tensor.
 *
 * Numerics (the "numerics mode" an exported bundle records): GEMM inputs rounded to bf16 with
 * FTZ as the slice's TPU mode, fp32 accumulation in the systolic order with an R x C array;
 * bias, ReLU, softmax and losses in fp32 on the host in a fixed order. A row's outputs depend
 * only on that row, so evaluation on a slice (rows split over replicas) and CPU inference
 * (any batching) give identical bits. */
#ifndef TF_ML_MLP_H
#define TF_ML_MLP_H

#include "accel/mxu.h"
#include "accel/slice.h"

#include <stddef.h>
#include <stdint.h>

#define TF_MLP_MAX_LAYERS 16
/* Bounds on a model's shape, checked before anything is allocated (shapes may come from a
 * file): a layer at most 2^16 wide (inputs and classes included), at most 2^30 parameters
 * (4 GiB of fp32). */
#define TF_MLP_MAX_WIDTH ((size_t)1 << 16)
#define TF_MLP_MAX_PARAMS ((size_t)1 << 30)

struct tf_mlp {
	int nlayers;                        /* dense layers */
	size_t size[TF_MLP_MAX_LAYERS + 1]; /* size[0] = inputs, size[nlayers] = outputs */
	int classes;                        /* label classes */
	int binary;                         /* 1: one sigmoid output, BCE loss */
	size_t nparams;                     /* floats in params */
	size_t w_off[TF_MLP_MAX_LAYERS];    /* kernel offsets in params */
	size_t b_off[TF_MLP_MAX_LAYERS];    /* bias offsets in params */
	float *params;                      /* owned */
};

/* Builds the layout for inputs -> hidden[0..nhidden) -> outputs and allocates zeroed
 * parameters. -EINVAL when a size is 0 or there are too many layers, -E2BIG when a size or
 * the parameter count exceeds the bounds above, -ENOMEM when the parameters cannot be
 * allocated. */
int tf_mlp_init(struct tf_mlp *m, size_t inputs, const size_t *hidden, int nhidden, int classes,
                int binary);
void tf_mlp_release(struct tf_mlp *m);
/* He-normal kernels (std sqrt(2 / fan_in)), zero biases, from a seed (deterministic). */
void tf_mlp_init_params(struct tf_mlp *m, uint64_t seed);

/* Per-replica scratch for a forward/backward pass of up to max_rows rows. */
struct tf_mlp_work {
	size_t max_rows;                   /* capacity */
	float *act[TF_MLP_MAX_LAYERS + 1]; /* act[l]: layer l output (act[0] unused) */
	float *dz[TF_MLP_MAX_LAYERS];      /* dz[l]: gradient wrt layer l's output (pre-ReLU) */
	float *grad;                       /* nparams gradient (this replica's part) */
	double loss_sum;                   /* sum of per-example losses of the last pass */
	size_t correct;                    /* correct predictions of the last pass */
	/* what a deferred pass (tf_mlp_train_pass_deferred) keeps for tf_mlp_grad_range */
	const float *x;                          /* its input rows (borrowed) */
	size_t rows;                             /* how many */
	struct tf_mxu_wpack *dzpack[TF_MLP_MAX_LAYERS]; /* dz[l] packed as op(W) of dW_l */
};

void tf_mlp_work_init(struct tf_mlp_work *w, const struct tf_mlp *m, size_t max_rows);
/* The activations only: enough for tf_mlp_forward (inference), without the gradient
 * buffers a training pass needs. */
void tf_mlp_work_init_forward(struct tf_mlp_work *w, const struct tf_mlp *m, size_t max_rows);
void tf_mlp_work_release(struct tf_mlp_work *w);

/* The layer weights packed for the MXU (tf_mxu_wpack) once per weight update and shared by
 * every replica: fwd[l] is W_l for the forward pass, bwd[l] is W_l^T for dA = dZ . W_l^T
 * (layers 1 and up). Read-only while passes run. */
struct tf_mlp_packs {
	struct tf_mxu_wpack *fwd[TF_MLP_MAX_LAYERS];
	struct tf_mxu_wpack *bwd[TF_MLP_MAX_LAYERS];
};

/* Packs m's current weights for GEMMs under cfg (allocating the packs on first use); call
 * again after every change of m->params. The packs borrow m->params. */
void tf_mlp_packs_update(struct tf_mlp_packs *p, const struct tf_mlp *m,
                         const struct tf_mxu_cfg *cfg);
/* The forward packs only (inference: bwd stays empty). */
void tf_mlp_packs_forward(struct tf_mlp_packs *p, const struct tf_mlp *m,
                          const struct tf_mxu_cfg *cfg);
void tf_mlp_packs_release(struct tf_mlp_packs *p);

/* The GEMM a pass uses: the slice replica's (counts device cycles) or a plain MXU config. */
struct tf_mlp_gemm {
	struct tf_slice_replica *replica;  /* non-NULL: tf_slice_gemm on this replica */
	const struct tf_mxu_cfg *cfg;      /* else: tf_mxu_gemm with this configuration */
	const struct tf_mlp_packs *packs;  /* NULL, or the model's weights packed (same bits) */
};

/* Forward pass of rows x[0..n) (n x size[0]); logits land in w->act[nlayers]. */
void tf_mlp_forward(const struct tf_mlp *m, const struct tf_mlp_gemm *g, struct tf_mlp_work *w,
                    const float *x, size_t n);

/* Forward + loss + backward of n rows with labels y; the loss gradient is scaled by
 * 1/scale_rows (the global batch), so summing replica gradients gives the batch mean.
 * w->grad receives this replica's gradient; w->loss_sum / w->correct its loss and hits. */
void tf_mlp_train_pass(const struct tf_mlp *m, const struct tf_mlp_gemm *g, struct tf_mlp_work *w,
                       const float *x, const int32_t *y, size_t n, size_t scale_rows);

/* tf_mlp_train_pass on a slice replica (g->replica set) with the weight-gradient GEMMs
 * dW_l = A_l^T . dZ_l left for tf_mlp_grad_range: w->grad receives the bias gradients only;
 * the pass keeps every dZ_l (packed for those GEMMs) and borrows x until then, and counts the
 * GEMMs against the replica as if it had run them. */
void tf_mlp_train_pass_deferred(const struct tf_mlp *m, const struct tf_mlp_gemm *g,
                                struct tf_mlp_work *w, const float *x, const int32_t *y, size_t n,
                                size_t scale_rows);

/* Elements [lo, hi) of the gradient of w's last deferred pass, written to out[0 .. hi - lo):
 * the weight gradients' GEMMs run now under cfg (the replica's, tf_slice_mxu_cfg), only for
 * those elements, with the same bits tf_mlp_train_pass writes; the bias gradients are read
 * from w->grad; zeros for a pass of no rows. Safe to call concurrently (disjoint out). */
void tf_mlp_grad_range(const struct tf_mlp *m, const struct tf_mxu_cfg *cfg,
                       const struct tf_mlp_work *w, size_t lo, size_t hi, float *out);

/* Probabilities from logits, row by row (softmax, or sigmoid for binary models, giving the
 * positive class probability). out may alias logits. The one function every path uses. */
void tf_mlp_probs(const struct tf_mlp *m, const float *logits, size_t n, float *out);
/* Width of tf_mlp_probs' rows: classes, or 1 for binary models. */
size_t tf_mlp_outputs(const struct tf_mlp *m);

/* Per-example loss from logits (fp64 accumulation of fp32 terms) and whether it is right. */
double tf_mlp_loss(const struct tf_mlp *m, const float *logits, int32_t y, int *correct);

#endif

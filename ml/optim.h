/* optim.h — optimizers and learning-rate schedules for the flat parameter buffer of an MLP.
 *
 *   sgd   v = momentum v + (g + wd w);  w -= lr v                 (wd on kernels only)
 *   adam  m, v moments with bias correction; w -= lr (mhat / (sqrt(vhat) + eps) + wd w)
 *         (decoupled weight decay, i.e. AdamW, when wd > 0)
 *   lars  per kernel: g += wd w; trust = eta |w| / |g| (1 if either is 0);
 *         v = momentum v + lr trust g; w -= v.  Biases: v = momentum v + lr g
 *         (You, Gitman, Ginsburg 2017, https://arxiv.org/abs/1708.03888)
 * Schedule: linear warmup over warmup_steps to the base rate, then constant, cosine to zero at
 * total_steps, or step decay (x gamma every decay_steps). Linear scaling (Goyal et al. 2017):
 * base = lr * global_batch / 256. Gradient clipping scales g so its global L2 norm is at most
 * clip_norm. Every reduction runs in a fixed order in double, so updates are reproducible. */
#ifndef TF_ML_OPTIM_H
#define TF_ML_OPTIM_H

#include "ml/mlp.h"

#include <stddef.h>
#include <stdint.h>

enum tf_optim_kind { TF_OPT_SGD, TF_OPT_ADAM, TF_OPT_LARS, TF_OPT_LAST };
enum tf_lr_schedule { TF_LR_CONSTANT, TF_LR_COSINE, TF_LR_STEP, TF_LR_LAST };

struct tf_optim_cfg {
	enum tf_optim_kind kind;      /* algorithm */
	double lr;                    /* base learning rate (before linear scaling) */
	double momentum;              /* sgd/lars momentum (default 0.9) */
	double beta1, beta2, eps;     /* adam (0.9, 0.999, 1e-8) */
	double weight_decay;          /* see above */
	double lars_eta;              /* lars trust coefficient (0.001) */
	double clip_norm;             /* 0: no clipping */
	enum tf_lr_schedule schedule; /* after warmup */
	uint64_t warmup_steps;        /* linear warmup length */
	uint64_t total_steps;         /* cosine horizon */
	uint64_t decay_steps;         /* step decay period */
	double gamma;                 /* step decay factor (0.1) */
	int linear_scaling;           /* multiply lr by global_batch / 256 */
	size_t global_batch;          /* for linear scaling */
};

/* Optimizer state: moment buffers the size of the parameters. */
struct tf_optim {
	struct tf_optim_cfg cfg; /* configuration (copied) */
	size_t n;                /* parameters */
	float *m;                /* momentum / first moment (owned) */
	float *v;                /* adam second moment (owned, NULL otherwise) */
	uint64_t t;              /* updates applied */
};

/* Fills defaults for fields left 0 (momentum 0.9, betas, eps, eta, gamma). */
void tf_optim_cfg_defaults(struct tf_optim_cfg *c);
const char *tf_optim_kind_name(enum tf_optim_kind k);
int tf_optim_kind_parse(const char *s, enum tf_optim_kind *out);   /* a tf_optim_names word */
int tf_lr_schedule_parse(const char *s, enum tf_lr_schedule *out); /* a tf_lr_schedule_names word */
/* The words the parsers take, NULL-terminated: what the pipeline schema and the CLI offer
 * (adamw is Adam with decoupled weight decay). */
extern const char *const tf_optim_names[];       /* sgd, adam, adamw, lars */
extern const char *const tf_lr_schedule_names[]; /* constant, cosine, step */

void tf_optim_init(struct tf_optim *o, const struct tf_optim_cfg *cfg, size_t nparams);
void tf_optim_release(struct tf_optim *o);

/* The learning rate of update number `step` (0-based). */
double tf_optim_lr(const struct tf_optim_cfg *c, uint64_t step);

/* Applies one update to m->params from gradient g (modified: clipping, weight decay).
 * Returns the gradient's global L2 norm before clipping (NaN when the gradient has one). */
double tf_optim_step(struct tf_optim *o, struct tf_mlp *m, float *g);

#endif

/* optim.c — SGD-momentum, Adam(W), LARS and learning-rate schedules (see optim.h). */
#include "ml/optim.h"

#include "common/common.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *kind_names[TF_OPT_LAST] = {"sgd", "adam", "lars"};
const char *const tf_optim_names[] = {"sgd", "adam", "adamw", "lars", NULL};
const char *const tf_lr_schedule_names[TF_LR_LAST + 1] = {"constant", "cosine", "step", NULL};

const char *tf_optim_kind_name(enum tf_optim_kind k)
{
	return k < TF_OPT_LAST ? kind_names[k] : "?";
}

int tf_optim_kind_parse(const char *s, enum tf_optim_kind *out)
{
	if (!strcmp(s, "adamw")) {
		*out = TF_OPT_ADAM;
		return 0;
	}
	for (int i = 0; i < TF_OPT_LAST; i++)
		if (!strcmp(s, kind_names[i])) {
			*out = (enum tf_optim_kind)i;
			return 0;
		}
	return -EINVAL;
}

int tf_lr_schedule_parse(const char *s, enum tf_lr_schedule *out)
{
	for (int i = 0; i < TF_LR_LAST; i++)
		if (!strcmp(s, tf_lr_schedule_names[i])) {
			*out = (enum tf_lr_schedule)i;
			return 0;
		}
	return -EINVAL;
}

void tf_optim_cfg_defaults(struct tf_optim_cfg *c)
{
	if (c->momentum <= 0 && c->kind != TF_OPT_ADAM)
		c->momentum = 0.9;
	if (c->beta1 <= 0)
		c->beta1 = 0.9;
	if (c->beta2 <= 0)
		c->beta2 = 0.999;
	if (c->eps <= 0)
		c->eps = 1e-8;
	if (c->lars_eta <= 0)
		c->lars_eta = 0.001;
	if (c->gamma <= 0)
		c->gamma = 0.1;
	if (c->lr <= 0)
		c->lr = c->kind == TF_OPT_ADAM ? 1e-3 : 0.1;
}

void tf_optim_init(struct tf_optim *o, const struct tf_optim_cfg *cfg, size_t nparams)
{
	memset(o, 0, sizeof *o);
	o->cfg = *cfg;
	o->n = nparams;
	o->m = tf_xcalloc(nparams, sizeof(float));
	if (cfg->kind == TF_OPT_ADAM)
		o->v = tf_xcalloc(nparams, sizeof(float));
}

void tf_optim_release(struct tf_optim *o)
{
	if (!o)
		return;
	free(o->m);
	free(o->v);
	o->m = o->v = NULL;
}

double tf_optim_lr(const struct tf_optim_cfg *c, uint64_t step)
{
	double base = c->lr;
	if (c->linear_scaling && c->global_batch)
		base *= (double)c->global_batch / 256.0;
	if (step < c->warmup_steps)
		return base * (double)(step + 1) / (double)c->warmup_steps;
	uint64_t t = step - c->warmup_steps;
	switch (c->schedule) {
	case TF_LR_COSINE: {
		uint64_t span =
		    c->total_steps > c->warmup_steps ? c->total_steps - c->warmup_steps : 1;
		double p = (double)t / (double)span;
		if (p > 1)
			p = 1;
		return base * 0.5 * (1.0 + cos(M_PI * p));
	}
	case TF_LR_STEP:
		return c->decay_steps ? base * pow(c->gamma, (double)(t / c->decay_steps)) : base;
	default:
		return base;
	}
}

/* Sum of squares in double with four interleaved partial sums (a fixed order, so the result
 * is reproducible, and four independent chains, so it is not latency-bound). */
static double sumsq(const float *p, size_t n)
{
	double s[4] = {0, 0, 0, 0};
	size_t i = 0;
	for (; i + 4 <= n; i += 4)
		for (int k = 0; k < 4; k++)
			s[k] += (double)p[i + k] * p[i + k];
	for (; i < n; i++)
		s[0] += (double)p[i] * p[i];
	return (s[0] + s[1]) + (s[2] + s[3]);
}

double tf_optim_step(struct tf_optim *o, struct tf_mlp *m, float *g)
{
	const struct tf_optim_cfg *c = &o->cfg;
	float *w = m->params;
	double norm = sqrt(sumsq(g, o->n));
	if (!isfinite(norm))
		return NAN;
	if (c->clip_norm > 0 && norm > c->clip_norm) {
		float s = (float)(c->clip_norm / norm);
		for (size_t i = 0; i < o->n; i++)
			g[i] *= s;
	}
	const float lr = (float)tf_optim_lr(c, o->t), mom = (float)c->momentum;
	const float wd = (float)c->weight_decay;
	o->t++;
	for (int l = 0; l < m->nlayers; l++) {
		/* two segments per layer: the kernel (decayed, LARS-scaled) and the bias */
		for (int seg = 0; seg < 2; seg++) {
			size_t off = seg ? m->b_off[l] : m->w_off[l];
			size_t len = seg ? m->size[l + 1] : m->size[l] * m->size[l + 1];
			int kernel = !seg;
			float *pw = w + off, *pg = g + off, *pm = o->m + off;
			switch (c->kind) {
			case TF_OPT_SGD:
				if (kernel && wd != 0.0f)
					for (size_t i = 0; i < len; i++)
						pg[i] += wd * pw[i];
				for (size_t i = 0; i < len; i++) {
					pm[i] = mom * pm[i] + pg[i];
					pw[i] -= lr * pm[i];
				}
				break;
			case TF_OPT_ADAM: {
				float *pv = o->v + off;
				const float b1 = (float)c->beta1, b2 = (float)c->beta2;
				const float eps = (float)c->eps;
				const float c1 = (float)(1.0 - pow(c->beta1, (double)o->t));
				const float c2 = (float)(1.0 - pow(c->beta2, (double)o->t));
				for (size_t i = 0; i < len; i++) {
					pm[i] = b1 * pm[i] + (1.0f - b1) * pg[i];
					pv[i] = b2 * pv[i] + (1.0f - b2) * pg[i] * pg[i];
					float mh = pm[i] / c1, vh = pv[i] / c2;
					float upd = mh / (sqrtf(vh) + eps);
					if (kernel && wd != 0.0f)
						upd += wd * pw[i];
					pw[i] -= lr * upd;
				}
				break;
			}
			case TF_OPT_LARS: {
				float trust = 1.0f;
				if (kernel) {
					if (wd != 0.0f)
						for (size_t i = 0; i < len; i++)
							pg[i] += wd * pw[i];
					double wn = sqrt(sumsq(pw, len)), gn = sqrt(sumsq(pg, len));
					if (wn > 0 && gn > 0)
						trust = (float)(c->lars_eta * wn / gn);
				}
				const float step = lr * trust;
				for (size_t i = 0; i < len; i++) {
					pm[i] = mom * pm[i] + step * pg[i];
					pw[i] -= pm[i];
				}
				break;
			}
			default:
				break;
			}
		}
	}
	return norm;
}

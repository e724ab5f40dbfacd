/* train.c — the training loop on an emulated slice, evaluation, checkpoints and export
 * (see train.h). */
#define TF_LOG_TAG "train"
#include "ml/train.h"

#include "accel/slice.h"
#include "accel/tpu.h"
#include "common/common.h"
#include "common/log.h"
#include "ml/bundle.h"
#include "ml/dataset.h"
#include "ml/input.h"
#include "ml/metrics.h"
#include "storage/ckpt.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EVAL_BATCH 1024

void tf_train_opts_defaults(struct tf_train_opts *o)
{
	if (!o->accelerator || !*o->accelerator)
		o->accelerator = "v4-8";
	if (!o->epochs)
		o->epochs = 10;
	if (!o->batch)
		o->batch = 256;
	if (!o->nhidden && !o->hidden[0]) {
		o->hidden[0] = 256;
		o->hidden[1] = 128;
		o->nhidden = 2;
	}
	if (!o->log_every)
		o->log_every = 50;
	if (!o->keep_checkpoints)
		o->keep_checkpoints = 3;
	if (!o->monitor || !*o->monitor)
		o->monitor = "accuracy";
	if (o->diverge_factor <= 0)
		o->diverge_factor = 10;
	tf_optim_cfg_defaults(&o->optim);
}

/* ---- the replica programs ---- */

struct step_ctx {
	const struct tf_mlp *m;   /* model (weights read-only during a run) */
	const struct tf_mlp_packs *packs; /* its weights packed for this run's GEMMs */
	struct tf_mlp_work *work; /* per replica */
	const float *x;           /* global batch inputs */
	const int32_t *y;         /* labels (train) */
	size_t n;                 /* rows in the global batch */
	float *probs;             /* eval: output probabilities (n x outputs) or NULL */
	int defer;                /* train: weight gradients made by grad_gen */
	struct tf_mxu_cfg gen_cfg; /* grad_gen's GEMMs: the replicas', on one host thread each */
};

static void replica_train(struct tf_slice_replica *r, void *arg)
{
	struct step_ctx *c = arg;
	size_t lo, hi;
	tf_input_replica_rows(c->n, r->replicas, r->index, &lo, &hi);
	struct tf_mlp_gemm g = {.replica = r, .packs = c->packs};
	(c->defer ? tf_mlp_train_pass_deferred : tf_mlp_train_pass)(
	    c->m, &g, &c->work[r->index], c->x + lo * c->m->size[0], c->y + lo, hi - lo, c->n);
}

/* tf_slice_allreduce_gen's generator: a replica's gradient, one block at a time. */
static void grad_gen(int replica, size_t lo, size_t hi, float *out, void *arg)
{
	struct step_ctx *c = arg;
	tf_mlp_grad_range(c->m, &c->gen_cfg, &c->work[replica], lo, hi, out);
}

static void replica_eval(struct tf_slice_replica *r, void *arg)
{
	struct step_ctx *c = arg;
	size_t start, count, C = tf_mlp_outputs(c->m);
	tf_slice_shard(c->n, r->replicas, r->index, &start, &count);
	struct tf_mlp_work *w = &c->work[r->index];
	struct tf_mlp_gemm g = {.replica = r, .packs = c->packs};
	w->loss_sum = 0;
	w->correct = 0;
	if (!count)
		return;
	tf_mlp_forward(c->m, &g, w, c->x + start * c->m->size[0], count);
	const float *z = w->act[c->m->nlayers];
	for (size_t i = 0; i < count; i++) {
		int ok;
		w->loss_sum += tf_mlp_loss(c->m, z + i * C, c->y[start + i], &ok);
		w->correct += (size_t)ok;
	}
	tf_mlp_probs(c->m, z, count, c->probs + start * C);
}

void tf_train_evaluate(struct tf_slice_rt *rt, const struct tf_mlp *m, const float *x,
                       const int32_t *y, size_t n, size_t batch, float *probs,
                       struct tf_eval_result *out)
{
	int R = tf_slice_rt_replicas(rt);
	size_t C = tf_mlp_outputs(m), per = (batch + (size_t)R - 1) / (size_t)R;
	struct tf_mlp_work *work = tf_xcalloc((size_t)R, sizeof *work);
	float *p = probs ? probs : tf_xmalloc(n * C * sizeof(float) + 4);
	double loss = 0;
	size_t correct = 0;
	struct tf_mlp_packs packs = {0};
	struct tf_mxu_cfg cfg;
	tf_slice_mxu_cfg(rt, &cfg);
	tf_mlp_packs_update(&packs, m, &cfg);
	for (int r = 0; r < R; r++)
		tf_mlp_work_init(&work[r], m, per);
	for (size_t i = 0; i < n; i += batch) {
		struct step_ctx c = {.m = m,
		                     .packs = &packs,
		                     .work = work,
		                     .x = x + i * m->size[0],
		                     .y = y + i,
		                     .n = n - i < batch ? n - i : batch,
		                     .probs = p + i * C};
		tf_slice_run(rt, replica_eval, &c);
		for (int r = 0; r < R; r++) {
			loss += work[r].loss_sum;
			correct += work[r].correct;
		}
	}
	out->n = n;
	out->loss = n ? loss / (double)n : NAN;
	out->accuracy = n ? (double)correct / (double)n : NAN;
	out->auc = tf_metrics_auc(p, n, C, y);
	for (int r = 0; r < R; r++)
		tf_mlp_work_release(&work[r]);
	free(work);
	tf_mlp_packs_release(&packs);
	if (!probs)
		free(p);
}

/* ---- progress events ---- */

static void emit(const struct tf_train_opts *o, json_t *ev)
{
	if (o->progress) {
		char *line = json_dumps(ev, JSON_COMPACT);
		o->progress(o->progress_data, line);
		free(line);
	}
	json_decref(ev);
}

/* ---- checkpoints ---- */

struct run_state {
	uint64_t step;      /* steps done == next input batch */
	double ep_loss;     /* loss sum of the current epoch so far */
	double ep_correct;  /* correct predictions so far */
	double ep_examples; /* examples so far */
	double best;        /* early stopping: best monitored value */
	int bad_epochs;     /* epochs without improvement */
	int have_best;      /* best is set */
};

static char *meta_json(const struct tf_train_opts *o, const struct tf_mlp *m,
                       const struct tf_optim *opt, const struct run_state *st, uint64_t spe)
{
	json_t *layers = json_array();
	for (int l = 0; l <= m->nlayers; l++)
		json_array_append_new(layers, json_integer((json_int_t)m->size[l]));
	json_t *j = json_pack(
	    "{s:I, s:f, s:o, s:I, s:{s:s, s:I}, s:{s:I, s:I, s:I}, s:{s:f, s:f, s:f}, "
	    "s:{s:b, s:f, s:i}, s:s}",
	    "step", (json_int_t)st->step, "epoch", (double)st->step / (double)spe, "layers", layers,
	    "nparams", (json_int_t)m->nparams, "optimizer", "kind",
	    tf_optim_kind_name(opt->cfg.kind), "t", (json_int_t)opt->t, "input", "next_batch",
	    (json_int_t)st->step, "seed", (json_int_t)o->seed, "batch", (json_int_t)o->batch,
	    "epoch_acc", "loss_sum", st->ep_loss, "correct", st->ep_correct, "examples",
	    st->ep_examples, "early", "have_best", st->have_best, "best", st->best, "bad_epochs",
	    st->bad_epochs, "dataset", o->dataset);
	char *s = json_dumps(j, JSON_COMPACT);
	json_decref(j);
	return s;
}

static int save_ckpt(const struct tf_train_opts *o, const struct tf_mlp *m,
                     const struct tf_optim *opt, const struct run_state *st, uint64_t spe,
                     struct tf_train_result *r, char *err, size_t errlen)
{
	struct tf_ckpt_tensor t[3] = {
	    {"params", m->params, m->nparams * sizeof(float)},
	    {"opt/m", opt->m, opt->n * sizeof(float)},
	    {"opt/v", opt->v, opt->n * sizeof(float)},
	};
	char *meta = meta_json(o, m, opt, st, spe);
	int rc = tf_ckpt_save(o->store, o->ckpt_prefix, (int64_t)st->step, t, opt->v ? 3 : 2, meta);
	free(meta);
	if (rc == -EEXIST)
		rc = 0; /* an earlier attempt saved this very step: same bits */
	if (rc) {
		tf_errf(err, errlen, "checkpoint at step %llu under '%s' failed: %s",
		        (unsigned long long)st->step, o->ckpt_prefix, tf_objstore_errmsg(o->store));
		return rc;
	}
	r->checkpoint_step = (int64_t)st->step;
	snprintf(r->checkpoint, sizeof r->checkpoint, "%s%sstep-%012lld/", o->ckpt_prefix,
	         o->ckpt_prefix[0] && o->ckpt_prefix[strlen(o->ckpt_prefix) - 1] != '/' ? "/" : "",
	         (long long)st->step);
	struct tf_ckpt_gc_opts gc = {.keep_last = o->keep_checkpoints};
	tf_ckpt_gc(o->store, o->ckpt_prefix, &gc, NULL);
	return 0;
}

static json_t *get2(json_t *o, const char *a, const char *b)
{
	return json_object_get(json_object_get(o, a), b);
}

/* A checkpoint that failed verification on resume: a progress event (shown live and kept in
 * the attempt's log) besides the warning in the log. */
static void on_ckpt_skipped(void *data, int64_t step, const char *why)
{
	emit(data, json_pack("{s:s, s:I, s:s}", "event", "checkpoint_skipped", "step",
	                     (json_int_t)step, "reason", why));
}

static int restore_ckpt(const struct tf_train_opts *o, struct tf_mlp *m, struct tf_optim *opt,
                        struct run_state *st, char *err, size_t errlen)
{
	struct tf_ckpt *c = NULL;
	json_t *meta = NULL;
	/* a damaged newest checkpoint is passed over for the newest one that verifies */
	int rc = tf_ckpt_load_latest(o->store, o->ckpt_prefix, &c, on_ckpt_skipped, (void *)o);
	if (rc == -ENOENT)
		return 1; /* nothing to resume */
	if (rc) {
		tf_errf(err, errlen, "cannot load a checkpoint under '%s': %s", o->ckpt_prefix,
		        tf_objstore_errmsg(o->store));
		return rc;
	}
	int64_t step = tf_ckpt_step(c);
	size_t pb, mb, vb;
	const void *p = tf_ckpt_tensor(c, "params", &pb), *mm = tf_ckpt_tensor(c, "opt/m", &mb);
	const void *vv = tf_ckpt_tensor(c, "opt/v", &vb);
	meta = json_loads(tf_ckpt_meta(c), 0, NULL);
	rc = -EBADMSG;
	if (!p || !mm || pb != m->nparams * sizeof(float) || mb != pb || !meta ||
	    (opt->v && (!vv || vb != pb)) ||
	    strcmp(json_string_value(get2(meta, "optimizer", "kind")) ?: "",
	           tf_optim_kind_name(opt->cfg.kind))) {
		tf_errf(err, errlen,
		        "checkpoint step %lld under '%s' does not match this model "
		        "and optimizer (layers, optimizer kind); use another checkpoint prefix",
		        (long long)step, o->ckpt_prefix);
		goto out;
	}
	memcpy(m->params, p, pb);
	memcpy(opt->m, mm, mb);
	if (opt->v)
		memcpy(opt->v, vv, vb);
	opt->t = (uint64_t)json_integer_value(get2(meta, "optimizer", "t"));
	st->step = (uint64_t)step;
	json_t *acc = json_object_get(meta, "epoch_acc"), *early = json_object_get(meta, "early");
	st->ep_loss = json_number_value(json_object_get(acc, "loss_sum"));
	st->ep_correct = json_number_value(json_object_get(acc, "correct"));
	st->ep_examples = json_number_value(json_object_get(acc, "examples"));
	st->have_best = json_is_true(json_object_get(early, "have_best"));
	st->best = json_number_value(json_object_get(early, "best"));
	st->bad_epochs = (int)json_integer_value(json_object_get(early, "bad_epochs"));
	rc = 0;
out:
	json_decref(meta);
	tf_ckpt_free(c);
	return rc;
}

/* ---- the loop ---- */

const char *const tf_train_monitors[] = {"accuracy", "loss", "auc", NULL};

static double monitored(const char *what, const struct tf_eval_result *e)
{
	if (!strcmp(what, "loss"))
		return -e->loss; /* larger is better */
	if (!strcmp(what, "auc"))
		return e->auc;
	return e->accuracy;
}

int tf_train_run(const struct tf_train_opts *oin, struct tf_train_result *r, char *err,
                 size_t errlen)
{
	struct tf_train_opts o = *oin;
	struct tf_dataset *d = NULL;
	struct tf_tpu_slice slice;
	struct tf_slice_rt *rt = NULL;
	struct tf_mlp m = {0};
	struct tf_optim opt = {0};
	struct tf_input *in = NULL;
	struct tf_mlp_work *work = NULL;
	struct tf_mlp_packs packs = {0};
	struct tf_mxu_cfg mxu_cfg;
	float *gsum = NULL, *tx = NULL;
	int32_t *ty = NULL;
	size_t tn = 0;
	int R = 0, rc;
	struct run_state st = {0};
	struct tf_eval_result ev = {.loss = NAN, .accuracy = NAN, .auc = NAN};

	tf_train_opts_defaults(&o);
	memset(r, 0, sizeof *r);
	r->checkpoint_step = -1;
	r->loss = r->accuracy = r->auc = NAN;
	if (!o.store || !o.dataset) {
		tf_errf(err, errlen, "training needs a store and a dataset manifest key");
		return -EINVAL;
	}
	if ((rc = tf_tpu_slice_parse(o.accelerator, &slice, err, errlen)))
		return rc;
	if ((rc = tf_dataset_open(o.store, o.dataset, &d, err, errlen)))
		goto out;
	if (o.cache < 0) {
		/* unset: keep the decoded examples when they fit, so later epochs skip the
		 * shard reads and the decoding (the batches are the same either way) */
		size_t per = (d->pre.image ? d->dim : d->dim * sizeof(float)) + sizeof(int32_t) + 1;
		o.cache = d->split[TF_SPLIT_TRAIN].examples <= TF_TRAIN_CACHE_MAX / per;
	}
	if (o.binary && d->num_classes != 2) {
		tf_errf(err, errlen,
		        "binary (sigmoid) loss needs two classes; dataset '%s' has "
		        "%d",
		        o.dataset, d->num_classes);
		rc = -EINVAL;
		goto out;
	}
	if ((rc = tf_mlp_init(&m, d->dim, o.hidden, o.nhidden, d->num_classes, o.binary))) {
		tf_errf(err, errlen,
		        "bad model shape: at most %d hidden layers, each 1..%zu wide, at most %zu "
		        "parameters in all",
		        TF_MLP_MAX_LAYERS - 1, TF_MLP_MAX_WIDTH, TF_MLP_MAX_PARAMS);
		if (rc != -ENOMEM)
			rc = -EINVAL;
		goto out;
	}
	tf_mlp_init_params(&m, o.seed);
	R = slice.cores;
	if (o.batch < (size_t)R) {
		tf_errf(err, errlen,
		        "global batch %zu is smaller than the %d replicas of '%s'; use "
		        "a batch of at least %d",
		        o.batch, R, slice.name, R);
		rc = -EINVAL;
		goto out;
	}
	size_t per = (o.batch + (size_t)R - 1) / (size_t)R;
	double hbm = (double)m.nparams * 4 * 4 /* weights, grads, two moments */ +
	             (double)per * 4 * (double)(m.size[0] + 4 * 512);
	if ((rc = tf_slice_check_hbm(&slice, hbm, err, errlen)))
		goto out;
	if ((rc = tf_slice_rt_new(&slice, o.host_threads, 1, &rt))) {
		tf_errf(err, errlen, "cannot start the slice runtime for '%s'", slice.name);
		goto out;
	}

	struct tf_input_opts io = {.split = TF_SPLIT_TRAIN,
	                           .batch = o.batch,
	                           .seed = o.seed,
	                           .shuffle = 1,
	                           .drop_remainder = 1,
	                           .prefetch = o.prefetch,
	                           .cache = o.cache,
	                           .epochs = o.epochs};
	/* steps per epoch, known before the pipeline starts (it starts at the resume point) */
	uint64_t spe = d->split[TF_SPLIT_TRAIN].examples / o.batch;
	if (spe == 0) {
		tf_errf(err, errlen, "global batch %zu is larger than the %zu train examples",
		        o.batch, d->split[TF_SPLIT_TRAIN].examples);
		rc = -EINVAL;
		goto out;
	}
	uint64_t total = o.epochs * spe;
	if (o.max_steps && o.max_steps < total)
		total = o.max_steps;
	o.optim.global_batch = o.batch;
	o.optim.total_steps = total;
	o.optim.warmup_steps = (uint64_t)(o.warmup_epochs * (double)spe + 0.5);
	if (o.optim.schedule == TF_LR_STEP && !o.optim.decay_steps)
		o.optim.decay_steps =
		    o.decay_epochs > 0 ? (uint64_t)(o.decay_epochs * (double)spe) : (total + 2) / 3;
	tf_optim_init(&opt, &o.optim, m.nparams);

	if (o.ckpt_prefix) {
		rc = restore_ckpt(&o, &m, &opt, &st, err, errlen);
		if (rc < 0)
			goto out;
		if (rc == 0) {
			r->resumed_from = st.step;
			tf_info("resuming from step %llu", (unsigned long long)st.step);
			emit(&o, json_pack("{s:s, s:I}", "event", "resume", "step",
			                   (json_int_t)st.step));
		}
		rc = 0;
	}
	io.start_batch = st.step;
	if ((rc = tf_input_open(o.store, d, &io, &in, err, errlen)))
		goto out;
	if ((rc = tf_input_load_split(o.store, d, TF_SPLIT_TEST, &tx, &ty, NULL, &tn, o.cancel,
	                              err, errlen)))
		goto out;

	tf_slice_mxu_cfg(rt, &mxu_cfg);
	work = tf_xcalloc((size_t)R, sizeof *work);
	for (int i = 0; i < R; i++)
		tf_mlp_work_init(&work[i], &m, per);
	/* With several replicas the weight gradients are made block by block inside the
	 * all-reduce (tf_slice_allreduce_gen), each block summed while in cache, instead of
	 * eight whole gradients written and read back; the sum goes to gsum. One replica has
	 * nothing to sum: its gradient is the sum. */
	struct tf_mxu_cfg gen_cfg = mxu_cfg;
	gen_cfg.threads = 1; /* the all-reduce's blocks run on the slice's host threads */
	if (R > 1)
		gsum = tf_xmalloc(m.nparams * sizeof *gsum);
	emit(&o,
	     json_pack("{s:s, s:s, s:i, s:I, s:I, s:I, s:I, s:s}", "event", "start", "accelerator",
	               slice.name, "replicas", R, "steps_per_epoch", (json_int_t)spe, "total_steps",
	               (json_int_t)total, "start_step", (json_int_t)st.step, "params",
	               (json_int_t)m.nparams, "optimizer", tf_optim_kind_name(opt.cfg.kind)));

	double t0 = tf_now_monotonic(), first_loss = NAN;
	uint64_t steps_here = 0, ex_here = 0;
	tf_slice_stats_reset(rt);
	while (st.step < total) {
		if (o.cancel && *o.cancel) {
			/* between steps the state is whole: keep it, so a preempted or
			 * interrupted attempt resumes here, bit-identical */
			int keep = o.ckpt_prefix && st.step > r->resumed_from &&
			           (int64_t)st.step != r->checkpoint_step;
			if (keep && (rc = save_ckpt(&o, &m, &opt, &st, spe, r, err, errlen)))
				goto out;
			tf_errf(err, errlen, "training cancelled at step %llu%s",
			        (unsigned long long)st.step,
			        keep || (int64_t)st.step == r->checkpoint_step
			            ? " (checkpoint written there)"
			            : "");
			rc = -ECANCELED;
			goto out;
		}
		struct tf_batch b;
		rc = tf_input_next(in, &b, err, errlen);
		if (rc == 1) {
			rc = 0;
			break;
		}
		if (rc)
			goto out;
		/* the weights changed with the last update: pack them once for all replicas */
		tf_mlp_packs_update(&packs, &m, &mxu_cfg);
		struct step_ctx c = {.m = &m,
		                     .packs = &packs,
		                     .work = work,
		                     .x = b.x,
		                     .y = b.y,
		                     .n = b.n,
		                     .defer = R > 1,
		                     .gen_cfg = gen_cfg};
		tf_slice_run(rt, replica_train, &c);
		float *grad = R > 1 ? gsum : work[0].grad;
		if (R > 1)
			tf_slice_allreduce_gen(rt, m.nparams, grad_gen, &c, gsum);
		else
			tf_slice_allreduce_first(rt, &grad, m.nparams); /* device time only */
		double loss = 0, correct = 0;
		for (int i = 0; i < R; i++) {
			loss += work[i].loss_sum;
			correct += (double)work[i].correct;
		}
		double mean = loss / (double)b.n;
		if (isnan(first_loss))
			first_loss = mean;
		double gnorm = tf_optim_step(&opt, &m, grad);
		if (!isfinite(mean) || isnan(gnorm) || mean > o.diverge_factor * first_loss + 1.0) {
			tf_errf(
			    err, errlen,
			    "loss %s at step %llu (epoch %llu; first loss %.4f): " TF_TRAIN_DIVERGED
			    "; lower the learning rate (now %g) or enable gradient clipping (clip_norm)",
			    isfinite(mean) ? "exploded" : "is NaN", (unsigned long long)st.step,
			    (unsigned long long)b.epoch, first_loss, o.optim.lr);
			emit(&o,
			     json_pack("{s:s, s:I, s:f}", "event", "diverged", "step",
			               (json_int_t)st.step, "loss", isfinite(mean) ? mean : -1.0));
			rc = -ERANGE;
			goto out;
		}
		st.step++;
		steps_here++;
		ex_here += b.n;
		st.ep_loss += loss;
		st.ep_correct += correct;
		st.ep_examples += (double)b.n;
		int epoch_end = st.step % spe == 0 || st.step == total;
		double now = tf_now_monotonic();
		if (st.step % o.log_every == 0 && !epoch_end) {
			double eps = (double)ex_here / (now - t0);
			double eta = (double)(total - st.step) * (now - t0) / (double)steps_here;
			emit(&o,
			     json_pack("{s:s, s:I, s:f, s:I, s:I, s:f, s:f, s:f, s:f, s:f}",
			               "event", "step", "step", (json_int_t)st.step, "epoch",
			               (double)st.step / (double)spe, "epochs",
			               (json_int_t)o.epochs, "total_steps", (json_int_t)total,
			               "loss", st.ep_loss / st.ep_examples, "accuracy",
			               st.ep_correct / st.ep_examples, "examples_per_second", eps,
			               "eta_seconds", eta, "lr", tf_optim_lr(&opt.cfg, st.step)));
		}
		int stop_early = 0;
		if (epoch_end) {
			tf_train_evaluate(rt, &m, tx, ty, tn, EVAL_BATCH, NULL, &ev);
			r->train_loss = st.ep_loss / st.ep_examples;
			r->train_accuracy = st.ep_correct / st.ep_examples;
			struct tf_slice_stats ss;
			tf_slice_stats(rt, &ss);
			double wall = now - t0;
			emit(&o,
			     json_pack(
			         "{s:s, s:I, s:f, s:I, s:f, s:f, s:f, s:f, s:f, s:f, s:f, "
			         "s:f, s:f, s:f}",
			         "event", "epoch", "step", (json_int_t)st.step, "epoch",
			         (double)st.step / (double)spe, "epochs", (json_int_t)o.epochs,
			         "train_loss", r->train_loss, "train_accuracy", r->train_accuracy,
			         "loss", ev.loss, "accuracy", ev.accuracy, "auc", ev.auc,
			         "examples_per_second", (double)ex_here / wall, "device_seconds",
			         ss.device_seconds, "utilization", ss.mxu_utilization, "input_wait",
			         tf_input_wait_seconds(in) / wall, "eta_seconds",
			         (double)(total - st.step) * wall / (double)steps_here));
			st.ep_loss = st.ep_correct = st.ep_examples = 0;
			if (o.patience > 0) {
				double v = monitored(o.monitor, &ev);
				if (!st.have_best || v > st.best + o.min_delta) {
					st.best = v;
					st.have_best = 1;
					st.bad_epochs = 0;
				} else if (++st.bad_epochs >= o.patience) {
					stop_early = 1;
				}
			}
		}
		if (o.ckpt_prefix && o.checkpoint_every && st.step % o.checkpoint_every == 0 &&
		    st.step < total && !stop_early)
			if ((rc = save_ckpt(&o, &m, &opt, &st, spe, r, err, errlen)))
				goto out;
		if (o.halt_after && st.step >= o.halt_after && st.step < total) {
			r->halted = 1;
			tf_errf(err, errlen, "halted after step %llu as asked (halt_after)",
			        (unsigned long long)st.step);
			rc = -EINTR;
			break;
		}
		if (stop_early) {
			r->early_stopped = 1;
			emit(&o,
			     json_pack("{s:s, s:I, s:s, s:f}", "event", "early_stop", "step",
			               (json_int_t)st.step, "monitor", o.monitor, "best", st.best));
			break;
		}
	}
	r->wall_seconds = tf_now_monotonic() - t0;
	r->steps = st.step;
	r->epochs_done = (double)st.step / (double)spe;
	r->examples_per_second = r->wall_seconds > 0 ? (double)ex_here / r->wall_seconds : 0;
	r->input_wait = r->wall_seconds > 0 ? tf_input_wait_seconds(in) / r->wall_seconds : 0;
	struct tf_slice_stats ss;
	tf_slice_stats(rt, &ss);
	r->device_seconds = ss.device_seconds;
	r->utilization = ss.mxu_utilization;
	if (rc == -EINTR)
		goto out;
	if (isnan(ev.loss) || st.step % spe != 0)
		tf_train_evaluate(rt, &m, tx, ty, tn, EVAL_BATCH, NULL, &ev);
	r->loss = ev.loss;
	r->accuracy = ev.accuracy;
	r->auc = ev.auc;
	if (o.ckpt_prefix && (rc = save_ckpt(&o, &m, &opt, &st, spe, r, err, errlen)))
		goto out;
	if (o.export_prefix) {
		struct tf_mxu_cfg mxu;
		tf_mxu_cfg_init(&mxu);
		mxu.rows = slice.gen->mxu_rows;
		mxu.cols = slice.gen->mxu_cols;
		mxu.ftz = 1;
		json_t *extra = json_pack(
		    "{s:s, s:s, s:I, s:f, s:{s:f, s:f, s:f}}", "dataset", o.dataset, "accelerator",
		    slice.name, "step", (json_int_t)st.step, "epochs", r->epochs_done, "metrics",
		    "loss", r->loss, "accuracy", r->accuracy, "auc", isnan(r->auc) ? 0.0 : r->auc);
		rc = tf_bundle_export(o.export_store ? o.export_store : o.store, o.export_prefix,
		                      &m, d, &mxu, extra, err, errlen);
		json_decref(extra);
		if (rc)
			goto out;
		snprintf(r->bundle, sizeof r->bundle, "%s", o.export_prefix);
	}
	emit(&o, json_pack("{s:s, s:I, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f}", "event", "done",
	                   "step", (json_int_t)st.step, "loss", r->loss, "accuracy", r->accuracy,
	                   "auc", isnan(r->auc) ? 0.0 : r->auc, "wall_seconds", r->wall_seconds,
	                   "examples_per_second", r->examples_per_second, "device_seconds",
	                   r->device_seconds, "utilization", r->utilization, "input_wait",
	                   r->input_wait));
out:
	tf_input_free(in);
	for (int i = 0; work && i < R; i++)
		tf_mlp_work_release(&work[i]);
	free(work);
	tf_mlp_packs_release(&packs);
	free(gsum);
	free(tx);
	free(ty);
	tf_optim_release(&opt);
	tf_mlp_release(&m);
	tf_slice_rt_free(rt);
	tf_dataset_free(d);
	return rc;
}

/* test_train.c — training on an emulated slice with a small Fashion-MNIST subset: the loss
 * falls and accuracy beats chance widely; a halted and resumed run ends with the same bits as
 * an uninterrupted one; export -> CPU inference (library and `tpuflow predict`) is
 * bit-identical to evaluation on the slice; divergence stops with a clear error; schedules;
 * CSV data with the sigmoid BCE loss; the weight gradients made inside the all-reduce give the
 * same bits and device time as whole per-replica gradients. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "accel/slice.h"
#include "accel/tpu.h"
#include "common/common.h"
#include "ml/bundle.h"
#include "ml/dataset.h"
#include "ml/input.h"
#include "ml/mlp.h"
#include "ml/npy.h"
#include "ml/optim.h"
#include "ml/steps.h"
#include "ml/train.h"
#include "storage/ckpt.h"
#include "storage/objstore.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct tf_objstore *store;
static char *manifest;

static int setup(void **state)
{
	(void)state;
	char err[512];
	if (tf_objstore_open("file://store", &store, err, sizeof err))
		return -1;
	struct tf_prep_opts o = {.shards = 4, .limit_train = 2048, .limit_test = 512};
	if (tf_dataset_prep(store, "fm/", &o, &manifest, NULL, err, sizeof err)) {
		fprintf(stderr, "prep: %s\n", err);
		return -1;
	}
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	free(manifest);
	tf_objstore_free(store);
	return 0;
}

static void base_opts(struct tf_train_opts *o)
{
	memset(o, 0, sizeof *o);
	o->store = store;
	o->dataset = manifest;
	o->accelerator = "v4-8";
	o->hidden[0] = 64;
	o->hidden[1] = 32;
	o->nhidden = 2;
	o->epochs = 3;
	o->batch = 64;
	o->optim.kind = TF_OPT_SGD;
	o->optim.lr = 0.05;
	o->optim.schedule = TF_LR_COSINE;
	o->warmup_epochs = 0.5;
	o->seed = 5;
	o->prefetch = 2;
}

struct losses {
	double first, last; /* train loss of the first and last epoch events */
	int epochs;         /* epoch events seen */
};

static void collect(void *data, const char *line)
{
	struct losses *l = data;
	if (!strstr(line, "\"event\":\"epoch\""))
		return;
	const char *p = strstr(line, "\"train_loss\":");
	double v = p ? strtod(p + 13, NULL) : NAN;
	if (l->epochs++ == 0)
		l->first = v;
	l->last = v;
}

static void test_train_loss_falls_and_beats_chance(void **state)
{
	(void)state;
	struct tf_train_opts o;
	base_opts(&o);
	struct losses l = {0};
	o.progress = collect;
	o.progress_data = &l;
	struct tf_train_result r;
	char err[1024];
	int rc = tf_train_run(&o, &r, err, sizeof err);
	if (rc)
		fprintf(stderr, "%s\n", err);
	assert_int_equal(rc, 0);
	assert_int_equal(r.steps, 3 * 32);
	assert_int_equal(l.epochs, 3);
	assert_true(l.last < l.first * 0.8);
	assert_true(r.accuracy > 0.65); /* chance is 0.10 */
	assert_true(r.auc > 0.9);
	assert_true(r.device_seconds > 0);
	assert_true(r.utilization > 0 && r.utilization <= 1);
	assert_true(r.input_wait >= 0 && r.input_wait < 1);
}

/* The final params and momentum of the checkpoint at `step` under prefix. */
static void final_state(const char *prefix, int64_t step, void **p, size_t *pb, void **m,
                        size_t *mb)
{
	struct tf_ckpt *c;
	assert_int_equal(tf_ckpt_load(store, prefix, step, &c), 0);
	const void *a = tf_ckpt_tensor(c, "params", pb), *b = tf_ckpt_tensor(c, "opt/m", mb);
	assert_non_null(a);
	assert_non_null(b);
	*p = malloc(*pb);
	*m = malloc(*mb);
	memcpy(*p, a, *pb);
	memcpy(*m, b, *mb);
	tf_ckpt_free(c);
}

static void test_train_resume_is_bit_identical(void **state)
{
	(void)state;
	struct tf_train_opts o;
	struct tf_train_result r;
	char err[1024];
	base_opts(&o);
	o.epochs = 2;
	o.checkpoint_every = 10;
	o.ckpt_prefix = "runA/ckpt";
	o.prefetch = 4;
	assert_int_equal(tf_train_run(&o, &r, err, sizeof err), 0);
	assert_int_equal(r.checkpoint_step, 64);

	/* the same run, killed after step 25 (last checkpoint: 20), then resumed with other
	 * host settings: one thread, no prefetch, a cache */
	o.ckpt_prefix = "runB/ckpt";
	o.halt_after = 25;
	assert_int_equal(tf_train_run(&o, &r, err, sizeof err), -EINTR);
	assert_int_equal(r.halted, 1);
	int64_t latest;
	assert_int_equal(tf_ckpt_latest(store, "runB/ckpt", &latest), 0);
	assert_int_equal(latest, 20);
	o.halt_after = 0;
	o.host_threads = 1;
	o.prefetch = 0;
	o.cache = 1;
	assert_int_equal(tf_train_run(&o, &r, err, sizeof err), 0);
	assert_int_equal(r.resumed_from, 20);
	assert_int_equal(r.steps, 64);

	void *pa, *ma, *pb_, *mb_;
	size_t pal, mal, pbl, mbl;
	final_state("runA/ckpt", 64, &pa, &pal, &ma, &mal);
	final_state("runB/ckpt", 64, &pb_, &pbl, &mb_, &mbl);
	assert_int_equal(pal, pbl);
	assert_memory_equal(pa, pb_, pal);
	assert_memory_equal(ma, mb_, mal);
	free(pa);
	free(ma);
	free(pb_);
	free(mb_);
}

static void count_skips(void *data, const char *line)
{
	if (strstr(line, "\"event\":\"checkpoint_skipped\""))
		++*(int *)data;
}

/* A flipped byte in the newest checkpoint: the run resumes from the newest one that
 * verifies (with an event), and fails only when none does. */
static void test_train_resume_falls_back_past_a_damaged_checkpoint(void **state)
{
	(void)state;
	struct tf_train_opts o;
	struct tf_train_result r;
	char err[1024];
	int skips = 0;
	base_opts(&o);
	o.epochs = 1;
	o.checkpoint_every = 10;
	o.ckpt_prefix = "runC/ckpt";
	o.halt_after = 25;
	assert_int_equal(tf_train_run(&o, &r, err, sizeof err), -EINTR);
	struct tf_ckpt *c;
	assert_int_equal(tf_ckpt_load(store, "runC/ckpt", 20, &c), 0);
	const void *data;
	tf_ckpt_tensor_at(c, 0, &data, NULL);
	size_t n = 0;
	struct tf_obj_list l = {0};
	assert_int_equal(tf_objstore_list(store, "runC/ckpt/step-000000000020/", &l), 0);
	for (size_t i = 0; i < l.n; i++)
		if (strstr(l.v[i].key, ".t0000")) {
			char *path = tf_xasprintf("%s/%s", tf_objstore_url(store) + 7, l.v[i].key);
			FILE *f = fopen(path, "r+b");
			assert_non_null(f);
			fseek(f, 40, SEEK_SET);
			fputc(((const unsigned char *)data)[40] ^ 0x10, f);
			fclose(f);
			free(path);
			n++;
		}
	tf_obj_list_release(&l);
	tf_ckpt_free(c);
	assert_int_equal(n, 1);
	o.halt_after = 0;
	o.progress = count_skips;
	o.progress_data = &skips;
	assert_int_equal(tf_train_run(&o, &r, err, sizeof err), 0);
	assert_int_equal(r.resumed_from, 10);
	assert_int_equal(skips, 1);
}

static void test_train_export_predict_bit_identical(void **state)
{
	(void)state;
	struct tf_train_opts o;
	struct tf_train_result r;
	char err[1024];
	struct tf_objstore *bs;
	assert_int_equal(tf_objstore_open("file://bundle", &bs, err, sizeof err), 0);
	base_opts(&o);
	o.epochs = 1;
	o.export_store = bs;
	o.export_prefix = "";
	assert_int_equal(tf_train_run(&o, &r, err, sizeof err), 0);

	struct tf_bundle *b;
	assert_int_equal(tf_bundle_load(bs, "", &b, err, sizeof err), 0);
	struct tf_dataset *d;
	assert_int_equal(tf_dataset_open(store, manifest, &d, err, sizeof err), 0);
	float *x;
	int32_t *y;
	unsigned char *raw;
	size_t n;
	assert_int_equal(
	    tf_input_load_split(store, d, TF_SPLIT_TEST, &x, &y, &raw, &n, NULL, err, sizeof err), 0);
	/* evaluation on the slice (8 replicas, rows split over them) */
	struct tf_tpu_slice slice;
	struct tf_slice_rt *rt;
	assert_int_equal(tf_tpu_slice_parse("v4-8", &slice, err, sizeof err), 0);
	assert_int_equal(tf_slice_rt_new(&slice, 2, 1, &rt), 0);
	float *ps = malloc(n * 10 * sizeof(float)), *pc = malloc(n * 10 * sizeof(float));
	struct tf_eval_result ev;
	tf_train_evaluate(rt, &b->mlp, x, y, n, 200, ps, &ev);
	assert_true(fabs(ev.accuracy - r.accuracy) < 1e-12);
	/* CPU inference, one and two threads */
	tf_bundle_predict(b, x, n, pc, 1);
	assert_memory_equal(ps, pc, n * 10 * sizeof(float));
	tf_bundle_predict(b, x, n, pc, 2);
	assert_memory_equal(ps, pc, n * 10 * sizeof(float));

	/* and through the command: raw uint8 pixels in a .npy, probabilities out */
	const char *bin = getenv("TPUFLOW_BIN");
	if (bin) {
		FILE *f = fopen("x.npy", "wb");
		char hdr[128];
		int hl = snprintf(hdr, sizeof hdr,
		                  "{'descr': '|u1', 'fortran_order': False, "
		                  "'shape': (%zu, 784), }",
		                  n);
		while ((10 + hl + 1) % 64)
			hdr[hl++] = ' ';
		hdr[hl++] = '\n';
		unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)hl, 0};
		fwrite(pre, 1, 10, f);
		fwrite(hdr, 1, (size_t)hl, f);
		fwrite(raw, 1, n * 784, f);
		fclose(f);
		char cmd[4096];
		snprintf(cmd, sizeof cmd,
		         "'%s' predict --model bundle --input x.npy --out y.npy "
		         "--threads 2 >/dev/null",
		         bin);
		assert_int_equal(system(cmd), 0);
		struct tf_npy a;
		assert_int_equal(tf_npy_read("y.npy", &a, err, sizeof err), 0);
		assert_int_equal(a.dtype, TF_NPY_F32);
		assert_int_equal(a.shape[0], n);
		assert_int_equal(a.shape[1], 10);
		assert_memory_equal(a.data, ps, n * 10 * sizeof(float));
		tf_npy_release(&a);
	}
	free(ps);
	free(pc);
	free(x);
	free(y);
	free(raw);
	tf_slice_rt_free(rt);
	tf_dataset_free(d);
	tf_bundle_free(b);
	tf_objstore_free(bs);
}

static void test_train_divergence_stops_with_clear_error(void **state)
{
	(void)state;
	struct tf_train_opts o;
	struct tf_train_result r;
	char err[1024];
	base_opts(&o);
	o.optim.lr = 1e4;
	o.warmup_epochs = 0;
	o.optim.schedule = TF_LR_CONSTANT;
	assert_int_equal(tf_train_run(&o, &r, err, sizeof err), -ERANGE);
	assert_non_null(strstr(err, "diverged"));
	assert_non_null(strstr(err, "learning rate"));
}

static void test_train_early_stopping(void **state)
{
	(void)state;
	struct tf_train_opts o;
	struct tf_train_result r;
	char err[1024];
	base_opts(&o);
	o.epochs = 6;
	o.patience = 2;
	o.monitor = "accuracy";
	o.min_delta = 0.5; /* no epoch can improve accuracy by 50 points after the first */
	assert_int_equal(tf_train_run(&o, &r, err, sizeof err), 0);
	assert_int_equal(r.early_stopped, 1);
	assert_int_equal(r.steps, 3 * 32); /* best at epoch 1, two bad epochs, stop */
}

static void test_train_schedules_and_optimizers(void **state)
{
	(void)state;
	struct tf_optim_cfg c = {
	    .lr = 0.1, .warmup_steps = 10, .total_steps = 110, .schedule = TF_LR_COSINE};
	assert_true(fabs(tf_optim_lr(&c, 0) - 0.01) < 1e-12);
	assert_true(fabs(tf_optim_lr(&c, 9) - 0.1) < 1e-12);
	assert_true(fabs(tf_optim_lr(&c, 10) - 0.1) < 1e-12);
	assert_true(fabs(tf_optim_lr(&c, 60) - 0.05) < 1e-12);
	assert_true(tf_optim_lr(&c, 110) < 1e-12);
	c.schedule = TF_LR_STEP;
	c.decay_steps = 20;
	c.gamma = 0.1;
	assert_true(fabs(tf_optim_lr(&c, 29) - 0.1) < 1e-12);
	assert_true(fabs(tf_optim_lr(&c, 30) - 0.01) < 1e-12);
	c.linear_scaling = 1;
	c.global_batch = 1024;
	c.schedule = TF_LR_CONSTANT;
	assert_true(fabs(tf_optim_lr(&c, 50) - 0.4) < 1e-12);

	/* Adam and LARS both learn the subset too */
	struct tf_train_opts o;
	struct tf_train_result r;
	char err[1024];
	base_opts(&o);
	o.epochs = 2;
	o.optim.kind = TF_OPT_ADAM;
	o.optim.lr = 2e-3;
	o.optim.weight_decay = 1e-4;
	o.optim.clip_norm = 5;
	assert_int_equal(tf_train_run(&o, &r, err, sizeof err), 0);
	fprintf(stderr, "adam accuracy %.4f\n", r.accuracy);
	assert_true(r.accuracy > 0.6);
	base_opts(&o);
	o.epochs = 2;
	o.optim.kind = TF_OPT_LARS;
	o.optim.lr = 2;
	o.optim.weight_decay = 1e-4;
	o.optim.schedule = TF_LR_STEP;
	assert_int_equal(tf_train_run(&o, &r, err, sizeof err), 0);
	fprintf(stderr, "lars accuracy %.4f\n", r.accuracy);
	assert_true(r.accuracy > 0.6);
}

static void test_train_csv_binary_bce(void **state)
{
	(void)state;
	/* two Gaussian blobs in 4 dimensions, written as CSV */
	FILE *f = fopen("blobs.csv", "w");
	fprintf(f, "a,b,label,c,d\n");
	uint64_t s = 12345;
	for (int i = 0; i < 1200; i++) {
		int y = i % 2;
		double v[4];
		for (int j = 0; j < 4; j++) {
			s = s * 6364136223846793005ull + 1442695040888963407ull;
			double u = (double)(s >> 11) / 9007199254740992.0;
			v[j] = (u - 0.5) * 3 + (y ? 1.0 : -1.0);
		}
		fprintf(f, "%.6f,%.6f,%d,%.6f,%.6f\n", v[0], v[1], y, v[2] * 100, v[3]);
	}
	fclose(f);
	char err[1024], *key = NULL;
	struct tf_prep_opts po = {
	    .source = "csv", .path = "blobs.csv", .shards = 2, .test_fraction = 0.25, .seed = 1};
	assert_int_equal(tf_dataset_prep(store, "blobs/", &po, &key, NULL, err, sizeof err), 0);
	struct tf_train_opts o;
	struct tf_train_result r;
	base_opts(&o);
	o.dataset = key;
	o.binary = 1;
	o.hidden[0] = 16;
	o.nhidden = 1;
	o.batch = 32;
	o.epochs = 4;
	o.optim.lr = 0.1;
	int rc = tf_train_run(&o, &r, err, sizeof err);
	if (rc)
		fprintf(stderr, "%s\n", err);
	assert_int_equal(rc, 0);
	assert_true(r.accuracy > 0.85);
	assert_true(r.auc > 0.9);
	free(key);

	/* a CSV with a bad cell is refused with its line */
	f = fopen("bad.csv", "w");
	fprintf(f, "x,label\n1.0,0\nfoo,1\n");
	fclose(f);
	po.path = "bad.csv";
	assert_int_equal(tf_dataset_prep(store, "bad/", &po, &key, NULL, err, sizeof err),
	                 -EBADMSG);
	assert_non_null(strstr(err, "bad.csv:3"));
}

static void test_train_step_adapters(void **state)
{
	(void)state;
	char err[1024];
	struct tf_ml_ctx ctx = {.store = store, .prefix = "runs/1/", .accelerator = "v4-8"};
	json_t *with = json_pack("{s:s, s:s, s:s, s:i}", "source", "fashion-mnist", "shards", "2",
	                         "limit_train", "1024", "limit_test", 256);
	json_t *out = json_object(), *met = json_object();
	assert_int_equal(tf_ml_data_prep_step(with, &ctx, out, met, err, sizeof err), 0);
	assert_string_equal(json_string_value(json_object_get(out, "dataset")),
	                    "runs/1/data/manifest.json");
	assert_int_equal(json_integer_value(json_object_get(met, "examples")), 1280);
	json_decref(with);

	ctx.prefix = "runs/1/train/";
	with = json_pack("{s:O, s:s, s:s, s:s, s:s, s:s, s:s}", "dataset",
	                 json_object_get(out, "dataset"), "hidden", "32", "epochs", "2", "batch",
	                 "64", "lr", "0.05", "optimizer", "sgd", "checkpoint_every", "8");
	json_t *out2 = json_object(), *met2 = json_object();
	int rc = tf_ml_train_step(with, &ctx, out2, met2, err, sizeof err);
	if (rc)
		fprintf(stderr, "%s\n", err);
	assert_int_equal(rc, 0);
	assert_string_equal(json_string_value(json_object_get(out2, "bundle")),
	                    "runs/1/train/bundle/");
	assert_non_null(
	    strstr(json_string_value(json_object_get(out2, "checkpoint")), "step-000000000032"));
	double acc = json_number_value(json_object_get(met2, "accuracy"));
	assert_true(acc > 0.5);
	/* a retried attempt resumes from the final checkpoint: same metrics */
	json_t *out3 = json_object(), *met3 = json_object();
	assert_int_equal(tf_ml_train_step(with, &ctx, out3, met3, err, sizeof err), 0);
	assert_true(json_number_value(json_object_get(met3, "accuracy")) == acc);
	json_decref(with);

	with = json_pack("{s:O, s:O}", "model", json_object_get(out2, "bundle"), "dataset",
	                 json_object_get(out, "dataset"));
	json_t *met4 = json_object();
	assert_int_equal(tf_ml_evaluate_step(with, &ctx, NULL, met4, err, sizeof err), 0);
	assert_true(json_number_value(json_object_get(met4, "accuracy")) == acc);
	json_decref(with);

	with = json_pack("{s:s, s:s}", "dataset", "x", "hidden", "[0]");
	assert_int_equal(tf_ml_train_step(with, &ctx, out3, met3, err, sizeof err), -EINVAL);
	assert_non_null(strstr(err, "hidden"));
	json_decref(with);
	json_decref(out);
	json_decref(met);
	json_decref(out2);
	json_decref(met2);
	json_decref(out3);
	json_decref(met3);
	json_decref(met4);
}

/* The data-parallel step as training runs it with several replicas (each replica's pass
 * without the weight-gradient GEMMs, which the all-reduce makes block by block) against every
 * replica computing its whole gradient first and the plain all-reduce: the same bits of the
 * summed gradient and the same device accounting, on shards of uneven size and empty ones. */
struct dp_ctx {
	const struct tf_mlp *m;
	const struct tf_mlp_packs *packs;
	struct tf_mlp_work *work;
	const float *x;
	const int32_t *y;
	size_t n;
	int defer;
	struct tf_mxu_cfg cfg;
};

static void dp_replica(struct tf_slice_replica *r, void *arg)
{
	struct dp_ctx *c = arg;
	size_t lo, cnt;
	tf_slice_shard(c->n, r->replicas, r->index, &lo, &cnt);
	struct tf_mlp_gemm g = {.replica = r, .packs = c->packs};
	(c->defer ? tf_mlp_train_pass_deferred : tf_mlp_train_pass)(
	    c->m, &g, &c->work[r->index], c->x + lo * c->m->size[0], c->y + lo, cnt, c->n);
}

static void dp_gen(int replica, size_t lo, size_t hi, float *out, void *arg)
{
	struct dp_ctx *c = arg;
	tf_mlp_grad_range(c->m, &c->cfg, &c->work[replica], lo, hi, out);
}

static void test_train_deferred_gradients_same_bits(void **state)
{
	(void)state;
	const size_t hidden[] = {300, 7};
	const size_t rows[] = {50, 5, 64};
	const char *specs[] = {"v4-8", "v5litepod-4", "v4-32"};
	struct tf_mlp m;
	assert_int_equal(tf_mlp_init(&m, 33, hidden, 2, 3, 0), 0);
	tf_mlp_init_params(&m, 7);
	for (size_t i = 0; i < m.nparams; i++) /* biases too, so dZ rows differ widely */
		m.params[i] += (float)((double)(i % 97) / 97.0 - 0.5) * 0.1f;
	size_t nmax = 64;
	float *x = malloc(nmax * m.size[0] * sizeof *x);
	int32_t *y = malloc(nmax * sizeof *y);
	assert_non_null(x);
	assert_non_null(y);
	for (size_t i = 0; i < nmax * m.size[0]; i++)
		x[i] = (float)sin((double)i * 0.37) * (i % 5 == 0 ? 0.0f : 1.0f);
	for (size_t i = 0; i < nmax; i++)
		y[i] = (int32_t)(i * 7 % 3);
	for (size_t si = 0; si < sizeof specs / sizeof specs[0]; si++) {
		struct tf_tpu_slice s;
		char err[256];
		assert_int_equal(tf_tpu_slice_parse(specs[si], &s, err, sizeof err), 0);
		int R = s.cores;
		for (int threads = 1; threads <= 2; threads++) {
			struct tf_slice_rt *rt;
			assert_int_equal(tf_slice_rt_new(&s, threads, 1, &rt), 0);
			struct tf_mlp_work *work = calloc((size_t)R, sizeof *work);
			float **grads = calloc((size_t)R, sizeof *grads);
			float *sum = malloc(m.nparams * sizeof *sum);
			float *want = malloc(m.nparams * sizeof *want);
			assert_non_null(want);
			assert_non_null(work);
			assert_non_null(grads);
			assert_non_null(sum);
			for (int r = 0; r < R; r++) {
				tf_mlp_work_init(&work[r], &m, nmax);
				grads[r] = work[r].grad;
			}
			struct tf_mlp_packs packs = {0};
			struct dp_ctx c = {.m = &m, .packs = &packs, .work = work, .x = x, .y = y};
			tf_slice_mxu_cfg(rt, &c.cfg);
			tf_mlp_packs_update(&packs, &m, &c.cfg);
			for (size_t ni = 0; ni < sizeof rows / sizeof rows[0]; ni++) {
				c.n = rows[ni];
				struct tf_slice_stats whole, gen;
				tf_slice_stats_reset(rt);
				c.defer = 0;
				tf_slice_run(rt, dp_replica, &c);
				tf_slice_allreduce_first(rt, grads, m.nparams);
				tf_slice_stats(rt, &whole);
				memcpy(want, grads[0], m.nparams * sizeof *want);
				tf_slice_stats_reset(rt);
				c.defer = 1;
				tf_slice_run(rt, dp_replica, &c);
				tf_slice_allreduce_gen(rt, m.nparams, dp_gen, &c, sum);
				tf_slice_stats(rt, &gen);
				if (memcmp(sum, want, m.nparams * sizeof *sum))
					fail_msg("%s threads=%d rows=%zu: the summed gradient differs",
					         specs[si], threads, c.n);
				assert_int_equal(gen.cycles, whole.cycles);
				assert_int_equal(gen.macs, whole.macs);
				assert_int_equal(gen.hbm_bound_cycles, whole.hbm_bound_cycles);
				assert_true(gen.hbm_bytes == whole.hbm_bytes);
				assert_true(gen.device_seconds == whole.device_seconds);
				assert_int_equal(gen.allreduces, 1);
			}
			tf_mlp_packs_release(&packs);
			for (int r = 0; r < R; r++)
				tf_mlp_work_release(&work[r]);
			free(work);
			free(grads);
			free(sum);
			free(want);
			tf_slice_rt_free(rt);
		}
	}
	free(x);
	free(y);
	tf_mlp_release(&m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_train_loss_falls_and_beats_chance),
	    cmocka_unit_test(test_train_resume_is_bit_identical),
	    cmocka_unit_test(test_train_resume_falls_back_past_a_damaged_checkpoint),
	    cmocka_unit_test(test_train_export_predict_bit_identical),
	    cmocka_unit_test(test_train_divergence_stops_with_clear_error),
	    cmocka_unit_test(test_train_early_stopping),
	    cmocka_unit_test(test_train_schedules_and_optimizers),
	    cmocka_unit_test(test_train_csv_binary_bce),
	    cmocka_unit_test(test_train_step_adapters),
	    cmocka_unit_test(test_train_deferred_gradients_same_bits),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}

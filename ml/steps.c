/* steps.c — pipeline step adapters for data prep, training and evaluation (see steps.h). */
#include "ml/steps.h"

#include "accel/slice.h"
#include "accel/tpu.h"
#include "common/buf.h"
#include "common/common.h"
#include "ml/bundle.h"
#include "ml/dataset.h"
#include "ml/input.h"
#include "ml/train.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int tf_ml_retryable(int rc)
{
	return rc == -EAGAIN || tf_objstore_retryable(rc);
}

int tf_ml_number(const json_t *v, double *out)
{
	if (json_is_number(v)) {
		*out = json_number_value(v);
		return 0;
	}
	if (json_is_string(v)) {
		const char *s = json_string_value(v);
		char *end;
		double d = strtod(s, &end);
		if (*s && !*end && isfinite(d)) {
			*out = d;
			return 0;
		}
	}
	if (json_is_true(v) || json_is_false(v)) {
		*out = json_is_true(v);
		return 0;
	}
	return -EINVAL;
}

int tf_ml_with_number(const json_t *with, const char *key, double *out, char *err,
                      size_t errlen)
{
	json_t *v = json_object_get(with, key);
	if (!v || json_is_null(v))
		return 1;
	if (!tf_ml_number(v, out))
		return 0;
	tf_errf(err, errlen, "with.%s must be a number", key);
	return -EINVAL;
}

static int get_u64(const json_t *with, const char *key, uint64_t *out, char *err, size_t errlen)
{
	double d;
	int rc = tf_ml_with_number(with, key, &d, err, errlen);
	if (rc)
		return rc;
	if (d < 0 || d != floor(d) || d > 1e15) {
		tf_errf(err, errlen, "with.%s must be a non-negative integer", key);
		return -EINVAL;
	}
	*out = (uint64_t)d;
	return 0;
}

static const char *get_str(const json_t *with, const char *key)
{
	return json_string_value(json_object_get(with, key));
}

static int in_list(const char *s, const char *const *names)
{
	for (size_t i = 0; names[i]; i++)
		if (!strcmp(s, names[i]))
			return 1;
	return 0;
}

/* "with.KEY 'VALUE' is not a, b or c" into err; -EINVAL. */
static int not_one_of(char *err, size_t errlen, const char *key, const char *value,
                      const char *const *names)
{
	struct tf_buf b = {0};
	tf_buf_printf(&b, "with.%s '%s' is not ", key, value);
	tf_buf_names(&b, names, "or", "");
	tf_buf_copy_to(&b, err, errlen);
	tf_buf_release(&b);
	return -EINVAL;
}

static char *join(const char *prefix, const char *rest)
{
	size_t l = prefix ? strlen(prefix) : 0;
	return tf_xasprintf("%s%s%s", prefix ? prefix : "", l && prefix[l - 1] != '/' ? "/" : "",
	                    rest);
}

int tf_ml_prep_opts_from_with(const json_t *with, struct tf_prep_opts *o, char *err, size_t errlen)
{
	o->source = get_str(with, "source");
	o->path = get_str(with, "path");
	o->csv_label = get_str(with, "csv_label");
	uint64_t v;
	double f;
	int rc;
	if (o->source && !in_list(o->source, tf_dataset_sources))
		return not_one_of(err, errlen, "source", o->source, tf_dataset_sources);
	if ((rc = get_u64(with, "shards", &v, err, errlen)) < 0)
		return rc;
	if (rc == 0 && v > 1u << 30) {
		tf_errf(err, errlen, "with.shards is too large");
		return -EINVAL;
	}
	if (rc == 0)
		o->shards = (int)v;
	if ((rc = tf_ml_with_number(with, "test_fraction", &f, err, errlen)) < 0)
		return rc;
	if (rc == 0)
		o->test_fraction = f;
	if ((rc = get_u64(with, "seed", &o->seed, err, errlen)) < 0 ||
	    (rc = get_u64(with, "limit_train", &v, err, errlen)) < 0)
		return rc;
	if (rc == 0)
		o->limit_train = (size_t)v;
	if ((rc = get_u64(with, "limit_test", &v, err, errlen)) < 0)
		return rc;
	if (rc == 0)
		o->limit_test = (size_t)v;
	return 0;
}

int tf_ml_data_prep_step(const json_t *with, const struct tf_ml_ctx *ctx, json_t *outputs,
                         json_t *metrics, char *err, size_t errlen)
{
	struct tf_prep_opts o = {.cancel = ctx->cancel};
	int rc = tf_ml_prep_opts_from_with(with, &o, err, errlen);
	if (rc)
		return rc;
	char *prefix = join(ctx->prefix, "data/"), *key = NULL;
	json_t *m = NULL;
	rc = tf_dataset_prep(ctx->store, prefix, &o, &key, &m, err, errlen);
	if (!rc) {
		json_t *sp = json_object_get(m, "splits");
		json_int_t n =
		    json_integer_value(json_object_get(json_object_get(sp, "train"), "examples")) +
		    json_integer_value(json_object_get(json_object_get(sp, "test"), "examples"));
		json_object_set_new(outputs, "dataset", json_string(key));
		json_object_set_new(metrics, "examples", json_integer(n));
	}
	json_decref(m);
	free(key);
	free(prefix);
	return rc;
}

/* hidden: [256, 128], "256,128" or "[256,128]". */
static int get_hidden(const json_t *with, struct tf_train_opts *o, char *err, size_t errlen)
{
	json_t *h = json_object_get(with, "hidden");
	json_t *parsed = NULL;
	if (!h)
		return 0;
	if (json_is_string(h)) {
		const char *s = json_string_value(h);
		parsed = json_loads(s, JSON_DECODE_ANY, NULL);
		if (!parsed || json_is_number(parsed)) {
			json_decref(parsed);
			char *t = tf_xasprintf("[%s]", s);
			parsed = json_loads(t, 0, NULL);
			free(t);
		}
		h = parsed;
	}
	o->nhidden = 0;
	if (!json_is_array(h) || json_array_size(h) > TF_MLP_MAX_LAYERS - 1)
		goto bad;
	for (size_t i = 0; i < json_array_size(h); i++) {
		json_t *e = json_array_get(h, i);
		double d = json_is_number(e)   ? json_number_value(e)
		           : json_is_string(e) ? strtod(json_string_value(e), NULL)
		                               : 0;
		if (d < 1 || d != floor(d) || d > 1e6)
			goto bad;
		o->hidden[o->nhidden++] = (size_t)d;
	}
	json_decref(parsed);
	return 0;
bad:
	json_decref(parsed);
	tf_errf(err, errlen,
	        "with.hidden must be a list of up to %d positive layer widths, "
	        "e.g. [256, 128]",
	        TF_MLP_MAX_LAYERS - 1);
	return -EINVAL;
}

int tf_ml_train_opts_from_with(const json_t *with, struct tf_train_opts *o, char *err,
                               size_t errlen)
{
	uint64_t v;
	double f;
	int rc;
	o->dataset = get_str(with, "dataset");
	if (!o->dataset || !*o->dataset) {
		tf_errf(err, errlen,
		        "with.dataset is required (the data_prep step's "
		        "outputs.dataset)");
		return -EINVAL;
	}
	if ((rc = get_hidden(with, o, err, errlen)))
		return rc;
	const char *s;
	if ((s = get_str(with, "optimizer")) && tf_optim_kind_parse(s, &o->optim.kind))
		return not_one_of(err, errlen, "optimizer", s, tf_optim_names);
	if ((s = get_str(with, "schedule")) && tf_lr_schedule_parse(s, &o->optim.schedule))
		return not_one_of(err, errlen, "schedule", s, tf_lr_schedule_names);
	if ((s = get_str(with, "monitor")) && !in_list(s, tf_train_monitors))
		return not_one_of(err, errlen, "monitor", s, tf_train_monitors);
	if (s)
		o->monitor = s;
	struct {
		const char *key;
		double *dst;
	} nums[] = {
	    {"lr", &o->optim.lr},
	    {"momentum", &o->optim.momentum},
	    {"weight_decay", &o->optim.weight_decay},
	    {"warmup_epochs", &o->warmup_epochs},
	    {"decay_epochs", &o->decay_epochs},
	    {"clip_norm", &o->optim.clip_norm},
	    {"lars_eta", &o->optim.lars_eta},
	};
	for (size_t i = 0; i < TF_ARRAY_LEN(nums); i++) {
		if ((rc = tf_ml_with_number(with, nums[i].key, &f, err, errlen)) < 0)
			return rc;
		if (!rc) {
			if (f < 0) {
				tf_errf(err, errlen, "with.%s must not be negative", nums[i].key);
				return -EINVAL;
			}
			*nums[i].dst = f;
		}
	}
	struct {
		const char *key;
		uint64_t *dst;
	} ints[] = {
	    {"epochs", &o->epochs},
	    {"seed", &o->seed},
	    {"checkpoint_every", &o->checkpoint_every},
	    {"max_steps", &o->max_steps},
	};
	for (size_t i = 0; i < TF_ARRAY_LEN(ints); i++)
		if ((rc = get_u64(with, ints[i].key, ints[i].dst, err, errlen)) < 0)
			return rc;
	const char *small[] = {"batch",          "prefetch", "cache",
	                       "linear_scaling", "patience", "binary"};
	for (size_t i = 0; i < TF_ARRAY_LEN(small); i++) {
		if ((rc = get_u64(with, small[i], &v, err, errlen)) < 0)
			return rc;
		if (rc)
			continue;
		if (v > 1u << 30) {
			tf_errf(err, errlen, "with.%s is too large", small[i]);
			return -EINVAL;
		}
		switch (i) {
		case 0:
			o->batch = (size_t)v;
			break;
		case 1:
			o->prefetch = (int)v;
			break;
		case 2:
			o->cache = (int)v;
			break;
		case 3:
			o->optim.linear_scaling = (int)v;
			break;
		case 4:
			o->patience = (int)v;
			break;
		default:
			o->binary = (int)v;
			break;
		}
	}
	return 0;
}

int tf_ml_train_step(const json_t *with, const struct tf_ml_ctx *ctx, json_t *outputs,
                     json_t *metrics, char *err, size_t errlen)
{
	struct tf_train_opts o = {.store = ctx->store,
	                          .accelerator = ctx->accelerator,
	                          .cancel = ctx->cancel,
	                          .progress = ctx->progress,
	                          .progress_data = ctx->progress_data,
	                          .prefetch = 4,
	                          .cache = -1};
	o.optim.schedule = TF_LR_COSINE;
	int rc = tf_ml_train_opts_from_with(with, &o, err, errlen);
	if (rc)
		return rc;
	char *ck = join(ctx->prefix, "ckpt/"), *bundle = join(ctx->prefix, "bundle/");
	o.ckpt_prefix = ck;
	o.export_prefix = bundle;
	struct tf_train_result r;
	rc = tf_train_run(&o, &r, err, errlen);
	if (!rc) {
		json_object_set_new(outputs, "checkpoint", json_string(r.checkpoint));
		json_object_set_new(outputs, "bundle", json_string(r.bundle));
		json_object_set_new(metrics, "loss", json_real(r.loss));
		json_object_set_new(metrics, "accuracy", json_real(r.accuracy));
		json_object_set_new(metrics, "auc", json_real(isnan(r.auc) ? 0 : r.auc));
		json_object_set_new(metrics, "examples_per_second",
		                    json_real(r.examples_per_second));
		json_object_set_new(metrics, "device_seconds", json_real(r.device_seconds));
		json_object_set_new(metrics, "utilization", json_real(r.utilization));
		json_object_set_new(metrics, "input_wait", json_real(r.input_wait));
		json_object_set_new(metrics, "early_stopped", json_integer(r.early_stopped != 0));
	}
	free(ck);
	free(bundle);
	return rc;
}

int tf_ml_evaluate_step(const json_t *with, const struct tf_ml_ctx *ctx, json_t *outputs,
                        json_t *metrics, char *err, size_t errlen)
{
	(void)outputs;
	const char *model = get_str(with, "model"), *dataset = get_str(with, "dataset");
	struct tf_bundle *b = NULL;
	struct tf_eval_result ev;
	int rc;
	if (!model || !dataset) {
		tf_errf(err, errlen,
		        "evaluate needs with.model (a train step's outputs.bundle) "
		        "and with.dataset");
		return -EINVAL;
	}
	if ((rc = tf_bundle_load(ctx->store, model, &b, err, errlen)) ||
	    (rc = tf_bundle_evaluate(ctx->store, b, dataset, ctx->accelerator, ctx->cancel, &ev,
	                             err, errlen)))
		goto out;
	json_object_set_new(metrics, "loss", json_real(ev.loss));
	json_object_set_new(metrics, "accuracy", json_real(ev.accuracy));
	json_object_set_new(metrics, "auc", json_real(isnan(ev.auc) ? 0 : ev.auc));
out:
	tf_bundle_free(b);
	return rc;
}

/* dataset.c — data prep (source -> sharded TFRecord + manifest) and reading a prepared
 * dataset back (manifest, shard loading with checksums, record decoding). */
#define TF_LOG_TAG "dataset"
#include "ml/dataset.h"

#include "common/buf.h"
#include "common/common.h"
#include "common/crc32c.h"
#include "common/log.h"
#include "ml/example.h"
#include "ml/mlp.h"
#include "ml/rng.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *split_names[TF_SPLIT_LAST] = {"train", "test"};

void tf_preproc_apply(const struct tf_preproc *p, const unsigned char *u8, const float *f32,
                      float *out)
{
	if (p->image) {
		/* one mean/std for all pixels: the same two operations in the same order on
		 * every path (training, evaluation, CPU inference) */
		const float m = p->mean[0], is = p->inv_std[0];
		for (size_t j = 0; j < p->dim; j++)
			out[j] = ((float)u8[j] - m) * is;
	} else {
		for (size_t j = 0; j < p->dim; j++)
			out[j] = (f32[j] - p->mean[j]) * p->inv_std[j];
	}
}

void tf_preproc_release(struct tf_preproc *p)
{
	if (!p)
		return;
	free(p->mean);
	free(p->inv_std);
	p->mean = p->inv_std = NULL;
}

json_t *tf_preproc_to_json(const struct tf_preproc *p)
{
	size_t n = p->image ? 1 : p->dim;
	json_t *m = json_array(), *s = json_array();
	for (size_t j = 0; j < n; j++) {
		json_array_append_new(m, json_real(p->mean[j]));
		/* store the exact float used (1/std), so every reader gets identical bits */
		json_array_append_new(s, json_real(p->inv_std[j]));
	}
	return json_pack("{s:s, s:s, s:o, s:o, s:s}", "kind", "standardize", "input",
	                 p->image ? "uint8" : "float32", "mean", m, "inv_std", s, "formula",
	                 "x = (raw - mean) * inv_std (fp32)");
}

int tf_preproc_from_json(const json_t *j, size_t dim, struct tf_preproc *out)
{
	const char *input = json_string_value(json_object_get(j, "input"));
	json_t *m = json_object_get(j, "mean"), *s = json_object_get(j, "inv_std");
	if (!input || !json_is_array(m) || !json_is_array(s))
		return -EBADMSG;
	struct tf_preproc p = {.image = !strcmp(input, "uint8"), .dim = dim};
	size_t n = p.image ? 1 : dim;
	if (json_array_size(m) != n || json_array_size(s) != n)
		return -EBADMSG;
	p.mean = tf_xmalloc(n * sizeof(float));
	p.inv_std = tf_xmalloc(n * sizeof(float));
	for (size_t i = 0; i < n; i++) {
		/* the JSON holds the float's exact value (a double prints it exactly) */
		p.mean[i] = (float)json_number_value(json_array_get(m, i));
		p.inv_std[i] = (float)json_number_value(json_array_get(s, i));
	}
	*out = p;
	return 0;
}

/* Mean and 1/std of the train split (a single pair for images). */
static void compute_preproc(const struct tf_rawset *r, struct tf_preproc *p)
{
	p->image = r->u8 != NULL;
	p->dim = r->dim;
	size_t n = p->image ? 1 : r->dim;
	p->mean = tf_xcalloc(n, sizeof(float));
	p->inv_std = tf_xcalloc(n, sizeof(float));
	for (size_t j = 0; j < n; j++) {
		double s = 0, s2 = 0;
		size_t cnt = 0;
		if (p->image) {
			for (size_t i = 0; i < r->n * r->dim; i++) {
				double v = r->u8[i];
				s += v;
				s2 += v * v;
			}
			cnt = r->n * r->dim;
		} else {
			for (size_t i = 0; i < r->n; i++) {
				double v = r->f32[i * r->dim + j];
				s += v;
				s2 += v * v;
			}
			cnt = r->n;
		}
		double mean = s / (double)cnt, var = s2 / (double)cnt - mean * mean;
		double sd = var > 1e-12 ? sqrt(var) : 1.0;
		p->mean[j] = (float)mean;
		p->inv_std[j] = (float)(1.0 / sd);
	}
}

/* Subset view of a raw set: examples idx[0..n) (or the first n when idx is NULL). */
/* 1 (with -ECANCELED in *rc and a message) when the step's cancel flag is up. */
static int cancelled(volatile int *cancel, int *rc, char *err, size_t errlen)
{
	if (!cancel || !*cancel || *rc)
		return *rc != 0;
	tf_errf(err, errlen, "data prep cancelled");
	*rc = -ECANCELED;
	return 1;
}

static void write_split(struct tf_objstore *s, const char *prefix, enum tf_split sp,
                        const struct tf_rawset *r, const size_t *idx, size_t n, int shards,
                        volatile int *cancel, json_t *jsplit, int *rc, char *err, size_t errlen)
{
	json_t *jshards = json_array();
	struct tf_buf ex = {0}, file = {0};
	if (shards < 1)
		shards = 1;
	if ((size_t)shards > n && n > 0)
		shards = (int)n;
	for (int k = 0; k < shards && !*rc; k++) {
		size_t lo = n * (size_t)k / (size_t)shards,
		       hi = n * (size_t)(k + 1) / (size_t)shards;
		file.len = 0;
		for (size_t e = lo; e < hi; e++) {
			if (e % 1024 == 0 && cancelled(cancel, rc, err, errlen))
				break;
			size_t i = idx ? idx[e] : e;
			int64_t label = r->labels[i];
			struct tf_feature_in f[2];
			if (r->u8)
				f[0] = (struct tf_feature_in){.name = "image",
				                              .kind = TF_FEATURE_BYTES,
				                              .data = r->u8 + i * r->dim,
				                              .count = 1,
				                              .bytes = r->dim};
			else
				f[0] = (struct tf_feature_in){.name = "features",
				                              .kind = TF_FEATURE_FLOAT,
				                              .data = r->f32 + i * r->dim,
				                              .count = r->dim};
			f[1] = (struct tf_feature_in){
			    .name = "label", .kind = TF_FEATURE_INT64, .data = &label, .count = 1};
			ex.len = 0;
			tf_example_encode(f, 2, &ex);
			tf_tfrecord_append(&file, ex.data, ex.len);
		}
		if (*rc)
			break;
		char name[96];
		snprintf(name, sizeof name, "%s-%05d-of-%05d.tfrecord", split_names[sp], k, shards);
		char *key = tf_xasprintf("%s%s", prefix, name);
		int prc = tf_objstore_put(s, key, file.data, file.len, 0);
		if (prc) {
			tf_errf(err, errlen, "cannot write shard '%s': %s", key,
			        tf_objstore_errmsg(s));
			*rc = prc;
		}
		free(key);
		char crc[16];
		snprintf(crc, sizeof crc, "%08x", tf_crc32c(file.data, file.len));
		json_array_append_new(jshards, json_pack("{s:s, s:I, s:I, s:s}", "name", name,
		                                         "examples", (json_int_t)(hi - lo), "bytes",
		                                         (json_int_t)file.len, "crc32c", crc));
	}
	json_object_set_new(jsplit, "examples", json_integer((json_int_t)n));
	json_object_set_new(jsplit, "shards", jshards);
	tf_buf_release(&ex);
	tf_buf_release(&file);
}

const char *const tf_dataset_sources[] = {"fashion-mnist", "csv", NULL};

int tf_dataset_prep(struct tf_objstore *s, const char *prefix, const struct tf_prep_opts *o,
                    char **manifest_key, json_t **manifest, char *err, size_t errlen)
{
	struct tf_rawset train = {0}, test = {0};
	struct tf_preproc pre = {0};
	size_t *tr_idx = NULL, *te_idx = NULL, ntr, nte;
	const char *source = o->source && *o->source ? o->source : "fashion-mnist";
	json_t *m = NULL;
	char *mkey = NULL, *text = NULL;
	int rc = 0, shards = o->shards > 0 ? o->shards : 8;

	if (!prefix)
		prefix = "";
	if (!strcmp(source, "fashion-mnist")) {
		if ((rc = tf_fashion_load(o->path, 1, &train, err, errlen)) ||
		    (rc = tf_fashion_load(o->path, 0, &test, err, errlen)))
			goto out;
		ntr = train.n;
		nte = test.n;
	} else if (!strcmp(source, "csv")) {
		if (!o->path || !*o->path) {
			tf_errf(err, errlen, "source 'csv' needs a path to the CSV file");
			rc = -EINVAL;
			goto out;
		}
		if ((rc = tf_csv_load(o->path, o->csv_label, &train, err, errlen)))
			goto out;
		/* seeded permutation, then the last test_fraction is the test split */
		double tfrac =
		    o->test_fraction > 0 && o->test_fraction < 1 ? o->test_fraction : 0.2;
		size_t n = train.n, *perm = tf_xmalloc(n * sizeof *perm);
		uint64_t rs = tf_rng_seed(o->seed, 0x5eed, 0);
		for (size_t i = 0; i < n; i++)
			perm[i] = i;
		for (size_t i = n; i > 1; i--) {
			size_t j = tf_rng_below(&rs, (uint32_t)i);
			size_t t = perm[i - 1];
			perm[i - 1] = perm[j];
			perm[j] = t;
		}
		nte = (size_t)((double)n * tfrac + 0.5);
		if (nte < 1 || nte >= n) {
			tf_errf(err, errlen, "'%s': %zu rows are too few to hold out a test split",
			        o->path, n);
			free(perm);
			rc = -EBADMSG;
			goto out;
		}
		ntr = n - nte;
		tr_idx = perm;
		te_idx = perm + ntr;
	} else {
		struct tf_buf b = {0};
		tf_buf_printf(&b, "unknown source '%s'; use ", source);
		tf_buf_names(&b, tf_dataset_sources, "or", "");
		tf_buf_copy_to(&b, err, errlen);
		tf_buf_release(&b);
		rc = -EINVAL;
		goto out;
	}
	if (o->limit_train && o->limit_train < ntr)
		ntr = o->limit_train;
	if (o->limit_test && o->limit_test < nte)
		nte = o->limit_test;

	if (cancelled(o->cancel, &rc, err, errlen))
		goto out; /* reading the source may take most of a short timeout */
	/* preprocessing statistics from the train examples actually kept */
	if (tr_idx) {
		struct tf_rawset sub = {.n = ntr, .dim = train.dim};
		sub.f32 = tf_xmalloc(ntr * train.dim * sizeof(float));
		for (size_t i = 0; i < ntr; i++)
			memcpy(sub.f32 + i * train.dim, train.f32 + tr_idx[i] * train.dim,
			       train.dim * sizeof(float));
		compute_preproc(&sub, &pre);
		free(sub.f32);
	} else {
		struct tf_rawset sub = train;
		sub.n = ntr;
		compute_preproc(&sub, &pre);
	}

	m = json_object();
	json_object_set_new(m, "format", json_string("tpuflow-dataset/1"));
	json_object_set_new(m, "source", json_string(source));
	json_object_set_new(m, "input_dim", json_integer((json_int_t)train.dim));
	int classes = train.num_classes > test.num_classes ? train.num_classes : test.num_classes;
	json_object_set_new(m, "num_classes", json_integer(classes));
	json_t *names = json_array();
	for (int c = 0; c < classes; c++) {
		if (!strcmp(source, "fashion-mnist") && c < 10)
			json_array_append_new(names, json_string(tf_fashion_classes[c]));
		else
			json_array_append_new(names, json_sprintf("%d", c));
	}
	json_object_set_new(m, "class_names", names);
	json_t *schema = json_object();
	if (train.u8) {
		json_object_set_new(schema, "image",
		                    json_pack("{s:s, s:s, s:[i,i]}", "kind", "bytes", "dtype",
		                              "uint8", "shape", train.rows, train.cols));
	} else {
		json_object_set_new(schema, "features",
		                    json_pack("{s:s, s:s, s:[I]}", "kind", "float_list", "dtype",
		                              "float32", "shape", (json_int_t)train.dim));
	}
	json_object_set_new(schema, "label", json_pack("{s:s}", "kind", "int64"));
	json_object_set_new(m, "schema", schema);
	json_object_set_new(m, "preprocessing", tf_preproc_to_json(&pre));
	json_t *splits = json_object(), *jtr = json_object(), *jte = json_object();
	json_object_set_new(splits, "train", jtr);
	json_object_set_new(splits, "test", jte);
	json_object_set_new(m, "splits", splits);

	write_split(s, prefix, TF_SPLIT_TRAIN, &train, tr_idx, ntr, shards, o->cancel, jtr, &rc,
	            err, errlen);
	if (rc)
		goto out;
	if (te_idx)
		write_split(s, prefix, TF_SPLIT_TEST, &train, te_idx, nte,
		            shards / 4 > 0 ? shards / 4 : 1, o->cancel, jte, &rc, err, errlen);
	else
		write_split(s, prefix, TF_SPLIT_TEST, &test, NULL, nte,
		            shards / 4 > 0 ? shards / 4 : 1, o->cancel, jte, &rc, err, errlen);
	if (rc)
		goto out;

	/* the manifest last: a dataset exists only once every shard is stored */
	text = json_dumps(m, JSON_INDENT(2) | JSON_SORT_KEYS);
	mkey = tf_xasprintf("%smanifest.json", prefix);
	if ((rc = tf_objstore_put(s, mkey, text, strlen(text), 0))) {
		tf_errf(err, errlen, "cannot write manifest '%s': %s", mkey, tf_objstore_errmsg(s));
		goto out;
	}
	tf_info("dataset '%s': %zu train, %zu test examples", mkey, ntr, nte);
	*manifest_key = mkey;
	mkey = NULL;
	if (manifest) {
		*manifest = m;
		m = NULL;
	}
out:
	free(mkey);
	free(text);
	json_decref(m);
	free(tr_idx);
	tf_preproc_release(&pre);
	tf_rawset_release(&train);
	tf_rawset_release(&test);
	return rc;
}

static void split_release(struct tf_dataset_split *sp)
{
	for (size_t i = 0; i < sp->nshards && sp->keys; i++)
		free(sp->keys[i]);
	free(sp->keys);
	free(sp->counts);
	free(sp->bytes);
	free(sp->crc32c);
}

void tf_dataset_free(struct tf_dataset *d)
{
	if (!d)
		return;
	for (int i = 0; i < TF_SPLIT_LAST; i++)
		split_release(&d->split[i]);
	for (int c = 0; c < d->num_classes && d->class_names; c++)
		free(d->class_names[c]);
	free(d->class_names);
	tf_preproc_release(&d->pre);
	free(d->manifest_key);
	free(d->source);
	json_decref(d->manifest);
	free(d);
}

int tf_dataset_open(struct tf_objstore *s, const char *manifest_key, struct tf_dataset **out,
                    char *err, size_t errlen)
{
	void *data = NULL;
	size_t len;
	json_error_t jerr;
	struct tf_dataset *d = NULL;
	int rc = tf_objstore_get(s, manifest_key, &data, &len);
	if (rc) {
		/* the hint fits a missing manifest only, not a store that cannot be reached */
		tf_errf(err, errlen, "cannot read dataset manifest '%s': %s%s", manifest_key,
		        tf_objstore_errmsg(s), rc == -ENOENT ? "; run data prep first" : "");
		goto out;
	}
	d = tf_xcalloc(1, sizeof *d);
	d->manifest_key = tf_xstrdup(manifest_key);
	d->manifest = json_loadb(data, len, 0, &jerr);
	rc = -EBADMSG;
	if (!d->manifest) {
		tf_errf(err, errlen, "dataset manifest '%s': line %d: %s", manifest_key, jerr.line,
		        jerr.text);
		goto out;
	}
	json_t *m = d->manifest, *names = json_object_get(m, "class_names");
	json_t *img = json_object_get(json_object_get(m, "schema"), "image");
	d->source = tf_xstrdup(json_string_value(json_object_get(m, "source")));
	/* every number below is untrusted: range-checked before it sizes anything */
	json_int_t dim = json_integer_value(json_object_get(m, "input_dim"));
	json_int_t ncls = json_integer_value(json_object_get(m, "num_classes"));
	if (dim < 1 || (uint64_t)dim > TF_MLP_MAX_WIDTH || ncls < 2 ||
	    (uint64_t)ncls > TF_MLP_MAX_WIDTH) {
		tf_errf(err, errlen,
		        "dataset manifest '%s': input_dim must be 1..%zu and num_classes "
		        "2..%zu; run data prep again",
		        manifest_key, TF_MLP_MAX_WIDTH, TF_MLP_MAX_WIDTH);
		goto out;
	}
	d->dim = (size_t)dim;
	d->num_classes = (int)ncls;
	if (img) {
		json_t *shape = json_object_get(img, "shape");
		json_int_t r = json_integer_value(json_array_get(shape, 0));
		json_int_t c = json_integer_value(json_array_get(shape, 1));
		if (r < 1 || c < 1 || r > dim || c > dim || r * c != dim) {
			tf_errf(err, errlen,
			        "dataset manifest '%s': schema.image.shape is not rows x cols "
			        "of input_dim %zu",
			        manifest_key, d->dim);
			goto out;
		}
		d->rows = (int)r;
		d->cols = (int)c;
	}
	if (json_array_size(names) != (size_t)d->num_classes ||
	    tf_preproc_from_json(json_object_get(m, "preprocessing"), d->dim, &d->pre)) {
		tf_errf(err, errlen,
		        "dataset manifest '%s': missing or bad input_dim, "
		        "num_classes, class_names or preprocessing",
		        manifest_key);
		goto out;
	}
	d->class_names = tf_xcalloc((size_t)d->num_classes, sizeof(char *));
	for (int c = 0; c < d->num_classes; c++)
		d->class_names[c] = tf_xstrdup(json_string_value(json_array_get(names, (size_t)c)));
	const size_t min_rec = TF_TFRECORD_MIN_RECORD + d->dim;
	/* shard names are relative to the manifest's folder */
	const char *slash = strrchr(manifest_key, '/');
	size_t plen = slash ? (size_t)(slash - manifest_key + 1) : 0;
	for (int i = 0; i < TF_SPLIT_LAST; i++) {
		json_t *js = json_object_get(json_object_get(m, "splits"), split_names[i]);
		json_t *sh = json_object_get(js, "shards");
		struct tf_dataset_split *sp = &d->split[i];
		if (!json_is_array(sh)) {
			tf_errf(err, errlen, "dataset manifest '%s': split '%s' has no shards",
			        manifest_key, split_names[i]);
			goto out;
		}
		sp->nshards = json_array_size(sh);
		sp->keys = tf_xcalloc(sp->nshards, sizeof(char *));
		sp->counts = tf_xcalloc(sp->nshards, sizeof(size_t));
		sp->bytes = tf_xcalloc(sp->nshards, sizeof(uint64_t));
		sp->crc32c = tf_xcalloc(sp->nshards, sizeof(uint32_t));
		for (size_t k = 0; k < sp->nshards; k++) {
			json_t *e = json_array_get(sh, k);
			const char *name = json_string_value(json_object_get(e, "name"));
			const char *crc = json_string_value(json_object_get(e, "crc32c"));
			if (!name || !crc || strchr(name, '/')) {
				tf_errf(err, errlen,
				        "dataset manifest '%s': shard %zu of '%s' has "
				        "no valid name or crc32c",
				        manifest_key, k, split_names[i]);
				goto out;
			}
			sp->keys[k] = tf_xasprintf("%.*s%s", (int)plen, manifest_key, name);
			json_int_t ex = json_integer_value(json_object_get(e, "examples"));
			json_int_t by = json_integer_value(json_object_get(e, "bytes"));
			/* a record takes at least its framing plus dim bytes of features, so a
			 * shard of B bytes holds at most B/min_rec of them; the split's total must
			 * also fit the input pipeline's 32-bit element ids. Readers check B itself
			 * against the object (tf_dataset_check_shards) before they allocate by
			 * these counts, so allocations stay below the shards' real size. */
			if (ex < 0 || by < 0 || (uint64_t)ex > (uint64_t)by / min_rec ||
			    __builtin_add_overflow(sp->examples, (size_t)ex, &sp->examples) ||
			    sp->examples > UINT32_MAX) {
				tf_errf(err, errlen,
				        "dataset manifest '%s': shard '%s' claims %lld examples "
				        "in %lld bytes, which cannot be (at most one per %zu "
				        "bytes, %u per split); run data prep again",
				        manifest_key, name, (long long)ex, (long long)by, min_rec,
				        UINT32_MAX);
				goto out;
			}
			sp->counts[k] = (size_t)ex;
			sp->bytes[k] = (uint64_t)by;
			sp->crc32c[k] = (uint32_t)strtoul(crc, NULL, 16);
		}
	}
	rc = 0;
	*out = d;
	d = NULL;
out:
	tf_dataset_free(d);
	free(data);
	return rc;
}

int tf_dataset_check_shards(struct tf_objstore *s, const struct tf_dataset *d, enum tf_split sp,
                            char *err, size_t errlen)
{
	const struct tf_dataset_split *p = &d->split[sp];
	for (size_t k = 0; k < p->nshards; k++) {
		struct tf_obj_info info;
		int rc = tf_objstore_head(s, p->keys[k], &info);
		if (rc) {
			tf_errf(err, errlen, "cannot read shard '%s': %s", p->keys[k],
			        tf_objstore_errmsg(s));
			return rc;
		}
		if (info.size != p->bytes[k]) {
			tf_errf(err, errlen,
			        "shard '%s' is %llu bytes, the manifest says %llu; the dataset is "
			        "damaged, run data prep again",
			        p->keys[k], (unsigned long long)info.size,
			        (unsigned long long)p->bytes[k]);
			return -EBADMSG;
		}
	}
	return 0;
}

int tf_dataset_load_shard(struct tf_objstore *s, const struct tf_dataset *d, enum tf_split sp,
                          size_t shard, void **data, struct tf_tfrecord_span **spans, char *err,
                          size_t errlen)
{
	const struct tf_dataset_split *p = &d->split[sp];
	void *buf = NULL;
	size_t len, n;
	int rc = tf_objstore_get(s, p->keys[shard], &buf, &len);
	if (rc) {
		tf_errf(err, errlen, "cannot read shard '%s': %s", p->keys[shard],
		        tf_objstore_errmsg(s));
		return rc;
	}
	if (len != p->bytes[shard] || tf_crc32c(buf, len) != p->crc32c[shard]) {
		tf_errf(err, errlen,
		        "shard '%s': size or CRC-32C differs from the manifest "
		        "(%zu bytes, expected %llu); the shard is corrupt, run data prep again",
		        p->keys[shard], len, (unsigned long long)p->bytes[shard]);
		free(buf);
		return -EBADMSG;
	}
	if ((rc = tf_tfrecord_index(p->keys[shard], buf, len, spans, &n, err, errlen))) {
		free(buf);
		return rc;
	}
	if (n != p->counts[shard]) {
		tf_errf(err, errlen, "shard '%s': %zu records, the manifest says %zu",
		        p->keys[shard], n, p->counts[shard]);
		free(*spans);
		free(buf);
		return -EBADMSG;
	}
	*data = buf;
	return 0;
}

int tf_dataset_decode(const struct tf_dataset *d, const void *rec, size_t len, unsigned char *u8,
                      float *f32, int32_t *label, char *err, size_t errlen)
{
	struct tf_feature_view v[8];
	int n = tf_example_decode(rec, len, v, 8);
	const struct tf_feature_view *fl, *fx;
	int64_t lab;
	if (n < 0)
		goto bad;
	fl = tf_example_find(v, (size_t)(n < 8 ? n : 8), "label");
	fx = tf_example_find(v, (size_t)(n < 8 ? n : 8), d->pre.image ? "image" : "features");
	if (!fl || !fx || tf_feature_int64s(fl, &lab, 1) != 1 || lab < 0 || lab >= d->num_classes)
		goto bad;
	if (d->pre.image) {
		const unsigned char *p;
		size_t pl;
		if (tf_feature_bytes(fx, &p, &pl) || pl != d->dim)
			goto bad;
		memcpy(u8, p, pl);
	} else if (tf_feature_floats(fx, f32, d->dim) != (int)d->dim) {
		goto bad;
	}
	*label = (int32_t)lab;
	return 0;
bad:
	tf_errf(err, errlen,
	        "dataset '%s': a record is not a valid Example of this schema "
	        "(label in 0..%d and %zu %s)",
	        d->manifest_key, d->num_classes - 1, d->dim,
	        d->pre.image ? "image bytes" : "floats");
	return -EBADMSG;
}

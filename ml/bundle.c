/* bundle.c — model export (safetensors + signature) and CPU inference (see bundle.h). */
#define TF_LOG_TAG "bundle"
#include "ml/bundle.h"

#include "common/common.h"
#include "common/crc32c.h"
#include "common/digest.h"
#include "common/log.h"
#include "accel/slice.h"
#include "accel/tpu.h"
#include "ml/input.h"
#include "ml/npy.h"
#include "ml/tfrecord.h"
#include "ml/train.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BUNDLE_FORMAT "tpuflow-bundle/1"
#define MXU_MAX 65536 /* largest systolic array side a signature may name */

/* Serialises the model's tensors as a safetensors file into b. */
static void safetensors_encode(const struct tf_mlp *m, struct tf_buf *b)
{
	json_t *h = json_object();
	size_t off = 0;
	for (int l = 0; l < m->nlayers; l++) {
		char name[64];
		size_t kb = m->size[l] * m->size[l + 1] * sizeof(float);
		size_t bb = m->size[l + 1] * sizeof(float);
		snprintf(name, sizeof name, "dense_%d/kernel", l);
		json_object_set_new(h, name,
		                    json_pack("{s:s, s:[I,I], s:[I,I]}", "dtype", "F32", "shape",
		                              (json_int_t)m->size[l], (json_int_t)m->size[l + 1],
		                              "data_offsets", (json_int_t)off,
		                              (json_int_t)(off + kb)));
		off += kb;
		snprintf(name, sizeof name, "dense_%d/bias", l);
		json_object_set_new(h, name,
		                    json_pack("{s:s, s:[I], s:[I,I]}", "dtype", "F32", "shape",
		                              (json_int_t)m->size[l + 1], "data_offsets",
		                              (json_int_t)off, (json_int_t)(off + bb)));
		off += bb;
	}
	json_object_set_new(h, "__metadata__", json_pack("{s:s}", "format", "tpuflow-mlp"));
	char *text = json_dumps(h, JSON_COMPACT | JSON_SORT_KEYS);
	size_t tl = strlen(text), padded = (tl + 7) / 8 * 8;
	unsigned char len8[8];
	for (int i = 0; i < 8; i++)
		len8[i] = (unsigned char)((uint64_t)padded >> (8 * i));
	tf_buf_append(b, len8, 8);
	tf_buf_append(b, text, tl);
	for (size_t i = tl; i < padded; i++)
		tf_buf_append(b, " ", 1);
	/* the flat buffer is kernel, bias per layer: exactly the offsets above (LE host) */
	tf_buf_append(b, m->params, m->nparams * sizeof(float));
	free(text);
	json_decref(h);
}

int tf_bundle_export(struct tf_objstore *s, const char *prefix, const struct tf_mlp *m,
                     const struct tf_dataset *d, const struct tf_mxu_cfg *mxu, json_t *extra,
                     char *err, size_t errlen)
{
	struct tf_buf b = {0};
	char sha[65], crc[16], *key = NULL, *text = NULL;
	int rc;
	safetensors_encode(m, &b);
	tf_sha256_hex(b.data, b.len, sha);
	snprintf(crc, sizeof crc, "%08x", tf_crc32c(b.data, b.len));
	key = tf_xasprintf("%smodel.safetensors", prefix);
	if ((rc = tf_objstore_put(s, key, b.data, b.len, 0))) {
		tf_errf(err, errlen, "cannot write '%s': %s", key, tf_objstore_errmsg(s));
		goto out;
	}
	json_t *layers = json_array(), *names = json_array();
	for (int l = 0; l <= m->nlayers; l++)
		json_array_append_new(layers, json_integer((json_int_t)m->size[l]));
	for (int c = 0; c < m->classes; c++)
		json_array_append_new(names, json_string(d->class_names[c]));
	json_t *input =
	    json_pack("{s:s, s:[i,I], s:s}", "name", d->pre.image ? "image" : "features", "shape",
	              -1, (json_int_t)m->size[0], "dtype", d->pre.image ? "uint8" : "float32");
	if (d->rows)
		json_object_set_new(input, "image_shape", json_pack("[i,i]", d->rows, d->cols));
	json_t *sig = json_pack(
	    "{s:s, s:s, s:o, s:s, s:s, s:o, s:o, s:o, s:{s:s, s:i, s:i, s:b, s:s, s:s}, "
	    "s:{s:{s:s, s:s, s:I}}}",
	    "format", BUNDLE_FORMAT, "model", "mlp", "layers", layers, "activation", "relu",
	    "output", m->binary ? "sigmoid" : "softmax", "input", input, "preprocessing",
	    tf_preproc_to_json(&d->pre), "class_names", names, "numerics", "mode", "mxu-bf16",
	    "mxu_rows", mxu->rows ? mxu->rows : 128, "mxu_cols", mxu->cols ? mxu->cols : 128, "ftz",
	    mxu->ftz, "inputs", "fp32 rounded to bf16 (round to nearest even)", "accumulation",
	    "fp32, fmaf down each K-tile of mxu_rows, tile sums in order", "checksums",
	    "model.safetensors", "sha256", sha, "crc32c", crc, "bytes", (json_int_t)b.len);
	if (extra)
		json_object_set(sig, "training", extra);
	text = json_dumps(sig, JSON_INDENT(2) | JSON_SORT_KEYS);
	json_decref(sig);
	free(key);
	key = tf_xasprintf("%ssignature.json", prefix);
	if ((rc = tf_objstore_put(s, key, text, strlen(text), 0)))
		tf_errf(err, errlen, "cannot write '%s': %s", key, tf_objstore_errmsg(s));
out:
	free(key);
	free(text);
	tf_buf_release(&b);
	return rc;
}

void tf_bundle_free(struct tf_bundle *b)
{
	if (!b)
		return;
	for (int c = 0; c < b->mlp.classes && b->class_names; c++)
		free(b->class_names[c]);
	free(b->class_names);
	tf_mlp_packs_release(&b->packs);
	tf_mlp_release(&b->mlp);
	tf_preproc_release(&b->pre);
	json_decref(b->signature);
	free(b);
}

/* 0 when a safetensors header entry is F32 with shape dims[0..ndims) and data_offsets
 * [off, off + count) in floats (converted to bytes), else -EBADMSG. */
static int safetensors_entry_check(const json_t *e, size_t off, size_t count, const size_t *dims,
                                   int ndims)
{
	json_t *shape = json_object_get(e, "shape"), *offs = json_object_get(e, "data_offsets");
	if (!json_is_object(e) ||
	    strcmp(json_string_value(json_object_get(e, "dtype")) ?: "", "F32") ||
	    json_array_size(shape) != (size_t)ndims || json_array_size(offs) != 2)
		return -EBADMSG;
	for (int i = 0; i < ndims; i++) {
		json_t *d = json_array_get(shape, (size_t)i);
		if (!json_is_integer(d) || json_integer_value(d) != (json_int_t)dims[i])
			return -EBADMSG;
	}
	json_t *o0 = json_array_get(offs, 0), *o1 = json_array_get(offs, 1);
	if (!json_is_integer(o0) || !json_is_integer(o1) ||
	    json_integer_value(o0) != (json_int_t)(off * sizeof(float)) ||
	    json_integer_value(o1) != (json_int_t)((off + count) * sizeof(float)))
		return -EBADMSG;
	return 0;
}

int tf_bundle_load(struct tf_objstore *s, const char *prefix, struct tf_bundle **out, char *err,
                   size_t errlen)
{
	char *skey = tf_xasprintf("%ssignature.json", prefix);
	char *mkey = tf_xasprintf("%smodel.safetensors", prefix);
	void *sdata = NULL, *mdata = NULL;
	size_t slen, mlen;
	json_error_t jerr;
	struct tf_bundle *b = tf_xcalloc(1, sizeof *b);
	json_t *hdr = NULL;
	int rc;
	if ((rc = tf_objstore_get(s, skey, &sdata, &slen))) {
		tf_errf(err, errlen,
		        "no model bundle at '%s' (%s): export one with 'tpuflow "
		        "train --export'",
		        skey, tf_objstore_errmsg(s));
		goto out;
	}
	if ((rc = tf_objstore_get(s, mkey, &mdata, &mlen))) {
		tf_errf(err, errlen, "bundle tensors '%s' missing: %s", mkey,
		        tf_objstore_errmsg(s));
		goto out;
	}
	rc = -EBADMSG;
	b->signature = json_loadb(sdata, slen, 0, &jerr);
	json_t *sig = b->signature;
	if (!sig ||
	    strcmp(json_string_value(json_object_get(sig, "format")) ?: "", BUNDLE_FORMAT)) {
		tf_errf(err, errlen, "'%s': not a %s signature", skey, BUNDLE_FORMAT);
		goto out;
	}
	json_t *ck = json_object_get(json_object_get(sig, "checksums"), "model.safetensors");
	char sha[65];
	tf_sha256_hex(mdata, mlen, sha);
	if (strcmp(json_string_value(json_object_get(ck, "sha256")) ?: "", sha)) {
		tf_errf(err, errlen,
		        "'%s': SHA-256 differs from the signature; the bundle is "
		        "damaged, export it again",
		        mkey);
		goto out;
	}
	json_t *layers = json_object_get(sig, "layers"),
	       *names = json_object_get(sig, "class_names");
	json_t *num = json_object_get(sig, "numerics");
	size_t nl = json_array_size(layers);
	int classes = (int)json_array_size(names);
	int binary = !strcmp(json_string_value(json_object_get(sig, "output")) ?: "", "sigmoid");
	if (nl < 2 || nl > TF_MLP_MAX_LAYERS + 1 || classes < 2 ||
	    (size_t)classes > TF_MLP_MAX_WIDTH) {
		tf_errf(err, errlen, "'%s': bad layers or class_names", skey);
		goto out;
	}
	/* layer widths are untrusted: checked as JSON integers in range before any use */
	size_t width[TF_MLP_MAX_LAYERS + 1];
	for (size_t i = 0; i < nl; i++) {
		json_t *w = json_array_get(layers, i);
		json_int_t v = json_integer_value(w);
		if (!json_is_integer(w) || v < 1 || (uint64_t)v > TF_MLP_MAX_WIDTH) {
			tf_errf(err, errlen,
			        "'%s': layer %zu has width %s; widths are integers 1..%zu", skey, i,
			        json_is_integer(w) ? "out of range" : "not an integer",
			        TF_MLP_MAX_WIDTH);
			goto out;
		}
		width[i] = (size_t)v;
	}
	int irc = tf_mlp_init(&b->mlp, width[0], width + 1, (int)nl - 2, classes, binary);
	if (irc == -ENOMEM || irc == -E2BIG) {
		tf_errf(err, errlen, "'%s': the model is too large (at most %zu parameters)", skey,
		        TF_MLP_MAX_PARAMS);
		rc = irc == -ENOMEM ? -ENOMEM : -EBADMSG;
		goto out;
	}
	if (irc || b->mlp.size[nl - 1] != width[nl - 1]) {
		tf_errf(err, errlen, "'%s': inconsistent layer sizes", skey);
		goto out;
	}
	/* safetensors: the header must describe exactly the signature's tensors (dtype, shape
	 * and offsets), and the data must be exactly their bytes */
	const unsigned char *u = mdata;
	uint64_t hl = 0;
	for (int i = 0; i < 8 && mlen >= 8; i++)
		hl |= (uint64_t)u[i] << (8 * i);
	if (mlen < 8 || hl > mlen - 8 || !(hdr = json_loadb((const char *)u + 8, hl, 0, &jerr)) ||
	    mlen - 8 - hl != b->mlp.nparams * sizeof(float)) {
		tf_errf(err, errlen, "'%s': bad safetensors header or size", mkey);
		goto out;
	}
	size_t ntensors = 0;
	for (int l = 0; l < b->mlp.nlayers; l++) {
		const size_t in = b->mlp.size[l], outw = b->mlp.size[l + 1];
		const struct {
			const char *what;
			size_t off, count, dims[2];
			int ndims;
		} t[2] = {{"kernel", b->mlp.w_off[l], in * outw, {in, outw}, 2},
		          {"bias", b->mlp.b_off[l], outw, {outw, 0}, 1}};
		for (int k = 0; k < 2; k++) {
			char name[64];
			snprintf(name, sizeof name, "dense_%d/%s", l, t[k].what);
			if (safetensors_entry_check(json_object_get(hdr, name), t[k].off,
			                            t[k].count, t[k].dims, t[k].ndims)) {
				char shp[48];
				if (t[k].ndims == 2)
					snprintf(shp, sizeof shp, "%zu, %zu", t[k].dims[0],
					         t[k].dims[1]);
				else
					snprintf(shp, sizeof shp, "%zu", t[k].dims[0]);
				tf_errf(err, errlen,
				        "'%s': tensor '%s' is missing or its dtype, shape or "
				        "offsets differ from the signature (F32 [%s] at bytes "
				        "%zu..%zu)",
				        mkey, name, shp, t[k].off * sizeof(float),
				        (t[k].off + t[k].count) * sizeof(float));
				goto out;
			}
			ntensors++;
		}
	}
	if (json_object_size(hdr) - (json_object_get(hdr, "__metadata__") ? 1 : 0) != ntensors) {
		tf_errf(err, errlen, "'%s': the header lists tensors the signature does not know",
		        mkey);
		goto out;
	}
	memcpy(b->mlp.params, u + 8 + hl, b->mlp.nparams * sizeof(float));
	if (tf_preproc_from_json(json_object_get(sig, "preprocessing"), b->mlp.size[0], &b->pre)) {
		tf_errf(err, errlen, "'%s': bad preprocessing", skey);
		goto out;
	}
	json_t *ishape = json_object_get(json_object_get(sig, "input"), "image_shape");
	b->rows = (int)json_integer_value(json_array_get(ishape, 0));
	b->cols = (int)json_integer_value(json_array_get(ishape, 1));
	b->class_names = tf_xcalloc((size_t)classes, sizeof(char *));
	for (int c = 0; c < classes; c++)
		b->class_names[c] = tf_xstrdup(json_string_value(json_array_get(names, (size_t)c)));
	tf_mxu_cfg_init(&b->mxu);
	json_int_t mr = json_integer_value(json_object_get(num, "mxu_rows"));
	json_int_t mc = json_integer_value(json_object_get(num, "mxu_cols"));
	b->mxu.ftz = json_is_true(json_object_get(num, "ftz"));
	if (mr < 1 || mc < 1 || mr > MXU_MAX || mc > MXU_MAX) {
		tf_errf(err, errlen, "'%s': numerics lacks mxu_rows/mxu_cols in 1..%d", skey,
		        MXU_MAX);
		goto out;
	}
	b->mxu.rows = (int)mr;
	b->mxu.cols = (int)mc;
	tf_mlp_packs_forward(&b->packs, &b->mlp, &b->mxu);
	rc = 0;
	*out = b;
	b = NULL;
out:
	json_decref(hdr);
	tf_bundle_free(b);
	free(sdata);
	free(mdata);
	free(skey);
	free(mkey);
	return rc;
}

void tf_bundle_predict(const struct tf_bundle *b, const float *x, size_t n, float *probs,
                       int threads)
{
	/* rows are independent, so the chunk only sizes the work buffers: no larger than n */
	const size_t chunk = n < 1024 ? (n ? n : 1) : 1024;
	struct tf_mxu_cfg cfg = b->mxu;
	cfg.threads = threads > 0 ? threads : 1;
	struct tf_mlp_gemm g = {.cfg = &cfg, .packs = &b->packs};
	struct tf_mlp_work w;
	size_t C = tf_mlp_outputs(&b->mlp);
	tf_mlp_work_init_forward(&w, &b->mlp, chunk);
	for (size_t i = 0; i < n; i += chunk) {
		size_t m = n - i < chunk ? n - i : chunk;
		tf_mlp_forward(&b->mlp, &g, &w, x + i * b->mlp.size[0], m);
		tf_mlp_probs(&b->mlp, w.act[b->mlp.nlayers], m, probs + i * C);
	}
	tf_mlp_work_release(&w);
}

/* The model's inputs from an .npy array a: n rows of dim values, preprocessed as in
 * training unless preprocessed. *x (n x dim floats) is new, caller frees. */
void tf_bundle_preprocess(const struct tf_bundle *b, const float *raw, float *out)
{
	if (!b->pre.image) {
		tf_preproc_apply(&b->pre, NULL, raw, out);
		return;
	}
	/* image preprocessing reads bytes: the same path training used. A float input (an .npy of
	 * floats) is clamped to 0..255 and a NaN taken as 0: converting a NaN to an integer is
	 * undefined behaviour (C11 6.3.1.4), so no comparison may let one through. */
	unsigned char u8[TF_MLP_MAX_WIDTH];
	for (size_t j = 0; j < b->pre.dim; j++)
		u8[j] = (unsigned char)(raw[j] >= 255 ? 255 : raw[j] > 0 ? raw[j] : 0);
	tf_preproc_apply(&b->pre, u8, NULL, out);
}

static int npy_inputs(const struct tf_bundle *b, const char *path, const struct tf_npy *a,
                      int preprocessed, float **x, size_t *n, char *err, size_t errlen)
{
	const size_t dim = b->mlp.size[0], rows = a->ndim ? a->shape[0] : 0;
	size_t cells, bytes;
	/* a.count is the checked product of the shape, so rows * dim cannot wrap when equal */
	if (a->ndim < 1 || __builtin_mul_overflow(rows, dim, &cells) || a->count != cells) {
		tf_errf(err, errlen,
		        "'%s': expected N x %zu values (N rows of the model's inputs), got %zu "
		        "values",
		        path, dim, a->count);
		return -EBADMSG;
	}
	if (__builtin_mul_overflow(cells, sizeof(float), &bytes) ||
	    !(*x = malloc(bytes ? bytes : 1))) {
		tf_errf(err, errlen, "'%s': no memory for %zu x %zu inputs", path, rows, dim);
		return -ENOMEM;
	}
	float *row = tf_xmalloc(dim * sizeof(float)); /* dim <= TF_MLP_MAX_WIDTH */
	for (size_t i = 0; i < rows; i++) {
		for (size_t j = 0; j < dim; j++) {
			size_t k = i * dim + j;
			row[j] = a->dtype == TF_NPY_U8    ? ((unsigned char *)a->data)[k]
			         : a->dtype == TF_NPY_F32 ? ((float *)a->data)[k]
			                                  : (float)((double *)a->data)[k];
		}
		float *xi = *x + i * dim;
		if (preprocessed)
			memcpy(xi, row, dim * sizeof(float));
		else
			tf_bundle_preprocess(b, row, xi);
	}
	free(row);
	*n = rows;
	return 0;
}

int tf_bundle_predict_npy(const struct tf_bundle *b, const char *path, int preprocessed,
                          int threads, float **probs, size_t *n, char *err, size_t errlen)
{
	struct tf_npy a = {0};
	float *x = NULL, *p = NULL;
	size_t rows = 0, C = tf_mlp_outputs(&b->mlp), bytes;
	int rc = tf_npy_read(path, &a, err, errlen);
	if (!rc)
		rc = npy_inputs(b, path, &a, preprocessed, &x, &rows, err, errlen);
	tf_npy_release(&a);
	if (rc)
		return rc;
	if (__builtin_mul_overflow(rows, C * sizeof(float), &bytes) ||
	    !(p = malloc(bytes ? bytes : 1))) {
		tf_errf(err, errlen, "'%s': no memory for %zu x %zu probabilities", path, rows, C);
		free(x);
		return -ENOMEM;
	}
	tf_bundle_predict(b, x, rows, p, threads);
	free(x);
	*probs = p;
	*n = rows;
	return 0;
}

int tf_bundle_evaluate(struct tf_objstore *s, const struct tf_bundle *b, const char *dataset,
                       const char *accelerator, volatile int *cancel,
                       struct tf_eval_result *ev, char *err, size_t errlen)
{
	struct tf_dataset *d = NULL;
	struct tf_slice_rt *rt = NULL;
	struct tf_tpu_slice slice;
	float *x = NULL;
	int32_t *y = NULL;
	size_t n;
	int rc;
	if ((rc = tf_dataset_open(s, dataset, &d, err, errlen)))
		return rc;
	if (d->dim != b->mlp.size[0] || d->num_classes != b->mlp.classes ||
	    d->pre.image != b->pre.image) {
		tf_errf(err, errlen,
		        "the model (%zu %s inputs, %d classes) does not fit dataset '%s' (%zu %s "
		        "inputs, %d classes); evaluate it on the dataset it was trained for",
		        b->mlp.size[0], b->pre.image ? "image" : "feature", b->mlp.classes, dataset,
		        d->dim, d->pre.image ? "image" : "feature", d->num_classes);
		rc = -EINVAL;
		goto out;
	}
	if ((rc = tf_tpu_slice_parse(accelerator ? accelerator : "v4-8", &slice, err, errlen)))
		goto out;
	if ((rc = tf_slice_rt_new(&slice, 0, b->mxu.ftz, &rt))) {
		tf_errf(err, errlen, "cannot start the slice runtime for '%s'", slice.name);
		goto out;
	}
	if ((rc = tf_input_load_split(s, d, TF_SPLIT_TEST, &x, &y, NULL, &n, cancel, err,
	                              errlen)))
		goto out;
	if (cancel && *cancel) {
		snprintf(err, errlen, "evaluation stopped: cancelled");
		rc = -ECANCELED;
		goto out;
	}
	tf_train_evaluate(rt, &b->mlp, x, y, n, 1024, NULL, ev);
out:
	free(x);
	free(y);
	tf_slice_rt_free(rt);
	tf_dataset_free(d);
	return rc;
}

/* bundle.c — model export (safetensors + signature) and CPU inference (see bundle.h). */
#define TF_LOG_TAG "bundle"
#include "ml/bundle.h"

#include "common/common.h"
#include "common/crc32c.h"
#include "common/log.h"
#include "ml/tfrecord.h"

#include <errno.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BUNDLE_FORMAT "tpuflow-bundle/1"

static void sha256_hex(const void *data, size_t len, char out[65])
{
	unsigned char md[32];
	unsigned int mdlen = 0;
	EVP_Digest(data, len, md, &mdlen, EVP_sha256(), NULL);
	for (unsigned i = 0; i < 32; i++)
		sprintf(out + 2 * i, "%02x", md[i]);
}

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
	sha256_hex(b.data, b.len, sha);
	snprintf(crc, sizeof crc, "%08x", tf_crc32c(b.data, b.len));
	key = tf_xasprintf("%smodel.safetensors", prefix);
	if ((rc = tf_objstore_put(s, key, b.data, b.len, 0))) {
		snprintf(err, errlen, "cannot write '%s': %s", key, tf_objstore_errmsg(s));
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
		snprintf(err, errlen, "cannot write '%s': %s", key, tf_objstore_errmsg(s));
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
	tf_mlp_release(&b->mlp);
	tf_preproc_release(&b->pre);
	json_decref(b->signature);
	free(b);
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
		snprintf(err, errlen,
		         "no model bundle at '%s' (%s): export one with 'tpuflow "
		         "train --export'",
		         skey, tf_objstore_errmsg(s));
		goto out;
	}
	if ((rc = tf_objstore_get(s, mkey, &mdata, &mlen))) {
		snprintf(err, errlen, "bundle tensors '%s' missing: %s", mkey,
		         tf_objstore_errmsg(s));
		goto out;
	}
	rc = -EBADMSG;
	b->signature = json_loadb(sdata, slen, 0, &jerr);
	json_t *sig = b->signature;
	if (!sig ||
	    strcmp(json_string_value(json_object_get(sig, "format")) ?: "", BUNDLE_FORMAT)) {
		snprintf(err, errlen, "'%s': not a %s signature", skey, BUNDLE_FORMAT);
		goto out;
	}
	json_t *ck = json_object_get(json_object_get(sig, "checksums"), "model.safetensors");
	char sha[65];
	sha256_hex(mdata, mlen, sha);
	if (strcmp(json_string_value(json_object_get(ck, "sha256")) ?: "", sha)) {
		snprintf(err, errlen,
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
	if (nl < 2 || nl > TF_MLP_MAX_LAYERS + 1 || classes < 2) {
		snprintf(err, errlen, "'%s': bad layers or class_names", skey);
		goto out;
	}
	size_t hidden[TF_MLP_MAX_LAYERS];
	for (size_t i = 1; i + 1 < nl; i++)
		hidden[i - 1] = (size_t)json_integer_value(json_array_get(layers, i));
	if (tf_mlp_init(&b->mlp, (size_t)json_integer_value(json_array_get(layers, 0)), hidden,
	                (int)nl - 2, classes, binary) ||
	    b->mlp.size[nl - 1] != (size_t)json_integer_value(json_array_get(layers, nl - 1))) {
		snprintf(err, errlen, "'%s': inconsistent layer sizes", skey);
		goto out;
	}
	/* safetensors: check every tensor's entry against the layout, then copy the data */
	const unsigned char *u = mdata;
	uint64_t hl = 0;
	for (int i = 0; i < 8 && mlen >= 8; i++)
		hl |= (uint64_t)u[i] << (8 * i);
	if (mlen < 8 || hl > mlen - 8 || !(hdr = json_loadb((const char *)u + 8, hl, 0, &jerr)) ||
	    mlen - 8 - hl != b->mlp.nparams * sizeof(float)) {
		snprintf(err, errlen, "'%s': bad safetensors header or size", mkey);
		goto out;
	}
	for (int l = 0; l < b->mlp.nlayers; l++) {
		char name[64];
		snprintf(name, sizeof name, "dense_%d/kernel", l);
		json_t *e = json_object_get(hdr, name);
		json_t *offs = json_object_get(e, "data_offsets");
		if (!e || strcmp(json_string_value(json_object_get(e, "dtype")) ?: "", "F32") ||
		    (size_t)json_integer_value(json_array_get(offs, 0)) !=
		        b->mlp.w_off[l] * sizeof(float)) {
			snprintf(err, errlen, "'%s': tensor '%s' missing or not where expected",
			         mkey, name);
			goto out;
		}
	}
	memcpy(b->mlp.params, u + 8 + hl, b->mlp.nparams * sizeof(float));
	if (tf_preproc_from_json(json_object_get(sig, "preprocessing"), b->mlp.size[0], &b->pre)) {
		snprintf(err, errlen, "'%s': bad preprocessing", skey);
		goto out;
	}
	json_t *ishape = json_object_get(json_object_get(sig, "input"), "image_shape");
	b->rows = (int)json_integer_value(json_array_get(ishape, 0));
	b->cols = (int)json_integer_value(json_array_get(ishape, 1));
	b->class_names = tf_xcalloc((size_t)classes, sizeof(char *));
	for (int c = 0; c < classes; c++)
		b->class_names[c] = tf_xstrdup(json_string_value(json_array_get(names, (size_t)c)));
	tf_mxu_cfg_init(&b->mxu);
	b->mxu.rows = (int)json_integer_value(json_object_get(num, "mxu_rows"));
	b->mxu.cols = (int)json_integer_value(json_object_get(num, "mxu_cols"));
	b->mxu.ftz = json_is_true(json_object_get(num, "ftz"));
	if (b->mxu.rows <= 0 || b->mxu.cols <= 0) {
		snprintf(err, errlen, "'%s': numerics lacks mxu_rows/mxu_cols", skey);
		goto out;
	}
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
	const size_t chunk = 1024;
	struct tf_mxu_cfg cfg = b->mxu;
	cfg.threads = threads > 0 ? threads : 1;
	struct tf_mlp_gemm g = {.cfg = &cfg};
	struct tf_mlp_work w;
	size_t C = tf_mlp_outputs(&b->mlp);
	tf_mlp_work_init(&w, &b->mlp, chunk);
	for (size_t i = 0; i < n; i += chunk) {
		size_t m = n - i < chunk ? n - i : chunk;
		tf_mlp_forward(&b->mlp, &g, &w, x + i * b->mlp.size[0], m);
		tf_mlp_probs(&b->mlp, w.act[b->mlp.nlayers], m, probs + i * C);
	}
	tf_mlp_work_release(&w);
}

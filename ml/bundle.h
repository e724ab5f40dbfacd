/* bundle.h — the exported model: what serving and `tpuflow predict` load.
 *
 * Layout under a key prefix P (a directory when the store is file://DIR):
 *   P/model.safetensors   tensors dense_<l>/kernel [in, out] and dense_<l>/bias [out], F32,
 *                         in the safetensors format (u64 LE header length, JSON header with
 *                         dtype/shape/data_offsets, then the raw little-endian data)
 *   P/signature.json      written last: format, layer sizes, activation and output function,
 *                         input name/shape/dtype, preprocessing, class names, the numerics mode
 *                         (MXU R x C, bf16 rounding with FTZ, fp32 accumulation in systolic
 *                         order), training facts and the SHA-256 + CRC-32C of the tensors file.
 * CPU inference runs the same MXU contract (accel/mxu.h) with the recorded array size and FTZ,
 * so its outputs are bit-identical to evaluation on the slice. */
#ifndef TF_ML_BUNDLE_H
#define TF_ML_BUNDLE_H

#include "accel/mxu.h"
#include "ml/dataset.h"
#include "ml/mlp.h"
#include "storage/objstore.h"

#include <jansson.h>

struct tf_bundle {
	struct tf_mlp mlp;     /* the model with its weights */
	struct tf_preproc pre; /* input preprocessing */
	int rows, cols;        /* image shape (0 for tabular) */
	char **class_names;    /* mlp.classes names */
	struct tf_mxu_cfg mxu; /* numerics: array size and FTZ */
	json_t *signature;     /* the parsed signature (owned reference) */
};

/* Writes the bundle of model m trained on dataset d with numerics mxu. extra (borrowed, may
 * be NULL) is stored as signature.training. Returns 0 or an object-store code (err set). */
int tf_bundle_export(struct tf_objstore *s, const char *prefix, const struct tf_mlp *m,
                     const struct tf_dataset *d, const struct tf_mxu_cfg *mxu, json_t *extra,
                     char *err, size_t errlen);

/* Loads and verifies a bundle (checksums, tensor shapes). Caller frees. -ENOENT when absent,
 * -EBADMSG when damaged. */
int tf_bundle_load(struct tf_objstore *s, const char *prefix, struct tf_bundle **out, char *err,
                   size_t errlen);
void tf_bundle_free(struct tf_bundle *b);

/* Probabilities for n preprocessed rows (n x inputs) into probs (n x tf_mlp_outputs);
 * threads host threads for the GEMMs (results do not depend on it). */
void tf_bundle_predict(const struct tf_bundle *b, const float *x, size_t n, float *probs,
                       int threads);

#endif

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
#include "ml/train.h"
#include "storage/objstore.h"

#include <jansson.h>

struct tf_bundle {
	struct tf_mlp mlp;     /* the model with its weights */
	struct tf_preproc pre; /* input preprocessing */
	int rows, cols;        /* image shape (0 for tabular) */
	char **class_names;    /* mlp.classes names */
	struct tf_mxu_cfg mxu; /* numerics: array size and FTZ */
	json_t *signature;     /* the parsed signature (owned reference) */
	struct tf_mlp_packs packs; /* the forward weights packed for mxu once, at load */
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
 * threads host threads for the GEMMs (results do not depend on it). Any number of threads
 * may predict with one bundle at once: it only reads the weights and their packs. */
void tf_bundle_predict(const struct tf_bundle *b, const float *x, size_t n, float *probs,
                       int threads);

/* Preprocesses one raw example (inputs values: pixels 0..255, clamped and truncated to bytes
 * for image models; features for tabular ones) into out[inputs], as training did: the one
 * input path of `tpuflow predict` and of serving. */
void tf_bundle_preprocess(const struct tf_bundle *b, const float *raw, float *out);

/* `tpuflow predict`'s whole input path after the bundle: reads the .npy file at path (N rows
 * of the model's inputs: N x inputs, or N x rows x cols for images; uint8, float32 or
 * float64), preprocesses it as training did unless preprocessed, and runs the model. *probs
 * (n x tf_mlp_outputs floats) is new, the caller frees it. Every size taken from the file is
 * overflow-checked and bounded by the file's length before anything is allocated. -EBADMSG
 * for a damaged or mismatched file, -ENOMEM when memory runs out; err says which. */
int tf_bundle_predict_npy(const struct tf_bundle *b, const char *path, int preprocessed,
                          int threads, float **probs, size_t *n, char *err, size_t errlen);

/* Evaluation of bundle b on the test split of the dataset whose manifest key is dataset in
 * store s, on an emulated slice (accelerator, NULL: v4-8): what `tpuflow eval` and the
 * pipeline's evaluate step run. -EINVAL when the model and the dataset do not fit each other
 * (inputs, classes, image or features), -EBADMSG for a damaged dataset, -ECANCELED when
 * *cancel (may be NULL) was raised while the data loaded (the step's timeout, Ctrl-C). */
int tf_bundle_evaluate(struct tf_objstore *s, const struct tf_bundle *b, const char *dataset,
                       const char *accelerator, volatile int *cancel,
                       struct tf_eval_result *ev, char *err, size_t errlen);

#endif

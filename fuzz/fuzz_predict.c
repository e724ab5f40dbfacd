/* fuzz_predict.c — libFuzzer target for `tpuflow predict`'s whole input path: the model
 * bundle (signature.json, model.safetensors) and the .npy input go through the functions the
 * command calls (tf_objstore_open, tf_bundle_load, tf_bundle_predict_npy), so a lying shape,
 * layer size or tensor header is refused with a message, never a crash, an overflow or an
 * allocation the file does not justify. Input: signature FUZZ_SEP safetensors FUZZ_SEP npy
 * (see fuzz_parts.h); the first byte of the npy part also picks --preprocessed. */
#include "fuzz/fuzz_parts.h"
#include "ml/bundle.h"
#include "storage/objstore.h"

#include <errno.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *part[3];
	size_t len[3];
	const char *dir = fuzz_bundle_case("predict", data, size, part, len, 3);
	if (!dir)
		return 0;
	char model[256], input[256], err[1024];
	snprintf(model, sizeof model, "%s/model", dir);
	snprintf(input, sizeof input, "%s/input.npy", dir);
	fuzz_write(dir, "input.npy", part[2], len[2]);

	struct tf_objstore *ms = NULL;
	struct tf_bundle *b = NULL;
	float *probs = NULL;
	size_t n = 0;
	int pre = len[2] > 0 && (part[2][len[2] - 1] & 1);
	if (!tf_objstore_open(model, &ms, err, sizeof err) &&
	    !tf_bundle_load(ms, "", &b, err, sizeof err) &&
	    !tf_bundle_predict_npy(b, input, pre, 1, &probs, &n, err, sizeof err)) {
		/* every probability row is there: touching them all lets ASan check the size */
		size_t C = tf_mlp_outputs(&b->mlp);
		volatile float sink = 0;
		for (size_t i = 0; i < n * C; i++)
			sink += probs[i];
		(void)sink;
	}
	else if (getenv("TPUFLOW_FUZZ_VERBOSE"))
		fprintf(stderr, "refused: %s\n", err); /* reproducing an input: why it stopped */
	free(probs);
	tf_bundle_free(b);
	tf_objstore_free(ms);
	return 0;
}

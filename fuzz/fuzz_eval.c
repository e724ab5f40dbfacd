/* fuzz_eval.c — libFuzzer target for `tpuflow eval`'s whole input path (also the pipeline's
 * evaluate step): the bundle, the dataset manifest and its test shard go through
 * tf_bundle_load and tf_bundle_evaluate, the functions both call: manifest counts, shapes and
 * TFRecord/Example framing are refused with a message, never a crash or an allocation the
 * data does not justify. Input: signature FUZZ_SEP safetensors FUZZ_SEP manifest FUZZ_SEP
 * test shard (see fuzz_parts.h). The manifest's first test shard is renamed to the fuzzed
 * shard, whose real size and CRC-32C are written into it; other shards named stay absent. */
#include "common/crc32c.h"
#include "fuzz/fuzz_parts.h"
#include "ml/bundle.h"
#include "storage/objstore.h"

#include <errno.h>
#include <sys/stat.h>

#define SHARD_NAME "test-00000-of-00001.tfrecord"

/* The manifest's first test shard: the fuzzed shard, with its real size and CRC-32C. */
static int fix_manifest(json_t *m, const void *arg)
{
	const struct fuzz_part *sh = arg;
	json_t *e = json_array_get(
	    json_object_get(json_object_get(json_object_get(m, "splits"), "test"), "shards"), 0);
	if (!json_is_object(e))
		return 0;
	char crc[16];
	snprintf(crc, sizeof crc, "%08x", tf_crc32c(sh->p, sh->n));
	json_object_set_new(e, "name", json_string(SHARD_NAME));
	json_object_set_new(e, "crc32c", json_string(crc));
	json_object_set_new(e, "bytes", json_integer((json_int_t)sh->n));
	return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *part[4];
	size_t len[4];
	const char *dir = fuzz_bundle_case("eval", data, size, part, len, 4);
	if (!dir)
		return 0;
	char ds[256], err[1024];
	snprintf(ds, sizeof ds, "%s/ds", dir);
	mkdir(ds, 0700);
	struct fuzz_part sh = {part[3], len[3]};
	fuzz_write_json(ds, "manifest.json", part[2], len[2], fix_manifest, &sh);
	fuzz_write(ds, SHARD_NAME, part[3], len[3]);

	struct tf_objstore *s = NULL;
	struct tf_bundle *b = NULL;
	struct tf_eval_result ev;
	if ((tf_objstore_open(dir, &s, err, sizeof err) ||
	     tf_bundle_load(s, "model/", &b, err, sizeof err) ||
	     tf_bundle_evaluate(s, b, "ds/manifest.json", "v5litepod-1", NULL, &ev, err, sizeof err)) &&
	    getenv("TPUFLOW_FUZZ_VERBOSE"))
		fprintf(stderr, "refused: %s\n", err); /* reproducing an input: why it stopped */
	tf_bundle_free(b);
	tf_objstore_free(s);
	return 0;
}

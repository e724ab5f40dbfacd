/* fuzz_parts.h — shared by the whole-path fuzz targets (fuzz_predict, fuzz_eval): one fuzz
 * input holds several files separated by FUZZ_SEP, written into a fresh directory before the
 * real entry point reads them. Checksums that only guard against accidents (the bundle's
 * SHA-256, a shard's size and CRC-32C in the manifest) are recomputed over the fuzzed files,
 * as anyone crafting a hostile bundle or dataset would do, so the fuzzer reaches the parsers
 * behind them. */
#ifndef TF_FUZZ_PARTS_H
#define TF_FUZZ_PARTS_H

#include "common/digest.h"

#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FUZZ_SEP "----8<----"

/* Splits data at FUZZ_SEP into up to max parts; returns how many were found. */
static size_t fuzz_split(const uint8_t *data, size_t size, const uint8_t **part, size_t *len,
                         size_t max)
{
	const size_t sl = strlen(FUZZ_SEP);
	size_t n = 0, start = 0;
	for (size_t i = 0; n + 1 < max && i + sl <= size; i++) {
		if (memcmp(data + i, FUZZ_SEP, sl))
			continue;
		part[n] = data + start;
		len[n++] = i - start;
		start = i + sl;
		i += sl - 1;
	}
	part[n] = data + start;
	len[n++] = size - start;
	return n;
}

static void fuzz_write(const char *dir, const char *name, const void *p, size_t n)
{
	char path[512];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	FILE *f = fopen(path, "wb");
	if (!f)
		abort();
	fwrite(p, 1, n, f);
	fclose(f);
}

/* A scratch directory per process, emptied of the given names before each input. */
static const char *fuzz_dir(const char *what)
{
	static char dir[128];
	if (!dir[0]) {
		snprintf(dir, sizeof dir, "/tmp/tpuflow-fuzz-%s.%d", what, (int)getpid());
		if (mkdir(dir, 0700) && errno != EEXIST)
			abort();
	}
	return dir;
}

/* Writes the JSON text p into dir/name after `fix` changed what it finds (fix returns 1 when it
 * found it), or the bytes as they are when the text does not parse or fix found nothing. */
static void fuzz_write_json(const char *dir, const char *name, const uint8_t *p, size_t n,
                            int (*fix)(json_t *doc, const void *arg), const void *arg)
{
	json_t *j = json_loadb((const char *)p, n, 0, NULL);
	if (j && fix(j, arg)) {
		char *text = json_dumps(j, JSON_COMPACT);
		fuzz_write(dir, name, text, strlen(text));
		free(text);
	} else {
		fuzz_write(dir, name, p, n);
	}
	json_decref(j);
}

struct fuzz_part {
	const uint8_t *p;
	size_t n;
};

/* The signature's SHA-256 of the tensors, set to that of the fuzzed tensors. */
static int fix_signature(json_t *sig, const void *arg)
{
	const struct fuzz_part *st = arg;
	json_t *ck = json_object_get(json_object_get(sig, "checksums"), "model.safetensors");
	if (!json_is_object(ck))
		return 0;
	char hex[65];
	tf_sha256_hex(st->p, st->n, hex);
	json_object_set_new(ck, "sha256", json_string(hex));
	return 1;
}

/* The first steps of every target that loads a bundle: splits the input into exactly n parts
 * (part[0] signature.json, part[1] model.safetensors, the rest the target's own) and writes the
 * bundle into a directory `model` of the scratch directory of `what`. The scratch directory, or
 * NULL when the input does not have n parts. */
static const char *fuzz_bundle_case(const char *what, const uint8_t *data, size_t size,
                                    const uint8_t **part, size_t *len, size_t n)
{
	if (fuzz_split(data, size, part, len, n) != n)
		return NULL;
	const char *dir = fuzz_dir(what);
	char model[256];
	snprintf(model, sizeof model, "%s/model", dir);
	mkdir(model, 0700);
	struct fuzz_part st = {part[1], len[1]};
	fuzz_write_json(model, "signature.json", part[0], len[0], fix_signature, &st);
	fuzz_write(model, "model.safetensors", part[1], len[1]);
	return dir;
}

#endif

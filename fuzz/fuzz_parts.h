/* fuzz_parts.h — shared by the whole-path fuzz targets (fuzz_predict, fuzz_eval): one fuzz
 * input holds several files separated by FUZZ_SEP, written into a fresh directory before the
 * real entry point reads them. Checksums that only guard against accidents (the bundle's
 * SHA-256, a shard's size and CRC-32C in the manifest) are recomputed over the fuzzed files,
 * as anyone crafting a hostile bundle or dataset would do, so the fuzzer reaches the parsers
 * behind them. */
#ifndef TF_FUZZ_PARTS_H
#define TF_FUZZ_PARTS_H

#include <errno.h>
#include <jansson.h>
#include <openssl/evp.h>
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

/* Writes signature.json (its SHA-256 of the tensors set to that of st when it parses as a
 * JSON object) and model.safetensors into dir. */
static void fuzz_write_bundle(const char *dir, const uint8_t *sig, size_t siglen,
                              const uint8_t *st, size_t stlen)
{
	json_t *j = json_loadb((const char *)sig, siglen, 0, NULL);
	json_t *ck = json_object_get(json_object_get(j, "checksums"), "model.safetensors");
	if (json_is_object(ck)) {
		unsigned char md[32];
		char hex[65];
		EVP_Digest(st, stlen, md, NULL, EVP_sha256(), NULL);
		for (int i = 0; i < 32; i++)
			snprintf(hex + 2 * i, 3, "%02x", md[i]);
		json_object_set_new(ck, "sha256", json_string(hex));
		char *text = json_dumps(j, JSON_COMPACT);
		fuzz_write(dir, "signature.json", text, strlen(text));
		free(text);
	} else {
		fuzz_write(dir, "signature.json", sig, siglen);
	}
	json_decref(j);
	fuzz_write(dir, "model.safetensors", st, stlen);
}

#endif

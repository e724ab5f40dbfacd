/* digest.c — SHA-256 (OpenSSL EVP) as lowercase hex: the one place the program turns a
 * SHA-256 into text (cache keys, pipeline digests, S3 payload hashes, token hashes, bundle
 * checksums). */
#include "common/digest.h"
#include "common/common.h"

#include <errno.h>
#include <openssl/evp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tf_sha256 {
	EVP_MD_CTX *ctx; /* running digest */
};

struct tf_sha256 *tf_sha256_new(void)
{
	struct tf_sha256 *h = tf_xcalloc(1, sizeof(*h));
	h->ctx = EVP_MD_CTX_new();
	if (!h->ctx || EVP_DigestInit_ex(h->ctx, EVP_sha256(), NULL) != 1) {
		fprintf(stderr, "tpuflow: OpenSSL cannot initialise SHA-256\n");
		abort();
	}
	return h;
}

void tf_sha256_update(struct tf_sha256 *h, const void *data, size_t len)
{
	EVP_DigestUpdate(h->ctx, data, len);
}

void tf_sha256_update_str(struct tf_sha256 *h, const char *s)
{
	uint64_t n = s ? strlen(s) : UINT64_MAX;
	tf_sha256_update(h, &n, sizeof(n));
	if (s)
		tf_sha256_update(h, s, strlen(s));
}

int tf_sha256_update_file(struct tf_sha256 *h, const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return -errno;
	char buf[65536];
	uint64_t total = 0;
	size_t n;
	while ((n = fread(buf, 1, sizeof(buf), f)) > 0) {
		tf_sha256_update(h, buf, n);
		total += n;
	}
	int rc = ferror(f) ? -EIO : 0;
	fclose(f);
	tf_sha256_update(h, &total, sizeof(total));
	return rc;
}

void tf_sha256_final(struct tf_sha256 *h, char hex[65])
{
	unsigned char md[32];
	unsigned int len = 0;
	EVP_DigestFinal_ex(h->ctx, md, &len);
	tf_hex_encode(md, 32, hex);
	EVP_MD_CTX_free(h->ctx);
	free(h);
}

void tf_sha256_hex(const void *data, size_t n, char out[65])
{
	unsigned char md[32];
	unsigned int len = 0;
	EVP_Digest(data, n, md, &len, EVP_sha256(), NULL);
	tf_hex_encode(md, 32, out);
}

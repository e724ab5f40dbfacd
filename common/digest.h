/* digest.h — SHA-256 as lowercase hex: one-shot (tf_sha256_hex) or incremental. */
#ifndef TF_DIGEST_H
#define TF_DIGEST_H

#include <stddef.h>

struct tf_sha256;

/* Incremental hashing: new, update any number of times, then final (which frees it). */
struct tf_sha256 *tf_sha256_new(void);
void tf_sha256_update(struct tf_sha256 *h, const void *data, size_t len);
/* Adds a string with its length in front, so ("ab","c") and ("a","bc") differ; NULL too. */
void tf_sha256_update_str(struct tf_sha256 *h, const char *s);
/* Adds a file's contents (then its length, so two files never run together). 0, or -errno
 * when it cannot be read (the digest is then unusable: finish it and discard). */
int tf_sha256_update_file(struct tf_sha256 *h, const char *path);
void tf_sha256_final(struct tf_sha256 *h, char hex[65]);

/* SHA-256 of n bytes as 64 lowercase hex digits and a NUL. */
void tf_sha256_hex(const void *data, size_t n, char out[65]);

#endif

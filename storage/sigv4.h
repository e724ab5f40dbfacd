/* sigv4.h — AWS Signature Version 4 (HMAC-SHA256 via OpenSSL), computed by tpuflow itself so
 * that query parameters are encoded and sorted and x-amz-content-sha256 is signed (the gaps of
 * libcurl's built-in signer, see docs/storage.md). Pure: no I/O, no clock. */
#ifndef TF_SIGV4_H
#define TF_SIGV4_H

#include <stddef.h>

/* A name/value pair (query parameter or header), borrowed. */
struct tf_sigv4_kv {
	const char *name;
	const char *value;
};

/* One request to sign. Every string is borrowed. */
struct tf_sigv4_req {
	const char *method;              /* "GET", "PUT", ... */
	const char *path;                /* decoded absolute path: "/bucket/a b.txt" */
	const struct tf_sigv4_kv *query; /* decoded names and values (value may be "") */
	size_t nquery;
	const struct tf_sigv4_kv *headers; /* headers to sign; must include host, x-amz-date */
	size_t nheaders;
	const char *payload_sha256; /* lowercase hex, or "UNSIGNED-PAYLOAD" */
	const char *amz_date;       /* "20150830T123600Z" */
	const char *region;         /* "us-east-1" */
	const char *service;        /* "s3" */
	const char *access_key;     /* may contain ':' */
	const char *secret_key;
};

/* The signing steps' results (each string owned; release with tf_sigv4_release). */
struct tf_sigv4 {
	char *canonical_request; /* task 1 */
	char *string_to_sign;    /* task 2 */
	char signature[65];      /* task 3, lowercase hex */
	char *signed_headers;    /* "host;x-amz-date" */
	char *authorization;     /* the Authorization header value */
};

void tf_sigv4_sign(const struct tf_sigv4_req *r, struct tf_sigv4 *out);
void tf_sigv4_release(struct tf_sigv4 *s);

/* RFC 3986 encoding as SigV4 wants it: every byte but A-Z a-z 0-9 - . _ ~ becomes %XX
 * (uppercase hex); '/' is kept when keep_slash. Returns a new string. */
char *tf_sigv4_uri_encode(const char *s, int keep_slash);
/* The canonical query string (names and values encoded, sorted by name then value); also the
 * query to put in the URL, so what is sent is what was signed. Returns a new string. */
char *tf_sigv4_query_string(const struct tf_sigv4_kv *q, size_t n);

/* "YYYYMMDDTHHMMSSZ" for a Unix time. */
void tf_sigv4_amz_date(double unix_time, char out[17]);

#endif

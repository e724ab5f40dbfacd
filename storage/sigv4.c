/* sigv4.c — AWS Signature Version 4: canonical request, string to sign, signing key and
 * signature (see sigv4.h). The S3 flavour: the path is encoded once per segment and never
 * normalised ('.' and '..' never reach here: object keys refuse them). */
#include "storage/sigv4.h"

#include "common/common.h"
#include "common/digest.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void hmac(const void *key, size_t klen, const char *msg, unsigned char out[32])
{
	unsigned int len = 32;
	HMAC(EVP_sha256(), key, (int)klen, (const unsigned char *)msg, strlen(msg), out, &len);
}

void tf_sigv4_amz_date(double unix_time, char out[17])
{
	time_t t = (time_t)unix_time;
	struct tm tm;
	gmtime_r(&t, &tm);
	strftime(out, 17, "%Y%m%dT%H%M%SZ", &tm);
}

char *tf_sigv4_uri_encode(const char *s, int keep_slash)
{
	static const char digits[] = "0123456789ABCDEF";
	char *out = tf_xmalloc(strlen(s) * 3 + 1), *o = out;
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		unsigned char c = *p;
		if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
		    c == '-' || c == '.' || c == '_' || c == '~' || (keep_slash && c == '/')) {
			*o++ = (char)c;
		} else {
			*o++ = '%';
			*o++ = digits[c >> 4];
			*o++ = digits[c & 15];
		}
	}
	*o = '\0';
	return out;
}

/* An encoded pair, for sorting. */
struct epair {
	char *name;
	char *value;
};

static int epair_cmp(const void *a, const void *b)
{
	const struct epair *x = a, *y = b;
	int c = strcmp(x->name, y->name);
	return c ? c : strcmp(x->value, y->value);
}

char *tf_sigv4_query_string(const struct tf_sigv4_kv *q, size_t n)
{
	struct epair *v = tf_xcalloc(n ? n : 1, sizeof *v);
	size_t total = 1;
	for (size_t i = 0; i < n; i++) {
		v[i].name = tf_sigv4_uri_encode(q[i].name, 0);
		v[i].value = tf_sigv4_uri_encode(q[i].value ? q[i].value : "", 0);
		total += strlen(v[i].name) + strlen(v[i].value) + 2;
	}
	qsort(v, n, sizeof *v, epair_cmp);
	char *out = tf_xmalloc(total), *o = out;
	for (size_t i = 0; i < n; i++) {
		o += sprintf(o, "%s%s=%s", i ? "&" : "", v[i].name, v[i].value);
		free(v[i].name);
		free(v[i].value);
	}
	*o = '\0';
	free(v);
	return out;
}

/* A header as signed: lowercase name, value trimmed with inner runs of spaces collapsed. */
struct hdr {
	char *name;
	char *value;
};

static int hdr_cmp(const void *a, const void *b)
{
	return strcmp(((const struct hdr *)a)->name, ((const struct hdr *)b)->name);
}

static char *trim_value(const char *v)
{
	char *out = tf_xmalloc(strlen(v) + 1), *o = out;
	while (*v == ' ' || *v == '\t')
		v++;
	for (; *v; v++) {
		if (*v == ' ' || *v == '\t') {
			if (o > out && o[-1] != ' ')
				*o++ = ' ';
		} else {
			*o++ = *v;
		}
	}
	while (o > out && o[-1] == ' ')
		o--;
	*o = '\0';
	return out;
}

void tf_sigv4_sign(const struct tf_sigv4_req *r, struct tf_sigv4 *out)
{
	/* task 1: the canonical request */
	struct hdr *h = tf_xcalloc(r->nheaders ? r->nheaders : 1, sizeof *h);
	size_t nh = 0;
	for (size_t i = 0; i < r->nheaders; i++) {
		char *name = tf_xstrdup(r->headers[i].name);
		for (char *p = name; *p; p++)
			if (*p >= 'A' && *p <= 'Z')
				*p = (char)(*p - 'A' + 'a');
		char *value = trim_value(r->headers[i].value);
		size_t j;
		for (j = 0; j < nh && strcmp(h[j].name, name); j++)
			;
		if (j < nh) { /* repeated header: values joined with ',' in order */
			char *joined = tf_xasprintf("%s,%s", h[j].value, value);
			free(h[j].value);
			h[j].value = joined;
			free(name);
			free(value);
		} else {
			h[nh].name = name;
			h[nh].value = value;
			nh++;
		}
	}
	qsort(h, nh, sizeof *h, hdr_cmp);
	size_t clen = 1, slen = 1;
	for (size_t i = 0; i < nh; i++) {
		clen += strlen(h[i].name) + strlen(h[i].value) + 2;
		slen += strlen(h[i].name) + 1;
	}
	char *canon_hdrs = tf_xmalloc(clen), *signed_hdrs = tf_xmalloc(slen);
	char *c = canon_hdrs, *s = signed_hdrs;
	for (size_t i = 0; i < nh; i++) {
		c += sprintf(c, "%s:%s\n", h[i].name, h[i].value);
		s += sprintf(s, "%s%s", i ? ";" : "", h[i].name);
		free(h[i].name);
		free(h[i].value);
	}
	*c = *s = '\0';
	free(h);
	char *path = tf_sigv4_uri_encode(r->path && *r->path ? r->path : "/", 1);
	char *query = tf_sigv4_query_string(r->query, r->nquery);
	out->canonical_request = tf_xasprintf("%s\n%s\n%s\n%s\n%s\n%s", r->method, path, query,
	                                      canon_hdrs, signed_hdrs, r->payload_sha256);
	free(path);
	free(query);
	free(canon_hdrs);

	/* task 2: the string to sign */
	char date[9], creq_hash[65];
	memcpy(date, r->amz_date, 8);
	date[8] = '\0';
	tf_sha256_hex(out->canonical_request, strlen(out->canonical_request), creq_hash);
	char *scope = tf_xasprintf("%s/%s/%s/aws4_request", date, r->region, r->service);
	out->string_to_sign =
	    tf_xasprintf("AWS4-HMAC-SHA256\n%s\n%s\n%s", r->amz_date, scope, creq_hash);

	/* task 3: the signing key and the signature */
	char *k = tf_xasprintf("AWS4%s", r->secret_key);
	unsigned char k1[32], k2[32], k3[32], k4[32], sig[32];
	hmac(k, strlen(k), date, k1);
	hmac(k1, 32, r->region, k2);
	hmac(k2, 32, r->service, k3);
	hmac(k3, 32, "aws4_request", k4);
	hmac(k4, 32, out->string_to_sign, sig);
	OPENSSL_cleanse(k, strlen(k));
	OPENSSL_cleanse(k4, sizeof k4);
	free(k);
	tf_hex_encode(sig, 32, out->signature);
	out->signed_headers = signed_hdrs;
	out->authorization = tf_xasprintf("AWS4-HMAC-SHA256 Credential=%s/%s, SignedHeaders=%s, "
	                                  "Signature=%s",
	                                  r->access_key, scope, signed_hdrs, out->signature);
	free(scope);
}

void tf_sigv4_release(struct tf_sigv4 *s)
{
	if (!s)
		return;
	free(s->canonical_request);
	free(s->string_to_sign);
	free(s->signed_headers);
	free(s->authorization);
	memset(s, 0, sizeof *s);
}

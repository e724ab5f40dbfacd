/* obj_s3.c — the s3:// object-store backend: S3's REST API over libcurl, SigV4 signed here.
 * One file of about 1,900 lines on purpose: every operation (get, put, multipart, list,
 * delete, head) goes through s3_do() and shares its signing, checksum, retry and error
 * classification state; none of it is used by anything but this backend.
 *
 * Every request goes through s3_do(), which signs, sends, classifies the answer and retries.
 * Invariants:
 *   1. What is signed is what is sent: the URL's path and query are built by the same
 *      encoder as the canonical request (sigv4.c), and the Host header is set explicitly.
 *   2. Uploads are checked by the server: the payload's SHA-256 is signed
 *      (x-amz-content-sha256) and the server hashes what it receives, so a body damaged on
 *      the way is refused (XAmzContentSHA256Mismatch / BadDigest) and sent again.
 *      Content-MD5 is sent too only when asked for (TPUFLOW_S3_CONTENT_MD5=1, for servers
 *      that do not check the signed hash). Each object also carries the CRC-32C of its whole
 *      content in x-amz-meta-tf-crc32c. A body's hashes are computed in one pass over
 *      cache-sized blocks.
 *   3. Downloads are checked here before anyone sees them: against that CRC-32C, else against
 *      the ETag when it is a plain MD5; a mismatch is retried like a 5xx, then is -EBADMSG.
 *   4. Retries: 5xx, 429, SlowDown, RequestTimeout, bad digests and connection errors are
 *      retried up to max_attempts with full-jitter exponential backoff (uniform in
 *      [0, min(cap, base * 2^attempt)]), drawing on a retry budget shared by the handle's
 *      threads (a success without retry refunds one), so a dead server fails fast.
 *   5. A multipart upload is completed only when every part was stored (and, with
 *      Content-MD5 on, its ETag equals the part's MD5); otherwise it is aborted
 *      (tf_objstore_gc_uploads cleans up after a crash).
 *   6. Write-once (TF_OBJ_IF_NONE_MATCH) sends If-None-Match: *; a server that answers 501
 *      (Swift) is remembered and the handle falls back to HEAD-then-PUT, which is racy
 *      between two writers of the same key (the checkpoint manager's random save ids keep
 *      its own writers apart).
 */
#define TF_LOG_TAG "s3"
#include "storage/objstore_int.h"

#include "common/common.h"
#include "common/crc32c.h"
#include "common/digest.h"
#include "common/log.h"
#include "storage/sigv4.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
#define META_CRC "x-amz-meta-tf-crc32c"
/* The type of every object: S3's for a PUT that names none. A multipart upload's create
 * request gives it explicitly, or the object would get the request's own: libcurl's
 * x-www-form-urlencoded for a POST, or (Swift's s3api) the completion's application/xml. */
#define OBJECT_TYPE "binary/octet-stream"
#define MIN_PART (5u << 20)
#define MAX_PARTS 10000
#define DEFAULT_PART_MIN (32u << 20)
#define DEFAULT_PART_MAX (64u << 20)
#define ERR_BODY_MAX (1u << 20)
#define HASH_BLOCK (256u << 10) /* hashing block: stays in L2 while all hashes read it */
#define XFER_BUF (512L << 10)   /* libcurl's send and receive buffers (its maximum) */
#define SINK_BUF (1u << 20)     /* downloads to a file are written in writes of this size */
#define WRITEBACK (8u << 20)    /* ... and their writeback started every this many bytes */

struct s3 {
	char *endpoint;   /* "http://127.0.0.1:18080", no trailing '/' */
	char *scheme;     /* "http" or "https" */
	char *hostport;   /* "127.0.0.1:18080" */
	char *bucket;     /* bucket name */
	char *prefix;     /* key prefix inside the bucket: "" or "dir/" */
	char *region;     /* signing region */
	char *access_key; /* may contain ':' */
	char *secret_key;
	char *token;        /* session token or NULL */
	int virtual_host;   /* 1: bucket.host/key, 0: host/bucket/key */
	size_t threshold;   /* multipart at or above this many bytes */
	size_t part_size;   /* bytes per part, 0: chosen per object (mp_part_size) */
	int parallel;       /* parts in flight */
	int max_attempts;   /* attempts per request */
	int list_page;      /* max-keys per listing request */
	double base, cap;   /* backoff base and cap, seconds */
	atomic_int budget;  /* retries left to spend */
	int budget_max;     /* the budget's ceiling */
	long connect_ms;    /* connect timeout */
	long low_speed_s;   /* seconds without progress before a transfer is dropped */
	int no_conditional; /* the server refused If-None-Match: * (501) */
	int content_md5;    /* also send Content-MD5 and check ETags against it */
	atomic_uint_fast64_t n_requests, n_retries, n_corrupt, n_up, n_down; /* tf_obj_stats */
	CURL *curl;          /* the handle's own connection (one thread at a time) */
	CURL *part_curl[64]; /* the part threads' connections, kept from one upload to the next */
};

/* One request. Strings are borrowed. */
struct s3_req {
	const char *method;      /* GET PUT POST DELETE HEAD */
	const char *key;         /* full key in the bucket, or NULL for the bucket itself */
	struct tf_sigv4_kv q[4]; /* query parameters (decoded) */
	size_t nq;
	struct tf_sigv4_kv h[4]; /* extra headers, sent and signed */
	size_t nh;
	const void *body; /* bytes to upload, or NULL with body_fd set */
	size_t body_len;
	int from_fd; /* 1: the body is body_len bytes of body_fd at body_off */
	int body_fd;
	uint64_t body_off;
	const char *sha256;       /* the body's SHA-256 (hex) if the caller has it, else NULL */
	int check_crc;            /* 1: the body must read as crc when sent (the hashes came from */
	uint32_t crc;             /*    an earlier read; a source that changed is not sent) */
	const char *content_md5;  /* Content-MD5 (base64) to send, or NULL */
	const char *content_type; /* of a POST body, or of the object a multipart create makes */
	int sink_fd;              /* >= 0: a 2xx body is written to this file */
	int verify;               /* check a 2xx body (invariant 3) */
};

/* One response (reset before every attempt). */
struct s3_resp {
	long status; /* HTTP status, 0 when none */
	char *body;  /* error bodies, and 2xx bodies when there is no sink */
	size_t len, cap;
	char etag[80]; /* without quotes */
	char crc[16];  /* x-amz-meta-tf-crc32c */
	char last_modified[64];
	uint64_t content_length;
	int has_length;
	char code[64];     /* S3 error code */
	char message[256]; /* S3 error message */
	int attempts;      /* attempts made */
	int read_errno;    /* the upload source could not be read */
	/* download bookkeeping */
	CURL *h;
	int sink_fd;
	char *wbuf;       /* SINK_BUF bytes gathering writes to sink_fd (kept on reset) */
	size_t wlen;      /* bytes in wbuf */
	uint64_t wpos;    /* bytes written to sink_fd */
	uint64_t synced;  /* bytes whose writeback was started */
	uint32_t crc_run; /* CRC-32C of the 2xx body so far */
	EVP_MD_CTX *md5;  /* MD5 of the 2xx body so far */
	uint64_t got;     /* 2xx body bytes */
	int write_errno;  /* local write failure */
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;

static void curl_init_once(void)
{
	curl_global_init(CURL_GLOBAL_DEFAULT);
}

static struct s3 *S3(struct tf_objstore *s)
{
	return s->impl;
}

/* ---- small helpers ---- */

/* The checksums of an upload body (invariant 2). */
struct sums {
	uint32_t crc;    /* CRC-32C */
	char sha[65];    /* SHA-256, hex: signed as x-amz-content-sha256 */
	int has_md5;     /* md5 and md5hex are set */
	char md5[25];    /* MD5, base64: Content-MD5 */
	char md5hex[33]; /* MD5, hex: compared with ETags */
};

/* What sums_compute computes. */
enum { SUM_CRC = 1, SUM_SHA = 2, SUM_MD5 = 4 };

/* Computes the sums in want (SUM_*) of len bytes of data, or of fd from offset off when data
 * is NULL, in one pass over HASH_BLOCK-sized blocks: every hash reads a block while it is
 * still in cache. The other fields of out are left alone. Returns 0, or a negative errno (-EIO
 * when the file is shorter than len). */
static int sums_compute(const char *data, int fd, uint64_t off, size_t len, unsigned want,
                        struct sums *out)
{
	EVP_MD_CTX *sha = want & SUM_SHA ? EVP_MD_CTX_new() : NULL;
	EVP_MD_CTX *md5 = want & SUM_MD5 ? EVP_MD_CTX_new() : NULL;
	char *buf = data ? NULL : tf_xmalloc(HASH_BLOCK);
	int rc = 0;
	if (((want & SUM_SHA) && !sha) || ((want & SUM_MD5) && !md5)) {
		rc = -ENOMEM;
		goto out;
	}
	if (sha)
		EVP_DigestInit_ex(sha, EVP_sha256(), NULL);
	if (md5)
		EVP_DigestInit_ex(md5, EVP_md5(), NULL);
	uint32_t crc = 0;
	for (size_t done = 0; done < len;) {
		size_t n = len - done < HASH_BLOCK ? len - done : HASH_BLOCK;
		const char *p;
		if (data) {
			p = data + done;
		} else {
			ssize_t got = pread(fd, buf, n, (off_t)(off + done));
			if (got < 0 && errno == EINTR)
				continue;
			if (got <= 0) {
				rc = got ? -errno : -EIO;
				goto out;
			}
			n = (size_t)got;
			p = buf;
		}
		if (want & SUM_CRC)
			crc = tf_crc32c_extend(crc, p, n);
		if (sha)
			EVP_DigestUpdate(sha, p, n);
		if (md5)
			EVP_DigestUpdate(md5, p, n);
		done += n;
	}
	unsigned char md[32];
	unsigned int mdlen = 0;
	if (sha) {
		EVP_DigestFinal_ex(sha, md, &mdlen);
		tf_hex_encode(md, 32, out->sha);
	}
	if (want & (SUM_SHA | SUM_MD5))
		out->has_md5 = md5 != NULL;
	if (md5) {
		EVP_DigestFinal_ex(md5, md, &mdlen);
		EVP_EncodeBlock((unsigned char *)out->md5, md, 16);
		tf_hex_encode(md, 16, out->md5hex);
	}
	if (want & SUM_CRC)
		out->crc = crc;
out:
	EVP_MD_CTX_free(sha);
	EVP_MD_CTX_free(md5);
	free(buf);
	return rc;
}

/* All of a body's sums: CRC-32C, SHA-256, and MD5 when want_md5. */
static int sums_all(const char *data, int fd, uint64_t off, size_t len, int want_md5,
                    struct sums *out)
{
	return sums_compute(data, fd, off, len, SUM_CRC | SUM_SHA | (want_md5 ? SUM_MD5 : 0u), out);
}

static double jitter_unit(void)
{
	static _Thread_local unsigned seed;
	if (!seed) {
		if (getrandom(&seed, sizeof seed, 0) != (ssize_t)sizeof seed)
			seed = (unsigned)(tf_now_wall() * 1e6);
		seed |= 1;
	}
	return (double)rand_r(&seed) / ((double)RAND_MAX + 1.0);
}

static void sleep_s(double sec)
{
	if (sec <= 0)
		return;
	struct timespec ts = {(time_t)sec, (long)((sec - (double)(time_t)sec) * 1e9)};
	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

static int is_hex32(const char *s)
{
	if (strlen(s) != 32)
		return 0;
	for (; *s; s++)
		if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f')))
			return 0;
	return 1;
}

/* Copies the text of the first <tag>...</tag> at or after p into out (entities decoded);
 * returns the pointer after the closing tag, or NULL. */
static const char *xml_get(const char *p, const char *end, const char *tag, char *out,
                           size_t outlen)
{
	char open[64], close[64];
	snprintf(open, sizeof open, "<%s>", tag);
	snprintf(close, sizeof close, "</%s>", tag);
	const char *a = memmem(p, (size_t)(end - p), open, strlen(open));
	if (!a)
		return NULL;
	a += strlen(open);
	const char *b = memmem(a, (size_t)(end - a), close, strlen(close));
	if (!b)
		return NULL;
	size_t o = 0;
	for (const char *c = a; c < b && o + 1 < outlen; c++) {
		if (*c == '&') {
			static const struct {
				const char *ent;
				char ch;
			} ents[] = {
			    {"&amp;", '&'},  {"&lt;", '<'},    {"&gt;", '>'},
			    {"&quot;", '"'}, {"&apos;", '\''},
			};
			size_t k;
			for (k = 0; k < TF_ARRAY_LEN(ents); k++) {
				size_t l = strlen(ents[k].ent);
				if ((size_t)(b - c) >= l && !memcmp(c, ents[k].ent, l)) {
					out[o++] = ents[k].ch;
					c += l - 1;
					break;
				}
			}
			if (k < TF_ARRAY_LEN(ents))
				continue;
			if (c[1] == '#') { /* numeric reference, ASCII range only */
				char *e;
				long v =
				    c[2] == 'x' ? strtol(c + 3, &e, 16) : strtol(c + 2, &e, 10);
				if (*e == ';' && v > 0 && v < 128) {
					out[o++] = (char)v;
					c = e;
					continue;
				}
			}
		}
		out[o++] = *c;
	}
	out[o] = '\0';
	return b + strlen(close);
}

/* "2026-11-29T23:40:09.000Z" -> seconds since the epoch (0 if unparsable). */
static double parse_iso8601(const char *s)
{
	struct tm tm;
	memset(&tm, 0, sizeof tm);
	const char *e = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
	if (!e)
		return 0;
	double frac = *e == '.' ? strtod(e, NULL) : 0;
	return (double)timegm(&tm) + frac;
}

/* "Sun, 29 Nov 2026 23:40:09 GMT" -> seconds since the epoch (0 if unparsable). */
static double parse_http_date(const char *s)
{
	struct tm tm;
	memset(&tm, 0, sizeof tm);
	if (!strptime(s, "%a, %d %b %Y %H:%M:%S", &tm))
		return 0;
	return (double)timegm(&tm);
}

/* ---- curl callbacks ---- */

static void body_append(struct s3_resp *r, const char *p, size_t n)
{
	if (r->len + n + 1 > r->cap) {
		r->cap = (r->len + n + 1) * 2;
		r->body = tf_xrealloc(r->body, r->cap);
	}
	memcpy(r->body + r->len, p, n);
	r->len += n;
	r->body[r->len] = '\0';
}

/* Writes to the download file; 0, or -1 with write_errno set. */
static int sink_write(struct s3_resp *r, const char *p, size_t len)
{
	while (len) {
		ssize_t w = write(r->sink_fd, p, len);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0) {
			r->write_errno = errno;
			return -1;
		}
		p += w;
		len -= (size_t)w;
		r->wpos += (uint64_t)w;
	}
	/* start writing back what is written (no wait), so the final fsync has little left;
	 * a failure here only means fsync does all the work */
	if (r->wpos - r->synced >= WRITEBACK) {
		sync_file_range(r->sink_fd, (off_t)r->synced, (off_t)(r->wpos - r->synced),
		                SYNC_FILE_RANGE_WRITE);
		r->synced = r->wpos;
	}
	return 0;
}

static int sink_flush(struct s3_resp *r)
{
	int rc = r->wlen ? sink_write(r, r->wbuf, r->wlen) : 0;
	r->wlen = 0;
	return rc;
}

static size_t on_body(char *p, size_t sz, size_t n, void *data)
{
	struct s3_resp *r = data;
	size_t len = sz * n;
	long st = 0;
	curl_easy_getinfo(r->h, CURLINFO_RESPONSE_CODE, &st);
	if (st >= 200 && st < 300) {
		if (r->md5 && r->crc[0]) { /* headers are in: the CRC-32C will do, skip MD5 */
			EVP_MD_CTX_free(r->md5);
			r->md5 = NULL;
		}
		r->crc_run = tf_crc32c_extend(r->crc_run, p, len);
		if (r->md5)
			EVP_DigestUpdate(r->md5, p, len);
		r->got += len;
		if (r->sink_fd >= 0) {
			/* libcurl hands over at most 16 KiB at a time: gather them */
			if (r->wlen + len > SINK_BUF && sink_flush(r))
				return 0;
			if (len >= SINK_BUF)
				return sink_write(r, p, len) ? 0 : len;
			memcpy(r->wbuf + r->wlen, p, len);
			r->wlen += len;
			return len;
		}
		if (!r->body && r->has_length && r->content_length <= ((uint64_t)1 << 30)) {
			/* the size is known: one allocation, no regrowth (bounded: a size the
			 * server claims is not trusted beyond what untouched pages cost) */
			r->cap = (size_t)r->content_length + 1;
			r->body = tf_xmalloc(r->cap);
		}
	} else if (r->len + len > ERR_BODY_MAX) {
		return len; /* keep the start of an oversized error body */
	}
	body_append(r, p, len);
	return len;
}

static size_t on_header(char *p, size_t sz, size_t n, void *data)
{
	struct s3_resp *r = data;
	size_t len = sz * n;
	if (len >= 5 && !memcmp(p, "HTTP/", 5)) { /* a new response (e.g. after 100) */
		r->etag[0] = r->crc[0] = r->last_modified[0] = '\0';
		r->has_length = 0;
		return len;
	}
	const char *colon = memchr(p, ':', len);
	if (!colon)
		return len;
	size_t nlen = (size_t)(colon - p);
	const char *v = colon + 1, *end = p + len;
	while (v < end && (*v == ' ' || *v == '\t'))
		v++;
	while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' '))
		end--;
	size_t vlen = (size_t)(end - v);
	char *dst = NULL;
	size_t dlen = 0;
	if (nlen == 4 && !strncasecmp(p, "etag", 4)) {
		if (vlen >= 2 && v[0] == '"' && end[-1] == '"') {
			v++;
			vlen -= 2;
		}
		dst = r->etag;
		dlen = sizeof r->etag;
	} else if (nlen == strlen(META_CRC) && !strncasecmp(p, META_CRC, nlen)) {
		dst = r->crc;
		dlen = sizeof r->crc;
	} else if (nlen == 13 && !strncasecmp(p, "last-modified", 13)) {
		dst = r->last_modified;
		dlen = sizeof r->last_modified;
	} else if (nlen == 14 && !strncasecmp(p, "content-length", 14)) {
		r->content_length = strtoull(v, NULL, 10);
		r->has_length = 1;
	}
	if (dst) {
		if (vlen >= dlen)
			vlen = dlen - 1;
		memcpy(dst, v, vlen);
		dst[vlen] = '\0';
	}
	return len;
}

/* Upload source for one attempt: memory, or a file read straight into libcurl's buffer. */
struct upload {
	const char *p;   /* memory source: the next byte, or NULL */
	int fd;          /* file source when p is NULL */
	uint64_t off;    /* next file offset */
	size_t left;     /* bytes still to send */
	int *read_errno; /* where a read failure is reported (ESTALE: the source changed) */
	const char *p0;  /* where the memory source starts (for rewinding) */
	uint64_t off0;   /* where the file source starts */
	size_t len;      /* the body's length */
	int check;       /* compare the CRC-32C of the bytes sent with want before the last one */
	uint32_t want, crc;
};

/* libcurl rewinds the body when it must send it again within one request (a reused
 * connection that turned out closed, an early answer). */
static int on_seek(void *data, curl_off_t offset, int origin)
{
	struct upload *u = data;
	if (origin != SEEK_SET || offset < 0 || (uint64_t)offset > u->len ||
	    (u->check && offset)) /* the running CRC restarts from the first byte only */
		return CURL_SEEKFUNC_CANTSEEK;
	u->crc = 0;
	if (u->p0)
		u->p = u->p0 + offset;
	else
		u->off = u->off0 + (uint64_t)offset;
	u->left = u->len - (size_t)offset;
	return CURL_SEEKFUNC_OK;
}

static size_t on_read(char *buf, size_t sz, size_t n, void *data)
{
	struct upload *u = data;
	size_t len = sz * n;
	if (len > u->left)
		len = u->left;
	if (!len)
		return 0;
	if (u->p) {
		memcpy(buf, u->p, len);
		u->p += len;
	} else {
		ssize_t got;
		while ((got = pread(u->fd, buf, len, (off_t)u->off)) < 0 && errno == EINTR)
			;
		if (got <= 0) {
			*u->read_errno = got ? errno : EIO; /* EIO: the file shrank */
			return CURL_READFUNC_ABORT;
		}
		len = (size_t)got;
		u->off += len;
	}
	u->left -= len;
	if (u->check) {
		u->crc = tf_crc32c_extend(u->crc, buf, len);
		if (!u->left &&
		    u->crc != u->want) { /* withhold the last bytes: nothing is stored */
			*u->read_errno = ESTALE;
			return CURL_READFUNC_ABORT;
		}
	}
	return len;
}

/* ---- one request, with retries ---- */

static void resp_reset(struct s3_resp *r, CURL *h, int sink_fd, int verify)
{
	free(r->body);
	if (r->md5)
		EVP_MD_CTX_free(r->md5);
	int attempts = r->attempts;
	char *wbuf = r->wbuf;
	memset(r, 0, sizeof *r);
	r->attempts = attempts;
	r->h = h;
	r->sink_fd = sink_fd;
	if (sink_fd >= 0)
		r->wbuf = wbuf ? wbuf : tf_xmalloc(SINK_BUF);
	else
		free(wbuf);
	if (verify) {
		r->md5 = EVP_MD_CTX_new();
		EVP_DigestInit_ex(r->md5, EVP_md5(), NULL);
	}
}

static void resp_release(struct s3_resp *r)
{
	free(r->body);
	free(r->wbuf);
	if (r->md5)
		EVP_MD_CTX_free(r->md5);
	memset(r, 0, sizeof *r);
}

/* The request's host and decoded path (invariant 1). */
static void target(const struct s3 *s3, const char *key, char **host, char **path)
{
	if (s3->virtual_host) {
		*host = tf_xasprintf("%s.%s", s3->bucket, s3->hostport);
		*path = tf_xasprintf("/%s", key ? key : "");
	} else {
		*host = tf_xstrdup(s3->hostport);
		*path =
		    key ? tf_xasprintf("/%s/%s", s3->bucket, key) : tf_xasprintf("/%s", s3->bucket);
	}
}

static CURLcode perform(struct s3 *s3, CURL *h, const struct s3_req *r, const char *sha256,
                        const char *md5, struct s3_resp *resp)
{
	char *host, *path;
	target(s3, r->key, &host, &path);
	char amz_date[17];
	tf_sigv4_amz_date(tf_now_wall(), amz_date);

	struct tf_sigv4_kv sh[12];
	size_t nsh = 0;
	sh[nsh++] = (struct tf_sigv4_kv){"host", host};
	sh[nsh++] = (struct tf_sigv4_kv){"x-amz-date", amz_date};
	sh[nsh++] = (struct tf_sigv4_kv){"x-amz-content-sha256", sha256};
	if (md5)
		sh[nsh++] = (struct tf_sigv4_kv){"content-md5", md5};
	if (s3->token)
		sh[nsh++] = (struct tf_sigv4_kv){"x-amz-security-token", s3->token};
	for (size_t i = 0; i < r->nh; i++)
		sh[nsh++] = r->h[i];
	struct tf_sigv4_req sr = {
	    .method = r->method,
	    .path = path,
	    .query = r->q,
	    .nquery = r->nq,
	    .headers = sh,
	    .nheaders = nsh,
	    .payload_sha256 = sha256,
	    .amz_date = amz_date,
	    .region = s3->region,
	    .service = "s3",
	    .access_key = s3->access_key,
	    .secret_key = s3->secret_key,
	};
	struct tf_sigv4 sig;
	tf_sigv4_sign(&sr, &sig);

	char *epath = tf_sigv4_uri_encode(path, 1);
	char *qs = tf_sigv4_query_string(r->q, r->nq);
	char *url = tf_xasprintf("%s://%s%s%s%s", s3->scheme, host, epath, *qs ? "?" : "", qs);
	struct curl_slist *hl = NULL;
	for (size_t i = 0; i < nsh; i++) {
		char *line = tf_xasprintf("%s: %s", sh[i].name, sh[i].value);
		hl = curl_slist_append(hl, line);
		free(line);
	}
	char *auth = tf_xasprintf("Authorization: %s", sig.authorization);
	hl = curl_slist_append(hl, auth);
	hl = curl_slist_append(hl, "Expect:");
	char *ctype = NULL;
	if (r->content_type) {
		ctype = tf_xasprintf("Content-Type: %s", r->content_type);
		hl = curl_slist_append(hl, ctype);
	}

	curl_easy_reset(h);
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, s3->connect_ms);
	curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
	curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, s3->low_speed_s);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, resp);
	curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(h, CURLOPT_HEADERDATA, resp);
	curl_easy_setopt(h, CURLOPT_USERAGENT, "tpuflow/" TF_VERSION);
	curl_easy_setopt(h, CURLOPT_BUFFERSIZE, XFER_BUF);
	const char *mem = r->from_fd ? NULL : r->body ? r->body : "";
	struct upload up = {.p = mem,
	                    .fd = r->body_fd,
	                    .off = r->body_off,
	                    .left = r->body_len,
	                    .read_errno = &resp->read_errno,
	                    .p0 = mem,
	                    .off0 = r->body_off,
	                    .len = r->body_len,
	                    .check = r->check_crc,
	                    .want = r->crc};
	if (!strcmp(r->method, "PUT")) {
		curl_easy_setopt(h, CURLOPT_UPLOAD_BUFFERSIZE, XFER_BUF);
		curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
		curl_easy_setopt(h, CURLOPT_READFUNCTION, on_read);
		curl_easy_setopt(h, CURLOPT_READDATA, &up);
		curl_easy_setopt(h, CURLOPT_SEEKFUNCTION, on_seek);
		curl_easy_setopt(h, CURLOPT_SEEKDATA, &up);
		curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, (curl_off_t)r->body_len);
	} else if (!strcmp(r->method, "POST")) {
		curl_easy_setopt(h, CURLOPT_POST, 1L);
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, r->body ? (const char *)r->body : "");
		curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)r->body_len);
	} else if (!strcmp(r->method, "HEAD")) {
		curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
	} else if (strcmp(r->method, "GET")) {
		curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, r->method);
	}
	CURLcode cc = curl_easy_perform(h);
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &resp->status);
	if (resp->sink_fd >= 0 && !resp->write_errno)
		sink_flush(resp);
	if (resp->status >= 300 && resp->body) {
		const char *end = resp->body + resp->len;
		xml_get(resp->body, end, "Code", resp->code, sizeof resp->code);
		xml_get(resp->body, end, "Message", resp->message, sizeof resp->message);
	}
	curl_slist_free_all(hl);
	free(ctype);
	free(auth);
	free(url);
	free(qs);
	free(epath);
	tf_sigv4_release(&sig);
	free(host);
	free(path);
	return cc;
}

static int curl_retryable(CURLcode cc)
{
	switch (cc) {
	case CURLE_URL_MALFORMAT:
	case CURLE_UNSUPPORTED_PROTOCOL:
	case CURLE_WRITE_ERROR:
	case CURLE_READ_ERROR:
	case CURLE_OUT_OF_MEMORY:
	case CURLE_PEER_FAILED_VERIFICATION:
	case CURLE_SSL_CERTPROBLEM:
	case CURLE_SSL_CACERT_BADFILE:
	case CURLE_ABORTED_BY_CALLBACK:
		return 0;
	default:
		return 1;
	}
}

static int curl_errno(CURLcode cc)
{
	switch (cc) {
	case CURLE_COULDNT_CONNECT:
		return -ECONNREFUSED;
	case CURLE_OPERATION_TIMEDOUT:
		return -ETIMEDOUT;
	case CURLE_COULDNT_RESOLVE_HOST:
		return -EHOSTUNREACH;
	default:
		return -EIO;
	}
}

static int status_retryable(const struct s3_resp *r)
{
	if (r->status == 500 || r->status == 502 || r->status == 503 || r->status == 504 ||
	    r->status == 429 || r->status == 408)
		return 1;
	if (r->status == 400)
		return !strcmp(r->code, "RequestTimeout") || !strcmp(r->code, "BadDigest") ||
		       !strcmp(r->code, "XAmzContentSHA256Mismatch") ||
		       !strcmp(r->code, "IncompleteBody");
	return !strcmp(r->code, "SlowDown");
}

/* Checks a 2xx download (invariant 3); 0 ok, 1 mismatch. */
static int download_bad(const struct s3_resp *r, char *why, size_t whylen)
{
	if (r->has_length && r->got != r->content_length) {
		snprintf(why, whylen, "short body (%" PRIu64 " of %" PRIu64 " bytes)", r->got,
		         r->content_length);
		return 1;
	}
	if (r->crc[0]) {
		char got[9];
		snprintf(got, sizeof got, "%08x", r->crc_run);
		if (strcasecmp(got, r->crc)) {
			snprintf(why, whylen, "corrupt body (crc32c %s, object says %s)", got,
			         r->crc);
			return 1;
		}
		return 0;
	}
	if (r->md5 && is_hex32(r->etag)) {
		unsigned char md[16];
		unsigned int n = 0;
		char hexs[33];
		EVP_MD_CTX *c = EVP_MD_CTX_new();
		EVP_MD_CTX_copy_ex(c, r->md5);
		EVP_DigestFinal_ex(c, md, &n);
		EVP_MD_CTX_free(c);
		tf_hex_encode(md, 16, hexs);
		if (strcmp(hexs, r->etag)) {
			snprintf(why, whylen, "corrupt body (md5 %s, ETag %s)", hexs, r->etag);
			return 1;
		}
	}
	return 0;
}

static int budget_take(struct s3 *s3)
{
	int b = atomic_load(&s3->budget);
	while (b > 0)
		if (atomic_compare_exchange_weak(&s3->budget, &b, b - 1))
			return 1;
	return 0;
}

static void budget_refund(struct s3 *s3)
{
	int b = atomic_load(&s3->budget);
	while (b < s3->budget_max)
		if (atomic_compare_exchange_weak(&s3->budget, &b, b + 1))
			return;
}

static const char *shown_key(const struct s3_req *r)
{
	return r->key ? r->key : "";
}

/* Sends r until it gets a final answer (invariant 4). Returns 0 with resp holding the final
 * HTTP response (any status: the caller interprets it), or a negative code with err set when
 * the transfer itself kept failing. */
static int s3_do(struct s3 *s3, CURL *h, const struct s3_req *r, struct s3_resp *resp, char *err,
                 size_t errlen)
{
	char sha[65];
	const char *sha256 = r->sha256 ? r->sha256 : EMPTY_SHA256;
	if (!r->sha256 && r->body_len) { /* small bodies (XML); large ones come hashed */
		tf_sha256_hex(r->body, r->body_len, sha);
		sha256 = sha;
	}
	memset(resp, 0, sizeof *resp);
	for (int attempt = 1;; attempt++) {
		if (r->sink_fd >= 0 && attempt > 1 &&
		    (ftruncate(r->sink_fd, 0) || lseek(r->sink_fd, 0, SEEK_SET))) {
			tf_errf(err, errlen, "cannot rewind the download file: %s",
			        strerror(errno));
			return -errno;
		}
		resp_reset(resp, h, r->sink_fd, r->verify);
		resp->attempts = attempt;
		CURLcode cc = perform(s3, h, r, sha256, r->content_md5, resp);
		atomic_fetch_add(&s3->n_requests, 1);
		if (attempt > 1)
			atomic_fetch_add(&s3->n_retries, 1);
		char why[256];
		int rc;
		if (resp->write_errno) {
			tf_errf(err, errlen, "cannot write the download of '%s': %s", shown_key(r),
			        strerror(resp->write_errno));
			return -resp->write_errno;
		}
		if (resp->read_errno == ESTALE) {
			tf_errf(err, errlen,
			        "the data for '%s' changed while it was being uploaded: upload it "
			        "again once it is complete",
			        shown_key(r));
			return -EIO;
		}
		if (resp->read_errno) {
			tf_errf(err, errlen, "cannot read the upload of '%s': %s", shown_key(r),
			        resp->read_errno == EIO ? "the file shrank"
			                                : strerror(resp->read_errno));
			return -resp->read_errno;
		}
		if (cc != CURLE_OK) {
			rc = curl_errno(cc);
			snprintf(why, sizeof why, "%s", curl_easy_strerror(cc));
			if (!curl_retryable(cc)) {
				tf_errf(err, errlen, "%s %s/%s failed: %s", r->method, s3->endpoint,
				        s3->bucket, why);
				return rc;
			}
		} else if (status_retryable(resp)) {
			rc = -EAGAIN;
			snprintf(why, sizeof why, "HTTP %ld%s%s", resp->status,
			         resp->code[0] ? " " : "", resp->code);
		} else if (resp->status >= 200 && resp->status < 300 && r->verify &&
		           download_bad(resp, why, sizeof why)) {
			rc = -EBADMSG;
			atomic_fetch_add(&s3->n_corrupt, 1);
			tf_warn("GET '%s': %s; reading it again", shown_key(r), why);
		} else {
			if (attempt == 1)
				budget_refund(s3);
			if (resp->status >= 200 && resp->status < 300) {
				atomic_fetch_add(&s3->n_up, r->body_len);
				atomic_fetch_add(&s3->n_down, resp->got);
			}
			return 0;
		}
		if (attempt >= s3->max_attempts) {
			tf_errf(err, errlen, "%s '%s' at %s failed %d times, last: %s", r->method,
			        shown_key(r), s3->endpoint, attempt, why);
			return rc;
		}
		if (!budget_take(s3)) {
			snprintf(
			    err, errlen,
			    "%s '%s' at %s failed (%s) and the retry budget is spent: the server "
			    "keeps failing, try again later",
			    r->method, shown_key(r), s3->endpoint, why);
			return rc;
		}
		double ceil = s3->base * (double)(1u << (attempt < 20 ? attempt : 20));
		if (ceil > s3->cap)
			ceil = s3->cap;
		double delay = jitter_unit() * ceil;
		tf_debug("%s '%s': %s; retry %d in %.3f s", r->method, shown_key(r), why, attempt,
		         delay);
		sleep_s(delay);
	}
}

/* Turns a final non-2xx answer into a code and a message for people (into err). url is the
 * store's URL, key the caller's key. */
static int http_error_msg(const struct s3 *s3, const char *url, const struct s3_resp *r,
                          const char *what, const char *key, char *err, size_t errlen)
{
	const char *code = r->code[0] ? r->code : "";
	if (!key)
		key = "";
	if (r->status == 403 && !strcmp(code, "AccessDenied")) {
		tf_errf(err, errlen,
		        "access to '%s' in bucket '%s' was denied by %s (AccessDenied): check the "
		        "bucket's policy",
		        key, s3->bucket, s3->endpoint);
		return -EACCES;
	}
	if (r->status == 403) {
		tf_errf(err, errlen,
		        "the credentials were rejected by %s (%s): check AWS_ACCESS_KEY_ID and "
		        "AWS_SECRET_ACCESS_KEY",
		        s3->endpoint, code[0] ? code : "HTTP 403");
		return -EACCES;
	}
	if (r->status == 404 && !strcmp(code, "NoSuchBucket")) {
		snprintf(
		    err, errlen,
		    "bucket '%s' does not exist at %s: create it (tpuflow store mb s3://%s) or "
		    "fix the URL",
		    s3->bucket, s3->endpoint, s3->bucket);
		return -ENOENT;
	}
	if (r->status == 404) {
		tf_errf(err, errlen, "no object '%s' in %s", key, url);
		return -ENOENT;
	}
	if (r->status == 412) {
		tf_errf(err, errlen, "object '%s' already exists in %s (write-once)", key, url);
		return -EEXIST;
	}
	if (r->status == 501) {
		tf_errf(err, errlen, "%s '%s': %s does not implement this (%s: %s)", what, key,
		        s3->endpoint, code, r->message);
		return -ENOTSUP;
	}
	tf_errf(err, errlen, "%s '%s' failed at %s: HTTP %ld %s%s%s", what, key, s3->endpoint,
	        r->status, code, r->message[0] ? ": " : "", r->message);
	return r->status == 400 ? -EINVAL : -EIO;
}

static int http_error(struct tf_objstore *s, const struct s3_resp *r, const char *what,
                      const char *key)
{
	return http_error_msg(S3(s), s->url, r, what, key, s->err, sizeof s->err);
}

/* Runs a request on the handle's own connection; transfer failures set s->err. */
static int run(struct tf_objstore *s, const struct s3_req *r, struct s3_resp *resp)
{
	struct s3 *s3 = S3(s);
	char err[512];
	int rc = s3_do(s3, s3->curl, r, resp, err, sizeof err);
	if (rc)
		tf_objstore_seterr(s, rc, "%s", err);
	return rc;
}

static char *full_key(const struct s3 *s3, const char *key)
{
	return tf_xasprintf("%s%s", s3->prefix, key);
}

/* ---- open ---- */

static const char *env(const char *name)
{
	const char *v = getenv(name);
	return v && *v ? v : NULL;
}

/* A byte count from the environment ("8388608", "8M", "64MiB"); 0 when unset or invalid. */
static size_t env_size(const char *name)
{
	const char *v = env(name);
	if (!v)
		return 0;
	char *end;
	unsigned long long n = strtoull(v, &end, 10);
	if (*end == 'K' || *end == 'k')
		n <<= 10;
	else if (*end == 'M' || *end == 'm')
		n <<= 20;
	else if (*end == 'G' || *end == 'g')
		n <<= 30;
	return end == v ? 0 : (size_t)n;
}

static void s3_free(struct tf_objstore *s)
{
	struct s3 *s3 = s->impl;
	if (s3->curl)
		curl_easy_cleanup(s3->curl);
	for (size_t i = 0; i < TF_ARRAY_LEN(s3->part_curl); i++)
		if (s3->part_curl[i])
			curl_easy_cleanup(s3->part_curl[i]);
	free(s3->endpoint);
	free(s3->scheme);
	free(s3->hostport);
	free(s3->bucket);
	free(s3->prefix);
	free(s3->region);
	free(s3->access_key);
	if (s3->secret_key) {
		memset(s3->secret_key, 0, strlen(s3->secret_key));
		free(s3->secret_key);
	}
	free(s3->token);
	free(s3);
	s->impl = NULL;
}

int tf_objstore_s3_open(struct tf_objstore *s, const char *bucket_and_prefix,
                        const struct tf_objstore_opts *o, char *err, size_t errlen)
{
	pthread_once(&curl_once, curl_init_once);
	const char *slash = strchr(bucket_and_prefix, '/');
	size_t blen = slash ? (size_t)(slash - bucket_and_prefix) : strlen(bucket_and_prefix);
	if (blen == 0 || blen > 255) {
		tf_errf(err, errlen, "no bucket in 's3://%s': use s3://BUCKET[/PREFIX]",
		        bucket_and_prefix);
		return -EINVAL;
	}
	char *prefix = tf_xstrdup(slash ? slash + 1 : "");
	size_t plen = strlen(prefix);
	while (plen && prefix[plen - 1] == '/')
		prefix[--plen] = '\0';
	if (plen && tf_objstore_key_check(prefix)) {
		tf_errf(err, errlen, "invalid prefix '%s' in 's3://%s'", prefix, bucket_and_prefix);
		free(prefix);
		return -EINVAL;
	}
	const char *region = o->region ? o->region : env("AWS_REGION");
	if (!region)
		region = env("AWS_DEFAULT_REGION");
	if (!region)
		region = "us-east-1";
	const char *ak = o->access_key ? o->access_key : env("AWS_ACCESS_KEY_ID");
	const char *sk = o->secret_key ? o->secret_key : env("AWS_SECRET_ACCESS_KEY");
	const char *tok = o->session_token ? o->session_token : env("AWS_SESSION_TOKEN");
	if (!ak || !sk) {
		tf_errf(err, errlen,
		        "no S3 credentials for 's3://%s': set AWS_ACCESS_KEY_ID and "
		        "AWS_SECRET_ACCESS_KEY",
		        bucket_and_prefix);
		free(prefix);
		return -EACCES;
	}
	const char *ep = o->endpoint ? o->endpoint : env("AWS_ENDPOINT_URL_S3");
	if (!ep)
		ep = env("AWS_ENDPOINT_URL");
	char *endpoint = ep ? tf_xstrdup(ep) : tf_xasprintf("https://s3.%s.amazonaws.com", region);
	size_t elen = strlen(endpoint);
	while (elen && endpoint[elen - 1] == '/')
		endpoint[--elen] = '\0';
	const char *sep = strstr(endpoint, "://");
	if (!sep || (strncmp(endpoint, "http://", 7) && strncmp(endpoint, "https://", 8)) ||
	    !sep[3] || strchr(sep + 3, '/')) {
		tf_errf(err, errlen, "invalid S3 endpoint '%s': use http(s)://HOST[:PORT]",
		        endpoint);
		free(endpoint);
		free(prefix);
		return -EINVAL;
	}
	struct s3 *s3 = tf_xcalloc(1, sizeof *s3);
	s3->endpoint = endpoint;
	s3->scheme = tf_xasprintf("%.*s", (int)(sep - endpoint), endpoint);
	s3->hostport = tf_xstrdup(sep + 3);
	s3->bucket = tf_xasprintf("%.*s", (int)blen, bucket_and_prefix);
	s3->prefix = plen ? tf_xasprintf("%s/", prefix) : tf_xstrdup("");
	s3->region = tf_xstrdup(region);
	s3->access_key = tf_xstrdup(ak);
	s3->secret_key = tf_xstrdup(sk);
	s3->token = tok ? tf_xstrdup(tok) : NULL;
	int addressing = o->addressing;
	const char *as = env("TPUFLOW_S3_ADDRESSING");
	if (!addressing && as)
		addressing = !strcmp(as, "virtual") ? 2 : !strcmp(as, "path") ? 1 : 0;
	if (!addressing)
		addressing = ep || strchr(s3->bucket, '.') ? 1 : 2;
	s3->virtual_host = addressing == 2;
	size_t env_part = env_size("TPUFLOW_S3_PART_SIZE");
	size_t env_threshold = env_size("TPUFLOW_S3_MULTIPART_THRESHOLD");
	size_t env_parallel = env_size("TPUFLOW_S3_PARALLEL");
	s3->part_size = o->part_size ? o->part_size : env_part; /* 0: mp_part_size picks */
	if (s3->part_size && s3->part_size < MIN_PART)
		s3->part_size = MIN_PART;
	s3->threshold = o->multipart_threshold ? o->multipart_threshold
	                : env_threshold        ? env_threshold
	                                       : 8u << 20;
	if (s3->threshold < MIN_PART)
		s3->threshold = MIN_PART;
	s3->parallel = o->parallel > 0 ? o->parallel : env_parallel ? (int)env_parallel : 4;
	if (s3->parallel > 64)
		s3->parallel = 64;
	s3->max_attempts = o->max_attempts > 0 ? o->max_attempts : 5;
	s3->base = o->retry_base > 0 ? o->retry_base : 0.1;
	s3->cap = o->retry_cap > 0 ? o->retry_cap : 20.0;
	s3->budget_max = o->retry_budget > 0 ? o->retry_budget : 500;
	atomic_init(&s3->budget, s3->budget_max);
	s3->connect_ms = (long)((o->connect_timeout > 0 ? o->connect_timeout : 10.0) * 1000);
	s3->low_speed_s = (long)(o->timeout > 0 ? o->timeout : 60.0);
	if (s3->low_speed_s < 1)
		s3->low_speed_s = 1;
	const char *cm = env("TPUFLOW_S3_CONTENT_MD5");
	s3->content_md5 = cm && strcmp(cm, "0");
	s3->list_page = o->list_page > 0 && o->list_page <= 1000 ? o->list_page : 1000;
	s3->curl = curl_easy_init();
	s->impl = s3;
	s->ops = &tf_objstore_s3_ops;
	s->url = plen ? tf_xasprintf("s3://%s/%s", s3->bucket, prefix)
	              : tf_xasprintf("s3://%s", s3->bucket);
	free(prefix);
	if (!s3->curl) {
		tf_errf(err, errlen, "cannot initialise libcurl");
		return -ENOMEM;
	}
	return 0;
}

/* ---- HEAD ---- */

static int head_key(struct tf_objstore *s, const char *fkey, const char *key,
                    struct tf_obj_info *info)
{
	struct s3_req r = {.method = "HEAD", .key = fkey, .sink_fd = -1};
	struct s3_resp resp;
	int rc = run(s, &r, &resp);
	if (!rc && resp.status != 200)
		rc = http_error(s, &resp, "HEAD", key);
	if (!rc) {
		info->size = resp.content_length;
		info->mtime = parse_http_date(resp.last_modified);
		snprintf(info->etag, sizeof info->etag, "%s", resp.etag);
		if (resp.crc[0]) {
			info->crc32c = (uint32_t)strtoul(resp.crc, NULL, 16);
			info->has_crc32c = 1;
		}
	}
	resp_release(&resp);
	return rc;
}

static int s3_head(struct tf_objstore *s, const char *key, struct tf_obj_info *info)
{
	char *fkey = full_key(S3(s), key);
	int rc = head_key(s, fkey, key, info);
	free(fkey);
	return rc;
}

/* After an ambiguous answer (a retried write reported "exists" or "no such upload"): is the
 * object there with exactly our content? */
static int landed(struct tf_objstore *s, const char *fkey, const char *key, uint64_t size,
                  uint32_t crc)
{
	struct tf_obj_info info;
	memset(&info, 0, sizeof info);
	char saved[sizeof s->err];
	memcpy(saved, s->err, sizeof saved);
	int ok = !head_key(s, fkey, key, &info) && info.size == size && info.has_crc32c &&
	         info.crc32c == crc;
	memcpy(s->err, saved, sizeof saved);
	return ok;
}

/* ---- PUT (single request) ---- */

/* Write-once without server support: 0 when key is absent, -EEXIST when present. */
static int absent(struct tf_objstore *s, const char *fkey, const char *key)
{
	struct tf_obj_info info;
	int rc = head_key(s, fkey, key, &info);
	if (rc == -ENOENT) {
		s->err[0] = '\0';
		return 0;
	}
	if (!rc)
		rc = tf_objstore_seterr(s, -EEXIST, "object '%s' already exists in %s (write-once)",
		                        key, s->url);
	return rc;
}

/* One PUT of len bytes of data, or of fd from offset 0 when data is NULL (streamed into the
 * request); sums are the body's checksums. */
static int put_single(struct tf_objstore *s, const char *key, const void *data, int fd, size_t len,
                      const struct sums *sums, unsigned flags)
{
	struct s3 *s3 = S3(s);
	char *fkey = full_key(s3, key);
	uint32_t crc = sums->crc;
	char crchex[9];
	snprintf(crchex, sizeof crchex, "%08x", crc);
	struct s3_req r = {.method = "PUT",
	                   .key = fkey,
	                   .body = data,
	                   .body_len = len,
	                   .from_fd = !data,
	                   .body_fd = fd,
	                   .sha256 = sums->sha,
	                   .check_crc = 1,
	                   .crc = crc,
	                   .content_md5 = sums->has_md5 ? sums->md5 : NULL,
	                   .sink_fd = -1};
	r.h[r.nh++] = (struct tf_sigv4_kv){META_CRC, crchex};
	struct s3_resp resp;
	memset(&resp, 0, sizeof resp);
	int once = (flags & TF_OBJ_IF_NONE_MATCH) != 0, rc = 0;
	if (once && s3->no_conditional && (rc = absent(s, fkey, key)))
		goto out;
	int conditional = once && !s3->no_conditional;
	if (conditional)
		r.h[r.nh++] = (struct tf_sigv4_kv){"if-none-match", "*"};
	rc = run(s, &r, &resp);
	if (!rc && conditional && resp.status == 501) {
		/* invariant 6: remember, and fall back to HEAD-then-PUT */
		tf_info("%s refuses If-None-Match on PUT (%s); write-once falls back to a HEAD "
		        "check",
		        s3->endpoint, resp.code);
		s3->no_conditional = 1;
		r.nh--;
		resp_release(&resp);
		if ((rc = absent(s, fkey, key)))
			goto out;
		rc = run(s, &r, &resp);
	}
	if (rc)
		goto out;
	if (resp.status == 412 && resp.attempts > 1 && landed(s, fkey, key, len, crc))
		goto out; /* our own earlier attempt landed; its answer was lost */
	if (resp.status != 200) {
		rc = http_error(s, &resp, "PUT", key);
		goto out;
	}
	if (sums->has_md5 && is_hex32(resp.etag) && strcmp(resp.etag, sums->md5hex))
		rc = tf_objstore_seterr(
		    s, -EBADMSG, "PUT '%s': %s stored different bytes (ETag %s, sent MD5 %s)", key,
		    s3->endpoint, resp.etag, sums->md5hex);
out:
	resp_release(&resp);
	free(fkey);
	return rc;
}

/* ---- multipart upload (invariant 5) ---- */

/* Shared by the part workers. The upload goes in two passes over the parts:
 *   1. the CRC pass: every thread takes parts and computes their CRC-32C; the object's CRC,
 *      which the upload's metadata carries, is combined from them, then the upload is
 *      created (the initiate request);
 *   2. the part pass: each part thread takes a part, hashes it (SHA-256, the signed
 *      x-amz-content-sha256, and MD5 when asked for) and sends it. Hashing needs nothing from
 *      the server, so the first parts are hashed while the initiate is on its way and later
 *      parts while earlier ones are sent. The hashing read checks the part's CRC against the
 *      CRC pass, and so does the sending read as it goes (on_read): a part whose bytes
 *      changed since the CRC pass is not sent. A retried part keeps its hashes (the retry
 *      reads the part again, checked against the same CRC). */
struct mp {
	struct s3 *s3;
	const char *url;  /* the store's URL, for messages */
	const char *key;  /* the caller's key, for messages */
	const char *fkey; /* full key */
	const char *upload_id;
	const char *data; /* memory source, or NULL */
	int fd;           /* file source when data is NULL */
	uint64_t total;   /* object size */
	size_t part_size;
	int nparts;
	int content_md5;      /* send Content-MD5 and check each part's ETag against it */
	atomic_int next_crc;  /* next part index for the CRC pass */
	atomic_int next;      /* next part index to hash and send */
	atomic_int slot;      /* next entry of s3->part_curl for a starting worker */
	atomic_int failed;    /* set once any part failed */
	char (*etags)[80];    /* per part */
	uint32_t *crcs;       /* per part, from the CRC pass */
	pthread_mutex_t lock; /* guards rc, err, crc_done and ready */
	pthread_cond_t cond;  /* signalled when crc_done or ready changes */
	int crc_done;         /* parts through the CRC pass (or failed to be) */
	int ready;            /* the upload was created (or failed to be): parts may go */
	int rc;               /* first failure */
	char err[512];
};

static void mp_fail(struct mp *m, int rc, const char *err)
{
	pthread_mutex_lock(&m->lock);
	if (!m->rc) {
		m->rc = rc;
		snprintf(m->err, sizeof m->err, "%s", err);
	}
	pthread_mutex_unlock(&m->lock);
	atomic_store(&m->failed, 1);
}

static size_t mp_part_len(const struct mp *m, int i)
{
	uint64_t off = (uint64_t)i * m->part_size;
	return m->total - off < m->part_size ? (size_t)(m->total - off) : m->part_size;
}

static void mp_fail_read(struct mp *m, int i, int rc)
{
	char err[512];
	snprintf(err, sizeof err, "cannot read part %d of the upload of '%s': %s", i + 1, m->key,
	         rc == -EIO ? "the file shrank" : strerror(-rc));
	mp_fail(m, rc, err);
}

/* The CRC pass: computes parts' CRC-32C until none is left; the upload's own thread and the
 * part threads share it. */
static void mp_crc_pass(struct mp *m)
{
	for (;;) {
		int i = atomic_fetch_add(&m->next_crc, 1);
		if (i >= m->nparts)
			return;
		uint64_t off = (uint64_t)i * m->part_size;
		struct sums sums;
		int skip = atomic_load(&m->failed); /* nothing will be sent: only counted */
		int rc = skip ? 0
		              : sums_compute(m->data ? m->data + off : NULL, m->fd, off,
		                             mp_part_len(m, i), SUM_CRC, &sums);
		if (rc)
			mp_fail_read(m, i, rc);
		pthread_mutex_lock(&m->lock);
		if (!rc && !skip)
			m->crcs[i] = sums.crc;
		if (++m->crc_done == m->nparts)
			pthread_cond_broadcast(&m->cond);
		pthread_mutex_unlock(&m->lock);
	}
}

/* Hashes and sends part i (the part pass); 0, or the failure is recorded in m. */
static int mp_send_part(struct mp *m, CURL *h, int i)
{
	uint64_t off = (uint64_t)i * m->part_size;
	size_t len = mp_part_len(m, i);
	struct sums sums;
	char err[512];
	int rc = sums_compute(m->data ? m->data + off : NULL, m->fd, off, len,
	                      SUM_CRC | SUM_SHA | (m->content_md5 ? SUM_MD5 : 0u), &sums);
	if (rc) {
		mp_fail_read(m, i, rc);
		return rc;
	}
	pthread_mutex_lock(&m->lock); /* ready: the CRC pass is over too */
	while (!m->ready)
		pthread_cond_wait(&m->cond, &m->lock);
	pthread_mutex_unlock(&m->lock);
	if (atomic_load(&m->failed))
		return -ECANCELED;
	if (sums.crc != m->crcs[i]) {
		snprintf(err, sizeof err,
		         "the data for '%s' changed while it was being uploaded (part %d): upload "
		         "it again once it is complete",
		         m->key, i + 1);
		mp_fail(m, -EIO, err);
		return -EIO;
	}
	char num[16];
	snprintf(num, sizeof num, "%d", i + 1);
	struct s3_req r = {.method = "PUT",
	                   .key = m->fkey,
	                   .body = m->data ? m->data + off : NULL,
	                   .body_len = len,
	                   .from_fd = !m->data,
	                   .body_fd = m->fd,
	                   .body_off = off,
	                   .sha256 = sums.sha,
	                   .check_crc = 1,
	                   .crc = m->crcs[i],
	                   .content_md5 = sums.has_md5 ? sums.md5 : NULL,
	                   .sink_fd = -1};
	r.q[r.nq++] = (struct tf_sigv4_kv){"partNumber", num};
	r.q[r.nq++] = (struct tf_sigv4_kv){"uploadId", m->upload_id};
	struct s3_resp resp;
	rc = s3_do(m->s3, h, &r, &resp, err, sizeof err);
	if (!rc && resp.status != 200)
		rc = http_error_msg(m->s3, m->url, &resp, "PUT part", m->key, err, sizeof err);
	if (!rc && sums.has_md5 && (!is_hex32(resp.etag) || strcmp(resp.etag, sums.md5hex))) {
		snprintf(err, sizeof err,
		         "part %d of '%s': %s answered ETag '%s' for a part whose MD5 is %s", i + 1,
		         m->key, m->s3->endpoint, resp.etag, sums.md5hex);
		rc = -EBADMSG;
	}
	if (!rc && !resp.etag[0]) {
		snprintf(err, sizeof err, "part %d of '%s': %s answered without an ETag", i + 1,
		         m->key, m->s3->endpoint);
		rc = -EIO;
	}
	if (rc)
		mp_fail(m, rc, err);
	else
		snprintf(m->etags[i], sizeof m->etags[i], "%s", resp.etag);
	resp_release(&resp);
	return rc;
}

/* A part thread: takes its share of the CRC pass, then hashes and sends parts (once the
 * upload is created) until none is left or one failed. */
static void *mp_worker(void *arg)
{
	struct mp *m = arg;
	mp_crc_pass(m);
	CURL **slot = &m->s3->part_curl[atomic_fetch_add(&m->slot, 1)];
	if (!*slot)
		*slot = curl_easy_init();
	CURL *h = *slot;
	if (!h)
		mp_fail(m, -ENOMEM, "cannot initialise libcurl");
	while (h) {
		int i = atomic_fetch_add(&m->next, 1);
		if (i >= m->nparts || atomic_load(&m->failed) || mp_send_part(m, h, i))
			break;
	}
	return NULL;
}

static void mp_abort(struct tf_objstore *s, const char *fkey, const char *upload_id)
{
	struct s3_req r = {.method = "DELETE", .key = fkey, .sink_fd = -1};
	r.q[r.nq++] = (struct tf_sigv4_kv){"uploadId", upload_id};
	struct s3_resp resp;
	char saved[sizeof s->err];
	memcpy(saved, s->err, sizeof saved);
	if (run(s, &r, &resp) || (resp.status != 204 && resp.status != 200 && resp.status != 404))
		tf_warn("could not abort multipart upload %s of '%s' (status %ld): gc will",
		        upload_id, fkey, resp.status);
	resp_release(&resp);
	memcpy(s->err, saved, sizeof saved);
}

/* The part size for an object of total bytes: the configured size; by default the object
 * split in as many parts as go at once, rounded up to a MiB, between 32 and 64 MiB (fewer
 * requests: each part costs the server requests and a segment of its own, ~25 ms of CPU on
 * Swift, docs/benchmarks.md); doubled until there are at most MAX_PARTS. */
static size_t mp_part_size(const struct s3 *s3, uint64_t total)
{
	uint64_t size = s3->part_size;
	if (!size) {
		size = (total + (uint64_t)s3->parallel - 1) / (uint64_t)s3->parallel;
		size = (size + (1u << 20) - 1) & ~(uint64_t)((1u << 20) - 1); /* whole MiB */
		if (size < DEFAULT_PART_MIN)
			size = DEFAULT_PART_MIN;
		if (size > DEFAULT_PART_MAX)
			size = DEFAULT_PART_MAX;
	}
	while ((total + size - 1) / size > MAX_PARTS)
		size *= 2;
	return (size_t)size;
}

/* Does an object of total bytes go up as a multipart upload? At the threshold and above,
 * unless it would be one part: a single PUT of it costs the server two requests less. */
static int is_multipart(const struct s3 *s3, uint64_t total)
{
	return total >= s3->threshold && mp_part_size(s3, total) < total;
}

/* Creates the multipart upload (its metadata carries crc); the id goes to upload_id. */
static int mp_create(struct tf_objstore *s, const char *fkey, const char *key, uint32_t crc,
                     char *upload_id, size_t idlen)
{
	struct s3 *s3 = S3(s);
	char crchex[9];
	snprintf(crchex, sizeof crchex, "%08x", crc);
	struct s3_req cr = {
	    .method = "POST", .key = fkey, .content_type = OBJECT_TYPE, .sink_fd = -1};
	cr.q[cr.nq++] = (struct tf_sigv4_kv){"uploads", ""};
	cr.h[cr.nh++] = (struct tf_sigv4_kv){META_CRC, crchex};
	struct s3_resp resp;
	int rc = run(s, &cr, &resp);
	if (!rc && resp.status != 200)
		rc = http_error(s, &resp, "start multipart upload of", key);
	if (!rc && (!resp.body ||
	            !xml_get(resp.body, resp.body + resp.len, "UploadId", upload_id, idlen) ||
	            !upload_id[0]))
		rc = tf_objstore_seterr(s, -EIO,
		                        "%s started a multipart upload of '%s' without an "
		                        "UploadId",
		                        s3->endpoint, key);
	resp_release(&resp);
	return rc;
}

/* Uploads total bytes of data, or of fd when data is NULL, as a multipart upload (the passes
 * are described at struct mp): this thread takes part in the CRC pass, creates the upload and
 * completes it once the part threads have sent every part. */
static int put_multipart(struct tf_objstore *s, const char *key, const char *data, int fd,
                         uint64_t total, unsigned flags)
{
	struct s3 *s3 = S3(s);
	char *fkey = full_key(s3, key);
	char *xml = NULL;
	struct mp m;
	memset(&m, 0, sizeof m);
	char upload_id[512] = "";
	struct s3_resp resp;
	memset(&resp, 0, sizeof resp);
	int rc = 0;
	uint32_t crc = 0;

	m.s3 = s3;
	m.url = s->url;
	m.key = key;
	m.fkey = fkey;
	m.upload_id = upload_id;
	m.data = data;
	m.fd = fd;
	m.total = total;
	m.content_md5 = s3->content_md5;
	m.part_size = mp_part_size(s3, total);
	m.nparts = (int)((total + m.part_size - 1) / m.part_size);
	m.etags = tf_xcalloc((size_t)m.nparts, sizeof *m.etags);
	m.crcs = tf_xcalloc((size_t)m.nparts, sizeof *m.crcs);
	atomic_init(&m.next_crc, 0);
	atomic_init(&m.next, 0);
	atomic_init(&m.slot, 0);
	atomic_init(&m.failed, 0);
	pthread_mutex_init(&m.lock, NULL);
	pthread_cond_init(&m.cond, NULL);
	int nt = s3->parallel < m.nparts ? s3->parallel : m.nparts;
	pthread_t *th = tf_xcalloc((size_t)nt, sizeof *th);
	int started = 0;
	for (; started < nt; started++)
		if (pthread_create(&th[started], NULL, mp_worker, &m))
			break;

	mp_crc_pass(&m);
	pthread_mutex_lock(&m.lock);
	while (m.crc_done < m.nparts)
		pthread_cond_wait(&m.cond, &m.lock);
	pthread_mutex_unlock(&m.lock);
	for (int i = 0; i < m.nparts; i++)
		crc = tf_crc32c_combine(crc, m.crcs[i], mp_part_len(&m, i));
	if (!rc && (flags & TF_OBJ_IF_NONE_MATCH))
		rc = absent(s, fkey, key);
	if (!rc && !atomic_load(&m.failed)) /* a part could not be read: nothing to create */
		rc = mp_create(s, fkey, key, crc, upload_id, sizeof upload_id);
	pthread_mutex_lock(&m.lock);
	m.ready = 1;
	if (rc)
		atomic_store(&m.failed, 1);
	pthread_cond_broadcast(&m.cond);
	pthread_mutex_unlock(&m.lock);
	if (started == 0 && !rc)
		mp_worker(&m); /* no threads available: do it here */
	for (int i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	free(th);
	pthread_cond_destroy(&m.cond);
	pthread_mutex_destroy(&m.lock);
	if (rc)
		goto out;
	if (m.rc) {
		rc = tf_objstore_seterr(s, m.rc, "%s", m.err);
		if (upload_id[0])
			mp_abort(s, fkey, upload_id);
		goto out;
	}

	size_t cap = 64 + (size_t)m.nparts * 128, n = 0;
	xml = tf_xmalloc(cap);
	n += (size_t)snprintf(xml + n, cap - n, "<CompleteMultipartUpload>");
	for (int i = 0; i < m.nparts; i++)
		n += (size_t)snprintf(xml + n, cap - n,
		                      "<Part><PartNumber>%d</PartNumber><ETag>\"%s\"</ETag></Part>",
		                      i + 1, m.etags[i]);
	n += (size_t)snprintf(xml + n, cap - n, "</CompleteMultipartUpload>");
	struct s3_req cm = {.method = "POST",
	                    .key = fkey,
	                    .body = xml,
	                    .body_len = n,
	                    .content_type = "application/xml",
	                    .sink_fd = -1};
	cm.q[cm.nq++] = (struct tf_sigv4_kv){"uploadId", upload_id};
	for (int tries = 1;; tries++) {
		rc = run(s, &cm, &resp);
		if (rc) {
			if (landed(s, fkey, key, total, crc))
				rc = 0;
			break;
		}
		if (resp.status == 200 && resp.body && strstr(resp.body, "<Error>")) {
			/* S3 may report a failed completion inside a 200 */
			xml_get(resp.body, resp.body + resp.len, "Code", resp.code,
			        sizeof resp.code);
			xml_get(resp.body, resp.body + resp.len, "Message", resp.message,
			        sizeof resp.message);
			if (tries < s3->max_attempts && (!strcmp(resp.code, "InternalError") ||
			                                 !strcmp(resp.code, "SlowDown"))) {
				resp_release(&resp);
				sleep_s(jitter_unit() * s3->base * (double)(1u << tries));
				continue;
			}
			resp.status = 500;
		}
		if (resp.status == 200)
			break;
		if (resp.status == 404 && (resp.attempts > 1 || tries > 1) &&
		    landed(s, fkey, key, total, crc))
			break; /* an earlier attempt completed it; its answer was lost */
		rc = http_error(s, &resp, "complete multipart upload of", key);
		break;
	}
	if (rc)
		mp_abort(s, fkey, upload_id);
	else
		tf_debug("multipart upload of '%s': %d parts of %zu bytes, %d at a time", fkey,
		         m.nparts, m.part_size, s3->parallel);
out:
	resp_release(&resp);
	free(m.etags);
	free(m.crcs);
	free(xml);
	free(fkey);
	return rc;
}

/* ---- the ops ---- */

static int s3_put(struct tf_objstore *s, const char *key, const void *data, size_t len,
                  unsigned flags)
{
	struct s3 *s3 = S3(s);
	if (is_multipart(s3, len))
		return put_multipart(s, key, data, -1, len, flags);
	struct sums sums;
	int rc = sums_all(data ? data : "", -1, 0, len, s3->content_md5, &sums);
	if (rc)
		return tf_objstore_seterr(s, rc, "cannot hash the upload of '%s': %s", key,
		                          strerror(-rc));
	return put_single(s, key, data ? data : "", -1, len, &sums, flags);
}

/* A file goes up without being read into memory: one pass to hash it, then libcurl reads it
 * straight from the file (single PUT) or each part thread reads and hashes its part. */
static int s3_put_file(struct tf_objstore *s, const char *key, const char *path, unsigned flags)
{
	struct s3 *s3 = S3(s);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return tf_objstore_seterr(s, -errno, "cannot read '%s': %s", path, strerror(errno));
	struct stat st;
	int rc = 0;
	if (fstat(fd, &st)) {
		rc = tf_objstore_seterr(s, -errno, "cannot read '%s': %s", path, strerror(errno));
		goto out;
	}
	if (!S_ISREG(st.st_mode)) { /* a pipe or device: no second pass, read it into memory */
		char *data;
		size_t len;
		close(fd);
		fd = -1;
		rc = tf_read_file(path, s3->threshold, &data, &len);
		if (rc)
			return tf_objstore_seterr(s, rc, "cannot read '%s': %s", path,
			                          strerror(-rc));
		rc = s3_put(s, key, data, len, flags);
		free(data);
		return rc;
	}
	if (!is_multipart(s3, (uint64_t)st.st_size)) {
		struct sums sums;
		size_t len = (size_t)st.st_size;
		rc = sums_all(NULL, fd, 0, len, s3->content_md5, &sums);
		if (rc) {
			rc = tf_objstore_seterr(s, rc, "cannot read '%s': %s", path,
			                        rc == -EIO ? "the file shrank" : strerror(-rc));
			goto out;
		}
		rc = put_single(s, key, NULL, fd, len, &sums, flags);
		goto out;
	}
	rc = put_multipart(s, key, NULL, fd, (uint64_t)st.st_size, flags);
out:
	if (fd >= 0)
		close(fd);
	return rc;
}

static int s3_get(struct tf_objstore *s, const char *key, void **data, size_t *len)
{
	char *fkey = full_key(S3(s), key);
	struct s3_req r = {.method = "GET", .key = fkey, .sink_fd = -1, .verify = 1};
	struct s3_resp resp;
	int rc = run(s, &r, &resp);
	if (!rc && resp.status != 200)
		rc = http_error(s, &resp, "GET", key);
	if (!rc) {
		*len = resp.len;
		*data = resp.body ? resp.body : tf_xcalloc(1, 1);
		resp.body = NULL;
	}
	resp_release(&resp);
	free(fkey);
	return rc;
}

static int s3_get_file(struct tf_objstore *s, const char *key, const char *path)
{
	char *fkey = full_key(S3(s), key);
	char *tmp = tf_xasprintf("%s.tf-tmp.XXXXXX", path);
	int fd = mkostemp(tmp, O_CLOEXEC);
	int rc = 0;
	struct s3_resp resp;
	memset(&resp, 0, sizeof resp);
	if (fd < 0) {
		rc = tf_objstore_seterr(s, -errno, "cannot create a file next to '%s': %s", path,
		                        strerror(errno));
		goto out;
	}
	struct s3_req r = {.method = "GET", .key = fkey, .sink_fd = fd, .verify = 1};
	rc = run(s, &r, &resp);
	if (!rc && resp.status != 200)
		rc = http_error(s, &resp, "GET", key);
	if (!rc && (fchmod(fd, 0644) || fsync(fd)))
		rc = tf_objstore_seterr(s, -errno, "cannot write '%s': %s", path, strerror(errno));
	if (close(fd) && !rc)
		rc = tf_objstore_seterr(s, -errno, "cannot write '%s': %s", path, strerror(errno));
	if (!rc && rename(tmp, path))
		rc = tf_objstore_seterr(s, -errno, "cannot write '%s': %s", path, strerror(errno));
	if (rc)
		unlink(tmp);
out:
	resp_release(&resp);
	free(tmp);
	free(fkey);
	return rc;
}

static int s3_del(struct tf_objstore *s, const char *key)
{
	char *fkey = full_key(S3(s), key);
	struct s3_req r = {.method = "DELETE", .key = fkey, .sink_fd = -1};
	struct s3_resp resp;
	int rc = run(s, &r, &resp);
	if (!rc && resp.status != 204 && resp.status != 200 &&
	    !(resp.status == 404 && strcmp(resp.code, "NoSuchBucket")))
		rc = http_error(s, &resp, "DELETE", key);
	resp_release(&resp);
	free(fkey);
	return rc;
}

static int s3_list(struct tf_objstore *s, const char *prefix, struct tf_obj_list *out)
{
	struct s3 *s3 = S3(s);
	char *fprefix = full_key(s3, prefix);
	size_t plen = strlen(s3->prefix);
	char token[2048] = "", maxkeys[16];
	char key[2 * TF_OBJ_KEY_MAX + 64], size[32], mtime[64], truncated[16];
	snprintf(maxkeys, sizeof maxkeys, "%d", s3->list_page);
	int rc = 0;
	for (;;) {
		struct s3_req r = {.method = "GET", .sink_fd = -1};
		r.q[r.nq++] = (struct tf_sigv4_kv){"list-type", "2"};
		r.q[r.nq++] = (struct tf_sigv4_kv){"prefix", fprefix};
		r.q[r.nq++] = (struct tf_sigv4_kv){"max-keys", maxkeys};
		if (token[0])
			r.q[r.nq++] = (struct tf_sigv4_kv){"continuation-token", token};
		struct s3_resp resp;
		rc = run(s, &r, &resp);
		if (!rc && resp.status != 200)
			rc = http_error(s, &resp, "LIST", prefix);
		if (rc) {
			resp_release(&resp);
			break;
		}
		const char *p = resp.body ? resp.body : "", *end = p + resp.len;
		const char *c;
		while ((c = memmem(p, (size_t)(end - p), "<Contents>", 10))) {
			const char *ce = memmem(c, (size_t)(end - c), "</Contents>", 11);
			if (!ce)
				break;
			key[0] = size[0] = mtime[0] = '\0';
			xml_get(c, ce, "Key", key, sizeof key);
			xml_get(c, ce, "Size", size, sizeof size);
			xml_get(c, ce, "LastModified", mtime, sizeof mtime);
			if (!strncmp(key, s3->prefix, plen) && key[plen])
				tf_obj_list_push(out, key + plen, strtoull(size, NULL, 10),
				                 parse_iso8601(mtime));
			p = ce + 11;
		}
		truncated[0] = '\0';
		const char *body = resp.body ? resp.body : "";
		xml_get(body, body + resp.len, "IsTruncated", truncated, sizeof truncated);
		int more = !strcmp(truncated, "true");
		token[0] = '\0';
		if (more)
			xml_get(body, body + resp.len, "NextContinuationToken", token,
			        sizeof token);
		resp_release(&resp);
		if (!more)
			break;
		if (!token[0]) {
			rc = tf_objstore_seterr(s, -EIO,
			                        "%s sent a truncated listing of '%s' without a "
			                        "continuation token",
			                        s3->endpoint, prefix);
			break;
		}
	}
	free(fprefix);
	return rc;
}

static int s3_gc_uploads(struct tf_objstore *s, const char *prefix, double older_than, int *aborted)
{
	struct s3 *s3 = S3(s);
	char *fprefix = full_key(s3, prefix);
	char kmark[2 * TF_OBJ_KEY_MAX + 64] = "", umark[512] = "";
	char key[2 * TF_OBJ_KEY_MAX + 64], id[512], init[64], truncated[16];
	double now = tf_now_wall();
	int rc = 0, n = 0;
	for (;;) {
		struct s3_req r = {.method = "GET", .sink_fd = -1};
		r.q[r.nq++] = (struct tf_sigv4_kv){"uploads", ""};
		r.q[r.nq++] = (struct tf_sigv4_kv){"prefix", fprefix};
		if (kmark[0]) {
			r.q[r.nq++] = (struct tf_sigv4_kv){"key-marker", kmark};
			r.q[r.nq++] = (struct tf_sigv4_kv){"upload-id-marker", umark};
		}
		struct s3_resp resp;
		rc = run(s, &r, &resp);
		if (!rc && resp.status != 200)
			rc = http_error(s, &resp, "list multipart uploads under", prefix);
		if (rc) {
			resp_release(&resp);
			break;
		}
		const char *p = resp.body ? resp.body : "", *end = p + resp.len, *u;
		while ((u = memmem(p, (size_t)(end - p), "<Upload>", 8))) {
			const char *ue = memmem(u, (size_t)(end - u), "</Upload>", 9);
			if (!ue)
				break;
			key[0] = id[0] = init[0] = '\0';
			xml_get(u, ue, "Key", key, sizeof key);
			xml_get(u, ue, "UploadId", id, sizeof id);
			xml_get(u, ue, "Initiated", init, sizeof init);
			if (key[0] && id[0] &&
			    (older_than <= 0 || now - parse_iso8601(init) >= older_than)) {
				mp_abort(s, key, id);
				tf_info("aborted multipart upload %s of '%s' started %s", id, key,
				        init);
				n++;
			}
			p = ue + 9;
		}
		truncated[0] = '\0';
		const char *body = resp.body ? resp.body : "";
		xml_get(body, body + resp.len, "IsTruncated", truncated, sizeof truncated);
		int more = !strcmp(truncated, "true");
		if (more) {
			xml_get(body, body + resp.len, "NextKeyMarker", kmark, sizeof kmark);
			xml_get(body, body + resp.len, "NextUploadIdMarker", umark, sizeof umark);
		}
		resp_release(&resp);
		if (!more || !kmark[0])
			break;
	}
	free(fprefix);
	if (!rc)
		*aborted = n;
	return rc;
}

static int s3_mkbucket(struct tf_objstore *s)
{
	struct s3 *s3 = S3(s);
	char *body = NULL;
	if (strcmp(s3->region, "us-east-1"))
		body = tf_xasprintf("<CreateBucketConfiguration><LocationConstraint>%s"
		                    "</LocationConstraint></CreateBucketConfiguration>",
		                    s3->region);
	struct s3_req r = {
	    .method = "PUT", .body = body, .body_len = body ? strlen(body) : 0, .sink_fd = -1};
	struct s3_resp resp;
	int rc = run(s, &r, &resp);
	if (!rc && resp.status != 200 &&
	    !(resp.status == 409 && !strcmp(resp.code, "BucketAlreadyOwnedByYou"))) {
		if (resp.status == 409)
			rc = tf_objstore_seterr(s, -EEXIST,
			                        "bucket '%s' already exists at %s and "
			                        "belongs to someone else (%s)",
			                        s3->bucket, s3->endpoint, resp.code);
		else
			rc = http_error(s, &resp, "create bucket", s3->bucket);
	}
	resp_release(&resp);
	free(body);
	return rc;
}

static void s3_stats(const struct tf_objstore *s, struct tf_obj_stats *out)
{
	struct s3 *s3 = s->impl;
	out->requests = atomic_load(&s3->n_requests);
	out->retries = atomic_load(&s3->n_retries);
	out->corrupt = atomic_load(&s3->n_corrupt);
	out->bytes_up = atomic_load(&s3->n_up);
	out->bytes_down = atomic_load(&s3->n_down);
}

int tf_objstore_s3_begin_upload(struct tf_objstore *s, const char *key, char *id, size_t idlen)
{
	if (s->ops != &tf_objstore_s3_ops)
		return -ENOTSUP;
	char *fkey = full_key(S3(s), key);
	struct s3_req cr = {
	    .method = "POST", .key = fkey, .content_type = OBJECT_TYPE, .sink_fd = -1};
	cr.q[cr.nq++] = (struct tf_sigv4_kv){"uploads", ""};
	struct s3_resp resp;
	int rc = run(s, &cr, &resp);
	if (!rc && resp.status != 200)
		rc = http_error(s, &resp, "start multipart upload of", key);
	if (!rc && (!resp.body || !xml_get(resp.body, resp.body + resp.len, "UploadId", id, idlen)))
		rc = tf_objstore_seterr(s, -EIO, "no UploadId in the answer");
	resp_release(&resp);
	free(fkey);
	return rc;
}

const struct tf_objstore_ops tf_objstore_s3_ops = {
    .scheme = "s3",
    .put = s3_put,
    .get = s3_get,
    .put_file = s3_put_file,
    .get_file = s3_get_file,
    .head = s3_head,
    .del = s3_del,
    .list = s3_list,
    .gc_uploads = s3_gc_uploads,
    .mkbucket = s3_mkbucket,
    .stats = s3_stats,
    .free = s3_free,
};

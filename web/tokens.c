/* tokens.c — owns the api_tokens table: creating tokens from OpenSSL's random generator,
 * storing only their SHA-256, verifying a presented token in constant time (and the cache of
 * recently verified ones, so a busy client costs no hashing or database read per request),
 * revocation and the last-used time. */
#include "web/tokens.h"
#include "common/common.h"
#include "common/digest.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PREFIX_LEN 12 /* "tpf_" + 8 hex digits: unique enough to find the row */

static void token_hash(const char *token, char hex[65])
{
	struct tf_sha256 *h = tf_sha256_new();
	tf_sha256_update(h, token, strlen(token));
	tf_sha256_final(h, hex);
}

int tf_token_create(struct tf_store *st, const char *name, enum tf_scope scope, double ttl,
                    char out[TF_TOKEN_LEN + 1], int64_t *id)
{
	if (!name || !*name || strlen(name) > 128 || scope < TF_SCOPE_READ || scope >= TF_SCOPE_LAST)
		return -EINVAL;
	for (int tries = 0; tries < 4; tries++) {
		unsigned char raw[32];
		if (RAND_bytes(raw, sizeof(raw)) != 1)
			return -EIO;
		memcpy(out, "tpf_", 4);
		tf_hex_encode(raw, sizeof(raw), out + 4);
		char prefix[PREFIX_LEN + 1], hex[65];
		memcpy(prefix, out, PREFIX_LEN);
		prefix[PREFIX_LEN] = 0;
		token_hash(out, hex);
		double now = tf_now_wall();
		int rc = tf_store_run(st,
		                      "INSERT INTO api_tokens(name, prefix, hash, scope, created_at, "
		                      "expires_at) VALUES(?, ?, ?, ?, ?, ?)",
		                      ttl > 0 ? "ttttdd" : "ttttdn", name, prefix, hex,
		                      tf_scope_name(scope), now, now + ttl);
		if (rc == -EEXIST) /* a prefix collision: draw again */
			continue;
		if (rc == 0 && id)
			*id = tf_store_last_rowid(st);
		return rc;
	}
	return -EEXIST;
}

/* tf_token_verify with the expiry (0: none) of a valid token in *expires_at. */
static int verify(struct tf_store *st, const char *token, const char hex[65], double now,
                  int64_t *id, enum tf_scope *scope, double *expires_at)
{
	char prefix[PREFIX_LEN + 1];
	memcpy(prefix, token, PREFIX_LEN);
	prefix[PREFIX_LEN] = 0;
	struct tf_stmt *s = tf_store_query(
	    st, "SELECT id, hash, scope, expires_at, revoked_at FROM api_tokens WHERE prefix=?", "t",
	    prefix);
	if (!s)
		return -EIO;
	int rc = tf_stmt_step(s);
	if (rc != 1) {
		tf_stmt_done(s);
		return rc < 0 ? rc : -EACCES;
	}
	const char *h = tf_stmt_text(s, 1);
	if (!h || strlen(h) != 64 || CRYPTO_memcmp(h, hex, 64) != 0)
		rc = -EACCES;
	else if (!tf_stmt_is_null(s, 4))
		rc = -EKEYREVOKED;
	else if (!tf_stmt_is_null(s, 3) && tf_stmt_double(s, 3) <= now)
		rc = -EKEYEXPIRED;
	else if (tf_scope_parse(tf_stmt_text(s, 2), scope))
		rc = -EACCES;
	else {
		*id = tf_stmt_int(s, 0);
		*expires_at = tf_stmt_is_null(s, 3) ? 0 : tf_stmt_double(s, 3);
		rc = 0;
	}
	tf_stmt_done(s);
	return rc;
}

static int well_formed(const char *token)
{
	return token && strlen(token) == TF_TOKEN_LEN && !strncmp(token, "tpf_", 4);
}

int tf_token_verify(struct tf_store *st, const char *token, double now, int64_t *id,
                    enum tf_scope *scope)
{
	if (!well_formed(token))
		return -EACCES;
	char hex[65];
	double exp;
	token_hash(token, hex);
	return verify(st, token, hex, now, id, scope, &exp);
}

void tf_token_cache_init(struct tf_token_cache *c)
{
	memset(c, 0, sizeof(*c));
	pthread_rwlock_init(&c->lock, NULL);
}

void tf_token_cache_release(struct tf_token_cache *c)
{
	pthread_rwlock_destroy(&c->lock);
	OPENSSL_cleanse(c->e, sizeof(c->e));
}

int tf_token_verify_cached(struct tf_token_cache *c, const char *token, double now,
                           struct tf_store *(*get_store)(void *ctx), void *ctx, int64_t *id,
                           enum tf_scope *scope)
{
	if (!well_formed(token))
		return -EACCES;
	uint64_t gen = tf_store_generation();
	int rc = -ENOENT;
	pthread_rwlock_rdlock(&c->lock);
	for (unsigned i = 0; i < TF_TOKEN_CACHE; i++)
		if (c->e[i].gen == gen && !memcmp(c->e[i].token, token, PREFIX_LEN) &&
		    CRYPTO_memcmp(c->e[i].token, token, TF_TOKEN_LEN) == 0) {
			if (c->e[i].expires_at && c->e[i].expires_at <= now) {
				rc = -EKEYEXPIRED;
			} else {
				*id = c->e[i].id;
				*scope = c->e[i].scope;
				rc = 0;
			}
			break;
		}
	pthread_rwlock_unlock(&c->lock);
	if (rc != -ENOENT)
		return rc;
	struct tf_store *st = get_store(ctx);
	if (!st)
		return -EIO;
	char hex[65];
	double exp = 0;
	token_hash(token, hex);
	rc = verify(st, token, hex, now, id, scope, &exp);
	if (rc)
		return rc;
	pthread_rwlock_wrlock(&c->lock);
	unsigned slot = c->next++ % TF_TOKEN_CACHE;
	for (unsigned i = 0; i < TF_TOKEN_CACHE; i++)
		if (!memcmp(c->e[i].token, token, PREFIX_LEN)) {
			slot = i; /* the same token read again after a change */
			break;
		}
	memcpy(c->e[slot].token, token, TF_TOKEN_LEN + 1);
	c->e[slot].id = *id;
	c->e[slot].scope = *scope;
	c->e[slot].expires_at = exp;
	c->e[slot].gen = gen;
	pthread_rwlock_unlock(&c->lock);
	return 0;
}

int tf_token_touch(struct tf_store *st, int64_t id, double now)
{
	return tf_store_run(st, "UPDATE api_tokens SET last_used_at=? WHERE id=?", "di", now, id);
}

static json_t *real_or_null(struct tf_stmt *s, int col)
{
	return tf_stmt_is_null(s, col) ? json_null() : json_real(tf_stmt_double(s, col));
}

static int list_where(struct tf_store *st, int64_t id, json_t **out)
{
	struct tf_stmt *s = tf_store_query(
	    st,
	    "SELECT id, name, prefix, scope, created_at, expires_at, revoked_at, last_used_at "
	    "FROM api_tokens WHERE ?1=0 OR id=?1 ORDER BY id",
	    "i", id);
	if (!s)
		return -EIO;
	json_t *arr = json_array();
	int rc;
	while ((rc = tf_stmt_step(s)) == 1)
		json_array_append_new(
		    arr, json_pack("{s:I, s:s, s:s, s:s, s:o, s:o, s:o, s:o}", "id",
		                   (json_int_t)tf_stmt_int(s, 0), "name", tf_stmt_text(s, 1), "prefix",
		                   tf_stmt_text(s, 2), "scope", tf_stmt_text(s, 3), "created_at",
		                   real_or_null(s, 4), "expires_at", real_or_null(s, 5), "revoked_at",
		                   real_or_null(s, 6), "last_used_at", real_or_null(s, 7)));
	tf_stmt_done(s);
	if (rc < 0) {
		json_decref(arr);
		return rc;
	}
	*out = arr;
	return 0;
}

int tf_token_list(struct tf_store *st, json_t **out)
{
	return list_where(st, 0, out);
}

int tf_token_get(struct tf_store *st, int64_t id, json_t **out)
{
	json_t *arr = NULL;
	int rc = id > 0 ? list_where(st, id, &arr) : -ENOENT;
	if (rc)
		return rc;
	if (json_array_size(arr) != 1) {
		json_decref(arr);
		return -ENOENT;
	}
	*out = json_incref(json_array_get(arr, 0));
	json_decref(arr);
	return 0;
}

int tf_token_revoke(struct tf_store *st, const char *which, double now)
{
	char *end;
	long long id = strtoll(which, &end, 10);
	int rc = tf_store_run(st,
	                      "UPDATE api_tokens SET revoked_at=coalesce(revoked_at, ?) "
	                      "WHERE id=? OR name=? OR prefix=?",
	                      "ditt", now, (int64_t)(*which && !*end ? id : -1), which, which);
	if (rc)
		return rc;
	return tf_store_changes(st) > 0 ? 0 : -ENOENT;
}

int tf_token_parse_ttl(const char *s, double *out)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (end == s || errno || !(v > 0) || v > 1e6)
		return -EINVAL;
	double mult = 1;
	if (!strcmp(end, "d"))
		mult = 86400;
	else if (!strcmp(end, "h"))
		mult = 3600;
	else if (!strcmp(end, "m"))
		mult = 60;
	else if (*end && strcmp(end, "s"))
		return -EINVAL;
	*out = v * mult;
	return 0;
}

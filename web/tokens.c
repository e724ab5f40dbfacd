/* tokens.c — owns the api_tokens table: creating tokens from OpenSSL's random generator,
 * storing only their SHA-256, verifying a presented token in constant time, revocation and
 * the last-used time. */
#include "web/tokens.h"
#include "common/common.h"
#include "orchestrator/digest.h"

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
		for (size_t i = 0; i < sizeof(raw); i++)
			snprintf(out + 4 + 2 * i, 3, "%02x", raw[i]);
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

int tf_token_verify(struct tf_store *st, const char *token, double now, int64_t *id,
                    enum tf_scope *scope)
{
	if (!token || strlen(token) != TF_TOKEN_LEN || strncmp(token, "tpf_", 4))
		return -EACCES;
	char prefix[PREFIX_LEN + 1], hex[65];
	memcpy(prefix, token, PREFIX_LEN);
	prefix[PREFIX_LEN] = 0;
	token_hash(token, hex);
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
		rc = 0;
	}
	tf_stmt_done(s);
	return rc;
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

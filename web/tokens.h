/* tokens.h — API bearer tokens: `tpf_` followed by 64 hex digits of randomness, shown once
 * at creation and stored only as their SHA-256 (docs/api.md, "Tokens").
 *
 * A token has a name, a scope (read < trigger < admin, or predict), an optional expiry, and
 * may be revoked; the server records when it was last used.
 */
#ifndef TF_WEB_TOKENS_H
#define TF_WEB_TOKENS_H

#include "orchestrator/store.h"
#include "web/api.h"

#include <jansson.h>
#include <pthread.h>
#include <stdint.h>

#define TF_TOKEN_LEN 68 /* "tpf_" + 64 hex digits */

/* Creates a token; `ttl` seconds from now (0: no expiry). The token text goes to out (the
 * only time it exists outside the caller) and its id to *id (may be NULL). */
int tf_token_create(struct tf_store *st, const char *name, enum tf_scope scope, double ttl,
                    char out[TF_TOKEN_LEN + 1], int64_t *id);

/* Checks a presented token: 0 with *id and *scope set; -EACCES unknown or malformed,
 * -EKEYREVOKED revoked, -EKEYEXPIRED past its expiry. The hash is compared in constant
 * time. */
int tf_token_verify(struct tf_store *st, const char *token, double now, int64_t *id,
                    enum tf_scope *scope);

/* Tokens verified recently, in this process's memory only: a request whose token is here is
 * let in without hashing it or reading the database while the store's change generation
 * stays put (revoking a token is a commit, so it moves it; expiry is checked on every use).
 * Found by the token's display prefix, then compared whole in constant time. Requests look
 * it up under a read lock, so they do not wait for each other. */
#define TF_TOKEN_CACHE 64
struct tf_token_cache {
	pthread_rwlock_t lock;
	struct {
		char token[TF_TOKEN_LEN + 1]; /* "" for a free slot */
		int64_t id;
		enum tf_scope scope;
		double expires_at; /* wall seconds, 0: never */
		uint64_t gen;      /* tf_store_generation() before it was read */
	} e[TF_TOKEN_CACHE];
	unsigned next; /* the slot the next new token takes */
};
void tf_token_cache_init(struct tf_token_cache *c);
void tf_token_cache_release(struct tf_token_cache *c);
/* tf_token_verify through the cache: the store comes from get_store(ctx) only on a miss
 * (NULL from it: -EIO). */
int tf_token_verify_cached(struct tf_token_cache *c, const char *token, double now,
                           struct tf_store *(*get_store)(void *ctx), void *ctx, int64_t *id,
                           enum tf_scope *scope);

/* Records a use (last_used_at). */
int tf_token_touch(struct tf_store *st, int64_t id, double now);

/* Every token as a JSON array of {id, name, prefix, scope, created_at, expires_at,
 * revoked_at, last_used_at} (never the hash). The caller owns *out. */
int tf_token_list(struct tf_store *st, json_t **out);
/* One token by id (same fields); -ENOENT when unknown. */
int tf_token_get(struct tf_store *st, int64_t id, json_t **out);

/* Revokes a token by id or by name (`which`); -ENOENT when none matches. */
int tf_token_revoke(struct tf_store *st, const char *which, double now);

/* Parses a lifetime such as 90d, 12h, 30m, 3600s or 3600 into seconds; 0 or -EINVAL. */
int tf_token_parse_ttl(const char *s, double *out);

#endif

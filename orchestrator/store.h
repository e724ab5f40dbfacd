/* store.h — the state database: one SQLite file in the state home, opened in WAL mode with
 * durable commits (group commit), schema changed only by the numbered migrations in migrations/.
 *
 * This header is the only door to SQLite: the rest of the program sees an opaque store and
 * prepared statements through the small API below (orchestrator/store.c is the one file that
 * includes sqlite3.h). A store handle belongs to one thread at a time; threads that write
 * concurrently each open their own handle on the same file (WAL + busy_timeout serialise them).
 *
 * Errors are negative errno-style codes: -EBUSY (locked past the busy timeout), -EEXIST (a
 * constraint such as a UNIQUE key failed), -ENOSPC, -ENOENT (no such row where one was
 * expected), -EPROTO (the database is newer than this program: exit 78), -EIO (anything else);
 * tf_store_errmsg says what happened in words.
 */
#ifndef TF_STORE_H
#define TF_STORE_H

#include <stddef.h>
#include <stdint.h>

struct tf_store;
struct tf_stmt;

enum tf_store_flags {
	TF_STORE_MIGRATE = 1 << 0,  /* apply pending migrations when opening */
	TF_STORE_READONLY = 1 << 1, /* open read-only (status, listings); implies no migration */
	TF_STORE_ANY_VERSION = 1 << 2, /* with READONLY: open a newer database too (to report it) */
};

/* The file name of the database inside a state home. */
#define TF_STORE_FILE "tpuflow.db"

/* Opens (creating it unless TF_STORE_READONLY) the database at `path`. A database whose
 * user_version is newer than the newest embedded migration is refused with -EPROTO and a
 * message in err. Without TF_STORE_MIGRATE a database with pending migrations is still opened
 * (tf_store_version tells). On success *out is a new handle the caller frees with
 * tf_store_close. */
int tf_store_open(const char *path, unsigned flags, struct tf_store **out, char *err,
                  size_t errlen);

/* Opens HOME/tpuflow.db with TF_STORE_MIGRATE; err as above. The caller owns *out. */
int tf_store_open_home(const char *home, struct tf_store **out, char *err, size_t errlen);

void tf_store_close(struct tf_store *st); /* NULL is a no-op */

/* Schema versions: the database's PRAGMA user_version and the newest one this program has. */
int tf_store_version(struct tf_store *st, int *version);
int tf_store_latest_version(void);
/* Name of embedded migration `version` (1-based), NULL when out of range. */
const char *tf_store_migration_name(int version);

/* Applies every pending migration, each in its own transaction that also sets user_version.
 * *applied (may be NULL) receives how many ran. */
int tf_store_migrate(struct tf_store *st, int *applied);

/* The change generation: a process-wide number that moves after every commit made through
 * any handle of this process, and after commits of other processes once a poller has seen
 * them (tf_store_poll_changes). A cache of stored state notes the generation before it reads
 * the database and reads again when the number has moved (store.c, invariant 5). */
uint64_t tf_store_generation(void);
/* Moves the generation when another connection, of any process, committed since this
 * handle's previous call (PRAGMA data_version). For one polling thread per process. */
int tf_store_poll_changes(struct tf_store *st);

const char *tf_store_path(const struct tf_store *st);
const char *tf_store_errmsg(const struct tf_store *st); /* last error, for people */

/* Write transactions: tf_store_begin takes the write lock at once (BEGIN IMMEDIATE).
 * Transactions do not nest. */
int tf_store_begin(struct tf_store *st);
int tf_store_commit(struct tf_store *st);
void tf_store_rollback(struct tf_store *st); /* no-op when no transaction is open */
int tf_store_in_transaction(const struct tf_store *st);
/* For functions that may run inside a caller's transaction or on their own: tf_store_join
 * opens a transaction only when none is open (*own says whether it did); tf_store_leave ends
 * the one it opened (commit when rc is 0, else rollback) and returns rc or the commit's error,
 * and leaves a caller's transaction alone. */
int tf_store_join(struct tf_store *st, int *own);
int tf_store_leave(struct tf_store *st, int own, int rc);

/* Durability (store.c, invariant 6): a commit returns once it is on disk. A handle with
 * deferred sync (on = 1) returns from a commit once it is written, so the caller can release
 * its own locks and let other writers go on; it then waits with tf_store_sync before it acts
 * on the commit as durable (answers a client). tf_store_sync waits until every commit this
 * process has written to the file so far is on disk (also what a reader saw of them); it
 * returns at once when all are. */
void tf_store_defer_sync(struct tf_store *st, int on);
int tf_store_sync(struct tf_store *st);
/* Commits this process made, and the fdatasyncs of the WAL that made them durable (fewer when
 * commits shared one), since it started. */
void tf_store_sync_stats(uint64_t *commits, uint64_t *syncs);

/* Runs one or more SQL statements without parameters or results. */
int tf_store_exec(struct tf_store *st, const char *sql);

/* Runs one statement to completion with parameters bound from `types`, one character per
 * parameter: 't' const char * (NULL binds NULL), 'i' int64_t, 'd' double, 'n' nothing (binds
 * NULL, consumes no argument). Returns 0 or a negative code. */
int tf_store_run(struct tf_store *st, const char *sql, const char *types, ...);

/* Rows changed by the last statement; rowid of the last insert. */
int64_t tf_store_changes(struct tf_store *st);
int64_t tf_store_last_rowid(struct tf_store *st);

/* A prepared statement cached by the store under its SQL text (keep the SQL a literal, or one
 * of a bounded set of texts built from literals, as tf_runs_where_sql's: each is kept). The
 * store owns it: call tf_stmt_done when finished with it so it can be reused. Parameters are
 * bound with `types` as in tf_store_run. Returns NULL and sets the error message on failure. */
struct tf_stmt *tf_store_query(struct tf_store *st, const char *sql, const char *types, ...);
/* 1 when a row is ready, 0 when there are no more rows, negative on error. */
int tf_stmt_step(struct tf_stmt *s);
/* Column values of the current row; text is borrowed until the next step or done (copy it). */
const char *tf_stmt_text(struct tf_stmt *s, int col); /* NULL for SQL NULL */
int64_t tf_stmt_int(struct tf_stmt *s, int col);
double tf_stmt_double(struct tf_stmt *s, int col);
int tf_stmt_is_null(struct tf_stmt *s, int col);
/* A copy of the text column (NULL for SQL NULL), owned by the caller. */
char *tf_stmt_strdup(struct tf_stmt *s, int col);
void tf_stmt_done(struct tf_stmt *s); /* resets it for reuse; NULL is a no-op */

/* One-value queries: the first column of the first row. -ENOENT when there is no row. */
int tf_store_query_int(struct tf_store *st, int64_t *out, const char *sql, const char *types, ...);
/* *out is a new string owned by the caller (NULL for SQL NULL). */
int tf_store_query_text(struct tf_store *st, char **out, const char *sql, const char *types, ...);

/* PRAGMA integrity_check: 0 when it reports "ok", -EIO otherwise (message in errmsg). */
int tf_store_integrity_check(struct tf_store *st);

#endif

/* store.c — owns the SQLite connection: pragmas, migrations, transactions and the statement
 * cache. The only file in tpuflow that includes sqlite3.h.
 *
 * Invariants:
 *  1. Every connection runs journal_mode=WAL, foreign_keys=ON and a busy_timeout, so several
 *     handles (threads or processes) can share the file; write transactions start with BEGIN
 *     IMMEDIATE so a writer never has to upgrade a read lock (the classic SQLITE_BUSY
 *     deadlock). A commit survives power loss once it has returned: it is synced by group
 *     commit (invariant 6), not by SQLite itself.
 *  2. The schema is changed only by migrations/NNNN_name.sql, embedded at build time. Each
 *     one runs in its own transaction together with `PRAGMA user_version = NNNN`, so a crash
 *     leaves the database at a whole version. A database whose user_version is newer than
 *     the program's newest migration is refused: an older binary must not write to it.
 *  3. Prepared statements are cached per handle by SQL text and reset after use.
 *  4. The WAL file keeps its size: it is preallocated (zeros written and synced once, under
 *     the write lock) to hold WAL_AUTOCHECKPOINT pages and more, and kept when the last
 *     connection closes (SQLITE_FCNTL_PERSIST_WAL). A commit then overwrites blocks the file
 *     already has, and its fdatasync does not also have to write the inode: on the ext4
 *     development VM an fdatasync after appending to the WAL took ~0.6 ms, after overwriting
 *     ~0.11 ms (bench/dag, 1000-step chain). Durability is unchanged: synchronous=FULL syncs
 *     the WAL at every commit either way, and a zero-filled tail is not a valid frame, so
 *     recovery stops where the committed frames end, as it does after any WAL reset.
 *  5. The change generation (tf_store_generation) moves after every commit made through a
 *     handle of this process, from SQLite's WAL hook, which runs once the commit is done and
 *     the write lock released; the same hook runs the checkpoint wal_autocheckpoint would
 *     have run (it replaces that hook). Commits of other processes move it when a poller
 *     sees PRAGMA data_version change (tf_store_poll_changes). A cache that reads the
 *     generation before it reads the database therefore never keeps a state older than a
 *     commit it has been told of.
 *  6. Group commit. Connections run synchronous=NORMAL, under which SQLite writes a commit's
 *     frames to the WAL without syncing it; the WAL hook then waits until an fdatasync of the
 *     WAL that started after those frames were written has finished. One thread of the
 *     process syncs at a time (the leader, on a descriptor of its own); commits written
 *     while it syncs wait for it and are covered by the next sync, one for all of them. So a
 *     commit that returned is on disk, as with synchronous=FULL, but the fsync happens after
 *     SQLite released its write lock: other writers go on writing meanwhile, and N commits
 *     waiting together cost one fsync instead of N in a row. Under FULL a new connection
 *     also syncs the home directory at its first commit (SQLite's unix VFS, for a newly
 *     created WAL); here the WAL exists and is preallocated by whoever created it, which
 *     syncs the directory once (wal_preallocate). What differs from FULL: between the write
 *     and the sync (one fsync, a few ms) other connections can already read the commit; a
 *     power loss in that window loses it and every later commit (WAL recovery keeps a prefix
 *     of the commits, never a later one without an earlier). A crash of the process (kill
 *     -9) loses nothing that was written: the frames are in the kernel's page cache. A
 *     handle may defer the wait (tf_store_defer_sync) so its caller can release its own
 *     locks first and wait with tf_store_sync.
 *  7. Closing a connection does not checkpoint (SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE); the
 *     checkpoint of on_wal_commit, once the WAL holds WAL_AUTOCHECKPOINT pages, is the only
 *     one. With the WAL kept (invariant 4) its frames stay valid after a checkpoint at close,
 *     so the next process to open the database found them again and copied them into the
 *     database again when it closed: every command, a read-only `runs list` too, wrote
 *     those pages and paid three fdatasyncs (strace: 400 pwrites on a 10,000-run home).
 *     Durability is the WAL's, as before; the database file is only further behind it.
 */
#include "orchestrator/store.h"
#include "orchestrator/migrations.h"

#define TF_LOG_TAG "store"
#include "common/common.h"
#include "common/log.h"

#include <errno.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <pthread.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define BUSY_TIMEOUT_MS 10000
/* Pages in the WAL that trigger a checkpoint (SQLite's default, stated so the preallocation
 * below matches it), and the WAL size kept preallocated: those pages plus room for the commit
 * that crosses the threshold. */
#define WAL_AUTOCHECKPOINT 1000 /* pages; the checkpoint of on_wal_commit */
#define WAL_PREALLOC_FRAMES (WAL_AUTOCHECKPOINT + 128)
#define WAL_HEADER_BYTES 32
#define WAL_FRAME_HEADER_BYTES 24

struct tf_stmt {
	sqlite3_stmt *stmt;     /* the prepared statement */
	const char *sql_ptr;    /* SQL text pointer as given (looked at first) */
	char *sql;              /* a copy of that text: what the statement is cached by */
	struct tf_store *owner; /* for error messages */
	int in_use;             /* handed out and not yet done */
};

struct tf_store {
	sqlite3 *db;           /* the connection */
	char *path;            /* database file */
	char errmsg[512];      /* last error, for people */
	struct tf_stmt *cache; /* prepared statements */
	size_t ncache, capcache;
	int64_t data_version;  /* last PRAGMA data_version seen by tf_store_poll_changes */
	struct walsync *ws;    /* group commit of this file (NULL: a read-only handle) */
	int defer;             /* tf_store_defer_sync: commits return before their sync */
};

/* ---- group commit (invariant 6) --------------------------------------------------------- */

/* One per WAL file the process writes, shared by its handles. */
struct walsync {
	struct walsync *next;
	char *wal; /* the WAL file's path */
	int refs;  /* handles using it (under walsyncs_mu) */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int fd;            /* the leader's descriptor on the WAL (-1: not open) */
	ino_t ino;         /* its inode: a WAL removed and created again is opened again */
	uint64_t written;  /* tickets handed out: commits written to the WAL */
	uint64_t synced;   /* every ticket up to this one is on disk */
	int syncing;       /* a leader is in fdatasync */
	uint64_t bad_from, bad_to; /* tickets of the last round whose sync failed */
};

static pthread_mutex_t walsyncs_mu = PTHREAD_MUTEX_INITIALIZER;
static struct walsync *walsyncs;
static _Atomic uint64_t n_commits, n_syncs; /* tf_store_sync_stats */

void tf_store_sync_stats(uint64_t *commits, uint64_t *syncs)
{
	*commits = atomic_load(&n_commits);
	*syncs = atomic_load(&n_syncs);
}

static struct walsync *walsync_get(const char *db_path)
{
	char *wal = tf_xasprintf("%s-wal", db_path);
	pthread_mutex_lock(&walsyncs_mu);
	struct walsync *w = walsyncs;
	while (w && strcmp(w->wal, wal))
		w = w->next;
	if (!w) {
		w = tf_xcalloc(1, sizeof(*w));
		w->wal = wal;
		wal = NULL;
		w->fd = -1;
		pthread_mutex_init(&w->mu, NULL);
		pthread_cond_init(&w->cv, NULL);
		w->next = walsyncs;
		walsyncs = w;
	}
	w->refs++;
	pthread_mutex_unlock(&walsyncs_mu);
	free(wal);
	return w;
}

static void walsync_put(struct walsync *w)
{
	if (!w)
		return;
	pthread_mutex_lock(&walsyncs_mu);
	int last = --w->refs == 0;
	if (last) {
		struct walsync **pp = &walsyncs;
		while (*pp != w)
			pp = &(*pp)->next;
		*pp = w->next;
	}
	pthread_mutex_unlock(&walsyncs_mu);
	if (!last)
		return;
	if (w->fd >= 0)
		close(w->fd);
	pthread_mutex_destroy(&w->mu);
	pthread_cond_destroy(&w->cv);
	free(w->wal);
	free(w);
}

/* The leader's fdatasync, on a descriptor that names the WAL file of now. 0 or -errno. */
static int walsync_fsync(struct walsync *w)
{
	struct stat sb;
	if (stat(w->wal, &sb) < 0)
		return -errno;
	if (w->fd >= 0 && sb.st_ino != w->ino) {
		close(w->fd);
		w->fd = -1;
	}
	if (w->fd < 0) {
		w->fd = open(w->wal, O_RDWR | O_CLOEXEC);
		if (w->fd < 0)
			return -errno;
		w->ino = sb.st_ino;
	}
	atomic_fetch_add(&n_syncs, 1);
	return fdatasync(w->fd) < 0 ? -errno : 0;
}

/* A ticket for a commit whose frames are written to the WAL now. */
static uint64_t walsync_ticket(struct walsync *w)
{
	pthread_mutex_lock(&w->mu);
	uint64_t t = ++w->written;
	pthread_mutex_unlock(&w->mu);
	atomic_fetch_add(&n_commits, 1);
	return t;
}

/* Returns once ticket t is on disk (0), or -errno when the sync that covered it failed. */
static int walsync_wait(struct walsync *w, uint64_t t)
{
	int rc = 0;
	pthread_mutex_lock(&w->mu);
	for (;;) {
		if (t >= w->bad_from && t <= w->bad_to) {
			rc = -EIO;
			break;
		}
		if (w->synced >= t)
			break;
		if (w->syncing) {
			pthread_cond_wait(&w->cv, &w->mu);
			continue;
		}
		uint64_t upto = w->written; /* every commit written so far */
		w->syncing = 1;
		pthread_mutex_unlock(&w->mu);
		int e = walsync_fsync(w);
		pthread_mutex_lock(&w->mu);
		w->syncing = 0;
		if (e) {
			tf_error("cannot sync '%s': %s", w->wal, strerror(-e));
			w->bad_from = w->synced + 1;
			w->bad_to = upto;
		}
		w->synced = upto;
		pthread_cond_broadcast(&w->cv);
	}
	pthread_mutex_unlock(&w->mu);
	return rc;
}

static _Atomic uint64_t generation = 1; /* invariant 5 */

uint64_t tf_store_generation(void)
{
	return atomic_load_explicit(&generation, memory_order_acquire);
}

/* After every commit of the handle ctx, with SQLite's write lock released: invariants 5, 6. */
static int on_wal_commit(void *ctx, sqlite3 *db, const char *name, int frames)
{
	struct tf_store *st = ctx;
	int rc = SQLITE_OK;
	uint64_t t = walsync_ticket(st->ws);
	if (!st->defer && walsync_wait(st->ws, t))
		rc = SQLITE_IOERR; /* the commit's statement fails: nobody acts on it as durable */
	atomic_fetch_add_explicit(&generation, 1, memory_order_release);
	if (frames >= WAL_AUTOCHECKPOINT) /* what SQLite's own hook does (sqlite3_wal_hook) */
		sqlite3_wal_checkpoint(db, name);
	return rc;
}

void tf_store_defer_sync(struct tf_store *st, int on)
{
	st->defer = on;
}

int tf_store_sync(struct tf_store *st)
{
	if (!st->ws)
		return 0;
	pthread_mutex_lock(&st->ws->mu);
	uint64_t t = st->ws->written;
	pthread_mutex_unlock(&st->ws->mu);
	int rc = walsync_wait(st->ws, t);
	if (rc)
		snprintf(st->errmsg, sizeof(st->errmsg), "database '%s': cannot sync its WAL: %s",
		         st->path, strerror(-rc));
	return rc;
}

int tf_store_poll_changes(struct tf_store *st)
{
	int64_t v;
	int rc = tf_store_query_int(st, &v, "PRAGMA data_version", "");
	if (rc)
		return rc;
	if (st->data_version && v != st->data_version)
		atomic_fetch_add_explicit(&generation, 1, memory_order_release);
	st->data_version = v;
	return 0;
}

static int map_rc(int rc)
{
	switch (rc & 0xff) {
	case SQLITE_OK:
	case SQLITE_DONE:
	case SQLITE_ROW:
		return 0;
	case SQLITE_BUSY:
	case SQLITE_LOCKED:
		return -EBUSY;
	case SQLITE_CONSTRAINT:
		return -EEXIST;
	case SQLITE_FULL:
		return -ENOSPC;
	case SQLITE_NOMEM:
		return -ENOMEM;
	case SQLITE_READONLY:
	case SQLITE_PERM:
	case SQLITE_AUTH:
		return -EACCES;
	case SQLITE_CANTOPEN:
		return -ENOENT;
	default:
		return -EIO;
	}
}

/* What the user can do about a failure whose cause is the machine rather than tpuflow: a
 * full disk (SQLite reports most ENOSPC as "disk I/O error"), a read-only home, a damaged
 * file. Sets the message and returns the code, or returns 0 when there is nothing to add. */
static int explain(struct tf_store *st, int rc)
{
	int sys = st->db ? sqlite3_system_errno(st->db) : 0;
	if ((rc & 0xff) == SQLITE_FULL || sys == ENOSPC || sys == EDQUOT) {
		snprintf(st->errmsg, sizeof(st->errmsg),
		         "database '%s': the disk is full (%s): free space on the file system "
		         "that holds the state home, or use another --home",
		         st->path, strerror(sys == EDQUOT ? EDQUOT : ENOSPC));
		return -ENOSPC;
	}
	if ((rc & 0xff) == SQLITE_READONLY || sys == EROFS ||
	    ((rc & 0xff) == SQLITE_CANTOPEN && (sys == EACCES || sys == EPERM))) {
		snprintf(st->errmsg, sizeof(st->errmsg),
		         "database '%s' cannot be written (%s): the state home must be writable "
		         "(check its permissions and mount, or use another --home)",
		         st->path, sys ? strerror(sys) : "read-only");
		return -EACCES;
	}
	if ((rc & 0xff) == SQLITE_CORRUPT || (rc & 0xff) == SQLITE_NOTADB) {
		snprintf(st->errmsg, sizeof(st->errmsg),
		         "database '%s' is damaged or not a tpuflow database (%s): restore it "
		         "from a copy, or move it away and use a new --home",
		         st->path, sqlite3_errstr(rc));
		return -EBADMSG;
	}
	return 0;
}

static int fail(struct tf_store *st, int rc, const char *what)
{
	int code = explain(st, rc);
	if (!code) {
		snprintf(st->errmsg, sizeof(st->errmsg), "database '%s': %s: %s", st->path, what,
		         st->db ? sqlite3_errmsg(st->db) : sqlite3_errstr(rc));
		code = map_rc(rc);
	}
	tf_debug("%s", st->errmsg);
	return code;
}

int tf_store_latest_version(void)
{
	return tf_migrations_count;
}

const char *tf_store_migration_name(int version)
{
	if (version < 1 || version > tf_migrations_count)
		return NULL;
	return tf_migrations[version - 1].name;
}

const char *tf_store_path(const struct tf_store *st)
{
	return st->path;
}

const char *tf_store_errmsg(const struct tf_store *st)
{
	return st->errmsg;
}

int tf_store_exec(struct tf_store *st, const char *sql)
{
	char *msg = NULL;
	int rc = sqlite3_exec(st->db, sql, NULL, NULL, &msg);
	if (rc != SQLITE_OK) {
		int code = explain(st, rc);
		if (!code) {
			snprintf(st->errmsg, sizeof(st->errmsg), "database '%s': %s", st->path,
			         msg ? msg : sqlite3_errstr(rc));
			code = map_rc(rc);
		}
		sqlite3_free(msg);
		return code;
	}
	return 0;
}

int tf_store_version(struct tf_store *st, int *version)
{
	int64_t v = 0;
	int rc = tf_store_query_int(st, &v, "PRAGMA user_version", "");
	if (rc == 0)
		*version = (int)v;
	return rc;
}

/* BEGIN and COMMIT go through the statement cache: sqlite3_exec would parse them again at
 * every transaction, a measurable part of a chain step's coordinator time. */
int tf_store_begin(struct tf_store *st)
{
	return tf_store_run(st, "BEGIN IMMEDIATE", "");
}

int tf_store_commit(struct tf_store *st)
{
	int rc = tf_store_run(st, "COMMIT", "");
	if (rc)
		tf_store_rollback(st);
	return rc;
}

void tf_store_rollback(struct tf_store *st)
{
	if (st && !sqlite3_get_autocommit(st->db))
		sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
}

int tf_store_in_transaction(const struct tf_store *st)
{
	return !sqlite3_get_autocommit(st->db);
}

int tf_store_join(struct tf_store *st, int *own)
{
	*own = !tf_store_in_transaction(st);
	return *own ? tf_store_begin(st) : 0;
}

int tf_store_leave(struct tf_store *st, int own, int rc)
{
	if (!own)
		return rc;
	if (rc) {
		tf_store_rollback(st);
		return rc;
	}
	return tf_store_commit(st);
}

int tf_store_migrate(struct tf_store *st, int *applied)
{
	int version = 0, n = 0, rc;

	rc = tf_store_version(st, &version);
	if (rc)
		goto out;
	if (version > tf_migrations_count) {
		snprintf(
		    st->errmsg, sizeof(st->errmsg),
		    "database '%s' has schema version %d but this tpuflow knows up to %d: use a "
		    "newer tpuflow or another --home",
		    st->path, version, tf_migrations_count);
		rc = -EPROTO;
		goto out;
	}
	for (int v = version + 1; v <= tf_migrations_count; v++) {
		const struct tf_migration *m = &tf_migrations[v - 1];
		rc = tf_store_begin(st);
		if (rc)
			goto out;
		/* Another process may have migrated while we waited for the lock. */
		int now = 0;
		rc = tf_store_version(st, &now);
		if (rc == 0 && now >= v) {
			rc = tf_store_commit(st);
			if (rc)
				goto out;
			continue;
		}
		if (rc == 0)
			rc = tf_store_exec(st, m->sql);
		if (rc == 0) {
			char pragma[64];
			snprintf(pragma, sizeof(pragma), "PRAGMA user_version = %d", v);
			rc = tf_store_exec(st, pragma);
		}
		if (rc) {
			char inner[sizeof(st->errmsg)];
			snprintf(inner, sizeof(inner), "%s", st->errmsg);
			tf_store_rollback(st);
			/* tables ahead of user_version: the version was set back, or the file mixed */
			int ahead = strstr(inner, "duplicate column") || strstr(inner, "already exists");
			/* the database's words cut, so the advice after them is always there */
			snprintf(st->errmsg, sizeof(st->errmsg), "migration %s failed: %.300s%s",
			         m->name, inner,
			         ahead ? " (the database's tables are newer than its schema version "
			                 "(PRAGMA user_version): it was changed by hand or by another "
			                 "program; restore a copy of tpuflow.db, or use another --home)"
			               : "");
			goto out;
		}
		rc = tf_store_commit(st);
		if (rc)
			goto out;
		tf_info("applied migration %s to '%s'", m->name, st->path);
		n++;
	}
	if (applied)
		*applied = n;
out:
	return rc;
}

/* Syncs the directory that holds `path`, so a file created there is found after a power loss
 * (SQLite's unix VFS does the same for a new journal). Best effort, like the preallocation. */
static void sync_dir(const char *path)
{
	const char *slash = strrchr(path, '/');
	char *dir = slash ? tf_xasprintf("%.*s", (int)(slash - path), path) : tf_xstrdup(".");
	int fd = open(*dir ? dir : "/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd >= 0) {
		fsync(fd);
		close(fd);
	}
	free(dir);
}

/* Grows the WAL file (never shrinks it, never touches bytes it has) to WAL_PREALLOC_FRAMES
 * frames of zeros and syncs it. Runs inside BEGIN IMMEDIATE: SQLite appends frames only while
 * holding the WAL write lock, so nobody writes the file's tail meanwhile. Best effort: on any
 * failure the WAL simply grows as SQLite appends (slower commits, same durability). */
static void wal_preallocate(struct tf_store *st)
{
	int64_t page = 0;
	if (tf_store_query_int(st, &page, "PRAGMA page_size", "") || page <= 0)
		return;
	off_t want =
	    WAL_HEADER_BYTES + (off_t)WAL_PREALLOC_FRAMES * (off_t)(page + WAL_FRAME_HEADER_BYTES);
	char *wal = tf_xasprintf("%s-wal", st->path);
	struct stat sb;
	if (stat(wal, &sb) == 0 && sb.st_size >= want) {
		free(wal);
		return; /* the common case: nothing to do, no lock taken */
	}
	if (tf_store_begin(st)) {
		free(wal);
		return;
	}
	int fd = open(wal, O_WRONLY | O_CLOEXEC);
	if (fd >= 0 && fstat(fd, &sb) == 0 && sb.st_size < want) {
		static const char zeros[65536];
		off_t off = sb.st_size;
		int ok = 1;
		while (ok && off < want) {
			size_t n = (size_t)(want - off) < sizeof(zeros) ? (size_t)(want - off)
			                                                : sizeof(zeros);
			ssize_t w = pwrite(fd, zeros, n, off);
			ok = w > 0;
			off += ok ? w : 0;
		}
		if (!ok || fdatasync(fd))
			tf_debug("database '%s': WAL not preallocated: %s", st->path,
			         strerror(errno));
		else
			sync_dir(wal); /* the WAL may be new: its name must be on disk (invariant 6) */
	}
	if (fd >= 0)
		close(fd);
	tf_store_rollback(st);
	free(wal);
}

int tf_store_open(const char *path, unsigned flags, struct tf_store **out, char *err, size_t errlen)
{
	struct tf_store *st = tf_xcalloc(1, sizeof(*st));
	int rc, version = 0;
	int oflags = (flags & TF_STORE_READONLY) ? SQLITE_OPEN_READONLY
	                                         : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;

	st->path = tf_xstrdup(path);
	rc = sqlite3_open_v2(path, &st->db, oflags | SQLITE_OPEN_NOMUTEX, NULL);
	if (rc != SQLITE_OK) {
		rc = fail(st, rc, "cannot open");
		goto out;
	}
	sqlite3_busy_timeout(st->db, BUSY_TIMEOUT_MS);
	sqlite3_extended_result_codes(st->db, 0);
	if (!(flags & TF_STORE_READONLY)) {
		rc = tf_store_exec(st, "PRAGMA journal_mode=WAL");
		if (rc)
			goto out;
	}
	rc = tf_store_exec(st, "PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON");
	if (rc)
		goto out;
	if (!(flags & TF_STORE_READONLY)) {
		st->ws = walsync_get(path);
		sqlite3_wal_hook(st->db, on_wal_commit, st); /* invariants 5, 6 */
	}
	rc = tf_store_version(st, &version);
	if (rc)
		goto out;
	if (version > tf_migrations_count &&
	    (flags & (TF_STORE_READONLY | TF_STORE_ANY_VERSION)) !=
	        (TF_STORE_READONLY | TF_STORE_ANY_VERSION)) {
		snprintf(
		    st->errmsg, sizeof(st->errmsg),
		    "database '%s' has schema version %d but this tpuflow knows up to %d: use a "
		    "newer tpuflow or another --home",
		    path, version, tf_migrations_count);
		rc = -EPROTO;
		goto out;
	}
	if ((flags & TF_STORE_MIGRATE) && !(flags & TF_STORE_READONLY)) {
		rc = tf_store_migrate(st, NULL);
		if (rc)
			goto out;
	}
	if (!(flags & TF_STORE_READONLY)) {
		int persist = 1;
		sqlite3_file_control(st->db, "main", SQLITE_FCNTL_PERSIST_WAL, &persist);
		/* invariant 7: no checkpoint at close */
		sqlite3_db_config(st->db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, NULL);
		wal_preallocate(st);
	}
	*out = st;
	st = NULL;
out:
	if (st) {
		if (err && errlen)
			tf_errf(err, errlen, "%s",
			        st->errmsg[0] ? st->errmsg : "cannot open database");
		tf_store_close(st);
	}
	return rc;
}

int tf_store_open_home(const char *home, struct tf_store **out, char *err, size_t errlen)
{
	char *path = tf_xasprintf("%s/%s", home, TF_STORE_FILE);
	int rc = tf_mkdir_p(home);
	if (rc) {
		tf_errf(err, errlen, "cannot create state home '%s': %s", home, strerror(-rc));
		goto out;
	}
	/* SQLite takes a zero-byte file for a new database, so a home whose database was
	 * truncated would silently start empty. A file that has stayed empty for a while (not one
	 * another process is creating right now) is refused. */
	struct stat sb;
	if (stat(path, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size == 0 &&
	    time(NULL) - sb.st_mtime > 10) {
		tf_errf(err, errlen,
		        "database '%s' is empty (0 bytes): it was truncated or never written; "
		        "restore it from a copy, or remove it to start a new state home",
		        path);
		rc = -EBADMSG;
		goto out;
	}
	rc = tf_store_open(path, TF_STORE_MIGRATE, out, err, errlen);
out:
	free(path);
	return rc;
}

void tf_store_close(struct tf_store *st)
{
	if (!st)
		return;
	for (size_t i = 0; i < st->ncache; i++) {
		sqlite3_finalize(st->cache[i].stmt);
		free(st->cache[i].sql);
	}
	free(st->cache);
	if (st->db)
		sqlite3_close_v2(st->db);
	walsync_put(st->ws);
	free(st->path);
	free(st);
}

static int bind_va(struct tf_store *st, sqlite3_stmt *stmt, const char *types, va_list ap)
{
	int rc = SQLITE_OK;
	/* A mismatch is a programming error; catch it here rather than as a confusing
	 * constraint failure later. */
	if ((int)strlen(types ? types : "") != sqlite3_bind_parameter_count(stmt)) {
		tf_errf(st->errmsg, sizeof(st->errmsg), "%d parameter types given for %d in: %s",
		        (int)strlen(types ? types : ""), sqlite3_bind_parameter_count(stmt),
		        sqlite3_sql(stmt));
		tf_error("%s", st->errmsg);
		return -EINVAL;
	}
	for (int i = 0; types && types[i] && rc == SQLITE_OK; i++) {
		int idx = i + 1;
		switch (types[i]) {
		case 't': {
			const char *s = va_arg(ap, const char *);
			rc = s ? sqlite3_bind_text(stmt, idx, s, -1, SQLITE_TRANSIENT)
			       : sqlite3_bind_null(stmt, idx);
			break;
		}
		case 'i':
			rc = sqlite3_bind_int64(stmt, idx, va_arg(ap, int64_t));
			break;
		case 'd':
			rc = sqlite3_bind_double(stmt, idx, va_arg(ap, double));
			break;
		case 'n':
			rc = sqlite3_bind_null(stmt, idx);
			break;
		default:
			snprintf(st->errmsg, sizeof(st->errmsg), "bad bind type '%c'", types[i]);
			return -EINVAL;
		}
	}
	if (rc != SQLITE_OK)
		return fail(st, rc, "bind");
	return 0;
}

/* A free cached statement of this SQL text: first the one prepared from the same pointer
 * (one strcmp), then any. The text is compared even when the pointer matches: a caller may
 * have written other SQL into the same buffer, or malloc given a freed string's address to
 * another. (The statement's own sqlite3_sql() would not do: it stops after the first
 * statement's semicolon.) */
static struct tf_stmt *cached(struct tf_store *st, const char *sql)
{
	for (size_t i = 0; i < st->ncache; i++)
		if (st->cache[i].sql_ptr == sql && !st->cache[i].in_use &&
		    !strcmp(st->cache[i].sql, sql))
			return &st->cache[i];
	for (size_t i = 0; i < st->ncache; i++)
		if (!st->cache[i].in_use && !strcmp(st->cache[i].sql, sql))
			return &st->cache[i];
	sqlite3_stmt *stmt = NULL;
	int rc = sqlite3_prepare_v2(st->db, sql, -1, &stmt, NULL);
	if (rc != SQLITE_OK) {
		fail(st, rc, "prepare");
		return NULL;
	}
	if (st->ncache == st->capcache) {
		/* Handed-out pointers must stay valid: grow only when none is in use. */
		for (size_t i = 0; i < st->ncache; i++)
			if (st->cache[i].in_use) {
				snprintf(st->errmsg, sizeof(st->errmsg),
				         "statement cache full while statements are in use");
				sqlite3_finalize(stmt);
				return NULL;
			}
		st->capcache = st->capcache ? st->capcache * 2 : 64;
		st->cache = tf_xrealloc(st->cache, st->capcache * sizeof(*st->cache));
	}
	struct tf_stmt *s = &st->cache[st->ncache++];
	*s = (struct tf_stmt){.stmt = stmt, .sql_ptr = sql, .sql = tf_xstrdup(sql), .owner = st};
	return s;
}

static struct tf_stmt *query_va(struct tf_store *st, const char *sql, const char *types, va_list ap)
{
	struct tf_stmt *s = cached(st, sql);
	if (!s)
		return NULL;
	sqlite3_reset(s->stmt);
	sqlite3_clear_bindings(s->stmt);
	if (bind_va(st, s->stmt, types, ap))
		return NULL;
	s->in_use = 1;
	return s;
}

struct tf_stmt *tf_store_query(struct tf_store *st, const char *sql, const char *types, ...)
{
	va_list ap;
	va_start(ap, types);
	struct tf_stmt *s = query_va(st, sql, types, ap);
	va_end(ap);
	return s;
}

int tf_stmt_step(struct tf_stmt *s)
{
	int rc = sqlite3_step(s->stmt);
	if (rc == SQLITE_ROW)
		return 1;
	if (rc == SQLITE_DONE)
		return 0;
	return fail(s->owner, rc, "query");
}

const char *tf_stmt_text(struct tf_stmt *s, int col)
{
	return (const char *)sqlite3_column_text(s->stmt, col);
}

int64_t tf_stmt_int(struct tf_stmt *s, int col)
{
	return sqlite3_column_int64(s->stmt, col);
}

double tf_stmt_double(struct tf_stmt *s, int col)
{
	return sqlite3_column_double(s->stmt, col);
}

int tf_stmt_is_null(struct tf_stmt *s, int col)
{
	return sqlite3_column_type(s->stmt, col) == SQLITE_NULL;
}

char *tf_stmt_strdup(struct tf_stmt *s, int col)
{
	const char *t = tf_stmt_text(s, col);
	return t ? tf_xstrdup(t) : NULL;
}

void tf_stmt_done(struct tf_stmt *s)
{
	if (!s)
		return;
	sqlite3_reset(s->stmt);
	sqlite3_clear_bindings(s->stmt);
	s->in_use = 0;
}

int tf_store_run(struct tf_store *st, const char *sql, const char *types, ...)
{
	va_list ap;
	va_start(ap, types);
	struct tf_stmt *s = query_va(st, sql, types, ap);
	va_end(ap);
	if (!s)
		return -EIO;
	int rc;
	do
		rc = tf_stmt_step(s);
	while (rc == 1);
	tf_stmt_done(s);
	return rc;
}

int64_t tf_store_changes(struct tf_store *st)
{
	return sqlite3_changes64(st->db);
}

int64_t tf_store_last_rowid(struct tf_store *st)
{
	return sqlite3_last_insert_rowid(st->db);
}

/* Runs a query for its first row's first column, into an int64_t (text == 0) or a new string
 * (text == 1): 0, -ENOENT when there is no row, or a negative code. */
static int query_first(struct tf_store *st, int text, void *out, const char *sql,
                       const char *types, va_list ap)
{
	struct tf_stmt *s = query_va(st, sql, types, ap);
	if (!s)
		return -EIO;
	int rc = tf_stmt_step(s);
	if (rc == 1) {
		if (text)
			*(char **)out = tf_stmt_strdup(s, 0);
		else
			*(int64_t *)out = tf_stmt_int(s, 0);
		rc = 0;
	} else if (rc == 0) {
		rc = -ENOENT;
	}
	tf_stmt_done(s);
	return rc;
}

int tf_store_query_int(struct tf_store *st, int64_t *out, const char *sql, const char *types, ...)
{
	va_list ap;
	va_start(ap, types);
	int rc = query_first(st, 0, out, sql, types, ap);
	va_end(ap);
	return rc;
}

int tf_store_query_text(struct tf_store *st, char **out, const char *sql, const char *types, ...)
{
	va_list ap;
	va_start(ap, types);
	int rc = query_first(st, 1, out, sql, types, ap);
	va_end(ap);
	return rc;
}

int tf_store_integrity_check(struct tf_store *st)
{
	char *res = NULL;
	int rc = tf_store_query_text(st, &res, "PRAGMA integrity_check", "");
	if (rc)
		return rc;
	if (!res || strcmp(res, "ok")) {
		snprintf(st->errmsg, sizeof(st->errmsg), "database '%s' integrity check: %s",
		         st->path, res ? res : "(no answer)");
		rc = -EIO;
	}
	free(res);
	return rc;
}

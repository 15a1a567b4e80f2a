/*
 * db.c — opening lensboxd's state database and bringing its schema up to date.
 *
 * Runs in lensboxd (root) at start-up, before any worker thread exists; lb_store_close() runs at shutdown after they
 * are gone. The database file is created 0600 with O_NOFOLLOW so a planted symlink in the state directory cannot
 * make root write elsewhere; SQLite is then opened with SQLITE_OPEN_NOFOLLOW, defensive mode (no writes to the schema
 * through PRAGMA writable_schema, no corrupting the file from SQL) and trusted_schema off.
 *
 * The schema, and how it changes
 * ------------------------------
 *
 *   schema_version(version INTEGER PRIMARY KEY, applied_at_ms)   one row per migration applied
 *   meta(key TEXT PRIMARY KEY, value INTEGER)                     'next_uid': where uid allocation resumes
 *   sandboxes(name PK, spec columns, image_digest, host_uid UNIQUE, host_gid, state, times, runs)
 *   runs(id PK, sandbox, language, started_at_ms, ... the ledger)
 *   run_stats(language, outcome, bucket PK, runs, duration_sum_ms, oom_kills, timeouts)   counters for metrics
 *
 * MIGRATIONS[i] takes the database from version i to i+1. lb_store_open() reads the highest applied version and
 * applies the rest in order, each in its own BEGIN IMMEDIATE transaction together with its schema_version row, so a
 * crash mid-migration leaves the previous version intact. A migration is never edited once released: a change is a
 * new entry at the end. A database whose version is above the last entry came from a newer lensbox and is refused.
 *
 * runs.network_blocked is a count (attempts refused during the run). Rows recorded by lensbox versions that stored a
 * flag hold 0 or 1 there; the column was INTEGER from the start, so the change needed no migration.
 *
 * runs.sandbox is deliberately not a foreign key: the ledger is the record of what ran, and it outlives the
 * sandbox (deleting a conversation's sandbox must not erase the history of what ran in it). Foreign keys are still
 * switched on so later tables that do reference each other are checked.
 *
 * Durability: WAL with synchronous=NORMAL. A commit survives the process being killed at any point (the restart test
 * does exactly that); a power cut may lose the last commits but never corrupts the file. FULL would add an fsync to
 * every run, which the per-run latency budget cannot afford. Statements are prepared once and kept for the life of
 * the connection (store_prepare); parsing was most of a small statement's cost.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "lb/name.h"
#include "lb/cleanup.h"
#include "store-internal.h"

static const char *const MIGRATIONS[] = {
	/* 0 -> 1: the tables */
	"CREATE TABLE meta ("
	"  key TEXT PRIMARY KEY NOT NULL,"
	"  value INTEGER NOT NULL"
	");"
	"CREATE TABLE sandboxes ("
	"  name TEXT PRIMARY KEY NOT NULL CHECK (length(name) BETWEEN 1 AND 63),"
	"  image TEXT NOT NULL CHECK (length(image) BETWEEN 1 AND 511),"
	"  image_digest TEXT NOT NULL DEFAULT '' CHECK (length(image_digest) <= 127),"
	"  network TEXT NOT NULL CHECK (network IN ('off', 'packages', 'web')),"
	"  cpu_millicores INTEGER NOT NULL CHECK (cpu_millicores >= 0),"
	"  memory_bytes INTEGER NOT NULL CHECK (memory_bytes >= 0),"
	"  disk_bytes INTEGER NOT NULL CHECK (disk_bytes >= 0),"
	"  idle_seconds INTEGER NOT NULL CHECK (idle_seconds >= 0),"
	"  keep_seconds INTEGER NOT NULL CHECK (keep_seconds >= 0),"
	"  host_uid INTEGER NOT NULL UNIQUE CHECK (host_uid > 0),"
	"  host_gid INTEGER NOT NULL CHECK (host_gid > 0),"
	"  state TEXT NOT NULL CHECK (state IN ('running', 'stopped')),"
	"  created_at_ms INTEGER NOT NULL,"
	"  last_used_at_ms INTEGER NOT NULL,"
	"  runs INTEGER NOT NULL DEFAULT 0"
	");"
	"CREATE TABLE runs ("
	"  id TEXT PRIMARY KEY NOT NULL,"
	"  sandbox TEXT NOT NULL,"
	"  language TEXT NOT NULL,"
	"  started_at_ms INTEGER NOT NULL,"
	"  duration_ms INTEGER NOT NULL,"
	"  exit_code INTEGER," /* NULL when killed */
	"  signal INTEGER NOT NULL DEFAULT 0,"
	"  timed_out INTEGER NOT NULL DEFAULT 0,"
	"  oom_killed INTEGER NOT NULL DEFAULT 0,"
	"  pids_limited INTEGER NOT NULL DEFAULT 0,"
	"  network_blocked INTEGER NOT NULL DEFAULT 0,"
	"  cpu_ms INTEGER NOT NULL DEFAULT 0,"
	"  peak_memory_bytes INTEGER NOT NULL DEFAULT 0,"
	"  stdout_bytes INTEGER NOT NULL DEFAULT 0,"
	"  stderr_bytes INTEGER NOT NULL DEFAULT 0,"
	"  message TEXT NOT NULL DEFAULT ''"
	");",
	/* 1 -> 2: indexes for the ledger's newest-first reads and the timers' scans */
	"CREATE INDEX runs_by_sandbox ON runs (sandbox, started_at_ms DESC, id DESC);"
	"CREATE INDEX runs_by_time ON runs (started_at_ms DESC, id DESC);"
	"CREATE INDEX sandboxes_by_use ON sandboxes (last_used_at_ms);",
	/* 2 -> 3: run figures kept as counters, so /metrics and /v1/health read ~150 rows instead of scanning the
	 * ledger under the store lock. Indexes are enum lb_language, enum lb_run_outcome and the bucket of
	 * lb_store_duration_bounds_ms (the CASEs below mirror them; changing either means a new migration that
	 * rebuilds this table). Counters only grow: pruning the ledger leaves them alone. */
	"CREATE TABLE run_stats ("
	"  language INTEGER NOT NULL,"
	"  outcome INTEGER NOT NULL,"
	"  bucket INTEGER NOT NULL,"
	"  runs INTEGER NOT NULL,"
	"  duration_sum_ms INTEGER NOT NULL,"
	"  oom_kills INTEGER NOT NULL,"
	"  timeouts INTEGER NOT NULL,"
	"  PRIMARY KEY (language, outcome, bucket)"
	");"
	/* ELSE 2: no such language is recorded any more (the store refuses it); such a row is skipped when read */
	"INSERT INTO run_stats SELECT"
	"  CASE language WHEN 'python' THEN 0 WHEN 'bash' THEN 1 ELSE 2 END,"
	"  CASE WHEN timed_out THEN 0 WHEN oom_killed THEN 1 WHEN exit_code IS NULL THEN 2"
	"       WHEN exit_code <> 0 THEN 3 ELSE 4 END,"
	"  CASE WHEN duration_ms <= 10 THEN 0 WHEN duration_ms <= 50 THEN 1 WHEN duration_ms <= 100 THEN 2"
	"       WHEN duration_ms <= 250 THEN 3 WHEN duration_ms <= 500 THEN 4 WHEN duration_ms <= 1000 THEN 5"
	"       WHEN duration_ms <= 2500 THEN 6 WHEN duration_ms <= 10000 THEN 7 WHEN duration_ms <= 60000 THEN 8"
	"       ELSE 9 END,"
	"  COUNT(*), SUM(duration_ms), SUM(oom_killed != 0), SUM(timed_out != 0)"
	"  FROM runs GROUP BY 1, 2, 3;",
	/* 3 -> 4: spare sandboxes (supervisor/spares.c) hold a host uid each before any conversation owns them; the
	 * uid allocator treats these as taken, and adopting a spare moves its uid into a sandboxes row. */
	"CREATE TABLE spares ("
	"  host_uid INTEGER PRIMARY KEY NOT NULL CHECK (host_uid > 0),"
	"  created_at_ms INTEGER NOT NULL"
	");",
	/* 4 -> 5: host uids reserved for the next new sandboxes that get no spare (supervisor/core/reserved.c), so that
	 * such a sandbox starts under its uid while the commit that creates its row runs; taken as the spares' are. */
	"CREATE TABLE reserved_uids ("
	"  host_uid INTEGER PRIMARY KEY NOT NULL CHECK (host_uid > 0),"
	"  reserved_at_ms INTEGER NOT NULL"
	");",
};

int lb_store_schema_latest(void)
{
	return (int)LB_ARRAY_SIZE(MIGRATIONS);
}

int store_fail(struct lb_store *s, int rc, struct lb_error *err, const char *what)
{
	int code;
	switch (rc & 0xff) {
	case SQLITE_CONSTRAINT:
		code = EEXIST;
		break;
	case SQLITE_BUSY:
	case SQLITE_LOCKED:
		code = EBUSY;
		break;
	case SQLITE_FULL:
		code = ENOSPC;
		break;
	case SQLITE_NOMEM:
		code = ENOMEM;
		break;
	case SQLITE_READONLY:
	case SQLITE_PERM:
	case SQLITE_AUTH:
		code = EACCES;
		break;
	default:
		code = EIO;
	}
	return lb_error_setx(err, code, "%s: %s", what, s && s->db ? sqlite3_errmsg(s->db) : sqlite3_errstr(rc));
}

int store_prepare(struct lb_store *s, const char *sql, sqlite3_stmt **ret, struct lb_error *err)
{
	for (size_t i = 0; i < s->n_stmts; i++)
		if (strcmp(s->stmts[i].sql, sql) == 0) {
			*ret = s->stmts[i].st;
			return 0;
		}
	if (s->n_stmts == STORE_MAX_STMTS)
		return lb_error_setx(err, E2BIG, "preparing a statement: more than %d distinct statements",
				     STORE_MAX_STMTS);
	if (s->n_stmts == s->cap_stmts) {
		size_t cap = s->cap_stmts ? s->cap_stmts * 2 : 32;
		struct store_stmt *n = realloc(s->stmts, cap * sizeof(*n));
		if (!n)
			return lb_error_set(err, ENOMEM, "preparing a statement");
		s->stmts = n;
		s->cap_stmts = cap;
	}
	char *copy = strdup(sql);
	if (!copy)
		return lb_error_set(err, ENOMEM, "preparing a statement");
	sqlite3_stmt *st = NULL;
	int rc = sqlite3_prepare_v3(s->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &st, NULL);
	if (rc != SQLITE_OK) {
		free(copy);
		return store_fail(s, rc, err, "preparing a statement");
	}
	s->stmts[s->n_stmts++] = (struct store_stmt){ .sql = copy, .st = st };
	*ret = st;
	return 0;
}

void store_stmts_clear(struct lb_store *s)
{
	for (size_t i = 0; i < s->n_stmts; i++) {
		sqlite3_finalize(s->stmts[i].st);
		free(s->stmts[i].sql);
	}
	free(s->stmts);
	s->stmts = NULL;
	s->n_stmts = s->cap_stmts = 0;
}

int store_exec(struct lb_store *s, const char *sql, struct lb_error *err)
{
	if (strchr(sql, ';')) { /* several statements: schema and settings, at open only */
		int rc = sqlite3_exec(s->db, sql, NULL, NULL, NULL);
		if (rc != SQLITE_OK)
			return store_fail(s, rc, err, "running SQL");
		return 0;
	}
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r = store_prepare(s, sql, &st, err);
	if (r < 0)
		return r;
	int rc;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW)
		;
	if (rc != SQLITE_DONE)
		return store_fail(s, rc, err, "running SQL");
	return 0;
}

void store_rollback(struct lb_store *s)
{
	if (!sqlite3_get_autocommit(s->db))
		sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
}

void store_column_text(sqlite3_stmt *st, int col, char *dst, size_t size)
{
	const unsigned char *t = sqlite3_column_text(st, col);
	size_t n = t ? (size_t)sqlite3_column_bytes(st, col) : 0;
	if (n >= size)
		n = size - 1;
	if (t && n)
		memcpy(dst, t, n);
	dst[n] = '\0';
}

bool store_bounded(const char *s, size_t max)
{
	return s && memchr(s, '\0', max + 1) != NULL;
}

bool lb_store_name_valid(const char *name)
{
	return lb_sandbox_name_valid(name);
}

static int64_t wall_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int read_version(struct lb_store *s, int *ret, struct lb_error *err)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r = store_prepare(s, "SELECT COALESCE(MAX(version), 0) FROM schema_version", &st, err);
	if (r < 0)
		return r;
	int rc = sqlite3_step(st);
	if (rc != SQLITE_ROW)
		return store_fail(s, rc, err, "reading the schema version");
	*ret = sqlite3_column_int(st, 0);
	return 0;
}

static int migrate(struct lb_store *s, struct lb_error *err)
{
	int r = store_exec(s,
			   "CREATE TABLE IF NOT EXISTS schema_version ("
			   "  version INTEGER PRIMARY KEY NOT NULL,"
			   "  applied_at_ms INTEGER NOT NULL)",
			   err);
	if (r < 0)
		return lb_error_wrap(err, "creating the schema_version table");
	int version = 0;
	r = read_version(s, &version, err);
	if (r < 0)
		return r;
	int latest = lb_store_schema_latest();
	if (version > latest)
		return lb_error_setx(err, EPROTO,
				     "the state database is at schema version %d, newer than this lensbox knows (%d): "
				     "it was written by a newer lensboxd",
				     version, latest);
	for (int v = version; v < latest; v++) {
		r = store_exec(s, "BEGIN IMMEDIATE", err);
		if (r < 0)
			return lb_error_wrap(err, "migrating to schema version %d", v + 1);
		r = store_exec(s, MIGRATIONS[v], err);
		if (r >= 0) {
			_cleanup_stmt_ sqlite3_stmt *st = NULL;
			r = store_prepare(s, "INSERT INTO schema_version (version, applied_at_ms) VALUES (?, ?)", &st,
					  err);
			if (r >= 0) {
				sqlite3_bind_int(st, 1, v + 1);
				sqlite3_bind_int64(st, 2, wall_ms());
				int rc = sqlite3_step(st);
				if (rc != SQLITE_DONE)
					r = store_fail(s, rc, err, "recording the schema version");
			}
		}
		if (r >= 0)
			r = store_exec(s, "COMMIT", err);
		if (r < 0) {
			store_rollback(s);
			return lb_error_wrap(err, "migrating to schema version %d", v + 1);
		}
	}
	return 0;
}

/* Creates the file ourselves so its mode is 0600 and no symlink is followed, whatever root's umask is. */
static int create_file(const char *path, struct lb_error *err)
{
	/* Safe as root: O_NOFOLLOW refuses a symlink planted at path, O_CREAT without O_TRUNC never destroys an
	 * existing database, and the fstat() check refuses anything that is not a regular file. */
	_cleanup_close_ int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY, 0600);
	if (fd < 0)
		return lb_error_set(err, errno, "opening the state database %s", path);
	struct stat st;
	if (fstat(fd, &st) < 0)
		return lb_error_set(err, errno, "checking the state database %s", path);
	if (!S_ISREG(st.st_mode))
		return lb_error_setx(err, EINVAL, "the state database %s is not a regular file", path);
	if ((st.st_mode & 077) && fchmod(fd, st.st_mode & 0700) < 0)
		return lb_error_set(err, errno, "making the state database %s private", path);
	return 0;
}

/* Takes <path>.lock exclusively, so a second lensboxd on the same state directory is refused at start instead of
 * reconciling (killing) the first one's sandboxes and handing out its uids. A separate file, because SQLite's own
 * POSIX locks on the database are dropped whenever any descriptor of it is closed; flock() on another file never
 * interferes with them. The kernel releases it when the process dies, however it dies. */
static int take_lock(const char *path, int *ret_fd, struct lb_error *err)
{
	_cleanup_free_ char *lock_path = NULL;
	if (asprintf(&lock_path, "%s.lock", path) < 0)
		return lb_error_set(err, ENOMEM, "locking the state database");
	/* Safe as root: O_NOFOLLOW refuses a planted symlink; the file holds nothing, only its lock matters. */
	_cleanup_close_ int fd = open(lock_path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY, 0600);
	if (fd < 0)
		return lb_error_set(err, errno, "opening %s", lock_path);
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		if (errno == EWOULDBLOCK)
			return lb_error_setx(
			    err, EBUSY, "another process (another lensboxd?) has the state database %s open", path);
		return lb_error_set(err, errno, "locking %s", lock_path);
	}
	*ret_fd = TAKE_FD(fd);
	return 0;
}

static int configure(struct lb_store *s, struct lb_error *err)
{
	int on = 1;
	/* defensive: SQL cannot corrupt the file (writable_schema, raw page writes); trusted_schema off: no SQL
	 * function runs from inside the schema (views, triggers) with side effects. */
	sqlite3_db_config(s->db, SQLITE_DBCONFIG_DEFENSIVE, 1, &on);
	sqlite3_db_config(s->db, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, &on);
	sqlite3_busy_timeout(s->db, 5000);

	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r = store_prepare(s, "PRAGMA journal_mode = WAL", &st, err);
	if (r < 0)
		return r;
	int rc = sqlite3_step(st);
	if (rc != SQLITE_ROW)
		return store_fail(s, rc, err, "switching to WAL");
	const unsigned char *mode = sqlite3_column_text(st, 0);
	if (!mode || strcmp((const char *)mode, "wal") != 0)
		return lb_error_setx(err, EIO, "switching to WAL: SQLite kept journal mode %s",
				     mode ? (const char *)mode : "(none)");
	return store_exec(s, "PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON", err);
}

int lb_store_open(const struct lb_store_config *cfg, struct lb_store **ret, struct lb_error *err)
{
	if (!cfg || !ret)
		return lb_error_setx(err, EINVAL, "opening the store: no configuration");
	if (cfg->uid_base == 0 || cfg->uid_count == 0 || cfg->uid_base > UINT32_MAX - cfg->uid_count)
		return lb_error_setx(err, EINVAL,
				     "opening the store: the uid range %u+%u is empty, starts at root or overflows",
				     cfg->uid_base, cfg->uid_count);
	const char *path = cfg->path ? cfg->path : LB_STORE_DEFAULT_PATH;

	int r = create_file(path, err);
	if (r < 0)
		return r;
	_cleanup_close_ int lock_fd = -1;
	r = take_lock(path, &lock_fd, err);
	if (r < 0)
		return r;

	_cleanup_free_ struct lb_store *s = calloc(1, sizeof(*s));
	if (!s)
		return lb_error_set(err, ENOMEM, "opening the store");
	s->lock_fd = -1;
	s->uid_base = cfg->uid_base;
	s->uid_count = cfg->uid_count;

	/* NOMUTEX: the connection is used by one thread at a time under s->lock, so SQLite's own mutex is redundant. */
	int rc = sqlite3_open_v2(
	    path, &s->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_NOFOLLOW | SQLITE_OPEN_EXRESCODE,
	    NULL);
	if (rc != SQLITE_OK) {
		(void)store_fail(s, rc, err, "opening the state database");
		sqlite3_close(s->db);
		return lb_error_wrap(err, "%s", path);
	}
	r = configure(s, err);
	if (r >= 0)
		r = migrate(s, err);
	if (r < 0) {
		store_stmts_clear(s);
		sqlite3_close(s->db);
		return lb_error_wrap(err, "opening the state database %s", path);
	}
	r = pthread_mutex_init(&s->lock, NULL);
	if (r != 0) {
		store_stmts_clear(s);
		sqlite3_close(s->db);
		return lb_error_set(err, r, "opening the store: creating its lock");
	}
	s->lock_fd = TAKE_FD(lock_fd);
	*ret = TAKE_PTR(s);
	return 0;
}

void lb_store_close(struct lb_store *s)
{
	if (!s)
		return;
	store_stmts_clear(s);
	sqlite3_close(s->db);
	if (s->lock_fd >= 0)
		close(s->lock_fd); /* after the database is closed: the next lensboxd may start */
	pthread_mutex_destroy(&s->lock);
	free(s);
}

int lb_store_schema_version(struct lb_store *s, int *ret_version, struct lb_error *err)
{
	_cleanup_unlock_ struct lb_store *locked = store_lock(s);
	int v = 0;
	int r = read_version(s, &v, err);
	if (r < 0)
		return r;
	*ret_version = v;
	return 0;
}

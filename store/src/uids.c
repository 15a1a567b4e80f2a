/*
 * uids.c — host uids: the allocator, and the two tables that hold uids before any sandbox row owns them, which the
 * allocator skips: `spares` (the uids of spare sandboxes lensboxd starts ahead of time, supervisor/core/spares.c)
 * and `reserved_uids` (uids kept for the next new sandboxes that get no spare, supervisor/core/reserved.c).
 *
 * Runs in lensboxd (root), from any thread; every function holds the store lock for its whole duration (the
 * _unlocked ones run inside their caller's transaction).
 *
 * Invariant: a host uid is in at most one of the three tables (sandboxes, spares, reserved_uids). A held uid comes
 * from the same allocator as a sandbox's, and a hand-over moves it from its holder to the sandbox's row inside one
 * transaction (sandboxes.c), so no moment exists where two owners hold it, or none does while its sandbox runs.
 *
 * Host uid allocation
 * -------------------
 * The range is [uid_base, uid_base + uid_count). meta('next_uid') remembers where the last allocation stopped; the
 * next one takes the first uid at or after it that no row (of sandboxes, spares or reserved_uids) holds, wrapping
 * once to uid_base:
 *
 *     uid_base        next_uid                          uid_base + uid_count
 *        |  used  free  | used used FREE <- taken here ...  |
 *
 * so a uid freed by a deletion is handed out again only after every other free uid was. host_uid is UNIQUE in the
 * table, so even a bug in this walk could not give two live rows the same uid: the insert would fail. Both the
 * search and the insert happen inside one BEGIN IMMEDIATE transaction.
 */
#include <errno.h>
#include <stdlib.h>

#include "lb/cleanup.h"
#include "store-internal.h"

/* Whether uid is free: three lookups in the uid indexes (sandboxes.host_uid is UNIQUE; the holders' tables are keyed
 * by it). */
static int uid_free(struct lb_store *s, int64_t uid, bool *ret_free, struct lb_error *err)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r = store_prepare(s,
			      "SELECT EXISTS (SELECT 1 FROM sandboxes WHERE host_uid = ?1) OR "
			      "EXISTS (SELECT 1 FROM spares WHERE host_uid = ?1) OR "
			      "EXISTS (SELECT 1 FROM reserved_uids WHERE host_uid = ?1)",
			      &st, err);
	if (r < 0)
		return r;
	sqlite3_bind_int64(st, 1, uid);
	int rc = sqlite3_step(st);
	if (rc != SQLITE_ROW)
		return store_fail(s, rc, err, "looking up a host uid");
	*ret_free = sqlite3_column_int64(st, 0) == 0;
	return 0;
}

/* Finds the first free uid in [from, end) (unlocked, inside the caller's transaction); 0 when there is none. */
static int first_free_uid(struct lb_store *s, int64_t from, int64_t end, int64_t *ret_uid, struct lb_error *err)
{
	/* The cursor moves past every uid it hands out, so `from` is almost always free: three index lookups instead
	 * of the scan below, which reads every row of the three tables (0.2-0.8 ms for a handful of rows on caches a
	 * program has just left cold). Same answer: `from` is the smallest candidate. */
	bool free_ = false;
	int r = from < end ? uid_free(s, from, &free_, err) : 0;
	if (r < 0)
		return r;
	if (free_) {
		*ret_uid = from;
		return 0;
	}
	/* Candidates are `from` itself and every uid right after a used one; the smallest that no row holds is the
	 * first gap at or after `from`. */
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	r = store_prepare(s,
			  "WITH used(u) AS (SELECT host_uid FROM sandboxes UNION ALL SELECT host_uid FROM spares "
			  "UNION ALL SELECT host_uid FROM reserved_uids) "
			  "SELECT MIN(c) FROM ("
			  "  SELECT ?1 AS c UNION ALL"
			  "  SELECT u + 1 FROM used WHERE u + 1 >= ?1 AND u + 1 < ?2"
			  ") WHERE c < ?2 AND c NOT IN (SELECT u FROM used)",
			  &st, err);
	if (r < 0)
		return r;
	sqlite3_bind_int64(st, 1, from);
	sqlite3_bind_int64(st, 2, end);
	int rc = sqlite3_step(st);
	if (rc != SQLITE_ROW)
		return store_fail(s, rc, err, "looking for a free host uid");
	*ret_uid = sqlite3_column_type(st, 0) == SQLITE_NULL ? 0 : sqlite3_column_int64(st, 0);
	return 0;
}

int store_allocate_uid(struct lb_store *s, uint32_t *ret_uid, struct lb_error *err)
{
	int64_t base = s->uid_base, end = (int64_t)s->uid_base + s->uid_count, next = base;
	{
		_cleanup_stmt_ sqlite3_stmt *st = NULL;
		int r = store_prepare(s, "SELECT value FROM meta WHERE key = 'next_uid'", &st, err);
		if (r < 0)
			return r;
		int rc = sqlite3_step(st);
		if (rc == SQLITE_ROW)
			next = sqlite3_column_int64(st, 0);
		else if (rc != SQLITE_DONE)
			return store_fail(s, rc, err, "reading the uid cursor");
	}
	if (next < base || next >= end) /* first use, or the configured range changed */
		next = base;

	int64_t uid = 0;
	int r = first_free_uid(s, next, end, &uid, err);
	if (r >= 0 && uid == 0 && next > base)
		r = first_free_uid(s, base, next, &uid, err);
	if (r < 0)
		return r;
	if (uid == 0)
		return lb_error_setx(
		    err, EUSERS,
		    "every host uid in the range %u-%u is taken by a sandbox: delete sandboxes or widen "
		    "the range",
		    s->uid_base, (uint32_t)(end - 1));

	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	r = store_prepare(s,
			  "INSERT INTO meta (key, value) VALUES ('next_uid', ?) "
			  "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
			  &st, err);
	if (r < 0)
		return r;
	sqlite3_bind_int64(st, 1, uid + 1 >= end ? base : uid + 1);
	int rc = sqlite3_step(st);
	if (rc != SQLITE_DONE)
		return store_fail(s, rc, err, "saving the uid cursor");
	*ret_uid = (uint32_t)uid;
	return 0;
}

/* The statements of one holder's table (literals: store_prepare keeps one prepared statement per text). */
struct holder_sql {
	const char *insert, *delete, *list, *what;
};

static const struct holder_sql HOLDERS[] = {
	[LB_STORE_SPARE] = { "INSERT INTO spares (host_uid, created_at_ms) VALUES (?1, ?2)",
			     "DELETE FROM spares WHERE host_uid = ?1", "SELECT host_uid FROM spares ORDER BY host_uid",
			     "spare" },
	[LB_STORE_RESERVED] = { "INSERT INTO reserved_uids (host_uid, reserved_at_ms) VALUES (?1, ?2)",
				"DELETE FROM reserved_uids WHERE host_uid = ?1",
				"SELECT host_uid FROM reserved_uids ORDER BY host_uid", "reservation" },
};

static const struct holder_sql *holder(enum lb_store_holder h)
{
	return h == LB_STORE_RESERVED ? &HOLDERS[LB_STORE_RESERVED] : &HOLDERS[LB_STORE_SPARE];
}

int store_held_add_unlocked(struct lb_store *s, enum lb_store_holder h, int64_t now_ms, uint32_t *ret_uid,
			    struct lb_error *err)
{
	uint32_t uid = 0;
	int r = store_allocate_uid(s, &uid, err);
	if (r < 0)
		return r;
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	r = store_prepare(s, holder(h)->insert, &st, err);
	if (r < 0)
		return r;
	sqlite3_bind_int64(st, 1, uid);
	sqlite3_bind_int64(st, 2, now_ms);
	int rc = sqlite3_step(st);
	if (rc != SQLITE_DONE)
		return store_fail(s, rc, err, "holding a host uid");
	*ret_uid = uid;
	return 0;
}

int store_held_take_unlocked(struct lb_store *s, enum lb_store_holder h, uint32_t uid, struct lb_error *err)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r = store_prepare(s, holder(h)->delete, &st, err);
	if (r < 0)
		return r;
	sqlite3_bind_int64(st, 1, uid);
	int rc = sqlite3_step(st);
	if (rc != SQLITE_DONE)
		return store_fail(s, rc, err, "releasing a held host uid");
	if (sqlite3_changes(s->db) != 1)
		return lb_error_setx(err, ENOENT, "no %s holds uid %u", holder(h)->what, uid);
	return 0;
}

int lb_store_held_add(struct lb_store *s, enum lb_store_holder h, int64_t now_ms, uint32_t *ret_uid,
		      struct lb_error *err)
{
	_cleanup_unlock_ struct lb_store *locked = store_lock(s);
	int r = store_exec(s, "BEGIN IMMEDIATE", err);
	if (r >= 0)
		r = store_held_add_unlocked(s, h, now_ms, ret_uid, err);
	if (r >= 0)
		r = store_exec(s, "COMMIT", err);
	if (r < 0) {
		store_rollback(s);
		return lb_error_wrap(err, "holding a host uid for a %s", holder(h)->what);
	}
	return 0;
}

int lb_store_held_remove(struct lb_store *s, enum lb_store_holder h, uint32_t uid, struct lb_error *err)
{
	_cleanup_unlock_ struct lb_store *locked = store_lock(s);
	int r = store_held_take_unlocked(s, h, uid, err);
	return r < 0 ? lb_error_wrap(err, "removing a %s", holder(h)->what) : 0;
}

int lb_store_held_list(struct lb_store *s, enum lb_store_holder h, uint32_t **ret_uids, size_t *ret_n,
		       struct lb_error *err)
{
	_cleanup_unlock_ struct lb_store *locked = store_lock(s);
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r = store_prepare(s, holder(h)->list, &st, err);
	if (r < 0)
		return r;
	_cleanup_free_ uint32_t *list = NULL;
	size_t n = 0, cap = 0;
	int rc;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		if (n == cap) {
			size_t ncap = cap ? cap * 2 : 16;
			uint32_t *bigger = reallocarray(list, ncap, sizeof(*list));
			if (!bigger)
				return lb_error_setx(err, ENOMEM, "listing held uids: out of memory");
			list = bigger;
			cap = ncap;
		}
		list[n++] = (uint32_t)sqlite3_column_int64(st, 0);
	}
	if (rc != SQLITE_DONE)
		return store_fail(s, rc, err, "listing held uids");
	*ret_uids = TAKE_PTR(list);
	*ret_n = n;
	return 0;
}

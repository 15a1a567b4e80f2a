/*
 * spares.c — the spares table: host uids held by spare sandboxes, which lensboxd starts ahead of time so that a
 * new conversation's first run does not wait for a sandbox to be built (supervisor/spares.c), and the adoption
 * that hands one of them to a named sandbox.
 *
 * Runs in lensboxd (root), from any thread; every function holds the store lock for its whole duration.
 *
 * Invariant: a host uid is in at most one of the two tables. A spare's uid comes from the same allocator as a
 * sandbox's (store_allocate_uid, which skips both tables), and adoption moves it from spares to the sandbox's row
 * inside one transaction, so no moment exists where two owners hold it or none does while its sandbox runs.
 */
#include <errno.h>
#include <stdlib.h>

#include "lb/cleanup.h"
#include "store-internal.h"

int lb_store_spare_add(struct lb_store *s, int64_t now_ms, uint32_t *ret_uid, struct lb_error *err)
{
	_cleanup_unlock_ struct lb_store *locked = store_lock(s);
	int r = store_exec(s, "BEGIN IMMEDIATE", err);
	if (r < 0)
		return lb_error_wrap(err, "reserving a uid for a spare sandbox");
	uint32_t uid = 0;
	r = store_allocate_uid(s, &uid, err);
	if (r >= 0) {
		_cleanup_stmt_ sqlite3_stmt *st = NULL;
		r = store_prepare(s, "INSERT INTO spares (host_uid, created_at_ms) VALUES (?1, ?2)", &st, err);
		if (r >= 0) {
			sqlite3_bind_int64(st, 1, uid);
			sqlite3_bind_int64(st, 2, now_ms);
			int rc = sqlite3_step(st);
			if (rc != SQLITE_DONE)
				r = store_fail(s, rc, err, "inserting a spare");
		}
	}
	if (r >= 0)
		r = store_exec(s, "COMMIT", err);
	if (r < 0) {
		store_rollback(s);
		return lb_error_wrap(err, "reserving a uid for a spare sandbox");
	}
	*ret_uid = uid;
	return 0;
}

int lb_store_spare_remove(struct lb_store *s, uint32_t uid, struct lb_error *err)
{
	_cleanup_unlock_ struct lb_store *locked = store_lock(s);
	int r = store_spare_take_unlocked(s, uid, err);
	return r < 0 ? lb_error_wrap(err, "removing a spare") : 0;
}

int lb_store_spare_list(struct lb_store *s, uint32_t **ret_uids, size_t *ret_n, struct lb_error *err)
{
	_cleanup_unlock_ struct lb_store *locked = store_lock(s);
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r = store_prepare(s, "SELECT host_uid FROM spares ORDER BY host_uid", &st, err);
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
				return lb_error_setx(err, ENOMEM, "listing spares: out of memory");
			list = bigger;
			cap = ncap;
		}
		list[n++] = (uint32_t)sqlite3_column_int64(st, 0);
	}
	if (rc != SQLITE_DONE)
		return store_fail(s, rc, err, "listing spares");
	*ret_uids = TAKE_PTR(list);
	*ret_n = n;
	return 0;
}

int lb_store_sandbox_adopt(struct lb_store *s, const char *name, uint32_t spare_uid, struct lb_store_sandbox *ret,
			   struct lb_error *err)
{
	if (!lb_store_name_valid(name))
		return lb_error_setx(err, ENOENT, "adopting a spare: the sandbox name is not valid");
	_cleanup_unlock_ struct lb_store *locked = store_lock(s);
	int r = store_exec(s, "BEGIN IMMEDIATE", err);
	if (r < 0)
		return lb_error_wrap(err, "adopting a spare for %s", name);
	r = store_spare_take_unlocked(s, spare_uid, err);
	if (r >= 0) {
		_cleanup_stmt_ sqlite3_stmt *st = NULL;
		r = store_prepare(s, "UPDATE sandboxes SET host_uid = ?2, host_gid = ?2 WHERE name = ?1", &st, err);
		if (r >= 0) {
			sqlite3_bind_text(st, 1, name, -1, SQLITE_TRANSIENT);
			sqlite3_bind_int64(st, 2, spare_uid);
			int rc = sqlite3_step(st);
			if (rc != SQLITE_DONE)
				r = store_fail(s, rc, err, "moving the spare's uid to the sandbox");
			else if (sqlite3_changes(s->db) != 1)
				r = lb_error_setx(err, ENOENT, "no sandbox named %s", name);
		}
	}
	if (store_commit_row(s, name, r, ret, err) < 0)
		return lb_error_wrap(err, "adopting a spare for %s", name);
	return 0;
}

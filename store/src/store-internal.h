/*
 * store-internal.h — what the store's files share: the struct behind struct lb_store, the lock, and helpers that
 * turn SQLite failures into struct lb_error sentences.
 *
 * Runs in lensboxd (root). Invariant: every public function locks s->lock before touching s->db and unlocks it
 * on every path (store_lock()/store_unlockp() as a cleanup attribute), so the single connection is never used by
 * two threads at once.
 */
#ifndef LB_STORE_INTERNAL_H
#define LB_STORE_INTERNAL_H

#include <pthread.h>
#include <sqlite3.h>

#include "lb/store.h"

struct lb_store {
	sqlite3 *db;
	int lock_fd; /* <path>.lock, flock()ed for as long as the store is open: one lensboxd per state database */
	pthread_mutex_t lock;
	uint32_t uid_base;
	uint32_t uid_count;
};

/* Locks s and returns it; pair with `_cleanup_unlock_ struct lb_store *locked = store_lock(s);`. */
static inline struct lb_store *store_lock(struct lb_store *s)
{
	pthread_mutex_lock(&s->lock);
	return s;
}

static inline void store_unlockp(struct lb_store **s)
{
	if (*s)
		pthread_mutex_unlock(&(*s)->lock);
}
#define _cleanup_unlock_ __attribute__((cleanup(store_unlockp)))

static inline void store_finalizep(sqlite3_stmt **st)
{
	sqlite3_finalize(*st); /* accepts NULL */
}
#define _cleanup_stmt_ __attribute__((cleanup(store_finalizep)))

/* Records SQLite's last error on s->db as "<what>: <sqlite message>" with an errno that fits the SQLite code
 * (EEXIST for constraint violations, EBUSY, ENOSPC for a full disk, EIO otherwise). Returns the negative errno. */
int store_fail(struct lb_store *s, int rc, struct lb_error *err, const char *what);

/* Prepares sql; on failure fills err and returns a negative errno. */
int store_prepare(struct lb_store *s, const char *sql, sqlite3_stmt **ret, struct lb_error *err);

/* Runs statements with no results (BEGIN, COMMIT, DDL). */
int store_exec(struct lb_store *s, const char *sql, struct lb_error *err);

/* Rolls back an open transaction, ignoring failure (used on error paths only). */
void store_rollback(struct lb_store *s);

/* Picks the next free host uid (sandboxes.c's walk) and advances the cursor; inside the caller's transaction.
 * -ENOSPC when every uid of the range is held by a sandbox or a spare. */
int store_allocate_uid(struct lb_store *s, uint32_t *ret_uid, struct lb_error *err);

/* Reads one sandboxes row (store lock held). -ENOENT when absent. */
int store_sandbox_get_unlocked(struct lb_store *s, const char *name, struct lb_store_sandbox *ret,
			       struct lb_error *err);

/* Copies a text column into a bounded buffer (always NUL-terminated, cut at size-1). */
void store_column_text(sqlite3_stmt *st, int col, char *dst, size_t size);

/* true when s (which must hold at most max chars before a NUL inside max+1 bytes) is a well-bounded string. */
bool store_bounded(const char *s, size_t max);

#endif

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

/* A prepared statement kept for the life of the connection, found again by its SQL text. */
struct store_stmt {
	char *sql;
	sqlite3_stmt *st;
};

struct lb_store {
	sqlite3 *db;
	int lock_fd; /* <path>.lock, flock()ed for as long as the store is open: one lensboxd per state database */
	pthread_mutex_t lock;
	uint32_t uid_base;
	uint32_t uid_count;
	struct store_stmt *stmts; /* every statement store_prepare() made; under lock */
	size_t n_stmts, cap_stmts;
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

/* Gives a statement from store_prepare() back: reset (its read transaction ends) and its bindings cleared. It stays
 * prepared in the store; declare it after the lock so this runs before the unlock. */
static inline void store_releasep(sqlite3_stmt **st)
{
	if (*st) {
		sqlite3_reset(*st);
		sqlite3_clear_bindings(*st);
	}
}
#define _cleanup_stmt_ __attribute__((cleanup(store_releasep)))

/* Records SQLite's last error on s->db as "<what>: <sqlite message>" with an errno that fits the SQLite code
 * (EEXIST for constraint violations, EBUSY, ENOSPC for a full disk, EIO otherwise). Returns the negative errno. */
int store_fail(struct lb_store *s, int rc, struct lb_error *err, const char *what);

/* The prepared statement for sql, prepared at its first use and kept (parsing is most of a small statement's
 * cost): hold it in a `_cleanup_stmt_` variable, never finalize it; one user at a time (the lock), and no function
 * uses the same text twice at once. The texts are literals or built from a fixed set of parts, so their number is
 * bounded; past STORE_MAX_STMTS distinct texts it fails (a bug). On failure fills err and returns a negative
 * errno. */
#define STORE_MAX_STMTS 128
int store_prepare(struct lb_store *s, const char *sql, sqlite3_stmt **ret, struct lb_error *err);

/* Finalizes every kept statement; before sqlite3_close(). */
void store_stmts_clear(struct lb_store *s);

/* Runs statements with no results (BEGIN, COMMIT, DDL); a single statement is kept prepared. */
int store_exec(struct lb_store *s, const char *sql, struct lb_error *err);

/* Rolls back an open transaction, ignoring failure (used on error paths only). */
void store_rollback(struct lb_store *s);

/* Picks the next free host uid (uids.c's walk) and advances the cursor; inside the caller's transaction.
 * -EUSERS when every uid of the range is held by a sandbox, a spare or a reservation. */
int store_allocate_uid(struct lb_store *s, uint32_t *ret_uid, struct lb_error *err);

/* Reads one sandboxes row (store lock held). -ENOENT when absent. */
int store_sandbox_get_unlocked(struct lb_store *s, const char *name, struct lb_store_sandbox *ret,
			       struct lb_error *err);

/* Allocates a uid and records h as its holder (store lock held, inside the caller's transaction). -EUSERS when no
 * uid is free. */
int store_held_add_unlocked(struct lb_store *s, enum lb_store_holder h, int64_t now_ms, uint32_t *ret_uid,
			    struct lb_error *err);
/* Removes h's row holding uid, as its hand-over to a sandbox or its release (store lock held, inside the caller's
 * transaction). -ENOENT when h holds no such uid. */
int store_held_take_unlocked(struct lb_store *s, enum lb_store_holder h, uint32_t uid, struct lb_error *err);

/* Copies a text column into a bounded buffer (always NUL-terminated, cut at size-1). */
void store_column_text(sqlite3_stmt *st, int col, char *dst, size_t size);

/* true when s (which must hold at most max chars before a NUL inside max+1 bytes) is a well-bounded string. */
bool store_bounded(const char *s, size_t max);

#endif

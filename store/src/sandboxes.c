/*
 * sandboxes.c — the sandboxes table: one row per sandbox lensboxd owns, its spec, its host uid, its state and times;
 * a row created from a held uid (a spare's or a reserved one, uids.c) and a spare's adoption; and the queries the
 * supervisor's timers ask (who is idle, who is due for deletion, when to wake up next).
 *
 * Runs in lensboxd (root), from any thread; every function holds the store lock for its whole duration.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lb/cleanup.h"
#include "store-internal.h"

#define SANDBOX_COLUMNS                                                                                              \
	"name, image, image_digest, network, cpu_millicores, memory_bytes, disk_bytes, idle_seconds, keep_seconds, " \
	"host_uid, host_gid, state, created_at_ms, last_used_at_ms, runs"

static void read_row(sqlite3_stmt *st, struct lb_store_sandbox *sb)
{
	memset(sb, 0, sizeof(*sb));
	store_column_text(st, 0, sb->name, sizeof(sb->name));
	store_column_text(st, 1, sb->spec.image, sizeof(sb->spec.image));
	store_column_text(st, 2, sb->image_digest, sizeof(sb->image_digest));
	/* The column's CHECK allows only the three names; anything else reads as LB_TIER_COUNT, which every user of the
	 * row refuses (lb_tier_name() is NULL for it), never as a tier. */
	const char *net = (const char *)sqlite3_column_text(st, 3);
	if (lb_tier_parse(net, &sb->spec.network) < 0)
		sb->spec.network = LB_TIER_COUNT;
	sb->spec.cpu_millicores = (uint32_t)sqlite3_column_int64(st, 4);
	sb->spec.memory_bytes = (uint64_t)sqlite3_column_int64(st, 5);
	sb->spec.disk_bytes = (uint64_t)sqlite3_column_int64(st, 6);
	sb->spec.idle_seconds = (uint64_t)sqlite3_column_int64(st, 7);
	sb->spec.keep_seconds = (uint64_t)sqlite3_column_int64(st, 8);
	sb->host_uid = (uint32_t)sqlite3_column_int64(st, 9);
	sb->host_gid = (uint32_t)sqlite3_column_int64(st, 10);
	const unsigned char *state = sqlite3_column_text(st, 11);
	/* The column's CHECK allows only the two names; anything else reads as LB_SANDBOX_STATE_COUNT, never as stopped
	 */
	if (lb_sandbox_state_parse((const char *)state, &sb->state) < 0)
		sb->state = LB_SANDBOX_STATE_COUNT;
	sb->created_at_ms = sqlite3_column_int64(st, 12);
	sb->last_used_at_ms = sqlite3_column_int64(st, 13);
	sb->runs = (uint64_t)sqlite3_column_int64(st, 14);
}

/* The largest value a duration may have so that last_used_at_ms + seconds * 1000 cannot overflow. */
#define MAX_SPEC_SECONDS ((uint64_t)1 << 40)

static int check_spec(const char *name, const struct lb_store_spec *spec, const char *digest, struct lb_error *err)
{
	if (!lb_store_name_valid(name))
		return lb_error_setx(err, EINVAL, "invalid sandbox name: it must match ^[a-z0-9][a-z0-9._-]{0,62}$");
	if (!spec)
		return lb_error_setx(err, EINVAL, "sandbox %s: no spec", name);
	if (!store_bounded(spec->image, LB_STORE_IMAGE_MAX) || spec->image[0] == '\0')
		return lb_error_setx(err, EINVAL, "sandbox %s: the image reference is empty or unterminated", name);
	if (!lb_tier_name(spec->network))
		return lb_error_setx(err, EINVAL, "sandbox %s: network must be off, packages or web", name);
	if (digest && !store_bounded(digest, LB_STORE_DIGEST_MAX))
		return lb_error_setx(err, EINVAL, "sandbox %s: the image digest is too long", name);
	if (spec->memory_bytes > INT64_MAX || spec->disk_bytes > INT64_MAX || spec->idle_seconds > MAX_SPEC_SECONDS ||
	    spec->keep_seconds > MAX_SPEC_SECONDS)
		return lb_error_setx(err, EINVAL, "sandbox %s: a limit is out of range", name);
	return 0;
}

static void bind_spec(sqlite3_stmt *st, int first, const struct lb_store_spec *spec, const char *digest)
{
	sqlite3_bind_text(st, first, spec->image, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(st, first + 1, digest ? digest : "", -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(st, first + 2, lb_tier_name(spec->network), -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, first + 3, spec->cpu_millicores);
	sqlite3_bind_int64(st, first + 4, (sqlite3_int64)spec->memory_bytes);
	sqlite3_bind_int64(st, first + 5, (sqlite3_int64)spec->disk_bytes);
	sqlite3_bind_int64(st, first + 6, (sqlite3_int64)spec->idle_seconds);
	sqlite3_bind_int64(st, first + 7, (sqlite3_int64)spec->keep_seconds);
}

/* Reads the row for name into *ret (unlocked helper). -ENOENT when absent. */
int store_sandbox_get_unlocked(struct lb_store *s, const char *name, struct lb_store_sandbox *ret, struct lb_error *err)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r = store_prepare(s, "SELECT " SANDBOX_COLUMNS " FROM sandboxes WHERE name = ?", &st, err);
	if (r < 0)
		return r;
	sqlite3_bind_text(st, 1, name, -1, SQLITE_TRANSIENT);
	int rc = sqlite3_step(st);
	if (rc == SQLITE_DONE)
		return lb_error_setx(err, ENOENT, "no sandbox named %s", name);
	if (rc != SQLITE_ROW)
		return store_fail(s, rc, err, "reading a sandbox");
	read_row(st, ret);
	return 0;
}

int lb_store_sandbox_get(struct lb_store *s, const char *name, struct lb_store_sandbox *ret, struct lb_error *err)
{
	if (!lb_store_name_valid(name))
		return lb_error_setx(err, ENOENT, "no sandbox named that (the name is not valid)");
	_cleanup_unlock_ struct lb_store *locked = store_lock(s);
	struct lb_store_sandbox sb;
	int r = store_sandbox_get_unlocked(s, name, &sb, err);
	if (r < 0)
		return r;
	*ret = sb;
	return 0;
}

/* Steps st to the end, collecting rows into a malloc'ed array. */
static int collect(struct lb_store *s, sqlite3_stmt *st, struct lb_store_sandbox **ret_list, size_t *ret_n,
		   struct lb_error *err)
{
	_cleanup_free_ struct lb_store_sandbox *list = NULL;
	size_t n = 0, cap = 0;
	for (;;) {
		int rc = sqlite3_step(st);
		if (rc == SQLITE_DONE)
			break;
		if (rc != SQLITE_ROW)
			return store_fail(s, rc, err, "listing sandboxes");
		if (n == cap) {
			size_t ncap = cap ? cap * 2 : 16;
			struct lb_store_sandbox *bigger = reallocarray(list, ncap, sizeof(*list));
			if (!bigger)
				return lb_error_set(err, ENOMEM, "listing sandboxes");
			list = bigger;
			cap = ncap;
		}
		read_row(st, &list[n++]);
	}
	*ret_list = n ? TAKE_PTR(list) : NULL;
	*ret_n = n;
	return 0;
}

int lb_store_sandbox_list(struct lb_store *s, enum lb_store_filter filter, enum lb_store_order order,
			  struct lb_store_sandbox **ret_list, size_t *ret_n, struct lb_error *err)
{
	const char *where;
	switch (filter) {
	case LB_STORE_ALL:
		where = "";
		break;
	case LB_STORE_ONLY_RUNNING:
		where = " WHERE state = 'running'";
		break;
	case LB_STORE_ONLY_STOPPED:
		where = " WHERE state = 'stopped'";
		break;
	default:
		return lb_error_setx(err, EINVAL, "listing sandboxes: unknown filter %d", (int)filter);
	}
	const char *by;
	switch (order) {
	case LB_STORE_BY_NAME:
		by = " ORDER BY name";
		break;
	case LB_STORE_LEAST_RECENT_USED:
		by = " ORDER BY last_used_at_ms, name";
		break;
	default:
		return lb_error_setx(err, EINVAL, "listing sandboxes: unknown order %d", (int)order);
	}
	char sql[256];
	snprintf(sql, sizeof(sql), "SELECT " SANDBOX_COLUMNS " FROM sandboxes%s%s", where, by);

	_cleanup_unlock_ struct lb_store *locked = store_lock(s);
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r = store_prepare(s, sql, &st, err);
	if (r < 0)
		return r;
	return collect(s, st, ret_list, ret_n, err);
}

/* Inserts a sandbox holding uid, or a newly allocated uid when uid is 0: stopped, or running when started (as
 * lb_store_sandbox_started() would record it). */
static int insert_unlocked(struct lb_store *s, const char *name, const struct lb_store_spec *spec, const char *digest,
			   int64_t now_ms, uint32_t uid, bool started, struct lb_error *err)
{
	int r = uid ? 0 : store_allocate_uid(s, &uid, err);
	if (r < 0)
		return r;
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	r = store_prepare(
	    s,
	    "INSERT INTO sandboxes (name, image, image_digest, network, cpu_millicores, memory_bytes, "
	    "disk_bytes, idle_seconds, keep_seconds, host_uid, host_gid, state, created_at_ms, "
	    "last_used_at_ms, runs) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?10, ?12, ?11, ?11, 0)",
	    &st, err);
	if (r < 0)
		return r;
	sqlite3_bind_text(st, 1, name, -1, SQLITE_TRANSIENT);
	bind_spec(st, 2, spec, digest);
	sqlite3_bind_int64(st, 10, uid);
	sqlite3_bind_int64(st, 11, now_ms);
	sqlite3_bind_text(st, 12, started ? "running" : "stopped", -1, SQLITE_STATIC);
	int rc = sqlite3_step(st);
	if (rc != SQLITE_DONE)
		return store_fail(s, rc, err, "inserting a sandbox");
	return 0;
}

/* Ends the caller's transaction on sandbox `name`: when r >= 0, reads its row into *ret (may be NULL) and commits;
 * otherwise, or when either fails, rolls back. Returns r, or the failure. */
static int commit_row(struct lb_store *s, const char *name, int r, struct lb_store_sandbox *ret, struct lb_error *err)
{
	struct lb_store_sandbox sb;
	if (r >= 0)
		r = store_sandbox_get_unlocked(s, name, &sb, err);
	if (r >= 0)
		r = store_exec(s, "COMMIT", err);
	if (r < 0) {
		store_rollback(s);
		return r;
	}
	if (ret)
		*ret = sb;
	return 0;
}

int lb_store_sandbox_put(struct lb_store *s, const char *name, const struct lb_store_spec *spec, const char *digest,
			 int64_t now_ms, struct lb_store_sandbox *ret, bool *ret_created, struct lb_error *err)
{
	int r = check_spec(name, spec, digest, err);
	if (r < 0)
		return r;
	_cleanup_unlock_ struct lb_store *locked = store_lock(s);
	r = store_exec(s, "BEGIN IMMEDIATE", err);
	if (r < 0)
		return lb_error_wrap(err, "storing sandbox %s", name);

	struct lb_store_sandbox sb;
	bool created = false;
	r = store_sandbox_get_unlocked(s, name, &sb, err);
	if (r == -ENOENT) {
		lb_error_clear(err);
		created = true;
		r = insert_unlocked(s, name, spec, digest, now_ms, 0, false, err);
	} else if (r >= 0) {
		_cleanup_stmt_ sqlite3_stmt *st = NULL;
		r = store_prepare(
		    s,
		    "UPDATE sandboxes SET image = ?2, image_digest = ?3, network = ?4, cpu_millicores = ?5, "
		    "memory_bytes = ?6, disk_bytes = ?7, idle_seconds = ?8, keep_seconds = ?9 WHERE name = ?1",
		    &st, err);
		if (r >= 0) {
			sqlite3_bind_text(st, 1, name, -1, SQLITE_TRANSIENT);
			bind_spec(st, 2, spec, digest);
			int rc = sqlite3_step(st);
			if (rc != SQLITE_DONE)
				r = store_fail(s, rc, err, "updating a sandbox");
		}
	}
	if (commit_row(s, name, r, ret, err) < 0)
		return lb_error_wrap(err, "storing sandbox %s", name);
	if (ret_created)
		*ret_created = created;
	return 0;
}

int lb_store_sandbox_create_held(struct lb_store *s, const char *name, const struct lb_store_spec *spec,
				 const char *digest, int64_t now_ms, const struct lb_store_from_held *from,
				 struct lb_store_sandbox *ret, uint32_t *ret_next_uid, struct lb_error *err)
{
	int r = check_spec(name, spec, digest, err);
	if (r < 0)
		return r;
	if (from->uid == 0)
		return lb_error_setx(err, EINVAL, "creating sandbox %s from a held uid: no uid", name);
	if (from->started && !store_bounded(digest, LB_STORE_DIGEST_MAX))
		return lb_error_setx(err, EINVAL, "creating sandbox %s as started: the image digest is missing", name);
	_cleanup_unlock_ struct lb_store *locked = store_lock(s);
	r = store_exec(s, "BEGIN IMMEDIATE", err);
	if (r < 0)
		return lb_error_wrap(err, "creating sandbox %s", name);
	struct lb_store_sandbox sb;
	r = store_sandbox_get_unlocked(s, name, &sb, err);
	if (r == 0)
		r = lb_error_setx(err, EEXIST, "a sandbox named %s exists", name);
	else if (r == -ENOENT) {
		lb_error_clear(err);
		r = store_held_take_unlocked(s, from->holder, from->uid, err);
	}
	if (r >= 0)
		r = insert_unlocked(s, name, spec, digest, now_ms, from->uid, from->started, err);
	uint32_t next = 0;
	if (r >= 0 && from->reserve_next) {
		/* No uid left for the next one is no reason to refuse this one: it already holds its own. */
		struct lb_error e = { 0 };
		int rn = store_held_add_unlocked(s, LB_STORE_RESERVED, now_ms, &next, &e);
		if (rn < 0 && rn != -EUSERS) {
			*err = e;
			r = rn;
		}
	}
	if (commit_row(s, name, r, ret, err) < 0)
		return lb_error_wrap(err, "creating sandbox %s", name);
	if (ret_next_uid)
		*ret_next_uid = next;
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
	r = store_held_take_unlocked(s, LB_STORE_SPARE, spare_uid, err);
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
	if (commit_row(s, name, r, ret, err) < 0)
		return lb_error_wrap(err, "adopting a spare for %s", name);
	return 0;
}

/* Runs an UPDATE on one sandbox row whose parameters a callback binds; -ENOENT when no row changed. */
static int update_one(struct lb_store *s, const char *name, const char *sql, const char *what,
		      void (*bind)(sqlite3_stmt *st, const void *arg), const void *arg, struct lb_error *err)
{
	if (!lb_store_name_valid(name))
		return lb_error_setx(err, ENOENT, "%s: no sandbox named that (the name is not valid)", what);
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r = store_prepare(s, sql, &st, err);
	if (r < 0)
		return r;
	sqlite3_bind_text(st, 1, name, -1, SQLITE_TRANSIENT);
	if (bind)
		bind(st, arg);
	int rc = sqlite3_step(st);
	if (rc != SQLITE_DONE)
		return store_fail(s, rc, err, what);
	if (sqlite3_changes(s->db) == 0)
		return lb_error_setx(err, ENOENT, "%s: no sandbox named %s", what, name);
	return 0;
}

struct recreate_args {
	const struct lb_store_spec *spec;
	const char *digest;
	int64_t now_ms;
};

static void bind_recreate(sqlite3_stmt *st, const void *arg)
{
	const struct recreate_args *a = arg;
	bind_spec(st, 2, a->spec, a->digest);
	sqlite3_bind_int64(st, 10, a->now_ms);
}

int lb_store_sandbox_recreate(struct lb_store *s, const char *name, const struct lb_store_spec *spec,
			      const char *digest, int64_t now_ms, struct lb_store_sandbox *ret, struct lb_error *err)
{
	int r = check_spec(name, spec, digest, err);
	if (r < 0)
		return r;
	struct recreate_args a = { spec, digest, now_ms };
	_cleanup_unlock_ struct lb_store *locked = store_lock(s);
	r = update_one(s, name,
		       "UPDATE sandboxes SET image = ?2, image_digest = ?3, network = ?4, cpu_millicores = ?5, "
		       "memory_bytes = ?6, disk_bytes = ?7, idle_seconds = ?8, keep_seconds = ?9, state = 'stopped', "
		       "created_at_ms = ?10, last_used_at_ms = ?10, runs = 0 WHERE name = ?1",
		       "recreating a sandbox", bind_recreate, &a, err);
	if (r < 0)
		return r;
	if (ret) {
		struct lb_store_sandbox sb;
		r = store_sandbox_get_unlocked(s, name, &sb, err);
		if (r < 0)
			return r;
		*ret = sb;
	}
	return 0;
}

static void bind_text2(sqlite3_stmt *st, const void *arg)
{
	sqlite3_bind_text(st, 2, arg, -1, SQLITE_TRANSIENT);
}

static void bind_int2(sqlite3_stmt *st, const void *arg)
{
	sqlite3_bind_int64(st, 2, *(const int64_t *)arg);
}

int lb_store_sandbox_set_digest(struct lb_store *s, const char *name, const char *digest, struct lb_error *err)
{
	if (!store_bounded(digest, LB_STORE_DIGEST_MAX))
		return lb_error_setx(err, EINVAL, "recording an image digest: it is missing or too long");
	_cleanup_unlock_ struct lb_store *locked = store_lock(s);
	return update_one(s, name, "UPDATE sandboxes SET image_digest = ?2 WHERE name = ?1",
			  "recording an image digest", bind_text2, digest, err);
}

int lb_store_sandbox_set_state(struct lb_store *s, const char *name, enum lb_sandbox_state state, struct lb_error *err)
{
	if (!lb_sandbox_state_name(state))
		return lb_error_setx(err, EINVAL, "recording a sandbox state: unknown state %d", (int)state);
	_cleanup_unlock_ struct lb_store *locked = store_lock(s);
	return update_one(s, name, "UPDATE sandboxes SET state = ?2 WHERE name = ?1", "recording a sandbox state",
			  bind_text2, lb_sandbox_state_name(state), err);
}

struct started_args {
	const char *digest;
	int64_t now_ms;
};

static void bind_started(sqlite3_stmt *st, const void *arg)
{
	const struct started_args *a = arg;
	sqlite3_bind_text(st, 2, a->digest, -1, SQLITE_TRANSIENT);
	sqlite3_bind_int64(st, 3, a->now_ms);
}

int lb_store_sandbox_started(struct lb_store *s, const char *name, const char *digest, int64_t now_ms,
			     struct lb_error *err)
{
	if (!store_bounded(digest, LB_STORE_DIGEST_MAX))
		return lb_error_setx(err, EINVAL, "recording a start: the image digest is missing or too long");
	struct started_args a = { .digest = digest, .now_ms = now_ms };
	_cleanup_unlock_ struct lb_store *locked = store_lock(s);
	return update_one(
	    s, name, "UPDATE sandboxes SET state = 'running', image_digest = ?2, last_used_at_ms = ?3 WHERE name = ?1",
	    "recording a start", bind_started, &a, err);
}

int lb_store_sandbox_touch(struct lb_store *s, const char *name, int64_t now_ms, struct lb_error *err)
{
	_cleanup_unlock_ struct lb_store *locked = store_lock(s);
	return update_one(s, name, "UPDATE sandboxes SET last_used_at_ms = ?2 WHERE name = ?1",
			  "recording a sandbox's use", bind_int2, &now_ms, err);
}

int lb_store_sandbox_delete(struct lb_store *s, const char *name, struct lb_error *err)
{
	_cleanup_unlock_ struct lb_store *locked = store_lock(s);
	return update_one(s, name, "DELETE FROM sandboxes WHERE name = ?1", "deleting a sandbox", NULL, NULL, err);
}

int lb_store_sandbox_mark_all_stopped(struct lb_store *s, uint64_t *ret_changed, struct lb_error *err)
{
	_cleanup_unlock_ struct lb_store *locked = store_lock(s);
	int r = store_exec(s, "UPDATE sandboxes SET state = 'stopped' WHERE state <> 'stopped'", err);
	if (r < 0)
		return lb_error_wrap(err, "marking every sandbox stopped");
	if (ret_changed)
		*ret_changed = (uint64_t)sqlite3_changes(s->db);
	return 0;
}

static int list_due(struct lb_store *s, const char *sql, int64_t now_ms, struct lb_store_sandbox **ret_list,
		    size_t *ret_n, struct lb_error *err)
{
	_cleanup_unlock_ struct lb_store *locked = store_lock(s);
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r = store_prepare(s, sql, &st, err);
	if (r < 0)
		return r;
	sqlite3_bind_int64(st, 1, now_ms);
	return collect(s, st, ret_list, ret_n, err);
}

int lb_store_sandbox_due_stop(struct lb_store *s, int64_t now_ms, struct lb_store_sandbox **ret_list, size_t *ret_n,
			      struct lb_error *err)
{
	return list_due(s,
			"SELECT " SANDBOX_COLUMNS " FROM sandboxes WHERE state = 'running' AND "
			"last_used_at_ms + idle_seconds * 1000 <= ?1 ORDER BY last_used_at_ms, name",
			now_ms, ret_list, ret_n, err);
}

int lb_store_sandbox_due_delete(struct lb_store *s, int64_t now_ms, struct lb_store_sandbox **ret_list, size_t *ret_n,
				struct lb_error *err)
{
	return list_due(s,
			"SELECT " SANDBOX_COLUMNS " FROM sandboxes WHERE last_used_at_ms + keep_seconds * 1000 <= ?1 "
			"ORDER BY last_used_at_ms, name",
			now_ms, ret_list, ret_n, err);
}

int lb_store_next_deadline(struct lb_store *s, int64_t *ret_ms, struct lb_error *err)
{
	_cleanup_unlock_ struct lb_store *locked = store_lock(s);
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r = store_prepare(s,
			      "SELECT MIN(CASE WHEN state = 'running' AND idle_seconds < keep_seconds "
			      "THEN last_used_at_ms + idle_seconds * 1000 "
			      "ELSE last_used_at_ms + keep_seconds * 1000 END) FROM sandboxes",
			      &st, err);
	if (r < 0)
		return r;
	int rc = sqlite3_step(st);
	if (rc != SQLITE_ROW)
		return store_fail(s, rc, err, "finding the next sandbox deadline");
	if (sqlite3_column_type(st, 0) == SQLITE_NULL)
		return lb_error_setx(err, ENOENT, "no sandboxes, so no deadline");
	*ret_ms = sqlite3_column_int64(st, 0);
	return 0;
}

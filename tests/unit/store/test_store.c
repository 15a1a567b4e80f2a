/* Unit tests for store/: migrations from an empty file, the sandboxes table, host uid allocation (never two live
 * sandboxes on one uid, freed uids reused last), the ledger's order and limit, counts, and several threads at once.
 * Each test works in its own temporary directory. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>
#include <sqlite3.h>

#include "lb/store.h"

struct fixture {
	char dir[64];
	char path[128];
	struct lb_store *s;
};

static int open_store(struct fixture *f, uint32_t base, uint32_t count)
{
	struct lb_store_config cfg = { .path = f->path, .uid_base = base, .uid_count = count };
	struct lb_error err = { 0 };
	int r = lb_store_open(&cfg, &f->s, &err);
	if (r < 0)
		fprintf(stderr, "lb_store_open: %s\n", err.msg);
	return r;
}

static int setup(void **state)
{
	umask(022); /* a typical daemon umask: the store must still create private files */
	struct fixture *f = calloc(1, sizeof(*f));
	snprintf(f->dir, sizeof(f->dir), "/tmp/lb-store-test-XXXXXX");
	if (!mkdtemp(f->dir)) {
		free(f);
		return -1;
	}
	snprintf(f->path, sizeof(f->path), "%s/state.db", f->dir);
	if (open_store(f, 200000, 8) < 0) {
		free(f);
		return -1;
	}
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	lb_store_close(f->s);
	char p[160];
	const char *suffixes[] = { "", "-wal", "-shm", ".lock" };
	for (size_t i = 0; i < 4; i++) {
		snprintf(p, sizeof(p), "%s%s", f->path, suffixes[i]);
		unlink(p);
	}
	rmdir(f->dir);
	free(f);
	return 0;
}

static struct lb_store_spec spec_of(const char *image, const char *network)
{
	struct lb_store_spec s = { 0 };
	snprintf(s.image, sizeof(s.image), "%s", image);
	assert_int_equal(lb_tier_parse(network, &s.network), 0);
	s.cpu_millicores = 1000;
	s.memory_bytes = 512ull << 20;
	s.disk_bytes = 1ull << 30;
	s.idle_seconds = 15ull * 60;
	s.keep_seconds = 24ull * 3600;
	return s;
}

static void put(struct lb_store *s, const char *name, int64_t now, struct lb_store_sandbox *ret)
{
	struct lb_store_spec sp = spec_of("python:3.12-slim", "off");
	struct lb_error err = { 0 };
	bool created = false;
	int r = lb_store_sandbox_put(s, name, &sp, NULL, now, ret, &created, &err);
	if (r < 0)
		fail_msg("put %s: %s", name, err.msg);
}

/* ---- migrations ---- */

static void migrations_from_empty(void **state)
{
	struct fixture *f = *state;
	int v = -1;
	assert_int_equal(lb_store_schema_version(f->s, &v, NULL), 0);
	assert_int_equal(v, lb_store_schema_latest());
	assert_true(v >= 2);

	/* one schema_version row per migration, in order */
	sqlite3 *db;
	assert_int_equal(sqlite3_open_v2(f->path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
	sqlite3_stmt *st;
	assert_int_equal(sqlite3_prepare_v2(db, "SELECT version FROM schema_version ORDER BY version", -1, &st, NULL),
			 SQLITE_OK);
	int expect = 1;
	while (sqlite3_step(st) == SQLITE_ROW)
		assert_int_equal(sqlite3_column_int(st, 0), expect++);
	assert_int_equal(expect - 1, lb_store_schema_latest());
	sqlite3_finalize(st);
	/* WAL is on and the file is private */
	assert_int_equal(sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &st, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	assert_string_equal((const char *)sqlite3_column_text(st, 0), "wal");
	sqlite3_finalize(st);
	sqlite3_close(db);
	/* the database and its WAL and shared-memory files are private, whatever the umask */
	const char *suffixes[] = { "", "-wal", "-shm" };
	for (size_t i = 0; i < 3; i++) {
		char p[160];
		struct stat sb;
		snprintf(p, sizeof(p), "%s%s", f->path, suffixes[i]);
		assert_int_equal(stat(p, &sb), 0);
		assert_int_equal(sb.st_mode & 0777, 0600);
	}
}

static void reopen_keeps_rows_and_version(void **state)
{
	struct fixture *f = *state;
	struct lb_store_sandbox a;
	put(f->s, "keep-me", 1000, &a);
	lb_store_close(f->s);
	f->s = NULL;
	assert_int_equal(open_store(f, 200000, 8), 0);
	struct lb_store_sandbox b;
	assert_int_equal(lb_store_sandbox_get(f->s, "keep-me", &b, NULL), 0);
	assert_int_equal(b.host_uid, a.host_uid);
	int v;
	assert_int_equal(lb_store_schema_version(f->s, &v, NULL), 0);
	assert_int_equal(v, lb_store_schema_latest());
}

static void newer_schema_is_refused(void **state)
{
	struct fixture *f = *state;
	lb_store_close(f->s);
	f->s = NULL;
	sqlite3 *db;
	assert_int_equal(sqlite3_open(f->path, &db), SQLITE_OK);
	assert_int_equal(sqlite3_exec(db, "INSERT INTO schema_version VALUES (999, 0)", NULL, NULL, NULL), SQLITE_OK);
	sqlite3_close(db);
	struct lb_store_config cfg = { .path = f->path, .uid_base = 200000, .uid_count = 8 };
	struct lb_error err = { 0 };
	struct lb_store *s = NULL;
	assert_int_equal(lb_store_open(&cfg, &s, &err), -EPROTO);
	assert_null(s);
	assert_non_null(strstr(err.msg, "newer"));
	/* reopenable once the bogus row is gone, so teardown has a store */
	assert_int_equal(sqlite3_open(f->path, &db), SQLITE_OK);
	assert_int_equal(sqlite3_exec(db, "DELETE FROM schema_version WHERE version = 999", NULL, NULL, NULL),
			 SQLITE_OK);
	sqlite3_close(db);
	assert_int_equal(open_store(f, 200000, 8), 0);
}

static void symlinked_db_is_refused(void **state)
{
	struct fixture *f = *state;
	char link[160];
	snprintf(link, sizeof(link), "%s/evil.db", f->dir);
	assert_int_equal(symlink("/tmp/lb-store-victim-never-created", link), 0);
	struct lb_store_config cfg = { .path = link, .uid_base = 200000, .uid_count = 8 };
	struct lb_error err = { 0 };
	struct lb_store *s = NULL;
	assert_int_equal(lb_store_open(&cfg, &s, &err), -ELOOP);
	assert_null(s);
	assert_int_equal(access("/tmp/lb-store-victim-never-created", F_OK), -1);
	unlink(link);
}

static void second_opener_is_refused(void **state)
{
	struct fixture *f = *state;
	struct lb_store_config cfg = { .path = f->path, .uid_base = 200000, .uid_count = 8 };
	struct lb_error err = { 0 };
	struct lb_store *s = NULL;
	assert_int_equal(lb_store_open(&cfg, &s, &err), -EBUSY);
	assert_null(s);
	assert_non_null(strstr(err.msg, "another process"));
	/* once the first one closes, the next may open */
	lb_store_close(f->s);
	f->s = NULL;
	assert_int_equal(lb_store_open(&cfg, &f->s, &err), 0);
}

static void bad_config_is_refused(void **state)
{
	struct fixture *f = *state;
	struct lb_store *s = NULL;
	struct lb_store_config root = { .path = f->path, .uid_base = 0, .uid_count = 10 };
	assert_int_equal(lb_store_open(&root, &s, NULL), -EINVAL);
	struct lb_store_config wrap = { .path = f->path, .uid_base = UINT32_MAX - 2, .uid_count = 10 };
	assert_int_equal(lb_store_open(&wrap, &s, NULL), -EINVAL);
	assert_null(s);
}

/* ---- sandboxes ---- */

static void names(void **state)
{
	(void)state;
	assert_true(lb_store_name_valid("lens-chat-42"));
	assert_true(lb_store_name_valid("a"));
	assert_true(lb_store_name_valid("0.a_b-c"));
	char max[64];
	memset(max, 'a', 63);
	max[63] = '\0';
	assert_true(lb_store_name_valid(max));
	char too_long[65];
	memset(too_long, 'a', 64);
	too_long[64] = '\0';
	assert_false(lb_store_name_valid(too_long));
	assert_false(lb_store_name_valid(""));
	assert_false(lb_store_name_valid(NULL));
	assert_false(lb_store_name_valid("-a"));
	assert_false(lb_store_name_valid(".."));
	assert_false(lb_store_name_valid("a/b"));
	assert_false(lb_store_name_valid("Abc"));
	assert_false(lb_store_name_valid("a b"));
	assert_false(lb_store_name_valid("caf\xc3\xa9"));
}

static void put_get_update(void **state)
{
	struct fixture *f = *state;
	struct lb_store_spec sp = spec_of("python:3.12-slim", "off");
	struct lb_store_sandbox sb;
	bool created = false;
	struct lb_error err = { 0 };
	assert_int_equal(lb_store_sandbox_put(f->s, "lens-chat-1", &sp, "sha256:aa", 5000, &sb, &created, &err), 0);
	assert_true(created);
	assert_string_equal(sb.name, "lens-chat-1");
	assert_string_equal(sb.spec.image, "python:3.12-slim");
	assert_string_equal(sb.image_digest, "sha256:aa");
	assert_int_equal(sb.state, LB_SANDBOX_STOPPED);
	assert_int_equal(sb.created_at_ms, 5000);
	assert_int_equal(sb.last_used_at_ms, 5000);
	assert_int_equal(sb.runs, 0);
	assert_int_equal(sb.host_uid, 200000);
	assert_int_equal(sb.host_gid, sb.host_uid);
	assert_int_equal(sb.spec.memory_bytes, 512ull << 20);

	/* put again: spec replaced, identity kept */
	sp.memory_bytes = 1ull << 30;
	struct lb_store_sandbox again;
	assert_int_equal(lb_store_sandbox_put(f->s, "lens-chat-1", &sp, "sha256:bb", 9000, &again, &created, &err), 0);
	assert_false(created);
	assert_int_equal(again.host_uid, sb.host_uid);
	assert_int_equal(again.created_at_ms, 5000);
	assert_int_equal(again.spec.memory_bytes, 1ull << 30);
	assert_string_equal(again.image_digest, "sha256:bb");

	assert_int_equal(lb_store_sandbox_set_state(f->s, "lens-chat-1", LB_SANDBOX_RUNNING, NULL), 0);
	assert_int_equal(lb_store_sandbox_touch(f->s, "lens-chat-1", 12000, NULL), 0);
	assert_int_equal(lb_store_sandbox_set_digest(f->s, "lens-chat-1", "sha256:cc", NULL), 0);
	assert_int_equal(lb_store_sandbox_get(f->s, "lens-chat-1", &sb, NULL), 0);
	assert_int_equal(sb.state, LB_SANDBOX_RUNNING);
	assert_int_equal(sb.last_used_at_ms, 12000);
	assert_string_equal(sb.image_digest, "sha256:cc");
	assert_int_equal(lb_store_stop_at_ms(&sb), 12000 + 15 * 60 * 1000);
	assert_int_equal(lb_store_delete_at_ms(&sb), 12000 + 24LL * 3600 * 1000);

	/* a start in one statement: running, the digest it started from, used now */
	assert_int_equal(lb_store_sandbox_set_state(f->s, "lens-chat-1", LB_SANDBOX_STOPPED, NULL), 0);
	assert_int_equal(lb_store_sandbox_started(f->s, "lens-chat-1", "sha256:dd", 13000, NULL), 0);
	assert_int_equal(lb_store_sandbox_get(f->s, "lens-chat-1", &sb, NULL), 0);
	assert_int_equal(sb.state, LB_SANDBOX_RUNNING);
	assert_int_equal(sb.last_used_at_ms, 13000);
	assert_string_equal(sb.image_digest, "sha256:dd");
	assert_int_equal(lb_store_sandbox_started(f->s, "nope", "sha256:dd", 13000, NULL), -ENOENT);
	assert_int_equal(lb_store_sandbox_started(f->s, "lens-chat-1", NULL, 13000, NULL), -EINVAL);

	/* recreate: fresh times and count, same uid */
	struct lb_store_spec sp2 = spec_of("python:3.13-slim", "web");
	assert_int_equal(lb_store_sandbox_recreate(f->s, "lens-chat-1", &sp2, NULL, 20000, &sb, NULL), 0);
	assert_string_equal(sb.spec.image, "python:3.13-slim");
	assert_int_equal(sb.spec.network, LB_TIER_WEB);
	assert_string_equal(sb.image_digest, "");
	assert_int_equal(sb.state, LB_SANDBOX_STOPPED);
	assert_int_equal(sb.created_at_ms, 20000);
	assert_int_equal(sb.host_uid, again.host_uid);

	assert_int_equal(lb_store_sandbox_delete(f->s, "lens-chat-1", NULL), 0);
	assert_int_equal(lb_store_sandbox_get(f->s, "lens-chat-1", &sb, &err), -ENOENT);
	assert_int_equal(lb_store_sandbox_delete(f->s, "lens-chat-1", NULL), -ENOENT);
	assert_int_equal(lb_store_sandbox_touch(f->s, "lens-chat-1", 1, NULL), -ENOENT);
	assert_int_equal(lb_store_sandbox_set_state(f->s, "nope", LB_SANDBOX_RUNNING, NULL), -ENOENT);
}

static void bad_input_is_refused(void **state)
{
	struct fixture *f = *state;
	struct lb_store_spec sp = spec_of("python:3.12-slim", "off");
	struct lb_error err = { 0 };
	assert_int_equal(lb_store_sandbox_put(f->s, "../etc", &sp, NULL, 1, NULL, NULL, &err), -EINVAL);
	assert_int_equal(lb_store_sandbox_put(f->s, "a\nb", &sp, NULL, 1, NULL, NULL, &err), -EINVAL);
	struct lb_store_spec net = spec_of("python:3.12-slim", "off");
	net.network = LB_TIER_COUNT; /* no tier: refused, never stored as some other tier */
	assert_int_equal(lb_store_sandbox_put(f->s, "ok", &net, NULL, 1, NULL, NULL, &err), -EINVAL);
	net.network = (enum lb_tier) - 1;
	assert_int_equal(lb_store_sandbox_put(f->s, "ok", &net, NULL, 1, NULL, NULL, &err), -EINVAL);
	struct lb_store_spec empty = spec_of("", "off");
	assert_int_equal(lb_store_sandbox_put(f->s, "ok", &empty, NULL, 1, NULL, NULL, &err), -EINVAL);
	struct lb_store_spec unterminated = spec_of("x", "off");
	memset(unterminated.image, 'x', sizeof(unterminated.image)); /* no NUL anywhere */
	assert_int_equal(lb_store_sandbox_put(f->s, "ok", &unterminated, NULL, 1, NULL, NULL, &err), -EINVAL);
	struct lb_store_spec huge = spec_of("x", "off");
	huge.memory_bytes = UINT64_MAX;
	assert_int_equal(lb_store_sandbox_put(f->s, "ok", &huge, NULL, 1, NULL, NULL, &err), -EINVAL);
	/* SQL in a name is just an invalid name; the table is intact */
	assert_int_equal(lb_store_sandbox_put(f->s, "x'); drop table sandboxes; --", &sp, NULL, 1, NULL, NULL, &err),
			 -EINVAL);
	struct lb_store_sandbox *list = NULL;
	size_t n = 99;
	assert_int_equal(lb_store_sandbox_list(f->s, LB_STORE_ALL, LB_STORE_BY_NAME, &list, &n, NULL), 0);
	assert_int_equal(n, 0);
	assert_null(list);
}

static void list_filters_and_orders(void **state)
{
	struct fixture *f = *state;
	put(f->s, "c", 300, NULL);
	put(f->s, "a", 100, NULL);
	put(f->s, "b", 200, NULL);
	assert_int_equal(lb_store_sandbox_set_state(f->s, "c", LB_SANDBOX_RUNNING, NULL), 0);
	assert_int_equal(lb_store_sandbox_set_state(f->s, "a", LB_SANDBOX_RUNNING, NULL), 0);
	assert_int_equal(lb_store_sandbox_touch(f->s, "a", 400, NULL), 0);

	struct lb_store_sandbox *l = NULL;
	size_t n = 0;
	assert_int_equal(lb_store_sandbox_list(f->s, LB_STORE_ALL, LB_STORE_BY_NAME, &l, &n, NULL), 0);
	assert_int_equal(n, 3);
	assert_string_equal(l[0].name, "a");
	assert_string_equal(l[1].name, "b");
	assert_string_equal(l[2].name, "c");
	free(l);
	assert_int_equal(lb_store_sandbox_list(f->s, LB_STORE_ONLY_RUNNING, LB_STORE_LEAST_RECENT_USED, &l, &n, NULL),
			 0);
	assert_int_equal(n, 2);
	assert_string_equal(l[0].name, "c"); /* used at 300, before a at 400 */
	assert_string_equal(l[1].name, "a");
	free(l);
	assert_int_equal(lb_store_sandbox_list(f->s, LB_STORE_ONLY_STOPPED, LB_STORE_BY_NAME, &l, &n, NULL), 0);
	assert_int_equal(n, 1);
	assert_string_equal(l[0].name, "b");
	free(l);

	uint64_t changed = 0;
	assert_int_equal(lb_store_sandbox_mark_all_stopped(f->s, &changed, NULL), 0);
	assert_int_equal(changed, 2);
	assert_int_equal(lb_store_sandbox_list(f->s, LB_STORE_ONLY_RUNNING, LB_STORE_BY_NAME, &l, &n, NULL), 0);
	assert_int_equal(n, 0);
}

static void due_lists_and_deadline(void **state)
{
	struct fixture *f = *state;
	struct lb_store_spec sp = spec_of("img", "off");
	sp.idle_seconds = 2;
	sp.keep_seconds = 10;
	assert_int_equal(lb_store_sandbox_put(f->s, "run-old", &sp, NULL, 1000, NULL, NULL, NULL), 0);
	assert_int_equal(lb_store_sandbox_put(f->s, "run-new", &sp, NULL, 5000, NULL, NULL, NULL), 0);
	assert_int_equal(lb_store_sandbox_put(f->s, "stopped-old", &sp, NULL, 0, NULL, NULL, NULL), 0);
	assert_int_equal(lb_store_sandbox_set_state(f->s, "run-old", LB_SANDBOX_RUNNING, NULL), 0);
	assert_int_equal(lb_store_sandbox_set_state(f->s, "run-new", LB_SANDBOX_RUNNING, NULL), 0);

	int64_t next = 0;
	assert_int_equal(lb_store_next_deadline(f->s, &next, NULL), 0);
	assert_int_equal(next, 3000); /* run-old's idle stop comes before stopped-old's deletion at 10000 */

	struct lb_store_sandbox *l = NULL;
	size_t n = 0;
	assert_int_equal(lb_store_sandbox_due_stop(f->s, 2999, &l, &n, NULL), 0);
	assert_int_equal(n, 0);
	assert_int_equal(lb_store_sandbox_due_stop(f->s, 3000, &l, &n, NULL), 0);
	assert_int_equal(n, 1);
	assert_string_equal(l[0].name, "run-old");
	free(l);
	assert_int_equal(lb_store_sandbox_due_stop(f->s, 7000, &l, &n, NULL), 0);
	assert_int_equal(n, 2);
	free(l);
	/* a stopped sandbox is never due to stop, only to be deleted */
	assert_int_equal(lb_store_sandbox_due_delete(f->s, 10999, &l, &n, NULL), 0);
	assert_int_equal(n, 1);
	assert_string_equal(l[0].name, "stopped-old");
	free(l);
	assert_int_equal(lb_store_sandbox_due_delete(f->s, 15000, &l, &n, NULL), 0);
	assert_int_equal(n, 3);
	assert_string_equal(l[0].name, "stopped-old");
	assert_string_equal(l[2].name, "run-new");
	free(l);

	/* with nothing running, the next deadline is the earliest deletion */
	assert_int_equal(lb_store_sandbox_mark_all_stopped(f->s, NULL, NULL), 0);
	assert_int_equal(lb_store_next_deadline(f->s, &next, NULL), 0);
	assert_int_equal(next, 10000);
	for (const char *const *nm = (const char *const[]){ "run-old", "run-new", "stopped-old", NULL }; *nm; nm++)
		assert_int_equal(lb_store_sandbox_delete(f->s, *nm, NULL), 0);
	assert_int_equal(lb_store_next_deadline(f->s, &next, NULL), -ENOENT);
}

/* ---- uid allocation ---- */

static void uids_are_unique_and_exhaust(void **state)
{
	struct fixture *f = *state; /* range 200000..200007 */
	bool seen[8] = { 0 };
	char name[16];
	for (int i = 0; i < 8; i++) {
		struct lb_store_sandbox sb;
		snprintf(name, sizeof(name), "s%d", i);
		put(f->s, name, i, &sb);
		assert_true(sb.host_uid >= 200000 && sb.host_uid < 200008);
		assert_false(seen[sb.host_uid - 200000]);
		seen[sb.host_uid - 200000] = true;
	}
	struct lb_store_spec sp = spec_of("img", "off");
	struct lb_error err = { 0 };
	assert_int_equal(lb_store_sandbox_put(f->s, "one-too-many", &sp, NULL, 9, NULL, NULL, &err), -EUSERS);
	assert_non_null(strstr(err.msg, "200000-200007"));
	/* the failed put left nothing behind */
	struct lb_store_sandbox sb;
	assert_int_equal(lb_store_sandbox_get(f->s, "one-too-many", &sb, NULL), -ENOENT);
}

/* Two spares, at times 1 and 2. */
static void two_spares(struct lb_store *s, uint32_t *a, uint32_t *b)
{
	struct lb_error err = { 0 };
	assert_int_equal(lb_store_held_add(s, LB_STORE_SPARE, 1, a, &err), 0);
	assert_int_equal(lb_store_held_add(s, LB_STORE_SPARE, 2, b, &err), 0);
}

/* The sandbox `name` holds uid and the only spare left holds spare. */
static void holds_uid_and_one_spare_left(struct lb_store *s, const char *name, uint32_t uid, uint32_t spare)
{
	struct lb_error err = { 0 };
	struct lb_store_sandbox sb;
	assert_int_equal(lb_store_sandbox_get(s, name, &sb, &err), 0);
	assert_int_equal(sb.host_uid, uid);
	uint32_t *uids = NULL;
	size_t n = 0;
	assert_int_equal(lb_store_held_list(s, LB_STORE_SPARE, &uids, &n, &err), 0);
	assert_int_equal(n, 1);
	assert_int_equal(uids[0], spare);
	free(uids);
}

/* Spares hold uids the allocator skips; adoption moves a spare's uid to a sandbox in one step, and a failed
 * adoption changes nothing. */
static void spares_hold_uids_and_adoption_moves_one(void **state)
{
	struct fixture *f = *state; /* range 200000..200007 */
	struct lb_error err = { 0 };
	uint32_t a = 0, b = 0;
	two_spares(f->s, &a, &b);
	assert_int_not_equal(a, b);
	struct lb_store_sandbox sb;
	put(f->s, "conv", 3, &sb);
	uint32_t old_uid = sb.host_uid;
	assert_true(old_uid != a && old_uid != b);

	uint32_t *uids = NULL;
	size_t n = 0;
	assert_int_equal(lb_store_held_list(f->s, LB_STORE_SPARE, &uids, &n, &err), 0);
	assert_int_equal(n, 2);
	assert_true((uids[0] == a && uids[1] == b) || (uids[0] == b && uids[1] == a));
	free(uids);

	/* adopting a uid no spare holds, or for a sandbox that does not exist, changes nothing */
	assert_int_equal(lb_store_sandbox_adopt(f->s, "conv", old_uid, NULL, &err), -ENOENT);
	assert_int_equal(lb_store_sandbox_adopt(f->s, "nobody", a, NULL, &err), -ENOENT);
	assert_int_equal(lb_store_held_list(f->s, LB_STORE_SPARE, &uids, &n, &err), 0);
	assert_int_equal(n, 2);
	free(uids);

	assert_int_equal(lb_store_sandbox_adopt(f->s, "conv", a, &sb, &err), 0);
	assert_int_equal(sb.host_uid, a);
	assert_int_equal(sb.host_gid, a);
	holds_uid_and_one_spare_left(f->s, "conv", a, b);

	/* the allocator never hands out b while the spare holds it: fill the range */
	char name[16];
	for (int i = 0; i < 6; i++) {
		snprintf(name, sizeof(name), "s%d", i);
		put(f->s, name, 10 + i, &sb);
		assert_int_not_equal(sb.host_uid, b);
		assert_int_not_equal(sb.host_uid, a);
	}
	uint32_t c = 0;
	assert_int_equal(lb_store_held_add(f->s, LB_STORE_SPARE, 20, &c, &err), -EUSERS);
	assert_int_equal(lb_store_held_remove(f->s, LB_STORE_SPARE, b, &err), 0);
	assert_int_equal(lb_store_held_remove(f->s, LB_STORE_SPARE, b, &err), -ENOENT);
	put(f->s, "last", 21, &sb);
	assert_int_equal(sb.host_uid, b); /* the only one left */
}

/* lb_store_sandbox_create_held from the spare holding uid, stopped, reserving nothing. */
static int create_from_spare(struct lb_store *s, const char *name, const struct lb_store_spec *spec, int64_t now_ms,
			     uint32_t uid, struct lb_store_sandbox *ret, struct lb_error *err)
{
	const struct lb_store_from_held from = { .holder = LB_STORE_SPARE, .uid = uid };
	return lb_store_sandbox_create_held(s, name, spec, NULL, now_ms, &from, ret, NULL, err);
}

/* A sandbox made from a spare: one commit creates its row holding the spare's uid, takes the spare away and leaves
 * the uid cursor alone; a name that exists or a uid no spare holds changes nothing. */
static void sandbox_created_from_a_spare_holds_its_uid(void **state)
{
	struct fixture *f = *state; /* range 200000..200007 */
	struct lb_error err = { 0 };
	uint32_t a = 0, b = 0;
	two_spares(f->s, &a, &b);
	struct lb_store_sandbox sb;
	put(f->s, "taken", 3, &sb);
	uint32_t taken_uid = sb.host_uid;
	struct lb_store_spec sp = spec_of("img", "web");

	/* a uid no spare holds (a sandbox's), an existing name, no uid: nothing changes */
	assert_int_equal(create_from_spare(f->s, "conv", &sp, 4, taken_uid, NULL, &err), -ENOENT);
	assert_int_equal(create_from_spare(f->s, "taken", &sp, 4, a, NULL, &err), -EEXIST);
	assert_int_equal(create_from_spare(f->s, "conv", &sp, 4, 0, NULL, &err), -EINVAL);
	assert_int_equal(lb_store_sandbox_get(f->s, "conv", &sb, NULL), -ENOENT);
	uint32_t *uids = NULL;
	size_t n = 0;
	assert_int_equal(lb_store_held_list(f->s, LB_STORE_SPARE, &uids, &n, &err), 0);
	assert_int_equal(n, 2);
	free(uids);

	assert_int_equal(create_from_spare(f->s, "conv", &sp, 5, a, &sb, &err), 0);
	assert_int_equal(sb.host_uid, a);
	assert_int_equal(sb.host_gid, a);
	assert_string_equal(sb.spec.image, "img");
	assert_int_equal(sb.spec.network, LB_TIER_WEB);
	assert_int_equal(sb.created_at_ms, 5);
	assert_int_equal(sb.state, LB_SANDBOX_STOPPED);
	holds_uid_and_one_spare_left(f->s, "conv", a, b);
	/* the spare's uid is the sandbox's now: the allocator skips it as it skips every row's */
	for (int i = 0; i < 5; i++) {
		char name[16];
		snprintf(name, sizeof(name), "s%d", i);
		put(f->s, name, 10 + i, &sb);
		assert_int_not_equal(sb.host_uid, a);
		assert_int_not_equal(sb.host_uid, b);
	}
	/* and the same spare cannot be handed out twice */
	assert_int_equal(create_from_spare(f->s, "again", &sp, 6, a, NULL, &err), -ENOENT);
}

/* A reservation is a holder of its own: the allocator skips its uid, a spare's hand-over cannot take it, and a
 * sandbox created from it is recorded started (state, digest, last use) with the next reservation in the same
 * commit; when no uid is left for that one, the sandbox is created all the same. */
static void sandbox_created_from_a_reservation_reserves_the_next(void **state)
{
	struct fixture *f = *state; /* range 200000..200007 */
	struct lb_error err = { 0 };
	uint32_t r1 = 0;
	assert_int_equal(lb_store_held_add(f->s, LB_STORE_RESERVED, 1, &r1, &err), 0);
	assert_int_equal(r1, 200000);
	struct lb_store_sandbox sb;
	put(f->s, "other", 2, &sb);
	assert_int_equal(sb.host_uid, 200001);
	struct lb_store_spec sp = spec_of("img", "off");
	const char *digest = "sha256:0123";

	/* the spares' holder does not hold it; started needs a digest; nothing changed either way */
	const struct lb_store_from_held as_spare = { .holder = LB_STORE_SPARE, .uid = r1 };
	assert_int_equal(lb_store_sandbox_create_held(f->s, "conv", &sp, digest, 3, &as_spare, NULL, NULL, &err),
			 -ENOENT);
	struct lb_store_from_held from = {
		.holder = LB_STORE_RESERVED, .uid = r1, .started = true, .reserve_next = true
	};
	assert_int_equal(lb_store_sandbox_create_held(f->s, "conv", &sp, NULL, 3, &from, NULL, NULL, &err), -EINVAL);
	assert_int_equal(lb_store_sandbox_get(f->s, "conv", &sb, NULL), -ENOENT);

	uint32_t next = 0;
	assert_int_equal(lb_store_sandbox_create_held(f->s, "conv", &sp, digest, 4, &from, &sb, &next, &err), 0);
	assert_int_equal(sb.host_uid, r1);
	assert_int_equal(sb.state, LB_SANDBOX_RUNNING);
	assert_string_equal(sb.image_digest, digest);
	assert_int_equal(sb.created_at_ms, 4);
	assert_int_equal(sb.last_used_at_ms, 4);
	assert_int_equal(next, 200002);
	uint32_t *uids = NULL;
	size_t n = 0;
	assert_int_equal(lb_store_held_list(f->s, LB_STORE_RESERVED, &uids, &n, &err), 0);
	assert_int_equal(n, 1);
	assert_int_equal(uids[0], next);
	free(uids);
	/* the same reservation cannot be used twice */
	assert_int_equal(lb_store_sandbox_create_held(f->s, "again", &sp, digest, 5, &from, NULL, NULL, &err), -ENOENT);

	/* the allocator skips the reservation: fill the range around it */
	char name[16];
	for (int i = 0; i < 5; i++) { /* 200003..200007 */
		snprintf(name, sizeof(name), "s%d", i);
		put(f->s, name, 10 + i, &sb);
		assert_int_equal(sb.host_uid, 200003 + (uint32_t)i);
	}
	uint32_t none = 0;
	assert_int_equal(lb_store_held_add(f->s, LB_STORE_RESERVED, 20, &none, &err), -EUSERS);
	from.uid = next;
	from.started = false;
	uint32_t after = 1;
	assert_int_equal(lb_store_sandbox_create_held(f->s, "last", &sp, NULL, 21, &from, &sb, &after, &err), 0);
	assert_int_equal(sb.host_uid, next);
	assert_int_equal(sb.state, LB_SANDBOX_STOPPED);
	assert_int_equal(after, 0);
	assert_int_equal(lb_store_held_list(f->s, LB_STORE_RESERVED, &uids, &n, &err), 0);
	assert_int_equal(n, 0);
	free(uids);
	assert_int_equal(lb_store_held_remove(f->s, LB_STORE_RESERVED, next, &err), -ENOENT);
}

static void freed_uid_is_reused_last(void **state)
{
	struct fixture *f = *state; /* range 200000..200007 */
	struct lb_store_sandbox a, b, c;
	put(f->s, "a", 1, &a);
	put(f->s, "b", 2, &b);
	assert_int_equal(a.host_uid, 200000);
	assert_int_equal(b.host_uid, 200001);
	assert_int_equal(lb_store_sandbox_delete(f->s, "a", NULL), 0);
	/* a's uid is free, but the allocator moves on */
	put(f->s, "c", 3, &c);
	assert_int_equal(c.host_uid, 200002);
	char name[16];
	uint32_t last = 0;
	for (int i = 0; i < 5; i++) { /* 200003..200007 */
		struct lb_store_sandbox x;
		snprintf(name, sizeof(name), "x%d", i);
		put(f->s, name, 10 + i, &x);
		assert_int_equal(x.host_uid, 200003 + (uint32_t)i);
		last = x.host_uid;
	}
	assert_int_equal(last, 200007);
	/* only now, with the range used up past it, does the freed uid come back */
	struct lb_store_sandbox d;
	put(f->s, "d", 20, &d);
	assert_int_equal(d.host_uid, 200000);
	/* while b exists its uid is never given to anyone: delete d, and the next one takes 200000 again, not b's */
	assert_int_equal(lb_store_sandbox_delete(f->s, "d", NULL), 0);
	struct lb_store_sandbox e;
	put(f->s, "e", 21, &e);
	assert_int_equal(e.host_uid, 200000);
	assert_int_not_equal(e.host_uid, b.host_uid);
}

/* The cursor can come round to a uid a spare holds: the allocator must skip it as it skips a sandbox's. */
static void cursor_on_a_spare_uid_is_skipped(void **state)
{
	struct fixture *f = *state; /* range 200000..200007 */
	struct lb_error err = { 0 };
	uint32_t spare = 0;
	assert_int_equal(lb_store_held_add(f->s, LB_STORE_SPARE, 1, &spare, &err), 0);
	assert_int_equal(spare, 200000);
	char name[16];
	for (int i = 1; i < 8; i++) { /* 200001..200007: the cursor wraps to 200000, the spare's */
		struct lb_store_sandbox x;
		snprintf(name, sizeof(name), "s%d", i);
		put(f->s, name, i, &x);
		assert_int_equal(x.host_uid, 200000 + (uint32_t)i);
	}
	assert_int_equal(lb_store_sandbox_delete(f->s, "s3", NULL), 0);
	struct lb_store_sandbox n;
	put(f->s, "n", 20, &n);
	assert_int_equal(n.host_uid, 200003);
}

static void range_change_keeps_existing_uids(void **state)
{
	struct fixture *f = *state;
	struct lb_store_sandbox a;
	put(f->s, "a", 1, &a);
	assert_int_equal(a.host_uid, 200000);
	lb_store_close(f->s);
	f->s = NULL;
	assert_int_equal(open_store(f, 300000, 4), 0);
	struct lb_store_sandbox b, again;
	put(f->s, "b", 2, &b);
	assert_int_equal(b.host_uid, 300000);
	assert_int_equal(lb_store_sandbox_get(f->s, "a", &again, NULL), 0);
	assert_int_equal(again.host_uid, 200000);
}

/* ---- the ledger ---- */

static struct lb_store_run run_of(const char *sandbox, int64_t started, int exit_code)
{
	struct lb_store_run r = { 0 };
	assert_int_equal(lb_run_id_generate(started, r.id, NULL), 0);
	snprintf(r.sandbox, sizeof(r.sandbox), "%s", sandbox);
	snprintf(r.language, sizeof(r.language), "python");
	r.started_at_ms = started;
	r.duration_ms = 30;
	r.exited = true;
	r.exit_code = exit_code;
	return r;
}

static void run_ids(void **state)
{
	(void)state;
	char a[LB_RUN_ID_LEN + 1], b[LB_RUN_ID_LEN + 1], c[LB_RUN_ID_LEN + 1];
	assert_int_equal(lb_run_id_generate(1700000000000, a, NULL), 0);
	assert_int_equal(lb_run_id_generate(1700000000000, b, NULL), 0);
	assert_int_equal(lb_run_id_generate(1700000000001, c, NULL), 0);
	assert_int_equal(strlen(a), LB_RUN_ID_LEN);
	assert_memory_equal(a, b, 10);		 /* same millisecond, same time prefix */
	assert_string_not_equal(a + 10, b + 10); /* 80 random bits differ */
	assert_true(strncmp(a, c, 10) < 0);	 /* later time sorts after */
	for (size_t i = 0; i < LB_RUN_ID_LEN; i++)
		assert_non_null(strchr("0123456789abcdefghjkmnpqrstvwxyz", a[i]));
	assert_int_equal(lb_run_id_generate(-1, a, NULL), -EINVAL);
}

static void ledger_order_and_limit(void **state)
{
	struct fixture *f = *state;
	put(f->s, "sb-a", 0, NULL);
	struct lb_error err = { 0 };
	/* inserted out of time order, across two sandboxes (one of which has no row: the ledger outlives rows) */
	int64_t times[] = { 5000, 1000, 3000, 4000, 2000 };
	for (size_t i = 0; i < 5; i++) {
		struct lb_store_run r = run_of("sb-a", times[i], (int)i);
		assert_int_equal(lb_store_run_insert(f->s, &r, &err), 0);
		struct lb_store_run o = run_of("sb-gone", times[i] + 500, 0);
		assert_int_equal(lb_store_run_insert(f->s, &o, &err), 0);
	}
	struct lb_store_run *l = NULL;
	size_t n = 0;
	assert_int_equal(lb_store_runs_list(f->s, "sb-a", 100, &l, &n, &err), 0);
	assert_int_equal(n, 5);
	for (size_t i = 0; i < n; i++) {
		assert_string_equal(l[i].sandbox, "sb-a");
		assert_int_equal(l[i].started_at_ms, 5000 - 1000 * (int64_t)i);
	}
	free(l);
	assert_int_equal(lb_store_runs_list(f->s, "sb-a", 2, &l, &n, &err), 0);
	assert_int_equal(n, 2);
	assert_int_equal(l[0].started_at_ms, 5000);
	assert_int_equal(l[1].started_at_ms, 4000);
	free(l);
	assert_int_equal(lb_store_runs_list(f->s, NULL, 3, &l, &n, &err), 0);
	assert_int_equal(n, 3);
	assert_int_equal(l[0].started_at_ms, 5500);
	assert_string_equal(l[0].sandbox, "sb-gone");
	assert_int_equal(l[1].started_at_ms, 5000);
	assert_int_equal(l[2].started_at_ms, 4500);
	free(l);
	assert_int_equal(lb_store_runs_list(f->s, NULL, 0, &l, &n, &err), -EINVAL);
	assert_int_equal(lb_store_runs_list(f->s, "nobody", 10, &l, &n, &err), 0);
	assert_int_equal(n, 0);

	/* the sandbox's run count followed its inserts, and its last use is the latest run's end (5000 + 30 ms),
	 * not the last inserted one's */
	struct lb_store_sandbox sb;
	assert_int_equal(lb_store_sandbox_get(f->s, "sb-a", &sb, NULL), 0);
	assert_int_equal(sb.runs, 5);
	assert_int_equal(sb.last_used_at_ms, 5030);

	/* deleting the sandbox keeps its ledger */
	assert_int_equal(lb_store_sandbox_delete(f->s, "sb-a", NULL), 0);
	assert_int_equal(lb_store_runs_list(f->s, "sb-a", 100, &l, &n, &err), 0);
	assert_int_equal(n, 5);
	free(l);

	uint64_t deleted = 0;
	assert_int_equal(lb_store_runs_prune(f->s, 3000, &deleted, NULL), 0);
	assert_int_equal(deleted, 4); /* sb-a at 1000 and 2000, sb-gone at 1500 and 2500 */

	/* keeping the newest 4 of the 6 left drops the oldest two, whatever their sandbox */
	assert_int_equal(lb_store_runs_prune_keep(f->s, 4, &deleted, NULL), 0);
	assert_int_equal(deleted, 2); /* sb-a at 3000, sb-gone at 3500 */
	assert_int_equal(lb_store_runs_list(f->s, NULL, 100, &l, &n, &err), 0);
	assert_int_equal(n, 4);
	assert_int_equal(l[0].started_at_ms, 5500);
	assert_int_equal(l[3].started_at_ms, 4000);
	free(l);
	assert_int_equal(lb_store_runs_prune_keep(f->s, 4, &deleted, NULL), 0);
	assert_int_equal(deleted, 0);
	assert_int_equal(lb_store_runs_prune_keep(f->s, 0, &deleted, NULL), 0);
	assert_int_equal(deleted, 4);
	assert_int_equal(lb_store_runs_prune_keep(f->s, UINT64_MAX, &deleted, &err), -EINVAL);
}

static void run_fields_round_trip(void **state)
{
	struct fixture *f = *state;
	struct lb_store_run r = run_of("x", 42, 0);
	r.exited = false;
	r.signal = 9;
	r.timed_out = true;
	r.oom_killed = true;
	r.pids_limited = true;
	r.network_blocked = 5000000000ull; /* a count, kept past 32 bits */
	r.cpu_ms = 59000;
	r.peak_memory_bytes = 536870912;
	r.stdout_bytes = 1ull << 33;
	r.stderr_bytes = 7;
	snprintf(r.language, sizeof(r.language), "bash");
	snprintf(r.message, sizeof(r.message), "killed after 60 s: the time limit");
	assert_int_equal(lb_store_run_insert(f->s, &r, NULL), 0);
	struct lb_store_run g;
	assert_int_equal(lb_store_run_get(f->s, r.id, &g, NULL), 0);
	assert_string_equal(g.id, r.id);
	assert_false(g.exited);
	assert_int_equal(g.signal, 9);
	assert_true(g.timed_out && g.oom_killed && g.pids_limited);
	assert_int_equal(g.network_blocked, 5000000000ull);
	assert_int_equal(g.cpu_ms, 59000);
	assert_int_equal(g.peak_memory_bytes, 536870912);
	assert_int_equal(g.stdout_bytes, 1ull << 33);
	assert_string_equal(g.language, "bash");
	assert_string_equal(g.message, "killed after 60 s: the time limit");
	/* the same id twice is refused */
	assert_int_equal(lb_store_run_insert(f->s, &r, NULL), -EEXIST);
	/* not an id at all */
	assert_int_equal(lb_store_run_get(f->s, "../../etc/passwd", &g, NULL), -ENOENT);
	struct lb_store_run bad = r;
	snprintf(bad.id, sizeof(bad.id), "UPPERCASE-IS-NOT-AN-ID!!!!");
	assert_int_equal(lb_store_run_insert(f->s, &bad, NULL), -EINVAL);
}

static void counts(void **state)
{
	struct fixture *f = *state;
	put(f->s, "a", 0, NULL);
	put(f->s, "b", 0, NULL);
	assert_int_equal(lb_store_sandbox_set_state(f->s, "a", LB_SANDBOX_RUNNING, NULL), 0);

	struct lb_store_run ok = run_of("a", 1, 0);
	ok.duration_ms = 5; /* bucket 0 (<= 10) */
	struct lb_store_run failed = run_of("a", 2, 3);
	failed.duration_ms = 10; /* bucket 0: bounds are inclusive */
	struct lb_store_run slow = run_of("a", 3, 0);
	slow.duration_ms = 11; /* bucket 1 */
	struct lb_store_run timeout = run_of("a", 4, 0);
	timeout.exited = false;
	timeout.signal = 9;
	timeout.timed_out = true;
	timeout.duration_ms = 60000; /* bucket 8 (<= 60000) */
	struct lb_store_run oom = run_of("a", 5, 0);
	oom.exited = false;
	oom.signal = 9;
	oom.oom_killed = true;
	oom.duration_ms = 70000; /* +Inf */
	snprintf(oom.language, sizeof(oom.language), "bash");
	struct lb_store_run killed = run_of("b", 6, 0);
	killed.exited = false;
	killed.signal = 11;
	snprintf(killed.language, sizeof(killed.language), "ruby");
	killed.duration_ms = 100;
	struct lb_store_run *all[] = { &ok, &failed, &slow, &timeout, &oom, &killed };
	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		assert_int_equal(lb_store_run_insert(f->s, all[i], NULL),
				 i == 5 ? -EINVAL : 0); /* ruby: not a language */
	snprintf(killed.language, sizeof(killed.language), "bash");
	assert_int_equal(lb_store_run_insert(f->s, &killed, NULL), 0);

	struct lb_store_counts c;
	assert_int_equal(lb_store_counts(f->s, &c, NULL), 0);
	assert_int_equal(c.sandboxes_running, 1);
	assert_int_equal(c.sandboxes_stopped, 1);
	assert_int_equal(c.runs_total, 6);
	assert_int_equal(c.runs[LB_LANGUAGE_PYTHON][LB_RUN_OK], 2);
	assert_int_equal(c.runs[LB_LANGUAGE_PYTHON][LB_RUN_FAILED], 1);
	assert_int_equal(c.runs[LB_LANGUAGE_PYTHON][LB_RUN_TIMED_OUT], 1);
	assert_int_equal(c.runs[LB_LANGUAGE_BASH][LB_RUN_OOM], 1);
	assert_int_equal(c.runs[LB_LANGUAGE_BASH][LB_RUN_KILLED], 1);
	assert_int_equal(c.oom_kills, 1);
	assert_int_equal(c.timeouts, 1);
	assert_int_equal(c.duration_sum_ms, 5 + 10 + 11 + 60000 + 70000 + 100);
	assert_int_equal(c.duration_buckets[0], 2);
	assert_int_equal(c.duration_buckets[1], 1);
	assert_int_equal(c.duration_buckets[2], 1); /* 100 */
	assert_int_equal(c.duration_buckets[8], 1);
	assert_int_equal(c.duration_buckets[LB_STORE_DURATION_BUCKETS - 1], 1);
	uint64_t sum = 0;
	for (int i = 0; i < LB_STORE_DURATION_BUCKETS; i++)
		sum += c.duration_buckets[i];
	assert_int_equal(sum, 6);
	/* lb_run_outcome_of agrees with the SQL classification */
	assert_int_equal(lb_run_outcome_of(&timeout), LB_RUN_TIMED_OUT);
	assert_int_equal(lb_run_outcome_of(&oom), LB_RUN_OOM);
	assert_int_equal(lb_run_outcome_of(&killed), LB_RUN_KILLED);
	assert_int_equal(lb_run_outcome_of(&failed), LB_RUN_FAILED);
	assert_int_equal(lb_run_outcome_of(&ok), LB_RUN_OK);
	assert_string_equal(lb_run_outcome_name(LB_RUN_TIMED_OUT), "timed_out");
}

static void counts_survive_prune_and_remigration(void **state)
{
	struct fixture *f = *state;
	/* durations on and around every bucket bound, every outcome, both languages */
	const uint64_t durations[] = { 0,   10,	  11,	50,   51,    100,   250,   251,
				       500, 1000, 2500, 2501, 10000, 60000, 60001, 1u << 30 };
	const char *langs[] = { "python", "bash" };
	int64_t t = 1000;
	for (size_t i = 0; i < sizeof(durations) / sizeof(durations[0]); i++) {
		struct lb_store_run r = run_of("x", t++, (int)(i % 3));
		r.duration_ms = durations[i];
		snprintf(r.language, sizeof(r.language), "%s", langs[i % 2]);
		r.timed_out = i % 5 == 0;
		r.oom_killed = i % 4 == 0;
		r.exited = i % 7 != 0;
		assert_int_equal(lb_store_run_insert(f->s, &r, NULL), 0);
	}
	struct lb_store_counts before;
	assert_int_equal(lb_store_counts(f->s, &before, NULL), 0);
	assert_int_equal(before.runs_total, 16);
	const uint64_t want[LB_STORE_DURATION_BUCKETS] = { 2, 2, 2, 1, 2, 1, 1, 2, 1, 2 }; /* bounds are inclusive */
	for (int b = 0; b < LB_STORE_DURATION_BUCKETS; b++)
		assert_int_equal(before.duration_buckets[b], want[b]);

	/* a migration that rebuilds the counters from the ledger (2 -> 3) agrees with the counting done at insert */
	lb_store_close(f->s);
	f->s = NULL;
	sqlite3 *db;
	assert_int_equal(sqlite3_open(f->path, &db), SQLITE_OK);
	assert_int_equal(sqlite3_exec(db,
				      "DROP TABLE run_stats; DROP TABLE spares; DROP TABLE reserved_uids; "
				      "DELETE FROM schema_version WHERE version >= 3",
				      NULL, NULL, NULL),
			 SQLITE_OK);
	sqlite3_close(db);
	assert_int_equal(open_store(f, 200000, 8), 0);
	struct lb_store_counts after;
	assert_int_equal(lb_store_counts(f->s, &after, NULL), 0);
	assert_memory_equal(&before, &after, sizeof(before));

	/* pruning the ledger never lowers a counter */
	uint64_t deleted = 0;
	assert_int_equal(lb_store_runs_prune(f->s, INT64_MAX, &deleted, NULL), 0);
	assert_int_equal(deleted, 16);
	assert_int_equal(lb_store_counts(f->s, &after, NULL), 0);
	assert_memory_equal(&before, &after, sizeof(before));
}

/* ---- threads ---- */

#define THREADS	   4
#define PER_THREAD 50
struct worker {
	struct lb_store *s;
	int index;
	int failures;
	uint32_t uids[PER_THREAD];
};

static void *work(void *arg)
{
	struct worker *w = arg;
	char name[32];
	for (int i = 0; i < PER_THREAD; i++) {
		snprintf(name, sizeof(name), "t%d-%d", w->index, i);
		struct lb_store_spec sp = spec_of("img", "off");
		struct lb_store_sandbox sb;
		if (lb_store_sandbox_put(w->s, name, &sp, NULL, i, &sb, NULL, NULL) < 0) {
			w->failures++;
			continue;
		}
		w->uids[i] = sb.host_uid;
		struct lb_store_run r = { 0 };
		if (lb_run_id_generate(1000 + i, r.id, NULL) < 0)
			w->failures++;
		snprintf(r.sandbox, sizeof(r.sandbox), "%s", name);
		snprintf(r.language, sizeof(r.language), "python");
		r.started_at_ms = 1000 + i;
		r.exited = true;
		if (lb_store_run_insert(w->s, &r, NULL) < 0 || lb_store_sandbox_touch(w->s, name, 2000 + i, NULL) < 0 ||
		    lb_store_sandbox_set_state(w->s, name, LB_SANDBOX_RUNNING, NULL) < 0)
			w->failures++;
		struct lb_store_counts c;
		if (lb_store_counts(w->s, &c, NULL) < 0)
			w->failures++;
		if (i % 2 == 0 && lb_store_sandbox_delete(w->s, name, NULL) < 0)
			w->failures++;
	}
	return NULL;
}

static void threads_share_one_store(void **state)
{
	struct fixture *f = *state;
	lb_store_close(f->s);
	f->s = NULL;
	assert_int_equal(open_store(f, 400000, 10000), 0);
	struct worker w[THREADS];
	pthread_t th[THREADS];
	for (int i = 0; i < THREADS; i++) {
		w[i] = (struct worker){ .s = f->s, .index = i };
		assert_int_equal(pthread_create(&th[i], NULL, work, &w[i]), 0);
	}
	for (int i = 0; i < THREADS; i++)
		assert_int_equal(pthread_join(th[i], NULL), 0);
	for (int i = 0; i < THREADS; i++)
		assert_int_equal(w[i].failures, 0);
	/* every allocation was distinct (deletions happen after allocation walks forward, so no reuse in range) */
	static bool seen[10000];
	memset(seen, 0, sizeof(seen));
	for (int i = 0; i < THREADS; i++)
		for (int j = 0; j < PER_THREAD; j++) {
			uint32_t u = w[i].uids[j] - 400000;
			assert_true(u < 10000);
			assert_false(seen[u]);
			seen[u] = true;
		}
	struct lb_store_counts c;
	assert_int_equal(lb_store_counts(f->s, &c, NULL), 0);
	assert_int_equal(c.runs_total, THREADS * PER_THREAD);
	assert_int_equal(c.sandboxes_running, THREADS * PER_THREAD / 2);
	assert_int_equal(c.sandboxes_stopped, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(migrations_from_empty, setup, teardown),
		cmocka_unit_test_setup_teardown(reopen_keeps_rows_and_version, setup, teardown),
		cmocka_unit_test_setup_teardown(newer_schema_is_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(symlinked_db_is_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(second_opener_is_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(bad_config_is_refused, setup, teardown),
		cmocka_unit_test(names),
		cmocka_unit_test_setup_teardown(put_get_update, setup, teardown),
		cmocka_unit_test_setup_teardown(bad_input_is_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(list_filters_and_orders, setup, teardown),
		cmocka_unit_test_setup_teardown(due_lists_and_deadline, setup, teardown),
		cmocka_unit_test_setup_teardown(uids_are_unique_and_exhaust, setup, teardown),
		cmocka_unit_test_setup_teardown(freed_uid_is_reused_last, setup, teardown),
		cmocka_unit_test_setup_teardown(spares_hold_uids_and_adoption_moves_one, setup, teardown),
		cmocka_unit_test_setup_teardown(sandbox_created_from_a_spare_holds_its_uid, setup, teardown),
		cmocka_unit_test_setup_teardown(sandbox_created_from_a_reservation_reserves_the_next, setup, teardown),
		cmocka_unit_test_setup_teardown(cursor_on_a_spare_uid_is_skipped, setup, teardown),
		cmocka_unit_test_setup_teardown(range_change_keeps_existing_uids, setup, teardown),
		cmocka_unit_test(run_ids),
		cmocka_unit_test_setup_teardown(ledger_order_and_limit, setup, teardown),
		cmocka_unit_test_setup_teardown(run_fields_round_trip, setup, teardown),
		cmocka_unit_test_setup_teardown(counts, setup, teardown),
		cmocka_unit_test_setup_teardown(counts_survive_prune_and_remigration, setup, teardown),
		cmocka_unit_test_setup_teardown(threads_share_one_store, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

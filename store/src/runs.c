/*
 * runs.c — the run ledger (one row per finished run, kept after its sandbox is gone), run ids, and the counts that
 * /metrics and /v1/health report.
 *
 * Runs in lensboxd (root), from any thread; every store function holds the store lock for its whole duration.
 *
 * Run ids are ULID-like, 26 characters of Crockford base32 in lower case (no i, l, o, u):
 *
 *     01j9zq4m7x  k3v8w2c5d9h7n6ta
 *     \________/  \______________/
 *     now_ms, 50 bits   80 random bits from getrandom(2)
 *
 * so the ledger's id order follows time, and ids are safe in URLs, file names and log lines without escaping.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "lb/cleanup.h"
#include "store-internal.h"

const uint64_t lb_store_duration_bounds_ms[LB_STORE_DURATION_BUCKETS - 1] = { 10,   50,	  100,	 250,  500,
									      1000, 2500, 10000, 60000 };

enum lb_run_outcome lb_run_outcome_of(const struct lb_store_run *run)
{
	if (run->timed_out)
		return LB_RUN_TIMED_OUT;
	if (run->oom_killed)
		return LB_RUN_OOM;
	if (!run->exited)
		return LB_RUN_KILLED;
	if (run->exit_code != 0)
		return LB_RUN_FAILED;
	return LB_RUN_OK;
}

const char *lb_run_outcome_name(enum lb_run_outcome o)
{
	switch (o) {
	case LB_RUN_TIMED_OUT:
		return "timed_out";
	case LB_RUN_OOM:
		return "oom";
	case LB_RUN_KILLED:
		return "killed";
	case LB_RUN_FAILED:
		return "failed";
	case LB_RUN_OK:
		return "ok";
	case LB_RUN_OUTCOME_COUNT:
		break;
	}
	return "unknown";
}

static const char CROCKFORD[] = "0123456789abcdefghjkmnpqrstvwxyz";

int lb_run_id_generate(int64_t now_ms, char out[LB_RUN_ID_LEN + 1], struct lb_error *err)
{
	if (now_ms < 0 || now_ms >= ((int64_t)1 << 50))
		return lb_error_setx(err, EINVAL, "making a run id: the time %lld is out of range", (long long)now_ms);
	unsigned char rnd[10];
	size_t got = 0;
	while (got < sizeof(rnd)) {
		ssize_t n = getrandom(rnd + got, sizeof(rnd) - got, 0);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return lb_error_set(err, errno, "making a run id: getrandom");
		}
		got += (size_t)n;
	}
	char id[LB_RUN_ID_LEN + 1];
	uint64_t t = (uint64_t)now_ms;
	for (int i = 9; i >= 0; i--) {
		id[i] = CROCKFORD[t & 31];
		t >>= 5;
	}
	/* 80 random bits as 16 groups of 5, most significant first */
	for (int i = 0; i < 16; i++) {
		unsigned bit = (unsigned)i * 5, v = 0;
		for (unsigned b = 0; b < 5; b++) {
			unsigned pos = bit + b;
			v = (v << 1) | (((unsigned)rnd[pos / 8] >> (7 - pos % 8)) & 1u);
		}
		id[10 + i] = CROCKFORD[v];
	}
	id[LB_RUN_ID_LEN] = '\0';
	memcpy(out, id, sizeof(id));
	return 0;
}

static bool id_valid(const char *id)
{
	if (!id || strnlen(id, LB_RUN_ID_LEN + 1) != LB_RUN_ID_LEN)
		return false;
	for (size_t i = 0; i < LB_RUN_ID_LEN; i++)
		if (!strchr(CROCKFORD, id[i]) || id[i] == '\0')
			return false;
	return true;
}

#define RUN_COLUMNS                                                                                                   \
	"id, sandbox, language, started_at_ms, duration_ms, exit_code, signal, timed_out, oom_killed, pids_limited, " \
	"network_blocked, cpu_ms, peak_memory_bytes, stdout_bytes, stderr_bytes, message"

static void read_run(sqlite3_stmt *st, struct lb_store_run *run)
{
	memset(run, 0, sizeof(*run));
	store_column_text(st, 0, run->id, sizeof(run->id));
	store_column_text(st, 1, run->sandbox, sizeof(run->sandbox));
	store_column_text(st, 2, run->language, sizeof(run->language));
	run->started_at_ms = sqlite3_column_int64(st, 3);
	run->duration_ms = (uint64_t)sqlite3_column_int64(st, 4);
	run->exited = sqlite3_column_type(st, 5) != SQLITE_NULL;
	run->exit_code = run->exited ? sqlite3_column_int(st, 5) : -1;
	run->signal = sqlite3_column_int(st, 6);
	run->timed_out = sqlite3_column_int(st, 7) != 0;
	run->oom_killed = sqlite3_column_int(st, 8) != 0;
	run->pids_limited = sqlite3_column_int(st, 9) != 0;
	run->network_blocked = (uint64_t)sqlite3_column_int64(st, 10);
	run->cpu_ms = (uint64_t)sqlite3_column_int64(st, 11);
	run->peak_memory_bytes = (uint64_t)sqlite3_column_int64(st, 12);
	run->stdout_bytes = (uint64_t)sqlite3_column_int64(st, 13);
	run->stderr_bytes = (uint64_t)sqlite3_column_int64(st, 14);
	store_column_text(st, 15, run->message, sizeof(run->message));
}

static int check_run(const struct lb_store_run *run, struct lb_error *err)
{
	if (!run)
		return lb_error_setx(err, EINVAL, "recording a run: no run");
	if (!id_valid(run->id))
		return lb_error_setx(err, EINVAL, "recording a run: the id is not a lensbox run id");
	if (!lb_store_name_valid(run->sandbox))
		return lb_error_setx(err, EINVAL, "recording a run: invalid sandbox name");
	enum lb_language l;
	if (!store_bounded(run->language, LB_STORE_LANGUAGE_MAX) || lb_language_parse(run->language, &l) < 0)
		return lb_error_setx(err, EINVAL, "recording a run: the language is not one lensbox runs");
	if (!store_bounded(run->message, LB_STORE_MESSAGE_MAX))
		return lb_error_setx(err, EINVAL, "recording a run: the message is too long");
	if (run->duration_ms > INT64_MAX || run->cpu_ms > INT64_MAX || run->peak_memory_bytes > INT64_MAX ||
	    run->stdout_bytes > INT64_MAX || run->stderr_bytes > INT64_MAX || run->network_blocked > INT64_MAX)
		return lb_error_setx(err, EINVAL, "recording a run: a figure is out of range");
	return 0;
}

/* A language check_run() accepted. */
static enum lb_language language_of(const char *language)
{
	enum lb_language l = LB_LANGUAGE_PYTHON;
	(void)lb_language_parse(language, &l);
	return l;
}

static int bucket_of(uint64_t duration_ms)
{
	int b = 0;
	while (b < LB_STORE_DURATION_BUCKETS - 1 && duration_ms > lb_store_duration_bounds_ms[b])
		b++;
	return b;
}

/* Adds the run to the run_stats counters (inside the caller's transaction). */
static int count_run_unlocked(struct lb_store *s, const struct lb_store_run *run, struct lb_error *err)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r = store_prepare(
	    s,
	    "INSERT INTO run_stats (language, outcome, bucket, runs, duration_sum_ms, oom_kills, timeouts) "
	    "VALUES (?1, ?2, ?3, 1, ?4, ?5, ?6) ON CONFLICT (language, outcome, bucket) DO UPDATE SET "
	    "runs = runs + 1, duration_sum_ms = duration_sum_ms + excluded.duration_sum_ms, "
	    "oom_kills = oom_kills + excluded.oom_kills, timeouts = timeouts + excluded.timeouts",
	    &st, err);
	if (r < 0)
		return r;
	sqlite3_bind_int(st, 1, (int)language_of(run->language));
	sqlite3_bind_int(st, 2, (int)lb_run_outcome_of(run));
	sqlite3_bind_int(st, 3, bucket_of(run->duration_ms));
	sqlite3_bind_int64(st, 4, (sqlite3_int64)run->duration_ms);
	sqlite3_bind_int(st, 5, run->oom_killed ? 1 : 0);
	sqlite3_bind_int(st, 6, run->timed_out ? 1 : 0);
	int rc = sqlite3_step(st);
	if (rc != SQLITE_DONE)
		return store_fail(s, rc, err, "counting a run for metrics");
	return 0;
}

static int insert_run_unlocked(struct lb_store *s, const struct lb_store_run *run, struct lb_error *err)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r = store_prepare(s,
			      "INSERT INTO runs (" RUN_COLUMNS
			      ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, "
			      "?13, ?14, ?15, ?16)",
			      &st, err);
	if (r < 0)
		return r;
	sqlite3_bind_text(st, 1, run->id, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(st, 2, run->sandbox, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(st, 3, run->language, -1, SQLITE_TRANSIENT);
	sqlite3_bind_int64(st, 4, run->started_at_ms);
	sqlite3_bind_int64(st, 5, (sqlite3_int64)run->duration_ms);
	if (run->exited)
		sqlite3_bind_int(st, 6, run->exit_code);
	else
		sqlite3_bind_null(st, 6);
	sqlite3_bind_int(st, 7, run->signal);
	sqlite3_bind_int(st, 8, run->timed_out);
	sqlite3_bind_int(st, 9, run->oom_killed);
	sqlite3_bind_int(st, 10, run->pids_limited);
	sqlite3_bind_int64(st, 11, (sqlite3_int64)run->network_blocked);
	sqlite3_bind_int64(st, 12, (sqlite3_int64)run->cpu_ms);
	sqlite3_bind_int64(st, 13, (sqlite3_int64)run->peak_memory_bytes);
	sqlite3_bind_int64(st, 14, (sqlite3_int64)run->stdout_bytes);
	sqlite3_bind_int64(st, 15, (sqlite3_int64)run->stderr_bytes);
	sqlite3_bind_text(st, 16, run->message, -1, SQLITE_TRANSIENT);
	int rc = sqlite3_step(st);
	if ((rc & 0xff) == SQLITE_CONSTRAINT)
		return lb_error_setx(err, EEXIST, "recording a run: run %s is already in the ledger", run->id);
	if (rc != SQLITE_DONE)
		return store_fail(s, rc, err, "recording a run");

	r = count_run_unlocked(s, run, err);
	if (r < 0)
		return r;

	_cleanup_stmt_ sqlite3_stmt *count = NULL;
	r = store_prepare(s,
			  "UPDATE sandboxes SET runs = runs + 1, last_used_at_ms = max(last_used_at_ms, ?2) "
			  "WHERE name = ?1",
			  &count, err);
	if (r < 0)
		return r;
	sqlite3_bind_text(count, 1, run->sandbox, -1, SQLITE_TRANSIENT);
	sqlite3_bind_int64(count, 2, run->started_at_ms + (sqlite3_int64)run->duration_ms);
	rc = sqlite3_step(count);
	if (rc != SQLITE_DONE)
		return store_fail(s, rc, err, "counting a run");
	return 0;
}

int lb_store_run_insert(struct lb_store *s, const struct lb_store_run *run, struct lb_error *err)
{
	int r = check_run(run, err);
	if (r < 0)
		return r;
	_cleanup_unlock_ struct lb_store *locked = store_lock(s);
	r = store_exec(s, "BEGIN IMMEDIATE", err);
	if (r >= 0)
		r = insert_run_unlocked(s, run, err);
	if (r >= 0)
		r = store_exec(s, "COMMIT", err);
	if (r < 0)
		store_rollback(s);
	return r;
}

int lb_store_run_get(struct lb_store *s, const char *id, struct lb_store_run *ret, struct lb_error *err)
{
	if (!id_valid(id))
		return lb_error_setx(err, ENOENT, "no run with that id (it is not a lensbox run id)");
	_cleanup_unlock_ struct lb_store *locked = store_lock(s);
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r = store_prepare(s, "SELECT " RUN_COLUMNS " FROM runs WHERE id = ?", &st, err);
	if (r < 0)
		return r;
	sqlite3_bind_text(st, 1, id, -1, SQLITE_TRANSIENT);
	int rc = sqlite3_step(st);
	if (rc == SQLITE_DONE)
		return lb_error_setx(err, ENOENT, "no run with id %s", id);
	if (rc != SQLITE_ROW)
		return store_fail(s, rc, err, "reading a run");
	read_run(st, ret);
	return 0;
}

int lb_store_runs_list(struct lb_store *s, const char *sandbox, size_t limit, struct lb_store_run **ret_list,
		       size_t *ret_n, struct lb_error *err)
{
	if (limit == 0 || limit > INT32_MAX)
		return lb_error_setx(err, EINVAL, "listing runs: the limit must be between 1 and %d", INT32_MAX);
	if (sandbox && !lb_store_name_valid(sandbox))
		return lb_error_setx(err, EINVAL, "listing runs: invalid sandbox name");
	_cleanup_unlock_ struct lb_store *locked = store_lock(s);
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r =
	    store_prepare(s,
			  sandbox ? "SELECT " RUN_COLUMNS " FROM runs WHERE sandbox = ?2 "
				    "ORDER BY started_at_ms DESC, id DESC LIMIT ?1"
				  : "SELECT " RUN_COLUMNS " FROM runs ORDER BY started_at_ms DESC, id DESC LIMIT ?1",
			  &st, err);
	if (r < 0)
		return r;
	sqlite3_bind_int64(st, 1, (sqlite3_int64)limit);
	if (sandbox)
		sqlite3_bind_text(st, 2, sandbox, -1, SQLITE_TRANSIENT);

	_cleanup_free_ struct lb_store_run *list = NULL;
	size_t n = 0, cap = 0;
	for (;;) {
		int rc = sqlite3_step(st);
		if (rc == SQLITE_DONE)
			break;
		if (rc != SQLITE_ROW)
			return store_fail(s, rc, err, "listing runs");
		if (n == cap) {
			size_t ncap = cap ? cap * 2 : 16;
			struct lb_store_run *bigger = reallocarray(list, ncap, sizeof(*list));
			if (!bigger)
				return lb_error_set(err, ENOMEM, "listing runs");
			list = bigger;
			cap = ncap;
		}
		read_run(st, &list[n++]);
	}
	*ret_list = n ? TAKE_PTR(list) : NULL;
	*ret_n = n;
	return 0;
}

int lb_store_runs_prune(struct lb_store *s, int64_t before_ms, uint64_t *ret_deleted, struct lb_error *err)
{
	_cleanup_unlock_ struct lb_store *locked = store_lock(s);
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r = store_prepare(s, "DELETE FROM runs WHERE started_at_ms < ?", &st, err);
	if (r < 0)
		return r;
	sqlite3_bind_int64(st, 1, before_ms);
	int rc = sqlite3_step(st);
	if (rc != SQLITE_DONE)
		return store_fail(s, rc, err, "pruning the ledger");
	if (ret_deleted)
		*ret_deleted = (uint64_t)sqlite3_changes(s->db);
	return 0;
}

int lb_store_runs_prune_keep(struct lb_store *s, uint64_t keep, uint64_t *ret_deleted, struct lb_error *err)
{
	if (keep > INT64_MAX)
		return lb_error_setx(err, EINVAL, "pruning the ledger: keep is out of range");
	_cleanup_unlock_ struct lb_store *locked = store_lock(s);
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	/* The subquery walks runs_by_time newest first, so it costs the number of rows kept, not the ledger's size. */
	int r = store_prepare(s,
			      "DELETE FROM runs WHERE id IN (SELECT id FROM runs ORDER BY started_at_ms DESC, id DESC "
			      "LIMIT -1 OFFSET ?)",
			      &st, err);
	if (r < 0)
		return r;
	sqlite3_bind_int64(st, 1, (sqlite3_int64)keep);
	int rc = sqlite3_step(st);
	if (rc != SQLITE_DONE)
		return store_fail(s, rc, err, "pruning the ledger");
	if (ret_deleted)
		*ret_deleted = (uint64_t)sqlite3_changes(s->db);
	return 0;
}

static int counts_unlocked(struct lb_store *s, struct lb_store_counts *c, struct lb_error *err)
{
	{
		_cleanup_stmt_ sqlite3_stmt *st = NULL;
		int r = store_prepare(s, "SELECT state, COUNT(*) FROM sandboxes GROUP BY state", &st, err);
		if (r < 0)
			return r;
		int rc;
		while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
			const unsigned char *state = sqlite3_column_text(st, 0);
			uint64_t n = (uint64_t)sqlite3_column_int64(st, 1);
			enum lb_sandbox_state ss;
			if (lb_sandbox_state_parse((const char *)state, &ss) < 0)
				continue; /* the column's CHECK allows only the two names */
			if (ss == LB_SANDBOX_RUNNING)
				c->sandboxes_running += n;
			else
				c->sandboxes_stopped += n;
		}
		if (rc != SQLITE_DONE)
			return store_fail(s, rc, err, "counting sandboxes");
	}
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r = store_prepare(
	    s, "SELECT language, outcome, bucket, runs, duration_sum_ms, oom_kills, timeouts FROM run_stats", &st, err);
	if (r < 0)
		return r;
	int rc;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		int l = sqlite3_column_int(st, 0), o = sqlite3_column_int(st, 1), b = sqlite3_column_int(st, 2);
		uint64_t n = (uint64_t)sqlite3_column_int64(st, 3);
		if (l < 0 || l >= LB_LANGUAGE_COUNT || o < 0 || o >= LB_RUN_OUTCOME_COUNT || b < 0 ||
		    b >= LB_STORE_DURATION_BUCKETS)
			continue; /* written by a newer layout; never by this one */
		c->runs[l][o] += n;
		c->duration_buckets[b] += n;
		c->runs_total += n;
		c->duration_sum_ms += (uint64_t)sqlite3_column_int64(st, 4);
		c->oom_kills += (uint64_t)sqlite3_column_int64(st, 5);
		c->timeouts += (uint64_t)sqlite3_column_int64(st, 6);
	}
	if (rc != SQLITE_DONE)
		return store_fail(s, rc, err, "reading the run counters");
	return 0;
}

int lb_store_counts(struct lb_store *s, struct lb_store_counts *ret, struct lb_error *err)
{
	struct lb_store_counts c;
	memset(&c, 0, sizeof(c));
	_cleanup_unlock_ struct lb_store *locked = store_lock(s);
	/* one read transaction, so the figures agree with each other */
	int r = store_exec(s, "BEGIN", err);
	if (r >= 0)
		r = counts_unlocked(s, &c, err);
	if (r >= 0)
		r = store_exec(s, "COMMIT", err);
	if (r < 0) {
		store_rollback(s);
		return lb_error_wrap(err, "counting for metrics");
	}
	*ret = c;
	return 0;
}

/*
 * store.h — lensboxd's durable state: the sandboxes it owns, the host uid each one was given, and the run ledger.
 * The public API of the store library (lb_store).
 *
 * Used by lensboxd (root, many threads) and by the store's unit tests. One SQLite database in the state directory
 * (default /var/lib/lensbox/state.db), opened in WAL mode with a busy timeout and foreign keys on, created with
 * mode 0600 (it names every sandbox and holds the ledger). Nothing else writes it.
 *
 * Threading: a struct lb_store holds ONE connection guarded by ONE mutex. Every function below takes the mutex for
 * its whole duration (each is a single statement or a single transaction, milliseconds at most), so any thread may
 * call any function at any time; callers never see a half-applied change. Callers that need read-modify-write
 * across several calls on the same sandbox serialise that themselves (lensboxd's per-sandbox lock).
 *
 * Times are milliseconds since the Unix epoch (CLOCK_REALTIME), always passed in by the caller ("now_ms"), so the
 * store never reads a clock and tests control time. Durations in specs are seconds, so tests can use seconds-scale
 * idle and keep values while the API speaks minutes and hours.
 *
 * Host uids: each sandbox row owns one host uid (and the gid of the same number) from the configured range
 * [uid_base, uid_base + uid_count). A uid is recorded in the row and never handed to another sandbox while that row
 * exists; the row exists exactly as long as the sandbox's storage does (the caller deletes the row after removing
 * the storage). Allocation walks forward from the last uid handed out, so a freed uid is the last to be reused.
 *
 * Errors: every function returns 0 or a negative errno and, when err is non-NULL, fills it with a sentence.
 * -ENOENT: no such sandbox/run; -EEXIST: it already exists; -EINVAL: a bad argument (invalid name, oversized
 * string); -EUSERS: the uid range is exhausted; -ENOSPC: the state directory's filesystem is full; -EBUSY: another
 * process holds the database's lock past the busy timeout; -EIO: SQLite failed (the message carries SQLite's own).
 * ret_ out-parameters are written only on success.
 */
#ifndef LB_STORE_H
#define LB_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lb/error.h"
#include "lb/language.h"
#include "lb/sandbox_state.h"
#include "lb/tier.h"

#define LB_STORE_NAME_MAX     63  /* ^[a-z0-9][a-z0-9._-]{0,62}$ */
#define LB_STORE_IMAGE_MAX    511 /* an image reference */
#define LB_STORE_DIGEST_MAX   127 /* "sha256:<64 hex>" fits with room to spare */
#define LB_STORE_LANGUAGE_MAX 15  /* "python" | "bash" */
#define LB_STORE_MESSAGE_MAX  511 /* one plain sentence for the model */
#define LB_RUN_ID_LEN	      26  /* ULID-like: 10 time chars + 16 random chars, Crockford base32 */

/* Default location of the database inside the state directory. */
#define LB_STORE_DEFAULT_PATH "/var/lib/lensbox/state.db"

struct lb_store; /* opaque; one per process */

struct lb_store_config {
	const char *path;   /* database file; its directory must exist. NULL: LB_STORE_DEFAULT_PATH */
	uint32_t uid_base;  /* first host uid (and gid) sandboxes may get; must be > 0 */
	uint32_t uid_count; /* how many; uid_base + uid_count must not overflow */
};

/* What a sandbox was asked to be. Strings are NUL-terminated and bounded by the array sizes. */
struct lb_store_spec {
	char image[LB_STORE_IMAGE_MAX + 1]; /* reference as the client wrote it, e.g. "python:3.12-slim" */
	enum lb_tier network;		    /* stored by name (lb_tier_name); the store refuses anything else */
	uint32_t cpu_millicores;	    /* 1000 = one core */
	uint64_t memory_bytes;
	uint64_t disk_bytes;   /* size of its storage; 0: the daemon's default */
	uint64_t idle_seconds; /* stopped after this long without a run */
	uint64_t keep_seconds; /* deleted with its files after this long without a run */
};

/* One row of the sandboxes table. */
struct lb_store_sandbox {
	char name[LB_STORE_NAME_MAX + 1];
	struct lb_store_spec spec;
	char image_digest[LB_STORE_DIGEST_MAX + 1]; /* "" until known */
	uint32_t host_uid;
	uint32_t host_gid;
	enum lb_sandbox_state state; /* stored by name (lb_sandbox_state_name); LB_SANDBOX_STATE_COUNT if unknown */
	int64_t created_at_ms;	     /* creation, or the last recreation */
	int64_t last_used_at_ms;     /* last run (or creation) */
	uint64_t runs;		     /* runs since creation/recreation */
};

/* When an idle running sandbox is due to be stopped / any sandbox is due to be deleted. */
static inline int64_t lb_store_stop_at_ms(const struct lb_store_sandbox *sb)
{
	return sb->last_used_at_ms + (int64_t)sb->spec.idle_seconds * 1000;
}
static inline int64_t lb_store_delete_at_ms(const struct lb_store_sandbox *sb)
{
	return sb->last_used_at_ms + (int64_t)sb->spec.keep_seconds * 1000;
}

/* One row of the run ledger. */
struct lb_store_run {
	char id[LB_RUN_ID_LEN + 1];
	char sandbox[LB_STORE_NAME_MAX + 1];
	char language[LB_STORE_LANGUAGE_MAX + 1];
	int64_t started_at_ms;
	uint64_t duration_ms;
	bool exited;   /* false when killed: exit_code is then meaningless (JSON null) */
	int exit_code; /* 0-255 when exited */
	int signal;    /* 0 when it exited */
	bool timed_out;
	bool oom_killed;
	bool pids_limited;
	uint64_t network_blocked; /* attempts its network tier refused during this run (packets, relay/DNS refusals) */
	uint64_t cpu_ms;
	uint64_t peak_memory_bytes;
	uint64_t stdout_bytes;
	uint64_t stderr_bytes;
	char message[LB_STORE_MESSAGE_MAX + 1]; /* "" when nothing went wrong */
};

/* How a run ended, for metrics: exactly one per run, first match wins in this order. */
enum lb_run_outcome {
	LB_RUN_TIMED_OUT = 0, /* timed_out */
	LB_RUN_OOM,	      /* oom_killed */
	LB_RUN_KILLED,	      /* !exited (a signal) */
	LB_RUN_FAILED,	      /* exited with a non-zero code */
	LB_RUN_OK,	      /* exited 0 */
	LB_RUN_OUTCOME_COUNT
};
enum lb_run_outcome lb_run_outcome_of(const struct lb_store_run *run);
const char *lb_run_outcome_name(enum lb_run_outcome o); /* "timed_out", "oom", "killed", "failed", "ok" */

/* Upper bounds (inclusive, milliseconds) of the run-duration histogram buckets; the last bucket is +Inf. */
#define LB_STORE_DURATION_BUCKETS 10
extern const uint64_t lb_store_duration_bounds_ms[LB_STORE_DURATION_BUCKETS - 1];

/* Everything /metrics and /v1/health read from the store, in one consistent snapshot. Run figures are counters
 * kept beside the ledger and updated with each insert: they cover every run ever recorded, survive restarts, never
 * decrease (lb_store_runs_prune() leaves them alone), and cost the same to read however long the ledger is. */
struct lb_store_counts {
	uint64_t sandboxes_running;
	uint64_t sandboxes_stopped;
	uint64_t runs_total;
	uint64_t runs[LB_LANGUAGE_COUNT][LB_RUN_OUTCOME_COUNT];
	uint64_t oom_kills;
	uint64_t timeouts;
	uint64_t duration_buckets[LB_STORE_DURATION_BUCKETS]; /* NOT cumulative: runs with bound[i-1] < d <= bound[i] */
	uint64_t duration_sum_ms;
};

/* ---- opening ---- */

/* Opens (creating if needed, mode 0600, never through a symlink) the database at cfg->path, applies every pending
 * migration in order inside one transaction each, and returns the store. A database written by a newer lensbox
 * (schema version above what this build knows) is refused with -EPROTO rather than guessed at. The store holds an
 * exclusive flock() on "<path>.lock" until it is closed: a second opener (another lensboxd on the same state
 * directory) gets -EBUSY. */
int lb_store_open(const struct lb_store_config *cfg, struct lb_store **ret, struct lb_error *err);

/* Closes the connection and frees the store. Accepts NULL. No call may be in progress. */
void lb_store_close(struct lb_store *s);

static inline void lb_store_closep(struct lb_store **s)
{
	lb_store_close(*s);
}
#define _cleanup_store_ __attribute__((cleanup(lb_store_closep)))

/* The schema version the database is at (equal to lb_store_schema_latest() after a successful open). */
int lb_store_schema_version(struct lb_store *s, int *ret_version, struct lb_error *err);
int lb_store_schema_latest(void);

/* ---- names ---- */

/* true when name matches ^[a-z0-9][a-z0-9._-]{0,62}$ (the API's rule, also checked here before any write). */
bool lb_store_name_valid(const char *name);

/* ---- sandboxes ---- */

/* Reads one sandbox. -ENOENT when there is no such row. */
int lb_store_sandbox_get(struct lb_store *s, const char *name, struct lb_store_sandbox *ret, struct lb_error *err);

enum lb_store_filter { LB_STORE_ALL = 0, LB_STORE_ONLY_RUNNING, LB_STORE_ONLY_STOPPED };
enum lb_store_order {
	LB_STORE_BY_NAME = 0,	   /* name ascending */
	LB_STORE_LEAST_RECENT_USED /* last_used_at ascending, then name: who to stop first when max_running is hit */
};

/* Lists sandboxes as a malloc'ed array the caller frees with free() (NULL and 0 when there are none). */
int lb_store_sandbox_list(struct lb_store *s, enum lb_store_filter filter, enum lb_store_order order,
			  struct lb_store_sandbox **ret_list, size_t *ret_n, struct lb_error *err);

/* Ensures a row for name. When absent: allocates a host uid/gid, inserts {spec, digest, state stopped,
 * created_at = last_used_at = now_ms, runs 0} and sets *ret_created = true. When present: replaces spec and
 * image_digest only (uid, state, times and runs unchanged), *ret_created = false. Either way *ret is the row as
 * stored. digest may be NULL or "" (unknown). -EUSERS when no uid is free. ret and ret_created may be NULL. */
int lb_store_sandbox_put(struct lb_store *s, const char *name, const struct lb_store_spec *spec, const char *digest,
			 int64_t now_ms, struct lb_store_sandbox *ret, bool *ret_created, struct lb_error *err);

/* Turns an existing row into a fresh sandbox after the caller removed its old storage (image or network
 * changed): spec and digest replaced, state stopped, created_at = last_used_at = now_ms, runs 0. The host uid
 * is kept (the storage it owned is gone). -ENOENT when absent. ret may be NULL. */
int lb_store_sandbox_recreate(struct lb_store *s, const char *name, const struct lb_store_spec *spec,
			      const char *digest, int64_t now_ms, struct lb_store_sandbox *ret, struct lb_error *err);

/* Records the image digest once resolved. -ENOENT when absent. */
int lb_store_sandbox_set_digest(struct lb_store *s, const char *name, const char *digest, struct lb_error *err);

/* Records running/stopped. -ENOENT when absent. */
int lb_store_sandbox_set_state(struct lb_store *s, const char *name, enum lb_sandbox_state state, struct lb_error *err);

/* Marks every sandbox stopped (start-up reconciliation: no sandbox survives the daemon). *ret_changed (may be
 * NULL) is how many were marked running before. */
int lb_store_sandbox_mark_all_stopped(struct lb_store *s, uint64_t *ret_changed, struct lb_error *err);

/* A start, in one statement: state running, the image digest it started from, last_used_at = now_ms. -ENOENT when
 * absent. */
int lb_store_sandbox_started(struct lb_store *s, const char *name, const char *digest, int64_t now_ms,
			     struct lb_error *err);

/* last_used_at = now_ms (a run started or ended). -ENOENT when absent. */
int lb_store_sandbox_touch(struct lb_store *s, const char *name, int64_t now_ms, struct lb_error *err);

/* Deletes the row, which frees its host uid for (eventual) reuse. Call only after its storage is removed. The
 * ledger keeps the sandbox's runs. -ENOENT when absent. */
int lb_store_sandbox_delete(struct lb_store *s, const char *name, struct lb_error *err);

/* ---- host uids held before a sandbox owns them ---- */

/* Who holds a uid no sandbox row has yet. The allocator skips held uids as it skips sandboxes' own, and a start-up
 * reconciliation cleans up whatever a crash left under them (the runner key and storage of "u<uid>"). */
enum lb_store_holder {
	LB_STORE_SPARE = 0, /* a spare sandbox started ahead of time (supervisor/core/spares.c): table spares */
	LB_STORE_RESERVED,  /* kept for the next new sandbox that gets no spare (supervisor/core/reserved.c): table
			     * reserved_uids */
};

/* Takes the next free host uid (the allocator's walk) for h. -EUSERS when none is free. */
int lb_store_held_add(struct lb_store *s, enum lb_store_holder h, int64_t now_ms, uint32_t *ret_uid,
		      struct lb_error *err);
/* Releases a uid h holds (whatever was made under it is gone). -ENOENT when h holds no such uid. */
int lb_store_held_remove(struct lb_store *s, enum lb_store_holder h, uint32_t uid, struct lb_error *err);
/* Every uid h holds, ascending (free() the array). */
int lb_store_held_list(struct lb_store *s, enum lb_store_holder h, uint32_t **ret_uids, size_t *ret_n,
		       struct lb_error *err);
/* Hands the spare holding spare_uid to the sandbox `name`, in one transaction: the spare's row goes and the
 * sandbox's host_uid and host_gid become spare_uid (its previous uid is free again: call this only while that uid
 * owns no storage). -ENOENT when either is absent (nothing changed). *ret (may be NULL) is the row as stored. */
int lb_store_sandbox_adopt(struct lb_store *s, const char *name, uint32_t spare_uid, struct lb_store_sandbox *ret,
			   struct lb_error *err);

/* How lb_store_sandbox_create_held makes a row. */
struct lb_store_from_held {
	enum lb_store_holder holder; /* who holds uid now */
	uint32_t uid;
	bool started;	   /* recorded running, as lb_store_sandbox_started(digest, now_ms) would; else stopped */
	bool reserve_next; /* a fresh uid reserved (LB_STORE_RESERVED) in the same commit */
};

/* Creates the sandbox `name` (as lb_store_sandbox_put would, or started) holding the uid from->holder holds, in one
 * transaction: the holder's row goes and no uid is allocated for the sandbox, which makes a new sandbox one commit
 * instead of two. With from->reserve_next, *ret_next_uid (may be NULL) is the uid reserved in that commit, 0 when
 * none was free (the sandbox is created all the same). -EEXIST when a sandbox of that name exists, -ENOENT when the
 * holder holds no such uid (nothing changed either way). *ret (may be NULL) is the row as stored. */
int lb_store_sandbox_create_held(struct lb_store *s, const char *name, const struct lb_store_spec *spec,
				 const char *digest, int64_t now_ms, const struct lb_store_from_held *from,
				 struct lb_store_sandbox *ret, uint32_t *ret_next_uid, struct lb_error *err);

/* Running sandboxes whose idle time is up (lb_store_stop_at_ms() <= now_ms), oldest first. Free with free(). */
int lb_store_sandbox_due_stop(struct lb_store *s, int64_t now_ms, struct lb_store_sandbox **ret_list, size_t *ret_n,
			      struct lb_error *err);

/* Sandboxes in any state whose keep time is up (lb_store_delete_at_ms() <= now_ms), oldest first. */
int lb_store_sandbox_due_delete(struct lb_store *s, int64_t now_ms, struct lb_store_sandbox **ret_list, size_t *ret_n,
				struct lb_error *err);

/* The earliest future-or-past moment at which due_stop or due_delete would return something (for the
 * supervisor's timer to sleep until). -ENOENT when there are no sandboxes at all. */
int lb_store_next_deadline(struct lb_store *s, int64_t *ret_ms, struct lb_error *err);

/* ---- the run ledger ---- */

/* Writes a new run id (LB_RUN_ID_LEN chars + NUL into out[LB_RUN_ID_LEN + 1]): now_ms in 10 Crockford base32
 * characters then 80 random bits from getrandom(2), so ids sort by time and never collide in practice. */
int lb_run_id_generate(int64_t now_ms, char out[LB_RUN_ID_LEN + 1], struct lb_error *err);

/* Appends a finished run to the ledger and, when its sandbox row exists, adds one to its run count and records
 * the run's end (started_at_ms + duration_ms) as its last use unless that is later already, in one transaction.
 * -EEXIST when the id is already in the ledger. */
int lb_store_run_insert(struct lb_store *s, const struct lb_store_run *run, struct lb_error *err);

/* Reads one run by id. -ENOENT when absent. */
int lb_store_run_get(struct lb_store *s, const char *id, struct lb_store_run *ret, struct lb_error *err);

/* The ledger newest first (started_at descending, then id descending), of one sandbox when sandbox is non-NULL,
 * at most limit rows (1 or more; 0 is -EINVAL). Free with free(). */
int lb_store_runs_list(struct lb_store *s, const char *sandbox, size_t limit, struct lb_store_run **ret_list,
		       size_t *ret_n, struct lb_error *err);

/* Deletes ledger rows that started before before_ms (the run counters of lb_store_counts() keep them).
 * *ret_deleted may be NULL. */
int lb_store_runs_prune(struct lb_store *s, int64_t before_ms, uint64_t *ret_deleted, struct lb_error *err);

/* Deletes every ledger row but the newest keep (started_at descending, then id descending, as listed); keep 0
 * deletes them all. The run counters of lb_store_counts() keep them. *ret_deleted may be NULL. */
int lb_store_runs_prune_keep(struct lb_store *s, uint64_t keep, uint64_t *ret_deleted, struct lb_error *err);

/* ---- figures ---- */

/* One consistent snapshot of counts for /metrics and /v1/health. */
int lb_store_counts(struct lb_store *s, struct lb_store_counts *ret, struct lb_error *err);

#endif

/*
 * core.h — lensboxd's core: the daemon's context and the interfaces between core/'s files.
 *
 * The core runs as root. One struct lbd is built by main.c and passed to every thread; beyond the parsed config
 * (read-only after start) nothing is global. It holds no listening socket: the API process (api/) holds it, parses
 * every request, and asks the core by the messages of proto/proto.h, one channel per request. The parts:
 *
 *   main.c        start-up in a safe order, the signal loop, an orderly shutdown
 *   socket.c      the API socket: created here (root owns its directory), handed to the API process
 *   api_proc.c    the API process: started, watched, replaced when it ends
 *   serve.c       the control socket and one thread per request channel; the one switch over message types
 *   do_*.c        the core's answer to each message: health and metrics, sandboxes, runs and the ledger, files,
 *                 images
 *   gen.c         the sandbox and run objects of the answers
 *   sandboxes.c   the table of sandboxes: per-sandbox FIFO turn, start/stop/recreate/delete, max_running
 *   spec.c        what a sandbox is made from: runner key, storage path, the runner's spec
 *   files.c       file transfer into and out of a sandbox's storage without following its symlinks
 *   timers.c      idle stop and keep-hours deletion
 *   spares.c      sandboxes started ahead of time, handed to new conversations
 *   reserved.c    host uids reserved ahead for new sandboxes that get no spare
 *   images.c      image reference -> unpacked rootfs and digest
 *   network.c     the network tiers (netfilter/) started, attached and watched
 *   output.c      a program's captured output cut to the asked size as valid UTF-8
 */
#ifndef LBD_CORE_H
#define LBD_CORE_H

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "proto.h"
#include "lb/error.h"
#include "lb/images.h"
#include "lb/policy.h"
#include "lb/runner.h"
#include "lb/store.h"

struct lbd_sandbox; /* sandboxes.c */
struct lbd_spares;  /* spares.c */
struct lbd_image;   /* images.c */
struct lb_images;   /* images/ */
struct lb_net;	    /* netfilter/ */

/* reserved.c: uids held in the store's reserved_uids table, for the next new sandboxes that get no spare. */
#define LBD_RESERVED_KEEP 2
struct lbd_reserved {
	pthread_mutex_t mu;
	uint32_t uids[LBD_RESERVED_KEEP];
	unsigned n;
};

struct lbd_metrics {
	atomic_uint_fast64_t runs_in_flight;
	atomic_uint_fast64_t evictions;
	atomic_uint_fast64_t idle_stops;
	atomic_uint_fast64_t keep_deletions;
	atomic_uint_fast64_t recreations;
	atomic_uint_fast64_t messages_refused;	/* malformed messages from the API process (serve.c) */
	atomic_uint_fast64_t api_restarts;	/* API processes replaced after they ended (api_proc.c) */
	atomic_uint_fast64_t channels;		/* requests the core is serving right now (serve.c) */
	atomic_uint_fast64_t refused_logged_ms; /* when a refusal was last logged (serve.c's rate limit) */
};

struct lbd {
	struct lbd_config cfg;
	struct lb_policy *policy; /* NULL when it failed to load: health says why, runs get 503 */
	char policy_error[1024];
	struct lb_host_facts host;  /* measured once at start */
	struct lb_cg_host *cgroups; /* the cgroup layout found at start, for every start (NULL: each looks) */
	struct lb_store *store;
	char
	    disk_pool[300]; /* <state_dir>/disk-pool: pre-formatted storage images (runner/disk_pool.c), set at start */
	struct lb_images *images; /* NULL when the store could not be opened: runs get 503 image_unavailable */
	pthread_mutex_t images_mu;

	/* images.c: pulls in progress and the cond signalled when one ends (under images_mu); the timer thread's
	 * last image gc (monotonic ms, that thread's only). */
	pthread_cond_t pulls_cv;
	struct lbd_pull *pulls;
	uint64_t gc_last_mono;

	struct lb_net *net;	/* NULL when networking is off or failed to start: only network "off" runs */
	pthread_mutex_t net_mu; /* serialises attach/detach with the timer's table check (lbd_network_*) */
	char net_error[600];
	unsigned net_services_restarts;		 /* timer thread only: the restarts last logged */
	unsigned net_services_sup_restarts;	 /* timer thread only: the supervisor restarts last logged */
	bool net_services_looping;		 /* timer thread only: a crash loop was logged (and not its end) */
	bool net_services_down_logged;		 /* timer thread only: the keeper's end was logged */
	char net_uplink_error[LB_ERROR_MSG_MAX]; /* timer thread only: the last uplink failure logged, "" when none */
	int64_t started_at_ms;

	struct lbd_spares *spares;    /* NULL until lbd_spares_start() */
	struct lbd_reserved reserved; /* from lbd_reserved_init() */
	struct lbd_ready *ready;      /* NULL until lbd_ready_start() */
	struct lbd_roots *roots; /* NULL until lbd_roots_open(), or when it failed: each start makes its own root */

	pthread_mutex_t table_mu; /* guards the sandbox table and the running count */
	struct lbd_sandbox *table;
	uint32_t running; /* sandboxes started and not yet stopped, including ones being started */

	atomic_bool stopping;
	struct lbd_metrics metrics;
};

/* ---- spec.c ---- */

/* Why sandboxes cannot run here (policy not loaded, host facts), or NULL when they can. */
const char *lbd_cannot_run(const struct lbd *d);

/* The runner's name for a sandbox, and the name of its storage directory: "u<host uid>". The host uid is unique
 * among sandboxes and spares (the store's allocator), so the key is too; it does not change when a spare started
 * under it is handed to a named sandbox, which is what lets a spare be started before its name is known. */
#define LBD_RUNNER_KEY_MAX 16
void lbd_runner_key(uint32_t host_uid, char buf[LBD_RUNNER_KEY_MAX]);
/* <state_dir>/sandboxes/<runner key>: the storage (disk image, lock) of the sandbox or spare holding host_uid. */
void lbd_storage_path(const struct lbd *d, uint32_t host_uid, char *buf, size_t size);
/* A new sandbox's uid must own no storage yet: a storage directory under a uid no row held is what a crash between
 * removing a row's storage and the row left. Nobody owns it, and it goes. */
void lbd_storage_clear_orphan(const struct lbd *d, uint32_t host_uid);
/* held.c — releases every uid the store holds for `holder` (spares, reserved uids), at start-up: cleans up what an
 * earlier instance may have started under it (its runner key's cgroups, mounts and loop device; its storage, which no
 * conversation ever owned) and removes the store's row. A uid that fails is logged ("reconciling <what> failed")
 * and counted in *ret_failed; *ret_n is how many the store held. 0, or the listing's failure. */
int lbd_held_reconcile(struct lbd *d, enum lb_store_holder holder, const char *what, size_t *ret_n,
		       unsigned *ret_failed, struct lb_error *err);
/* The runner's spec for a sandbox of store spec `spec` under host uid `uid`, from image `img`: the one place that
 * turns a spec into limits, tier and policy, so a spare and a sandbox started on demand are built alike. key and
 * storage are the caller's (lbd_runner_key, lbd_storage_path) and, like img, must outlive *ret. */
void lbd_runner_spec(const struct lbd *d, const struct lb_store_spec *spec, uint32_t uid, const struct lbd_image *img,
		     const char *key, const char *storage, struct lb_sandbox_spec *ret);
/* Every sandbox lensboxd starts has this hostname: a spare is started before it has a name, and a conversation's
 * name is no business of the code it runs. */
#define LBD_SANDBOX_HOSTNAME "sandbox"
/* What a run's program gets on top of the runner's clean environment (and a spare's warming run too, so that it
 * warms the same lookups: Python searches PYTHONPATH first for every module it imports at start). */
#define LBD_RUN_ENV_INIT                                     \
	{                                                    \
		"HOME=/sandbox", "PYTHONPATH=/sandbox", NULL \
	}

/* ---- images.c ---- */

struct lb_image_info;
struct lbd_image {
	struct lb_image_info *info; /* rootfs, env... from images/ (owned) */
	char digest[LB_STORE_DIGEST_MAX + 1];
};
int lbd_images_open(struct lbd *d, struct lb_error *err);
void lbd_images_close(struct lbd *d);

/* Whether a lookup pulled the image first, and how long the pull took. */
struct lbd_image_pulled {
	bool pulled;
	uint64_t ms;
};
/* Resolves an image reference ("python:3.12-slim") through the image store. When it is not there and pull is
 * true and the config's pull_missing_images is on, pulls it first (*ret_pulled, may be NULL, says so). touch:
 * record a use for garbage collection. -ENOENT when it is not there (err says how to get it, or why the pull
 * failed); -ENOEXEC when it lacks python3 or bash. Release with lbd_image_release(). */
int lbd_image_get(struct lbd *d, const char *ref, bool pull, bool touch, struct lbd_image *ret,
		  struct lbd_image_pulled *ret_pulled, struct lb_error *err);
/* lbd_image_get(d, ref, false, false, ret, NULL, err). */
int lbd_image_resolve(struct lbd *d, const char *ref, struct lbd_image *ret, struct lb_error *err);
void lbd_image_release(struct lbd_image *img);

/* Pulls ref with the config's registry settings, on a store handle of its own (never holding images_mu while
 * downloading); a pull of the same reference in progress is waited for, not repeated (unless it failed). *ret_info (may
 * be NULL) is the caller's (lb_image_info_free); *ret_ms (may be NULL) the duration. Errors as lb_image_pull(). */
int lbd_image_pull(struct lbd *d, const char *ref, struct lb_image_info **ret_info, uint64_t *ret_ms,
		   struct lb_error *err);
/* lbd_image_pull, told to watch (may be NULL) as the store goes: progress, and -ECANCELED when it says stop. */
int lbd_image_pull_watched(struct lbd *d, const char *ref, lb_image_watch_fn watch, void *watch_ud,
			   struct lb_image_info **ret_info, uint64_t *ret_ms, struct lb_error *err);
/* Imports path (validated by the caller) under name (may be NULL) as lb_image_import() does, on its own handle;
 * watch (may be NULL) as for lbd_image_pull_watched. */
int lbd_image_import(struct lbd *d, const char *path, const char *name, lb_image_watch_fn watch, void *watch_ud,
		     struct lb_image_info **ret_info, struct lb_error *err);

/* Which images the sandboxes use: every sandbox row, and the config digest its spec's image name points at now
 * ("" when none); also the config's default_image, which the next new sandbox will use. Built under images_mu
 * (the caller holds it). */
struct lbd_image_usage {
	struct lb_store_sandbox *rows;
	size_t n;
	char (*name_digest)[72];
	char default_digest[72]; /* default_image's config digest (""): gc keeps it; not counted */
};
int lbd_image_usage_locked(struct lbd *d, struct lbd_image_usage *ret, struct lb_error *err);
/* Sandboxes using info: recorded digest equal to its manifest or config digest, or spec name pointing at it. */
size_t lbd_image_usage_count(const struct lbd_image_usage *u, const struct lb_image_info *info);
void lbd_image_usage_free(struct lbd_image_usage *u);
/* Removes ref (a name or digest) unless a sandbox uses it: -EBUSY (err says which or how many), *ret_users (may
 * be NULL) the count; -ENOENT when absent. */
int lbd_image_remove(struct lbd *d, const char *ref, size_t *ret_users, struct lb_error *err);
/* Timer work: garbage-collects images unused for image_gc_after (rate-limited inside). */
void lbd_images_tick(struct lbd *d);

/* ---- sandboxes.c ---- */

/* What ensuring did. */
struct lbd_ensure_result {
	bool created;
	bool started;
	char recreated[256]; /* "" unless the old sandbox was replaced: why */
	bool image_pulled;   /* its image was missing and was pulled first */
	uint64_t image_pull_ms;
};

int lbd_sandboxes_init(struct lbd *d, struct lb_error *err);
void lbd_sandboxes_shutdown(struct lbd *d);

/* Start-up reconciliation: for every sandbox the store knows, lb_sandbox_cleanup() (processes, mounts, loop
 * devices, cgroups a previous instance left), then every row marked stopped. Files are never touched. */
int lbd_reconcile(struct lbd *d, struct lb_error *err);

/* Looks the sandbox up (creating the in-memory entry) and waits for its turn: turns are handed out in arrival
 * order, one at a time. The returned handle must be released with lbd_sandbox_release(). */
struct lbd_sandbox *lbd_sandbox_acquire(struct lbd *d, const char *name);
void lbd_sandbox_release(struct lbd *d, struct lbd_sandbox *sb);

/* Under the turn: makes the row exist with req's spec (recreating when image or network differ). When start is
 * true, also starts it (evicting an idle LRU sandbox when max_running is reached). */
int lbd_sandbox_ensure(struct lbd *d, struct lbd_sandbox *sb, const struct lbd_spec_request *req, bool start,
		       struct lbd_ensure_result *ret, struct lbd_fail *f);
/* Under the turn: stops a running sandbox (files stay). *ret_was_running may be NULL. */
int lbd_sandbox_stop(struct lbd *d, struct lbd_sandbox *sb, bool *ret_was_running, struct lbd_fail *f);
/* Under the turn: stops it, removes its storage and its row. -ENOENT when there was no row. */
int lbd_sandbox_delete(struct lbd *d, struct lbd_sandbox *sb, struct lbd_fail *f);
/* Under the turn: the live sandbox (NULL when stopped). */
struct lb_sandbox *lbd_sandbox_live(struct lbd_sandbox *sb);
const char *lbd_sandbox_name(const struct lbd_sandbox *sb);
/* Records a use now (LRU order and the store's last_used_at, which the idle and keep timers read). */
void lbd_sandbox_touch(struct lbd *d, struct lbd_sandbox *sb);
/* Records a use now in memory only (LRU order), for a caller that writes the store's last_used_at itself (a run:
 * lb_store_run_insert). */
void lbd_sandbox_note_use(struct lbd *d, struct lbd_sandbox *sb);
/* Storage access for file transfer. A running sandbox's storage is reached without taking a turn (a slow run must
 * not delay file requests), pinned running by its read lock. A stopped one's is opened from the host without
 * starting it (runner/storage.c), under its turn, so no start mounts it meanwhile; a new one is started instead when
 * a spare is ready (it takes the spare). pin->root is the storage's root directory (do not close it); call
 * lbd_storage_unpin() after, on the same thread, with every fd opened under root closed. create: make the sandbox
 * with the defaults when it does not exist (else 404). */
struct lbd_pin {
	struct lbd_sandbox *sb;
	bool offline;		   /* opened from the host: storage holds it, and the turn is taken */
	struct lb_storage storage; /* offline only */
	uint64_t disk_bytes;	   /* offline only: its size, for the pool's refill */
	int root;
	uid_t uid;
	gid_t gid;
};
int lbd_storage_pin(struct lbd *d, const char *name, bool create, struct lbd_pin *pin, struct lbd_fail *f);
void lbd_storage_unpin(struct lbd *d, struct lbd_pin *pin);

/* Timer work: stops sandboxes idle past their time and deletes ones unused past keep. Never waits behind a run. */
void lbd_sandboxes_tick(struct lbd *d);

/* Number of runs in progress and the sandbox table figures, for health. */
void lbd_sandboxes_counts(struct lbd *d, uint64_t *ret_running, uint64_t *ret_in_flight);

/* ---- spares.c ---- */

/* Starts the thread that keeps cfg.spare_sandboxes sandboxes started ahead of time (none when 0). Call after
 * reconciliation and the network's start. */
int lbd_spares_start(struct lbd *d, struct lb_error *err);
/* Stops the thread, then stops every spare and removes its storage and its uid's reservation. */
void lbd_spares_stop(struct lbd *d);
/* Start-up reconciliation for spares an earlier instance left (the store's spares table): their processes,
 * mounts, cgroups and storage go, and their uids are released. Before lbd_spares_start(). */
int lbd_spares_reconcile(struct lbd *d, struct lb_error *err);
/* Under the turn of sandbox `name`, whose row is `row` and which has no storage yet: when a ready spare was made
 * from the same image digest with the same network, cpu, memory and disk, the store hands its uid to the row
 * (lb_store_sandbox_adopt), *ret_live becomes the running spare and *ret_uid its (now the row's) host uid, and
 * true is returned. false: none matched (or the hand-over failed and that spare was discarded); start normally. */
bool lbd_spares_claim(struct lbd *d, const char *name, const struct lb_store_sandbox *row, const char *digest,
		      struct lb_sandbox **ret_live, uint32_t *ret_uid);
/* Under the turn of sandbox `name`, which has no row yet: when a ready spare matches spec and digest as for
 * lbd_spares_claim, the store creates the row holding the spare's uid in one commit
 * (lb_store_sandbox_create_held: no uid allocated, no second commit), *ret_row is that row, *ret_live the running
 * spare, and true is returned. false: no row was made; create it and start normally, without lbd_spares_claim (this
 * arrival is noted already). */
bool lbd_spares_create(struct lbd *d, const char *name, const struct lb_store_spec *spec, const char *digest,
		       int64_t now_ms, struct lb_store_sandbox *ret_row, struct lb_sandbox **ret_live);
/* Spares ready now and the configured target, for health. */
void lbd_spares_counts(struct lbd *d, uint32_t *ret_ready, uint32_t *ret_target);

/* ---- reserved.c ---- */

/* Start-up, after reconciliation: what an earlier instance started under a reserved uid goes (its runner key and
 * storage) and the uid is released; then LBD_RESERVED_KEEP uids are reserved (fewer when the range is full: not an
 * error). */
int lbd_reserved_init(struct lbd *d, struct lb_error *err);
/* A reserved uid, out of the pool (its store record stays until a row takes it), or 0 when the pool is empty. */
uint32_t lbd_reserved_take(struct lbd *d);
/* A reserved uid into the pool: one a commit just reserved, or one taken and not used. Released when the pool is
 * full. */
void lbd_reserved_give(struct lbd *d, uint32_t uid);
/* Releases every uid of the pool (not those taken): how many. For a new sandbox that found the range full. */
unsigned lbd_reserved_drop(struct lbd *d);
/* Shutdown, after every sandbox stopped: the pool's uids are released. */
void lbd_reserved_stop(struct lbd *d);

/* A new sandbox started under a reserved uid, whose row is recorded during its start. */
struct lbd_new_row {
	struct lbd *d;
	const char *name;
	const struct lb_store_spec *spec;
	const char *digest; /* the image's, borrowed */
	uint32_t uid;	    /* 0: none (the row was made otherwise) */
	bool done;	    /* the recording was tried */
	bool started;	    /* recorded running */
	int r;		    /* the recording's outcome */
	struct lb_error err;
};
/* Under the turn of the new sandbox `name`: a reserved uid for it (one reserved now when the pool is empty: -EUSERS
 * when none is free), a storage a crash left under that uid removed; *ret_row holds what a start reads of a row
 * (name, spec, uid). */
int lbd_new_row_begin(struct lbd *d, const char *name, const struct lb_store_spec *spec, const char *digest,
		      struct lbd_new_row *nr, struct lb_store_sandbox *ret_row, struct lb_error *err);
/* Records the row (running when started), the reserved uid taken and the next one reserved in one commit. */
int lbd_new_row_record(struct lbd_new_row *nr, bool started);
/* For lb_sandbox_spec.while_building: lbd_new_row_record(arg, true). */
int lbd_new_row_while_building(void *arg, struct lb_error *err);
/* After the start, whatever its outcome: a row not recorded yet is recorded stopped (the sandbox was created, as
 * after any failed start); a uid no row took goes back to the pool. */
void lbd_new_row_end(struct lbd_new_row *nr);

/* ---- ready.c ---- */

#define LBD_READY_MAX	  16 /* ready_storages' and ready_starts' upper bound */
#define LBD_READY_CG_NAME 32 /* a ready cgroup set's name: r<uid_range_start>-<n> */
/* Starts the thread that keeps cfg.ready_storages empty filesystems of the default disk size mounted ahead of time,
 * and cfg.ready_starts network namespaces and (cgroup v1) cgroup sets made (none when both are 0), after sweeping the
 * sets a dead instance left. After reconciliation; lbd_ready_stop() gives the images back to the disk pool, closes
 * the namespaces and removes the sets. */
int lbd_ready_start(struct lbd *d, struct lb_error *err);
void lbd_ready_stop(struct lbd *d);
/* One ready filesystem of disk_bytes for a start whose storage does not exist yet (the caller hands it to
 * lb_sandbox_start in lb_sandbox_spec.disk_ready), or NULL when none is ready. */
struct lb_disk_ready *lbd_ready_take(struct lbd *d, uint64_t disk_bytes);
/* A network namespace made ahead (lb_netns_make) for a start (lb_sandbox_spec.ready_netns), or 0 when none is. */
int lbd_ready_take_netns(struct lbd *d);
/* A cgroup set made ahead (lb_ready_cgroup_make) for a start (lb_sandbox_spec.ready_cgroup): its name into name,
 * and true; false when none is. The start then owns it. */
bool lbd_ready_take_cgroup(struct lbd *d, char name[LBD_READY_CG_NAME]);
/* What is ready now, and the configured targets, for health. */
struct lbd_ready_counts {
	uint32_t storages, storages_target;
	uint32_t starts_target, netns, cgroups;
	bool cgroups_made; /* false on cgroup v2 (nothing to rename) or after a failure: starts make their own */
};
void lbd_ready_counts(struct lbd *d, struct lbd_ready_counts *ret);

/* ---- roots.c ---- */

#define LBD_ROOTS_MAX 16 /* images with a shared root at once; the least recently used goes */
/* Sweeps <run_dir>/roots (what a killed lensboxd left) and makes it. Before anything starts a sandbox. */
int lbd_roots_open(struct lbd *d, struct lb_error *err);
/* Detaches every shared root (running sandboxes keep theirs). */
void lbd_roots_close(struct lbd *d);
/* The shared root of the image at rootfs, made now if it has none, for lb_sandbox_spec.shared_root: buf, or NULL
 * when there is none to give (the start then makes its own). A root given is not removed until lbd_root_put. */
const char *lbd_root_get(struct lbd *d, const char *rootfs, char buf[PATH_MAX]);
/* The start given root dir by lbd_root_get is done (its sandbox holds its own bind, or it failed): NULL is ignored. */
void lbd_root_put(struct lbd *d, const char *dir);
/* Detaches the roots whose image directory is gone or was replaced (after an image is removed). */
void lbd_roots_prune(struct lbd *d);

/* ---- network.c ---- */

/* Starts netfilter/ when networking is on (after reconciliation: removes every veth and rule left by an earlier
 * instance). A failure is not fatal: d->net_error says why packages and web are unavailable. */
void lbd_network_start(struct lbd *d);
void lbd_network_stop(struct lbd *d);
/* Puts lensbox's nftables table and the sandboxes' rules back if someone removed them (lb_net_verify), logging a
 * warning when it had to. The timer calls it every LBD_NETWORK_VERIFY_MS (or every tick when that is longer). */
#define LBD_NETWORK_VERIFY_MS 2000
void lbd_network_verify(struct lbd *d);
/* lb_net_attach / lb_net_detach under net_mu, so the timer's repair never runs while a sandbox's network is being
 * set up or torn down (it would take a half-removed sandbox for a flushed one and load its rules again). */
int lbd_network_attach(struct lbd *d, const char *name, int netns_fd, enum lb_tier tier, struct lb_error *err);
int lbd_network_detach(struct lbd *d, const char *name, struct lb_error *err);
/* Why sandboxes of tier `network` cannot start here, or NULL. */
const char *lbd_network_unavailable(const struct lbd *d, enum lb_tier network);

/* ---- do_runs.c: ledger retention ---- */

/* Deletes ledger rows past runs_keep_days and beyond the newest runs_keep_max (either 0: that rule is off), logging
 * what went. The timer calls it every lbd_ledger_prune_every_ms(d) (rounded up to its tick). */
void lbd_ledger_prune(struct lbd *d);
uint64_t lbd_ledger_prune_every_ms(const struct lbd *d);

/* ---- timers.c ---- */
int lbd_timers_start(struct lbd *d, pthread_t *ret_thread, struct lb_error *err);

/* ---- gen.c ---- */

/* Writes a sandbox row as the API's sandbox object; disk_used < 0: unknown (null). */
void lbd_gen_sandbox_with_disk(const struct lbd *d, yajl_gen g, const struct lb_store_sandbox *sb, int64_t disk_used);
void lbd_gen_run(yajl_gen g, const struct lb_store_run *run);

/* ---- do_*.c: the core's answer to each request message ----
 * m is decoded and validated by proto.c (lbp_recv); each function checks again what depends on the core's own
 * state and configuration, and fills res. A descriptor it takes out of m it sets to -1 in m. */
typedef void (*lbd_do_fn)(struct lbd *d, struct lbp_msg *m, struct lbd_res *res);
void lbd_do_health(struct lbd *d, struct lbp_msg *m, struct lbd_res *res);
void lbd_do_metrics(struct lbd *d, struct lbp_msg *m, struct lbd_res *res);
void lbd_do_sandbox_list(struct lbd *d, struct lbp_msg *m, struct lbd_res *res);
void lbd_do_sandbox_get(struct lbd *d, struct lbp_msg *m, struct lbd_res *res);
void lbd_do_sandbox_put(struct lbd *d, struct lbp_msg *m, struct lbd_res *res);
void lbd_do_sandbox_delete(struct lbd *d, struct lbp_msg *m, struct lbd_res *res);
void lbd_do_sandbox_stop(struct lbd *d, struct lbp_msg *m, struct lbd_res *res);
void lbd_do_run(struct lbd *d, struct lbp_msg *m, struct lbd_res *res);
void lbd_do_runs_list(struct lbd *d, struct lbp_msg *m, struct lbd_res *res);
void lbd_do_run_get(struct lbd *d, struct lbp_msg *m, struct lbd_res *res);
void lbd_do_files_list(struct lbd *d, struct lbp_msg *m, struct lbd_res *res);
void lbd_do_file_get(struct lbd *d, struct lbp_msg *m, struct lbd_res *res);
void lbd_do_file_put(struct lbd *d, struct lbp_msg *m, struct lbd_res *res);
void lbd_do_images_list(struct lbd *d, struct lbp_msg *m, struct lbd_res *res);
void lbd_do_image_get(struct lbd *d, struct lbp_msg *m, struct lbd_res *res);
void lbd_do_image_delete(struct lbd *d, struct lbp_msg *m, struct lbd_res *res);
void lbd_do_image_pull(struct lbd *d, struct lbp_msg *m, struct lbd_res *res);
void lbd_do_image_import(struct lbd *d, struct lbp_msg *m, struct lbd_res *res);

/* ---- socket.c ---- */

/* Creates the API socket (root:socket_group 0660 in a directory others cannot enter), listening; an fd or -errno
 * with err filled. A stale socket of a previous instance is replaced. */
int lbd_socket_create(const struct lbd_config *cfg, struct lb_error *err);

/* ---- main.c ---- */

/* lensboxd's core: flags, configuration, start-up, serving until SIGTERM, shutdown. The process's exit status. */
int lbd_core_main(int argc, char **argv);

/* ---- serve.c ---- */

/* Serves one control socket: every LBP_CHANNEL message on it starts a thread serving one request on the channel
 * it carries. Returns when the control socket ends or the API process (pidfd) exits: 0, or -errno. Malformed
 * messages are refused, counted and logged (at most once a second); they never end the loop. */
int lbd_serve_control(struct lbd *d, int control_fd, int pidfd);

/* ---- api_proc.c ---- */

/* Starts the API process and the thread that watches it and replaces it when it ends (with backoff). */
struct lbd_api_proc;
int lbd_api_proc_start(struct lbd *d, struct lbd_api_proc **ret, struct lb_error *err);
/* Asks the API process to stop (SIGTERM: it stops accepting and lets its requests finish, up to 80 s), waits for
 * it and for the requests the core is serving, and stops the watcher. -EPERM when the API process could not serve
 * (it exited 78, which is what stopped lensboxd), else 0. */
int lbd_api_proc_stop(struct lbd_api_proc *p);
/* The API process's pid now (0 when none), and how many times it was replaced. */
pid_t lbd_api_proc_pid(struct lbd_api_proc *p);

#endif

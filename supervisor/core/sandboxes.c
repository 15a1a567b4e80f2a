/*
 * sandboxes.c — every conversation's sandbox while lensboxd runs: who may act on it now, starting, stopping,
 * recreating and deleting it, max_running with least-recently-used eviction, and start-up reconciliation.
 *
 * Runs in lensboxd (root) on connection threads and the timer thread. The store (SQLite) holds what must survive
 * a restart (spec, uid, state, times); this file holds what lives only as long as the daemon: the runner's handle
 * of a running sandbox and the per-sandbox queue.
 *
 * The turn. Each sandbox has a FIFO ticket queue: an operation that changes or uses the sandbox's processes (a run,
 * stop, delete, recreate, start) takes a ticket and waits until it is served, so runs in one sandbox execute one at
 * a time in arrival order while different sandboxes proceed in parallel. The runner requires calls on one sandbox
 * to be serialised; the turn is that serialisation. Timers and eviction never wait for a turn: they take one only
 * when nobody holds or waits for it (an idle sandbox), so a run is never delayed behind housekeeping.
 *
 * File transfer does not take the turn (a slow run must not delay it): it holds the sandbox's live_lock for
 * reading, which only the transitions start and stop take for writing. A file request on a stopped sandbox takes
 * the turn just long enough to start it.
 *
 * Lock order: table_mu, then a sandbox's mu; live_lock is never taken while holding either.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lb/cleanup.h"
#include "lb/log.h"
#include "lb/units.h"
#include "core.h"

struct lbd_sandbox {
	char name[LB_STORE_NAME_MAX + 1];
	struct lbd_sandbox *next; /* in d->table */
	unsigned refs;		  /* under table_mu: handles and pins held */

	pthread_mutex_t mu; /* guards the ticket counters */
	pthread_cond_t cv;
	uint64_t next_ticket, serving;

	pthread_rwlock_t live_lock;   /* write: start/stop; read: file transfer */
	struct lb_sandbox *live;      /* changed only by the turn holder under the write lock */
	char key[LBD_RUNNER_KEY_MAX]; /* the runner's name for the live sandbox (lbd_runner_key); with live */
	uint64_t last_used_mono;      /* for LRU eviction; under table_mu */
};

const char *lbd_sandbox_name(const struct lbd_sandbox *sb)
{
	return sb->name;
}

struct lb_sandbox *lbd_sandbox_live(struct lbd_sandbox *sb)
{
	return sb->live;
}

static void log_fields(char *buf, size_t size, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void log_fields(char *buf, size_t size, const char *name, const char *fmt, ...)
{
	int n = snprintf(buf, size, "sandbox=%s", name);
	if (fmt && n > 0 && (size_t)n < size) {
		buf[n++] = ' ';
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(buf + n, size - (size_t)n, fmt, ap);
		va_end(ap);
	}
}

/* ---- the table ---- */

static struct lbd_sandbox *find_locked(struct lbd *d, const char *name)
{
	for (struct lbd_sandbox *sb = d->table; sb; sb = sb->next)
		if (strcmp(sb->name, name) == 0)
			return sb;
	return NULL;
}

static struct lbd_sandbox *get_ref_locked(struct lbd *d, const char *name, bool create)
{
	struct lbd_sandbox *sb = find_locked(d, name);
	if (!sb && create) {
		sb = calloc(1, sizeof(*sb));
		if (!sb)
			return NULL;
		snprintf(sb->name, sizeof(sb->name), "%s", name);
		pthread_mutex_init(&sb->mu, NULL);
		pthread_cond_init(&sb->cv, NULL);
		pthread_rwlock_init(&sb->live_lock, NULL);
		sb->next = d->table;
		d->table = sb;
	}
	if (sb)
		sb->refs++;
	return sb;
}

/* Drops a reference; an entry nobody holds and that is not running leaves the table. */
static void put_ref(struct lbd *d, struct lbd_sandbox *sb)
{
	pthread_mutex_lock(&d->table_mu);
	if (--sb->refs == 0 && !sb->live) {
		for (struct lbd_sandbox **pp = &d->table; *pp; pp = &(*pp)->next)
			if (*pp == sb) {
				*pp = sb->next;
				break;
			}
		pthread_mutex_destroy(&sb->mu);
		pthread_cond_destroy(&sb->cv);
		pthread_rwlock_destroy(&sb->live_lock);
		free(sb);
	}
	pthread_mutex_unlock(&d->table_mu);
}

struct lbd_sandbox *lbd_sandbox_acquire(struct lbd *d, const char *name)
{
	pthread_mutex_lock(&d->table_mu);
	struct lbd_sandbox *sb = get_ref_locked(d, name, true);
	pthread_mutex_unlock(&d->table_mu);
	if (!sb)
		return NULL;
	pthread_mutex_lock(&sb->mu);
	uint64_t mine = sb->next_ticket++;
	while (sb->serving != mine)
		pthread_cond_wait(&sb->cv, &sb->mu);
	pthread_mutex_unlock(&sb->mu);
	return sb;
}

/* Takes the turn only when it is free and nobody waits: for timers and eviction. Caller holds table_mu. */
static bool try_turn_locked(struct lbd_sandbox *sb)
{
	bool got = false;
	pthread_mutex_lock(&sb->mu);
	if (sb->next_ticket == sb->serving) {
		sb->next_ticket++;
		got = true;
	}
	pthread_mutex_unlock(&sb->mu);
	if (got)
		sb->refs++;
	return got;
}

void lbd_sandbox_release(struct lbd *d, struct lbd_sandbox *sb)
{
	if (!sb)
		return;
	pthread_mutex_lock(&sb->mu);
	sb->serving++;
	pthread_cond_broadcast(&sb->cv);
	pthread_mutex_unlock(&sb->mu);
	put_ref(d, sb);
}

void lbd_sandboxes_counts(struct lbd *d, uint64_t *ret_running, uint64_t *ret_in_flight)
{
	pthread_mutex_lock(&d->table_mu);
	uint64_t n = 0;
	for (struct lbd_sandbox *sb = d->table; sb; sb = sb->next)
		if (sb->live)
			n++;
	pthread_mutex_unlock(&d->table_mu);
	*ret_running = n;
	*ret_in_flight = atomic_load(&d->metrics.runs_in_flight);
}

/* ---- stop ---- */

/* Under the turn. */
static int stop_locked(struct lbd *d, struct lbd_sandbox *sb, const char *why)
{
	if (!sb->live)
		return 0;
	uint64_t t0 = lbd_mono_ms();
	if (d->net) {
		struct lb_error nerr = { 0 };
		int nr = lbd_network_detach(d, sb->name, &nerr);
		if (nr < 0 && nr != -ENOENT) {
			char nf[700];
			log_fields(nf, sizeof(nf), sb->name, "error=\"%s\"", nerr.msg);
			lb_warn(nf, "removing the sandbox's network failed");
		}
	}
	pthread_rwlock_wrlock(&sb->live_lock); /* waits for file transfers in progress */
	struct lb_error err = { 0 };
	int r = lb_sandbox_stop(sb->live, &err); /* frees the handle whatever happens */
	pthread_mutex_lock(&d->table_mu);
	sb->live = NULL;
	d->running--;
	pthread_mutex_unlock(&d->table_mu);
	pthread_rwlock_unlock(&sb->live_lock);
	char f[160];
	if (r < 0) {
		/* What stop could not release, cleanup removes (the same path as after a crash). */
		struct lb_error err2 = { 0 };
		int r2 = lb_sandbox_cleanup(sb->key, d->cfg.run_dir, &err2);
		log_fields(f, sizeof(f), sb->name, "error=\"%s\"", err.msg);
		lb_warn(f, "stopping the sandbox failed; cleaned up %s", r2 < 0 ? err2.msg : "what was left");
	}
	struct lb_error serr = { 0 };
	if (lb_store_sandbox_set_state(d->store, sb->name, LB_SANDBOX_STOPPED, &serr) < 0 && serr.code != ENOENT) {
		log_fields(f, sizeof(f), sb->name, NULL);
		lb_error(f, "recording the stop: %s", serr.msg);
	}
	log_fields(f, sizeof(f), sb->name, "reason=%s duration_ms=%llu", why, (unsigned long long)(lbd_mono_ms() - t0));
	lb_info(f, "sandbox stopped");
	return r;
}

int lbd_sandbox_stop(struct lbd *d, struct lbd_sandbox *sb, bool *ret_was_running, struct lbd_fail *f)
{
	struct lb_store_sandbox row;
	struct lb_error err = { 0 };
	int r = lb_store_sandbox_get(d->store, sb->name, &row, &err);
	if (r == -ENOENT) {
		lbd_fail_set(f, 404, "sandbox_not_found", "There is no sandbox named %s.", sb->name);
		return r;
	}
	if (r < 0) {
		lbd_fail_store(f, r, "Reading the sandbox's state", err.msg);
		return r;
	}
	bool was = sb->live != NULL;
	stop_locked(d, sb, "api");
	if (ret_was_running)
		*ret_was_running = was;
	return 0;
}

/* ---- start ---- */

/* Evicts the least recently used running sandbox nobody is using. Returns 1 when one was stopped, 0 if none
 * could be, never waiting behind a run. */
static int evict_one(struct lbd *d, const struct lbd_sandbox *self)
{
	pthread_mutex_lock(&d->table_mu);
	struct lbd_sandbox *victim = NULL;
	/* Pick the least recently used among the idle ones: try candidates oldest first. */
	for (;;) {
		struct lbd_sandbox *best = NULL;
		for (struct lbd_sandbox *sb = d->table; sb; sb = sb->next) {
			if (sb == self || !sb->live || sb == victim)
				continue;
			pthread_mutex_lock(&sb->mu);
			bool idle = sb->next_ticket == sb->serving;
			pthread_mutex_unlock(&sb->mu);
			if (idle && (!best || sb->last_used_mono < best->last_used_mono))
				best = sb;
		}
		if (!best)
			break;
		if (try_turn_locked(best)) {
			victim = best;
			break;
		}
	}
	pthread_mutex_unlock(&d->table_mu);
	if (!victim)
		return 0;
	stop_locked(d, victim, "max_running");
	atomic_fetch_add(&d->metrics.evictions, 1);
	lbd_sandbox_release(d, victim);
	return 1;
}

static int reserve_slot(struct lbd *d, const struct lbd_sandbox *self, struct lbd_fail *f)
{
	for (int attempt = 0; attempt < 8; attempt++) {
		pthread_mutex_lock(&d->table_mu);
		if (d->running < d->cfg.max_running) {
			d->running++;
			pthread_mutex_unlock(&d->table_mu);
			return 0;
		}
		pthread_mutex_unlock(&d->table_mu);
		if (!evict_one(d, self))
			break;
	}
	lbd_fail_set(f, 429, "capacity",
		     "All %u running sandboxes are busy (max_running); try again when a run finishes.",
		     d->cfg.max_running);
	return -EBUSY;
}

static void release_slot(struct lbd *d)
{
	pthread_mutex_lock(&d->table_mu);
	d->running--;
	pthread_mutex_unlock(&d->table_mu);
}

/* A sandbox is never created or replaced with a spec this host cannot run now (it cannot run sandboxes at all, or not
 * with that network tier): refused with 503 host_unavailable before anything is stopped, removed or recorded, so an
 * existing sandbox keeps its files. start_locked() asks again for one that exists (the config may have changed). */
static int check_host(const struct lbd *d, const struct lb_store_spec *spec, struct lbd_fail *f)
{
	const char *why = lbd_cannot_run(d);
	if (why) {
		lbd_fail_set(f, 503, "host_unavailable", "This host cannot run sandboxes: %s", why);
		return -ENOSYS;
	}
	why = lbd_network_unavailable(d, spec->network);
	if (why) {
		lbd_fail_set(f, 503, "host_unavailable", "Sandboxes with network `%s` cannot run here: %s.",
			     lb_tier_name(spec->network), why);
		return -ENOSYS;
	}
	return 0;
}

/* A new sandbox's spare, when lbd_sandbox_ensure() already asked for one (lbd_spares_create). */
struct spare_asked {
	bool asked;		 /* start_locked() does not ask again */
	struct lb_sandbox *live; /* the running spare the row's uid is now: NULL when none matched */
};

/* A spare that became the row's but will not start as it: stopped, and its empty storage removed (the row keeps the
 * uid, owning nothing, as a new row does). */
static void drop_spare(struct lbd *d, struct lb_sandbox *live, uint32_t host_uid)
{
	char storage[512];
	lbd_storage_path(d, host_uid, storage, sizeof(storage));
	lb_sandbox_stop(live, NULL);
	lb_sandbox_destroy_storage(storage, NULL);
}

/* A start that recorded its new row as running (lbd_new_row) and then failed: the row says stopped again. */
static void unrecord_start(struct lbd *d, const struct lbd_new_row *nr)
{
	if (nr && nr->started)
		(void)lb_store_sandbox_set_state(d->store, nr->name, LB_SANDBOX_STOPPED, NULL);
}

/* Under the turn: starts the sandbox described by row. pre (may be NULL): row's image, resolved by the caller an
 * instant ago (borrowed); NULL: resolved (and pulled if allowed) here. spare: the spare the caller made the row from
 * (owned from the call on: it becomes the sandbox, or is dropped on failure), or that it asked for in vain. nr
 * (may be NULL): row is not in the store yet, and is recorded during the start (the caller ends nr). */
static int start_locked(struct lbd *d, struct lbd_sandbox *sb, const struct lb_store_sandbox *row,
			const struct lbd_image *pre, const struct spare_asked *spare, struct lbd_new_row *nr,
			struct lbd_ensure_result *ret, struct lbd_fail *f)
{
	int r = check_host(d, &row->spec, f);
	if (r < 0) {
		if (spare->live)
			drop_spare(d, spare->live, row->host_uid);
		return r;
	}
	struct lbd_image img = { 0 };
	struct lb_error err = { 0 };
	struct lbd_image_pulled pulled = { 0 };
	const struct lbd_image *use = pre;
	if (!use) {
		/* touch: the image's last use is now, for garbage collection */
		r = lbd_image_get(d, row->spec.image, true, true, &img, &pulled, &err);
		use = &img;
	}
	if (pulled.pulled) {
		ret->image_pulled = true;
		ret->image_pull_ms += pulled.ms;
	}
	if (r < 0) {
		if (spare->live)
			drop_spare(d, spare->live, row->host_uid);
		lbd_fail_set(f, 503, "image_unavailable", "The image %s is not available here: %s", row->spec.image,
			     err.msg);
		return r;
	}
	r = reserve_slot(d, sb, f);
	if (r < 0) {
		if (spare->live)
			drop_spare(d, spare->live, row->host_uid);
		lbd_image_release(&img);
		return r;
	}
	char storage[512];
	lbd_storage_path(d, row->host_uid, storage, sizeof(storage));
	uint64_t t0 = lbd_mono_ms();
	struct lb_sandbox *live = NULL;
	char key[LBD_RUNNER_KEY_MAX];
	char lf[256];
	struct stat st;
	bool from_spare = false;
	uint32_t uid_now = row->host_uid; /* a claimed spare's uid becomes the row's */
	if (spare->live) {
		live = spare->live;
		from_spare = true;
		lbd_runner_key(row->host_uid, key);
	} else if (!spare->asked && stat(storage, &st) < 0 && errno == ENOENT) {
		/* It never had files (just created or recreated): a spare started ahead of time serves when it matches.
		 */
		uint32_t uid = 0;
		if (lbd_spares_claim(d, sb->name, row, use->digest, &live, &uid)) {
			from_spare = true;
			uid_now = uid;
			lbd_runner_key(uid, key);
		}
	}
	char digest[LB_STORE_DIGEST_MAX + 1];
	snprintf(digest, sizeof(digest), "%s", use->digest);
	if (!from_spare) {
		lbd_runner_key(row->host_uid, key);
		struct lb_sandbox_spec spec;
		lbd_runner_spec(d, &row->spec, row->host_uid, use, key, storage, &spec);
		/* a storage that does not exist yet: a filesystem mounted ahead of time, when one of its size is ready
		 */
		if (stat(storage, &st) < 0 && errno == ENOENT)
			spec.disk_ready = lbd_ready_take(d, spec.limits.disk_bytes);
		spec.ready_netns = lbd_ready_take_netns(d);
		char root[PATH_MAX];
		spec.shared_root = lbd_root_get(d, spec.rootfs, root);
		char ready_cg[LBD_READY_CG_NAME];
		if (lbd_ready_take_cgroup(d, ready_cg))
			spec.ready_cgroup = ready_cg;
		if (nr) { /* its row, recorded while the child builds the root */
			spec.while_building = lbd_new_row_while_building;
			spec.while_building_arg = nr;
		}
		r = lb_sandbox_start(&spec, &live, &err);
		lbd_root_put(d, spec.shared_root);
		bool unrecorded = nr && nr->done && nr->r < 0; /* a start that succeeds has recorded it */
		if (r < 0) {
			if (spec.ready_cgroup) { /* a start that failed before its cgroup step left the set */
				struct lb_error e1 = { 0 };
				(void)lb_ready_cgroup_remove(spec.ready_cgroup, &e1);
			}
			lbd_image_release(&img);
			release_slot(d);
			log_fields(lf, sizeof(lf), sb->name, "error=\"%s\"", err.msg);
			lb_error(lf, unrecorded ? "recording the new sandbox failed" : "starting the sandbox failed");
			/* Whatever a half-done start left behind goes now, not at the next restart; but EEXIST means a
			 * live sandbox of this name refused the start, and cleaning up would kill it. */
			struct lb_error err2 = { 0 };
			if (r != -EEXIST || unrecorded)
				lb_sandbox_cleanup(key, d->cfg.run_dir, &err2);
			if (unrecorded) {
				lbd_fail_store(f, nr->r, "Recording the sandbox", nr->err.msg);
				return nr->r;
			}
			unrecord_start(d, nr);
			lbd_fail_set(f, 503, "host_unavailable", "The sandbox could not be started: %s", err.msg);
			return r;
		}
	}
	lbd_image_release(&img);
	if (d->net) {
		/* The host side of its network: a veth, its tier's rules (or only lo for "off"). */
		int nsfd = lb_sandbox_netns_fd(live);
		struct lb_error nerr = { 0 };
		r = nsfd < 0 ? lb_error_set(&nerr, nsfd, "opening the sandbox's network namespace")
			     : lbd_network_attach(d, sb->name, nsfd, row->spec.network, &nerr);
		if (nsfd >= 0)
			close(nsfd);
		if (r < 0) {
			release_slot(d);
			if (from_spare) /* the uid is the row's now, with an empty storage that goes with the stop */
				drop_spare(d, live, uid_now);
			else
				lb_sandbox_stop(live, NULL);
			unrecord_start(d, nr);
			log_fields(lf, sizeof(lf), sb->name, "error=\"%s\"", nerr.msg);
			lb_error(lf, "attaching the sandbox's network failed");
			lbd_fail_set(f, 503, "host_unavailable", "The sandbox's network (%s) could not be set up: %s",
				     lb_tier_name(row->spec.network), nerr.msg);
			return r;
		}
	}
	pthread_rwlock_wrlock(&sb->live_lock);
	pthread_mutex_lock(&d->table_mu);
	sb->live = live;
	snprintf(sb->key, sizeof(sb->key), "%s", key);
	sb->last_used_mono = lbd_mono_ms();
	pthread_mutex_unlock(&d->table_mu);
	pthread_rwlock_unlock(&sb->live_lock);
	if (!(nr && nr->started)) /* else recorded with its row */
		lb_store_sandbox_started(d->store, sb->name, digest, lbd_now_ms(), NULL);
	log_fields(lf, sizeof(lf), sb->name, "runner=%s image=%s network=%s spare=%s duration_ms=%llu", key,
		   row->spec.image, lb_tier_name(row->spec.network), from_spare ? "yes" : "no",
		   (unsigned long long)(lbd_mono_ms() - t0));
	lb_info(lf, "sandbox started");
	return 0;
}

/* Under the turn: removes the storage of the sandbox whose row holds host_uid (and the sandbox, if running). */
static int destroy_locked(struct lbd *d, struct lbd_sandbox *sb, uint32_t host_uid, struct lbd_fail *f)
{
	stop_locked(d, sb, "delete");
	char storage[512];
	lbd_storage_path(d, host_uid, storage, sizeof(storage));
	struct lb_error err = { 0 };
	int r = lb_sandbox_destroy_storage(storage, &err);
	if (r < 0 && r != -ENOENT) {
		lbd_fail_set(f, 500, "internal", "Removing the sandbox's files failed: %s", err.msg);
		return r;
	}
	return 0;
}

static void spec_changes(const struct lb_store_sandbox *row, const struct lbd_spec_request *req, char *buf, size_t size)
{
	buf[0] = '\0';
	if (req->has_image && strcmp(row->spec.image, req->spec.image) != 0)
		snprintf(buf, size, "the image changed from %.100s to %.100s", row->spec.image, req->spec.image);
	if (req->has_network && row->spec.network != req->spec.network) {
		size_t n = strlen(buf);
		snprintf(buf + n, size - n, "%sthe network changed from %s to %s", n ? " and " : "",
			 lb_tier_name(row->spec.network), lb_tier_name(req->spec.network));
	}
}

/* A sandbox is never created or replaced for an image that is not there (after pulling it, when the config
 * allows): nothing changes, 503. On success *ret_img is the image, recorded as used now (the caller's: release). */
static int check_image(struct lbd *d, const char *image, struct lbd_ensure_result *ret, struct lbd_image *ret_img,
		       struct lbd_fail *f)
{
	struct lbd_image img;
	struct lb_error err = { 0 };
	struct lbd_image_pulled pulled = { 0 };
	int r = lbd_image_get(d, image, true, true, &img, &pulled, &err);
	if (pulled.pulled) {
		ret->image_pulled = true;
		ret->image_pull_ms += pulled.ms;
	}
	if (r < 0) {
		lbd_fail_set(f, 503, "image_unavailable", "The image %s is not available here: %s", image, err.msg);
		return r;
	}
	*ret_img = img;
	return 0;
}

static void image_releasep(struct lbd_image *img)
{
	lbd_image_release(img); /* accepts one that holds nothing */
}

int lbd_sandbox_ensure(struct lbd *d, struct lbd_sandbox *sb, const struct lbd_spec_request *req, bool start,
		       struct lbd_ensure_result *ret, struct lbd_fail *f)
{
	memset(ret, 0, sizeof(*ret));
	struct lb_store_sandbox row;
	struct lb_error err = { 0 };
	char lf[256];
	/* the image a new or recreated sandbox was checked with, handed to its start */
	__attribute__((cleanup(image_releasep))) struct lbd_image img = { 0 };
	struct spare_asked spare = { 0 };
	struct lbd_new_row nr = { 0 }; /* a new sandbox under a reserved uid: its row recorded by its start */
	int r = lb_store_sandbox_get(d->store, sb->name, &row, &err);
	if (r == -ENOENT) {
		if ((r = check_host(d, &req->spec, f)) < 0 || (r = check_image(d, req->spec.image, ret, &img, f)) < 0)
			return r;
		/* To be started: made from a ready spare of its spec when there is one, its row and the spare's
		 * hand-over in one commit; else started under a reserved uid, its row recorded during the start. */
		spare.asked = start;
		bool made =
		    start && lbd_spares_create(d, sb->name, &req->spec, img.digest, lbd_now_ms(), &row, &spare.live);
		if (!made && start)
			r = lbd_new_row_begin(d, sb->name, &req->spec, img.digest, &nr, &row, &err);
		else if (!made) {
			r = lb_store_sandbox_put(d->store, sb->name, &req->spec, NULL, lbd_now_ms(), &row, NULL, &err);
			if (r == -EUSERS && lbd_reserved_drop(d) > 0) { /* the range is full: its reservations yield */
				lb_error_clear(&err);
				r = lb_store_sandbox_put(d->store, sb->name, &req->spec, NULL, lbd_now_ms(), &row, NULL,
							 &err);
			}
		}
		if (!made) {
			if (r == -EUSERS) {
				lbd_fail_set(f, 429, "capacity",
					     "No host uid is left for a new sandbox (uid_range_count).");
				return r;
			}
			if (r < 0) {
				lbd_fail_store(f, r, "Recording the sandbox", err.msg);
				return r;
			}
			if (!nr.uid) /* lbd_new_row_begin did it */
				lbd_storage_clear_orphan(d, row.host_uid);
		}
		ret->created = true;
		log_fields(lf, sizeof(lf), sb->name, "host_uid=%u image=%s network=%s", row.host_uid, row.spec.image,
			   lb_tier_name(row.spec.network));
		lb_info(lf, "sandbox created");
	} else if (r < 0) {
		lbd_fail_store(f, r, "Reading the sandbox's state", err.msg);
		return r;
	} else {
		char why[256];
		spec_changes(&row, req, why, sizeof(why));
		if (why[0]) {
			/* Everything the new spec needs is checked before the old sandbox goes. */
			if ((r = check_host(d, &req->spec, f)) < 0 ||
			    (r = check_image(d, req->spec.image, ret, &img, f)) < 0)
				return r;
			r = destroy_locked(d, sb, row.host_uid, f);
			if (r < 0)
				return r;
			/* A fresh sandbox: the request's spec (its defaults for what it did not give). */
			r = lb_store_sandbox_recreate(d->store, sb->name, &req->spec, NULL, lbd_now_ms(), &row, &err);
			if (r < 0) {
				lbd_fail_store(f, r, "Recording the recreated sandbox", err.msg);
				return r;
			}
			snprintf(ret->recreated, sizeof(ret->recreated), "%s", why);
			atomic_fetch_add(&d->metrics.recreations, 1);
			log_fields(lf, sizeof(lf), sb->name, "reason=\"%s\"", why);
			lb_info(lf, "sandbox recreated");
		} else if (req->has_idle || req->has_keep) {
			/* Timers take effect at once; cpu, memory and disk stay as the sandbox was made. */
			struct lb_store_spec s = row.spec;
			if (req->has_idle)
				s.idle_seconds = req->spec.idle_seconds;
			if (req->has_keep)
				s.keep_seconds = req->spec.keep_seconds;
			r = lb_store_sandbox_put(d->store, sb->name, &s, row.image_digest, lbd_now_ms(), &row, NULL,
						 &err);
			if (r < 0) {
				lbd_fail_store(f, r, "Recording the sandbox's timers", err.msg);
				return r;
			}
		}
	}
	if (start && sb->live && lb_sandbox_init_exited(sb->live)) {
		/* Its init was killed from outside: nothing could run in it any more ("Opening the sandbox's root
		 * failed", every time). Stopped as by its idle timer and started again below, its files kept. */
		log_fields(lf, sizeof(lf), sb->name, NULL);
		lb_warn(lf, "the sandbox's init is gone; starting the sandbox again");
		stop_locked(d, sb, "init_gone");
	}
	if (start && !sb->live) {
		r = start_locked(d, sb, &row, img.info ? &img : NULL, &spare, nr.uid ? &nr : NULL, ret, f);
		lbd_new_row_end(&nr);
		if (r < 0)
			return r;
		ret->started = true;
	}
	return 0;
}

int lbd_sandbox_delete(struct lbd *d, struct lbd_sandbox *sb, struct lbd_fail *f)
{
	struct lb_store_sandbox row;
	struct lb_error err = { 0 };
	int r = lb_store_sandbox_get(d->store, sb->name, &row, &err);
	if (r == -ENOENT) {
		lbd_fail_set(f, 404, "sandbox_not_found", "There is no sandbox named %s.", sb->name);
		return r;
	}
	if (r < 0) {
		lbd_fail_store(f, r, "Reading the sandbox's state", err.msg);
		return r;
	}
	r = destroy_locked(d, sb, row.host_uid, f);
	if (r < 0)
		return r;
	r = lb_store_sandbox_delete(d->store, sb->name, &err);
	if (r < 0 && r != -ENOENT) {
		lbd_fail_store(f, r, "Removing the sandbox's record", err.msg);
		return r;
	}
	char lf[128];
	log_fields(lf, sizeof(lf), sb->name, NULL);
	lb_info(lf, "sandbox deleted");
	return 0;
}

void lbd_sandbox_note_use(struct lbd *d, struct lbd_sandbox *sb)
{
	pthread_mutex_lock(&d->table_mu);
	sb->last_used_mono = lbd_mono_ms();
	pthread_mutex_unlock(&d->table_mu);
}

void lbd_sandbox_touch(struct lbd *d, struct lbd_sandbox *sb)
{
	lbd_sandbox_note_use(d, sb);
	lb_store_sandbox_touch(d->store, sb->name, lbd_now_ms(), NULL);
}

/* ---- file transfer ---- */

/* Under the turn, the sandbox stopped: its storage opened from the host without a start (runner/storage.c). Not
 * for a sandbox that has never had files while a spare is ready: starting it takes the spare, which costs less than
 * a later cold start. 1: opened into pin; 0: start it instead. */
static int pin_stopped(struct lbd *d, struct lbd_sandbox *sb, const struct lb_store_sandbox *row, struct lbd_pin *pin)
{
	char storage[512];
	lbd_storage_path(d, row->host_uid, storage, sizeof(storage));
	struct stat st;
	if (stat(storage, &st) < 0 && errno == ENOENT) {
		uint32_t ready = 0, target = 0;
		lbd_spares_counts(d, &ready, &target);
		if (ready > 0)
			return 0;
	}
	struct lb_storage_spec spec = {
		.storage = storage,
		.disk_pool = d->disk_pool,
		.disk_bytes = row->spec.disk_bytes ? row->spec.disk_bytes : d->cfg.default_disk_bytes,
		.host_uid = row->host_uid,
		.host_gid = row->host_gid,
	};
	struct lb_error err = { 0 };
	if (lb_storage_open(&spec, &pin->storage, &err) < 0) {
		char lf[256];
		log_fields(lf, sizeof(lf), sb->name, "error=\"%s\"", err.msg);
		lb_warn(lf, "opening a stopped sandbox's storage failed; starting it instead");
		return 0;
	}
	*pin = (struct lbd_pin){ .sb = sb,
				 .offline = true,
				 .storage = pin->storage,
				 .root = pin->storage.root,
				 .uid = row->host_uid,
				 .gid = row->host_gid };
	lbd_sandbox_touch(d, sb);
	return 1;
}

/* The live path: the running sandbox's storage mount, pinned by its read lock. 1: pinned; 0: not running. */
static int pin_live(struct lbd *d, const char *name, const struct lb_store_sandbox *row, struct lbd_pin *pin,
		    struct lbd_fail *f)
{
	pthread_mutex_lock(&d->table_mu);
	struct lbd_sandbox *sb = get_ref_locked(d, name, false);
	pthread_mutex_unlock(&d->table_mu);
	if (!sb)
		return 0;
	pthread_rwlock_rdlock(&sb->live_lock);
	if (!sb->live) {
		pthread_rwlock_unlock(&sb->live_lock);
		put_ref(d, sb);
		return 0;
	}
	int fd = open(lb_sandbox_storage_mount(sb->live), O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;
		pthread_rwlock_unlock(&sb->live_lock);
		put_ref(d, sb);
		lbd_fail_set(f, 500, "internal", "Opening the sandbox's storage failed: %s", strerror(e));
		return -e;
	}
	/* Pinned: the read lock and the reference stay until lbd_storage_unpin(). */
	*pin = (struct lbd_pin){ .sb = sb, .root = fd, .uid = row->host_uid, .gid = row->host_gid };
	return 1;
}

int lbd_storage_pin(struct lbd *d, const char *name, bool create, struct lbd_pin *pin, struct lbd_fail *f)
{
	*pin = (struct lbd_pin){ .root = -1, .storage = { .root = -1, .lock = -1 } };
	for (int attempt = 0; attempt < 4; attempt++) {
		struct lb_store_sandbox row;
		struct lb_error err = { 0 };
		int r = lb_store_sandbox_get(d->store, name, &row, &err);
		if (r == -ENOENT && !create) {
			lbd_fail_set(f, 404, "sandbox_not_found", "There is no sandbox named %s.", name);
			return r;
		}
		if (r < 0 && r != -ENOENT) {
			lbd_fail_store(f, r, "Reading the sandbox's state", err.msg);
			return r;
		}
		if (r == 0 && (r = pin_live(d, name, &row, pin, f)) != 0)
			return r < 0 ? r : 0;
		/* Stopped (or absent and create is allowed): under its turn, so no start mounts the storage meanwhile,
		 * open it from the host, or start it; then look again. */
		struct lbd_sandbox *sb = lbd_sandbox_acquire(d, name);
		if (!sb) {
			lbd_fail_set(f, 500, "internal", "Out of memory.");
			return -ENOMEM;
		}
		struct lbd_spec_request req;
		lbd_spec_defaults(&d->cfg, &req);
		struct lbd_ensure_result er;
		r = 0;
		if (!sb->live) {
			/* the row as it is now, under the turn (made with the defaults when it is new) */
			if ((r = lbd_sandbox_ensure(d, sb, &req, false, &er, f)) == 0 &&
			    (r = lb_store_sandbox_get(d->store, name, &row, &err)) < 0)
				lbd_fail_store(f, r, "Reading the sandbox's state", err.msg);
			if (r == 0 && pin_stopped(d, sb, &row, pin) == 1)
				return 0; /* the turn stays taken until lbd_storage_unpin() */
			if (r == 0)
				r = lbd_sandbox_ensure(d, sb, &req, true, &er, f);
		}
		if (r == 0)
			lbd_sandbox_touch(d, sb);
		lbd_sandbox_release(d, sb);
		if (r < 0)
			return r;
	}
	lbd_fail_set(f, 503, "busy", "The sandbox %s kept stopping while its files were being reached; try again.",
		     name);
	return -EAGAIN;
}

/* What closing a stopped sandbox's storage leaves to do, off the request's path: the filesystem's shutdown (the
 * storage lock is held until it is done, so a start of the sandbox waits for it there) and, for a new storage, the
 * pool's refill (a fork of this large process). If lensboxd dies meanwhile, the kernel closes both descriptors and
 * the shutdown happens all the same. */
struct closing {
	struct lb_storage storage;
	bool fresh;
	uint64_t disk_bytes;
	char pool[300];
};

static void *close_storage(void *arg)
{
	struct closing *c = arg;
	lb_storage_close(&c->storage);
	if (c->fresh)
		(void)lb_sandbox_refill_pool(c->pool, c->disk_bytes, true); /* the refiller ends with lensboxd */
	free(c);
	return NULL;
}

void lbd_storage_unpin(struct lbd *d, struct lbd_pin *pin)
{
	if (!pin->sb)
		return;
	if (pin->offline) {
		struct closing *c = malloc(sizeof(*c));
		pthread_t t;
		pthread_attr_t attr;
		bool handed = false;
		if (c) {
			*c = (struct closing){ .storage = pin->storage,
					       .fresh = pin->storage.fresh,
					       .disk_bytes = pin->disk_bytes };
			snprintf(c->pool, sizeof(c->pool), "%s", d->disk_pool);
			if (pthread_attr_init(&attr) == 0) {
				(void)pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
				handed = pthread_create(&t, &attr, close_storage, c) == 0;
				pthread_attr_destroy(&attr);
			}
			if (!handed)
				close_storage(c); /* no thread: the request waits for the shutdown */
		} else {
			lb_storage_close(&pin->storage);
		}
		lbd_sandbox_release(d, pin->sb);
	} else {
		close(pin->root);
		pthread_rwlock_unlock(&pin->sb->live_lock);
		put_ref(d, pin->sb);
	}
	*pin = (struct lbd_pin){ .root = -1, .storage = { .root = -1, .lock = -1 } };
}

/* ---- timers ---- */

void lbd_sandboxes_tick(struct lbd *d)
{
	int64_t now = lbd_now_ms();
	struct lb_store_sandbox *list = NULL;
	size_t n = 0;
	char lf[160];
	if (lb_store_sandbox_due_stop(d->store, now, &list, &n, NULL) == 0) {
		for (size_t i = 0; i < n; i++) {
			pthread_mutex_lock(&d->table_mu);
			struct lbd_sandbox *sb = find_locked(d, list[i].name);
			bool got = sb && try_turn_locked(sb);
			pthread_mutex_unlock(&d->table_mu);
			if (!sb) {
				/* Marked running with no live sandbox here: only a crash does that; fix the record. */
				lb_store_sandbox_set_state(d->store, list[i].name, LB_SANDBOX_STOPPED, NULL);
				continue;
			}
			if (!got)
				continue; /* in use: a run will touch it */
			struct lb_store_sandbox row;
			if (lb_store_sandbox_get(d->store, sb->name, &row, NULL) == 0 &&
			    lb_store_stop_at_ms(&row) <= lbd_now_ms() && sb->live) {
				stop_locked(d, sb, "idle");
				atomic_fetch_add(&d->metrics.idle_stops, 1);
			}
			lbd_sandbox_release(d, sb);
		}
		free(list);
	}
	list = NULL;
	n = 0;
	if (lb_store_sandbox_due_delete(d->store, now, &list, &n, NULL) == 0) {
		for (size_t i = 0; i < n; i++) {
			pthread_mutex_lock(&d->table_mu);
			struct lbd_sandbox *sb = get_ref_locked(d, list[i].name, true);
			bool got = sb && try_turn_locked(sb);
			pthread_mutex_unlock(&d->table_mu);
			if (!sb)
				continue;
			if (got) {
				struct lb_store_sandbox row;
				struct lbd_fail f = { 0 };
				if (lb_store_sandbox_get(d->store, sb->name, &row, NULL) == 0 &&
				    lb_store_delete_at_ms(&row) <= lbd_now_ms()) {
					if (lbd_sandbox_delete(d, sb, &f) == 0) {
						atomic_fetch_add(&d->metrics.keep_deletions, 1);
						log_fields(lf, sizeof(lf), sb->name, "reason=keep_hours");
						lb_info(lf, "unused sandbox deleted");
					} else {
						log_fields(lf, sizeof(lf), sb->name, "error=\"%s\"", f.message);
						lb_error(lf, "deleting an unused sandbox failed");
					}
				}
				lbd_sandbox_release(d, sb);
			}
			put_ref(d, sb);
		}
		free(list);
	}
}

/* ---- start-up and shutdown ---- */

int lbd_sandboxes_init(struct lbd *d, struct lb_error *err)
{
	pthread_mutex_init(&d->table_mu, NULL);
	char dir[512];
	snprintf(dir, sizeof(dir), "%s/sandboxes", d->cfg.state_dir);
	/* Root-only: storage directories hold each sandbox's disk image. */
	if (mkdir(dir, 0700) < 0 && errno != EEXIST)
		return lb_error_set(err, errno, "creating %s", dir);
	/* Downloads are staged here (unlinked O_TMPFILE files), root-only. */
	snprintf(dir, sizeof(dir), "%s/tmp", d->cfg.state_dir);
	if (mkdir(dir, 0700) < 0 && errno != EEXIST)
		return lb_error_set(err, errno, "creating %s", dir);
	return 0;
}

int lbd_reconcile(struct lbd *d, struct lb_error *err)
{
	struct lb_store_sandbox *list = NULL;
	size_t n = 0;
	int r = lb_store_sandbox_list(d->store, LB_STORE_ALL, LB_STORE_BY_NAME, &list, &n, err);
	if (r < 0)
		return lb_error_wrap(err, "listing sandboxes to reconcile");
	uint64_t t0 = lbd_mono_ms();
	unsigned failed = 0;
	for (size_t i = 0; i < n; i++) {
		struct lb_error e = { 0 };
		char key[LBD_RUNNER_KEY_MAX];
		lbd_runner_key(list[i].host_uid, key);
		/* Safe: cleanup acts only on this sandbox's own cgroup, mount point and loop device, by its runner key.
		 */
		if (lb_sandbox_cleanup(key, d->cfg.run_dir, &e) < 0) {
			char lf[160];
			log_fields(lf, sizeof(lf), list[i].name, "error=\"%s\"", e.msg);
			lb_error(lf, "reconciling the sandbox failed");
			failed++;
		}
	}
	free(list);
	uint64_t changed = 0;
	r = lb_store_sandbox_mark_all_stopped(d->store, &changed, err);
	if (r < 0)
		return lb_error_wrap(err, "marking sandboxes stopped");
	char lf[160];
	snprintf(lf, sizeof(lf), "sandboxes=%zu were_running=%llu failed=%u duration_ms=%llu", n,
		 (unsigned long long)changed, failed, (unsigned long long)(lbd_mono_ms() - t0));
	lb_info(lf, "reconciled with the kernel");
	return 0;
}

void lbd_sandboxes_shutdown(struct lbd *d)
{
	/* Stops every running sandbox; connection threads are gone by now (http stopped first). */
	for (;;) {
		pthread_mutex_lock(&d->table_mu);
		struct lbd_sandbox *sb = d->table;
		while (sb && !sb->live)
			sb = sb->next;
		bool got = sb && try_turn_locked(sb);
		pthread_mutex_unlock(&d->table_mu);
		if (!sb)
			break;
		if (!got)
			break; /* someone still holds it: leave it to the next start's reconciliation */
		stop_locked(d, sb, "shutdown");
		lbd_sandbox_release(d, sb);
	}
}

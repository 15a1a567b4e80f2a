/*
 * ready.c — what a start needs that does not depend on the request, made ahead of time:
 *  - new storages' filesystems, so that a new sandbox that no spare serves (spares off or used up, another spec than
 *    the default) does not attach a loop device and mount ext4 during its start: the start moves a ready mount into
 *    place instead (runner/disk_ready.c; ~1.2-1.5 ms less on this 2-core host);
 *  - for every start a request makes (a new sandbox or a stopped one's restart): a network namespace with lo up
 *    (runner/netns.c), which its init child is born in instead of making its own (~0.6 ms less), and on cgroup v1
 *    the cgroup directories, renamed to the sandbox's name instead of made (runner/cgroup_ready.c, ~0.3 ms less).
 *
 * Runs in lensboxd's core (root): one thread of its own keeps cfg.ready_storages filesystems of the default disk
 * size and cfg.ready_starts namespaces and cgroup sets ready; connection threads take them (lbd_ready_take, for a
 * start whose storage does not exist yet; lbd_ready_take_netns, lbd_ready_take_cgroup). All are request-independent
 * and nobody's until a start takes one:
 *  - a ready filesystem is an empty ext4 image from the disk pool, mounted nowhere (a detached mount only its
 *    descriptor reaches), root's until the start gives it to the sandbox's uid;
 *  - a ready network namespace is as empty as one the start would make (lo, no route out), owned by the host's user
 *    namespace (netns.c says why that takes nothing from the isolation), held only by its descriptor;
 *  - a ready cgroup set is empty directories named r<uid_range_start>-<n> (a name no sandbox has: theirs are
 *    u<uid>), with no limit until the start renames them and writes its sandbox's.
 * The rest (the other namespaces, the root, Landlock, seccomp) is built by the start as before. Nothing is handed out
 * twice: a take removes it from the list under the lock.
 *
 * After a take the thread waits READY_SETTLE_MS (the start and its first run go first), then makes the next ones
 * (a storage ~1.5 ms: a rename, a loop attach and a mount, then the pool's refill for the image it used; a namespace
 * ~0.7 ms; a cgroup set ~0.4 ms). When the pool has no image (a new host before its first storage, a burst), it tries
 * again at the next tick. If lensboxd dies, the kernel shuts every ready filesystem down and ends every namespace
 * with its descriptors, the pool's next refill gives the images back (disk_pool.c), and the next lensboxd's start
 * sweeps the empty cgroup sets away.
 *
 * Lock order: mu only guards the list; the runner is never called under it.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "lb/log.h"
#include "core.h"

/* After a take, the next one is made this long later, so it does not compete with the start and run that took. */
#define READY_SETTLE_MS 200
/* How often the thread looks when the pool had no image, or nothing was taken. */
#define READY_CHECK_MS 2000

struct lbd_ready {
	pthread_mutex_t mu;
	pthread_cond_t cv; /* signalled on a take and at stop */
	struct lb_disk_ready *list[LBD_READY_MAX];
	uint32_t n;
	int netns[LBD_READY_MAX]; /* descriptors from lb_netns_make */
	uint32_t n_netns;
	bool netns_off;					/* making one failed: this host cannot, starts make their own */
	char cgroups[LBD_READY_MAX][LBD_READY_CG_NAME]; /* names given to lb_ready_cgroup_make */
	uint32_t n_cg;
	uint32_t cg_seq;		       /* the next name's number: names are never reused */
	char cg_prefix[LBD_READY_CG_NAME / 2]; /* r<uid_range_start>- */
	bool cg_off;			       /* not cgroup v1, or making a set failed: starts make their own */
	uint64_t bytes;			       /* the default disk size: the only size kept ready */
	uint64_t taken_mono;
	bool stop;
	pthread_t thread;
	bool thread_started;
};

/* One network namespace more, made on this thread (which lb_netns_make leaves where it was); called unlocked. A
 * failure means this host cannot make them here (the starts' own attempts say why, if they fail too): no more. */
static void make_netns(struct lbd_ready *s)
{
	struct lb_error err = { 0 };
	int fd = lb_netns_make(&err);
	if (fd < 0) {
		char lf[600];
		snprintf(lf, sizeof(lf), "error=\"%s\"", err.msg);
		lb_warn(lf, "making a network namespace ahead failed; starts make their own");
	}
	pthread_mutex_lock(&s->mu);
	if (fd < 0) {
		s->netns_off = true;
	} else if (s->n_netns < LBD_READY_MAX && !s->stop) {
		s->netns[s->n_netns++] = fd;
		fd = -1;
	}
	pthread_mutex_unlock(&s->mu);
	if (fd >= 0)
		close(fd);
}

/* One cgroup set more (v1), as make_netns. -ENOTSUP is a host with cgroup v2, which renames none: no warning. */
static void make_cgroup(struct lbd_ready *s)
{
	char name[LBD_READY_CG_NAME];
	pthread_mutex_lock(&s->mu);
	snprintf(name, sizeof(name), "%s%u", s->cg_prefix, (unsigned)s->cg_seq++);
	pthread_mutex_unlock(&s->mu);
	struct lb_error err = { 0 };
	int r = lb_ready_cgroup_make(name, &err);
	if (r < 0 && r != -ENOTSUP) {
		char lf[600];
		snprintf(lf, sizeof(lf), "error=\"%s\"", err.msg);
		lb_warn(lf, "making cgroup directories ahead failed; starts make their own");
		struct lb_error e2 = { 0 };
		(void)lb_ready_cgroup_remove(name, &e2); /* what a half-made set left */
	}
	pthread_mutex_lock(&s->mu);
	bool keep = r == 0 && s->n_cg < LBD_READY_MAX && !s->stop;
	if (keep)
		memcpy(s->cgroups[s->n_cg++], name, sizeof(name));
	else if (r < 0)
		s->cg_off = true;
	pthread_mutex_unlock(&s->mu);
	if (r == 0 && !keep) {
		struct lb_error e3 = { 0 };
		(void)lb_ready_cgroup_remove(name, &e3);
	}
}

static void *ready_main(void *arg)
{
	struct lbd *d = arg;
	struct lbd_ready *s = d->ready;
	bool warned = false;
	pthread_mutex_lock(&s->mu);
	while (!s->stop) {
		uint64_t now = lbd_mono_ms();
		if (now - s->taken_mono < READY_SETTLE_MS) {
			lbd_cond_wait_ms(&s->cv, &s->mu, READY_SETTLE_MS - (now - s->taken_mono));
			continue;
		}
		if (!s->netns_off && s->n_netns < d->cfg.ready_starts) {
			pthread_mutex_unlock(&s->mu);
			make_netns(s);
			pthread_mutex_lock(&s->mu);
			continue;
		}
		if (!s->cg_off && s->n_cg < d->cfg.ready_starts) {
			pthread_mutex_unlock(&s->mu);
			make_cgroup(s);
			pthread_mutex_lock(&s->mu);
			continue;
		}
		if (s->n >= d->cfg.ready_storages) {
			lbd_cond_wait_ms(&s->cv, &s->mu, READY_CHECK_MS);
			continue;
		}
		pthread_mutex_unlock(&s->mu);
		struct lb_disk_ready *r = NULL;
		struct lb_error err = { 0 };
		int e = lb_disk_ready_make(d->disk_pool, s->bytes, &r, &err);
		/* The pool lost an image: its refiller tops it up, off every request's path. A pool with none (a new
		 * host, a burst) is not filled from here: the first new storage starts that, as without this thread,
		 * so a daemon that just started does not format images while its first requests are served. */
		if (e == 0)
			(void)lb_sandbox_refill_pool(d->disk_pool, s->bytes, true);
		if (e < 0 && e != -ENOENT && !warned) {
			char lf[600];
			snprintf(lf, sizeof(lf), "error=\"%s\"", err.msg);
			lb_warn(lf, "making a ready storage failed; new sandboxes mount theirs during the start");
		}
		warned = e < 0 && e != -ENOENT;
		pthread_mutex_lock(&s->mu);
		if (r && s->n < LBD_READY_MAX && !s->stop) {
			s->list[s->n++] = r;
			continue;
		}
		if (r) {
			pthread_mutex_unlock(&s->mu);
			lb_disk_ready_free(r);
			pthread_mutex_lock(&s->mu);
		}
		if (e < 0)
			lbd_cond_wait_ms(&s->cv, &s->mu, READY_CHECK_MS);
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

int lbd_ready_start(struct lbd *d, struct lb_error *err)
{
	struct lbd_ready *s = calloc(1, sizeof(*s));
	if (!s)
		return lb_error_setx(err, ENOMEM, "out of memory");
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	s->bytes = d->cfg.default_disk_bytes;
	snprintf(s->cg_prefix, sizeof(s->cg_prefix), "r%u-", (unsigned)d->cfg.uid_range_start);
	d->ready = s;
	/* Sets an earlier instance of this daemon (this uid range: ours alone on the host) left when it died. */
	struct lb_error serr = { 0 };
	if (lb_ready_cgroup_sweep(s->cg_prefix, &serr) < 0) {
		char lf[600];
		snprintf(lf, sizeof(lf), "error=\"%s\"", serr.msg);
		lb_warn(lf, "removing cgroup directories a dead lensboxd made ahead failed");
	}
	if ((d->cfg.ready_storages == 0 && d->cfg.ready_starts == 0) || lbd_cannot_run(d))
		return 0;
	int r = pthread_create(&s->thread, NULL, ready_main, d);
	if (r != 0)
		return lb_error_set(err, r, "starting the ready storages' thread");
	s->thread_started = true;
	return 0;
}

void lbd_ready_stop(struct lbd *d)
{
	struct lbd_ready *s = d->ready;
	if (!s)
		return;
	pthread_mutex_lock(&s->mu);
	s->stop = true;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
	if (s->thread_started)
		pthread_join(s->thread, NULL);
	for (uint32_t i = 0; i < s->n; i++)
		lb_disk_ready_free(s->list[i]); /* their images go back to the pool */
	for (uint32_t i = 0; i < s->n_netns; i++)
		close(s->netns[i]); /* a namespace nothing else holds ends with its last descriptor */
	for (uint32_t i = 0; i < s->n_cg; i++) {
		struct lb_error e = { 0 };
		(void)lb_ready_cgroup_remove(s->cgroups[i], &e); /* empty: nothing ever joined them */
	}
	d->ready = NULL;
	pthread_cond_destroy(&s->cv);
	pthread_mutex_destroy(&s->mu);
	free(s);
}

struct lb_disk_ready *lbd_ready_take(struct lbd *d, uint64_t disk_bytes)
{
	struct lbd_ready *s = d->ready;
	if (!s || disk_bytes != s->bytes)
		return NULL;
	struct lb_disk_ready *r = NULL;
	pthread_mutex_lock(&s->mu);
	if (s->n > 0) {
		r = s->list[--s->n];
		s->taken_mono = lbd_mono_ms();
		pthread_cond_signal(&s->cv);
	}
	pthread_mutex_unlock(&s->mu);
	return r;
}

int lbd_ready_take_netns(struct lbd *d)
{
	struct lbd_ready *s = d->ready;
	if (!s)
		return 0;
	int fd = 0;
	pthread_mutex_lock(&s->mu);
	if (s->n_netns > 0) {
		fd = s->netns[--s->n_netns];
		s->taken_mono = lbd_mono_ms();
		pthread_cond_signal(&s->cv);
	}
	pthread_mutex_unlock(&s->mu);
	return fd;
}

bool lbd_ready_take_cgroup(struct lbd *d, char name[LBD_READY_CG_NAME])
{
	struct lbd_ready *s = d->ready;
	if (!s)
		return false;
	bool took = false;
	pthread_mutex_lock(&s->mu);
	if (s->n_cg > 0) {
		memcpy(name, s->cgroups[--s->n_cg], LBD_READY_CG_NAME);
		s->taken_mono = lbd_mono_ms();
		pthread_cond_signal(&s->cv);
		took = true;
	}
	pthread_mutex_unlock(&s->mu);
	return took;
}

void lbd_ready_counts(struct lbd *d, struct lbd_ready_counts *ret)
{
	struct lbd_ready *s = d->ready;
	*ret =
	    (struct lbd_ready_counts){ .storages_target = d->cfg.ready_storages, .starts_target = d->cfg.ready_starts };
	if (!s)
		return;
	pthread_mutex_lock(&s->mu);
	ret->storages = s->n;
	ret->netns = s->n_netns;
	ret->cgroups = s->n_cg;
	ret->cgroups_made = !s->cg_off;
	pthread_mutex_unlock(&s->mu);
}

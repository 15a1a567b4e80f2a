/*
 * ready.c — what a start needs that does not depend on the request, made ahead of time:
 *  - new storages' filesystems, so that a new sandbox that no spare serves (spares off or used up, another spec than
 *    the default) does not attach a loop device and mount ext4 during its start: the start moves a ready mount into
 *    place instead (runner/disk_ready.c; ~1.2-1.5 ms less on this 2-core host);
 *  - network namespaces with lo up (runner/netns.c), for every start a request makes (a new sandbox or a stopped
 *    one's restart): its init child is born in one instead of making its own (~0.7 ms less).
 *
 * Runs in lensboxd's core (root): one thread of its own keeps cfg.ready_storages filesystems of the default disk
 * size and cfg.ready_network_namespaces namespaces ready; connection threads take them (lbd_ready_take, for a start
 * whose storage does not exist yet; lbd_ready_take_netns). A ready filesystem is request-independent: an empty ext4
 * image from the disk pool, mounted nowhere (a detached mount only its descriptor reaches), root's until the start
 * gives it to the sandbox's uid. A ready network namespace is as empty as one the start would make (lo, no route
 * out), owned by the host's user namespace (netns.c says why that takes nothing from the isolation), held only by
 * its descriptor. Nothing of either is a sandbox's until a start takes it: cgroups, the other namespaces, the root,
 * Landlock and seccomp are all built by that start as before, and a namespace is never handed out twice.
 *
 * After a take the thread waits READY_SETTLE_MS (the start and its first run go first), then makes the next one
 * (~1.5 ms: a rename, a loop attach and a mount) and starts the pool's refill for the image it used. When the pool
 * has no image (a new host before its first storage, a burst), it tries again at the next tick. If lensboxd dies, the
 * kernel shuts every ready filesystem down with its descriptors, and the pool's next refill gives the images back
 * (disk_pool.c).
 *
 * Lock order: mu only guards the list; the runner is never called under it.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
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
	bool netns_off; /* making one failed: this host cannot, starts make their own */
	uint64_t bytes; /* the default disk size: the only size kept ready */
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
		if (!s->netns_off && s->n_netns < d->cfg.ready_network_namespaces) {
			pthread_mutex_unlock(&s->mu);
			make_netns(s);
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
	d->ready = s;
	if ((d->cfg.ready_storages == 0 && d->cfg.ready_network_namespaces == 0) || lbd_cannot_run(d))
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

void lbd_ready_counts(struct lbd *d, uint32_t *ret_ready, uint32_t *ret_target, uint32_t *ret_netns,
		      uint32_t *ret_netns_target)
{
	struct lbd_ready *s = d->ready;
	*ret_ready = *ret_netns = 0;
	*ret_target = d->cfg.ready_storages;
	*ret_netns_target = d->cfg.ready_network_namespaces;
	if (!s)
		return;
	pthread_mutex_lock(&s->mu);
	*ret_ready = s->n;
	*ret_netns = s->n_netns;
	if (s->netns_off)
		*ret_netns_target = 0;
	pthread_mutex_unlock(&s->mu);
}

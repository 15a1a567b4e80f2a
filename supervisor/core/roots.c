/*
 * roots.c — the images' shared roots (runner/root_share.c): one per image that sandboxes start from, made at the
 * first start of that image and kept while lensboxd runs, so every sandbox of an image binds the same read-only
 * overlay and its first run finds the overlay's caches warm (a new overlay per sandbox cost python3's first start
 * ~0.3 ms of cold lookups).
 *
 * Runs in lensboxd's core (root), on the threads that start sandboxes (connection threads, the spares' thread).
 * Roots live at <run_dir>/roots/<n>, n a number never reused while lensboxd runs. A root whose image directory is
 * gone or is another directory (removed, then imported again) is detached and made again at its next use; after an
 * image is removed through the API its root is detached at once. At most LBD_ROOTS_MAX are kept: the least recently
 * used that no start is using goes first (all in use: the start makes its own). A root is never removed under a
 * start that was given it (lbd_root_get to lbd_root_put): a stale one waits for its last start. Detaching never
 * disturbs a running sandbox, which holds its own bind in its own namespace.
 * lensboxd's start sweeps what a killed lensboxd left there; its stop detaches them all.
 *
 * A root that cannot be made is not an error: the start then makes one of its own (as lensbox-runner does) and the
 * reason is logged once per image.
 *
 * Lock order: mu is held while a root is made (~0.3 ms, once per image), never with another lock of ours.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "lb/log.h"
#include "core.h"

struct lbd_root {
	char rootfs[PATH_MAX]; /* the image directory it was made from */
	dev_t dev;	       /* and that directory's identity then */
	ino_t ino;
	char dir[PATH_MAX];
	uint64_t used;	 /* the roots' clock at its last use */
	uint32_t starts; /* starts given it and not yet done (lbd_root_put): it is not removed under them */
	bool failed;	 /* making it failed: starts of this image make their own, without asking again */
	bool stale;	 /* to be removed once its starts are done; no start is given it any more */
};

struct lbd_roots {
	pthread_mutex_t mu;
	struct lbd_root list[LBD_ROOTS_MAX];
	uint32_t n;
	uint64_t seq;		    /* the next root's number */
	uint64_t clock;		    /* counts uses, for the least recently used */
	char parent[PATH_MAX - 32]; /* room in a root's dir for /<n> */
};

/* Removes entry i now, or marks it stale when starts still use it (the last lbd_root_put removes it). Under mu. */
static void drop_at(struct lbd_roots *rs, uint32_t i)
{
	if (rs->list[i].starts > 0) {
		rs->list[i].stale = true;
		return;
	}
	struct lb_error err = { 0 };
	if (!rs->list[i].failed && lb_shared_root_remove(rs->list[i].dir, &err) < 0)
		lb_warn(NULL, "removing the shared root %s: %s", rs->list[i].dir, err.msg);
	rs->list[i] = rs->list[--rs->n];
}

int lbd_roots_open(struct lbd *d, struct lb_error *err)
{
	struct lbd_roots *rs = calloc(1, sizeof(*rs));
	if (!rs)
		return lb_error_set(err, ENOMEM, "allocating the shared roots");
	pthread_mutex_init(&rs->mu, NULL);
	if ((size_t)snprintf(rs->parent, sizeof(rs->parent), "%s/roots", d->cfg.run_dir) >= sizeof(rs->parent)) {
		free(rs);
		return lb_error_setx(err, ENAMETOOLONG, "run_dir is too long for the shared roots");
	}
	/* What a killed lensboxd left: nothing runs on it that does not hold its own bind. */
	int r = lb_shared_root_sweep(rs->parent, err);
	if (r == 0 && mkdir(rs->parent, 0700) < 0 && errno != EEXIST)
		r = lb_error_set(err, errno, "creating %s", rs->parent);
	if (r < 0) {
		free(rs);
		return r;
	}
	d->roots = rs;
	return 0;
}

void lbd_roots_close(struct lbd *d)
{
	struct lbd_roots *rs = d->roots;
	if (!rs)
		return;
	while (rs->n) {
		rs->list[rs->n - 1].starts = 0; /* no start runs any more: the API and the spares are stopped */
		drop_at(rs, rs->n - 1);
	}
	pthread_mutex_destroy(&rs->mu);
	free(rs);
	d->roots = NULL;
}

/* The entry of rootfs, or -1; a stale one (its directory gone or replaced) is dropped first. Under mu. */
static int find_locked(struct lbd_roots *rs, const char *rootfs, const struct stat *st)
{
	for (uint32_t i = 0; i < rs->n; i++) {
		if (rs->list[i].stale || strcmp(rs->list[i].rootfs, rootfs) != 0)
			continue;
		if (st && rs->list[i].dev == st->st_dev && rs->list[i].ino == st->st_ino)
			return (int)i;
		drop_at(rs, i);
		return -1;
	}
	return -1;
}

const char *lbd_root_get(struct lbd *d, const char *rootfs, char buf[PATH_MAX])
{
	struct lbd_roots *rs = d->roots;
	struct stat st;
	if (!rs || !rootfs || strlen(rootfs) >= PATH_MAX || stat(rootfs, &st) < 0)
		return NULL; /* the start says what is wrong with the image */
	const char *ret = NULL;
	pthread_mutex_lock(&rs->mu);
	int i = find_locked(rs, rootfs, &st);
	if (i < 0 && rs->n == LBD_ROOTS_MAX) {
		/* the least recently used that no start is using; none: this start makes its own root */
		int lru = -1;
		for (uint32_t k = 0; k < rs->n; k++)
			if (rs->list[k].starts == 0 && (lru < 0 || rs->list[k].used < rs->list[lru].used))
				lru = (int)k;
		if (lru >= 0)
			drop_at(rs, (uint32_t)lru);
		if (rs->n == LBD_ROOTS_MAX) {
			pthread_mutex_unlock(&rs->mu);
			return NULL;
		}
	}
	if (i < 0) {
		struct lbd_root *e = &rs->list[rs->n];
		memset(e, 0, sizeof(*e));
		snprintf(e->rootfs, sizeof(e->rootfs), "%s", rootfs);
		snprintf(e->dir, sizeof(e->dir), "%s/%llu", rs->parent, (unsigned long long)rs->seq++);
		e->dev = st.st_dev;
		e->ino = st.st_ino;
		struct lb_error err = { 0 };
		if (lb_shared_root_make(rootfs, e->dir, &err) < 0) {
			e->failed = true;
			lb_warn(NULL, "sandboxes of the image at %s get a root of their own: %s", rootfs, err.msg);
		}
		i = (int)rs->n++;
	}
	struct lbd_root *e = &rs->list[i];
	e->used = ++rs->clock;
	if (!e->failed) {
		e->starts++;
		snprintf(buf, PATH_MAX, "%s", e->dir);
		ret = buf;
	}
	pthread_mutex_unlock(&rs->mu);
	return ret;
}

void lbd_root_put(struct lbd *d, const char *dir)
{
	struct lbd_roots *rs = d->roots;
	if (!rs || !dir)
		return;
	pthread_mutex_lock(&rs->mu);
	for (uint32_t i = 0; i < rs->n; i++)
		if (strcmp(rs->list[i].dir, dir) == 0) {
			if (rs->list[i].starts > 0)
				rs->list[i].starts--;
			if (rs->list[i].stale)
				drop_at(rs, i);
			break;
		}
	pthread_mutex_unlock(&rs->mu);
}

void lbd_roots_prune(struct lbd *d)
{
	struct lbd_roots *rs = d->roots;
	if (!rs)
		return;
	pthread_mutex_lock(&rs->mu);
	for (uint32_t i = rs->n; i-- > 0;) {
		struct stat st;
		if (!rs->list[i].stale &&
		    (stat(rs->list[i].rootfs, &st) < 0 || st.st_dev != rs->list[i].dev || st.st_ino != rs->list[i].ino))
			drop_at(rs, i);
	}
	pthread_mutex_unlock(&rs->mu);
}

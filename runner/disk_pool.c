/*
 * disk_pool.c — storage images formatted ahead of time, so a new sandbox's first start does not wait for mke2fs.
 *
 * Runs in the caller (root, host mount namespace: lensboxd with many threads, or lensbox-runner); the refill itself
 * runs in one detached refiller process per refill (init/lensbox-diskhelper.c, started by lb_spawn_helper: no fork
 * of the caller). A new storage used to cost a fork+exec of mke2fs and its flushes to the host's disk
 * on the critical path of the first start (10-40 ms on this 2-core host, more than the rest of the start). Now:
 *
 *   <pool>/<bytes>.<pid>-<n>.img   an empty ext4 image of exactly <bytes>, made by mke2fs, root directory 0:0 0755
 *   <pool>/<bytes>.<pid>-<n>.new   one being made (only while a refiller holds <pool>/.lock)
 *   <pool>/<bytes>.template        an empty ext4 image of <bytes> kept as the model: made once by mke2fs, its
 *                                  lost+found removed by debugfs, then every image of that size is a sparse copy of
 *                                  it (copy_file_range of its few hundred KiB of metadata: no mke2fs process), by the
 *                                  refiller and, when the pool is empty, by lb_disk_prepare itself
 *   <pool>/<bytes>.<pid>-<n>.ready an image taken for lensboxd's ready storages (disk_ready.c): attached and mounted,
 *                                  held by lensboxd's descriptors; named .img again by the next refill once nothing
 *                                  holds it (its holder died)
 *   <pool>/.lock                   flock'ed by the one refiller at work
 *
 * lb_disk_pool_take() renames one image of the right size into <storage>/disk.img: rename() is atomic, so two starts
 * can never get the same image (the loser sees ENOENT and tries the next name), and a crash leaves the image either
 * in the pool or in the storage, never half in both. The storage root's owner (the sandbox's host uid) is set at
 * every mount by sandbox.c, as it was for images whose uid changed; an image made without the template still has
 * mke2fs's lost+found, removed at its first mount. The refiller writes each image through to the host's disk
 * (fdatasync) before it names it .img: the loop device's attach flushes the image's dirty pages and extents, which
 * cost a fresh copy 0.5-0.9 ms of its start when they were still in memory, and a crash never leaves a half-written
 * image in the pool. lb_disk_pool_refill() then starts, detached, a refiller that tops the pool up to
 * LB_DISK_POOL_TARGET images of that size under the lock, a moment later and only with the CPU and disk time nothing
 * else wants (SCHED_IDLE, the idle I/O class), so it takes no time from runs. Without an image of the right size (a
 * pool not yet filled, a size not seen before, a pool on another filesystem than the storage: EXDEV), the caller
 * formats as before: the pool only ever saves time.
 *
 * Where: lb_sandbox_spec.disk_pool names the pool (NULL or "": none, every new storage is formatted on the spot); it
 * must be on the storage's filesystem (rename() cannot cross filesystems: -EXDEV, and the image is formatted on the
 * spot). lensbox-runner uses <storage's parent>/.disk-pool unless told otherwise.
 *
 * Invariants: the pool directory is root's own and 0700 (checked before every use, never followed through a
 * symlink), so no other user can plant an image that the kernel would then mount; only a refiller holding the lock
 * writes .new files, so any .new file found under the lock is a dead refiller's and is removed; the pool holds only
 * files this code made. Images of sizes no longer used stay (a few hundred KiB of host disk each, sparse).
 *
 * A refiller outlives its caller (lensbox-runner exits long before mke2fs is done) unless the caller asks for it to be
 * bound (lensboxd): then it watches a pidfd of the caller and, when the caller ends, kills its mke2fs, removes the
 * .new file and exits at once, so a killed lensboxd leaves no process of its own behind.
 *
 * The refiller is no fork of the caller (a fork of lensboxd write-protects all its memory, and each page it writes
 * next faults): lensbox-diskhelper, a freestanding binary embedded in the library, gets the pool directory, the
 * lock and the caller's pidfd as descriptors and the names as arguments, and does the rest with raw calls.
 */
/* Paths built here come from bounded parts (the pool path checked against PATH_MAX, numeric names). */
#pragma GCC diagnostic ignored "-Wformat-truncation"

#include "internal.h"
#include "init/raw.h"

#include "lb/cleanup.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define POOL_NAME_MAX 64 /* as lensbox-diskhelper's names */

/* Opens the pool directory, creating it if asked; -EPERM unless it is root's own (our euid's) and 0700: an image
 * found in a directory anyone else can write to could be crafted, and the kernel would mount it. */
int lb_disk_pool_open(const char *pool, bool create)
{
	if (create && mkdir(pool, 0700) < 0 && errno != EEXIST)
		return -errno;
	int fd = open(pool, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	struct stat st;
	if (fstat(fd, &st) < 0 || st.st_uid != geteuid() || (st.st_mode & 077)) {
		close(fd);
		return -EPERM;
	}
	return fd;
}

/* As image_in_use in disk.c explains: a write lease is granted only on a file nobody else has open for writing. */
int lb_disk_file_in_use(int dirfd, const char *name)
{
	_cleanup_close_ int fd = openat(dirfd, name, O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (fd < 0)
		return errno == ENOENT ? 0 : -errno;
	if (fcntl(fd, F_SETLEASE, F_WRLCK) < 0)
		return errno == EAGAIN ? 1 : -errno;
	(void)fcntl(fd, F_SETLEASE, F_UNLCK);
	return 0;
}

/* Whether name is <bytes>.<anything>.<suffix> for these bytes. */
static bool pool_name_is(const char *name, const char *prefix, const char *suffix)
{
	size_t n = strlen(name), p = strlen(prefix), s = strlen(suffix);
	return n > p + s && strncmp(name, prefix, p) == 0 && strcmp(name + n - s, suffix) == 0;
}

int lb_disk_pool_take_at(int pool_fd, uint64_t disk_bytes, int dirfd, const char *name)
{
	char prefix[32];
	snprintf(prefix, sizeof(prefix), "%" PRIu64 ".", disk_bytes);
	int dfd = dup(pool_fd);
	if (dfd < 0)
		return -errno;
	_cleanup_closedir_ DIR *d = fdopendir(dfd);
	if (!d) {
		close(dfd);
		return -errno;
	}
	struct dirent *de;
	while ((de = readdir(d))) {
		if (!pool_name_is(de->d_name, prefix, ".img"))
			continue;
		struct stat st;
		if (fstatat(pool_fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode) ||
		    (uint64_t)st.st_size != disk_bytes)
			continue;
		/* Atomic: exactly one caller moves this image; the others find it gone (ENOENT) and try the next. */
		if (renameat(pool_fd, de->d_name, dirfd, name) == 0)
			return 0;
		if (errno != ENOENT)
			return -errno; /* EXDEV: the pool is on another filesystem than the storage */
	}
	return -ENOENT;
}

int lb_disk_pool_take(const char *pool, uint64_t disk_bytes, const char *img)
{
	_cleanup_close_ int fd = lb_disk_pool_open(pool, false);
	if (fd < 0)
		return fd;
	return lb_disk_pool_take_at(fd, disk_bytes, AT_FDCWD, img);
}

int lb_disk_pool_copy_template(const char *pool, uint64_t disk_bytes, int to)
{
	_cleanup_close_ int fd = lb_disk_pool_open(pool, false);
	if (fd < 0)
		return fd;
	char name[POOL_NAME_MAX];
	snprintf(name, sizeof(name), "%" PRIu64 ".template", disk_bytes);
	_cleanup_close_ int from = openat(fd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (from < 0)
		return -errno;
	struct stat st;
	if (fstat(from, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != disk_bytes)
		return -ENOENT;
	return (int)raw_copy_sparse(from, to, disk_bytes);
}

/* Under the lock: removes dead refillers' .new files, gives back ready images nobody holds (disk_ready.c) and counts
 * the images of this size. */
static int pool_count(int fd, const char *prefix)
{
	int dfd = dup(fd);
	if (dfd < 0)
		return -errno;
	_cleanup_closedir_ DIR *d = fdopendir(dfd);
	if (!d) {
		close(dfd);
		return -errno;
	}
	int n = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		size_t len = strlen(de->d_name);
		if (len > 4 && strcmp(de->d_name + len - 4, ".new") == 0)
			(void)unlinkat(fd, de->d_name, 0);
		else if (pool_name_is(de->d_name, prefix, ".img"))
			n++;
		else if (pool_name_is(de->d_name, prefix, ".ready") && len < POOL_NAME_MAX &&
			 lb_disk_file_in_use(fd, de->d_name) == 0) {
			/* A ready image whose holder is gone: its filesystem was shut down cleanly when the holder's
			 * descriptors closed, and is as empty as when it was made. */
			char img[POOL_NAME_MAX];
			snprintf(img, sizeof(img), "%.*s.img", (int)(len - 6), de->d_name);
			if (renameat(fd, de->d_name, fd, img) == 0)
				n++;
		}
	}
	return n;
}

int lb_disk_pool_refill(const char *pool, uint64_t disk_bytes, bool bound)
{
	_cleanup_close_ int fd = lb_disk_pool_open(pool, true);
	if (fd < 0)
		return fd;
	_cleanup_close_ int lock = openat(fd, ".lock", O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (lock < 0)
		return -errno;
	if (flock(lock, LOCK_EX | LOCK_NB) < 0)
		return errno == EWOULDBLOCK ? 0 : -errno; /* a refiller is at work already */
	char prefix[32];
	snprintf(prefix, sizeof(prefix), "%" PRIu64 ".", disk_bytes);
	int have = pool_count(fd, prefix);
	if (have < 0)
		return have;
	if (have >= LB_DISK_POOL_TARGET)
		return 0;
	/* pidfd_open's descriptor is close-on-exec here; the helper gives it to no tool */
	_cleanup_close_ int caller_fd = bound ? (int)syscall(SYS_pidfd_open, getpid(), 0u) : -1;
	if (bound && caller_fd < 0)
		return -errno;
	/* The refiller (lensbox-diskhelper refill): the template's names first, then each image's. It takes the lock
	 * over (the same open file) and holds it until it exits. */
	int n = LB_DISK_POOL_TARGET - have;
	char names[LB_DISK_POOL_TARGET + 1][2][POOL_NAME_MAX]; /* [0]: the template's; each: its .new and final name */
	char *argv[4 + 2 * (LB_DISK_POOL_TARGET + 1) + 1] = { "lensbox-diskhelper", "refill", NULL, bound ? "1" : "0" };
	char bytes[24];
	snprintf(bytes, sizeof(bytes), "%" PRIu64, disk_bytes);
	argv[2] = bytes;
	snprintf(names[0][0], POOL_NAME_MAX, "%stemplate.new", prefix);
	snprintf(names[0][1], POOL_NAME_MAX, "%stemplate", prefix);
	static unsigned counter;
	for (int i = 1; i <= n; i++) {
		unsigned k = __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED);
		snprintf(names[i][0], POOL_NAME_MAX, "%s%ld-%u.new", prefix, (long)getpid(), k);
		snprintf(names[i][1], POOL_NAME_MAX, "%s%ld-%u.img", prefix, (long)getpid(), k);
	}
	size_t a = 4;
	for (int i = 0; i <= n; i++) {
		argv[a++] = names[i][0];
		argv[a++] = names[i][1];
	}
	argv[a] = NULL;
	const int fds[] = { fd, lock, caller_fd };
	_cleanup_close_ int helper = lb_diskhelper_memfd();
	if (helper < 0)
		return helper;
	int r = lb_spawn_helper(helper, argv, fds, bound ? 3 : 2);
	return r < 0 ? r : n;
}

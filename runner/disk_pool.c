/*
 * disk_pool.c — storage images formatted ahead of time, so a new sandbox's first start does not wait for mke2fs.
 *
 * Runs in the caller (root, host mount namespace: lensboxd with many threads, or lensbox-runner) and in one detached
 * refiller process per refill. A new storage used to cost a fork+exec of mke2fs and its flushes to the host's disk
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
 * The refiller is forked from a possibly multithreaded process: everything it needs (names, argv, fds) is prepared
 * before the fork, and it makes raw, async-signal-safe calls only (open, ftruncate, raw clone, execve, poll, wait4,
 * fdatasync, rename).
 */
/* Paths built here come from bounded parts (the pool path checked against PATH_MAX, numeric names). */
#pragma GCC diagnostic ignored "-Wformat-truncation"

#include "internal.h"

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

#define POOL_NAME_MAX 64
#define TEMPLATE      LB_DISK_POOL_TARGET
/* The refiller waits this long before its first mke2fs: the start that took an image, and most first runs, are then
 * done. */
#define REFILL_DELAY_NS 100000000L
/* ioprio_set(2)'s idle class, for the refiller and its mke2fs (no glibc wrapper). */
#define IOPRIO_WHO_PROCESS 1
#define IOPRIO_CLASS_IDLE  3
#define IOPRIO_CLASS_SHIFT 13

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

/* What the refiller needs, all prepared before the fork. */
struct refill {
	int pool_fd, lock_fd, null_fd;
	int caller_fd;	 /* a pidfd of the caller when the refill ends with it, else -1 */
	int template_fd; /* the refiller's: the template once it exists, else -1 */
	int n;
	/* [0, n): the images to make; [TEMPLATE]: the template, made first when missing */
	char tmp[LB_DISK_POOL_TARGET + 1][POOL_NAME_MAX];
	char img[LB_DISK_POOL_TARGET + 1][POOL_NAME_MAX];
	char path[LB_DISK_POOL_TARGET + 1][POOL_NAME_MAX + 32]; /* the .new file for mke2fs: /proc/self/fd/<pool_fd>/ */
	char *argv[LB_DISK_POOL_TARGET + 1][12];
	char *debugfs_argv[6]; /* for the template, once mke2fs made it */
	uint64_t bytes;
};

static char *const tool_envp[] = { "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C", NULL };

/* Waits for the refiller's child pid to end, or the caller to: true when the caller ended first. */
static bool caller_ended(struct refill *r, pid_t pid)
{
	int child = (int)syscall(SYS_pidfd_open, pid, 0u);
	if (child < 0)
		return false; /* cannot watch the child: wait for it alone, as a detached refill does */
	struct pollfd p[2] = { { .fd = child, .events = POLLIN }, { .fd = r->caller_fd, .events = POLLIN } };
	int n;
	do
		n = poll(p, 2, -1);
	while (n < 0 && errno == EINTR);
	close(child);
	return n > 0 && (p[1].revents & POLLIN) && !(p[0].revents & POLLIN);
}

/* Copies the data extents of from (a file of size bytes) into to, leaving its holes holes: an empty ext4 image is a
 * few hundred KiB of metadata in a sparse file. Raw calls only (the refiller runs it too). */
static int copy_sparse(int from, int to, uint64_t size)
{
	if (ftruncate(to, (off_t)size) < 0)
		return -errno;
	off_t pos = 0;
	for (;;) {
		off_t data = lseek(from, pos, SEEK_DATA);
		if (data < 0)
			return errno == ENXIO ? 0 : -errno; /* ENXIO: no data past pos */
		off_t hole = lseek(from, data, SEEK_HOLE);
		if (hole < 0)
			return -errno;
		loff_t in = data, out = data;
		while (in < hole) {
			ssize_t n = copy_file_range(from, &in, to, &out, (size_t)(hole - in), 0);
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0)
				return n < 0 ? -errno : -EIO;
		}
		pos = hole;
	}
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
	return copy_sparse(from, to, disk_bytes);
}

/* Runs one tool (mke2fs or debugfs, at either path) with the argv prepared for it; true when it exited 0. Raw calls
 * only.
 * Not glibc's fork(): its atfork handlers take malloc's and other locks, which another thread of the caller may have
 * held at the instant this process was copied, and would wait for them forever. */
static bool run_tool(struct refill *r, char *const argv[], const char *usr_sbin, const char *sbin)
{
	pid_t pid = (pid_t)syscall(SYS_clone, (unsigned long)SIGCHLD, 0UL, NULL, NULL, 0UL);
	if (pid == 0) {
		/* a refiller that ends (its caller gone) takes its tool with it */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		dup2(r->null_fd, 0);
		dup2(r->null_fd, 1);
		dup2(r->null_fd, 2);
		fcntl(r->pool_fd, F_SETFD, 0); /* the tool opens its image through /proc/self/fd/<pool_fd> */
		execve(usr_sbin, argv, tool_envp);
		execve(sbin, argv, tool_envp);
		_exit(127);
	}
	if (pid < 0)
		return false;
	bool ok = true;
	if (r->caller_fd >= 0 && caller_ended(r, pid)) {
		kill(pid, SIGKILL);
		ok = false;
	}
	int status = 0;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	return ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

/* One image: the sized sparse file, a copy of the template when there is one (a few hundred KiB of copy_file_range
 * instead of a mke2fs process and its four fsyncs), else mke2fs on it (the template: and debugfs removing its
 * lost+found); written through to disk; then its final name. Raw calls only. */
static bool refill_one(struct refill *r, int i)
{
	int fd = openat(r->pool_fd, r->tmp[i], O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return false;
	bool ok;
	if (i != TEMPLATE && r->template_fd >= 0) {
		ok = copy_sparse(r->template_fd, fd, r->bytes) == 0;
	} else {
		ok = ftruncate(fd, (off_t)r->bytes) == 0 && run_tool(r, r->argv[i], "/usr/sbin/mke2fs", "/sbin/mke2fs");
		if (ok && i == TEMPLATE)
			ok = run_tool(r, r->debugfs_argv, "/usr/sbin/debugfs", "/sbin/debugfs");
	}
	ok = ok && fdatasync(fd) == 0;
	close(fd);
	ok = ok && renameat(r->pool_fd, r->tmp[i], r->pool_fd, r->img[i]) == 0;
	if (!ok)
		unlinkat(r->pool_fd, r->tmp[i], 0);
	return ok;
}

/* The refiller: a grandchild of the caller (its parent, sharing the caller's memory, exits at once, so nobody has
 * to reap it). It holds the pool's lock (inherited) until it exits and no other descriptor of the caller. */
static _Noreturn void refill_main(struct refill *r)
{
	pid_t pid = (pid_t)syscall(SYS_clone, (unsigned long)SIGCHLD, 0UL, NULL, NULL, 0UL);
	if (pid != 0)
		_exit(pid < 0 ? 1 : 0);
	int keep[4] = { r->pool_fd, r->lock_fd, r->null_fd, r->caller_fd }; /* caller_fd may be -1: sorts first */
	for (int i = 1; i < 4; i++)					    /* sort the four */
		for (int j = i; j > 0 && keep[j - 1] > keep[j]; j--) {
			int t = keep[j];
			keep[j] = keep[j - 1];
			keep[j - 1] = t;
		}
	unsigned from = 0;
	for (int i = 0; i < 4; i++) {
		if (keep[i] < 0)
			continue;
		if ((unsigned)keep[i] > from)
			syscall(SYS_close_range, from, (unsigned)keep[i] - 1, 0u);
		from = (unsigned)keep[i] + 1;
	}
	syscall(SYS_close_range, from, ~0u, 0u);
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	/* Only what the CPUs and the disk would otherwise leave idle: a refill never takes time from a run (under a
	 * sustained load it waits, the pool empties, and new storages are formatted on the spot as before). */
	struct sched_param sp = { 0 };
	(void)sched_setscheduler(0, SCHED_IDLE, &sp);
	(void)syscall(SYS_ioprio_set, IOPRIO_WHO_PROCESS, 0, IOPRIO_CLASS_IDLE << IOPRIO_CLASS_SHIFT);
	if (r->caller_fd >= 0) {
		/* a moment later, unless the caller is gone by then */
		struct pollfd p = { .fd = r->caller_fd, .events = POLLIN };
		if (poll(&p, 1, REFILL_DELAY_NS / 1000000) != 0)
			_exit(0);
	} else {
		struct timespec ts = { 0, REFILL_DELAY_NS };
		nanosleep(&ts, NULL);
	}
	r->template_fd = openat(r->pool_fd, r->img[TEMPLATE], O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (r->template_fd < 0 && refill_one(r, TEMPLATE))
		r->template_fd = openat(r->pool_fd, r->img[TEMPLATE], O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	for (int i = 0; i < r->n; i++)
		if (!refill_one(r, i))
			break;
	_exit(0);
}

static int refill_start(void *arg)
{
	refill_main(arg);
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

/* mke2fs's command line for image i (its .new name in tmp[i]). */
static void refill_argv(struct refill *r, int i, int pool_fd)
{
	/* The refiller inherits the pool's fd under the same number: the path never leaves the checked directory. */
	char name[POOL_NAME_MAX];
	memcpy(name, r->tmp[i], sizeof(name));
	snprintf(r->path[i], sizeof(r->path[i]), "/proc/self/fd/%d/%s", pool_fd, name);
	/* The root directory stays 0:0 0755 here; the first mount gives it to the sandbox's uid. -m 0: no blocks
	 * reserved for root (there is no root inside); -F: it is a file, not a device. */
	char *const argv[] = { "mke2fs",   "-q",   "-F",
			       "-t",	   "ext4", "-m",
			       "0",	   "-E",   "lazy_itable_init=1,lazy_journal_init=1",
			       r->path[i], NULL };
	memcpy(r->argv[i], argv, sizeof(argv));
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
	_cleanup_close_ int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (null_fd < 0)
		return -errno;
	/* pidfd_open's descriptor is close-on-exec: mke2fs never holds it */
	_cleanup_close_ int caller_fd = bound ? (int)syscall(SYS_pidfd_open, getpid(), 0u) : -1;
	if (bound && caller_fd < 0)
		return -errno;
	struct refill rf = { .pool_fd = fd,
			     .lock_fd = lock,
			     .null_fd = null_fd,
			     .caller_fd = caller_fd,
			     .template_fd = -1,
			     .bytes = disk_bytes };
	struct refill *r = &rf;
	static unsigned counter;
	for (int i = 0; i < LB_DISK_POOL_TARGET - have; i++, r->n++) {
		unsigned k = __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED);
		snprintf(r->tmp[i], POOL_NAME_MAX, "%s%ld-%u.new", prefix, (long)getpid(), k);
		snprintf(r->img[i], POOL_NAME_MAX, "%s%ld-%u.img", prefix, (long)getpid(), k);
		refill_argv(r, i, fd);
	}
	snprintf(r->tmp[TEMPLATE], POOL_NAME_MAX, "%stemplate.new", prefix);
	snprintf(r->img[TEMPLATE], POOL_NAME_MAX, "%stemplate", prefix);
	refill_argv(r, TEMPLATE, fd);
	/* The template's lost+found goes before the first copy: a new storage's start then has nothing to remove
	 * (a journal transaction at the first mount before). e2fsck makes it again if it ever needs it. */
	char *const debugfs_argv[] = { "debugfs", "-w", "-R", "rmdir lost+found", r->path[TEMPLATE], NULL };
	memcpy(r->debugfs_argv, debugfs_argv, sizeof(debugfs_argv));
	/* The intermediate child borrows our memory (CLONE_VM, we are suspended until it exits, on a stack of its own
	 * in this frame, signals blocked so no handler of ours runs in it); only the refiller's fork copies it. */
	_Alignas(16) char stack[16384];
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pid_t pid = clone(refill_start, stack + sizeof(stack), CLONE_VM | CLONE_VFORK | SIGCHLD, r);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (pid < 0)
		return -errno;
	while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
		;
	return r->n;
}

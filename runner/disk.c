/*
 * disk.c — a sandbox's storage: one sparse ext4 image, <storage>/disk.img, of the sandbox's disk limit, attached
 * to a loop device and mounted nosuid,nodev at <run_dir>/mnt/<name> while the sandbox runs.
 *
 * Runs in the caller (root, host mount namespace). Why an image: the sandbox's files can never use more host disk
 * than the image's size (a full image answers ENOSPC inside; the host's free space is untouched), its inodes are
 * bounded too, and the whole storage is one file to move or delete. The image is sparse, so an empty sandbox costs
 * a few MiB of host disk. The image is created by mke2fs (run with an empty environment) with its root directory
 * owned by the sandbox's host uid; a larger limit later grows it with resize2fs; a smaller one keeps the existing
 * size (shrinking a filesystem could lose the user's files). The loop device has LO_FLAGS_AUTOCLEAR, so it detaches
 * itself when the last mount of the filesystem goes away, in whichever namespace that is.
 *
 * One image must never be mounted twice (two ext4 mounts of one image corrupt it): a running sandbox holds an
 * exclusive flock on <storage>/lock for its whole life (released by the kernel if its process dies), and a start
 * also refuses an image a loop device still holds (a crashed sandbox's leftover mount). Stop detaches the mount and
 * leaves its shutdown (the flushes to the host's disk) to a background flusher that shares the lock until it is done.
 */
/* Paths built here come from bounded parts (names <= 63 bytes, mount points, run_dir checked by the caller);
 * a path cut at PATH_MAX only fails to open. */
#pragma GCC diagnostic ignored "-Wformat-truncation"

#include "internal.h"

#include "lb/cleanup.h"
#include "lb/fileio.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <linux/fiemap.h>
#include <linux/fs.h>
#include <linux/loop.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define DISK_IMAGE "disk.img"

/* Runs a program from /usr/sbin or /sbin with an empty environment and no input or output; 0 when it exited 0. */
static int run_tool(char *const argv[], struct lb_error *err)
{
	char *const envp[] = { "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C", NULL };
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
	pid_t pid;
	int r = posix_spawnp(&pid, argv[0], &fa, NULL, argv, envp);
	posix_spawn_file_actions_destroy(&fa);
	if (r != 0)
		return lb_error_set(err, r, "running %s", argv[0]);
	int status;
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return lb_error_set(err, errno, "waiting for %s", argv[0]);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		return lb_error_setx(err, EIO, "%s failed (status %d)", argv[0], status);
	return 0;
}

int lb_disk_prepare(const char *storage, const char *pool, uint64_t disk_bytes, uid_t owner_uid, gid_t owner_gid,
		    struct lb_error *err)
{
	if (disk_bytes < (16u << 20))
		return lb_error_setx(err, EINVAL, "disk limit %" PRIu64 " is below the 16 MiB minimum", disk_bytes);
	if (disk_bytes > ((uint64_t)1 << 42))
		return lb_error_setx(err, EINVAL, "disk limit %" PRIu64 " is above 4 TiB", disk_bytes);
	/* The storage directory holds only the image; root-only, so no other host user can reach the image. */
	int r = lb_mkdir_p(storage, 0700);
	if (r < 0)
		return lb_error_set(err, r, "creating storage directory %s", storage);
	char img[PATH_MAX];
	snprintf(img, sizeof(img), "%s/" DISK_IMAGE, storage);
	struct stat st;
	char size_arg[32];
	snprintf(size_arg, sizeof(size_arg), "%" PRIu64 "K", disk_bytes / 1024);
	if (stat(img, &st) == 0) {
		if (!S_ISREG(st.st_mode))
			return lb_error_setx(err, EINVAL, "%s is not a regular file", img);
		if ((uint64_t)st.st_size >= disk_bytes)
			return 0;
		/* The limit grew: grow the file, then the filesystem (offline, before it is mounted). */
		if (truncate(img, (off_t)disk_bytes) < 0)
			return lb_error_set(err, errno, "growing %s", img);
		char *const argv[] = { "resize2fs", "-f", img, size_arg, NULL };
		r = run_tool(argv, err);
		if (r < 0)
			return lb_error_wrap(err, "growing the storage filesystem");
		return 0;
	}
	if (errno != ENOENT)
		return lb_error_set(err, errno, "inspecting %s", img);
	/* A new image: one formatted ahead of time (disk_pool.c), whose root the mount gives to owner_uid. A pool that
	 * cannot be used only costs the time it would have saved. */
	if (pool && lb_disk_pool_take(pool, disk_bytes, img) == 0)
		return 1;

	/* A new image: made under a temporary name and renamed, so a crash never leaves a half-made disk.img. */
	char tmp[PATH_MAX];
	snprintf(tmp, sizeof(tmp), "%s/" DISK_IMAGE ".new", storage);
	/* The pool empty (a burst of new sandboxes): a copy of its template, when it has one, costs far less than
	 * mke2fs. Its root is root's, given to owner_uid at the mount as for a pool image. A copy that fails is
	 * truncated away below. */
	if (pool) {
		_cleanup_close_ int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
		if (fd >= 0 && lb_disk_pool_copy_template(pool, disk_bytes, fd) == 0) {
			if (rename(tmp, img) == 0)
				return 1;
		}
	}
	{
		_cleanup_close_ int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
		if (fd < 0)
			return lb_error_set(err, errno, "creating %s", tmp);
		if (ftruncate(fd, (off_t)disk_bytes) < 0)
			return lb_error_set(err, errno, "sizing %s", tmp);
	}
	char extended[96];
	snprintf(extended, sizeof(extended), "root_owner=%u:%u,lazy_itable_init=1,lazy_journal_init=1",
		 (unsigned)owner_uid, (unsigned)owner_gid);
	/* -m 0: no blocks reserved for root (there is no root inside); -F: it is a file, not a device. */
	char *const argv[] = { "mke2fs", "-q", "-F", "-t", "ext4", "-m", "0", "-E", extended, tmp, NULL };
	r = run_tool(argv, err);
	if (r < 0) {
		unlink(tmp);
		return lb_error_wrap(err, "making the storage filesystem");
	}
	if (rename(tmp, img) < 0) {
		r = lb_error_set(err, errno, "renaming %s", tmp);
		unlink(tmp);
		return r;
	}
	return 1;
}

int lb_disk_lock(const char *storage, int timeout_ms, struct lb_error *err)
{
	/* The storage directory is root's (0700) and holds only our files; the lock file is created once. */
	int r = lb_mkdir_p(storage, 0700);
	if (r < 0)
		return lb_error_set(err, r, "creating storage directory %s", storage);
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/lock", storage);
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return lb_error_set(err, errno, "opening %s", path);
	/* A just-stopped sandbox's flusher holds the lock for the few ms of its storage's shutdown: look every 100 us
	 * for the first 50 ms (a restart should not lose a millisecond per look), then every ms. */
	for (long waited_us = 0;;) {
		if (flock(fd, LOCK_EX | LOCK_NB) == 0)
			return fd;
		if (errno != EWOULDBLOCK && errno != EINTR) {
			r = lb_error_set(err, errno, "locking %s", path);
			break;
		}
		if (waited_us >= (long)timeout_ms * 1000) {
			r = lb_error_setx(err, EBUSY, "the storage %s is in use by another sandbox", storage);
			break;
		}
		long step_us = waited_us < 50000 ? 100 : 1000;
		struct timespec ts = { 0, step_us * 1000 };
		nanosleep(&ts, NULL);
		waited_us += step_us;
	}
	close(fd);
	return r;
}

int lb_disk_find_loop(const char *storage, char *ret_dev, size_t size)
{
	char img[PATH_MAX], real[PATH_MAX];
	snprintf(img, sizeof(img), "%s/" DISK_IMAGE, storage);
	if (!realpath(img, real))
		return -errno;
	_cleanup_closedir_ DIR *d = opendir("/sys/block");
	if (!d)
		return -errno;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (strncmp(de->d_name, "loop", 4) != 0)
			continue;
		char path[PATH_MAX];
		snprintf(path, sizeof(path), "/sys/block/%s/loop/backing_file", de->d_name);
		_cleanup_free_ char *bf = NULL;
		if (lb_read_file_at(AT_FDCWD, path, PATH_MAX + 64, &bf, NULL) < 0)
			continue;
		bf[strcspn(bf, "\n")] = '\0';
		if (strcmp(bf, real) == 0) {
			if (ret_dev)
				snprintf(ret_dev, size, "/dev/%s", de->d_name);
			return 0;
		}
	}
	return -ENOENT;
}

/* Attaches img to a free loop device with autoclear and the given logical block size (0: the driver's default);
 * returns the open loop fd and its path. */
static int loop_attach(int imgfd, const char *img, unsigned block_size, char *dev, size_t devsize, struct lb_error *err)
{
	_cleanup_close_ int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
	if (ctl < 0)
		return lb_error_set(err, errno, "opening /dev/loop-control");
	for (int attempt = 0; attempt < 32; attempt++) {
		int n = ioctl(ctl, LOOP_CTL_GET_FREE);
		if (n < 0 && errno == ENOSPC) /* every loop device is in use and no new one may be added (max_loop) */
			return lb_error_set(err, ENOSPC, "no free loop device on this host");
		if (n < 0)
			return lb_error_set(err, errno, "finding a free loop device");
		snprintf(dev, devsize, "/dev/loop%d", n);
		int lfd = open(dev, O_RDWR | O_CLOEXEC);
		if (lfd < 0 && errno == ENOENT) {
			/* No devtmpfs node yet (a static /dev): the loop block device is major 7, minor n. */
			if (mknod(dev, S_IFBLK | 0600, makedev(7, (unsigned)n)) < 0 && errno != EEXIST)
				return lb_error_set(err, errno, "creating %s", dev);
			lfd = open(dev, O_RDWR | O_CLOEXEC);
		}
		if (lfd < 0)
			return lb_error_set(err, errno, "opening %s", dev);
		struct loop_config cfg;
		memset(&cfg, 0, sizeof(cfg));
		cfg.fd = (__u32)imgfd;
		cfg.block_size = block_size;
		cfg.info.lo_flags = LO_FLAGS_AUTOCLEAR;
		snprintf((char *)cfg.info.lo_file_name, sizeof(cfg.info.lo_file_name), "%s", img);
		if (ioctl(lfd, LOOP_CONFIGURE, &cfg) == 0)
			return lfd;
		int e = errno;
		if (e == EINVAL && block_size) { /* a block size this kernel's loop driver refuses: its default */
			block_size = 0;
			close(lfd);
			attempt--;
			continue;
		}
		close(lfd);
		if (e != EBUSY) /* EBUSY: another process took this device between GET_FREE and CONFIGURE */
			return lb_error_set(err, e, "configuring %s", dev);
	}
	return lb_error_setx(err, EBUSY, "no free loop device after 32 attempts");
}

/* Whether anything has the image open for writing, asked of the kernel in O(1): a write lease is granted only on a
 * file nobody else has open for writing, and a loop device attached to the image (a running or just-stopped
 * sandbox's, a crash's leftover, whoever attached it) holds it open read-write. 1: in use, 0: free, -errno when
 * leases cannot answer (fs.leases-enable=0...). The lease is dropped at once; nobody else holds the file, so no
 * one is notified. */
static int image_in_use(const char *storage)
{
	char img[PATH_MAX];
	snprintf(img, sizeof(img), "%s/" DISK_IMAGE, storage);
	return lb_disk_file_in_use(AT_FDCWD, img);
}

int lb_disk_wait_released(const char *storage, int timeout_ms)
{
	/* A just-stopped sandbox's loop device detaches within moments: look every 100 us for the first 20 ms, then
	 * every ms. Without leases, the scan of /sys/block for a loop device backed by the image answers. */
	for (long waited_us = 0;;) {
		int r = image_in_use(storage);
		if (r < 0)
			r = lb_disk_find_loop(storage, NULL, 0) == 0;
		if (r == 0)
			return 0;
		if (waited_us >= (long)timeout_ms * 1000)
			return -EBUSY;
		long step_us = waited_us < 20000 ? 100 : 1000;
		struct timespec ts = { 0, step_us * 1000 };
		nanosleep(&ts, NULL);
		waited_us += step_us;
	}
}

/*
 * What a mount of the storage reads first, found in the image file itself before the loop device exists. An ext4
 * mount reads, one after the other, each waiting for the loop device's worker: the superblock, the first group
 * descriptor block, the inode table block that holds the root directory's and the journal's inodes, and the
 * journal's superblock; every program's first lookup in /sandbox then reads the root directory's first block.
 * lb_disk_ext4_layout() finds those blocks (all of group 0, where mke2fs puts them) in the image's on-disk structures
 * (ext4's superblock at byte 1024, the group descriptor after it, inodes 2 and 8, their first extents) and the
 * filesystem's block size. The mount asks for all of them at once on the loop device (POSIX_FADV_WILLNEED), so
 * they arrive while it works. The loop device gets the filesystem's block size as its logical block size: the
 * kernel then never changes the device's block size during the mount, which would drop its page cache (and what was
 * asked ahead with it).
 *
 * The image's structures are the kernel's (programs in the sandbox write files, never raw blocks), but they are
 * read as untrusted bytes anyway: every offset is checked against the file's size, and a wrong one costs only a
 * useless read ahead; a filesystem this does not recognise gets none.
 */
#define EXT4_SB_OFFSET	    1024
#define EXT4_MAGIC	    0xEF53
#define EXT4_EXTENT_MAGIC   0xF30A
#define EXT4_EXTENTS_FL	    0x80000u
#define EXT4_INCOMPAT_64BIT 0x80u
#define EXT4_ROOT_INO	    2u

static uint16_t le16(const unsigned char *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t le32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static bool pread_full(int fd, void *buf, size_t len, uint64_t off)
{
	return pread(fd, buf, len, (off_t)off) == (ssize_t)len;
}

/* The first block of a file from its inode's extent tree root (i_block), when it is a leaf whose first extent
 * starts at the file's first block; 0 otherwise. */
static uint64_t first_extent_block(const unsigned char *inode)
{
	if (!(le32(inode + 0x20) & EXT4_EXTENTS_FL))
		return 0;
	const unsigned char *eh = inode + 0x28;
	if (le16(eh) != EXT4_EXTENT_MAGIC || le16(eh + 2) == 0 || le16(eh + 6) != 0)
		return 0;
	const unsigned char *ex = eh + 12;
	if (le32(ex) != 0 || le16(ex + 4) == 0)
		return 0;
	return (uint64_t)le16(ex + 6) << 32 | le32(ex + 8);
}

int lb_disk_ext4_layout(int fd, struct lb_ext4_layout *ret)
{
	struct stat st;
	if (fstat(fd, &st) < 0)
		return -errno;
	uint64_t size = (uint64_t)st.st_size;
	unsigned char sb[1024];
	if (!pread_full(fd, sb, sizeof(sb), EXT4_SB_OFFSET) || le16(sb + 0x38) != EXT4_MAGIC)
		return -EINVAL;
	uint32_t log_bs = le32(sb + 0x18);
	if (log_bs > 6) /* 1 KiB .. 64 KiB */
		return -EINVAL;
	uint64_t bs = 1024u << log_bs;
	struct lb_ext4_layout l = { .block_size = (unsigned)bs };
	uint64_t first_data = le32(sb + 0x14);
	uint32_t inodes_per_group = le32(sb + 0x28);
	uint32_t journal_ino = le32(sb + 0xE0);
	uint64_t inode_size = le32(sb + 0x4C) >= 1 ? le16(sb + 0x58) : 128; /* s_rev_level 0: fixed 128 bytes */
	uint16_t desc_size = le16(sb + 0xFE);
	bool is64 = (le32(sb + 0x60) & EXT4_INCOMPAT_64BIT) && desc_size >= 64;
	if (inode_size < 128 || inode_size > bs || (inode_size & (inode_size - 1)) || inodes_per_group < 16)
		return -EINVAL;
	/* The superblock's block, and the group descriptors right after it. */
	l.offsets[l.n++] = EXT4_SB_OFFSET / bs * bs;
	uint64_t gdt = (first_data + 1) * bs;
	unsigned char gd[64];
	if (gdt >= size || !pread_full(fd, gd, sizeof(gd), gdt)) {
		*ret = l;
		return 0;
	}
	l.offsets[l.n++] = gdt;
	uint64_t itable = le32(gd + 0x8) | (is64 ? (uint64_t)le32(gd + 0x28) << 32 : 0);
	/* Inodes 2 (the root directory) and 8 (the journal) are in group 0's inode table. */
	uint64_t root_at = itable * bs + (EXT4_ROOT_INO - 1) * inode_size;
	unsigned char ino[160];
	if (itable == 0 || itable > size / bs || root_at + sizeof(ino) > size ||
	    !pread_full(fd, ino, sizeof(ino), root_at)) {
		*ret = l;
		return 0;
	}
	l.offsets[l.n++] = root_at / bs * bs;
	uint64_t b = first_extent_block(ino);
	if (b && b < size / bs)
		l.offsets[l.n++] = b * bs;
	if (journal_ino >= 1 && journal_ino <= 16) {
		uint64_t j_at = itable * bs + (journal_ino - 1) * inode_size;
		if (j_at / bs != root_at / bs && j_at + sizeof(ino) <= size)
			l.offsets[l.n++] = j_at / bs * bs;
		if (j_at + sizeof(ino) <= size && pread_full(fd, ino, sizeof(ino), j_at) &&
		    (b = first_extent_block(ino)) && b < size / bs)
			l.offsets[l.n++] = b * bs;
	}
	*ret = l;
	return 0;
}

/* The mount options. nosuid,nodev (flags): the user's files are hostile, never honour setuid bits or device nodes
 * found on them. noinit_itable: no background zeroing of unused inode tables, which would only fill the sparse image
 * with zeros. no_prefetch_block_bitmaps: no background reading of every group's block bitmap through the loop device
 * (and no kernel thread started for it) at each mount; an allocation reads the bitmap it needs. */
#define STORAGE_MOUNT_OPTS "errors=remount-ro,noinit_itable,no_prefetch_block_bitmaps"
/* Kernels before 5.9 know no no_prefetch_block_bitmaps (and prefetch nothing). */
#define STORAGE_MOUNT_OPTS_OLD "errors=remount-ro,noinit_itable"
/* A storage removed right after its stop (lb_sandbox_spec.storage_throwaway): no write barriers, so the shutdown's
 * journal commit and superblock write reach the image file's page cache and are never flushed through the loop
 * device to the host's disk (two host fsyncs, ~1.8 ms of lensbox-runner's removal here). A host crash while it is
 * mounted may leave it inconsistent: it is thrown away anyway, and one left behind by a crash is mounted with
 * errors=remount-ro like any other. */
#define STORAGE_MOUNT_OPTS_THROWAWAY	 STORAGE_MOUNT_OPTS ",nobarrier"
#define STORAGE_MOUNT_OPTS_OLD_THROWAWAY STORAGE_MOUNT_OPTS_OLD ",nobarrier"

int lb_disk_attach(const char *storage, char *dev, size_t devsize, struct lb_error *err)
{
	char img[PATH_MAX];
	snprintf(img, sizeof(img), "%s/" DISK_IMAGE, storage);
	/* Mounting one ext4 image twice would corrupt it: the caller holds the storage lock and has just checked
	 * (lb_disk_wait_released, under that lock) that no loop device holds the image. */
	_cleanup_close_ int imgfd = open(img, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
	if (imgfd < 0)
		return lb_error_set(err, errno, "opening %s", img);
	return lb_disk_attach_fd(imgfd, img, dev, devsize, err);
}

int lb_disk_attach_fd(int imgfd, const char *img, char *dev, size_t devsize, struct lb_error *err)
{
	struct lb_ext4_layout layout = { 0 };
	(void)lb_disk_ext4_layout(imgfd, &layout); /* none found: no block size given, nothing read ahead */
	long page = sysconf(_SC_PAGESIZE);
	unsigned bsize =
	    layout.block_size >= 512 && page > 0 && layout.block_size <= (unsigned long)page ? layout.block_size : 0;
	int lfd = loop_attach(imgfd, img, bsize, dev, devsize, err);
	if (lfd < 0)
		return lfd;
	for (size_t i = 0; i < layout.n; i++)
		(void)posix_fadvise(lfd, (off_t)layout.offsets[i], (off_t)layout.block_size, POSIX_FADV_WILLNEED);
	return lfd;
}

int lb_disk_mount(const char *storage, const char *mountpoint, bool throwaway, struct lb_error *err)
{
	char dev[64];
	_cleanup_close_ int lfd = lb_disk_attach(storage, dev, sizeof(dev), err);
	if (lfd < 0)
		return lfd;
	const char *opts = throwaway ? STORAGE_MOUNT_OPTS_THROWAWAY : STORAGE_MOUNT_OPTS;
	const char *old_opts = throwaway ? STORAGE_MOUNT_OPTS_OLD_THROWAWAY : STORAGE_MOUNT_OPTS_OLD;
	/* The mount point may be removed under us by the flusher of a stopped sandbox of the same name (with another
	 * storage; ours is locked): make it again then. */
	for (int attempt = 0;; attempt++) {
		int r = lb_mkdir_p(mountpoint, 0700);
		if (r < 0)
			return lb_error_set(err, r, "creating %s", mountpoint);
		if (mount(dev, mountpoint, "ext4", MS_NOSUID | MS_NODEV | MS_NOATIME, opts) == 0)
			return 0; /* closing lfd leaves the mount as the loop device's only user: autoclear on umount */
		if (errno == EINVAL && opts != old_opts) {
			opts = old_opts;
			continue;
		}
		if (errno != ENOENT || attempt == 2)
			return lb_error_set(err, errno, "mounting %s on %s", dev, mountpoint);
	}
}

int lb_disk_detach(const char *mountpoint, int lock_fd, struct lb_disk_detach *ret, struct lb_error *err)
{
	*ret = (struct lb_disk_detach){ .mnt_fd = -1, .go = -1 };
	/* A reference to the mount that outlives its detach: whoever closes it last shuts the filesystem down. */
	int mnt_fd = open(mountpoint, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (umount2(mountpoint, MNT_DETACH | UMOUNT_NOFOLLOW) < 0 && errno != EINVAL && errno != ENOENT) {
		int e = errno;
		if (mnt_fd >= 0)
			close(mnt_fd);
		return lb_error_set(err, e, "unmounting %s", mountpoint);
	}
	if (mnt_fd < 0) {
		(void)rmdir(mountpoint);
		return 0; /* nothing was mounted there */
	}
	/* The shutdown (journal commit and flushes, 1-30 ms on a busy host) happens in a flusher process holding the
	 * storage lock, so the caller does not wait for it; the next start of this storage takes the lock (and then
	 * finds no loop device holding the image) only once it is done: the image is never mounted twice. The flusher
	 * (lensbox-diskhelper flush) starts only when our own reference is gone (the pipe's EOF,
	 * lb_disk_detach_finish), or the last close, and with it the shutdown, could be ours. It is no fork of ours
	 * (lb_spawn_helper), and holds the mount, the lock and the pipe only. Without a lock to hand over, or if the
	 * pipe or the helper fails, the caller does the shutdown itself. */
	int go[2] = { -1, -1 };
	if (lock_fd >= 0 && pipe2(go, O_CLOEXEC) == 0) {
		char *const argv[] = { "lensbox-diskhelper", "flush", (char *)mountpoint, NULL };
		const int fds[] = { mnt_fd, lock_fd, go[0] };
		int helper = lb_diskhelper_memfd();
		int r = helper < 0 ? helper : lb_spawn_helper(helper, argv, fds, 3);
		if (helper >= 0)
			close(helper);
		close(go[0]);
		if (r < 0) {
			close(go[1]);
			go[1] = -1;
		}
	}
	*ret = (struct lb_disk_detach){ .mnt_fd = mnt_fd, .go = go[1] };
	return 0;
}

void lb_disk_detach_finish(struct lb_disk_detach *d, const char *mountpoint)
{
	if (d->mnt_fd >= 0)
		close(d->mnt_fd); /* without a flusher, the last reference: the shutdown happens here */
	if (d->go >= 0)
		close(d->go); /* the flusher goes on: ours was not the last reference */
	else if (d->mnt_fd >= 0)
		(void)rmdir(mountpoint);
	*d = (struct lb_disk_detach){ .mnt_fd = -1, .go = -1 };
}

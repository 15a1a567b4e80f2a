/*
 * disk_ready.c — a new storage's filesystem ready ahead of time, so that a new sandbox's start moves a mount into
 * place instead of attaching a loop device and mounting ext4 on its critical path (1.2-1.5 ms of lensboxd's start).
 *
 * Runs in lensboxd's core (root, host mount namespace, many threads): lb_disk_ready_make() off any request's path,
 * lb_disk_ready_place() inside lb_sandbox_start under the storage's lock. Not in the musl build of the tool, which
 * has no use for it.
 *
 * A ready storage is an image taken from the disk pool (disk_pool.c) by renaming it to <bytes>.<pid>-<n>.ready in
 * the pool (atomic: exactly one taker, as for a start's take), attached to a loop device (autoclear) and mounted as
 * a detached mount (fsmount: no mount point, in no mount table, reached only through the descriptor held here),
 * nosuid, nodev, noatime and with the options of a start's mount (disk.c). Placing it renames the image to the new
 * storage's disk.img (the loop device follows the file, not the name) and attaches the mount at the sandbox's
 * storage mount point with move_mount: from there on it is exactly what lb_disk_mount() would have made, and the
 * sandbox's stop detaches and flushes it as usual.
 *
 * Invariants: an image is mounted once: a .ready image is no .img, so no take and no refill's count sees it, and
 * the one object that holds its mount is the only one that places or frees it. Nothing of it outlives its holder:
 * if lensboxd dies, the kernel closes the descriptor, the filesystem shuts down (journal commit, flushed through the
 * loop device) and the loop device detaches itself; the next refill under the pool's lock finds the .ready file
 * that nothing holds open any more and names it .img again (an empty filesystem, cleanly shut down). The root
 * directory stays root's 0755 until the start gives it to the sandbox's uid, as for any new image.
 */
#include "internal.h"

#include "lb/cleanup.h"
#include "lb/fileio.h"
#include "lb/runner.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

struct lb_disk_ready {
	int pool_fd; /* the pool directory, where the image waits under name */
	int mnt_fd;  /* the detached mount of its filesystem */
	char name[64];
	uint64_t bytes;
};

int lb_disk_mount_detached(const char *dev, unsigned attrs, struct lb_error *err)
{
	_cleanup_close_ int fs = fsopen("ext4", FSOPEN_CLOEXEC);
	if (fs < 0)
		return lb_error_set(err, errno, "opening an ext4 filesystem context");
	if (fsconfig(fs, FSCONFIG_SET_STRING, "source", dev, 0) < 0 ||
	    fsconfig(fs, FSCONFIG_SET_STRING, "errors", "remount-ro", 0) < 0 ||
	    fsconfig(fs, FSCONFIG_SET_FLAG, "noinit_itable", NULL, 0) < 0)
		return lb_error_set(err, errno, "configuring the mount of %s", dev);
	(void)fsconfig(fs, FSCONFIG_SET_FLAG, "no_prefetch_block_bitmaps", NULL, 0); /* unknown before 5.9 */
	if (fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
		return lb_error_set(err, errno, "mounting %s", dev);
	int mnt = fsmount(fs, FSMOUNT_CLOEXEC, attrs);
	if (mnt < 0)
		return lb_error_set(err, errno, "mounting %s", dev);
	return mnt;
}

/* Renames one pool image of exactly bytes to a .ready name of ours (fd: the pool); 0 or -ENOENT when there is none. */
static int take_one(int fd, uint64_t bytes, char *name, size_t size)
{
	static unsigned counter;
	unsigned k = __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED);
	snprintf(name, size, "%" PRIu64 ".%ld-r%u.ready", bytes, (long)getpid(), k);
	return lb_disk_pool_take_at(fd, bytes, fd, name); /* one taker, as for a start's take */
}

/* Gives a taken image back to the pool as .img, or removes it if something still holds it (never hand out an image
 * that may be attached). */
static void give_back(int pool_fd, const char *name)
{
	char img[64];
	snprintf(img, sizeof(img), "%.*s.img", (int)(strlen(name) - 6), name);
	if (lb_disk_file_in_use(pool_fd, name) != 0 || renameat(pool_fd, name, pool_fd, img) < 0)
		(void)unlinkat(pool_fd, name, 0);
}

/* Attaches pool/name and mounts it nowhere: the mount's fd. Closing the loop device's fd here leaves the mount its
 * only user (autoclear when the mount goes); on failure nothing stays attached. */
static int ready_mount(int pool_fd, const char *pool, const char *name, struct lb_error *err)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/%s", pool, name);
	_cleanup_close_ int imgfd = openat(pool_fd, name, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
	if (imgfd < 0)
		return lb_error_set(err, errno, "opening %s", path);
	char dev[64];
	_cleanup_close_ int lfd = lb_disk_attach_fd(imgfd, path, dev, sizeof(dev), err);
	if (lfd < 0)
		return lfd;
	return lb_disk_mount_detached(dev, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOATIME, err);
}

int lb_disk_ready_make(const char *pool, uint64_t disk_bytes, struct lb_disk_ready **ret, struct lb_error *err)
{
	*ret = NULL;
	_cleanup_close_ int fd = lb_disk_pool_open(pool, false);
	if (fd < 0)
		return lb_error_set(err, fd, "opening the disk pool %s", pool);
	char name[64];
	int e = take_one(fd, disk_bytes, name, sizeof(name));
	if (e < 0)
		return lb_error_set(err, e, "taking an image of %" PRIu64 " bytes from %s", disk_bytes, pool);
	int mnt = ready_mount(fd, pool, name, err);
	if (mnt < 0) {
		give_back(fd, name);
		return mnt;
	}
	struct lb_disk_ready *r = calloc(1, sizeof(*r));
	if (!r) {
		close(mnt); /* the filesystem shuts down here, the loop device detaches */
		give_back(fd, name);
		return lb_error_setx(err, ENOMEM, "out of memory");
	}
	r->mnt_fd = mnt;
	r->bytes = disk_bytes;
	memcpy(r->name, name, sizeof(r->name));
	r->pool_fd = TAKE_FD(fd);
	*ret = r;
	return 0;
}

uint64_t lb_disk_ready_bytes(const struct lb_disk_ready *r)
{
	return r->bytes;
}

void lb_disk_ready_free(struct lb_disk_ready *r)
{
	if (!r)
		return;
	/* The last reference: the filesystem shuts down here (flushed; the loop device detaches), and the image,
	 * empty as it was made, goes back to the pool. */
	if (r->mnt_fd >= 0)
		close(r->mnt_fd);
	if (r->pool_fd >= 0) {
		give_back(r->pool_fd, r->name);
		close(r->pool_fd);
	}
	free(r);
}

int lb_disk_ready_place(struct lb_disk_ready *r, const char *storage, const char *mountpoint, struct lb_error *err)
{
	char img[PATH_MAX];
	snprintf(img, sizeof(img), "%s/disk.img", storage);
	/* The caller holds the storage's lock and found no disk.img: a new storage (and RENAME_NOREPLACE makes sure no
	 * image is ever replaced). rename() cannot cross filesystems: a pool elsewhere (-EXDEV) leaves the image where
	 * it is, for lb_disk_ready_free. */
	if (renameat2(r->pool_fd, r->name, AT_FDCWD, img, RENAME_NOREPLACE) < 0)
		return lb_error_set(err, errno, "moving a ready image to %s", img);
	r->name[0] = '\0';
	close(r->pool_fd);
	r->pool_fd = -1;
	int e = lb_mkdir_p(mountpoint, 0700);
	if (e < 0)
		return lb_error_set(err, e, "creating %s", mountpoint);
	if (move_mount(r->mnt_fd, "", AT_FDCWD, mountpoint, MOVE_MOUNT_F_EMPTY_PATH) < 0)
		return lb_error_set(err, errno, "mounting the ready storage on %s", mountpoint);
	close(r->mnt_fd); /* the mount point holds it now */
	r->mnt_fd = -1;
	return 0;
}

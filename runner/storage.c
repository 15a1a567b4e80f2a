/*
 * storage.c — a stopped sandbox's storage reached from the host without starting the sandbox: the files API of
 * lensboxd reads and writes it as the sandbox's uid, for the cost of a loop attach and a mount instead of a whole start
 * (namespaces, cgroups, init, ~22 mounts).
 *
 * Runs in lensboxd's core (root, host mount namespace, many threads). The filesystem is mounted nowhere: fsopen and
 * fsmount give a detached mount that only the returned descriptor reaches (no mount point, nothing in any mount
 * table), nosuid, nodev, noexec. If lensboxd dies, the kernel closes the descriptor and the filesystem shuts down by
 * itself; the loop device (autoclear) goes with it: nothing is left to reconcile.
 *
 * Invariants: an image is never mounted twice (corruption): lb_storage_open takes the storage lock, as a start does,
 * checks under it that no loop device holds the image, and lb_storage_close releases the lock only after the
 * filesystem is shut down (its last reference closed). The image is the sandbox's own filesystem,
 * written by the kernel's ext4 on the sandbox's behalf: the same trust as the mount a start makes. Nothing here
 * follows a path inside it: the caller gets the root directory and resolves beneath it (supervisor/core/files.c).
 */
#include "internal.h"

#include "lb/cleanup.h"
#include "lb/runner.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

/* The root belongs to the sandbox's host ids, 0755 (a new image's is root's; the ids may have changed). Safe as root:
 * the fd is the filesystem's root itself, no path is followed; a new image's lost+found is empty, rmdir removes only
 * an empty directory. */
static int give_root(int mnt, bool fresh, uid_t uid, gid_t gid, struct lb_error *err)
{
	_cleanup_close_ int dir = openat(mnt, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dir < 0)
		return lb_error_set(err, errno, "opening the storage's root");
	if (fresh)
		(void)unlinkat(dir, "lost+found", AT_REMOVEDIR);
	struct stat st;
	if (fstat(dir, &st) < 0)
		return lb_error_set(err, errno, "inspecting the storage's root");
	if ((st.st_uid != uid || st.st_gid != gid || (st.st_mode & 07777) != 0755) &&
	    (fchown(dir, uid, gid) < 0 || fchmod(dir, 0755) < 0))
		return lb_error_set(err, errno, "giving the storage root to uid %u", (unsigned)uid);
	return 0;
}

int lb_storage_open(const struct lb_storage_spec *spec, struct lb_storage *ret, struct lb_error *err)
{
	*ret = (struct lb_storage){ .root = -1, .lock = -1 };
	if (!spec->storage || spec->storage[0] != '/')
		return lb_error_setx(err, EINVAL, "storage must be an absolute path");
	uint64_t disk = spec->disk_bytes ? spec->disk_bytes : (uint64_t)1 << 30;
	_cleanup_close_ int lock = lb_disk_lock(spec->storage, 2000, err);
	if (lock < 0)
		return lock;
	if (lb_disk_wait_released(spec->storage, 2000) < 0)
		return lb_error_setx(err, EBUSY, "the storage %s is still in use", spec->storage);
	const char *pool = spec->disk_pool && spec->disk_pool[0] ? spec->disk_pool : NULL;
	int r = lb_disk_prepare(spec->storage, pool, disk, spec->host_uid, spec->host_gid, err);
	if (r < 0)
		return lb_error_wrap(err, "preparing the storage");
	bool fresh = r == 1;
	char dev[64];
	_cleanup_close_ int lfd = lb_disk_attach(spec->storage, dev, sizeof(dev), err);
	if (lfd < 0)
		return lfd;
	_cleanup_close_ int mnt = lb_disk_mount_detached(
	    dev, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC | MOUNT_ATTR_NOATIME, err);
	if (mnt < 0)
		return mnt; /* closing lfd detaches the loop device (autoclear, nothing mounted it) */
	if ((r = give_root(mnt, fresh, spec->host_uid, spec->host_gid, err)) < 0)
		return r;
	*ret = (struct lb_storage){ .root = TAKE_FD(mnt), .lock = TAKE_FD(lock), .fresh = fresh };
	return 0;
}

void lb_storage_close(struct lb_storage *s)
{
	if (s->root >= 0)
		close(s->root); /* the last reference: the filesystem is shut down and flushed here */
	if (s->lock >= 0)
		close(s->lock); /* only now may a start mount the image */
	*s = (struct lb_storage){ .root = -1, .lock = -1 };
}

int lb_sandbox_refill_pool(const char *pool, uint64_t disk_bytes, bool bound)
{
	if (!pool || !pool[0])
		return 0;
	return lb_disk_pool_refill(pool, disk_bytes ? disk_bytes : (uint64_t)1 << 30, bound);
}

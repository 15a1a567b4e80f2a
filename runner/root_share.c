/*
 * root_share.c — a read-only root shared by the sandboxes of one image.
 *
 * Runs in the caller (root, host namespaces): lensboxd's core makes one per image and keeps it while it runs
 * (supervisor/core/roots.c). A start given none (lensbox-runner) writes the same skeleton in its own state tmpfs and
 * its child mounts the same overlay there (rootfs.c). A shared root is a directory holding a 1 MiB tmpfs of its own,
 * read-only once built:
 *
 *     <dir>/                 tmpfs, root's, 0700, nosuid,nodev, read-only
 *       skel/                mount points (sandbox tmp proc dev sys/devices/system/cpu) and empty /etc files
 *                            (passwd group hosts hostname resolv.conf): each start binds its sandbox's own over them
 *       devskel/             the minimal /dev (empty files the host's nodes are bound over, pts, shm, symlinks)
 *       img/                 a bind of the image's rootfs
 *       root/                ONE overlay, lowerdir=skel:img, ro,nosuid,nodev, no upper layer
 *
 * Why share it: an overlay builds its own dentries and inodes for every path looked up through it, so a new overlay
 * per sandbox made every first run walk cold (~0.3 ms more for python3's start-up: openat and newfstatat through the
 * new overlay). One overlay per image keeps them warm for every sandbox of that image. Sharing the superblock shares
 * nothing writable: the overlay has no upper layer and is mounted read-only, its skeleton is read-only below it, and
 * each sandbox gets a bind of it in its own mount namespace (locked read-only, nosuid and nodev there, being a copy for
 * a less privileged namespace). What one sandbox could learn from another through it (which paths are cached) it
 * could already learn through the image's page cache.
 *
 * Also here, for both kinds of root: lb_tmpfs_seal(), which makes such a tmpfs (or a sandbox's state tmpfs, rootfs.c)
 * read-only once it is written.
 *
 * Invariants: the overlay's layers are named relative to <dir> (skel:img), so no mountinfo shows a host path; the
 * overlay is mounted from a thread of our own with its own working directory, so the caller's threads never see
 * their directory change. Nothing here logs or exits.
 */
#include "internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "lb/cleanup.h"
#include "lb/fileio.h"

/* The files of /etc every sandbox gets its own of (rootfs.c writes them and binds them over these). */
const char *const lb_root_own_etc[LB_ROOT_OWN_ETC] = { "passwd", "group", "hosts", "hostname", "resolv.conf" };
/* Device nodes bound from the host over the skeleton's empty files: harmless ones only (no disks, no memory, no
 * consoles). */
const char *const lb_root_dev_nodes[LB_ROOT_DEV_NODES] = { "null", "zero", "full", "random", "urandom", "tty" };

static int make_at(const char *dir, const char *name, mode_t mode, bool is_dir, struct lb_error *err)
{
	char path[PATH_MAX];
	if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, name) >= sizeof(path))
		return lb_error_setx(err, ENAMETOOLONG, "%s/%s: path too long", dir, name);
	if (is_dir) {
		if (mkdir(path, mode) < 0)
			return lb_error_set(err, errno, "creating %s", path);
		return 0;
	}
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
	if (fd < 0)
		return lb_error_set(err, errno, "creating %s", path);
	close(fd);
	return 0;
}

static int link_at(const char *dir, const char *name, const char *target, struct lb_error *err)
{
	char path[PATH_MAX];
	if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, name) >= sizeof(path))
		return lb_error_setx(err, ENAMETOOLONG, "%s/%s: path too long", dir, name);
	if (symlink(target, path) < 0)
		return lb_error_set(err, errno, "creating %s", path);
	return 0;
}

int lb_root_skeleton_write(const char *dir, struct lb_error *err)
{
	static const char *const dirs[] = { "skel",
					    "skel/sandbox",
					    "skel/tmp",
					    "skel/proc",
					    "skel/dev",
					    "skel/etc",
					    "skel/sys",
					    "skel/sys/devices",
					    "skel/sys/devices/system",
					    "skel/sys/devices/system/cpu",
					    "devskel",
					    "devskel/pts",
					    "devskel/shm",
					    "img",
					    "root" };
	static const char *const dev_links[][2] = { { "fd", "/proc/self/fd" },
						    { "stdin", "/proc/self/fd/0" },
						    { "stdout", "/proc/self/fd/1" },
						    { "stderr", "/proc/self/fd/2" },
						    { "ptmx", "pts/ptmx" } };
	char name[64];
	int r;
	for (size_t i = 0; i < LB_ARRAY_SIZE(dirs); i++)
		if ((r = make_at(dir, dirs[i], 0755, true, err)) < 0)
			return r;
	for (size_t i = 0; i < LB_ROOT_OWN_ETC; i++) {
		snprintf(name, sizeof(name), "skel/etc/%s", lb_root_own_etc[i]);
		if ((r = make_at(dir, name, 0644, false, err)) < 0)
			return r;
	}
	for (size_t i = 0; i < LB_ROOT_DEV_NODES; i++) {
		snprintf(name, sizeof(name), "devskel/%s", lb_root_dev_nodes[i]);
		if ((r = make_at(dir, name, 0644, false, err)) < 0)
			return r;
	}
	for (size_t i = 0; i < LB_ARRAY_SIZE(dev_links); i++) {
		snprintf(name, sizeof(name), "devskel/%s", dev_links[i][0]);
		if ((r = link_at(dir, name, dev_links[i][1], err)) < 0)
			return r;
	}
	return 0;
}

struct overlay_job {
	const char *dir;
	int err;
};

/* A thread of ours with a working directory of its own (unshare(CLONE_FS)), so the layers can be named relative to
 * dir without moving any other thread's. */
static void *mount_overlay(void *arg)
{
	struct overlay_job *j = arg;
	/* Privileged (CAP_SYS_ADMIN): an overlay of our own skeleton over the image, read-only with no upper layer, on
	 * a directory of our own tmpfs. Safe: nothing in it can be written; nosuid,nodev because the image is
	 * third-party content; redirect_dir=nofollow and metacopy=off so overlay xattrs an image might carry are not
	 * followed. */
	if (unshare(CLONE_FS) < 0 || chdir(j->dir) < 0 ||
	    mount("overlay", "root", "overlay", MS_RDONLY | MS_NOSUID | MS_NODEV, LB_ROOT_OVERLAY_OPTS) < 0)
		j->err = errno;
	return NULL;
}

int lb_shared_root_make(const char *rootfs, const char *dir, struct lb_error *err)
{
	struct stat st;
	if (!rootfs || rootfs[0] != '/' || !dir || dir[0] != '/')
		return lb_error_setx(err, EINVAL, "the image rootfs and the shared root must be absolute paths");
	if (stat(rootfs, &st) < 0)
		return lb_error_set(err, errno, "image rootfs %s", rootfs);
	if (!S_ISDIR(st.st_mode))
		return lb_error_setx(err, ENOTDIR, "image rootfs %s is not a directory", rootfs);
	if (mkdir(dir, 0700) < 0)
		return lb_error_set(err, errno, "creating %s", dir);
	/* Privileged: a small tmpfs of our own on a directory we just made; gone in one detach (lb_shared_root_remove).
	 */
	if (mount("tmpfs", dir, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,nr_inodes=256,mode=0700") < 0) {
		int r = lb_error_set(err, errno, "mounting a tmpfs at %s", dir);
		(void)rmdir(dir);
		return r;
	}
	int r = lb_root_skeleton_write(dir, err);
	char img[PATH_MAX];
	snprintf(img, sizeof(img), "%s/img", dir);
	/* Privileged: a bind of the image, so the overlay can name it relative to dir. The image is never written. */
	if (r == 0 && mount(rootfs, img, NULL, MS_BIND | MS_REC, NULL) < 0)
		r = lb_error_set(err, errno, "binding the image %s", rootfs);
	if (r == 0) {
		struct overlay_job job = { .dir = dir };
		pthread_t t;
		int pr = pthread_create(&t, NULL, mount_overlay, &job);
		if (pr != 0)
			r = lb_error_set(err, pr, "starting the thread that mounts the root overlay");
		else if (pthread_join(t, NULL), job.err)
			r = lb_error_set(err, job.err, "mounting the root overlay at %s/root", dir);
	}
	/* Read-only from here: the skeleton under the overlay never changes. The superblock's flag, which no
	 * sandbox's namespace can clear (it is the host's). */
	int sr;
	if (r == 0 && (sr = lb_tmpfs_seal(dir, "size=1m,nr_inodes=256,mode=0700")) < 0)
		r = lb_error_set(err, sr, "making %s read-only", dir);
	if (r < 0)
		(void)lb_shared_root_remove(dir, NULL);
	return r;
}

/* Up to SEAL_TRIES_MS for the copies of a writer to go (lb_tmpfs_seal). */
#define SEAL_TRIES_MS 200

int lb_tmpfs_seal(const char *dir, const char *opts)
{
	for (int tried = 0;; tried++) {
		/* Privileged: our own tmpfs, made read-only at its superblock (what the callers own). */
		if (mount(NULL, dir, NULL, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, opts) == 0)
			return 0;
		if (errno != EBUSY || tried >= SEAL_TRIES_MS)
			return -errno;
		struct timespec ts = { 0, 1000000 };
		nanosleep(&ts, NULL);
	}
}

int lb_shared_root_remove(const char *dir, struct lb_error *err)
{
	/* Detached: sandboxes started on it keep their own binds until they stop. */
	if (umount2(dir, MNT_DETACH | UMOUNT_NOFOLLOW) < 0 && errno != EINVAL && errno != ENOENT)
		return lb_error_set(err, errno, "unmounting %s", dir);
	if (rmdir(dir) < 0 && errno != ENOENT)
		return lb_error_set(err, errno, "removing %s", dir);
	return 0;
}

int lb_shared_root_sweep(const char *parent, struct lb_error *err)
{
	_cleanup_closedir_ DIR *d = opendir(parent);
	if (!d)
		return errno == ENOENT ? 0 : lb_error_set(err, errno, "opening %s", parent);
	int first = 0;
	struct dirent *e;
	char path[PATH_MAX];
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		if ((size_t)snprintf(path, sizeof(path), "%s/%s", parent, e->d_name) >= sizeof(path))
			continue;
		int r = lb_shared_root_remove(path, first ? NULL : err);
		if (r < 0 && first == 0)
			first = r;
	}
	return first;
}

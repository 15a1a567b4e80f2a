/*
 * rootfs.c — the sandbox's root filesystem.
 *
 * Two halves, in two processes:
 *  - lb_rootfs_prepare() runs in the caller (root, host namespaces). It mounts a small tmpfs at
 *    <run_dir>/sandboxes/<name>/ holding the sandbox's own files: own/ (/etc's passwd, group, hosts, hostname and
 *    resolv.conf, and cpu/, the three files of /sys that list its CPUs) and root/, the mount point of its root; then
 *    makes that tmpfs read-only. The root itself is the image's shared root (root_share.c: the image under a skeleton
 *    of mount points, one read-only overlay for every sandbox of the image); a start given none (lensbox-runner)
 *    writes the same skeleton at base/ in this tmpfs, with the sandbox's own files in its top layer instead of own/,
 *    and its child mounts the same overlay over it at root/ in its own namespace (a root for one sandbox need not
 *    outlive it, nor have files bound over it). The image directory is never modified.
 *
 *        root/ (bind of the shared root: ro,nosuid,nodev)      mounted by the child, in its own mount namespace:
 *          ├── usr bin lib … (image)                               /etc/passwd group hosts hostname resolv.conf
 *          ├── etc/ (image, with the skeleton's 5 empty files)       and /sys/devices/system/cpu: binds of own/
 *          ├── sandbox/ tmp/ proc/ dev/ sys/ (skeleton)          /sandbox   bind of the storage mount (nosuid,nodev)
 *                                                                /tmp       tmpfs size-limited (nosuid,nodev)
 *                                                                /dev       bind of devskel/ (ro) + host null zero full
 *                                                                           random urandom tty + devpts newinstance
 *                                                                           + /dev/shm tmpfs
 *                                                                /proc      fresh, Docker's masked and read-only paths
 *
 *  - lb_rootfs_make_private() and lb_rootfs_enter() run in the sandbox's first process, inside its new user and mount
 *    namespaces, with every capability of the new user namespace and none on the host. The first makes every mount
 *    private (after which the caller removes the host's mount of the state tmpfs: our copy no longer follows it); the
 *    second mounts the above, pivot_root()s into root/ and detaches the old root, so nothing of the host stays
 *    reachable. It uses only raw syscalls on strings prepared by the first half (it runs in a child of a
 *    multithreaded process).
 *
 * Nothing is created by the child: inside the new user namespace its host uid (0) is unmapped, so it could not
 * create files anyway; every mount point already exists in the shared root or the state tmpfs. The binds of own/
 * cannot be written: the tmpfs they come from is read-only at its superblock, which only the host can change.
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
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Docker's masked paths: files get /dev/null bound over them, directories an empty read-only tmpfs. */
static const char *const masked_files[] = { "kcore",	   "keys",	  "latency_stats", "timer_list",
					    "timer_stats", "sched_debug", "sysrq-trigger", "interrupts" };
static const char *const masked_dirs[] = { "acpi", "asound", "scsi", "driver" };
/* Docker's read-only paths. */
static const char *const readonly_dirs[] = { "bus", "fs", "irq", "sys" };
#define N_MASKED_FILES LB_ARRAY_SIZE(masked_files)
#define N_MASKED_DIRS  LB_ARRAY_SIZE(masked_dirs)
#define N_RO_DIRS      LB_ARRAY_SIZE(readonly_dirs)
#define N_DEV_NODES    LB_ROOT_DEV_NODES
#define N_OWN	       (LB_ROOT_OWN_ETC + 1) /* the /etc files and the CPU list's directory */

/* The plan's strings are packed in its arena: the plan lives in shared memory (lb_rootfs_plan_new) and each page
 * written is a fault in the caller and in the child, so 50 strings in a page or two rather than one page each. */
#define PLAN_STRINGS 56

struct lb_rootfs_plan {
	const char *state; /* the state tmpfs: the child works relative to it */
	const char *base;  /* the shared root's overlay (host path), bound at root; NULL: a root of our own */
	const char *image; /* for a root of our own: the image (host path), bound at base/img under the overlay */
	const char *root;
	const char *own_src[N_OWN], *own[N_OWN]; /* the sandbox's own files, bound over the shared root's */
	size_t n_own;				 /* N_OWN, or 0 for a root of our own (they are in its top layer) */
	const char *storage_src, *sandbox;
	const char *tmp, *tmp_opts;
	const char *dev_src, *dev;
	const char *node_src[N_DEV_NODES], *node[N_DEV_NODES];
	const char *pts, *shm, *shm_opts;
	const char *proc;
	const char *masked_file[N_MASKED_FILES];
	const char *masked_dir[N_MASKED_DIRS];
	const char *ro_dir[N_RO_DIRS];
	const char *hostname;
	size_t used;
	char arena[PLAN_STRINGS * PATH_MAX]; /* each string is cut at PATH_MAX, like the buffers it replaces */
};

/* Appends a formatted string (cut at PATH_MAX: such a path only fails to open) to the plan's arena. */
__attribute__((format(printf, 2, 3))) static const char *plan_str(struct lb_rootfs_plan *p, const char *fmt, ...)
{
	char *dst = p->arena + p->used;
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(dst, PATH_MAX, fmt, ap);
	va_end(ap);
	size_t len = n < 0 ? 0 : (size_t)n >= PATH_MAX ? PATH_MAX - 1 : (size_t)n;
	dst[len] = '\0';
	p->used += len + 1;
	return dst;
}

static int write_text(const char *dir, const char *name, const char *text, struct lb_error *err)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	_cleanup_close_ int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0)
		return lb_error_set(err, errno, "creating %s", path);
	int r = lb_write_all(fd, text, strlen(text));
	if (r < 0)
		return lb_error_set(err, r, "writing %s", path);
	return 0;
}

static int make_dir(const char *dir, const char *name, struct lb_error *err)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	if (mkdir(path, 0755) < 0 && errno != EEXIST)
		return lb_error_set(err, errno, "creating %s", path);
	return 0;
}

/* Overlay's lowerdir option separates layers with ':' and options with ','; refuse paths that would need escaping. */
static bool overlay_safe(const char *p)
{
	return p[0] == '/' && !strpbrk(p, ",:\\\n");
}

struct lb_rootfs_plan *lb_rootfs_plan_new(void)
{
	/* Shared, so a child cloned before the plan is written reads what the caller writes later, on the caller's
	 * memory or (where spawn.c cannot share it) on a copy. */
	void *p = mmap(NULL, sizeof(struct lb_rootfs_plan), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

/* own/cpu/{online,possible,present}, bound at /sys/devices/system/cpu: the only files of /sys a sandbox sees, listing
 * its own CPUs (cpus.c says why), read-only like the rest of the state tmpfs. */
static int write_cpu_files(const char *own, const cpu_set_t *cpus, struct lb_error *err)
{
	char list[256], dir[PATH_MAX];
	int r = lb_cpus_format(cpus, list, sizeof(list) - 1);
	if (r < 0)
		return lb_error_set(err, r, "listing the sandbox's CPUs");
	size_t len = strlen(list); /* < sizeof(list) - 1: room for the newline and the NUL */
	list[len] = '\n';
	list[len + 1] = '\0';
	if ((r = make_dir(own, "cpu", err)) < 0)
		return r;
	snprintf(dir, sizeof(dir), "%s/cpu", own);
	static const char *const files[] = { "online", "possible", "present" };
	for (size_t i = 0; i < LB_ARRAY_SIZE(files); i++)
		if ((r = write_text(dir, files[i], list, err)) < 0)
			return r;
	return 0;
}

int lb_rootfs_prepare(struct lb_sandbox *sb, const struct lb_sandbox_spec *spec, struct lb_rootfs_plan *p,
		      struct lb_error *err)
{
	if (!overlay_safe(spec->rootfs) || !overlay_safe(sb->state_dir))
		return lb_error_setx(err, EINVAL, "rootfs and run_dir must be absolute paths without ',' ':' or '\\'");
	struct stat st;
	if (stat(spec->rootfs, &st) < 0)
		return lb_error_set(err, errno, "image rootfs %s", spec->rootfs);
	if (!S_ISDIR(st.st_mode))
		return lb_error_setx(err, ENOTDIR, "image rootfs %s is not a directory", spec->rootfs);

	const char *host = spec->hostname ? spec->hostname : spec->name;
	/* The hostname also goes into /etc/hosts: letters, digits, '-', '_' and '.' only, so it cannot add lines or
	 * fields (every valid sandbox name qualifies). */
	size_t hl = strlen(host);
	if (hl == 0 || hl > 63 ||
	    strspn(host, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") != hl)
		return lb_error_setx(err, EINVAL, "hostname must be 1-63 letters, digits, '-', '_' or '.'");
	/* The state directory is root's: the sandbox never sees it, only what is mounted from it. */
	int r = lb_mkdir_p(sb->state_dir, 0700);
	if (r < 0)
		return lb_error_set(err, r, "creating %s", sb->state_dir);
	/* A small tmpfs of our own holds the sandbox's files: fast to fill, gone in one umount, and no leftover file of
	 * a crashed sandbox can ever show up in a new one's root. */
	if (mount("tmpfs", sb->state_dir, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,nr_inodes=256,mode=0700") < 0)
		return lb_error_set(err, errno, "mounting the state tmpfs at %s", sb->state_dir);
	/* The image's shared root, with the sandbox's own files in own/ to be bound over it; or, given none, the
	 * skeleton of a root of our own at base/ in this tmpfs, with those files written into its top layer, which the
	 * child mounts as the shared one is (the image bound at base/img, the overlay at root) in its own namespace. */
	char own[PATH_MAX], base[PATH_MAX], etc[PATH_MAX];
	if ((r = make_dir(sb->state_dir, "root", err)) < 0)
		return r;
	if (spec->shared_root) {
		if ((size_t)snprintf(base, sizeof(base), "%s", spec->shared_root) >= sizeof(base))
			return lb_error_setx(err, ENAMETOOLONG, "shared root path too long");
		snprintf(own, sizeof(own), "%s/own", sb->state_dir);
		snprintf(etc, sizeof(etc), "%s", own);
		if ((r = make_dir(sb->state_dir, "own", err)) < 0)
			return r;
	} else {
		snprintf(base, sizeof(base), "%s/base", sb->state_dir);
		snprintf(own, sizeof(own), "%s/skel/sys/devices/system", base);
		snprintf(etc, sizeof(etc), "%s/skel/etc", base);
		if ((r = make_dir(sb->state_dir, "base", err)) < 0 || (r = lb_root_skeleton_write(base, err)) < 0)
			return r;
	}

	unsigned uid = sb->uid, gid = sb->gid;
	const char *contents[LB_ROOT_OWN_ETC];
	char passwd[256], group[128], hosts[192], hostname[80];
	snprintf(passwd, sizeof(passwd),
		 "root:x:0:0:root:/root:/usr/sbin/nologin\n"
		 "sandbox:x:%u:%u:sandbox:/sandbox:/bin/bash\n"
		 "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
		 uid, gid);
	snprintf(group, sizeof(group), "root:x:0:\nsandbox:x:%u:\nnogroup:x:65534:\n", gid);
	snprintf(hosts, sizeof(hosts),
		 "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t%s\n", host);
	snprintf(hostname, sizeof(hostname), "%s\n", host);
	_Static_assert(LB_ROOT_OWN_ETC == 5, "one text per file of lb_root_own_etc");
	contents[0] = passwd;
	contents[1] = group;
	contents[2] = hosts;
	contents[3] = hostname;
	contents[4] = spec->resolv_conf ? spec->resolv_conf : "# no name servers: the network is off\n";
	for (size_t i = 0; i < LB_ROOT_OWN_ETC; i++)
		if ((r = write_text(etc, lb_root_own_etc[i], contents[i], err)) < 0)
			return r;
	if ((r = write_cpu_files(own, &sb->cpus, err)) < 0)
		return r;
	/* Read-only at its superblock now that it is written, so the binds of own/ cannot be written by anyone but the
	 * host's root, whatever flags a namespace gives them. */
	if ((r = lb_tmpfs_seal(sb->state_dir, "size=1m,nr_inodes=256,mode=0700")) < 0)
		return lb_error_set(err, r, "making the state tmpfs at %s read-only", sb->state_dir);

	_Static_assert(5 + 2 * N_OWN + 5 + 2 * N_DEV_NODES + 4 + N_MASKED_FILES + N_MASKED_DIRS + N_RO_DIRS + 1 <=
			   PLAN_STRINGS,
		       "the plan's arena holds every string at PATH_MAX");
	p->used = 0;
	p->state = plan_str(p, "%s", sb->state_dir);
	p->base = spec->shared_root ? plan_str(p, "%s/root", base) : NULL;
	p->image = spec->shared_root ? NULL : plan_str(p, "%s", spec->rootfs);
	const char *R = sb->root_mnt;
	p->root = plan_str(p, "%s", R);
	p->n_own = spec->shared_root ? N_OWN : 0; /* a root of our own has them in its top layer */
	for (size_t i = 0; i < LB_ROOT_OWN_ETC && p->n_own; i++) {
		p->own_src[i] = plan_str(p, "%s/%s", own, lb_root_own_etc[i]);
		p->own[i] = plan_str(p, "%s/etc/%s", R, lb_root_own_etc[i]);
	}
	if (p->n_own) {
		p->own_src[LB_ROOT_OWN_ETC] = plan_str(p, "%s/cpu", own);
		p->own[LB_ROOT_OWN_ETC] = plan_str(p, "%s/sys/devices/system/cpu", R);
	}
	p->storage_src = plan_str(p, "%s", sb->storage_mnt);
	p->sandbox = plan_str(p, "%s/sandbox", R);
	p->tmp = plan_str(p, "%s/tmp", R);
	p->tmp_opts = plan_str(p, "size=%" PRIu64 ",mode=1777,nr_inodes=65536",
			       spec->limits.tmp_bytes ? spec->limits.tmp_bytes : (uint64_t)64 << 20);
	p->dev_src = plan_str(p, "%s/devskel", base);
	p->dev = plan_str(p, "%s/dev", R);
	for (size_t i = 0; i < N_DEV_NODES; i++) {
		p->node_src[i] = plan_str(p, "/dev/%s", lb_root_dev_nodes[i]);
		p->node[i] = plan_str(p, "%s/dev/%s", R, lb_root_dev_nodes[i]);
	}
	p->pts = plan_str(p, "%s/dev/pts", R);
	p->shm = plan_str(p, "%s/dev/shm", R);
	p->shm_opts = plan_str(p, "size=%" PRIu64 ",mode=1777,nr_inodes=16384",
			       spec->limits.shm_bytes ? spec->limits.shm_bytes : (uint64_t)64 << 20);
	p->proc = plan_str(p, "%s/proc", R);
	for (size_t i = 0; i < N_MASKED_FILES; i++)
		p->masked_file[i] = plan_str(p, "%s/proc/%s", R, masked_files[i]);
	for (size_t i = 0; i < N_MASKED_DIRS; i++)
		p->masked_dir[i] = plan_str(p, "%s/proc/%s", R, masked_dirs[i]);
	for (size_t i = 0; i < N_RO_DIRS; i++)
		p->ro_dir[i] = plan_str(p, "%s/proc/%s", R, readonly_dirs[i]);
	p->hostname = plan_str(p, "%s", host); /* checked above: 1-63 bytes */
	return 0;
}

void lb_rootfs_plan_free(struct lb_rootfs_plan *plan)
{
	if (plan)
		munmap(plan, sizeof(*plan));
}

/* Remounts the bind mount at path read-only, keeping the flags the kernel locked on it (atime, nosuid...). */
static int remount_ro(const char *path, unsigned long extra)
{
	struct statvfs sv;
	if (statvfs(path, &sv) < 0)
		return -errno;
	unsigned long fl = MS_REMOUNT | MS_BIND | MS_RDONLY | extra;
	if (sv.f_flag & ST_NOSUID)
		fl |= MS_NOSUID;
	if (sv.f_flag & ST_NODEV)
		fl |= MS_NODEV;
	if (sv.f_flag & ST_NOEXEC)
		fl |= MS_NOEXEC;
	if (sv.f_flag & ST_NOATIME)
		fl |= MS_NOATIME;
	if (sv.f_flag & ST_NODIRATIME)
		fl |= MS_NODIRATIME;
	if (sv.f_flag & ST_RELATIME)
		fl |= MS_RELATIME;
	if (mount(NULL, path, NULL, fl, NULL) < 0)
		return -errno;
	return 0;
}

#define STEP(name, expr)                    \
	do {                                \
		if ((expr) < 0) {           \
			*ret_step = (name); \
			return -errno;      \
		}                           \
	} while (0)

int lb_rootfs_make_private(const char **ret_step)
{
	/* Everything after this happens in our own mount namespace (owned by the sandbox's user namespace): nothing
	 * propagates back to the host once every mount is private, and nothing the host does propagates in. */
	STEP("making mounts private", mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL));
	return 0;
}

int lb_rootfs_enter(const struct lb_rootfs_plan *p, const char **ret_step)
{
	/* The image's shared root (root_share.c): a bind of its read-only overlay, whose flags (ro,nosuid,nodev) are
	 * locked here, our namespace being a copy made for a less privileged user namespace. Then the sandbox's own
	 * files over the skeleton's empty ones, from the state tmpfs, read-only at its superblock. */
	STEP("entering the state directory", chdir(p->state));
	if (p->base) {
		STEP("binding the image's root", mount(p->base, "root", NULL, MS_BIND, NULL));
	} else {
		/* A root of our own (no shared one given): the same overlay, mounted here with the same options. */
		STEP("binding the image", mount(p->image, "base/img", NULL, MS_BIND | MS_REC, NULL));
		STEP("mounting the root overlay", mount("overlay", "root", "overlay", MS_RDONLY | MS_NOSUID | MS_NODEV,
							LB_ROOT_OVERLAY_OPTS_PRIVATE));
	}
	for (size_t i = 0; i < p->n_own; i++)
		STEP("binding the sandbox's own /etc files", mount(p->own_src[i], p->own[i], NULL, MS_BIND, NULL));
	/* The storage mount is already nosuid,nodev on the host; a bind copies those flags and locks them. */
	STEP("mounting /sandbox", mount(p->storage_src, p->sandbox, NULL, MS_BIND, NULL));
	STEP("mounting /tmp", mount("tmpfs", p->tmp, "tmpfs", MS_NOSUID | MS_NODEV, p->tmp_opts));
	STEP("mounting /dev", mount(p->dev_src, p->dev, NULL, MS_BIND, NULL));
	for (size_t i = 0; i < N_DEV_NODES; i++) {
		/* Binding the host's node keeps the device usable although our own mounts are nodev. */
		STEP("mounting a /dev node", mount(p->node_src[i], p->node[i], NULL, MS_BIND, NULL));
	}
	STEP("mounting /dev/pts",
	     mount("devpts", p->pts, "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620"));
	STEP("mounting /dev/shm", mount("tmpfs", p->shm, "tmpfs", MS_NOSUID | MS_NODEV, p->shm_opts));
	int r = remount_ro(p->dev, MS_NOSUID | MS_NOEXEC);
	if (r < 0) {
		*ret_step = "making /dev read-only";
		return r;
	}
	STEP("mounting /proc", mount("proc", p->proc, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL));
	for (size_t i = 0; i < N_MASKED_FILES; i++)
		if (mount("/dev/null", p->masked_file[i], NULL, MS_BIND, NULL) < 0 && errno != ENOENT) {
			*ret_step = "masking a /proc file";
			return -errno;
		}
	for (size_t i = 0; i < N_MASKED_DIRS; i++)
		if (mount("tmpfs", p->masked_dir[i], "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
			  "size=0,mode=0555") < 0 &&
		    errno != ENOENT) {
			*ret_step = "masking a /proc directory";
			return -errno;
		}
	for (size_t i = 0; i < N_RO_DIRS; i++) {
		if (mount(p->ro_dir[i], p->ro_dir[i], NULL, MS_BIND | MS_REC, NULL) < 0) {
			if (errno == ENOENT)
				continue;
			*ret_step = "binding a read-only /proc directory";
			return -errno;
		}
		r = remount_ro(p->ro_dir[i], MS_NOSUID | MS_NODEV | MS_NOEXEC);
		if (r < 0) {
			*ret_step = "making a /proc directory read-only";
			return r;
		}
	}
	STEP("entering the new root", chdir(p->root));
	/* pivot_root(".", ".") stacks the old root under the new one; detaching it leaves no path to the host. */
	STEP("pivot_root", (int)syscall(SYS_pivot_root, ".", "."));
	STEP("detaching the old root", umount2(".", MNT_DETACH));
	STEP("entering /", chdir("/"));
	STEP("setting the hostname", sethostname(p->hostname, strlen(p->hostname)));
	return 0;
}

int lb_rootfs_unmount(const char *state_dir, struct lb_error *err)
{
	if (umount2(state_dir, UMOUNT_NOFOLLOW) == 0)
		return 0;
	if (errno != EBUSY || umount2(state_dir, MNT_DETACH | UMOUNT_NOFOLLOW) < 0)
		return lb_error_set(err, errno, "unmounting %s", state_dir);
	return 0;
}

int lb_rootfs_remove(const char *state_dir, struct lb_error *err)
{
	char path[PATH_MAX];
	int first = 0;
	bool unmounted = umount2(state_dir, UMOUNT_NOFOLLOW) == 0;
	if (!unmounted && errno != EINVAL && errno != ENOENT) {
		unmounted = umount2(state_dir, MNT_DETACH | UMOUNT_NOFOLLOW) == 0;
		if (!unmounted && errno != EINVAL && first == 0)
			first = lb_error_set(err, errno, "unmounting %s", state_dir);
	}
	/* Everything lb_rootfs_prepare() made lives on the tmpfs just unmounted: only the mount point is left. */
	if (unmounted) {
		if (rmdir(state_dir) < 0 && errno != ENOENT && first == 0)
			first = lb_error_set(err, errno, "removing %s", state_dir);
		return first;
	}
	/* No tmpfs (prepare failed before mounting it, or a crash's cleanup): remove exactly what lb_rootfs_prepare()
	 * makes; anything else left there is a bug worth seeing. */
	static const char *const files[] = {
		"own/passwd",	   "own/group",	     "own/hosts",	 "own/hostname",
		"own/resolv.conf", "own/cpu/online", "own/cpu/possible", "own/cpu/present"
	};
	static const char *const dirs[] = { "own/cpu", "own", "root", "base" };
	for (size_t i = 0; i < LB_ARRAY_SIZE(files); i++) {
		snprintf(path, sizeof(path), "%s/%s", state_dir, files[i]);
		(void)unlink(path);
	}
	for (size_t i = 0; i < LB_ARRAY_SIZE(dirs); i++) {
		snprintf(path, sizeof(path), "%s/%s", state_dir, dirs[i]);
		(void)rmdir(path);
	}
	if (rmdir(state_dir) < 0 && errno != ENOENT && first == 0)
		first = lb_error_set(err, errno, "removing %s", state_dir);
	return first;
}

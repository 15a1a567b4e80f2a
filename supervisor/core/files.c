/*
 * files.c — file transfer between the API and a sandbox's storage (see files.h).
 *
 * Runs in lensboxd (root) on connection threads, in the host's mount namespace, on the storage filesystem the
 * runner mounted (nosuid,nodev) while the sandbox runs. Everything in that filesystem is written by the sandbox and
 * hostile: any component may be a symlink (to /etc/shadow, to another sandbox's storage), a FIFO, a device node, a
 * 10 GB sparse file or a directory of 100,000 entries, and it may change between two system calls.
 *
 * So every lookup starts from an fd of the storage root and goes through openat2() with RESOLVE_IN_ROOT |
 * RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV: the kernel refuses (ELOOP/EXDEV) to follow any
 * symlink or leave the filesystem at resolution time, which no check-then-use sequence could guarantee. A file is
 * opened O_PATH first and its type checked before a real open, so a FIFO never blocks and a device is never
 * opened. Writes go to a fresh O_EXCL temporary in the final directory, are chowned to the sandbox's uid through
 * the fd, then renamed over the target (rename replaces a planted symlink itself, never its target). Root's
 * privileges are needed here only to write into storage owned by the sandbox's host uid.
 */
#include "files.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core.h"
#include "lb/cleanup.h"
#include "lb/units.h"

#define RESOLVE_SAFE (RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV)
#define MAX_DEPTH    64

static int openat2_safe(int dirfd, const char *path, int flags)
{
	struct open_how how = { .flags = (uint64_t)(unsigned)(flags | O_CLOEXEC), .resolve = RESOLVE_SAFE };
	int fd = (int)syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
	return fd < 0 ? -errno : fd;
}

static void fail_errno(struct lbd_fail *f, int r, const char *what, const char *path)
{
	switch (-r) {
	case ENOENT:
	case ENOTDIR:
		lbd_fail_set(f, 404, "file_not_found", "%s %.200s does not exist in the sandbox.", what, path);
		break;
	case ELOOP:
	case EXDEV:
		lbd_fail_set(f, 404, "file_not_found",
			     "%s %.200s passes through a symbolic link, which lensbox does not follow.", what, path);
		break;
	case ENOSPC:
	case EDQUOT:
		lbd_fail_set(f, 413, "file_too_large", "The sandbox's disk is full.");
		break;
	case EISDIR:
		lbd_fail_set(f, 409, "is_a_directory", "%.200s is a directory.", path);
		break;
	case ENAMETOOLONG:
		lbd_fail_set(f, 400, "invalid_path", "The file path is too long.");
		break;
	default:
		lbd_fail_set(f, 500, "internal", "%s %.200s: %s", what, path, strerror(-r));
		break;
	}
}

/* Opens (creating when missing) the directory chain of path's parent below root; returns an O_PATH fd. */
static int open_parent(int root, const char *path, uid_t uid, gid_t gid, const char **ret_base, struct lbd_fail *f)
{
	_cleanup_close_ int cur = openat2_safe(root, ".", O_PATH | O_DIRECTORY);
	if (cur < 0) {
		fail_errno(f, cur, "the storage", "/sandbox");
		return cur;
	}
	const char *p = path;
	for (;;) {
		size_t n = strcspn(p, "/");
		if (p[n] == '\0') {
			*ret_base = p;
			return TAKE_FD(cur);
		}
		char comp[256];
		memcpy(comp, p, n);
		comp[n] = '\0';
		int next = openat2_safe(cur, comp, O_PATH | O_DIRECTORY);
		if (next == -ENOENT) {
			/* Safe: a single component under a directory we hold, created by root then given to the
			 * sandbox's uid through an fd that cannot be a symlink (openat2 refused those above). */
			if (mkdirat(cur, comp, 0755) < 0 && errno != EEXIST) {
				int r = -errno;
				fail_errno(f, r, "creating the directory", comp);
				return r;
			}
			next = openat2_safe(cur, comp, O_PATH | O_DIRECTORY);
			if (next >= 0 && fchownat(next, "", uid, gid, AT_EMPTY_PATH) < 0) {
				int r = -errno;
				close(next);
				fail_errno(f, r, "giving the directory to the sandbox", comp);
				return r;
			}
		}
		if (next == -ENOTDIR) {
			lbd_fail_set(f, 409, "conflict", "%.200s is not a directory in the sandbox.", comp);
			return next;
		}
		if (next < 0) {
			fail_errno(f, next, "the directory", comp);
			return next;
		}
		close(cur);
		cur = next;
		p += n + 1;
	}
}

int lbd_file_write(int root, const char *path, const void *data, size_t len, mode_t mode, uid_t uid, gid_t gid,
		   struct lbd_fail *f)
{
	const char *base = NULL;
	_cleanup_close_ int dir = open_parent(root, path, uid, gid, &base, f);
	if (dir < 0)
		return dir;
	if (!base)
		return -EINVAL; /* cannot happen: open_parent sets it on success */
	/* The target must not be a directory; anything else (a file, a planted symlink) is replaced by rename. */
	struct stat st;
	if (fstatat(dir, base, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode)) {
		lbd_fail_set(f, 409, "is_a_directory", "%.200s is a directory in the sandbox.", path);
		return -EISDIR;
	}
	uint64_t rnd = 0;
	if (getrandom(&rnd, sizeof(rnd), 0) != sizeof(rnd))
		rnd = (uint64_t)lbd_mono_ms();
	char tmp[64];
	snprintf(tmp, sizeof(tmp), ".lensbox-upload-%016llx", (unsigned long long)rnd);
	/* O_PATH dir fds cannot be written through; the name is created O_EXCL|O_NOFOLLOW so nothing existing (a
	 * link the sandbox guessed) is opened. */
	_cleanup_close_ int fd = openat(dir, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
	if (fd < 0) {
		int r = -errno;
		fail_errno(f, r, "creating", path);
		return r;
	}
	int r = 0;
	const char *q = data;
	size_t left = len;
	while (left) {
		ssize_t w = write(fd, q, left);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			r = -errno;
			break;
		}
		q += w;
		left -= (size_t)w;
	}
	if (r == 0 && fchown(fd, uid, gid) < 0)
		r = -errno;
	if (r == 0 && fchmod(fd, mode) < 0)
		r = -errno;
	if (r == 0 && renameat(dir, tmp, dir, base) < 0)
		r = -errno;
	if (r < 0) {
		unlinkat(dir, tmp, 0); /* nothing partial is left */
		fail_errno(f, r, "writing", path);
		return r;
	}
	return 0;
}

int lbd_file_open_read(int root, const char *path, uint64_t max, int *ret_fd, uint64_t *ret_size, struct lbd_fail *f)
{
	_cleanup_close_ int pfd = openat2_safe(root, path, O_PATH | O_NOFOLLOW);
	if (pfd < 0) {
		fail_errno(f, pfd, "The file", path);
		return pfd;
	}
	struct stat st;
	if (fstat(pfd, &st) < 0) {
		int r = -errno;
		fail_errno(f, r, "The file", path);
		return r;
	}
	if (S_ISLNK(st.st_mode)) {
		lbd_fail_set(f, 404, "file_not_found",
			     "%.200s is a symbolic link, which lensbox does not follow; copy out the file it names.",
			     path);
		return -ELOOP;
	}
	if (!S_ISREG(st.st_mode)) {
		const char *kind = S_ISDIR(st.st_mode)	  ? "a directory"
				   : S_ISFIFO(st.st_mode) ? "a FIFO"
				   : S_ISSOCK(st.st_mode) ? "a socket"
				   : S_ISLNK(st.st_mode)  ? "a symbolic link"
							  : "a device";
		lbd_fail_set(f, 422, "not_a_regular_file", "%.200s is %s, not a regular file.", path, kind);
		return -EINVAL;
	}
	if ((uint64_t)st.st_size > max) {
		char a[32], b[32];
		lbd_fail_set(f, 413, "file_too_large", "%.200s is %s (%lld bytes); at most %s can be copied out.", path,
			     lb_format_size((uint64_t)st.st_size, a, sizeof(a)), (long long)st.st_size,
			     lb_format_size(max, b, sizeof(b)));
		return -EFBIG;
	}
	/* Now a real open of the same path, still refusing links; O_NONBLOCK so a FIFO swapped in meanwhile
	 * cannot block, and the inode must be the one checked. */
	_cleanup_close_ int fd = openat2_safe(root, path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
	if (fd < 0) {
		fail_errno(f, fd, "The file", path);
		return fd;
	}
	struct stat st2;
	if (fstat(fd, &st2) < 0 || st2.st_ino != st.st_ino || st2.st_dev != st.st_dev || !S_ISREG(st2.st_mode) ||
	    (uint64_t)st2.st_size > max) {
		lbd_fail_set(f, 409, "conflict", "%.200s changed while it was being opened; try again.", path);
		return -EAGAIN;
	}
	*ret_fd = TAKE_FD(fd);
	*ret_size = (uint64_t)st2.st_size;
	return 0;
}

void lbd_file_remove(int root, const char *path)
{
	const char *slash = strrchr(path, '/');
	if (!slash) {
		unlinkat(root, path, 0);
		return;
	}
	char dir[512];
	snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
	_cleanup_close_ int dfd = openat2_safe(root, dir, O_PATH | O_DIRECTORY);
	if (dfd < 0)
		return;
	unlinkat(dfd, slash + 1, 0);
	/* The parent is removed by name relative to its own parent, which must also resolve without links. */
	const char *slash2 = strrchr(dir, '/');
	if (!slash2)
		unlinkat(root, dir, AT_REMOVEDIR);
	else {
		char parent[512];
		snprintf(parent, sizeof(parent), "%.*s", (int)(slash2 - dir), dir);
		_cleanup_close_ int pfd = openat2_safe(root, parent, O_PATH | O_DIRECTORY);
		if (pfd >= 0)
			unlinkat(pfd, slash2 + 1, AT_REMOVEDIR);
		/* and the grandparent (.lensbox) when nothing else is in it, so /sandbox looks untouched */
		if (!strchr(parent, '/'))
			unlinkat(root, parent, AT_REMOVEDIR);
	}
}

int lbd_open_sandbox_tmp(pid_t init_pid, struct lbd_fail *f)
{
	char proc[64];
	snprintf(proc, sizeof(proc), "/proc/%d/root", (int)init_pid);
	/* Safe: /proc/<pid>/root of the sandbox's own init (whose pidfd the runner holds, so the pid is not reused)
	 * is that sandbox's root; from there only "tmp" is resolved, refusing any link. /tmp is a mount point in a
	 * read-only root, so the sandbox cannot have replaced it; inside it, files.c refuses links as everywhere. */
	_cleanup_close_ int root = open(proc, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (root < 0) {
		lbd_fail_set(f, 500, "internal", "Opening the sandbox's root failed: %s", strerror(errno));
		return -errno;
	}
	struct open_how how = { .flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
				.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS };
	int fd = (int)syscall(SYS_openat2, root, "tmp", &how, sizeof(how));
	if (fd < 0) {
		int e = errno;
		lbd_fail_set(f, 500, "internal", "Opening the sandbox's /tmp failed: %s", strerror(e));
		return -e;
	}
	return fd;
}

/* ---- listing ---- */

struct list_state {
	yajl_gen g;
	size_t emitted;
	uint64_t more;
	bool recursive;
};

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static void free_names(char **names, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
}

static int walk(struct list_state *s, int dfd, const char *prefix, int depth)
{
	_cleanup_closedir_ DIR *dir = NULL;
	int rfd = openat2_safe(dfd, ".", O_RDONLY | O_DIRECTORY);
	if (rfd < 0)
		return rfd;
	dir = fdopendir(rfd);
	if (!dir) {
		close(rfd);
		return -errno;
	}
	char **names = NULL;
	size_t n = 0, cap = 0;
	struct dirent *de;
	while ((de = readdir(dir))) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (depth == 0 && (strcmp(de->d_name, ".lensbox") == 0 || strcmp(de->d_name, "lost+found") == 0))
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : 64;
			char **nn = realloc(names, cap * sizeof(*names));
			if (!nn) {
				free_names(names, n);
				return -ENOMEM;
			}
			names = nn;
		}
		names[n] = strdup(de->d_name);
		if (!names[n]) {
			free_names(names, n);
			return -ENOMEM;
		}
		n++;
	}
	if (n)
		qsort(names, n, sizeof(*names), cmp_str);
	int dirfd_ = dirfd(dir);
	for (size_t i = 0; i < n; i++) {
		struct stat st;
		if (fstatat(dirfd_, names[i], &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue; /* gone meanwhile */
		char path[4200];
		snprintf(path, sizeof(path), "%s%s%s", prefix, prefix[0] ? "/" : "", names[i]);
		if (s->emitted < LBD_LIST_MAX) {
			const char *type = S_ISREG(st.st_mode)	 ? "file"
					   : S_ISDIR(st.st_mode) ? "directory"
					   : S_ISLNK(st.st_mode) ? "symlink"
								 : "other";
			yajl_gen_map_open(s->g);
			lbd_gen_str(s->g, "path", path);
			lbd_gen_str(s->g, "type", type);
			lbd_gen_uint(s->g, "size", (uint64_t)st.st_size);
			lbd_gen_time(s->g, "modified_at",
				     (int64_t)st.st_mtim.tv_sec * 1000 + st.st_mtim.tv_nsec / 1000000);
			yajl_gen_map_close(s->g);
			s->emitted++;
		} else {
			s->more++;
		}
		if (s->recursive && S_ISDIR(st.st_mode) && depth + 1 < MAX_DEPTH) {
			int sub = openat2_safe(dirfd_, names[i], O_PATH | O_DIRECTORY);
			if (sub >= 0) {
				walk(s, sub, path, depth + 1);
				close(sub);
			}
		}
	}
	free_names(names, n);
	return 0;
}

int lbd_files_list(int root, const char *dir, bool recursive, yajl_gen g, struct lbd_fail *f)
{
	_cleanup_close_ int dfd = openat2_safe(root, dir[0] ? dir : ".", O_PATH | O_DIRECTORY);
	if (dfd == -ENOTDIR) {
		lbd_fail_set(f, 422, "not_a_directory", "%.200s is not a directory.", dir);
		return dfd;
	}
	if (dfd < 0) {
		fail_errno(f, dfd, "The directory", dir[0] ? dir : "/sandbox");
		return dfd;
	}
	struct list_state s = { .g = g, .recursive = recursive };
	yajl_gen_map_open(g);
	lbd_gen_key(g, "files");
	yajl_gen_array_open(g);
	int r = walk(&s, dfd, dir, dir[0] ? 1 : 0);
	yajl_gen_array_close(g);
	lbd_gen_uint(g, "more", s.more);
	yajl_gen_map_close(g);
	if (r < 0) {
		fail_errno(f, r, "Listing", dir[0] ? dir : "/sandbox");
		return r;
	}
	return 0;
}

/*
 * resolve.c — the only way lb_images turns a path taken from an archive into a file descriptor.
 *
 * Runs as root in the importing process. Every path is resolved by openat2(2) with RESOLVE_IN_ROOT (the new root's
 * descriptor acts as "/" for "..", absolute symlinks and relative ones alike, so no resolution can climb out of it)
 * and RESOLVE_NO_MAGICLINKS (no /proc/self/fd-style jumps). Everything then happens with *at() calls on the
 * resulting directory descriptor and a single, already validated name component, so a symlink planted by an
 * earlier layer or entry can redirect a write only to another place inside the same root.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#if __has_include(<linux/openat2.h>)
#include <linux/openat2.h>
#endif

#include "lb/cleanup.h"

#include "internal.h"

/* openat2(2) arrived in Linux 5.6; define its ABI when the uapi headers predate it. */
#ifndef RESOLVE_IN_ROOT
struct open_how {
	uint64_t flags;
	uint64_t mode;
	uint64_t resolve;
};
#define RESOLVE_NO_XDEV	      0x01
#define RESOLVE_NO_MAGICLINKS 0x02
#define RESOLVE_NO_SYMLINKS   0x04
#define RESOLVE_BENEATH	      0x08
#define RESOLVE_IN_ROOT	      0x10
#endif
#ifndef SYS_openat2
#define SYS_openat2 437
#endif

int lbi_open_in_root(int rootfd, const char *path, int flags, mode_t mode)
{
	struct open_how how = {
		.flags = (uint64_t)(unsigned)(flags | O_CLOEXEC),
		.mode = (flags & O_CREAT) ? mode : 0,
		.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS,
	};
	long fd;
	do {
		fd = syscall(SYS_openat2, rootfd, *path ? path : ".", &how, sizeof(how));
	} while (fd < 0 && errno == EAGAIN);
	return fd < 0 ? -errno : (int)fd;
}

int lbi_open_dir_in_root(int rootfd, const char *rel, bool create, void (*on_created)(const char *path, void *ud),
			 void *ud)
{
	int fd = lbi_open_in_root(rootfd, rel, O_RDONLY | O_DIRECTORY, 0);
	if (fd >= 0 || fd != -ENOENT || !create)
		return fd;

	/* Walk the components, making the missing ones. Each mkdirat() is relative to a descriptor that was itself
	 * resolved in the root, with one plain name, so it cannot create anything outside. */
	size_t len = strlen(rel);
	_cleanup_free_ char *prefix = malloc(len + 1);
	if (!prefix)
		return -ENOMEM;
	_cleanup_close_ int cur = lbi_open_in_root(rootfd, "", O_RDONLY | O_DIRECTORY, 0);
	if (cur < 0)
		return cur; // cppcheck-suppress memleak ; NOLINT(clang-analyzer-unix.Malloc): prefix is _cleanup_free_
	size_t start = 0;
	while (start < len) {
		size_t end = start;
		while (end < len && rel[end] != '/')
			end++;
		memcpy(prefix, rel, end);
		prefix[end] = '\0';
		int next = lbi_open_in_root(rootfd, prefix, O_RDONLY | O_DIRECTORY, 0);
		if (next == -ENOENT) {
			const char *name = prefix + start;
			if (mkdirat(cur, name, 0755) < 0 && errno != EEXIST)
				return -errno; // NOLINT(clang-analyzer-unix.Malloc): prefix is _cleanup_free_
			if (on_created)
				on_created(prefix, ud);
			next = lbi_open_in_root(rootfd, prefix, O_RDONLY | O_DIRECTORY, 0);
		}
		if (next < 0)
			return next;
		close(cur);
		cur = next;
		start = end + 1;
	}
	return TAKE_FD(cur);
}

static int remove_tree_at(int dirfd, const char *name, unsigned depth)
{
	if (depth > 2048)
		return -ELOOP;
	int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	DIR *d = fdopendir(fd);
	if (!d) {
		int r = -errno;
		close(fd);
		return r;
	}
	_cleanup_closedir_ DIR *dir = d;
	struct dirent *de;
	for (;;) {
		errno = 0;
		de = readdir(dir);
		if (!de) {
			if (errno)
				return -errno;
			break;
		}
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (unlinkat(fd, de->d_name, 0) == 0)
			continue;
		if (errno != EISDIR)
			return -errno;
		int r = remove_tree_at(fd, de->d_name, depth + 1);
		if (r < 0)
			return r;
	}
	if (unlinkat(dirfd, name, AT_REMOVEDIR) < 0)
		return -errno;
	return 0;
}

int lbi_remove_at(int dirfd, const char *name)
{
	if (unlinkat(dirfd, name, 0) == 0 || errno == ENOENT)
		return 0;
	if (errno != EISDIR)
		return -errno;
	return remove_tree_at(dirfd, name, 0);
}

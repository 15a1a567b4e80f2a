/*
 * fileio.c — bounded file helpers (see fileio.h). Runs in any lensbox process with whatever privilege it has;
 * nothing here follows a path the caller did not choose, and every read has a cap.
 */
#include "lb/fileio.h"
#include "lb/cleanup.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

int lb_write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;
	while (len > 0) {
		ssize_t n = write(fd, p, len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

int lb_read_fd(int fd, size_t max, char **ret_buf, size_t *ret_len)
{
	size_t cap = max < 4096 ? max + 1 : 4096, len = 0;
	/* A regular file's size is a good first guess (one read, no growing); it may change under us: the loop. Kernel
	 * files (cgroupfs, /proc) say 0 whatever they hold: those start at 4 KiB rather than growing from one byte. */
	struct stat st;
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0 && (uint64_t)st.st_size <= max)
		cap = (size_t)st.st_size + 1;
	_cleanup_free_ char *buf = malloc(cap + 1);
	if (!buf)
		return -ENOMEM;
	for (;;) {
		if (len == cap) {
			if (cap > max)
				return -EFBIG;
			size_t ncap = cap * 2 > max + 1 ? max + 1 : cap * 2;
			char *nb = realloc(buf, ncap + 1);
			if (!nb)
				return -ENOMEM;
			buf = nb;
			cap = ncap;
		}
		ssize_t n = read(fd, buf + len, cap - len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			break;
		len += (size_t)n;
		if (len > max)
			return -EFBIG;
	}
	buf[len] = '\0';
	*ret_buf = TAKE_PTR(buf);
	if (ret_len)
		*ret_len = len;
	return 0;
}

int lb_read_file_at(int dirfd, const char *path, size_t max, char **ret_buf, size_t *ret_len)
{
	_cleanup_close_ int fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0)
		return -errno;
	return lb_read_fd(fd, max, ret_buf, ret_len);
}

int lb_write_file_at(int dirfd, const char *path, const char *s)
{
	_cleanup_close_ int fd = openat(dirfd, path, O_WRONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0)
		return -errno;
	size_t len = strlen(s);
	ssize_t n;
	do
		n = write(fd, s, len);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	if ((size_t)n != len)
		return -EIO;
	return 0;
}

int lb_read_u64_at(int dirfd, const char *path, uint64_t *ret)
{
	_cleanup_free_ char *buf = NULL;
	int r = lb_read_file_at(dirfd, path, 4096, &buf, NULL);
	if (r < 0)
		return r;
	if (!buf) /* never on success; says so to the analyzer */
		return -EIO;
	buf[strcspn(buf, "\n")] = '\0';
	if (strcmp(buf, "max") == 0) {
		*ret = UINT64_MAX;
		return 0;
	}
	char *end;
	errno = 0;
	unsigned long long v = strtoull(buf, &end, 10);
	if (errno || end == buf || *end)
		return -EINVAL;
	*ret = v;
	return 0;
}

int lb_read_keyed_u64_at(int dirfd, const char *path, const char *key, uint64_t *ret)
{
	_cleanup_free_ char *buf = NULL;
	int r = lb_read_file_at(dirfd, path, 1 << 16, &buf, NULL);
	if (r < 0)
		return r;
	size_t klen = strlen(key);
	for (char *line = buf; line && *line;) {
		char *nl = strchr(line, '\n');
		if (nl)
			*nl = '\0';
		if (strncmp(line, key, klen) == 0 && line[klen] == ' ') {
			char *end;
			errno = 0;
			unsigned long long v = strtoull(line + klen + 1, &end, 10);
			if (errno || end == line + klen + 1)
				return -EINVAL;
			*ret = v;
			return 0;
		}
		line = nl ? nl + 1 : NULL;
	}
	return -ENOENT;
}

int lb_mkdir_p(const char *path, mode_t mode)
{
	char buf[PATH_MAX];
	size_t len = strlen(path);
	if (len == 0 || len >= sizeof(buf))
		return -ENAMETOOLONG;
	memcpy(buf, path, len + 1);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, mode) < 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(buf, mode) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

int lb_write_file_atomic(const char *path, const void *data, size_t len, mode_t mode)
{
	char tmp[PATH_MAX];
	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid()) >= sizeof(tmp))
		return -ENAMETOOLONG;
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode);
	if (fd < 0)
		return -errno;
	int r = lb_write_all(fd, data, len);
	if (r == 0 && fsync(fd) < 0)
		r = -errno;
	if (close(fd) < 0 && r == 0)
		r = -errno;
	if (r == 0 && rename(tmp, path) < 0)
		r = -errno;
	if (r < 0)
		unlink(tmp);
	return r;
}

int lb_close_fds_from(int from)
{
#ifdef SYS_close_range
	if (syscall(SYS_close_range, (unsigned)from, ~0u, 0) == 0)
		return 0;
#endif
	_cleanup_closedir_ DIR *d = opendir("/proc/self/fd");
	if (!d)
		return -errno;
	int dfd = dirfd(d);
	struct dirent *de;
	while ((de = readdir(d))) {
		char *end;
		long fd = strtol(de->d_name, &end, 10);
		if (*end || fd < from || fd == dfd)
			continue;
		close((int)fd);
	}
	return 0;
}

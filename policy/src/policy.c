/*
 * policy.c — lb_policy_load(): reads every file of a policy directory, hands each to its parser, and returns one
 * immutable struct lb_policy.
 *
 * Runs in lensboxd (root) and lensbox-runner, once at start (and on an explicit reload). Needs no privilege. The
 * runner tool, one process per sandbox, keeps the compiled seccomp BPF in a cache directory (seccomp_cache.c). Files
 * are opened relative to a directory descriptor, without following a symlink in the last component, and read with a
 * size cap, so a policy directory cannot make the loader read a device or an unbounded file. Nothing is logged; any
 * error names the file (and line) and leaves *ret untouched.
 */
#include "lb/policy.h"
#include "lb/cleanup.h"
#include "lb/policy-parse.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Reads dirfd/path as a regular file of at most LB_POLICY_FILE_MAX bytes. */
static int read_policy_file(int dirfd, const char *path, char **ret_buf, size_t *ret_len, struct lb_error *err)
{
	_cleanup_close_ int fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK);
	if (fd < 0)
		return lb_error_set(err, errno, "opening %s", path);
	struct stat st;
	if (fstat(fd, &st) < 0)
		return lb_error_set(err, errno, "stat %s", path);
	if (!S_ISREG(st.st_mode))
		return lb_error_setx(err, EINVAL, "%s: not a regular file", path);
	if (st.st_size > LB_POLICY_FILE_MAX)
		return lb_error_setx(err, EFBIG, "%s: larger than %d bytes", path, LB_POLICY_FILE_MAX);
	size_t cap = (size_t)st.st_size, len = 0;
	_cleanup_free_ char *buf = malloc(cap + 1);
	if (!buf)
		return lb_error_set(err, ENOMEM, "reading %s", path);
	/* The size was checked above; a file that grows while we read is cut at that size and noticed below. */
	while (len < cap) {
		ssize_t n = read(fd, buf + len, cap - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return lb_error_set(err, errno, "reading %s", path);
		if (n == 0)
			break;
		len += (size_t)n;
	}
	char extra;
	if (len != cap || read(fd, &extra, 1) != 0)
		// NOLINTNEXTLINE(clang-analyzer-unix.Malloc): buf is _cleanup_free_
		return lb_error_setx(err, EAGAIN, "%s: changed size while being read", path);
	buf[len] = '\0';
	*ret_buf = TAKE_PTR(buf);
	*ret_len = len;
	return 0;
}

static void policy_freep(struct lb_policy **p)
{
	lb_policy_free(*p);
}

int lb_policy_load_cached(const char *dir, const char *cache_dir, struct lb_policy **ret, struct lb_error *err)
{
	_cleanup_close_ int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return lb_error_set(err, errno, "opening policy directory %s", dir);
	__attribute__((cleanup(policy_freep))) struct lb_policy *p = calloc(1, sizeof(*p));
	if (!p || !(p->dir = strdup(dir)))
		// NOLINTNEXTLINE(clang-analyzer-unix.Malloc): p is freed by policy_freep
		return lb_error_set(err, ENOMEM, "loading policy %s", dir);

	static const char *const files[] = { "seccomp.json", "landlock.rules", "limits.conf" };
	for (size_t i = 0; i < LB_ARRAY_SIZE(files); i++) {
		_cleanup_free_ char *text = NULL;
		size_t len = 0;
		int r = read_policy_file(dfd, files[i], &text, &len, err);
		if (r < 0)
			return lb_error_wrap(err, "policy %s", dir);
		switch (i) {
		case 0:
			// NOLINTNEXTLINE(clang-analyzer-unix.Malloc): text is _cleanup_free_, freed each iteration
			r = lb_seccomp_compile_json_cached(text, len, files[i], cache_dir, &p->seccomp,
							   &p->seccomp_rules, &p->seccomp_cached, err);
			break;
		case 1:
			r = memchr(text, '\0', len) ? lb_error_setx(err, EINVAL, "%s: NUL byte", files[i])
						    : lb_landlock_parse(text, files[i], &p->landlock, err);
			break;
		default:
			r = memchr(text, '\0', len) ? lb_error_setx(err, EINVAL, "%s: NUL byte", files[i])
						    : lb_limits_parse(text, files[i], &p->limits, err);
			break;
		}
		if (r < 0)
			return lb_error_wrap(err, "policy %s", dir);
	}
	*ret = TAKE_PTR(p);
	return 0;
}

int lb_policy_load(const char *dir, struct lb_policy **ret, struct lb_error *err)
{
	return lb_policy_load_cached(dir, NULL, ret, err);
}

void lb_policy_free(struct lb_policy *p)
{
	if (!p)
		return;
	free(p->dir);
	free(p->seccomp.filter);
	lb_landlock_policy_clear(&p->landlock);
	free(p);
}

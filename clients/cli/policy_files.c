/*
 * policy_files.c — what `lensbox policy check|explain|diff` share: findings ("file:line: reason"), reading a policy
 * file safely, the throwaway network namespace the nft work happens in, and the network values lensboxd's
 * configuration sets.
 *
 * Runs in the CLI process with the invoking user's privileges. A policy file is opened relative to the directory
 * without following a symlink, non-blocking (a FIFO in its place cannot hang us), must be regular, at most
 * LB_POLICY_FILE_MAX bytes and free of NUL bytes. The throwaway namespace belongs to a child process that exits when
 * its work is done, so nothing it loads outlives it and the caller's namespaces are never touched; its answer comes
 * back through a pipe, bounded.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lb/cleanup.h"
#include "lb/fileio.h"
#include "lb/netfilter.h"
#include "lb/policy-parse.h"
#include "policy.h"

int lbc_findings_add(struct lbc_findings *f, const char *file, unsigned line, bool note, const char *fmt, ...)
{
	struct lbc_finding *nv = realloc(f->v, (f->n + 1) * sizeof(*nv));
	if (!nv)
		return -ENOMEM;
	f->v = nv;
	struct lbc_finding *x = &f->v[f->n++];
	memset(x, 0, sizeof(*x));
	snprintf(x->file, sizeof(x->file), "%s", file);
	x->line = line;
	x->note = note;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(x->reason, sizeof(x->reason), fmt, ap);
	va_end(ap);
	return 0;
}

size_t lbc_findings_errors(const struct lbc_findings *f)
{
	size_t n = 0;
	for (size_t i = 0; i < f->n; i++)
		n += !f->v[i].note;
	return n;
}

void lbc_findings_free(struct lbc_findings *f)
{
	free(f->v);
	f->v = NULL;
	f->n = 0;
}

int lbc_policy_read(int dirfd, const char *path, char **ret_text, size_t *ret_len, struct lb_error *err)
{
	_cleanup_close_ int fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK);
	if (fd < 0)
		return lb_error_set(err, errno, "cannot open");
	struct stat st;
	if (fstat(fd, &st) < 0)
		return lb_error_set(err, errno, "cannot stat");
	if (!S_ISREG(st.st_mode))
		return lb_error_setx(err, EINVAL, "not a regular file");
	if (st.st_size > (off_t)LB_POLICY_FILE_MAX)
		return lb_error_setx(err, EFBIG, "larger than %d bytes", LB_POLICY_FILE_MAX);
	_cleanup_free_ char *text = NULL;
	size_t len = 0;
	int r = lb_read_fd(fd, (size_t)LB_POLICY_FILE_MAX, &text, &len);
	if (r < 0)
		return lb_error_set(err, r, "cannot read");
	if (memchr(text, '\0', len))
		return lb_error_setx(err, EINVAL, "NUL byte at offset %zu",
				     (size_t)((char *)memchr(text, '\0', len) - text));
	*ret_text = TAKE_PTR(text);
	*ret_len = len;
	return 0;
}

/* In the child: a network namespace of its own. As root that is enough; otherwise a user namespace first, in which
 * the child is root over the new network namespace only. */
static int enter_throwaway_netns(void)
{
	if (geteuid() == 0 && unshare(CLONE_NEWNET) == 0)
		return 0;
	uid_t uid = geteuid();
	gid_t gid = getegid();
	if (unshare(CLONE_NEWUSER | CLONE_NEWNET) < 0)
		return -errno;
	char map[64];
	snprintf(map, sizeof(map), "0 %u 1", (unsigned)uid);
	if (lb_write_file_at(AT_FDCWD, "/proc/self/uid_map", map) < 0)
		return -EPERM;
	(void)lb_write_file_at(AT_FDCWD, "/proc/self/setgroups", "deny");
	snprintf(map, sizeof(map), "0 %u 1", (unsigned)gid);
	if (lb_write_file_at(AT_FDCWD, "/proc/self/gid_map", map) < 0)
		return -EPERM;
	return 0;
}

int lbc_in_throwaway_netns(int (*fn)(void *data, int out_fd), void *data, size_t max, char **ret_out, size_t *ret_len,
			   struct lb_error *err)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		return lb_error_set(err, errno, "creating a pipe");
	_cleanup_close_ int rfd = p[0];
	int wfd = p[1];
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0) {
		close(wfd);
		return lb_error_set(err, errno, "forking");
	}
	if (pid == 0) {
		close(rfd);
		int r = enter_throwaway_netns();
		if (r < 0) {
			dprintf(wfd, "\n%d", -r); /* a first line that is empty: the namespace could not be made */
			_exit(3);
		}
		_exit(fn(data, wfd) < 0 ? 1 : 0);
	}
	close(wfd);
	_cleanup_free_ char *out = NULL;
	size_t len = 0;
	int r = lb_read_fd(rfd, max, &out, &len);
	if (r < 0)
		kill(pid, SIGKILL); /* it may be blocked writing what we no longer read */
	int status = 0;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (r < 0)
		return lb_error_set(err, r, "reading the namespace's answer");
	if (WIFEXITED(status) && WEXITSTATUS(status) == 3) {
		int e = len > 1 && out[0] == '\n' ? atoi(out + 1) : EPERM;
		return lb_error_set(err, e > 0 ? e : EPERM,
				    "no throwaway network namespace can be made here (neither as root nor in a user "
				    "namespace)");
	}
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		return lb_error_setx(err, EIO, "the namespace's worker failed (status %d)", status);
	*ret_out = TAKE_PTR(out);
	*ret_len = len;
	return 0;
}

/* "IPv4[:port]" -> the upstream fields; -EINVAL otherwise. */
static int parse_upstream(const char *s, struct lbc_net_params *p)
{
	char host[16];
	const char *colon = strchr(s, ':');
	size_t n = colon ? (size_t)(colon - s) : strlen(s);
	if (n == 0 || n >= sizeof(host))
		return -EINVAL;
	memcpy(host, s, n);
	host[n] = '\0';
	struct in_addr a;
	if (inet_pton(AF_INET, host, &a) != 1)
		return -EINVAL;
	unsigned long port = 53;
	if (colon) {
		char *end;
		port = strtoul(colon + 1, &end, 10);
		if (*end || port == 0 || port > 65535)
			return -EINVAL;
	}
	snprintf(p->upstream, sizeof(p->upstream), "%s", host);
	p->upstream_port = (uint16_t)port;
	return 0;
}

static void resolv_conf_upstream(struct lbc_net_params *p)
{
	_cleanup_free_ char *text = NULL;
	size_t len;
	if (lb_read_file_at(AT_FDCWD, "/etc/resolv.conf", 1 << 16, &text, &len) < 0)
		return;
	char *save = NULL;
	for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char addr[64];
		if (sscanf(line, " nameserver %63s", addr) == 1 && parse_upstream(addr, p) == 0)
			return;
	}
}

/* One "key = value" line of lensboxd.conf, the keys the network templates need. */
static int conf_line(char *line, struct lbc_net_params *p, struct lb_error *err)
{
	char *hash = strchr(line, '#');
	if (hash)
		*hash = '\0';
	char key[32], value[48];
	if (sscanf(line, " %31[a-z_0-9] = %47s", key, value) != 2)
		return 0;
	if (strcmp(key, "network_pool") == 0) {
		snprintf(p->pool, sizeof(p->pool), "%.31s", value);
	} else if (strcmp(key, "network_pool6") == 0) {
		snprintf(p->pool6, sizeof(p->pool6), "%s", value);
	} else if (strcmp(key, "services_uid") == 0) {
		char *end;
		unsigned long v = strtoul(value, &end, 10);
		if (*end || v > 4000000000ul)
			return lb_error_setx(err, EINVAL, "services_uid: expected a number, got \"%s\"", value);
		p->services_uid = (uint32_t)v;
	} else if (strcmp(key, "dns_upstream") == 0 && parse_upstream(value, p) < 0) {
		return lb_error_setx(err, EINVAL, "dns_upstream: expected IPv4[:port], got \"%s\"", value);
	}
	return 0;
}

int lbc_net_params_read(const char *conf_path, struct lbc_net_params *ret, struct lb_error *err)
{
	struct lbc_net_params p = { .services_uid = 999999999, .upstream = "192.0.2.53", .upstream_port = 53 };
	snprintf(p.pool, sizeof(p.pool), "%s", LB_NET_DEFAULT_POOL);
	snprintf(p.pool6, sizeof(p.pool6), "%s", LB_NET_DEFAULT_POOL6);
	resolv_conf_upstream(&p);
	_cleanup_free_ char *text = NULL;
	size_t len;
	if (conf_path && lb_read_file_at(AT_FDCWD, conf_path, 1 << 20, &text, &len) == 0) {
		char *save = NULL;
		for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
			if (conf_line(line, &p, err) < 0)
				return lb_error_wrap(err, "%s", conf_path);
	}
	*ret = p;
	return 0;
}

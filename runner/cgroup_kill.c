/*
 * cgroup_kill.c — what both cgroup back ends share (cgroup.h): the leaves' names, waiting for a leaf to empty, and
 * SIGKILL of the pids a leaf lists, either while it is frozen or through pidfds proven to be those processes.
 *
 * Runs in the caller (root). Signals go only to pids read from one of our own leaves' cgroup.procs (never pid 1 of
 * the host), either while that leaf is frozen (a frozen task cannot exit, so no pid is recycled under us) or through
 * a pidfd opened before a second read that still lists the pid (a pid is not reused before its process is reaped).
 */
/* Paths built here come from bounded parts (names <= 63 bytes, mount points); a cut path only fails to open. */
#pragma GCC diagnostic ignored "-Wformat-truncation"

#include "cgroup.h"

#include "lb/cleanup.h"
#include "lb/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

const char *lb_cg_leaf_name(enum lb_cg_leaf leaf)
{
	return leaf == LB_CG_INIT ? "init" : "run";
}

int lb_cg_wait_empty(const char *dir, enum lb_cg_leaf leaf, int timeout_ms)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/%s/cgroup.procs", dir, lb_cg_leaf_name(leaf));
	for (int waited = 0;; waited++) {
		_cleanup_free_ char *s = NULL;
		size_t len = 0;
		int r = lb_read_file_at(AT_FDCWD, path, 1 << 20, &s, &len);
		if (r == -ENOENT)
			return 0;
		if (r < 0)
			return r;
		if (len == 0)
			return 0;
		if (waited * 1 >= timeout_ms)
			return -EBUSY;
		struct timespec ts = { 0, 1000000 };
		nanosleep(&ts, NULL);
	}
}

int lb_cg_sigkill_listed(const char *procs)
{
	_cleanup_free_ char *list = NULL;
	int r = lb_read_file_at(AT_FDCWD, procs, 1 << 22, &list, NULL);
	if (r < 0)
		return r;
	int n = 0;
	for (char *p = list; *p;) {
		char *end;
		long pid = strtol(p, &end, 10);
		if (end == p)
			break;
		/* A pid of our own (frozen) leaf: the sandbox's process, not a recycled one. */
		if (pid > 1 && kill((pid_t)pid, SIGKILL) == 0)
			n++;
		p = end;
		while (*p == '\n')
			p++;
	}
	return n;
}

/* Up to max pids of the list in s into pids; returns how many. */
static size_t parse_pids(const char *s, pid_t *pids, size_t max)
{
	size_t n = 0;
	for (const char *p = s; *p && n < max;) {
		char *end;
		long pid = strtol(p, &end, 10);
		if (end == p)
			break;
		if (pid > 1)
			pids[n++] = (pid_t)pid;
		p = end;
		while (*p == '\n')
			p++;
	}
	return n;
}

#define PIDFD_KILL_MAX 256 /* per call (the policy's pids limit); a longer list is finished by the next calls */

int lb_cg_sigkill_pidfds(const char *procs)
{
	_cleanup_free_ char *list = NULL;
	size_t len = 0;
	int r = lb_read_file_at(AT_FDCWD, procs, 1 << 22, &list, &len);
	if (r < 0)
		return r;
	if (len == 0)
		return 0;
	pid_t pids[PIDFD_KILL_MAX];
	int fds[PIDFD_KILL_MAX];
	size_t n = parse_pids(list, pids, PIDFD_KILL_MAX);
	for (size_t i = 0; i < n; i++)
		fds[i] = (int)syscall(SYS_pidfd_open, pids[i], 0u); /* -1: gone already */
	/* Read again: a pid listed now, whose pidfd (opened before) still reaches a process at the kill below, was that
	 * process all along (a pid is not reused before its process is reaped), so it is in our leaf; a process that is
	 * gone by then makes the kill fail with ESRCH and hits nobody. */
	free(TAKE_PTR(list));
	r = lb_read_file_at(AT_FDCWD, procs, 1 << 22, &list, &len);
	int signalled = 0;
	for (size_t i = 0; i < n; i++) {
		if (fds[i] < 0)
			continue;
		bool listed = false;
		for (const char *p = r == 0 ? list : ""; *p && !listed;) {
			char *end;
			long pid = strtol(p, &end, 10);
			if (end == p)
				break;
			listed = pid == pids[i];
			p = end;
			while (*p == '\n')
				p++;
		}
		/* Our own leaf's process, proven above; pidfd_send_signal cannot reach a recycled pid. */
		if (listed && syscall(SYS_pidfd_send_signal, fds[i], SIGKILL, NULL, 0u) == 0)
			signalled++;
		close(fds[i]);
	}
	if (r < 0)
		return r;
	return len == 0 ? 0 : signalled + 1;
}

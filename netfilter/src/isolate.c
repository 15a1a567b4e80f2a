/*
 * isolate.c — the services process: the resolver and the relay moved out of lensboxd into a child that runs as its
 * own unprivileged uid, so the parsers of a sandbox's DNS, TLS and HTTP bytes never run as root.
 *
 * Opt-in (lb_net_config.services_uid). lb_net_init() forks the child while the caller is still single-threaded (it
 * checks), so the child may use malloc and threads afterwards. The child, in order: points stdio at /dev/null and
 * closes every other inherited descriptor but its status pipe; drops supplementary groups, gid and uid (which drops
 * every capability); sets no_new_privs, non-dumpable (no ptrace by other processes of that uid) and parent-death
 * SIGKILL; starts the resolver and relay threads (unprivileged ports); reports success or the failed step on the
 * pipe; then waits to be killed.
 *
 * What the two processes share is one anonymous MAP_SHARED array, a slot per sandbox: the tier (written by the
 * parent, read by the child) and the services' refusal counter (written by the child, read by the parent). The
 * parent never trusts the child with anything but that counter, so a compromised child can at worst miscount its
 * refusals or answer DNS wrongly for sandboxes whose traffic nftables still confines.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "internal.h"
#include "lb/cleanup.h"
#include "lb/fileio.h"

struct status_msg {
	int code; /* 0 or a negative errno */
	char msg[LB_ERROR_MSG_MAX];
};

static bool single_threaded(void)
{
	_cleanup_free_ char *s = NULL;
	size_t len;
	if (lb_read_file_at(AT_FDCWD, "/proc/self/status", 1 << 16, &s, &len) < 0)
		return false;
	const char *t = strstr(s, "\nThreads:\t");
	return t && strtoul(t + 10, NULL, 10) == 1;
}

static void report(int fd, int code, const struct lb_error *err)
{
	struct status_msg m = { .code = code };
	if (err)
		snprintf(m.msg, sizeof(m.msg), "%s", err->msg);
	(void)!write(fd, &m, sizeof(m));
}

/* The child: never returns. */
static void services_child(struct lb_net *ctx, int status_fd, pid_t parent, uid_t uid, gid_t gid)
{
	struct lb_error err = { 0 };
	int null = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (null < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0 || dup2(null, 2) < 0 || dup2(status_fd, 3) < 0) {
		report(status_fd, -errno, NULL);
		_exit(1);
	}
	status_fd = 3;
	lb_close_fds_from(4); /* nothing of lensboxd's (its socket, its store) stays reachable from here */
	/* Dropping from root to uid/gid: setresuid() to a non-zero uid clears every capability set. */
	if (setgroups(0, NULL) < 0 || setresgid(gid, gid, gid) < 0 || setresuid(uid, uid, uid) < 0) {
		report(status_fd, -errno, &(struct lb_error){ .msg = "dropping to the services uid" });
		_exit(1);
	}
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 || prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0 ||
	    prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0) {
		report(status_fd, -errno, &(struct lb_error){ .msg = "prctl" });
		_exit(1);
	}
	if (getppid() != parent) /* lensboxd died before PDEATHSIG was set */
		_exit(1);
	sigset_t all;
	sigemptyset(&all);
	sigprocmask(SIG_SETMASK, &all, NULL);
	int r = lb_resolver_start(ctx, &err);
	if (r == 0)
		r = lb_relay_start(ctx, &err);
	report(status_fd, r, &err);
	close(status_fd);
	if (r < 0)
		_exit(1);
	for (;;)
		pause();
}

int lb_services_spawn_isolated(struct lb_net *ctx, uid_t uid, gid_t gid, struct lb_error *err)
{
	if (!single_threaded())
		return lb_error_setx(
		    err, EBUSY,
		    "an isolated services process is forked, so lb_net_init() must run while the process "
		    "is single-threaded");
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		return lb_error_set(err, errno, "creating the services status pipe");
	pid_t parent = getpid();
	pid_t pid = fork();
	if (pid < 0) {
		int e = errno;
		close(p[0]);
		close(p[1]);
		return lb_error_set(err, e, "forking the services process");
	}
	if (pid == 0) {
		close(p[0]);
		services_child(ctx, p[1], parent, uid, gid);
	}
	close(p[1]);
	_cleanup_close_ int rd = p[0];
	_cleanup_pid_ pid_t child = pid; /* killed and reaped unless it reports success */
	struct pollfd pf = { .fd = rd, .events = POLLIN };
	struct status_msg m = { .code = -ETIMEDOUT };
	if (poll(&pf, 1, 5000) <= 0 || read(rd, &m, sizeof(m)) != (ssize_t)sizeof(m))
		return lb_error_setx(err, ETIMEDOUT, "the services process did not report within 5 s");
	if (m.code < 0)
		return lb_error_setx(err, -m.code, "the services process failed: %s: %s", m.msg, strerror(-m.code));
	ctx->services_pid = TAKE_FD(child);
	return 0;
}

void lb_services_kill(struct lb_net *ctx)
{
	if (ctx->services_pid <= 0)
		return;
	kill(ctx->services_pid, SIGKILL);
	while (waitpid(ctx->services_pid, NULL, 0) < 0 && errno == EINTR)
		;
	ctx->services_pid = 0;
}

bool lb_services_alive(struct lb_net *ctx)
{
	if (ctx->services_pid <= 0)
		return false;
	return waitpid(ctx->services_pid, NULL, WNOHANG) == 0;
}

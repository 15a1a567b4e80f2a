/*
 * netns.c — a sandbox's network namespace: loopback up, every port bindable, nothing else.
 *
 * Two callers:
 *  - lb_netns_setup() runs in a sandbox's init child (sandbox.c), inside the network namespace it has just made
 *    (owned by its new user namespace), on the caller's memory: thin syscall wrappers only.
 *  - lb_netns_make() runs in the caller (lensboxd's core, root, the host's user namespace) on a thread that does
 *    nothing else at that moment, off any request's path: it makes a namespace ahead of time for a start to place
 *    its init child in (lb_sandbox_spec.ready_netns), ~0.7 ms less on the start's own path on a 2-core host.
 *
 * A namespace made ahead is owned by the host's user namespace instead of the sandbox's. That takes nothing from
 * the sandbox's programs (they hold no capability in either: exec.c drops them all before the program runs) and
 * gives nothing to anyone: only host root could configure it before, as now. What is in it is the same: lo and its
 * addresses, no route out; the network tiers add their veth from the host side either way (netfilter/).
 * docs/threat-model.md says so.
 *
 * Invariant: lb_netns_make() leaves the calling thread in the network namespace it was in, or fails saying that it
 * could not (the thread must then make no connection of its own).
 */
#include "internal.h"

#include "lb/cleanup.h"

#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

/* Brings up the loopback interface of the caller's network namespace. */
static int loopback_up(void)
{
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -errno;
	struct ifreq ifr;
	memset(&ifr, 0, sizeof(ifr));
	memcpy(ifr.ifr_name, "lo", 3);
	int r = 0;
	if (ioctl(s, SIOCGIFFLAGS, &ifr) < 0)
		r = -errno;
	else {
		ifr.ifr_flags = (short)(ifr.ifr_flags | IFF_UP);
		if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0)
			r = -errno;
	}
	close(s);
	return r;
}

/* Writes text to an existing file (a sysctl), without libc's stdio. */
static int write_file_str(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	size_t len = strlen(text);
	ssize_t n = write(fd, text, len);
	int r = n == (ssize_t)len ? 0 : n < 0 ? -errno : -EIO;
	close(fd);
	return r;
}

int lb_netns_setup(const char **step)
{
	int r = loopback_up();
	if (r < 0) {
		*step = "bringing up lo";
		return r;
	}
	/* Any port may be bound, as root could: the namespace's ports are the sandbox's alone, and nothing outside can
	 * open a connection into it (docs/threat-model.md). /proc/sys/net is the opener's network namespace's. */
	if ((r = write_file_str("/proc/sys/net/ipv4/ip_unprivileged_port_start", "0")) < 0)
		*step = "allowing every port to be bound (ip_unprivileged_port_start)";
	return r;
}

int lb_netns_make(struct lb_error *err)
{
	_cleanup_close_ int home = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	if (home < 0)
		return lb_error_set(err, errno, "opening this thread's network namespace");
	/* Privileged (CAP_SYS_ADMIN): a new, empty network namespace for this thread alone (the namespace is a
	 * thread's own: the process's other threads stay where they are). */
	if (unshare(CLONE_NEWNET) < 0)
		return lb_error_set(err, errno, "creating a network namespace");
	const char *step = "opening it";
	int r = lb_netns_setup(&step);
	_cleanup_close_ int fd = -1;
	/* Never 0, 1 or 2: lb_sandbox_spec.ready_netns takes 0 for none. */
	if (r == 0) {
		int ns = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
		if (ns < 0 || (fd = fcntl(ns, F_DUPFD_CLOEXEC, 3)) < 0)
			r = -errno;
		if (ns >= 0)
			close(ns);
	}
	/* Privileged (CAP_SYS_ADMIN): back where the thread was, which is where it came from. */
	if (setns(home, CLONE_NEWNET) < 0)
		return lb_error_set(err, errno, "returning to this thread's network namespace");
	if (r < 0)
		return lb_error_set(err, -r, "making a network namespace ahead: %s", step);
	return TAKE_FD(fd);
}

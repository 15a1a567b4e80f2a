/*
 * confine.c — the seccomp filter of the services' worker (isolate.c), the process that parses a sandbox's DNS, TLS
 * and HTTP bytes.
 *
 * Runs in the worker, once, before its first thread and its first byte from a sandbox; the filter is inherited by
 * every thread and cannot be removed. The worker is already unprivileged (services_uid, no capabilities,
 * no_new_privs), so this is not about privilege but about what a worker taken over through a parser bug can still
 * reach. It keeps what the resolver and relay use (threads, sockets of the internet families, pipes and splice,
 * poll, time, memory) and refuses, with EPERM:
 *
 *   - signals to any process but itself (kill, tgkill and the sigqueue calls only with its own pid; tkill and the
 *     pidfd calls never): the supervisor, of the same uid, can no longer be killed by its worker, so a worker that
 *     dies is always replaced;
 *   - new processes and programs (clone without CLONE_THREAD, fork, vfork, execve, execveat; clone3 answers ENOSYS so
 *     the C library creates its threads with clone, whose flags can be checked);
 *   - new namespaces (unshare, setns), so no user namespace gives it capabilities over fresh kernel objects;
 *   - other processes' memory (ptrace, process_vm_readv/writev, kcmp);
 *   - kernel interfaces it never needs: bpf, perf_event_open, userfaultfd, io_uring, the key rings, the mount API,
 *     open_by_handle_at, and sockets of any family but AF_UNIX, AF_INET, AF_INET6 and AF_NETLINK's NETLINK_ROUTE;
 *   - every other architecture's system calls (i386, and x32 on amd64): the filter's default for a foreign
 *     architecture kills the process, and x32 numbers are refused like a foreign architecture.
 *
 * Before the seccomp filter, Landlock at the best ABI the kernel offers (none: skipped, the filter and
 * policy/network/services.nft still hold; the ABI is reported): no file or directory opened by path (the services
 * open none: a worker taken over cannot read what other users left world-readable), TCP connect only to ports 80,
 * 443 and the DNS upstream's (ABI 4), no TCP bind (their sockets are bound before), and no signal or abstract Unix
 * socket outside the worker (ABI 6).
 *
 * A library function (no logging): lb_services_confine() returns 0 or a negative errno with err filled.
 */
#include <errno.h>
#include <sched.h>
#include <seccomp.h>
#include <stddef.h>
#include <linux/netlink.h>
#include <sys/socket.h>
#include <unistd.h>

#include "internal.h"
#include "lb/cleanup.h"
#include "lb/landlock.h"

/* Calls refused outright (EPERM). Names unknown to this libseccomp or kernel are skipped. */
static const char *const refused[] = {
	"fork",
	"vfork",
	"execve",
	"execveat",
	"tkill",
	"pidfd_open",
	"pidfd_send_signal",
	"pidfd_getfd",
	"ptrace",
	"process_vm_readv",
	"process_vm_writev",
	"kcmp",
	"unshare",
	"setns",
	"bpf",
	"perf_event_open",
	"userfaultfd",
	"io_uring_setup",
	"io_uring_enter",
	"io_uring_register",
	"keyctl",
	"add_key",
	"request_key",
	"mount",
	"umount2",
	"fsopen",
	"fsconfig",
	"fsmount",
	"fspick",
	"move_mount",
	"open_tree",
	"mount_setattr",
	"pivot_root",
	"chroot",
	"open_by_handle_at",
};

/* Signal calls whose first argument is the target process: allowed only with the worker's own pid. */
static const char *const self_only[] = { "kill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo" };

static int add(scmp_filter_ctx sc, uint32_t action, const char *name, unsigned n, const struct scmp_arg_cmp *cmp,
	       struct lb_error *err)
{
	int nr = seccomp_syscall_resolve_name(name);
	if (nr == __NR_SCMP_ERROR)
		return 0; /* not a call of this architecture: nothing to refuse */
	int r = seccomp_rule_add_array(sc, action, nr, n, cmp);
	return r < 0 ? lb_error_set(err, r, "confining the services: a rule for %s", name) : 0;
}

int lb_services_confine(uint16_t upstream_port, int *ret_landlock_abi, struct lb_error *err)
{
	/* no_new_privs is set (the supervisor did it, and it is inherited), as Landlock requires. */
	const uint16_t ports[] = { 80, 443, upstream_port };
	int r = lb_landlock_deny_all(ports, LB_ARRAY_SIZE(ports), ret_landlock_abi, err);
	if (r < 0)
		return lb_error_wrap(err, "confining the services");
	scmp_filter_ctx sc = seccomp_init(SCMP_ACT_ALLOW);
	if (!sc)
		return lb_error_set(err, ENOMEM, "confining the services: seccomp_init");
	const uint32_t eperm = SCMP_ACT_ERRNO(EPERM);
	pid_t self = getpid();
	for (size_t i = 0; i < LB_ARRAY_SIZE(refused) && r == 0; i++)
		r = add(sc, eperm, refused[i], 0, NULL, err);
	for (size_t i = 0; i < LB_ARRAY_SIZE(self_only) && r == 0; i++) {
		struct scmp_arg_cmp other = SCMP_A0(SCMP_CMP_NE, (scmp_datum_t)self);
		r = add(sc, eperm, self_only[i], 1, &other, err);
	}
	if (r == 0) {
		struct scmp_arg_cmp not_thread = SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_THREAD, 0);
		r = add(sc, eperm, "clone", 1, &not_thread, err);
	}
	if (r == 0)
		r = add(sc, SCMP_ACT_ERRNO(ENOSYS), "clone3", 0, NULL, err);
	/* Socket families: AF_UNIX (1), AF_INET (2), AF_INET6 (10), and AF_NETLINK (16) for NETLINK_ROUTE only (the
	 * services ask the kernel's route to an address, to refuse the host's own; changing anything there needs a
	 * capability). */
	static const char *const socket_calls[] = { "socket", "socketpair" };
	for (size_t i = 0; i < LB_ARRAY_SIZE(socket_calls) && r == 0; i++) {
		const char *name = socket_calls[i];
		struct scmp_arg_cmp c = SCMP_A0(SCMP_CMP_EQ, AF_UNSPEC);
		r = add(sc, eperm, name, 1, &c, err);
		for (scmp_datum_t family = AF_INET + 1; family < AF_NETLINK + 1 && r == 0; family++) {
			if (family == AF_INET6)
				continue;
			if (family == AF_NETLINK) {
				struct scmp_arg_cmp nl[2] = { SCMP_A0(SCMP_CMP_EQ, AF_NETLINK),
							      SCMP_A2(SCMP_CMP_NE, NETLINK_ROUTE) };
				r = add(sc, eperm, name, 2, nl, err);
				continue;
			}
			c = (struct scmp_arg_cmp)SCMP_A0(SCMP_CMP_EQ, family);
			r = add(sc, eperm, name, 1, &c, err);
		}
		c = (struct scmp_arg_cmp)SCMP_A0(SCMP_CMP_GT, AF_NETLINK);
		if (r == 0)
			r = add(sc, eperm, name, 1, &c, err);
	}
	/* Foreign architectures are killed, not refused: a worker calling through the i386 table is no longer running
	 * the services' code. libseccomp's amd64 filter sends x32 numbers (bit 30 set) to the same action. */
	if (r == 0 && (r = seccomp_attr_set(sc, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS)) < 0)
		r = lb_error_set(err, r, "confining the services: the foreign-architecture action");
	if (r == 0 && (r = seccomp_load(sc)) < 0)
		r = lb_error_set(err, r, "confining the services: loading the filter");
	seccomp_release(sc);
	return r;
}

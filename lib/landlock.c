/*
 * landlock.c — a Landlock domain that denies a process every file and directory opened by path, every TCP bind,
 * every TCP connect but to the ports given, and (ABI 6) signals and abstract Unix sockets outside its domain.
 *
 * Used by the two processes of lensbox that parse hostile bytes and open no file: lensboxd's API process
 * (supervisor/api/confine.c) and the services' worker (netfilter/src/confine.c). Runs in the process confining
 * itself, once; the domain is inherited by every thread and child and cannot be left. Needs no privilege but
 * no_new_privs, which the caller sets first. A library function: returns 0 or -errno with err filled.
 */
#include <errno.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "lb/cleanup.h"
#include "lb/landlock-abi.h"
#include "lb/landlock.h"

int lb_landlock_deny_all(const uint16_t *connect_ports, size_t n_ports, int *ret_abi, struct lb_error *err)
{
	int abi = lb_landlock_kernel_abi();
	if (abi > LB_LANDLOCK_MAX_KNOWN_ABI)
		abi = LB_LANDLOCK_MAX_KNOWN_ABI;
	*ret_abi = abi;
	if (abi == 0)
		return 0;
	struct lb_ruleset_attr attr = { .handled_access_fs = lb_landlock_fs_all(abi) };
	size_t size = sizeof(__u64);
	if (abi >= 4) {
		attr.handled_access_net = LB_LANDLOCK_ACCESS_NET_BIND_TCP | LB_LANDLOCK_ACCESS_NET_CONNECT_TCP;
		size = 2 * sizeof(__u64);
	}
	if (abi >= 6) {
		attr.scoped = LB_LANDLOCK_SCOPE_ABSTRACT_UNIX | LB_LANDLOCK_SCOPE_SIGNAL;
		size = sizeof(attr);
	}
	_cleanup_close_ int fd = (int)syscall(SYS_landlock_create_ruleset, &attr, size, 0);
	if (fd < 0)
		return lb_error_set(err, errno, "creating the Landlock ruleset (ABI %d)", abi);
	for (size_t i = 0; abi >= 4 && i < n_ports; i++) {
		struct lb_net_port_attr rule = { .allowed_access = LB_LANDLOCK_ACCESS_NET_CONNECT_TCP,
						 .port = connect_ports[i] };
		if (syscall(SYS_landlock_add_rule, fd, LB_LANDLOCK_RULE_NET_PORT, &rule, 0) < 0)
			return lb_error_set(err, errno, "a Landlock rule for port %u", connect_ports[i]);
	}
	if (prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) != 1)
		return lb_error_setx(err, EPERM, "no_new_privs is not set, as entering a Landlock domain requires");
	if (syscall(SYS_landlock_restrict_self, fd, 0) < 0)
		return lb_error_set(err, errno, "entering the Landlock domain");
	return 0;
}

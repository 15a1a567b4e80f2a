/*
 * landlock.c — the Landlock ruleset programs run under, through raw syscalls.
 *
 * Runs in the caller (root) when a sandbox starts: the ruleset is built once against the sandbox's own files and
 * kept as an fd; each exec's child calls landlock_restrict_self() with it. Paths of the policy are resolved inside
 * the sandbox's root through /proc/<init>/root with openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS), so a symlink
 * the sandbox planted can never make us grant a rule on a host inode.
 *
 * Access groups of policy.h map to Landlock rights: READ = read file + read dir, EXEC = execute, WRITE = write,
 * truncate, remove, make dir/reg/sock/fifo/sym and refer (never make char/block devices), DEV_IOCTL = ioctl on
 * devices. Every filesystem right the ABI knows is handled, so whatever no rule grants is denied. ABI 6 adds the
 * scopes (abstract Unix sockets, signals). TCP (ABI 4) is deliberately not handled: Landlock can only name ports,
 * not addresses, so it cannot let a program reach its own loopback listener while refusing the same port
 * elsewhere. A sandbox's network namespace is its own (tier off: only lo), nothing outside can open a connection
 * into it (base.nft's from_host and through_host), and where its traffic may go is decided on the host, by
 * address and port, in nftables (docs/threat-model.md, "Servers inside a sandbox").
 * Never silently unenforced: a kernel below the policy's minimum fails the start unless the policy's
 * degraded_min_abi allows it, and the enforced ABI is reported.
 */
/* Paths built here come from bounded parts (names <= 63 bytes, mount points, run_dir checked by the caller);
 * a path cut at PATH_MAX only fails to open. */
#pragma GCC diagnostic ignored "-Wformat-truncation"

#include "internal.h"

#include "lb/cleanup.h"
#include "lb/landlock-abi.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/landlock.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define FS_READ (LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR)
#define FS_EXEC (LANDLOCK_ACCESS_FS_EXECUTE)
#define FS_WRITE                                                                                          \
	(LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_REMOVE_DIR | LANDLOCK_ACCESS_FS_REMOVE_FILE | \
	 LANDLOCK_ACCESS_FS_MAKE_DIR | LANDLOCK_ACCESS_FS_MAKE_REG | LANDLOCK_ACCESS_FS_MAKE_SOCK |       \
	 LANDLOCK_ACCESS_FS_MAKE_FIFO | LANDLOCK_ACCESS_FS_MAKE_SYM | LANDLOCK_ACCESS_FS_REFER |          \
	 LANDLOCK_ACCESS_FS_TRUNCATE)
/* Rights that make sense on a file (not a directory) rule. */
#define FS_FILE_RIGHTS                                                                               \
	(LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_READ_FILE | \
	 LANDLOCK_ACCESS_FS_TRUNCATE | LANDLOCK_ACCESS_FS_IOCTL_DEV)

int lb_landlock_abi(void)
{
	return lb_landlock_kernel_abi();
}

static __u64 rights_of(unsigned access)
{
	__u64 r = 0;
	if (access & LB_LL_READ)
		r |= FS_READ;
	if (access & LB_LL_EXEC)
		r |= FS_EXEC;
	if (access & LB_LL_WRITE)
		r |= FS_WRITE;
	if (access & LB_LL_DEV_IOCTL)
		r |= LANDLOCK_ACCESS_FS_IOCTL_DEV;
	return r;
}

int lb_landlock_build(const struct lb_policy *policy, pid_t pid, int *ret_fd, int *ret_abi, struct lb_error *err)
{
	const struct lb_landlock_policy *lp = &policy->landlock;
	int kabi = lb_landlock_abi();
	int abi = kabi > LB_LANDLOCK_MAX_KNOWN_ABI ? LB_LANDLOCK_MAX_KNOWN_ABI : kabi;
	if (abi < lp->min_abi) {
		if (abi < lp->degraded_min_abi || lp->degraded_min_abi >= lp->min_abi)
			return lb_error_setx(
			    err, ENOTSUP, "Landlock ABI %d on this kernel is below the policy's minimum %d%s", kabi,
			    lp->min_abi, kabi == 0 ? " (Landlock is off: boot with lsm=...,landlock)" : "");
	}
	if (abi == 0) {
		/* Only reachable when the policy explicitly allows running without Landlock (degraded_min_abi 0). */
		*ret_fd = -1;
		*ret_abi = 0;
		return 0;
	}

	__u64 handled = lb_landlock_fs_all(abi);
	struct lb_ruleset_attr attr = { .handled_access_fs = handled };
	size_t attr_size = sizeof(__u64);
	if (abi >= 6) {
		if (lp->scope_abstract_unix)
			attr.scoped |= LB_LANDLOCK_SCOPE_ABSTRACT_UNIX;
		if (lp->scope_signal)
			attr.scoped |= LB_LANDLOCK_SCOPE_SIGNAL;
		attr_size = sizeof(attr);
	}
	_cleanup_close_ int rfd = (int)syscall(SYS_landlock_create_ruleset, &attr, attr_size, 0);
	if (rfd < 0)
		return lb_error_set(err, errno, "creating the Landlock ruleset (ABI %d)", abi);

	char rootpath[64];
	snprintf(rootpath, sizeof(rootpath), "/proc/%d/root", (int)pid);
	_cleanup_close_ int root = open(rootpath, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (root < 0)
		return lb_error_set(err, errno, "opening the sandbox root %s", rootpath);

	for (size_t i = 0; i < lp->n_rules; i++) {
		const struct lb_landlock_path_rule *rule = &lp->rules[i];
		struct open_how how = { .flags = O_PATH | O_CLOEXEC,
					.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS };
		/* Resolved inside the sandbox's root: ".." and absolute symlinks stop at its "/". */
		_cleanup_close_ int fd = (int)syscall(SYS_openat2, root, rule->path, &how, sizeof(how));
		if (fd < 0) {
			if (errno == ENOENT)
				continue; /* the image has no such path: nothing to grant */
			return lb_error_set(err, errno, "opening Landlock rule path %s in the sandbox", rule->path);
		}
		struct stat st;
		if (fstat(fd, &st) < 0)
			return lb_error_set(err, errno, "inspecting %s", rule->path);
		__u64 allowed = rights_of(rule->access) & handled;
		if (!S_ISDIR(st.st_mode))
			allowed &= FS_FILE_RIGHTS;
		if (!allowed)
			continue;
		struct landlock_path_beneath_attr pb = { .allowed_access = allowed, .parent_fd = fd };
		if (syscall(SYS_landlock_add_rule, rfd, LANDLOCK_RULE_PATH_BENEATH, &pb, 0) < 0)
			return lb_error_set(err, errno, "adding the Landlock rule for %s", rule->path);
	}

	*ret_fd = TAKE_FD(rfd);
	*ret_abi = abi;
	return 0;
}

/*
 * landlock-abi.h — what Landlock's later ABIs add, for code built against older uapi headers (Debian 12's are Linux
 * 6.1's: ABI 2), and the two questions every user of it asks: which ABI the kernel offers, and every filesystem right
 * that ABI knows (handle them all, and whatever no rule grants is denied).
 *
 * Used by runner/landlock.c (the sandboxes' rulesets) and netfilter/src/confine.c (the services worker's). Header
 * only; the constants are the kernel's include/uapi/linux/landlock.h.
 */
#ifndef LB_LANDLOCK_ABI_H
#define LB_LANDLOCK_ABI_H

#include <linux/landlock.h>
#include <linux/types.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef LANDLOCK_ACCESS_FS_TRUNCATE
#define LANDLOCK_ACCESS_FS_TRUNCATE (1ULL << 14) /* ABI 3 */
#endif
#ifndef LANDLOCK_ACCESS_FS_IOCTL_DEV
#define LANDLOCK_ACCESS_FS_IOCTL_DEV (1ULL << 15) /* ABI 5 */
#endif
#define LB_LANDLOCK_RULE_NET_PORT	   2	       /* ABI 4 */
#define LB_LANDLOCK_ACCESS_NET_BIND_TCP	   (1ULL << 0) /* ABI 4 */
#define LB_LANDLOCK_ACCESS_NET_CONNECT_TCP (1ULL << 1) /* ABI 4 */
#define LB_LANDLOCK_SCOPE_ABSTRACT_UNIX	   (1ULL << 0) /* ABI 6 */
#define LB_LANDLOCK_SCOPE_SIGNAL	   (1ULL << 1) /* ABI 6 */
#define LB_LANDLOCK_MAX_KNOWN_ABI	   7
/* ABI 7: landlock_restrict_self() flags and the audit records of denials (AUDIT_LANDLOCK_*). */
#define LB_LANDLOCK_RESTRICT_SELF_LOG_NEW_EXEC_ON (1U << 1)
#define LB_AUDIT_LANDLOCK_ACCESS		  1423
#define LB_AUDIT_LANDLOCK_DOMAIN		  1424

/* The ABI 6 layout of struct landlock_ruleset_attr (the 6.1 header's has only handled_access_fs). Pass the size the
 * ABI knows: 8 bytes below ABI 4, 16 below ABI 6. */
struct lb_ruleset_attr {
	__u64 handled_access_fs;
	__u64 handled_access_net;
	__u64 scoped;
};

/* struct landlock_net_port_attr (ABI 4). */
struct lb_net_port_attr {
	__u64 allowed_access;
	__u64 port;
};

/* The kernel's best ABI, 0 when Landlock is off. */
static inline int lb_landlock_kernel_abi(void)
{
	long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
	return abi < 0 ? 0 : (int)abi;
}

/* Every filesystem right ABI abi knows. */
static inline __u64 lb_landlock_fs_all(int abi)
{
	__u64 h = (LANDLOCK_ACCESS_FS_MAKE_SYM << 1) - 1; /* ABI 1: bits 0..12 */
	if (abi >= 2)
		h |= LANDLOCK_ACCESS_FS_REFER;
	if (abi >= 3)
		h |= LANDLOCK_ACCESS_FS_TRUNCATE;
	if (abi >= 5)
		h |= LANDLOCK_ACCESS_FS_IOCTL_DEV;
	return h;
}

#endif

/*
 * policy.h — the reviewed policy, loaded once and shared read-only by every sandbox.
 *
 * The files in policy/ (seccomp.json in Docker's profile format, landlock.rules, limits.conf, network/…) are what
 * security reviewers audit. lb_policy_load() parses and validates them and compiles the seccomp profile to BPF once;
 * the result is immutable and may be used from any thread. Loading never logs; errors name the file and line.
 * Runs in lensboxd (root) and the lensbox-runner tool; nothing here needs privilege.
 */
#ifndef LB_POLICY_H
#define LB_POLICY_H

#include <linux/filter.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lb/error.h"

/* Landlock filesystem access groups as the rules file names them. */
enum lb_landlock_access {
	LB_LL_READ = 1u << 0,	   /* read files, list directories */
	LB_LL_EXEC = 1u << 1,	   /* execute files */
	LB_LL_WRITE = 1u << 2,	   /* write, truncate, create, remove, rename, link, make dirs/fifos/sockets/symlinks */
	LB_LL_DEV_IOCTL = 1u << 3, /* ioctl on device nodes (ABI 5) */
};

struct lb_landlock_path_rule {
	char *path;	 /* absolute path inside the sandbox root */
	unsigned access; /* enum lb_landlock_access bits */
};

struct lb_landlock_policy {
	int min_abi;	      /* start fails on a kernel below this ... */
	int degraded_min_abi; /* ... unless it is at least this (== min_abi when no degraded level is allowed) */
	struct lb_landlock_path_rule *rules;
	size_t n_rules;
	bool scope_abstract_unix; /* ABI 6 */
	bool scope_signal;	  /* ABI 6 */
};

struct lb_limits_policy {
	uint32_t cpu_millicores; /* default per sandbox */
	uint64_t memory_bytes;
	uint64_t pids;
	uint64_t disk_bytes;
	uint64_t tmp_bytes;	  /* /tmp tmpfs size */
	uint64_t shm_bytes;	  /* /dev/shm tmpfs size */
	uint64_t output_bytes;	  /* default captured bytes of stdout (head) and stderr (tail) */
	uint32_t timeout_seconds; /* default run time limit */
	uint32_t sandbox_uid;	  /* uid/gid the program runs as inside the sandbox */
	uint32_t sandbox_gid;
};

struct lb_policy {
	char *dir;		   /* the directory it was loaded from */
	struct sock_fprog seccomp; /* compiled allowlist for the native architecture */
	size_t seccomp_rules;	   /* number of syscall names allowed (for reports) */
	bool seccomp_cached;	   /* the BPF came from the compiled-BPF cache (lb_policy_load_cached) */
	struct lb_landlock_policy landlock;
	struct lb_limits_policy limits;
};

/* Loads and validates every policy file under dir. On success *ret is the caller's (lb_policy_free). */
int lb_policy_load(const char *dir, struct lb_policy **ret, struct lb_error *err);
/* The same, with the seccomp BPF kept between processes in cache_dir (policy/src/seccomp_cache.c): for short-lived
 * loaders such as lensbox-runner. cache_dir must be a directory only the caller's euid can write (created 0700 if
 * missing; its parents are the caller's responsibility); a cache that is missing, stale, altered or not private is
 * ignored and the profile compiled, so the result is always what lb_policy_load() would give. cache_dir NULL is
 * lb_policy_load(). */
int lb_policy_load_cached(const char *dir, const char *cache_dir, struct lb_policy **ret, struct lb_error *err);
void lb_policy_free(struct lb_policy *p);

#endif

/*
 * policy-parse.h — the parsers behind lb_policy_load(), one per policy file, exposed so unit tests and fuzz targets
 * can feed them bytes directly.
 *
 * Pure functions run by lensboxd (root) and lensbox-runner; none needs privilege, none logs. Every input is treated
 * as hostile: the caller passes a NUL-terminated buffer of at most LB_POLICY_FILE_MAX bytes; errors name the file
 * (the `name` argument) and, for line formats, the line. ret_ outputs are written only on success.
 */
#ifndef LB_POLICY_PARSE_H
#define LB_POLICY_PARSE_H

#include "lb/policy.h"

/* No policy file may be larger than this (the real ones are a few KiB). */
#define LB_POLICY_FILE_MAX (1 << 20)

/* Parses a Docker-format seccomp profile, validates every key, action, operator and syscall name, compiles it with
 * libseccomp for the native architecture and exports the BPF program. On success *ret_prog owns a malloc'd filter
 * (free ret_prog->filter) and *ret_allowed counts the native syscalls with at least one SCMP_ACT_ALLOW rule. */
int lb_seccomp_compile_json(const char *text, size_t len, const char *name, struct sock_fprog *ret_prog,
			    size_t *ret_allowed, struct lb_error *err);

/* The compiled-BPF cache (seccomp_cache.c): entries in cache_dir keyed by the profile's exact bytes, the
 * architecture, the libseccomp build and the compiler. lb_seccomp_cache_get() fills *ret_prog (the caller frees
 * ret_prog->filter) and *ret_allowed only on a hit; a miss, a stale, altered or foreign entry, or a directory or
 * entry that is not the caller's alone returns a negative errno (-ENOENT, -ESTALE, -EBADMSG, -EPERM...) naming why.
 * lb_seccomp_cache_put() stores one entry atomically (best effort; the directory is created 0700 if missing). */
int lb_seccomp_cache_get(const char *cache_dir, const char *text, size_t len, struct sock_fprog *ret_prog,
			 size_t *ret_allowed, struct lb_error *err);
int lb_seccomp_cache_put(const char *cache_dir, const char *text, size_t len, const struct sock_fprog *prog,
			 size_t allowed, struct lb_error *err);
/* lb_seccomp_compile_json() through the cache: a hit skips parsing and compiling (the entry holds the very bytes
 * that were validated when it was stored), a miss compiles and stores. cache_dir NULL: no cache. Errors are the
 * compiler's only; *ret_hit says whether the cache answered. */
int lb_seccomp_compile_json_cached(const char *text, size_t len, const char *name, const char *cache_dir,
				   struct sock_fprog *ret_prog, size_t *ret_allowed, bool *ret_hit,
				   struct lb_error *err);

/* Parses landlock.rules (see docs/policy.md). On success *ret is filled; release it with lb_landlock_policy_clear. */
int lb_landlock_parse(const char *text, const char *name, struct lb_landlock_policy *ret, struct lb_error *err);
void lb_landlock_policy_clear(struct lb_landlock_policy *p);

/* Parses limits.conf: every key exactly once, values through lib/units.h. */
int lb_limits_parse(const char *text, const char *name, struct lb_limits_policy *ret, struct lb_error *err);

#endif

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
#define LB_POLICY_FILE_MAX (1024 * 1024)

/* Parses a Docker-format seccomp profile, validates every key, action, operator and syscall name, compiles it with
 * libseccomp for the native architecture and exports the BPF program. On success *ret_prog owns a malloc'd filter
 * (free ret_prog->filter) and *ret_allowed counts the native syscalls with at least one SCMP_ACT_ALLOW rule. */
int lb_seccomp_compile_json(const char *text, size_t len, const char *name, struct sock_fprog *ret_prog,
			    size_t *ret_allowed, struct lb_error *err);

/* Parses landlock.rules (see docs/policy.md). On success *ret is filled; release it with lb_landlock_policy_clear. */
int lb_landlock_parse(const char *text, const char *name, struct lb_landlock_policy *ret, struct lb_error *err);
void lb_landlock_policy_clear(struct lb_landlock_policy *p);

/* Parses limits.conf: every key exactly once, values through lib/units.h. */
int lb_limits_parse(const char *text, const char *name, struct lb_limits_policy *ret, struct lb_error *err);

/* Parses network/tiers.conf into tiers[0..2] = off, packages, web; every tier exactly once. On success the port
 * arrays are the caller's (lb_tiers_clear). */
int lb_tiers_parse(const char *text, const char *name, struct lb_tier_policy ret[3], struct lb_error *err);
void lb_tiers_clear(struct lb_tier_policy tiers[3]);

#endif

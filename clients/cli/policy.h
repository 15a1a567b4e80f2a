/*
 * policy.h — `lensbox policy check|explain|diff`: what a security reviewer asks of a policy directory, answered
 * without a running lensboxd (library lb_cli; policy_cmd.c prints the answers).
 *
 * Runs in the CLI process with the invoking user's privileges. A policy directory is input a reviewer may have edited
 * by hand: every file is opened without following a symlink, must be a regular file of at most LB_POLICY_FILE_MAX
 * bytes, and goes through the project's own parsers (lb_policy, lb_netfilter's lists and template renderer); nothing
 * here trusts it to be well formed. The nft checks and the table lensboxd should have loaded are built in a throwaway
 * network namespace of a child process (a new user namespace too when the caller is not root), never in the
 * caller's. None of these functions prints or exits; each returns 0 or a negative errno with *err filled.
 */
#ifndef LBC_POLICY_H
#define LBC_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lb/error.h"
#include "lb/policy.h"

/* ---- findings: "file:line: reason" (policy_files.c) ---- */

struct lbc_finding {
	char file[64]; /* relative to the policy directory: "landlock.rules", "network/web.nft" */
	unsigned line; /* 1-based; 0: the file as a whole */
	bool note;     /* true: said for the reader, not an error (a check that could not run here) */
	char reason[LB_ERROR_MSG_MAX];
};

struct lbc_findings {
	struct lbc_finding *v;
	size_t n;
};

/* Appends one finding; -ENOMEM. */
int lbc_findings_add(struct lbc_findings *f, const char *file, unsigned line, bool note, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
size_t lbc_findings_errors(const struct lbc_findings *f);
void lbc_findings_free(struct lbc_findings *f);

/* Reads dirfd/path (relative, no symlink followed) as a regular file of at most LB_POLICY_FILE_MAX bytes with no
 * NUL byte. *ret_text is the caller's. */
int lbc_policy_read(int dirfd, const char *path, char **ret_text, size_t *ret_len, struct lb_error *err);

/* Runs fn(data, out_fd) in a child process inside a new network namespace (and a new user namespace when not root),
 * collecting what it writes to out_fd (at most max bytes) into *ret_out. -EPERM (with *err saying why) when no
 * namespace can be made here. */
int lbc_in_throwaway_netns(int (*fn)(void *data, int out_fd), void *data, size_t max, char **ret_out, size_t *ret_len,
			   struct lb_error *err);

/* The values lensboxd fills the network templates with, as its configuration sets them (policy_files.c reads the
 * keys network_pool, network_pool6, services_uid and dns_upstream of lensboxd.conf; lensboxd's defaults otherwise). */
struct lbc_net_params {
	char pool[32];
	char pool6[48];
	uint32_t services_uid;
	char upstream[16];
	uint16_t upstream_port;
};
/* conf_path NULL or unreadable: the defaults (the upstream is /etc/resolv.conf's first IPv4 name server, or
 * 192.0.2.53 when there is none, which only the services' rules mention). */
int lbc_net_params_read(const char *conf_path, struct lbc_net_params *ret, struct lb_error *err);

/* ---- check (policy_check.c) ---- */

/* The line on which the value at JSON path want ("syscalls[3].names[0]", seccomp.c's notation) starts in text[0..len);
 * 0 when it is not found. A small scanner (strings, nesting, keys) bounded in depth: the text may be anything. */
unsigned lbc_json_path_line(const char *text, size_t len, const char *want);

/* Parses every file of dir and appends every problem to *findings (errors of every file, not only the first). With
 * nft, the filled templates also go through nftables in a throwaway namespace; where that is impossible a note says
 * so. Returns a negative errno only when the check itself could not run (memory, dir not openable). */
int lbc_policy_check(const char *dir, bool nft, struct lbc_findings *findings, struct lb_error *err);

/* ---- seccomp profiles flattened (seccomp_resolve.c; the logic of policy/tools/seccomp-resolve) ---- */

/* One (syscall, action, argument comparisons) of a profile as it applies to one architecture and no capability. */
struct lbc_sc_rule {
	char name[48];
	char action[24]; /* "ALLOW", "ERRNO(1)", "KILL_PROCESS" ... */
	char args[200];	 /* "" or "a0 MASKED_EQ 0x10000000/0x10000000 a1 EQ 0x1" (valueTwo shown when not 0) */
	bool native;	 /* the name is a syscall of this machine's architecture */
};

struct lbc_sc_profile {
	char default_action[24];
	struct lbc_sc_rule *v; /* sorted by name, action, args; each once */
	size_t n;
};

/* Flattens a Docker-format profile for arch ("amd64" or "arm64") and no capability: Docker's includes/excludes on
 * arches and caps are resolved, minKernel is taken as met (our kernels are newer). Bounded: at most 4096 rules. */
int lbc_seccomp_resolve(const char *json, size_t len, const char *arch, struct lbc_sc_profile *ret,
			struct lb_error *err);
void lbc_sc_profile_free(struct lbc_sc_profile *p);
/* Whether name has any ALLOW rule in p. */
bool lbc_sc_allows(const struct lbc_sc_profile *p, const char *name);

/* ---- explain (policy_explain.c) ---- */

/* A syscall compared with Docker's default profile. */
enum lbc_sc_diff {
	LBC_SC_SAME,	     /* allowed by both with the same argument rules */
	LBC_SC_ONLY_LENSBOX, /* allowed here, refused by Docker */
	LBC_SC_ONLY_DOCKER,  /* allowed by Docker, refused here */
	LBC_SC_ARGS_DIFFER,  /* allowed by both, with other argument rules */
};

struct lbc_sc_compare {
	char name[48];
	enum lbc_sc_diff diff;
	char here[2048];   /* our rules for it, "; "-separated ("ALLOW", "ERRNO(1)", "ALLOW [a0 EQ 0x1]") */
	char docker[2048]; /* Docker's, or its default */
	bool native;
};

/* One network tier in words, and the rules the words came from. */
struct lbc_tier_words {
	char tier[16];
	char summary[768];
	char **unexplained; /* rule lines of the tier's template no sentence covers (shown verbatim) */
	size_t n_unexplained;
};

struct lbc_explain {
	struct lbc_sc_profile ours, docker;
	char docker_source[160];
	struct lbc_sc_compare *cmp; /* every name allowed by either profile, sorted */
	size_t n_cmp;
	struct lb_landlock_policy landlock;
	struct lb_limits_policy limits;
	struct lbc_tier_words tiers[3]; /* off, packages, web */
	size_t n_denied4, n_denied6;
	char **package_names;
	size_t n_package_names;
};

/* Loads and explains dir; docker_json (len bytes) is Docker's default profile (the CLI carries moby's), named
 * docker_source in the output. Any file that does not parse is an error (run `check` for all of them). */
int lbc_policy_explain(const char *dir, const char *docker_json, size_t docker_len, const char *docker_source,
		       struct lbc_explain *ret, struct lb_error *err);
void lbc_explain_free(struct lbc_explain *e);

/* ---- diff (policy_diff.c) ---- */

struct lbc_drift {
	char what[96];	 /* "rule in chain to_host", "chain sb0_fwd", "set denied4" */
	char change[16]; /* "added", "removed", "changed" */
	char detail[512];
};

struct lbc_diff {
	bool table_loaded;  /* false: no `inet lensbox` here (lensboxd not running, or networking off) */
	unsigned sandboxes; /* per-sandbox rule sets found (sb<N>_*) connected by map elements */
	unsigned warm;	    /* ... and without any: warm slots lensboxd keeps loaded for the next sandbox */
	struct lbc_drift *v;
	size_t n;
};

/* Compares the live table `inet lensbox` of the caller's network namespace with the table lensboxd would load from
 * dir with params: the base chains, sets and maps structurally (per-sandbox map elements aside), and each
 * sandbox's sb<N>_* objects with its tier's template for slot N. Needs CAP_NET_ADMIN to read the table. */
int lbc_policy_diff(const char *dir, const struct lbc_net_params *params, struct lbc_diff *ret, struct lb_error *err);
void lbc_diff_free(struct lbc_diff *d);

#endif

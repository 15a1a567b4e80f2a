/*
 * nftpolicy.h — the text lensbox's nftables templates become, and the live table as nft lists it: what lensboxd
 * loads (net.c) and what `lensbox policy` checks and compares it with (clients/cli/policy_*.c) come from one place.
 *
 * Rendering is pure (no privilege, no netlink, no logging): a template from policy/network/ plus the values of
 * struct lb_nft_vars gives the nft commands lensboxd runs. lb_nft_exec() and lb_nft_list_json() talk to the kernel
 * through libnftables in the caller's network namespace (CAP_NET_ADMIN there; a reviewer's tool runs them in a
 * throwaway namespace of its own, or reads the host's table as root). Errors fill *err; nothing here logs.
 */
#ifndef LB_NFTPOLICY_H
#define LB_NFTPOLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lb/error.h"
#include "lb/netparse.h"

/* The templates of policy/network/ and the words in double braces each may use (nothing else is filled). */
enum lb_nft_template {
	LB_NFT_BASE,	 /* base.nft: the table, its base chains, maps and denied sets */
	LB_NFT_WEB,	 /* web.nft: one `web` sandbox's chains */
	LB_NFT_PACKAGES, /* packages.nft: one `packages` sandbox's chains */
	LB_NFT_OFFLOAD,	 /* offload.nft: the flowtable */
	LB_NFT_SERVICES, /* services.nft: what the resolver and relay may send */
	LB_NFT_TEMPLATE_COUNT
};

/* "base.nft" ... "services.nft" */
const char *lb_nft_template_file(enum lb_nft_template t);
/* The words t may use, *ret_n of them (static strings). */
const char *const *lb_nft_template_words(enum lb_nft_template t, size_t *ret_n);

/* Every value a template word stands for. Unused fields may stay zero for templates that do not use them. */
struct lb_nft_vars {
	char pool[32];		/* POOL4: "10.231.0.0/16" */
	uint16_t resolver_port; /* RESOLVER_PORT */
	uint16_t relay_port;	/* RELAY_PORT */
	unsigned slot;		/* SB sb<slot>, IFACE lbh<slot>, GATEWAY/ADDR from pool_base */
	uint32_t pool_base;	/* the pool's first address, host order (the slot's /30 is pool_base + 4*slot) */
	const char *name;	/* NAME: the sandbox's name, validated by the caller (a comment) */
	uint32_t services_uid;	/* SERVICES_UID */
	char upstream[16];	/* UPSTREAM: dotted IPv4 */
	uint16_t upstream_port; /* UPSTREAM_PORT */
	const char *uplinks;	/* UPLINKS: "\"up0\", \"eth1\"" */
};

/* Fills vars' pool fields and ports from a pool CIDR (NULL: the default) and ports (0: the defaults).
 * -EINVAL when the pool is not an IPv4 range with prefix 8..28. */
int lb_nft_vars_init(struct lb_nft_vars *vars, const char *pool, uint16_t resolver_port, uint16_t relay_port);

/* The commands template t (its text tmpl) stands for with vars filled in. *ret is the caller's. */
int lb_nft_render(enum lb_nft_template t, const char *tmpl, const struct lb_nft_vars *vars, char **ret,
		  struct lb_error *err);

/* The commands that fill the sets denied4 and denied6 with the ranges of denied (empty families are skipped). */
int lb_nft_render_denied(const struct lb_cidr_list *denied, char **ret, struct lb_error *err);

/* Runs cmds as one nft transaction in the caller's network namespace; dry_run: checked by the kernel, not kept
 * (nft --check). *ret_out (may be NULL) gets nft's output. nft's error names the position as "FILE:LINE:COL: Error:"
 * (the text goes to nft through a memfd, FILE being its /proc/self/fd path). */
int lb_nft_exec(const char *cmds, bool dry_run, char **ret_out, struct lb_error *err);

/* `nft -j list table inet lensbox` in the caller's network namespace: the JSON text (caller frees), -ENOENT when
 * the table does not exist. */
int lb_nft_list_json(char **ret, struct lb_error *err);
/* The same table as nft's text, each rule followed by "# handle N" (to show a rule of the JSON listing as people
 * read it). */
int lb_nft_list_text(char **ret, struct lb_error *err);

#endif

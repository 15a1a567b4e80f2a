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
	char pool6[48];		/* POOL6: "fd6c:6273::/64" */
	uint8_t pool6_base[16]; /* the IPv6 pool's first address (the slot's /126 is pool6_base + 4*slot) */
	uint16_t resolver_port; /* RESOLVER_PORT */
	uint16_t relay_port;	/* RELAY_PORT */
	unsigned slot;		/* SB sb<slot>, IFACE lbh<slot>, GATEWAY/ADDR from pool_base, GATEWAY6/ADDR6 from
				   pool6_base */
	uint32_t pool_base;	/* the pool's first address, host order (the slot's /30 is pool_base + 4*slot) */
	uint32_t services_uid;	/* SERVICES_UID */
	char upstream[16];	/* UPSTREAM: dotted IPv4 */
	uint16_t upstream_port; /* UPSTREAM_PORT */
	const char *uplinks;	/* UPLINKS: "\"up0\", \"eth1\"" */
};

/* Fills vars' pool fields and ports from the pools' CIDRs (NULL: the defaults; pool6 "off": the default's
 * addresses still fill the words, no sandbox gets them) and ports (0: the defaults). -EINVAL when the pool is not an
 * IPv4 range with prefix 8..28 or pool6 not an IPv6 one with prefix 8..96 (lb_net_pool6_parse). */
int lb_nft_vars_init(struct lb_nft_vars *vars, const char *pool, const char *pool6, uint16_t resolver_port,
		     uint16_t relay_port);

/* Parses an IPv6 pool ("off" or NULL: the default's range, *ret_on false for "off"): host bits zero, prefix 8..96,
 * so that the slots' /126s fit in its low 32 bits. */
int lb_net_pool6_parse(const char *s, struct lb_cidr *ret, bool *ret_on);
/* The address k (1: gateway, 2: sandbox) of slot's /126 in the IPv6 pool whose first address is base. */
void lb_net_pool6_addr(const uint8_t base[16], unsigned slot, unsigned k, uint8_t ret[16]);

/* The commands template t (its text tmpl) stands for with vars filled in. *ret is the caller's. */
int lb_nft_render(enum lb_nft_template t, const char *tmpl, const struct lb_nft_vars *vars, char **ret,
		  struct lb_error *err);

/* A tier file, rendered, is two parts: its slot's objects (the `table inet lensbox { ... }` block: chains, sets,
 * counter, all named sb<N>_*) and, after them, the `add element` lines that connect the slot's interface to them
 * through the base table's verdict maps. A warm slot has the first part loaded and not the second. Returns the
 * offset of the first `add element` line (the length of the first part), or -EINVAL when the text has none or
 * anything but such lines after it. */
#define LB_NFT_MAX_ELEMENTS 8
struct lb_nft_element {
	char map[32];	/* a verdict map of base.nft, "sandbox_pre" */
	char key[16];	/* an interface name, "lbh3" */
	char chain[64]; /* the chain the key jumps to, "sb3_pre" */
};
/* Splits rendered tier text as above; els (may be NULL) gets the elements, at most LB_NFT_MAX_ELEMENTS, each line
 * being exactly `add element inet lensbox MAP { "KEY" : jump CHAIN }`. */
int lb_nft_split_elements(const char *rendered, struct lb_nft_element *els, size_t *ret_n, size_t *ret_head_len);

/* The commands that fill the sets denied4 and denied6 with the ranges of denied (empty families are skipped). Each
 * IPv4 range is also denied in its NAT64 form, 64:ff9b::<range> (RFC 6052's well-known prefix, the one embedding
 * of an IPv4 address that is routed on the internet: lb_cidr_list_denies6). */
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

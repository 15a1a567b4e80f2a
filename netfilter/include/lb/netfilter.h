/*
 * netfilter.h — per-sandbox network tiers (off, packages, web), enforced in the host's network namespace.
 *
 * Used by lensboxd (root, many threads) and the lensbox-net tool. lb_net_init() loads lensbox's own nftables table
 * `inet lensbox` from policy/network/base.nft and starts two services in the calling process: the DNS resolver every
 * sandbox with a network uses, and the relay that `packages` sandboxes' TCP 80/443 is redirected to (it reads the TLS
 * SNI or HTTP Host without terminating TLS and connects only to listed names). lb_net_attach() gives one sandbox a
 * veth pair, a /30 from the pool, a default route and its tier's rules (policy/network/<tier>.nft with its interface
 * and sets substituted); lb_net_detach() removes all of it. Nothing inside a sandbox holds CAP_NET_ADMIN over any of
 * it: every rule and service lives on the host side.
 *
 * Threading: every function may be called from any thread; the context serialises its own state. The network
 * namespace that the context manages is the one the caller was in at lb_net_init() (host_netns_fd).
 * Errors: functions return 0 or a negative errno and fill *err with a sentence naming the failed step.
 */
#ifndef LB_NETFILTER_H
#define LB_NETFILTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lb/error.h"
#include "lb/tier.h"

#define LB_NET_DEFAULT_POOL "10.231.0.0/16"
/* The IPv6 pool `web` sandboxes' /126 links come from: a unique local range (RFC 4193; inside fc00::/7, so no
 * sandbox reaches another's address, denied.list) that the host translates onto its uplink (NAT66, base.nft). */
#define LB_NET_DEFAULT_POOL6	     "fd6c:6273::/64"
#define LB_NET_DEFAULT_RESOLVER_PORT 10053
#define LB_NET_DEFAULT_RELAY_PORT    10080
#define LB_NET_IFPREFIX		     "lbh" /* host-side veth names: lbh<slot> */
/* The name server every networked sandbox is given: a link-local address that never leaves the host. The sandbox's
 * DNS to it (or to its gateway) is redirected to lensboxd's resolver; DNS to anything else is refused. */
#define LB_NET_RESOLVER_ADDR "169.254.53.53"
/* The largest TCP segment (GSO unit) the host hands to its side of a `packages` sandbox's veth, IPv4: 256 KiB where
 * the kernel has IPv4 BIG TCP (Linux >= 6.3; older kernels, and other tiers, keep 64 KiB). Fewer, larger packets are
 * what make the packages relay nearly as fast as a direct download (docs/network.md, "Benchmark"). */
#define LB_NET_DEFAULT_VETH_GSO_MAX (256u * 1024)
#define LB_NET_MAX_VETH_GSO_MAX	    524280u /* the veth driver's own limit */
/* The services' bounds over every sandbox, and each sandbox's default share of them (lb_net_config). */
#define LB_NET_DNS_INFLIGHT_MAX		 64u
#define LB_NET_RELAY_CONNS_MAX		 256u
#define LB_NET_DEFAULT_DNS_PER_SANDBOX	 16u
#define LB_NET_DEFAULT_RELAY_PER_SANDBOX 64u

#define LB_NET_MAX_WARM_SLOTS 64

struct lb_net_config {
	const char *policy_dir;	  /* holds network/base.nft, web.nft, packages.nft, denied.list, packages.list */
	const char *pool;	  /* IPv4 CIDR, prefix 8..28; each sandbox takes a /30. NULL: LB_NET_DEFAULT_POOL */
	const char *pool6;	  /* IPv6 CIDR, prefix 8..96; each `web` sandbox takes the /126 of its slot. NULL:
				     LB_NET_DEFAULT_POOL6; "off": sandboxes get no IPv6 */
	const char *dns_upstream; /* "IPv4" or "IPv4:port" the resolver and relay ask; NULL: first IPv4 nameserver
				     of /etc/resolv.conf */
	uint16_t resolver_port;	  /* host port the sandboxes' DNS is redirected to; 0: default */
	uint16_t relay_port;	  /* host port the packages tier's TCP 80/443 is redirected to; 0: default */
	const char *const *extra_package_names; /* added to packages.list; may be NULL */
	bool skip_npm_lookup; /* false (the default): add the host of `npm config get registry` when npm is installed */
	uint32_t connect_timeout_ms; /* relay to upstream and DNS upstream wait; 0: 3000 */
	uint32_t services_uid; /* non-zero: run the resolver and relay as this uid (and gid), with no capabilities, in
				  a worker process that a supervisor process of the same uid replaces when it ends;
				  lb_net_init() must then be called while single-threaded. 0: they run as threads of
				  the caller */
	uint32_t veth_gso_max; /* 0: LB_NET_DEFAULT_VETH_GSO_MAX; else 65536..LB_NET_MAX_VETH_GSO_MAX. 65536 keeps the
				  kernel's classic size (the relay then splices instead of copying) */
	unsigned warm_slots; /* slots of each networked tier kept loaded (their sb<N>_* rules, no veth, no map element)
				for the next sandbox of that tier, which then only adds its veth and four map elements;
				at most LB_NET_MAX_WARM_SLOTS. 0 (the default): a slot's rules are loaded at attach and
				removed at detach */
	uint32_t dns_per_sandbox; /* DNS queries one sandbox may have in flight (fair share of LB_NET_DNS_INFLIGHT_MAX);
				     0: LB_NET_DEFAULT_DNS_PER_SANDBOX. More are dropped and counted as refusals */
	uint32_t relay_per_sandbox; /* relayed connections one sandbox may hold (of LB_NET_RELAY_CONNS_MAX); 0:
				       LB_NET_DEFAULT_RELAY_PER_SANDBOX. More are reset and counted as refusals */
	bool no_flow_offload;	    /* false (the default): `web` sandboxes' established connections take the flowtable
				       of policy/network/offload.nft where the kernel has flowtables; true: never (to
				       compare, or to rule it out) */
};

struct lb_net; /* opaque context */

/* What the host-side firewall looks like, for /v1/health. */
struct lb_net_health {
	bool table_loaded;	   /* `inet lensbox` is present */
	bool foreign_forward_drop; /* another table's forward chain has policy drop (Docker, ufw, firewalld) */
	char foreign_forward[128]; /* e.g. "ip filter FORWARD (policy drop)"; empty when none. Blocks `web`. */
	bool foreign_input_drop;   /* the same on the input hook (ufw's default): blocks the resolver and the relay */
	char foreign_input[128];
	bool ip_forward;     /* net.ipv4.ip_forward (all interfaces) */
	char uplinks[256];   /* interfaces lensbox turned forwarding on for (default routes' devices, now or earlier) */
	unsigned sandboxes;  /* attached sandboxes */
	unsigned warm_slots; /* slots whose rules stay loaded for the next sandbox of their tier */
	char dns_upstream[32];
	unsigned n_package_names;
	char npm_registry[128];	      /* the npm registry host added from npm's configuration; empty when none */
	bool services_isolated;	      /* the resolver and relay run in unprivileged processes of their own ... */
	bool services_alive;	      /* ... a worker serves (false while one is replaced, or for good once the
					 supervisor is gone: DNS and the relay are then refused) */
	bool services_supervised;     /* isolated: the keeper runs, so a supervisor or worker that ends is replaced;
					 false for good once it is gone (lb_net_free and lb_net_init again bring them
					 back) */
	unsigned services_keeper_pid; /* isolated: the keeper (the caller's child, parent of the supervisor) */
	unsigned services_pid;	      /* the supervisor serving now (isolated; 0 while it is replaced) or the caller */
	unsigned services_worker_pid; /* the worker serving now (isolated; 0 while it is replaced) or the caller */
	unsigned services_restarts;   /* workers started after the first (a worker ended: crashed or killed) */
	unsigned services_supervisor_restarts; /* supervisors started after the first (one ended) */
	bool services_crash_loop;	       /* workers or supervisors keep dying within 1 s of starting: each is
						  replaced only 5 s after the last, until one serves 10 s */
	int services_landlock_abi;  /* isolated: the Landlock ABI the worker confined itself with (0: none) */
	bool flow_offload;	    /* the flowtable `fastpath` (offload.nft) is loaded: `web` connections take it */
	char flow_offload_why[160]; /* when not: why (the kernel's refusal, "no uplink", "turned off") */
	bool ipv6;	    /* `web` sandboxes get IPv6 (lb_net_config.pool6, the kernel's forwarding, a default route;
			       `packages` ones need no forwarding) */
	char ipv6_why[256]; /* when not: why, and what would turn it on */
};

/* What lb_net_attach() built. */
struct lb_net_info {
	char host_ifname[16];	 /* lbh<slot> in the host namespace */
	char sandbox_ifname[16]; /* eth0 in the sandbox */
	char address[16];	 /* the sandbox's IPv4 address (dotted) */
	char gateway[16];	 /* the host side, also the sandbox's resolver */
	char address6[46];	 /* `web` with IPv6: the sandbox's IPv6 address; "" otherwise */
	char gateway6[46];	 /* ... and the host side's */
	unsigned prefix;	 /* 30 */
	unsigned slot;
};

/* Loads policy/network/ (denied.list, packages.list, base.nft; plus the npm registry's host unless
 * cfg->skip_npm_lookup, which runs npm for up to 5 s), replaces any existing `inet lensbox` table with a
 * fresh one, adds the flowtable of offload.nft when the kernel has flowtables (unless cfg->no_flow_offload; a kernel
 * without them is no error: lb_net_health() says why offload is off), marks the slots of veths left by an earlier run
 * as taken (lb_net_reconcile() removes them) and starts the resolver and relay threads. Must run in the host's network
 * namespace as root. On success *ret is the caller's (lb_net_free). */
int lb_net_init(const struct lb_net_config *cfg, struct lb_net **ret, struct lb_error *err);

/* Stops the services and frees ctx. Leaves the table and the sandboxes' veths in place (a restart reconciles);
 * call lb_net_unload() first to remove everything. NULL is fine. */
void lb_net_free(struct lb_net *ctx);

/* Checks that lensbox's table and every attached sandbox's rules are still loaded: another tool may have flushed the
 * ruleset (`nft flush ruleset`, a firewall reload). Whatever is missing is loaded again; meanwhile the affected
 * sandboxes' host-side veths are set down, so they fail closed, not open. *ret_repaired (may be NULL) counts what was
 * reloaded (0: all was in place). lensboxd calls it from its timer. */
int lb_net_verify(struct lb_net *ctx, unsigned *ret_repaired, struct lb_error *err);

/* Follows the default route: an interface that carries one and was not configured yet (a new uplink, or one that came
 * back as a new device) gets IPv4 forwarding on and joins the flowtable, as lb_net_init() does for the uplinks it
 * finds. Interfaces that no longer carry one stay configured. *ret_added (may be NULL) counts the new ones. lensboxd
 * calls it from its timer, before lb_net_verify(); it is not thread-safe against itself. */
int lb_net_follow_uplinks(struct lb_net *ctx, unsigned *ret_added, struct lb_error *err);

/* Removes every sandbox's veth and the whole `inet lensbox` table. */
int lb_net_unload(struct lb_net *ctx, struct lb_error *err);

/* Plugs sandbox name (^[a-z0-9][a-z0-9._-]{0,62}$) into tier "off", "packages" or "web". netns_fd is the sandbox's
 * network namespace (borrowed). "off" touches nothing but lo, which is brought up; ret_info (may be NULL) then
 * has empty names. An earlier attachment of the same name is removed first. On failure nothing is left behind. */
int lb_net_attach(struct lb_net *ctx, const char *name, int netns_fd, enum lb_tier tier, struct lb_net_info *ret_info,
		  struct lb_error *err);

/* Removes the sandbox's veth, subnet, sets, chains and counters. -ENOENT when nothing is attached under name. */
int lb_net_detach(struct lb_net *ctx, const char *name, struct lb_error *err);

/* Removes every veth and per-sandbox rule whose sandbox is not among known[0..n_known) (after a crash); known may be
 * NULL when n_known is 0, which removes every sandbox. *ret_removed (may be NULL) counts what was removed. */
int lb_net_reconcile(struct lb_net *ctx, const char *const *known, size_t n_known, unsigned *ret_removed,
		     struct lb_error *err);

/* Packets of sandbox name refused so far (network_blocked): the nftables counter plus the relay's and resolver's
 * refusals. Subtract two readings to count one run. */
int lb_net_blocked(struct lb_net *ctx, const char *name, uint64_t *ret, struct lb_error *err);

/* Fills h; never fails. */
void lb_net_health(struct lb_net *ctx, struct lb_net_health *h);
/* Only the services_* fields of lb_net_health(), without its nft listings: cheap enough for a timer. */
void lb_net_services_health(struct lb_net *ctx, struct lb_net_health *h);

/* The /etc/resolv.conf a sandbox of tier should get (runner's lb_sandbox_spec.resolv_conf): a name server line for
 * "packages" and "web", NULL for "off" (no resolver at all). The string is static. */
const char *lb_net_resolv_conf(enum lb_tier tier);

/* The host of `npm config get registry` when npm is installed (runs it with a 5 s limit, as the caller). Writes
 * the host name into buf. -ENOENT when npm is missing or prints nothing usable. */
int lb_net_npm_registry_host(char *buf, size_t size);

#endif

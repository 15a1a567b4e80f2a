/*
 * internal.h — what the files of netfilter/ share: the context, the nftables and netlink helpers, the services.
 *
 * Not installed; only the files of netfilter/src include it. The context's mutable state (slots, counters) is guarded
 * by ctx->lock; the lists and the configuration are immutable after lb_net_init().
 */
#ifndef LB_NETFILTER_INTERNAL_H
#define LB_NETFILTER_INTERNAL_H

#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "lb/netfilter.h"
#include "lb/tier.h"
#include "lb/netparse.h"
#include "lb/nftpolicy.h"

struct lb_slot {
	bool used;
	enum lb_tier tier;
	bool flowdev; /* its veth was added to the flowtable at attach */
	char name[64];
	int host_ifindex;
	unsigned dns_inflight; /* this sandbox's share of the services' bounds, so one cannot starve others */
	unsigned relay_conns;
};

#define LB_NET_MAX_UPLINKS 16

/* An interface that carries a default route of the main table (sandboxes' traffic leaves by it). */
struct lb_uplink {
	int ifindex;
	char name[16];
};

struct lb_service; /* a running resolver or relay */

/* Shared with the isolated services process (isolate.c): written by the parent, read by the services ... */
struct lb_shared_slot {
	_Atomic unsigned tier;	   /* enum lb_tier; LB_TIER_OFF: nobody there, the services refuse */
	_Atomic uint64_t refusals; /* ... and this one the other way round */
	_Atomic bool big_segments; /* written by the parent: the host-side veth takes segments over 64 KiB */
	_Atomic bool ipv6;	   /* written by the parent: the sandbox has IPv6 (the resolver answers AAAA) */
};
/* The table's shape outside the sandboxes' sb<N>_* objects: a base chain flushed, deleted or given a rule of
 * someone else's changes it. */
struct lb_nft_shape {
	unsigned chains, rules;
};
/* The isolated services' supervisor (isolate.c) writes this MAP_SHARED page; the parent only reports it, never acts
 * on it (a compromised worker can write it too). */
/* One kind of services process that is replaced when it ends (the worker, or the supervisor). */
struct lb_services_line {
	_Atomic int pid;	   /* serving now; 0 while it is being replaced */
	_Atomic unsigned restarts; /* started after the first */
	_Atomic uint64_t born_ms;  /* CLOCK_MONOTONIC ms when the one serving now started */
	_Atomic bool looping;	   /* they kept dying young: replacements are RESTART_MAX_MS apart; a crash loop
				      while the one serving now has served less than 10 s */
};
struct lb_services_status {
	struct lb_services_line worker, supervisor;
	_Atomic int last_status;  /* wait status of the last worker or supervisor that ended */
	_Atomic int landlock_abi; /* the Landlock ABI the serving worker confined itself with (written by it) */
};
struct relay_conn; /* one relayed connection (services.c) */

#define LB_RELAY_CONNS_MAX ((int)LB_NET_RELAY_CONNS_MAX)

struct lb_net {
	pthread_mutex_t lock;
	char *policy_dir;
	uint32_t pool_base; /* host order */
	unsigned pool_prefix;
	uint8_t pool6_base[16]; /* the IPv6 pool's first address (lb_net_pool6_addr) */
	unsigned pool6_prefix;
	bool ipv6;		 /* sandboxes get IPv6: the pool is on and the kernel has IPv6 (init) */
	bool ipv6_forwarding;	 /* ... and web's can be forwarded (init) */
	bool ipv6_per_interface; /* ... by force_forwarding on the sandboxes' veths and the uplinks */
	char ipv6_why[256];	 /* why not, when !ipv6 or !ipv6_forwarding */
	atomic_bool route6;	 /* the host has an IPv6 default route (lb_net_follow_uplinks): without one, IPv6
				    destinations are unroutable, so web sandboxes attached meanwhile get no IPv6 */
	struct lb_slot *slots;
	size_t n_slots;
	struct lb_cidr_list denied; /* denied.list plus the pool */
	struct lb_name_list packages;
	struct sockaddr_in upstream;
	uint16_t resolver_port, relay_port;
	uint32_t timeout_ms;
	uint32_t dns_per_sandbox, relay_per_sandbox; /* each sandbox's share of the services' bounds */
	uint32_t veth_gso_max;			     /* cfg->veth_gso_max or its default */
	unsigned warm_slots;			     /* cfg->warm_slots: kept per tier (0: none) */
	/* under lock: the warm slots of each tier, !used, their objects (sb<N>_*) loaded without map element or veth
	 * for the next sandbox of that tier */
	unsigned warm[LB_TIER_COUNT][LB_NET_MAX_WARM_SLOTS];
	unsigned n_warm[LB_TIER_COUNT];
	char *web_template, *packages_template;
	char *offload_template;			     /* offload.nft; NULL when cfg->no_flow_offload */
	char *services_template;		     /* services.nft; NULL unless the services run as services_uid */
	struct lb_nft_shape base_shape;		     /* the base chains as loaded (verify compares) */
	struct lb_uplink uplink[LB_NET_MAX_UPLINKS]; /* the uplinks lensbox configured (forwarding on, flowtable
						      device), with the ifindex each was configured at; under lock */
	size_t n_uplinks;
	bool offload;		/* the flowtable is part of the table: web sandboxes' veths join it. Written at
				   init and by verify (under lock); read under lock */
	char offload_why[160];	/* why not, when !offload */
	char npm_registry[128]; /* host added from `npm config get registry`, or "" */
	struct lb_service *resolver, *relay;
	atomic_uint relay_conns;		     /* live relay connections (bounded by LB_RELAY_CONNS_MAX) */
	struct relay_conn *live[LB_RELAY_CONNS_MAX]; /* under lock: so stopping can wake them */
	bool stopping;				     /* under lock: no new upstream connection */
	struct lb_shared_slot *shared;		     /* n_slots entries, MAP_SHARED */
	pid_t services_pid;			     /* the isolated services' supervisor, 0 when in-process */
	int services_pidfd;			     /* its pidfd, when services_pid > 0 */
	struct lb_services_status *services_status;  /* MAP_SHARED, when isolated */
	uid_t services_uid;
	atomic_uint dns_inflight;
	struct lb_dns_cache *dns_cache; /* the upstream's answers (upstream.c); used by the services only */
	int conf4_fd, conf6_fd;		/* lb_veth_open_conf() of the host's namespace, kept (or -errno) */
};

/* ---- ruleset.c: libnftables ---- */

/* Runs nft commands as one transaction. *ret_out (may be NULL) gets nft's output (caller frees). */
int lb_nft_run(const char *cmds, char **ret_out, struct lb_error *err);
/* Replaces every "{{KEY}}" of tmpl with its value; unknown keys are an error. */
int lb_template_fill(const char *tmpl, const char *const *keys, const char *const *vals, size_t n, char **ret,
		     struct lb_error *err);
/* Deletes the per-sandbox objects (sb<slot>_*), map elements (lbh<slot>) and flowtable device (lbh<slot>) that
 * exist. */
int lb_nft_remove_slot(unsigned slot, struct lb_error *err);
/* Slots that have any object in the table (or their veth in the flowtable): bitmap of n bits set (caller's array of
 * n bools). */
int lb_nft_slots_present(bool *present, size_t n, struct lb_nft_shape *ret_shape, struct lb_error *err);
int lb_nft_counter_packets(unsigned slot, uint64_t *ret, struct lb_error *err);

/* ---- nftlink.c: libnftnl, straight to the kernel (no libnftables cache) ---- */

/* Adds (add) or removes the n elements (n <= LB_NFT_MAX_ELEMENTS) of lensbox's verdict maps in one transaction. */
int lb_nftlink_elements(bool add, const struct lb_nft_element *els, size_t n, struct lb_error *err);
/* Reads the packet count of lensbox's counter name (reset: and zeroes it, in the same step). */
int lb_nftlink_counter(const char *name, bool reset, uint64_t *ret_packets, struct lb_error *err);
/* The flowtable's name (offload.nft) and the command adding (add=true) or removing ifname from its devices. */
#define LB_NFT_FLOWTABLE "fastpath"
int lb_nft_flowtable_device_cmd(bool add, const char *ifname, char **ret, struct lb_error *err);
/* Whether the flowtable exists in lensbox's table. */
bool lb_nft_flowtable_present(void);
/* Whether some other table has a base chain on hook_name ("forward", "input") with policy drop; describes the
 * first in desc. */
int lb_nft_foreign_drop(const char *hook_name, bool *ret, char *desc, size_t size);

/* ---- veth.c: libnl-3 ---- */

/* A sandbox's link seen from the host: the pair's names, the namespace its other end is born in, and the host
 * side's addresses; with gateway6 (NULL: no IPv6 on the link), the sandbox's addr6 too (for the host's permanent
 * neighbour entry). The hardware addresses are chosen by lb_veth_add_host(). */
struct lb_veth_host {
	const char *ifname, *alias, *sandbox_ifname;
	int netns_fd;
	int conf4_fd, conf6_fd; /* lb_veth_open_conf() of the host's namespace (-errno when it failed) */
	uint32_t gateway;	/* host order */
	const uint8_t *gateway6, *addr6;
	uint8_t host_mac[6], sandbox_mac[6]; /* out */
};
/* Creates the pair (the host side h->ifname, the other end h->sandbox_ifname born inside h->netns_fd, each with a
 * random locally administered hardware address) and sets up the host side: forwarding on, IPv6 for this link alone
 * (set before it is up: no link-local address, no router advertisements, force_forwarding where the kernel has it)
 * or IPv6 off on it, then up with the ifalias h->alias, gateway/30, gateway6/126 and the neighbour entry. The
 * requests after the sysctls go in one pipeline. *ret_ifindex: the host side's index. */
int lb_veth_add_host(struct lb_veth_host *h, int *ret_ifindex, struct lb_error *err);
/* /proc/sys/net/ipv4/conf or ipv6/conf (family) of the calling thread's network namespace, a directory fd, or
 * -errno (-ENOENT: a kernel without IPv6). Files are opened below it: looking "ipv6/conf" up from /proc/sys walks one
 * dcache chain holding every network namespace's entries of that name (~20 us with 200 sandboxes, growing with each);
 * below it the names are this namespace's alone. */
int lb_veth_open_conf(int family);
/* Sets the largest segment (GSO/TSO unit) the host's TCP may hand to link ifindex, IPv4 (Linux >= 6.3, "BIG TCP"),
 * and reads it back: *ret_size is what the kernel now holds, 0 when it does not know the setting (older kernels
 * ignore it). Fails only if netlink does. */
int lb_veth_set_gso_ipv4_max(int ifindex, uint32_t size, uint32_t *ret_size, struct lb_error *err);
/* The sandbox's end of a link: its IPv4 address and gateway; with addr6 (NULL: no IPv6) its IPv6 address, the
 * gateway's, and the host side's hardware address (for the permanent neighbour entry). */
struct lb_veth_addrs {
	uint32_t addr, gateway; /* host order */
	const uint8_t *addr6, *gateway6;
	const uint8_t *host_mac;
};
/* Inside netns_fd: lo up and, when sandbox_ifname, that link up with a's addresses and default routes; IPv6 on it
 * and lo (sysctls before either is up, no link-local address, no router advertisements, a permanent neighbour entry
 * for the gateway) when a->addr6, else IPv6 off in the namespace. The link requests go in one pipeline. */
int lb_veth_setup_sandbox(int netns_fd, const char *sandbox_ifname, const struct lb_veth_addrs *a,
			  struct lb_error *err);
int lb_veth_delete(const char *host_ifname, struct lb_error *err);
int lb_veth_set_up(const char *host_ifname, struct lb_error *err);
int lb_veth_set_down(const char *host_ifname, struct lb_error *err);
/* The uplinks now (the devices of IPv4 default routes, and of IPv6 ones), each once (at most max; -ENOSPC past
 * that); the sandboxes' own veths never count. *ret_route6 (may be NULL): some IPv6 default route exists. */
int lb_veth_default_route_devices(struct lb_uplink *ret, size_t max, size_t *ret_n, bool *ret_route6,
				  struct lb_error *err);
/* Turns IPv4 forwarding on for ifname (net.ipv4.conf.<ifname>.forwarding), and IPv6 forwarding for it alone when
 * ipv6 (net.ipv6.conf.<ifname>.force_forwarding, Linux >= 6.17). */
int lb_veth_enable_forwarding(const char *ifname, bool ipv6, struct lb_error *err);
/* Calls fn for each host-side veth named LB_NET_IFPREFIX<N> with its slot and alias (may be ""). */
int lb_veth_list(void (*fn)(unsigned slot, const char *alias, void *data), void *data, struct lb_error *err);

/* ---- services.c: resolver and relay ---- */

/* The service's socket on every address: a bound UDP socket, or a listening TCP one. Returns the fd. */
int lb_service_bind(int type, uint16_t port, struct lb_error *err);
/* Start the service's thread on fd (from lb_service_bind; taken whatever happens; a negative fd is returned as the
 * error, so lb_resolver_start(ctx, lb_service_bind(...), err) reports a failed bind). */
int lb_resolver_start(struct lb_net *ctx, int fd, struct lb_error *err);
int lb_relay_start(struct lb_net *ctx, int fd, struct lb_error *err);
/* Stops accepting work (joins the service's thread); requests already handed to worker threads go on, and may still
 * answer through the service's socket. */
void lb_service_halt(struct lb_service *s);
/* Halts if needed, closes the socket, frees. Only once no worker thread uses the service any more. */
void lb_service_free(struct lb_service *s);
/* Wakes every relayed connection (shutdown of both sockets) and forbids new ones; their threads then finish. */
void lb_relay_shutdown_all(struct lb_net *ctx);

/* ---- upstream.c: the DNS upstream and its answers ---- */

/* Asks the upstream for name's records of qtype (A or AAAA) and keeps those outside the denied ranges (and not the
 * host's own), each in a 16-byte slot (A: its first 4 bytes). *ret_n may be 0; *ret_dropped counts the addresses
 * that were refused. */
int lb_upstream_resolve(struct lb_net *ctx, const char *name, uint16_t qtype, uint8_t (*addrs)[16], size_t max,
			size_t *ret_n, size_t *ret_dropped, int *ret_rcode, uint32_t *ret_ttl);

struct lb_dns_cache;
struct lb_dns_cache *lb_dns_cache_new(void);
void lb_dns_cache_free(struct lb_dns_cache *c);
/* Copies the fresh cached answer for (name, qtype) out (*ret_ttl: the seconds it has left); false when there is none.
 * Never blocks on the network. */
bool lb_dns_cached(struct lb_net *ctx, const char *name, uint16_t qtype, uint8_t (*addrs)[16], size_t max,
		   size_t *ret_n, size_t *ret_dropped, int *ret_rcode, uint32_t *ret_ttl);
/* lb_upstream_resolve() through ctx->dns_cache: a fresh cached answer when there is one (*ret_ttl then the seconds
 * it has left), else the upstream's, kept for next time. */
int lb_upstream_lookup(struct lb_net *ctx, const char *name, uint16_t qtype, uint8_t (*addrs)[16], size_t max,
		       size_t *ret_n, size_t *ret_dropped, int *ret_rcode, uint32_t *ret_ttl);
/* The relay's lookup (RFC 8305's resolution): A and AAAA, each from the cache when fresh, the others asked at once
 * on one socket; once one family has addresses, the other is waited for 50 ms more, then left (never an error: a
 * family without answer has none). */
void lb_upstream_lookup_both(struct lb_net *ctx, const char *name, uint8_t (*a4)[16], size_t max4, size_t *ret_n4,
			     uint8_t (*a6)[16], size_t max6, size_t *ret_n6);

/* ---- isolate.c ---- */

/* Binds the two services' ports and forks their keeper as uid/gid, which forks a supervisor it replaces when it
 * ends, which runs them in a worker it replaces when it ends; -EBUSY when the caller has more than one thread. */
int lb_services_spawn_isolated(struct lb_net *ctx, uid_t uid, gid_t gid, struct lb_error *err);
/* Kills the keeper (and so its supervisor and worker) and reaps it. */
void lb_services_kill(struct lb_net *ctx);
/* The keeper runs and a worker serves. */
bool lb_services_alive(struct lb_net *ctx);
/* Fills h's services_* fields but isolated, alive and landlock_abi: whether the keeper runs (so a supervisor or
 * worker that ends is replaced), the pids serving now (0 while replaced), the restarts and the crash loop. From the
 * shared page: reported, never acted on. */
void lb_services_state(struct lb_net *ctx, struct lb_net_health *h);

/* ---- confine.c ---- */

/* Confines the calling (single-threaded, no_new_privs) process for good: a Landlock domain at the kernel's best ABI
 * (*ret_landlock_abi; 0 when it has none), which opens no path and connects TCP only to 80, 443 and upstream_port;
 * then a seccomp filter: no signals to others, no new processes or programs, no namespaces, no other process's
 * memory, no sockets but AF_UNIX/AF_INET/AF_INET6 and NETLINK_ROUTE, none of the kernel interfaces the services
 * never use (EPERM); clone3 answers ENOSYS. */
int lb_services_confine(uint16_t upstream_port, int *ret_landlock_abi, struct lb_error *err);

/* ---- slots.c ---- */

/* The slot whose sandbox address is addr (network order) and its tier; -ENOENT when none. Locks ctx. */
int lb_net_lookup_source(struct lb_net *ctx, uint32_t addr_be, unsigned *ret_slot, enum lb_tier *ret_tier);
/* The same for a sandbox's IPv6 address (only a sandbox that has IPv6 has one). */
int lb_net_lookup_source6(struct lb_net *ctx, const uint8_t addr[16], unsigned *ret_slot, enum lb_tier *ret_tier);
void lb_net_count_refusal(struct lb_net *ctx, unsigned slot);
enum lb_share { LB_SHARE_DNS, LB_SHARE_RELAY };
/* Takes one unit of a sandbox's share; false (and nothing taken) when it is used up. */
bool lb_net_share_take(struct lb_net *ctx, unsigned slot, enum lb_share what);
void lb_net_share_release(struct lb_net *ctx, unsigned slot, enum lb_share what);
/* Whether addr (network order) is denied or one of the host's own addresses. */
bool lb_net_addr_denied(struct lb_net *ctx, uint32_t addr_be);
/* The same for an IPv6 address (lb_cidr_list_denies6: NAT64 forms checked as IPv4), the host's own included. */
bool lb_net_addr6_denied(struct lb_net *ctx, const uint8_t addr[16]);

#endif

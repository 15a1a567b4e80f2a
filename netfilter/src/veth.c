/*
 * veth.c — a sandbox's link to the host: the veth pair, its addresses and routes, through libnl-3 (rtnetlink).
 * IPv4 for every networked tier; IPv6 too where the host has it (static addresses and neighbours, no link-local
 * address, no router advertisements, all set before a link is first up, so nothing on the link is discovered or
 * configured by packets).
 *
 * Runs in lensboxd (root, any thread) with the thread in the host's network namespace. The sandbox's end is created
 * straight inside the sandbox's netns (IFLA_NET_NS_FD), so it never exists on the host. To address it, the calling
 * thread enters the sandbox's netns just long enough to open a netlink socket and the sysctl files there (a netlink
 * socket stays bound to the namespace it was created in), then returns; network namespaces are per thread, so other
 * threads never notice. If the return fails the thread is in the wrong namespace, which is reported as
 * -ENOTRECOVERABLE. Invariants: host-side names are LB_NET_IFPREFIX<slot>; the host side carries the ifalias
 * "lensbox:<name>" that reconciliation reads back after a crash.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <netlink/netlink.h>
#include <netlink/route/addr.h>
#include <netlink/route/link.h>
#include <netlink/route/link/veth.h>
#include <netlink/route/neighbour.h>
#include <netlink/route/route.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "lb/cleanup.h"
#include "lb/fileio.h"

static void nl_sockp(struct nl_sock **s)
{
	if (*s)
		nl_socket_free(*s);
}
static void rtnl_linkp(struct rtnl_link **l)
{
	if (*l)
		rtnl_link_put(*l);
}
static void nl_addrp(struct nl_addr **a)
{
	if (*a)
		nl_addr_put(*a);
}
static void nl_cachep(struct nl_cache **c)
{
	if (*c)
		nl_cache_free(*c);
}
#define _cleanup_nlsock_ __attribute__((cleanup(nl_sockp)))
#define _cleanup_link_	 __attribute__((cleanup(rtnl_linkp)))
#define _cleanup_addr_	 __attribute__((cleanup(nl_addrp)))

/* libnl errors are NLE_* codes; map the ones we can name to errno. */
static int nl_errno(int nlerr)
{
	switch (-nlerr) {
	case NLE_EXIST:
		return EEXIST;
	case NLE_OBJ_NOTFOUND:
	case NLE_NODEV:
		return ENODEV;
	case NLE_PERM:
		return EPERM;
	case NLE_NOMEM:
		return ENOMEM;
	case NLE_INVAL:
		return EINVAL;
	default:
		return EIO;
	}
}

static int open_sock(struct nl_sock **ret, struct lb_error *err)
{
	_cleanup_nlsock_ struct nl_sock *s = nl_socket_alloc();
	if (!s)
		return lb_error_set(err, ENOMEM, "allocating a netlink socket");
	int r = nl_connect(s, NETLINK_ROUTE);
	if (r < 0)
		return lb_error_setx(err, nl_errno(r), "connecting to rtnetlink: %s", nl_geterror(r));
	*ret = TAKE_PTR(s);
	return 0;
}

/* link's hardware address (a veth's: 6 bytes) into mac. */
static int link_mac_bytes(struct rtnl_link *link, const char *ifname, uint8_t mac[6], struct lb_error *err)
{
	struct nl_addr *a = rtnl_link_get_addr(link);
	if (!a || nl_addr_get_len(a) != 6)
		return lb_error_setx(err, EPROTO, "reading the hardware address of %s", ifname);
	memcpy(mac, nl_addr_get_binary_addr(a), 6);
	return 0;
}

int lb_veth_create(const char *host_ifname, const char *alias, int netns_fd, const char *sandbox_ifname,
		   int *ret_host_ifindex, uint8_t ret_host_mac[6], struct lb_error *err)
{
	_cleanup_nlsock_ struct nl_sock *sock = NULL;
	int r = open_sock(&sock, err);
	if (r < 0)
		return r;
	_cleanup_link_ struct rtnl_link *link = rtnl_link_veth_alloc();
	if (!link)
		return lb_error_set(err, ENOMEM, "allocating a veth");
	rtnl_link_set_name(link, host_ifname);
	struct rtnl_link *peer = rtnl_link_veth_get_peer(link);
	rtnl_link_set_name(peer, sandbox_ifname);
	/* The peer is born inside the sandbox's namespace: it is never visible on the host side. */
	rtnl_link_set_ns_fd(peer, netns_fd);
	rtnl_link_put(peer);
	/* Creating a link in the host namespace is safe: its name is ours (lbh<slot>), never taken from the sandbox. */
	r = rtnl_link_add(sock, link, NLM_F_CREATE | NLM_F_EXCL);
	if (r < 0)
		return lb_error_setx(err, nl_errno(r), "creating veth %s: %s", host_ifname, nl_geterror(r));

	_cleanup_link_ struct rtnl_link *cur = NULL;
	r = rtnl_link_get_kernel(sock, 0, host_ifname, &cur);
	if (r < 0)
		return lb_error_setx(err, nl_errno(r), "finding veth %s: %s", host_ifname, nl_geterror(r));
	_cleanup_link_ struct rtnl_link *change = rtnl_link_alloc();
	if (!change)
		return lb_error_set(err, ENOMEM, "allocating a link change");
	rtnl_link_set_ifalias(change, alias);
	r = rtnl_link_change(sock, cur, change, 0);
	if (r < 0)
		return lb_error_setx(err, nl_errno(r), "labelling veth %s: %s", host_ifname, nl_geterror(r));
	*ret_host_ifindex = rtnl_link_get_ifindex(cur);
	return link_mac_bytes(cur, host_ifname, ret_host_mac, err);
}

#ifndef IFLA_GSO_IPV4_MAX_SIZE
/* Linux 6.3 (IPv4 BIG TCP); the uapi headers here are 6.1's. The value is fixed uapi in every later kernel. */
#define IFLA_GSO_IPV4_MAX_SIZE 63
#endif

struct gso_readback {
	int ifindex;
	bool seen;
	uint32_t size;
};

static int gso_readback_cb(struct nl_msg *msg, void *arg)
{
	struct gso_readback *rb = arg;
	struct nlmsghdr *h = nlmsg_hdr(msg);
	struct nlattr *tb[IFLA_GSO_IPV4_MAX_SIZE + 1];
	if (h->nlmsg_type != RTM_NEWLINK || !nlmsg_valid_hdr(h, sizeof(struct ifinfomsg)))
		return NL_SKIP;
	const struct ifinfomsg *ifi = nlmsg_data(h);
	if (ifi->ifi_index != rb->ifindex ||
	    nlmsg_parse(h, sizeof(struct ifinfomsg), tb, IFLA_GSO_IPV4_MAX_SIZE, NULL) < 0)
		return NL_SKIP;
	if (tb[IFLA_GSO_IPV4_MAX_SIZE] && nla_len(tb[IFLA_GSO_IPV4_MAX_SIZE]) >= (int)sizeof(uint32_t)) {
		rb->seen = true;
		rb->size = nla_get_u32(tb[IFLA_GSO_IPV4_MAX_SIZE]);
	}
	return NL_OK;
}

int lb_veth_set_gso_ipv4_max(int ifindex, uint32_t size, uint32_t *ret_size, struct lb_error *err)
{
	_cleanup_nlsock_ struct nl_sock *sock = NULL;
	int r = open_sock(&sock, err);
	if (r < 0)
		return r;
	struct ifinfomsg ifi = { .ifi_family = AF_UNSPEC, .ifi_index = ifindex };
	/* Safe: it changes how large the segments are that this host hands to its own end of the sandbox's veth; the
	 * sandbox can neither set nor see it, and the link's filtering (nftables, per packet) is unchanged. */
	struct nl_msg *msg = nlmsg_alloc_simple(RTM_SETLINK, 0);
	if (!msg)
		return lb_error_set(err, ENOMEM, "allocating a netlink message");
	if (nlmsg_append(msg, &ifi, sizeof(ifi), NLMSG_ALIGNTO) < 0 ||
	    nla_put_u32(msg, IFLA_GSO_IPV4_MAX_SIZE, size) < 0) {
		nlmsg_free(msg);
		return lb_error_set(err, ENOMEM, "building a netlink message");
	}
	r = nl_send_sync(sock, msg); /* frees msg */
	if (r < 0)
		return lb_error_setx(err, nl_errno(r), "setting gso_ipv4_max_size of link %d: %s", ifindex,
				     nl_geterror(r));
	/* A kernel before 6.3 accepts the request and ignores the attribute it does not know: read it back. */
	struct gso_readback rb = { .ifindex = ifindex };
	msg = nlmsg_alloc_simple(RTM_GETLINK, 0);
	if (!msg)
		return lb_error_set(err, ENOMEM, "allocating a netlink message");
	if (nlmsg_append(msg, &ifi, sizeof(ifi), NLMSG_ALIGNTO) < 0) {
		nlmsg_free(msg);
		return lb_error_set(err, ENOMEM, "building a netlink message");
	}
	nl_socket_modify_cb(sock, NL_CB_VALID, NL_CB_CUSTOM, gso_readback_cb, &rb);
	r = nl_send_auto(sock, msg);
	nlmsg_free(msg);
	if (r >= 0)
		r = nl_recvmsgs_default(sock);
	if (r < 0)
		return lb_error_setx(err, nl_errno(r), "reading link %d back: %s", ifindex, nl_geterror(r));
	*ret_size = rb.seen ? rb.size : 0;
	return 0;
}

/* Brings link ifindex up; ifname names it in an error. */
static int link_up_index(struct nl_sock *sock, int ifindex, const char *ifname, struct lb_error *err)
{
	_cleanup_link_ struct rtnl_link *cur = rtnl_link_alloc();
	_cleanup_link_ struct rtnl_link *change = rtnl_link_alloc();
	if (!cur || !change)
		return lb_error_set(err, ENOMEM, "allocating a link change");
	rtnl_link_set_ifindex(cur, ifindex);
	rtnl_link_set_flags(change, IFF_UP);
	int r = rtnl_link_change(sock, cur, change, 0);
	if (r < 0)
		return lb_error_setx(err, nl_errno(r), "bringing %s up: %s", ifname, nl_geterror(r));
	return 0;
}

/* Brings ifname up; its index. */
static int link_up(struct nl_sock *sock, const char *ifname, struct lb_error *err)
{
	_cleanup_link_ struct rtnl_link *cur = NULL;
	int r = rtnl_link_get_kernel(sock, 0, ifname, &cur);
	if (r < 0)
		return lb_error_setx(err, nl_errno(r), "finding %s: %s", ifname, nl_geterror(r));
	int ifindex = rtnl_link_get_ifindex(cur);
	r = link_up_index(sock, ifindex, ifname, err);
	return r < 0 ? r : ifindex;
}

/* Adds address bytes (4 or 16 of family) /prefix to ifindex. IPv6 ones skip duplicate address detection: the link
 * has two ends, both lensbox's, and DAD would hold the address back for a second. */
static int add_addr_family(struct nl_sock *sock, int ifindex, int family, const void *bytes, unsigned prefix,
			   struct lb_error *err)
{
	struct rtnl_addr *a = rtnl_addr_alloc();
	if (!a)
		return lb_error_set(err, ENOMEM, "allocating an address");
	_cleanup_addr_ struct nl_addr *local = nl_addr_build(family, bytes, family == AF_INET ? 4 : 16);
	if (!local) {
		rtnl_addr_put(a);
		return lb_error_set(err, ENOMEM, "allocating an address");
	}
	nl_addr_set_prefixlen(local, (int)prefix);
	rtnl_addr_set_ifindex(a, ifindex);
	rtnl_addr_set_local(a, local);
	if (family == AF_INET6)
		rtnl_addr_set_flags(a, IFA_F_NODAD);
	int r = rtnl_addr_add(sock, a, 0);
	rtnl_addr_put(a);
	if (r < 0) {
		char s[INET6_ADDRSTRLEN];
		inet_ntop(family, bytes, s, sizeof(s));
		return lb_error_setx(err, nl_errno(r), "adding address %s/%u: %s", s, prefix, nl_geterror(r));
	}
	return 0;
}

static int add_addr(struct nl_sock *sock, int ifindex, uint32_t addr, unsigned prefix, struct lb_error *err)
{
	uint32_t be = htonl(addr);
	return add_addr_family(sock, ifindex, AF_INET, &be, prefix, err);
}

static int write_sysctl(const char *path, const char *value, struct lb_error *err)
{
	int r = lb_write_file_at(AT_FDCWD, path, value);
	if (r < 0)
		return lb_error_set(err, r, "writing %s", path);
	return 0;
}

/* The IPv6 sysctls of one interface for a lensbox link: no generated (link-local) address, no router
 * advertisements, IPv6 on. Written before the link is first up, so no link-local address is ever made. Paths are of
 * the calling thread's network namespace. */
static int ipv6_link_sysctls(const char *ifname, struct lb_error *err)
{
	static const char *const keys[][2] = {
		{ "addr_gen_mode", "1" }, { "accept_ra", "0" }, { "autoconf", "0" }, { "disable_ipv6", "0" }
	};
	char path[128];
	for (size_t i = 0; i < LB_ARRAY_SIZE(keys); i++) {
		snprintf(path, sizeof(path), "/proc/sys/net/ipv6/conf/%s/%s", ifname, keys[i][0]);
		int r = write_sysctl(path, keys[i][1], err);
		if (r < 0)
			return r;
	}
	return 0;
}

int lb_veth_setup_host(const char *host_ifname, int ifindex, uint32_t gateway, const uint8_t *gateway6,
		       struct lb_error *err)
{
	char path[128];
	int r;
	if (gateway6) {
		/* IPv6 for this interface only (its name is ours, lbh<slot>), set before it is up; forwarding for the
		 * sandbox's packets where the kernel can turn it on for one interface (force_forwarding, Linux >=
		 * 6.17); older kernels forward IPv6 only when all.forwarding is on, which lb_net_init() checked. */
		r = ipv6_link_sysctls(host_ifname, err);
		if (r < 0)
			return r;
		snprintf(path, sizeof(path), "/proc/sys/net/ipv6/conf/%s/force_forwarding", host_ifname);
		r = write_sysctl(path, "1", err);
		if (r < 0 && r != -ENOENT)
			return r;
	} else {
		/* no IPv6 on this link at all */
		snprintf(path, sizeof(path), "/proc/sys/net/ipv6/conf/%s/disable_ipv6", host_ifname);
		r = write_sysctl(path, "1", err);
		if (r < 0 && r != -ENOENT)
			return r;
	}
	snprintf(path, sizeof(path), "/proc/sys/net/ipv4/conf/%s/forwarding", host_ifname);
	r = write_sysctl(path, "1", err);
	if (r < 0)
		return r;
	_cleanup_nlsock_ struct nl_sock *sock = NULL;
	r = open_sock(&sock, err);
	if (r < 0)
		return r;
	r = link_up_index(sock, ifindex, host_ifname, err);
	if (r < 0)
		return r;
	r = add_addr(sock, ifindex, gateway, 30, err);
	if (r == 0 && gateway6)
		r = add_addr_family(sock, ifindex, AF_INET6, gateway6, 126, err);
	return r;
}

/* The default route of family via gateway (4 or 16 bytes) on ifindex. */
static int add_default_route_family(struct nl_sock *sock, int ifindex, int family, const void *gateway,
				    struct lb_error *err)
{
	struct rtnl_route *route = rtnl_route_alloc();
	if (!route)
		return lb_error_set(err, ENOMEM, "allocating a route");
	static const uint8_t zero[16];
	size_t len = family == AF_INET ? 4 : 16;
	_cleanup_addr_ struct nl_addr *dst = nl_addr_build(family, zero, len);
	_cleanup_addr_ struct nl_addr *via = nl_addr_build(family, gateway, len);
	struct rtnl_nexthop *nh = rtnl_route_nh_alloc();
	if (!dst || !via || !nh) {
		if (nh)
			rtnl_route_nh_free(nh);
		rtnl_route_put(route);
		return lb_error_set(err, ENOMEM, "allocating a route");
	}
	nl_addr_set_prefixlen(dst, 0);
	rtnl_route_set_family(route, (uint8_t)family);
	rtnl_route_set_dst(route, dst);
	rtnl_route_nh_set_ifindex(nh, ifindex);
	rtnl_route_nh_set_gateway(nh, via);
	rtnl_route_add_nexthop(route, nh); /* the route owns nh now */
	int r = rtnl_route_add(sock, route, NLM_F_CREATE | NLM_F_EXCL);
	rtnl_route_put(route);
	if (r < 0)
		return lb_error_setx(err, nl_errno(r), "adding the default %s route: %s",
				     family == AF_INET ? "IPv4" : "IPv6", nl_geterror(r));
	return 0;
}

static int add_default_route(struct nl_sock *sock, int ifindex, uint32_t gateway, struct lb_error *err)
{
	uint32_t gw = htonl(gateway);
	return add_default_route_family(sock, ifindex, AF_INET, &gw, err);
}

/* A permanent neighbour entry ip6 -> mac on ifindex: the two ends of a veth know each other, so neither ever sends
 * neighbour discovery (nor has a link-local address to send it from). */
static int add_neighbour(struct nl_sock *sock, int ifindex, const uint8_t ip6[16], const uint8_t mac[6],
			 struct lb_error *err)
{
	struct rtnl_neigh *n = rtnl_neigh_alloc();
	_cleanup_addr_ struct nl_addr *dst = nl_addr_build(AF_INET6, ip6, 16);
	_cleanup_addr_ struct nl_addr *ll = nl_addr_build(AF_LLC, mac, 6);
	if (!n || !dst || !ll) {
		if (n)
			rtnl_neigh_put(n);
		return lb_error_set(err, ENOMEM, "allocating a neighbour");
	}
	rtnl_neigh_set_ifindex(n, ifindex);
	rtnl_neigh_set_family(n, AF_INET6);
	rtnl_neigh_set_dst(n, dst);
	rtnl_neigh_set_lladdr(n, ll);
	rtnl_neigh_set_state(n, NUD_PERMANENT);
	int r = rtnl_neigh_add(sock, n, NLM_F_CREATE | NLM_F_REPLACE);
	rtnl_neigh_put(n);
	if (r < 0)
		return lb_error_setx(err, nl_errno(r), "adding a neighbour: %s", nl_geterror(r));
	return 0;
}

int lb_veth_add_neighbour6(int ifindex, const uint8_t ip6[16], const uint8_t mac[6], struct lb_error *err)
{
	_cleanup_nlsock_ struct nl_sock *sock = NULL;
	int r = open_sock(&sock, err);
	if (r < 0)
		return r;
	return add_neighbour(sock, ifindex, ip6, mac, err);
}

/* Inside the sandbox's netns (the calling thread is there): its IPv6 sysctls, before any of its links is up. */
static int sandbox_sysctls(const char *sandbox_ifname, bool ipv6, struct lb_error *err)
{
	if (!ipv6) {
		/* IPv6 off inside: the tier has none here, and a v6 address would be a way around its rules */
		int r = write_sysctl("/proc/sys/net/ipv6/conf/all/disable_ipv6", "1", err);
		if (r == 0)
			r = write_sysctl("/proc/sys/net/ipv6/conf/default/disable_ipv6", "1", err);
		return r == -ENOENT ? 0 : r; /* -ENOENT: a kernel without IPv6 */
	}
	/* IPv6 on eth0 (static address, no link-local, no router advertisements) and lo (its own ::1); off for any
	 * link made later */
	int r = write_sysctl("/proc/sys/net/ipv6/conf/default/disable_ipv6", "1", err);
	if (r == 0)
		r = ipv6_link_sysctls(sandbox_ifname, err);
	if (r == 0)
		r = write_sysctl("/proc/sys/net/ipv6/conf/lo/disable_ipv6", "0", err);
	return r;
}

int lb_veth_setup_sandbox(int netns_fd, const char *sandbox_ifname, const struct lb_veth_addrs *a, uint8_t ret_mac[6],
			  struct lb_error *err)
{
	bool ipv6 = sandbox_ifname && a && a->addr6;
	_cleanup_close_ int home = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	if (home < 0)
		return lb_error_set(err, errno, "opening this thread's network namespace");
	/* Entering the sandbox's netns affects only this thread, and we leave it before returning; everything
	 * done inside (links, addresses, sysctls) belongs to that namespace only. */
	if (setns(netns_fd, CLONE_NEWNET) < 0)
		return lb_error_set(err, errno, "entering the sandbox's network namespace");
	_cleanup_nlsock_ struct nl_sock *sock = NULL;
	int r = open_sock(&sock, err);
	if (r == 0 && sandbox_ifname)
		r = sandbox_sysctls(sandbox_ifname, ipv6, err);
	if (setns(home, CLONE_NEWNET) < 0)
		return lb_error_set(err, ENOTRECOVERABLE, "returning to the host's network namespace");
	if (r < 0)
		return r;

	r = link_up_index(sock, 1, "lo", err); /* lo is link 1 of every network namespace */
	if (r < 0 || !sandbox_ifname || !a)
		return r;
	_cleanup_link_ struct rtnl_link *cur = NULL;
	r = rtnl_link_get_kernel(sock, 0, sandbox_ifname, &cur);
	if (r < 0)
		return lb_error_setx(err, nl_errno(r), "finding %s: %s", sandbox_ifname, nl_geterror(r));
	int ifindex = rtnl_link_get_ifindex(cur);
	r = link_mac_bytes(cur, sandbox_ifname, ret_mac, err);
	if (r == 0)
		r = link_up_index(sock, ifindex, sandbox_ifname, err);
	if (r == 0)
		r = add_addr(sock, ifindex, a->addr, 30, err);
	if (r == 0)
		r = add_default_route(sock, ifindex, a->gateway, err);
	if (r < 0 || !ipv6)
		return r;
	r = add_addr_family(sock, ifindex, AF_INET6, a->addr6, 126, err);
	if (r == 0)
		r = add_default_route_family(sock, ifindex, AF_INET6, a->gateway6, err);
	if (r == 0)
		r = add_neighbour(sock, ifindex, a->gateway6, a->host_mac, err);
	return r;
}

static int set_flag(const char *ifname, bool up, struct lb_error *err)
{
	_cleanup_nlsock_ struct nl_sock *sock = NULL;
	int r = open_sock(&sock, err);
	if (r < 0)
		return r;
	if (up)
		return link_up(sock, ifname, err) < 0 ? -EIO : 0;
	_cleanup_link_ struct rtnl_link *cur = NULL;
	r = rtnl_link_get_kernel(sock, 0, ifname, &cur);
	if (r < 0)
		return lb_error_setx(err, nl_errno(r), "finding %s: %s", ifname, nl_geterror(r));
	_cleanup_link_ struct rtnl_link *change = rtnl_link_alloc();
	if (!change)
		return lb_error_set(err, ENOMEM, "allocating a link change");
	rtnl_link_unset_flags(change, IFF_UP);
	r = rtnl_link_change(sock, cur, change, 0);
	if (r < 0)
		return lb_error_setx(err, nl_errno(r), "setting %s down: %s", ifname, nl_geterror(r));
	return 0;
}

int lb_veth_set_up(const char *host_ifname, struct lb_error *err)
{
	return set_flag(host_ifname, true, err);
}

int lb_veth_set_down(const char *host_ifname, struct lb_error *err)
{
	return set_flag(host_ifname, false, err);
}

int lb_veth_delete(const char *host_ifname, struct lb_error *err)
{
	_cleanup_nlsock_ struct nl_sock *sock = NULL;
	int r = open_sock(&sock, err);
	if (r < 0)
		return r;
	_cleanup_link_ struct rtnl_link *link = rtnl_link_alloc();
	if (!link)
		return lb_error_set(err, ENOMEM, "allocating a link");
	rtnl_link_set_name(link, host_ifname);
	/* Deleting one end of a veth deletes both; the name is ours (lbh<slot>). */
	r = rtnl_link_delete(sock, link);
	if (r < 0)
		return lb_error_setx(err, nl_errno(r), "deleting veth %s: %s", host_ifname, nl_geterror(r));
	return 0;
}

int lb_veth_list(void (*fn)(unsigned slot, const char *alias, void *data), void *data, struct lb_error *err)
{
	_cleanup_nlsock_ struct nl_sock *sock = NULL;
	int r = open_sock(&sock, err);
	if (r < 0)
		return r;
	__attribute__((cleanup(nl_cachep))) struct nl_cache *cache = NULL;
	r = rtnl_link_alloc_cache(sock, AF_UNSPEC, &cache);
	if (r < 0)
		return lb_error_setx(err, nl_errno(r), "listing links: %s", nl_geterror(r));
	size_t plen = strlen(LB_NET_IFPREFIX);
	for (struct nl_object *o = nl_cache_get_first(cache); o; o = nl_cache_get_next(o)) {
		struct rtnl_link *l = (struct rtnl_link *)o;
		const char *name = rtnl_link_get_name(l);
		if (!name || strncmp(name, LB_NET_IFPREFIX, plen) != 0)
			continue;
		const char *digits = name + plen;
		char *end;
		if (*digits < '0' || *digits > '9')
			continue;
		unsigned long slot = strtoul(digits, &end, 10);
		if (*end || slot > 1u << 20)
			continue;
		const char *alias = rtnl_link_get_ifalias(l);
		fn((unsigned)slot, alias ? alias : "", data);
	}
	return 0;
}

static int default_route_devices(struct nl_sock *sock, struct nl_cache *links, int family, struct lb_uplink *ret,
				 size_t max, size_t *ret_n, bool *ret_found, struct lb_error *err);

int lb_veth_default_route_devices(struct lb_uplink *ret, size_t max, size_t *ret_n, bool *ret_route6,
				  struct lb_error *err)
{
	*ret_n = 0;
	bool found4 = false, found6 = false;
	_cleanup_nlsock_ struct nl_sock *sock = NULL;
	int r = open_sock(&sock, err);
	if (r < 0)
		return r;
	__attribute__((cleanup(nl_cachep))) struct nl_cache *links = NULL;
	r = rtnl_link_alloc_cache(sock, AF_UNSPEC, &links);
	if (r < 0)
		return lb_error_setx(err, nl_errno(r), "listing links: %s", nl_geterror(r));
	r = default_route_devices(sock, links, AF_INET, ret, max, ret_n, &found4, err);
	if (r == 0)
		r = default_route_devices(sock, links, AF_INET6, ret, max, ret_n, &found6, err);
	if (ret_route6)
		*ret_route6 = found6;
	return r;
}

static int default_route_devices(struct nl_sock *sock, struct nl_cache *links, int family, struct lb_uplink *ret,
				 size_t max, size_t *ret_n, bool *ret_found, struct lb_error *err)
{
	__attribute__((cleanup(nl_cachep))) struct nl_cache *routes = NULL;
	int r = rtnl_route_alloc_cache(sock, family, 0, &routes);
	if (r == -NLE_AF_NOSUPPORT && family == AF_INET6)
		return 0; /* a kernel without IPv6 */
	if (r < 0)
		return lb_error_setx(err, nl_errno(r), "listing routes: %s", nl_geterror(r));
	for (struct nl_object *o = nl_cache_get_first(routes); o; o = nl_cache_get_next(o)) {
		struct rtnl_route *rt = (struct rtnl_route *)o;
		struct nl_addr *dst = rtnl_route_get_dst(rt);
		if (rtnl_route_get_table(rt) != RT_TABLE_MAIN || rtnl_route_get_type(rt) != RTN_UNICAST ||
		    (dst && nl_addr_get_prefixlen(dst) != 0))
			continue;
		for (int i = 0; i < rtnl_route_get_nnexthops(rt); i++) {
			struct rtnl_nexthop *nh = rtnl_route_nexthop_n(rt, i);
			int ifindex = rtnl_route_nh_get_ifindex(nh);
			char ifname[IFNAMSIZ];
			if (!rtnl_link_i2name(links, ifindex, ifname, sizeof(ifname)))
				continue;
			if (strncmp(ifname, LB_NET_IFPREFIX, strlen(LB_NET_IFPREFIX)) == 0)
				continue;
			*ret_found = true;
			bool seen = false;
			for (size_t k = 0; k < *ret_n; k++)
				seen = seen || ret[k].ifindex == ifindex;
			if (seen)
				continue;
			if (*ret_n == max)
				return lb_error_setx(err, ENOSPC, "more than %zu interfaces carry a default route",
						     max);
			ret[*ret_n].ifindex = ifindex;
			memcpy(ret[*ret_n].name, ifname, sizeof(ifname));
			(*ret_n)++;
		}
	}
	return 0;
}

int lb_veth_enable_forwarding(const char *ifname, bool ipv6, struct lb_error *err)
{
	char path[128];
	snprintf(path, sizeof(path), "/proc/sys/net/ipv4/conf/%s/forwarding", ifname);
	/* Replies to sandboxes arrive on the uplink, and IPv4 checks forwarding on the way in. Forwarding into a
	 * sandbox is limited to those replies by the through_host chain of base.nft. */
	int r = write_sysctl(path, "1", err);
	if (r < 0 || !ipv6)
		return r;
	/* The same for IPv6, this interface only. force_forwarding leaves the interface's router behaviour (its
	 * `forwarding`, which stops accept_ra=1 from taking router advertisements) as it was. */
	snprintf(path, sizeof(path), "/proc/sys/net/ipv6/conf/%s/force_forwarding", ifname);
	r = write_sysctl(path, "1", err);
	return r == -ENOENT ? 0 : r; /* an interface without IPv6 */
}

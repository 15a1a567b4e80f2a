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
 * -ENOTRECOVERABLE. The requests that follow each other on one side (up, addresses, routes, neighbours) are sent
 * without waiting for each answer and their answers read after (struct pipeline): an attach is on the path of a
 * sandbox's creation. Both ends' hardware addresses are chosen here, so that neither has to be read back.
 * Invariants: host-side names are LB_NET_IFPREFIX<slot>; the host side carries the ifalias "lensbox:<name>" that
 * reconciliation reads back after a crash.
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
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

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

/* Requests sent one after another without waiting for their answers, then every answer read: the kernel handles
 * a socket's requests in order, so a link is up before the address that follows it is added, and the round trips
 * overlap. The first refusal is the one reported. */
#define MAX_PIPELINE 8
struct pipeline {
	struct nl_sock *sock;
	size_t n;
	char what[MAX_PIPELINE][48];
	int r; /* the first failure to build or send */
	struct lb_error *err;
};

static void queue(struct pipeline *p, int built, struct nl_msg *msg, const char *what)
{
	if (p->r == 0 && (built < 0 || !msg))
		p->r = lb_error_setx(p->err, built < 0 ? nl_errno(built) : ENOMEM, "building a request (%s)", what);
	if (p->r == 0 && p->n == MAX_PIPELINE)
		p->r = lb_error_setx(p->err, E2BIG, "too many requests at once (%s)", what);
	if (p->r == 0) {
		int r = nl_send_auto(p->sock, msg);
		if (r < 0)
			p->r = lb_error_setx(p->err, nl_errno(r), "sending a request (%s): %s", what, nl_geterror(r));
		else
			snprintf(p->what[p->n++], sizeof(p->what[0]), "%s", what);
	}
	if (msg)
		nlmsg_free(msg);
}

static int finish(struct pipeline *p)
{
	int first = p->r;
	for (size_t i = 0; i < p->n; i++) {
		int r = nl_wait_for_ack(p->sock);
		if (r < 0 && first == 0)
			first = lb_error_setx(p->err, nl_errno(r), "%s: %s", p->what[i], nl_geterror(r));
	}
	return first;
}

/* Link ifindex up (and, with alias, labelled). */
static void queue_up(struct pipeline *p, int ifindex, const char *alias)
{
	_cleanup_link_ struct rtnl_link *cur = rtnl_link_alloc();
	_cleanup_link_ struct rtnl_link *change = rtnl_link_alloc();
	struct nl_msg *msg = NULL;
	int r = -NLE_NOMEM;
	if (cur && change) {
		rtnl_link_set_ifindex(cur, ifindex);
		rtnl_link_set_flags(change, IFF_UP);
		if (alias)
			rtnl_link_set_ifalias(change, alias);
		r = rtnl_link_build_change_request(cur, change, 0, &msg);
	}
	queue(p, r, msg, alias ? "labelling a link and bringing it up" : "bringing a link up");
}

/* Address bytes (4 or 16 of family) /prefix on ifindex. IPv6 ones skip duplicate address detection: the link has
 * two ends, both lensbox's, and DAD would hold the address back for a second. */
static void queue_addr(struct pipeline *p, int ifindex, int family, const void *bytes, unsigned prefix)
{
	struct rtnl_addr *a = rtnl_addr_alloc();
	_cleanup_addr_ struct nl_addr *local = nl_addr_build(family, bytes, family == AF_INET ? 4 : 16);
	struct nl_msg *msg = NULL;
	int r = -NLE_NOMEM;
	if (a && local) {
		nl_addr_set_prefixlen(local, (int)prefix);
		rtnl_addr_set_ifindex(a, ifindex);
		rtnl_addr_set_local(a, local);
		if (family == AF_INET6)
			rtnl_addr_set_flags(a, IFA_F_NODAD);
		r = rtnl_addr_build_add_request(a, 0, &msg);
	}
	if (a)
		rtnl_addr_put(a);
	queue(p, r, msg, family == AF_INET ? "adding an IPv4 address" : "adding an IPv6 address");
}

static int write_sysctl(const char *path, const char *value, struct lb_error *err)
{
	int r = lb_write_file_at(AT_FDCWD, path, value);
	if (r < 0)
		return lb_error_set(err, r, "writing %s", path);
	return 0;
}

int lb_veth_open_conf(int family)
{
	int fd = open(family == AF_INET6 ? "/proc/sys/net/ipv6/conf" : "/proc/sys/net/ipv4/conf",
		      O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

/* <conf>/<fmt...>, a sysctl below conf_fd (lb_veth_open_conf of that family), written. */
__attribute__((format(printf, 5, 6))) static int write_conf(int conf_fd, int family, const char *value,
							    struct lb_error *err, const char *fmt, ...)
{
	char path[96];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(path, sizeof(path), fmt, ap);
	va_end(ap);
	int r = conf_fd < 0 ? conf_fd : lb_write_file_at(conf_fd, path, value);
	if (r < 0)
		return lb_error_set(err, r, "writing /proc/sys/net/%s/conf/%s", family == AF_INET6 ? "ipv6" : "ipv4",
				    path);
	return 0;
}

/* The IPv6 sysctls of one interface for a lensbox link: no generated (link-local) address, no router
 * advertisements, IPv6 on. Written before the link is first up, so no link-local address is ever made. Paths are of
 * the calling thread's network namespace. */
static int ipv6_link_sysctls(int conf6_fd, const char *ifname, struct lb_error *err)
{
	static const char *const keys[][2] = {
		{ "addr_gen_mode", "1" }, { "accept_ra", "0" }, { "autoconf", "0" }, { "disable_ipv6", "0" }
	};
	for (size_t i = 0; i < LB_ARRAY_SIZE(keys); i++) {
		int r = write_conf(conf6_fd, AF_INET6, keys[i][1], err, "%s/%s", ifname, keys[i][0]);
		if (r < 0)
			return r;
	}
	return 0;
}

/* A locally administered unicast hardware address (as the kernel picks for a veth), so that each end's is known
 * before the pair exists. */
static int random_mac(uint8_t mac[6])
{
	if (getrandom(mac, 6, 0) != 6)
		return -EIO;
	mac[0] = (uint8_t)((mac[0] & 0xfe) | 0x02);
	return 0;
}

/* The pair, in one request: the host side h->ifname with h->host_mac, the other end h->sandbox_ifname with
 * h->sandbox_mac born inside h->netns_fd (never visible on the host). */
static int create_pair(struct nl_sock *sock, const struct lb_veth_host *h, struct lb_error *err)
{
	_cleanup_link_ struct rtnl_link *link = rtnl_link_veth_alloc();
	_cleanup_addr_ struct nl_addr *mac = nl_addr_build(AF_LLC, h->host_mac, 6);
	_cleanup_addr_ struct nl_addr *peer_mac = nl_addr_build(AF_LLC, h->sandbox_mac, 6);
	if (!link || !mac || !peer_mac)
		return lb_error_set(err, ENOMEM, "allocating a veth");
	/* One queue each way on both ends, asked for at creation: a veth otherwise gets one per possible CPU, then is
	 * cut back to one after it is registered (a queue's sysfs entries made and removed for nothing). */
	rtnl_link_set_name(link, h->ifname);
	rtnl_link_set_addr(link, mac);
	rtnl_link_set_num_tx_queues(link, 1);
	rtnl_link_set_num_rx_queues(link, 1);
	struct rtnl_link *peer = rtnl_link_veth_get_peer(link);
	rtnl_link_set_name(peer, h->sandbox_ifname);
	rtnl_link_set_addr(peer, peer_mac);
	rtnl_link_set_num_tx_queues(peer, 1);
	rtnl_link_set_num_rx_queues(peer, 1);
	rtnl_link_set_ns_fd(peer, h->netns_fd);
	rtnl_link_put(peer);
	/* Creating a link in the host namespace is safe: its name is ours (lbh<slot>), never taken from the sandbox. */
	int r = rtnl_link_add(sock, link, NLM_F_CREATE | NLM_F_EXCL);
	if (r < 0)
		return lb_error_setx(err, nl_errno(r), "creating veth %s: %s", h->ifname, nl_geterror(r));
	return 0;
}

static void queue_neighbour(struct pipeline *p, int ifindex, const uint8_t ip6[16], const uint8_t mac[6]);

int lb_veth_add_host(struct lb_veth_host *h, int *ret_ifindex, struct lb_error *err)
{
	if (random_mac(h->host_mac) < 0 || random_mac(h->sandbox_mac) < 0)
		return lb_error_set(err, EIO, "choosing hardware addresses");
	_cleanup_nlsock_ struct nl_sock *sock = NULL;
	int r = open_sock(&sock, err);
	if (r == 0)
		r = create_pair(sock, h, err);
	if (r < 0)
		return r;
	int ifindex = (int)if_nametoindex(h->ifname);
	if (ifindex <= 0)
		return lb_error_set(err, errno, "finding veth %s", h->ifname);
	*ret_ifindex = ifindex;
	if (h->gateway6) {
		/* IPv6 for this interface only (its name is ours, lbh<slot>), set before it is up; forwarding for the
		 * sandbox's packets where the kernel can turn it on for one interface (force_forwarding, Linux >=
		 * 6.17); older kernels forward IPv6 only when all.forwarding is on, which lb_net_init() checked. */
		r = ipv6_link_sysctls(h->conf6_fd, h->ifname, err);
		if (r < 0)
			return r;
		r = write_conf(h->conf6_fd, AF_INET6, "1", err, "%s/force_forwarding", h->ifname);
		if (r < 0 && r != -ENOENT)
			return r;
	} else {
		/* no IPv6 on this link at all */
		r = write_conf(h->conf6_fd, AF_INET6, "1", err, "%s/disable_ipv6", h->ifname);
		if (r < 0 && r != -ENOENT)
			return r;
	}
	r = write_conf(h->conf4_fd, AF_INET, "1", err, "%s/forwarding", h->ifname);
	if (r < 0)
		return r;
	struct pipeline p = { .sock = sock, .err = err };
	/* the alias names the sandbox: reconciliation reads it back after a crash */
	queue_up(&p, ifindex, h->alias);
	uint32_t gw = htonl(h->gateway);
	queue_addr(&p, ifindex, AF_INET, &gw, 30);
	if (h->gateway6) {
		queue_addr(&p, ifindex, AF_INET6, h->gateway6, 126);
		queue_neighbour(&p, ifindex, h->addr6, h->sandbox_mac);
	}
	return finish(&p);
}

/* The default route of family via gateway (4 or 16 bytes) on ifindex. */
static void queue_default_route(struct pipeline *p, int ifindex, int family, const void *gateway)
{
	struct rtnl_route *route = rtnl_route_alloc();
	static const uint8_t zero[16];
	size_t len = family == AF_INET ? 4 : 16;
	_cleanup_addr_ struct nl_addr *dst = nl_addr_build(family, zero, len);
	_cleanup_addr_ struct nl_addr *via = nl_addr_build(family, gateway, len);
	struct rtnl_nexthop *nh = rtnl_route_nh_alloc();
	struct nl_msg *msg = NULL;
	int r = -NLE_NOMEM;
	if (route && dst && via && nh) {
		nl_addr_set_prefixlen(dst, 0);
		rtnl_route_set_family(route, (uint8_t)family);
		rtnl_route_set_dst(route, dst);
		rtnl_route_nh_set_ifindex(nh, ifindex);
		rtnl_route_nh_set_gateway(nh, via);
		rtnl_route_add_nexthop(route, TAKE_PTR(nh)); /* the route owns it now */
		r = rtnl_route_build_add_request(route, NLM_F_CREATE | NLM_F_EXCL, &msg);
	}
	if (nh)
		rtnl_route_nh_free(nh);
	if (route)
		rtnl_route_put(route);
	queue(p, r, msg, family == AF_INET ? "adding the default IPv4 route" : "adding the default IPv6 route");
}

/* A permanent neighbour entry ip6 -> mac on ifindex: the two ends of a veth know each other, so neither ever sends
 * neighbour discovery (nor has a link-local address to send it from). */
static void queue_neighbour(struct pipeline *p, int ifindex, const uint8_t ip6[16], const uint8_t mac[6])
{
	struct rtnl_neigh *n = rtnl_neigh_alloc();
	_cleanup_addr_ struct nl_addr *dst = nl_addr_build(AF_INET6, ip6, 16);
	_cleanup_addr_ struct nl_addr *ll = nl_addr_build(AF_LLC, mac, 6);
	struct nl_msg *msg = NULL;
	int r = -NLE_NOMEM;
	if (n && dst && ll) {
		rtnl_neigh_set_ifindex(n, ifindex);
		rtnl_neigh_set_family(n, AF_INET6);
		rtnl_neigh_set_dst(n, dst);
		rtnl_neigh_set_lladdr(n, ll);
		rtnl_neigh_set_state(n, NUD_PERMANENT);
		r = rtnl_neigh_build_add_request(n, NLM_F_CREATE | NLM_F_REPLACE, &msg);
	}
	if (n)
		rtnl_neigh_put(n);
	queue(p, r, msg, "adding an IPv6 neighbour");
}

/* Inside the sandbox's netns (the calling thread is there): its IPv6 sysctls, before any of its links is up. */
static int sandbox_sysctls(const char *sandbox_ifname, bool ipv6, struct lb_error *err)
{
	/* opened in the sandbox's namespace: the directory of its own links (lb_veth_open_conf says why once) */
	_cleanup_close_ int conf = lb_veth_open_conf(AF_INET6);
	if (conf == -ENOENT)
		return 0; /* a kernel without IPv6 */
	if (!ipv6) {
		/* IPv6 off inside: the tier has none here, and a v6 address would be a way around its rules */
		int r = write_conf(conf, AF_INET6, "1", err, "all/disable_ipv6");
		if (r == 0)
			r = write_conf(conf, AF_INET6, "1", err, "default/disable_ipv6");
		return r;
	}
	/* IPv6 on eth0 (static address, no link-local, no router advertisements) and lo (its own ::1); off for any
	 * link made later */
	int r = write_conf(conf, AF_INET6, "1", err, "default/disable_ipv6");
	if (r == 0)
		r = ipv6_link_sysctls(conf, sandbox_ifname, err);
	if (r == 0)
		r = write_conf(conf, AF_INET6, "0", err, "lo/disable_ipv6");
	return r;
}

int lb_veth_setup_sandbox(int netns_fd, const char *sandbox_ifname, const struct lb_veth_addrs *a, struct lb_error *err)
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
	int ifindex = 0;
	int r = open_sock(&sock, err);
	if (r == 0 && sandbox_ifname)
		r = sandbox_sysctls(sandbox_ifname, ipv6, err);
	if (r == 0 && sandbox_ifname && a) {
		ifindex = (int)if_nametoindex(sandbox_ifname); /* the name is looked up in the sandbox's namespace */
		if (ifindex <= 0)
			r = lb_error_set(err, errno, "finding %s", sandbox_ifname);
	}
	if (setns(home, CLONE_NEWNET) < 0)
		return lb_error_set(err, ENOTRECOVERABLE, "returning to the host's network namespace");
	if (r < 0)
		return r;

	struct pipeline p = { .sock = sock, .err = err };
	queue_up(&p, 1, NULL); /* lo is link 1 of every network namespace */
	if (sandbox_ifname && a) {
		uint32_t addr = htonl(a->addr), gw = htonl(a->gateway);
		queue_up(&p, ifindex, NULL);
		queue_addr(&p, ifindex, AF_INET, &addr, 30);
		queue_default_route(&p, ifindex, AF_INET, &gw);
		if (ipv6) {
			queue_addr(&p, ifindex, AF_INET6, a->addr6, 126);
			queue_default_route(&p, ifindex, AF_INET6, a->gateway6);
			queue_neighbour(&p, ifindex, a->gateway6, a->host_mac);
		}
	}
	return finish(&p);
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

/*
 * slots.c — what the resolver and the relay ask the context about a sandbox: which slot (and tier) a source address
 * belongs to, its share of the services' bounds, its refusal counter, and whether an address is denied.
 *
 * Runs in lensboxd's service threads (root) or in the isolated services' worker (services_uid, no capabilities;
 * isolate.c), in the host's network namespace. A file of its own so that services.c depends on the slot table only,
 * not on net.c, which starts and stops the services: the two never call each other. Invariants: the tier and the
 * refusal counter are read and written in the MAP_SHARED table only (in an isolated worker ctx->slots is a stale
 * copy); the shares are counted under ctx->lock; an address that cannot be checked is denied.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "internal.h"
#include "lb/cleanup.h"

int lb_net_lookup_source(struct lb_net *ctx, uint32_t addr_be, unsigned *ret_slot, enum lb_tier *ret_tier)
{
	uint32_t a = ntohl(addr_be);
	if (a < ctx->pool_base)
		return -ENOENT;
	uint32_t off = a - ctx->pool_base;
	if (off % 4 != 2 || off / 4 >= ctx->n_slots)
		return -ENOENT;
	unsigned slot = off / 4;
	/* from the shared table: in an isolated services process, ctx->slots is a stale copy */
	enum lb_tier t = (enum lb_tier)atomic_load(&ctx->shared[slot].tier);
	if (t != LB_TIER_PACKAGES && t != LB_TIER_WEB)
		return -ENOENT;
	*ret_slot = slot;
	*ret_tier = t;
	return 0;
}

int lb_net_lookup_source6(struct lb_net *ctx, const uint8_t addr[16], unsigned *ret_slot, enum lb_tier *ret_tier)
{
	/* the pool's prefix is at most 96 bits and its slots use the low 32 bits only (lb_net_pool6_parse) */
	if (memcmp(addr, ctx->pool6_base, 12) != 0)
		return -ENOENT;
	uint32_t low;
	memcpy(&low, addr + 12, 4);
	low = ntohl(low);
	if (low % 4 != 2 || low / 4 >= ctx->n_slots)
		return -ENOENT;
	unsigned slot = low / 4;
	enum lb_tier t = (enum lb_tier)atomic_load(&ctx->shared[slot].tier);
	if ((t != LB_TIER_PACKAGES && t != LB_TIER_WEB) || !atomic_load(&ctx->shared[slot].ipv6))
		return -ENOENT;
	*ret_slot = slot;
	*ret_tier = t;
	return 0;
}

void lb_net_count_refusal(struct lb_net *ctx, unsigned slot)
{
	if (slot < ctx->n_slots)
		atomic_fetch_add(&ctx->shared[slot].refusals, 1);
}

bool lb_net_share_take(struct lb_net *ctx, unsigned slot, enum lb_share what)
{
	bool ok = false;
	pthread_mutex_lock(&ctx->lock);
	if (slot < ctx->n_slots) {
		unsigned *n = what == LB_SHARE_DNS ? &ctx->slots[slot].dns_inflight : &ctx->slots[slot].relay_conns;
		unsigned max = what == LB_SHARE_DNS ? ctx->dns_per_sandbox : ctx->relay_per_sandbox;
		if (*n < max) {
			(*n)++;
			ok = true;
		}
	}
	pthread_mutex_unlock(&ctx->lock);
	return ok;
}

void lb_net_share_release(struct lb_net *ctx, unsigned slot, enum lb_share what)
{
	pthread_mutex_lock(&ctx->lock);
	if (slot < ctx->n_slots) {
		unsigned *n = what == LB_SHARE_DNS ? &ctx->slots[slot].dns_inflight : &ctx->slots[slot].relay_conns;
		if (*n > 0) /* the slot may have been torn down and zeroed meanwhile */
			(*n)--;
	}
	pthread_mutex_unlock(&ctx->lock);
}

/* Whether addr (4 or 16 bytes of family) is the host's own, as the nft rules' `fib daddr type local` decides: the
 * kernel's route to it is local (or broadcast, anycast, multicast: nothing a connection should go to either). One
 * RTM_GETROUTE round trip, whatever the number of interfaces; getifaddrs() dumps every link and address (1.5 KB per
 * sandbox veth) and so grew with the sandboxes running. The reply is made while the request is sent, so the receive
 * never waits. 1, 0, or -errno (the callers deny then). */
static int addr_is_local(int family, const void *addr)
{
	size_t alen = family == AF_INET ? 4 : 16;
	struct {
		struct nlmsghdr nh;
		struct rtmsg rt;
		struct rtattr dst;
		uint8_t addr[16];
	} req;
	memset(&req, 0, sizeof(req));
	req.nh.nlmsg_len = (uint32_t)(NLMSG_LENGTH(sizeof(req.rt)) + RTA_LENGTH(alen));
	req.nh.nlmsg_type = RTM_GETROUTE;
	req.nh.nlmsg_flags = NLM_F_REQUEST;
	req.nh.nlmsg_seq = 1;
	req.rt.rtm_family = (unsigned char)family;
	req.rt.rtm_dst_len = (unsigned char)(alen * 8);
	req.dst.rta_len = (unsigned short)RTA_LENGTH(alen);
	req.dst.rta_type = RTA_DST;
	memcpy(req.addr, addr, alen);
	_cleanup_close_ int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
	if (fd < 0)
		return -errno;
	struct sockaddr_nl kernel = { .nl_family = AF_NETLINK };
	if (sendto(fd, &req, req.nh.nlmsg_len, 0, (struct sockaddr *)&kernel, sizeof(kernel)) < 0)
		return -errno;
	union {
		struct nlmsghdr nh;
		uint8_t bytes[4096];
	} reply;
	ssize_t n = recv(fd, &reply, sizeof(reply), MSG_DONTWAIT);
	if (n < 0)
		return -errno;
	if ((size_t)n < sizeof(struct nlmsghdr) || reply.nh.nlmsg_len > (size_t)n || reply.nh.nlmsg_seq != 1)
		return -EPROTO;
	if (reply.nh.nlmsg_type == NLMSG_ERROR) {
		const struct nlmsgerr *e = NLMSG_DATA(&reply.nh);
		if (reply.nh.nlmsg_len < NLMSG_LENGTH(sizeof(*e)))
			return -EPROTO;
		/* no route to it at all (unreachable, prohibited): not one of the host's addresses */
		return e->error == -ENETUNREACH || e->error == -EHOSTUNREACH || e->error == -EACCES ? 0
		       : e->error < 0								    ? e->error
												    : -EPROTO;
	}
	if (reply.nh.nlmsg_type != RTM_NEWROUTE || reply.nh.nlmsg_len < NLMSG_LENGTH(sizeof(struct rtmsg)))
		return -EPROTO;
	const struct rtmsg *rt = NLMSG_DATA(&reply.nh);
	return rt->rtm_type == RTN_LOCAL || rt->rtm_type == RTN_BROADCAST || rt->rtm_type == RTN_ANYCAST ||
	       rt->rtm_type == RTN_MULTICAST;
}

bool lb_net_addr_denied(struct lb_net *ctx, uint32_t addr_be)
{
	if (lb_cidr_list_contains(&ctx->denied, AF_INET, &addr_be))
		return true;
	return addr_is_local(AF_INET, &addr_be) != 0; /* an address that cannot be checked is denied */
}

bool lb_net_addr6_denied(struct lb_net *ctx, const uint8_t addr[16])
{
	if (lb_cidr_list_denies6(&ctx->denied, addr))
		return true;
	return addr_is_local(AF_INET6, addr) != 0;
}

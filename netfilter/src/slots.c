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
#include <ifaddrs.h>
#include <stdatomic.h>
#include <string.h>

#include "internal.h"

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

bool lb_net_addr_denied(struct lb_net *ctx, uint32_t addr_be)
{
	if (lb_cidr_list_contains(&ctx->denied, AF_INET, &addr_be))
		return true;
	/* the host's own addresses (what `fib daddr type local` means for the nft rules) */
	struct ifaddrs *ifa = NULL;
	if (getifaddrs(&ifa) < 0)
		return true; /* cannot tell: refuse */
	bool local = false;
	for (struct ifaddrs *i = ifa; i; i = i->ifa_next)
		if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET &&
		    ((struct sockaddr_in *)(void *)i->ifa_addr)->sin_addr.s_addr == addr_be)
			local = true;
	freeifaddrs(ifa);
	return local;
}

bool lb_net_addr6_denied(struct lb_net *ctx, const uint8_t addr[16])
{
	if (lb_cidr_list_denies6(&ctx->denied, addr))
		return true;
	struct ifaddrs *ifa = NULL;
	if (getifaddrs(&ifa) < 0)
		return true; /* cannot tell: refuse */
	bool local = false;
	for (struct ifaddrs *i = ifa; i; i = i->ifa_next)
		if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET6 &&
		    memcmp(((struct sockaddr_in6 *)(void *)i->ifa_addr)->sin6_addr.s6_addr, addr, 16) == 0)
			local = true;
	freeifaddrs(ifa);
	return local;
}

/*
 * nftpolicy.c — the one place that knows which word of which template in policy/network/ stands for what: lensboxd
 * (net.c) renders what it loads through here, and `lensbox policy check|diff` renders the same text to check the
 * templates and to rebuild the table lensboxd should have loaded.
 *
 * Pure functions: no privilege, no netlink, no logging. Every value put into rule text is generated here from
 * numbers and addresses, or is a name the caller validated (NAME, only ever inside a comment) or the uplinks'
 * interface names (UPLINKS, from rtnetlink); nothing from a sandbox is parsed by nft.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "lb/cleanup.h"
#include "lb/nftpolicy.h"

static const char *const base_words[] = { "POOL4", "RESOLVER_PORT", "RELAY_PORT" };
static const char *const tier_words[] = { "SB",	  "IFACE",	   "ADDR",	 "GATEWAY",
					  "NAME", "RESOLVER_PORT", "RELAY_PORT", "RESOLVER_ADDR" };
static const char *const offload_words[] = { "UPLINKS" };
static const char *const services_words[] = { "SERVICES_UID", "UPSTREAM", "UPSTREAM_PORT", "RESOLVER_PORT",
					      "RELAY_PORT" };

static const struct {
	const char *file;
	const char *const *words;
	size_t n;
} templates[LB_NFT_TEMPLATE_COUNT] = {
	[LB_NFT_BASE] = { "base.nft", base_words, LB_ARRAY_SIZE(base_words) },
	[LB_NFT_WEB] = { "web.nft", tier_words, LB_ARRAY_SIZE(tier_words) },
	[LB_NFT_PACKAGES] = { "packages.nft", tier_words, LB_ARRAY_SIZE(tier_words) },
	[LB_NFT_OFFLOAD] = { "offload.nft", offload_words, LB_ARRAY_SIZE(offload_words) },
	[LB_NFT_SERVICES] = { "services.nft", services_words, LB_ARRAY_SIZE(services_words) },
};

const char *lb_nft_template_file(enum lb_nft_template t)
{
	return (unsigned)t < LB_NFT_TEMPLATE_COUNT ? templates[t].file : "?";
}

const char *const *lb_nft_template_words(enum lb_nft_template t, size_t *ret_n)
{
	if ((unsigned)t >= LB_NFT_TEMPLATE_COUNT) {
		*ret_n = 0;
		return NULL;
	}
	*ret_n = templates[t].n;
	return templates[t].words;
}

static void ip_str(uint32_t host_order, char buf[16])
{
	uint32_t be = htonl(host_order);
	inet_ntop(AF_INET, &be, buf, 16);
}

int lb_nft_vars_init(struct lb_nft_vars *vars, const char *pool, uint16_t resolver_port, uint16_t relay_port)
{
	struct lb_cidr c;
	const char *pool_s = pool ? pool : LB_NET_DEFAULT_POOL;
	if (lb_cidr_parse(pool_s, &c) < 0 || c.family != AF_INET || c.prefix < 8 || c.prefix > 28)
		return -EINVAL;
	uint32_t be;
	memcpy(&be, c.addr, 4);
	vars->pool_base = ntohl(be);
	char base[16];
	ip_str(vars->pool_base, base);
	snprintf(vars->pool, sizeof(vars->pool), "%s/%u", base, c.prefix);
	vars->resolver_port = resolver_port ? resolver_port : LB_NET_DEFAULT_RESOLVER_PORT;
	vars->relay_port = relay_port ? relay_port : LB_NET_DEFAULT_RELAY_PORT;
	return 0;
}

int lb_nft_render(enum lb_nft_template t, const char *tmpl, const struct lb_nft_vars *v, char **ret,
		  struct lb_error *err)
{
	if ((unsigned)t >= LB_NFT_TEMPLATE_COUNT)
		return lb_error_setx(err, EINVAL, "no such template");
	char rport[8], lport[8], sb[16], ifname[16], gw[16], addr[16], uid[16], upport[8];
	snprintf(rport, sizeof(rport), "%u", v->resolver_port);
	snprintf(lport, sizeof(lport), "%u", v->relay_port);
	snprintf(sb, sizeof(sb), "sb%u", v->slot);
	snprintf(ifname, sizeof(ifname), LB_NET_IFPREFIX "%u", v->slot);
	ip_str(v->pool_base + 4 * v->slot + 1, gw);
	ip_str(v->pool_base + 4 * v->slot + 2, addr);
	snprintf(uid, sizeof(uid), "%u", (unsigned)v->services_uid);
	snprintf(upport, sizeof(upport), "%u", v->upstream_port);
	/* in the order of the word tables above */
	const char *base_vals[] = { v->pool, rport, lport };
	const char *tier_vals[] = { sb, ifname, addr, gw, v->name ? v->name : "", rport, lport, LB_NET_RESOLVER_ADDR };
	const char *offload_vals[] = { v->uplinks ? v->uplinks : "" };
	const char *services_vals[] = { uid, v->upstream, upport, rport, lport };
	const char *const *vals = t == LB_NFT_BASE			    ? base_vals
				  : t == LB_NFT_WEB || t == LB_NFT_PACKAGES ? tier_vals
				  : t == LB_NFT_OFFLOAD			    ? offload_vals
									    : services_vals;
	int r = lb_template_fill(tmpl, templates[t].words, vals, templates[t].n, ret, err);
	if (r < 0)
		return lb_error_wrap(err, "network/%s", templates[t].file);
	return 0;
}

int lb_nft_render_denied(const struct lb_cidr_list *denied, char **ret, struct lb_error *err)
{
	_cleanup_free_ char *v4 = NULL, *v6 = NULL;
	size_t l4 = 0, l6 = 0;
	FILE *f4 = open_memstream(&v4, &l4), *f6 = open_memstream(&v6, &l6);
	if (!f4 || !f6) {
		if (f4)
			fclose(f4);
		if (f6)
			fclose(f6);
		return lb_error_set(err, ENOMEM, "building the denied sets");
	}
	for (size_t i = 0; i < denied->n; i++) {
		const struct lb_cidr *c = &denied->v[i];
		char s[INET6_ADDRSTRLEN];
		inet_ntop(c->family, c->addr, s, sizeof(s));
		FILE *f = c->family == AF_INET ? f4 : f6;
		fprintf(f, "%s%s/%u", ftell(f) ? ", " : "", s, c->prefix);
	}
	fclose(f4);
	fclose(f6);
	char *out = NULL;
	if (asprintf(&out, "%s%s%s%s%s%s", l4 ? "add element inet lensbox denied4 { " : "", v4, l4 ? " }\n" : "",
		     l6 ? "add element inet lensbox denied6 { " : "", v6, l6 ? " }\n" : "") < 0)
		return lb_error_set(err, ENOMEM, "building the denied sets");
	*ret = out;
	return 0;
}

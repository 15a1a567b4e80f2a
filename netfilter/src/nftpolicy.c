/*
 * nftpolicy.c — the one place that knows which word of which template in policy/network/ stands for what: lensboxd
 * (net.c) renders what it loads through here, and `lensbox policy check|diff` renders the same text to check the
 * templates and to rebuild the table lensboxd should have loaded.
 *
 * Pure functions: no privilege, no netlink, no logging. Every value put into rule text is generated here from
 * numbers and addresses, or is the uplinks' interface names (UPLINKS, from rtnetlink); nothing from a sandbox is
 * parsed by nft, and a slot's rules name no sandbox (so they can stay loaded from one sandbox to the next). A slot's
 * addresses are its /30 of the IPv4 pool and its /126 of the IPv6 pool, both at offset 4 * slot (gateway + 1,
 * sandbox + 2).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "lb/cleanup.h"
#include "lb/nftpolicy.h"

static const char *const base_words[] = { "POOL4", "POOL6", "RESOLVER_PORT", "RELAY_PORT" };
static const char *const tier_words[] = { "SB",		"IFACE",	 "ADDR",  "GATEWAY", "RESOLVER_PORT",
					  "RELAY_PORT", "RESOLVER_ADDR", "ADDR6", "GATEWAY6" };
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

int lb_net_pool6_parse(const char *s, struct lb_cidr *ret, bool *ret_on)
{
	*ret_on = !s || strcmp(s, "off") != 0;
	if (lb_cidr_parse(*ret_on && s ? s : LB_NET_DEFAULT_POOL6, ret) < 0 || ret->family != AF_INET6 ||
	    ret->prefix < 8 || ret->prefix > 96)
		return -EINVAL;
	return 0;
}

void lb_net_pool6_addr(const uint8_t base[16], unsigned slot, unsigned k, uint8_t ret[16])
{
	memcpy(ret, base, 16);
	uint32_t low;
	memcpy(&low, ret + 12, 4);
	low = htonl(ntohl(low) + 4 * slot + k); /* the pool's low 32 bits are zero (prefix <= 96) */
	memcpy(ret + 12, &low, 4);
}

static void ip6_str(const uint8_t a[16], char buf[INET6_ADDRSTRLEN])
{
	inet_ntop(AF_INET6, a, buf, INET6_ADDRSTRLEN);
}

int lb_nft_vars_init(struct lb_nft_vars *vars, const char *pool, const char *pool6, uint16_t resolver_port,
		     uint16_t relay_port)
{
	struct lb_cidr c6;
	bool on;
	if (lb_net_pool6_parse(pool6, &c6, &on) < 0)
		return -EINVAL;
	memcpy(vars->pool6_base, c6.addr, 16);
	char base6[INET6_ADDRSTRLEN];
	ip6_str(c6.addr, base6);
	snprintf(vars->pool6, sizeof(vars->pool6), "%s/%u", base6, c6.prefix);
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
	char gw6[INET6_ADDRSTRLEN], addr6[INET6_ADDRSTRLEN];
	uint8_t a6[16];
	lb_net_pool6_addr(v->pool6_base, v->slot, 1, a6);
	ip6_str(a6, gw6);
	lb_net_pool6_addr(v->pool6_base, v->slot, 2, a6);
	ip6_str(a6, addr6);
	snprintf(rport, sizeof(rport), "%u", v->resolver_port);
	snprintf(lport, sizeof(lport), "%u", v->relay_port);
	snprintf(sb, sizeof(sb), "sb%u", v->slot);
	snprintf(ifname, sizeof(ifname), LB_NET_IFPREFIX "%u", v->slot);
	ip_str(v->pool_base + 4 * v->slot + 1, gw);
	ip_str(v->pool_base + 4 * v->slot + 2, addr);
	snprintf(uid, sizeof(uid), "%u", (unsigned)v->services_uid);
	snprintf(upport, sizeof(upport), "%u", v->upstream_port);
	/* in the order of the word tables above */
	const char *base_vals[] = { v->pool, v->pool6, rport, lport };
	const char *tier_vals[] = { sb, ifname, addr, gw, rport, lport, LB_NET_RESOLVER_ADDR, addr6, gw6 };
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

/* An IPv6 range that spans 64:ff9b::/96 as the two intervals around it (the prefix is decided per embedded IPv4
 * address: lb_cidr_list_denies6). */
static void print_without_nat64(FILE *f, const struct lb_cidr *c)
{
	uint8_t first[16], last[16], before[16], after[16];
	for (unsigned i = 0; i < 16; i++) {
		unsigned bits = c->prefix > 8 * i ? c->prefix - 8 * i : 0;
		uint8_t mask = (uint8_t)(bits >= 8 ? 0xff : 0xff << (8 - bits));
		first[i] = c->addr[i] & mask;
		last[i] = (uint8_t)(c->addr[i] | (uint8_t)~mask);
	}
	memcpy(before, lb_nat64_prefix_addr, 16); /* 64:ff9b:: - 1 */
	for (int i = 15; i >= 0 && before[i]-- == 0; i--)
		;
	memcpy(after, lb_nat64_prefix_addr, 16); /* 64:ff9b::ffff:ffff + 1 = 64:ff9b::1:0:0 */
	after[11] = 1;
	char a[INET6_ADDRSTRLEN], b[INET6_ADDRSTRLEN];
	if (memcmp(first, lb_nat64_prefix_addr, 16) != 0) { /* else the range starts at the prefix */
		ip6_str(first, a);
		ip6_str(before, b);
		fprintf(f, "%s%s-%s", ftell(f) ? ", " : "", a, b);
	}
	ip6_str(after, a);
	ip6_str(last, b);
	fprintf(f, "%s%s-%s", ftell(f) ? ", " : "", a, b);
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
		if (lb_cidr_spans_nat64(c)) {
			print_without_nat64(f6, c);
		} else {
			fprintf(f, "%s%s/%u", ftell(f) ? ", " : "", s, c->prefix);
		}
		if (c->family == AF_INET) { /* its NAT64 form (lb_cidr_list_denies6) */
			uint8_t a6[16];
			memcpy(a6, lb_nat64_prefix_addr, 16);
			memcpy(a6 + LB_NAT64_PREFIX_LEN, c->addr, 4);
			ip6_str(a6, s);
			fprintf(f6, "%s%s/%u", ftell(f6) ? ", " : "", s, 96 + c->prefix);
		}
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

/* "add element inet lensbox MAP { "KEY" : jump CHAIN }" and nothing else on the line: names of letters, digits and
 * '_' (the renderer made them; anything else means the template says something this parser does not know). */
static bool name_ok(const char *s, size_t max)
{
	size_t n = strlen(s);
	if (n == 0 || n >= max)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
			return false;
	return true;
}

static int parse_element(const char *line, size_t len, struct lb_nft_element *e)
{
	char text[192], map[32], key[16], chain[64];
	int end = -1;
	if (len >= sizeof(text))
		return -EINVAL;
	memcpy(text, line, len);
	text[len] = '\0';
	if (sscanf(text, "add element inet lensbox %31s { \"%15[^\"]\" : jump %63s }%n", map, key, chain, &end) != 3 ||
	    end < 0 || text[end] != '\0' || !name_ok(map, sizeof(map)) || !name_ok(key, sizeof(key)) ||
	    !name_ok(chain, sizeof(chain)))
		return -EINVAL;
	snprintf(e->map, sizeof(e->map), "%s", map);
	snprintf(e->key, sizeof(e->key), "%s", key);
	snprintf(e->chain, sizeof(e->chain), "%s", chain);
	return 0;
}

int lb_nft_split_elements(const char *rendered, struct lb_nft_element *els, size_t *ret_n, size_t *ret_head_len)
{
	const char *first = NULL;
	for (const char *p = rendered; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
		if (strncmp(p, "add element ", 12) == 0) {
			first = p;
			break;
		}
	if (!first)
		return -EINVAL;
	size_t n = 0;
	for (const char *p = first; *p;) {
		size_t len = strcspn(p, "\n");
		bool blank = strspn(p, " \t") == len;
		if (p[0] != '#' && !blank) {
			struct lb_nft_element e;
			if (n == LB_NFT_MAX_ELEMENTS || parse_element(p, len, &e) < 0)
				return -EINVAL;
			if (els)
				els[n] = e;
			n++;
		}
		p += len;
		if (*p == '\n')
			p++;
	}
	if (ret_n)
		*ret_n = n;
	if (ret_head_len)
		*ret_head_len = (size_t)(first - rendered);
	return 0;
}

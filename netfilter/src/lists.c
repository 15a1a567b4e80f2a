/*
 * lists.c — the two admin-edited lists of the network tiers: address ranges (policy/network/denied.list) and host
 * names (policy/network/packages.list), parsed and matched.
 *
 * Runs in lensboxd and its tools at load time (parsing) and in the resolver and relay threads (matching); needs no
 * privilege. An IPv6 address is also checked in its NAT64 form against the IPv4 ranges (lb_cidr_list_denies6).
 * Invariants: a parsed CIDR has zero host bits and prefix <= 32/128; a listed name is a valid lower-case host name.
 * Lists are immutable once loaded, so matching needs no lock.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lb/cleanup.h"
#include "lb/netparse.h"

int lb_cidr_parse(const char *s, struct lb_cidr *ret)
{
	char buf[64];
	size_t len = strlen(s);
	if (len == 0 || len >= sizeof(buf))
		return -EINVAL;
	memcpy(buf, s, len + 1);

	struct lb_cidr c = { 0 };
	char *slash = strchr(buf, '/');
	if (slash)
		*slash = '\0';
	if (inet_pton(AF_INET, buf, c.addr) == 1) {
		c.family = AF_INET;
		c.prefix = 32;
	} else if (inet_pton(AF_INET6, buf, c.addr) == 1) {
		c.family = AF_INET6;
		c.prefix = 128;
	} else {
		return -EINVAL;
	}
	if (slash) {
		const char *p = slash + 1;
		if (*p < '0' || *p > '9' || strlen(p) > 3)
			return -EINVAL;
		unsigned long v = strtoul(p, NULL, 10);
		for (const char *q = p; *q; q++)
			if (*q < '0' || *q > '9')
				return -EINVAL;
		if (v > c.prefix)
			return -EINVAL;
		c.prefix = (unsigned)v;
	}
	/* host bits must be zero: a range written as 10.0.0.1/8 is probably a typo */
	size_t bytes = c.family == AF_INET ? 4 : 16;
	for (size_t i = 0; i < bytes; i++) {
		unsigned bit0 = (unsigned)i * 8;
		uint8_t mask;
		if (bit0 + 8 <= c.prefix)
			mask = 0xff;
		else if (bit0 >= c.prefix)
			mask = 0;
		else
			mask = (uint8_t)(0xff << (8 - (c.prefix - bit0)));
		if (c.addr[i] & (uint8_t)~mask)
			return -EINVAL;
	}
	*ret = c;
	return 0;
}

bool lb_cidr_contains(const struct lb_cidr *c, int family, const void *addr)
{
	if (c->family != family)
		return false;
	const uint8_t *a = addr;
	unsigned full = c->prefix / 8, rest = c->prefix % 8;
	if (memcmp(a, c->addr, full) != 0)
		return false;
	if (rest == 0)
		return true;
	uint8_t mask = (uint8_t)(0xff << (8 - rest));
	return (a[full] & mask) == (c->addr[full] & mask);
}

int lb_cidr_list_add(struct lb_cidr_list *l, const struct lb_cidr *c)
{
	if (l->n >= 4096)
		return -E2BIG;
	struct lb_cidr *v = realloc(l->v, (l->n + 1) * sizeof(*v));
	if (!v)
		return -ENOMEM;
	v[l->n++] = *c;
	l->v = v;
	return 0;
}

bool lb_cidr_list_contains(const struct lb_cidr_list *l, int family, const void *addr)
{
	for (size_t i = 0; i < l->n; i++)
		if (lb_cidr_contains(&l->v[i], family, addr))
			return true;
	return false;
}

const uint8_t lb_nat64_prefix_addr[16] = { 0, 0x64, 0xff, 0x9b };

bool lb_cidr_spans_nat64(const struct lb_cidr *c)
{
	return c->family == AF_INET6 && c->prefix < 96 && lb_cidr_contains(c, AF_INET6, lb_nat64_prefix_addr);
}

bool lb_cidr_list_denies6(const struct lb_cidr_list *l, const uint8_t addr[16])
{
	bool nat64 = memcmp(addr, lb_nat64_prefix_addr, LB_NAT64_PREFIX_LEN) == 0;
	for (size_t i = 0; i < l->n; i++)
		if (lb_cidr_contains(&l->v[i], AF_INET6, addr) && !(nat64 && lb_cidr_spans_nat64(&l->v[i])))
			return true;
	/* a NAT64 gateway on the way would turn 64:ff9b::a.b.c.d into a.b.c.d */
	return nat64 && lb_cidr_list_contains(l, AF_INET, addr + LB_NAT64_PREFIX_LEN);
}

void lb_cidr_list_free(struct lb_cidr_list *l)
{
	free(l->v);
	l->v = NULL;
	l->n = 0;
}

/* Calls fn on each line's first word (comments and blank lines skipped); stops at the first error. */
static int for_each_word(const char *text, int (*fn)(const char *word, void *data), void *data, unsigned *ret_line)
{
	unsigned line = 0;
	const char *p = text;
	while (*p) {
		line++;
		const char *eol = strchr(p, '\n');
		size_t n = eol ? (size_t)(eol - p) : strlen(p);
		char buf[300];
		if (n >= sizeof(buf)) {
			*ret_line = line;
			return -E2BIG;
		}
		memcpy(buf, p, n);
		buf[n] = '\0';
		char *hash = strchr(buf, '#');
		if (hash)
			*hash = '\0';
		char *w = buf;
		while (*w == ' ' || *w == '\t' || *w == '\r')
			w++;
		char *end = w;
		while (*end && *end != ' ' && *end != '\t' && *end != '\r')
			end++;
		char *after = end;
		while (*after == ' ' || *after == '\t' || *after == '\r')
			after++;
		if (*after) {
			*ret_line = line;
			return -EINVAL; /* one word a line */
		}
		*end = '\0';
		if (*w) {
			int r = fn(w, data);
			if (r < 0) {
				*ret_line = line;
				return r;
			}
		}
		p += n;
		if (*p == '\n')
			p++;
	}
	return 0;
}

static int add_cidr_word(const char *word, void *data)
{
	struct lb_cidr c;
	int r = lb_cidr_parse(word, &c);
	if (r < 0)
		return r;
	return lb_cidr_list_add(data, &c);
}

int lb_cidr_list_parse(const char *text, struct lb_cidr_list *ret, struct lb_error *err)
{
	struct lb_cidr_list l = { 0 };
	unsigned line = 0;
	int r = for_each_word(text, add_cidr_word, &l, &line);
	if (r < 0) {
		lb_cidr_list_free(&l);
		return lb_error_set(err, r, "line %u: expected one address range (a.b.c.d/n or v6/n, host bits zero)",
				    line);
	}
	*ret = l;
	return 0;
}

bool lb_hostname_valid(const char *s, size_t len)
{
	if (len == 0 || len > LB_DNS_NAME_MAX)
		return false;
	size_t label = 0;
	for (size_t i = 0; i < len; i++) {
		char c = s[i];
		if (c == '.') {
			if (label == 0 || s[i - 1] == '-')
				return false;
			label = 0;
			continue;
		}
		bool ok =
		    (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
		if (!ok)
			return false;
		if (c == '-' && label == 0)
			return false;
		if (++label > 63)
			return false;
	}
	return label > 0 && s[len - 1] != '-';
}

int lb_name_list_add(struct lb_name_list *l, const char *name)
{
	size_t len = strlen(name);
	if (!lb_hostname_valid(name, len))
		return -EINVAL;
	if (lb_name_list_contains(l, name, len))
		return 0;
	if (l->n >= 1024)
		return -E2BIG;
	char **v = realloc(l->v, (l->n + 1) * sizeof(*v));
	if (!v)
		return -ENOMEM;
	l->v = v;
	char *copy = strdup(name);
	if (!copy)
		return -ENOMEM;
	for (char *p = copy; *p; p++)
		*p = (char)tolower((unsigned char)*p);
	l->v[l->n++] = copy;
	return 0;
}

static int add_name_word(const char *word, void *data)
{
	return lb_name_list_add(data, word);
}

int lb_name_list_parse(const char *text, struct lb_name_list *ret, struct lb_error *err)
{
	struct lb_name_list l = { 0 };
	unsigned line = 0;
	int r = for_each_word(text, add_name_word, &l, &line);
	if (r < 0) {
		lb_name_list_free(&l);
		return lb_error_set(err, r, "line %u: expected one host name", line);
	}
	*ret = l;
	return 0;
}

bool lb_name_list_contains(const struct lb_name_list *l, const char *name, size_t len)
{
	for (size_t i = 0; i < l->n; i++)
		if (strlen(l->v[i]) == len && strncasecmp(l->v[i], name, len) == 0)
			return true;
	return false;
}

void lb_name_list_free(struct lb_name_list *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->v[i]);
	free(l->v);
	l->v = NULL;
	l->n = 0;
}

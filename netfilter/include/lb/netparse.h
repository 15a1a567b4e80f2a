/*
 * netparse.h — the hostile-input parsers of the network tiers and the address lists they are checked against.
 *
 * Used inside lensboxd's resolver and relay threads (root, but these functions touch nothing but the buffers they
 * are given) and by the unit tests and fuzz targets. Every parser reads only [buf, buf+len), never allocates, never
 * recurses, and bounds every length it reads before using it; malformed input is an error, never a crash.
 */
#ifndef LB_NETPARSE_H
#define LB_NETPARSE_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lb/error.h"

#define LB_DNS_NAME_MAX 253 /* presentation form, no trailing dot */

/* ---- address ranges (denied.list) ---- */

struct lb_cidr {
	int family; /* AF_INET or AF_INET6 */
	uint8_t addr[16];
	unsigned prefix;
};

/* Parses "a.b.c.d[/n]" or "v6[/n]"; host bits must be zero. */
int lb_cidr_parse(const char *s, struct lb_cidr *ret);
bool lb_cidr_contains(const struct lb_cidr *c, int family, const void *addr);

struct lb_cidr_list {
	struct lb_cidr *v;
	size_t n;
};

/* Parses a list file: one CIDR a line, '#' starts a comment. Errors name the line. */
int lb_cidr_list_parse(const char *text, struct lb_cidr_list *ret, struct lb_error *err);
int lb_cidr_list_add(struct lb_cidr_list *l, const struct lb_cidr *c);
bool lb_cidr_list_contains(const struct lb_cidr_list *l, int family, const void *addr);
/* Whether an IPv6 address is denied by l. An address of the well-known NAT64 prefix 64:ff9b::/96 (RFC 6052: what
 * an IPv6-only network reaches IPv4 sites through) is decided by the IPv4 address it carries, checked against l's
 * IPv4 ranges; a wider IPv6 range of l that merely spans the prefix (denied.list's ::/3) leaves it to that check,
 * while a range of l inside the prefix (or the prefix itself) still denies. Any other address: one of l's IPv6
 * ranges holds it. The other ways to write an IPv4 address in IPv6 (::ffff:0:0/96, ::/96, 64:ff9b:1::/48, 6to4
 * 2002::/16, Teredo in 2001::/32) are denied whole by policy/network/denied.list. */
bool lb_cidr_list_denies6(const struct lb_cidr_list *l, const uint8_t addr[16]);
/* Whether c is an IPv6 range wider than 64:ff9b::/96 that holds it (lb_nft_render_denied leaves the prefix out). */
bool lb_cidr_spans_nat64(const struct lb_cidr *c);
/* RFC 6052's well-known NAT64 prefix, 64:ff9b::/96: its first address; the prefix is its first 12 bytes */
#define LB_NAT64_PREFIX_LEN 12
extern const uint8_t lb_nat64_prefix_addr[16];
void lb_cidr_list_free(struct lb_cidr_list *l);

/* ---- host names (packages.list) ---- */

/* True when s is a plausible DNS host name: 1..253 chars of [a-z0-9.-] (case-insensitive), labels 1..63, no empty
 * label, no leading or trailing '-' in a label. */
bool lb_hostname_valid(const char *s, size_t len);

struct lb_name_list {
	char **v;
	size_t n;
};

/* One host name a line, '#' comments; names are lower-cased. */
int lb_name_list_parse(const char *text, struct lb_name_list *ret, struct lb_error *err);
int lb_name_list_add(struct lb_name_list *l, const char *name);
/* Exact, case-insensitive membership (no wildcards: a listed name never admits its subdomains). */
bool lb_name_list_contains(const struct lb_name_list *l, const char *name, size_t len);
void lb_name_list_free(struct lb_name_list *l);

/* ---- DNS (RFC 1035) ---- */

#define LB_DNS_TYPE_A	      1
#define LB_DNS_TYPE_AAAA      28
#define LB_DNS_RCODE_NOERROR  0
#define LB_DNS_RCODE_FORMERR  1
#define LB_DNS_RCODE_SERVFAIL 2
#define LB_DNS_RCODE_NXDOMAIN 3
#define LB_DNS_RCODE_REFUSED  5

struct lb_dns_query {
	uint16_t id;
	bool rd;
	char name[LB_DNS_NAME_MAX + 1]; /* lower-cased, no trailing dot */
	uint16_t qtype;
	uint16_t qclass;
	size_t question_end; /* offset just past the question in the packet */
};

/* Parses a client's query: one question, no answers, no compression in the name, at most one additional record
 * (EDNS). -EBADMSG on anything else; -EINVAL when the name is not a valid host name. */
int lb_dns_parse_query(const uint8_t *buf, size_t len, struct lb_dns_query *ret);

/* Builds a query for name/qtype with id into buf. Returns the length or a negative errno. */
int lb_dns_build_query(uint16_t id, const char *name, uint16_t qtype, uint8_t *buf, size_t size);

/* Parses an upstream's answer to q (same id, same question): collects up to max addresses of type q->qtype found
 * in the answer section for q->name or for a name reached from it through CNAMEs (compression pointers followed
 * only backwards, each name at most 255 bytes). *ret_rcode is the answer's rcode, *ret_ttl the smallest TTL seen. */
int lb_dns_parse_answer(const uint8_t *buf, size_t len, const struct lb_dns_query *q, uint8_t (*addrs)[16], size_t max,
			size_t *ret_n, int *ret_rcode, uint32_t *ret_ttl);

/* Builds the response to q: rcode and n addresses of q->qtype (4 or 16 bytes each) with ttl. Returns the length. */
int lb_dns_build_response(const struct lb_dns_query *q, int rcode, const uint8_t (*addrs)[16], size_t n, uint32_t ttl,
			  uint8_t *buf, size_t size);

/* ---- the first bytes of a TCP connection to 443 (TLS) or 80 (HTTP) ---- */

enum lb_hello_result {
	LB_HELLO_NEED_MORE = 1, /* not enough bytes yet */
	LB_HELLO_OK = 0,	/* name found */
};

/* Finds the server_name (host_name type) of a TLS ClientHello that starts buf. The whole ClientHello must be in the
 * first TLS record. Returns LB_HELLO_OK with the lower-cased name, LB_HELLO_NEED_MORE, -EBADMSG on malformed input,
 * -ENOENT when there is no SNI, -EINVAL when the name is not a valid host name. */
int lb_tls_client_hello_sni(const uint8_t *buf, size_t len, char name[LB_DNS_NAME_MAX + 1]);

/* Finds the Host of an HTTP/1.x request that starts buf: origin-form target ("/..."), exactly one Host header, the
 * port (if any) stripped. *ret_header_len is the length up to and including the blank line. Returns LB_HELLO_OK,
 * LB_HELLO_NEED_MORE, -EBADMSG, -ENOENT (no Host) or -EINVAL (invalid name). */
int lb_http_request_host(const uint8_t *buf, size_t len, char name[LB_DNS_NAME_MAX + 1], size_t *ret_header_len);

#endif

/* Unit tests for netfilter/src/dns.c: queries from sandboxes and answers from upstream are hostile DNS bytes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <cmocka.h>

#include "lb/netparse.h"

static size_t query(uint8_t *buf, const char *name, uint16_t qtype)
{
	int n = lb_dns_build_query(0x4242, name, qtype, buf, 512);
	assert_true(n > 0);
	return (size_t)n;
}

static void query_roundtrip(void **state)
{
	(void)state;
	uint8_t buf[512];
	size_t n = query(buf, "PyPI.org", LB_DNS_TYPE_A);
	struct lb_dns_query q;
	assert_int_equal(lb_dns_parse_query(buf, n, &q), 0);
	assert_string_equal(q.name, "pypi.org");
	assert_int_equal(q.qtype, LB_DNS_TYPE_A);
	assert_int_equal(q.id, 0x4242);
	assert_true(q.rd);
	/* every truncation is an error, never a read past the end */
	for (size_t k = 0; k < n; k++)
		assert_int_equal(lb_dns_parse_query(buf, k, &q), -EBADMSG);
}

static void query_attacks(void **state)
{
	(void)state;
	uint8_t buf[512], b2[512];
	size_t n = query(buf, "a.example", LB_DNS_TYPE_A);
	struct lb_dns_query q;

	memcpy(b2, buf, n);
	b2[2] |= 0x80; /* QR: a response sent as a query */
	assert_int_equal(lb_dns_parse_query(b2, n, &q), -EBADMSG);
	memcpy(b2, buf, n);
	b2[5] = 2; /* two questions */
	assert_int_equal(lb_dns_parse_query(b2, n, &q), -EBADMSG);
	memcpy(b2, buf, n);
	b2[7] = 1; /* an answer in a query */
	assert_int_equal(lb_dns_parse_query(b2, n, &q), -EBADMSG);
	memcpy(b2, buf, n);
	b2[2] |= 0x28; /* opcode 5 (UPDATE) */
	assert_int_equal(lb_dns_parse_query(b2, n, &q), -EBADMSG);

	/* a compression pointer in a query (here to itself: a loop) */
	uint8_t loop[] = { 0, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xc0, 12, 0, 1, 0, 1 };
	assert_int_equal(lb_dns_parse_query(loop, sizeof(loop), &q), -EBADMSG);
	/* a label longer than the packet */
	uint8_t longlabel[] = { 0, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 63, 'a', 'b', 0, 0, 1, 0, 1 };
	assert_int_equal(lb_dns_parse_query(longlabel, sizeof(longlabel), &q), -EBADMSG);
	/* a NUL inside a label would cut the name short ("pypi.org\0x" read as "pypi.org") */
	uint8_t nul[] = { 0,   1,   1,	 0, 0,	 1,   0,   0, 0,   0, 0, 0, 4, 'p',
			  'y', 'p', 'i', 5, 'o', 'r', 'g', 0, 'x', 0, 0, 1, 0, 1 };
	assert_int_equal(lb_dns_parse_query(nul, sizeof(nul), &q), -EBADMSG);
	/* "pypi.org" as a single label looks like the listed name once printed */
	uint8_t dot[] = {
		0, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 8, 'p', 'y', 'p', 'i', '.', 'o', 'r', 'g', 0, 0, 1, 0, 1
	};
	assert_int_equal(lb_dns_parse_query(dot, sizeof(dot), &q), -EBADMSG);
	/* a space inside a label: not a host name */
	uint8_t odd[] = { 0, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 3, 'a', '!', ' ', 3, 'c', 'o', 'm', 0, 0, 1, 0, 1 };
	assert_int_equal(lb_dns_parse_query(odd, sizeof(odd), &q), -EINVAL);

	/* a name over 255 bytes on the wire: 5 labels of 63 */
	uint8_t big[12 + 5 * 64 + 1 + 4] = { 0, 1, 1, 0, 0, 1 };
	size_t off = 12;
	for (int i = 0; i < 5; i++) {
		big[off++] = 63;
		memset(big + off, 'a', 63);
		off += 63;
	}
	big[off++] = 0;
	big[off + 1] = 1;
	big[off + 3] = 1;
	assert_int_equal(lb_dns_parse_query(big, sizeof(big), &q), -EBADMSG);
	/* and building a query for an over-long label fails */
	char name[80];
	memset(name, 'a', 70);
	name[70] = '\0';
	assert_true(lb_dns_build_query(1, name, 1, buf, sizeof(buf)) < 0);
}

/* An upstream answer: question, then the given answer records (already encoded). */
static size_t answer(uint8_t *buf, uint16_t id, const char *qname, uint16_t flags, const uint8_t *rrs, size_t rrlen,
		     unsigned ancount)
{
	int n = lb_dns_build_query(id, qname, LB_DNS_TYPE_A, buf, 1024);
	assert_true(n > 0);
	buf[2] = (uint8_t)(flags >> 8);
	buf[3] = (uint8_t)flags;
	buf[7] = (uint8_t)ancount;
	if (rrlen)
		memcpy(buf + n, rrs, rrlen);
	return (size_t)n + rrlen;
}

static void answer_parsing(void **state)
{
	(void)state;
	struct lb_dns_query q = { .id = 7, .qtype = LB_DNS_TYPE_A, .qclass = 1 };
	strcpy(q.name, "pypi.org");
	uint8_t buf[1024], addrs[4][16];
	size_t n;
	int rcode;
	uint32_t ttl;
	/* pypi.org CNAME cdn.example (pointer to offset 12 for the owner); cdn.example A 1.2.3.4; other.example
	 * A 6.6.6.6 */
	const uint8_t rrs[] = {
		0xc0, 12,  0,	5,  0, 1,   0,	 0,   0, 60,  0,   13,	3,   'c', 'd', 'n', 7, 'e', 'x', 'a', 'm',
		'p',  'l', 'e', 0,  3, 'c', 'd', 'n', 7, 'e', 'x', 'a', 'm', 'p', 'l', 'e', 0, 0,   1,	 0,   1,
		0,    0,   0,	30, 0, 4,   1,	 2,   3, 4,   5,   'o', 't', 'h', 'e', 'r', 7, 'e', 'x', 'a', 'm',
		'p',  'l', 'e', 0,  0, 1,   0,	 1,   0, 0,   0,   30,	0,   4,	  6,   6,   6, 6,
	};
	size_t len = answer(buf, 7, "pypi.org", 0x8180, rrs, sizeof(rrs), 3);
	assert_int_equal(lb_dns_parse_answer(buf, len, &q, addrs, 4, &n, &rcode, &ttl), 0);
	assert_int_equal(n, 1); /* the record for an unrelated name is ignored: no cache poisoning */
	assert_memory_equal(addrs[0], "\x01\x02\x03\x04", 4);
	assert_int_equal(rcode, 0);
	assert_int_equal(ttl, 30);
	for (size_t k = 0; k < len; k++) /* truncations never crash */
		lb_dns_parse_answer(buf, k, &q, addrs, 4, &n, &rcode, &ttl);

	/* wrong id */
	len = answer(buf, 8, "pypi.org", 0x8180, rrs, sizeof(rrs), 3);
	assert_int_equal(lb_dns_parse_answer(buf, len, &q, addrs, 4, &n, &rcode, &ttl), -EBADMSG);
	/* another question */
	len = answer(buf, 7, "evil.org", 0x8180, rrs, sizeof(rrs), 3);
	assert_int_equal(lb_dns_parse_answer(buf, len, &q, addrs, 4, &n, &rcode, &ttl), -EBADMSG);
	/* truncated flag */
	len = answer(buf, 7, "pypi.org", 0x8380, rrs, sizeof(rrs), 3);
	assert_int_equal(lb_dns_parse_answer(buf, len, &q, addrs, 4, &n, &rcode, &ttl), -EMSGSIZE);
	/* a forward pointer (loop material) */
	const uint8_t fwd[] = { 0xc0, 40, 0, 1, 0, 1, 0, 0, 0, 1, 0, 4, 1, 1, 1, 1 };
	len = answer(buf, 7, "pypi.org", 0x8180, fwd, sizeof(fwd), 1);
	assert_int_equal(lb_dns_parse_answer(buf, len, &q, addrs, 4, &n, &rcode, &ttl), -EBADMSG);
	/* rdlength past the end */
	const uint8_t over[] = { 0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 1, 0xff, 0xff, 1, 1, 1, 1 };
	len = answer(buf, 7, "pypi.org", 0x8180, over, sizeof(over), 1);
	assert_int_equal(lb_dns_parse_answer(buf, len, &q, addrs, 4, &n, &rcode, &ttl), -EBADMSG);
	/* an A record with a 16-byte rdata is not an address */
	const uint8_t wrong[] = { 0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 1, 0, 16, 1, 1,
				  1,	1,  1, 1, 1, 1, 1, 1, 1, 1, 1, 1,  1, 1 };
	len = answer(buf, 7, "pypi.org", 0x8180, wrong, sizeof(wrong), 1);
	assert_int_equal(lb_dns_parse_answer(buf, len, &q, addrs, 4, &n, &rcode, &ttl), 0);
	assert_int_equal(n, 0);
	/* ancount says more records than there are */
	len = answer(buf, 7, "pypi.org", 0x8180, rrs, sizeof(rrs), 9);
	assert_int_equal(lb_dns_parse_answer(buf, len, &q, addrs, 4, &n, &rcode, &ttl), -EBADMSG);
	/* NXDOMAIN is reported */
	len = answer(buf, 7, "pypi.org", 0x8183, NULL, 0, 0);
	assert_int_equal(lb_dns_parse_answer(buf, len, &q, addrs, 4, &n, &rcode, &ttl), 0);
	assert_int_equal(rcode, 3);
	assert_int_equal(n, 0);
}

static void response_building(void **state)
{
	(void)state;
	uint8_t qb[512], out[512];
	size_t qn = query(qb, "files.pythonhosted.org", LB_DNS_TYPE_A);
	struct lb_dns_query q;
	assert_int_equal(lb_dns_parse_query(qb, qn, &q), 0);
	uint8_t addrs[2][16] = { { 11, 2, 0, 10 }, { 11, 2, 0, 11 } };
	int len = lb_dns_build_response(&q, 0, (const uint8_t(*)[16])addrs, 2, 60, out, sizeof(out));
	assert_true(len > 0);
	/* what we build, our own answer parser reads back */
	uint8_t back[4][16];
	size_t n;
	int rcode;
	uint32_t ttl;
	assert_int_equal(lb_dns_parse_answer(out, (size_t)len, &q, back, 4, &n, &rcode, &ttl), 0);
	assert_int_equal(n, 2);
	assert_memory_equal(back[1], addrs[1], 4);
	assert_int_equal(ttl, 60);
	/* a long name with 16 addresses does not fit a 512-byte answer: -ENOBUFS, so the resolver sends fewer */
	char longname[LB_DNS_NAME_MAX + 1];
	memset(longname, 'a', 249);
	longname[49] = longname[99] = longname[149] = longname[199] = '.';
	memcpy(longname + 249, ".org", 5);
	struct lb_dns_query lq = q;
	snprintf(lq.name, sizeof(lq.name), "%s", longname);
	uint8_t many[16][16] = { { 0 } };
	assert_int_equal(lb_dns_build_response(&lq, 0, (const uint8_t(*)[16])many, 16, 60, out, sizeof(out)), -ENOBUFS);
	assert_true(lb_dns_build_response(&lq, 0, (const uint8_t(*)[16])many, 14, 60, out, sizeof(out)) > 0);
	/* too small a buffer is an error, not an overflow */
	assert_true(lb_dns_build_response(&q, 0, (const uint8_t(*)[16])addrs, 2, 60, out, 40) < 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(query_roundtrip),
		cmocka_unit_test(query_attacks),
		cmocka_unit_test(answer_parsing),
		cmocka_unit_test(response_building),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * fuzz_dns.c — libFuzzer target for the DNS parsers (netfilter/src/dns.c): the input is taken both as a sandbox's
 * query and as an upstream's answer to a fixed question; whatever parses must rebuild into a response that our own
 * parser reads back. Build with -DLENSBOX_FUZZ=ON (clang); seeds in corpus/dns.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lb/netparse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct lb_dns_query q;
	uint8_t out[512], addrs[8][16];
	size_t n;
	int rcode;
	uint32_t ttl;
	if (lb_dns_parse_query(data, size, &q) == 0) {
		int len = lb_dns_build_response(&q, 0, NULL, 0, 1, out, sizeof(out));
		if (len > 0 && q.qtype == LB_DNS_TYPE_A &&
		    lb_dns_parse_answer(out, (size_t)len, &q, addrs, 8, &n, &rcode, &ttl) != 0)
			abort();
	}
	struct lb_dns_query fixed = { .id = size >= 2 ? (uint16_t)(data[0] << 8 | data[1]) : 0,
				      .qtype = LB_DNS_TYPE_A,
				      .qclass = 1 };
	strcpy(fixed.name, "pypi.org");
	if (lb_dns_parse_answer(data, size, &fixed, addrs, 8, &n, &rcode, &ttl) == 0 && n > 8)
		abort();
	return 0;
}

/*
 * dns.c — the DNS wire format (RFC 1035), as much as lensbox's resolver needs and no more.
 *
 * Runs in lensboxd's resolver threads on bytes from sandboxes (queries) and from the upstream server (answers):
 * both are hostile. The resolver never forwards bytes it received; it parses a query into a struct, asks upstream
 * its own query, parses the answer into a list of addresses and builds a fresh response. So a sandbox can neither
 * smuggle records through nor get an answer the filter did not see.
 *
 *   header (12 bytes): id | flags (QR OPCODE AA TC RD RA Z RCODE) | qdcount | ancount | nscount | arcount
 *   question: name (labels, each <len><bytes>, ends with 0) | qtype | qclass
 *   answer RR: name (labels or a 2-byte pointer 0xC000|offset) | type | class | ttl | rdlength | rdata
 *
 * Invariants: every read is checked against len before it happens; compression pointers are followed only to
 * earlier offsets (so a loop is impossible) and a name is at most 255 bytes; no allocation.
 */
#include <errno.h>
#include <string.h>

#include "lb/cleanup.h"
#include "lb/netparse.h"

static uint16_t rd16(const uint8_t *p)
{
	return (uint16_t)((unsigned)p[0] << 8 | p[1]);
}

static uint32_t rd32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void wr16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

/* Reads the (possibly compressed) name at *off into out (lower-cased, dotted, no trailing dot); advances *off past
 * the name as it appears at *off. allow_ptr: whether compression pointers are accepted. */
static int read_name(const uint8_t *buf, size_t len, size_t *off, bool allow_ptr, char out[LB_DNS_NAME_MAX + 1])
{
	size_t pos = *off, end_of_first = 0, outlen = 0, wire = 0;
	bool jumped = false;
	for (;;) {
		if (pos >= len)
			return -EBADMSG;
		uint8_t l = buf[pos];
		if ((l & 0xc0) == 0xc0) {
			if (!allow_ptr || pos + 1 >= len)
				return -EBADMSG;
			size_t target = (size_t)(l & 0x3f) << 8 | buf[pos + 1];
			if (target >= pos) /* only backwards: no loops */
				return -EBADMSG;
			if (!jumped)
				end_of_first = pos + 2;
			jumped = true;
			pos = target;
			continue;
		}
		if (l & 0xc0)
			return -EBADMSG; /* 0x40/0x80 label types are obsolete */
		if (l == 0) {
			if (!jumped)
				end_of_first = pos + 1;
			break;
		}
		wire += (size_t)l + 1;
		if (wire > 255 || pos + 1 + l > len)
			return -EBADMSG;
		if (outlen + (outlen ? 1 : 0) + l > LB_DNS_NAME_MAX)
			return -EBADMSG;
		if (outlen)
			out[outlen++] = '.';
		for (size_t i = 0; i < l; i++) {
			char c = (char)buf[pos + 1 + i];
			if (c == '\0' || c == '.')
				return -EBADMSG; /* "pypi.org" as one label, or a NUL cutting the name short */
			if (c >= 'A' && c <= 'Z')
				c = (char)(c - 'A' + 'a');
			out[outlen++] = c;
		}
		pos += 1 + (size_t)l;
	}
	out[outlen] = '\0';
	*off = end_of_first;
	return 0;
}

int lb_dns_parse_query(const uint8_t *buf, size_t len, struct lb_dns_query *ret)
{
	if (len < 12 || len > 4096)
		return -EBADMSG;
	uint16_t flags = rd16(buf + 2);
	if (flags & 0x8000) /* QR: a response, not a query */
		return -EBADMSG;
	if ((flags >> 11) & 0xf) /* only OPCODE 0 (QUERY) */
		return -EBADMSG;
	if (rd16(buf + 4) != 1 || rd16(buf + 6) != 0 || rd16(buf + 8) != 0 || rd16(buf + 10) > 1)
		return -EBADMSG;
	struct lb_dns_query q = { 0 };
	size_t off = 12;
	int r = read_name(buf, len, &off, false, q.name);
	if (r < 0)
		return r;
	if (off + 4 > len)
		return -EBADMSG;
	q.qtype = rd16(buf + off);
	q.qclass = rd16(buf + off + 2);
	q.question_end = off + 4;
	q.id = rd16(buf);
	q.rd = flags & 0x0100;
	if (!lb_hostname_valid(q.name, strlen(q.name)))
		return -EINVAL;
	*ret = q;
	return 0;
}

static int write_name(const char *name, uint8_t *buf, size_t size, size_t *off)
{
	size_t pos = *off;
	const char *p = name;
	while (*p) {
		const char *dot = strchr(p, '.');
		size_t l = dot ? (size_t)(dot - p) : strlen(p);
		if (l == 0 || l > 63 || pos + 1 + l >= size)
			return -EINVAL;
		buf[pos++] = (uint8_t)l;
		memcpy(buf + pos, p, l);
		pos += l;
		p += l;
		if (*p == '.')
			p++;
	}
	if (pos >= size)
		return -ENOBUFS;
	buf[pos++] = 0;
	*off = pos;
	return 0;
}

int lb_dns_build_query(uint16_t id, const char *name, uint16_t qtype, uint8_t *buf, size_t size)
{
	if (size < 12 + 4 || !lb_hostname_valid(name, strlen(name)))
		return -EINVAL;
	memset(buf, 0, 12);
	wr16(buf, id);
	wr16(buf + 2, 0x0100); /* RD */
	wr16(buf + 4, 1);
	size_t off = 12;
	int r = write_name(name, buf, size, &off);
	if (r < 0)
		return r;
	if (off + 4 > size)
		return -ENOBUFS;
	wr16(buf + off, qtype);
	wr16(buf + off + 2, 1); /* IN */
	return (int)(off + 4);
}

int lb_dns_parse_answer(const uint8_t *buf, size_t len, const struct lb_dns_query *q, uint8_t (*addrs)[16], size_t max,
			size_t *ret_n, int *ret_rcode, uint32_t *ret_ttl)
{
	if (len < 12 || len > 65535)
		return -EBADMSG;
	uint16_t flags = rd16(buf + 2);
	if (rd16(buf) != q->id || !(flags & 0x8000) || rd16(buf + 4) != 1)
		return -EBADMSG;
	if (flags & 0x0200) /* TC: truncated; lensbox does not retry over TCP */
		return -EMSGSIZE;
	size_t off = 12;
	char name[LB_DNS_NAME_MAX + 1];
	int r = read_name(buf, len, &off, true, name);
	if (r < 0)
		return r;
	if (off + 4 > len || strcmp(name, q->name) != 0 || rd16(buf + off) != q->qtype)
		return -EBADMSG;
	off += 4;

	/* Follow the CNAME chain: the names an address may be for. Bounded: at most 8 aliases. */
	char chain[9][LB_DNS_NAME_MAX + 1];
	size_t n_chain = 1, n = 0;
	memcpy(chain[0], q->name, strlen(q->name) + 1);
	uint32_t ttl = UINT32_MAX;
	unsigned ancount = rd16(buf + 6);
	size_t want = q->qtype == LB_DNS_TYPE_A ? 4 : 16;
	for (unsigned i = 0; i < ancount; i++) {
		r = read_name(buf, len, &off, true, name);
		if (r < 0)
			return r;
		if (off + 10 > len)
			return -EBADMSG;
		uint16_t type = rd16(buf + off), klass = rd16(buf + off + 2);
		uint32_t rttl = rd32(buf + off + 4);
		size_t rdlen = rd16(buf + off + 8);
		off += 10;
		if (off + rdlen > len)
			return -EBADMSG;
		bool ours = false;
		for (size_t k = 0; k < n_chain; k++)
			if (strcmp(name, chain[k]) == 0)
				ours = true;
		if (ours && klass == 1) {
			if (type == 5 && n_chain < LB_ARRAY_SIZE(chain)) {
				size_t t = off;
				r = read_name(buf, off + rdlen, &t, true, chain[n_chain]);
				if (r < 0)
					return r;
				n_chain++;
			} else if (type == q->qtype && rdlen == want && n < max) {
				memset(addrs[n], 0, 16);
				memcpy(addrs[n], buf + off, want);
				n++;
				if (rttl < ttl)
					ttl = rttl;
			}
		}
		off += rdlen;
	}
	*ret_n = n;
	*ret_rcode = flags & 0xf;
	*ret_ttl = ttl == UINT32_MAX ? 0 : ttl;
	return 0;
}

int lb_dns_build_response(const struct lb_dns_query *q, int rcode, const uint8_t (*addrs)[16], size_t n, uint32_t ttl,
			  uint8_t *buf, size_t size)
{
	if (size < 12)
		return -ENOBUFS;
	memset(buf, 0, 12);
	wr16(buf, q->id);
	wr16(buf + 2, (uint16_t)(0x8000 | 0x0080 | (q->rd ? 0x0100 : 0) | (rcode & 0xf))); /* QR RA [RD] */
	wr16(buf + 4, 1);
	wr16(buf + 6, (uint16_t)n);
	size_t off = 12;
	int r = write_name(q->name, buf, size, &off);
	if (r < 0)
		return r;
	if (off + 4 > size)
		return -ENOBUFS;
	wr16(buf + off, q->qtype);
	wr16(buf + off + 2, q->qclass);
	off += 4;
	size_t alen = q->qtype == LB_DNS_TYPE_A ? 4 : 16;
	for (size_t i = 0; i < n; i++) {
		if (off + 12 + alen > size)
			return -ENOBUFS;
		wr16(buf + off, 0xc00c); /* pointer to the question's name */
		wr16(buf + off + 2, q->qtype);
		wr16(buf + off + 4, 1);
		wr16(buf + off + 6, (uint16_t)(ttl >> 16));
		wr16(buf + off + 8, (uint16_t)ttl);
		wr16(buf + off + 10, (uint16_t)alen);
		memcpy(buf + off + 12, addrs[i], alen);
		off += 12 + alen;
	}
	return (int)off;
}

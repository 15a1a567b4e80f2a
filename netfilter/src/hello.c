/*
 * hello.c — the name a sandbox's TCP connection asks for: the TLS ClientHello's server_name or the HTTP Host.
 *
 * Runs in lensboxd's relay threads on the first bytes a `packages` sandbox sends (hostile). TLS is never terminated:
 * the relay reads these bytes, decides, and forwards them unchanged to the address it resolved itself.
 *
 *   TLS record:   type(1)=22 | version(2) | length(2) | handshake...
 *   handshake:    type(1)=1 ClientHello | length(3) | version(2) | random(32) | session_id<0..32> (1-byte length)
 *                 | cipher_suites<2..2^16-2> | compression_methods<1..255> | extensions<0..2^16-1>
 *   extension:    type(2) | length(2) | data; server_name (0): list<2> of { name_type(1)=0 | host_name<2> }
 *
 * Invariants: each length is checked against the bytes that remain in its enclosing structure before use; the
 * ClientHello must fit the first record (≤ 16 KiB); one server_name extension, one host_name entry; names are
 * validated and lower-cased. HTTP: origin-form target, one Host header, headers ≤ the caller's buffer.
 */
#include <errno.h>
#include <string.h>

#include "lb/netparse.h"

struct cursor {
	const uint8_t *p;
	size_t n;
};

static bool take(struct cursor *c, size_t k, struct cursor *ret)
{
	if (c->n < k)
		return false;
	if (ret) {
		ret->p = c->p;
		ret->n = k;
	}
	c->p += k;
	c->n -= k;
	return true;
}

static bool take_u8(struct cursor *c, unsigned *v)
{
	if (c->n < 1)
		return false;
	*v = c->p[0];
	return take(c, 1, NULL);
}

static bool take_u16(struct cursor *c, unsigned *v)
{
	if (c->n < 2)
		return false;
	*v = (unsigned)c->p[0] << 8 | c->p[1];
	return take(c, 2, NULL);
}

static int copy_name(const uint8_t *p, size_t n, char name[LB_DNS_NAME_MAX + 1])
{
	if (n > 0 && p[n - 1] == '.') /* an absolute name "pypi.org." is the same name */
		n--;
	if (!lb_hostname_valid((const char *)p, n))
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		uint8_t c = p[i];
		name[i] = (char)((c >= 'A' && c <= 'Z') ? c + ('a' - 'A') : c);
	}
	name[n] = '\0';
	return LB_HELLO_OK;
}

int lb_tls_client_hello_sni(const uint8_t *buf, size_t len, char name[LB_DNS_NAME_MAX + 1])
{
	if (len < 5)
		return LB_HELLO_NEED_MORE;
	if (buf[0] != 22 || buf[1] != 3)
		return -EBADMSG;
	size_t rlen = (size_t)buf[3] << 8 | buf[4];
	if (rlen < 4 || rlen > 16384)
		return -EBADMSG;
	if (len < 5 + rlen)
		return LB_HELLO_NEED_MORE;
	struct cursor rec = { buf + 5, rlen }, hs, body;
	unsigned type, v;
	if (!take_u8(&rec, &type) || type != 1)
		return -EBADMSG;
	if (rec.n < 3)
		return -EBADMSG;
	size_t hlen = (size_t)rec.p[0] << 16 | (size_t)rec.p[1] << 8 | rec.p[2];
	take(&rec, 3, NULL);
	if (!take(&rec, hlen, &hs)) /* ClientHello split over records: refused, see the header comment */
		return -EBADMSG;
	if (!take(&hs, 2 + 32, NULL))
		return -EBADMSG;
	if (!take_u8(&hs, &v) || v > 32 || !take(&hs, v, NULL))
		return -EBADMSG;
	if (!take_u16(&hs, &v) || v < 2 || (v & 1) || !take(&hs, v, NULL))
		return -EBADMSG;
	if (!take_u8(&hs, &v) || v < 1 || !take(&hs, v, NULL))
		return -EBADMSG;
	if (hs.n == 0)
		return -ENOENT; /* no extensions at all */
	if (!take_u16(&hs, &v) || !take(&hs, v, &body) || hs.n != 0)
		return -EBADMSG;
	bool found = false;
	while (body.n > 0) {
		unsigned etype, elen;
		struct cursor ext;
		if (!take_u16(&body, &etype) || !take_u16(&body, &elen) || !take(&body, elen, &ext))
			return -EBADMSG;
		if (etype != 0)
			continue;
		if (found)
			return -EBADMSG; /* two server_name extensions: ambiguous */
		struct cursor list, host;
		unsigned llen, ntype, nlen;
		if (!take_u16(&ext, &llen) || !take(&ext, llen, &list) || ext.n != 0)
			return -EBADMSG;
		if (!take_u8(&list, &ntype) || ntype != 0 || !take_u16(&list, &nlen) || !take(&list, nlen, &host) ||
		    list.n != 0)
			return -EBADMSG; /* exactly one host_name entry */
		int r = copy_name(host.p, host.n, name);
		if (r < 0)
			return r;
		found = true;
	}
	return found ? LB_HELLO_OK : -ENOENT;
}

static bool is_token_char(uint8_t c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

int lb_http_request_host(const uint8_t *buf, size_t len, char name[LB_DNS_NAME_MAX + 1], size_t *ret_header_len)
{
	/* the end of the header block */
	size_t end = 0;
	for (size_t i = 0; i + 3 < len; i++)
		if (buf[i] == '\r' && buf[i + 1] == '\n' && buf[i + 2] == '\r' && buf[i + 3] == '\n') {
			end = i + 4;
			break;
		}
	/* request line: METHOD SP origin-form SP HTTP/1.x CRLF; judge what we have even before the end arrives */
	size_t i = 0;
	while (i < len && is_token_char(buf[i]))
		i++;
	if (i == len)
		return end ? -EBADMSG : LB_HELLO_NEED_MORE;
	if (i == 0 || i > 16 || buf[i] != ' ')
		return -EBADMSG;
	i++;
	if (i == len)
		return LB_HELLO_NEED_MORE;
	if (buf[i] != '/') /* absolute-form or authority-form could name a different host than Host */
		return -EBADMSG;
	if (!end)
		return LB_HELLO_NEED_MORE;
	size_t line_end = 0;
	for (size_t k = i; k + 1 < end; k++)
		if (buf[k] == '\r' && buf[k + 1] == '\n') {
			line_end = k;
			break;
		}
	if (line_end < i + 10 || memcmp(buf + line_end - 9, " HTTP/1.", 8) != 0)
		return -EBADMSG;
	for (size_t k = i; k < line_end - 9; k++)
		if (buf[k] <= ' ' || buf[k] >= 0x7f)
			return -EBADMSG;

	bool found = false;
	size_t pos = line_end + 2;
	while (pos + 2 <= end) {
		size_t eol = pos;
		while (eol + 1 < end && !(buf[eol] == '\r' && buf[eol + 1] == '\n'))
			eol++;
		if (eol == pos)
			break; /* the blank line */
		if (buf[pos] == ' ' || buf[pos] == '\t')
			return -EBADMSG; /* obsolete line folding */
		size_t colon = pos;
		while (colon < eol && buf[colon] != ':')
			colon++;
		if (colon == eol)
			return -EBADMSG;
		for (size_t k = pos; k < colon; k++)
			if (!is_token_char(buf[k]))
				return -EBADMSG;
		if (colon - pos == 4 && strncasecmp((const char *)buf + pos, "host", 4) == 0) {
			if (found)
				return -EBADMSG; /* two Host headers: which one would the server believe? */
			size_t vs = colon + 1, ve = eol;
			while (vs < ve && (buf[vs] == ' ' || buf[vs] == '\t'))
				vs++;
			while (ve > vs && (buf[ve - 1] == ' ' || buf[ve - 1] == '\t'))
				ve--;
			size_t hend = vs;
			while (hend < ve && buf[hend] != ':')
				hend++;
			if (hend < ve) { /* a port: digits only */
				if (hend + 1 == ve || ve - hend > 6)
					return -EBADMSG;
				for (size_t k = hend + 1; k < ve; k++)
					if (buf[k] < '0' || buf[k] > '9')
						return -EBADMSG;
			}
			int r = copy_name(buf + vs, hend - vs, name);
			if (r < 0)
				return r;
			found = true;
		}
		pos = eol + 2;
	}
	if (!found)
		return -ENOENT;
	*ret_header_len = end;
	return LB_HELLO_OK;
}

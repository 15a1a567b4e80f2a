/* Unit tests for netfilter/src/hello.c: the first bytes of a packages sandbox's connection are hostile. */
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

struct buf {
	uint8_t b[20000];
	size_t n;
};

static void put(struct buf *b, const void *p, size_t n)
{
	memcpy(b->b + b->n, p, n);
	b->n += n;
}
static void u8(struct buf *b, unsigned v)
{
	b->b[b->n++] = (uint8_t)v;
}
static void u16(struct buf *b, unsigned v)
{
	u8(b, v >> 8);
	u8(b, v & 0xff);
}
static void sni_ext(struct buf *b, const char *name, size_t len)
{
	u16(b, 0);
	u16(b, (unsigned)len + 5);
	u16(b, (unsigned)len + 3);
	u8(b, 0);
	u16(b, (unsigned)len);
	put(b, name, len);
}

/* A ClientHello record whose extensions block is ext (n bytes). */
static void hello(struct buf *out, const uint8_t *ext, size_t n)
{
	struct buf body = { .n = 0 };
	u16(&body, 0x0303);
	uint8_t random[32] = { 0 };
	put(&body, random, 32);
	u8(&body, 0); /* session id */
	u16(&body, 2);
	u16(&body, 0x1301); /* one cipher suite */
	u8(&body, 1);
	u8(&body, 0); /* null compression */
	u16(&body, (unsigned)n);
	put(&body, ext, n);
	out->n = 0;
	u8(out, 22);
	u16(out, 0x0301);
	u16(out, (unsigned)body.n + 4);
	u8(out, 1);
	u8(out, 0);
	u16(out, (unsigned)body.n);
	put(out, body.b, body.n);
}

static void sni_found(void **state)
{
	(void)state;
	struct buf ext = { .n = 0 }, rec;
	u16(&ext, 10); /* another extension before */
	u16(&ext, 2);
	u16(&ext, 0x001d);
	sni_ext(&ext, "PyPI.org.", 9);
	hello(&rec, ext.b, ext.n);
	char name[LB_DNS_NAME_MAX + 1];
	assert_int_equal(lb_tls_client_hello_sni(rec.b, rec.n, name), LB_HELLO_OK);
	assert_string_equal(name, "pypi.org");
	for (size_t k = 0; k < rec.n; k++) /* every prefix asks for more, never reads past it */
		assert_int_equal(lb_tls_client_hello_sni(rec.b, k, name), LB_HELLO_NEED_MORE);
}

static void sni_attacks(void **state)
{
	(void)state;
	char name[LB_DNS_NAME_MAX + 1];
	struct buf ext = { .n = 0 }, rec;

	/* two server_name extensions: which would the server believe? */
	sni_ext(&ext, "pypi.org", 8);
	sni_ext(&ext, "evil.example", 12);
	hello(&rec, ext.b, ext.n);
	assert_int_equal(lb_tls_client_hello_sni(rec.b, rec.n, name), -EBADMSG);

	/* a NUL inside the name ("pypi.org\0.evil") */
	ext.n = 0;
	sni_ext(&ext, "pypi.org\0.evil", 14);
	hello(&rec, ext.b, ext.n);
	assert_int_equal(lb_tls_client_hello_sni(rec.b, rec.n, name), -EINVAL);

	/* no SNI */
	ext.n = 0;
	u16(&ext, 10);
	u16(&ext, 2);
	u16(&ext, 0x001d);
	hello(&rec, ext.b, ext.n);
	assert_int_equal(lb_tls_client_hello_sni(rec.b, rec.n, name), -ENOENT);

	/* an extension longer than the block */
	ext.n = 0;
	u16(&ext, 0);
	u16(&ext, 400);
	u16(&ext, 6);
	hello(&rec, ext.b, ext.n);
	assert_int_equal(lb_tls_client_hello_sni(rec.b, rec.n, name), -EBADMSG);

	/* a host_name length beyond its list */
	ext.n = 0;
	u16(&ext, 0);
	u16(&ext, 13);
	u16(&ext, 11);
	u8(&ext, 0);
	u16(&ext, 200);
	put(&ext, "pypi.org", 8);
	hello(&rec, ext.b, ext.n);
	assert_int_equal(lb_tls_client_hello_sni(rec.b, rec.n, name), -EBADMSG);

	/* two host_name entries in one list */
	ext.n = 0;
	u16(&ext, 0);
	u16(&ext, 2 + 11 + 15);
	u16(&ext, 11 + 15);
	u8(&ext, 0);
	u16(&ext, 8);
	put(&ext, "pypi.org", 8);
	u8(&ext, 0);
	u16(&ext, 12);
	put(&ext, "evil.example", 12);
	hello(&rec, ext.b, ext.n);
	assert_int_equal(lb_tls_client_hello_sni(rec.b, rec.n, name), -EBADMSG);

	/* not a handshake record; an SSLv2-style first byte; a record over 16 KiB */
	uint8_t alert[] = { 21, 3, 3, 0, 2, 2, 40 };
	assert_int_equal(lb_tls_client_hello_sni(alert, sizeof(alert), name), -EBADMSG);
	uint8_t v2[] = { 0x80, 0x2e, 1, 3, 1 };
	assert_int_equal(lb_tls_client_hello_sni(v2, sizeof(v2), name), -EBADMSG);
	uint8_t huge[] = { 22, 3, 1, 0x40, 0x01 };
	assert_int_equal(lb_tls_client_hello_sni(huge, sizeof(huge), name), -EBADMSG);

	/* a ClientHello that claims more than its record (split over records) */
	ext.n = 0;
	sni_ext(&ext, "pypi.org", 8);
	hello(&rec, ext.b, ext.n);
	rec.b[7] = 0x20; /* handshake length high byte */
	assert_int_equal(lb_tls_client_hello_sni(rec.b, rec.n, name), -EBADMSG);

	/* random bytes never crash (a cheap in-test fuzz; the libFuzzer target goes further) */
	srand(1);
	for (int i = 0; i < 20000; i++) {
		hello(&rec, ext.b, ext.n);
		size_t pos = (size_t)rand() % rec.n;
		rec.b[pos] = (uint8_t)rand();
		lb_tls_client_hello_sni(rec.b, (size_t)rand() % (rec.n + 1), name);
	}
}

static int http(const char *req, char *name, size_t *head)
{
	return lb_http_request_host((const uint8_t *)req, strlen(req), name, head);
}

static void http_host(void **state)
{
	(void)state;
	char name[LB_DNS_NAME_MAX + 1];
	size_t head = 0;
	const char *ok = "GET /simple/ HTTP/1.1\r\nUser-Agent: pip\r\nHOST:  Files.PythonHosted.org:80 \r\n\r\n";
	assert_int_equal(http(ok, name, &head), LB_HELLO_OK);
	assert_string_equal(name, "files.pythonhosted.org");
	assert_int_equal(head, strlen(ok));
	char part[200];
	for (size_t k = 0; k < strlen(ok) - 1; k++) {
		memcpy(part, ok, k);
		part[k] = '\0';
		assert_int_equal(http(part, name, &head), LB_HELLO_NEED_MORE);
	}
}

static void http_attacks(void **state)
{
	(void)state;
	char name[LB_DNS_NAME_MAX + 1];
	size_t head;
	/* absolute-form target naming another host than Host */
	assert_int_equal(http("GET http://evil.example/ HTTP/1.1\r\nHost: pypi.org\r\n\r\n", name, &head), -EBADMSG);
	/* CONNECT's authority-form */
	assert_int_equal(http("CONNECT evil.example:443 HTTP/1.1\r\nHost: pypi.org\r\n\r\n", name, &head), -EBADMSG);
	/* two Host headers */
	assert_int_equal(http("GET / HTTP/1.1\r\nHost: pypi.org\r\nHost: evil.example\r\n\r\n", name, &head), -EBADMSG);
	/* a space before the colon, and obsolete line folding */
	assert_int_equal(http("GET / HTTP/1.1\r\nHost : evil.example\r\n\r\n", name, &head), -EBADMSG);
	assert_int_equal(http("GET / HTTP/1.1\r\nX: a\r\n Host: evil.example\r\n\r\n", name, &head), -EBADMSG);
	/* no Host; an invalid Host; a port with letters */
	assert_int_equal(http("GET / HTTP/1.1\r\nX: y\r\n\r\n", name, &head), -ENOENT);
	assert_int_equal(http("GET / HTTP/1.1\r\nHost: pypi.org/evil\r\n\r\n", name, &head), -EINVAL);
	assert_int_equal(http("GET / HTTP/1.1\r\nHost: pypi.org:8o\r\n\r\n", name, &head), -EBADMSG);
	/* not HTTP/1.x; control characters in the target */
	assert_int_equal(http("GET / HTTP/2.0\r\nHost: pypi.org\r\n\r\n", name, &head), -EBADMSG);
	assert_int_equal(http("GET /a\tb HTTP/1.1\r\nHost: pypi.org\r\n\r\n", name, &head), -EBADMSG);
	/* a TLS hello sent to port 80 */
	const uint8_t tls[] = { 22, 3, 1, 0, 10 };
	assert_int_equal(lb_http_request_host(tls, sizeof(tls), name, &head), -EBADMSG);
	/* a NUL inside the Host value */
	const char nul[] = "GET / HTTP/1.1\r\nHost: pypi.org\0evil\r\n\r\n";
	assert_int_equal(lb_http_request_host((const uint8_t *)nul, sizeof(nul) - 1, name, &head), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(sni_found),
		cmocka_unit_test(sni_attacks),
		cmocka_unit_test(http_host),
		cmocka_unit_test(http_attacks),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

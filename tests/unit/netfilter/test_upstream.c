/*
 * Unit tests for netfilter/src/upstream.c: what the resolver and the relay keep of the upstream's answers, and for
 * how long. The upstream is a stub DNS server on 127.0.0.1 in this process, counting the queries it gets; a context
 * is built by hand with it as the upstream and an empty denied list (the host's own addresses are still refused).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "../../../netfilter/src/internal.h"
#include "lb/netparse.h"

struct stub {
	int fd;
	pthread_t thread;
	atomic_uint queries;
};

/* The stub's zone: a.example and short.example (TTL 1 s) have an address, local.example is the host's loopback,
 * zero.example has TTL 0, gone.example does not exist, broken.example fails; AAAA has no answer, but for
 * both.example (2001:db8::10) and mute.example, whose AAAA questions are never answered (a broken upstream). */
static void *stub_main(void *arg)
{
	struct stub *s = arg;
	for (;;) {
		uint8_t buf[512], out[512];
		struct sockaddr_in from;
		socklen_t fl = sizeof(from);
		ssize_t n = recvfrom(s->fd, buf, sizeof(buf), 0, (struct sockaddr *)&from, &fl);
		if (n <= 0)
			return NULL;
		struct lb_dns_query q;
		if (lb_dns_parse_query(buf, (size_t)n, &q) < 0)
			continue;
		atomic_fetch_add(&s->queries, 1);
		if (q.qtype == LB_DNS_TYPE_AAAA && strcmp(q.name, "mute.example") == 0)
			continue;
		uint8_t addr[1][16] = { { 0 } };
		int rcode = LB_DNS_RCODE_NOERROR;
		size_t count = 0;
		uint32_t ttl = 60;
		if (q.qtype == LB_DNS_TYPE_AAAA && strcmp(q.name, "both.example") == 0) {
			inet_pton(AF_INET6, "2001:db8::10", addr[0]);
			count = 1;
		} else if (q.qtype == LB_DNS_TYPE_A &&
			   (strcmp(q.name, "a.example") == 0 || strcmp(q.name, "short.example") == 0 ||
			    strcmp(q.name, "zero.example") == 0 || strcmp(q.name, "both.example") == 0 ||
			    strcmp(q.name, "mute.example") == 0)) {
			inet_pton(AF_INET, "192.0.2.10", addr[0]);
			count = 1;
			ttl = strcmp(q.name, "short.example") == 0 ? 1 : strcmp(q.name, "zero.example") == 0 ? 0 : 60;
		} else if (q.qtype == LB_DNS_TYPE_A && strcmp(q.name, "local.example") == 0) {
			inet_pton(AF_INET, "127.0.0.1", addr[0]);
			count = 1;
		} else if (strcmp(q.name, "gone.example") == 0) {
			rcode = LB_DNS_RCODE_NXDOMAIN;
		} else if (strcmp(q.name, "broken.example") == 0) {
			rcode = LB_DNS_RCODE_SERVFAIL;
		}
		int len = lb_dns_build_response(&q, rcode, (const uint8_t(*)[16])addr, count, ttl, out, sizeof(out));
		if (len > 0)
			sendto(s->fd, out, (size_t)len, 0, (struct sockaddr *)&from, fl);
	}
}

struct fixture {
	struct stub stub;
	struct lb_net ctx;
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	assert_non_null(f);
	f->stub.fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	assert_true(f->stub.fd >= 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	assert_int_equal(bind(f->stub.fd, (struct sockaddr *)&a, sizeof(a)), 0);
	socklen_t al = sizeof(a);
	assert_int_equal(getsockname(f->stub.fd, (struct sockaddr *)&a, &al), 0);
	assert_int_equal(pthread_create(&f->stub.thread, NULL, stub_main, &f->stub), 0);
	pthread_mutex_init(&f->ctx.lock, NULL);
	f->ctx.upstream = a;
	f->ctx.timeout_ms = 2000;
	f->ctx.dns_cache = lb_dns_cache_new();
	assert_non_null(f->ctx.dns_cache);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	shutdown(f->stub.fd, SHUT_RDWR); /* its recvfrom() returns 0: the stub ends */
	pthread_join(f->stub.thread, NULL);
	close(f->stub.fd);
	lb_dns_cache_free(f->ctx.dns_cache);
	pthread_mutex_destroy(&f->ctx.lock);
	free(f);
	return 0;
}

struct answer {
	uint8_t addrs[16][16];
	size_t n, dropped;
	int rcode;
	uint32_t ttl;
};

static int lookup(struct fixture *f, const char *name, uint16_t qtype, struct answer *a)
{
	memset(a, 0, sizeof(*a));
	return lb_upstream_lookup(&f->ctx, name, qtype, a->addrs, 16, &a->n, &a->dropped, &a->rcode, &a->ttl);
}

static unsigned asked(struct fixture *f)
{
	return atomic_load(&f->stub.queries);
}

static void an_answer_is_kept_for_its_ttl(void **state)
{
	struct fixture *f = *state;
	struct answer a;
	assert_int_equal(lookup(f, "a.example", LB_DNS_TYPE_A, &a), 0);
	assert_int_equal(a.n, 1);
	assert_int_equal(a.ttl, 60);
	assert_int_equal(asked(f), 1);
	uint8_t want[4];
	inet_pton(AF_INET, "192.0.2.10", want);
	/* again, and in other letters: from the cache, with what is left of the TTL */
	assert_int_equal(lookup(f, "A.Example", LB_DNS_TYPE_A, &a), 0);
	assert_int_equal(asked(f), 1);
	assert_int_equal(a.n, 1);
	assert_memory_equal(a.addrs[0], want, 4);
	assert_true(a.ttl >= 59 && a.ttl <= 60);
	/* another type is another question; its empty answer is kept too */
	assert_int_equal(lookup(f, "a.example", LB_DNS_TYPE_AAAA, &a), 0);
	assert_int_equal(a.n, 0);
	assert_int_equal(asked(f), 2);
	assert_int_equal(lookup(f, "a.example", LB_DNS_TYPE_AAAA, &a), 0);
	assert_int_equal(asked(f), 2);
	assert_true(a.ttl <= 30);
	/* the cache-only read the resolver's thread makes */
	assert_true(
	    lb_dns_cached(&f->ctx, "a.example", LB_DNS_TYPE_A, a.addrs, 16, &a.n, &a.dropped, &a.rcode, &a.ttl));
	assert_false(
	    lb_dns_cached(&f->ctx, "b.example", LB_DNS_TYPE_A, a.addrs, 16, &a.n, &a.dropped, &a.rcode, &a.ttl));
	assert_int_equal(asked(f), 2);
}

static void an_answer_expires(void **state)
{
	struct fixture *f = *state;
	struct answer a;
	assert_int_equal(lookup(f, "short.example", LB_DNS_TYPE_A, &a), 0);
	assert_int_equal(lookup(f, "short.example", LB_DNS_TYPE_A, &a), 0);
	assert_int_equal(asked(f), 1);
	usleep(1100 * 1000);
	assert_int_equal(lookup(f, "short.example", LB_DNS_TYPE_A, &a), 0);
	assert_int_equal(a.n, 1);
	assert_int_equal(asked(f), 2);
}

static void a_refused_answer_stays_refused(void **state)
{
	struct fixture *f = *state;
	struct answer a;
	/* the host's own address is dropped when it comes, and counted again for each cached use */
	for (int i = 0; i < 2; i++) {
		assert_int_equal(lookup(f, "local.example", LB_DNS_TYPE_A, &a), 0);
		assert_int_equal(a.n, 0);
		assert_int_equal(a.dropped, 1);
	}
	assert_int_equal(asked(f), 1);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(lookup(f, "gone.example", LB_DNS_TYPE_A, &a), 0);
		assert_int_equal(a.rcode, LB_DNS_RCODE_NXDOMAIN);
	}
	assert_int_equal(asked(f), 2);
}

static void failures_and_ttl_zero_are_not_kept(void **state)
{
	struct fixture *f = *state;
	struct answer a;
	for (int i = 0; i < 2; i++) {
		assert_int_equal(lookup(f, "broken.example", LB_DNS_TYPE_A, &a), 0);
		assert_int_equal(a.rcode, LB_DNS_RCODE_SERVFAIL);
	}
	assert_int_equal(asked(f), 2);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(lookup(f, "zero.example", LB_DNS_TYPE_A, &a), 0);
		assert_int_equal(a.n, 1);
	}
	assert_int_equal(asked(f), 4);
	/* an upstream that does not answer: an error, nothing kept */
	f->ctx.timeout_ms = 200;
	struct sockaddr_in saved = f->ctx.upstream;
	f->ctx.upstream.sin_port = htons(9); /* nothing listens on 127.0.0.1:9 (discard) here: refused or silent */
	assert_true(lookup(f, "nowhere.example", LB_DNS_TYPE_A, &a) < 0);
	f->ctx.upstream = saved;
	assert_false(
	    lb_dns_cached(&f->ctx, "nowhere.example", LB_DNS_TYPE_A, a.addrs, 16, &a.n, &a.dropped, &a.rcode, &a.ttl));
}

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void the_relay_asks_both_families_at_once(void **state)
{
	struct fixture *f = *state;
	uint8_t a4[4][16], a6[4][16];
	size_t n4, n6;
	lb_upstream_lookup_both(&f->ctx, "both.example", a4, 4, &n4, a6, 4, &n6);
	assert_int_equal(n4, 1);
	assert_int_equal(n6, 1);
	assert_int_equal(asked(f), 2);
	uint8_t want6[16];
	inet_pton(AF_INET6, "2001:db8::10", want6);
	assert_memory_equal(a6[0], want6, 16);
	/* both kept: the next connection asks nothing */
	lb_upstream_lookup_both(&f->ctx, "both.example", a4, 4, &n4, a6, 4, &n6);
	assert_int_equal(n4 + n6, 2);
	assert_int_equal(asked(f), 2);
	/* what the sandbox's own lookup left in the cache is used too: A from the cache, AAAA asked */
	struct answer a;
	assert_int_equal(lookup(f, "a.example", LB_DNS_TYPE_A, &a), 0);
	lb_upstream_lookup_both(&f->ctx, "a.example", a4, 4, &n4, a6, 4, &n6);
	assert_int_equal(n4, 1);
	assert_int_equal(n6, 0);
	assert_int_equal(asked(f), 4);
}

static void an_unanswered_aaaa_costs_the_resolution_delay_only(void **state)
{
	struct fixture *f = *state;
	uint8_t a4[4][16], a6[4][16];
	size_t n4, n6;
	f->ctx.timeout_ms = 3000;
	for (int i = 0; i < 2; i++) { /* the second time A is cached and AAAA asked again: the same bound */
		uint64_t t0 = now_ms();
		lb_upstream_lookup_both(&f->ctx, "mute.example", a4, 4, &n4, a6, 4, &n6);
		uint64_t took = now_ms() - t0;
		assert_int_equal(n4, 1);
		assert_int_equal(n6, 0);
		assert_true(took >= 40 && took < 2000); /* 50 ms after the A answer, not the 3 s timeout */
	}
	assert_int_equal(asked(f), 3);
	/* a question asked alone still waits its whole timeout for an answer that never comes */
	f->ctx.timeout_ms = 300;
	struct answer a;
	uint64_t t0 = now_ms();
	assert_int_equal(lookup(f, "mute.example", LB_DNS_TYPE_AAAA, &a), -ETIMEDOUT);
	assert_true(now_ms() - t0 >= 290);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(an_answer_is_kept_for_its_ttl, setup, teardown),
		cmocka_unit_test_setup_teardown(an_answer_expires, setup, teardown),
		cmocka_unit_test_setup_teardown(a_refused_answer_stays_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(failures_and_ttl_zero_are_not_kept, setup, teardown),
		cmocka_unit_test_setup_teardown(the_relay_asks_both_families_at_once, setup, teardown),
		cmocka_unit_test_setup_teardown(an_unanswered_aaaa_costs_the_resolution_delay_only, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

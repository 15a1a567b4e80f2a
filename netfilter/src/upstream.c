/*
 * upstream.c — asking the DNS upstream (lensbox's own queries, never a sandbox's bytes), and keeping its answers for
 * their TTL.
 *
 * lb_upstream_resolve() sends lensbox's own A or AAAA query (random id, EDNS(0) for 1232-byte answers) on a socket
 * connect()ed to the upstream, takes only an answer to that question (lb_dns_parse_answer), and drops every address
 * that is denied or the host's own. lb_upstream_lookup() answers from the cache first.
 *
 * Runs in the services (lensboxd's threads, or the isolated worker as services_uid; isolate.c), from any resolver
 * or relay thread: one mutex guards the table. A sandbox's lookup and then the relay's own lookup of the same name
 * (for the connection that follows) cost one upstream round trip instead of three, and a package install asking for
 * the same hosts again and again is answered at once.
 *
 * What is kept is what lb_upstream_resolve() returned: the addresses already checked against the denied ranges (the
 * relay checks again before it connects, in case one became the host's own meanwhile) and how many were dropped, so
 * that a cached answer is refused and counted like a fresh one. Kept: answers with addresses for their TTL (at most
 * 300 s, as lb_upstream_resolve caps it), empty answers and NXDOMAIN for 30 s; never an error, a SERVFAIL or a
 * timeout. Only the upstream's answers enter (lb_upstream_resolve matches each to its question), never a sandbox's
 * bytes. Bounds: 512 entries, direct-mapped by a hash of (name, type): a collision replaces the older entry.
 * The cache is shared by every sandbox, as any resolver's is: one may tell from an answer's speed that another asked
 * the same name within its TTL; nothing else crosses.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "lb/cleanup.h"

#define CACHE_ENTRIES	   512
#define CACHE_ADDRS	   16
#define CACHE_NEGATIVE_TTL 30
/* RFC 8305 3: once one family has answered with addresses, the other is waited for this long, then left */
#define RESOLUTION_DELAY_MS 50

struct entry {
	char name[LB_DNS_NAME_MAX + 1]; /* "" when the entry is free */
	uint16_t qtype;
	uint8_t n, dropped;
	int rcode;
	uint64_t expires_ms;
	uint8_t addrs[CACHE_ADDRS][16];
};

struct lb_dns_cache {
	pthread_mutex_t mu;
	struct entry e[CACHE_ENTRIES];
};

struct lb_dns_cache *lb_dns_cache_new(void)
{
	struct lb_dns_cache *c = calloc(1, sizeof(*c));
	if (c)
		pthread_mutex_init(&c->mu, NULL);
	return c;
}

void lb_dns_cache_free(struct lb_dns_cache *c)
{
	if (!c)
		return;
	pthread_mutex_destroy(&c->mu);
	free(c);
}

static uint64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* One question to the upstream and, once answered, its filtered answer. */
struct question {
	struct lb_dns_query q;
	uint8_t pkt[512];
	size_t len;
	int r; /* 1 while unanswered, then 0 or a negative errno */
	uint8_t addrs[CACHE_ADDRS][16];
	size_t n, dropped;
	int rcode;
	uint32_t ttl;
};

static int question_init(struct question *qs, const char *name, uint16_t qtype)
{
	uint16_t id;
	if (getrandom(&id, sizeof(id), 0) != sizeof(id))
		return -EIO;
	*qs = (struct question){ .q = { .id = id, .qtype = qtype, .qclass = 1 }, .r = 1 };
	snprintf(qs->q.name, sizeof(qs->q.name), "%s", name);
	int len = lb_dns_build_query(id, name, qtype, qs->pkt, sizeof(qs->pkt));
	if (len < 0)
		return len;
	/* EDNS(0) OPT record offering 1232-byte answers (the common safe size), so few answers come truncated:
	 * root name, type 41, class = payload size, ttl 0, no data */
	static const uint8_t opt[] = { 0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0, 0, 0 };
	if ((size_t)len + sizeof(opt) > sizeof(qs->pkt))
		return -ENOBUFS;
	memcpy(qs->pkt + len, opt, sizeof(opt));
	qs->len = (size_t)len + sizeof(opt);
	qs->pkt[11] = 1; /* ARCOUNT */
	return 0;
}

/* Gives the datagram to the unanswered question it answers (same id and question: lb_dns_parse_answer), which keeps
 * the addresses outside the denied ranges and not the host's own. Anything else (spoofed, stale) is ignored. */
static void question_take(struct lb_net *ctx, struct question *qs, size_t nq, const uint8_t *ans, size_t len)
{
	for (size_t k = 0; k < nq; k++) {
		struct question *x = &qs[k];
		if (x->r != 1)
			continue;
		uint8_t raw[CACHE_ADDRS][16];
		size_t nraw = 0;
		int rcode;
		uint32_t ttl;
		int pr = lb_dns_parse_answer(ans, len, &x->q, raw, LB_ARRAY_SIZE(raw), &nraw, &rcode, &ttl);
		if (pr == -EMSGSIZE) {
			x->r = pr; /* truncated even at 1232 bytes: lensbox does not retry over TCP (SERVFAIL) */
			return;
		}
		if (pr < 0)
			continue;
		for (size_t i = 0; i < nraw; i++) {
			uint32_t be;
			memcpy(&be, raw[i], 4);
			if (x->q.qtype == LB_DNS_TYPE_A ? lb_net_addr_denied(ctx, be)
							: lb_net_addr6_denied(ctx, raw[i]))
				x->dropped++;
			else
				memcpy(x->addrs[x->n++], raw[i], 16);
		}
		x->rcode = rcode;
		x->ttl = ttl > 300 ? 300 : ttl;
		x->r = 0;
		return;
	}
}

/* Sends the nq questions at once on one socket connect()ed to the upstream (the kernel then drops datagrams from
 * anyone else) and waits for their answers until ctx->timeout_ms; once some answer holds addresses (or from the
 * start, with have_addresses), at most grace_ms more for the others. A question left unanswered ends -ETIMEDOUT. */
static int ask(struct lb_net *ctx, struct question *qs, size_t nq, uint32_t grace_ms, bool have_addresses)
{
	_cleanup_close_ int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (const struct sockaddr *)&ctx->upstream, sizeof(ctx->upstream)) < 0)
		return -errno;
	for (size_t k = 0; k < nq; k++)
		if (send(fd, qs[k].pkt, qs[k].len, 0) != (ssize_t)qs[k].len)
			return -EIO;
	uint64_t deadline = mono_ms() + ctx->timeout_ms;
	if (have_addresses && grace_ms)
		deadline = mono_ms() + grace_ms;
	size_t left = nq;
	while (left > 0) {
		uint64_t t = mono_ms();
		if (t >= deadline)
			break;
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int pr = poll(&p, 1, (int)(deadline - t));
		if (pr < 0 && errno != EINTR)
			return -errno;
		if (pr <= 0)
			continue;
		uint8_t ans[4096];
		ssize_t n = recv(fd, ans, sizeof(ans), 0);
		if (n < 0)
			return -errno;
		question_take(ctx, qs, nq, ans, (size_t)n);
		left = 0;
		bool addresses = false;
		for (size_t k = 0; k < nq; k++) {
			left += qs[k].r == 1;
			addresses |= qs[k].r == 0 && qs[k].n > 0;
		}
		if (addresses && grace_ms && !have_addresses) {
			have_addresses = true;
			if (mono_ms() + grace_ms < deadline)
				deadline = mono_ms() + grace_ms;
		}
	}
	for (size_t k = 0; k < nq; k++)
		if (qs[k].r == 1)
			qs[k].r = -ETIMEDOUT;
	return 0;
}

/* Copies question x's answer out as lb_upstream_resolve does (at most max addresses). */
static void question_out(const struct question *x, uint8_t (*addrs)[16], size_t max, size_t *ret_n, size_t *ret_dropped,
			 int *ret_rcode, uint32_t *ret_ttl)
{
	size_t n = x->n < max ? x->n : max;
	memcpy(addrs, x->addrs, n * 16);
	*ret_n = n;
	*ret_dropped = x->dropped;
	*ret_rcode = x->rcode;
	*ret_ttl = x->ttl;
}

int lb_upstream_resolve(struct lb_net *ctx, const char *name, uint16_t qtype, uint8_t (*addrs)[16], size_t max,
			size_t *ret_n, size_t *ret_dropped, int *ret_rcode, uint32_t *ret_ttl)
{
	struct question x;
	int r = question_init(&x, name, qtype);
	if (r == 0)
		r = ask(ctx, &x, 1, 0, false);
	if (r == 0)
		r = x.r;
	if (r < 0)
		return r;
	question_out(&x, addrs, max, ret_n, ret_dropped, ret_rcode, ret_ttl);
	return 0;
}

/* FNV-1a over the lower-cased name and the type */
static size_t slot_of(const char *name, uint16_t qtype)
{
	uint32_t h = 2166136261u;
	for (const char *p = name; *p; p++) {
		unsigned char ch = (unsigned char)*p;
		h = (h ^ (ch >= 'A' && ch <= 'Z' ? ch + 32u : ch)) * 16777619u;
	}
	h = (h ^ qtype) * 16777619u;
	return h % CACHE_ENTRIES;
}

static bool cache_get(struct lb_dns_cache *c, const char *name, uint16_t qtype, uint8_t (*addrs)[16], size_t max,
		      size_t *ret_n, size_t *ret_dropped, int *ret_rcode, uint32_t *ret_ttl)
{
	uint64_t now = mono_ms();
	bool hit = false;
	pthread_mutex_lock(&c->mu);
	struct entry *e = &c->e[slot_of(name, qtype)];
	if (e->name[0] && e->qtype == qtype && e->expires_ms > now && strcasecmp(e->name, name) == 0) {
		size_t n = e->n < max ? e->n : max;
		memcpy(addrs, e->addrs, n * 16);
		*ret_n = n;
		*ret_dropped = e->dropped;
		*ret_rcode = e->rcode;
		*ret_ttl = (uint32_t)((e->expires_ms - now + 999) / 1000);
		hit = true;
	}
	pthread_mutex_unlock(&c->mu);
	return hit;
}

static void cache_put(struct lb_dns_cache *c, const char *name, uint16_t qtype, const uint8_t (*addrs)[16], size_t n,
		      size_t dropped, int rcode, uint32_t ttl)
{
	if (strlen(name) > LB_DNS_NAME_MAX || n > CACHE_ADDRS)
		return;
	if (rcode == LB_DNS_RCODE_NXDOMAIN || (rcode == LB_DNS_RCODE_NOERROR && n == 0))
		ttl = CACHE_NEGATIVE_TTL;
	else if (rcode != LB_DNS_RCODE_NOERROR)
		return;
	if (ttl == 0)
		return;
	pthread_mutex_lock(&c->mu);
	struct entry *e = &c->e[slot_of(name, qtype)];
	snprintf(e->name, sizeof(e->name), "%s", name);
	e->qtype = qtype;
	e->n = (uint8_t)n;
	e->dropped = (uint8_t)(dropped > 255 ? 255 : dropped);
	e->rcode = rcode;
	e->expires_ms = mono_ms() + (uint64_t)ttl * 1000;
	memcpy(e->addrs, addrs, n * 16);
	pthread_mutex_unlock(&c->mu);
}

bool lb_dns_cached(struct lb_net *ctx, const char *name, uint16_t qtype, uint8_t (*addrs)[16], size_t max,
		   size_t *ret_n, size_t *ret_dropped, int *ret_rcode, uint32_t *ret_ttl)
{
	return ctx->dns_cache &&
	       cache_get(ctx->dns_cache, name, qtype, addrs, max, ret_n, ret_dropped, ret_rcode, ret_ttl);
}

int lb_upstream_lookup(struct lb_net *ctx, const char *name, uint16_t qtype, uint8_t (*addrs)[16], size_t max,
		       size_t *ret_n, size_t *ret_dropped, int *ret_rcode, uint32_t *ret_ttl)
{
	if (lb_dns_cached(ctx, name, qtype, addrs, max, ret_n, ret_dropped, ret_rcode, ret_ttl))
		return 0;
	uint8_t all[CACHE_ADDRS][16];
	size_t n = 0, dropped = 0;
	int rcode = 0;
	uint32_t ttl = 0;
	int r = lb_upstream_resolve(ctx, name, qtype, all, CACHE_ADDRS, &n, &dropped, &rcode, &ttl);
	if (r < 0)
		return r;
	if (ctx->dns_cache)
		cache_put(ctx->dns_cache, name, qtype, (const uint8_t(*)[16])all, n, dropped, rcode, ttl);
	size_t kept = n < max ? n : max;
	memcpy(addrs, all, kept * 16);
	*ret_n = kept;
	*ret_dropped = dropped;
	*ret_rcode = rcode;
	*ret_ttl = ttl;
	return 0;
}

void lb_upstream_lookup_both(struct lb_net *ctx, const char *name, uint8_t (*a4)[16], size_t max4, size_t *ret_n4,
			     uint8_t (*a6)[16], size_t max6, size_t *ret_n6)
{
	static const uint16_t types[2] = { LB_DNS_TYPE_A, LB_DNS_TYPE_AAAA };
	uint8_t(*const out[2])[16] = { a4, a6 };
	const size_t max[2] = { max4, max6 };
	size_t *const ret_n[2] = { ret_n4, ret_n6 };
	struct question qs[2];
	size_t nq = 0, which[2];
	bool have_addresses = false;
	for (size_t k = 0; k < 2; k++) {
		size_t dropped;
		int rcode;
		uint32_t ttl;
		*ret_n[k] = 0;
		if (lb_dns_cached(ctx, name, types[k], out[k], max[k], ret_n[k], &dropped, &rcode, &ttl)) {
			have_addresses |= *ret_n[k] > 0;
			continue;
		}
		if (question_init(&qs[nq], name, types[k]) == 0)
			which[nq++] = k;
	}
	if (nq == 0 || ask(ctx, qs, nq, RESOLUTION_DELAY_MS, have_addresses) < 0)
		return;
	for (size_t i = 0; i < nq; i++) {
		const struct question *x = &qs[i];
		if (x->r < 0)
			continue;
		if (ctx->dns_cache)
			cache_put(ctx->dns_cache, name, x->q.qtype, (const uint8_t(*)[16])x->addrs, x->n, x->dropped,
				  x->rcode, x->ttl);
		size_t dropped;
		int rcode;
		uint32_t ttl;
		question_out(x, out[which[i]], max[which[i]], ret_n[which[i]], &dropped, &rcode, &ttl);
	}
}

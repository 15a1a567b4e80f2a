/*
 * services.c — the two host-side services the tiers' rules redirect to: the DNS resolver and the packages relay.
 *
 * Both run as threads of lensboxd (root) in the host's network namespace; they open no file and spawn nothing, and
 * they only ever talk to (a) sandboxes, identified by their source address (anti-spoofing in the prerouting chain
 * makes it trustworthy; base.nft drops these ports on non-sandbox interfaces) and (b) the configured DNS upstream and
 * the addresses it returned after the denied-range check.
 *
 * Resolver (UDP, ctx->resolver_port): a sandbox's query to its gateway:53 arrives here by DNAT. The query is parsed
 * (netparse.h), never forwarded: lensbox asks the upstream its own A query and builds a fresh answer holding only
 * addresses outside denied.list and the host's own (DNS-rebinding protection). `packages` sandboxes get answers only
 * for names on packages.list (NXDOMAIN for anything else, so DNS cannot carry data out); `web` sandboxes for any name.
 * AAAA is asked and answered the same way for `web` sandboxes when they have IPv6 (IPv6 ranges of denied.list, the
 * NAT64 forms of its IPv4 ones, the host's IPv6 addresses dropped); other types, and AAAA for the rest, get an empty
 * answer.
 *
 *   sandbox --udp 53--> [DNAT gateway:resolver_port] --> parse --> policy --> cache, else upstream A/AAAA, filtered
 *           --> answer
 *
 * Answers are kept for their TTL (upstream.c) and shared with the relay; a cached one is sent by the resolver's own
 * thread, and only a query the upstream must answer gets a thread of its own.
 *
 * Relay (TCP, ctx->relay_port, IPv4 and IPv6 on one socket): a `packages` sandbox's TCP 80/443 arrives here by
 * DNAT. The relay reads the first bytes (TLS ClientHello or HTTP request head; ≤ 16 KiB within 5 s), takes the SNI /
 * Host name, refuses names not on the list, resolves the name itself (A, and AAAA when sandboxes have IPv6 here, both
 * at once: lb_upstream_lookup_both),
 * refuses denied answers, connects to the addresses it checked on the original port as happy eyeballs does (IPv6
 * first, the next attempt 250 ms later or when one fails) and then moves bytes both ways without looking at them
 * (pump(): copied or spliced; TLS is never terminated).
 * Plain HTTP carries one request per connection: after the checked head the relay sends nothing more from the sandbox,
 * so a second request cannot name another host on the same CDN address. A refusal is a TCP reset, at once.
 *
 * Bounds: 64 DNS queries in flight (16 per sandbox), 256 relay connections (64 per sandbox; both shares set by
 * lb_net_config), 5 s to read a hello,
 * 5 min idle on a relayed connection (nothing received, or a send blocked by a peer that does not read), 1 MiB of
 * buffer (pipe or memory) per direction of a relayed connection.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/netfilter_ipv4.h>
#include <linux/netfilter_ipv6/ip6_tables.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "lb/cleanup.h"

#define DNS_INFLIGHT_MAX   LB_NET_DNS_INFLIGHT_MAX
#define HELLO_MAX	   (16384 + 5)
#define HELLO_TIMEOUT_MS   5000
#define RELAY_IDLE_SECONDS 300
#define PUMP_PIPE_BYTES	   (1 << 20)
#define PUMP_COPY_BYTES	   (1 << 20)
#define PUMP_READ_BYTES	   (1 << 18)

struct lb_service {
	pthread_t thread;
	int fd;
	int stop_fd; /* eventfd: readable when the service must stop */
	bool halted; /* its thread has been joined */
	struct lb_net *ctx;
};

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

void lb_service_halt(struct lb_service *s)
{
	if (!s || s->halted)
		return;
	uint64_t one = 1;
	if (write(s->stop_fd, &one, sizeof(one)) == sizeof(one))
		pthread_join(s->thread, NULL);
	s->halted = true;
}

void lb_service_free(struct lb_service *s)
{
	if (!s)
		return;
	lb_service_halt(s);
	close(s->fd);
	close(s->stop_fd);
	free(s);
}

int lb_service_bind(int type, uint16_t port, struct lb_error *err)
{
	/* The relay takes IPv4 and IPv6 on one socket (sandboxes with IPv6 reach it over both); the resolver is
	 * asked over IPv4 only (every sandbox's resolv.conf names 169.254.53.53). A kernel without IPv6: IPv4. */
	int family = type == SOCK_STREAM ? AF_INET6 : AF_INET;
	_cleanup_close_ int fd = socket(family, type | SOCK_CLOEXEC, 0);
	if (fd < 0 && family == AF_INET6 && errno == EAFNOSUPPORT)
		fd = socket(family = AF_INET, type | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return lb_error_set(err, errno, "creating the %s socket", type == SOCK_DGRAM ? "resolver" : "relay");
	/* SO_REUSEADDR only for the relay's TCP listener (a restart may find its old connections in TIME_WAIT; no
	 * second listener can share the port). Never for the resolver's UDP socket: on UDP it lets any local user bind
	 * the same port with SO_REUSEADDR of their own and receive, and answer, the sandboxes' queries. */
	int one = 1, zero = 0;
	if (type == SOCK_STREAM)
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (family == AF_INET6 && setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero)) < 0)
		return lb_error_set(err, errno, "letting the relay's socket take IPv4 too");
	/* Bound to every address but reachable only from sandboxes: base.nft drops this port on other interfaces,
	 * and each request's source must be an attached sandbox's address. */
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = INADDR_ANY };
	struct sockaddr_in6 a6 = { .sin6_family = AF_INET6, .sin6_port = htons(port), .sin6_addr = IN6ADDR_ANY_INIT };
	struct sockaddr *sa = family == AF_INET6 ? (struct sockaddr *)&a6 : (struct sockaddr *)&a;
	socklen_t sa_len = family == AF_INET6 ? sizeof(a6) : sizeof(a);
	/* A previous instance's services (killed with it, or by parent-death SIGKILL) may still be exiting: their
	 * sockets close a moment after they die. Wait up to 3 s for the port, then say who may hold it. */
	for (int tries = 0; bind(fd, sa, sa_len) < 0; tries++) {
		if (errno != EADDRINUSE || tries >= 150)
			return lb_error_set(
			    err, errno, "binding port %u%s", port,
			    errno == EADDRINUSE ? " (another program, or another lensbox instance, holds it)" : "");
		struct timespec ts = { 0, 20L * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
	if (type == SOCK_STREAM && listen(fd, 128) < 0)
		return lb_error_set(err, errno, "listening on port %u", port);
	return TAKE_FD(fd);
}

/* Takes fd (a socket from lb_service_bind) whatever happens. */
static int service_start(struct lb_net *ctx, int fd_in, void *(*main_fn)(void *), struct lb_service **ret,
			 struct lb_error *err)
{
	_cleanup_close_ int fd = fd_in;
	_cleanup_close_ int stop_fd = eventfd(0, EFD_CLOEXEC);
	if (stop_fd < 0)
		return lb_error_set(err, errno, "creating an eventfd");
	struct lb_service *s = calloc(1, sizeof(*s));
	if (!s)
		return lb_error_set(err, ENOMEM, "allocating a service");
	s->ctx = ctx;
	s->fd = fd;
	s->stop_fd = stop_fd;
	int r = pthread_create(&s->thread, NULL, main_fn, s);
	if (r != 0) {
		free(s);
		return lb_error_set(err, r, "starting a service thread");
	}
	TAKE_FD(fd);
	TAKE_FD(stop_fd);
	*ret = s;
	return 0;
}

/* ---------------------------------------------------------------- resolver */

struct dns_job {
	struct lb_service *svc;
	unsigned slot; /* the sender's, whose share this query holds */
	enum lb_tier tier;
	struct sockaddr_in from;
	uint8_t pkt[512];
	size_t len;
};

/* Answers q with n addresses (4 or 16 bytes each, as q's type wants, in 16-byte slots). */
static void answer(struct dns_job *job, const struct lb_dns_query *q, int rcode, const uint8_t (*a16)[16], size_t n,
		   uint32_t ttl)
{
	uint8_t out[512]; /* what a client without EDNS accepts: drop addresses until the answer fits */
	int len;
	do
		len = lb_dns_build_response(q, rcode, (const uint8_t(*)[16])a16, n, ttl, out, sizeof(out));
	while (len == -ENOBUFS && n-- > 0);
	if (len > 0)
		sendto(job->svc->fd, out, (size_t)len, MSG_DONTWAIT, (struct sockaddr *)&job->from, sizeof(job->from));
}

/* Gives back what dns_admit() took for job, and job. */
static void dns_job_end(struct dns_job *job)
{
	struct lb_net *ctx = job->svc->ctx;
	lb_net_share_release(ctx, job->slot, LB_SHARE_DNS);
	atomic_fetch_sub(&ctx->dns_inflight, 1);
	free(job);
}

/* Answers (or drops) job's query. Without may_block only when that needs no upstream round trip (a malformed or
 * refused query, another type, an answer the cache holds): false then, with nothing sent, when the upstream must be
 * asked. The resolver's thread calls it so, and hands only those to a thread of their own. */
static bool dns_handle(struct dns_job *job, bool may_block)
{
	struct lb_net *ctx = job->svc->ctx;
	unsigned slot = job->slot;
	enum lb_tier tier = job->tier;
	struct lb_dns_query q;
	int r = lb_dns_parse_query(job->pkt, job->len, &q);
	if (r < 0) {
		lb_net_count_refusal(ctx, slot);
		return true; /* malformed or not a host name: silence, as a firewall would */
	}
	if (q.qclass != 1) {
		answer(job, &q, LB_DNS_RCODE_REFUSED, NULL, 0, 0);
		return true;
	}
	if (tier == LB_TIER_PACKAGES && !lb_name_list_contains(&ctx->packages, q.name, strlen(q.name))) {
		lb_net_count_refusal(ctx, slot);
		answer(job, &q, LB_DNS_RCODE_NXDOMAIN, NULL, 0, 0);
		return true;
	}
	/* IPv6 addresses only for a sandbox that has IPv6 (web, with the pool on); other types have no answer */
	if (q.qtype != LB_DNS_TYPE_A && !(q.qtype == LB_DNS_TYPE_AAAA && atomic_load(&ctx->shared[slot].ipv6))) {
		answer(job, &q, LB_DNS_RCODE_NOERROR, NULL, 0, 60);
		return true;
	}
	uint8_t addrs[16][16];
	size_t n = 0, dropped = 0;
	int rcode = 0;
	uint32_t ttl = 0;
	if (may_block)
		r = lb_upstream_lookup(ctx, q.name, q.qtype, addrs, LB_ARRAY_SIZE(addrs), &n, &dropped, &rcode, &ttl);
	else if (!lb_dns_cached(ctx, q.name, q.qtype, addrs, LB_ARRAY_SIZE(addrs), &n, &dropped, &rcode, &ttl))
		return false;
	if (r < 0) {
		answer(job, &q, LB_DNS_RCODE_SERVFAIL, NULL, 0, 0);
		return true;
	}
	if (n == 0 && dropped > 0) { /* every address was private: for a sandbox, the name does not exist */
		lb_net_count_refusal(ctx, slot);
		answer(job, &q, LB_DNS_RCODE_NXDOMAIN, NULL, 0, 0);
		return true;
	}
	answer(job, &q, rcode == LB_DNS_RCODE_NXDOMAIN ? rcode : (rcode ? LB_DNS_RCODE_SERVFAIL : 0), addrs, n, ttl);
	return true;
}

static void *dns_job_main(void *arg)
{
	struct dns_job *job = arg;
	dns_handle(job, true);
	dns_job_end(job);
	return NULL;
}

/* Whether a query may start: its sender is a sandbox (else no answer, as a firewall would), within its share (the
 * share first: a sandbox over it never takes a unit of the bound the others need) and the bound over all. A refused
 * query is dropped and counted. On true, job holds a unit of both (dns_job_main releases them). */
static bool dns_admit(struct lb_net *ctx, struct dns_job *job)
{
	if (lb_net_lookup_source(ctx, job->from.sin_addr.s_addr, &job->slot, &job->tier) < 0)
		return false;
	if (!lb_net_share_take(ctx, job->slot, LB_SHARE_DNS)) {
		lb_net_count_refusal(ctx, job->slot);
		return false;
	}
	if (atomic_fetch_add(&ctx->dns_inflight, 1) >= DNS_INFLIGHT_MAX) {
		atomic_fetch_sub(&ctx->dns_inflight, 1);
		lb_net_share_release(ctx, job->slot, LB_SHARE_DNS);
		lb_net_count_refusal(ctx, job->slot);
		return false;
	}
	return true;
}

static void *resolver_main(void *arg)
{
	struct lb_service *s = arg;
	for (;;) {
		struct pollfd p[2] = { { .fd = s->fd, .events = POLLIN }, { .fd = s->stop_fd, .events = POLLIN } };
		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			return NULL;
		}
		if (p[1].revents)
			return NULL;
		struct dns_job *job = malloc(sizeof(*job));
		if (!job)
			continue;
		socklen_t fl = sizeof(job->from);
		ssize_t n = recvfrom(s->fd, job->pkt, sizeof(job->pkt), MSG_DONTWAIT | MSG_TRUNC,
				     (struct sockaddr *)&job->from, &fl);
		if (n < 12 || (size_t)n > sizeof(job->pkt) || job->from.sin_family != AF_INET) {
			free(job);
			continue;
		}
		job->len = (size_t)n;
		job->svc = s;
		if (!dns_admit(s->ctx, job)) {
			free(job);
			continue;
		}
		if (dns_handle(job, false)) { /* answered without the upstream: no thread */
			dns_job_end(job);
			continue;
		}
		pthread_t t;
		pthread_attr_t attr;
		pthread_attr_init(&attr);
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		pthread_attr_setstacksize(&attr, (size_t)256 * 1024);
		if (pthread_create(&t, &attr, dns_job_main, job) != 0)
			dns_job_end(job);
		pthread_attr_destroy(&attr);
	}
}

int lb_resolver_start(struct lb_net *ctx, int fd, struct lb_error *err)
{
	int r = fd < 0 ? fd : service_start(ctx, fd, resolver_main, &ctx->resolver, err);
	if (r < 0)
		return lb_error_wrap(err, "starting the DNS resolver");
	return 0;
}

/* ---------------------------------------------------------------- relay */

struct relay_conn {
	struct lb_net *ctx;
	unsigned slot; /* the sandbox's, whose share this connection holds */
	int client;
	int server; /* set under ctx->lock */
	int index;  /* in ctx->live, -1 when not registered */
	bool copy;  /* how pump() moves the bytes: the sandbox's veth takes large segments */
};

static bool conn_register(struct relay_conn *c)
{
	struct lb_net *ctx = c->ctx;
	bool ok = false;
	pthread_mutex_lock(&ctx->lock);
	for (int i = 0; !ctx->stopping && i < LB_RELAY_CONNS_MAX; i++)
		if (!ctx->live[i]) {
			ctx->live[i] = c;
			c->index = i;
			ok = true;
			break;
		}
	pthread_mutex_unlock(&ctx->lock);
	return ok;
}

static void conn_unregister(struct relay_conn *c)
{
	pthread_mutex_lock(&c->ctx->lock);
	if (c->index >= 0)
		c->ctx->live[c->index] = NULL;
	pthread_mutex_unlock(&c->ctx->lock);
}

/* Records the upstream socket, unless stopping began: then the caller closes it. */
static bool conn_set_server(struct relay_conn *c, int fd)
{
	pthread_mutex_lock(&c->ctx->lock);
	bool ok = !c->ctx->stopping;
	if (ok)
		c->server = fd;
	pthread_mutex_unlock(&c->ctx->lock);
	return ok;
}

void lb_relay_shutdown_all(struct lb_net *ctx)
{
	pthread_mutex_lock(&ctx->lock);
	ctx->stopping = true;
	for (int i = 0; i < LB_RELAY_CONNS_MAX; i++) {
		struct relay_conn *c = ctx->live[i];
		if (!c)
			continue;
		shutdown(c->client, SHUT_RDWR);
		if (c->server >= 0)
			shutdown(c->server, SHUT_RDWR);
	}
	pthread_mutex_unlock(&ctx->lock);
}

static void reset_close(int fd)
{
	struct linger l = { .l_onoff = 1, .l_linger = 0 };
	setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
	close(fd); /* with linger 0: a TCP reset, so the sandbox learns at once */
}

/* A non-blocking connect to to, started: the socket, or -errno when it failed at once. */
static int connect_start(const struct sockaddr_storage *to)
{
	_cleanup_close_ int fd = socket(to->ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	socklen_t len = to->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
	if (connect(fd, (const struct sockaddr *)to, len) < 0 && errno != EINPROGRESS)
		return -errno;
	return TAKE_FD(fd);
}

#define HAPPY_EYEBALLS_MS 250 /* RFC 8305's connection attempt delay */
#define HAPPY_MAX	  8

/* Connects to the first of the n addresses (in the order to try them) that answers, as happy eyeballs does: the next
 * attempt starts HAPPY_EYEBALLS_MS after the last one, or at once when it failed; the first connection made wins and
 * the others are closed. Returns the connected (blocking) socket or -errno. */
static int connect_happy(const struct sockaddr_storage *to, size_t n, uint32_t timeout_ms)
{
	int fds[HAPPY_MAX];
	size_t started = 0, live = 0;
	int last_err = -EHOSTUNREACH, won = -1;
	if (n > HAPPY_MAX)
		n = HAPPY_MAX;
	uint64_t deadline = now_ms() + timeout_ms, next = now_ms();
	while (won < 0) {
		uint64_t t = now_ms();
		if (t >= deadline) {
			last_err = -ETIMEDOUT;
			break;
		}
		if (started < n && (t >= next || live == 0)) {
			int fd = connect_start(&to[started++]);
			if (fd < 0) {
				last_err = fd;
				continue; /* failed at once: the next one now */
			}
			fds[live++] = fd;
			next = t + HAPPY_EYEBALLS_MS;
		}
		if (live == 0) {
			if (started == n)
				break;
			continue;
		}
		struct pollfd p[HAPPY_MAX];
		for (size_t i = 0; i < live; i++)
			p[i] = (struct pollfd){ .fd = fds[i], .events = POLLOUT };
		uint64_t until = started < n && next < deadline ? next : deadline;
		int pr = poll(p, live, (int)(until > t ? until - t : 0));
		if (pr < 0 && errno != EINTR) {
			last_err = -errno;
			break;
		}
		for (size_t i = 0; pr > 0 && i < live; i++) {
			if (!p[i].revents)
				continue;
			int soerr = 0;
			socklen_t sl = sizeof(soerr);
			if (getsockopt(fds[i], SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 && soerr == 0) {
				won = fds[i];
			} else {
				last_err = soerr ? -soerr : -errno;
				close(fds[i]);
			}
			fds[i] = -1;
		}
		size_t k = 0; /* keep the attempts still going */
		for (size_t i = 0; i < live; i++)
			if (fds[i] >= 0)
				fds[k++] = fds[i];
		live = k;
		if (live == 0 && started < n)
			next = now_ms(); /* every attempt so far failed: the next one at once */
	}
	for (size_t i = 0; i < live; i++)
		close(fds[i]);
	if (won < 0)
		return last_err;
	fcntl(won, F_SETFL, fcntl(won, F_GETFL) & ~O_NONBLOCK);
	return won;
}

/* The addresses to try for name on port, as RFC 8305 orders them: IPv6 and IPv4 in turn, IPv6 first. AAAA is asked
 * only when sandboxes have IPv6 here (so the host can reach IPv6); both answers already exclude denied addresses. */
static size_t relay_candidates(struct lb_net *ctx, const char *name, uint16_t port, struct sockaddr_storage *out,
			       size_t max)
{
	uint8_t a4[4][16], a6[4][16];
	size_t n4 = 0, n6 = 0, dropped;
	int rcode;
	uint32_t ttl;
	if (ctx->ipv6)
		lb_upstream_lookup_both(ctx, name, a4, LB_ARRAY_SIZE(a4), &n4, a6, LB_ARRAY_SIZE(a6), &n6);
	else if (lb_upstream_lookup(ctx, name, LB_DNS_TYPE_A, a4, LB_ARRAY_SIZE(a4), &n4, &dropped, &rcode, &ttl) < 0)
		n4 = 0;
	/* A cached answer was checked when it came; one of its addresses may have become the host's own since. */
	size_t k4 = 0, k6 = 0;
	for (size_t i = 0; i < n4; i++) {
		uint32_t be;
		memcpy(&be, a4[i], 4);
		if (!lb_net_addr_denied(ctx, be))
			memmove(a4[k4++], a4[i], 16);
	}
	for (size_t i = 0; i < n6; i++)
		if (!lb_net_addr6_denied(ctx, a6[i]))
			memmove(a6[k6++], a6[i], 16);
	size_t n = 0;
	for (size_t i = 0; n < max && (i < k4 || i < k6); i++) {
		if (i < k6 && n < max) {
			struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&out[n++];
			*s6 = (struct sockaddr_in6){ .sin6_family = AF_INET6, .sin6_port = htons(port) };
			memcpy(&s6->sin6_addr, a6[i], 16);
		}
		if (i < k4 && n < max) {
			struct sockaddr_in *s4 = (struct sockaddr_in *)&out[n++];
			*s4 = (struct sockaddr_in){ .sin_family = AF_INET, .sin_port = htons(port) };
			memcpy(&s4->sin_addr, a4[i], 4);
		}
	}
	return n;
}

/*
 * Moving the bytes. Each relayed byte crosses two TCP connections on this host, so what a relayed download costs is
 * mostly per packet: the relay's receive, its send, and the sandbox's receive. Two ways, chosen per sandbox:
 *  - copy (the sandbox's veth takes segments over 64 KiB: lb_net_config.veth_gso_max, Linux >= 6.3): recv() into a
 *    1 MiB buffer, 256 KiB at a time, and send() it. The kernel copies the bytes into its own 32 KiB pages, so the
 *    relay's segments to the sandbox reach the veth's size (256 KiB by default): a quarter of the packets of the
 *    64 KiB default, which more than pays for the two copies;
 *  - splice (otherwise): through a 1 MiB pipe, without copying. Spliced pages stay the 4 KiB pages they arrived in,
 *    and a segment holds at most 17 of them, so larger segments would not help it; at 64 KiB it beats copying.
 * Measured with tests/bench/network_bench.py (docs/network.md). Both honour the sockets' SO_RCVTIMEO/SO_SNDTIMEO.
 */
static void pump_copy(int in, int out)
{
	_cleanup_free_ char *buf = malloc(PUMP_COPY_BYTES); /* pages are touched only as far as reads fill it */
	if (!buf)
		return;
	for (;;) {
		/* Reads of 256 KiB, as many as are queued, then one send: a recv() holds the socket for its whole copy,
		 * and the segments (and their acknowledgements) arriving meanwhile wait; a short hold keeps the sender
		 * going, and the send still gets up to 1 MiB to cut into large segments. */
		ssize_t n = recv(in, buf, PUMP_READ_BYTES, 0);
		if (n <= 0)
			return;
		while ((size_t)n + PUMP_READ_BYTES <= PUMP_COPY_BYTES) {
			ssize_t more = recv(in, buf + n, PUMP_READ_BYTES, MSG_DONTWAIT);
			if (more <= 0)
				break; /* nothing queued (or end, or an error: the next blocking recv() reports it) */
			n += more;
		}
		for (ssize_t off = 0; off < n;) {
			ssize_t w = send(out, buf + off, (size_t)(n - off), MSG_NOSIGNAL);
			if (w <= 0)
				return;
			off += w;
		}
	}
}

static void pump_splice(int in, int out)
{
	_cleanup_close_ int rd = -1;
	_cleanup_close_ int wr = -1;
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		return;
	rd = p[0];
	wr = p[1];
	/* a larger pipe moves more per system call; the default (64 KiB) is kept if the limit forbids it */
	int chunk = fcntl(wr, F_SETPIPE_SZ, PUMP_PIPE_BYTES);
	if (chunk <= 0)
		chunk = 1 << 16;
	for (;;) {
		ssize_t n = splice(in, NULL, wr, NULL, (size_t)chunk, SPLICE_F_MOVE);
		if (n <= 0)
			return;
		for (ssize_t left = n; left > 0;) {
			ssize_t w = splice(rd, NULL, out, NULL, (size_t)left, SPLICE_F_MOVE);
			if (w <= 0)
				return;
			left -= w;
		}
	}
}

/* Copies in -> out until EOF, error or idle timeout; then half-closes out. */
static void pump(int in, int out, bool copy)
{
	if (copy)
		pump_copy(in, out);
	else
		pump_splice(in, out);
	shutdown(out, SHUT_WR);
}

static void *upstream_pump_main(void *arg)
{
	struct relay_conn *c = arg;
	pump(c->client, c->server, c->copy);
	return NULL;
}

/* Reads the sandbox's first bytes until the parser decides; returns the verdict and fills name/len. */
static int read_hello(int fd, bool tls, uint8_t *buf, size_t *ret_len, size_t *ret_forward, char *name)
{
	size_t len = 0;
	uint64_t deadline = now_ms() + HELLO_TIMEOUT_MS;
	for (;;) {
		int r;
		size_t head = 0;
		if (len > 0) {
			r = tls ? lb_tls_client_hello_sni(buf, len, name) : lb_http_request_host(buf, len, name, &head);
			if (r != LB_HELLO_NEED_MORE) {
				*ret_len = len;
				*ret_forward = tls ? len : head;
				return r;
			}
		}
		if (len == HELLO_MAX)
			return -E2BIG;
		uint64_t t = now_ms();
		if (t >= deadline)
			return -ETIMEDOUT;
		struct pollfd p = { .fd = fd, .events = POLLIN };
		if (poll(&p, 1, (int)(deadline - t)) <= 0)
			continue;
		ssize_t n = recv(fd, buf + len, HELLO_MAX - len, 0);
		if (n <= 0)
			return n == 0 ? -ECONNRESET : -errno;
		len += (size_t)n;
	}
}

static void *relay_conn_main(void *arg)
{
	struct relay_conn *c = arg;
	struct lb_net *ctx = c->ctx;
	unsigned slot = c->slot;
	bool refused = true;
	struct sockaddr_in6 orig = { 0 }; /* sin_port and sin6_port lie at the same offset */
	socklen_t sl;
	uint8_t *buf = malloc(HELLO_MAX); /* freed as soon as the hello is forwarded, or at out */
	if (!buf || !conn_register(c))
		goto out;
	c->copy = atomic_load(&ctx->shared[slot].big_segments);
	sl = sizeof(orig);
	/* the port the sandbox asked for (80 or 443), from conntrack's record of the DNAT: IPv4 (on this dual-stack
	 * socket, a mapped address) or IPv6 */
	if (getsockopt(c->client, SOL_IP, SO_ORIGINAL_DST, &orig, &sl) < 0 &&
	    (sl = sizeof(orig), getsockopt(c->client, SOL_IPV6, IP6T_SO_ORIGINAL_DST, &orig, &sl) < 0))
		goto out;
	uint16_t port = ntohs(orig.sin6_port);
	if (port != 80 && port != 443)
		goto out;
	char name[LB_DNS_NAME_MAX + 1];
	size_t len = 0, fwd = 0;
	if (read_hello(c->client, port == 443, buf, &len, &fwd, name) != LB_HELLO_OK)
		goto out;
	if (port == 80 && fwd != len)
		goto out; /* a body or a pipelined request after the head: one checked request per connection */
	if (!lb_name_list_contains(&ctx->packages, name, strlen(name)))
		goto out;
	struct sockaddr_storage to[HAPPY_MAX];
	size_t n = relay_candidates(ctx, name, port, to, LB_ARRAY_SIZE(to));
	if (n == 0)
		goto out;
	int server = connect_happy(to, n, ctx->timeout_ms);
	if (server < 0)
		goto out;
	if (!conn_set_server(c, server)) {
		close(server);
		goto out;
	}
	refused = false;
	struct timeval idle = { .tv_sec = RELAY_IDLE_SECONDS };
	setsockopt(c->client, SOL_SOCKET, SO_RCVTIMEO, &idle, sizeof(idle));
	setsockopt(c->server, SOL_SOCKET, SO_RCVTIMEO, &idle, sizeof(idle));
	/* and a peer that stops reading cannot hold the relay's send (and this thread) longer than that either */
	setsockopt(c->client, SOL_SOCKET, SO_SNDTIMEO, &idle, sizeof(idle));
	setsockopt(c->server, SOL_SOCKET, SO_SNDTIMEO, &idle, sizeof(idle));
	/* No Nagle on the relay's two legs: the endpoints already decide when a small write goes out (each its own
	 * Nagle); holding a short TLS record or HTTP head back again until the previous segment is acknowledged only
	 * adds a delayed ACK's wait to the handshake and the first byte. Bulk bytes go in large sends either way. */
	int one = 1;
	setsockopt(c->client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(c->server, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (send(c->server, buf, fwd, MSG_NOSIGNAL) != (ssize_t)fwd)
		goto out;
	free(buf);
	buf = NULL;
	if (port == 443) {
		pthread_t up;
		if (pthread_create(&up, NULL, upstream_pump_main, c) != 0)
			goto out;
		pump(c->server, c->client, c->copy);
		pthread_join(up, NULL);
	} else {
		shutdown(c->server, SHUT_WR); /* nothing more from the sandbox reaches this server */
		pump(c->server, c->client, c->copy);
	}
out:
	free(buf);
	lb_net_share_release(ctx, slot, LB_SHARE_RELAY);
	conn_unregister(c);
	if (refused) {
		lb_net_count_refusal(ctx, slot);
		reset_close(c->client);
	} else {
		close(c->client);
	}
	if (c->server >= 0)
		close(c->server);
	atomic_fetch_sub(&ctx->relay_conns, 1);
	free(c);
	return NULL;
}

/* Whether a connection accepted on fd may be relayed: its peer is an attached packages sandbox (else reset,
 * uncounted: nothing of a sandbox's), within that sandbox's share (first, so that a sandbox over it never takes a
 * unit of the bound the others need) and the bound over all. A refused connection of a sandbox is counted. On true,
 * *ret_slot holds a unit of both (relay_conn_main releases them). */
static bool relay_admit(struct lb_net *ctx, int fd, unsigned *ret_slot)
{
	struct sockaddr_storage peer = { 0 };
	socklen_t sl = sizeof(peer);
	enum lb_tier tier = LB_TIER_OFF;
	unsigned slot = 0;
	if (getpeername(fd, (struct sockaddr *)&peer, &sl) < 0)
		return false;
	const struct sockaddr_in6 *p6 = (const struct sockaddr_in6 *)&peer;
	uint32_t v4;
	int r = -ENOENT;
	if (peer.ss_family == AF_INET) {
		r = lb_net_lookup_source(ctx, ((const struct sockaddr_in *)&peer)->sin_addr.s_addr, &slot, &tier);
	} else if (peer.ss_family == AF_INET6 && IN6_IS_ADDR_V4MAPPED(&p6->sin6_addr)) {
		memcpy(&v4, p6->sin6_addr.s6_addr + 12, 4);
		r = lb_net_lookup_source(ctx, v4, &slot, &tier);
	} else if (peer.ss_family == AF_INET6) {
		r = lb_net_lookup_source6(ctx, p6->sin6_addr.s6_addr, &slot, &tier);
	}
	if (r < 0 || tier != LB_TIER_PACKAGES)
		return false;
	if (!lb_net_share_take(ctx, slot, LB_SHARE_RELAY)) {
		lb_net_count_refusal(ctx, slot); /* this sandbox has enough relayed connections open already */
		return false;
	}
	if (atomic_fetch_add(&ctx->relay_conns, 1) >= LB_RELAY_CONNS_MAX) {
		atomic_fetch_sub(&ctx->relay_conns, 1);
		lb_net_share_release(ctx, slot, LB_SHARE_RELAY);
		lb_net_count_refusal(ctx, slot);
		return false;
	}
	*ret_slot = slot;
	return true;
}

static void *relay_main(void *arg)
{
	struct lb_service *s = arg;
	/* splice(2) to a socket the other side closed raises SIGPIPE (it has no MSG_NOSIGNAL). A library must not
	 * change the process's dispositions, so the relay's threads (this one and every thread it starts, which
	 * inherit the mask) block it: the signal stays pending on the thread and the call fails with EPIPE. */
	sigset_t pipe_set;
	sigemptyset(&pipe_set);
	sigaddset(&pipe_set, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &pipe_set, NULL);
	for (;;) {
		struct pollfd p[2] = { { .fd = s->fd, .events = POLLIN }, { .fd = s->stop_fd, .events = POLLIN } };
		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			return NULL;
		}
		if (p[1].revents)
			return NULL;
		int fd = accept4(s->fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd < 0) {
			/* Out of descriptors or memory: the connection stays queued and poll() would wake at once, so
			 * pause instead of spinning until relayed connections end and free some. */
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
				struct timespec ts = { 0, 10L * 1000 * 1000 };
				nanosleep(&ts, NULL);
			}
			continue;
		}
		fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
		unsigned slot = 0;
		if (!relay_admit(s->ctx, fd, &slot)) {
			reset_close(fd);
			continue;
		}
		struct relay_conn *c = malloc(sizeof(*c));
		pthread_t t;
		pthread_attr_t attr;
		pthread_attr_init(&attr);
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		pthread_attr_setstacksize(&attr, (size_t)256 * 1024);
		if (c) {
			*c =
			    (struct relay_conn){ .ctx = s->ctx, .slot = slot, .client = fd, .server = -1, .index = -1 };
			if (pthread_create(&t, &attr, relay_conn_main, c) != 0) {
				free(c);
				c = NULL;
			}
		}
		pthread_attr_destroy(&attr);
		if (!c) {
			lb_net_share_release(s->ctx, slot, LB_SHARE_RELAY);
			atomic_fetch_sub(&s->ctx->relay_conns, 1);
			reset_close(fd);
		}
	}
}

int lb_relay_start(struct lb_net *ctx, int fd, struct lb_error *err)
{
	int r = fd < 0 ? fd : service_start(ctx, fd, relay_main, &ctx->relay, err);
	if (r < 0)
		return lb_error_wrap(err, "starting the packages relay");
	return 0;
}

/*
 * accept.c — the API socket's accept loop: ours, so that running out of file descriptors is answered, not spun on.
 *
 * Runs in the API process (api_user, confined), on one thread of its own. It accepts each connection and hands it to
 * libmicrohttpd (MHD_add_connection), which serves it on a thread per connection as before (http.c).
 *
 * Why not libmicrohttpd's own loop: when accept() fails with EMFILE or ENFILE (the process's RLIMIT_NOFILE, or the
 * host's fs.file-max, reached), libmicrohttpd 0.9.75's poll loop polls the listening socket again at once, finds
 * the same pending connection and fails again: one core at 100% for as long as the fds stay short, and the waiting
 * client is never answered. Here, one descriptor is kept in reserve (a duplicate of the listening socket): on EMFILE
 * or ENFILE it is closed, the waiting connection accepted with the freed number, answered `503 busy` with
 * Retry-After (docs/api.md) and closed, and the reserve taken again. When even that fails, the loop waits 100 ms
 * before the next accept, so a shortage never costs more than a few wakeups a second.
 *
 * Invariants: the refusal never blocks on a write (non-blocking socket, one short write); it then reads and drops
 * at most 4 MiB of the request for at most 2 s (200 ms without data ends it), so that the client can finish sending
 * and read the answer instead of failing on a broken pipe. Only one refusal is under way at a time (it holds the
 * reserve), and while it lingers no other connection could have been accepted anyway. Stopping (lbd_accept_stop) wakes
 * the thread through an eventfd and joins it; the listening socket is the caller's.
 */
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "api.h"
#include "lb/log.h"

struct lbd_accept {
	struct MHD_Daemon *mhd;
	int listen_fd;
	int wake; /* eventfd: stop */
	int reserve;
	pthread_t thread;
	uint64_t refused; /* connections answered 503 for want of a descriptor */
};

/* One fixed answer: the JSON envelope of docs/api.md, code busy, Retry-After 1 like every 503 busy. */
static const char REFUSAL_BODY[] = "{\"error\":{\"code\":\"busy\",\"message\":\"lensboxd's API process is out of file "
				   "descriptors (too many connections or open files); try again in a moment.\"}}\n";

static uint64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* The answer first (one non-blocking write: a fresh connection's buffer holds it), then a lingering close: what the
 * client still sends is read and dropped, so that it can finish sending its request and read the answer instead of
 * failing on a broken pipe. Bounded: REFUSE_DRAIN bytes, REFUSE_LINGER_MS in all, REFUSE_QUIET_MS without data. */
#define REFUSE_DRAIN	 (4u << 20)
#define REFUSE_LINGER_MS 2000
#define REFUSE_QUIET_MS	 200

static void refuse(int fd)
{
	char msg[512];
	int n = snprintf(msg, sizeof(msg),
			 "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
			 "Connection: close\r\nContent-Length: %zu\r\n\r\n%s",
			 sizeof(REFUSAL_BODY) - 1, REFUSAL_BODY);
	if (n > 0 && (size_t)n < sizeof(msg))
		(void)!send(fd, msg, (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL);
	shutdown(fd, SHUT_WR);
	char buf[16384];
	size_t drained = 0;
	for (uint64_t t0 = mono_ms(), now = t0; drained < REFUSE_DRAIN && now - t0 < REFUSE_LINGER_MS;
	     now = mono_ms()) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		uint64_t left = REFUSE_LINGER_MS - (now - t0);
		if (poll(&p, 1, (int)(left < REFUSE_QUIET_MS ? left : REFUSE_QUIET_MS)) <= 0)
			return;
		ssize_t got = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
		if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR))
			return; /* the client has read the answer and closed, or is gone */
		drained += got > 0 ? (size_t)got : 0;
	}
}

/* Out of descriptors: answers the waiting connection with the reserve's number. false: nothing could be done (no
 * reserve, or the connection went), the caller waits before trying again. */
static bool out_of_fds(struct lbd_accept *ac)
{
	if (ac->reserve < 0)
		ac->reserve = fcntl(ac->listen_fd, F_DUPFD_CLOEXEC, 0);
	if (ac->reserve < 0)
		return false;
	close(ac->reserve);
	ac->reserve = -1;
	int fd = accept4(ac->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
	bool answered = fd >= 0;
	if (answered) {
		refuse(fd);
		close(fd);
		if (ac->refused++ % 100 == 0)
			lb_warn("component=api",
				"out of file descriptors: a connection was answered 503 busy (%llu so far)",
				(unsigned long long)ac->refused);
	}
	ac->reserve = fcntl(ac->listen_fd, F_DUPFD_CLOEXEC, 0);
	return answered;
}

static void *accept_main(void *arg)
{
	struct lbd_accept *ac = arg;
	int wait_ms = -1;
	for (;;) {
		struct pollfd p[2] = { { .fd = ac->listen_fd, .events = POLLIN },
				       { .fd = ac->wake, .events = POLLIN } };
		int n = poll(p, 2, wait_ms);
		if (n < 0 && errno != EINTR)
			wait_ms = 100;
		if (p[1].revents)
			return NULL;
		if (n <= 0 || !(p[0].revents & POLLIN))
			continue;
		wait_ms = -1;
		struct sockaddr_un sa;
		socklen_t len = sizeof(sa);
		int fd = accept4(ac->listen_fd, (struct sockaddr *)&sa, &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd >= 0) {
			/* MHD takes the socket whatever it answers: it closes one it cannot serve (the connection
			 * limit). */
			(void)MHD_add_connection(ac->mhd, fd, (const struct sockaddr *)&sa, len);
			if (ac->reserve < 0)
				ac->reserve = fcntl(ac->listen_fd, F_DUPFD_CLOEXEC, 0);
		} else if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
			if (!out_of_fds(ac))
				wait_ms = 100;
		} else if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED) {
			wait_ms = 100; /* anything else: never a busy loop */
		}
	}
}

int lbd_accept_start(struct MHD_Daemon *mhd, int listen_fd, struct lbd_accept **ret, struct lb_error *err)
{
	struct lbd_accept *ac = calloc(1, sizeof(*ac));
	if (!ac)
		return lb_error_set(err, ENOMEM, "allocating the accept loop");
	*ac = (struct lbd_accept){ .mhd = mhd, .listen_fd = listen_fd, .wake = -1, .reserve = -1 };
	ac->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (ac->wake < 0) {
		int r = lb_error_set(err, errno, "creating the accept loop's eventfd");
		free(ac);
		return r;
	}
	ac->reserve = fcntl(listen_fd, F_DUPFD_CLOEXEC, 0);
	int r = pthread_create(&ac->thread, NULL, accept_main, ac);
	if (r != 0) {
		if (ac->reserve >= 0)
			close(ac->reserve);
		close(ac->wake);
		free(ac);
		return lb_error_set(err, r, "starting the accept loop");
	}
	*ret = ac;
	return 0;
}

void lbd_accept_stop(struct lbd_accept *ac)
{
	if (!ac)
		return;
	uint64_t one = 1;
	(void)!write(ac->wake, &one, sizeof(one));
	pthread_join(ac->thread, NULL);
	if (ac->reserve >= 0)
		close(ac->reserve);
	close(ac->wake);
	free(ac);
}

/*
 * serve.c — the core's side of the protocol: the control socket, one thread per request channel, and the one switch
 * over message types.
 *
 * Runs in the core (root). The API process (unprivileged, and to be treated as compromised) sends one LBP_CHANNEL
 * message per request on the control socket; it carries one end of a fresh SOCK_SEQPACKET pair. A thread then reads
 * request messages on that channel one at a time and answers each with one LBP_REPLY, until the API process closes
 * it (it keeps a few idle channels for its next requests).
 *
 * Invariants:
 *   - Every message goes through lbp_recv (proto.c), which checks layout, grammar, ranges and descriptors before a
 *     field is read; do_*.c checks again what depends on the core's state. A message refused is logged, counted
 *     (lensbox_core_messages_refused_total) and answered 400 bad_message where there is a channel to answer on; it
 *     never ends the loop: the core keeps serving the requests that are well formed.
 *   - Bounded: at most max_connections + LBD_CHANNELS_IDLE channels are open at once (more are closed unanswered,
 *     counted), and a channel that sends no first request within LBD_CHANNEL_WAIT_S seconds is closed, so a flood
 *     of channels or a silent one costs the core a bounded number of threads and descriptors. A malformed message
 *     closes its channel.
 *   - On the control socket only LBP_CHANNEL is accepted; on a channel only request types (never LBP_CHANNEL or
 *     LBP_REPLY).
 *   - Out of file descriptors is a shortage, not an attack: a request that arrives with fewer than LBD_FD_HEADROOM
 *     free below RLIMIT_NOFILE, or whose descriptors the kernel could not install, is answered 503 busy (not done)
 *     and the channel goes on.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "core.h"
#include "lb/cleanup.h"
#include "lb/log.h"

#define LBD_CHANNELS_IDLE  64 /* the API process keeps at most this many idle channels (api/priv.c) */
#define LBD_CHANNEL_WAIT_S 30

static const lbd_do_fn handlers[LBP_TYPE_END] = {
	[LBP_HEALTH] = lbd_do_health,
	[LBP_METRICS] = lbd_do_metrics,
	[LBP_SANDBOX_LIST] = lbd_do_sandbox_list,
	[LBP_SANDBOX_GET] = lbd_do_sandbox_get,
	[LBP_SANDBOX_PUT] = lbd_do_sandbox_put,
	[LBP_SANDBOX_DELETE] = lbd_do_sandbox_delete,
	[LBP_SANDBOX_STOP] = lbd_do_sandbox_stop,
	[LBP_RUN] = lbd_do_run,
	[LBP_RUNS_LIST] = lbd_do_runs_list,
	[LBP_RUN_GET] = lbd_do_run_get,
	[LBP_FILES_LIST] = lbd_do_files_list,
	[LBP_FILE_GET] = lbd_do_file_get,
	[LBP_FILE_PUT] = lbd_do_file_put,
	[LBP_IMAGES_LIST] = lbd_do_images_list,
	[LBP_IMAGE_GET] = lbd_do_image_get,
	[LBP_IMAGE_DELETE] = lbd_do_image_delete,
	[LBP_IMAGE_PULL] = lbd_do_image_pull,
	[LBP_IMAGE_IMPORT] = lbd_do_image_import,
	/* LBP_REPLY and LBP_CHANNEL are not requests: no handler, refused on a channel. */
};

struct channel {
	struct lbd *d;
	int fd;
};

/* Counted always; logged at most once a second with the count since the last line, so a flood of forged messages
 * cannot flood the journal too. */
static void refused(struct lbd *d, const char *where, int r)
{
	uint64_t n = atomic_fetch_add(&d->metrics.messages_refused, 1) + 1;
	uint64_t now = lbd_mono_ms(), last = atomic_load(&d->metrics.refused_logged_ms);
	if (now - last < 1000 || !atomic_compare_exchange_strong(&d->metrics.refused_logged_ms, &last, now))
		return;
	char fields[96];
	snprintf(fields, sizeof(fields), "component=core refused_total=%llu", (unsigned long long)n);
	lb_warn(fields, "refused a message from the API process on the %s: %s", where, strerror(-r));
}

/* Sends res as the reply; a reply that cannot be sent (the API process went away) is logged at debug only: the
 * operation itself happened and is recorded where it records (the ledger, the store). */
static void reply(int fd, struct lbd_res *res)
{
	int status = res->status >= 200 && res->status < 600 ? res->status : 500;
	int r = lbp_send_reply(fd, (unsigned)status, res->content_type ? res->content_type : "application/json",
			       res->log_fields, res->body, res->fd >= 0 ? res->fd_size : res->len, res->fd);
	if (r < 0)
		lb_debug("component=core", "the reply could not be sent: %s", strerror(-r));
}

/* Under this many free descriptors below RLIMIT_NOFILE a request is refused before it starts: a start, a run or a
 * transfer opens a few dozen at most, and one that ran out halfway would fail with a less useful answer. */
#define LBD_FD_HEADROOM 64

/* Whether the core is about to run out of descriptors: the lowest free number is within LBD_FD_HEADROOM of the soft
 * limit (numbers are handed out lowest first, so everything below it is in use). Two syscalls, no scan. */
static bool fds_short(int fd)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY)
		return false;
	int t = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (t < 0)
		return errno == EMFILE || errno == ENFILE;
	close(t);
	return (rlim_t)t + LBD_FD_HEADROOM > rl.rlim_cur;
}

static void fds_refusal(struct lbd_res *res)
{
	lbd_res_error(res, 503, "busy",
		      "lensboxd's core is out of file descriptors (RLIMIT_NOFILE); the request was not done. Try again "
		      "in a moment.");
}

/* Serves one request on the channel: 1 when it was answered and the channel goes on, 0 when the API process closed
 * it (or sent nothing in time), -1 when the message was refused (answered 400; the channel is then closed). */
static int serve_request(struct lbd *d, int fd, struct lbp_msg *m)
{
	struct lbd_res res = { .fd = -1, .has_channel = true, .channel = fd };
	int r = lbp_recv(fd, m);
	if (r == -ENODATA || r == -EAGAIN || r == -EWOULDBLOCK || r == -ECONNRESET)
		return 0;
	if (r == 0 && !handlers[m->hdr.type]) {
		lbp_msg_clear(m);
		r = -EBADMSG;
	}
	if (r == -EMFILE) {
		fds_refusal(&res);
		r = 0;
	} else if (r < 0) {
		refused(d, "request channel", r);
		lbd_res_error(&res, 400, "bad_message", "The core refused a malformed message from the API process.");
	} else if (fds_short(fd)) {
		lbp_msg_clear(m);
		fds_refusal(&res);
	} else {
		handlers[m->hdr.type](d, m, &res);
		lbp_msg_clear(m);
		if (res.status == 0)
			lbd_res_error(&res, 500, "internal", "The core produced no answer (a bug).");
	}
	reply(fd, &res);
	free(res.body);
	if (res.fd >= 0)
		close(res.fd);
	return r < 0 ? -1 : 1;
}

/* A channel serves its requests one after another until the API process closes it: the API process keeps idle
 * channels for its next requests, so a request costs no new channel and no new thread. Only the first request has
 * a deadline (a channel opened and never used is closed); after it, the channel may wait idle. */
static void *channel_thread(void *arg)
{
	struct channel *c = arg;
	struct lbp_msg *m = malloc(sizeof(*m));
	for (bool first = true; m && serve_request(c->d, c->fd, m) > 0; first = false)
		if (first) {
			struct timeval none = { 0 };
			setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof(none));
		}
	free(m);
	close(c->fd);
	atomic_fetch_sub(&c->d->metrics.channels, 1);
	free(c);
	return NULL;
}

/* Starts a detached thread for the channel fd (taken over: closed on failure). */
static void start_channel(struct lbd *d, int fd)
{
	if (atomic_fetch_add(&d->metrics.channels, 1) >= (uint64_t)d->cfg.max_connections + LBD_CHANNELS_IDLE) {
		atomic_fetch_sub(&d->metrics.channels, 1);
		refused(d, "control socket (too many channels at once)", -EBUSY);
		close(fd);
		return;
	}
	/* A channel must carry its request soon; the reply may take as long as the run. */
	struct timeval tv = { .tv_sec = LBD_CHANNEL_WAIT_S };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	struct channel *c = malloc(sizeof(*c));
	pthread_attr_t attr;
	pthread_t t;
	if (c) {
		c->d = d;
		c->fd = fd;
	}
	if (!c || pthread_attr_init(&attr) != 0) {
		free(c);
		close(fd);
		atomic_fetch_sub(&d->metrics.channels, 1);
		return;
	}
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, (size_t)512 * 1024);
	int r = pthread_create(&t, &attr, channel_thread, c);
	pthread_attr_destroy(&attr);
	if (r != 0) {
		lb_error("component=core", "starting a request thread failed: %s", strerror(r));
		free(c);
		close(fd);
		atomic_fetch_sub(&d->metrics.channels, 1);
	}
}

/* One wait on the control socket: 1 when a message is there, 0 when the API process or its socket has ended. */
static int wait_control(int control_fd, int pidfd)
{
	/* The process's end is seen on its pidfd too: a copy of its end of the control socket held elsewhere would keep
	 * the socket from closing. */
	for (;;) {
		struct pollfd pf[2] = { { .fd = control_fd, .events = POLLIN }, { .fd = pidfd, .events = POLLIN } };
		if (poll(pf, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (pf[1].revents)
			return 0; /* the API process has ended */
		return (pf[0].revents & POLLIN) ? 1 : 0;
	}
}

int lbd_serve_control(struct lbd *d, int control_fd, int pidfd)
{
	struct lbp_msg *m = malloc(sizeof(*m));
	if (!m)
		return -ENOMEM;
	int r;
	while ((r = wait_control(control_fd, pidfd)) > 0) {
		r = lbp_recv(control_fd, m);
		if (r == -ENODATA || r == -ECONNRESET) {
			r = 0; /* the API process is gone */
			break;
		}
		if (r == -ENOMEM || r == -ENOBUFS) {
			usleep(10 * 1000);
			continue;
		}
		/* We are at RLIMIT_NOFILE: the kernel could not give us the channel and dropped it, so the API process
		 * sees that one channel close and answers busy. The control socket itself is fine: ending here would
		 * end the API process and every connection it holds. */
		if (r == -EMFILE || r == -ENFILE) {
			usleep(10 * 1000);
			continue;
		}
		if (r == -EBADMSG) {
			refused(d, "control socket", r);
			continue;
		}
		if (r < 0)
			break;
		if (m->hdr.type != LBP_CHANNEL) {
			lbp_msg_clear(m);
			refused(d, "control socket (not a channel)", -EBADMSG);
			continue;
		}
		int fd = m->fds[0];
		m->nfds = 0; /* taken over */
		start_channel(d, fd);
	}
	free(m);
	return r;
}

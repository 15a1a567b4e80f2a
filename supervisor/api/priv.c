/*
 * priv.c — the one way the API process asks the core for anything (OpenBSD's priv_* naming: the call that crosses
 * into the privileged process).
 *
 * Runs in the API process on connection threads. Each request has a channel to itself while it runs: an idle one
 * kept from an earlier request, or a fresh SOCK_SEQPACKET pair whose other end is handed to the core on the control
 * socket (LBP_CHANNEL); the core serves each channel with a thread of its own. So requests never wait for each
 * other here, a run that takes minutes holds only its own channel, and a reply can never reach the wrong request.
 * After a clean answer the channel is kept (up to LBD_API_IDLE_CHANNELS) for the next request; after anything else
 * it is closed. The reply is decoded by the same validating decoder the
 * core uses (proto.c); its body is passed on to the client as bytes, never parsed here.
 *
 * Streamed answers (priv_stream, a pull or import asked with Accept: application/x-ndjson): the core's PROGRESS
 * messages, validated by that decoder, become ndjson lines this file formats from their fields (no byte of the
 * core's is copied into a progress line); the REPLY's body is the last line (at most 256 KiB). Anything else from
 * the core ends the stream with an error line. While waiting, the client's connection is polled for POLLHUP: a
 * hang-up ends the stream, and closing the channel is what tells the core to cancel.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "api.h"
#include "lb/cleanup.h"

/* A new channel whose other end is now the core's; -errno when the core cannot be reached. */
static int open_channel(struct lbd_api *a)
{
	int pair[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) < 0)
		return -errno;
	int r = lbp_send(a->control_fd, LBP_CHANNEL, NULL, 0, &pair[1], 1);
	close(pair[1]);
	if (r < 0) {
		close(pair[0]);
		return r;
	}
	return pair[0];
}

bool lbd_res_fds_short(struct lbd_res *res, int r, bool maybe_done)
{
	if (r != -EMFILE && r != -ENFILE)
		return false;
	const char *done =
	    maybe_done ? "the core's answer was lost, so the request may have been done" : "the request was not done";
	lbd_res_error(res, 503, "busy",
		      "lensboxd's API process is out of file descriptors (too many connections or open files); %s. "
		      "Try again in a moment.",
		      done);
	return true;
}

/* The decoded reply into res: status, content type, log fields, and the body inline (copied) or as a file. */
static void take_reply(struct lbp_msg *m, struct lbd_res *res)
{
	const struct lbp_reply *r = &m->u.reply;
	static const char *const types[] = { "application/json", "application/octet-stream",
					     "text/plain; version=0.0.4" };
	res->content_type = "application/json";
	for (size_t i = 0; i < LB_ARRAY_SIZE(types); i++)
		if (strcmp(r->content_type, types[i]) == 0)
			res->content_type = types[i];
	snprintf(res->log_fields, sizeof(res->log_fields), "%s", r->log_fields);
	free(res->body);
	res->body = NULL;
	res->len = 0;
	if (r->body_in_fd) {
		res->fd = m->fds[0];
		m->fds[0] = -1;
		res->fd_size = r->body_len;
	} else {
		res->body = malloc(r->body_len + 1);
		if (!res->body) {
			lbd_res_error(res, 500, "internal", "Out of memory.");
			return;
		}
		memcpy(res->body, m->u.raw + sizeof(*r), r->body_len);
		res->body[r->body_len] = '\0';
		res->len = r->body_len;
	}
	res->status = (int)r->status;
}

/* An idle channel, or -1. */
static int idle_channel(struct lbd_api *a)
{
	pthread_mutex_lock(&a->channels_mu);
	int ch = a->n_idle ? a->idle_channels[--a->n_idle] : -1;
	pthread_mutex_unlock(&a->channels_mu);
	return ch;
}

/* Keeps a channel that just carried a clean answer for the next request, or closes it when enough are kept. */
static void keep_channel(struct lbd_api *a, int ch)
{
	pthread_mutex_lock(&a->channels_mu);
	if (a->n_idle < LBD_API_IDLE_CHANNELS) {
		a->idle_channels[a->n_idle++] = ch;
		ch = -1;
	}
	pthread_mutex_unlock(&a->channels_mu);
	if (ch >= 0)
		close(ch);
}

/* Whether the core still holds the control socket (it closes it only when it ends or gives up on us), asked after a
 * channel closed unanswered. A core that is ending closes all its descriptors at once, but the channel may be closed
 * an instant before the control socket: wait up to 100 ms for the hang-up before taking the core for alive. */
static bool core_alive(struct lbd_api *a)
{
	struct pollfd pf = { .fd = a->control_fd, .events = POLLIN };
	int n;
	do
		n = poll(&pf, 1, 100);
	while (n < 0 && errno == EINTR);
	return n >= 0 && !(pf.revents & (POLLHUP | POLLERR | POLLNVAL));
}

/* The answer when the core closed a channel without answering: busy while it still holds the control socket (it could
 * not take the channel, out of descriptors or threads, or could not go on), else it has ended. */
static void answer_channel_closed(struct lbd_api *a, struct lbd_res *res)
{
	if (core_alive(a))
		lbd_res_error(
		    res, 503, "busy",
		    "lensboxd's core dropped the request (out of file descriptors or threads); the request may "
		    "or may not have been done. Try again in a moment.");
	else
		lbd_res_error(res, 503, "core_unavailable",
			      "lensboxd's core ended before it answered; the request may or may not have been done.");
}

/* Sends the request on a channel: an idle one first; when that one turns out closed (the send fails, so the core
 * never saw the request), a new one. The channel, or -errno. */
static int send_request(struct lbd_api *a, uint16_t type, const void *payload, size_t len, int fd)
{
	const int *fds = fd >= 0 ? &fd : NULL;
	size_t nfds = fd >= 0 ? 1 : 0;
	int ch = idle_channel(a);
	if (ch >= 0) {
		if (lbp_send(ch, type, payload, len, fds, nfds) == 0)
			return ch;
		close(ch);
	}
	ch = open_channel(a);
	if (ch < 0)
		return ch;
	int r = lbp_send(ch, type, payload, len, fds, nfds);
	if (r < 0) {
		close(ch);
		return r;
	}
	return ch;
}

/* Waits until the core's answer can be read on ch, watching the client's connection (client_fd >= 0) meanwhile: 0,
 * or -ECANCELED once the client hung up (its connection closed: POLLHUP or POLLERR). */
static int wait_answer(struct lbd_api *a, int ch, int client_fd)
{
	if (client_fd < 0)
		return 0;
	for (;;) {
		/* events 0 on the client: a request pipelined behind this one (POLLIN) is not a hang-up. */
		struct pollfd p[2] = { { .fd = ch, .events = POLLIN }, { .fd = client_fd, .events = 0 } };
		int k = poll(p, 2, 1000);
		if (k < 0 && errno != EINTR)
			return 0; /* the read below reports what is wrong */
		if (k > 0 && p[0].revents)
			return 0;
		if (k > 0 && (p[1].revents & (POLLHUP | POLLERR | POLLNVAL)))
			return -ECANCELED;
		if (atomic_load(&a->stopping))
			return 0;
	}
}

static void call(struct lbd_req *req, uint16_t type, const void *payload, size_t len, int fd, int client_fd,
		 struct lbd_res *res)
{
	struct lbd_api *a = req->a;
	atomic_fetch_add(&a->in_flight, 1);
	int ch = send_request(a, type, payload, len, fd);
	if (ch < 0 && lbd_res_fds_short(res, ch, false)) {
		atomic_fetch_sub(&a->in_flight, 1);
		return;
	}
	if (ch < 0) {
		lbd_res_error(res, 503, "core_unavailable",
			      "lensboxd's core cannot be reached (%s); it is restarting or has stopped.",
			      strerror(-ch));
		atomic_fetch_sub(&a->in_flight, 1);
		return;
	}
	int r = 0;
	struct lbp_msg *m = r == 0 ? malloc(sizeof(*m)) : NULL;
	if (r == 0 && !m)
		r = -ENOMEM;
	if (r == 0)
		r = wait_answer(a, ch, client_fd);
	if (r == 0)
		r = lbp_recv(ch, m);
	if (r == 0 && m->hdr.type != LBP_REPLY) {
		lbp_msg_clear(m);
		r = -EBADMSG;
	}
	if (r == 0) {
		take_reply(m, res);
		lbp_msg_clear(m);
		keep_channel(a, ch);
		ch = -1;
	} else if (r == -ECANCELED) {
		/* Nobody will read an answer; closing the channel (below) tells the core to stop the work. */
		lbd_res_error(res, 400, "cancelled", "The client went away before the answer; the work was stopped.");
	} else if (r == -ENODATA || r == -ECONNRESET || r == -EPIPE) {
		answer_channel_closed(a, res);
	} else if (!lbd_res_fds_short(res, r, true)) {
		lbd_res_error(res, 502, "core_error", "The core's answer could not be read: %s.", strerror(-r));
	}
	free(m);
	if (ch >= 0)
		close(ch);
	atomic_fetch_sub(&a->in_flight, 1);
}

void priv_call(struct lbd_req *req, uint16_t type, const void *payload, size_t len, int fd, struct lbd_res *res)
{
	call(req, type, payload, len, fd, -1, res);
}

void priv_call_watched(struct lbd_req *req, uint16_t type, const void *payload, size_t len, int fd, int client_fd,
		       struct lbd_res *res)
{
	call(req, type, payload, len, fd, client_fd, res);
}

/* ---- streamed answers (Accept: application/x-ndjson on a pull or an import) ---- */

struct lbd_stream {
	struct lbd_api *a;
	int channel;
	int client_fd; /* libmicrohttpd's; only polled */
	char *pending; /* bytes not yet handed to libmicrohttpd */
	size_t len, off;
	bool ended; /* pending holds the last line */
	int status; /* the outcome: the REPLY's status, 502/503 for a broken core, 0 while unknown */
	struct lbp_msg *m;
};

/* One progress message as an ndjson line. Every field was validated by the decoder (phase in range, layer hex). */
static char *progress_line(const struct lbp_progress *p, size_t *ret_len)
{
	char layer[sizeof(p->layer) + 16] = "null", total[32] = "null";
	if (p->layer[0])
		snprintf(layer, sizeof(layer), "\"sha256:%s\"", p->layer);
	if (p->total)
		snprintf(total, sizeof(total), "%llu", (unsigned long long)p->total);
	char *line = NULL;
	int n = asprintf(&line, "{\"phase\":\"%s\",\"layer\":%s,\"done\":%llu,\"total\":%s}\n",
			 lbp_phase_name(p->phase), layer, (unsigned long long)p->done, total);
	if (n < 0)
		return NULL;
	*ret_len = (size_t)n;
	return line;
}

/* The REPLY's body (JSON, inline or in a file of bounded size) as the last line: newlines, which JSON allows only as
 * whitespace outside strings, become spaces. An error object also gets the HTTP status the answer would have had
 * without streaming ({"error": {...}, "status": 404}), since the stream's own status is 200 by then. */
static char *reply_line(struct lbp_msg *m, size_t *ret_len)
{
	const struct lbp_reply *r = &m->u.reply;
	if (r->body_len > (uint64_t)4 * LBP_INLINE_MAX || r->body_len < 2)
		return NULL;
	char *line = malloc(r->body_len + 32);
	if (!line)
		return NULL;
	if (r->body_in_fd) {
		if (pread(m->fds[0], line, r->body_len, 0) != (ssize_t)r->body_len) {
			free(line);
			return NULL;
		}
	} else {
		memcpy(line, m->u.raw + sizeof(*r), r->body_len);
	}
	size_t n = r->body_len;
	for (size_t i = 0; i < n; i++)
		if (line[i] == '\n' || line[i] == '\r')
			line[i] = ' ';
	while (n > 1 && line[n - 1] == ' ')
		n--;
	if (r->status >= 400 && line[n - 1] == '}')
		n += (size_t)snprintf(line + n - 1, 32, ",\"status\":%u}", r->status) - 1;
	line[n] = '\n';
	line[n + 1] = '\0';
	*ret_len = n + 1;
	return line;
}

static char *error_line(const char *code, const char *message, size_t *ret_len)
{
	char *line = NULL;
	int n = asprintf(&line, "{\"error\":{\"code\":\"%s\",\"message\":\"%s\"}}\n", code, message);
	if (n < 0)
		return NULL;
	*ret_len = (size_t)n;
	return line;
}

/* The next line from the core into s->pending; sets s->ended with the last one. -1 on a hang-up of the client. */
static int next_line(struct lbd_stream *s)
{
	for (;;) {
		/* events 0 on the client: POLLHUP and POLLERR are reported anyway, and a request pipelined behind this
		 * one (POLLIN) is not a hang-up. */
		struct pollfd p[2] = { { .fd = s->channel, .events = POLLIN }, { .fd = s->client_fd, .events = 0 } };
		int k = poll(p, 2, 1000);
		if (atomic_load(&s->a->stopping))
			return -1;
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0 || (p[1].revents & (POLLHUP | POLLERR | POLLNVAL)))
			return -1;
		if (k == 0 || !p[0].revents)
			continue;
		int r = lbp_recv(s->channel, s->m);
		char *line = NULL;
		if (r == 0 && s->m->hdr.type == LBP_PROGRESS) {
			line = progress_line(&s->m->u.progress, &s->len);
		} else if (r == 0 && s->m->hdr.type == LBP_REPLY) {
			line = reply_line(s->m, &s->len);
			s->ended = true;
			s->status = (int)s->m->u.reply.status;
		} else {
			line = error_line(r == -ENODATA || r == -ECONNRESET ? "core_unavailable" : "core_error",
					  "lensboxd's core ended or sent something malformed before it answered.",
					  &s->len);
			s->ended = true;
			s->status = r == -ENODATA || r == -ECONNRESET ? 503 : 502;
		}
		if (r == 0)
			lbp_msg_clear(s->m);
		if (!line)
			return -1;
		free(s->pending);
		s->pending = line;
		s->off = 0;
		return 0;
	}
}

struct lbd_stream *priv_stream_open(struct lbd_api *a, struct lbd_res *res, int client_fd)
{
	struct lbd_stream *s = calloc(1, sizeof(*s));
	struct lbp_msg *m = malloc(sizeof(*m));
	if (!s || !m) {
		free(s);
		free(m);
		return NULL;
	}
	*s = (struct lbd_stream){ .a = a, .channel = res->channel, .client_fd = client_fd, .m = m };
	s->pending = TAKE_PTR(res->body);
	s->len = res->len;
	res->len = 0;
	res->has_channel = false;
	res->channel = -1;
	return s;
}

ssize_t priv_stream_read(struct lbd_stream *s, char *buf, size_t max)
{
	while (s->off >= s->len) {
		if (s->ended)
			return -1;
		if (next_line(s) < 0)
			return -2;
	}
	size_t n = s->len - s->off < max ? s->len - s->off : max;
	memcpy(buf, s->pending + s->off, n);
	s->off += n;
	return (ssize_t)n;
}

int priv_stream_status(const struct lbd_stream *s)
{
	return s->status;
}

void priv_stream_close(struct lbd_stream *s)
{
	if (!s)
		return;
	close(s->channel); /* the core sees it closed and cancels a pull still going */
	free(s->pending);
	free(s->m);
	atomic_fetch_sub(&s->a->in_flight, 1);
	free(s);
}

void priv_stream(struct lbd_req *req, uint16_t type, const void *payload, size_t len, int fd, struct lbd_res *res)
{
	struct lbd_api *a = req->a;
	atomic_fetch_add(&a->in_flight, 1); /* an orderly stop waits for this request too (lbd_http_stop) */
	int ch = send_request(a, type, payload, len, fd);
	if (ch < 0 && lbd_res_fds_short(res, ch, false)) {
		atomic_fetch_sub(&a->in_flight, 1);
		return;
	}
	if (ch < 0) {
		lbd_res_error(res, 503, "core_unavailable",
			      "lensboxd's core cannot be reached (%s); it is restarting or has stopped.",
			      strerror(-ch));
		atomic_fetch_sub(&a->in_flight, 1);
		return;
	}
	struct lbp_msg *m = malloc(sizeof(*m));
	int r = m ? lbp_recv(ch, m) : -ENOMEM;
	if (r == 0 && m->hdr.type == LBP_REPLY) {
		take_reply(m, res);
		lbp_msg_clear(m);
	} else if (r == 0 && m->hdr.type == LBP_PROGRESS) {
		size_t n = 0;
		char *line = progress_line(&m->u.progress, &n);
		lbp_msg_clear(m);
		if (line) {
			free(res->body);
			res->body = line;
			res->len = n;
			res->status = 200;
			res->content_type = "application/x-ndjson";
			res->has_channel = true;
			res->channel = ch;
			ch = -1;
			atomic_fetch_add(&a->in_flight, 1); /* the stream's own: until priv_stream_close */
		} else {
			lbd_res_error(res, 500, "internal", "Out of memory.");
		}
	} else if (r == -ENODATA || r == -ECONNRESET || r == -EPIPE) {
		answer_channel_closed(a, res);
	} else if (!lbd_res_fds_short(res, r, true)) {
		if (r == 0)
			lbp_msg_clear(m);
		lbd_res_error(res, 502, "core_error", "The core's answer could not be read: %s.",
			      strerror(r < 0 ? -r : EBADMSG));
	}
	free(m);
	if (ch >= 0)
		close(ch);
	atomic_fetch_sub(&a->in_flight, 1);
}

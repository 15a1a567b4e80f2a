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
 */
#include <errno.h>
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

void priv_call(struct lbd_req *req, uint16_t type, const void *payload, size_t len, int fd, struct lbd_res *res)
{
	struct lbd_api *a = req->a;
	atomic_fetch_add(&a->in_flight, 1);
	int ch = send_request(a, type, payload, len, fd);
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
	} else if (r == -ENODATA || r == -ECONNRESET || r == -EPIPE) {
		lbd_res_error(res, 503, "core_unavailable",
			      "lensboxd's core ended before it answered; the request may or may not have been done.");
	} else {
		lbd_res_error(res, 502, "core_error", "The core's answer could not be read: %s.", strerror(-r));
	}
	free(m);
	if (ch >= 0)
		close(ch);
	atomic_fetch_sub(&a->in_flight, 1);
}

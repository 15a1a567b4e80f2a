/*
 * http.c — the API's transport: the Unix socket the core created, served with libmicrohttpd.
 *
 * Runs in the API process (api_user, confined). accept.c accepts the connections and hands them to libmicrohttpd
 * (it answers 503 busy itself when the process is out of descriptors); libmicrohttpd runs one thread per connection
 * (MHD_USE_THREAD_PER_CONNECTION), so a run that takes a minute blocks only its own connection: health, listing and
 * file requests on other connections are served at once. Connections are capped (max_connections) and time out
 * (connection_timeout_seconds). A connection past the cap is answered `503 busy` with Retry-After and closed, so a
 * client can tell a full daemon from a broken one; only past the cap and LBD_API_OVER_LIMIT more does libmicrohttpd
 * close connections unanswered.
 *
 * Who may connect: the socket is root:<socket_group> mode 0660 inside a directory that no "other" user can enter;
 * each request's peer (SO_PEERCRED: pid, uid, gid) is logged, and when allowed_uids/allowed_gids are set, a peer
 * matching neither (root excepted: it owns the state anyway) gets 403 before its body is read.
 *
 * Bodies are hostile and bounded: each route declares its largest body (api.h); a Content-Length above it is
 * answered 413 before a byte of the body is read, a chunked body that grows past it is discarded and answered 413,
 * and all bodies held in memory at once are capped by body_memory (503 past it). Paths reach routes.c still
 * percent-encoded (the unescape callback is the identity) so a %00 or %2F can be refused, never silently cut.
 *
 * A streamed answer (ndjson progress of a pull or import, priv.c's priv_stream) is a chunked response whose reader
 * callback blocks on the core's channel on the connection's own thread. It has two access-log lines: "request"
 * when the stream starts (status 200), and "stream ended" (or "stream failed", or "stream cancelled by the client"
 * with status 0) with the outcome's status and the whole duration when it ends.
 */
#include <errno.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <yajl/yajl_tree.h>

#include "api.h"
#include "lb/cleanup.h"
#include "lb/fileio.h"
#include "lb/log.h"

struct lbd_http {
	struct lbd_api *a;
	struct MHD_Daemon *mhd;
	struct lbd_accept *acceptor; /* accept.c: accepts on listen_fd and hands each connection to mhd */
	int listen_fd;
};

/* One request's state across libmicrohttpd's calls of the access handler (all on the connection's thread). */
struct conn_req {
	uint64_t start_ms;
	struct lbd_req req;
	struct lbd_res res;
	struct lbd_route_match route;
	bool answered; /* res holds the answer already (an early refusal) */
	bool deferred; /* an early refusal sent once the (small) body has been read and dropped */
	uint64_t discarded;
	bool too_big;	 /* the body passed route.body_max */
	bool no_memory;	 /* the body_memory budget was exhausted */
	size_t reserved; /* bytes of d->body_bytes this request holds */
	size_t cap;
	char path_log[160];
};

static size_t identity_unescape(void *cls, struct MHD_Connection *c, char *s)
{
	(void)cls;
	(void)c;
	return strlen(s);
}

static bool peer_allowed(const struct lbd_config *cfg, uid_t uid, gid_t gid)
{
	if (cfg->n_allowed_uids == 0 && cfg->n_allowed_gids == 0)
		return true;
	if (uid == 0)
		return true;
	for (size_t i = 0; i < cfg->n_allowed_uids; i++)
		if (cfg->allowed_uids[i] == uid)
			return true;
	for (size_t i = 0; i < cfg->n_allowed_gids; i++)
		if (cfg->allowed_gids[i] == gid)
			return true;
	return false;
}

static bool reserve_body(struct lbd_api *d, struct conn_req *cr, size_t more)
{
	uint64_t now = atomic_fetch_add(&d->body_bytes, more) + more;
	if (now > d->cfg.body_memory_bytes) {
		atomic_fetch_sub(&d->body_bytes, more);
		return false;
	}
	cr->reserved += more;
	return true;
}

static void log_request(struct conn_req *cr)
{
	char fields[512];
	snprintf(fields, sizeof(fields),
		 "method=%s path=%s status=%d duration_ms=%llu peer_uid=%u peer_gid=%u peer_pid=%d%s%s%s%s",
		 cr->req.method, cr->path_log, cr->res.status, (unsigned long long)(lbd_mono_ms() - cr->start_ms),
		 (unsigned)cr->req.peer_uid, (unsigned)cr->req.peer_gid, (int)cr->req.peer_pid,
		 cr->req.name[0] ? " sandbox=" : "", cr->req.name, cr->res.log_fields[0] ? " " : "",
		 cr->res.log_fields);
	if (cr->res.status >= 500)
		lb_error(fields, "request failed");
	else
		lb_info(fields, "request");
}

/* Retry-After for the answers that pass by themselves (lbd_retry_after), 0 for none. The code is read back from the
 * error body, which the core or this process made (bounded, our own envelope); a body that is not one gets none. */
static unsigned retry_after_of(const struct lbd_res *res)
{
	if ((res->status != 429 && res->status != 503) || res->fd >= 0 || !res->body || res->len > 4096)
		return 0;
	char buf[4097], errbuf[64];
	memcpy(buf, res->body, res->len);
	buf[res->len] = '\0';
	yajl_val v = yajl_tree_parse(buf, errbuf, sizeof(errbuf));
	const char *path[] = { "error", "code", NULL };
	yajl_val code = v ? yajl_tree_get(v, path, yajl_t_string) : NULL;
	unsigned secs = lbd_retry_after(res->status, code ? YAJL_GET_STRING(code) : NULL);
	yajl_tree_free(v);
	return secs;
}

/* A streamed answer with what its second access-log line needs (the request's state may be gone by then). */
struct http_stream {
	struct lbd_stream *s;
	uint64_t start_ms;
	char fields[256];
};

/* libmicrohttpd's reader of a streamed answer (priv_stream_read), on the connection's thread. */
static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct http_stream *hs = cls;
	(void)pos;
	ssize_t n = priv_stream_read(hs->s, buf, max);
	if (n == -1)
		return MHD_CONTENT_READER_END_OF_STREAM;
	return n < 0 ? MHD_CONTENT_READER_END_WITH_ERROR : n;
}

/* The stream's end: its outcome logged (status 0: the client went away first, and the core was told to cancel). */
static void stream_free(void *cls)
{
	struct http_stream *hs = cls;
	int status = priv_stream_status(hs->s);
	char fields[400];
	snprintf(fields, sizeof(fields), "%s status=%d duration_ms=%llu", hs->fields, status,
		 (unsigned long long)(lbd_mono_ms() - hs->start_ms));
	if (status >= 500)
		lb_error(fields, "stream failed");
	else
		lb_info(fields, status ? "stream ended" : "stream cancelled by the client");
	priv_stream_close(hs->s);
	free(hs);
}

/* A streamed answer: chunked ndjson read from the core's channel as it comes. */
static struct MHD_Response *stream_response(struct lbd_api *d, struct MHD_Connection *conn, struct conn_req *cr)
{
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	struct http_stream *hs = ci ? calloc(1, sizeof(*hs)) : NULL;
	if (!hs)
		return NULL;
	hs->s = priv_stream_open(d, &cr->res, ci->connect_fd);
	if (!hs->s) {
		free(hs);
		return NULL;
	}
	hs->start_ms = cr->start_ms;
	snprintf(hs->fields, sizeof(hs->fields), "method=%s path=%s peer_uid=%u peer_pid=%d", cr->req.method,
		 cr->path_log, (unsigned)cr->req.peer_uid, (int)cr->req.peer_pid);
	struct MHD_Response *r =
	    MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, (size_t)16 * 1024, stream_reader, hs, stream_free);
	if (!r) {
		priv_stream_close(hs->s);
		free(hs);
	}
	return r;
}

static enum MHD_Result send_res(struct lbd_api *d, struct MHD_Connection *conn, struct conn_req *cr)
{
	struct lbd_res *res = &cr->res;
	struct MHD_Response *r;
	unsigned retry = retry_after_of(res);
	if (res->has_channel) {
		r = stream_response(d, conn, cr);
	} else if (res->fd >= 0) {
		r = MHD_create_response_from_fd64(res->fd_size, res->fd);
		if (r)
			res->fd = -1; /* libmicrohttpd closes it with the response */
	} else {
		r = MHD_create_response_from_buffer(res->len, res->body, MHD_RESPMEM_MUST_FREE);
		if (r)
			res->body = NULL;
	}
	if (!r)
		return MHD_NO;
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
				res->content_type ? res->content_type : "application/json");
	int status = res->status >= 100 && res->status < 600 ? res->status : 500;
	if (retry) {
		char value[16];
		snprintf(value, sizeof(value), "%u", retry);
		MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, value);
		/* Told to come back later, the client reconnects: its connection is not held meanwhile. */
		MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
	}
	atomic_fetch_add(&d->metrics.requests_by_status[status], 1);
	atomic_fetch_add(&d->metrics.requests_by_class[status / 100], 1);
	enum MHD_Result q = MHD_queue_response(conn, (unsigned)status, r);
	MHD_destroy_response(r);
	log_request(cr);
	return q;
}

static const char *too_large_code(const struct conn_req *cr)
{
	return cr->route.too_large_code ? cr->route.too_large_code : "body_too_large";
}

static void copy_for_log(char *dst, size_t size, const char *s)
{
	size_t i = 0;
	for (; s[i] && i + 1 < size; i++) {
		char c = s[i];
		if (c <= 32 || c >= 127 || c == '"')
			c = '?';
		dst[i] = c;
	}
	dst[i] = '\0';
}

/* A refusal decided from the headers alone. When the request announces a small body (or none), it is read and
 * dropped first so that a client writing its body before reading the answer does not hit a closed socket; a large
 * body is not waited for: the answer goes at once and the connection closes. */
static enum MHD_Result defer_or_send(struct lbd_api *d, struct MHD_Connection *conn, struct conn_req *cr)
{
	cr->answered = true;
	const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
	const char *te = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING);
	char *end = NULL;
	unsigned long long n = cl ? strtoull(cl, &end, 10) : 0;
	if (!te && (!cl || (end && *end == '\0' && n <= LBD_SMALL_BODY_MAX))) {
		cr->deferred = true;
		return MHD_YES;
	}
	return send_res(d, conn, cr);
}

/* Counts the open connections; one that opens past max_connections is marked (its socket context) to be answered
 * 503 busy. */
static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
			  enum MHD_ConnectionNotificationCode code)
{
	(void)conn;
	struct lbd_api *a = cls;
	if (code == MHD_CONNECTION_NOTIFY_STARTED) {
		uint64_t n = atomic_fetch_add(&a->connections, 1) + 1;
		*socket_context = n > a->cfg.max_connections ? (void *)a : NULL;
	} else if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
		atomic_fetch_sub(&a->connections, 1);
	}
}

static bool over_limit(struct MHD_Connection *conn)
{
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	return ci && ci->socket_context != NULL;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
				  const char *version, const char *upload_data, size_t *upload_data_size,
				  void **con_cls)
{
	(void)version;
	struct lbd_api *d = cls;
	struct conn_req *cr = *con_cls;

	if (!cr) {
		cr = calloc(1, sizeof(*cr));
		if (!cr)
			return MHD_NO;
		*con_cls = cr;
		cr->start_ms = lbd_mono_ms();
		cr->res.fd = -1;
		cr->res.channel = -1;
		cr->req.a = d;
		cr->req.conn = conn;
		cr->req.method = method;
		cr->req.peer_uid = (uid_t)-1;
		cr->req.peer_gid = (gid_t)-1;
		copy_for_log(cr->path_log, sizeof(cr->path_log), url);
		if (over_limit(conn)) {
			lbd_res_error(
			    &cr->res, 503, "busy",
			    "lensboxd serves at most %u API connections at once (max_connections) and all are "
			    "open; try again in a moment.",
			    (unsigned)d->cfg.max_connections);
			return defer_or_send(d, conn, cr);
		}

		const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
		struct ucred uc;
		socklen_t ul = sizeof(uc);
		if (!ci || getsockopt(ci->connect_fd, SOL_SOCKET, SO_PEERCRED, &uc, &ul) < 0) {
			lbd_res_error(&cr->res, 500, "internal", "Could not read the caller's credentials.");
			cr->answered = true;
			return send_res(d, conn, cr);
		}
		cr->req.peer_pid = uc.pid;
		cr->req.peer_uid = uc.uid;
		cr->req.peer_gid = uc.gid;
		if (!peer_allowed(&d->cfg, uc.uid, uc.gid)) {
			atomic_fetch_add(&d->metrics.connections_refused, 1);
			lbd_res_error(
			    &cr->res, 403, "forbidden",
			    "uid %u (gid %u) may not use lensboxd: it is not in allowed_uids or allowed_gids.",
			    (unsigned)uc.uid, (unsigned)uc.gid);
			return defer_or_send(d, conn, cr);
		}
		/* The path without the query string, still percent-encoded (identity unescape). */
		if (lbd_route(method, url, &cr->route, &cr->res) < 0)
			return defer_or_send(d, conn, cr);
		snprintf(cr->req.name, sizeof(cr->req.name), "%s", cr->route.name);
		cr->req.file_path = TAKE_PTR(cr->route.file_path);
		const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
		if (cl) {
			char *end;
			errno = 0;
			unsigned long long n = strtoull(cl, &end, 10);
			if (errno || *end || n > cr->route.body_max) {
				lbd_res_error(
				    &cr->res, 413, too_large_code(cr),
				    "The request body (%s bytes) is larger than this endpoint takes (%zu bytes).", cl,
				    cr->route.body_max);
				cr->answered = true;
				return send_res(d, conn, cr);
			}
			if (n > 0 && !reserve_body(d, cr, (size_t)n + 1)) {
				lbd_res_error(&cr->res, 503, "busy",
					      "Too many large requests are in progress; try again in a moment.");
				cr->answered = true;
				return send_res(d, conn, cr);
			}
		}
		return MHD_YES;
	}

	if (*upload_data_size) {
		size_t n = *upload_data_size;
		*upload_data_size = 0;
		if (cr->deferred || cr->too_big || cr->no_memory) {
			/* Discarding the rest of a refused body, up to a bound: past it the connection is closed. */
			cr->discarded += n;
			return cr->discarded > 2 * (uint64_t)LBD_FILE_MAX ? MHD_NO : MHD_YES;
		}
		if (cr->req.body_len + n > cr->route.body_max) {
			cr->too_big = true;
			free(TAKE_PTR(cr->req.body));
			cr->req.body_len = cr->cap = 0;
			return MHD_YES;
		}
		if (cr->req.body_len + n + 1 > cr->cap) {
			size_t want = cr->req.body_len + n + 1;
			size_t cap = cr->cap ? cr->cap : 4096;
			while (cap < want)
				cap *= 2;
			if (cap > cr->route.body_max + 1)
				cap = cr->route.body_max + 1;
			if (cap > cr->reserved && !reserve_body(d, cr, cap - cr->reserved)) {
				cr->no_memory = true;
				free(TAKE_PTR(cr->req.body));
				cr->req.body_len = cr->cap = 0;
				return MHD_YES;
			}
			char *nb = realloc(cr->req.body, cap);
			if (!nb)
				return MHD_NO;
			cr->req.body = nb;
			cr->cap = cap;
		}
		memcpy(cr->req.body + cr->req.body_len, upload_data, n);
		cr->req.body_len += n;
		cr->req.body[cr->req.body_len] = '\0';
		return MHD_YES;
	}

	if (cr->deferred) {
		cr->deferred = false;
		return send_res(d, conn, cr);
	}
	if (cr->answered)
		return MHD_YES; /* already queued */
	cr->answered = true;
	if (cr->too_big)
		lbd_res_error(&cr->res, 413, too_large_code(cr),
			      "The request body is larger than this endpoint takes (%zu bytes).", cr->route.body_max);
	else if (cr->no_memory)
		lbd_res_error(&cr->res, 503, "busy", "Too many large requests are in progress; try again in a moment.");
	else
		cr->route.handler(&cr->req, &cr->res);
	if (cr->res.status == 0)
		lbd_res_error(&cr->res, 500, "internal", "The handler produced no answer (a bug).");
	return send_res(d, conn, cr);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls, enum MHD_RequestTerminationCode toe)
{
	(void)conn;
	(void)toe;
	struct lbd_api *d = cls;
	struct conn_req *cr = *con_cls;
	if (!cr)
		return;
	if (cr->reserved)
		atomic_fetch_sub(&d->body_bytes, cr->reserved);
	free(cr->req.body);
	free(cr->req.file_path);
	free(cr->route.file_path);
	free(cr->res.body);
	if (cr->res.fd >= 0)
		close(cr->res.fd);
	if (cr->res.has_channel) {
		close(cr->res.channel);
		atomic_fetch_sub(&d->in_flight, 1);
	}
	free(cr);
	*con_cls = NULL;
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
	(void)cls;
	char msg[512];
	vsnprintf(msg, sizeof(msg), fmt, ap);
	lb_debug("component=libmicrohttpd", "%s", msg);
}

int lbd_http_start(struct lbd_api *a, int listen_fd, struct lbd_http **ret, struct lb_error *err)
{
	struct lbd_http *h = calloc(1, sizeof(*h));
	if (!h)
		return lb_error_set(err, ENOMEM, "allocating the HTTP server");
	h->a = a;
	h->listen_fd = listen_fd;
	/* No listening socket of MHD's own: accept.c accepts (and answers 503 busy when fds run out). */
	h->mhd =
	    MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL |
				 MHD_USE_ERROR_LOG | MHD_USE_ITC | MHD_USE_NO_LISTEN_SOCKET,
			     0, NULL, NULL, on_request, a, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
			     MHD_OPTION_NOTIFY_COMPLETED, on_completed, a, MHD_OPTION_NOTIFY_CONNECTION, on_connection,
			     a, MHD_OPTION_UNESCAPE_CALLBACK, identity_unescape, NULL, MHD_OPTION_CONNECTION_LIMIT,
			     (unsigned)a->cfg.max_connections + LBD_API_OVER_LIMIT, MHD_OPTION_CONNECTION_TIMEOUT,
			     (unsigned)a->cfg.connection_timeout_seconds, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
			     (size_t)(64 * 1024), MHD_OPTION_THREAD_STACK_SIZE, (size_t)(512 * 1024), MHD_OPTION_END);
	if (!h->mhd) {
		free(h);
		return lb_error_setx(err, EIO, "libmicrohttpd could not start on the API socket");
	}
	int r = lbd_accept_start(h->mhd, listen_fd, &h->acceptor, err);
	if (r < 0) {
		MHD_stop_daemon(h->mhd);
		free(h);
		return r;
	}
	*ret = h;
	return 0;
}

void lbd_http_stop(struct lbd_http *h)
{
	if (!h)
		return;
	/* No new connections from here on; requests in progress (runs among them) get up to 80 s (below the unit's
	 * TimeoutStopSec) to finish and deliver their results before the remaining connections are closed. The core
	 * removes the socket's path. */
	lbd_accept_stop(h->acceptor);
	close(h->listen_fd);
	for (int i = 0; i < 1600 && atomic_load(&h->a->in_flight) > 0; i++)
		usleep(50 * 1000);
	atomic_store(&h->a->stopping, true); /* a stream still waiting for the core ends within 1 s */
	MHD_stop_daemon(h->mhd);
	free(h);
}

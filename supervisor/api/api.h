/*
 * api.h — lensboxd's API process: its context and the interfaces between api/'s files.
 *
 * The API process runs as the unprivileged api_user (no capabilities, no_new_privs, its own seccomp allowlist and a
 * Landlock domain with no filesystem access; confine.c). It holds the listening socket and parses everything a
 * client sends: HTTP (libmicrohttpd), routes, query strings and JSON bodies. It asks the core for every operation
 * with one message of proto/proto.h on a channel of its own (priv.c; OpenBSD's priv_* naming: a call that crosses
 * into the privileged process reads as one), and sends the core's answer back to the client. The parts:
 *
 *   main.c        start: the configuration from the core, privileges dropped, confinement, then serving
 *   confine.c     setresuid to api_user, capabilities, no_new_privs, Landlock, seccomp
 *   accept.c      the accept loop: each connection to libmicrohttpd; out of fds, 503 busy
 *   http.c        libmicrohttpd on the inherited socket (thread per connection), peer credentials, bounded bodies
 *   request.c     what a handler reads of its request: query-string arguments, percent-decoding
 *   routes.c      URL -> handler, name validation
 *   parse.c       yajl-based request validation (one object, known keys, types, the sandbox spec's ranges)
 *   priv.c        one request to the core: on an idle channel or one newly handed over the control socket
 *   ask_*.c       one file per resource: the request checked and turned into its message
 */
#ifndef LBD_API_H
#define LBD_API_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <yajl/yajl_tree.h>

#include "common.h"
#include "proto.h"

/* The descriptors the core hands the API process at exec (core/api_proc.c). */
#define LBD_API_LISTEN_FD     3	 /* the API socket, listening */
#define LBD_API_CONTROL_FD    4	 /* SOCK_SEQPACKET to the core: LBP_CHANNEL messages go here */
#define LBD_API_CONFIG_FD     5	 /* a sealed memfd: the core's struct lbd_config */
#define LBD_API_IDLE_CHANNELS 64 /* channels kept open for the next requests (the core allows as many) */
/* Connections past max_connections that are still served a `503 busy` (Retry-After, then closed) rather than closed
 * unanswered by libmicrohttpd's own limit (http.c). */
#define LBD_API_OVER_LIMIT 64

struct lbd_api_metrics {
	atomic_uint_fast64_t requests_by_class[6]; /* index status/100: 1xx..5xx */
	atomic_uint_fast64_t requests_by_status[600];
	atomic_uint_fast64_t connections_refused; /* peers not in allowed_uids/gids */
};

/* The API process's context: built by main.c, passed to every connection thread. */
struct lbd_api {
	struct lbd_config cfg; /* the core's, read-only */
	int control_fd;
	atomic_uint_fast64_t body_bytes;  /* request bodies held in memory right now */
	atomic_uint_fast64_t in_flight;	  /* requests waiting for the core's answer */
	atomic_bool stopping;		  /* lbd_http_stop gave up waiting: streams end (their channels close) */
	atomic_uint_fast64_t connections; /* open API connections (http.c's connection notifications) */
	pthread_mutex_t channels_mu;	  /* guards the idle channels (priv.c) */
	int idle_channels[LBD_API_IDLE_CHANNELS];
	size_t n_idle;
	struct lbd_api_metrics metrics;
};

struct MHD_Connection;

struct lbd_req {
	struct lbd_api *a;
	struct MHD_Connection *conn;
	const char *method;
	pid_t peer_pid;
	uid_t peer_uid;
	gid_t peer_gid;
	char name[LB_STORE_NAME_MAX + 1]; /* the {name} of the route, validated; "" when the route has none */
	char *file_path;		  /* the {path} of a files route, percent-decoded (not yet validated) */
	char *body;			  /* NUL-terminated; NULL when the request had none */
	size_t body_len;
};

/* ---- main.c ---- */

/* The API process: never returns (exits 0 after an orderly stop, 1 when it cannot serve). */
int lbd_api_main(void);

/* ---- confine.c ---- */

/* Drops to cfg->api_user (supplementary groups cleared, every capability and the bounding set gone), sets
 * no_new_privs, enters a Landlock domain without filesystem access and loads the seccomp allowlist. -errno with
 * err filled on failure: the process must then exit, never serve unconfined. */
int lbd_api_confine(const struct lbd_config *cfg, struct lb_error *err);

/* ---- accept.c ---- */

struct lbd_accept;
struct MHD_Daemon;
/* Accepts on listen_fd on a thread of its own and hands each connection to mhd; a connection that finds the process
 * out of file descriptors is answered 503 busy. The listening socket stays the caller's. */
int lbd_accept_start(struct MHD_Daemon *mhd, int listen_fd, struct lbd_accept **ret, struct lb_error *err);
/* Stops accepting and joins the thread; NULL is fine. */
void lbd_accept_stop(struct lbd_accept *ac);

/* ---- http.c ---- */

struct lbd_http;
/* Serves the listening socket fd with libmicrohttpd. */
int lbd_http_start(struct lbd_api *a, int listen_fd, struct lbd_http **ret, struct lb_error *err);
/* Stops accepting, lets requests in progress finish (up to 80 s) and stops. */
void lbd_http_stop(struct lbd_http *h);

/* ---- request.c ---- */

/* A query-string argument, percent-decoded (malloc'ed, caller frees), or NULL when absent. *ret_bad set when the
 * value could not be decoded (a NUL or a bad escape). */
char *lbd_req_query(struct lbd_req *req, const char *key, bool *ret_bad);
/* The raw (still percent-encoded) query-string value of key, owned by libmicrohttpd. */
const char *lbd_http_query_raw(struct lbd_req *req, const char *key);
/* Percent-decodes s[0..len) into a new string; NULL when it holds %00, a raw NUL or a bad escape. */
char *lbd_percent_decode(const char *s, size_t len);

/* ---- parse.c ---- */

enum lbd_jtype { LBD_J_STRING, LBD_J_INT, LBD_J_BOOL, LBD_J_OBJECT, LBD_J_SCALAR /* number or string */ };
struct lbd_jfield {
	const char *name;
	enum lbd_jtype type;
};

/* The keys of POST .../runs (ask_runs.c; also read by the fuzz target). */
#define LBD_RUN_FIELDS 5
extern const struct lbd_jfield lbd_run_fields[LBD_RUN_FIELDS];

/* Parses body as one JSON object whose keys are all in fields (each at most once) with the declared types.
 * An empty body is {}. On failure fills f (400 invalid_json / unknown_field / wrong_type; 422 invalid_value for a
 * \u0000 escape) and returns -EINVAL. On success *ret is the tree (yajl_tree_free). */
int lbd_json_object(const char *body, size_t len, const struct lbd_jfield *fields, size_t n, yajl_val *ret,
		    struct lbd_fail *f);
/* Validates an already-parsed object node the same way (nested objects). */
int lbd_json_check(yajl_val obj, const char *where, const struct lbd_jfield *fields, size_t n, struct lbd_fail *f);
yajl_val lbd_json_get(yajl_val obj, const char *key);
/* The scalar's text as written (a string's value or a number's digits). */
const char *lbd_json_text(yajl_val v);
/* Reads the sandbox spec object {image, network, cpu, memory, disk, idle_minutes, keep_hours} into req over the
 * config's defaults, validating ranges (422 out_of_range / invalid_value). */
int lbd_json_spec(const struct lbd_config *cfg, yajl_val obj, struct lbd_spec_request *req, struct lbd_fail *f);

/* ---- priv.c ---- */

/* Asks the core: sends one message (payload, and fd when >= 0, which stays the caller's) on a new channel and waits
 * for the answer, which fills res (status, body or an fd to send, content type, log fields). Never fails: when the
 * core cannot be reached or answers something malformed, res is a 503 or 502 error saying so. */
void priv_call(struct lbd_req *req, uint16_t type, const void *payload, size_t len, int fd, struct lbd_res *res);
/* As priv_call, watching the client's connection (client_fd, libmicrohttpd's; only polled) while the core works: when
 * the client hangs up, the channel is closed unanswered, which the core takes as the order to stop (a run is killed,
 * runner/exec.c's hangup_fd), and res says `cancelled`. */
void priv_call_watched(struct lbd_req *req, uint16_t type, const void *payload, size_t len, int fd, int client_fd,
		       struct lbd_res *res);
/* When r is -EMFILE or -ENFILE, this process's own shortage: res becomes 503 busy (Retry-After, as the accept loop
 * answers), saying whether the core may have done the request (its answer was lost), and true is returned. */
bool lbd_res_fds_short(struct lbd_res *res, int r, bool maybe_done);
/* As priv_call for a pull or import that asked for progress: waits for the core's first message. A REPLY (an early
 * refusal) fills res as priv_call does. A PROGRESS makes res a stream: status 200, application/x-ndjson, body the
 * first line, has_channel with the channel, which http.c then reads with priv_stream_* until the REPLY. */
void priv_stream(struct lbd_req *req, uint16_t type, const void *payload, size_t len, int fd, struct lbd_res *res);
/* A streamed answer being read: the channel, the client's connection (watched for a hang-up) and pending bytes. */
struct lbd_stream;
/* Takes res's channel and body; NULL when out of memory (res keeps them). */
struct lbd_stream *priv_stream_open(struct lbd_api *a, struct lbd_res *res, int client_fd);
/* Up to max bytes of ndjson into buf: > 0 bytes, -1 at the end (the final object was sent), -2 when the client went
 * away or the stream broke (the connection is then closed, and closing the channel cancels the core's work). */
ssize_t priv_stream_read(struct lbd_stream *s, char *buf, size_t max);
/* The stream's outcome: the final answer's status (an error's, though the client saw 200), 0 when it never came
 * (the client hung up, or the API process stopped). */
int priv_stream_status(const struct lbd_stream *s);
void priv_stream_close(struct lbd_stream *s);

/* ---- ask_*.c: one per route ---- */
void lbd_ask_health(struct lbd_req *req, struct lbd_res *res);
void lbd_ask_metrics(struct lbd_req *req, struct lbd_res *res);
void lbd_ask_sandbox_list(struct lbd_req *req, struct lbd_res *res);
void lbd_ask_sandbox_get(struct lbd_req *req, struct lbd_res *res);
void lbd_ask_sandbox_put(struct lbd_req *req, struct lbd_res *res);
void lbd_ask_sandbox_delete(struct lbd_req *req, struct lbd_res *res);
void lbd_ask_sandbox_stop(struct lbd_req *req, struct lbd_res *res);
void lbd_ask_run(struct lbd_req *req, struct lbd_res *res);
void lbd_ask_runs_list(struct lbd_req *req, struct lbd_res *res);
void lbd_ask_run_get(struct lbd_req *req, struct lbd_res *res);
void lbd_ask_files_list(struct lbd_req *req, struct lbd_res *res);
void lbd_ask_file_get(struct lbd_req *req, struct lbd_res *res);
void lbd_ask_file_put(struct lbd_req *req, struct lbd_res *res);
void lbd_ask_images_list(struct lbd_req *req, struct lbd_res *res);
void lbd_ask_image_get(struct lbd_req *req, struct lbd_res *res);    /* ref in req->file_path */
void lbd_ask_image_delete(struct lbd_req *req, struct lbd_res *res); /* ref in req->file_path */
void lbd_ask_image_pull(struct lbd_req *req, struct lbd_res *res);
void lbd_ask_image_import(struct lbd_req *req, struct lbd_res *res);

/* ---- routes.c ---- */
typedef void (*lbd_handler)(struct lbd_req *req, struct lbd_res *res);
struct lbd_route_match {
	lbd_handler handler;
	size_t body_max;	    /* the largest body this route accepts */
	const char *too_large_code; /* the 413's code (default body_too_large) */
	char name[LB_STORE_NAME_MAX + 1];
	char *file_path; /* malloc'ed */
};
/* Matches method + raw (still percent-encoded) path. On failure fills res with 404/405/400 and returns < 0. */
int lbd_route(const char *method, const char *raw_path, struct lbd_route_match *ret, struct lbd_res *res);

#endif

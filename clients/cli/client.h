/*
 * client.h — one HTTP request to lensboxd over its Unix socket, for the `lensbox` command (libcurl with
 * CURLOPT_UNIX_SOCKET_PATH; JSON through yajl).
 *
 * Runs in the CLI process with the invoking user's privileges; the socket's mode decides who may talk to lensboxd.
 * Answers are bounded: a response body larger than the caller's limit is refused, never buffered without end.
 */
#ifndef LBC_CLIENT_H
#define LBC_CLIENT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <yajl/yajl_tree.h>

#define LBC_DEFAULT_SOCKET "/run/lensbox/lensboxd.sock"

struct lbc_response {
	long status; /* HTTP status; 0 when no answer came */
	char *body;  /* NUL-terminated (malloc'ed); NULL when streamed to a file */
	size_t len;
	char error[512]; /* when status == 0 or >= 400: a sentence ("lensboxd answered 404: There is no...") */
	char code[64];	 /* lensboxd's error code, or "daemon_unreachable", "too_large", "bad_response" */
};

struct lbc_request {
	const char *method; /* GET PUT POST DELETE */
	const char *path;   /* "/v1/..." already percent-encoded */
	const void *body;   /* may be NULL */
	size_t body_len;
	const char *content_type; /* for body */
	size_t max_response;	  /* refuse (code too_large) past this many bytes */
	FILE *sink;	      /* non-NULL: a 2xx body is written here instead of kept (max_response still applies) */
	long timeout_seconds; /* 0: none */
	/* Line mode (a streamed answer, application/x-ndjson): accept is the Accept header (NULL: application/json);
	 * each complete line of a 2xx body goes to on_line (without its newline, NUL-terminated), and is not kept in
	 * res->body; max_response then bounds one line. on_line returning nonzero stops the transfer (code
	 * "cancelled"), as does *cancel becoming nonzero (a signal handler's flag), checked at least once a second. */
	const char *accept;
	int (*on_line)(const char *line, size_t len, void *ud);
	void *line_ud;
	const volatile int *cancel;
};

/* Sends req to the socket. Returns 0 when lensboxd answered 2xx; otherwise -1 with res->error/code filled (and
 * res->status when it answered). res->body must be freed by the caller (lbc_response_free). */
int lbc_http(const char *socket_path, const struct lbc_request *req, struct lbc_response *res);
void lbc_response_free(struct lbc_response *res);

/* Parses res->body as JSON (yajl_tree_free the result); NULL with res->error set when it is not JSON. */
yajl_val lbc_json(struct lbc_response *res);

/* Percent-encodes each component of a relative path, keeping the '/' between them. NULL on ENOMEM. */
char *lbc_escape_path(const char *path);
/* Percent-encodes one query value or path component. */
char *lbc_escape(const char *s);

/* Typed lookups in a yajl object; the fallback when the key is absent or of another type. */
const char *lbc_jstr(yajl_val obj, const char *key, const char *fallback);
int64_t lbc_jint(yajl_val obj, const char *key, int64_t fallback);
int lbc_jbool(yajl_val obj, const char *key); /* 1 true, 0 false or absent */
int lbc_jnull(yajl_val obj, const char *key); /* 1 when present and null */
yajl_val lbc_jget(yajl_val obj, const char *key);

#endif

/*
 * proto.h — the messages between lensboxd's unprivileged API process and its privileged core: every one of them.
 *
 * Used by both processes (the API process encodes requests and decodes replies; the core decodes requests and
 * encodes replies); the code holds no privilege and no state. The transport is an AF_UNIX SOCK_SEQPACKET socket
 * pair, so one sendmsg() is one message and a message is never split or merged.
 *
 * Layout of a message:
 *
 *     +-------------------------------+-----------------------------+------------------------------+
 *     | struct lbp_hdr (16 bytes)     | payload: the type's struct  | SCM_RIGHTS: the type's fds   |
 *     | magic, version, type, len,    | (fixed size; a reply adds   | (a sealed memfd with a run's |
 *     | nfds                          |  at most LBP_INLINE_MAX)    |  source or a file's bytes)   |
 *     +-------------------------------+-----------------------------+------------------------------+
 *
 * Invariants the decoder enforces before anything reads a field (lbp_recv): the datagram is exactly header + len
 * bytes; magic and version match; the type is one of enum lbp_type; len is exactly the size of the type's payload
 * (a reply: its struct plus at most LBP_INLINE_MAX); nfds is exactly the number the type carries and that many
 * descriptors arrived (no truncated control data, no extra descriptor); every string field is NUL-terminated
 * inside its array and passes its grammar (sandbox names, relative file paths without "..", image references);
 * every enum and number is in range. A memfd must be a sealed regular file (no grow, shrink or write) whose size is
 * the one the message states. Anything else is refused with -EBADMSG and every descriptor that arrived is closed:
 * the core never trusts the API process (a compromised one can send any bytes).
 */
#ifndef LB_PROTO_H
#define LB_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lb/language.h"

#define LBP_MAGIC	   0x3150424cu /* "LBP1" little-endian */
#define LBP_VERSION	   1
#define LBP_NAME_MAX	   63	/* a sandbox name: ^[a-z0-9][a-z0-9._-]{0,62}$ */
#define LBP_PATH_MAX	   4095 /* a file path inside /sandbox, relative (core/files.c's lbd_path_check) */
#define LBP_REF_MAX	   511	/* an image reference */
#define LBP_RUN_ID_MAX	   26
#define LBP_CTYPE_MAX	   47
#define LBP_LOG_FIELDS_MAX 191
#define LBP_INLINE_MAX	   (64u << 10) /* a reply body carried in the message; larger ones go in a memfd */
#define LBP_SOURCE_MAX	   (1u << 20)  /* a run's source */
#define LBP_FILE_MAX	   (25u << 20) /* one file in */
#define LBP_MAX_FDS	   1
#define LBP_MESSAGE_MAX	   (sizeof(struct lbp_hdr) + sizeof(struct lbp_reply) + LBP_INLINE_MAX)

enum lbp_type {
	LBP_HEALTH = 1,	    /* no payload */
	LBP_METRICS,	    /* no payload */
	LBP_SANDBOX_LIST,   /* no payload */
	LBP_SANDBOX_GET,    /* struct lbp_name */
	LBP_SANDBOX_PUT,    /* struct lbp_sandbox_put */
	LBP_SANDBOX_DELETE, /* struct lbp_name */
	LBP_SANDBOX_STOP,   /* struct lbp_name */
	LBP_RUN,	    /* struct lbp_run + fd: sealed memfd holding the source */
	LBP_RUNS_LIST,	    /* struct lbp_runs_list */
	LBP_RUN_GET,	    /* struct lbp_run_get */
	LBP_FILES_LIST,	    /* struct lbp_file */
	LBP_FILE_GET,	    /* struct lbp_file */
	LBP_FILE_PUT,	    /* struct lbp_file_put + fd: sealed memfd holding the bytes */
	LBP_IMAGES_LIST,    /* no payload */
	LBP_IMAGE_GET,	    /* struct lbp_image_ref */
	LBP_IMAGE_DELETE,   /* struct lbp_image_ref */
	LBP_IMAGE_PULL,	    /* struct lbp_image_pull */
	LBP_IMAGE_IMPORT,   /* struct lbp_image_import + fd: the client's connection (the core reads its peer) */
	LBP_REPLY,	    /* core -> API: struct lbp_reply + inline body, or + fd: the body (memfd or a file) */
	LBP_CHANNEL,	    /* API -> core, on the control socket only: no payload + fd: one request's channel */
	LBP_PROGRESS,	    /* core -> API, before the REPLY of a pull or import that asked: struct lbp_progress */
	LBP_TYPE_END
};

struct lbp_hdr {
	uint32_t magic;
	uint16_t version;
	uint16_t type; /* enum lbp_type */
	uint32_t len;  /* payload bytes after the header */
	uint32_t nfds; /* descriptors in SCM_RIGHTS */
};

struct lbp_name {
	char name[LBP_NAME_MAX + 1];
};

/* The sandbox spec of PUT and of a run's `sandbox`: which fields the client gave, and their values. The API process
 * parsed and range-checked them; the core checks them again against its configuration. */
enum {
	LBP_SPEC_IMAGE = 1u << 0,
	LBP_SPEC_NETWORK = 1u << 1,
	LBP_SPEC_CPU = 1u << 2,
	LBP_SPEC_MEMORY = 1u << 3,
	LBP_SPEC_DISK = 1u << 4,
	LBP_SPEC_IDLE = 1u << 5,
	LBP_SPEC_KEEP = 1u << 6,
	LBP_SPEC_ALL = (1u << 7) - 1
};
struct lbp_spec {
	uint32_t has;	  /* LBP_SPEC_* */
	uint32_t network; /* enum lb_tier */
	char image[LBP_REF_MAX + 1];
	uint32_t cpu_millicores;
	uint32_t idle_minutes;
	uint32_t keep_hours;
	uint32_t pad;
	uint64_t memory_bytes;
	uint64_t disk_bytes;
};

struct lbp_sandbox_put {
	char name[LBP_NAME_MAX + 1];
	struct lbp_spec spec;
};

struct lbp_run {
	char name[LBP_NAME_MAX + 1];
	uint32_t language;	  /* enum lb_language (lb/language.h) */
	uint32_t timeout_seconds; /* 1..600 */
	uint32_t output_limit;	  /* 1..1,000,000 characters */
	uint32_t has_spec;	  /* 0 or 1: spec applies (the body's `sandbox`) */
	uint64_t source_len;	  /* bytes in the memfd, <= LBP_SOURCE_MAX */
	struct lbp_spec spec;
};

struct lbp_runs_list {
	char sandbox[LBP_NAME_MAX + 1]; /* "" for every sandbox */
	uint32_t limit;			/* 1..1000 */
	uint32_t pad;
};

struct lbp_run_get {
	char id[LBP_RUN_ID_MAX + 1 + 5]; /* 26 characters [0-9a-z], NUL; padded to 32 */
};

struct lbp_file {
	char name[LBP_NAME_MAX + 1];
	char path[LBP_PATH_MAX + 1]; /* relative to /sandbox; "" is /sandbox itself (listings only) */
	uint32_t recursive;	     /* 0 or 1; listings only */
	uint32_t pad;
};

struct lbp_file_put {
	struct lbp_file file;
	uint64_t size; /* bytes in the memfd, <= LBP_FILE_MAX */
};

struct lbp_image_ref {
	char ref[LBP_REF_MAX + 1];
};

struct lbp_image_pull {
	char ref[LBP_REF_MAX + 1];
	uint32_t pin;	   /* 0 or 1 */
	uint32_t progress; /* 0 or 1: send LBP_PROGRESS messages before the reply */
};

/* An import names a path on the daemon's host, which the core reads as root: only a root client may ask. The API
 * process checked its peer; the core checks again on the connection itself (the fd), which must be a connection
 * accepted on lensboxd's own socket. */
#define LBP_HOST_PATH_MAX 1023
struct lbp_image_import {
	char path[LBP_HOST_PATH_MAX + 1]; /* absolute, no "." or ".." segment */
	char name[LBP_REF_MAX + 1];	  /* "" : the name the archive gives */
	uint32_t pin;			  /* 0 or 1 */
	uint32_t progress;		  /* 0 or 1: send LBP_PROGRESS messages before the reply */
};

/* One step of a pull or an import, sent while it runs when the request asked (progress = 1); the REPLY still ends
 * the request. A channel with progress is never reused: the API process closes it when the client goes, and the
 * core, seeing it closed, cancels the pull. */
enum lbp_phase {
	LBP_PHASE_RESOLVING = 0,
	LBP_PHASE_DOWNLOADING,
	LBP_PHASE_EXTRACTING,
	LBP_PHASE_UNPACKING,
	LBP_PHASE_END
};
#define LBP_LAYER_HEX 64
struct lbp_progress {
	uint32_t phase; /* enum lbp_phase */
	uint32_t pad;
	uint64_t done;		       /* bytes; <= total when total is not 0 */
	uint64_t total;		       /* bytes; 0 when unknown */
	char layer[LBP_LAYER_HEX + 8]; /* "" or 64 lowercase hex digits (the blob's sha256), NUL-padded */
};
/* "resolving", "downloading", "extracting", "unpacking"; NULL out of range. */
const char *lbp_phase_name(uint32_t phase);
/* Sends one progress message without blocking: -EAGAIN when the channel is full (the step is dropped; progress is
 * advisory), -EPIPE/-ECONNRESET when the API process closed the channel. */
int lbp_send_progress(int sock, const struct lbp_progress *p);

struct lbp_reply {
	uint32_t status;			 /* an HTTP status, 200..599 */
	uint32_t body_in_fd;			 /* 0: body_len bytes follow inline; 1: the body is the fd */
	uint64_t body_len;			 /* bytes of the body */
	char content_type[LBP_CTYPE_MAX + 1];	 /* e.g. "application/json" */
	char log_fields[LBP_LOG_FIELDS_MAX + 1]; /* "key=value ..." for the API's access log line (run id...) */
};

/* A decoded message: the header, a copy of the payload (an inline reply body right after the struct) and the
 * descriptors that came with it, owned by the message (lbp_msg_clear closes them). */
struct lbp_msg {
	struct lbp_hdr hdr;
	union {
		struct lbp_name name;
		struct lbp_sandbox_put put;
		struct lbp_run run;
		struct lbp_runs_list runs_list;
		struct lbp_run_get run_get;
		struct lbp_file file;
		struct lbp_file_put file_put;
		struct lbp_image_ref image;
		struct lbp_image_pull pull;
		struct lbp_image_import import;
		struct lbp_reply reply;
		struct lbp_progress progress;
		unsigned char raw[sizeof(struct lbp_reply) + LBP_INLINE_MAX];
	} u;
	int fds[LBP_MAX_FDS];
	size_t nfds;
};

/* The payload size a request type carries (a reply: the struct without its inline body), or -1 for no such type. */
long lbp_payload_size(uint16_t type);
/* How many descriptors a type carries (a reply: 0 or 1, depending on body_in_fd), or -1 for no such type. */
int lbp_type_fds(uint16_t type);
const char *lbp_type_name(uint16_t type);

/* Sends one message: header, payload (len bytes) and fds. -errno on failure (-EMSGSIZE when too large). */
int lbp_send(int sock, uint16_t type, const void *payload, size_t len, const int *fds, size_t nfds);
/* Sends a reply: status, content type, log fields ("" for none) and body, inline when it fits LBP_INLINE_MAX, else
 * in a sealed memfd; or, when fd >= 0, the body is that regular file of len bytes (sent, not closed). */
int lbp_send_reply(int sock, unsigned status, const char *content_type, const char *log_fields, const void *body,
		   size_t len, int fd);

/* Receives and fully validates one message (the invariants above). 0 on success (ret owns its fds), -ENODATA at
 * the end of the stream, -EBADMSG for anything malformed, -EMFILE when the kernel could not give this process the
 * message's descriptors (its RLIMIT_NOFILE reached; the message is lost). Nothing leaks: every received fd is
 * closed on failure. */
int lbp_recv(int sock, struct lbp_msg *ret);
/* Validates a received datagram already in memory (lbp_recv's second half; the fuzz target's entry). fds are taken
 * over: closed on failure, moved into ret on success. */
int lbp_decode(const void *buf, size_t len, const int *fds, size_t nfds, struct lbp_msg *ret);
void lbp_msg_clear(struct lbp_msg *m);

/* Grammar checks the decoder applies (exported for the API side and tests). */
bool lbp_name_valid(const char *s);
bool lbp_path_valid(const char *s, bool allow_empty);
bool lbp_ref_valid(const char *s);
bool lbp_host_path_valid(const char *s);

/* A sealed memfd holding len bytes (the encoder side); -errno on failure. */
int lbp_memfd(const char *what, const void *bytes, size_t len);

#endif

/*
 * common.h — what lensboxd's two processes share: the configuration (config.h), an operation's outcome
 * (struct lbd_fail), the two clocks, what a sandbox spec request means, and an answer being built (struct lbd_res)
 * with the JSON generation helpers.
 *
 * lensboxd is two processes (docs/architecture.md): the core (root; core/) and the API process (an unprivileged
 * uid, no capabilities, confined; api/). They speak only the messages of proto/proto.h. Nothing in this header
 * holds privilege or state; the parsed configuration is copied into the API process once, at its start.
 */
#ifndef LBD_COMMON_H
#define LBD_COMMON_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <yajl/yajl_gen.h>

#include "config.h"
#include "lb/error.h"
#include "lb/store.h"

struct lbp_spec;

#define LBD_JSON_BODY_MAX  (8u << 20)  /* a run's JSON: 1 MiB of source, escaped up to 6x, plus room */
#define LBD_FILE_MAX	   (25u << 20) /* one file in or out */
#define LBD_SOURCE_MAX	   (1u << 20)  /* a run's source */
#define LBD_SMALL_BODY_MAX (64u << 10)

/* The documented ranges of a sandbox spec (docs/api.md), checked by the API process and again by the core. */
#define LBD_CPU_MIN	     100u
#define LBD_CPU_MAX	     64000u
#define LBD_MEMORY_MIN	     (64ull << 20)
#define LBD_MEMORY_MAX	     (64ull << 30)
#define LBD_DISK_MIN	     (16ull << 20)
#define LBD_DISK_MAX	     (1ull << 40)
#define LBD_IDLE_MINUTES_MAX 1440u
#define LBD_KEEP_HOURS_MAX   720u

/* ---- clock.c ---- */

/* Milliseconds since the epoch (CLOCK_REALTIME), as the store keeps times. */
int64_t lbd_now_ms(void);
/* Monotonic milliseconds, for durations. */
uint64_t lbd_mono_ms(void);
/* Waits on cv (mu held, as pthread_cond_timedwait) for at most ms; a signal or a spurious wake ends it sooner. */
void lbd_cond_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, uint64_t ms);

/* ---- fail.c ---- */

/* The outcome of an operation, for the HTTP layer: an HTTP status, an error code and a sentence. */
struct lbd_fail {
	int status; /* 0: success */
	char code[48];
	char message[LB_ERROR_MSG_MAX + 64];
};
void lbd_fail_set(struct lbd_fail *f, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The store failed doing `what` ("Recording the sandbox"): r and msg as the store returned them (store.h). A full
 * state directory is 503 host_unavailable and a database held by another process 503 busy, both with the cause and
 * both passing when it does; anything else 500 internal. */
void lbd_fail_store(struct lbd_fail *f, int r, const char *what, const char *msg);

/* ---- wire.c ---- */

/* A request to ensure a sandbox: which fields the client gave (others come from config defaults). */
struct lbd_spec_request {
	bool has_image, has_network, has_cpu, has_memory, has_disk, has_idle, has_keep;
	struct lb_store_spec spec;
};

/* A spec request with every field from the config defaults, none marked given. */
void lbd_spec_defaults(const struct lbd_config *cfg, struct lbd_spec_request *req);
/* The given fields of req in their wire form (the API process's side). */
void lbd_spec_to_wire(const struct lbd_spec_request *req, struct lbp_spec *ret);
/* The core's side: the config defaults with the wire's given fields over them, every value checked again against
 * the documented ranges (the API process is not trusted). 422 out_of_range / invalid_value in f on failure. */
int lbd_spec_from_wire(const struct lbd_config *cfg, const struct lbp_spec *w, struct lbd_spec_request *ret,
		       struct lbd_fail *f);
/* true when ref is a syntactically acceptable image reference. */
bool lbd_image_ref_valid(const char *ref);
/* Checks a path relative to /sandbox: not empty (unless allow_empty), no leading '/', no "", "." or ".."
 * component, at most 4095 bytes and 255 a component, not under the reserved .lensbox/. 400 invalid_path. */
int lbd_path_check(const char *path, bool allow_empty, struct lbd_fail *f);

/* ---- res.c ---- */

struct lbd_res {
	int status;
	char *body; /* malloc'ed */
	size_t len;
	const char *content_type;
	int fd; /* >= 0: send this regular file instead of body (whoever sends it closes it) */
	uint64_t fd_size;
	char log_fields[192]; /* extra "key=value" pairs for the access log line (run id...) */
	/* The request's channel, when has_channel. In the core: where a pull's or import's progress goes before the
	 * reply. In the API process: the channel of an answer streamed as it comes (http.c reads it, then closes it).
	 */
	bool has_channel;
	int channel;
};

/* The seconds a client should wait before trying again after an error answer (the Retry-After header), or 0 when
 * trying again cannot help until someone acts: 1 for `429 capacity`, `503 busy` and `503 core_unavailable` (they
 * pass by themselves in moments: a run ends, memory frees, the API process is replaced), 5 for
 * `503 host_unavailable` (a host resource such as loop devices or the network may come back), 0 otherwise. */
unsigned lbd_retry_after(int status, const char *code);

/* The error envelope {"error": {"code", "message"}} with status. */
void lbd_res_error(struct lbd_res *res, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void lbd_res_fail(struct lbd_res *res, const struct lbd_fail *f);

/* Generation: thin wrappers over yajl_gen so handlers read as the JSON they produce. */
yajl_gen lbd_gen_new(void);
void lbd_gen_key(yajl_gen g, const char *key);
void lbd_gen_str(yajl_gen g, const char *key, const char *value); /* value NULL -> null */
void lbd_gen_strn(yajl_gen g, const char *key, const char *value, size_t len);
void lbd_gen_int(yajl_gen g, const char *key, long long value);
void lbd_gen_uint(yajl_gen g, const char *key, uint64_t value);
void lbd_gen_double(yajl_gen g, const char *key, double value);
void lbd_gen_bool(yajl_gen g, const char *key, bool value);
void lbd_gen_null(yajl_gen g, const char *key);
void lbd_gen_time(yajl_gen g, const char *key, int64_t ms); /* RFC 3339 UTC, or null when ms <= 0 */
/* Finishes g into res (status, application/json) and frees g. */
void lbd_gen_finish(yajl_gen g, struct lbd_res *res, int status);

#endif

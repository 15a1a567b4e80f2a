/*
 * api.h — what the HTTP layer hands a resource handler and what a handler hands back, plus the JSON helpers.
 *
 * Runs in lensboxd (root) on a connection's thread. A request reaches a handler only after http.c checked the peer
 * and bounded the body, and routes.c matched the route, percent-decoded the path and validated the sandbox name.
 * Handlers never touch libmicrohttpd's response objects: they fill a struct lbd_res and http.c sends it.
 */
#ifndef LBD_API_H
#define LBD_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <yajl/yajl_gen.h>
#include <yajl/yajl_tree.h>

#include "lensboxd.h"

#define LBD_JSON_BODY_MAX  (8u << 20)  /* a run's JSON: 1 MiB of source, escaped up to 6x, plus room */
#define LBD_FILE_MAX	   (25u << 20) /* one file in or out */
#define LBD_SOURCE_MAX	   (1u << 20)  /* a run's source */
#define LBD_SMALL_BODY_MAX (64u << 10)

struct MHD_Connection;

struct lbd_req {
	struct lbd *d;
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

struct lbd_res {
	int status;
	char *body; /* malloc'ed */
	size_t len;
	const char *content_type;
	int fd; /* >= 0: send this regular file instead of body (http.c closes it) */
	uint64_t fd_size;
	char log_fields[192]; /* extra "key=value" pairs for the access log line (run id...) */
};

/* The error envelope {"error": {"code", "message"}} with status. */
void lbd_res_error(struct lbd_res *res, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void lbd_res_fail(struct lbd_res *res, const struct lbd_fail *f);

/* ---- request.c ---- */

/* A query-string argument, percent-decoded (malloc'ed, caller frees), or NULL when absent. *ret_bad set when the
 * value could not be decoded (a NUL or a bad escape). */
char *lbd_req_query(struct lbd_req *req, const char *key, bool *ret_bad);

/* The raw (still percent-encoded) query-string value of key, owned by libmicrohttpd. */
const char *lbd_http_query_raw(struct lbd_req *req, const char *key);

/* Percent-decodes s[0..len) into a new string; NULL when it holds %00, a raw NUL or a bad escape. */
char *lbd_percent_decode(const char *s, size_t len);

/* ---- json.c ---- */

enum lbd_jtype { LBD_J_STRING, LBD_J_INT, LBD_J_BOOL, LBD_J_OBJECT, LBD_J_SCALAR /* number or string */ };
struct lbd_jfield {
	const char *name;
	enum lbd_jtype type;
};

/* The keys of POST .../runs (api_runs.c; also read by the fuzz target). */
#define LBD_RUN_FIELDS 5
extern const struct lbd_jfield lbd_run_fields[LBD_RUN_FIELDS];

/* Parses body as one JSON object whose keys are all in fields (each at most once) with the declared types.
 * An empty body is {}. On failure fills f (400 invalid_json / unknown_field / wrong_type; 422 invalid_value for a
 * \u0000 escape) and returns -EINVAL.
 * On success *ret is the tree (yajl_tree_free). */
int lbd_json_object(const char *body, size_t len, const struct lbd_jfield *fields, size_t n, yajl_val *ret,
		    struct lbd_fail *f);
/* Validates an already-parsed object node the same way (nested objects). */
int lbd_json_check(yajl_val obj, const char *where, const struct lbd_jfield *fields, size_t n, struct lbd_fail *f);
yajl_val lbd_json_get(yajl_val obj, const char *key);
/* The scalar's text as written (a string's value or a number's digits). */
const char *lbd_json_text(yajl_val v);

/* Reads the sandbox spec object {image, network, cpu, memory, disk, idle_minutes, keep_hours} into req,
 * validating ranges (422 out_of_range / invalid_value). */
int lbd_json_spec(const struct lbd *d, yajl_val obj, struct lbd_spec_request *req, struct lbd_fail *f);

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

/* Writes a sandbox row as the API's sandbox object; disk_used < 0: unknown (null). */
void lbd_gen_sandbox_with_disk(const struct lbd *d, yajl_gen g, const struct lb_store_sandbox *sb, int64_t disk_used);
void lbd_gen_run(yajl_gen g, const struct lb_store_run *run);

/* ---- handlers (api_*.c) ---- */
void lbd_api_health(struct lbd_req *req, struct lbd_res *res);
void lbd_api_metrics(struct lbd_req *req, struct lbd_res *res);
void lbd_api_sandbox_list(struct lbd_req *req, struct lbd_res *res);
void lbd_api_sandbox_get(struct lbd_req *req, struct lbd_res *res);
void lbd_api_sandbox_put(struct lbd_req *req, struct lbd_res *res);
void lbd_api_sandbox_delete(struct lbd_req *req, struct lbd_res *res);
void lbd_api_sandbox_stop(struct lbd_req *req, struct lbd_res *res);
void lbd_api_run_post(struct lbd_req *req, struct lbd_res *res);
void lbd_api_runs_list(struct lbd_req *req, struct lbd_res *res);
void lbd_api_run_get(struct lbd_req *req, struct lbd_res *res);
void lbd_api_files_list(struct lbd_req *req, struct lbd_res *res);
void lbd_api_file_get(struct lbd_req *req, struct lbd_res *res);
void lbd_api_file_put(struct lbd_req *req, struct lbd_res *res);
void lbd_api_images_list(struct lbd_req *req, struct lbd_res *res);
void lbd_api_image_get(struct lbd_req *req, struct lbd_res *res);    /* ref in req->file_path */
void lbd_api_image_delete(struct lbd_req *req, struct lbd_res *res); /* ref in req->file_path */
void lbd_api_image_pull(struct lbd_req *req, struct lbd_res *res);
void lbd_api_image_import(struct lbd_req *req, struct lbd_res *res);

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

/*
 * ask_runs.c — POST /v1/sandboxes/{name}/runs, GET /v1/runs and GET /v1/runs/{id}: the request checked and sent to
 * the core as LBP_RUN, LBP_RUNS_LIST or LBP_RUN_GET (core/do_runs.c answers).
 *
 * Runs in the API process (api_user, confined) on connection threads. A run's body is parsed and checked here
 * (fields, types, ranges, the sandbox spec); its source goes to the core in a sealed memfd, never re-parsed there.
 * The connection's thread waits for the core's answer for as long as the run takes.
 */
#include <errno.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api.h"
#include "lb/cleanup.h"
#include "lb/language.h"

const struct lbd_jfield lbd_run_fields[LBD_RUN_FIELDS] = {
	{ "language", LBD_J_STRING },  { "source", LBD_J_STRING },  { "timeout_seconds", LBD_J_INT },
	{ "output_limit", LBD_J_INT }, { "sandbox", LBD_J_OBJECT },
};

/* The body's fields, their values and ranges, and the sandbox spec into w; *ret_source points into root. On a
 * refusal fills res and returns -1. */
static int read_run(const struct lbd_config *cfg, yajl_val root, struct lbp_run *w, const char **ret_source,
		    struct lbd_res *res)
{
	yajl_val vlang = lbd_json_get(root, "language"), vsrc = lbd_json_get(root, "source");
	yajl_val vto = lbd_json_get(root, "timeout_seconds"), vlim = lbd_json_get(root, "output_limit");
	if (!vlang || !vsrc) {
		lbd_res_error(res, 400, "missing_field", "A run needs `language` and `source`.");
		return -1;
	}
	const char *lang = YAJL_GET_STRING(vlang), *source = YAJL_GET_STRING(vsrc);
	if (!lang || !source) { /* parse.c checked the types; this keeps the reader from having to know */
		lbd_res_error(res, 400, "wrong_type", "`language` and `source` must be strings.");
		return -1;
	}
	enum lb_language l;
	if (lb_language_parse(lang, &l) == 0)
		w->language = l;
	else {
		lbd_res_error(res, 422, "invalid_value", "`language` must be `python` or `bash`.");
		return -1;
	}
	*ret_source = source;
	w->source_len = strlen(*ret_source);
	if (w->source_len > LBD_SOURCE_MAX) {
		lbd_res_error(res, 413, "source_too_large",
			      "The source is %llu bytes; at most 1 MiB (%u bytes) can run.",
			      (unsigned long long)w->source_len, LBD_SOURCE_MAX);
		return -1;
	}
	long long timeout = cfg->default_timeout_seconds, limit = cfg->default_output_limit;
	if (vto) {
		timeout = YAJL_GET_INTEGER(vto);
		if (timeout < 1 || timeout > 600) {
			lbd_res_error(res, 422, "out_of_range", "`timeout_seconds` must be between 1 and 600.");
			return -1;
		}
	}
	if (vlim) {
		limit = YAJL_GET_INTEGER(vlim);
		if (limit < 1 || limit > 1000000) {
			lbd_res_error(res, 422, "out_of_range", "`output_limit` must be between 1 and 1000000.");
			return -1;
		}
	}
	w->timeout_seconds = (uint32_t)timeout;
	w->output_limit = (uint32_t)limit;
	struct lbd_fail f = { 0 };
	struct lbd_spec_request spec;
	yajl_val vspec = lbd_json_get(root, "sandbox");
	if (lbd_json_spec(cfg, vspec, &spec, &f) < 0) {
		lbd_res_fail(res, &f);
		return -1;
	}
	/* No spec: an existing sandbox is used as it is; a new one gets the defaults (the core's). */
	w->has_spec = vspec != NULL;
	lbd_spec_to_wire(&spec, &w->spec);
	return 0;
}

void lbd_ask_run(struct lbd_req *req, struct lbd_res *res)
{
	struct lbd_fail f = { 0 };
	yajl_val root = NULL;
	if (lbd_json_object(req->body, req->body_len, lbd_run_fields, LBD_RUN_FIELDS, &root, &f) < 0) {
		lbd_res_fail(res, &f);
		return;
	}
	struct lbp_run w = { 0 };
	const char *source = NULL;
	snprintf(w.name, sizeof(w.name), "%s", req->name);
	if (read_run(&req->a->cfg, root, &w, &source, res) == 0) {
		_cleanup_close_ int fd = lbp_memfd("lensbox-source", source, (size_t)w.source_len);
		if (fd < 0 && !lbd_res_fds_short(res, fd, false))
			lbd_res_error(res, 500, "internal", "Passing the source on failed: %s.", strerror(-fd));
		else if (fd >= 0) {
			/* A client that hangs up stops its run (docs/api.md). */
			const union MHD_ConnectionInfo *ci =
			    MHD_get_connection_info(req->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
			priv_call_watched(req, LBP_RUN, &w, sizeof(w), fd, ci ? ci->connect_fd : -1, res);
		}
	}
	yajl_tree_free(root);
}

void lbd_ask_runs_list(struct lbd_req *req, struct lbd_res *res)
{
	bool bad = false;
	_cleanup_free_ char *sandbox = lbd_req_query(req, "sandbox", &bad);
	_cleanup_free_ char *slimit = NULL;
	if (!bad)
		slimit = lbd_req_query(req, "limit", &bad);
	if (bad) {
		lbd_res_error(res, 400, "invalid_query", "The query string holds a NUL byte or a malformed %%-escape.");
		return;
	}
	if (sandbox && !lb_store_name_valid(sandbox)) {
		lbd_res_error(res, 400, "invalid_name",
			      "A sandbox name is 1 to 63 characters: lower-case letters, digits, `.`, `_` and `-`, "
			      "starting with a letter or a digit.");
		return;
	}
	unsigned long limit = 100;
	if (slimit) {
		char *end;
		errno = 0;
		limit = strtoul(slimit, &end, 10);
		if (errno || *end || !*slimit || slimit[0] == '-' || limit < 1 || limit > 1000) {
			lbd_res_error(res, 422, "out_of_range", "`limit` must be an integer between 1 and 1000.");
			return;
		}
	}
	struct lbp_runs_list w = { .limit = (uint32_t)limit };
	snprintf(w.sandbox, sizeof(w.sandbox), "%s", sandbox ? sandbox : "");
	priv_call(req, LBP_RUNS_LIST, &w, sizeof(w), -1, res);
}

/* A run id: 26 characters of [0-9a-z] (the store's ULID-like ids). */
static bool run_id_ok(const char *id)
{
	if (strlen(id) != LBP_RUN_ID_MAX)
		return false;
	for (const char *c = id; *c; c++)
		if (!((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'z')))
			return false;
	return true;
}

void lbd_ask_run_get(struct lbd_req *req, struct lbd_res *res)
{
	_cleanup_free_ char *id = lbd_percent_decode(req->name, strlen(req->name));
	req->name[0] = '\0'; /* not a sandbox name: keep it out of the log's sandbox= field */
	if (!id || !run_id_ok(id)) {
		lbd_res_error(res, 404, "run_not_found", "There is no run with that id.");
		return;
	}
	struct lbp_run_get w = { 0 };
	memcpy(w.id, id, LBP_RUN_ID_MAX);
	priv_call(req, LBP_RUN_GET, &w, sizeof(w), -1, res);
}

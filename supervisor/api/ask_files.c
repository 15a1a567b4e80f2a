/*
 * ask_files.c — PUT/GET /v1/sandboxes/{name}/files/{path} and GET /v1/sandboxes/{name}/files?path=&recursive=: the
 * request checked and sent to the core as LBP_FILE_PUT, LBP_FILE_GET or LBP_FILES_LIST (core/do_files.c answers).
 *
 * Runs in the API process (api_user, confined) on connection threads. Paths are checked here with the rule both
 * processes share (wire.c's lbd_path_check) so a refusal names its reason; the core checks again and
 * resolves the path beneath the sandbox's storage itself. An upload's bytes go to the core in a sealed memfd; a
 * download comes back as a file descriptor the core opened, which libmicrohttpd sends.
 */
#include <stdio.h>
#include <string.h>

#include "api.h"
#include "lb/cleanup.h"

/* name and path into w; on a refusal fills res and returns -1. */
static int file_request(struct lbd_req *req, const char *path, bool listing, struct lbp_file *w, struct lbd_res *res)
{
	struct lbd_fail f = { 0 };
	if (lbd_path_check(path, listing, &f) < 0) {
		lbd_res_fail(res, &f);
		return -1;
	}
	memset(w, 0, sizeof(*w));
	snprintf(w->name, sizeof(w->name), "%s", req->name);
	snprintf(w->path, sizeof(w->path), "%s", path);
	return 0;
}

void lbd_ask_file_put(struct lbd_req *req, struct lbd_res *res)
{
	struct lbp_file_put w = { .size = req->body_len };
	if (file_request(req, req->file_path, false, &w.file, res) < 0)
		return;
	_cleanup_close_ int fd = lbp_memfd("lensbox-file", req->body ? req->body : "", req->body_len);
	if (fd < 0) {
		if (!lbd_res_fds_short(res, fd, false))
			lbd_res_error(res, 500, "internal", "Passing the file on failed: %s.", strerror(-fd));
		return;
	}
	priv_call(req, LBP_FILE_PUT, &w, sizeof(w), fd, res);
}

void lbd_ask_file_get(struct lbd_req *req, struct lbd_res *res)
{
	struct lbp_file w;
	if (file_request(req, req->file_path, false, &w, res) == 0)
		priv_call(req, LBP_FILE_GET, &w, sizeof(w), -1, res);
}

void lbd_ask_files_list(struct lbd_req *req, struct lbd_res *res)
{
	bool bad = false;
	_cleanup_free_ char *path = lbd_req_query(req, "path", &bad);
	_cleanup_free_ char *rec = NULL;
	if (!bad)
		rec = lbd_req_query(req, "recursive", &bad);
	if (bad) {
		lbd_res_error(res, 400, "invalid_query", "The query string holds a NUL byte or a malformed %%-escape.");
		return;
	}
	bool recursive = false;
	if (rec) {
		if (strcmp(rec, "true") == 0 || strcmp(rec, "1") == 0)
			recursive = true;
		else if (strcmp(rec, "false") != 0 && strcmp(rec, "0") != 0) {
			lbd_res_error(res, 422, "invalid_value", "`recursive` must be true or false.");
			return;
		}
	}
	const char *dir = path ? path : "";
	/* "." and "/" name the top, as people write them. */
	if (strcmp(dir, ".") == 0 || strcmp(dir, "/") == 0)
		dir = "";
	struct lbp_file w;
	if (file_request(req, dir, true, &w, res) < 0)
		return;
	w.recursive = recursive;
	priv_call(req, LBP_FILES_LIST, &w, sizeof(w), -1, res);
}

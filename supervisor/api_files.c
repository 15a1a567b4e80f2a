/*
 * api_files.c — PUT/GET /v1/sandboxes/{name}/files/{path} and GET /v1/sandboxes/{name}/files?path=&recursive=.
 *
 * Runs in lensboxd (root) on connection threads. File requests never take the sandbox's turn, so a run in
 * progress does not delay them; they pin the sandbox running (lbd_storage_pin) and do every lookup through
 * files.c's link-refusing openat2. A stopped sandbox is started for the request (its storage is only reachable
 * through its mount), which counts as a use for the idle and keep timers.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api.h"
#include "files.h"
#include "lb/cleanup.h"

void lbd_api_file_put(struct lbd_req *req, struct lbd_res *res)
{
	struct lbd_fail f = { 0 };
	if (lbd_path_check(req->file_path, false, &f) < 0) {
		lbd_res_fail(res, &f);
		return;
	}
	int root;
	uid_t uid;
	gid_t gid;
	if (lbd_storage_pin(req->d, req->name, true, &root, &uid, &gid, &f) < 0) {
		lbd_res_fail(res, &f);
		return;
	}
	int r = lbd_file_write(root, req->file_path, req->body ? req->body : "", req->body_len, 0644, uid, gid, &f);
	close(root);
	lbd_storage_unpin(req->d, req->name);
	if (r < 0) {
		lbd_res_fail(res, &f);
		return;
	}
	yajl_gen g = lbd_gen_new();
	yajl_gen_map_open(g);
	lbd_gen_str(g, "path", req->file_path);
	lbd_gen_uint(g, "size", req->body_len);
	yajl_gen_map_close(g);
	lbd_gen_finish(g, res, 201);
}

void lbd_api_file_get(struct lbd_req *req, struct lbd_res *res)
{
	struct lbd_fail f = { 0 };
	if (lbd_path_check(req->file_path, false, &f) < 0) {
		lbd_res_fail(res, &f);
		return;
	}
	int root;
	uid_t uid;
	gid_t gid;
	if (lbd_storage_pin(req->d, req->name, false, &root, &uid, &gid, &f) < 0) {
		lbd_res_fail(res, &f);
		return;
	}
	int fd = -1;
	uint64_t size = 0;
	int r = lbd_file_open_read(root, req->file_path, LBD_FILE_MAX, &fd, &size, &f);
	close(root);
	/* The open fd keeps the inode alive; the sandbox may stop while libmicrohttpd sends it. */
	lbd_storage_unpin(req->d, req->name);
	if (r < 0) {
		lbd_res_fail(res, &f);
		return;
	}
	res->status = 200;
	res->fd = fd;
	res->fd_size = size;
	res->content_type = "application/octet-stream";
}

void lbd_api_files_list(struct lbd_req *req, struct lbd_res *res)
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
	struct lbd_fail f = { 0 };
	if (lbd_path_check(dir, true, &f) < 0) {
		lbd_res_fail(res, &f);
		return;
	}
	int root;
	uid_t uid;
	gid_t gid;
	if (lbd_storage_pin(req->d, req->name, false, &root, &uid, &gid, &f) < 0) {
		lbd_res_fail(res, &f);
		return;
	}
	yajl_gen g = lbd_gen_new();
	int r = lbd_files_list(root, dir, recursive, g, &f);
	close(root);
	lbd_storage_unpin(req->d, req->name);
	if (r < 0) {
		yajl_gen_free(g);
		lbd_res_fail(res, &f);
		return;
	}
	lbd_gen_finish(g, res, 200);
}

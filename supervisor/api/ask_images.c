/*
 * ask_images.c — GET /v1/images, GET and DELETE /v1/images/{ref}, POST /v1/images/pull and POST /v1/images/import:
 * the request checked and sent to the core as LBP_IMAGE* (core/do_images.c answers).
 *
 * Runs in the API process (api_user, confined) on connection threads. The reference in the path was percent-decoded
 * by routes.c and is validated here (lbd_image_ref_valid) and again by the core. An import names a path on this host
 * that the core reads as root: only a root client may ask. This process refuses any other peer itself, and passes
 * the client's connection with the message so the core can check the peer on its own.
 */
#include <microhttpd.h>
#include <stdio.h>
#include <string.h>

#include "api.h"
#include "lb/cleanup.h"

/* The client asked for progress as it comes: Accept names application/x-ndjson. */
static bool wants_progress(struct lbd_req *req)
{
	const char *accept = MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_ACCEPT);
	return accept && strstr(accept, "application/x-ndjson");
}

static bool ref_checked(const char *ref, struct lbd_res *res)
{
	if (ref && lbd_image_ref_valid(ref))
		return true;
	lbd_res_error(res, 422, "invalid_value",
		      "`%.300s` is not an image reference: a name like python:3.12-slim or "
		      "registry:5000/ns/name@sha256:..., or an image digest sha256:...",
		      ref ? ref : "");
	return false;
}

void lbd_ask_images_list(struct lbd_req *req, struct lbd_res *res)
{
	priv_call(req, LBP_IMAGES_LIST, NULL, 0, -1, res);
}

void lbd_ask_image_get(struct lbd_req *req, struct lbd_res *res)
{
	if (!ref_checked(req->file_path, res))
		return;
	struct lbp_image_ref w = { 0 };
	snprintf(w.ref, sizeof(w.ref), "%s", req->file_path);
	priv_call(req, LBP_IMAGE_GET, &w, sizeof(w), -1, res);
}

void lbd_ask_image_delete(struct lbd_req *req, struct lbd_res *res)
{
	if (req->body_len) {
		lbd_res_error(res, 400, "unexpected_body", "Removing an image takes no request body.");
		return;
	}
	if (!ref_checked(req->file_path, res))
		return;
	struct lbp_image_ref w = { 0 };
	snprintf(w.ref, sizeof(w.ref), "%s", req->file_path);
	priv_call(req, LBP_IMAGE_DELETE, &w, sizeof(w), -1, res);
}

void lbd_ask_image_pull(struct lbd_req *req, struct lbd_res *res)
{
	static const struct lbd_jfield fields[] = { { "ref", LBD_J_STRING }, { "pin", LBD_J_BOOL } };
	struct lbd_fail f = { 0 };
	yajl_val root = NULL;
	if (lbd_json_object(req->body, req->body_len, fields, LB_ARRAY_SIZE(fields), &root, &f) < 0) {
		lbd_res_fail(res, &f);
		return;
	}
	yajl_val vref = lbd_json_get(root, "ref"), vpin = lbd_json_get(root, "pin");
	const char *ref = vref ? YAJL_GET_STRING(vref) : NULL;
	if (!vref)
		lbd_res_error(res, 400, "missing_field", "A pull needs `ref`, the image reference to pull.");
	else if (!ref_checked(ref, res))
		;
	else if (strncmp(ref, "sha256:", 7) == 0)
		lbd_res_error(res, 422, "invalid_value",
			      "A pull needs a name (registry/name:tag or @sha256:...), not a bare digest.");
	else {
		struct lbp_image_pull w = { .pin = vpin && YAJL_IS_TRUE(vpin), .progress = wants_progress(req) };
		snprintf(w.ref, sizeof(w.ref), "%s", ref);
		if (w.progress)
			priv_stream(req, LBP_IMAGE_PULL, &w, sizeof(w), -1, res);
		else
			priv_call(req, LBP_IMAGE_PULL, &w, sizeof(w), -1, res);
	}
	yajl_tree_free(root);
}

/* The import's fields into w; on a refusal fills res and returns -1. */
static int read_import(yajl_val root, struct lbp_image_import *w, struct lbd_res *res)
{
	yajl_val vpath = lbd_json_get(root, "path"), vname = lbd_json_get(root, "name");
	yajl_val vpin = lbd_json_get(root, "pin");
	if (!vpath) {
		lbd_res_error(res, 400, "missing_field",
			      "An import needs `path`: the absolute path of an OCI layout (directory or tar) or a "
			      "`docker save` archive on the daemon's host.");
		return -1;
	}
	const char *path = YAJL_GET_STRING(vpath);
	const char *name = vname ? YAJL_GET_STRING(vname) : NULL;
	if (!lbp_host_path_valid(path)) {
		lbd_res_error(res, 422, "invalid_path",
			      "`path` must be an absolute path of at most %d bytes with no `.` or `..` segment.",
			      LBP_HOST_PATH_MAX);
		return -1;
	}
	if (name && (!lbd_image_ref_valid(name) || strncmp(name, "sha256:", 7) == 0 || strchr(name, '@'))) {
		lbd_res_error(res, 422, "invalid_value", "`name` must be an image name like python:3.12-slim.");
		return -1;
	}
	snprintf(w->path, sizeof(w->path), "%s", path);
	snprintf(w->name, sizeof(w->name), "%s", name ? name : "");
	w->pin = vpin && YAJL_IS_TRUE(vpin);
	return 0;
}

void lbd_ask_image_import(struct lbd_req *req, struct lbd_res *res)
{
	static const struct lbd_jfield fields[] = { { "path", LBD_J_STRING },
						    { "name", LBD_J_STRING },
						    { "pin", LBD_J_BOOL } };
	/* The core reads the path as root: only a root peer may name one (others could read what they cannot). */
	if (req->peer_uid != 0) {
		lbd_res_error(
		    res, 403, "forbidden",
		    "Importing reads a file on this host as root: only root may ask (this peer is uid %u); use "
		    "`lensbox-image import` as root, or push the image to a registry and pull it.",
		    (unsigned)req->peer_uid);
		return;
	}
	struct lbd_fail f = { 0 };
	yajl_val root = NULL;
	if (lbd_json_object(req->body, req->body_len, fields, LB_ARRAY_SIZE(fields), &root, &f) < 0) {
		lbd_res_fail(res, &f);
		return;
	}
	struct lbp_image_import w = { 0 };
	if (read_import(root, &w, res) == 0) {
		const union MHD_ConnectionInfo *ci =
		    MHD_get_connection_info(req->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
		if (!ci)
			lbd_res_error(res, 500, "internal", "The client's connection could not be passed on.");
		else if ((w.progress = wants_progress(req)))
			priv_stream(req, LBP_IMAGE_IMPORT, &w, sizeof(w), ci->connect_fd, res);
		else
			priv_call(req, LBP_IMAGE_IMPORT, &w, sizeof(w), ci->connect_fd, res);
	}
	yajl_tree_free(root);
}

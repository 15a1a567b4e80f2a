/*
 * api_images.c — GET /v1/images, GET and DELETE /v1/images/{ref}, POST /v1/images/pull and POST /v1/images/import:
 * the image store (images/, through images.c) as the API shows it.
 *
 * Runs in lensboxd (root) on connection threads. A pull or an import blocks its own connection's thread for as long
 * as it takes (minutes), never images_mu (images.c), so health, listings and runs of other sandboxes go on. The
 * reference in the path was percent-decoded by routes.c and is validated here (lbd_image_ref_valid) before the
 * store sees it. Import names a path on this host that lensboxd (root) then reads: only a root peer may ask, the
 * path must be absolute with no `..` segment, and it must be a regular file or a directory (never a FIFO, which
 * would block the thread, nor a device). The archive's contents are hostile and are the library's to check.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "api.h"
#include "lb/cleanup.h"
#include "lb/images.h"
#include "lb/units.h"

#define IMPORT_PATH_MAX 1024

static void gen_strings(yajl_gen g, const char *key, char *const *list, size_t n)
{
	lbd_gen_key(g, key);
	yajl_gen_array_open(g);
	for (size_t i = 0; i < n; i++)
		yajl_gen_string(g, (const unsigned char *)list[i], strlen(list[i]));
	yajl_gen_array_close(g);
}

/* The API's image object. in_use: sandboxes made (or to be made) from it. full: also env, working_dir, rootfs. */
static void gen_image(yajl_gen g, const struct lb_image_info *i, size_t in_use, bool full)
{
	char size[32];
	yajl_gen_map_open(g);
	lbd_gen_str(g, "name", i->n_names ? i->names[0] : NULL);
	gen_strings(g, "names", i->names, i->n_names);
	lbd_gen_str(g, "digest", i->config_digest);
	lbd_gen_str(g, "manifest_digest", i->manifest_digest[0] ? i->manifest_digest : NULL);
	lbd_gen_uint(g, "size_bytes", i->size_bytes);
	lbd_gen_str(g, "size", lb_format_size(i->size_bytes, size, sizeof(size)));
	lbd_gen_bool(g, "has_python3", i->has_python3);
	lbd_gen_bool(g, "has_bash", i->has_bash);
	lbd_gen_str(g, "warning", lb_image_info_warning(i));
	lbd_gen_uint(g, "in_use", in_use);
	lbd_gen_bool(g, "pinned", i->pinned);
	lbd_gen_str(g, "architecture", i->architecture);
	lbd_gen_str(g, "os", i->os);
	lbd_gen_time(g, "imported_at", i->imported_at * 1000);
	lbd_gen_time(g, "last_used", i->last_used * 1000);
	if (full) {
		lbd_gen_str(g, "variant", i->variant[0] ? i->variant : NULL);
		gen_strings(g, "env", i->env, i->n_env);
		lbd_gen_str(g, "working_dir", i->working_dir[0] ? i->working_dir : NULL);
		lbd_gen_str(g, "rootfs", i->rootfs);
		lbd_gen_uint(g, "entries", i->entries);
		lbd_gen_uint(g, "skipped_special", i->skipped_special);
		lbd_gen_uint(g, "stripped", i->stripped);
	}
	yajl_gen_map_close(g);
}

static bool store_missing(struct lbd *d, struct lbd_res *res)
{
	if (d->images)
		return false;
	lbd_res_error(res, 503, "image_unavailable", "The image store %s could not be opened; see lensboxd's log.",
		      d->cfg.images_dir);
	return true;
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

void lbd_api_images_list(struct lbd_req *req, struct lbd_res *res)
{
	struct lbd *d = req->d;
	if (store_missing(d, res))
		return;
	struct lb_image_info **list = NULL;
	size_t n = 0;
	struct lbd_image_usage u = { 0 };
	struct lb_error err = { 0 };
	pthread_mutex_lock(&d->images_mu);
	int r = lb_image_list(d->images, &list, &n, &err);
	if (r >= 0)
		r = lbd_image_usage_locked(d, &u, &err);
	pthread_mutex_unlock(&d->images_mu);
	if (r < 0) {
		lb_image_list_free(list, n);
		lbd_res_error(res, 500, "internal", "Listing the images failed: %s", err.msg);
		return;
	}
	yajl_gen g = lbd_gen_new();
	yajl_gen_map_open(g);
	lbd_gen_key(g, "images");
	yajl_gen_array_open(g);
	for (size_t i = 0; i < n; i++)
		gen_image(g, list[i], lbd_image_usage_count(&u, list[i]), false);
	yajl_gen_array_close(g);
	yajl_gen_map_close(g);
	lbd_image_usage_free(&u);
	lb_image_list_free(list, n);
	lbd_gen_finish(g, res, 200);
}

/* Writes {"image": ...} plus extra fields for a freshly pulled or imported image. */
static void answer_image(struct lbd *d, struct lbd_res *res, const struct lb_image_info *info, int status,
			 const char *time_key, uint64_t ms)
{
	struct lbd_image_usage u = { 0 };
	pthread_mutex_lock(&d->images_mu);
	int r = lbd_image_usage_locked(d, &u, NULL);
	pthread_mutex_unlock(&d->images_mu);
	yajl_gen g = lbd_gen_new();
	yajl_gen_map_open(g);
	if (time_key)
		lbd_gen_uint(g, time_key, ms);
	lbd_gen_key(g, "image");
	gen_image(g, info, r < 0 ? 0 : lbd_image_usage_count(&u, info), true);
	yajl_gen_map_close(g);
	lbd_image_usage_free(&u);
	lbd_gen_finish(g, res, status);
}

void lbd_api_image_get(struct lbd_req *req, struct lbd_res *res)
{
	struct lbd *d = req->d;
	if (store_missing(d, res) || !ref_checked(req->file_path, res))
		return;
	struct lb_image_info *info = NULL;
	struct lb_error err = { 0 };
	pthread_mutex_lock(&d->images_mu);
	int r = lb_image_inspect(d->images, req->file_path, &info, &err);
	pthread_mutex_unlock(&d->images_mu);
	if (r == -ENOENT) {
		lbd_res_error(res, 404, "image_not_found", "There is no image %.300s here.", req->file_path);
		return;
	}
	if (r < 0) {
		lbd_res_error(res, 500, "internal", "Reading the image failed: %s", err.msg);
		return;
	}
	answer_image(d, res, info, 200, NULL, 0);
	lb_image_info_free(info);
}

void lbd_api_image_delete(struct lbd_req *req, struct lbd_res *res)
{
	struct lbd *d = req->d;
	if (req->body_len) {
		lbd_res_error(res, 400, "unexpected_body", "Removing an image takes no request body.");
		return;
	}
	if (store_missing(d, res) || !ref_checked(req->file_path, res))
		return;
	struct lb_error err = { 0 };
	int r = lbd_image_remove(d, req->file_path, NULL, &err);
	if (r == -ENOENT) {
		lbd_res_error(res, 404, "image_not_found", "There is no image %.300s here.", req->file_path);
		return;
	}
	if (r == -EBUSY) {
		lbd_res_error(res, 409, "image_in_use",
			      "The image %.300s is in use: %s. Delete those sandboxes (or change their image) first.",
			      req->file_path, err.msg);
		return;
	}
	if (r < 0) {
		lbd_res_error(res, 500, "internal", "Removing the image failed: %s", err.msg);
		return;
	}
	yajl_gen g = lbd_gen_new();
	yajl_gen_map_open(g);
	lbd_gen_str(g, "removed", req->file_path);
	yajl_gen_map_close(g);
	lbd_gen_finish(g, res, 200);
}

/* Pins the image when the request asked (pin: true). Failing to pin is reported, the image stays. */
static int maybe_pin(struct lbd *d, yajl_val vpin, const char *digest, struct lbd_res *res)
{
	if (!vpin || !YAJL_IS_TRUE(vpin))
		return 0;
	struct lb_error err = { 0 };
	pthread_mutex_lock(&d->images_mu);
	int r = lb_image_pin(d->images, digest, true, &err);
	pthread_mutex_unlock(&d->images_mu);
	if (r < 0)
		lbd_res_error(res, 500, "internal", "The image %s is here but pinning it failed: %s", digest, err.msg);
	return r;
}

void lbd_api_image_pull(struct lbd_req *req, struct lbd_res *res)
{
	struct lbd *d = req->d;
	static const struct lbd_jfield fields[] = { { "ref", LBD_J_STRING }, { "pin", LBD_J_BOOL } };
	struct lbd_fail f = { 0 };
	yajl_val root = NULL;
	if (store_missing(d, res))
		return;
	if (lbd_json_object(req->body, req->body_len, fields, LB_ARRAY_SIZE(fields), &root, &f) < 0) {
		lbd_res_fail(res, &f);
		return;
	}
	yajl_val vref = lbd_json_get(root, "ref");
	if (!vref) {
		lbd_res_error(res, 400, "missing_field", "A pull needs `ref`, the image reference to pull.");
		goto out;
	}
	const char *ref = YAJL_GET_STRING(vref);
	if (!ref_checked(ref, res))
		goto out;
	if (strncmp(ref, "sha256:", 7) == 0) {
		lbd_res_error(res, 422, "invalid_value",
			      "A pull needs a name (registry/name:tag or @sha256:...), "
			      "not a bare digest.");
		goto out;
	}
	struct lb_image_info *info = NULL;
	struct lb_error err = { 0 };
	uint64_t ms = 0;
	int r = lbd_image_pull(d, ref, &info, &ms, &err);
	if (r < 0) {
		switch (r) {
		case -ENOENT:
			lbd_res_error(res, 404, "image_not_found", "Pulling %.300s failed: %s", ref, err.msg);
			break;
		case -EINVAL:
			lbd_res_error(res, 422, "invalid_value", "Pulling %.300s failed: %s", ref, err.msg);
			break;
		case -EACCES:
		case -EIO:
		case -EBADMSG:
		case -EPROTO:
		case -ETIMEDOUT:
		case -ECONNREFUSED:
			lbd_res_error(res, 502, "registry_error", "Pulling %.300s failed: %s", ref, err.msg);
			break;
		default:
			lbd_res_error(res, 502, "pull_failed", "Pulling %.300s failed: %s", ref, err.msg);
		}
		goto out;
	}
	if (maybe_pin(d, lbd_json_get(root, "pin"), info->config_digest, res) == 0) {
		if (lbd_json_get(root, "pin") && YAJL_IS_TRUE(lbd_json_get(root, "pin")))
			info->pinned = true;
		answer_image(d, res, info, 200, "duration_ms", ms);
	}
	lb_image_info_free(info);
out:
	yajl_tree_free(root);
}

/* An absolute path without `.`/`..` segments, NUL or newline, at most IMPORT_PATH_MAX bytes. */
static bool import_path_ok(const char *p)
{
	size_t len = strlen(p);
	if (len < 2 || len > IMPORT_PATH_MAX || p[0] != '/')
		return false;
	for (const char *s = p; *s; s++)
		if (*s == '\n' || *s == '\r')
			return false;
	for (const char *s = p; s && *s;) {
		s++; /* past '/' */
		size_t seg = strcspn(s, "/");
		if ((seg == 1 && s[0] == '.') || (seg == 2 && s[0] == '.' && s[1] == '.'))
			return false;
		s = strchr(s, '/');
	}
	return true;
}

void lbd_api_image_import(struct lbd_req *req, struct lbd_res *res)
{
	struct lbd *d = req->d;
	static const struct lbd_jfield fields[] = { { "path", LBD_J_STRING },
						    { "name", LBD_J_STRING },
						    { "pin", LBD_J_BOOL } };
	struct lbd_fail f = { 0 };
	yajl_val root = NULL;
	if (store_missing(d, res))
		return;
	/* The daemon reads the path as root: only a root peer may name one (others could read what they cannot). */
	if (req->peer_uid != 0) {
		lbd_res_error(
		    res, 403, "forbidden",
		    "Importing reads a file on this host as root: only root may ask (this peer is uid %u); use "
		    "`lensbox-image import` as root, or push the image to a registry and pull it.",
		    (unsigned)req->peer_uid);
		return;
	}
	if (lbd_json_object(req->body, req->body_len, fields, LB_ARRAY_SIZE(fields), &root, &f) < 0) {
		lbd_res_fail(res, &f);
		return;
	}
	yajl_val vpath = lbd_json_get(root, "path"), vname = lbd_json_get(root, "name");
	if (!vpath) {
		lbd_res_error(res, 400, "missing_field",
			      "An import needs `path`: the absolute path of an OCI layout (directory or tar) or a "
			      "`docker save` archive on the daemon's host.");
		goto out;
	}
	const char *path = YAJL_GET_STRING(vpath);
	const char *name = vname ? YAJL_GET_STRING(vname) : NULL;
	if (!import_path_ok(path)) {
		lbd_res_error(res, 422, "invalid_path",
			      "`path` must be an absolute path of at most %d bytes with no `.` or `..` segment.",
			      IMPORT_PATH_MAX);
		goto out;
	}
	if (name && (!lbd_image_ref_valid(name) || strncmp(name, "sha256:", 7) == 0 || strchr(name, '@'))) {
		lbd_res_error(res, 422, "invalid_value", "`name` must be an image name like python:3.12-slim.");
		goto out;
	}
	struct stat st;
	if (stat(path, &st) < 0) {
		int e = errno;
		if (e == ENOENT || e == ENOTDIR)
			lbd_res_error(res, 404, "path_not_found", "There is no file %.300s on the daemon's host.",
				      path);
		else
			lbd_res_error(res, 422, "invalid_path", "%.300s cannot be read: %s.", path, strerror(e));
		goto out;
	}
	if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
		lbd_res_error(res, 422, "invalid_path",
			      "%.300s is neither a regular file (an archive) nor a directory (an OCI layout).", path);
		goto out;
	}
	struct lb_image_info *info = NULL;
	struct lb_error err = { 0 };
	uint64_t t0 = lbd_mono_ms();
	int r = lbd_image_import(d, path, name, &info, &err);
	if (r < 0) {
		switch (r) {
		case -EBADMSG:
		case -EFBIG:
		case -E2BIG:
		case -ENAMETOOLONG:
		case -EXDEV:
		case -EINVAL:
		case -ENOENT:
		case -ENOTDIR:
			lbd_res_error(res, 422, "invalid_image", "Importing %.300s failed: %s", path, err.msg);
			break;
		default:
			lbd_res_error(res, 500, "internal", "Importing %.300s failed: %s", path, err.msg);
		}
		goto out;
	}
	if (maybe_pin(d, lbd_json_get(root, "pin"), info->config_digest, res) == 0) {
		if (lbd_json_get(root, "pin") && YAJL_IS_TRUE(lbd_json_get(root, "pin")))
			info->pinned = true;
		answer_image(d, res, info, 200, "duration_ms", lbd_mono_ms() - t0);
	}
	lb_image_info_free(info);
out:
	yajl_tree_free(root);
}

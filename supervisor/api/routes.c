/*
 * routes.c — which handler serves a request (see api.h and docs/api.md).
 *
 * Runs in lensboxd (root) on connection threads; pure. The path arrives still percent-encoded: it is split on
 * '/' first and each segment decoded after, so "%2F" inside a name can never create a new segment, and "%00" or a
 * bad escape is refused instead of cutting the string. A sandbox name must match ^[a-z0-9][a-z0-9._-]{0,62}$
 * (400 invalid_name); a file path is decoded here and validated by files.c, an image reference (/v1/images/{ref},
 * slashes included) by api_images.c.
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "lb/cleanup.h"
#include "lb/name.h"

enum { M_GET = 1, M_PUT = 2, M_POST = 4, M_DELETE = 8 };

static unsigned method_bit(const char *m)
{
	if (strcmp(m, "GET") == 0 || strcmp(m, "HEAD") == 0)
		return M_GET;
	if (strcmp(m, "PUT") == 0)
		return M_PUT;
	if (strcmp(m, "POST") == 0)
		return M_POST;
	if (strcmp(m, "DELETE") == 0)
		return M_DELETE;
	return 0;
}

static int method_fail(struct lbd_res *res, const char *method)
{
	lbd_res_error(res, 405, "method_not_allowed", "This endpoint does not take %.16s.", method);
	return -1;
}

static int not_found(struct lbd_res *res)
{
	lbd_res_error(res, 404, "not_found", "There is no such endpoint; see docs/api.md.");
	return -1;
}

/* /v1/images/{ref}: the rest of the path, slashes included, is one reference (percent-decoded here, validated
 * by the handler); POST .../pull and .../import are the two actions. */
static int route_image(unsigned m, const char *method, const char *rest, struct lbd_route_match *ret,
		       struct lbd_res *res)
{
	if (m == M_POST && strcmp(rest, "pull") == 0) {
		ret->handler = lbd_ask_image_pull;
		return 0;
	}
	if (m == M_POST && strcmp(rest, "import") == 0) {
		ret->handler = lbd_ask_image_import;
		return 0;
	}
	if (m != M_GET && m != M_DELETE)
		return method_fail(res, method);
	ret->file_path = lbd_percent_decode(rest, strlen(rest));
	if (!ret->file_path) {
		lbd_res_error(res, 400, "invalid_path",
			      "The image reference holds a NUL byte or a malformed %%-escape.");
		return -1;
	}
	ret->handler = m == M_GET ? lbd_ask_image_get : lbd_ask_image_delete;
	return 0;
}

int lbd_route(const char *method, const char *raw_path, struct lbd_route_match *ret, struct lbd_res *res)
{
	unsigned m = method_bit(method);
	memset(ret, 0, sizeof(*ret));
	ret->body_max = LBD_SMALL_BODY_MAX;
	const char *p = raw_path;
	if (strcmp(p, "/metrics") == 0) {
		if (m != M_GET)
			return method_fail(res, method);
		ret->handler = lbd_ask_metrics;
		return 0;
	}
	if (strncmp(p, "/v1/", 4) != 0)
		return not_found(res);
	p += 4;
	if (strcmp(p, "health") == 0) {
		if (m != M_GET)
			return method_fail(res, method);
		ret->handler = lbd_ask_health;
		return 0;
	}
	if (strcmp(p, "runs") == 0) {
		if (m != M_GET)
			return method_fail(res, method);
		ret->handler = lbd_ask_runs_list;
		return 0;
	}
	if (strncmp(p, "runs/", 5) == 0) {
		if (m != M_GET)
			return method_fail(res, method);
		const char *id = p + 5;
		if (strlen(id) > LB_RUN_ID_LEN || strchr(id, '/') || !*id)
			return not_found(res);
		snprintf(ret->name, sizeof(ret->name), "%s", id); /* the run id, checked by the handler */
		ret->handler = lbd_ask_run_get;
		return 0;
	}
	if (strcmp(p, "images") == 0 || strcmp(p, "images/") == 0) {
		if (m != M_GET)
			return method_fail(res, method);
		ret->handler = lbd_ask_images_list;
		return 0;
	}
	if (strncmp(p, "images/", 7) == 0)
		return route_image(m, method, p + 7, ret, res);
	if (strcmp(p, "sandboxes") == 0) {
		if (m != M_GET)
			return method_fail(res, method);
		ret->handler = lbd_ask_sandbox_list;
		return 0;
	}
	if (strncmp(p, "sandboxes/", 10) != 0)
		return not_found(res);
	p += 10;
	size_t seg = strcspn(p, "/");
	if (seg == 0)
		return not_found(res);
	char *name = lbd_percent_decode(p, seg);
	bool valid = name && lb_sandbox_name_valid(name);
	if (valid)
		snprintf(ret->name, sizeof(ret->name), "%s", name);
	free(name);
	if (!valid) {
		lbd_res_error(res, 400, "invalid_name",
			      "A sandbox name is 1 to 63 characters: lower-case letters, digits, `.`, `_` and `-`, "
			      "starting with a letter or a digit.");
		return -1;
	}
	p += seg;
	if (*p == '\0') {
		switch (m) {
		case M_GET:
			ret->handler = lbd_ask_sandbox_get;
			return 0;
		case M_PUT:
			ret->handler = lbd_ask_sandbox_put;
			return 0;
		case M_DELETE:
			ret->handler = lbd_ask_sandbox_delete;
			return 0;
		default:
			return method_fail(res, method);
		}
	}
	p++; /* the '/' */
	if (strcmp(p, "stop") == 0) {
		if (m != M_POST)
			return method_fail(res, method);
		ret->handler = lbd_ask_sandbox_stop;
		return 0;
	}
	if (strcmp(p, "runs") == 0) {
		if (m != M_POST)
			return method_fail(res, method);
		ret->handler = lbd_ask_run;
		ret->body_max = LBD_JSON_BODY_MAX;
		return 0;
	}
	if (strcmp(p, "files") == 0 || strcmp(p, "files/") == 0) {
		if (m != M_GET)
			return method_fail(res, method);
		ret->handler = lbd_ask_files_list;
		return 0;
	}
	if (strncmp(p, "files/", 6) == 0) {
		p += 6;
		ret->file_path = lbd_percent_decode(p, strlen(p));
		if (!ret->file_path) {
			lbd_res_error(res, 400, "invalid_path",
				      "The file path holds a NUL byte or a malformed %%-escape.");
			return -1;
		}
		if (m == M_GET) {
			ret->handler = lbd_ask_file_get;
			return 0;
		}
		if (m == M_PUT) {
			ret->handler = lbd_ask_file_put;
			ret->body_max = LBD_FILE_MAX;
			ret->too_large_code = "file_too_large";
			return 0;
		}
		free(TAKE_PTR(ret->file_path));
		return method_fail(res, method);
	}
	return not_found(res);
}

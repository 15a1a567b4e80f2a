/*
 * parse.c — request bodies in (see api.h): yajl parses, this checks the shape before a handler reads a field.
 *
 * Runs in the API process (unprivileged, confined) on connection threads; pure functions over bounded buffers.
 * Request bodies are hostile:
 * they arrive here already bounded in size (http.c), and are checked for a NUL byte (yajl_tree_parse reads a C
 * string, so a NUL would silently cut the document), for being exactly one object, for unknown or repeated keys
 * and for each value's type, before any handler reads a field. Strings yajl generates are escaped by yajl; text
 * that comes from a sandbox is made valid UTF-8 before it gets here (runs.c).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api.h"
#include "lb/cleanup.h"
#include "lb/units.h"

yajl_val lbd_json_get(yajl_val obj, const char *key)
{
	if (!obj || !YAJL_IS_OBJECT(obj))
		return NULL;
	for (size_t i = 0; i < obj->u.object.len; i++)
		if (strcmp(obj->u.object.keys[i], key) == 0)
			return obj->u.object.values[i];
	return NULL;
}

const char *lbd_json_text(yajl_val v)
{
	if (!v)
		return NULL;
	if (YAJL_IS_STRING(v))
		return YAJL_GET_STRING(v);
	if (YAJL_IS_NUMBER(v))
		return YAJL_GET_NUMBER(v);
	return NULL;
}

static const char *type_name(enum lbd_jtype t)
{
	switch (t) {
	case LBD_J_STRING:
		return "a string";
	case LBD_J_INT:
		return "an integer";
	case LBD_J_BOOL:
		return "true or false";
	case LBD_J_OBJECT:
		return "an object";
	case LBD_J_SCALAR:
		return "a number or a string";
	}
	return "?";
}

static bool type_ok(yajl_val v, enum lbd_jtype t)
{
	switch (t) {
	case LBD_J_STRING:
		return YAJL_IS_STRING(v);
	case LBD_J_INT:
		return YAJL_IS_INTEGER(v);
	case LBD_J_BOOL:
		return YAJL_IS_TRUE(v) || YAJL_IS_FALSE(v);
	case LBD_J_OBJECT:
		return YAJL_IS_OBJECT(v);
	case LBD_J_SCALAR:
		return YAJL_IS_STRING(v) || YAJL_IS_NUMBER(v);
	}
	return false;
}

int lbd_json_check(yajl_val obj, const char *where, const struct lbd_jfield *fields, size_t n, struct lbd_fail *f)
{
	if (!YAJL_IS_OBJECT(obj)) {
		lbd_fail_set(f, 400, "invalid_json", "%s must be a JSON object.", where);
		return -EINVAL;
	}
	for (size_t i = 0; i < obj->u.object.len; i++) {
		const char *key = obj->u.object.keys[i];
		for (size_t j = 0; j < i; j++)
			if (strcmp(obj->u.object.keys[j], key) == 0) {
				lbd_fail_set(f, 400, "duplicate_field", "The field `%.64s` appears twice in %s.", key,
					     where);
				return -EINVAL;
			}
		const struct lbd_jfield *fd = NULL;
		for (size_t j = 0; j < n; j++)
			if (strcmp(fields[j].name, key) == 0)
				fd = &fields[j];
		if (!fd) {
			lbd_fail_set(f, 400, "unknown_field", "%s has no field `%.64s`.", where, key);
			return -EINVAL;
		}
		yajl_val v = obj->u.object.values[i];
		if (!type_ok(v, fd->type)) {
			lbd_fail_set(f, 400, "wrong_type", "The field `%s` in %s must be %s.", fd->name, where,
				     type_name(fd->type));
			return -EINVAL;
		}
	}
	return 0;
}

/* true when the JSON text holds the escape \u0000 (not itself escaped): yajl's tree keeps strings as C strings, so
 * such a string would silently end there. */
static bool has_nul_escape(const char *s, size_t len)
{
	for (size_t i = 0; i + 6 <= len; i++) {
		if (s[i] != '\\')
			continue;
		if (s[i + 1] == 'u' && s[i + 2] == '0' && s[i + 3] == '0' && s[i + 4] == '0' && s[i + 5] == '0')
			return true;
		i++; /* skip the escaped character: an escaped backslash followed by "u0000" is text, not U+0000 */
	}
	return false;
}

int lbd_json_object(const char *body, size_t len, const struct lbd_jfield *fields, size_t n, yajl_val *ret,
		    struct lbd_fail *f)
{
	static const char empty[] = "{}";
	if (!body || len == 0) {
		body = empty;
		len = 2;
	}
	if (memchr(body, '\0', len) || body[len] != '\0') {
		lbd_fail_set(f, 400, "invalid_json", "The request body contains a NUL byte; send JSON text.");
		return -EINVAL;
	}
	if (has_nul_escape(body, len)) {
		lbd_fail_set(f, 422, "invalid_value", "Strings in the request may not contain U+0000 (\\u0000).");
		return -EINVAL;
	}
	char errbuf[256];
	yajl_val root = yajl_tree_parse(body, errbuf, sizeof(errbuf));
	if (!root) {
		/* yajl's message spans lines and quotes the input: keep its first line only. */
		errbuf[strcspn(errbuf, "\r\n")] = '\0';
		lbd_fail_set(f, 400, "invalid_json", "The request body is not valid JSON (%s).",
			     errbuf[0] ? errbuf : "parse error");
		return -EINVAL;
	}
	int r = lbd_json_check(root, "the request body", fields, n, f);
	if (r < 0) {
		yajl_tree_free(root);
		return r;
	}
	*ret = root;
	return 0;
}

static const struct lbd_jfield spec_fields[] = {
	{ "image", LBD_J_STRING },   { "network", LBD_J_STRING }, { "cpu", LBD_J_SCALAR },
	{ "memory", LBD_J_SCALAR },  { "disk", LBD_J_SCALAR },	  { "idle_minutes", LBD_J_INT },
	{ "keep_hours", LBD_J_INT },
};

static int int_in_range(yajl_val v, const char *field, long long min, long long max, long long *ret, struct lbd_fail *f)
{
	long long x = YAJL_GET_INTEGER(v);
	if (x < min || x > max) {
		lbd_fail_set(f, 422, "out_of_range", "`%s` must be between %lld and %lld.", field, min, max);
		return -ERANGE;
	}
	*ret = x;
	return 0;
}

int lbd_json_spec(const struct lbd_config *cfg, yajl_val obj, struct lbd_spec_request *req, struct lbd_fail *f)
{
	lbd_spec_defaults(cfg, req);
	struct lb_store_spec *s = &req->spec;
	if (!obj)
		return 0;
	int r = lbd_json_check(obj, "the sandbox spec", spec_fields, LB_ARRAY_SIZE(spec_fields), f);
	if (r < 0)
		return r;
	yajl_val v;
	if ((v = lbd_json_get(obj, "image"))) {
		const char *img = YAJL_GET_STRING(v);
		if (!lbd_image_ref_valid(img)) {
			lbd_fail_set(f, 422, "invalid_value",
				     "`image` must be an image reference like `python:3.12-slim` (letters, digits, "
				     "`._-/:@`, at most 255 characters).");
			return -EINVAL;
		}
		snprintf(s->image, sizeof(s->image), "%s", img);
		req->has_image = true;
	}
	if ((v = lbd_json_get(obj, "network"))) {
		if (lb_tier_parse(YAJL_GET_STRING(v), &s->network) < 0) {
			lbd_fail_set(f, 422, "invalid_value", "`network` must be `off`, `packages` or `web`.");
			return -EINVAL;
		}
		req->has_network = true;
	}
	if ((v = lbd_json_get(obj, "cpu"))) {
		uint32_t mc;
		if (lb_parse_cpu(lbd_json_text(v), &mc) < 0 || mc < 100 || mc > 64000) {
			lbd_fail_set(f, 422, "out_of_range", "`cpu` must be 0.1 to 64 cores, like 1, 0.5 or \"500m\".");
			return -EINVAL;
		}
		s->cpu_millicores = mc;
		req->has_cpu = true;
	}
	if ((v = lbd_json_get(obj, "memory"))) {
		uint64_t b;
		if (lb_parse_size(lbd_json_text(v), &b) < 0 || b < (64ull << 20) || b > (64ull << 30)) {
			lbd_fail_set(f, 422, "out_of_range",
				     "`memory` must be 64Mi to 64Gi, like \"512Mi\" or \"2Gi\".");
			return -EINVAL;
		}
		s->memory_bytes = b;
		req->has_memory = true;
	}
	if ((v = lbd_json_get(obj, "disk"))) {
		uint64_t b;
		if (lb_parse_size(lbd_json_text(v), &b) < 0 || b < (16ull << 20) || b > (1ull << 40)) {
			lbd_fail_set(f, 422, "out_of_range", "`disk` must be 16Mi to 1Ti, like \"1Gi\".");
			return -EINVAL;
		}
		s->disk_bytes = b;
		req->has_disk = true;
	}
	long long x;
	if ((v = lbd_json_get(obj, "idle_minutes"))) {
		if ((r = int_in_range(v, "idle_minutes", 1, 1440, &x, f)) < 0)
			return r;
		s->idle_seconds = (uint64_t)x * 60;
		req->has_idle = true;
	}
	if ((v = lbd_json_get(obj, "keep_hours"))) {
		if ((r = int_in_range(v, "keep_hours", 1, 720, &x, f)) < 0)
			return r;
		s->keep_seconds = (uint64_t)x * 3600;
		req->has_keep = true;
	}
	return 0;
}

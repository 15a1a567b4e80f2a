/*
 * wire.c — what both of lensboxd's processes agree a request means: the spec's config defaults, the image
 * reference and file path grammars, and the sandbox spec's wire form (proto.h's struct lbp_spec) in both directions.
 *
 * Runs in both processes; pure functions. The API process validates a spec once (api/parse.c) and sends only the
 * fields the client gave; the core rebuilds the request from its own configuration and checks every value again
 * (lbd_spec_from_wire), because a compromised API process could send anything the decoder lets through.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common.h"
#include "lb/images.h"
#include "proto.h"

void lbd_spec_defaults(const struct lbd_config *c, struct lbd_spec_request *req)
{
	memset(req, 0, sizeof(*req));
	struct lb_store_spec *s = &req->spec;
	snprintf(s->image, sizeof(s->image), "%s", c->default_image);
	s->network = c->default_network;
	s->cpu_millicores = c->default_cpu_millicores;
	s->memory_bytes = c->default_memory_bytes;
	s->disk_bytes = c->default_disk_bytes;
	s->idle_seconds = c->idle_seconds;
	s->keep_seconds = c->keep_seconds;
}

bool lbd_image_ref_valid(const char *ref)
{
	size_t len = strlen(ref);
	if (len < 1 || len > 255)
		return false;
	if (!((ref[0] >= 'a' && ref[0] <= 'z') || (ref[0] >= '0' && ref[0] <= '9')))
		return false;
	for (size_t i = 0; i < len; i++) {
		char c = ref[i];
		bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
			  c == '_' || c == '-' || c == '/' || c == ':' || c == '@';
		if (!ok)
			return false;
	}
	if (strstr(ref, ".."))
		return false;
	struct lb_image_ref parsed;
	return lb_image_ref_parse(ref, &parsed, NULL) == 0;
}

void lbd_spec_to_wire(const struct lbd_spec_request *req, struct lbp_spec *w)
{
	memset(w, 0, sizeof(*w));
	const struct lb_store_spec *s = &req->spec;
	if (req->has_image) {
		w->has |= LBP_SPEC_IMAGE;
		snprintf(w->image, sizeof(w->image), "%s", s->image);
	}
	if (req->has_network) {
		w->has |= LBP_SPEC_NETWORK;
		w->network = (uint32_t)s->network;
	}
	if (req->has_cpu) {
		w->has |= LBP_SPEC_CPU;
		w->cpu_millicores = s->cpu_millicores;
	}
	if (req->has_memory) {
		w->has |= LBP_SPEC_MEMORY;
		w->memory_bytes = s->memory_bytes;
	}
	if (req->has_disk) {
		w->has |= LBP_SPEC_DISK;
		w->disk_bytes = s->disk_bytes;
	}
	if (req->has_idle) {
		w->has |= LBP_SPEC_IDLE;
		w->idle_minutes = (uint32_t)(s->idle_seconds / 60);
	}
	if (req->has_keep) {
		w->has |= LBP_SPEC_KEEP;
		w->keep_hours = (uint32_t)(s->keep_seconds / 3600);
	}
}

int lbd_spec_from_wire(const struct lbd_config *cfg, const struct lbp_spec *w, struct lbd_spec_request *ret,
		       struct lbd_fail *f)
{
	lbd_spec_defaults(cfg, ret);
	struct lb_store_spec *s = &ret->spec;
	if (w->has & LBP_SPEC_IMAGE) {
		if (memchr(w->image, '\0', sizeof(w->image)) == NULL || !lbd_image_ref_valid(w->image))
			goto invalid;
		snprintf(s->image, sizeof(s->image), "%s", w->image);
		ret->has_image = true;
	}
	if (w->has & LBP_SPEC_NETWORK) {
		if (w->network >= LB_TIER_COUNT)
			goto invalid;
		s->network = (enum lb_tier)w->network;
		ret->has_network = true;
	}
	if (w->has & LBP_SPEC_CPU) {
		if (w->cpu_millicores < LBD_CPU_MIN || w->cpu_millicores > LBD_CPU_MAX)
			goto range;
		s->cpu_millicores = w->cpu_millicores;
		ret->has_cpu = true;
	}
	if (w->has & LBP_SPEC_MEMORY) {
		if (w->memory_bytes < LBD_MEMORY_MIN || w->memory_bytes > LBD_MEMORY_MAX)
			goto range;
		s->memory_bytes = w->memory_bytes;
		ret->has_memory = true;
	}
	if (w->has & LBP_SPEC_DISK) {
		if (w->disk_bytes < LBD_DISK_MIN || w->disk_bytes > LBD_DISK_MAX)
			goto range;
		s->disk_bytes = w->disk_bytes;
		ret->has_disk = true;
	}
	if (w->has & LBP_SPEC_IDLE) {
		if (w->idle_minutes < 1 || w->idle_minutes > LBD_IDLE_MINUTES_MAX)
			goto range;
		s->idle_seconds = (uint64_t)w->idle_minutes * 60;
		ret->has_idle = true;
	}
	if (w->has & LBP_SPEC_KEEP) {
		if (w->keep_hours < 1 || w->keep_hours > LBD_KEEP_HOURS_MAX)
			goto range;
		s->keep_seconds = (uint64_t)w->keep_hours * 3600;
		ret->has_keep = true;
	}
	return 0;
range:
	lbd_fail_set(f, 422, "out_of_range", "A value of the sandbox spec is outside its documented range.");
	return -ERANGE;
invalid:
	lbd_fail_set(f, 422, "invalid_value", "A value of the sandbox spec is not valid.");
	return -EINVAL;
}

int lbd_path_check(const char *path, bool allow_empty, struct lbd_fail *f)
{
	size_t len = strlen(path);
	if (len == 0) {
		if (allow_empty)
			return 0;
		lbd_fail_set(f, 400, "invalid_path", "The file path is empty.");
		return -EINVAL;
	}
	if (path[0] == '/') {
		lbd_fail_set(f, 400, "invalid_path", "The file path must be relative to /sandbox, not absolute.");
		return -EINVAL;
	}
	if (len > 4095) {
		lbd_fail_set(f, 400, "invalid_path", "The file path is longer than 4095 bytes.");
		return -EINVAL;
	}
	const char *p = path;
	bool first = true;
	while (*p) {
		size_t n = strcspn(p, "/");
		if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.')) {
			lbd_fail_set(f, 400, "invalid_path",
				     "The file path may not hold an empty, `.` or `..` component.");
			return -EINVAL;
		}
		if (n > 255) {
			lbd_fail_set(f, 400, "invalid_path", "A component of the file path is longer than 255 bytes.");
			return -EINVAL;
		}
		if (first && n == 8 && memcmp(p, ".lensbox", 8) == 0) {
			lbd_fail_set(f, 400, "invalid_path", "`.lensbox` is reserved for lensbox's own use.");
			return -EINVAL;
		}
		first = false;
		p += n;
		if (*p == '/') {
			p++;
			if (!*p) {
				lbd_fail_set(f, 400, "invalid_path", "The file path may not end with `/`.");
				return -EINVAL;
			}
		}
	}
	return 0;
}

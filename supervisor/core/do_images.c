/*
 * do_images.c — the core's side of GET /v1/images, GET and DELETE /v1/images/{ref}, POST /v1/images/pull and
 * POST /v1/images/import (LBP_IMAGE*): the image store (images/, through images.c) as the API shows it.
 *
 * Runs in the core (root) on channel threads. A pull or an import blocks its own channel's thread for as long as it
 * takes (minutes), never images_mu (images.c), so health, listings and runs of other sandboxes go on. Every
 * reference is validated again here (lbd_image_ref_valid) before the store sees it. Import names a path on this host
 * that the core (root) then reads: only a root client may ask, and the core checks that itself on the client's
 * connection (the message carries it), never taking the API process's word; the path must be absolute with no `..`
 * segment, and it must be a regular file or a directory (never a FIFO, which would block the thread, nor a device).
 * The archive's contents are hostile and are the library's to check.
 *
 * Progress (the request's `progress` flag, set when the client asked for application/x-ndjson): the store's watcher
 * (lb_images_watch) sends LBP_PROGRESS on the request's channel, at most one every 100 ms per layer and phase plus
 * each layer's end, without blocking (a full channel drops the step). The same watcher is how a client's hang-up
 * reaches the pull: the API process closes the channel, the watcher sees it closed (a send fails, or poll says
 * POLLHUP, checked at most every 100 ms) and answers "stop", and the store cancels with nothing half-written.
 */
#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core.h"
#include "lb/cleanup.h"
#include "lb/images.h"
#include "lb/units.h"

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

/* The watcher's state for one request. */
struct progress_watch {
	int channel;
	bool gone; /* the API process closed the channel: the client went away */
	uint64_t last_send_ms, last_check_ms;
	uint32_t last_phase;
	char last_layer[LBP_LAYER_HEX + 1];
};

static uint32_t wire_phase(enum lb_image_phase p)
{
	switch (p) {
	case LB_IMAGE_RESOLVING:
		return LBP_PHASE_RESOLVING;
	case LB_IMAGE_DOWNLOADING:
		return LBP_PHASE_DOWNLOADING;
	case LB_IMAGE_EXTRACTING:
		return LBP_PHASE_EXTRACTING;
	case LB_IMAGE_UNPACKING:
	case LB_IMAGE_PHASE_COUNT:
		break;
	}
	return LBP_PHASE_UNPACKING;
}

/* lb_image_watch_fn: tells the API process, and says stop (nonzero) once its channel is closed. */
static int watch_progress(const struct lb_image_progress *p, void *ud)
{
	struct progress_watch *w = ud;
	uint64_t now = lbd_mono_ms();
	if (w->gone)
		return 1;
	if (p->layer_hex) {
		uint32_t phase = wire_phase(p->phase);
		const char *layer = strlen(p->layer_hex) == LBP_LAYER_HEX ? p->layer_hex : "";
		bool news = phase != w->last_phase || strcmp(layer, w->last_layer) != 0 ||
			    (p->total && p->done == p->total) || now - w->last_send_ms >= 100;
		if (news) {
			struct lbp_progress m = { .phase = phase, .done = p->done, .total = p->total };
			if (m.total && m.done > m.total)
				m.done = m.total;
			snprintf(m.layer, sizeof(m.layer), "%s", layer);
			int r = lbp_send_progress(w->channel, &m);
			if (r == -EPIPE || r == -ECONNRESET || r == -ENOTCONN)
				w->gone = true;
			w->last_send_ms = now;
			w->last_phase = phase;
			snprintf(w->last_layer, sizeof(w->last_layer), "%s", layer);
		}
	}
	if (!w->gone && now - w->last_check_ms >= 100) {
		w->last_check_ms = now;
		struct pollfd pfd = { .fd = w->channel, .events = POLLIN };
		if (poll(&pfd, 1, 0) > 0 && (pfd.revents & (POLLHUP | POLLERR | POLLRDHUP)))
			w->gone = true;
	}
	return w->gone ? 1 : 0;
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

void lbd_do_images_list(struct lbd *d, struct lbp_msg *m, struct lbd_res *res)
{
	(void)m;
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

void lbd_do_image_get(struct lbd *d, struct lbp_msg *m, struct lbd_res *res)
{
	const char *ref = m->u.image.ref;
	if (store_missing(d, res) || !ref_checked(ref, res))
		return;
	struct lb_image_info *info = NULL;
	struct lb_error err = { 0 };
	pthread_mutex_lock(&d->images_mu);
	int r = lb_image_inspect(d->images, ref, &info, &err);
	pthread_mutex_unlock(&d->images_mu);
	if (r == -ENOENT) {
		lbd_res_error(res, 404, "image_not_found", "There is no image %.300s here.", ref);
		return;
	}
	if (r < 0) {
		lbd_res_error(res, 500, "internal", "Reading the image failed: %s", err.msg);
		return;
	}
	answer_image(d, res, info, 200, NULL, 0);
	lb_image_info_free(info);
}

void lbd_do_image_delete(struct lbd *d, struct lbp_msg *m, struct lbd_res *res)
{
	const char *ref = m->u.image.ref;
	if (store_missing(d, res) || !ref_checked(ref, res))
		return;
	struct lb_error err = { 0 };
	int r = lbd_image_remove(d, ref, NULL, &err);
	if (r == -ENOENT) {
		lbd_res_error(res, 404, "image_not_found", "There is no image %.300s here.", ref);
		return;
	}
	if (r == -EBUSY) {
		lbd_res_error(res, 409, "image_in_use",
			      "The image %.300s is in use: %s. Delete those sandboxes (or change their image) first.",
			      ref, err.msg);
		return;
	}
	if (r < 0) {
		lbd_res_error(res, 500, "internal", "Removing the image failed: %s", err.msg);
		return;
	}
	yajl_gen g = lbd_gen_new();
	yajl_gen_map_open(g);
	lbd_gen_str(g, "removed", ref);
	yajl_gen_map_close(g);
	lbd_gen_finish(g, res, 200);
}

/* Pins the image when the request asked (pin: true). Failing to pin is reported, the image stays. */
static int maybe_pin(struct lbd *d, bool pin, const char *digest, struct lbd_res *res)
{
	if (!pin)
		return 0;
	struct lb_error err = { 0 };
	pthread_mutex_lock(&d->images_mu);
	int r = lb_image_pin(d->images, digest, true, &err);
	pthread_mutex_unlock(&d->images_mu);
	if (r < 0)
		lbd_res_error(res, 500, "internal", "The image %s is here but pinning it failed: %s", digest, err.msg);
	return r;
}

void lbd_do_image_pull(struct lbd *d, struct lbp_msg *m, struct lbd_res *res)
{
	const char *ref = m->u.pull.ref;
	bool pin = m->u.pull.pin != 0;
	if (store_missing(d, res) || !ref_checked(ref, res))
		return;
	if (strncmp(ref, "sha256:", 7) == 0) {
		lbd_res_error(res, 422, "invalid_value",
			      "A pull needs a name (registry/name:tag or @sha256:...), "
			      "not a bare digest.");
		return;
	}
	struct lb_image_info *info = NULL;
	struct lb_error err = { 0 };
	uint64_t ms = 0;
	struct progress_watch w = { .channel = res->channel, .last_phase = LBP_PHASE_END };
	bool watched = m->u.pull.progress && res->has_channel;
	if (watched) {
		/* The stream starts now, also for a pull that waits for another of the same reference first. */
		struct lb_image_progress start = { .phase = LB_IMAGE_RESOLVING, .layer_hex = "" };
		(void)watch_progress(&start, &w);
	}
	int r = lbd_image_pull_watched(d, ref, watched ? watch_progress : NULL, &w, &info, &ms, &err);
	if (r < 0) {
		switch (r) {
		case -ECANCELED:
			lbd_res_error(res, 400, "cancelled", "The client went away: pulling %.300s was cancelled.",
				      ref);
			break;
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
		return;
	}
	if (maybe_pin(d, pin, info->config_digest, res) == 0) {
		if (pin)
			info->pinned = true;
		answer_image(d, res, info, 200, "duration_ms", ms);
	}
	lb_image_info_free(info);
}

/* The client of this import is root, as lensboxd's own socket says: fd must be a connection accepted on the
 * configured socket path (so a socket the API process connected elsewhere, to some root service, does not count)
 * and its peer's uid 0. The API process checked the same; the core does not take its word. */
static bool client_is_root(const struct lbd *d, int fd)
{
	struct sockaddr_un sa;
	socklen_t len = sizeof(sa);
	memset(&sa, 0, sizeof(sa));
	if (getsockname(fd, (struct sockaddr *)&sa, &len) < 0 || sa.sun_family != AF_UNIX ||
	    len <= offsetof(struct sockaddr_un, sun_path) ||
	    strncmp(sa.sun_path, d->cfg.socket_path, sizeof(sa.sun_path)) != 0)
		return false;
	struct ucred uc;
	socklen_t ul = sizeof(uc);
	return getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &ul) == 0 && uc.uid == 0;
}

void lbd_do_image_import(struct lbd *d, struct lbp_msg *m, struct lbd_res *res)
{
	const char *path = m->u.import.path;
	const char *name = m->u.import.name[0] ? m->u.import.name : NULL;
	bool pin = m->u.import.pin != 0;
	if (store_missing(d, res))
		return;
	if (!client_is_root(d, m->fds[0])) {
		lbd_res_error(res, 403, "forbidden",
			      "Importing reads a file on this host as root: only root may ask; use "
			      "`lensbox-image import` as root, or push the image to a registry and pull it.");
		return;
	}
	if (!lbp_host_path_valid(path)) {
		lbd_res_error(res, 422, "invalid_path",
			      "`path` must be an absolute path of at most %d bytes with no `.` or `..` segment.",
			      LBP_HOST_PATH_MAX);
		return;
	}
	if (name && (!lbd_image_ref_valid(name) || strncmp(name, "sha256:", 7) == 0 || strchr(name, '@'))) {
		lbd_res_error(res, 422, "invalid_value", "`name` must be an image name like python:3.12-slim.");
		return;
	}
	struct stat st;
	if (stat(path, &st) < 0) {
		int e = errno;
		if (e == ENOENT || e == ENOTDIR)
			lbd_res_error(res, 404, "path_not_found", "There is no file %.300s on the daemon's host.",
				      path);
		else
			lbd_res_error(res, 422, "invalid_path", "%.300s cannot be read: %s.", path, strerror(e));
		return;
	}
	if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
		lbd_res_error(res, 422, "invalid_path",
			      "%.300s is neither a regular file (an archive) nor a directory (an OCI layout).", path);
		return;
	}
	struct lb_image_info *info = NULL;
	struct lb_error err = { 0 };
	uint64_t t0 = lbd_mono_ms();
	struct progress_watch w = { .channel = res->channel, .last_phase = LBP_PHASE_END };
	bool watched = m->u.import.progress && res->has_channel;
	int r = lbd_image_import(d, path, name, watched ? watch_progress : NULL, &w, &info, &err);
	if (r < 0) {
		switch (r) {
		case -ECANCELED:
			lbd_res_error(res, 400, "cancelled", "The client went away: importing %.300s was cancelled.",
				      path);
			break;
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
		return;
	}
	if (maybe_pin(d, pin, info->config_digest, res) == 0) {
		if (pin)
			info->pinned = true;
		answer_image(d, res, info, 200, "duration_ms", lbd_mono_ms() - t0);
	}
	lb_image_info_free(info);
}

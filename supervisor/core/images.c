/*
 * images.c — from the image reference a client writes ("python:3.12-slim") to an unpacked root filesystem, through
 * images/' store (lb/images.h) at images_dir; pulling a missing image when the config allows it; which images the
 * sandboxes use; garbage collection.
 *
 * Runs in lensboxd (root) on connection threads and the timer thread. lb_images allows one thread at a time per
 * handle, so every call on d->images holds images_mu, and those calls are short (a few file reads, a rename). Pulls
 * and imports take minutes: each opens a handle of its own and runs without images_mu, as separate processes may
 * (the library's store is safe across processes: blobs are locked while downloaded, images appear by rename(2)),
 * so a pull never delays a lookup, a listing or another sandbox's start. Two pulls of one reference at once are
 * folded into one: the second waits for the first (d->pulls, under images_mu), then answers with the image the first
 * pulled (or, when the first failed, tries itself).
 *
 * In use. A sandbox uses an image when its recorded digest is that image's manifest or config digest, or when its
 * spec's image name points at that image now (a sandbox recorded but not yet started has no digest, and the next
 * start of any sandbox resolves its name again). Such an image is never removed by the API nor by gc, and
 * gc never removes the config's default_image (the next new sandbox's).
 *
 * References are checked against a conservative character set and parsed the way Docker does
 * (lb_image_ref_parse) before the store sees them.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lb/cleanup.h"
#include "lb/images.h"
#include "lb/log.h"
#include "core.h"

/* A pull in progress: later pulls of the same canonical reference wait for it. Under images_mu. */
struct lbd_pull {
	char ref[730];
	struct lbd_pull *next;
};

int lbd_images_open(struct lbd *d, struct lb_error *err)
{
	pthread_mutex_init(&d->images_mu, NULL);
	pthread_cond_init(&d->pulls_cv, NULL);
	d->pulls = NULL;
	int r = lb_images_open(d->cfg.images_dir, NULL, &d->images, err);
	if (r < 0)
		return lb_error_wrap(err, "opening the image store %s", d->cfg.images_dir);
	return 0;
}

void lbd_images_close(struct lbd *d)
{
	lb_images_free(d->images);
	d->images = NULL;
}

/* ---- pulling ---- */

/* Splits insecure_registries ("a:5000, b") into up to 16 NUL-terminated entries of buf; list ends with NULL. */
static void insecure_list(const char *conf, char (*buf)[256], const char **list, size_t max)
{
	size_t n = 0;
	for (const char *p = conf; *p && n + 1 < max;) {
		while (*p == ' ' || *p == ',')
			p++;
		size_t len = strcspn(p, ", ");
		if (len == 0)
			break;
		if (len < 256) {
			memcpy(buf[n], p, len);
			buf[n][len] = '\0';
			list[n] = buf[n];
			n++;
		}
		p += len;
	}
	list[n] = NULL;
}

/* Under images_mu: records a use of the image now, so gc counts from here. */
static void touch_locked(struct lbd *d, const char *config_digest)
{
	struct lb_error err = { 0 };
	if (lb_image_touch(d->images, config_digest, &err) < 0)
		lb_warn(NULL, "recording the use of image %s failed: %s", config_digest, err.msg);
}

int lbd_image_pull(struct lbd *d, const char *ref, struct lb_image_info **ret_info, uint64_t *ret_ms,
		   struct lb_error *err)
{
	return lbd_image_pull_watched(d, ref, NULL, NULL, ret_info, ret_ms, err);
}

int lbd_image_pull_watched(struct lbd *d, const char *ref, lb_image_watch_fn watch, void *watch_ud,
			   struct lb_image_info **ret_info, uint64_t *ret_ms, struct lb_error *err)
{
	if (!lbd_image_ref_valid(ref))
		return lb_error_setx(err, EINVAL, "`%s` is not a valid image reference", ref);
	if (!d->images)
		return lb_error_setx(err, ENOENT, "the image store %s could not be opened", d->cfg.images_dir);
	struct lb_image_ref parsed;
	int r = lb_image_ref_parse(ref, &parsed, err);
	if (r < 0)
		return r;
	uint64_t t0 = lbd_mono_ms();

	/* One pull per reference at a time: wait for one in progress, then take the slot. */
	struct lbd_pull me = { .next = NULL };
	snprintf(me.ref, sizeof(me.ref), "%s", parsed.full);
	pthread_mutex_lock(&d->images_mu);
	bool waited = false;
	for (;;) {
		struct lbd_pull *p = d->pulls;
		while (p && strcmp(p->ref, me.ref) != 0)
			p = p->next;
		if (!p)
			break;
		waited = true;
		pthread_cond_wait(&d->pulls_cv, &d->images_mu);
	}
	if (waited) {
		/* The pull waited for succeeded when the reference is there now: answer with it, pulling nothing. A
		 * failed one left nothing, and this pull tries again. */
		struct lb_image_info *info = NULL;
		if (lb_image_inspect(d->images, me.ref, &info, NULL) == 0) {
			touch_locked(d, info->config_digest);
			pthread_mutex_unlock(&d->images_mu);
			if (ret_ms)
				*ret_ms = lbd_mono_ms() - t0;
			if (ret_info)
				*ret_info = info;
			else
				lb_image_info_free(info);
			return 0;
		}
	}
	me.next = d->pulls;
	/* The slot lives on this stack frame: it is unlinked below, under images_mu, before this function returns. */
	/* cppcheck-suppress autoVariables */
	d->pulls = &me;
	pthread_mutex_unlock(&d->images_mu);

	char fields[1600];
	snprintf(fields, sizeof(fields), "image=%s", me.ref);
	lb_info(fields, "pulling the image");
	char ibuf[16][256];
	const char *insecure[17];
	insecure_list(d->cfg.insecure_registries, ibuf, insecure, 17);
	struct lb_pull_opts po = {
		.ca_file = d->cfg.registry_ca_file[0] ? d->cfg.registry_ca_file : NULL,
		.insecure_registries = insecure,
		.credentials_file = d->cfg.registry_credentials[0] ? d->cfg.registry_credentials : NULL,
	};
	struct lb_images *own = NULL;
	struct lb_image_info *info = NULL;
	r = lb_images_open(d->cfg.images_dir, NULL, &own, err);
	if (r >= 0) {
		lb_images_watch(own, watch, watch_ud);
		r = lb_image_pull(own, ref, &po, &info, err);
		lb_images_free(own);
	}

	pthread_mutex_lock(&d->images_mu);
	for (struct lbd_pull **pp = &d->pulls; *pp; pp = &(*pp)->next)
		if (*pp == &me) {
			*pp = me.next;
			break;
		}
	if (r >= 0)
		touch_locked(d, info->config_digest); /* an old image pulled again must not be collected right away */
	pthread_cond_broadcast(&d->pulls_cv);
	pthread_mutex_unlock(&d->images_mu);

	uint64_t ms = lbd_mono_ms() - t0;
	if (r < 0) {
		snprintf(fields, sizeof(fields), "image=%s duration_ms=%llu error=\"%.600s\"", me.ref,
			 (unsigned long long)ms, err ? err->msg : "");
		lb_warn(fields, "pulling the image failed");
		return r;
	}
	snprintf(fields, sizeof(fields), "image=%s digest=%s duration_ms=%llu", me.ref, info->config_digest,
		 (unsigned long long)ms);
	lb_info(fields, "image pulled");
	if (ret_ms)
		*ret_ms = ms;
	if (ret_info)
		*ret_info = info;
	else
		lb_image_info_free(info);
	return 0;
}

int lbd_image_import(struct lbd *d, const char *path, const char *name, lb_image_watch_fn watch, void *watch_ud,
		     struct lb_image_info **ret_info, struct lb_error *err)
{
	if (!d->images)
		return lb_error_setx(err, ENOENT, "the image store %s could not be opened", d->cfg.images_dir);
	struct lb_images *own = NULL;
	struct lb_image_info *info = NULL;
	int r = lb_images_open(d->cfg.images_dir, NULL, &own, err);
	if (r < 0)
		return r;
	lb_images_watch(own, watch, watch_ud);
	r = lb_image_import(own, path, NULL, name, &info, err);
	lb_images_free(own);
	if (r < 0)
		return r;
	pthread_mutex_lock(&d->images_mu);
	touch_locked(d, info->config_digest);
	pthread_mutex_unlock(&d->images_mu);
	*ret_info = info;
	return 0;
}

/* ---- resolving ---- */

int lbd_image_get(struct lbd *d, const char *ref, bool pull, bool touch, struct lbd_image *ret,
		  struct lbd_image_pulled *ret_pulled, struct lb_error *err)
{
	memset(ret, 0, sizeof(*ret));
	if (!lbd_image_ref_valid(ref))
		return lb_error_setx(err, EINVAL, "`%s` is not a valid image reference", ref);
	if (!d->images)
		return lb_error_setx(err, ENOENT, "the image store %s could not be opened", d->cfg.images_dir);
	struct lb_image_info *info = NULL;
	pthread_mutex_lock(&d->images_mu);
	int r = lb_image_inspect_content(d->images, ref, &info, err);
	if (r == 0 && touch)
		touch_locked(d, info->config_digest);
	pthread_mutex_unlock(&d->images_mu);
	if (r == -ENOENT && pull && d->cfg.pull_missing_images) {
		uint64_t ms = 0;
		struct lb_error perr = { 0 };
		r = lbd_image_pull(d, ref, NULL, &ms, &perr);
		if (r < 0)
			return lb_error_setx(err, -r, "it is not in %s and pulling it failed: %s", d->cfg.images_dir,
					     perr.msg);
		if (ret_pulled) {
			ret_pulled->pulled = true;
			ret_pulled->ms = ms;
		}
		pthread_mutex_lock(&d->images_mu);
		r = lb_image_inspect_content(d->images, ref, &info, err);
		if (r == 0 && touch)
			touch_locked(d, info->config_digest);
		pthread_mutex_unlock(&d->images_mu);
	} else if (r == -ENOENT) {
		return lb_error_setx(
		    err, ENOENT,
		    "no image named %s in %s; pull it with `lensbox image pull %s` (or set "
		    "pull_missing_images = on), or import it with `lensbox image import ARCHIVE --name %s`",
		    ref, d->cfg.images_dir, ref, ref);
	}
	if (r < 0)
		return r;
	if (!info->has_python3 || !info->has_bash) {
		int rr = lb_error_setx(err, ENOEXEC, "%s", lb_image_info_warning(info));
		lb_image_info_free(info);
		return rr;
	}
	const char *digest = info->manifest_digest[0] ? info->manifest_digest : info->config_digest;
	snprintf(ret->digest, sizeof(ret->digest), "%s", digest);
	ret->info = info;
	return 0;
}

int lbd_image_resolve(struct lbd *d, const char *ref, struct lbd_image *ret, struct lb_error *err)
{
	return lbd_image_get(d, ref, false, false, ret, NULL, err);
}

void lbd_image_release(struct lbd_image *img)
{
	if (img->info)
		lb_image_info_free(img->info);
	img->info = NULL;
}

/* ---- in use ---- */

void lbd_image_usage_free(struct lbd_image_usage *u)
{
	if (u->rows)
		free(u->rows);
	free(u->name_digest);
	memset(u, 0, sizeof(*u));
}

int lbd_image_usage_locked(struct lbd *d, struct lbd_image_usage *ret, struct lb_error *err)
{
	struct lb_store_sandbox *rows = NULL;
	size_t n = 0;
	int r = lb_store_sandbox_list(d->store, LB_STORE_ALL, LB_STORE_BY_NAME, &rows, &n, err);
	if (r < 0)
		return lb_error_wrap(err, "listing the sandboxes");
	char(*nd)[LB_DIGEST_MAX] = calloc(n ? n : 1, sizeof(*nd));
	if (!nd) {
		free(rows);
		return lb_error_set(err, ENOMEM, "counting the images in use");
	}
	for (size_t i = 0; i < n; i++) {
		/* Rows with the same image name are next to each other only by chance: look the name up unless
		 * the previous row had the same one. */
		if (i > 0 && strcmp(rows[i].spec.image, rows[i - 1].spec.image) == 0) {
			memcpy(nd[i], nd[i - 1], sizeof(nd[i]));
			continue;
		}
		struct lb_image_info *info = NULL;
		if (lbd_image_ref_valid(rows[i].spec.image) &&
		    lb_image_inspect(d->images, rows[i].spec.image, &info, NULL) == 0) {
			snprintf(nd[i], sizeof(nd[i]), "%s", info->config_digest);
			lb_image_info_free(info);
		}
	}
	struct lb_image_info *def = NULL;
	if (lbd_image_ref_valid(d->cfg.default_image) &&
	    lb_image_inspect(d->images, d->cfg.default_image, &def, NULL) == 0) {
		snprintf(ret->default_digest, sizeof(ret->default_digest), "%s", def->config_digest);
		lb_image_info_free(def);
	}
	ret->rows = rows;
	ret->n = n;
	ret->name_digest = nd;
	return 0;
}

size_t lbd_image_usage_count(const struct lbd_image_usage *u, const struct lb_image_info *info)
{
	size_t count = 0;
	for (size_t i = 0; i < u->n; i++) {
		const char *dg = u->rows[i].image_digest;
		bool by_digest = dg[0] && (strcmp(dg, info->config_digest) == 0 ||
					   (info->manifest_digest[0] && strcmp(dg, info->manifest_digest) == 0));
		if (by_digest || strcmp(u->name_digest[i], info->config_digest) == 0)
			count++;
	}
	return count;
}

/* The library's in_use callback: the usage's rows against one config digest. Recorded digests that are manifest
 * digests are matched through the image's own metadata. */
struct in_use_ctx {
	struct lbd *d;
	const struct lbd_image_usage *u;
	bool keep_default; /* gc: the default image stays even when no sandbox uses it yet */
};

static bool in_use_cb(const char *config_digest, void *userdata)
{
	struct in_use_ctx *c = userdata;
	struct lb_image_info *info = NULL;
	/* Called by the library on d->images while images_mu is held by this thread: inspecting here is allowed. */
	if (lb_image_inspect(c->d->images, config_digest, &info, NULL) < 0)
		return true; /* cannot tell: keep it */
	bool used = lbd_image_usage_count(c->u, info) > 0 ||
		    (c->keep_default && strcmp(c->u->default_digest, config_digest) == 0);
	lb_image_info_free(info);
	return used;
}

int lbd_image_remove(struct lbd *d, const char *ref, size_t *ret_users, struct lb_error *err)
{
	if (!lbd_image_ref_valid(ref))
		return lb_error_setx(err, EINVAL, "`%s` is not a valid image reference", ref);
	if (!d->images)
		return lb_error_setx(err, ENOENT, "the image store %s could not be opened", d->cfg.images_dir);
	pthread_mutex_lock(&d->images_mu);
	struct lb_image_info *info = NULL;
	struct lbd_image_usage u = { 0 };
	int r = lb_image_inspect(d->images, ref, &info, err);
	if (r < 0)
		goto out;
	r = lbd_image_usage_locked(d, &u, err);
	if (r < 0)
		goto out;
	/* A sandbox whose spec names ref (the same canonical name) would fail its next start: the name is in use
	 * even when the image keeps other names. Below the name, the library refuses to delete an image in use. */
	struct lb_image_ref want;
	bool is_name = strncmp(ref, "sha256:", 7) != 0 && lb_image_ref_parse(ref, &want, NULL) == 0;
	size_t users = lbd_image_usage_count(&u, info);
	for (size_t i = 0; is_name && i < u.n; i++) {
		struct lb_image_ref have;
		if (lb_image_ref_parse(u.rows[i].spec.image, &have, NULL) == 0 && strcmp(have.full, want.full) == 0) {
			r = lb_error_setx(err, EBUSY, "the sandbox %s is made from %s", u.rows[i].name, ref);
			goto out;
		}
	}
	if (ret_users)
		*ret_users = users;
	struct in_use_ctx ctx = { .d = d, .u = &u };
	r = lb_image_remove(d->images, ref, in_use_cb, &ctx, err);
	if (r == -EBUSY)
		lb_error_setx(err, EBUSY, "%zu sandbox%s use%s it", users, users == 1 ? "" : "es",
			      users == 1 ? "s" : "");
out:
	lbd_image_usage_free(&u);
	if (info)
		lb_image_info_free(info);
	pthread_mutex_unlock(&d->images_mu);
	if (r >= 0)
		lbd_roots_prune(d); /* the removed image's shared root, if its directory went */
	return r;
}

/* ---- garbage collection ---- */

void lbd_images_tick(struct lbd *d)
{
	uint64_t after = d->cfg.image_gc_after_seconds;
	if (!after || !d->images)
		return;
	/* Look every quarter of image_gc_after, at most once a minute and at least one timer interval apart. */
	uint64_t every = after * 1000 / 4;
	if (every > 60000)
		every = 60000;
	uint64_t now = lbd_mono_ms();
	if (d->gc_last_mono && now - d->gc_last_mono < every)
		return;
	d->gc_last_mono = now;
	pthread_mutex_lock(&d->images_mu);
	struct lbd_image_usage u = { 0 };
	struct lb_error err = { 0 };
	size_t removed = 0;
	int r = lbd_image_usage_locked(d, &u, &err);
	if (r >= 0) {
		struct in_use_ctx ctx = { .d = d, .u = &u, .keep_default = true };
		r = lb_image_gc(d->images, after, in_use_cb, &ctx, &removed, &err);
	}
	lbd_image_usage_free(&u);
	pthread_mutex_unlock(&d->images_mu);
	if (r < 0)
		lb_warn(NULL, "image garbage collection failed: %s", err.msg);
	else if (removed) {
		lbd_roots_prune(d);
		char fields[64];
		snprintf(fields, sizeof(fields), "removed=%zu", removed);
		lb_info(fields, "unused images garbage-collected");
	}
}

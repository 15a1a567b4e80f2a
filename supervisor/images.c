/*
 * images.c — from the image reference a client writes ("python:3.12-slim") to an unpacked root filesystem, through
 * images/' store (lb/images.h) at images_dir.
 *
 * Runs in lensboxd (root) on connection threads. lb_images allows one thread at a time, so every call holds
 * images_mu; lookups are a few file reads. The reference is first checked against a conservative character set
 * and parsed the way Docker does (lb_image_ref_parse) before the store sees it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lb/images.h"
#include "lensboxd.h"

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

int lbd_images_open(struct lbd *d, struct lb_error *err)
{
	pthread_mutex_init(&d->images_mu, NULL);
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

int lbd_image_resolve(struct lbd *d, const char *ref, struct lbd_image *ret, struct lb_error *err)
{
	memset(ret, 0, sizeof(*ret));
	if (!lbd_image_ref_valid(ref))
		return lb_error_setx(err, EINVAL, "`%s` is not a valid image reference", ref);
	if (!d->images)
		return lb_error_setx(err, ENOENT, "the image store %s could not be opened", d->cfg.images_dir);
	struct lb_image_info *info = NULL;
	pthread_mutex_lock(&d->images_mu);
	int r = lb_image_inspect(d->images, ref, &info, err);
	pthread_mutex_unlock(&d->images_mu);
	if (r == -ENOENT)
		return lb_error_setx(err, ENOENT,
				     "no image named %s in %s; import it with `lensbox-image import ARCHIVE --name %s`",
				     ref, d->cfg.images_dir, ref);
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

void lbd_image_release(struct lbd_image *img)
{
	if (img->info)
		lb_image_info_free(img->info);
	img->info = NULL;
}

/*
 * images.c — from the image reference a client writes ("python:3.12-slim") to an unpacked root filesystem.
 *
 * Runs in lensboxd (root) on connection threads; reads only. Images live under images_dir, one directory per
 * reference with '/', ':' and '@' written as '_':
 *
 *     <images_dir>/python_3.12-slim/rootfs/     the unpacked root, read-only to sandboxes
 *     <images_dir>/python_3.12-slim/digest      "sha256:<hex>" of the image (optional)
 *
 * images/ unpacks archives there (images/recipes/python builds the default one). A reference is validated before
 * it becomes a path component, so it can never name anything outside images_dir.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "lb/cleanup.h"
#include "lb/fileio.h"
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
	return strstr(ref, "..") == NULL;
}

static void dir_name(const char *ref, char *buf, size_t size)
{
	snprintf(buf, size, "%s", ref);
	for (char *p = buf; *p; p++)
		if (*p == '/' || *p == ':' || *p == '@')
			*p = '_';
}

int lbd_image_resolve(const struct lbd *d, const char *ref, char *ret_rootfs, size_t rootfs_size, char *ret_digest,
		      size_t digest_size, struct lb_error *err)
{
	if (!lbd_image_ref_valid(ref))
		return lb_error_setx(err, EINVAL, "`%s` is not a valid image reference", ref);
	char name[256], rootfs[768], digest_path[768];
	dir_name(ref, name, sizeof(name));
	snprintf(rootfs, sizeof(rootfs), "%s/%s/rootfs", d->cfg.images_dir, name);
	struct stat st;
	if (stat(rootfs, &st) < 0 || !S_ISDIR(st.st_mode))
		return lb_error_setx(err, ENOENT,
				     "%s is missing; unpack the image there (for the default image: "
				     "images/recipes/python --rootfs)",
				     rootfs);
	if (strlen(rootfs) >= rootfs_size)
		return lb_error_setx(err, ENAMETOOLONG, "the image path %s is too long", rootfs);
	snprintf(digest_path, sizeof(digest_path), "%s/%s/digest", d->cfg.images_dir, name);
	_cleanup_free_ char *dg = NULL;
	size_t len = 0;
	ret_digest[0] = '\0';
	if (lb_read_file_at(-100 /* AT_FDCWD */, digest_path, 256, &dg, &len) == 0) {
		dg[strcspn(dg, " \t\r\n")] = '\0';
		if (strncmp(dg, "sha256:", 7) == 0 && strlen(dg) < digest_size)
			snprintf(ret_digest, digest_size, "%s", dg);
	}
	snprintf(ret_rootfs, rootfs_size, "%s", rootfs);
	return 0;
}

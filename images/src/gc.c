/*
 * gc.c — pins and garbage collection.
 *
 * Runs as root in lensboxd (on a timer) or lensbox-image gc. Usage is the mtime of images/<hex>/last_used (touched
 * at import and whenever a sandbox is made from the image); a pin is the file images/<hex>/pinned (both usage.c).
 * Collection never
 * removes what is pinned or what the caller's in_use says a sandbox uses, and removes an image the same way rm does
 * (names first, then the tree renamed into tmp/ and deleted), so a sandbox being created concurrently either finds
 * the complete image or none. Pulled blobs (layout/blobs/sha256) are kept while any remaining image lists them in
 * its image.json "blobs"; other files there (unwanted blobs, a resumable .partial, a killed pull's temporary
 * .<hex>.<writer>) go once they are 10 minutes old, as do names/.tmp-* links a killed import or tag left.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <yajl/yajl_tree.h>

#include "lb/cleanup.h"
#include "lb/fileio.h"

#include "internal.h"

#define BLOB_GRACE_SECONDS 600

int lb_image_pin(struct lb_images *s, const char *ref, bool pinned, struct lb_error *err)
{
	char hex[65];
	int r = lbi_resolve_ref(s, ref, hex, NULL, 0, err);
	if (r < 0)
		return r;
	r = lbi_usage_set_pinned(s, hex, pinned);
	if (r < 0)
		return pinned ? lb_error_set(err, r, "pinning %s", ref) : lb_error_set(err, r, "unpinning %s", ref);
	return 0;
}

/* Adds the "blobs" of images/<hex>/image.json to the set (a sorted array of 65-byte strings, grown as needed). */
static int add_wanted(struct lb_images *s, const char *hex, char (**set)[65], size_t *n)
{
	char path[128];
	snprintf(path, sizeof(path), "images/%s/image.json", hex);
	_cleanup_free_ char *buf = NULL;
	size_t len;
	int r = lb_read_file_at(s->rootfd, path, 1 << 20, &buf, &len);
	if (r < 0)
		return r;
	yajl_val o = yajl_tree_parse(buf, NULL, 0);
	const char *key[] = { "blobs", NULL };
	yajl_val blobs = o ? yajl_tree_get(o, key, yajl_t_array) : NULL;
	for (size_t i = 0; blobs && i < blobs->u.array.len; i++) {
		yajl_val v = blobs->u.array.values[i];
		if (!YAJL_IS_STRING(v) || strlen(v->u.string) != 64)
			continue;
		char(*ns)[65] = realloc(*set, (*n + 1) * sizeof(**set));
		if (!ns) {
			yajl_tree_free(o);
			return -ENOMEM;
		}
		*set = ns;
		memcpy((*set)[(*n)++], v->u.string, 65);
	}
	if (o)
		yajl_tree_free(o);
	return 0;
}

static int cmp65(const void *a, const void *b)
{
	return strcmp(a, b);
}

/* names/.tmp-<writer> links (store.c's set_name) left by an import or tag killed between making the link and
 * renaming it over the name: removed once older than the grace period (one being made now is never touched). */
static void remove_stale_name_links(struct lb_images *s, int64_t now)
{
	_cleanup_close_ int nfd = openat(s->rootfd, "names", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = nfd >= 0 ? fdopendir(dup(nfd)) : NULL;
	if (!d)
		return;
	struct dirent *de;
	while ((de = readdir(d))) {
		struct stat st;
		if (strncmp(de->d_name, ".tmp-", 5) != 0 || fstatat(nfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
		    !S_ISLNK(st.st_mode) || now - st.st_mtim.tv_sec < BLOB_GRACE_SECONDS)
			continue;
		unlinkat(nfd, de->d_name, 0);
	}
	closedir(d);
}

int lb_image_gc(struct lb_images *s, uint64_t max_idle_seconds,
		bool (*in_use)(const char *config_digest, void *userdata), void *userdata, size_t *ret_removed,
		struct lb_error *err)
{
	_cleanup_close_ int bfd = -1;
	_cleanup_close_ int ifd = openat(s->rootfd, "images", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = ifd >= 0 ? fdopendir(ifd) : NULL;
	if (!d)
		return lb_error_set(err, errno, "listing %s/images", s->root);
	ifd = -1; // NOLINT(clang-analyzer-deadcode.DeadStores): _cleanup_close_ reads it
	_cleanup_closedir_ DIR *dir = d;
	char(*wanted)[65] = NULL;
	size_t n_wanted = 0, removed = 0;
	int64_t now = time(NULL);
	struct dirent *de;
	int r = 0;
	while ((de = readdir(dir))) {
		if (strlen(de->d_name) != 64 || strspn(de->d_name, "0123456789abcdef") != 64)
			continue;
		struct lb_image_info *info = NULL;
		if (lbi_read_image_json(s, de->d_name, &info) < 0)
			continue; /* not a complete image (cannot happen under images/, but never delete what we cannot
				     read) */
		char digest[LB_DIGEST_MAX];
		snprintf(digest, sizeof(digest), "sha256:%.64s", de->d_name);
		bool keep = info->pinned || (in_use && in_use(digest, userdata)) ||
			    now - info->last_used < (int64_t)max_idle_seconds;
		lb_image_info_free(info);
		if (keep) {
			r = add_wanted(s, de->d_name, &wanted, &n_wanted);
			if (r < 0) {
				r = lb_error_set(err, r, "reading images/%s/image.json", de->d_name);
				goto out;
			}
			continue;
		}
		r = lbi_remove_image(s, de->d_name, err);
		if (r < 0)
			goto out;
		removed++;
	}

	/* Blobs no remaining image wants, older than the grace period. */
	bfd = openat(s->rootfd, "layout/blobs/sha256", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (bfd >= 0) {
		if (n_wanted)
			qsort(wanted, n_wanted, sizeof(*wanted), cmp65);
		DIR *bd = fdopendir(dup(bfd));
		if (!bd) {
			r = lb_error_set(err, errno, "listing %s/layout/blobs/sha256", s->root);
			goto out;
		}
		while ((de = readdir(bd))) {
			struct stat st;
			/* Dot files are a pull's temporary blobs (.<hex>.<writer>, pull.c): one that outlived the grace
			 * period belongs to a pull that was killed before its rename, and goes like any unwanted blob.
			 */
			if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 ||
			    fstatat(bfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode) ||
			    now - st.st_mtim.tv_sec < BLOB_GRACE_SECONDS)
				continue;
			char key[65];
			snprintf(key, sizeof(key), "%.64s", de->d_name);
			bool is_digest = strlen(de->d_name) == 64;
			if (is_digest && n_wanted && bsearch(key, wanted, n_wanted, sizeof(*wanted), cmp65))
				continue;
			unlinkat(bfd, de->d_name, 0); /* unwanted blob, an abandoned .partial or temporary blob */
		}
		closedir(bd);
	}
	remove_stale_name_links(s, now);
	r = 0;
	if (ret_removed)
		*ret_removed = removed;
out:
	free(wanted);
	return r;
}

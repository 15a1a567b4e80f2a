/*
 * usage.c — an image's usage records: images/<hex>/last_used, whose mtime is when a sandbox was last made from the
 * image, and images/<hex>/pinned, whose presence keeps the image from garbage collection whatever its age.
 *
 * Runs as root in lensboxd or lensbox-image. The import and lensboxd stamp last_used (lb_image_touch), `pin` and
 * `unpin` create or remove the pin (gc.c resolves the name first), and reading an image's info (store.c) reports
 * both. A file of its own because the store and the collector both use these records: neither calls the other for
 * them. Invariants: both files are empty and opened O_NOFOLLOW inside the image's own directory; a missing last_used
 * means "not used since the import", a missing pin "not pinned".
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lb/cleanup.h"

#include "internal.h"

int lb_image_touch(struct lb_images *s, const char *config_digest, struct lb_error *err)
{
	char hex[65], path[128];
	if (lbi_digest_hex(config_digest, hex) < 0)
		return lb_error_setx(err, EINVAL, "'%.80s' is not a sha256 digest", config_digest);
	snprintf(path, sizeof(path), "images/%s/last_used", hex);
	_cleanup_close_ int fd = openat(s->rootfd, path, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd < 0)
		return lb_error_set(err, errno, "touching %s", path);
	if (futimens(fd, NULL) < 0)
		return lb_error_set(err, errno, "touching %s", path);
	return 0;
}

int lbi_usage_set_pinned(struct lb_images *s, const char *hex, bool pinned)
{
	char path[128];
	snprintf(path, sizeof(path), "images/%s/pinned", hex);
	if (!pinned) {
		if (unlinkat(s->rootfd, path, 0) < 0 && errno != ENOENT)
			return -errno;
		return 0;
	}
	_cleanup_close_ int fd = openat(s->rootfd, path, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	return 0;
}

void lbi_usage_read(struct lb_images *s, const char *hex, int64_t imported_at, bool *ret_pinned, int64_t *ret_last_used)
{
	char side[128];
	struct stat st;
	snprintf(side, sizeof(side), "images/%s/pinned", hex);
	*ret_pinned = faccessat(s->rootfd, side, F_OK, AT_SYMLINK_NOFOLLOW) == 0;
	snprintf(side, sizeof(side), "images/%s/last_used", hex);
	*ret_last_used = fstatat(s->rootfd, side, &st, AT_SYMLINK_NOFOLLOW) == 0 ? st.st_mtim.tv_sec : imported_at;
}

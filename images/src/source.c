/*
 * source.c — unpacks the outer archive of an import (an oci-archive tar or a `docker save` tar, optionally gzip or
 * zstd compressed) into a private staging directory, so the rest of the importer reads a plain layout.
 *
 * Runs as root in the importing process. The outer archive is as hostile as the layers: names are normalised and
 * refused when absolute or containing "..", only regular files, directories and symlinks are kept (docker save uses
 * symlinks to share layer tars; they stay inside the staging directory because everything is later opened through
 * lbi_open_in_root), and entry count and total size are bounded. Files are written mode 0600, owned by root.
 *
 * Two passes keep a second import of the same image instant: the first extracts only entries of at most
 * small_max bytes (the JSON documents), the caller checks whether that config is already unpacked, and only then
 * does the second pass extract the large blobs.
 */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lb/cleanup.h"

#include "source.h"

static void archive_freep(struct archive **a)
{
	if (*a)
		archive_read_free(*a);
}

/* Like layer.c's normalize, for the outer archive: "" for the root, refuses absolute names and "..". */
static int outer_name(const char *in, char *out, size_t outsz)
{
	if (!in || !*in || in[0] == '/')
		return -EXDEV;
	size_t o = 0;
	const char *p = in;
	while (*p) {
		while (*p == '/')
			p++;
		if (!*p)
			break;
		const char *e = strchrnul(p, '/');
		size_t n = (size_t)(e - p);
		if (!(n == 1 && p[0] == '.')) {
			if (n == 2 && p[0] == '.' && p[1] == '.')
				return -EXDEV;
			if (n > 255 || o + n + 2 > outsz)
				return -ENAMETOOLONG;
			if (o)
				out[o++] = '/';
			memcpy(out + o, p, n);
			o += n;
		}
		p = e;
	}
	out[o] = '\0';
	return 0;
}

int lbi_source_extract(const char *path, int stagefd, uint64_t small_max, bool large, const struct lb_image_limits *l,
		       struct lb_error *err)
{
	__attribute__((cleanup(archive_freep))) struct archive *a = archive_read_new();
	if (!a)
		return lb_error_set(err, ENOMEM, "archive_read_new");
	archive_read_support_format_tar(a);
	archive_read_support_filter_gzip(a);
	archive_read_support_filter_zstd(a);
	if (archive_read_open_filename(a, path, 1 << 17) != ARCHIVE_OK)
		return lb_error_setx(err, EINVAL, "%.200s: not a readable tar archive: %.200s", path,
				     archive_error_string(a));
	uint64_t entries = 0, total = 0;
	for (;;) {
		struct archive_entry *e;
		int ar = archive_read_next_header(a, &e);
		if (ar == ARCHIVE_EOF)
			break;
		if (ar < ARCHIVE_WARN)
			return lb_error_setx(err, EBADMSG, "%.200s: reading the archive: %.200s", path,
					     archive_error_string(a));
		if (++entries > 100000)
			return lb_error_setx(err, E2BIG, "%.200s: more than 100000 entries in the outer archive", path);
		char name[PATH_MAX];
		const char *raw = archive_entry_pathname(e);
		int r = outer_name(raw, name, sizeof(name));
		if (r < 0)
			return lb_error_setx(err, -r, "%.200s: entry '%.200s' %s", path, raw ? raw : "",
					     r == -EXDEV ? "escapes the archive (absolute or '..')" : "is invalid");
		if (!*name)
			continue;
		mode_t type = archive_entry_filetype(e);
		la_int64_t size = archive_entry_size(e);
		bool is_large = type == AE_IFREG && size > (la_int64_t)small_max;
		if (type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK)
			continue;
		if (archive_entry_hardlink(e))
			continue;
		if (is_large != large)
			continue;
		if (type == AE_IFREG && (size < 0 || (uint64_t)size > l->max_total_bytes - total))
			return lb_error_setx(err, EFBIG, "%.200s: entry '%.200s' exceeds the %llu-byte bound", path,
					     name, (unsigned long long)l->max_total_bytes);
		if (type == AE_IFREG)
			total += (uint64_t)size;

		char parent[PATH_MAX];
		const char *slash = strrchr(name, '/');
		const char *base = slash ? slash + 1 : name;
		snprintf(parent, sizeof(parent), "%.*s", slash ? (int)(slash - name) : 0, name);
		_cleanup_close_ int pfd = lbi_open_dir_in_root(stagefd, parent, true, NULL, NULL);
		if (pfd < 0)
			return lb_error_set(err, pfd, "%.200s: entry '%.200s': parent directory", path, name);
		if (type == AE_IFDIR) {
			if (mkdirat(pfd, base, 0700) < 0 && errno != EEXIST)
				return lb_error_set(err, errno, "%.200s: entry '%.200s': mkdir", path, name);
			continue;
		}
		r = lbi_remove_at(pfd, base);
		if (r < 0)
			return lb_error_set(err, r, "%.200s: entry '%.200s': replacing", path, name);
		if (type == AE_IFLNK) {
			const char *target = archive_entry_symlink(e);
			if (!target || !*target || strlen(target) > 4096 || symlinkat(target, pfd, base) < 0)
				return lb_error_set(err, target && *target ? errno : EINVAL,
						    "%.200s: entry '%.200s': symlink", path, name);
			continue;
		}
		_cleanup_close_ int fd = openat(pfd, base, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd < 0)
			return lb_error_set(err, errno, "%.200s: entry '%.200s': create", path, name);
		for (;;) {
			const void *buf;
			size_t len;
			la_int64_t off;
			ar = archive_read_data_block(a, &buf, &len, &off);
			if (ar == ARCHIVE_EOF)
				break;
			if (ar < ARCHIVE_WARN)
				return lb_error_setx(err, EBADMSG, "%.200s: entry '%.200s': %.200s", path, name,
						     archive_error_string(a));
			if (off < 0 || (uint64_t)off + len > (uint64_t)size)
				return lb_error_setx(err, EBADMSG, "%.200s: entry '%.200s': data beyond its size", path,
						     name);
			const char *p = buf;
			while (len) {
				ssize_t n = pwrite(fd, p, len, (off_t)off);
				if (n < 0) {
					if (errno == EINTR)
						continue;
					return lb_error_set(err, errno, "%.200s: entry '%.200s': write", path, name);
				}
				p += n;
				len -= (size_t)n;
				off += n;
			}
		}
		if (ftruncate(fd, (off_t)size) < 0)
			return lb_error_set(err, errno, "%.200s: entry '%.200s': ftruncate", path, name);
	}
	return 0;
}

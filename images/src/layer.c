/*
 * layer.c — applies one image layer (a tar stream, maybe gzip- or zstd-compressed) to a root directory, safely.
 *
 * Runs as root in the importing process (lensboxd or lensbox-image): root is needed to give files the owners the
 * image says. The bytes are hostile even after the blob digest matched (a digest proves only that the image's author
 * sent them), so this file is written for an attacker-built tar.
 *
 *   blob fd ──read──▶ [gzip | zstd | raw] ──▶ sha256 (diff_id) ──▶ libarchive (tar headers only) ──▶ apply_entry()
 *                                                                                                        │
 *            openat2(root, parent, RESOLVE_IN_ROOT|RESOLVE_NO_MAGICLINKS) ──▶ *at(parentfd, one name) ◀──┘
 *
 * Decompression is ours (zlib, libzstd) so the uncompressed bytes can be hashed on their way to libarchive and the
 * stream drained to its end after the tar's end-of-archive blocks: the diff_id covers every byte.
 *
 * The rules, in order, for each entry:
 *  1. Bounds: entry count, path and link-target length, and the running total of regular files' sizes (apparent
 *     size, before any byte is written: a 10 GB sparse file is refused from its header). -E2BIG, -ENAMETOOLONG,
 *     -EFBIG.
 *  2. Names are normalised ("./a//b/" -> "a/b"). An absolute name or a ".." component refuses the whole image
 *     (-EXDEV): real image builders never produce them. A non-directory entry for the root itself (a symlink named
 *     ".", umoci's CVE-2021-29136) is refused the same way.
 *  3. Whiteouts: ".wh.NAME" removes NAME as left by lower layers (not if this layer itself wrote that path);
 *     ".wh..wh..opq" empties its directory of everything this layer did not write, wherever the marker sits in the
 *     tar (a marker behind a dangling symlink hides nothing). Other ".wh..wh.*" (aufs bookkeeping) are ignored. A
 * whiteout of "." or ".." is refused (-EXDEV).
 *  4. The parent is resolved inside the root (missing parents are made 0755 root); whatever exists under the name
 *     is removed unless both are directories (later entries win, as in Docker). Then the entry is created:
 *     regular file (O_CREAT|O_EXCL|O_NOFOLLOW; holes kept), directory, symlink (target stored verbatim: it is only
 *     ever resolved inside the root), hard link (target normalised like a name and resolved inside the root; it
 *     must be a regular file or symlink). Device nodes, FIFOs and sockets are skipped and counted.
 *  5. Metadata: owner from the header; mode without setuid/setgid (counted when stripped); mtime for files and
 *     symlinks (Python checks .pyc files against their source's mtime). No extended attributes are applied at all,
 *     so security.capability and ACLs never reach the disk.
 */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include "lb/cleanup.h"

#include "internal.h"

#define IN_BUF_SIZE  ((size_t)256 * 1024)
#define OUT_BUF_SIZE ((size_t)512 * 1024)

/* ---- the decompressing, hashing stream libarchive reads from ---- */

enum codec { CODEC_RAW, CODEC_GZIP, CODEC_ZSTD };

struct stream {
	int fd;
	enum codec codec;
	unsigned char *in;
	size_t in_len, in_pos;
	bool in_eof;
	unsigned char *out;
	z_stream z;
	bool z_ready;
	bool z_member_done; /* the current gzip member ended; more input means another member */
	ZSTD_DStream *zs;
	size_t zs_last; /* ZSTD_decompressStream's last hint: 0 at a frame boundary */
	struct lbi_sha256 diff;
	uint64_t out_total;
	int error; /* negative errno once the stream failed */
	const char *error_what;
};

static int fill_input(struct stream *s)
{
	if (s->in_pos < s->in_len || s->in_eof)
		return 0;
	ssize_t n;
	do {
		n = read(s->fd, s->in, IN_BUF_SIZE);
	} while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	s->in_len = (size_t)n;
	s->in_pos = 0;
	if (n == 0)
		s->in_eof = true;
	return 0;
}

/* Produces up to OUT_BUF_SIZE uncompressed bytes into s->out; 0 at the end of the stream. */
static ssize_t produce(struct stream *s)
{
	int r;
	if (s->error)
		return s->error;
	for (;;) {
		r = fill_input(s);
		if (r < 0) {
			s->error_what = "reading the blob";
			return s->error = r;
		}
		size_t avail = s->in_len - s->in_pos;
		switch (s->codec) {
		case CODEC_RAW:
			if (avail == 0)
				return 0;
			if (avail > OUT_BUF_SIZE)
				avail = OUT_BUF_SIZE;
			memcpy(s->out, s->in + s->in_pos, avail);
			s->in_pos += avail;
			return (ssize_t)avail;
		case CODEC_GZIP: {
			if (avail == 0) {
				if (s->z_member_done)
					return 0;
				s->error_what = "truncated gzip stream";
				return s->error = -EBADMSG;
			}
			if (s->z_member_done) {
				/* Another gzip member follows (multi-member streams are valid gzip). */
				if (inflateReset(&s->z) != Z_OK) {
					s->error_what = "gzip stream";
					return s->error = -EBADMSG;
				}
				s->z_member_done = false;
			}
			s->z.next_in = s->in + s->in_pos;
			s->z.avail_in = (uInt)avail;
			s->z.next_out = s->out;
			s->z.avail_out = OUT_BUF_SIZE;
			int zr = inflate(&s->z, Z_NO_FLUSH);
			s->in_pos = s->in_len - s->z.avail_in;
			size_t got = OUT_BUF_SIZE - s->z.avail_out;
			if (zr == Z_STREAM_END)
				s->z_member_done = true;
			else if (zr != Z_OK && !(zr == Z_BUF_ERROR && got == 0)) {
				s->error_what = "corrupt gzip stream";
				return s->error = -EBADMSG;
			}
			if (got)
				return (ssize_t)got;
			continue;
		}
		case CODEC_ZSTD: {
			if (avail == 0) {
				if (s->zs_last == 0)
					return 0;
				s->error_what = "truncated zstd stream";
				return s->error = -EBADMSG;
			}
			ZSTD_inBuffer zin = { s->in + s->in_pos, avail, 0 };
			ZSTD_outBuffer zout = { s->out, OUT_BUF_SIZE, 0 };
			size_t zr = ZSTD_decompressStream(s->zs, &zout, &zin);
			s->in_pos += zin.pos;
			if (ZSTD_isError(zr)) {
				s->error_what = "corrupt zstd stream";
				return s->error = -EBADMSG;
			}
			s->zs_last = zr;
			if (zout.pos)
				return (ssize_t)zout.pos;
			continue;
		}
		}
		return s->error = -EINVAL;
	}
}

static la_ssize_t stream_read(struct archive *a, void *ud, const void **buf)
{
	struct stream *s = ud;
	ssize_t n = produce(s);
	if (n < 0) {
		archive_set_error(a, (int)-n, "%s", s->error_what ? s->error_what : "stream error");
		return -1;
	}
	lbi_sha256_update(&s->diff, s->out, (size_t)n);
	s->out_total += (uint64_t)n;
	*buf = s->out;
	return n;
}

static int stream_open(struct stream *s, int fd)
{
	*s = (struct stream){ .fd = fd };
	s->in = malloc(IN_BUF_SIZE);
	s->out = malloc(OUT_BUF_SIZE);
	if (!s->in || !s->out)
		return -ENOMEM;
	int r = lbi_sha256_init(&s->diff);
	if (r < 0)
		return r;
	if (lseek(fd, 0, SEEK_SET) < 0)
		return -errno;
	r = fill_input(s);
	if (r < 0)
		return r;
	const unsigned char *m = s->in;
	if (s->in_len >= 2 && m[0] == 0x1f && m[1] == 0x8b) {
		s->codec = CODEC_GZIP;
		if (inflateInit2(&s->z, 16 + MAX_WBITS) != Z_OK)
			return -ENOMEM;
		s->z_ready = true;
	} else if (s->in_len >= 4 && m[0] == 0x28 && m[1] == 0xb5 && m[2] == 0x2f && m[3] == 0xfd) {
		s->codec = CODEC_ZSTD;
		s->zs = ZSTD_createDStream();
		if (!s->zs)
			return -ENOMEM;
		/* Bound the decoder's window (128 MiB) so a hostile frame cannot ask for gigabytes of memory. */
		ZSTD_DCtx_setParameter(s->zs, ZSTD_d_windowLogMax, 27);
		s->zs_last = 1;
	} else {
		s->codec = CODEC_RAW;
	}
	return 0;
}

static void stream_close(struct stream *s)
{
	if (s->z_ready)
		inflateEnd(&s->z);
	if (s->zs)
		ZSTD_freeDStream(s->zs);
	if (s->diff.ctx)
		lbi_sha256_done(&s->diff);
	free(s->in);
	free(s->out);
}

/* ---- the set of paths this layer wrote (for whiteouts and opaque directories) ---- */

struct pathset {
	char **slots;
	size_t cap, n;
};

static uint64_t hash_str(const char *s)
{
	uint64_t h = 1469598103934665603ULL; /* FNV-1a */
	for (; *s; s++) {
		h ^= (unsigned char)*s;
		h *= 1099511628211ULL;
	}
	return h;
}

static bool pathset_has(const struct pathset *ps, const char *p)
{
	if (!ps->cap)
		return false;
	for (size_t i = hash_str(p) & (ps->cap - 1);; i = (i + 1) & (ps->cap - 1)) {
		if (!ps->slots[i])
			return false;
		if (!strcmp(ps->slots[i], p))
			return true;
	}
}

static int pathset_add(struct pathset *ps, const char *p)
{
	if (pathset_has(ps, p))
		return 0;
	if ((ps->n + 1) * 2 > ps->cap) {
		size_t ncap = ps->cap ? ps->cap * 2 : 1024;
		char **ns = calloc(ncap, sizeof(*ns));
		if (!ns)
			return -ENOMEM;
		for (size_t i = 0; i < ps->cap; i++) {
			if (!ps->slots[i])
				continue;
			size_t j = hash_str(ps->slots[i]) & (ncap - 1);
			while (ns[j])
				j = (j + 1) & (ncap - 1);
			ns[j] = ps->slots[i];
		}
		free(ps->slots);
		ps->slots = ns;
		ps->cap = ncap;
	}
	char *copy = strdup(p);
	if (!copy)
		return -ENOMEM;
	size_t i = hash_str(p) & (ps->cap - 1);
	while (ps->slots[i])
		i = (i + 1) & (ps->cap - 1);
	ps->slots[i] = copy;
	ps->n++;
	return 0;
}

static void pathset_free(struct pathset *ps)
{
	for (size_t i = 0; i < ps->cap; i++)
		free(ps->slots[i]);
	free(ps->slots);
	*ps = (struct pathset){ 0 };
}

static void on_parent_created(const char *path, void *ud)
{
	(void)pathset_add(ud, path);
}

/* ---- names ---- */

/* Normalises an archive name into out (size PATH_MAX+1): "" is the root. -EXDEV for absolute names and "..",
 * -ENAMETOOLONG beyond max_len or for a component over 255 bytes, -EINVAL for an empty name. */
static int normalize(const char *in, char *out, size_t max_len)
{
	if (!in || !*in)
		return -EINVAL;
	if (in[0] == '/')
		return -EXDEV;
	size_t o = 0;
	const char *p = in;
	while (*p) {
		while (*p == '/')
			p++;
		if (!*p)
			break;
		const char *e = p;
		while (*e && *e != '/')
			e++;
		size_t n = (size_t)(e - p);
		if (n == 1 && p[0] == '.') {
			p = e;
			continue;
		}
		if (n == 2 && p[0] == '.' && p[1] == '.')
			return -EXDEV;
		if (n > 255)
			return -ENAMETOOLONG;
		if (o + (o ? 1 : 0) + n > max_len || o + 1 + n > PATH_MAX)
			return -ENAMETOOLONG;
		if (o)
			out[o++] = '/';
		memcpy(out + o, p, n);
		o += n;
		p = e;
	}
	out[o] = '\0';
	return 0;
}

/* Splits "a/b/c" into parent "a/b" (in parent, size PATH_MAX+1) and returns a pointer to "c" inside path. */
static const char *split(const char *path, char *parent)
{
	const char *slash = strrchr(path, '/');
	if (!slash) {
		parent[0] = '\0';
		return path;
	}
	memcpy(parent, path, (size_t)(slash - path));
	parent[slash - path] = '\0';
	return slash + 1;
}

/* ---- applying entries ---- */

struct applier {
	int rootfd;
	struct archive *a;
	const struct lb_image_limits *limits;
	struct lbi_unpack_stats *st;
	struct pathset written;
	struct lb_error *err;
	const char *what;
};

static int entry_fail(struct applier *ap, int r, const char *path, const char *step)
{
	return lb_error_set(ap->err, r, "%s: entry '%.200s': %s", ap->what, path, step);
}

static int child_path(const char *parent, const char *name, char *out)
{
	int n = *parent ? snprintf(out, PATH_MAX + 1, "%s/%s", parent, name) : snprintf(out, PATH_MAX + 1, "%s", name);
	return n < 0 || n > PATH_MAX ? -ENAMETOOLONG : 0;
}

static int apply_opaque(struct applier *ap, const char *dir)
{
	_cleanup_close_ int fd = lbi_open_dir_in_root(ap->rootfd, dir, true, on_parent_created, &ap->written);
	if (fd == -ENOENT)
		return 0; /* behind a dangling symlink: nothing below to hide */
	if (fd < 0)
		return entry_fail(ap, fd, dir, "opening the opaque directory");
	int dfd = dup(fd);
	if (dfd < 0)
		return entry_fail(ap, -errno, dir, "dup");
	DIR *d = fdopendir(dfd);
	if (!d) {
		close(dfd);
		return entry_fail(ap, -errno, dir, "reading the opaque directory");
	}
	_cleanup_closedir_ DIR *dir_stream = d;
	char child[PATH_MAX + 1];
	struct dirent *de;
	while ((de = readdir(dir_stream))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (child_path(dir, de->d_name, child) < 0)
			return entry_fail(ap, -ENAMETOOLONG, dir, "child path");
		if (pathset_has(&ap->written, child))
			continue;
		int r = lbi_remove_at(fd, de->d_name);
		if (r < 0)
			return entry_fail(ap, r, child, "removing for an opaque directory");
	}
	return 0;
}

static int apply_whiteout(struct applier *ap, const char *parent, const char *name, const char *path)
{
	char target[PATH_MAX + 1];
	if (!*name || !strcmp(name, ".") || !strcmp(name, ".."))
		return entry_fail(ap, -EXDEV, path, "whiteout names no file in its directory");
	if (child_path(parent, name, target) < 0)
		return entry_fail(ap, -ENAMETOOLONG, path, "whiteout target");
	if (pathset_has(&ap->written, target))
		return 0; /* this layer's own file: whiteouts only hide lower layers */
	_cleanup_close_ int fd = lbi_open_dir_in_root(ap->rootfd, parent, false, NULL, NULL);
	if (fd == -ENOENT || fd == -ENOTDIR)
		return 0; /* nothing below to hide */
	if (fd < 0)
		return entry_fail(ap, fd, path, "opening the whiteout's directory");
	int r = lbi_remove_at(fd, name);
	if (r < 0)
		return entry_fail(ap, r, path, "applying the whiteout");
	return 0;
}

static int set_owner_mode(struct applier *ap, int fd, struct archive_entry *e, const char *path)
{
	la_int64_t uid = archive_entry_uid(e), gid = archive_entry_gid(e);
	if (uid < 0 || uid >= 0xffffffffLL || gid < 0 || gid >= 0xffffffffLL)
		return entry_fail(ap, -EINVAL, path, "owner out of range");
	/* Safe: fd is a file or directory this import created inside the new root. */
	if (fchown(fd, (uid_t)uid, (gid_t)gid) < 0)
		return entry_fail(ap, -errno, path, "fchown");
	mode_t mode = archive_entry_perm(e) & 07777;
	if (mode & (S_ISUID | S_ISGID)) {
		mode &= (mode_t) ~(S_ISUID | S_ISGID);
		ap->st->stripped++;
	}
	if (fchmod(fd, mode) < 0)
		return entry_fail(ap, -errno, path, "fchmod");
	return 0;
}

static int write_file_data(struct applier *ap, int fd, const char *path, la_int64_t size)
{
	for (;;) {
		const void *buf;
		size_t len;
		la_int64_t off;
		int r = archive_read_data_block(ap->a, &buf, &len, &off);
		if (r == ARCHIVE_EOF)
			break;
		if (r < ARCHIVE_WARN)
			return entry_fail(ap, -EBADMSG, path, archive_error_string(ap->a));
		if (off < 0 || (uint64_t)off + len > (uint64_t)size)
			return entry_fail(ap, -EBADMSG, path, "data beyond the file's size");
		const char *p = buf;
		while (len) {
			ssize_t n = pwrite(fd, p, len, (off_t)off);
			if (n < 0) {
				if (errno == EINTR)
					continue;
				return entry_fail(ap, -errno, path, "writing");
			}
			p += n;
			len -= (size_t)n;
			off += n;
		}
	}
	/* Trailing holes of sparse files leave the size short: extend without allocating blocks. */
	if (ftruncate(fd, (off_t)size) < 0)
		return entry_fail(ap, -errno, path, "ftruncate");
	return 0;
}

static int apply_entry(struct applier *ap, struct archive_entry *e)
{
	char path[PATH_MAX + 1], parent[PATH_MAX + 1];
	const char *raw = archive_entry_pathname(e);
	int r;

	if (++ap->st->entries > ap->limits->max_entries)
		return lb_error_setx(ap->err, E2BIG, "%s: more than %llu entries", ap->what,
				     (unsigned long long)ap->limits->max_entries);
	r = normalize(raw, path, ap->limits->max_path_len);
	if (r == -EXDEV)
		return lb_error_setx(ap->err, EXDEV, "%s: entry '%.200s' escapes the root (absolute or '..')", ap->what,
				     raw);
	if (r < 0)
		return entry_fail(ap, r, raw ? raw : "", "invalid name");

	const char *hardlink = archive_entry_hardlink(e);
	mode_t type = archive_entry_filetype(e);
	if (!*path) {
		if (type == AE_IFDIR && !hardlink)
			return 0; /* the root keeps its own owner and mode */
		return lb_error_setx(ap->err, EXDEV, "%s: entry '%.200s' would replace the root itself", ap->what, raw);
	}

	const char *name = split(path, parent);
	if (!strncmp(name, ".wh.", 4)) {
		if (!strcmp(name, ".wh..wh..opq"))
			return apply_opaque(ap, parent);
		if (!strncmp(name, ".wh..wh.", 8))
			return 0;
		return apply_whiteout(ap, parent, name + 4, path);
	}

	if (type == AE_IFCHR || type == AE_IFBLK || type == AE_IFIFO || type == AE_IFSOCK) {
		ap->st->skipped_special++;
		return 0;
	}
	if (!hardlink && type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK)
		return entry_fail(ap, -EINVAL, path, "unsupported entry type");

	r = pathset_add(&ap->written, path);
	if (r < 0)
		return entry_fail(ap, r, path, "bookkeeping");
	_cleanup_close_ int pfd = lbi_open_dir_in_root(ap->rootfd, parent, true, on_parent_created, &ap->written);
	if (pfd < 0)
		return entry_fail(ap, pfd, path, "opening its parent directory inside the root");

	struct stat old;
	bool exists = fstatat(pfd, name, &old, AT_SYMLINK_NOFOLLOW) == 0;

	if (hardlink) {
		char target[PATH_MAX + 1];
		r = normalize(hardlink, target, ap->limits->max_path_len);
		if (r == -EXDEV || (r == 0 && !*target))
			return lb_error_setx(ap->err, EXDEV, "%s: hard link '%.200s' -> '%.200s' escapes the root",
					     ap->what, path, hardlink);
		if (r < 0)
			return entry_fail(ap, r, path, "invalid hard link target");
		if (!strcmp(target, path))
			return 0;
		_cleanup_close_ int tfd = lbi_open_in_root(ap->rootfd, target, O_PATH | O_NOFOLLOW, 0);
		if (tfd < 0)
			return entry_fail(ap, tfd, path, "resolving the hard link's target inside the root");
		struct stat ts;
		if (fstat(tfd, &ts) < 0)
			return entry_fail(ap, -errno, path, "fstat of the hard link's target");
		if (!S_ISREG(ts.st_mode) && !S_ISLNK(ts.st_mode))
			return entry_fail(ap, -EPERM, path, "hard link to something that is not a file");
		if (exists && (r = lbi_remove_at(pfd, name)) < 0)
			return entry_fail(ap, r, path, "removing what was there");
		/* Safe: tfd was resolved inside the root; AT_EMPTY_PATH links that very inode, no path re-resolved. */
		if (linkat(tfd, "", pfd, name, AT_EMPTY_PATH) < 0)
			return entry_fail(ap, -errno, path, "linkat");
		return 0;
	}

	switch (type) {
	case AE_IFDIR: {
		if (exists && !S_ISDIR(old.st_mode) && (r = lbi_remove_at(pfd, name)) < 0)
			return entry_fail(ap, r, path, "removing what was there");
		if ((!exists || !S_ISDIR(old.st_mode)) && mkdirat(pfd, name, 0700) < 0)
			return entry_fail(ap, -errno, path, "mkdirat");
		_cleanup_close_ int fd = openat(pfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0)
			return entry_fail(ap, -errno, path, "opening the new directory");
		return set_owner_mode(ap, fd, e, path);
	}
	case AE_IFREG: {
		la_int64_t size = archive_entry_size(e);
		if (size < 0)
			return entry_fail(ap, -EINVAL, path, "negative size");
		if ((uint64_t)size > ap->limits->max_total_bytes - ap->st->total_bytes)
			return lb_error_setx(ap->err, EFBIG,
					     "%s: entry '%.200s' (%lld bytes) exceeds the %llu-byte bound", ap->what,
					     path, (long long)size, (unsigned long long)ap->limits->max_total_bytes);
		ap->st->total_bytes += (uint64_t)size;
		if (exists && (r = lbi_remove_at(pfd, name)) < 0)
			return entry_fail(ap, r, path, "removing what was there");
		_cleanup_close_ int fd = openat(pfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd < 0)
			return entry_fail(ap, -errno, path, "creating");
		r = write_file_data(ap, fd, path, size);
		if (r < 0)
			return r;
		r = set_owner_mode(ap, fd, e, path);
		if (r < 0)
			return r;
		struct timespec ts[2] = { { archive_entry_mtime(e), archive_entry_mtime_nsec(e) },
					  { archive_entry_mtime(e), archive_entry_mtime_nsec(e) } };
		if (futimens(fd, ts) < 0)
			return entry_fail(ap, -errno, path, "futimens");
		return 0;
	}
	case AE_IFLNK: {
		const char *target = archive_entry_symlink(e);
		if (!target || !*target)
			return entry_fail(ap, -EINVAL, path, "symlink without a target");
		if (strlen(target) > ap->limits->max_path_len)
			return entry_fail(ap, -ENAMETOOLONG, path, "symlink target too long");
		if (exists && (r = lbi_remove_at(pfd, name)) < 0)
			return entry_fail(ap, r, path, "removing what was there");
		if (symlinkat(target, pfd, name) < 0)
			return entry_fail(ap, -errno, path, "symlinkat");
		la_int64_t uid = archive_entry_uid(e), gid = archive_entry_gid(e);
		if (uid < 0 || uid >= 0xffffffffLL || gid < 0 || gid >= 0xffffffffLL)
			return entry_fail(ap, -EINVAL, path, "owner out of range");
		/* Safe: AT_SYMLINK_NOFOLLOW changes the link this import just made, never what it points to. */
		if (fchownat(pfd, name, (uid_t)uid, (gid_t)gid, AT_SYMLINK_NOFOLLOW) < 0)
			return entry_fail(ap, -errno, path, "fchownat");
		struct timespec ts[2] = { { archive_entry_mtime(e), archive_entry_mtime_nsec(e) },
					  { archive_entry_mtime(e), archive_entry_mtime_nsec(e) } };
		if (utimensat(pfd, name, ts, AT_SYMLINK_NOFOLLOW) < 0)
			return entry_fail(ap, -errno, path, "utimensat");
		return 0;
	}
	default:
		return entry_fail(ap, -EINVAL, path, "unsupported entry type");
	}
}

int lbi_layer_apply(int rootfd, int blobfd, const char *diff_id_hex, const char *what, const struct lb_image_limits *l,
		    struct lbi_unpack_stats *st, struct lb_error *err)
{
	struct stream s;
	int r = stream_open(&s, blobfd);
	if (r < 0) {
		stream_close(&s);
		return lb_error_set(err, r, "%s: opening the layer stream", what);
	}
	struct archive *a = archive_read_new();
	if (!a) {
		stream_close(&s);
		return lb_error_set(err, ENOMEM, "%s: archive_read_new", what);
	}
	archive_read_support_format_tar(a);
	archive_read_support_filter_none(a);
	struct applier ap = { .rootfd = rootfd, .a = a, .limits = l, .st = st, .err = err, .what = what };

	if (archive_read_open(a, &s, NULL, stream_read, NULL) != ARCHIVE_OK) {
		r = s.error ? lb_error_setx(err, -s.error, "%s: %s", what, s.error_what ? s.error_what : "stream")
			    : lb_error_setx(err, EBADMSG, "%s: not a tar archive: %s", what, archive_error_string(a));
		goto out;
	}
	for (;;) {
		struct archive_entry *e;
		int ar = archive_read_next_header(a, &e);
		if (ar == ARCHIVE_EOF)
			break;
		if (ar < ARCHIVE_WARN) {
			if (s.error)
				r = lb_error_setx(err, -s.error, "%s: %s", what,
						  s.error_what ? s.error_what : "stream");
			else
				r = lb_error_setx(err, EBADMSG, "%s: reading the tar: %s", what,
						  archive_error_string(a));
			goto out;
		}
		r = apply_entry(&ap, e);
		if (r < 0) {
			if (s.error) /* the stream failed while the entry's data was read: say why */
				r = lb_error_setx(err, -s.error, "%s: %s", what,
						  s.error_what ? s.error_what : "stream");
			goto out;
		}
	}
	/* Drain what follows the tar's end blocks so the diff_id covers the whole uncompressed stream. */
	for (;;) {
		ssize_t n = produce(&s);
		if (n < 0) {
			r = lb_error_setx(err, (int)-n, "%s: %s", what, s.error_what ? s.error_what : "stream");
			goto out;
		}
		if (n == 0)
			break;
		lbi_sha256_update(&s.diff, s.out, (size_t)n);
		s.out_total += (uint64_t)n;
	}
	char got[65];
	lbi_sha256_final(&s.diff, got);
	if (strcmp(got, diff_id_hex) != 0) {
		r = lb_error_setx(err, EBADMSG,
				  "%s: uncompressed content is sha256:%s but the config's diff_id is sha256:%s", what,
				  got, diff_id_hex);
		goto out;
	}
	r = 0;
out:
	archive_read_free(a);
	pathset_free(&ap.written);
	stream_close(&s);
	return r;
}

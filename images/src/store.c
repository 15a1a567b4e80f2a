/*
 * store.c — the image store: the import pipeline, names, listing, inspection and removal (layout in images.h).
 *
 * Runs as root in lensboxd or lensbox-image. The import reads top to bottom in the order it happens:
 *   1. stage: a directory layout is used in place; an archive's small entries go to tmp/stage-XXXXXX (source.c)
 *   2. plan: index/manifest/config read and verified, platform picked (manifest.c)
 *   3. dedupe: images/<config hex> already there -> only the name changes (a second import is instant)
 *   4. stage the archive's large blobs; for each layer in order: verify the blob (size + sha256), then apply it
 *      into tmp/import-XXXXXX/rootfs while checking its diff_id (layer.c)
 *   5. look for python3 and bash along the image's PATH, write image.json, syncfs, and rename the whole directory
 *      to images/<config hex>; losing a race to a concurrent import of the same image is fine
 *   6. point the name at it
 * Any failure removes the tmp directories, so nothing of a failed import remains and images/ only ever holds
 * complete trees.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <yajl/yajl_gen.h>
#include <yajl/yajl_tree.h>

#include "lb/cleanup.h"
#include "lb/fileio.h"

#include "internal.h"
#include "manifest.h"
#include "source.h"

#define IMAGE_JSON_MAX (1 << 20)

void lb_image_limits_default(struct lb_image_limits *l)
{
	l->max_total_bytes = 8ULL << 30;
	l->max_entries = 1000000;
	l->max_path_len = 4096;
	l->max_layers = 128;
	l->max_json_bytes = 4 << 20;
}

const char *lb_images_root(const struct lb_images *s)
{
	return s->root;
}

/* Removes tmp/<kind>-<pid>-XXXXXX directories whose process is gone (a crashed import or removal). A live
 * process's directory is never touched; a recycled pid only delays the cleanup. */
static void remove_stale_tmp(struct lb_images *s)
{
	_cleanup_close_ int tfd = openat(s->rootfd, "tmp", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (tfd < 0)
		return;
	DIR *d = fdopendir(dup(tfd));
	if (!d)
		return;
	struct dirent *de;
	while ((de = readdir(d))) {
		const char *dash = strchr(de->d_name, '-');
		if (!dash || de->d_name[0] == '.')
			continue;
		char *end;
		long pid = strtol(dash + 1, &end, 10);
		if (pid <= 0 || *end != '-' || pid > INT32_MAX)
			continue;
		if (kill((pid_t)pid, 0) < 0 && errno == ESRCH)
			(void)lbi_remove_at(tfd, de->d_name);
	}
	closedir(d);
}

int lb_images_open(const char *root, const struct lb_image_limits *limits, struct lb_images **ret, struct lb_error *err)
{
	if (!root || root[0] != '/')
		return lb_error_setx(err, EINVAL, "image root '%s' is not an absolute path", root ? root : "");
	int r = lb_mkdir_p(root, 0711);
	if (r < 0)
		return lb_error_set(err, r, "creating image root %s", root);
	_cleanup_free_ struct lb_images *s = calloc(1, sizeof(*s));
	if (!s || !(s->root = strdup(root))) {
		if (s)
			free(s->root); // NOLINT(clang-analyzer-unix.Malloc): s is _cleanup_free_
		return lb_error_set(err, ENOMEM, "image store");
	}
	s->rootfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (s->rootfd < 0) {
		r = -errno;
		free(s->root);
		// cppcheck-suppress memleak ; s is _cleanup_free_
		return lb_error_set(err, r, "opening image root %s", root);
	}
	static const char *const subdirs[] = { "images", "names", "tmp" };
	for (size_t i = 0; i < LB_ARRAY_SIZE(subdirs); i++) {
		if (mkdirat(s->rootfd, subdirs[i], 0711) < 0 && errno != EEXIST) {
			r = -errno;
			close(s->rootfd);
			free(s->root);
			return lb_error_set(err, r, "creating %s/%s", root, subdirs[i]);
		}
	}
	remove_stale_tmp(s);
	lbi_info_cache_init(&s->info_cache);
	if (limits)
		s->limits = *limits;
	else
		lb_image_limits_default(&s->limits);
	*ret = TAKE_PTR(s);
	return 0;
}

void lb_images_free(struct lb_images *s)
{
	if (!s)
		return;
	if (s->rootfd >= 0)
		close(s->rootfd);
	lbi_info_cache_free(&s->info_cache);
	free(s->root);
	free(s);
}

void lb_images_watch(struct lb_images *s, lb_image_watch_fn fn, void *userdata)
{
	s->watch = fn;
	s->watch_ud = userdata;
}

int lbi_watch(struct lb_images *s, enum lb_image_phase phase, const char *layer_hex, uint64_t done, uint64_t total)
{
	if (!s->watch)
		return 0;
	struct lb_image_progress p = { .phase = phase, .layer_hex = layer_hex, .done = done, .total = total };
	return s->watch(&p, s->watch_ud);
}

/* ---- image.json ---- */

static int gen_str(yajl_gen g, const char *s)
{
	return yajl_gen_string(g, (const unsigned char *)s, strlen(s)) == yajl_gen_status_ok ? 0 : -ENOMEM;
}

static int gen_kv(yajl_gen g, const char *k, const char *v)
{
	int r = gen_str(g, k);
	return r < 0 ? r : gen_str(g, v);
}

static int gen_ku(yajl_gen g, const char *k, uint64_t v)
{
	int r = gen_str(g, k);
	return r < 0 ? r : (yajl_gen_integer(g, (long long)v) == yajl_gen_status_ok ? 0 : -ENOMEM);
}

static int gen_kb(yajl_gen g, const char *k, bool v)
{
	int r = gen_str(g, k);
	return r < 0 ? r : (yajl_gen_bool(g, v) == yajl_gen_status_ok ? 0 : -ENOMEM);
}

static int write_image_json(int dirfd, const struct lbi_plan *p, const struct lbi_unpack_stats *st, bool py, bool sh)
{
	yajl_gen g = yajl_gen_alloc(NULL);
	if (!g)
		return -ENOMEM;
	yajl_gen_config(g, yajl_gen_beautify, 1);
	int r = 0;
	char digest[LB_DIGEST_MAX];
	yajl_gen_map_open(g);
	snprintf(digest, sizeof(digest), "sha256:%s", p->config_hex);
	r |= gen_kv(g, "config_digest", digest);
	if (p->manifest_hex[0])
		snprintf(digest, sizeof(digest), "sha256:%s", p->manifest_hex);
	else
		digest[0] = '\0';
	r |= gen_kv(g, "manifest_digest", digest);
	r |= gen_kv(g, "architecture", p->architecture);
	r |= gen_kv(g, "variant", p->variant);
	r |= gen_kv(g, "os", p->os);
	r |= gen_str(g, "env");
	yajl_gen_array_open(g);
	for (size_t i = 0; i < p->n_env; i++)
		r |= gen_str(g, p->env[i]);
	yajl_gen_array_close(g);
	r |= gen_kv(g, "working_dir", p->working_dir);
	r |= gen_ku(g, "size_bytes", st->total_bytes);
	r |= gen_ku(g, "entries", st->entries);
	r |= gen_ku(g, "skipped_special", st->skipped_special);
	r |= gen_ku(g, "stripped", st->stripped);
	r |= gen_kb(g, "has_python3", py);
	r |= gen_kb(g, "has_bash", sh);
	r |= gen_ku(g, "imported_at", (uint64_t)time(NULL));
	/* the blobs this image came from, so garbage collection knows which pulled blobs are still wanted */
	r |= gen_str(g, "blobs");
	yajl_gen_array_open(g);
	if (p->manifest_hex[0])
		r |= gen_str(g, p->manifest_hex);
	r |= gen_str(g, p->config_hex);
	for (size_t i = 0; i < p->n_layers; i++)
		if (p->layers[i].digest_hex[0])
			r |= gen_str(g, p->layers[i].digest_hex);
	yajl_gen_array_close(g);
	yajl_gen_map_close(g);
	const unsigned char *buf;
	size_t len;
	if (r == 0 && yajl_gen_get_buf(g, &buf, &len) == yajl_gen_status_ok) {
		_cleanup_close_ int fd = openat(dirfd, "image.json", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
		r = fd < 0 ? -errno : lb_write_all(fd, buf, len);
	} else {
		r = -ENOMEM;
	}
	yajl_gen_free(g);
	return r;
}

static yajl_val jget(yajl_val o, const char *k, yajl_type t)
{
	const char *path[] = { k, NULL };
	return yajl_tree_get(o, path, t);
}

static char *jstrdup(yajl_val o, const char *k)
{
	yajl_val v = jget(o, k, yajl_t_string);
	return strdup(v ? v->u.string : "");
}

int lbi_read_image_json(struct lb_images *s, const char *hex, struct lb_image_info **ret)
{
	char path[128];
	snprintf(path, sizeof(path), "images/%s/image.json", hex);
	_cleanup_free_ char *buf = NULL;
	size_t len;
	int r = lb_read_file_at(s->rootfd, path, IMAGE_JSON_MAX, &buf, &len);
	if (r < 0)
		return r;
	yajl_val o = yajl_tree_parse(buf, NULL, 0);
	if (!o)
		return -EBADMSG;
	struct lb_image_info *info = calloc(1, sizeof(*info));
	if (!info) {
		yajl_tree_free(o);
		return -ENOMEM;
	}
	yajl_val v;
	if ((v = jget(o, "config_digest", yajl_t_string)))
		snprintf(info->config_digest, sizeof(info->config_digest), "%s", v->u.string);
	if ((v = jget(o, "manifest_digest", yajl_t_string)))
		snprintf(info->manifest_digest, sizeof(info->manifest_digest), "%s", v->u.string);
	info->architecture = jstrdup(o, "architecture");
	info->variant = jstrdup(o, "variant");
	info->os = jstrdup(o, "os");
	info->working_dir = jstrdup(o, "working_dir");
	yajl_val env = jget(o, "env", yajl_t_array);
	size_t n = env ? env->u.array.len : 0;
	info->env = calloc(n + 1, sizeof(char *));
	for (size_t i = 0; info->env && i < n; i++)
		if (YAJL_IS_STRING(env->u.array.values[i]))
			info->env[info->n_env++] = strdup(env->u.array.values[i]->u.string);
	info->size_bytes = (v = jget(o, "size_bytes", yajl_t_number)) ? (uint64_t)YAJL_GET_INTEGER(v) : 0;
	info->entries = (v = jget(o, "entries", yajl_t_number)) ? (uint64_t)YAJL_GET_INTEGER(v) : 0;
	info->skipped_special = (v = jget(o, "skipped_special", yajl_t_number)) ? (uint64_t)YAJL_GET_INTEGER(v) : 0;
	info->stripped = (v = jget(o, "stripped", yajl_t_number)) ? (uint64_t)YAJL_GET_INTEGER(v) : 0;
	info->imported_at = (v = jget(o, "imported_at", yajl_t_number)) ? YAJL_GET_INTEGER(v) : 0;
	info->has_python3 = jget(o, "has_python3", yajl_t_true) != NULL;
	info->has_bash = jget(o, "has_bash", yajl_t_true) != NULL;
	lbi_usage_read(s, hex, info->imported_at, &info->pinned, &info->last_used);
	yajl_tree_free(o);
	if (asprintf(&info->rootfs, "%s/images/%s/rootfs", s->root, hex) < 0)
		info->rootfs = NULL;
	info->names = calloc(1, sizeof(char *));
	if (!info->architecture || !info->variant || !info->os || !info->working_dir || !info->env || !info->rootfs ||
	    !info->names) {
		lb_image_info_free(info);
		return -ENOMEM;
	}
	*ret = info;
	return 0;
}

/* image.json's content, from the cache while it is the same file (info.c); the usage records are read again
 * either way. *ret is the caller's, with no names. */
static int read_info(struct lb_images *s, const char *hex, struct lb_image_info **ret)
{
	char path[128];
	snprintf(path, sizeof(path), "images/%s/image.json", hex);
	struct stat st;
	if (fstatat(s->rootfd, path, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return -errno;
	struct lb_image_info *info = NULL;
	int r = lbi_info_cache_get(&s->info_cache, hex, &st, &info);
	if (r == 0) {
		lbi_usage_read(s, hex, info->imported_at, &info->pinned, &info->last_used);
		*ret = info;
		return 0;
	}
	if (r != -ENOENT)
		return r;
	if ((r = lbi_read_image_json(s, hex, &info)) < 0)
		return r;
	/* Keyed by the stat taken before the read: if the file was replaced in between, the next lookup sees another
	 * file and reads it again, so a stale entry only costs a miss. */
	lbi_info_cache_put(&s->info_cache, hex, &st, info);
	*ret = info;
	return 0;
}

/* ---- names ---- */

/* Names longer than a file name are refused before this is called; out has NAME_MAX + 1 bytes. */
static void name_to_file(const char *full, char *out, size_t outsz)
{
	size_t n = strnlen(full, outsz - 1);
	memcpy(out, full, n);
	out[n] = '\0';
	for (char *p = out; *p; p++)
		if (*p == '/')
			*p = '+';
}

/* Resolves a names/ entry to its config hex. */
int lbi_name_target(struct lb_images *s, const char *file, char hex[65])
{
	_cleanup_close_ int nfd = openat(s->rootfd, "names", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (nfd < 0)
		return -errno;
	char buf[128];
	ssize_t n = readlinkat(nfd, file, buf, sizeof(buf) - 1);
	if (n < 0)
		return -errno;
	buf[n] = '\0';
	if (strncmp(buf, "../images/", 10) != 0 || strlen(buf + 10) != 64 || strspn(buf + 10, "0123456789abcdef") != 64)
		return -EBADMSG;
	memcpy(hex, buf + 10, 65);
	return 0;
}

void lbi_unique_suffix(char *out, size_t size)
{
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	snprintf(out, size, "%d-%ld-%ld", (int)getpid(), (long)syscall(SYS_gettid), (long)now.tv_nsec);
}

static int set_name(struct lb_images *s, const char *name, const char *hex, struct lb_error *err)
{
	struct lb_image_ref ref;
	int r = lb_image_ref_parse(name, &ref, err);
	if (r < 0)
		return r;
	char file[NAME_MAX + 1], tmp[NAME_MAX + 1], target[128];
	if (strlen(ref.full) > NAME_MAX - 16)
		return lb_error_setx(err, ENAMETOOLONG, "image name %s is too long", ref.full);
	name_to_file(ref.full, file, sizeof(file));
	/* The temporary link's name is the calling thread's own: imports and tags run on several threads of one
	 * process at once, and a name shared by two of them lets one unlink or rename the other's link. */
	char suffix[64];
	lbi_unique_suffix(suffix, sizeof(suffix));
	snprintf(tmp, sizeof(tmp), ".tmp-%s", suffix);
	snprintf(target, sizeof(target), "../images/%s", hex);
	_cleanup_close_ int nfd = openat(s->rootfd, "names", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (nfd < 0)
		return lb_error_set(err, errno, "opening %s/names", s->root);
	unlinkat(nfd, tmp, 0);
	if (symlinkat(target, nfd, tmp) < 0)
		return lb_error_set(err, errno, "naming image %s", ref.full);
	if (renameat(nfd, tmp, nfd, file) < 0) {
		r = -errno;
		unlinkat(nfd, tmp, 0);
		return lb_error_set(err, r, "naming image %s", ref.full);
	}
	return 0;
}

/* Collects the names pointing at hex into info->names. */
static int collect_names(struct lb_images *s, const char *hex, struct lb_image_info *info)
{
	_cleanup_close_ int nfd = openat(s->rootfd, "names", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (nfd < 0)
		return -errno;
	DIR *d = fdopendir(nfd);
	if (!d)
		return -errno;
	nfd = -1; // NOLINT(clang-analyzer-deadcode.DeadStores): _cleanup_close_ reads it
	_cleanup_closedir_ DIR *dir = d;
	struct dirent *de;
	while ((de = readdir(dir))) {
		char h[65];
		if (de->d_name[0] == '.' || lbi_name_target(s, de->d_name, h) < 0 || strcmp(h, hex) != 0)
			continue;
		char **nv = realloc(info->names, (info->n_names + 2) * sizeof(char *));
		if (!nv)
			return -ENOMEM;
		info->names = nv;
		char *n = strdup(de->d_name);
		if (!n)
			return -ENOMEM;
		for (char *p = n; *p; p++)
			if (*p == '+')
				*p = '/';
		info->names[info->n_names++] = n;
		info->names[info->n_names] = NULL;
	}
	return 0;
}

static bool image_present(struct lb_images *s, const char *hex)
{
	char path[128];
	snprintf(path, sizeof(path), "images/%s/image.json", hex);
	return faccessat(s->rootfd, path, F_OK, 0) == 0;
}

/* ---- import ---- */

/* true when PATH (from the image's Env, or the default) has an executable regular file named prog in the tree. */
static bool has_program(int treefd, char *const *env, const char *prog)
{
	const char *path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
	for (char *const *e = env; e && *e; e++)
		if (!strncmp(*e, "PATH=", 5))
			path = *e + 5;
	const char *p = path;
	while (*p) {
		const char *end = strchrnul(p, ':');
		char candidate[PATH_MAX];
		if (end > p && snprintf(candidate, sizeof(candidate), "%.*s/%s", (int)(end - p), p, prog) <
				   (int)sizeof(candidate)) {
			int fd = lbi_open_in_root(treefd, candidate, O_PATH, 0);
			if (fd >= 0) {
				struct stat st;
				bool ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 0111);
				close(fd);
				if (ok)
					return true;
			}
		}
		p = *end ? end + 1 : end;
	}
	return false;
}

/* A private directory under tmp/; *ret_name is its name there. */
int lbi_make_tmp(struct lb_images *s, const char *prefix, char *ret_name, size_t size, struct lb_error *err)
{
	char path[PATH_MAX];
	if (snprintf(path, sizeof(path), "%s/tmp/%s-%d-XXXXXX", s->root, prefix, (int)getpid()) >= (int)sizeof(path))
		return lb_error_setx(err, ENAMETOOLONG, "image root path too long");
	if (!mkdtemp(path))
		return lb_error_set(err, errno, "creating a temporary directory under %s/tmp", s->root);
	snprintf(ret_name, size, "%s", strrchr(path, '/') + 1);
	return 0;
}

void lbi_remove_tmp(struct lb_images *s, const char *name)
{
	if (!name[0])
		return;
	_cleanup_close_ int tfd = openat(s->rootfd, "tmp", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (tfd >= 0)
		(void)lbi_remove_at(tfd, name);
}

static int open_tmp_child(struct lb_images *s, const char *name, int flags)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "tmp/%s", name);
	int fd = openat(s->rootfd, path, flags | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

static int unpack_plan(struct lb_images *s, int layoutfd, const struct lbi_plan *p, const char *tmpname,
		       struct lb_error *err)
{
	_cleanup_close_ int dirfd = open_tmp_child(s, tmpname, O_RDONLY);
	if (dirfd < 0)
		return lb_error_set(err, dirfd, "opening %s/tmp/%s", s->root, tmpname);
	if (mkdirat(dirfd, "rootfs", 0755) < 0)
		return lb_error_set(err, errno, "creating the rootfs directory");
	_cleanup_close_ int treefd = openat(dirfd, "rootfs", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (treefd < 0)
		return lb_error_set(err, errno, "opening the rootfs directory");
	/* mkdtemp made it 0700 and the umask may have trimmed rootfs: the tree must be reachable by sandboxes. */
	if (fchmod(dirfd, 0755) < 0 || fchmod(treefd, 0755) < 0)
		return lb_error_set(err, errno, "chmod of the new image directory");

	struct lbi_unpack_stats st = { 0 };
	for (size_t i = 0; i < p->n_layers; i++) {
		const struct lbi_layer *ly = &p->layers[i];
		char what[160];
		if (ly->digest_hex[0])
			snprintf(what, sizeof(what), "layer %zu (sha256:%.64s)", i, ly->digest_hex);
		else
			snprintf(what, sizeof(what), "layer %zu (%.100s)", i, ly->path);
		if (lbi_watch(s, LB_IMAGE_UNPACKING, ly->digest_hex, 0, ly->size))
			return lb_error_setx(err, ECANCELED, "cancelled before %s", what);
		_cleanup_close_ int bfd = lbi_open_in_root(layoutfd, ly->path, O_RDONLY, 0);
		if (bfd < 0)
			return lb_error_set(err, bfd, "%s: opening the blob", what);
		if (ly->digest_hex[0]) {
			char got[65];
			uint64_t size = 0;
			int r = lbi_sha256_fd(bfd, ly->size, got, &size);
			if (r == -EFBIG || (r == 0 && size != ly->size))
				return lb_error_setx(err, EBADMSG,
						     "%s: blob size differs from its descriptor's %llu bytes", what,
						     (unsigned long long)ly->size);
			if (r < 0)
				return lb_error_set(err, r, "%s: hashing the blob", what);
			if (strcmp(got, ly->digest_hex) != 0)
				return lb_error_setx(err, EBADMSG, "%s: blob content is sha256:%s", what, got);
		}
		int r = lbi_layer_apply(treefd, bfd, ly->diff_hex, what, &s->limits, &st, err);
		if (r < 0)
			return r;
		if (lbi_watch(s, LB_IMAGE_UNPACKING, ly->digest_hex, ly->size, ly->size))
			return lb_error_setx(err, ECANCELED, "cancelled after %s", what);
	}
	bool py = has_program(treefd, p->env, "python3"), sh = has_program(treefd, p->env, "bash");
	int r = write_image_json(dirfd, p, &st, py, sh);
	if (r < 0)
		return lb_error_set(err, r, "writing image.json");
	/* The rename below publishes the tree: make it durable first, so a crash never exposes empty files. */
	if (syncfs(dirfd) < 0)
		return lb_error_set(err, errno, "syncfs");
	return 0;
}

int lbi_store_publish(struct lb_images *s, int layoutfd, const struct lbi_plan *plan, const char *name,
		      struct lb_image_info **ret_info, struct lb_error *err)
{
	char work[64] = "";
	int r;
	if (!image_present(s, plan->config_hex)) {
		r = lbi_make_tmp(s, "import", work, sizeof(work), err);
		if (r < 0)
			goto out;
		r = unpack_plan(s, layoutfd, plan, work, err);
		if (r < 0)
			goto out;
		char from[128], to[128];
		snprintf(from, sizeof(from), "tmp/%s", work);
		snprintf(to, sizeof(to), "images/%s", plan->config_hex);
		if (renameat(s->rootfd, from, s->rootfd, to) < 0) {
			if (errno != EEXIST && errno != ENOTEMPTY) {
				r = lb_error_set(err, errno, "publishing images/%s", plan->config_hex);
				goto out;
			}
			/* A concurrent import of the same image won: its tree is identical by construction. */
		} else {
			work[0] = '\0';
		}
	}
	if (name) {
		r = set_name(s, name, plan->config_hex, err);
		if (r < 0)
			goto out;
	}
	char digest[LB_DIGEST_MAX];
	snprintf(digest, sizeof(digest), "sha256:%s", plan->config_hex);
	r = lb_image_touch(s, digest, err);
	if (r < 0)
		goto out;
	if (ret_info) {
		struct lb_image_info *info = NULL;
		r = lbi_read_image_json(s, plan->config_hex, &info);
		if (r < 0) {
			r = lb_error_set(err, r, "reading images/%s/image.json", plan->config_hex);
			goto out;
		}
		r = collect_names(s, plan->config_hex, info);
		if (r < 0) {
			lb_image_info_free(info);
			r = lb_error_set(err, r, "listing names");
			goto out;
		}
		*ret_info = info;
	}
	r = 0;
out:
	lbi_remove_tmp(s, work);
	return r;
}

int lb_image_import(struct lb_images *s, const char *path, const char *ref_name, const char *name,
		    struct lb_image_info **ret_info, struct lb_error *err)
{
	struct stat st;
	if (stat(path, &st) < 0)
		return lb_error_set(err, errno, "importing %s", path);
	if (name) {
		struct lb_image_ref ref;
		int r = lb_image_ref_parse(name, &ref, err);
		if (r < 0)
			return r;
	}

	char stage[64] = "";
	_cleanup_close_ int layoutfd = -1;
	struct lbi_plan plan = { 0 };
	int r;
	if (lbi_watch(s, LB_IMAGE_RESOLVING, "", 0, 0))
		return lb_error_setx(err, ECANCELED, "importing %s: cancelled", path);
	if (S_ISDIR(st.st_mode)) {
		layoutfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (layoutfd < 0)
			return lb_error_set(err, errno, "opening %s", path);
	} else if (S_ISREG(st.st_mode)) {
		r = lbi_make_tmp(s, "stage", stage, sizeof(stage), err);
		if (r < 0)
			return r;
		layoutfd = open_tmp_child(s, stage, O_RDONLY);
		if (layoutfd < 0) {
			r = lb_error_set(err, layoutfd, "opening the staging directory");
			goto out;
		}
		r = lbi_source_extract(path, layoutfd, s->limits.max_json_bytes, false, &s->limits, err);
		if (r < 0)
			goto out;
	} else {
		return lb_error_setx(err, EINVAL, "%s is neither a directory nor a file", path);
	}

	r = lbi_plan_load(layoutfd, ref_name, &s->limits, &plan, err);
	if (r < 0)
		goto out;
	if (stage[0] && !image_present(s, plan.config_hex)) {
		if (lbi_watch(s, LB_IMAGE_EXTRACTING, "", 0, (uint64_t)st.st_size)) {
			r = lb_error_setx(err, ECANCELED, "importing %s: cancelled", path);
			goto out;
		}
		r = lbi_source_extract(path, layoutfd, s->limits.max_json_bytes, true, &s->limits, err);
		if (r < 0)
			goto out;
	}
	r = lbi_store_publish(s, layoutfd, &plan, name, ret_info, err);
	if (r < 0)
		goto out;
	r = 0;
out:
	lbi_plan_free(&plan);
	lbi_remove_tmp(s, stage);
	return r;
}

/* ---- lookup, list, tag, remove ---- */

int lbi_resolve_ref(struct lb_images *s, const char *ref, char hex[65], char *ret_name_file, size_t nsize,
		    struct lb_error *err)
{
	if (ret_name_file)
		ret_name_file[0] = '\0';
	if (!strncmp(ref, "sha256:", 7)) {
		if (lbi_digest_hex(ref, hex) < 0)
			return lb_error_setx(err, EINVAL, "'%.100s' is not a sha256 digest", ref);
		if (!image_present(s, hex))
			return lb_error_setx(err, ENOENT, "no image with config digest %s", ref);
		return 0;
	}
	size_t len = strlen(ref);
	if (len >= 12 && len <= 64 && strspn(ref, "0123456789abcdef") == len) {
		_cleanup_close_ int ifd = openat(s->rootfd, "images", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		DIR *d = ifd >= 0 ? fdopendir(ifd) : NULL;
		if (!d)
			return lb_error_set(err, errno, "listing %s/images", s->root);
		ifd = -1; // NOLINT(clang-analyzer-deadcode.DeadStores): _cleanup_close_ reads it
		_cleanup_closedir_ DIR *dir = d;
		struct dirent *de;
		int found = 0;
		while ((de = readdir(dir)))
			if (strlen(de->d_name) == 64 && !strncmp(de->d_name, ref, len)) {
				memcpy(hex, de->d_name, 65);
				found++;
			}
		if (found == 1 && image_present(s, hex))
			return 0;
		if (found > 1)
			return lb_error_setx(err, EINVAL, "digest prefix %s is ambiguous", ref);
	}
	struct lb_image_ref r;
	int rr = lb_image_ref_parse(ref, &r, err);
	if (rr < 0)
		return rr;
	char file[NAME_MAX + 1];
	name_to_file(r.full, file, sizeof(file));
	rr = lbi_name_target(s, file, hex);
	if (rr < 0 || !image_present(s, hex))
		return lb_error_setx(err, ENOENT, "no image named %s", r.full);
	if (ret_name_file)
		snprintf(ret_name_file, nsize, "%s", file);
	return 0;
}

static int inspect(struct lb_images *s, const char *ref, bool names, struct lb_image_info **ret_info,
		   struct lb_error *err)
{
	char hex[65];
	int r = lbi_resolve_ref(s, ref, hex, NULL, 0, err);
	if (r < 0)
		return r;
	struct lb_image_info *info = NULL;
	r = read_info(s, hex, &info);
	if (r < 0)
		return lb_error_set(err, r, "reading images/%s/image.json", hex);
	r = names ? collect_names(s, hex, info) : 0;
	if (r < 0) {
		lb_image_info_free(info);
		return lb_error_set(err, r, "listing names");
	}
	*ret_info = info;
	return 0;
}

int lb_image_inspect(struct lb_images *s, const char *ref, struct lb_image_info **ret_info, struct lb_error *err)
{
	return inspect(s, ref, true, ret_info, err);
}

int lb_image_inspect_content(struct lb_images *s, const char *ref, struct lb_image_info **ret_info,
			     struct lb_error *err)
{
	return inspect(s, ref, false, ret_info, err);
}

int lb_image_list(struct lb_images *s, struct lb_image_info ***ret_list, size_t *ret_n, struct lb_error *err)
{
	_cleanup_close_ int ifd = openat(s->rootfd, "images", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = ifd >= 0 ? fdopendir(ifd) : NULL;
	if (!d)
		return lb_error_set(err, errno, "listing %s/images", s->root);
	ifd = -1; // NOLINT(clang-analyzer-deadcode.DeadStores): _cleanup_close_ reads it
	_cleanup_closedir_ DIR *dir = d;
	struct lb_image_info **list = NULL;
	size_t n = 0;
	struct dirent *de;
	while ((de = readdir(dir))) {
		if (strlen(de->d_name) != 64 || !image_present(s, de->d_name))
			continue;
		struct lb_image_info *info = NULL;
		int r = read_info(s, de->d_name, &info);
		if (r == 0)
			r = collect_names(s, de->d_name, info);
		// NOLINTNEXTLINE(bugprone-sizeof-expression): list is an array of pointers
		struct lb_image_info **nl = r == 0 ? realloc(list, (n + 1) * sizeof(*list)) : NULL;
		if (!nl) {
			lb_image_info_free(info);
			lb_image_list_free(list, n);
			return lb_error_set(err, r < 0 ? r : -ENOMEM, "reading images/%s", de->d_name);
		}
		list = nl;
		list[n++] = info;
	}
	*ret_list = list;
	*ret_n = n;
	return 0;
}

int lb_image_tag(struct lb_images *s, const char *ref, const char *name, struct lb_error *err)
{
	char hex[65];
	int r = lbi_resolve_ref(s, ref, hex, NULL, 0, err);
	if (r < 0)
		return r;
	return set_name(s, name, hex, err);
}

int lbi_remove_image(struct lb_images *s, const char *hex, struct lb_error *err)
{
	_cleanup_close_ int nfd = openat(s->rootfd, "names", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (nfd < 0)
		return lb_error_set(err, errno, "opening %s/names", s->root);
	/* Remove every name of the image, then the image itself (renamed away first so it vanishes at once). */
	DIR *d = fdopendir(dup(nfd));
	if (d) {
		struct dirent *de;
		while ((de = readdir(d))) {
			char h[65];
			if (de->d_name[0] != '.' && lbi_name_target(s, de->d_name, h) == 0 && !strcmp(h, hex))
				unlinkat(nfd, de->d_name, 0);
		}
		closedir(d);
	}
	char tmpname[64], from[128], to[128];
	int r = lbi_make_tmp(s, "rm", tmpname, sizeof(tmpname), err);
	if (r < 0)
		return r;
	snprintf(from, sizeof(from), "images/%s", hex);
	snprintf(to, sizeof(to), "tmp/%s/image", tmpname);
	if (renameat(s->rootfd, from, s->rootfd, to) < 0) {
		r = -errno;
		lbi_remove_tmp(s, tmpname);
		return lb_error_set(err, r, "removing images/%s", hex);
	}
	lbi_remove_tmp(s, tmpname);
	return 0;
}

int lb_image_remove(struct lb_images *s, const char *ref, bool (*in_use)(const char *config_digest, void *userdata),
		    void *userdata, struct lb_error *err)
{
	char hex[65], file[NAME_MAX + 1];
	int r = lbi_resolve_ref(s, ref, hex, file, sizeof(file), err);
	if (r < 0)
		return r;
	struct lb_image_info *probe = calloc(1, sizeof(*probe));
	if (!probe || !(probe->names = calloc(1, sizeof(char *)))) {
		lb_image_info_free(probe);
		return lb_error_set(err, ENOMEM, "removing %s", ref);
	}
	r = collect_names(s, hex, probe);
	size_t n_names = probe->n_names;
	lb_image_info_free(probe);
	if (r < 0)
		return lb_error_set(err, r, "listing names");

	char digest[LB_DIGEST_MAX];
	snprintf(digest, sizeof(digest), "sha256:%s", hex);
	bool last = !file[0] || n_names <= 1;
	if (last && in_use && in_use(digest, userdata))
		return lb_error_setx(err, EBUSY, "image %s (%s) is in use by a sandbox", ref, digest);

	_cleanup_close_ int nfd = openat(s->rootfd, "names", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (nfd < 0)
		return lb_error_set(err, errno, "opening %s/names", s->root);
	if (!last) {
		if (unlinkat(nfd, file, 0) < 0)
			return lb_error_set(err, errno, "removing name %s", ref);
		return 0;
	}
	return lbi_remove_image(s, hex, err);
}

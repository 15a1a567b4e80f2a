/*
 * manifest.c — turns an image layout (OCI index.json or `docker save`'s manifest.json) into a verified plan: which
 * manifest, which config, which layer blobs in which order, and each layer's diff_id.
 *
 * Runs in the importing process; no privilege used (it only reads the unpacked layout through lbi_open_in_root, so
 * names in manifest.json cannot reach outside the layout). Documents are hostile: each is read with a size bound,
 * checked for nesting depth before yajl builds a tree (yajl frees trees recursively), and every blob read is checked
 * against its descriptor's sha256 and size before it is parsed.
 *
 * Platform choice: an index may hold several manifests and nested indexes. A manifest is a candidate when its
 * platform is absent or linux/<host arch> (arm64 accepts variant "v8" or none); attestation manifests
 * (vnd.docker.reference.type = attestation-manifest) are skipped. ref_name, when given, must equal the top-level
 * descriptor's org.opencontainers.image.ref.name (OCI) or one of the RepoTags (docker save). The config's own
 * architecture must match the host too, so an untagged foreign image is refused rather than run.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <yajl/yajl_tree.h>

#include "lb/cleanup.h"
#include "lb/fileio.h"

#include "manifest.h"

#define MT_OCI_INDEX	   "application/vnd.oci.image.index.v1+json"
#define MT_OCI_MANIFEST	   "application/vnd.oci.image.manifest.v1+json"
#define MT_DOCKER_LIST	   "application/vnd.docker.distribution.manifest.list.v2+json"
#define MT_DOCKER_MANIFEST "application/vnd.docker.distribution.manifest.v2+json"

#if defined(__x86_64__)
#define HOST_ARCH    "amd64"
#define HOST_VARIANT ""
#elif defined(__aarch64__)
#define HOST_ARCH    "arm64"
#define HOST_VARIANT "v8"
#else
#error "lensbox images: unsupported host architecture"
#endif

const char *lbi_host_arch(void)
{
	return HOST_ARCH;
}

static void yajl_freep(yajl_val *v)
{
	if (*v)
		yajl_tree_free(*v);
}
#define _cleanup_yajl_ __attribute__((cleanup(yajl_freep)))

/* Refuses documents nested deeper than 64 levels before yajl sees them. */
static bool depth_ok(const char *s, size_t len)
{
	int depth = 0;
	bool in_str = false;
	for (size_t i = 0; i < len; i++) {
		char c = s[i];
		if (in_str) {
			if (c == '\\')
				i++;
			else if (c == '"')
				in_str = false;
			continue;
		}
		if (c == '"')
			in_str = true;
		else if (c == '{' || c == '[') {
			if (++depth > 64)
				return false;
		} else if (c == '}' || c == ']')
			depth--;
	}
	return true;
}

/* Reads dirfd/path (resolved inside dirfd) into a NUL-terminated buffer of at most max bytes. */
static int read_in(int dirfd, const char *path, uint64_t max, char **ret, size_t *ret_len)
{
	_cleanup_close_ int fd = lbi_open_in_root(dirfd, path, O_RDONLY, 0);
	if (fd < 0)
		return fd;
	return lb_read_fd(fd, (size_t)max, ret, ret_len);
}

static int parse_json(const char *buf, size_t len, const char *what, yajl_val *ret, struct lb_error *err)
{
	if (strlen(buf) != len)
		return lb_error_setx(err, EBADMSG, "%s: NUL byte in the document", what);
	if (!depth_ok(buf, len))
		return lb_error_setx(err, EBADMSG, "%s: nested too deeply", what);
	char ebuf[256];
	yajl_val v = yajl_tree_parse(buf, ebuf, sizeof(ebuf));
	if (!v)
		return lb_error_setx(err, EBADMSG, "%s: invalid JSON: %.200s", what, ebuf);
	if (!YAJL_IS_OBJECT(v) && !YAJL_IS_ARRAY(v)) {
		yajl_tree_free(v);
		return lb_error_setx(err, EBADMSG, "%s: not a JSON object", what);
	}
	*ret = v;
	return 0;
}

static yajl_val get(yajl_val obj, const char *key)
{
	if (!YAJL_IS_OBJECT(obj))
		return NULL;
	for (size_t i = 0; i < obj->u.object.len; i++)
		if (!strcmp(obj->u.object.keys[i], key))
			return obj->u.object.values[i];
	return NULL;
}

static const char *get_str(yajl_val obj, const char *key)
{
	yajl_val v = get(obj, key);
	return YAJL_IS_STRING(v) ? v->u.string : NULL;
}

/* A descriptor: digest (validated), size (non-negative integer) and media type. */
struct desc {
	char hex[65];
	uint64_t size;
	const char *media_type;
};

static int parse_desc(yajl_val d, const char *what, struct desc *ret, struct lb_error *err)
{
	*ret = (struct desc){ 0 };
	const char *digest = get_str(d, "digest");
	yajl_val size = get(d, "size");
	if (!digest || lbi_digest_hex(digest, ret->hex) < 0)
		return lb_error_setx(err, EBADMSG, "%s: missing or unsupported digest (only sha256)", what);
	if (!YAJL_IS_INTEGER(size) || YAJL_GET_INTEGER(size) < 0)
		return lb_error_setx(err, EBADMSG, "%s: descriptor size missing or negative", what);
	ret->size = (uint64_t)YAJL_GET_INTEGER(size);
	ret->media_type = get_str(d, "mediaType");
	return 0;
}

/* Reads blobs/sha256/<hex>, checks size and sha256 against the descriptor, and parses it. */
static int read_verified_json(int layoutfd, const struct desc *d, uint64_t max, const char *what, char *ret_hex_copy,
			      yajl_val *ret, struct lb_error *err)
{
	char path[100];
	snprintf(path, sizeof(path), "blobs/sha256/%s", d->hex);
	if (d->size > max)
		return lb_error_setx(err, EFBIG, "%s sha256:%s: %llu bytes exceeds the %llu-byte bound", what, d->hex,
				     (unsigned long long)d->size, (unsigned long long)max);
	_cleanup_free_ char *buf = NULL;
	size_t len = 0;
	int r = read_in(layoutfd, path, max, &buf, &len);
	if (r < 0)
		return lb_error_set(err, r, "%s sha256:%s: reading the blob", what, d->hex);
	char got[65];
	r = lbi_sha256_buf(buf, len, got);
	if (r < 0)
		return lb_error_set(err, r, "%s: sha256", what);
	if (len != d->size || strcmp(got, d->hex) != 0)
		return lb_error_setx(err, EBADMSG,
				     "%s sha256:%s: blob does not match its descriptor (%zu bytes, sha256:%s)", what,
				     d->hex, len, got);
	if (ret_hex_copy)
		memcpy(ret_hex_copy, d->hex, 65);
	return parse_json(buf, len, what, ret, err);
}

static bool platform_ok(yajl_val platform)
{
	if (!platform)
		return true;
	const char *os = get_str(platform, "os"), *arch = get_str(platform, "architecture");
	const char *variant = get_str(platform, "variant");
	if (!os || !arch || strcmp(os, "linux") != 0 || strcmp(arch, HOST_ARCH) != 0)
		return false;
	return !variant || !*variant || !strcmp(variant, HOST_VARIANT);
}

static bool is_attestation(yajl_val d)
{
	const char *t = get_str(get(d, "annotations"), "vnd.docker.reference.type");
	return t && !strcmp(t, "attestation-manifest");
}

static int str_dup_to(char **dst, const char *s)
{
	*dst = strdup(s ? s : "");
	return *dst ? 0 : -ENOMEM;
}

static int parse_config(yajl_val cfg, size_t n_layers, struct lbi_plan *p, struct lb_error *err)
{
	const char *arch = get_str(cfg, "architecture"), *os = get_str(cfg, "os");
	if (!arch || !os)
		return lb_error_setx(err, EBADMSG, "config sha256:%s: no architecture or os", p->config_hex);
	if (strcmp(os, "linux") != 0 || strcmp(arch, HOST_ARCH) != 0)
		return lb_error_setx(err, ENOENT,
				     "config sha256:%s: the image is for %.32s/%.32s, this host is linux/%s",
				     p->config_hex, os, arch, HOST_ARCH);
	if (str_dup_to(&p->architecture, arch) < 0 || str_dup_to(&p->os, os) < 0 ||
	    str_dup_to(&p->variant, get_str(cfg, "variant")) < 0)
		return lb_error_set(err, ENOMEM, "config");
	yajl_val c = get(cfg, "config");
	if (str_dup_to(&p->working_dir, get_str(c, "WorkingDir")) < 0)
		return lb_error_set(err, ENOMEM, "config");
	if (strlen(p->working_dir) > 4096 || (*p->working_dir && p->working_dir[0] != '/'))
		return lb_error_setx(err, EBADMSG, "config sha256:%s: WorkingDir is not an absolute path",
				     p->config_hex);
	yajl_val env = get(c, "Env");
	size_t n_env = YAJL_IS_ARRAY(env) ? env->u.array.len : 0;
	if (n_env > 1024)
		return lb_error_setx(err, E2BIG, "config sha256:%s: more than 1024 Env entries", p->config_hex);
	p->env = calloc(n_env + 1, sizeof(char *));
	if (!p->env)
		return lb_error_set(err, ENOMEM, "config");
	for (size_t i = 0; i < n_env; i++) {
		yajl_val v = env->u.array.values[i];
		if (!YAJL_IS_STRING(v) || !strchr(v->u.string, '=') || v->u.string[0] == '=' ||
		    strlen(v->u.string) > 32768)
			return lb_error_setx(err, EBADMSG, "config sha256:%s: Env[%zu] is not KEY=VALUE", p->config_hex,
					     i);
		if (!(p->env[p->n_env++] = strdup(v->u.string)))
			return lb_error_set(err, ENOMEM, "config");
	}

	yajl_val rootfs = get(cfg, "rootfs");
	const char *type = get_str(rootfs, "type");
	yajl_val diff_ids = get(rootfs, "diff_ids");
	if (!type || strcmp(type, "layers") != 0 || !YAJL_IS_ARRAY(diff_ids))
		return lb_error_setx(err, EBADMSG, "config sha256:%s: rootfs is not {type: layers, diff_ids}",
				     p->config_hex);
	if (diff_ids->u.array.len != n_layers)
		return lb_error_setx(err, EBADMSG, "config sha256:%s: %zu diff_ids for %zu layers", p->config_hex,
				     diff_ids->u.array.len, n_layers);
	for (size_t i = 0; i < n_layers; i++) {
		yajl_val v = diff_ids->u.array.values[i];
		if (!YAJL_IS_STRING(v) || lbi_digest_hex(v->u.string, p->layers[i].diff_hex) < 0)
			return lb_error_setx(err, EBADMSG, "config sha256:%s: diff_ids[%zu] is not a sha256 digest",
					     p->config_hex, i);
	}
	return 0;
}

static bool layer_media_type_ok(const char *mt)
{
	static const char *const ok[] = {
		"application/vnd.oci.image.layer.v1.tar",	"application/vnd.oci.image.layer.v1.tar+gzip",
		"application/vnd.oci.image.layer.v1.tar+zstd",	"application/vnd.docker.image.rootfs.diff.tar.gzip",
		"application/vnd.docker.image.rootfs.diff.tar",
	};
	if (!mt)
		return true; /* the bytes' magic decides the codec */
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
		if (!strcmp(mt, ok[i]))
			return true;
	return false;
}

static int plan_from_manifest(int layoutfd, const struct desc *md, const struct lb_image_limits *l, struct lbi_plan *p,
			      struct lb_error *err)
{
	_cleanup_yajl_ yajl_val m = NULL;
	int r = read_verified_json(layoutfd, md, l->max_json_bytes, "manifest", p->manifest_hex, &m, err);
	if (r < 0)
		return r;
	struct desc cd;
	r = parse_desc(get(m, "config"), "manifest config descriptor", &cd, err);
	if (r < 0)
		return r;
	yajl_val layers = get(m, "layers");
	if (!YAJL_IS_ARRAY(layers) || layers->u.array.len == 0)
		return lb_error_setx(err, EBADMSG, "manifest sha256:%s: no layers", md->hex);
	if (layers->u.array.len > l->max_layers)
		return lb_error_setx(err, E2BIG, "manifest sha256:%s: %zu layers exceeds the bound of %llu", md->hex,
				     layers->u.array.len, (unsigned long long)l->max_layers);
	p->n_layers = layers->u.array.len;
	p->layers = calloc(p->n_layers, sizeof(*p->layers));
	if (!p->layers)
		return lb_error_set(err, ENOMEM, "manifest");
	for (size_t i = 0; i < p->n_layers; i++) {
		struct desc ld;
		r = parse_desc(layers->u.array.values[i], "layer descriptor", &ld, err);
		if (r < 0)
			return r;
		if (!layer_media_type_ok(ld.media_type))
			return lb_error_setx(err, EBADMSG, "layer sha256:%s: unsupported media type %.120s", ld.hex,
					     ld.media_type);
		memcpy(p->layers[i].digest_hex, ld.hex, 65);
		p->layers[i].size = ld.size;
		snprintf(p->layers[i].path, sizeof(p->layers[i].path), "blobs/sha256/%s", ld.hex);
	}
	_cleanup_yajl_ yajl_val cfg = NULL;
	r = read_verified_json(layoutfd, &cd, l->max_json_bytes, "config", p->config_hex, &cfg, err);
	if (r < 0)
		return r;
	return parse_config(cfg, p->n_layers, p, err);
}

/* Depth-first through (nested) indexes: the first manifest for this platform (and ref_name at the top). */
static int pick_from_index(int layoutfd, yajl_val index, const char *ref_name, unsigned depth,
			   const struct lb_image_limits *l, struct desc *ret, struct lb_error *err)
{
	if (depth > 4)
		return lb_error_setx(err, EBADMSG, "index: nested more than 4 deep");
	yajl_val ms = get(index, "manifests");
	if (!YAJL_IS_ARRAY(ms))
		return lb_error_setx(err, EBADMSG, "index: no manifests array");
	for (size_t i = 0; i < ms->u.array.len; i++) {
		yajl_val d = ms->u.array.values[i];
		if (ref_name && depth == 0) {
			const char *rn = get_str(get(d, "annotations"), "org.opencontainers.image.ref.name");
			if (!rn || strcmp(rn, ref_name) != 0)
				continue;
		}
		if (is_attestation(d) || !platform_ok(get(d, "platform")))
			continue;
		struct desc dd;
		int r = parse_desc(d, "index entry", &dd, err);
		if (r < 0)
			return r;
		if (dd.media_type && (!strcmp(dd.media_type, MT_OCI_INDEX) || !strcmp(dd.media_type, MT_DOCKER_LIST))) {
			_cleanup_yajl_ yajl_val sub = NULL;
			r = read_verified_json(layoutfd, &dd, l->max_json_bytes, "nested index", NULL, &sub, err);
			if (r < 0)
				return r;
			r = pick_from_index(layoutfd, sub, NULL, depth + 1, l, ret, err);
			if (r != -ENOENT)
				return r;
			continue;
		}
		if (dd.media_type && strcmp(dd.media_type, MT_OCI_MANIFEST) != 0 &&
		    strcmp(dd.media_type, MT_DOCKER_MANIFEST) != 0)
			continue;
		*ret = dd;
		return 0;
	}
	return -ENOENT;
}

/* "python:3.12-slim" names the same image as "docker.io/library/python:3.12-slim": compare canonical forms. */
static bool tag_matches(const char *repo_tag, const char *wanted)
{
	if (!strcmp(repo_tag, wanted))
		return true;
	struct lb_image_ref a, b;
	return lb_image_ref_parse(repo_tag, &a, NULL) == 0 && lb_image_ref_parse(wanted, &b, NULL) == 0 &&
	       !strcmp(a.full, b.full);
}

/* docker save: names in manifest.json are paths inside the layout; they are opened with lbi_open_in_root, and a
 * config named "<hex>.json" or "blobs/sha256/<hex>" must hash to that hex. */
static int plan_from_docker(int layoutfd, const char *ref_name, const struct lb_image_limits *l, struct lbi_plan *p,
			    struct lb_error *err)
{
	_cleanup_free_ char *buf = NULL;
	size_t len = 0;
	int r = read_in(layoutfd, "manifest.json", l->max_json_bytes, &buf, &len);
	if (r < 0)
		return lb_error_set(err, r, "docker archive: reading manifest.json");
	_cleanup_yajl_ yajl_val arr = NULL;
	r = parse_json(buf, len, "manifest.json", &arr, err);
	if (r < 0)
		return r;
	if (!YAJL_IS_ARRAY(arr) || arr->u.array.len == 0)
		return lb_error_setx(err, EBADMSG, "manifest.json: not a non-empty array");
	yajl_val entry = NULL;
	for (size_t i = 0; i < arr->u.array.len && !entry; i++) {
		yajl_val e = arr->u.array.values[i];
		if (!ref_name) {
			entry = e;
			break;
		}
		yajl_val tags = get(e, "RepoTags");
		for (size_t j = 0; YAJL_IS_ARRAY(tags) && j < tags->u.array.len; j++)
			if (YAJL_IS_STRING(tags->u.array.values[j]) &&
			    tag_matches(tags->u.array.values[j]->u.string, ref_name))
				entry = e;
	}
	if (!entry)
		return lb_error_setx(err, ENOENT, "manifest.json: no image tagged %.200s", ref_name);
	const char *config = get_str(entry, "Config");
	yajl_val layers = get(entry, "Layers");
	if (!config || !YAJL_IS_ARRAY(layers) || layers->u.array.len == 0)
		return lb_error_setx(err, EBADMSG, "manifest.json: entry without Config or Layers");
	if (layers->u.array.len > l->max_layers)
		return lb_error_setx(err, E2BIG, "manifest.json: %zu layers exceeds the bound of %llu",
				     layers->u.array.len, (unsigned long long)l->max_layers);

	_cleanup_free_ char *cbuf = NULL;
	size_t clen = 0;
	r = read_in(layoutfd, config, l->max_json_bytes, &cbuf, &clen);
	if (r < 0)
		return lb_error_set(err, r, "docker archive: reading config %.200s", config);
	r = lbi_sha256_buf(cbuf, clen, p->config_hex);
	if (r < 0)
		return lb_error_set(err, r, "sha256");
	const char *base = strrchr(config, '/') ? strrchr(config, '/') + 1 : config;
	if (strlen(base) >= 64 && strspn(base, "0123456789abcdef") == 64 && strncmp(base, p->config_hex, 64) != 0)
		return lb_error_setx(err, EBADMSG, "docker archive: config %.200s hashes to sha256:%s", config,
				     p->config_hex);
	p->n_layers = layers->u.array.len;
	p->layers = calloc(p->n_layers, sizeof(*p->layers));
	if (!p->layers)
		return lb_error_set(err, ENOMEM, "manifest.json");
	for (size_t i = 0; i < p->n_layers; i++) {
		yajl_val v = layers->u.array.values[i];
		if (!YAJL_IS_STRING(v) || strlen(v->u.string) >= sizeof(p->layers[i].path))
			return lb_error_setx(err, EBADMSG, "manifest.json: Layers[%zu] is not a path", i);
		snprintf(p->layers[i].path, sizeof(p->layers[i].path), "%s", v->u.string);
	}
	_cleanup_yajl_ yajl_val cfg = NULL;
	r = parse_json(cbuf, clen, "config", &cfg, err);
	if (r < 0)
		return r;
	return parse_config(cfg, p->n_layers, p, err);
}

int lbi_plan_load(int layoutfd, const char *ref_name, const struct lb_image_limits *l, struct lbi_plan *p,
		  struct lb_error *err)
{
	*p = (struct lbi_plan){ 0 };
	_cleanup_close_ int probe = lbi_open_in_root(layoutfd, "index.json", O_RDONLY, 0);
	if (probe < 0) {
		_cleanup_close_ int dm = lbi_open_in_root(layoutfd, "manifest.json", O_RDONLY, 0);
		if (dm < 0)
			return lb_error_setx(err, EINVAL,
					     "neither an OCI layout (index.json) nor a docker save archive "
					     "(manifest.json)");
		p->docker = true;
		return plan_from_docker(layoutfd, ref_name, l, p, err);
	}
	_cleanup_free_ char *buf = NULL;
	size_t len = 0;
	int r = read_in(layoutfd, "index.json", l->max_json_bytes, &buf, &len);
	if (r < 0)
		return lb_error_set(err, r, "reading index.json");
	_cleanup_yajl_ yajl_val index = NULL;
	r = parse_json(buf, len, "index.json", &index, err);
	if (r < 0)
		return r;
	struct desc md;
	r = pick_from_index(layoutfd, index, ref_name, 0, l, &md, err);
	if (r == -ENOENT)
		return lb_error_setx(err, ENOENT, "index.json: no manifest for linux/%s%s%s", HOST_ARCH,
				     ref_name ? " named " : "", ref_name ? ref_name : "");
	if (r < 0)
		return r;
	return plan_from_manifest(layoutfd, &md, l, p, err);
}

int lbi_index_pick(int layoutfd, const char *index_hex, uint64_t size, const struct lb_image_limits *l,
		   char ret_hex[65], uint64_t *ret_size, struct lb_error *err)
{
	struct desc d = { .size = size };
	memcpy(d.hex, index_hex, 65);
	_cleanup_yajl_ yajl_val index = NULL;
	int r = read_verified_json(layoutfd, &d, l->max_json_bytes, "index", NULL, &index, err);
	if (r < 0)
		return r;
	struct desc md;
	r = pick_from_index(layoutfd, index, NULL, 0, l, &md, err);
	if (r == -ENOENT)
		return lb_error_setx(err, ENOENT, "index sha256:%s: no manifest for linux/%s", index_hex, HOST_ARCH);
	if (r < 0)
		return r;
	memcpy(ret_hex, md.hex, 65);
	*ret_size = md.size;
	return 0;
}

int lbi_manifest_blobs(int layoutfd, const char *manifest_hex, uint64_t size, const struct lb_image_limits *l,
		       struct lbi_blob **ret, size_t *ret_n, struct lb_error *err)
{
	struct desc md = { .size = size };
	memcpy(md.hex, manifest_hex, 65);
	_cleanup_yajl_ yajl_val m = NULL;
	int r = read_verified_json(layoutfd, &md, l->max_json_bytes, "manifest", NULL, &m, err);
	if (r < 0)
		return r;
	yajl_val layers = get(m, "layers");
	if (!YAJL_IS_ARRAY(layers) || layers->u.array.len == 0 || layers->u.array.len > l->max_layers)
		return lb_error_setx(err, EBADMSG, "manifest sha256:%s: no layers or more than %llu", manifest_hex,
				     (unsigned long long)l->max_layers);
	size_t n = layers->u.array.len + 1;
	_cleanup_free_ struct lbi_blob *b = calloc(n, sizeof(*b));
	if (!b)
		return lb_error_set(err, ENOMEM, "manifest");
	struct desc d;
	r = parse_desc(get(m, "config"), "manifest config descriptor", &d, err);
	if (r < 0)
		return r; // cppcheck-suppress memleak ; NOLINT(clang-analyzer-unix.Malloc): b is _cleanup_free_
	if (d.size > l->max_json_bytes) {
		// cppcheck-suppress memleak ; b is _cleanup_free_
		return lb_error_setx(err, EFBIG, "config sha256:%s: too large", d.hex);
	}
	memcpy(b[0].hex, d.hex, 65);
	b[0].size = d.size;
	for (size_t i = 1; i < n; i++) {
		r = parse_desc(layers->u.array.values[i - 1], "layer descriptor", &d, err);
		if (r < 0)
			return r;
		if (!layer_media_type_ok(d.media_type))
			return lb_error_setx(err, EBADMSG, "layer sha256:%s: unsupported media type %.120s", d.hex,
					     d.media_type);
		memcpy(b[i].hex, d.hex, 65);
		b[i].size = d.size;
	}
	*ret = TAKE_PTR(b);
	*ret_n = n;
	return 0;
}

int lbi_plan_load_manifest(int layoutfd, const char *manifest_hex, uint64_t size, const struct lb_image_limits *l,
			   struct lbi_plan *p, struct lb_error *err)
{
	*p = (struct lbi_plan){ 0 };
	struct desc md = { .size = size };
	memcpy(md.hex, manifest_hex, 65);
	return plan_from_manifest(layoutfd, &md, l, p, err);
}

void lbi_plan_free(struct lbi_plan *p)
{
	free(p->layers);
	free(p->architecture);
	free(p->variant);
	free(p->os);
	free(p->working_dir);
	if (p->env)
		for (size_t i = 0; i < p->n_env; i++)
			free(p->env[i]);
	free(p->env);
	*p = (struct lbi_plan){ 0 };
}

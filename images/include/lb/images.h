/*
 * images.h — lensbox's image store: import OCI image layouts and `docker save` archives or pull from registries,
 * verify every byte against its digest, unpack the layers safely into a content-addressed read-only root
 * filesystem, name, list, inspect, remove, pin and garbage-collect images.
 *
 * Runs in lensboxd (root) and in the lensbox-image tool (root). Everything read from an archive is hostile: digests
 * are checked before content is used, JSON and archives are bounded, and files are written only through
 * openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS) relative to the new root (see layer.c's opening essay).
 *
 * The store lives under one directory (default /var/lib/lensbox/images):
 *
 *   <root>/images/<config-hex>/rootfs/      the unpacked tree, shared read-only by every sandbox of that image
 *   <root>/images/<config-hex>/image.json   metadata: digests, architecture, Env, WorkingDir, size, python3/bash
 *   <root>/images/<config-hex>/last_used    its mtime: when a sandbox was last made from it; "pinned": kept by gc
 *   <root>/names/<escaped name>             symlink -> ../images/<config-hex> ("/" in names is stored as "+")
 *   <root>/layout/blobs/sha256/<hex>        pulled blobs, verified, shared between images
 *   <root>/tmp/                             imports in progress; renamed into images/ only when complete
 *
 * Invariants: an images/<hex> directory exists only complete and verified (rename(2) from tmp/); two names for the
 * same image config share one rootfs; nothing in the store is written through a path an archive controls.
 * Thread safety: a struct lb_images may be used by one thread at a time; several processes may import at once.
 */
#ifndef LB_IMAGES_H
#define LB_IMAGES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lb/error.h"

#define LB_IMAGES_DEFAULT_ROOT "/var/lib/lensbox/images"

/* "sha256:" + 64 hex digits + NUL */
#define LB_DIGEST_MAX 72

/* Bounds against decompression bombs and hostile archives; counted over all layers of one import. */
struct lb_image_limits {
	uint64_t max_total_bytes; /* sum of regular files' sizes (apparent, so sparse files count in full) */
	uint64_t max_entries;	  /* tar entries over all layers */
	uint64_t max_path_len;	  /* bytes of one entry's path or link target (after normalisation) */
	uint64_t max_layers;	  /* layers in one image */
	uint64_t max_json_bytes;  /* index, manifest and config documents */
};

/* Fills l with the defaults: 8 GiB, 1,000,000 entries, 4,096-byte paths, 128 layers, 4 MiB JSON. */
void lb_image_limits_default(struct lb_image_limits *l);

/* A parsed image reference, Docker's way: "python:3.12-slim" is docker.io/library/python:3.12-slim;
 * "registry:5000/ns/name@sha256:…" keeps its registry. tag is "latest" when neither tag nor digest is given. */
struct lb_image_ref {
	char domain[256];	    /* "docker.io", "localhost:5000" */
	char path[264];		    /* "library/python", "ns/name" */
	char tag[129];		    /* "" when absent */
	char digest[LB_DIGEST_MAX]; /* "" when absent */
	char full[730];		    /* canonical "domain/path[:tag][@digest]" */
};

/* Parses s into ret. -EINVAL (with err saying what is wrong) on anything Docker would refuse. */
int lb_image_ref_parse(const char *s, struct lb_image_ref *ret, struct lb_error *err);

/* What lensbox keeps of an image (image.json). Strings are owned by the struct; free with lb_image_info_free(). */
struct lb_image_info {
	char config_digest[LB_DIGEST_MAX];
	char manifest_digest[LB_DIGEST_MAX]; /* "" for docker save archives, which have no manifest blob */
	char *rootfs;			     /* absolute path of the unpacked tree */
	char *architecture;		     /* "amd64", "arm64" */
	char *variant;			     /* "" or "v8" */
	char *os;
	char **env; /* "KEY=VALUE", NULL-terminated */
	size_t n_env;
	char *working_dir; /* "" when the image sets none */
	char **names;	   /* canonical names pointing at this image, NULL-terminated */
	size_t n_names;
	uint64_t size_bytes; /* sum of regular files' sizes in the rootfs */
	uint64_t entries;
	uint64_t skipped_special; /* device nodes, FIFOs and sockets left out */
	uint64_t stripped;	  /* setuid/setgid bits removed */
	bool has_python3, has_bash;
	int64_t imported_at; /* unix seconds */
	int64_t last_used;   /* unix seconds of the last lb_image_touch() (or the import) */
	bool pinned;	     /* never garbage-collected */
};

void lb_image_info_free(struct lb_image_info *info);

/* "this image has no bash: run_bash will fail" style sentence when python3 or bash is missing, else NULL. Static. */
const char *lb_image_info_warning(const struct lb_image_info *info);

struct lb_images;

/* Opens (creating when missing, mode 0711) the store at root with the given limits (NULL: defaults).
 * On success *ret is the caller's to free with lb_images_free(). */
int lb_images_open(const char *root, const struct lb_image_limits *limits, struct lb_images **ret,
		   struct lb_error *err);
void lb_images_free(struct lb_images *s);

/* What a pull or an import is doing, for a watcher (lb_images_watch). */
enum lb_image_phase {
	LB_IMAGE_RESOLVING = 0, /* reading the manifest (pull) or the archive's index (import) */
	LB_IMAGE_DOWNLOADING,	/* a blob's bytes arriving from the registry */
	LB_IMAGE_EXTRACTING,	/* an archive's blobs copied out of the tar (import of a file) */
	LB_IMAGE_UNPACKING,	/* a layer verified and applied to the new root */
	LB_IMAGE_PHASE_COUNT
};
struct lb_image_progress {
	enum lb_image_phase phase;
	const char *layer_hex; /* the blob's sha256 hex; "" for none; NULL: no news, only "may I go on?" */
	uint64_t done, total;  /* bytes (total 0 when unknown) */
};
/* Called from the thread doing a pull or an import on s, often (every chunk of a download). A nonzero return
 * cancels it: the call then fails with -ECANCELED and leaves nothing half-written (no tmp/ tree, no .partial
 * blob; blobs already verified stay for the next pull and for gc). */
typedef int (*lb_image_watch_fn)(const struct lb_image_progress *p, void *userdata);
/* Sets (fn NULL: clears) the watcher of pulls and imports made through s. */
void lb_images_watch(struct lb_images *s, lb_image_watch_fn fn, void *userdata);
const char *lb_images_root(const struct lb_images *s);

/* Imports path, which is an OCI image layout directory, a tar of one (oci-archive), or a `docker save` tar.
 * Picks the host's platform from multi-platform indexes (attestation manifests are skipped); when the layout names
 * several images, ref_name (an org.opencontainers.image.ref.name or a RepoTag; may be NULL) picks one, else the
 * first for the platform. Verifies every blob, unpacks into the content-addressed rootfs (instant when that config
 * digest is already present), and points name (may be NULL) at it. On success *ret_info (may be NULL) is the
 * caller's. Errors: -EBADMSG digest/size/diff_id mismatch or malformed document, -EFBIG/-E2BIG/-ENAMETOOLONG bounds,
 * -EXDEV an entry escapes the root, -ENOENT no image for this platform, -EINVAL invalid archive; err names the blob
 * or entry. Nothing of a failed import remains. */
int lb_image_import(struct lb_images *s, const char *path, const char *ref_name, const char *name,
		    struct lb_image_info **ret_info, struct lb_error *err);

/* Looks up a name (any form lb_image_ref_parse accepts), a "sha256:<config hex>" digest or a unique hex prefix of at
 * least 12 digits. -ENOENT when absent. */
int lb_image_inspect(struct lb_images *s, const char *ref, struct lb_image_info **ret_info, struct lb_error *err);
/* lb_image_inspect() without the names pointing at the image (names empty, n_names 0): what a sandbox is made from,
 * without listing names/. */
int lb_image_inspect_content(struct lb_images *s, const char *ref, struct lb_image_info **ret_info,
			     struct lb_error *err);

/* Every image in the store, names included. *ret_list is an array of *ret_n pointers; free with
 * lb_image_list_free(). */
int lb_image_list(struct lb_images *s, struct lb_image_info ***ret_list, size_t *ret_n, struct lb_error *err);
void lb_image_list_free(struct lb_image_info **list, size_t n);

/* Points name at an image already in the store (by digest or another name). */
int lb_image_tag(struct lb_images *s, const char *ref, const char *name, struct lb_error *err);

/* Removes ref. A name is unlinked; the image itself is deleted once no name points at it, unless in_use (may be
 * NULL) says a sandbox uses it, in which case -EBUSY and nothing changes. Removing by digest removes all its names.
 * Deletion renames the image into tmp/ first, so a half-deleted tree is never visible under images/. */
int lb_image_remove(struct lb_images *s, const char *ref, bool (*in_use)(const char *config_digest, void *userdata),
		    void *userdata, struct lb_error *err);

/* Records that a sandbox is being made from the image with this config digest now (for garbage collection). */
int lb_image_touch(struct lb_images *s, const char *config_digest, struct lb_error *err);

/* Pins (or unpins) ref's image: a pinned image is never garbage-collected (rm still removes it). */
int lb_image_pin(struct lb_images *s, const char *ref, bool pinned, struct lb_error *err);

/* Garbage collection: removes every image that is not pinned, not in use (in_use may be NULL) and unused for at
 * least max_idle_seconds (last lb_image_touch() or import), with its names; then removes pulled blobs that no
 * remaining image was made from (skipping files younger than 10 minutes, which a running pull may still need).
 * *ret_removed (may be NULL) counts images removed. */
int lb_image_gc(struct lb_images *s, uint64_t max_idle_seconds,
		bool (*in_use)(const char *config_digest, void *userdata), void *userdata, size_t *ret_removed,
		struct lb_error *err);

/* Pull options; every field may be zero/NULL. */
struct lb_pull_opts {
	const char *ca_file;			/* CA bundle for HTTPS registries (NULL: the system's) */
	const char *const *insecure_registries; /* NULL-terminated "host[:port]" list reached over plain HTTP */
	const char *credentials_file;		/* Docker config.json shape: {"auths": {"host:port": {"auth": …}}} */
	unsigned max_parallel;			/* concurrent blob downloads (0: 3, at most 16) */
	/* Called as bytes of a blob arrive (digest hex, bytes so far, total). */
	void (*progress)(const char *hex, uint64_t done, uint64_t total, void *userdata);
	void *progress_ud;
};

/* Pulls ref (see lb_image_ref_parse) from its registry with the OCI distribution API, verifying every manifest and
 * blob, into <root>/layout/blobs (shared by digest between images; partial downloads resume), then imports it as
 * lb_image_import() does and names it ref's canonical form. Errors: -EACCES authentication refused, -ENOENT no such
 * image or no manifest for this platform, -EBADMSG content does not match its digest, -EIO network or HTTP errors;
 * err names the registry, blob and step. Uses libcurl, whose global initialisation happens on first use (thread-safe
 * in Debian 12's libcurl 7.88); blocks for the whole download, so a daemon calls it off its request threads. */
int lb_image_pull(struct lb_images *s, const char *ref, const struct lb_pull_opts *opts,
		  struct lb_image_info **ret_info, struct lb_error *err);

#endif

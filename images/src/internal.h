/*
 * internal.h — what the files of lb_images share and nobody else sees: the store handle, SHA-256 helpers, the
 * openat2 resolver and the layer applier's entry point.
 *
 * Runs in whichever root process imports images (lensboxd, lensbox-image). Invariant: every path from an archive
 * reaches the file system only through lbi_open_in_root() (openat2 with RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS)
 * or an *at() call on a directory descriptor obtained from it, with a single-component name.
 */
#ifndef LB_IMAGES_INTERNAL_H
#define LB_IMAGES_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>

#include "lb/error.h"
#include "lb/images.h"

/* info.c: the parsed image.json of the last few images inspected, each with the stat of its file. */
#define LBI_INFO_CACHE_SIZE 8
struct lbi_info_entry {
	char hex[65];
	dev_t dev;
	ino_t ino;
	off_t size;
	struct timespec mtim, ctim;
	struct lb_image_info *info; /* NULL: an empty slot */
};
struct lbi_info_cache {
	pthread_mutex_t mu;
	struct lbi_info_entry e[LBI_INFO_CACHE_SIZE];
	size_t next; /* the slot replaced next */
};

struct lb_images {
	char *root;
	int rootfd; /* O_PATH|O_DIRECTORY on root */
	struct lb_image_limits limits;
	lb_image_watch_fn watch; /* lb_images_watch; NULL: none */
	void *watch_ud;
	struct lbi_info_cache info_cache;
};

/* Tells the watcher (if any); nonzero when it asks to cancel. */
int lbi_watch(struct lb_images *s, enum lb_image_phase phase, const char *layer_hex, uint64_t done, uint64_t total);

/* ---- digest.c ---- */

struct lbi_sha256 {
	void *ctx; /* EVP_MD_CTX */
};

int lbi_sha256_init(struct lbi_sha256 *h);
void lbi_sha256_update(struct lbi_sha256 *h, const void *data, size_t len);
/* Writes 64 lowercase hex digits and a NUL into hex; the context can no longer be updated. */
void lbi_sha256_final(struct lbi_sha256 *h, char hex[65]);
void lbi_sha256_done(struct lbi_sha256 *h);
int lbi_sha256_buf(const void *data, size_t len, char hex[65]);

/* Accepts exactly "sha256:" followed by 64 lowercase hex digits; copies the hex part. -EINVAL otherwise. */
int lbi_digest_hex(const char *digest, char hex[65]);

/* Reads all of fd from its start, at most max bytes (-EFBIG beyond), hashing it. */
int lbi_sha256_fd(int fd, uint64_t max, char hex[65], uint64_t *ret_size);

/* ---- resolve.c ---- */

/* openat2(dirfd, path, flags | O_CLOEXEC, RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS): path resolves as if dirfd
 * were "/", symlinks included. Returns the fd or a negative errno. */
int lbi_open_in_root(int rootfd, const char *path, int flags, mode_t mode);

/* Opens the directory rel ("" is the root) inside rootfd, creating missing components as root-owned 0755
 * directories when create is set; on_created (may be NULL) is told each component it made (its path inside the
 * root). */
int lbi_open_dir_in_root(int rootfd, const char *rel, bool create, void (*on_created)(const char *path, void *ud),
			 void *ud);

/* Removes dirfd/name whatever it is (a directory recursively, never following symlinks). Absent is success. */
int lbi_remove_at(int dirfd, const char *name);

/* ---- layer.c ---- */

struct lbi_unpack_stats {
	uint64_t total_bytes;
	uint64_t entries;
	uint64_t skipped_special;
	uint64_t stripped;
};

/* Applies the layer blob read from blobfd (tar, gzip or zstd, detected by its magic bytes) to the tree at rootfd,
 * checking the sha256 of the uncompressed stream against diff_id_hex (64 hex digits). Bounds in l are counted in
 * st across layers. err names the layer (index, digest) and the entry. */
int lbi_layer_apply(int rootfd, int blobfd, const char *diff_id_hex, const char *what, const struct lb_image_limits *l,
		    struct lbi_unpack_stats *st, struct lb_error *err);

/* ---- usage.c ---- */

/* Creates (pinned) or removes images/<hex>/pinned; absent is success when unpinning. 0 or a negative errno. */
int lbi_usage_set_pinned(struct lb_images *s, const char *hex, bool pinned);
/* Whether images/<hex> is pinned, and when it was last used (imported_at when it never was). */
void lbi_usage_read(struct lb_images *s, const char *hex, int64_t imported_at, bool *ret_pinned,
		    int64_t *ret_last_used);

/* ---- store.c ---- */

struct lbi_plan;
/* Unpacks plan (blobs read from layoutfd) into images/<config hex> unless already there, then names it. */
int lbi_store_publish(struct lb_images *s, int layoutfd, const struct lbi_plan *plan, const char *name,
		      struct lb_image_info **ret_info, struct lb_error *err);

int lbi_read_image_json(struct lb_images *s, const char *hex, struct lb_image_info **ret);

/* ---- info.c ---- */

void lbi_info_cache_init(struct lbi_info_cache *c);
void lbi_info_cache_free(struct lbi_info_cache *c);
/* A copy of what was cached for images/<hex>/image.json while st is still that file's stat (*ret is the caller's,
 * with no names); -ENOENT when nothing is, -ENOMEM. */
int lbi_info_cache_get(struct lbi_info_cache *c, const char *hex, const struct stat *st, struct lb_image_info **ret);
/* Keeps a copy of info (its names left out) for the file whose stat is st, in place of the oldest entry. */
void lbi_info_cache_put(struct lbi_info_cache *c, const char *hex, const struct stat *st,
			const struct lb_image_info *info);
int lbi_make_tmp(struct lb_images *s, const char *prefix, char *ret_name, size_t size, struct lb_error *err);
/* "<pid>-<tid>-<ns>": a name part no other thread or process uses at the same moment, for temporary files that are
 * renamed into place in directories several threads write at once (names/, layout/blobs). */
void lbi_unique_suffix(char *out, size_t size);
void lbi_remove_tmp(struct lb_images *s, const char *name);
/* name, digest or digest prefix -> config hex; ret_name_file (may be NULL) gets the names/ entry when ref is a name */
int lbi_resolve_ref(struct lb_images *s, const char *ref, char hex[65], char *ret_name_file, size_t nsize,
		    struct lb_error *err);
int lbi_name_target(struct lb_images *s, const char *file, char hex[65]);
/* Removes every name of images/<hex> and the image (renamed into tmp/ first). */
int lbi_remove_image(struct lb_images *s, const char *hex, struct lb_error *err);

#endif

/*
 * manifest.h — the verified plan manifest.c reads out of an image layout (see manifest.c).
 * Used only inside lb_images.
 */
#ifndef LB_IMAGES_MANIFEST_H
#define LB_IMAGES_MANIFEST_H

#include "internal.h"

struct lbi_layer {
	char path[300];	     /* inside the layout: "blobs/sha256/<hex>" or docker's "<id>/layer.tar" */
	char digest_hex[65]; /* "" for docker save layers, which are checked by diff_id only */
	uint64_t size;	     /* from the descriptor (OCI only) */
	char diff_hex[65];   /* from the config's rootfs.diff_ids */
};

struct lbi_plan {
	bool docker;
	char manifest_hex[65]; /* "" for docker save */
	char config_hex[65];
	struct lbi_layer *layers;
	size_t n_layers;
	char *architecture, *variant, *os, *working_dir;
	char **env; /* NULL-terminated */
	size_t n_env;
};

/* Reads and verifies index/manifest/config (or docker's manifest.json/config) from the layout at layoutfd. The
 * plan's layer blobs themselves are not read here: the importer verifies each before unpacking it. */
int lbi_plan_load(int layoutfd, const char *ref_name, const struct lb_image_limits *l, struct lbi_plan *p,
		  struct lb_error *err);
void lbi_plan_free(struct lbi_plan *p);

/* For pulls, whose blobs arrive in a layout one by one: */
struct lbi_blob {
	char hex[65];
	uint64_t size;
};
/* Reads the verified index blob and picks this platform's manifest (nested indexes must already be present). */
int lbi_index_pick(int layoutfd, const char *index_hex, uint64_t size, const struct lb_image_limits *l,
		   char ret_hex[65], uint64_t *ret_size, struct lb_error *err);
/* The config's and layers' descriptors of a verified manifest blob, config first; *ret is the caller's. */
int lbi_manifest_blobs(int layoutfd, const char *manifest_hex, uint64_t size, const struct lb_image_limits *l,
		       struct lbi_blob **ret, size_t *ret_n, struct lb_error *err);
/* lbi_plan_load() for one given manifest blob. */
int lbi_plan_load_manifest(int layoutfd, const char *manifest_hex, uint64_t size, const struct lb_image_limits *l,
			   struct lbi_plan *p, struct lb_error *err);

/* "amd64" or "arm64". */
const char *lbi_host_arch(void);

#endif

/*
 * source.h — extracting an import's outer archive into a staging directory (see source.c). Inside lb_images only.
 */
#ifndef LB_IMAGES_SOURCE_H
#define LB_IMAGES_SOURCE_H

#include "internal.h"

/* Extracts from the tar at path into stagefd the regular files larger than small_max (large) or the rest (!large),
 * with directories and symlinks in the small pass. */
int lbi_source_extract(const char *path, int stagefd, uint64_t small_max, bool large, const struct lb_image_limits *l,
		       struct lb_error *err);

#endif

/*
 * files.h — moving files into and out of a sandbox's storage from the host side, without ever following a link
 * the sandbox planted (see files.c).
 */
#ifndef LBD_FILES_H
#define LBD_FILES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <yajl/yajl_gen.h>

#include "core.h"

#define LBD_LIST_MAX 1000

/* Writes data to root/path atomically (a temporary file in the same directory, then rename), creating missing
 * parents (mode 0755), every new file and directory owned by uid:gid. root is an O_PATH fd of the storage mount. */
int lbd_file_write(int root, const char *path, const void *data, size_t len, mode_t mode, uid_t uid, gid_t gid,
		   struct lbd_fail *f);

/* Opens root/path for reading if it is a regular file of at most max bytes. */
int lbd_file_open_read(int root, const char *path, uint64_t max, int *ret_fd, uint64_t *ret_size, struct lbd_fail *f);

/* Generates {"files": [...], "more": N} for the directory root/dir ("" for the top). */
int lbd_files_list(int root, const char *dir, bool recursive, yajl_gen g, struct lbd_fail *f);

/* Removes root/path (a file), then its parent and (for a two-level path) grandparent directory when they became
 * empty; errors are ignored. */
void lbd_file_remove(int root, const char *path);

/* An O_PATH fd of a running sandbox's /tmp, reached through its init's root, for the run's source file. */
int lbd_open_sandbox_tmp(pid_t init_pid, struct lbd_fail *f);

#endif

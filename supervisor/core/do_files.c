/*
 * do_files.c — the core's side of PUT/GET /v1/sandboxes/{name}/files/{path} and
 * GET /v1/sandboxes/{name}/files?path=&recursive= (LBP_FILE_PUT, LBP_FILE_GET, LBP_FILES_LIST).
 *
 * Runs in the core (root) on channel threads. A file's bytes come as a sealed memfd (proto.c checked its seals and
 * size), mapped read-only here; a file going out leaves as the descriptor of a private copy, which the API process
 * sends to the client. File requests to a running sandbox never take its turn, so a run in progress does not delay
 * them; they pin it running (lbd_storage_pin). A stopped sandbox is not started: its storage is opened from the host
 * (a detached mount only this process reaches) under its turn, so no start mounts it meanwhile; a new sandbox with a
 * spare ready takes the spare instead. Either way the request counts as a use for the idle and keep timers, and every
 * lookup goes through files.c's link-refusing openat2 as the sandbox's uid.
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core.h"
#include "files.h"
#include "lb/cleanup.h"
#include "lb/fileio.h"

/* An unlinked, root-only staging file in dir. O_TMPFILE first; filesystems without it (overlayfs before 6.6
 * answers EOPNOTSUPP, very old kernels EISDIR) get a named file that is unlinked at once, in a directory only root
 * can enter, so nobody can open it in between. Returns an fd or -1 with errno set. */
static int open_staging_file(const char *dir)
{
	int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (fd >= 0 || (errno != EOPNOTSUPP && errno != EISDIR))
		return fd;
	char path[320];
	if ((size_t)snprintf(path, sizeof(path), "%s/staging.XXXXXX", dir) >= sizeof(path)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	fd = mkostemp(path, O_CLOEXEC);
	if (fd < 0)
		return -1;
	if (unlink(path) < 0) {
		int saved = errno;
		close(fd);
		errno = saved;
		return -1;
	}
	return fd;
}

void lbd_do_file_put(struct lbd *d, struct lbp_msg *m, struct lbd_res *res)
{
	const char *name = m->u.file_put.file.name, *path = m->u.file_put.file.path;
	size_t size = (size_t)m->u.file_put.size;
	struct lbd_fail f = { 0 };
	if (lbd_path_check(path, false, &f) < 0) {
		lbd_res_fail(res, &f);
		return;
	}
	/* Safe to map: the memfd is sealed against writes, growing and shrinking (proto.c), so the bytes cannot change
	 * under the write below and a read cannot fault past the end. */
	void *data = size ? mmap(NULL, size, PROT_READ, MAP_PRIVATE, m->fds[0], 0) : NULL;
	if (size && data == MAP_FAILED) {
		lbd_res_error(res, 500, "internal", "Mapping the file's bytes failed: %s", strerror(errno));
		return;
	}
	struct lbd_pin pin;
	if (lbd_storage_pin(d, name, true, &pin, &f) < 0) {
		if (data)
			munmap(data, size);
		lbd_res_fail(res, &f);
		return;
	}
	int r = lbd_file_write(pin.root, path, data ? data : "", size, 0644, pin.uid, pin.gid, &f);
	lbd_storage_unpin(d, &pin);
	if (data)
		munmap(data, size);
	if (r < 0) {
		lbd_res_fail(res, &f);
		return;
	}
	yajl_gen g = lbd_gen_new();
	yajl_gen_map_open(g);
	lbd_gen_str(g, "path", path);
	lbd_gen_uint(g, "size", size);
	yajl_gen_map_close(g);
	lbd_gen_finish(g, res, 201);
}

/* A download is copied to a staging file in state_dir/tmp first: a full state directory passes when space is freed. */
static void staging_failed(struct lbd_fail *f, int e)
{
	if (e == ENOSPC || e == EDQUOT)
		lbd_fail_set(f, 503, "host_unavailable",
			     "Staging the file failed: lensboxd's state directory is full; free space there.");
	else
		lbd_fail_set(f, 500, "internal", "Staging the file failed: %s", strerror(e));
}

void lbd_do_file_get(struct lbd *d, struct lbp_msg *m, struct lbd_res *res)
{
	const char *name = m->u.file.name, *path = m->u.file.path;
	struct lbd_fail f = { 0 };
	if (lbd_path_check(path, false, &f) < 0) {
		lbd_res_fail(res, &f);
		return;
	}
	struct lbd_pin pin;
	if (lbd_storage_pin(d, name, false, &pin, &f) < 0) {
		lbd_res_fail(res, &f);
		return;
	}
	int fd = -1;
	uint64_t size = 0;
	int r = lbd_file_open_read(pin.root, path, LBD_FILE_MAX, &fd, &size, &f);
	int copy = -1;
	if (r == 0) {
		/* The bytes are copied to an unlinked host file before the sandbox is unpinned: a slow client then
		 * holds nothing of the sandbox's storage open (which would keep it mounted past a stop). */
		char tmpdir[300];
		snprintf(tmpdir, sizeof(tmpdir), "%s/tmp", d->cfg.state_dir);
		copy = open_staging_file(tmpdir);
		if (copy < 0) {
			staging_failed(&f, errno);
			r = -EIO;
		}
		uint64_t done = 0;
		char buf[65536];
		while (r == 0 && done < size) {
			ssize_t n = read(fd, buf, sizeof(buf) < size - done ? sizeof(buf) : (size_t)(size - done));
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0)
				break; /* shrank meanwhile: send what was there */
			if (lb_write_all(copy, buf, (size_t)n) < 0) {
				staging_failed(&f, errno);
				r = -EIO;
				break;
			}
			done += (uint64_t)n;
		}
		size = done;
		close(fd);
	}
	lbd_storage_unpin(d, &pin);
	if (r < 0) {
		if (copy >= 0)
			close(copy);
		lbd_res_fail(res, &f);
		return;
	}
	res->status = 200;
	res->fd = copy;
	res->fd_size = size;
	res->content_type = "application/octet-stream";
}

void lbd_do_files_list(struct lbd *d, struct lbp_msg *m, struct lbd_res *res)
{
	const char *name = m->u.file.name, *dir = m->u.file.path;
	bool recursive = m->u.file.recursive != 0;
	struct lbd_fail f = { 0 };
	if (lbd_path_check(dir, true, &f) < 0) {
		lbd_res_fail(res, &f);
		return;
	}
	struct lbd_pin pin;
	if (lbd_storage_pin(d, name, false, &pin, &f) < 0) {
		lbd_res_fail(res, &f);
		return;
	}
	yajl_gen g = lbd_gen_new();
	int r = lbd_files_list(pin.root, dir, recursive, g, &f);
	lbd_storage_unpin(d, &pin);
	if (r < 0) {
		yajl_gen_free(g);
		lbd_res_fail(res, &f);
		return;
	}
	lbd_gen_finish(g, res, 200);
}

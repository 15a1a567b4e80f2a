/*
 * fileio.h — small, bounded file helpers shared by every lensbox process: reading a kernel or config file with a
 * size cap, writing one value to a cgroup or /proc file, creating directory chains, closing inherited descriptors.
 *
 * All return 0 or a negative errno; none logs. Reads are bounded so a hostile or huge file cannot grow the caller.
 */
#ifndef LB_FILEIO_H
#define LB_FILEIO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Reads at most max bytes of dirfd/path (dirfd may be AT_FDCWD) into a new NUL-terminated buffer.
 * -EFBIG when the file is larger than max. On success *ret_buf is the caller's to free. */
int lb_read_file_at(int dirfd, const char *path, size_t max, char **ret_buf, size_t *ret_len);

/* Reads fd to its end, at most max bytes (-EFBIG past it), into a new NUL-terminated buffer the caller frees. */
int lb_read_fd(int fd, size_t max, char **ret_buf, size_t *ret_len);

/* Writes s (no newline added) to dirfd/path opened O_WRONLY|O_CLOEXEC (no O_CREAT): for cgroup and /proc files. */
int lb_write_file_at(int dirfd, const char *path, const char *s);

/* Reads a single unsigned integer (or "max" -> UINT64_MAX) from a kernel file. */
int lb_read_u64_at(int dirfd, const char *path, uint64_t *ret);

/* Finds "key value" in a flat keyed kernel file (memory.events, memory.stat, cpu.stat). -ENOENT if absent. */
int lb_read_keyed_u64_at(int dirfd, const char *path, const char *key, uint64_t *ret);

/* mkdir -p with mode for each created component; existing directories are fine. */
int lb_mkdir_p(const char *path, mode_t mode);

/* Writes data to path atomically: a temporary file in the same directory, fsync, rename. */
int lb_write_file_atomic(const char *path, const void *data, size_t len, mode_t mode);

/* Closes every descriptor >= from (close_range, with a /proc/self/fd fallback). */
int lb_close_fds_from(int from);

/* write(2) until done, retrying EINTR. */
int lb_write_all(int fd, const void *buf, size_t len);

#endif

/*
 * blobs.c — the runner's freestanding static binaries (init/), embedded in the library at build time, and the sealed
 * memfds they are executed from: lensbox-init, pid 1 of every sandbox, and lensbox-diskhelper, a storage's background
 * work (flushing a stopped sandbox's filesystem, refilling the disk pool).
 *
 * Runs in the caller (root): at each sandbox start (lensbox-init), each storage detach and each pool refill
 * (lensbox-diskhelper). Why a memfd: neither may be a fork of the caller. Pid 1 would carry a copy-on-write image of
 * lensboxd's memory (other sandboxes' data included), and after pivot_root no host path is reachable; a helper
 * forked from lensboxd would write-protect all of lensboxd's memory (each page it writes next then faults). An fd
 * of a sealed memfd can be exec'd from anywhere and nobody can change what it holds (the same idea as runc's fix for
 * CVE-2019-5736).
 */
#include "internal.h"

#include <errno.h>
#include <stdint.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "lb/fileio.h"

#ifndef MFD_EXEC
#define MFD_EXEC 0x0010U /* Linux 6.3: executable even when vm.memfd_noexec asks for noexec by default */
#endif

/* The bytes of each binary, placed in .rodata by the assembler; the paths come from CMake. */
#define EMBED(sym, path)                                    \
	__asm__(".section .rodata\n"                        \
		".balign 16\n"                              \
		".global " #sym "_start\n"                  \
		".hidden " #sym "_start\n" #sym "_start:\n" \
		".incbin \"" path "\"\n" #sym "_end:\n"     \
		".balign 8\n"                               \
		".global " #sym "_size\n"                   \
		".hidden " #sym "_size\n" #sym "_size:\n"   \
		".quad " #sym "_end - " #sym "_start\n"     \
		".previous\n");                             \
	extern const char sym##_start[];                    \
	extern const uint64_t sym##_size /* computed by the assembler */

EMBED(lb_init_blob, LB_INIT_BLOB_PATH);
EMBED(lb_diskhelper_blob, LB_DISKHELPER_BLOB_PATH);

static int sealed_memfd(const char *name, const char *bytes, size_t size)
{
	int fd = (int)syscall(SYS_memfd_create, name, MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_EXEC);
	if (fd < 0 && errno == EINVAL) /* before 6.3 */
		fd = (int)syscall(SYS_memfd_create, name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	int r = lb_write_all(fd, bytes, size);
	if (r == 0 && fchmod(fd, 0555) < 0)
		r = -errno;
	/* Sealed: no write, resize or new seal can ever change the binary that runs. */
	if (r == 0 && fcntl(fd, F_ADD_SEALS, F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE) < 0)
		r = -errno;
	if (r < 0) {
		close(fd);
		return r;
	}
	return fd;
}

int lb_init_memfd(void)
{
	return sealed_memfd("lensbox-init", lb_init_blob_start, (size_t)lb_init_blob_size);
}

int lb_diskhelper_memfd(void)
{
	return sealed_memfd("lensbox-diskhelper", lb_diskhelper_blob_start, (size_t)lb_diskhelper_blob_size);
}

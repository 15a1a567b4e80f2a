/*
 * init_blob.c — the static lensbox-init binary (init/lensbox-init.c), embedded in the library at build time, and the
 * sealed memfd it is executed from.
 *
 * Runs in the caller (root) at each sandbox start. Why a memfd: the sandbox's pid 1 must not be a fork of lensboxd
 * (it would carry a copy-on-write image of the daemon's memory, other sandboxes' data included), and after
 * pivot_root no host path is reachable; an fd of a sealed memfd can be exec'd from anywhere and nobody can change
 * what it holds (the same idea as runc's fix for CVE-2019-5736).
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

/* The bytes of lensbox-init, placed in .rodata by the assembler; the path comes from CMake. */
__asm__(".section .rodata\n"
	".balign 16\n"
	".global lb_init_blob_start\n"
	".hidden lb_init_blob_start\n"
	"lb_init_blob_start:\n"
	".incbin \"" LB_INIT_BLOB_PATH "\"\n"
	"lb_init_blob_end:\n"
	".balign 8\n"
	".global lb_init_blob_size\n"
	".hidden lb_init_blob_size\n"
	"lb_init_blob_size:\n"
	".quad lb_init_blob_end - lb_init_blob_start\n"
	".previous\n");
extern const char lb_init_blob_start[];
extern const uint64_t lb_init_blob_size; /* computed by the assembler */

int lb_init_memfd(void)
{
	int fd = (int)syscall(SYS_memfd_create, "lensbox-init", MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_EXEC);
	if (fd < 0 && errno == EINVAL) /* before 6.3 */
		fd = (int)syscall(SYS_memfd_create, "lensbox-init", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	int r = lb_write_all(fd, lb_init_blob_start, (size_t)lb_init_blob_size);
	if (r == 0 && fchmod(fd, 0555) < 0)
		r = -errno;
	/* Sealed: no write, resize or new seal can ever change the binary pid 1 runs. */
	if (r == 0 && fcntl(fd, F_ADD_SEALS, F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE) < 0)
		r = -errno;
	if (r < 0) {
		close(fd);
		return r;
	}
	return fd;
}

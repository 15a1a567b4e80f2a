/*
 * loopfault.c — test equipment: makes one lensboxd believe the host has no free loop device, without touching the
 * host's real loop devices (they are host-wide; exhausting them would break every other user of the machine).
 *
 * Loaded with LD_PRELOAD into lensboxd by tests/chaos/chaos.py (part_host_faults) only; never part of the product.
 * It runs in every process of that lensboxd that inherits its environment (the core, the API process); sandboxes
 * get a clean environment and never load it. It needs no privilege of its own.
 *
 * What: ioctl(fd, LOOP_CTL_GET_FREE) (runner/disk.c, the only place lensbox allocates a loop device) fails with
 * ENOSPC, as the kernel answers when no loop device can be added, while the file named by LENSBOX_LOOPFAULT_FLAG
 * exists; each refusal appends one line to that path + ".hits", so the test knows the fault was really met. Every
 * other ioctl, and this one while the file is absent, goes to the kernel unchanged.
 *
 * Why not a seccomp filter with SECCOMP_RET_USER_NOTIF around lensboxd: the kernel allows one listener per filter
 * chain, and every sandbox run installs its own listener (runner/exec.c, counting refused calls); under an outer
 * listener each run would fail with EBUSY.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/loop.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Exported despite the project's -fvisibility=hidden: this is the symbol the dynamic linker must bind first. */
__attribute__((visibility("default"))) int ioctl(int fd, unsigned long request, ...);

int ioctl(int fd, unsigned long request, ...)
{
	va_list ap;
	va_start(ap, request);
	void *arg = va_arg(ap, void *);
	va_end(ap);
	const char *flag = getenv("LENSBOX_LOOPFAULT_FLAG");
	if (request == LOOP_CTL_GET_FREE && flag && access(flag, F_OK) == 0) {
		char hits[4096];
		if (snprintf(hits, sizeof(hits), "%s.hits", flag) < (int)sizeof(hits)) {
			int h = open(hits, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
			if (h >= 0) {
				(void)!write(h, "ENOSPC\n", 7);
				close(h);
			}
		}
		errno = ENOSPC;
		return -1;
	}
	return (int)syscall(SYS_ioctl, fd, request, arg);
}

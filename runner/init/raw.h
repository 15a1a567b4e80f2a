/*
 * raw.h — raw system calls for the freestanding binaries the runner executes from sealed memfds (lensbox-init,
 * lensbox-diskhelper), and the one routine a helper shares with the library (raw_copy_sparse, also used by
 * disk_pool.c in the caller).
 *
 * Header-only, no libc: every function returns the kernel's answer (a negative errno on failure) and touches no
 * errno, no TLS and no memory but its arguments, so it is safe in a process with no C runtime at all.
 */
#ifndef LB_RUNNER_RAW_H
#define LB_RUNNER_RAW_H

#include <asm/unistd.h>

/* x86-64 and aarch64 system call conventions. */
static inline long raw_sys6(long n, long a, long b, long c, long d, long e, long f)
{
#if defined(__x86_64__)
	long ret;
	register long r10 __asm__("r10") = d;
	register long r8 __asm__("r8") = e;
	register long r9 __asm__("r9") = f;
	__asm__ volatile("syscall"
			 : "=a"(ret)
			 : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
			 : "rcx", "r11", "memory");
	return ret;
#elif defined(__aarch64__)
	register long x8 __asm__("x8") = n;
	register long x0 __asm__("x0") = a;
	register long x1 __asm__("x1") = b;
	register long x2 __asm__("x2") = c;
	register long x3 __asm__("x3") = d;
	register long x4 __asm__("x4") = e;
	register long x5 __asm__("x5") = f;
	__asm__ volatile("svc 0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5) : "memory");
	return x0;
#else
#error "runner/init/raw.h: unsupported architecture"
#endif
}

/* A decimal number of at most max (< 2^63 / 10), digits only: the number, or -1. */
static inline long long raw_parse_number(const char *s, long long max)
{
	long long v = 0;
	if (!s || !*s)
		return -1;
	for (; *s; s++) {
		if (*s < '0' || *s > '9')
			return -1;
		v = v * 10 + (*s - '0');
		if (v > max)
			return -1;
	}
	return v;
}

#define RAW_SEEK_DATA 3
#define RAW_SEEK_HOLE 4
#define RAW_ENXIO     6
#define RAW_EINTR     4
#define RAW_EIO	      5

/* Copies the data extents of from (a file of size bytes) into to, leaving its holes holes: an empty ext4 image is a
 * few hundred KiB of metadata in a sparse file. 0 or a negative errno. */
static inline long raw_copy_sparse(int from, int to, unsigned long long size)
{
	long r = raw_sys6(__NR_ftruncate, to, (long)size, 0, 0, 0, 0);
	if (r < 0)
		return r;
	long long pos = 0;
	for (;;) {
		long long data = raw_sys6(__NR_lseek, from, pos, RAW_SEEK_DATA, 0, 0, 0);
		if (data < 0)
			return data == -RAW_ENXIO ? 0 : data; /* ENXIO: no data past pos */
		long long hole = raw_sys6(__NR_lseek, from, data, RAW_SEEK_HOLE, 0, 0, 0);
		if (hole < 0)
			return hole;
		long long in = data, out = data;
		while (in < hole) {
			long n = raw_sys6(__NR_copy_file_range, from, (long)&in, to, (long)&out, hole - in, 0);
			if (n == -RAW_EINTR)
				continue;
			if (n <= 0)
				return n < 0 ? n : -RAW_EIO;
		}
		pos = hole;
	}
}

#endif

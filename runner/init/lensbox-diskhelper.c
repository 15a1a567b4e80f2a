/*
 * lensbox-diskhelper — the storage work the runner leaves to a process of its own, started without a fork of the
 * caller. A fork of lensboxd write-protects every page of its memory, and each page lensboxd writes afterwards then
 * takes a fault (~9 us each on a VM): ~90 on the request thread of the next cold sandbox, ~0.8 ms. Two jobs, named
 * by argv[1]:
 *
 *   flush MOUNTPOINT
 *       fd 3: an O_PATH reference to a detached storage filesystem, 4: the storage's lock, 5: a pipe's read end.
 *       Waits for the pipe's EOF (the caller dropped its own reference), closes 3 (the last reference: the filesystem
 *       is shut down and flushed here), removes the empty mount point, and releases the lock by exiting
 *       (disk.c, lb_disk_detach).
 *   refill BYTES BOUND TEMPLATE.new TEMPLATE [NAME.new NAME]...
 *       fd 3: the pool directory, 4: the pool's lock (flock'ed by the caller, held here until the exit), 5 when BOUND
 *       is 1: a pidfd of the caller. With the CPU and disk time nothing else wants, a moment later: the template
 *       (mke2fs, then debugfs removing its lost+found) when it is missing, then each image as a sparse copy of it
 *       (mke2fs without one), each written through and then renamed from its .new name. A bound refill ends as soon
 *       as its caller does, killing its mke2fs and removing the .new file (disk_pool.c, lb_disk_pool_refill).
 *
 * Runs as root in the host's namespaces, detached: the runner starts it through two CLONE_VM | CLONE_VFORK children
 * (spawn.c, lb_spawn_helper), the first of which exits at once, so it is reparented and nobody in the caller waits
 * for it. It holds only the descriptors above and /dev/null as 0-2; every signal is unblocked, at its default.
 *
 * Freestanding, like lensbox-init (raw.h): no libc, executed from a sealed memfd, so what runs is exactly what the
 * library embedded. Its arguments come from the library and are checked anyway: names are plain file names (no '/',
 * not "." or "..", under 64 bytes) and numbers decimal and bounded; a bad one ends it with status 2, having done
 * nothing.
 */
#include "raw.h"

#include <linux/fcntl.h>
#include <linux/prctl.h>
#include <linux/sched.h>
#include <linux/wait.h>

#define NAME_MAX_   64
#define PAIRS_MAX   16
#define SIGKILL_    9
#define SIGCHLD_    17
#define POLLIN_	    1
#define EINTR_	    4
#define SCHED_IDLE_ 5
/* ioprio_set(2)'s idle class */
#define IOPRIO_WHO_PROCESS_ 1
#define IOPRIO_CLASS_IDLE_  3
#define IOPRIO_CLASS_SHIFT_ 13
/* a refill starts this long after its caller took an image: that start, and most first runs, are done by then */
#define REFILL_DELAY_NS 100000000L

#define FD_FIRST 3 /* the mount (flush) or the pool directory (refill) */
#define FD_LOCK	 4
#define FD_THIRD 5 /* the pipe (flush) or the caller's pidfd (a bound refill) */

struct pollfd_ {
	int fd;
	short events, revents;
};

struct timespec_ {
	long long sec, nsec;
};

static const char *const tool_envp[] = { "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C", 0 };

/* A freestanding program must define these itself: the compiler may call them for a struct's initialiser or an
 * array's copy. Byte by byte through volatile, so that the loops are not turned back into calls to themselves. */
void *memset(void *dst, int c, unsigned long n);
void *memcpy(void *dst, const void *src, unsigned long n);

void *memset(void *dst, int c, unsigned long n)
{
	volatile unsigned char *d = dst;
	while (n--)
		*d++ = (unsigned char)c;
	return dst;
}

void *memcpy(void *dst, const void *src, unsigned long n)
{
	volatile unsigned char *d = dst;
	const unsigned char *s = src;
	while (n--)
		*d++ = *s++;
	return dst;
}

static _Noreturn void leave(int status)
{
	for (;;)
		raw_sys6(__NR_exit_group, status, 0, 0, 0, 0, 0);
}

static unsigned long length(const char *s)
{
	unsigned long n = 0;
	while (s[n])
		n++;
	return n;
}

static int same(const char *a, const char *b)
{
	while (*a && *a == *b)
		a++, b++;
	return *a == *b;
}

/* A plain file name of the pool: no '/', not "." or "..", shorter than NAME_MAX_. */
static int name_ok(const char *s)
{
	unsigned long n = length(s);
	if (n == 0 || n >= NAME_MAX_ || (s[0] == '.' && (n == 1 || (n == 2 && s[1] == '.'))))
		return 0;
	for (unsigned long i = 0; i < n; i++)
		if (s[i] == '/')
			return 0;
	return 1;
}

/* ---- refill ---- */

struct refill {
	unsigned long long bytes;
	int caller_fd; /* the caller's pidfd when bound, else -1 */
	int template_fd;
	int pairs; /* [0]: the template; [1, pairs): the images */
	const char *tmp[PAIRS_MAX], *img[PAIRS_MAX];
};

/* Waits for child pid to end, or the caller to: 1 when the caller ended first. */
static int caller_ended(const struct refill *r, long pid)
{
	long child = raw_sys6(__NR_pidfd_open, pid, 0, 0, 0, 0, 0);
	if (child < 0)
		return 0; /* cannot watch the child: wait for it alone, as an unbound refill does */
	struct pollfd_ p[2] = { { .fd = (int)child, .events = POLLIN_ }, { .fd = r->caller_fd, .events = POLLIN_ } };
	long n;
	do
		n = raw_sys6(__NR_ppoll, (long)p, 2, 0, 0, 8, 0);
	while (n == -EINTR_);
	raw_sys6(__NR_close, child, 0, 0, 0, 0, 0);
	return n > 0 && (p[1].revents & POLLIN_) && !(p[0].revents & POLLIN_);
}

/* Runs mke2fs or debugfs (at /usr/sbin, else /sbin) with argv; 1 when it exited 0. A fork of this small process
 * copies a few pages. */
static int run_tool(const struct refill *r, const char *const argv[], const char *usr_sbin, const char *sbin)
{
	long pid = raw_sys6(__NR_clone, SIGCHLD_, 0, 0, 0, 0, 0);
	if (pid == 0) {
		/* a refiller that ends (its caller gone) takes its tool with it */
		raw_sys6(__NR_prctl, PR_SET_PDEATHSIG, SIGKILL_, 0, 0, 0, 0);
		/* the tool keeps 0-2 (/dev/null) and the pool directory, whose path it opens its image through */
		raw_sys6(__NR_close_range, FD_LOCK, ~0U, 0, 0, 0, 0);
		raw_sys6(__NR_execve, (long)usr_sbin, (long)argv, (long)tool_envp, 0, 0, 0);
		raw_sys6(__NR_execve, (long)sbin, (long)argv, (long)tool_envp, 0, 0, 0);
		leave(127);
	}
	if (pid < 0)
		return 0;
	int ok = 1;
	if (r->caller_fd >= 0 && caller_ended(r, pid)) {
		raw_sys6(__NR_kill, pid, SIGKILL_, 0, 0, 0, 0);
		ok = 0;
	}
	int status = 0;
	while (raw_sys6(__NR_wait4, pid, (long)&status, 0, 0, 0, 0) == -EINTR_)
		;
	return ok && status == 0;
}

/* "/proc/self/fd/3/" + name, the .new file as the tools open it (the pool directory is our fd 3). */
static void tool_path(char *dst, const char *name)
{
	const char *prefix = "/proc/self/fd/3/";
	unsigned long n = 0;
	for (const char *s = prefix; *s; s++)
		dst[n++] = *s;
	for (const char *s = name; *s; s++)
		dst[n++] = *s;
	dst[n] = 0;
}

/* Image i ([0]: the template): the sized sparse file, a copy of the template when there is one, else mke2fs on it
 * (the template: and debugfs removing its lost+found); written through to disk; then its final name. */
static int refill_one(struct refill *r, int i)
{
	long fd = raw_sys6(__NR_openat, FD_FIRST, (long)r->tmp[i], O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
			   0600, 0, 0);
	if (fd < 0)
		return 0;
	int ok;
	if (i != 0 && r->template_fd >= 0) {
		ok = raw_copy_sparse(r->template_fd, (int)fd, r->bytes) == 0;
	} else {
		char path[sizeof("/proc/self/fd/3/") + NAME_MAX_];
		tool_path(path, r->tmp[i]);
		/* The root directory stays 0:0 0755 here; the first mount gives it to the sandbox's uid. -m 0: no
		 * blocks reserved for root (there is no root inside); -F: it is a file, not a device. */
		const char *const mke2fs[] = { "mke2fs", "-q",	 "-F",
					       "-t",	 "ext4", "-m",
					       "0",	 "-E",	 "lazy_itable_init=1,lazy_journal_init=1",
					       path,	 0 };
		/* the template's lost+found goes before the first copy: a new storage's start then has nothing to
		 * remove (e2fsck makes it again if it ever needs it) */
		const char *const debugfs[] = { "debugfs", "-w", "-R", "rmdir lost+found", path, 0 };
		ok = raw_sys6(__NR_ftruncate, fd, (long)r->bytes, 0, 0, 0, 0) == 0 &&
		     run_tool(r, mke2fs, "/usr/sbin/mke2fs", "/sbin/mke2fs");
		if (ok && i == 0)
			ok = run_tool(r, debugfs, "/usr/sbin/debugfs", "/sbin/debugfs");
	}
	ok = ok && raw_sys6(__NR_fdatasync, fd, 0, 0, 0, 0, 0) == 0;
	raw_sys6(__NR_close, fd, 0, 0, 0, 0, 0);
	ok = ok && raw_sys6(__NR_renameat2, FD_FIRST, (long)r->tmp[i], FD_FIRST, (long)r->img[i], 0, 0) == 0;
	if (!ok)
		raw_sys6(__NR_unlinkat, FD_FIRST, (long)r->tmp[i], 0, 0, 0, 0);
	return ok;
}

static _Noreturn void refill(int argc, char **argv)
{
	struct refill r = { .caller_fd = -1, .template_fd = -1 };
	long long bytes = argc >= 6 ? raw_parse_number(argv[2], 1LL << 50) : -1;
	long long bound = argc >= 6 ? raw_parse_number(argv[3], 1) : -1;
	if (bytes <= 0 || bound < 0 || (argc - 4) % 2 || (argc - 4) / 2 > PAIRS_MAX)
		leave(2);
	r.bytes = (unsigned long long)bytes;
	r.caller_fd = bound ? FD_THIRD : -1;
	r.pairs = (argc - 4) / 2;
	for (int i = 0; i < r.pairs; i++) {
		r.tmp[i] = argv[4 + 2 * i];
		r.img[i] = argv[5 + 2 * i];
		if (!name_ok(r.tmp[i]) || !name_ok(r.img[i]))
			leave(2);
	}
	/* Only what the CPUs and the disk would otherwise leave idle: a refill never takes time from a run (under a
	 * sustained load it waits, the pool empties, and new storages are formatted on the spot as before). */
	long param = 0;
	raw_sys6(__NR_sched_setscheduler, 0, SCHED_IDLE_, (long)&param, 0, 0, 0);
	raw_sys6(__NR_ioprio_set, IOPRIO_WHO_PROCESS_, 0, IOPRIO_CLASS_IDLE_ << IOPRIO_CLASS_SHIFT_, 0, 0, 0);
	struct timespec_ delay = { 0, REFILL_DELAY_NS };
	if (r.caller_fd >= 0) {
		/* a moment later, unless the caller is gone by then */
		struct pollfd_ p = { .fd = r.caller_fd, .events = POLLIN_ };
		if (raw_sys6(__NR_ppoll, (long)&p, 1, (long)&delay, 0, 8, 0) != 0)
			leave(0);
	} else {
		raw_sys6(__NR_nanosleep, (long)&delay, 0, 0, 0, 0, 0);
	}
	r.template_fd =
	    (int)raw_sys6(__NR_openat, FD_FIRST, (long)r.img[0], O_RDONLY | O_CLOEXEC | O_NOFOLLOW, 0, 0, 0);
	if (r.template_fd < 0 && refill_one(&r, 0))
		r.template_fd =
		    (int)raw_sys6(__NR_openat, FD_FIRST, (long)r.img[0], O_RDONLY | O_CLOEXEC | O_NOFOLLOW, 0, 0, 0);
	for (int i = 1; i < r.pairs; i++)
		if (!refill_one(&r, i))
			break;
	leave(0);
}

/* ---- flush ---- */

static _Noreturn void flush(int argc, char **argv)
{
	if (argc != 3 || argv[2][0] != '/' || length(argv[2]) >= 4096)
		leave(2);
	char byte;
	while (raw_sys6(__NR_read, FD_THIRD, (long)&byte, 1, 0, 0, 0) == -EINTR_)
		;
	raw_sys6(__NR_close, FD_FIRST, 0, 0, 0, 0, 0); /* the last reference: the filesystem is shut down here */
	/* A start of this sandbox name with another storage may have mounted there meanwhile: then EBUSY, and it
	 * stays. (The same storage waits for our lock.) */
	raw_sys6(__NR_unlinkat, AT_FDCWD, (long)argv[2], AT_REMOVEDIR, 0, 0, 0);
	leave(0); /* and with the exit, the lock */
}

_Noreturn void lb_diskhelper_main(long *sp); /* called from _start below */

__attribute__((used)) _Noreturn void lb_diskhelper_main(long *sp)
{
	int argc = (int)sp[0];
	char **argv = (char **)(sp + 1);
	raw_sys6(__NR_prctl, PR_SET_DUMPABLE, 0, 0, 0, 0, 0);
	/* exec'd from a memfd, its name would be the descriptor's number: ps shows "lensbox-diskhel" (15 bytes) */
	raw_sys6(__NR_prctl, PR_SET_NAME, (long)"lensbox-diskhelper", 0, 0, 0, 0);
	unsigned long none = 0;
	raw_sys6(__NR_rt_sigprocmask, 2 /* SIG_SETMASK */, (long)&none, 0, 8, 0, 0);
	/* 0-2 were closed by the spawner: /dev/null there, so that nothing this opens lands on them */
	if (raw_sys6(__NR_openat, AT_FDCWD, (long)"/dev/null", O_RDWR, 0, 0, 0) != 0 ||
	    raw_sys6(__NR_dup3, 0, 1, 0, 0, 0, 0) != 1 || raw_sys6(__NR_dup3, 0, 2, 0, 0, 0, 0) != 2)
		leave(1);
	const char *job = argc >= 2 ? argv[1] : "";
	if (same(job, "flush"))
		flush(argc, argv);
	if (same(job, "refill"))
		refill(argc, argv);
	leave(2);
}

/* The entry point: hand the initial stack pointer (argc, argv...) to C with the ABI's stack alignment. */
#if defined(__x86_64__)
__asm__(".text\n.global _start\n_start:\n\txor %rbp, %rbp\n\tmov %rsp, %rdi\n\tand $-16, %rsp\n\tcall "
	"lb_diskhelper_main\n\thlt\n");
#elif defined(__aarch64__)
__asm__(".text\n.global _start\n_start:\n\tmov x29, #0\n\tmov x0, sp\n\tbl lb_diskhelper_main\n");
#endif

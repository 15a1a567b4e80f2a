/*
 * spawn.c — children that borrow the caller's memory until they exec: their stacks, clone3() onto one, and the
 * detached start of a helper binary (lb_spawn_helper).
 *
 * Runs in the caller (lensboxd, many threads, or lensbox-runner; root). A fork of lensboxd copies its ~320 mappings
 * and page tables, and the child's execve tears that copy down again (together ~1 ms a child); a child made with
 * CLONE_VM shares the caller's memory instead, as posix_spawn's does. Invariants, which each caller's file states
 * for its children (exec.c: a run's C1 and C2; sandbox.c: a sandbox's init child):
 *   - CLONE_VFORK: the thread that cloned sleeps until the child has exec'd or exited, so the child may use that
 *     thread's TLS (errno) as its own;
 *   - the child runs on a stack of its own, mapped here above a guard page (an overflow faults instead of writing
 *     into the caller's memory), reads only data prepared before the clone (or written by the caller and handed over
 *     through a syscall), writes only its stack and errno, and makes only system calls (no malloc, no stdio, no
 *     glibc setxid wrapper, which would signal the caller's threads);
 *   - every signal is blocked in the cloning thread, so no handler of the caller ever runs in the child.
 */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

void *lb_stacks_map(size_t n, size_t size, size_t *ret_len)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	size_t len = n * (size + page);
	char *map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
	if (map == MAP_FAILED)
		return NULL;
	for (size_t i = 0; i < n; i++)
		if (mprotect(map + i * (size + page), page, PROT_NONE) < 0) {
			int e = errno;
			munmap(map, len);
			errno = e;
			return NULL;
		}
	*ret_len = len;
	return map;
}

char *lb_stack_base(void *map, size_t i, size_t size)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	return (char *)map + i * (size + page) + page;
}

pid_t lb_clone3_run(struct clone_args *ca, int (*fn)(void *), void *arg)
{
#if defined(__x86_64__)
	/* The child starts after `syscall` with the parent's registers, rax 0 and rsp at the top of its stack (16-byte
	 * aligned: a page boundary): it calls fn(arg) and exits the way glibc's clone() does. */
	register long rax __asm__("rax") = SYS_clone3;
	register struct clone_args *rdi __asm__("rdi") = ca;
	register size_t rsi __asm__("rsi") = sizeof(*ca);
	register int (*r12)(void *) __asm__("r12") = fn;
	register void *r13 __asm__("r13") = arg;
	__asm__ volatile("syscall\n\t"
			 "test %%rax, %%rax\n\t"
			 "jnz 1f\n\t"
			 "xor %%ebp, %%ebp\n\t"
			 "mov %%r13, %%rdi\n\t"
			 "call *%%r12\n\t"
			 "mov %%eax, %%edi\n\t"
			 "mov $231, %%eax\n\t" /* exit_group */
			 "syscall\n\t"
			 "hlt\n"
			 "1:"
			 : "+r"(rax)
			 : "r"(rdi), "r"(rsi), "r"(r12), "r"(r13)
			 : "rcx", "r11", "memory");
	if (rax < 0) {
		errno = (int)-rax;
		return -1;
	}
	return (pid_t)rax;
#else
	/* Fork-like: no CLONE_VM, the child continues here on a copy of the caller's memory. */
	ca->flags &= ~(uint64_t)CLONE_VM;
	ca->stack = 0;
	ca->stack_size = 0;
	pid_t pid = (pid_t)syscall(SYS_clone3, ca, sizeof(*ca));
	if (pid == 0)
		_exit(fn(arg));
	return pid;
#endif
}

/* What the two children of lb_spawn_helper share with the caller (its frame). */
struct helper_spawn {
	int exec_fd;
	char *const *argv;
	const int *fds;
	int nfds;
	char *grandchild_stack; /* its top */
	int err;		/* the grandchild's failure, or the intermediate's */
};

/* The grandchild: fds[i] becomes descriptor 3 + i, nothing else stays open, and it becomes the helper. */
LB_BORROWED_STACK static int helper_exec(void *arg)
{
	struct helper_spawn *h = arg;
	/* every source first to 64 and up (close-on-exec), so that placing one never overwrites another */
	int exec_fd = fcntl(h->exec_fd, F_DUPFD_CLOEXEC, 64);
	int high[LB_HELPER_FDS_MAX];
	for (int i = 0; i < h->nfds && exec_fd >= 0; i++)
		if ((high[i] = fcntl(h->fds[i], F_DUPFD_CLOEXEC, 64)) < 0)
			exec_fd = -1;
	for (int i = 0; i < h->nfds && exec_fd >= 0; i++)
		if (dup2(high[i], 3 + i) < 0) /* without close-on-exec */
			exec_fd = -1;
	if (exec_fd < 0) {
		h->err = -errno;
		_exit(127);
	}
	/* 0-2 too: the caller's stdout may be a pipe someone waits on (the helper puts /dev/null there) */
	syscall(SYS_close_range, 0u, 2u, 0u);
	syscall(SYS_close_range, (unsigned)(3 + h->nfds), (unsigned)exec_fd - 1, 0u);
	syscall(SYS_close_range, (unsigned)exec_fd + 1, ~0u, 0u);
	char *const envp[] = { NULL };
	syscall(SYS_execveat, exec_fd, "", h->argv, envp, AT_EMPTY_PATH);
	h->err = -errno;
	_exit(127);
}

/* The intermediate child: starts the grandchild, waits (CLONE_VFORK) until it has exec'd or died, and exits, so the
 * grandchild is reparented to the nearest subreaper and nobody here has to wait for it. */
LB_BORROWED_STACK static int helper_detach(void *arg)
{
	struct helper_spawn *h = arg;
	if (clone(helper_exec, h->grandchild_stack, CLONE_VM | CLONE_VFORK | SIGCHLD, h) < 0)
		h->err = -errno;
	_exit(0);
}

int lb_spawn_helper(int exec_fd, char *const argv[], const int *fds, int nfds)
{
	if (nfds < 0 || nfds > LB_HELPER_FDS_MAX)
		return -EINVAL;
	/* Both children run on stacks in this frame, one after the other, while this thread sleeps (CLONE_VFORK):
	 * 8 KiB each is several times what the few system calls above use. */
	_Alignas(16) char stacks[2][8192];
	struct helper_spawn h = { .exec_fd = exec_fd,
				  .argv = argv,
				  .fds = fds,
				  .nfds = nfds,
				  .grandchild_stack = stacks[1] + sizeof(stacks[1]) };
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pid_t pid = clone(helper_detach, stacks[0] + sizeof(stacks[0]), CLONE_VM | CLONE_VFORK | SIGCHLD, &h);
	int e = errno;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (pid < 0)
		return -e;
	while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
		;
	return h.err;
}

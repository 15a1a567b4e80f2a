/*
 * spawn.c — children that borrow the caller's memory until they exec: their stacks, and clone3() onto one.
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
#include <linux/sched.h>
#include <sys/mman.h>
#include <sys/syscall.h>
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

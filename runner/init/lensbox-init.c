/*
 * lensbox-init — pid 1 of every sandbox: it reaps orphans and does nothing else, forever.
 *
 * Runs inside the sandbox (all its namespaces, its pivoted root) as the sandbox's uid with every capability set
 * empty, no_new_privs and Landlock-free (programs' Landlock domains exclude it, so they cannot signal or trace it).
 * The runner's first child builds the sandbox, drops privileges and then execveat()s this binary from a sealed
 * memfd, so pid 1 holds nothing of the caller: no copy of lensboxd's memory, no descriptor but the report pipe
 * (argv[1]), which it answers 'R' on and closes.
 *
 * Freestanding: no libc, a few raw system calls, about a kilobyte of code; the whole binary is copied into a memfd
 * at every sandbox start, and pid 1 should contain as little as possible. Invariants: non-dumpable before anything
 * else; every signal blocked (SIGKILL from the host still ends it, and with it the pid namespace); no descriptor
 * open while it waits.
 */
#include "../report.h"
#include "raw.h"

#include <linux/prctl.h>
#include <linux/wait.h>

#define SIGCHLD_BIT (1UL << (17 - 1))

static _Noreturn void die(void)
{
	for (;;)
		raw_sys6(__NR_exit_group, 1, 0, 0, 0, 0, 0);
}

_Noreturn void lb_init_main(long *sp); /* called from _start below */

__attribute__((used)) _Noreturn void lb_init_main(long *sp)
{
	/* Dumpable is reset by execve: clear it first, so no process of the sandbox may trace us or open our
	 * /proc files. */
	if (raw_sys6(__NR_prctl, PR_SET_DUMPABLE, 0, 0, 0, 0, 0) < 0)
		die();
	unsigned long all = ~0UL;
	if (raw_sys6(__NR_rt_sigprocmask, 2 /* SIG_SETMASK */, (long)&all, 0, 8, 0, 0) < 0)
		die();
	long argc = sp[0];
	char **argv = (char **)(sp + 1);
	/* argv[1] is the report pipe's descriptor number, in decimal. */
	long fd = argc == 2 ? raw_parse_number(argv[1], 100000) : -1;
	if (fd > 2) {
		struct lb_child_report rep = { .kind = 'R' };
		long w;
		do
			w = raw_sys6(__NR_write, fd, (long)&rep, sizeof(rep), 0, 0, 0);
		while (w == -4 /* EINTR */);
	}
	raw_sys6(__NR_close_range, 0, ~0U, 0, 0, 0, 0);
	unsigned long chld = SIGCHLD_BIT;
	for (;;) {
		while (raw_sys6(__NR_wait4, -1, 0, WNOHANG | __WALL, 0, 0, 0) > 0)
			;
		/* rt_sigtimedwait(SIGCHLD): wakes when a child (an orphan reparented to us) exits. */
		raw_sys6(__NR_rt_sigtimedwait, (long)&chld, 0, 0, 8, 0, 0);
	}
}

/* The entry point: hand the initial stack pointer (argc, argv...) to C with the ABI's stack alignment. */
#if defined(__x86_64__)
__asm__(".text\n.global _start\n_start:\n\txor %rbp, %rbp\n\tmov %rsp, %rdi\n\tand $-16, %rsp\n\tcall lb_init_main\n"
	"\thlt\n");
#elif defined(__aarch64__)
__asm__(".text\n.global _start\n_start:\n\tmov x29, #0\n\tmov x0, sp\n\tbl lb_init_main\n");
#endif

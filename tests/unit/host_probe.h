/*
 * host_probe.h — what a unit test asks of the host before testing something the host may not have at all, so that it
 * skips with the reason (cmocka's skip()) where the kernel cannot do the thing, and asserts the exact outcome where it
 * can. Header-only, included by the tests that need it; runs as any user; forks its own throwaway children.
 *
 * The i386 system call table: x86_64 kernels serve `int 0x80` only with IA32 emulation built in and enabled
 * (CONFIG_IA32_EMULATION, not booted with ia32_emulation=false); without it the vector is not installed and
 * `int 0x80` raises a general protection fault, SIGSEGV, before any seccomp filter is consulted. This CI host's 6.18
 * (a PVM guest) raises it although its config has IA32 emulation; Debian's 6.1 in the VM lane serves the table.
 */
#ifndef LENSBOX_TESTS_UNIT_HOST_PROBE_H
#define LENSBOX_TESTS_UNIT_HOST_PROBE_H

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#if defined(__x86_64__)
/* Whether `int 0x80` reaches the kernel's i386 table here: getpid (i386 number 20) through it in a child with no
 * filter must return the child's pid. False with the reason in why when the child is killed by SIGSEGV (no i386
 * entry at all); any other outcome is not a missing feature but a broken host, and fails the test. */
static inline bool lb_test_host_has_i386(char *why, size_t n)
{
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		signal(SIGSEGV, SIG_DFL); /* cmocka's handler would carry on with the tests in this child */
		long r = 20;
		__asm__ volatile("int $0x80" : "+a"(r) : : "memory");
		_exit(r == (long)getpid() ? 0 : 1);
	}
	int st = 0;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	if (WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV) {
		snprintf(why, n,
			 "this host has no i386 system call entry: int 0x80 (getpid) raises SIGSEGV with no "
			 "seccomp filter; the VM lane (Debian's 6.1) runs this case");
		return false;
	}
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		fail_msg("int 0x80 getpid with no filter: neither the pid nor SIGSEGV (status %#x)", st);
	return true;
}
#endif

#endif

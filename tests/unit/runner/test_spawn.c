/* Unit tests for children on the caller's memory (runner/spawn.c): a CLONE_VM | CLONE_VFORK child of lb_clone3_run()
 * runs fn(arg) on its own stack, its writes are the caller's memory, its return value is its exit status, and the
 * caller sleeps until it is gone; a child that overflows its stack dies on the guard page instead of writing into the
 * memory below it (here: the neighbouring stack, filled with a pattern that must come out intact). */
#include <errno.h>
#include <linux/sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "../../../runner/internal.h"

#define STACK (64u << 10)

struct shared {
	int written;
	pid_t seen_pid;
};

__attribute__((no_sanitize("address"))) static int write_and_exit(void *arg)
{
	struct shared *s = arg;
	s->written = 42;
	s->seen_pid = (pid_t)getpid();
	return 7;
}

/* Recurses until the stack runs out (the bound is far past 64 KiB); each frame writes its buffer, so the guard page
 * is touched, not skipped. */
__attribute__((no_sanitize("address"), noinline)) static int recurse(int depth)
{
	volatile char buf[512];
	memset((char *)buf, depth & 0xff, sizeof(buf));
	if (depth > (1 << 20))
		return 0;
	return recurse(depth + 1) + buf[depth % sizeof(buf)];
}

__attribute__((no_sanitize("address"))) static int overflow(void *arg)
{
	(void)arg;
	return recurse(0);
}

static pid_t spawn(void *stacks, size_t i, int (*fn)(void *), void *arg)
{
	struct clone_args ca;
	memset(&ca, 0, sizeof(ca));
	ca.flags = CLONE_VM | CLONE_VFORK;
	ca.exit_signal = SIGCHLD;
	ca.stack = (uint64_t)(uintptr_t)lb_stack_base(stacks, i, STACK);
	ca.stack_size = STACK;
	return lb_clone3_run(&ca, fn, arg);
}

static void child_shares_memory(void **state)
{
	(void)state;
	size_t len = 0;
	void *stacks = lb_stacks_map(1, STACK, &len);
	assert_non_null(stacks);
	assert_int_equal(len, STACK + (size_t)sysconf(_SC_PAGESIZE));
	struct shared s = { 0, 0 };
	pid_t pid = spawn(stacks, 0, write_and_exit, &s);
	assert_true(pid > 0);
	/* CLONE_VFORK: back here only once the child has exited, its write already in our memory. */
	assert_int_equal(s.written, 42);
	assert_int_equal(s.seen_pid, pid);
	int status = 0;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 7);
	munmap(stacks, len);
}

static void overflow_stops_at_the_guard(void **state)
{
	(void)state;
	size_t len = 0;
	void *stacks = lb_stacks_map(2, STACK, &len);
	assert_non_null(stacks);
	/* Stack 0 lies right below stack 1's guard page: an overflow of stack 1 without the guard would write into it.
	 */
	char *below = lb_stack_base(stacks, 0, STACK);
	memset(below, 0x5a, STACK);
	pid_t pid = spawn(stacks, 1, overflow, NULL);
	assert_true(pid > 0);
	int status = 0;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status));
	assert_int_equal(WTERMSIG(status), SIGSEGV);
	for (size_t i = 0; i < STACK; i++)
		if (below[i] != 0x5a)
			fail_msg("byte %zu of the stack below the guard was written", i);
	/* The guard itself is no memory at all. */
	unsigned char vec = 0;
	assert_int_equal(mincore(lb_stack_base(stacks, 1, STACK) - sysconf(_SC_PAGESIZE), 1, &vec), 0);
	assert_int_equal(vec & 1, 0);
	munmap(stacks, len);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(child_shares_memory),
		cmocka_unit_test(overflow_stops_at_the_guard),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Unit tests for children on the caller's memory (runner/spawn.c): a CLONE_VM | CLONE_VFORK child of lb_clone3_run()
 * runs fn(arg) on its own stack, its writes are the caller's memory, its return value is its exit status, and the
 * caller sleeps until it is gone; a child that overflows its stack dies on the guard page instead of writing into the
 * memory below it (here: the neighbouring stack, filled with a pattern that must come out intact). lb_spawn_helper()
 * starts lensbox-diskhelper (its flush job, on a plain directory) detached: not a child of ours, holding the
 * descriptors it was given and none other (not even one without close-on-exec), doing its job once told to; given a
 * bad argument it does nothing. */
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
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <dirent.h>
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

struct flush_setup {
	char dir[64], mnt[96], lock[96];
	int mnt_fd, lock_fd, go[2];
};

static void flush_setup(struct flush_setup *f)
{
	snprintf(f->dir, sizeof(f->dir), "/tmp/lb-spawn-XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	snprintf(f->mnt, sizeof(f->mnt), "%s/mnt", f->dir);
	snprintf(f->lock, sizeof(f->lock), "%s/lock", f->dir);
	assert_int_equal(mkdir(f->mnt, 0700), 0);
	f->mnt_fd = open(f->mnt, O_PATH | O_DIRECTORY | O_CLOEXEC);
	f->lock_fd = open(f->lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	assert_true(f->mnt_fd >= 0 && f->lock_fd >= 0);
	assert_int_equal(flock(f->lock_fd, LOCK_EX | LOCK_NB), 0);
	assert_int_equal(pipe2(f->go, O_CLOEXEC), 0);
}

/* Whether another open file of the lock can take it now: false while a process holds the one we gave away. */
static bool lock_free(const struct flush_setup *f)
{
	int fd = open(f->lock, O_RDWR | O_CLOEXEC);
	assert_true(fd >= 0);
	bool free_ = flock(fd, LOCK_EX | LOCK_NB) == 0;
	close(fd);
	return free_;
}

static bool wait_for_free_lock(const struct flush_setup *f)
{
	for (int i = 0; i < 300; i++) { /* 3 s */
		if (lock_free(f))
			return true;
		usleep(10000);
	}
	return false;
}

/* The pid of the process whose argv ends in path (the helper's), or 0. */
static pid_t find_by_last_arg(const char *path)
{
	DIR *d = opendir("/proc");
	assert_non_null(d);
	pid_t found = 0;
	struct dirent *de;
	while (!found && (de = readdir(d))) {
		char file[300], buf[512];
		snprintf(file, sizeof(file), "/proc/%s/cmdline", de->d_name);
		int fd = open(file, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		ssize_t n = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		if (n <= 1)
			continue;
		buf[n - 1] = 0; /* the last argument's terminator */
		const char *last = memrchr(buf, 0, (size_t)n - 1);
		last = last ? last + 1 : buf;
		if (strcmp(last, path) == 0)
			found = (pid_t)atoi(de->d_name);
	}
	closedir(d);
	return found;
}

static void flush_cleanup(struct flush_setup *f)
{
	rmdir(f->mnt);
	unlink(f->lock);
	rmdir(f->dir);
}

static void helper_runs_detached_with_only_its_descriptors(void **state)
{
	(void)state;
	struct flush_setup f;
	flush_setup(&f);
	int sentinel[2];
	assert_int_equal(pipe(sentinel), 0); /* no close-on-exec: the spawn must close it anyway */
	int helper = lb_diskhelper_memfd();
	assert_true(helper >= 0);
	char *const argv[] = { "lensbox-diskhelper", "flush", f.mnt, NULL };
	const int fds[] = { f.mnt_fd, f.lock_fd, f.go[0] };
	assert_int_equal(lb_spawn_helper(helper, argv, fds, 3), 0);
	close(helper);
	close(f.go[0]);
	close(f.mnt_fd);
	close(f.lock_fd);
	/* not our child: nothing to wait for */
	assert_int_equal(waitpid(-1, NULL, WNOHANG), -1);
	assert_int_equal(errno, ECHILD);
	/* it holds no copy of the sentinel's write end: with ours closed, the read end is at its end */
	close(sentinel[1]);
	assert_int_equal(fcntl(sentinel[0], F_SETFL, O_NONBLOCK), 0);
	char byte;
	assert_int_equal(read(sentinel[0], &byte, 1), 0);
	close(sentinel[0]);
	/* it waits for the go: the lock held, the directory there; ps names it */
	usleep(100000);
	pid_t pid = find_by_last_arg(f.mnt);
	assert_true(pid > 0);
	char file[64], comm[32] = { 0 };
	snprintf(file, sizeof(file), "/proc/%d/comm", (int)pid);
	int cfd = open(file, O_RDONLY | O_CLOEXEC);
	assert_true(cfd >= 0);
	assert_true(read(cfd, comm, sizeof(comm) - 1) > 0);
	close(cfd);
	assert_string_equal(comm, "lensbox-diskhel\n");
	assert_false(lock_free(&f));
	struct stat st;
	assert_int_equal(stat(f.mnt, &st), 0);
	/* told to go: the directory removed, then the lock released by its exit */
	close(f.go[1]);
	assert_true(wait_for_free_lock(&f));
	assert_int_equal(stat(f.mnt, &st), -1);
	assert_int_equal(errno, ENOENT);
	flush_cleanup(&f);
}

static void helper_given_a_bad_argument_does_nothing(void **state)
{
	(void)state;
	struct flush_setup f;
	flush_setup(&f);
	int helper = lb_diskhelper_memfd();
	assert_true(helper >= 0);
	char *const argv[] = { "lensbox-diskhelper", "flush", "mnt", NULL }; /* not an absolute path */
	const int fds[] = { f.mnt_fd, f.lock_fd, f.go[0] };
	assert_int_equal(lb_spawn_helper(helper, argv, fds, 3), 0);
	char *const job[] = { "lensbox-diskhelper", "format", "/", NULL }; /* no such job */
	assert_int_equal(lb_spawn_helper(helper, job, fds, 3), 0);
	close(helper);
	close(f.go[0]);
	close(f.mnt_fd);
	close(f.lock_fd);
	/* both exit at once, without waiting for the go (still open here) or touching the directory */
	assert_true(wait_for_free_lock(&f));
	struct stat st;
	assert_int_equal(stat(f.mnt, &st), 0);
	close(f.go[1]);
	flush_cleanup(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(child_shares_memory),
		cmocka_unit_test(overflow_stops_at_the_guard),
		cmocka_unit_test(helper_runs_detached_with_only_its_descriptors),
		cmocka_unit_test(helper_given_a_bad_argument_does_nothing),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

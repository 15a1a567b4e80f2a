/* Unit tests for supervisor/api/confine.c: in a child process, after lbd_api_confine(), the API process's ids,
 * capabilities and no_new_privs are what /proc shows, no file opens (Landlock), no internet socket, new process,
 * namespace, signal to another process or other prctl is allowed (seccomp; no_new_privs is checked in /proc by
 * integration/test_daemon_privsep.py), and what it serves with still works: a thread, a
 * Unix socket pair, a sealed memfd. Needs root (to drop from it); skipped otherwise. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "api.h"

static void *thread_main(void *arg)
{
	return arg;
}

/* Runs in the child: each failed expectation sets one bit of the exit status. */
static int confined_child(void)
{
	struct lbd_config cfg;
	lbd_config_defaults(&cfg);
	struct lb_error err = { 0 };
	if (lbd_api_confine(&cfg, &err) < 0)
		return 1;
	int bad = 0;
	if (getuid() != 999999998 || geteuid() != 999999998 || getgid() != 999999998)
		bad |= 2;
	if (prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) >= 0 || errno != EPERM) /* only PR_SET_NAME is let through */
		bad |= 2;
	errno = 0;
	if (open("/etc/hostname", O_RDONLY | O_CLOEXEC) >= 0 || errno != EACCES) /* world-readable: only Landlock */
		bad |= 4;
	if (socket(AF_INET, SOCK_STREAM, 0) >= 0 || errno != EPERM)
		bad |= 8;
	if (syscall(SYS_clone, SIGCHLD, 0, NULL, NULL, 0) >= 0 || errno != EPERM) /* a new process */
		bad |= 16;
	if (unshare(CLONE_NEWUSER) == 0 || errno != EPERM)
		bad |= 16;
	if (kill(1, 0) == 0 || errno != EPERM)
		bad |= 32;
	pthread_t t;
	void *ret = NULL;
	if (pthread_create(&t, NULL, thread_main, &bad) != 0 || pthread_join(t, &ret) != 0 || ret != &bad)
		bad |= 64;
	int pair[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) < 0)
		bad |= 64;
	if (lbp_memfd("t", "x", 1) < 0)
		bad |= 64;
	return bad;
}

static void confinement_holds(void **state)
{
	(void)state;
	if (geteuid() != 0)
		skip();
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(confined_child());
	int st = 0;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = { cmocka_unit_test(confinement_holds) };
	return cmocka_run_group_tests(tests, NULL, NULL);
}

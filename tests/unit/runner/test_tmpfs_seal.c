/* Unit tests for sealing a tmpfs of ours (runner/root_share.c, lb_tmpfs_seal; a sandbox's state tmpfs, a shared
 * root's): read-only at its superblock once written; a copy of a writer's descriptor held for a moment by a child (as
 * a child cloned by another thread of lensboxd holds one until its exec) is waited for; one held past the bound is
 * refused with EBUSY. Needs root (CAP_SYS_ADMIN), as lensboxd's core has. */
/* Paths here are short temporary ones: a cut one would only fail the test. */
#pragma GCC diagnostic ignored "-Wformat-truncation"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "../../../runner/internal.h"

#define OPTS "size=1m,nr_inodes=256,mode=0700"

struct fixture {
	char dir[64];
	char file[PATH_MAX];
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	if (!f)
		return -1;
	*state = f;
	snprintf(f->dir, sizeof(f->dir), "/tmp/lb-tmpfs-seal-XXXXXX");
	if (!mkdtemp(f->dir) || mount("tmpfs", f->dir, "tmpfs", MS_NOSUID | MS_NODEV, OPTS) < 0)
		return -1;
	snprintf(f->file, sizeof(f->file), "%s/passwd", f->dir);
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	umount2(f->dir, MNT_DETACH);
	rmdir(f->dir);
	free(f);
	return 0;
}

static uint64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* A child holding a copy of a descriptor open for writing on the tmpfs for hold_ms; our own copy is closed. */
static pid_t writer_copy(const char *file, int hold_ms)
{
	int fd = open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "x\n", 2), 2);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct timespec ts = { hold_ms / 1000, (long)(hold_ms % 1000) * 1000000 };
		nanosleep(&ts, NULL);
		_exit(0);
	}
	close(fd);
	return pid;
}

static void sealed_once_written(void **state)
{
	struct fixture *f = *state;
	int fd = open(f->file, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(lb_tmpfs_seal(f->dir, OPTS), 0);
	assert_int_equal(open(f->file, O_WRONLY | O_CLOEXEC), -1);
	assert_int_equal(errno, EROFS);
	fd = open(f->file, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	close(fd);
}

static void waits_for_a_copy_that_goes(void **state)
{
	struct fixture *f = *state;
	pid_t pid = writer_copy(f->file, 60);
	/* What the kernel says without waiting: the copy alone keeps the tmpfs writable. */
	assert_int_equal(mount(NULL, f->dir, NULL, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, OPTS), -1);
	assert_int_equal(errno, EBUSY);
	uint64_t t0 = mono_ms();
	assert_int_equal(lb_tmpfs_seal(f->dir, OPTS), 0);
	assert_true(mono_ms() - t0 >= 30);
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_int_equal(open(f->file, O_WRONLY | O_CLOEXEC), -1);
	assert_int_equal(errno, EROFS);
}

static void refuses_a_copy_held_too_long(void **state)
{
	struct fixture *f = *state;
	pid_t pid = writer_copy(f->file, 5000);
	uint64_t t0 = mono_ms();
	assert_int_equal(lb_tmpfs_seal(f->dir, OPTS), -EBUSY);
	uint64_t took = mono_ms() - t0;
	assert_true(took >= 150 && took < 2000);
	kill(pid, SIGKILL);
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	/* Still writable: nothing was half done. */
	int fd = open(f->file, O_WRONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	close(fd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(sealed_once_written, setup, teardown),
		cmocka_unit_test_setup_teardown(waits_for_a_copy_that_goes, setup, teardown),
		cmocka_unit_test_setup_teardown(refuses_a_copy_held_too_long, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

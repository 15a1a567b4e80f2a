/* Unit tests for supervisor/core/socket.c (run as root, like every lensbox test): the API socket comes out
 * root-owned 0660 in a 0750 directory, replaces a stale socket, refuses a directory every user can enter; and making
 * it never changes what another thread's files get. lensboxd makes the socket again whenever the API process is
 * replaced, while the spares' and connection threads create the files of sandbox roots: a umask narrowed around the
 * bind once left a new image's shared root unreadable to every sandbox (0600 files, a 0600 directory), so every start
 * failed with "binding the sandbox's own /etc files: Permission denied" until lensboxd was restarted. */
/* Paths here are short temporary ones: a cut one would only fail the test. */
#pragma GCC diagnostic ignored "-Wformat-truncation"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "core.h"

static struct lbd_config cfg;
static char tmp[64];

static int setup(void **state)
{
	(void)state;
	memset(&cfg, 0, sizeof(cfg));
	umask(0022); /* as lensboxd's main sets it */
	snprintf(tmp, sizeof(tmp), "/tmp/lbd-socket-XXXXXX");
	if (!mkdtemp(tmp))
		return -1;
	snprintf(cfg.socket_path, sizeof(cfg.socket_path), "%s/sock/lensboxd.sock", tmp);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", tmp);
	return system(cmd) != 0;
}

static void test_socket_is_root_0660_in_a_0750_directory(void **state)
{
	(void)state;
	struct lb_error err = { 0 };
	int fd = lbd_socket_create(&cfg, &err);
	assert_true(fd >= 0);
	struct stat st;
	assert_int_equal(stat(cfg.socket_path, &st), 0);
	assert_true(S_ISSOCK(st.st_mode));
	assert_int_equal(st.st_mode & 07777, 0660);
	assert_int_equal(st.st_uid, 0);
	assert_int_equal(st.st_gid, 0);
	char dir[300];
	snprintf(dir, sizeof(dir), "%s/sock", tmp);
	assert_int_equal(stat(dir, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0750);
	close(fd);
	/* A socket left by a crash is replaced. */
	fd = lbd_socket_create(&cfg, &err);
	assert_true(fd >= 0);
	close(fd);
}

static void test_directory_every_user_can_enter_is_refused(void **state)
{
	(void)state;
	char dir[300];
	snprintf(dir, sizeof(dir), "%s/sock", tmp);
	assert_int_equal(mkdir(dir, 0755), 0);
	struct lb_error err = { 0 };
	assert_int_equal(lbd_socket_create(&cfg, &err), -EPERM);
	assert_non_null(strstr(err.msg, "accessible to every user"));
}

struct creator {
	atomic_bool stop;
	unsigned made;
	unsigned wrong; /* files whose mode came out other than asked */
	mode_t seen;
};

/* Creates files of mode 0644 as a start's thread creates a root's skeleton, and checks what each one got. */
static void *create_files(void *arg)
{
	struct creator *c = arg;
	char path[300];
	snprintf(path, sizeof(path), "%s/file", tmp);
	while (!atomic_load(&c->stop)) {
		int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
		if (fd < 0)
			continue;
		struct stat st;
		if (fstat(fd, &st) == 0 && (st.st_mode & 07777) != 0644) {
			c->wrong++;
			c->seen = st.st_mode & 07777;
		}
		c->made++;
		close(fd);
		unlink(path);
	}
	return NULL;
}

static void test_making_the_socket_leaves_other_threads_modes_alone(void **state)
{
	(void)state;
	struct creator c = { .stop = false };
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, create_files, &c), 0);
	/* Each round is ~50-100 us and the old code's narrowed umask lasted the bind: a few hundred rounds meet it
	 * many times over (the build before this test gave hundreds of 0600 files). */
	for (int i = 0; i < 2000; i++) {
		struct lb_error err = { 0 };
		int fd = lbd_socket_create(&cfg, &err);
		assert_true(fd >= 0);
		close(fd);
	}
	atomic_store(&c.stop, true);
	pthread_join(t, NULL);
	assert_true(c.made > 100);
	if (c.wrong)
		fail_msg("%u of %u files made beside the socket came out %04o instead of 0644", c.wrong, c.made,
			 (unsigned)c.seen);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_socket_is_root_0660_in_a_0750_directory, setup, teardown),
		cmocka_unit_test_setup_teardown(test_directory_every_user_can_enter_is_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_making_the_socket_leaves_other_threads_modes_alone, setup,
						teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

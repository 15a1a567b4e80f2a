/* Unit tests for lib/fileio.c: bounded reads of regular, kernel and pipe files, and the one-value readers. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "lb/fileio.h"

static char dir[] = "/tmp/lb-fileio-XXXXXX";

static int setup(void **state)
{
	(void)state;
	return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	char cmd[64];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	return system(cmd) == 0 ? 0 : -1;
}

static void put(const char *name, const char *s)
{
	char path[128];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	assert_int_equal(fputs(s, f) >= 0, 1);
	assert_int_equal(fclose(f), 0);
}

static void regular_file_whole_and_capped(void **state)
{
	(void)state;
	put("a", "hello\nworld\n");
	int d = open(dir, O_DIRECTORY | O_RDONLY);
	assert_true(d >= 0);
	char *buf = NULL;
	size_t len = 0;
	assert_int_equal(lb_read_file_at(d, "a", 100, &buf, &len), 0);
	assert_int_equal(len, 12);
	assert_string_equal(buf, "hello\nworld\n");
	free(buf);
	buf = NULL;
	assert_int_equal(lb_read_file_at(d, "a", 12, &buf, &len), 0);
	free(buf);
	buf = NULL;
	assert_int_equal(lb_read_file_at(d, "a", 11, &buf, &len), -EFBIG);
	assert_null(buf);
	assert_int_equal(lb_read_file_at(d, "missing", 11, &buf, &len), -ENOENT);
	put("empty", "");
	assert_int_equal(lb_read_file_at(d, "empty", 10, &buf, &len), 0);
	assert_int_equal(len, 0);
	assert_string_equal(buf, "");
	free(buf);
	close(d);
}

/* Kernel files say st_size 0 whatever they hold: read to their end all the same. */
static void kernel_file_of_size_zero(void **state)
{
	(void)state;
	struct stat st;
	assert_int_equal(stat("/proc/self/status", &st), 0);
	assert_int_equal(st.st_size, 0);
	char *buf = NULL;
	size_t len = 0;
	assert_int_equal(lb_read_file_at(AT_FDCWD, "/proc/self/status", 1 << 16, &buf, &len), 0);
	assert_true(len > 100);
	assert_int_equal(strlen(buf), len);
	assert_non_null(strstr(buf, "\nPid:"));
	assert_non_null(strstr(buf, "Cpus_allowed_list:"));
	free(buf);
}

/* A stream longer than the first guess grows the buffer up to the cap, and past it fails. */
static void pipe_grows_to_cap(void **state)
{
	(void)state;
	for (int round = 0; round < 2; round++) {
		int p[2];
		assert_int_equal(pipe(p), 0);
		pid_t pid = fork();
		assert_true(pid >= 0);
		if (pid == 0) {
			close(p[0]);
			char chunk[1000];
			memset(chunk, 'x', sizeof(chunk));
			for (int i = 0; i < 10; i++)
				if (lb_write_all(p[1], chunk, sizeof(chunk)) < 0)
					_exit(1);
			_exit(0);
		}
		close(p[1]);
		char *buf = NULL;
		size_t len = 0;
		int r = lb_read_fd(p[0], round == 0 ? 10000 : 9999, &buf, &len);
		close(p[0]);
		int status;
		waitpid(pid, &status, 0);
		if (round == 0) {
			assert_int_equal(r, 0);
			assert_int_equal(len, 10000);
			assert_int_equal(strspn(buf, "x"), 10000);
			free(buf);
		} else {
			assert_int_equal(r, -EFBIG);
		}
	}
}

static void one_value_readers(void **state)
{
	(void)state;
	put("n", "42\n");
	put("max", "max\n");
	put("bad", "12x\n");
	put("keyed", "low 1\nhigh 2\nmax 3\noom_kill 7\n");
	int d = open(dir, O_DIRECTORY | O_RDONLY);
	assert_true(d >= 0);
	uint64_t v = 0;
	assert_int_equal(lb_read_u64_at(d, "n", &v), 0);
	assert_int_equal(v, 42);
	assert_int_equal(lb_read_u64_at(d, "max", &v), 0);
	assert_true(v == UINT64_MAX);
	assert_int_equal(lb_read_u64_at(d, "bad", &v), -EINVAL);
	assert_int_equal(lb_read_keyed_u64_at(d, "keyed", "oom_kill", &v), 0);
	assert_int_equal(v, 7);
	assert_int_equal(lb_read_keyed_u64_at(d, "keyed", "max", &v), 0);
	assert_int_equal(v, 3);
	assert_int_equal(lb_read_keyed_u64_at(d, "keyed", "oom", &v), -ENOENT);
	close(d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(regular_file_whole_and_capped),
		cmocka_unit_test(kernel_file_of_size_zero),
		cmocka_unit_test(pipe_grows_to_cap),
		cmocka_unit_test(one_value_readers),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}

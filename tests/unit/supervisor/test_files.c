/* Unit tests for supervisor/files.c on a real directory (run as root, like every lensbox test): path checks, the
 * atomic write owned by the sandbox's uid, and the links, FIFOs and floods a sandbox can plant. */
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
#include <unistd.h>
#include <cmocka.h>

#include "api.h"
#include "files.h"

static char dir[64];
static int root = -1;

static int setup(void **state)
{
	(void)state;
	strcpy(dir, "/tmp/lbd-files-XXXXXX");
	assert_non_null(mkdtemp(dir));
	root = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	return root < 0;
}

static int teardown(void **state)
{
	(void)state;
	close(root);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	return system(cmd) != 0;
}

static void path_check(void **state)
{
	(void)state;
	struct lbd_fail f;
	static const char *const ok[] = { "a", "a/b/c.txt", "with space", ".hidden", "a..b", "...", "x/.lensbox" };
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
		assert_int_equal(lbd_path_check(ok[i], false, &f), 0);
	static const char *const bad[] = { "",	  "/etc/shadow", "..",	"a/../b",   "a//b",
					   "./a", "a/",		 "a/.", ".lensbox", ".lensbox/x" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		memset(&f, 0, sizeof(f));
		assert_int_equal(lbd_path_check(bad[i], false, &f), -EINVAL);
		assert_int_equal(f.status, 400);
		assert_string_equal(f.code, "invalid_path");
	}
	assert_int_equal(lbd_path_check("", true, &f), 0);
	char longc[300];
	memset(longc, 'x', sizeof(longc) - 1);
	longc[sizeof(longc) - 1] = '\0';
	assert_int_equal(lbd_path_check(longc, false, &f), -EINVAL);
}

static void write_is_owned_and_atomic(void **state)
{
	(void)state;
	struct lbd_fail f = { 0 };
	assert_int_equal(lbd_file_write(root, "a/b/c.txt", "hello", 5, 0644, 4242, 4343, &f), 0);
	char p[128];
	struct stat st;
	snprintf(p, sizeof(p), "%s/a/b/c.txt", dir);
	assert_int_equal(stat(p, &st), 0);
	assert_int_equal(st.st_uid, 4242);
	assert_int_equal(st.st_gid, 4343);
	assert_int_equal(st.st_size, 5);
	snprintf(p, sizeof(p), "%s/a", dir);
	assert_int_equal(stat(p, &st), 0);
	assert_int_equal(st.st_uid, 4242);
	assert_int_equal(lbd_file_write(root, "a/b/c.txt", "x", 1, 0644, 4242, 4343, &f), 0);
	int fd = -1;
	uint64_t size = 0;
	assert_int_equal(lbd_file_open_read(root, "a/b/c.txt", 100, &fd, &size, &f), 0);
	assert_int_equal(size, 1);
	close(fd);
	/* over a directory, through a file */
	memset(&f, 0, sizeof(f));
	assert_int_equal(lbd_file_write(root, "a/b", "x", 1, 0644, 0, 0, &f), -EISDIR);
	assert_int_equal(f.status, 409);
	memset(&f, 0, sizeof(f));
	assert_true(lbd_file_write(root, "a/b/c.txt/d", "x", 1, 0644, 0, 0, &f) < 0);
	assert_int_equal(f.status, 409);
}

static void planted_links_are_not_followed(void **state)
{
	(void)state;
	char p[128];
	snprintf(p, sizeof(p), "%s/shadow", dir);
	assert_int_equal(symlink("/etc/shadow", p), 0);
	snprintf(p, sizeof(p), "%s/etc", dir);
	assert_int_equal(symlink("/etc", p), 0);
	struct lbd_fail f = { 0 };
	int fd = -1;
	uint64_t size;
	assert_int_equal(lbd_file_open_read(root, "shadow", 1 << 20, &fd, &size, &f), -ELOOP);
	assert_int_equal(f.status, 404);
	memset(&f, 0, sizeof(f));
	assert_true(lbd_file_open_read(root, "etc/passwd", 1 << 20, &fd, &size, &f) < 0);
	assert_int_equal(f.status, 404);
	memset(&f, 0, sizeof(f));
	assert_true(lbd_file_write(root, "etc/lensbox-test-must-not-exist", "x", 1, 0644, 0, 0, &f) < 0);
	assert_int_equal(access("/etc/lensbox-test-must-not-exist", F_OK), -1);
	/* a write onto the link replaces the link itself */
	struct stat before, after;
	assert_int_equal(stat("/etc/shadow", &before), 0);
	assert_int_equal(lbd_file_write(root, "shadow", "mine", 4, 0644, 0, 0, &f), 0);
	assert_int_equal(stat("/etc/shadow", &after), 0);
	assert_int_equal(before.st_mtim.tv_sec, after.st_mtim.tv_sec);
	assert_int_equal(before.st_size, after.st_size);
	snprintf(p, sizeof(p), "%s/shadow", dir);
	assert_int_equal(lstat(p, &after), 0);
	assert_true(S_ISREG(after.st_mode));
}

static void fifo_and_big_files(void **state)
{
	(void)state;
	char p[128];
	snprintf(p, sizeof(p), "%s/fifo", dir);
	assert_int_equal(mkfifo(p, 0644), 0);
	struct lbd_fail f = { 0 };
	int fd = -1;
	uint64_t size;
	assert_int_equal(lbd_file_open_read(root, "fifo", 1 << 20, &fd, &size, &f), -EINVAL);
	assert_int_equal(f.status, 422);
	assert_string_equal(f.code, "not_a_regular_file");
	snprintf(p, sizeof(p), "%s/sparse", dir);
	int w = open(p, O_CREAT | O_WRONLY, 0644);
	assert_true(w >= 0);
	assert_int_equal(ftruncate(w, 10ll << 30), 0);
	close(w);
	memset(&f, 0, sizeof(f));
	assert_int_equal(lbd_file_open_read(root, "sparse", 25 << 20, &fd, &size, &f), -EFBIG);
	assert_int_equal(f.status, 413);
	assert_non_null(strstr(f.message, "10Gi"));
}

static void listing_is_bounded(void **state)
{
	(void)state;
	char p[160];
	snprintf(p, sizeof(p), "%s/many", dir);
	assert_int_equal(mkdir(p, 0755), 0);
	for (int i = 0; i < 1500; i++) {
		snprintf(p, sizeof(p), "%s/many/f%04d", dir, i);
		int fd = open(p, O_CREAT | O_WRONLY, 0644);
		assert_true(fd >= 0);
		close(fd);
	}
	yajl_gen g = lbd_gen_new();
	struct lbd_fail f = { 0 };
	assert_int_equal(lbd_files_list(root, "many", false, g, &f), 0);
	const unsigned char *buf;
	size_t len;
	yajl_gen_get_buf(g, &buf, &len);
	char errbuf[128];
	char *copy = strndup((const char *)buf, len);
	yajl_val v = yajl_tree_parse(copy, errbuf, sizeof(errbuf));
	assert_non_null(v);
	yajl_val files = lbd_json_get(v, "files");
	assert_int_equal(files->u.array.len, 1000);
	assert_int_equal(YAJL_GET_INTEGER(lbd_json_get(v, "more")), 500);
	assert_string_equal(YAJL_GET_STRING(lbd_json_get(files->u.array.values[0], "path")), "many/f0000");
	yajl_tree_free(v);
	free(copy);
	yajl_gen_free(g);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(path_check),
		cmocka_unit_test(write_is_owned_and_atomic),
		cmocka_unit_test(planted_links_are_not_followed),
		cmocka_unit_test(fifo_and_big_files),
		cmocka_unit_test(listing_is_bounded),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}

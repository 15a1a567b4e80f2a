/* Unit tests for the images' shared roots (runner/root_share.c): lb_shared_root_make() mounts the image under its
 * skeleton as one read-only overlay whose layers are named relative to the root's directory, leaves the caller's
 * working directory alone, makes its skeleton read-only, and refuses a relative path, a missing image, a file as
 * image and a directory that exists; lb_shared_root_remove() detaches it all; lb_shared_root_sweep() removes every
 * root under a parent. Needs root (CAP_SYS_ADMIN), as lensboxd's core has. */
/* Paths here are short temporary ones: a cut one would only fail the test. */
#pragma GCC diagnostic ignored "-Wformat-truncation"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
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

#include "lb/runner.h"

struct fixture {
	char tmp[64];
	char image[PATH_MAX];
	char roots[PATH_MAX];
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	if (!f)
		return -1;
	*state = f; /* teardown frees it, whatever happens here */
	snprintf(f->tmp, sizeof(f->tmp), "/tmp/lb-root-share-XXXXXX");
	if (!mkdtemp(f->tmp))
		return -1;
	snprintf(f->image, sizeof(f->image), "%s/image", f->tmp);
	snprintf(f->roots, sizeof(f->roots), "%s/roots", f->tmp);
	char path[PATH_MAX];
	if (mkdir(f->image, 0755) < 0 || mkdir(f->roots, 0700) < 0)
		return -1;
	snprintf(path, sizeof(path), "%s/etc", f->image);
	if (mkdir(path, 0755) < 0)
		return -1;
	snprintf(path, sizeof(path), "%s/etc/os-release", f->image);
	FILE *fp = fopen(path, "w");
	if (!fp)
		return -1;
	fputs("ID=test\n", fp);
	fclose(fp);
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	char cmd[PATH_MAX + 16];
	(void)lb_shared_root_sweep(f->roots, NULL);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", f->tmp);
	if (system(cmd) != 0)
		return -1;
	free(f);
	return 0;
}

/* The mountinfo line's options (after " - ") of the mount at path, or "" when nothing is mounted there. */
static void mount_options(const char *path, char *out, size_t size)
{
	out[0] = '\0';
	FILE *fp = fopen("/proc/self/mountinfo", "r");
	char line[4096];
	while (fp && fgets(line, sizeof(line), fp)) {
		char point[PATH_MAX];
		if (sscanf(line, "%*s %*s %*s %*s %4095s", point) == 1 && strcmp(point, path) == 0) {
			const char *dash = strstr(line, " - ");
			snprintf(out, size, "%s", dash ? dash + 3 : "");
		}
	}
	if (fp)
		fclose(fp);
}

static void makes_a_read_only_overlay_named_relative(void **state)
{
	struct fixture *f = *state;
	char dir[PATH_MAX], path[PATH_MAX], opts[4096], cwd[PATH_MAX], cwd_after[PATH_MAX];
	snprintf(dir, sizeof(dir), "%s/0", f->roots);
	assert_non_null(getcwd(cwd, sizeof(cwd)));
	struct lb_error err = { 0 };
	assert_int_equal(lb_shared_root_make(f->image, dir, &err), 0);
	assert_non_null(getcwd(cwd_after, sizeof(cwd_after)));
	assert_string_equal(cwd, cwd_after);

	snprintf(path, sizeof(path), "%s/root", dir);
	mount_options(path, opts, sizeof(opts));
	assert_non_null(strstr(opts, "overlay overlay ro,"));
	assert_non_null(strstr(opts, "lowerdir=skel:img"));
	/* the image shows through, the skeleton's mount points and /etc files are on top */
	snprintf(path, sizeof(path), "%s/root/etc/os-release", dir);
	assert_int_equal(access(path, R_OK), 0);
	static const char *const made[] = {
		"sandbox", "tmp", "proc", "dev", "sys/devices/system/cpu", "etc/passwd", "etc/resolv.conf"
	};
	for (size_t i = 0; i < sizeof(made) / sizeof(made[0]); i++) {
		snprintf(path, sizeof(path), "%s/root/%s", dir, made[i]);
		assert_int_equal(access(path, F_OK), 0);
	}
	/* nothing in it can be written: not the overlay, not the skeleton below it */
	snprintf(path, sizeof(path), "%s/root/etc/new", dir);
	assert_int_equal(open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644), -1);
	assert_int_equal(errno, EROFS);
	snprintf(path, sizeof(path), "%s/skel/etc/new", dir);
	assert_int_equal(open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644), -1);
	assert_int_equal(errno, EROFS);

	assert_int_equal(lb_shared_root_remove(dir, &err), 0);
	mount_options(dir, opts, sizeof(opts));
	assert_string_equal(opts, "");
	assert_int_equal(access(dir, F_OK), -1);
	assert_int_equal(lb_shared_root_remove(dir, &err), 0); /* gone already: nothing to do */
}

static void refuses_what_it_cannot_use(void **state)
{
	struct fixture *f = *state;
	char dir[PATH_MAX], file[PATH_MAX], missing[PATH_MAX];
	snprintf(dir, sizeof(dir), "%s/1", f->roots);
	snprintf(file, sizeof(file), "%s/etc/os-release", f->image);
	snprintf(missing, sizeof(missing), "%s/missing", f->tmp);
	struct lb_error err = { 0 };
	assert_int_equal(lb_shared_root_make("relative/image", dir, &err), -EINVAL);
	assert_int_equal(lb_shared_root_make(f->image, "relative/dir", &err), -EINVAL);
	assert_int_equal(lb_shared_root_make(missing, dir, &err), -ENOENT);
	assert_int_equal(lb_shared_root_make(file, dir, &err), -ENOTDIR);
	assert_int_equal(access(dir, F_OK), -1); /* nothing made for a refusal */
	assert_int_equal(mkdir(dir, 0700), 0);
	assert_int_equal(lb_shared_root_make(f->image, dir, &err), -EEXIST);
	assert_int_equal(rmdir(dir), 0);
}

static void sweep_removes_every_root(void **state)
{
	struct fixture *f = *state;
	char dir[PATH_MAX], opts[4096];
	struct lb_error err = { 0 };
	for (int i = 0; i < 3; i++) {
		snprintf(dir, sizeof(dir), "%s/s%d", f->roots, i);
		assert_int_equal(lb_shared_root_make(f->image, dir, &err), 0);
	}
	assert_int_equal(lb_shared_root_sweep(f->roots, &err), 0);
	for (int i = 0; i < 3; i++) {
		snprintf(dir, sizeof(dir), "%s/s%d", f->roots, i);
		mount_options(dir, opts, sizeof(opts));
		assert_string_equal(opts, "");
		assert_int_equal(access(dir, F_OK), -1);
	}
	snprintf(dir, sizeof(dir), "%s/none", f->tmp);
	assert_int_equal(lb_shared_root_sweep(dir, &err), 0); /* no parent: nothing left */
}

int main(void)
{
	if (geteuid() != 0) {
		fprintf(stderr, "test_root_share needs root (it mounts)\n");
		return 1;
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(makes_a_read_only_overlay_named_relative, setup, teardown),
		cmocka_unit_test_setup_teardown(refuses_what_it_cannot_use, setup, teardown),
		cmocka_unit_test_setup_teardown(sweep_removes_every_root, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

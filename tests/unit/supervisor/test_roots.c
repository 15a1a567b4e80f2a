/* Unit tests for supervisor/core/roots.c on real mounts (run as root, like every lensbox test): one shared root per
 * image, given again to the next start; the least recently used goes when the table is full, but never one a start
 * is using (all in use: no root, the start makes its own); a replaced or removed image's root goes, after its last
 * start when one is using it; lensboxd's start sweeps what a dead one left, and its stop removes them all. */
/* Paths here are short temporary ones: a cut one would only fail the test. */
#pragma GCC diagnostic ignored "-Wformat-truncation"

#include <errno.h>
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

#include "core.h"

static struct lbd d; /* static for its size, as lensboxd's own */
static char tmp[64];

static void image_dir(int n, char *out, size_t size)
{
	snprintf(out, size, "%s/img%d", tmp, n);
}

static int setup(void **state)
{
	(void)state;
	memset(&d, 0, sizeof(d));
	snprintf(tmp, sizeof(tmp), "/tmp/lbd-roots-XXXXXX");
	if (!mkdtemp(tmp))
		return -1;
	snprintf(d.cfg.run_dir, sizeof(d.cfg.run_dir), "%s/run", tmp);
	if (mkdir(d.cfg.run_dir, 0700) < 0)
		return -1;
	char path[PATH_MAX];
	for (int i = 0; i <= LBD_ROOTS_MAX + 1; i++) {
		image_dir(i, path, sizeof(path));
		if (mkdir(path, 0755) < 0)
			return -1;
	}
	struct lb_error err = { 0 };
	return lbd_roots_open(&d, &err);
}

static int teardown(void **state)
{
	(void)state;
	lbd_roots_close(&d);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", tmp);
	return system(cmd) != 0;
}

/* Whether a shared root is mounted at dir (its overlay at dir/root is there). */
static bool mounted(const char *dir)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/root/sandbox", dir);
	return access(path, F_OK) == 0;
}

static void one_root_per_image_given_again(void **state)
{
	(void)state;
	char img[PATH_MAX], a[PATH_MAX], b[PATH_MAX], c[PATH_MAX];
	image_dir(0, img, sizeof(img));
	assert_non_null(lbd_root_get(&d, img, a));
	assert_true(mounted(a));
	lbd_root_put(&d, a);
	assert_non_null(lbd_root_get(&d, img, b));
	assert_string_equal(a, b);
	lbd_root_put(&d, b);
	image_dir(1, img, sizeof(img));
	assert_non_null(lbd_root_get(&d, img, c));
	assert_string_not_equal(a, c);
	lbd_root_put(&d, c);
	/* no image there: none given, the start says why */
	snprintf(img, sizeof(img), "%s/missing", tmp);
	assert_null(lbd_root_get(&d, img, c));
	lbd_root_put(&d, NULL);
	lbd_roots_close(&d);
	assert_false(mounted(a));
	assert_int_equal(access(a, F_OK), -1);
}

static void the_least_recently_used_goes_but_not_under_a_start(void **state)
{
	(void)state;
	char img[PATH_MAX], held[PATH_MAX], first[PATH_MAX], dir[PATH_MAX];
	image_dir(0, img, sizeof(img));
	assert_non_null(lbd_root_get(&d, img, held)); /* a start using it, and the least recently used */
	for (int i = 1; i < LBD_ROOTS_MAX; i++) {
		image_dir(i, img, sizeof(img));
		assert_non_null(lbd_root_get(&d, img, dir));
		if (i == 1)
			memcpy(first, dir, sizeof(first));
		lbd_root_put(&d, dir);
	}
	image_dir(LBD_ROOTS_MAX, img, sizeof(img));
	assert_non_null(lbd_root_get(&d, img, dir)); /* the table is full: img1's goes, not the one in use */
	lbd_root_put(&d, dir);
	assert_true(mounted(held));
	assert_false(mounted(first));
	lbd_root_put(&d, held);

	/* every root in use: a new image gets none */
	char in_use[LBD_ROOTS_MAX][PATH_MAX];
	for (int i = 0; i < LBD_ROOTS_MAX; i++) {
		image_dir(i + 1, img, sizeof(img));
		assert_non_null(lbd_root_get(&d, img, in_use[i]));
	}
	image_dir(0, img, sizeof(img));
	assert_null(lbd_root_get(&d, img, dir));
	for (int i = 0; i < LBD_ROOTS_MAX; i++)
		lbd_root_put(&d, in_use[i]);
	assert_non_null(lbd_root_get(&d, img, dir));
	lbd_root_put(&d, dir);
}

static void a_replaced_or_removed_image_loses_its_root_after_its_last_start(void **state)
{
	(void)state;
	char img[PATH_MAX], old[PATH_MAX], moved[PATH_MAX], fresh[PATH_MAX], other[PATH_MAX];
	image_dir(0, img, sizeof(img));
	assert_non_null(lbd_root_get(&d, img, old)); /* held by a start */
	snprintf(moved, sizeof(moved), "%s.old", img);
	assert_int_equal(rename(img, moved), 0);
	assert_int_equal(mkdir(img, 0755), 0); /* another directory at the same path: another image */
	assert_non_null(lbd_root_get(&d, img, fresh));
	assert_string_not_equal(old, fresh);
	assert_true(mounted(old)); /* its start still uses it */
	lbd_root_put(&d, old);
	assert_false(mounted(old));
	lbd_root_put(&d, fresh);

	/* removed: pruned at once when nothing uses it */
	image_dir(1, img, sizeof(img));
	assert_non_null(lbd_root_get(&d, img, other));
	lbd_root_put(&d, other);
	assert_int_equal(rmdir(img), 0);
	lbd_roots_prune(&d);
	assert_false(mounted(other));
	assert_true(mounted(fresh)); /* its image is still there */
}

static void a_dead_daemons_roots_are_swept(void **state)
{
	(void)state;
	char img[PATH_MAX], left[PATH_MAX];
	image_dir(0, img, sizeof(img));
	snprintf(left, sizeof(left), "%s/roots/7", d.cfg.run_dir);
	struct lb_error err = { 0 };
	assert_int_equal(lb_shared_root_make(img, left, &err), 0); /* as a killed lensboxd leaves it */
	lbd_roots_close(&d);
	assert_true(mounted(left));
	assert_int_equal(lbd_roots_open(&d, &err), 0);
	assert_false(mounted(left));
	assert_int_equal(access(left, F_OK), -1);
}

int main(void)
{
	if (geteuid() != 0) {
		fprintf(stderr, "test_roots needs root (it mounts)\n");
		return 1;
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(one_root_per_image_given_again, setup, teardown),
		cmocka_unit_test_setup_teardown(the_least_recently_used_goes_but_not_under_a_start, setup, teardown),
		cmocka_unit_test_setup_teardown(a_replaced_or_removed_image_loses_its_root_after_its_last_start, setup,
						teardown),
		cmocka_unit_test_setup_teardown(a_dead_daemons_roots_are_swept, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Unit test for lb_cg_detect() (runner/cgroup.c): the usual-layout path (statfs under /sys/fs/cgroup, each v1
 * controller proven by its file in our lensbox directory) finds the same hierarchies as /proc/self/mountinfo on this
 * host: the same version, each controller in the same filesystem, the same controllers sharing a hierarchy. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <cmocka.h>

#include "../../../runner/cgroup.h"

static dev_t dev_of(const char *path)
{
	struct stat st;
	assert_int_equal(stat(path, &st), 0);
	return st.st_dev;
}

static void usual_layout_matches_mountinfo(void **state)
{
	(void)state;
	struct lb_cg_host fast, slow;
	struct lb_error err;
	int rf = lb_cg_detect_from(&fast, false, &err);
	int rs = lb_cg_detect_from(&slow, true, &err);
	assert_int_equal(rf, rs);
	if (rs < 0)
		fail_msg("no usable cgroup hierarchy on this host: %s", err.msg);
	assert_int_equal(fast.version, slow.version);
	assert_int_equal(fast.v2_mounted, slow.v2_mounted);
	if (slow.v2_mounted)
		assert_true(dev_of(fast.v2_mount) == dev_of(slow.v2_mount));
	assert_string_equal(fast.v2_base, slow.v2_base);
	for (int c = 0; c < LB_CG1_N; c++) {
		assert_int_equal(fast.v1_mount[c][0] != '\0', slow.v1_mount[c][0] != '\0');
		if (!slow.v1_mount[c][0])
			continue;
		assert_true(dev_of(fast.v1_mount[c]) == dev_of(slow.v1_mount[c]));
		/* controllers of one hierarchy share one path in both (cgroup_v1.c makes one directory for them) */
		for (int p = 0; p < c; p++)
			if (slow.v1_mount[p][0])
				assert_int_equal(strcmp(fast.v1_mount[p], fast.v1_mount[c]) == 0,
						 strcmp(slow.v1_mount[p], slow.v1_mount[c]) == 0);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(usual_layout_matches_mountinfo),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

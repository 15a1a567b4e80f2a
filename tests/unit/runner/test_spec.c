/* Unit tests for lb_sandbox_start()'s validation: bad specs and a kernel below the policy's Landlock minimum are
 * refused with the exact errno before anything (cgroup, disk, mount) is created. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <cmocka.h>

#include "../../../runner/internal.h"
#include "lb/runner.h"

static struct lb_policy policy;

static struct lb_sandbox_spec good_spec(void)
{
	memset(&policy, 0, sizeof(policy));
	policy.landlock.min_abi = 1;
	policy.landlock.degraded_min_abi = 1;
	struct lb_sandbox_spec s = { .name = "unit-spec",
				     .rootfs = "/nonexistent-rootfs",
				     .storage = "/nonexistent-storage/unit",
				     .run_dir = "/nonexistent-run",
				     .host_uid = 300000,
				     .host_gid = 300000,
				     .policy = &policy };
	return s;
}

static void expect_refused(const struct lb_sandbox_spec *s, int errnum, const char *words)
{
	struct lb_sandbox *sb = NULL;
	struct lb_error err;
	lb_error_clear(&err);
	assert_int_equal(lb_sandbox_start(s, &sb, &err), -errnum);
	assert_null(sb);
	assert_int_equal(err.code, errnum);
	assert_non_null(strstr(err.msg, words));
}

static void bad_specs_refused(void **state)
{
	(void)state;
	struct lb_sandbox_spec s = good_spec();
	s.name = "../etc";
	expect_refused(&s, EINVAL, "sandbox name");
	s = good_spec();
	s.rootfs = "relative/root";
	expect_refused(&s, EINVAL, "absolute");
	s = good_spec();
	s.host_uid = 0;
	expect_refused(&s, EINVAL, "must not be 0");
	s = good_spec();
	s.host_gid = (gid_t)-1;
	expect_refused(&s, EINVAL, "must not be 0");
	s = good_spec();
	s.policy = NULL;
	expect_refused(&s, EINVAL, "no policy");
}

static void landlock_below_minimum_refused(void **state)
{
	(void)state;
	struct lb_sandbox_spec s = good_spec();
	policy.landlock.min_abi = 99;
	policy.landlock.degraded_min_abi = 99;
	expect_refused(&s, ENOTSUP, "below the policy's minimum 99");
	/* Refused before anything was created. */
	struct stat st;
	assert_int_equal(stat("/nonexistent-storage", &st), -1);
	assert_int_equal(stat("/nonexistent-run", &st), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(bad_specs_refused),
		cmocka_unit_test(landlock_below_minimum_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

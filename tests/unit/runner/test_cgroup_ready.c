/* Unit tests for cgroup directories made ahead (runner/cgroup_ready.c, cgroup_v1.c's adopt_ready): a made set has
 * a directory in each v1 hierarchy with its leaves and no limit; lb_cg_create_from renames it (same inode) and
 * writes the sandbox's limits, leaving nothing under the ready name; a name that exists is refused; a set meeting an
 * existing cgroup of the sandbox's name is removed, not left; the sweep removes every set of a prefix and only those.
 * cgroup v1 only: on a v2 host lb_ready_cgroup_make must refuse with ENOTSUP, which is checked instead. Root. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "../../../runner/cgroup.h"

static char ready_a[64], ready_b[64], sandbox[64], prefix[32];

static ino_t ino_of(const char *ctrl, const char *name)
{
	char path[512];
	snprintf(path, sizeof(path), "/sys/fs/cgroup/%s/lensbox/%s", ctrl, name);
	struct stat st;
	return stat(path, &st) == 0 ? st.st_ino : 0;
}

static long long read_ll(const char *ctrl, const char *name, const char *file)
{
	char path[512];
	snprintf(path, sizeof(path), "/sys/fs/cgroup/%s/lensbox/%s/%s", ctrl, name, file);
	FILE *f = fopen(path, "re");
	assert_non_null(f);
	long long v = 0;
	assert_int_equal(fscanf(f, "%lld", &v), 1);
	fclose(f);
	return v;
}

static int setup(void **state)
{
	(void)state;
	snprintf(prefix, sizeof(prefix), "utest-ready-%d-", (int)getpid());
	snprintf(ready_a, sizeof(ready_a), "%sa", prefix);
	snprintf(ready_b, sizeof(ready_b), "%sb", prefix);
	snprintf(sandbox, sizeof(sandbox), "utest-sb-%d", (int)getpid());
	return 0;
}

static bool v1_host(void)
{
	struct lb_cg_host host;
	struct lb_error err = { 0 };
	return lb_cg_detect(&host, &err) == 0 && host.version == LB_CGROUP_V1;
}

static void made_set_is_renamed_with_its_leaves_and_limits(void **state)
{
	(void)state;
	struct lb_error err = { 0 };
	if (!v1_host()) {
		assert_int_equal(lb_ready_cgroup_make(ready_a, &err), -ENOTSUP);
		return;
	}
	assert_int_equal(lb_ready_cgroup_make(ready_a, &err), 0);
	assert_int_equal(lb_ready_cgroup_make(ready_a, &err), -EEXIST);
	char leaf[128];
	snprintf(leaf, sizeof(leaf), "%s/init", ready_a);
	assert_true(ino_of("freezer", leaf) != 0);
	snprintf(leaf, sizeof(leaf), "%s/run", ready_a);
	assert_true(ino_of("memory", leaf) != 0);
	assert_true(read_ll("memory", ready_a, "memory.limit_in_bytes") > (1LL << 60));
	ino_t mem = ino_of("memory", ready_a), frz = ino_of("freezer", ready_a);

	struct lb_cg_host host;
	assert_int_equal(lb_cg_detect(&host, &err), 0);
	struct lb_sandbox_limits lim = { .memory_bytes = 200u << 20, .cpu_millicores = 500, .pids = 64 };
	struct lb_cgroup *cg = NULL;
	assert_int_equal(lb_cg_create_from(&host, sandbox, ready_a, &lim, &cg, &err), 0);
	assert_true(cg->fresh);
	assert_int_equal(ino_of("memory", sandbox), mem);
	assert_int_equal(ino_of("freezer", sandbox), frz);
	assert_int_equal(ino_of("memory", ready_a), 0);
	assert_int_equal(ino_of("freezer", ready_a), 0);
	assert_int_equal(ino_of("pids", ready_a), 0);
	assert_int_equal(read_ll("memory", sandbox, "memory.limit_in_bytes"), 200LL << 20);
	assert_int_equal(read_ll("cpu", sandbox, "cpu.cfs_quota_us"), 50000);
	assert_int_equal(read_ll("pids", sandbox, "pids.max"), 64);

	/* Another set for the same name while it exists: refused by the rename, and removed rather than left. */
	assert_int_equal(lb_ready_cgroup_make(ready_b, &err), 0);
	struct lb_cgroup *again = NULL;
	assert_int_equal(lb_cg_create_from(&host, sandbox, ready_b, &lim, &again, &err), 0);
	assert_false(again->fresh);
	assert_int_equal(ino_of("memory", ready_b), 0);
	assert_int_equal(ino_of("freezer", ready_b), 0);
	lb_cg_free(again);

	assert_int_equal(lb_cg_destroy(cg, &err), 0);
	lb_cg_free(cg);
	assert_int_equal(ino_of("memory", sandbox), 0);
}

static void sweep_removes_the_prefix_only(void **state)
{
	(void)state;
	struct lb_error err = { 0 };
	if (!v1_host()) {
		assert_int_equal(lb_ready_cgroup_sweep(prefix, &err), 0);
		return;
	}
	assert_int_equal(lb_ready_cgroup_make(ready_a, &err), 0);
	assert_int_equal(lb_ready_cgroup_make(ready_b, &err), 0);
	char other[64];
	snprintf(other, sizeof(other), "utest-keep-%d", (int)getpid());
	assert_int_equal(lb_ready_cgroup_make(other, &err), 0);
	assert_int_equal(lb_ready_cgroup_sweep("", &err), -EINVAL);
	assert_int_equal(lb_ready_cgroup_sweep(prefix, &err), 0);
	assert_int_equal(ino_of("memory", ready_a), 0);
	assert_int_equal(ino_of("freezer", ready_b), 0);
	assert_true(ino_of("memory", other) != 0);
	assert_int_equal(lb_ready_cgroup_remove(other, &err), 0);
	assert_int_equal(ino_of("memory", other), 0);
	assert_int_equal(lb_ready_cgroup_remove(other, &err), 0); /* gone already: nothing to do */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(made_set_is_renamed_with_its_leaves_and_limits),
		cmocka_unit_test(sweep_removes_the_prefix_only),
	};
	return cmocka_run_group_tests(tests, setup, NULL);
}

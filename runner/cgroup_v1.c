/*
 * cgroup_v1.c — the cgroup v1 back end: one directory `lensbox/<name>` in each of the memory, cpu, cpuacct, pids
 * and freezer hierarchies with the limits on it, and below it the leaves a hierarchy needs (cgroup.h): `init` and
 * `run` in freezer, `run` in memory and cpuacct. A process is in a leaf where there is one, else in the directory.
 *
 * Runs in the caller (root). Writes only below <controller mount>/lensbox. v1 has no cgroup.kill, so a leaf is
 * killed by SIGKILLing each listed process through a pidfd (a pid is proven still ours before the signal), a few
 * times; if forks outpace that, by freezing it (nothing in it can fork or exit, so no pid read from cgroup.procs
 * can be recycled under us), sending SIGKILL to each pid, then thawing it. cgroup.c repeats such rounds until the
 * leaf is empty.
 * cpuset is never touched: children inherit it.
 */
/* Paths built here come from bounded parts (names <= 63 bytes, mount points, run_dir checked by the caller);
 * a path cut at PATH_MAX only fails to open. */
#pragma GCC diagnostic ignored "-Wformat-truncation"

#include "cgroup.h"

#include "lb/cleanup.h"
#include "lb/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define CFS_PERIOD_US 100000u

static const char *dir_of(const struct lb_cgroup *cg, enum lb_cg1_ctrl c)
{
	return cg->ctrl_dir[c] >= 0 ? cg->dirs[cg->ctrl_dir[c]] : NULL;
}

static int write_in(const char *dir, const char *file, const char *value, struct lb_error *err)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/%s", dir, file);
	int r = lb_write_file_at(AT_FDCWD, path, value);
	if (r < 0)
		return lb_error_set(err, r, "writing %s to %s", value, path);
	return 0;
}

/* The leaves a controller's hierarchy needs (cgroup.h says why). */
static unsigned ctrl_leaves(int c)
{
	switch (c) {
	case LB_CG1_FREEZER:
		return 1u << LB_CG_INIT | 1u << LB_CG_RUN;
	case LB_CG1_MEMORY:
	case LB_CG1_CPUACCT:
		return 1u << LB_CG_RUN;
	default:
		return 0;
	}
}

/* The directory made ahead under cg->ready (lb_ready_cgroup_make) in dirs[i]'s hierarchy becomes dirs[i], leaves
 * and all: true when renamed. Otherwise (an existing cgroup of dirs[i]'s name: EEXIST; none made ahead there) the
 * ready one is removed, empty as it was made, and dirs[i] is made as without one. */
static bool adopt_ready(struct lb_cgroup *cg, size_t i)
{
	const char *slash = strrchr(cg->dirs[i], '/');
	char from[PATH_MAX];
	snprintf(from, sizeof(from), "%.*s/%s", (int)(slash - cg->dirs[i]), cg->dirs[i], cg->ready);
	/* rename(2) within our own `lensbox` directory of this hierarchy: v1 renames a cgroup in place (same parent
	 * only), and refuses an existing target (EEXIST) rather than replacing it. Safe: both are our names, and the
	 * ready directory was made by us and never joined by a process. */
	if (rename(from, cg->dirs[i]) == 0)
		return true;
	for (int leaf = LB_CG_INIT; leaf <= LB_CG_RUN; leaf++) {
		char path[PATH_MAX];
		snprintf(path, sizeof(path), "%s/%s", from, lb_cg_leaf_name((enum lb_cg_leaf)leaf));
		(void)rmdir(path); /* an empty cgroup of our own; ENOENT when this hierarchy has no such leaf */
	}
	(void)rmdir(from);
	return false;
}

static int cg1_setup(const struct lb_cg_host *host, struct lb_cgroup *cg, const char *name, bool create,
		     const struct lb_sandbox_limits *lim, struct lb_error *err)
{
	for (int c = 0; c < LB_CG1_N; c++) {
		if (!host->v1_mount[c][0])
			continue;
		/* Controllers co-mounted in one hierarchy ("cpu,cpuacct") share one directory. */
		int found = -1;
		for (int p = 0; p < c; p++)
			if (host->v1_mount[p][0] && strcmp(host->v1_mount[p], host->v1_mount[c]) == 0)
				found = cg->ctrl_dir[p];
		if (found >= 0) {
			cg->ctrl_dir[c] = found;
			cg->leaves[found] |= ctrl_leaves(c);
			continue;
		}
		char *dir = NULL;
		if (asprintf(&dir, "%s/lensbox/%s", host->v1_mount[c], name) < 0)
			return lb_error_set(err, ENOMEM, "allocating cgroup path");
		cg->ctrl_dir[c] = (int)cg->n_dirs;
		cg->leaves[cg->n_dirs] = ctrl_leaves(c);
		cg->dirs[cg->n_dirs++] = dir;
	}
	if (!create)
		return 0;

	for (size_t i = 0; i < cg->n_dirs; i++) {
		if (cg->ready && adopt_ready(cg, i))
			continue;
		/* mkdir below our own `lensbox` directory of this hierarchy only (the chain the first time). */
		if (mkdir(cg->dirs[i], 0755) == 0)
			continue;
		if (errno == EEXIST) {
			cg->fresh = false; /* a crash's leftover, or a live sandbox of this name: the caller checks */
			continue;
		}
		int r = errno == ENOENT ? lb_mkdir_p(cg->dirs[i], 0755) : -errno;
		if (r < 0)
			return lb_error_set(err, r, "creating cgroup %s", cg->dirs[i]);
	}

	char buf[64];
	const char *mem = dir_of(cg, LB_CG1_MEMORY);
	/* A fresh memory cgroup starts with no swap use; swappiness 0 before the leaves exist so they inherit it. */
	(void)write_in(mem, "memory.swappiness", "0", NULL);
	if (lim->memory_bytes) {
		snprintf(buf, sizeof(buf), "%" PRIu64, lim->memory_bytes);
		/* memsw must stay >= the memory limit: raise memsw first when growing, lower it last when shrinking. */
		char path[PATH_MAX];
		snprintf(path, sizeof(path), "%s/memory.memsw.limit_in_bytes", mem);
		bool memsw = access(path, F_OK) == 0;
		if (memsw)
			(void)write_in(mem, "memory.memsw.limit_in_bytes", buf, NULL);
		int r = write_in(mem, "memory.limit_in_bytes", buf, err);
		if (r < 0)
			return r;
		if (memsw) {
			r = write_in(mem, "memory.memsw.limit_in_bytes", buf, err);
			if (r < 0)
				return r;
		}
	} else {
		char path[PATH_MAX];
		snprintf(path, sizeof(path), "%s/memory.memsw.limit_in_bytes", mem);
		int r = write_in(mem, "memory.limit_in_bytes", "-1", err);
		if (r < 0)
			return r;
		if (access(path, F_OK) == 0)
			(void)write_in(mem, "memory.memsw.limit_in_bytes", "-1", NULL);
	}

	const char *cpu = dir_of(cg, LB_CG1_CPU);
	int r = write_in(cpu, "cpu.cfs_period_us", "100000", err);
	if (r < 0)
		return r;
	if (lim->cpu_millicores)
		snprintf(buf, sizeof(buf), "%" PRIu64, (uint64_t)lim->cpu_millicores * CFS_PERIOD_US / 1000);
	else
		snprintf(buf, sizeof(buf), "-1");
	r = write_in(cpu, "cpu.cfs_quota_us", buf, err);
	if (r < 0)
		return r;

	if (lim->pids)
		snprintf(buf, sizeof(buf), "%" PRIu64, lim->pids);
	else
		snprintf(buf, sizeof(buf), "max");
	r = write_in(dir_of(cg, LB_CG1_PIDS), "pids.max", buf, err);
	if (r < 0)
		return r;

	for (size_t i = 0; i < cg->n_dirs; i++) {
		for (int leaf = LB_CG_INIT; leaf <= LB_CG_RUN; leaf++) {
			if (!lb_cg_has_leaf(cg, i, (enum lb_cg_leaf)leaf))
				continue;
			char path[PATH_MAX];
			snprintf(path, sizeof(path), "%s/%s", cg->dirs[i], lb_cg_leaf_name((enum lb_cg_leaf)leaf));
			if (mkdir(path, 0755) < 0 && errno != EEXIST)
				return lb_error_set(err, errno, "creating cgroup %s", path);
		}
	}
	/* A cgroup left by a crash may still hold processes: the caller kills both leaves before use. */
	return 0;
}

static int wait_state(const char *leafdir, const char *want, int timeout_ms)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/freezer.state", leafdir);
	for (int waited = 0;; waited++) {
		_cleanup_free_ char *s = NULL;
		int r = lb_read_file_at(AT_FDCWD, path, 64, &s, NULL);
		if (r < 0)
			return r;
		if (strncmp(s, want, strlen(want)) == 0)
			return 0;
		if (waited >= timeout_ms)
			return -ETIMEDOUT;
		struct timespec ts = { 0, 1000000 };
		nanosleep(&ts, NULL);
	}
}

#define PIDFD_ROUNDS  3
#define PIDFD_WAIT_MS 20

static int cg1_kill(struct lb_cgroup *cg, enum lb_cg_leaf leaf, int wait_ms, struct lb_error *err)
{
	const char *fz = dir_of(cg, LB_CG1_FREEZER);
	char leafdir[PATH_MAX];
	snprintf(leafdir, sizeof(leafdir), "%s/%s", fz, lb_cg_leaf_name(leaf));
	char procs[PATH_MAX];
	snprintf(procs, sizeof(procs), "%s/cgroup.procs", leafdir);

	/* Fast path (every run's end): nothing there. */
	_cleanup_free_ char *list = NULL;
	size_t len = 0;
	int r = lb_read_file_at(AT_FDCWD, procs, 1 << 22, &list, &len);
	if (r == -ENOENT)
		return -ENOENT;
	if (r < 0)
		return lb_error_set(err, r, "reading %s", procs);
	if (len == 0)
		return 0;

	/* Usually a few daemons that sleep: killed through pidfds (no pid reuse can misdirect the signal), with no
	 * freeze, whose write and thaw cost 7-13 ms here (each switches the kernel's freezer static key on or off). */
	for (int round = 0; round < PIDFD_ROUNDS; round++) {
		r = lb_cg_sigkill_pidfds(procs);
		if (r < 0)
			break;
		if (r == 0 || lb_cg_wait_empty(fz, leaf, PIDFD_WAIT_MS) == 0)
			goto wait_all;
	}

	/* Still there (a process that forks as fast as we kill): freezing our own leaf stops its processes where they
	 * are, and a child forked while it freezes is frozen too, so once it is FROZEN the pid list below is exact. */
	r = write_in(leafdir, "freezer.state", "FROZEN", err);
	if (r < 0)
		return r;
	/* A task stuck in D state: kill what we can; the next round looks again. */
	(void)wait_state(leafdir, "FROZEN", 1000);
	r = lb_cg_sigkill_listed(procs);
	if (r < 0) {
		(void)write_in(leafdir, "freezer.state", "THAWED", NULL);
		return lb_error_set(err, r, "reading %s", procs);
	}
	/* Frozen tasks do not act on SIGKILL: they die once thawed. */
	r = write_in(leafdir, "freezer.state", "THAWED", err);
	if (r < 0)
		return r;
wait_all:
	/* Every hierarchy with that leaf must see them gone before rmdir or a new run. */
	for (size_t i = 0; i < cg->n_dirs; i++) {
		if (!lb_cg_has_leaf(cg, i, leaf))
			continue;
		r = lb_cg_wait_empty(cg->dirs[i], leaf, wait_ms);
		if (r < 0)
			return lb_error_set(err, r, "waiting for cgroup %s/%s to empty", cg->dirs[i],
					    lb_cg_leaf_name(leaf));
	}
	return 0;
}

static int cg1_reset_peak(struct lb_cgroup *cg)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/run/memory.max_usage_in_bytes", dir_of(cg, LB_CG1_MEMORY));
	return lb_write_file_at(AT_FDCWD, path, "0");
}

static int cg1_stats(struct lb_cgroup *cg, struct lb_cg_stats *ret)
{
	char path[PATH_MAX];
	const char *mem = dir_of(cg, LB_CG1_MEMORY);
	const char *acct = dir_of(cg, LB_CG1_CPUACCT);
	if (acct) {
		snprintf(path, sizeof(path), "%s/run/cpuacct.usage", acct);
		(void)lb_read_u64_at(AT_FDCWD, path, &ret->cpu_usage_ns);
	}
	/* v1 counts OOM kills and refused forks in the cgroup of the task concerned, without propagating them to
	 * the parent (v2 does): add the sandbox directory's own count (where init and, without leaves, every process
	 * is) and its leaves'. */
	int md = cg->ctrl_dir[LB_CG1_MEMORY], pd = cg->ctrl_dir[LB_CG1_PIDS];
	for (int w = -1; w <= LB_CG_RUN; w++) {
		char where[8] = "";
		if (w >= 0)
			snprintf(where, sizeof(where), "/%s", lb_cg_leaf_name((enum lb_cg_leaf)w));
		uint64_t v = 0;
		if (w < 0 || lb_cg_has_leaf(cg, (size_t)md, (enum lb_cg_leaf)w)) {
			snprintf(path, sizeof(path), "%s%s/memory.oom_control", mem, where);
			if (lb_read_keyed_u64_at(AT_FDCWD, path, "oom_kill", &v) < 0) {
				/* Kernels before 4.13 have no oom_kill counter: a hit on the limit is the closest sign.
				 */
				snprintf(path, sizeof(path), "%s%s/memory.failcnt", mem, where);
				(void)lb_read_u64_at(AT_FDCWD, path, &v);
			}
			ret->oom_kills += v;
		}
		v = 0;
		if (w < 0 || lb_cg_has_leaf(cg, (size_t)pd, (enum lb_cg_leaf)w)) {
			snprintf(path, sizeof(path), "%s%s/pids.events", dir_of(cg, LB_CG1_PIDS), where);
			(void)lb_read_keyed_u64_at(AT_FDCWD, path, "max", &v);
			ret->pids_max += v;
		}
	}
	snprintf(path, sizeof(path), "%s/run/memory.max_usage_in_bytes", mem);
	(void)lb_read_u64_at(AT_FDCWD, path, &ret->peak_bytes);
	return 0;
}

const struct lb_cg_ops lb_cg1_ops = {
	.setup = cg1_setup,
	.kill = cg1_kill,
	.stats = cg1_stats,
	.reset_peak = cg1_reset_peak,
};

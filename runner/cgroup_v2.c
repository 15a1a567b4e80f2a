/*
 * cgroup_v2.c — the cgroup v2 back end: <base>/<name> with the `init` and `run` leaves, limits on <name>.
 *
 * Runs in the caller (root). <base> is /sys/fs/cgroup/lensbox, or <own cgroup>/sandboxes when systemd delegated
 * the daemon's cgroup (Delegate=yes); then the daemon moves itself into <own>/daemon first, because v2 allows
 * processes only in leaves ("no internal processes") and the delegated cgroup must enable controllers for its
 * children. Writes outside <base> are limited to enabling memory/cpu/pids in the parents' subtree_control when
 * they are not already enabled. Whole leaves are killed with cgroup.kill (5.14+), else freeze + SIGKILL + thaw.
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

#define CPU_PERIOD_US 100000u

static int write_in(const char *dir, const char *file, const char *value, struct lb_error *err)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/%s", dir, file);
	int r = lb_write_file_at(AT_FDCWD, path, value);
	if (r < 0)
		return lb_error_set(err, r, "writing %s to %s", value, path);
	return 0;
}

/* Enables memory, cpu and pids for the children of dir unless they already are. */
static int enable_controllers(const char *dir, struct lb_error *err)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/cgroup.subtree_control", dir);
	_cleanup_free_ char *cur = NULL;
	int r = lb_read_file_at(AT_FDCWD, path, 4096, &cur, NULL);
	if (r < 0)
		return lb_error_set(err, r, "reading %s", path);
	if (strstr(cur, "memory") && strstr(cur, "cpu") && strstr(cur, "pids"))
		return 0;
	return write_in(dir, "cgroup.subtree_control", "+memory +cpu +pids", err);
}

/* Moves the processes listed in procs (a cgroup.procs file) into leaf; *ret_moved: how many were listed. */
static int move_listed(const char *procs, const char *leaf, int *ret_moved, struct lb_error *err)
{
	_cleanup_free_ char *list = NULL;
	int r = lb_read_file_at(AT_FDCWD, procs, 1 << 20, &list, NULL);
	if (r < 0)
		return lb_error_set(err, r, "reading %s", procs);
	*ret_moved = 0;
	for (char *p = list; *p;) {
		char *end;
		long pid = strtol(p, &end, 10);
		if (end == p)
			break;
		char v[32];
		snprintf(v, sizeof(v), "%ld", pid);
		/* Our own delegated cgroup: only the daemon's processes live there. */
		r = write_in(leaf, "cgroup.procs", v, err);
		if (r < 0 && r != -ESRCH)
			return r;
		(*ret_moved)++;
		p = end;
		while (*p == '\n')
			p++;
	}
	return 0;
}

/* Delegated case: move every process of our own cgroup into <own>/daemon so <own> may have children. A process
 * forked meanwhile by one still in <own> (another thread's helper: the disk pool's refiller, its mke2fs) is born
 * there, so the list is read again until it is empty: once nothing is left in <own>, nothing new can appear in it
 * (a child is born in its parent's cgroup), and enabling controllers there cannot fail with EBUSY. */
static int move_self_to_leaf(const char *own, struct lb_error *err)
{
	char leaf[PATH_MAX];
	snprintf(leaf, sizeof(leaf), "%s/daemon", own);
	if (mkdir(leaf, 0755) < 0 && errno != EEXIST)
		return lb_error_set(err, errno, "creating cgroup %s", leaf);
	char procs[PATH_MAX];
	snprintf(procs, sizeof(procs), "%s/cgroup.procs", own);
	for (int round = 0; round < 32; round++) {
		int moved = 0;
		int r = move_listed(procs, leaf, &moved, err);
		if (r < 0 || moved == 0)
			return r;
	}
	return lb_error_setx(err, EBUSY, "processes keep appearing in %s", own);
}

static int cg2_setup(const struct lb_cg_host *host, struct lb_cgroup *cg, const char *name, bool create,
		     const struct lb_sandbox_limits *lim, struct lb_error *err)
{
	char *dir = NULL;
	if (asprintf(&dir, "%s/%s", host->v2_base, name) < 0)
		return lb_error_set(err, ENOMEM, "allocating cgroup path");
	cg->leaves[cg->n_dirs] = 1u << LB_CG_INIT | 1u << LB_CG_RUN; /* v2: a process lives only in a leaf */
	cg->dirs[cg->n_dirs++] = dir;
	if (!create)
		return 0;

	int r;
	char parent[PATH_MAX];
	snprintf(parent, sizeof(parent), "%s", host->v2_base);
	char *slash = strrchr(parent, '/');
	if (!slash)
		return lb_error_setx(err, EINVAL, "bad cgroup base %s", host->v2_base);
	*slash = '\0'; /* the v2 mount or the daemon's own delegated cgroup */
	if (host->v2_delegated) {
		r = move_self_to_leaf(parent, err);
		if (r < 0)
			return r;
	}
	r = enable_controllers(parent, err);
	if (r < 0)
		return r;
	if (mkdir(host->v2_base, 0755) < 0 && errno != EEXIST)
		return lb_error_set(err, errno, "creating cgroup %s", host->v2_base);
	r = enable_controllers(host->v2_base, err);
	if (r < 0)
		return r;
	if (mkdir(dir, 0755) < 0) {
		if (errno != EEXIST)
			return lb_error_set(err, errno, "creating cgroup %s", dir);
		cg->fresh = false; /* a crash's leftover, or a live sandbox of this name: the caller checks */
	}

	char buf[64];
	if (lim->memory_bytes)
		snprintf(buf, sizeof(buf), "%" PRIu64, lim->memory_bytes);
	else
		snprintf(buf, sizeof(buf), "max");
	r = write_in(dir, "memory.max", buf, err);
	if (r < 0)
		return r;
	/* Swap off: memory.swap.max is absent when the kernel has no swap accounting, and then nothing swaps
	 * beyond memory.max either. */
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/memory.swap.max", dir);
	if (access(path, F_OK) == 0) {
		r = write_in(dir, "memory.swap.max", "0", err);
		if (r < 0)
			return r;
	}
	if (lim->cpu_millicores)
		snprintf(buf, sizeof(buf), "%" PRIu64 " %u", (uint64_t)lim->cpu_millicores * CPU_PERIOD_US / 1000,
			 CPU_PERIOD_US);
	else
		snprintf(buf, sizeof(buf), "max %u", CPU_PERIOD_US);
	r = write_in(dir, "cpu.max", buf, err);
	if (r < 0)
		return r;
	if (lim->pids)
		snprintf(buf, sizeof(buf), "%" PRIu64, lim->pids);
	else
		snprintf(buf, sizeof(buf), "max");
	r = write_in(dir, "pids.max", buf, err);
	if (r < 0)
		return r;
	r = enable_controllers(dir, err);
	if (r < 0)
		return r;
	for (int leaf = LB_CG_INIT; leaf <= LB_CG_RUN; leaf++) {
		snprintf(path, sizeof(path), "%s/%s", dir, lb_cg_leaf_name((enum lb_cg_leaf)leaf));
		if (mkdir(path, 0755) < 0 && errno != EEXIST)
			return lb_error_set(err, errno, "creating cgroup %s", path);
	}
	return 0;
}

/* Waits for "<key> <want>" in leafdir/cgroup.events. */
static int wait_event(const char *leafdir, const char *key, uint64_t want, int timeout_ms)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/cgroup.events", leafdir);
	for (int waited = 0;; waited++) {
		uint64_t v;
		int r = lb_read_keyed_u64_at(AT_FDCWD, path, key, &v);
		if (r < 0)
			return r;
		if (v == want)
			return 0;
		if (waited >= timeout_ms)
			return -ETIMEDOUT;
		struct timespec ts = { 0, 1000000 };
		nanosleep(&ts, NULL);
	}
}

static int cg2_kill(struct lb_cgroup *cg, enum lb_cg_leaf leaf, int wait_ms, struct lb_error *err)
{
	char leafdir[PATH_MAX];
	snprintf(leafdir, sizeof(leafdir), "%s/%s", cg->dirs[0], lb_cg_leaf_name(leaf));
	if (access(leafdir, F_OK) < 0)
		return -ENOENT;
	uint64_t populated = 1;
	char ev[PATH_MAX];
	snprintf(ev, sizeof(ev), "%s/cgroup.events", leafdir);
	if (lb_read_keyed_u64_at(AT_FDCWD, ev, "populated", &populated) == 0 && populated == 0)
		return 0;

	/* cgroup.kill SIGKILLs every process of our own leaf, atomically with respect to forks. */
	int r = write_in(leafdir, "cgroup.kill", "1", NULL);
	if (r < 0) {
		/* Before 5.14: freeze (a child forked meanwhile is frozen too), kill each pid (frozen tasks cannot
		 * exit, so no pid is recycled), thaw. */
		r = write_in(leafdir, "cgroup.freeze", "1", err);
		if (r < 0)
			return r;
		(void)wait_event(leafdir, "frozen", 1, 1000);
		char procs[PATH_MAX];
		snprintf(procs, sizeof(procs), "%s/cgroup.procs", leafdir);
		(void)lb_cg_sigkill_listed(procs);
		r = write_in(leafdir, "cgroup.freeze", "0", err);
		if (r < 0)
			return r;
	}
	r = wait_event(leafdir, "populated", 0, wait_ms);
	if (r < 0)
		return lb_error_set(err, r == -ETIMEDOUT ? -EBUSY : r, "waiting for cgroup %s to empty", leafdir);
	return 0;
}

/* A fresh, empty `run` leaf: the only way to reset memory.peak before 6.12. */
static int recreate_run_leaf(struct lb_cgroup *cg)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/run", cg->dirs[0]);
	/* Our own leaf, emptied by the caller's kill just before. */
	if (rmdir(path) < 0 && errno != ENOENT)
		return -errno;
	if (mkdir(path, 0755) < 0)
		return -errno;
	return 0;
}

static int cg2_reset_peak(struct lb_cgroup *cg)
{
	if (cg->peak_reset_unsupported)
		return recreate_run_leaf(cg);
	if (cg->peak_fd < 0) {
		char path[PATH_MAX];
		snprintf(path, sizeof(path), "%s/run/memory.peak", cg->dirs[0]);
		cg->peak_fd = open(path, O_RDWR | O_CLOEXEC);
		if (cg->peak_fd < 0)
			return -errno;
	}
	/* Since 6.12 a write resets the peak seen through this open file; older kernels refuse it (the file is
	 * read-only): then every run gets a new leaf instead. */
	if (write(cg->peak_fd, "reset\n", 6) == 6)
		return 0;
	close(cg->peak_fd);
	cg->peak_fd = -1;
	cg->peak_reset_unsupported = true;
	return recreate_run_leaf(cg);
}

static int cg2_stats(struct lb_cgroup *cg, struct lb_cg_stats *ret)
{
	char path[PATH_MAX];
	const char *dir = cg->dirs[0];
	uint64_t usec = 0;
	snprintf(path, sizeof(path), "%s/run/cpu.stat", dir);
	if (lb_read_keyed_u64_at(AT_FDCWD, path, "usage_usec", &usec) == 0)
		ret->cpu_usage_ns = usec * 1000;
	/* Since 6.12 (and with memory_localevents off) v2 counts these in the cgroup whose limit was hit and its
	 * ancestors; before, pids.events counted in the forking task's own cgroup. Summing the sandbox and its leaves
	 * catches both; only the delta's sign is used. */
	static const char *const where[] = { "", "/init", "/run" };
	for (size_t i = 0; i < 3; i++) {
		uint64_t v = 0;
		snprintf(path, sizeof(path), "%s%s/memory.events", dir, where[i]);
		if (lb_read_keyed_u64_at(AT_FDCWD, path, "oom_kill", &v) == 0)
			ret->oom_kills += v;
		v = 0;
		snprintf(path, sizeof(path), "%s%s/pids.events", dir, where[i]);
		if (lb_read_keyed_u64_at(AT_FDCWD, path, "max", &v) == 0)
			ret->pids_max += v;
	}
	if (cg->peak_fd >= 0) {
		char buf[32];
		ssize_t n = pread(cg->peak_fd, buf, sizeof(buf) - 1, 0);
		if (n > 0) {
			buf[n] = '\0';
			ret->peak_bytes = strtoull(buf, NULL, 10);
		}
	} else {
		snprintf(path, sizeof(path), "%s/run/memory.peak", dir);
		(void)lb_read_u64_at(AT_FDCWD, path, &ret->peak_bytes);
	}
	return 0;
}

const struct lb_cg_ops lb_cg2_ops = {
	.setup = cg2_setup,
	.kill = cg2_kill,
	.stats = cg2_stats,
	.reset_peak = cg2_reset_peak,
};

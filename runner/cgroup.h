/*
 * cgroup.h — the runner's internal cgroup interface: one sandbox cgroup with two leaves, `init` (the sandbox's
 * pid 1) and `run` (the program of the current exec), limits on the parent. Two back ends behind it, one file each:
 * cgroup_v2.c (the design target: a delegated subtree, cgroup.kill) and cgroup_v1.c (hosts that still carry
 * memory/cpu/pids/freezer on v1: SIGKILL through pidfds, freezer + SIGKILL as the fallback), each a struct lb_cg_ops.
 * cgroup.c detects which one the host has and drives it (the kill's rounds too); cgroup_kill.c holds what both back
 * ends share (waiting for a leaf to empty, SIGKILL of a leaf's listed pids). cgroup.c -> back ends -> cgroup_kill.c,
 * never back.
 *
 * Runs in the caller (lensboxd or lensbox-runner, root). Invariant: nothing here creates, writes or removes a
 * cgroup outside the `lensbox` subtree (v1: <controller mount>/lensbox; v2: /sys/fs/cgroup/lensbox or the
 * daemon's own delegated cgroup), except that on a delegated v2 cgroup the daemon moves itself into its own leaf.
 */
#ifndef LB_RUNNER_CGROUP_H
#define LB_RUNNER_CGROUP_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lb/error.h"
#include "lb/runner.h"

enum lb_cg_leaf { LB_CG_INIT = 0, LB_CG_RUN = 1 };

/* v1 controllers the runner uses, in this order. cpuacct may share a mount with cpu. */
enum lb_cg1_ctrl { LB_CG1_MEMORY, LB_CG1_CPU, LB_CG1_CPUACCT, LB_CG1_PIDS, LB_CG1_FREEZER, LB_CG1_N };

/* Where the host keeps its cgroups, measured from /proc/self/mountinfo. */
struct lb_cg_host {
	enum lb_cgroup_version version;
	bool v2_mounted;
	char v2_mount[PATH_MAX];
	/* v2: the directory under which sandboxes get their cgroup (…/lensbox or <own>/sandboxes). */
	char v2_base[PATH_MAX];
	bool v2_delegated;
	/* v1: mount point of each controller's hierarchy (two may be the same, e.g. "cpu,cpuacct"). */
	char v1_mount[LB_CG1_N][PATH_MAX];
};

/* Counters of one run, read before and after it. */
struct lb_cg_stats {
	uint64_t cpu_usage_ns; /* the run leaf's CPU time */
	uint64_t oom_kills;    /* the sandbox's OOM kills (v1 without oom_kill: memory.failcnt) */
	uint64_t pids_max;     /* forks refused by the sandbox's pids limit */
	uint64_t peak_bytes;   /* the run leaf's peak memory since the last reset */
};

#define LB_CG_MAX_DIRS LB_CG1_N

struct lb_cg_ops;

struct lb_cgroup {
	enum lb_cgroup_version version;
	const struct lb_cg_ops *ops; /* the back end's */
	/* The sandbox directory in every distinct hierarchy (v2: one). */
	char *dirs[LB_CG_MAX_DIRS];
	size_t n_dirs;
	/* v1: which entry of dirs[] carries each controller. */
	int ctrl_dir[LB_CG1_N];
	/* Which leaves each directory has (bit 1 << enum lb_cg_leaf). v2: both. v1: only what a hierarchy's counters or
	 * kills need: freezer both (a run is killed without init), memory and cpuacct `run` (a run's peak memory, OOM
	 * kills and CPU time), cpu and pids none (their limits are on the sandbox directory, where a process without a
	 * leaf lives). Every mkdir and rmdir of a v1 cgroup costs tens of microseconds of a start or stop. */
	unsigned leaves[LB_CG_MAX_DIRS];
	int peak_fd;		     /* v2: memory.peak of the run leaf, reset per run through this fd; -1 otherwise */
	bool peak_reset_unsupported; /* v2 before 6.12: the run leaf is recreated per run instead */
	bool fresh;	   /* lb_cg_create made the sandbox directory in every hierarchy: no process can be in it */
	const char *ready; /* during lb_cg_create_from only: directories made ahead under this name, to rename (v1) */
};

/* Fills *host: the usual layout under /sys/fs/cgroup when it is proven there (cgroup.c), else from
 * /proc/self/mountinfo; -ENOTSUP with a sentence when neither v2 with memory, cpu and pids nor v1 with memory, cpu,
 * pids and freezer is there. Never writes anything. */
int lb_cg_detect(struct lb_cg_host *host, struct lb_error *err);
/* The same, from /proc/self/mountinfo only when mountinfo is true (lb_cg_detect() first tries the usual layout without
 * it); for tests that compare the two. */
int lb_cg_detect_from(struct lb_cg_host *host, bool mountinfo, struct lb_error *err);
/* The same under root, a directory laid out like / (root/proc/self/mountinfo names the hierarchies, whose paths are
 * then taken under root); NULL or "" is lb_cg_detect(). For `lensbox doctor`'s simulated hosts. */
int lb_cg_detect_root(struct lb_cg_host *host, const char *root, struct lb_error *err);

/* Creates <base>/<name> with the `init` and `run` leaves and writes the limits (swap off). An existing cgroup of
 * the same name (left by a crash) is emptied and reused. On success *ret is the caller's (lb_cg_free). */
int lb_cg_create(const struct lb_cg_host *host, const char *name, const struct lb_sandbox_limits *limits,
		 struct lb_cgroup **ret, struct lb_error *err);
/* The same, from the directories made ahead under the name ready (lb_ready_cgroup_make; v1): each hierarchy's is
 * renamed to name with its leaves instead of made, then the limits are written. What is not renamed (another v1
 * layout, an existing cgroup of that name) is made as by lb_cg_create, and ready's directory there removed: none of
 * ready is left either way. NULL ready: lb_cg_create. */
int lb_cg_create_from(const struct lb_cg_host *host, const char *name, const char *ready,
		      const struct lb_sandbox_limits *limits, struct lb_cgroup **ret, struct lb_error *err);

/* Describes the existing cgroup of a sandbox from its name only (for cleanup); does not create anything. */
int lb_cg_open(const struct lb_cg_host *host, const char *name, struct lb_cgroup **ret, struct lb_error *err);

/* Opens (O_WRONLY|O_CLOEXEC) what a single-threaded child writes "0" into to join a leaf, one per hierarchy (a v1
 * hierarchy without that leaf: the sandbox directory itself): on v1 the leaf's `tasks` (moving the calling thread,
 * which is the whole process, takes no cgroup_threadgroup_rwsem and so never waits for an RCU grace period the way a
 * cgroup.procs write does); on v2 cgroup.procs (v2 children are born in their leaf with CLONE_INTO_CGROUP instead). fds
 * must hold LB_CG_MAX_DIRS entries. */
int lb_cg_open_join(const struct lb_cgroup *cg, enum lb_cg_leaf leaf, int *fds, size_t *ret_n, struct lb_error *err);

/* v2 only: an O_DIRECTORY fd of a leaf for clone3(CLONE_INTO_CGROUP), which starts a child directly in it (no
 * migration, no wait on cgroup_threadgroup_rwsem). -EOPNOTSUPP on v1, where the child writes cgroup.procs. */
int lb_cg_open_leaf_dir(const struct lb_cgroup *cg, enum lb_cg_leaf leaf);

/* True when a leaf holds a process (or cannot be read, which is treated as "in use"); hierarchies without that leaf
 * are not looked at (v1's freezer has both leaves: every process of a sandbox is in one of them). */
bool lb_cg_populated(const struct lb_cgroup *cg, enum lb_cg_leaf leaf);

/* Kills every process of a leaf (v2 cgroup.kill; v1 SIGKILL through pidfds, else freeze, SIGKILL each, thaw) and
 * waits until it is empty: 0 then, -ENOENT when the leaf does not exist, else a negative errno (-EBUSY: processes
 * were still there after 5 s of rounds) with err set. In rounds because a child forked while a round read the pids,
 * or while a freeze did not complete (a task stuck in D state), is only found by the next one. */
int lb_cg_kill(struct lb_cgroup *cg, enum lb_cg_leaf leaf, struct lb_error *err);

/* Resets the run leaf's peak memory (best effort) and reads the counters. */
int lb_cg_begin_run(struct lb_cgroup *cg, struct lb_cg_stats *ret);
int lb_cg_read_stats(struct lb_cgroup *cg, struct lb_cg_stats *ret);

/* Removes a leaf that holds no process, in every hierarchy (no kill): a leaf still in use stays (EBUSY) for
 * lb_cg_destroy(). Lets stop remove the idle `run` leaf while init is still dying. */
void lb_cg_remove_idle_leaf(struct lb_cgroup *cg, enum lb_cg_leaf leaf);

/* Kills everything in both leaves, removes the leaves and the sandbox cgroup. ENOENT parts are fine. */
int lb_cg_destroy(struct lb_cgroup *cg, struct lb_error *err);

void lb_cg_free(struct lb_cgroup *cg);

/* A back end's operations (cgroup_v1.c: lb_cg1_ops, cgroup_v2.c: lb_cg2_ops); called only through the functions
 * above, which pick one at lb_cg_create()/lb_cg_open() (cg->ops). */
struct lb_cg_ops {
	/* Makes (create) or describes the sandbox's directories and leaves in cg, and writes the limits. */
	int (*setup)(const struct lb_cg_host *host, struct lb_cgroup *cg, const char *name, bool create,
		     const struct lb_sandbox_limits *limits, struct lb_error *err);
	/* One round of lb_cg_kill(): signals everything in the leaf, then waits up to wait_ms for it to empty
	 * (-EBUSY, err set, when it did not). */
	int (*kill)(struct lb_cgroup *cg, enum lb_cg_leaf leaf, int wait_ms, struct lb_error *err);
	int (*stats)(struct lb_cgroup *cg, struct lb_cg_stats *ret);
	int (*reset_peak)(struct lb_cgroup *cg);
};
extern const struct lb_cg_ops lb_cg1_ops;
extern const struct lb_cg_ops lb_cg2_ops;

/* Shared helpers for the back ends (cgroup_kill.c). */
const char *lb_cg_leaf_name(enum lb_cg_leaf leaf);
static inline bool lb_cg_has_leaf(const struct lb_cgroup *cg, size_t dir, enum lb_cg_leaf leaf)
{
	return cg->leaves[dir] & (1u << leaf);
}
/* SIGKILLs each pid listed in the cgroup.procs file at procs (never pid 1 of the host); only exact while that cgroup
 * is frozen (a frozen task cannot exit, so no pid is recycled under us). Returns how many were signalled. */
int lb_cg_sigkill_listed(const char *procs);
/* SIGKILLs the processes listed in the cgroup.procs file at procs without freezing them: each pid gets a pidfd, and
 * only a pid still listed in a second read is signalled, through its pidfd (a recycled pid is never hit). A child
 * forked meanwhile is left for the next call. Returns 0 when the list was empty, > 0 when it was not (call again
 * after the signalled processes had a moment to exit), or a negative errno. */
int lb_cg_sigkill_pidfds(const char *procs);
/* Waits until <dir>/<leaf>/cgroup.procs is empty, up to timeout_ms (-EBUSY). */
int lb_cg_wait_empty(const char *dir, enum lb_cg_leaf leaf, int timeout_ms);

#endif

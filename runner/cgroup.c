/*
 * cgroup.c — finds the host's cgroup layout and drives a sandbox's cgroup through its back end's operations
 * (struct lb_cg_ops: cgroup_v1.c or cgroup_v2.c, see cgroup.h), the kill's rounds included. What both back ends
 * share (the leaves' names, waiting for a leaf to empty, SIGKILL of a leaf's listed pids) is cgroup_kill.c's.
 *
 * Runs in the caller (root). Detection only looks (statfs, stat, access under /sys/fs/cgroup, else
 * /proc/self/mountinfo) and reads cgroup.controllers. The choice: v2 when the cgroup2 hierarchy offers memory, cpu
 * and pids (the design target); otherwise v1 when memory, cpu, pids and freezer are mounted as v1 hierarchies
 * (hybrid hosts such as this project's CI); otherwise sandboxes cannot run. Signals go only to pids read from one of
 * our own leaves' cgroup.procs, either while that leaf is frozen or through a pidfd proven to be that pid's process.
 */
/* Paths built here come from bounded parts (names <= 63 bytes, mount points, run_dir checked by the caller);
 * a path cut at PATH_MAX only fails to open. */
#pragma GCC diagnostic ignored "-Wformat-truncation"

#include "cgroup.h"

#include "lb/cleanup.h"
#include "lb/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

static const char *const v1_names[LB_CG1_N] = { "memory", "cpu", "cpuacct", "pids", "freezer" };

/* True when the comma-separated list opts contains word. */
static bool has_word(const char *opts, const char *word)
{
	size_t wl = strlen(word);
	for (const char *p = opts; p && *p;) {
		const char *c = strchr(p, ',');
		size_t l = c ? (size_t)(c - p) : strlen(p);
		if (l == wl && strncmp(p, word, wl) == 0)
			return true;
		p = c ? c + 1 : NULL;
	}
	return false;
}

/* True when the space-separated list s contains word (cgroup.controllers). */
static bool has_token(const char *s, const char *word)
{
	size_t wl = strlen(word);
	for (const char *p = s; *p;) {
		while (*p == ' ' || *p == '\n')
			p++;
		size_t l = strcspn(p, " \n");
		if (l == wl && strncmp(p, word, wl) == 0)
			return true;
		p += l;
	}
	return false;
}

/* Our own v2 cgroup path ("0::/path" line of <root>/proc/self/cgroup) into buf, "" when absent. */
static void own_v2_cgroup(const char *root, char *buf, size_t size)
{
	buf[0] = '\0';
	_cleanup_free_ char *s = NULL;
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/proc/self/cgroup", root);
	if (lb_read_file_at(AT_FDCWD, path, 1 << 16, &s, NULL) < 0)
		return;
	for (char *line = s; line && *line;) {
		char *nl = strchr(line, '\n');
		if (nl)
			*nl = '\0';
		if (strncmp(line, "0::", 3) == 0) {
			snprintf(buf, size, "%s", line + 3);
			return;
		}
		line = nl ? nl + 1 : NULL;
	}
}

/* systemd marks a cgroup it delegated (Delegate=yes) with the trusted.delegate xattr ("1"). */
static bool is_delegated(const char *path)
{
	char val[8] = "";
	return getxattr(path, "trusted.delegate", val, sizeof(val) - 1) > 0 && val[0] == '1';
}

/* Linux's magic numbers (linux/magic.h), here to keep that header's other names out. */
#define LB_TMPFS_MAGIC	 0x01021994
#define LB_CGROUP_MAGIC	 0x27e0eb
#define LB_CGROUP2_MAGIC 0x63677270

/* A file only the controller's hierarchy has, looked for in our own `lensbox` directory there (a hierarchy's root
 * lacks most controller files). */
static const char *const v1_marker[LB_CG1_N] = { "memory.limit_in_bytes", "cpu.cfs_quota_us", "cpuacct.usage",
						 "pids.max", "freezer.state" };

static bool fs_is(const char *path, long magic)
{
	struct statfs sf;
	return statfs(path, &sf) == 0 && (long)sf.f_type == magic;
}

/* The usual layout, found without reading /proc/self/mountinfo (which grows with every mount on the host: 0.1-0.2
 * ms a start): cgroup2 at /sys/fs/cgroup, or a tmpfs there with each v1 hierarchy at /sys/fs/cgroup/<controller>,
 * proven to carry that controller by its file in our `lensbox` directory (which exists after the first start), and
 * cgroup2 at /sys/fs/cgroup/unified on hybrid hosts. Two controllers whose directories are one filesystem (a
 * "cpu,cpuacct" hierarchy and its symlinks) share a path. False when anything differs: the caller reads mountinfo. */
static bool detect_usual(struct lb_cg_host *host)
{
	if (fs_is("/sys/fs/cgroup", LB_CGROUP2_MAGIC)) {
		host->v2_mounted = true;
		snprintf(host->v2_mount, sizeof(host->v2_mount), "/sys/fs/cgroup");
		return true;
	}
	if (!fs_is("/sys/fs/cgroup", LB_TMPFS_MAGIC))
		return false;
	dev_t devs[LB_CG1_N];
	for (int c = 0; c < LB_CG1_N; c++) {
		char path[PATH_MAX], marker[PATH_MAX];
		snprintf(path, sizeof(path), "/sys/fs/cgroup/%s", v1_names[c]);
		snprintf(marker, sizeof(marker), "%s/lensbox/%s", path, v1_marker[c]);
		struct stat st;
		if (!fs_is(path, LB_CGROUP_MAGIC) || stat(path, &st) < 0 || access(marker, F_OK) < 0) {
			if (c == LB_CG1_CPUACCT) /* optional, as in mountinfo */
				continue;
			return false;
		}
		devs[c] = st.st_dev;
		const char *same = path;
		for (int p = 0; p < c; p++)
			if (host->v1_mount[p][0] && devs[p] == st.st_dev)
				same = host->v1_mount[p];
		snprintf(host->v1_mount[c], sizeof(host->v1_mount[c]), "%s", same);
	}
	if (fs_is("/sys/fs/cgroup/unified", LB_CGROUP2_MAGIC)) {
		host->v2_mounted = true;
		snprintf(host->v2_mount, sizeof(host->v2_mount), "/sys/fs/cgroup/unified");
	}
	return true;
}

/* root ("" for the real one) prefixes the file read and the mount points found in it. */
static int detect_mountinfo(struct lb_cg_host *host, const char *root, struct lb_error *err)
{
	_cleanup_free_ char *mi = NULL;
	char mipath[PATH_MAX];
	snprintf(mipath, sizeof(mipath), "%s/proc/self/mountinfo", root);
	int r = lb_read_file_at(AT_FDCWD, mipath, 1 << 22, &mi, NULL);
	if (r < 0)
		return lb_error_set(err, r, "reading %s", mipath);
	for (char *line = mi; line && *line;) {
		char *nl = strchr(line, '\n');
		if (nl)
			*nl = '\0';
		/* id parent maj:min root mountpoint opts [optional...] - fstype source superopts */
		char *sep = strstr(line, " - ");
		char mnt[PATH_MAX], fstype[32], superopts[512];
		if (sep && sscanf(line, "%*s %*s %*s %*s %4095s", mnt) == 1 &&
		    sscanf(sep + 3, "%31s %*s %511s", fstype, superopts) == 2) {
			if (strcmp(fstype, "cgroup2") == 0 && !host->v2_mounted) {
				host->v2_mounted = true;
				snprintf(host->v2_mount, sizeof(host->v2_mount), "%s%s", root, mnt);
			} else if (strcmp(fstype, "cgroup") == 0) {
				for (int c = 0; c < LB_CG1_N; c++)
					if (has_word(superopts, v1_names[c]) && !host->v1_mount[c][0])
						snprintf(host->v1_mount[c], sizeof(host->v1_mount[c]), "%s%s", root,
							 mnt);
			}
		}
		line = nl ? nl + 1 : NULL;
	}
	return 0;
}

/* root: "" for the host itself, else a directory laid out like / (only mountinfo is read there). */
static int detect_in(struct lb_cg_host *host, const char *root, bool mountinfo, struct lb_error *err)
{
	memset(host, 0, sizeof(*host));
	if (mountinfo || root[0] || !detect_usual(host)) {
		memset(host, 0, sizeof(*host));
		int r = detect_mountinfo(host, root, err);
		if (r < 0)
			return r;
	}

	if (host->v2_mounted) {
		char path[PATH_MAX + 32];
		snprintf(path, sizeof(path), "%s/cgroup.controllers", host->v2_mount);
		_cleanup_free_ char *ctl = NULL;
		if (lb_read_file_at(AT_FDCWD, path, 4096, &ctl, NULL) == 0 && has_token(ctl, "memory") &&
		    has_token(ctl, "cpu") && has_token(ctl, "pids")) {
			host->version = LB_CGROUP_V2;
			char own[PATH_MAX];
			own_v2_cgroup(root, own, sizeof(own));
			/* Once we moved ourselves into <delegated>/daemon (cgroup_v2.c), our cgroup is that leaf: the
			 * delegated cgroup is its parent. */
			size_t ol = strlen(own);
			char ownpath[PATH_MAX * 2];
			snprintf(ownpath, sizeof(ownpath), "%s%s", host->v2_mount, own);
			if (ol > 7 && strcmp(own + ol - 7, "/daemon") == 0 && !is_delegated(ownpath))
				ownpath[strlen(ownpath) - 7] = '\0';
			if (own[0] && strcmp(own, "/") != 0 && is_delegated(ownpath)) {
				host->v2_delegated = true;
				snprintf(host->v2_base, sizeof(host->v2_base), "%s/sandboxes", ownpath);
			} else {
				snprintf(host->v2_base, sizeof(host->v2_base), "%s/lensbox", host->v2_mount);
			}
			return 0;
		}
	}
	bool v1 = true;
	for (int c = 0; c < LB_CG1_N; c++)
		if (c != LB_CG1_CPUACCT && !host->v1_mount[c][0])
			v1 = false;
	if (v1) {
		host->version = LB_CGROUP_V1;
		return 0;
	}
	return lb_error_setx(err, ENOTSUP,
			     "no usable cgroup hierarchy: need cgroup v2 with memory, cpu and pids controllers, or v1 "
			     "hierarchies for memory, cpu, pids and freezer");
}

int lb_cg_detect_from(struct lb_cg_host *host, bool mountinfo, struct lb_error *err)
{
	return detect_in(host, "", mountinfo, err);
}

int lb_cg_detect(struct lb_cg_host *host, struct lb_error *err)
{
	return detect_in(host, "", false, err);
}

int lb_cgroups_find(struct lb_cg_host **ret, struct lb_error *err)
{
	struct lb_cg_host *host = calloc(1, sizeof(*host));
	if (!host)
		return lb_error_set(err, ENOMEM, "allocating the cgroup layout");
	int r = lb_cg_detect(host, err);
	if (r < 0) {
		free(host);
		return r;
	}
	*ret = host;
	return 0;
}

void lb_cgroups_free(struct lb_cg_host *host)
{
	free(host);
}

int lb_cg_detect_root(struct lb_cg_host *host, const char *root, struct lb_error *err)
{
	return detect_in(host, root ? root : "", false, err);
}

static int cg_new(const struct lb_cg_host *host, const char *name, const char *ready, bool create,
		  const struct lb_sandbox_limits *lim, struct lb_cgroup **ret, struct lb_error *err)
{
	struct lb_cgroup *cg = calloc(1, sizeof(*cg));
	if (!cg)
		return lb_error_set(err, ENOMEM, "allocating cgroup");
	cg->version = host->version;
	cg->peak_fd = -1;
	cg->fresh = create;
	for (int c = 0; c < LB_CG1_N; c++)
		cg->ctrl_dir[c] = -1;
	int r;
	if (host->version == LB_CGROUP_V2)
		cg->ops = &lb_cg2_ops;
	else if (host->version == LB_CGROUP_V1)
		cg->ops = &lb_cg1_ops;
	cg->ready = create ? ready : NULL;
	if (cg->ops)
		r = cg->ops->setup(host, cg, name, create, lim, err);
	else
		r = lb_error_setx(err, ENOTSUP, "no cgroup hierarchy");
	if (r < 0) {
		if (create) {
			struct lb_error ignored;
			lb_cg_destroy(cg, &ignored);
		}
		lb_cg_free(cg);
		return r;
	}
	cg->ready = NULL;
	*ret = cg;
	return 0;
}

int lb_cg_create(const struct lb_cg_host *host, const char *name, const struct lb_sandbox_limits *limits,
		 struct lb_cgroup **ret, struct lb_error *err)
{
	return cg_new(host, name, NULL, true, limits, ret, err);
}

int lb_cg_create_from(const struct lb_cg_host *host, const char *name, const char *ready,
		      const struct lb_sandbox_limits *limits, struct lb_cgroup **ret, struct lb_error *err)
{
	return cg_new(host, name, ready, true, limits, ret, err);
}

int lb_cg_open(const struct lb_cg_host *host, const char *name, struct lb_cgroup **ret, struct lb_error *err)
{
	return cg_new(host, name, NULL, false, NULL, ret, err);
}

int lb_cg_open_join(const struct lb_cgroup *cg, enum lb_cg_leaf leaf, int *fds, size_t *ret_n, struct lb_error *err)
{
	size_t n = 0;
	const char *file = cg->version == LB_CGROUP_V1 ? "tasks" : "cgroup.procs";
	for (size_t i = 0; i < cg->n_dirs; i++) {
		char path[PATH_MAX];
		if (lb_cg_has_leaf(cg, i, leaf))
			snprintf(path, sizeof(path), "%s/%s/%s", cg->dirs[i], lb_cg_leaf_name(leaf), file);
		else
			snprintf(path, sizeof(path), "%s/%s", cg->dirs[i], file);
		int fd = open(path, O_WRONLY | O_CLOEXEC);
		if (fd < 0) {
			int e = errno;
			while (n > 0)
				close(fds[--n]);
			return lb_error_set(err, e, "opening %s", path);
		}
		fds[n++] = fd;
	}
	*ret_n = n;
	return 0;
}

int lb_cg_open_leaf_dir(const struct lb_cgroup *cg, enum lb_cg_leaf leaf)
{
	if (cg->version != LB_CGROUP_V2)
		return -EOPNOTSUPP;
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/%s", cg->dirs[0], lb_cg_leaf_name(leaf));
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

bool lb_cg_populated(const struct lb_cgroup *cg, enum lb_cg_leaf leaf)
{
	for (size_t i = 0; i < cg->n_dirs; i++) {
		if (!lb_cg_has_leaf(cg, i, leaf))
			continue;
		char path[PATH_MAX];
		snprintf(path, sizeof(path), "%s/%s/cgroup.procs", cg->dirs[i], lb_cg_leaf_name(leaf));
		_cleanup_free_ char *s = NULL;
		size_t len = 0;
		int r = lb_read_file_at(AT_FDCWD, path, 1 << 20, &s, &len);
		if (r == -ENOENT)
			continue;
		if (r < 0 || len > 0)
			return true;
	}
	return false;
}

#define KILL_ROUND_MS 500
#define KILL_TOTAL_MS 5000

static uint64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

int lb_cg_kill(struct lb_cgroup *cg, enum lb_cg_leaf leaf, struct lb_error *err)
{
	uint64_t deadline = mono_ms() + KILL_TOTAL_MS;
	for (;;) {
		int r = cg->ops->kill(cg, leaf, KILL_ROUND_MS, err);
		if (r != -EBUSY || mono_ms() >= deadline)
			return r;
	}
}

int lb_cg_begin_run(struct lb_cgroup *cg, struct lb_cg_stats *ret)
{
	cg->ops->reset_peak(cg);
	return lb_cg_read_stats(cg, ret);
}

int lb_cg_read_stats(struct lb_cgroup *cg, struct lb_cg_stats *ret)
{
	memset(ret, 0, sizeof(*ret));
	return cg->ops->stats(cg, ret);
}

void lb_cg_remove_idle_leaf(struct lb_cgroup *cg, enum lb_cg_leaf leaf)
{
	for (size_t i = 0; i < cg->n_dirs; i++) {
		if (!lb_cg_has_leaf(cg, i, leaf))
			continue;
		char path[PATH_MAX];
		snprintf(path, sizeof(path), "%s/%s", cg->dirs[i], lb_cg_leaf_name(leaf));
		/* rmdir of a leaf inside our own subtree; the kernel refuses it (EBUSY) while a process is in it. */
		(void)rmdir(path);
	}
}

int lb_cg_destroy(struct lb_cgroup *cg, struct lb_error *err)
{
	int first = 0;
	for (int leaf = LB_CG_INIT; leaf <= LB_CG_RUN; leaf++) {
		int r = lb_cg_kill(cg, (enum lb_cg_leaf)leaf, err);
		if (r < 0 && r != -ENOENT && first == 0)
			first = r;
	}
	for (size_t i = 0; i < cg->n_dirs; i++) {
		/* Our leaves first; all of them when the directory holds more (a layout with other leaves, left by a
		 * crash of an older version). rmdir of an empty cgroup inside our own subtree. */
		for (int pass = 0; pass < 2; pass++) {
			for (int leaf = LB_CG_INIT; leaf <= LB_CG_RUN; leaf++) {
				if (pass == 0 && !lb_cg_has_leaf(cg, i, (enum lb_cg_leaf)leaf))
					continue;
				char path[PATH_MAX];
				snprintf(path, sizeof(path), "%s/%s", cg->dirs[i],
					 lb_cg_leaf_name((enum lb_cg_leaf)leaf));
				if (rmdir(path) < 0 && errno != ENOENT && first == 0)
					first = lb_error_set(err, errno, "removing cgroup %s", path);
			}
			if (rmdir(cg->dirs[i]) == 0 || errno == ENOENT)
				break;
			if (pass == 1 || errno != EBUSY) {
				if (first == 0)
					first = lb_error_set(err, errno, "removing cgroup %s", cg->dirs[i]);
				break;
			}
		}
	}
	return first;
}

void lb_cg_free(struct lb_cgroup *cg)
{
	if (!cg)
		return;
	for (size_t i = 0; i < cg->n_dirs; i++)
		free(cg->dirs[i]);
	if (cg->peak_fd >= 0)
		close(cg->peak_fd);
	free(cg);
}

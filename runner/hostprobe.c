/*
 * hostprobe.c — what this host can do for sandboxes (kernel, Landlock ABI, cgroups, seccomp, user namespaces,
 * loop devices), measured without changing anything. Runs in the caller (root: lensboxd, lensbox-runner --probe,
 * `lensbox doctor`). Never fails: whatever is missing goes into facts->why_not as one sentence, the first blocker
 * found. lensboxd's /v1/health and `lensbox doctor` both take their verdict from here, so they cannot disagree.
 * lb_host_probe_at() reads the same files under another root (tests simulate broken hosts with it).
 */
/* Paths built here come from bounded parts (names <= 63 bytes, mount points, run_dir checked by the caller);
 * a path cut at PATH_MAX only fails to open. */
#pragma GCC diagnostic ignored "-Wformat-truncation"

#include "internal.h"

#include "lb/cleanup.h"
#include "lb/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/seccomp.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/utsname.h>
#include <unistd.h>

static void why(struct lb_host_facts *f, const char *msg)
{
	if (!f->why_not[0])
		snprintf(f->why_not, sizeof(f->why_not), "%s", msg);
}

void lb_host_probe(const struct lb_policy *policy, struct lb_host_facts *f)
{
	struct lb_host_probe_opts o = { .root = "", .landlock_abi = -1 };
	lb_host_probe_at(policy, &o, f);
}

void lb_host_probe_at(const struct lb_policy *policy, const struct lb_host_probe_opts *o, struct lb_host_facts *f)
{
	memset(f, 0, sizeof(*f));
	const char *root = o->root ? o->root : "";
	char path[PATH_MAX];
	struct utsname u;
	if (uname(&u) == 0)
		snprintf(f->kernel, sizeof(f->kernel), "%s", u.release);

	f->landlock_abi = o->landlock_abi >= 0 ? o->landlock_abi : lb_landlock_abi();
	if (policy) {
		const struct lb_landlock_policy *lp = &policy->landlock;
		if (f->landlock_abi < lp->min_abi &&
		    (f->landlock_abi < lp->degraded_min_abi || lp->degraded_min_abi >= lp->min_abi)) {
			char msg[160];
			snprintf(msg, sizeof(msg), "Landlock ABI %d is below the policy's minimum %d", f->landlock_abi,
				 lp->min_abi);
			why(f, msg);
		}
	}

	struct lb_cg_host host;
	struct lb_error err;
	lb_error_clear(&err);
	if (lb_cg_detect_root(&host, root, &err) == 0) {
		f->cgroup = host.version;
		f->cgroup_v2_mounted = host.v2_mounted;
		f->cgroup_delegated = host.v2_delegated;
		snprintf(f->cgroup_v2_mount, sizeof(f->cgroup_v2_mount), "%s", host.v2_mount);
		if (host.version == LB_CGROUP_V2)
			snprintf(f->cgroup_root, sizeof(f->cgroup_root), "%s", host.v2_base);
		else
			snprintf(f->cgroup_root, sizeof(f->cgroup_root), "%s/lensbox", host.v1_mount[LB_CG1_MEMORY]);
	} else {
		f->cgroup_v2_mounted = host.v2_mounted;
		why(f, err.msg);
	}

	/* PR_GET_SECCOMP answers 0 when we are not filtered ourselves; the actions list proves filter mode. */
	_cleanup_free_ char *actions = NULL;
	snprintf(path, sizeof(path), "%s/proc/sys/kernel/seccomp/actions_avail", root);
	f->seccomp = prctl(PR_GET_SECCOMP, 0, 0, 0, 0) >= 0 &&
		     lb_read_file_at(AT_FDCWD, path, 4096, &actions, NULL) == 0 && strstr(actions, "errno") != NULL;
	if (!f->seccomp)
		why(f, "seccomp filter mode is not available");

	uint64_t maxns = 0;
	snprintf(path, sizeof(path), "%s/proc/sys/user/max_user_namespaces", root);
	f->user_namespaces = lb_read_u64_at(AT_FDCWD, path, &maxns) == 0 && maxns > 0;
	if (!f->user_namespaces)
		why(f, "user namespaces are disabled (user.max_user_namespaces is 0)");

	snprintf(path, sizeof(path), "%s/dev/loop-control", root);
	int fd = open(path, O_RDWR | O_CLOEXEC);
	f->loop_devices = fd >= 0;
	if (fd >= 0)
		close(fd);
	else
		why(f, "/dev/loop-control cannot be opened (loop module missing?)");
}

/*
 * doctor_kernel.c — `lensbox doctor`'s kernel checks: version, user namespaces, Landlock against the policy,
 * seccomp, loop devices and the cgroup layout (v2, v1, or hybrid: v1 controllers beside a v2 hierarchy), its
 * controllers and delegation.
 *
 * Runs in the CLI process; reads only. The verdict comes from the runner's lb_host_probe_at(), the function lensboxd
 * calls at start for /v1/health's `why_not`: the checks here only add detail and each fix, so doctor and health
 * cannot disagree about whether sandboxes run. Under LENSBOX_DOCTOR_ROOT every file is read below that directory.
 */
#include <stdio.h>
#include <string.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "doctor.h"
#include "lb/cleanup.h"
#include "lb/fileio.h"

#include <fcntl.h>

static void check_landlock(struct lbc_doctor *d)
{
	const struct lb_host_facts *f = &d->facts;
	if (!d->policy) {
		lbc_doc_add(d, "landlock", LBC_DOC_OK, NULL, NULL, "ABI %d (the policy did not load: not compared)",
			    f->landlock_abi);
		return;
	}
	const struct lb_landlock_policy *lp = &d->policy->landlock;
	char fix[LBC_DOC_TEXT];
	snprintf(fix, sizeof(fix),
		 "boot a kernel with Landlock ABI %d or later (Linux 6.10+ gives 6) and `landlock` in its lsm= list "
		 "(`cat /sys/kernel/security/lsm` shows it)",
		 lp->min_abi);
	if (f->landlock_abi >= lp->min_abi)
		lbc_doc_add(d, "landlock", LBC_DOC_OK, NULL, NULL, "ABI %d (the policy needs %d)", f->landlock_abi,
			    lp->min_abi);
	else if (lp->degraded_min_abi < lp->min_abi && f->landlock_abi >= lp->degraded_min_abi)
		lbc_doc_add(
		    d, "landlock", LBC_DOC_WARN,
		    "sandboxes run with the policy's degraded level: the rules of the higher ABIs are not enforced",
		    fix, "ABI %d, below the policy's %d but at least its degraded_min_abi %d", f->landlock_abi,
		    lp->min_abi, lp->degraded_min_abi);
	else
		lbc_doc_add(d, "landlock", LBC_DOC_FAIL,
			    "without it a sandboxed program's file access is not confined: lensboxd starts no sandbox",
			    fix, "ABI %d, below the policy's minimum %d", f->landlock_abi, lp->min_abi);
}

/* The controllers the v2 hierarchy offers (its cgroup.controllers), "" when unreadable. */
static void v2_controllers(const char *mount, char *buf, size_t size)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/cgroup.controllers", mount);
	_cleanup_free_ char *s = NULL;
	buf[0] = '\0';
	if (lb_read_file_at(AT_FDCWD, path, 4096, &s, NULL) == 0) {
		s[strcspn(s, "\n")] = '\0';
		snprintf(buf, size, "%s", s);
	}
}

static void check_cgroup(struct lbc_doctor *d)
{
	const struct lb_host_facts *f = &d->facts;
	char ctl[256] = "";
	if (f->cgroup_v2_mounted)
		v2_controllers(f->cgroup_v2_mount, ctl, sizeof(ctl));
	if (f->cgroup == LB_CGROUP_V2) {
		lbc_doc_add(d, "cgroup", LBC_DOC_OK, NULL, NULL, "v2 at %s, controllers: %s", f->cgroup_v2_mount, ctl);
	} else if (f->cgroup == LB_CGROUP_V1 && f->cgroup_v2_mounted) {
		lbc_doc_add(d, "cgroup", LBC_DOC_OK, NULL, NULL,
			    "hybrid: v1 hierarchies memory, cpu, pids, freezer carry the limits; v2 at %s has %s%s",
			    f->cgroup_v2_mount, ctl[0] ? "controllers: " : "no controllers", ctl);
	} else if (f->cgroup == LB_CGROUP_V1) {
		lbc_doc_add(d, "cgroup", LBC_DOC_OK, NULL, NULL, "v1: hierarchies memory, cpu, pids, freezer");
	} else {
		lbc_doc_add(
		    d, "cgroup", LBC_DOC_FAIL,
		    "memory, CPU and process limits are enforced through cgroups: no sandbox starts without them",
		    "boot with systemd.unified_cgroup_hierarchy=1 (cgroup v2 with memory, cpu and pids), or mount "
		    "the v1 hierarchies: for c in memory cpu pids freezer; do mkdir -p /sys/fs/cgroup/$c && mount "
		    "-t cgroup -o $c cgroup /sys/fs/cgroup/$c; done",
		    "no usable hierarchy%s%s%s", f->cgroup_v2_mounted ? " (v2 at " : "",
		    f->cgroup_v2_mounted ? f->cgroup_v2_mount : "", f->cgroup_v2_mounted ? ")" : "");
		return;
	}
	/* Delegation: on v2 lensboxd divides the cgroup systemd delegated to its unit (Delegate=yes); on v1 it uses a
	 * `lensbox` directory of its own in each hierarchy, and nothing is delegated. */
	if (f->cgroup != LB_CGROUP_V2) {
		lbc_doc_add(d, "cgroup-delegate", LBC_DOC_OK, NULL, NULL,
			    "not needed on v1: sandboxes go under each hierarchy's lensbox directory");
		return;
	}
	char unit[600];
	snprintf(unit, sizeof(unit), "%s/system.slice/lensboxd.service", f->cgroup_v2_mount);
	char val[8] = "";
	if (access(unit, F_OK) < 0)
		lbc_doc_add(d, "cgroup-delegate", LBC_DOC_OK, NULL, NULL,
			    "lensboxd.service is not running; its unit asks for Delegate=yes");
	else if (getxattr(unit, "trusted.delegate", val, sizeof(val) - 1) > 0 && val[0] == '1')
		lbc_doc_add(d, "cgroup-delegate", LBC_DOC_OK, NULL, NULL, "%s is delegated to lensboxd", unit);
	else
		lbc_doc_add(
		    d, "cgroup-delegate", LBC_DOC_WARN,
		    "lensboxd then puts sandboxes under the hierarchy's root lensbox directory, outside its unit",
		    "keep Delegate=yes in lensboxd.service (systemctl cat lensboxd), then systemctl daemon-reload "
		    "&& systemctl restart lensboxd",
		    "%s is not delegated", unit);
}

void lbc_doctor_kernel(struct lbc_doctor *d)
{
	struct lb_host_probe_opts o = { .root = d->root, .landlock_abi = d->landlock_abi };
	lb_host_probe_at(d->policy, &o, &d->facts);
	d->facts_done = true;
	const struct lb_host_facts *f = &d->facts;

	lbc_doc_add(d, "kernel", LBC_DOC_OK, NULL, NULL, "%s", f->kernel);
	lbc_doc_add(d, "user-namespaces", f->user_namespaces ? LBC_DOC_OK : LBC_DOC_FAIL,
		    "each sandbox is a user namespace mapping its own host uids: none can start without them",
		    "sysctl -w user.max_user_namespaces=15000 && echo user.max_user_namespaces=15000 > "
		    "/etc/sysctl.d/90-lensbox.conf",
		    "%s", f->user_namespaces ? "enabled" : "disabled (user.max_user_namespaces is 0 or unreadable)");
	check_landlock(d);
	lbc_doc_add(
	    d, "seccomp", f->seccomp ? LBC_DOC_OK : LBC_DOC_FAIL,
	    "the syscall allowlist is a seccomp filter: without it a sandbox could call anything the kernel has",
	    "boot a kernel built with CONFIG_SECCOMP_FILTER=y (Debian's kernels are)", "%s",
	    f->seccomp ? "filter mode with errno actions" : "filter mode not available");
	check_cgroup(d);
	lbc_doc_add(d, "loop-devices", f->loop_devices ? LBC_DOC_OK : LBC_DOC_FAIL,
		    "each sandbox's disk is a file mounted through a loop device: its size limit needs one",
		    "modprobe loop && echo loop > /etc/modules-load.d/lensbox.conf", "%s",
		    f->loop_devices ? "/dev/loop-control opens" : "/dev/loop-control cannot be opened");
}

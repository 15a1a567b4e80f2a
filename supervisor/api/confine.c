/*
 * confine.c — what the API process gives up before it reads a byte from a client.
 *
 * Runs in the API process, once, at start, before its first thread (libmicrohttpd's are created after), so every
 * thread inherits all of it. It starts as root (exec'd by the core) and ends as:
 *
 *   - api_user's uid and gid, no supplementary groups, no capabilities in any set and an empty bounding set
 *     (libcap-ng's capng_change_id), and not dumpable;
 *   - no_new_privs, so no exec could ever gain privilege back;
 *   - a Landlock domain with no filesystem access at all, no TCP bind or connect, and signals and abstract Unix
 *     sockets scoped to itself (lib/landlock.c): it needs no file — the socket, the control socket and the
 *     configuration are inherited descriptors, and the bodies it passes on are memfds;
 *   - a seccomp allowlist (below): what libmicrohttpd, yajl and the C library use to serve HTTP on an inherited
 *     socket, with threads. Everything else answers EPERM; clone without CLONE_THREAD (a new process) and any
 *     namespace flag is refused, clone3 answers ENOSYS (so threads are made with clone, whose flags can be checked),
 *     sockets only of AF_UNIX (the per-request channels), and a foreign architecture's call kills the process.
 *
 * A compromised API process can therefore speak the core's protocol (which validates everything, see core/serve.c)
 * and answer its own clients, and nothing else: it cannot open a file, reach the network, signal or trace another
 * process, or make a namespace.
 */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>
#include <seccomp.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <cap-ng.h>

#include "api.h"
#include "lb/cleanup.h"
#include "lb/landlock.h"

/* Every call the API process makes while serving (found with strace over the integration suite). */
static const char *const allowed[] = {
	/* memory */
	"brk",
	"mmap",
	"munmap",
	"mprotect",
	"mremap",
	"madvise",
	/* threads, futexes and signals within the process */
	"futex",
	"set_robust_list",
	"get_robust_list",
	"rseq",
	"sched_yield",
	"sched_getaffinity",
	"rt_sigaction",
	"rt_sigprocmask",
	"rt_sigreturn",
	"sigaltstack",
	"restart_syscall",
	"exit",
	"exit_group",
	"gettid",
	"getpid",
	"getppid",
	"tgkill",
	"signalfd4",
	"prlimit64",
	/* descriptors it holds: sockets, pipes, eventfds, memfds */
	"read",
	"write",
	"readv",
	"writev",
	"pread64",
	"pwrite64",
	"lseek",
	"close",
	"fcntl",
	"fstat",
	"newfstatat",
	"dup",
	"dup3",
	"pipe2",
	"eventfd2",
	"memfd_create",
	"ftruncate",
	"sendfile",
	/* the listening socket and the channels */
	"accept",
	"accept4",
	"recvmsg",
	"sendmsg",
	"recvfrom",
	"sendto",
	"shutdown",
	"getsockopt",
	"setsockopt",
	"getsockname",
	"getpeername",
	"socketpair",
	/* waiting */
	"poll",
	"ppoll",
	"epoll_create1",
	"epoll_ctl",
	"epoll_wait",
	"epoll_pwait",
	"select",
	"pselect6",
	"nanosleep",
	"clock_nanosleep",
	/* time and randomness */
	"clock_gettime",
	"clock_getres",
	"gettimeofday",
	"time",
	"getrandom",
	/* identity (read-only) */
	"getuid",
	"geteuid",
	"getgid",
	"getegid",
};

static int allow(scmp_filter_ctx sc, const char *name, unsigned n, const struct scmp_arg_cmp *cmp, struct lb_error *err)
{
	int nr = seccomp_syscall_resolve_name(name);
	if (nr == __NR_SCMP_ERROR)
		return 0; /* not a call of this architecture */
	int r = seccomp_rule_add_array(sc, SCMP_ACT_ALLOW, nr, n, cmp);
	return r < 0 ? lb_error_set(err, r, "the API process's seccomp rule for %s", name) : 0;
}

static int load_seccomp(struct lb_error *err)
{
	scmp_filter_ctx sc = seccomp_init(SCMP_ACT_ERRNO(EPERM));
	if (!sc)
		return lb_error_set(err, ENOMEM, "seccomp_init");
	int r = 0;
	for (size_t i = 0; i < LB_ARRAY_SIZE(allowed) && r == 0; i++)
		r = allow(sc, allowed[i], 0, NULL, err);
	/* clone: threads only (CLONE_THREAD set), and no namespace of any kind. */
	const scmp_datum_t ns = CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID |
				CLONE_NEWNET | CLONE_NEWCGROUP | 0x00000080 /* CLONE_NEWTIME */;
	if (r == 0) {
		/* One comparison per argument (libseccomp's rule): CLONE_THREAD set and every namespace bit clear. */
		struct scmp_arg_cmp c = SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_THREAD | ns, CLONE_THREAD);
		r = allow(sc, "clone", 1, &c, err);
	}
	if (r == 0) {
		int nr = seccomp_syscall_resolve_name("clone3");
		if (nr != __NR_SCMP_ERROR && (r = seccomp_rule_add(sc, SCMP_ACT_ERRNO(ENOSYS), nr, 0)) < 0)
			r = lb_error_set(err, r, "the API process's seccomp rule for clone3");
	}
	if (r == 0) {
		struct scmp_arg_cmp c = SCMP_A0(SCMP_CMP_EQ, AF_UNIX);
		r = allow(sc, "socket", 1, &c, err);
	}
	/* Opening a file answers EACCES, as Landlock would: glibc's pthread_setname_np() tries
	 * /proc/self/task/<tid>/comm when libmicrohttpd names a new thread, and goes on without the name. */
	static const char *const opens[] = { "open", "openat", "openat2" };
	for (size_t i = 0; i < LB_ARRAY_SIZE(opens) && r == 0; i++) {
		int nr = seccomp_syscall_resolve_name(opens[i]);
		if (nr != __NR_SCMP_ERROR && (r = seccomp_rule_add(sc, SCMP_ACT_ERRNO(EACCES), nr, 0)) < 0)
			r = lb_error_set(err, r, "the API process's seccomp rule for %s", opens[i]);
	}
	if (r == 0) { /* libmicrohttpd names its threads */
		struct scmp_arg_cmp c = SCMP_A0(SCMP_CMP_EQ, PR_SET_NAME);
		r = allow(sc, "prctl", 1, &c, err);
	}
	if (r == 0 && (r = seccomp_attr_set(sc, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS)) < 0)
		r = lb_error_set(err, r, "the API process's foreign-architecture action");
	if (r == 0 && (r = seccomp_load(sc)) < 0)
		r = lb_error_set(err, r, "loading the API process's seccomp filter");
	seccomp_release(sc);
	return r;
}

int lbd_api_confine(const struct lbd_config *cfg, struct lb_error *err)
{
	uid_t uid;
	gid_t gid;
	int r = lbd_config_api_ids(cfg, &uid, &gid, err);
	if (r < 0)
		return r;
	/* Every capability, the bounding set and the supplementary groups go with the change of ids. */
	capng_clear(CAPNG_SELECT_BOTH);
	r = capng_change_id((int)uid, (int)gid, CAPNG_DROP_SUPP_GRP | CAPNG_CLEAR_BOUNDING);
	if (r != 0)
		return lb_error_setx(err, EPERM, "dropping to api_user `%s` (uid %u) failed (libcap-ng: %d)",
				     cfg->api_user, (unsigned)uid, r);
	if (geteuid() == 0 || getuid() == 0 || capng_have_capabilities(CAPNG_SELECT_CAPS) != CAPNG_NONE)
		return lb_error_setx(err, EPERM, "the API process still holds privilege after the drop");
	/* The change of ids cleared the parent-death signal: set it now, before seccomp refuses prctl. */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0)
		return lb_error_set(err, errno, "setting the parent-death signal");
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0 || prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return lb_error_set(err, errno, "setting no_new_privs");
	int abi = 0;
	r = lb_landlock_deny_all(NULL, 0, &abi, err);
	if (r < 0)
		return lb_error_wrap(err, "confining the API process");
	return load_seccomp(err);
}

/*
 * exec.c — running one program in a started sandbox, with every layer in place before its first instruction.
 *
 * Runs in the caller (root, possibly many threads). Everything is prepared before the first clone: argv, the PATH
 * candidates, the clean environment, the cgroup.procs/tasks fds of the `run` leaf, the output pipes, two small
 * stacks; the Landlock ruleset was built at start and the seccomp BPF is the policy's. Then:
 *
 *   caller ──clone3(VM|VFORK)──> C1 (host root, host pid ns; v2: born in the `run` leaf): setgroups(0),
 *     (suspended until C1 exits)  v1: joins the `run` leaf, setns(init's pidfd, user|mnt|pid|ipc|uts|net|cgroup),
 *                                 unshare(cgroup), clone(VM|VFORK|PARENT) ──> C2 (pid-ns member, the caller's
 *                                 child): setsid, default signals, stdin /dev/null, stdout/stderr to the pipes,
 *                                 bounding set empty, securebits locked, non-dumpable, setresgid/setresuid(sandbox
 *                                 ids), every capability set empty, RLIMIT_CORE 0, chdir, the sandbox's CPUs
 *                                 as affinity, no_new_privs, Landlock, every other fd closed, seccomp last, execve.
 *                                 C1 resumes once C2 has exec'd (or failed), reports C2's pid and exits.
 *
 * Why shared memory (CLONE_VM) and why it is safe. A fork of lensboxd copies ~300 mappings and its page tables
 * twice per run and makes every later write of the daemon fault; borrowing the caller's memory costs none of it
 * (posix_spawn does the same; ~1 ms a run in lensboxd, tests/bench/api_bench.py). What keeps it safe:
 *   - CLONE_VFORK: exactly one of caller, C1, C2 runs on this thread's memory at a time, and C1/C2 use stacks of
 *     their own (mapped here, with guard pages); they read the plan and write only their stacks and errno. All
 *     signals are blocked around the clone so no handler of the caller runs in them, and they run pinned to the
 *     caller's CPU, whose caches hold that memory (fork balancing would often pick the other CPU).
 *   - Every state C1 and C2 change is per task or per process and never the caller's: credentials, namespaces,
 *     cgroup membership, fd table, cwd, signal dispositions, rlimits, Landlock, seccomp (no TSYNC). Raw syscalls
 *     for the credential changes (glibc's setxid wrappers would signal the caller's other threads). A vfork
 *     child's oom_score_adj is its own (the kernel does not spread it to the processes sharing its mm).
 *     integration/test_api_runs.py checks the daemon's state after runs.
 *   - Nothing in the sandbox can reach the shared memory: C2 marks it non-dumpable (PR_SET_DUMPABLE 0) before it
 *     drops to the sandbox uid right before execve, so ptrace and /proc/<pid>/mem need CAP_SYS_PTRACE in the
 *     host's user namespace; Landlock's signal scope and the emptied `run` leaf leave no sandbox process to stop
 *     it; execve gives C2 a memory of its own.
 * C1 needs clone3 for CLONE_INTO_CGROUP (on v2 a cgroup.procs write waits for an RCU grace period), and a child of
 * clone3 on a new stack cannot return through C: a few lines of assembly start it (spawn.c, x86-64). Elsewhere C1 is a
 * fork-like clone3 (a copy of the caller's memory, as before) and C2 still borrows C1's.
 *
 * A failed step in C1 or C2 is reported through a CLOEXEC socket pair with its name and errno, and nothing runs (a
 * socket rather than a pipe so that C2 can also hand over the seccomp listener that counts refusals, refusals.c). The
 * caller polls C2's pidfd, both output pipes and the deadline; when C2 is gone (the main program ended) or the
 * deadline passes it kills the whole `run` leaf, so daemons the program left (holding the pipes or not) die before
 * the result is returned, and the result arrives; a leaf that cannot be emptied is an error, not a result. Output
 * is captured with bounded memory (output.c).
 */
/* Paths built here come from bounded parts (names <= 63 bytes, mount points, run_dir checked by the caller);
 * a path cut at PATH_MAX only fails to open. */
#pragma GCC diagnostic ignored "-Wformat-truncation"

#include "internal.h"

#include "lb/cleanup.h"
#include "lb/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/sched.h>
#include <linux/seccomp.h>
#include <linux/securebits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef CLONE_INTO_CGROUP
#define CLONE_INTO_CGROUP 0x200000000ULL /* Linux 5.7 */
#endif
#ifndef CLONE_CLEAR_SIGHAND
#define CLONE_CLEAR_SIGHAND 0x100000000ULL /* Linux 5.5 */
#endif
#ifndef CLONE_NEWCGROUP
#define CLONE_NEWCGROUP 0x02000000
#endif

#define MAX_ARGS	    4096
#define MAX_ENV		    512
#define MAX_ENV_BYTES	    (256u << 10)
#define MAX_CANDIDATES	    64
#define DRAIN_AFTER_KILL_MS 2000
#define CHILD_STACK	    (64u << 10) /* C1's and C2's frames are a few hundred bytes deep */

struct exec_plan {
	char **argv;
	char **candidates; /* execve() paths to try in order */
	char **envp;
	const char *cwd;
	int cg_fds[LB_CG_MAX_DIRS];
	size_t n_cg;
	int out_w, err_w, report_w;
	int landlock_fd;
	const struct sock_fprog *seccomp;
	const struct sock_fprog *seccomp_notify; /* the counting variant (seccomp_notify.c), or NULL */
	unsigned landlock_flags;		 /* restrict_self's: LOG_NEW_EXEC_ON while the run reads audit */
	int init_pidfd;
	uint32_t uid, gid;
	void *c2_stack;		       /* top of C2's stack */
	bool pinned;		       /* C1 and C2 run on the caller's CPU (the caller's affinity is `cpus`) */
	cpu_set_t cpus;		       /* the caller's affinity */
	const cpu_set_t *sandbox_cpus; /* the program's affinity (cpus.c) */
	uint64_t ignored;	       /* the caller's ignored signals (bit sig - 1), which C2 sets back to default */
};

static void strv_free(char **v)
{
	if (!v)
		return;
	for (char **p = v; *p; p++)
		free(*p);
	free(v);
}

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Index of the entry of env with the same key as kv ("KEY=..."), or -1. */
static int env_find(char **env, size_t n, const char *kv)
{
	size_t kl = (size_t)(strchr(kv, '=') - kv);
	for (size_t i = 0; i < n; i++)
		if (strncmp(env[i], kv, kl + 1) == 0)
			return (int)i;
	return -1;
}

static int env_set(char **env, size_t *n, const char *kv)
{
	char *copy = strdup(kv);
	if (!copy)
		return -ENOMEM;
	int i = env_find(env, *n, kv);
	if (i >= 0) {
		free(env[i]);
		env[i] = copy;
	} else {
		env[(*n)++] = copy;
	}
	return 0;
}

/* The clean environment: the image's, then PATH, HOME, LANG, PYTHONUNBUFFERED, then the caller's extras. Nothing
 * comes from the host. */
static int build_env(const struct lb_sandbox *sb, const char *const *extra, char ***ret, struct lb_error *err)
{
	size_t n_img = 0, n_extra = 0, bytes = 0;
	for (char **e = sb->image_env; *e; e++)
		n_img++;
	for (const char *const *e = extra; e && *e; e++) {
		const char *eq = strchr(*e, '=');
		if (!eq || eq == *e)
			return lb_error_setx(err, EINVAL, "environment entry without KEY=: %.40s", *e);
		bytes += strlen(*e) + 1;
		n_extra++;
	}
	if (n_extra > MAX_ENV || bytes > MAX_ENV_BYTES)
		return lb_error_setx(err, E2BIG, "environment too large");
	char **env = calloc(n_img + n_extra + 8, sizeof(char *));
	if (!env)
		return lb_error_set(err, ENOMEM, "building the environment");
	size_t n = 0;
	int r = 0;
	for (char **e = sb->image_env; *e && r == 0; e++)
		r = env_set(env, &n, *e);
	const char *fixed[] = { sb->path_env, "HOME=/sandbox", "LANG=C.UTF-8", "PYTHONUNBUFFERED=1" };
	for (size_t i = 0; i < LB_ARRAY_SIZE(fixed) && r == 0; i++)
		r = env_set(env, &n, fixed[i]);
	for (const char *const *e = extra; e && *e && r == 0; e++)
		r = env_set(env, &n, *e);
	if (r < 0) {
		strv_free(env);
		return lb_error_set(err, r, "building the environment");
	}
	*ret = env;
	return 0;
}

/* Where execve() is tried: argv0 itself when it has a '/', else each PATH directory (inside the sandbox). */
static int build_candidates(const char *argv0, char **envp, char ***ret, struct lb_error *err)
{
	char **c = calloc(MAX_CANDIDATES + 1, sizeof(char *));
	if (!c)
		return lb_error_set(err, ENOMEM, "building PATH candidates");
	if (strchr(argv0, '/')) {
		if (!(c[0] = strdup(argv0))) {
			free(c);
			return lb_error_set(err, ENOMEM, "building PATH candidates");
		}
		*ret = c;
		return 0;
	}
	const char *path = LB_DEFAULT_PATH;
	for (char **e = envp; e && *e; e++)
		if (strncmp(*e, "PATH=", 5) == 0)
			path = *e + 5;
	size_t n = 0;
	for (const char *p = path; *p && n < MAX_CANDIDATES;) {
		size_t l = strcspn(p, ":");
		if (l > 0 && p[0] == '/') {
			if (asprintf(&c[n], "%.*s/%s", (int)l, p, argv0) < 0) {
				c[n] = NULL;
				strv_free(c);
				return lb_error_set(err, ENOMEM, "building PATH candidates");
			}
			n++;
		}
		p += l;
		if (*p == ':')
			p++;
	}
	*ret = c;
	return 0;
}

static _Noreturn void fail_child(int fd, const char *step, int e)
{
	lb_child_report(fd, 'E', e, 0, step);
	_exit(127);
}

/* C2's last step before execve when refusals are counted: the variant filter with a listener (CLOEXEC), sent to
 * the caller over the report socket and closed here, so the program never holds it (it could answer its own
 * refused calls). The variant refuses nothing these calls need (lb_seccomp_notify_prepare checked). */
static void install_counting_filter(int rep, const struct sock_fprog *prog)
{
	int lfd = (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, prog);
	if (lfd < 0)
		fail_child(rep, "seccomp", errno);
	struct lb_child_report msg;
	memset(&msg, 0, sizeof(msg));
	msg.kind = 'L';
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} ctl;
	memset(&ctl, 0, sizeof(ctl));
	struct iovec iov = { .iov_base = &msg, .iov_len = sizeof(msg) };
	struct msghdr mh = {
		.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof(ctl.buf)
	};
	struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &lfd, sizeof(int));
	if (sendmsg(rep, &mh, MSG_NOSIGNAL) != (ssize_t)sizeof(msg))
		fail_child(rep, "handing over the seccomp listener", errno);
	close(lfd);
}

/* C2: runs in the sandbox's namespaces as a member of its pid namespace, still with the user namespace's
 * capabilities, on the caller's memory (C1 suspended); drops everything and execs. Thin syscall wrappers only. */
LB_BORROWED_STACK static int c2_main(void *arg)
{
	const struct exec_plan *p = arg;
	int rep = p->report_w;
	if (setsid() < 0)
		fail_child(rep, "setsid", errno);
	/* The caller's signal mask and ignored signals must not leak into the program (SIG_IGN survives execve). C1
	 * was cloned with CLONE_CLEAR_SIGHAND, so no handler of the caller's is left here to run on its memory once
	 * signals are unblocked; only what the caller ignores is still set, and goes back to the default. */
	for (int sig = 1; sig < _NSIG && sig <= 64; sig++) {
		if (sig == SIGKILL || sig == SIGSTOP || !(p->ignored & (UINT64_C(1) << (sig - 1))))
			continue;
		struct sigaction sa;
		memset(&sa, 0, sizeof(sa));
		sa.sa_handler = SIG_DFL;
		(void)sigaction(sig, &sa, NULL);
	}
	sigset_t none;
	sigemptyset(&none);
	syscall(SYS_rt_sigprocmask, SIG_SETMASK, &none, NULL, _NSIG / 8);
	int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (devnull < 0)
		fail_child(rep, "opening /dev/null for stdin", errno);
	if (dup2(devnull, 0) < 0 || dup2(p->out_w, 1) < 0 || dup2(p->err_w, 2) < 0)
		fail_child(rep, "setting up stdio", errno);

	/* Capabilities are numbered 0..CAP_LAST_CAP without gaps: the first EINVAL is past the last one. */
	for (int cap = 0; cap < 64; cap++)
		if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0) {
			if (errno == EINVAL)
				break;
			fail_child(rep, "dropping the bounding set", errno);
		}
	/* Locked: no uid transition or file capability can ever give capabilities back. */
	unsigned long bits = SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
			     SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED | SECBIT_NO_CAP_AMBIENT_RAISE |
			     SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
	if (prctl(PR_SET_SECUREBITS, bits, 0, 0, 0) < 0)
		fail_child(rep, "locking securebits", errno);
	/* The memory is still the caller's: keep it out of ptrace and /proc/<pid>/mem for good, whatever
	 * fs.suid_dumpable says, before we become a user the sandbox's processes share (this marks the caller too,
	 * which a root daemon wants anyway; execve gives the program a memory of its own). */
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
		fail_child(rep, "marking the memory non-dumpable", errno);
	if (syscall(SYS_setresgid, p->gid, p->gid, p->gid) < 0)
		fail_child(rep, "setresgid", errno);
	if (syscall(SYS_setresuid, p->uid, p->uid, p->uid) < 0)
		fail_child(rep, "setresuid", errno);
	/* NO_SETUID_FIXUP kept the sets across setresuid: empty them explicitly. */
	struct __user_cap_header_struct hdr = { _LINUX_CAPABILITY_VERSION_3, 0 };
	struct __user_cap_data_struct data[2];
	memset(data, 0, sizeof(data));
	if (syscall(SYS_capset, &hdr, data) < 0)
		fail_child(rep, "clearing capabilities", errno);
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0)
		fail_child(rep, "clearing ambient capabilities", errno);
	struct rlimit nocore = { 0, 0 };
	if (setrlimit(RLIMIT_CORE, &nocore) < 0)
		fail_child(rep, "RLIMIT_CORE", errno);
	if (chdir(p->cwd) < 0)
		fail_child(rep, "chdir to the working directory", errno);
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		fail_child(rep, "no_new_privs", errno);
	/* The sandbox's own CPUs, as many as its limit: pools sized by the CPU count fit its share (cpus.c). */
	if (sched_setaffinity(0, sizeof(*p->sandbox_cpus), p->sandbox_cpus) < 0)
		fail_child(rep, "setting the sandbox's CPU affinity", errno);
	if (p->landlock_fd >= 0 && syscall(SYS_landlock_restrict_self, p->landlock_fd, p->landlock_flags) < 0)
		fail_child(rep, "landlock_restrict_self", errno);
	/* Only 0, 1, 2 and the report socket (CLOEXEC) survive: nothing of the caller leaks (runc CVE-2024-21626). */
	if (rep > 3)
		syscall(SYS_close_range, 3u, (unsigned)rep - 1, 0u);
	if (syscall(SYS_close_range, (unsigned)rep + 1, ~0u, 0u) < 0)
		fail_child(rep, "closing inherited descriptors", errno);
	if (p->seccomp_notify)
		install_counting_filter(rep, p->seccomp_notify);
	else if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, p->seccomp) < 0)
		fail_child(rep, "seccomp", errno);
	int first = 0;
	for (char **c = p->candidates; *c; c++) {
		execve(*c, p->argv, p->envp);
		if (errno != ENOENT && errno != ENOTDIR && first == 0)
			first = errno;
	}
	fail_child(rep, "execve", first ? first : ENOENT);
}

/* C1: host root in the host's pid namespace, on the caller's memory (the caller suspended); joins the run leaf and
 * the sandbox's namespaces, starts C2 as the caller's child and exits once C2 has exec'd. */
LB_BORROWED_STACK static int c1_main(void *arg)
{
	const struct exec_plan *p = arg;
	int rep = p->report_w;
	/* Our fd table is a copy of the caller's: drop every descriptor except the ones this run needs, before we
	 * enter the sandbox's namespaces. */
	int keep[LB_CG_MAX_DIRS + 5];
	size_t nk = 0;
	for (size_t i = 0; i < p->n_cg; i++)
		keep[nk++] = p->cg_fds[i];
	keep[nk++] = p->out_w;
	keep[nk++] = p->err_w;
	keep[nk++] = p->report_w;
	keep[nk++] = p->init_pidfd;
	if (p->landlock_fd >= 0)
		keep[nk++] = p->landlock_fd;
	for (size_t i = 1; i < nk; i++) /* insertion sort: a handful of fds */
		for (size_t j = i; j > 0 && keep[j - 1] > keep[j]; j--) {
			int t = keep[j];
			keep[j] = keep[j - 1];
			keep[j - 1] = t;
		}
	unsigned from = 3;
	for (size_t i = 0; i < nk; i++) {
		if ((unsigned)keep[i] > from)
			syscall(SYS_close_range, from, (unsigned)keep[i] - 1, 0u);
		if ((unsigned)keep[i] + 1 > from)
			from = (unsigned)keep[i] + 1;
	}
	syscall(SYS_close_range, from, ~0u, 0u);
	/* Sandboxed programs are the first thing the OOM killer should take, on the host as in their cgroup. C2
	 * inherits it; a vfork child's value stays its own. */
	int oom = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
	if (oom < 0 || write(oom, "1000", 4) != 4)
		fail_child(rep, "setting oom_score_adj", errno);
	close(oom);
	/* No supplementary groups of the caller may follow us (setgroups is denied inside the sandbox). */
	if (syscall(SYS_setgroups, 0, NULL) < 0)
		fail_child(rep, "setgroups", errno);
	/* v1: "0" into each hierarchy's `tasks` moves this (single) thread, i.e. the whole of C1; C2 is born there. */
	for (size_t i = 0; i < p->n_cg; i++) {
		if (write(p->cg_fds[i], "0", 1) != 1)
			fail_child(rep, "joining the run cgroup", errno);
		close(p->cg_fds[i]);
	}
	if (setns(p->init_pidfd, CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS |
				     CLONE_NEWNET | CLONE_NEWCGROUP) < 0)
		fail_child(rep, "entering the sandbox's namespaces", errno);
	/* A cgroup namespace of this run, rooted at the `run` leaf we just joined: the program sees "/" as its
	 * cgroup, nothing of the host's hierarchy (capable here: we hold the sandbox user namespace's caps). */
	if (unshare(CLONE_NEWCGROUP) < 0)
		fail_child(rep, "unsharing the cgroup namespace", errno);
	/* CLONE_PARENT: C2 is the caller's child, so the caller waits for the program itself and C1 can go. We are
	 * suspended until C2 has exec'd or exited. */
	pid_t pid = clone(c2_main, p->c2_stack, CLONE_VM | CLONE_VFORK | CLONE_PARENT | SIGCHLD, (void *)p);
	if (pid < 0)
		fail_child(rep, "clone into the sandbox's pid namespace", errno);
	lb_child_report(rep, 'P', 0, pid, NULL);
	_exit(0);
}

/* Moves both ends of a new pipe or socket pair above 0..2: a caller with closed stdio would get them there, and
 * dup2() in C2 would clobber them. */
static int fds_above_stdio(int fds[2])
{
	for (int i = 0; i < 2; i++) {
		if (fds[i] < 3) {
			int n = fcntl(fds[i], F_DUPFD_CLOEXEC, 3);
			if (n < 0)
				return -errno;
			close(fds[i]);
			fds[i] = n;
		}
	}
	return 0;
}

static int pipe_high(int fds[2])
{
	if (pipe2(fds, O_CLOEXEC) < 0)
		return -errno;
	return fds_above_stdio(fds);
}

/* The report channel: a CLOEXEC socket pair rather than a pipe, so C2 can pass the seccomp listener (SCM_RIGHTS);
 * SOCK_SEQPACKET keeps each report one message and gives EOF once C1 and C2 are gone, as a pipe would. */
static int report_pair(int fds[2])
{
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) < 0)
		return -errno;
	return fds_above_stdio(fds);
}

/* One report; *ret_fd gets a descriptor that came with it (CLOEXEC), else -1. Returns false at EOF. */
static bool read_report(int fd, struct lb_child_report *msg, int *ret_fd)
{
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = { .iov_base = msg, .iov_len = sizeof(*msg) };
	struct msghdr mh = {
		.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof(ctl.buf)
	};
	*ret_fd = -1;
	ssize_t n;
	while ((n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR)
		;
	/* Only C2 sends, one descriptor at most (the control buffer has room for no more: MSG_CTRUNC drops the rest).
	 */
	struct cmsghdr *c = n >= 0 ? CMSG_FIRSTHDR(&mh) : NULL;
	if (c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS && c->cmsg_len == CMSG_LEN(sizeof(int)))
		memcpy(ret_fd, CMSG_DATA(c), sizeof(int));
	return n == (ssize_t)sizeof(*msg);
}

static void close_pair(int fds[2])
{
	for (int i = 0; i < 2; i++)
		if (fds[i] >= 0) {
			close(fds[i]);
			fds[i] = -1;
		}
}

static void read_into(int *fd, struct lb_capture *c)
{
	char buf[65536];
	for (;;) {
		ssize_t n = read(*fd, buf, sizeof(buf));
		if (n > 0) {
			lb_capture_add(c, buf, (size_t)n);
			continue;
		}
		if (n < 0 && (errno == EINTR))
			continue;
		if (n < 0 && errno == EAGAIN)
			return;
		close(*fd); /* EOF or error: every writer is gone */
		*fd = -1;
		return;
	}
}

/* One run's resources, from its plan to its result: each step below fills part of it, and exec_run_release() frees
 * whatever is still held when the run ends, however far it got. Lives in lb_sandbox_exec()'s frame, which C1 and C2
 * read (the plan) while the caller is suspended. */
struct exec_run {
	struct exec_plan p;
	int out[2], errp[2], rep[2];
	struct lb_capture cap_out, cap_err;
	int c2_pidfd, listener;
	pid_t c2;
	struct lb_run_refusals rf;
	void *stacks; /* C1's and C2's (spawn.c), NULL until mapped */
	size_t stacks_len;
	void *c1_stack_base;
	struct lb_cg_stats before;
	uint64_t t0;
	bool timed_out, hung_up, have_status;
	siginfo_t status;
};

/* The signals this process ignores, from SigIgn in /proc/self/status (dispositions are the process's, not a
 * thread's); every signal when that cannot be read, so that C2 then resets them all as it always may. */
static uint64_t ignored_signals(void)
{
	_cleanup_free_ char *s = NULL;
	if (lb_read_file_at(AT_FDCWD, "/proc/self/status", 1 << 16, &s, NULL) < 0)
		return UINT64_MAX;
	const char *line = strstr(s, "\nSigIgn:");
	if (!line)
		return UINT64_MAX;
	char *end = NULL;
	errno = 0;
	unsigned long long mask = strtoull(line + strlen("\nSigIgn:"), &end, 16);
	if (errno || end == line + strlen("\nSigIgn:") || (*end != '\n' && *end != '\0'))
		return UINT64_MAX;
	return (uint64_t)mask;
}

/* The plan (argv, PATH candidates, environment, v1's `run` tasks files), the children's stacks, the output buffers
 * and the pipes: everything C1 and C2 use exists before the clone. */
static int exec_prepare(struct lb_sandbox *sb, const struct lb_exec_spec *spec, size_t argc, struct exec_run *x,
			struct lb_error *err)
{
	struct exec_plan *p = &x->p;
	p->argv = calloc(argc + 1, sizeof(char *));
	if (!p->argv)
		return lb_error_set(err, ENOMEM, "exec: copying argv");
	for (size_t i = 0; i < argc; i++)
		if (!(p->argv[i] = strdup(spec->argv[i])))
			return lb_error_set(err, ENOMEM, "exec: copying argv");
	int r;
	if ((r = build_env(sb, spec->env, &p->envp, err)) < 0)
		return r;
	if ((r = build_candidates(p->argv[0], p->envp, &p->candidates, err)) < 0)
		return r;
	if (sb->cg->version == LB_CGROUP_V1 && (r = lb_cg_open_join(sb->cg, LB_CG_RUN, p->cg_fds, &p->n_cg, err)) < 0)
		return r;
	p->ignored = ignored_signals();
	/* Two stacks, each above a guard page: an overflow faults instead of writing into the caller's memory. */
	if (!(x->stacks = lb_stacks_map(2, CHILD_STACK, &x->stacks_len)))
		return lb_error_set(err, errno, "exec: mapping the child stacks");
	x->c1_stack_base = lb_stack_base(x->stacks, 0, CHILD_STACK);
	p->c2_stack = lb_stack_base(x->stacks, 1, CHILD_STACK) + CHILD_STACK;
	if ((r = lb_capture_init(&x->cap_out, LB_CAPTURE_HEAD, spec->stdout_limit)) < 0 ||
	    (r = lb_capture_init(&x->cap_err, LB_CAPTURE_TAIL, spec->stderr_limit)) < 0)
		return lb_error_set(err, r, "exec: allocating output buffers");
	if ((r = pipe_high(x->out)) < 0 || (r = pipe_high(x->errp)) < 0 || (r = report_pair(x->rep)) < 0)
		return lb_error_set(err, r, "exec: creating pipes");
	p->out_w = x->out[1];
	p->err_w = x->errp[1];
	p->report_w = x->rep[1];
	return 0;
}

/* C1 on the caller's memory; we are suspended until it has exited (after C2's execve, or a failed step). Returns
 * C1's pid, or -1 with errno. */
static pid_t exec_clone_c1(struct lb_sandbox *sb, struct exec_run *x)
{
	struct exec_plan *p = &x->p;
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	/* We sleep from the clone until C2's execve: C1 and C2 are best run on this CPU, whose caches hold the
	 * memory they borrow, rather than wherever fork balancing would place them. */
	int cpu = sched_getcpu();
	if (cpu >= 0 && sched_getaffinity(0, sizeof(p->cpus), &p->cpus) == 0) {
		cpu_set_t one;
		CPU_ZERO(&one);
		CPU_SET((size_t)cpu, &one);
		p->pinned = sched_setaffinity(0, sizeof(one), &one) == 0;
	}
	struct clone_args ca;
	memset(&ca, 0, sizeof(ca));
	/* CLONE_CLEAR_SIGHAND: C1 (and C2, its copy) start with every handled signal back to default, so none of the
	 * caller's handlers can run on the memory they borrow. */
	ca.flags = CLONE_VM | CLONE_VFORK | CLONE_CLEAR_SIGHAND;
	ca.exit_signal = SIGCHLD;
	ca.stack = (uint64_t)(uintptr_t)x->c1_stack_base;
	ca.stack_size = CHILD_STACK;
	int leaf_fd = lb_cg_open_leaf_dir(sb->cg, LB_CG_RUN);
	if (leaf_fd >= 0) {
		ca.flags |= CLONE_INTO_CGROUP;
		ca.cgroup = (uint64_t)(unsigned)leaf_fd;
	}
	pid_t c1 = lb_clone3_run(&ca, c1_main, p);
	int e = errno;
	if (p->pinned)
		sched_setaffinity(0, sizeof(p->cpus), &p->cpus);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (leaf_fd >= 0)
		close(leaf_fd);
	errno = e;
	return c1;
}

/* Starts the program: empties the `run` leaf of a previous run, takes the counters, clones C1 (which starts C2),
 * then reads every report once both are past their setup. On success x->c2 is the running program, watched through
 * x->c2_pidfd. */
static int exec_start(struct lb_sandbox *sb, struct exec_run *x, struct lb_error *err)
{
	/* The leaf may still hold processes of a previous run that was not reaped (a crash mid-exec). */
	int r;
	if ((r = lb_cg_kill(sb->cg, LB_CG_RUN, err)) < 0 && r != -ENOENT)
		return r;
	lb_cg_begin_run(sb->cg, &x->before);
	x->t0 = now_ms();

	pid_t c1 = exec_clone_c1(sb, x);
	if (c1 < 0)
		return lb_error_set(err, errno, "exec: clone3");
	while (waitpid(c1, NULL, 0) < 0 && errno == EINTR)
		;
	close(x->out[1]);
	x->out[1] = -1;
	close(x->errp[1]);
	x->errp[1] = -1;
	close(x->rep[1]);
	x->rep[1] = -1;
	for (size_t i = 0; i < x->p.n_cg; i++)
		close(x->p.cg_fds[i]);
	x->p.n_cg = 0;

	/* C1 is gone and C2 has exec'd or exited (the pipe is CLOEXEC): every report is in the pipe. */
	struct lb_child_report msg;
	int failed_err = 0;
	char failed_step[sizeof(msg.step)] = "";
	int passed;
	while (read_report(x->rep[0], &msg, &passed)) {
		msg.step[sizeof(msg.step) - 1] = '\0';
		if (msg.kind == 'L' && passed >= 0 && x->listener < 0) {
			x->listener = passed;
			passed = -1;
		}
		if (passed >= 0)
			close(passed);
		if (msg.kind == 'P' && msg.status > 0) {
			x->c2 = msg.status;
		} else if (msg.kind == 'E' && failed_err == 0) {
			failed_err = msg.err ? msg.err : EIO;
			memcpy(failed_step, msg.step, sizeof(failed_step));
		}
	}
	if (failed_err)
		return lb_error_set(err, failed_err, "running the program: %s", failed_step);
	if (x->c2 <= 0)
		return lb_error_setx(err, EIO, "running the program: the setup process ended without starting it");
	lb_refusals_started(&x->rf, x->c2, x->listener);
	x->listener = -1; /* rf owns it */
	/* Our unreaped child: its pid cannot be reused before we wait for it. */
	x->c2_pidfd = (int)syscall(SYS_pidfd_open, x->c2, 0u);
	if (x->c2_pidfd < 0)
		return lb_error_set(err, errno, "exec: pidfd_open");
	fcntl(x->out[0], F_SETFL, O_NONBLOCK);
	fcntl(x->errp[0], F_SETFL, O_NONBLOCK);
	return 0;
}

/* The output and notification loop: captures stdout and stderr, answers the counting filter's notifications, and
 * once the program has ended, the deadline passed or spec->hangup_fd hung up, kills everything left in the `run`
 * leaf, then drains the pipes. Returns once nothing of the run is left alive (or that could not be made sure: an
 * error, no result). */
static int exec_wait(struct lb_sandbox *sb, const struct lb_exec_spec *spec, struct exec_run *x, struct lb_error *err)
{
	bool main_done = false, killed = false;
	uint64_t deadline = spec->timeout_ms ? x->t0 + spec->timeout_ms : 0, drain_deadline = 0;
	int kill_r = 0;
	struct lb_error kill_err;
	lb_error_clear(&kill_err);
	for (;;) {
		uint64_t now = now_ms();
		if (!killed && (main_done || x->hung_up || (deadline && now >= deadline))) {
			if (!main_done && !x->hung_up)
				x->timed_out = true;
			/* The main program is gone (or out of time): everything left in the run leaf dies before the
			 * result, whether or not it holds our pipes (a daemon that closed them is no less alive), so
			 * none outlives the run and none can delay the result. */
			kill_r = lb_cg_kill(sb->cg, LB_CG_RUN, &kill_err);
			killed = true;
			drain_deadline = now_ms() + DRAIN_AFTER_KILL_MS;
			continue;
		}
		if (main_done && x->out[0] < 0 && x->errp[0] < 0)
			break;
		if (killed && now >= drain_deadline) {
			if (main_done)
				break;	      /* a writer outside the leaf cannot exist; never hang on it anyway */
			kill(x->c2, SIGKILL); /* our unreaped child: the pid is still C2's */
			drain_deadline = now + DRAIN_AFTER_KILL_MS;
		}
		struct pollfd pf[6];
		nfds_t n = 0;
		pf[n++] = (struct pollfd){ .fd = main_done ? -1 : x->c2_pidfd, .events = POLLIN };
		pf[n++] = (struct pollfd){ .fd = x->out[0], .events = POLLIN };
		pf[n++] = (struct pollfd){ .fd = x->errp[0], .events = POLLIN };
		/* events 0: only a hang-up (POLLHUP, POLLERR) is reported, never data the far end may send. */
		pf[n++] = (struct pollfd){ .fd = spec->hangup_fd > 0 && !killed ? spec->hangup_fd : -1, .events = 0 };
		n += lb_refusals_pollfds(&x->rf, &pf[n]);
		int wait = -1;
		uint64_t until = killed ? drain_deadline : deadline;
		if (until)
			wait = until > now ? (int)(until - now) : 0;
		int pr = poll(pf, n, wait);
		if (pr < 0 && errno != EINTR)
			return lb_error_set(err, errno, "exec: poll");
		if (pr <= 0)
			continue;
		if (pf[1].revents)
			read_into(&x->out[0], &x->cap_out);
		if (pf[2].revents)
			read_into(&x->errp[0], &x->cap_err);
		if (pf[3].revents & (POLLHUP | POLLERR | POLLNVAL))
			x->hung_up = true;
		lb_refusals_serve(&x->rf, &pf[4], n - 4);
		if (!main_done && pf[0].revents) {
			int w;
			while ((w = waitid((idtype_t)P_PIDFD, (id_t)x->c2_pidfd, &x->status, WEXITED)) < 0 &&
			       errno == EINTR)
				;
			x->have_status = w == 0;
			main_done = true;
			x->c2 = -1;
		}
	}
	if (kill_r < 0 && kill_r != -ENOENT)
		/* Something of the run may still be alive: no result. The caller stops the sandbox (or retries the
		 * kill with the next run, which refuses to start while the leaf is not empty). */
		return lb_error_set(err, kill_r, "exec: killing what the program left: %s", kill_err.msg);
	return 0;
}

/* The result: status, time, the cgroup's counters against the run's start, refusals, and the captured output,
 * which *ret takes over. */
static int exec_result(struct lb_sandbox *sb, struct exec_run *x, struct lb_exec_result *ret, struct lb_error *err)
{
	uint64_t t1 = now_ms();
	struct lb_cg_stats after;
	lb_cg_read_stats(sb->cg, &after);

	memset(ret, 0, sizeof(*ret));
	if (x->have_status && x->status.si_code == CLD_EXITED) {
		ret->exit_code = x->status.si_status;
	} else {
		ret->exit_code = -1;
		ret->signal = x->have_status ? x->status.si_status : SIGKILL;
	}
	ret->timed_out = x->timed_out;
	ret->hung_up = x->hung_up;
	ret->wall_ms = t1 - x->t0;
	ret->cpu_ms =
	    after.cpu_usage_ns > x->before.cpu_usage_ns ? (after.cpu_usage_ns - x->before.cpu_usage_ns) / 1000000 : 0;
	ret->oom_killed = after.oom_kills > x->before.oom_kills;
	ret->pids_limited = after.pids_max > x->before.pids_max;
	ret->peak_memory_bytes = after.peak_bytes;
	lb_refusals_end(&x->rf, ret->exit_code != 0 || ret->signal != 0, &ret->refused);
	ret->stdout_total = x->cap_out.total;
	ret->stderr_total = x->cap_err.total;
	ret->stdout_buf = lb_capture_take(&x->cap_out, &ret->stdout_len);
	ret->stderr_buf = lb_capture_take(&x->cap_err, &ret->stderr_len);
	if (!ret->stdout_buf || !ret->stderr_buf) {
		lb_exec_result_free(ret);
		return lb_error_set(err, ENOMEM, "exec: output");
	}
	return 0;
}

/* The run's one unwind path: whatever is still held, whichever step ended it. */
static void exec_run_release(struct lb_sandbox *sb, struct exec_run *x)
{
	if (x->c2 > 0) {
		/* A half-finished run: kill the program and whatever joined the leaf. */
		kill(x->c2, SIGKILL);
		waitpid(x->c2, NULL, 0);
		struct lb_error kerr;
		lb_cg_kill(sb->cg, LB_CG_RUN, &kerr);
	}
	if (x->c2_pidfd >= 0)
		close(x->c2_pidfd);
	if (x->listener >= 0)
		close(x->listener);
	struct lb_refusals unused;
	lb_refusals_end(&x->rf, false, &unused); /* idempotent: releases what a failed run still holds */
	if (x->stacks)
		munmap(x->stacks, x->stacks_len);
	for (size_t i = 0; i < x->p.n_cg; i++)
		close(x->p.cg_fds[i]);
	close_pair(x->out);
	close_pair(x->errp);
	close_pair(x->rep);
	lb_capture_free(&x->cap_out);
	lb_capture_free(&x->cap_err);
	strv_free(x->p.argv);
	strv_free(x->p.envp);
	strv_free(x->p.candidates);
}

int lb_sandbox_exec(struct lb_sandbox *sb, const struct lb_exec_spec *spec, struct lb_exec_result *ret,
		    struct lb_error *err)
{
	if (!sb || !spec || !spec->argv || !spec->argv[0] || !spec->argv[0][0])
		return lb_error_setx(err, EINVAL, "exec: empty argv");
	size_t argc = 0;
	while (spec->argv[argc])
		if (++argc > MAX_ARGS)
			return lb_error_setx(err, E2BIG, "exec: more than %d arguments", MAX_ARGS);
	const char *cwd = spec->cwd ? spec->cwd : "/sandbox";
	if (cwd[0] != '/')
		return lb_error_setx(err, EINVAL, "exec: cwd must be absolute");
	if (!sb->policy->seccomp.filter || sb->policy->seccomp.len == 0)
		return lb_error_setx(err, EINVAL, "exec: the policy has no compiled seccomp filter");

	struct exec_run x;
	memset(&x, 0, sizeof(x));
	x.p.cwd = cwd;
	x.p.landlock_fd = sb->landlock_fd;
	x.p.sandbox_cpus = &sb->cpus;
	x.p.seccomp = &sb->policy->seccomp;
	x.p.init_pidfd = sb->init_pidfd;
	x.p.uid = sb->uid;
	x.p.gid = sb->gid;
	x.out[0] = x.out[1] = x.errp[0] = x.errp[1] = x.rep[0] = x.rep[1] = -1;
	x.c2_pidfd = x.listener = -1;
	x.c2 = -1;
	lb_refusals_begin(&x.rf, sb, &x.p.seccomp_notify, &x.p.landlock_flags);
	x.stacks = NULL;

	int r = exec_prepare(sb, spec, argc, &x, err);
	if (r == 0)
		r = exec_start(sb, &x, err);
	if (r == 0)
		r = exec_wait(sb, spec, &x, err);
	if (r == 0)
		r = exec_result(sb, &x, ret, err);
	exec_run_release(sb, &x);
	return r;
}

void lb_exec_result_free(struct lb_exec_result *r)
{
	if (!r)
		return;
	free(r->stdout_buf);
	free(r->stderr_buf);
	r->stdout_buf = r->stderr_buf = NULL;
}

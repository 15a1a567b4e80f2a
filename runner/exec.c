/*
 * exec.c — running one program in a started sandbox, with every layer in place before its first instruction.
 *
 * Runs in the caller (root, possibly many threads). Everything is prepared before fork(): argv, the PATH
 * candidates, the clean environment, the cgroup.procs fds of the `run` leaf, the output pipes; the Landlock ruleset
 * was built at start and the seccomp BPF is the policy's. Then:
 *
 *   caller ──fork──> C1 (host root, host pid ns): setgroups(0), joins the `run` leaf in every hierarchy,
 *                    setns(init's pidfd, user|mnt|pid|ipc|uts|net|cgroup), clone
 *                      └──> C2 (pid-ns member): setsid, default signals, stdin /dev/null, stdout/stderr to the
 *                           pipes, bounding set empty, securebits locked, setresgid/setresuid(sandbox ids), every
 *                           capability set empty, RLIMIT_CORE 0, chdir, no_new_privs, Landlock, every other fd
 *                           closed, seccomp last, execve.
 *                    C1 waits for C2 and reports its wait status, then exits.
 *
 * A failed step in C1 or C2 is reported through a CLOEXEC pipe with its name and errno, and nothing runs. The
 * caller polls C1's pidfd, both output pipes and the deadline; when C1 is gone (the main program ended) or the
 * deadline passes it kills the whole `run` leaf, so daemons the program left and children holding the pipes die
 * and the result arrives. Output is captured with bounded memory (output.c).
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
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef CLONE_INTO_CGROUP
#define CLONE_INTO_CGROUP 0x200000000ULL /* Linux 5.7 */
#endif
#ifndef CLONE_NEWCGROUP
#define CLONE_NEWCGROUP 0x02000000
#endif

#define MAX_ARGS	    4096
#define MAX_ENV		    512
#define MAX_ENV_BYTES	    (256u << 10)
#define MAX_CANDIDATES	    64
#define DRAIN_AFTER_KILL_MS 2000

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
	int init_pidfd;
	uint32_t uid, gid;
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

/* C2: runs in the sandbox's namespaces as a member of its pid namespace, still with the user namespace's
 * capabilities; drops everything and execs. Raw syscalls only. */
static _Noreturn void c2_main(const struct exec_plan *p)
{
	int rep = p->report_w;
	if (setsid() < 0)
		fail_child(rep, "setsid", errno);
	/* The caller's signal mask and ignored signals must not leak into the program (SIG_IGN survives execve). */
	sigset_t none;
	sigemptyset(&none);
	syscall(SYS_rt_sigprocmask, SIG_SETMASK, &none, NULL, _NSIG / 8);
	for (int sig = 1; sig < _NSIG; sig++) {
		if (sig == SIGKILL || sig == SIGSTOP)
			continue;
		struct sigaction sa;
		memset(&sa, 0, sizeof(sa));
		sa.sa_handler = SIG_DFL;
		(void)sigaction(sig, &sa, NULL);
	}
	int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (devnull < 0)
		fail_child(rep, "opening /dev/null for stdin", errno);
	if (dup2(devnull, 0) < 0 || dup2(p->out_w, 1) < 0 || dup2(p->err_w, 2) < 0)
		fail_child(rep, "setting up stdio", errno);

	for (int cap = 0; cap < 64; cap++)
		if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno != EINVAL)
			fail_child(rep, "dropping the bounding set", errno);
	/* Locked: no uid transition or file capability can ever give capabilities back. */
	unsigned long bits = SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
			     SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED | SECBIT_NO_CAP_AMBIENT_RAISE |
			     SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
	if (prctl(PR_SET_SECUREBITS, bits, 0, 0, 0) < 0)
		fail_child(rep, "locking securebits", errno);
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
	if (p->landlock_fd >= 0 && syscall(SYS_landlock_restrict_self, p->landlock_fd, 0) < 0)
		fail_child(rep, "landlock_restrict_self", errno);
	/* Only 0, 1, 2 and the report pipe (CLOEXEC) survive: nothing of the caller leaks (runc CVE-2024-21626). */
	if (rep > 3)
		syscall(SYS_close_range, 3u, (unsigned)rep - 1, 0u);
	if (syscall(SYS_close_range, (unsigned)rep + 1, ~0u, 0u) < 0)
		fail_child(rep, "closing inherited descriptors", errno);
	if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, p->seccomp) < 0)
		fail_child(rep, "seccomp", errno);
	int first = 0;
	for (char **c = p->candidates; *c; c++) {
		execve(*c, p->argv, p->envp);
		if (errno != ENOENT && errno != ENOTDIR && first == 0)
			first = errno;
	}
	fail_child(rep, "execve", first ? first : ENOENT);
}

/* C1: host root in the host's pid namespace; joins the run leaf and the sandbox's namespaces, starts C2. */
static _Noreturn void c1_main(const struct exec_plan *p)
{
	int rep = p->report_w;
	/* We are a copy of the caller: drop every descriptor it had except the ones this run needs, before we
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
	/* Sandboxed programs are the first thing the OOM killer should take, on the host as in their cgroup. */
	int oom = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
	if (oom < 0 || write(oom, "1000", 4) != 4)
		fail_child(rep, "setting oom_score_adj", errno);
	close(oom);
	/* No supplementary groups of the caller may follow us (setgroups is denied inside the sandbox). */
	if (syscall(SYS_setgroups, 0, NULL) < 0)
		fail_child(rep, "setgroups", errno);
	/* v1: "0" into each hierarchy's `tasks` moves this (single) thread, i.e. the whole of C1. */
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
	pid_t pid = (pid_t)syscall(SYS_clone, (unsigned long)SIGCHLD, 0UL, NULL, NULL, 0UL);
	if (pid < 0)
		fail_child(rep, "clone into the sandbox's pid namespace", errno);
	if (pid == 0)
		c2_main(p);
	/* Only C2 and its descendants hold the write ends now: the caller sees EOF when they are gone. */
	close(p->out_w);
	close(p->err_w);
	int status;
	while (waitpid(pid, &status, __WALL) < 0)
		if (errno != EINTR)
			fail_child(rep, "waiting for the program", errno);
	lb_child_report(rep, 'S', 0, status, NULL);
	_exit(0);
}

/* Pipes must not sit on 0..2 (a caller with closed stdio) or dup2() in C2 would clobber them. */
static int pipe_high(int fds[2])
{
	if (pipe2(fds, O_CLOEXEC) < 0)
		return -errno;
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

	struct exec_plan p;
	memset(&p, 0, sizeof(p));
	p.cwd = cwd;
	p.landlock_fd = sb->landlock_fd;
	p.seccomp = &sb->policy->seccomp;
	p.init_pidfd = sb->init_pidfd;
	p.uid = sb->uid;
	p.gid = sb->gid;
	int out[2] = { -1, -1 }, errp[2] = { -1, -1 }, rep[2] = { -1, -1 };
	struct lb_capture cap_out, cap_err;
	memset(&cap_out, 0, sizeof(cap_out));
	memset(&cap_err, 0, sizeof(cap_err));
	int c1_pidfd = -1;
	pid_t c1 = -1;
	int r;

	p.argv = calloc(argc + 1, sizeof(char *));
	if (!p.argv) {
		r = lb_error_set(err, ENOMEM, "exec: copying argv");
		goto out;
	}
	for (size_t i = 0; i < argc; i++)
		if (!(p.argv[i] = strdup(spec->argv[i]))) {
			r = lb_error_set(err, ENOMEM, "exec: copying argv");
			goto out;
		}
	if ((r = build_env(sb, spec->env, &p.envp, err)) < 0)
		goto out;
	if ((r = build_candidates(p.argv[0], p.envp, &p.candidates, err)) < 0)
		goto out;
	if (sb->cg->version == LB_CGROUP_V1 && (r = lb_cg_open_join(sb->cg, LB_CG_RUN, p.cg_fds, &p.n_cg, err)) < 0)
		goto out;
	if ((r = lb_capture_init(&cap_out, LB_CAPTURE_HEAD, spec->stdout_limit)) < 0 ||
	    (r = lb_capture_init(&cap_err, LB_CAPTURE_TAIL, spec->stderr_limit)) < 0) {
		r = lb_error_set(err, r, "exec: allocating output buffers");
		goto out;
	}
	if ((r = pipe_high(out)) < 0 || (r = pipe_high(errp)) < 0 || (r = pipe_high(rep)) < 0) {
		r = lb_error_set(err, r, "exec: creating pipes");
		goto out;
	}
	p.out_w = out[1];
	p.err_w = errp[1];
	p.report_w = rep[1];

	/* The leaf may still hold processes of a previous run that was not reaped (a crash mid-exec). */
	if ((r = lb_cg_kill(sb->cg, LB_CG_RUN, err)) < 0 && r != -ENOENT)
		goto out;
	struct lb_cg_stats before, after;
	lb_cg_begin_run(sb->cg, &before);
	uint64_t t0 = now_ms();

	/* clone3 without a stack behaves like fork() (C1 uses raw syscalls only); the pidfd comes with it. On v2 C1
	 * is born in the `run` leaf; on v1 it joins it by writing cgroup.procs. */
	struct clone_args ca;
	memset(&ca, 0, sizeof(ca));
	ca.flags = CLONE_PIDFD;
	ca.pidfd = (uint64_t)(uintptr_t)&c1_pidfd;
	ca.exit_signal = SIGCHLD;
	int leaf_fd = lb_cg_open_leaf_dir(sb->cg, LB_CG_RUN);
	if (leaf_fd >= 0) {
		ca.flags |= CLONE_INTO_CGROUP;
		ca.cgroup = (uint64_t)(unsigned)leaf_fd;
	}
	c1 = (pid_t)syscall(SYS_clone3, &ca, sizeof(ca));
	if (c1 == 0)
		c1_main(&p);
	int e = errno;
	if (leaf_fd >= 0)
		close(leaf_fd);
	if (c1 < 0) {
		r = lb_error_set(err, e, "exec: clone3");
		goto out;
	}
	close(out[1]);
	out[1] = -1;
	close(errp[1]);
	errp[1] = -1;
	close(rep[1]);
	rep[1] = -1;
	for (size_t i = 0; i < p.n_cg; i++)
		close(p.cg_fds[i]);
	p.n_cg = 0;
	fcntl(out[0], F_SETFL, O_NONBLOCK);
	fcntl(errp[0], F_SETFL, O_NONBLOCK);
	fcntl(rep[0], F_SETFL, O_NONBLOCK);

	bool c1_done = false, timed_out = false, killed = false;
	uint64_t deadline = spec->timeout_ms ? t0 + spec->timeout_ms : 0, drain_deadline = 0;
	int c1_status = 0;
	for (;;) {
		if (c1_done && out[0] < 0 && errp[0] < 0)
			break;
		uint64_t now = now_ms();
		if (!killed && (c1_done || (deadline && now >= deadline))) {
			if (!c1_done)
				timed_out = true;
			/* The main program is gone (or out of time): everything left in the run leaf dies, so
			 * daemons and children holding our pipes cannot delay the result. */
			struct lb_error kerr;
			lb_cg_kill(sb->cg, LB_CG_RUN, &kerr);
			killed = true;
			drain_deadline = now_ms() + DRAIN_AFTER_KILL_MS;
			continue;
		}
		if (killed && now >= drain_deadline) {
			if (c1_done)
				break;	   /* a writer outside the leaf cannot exist; never hang on it anyway */
			kill(c1, SIGKILL); /* our unreaped child: the pid is still C1's */
			drain_deadline = now + DRAIN_AFTER_KILL_MS;
		}
		struct pollfd pf[3];
		nfds_t n = 0;
		pf[n++] = (struct pollfd){ .fd = c1_done ? -1 : c1_pidfd, .events = POLLIN };
		pf[n++] = (struct pollfd){ .fd = out[0], .events = POLLIN };
		pf[n++] = (struct pollfd){ .fd = errp[0], .events = POLLIN };
		int wait = -1;
		uint64_t until = killed ? drain_deadline : deadline;
		if (until)
			wait = until > now ? (int)(until - now) : 0;
		int pr = poll(pf, n, wait);
		if (pr < 0 && errno != EINTR) {
			r = lb_error_set(err, errno, "exec: poll");
			goto out;
		}
		if (pr <= 0)
			continue;
		if (pf[1].revents)
			read_into(&out[0], &cap_out);
		if (pf[2].revents)
			read_into(&errp[0], &cap_err);
		if (!c1_done && pf[0].revents) {
			siginfo_t si;
			memset(&si, 0, sizeof(si));
			while (waitid((idtype_t)P_PIDFD, (id_t)c1_pidfd, &si, WEXITED) < 0 && errno == EINTR)
				;
			c1_done = true;
			c1 = -1;
		}
	}
	uint64_t t1 = now_ms();
	lb_cg_read_stats(sb->cg, &after);

	/* What C1 and C2 reported: a failed step, or the program's wait status. */
	bool have_status = false;
	struct lb_child_report msg;
	while (read(rep[0], &msg, sizeof(msg)) == (ssize_t)sizeof(msg)) {
		msg.step[sizeof(msg.step) - 1] = '\0';
		if (msg.kind == 'E') {
			r = lb_error_set(err, msg.err, "running the program: %s", msg.step);
			goto out;
		}
		if (msg.kind == 'S') {
			c1_status = msg.status;
			have_status = true;
		}
	}
	memset(ret, 0, sizeof(*ret));
	if (have_status && WIFEXITED(c1_status)) {
		ret->exit_code = WEXITSTATUS(c1_status);
	} else {
		ret->exit_code = -1;
		ret->signal = have_status && WIFSIGNALED(c1_status) ? WTERMSIG(c1_status) : SIGKILL;
	}
	ret->timed_out = timed_out;
	ret->wall_ms = t1 - t0;
	ret->cpu_ms =
	    after.cpu_usage_ns > before.cpu_usage_ns ? (after.cpu_usage_ns - before.cpu_usage_ns) / 1000000 : 0;
	ret->oom_killed = after.oom_kills > before.oom_kills;
	ret->pids_limited = after.pids_max > before.pids_max;
	ret->peak_memory_bytes = after.peak_bytes;
	ret->stdout_total = cap_out.total;
	ret->stderr_total = cap_err.total;
	ret->stdout_buf = lb_capture_take(&cap_out, &ret->stdout_len);
	ret->stderr_buf = lb_capture_take(&cap_err, &ret->stderr_len);
	if (!ret->stdout_buf || !ret->stderr_buf) {
		lb_exec_result_free(ret);
		r = lb_error_set(err, ENOMEM, "exec: output");
		goto out;
	}
	r = 0;

out:
	if (c1 > 0) {
		/* A half-started run: kill C1 and whatever joined the leaf. */
		kill(c1, SIGKILL);
		waitpid(c1, NULL, 0);
		struct lb_error kerr;
		lb_cg_kill(sb->cg, LB_CG_RUN, &kerr);
	}
	if (c1_pidfd >= 0)
		close(c1_pidfd);
	for (size_t i = 0; i < p.n_cg; i++)
		close(p.cg_fds[i]);
	close_pair(out);
	close_pair(errp);
	close_pair(rep);
	lb_capture_free(&cap_out);
	lb_capture_free(&cap_err);
	strv_free(p.argv);
	strv_free(p.envp);
	strv_free(p.candidates);
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

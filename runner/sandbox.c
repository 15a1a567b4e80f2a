/*
 * sandbox.c — a sandbox's life: start (cgroup, disk, root, namespaces, init), stop, crash cleanup.
 *
 * Runs in the caller (lensboxd, many threads, or lensbox-runner; root). lb_sandbox_start() reads top to bottom in
 * the order things happen:
 *   1. the cgroup (limits on <name>, leaves `init` and `run`),
 *   2. the storage's lock (one ext4 image is never mounted twice),
 *   3. the pipes, lensbox-init's memfd and the root's plan (shared memory the child reads once released),
 *   4. clone3() into new user, pid, ipc and uts namespaces (the child joins the `init` leaf, v2: is born in it),
 *      on the caller's memory from a thread that sleeps until the child execs (spawn.c: no copy of lensboxd's
 *      ~320 mappings to make and tear down); the parent maps uid/gid 1000 to the sandbox's host uid/gid only
 *      (setgroups denied),
 *   5. while the child makes its own network namespace and brings up lo (the costliest namespace to create), the
 *      parent mounts the storage and prepares the root's skeleton (rootfs.c), then releases the child,
 *   6. the child enters new mount and cgroup namespaces (its mount namespace is a copy of the host's as it is
 *      now, with the storage and the skeleton mounted), builds its root (rootfs.c), drops every capability and
 *      privilege, and execs lensbox-init (init/, from a sealed memfd): pid 1 reaps orphans forever, holding no fd
 *      and no copy of the caller's memory,
 *   7. the parent builds the Landlock ruleset against the sandbox's paths (landlock.c).
 * Any failure undoes what was done, in reverse, and names the step. exec.c runs programs in a started sandbox.
 *
 * The init child shares the memory of a possibly multithreaded process until its execveat: it reads only prepared
 * data, writes only its stack and errno (the sleeping thread's TLS), and makes only system calls (spawn.c).
 */
/* Paths built here come from bounded parts (names <= 63 bytes, mount points, run_dir checked by the caller);
 * a path cut at PATH_MAX only fails to open. */
#pragma GCC diagnostic ignored "-Wformat-truncation"

#include "internal.h"

#include "lb/name.h"
#include "lb/cleanup.h"
#include "lb/fileio.h"

#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/close_range.h>
#include <linux/sched.h>
#include <net/if.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* Linux 5.7; the uapi headers here have it, older ones may not. */
#ifndef CLONE_INTO_CGROUP
#define CLONE_INTO_CGROUP 0x200000000ULL
#endif
#ifndef CLONE_NEWCGROUP
#define CLONE_NEWCGROUP 0x02000000
#endif

int lb_state_paths(const char *run_dir, const char *name, char *state_dir, char *storage_mnt, char *root_mnt)
{
	if ((size_t)snprintf(state_dir, PATH_MAX, "%s/sandboxes/%s", run_dir, name) >= PATH_MAX ||
	    (size_t)snprintf(storage_mnt, PATH_MAX, "%s/mnt/%s", run_dir, name) >= PATH_MAX ||
	    (size_t)snprintf(root_mnt, PATH_MAX, "%s/sandboxes/%s/root", run_dir, name) >= PATH_MAX)
		return -ENAMETOOLONG;
	return 0;
}

void lb_child_report(int fd, int kind, int err, int status, const char *step)
{
	struct lb_child_report rep;
	memset(&rep, 0, sizeof(rep));
	rep.kind = kind;
	rep.err = err;
	rep.status = status;
	if (step) {
		size_t n = strlen(step);
		if (n >= sizeof(rep.step))
			n = sizeof(rep.step) - 1;
		memcpy(rep.step, step, n);
	}
	ssize_t w;
	do
		w = write(fd, &rep, sizeof(rep));
	while (w < 0 && errno == EINTR);
}

/* Everything the init child needs, prepared before clone3() (it lives in struct start until the child has exec'd).
 */
struct init_args {
	const struct lb_rootfs_plan
	    *plan;	/* shared memory, written by the parent after the clone, read once released */
	int release_fd; /* our end of a socketpair: one byte when the parent has mapped ids, the storage and the root */
	int release_peer; /* the parent's end, which our copy must not keep open (its close is how we see it die) */
	int report_fd;	  /* write end, CLOEXEC */
	int init_fd;	  /* sealed memfd of lensbox-init, CLOEXEC */
	int cg_fds[LB_CG_MAX_DIRS]; /* v1: the `init` leaf's tasks files, to join by writing "0" */
	size_t n_cg;
	char report_fd_arg[16];
	uint32_t uid, gid;
	bool netns_ready;  /* we were born in a network namespace made ahead (lb_netns_make): we make none */
	bool restore_cpus; /* we were born away from the starting thread's CPU: cpus is the affinity to take back */
	cpu_set_t cpus;
};

/* Drops to uid/gid with nothing: bounding set emptied, then setresuid() from 0 clears permitted, effective and
 * ambient (no keep-caps), then no_new_privs and non-dumpable. */
static int drop_everything(uint32_t uid, uint32_t gid, const char **step)
{
	/* Capabilities are numbered 0..CAP_LAST_CAP without gaps: the first EINVAL is past the last one. */
	for (int cap = 0; cap < 64; cap++)
		if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0) {
			if (errno == EINVAL)
				break;
			*step = "dropping the bounding set";
			return -errno;
		}
	if (syscall(SYS_setresgid, gid, gid, gid) < 0) {
		*step = "setresgid";
		return -errno;
	}
	if (syscall(SYS_setresuid, uid, uid, uid) < 0) {
		*step = "setresuid";
		return -errno;
	}
	struct __user_cap_header_struct hdr = { _LINUX_CAPABILITY_VERSION_3, 0 };
	struct __user_cap_data_struct data[2];
	memset(data, 0, sizeof(data));
	if (syscall(SYS_capset, &hdr, data) < 0) {
		*step = "clearing capabilities";
		return -errno;
	}
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0) {
		*step = "clearing ambient capabilities";
		return -errno;
	}
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) {
		*step = "no_new_privs";
		return -errno;
	}
	/* Non-dumpable: programs of the sandbox (same uid) cannot ptrace it or open its /proc files. */
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0) {
		*step = "dumpable";
		return -errno;
	}
	return 0;
}

LB_BORROWED_STACK static _Noreturn void init_main(const struct init_args *a)
{
	/* Until released, the parent's end is ours to watch: if the caller (lensboxd) dies, the kernel kills us
	 * (the parent-death signal: the thread that cloned us sleeps until our execveat), and the release read sees the
	 * socket close (we keep no copy of its end). Else this half-made init would outlive it, holding its
	 * descriptors. */
	prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
	/* We run on the caller's memory until our execveat (spawn.c): non-dumpable before our ids are mapped (the
	 * parent maps them once we say we run, below), so that only a holder of CAP_SYS_PTRACE on the host could ever
	 * trace us or open our /proc files. The flag is the shared memory's: lensboxd's, as every run's C2 already
	 * leaves it (exec.c). */
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0) {
		lb_child_report(a->report_fd, 'E', errno, 0, "dumpable");
		_exit(1);
	}
	close(a->release_peer);
	/* We run: the kernel wrote our pid and pidfd into the caller's memory before we did. */
	if (send(a->release_fd, "S", 1, MSG_NOSIGNAL) != 1)
		_exit(1);
	/* v1: join the `init` leaf first, in parallel with the parent writing our id maps. */
	for (size_t i = 0; i < a->n_cg; i++) {
		if (write(a->cg_fds[i], "0", 1) != 1) {
			lb_child_report(a->report_fd, 'E', errno, 0, "joining the init cgroup");
			_exit(1);
		}
		close(a->cg_fds[i]);
	}
	/* Our own network namespace (owned by our user namespace) with lo up, made while the parent mounts the storage
	 * and builds the skeleton; none when we were born in one made ahead. Nothing of the host's network is
	 * reachable from it: it has only lo. */
	const char *step = NULL;
	int r = 0;
	if (!a->netns_ready) {
		if (unshare(CLONE_NEWNET) < 0) {
			r = -errno;
			step = "creating the network namespace";
		}
		if (r == 0)
			r = lb_netns_setup(&step);
	}
	if (r < 0) {
		lb_child_report(a->report_fd, 'E', -r, 0, step);
		_exit(1);
	}
	char byte;
	ssize_t n;
	do
		n = read(a->release_fd, &byte, 1);
	while (n < 0 && errno == EINTR);
	if (n != 1)
		_exit(1); /* the parent gave up */
	/* Released: from here we outlive the thread that made us (the sandbox is long-lived). Our share of the start
	 * done beside the parent's is over: every CPU it may use is ours again (a failure only leaves us fewer). */
	prctl(PR_SET_PDEATHSIG, 0, 0, 0, 0);
	if (a->restore_cpus)
		(void)sched_setaffinity(0, sizeof(a->cpus), &a->cpus);
	/* Our mount namespace is a copy of the host's as it is now (the storage and the skeleton mounted), owned by our
	 * user namespace, so every mount copied from the host is locked; rootfs.c makes them private and detaches them.
	 * Our cgroup namespace is rooted at the sandbox's `init` leaf: the host's hierarchy stays invisible. */
	if (unshare(CLONE_NEWNS | CLONE_NEWCGROUP) < 0) {
		r = -errno;
		step = "unsharing the mount and cgroup namespaces";
	}
	/* Once our mounts are private, our copy of the skeleton's mount (locked nosuid,nodev, being a copy made for a
	 * less privileged namespace) no longer follows the host's: the parent may take that away while we build. */
	if (r == 0)
		r = lb_rootfs_make_private(&step);
	if (r == 0)
		lb_child_report(a->report_fd, 'N', 0, 0, NULL);
	if (r == 0)
		r = lb_rootfs_enter(a->plan, &step);
	/* Our root is final: the parent builds the Landlock ruleset from it while we drop everything and exec. */
	if (r == 0)
		lb_child_report(a->report_fd, 'T', 0, 0, NULL);
	if (r == 0)
		r = drop_everything(a->uid, a->gid, &step);
	if (r < 0) {
		lb_child_report(a->report_fd, 'E', -r, 0, step);
		_exit(1);
	}
	/* Become lensbox-init (a static binary from a sealed memfd): pid 1 keeps no copy of the caller's memory and
	 * no descriptor of it but the report pipe, which lensbox-init answers and closes. */
	int rep = a->report_fd;
	/* Everything the caller had is closed at the exec (the memfd too, once exec'd); stdio now. */
	syscall(SYS_close_range, 3u, ~0u, (unsigned)CLOSE_RANGE_CLOEXEC);
	if (rep > 2)
		syscall(SYS_close_range, 0u, 2u, 0u);
	if (fcntl(rep, F_SETFD, 0) < 0) {
		lb_child_report(rep, 'E', errno, 0, "passing the report pipe to lensbox-init");
		_exit(1);
	}
	char *const argv[] = { "lensbox-init", (char *)a->report_fd_arg, NULL };
	char *const envp[] = { NULL };
	syscall(SYS_execveat, a->init_fd, "", argv, envp, AT_EMPTY_PATH);
	lb_child_report(rep, 'E', errno, 0, "executing lensbox-init");
	_exit(1);
}

LB_BORROWED_STACK static int init_child(void *arg)
{
	init_main(arg);
}

static int write_proc(pid_t pid, const char *file, const char *text, struct lb_error *err)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, file);
	int r = lb_write_file_at(AT_FDCWD, path, text);
	if (r < 0)
		return lb_error_set(err, r, "writing %s", path);
	return 0;
}

/* Writes the child's uid_map, setgroups and gid_map. Three ids are mapped, all the sandbox's own on the host: its user
 * (1000), nobody/nogroup (65534) and root (0), so that setuid, setgid or chown to them fail with EPERM as on Linux
 * rather than EINVAL. No process of the sandbox can ever hold root's or nobody's id (no CAP_SETUID/CAP_CHOWN, nosuid
 * mounts, no_new_privs, locked securebits with NOROOT), no file outside the sandbox belongs to them, and no other
 * sandbox has them: an escaped process is still nobody else on the host. */
static int map_ids(const struct lb_sandbox *sb, pid_t pid, struct lb_error *err)
{
	char map[128];
	uint32_t s = sb->host_id_stride;
	snprintf(map, sizeof(map), "%u %u 1\n%u %u 1\n%u %u 1\n", LB_SANDBOX_ROOT_ID, sb->host_uid + 2 * s, sb->uid,
		 sb->host_uid, LB_SANDBOX_NOBODY_ID, sb->host_uid + s);
	int r = write_proc(pid, "uid_map", map, err);
	if (r < 0)
		return r;
	if ((r = write_proc(pid, "setgroups", "deny", err)) < 0)
		return r;
	snprintf(map, sizeof(map), "%u %u 1\n%u %u 1\n%u %u 1\n", LB_SANDBOX_ROOT_ID, sb->host_gid + 2 * s, sb->gid,
		 sb->host_gid, LB_SANDBOX_NOBODY_ID, sb->host_gid + s);
	return write_proc(pid, "gid_map", map, err);
}

static void sandbox_free(struct lb_sandbox *sb)
{
	if (!sb)
		return;
	if (sb->init_pidfd >= 0)
		close(sb->init_pidfd);
	if (sb->landlock_fd >= 0)
		close(sb->landlock_fd);
	if (sb->storage_lock >= 0)
		close(sb->storage_lock); /* a flusher may share it until the storage is shut down (disk.c) */
	lb_cg_free(sb->cg);
	free(sb->path_env);
	lb_seccomp_notify_free(&sb->notify);
	if (sb->image_env)
		for (char **e = sb->image_env; *e; e++)
			free(*e);
	free(sb->image_env);
	free(sb);
}

/* Kills init and its cgroup, unmounts the storage (its flush continues in the background, disk.c) and removes the
 * skeleton's mount point; a failed start also unmounts the host's skeleton (have_root: a started sandbox's went at
 * start, its copy lives only in the sandbox's mount namespace, which goes with init). While init dies on another CPU:
 * the idle `run` leaf goes, and the host's mount of the storage with the flusher's fork (our reference to the
 * detached storage keeps it alive, so init's dying mount namespace never drops its last one). The rest of the cgroups
 * needs init gone; the storage must lose its last reference in the flusher, so we drop ours (detach_finish) only
 * once init is reaped. */
static int teardown(struct lb_sandbox *sb, bool have_disk, bool have_root, struct lb_error *err)
{
	int first = 0;
	struct lb_error e2;
	/* SIGKILL to our own child through its pidfd: it cannot have been recycled. */
	if (sb->init_pidfd >= 0)
		syscall(SYS_pidfd_send_signal, sb->init_pidfd, SIGKILL, NULL, 0);
	if (have_root) {
		lb_error_clear(&e2);
		int r = lb_rootfs_remove(sb->state_dir, &e2);
		if (r < 0 && first == 0) {
			first = r;
			if (err)
				*err = e2;
		}
	} else if (sb->state_dir[0] && rmdir(sb->state_dir) < 0 && errno != ENOENT && first == 0) {
		/* The skeleton's empty mount point (its mount went at start): rmdir of an empty directory of ours. */
		first = err ? lb_error_set(err, errno, "removing %s", sb->state_dir) : -errno;
	}
	/* No run is in progress (exec reaps its whole leaf before it returns): the `run` leaf goes now too. */
	if (sb->cg)
		lb_cg_remove_idle_leaf(sb->cg, LB_CG_RUN);
	struct lb_disk_detach detach = { .mnt_fd = -1, .go = -1 };
	if (have_disk) {
		lb_error_clear(&e2);
		int r = lb_disk_detach(sb->storage_mnt, sb->storage_lock, &detach, &e2);
		if (r < 0 && first == 0) {
			first = r;
			if (err)
				*err = e2;
		}
	}
	if (sb->init_pidfd >= 0) {
		siginfo_t si;
		while (waitid((idtype_t)P_PIDFD, (id_t)sb->init_pidfd, &si, WEXITED) < 0 && errno == EINTR)
			;
	}
	if (sb->cg) {
		lb_error_clear(&e2);
		int r = lb_cg_destroy(sb->cg, &e2);
		if (r < 0 && first == 0) {
			first = r;
			if (err)
				*err = e2;
		}
	}
	lb_disk_detach_finish(&detach, sb->storage_mnt);
	return first;
}

static int copy_env(struct lb_sandbox *sb, const char *const *image_env, struct lb_error *err)
{
	size_t n = 0;
	for (const char *const *e = image_env; e && *e; e++)
		n++;
	sb->image_env = calloc(n + 1, sizeof(char *));
	if (!sb->image_env)
		return lb_error_set(err, ENOMEM, "copying the image environment");
	size_t k = 0;
	for (const char *const *e = image_env; e && *e; e++) {
		if (!strchr(*e, '='))
			continue;
		if (strncmp(*e, "PATH=", 5) == 0) {
			free(sb->path_env);
			sb->path_env = strdup(*e);
			if (!sb->path_env)
				return lb_error_set(err, ENOMEM, "copying PATH");
			continue;
		}
		if (!(sb->image_env[k++] = strdup(*e)))
			return lb_error_set(err, ENOMEM, "copying the image environment");
	}
	if (!sb->path_env && !(sb->path_env = strdup("PATH=" LB_DEFAULT_PATH)))
		return lb_error_set(err, ENOMEM, "copying PATH");
	return 0;
}

/* The new sandbox's fields from the spec: names, paths, ids, CPUs, environment, the counting seccomp variant. Only
 * memory is allocated (sandbox_free() releases it); the Landlock ABI and the image root are checked last. */
static int sandbox_fill(struct lb_sandbox *sb, const struct lb_sandbox_spec *spec, uint32_t stride,
			struct lb_error *err)
{
	snprintf(sb->name, sizeof(sb->name), "%s", spec->name);
	snprintf(sb->run_dir, sizeof(sb->run_dir), "%s", spec->run_dir);
	if ((size_t)snprintf(sb->storage, sizeof(sb->storage), "%s", spec->storage) >= sizeof(sb->storage))
		return lb_error_setx(err, ENAMETOOLONG, "storage path too long");
	sb->policy = spec->policy;
	sb->network = spec->network;
	sb->host_uid = spec->host_uid;
	sb->host_gid = spec->host_gid;
	sb->host_id_stride = stride;
	sb->uid = spec->policy->limits.sandbox_uid ? spec->policy->limits.sandbox_uid : LB_SANDBOX_ID_DEFAULT;
	sb->gid = spec->policy->limits.sandbox_gid ? spec->policy->limits.sandbox_gid : LB_SANDBOX_ID_DEFAULT;
	int r = lb_cpus_choose(spec->limits.cpu_millicores, spec->host_uid, &sb->cpus);
	if (r < 0)
		return lb_error_set(err, r, "choosing the sandbox's CPUs from this process's affinity");
	if (sb->uid == LB_SANDBOX_NOBODY_ID || sb->gid == LB_SANDBOX_NOBODY_ID)
		return lb_error_setx(err, EINVAL,
				     "the policy's sandbox_uid and sandbox_gid must not be nobody (65534)");
	if ((r = lb_state_paths(spec->run_dir, spec->name, sb->state_dir, sb->storage_mnt, sb->root_mnt)) < 0)
		return lb_error_set(err, r, "run_dir too long");
	if ((r = copy_env(sb, spec->image_env, err)) < 0)
		return r;
	/* The variant filter that lets runs count refused system calls; without it runs install the plain filter. */
	const char *why_no_notify;
	if ((r = lb_seccomp_notify_prepare(&spec->policy->seccomp, &sb->notify, &why_no_notify)) < 0 && r != -ENOTSUP)
		return lb_error_set(err, r, "preparing the seccomp filter that counts refusals");
	/* Landlock first: a kernel below the policy's minimum must fail before anything is created. */
	int kabi = lb_landlock_abi();
	const struct lb_landlock_policy *lp = &spec->policy->landlock;
	if (kabi < lp->min_abi && (kabi < lp->degraded_min_abi || lp->degraded_min_abi >= lp->min_abi))
		return lb_error_setx(err, ENOTSUP, "starting sandbox: Landlock ABI %d is below the policy's minimum %d",
				     kabi, lp->min_abi);

	/* The image root is checked before anything is made for it (rootfs.c checks it again where it is used). */
	struct stat ist;
	if (stat(spec->rootfs, &ist) < 0)
		return lb_error_set(err, errno, "image rootfs %s", spec->rootfs);
	if (!S_ISDIR(ist.st_mode))
		return lb_error_setx(err, ENOTDIR, "image rootfs %s is not a directory", spec->rootfs);
	return 0;
}

/* Step 0: the spec checked and copied into a new sandbox; nothing exists on the host yet, so a failure frees the
 * struct and nothing else. Refuses a kernel below the policy's Landlock minimum and a missing image root here,
 * before anything is created for them. */
static int sandbox_new(const struct lb_sandbox_spec *spec, struct lb_sandbox **ret, struct lb_error *err)
{
	if (!spec || !lb_sandbox_name_valid(spec->name))
		return lb_error_setx(err, EINVAL, "sandbox name must match ^[a-z0-9][a-z0-9._-]{0,62}$");
	if (!spec->rootfs || spec->rootfs[0] != '/' || !spec->storage || spec->storage[0] != '/' || !spec->run_dir ||
	    spec->run_dir[0] != '/')
		return lb_error_setx(err, EINVAL, "rootfs, storage and run_dir must be absolute paths");
	if (!spec->policy)
		return lb_error_setx(err, EINVAL, "no policy");
	/* Host uid 0 would make the sandbox's user the host's root for every file it touches. */
	if (spec->host_uid == 0 || spec->host_gid == 0 || spec->host_uid == (uid_t)-1 || spec->host_gid == (gid_t)-1)
		return lb_error_setx(err, EINVAL, "the sandbox's host uid and gid must not be 0 or -1");
	uint64_t stride = spec->host_id_stride ? spec->host_id_stride : LB_HOST_ID_STRIDE_DEFAULT;
	if ((uint64_t)spec->host_uid + 2 * stride >= (uid_t)-1 || (uint64_t)spec->host_gid + 2 * stride >= (gid_t)-1)
		return lb_error_setx(err, EINVAL,
				     "the sandbox's host ids (uid + %" PRIu64 " and + %" PRIu64
				     ") must stay below the largest id",
				     stride, 2 * stride);
	if (!lb_tier_name(spec->network))
		return lb_error_setx(err, EINVAL, "unknown network tier");

	struct lb_sandbox *sb = calloc(1, sizeof(*sb));
	if (!sb)
		return lb_error_set(err, ENOMEM, "allocating the sandbox");
	sb->init_pidfd = -1;
	sb->landlock_fd = -1;
	sb->storage_lock = -1;
	sb->init_pid = -1;
	int r = sandbox_fill(sb, spec, (uint32_t)stride, err);
	if (r < 0) {
		sandbox_free(sb);
		return r;
	}
	*ret = sb;
	return 0;
}

/* The thread that clones the init child (CLONE_VM | CLONE_VFORK, spawn.c) and sleeps until the child has exec'd
 * lensbox-init or died, while the start's own thread maps the child's ids and builds its storage and skeleton. The
 * child uses the sleeping thread's TLS (errno) and a stack of its own. */
struct init_spawn {
	struct clone_args ca;
	struct init_args args;
	/* The child's pid (CLONE_PARENT_SETTID) and pidfd (CLONE_PIDFD): the kernel writes them before the child runs;
	 * the start's thread reads them once the child said it runs, or once this thread is joined. */
	pid_t tid;
	int pidfd;
	int err;      /* clone3's errno */
	int wake_fd;  /* the child's end of the release pair: one byte once clone3 has returned */
	int netns_fd; /* a network namespace made ahead, for the child to be born in; -1: none */
	void *stack;
	size_t stack_len;
	pthread_t thread;
	bool running; /* to be joined */
};

/* What a start holds while it runs, besides the sandbox: the means of building it (pipes, lensbox-init's memfd, the
 * root's plan) and how far it got, for its one unwind path (start_release(), then teardown() on failure). */
struct start {
	struct lb_sandbox *sb;
	const struct lb_sandbox_spec *spec;
	struct lb_rootfs_plan *plan;
	struct init_spawn spawn;
	int release[2], report[2];
	int init_fd;
	pid_t pid;
	bool have_disk, have_root;
	bool refill;	     /* a new storage: the pool's refill starts while the child builds the root */
	bool landlock_built; /* sb->landlock_fd (or no Landlock, ABI 0) is what the policy asks for */
	uint64_t disk_bytes;
	char pool[PATH_MAX];
	struct lb_disk_ready *ready; /* the spec's, ours from the start's first step: placed, or freed unused */
};

/* Step 1: the cgroup (limits on <name>, leaves `init` and `run`), refused when one of this name holds processes. */
static int start_cgroup(struct start *s, struct lb_error *err)
{
	struct lb_sandbox *sb = s->sb;
	struct lb_cg_host found;
	const struct lb_cg_host *host = s->spec->cgroups;
	int r;
	if (!host) {
		if ((r = lb_cg_detect(&found, err)) < 0)
			return r;
		host = &found;
	}
	/* Directories made ahead (v1) are renamed into place, or removed where they cannot be. */
	if ((r = lb_cg_create_from(host, s->spec->name, s->spec->ready_cgroup, &s->spec->limits, &sb->cg, err)) < 0) {
		lb_error_wrap(err, "creating the sandbox cgroup");
		return r;
	}
	/* Processes in a cgroup of this name: the sandbox is running, or a crash left it (lb_sandbox_cleanup()
	 * removes that). Either way it is not ours to kill: refuse, and leave it untouched. A cgroup just made by us
	 * holds nothing. */
	if (!sb->cg->fresh && (lb_cg_populated(sb->cg, LB_CG_INIT) || lb_cg_populated(sb->cg, LB_CG_RUN))) {
		lb_cg_free(sb->cg);
		sb->cg = NULL;
		return lb_error_setx(err, EEXIST,
				     "a sandbox named %s is running (or was left by a crash: clean it up first)",
				     s->spec->name);
	}
	return 0;
}

/* Step 2: one ext4 image must never be mounted (or resized) twice: the storage's lock first (another live sandbox
 * holds it), then no loop device may still hold the image (a just-stopped sandbox's detaches within moments; a
 * crashed one's stays until cleanup). */
static int start_lock_storage(struct start *s, struct lb_error *err)
{
	struct lb_sandbox *sb = s->sb;
	if ((sb->storage_lock = lb_disk_lock(s->spec->storage, 2000, err)) < 0)
		return sb->storage_lock;
	if (lb_disk_wait_released(s->spec->storage, 2000) < 0)
		return lb_error_setx(err, EBUSY,
				     "the storage %s is still attached to a loop device (is its sandbox running?)",
				     s->spec->storage);
	return 0;
}

/* The spawn thread: all signals blocked (the child inherits the mask, so no handler of ours runs on the memory it
 * borrows; lensbox-init sets its own), clone3, asleep until the child has exec'd or died, then one byte to wake a
 * start still waiting for the child's own. */
static void *init_spawn_thread(void *arg)
{
	struct init_spawn *sp = arg;
	sigset_t all;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, NULL);
	/* Privileged (CAP_SYS_ADMIN): this thread alone (a thread made for this clone, which ends after it) joins the
	 * namespace made ahead, so the child is born there. Safe: root's own new namespace holding only lo, that no
	 * sandbox has had. Failing that, the child makes its own as without one. */
	if (sp->netns_fd >= 0 && setns(sp->netns_fd, CLONE_NEWNET) == 0)
		sp->args.netns_ready = true;
	if (lb_clone3_run(&sp->ca, init_child, &sp->args) < 0)
		sp->err = errno;
	ssize_t w;
	do
		w = send(sp->wake_fd, "D", 1, MSG_NOSIGNAL);
	while (w < 0 && errno == EINTR);
	return NULL;
}

#define INIT_STACK (64u << 10) /* init_main's frames are a few hundred bytes deep */

/* Steps 3 and 4: what the child needs exists before the clone (the root's plan is filled later, in memory it
 * shares); then clone3() into new user, pid, ipc and uts namespaces, on our memory (spawn.c) from a thread of its
 * own. The child runs init_main() and never returns here. */
static int start_clone_init(struct start *s, struct lb_error *err)
{
	struct lb_sandbox *sb = s->sb;
	struct init_spawn *sp = &s->spawn;
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, s->release) < 0 || pipe2(s->report, O_CLOEXEC) < 0)
		return lb_error_set(err, errno, "creating pipes");
	s->init_fd = lb_init_memfd();
	if (s->init_fd < 0)
		return lb_error_set(err, s->init_fd, "preparing lensbox-init");
	if (!(s->plan = lb_rootfs_plan_new()))
		return lb_error_set(err, ENOMEM, "allocating the root plan");
	if (!(sp->stack = lb_stacks_map(1, INIT_STACK, &sp->stack_len)))
		return lb_error_set(err, errno, "mapping the init child's stack");
	struct init_args *args = &sp->args;
	*args = (struct init_args){ .plan = s->plan,
				    .release_fd = s->release[0],
				    .release_peer = s->release[1],
				    .report_fd = s->report[1],
				    .init_fd = s->init_fd,
				    .uid = sb->uid,
				    .gid = sb->gid };
	snprintf(args->report_fd_arg, sizeof(args->report_fd_arg), "%d", s->report[1]);
	int r;
	if (sb->cg->version == LB_CGROUP_V1 &&
	    (r = lb_cg_open_join(sb->cg, LB_CG_INIT, args->cg_fds, &args->n_cg, err)) < 0)
		return r;
	struct clone_args *ca = &sp->ca;
	memset(ca, 0, sizeof(*ca));
	/* The network, mount and cgroup namespaces the child makes itself (init_main), owned by this user namespace. */
	ca->flags = CLONE_VM | CLONE_VFORK | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_PIDFD |
		    CLONE_PARENT_SETTID;
	sp->pidfd = -1;
	sp->tid = 0;
	ca->pidfd = (uint64_t)(uintptr_t)&sp->pidfd;
	ca->parent_tid = (uint64_t)(uintptr_t)&sp->tid;
	ca->exit_signal = SIGCHLD;
	ca->stack = (uint64_t)(uintptr_t)lb_stack_base(sp->stack, 0, INIT_STACK);
	ca->stack_size = INIT_STACK;
	/* v2: born in the `init` leaf. v1: the child joins it itself, first thing. */
	int leaf_fd = lb_cg_open_leaf_dir(sb->cg, LB_CG_INIT);
	if (leaf_fd >= 0) {
		ca->flags |= CLONE_INTO_CGROUP;
		ca->cgroup = (uint64_t)(unsigned)leaf_fd;
	}
	sp->wake_fd = s->release[0];
	sp->netns_fd = s->spec->ready_netns > 0 ? s->spec->ready_netns : -1;
	sp->err = 0;
	/* The child's first steps (joining its cgroup, its network namespace) and ours until its release (id maps,
	 * storage, skeleton) are meant to run at once. Born on this thread's CPU, the child is preempted by this thread
	 * as soon as its first byte wakes us, and waits there while another CPU idles: the thread that clones it is
	 * created on the other CPUs, so the child starts there (a start ~0.16 ms shorter here, median), and the child
	 * takes back the rest once released. glibc places a new thread before it first runs; a thread that moved itself
	 * costs more than it saves (the musl tool's starts: +0.11 ms), so the tool does without. */
	bool placed = false;
#ifdef __GLIBC__
	pthread_attr_t attr;
	cpu_set_t apart;
	if (lb_cpus_apart(&apart, &args->cpus) && pthread_attr_init(&attr) == 0) {
		/* read by the child once released, long after this */
		args->restore_cpus = pthread_attr_setaffinity_np(&attr, sizeof(apart), &apart) == 0;
		placed = args->restore_cpus && pthread_create(&sp->thread, &attr, init_spawn_thread, sp) == 0;
		pthread_attr_destroy(&attr);
	}
#endif
	args->restore_cpus = placed;
	/* Unplaced (one CPU, the tool, or the placement failed): as any thread. */
	r = placed ? 0 : pthread_create(&sp->thread, NULL, init_spawn_thread, sp);
	char said = 0;
	if (r == 0) {
		sp->running = true;
		ssize_t n;
		do
			n = read(s->release[1], &said, 1);
		while (n < 0 && errno == EINTR);
	}
	/* The child has its own descriptor table, copied at the clone: ours go. */
	if (leaf_fd >= 0)
		close(leaf_fd);
	for (size_t i = 0; i < args->n_cg; i++)
		close(args->cg_fds[i]);
	if (r != 0)
		return lb_error_set(err, r, "starting the thread that clones the sandbox's init");
	if (said != 'S') { /* clone3 failed, or the child died before it ran: the thread is done */
		pthread_join(sp->thread, NULL);
		sp->running = false;
	}
	if (sp->tid > 0) {
		s->pid = sp->tid;
		sb->init_pid = sp->tid;
		sb->init_pidfd = sp->pidfd;
	}
	if (said != 'S') {
		if (sp->err)
			return lb_error_set(err, sp->err, "creating the sandbox's namespaces (clone3)");
		return lb_error_setx(err, EIO, "the sandbox's init died as it started");
	}
	close(s->report[1]);
	s->report[1] = -1;
	return 0;
}

/* The storage root belongs to the sandbox's host uid (a new image's is root's; the image may predate a uid change).
 */
static int give_storage_root(struct lb_sandbox *sb, const struct lb_sandbox_spec *spec, struct lb_error *err)
{
	struct stat rst;
	if (stat(sb->storage_mnt, &rst) < 0 ||
	    ((rst.st_uid != spec->host_uid || rst.st_gid != spec->host_gid || (rst.st_mode & 07777) != 0755) &&
	     (chown(sb->storage_mnt, spec->host_uid, spec->host_gid) < 0 || chmod(sb->storage_mnt, 0755) < 0)))
		return lb_error_set(err, errno, "giving the storage root to uid %u", (unsigned)spec->host_uid);
	return 0;
}

/* A new storage of the ready filesystem's size gets that filesystem (disk_ready.c): true when it is in place at the
 * storage's mount point. Anything else (an existing storage, another size, a failure) leaves the usual way to
 * lb_disk_prepare and lb_disk_mount: a ready filesystem only ever saves time. The ready one is freed either way. */
static bool place_ready(struct start *s, uint64_t disk)
{
	bool placed = false;
#ifdef LB_DISK_READY
	char img[PATH_MAX];
	struct stat st;
	snprintf(img, sizeof(img), "%s/disk.img", s->spec->storage);
	if (s->ready && lb_disk_ready_bytes(s->ready) == disk && lstat(img, &st) < 0 && errno == ENOENT) {
		struct lb_error perr = { 0 };
		placed = lb_disk_ready_place(s->ready, s->spec->storage, s->sb->storage_mnt, &perr) == 0;
	}
	lb_disk_ready_free(s->ready);
#else
	(void)disk;
#endif
	s->ready = NULL;
	return placed;
}

/* Step 5, host half: the storage, mounted and given to the sandbox's host uid, while the child makes its network
 * namespace. */
static int start_storage(struct start *s, struct lb_error *err)
{
	struct lb_sandbox *sb = s->sb;
	const struct lb_sandbox_spec *spec = s->spec;
	uint64_t disk = spec->limits.disk_bytes ? spec->limits.disk_bytes : (uint64_t)1 << 30;
	int r;
	bool have_pool = spec->disk_pool && spec->disk_pool[0] &&
			 (size_t)snprintf(s->pool, sizeof(s->pool), "%s", spec->disk_pool) < sizeof(s->pool);
	s->disk_bytes = disk;
	if (place_ready(s, disk)) {
		s->refill = false; /* the pool lost its image when the ready filesystem was made, and refilled then */
		s->have_disk = true;
		return give_storage_root(sb, spec, err);
	}
	if ((r = lb_disk_prepare(spec->storage, have_pool ? s->pool : NULL, disk, spec->host_uid, spec->host_gid,
				 err)) < 0) {
		lb_error_wrap(err, "preparing the storage");
		return r;
	}
	bool fresh_fs = r == 1;
	s->refill = fresh_fs && have_pool;
	if ((r = lb_disk_mount(spec->storage, sb->storage_mnt, spec->storage_throwaway && fresh_fs, err)) < 0) {
		lb_error_wrap(err, "mounting the storage");
		return r;
	}
	s->have_disk = true;
	/* mke2fs's empty lost+found means nothing to the sandbox's programs (only e2fsck uses it, and makes it again
	 * when missing). Safe as root: our own mount of a filesystem made an instant ago, that no sandbox has seen, so
	 * nothing in it can be a planted link; rmdir removes only an empty directory. A failure is cosmetic. */
	if (fresh_fs) {
		char lf[PATH_MAX];
		snprintf(lf, sizeof(lf), "%s/lost+found", sb->storage_mnt);
		(void)rmdir(lf);
	}
	return give_storage_root(sb, spec, err);
}

/* One report of the child before lensbox-init runs: 1 when more are to come, 0 for lensbox-init's 'R', or the
 * failed step's error. */
static int take_report(struct start *s, const struct lb_child_report *rep, struct lb_error *err)
{
	struct lb_sandbox *sb = s->sb;
	if (rep->kind == 'T' && !s->landlock_built) {
		/* The child's root is final and no program of the sandbox has run yet: the rules' paths are resolved in
		 * it now, while the child drops its privileges and execs lensbox-init. */
		int r = lb_landlock_build(s->spec->policy, s->pid, &sb->landlock_fd, &sb->landlock_abi, err);
		if (r < 0)
			return r;
		s->landlock_built = true;
		return 1;
	}
	if (rep->kind == 'N' && s->have_root) {
		/* The child has its own private copy of the skeleton's mount: the host's goes now, while the child
		 * builds the root, rather than at stop. The empty mount point stays until stop: removing it now would
		 * detach the child's copy too (a mount point removed in one namespace is unmounted in all). */
		s->have_root = false;
		int r = lb_rootfs_unmount(sb->state_dir, err);
		return r < 0 ? r : 1;
	}
	if (rep->kind == 'R')
		return 0;
	char step[sizeof(rep->step)];
	memcpy(step, rep->step, sizeof(step));
	step[sizeof(step) - 1] = '\0';
	return lb_error_set(err, rep->err, "building the sandbox: %s", step);
}

/* The end of step 5 and step 6 as the parent sees it: releases the child and reads its reports until it is ready;
 * once the child's mounts are private, the host's mount of the skeleton goes. */
static int start_release_init(struct start *s, struct lb_error *err)
{
	struct lb_sandbox *sb = s->sb;
	/* A child that failed before this point has exited (its report says why): no SIGPIPE, read the report. */
	ssize_t sent;
	do
		sent = send(s->release[1], "g", 1, MSG_NOSIGNAL);
	while (sent < 0 && errno == EINTR);
	if (sent != 1) /* gone already, or it must go: the read below must not wait for it */
		syscall(SYS_pidfd_send_signal, sb->init_pidfd, SIGKILL, NULL, 0);
	/* A new storage took an image from the pool (or found none): its refill forks now, while the child builds the
	 * root and we would only wait. A refill that cannot start costs the next new sandbox its mke2fs, nothing more.
	 */
	if (s->refill)
		(void)lb_disk_pool_refill(s->pool, s->disk_bytes, s->spec->disk_pool_bound);
	/* The caller's work, in the same wait. A failure leaves the child to start_release(), as any failed step. */
	if (s->spec->while_building) {
		int r = s->spec->while_building(s->spec->while_building_arg, err);
		if (r < 0)
			return r;
	}
	/* Until the child has exec'd: its reports, and the spawn thread's 'D' once the clone returned, which is when
	 * the child's exec is past its point of no return (or the child is gone). lensbox-init's own 'R' comes ~0.4 ms
	 * later on this host (the exec's tail): the first run need not wait for it. */
	bool vforked = false;
	for (;;) {
		struct pollfd pf[2] = { { .fd = s->report[0], .events = POLLIN },
					{ .fd = vforked ? -1 : s->release[1], .events = POLLIN } };
		int pr = poll(pf, 2, vforked ? 0 : -1);
		if (pr < 0 && errno == EINTR)
			continue;
		if (pr < 0)
			return lb_error_set(err, errno, "waiting for the sandbox's init");
		if (pf[0].revents) {
			struct lb_child_report rep;
			ssize_t n;
			do
				n = read(s->report[0], &rep, sizeof(rep));
			while (n < 0 && errno == EINTR);
			if (n != (ssize_t)sizeof(rep))
				return lb_error_setx(err, EIO, "the sandbox's init died during setup");
			int r = take_report(s, &rep, err);
			if (r <= 0)
				return r;
			continue;
		}
		if (vforked) /* every report written before the exec is read */
			break;
		if (pf[1].revents) {
			char c = 0;
			ssize_t n;
			do
				n = read(s->release[1], &c, 1);
			while (n < 0 && errno == EINTR);
			if (n != 1 || c != 'D')
				return lb_error_setx(err, EIO, "the sandbox's init died during setup");
			vforked = true;
		}
	}
	/* Exec'd, or exiting: every failed step reports 'E' before its exit, so only a child killed by a signal gets
	 * here without a report. One that is already gone shows on its pidfd (left for teardown to reap); one still
	 * exiting (its memory is released before its exit is visible) is an init killed from outside, as one killed
	 * later: lb_sandbox_init_exited() tells the caller, whose next use starts the sandbox again (lensboxd). */
	siginfo_t si;
	memset(&si, 0, sizeof(si));
	if (waitid((idtype_t)P_PIDFD, (id_t)sb->init_pidfd, &si, WEXITED | WNOHANG | WNOWAIT) < 0 || si.si_pid != 0)
		return lb_error_setx(err, EIO, "the sandbox's init died during setup");
	return 0;
}

/* What the start used to build the sandbox and the sandbox does not keep; a child not yet handed to the sandbox
 * (no pidfd) is killed and reaped. The spawn thread is joined first, as it may still write to the release pair: on
 * success the child's exec is past its point of no return, so the thread is done or about to be; after a failure the
 * child is killed first (teardown() reaps it). */
static void start_release(struct start *s, bool ok)
{
	struct init_spawn *sp = &s->spawn;
	if (sp->running) {
		/* Our own child through its pidfd: it cannot have been recycled. */
		if (!ok && s->sb->init_pidfd >= 0)
			syscall(SYS_pidfd_send_signal, s->sb->init_pidfd, SIGKILL, NULL, 0);
		pthread_join(sp->thread, NULL);
		sp->running = false;
	}
	if (sp->stack)
		munmap(sp->stack, sp->stack_len);
	sp->stack = NULL;
	if (s->init_fd >= 0)
		close(s->init_fd);
	for (int i = 0; i < 2; i++) {
		if (s->release[i] >= 0)
			close(s->release[i]);
		if (s->report[i] >= 0)
			close(s->report[i]);
	}
	if (s->pid > 0 && s->sb->init_pidfd < 0) {
		kill(s->pid, SIGKILL);
		waitpid(s->pid, NULL, 0);
	}
	lb_rootfs_plan_free(s->plan);
	if (s->spec->ready_netns > 0)
		close(s->spec->ready_netns); /* the child has its own copy, or made its own namespace */
#ifdef LB_DISK_READY
	lb_disk_ready_free(s->ready); /* a start that failed before its storage step */
#endif
	s->ready = NULL;
}

/* What was made ahead for a start that refused the spec before its first step: nothing of it is used. */
static void spec_release_ready(const struct lb_sandbox_spec *spec)
{
#ifdef LB_DISK_READY
	lb_disk_ready_free(spec->disk_ready);
#endif
	if (spec->ready_netns > 0)
		close(spec->ready_netns);
	if (spec->ready_cgroup)
		(void)lb_ready_cgroup_remove(spec->ready_cgroup, NULL);
}

int lb_sandbox_start(const struct lb_sandbox_spec *spec, struct lb_sandbox **ret, struct lb_error *err)
{
	struct lb_sandbox *sb = NULL;
	int r = sandbox_new(spec, &sb, err);
	if (r < 0) {
		if (spec)
			spec_release_ready(spec);
		return r;
	}
	struct start s = { .sb = sb,
			   .spec = spec,
			   .release = { -1, -1 },
			   .report = { -1, -1 },
			   .init_fd = -1,
			   .pid = -1,
			   .ready = spec->disk_ready };

	if ((r = start_cgroup(&s, err)) < 0)
		goto fail;
	if ((r = start_lock_storage(&s, err)) < 0)
		goto fail;
	if ((r = start_clone_init(&s, err)) < 0)
		goto fail;
	if ((r = map_ids(sb, s.pid, err)) < 0)
		goto fail;
	/* Init should outlive any OOM in its cgroup: the programs are the victims (they run at +1000, exec.c).
	 * Lowering needs CAP_SYS_RESOURCE, which some hosts (this CI's containers) withhold from root: best effort. */
	(void)write_proc(s.pid, "oom_score_adj", "-1000", NULL);

	/* The storage and the root's skeleton, while the child makes its network namespace. */
	if ((r = start_storage(&s, err)) < 0)
		goto fail;
	s.have_root = true; /* from here teardown removes the state directory even if prepare stops half-way */
	if ((r = lb_rootfs_prepare(sb, spec, s.plan, err)) < 0) {
		lb_error_wrap(err, "preparing the root filesystem");
		goto fail;
	}
	if ((r = start_release_init(&s, err)) < 0)
		goto fail;
	if (!s.landlock_built &&
	    (r = lb_landlock_build(spec->policy, s.pid, &sb->landlock_fd, &sb->landlock_abi, err)) < 0)
		goto fail;

	start_release(&s, true);
	*ret = sb;
	return 0;

fail:
	start_release(&s, false);
	teardown(sb, s.have_disk, s.have_root, NULL);
	sandbox_free(sb);
	return r;
}

bool lb_sandbox_init_exited(const struct lb_sandbox *sb)
{
	/* A pidfd reads as ready once its process has exited. */
	struct pollfd pf = { .fd = sb->init_pidfd, .events = POLLIN };
	return sb->init_pidfd >= 0 && poll(&pf, 1, 0) == 1 && (pf.revents & POLLIN);
}

int lb_sandbox_netns_fd(const struct lb_sandbox *sb)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/ns/net", (int)sb->init_pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	/* The pid is our child's: it cannot be recycled before we reap it; check it has not died meanwhile. */
	if (syscall(SYS_pidfd_send_signal, sb->init_pidfd, 0, NULL, 0) < 0) {
		int e = errno;
		close(fd);
		return -e;
	}
	return fd;
}

pid_t lb_sandbox_init_pid(const struct lb_sandbox *sb)
{
	return sb->init_pid;
}

int lb_sandbox_landlock_abi(const struct lb_sandbox *sb)
{
	return sb->landlock_abi;
}

enum lb_cgroup_version lb_sandbox_cgroup_version(const struct lb_sandbox *sb)
{
	return sb->cg ? sb->cg->version : LB_CGROUP_NONE;
}

const char *lb_sandbox_storage_mount(const struct lb_sandbox *sb)
{
	return sb->storage_mnt;
}

int lb_sandbox_stop(struct lb_sandbox *sb, struct lb_error *err)
{
	if (!sb)
		return 0;
	int r = teardown(sb, true, false, err); /* the root's host side went at start */
	if (r < 0)
		lb_error_wrap(err, "stopping sandbox %s", sb->name);
	sandbox_free(sb);
	return r;
}

int lb_sandbox_cleanup(const char *name, const char *run_dir, struct lb_error *err)
{
	if (!lb_sandbox_name_valid(name) || !run_dir || run_dir[0] != '/')
		return lb_error_setx(err, EINVAL, "cleanup: bad sandbox name or run_dir");
	char state[PATH_MAX], mnt[PATH_MAX], root[PATH_MAX];
	if (lb_state_paths(run_dir, name, state, mnt, root) < 0)
		return lb_error_setx(err, ENAMETOOLONG, "cleanup: run_dir too long");
	int first = 0;
	struct lb_cg_host host;
	struct lb_error e2;
	lb_error_clear(&e2);
	if (lb_cg_detect(&host, &e2) == 0) {
		struct lb_cgroup *cg = NULL;
		if (lb_cg_open(&host, name, &cg, &e2) == 0) {
			/* Killing the `init` leaf kills the sandbox's pid 1, and with it its whole pid namespace. */
			int r = lb_cg_destroy(cg, &e2);
			if (r < 0 && first == 0) {
				first = r;
				if (err)
					*err = e2;
			}
			lb_cg_free(cg);
		}
	}
	lb_error_clear(&e2);
	int r = lb_rootfs_remove(state, &e2);
	if (r < 0 && first == 0) {
		first = r;
		if (err)
			*err = e2;
	}
	if (umount2(mnt, UMOUNT_NOFOLLOW) < 0 && errno != EINVAL && errno != ENOENT)
		umount2(mnt, MNT_DETACH | UMOUNT_NOFOLLOW);
	(void)rmdir(mnt);
	return first;
}

int lb_sandbox_destroy_storage(const char *storage, struct lb_error *err)
{
	if (!storage || storage[0] != '/')
		return lb_error_setx(err, EINVAL, "storage must be an absolute path");
	char img[PATH_MAX];
	snprintf(img, sizeof(img), "%s/disk.img", storage);
	struct stat st;
	if (stat(storage, &st) < 0 && errno == ENOENT)
		return 0;
	_cleanup_close_ int lock = lb_disk_lock(storage, 2000, err);
	if (lock < 0)
		return lock;
	if (lb_disk_wait_released(storage, 2000) < 0)
		return lb_error_setx(err, EBUSY, "%s is still in use by a running sandbox", img);
	if (unlink(img) < 0 && errno != ENOENT)
		return lb_error_set(err, errno, "removing %s", img);
	snprintf(img, sizeof(img), "%s/disk.img.new", storage);
	(void)unlink(img);
	snprintf(img, sizeof(img), "%s/lock", storage);
	(void)unlink(img);
	if (rmdir(storage) < 0 && errno != ENOENT)
		return lb_error_set(err, errno, "removing %s", storage);
	return 0;
}

int lb_storage_usage(const char *storage, uint64_t *ret_bytes)
{
	char img[PATH_MAX];
	snprintf(img, sizeof(img), "%s/disk.img", storage);
	struct stat st;
	if (stat(img, &st) < 0)
		return -errno;
	*ret_bytes = (uint64_t)st.st_blocks * 512;
	return 0;
}

/*
 * internal.h — what the runner's files share and nobody else sees: the sandbox object and the helpers of the disk,
 * root-filesystem and Landlock files.
 *
 * Runs in the caller (lensboxd or lensbox-runner, root). Invariant: struct lb_sandbox is owned by one caller at a
 * time (see runner.h on threading); every fd in it is O_CLOEXEC.
 */
#ifndef LB_RUNNER_INTERNAL_H
#define LB_RUNNER_INTERNAL_H

#include <limits.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <linux/filter.h>
#include <poll.h>

#include "cgroup.h"
#include "report.h"
#include "lb/error.h"
#include "lb/policy.h"
#include "lb/runner.h"

/* The uid and gid every program runs as inside a sandbox when the policy says nothing. */
#define LB_SANDBOX_ID_DEFAULT 1000u
#define LB_SANDBOX_NOBODY_ID  65534u /* nobody and nogroup inside every sandbox */
#define LB_SANDBOX_ROOT_ID    0u

#define LB_DEFAULT_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

struct lb_seccomp_notify {
	struct sock_fprog variant;     /* the policy's program with ERRNO returns (but ENOSYS) made USER_NOTIF */
	const struct sock_fprog *orig; /* the policy's program: what answers each notification */
};

struct lb_sandbox {
	char name[64];
	char run_dir[PATH_MAX];
	char state_dir[PATH_MAX];   /* run_dir/sandboxes/<name>: skeleton, etc files, root mount point */
	char storage_mnt[PATH_MAX]; /* run_dir/mnt/<name>: the disk image's mount */
	char root_mnt[PATH_MAX];    /* state_dir/root: where the child binds the shared root and pivots into it */
	char storage[PATH_MAX];	    /* the storage directory (holds disk.img) */
	int storage_lock;	    /* flock on <storage>/lock, held while the sandbox lives */
	pid_t init_pid;
	int init_pidfd;
	int landlock_fd;   /* ruleset built at start against the sandbox's own paths; -1 when ABI 0 was allowed */
	int landlock_abi;  /* enforced on programs */
	uint32_t uid, gid; /* inside the sandbox */
	uint32_t host_uid, host_gid, host_id_stride; /* the ids mapped (sandbox.c, map_ids) */
	cpu_set_t cpus; /* the programs' affinity: ceil(cpu limit) of the caller's CPUs (cpus.c) */
	struct lb_cgroup *cg;
	const struct lb_policy *policy;
	enum lb_tier network;
	char *path_env;			 /* "PATH=..." for programs */
	char **image_env;		 /* copies of spec->image_env without PATH, NULL-terminated */
	struct lb_seccomp_notify notify; /* variant.filter NULL: runs install the plain filter */
};

/* cpus.c — the CPUs a sandbox's programs run on. */
/* ceil(cpu_millicores / 1000) CPUs of the caller's affinity from an offset spread_key picks (all of them when the
 * limit is 0 or at least as many); never empty. */
int lb_cpus_choose(uint32_t cpu_millicores, uint32_t spread_key, cpu_set_t *ret);
/* The set as the kernel lists CPUs in /sys ("0-1,3"); -ENAMETOOLONG when it does not fit in size. */
int lb_cpus_format(const cpu_set_t *set, char *buf, size_t size);
/* For a child that is to work beside the calling thread: *ret_all is the caller's affinity, *ret_apart the same
 * without the CPU the caller runs on now. False (nothing to do) when the caller may use only one CPU. */
bool lb_cpus_apart(cpu_set_t *ret_apart, cpu_set_t *ret_all);

/* disk.c — the storage: a sparse ext4 image of the disk limit, loop-attached and mounted nosuid,nodev. */
/* Takes the storage's exclusive lock (waiting up to timeout_ms); returns the fd that holds it (CLOEXEC). */
int lb_disk_lock(const char *storage, int timeout_ms, struct lb_error *err);
/* Makes <storage>/disk.img (an ext4 filesystem of disk_bytes) unless it exists, growing an existing one to a larger
 * limit: a new one is taken from the pool (NULL: none) when it has one of that size, else made by mke2fs. Returns 1
 * when the filesystem is new (the caller then starts the pool's refill), 0 when one was there. */
int lb_disk_prepare(const char *storage, const char *pool, uint64_t disk_bytes, uid_t owner_uid, gid_t owner_gid,
		    struct lb_error *err);
/* Attaches the image to a free loop device (autoclear) and reads ahead the blocks a mount reads first; returns the
 * loop device's fd and its path in dev. The caller holds the storage lock and has checked under it that no loop
 * device holds the image (lb_disk_wait_released). */
int lb_disk_attach(const char *storage, char *dev, size_t devsize, struct lb_error *err);
/* The same for an image already open (imgfd, read-write; img names it for the loop device). */
int lb_disk_attach_fd(int imgfd, const char *img, char *dev, size_t devsize, struct lb_error *err);
/* Attaches and mounts the image. The caller holds the storage lock (lb_disk_lock) and has checked under it that no
 * loop device holds the image (lb_disk_wait_released). */
int lb_disk_mount(const char *storage, const char *mountpoint, bool throwaway, struct lb_error *err);
/* Detaches the storage mount at mountpoint at once, in two halves so the caller can work while the flusher gets
 * going: lb_disk_detach() detaches the mount (invisible from here on) and starts a background flusher
 * (lensbox-diskhelper, no fork of the caller) that holds the storage lock (lock_fd, shared with it);
 * lb_disk_detach_finish() drops the caller's reference, after which the flusher shuts the filesystem down (journal
 * commit, flush to the host's disk, loop device release), removes the mount point and releases the lock. lock_fd < 0:
 * finish does it all itself. */
struct lb_disk_detach {
	int mnt_fd; /* O_PATH reference to the detached filesystem, -1 when nothing was mounted */
	int go;	    /* write end the flusher waits on; -1 without a flusher (finish does the shutdown) */
};
int lb_disk_detach(const char *mountpoint, int lock_fd, struct lb_disk_detach *ret, struct lb_error *err);
void lb_disk_detach_finish(struct lb_disk_detach *d, const char *mountpoint);
/* Where an ext4 image's first reads go (disk.c explains why): its block size and the byte offsets of the blocks a
 * mount reads one after the other, plus the root directory's first block. Reads fd (the image) with pread only;
 * -EINVAL when it is not an ext4 filesystem this recognises. Offsets are inside the file and block-aligned. */
struct lb_ext4_layout {
	unsigned block_size;
	uint64_t offsets[6];
	size_t n;
};
int lb_disk_ext4_layout(int fd, struct lb_ext4_layout *ret);
/* disk_pool.c — storage images formatted ahead of time (the file explains the layout and why it is safe). */
#define LB_DISK_POOL_TARGET 4
/* Moves an image of exactly disk_bytes from the pool to img (atomically); 0, -ENOENT when there is none, -EPERM when
 * the pool is not root's own 0700 directory, -EXDEV when it is on another filesystem than img. */
int lb_disk_pool_take(const char *pool, uint64_t disk_bytes, const char *img);
/* The same from an open pool (pool_fd) to dirfd/name. */
int lb_disk_pool_take_at(int pool_fd, uint64_t disk_bytes, int dirfd, const char *name);
/* Starts a detached refiller that tops the pool up to LB_DISK_POOL_TARGET images of disk_bytes, unless one is at
 * work already; returns how many it will make (0: none needed or another refiller holds the lock) or -errno. bound:
 * the refiller stops (nothing half-made left) as soon as the calling process ends. */
int lb_disk_pool_refill(const char *pool, uint64_t disk_bytes, bool bound);
/* Writes a copy of the pool's template for disk_bytes (an empty ext4 image the refiller made with mke2fs) into to,
 * sparse: 0, -ENOENT when there is none yet, -EPERM as lb_disk_pool_take. Not fsynced: a new storage's first journal
 * commit or its unmount flushes it through the loop device. */
int lb_disk_pool_copy_template(const char *pool, uint64_t disk_bytes, int to);
/* Opens the pool directory (made if create), refusing one that is not root's own 0700: an fd or -errno. */
int lb_disk_pool_open(const char *pool, bool create);
/* Whether anything has dirfd/name open for writing (a loop device attached to it): 1, 0 (also when it does not
 * exist), or -errno when write leases cannot answer. */
int lb_disk_file_in_use(int dirfd, const char *name);
/* disk_ready.c (not in the musl build of the tool) — ready storages and detached mounts. */
/* The storage's filesystem (on the loop device dev) mounted nowhere, with a start's mount options and the given
 * MOUNT_ATTR_* flags: the mount's fd, or -errno. */
int lb_disk_mount_detached(const char *dev, unsigned attrs, struct lb_error *err);
/* Makes the ready filesystem storage's: its image becomes <storage>/disk.img and its mount is attached at
 * mountpoint. The caller holds the storage's lock and found no disk.img. On failure the caller still frees r (an
 * image already moved stays the storage's, unmounted). */
int lb_disk_ready_place(struct lb_disk_ready *r, const char *storage, const char *mountpoint, struct lb_error *err);
/* The loop device that has storage/disk.img attached, or -ENOENT. */
int lb_disk_find_loop(const char *storage, char *ret_dev, size_t size);
/* Waits up to timeout_ms until nothing has storage/disk.img open for writing (no loop device has it attached):
 * asked with a write lease, or by scanning /sys/block where leases are off; -EBUSY if it is still in use. */
int lb_disk_wait_released(const char *storage, int timeout_ms);

/* root_share.c: the files of /etc each sandbox has its own of, bound over the shared root's empty ones. */
#define LB_ROOT_OWN_ETC 5
extern const char *const lb_root_own_etc[LB_ROOT_OWN_ETC];
/* ... and the host's device nodes bound over the shared /dev skeleton's empty files. */
#define LB_ROOT_DEV_NODES 6
extern const char *const lb_root_dev_nodes[LB_ROOT_DEV_NODES];
/* A root's skeleton in dir (an empty directory of root's): skel/ (mount points, empty /etc files), devskel/, and the
 * mount points img/ and root/. */
int lb_root_skeleton_write(const char *dir, struct lb_error *err);
/* Remounts our own tmpfs at dir (mounted with opts) read-only at its superblock, once written. The kernel refuses
 * (EBUSY) while any descriptor open for writing on it exists, and that includes the copies in a child that another
 * thread of the caller clones at the instant one of our writes is open: a run's C1 and C2, a pool refiller's
 * intermediate child, a spawned tool, each holding every descriptor of the caller until its exec or close_range.
 * Those go within milliseconds: EBUSY is tried again every millisecond for up to 200 ms. 0 or a negative errno. */
int lb_tmpfs_seal(const char *dir, const char *opts);
/* The overlay of a root, its layers named relative to the root's directory (no host path in any mountinfo):
 * read-only with no upper layer; redirect_dir=nofollow and metacopy=off so overlay xattrs an image might carry are
 * not followed. A sandbox's own root (no shared one) is mounted by its child relative to its state directory. */
#define LB_ROOT_OVERLAY_OPTS	     "lowerdir=skel:img,redirect_dir=nofollow,metacopy=off,xino=off"
#define LB_ROOT_OVERLAY_OPTS_PRIVATE "lowerdir=base/skel:base/img,redirect_dir=nofollow,metacopy=off,xino=off"

/* rootfs.c — the new root. The host side (root in the host's namespaces) writes the sandbox's own files (/etc, the
 * CPU list) in a small read-only tmpfs; the child side (inside the new user+mount namespaces) binds the image's shared
 * root (root_share.c), binds those files over it, mounts /sandbox, /tmp, /dev, /proc, pivots into it and detaches the
 * host. */
struct lb_rootfs_plan;
/* An empty plan in memory shared with children forked later (MAP_SHARED): the sandbox's first process is forked
 * before the plan is written and reads it once released. NULL when out of memory. Freed by lb_rootfs_plan_free(). */
struct lb_rootfs_plan *lb_rootfs_plan_new(void);
/* Host side: makes the state tmpfs with the sandbox's own files (and, when spec->shared_root is NULL, a shared root of
 * its own in it) and writes what the child needs into plan. */
int lb_rootfs_prepare(struct lb_sandbox *sb, const struct lb_sandbox_spec *spec, struct lb_rootfs_plan *plan,
		      struct lb_error *err);
/* Child side; async-signal-safe (raw syscalls on prepared strings). On failure returns -errno and *ret_step names
 * the step. lb_rootfs_make_private() first (every mount of the new mount namespace private: no propagation either
 * way), then lb_rootfs_enter(). */
int lb_rootfs_make_private(const char **ret_step);
int lb_rootfs_enter(const struct lb_rootfs_plan *plan, const char **ret_step);
void lb_rootfs_plan_free(struct lb_rootfs_plan *plan);
/* Host side: unmounts the host's mount of the skeleton (the sandbox's first process has its own private copy by
 * then); the empty mount point stays until stop (removing it would detach that copy too, wherever it is mounted). */
int lb_rootfs_unmount(const char *state_dir, struct lb_error *err);
/* Host side teardown: unmounts the skeleton if still mounted, removes the state directory. */
int lb_rootfs_remove(const char *state_dir, struct lb_error *err);

/* landlock.c */
int lb_landlock_abi(void); /* the kernel's best ABI, 0 when Landlock is off */
/* Builds the ruleset of the policy for the sandbox whose init is pid (paths resolved inside its root). *ret_abi is
 * the ABI the ruleset uses; *ret_fd is -1 when the policy allowed running without Landlock and the kernel has none. */
int lb_landlock_build(const struct lb_policy *policy, pid_t pid, int *ret_fd, int *ret_abi, struct lb_error *err);

void lb_child_report(int fd, int kind, int err, int status, const char *step);

/* netns.c: lo up and every port bindable in the caller's network namespace (an init child's own, just made);
 * thin syscall wrappers only. *step names what failed. */
int lb_netns_setup(const char **step);

/* spawn.c — children on the caller's memory until they exec (CLONE_VM | CLONE_VFORK; the file says what they may
 * do). lb_stacks_map() maps n stacks of size bytes, each above a guard page (NULL with errno; munmap the *ret_len
 * bytes); lb_stack_base() is the lowest byte of stack i. lb_clone3_run() clones per ca (with ca->stack set) and runs
 * fn(arg) in the child, which exits with its value; the child's pid, or -1 with errno. */
struct clone_args;
void *lb_stacks_map(size_t n, size_t size, size_t *ret_len);
char *lb_stack_base(void *map, size_t i, size_t size);
pid_t lb_clone3_run(struct clone_args *ca, int (*fn)(void *), void *arg);
/* Starts the binary in exec_fd (a sealed memfd of blobs.c) with argv and no environment, detached: it is reparented
 * at once and nobody here waits for it. fds[i] is its descriptor 3 + i; it holds no other descriptor of the caller
 * (not even 0-2). No fork: two CLONE_VM | CLONE_VFORK children, so the caller's memory is never write-protected. 0
 * once it has exec'd, or a negative errno (nothing started). */
#define LB_HELPER_FDS_MAX 4
int lb_spawn_helper(int exec_fd, char *const argv[], const int *fds, int nfds);
/* For the child's functions that call one that does not return: ASan (sanitizer builds) would take the child's stack,
 * which it does not know, for a corrupt one and say so on the child's stderr. */
#define LB_BORROWED_STACK __attribute__((no_sanitize("address")))

/* blobs.c — the freestanding binaries, embedded at build time; each returns a sealed, executable memfd (CLOEXEC)
 * holding one: lensbox-init, for the sandbox's first process to execveat() into; lensbox-diskhelper, for
 * lb_spawn_helper(). A negative errno on failure. */
int lb_init_memfd(void);
int lb_diskhelper_memfd(void);

/* output.c — bounded capture of a program's output: the first `limit` bytes (head) or the last (tail), and the
 * total count; memory never grows past `limit` whatever the program writes. */
enum lb_capture_mode { LB_CAPTURE_HEAD, LB_CAPTURE_TAIL };
struct lb_capture {
	enum lb_capture_mode mode;
	size_t limit;
	char *buf; /* limit bytes, allocated by init */
	size_t start, len;
	uint64_t total;
};
int lb_capture_init(struct lb_capture *c, enum lb_capture_mode mode, size_t limit);
void lb_capture_add(struct lb_capture *c, const char *data, size_t n);
/* Hands over the kept bytes in order (NUL-terminated, malloc'ed) and resets c. */
char *lb_capture_take(struct lb_capture *c, size_t *ret_len);
void lb_capture_free(struct lb_capture *c);

/* seccomp_notify.c — counting the calls the seccomp policy refuses (the file's opening comment says how and why it
 * is safe). prepare() derives the variant filter the run's last child installs with a listener; -ENOTSUP with
 * *ret_why when this host or profile cannot (runs then install the plain filter and report no syscall counts). */
int lb_seccomp_notify_prepare(const struct sock_fprog *orig, struct lb_seccomp_notify *ret, const char **ret_why);
void lb_seccomp_notify_free(struct lb_seccomp_notify *n);
/* The action the classic BPF seccomp program returns for d; anything malformed is SECCOMP_RET_KILL_PROCESS. */
struct seccomp_data;
uint32_t lb_seccomp_eval(const struct sock_filter *prog, size_t len, const struct seccomp_data *d);
#define LB_TALLY_SLOTS 16
struct lb_syscall_tally {
	uint64_t total;
	size_t n;
	struct {
		int nr;
		uint64_t count;
	} slot[LB_TALLY_SLOTS]; /* the first distinct calls seen; later ones count in total only */
};
void lb_syscall_tally_add(struct lb_syscall_tally *t, int nr);
/* Takes one pending notification, answers it with the original program's errno and counts it. -errno when there
 * was none to take or the refused thread went away (harmless: it was refused either way). */
int lb_seccomp_notify_answer(int listener, const struct lb_seccomp_notify *n, struct lb_syscall_tally *t);
void lb_syscall_tally_result(const struct lb_syscall_tally *t, struct lb_refusals *r);

/* landlock_audit.c — Landlock's refusals during a run, from the kernel's audit records (ABI 7, only where the host's
 * audit is already on). open() says -ENOTSUP when this host cannot (lb_ll_audit_why_not() says why, NULL when it
 * can); the caller then passes no log flag to restrict_self. */
#define LB_LL_PENDING 16
struct lb_ll_audit {
	int fd;		      /* NETLINK_AUDIT socket bound to the read-log group; -1: not listening */
	pid_t pid;	      /* the run's main process (host pid): the pid its domain's "allocated" record names */
	uint64_t domain;      /* the run's domain id, 0 until its "allocated" record arrived */
	bool deallocated;     /* its "deallocated" record arrived: every earlier one has too */
	bool marker_seen;     /* the end-of-run marker came back: every earlier record has too */
	char marker[48];      /* its text, unique to the run */
	uint64_t last_serial; /* the audit event of the last record counted: one refusal may log several */
	bool lost;	      /* the socket overflowed (ENOBUFS): counts may be low */
	uint64_t fs, net;     /* the domain's refusals: fs.* and net.* blockers */
	struct {
		uint64_t domain, fs, net;
	} pending[LB_LL_PENDING]; /* domains seen before their "allocated" record */
	size_t n_pending, next_evict;
};
const char *lb_ll_audit_why_not(int landlock_abi);
int lb_ll_audit_open(struct lb_ll_audit *a, int landlock_abi);
void lb_ll_audit_read(struct lb_ll_audit *a); /* what is there now, at most a batch; never blocks */
/* Parses one receive buffer of netlink audit messages (hostile text; exposed for the tests and the fuzzer). */
void lb_ll_audit_take(struct lb_ll_audit *a, const char *buf, size_t n);
/* Reads the records the run left; when it failed (or had a refusal) first sends a marker through the audit queue
 * and waits for it (at most wait_ms), so no record of the run is still in flight. */
void lb_ll_audit_finish(struct lb_ll_audit *a, bool failed, int wait_ms);
void lb_ll_audit_close(struct lb_ll_audit *a);

/* refusals.c — the two sources above as the run's output loop sees them. */
struct lb_run_refusals {
	const struct lb_seccomp_notify *notify; /* NULL: the plain filter */
	int listener;				/* the seccomp listener C2 handed over, -1 */
	struct lb_syscall_tally tally;
	struct lb_ll_audit ll;
	bool ll_on; /* listening: restrict_self gets LOG_NEW_EXEC_ON */
};
/* Before the clone: what to install (*ret_notify, NULL for the plain filter) and the restrict_self flags. */
void lb_refusals_begin(struct lb_run_refusals *rf, const struct lb_sandbox *sb, const struct sock_fprog **ret_notify,
		       unsigned *ret_landlock_flags);
/* The program is running as pid; listener is the seccomp listener it sent (or -1). */
void lb_refusals_started(struct lb_run_refusals *rf, pid_t pid, int listener);
/* Adds the pollfds to watch (at most 2) at pf; returns how many. */
size_t lb_refusals_pollfds(const struct lb_run_refusals *rf, struct pollfd *pf);
/* Serves what pf (as filled by lb_refusals_pollfds) reports: bounded work per call. */
void lb_refusals_serve(struct lb_run_refusals *rf, const struct pollfd *pf, size_t n);
/* After the run (failed: non-zero exit or a signal): waits (bounded) for late audit records, fills *ret, releases
 * everything. Idempotent. */
void lb_refusals_end(struct lb_run_refusals *rf, bool failed, struct lb_refusals *ret);

/* The sandbox's state directory for a name. */
int lb_state_paths(const char *run_dir, const char *name, char *state_dir, char *storage_mnt, char *root_mnt);

#endif

/*
 * runner.h — build a sandbox from the kernel and run programs in it. The public API of the runner library.
 *
 * Used by lensboxd (root, many threads) and the lensbox-runner tool (root). A sandbox is a long-lived init process
 * (pid 1 of its own user, mount, pid, ipc, uts, net and cgroup namespaces) over a new root: the image read-only,
 * the sandbox's storage at /sandbox, private /tmp, /proc, /dev. exec() enters those namespaces from the host side,
 * joins the sandbox's cgroup, drops to the sandbox uid with no capabilities, applies Landlock and seccomp, then
 * execve()s; every layer is in place before the program's first instruction, or nothing runs.
 *
 * Threading: functions on different sandboxes may run concurrently from different threads; calls on the same
 * sandbox must be serialised by the caller. Children are forked from a multithreaded process, so everything a
 * child needs is prepared before fork(); the child calls only async-signal-safe functions and raw syscalls.
 *
 * Errors: every function returns 0 or a negative errno and fills *err with a sentence naming the failed step.
 */
#ifndef LB_RUNNER_H
#define LB_RUNNER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "lb/error.h"
#include "lb/policy.h"
#include "lb/tier.h"

enum lb_cgroup_version { LB_CGROUP_NONE = 0, LB_CGROUP_V1 = 1, LB_CGROUP_V2 = 2 };

/* What the host can do, measured at start and reported by /v1/health and the runner's JSON. */
struct lb_host_facts {
	char kernel[65];
	int landlock_abi;	       /* 0: none */
	enum lb_cgroup_version cgroup; /* the hierarchy sandboxes' limits use */
	bool cgroup_v2_mounted;	       /* a v2 hierarchy exists even if v1 carries the controllers */
	char cgroup_v2_mount[256];     /* where, when cgroup_v2_mounted */
	bool cgroup_delegated;	       /* v2: our cgroup was delegated to us (systemd's Delegate=yes) */
	char cgroup_root[256];	       /* lensbox's own subtree, e.g. /sys/fs/cgroup/lensbox or the v1 "lensbox" */
	bool seccomp;		       /* SECCOMP_MODE_FILTER available */
	bool user_namespaces;	       /* root may create them (user.max_user_namespaces > 0) */
	bool loop_devices;	       /* /dev/loop-control usable */
	char why_not[256];	       /* empty when sandboxes can run here; else one sentence */
};

/* Measures the host against the policy (Landlock minimum ABI, cgroup controllers...). Never fails: what is
 * missing is written into facts->why_not. */
void lb_host_probe(const struct lb_policy *policy, struct lb_host_facts *facts);

/* Where lb_host_probe_at() looks. root: "" or NULL for the host; else a directory laid out like / whose proc/, sys/
 * and dev/ files are read instead (cgroups from root/proc/self/mountinfo). landlock_abi >= 0 replaces the kernel's
 * answer, < 0 asks the kernel. For `lensbox doctor`'s simulated hosts in tests; lensboxd uses lb_host_probe(). */
struct lb_host_probe_opts {
	const char *root;
	int landlock_abi;
};
void lb_host_probe_at(const struct lb_policy *policy, const struct lb_host_probe_opts *opts,
		      struct lb_host_facts *facts);

struct lb_sandbox_limits {
	uint32_t cpu_millicores; /* 0: unlimited */
	uint64_t memory_bytes;	 /* 0: unlimited; swap is always off */
	uint64_t pids;		 /* 0: unlimited */
	uint64_t disk_bytes;	 /* size of the storage filesystem */
	uint64_t tmp_bytes;	 /* /tmp */
	uint64_t shm_bytes;	 /* /dev/shm */
};

/* Besides its user (policy sandbox_uid, 1000), a sandbox maps root (0) and nobody (65534) inside, to two more host
 * ids of its own: host_uid + stride and host_uid + 2 * stride (the same for gids). The caller's allocation keeps
 * them the sandbox's alone (lensboxd's stride is uid_range_count). No process ever holds them (docs/isolation.md). */
#define LB_HOST_ID_STRIDE_DEFAULT 65536u

struct lb_sandbox_spec {
	const char *name;    /* ^[a-z0-9][a-z0-9._-]{0,62}$, names the cgroup, the mount and the run dir */
	const char *rootfs;  /* unpacked image root, read-only and shared */
	const char *storage; /* the sandbox's own persistent directory (holds its disk image) */
	/* Storage images formatted ahead of time: root's own 0700 directory on the storage's filesystem, made if
	 * missing (runner/disk_pool.c). NULL or "": none, a new storage is formatted by mke2fs when first started. */
	const char *disk_pool;
	/* The pool's refiller ends with the process that started it (lensboxd: a killed daemon leaves nothing running);
	 * false lets it finish after the caller exits (lensbox-runner). */
	bool disk_pool_bound;
	/* The caller removes the storage right after this sandbox's stop (lensbox-runner without --keep, on a storage
	 * it made): the filesystem is mounted without write barriers (nobarrier), so its shutdown at stop writes the
	 * journal and superblock to the image without flushing them through to the host's disk, which only a storage
	 * that must survive a host crash needs (runner/disk.c). Never for a storage anyone keeps. */
	bool storage_throwaway;
	/* A filesystem made ready ahead of time (lb_disk_ready_make): used when the storage does not exist yet and the
	 * disk limit is its size, instead of a pool image attached and mounted during the start. lb_sandbox_start owns
	 * it from the call on, used or not. NULL: none (always, in the musl build of the tool). */
	struct lb_disk_ready *disk_ready;
	/* A network namespace made ahead of time (lb_netns_make), for the sandbox to start in instead of making its own
	 * during the start. lb_sandbox_start owns the descriptor from the call on, used or not. 0: none. */
	int ready_netns;
	/* cgroup directories made ahead of time under this name (lb_ready_cgroup_make), renamed to the sandbox's by the
	 * start instead of made. lb_sandbox_start owns them from the call on: renamed, or removed (a start that fails
	 * before it has read the host's cgroup layout leaves them: lb_ready_cgroup_remove). NULL: none. */
	const char *ready_cgroup;
	/* The host's cgroup layout as lb_cgroups_find found it (once, for many starts). NULL: found by this start. */
	const struct lb_cg_host *cgroups;
	/* A root made by lb_shared_root_make for this rootfs, which the sandbox's root is a bind of. NULL: the start
	 * makes one of its own in the sandbox's state directory, gone at its stop. */
	const char *shared_root;
	const char *run_dir; /* runtime state, e.g. /run/lensbox; mounts live under run_dir/mnt/<name> */
	uid_t host_uid;	     /* unique to this sandbox; mapped to its user (policy sandbox_uid, 1000) */
	gid_t host_gid;
	uint32_t host_id_stride; /* nobody and root are host_uid + stride, + 2 * stride; 0: the default */
	const char *hostname;	 /* NULL: the name */
	struct lb_sandbox_limits limits;
	enum lb_tier network;
	const char *const *image_env; /* "KEY=VALUE" from the image config (PATH...), NULL-terminated, may be NULL */
	const struct lb_policy *policy;
	const char *resolv_conf; /* contents of /etc/resolv.conf (netfilter/ for packages and web); NULL: none */
	/* The caller's own work, done on its thread while the child builds the sandbox's root (the start would only
	 * wait then): called once, after the child is released and before the start returns; a negative return fails
	 * the start (its sentence in err). Not called when the start fails before that point. NULL: none. lensboxd
	 * records a new sandbox here. */
	int (*while_building)(void *arg, struct lb_error *err);
	void *while_building_arg;
};

struct lb_sandbox; /* opaque; owned by the caller between start and stop */

/* Creates cgroup, disk, namespaces and root; returns a running sandbox whose init waits for exec requests.
 * Starting again from the same storage gives back every file. Fails with -EEXIST (touching nothing) when a
 * cgroup of this name still holds processes (a running sandbox, or a crash's leftovers: lb_sandbox_cleanup), with
 * -EBUSY when the storage is still attached after 2 s, with -ENOTSUP when the kernel's Landlock ABI is below the
 * policy's minimum. On failure everything created is undone and *ret is untouched. The process's umask must let
 * others read and search (0022, as lensboxd and lensbox-runner set it at start) and must not change while any
 * start runs: the sandbox's uid reads the skeleton, /etc files and mount points the start creates. */
int lb_sandbox_start(const struct lb_sandbox_spec *spec, struct lb_sandbox **ret, struct lb_error *err);

/* The sandbox's network namespace (a new fd the caller closes) for netfilter/ to plug a veth into. */
int lb_sandbox_netns_fd(const struct lb_sandbox *sb);
/* Whether the sandbox's init has exited. It never does by itself: it was killed from outside (the host's root, or
 * the OOM killer despite its -1000), and the sandbox cannot run anything until it is stopped and started again. */
bool lb_sandbox_init_exited(const struct lb_sandbox *sb);
pid_t lb_sandbox_init_pid(const struct lb_sandbox *sb);
int lb_sandbox_landlock_abi(const struct lb_sandbox *sb); /* ABI enforced on programs */
enum lb_cgroup_version lb_sandbox_cgroup_version(const struct lb_sandbox *sb);
/* The host directory where the storage filesystem is mounted while the sandbox runs (for file transfer). */
const char *lb_sandbox_storage_mount(const struct lb_sandbox *sb);

struct lb_exec_spec {
	const char *const *argv; /* argv[0] is looked up in PATH inside the sandbox when it has no '/' */
	const char *const *env;	 /* extra "KEY=VALUE" on top of the clean environment; may be NULL */
	const char *cwd;	 /* NULL: /sandbox */
	uint32_t timeout_ms;	 /* 0: none */
	size_t stdout_limit;	 /* bytes kept from the start of stdout */
	size_t stderr_limit;	 /* bytes kept from the end of stderr */
	/* > 0: the run is cut short, as by its time limit, once this descriptor reports a hang-up (POLLHUP or
	 * POLLERR: the far end of a socket closed), e.g. the channel of a request whose client went away. 0: none. */
	int hangup_fd;
};

/* What the sandbox refused during one run, by kind. A kind whose _reported is false cannot be counted on this host
 * (lb_refusal_support() says why); its count is then 0 and means nothing. */
#define LB_REFUSED_SYSCALLS_MAX 8
struct lb_refused_syscall {
	char name[32]; /* "mount", or "syscall 123" when libseccomp has no name for it */
	uint64_t count;
};
struct lb_refusals {
	bool syscall_reported;
	uint64_t syscall; /* calls the seccomp profile refused with an errno other than ENOSYS (unknown calls) */
	struct lb_refused_syscall syscalls[LB_REFUSED_SYSCALLS_MAX]; /* the most frequent first */
	size_t n_syscalls;
	bool filesystem_reported; /* Landlock's audit records were read during the run (host audit on, ABI 7) */
	uint64_t filesystem;	  /* file accesses Landlock refused */
	bool audit_lost;	  /* records were dropped: the two counts above may be low */
};
/* Which kinds this host can report, for /v1/health: NULL when it can, else a sentence saying why not. policy may be
 * NULL (it did not load): syscalls then cannot be counted. */
struct lb_refusal_support {
	const char *syscall_why_not;
	const char *filesystem_why_not;
};
void lb_refusal_support(const struct lb_policy *policy, struct lb_refusal_support *ret);

struct lb_exec_result {
	int exit_code; /* -1 when killed by a signal */
	int signal;    /* 0 when it exited */
	bool timed_out;
	bool hung_up;	   /* spec.hangup_fd reported a hang-up and the run was killed for it */
	bool oom_killed;   /* the kernel OOM-killed a process of the sandbox during this run */
	bool pids_limited; /* a fork failed on the pids limit during this run */
	uint64_t wall_ms;
	uint64_t cpu_ms; /* user + system of every process of the run */
	uint64_t peak_memory_bytes;
	char *stdout_buf; /* first stdout_limit bytes, raw (caller sanitises for JSON); malloc'ed */
	size_t stdout_len;
	uint64_t stdout_total; /* every byte the program wrote */
	char *stderr_buf;      /* last stderr_limit bytes */
	size_t stderr_len;
	uint64_t stderr_total;
	struct lb_refusals refused;
};

/* Runs one program to completion (or its time limit); every process it left is killed when its main process
 * exits. A program that fails is a success here: its status is in the result. A setup step that fails (chdir,
 * execve of a missing program, ...) is an error naming the step, and nothing ran. On success *ret holds malloc'ed
 * buffers (lb_exec_result_free). */
int lb_sandbox_exec(struct lb_sandbox *sb, const struct lb_exec_spec *spec, struct lb_exec_result *ret,
		    struct lb_error *err);
void lb_exec_result_free(struct lb_exec_result *r);

/* Kills everything in the sandbox and releases namespaces, mounts, loop device and cgroups; storage stays.
 * Frees sb whatever happens. When it returns nothing of the sandbox runs and none of its mounts is visible; the
 * storage's shutdown (journal commit and flush to the host's disk) and the loop device's release finish a moment
 * later in a background flusher that holds the storage lock until then; start and lb_sandbox_destroy_storage wait
 * for it. */
int lb_sandbox_stop(struct lb_sandbox *sb, struct lb_error *err);

/* Removes the storage of a stopped sandbox (-EBUSY if its image is still attached after 2 s). */
int lb_sandbox_destroy_storage(const char *storage, struct lb_error *err);

/* A stopped sandbox's storage reached from the host without starting the sandbox (runner/storage.c): its filesystem
 * mounted nowhere (a detached mount, nosuid, nodev, noexec), its root given to the sandbox's host ids, for lensboxd
 * to read and write files as that uid. It holds the storage lock, so no start can mount the image at the same time
 * (a start waits up to 2 s for the lock: keep it short, or keep starts of that sandbox out, as lensboxd does with
 * the sandbox's turn). A new storage is made as a first start makes it (from the pool when it has one). */
struct lb_storage_spec {
	const char *storage;   /* as lb_sandbox_spec.storage */
	const char *disk_pool; /* as lb_sandbox_spec.disk_pool: a new storage takes an image from it */
	uint64_t disk_bytes;   /* 0: 1 GiB, as for a sandbox */
	uid_t host_uid;
	gid_t host_gid;
};
struct lb_storage {
	int root;   /* the filesystem's root directory (O_PATH-like, from fsmount); -1 when closed */
	int lock;   /* the storage lock */
	bool fresh; /* the storage was made now: the caller may refill the pool (lb_sandbox_refill_pool) */
};
int lb_storage_open(const struct lb_storage_spec *spec, struct lb_storage *ret, struct lb_error *err);
/* Closes the filesystem (every fd opened under root must be closed first), then the lock. Blocks for the
 * filesystem's shutdown (journal commit, flush through the loop device: 1-30 ms on a busy host): lensboxd calls it
 * off the request's path. */
void lb_storage_close(struct lb_storage *s);
/* Tops the pool up after a new storage took from it (runner/disk_pool.c); bound: the refiller ends with the caller.
 * Forks (a few ms in a large process): off the request's path too. */
int lb_sandbox_refill_pool(const char *pool, uint64_t disk_bytes, bool bound);

/* A network namespace for a sandbox, made ahead of time by a thread of the caller (root) and left on it:
 * runner/netns.c. Returns its descriptor (CLOEXEC, never 0-2), for lb_sandbox_spec.ready_netns, or a negative
 * errno; the calling thread stays in its own namespace (an error says when it could not). ~0.7 ms on a 2-core host. */
int lb_netns_make(struct lb_error *err);

/* The host's cgroup layout (which hierarchies carry which controllers, where: runner/cgroup.c), found once by a
 * long-lived caller and handed to each start (lb_sandbox_spec.cgroups) instead of each looking again (~0.1 ms: a
 * dozen statfs and stat calls). It stays true while the host's cgroup mounts do; lensboxd finds it at its start.
 * On success *ret is the caller's (lb_cgroups_free). */
struct lb_cg_host;
int lb_cgroups_find(struct lb_cg_host **ret, struct lb_error *err);
void lb_cgroups_free(struct lb_cg_host *host);

/* A sandbox's cgroup directories made ahead of time by the caller (root), for lb_sandbox_spec.ready_cgroup:
 * runner/cgroup_ready.c. cgroup v1 only (-ENOTSUP elsewhere: v2 renames no cgroup). ready is a name of the sandbox
 * name grammar that no sandbox uses and that the caller never reuses (-EEXIST when it exists). ~0.3 ms. */
int lb_ready_cgroup_make(const char *ready, struct lb_error *err);
/* Removes the directories of a ready name nobody took (they hold no process). */
int lb_ready_cgroup_remove(const char *ready, struct lb_error *err);
/* Removes every ready name beginning with prefix (what a crashed caller left); 0 on a host without v1. */
int lb_ready_cgroup_sweep(const char *prefix, struct lb_error *err);

/* A read-only root for the sandboxes of one image (runner/root_share.c): the image under a small skeleton as one
 * overlay, in a tmpfs of its own at dir (a path that does not exist yet; its parent is root's). A caller that starts
 * many sandboxes of an image makes one and names it in lb_sandbox_spec.shared_root, so their first runs find the
 * overlay's caches warm. ~0.3 ms. Removed (detached: sandboxes started on it keep theirs) by lb_shared_root_remove;
 * lb_shared_root_sweep removes every one under parent (what a crashed caller left). */
int lb_shared_root_make(const char *rootfs, const char *dir, struct lb_error *err);
int lb_shared_root_remove(const char *dir, struct lb_error *err);
int lb_shared_root_sweep(const char *parent, struct lb_error *err);

/* A new storage's filesystem ready ahead of time (runner/disk_ready.c, not in the musl build of the tool): an image
 * taken from the pool, attached and mounted nowhere (a detached mount only this object reaches), for a start to move
 * into place (lb_sandbox_spec.disk_ready). Making one takes ~1.5 ms: off any request's path. Freed unused, its image
 * goes back to the pool; if the process dies, the kernel shuts it down and the next refill gives it back. -ENOENT:
 * the pool has no image of that size now. */
struct lb_disk_ready;
int lb_disk_ready_make(const char *pool, uint64_t disk_bytes, struct lb_disk_ready **ret, struct lb_error *err);
uint64_t lb_disk_ready_bytes(const struct lb_disk_ready *r);
void lb_disk_ready_free(struct lb_disk_ready *r);

/* Reconciliation after a crash: kills processes left in the sandbox's cgroup, unmounts its storage mount and
 * detaches its loop device, removes its cgroups. Safe to call for a sandbox that left nothing. */
int lb_sandbox_cleanup(const char *name, const char *run_dir, struct lb_error *err);

/* Host disk space the storage uses (allocated blocks of its image). */
int lb_storage_usage(const char *storage, uint64_t *ret_bytes);

#endif

/*
 * isolate.c — the services processes: the resolver and the relay moved out of the caller (lensboxd, root) into
 * processes of their own unprivileged uid, so the parsers of a sandbox's DNS, TLS and HTTP bytes never run as root,
 * and a worker or supervisor that dies is replaced.
 *
 * Opt-in for the library (lb_net_config.services_uid; lensboxd sets it by default). Three processes:
 *
 *   caller (root) ──fork──> keeper (uid, one thread) ──fork──> supervisor (uid, one thread) ──fork──> worker (uid)
 *     binds both ports        holds the two sockets,           forks a worker, waits for it,       resolver + relay
 *     first, then forks       replaces the supervisor          replaces it when it ends            threads on the
 *     while single-threaded   when it ends                                                         inherited sockets
 *
 * Each replacement waits 100 ms, doubling to 5 s while the replaced keep dying within 1 s of starting (a crash loop,
 * reported in the shared status, never spun). lb_net_init() forks the keeper while the caller is still
 * single-threaded (it checks), and neither the keeper nor a supervisor ever starts a thread, so every process they
 * fork is a clean single-threaded copy of the caller as it was at start-up and may use malloc and threads. A
 * multithreaded caller never forks again: that is why the keeper, not the caller, replaces a supervisor. The keeper
 * and the supervisors keep the two sockets open, so the ports never go free while a worker or a supervisor is
 * replaced: a sandbox's query or connection waits in the socket's queue for the next worker, and no other local
 * program can take the port. The keeper is the one process whose death is final (the services then fail closed
 * until the caller starts them again): it parses nothing, holds nothing but the sockets and waits; only root or the
 * OOM killer can end it, as neither the worker (seccomp) nor a sandbox can signal it.
 *
 * The keeper, in order: points stdio at /dev/null and closes every inherited descriptor but its status pipe and
 * the two sockets; drops supplementary groups, gid and uid (which drops every capability); sets no_new_privs,
 * non-dumpable (no ptrace, also not by its workers) and parent-death SIGKILL; forks the first supervisor, which forks
 * the first worker, and reports its start (or the failed step) on the status pipe. Each supervisor and worker sets
 * parent-death SIGKILL too, so nothing of the services outlives the caller, and a worker loads its seccomp filter
 * (confine.c) before its first thread: it can signal no process but itself, and start no process, program or
 * namespace.
 *
 * What the processes share with the caller are anonymous MAP_SHARED pages: the slot table (the tier, written by the
 * caller; the refusal counter, written by the services) and the services' status (pids, restarts, crash loops),
 * which the caller only reports. The caller trusts nothing else from them: it kills only the keeper, its own child,
 * never a pid read from shared memory, so a compromised worker can at worst miscount, answer DNS wrongly for
 * sandboxes whose traffic nftables still confines, or keep the services down by crashing each new worker too.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "lb/cleanup.h"
#include "lb/fileio.h"

/* Descriptors in the supervisor and its workers. */
enum { FD_STATUS = 3, FD_RESOLVER = 4, FD_RELAY = 5, FD_FIRST_FREE = 6 };

#define START_TIMEOUT_MS  5000
#define RESTART_FIRST_MS  100
#define RESTART_MAX_MS	  5000
#define QUICK_DEATH_MS	  1000	/* ms: a child that served less doubles the delay before the next */
#define LIVED_LONG_ENOUGH 10000 /* ms: a child that served this long ends a reported crash loop */

struct status_msg {
	int code; /* 0 or a negative errno */
	char msg[LB_ERROR_MSG_MAX];
};

static bool single_threaded(void)
{
	_cleanup_free_ char *s = NULL;
	size_t len;
	if (lb_read_file_at(AT_FDCWD, "/proc/self/status", 1 << 16, &s, &len) < 0)
		return false;
	const char *t = strstr(s, "\nThreads:\t");
	return t && strtoul(t + 10, NULL, 10) == 1;
}

static void report(int fd, int code, const char *msg)
{
	struct status_msg m = { .code = code };
	snprintf(m.msg, sizeof(m.msg), "%s", msg ? msg : "");
	(void)!write(fd, &m, sizeof(m));
}

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000 };
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* Waits up to timeout_ms for one status message on fd: 0 with *m filled, or -ETIMEDOUT. */
static int read_status(int fd, int timeout_ms, struct status_msg *m)
{
	struct pollfd pf = { .fd = fd, .events = POLLIN };
	if (poll(&pf, 1, timeout_ms) <= 0 || read(fd, m, sizeof(*m)) != (ssize_t)sizeof(*m))
		return -ETIMEDOUT;
	m->msg[sizeof(m->msg) - 1] = '\0';
	return 0;
}

/* A worker: starts the two services on the supervisor's sockets, reports on fd, then serves until killed. */
static _Noreturn void worker_main(struct lb_net *ctx, int fd, pid_t supervisor)
{
	if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0 || getppid() != supervisor) {
		report(fd, -EIO, "the supervisor is gone");
		_exit(1);
	}
	/* Copies of the supervisor's: the services' threads take these, the supervisor keeps its own. */
	int resolver = fcntl(FD_RESOLVER, F_DUPFD_CLOEXEC, FD_FIRST_FREE);
	int relay = resolver < 0 ? -1 : fcntl(FD_RELAY, F_DUPFD_CLOEXEC, FD_FIRST_FREE);
	int e = errno;
	close(FD_RESOLVER);
	close(FD_RELAY);
	struct lb_error err = { 0 };
	int r = resolver < 0 || relay < 0 ? lb_error_set(&err, e, "copying the services' sockets") : 0;
	/* Before the first thread and the first byte from a sandbox (confine.c). */
	int abi = 0;
	if (r == 0 && (r = lb_services_confine(ntohs(ctx->upstream.sin_port), &abi, &err)) == 0)
		atomic_store(&ctx->services_status->landlock_abi, abi);
	if (r == 0)
		r = lb_resolver_start(ctx, TAKE_FD(resolver), &err);
	if (r == 0)
		r = lb_relay_start(ctx, TAKE_FD(relay), &err);
	if (resolver >= 0)
		close(resolver);
	if (relay >= 0)
		close(relay);
	report(fd, r, err.msg);
	close(fd);
	if (r < 0)
		_exit(1);
	for (;;)
		pause();
}

/* fork() with a status pipe: the child gets 0 and the pipe's write end in *ret_wr, the parent the child's pid and
 * the read end in *ret_rd; -errno (nothing left open) when the pipe or the fork fails. */
static pid_t fork_reporting(int *ret_rd, int *ret_wr)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	pid_t pid = fork();
	if (pid < 0) {
		int e = errno;
		close(p[0]);
		close(p[1]);
		return -e;
	}
	close(p[pid == 0 ? 0 : 1]);
	*ret_rd = pid == 0 ? -1 : p[0];
	*ret_wr = pid == 0 ? p[1] : -1;
	return pid;
}

/* Forks one worker and waits for its report: its pid, or a negative errno with msg filled (the worker is reaped). */
static pid_t start_worker(struct lb_net *ctx, char *msg, size_t size)
{
	pid_t self = getpid();
	int rd = -1, wr = -1;
	pid_t pid = fork_reporting(&rd, &wr);
	if (pid < 0) {
		snprintf(msg, size, "forking a worker");
		return pid;
	}
	if (pid == 0)
		worker_main(ctx, wr, self);
	struct status_msg m;
	int r = read_status(rd, START_TIMEOUT_MS, &m);
	close(rd);
	if (r == 0 && m.code == 0)
		return pid;
	snprintf(msg, size, "%s", r < 0 ? "the worker did not report within 5 s" : m.msg);
	kill(pid, SIGKILL);
	while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
		;
	return r < 0 ? r : m.code;
}

/* Waits for child (started by start) to end and starts another in its place, forever. The delay before the next
 * start is RESTART_FIRST_MS after a child that served QUICK_DEATH_MS or more, and doubles up to RESTART_MAX_MS while
 * they keep dying younger: a crash loop is slowed down, never spun. line->looping is set once the delay reaches its
 * maximum (six quick deaths in a row) and cleared by a child that served LIVED_LONG_ENOUGH; the caller reports a
 * crash loop while it is set and the child serving now is younger than that. also_clear (may be NULL) is zeroed
 * with each death: a supervisor takes its worker with it. */
static _Noreturn void replace_forever(struct lb_net *ctx, pid_t child, pid_t (*start)(struct lb_net *, char *, size_t),
				      struct lb_services_line *line, _Atomic int *also_clear)
{
	char msg[LB_ERROR_MSG_MAX];
	unsigned delay = RESTART_FIRST_MS;
	for (;;) {
		uint64_t born = now_ms();
		atomic_store(&line->born_ms, born);
		atomic_store(&line->pid, child);
		int status = 0;
		while (waitpid(child, &status, 0) < 0 && errno == EINTR)
			;
		atomic_store(&line->pid, 0);
		if (also_clear)
			atomic_store(also_clear, 0);
		atomic_store(&ctx->services_status->last_status, status);
		uint64_t lived = now_ms() - born;
		if (lived >= QUICK_DEATH_MS)
			delay = RESTART_FIRST_MS;
		if (lived >= LIVED_LONG_ENOUGH)
			atomic_store(&line->looping, false);
		for (;;) {
			sleep_ms(delay);
			delay = delay * 2 > RESTART_MAX_MS ? RESTART_MAX_MS : delay * 2;
			if (delay == RESTART_MAX_MS)
				atomic_store(&line->looping, true);
			child = start(ctx, msg, sizeof(msg));
			atomic_fetch_add(&line->restarts, 1);
			if (child > 0)
				break;
		}
	}
}

/* The supervisor: forks the worker and replaces it when it ends. One thread, never returns; dies with the keeper. */
static _Noreturn void supervisor_main(struct lb_net *ctx, int fd, pid_t keeper)
{
	if (fd != FD_STATUS)
		close(FD_STATUS); /* the keeper's first report pipe, still open when the first supervisor is forked */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0 || getppid() != keeper) {
		report(fd, -EIO, "the keeper is gone");
		_exit(1);
	}
	struct lb_services_status *st = ctx->services_status;
	char msg[LB_ERROR_MSG_MAX];
	pid_t w = start_worker(ctx, msg, sizeof(msg));
	if (w > 0)
		atomic_store(&st->worker.pid, w); /* before the report: the caller's health may look at once */
	report(fd, w < 0 ? w : 0, w < 0 ? msg : NULL);
	close(fd);
	if (w < 0)
		_exit(1);
	replace_forever(ctx, w, start_worker, &st->worker, NULL);
}

/* Forks one supervisor and waits for its report (it has a worker serving then): its pid, or a negative errno with
 * msg filled (the supervisor is reaped). */
static pid_t start_supervisor(struct lb_net *ctx, char *msg, size_t size)
{
	pid_t self = getpid();
	int rd = -1, wr = -1;
	pid_t pid = fork_reporting(&rd, &wr);
	if (pid < 0) {
		snprintf(msg, size, "forking the supervisor");
		return pid;
	}
	if (pid == 0)
		supervisor_main(ctx, wr, self);
	struct status_msg m;
	int r = read_status(rd, START_TIMEOUT_MS + 1000, &m);
	close(rd);
	if (r == 0 && m.code == 0) {
		atomic_store(&ctx->services_status->supervisor.pid, pid);
		return pid;
	}
	snprintf(msg, size, "%s", r < 0 ? "the supervisor did not report within 6 s" : m.msg);
	kill(pid, SIGKILL);
	while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
		;
	return r < 0 ? r : m.code;
}

/* The keeper: drops to uid/gid, then forks the supervisor and replaces it when it ends. Never returns, never starts
 * a thread, never reads a byte from a sandbox; the worker's seccomp filter keeps it from signalling either. */
static _Noreturn void keeper_main(struct lb_net *ctx, int status_fd, int resolver_fd, int relay_fd, pid_t parent,
				  uid_t uid, gid_t gid)
{
	int null = open("/dev/null", O_RDWR | O_CLOEXEC);
	/* Move the three descriptors to 3, 4, 5 (through numbers above every one of them, so none is overwritten). */
	int hi = FD_FIRST_FREE + 16;
	int s = fcntl(status_fd, F_DUPFD, hi), a = fcntl(resolver_fd, F_DUPFD, hi), b = fcntl(relay_fd, F_DUPFD, hi);
	if (null < 0 || s < 0 || a < 0 || b < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0 || dup2(null, 2) < 0 ||
	    dup2(s, FD_STATUS) < 0 || dup2(a, FD_RESOLVER) < 0 || dup2(b, FD_RELAY) < 0) {
		report(status_fd, -errno, "setting up the services' descriptors");
		_exit(1);
	}
	lb_close_fds_from(FD_FIRST_FREE); /* nothing of the caller's (its socket, its store) stays reachable */
	/* Dropping from root to uid/gid: setresuid() to a non-zero uid clears every capability set. */
	if (setgroups(0, NULL) < 0 || setresgid(gid, gid, gid) < 0 || setresuid(uid, uid, uid) < 0) {
		report(FD_STATUS, -errno, "dropping to the services uid");
		_exit(1);
	}
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 || prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0 ||
	    prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0) {
		report(FD_STATUS, -errno, "prctl");
		_exit(1);
	}
	if (getppid() != parent) /* the caller died before PDEATHSIG was set */
		_exit(1);
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);

	struct lb_services_status *st = ctx->services_status;
	char msg[LB_ERROR_MSG_MAX];
	pid_t sup = start_supervisor(ctx, msg, sizeof(msg));
	report(FD_STATUS, sup < 0 ? sup : 0, sup < 0 ? msg : NULL);
	close(FD_STATUS);
	if (sup < 0)
		_exit(1);
	replace_forever(ctx, sup, start_supervisor, &st->supervisor, &st->worker.pid);
}

int lb_services_spawn_isolated(struct lb_net *ctx, uid_t uid, gid_t gid, struct lb_error *err)
{
	if (!single_threaded())
		return lb_error_setx(
		    err, EBUSY,
		    "an isolated services process is forked, so lb_net_init() must run while the process "
		    "is single-threaded");
	void *page =
	    mmap(NULL, sizeof(*ctx->services_status), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (page == MAP_FAILED)
		return lb_error_set(err, errno, "mapping the services' status");
	ctx->services_status = page;
	/* Bound here, as root, before anything runs as uid: the ports are the services' from now on. */
	_cleanup_close_ int resolver = lb_service_bind(SOCK_DGRAM, ctx->resolver_port, err);
	if (resolver < 0)
		return lb_error_wrap(err, "starting the DNS resolver");
	_cleanup_close_ int relay = lb_service_bind(SOCK_STREAM, ctx->relay_port, err);
	if (relay < 0)
		return lb_error_wrap(err, "starting the packages relay");
	pid_t parent = getpid();
	int rd_fd = -1, wr = -1;
	pid_t pid = fork_reporting(&rd_fd, &wr);
	if (pid < 0)
		return lb_error_set(err, -pid, "forking the services process");
	if (pid == 0)
		keeper_main(ctx, wr, resolver, relay, parent, uid, gid);
	_cleanup_close_ int rd = rd_fd;
	_cleanup_pid_ pid_t child = pid; /* killed and reaped unless it reports success */
	struct status_msg m;
	if (read_status(rd, START_TIMEOUT_MS + 1000, &m) < 0)
		return lb_error_setx(err, ETIMEDOUT, "the services process did not report within 6 s");
	if (m.code < 0)
		return lb_error_setx(err, -m.code, "the services process failed: %s: %s", m.msg, strerror(-m.code));
	/* A pidfd of our own child: health looks through it without reaping, and the kill at the end cannot reach
	 * another process. */
	int pidfd = (int)syscall(SYS_pidfd_open, pid, 0u);
	if (pidfd < 0)
		return lb_error_set(err, errno, "pidfd_open of the services process");
	ctx->services_pidfd = pidfd;
	ctx->services_pid = TAKE_FD(child);
	return 0;
}

void lb_services_kill(struct lb_net *ctx)
{
	if (ctx->services_pid > 0) {
		/* Our own child, reaped only here: the pidfd (and the pid) are still the supervisor's. Its worker
		 * follows it (parent-death SIGKILL); the pid in the shared status is never used here. */
		syscall(SYS_pidfd_send_signal, ctx->services_pidfd, SIGKILL, NULL, 0u);
		while (waitpid(ctx->services_pid, NULL, 0) < 0 && errno == EINTR)
			;
		close(ctx->services_pidfd);
		ctx->services_pid = 0;
		ctx->services_pidfd = -1;
	}
	if (ctx->services_status) {
		munmap(ctx->services_status, sizeof(*ctx->services_status));
		ctx->services_status = NULL;
	}
}

/* The keeper has not exited (its pidfd is not readable yet). */
static bool keeper_running(struct lb_net *ctx)
{
	if (ctx->services_pid <= 0)
		return false;
	struct pollfd pf = { .fd = ctx->services_pidfd, .events = POLLIN };
	return poll(&pf, 1, 0) == 0;
}

bool lb_services_alive(struct lb_net *ctx)
{
	return keeper_running(ctx) && atomic_load(&ctx->services_status->worker.pid) > 0;
}

/* A crash loop of line: its replacements are RESTART_MAX_MS apart, and the one serving now (if any) is young. */
static bool crash_loop(struct lb_services_line *line)
{
	return atomic_load(&line->looping) &&
	       (atomic_load(&line->pid) <= 0 || now_ms() - atomic_load(&line->born_ms) < LIVED_LONG_ENOUGH);
}

void lb_services_state(struct lb_net *ctx, struct lb_net_health *h)
{
	struct lb_services_status *st = ctx->services_status;
	bool up = ctx->services_pid > 0 && st;
	h->services_keeper_pid = up ? (unsigned)ctx->services_pid : 0;
	h->services_supervised = up && keeper_running(ctx);
	int s = up ? atomic_load(&st->supervisor.pid) : 0, w = up ? atomic_load(&st->worker.pid) : 0;
	h->services_pid = s > 0 ? (unsigned)s : 0;
	h->services_worker_pid = w > 0 ? (unsigned)w : 0;
	h->services_restarts = up ? atomic_load(&st->worker.restarts) : 0;
	h->services_supervisor_restarts = up ? atomic_load(&st->supervisor.restarts) : 0;
	h->services_crash_loop = up && (crash_loop(&st->worker) || crash_loop(&st->supervisor));
}

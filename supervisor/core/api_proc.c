/*
 * api_proc.c — the API process: started by the core, watched, and replaced when it ends.
 *
 * Runs in the core (root): lbd_api_proc_start() on the main thread at start, then one watcher thread. The API
 * process is this same binary, exec'd afresh (never a bare fork of a multi-threaded process) with exactly three
 * descriptors: the listening socket (3), its end of the control socket (4) and a sealed memfd holding the parsed
 * configuration (5). It drops to api_user and confines itself before it reads a byte (api/confine.c).
 *
 * Invariants:
 *   - The core holds no listening socket: it creates it (root owns its directory), hands it over at exec and closes
 *     its own copy at once. When the API process is replaced, the socket is created again for the new one.
 *   - Either process notices the other's end: the core sees the control socket close (lbd_serve_control returns)
 *     and reaps the child; the API process has PR_SET_PDEATHSIG(SIGKILL) and also watches the control socket.
 *   - A replacement waits (1 s, doubling up to 30 s while it keeps ending within a minute), so a crash loop is
 *     visible in the log and in /v1/health's api_process.restarts, not spun. An API process that exits 78 (it could
 *     not read its configuration or confine itself) is not replaced: nothing would change, so lensboxd stops.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "api.h"
#include "core.h"
#include "lb/cleanup.h"
#include "lb/log.h"

#define EXIT_CANNOT_SERVE 78

struct lbd_api_proc {
	struct lbd *d;
	int exe_fd;    /* this binary, opened at start (an upgrade replacing the file does not change what runs) */
	int config_fd; /* sealed memfd: d->cfg */
	pthread_t watcher;
	pthread_mutex_t mu;
	pid_t pid;	/* under mu; 0 when none */
	int pidfd;	/* the watcher's: the API process's pidfd */
	int control_fd; /* the core's end; the watcher's */
	atomic_bool stopping;
	atomic_bool cannot_serve; /* the API process exited 78 */
};

extern char **environ;

/* In the child, between fork and exec: only async-signal-safe calls. The three descriptors are first moved above
 * the target numbers, so none of them is overwritten by another's dup2. */
static void exec_child(const struct lbd_api_proc *p, int listen_fd, int control_fd)
{
	int fds[4] = { listen_fd, control_fd, p->config_fd, p->exe_fd };
	for (int i = 0; i < 4; i++)
		if ((fds[i] = fcntl(fds[i], F_DUPFD, 10)) < 0)
			_exit(127);
	for (int i = 0; i < 3; i++)
		if (dup2(fds[i], LBD_API_LISTEN_FD + i) < 0)
			_exit(127);
	/* The binary at the next number, close-on-exec: execveat() runs it and the new program does not keep it. */
	const int exe = LBD_API_CONFIG_FD + 1;
	if (dup3(fds[3], exe, O_CLOEXEC) < 0 || close_range((unsigned)exe + 1, ~0U, 0) < 0)
		_exit(127);
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
	char *const argv[] = { "lensboxd-api", "--api-process", NULL };
	execveat(exe, "", argv, environ, AT_EMPTY_PATH);
	_exit(127);
}

/* A new API process on a freshly created socket. */
static int spawn(struct lbd_api_proc *p, struct lb_error *err)
{
	_cleanup_close_ int listen_fd = lbd_socket_create(&p->d->cfg, err);
	if (listen_fd < 0)
		return lb_error_wrap(err, "creating the API socket");
	int pair[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) < 0)
		return lb_error_set(err, errno, "creating the control socket");
	pid_t pid = fork();
	if (pid < 0) {
		int e = errno;
		close(pair[0]);
		close(pair[1]);
		return lb_error_set(err, e, "starting the API process");
	}
	if (pid == 0)
		exec_child(p, listen_fd, pair[1]);
	close(pair[1]);
	/* Safe: pid is our own child, not yet reaped, so the pidfd cannot name another process. */
	p->pidfd = pidfd_open(pid, 0);
	pthread_mutex_lock(&p->mu);
	p->pid = pid;
	pthread_mutex_unlock(&p->mu);
	p->control_fd = pair[0];
	char fields[64];
	snprintf(fields, sizeof(fields), "component=core api_pid=%d", (int)pid);
	lb_info(fields, "API process started");
	return 0; /* listen_fd closes here: the core keeps no listening socket */
}

/* Reaps the API process; its wait status. */
static int reap(struct lbd_api_proc *p)
{
	pthread_mutex_lock(&p->mu);
	pid_t pid = p->pid;
	pthread_mutex_unlock(&p->mu);
	int status = 0;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	pthread_mutex_lock(&p->mu);
	p->pid = 0;
	pthread_mutex_unlock(&p->mu);
	return status;
}

static void sleep_unless_stopping(struct lbd_api_proc *p, unsigned seconds)
{
	for (unsigned i = 0; i < seconds * 10 && !atomic_load(&p->stopping); i++)
		usleep(100 * 1000);
}

static void *watch(void *arg)
{
	struct lbd_api_proc *p = arg;
	unsigned backoff = 1;
	for (;;) {
		uint64_t started = lbd_mono_ms();
		int r = lbd_serve_control(p->d, p->control_fd, p->pidfd);
		close(p->control_fd);
		p->control_fd = -1;
		if (p->pidfd >= 0)
			close(p->pidfd);
		p->pidfd = -1;
		if (r < 0)
			lb_error("component=core", "reading the control socket failed: %s", strerror(-r));
		int status = reap(p);
		if (atomic_load(&p->stopping))
			return NULL;
		char fields[96];
		snprintf(fields, sizeof(fields), "component=core exit_status=%d signal=%d",
			 WIFEXITED(status) ? WEXITSTATUS(status) : -1, WIFSIGNALED(status) ? WTERMSIG(status) : 0);
		if (WIFEXITED(status) && WEXITSTATUS(status) == EXIT_CANNOT_SERVE) {
			lb_error(fields, "the API process cannot serve (see its message above): lensboxd stops");
			atomic_store(&p->cannot_serve, true);
			kill(getpid(), SIGTERM);
			return NULL;
		}
		backoff = lbd_mono_ms() - started > 60000 ? 1 : backoff;
		lb_error(fields, "the API process ended: replacing it in %u s", backoff);
		atomic_fetch_add(&p->d->metrics.api_restarts, 1);
		for (;;) {
			sleep_unless_stopping(p, backoff);
			backoff = backoff * 2 > 30 ? 30 : backoff * 2;
			if (atomic_load(&p->stopping))
				return NULL;
			struct lb_error err = { 0 };
			if (spawn(p, &err) == 0)
				break;
			lb_error("component=core", "replacing the API process failed: %s", err.msg);
		}
	}
}

int lbd_api_proc_start(struct lbd *d, struct lbd_api_proc **ret, struct lb_error *err)
{
	struct lbd_api_proc *p = calloc(1, sizeof(*p));
	if (!p)
		return lb_error_set(err, ENOMEM, "allocating the API process's state");
	p->d = d;
	p->control_fd = -1;
	pthread_mutex_init(&p->mu, NULL);
	int r;
	p->exe_fd = open("/proc/self/exe", O_PATH | O_CLOEXEC);
	if (p->exe_fd < 0) {
		r = lb_error_set(err, errno, "opening /proc/self/exe");
		goto fail;
	}
	p->config_fd = lbp_memfd("lensboxd-config", &d->cfg, sizeof(d->cfg));
	if (p->config_fd < 0) {
		r = lb_error_set(err, p->config_fd, "passing the configuration to the API process");
		goto fail;
	}
	r = spawn(p, err);
	if (r < 0)
		goto fail;
	r = pthread_create(&p->watcher, NULL, watch, p);
	if (r != 0) {
		kill(p->pid, SIGKILL);
		reap(p);
		r = lb_error_set(err, r, "starting the API process's watcher");
		goto fail;
	}
	*ret = p;
	return 0;
fail:
	if (p->exe_fd > 0)
		close(p->exe_fd);
	if (p->config_fd > 0)
		close(p->config_fd);
	if (p->control_fd >= 0)
		close(p->control_fd);
	free(p);
	return r;
}

pid_t lbd_api_proc_pid(struct lbd_api_proc *p)
{
	pthread_mutex_lock(&p->mu);
	pid_t pid = p->pid;
	pthread_mutex_unlock(&p->mu);
	return pid;
}

int lbd_api_proc_stop(struct lbd_api_proc *p)
{
	if (!p)
		return 0;
	atomic_store(&p->stopping, true);
	pthread_mutex_lock(&p->mu);
	if (p->pid > 0)
		kill(p->pid, SIGTERM); /* it stops accepting and lets its requests finish (up to 80 s) */
	pthread_mutex_unlock(&p->mu);
	pthread_join(p->watcher, NULL);
	unlink(p->d->cfg.socket_path);
	/* Replies the core is still writing (a run that finished as the API process went) get a moment. */
	for (int i = 0; i < 50 && atomic_load(&p->d->metrics.channels) > 0; i++)
		usleep(100 * 1000);
	close(p->exe_fd);
	close(p->config_fd);
	int r = atomic_load(&p->cannot_serve) ? -EPERM : 0;
	free(p);
	return r;
}

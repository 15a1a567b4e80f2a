/*
 * main.c — the API process: from the exec by the core to an orderly stop.
 *
 * Runs as root only until lbd_api_confine() returns, and as api_user, confined, after. Order: the configuration
 * from the core's memfd (LBD_API_CONFIG_FD) -> logging -> signals blocked -> confinement (a failure exits 78, which
 * the core reads as "cannot serve": it stops rather than restart in a loop) -> the parent-death signal (the core's
 * end is the API process's end) -> libmicrohttpd on LBD_API_LISTEN_FD -> wait for SIGTERM/SIGINT, or for the core to
 * close the control socket. SIGTERM stops accepting and lets requests in progress finish (lbd_http_stop).
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "api.h"
#include "lb/log.h"

#define EXIT_CANNOT_SERVE 78 /* EX_CONFIG: the core stops instead of starting another */

static int read_config(struct lbd_config *cfg)
{
	struct stat st;
	if (fstat(LBD_API_CONFIG_FD, &st) < 0 || st.st_size != (off_t)sizeof(*cfg))
		return -EINVAL;
	if (pread(LBD_API_CONFIG_FD, cfg, sizeof(*cfg), 0) != (ssize_t)sizeof(*cfg))
		return -EIO;
	close(LBD_API_CONFIG_FD);
	return 0;
}

/* Until a stop signal (0) or the core's end (1). */
static int wait_for_end(int control_fd)
{
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	int sfd = signalfd(-1, &set, SFD_CLOEXEC);
	struct pollfd p[2] = { { .fd = sfd, .events = POLLIN }, { .fd = control_fd, .events = 0 } };
	for (;;) {
		if (poll(p, sfd >= 0 ? 2 : 1, -1) < 0 && errno != EINTR)
			return 1;
		if (p[1].revents & (POLLHUP | POLLERR)) {
			lb_error("component=api", "the core closed the control socket: the API process ends");
			return 1;
		}
		if (sfd >= 0 && (p[0].revents & POLLIN)) {
			struct signalfd_siginfo si;
			if (read(sfd, &si, sizeof(si)) == (ssize_t)sizeof(si) && si.ssi_signo != SIGHUP) {
				lb_info("component=api", "signal %u: stopping", si.ssi_signo);
				return 0;
			}
		}
	}
}

int lbd_api_main(void)
{
	static struct lbd_api a; /* the process's context: static only for its size */
	if (read_config(&a.cfg) < 0) {
		fprintf(stderr, "lensboxd (api): the configuration from the core could not be read\n");
		return EXIT_CANNOT_SERVE;
	}
	a.control_fd = LBD_API_CONTROL_FD;
	pthread_mutex_init(&a.channels_mu, NULL);
	lb_log_set_level(a.cfg.log_level);
	prctl(PR_SET_NAME, "lensboxd-api", 0, 0, 0);
	tzset(); /* the time zone is read now: no file can be opened once confined */
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN); /* a client that disconnects must not end the process */

	struct lb_error err = { 0 };
	if (lbd_api_confine(&a.cfg, &err) < 0) {
		lb_error("component=api", "the API process cannot confine itself: %s", err.msg);
		return EXIT_CANNOT_SERVE;
	}
	/* lbd_api_confine() set the parent-death signal: when the core ends, so does this process. The core may have
	 * ended before that: then this process was reparented already. */
	if (getppid() == 1)
		return 1;

	struct lbd_http *http = NULL;
	if (lbd_http_start(&a, LBD_API_LISTEN_FD, &http, &err) < 0) {
		lb_error("component=api", "%s", err.msg);
		return EXIT_CANNOT_SERVE;
	}
	uid_t uid = getuid();
	char fields[96];
	snprintf(fields, sizeof(fields), "component=api uid=%u", (unsigned)uid);
	lb_info(fields, "API process serving");
	int status = wait_for_end(a.control_fd);
	if (status == 0)
		lbd_http_stop(http);
	return status;
}

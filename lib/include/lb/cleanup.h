/*
 * cleanup.h — scope-bound release of memory, file descriptors, streams and child processes.
 *
 * Used by every lensbox process. A variable declared with one of the _cleanup_*_ attributes is released when it
 * leaves scope; ownership is handed over explicitly with TAKE_PTR()/TAKE_FD(), which return the value and reset the
 * variable so nothing is released twice. Every destructor accepts the "empty" value (NULL, -1, 0).
 */
#ifndef LB_CLEANUP_H
#define LB_CLEANUP_H

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

static inline void lb_freep(void *p)
{
	free(*(void **)p);
}

static inline void lb_closep(int *fd)
{
	if (*fd >= 0) {
		int saved = errno;
		close(*fd);
		errno = saved;
	}
}

static inline void lb_fclosep(FILE **f)
{
	if (*f)
		fclose(*f);
}

static inline void lb_closedirp(DIR **d)
{
	if (*d)
		closedir(*d);
}

/* A child that was started but never handed over is killed and reaped, so a failed setup never leaks a process. */
static inline void lb_killpidp(pid_t *pid)
{
	if (*pid > 0) {
		int saved = errno;
		kill(*pid, SIGKILL);
		while (waitpid(*pid, NULL, 0) < 0 && errno == EINTR)
			;
		errno = saved;
	}
}

#define _cleanup_free_	   __attribute__((cleanup(lb_freep)))
#define _cleanup_close_	   __attribute__((cleanup(lb_closep)))
#define _cleanup_fclose_   __attribute__((cleanup(lb_fclosep)))
#define _cleanup_closedir_ __attribute__((cleanup(lb_closedirp)))
#define _cleanup_pid_	   __attribute__((cleanup(lb_killpidp)))

#define TAKE_PTR(p)                          \
	({                                   \
		__typeof__(p) _taken_ = (p); \
		(p) = NULL;                  \
		_taken_;                     \
	})

#define TAKE_FD(fd)                    \
	({                             \
		int _taken_fd_ = (fd); \
		(fd) = -1;             \
		_taken_fd_;            \
	})

#define LB_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#endif

/*
 * lensbox-init — pid 1 of every sandbox: it reaps orphans and does nothing else, forever.
 *
 * Runs inside the sandbox (all its namespaces, its pivoted root) as the sandbox's uid with every capability set
 * empty, no_new_privs and Landlock-free (programs' Landlock domains exclude it, so they cannot signal or trace it).
 * The runner's first child builds the sandbox, drops privileges and then execveat()s this static binary from a sealed
 * memfd, so pid 1 holds nothing of the caller: no copy of lensboxd's memory, no descriptor but the report pipe
 * (argv[1]), which it answers 'R' on and closes. Invariants: non-dumpable before anything else; every signal
 * blocked (SIGKILL from the host still ends it, and with it the pid namespace); no descriptor open while it waits.
 */
#include "../report.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	/* Dumpable is reset by execve: clear it before anything, so no process of the sandbox may trace us or
	 * open our /proc files. */
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
		return 1;
	sigset_t all;
	sigfillset(&all);
	if (sigprocmask(SIG_SETMASK, &all, NULL) < 0)
		return 1;
	if (argc == 2) {
		char *end;
		long fd = strtol(argv[1], &end, 10);
		if (*end == '\0' && fd > 2 && fd < 1024) {
			struct lb_child_report rep;
			memset(&rep, 0, sizeof(rep));
			rep.kind = 'R';
			ssize_t w;
			do
				w = write((int)fd, &rep, sizeof(rep));
			while (w < 0 && errno == EINTR);
		}
	}
	syscall(SYS_close_range, 0u, ~0u, 0u);
	sigset_t chld;
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	for (;;) {
		while (waitpid(-1, NULL, WNOHANG | __WALL) > 0)
			;
		siginfo_t si;
		sigwaitinfo(&chld, &si);
	}
}

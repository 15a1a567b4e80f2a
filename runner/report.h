/*
 * report.h — the one message a child of the runner sends its parent through a CLOEXEC pipe (exec.c: a socket pair).
 * Shared by the runner's children (sandbox.c, exec.c, running in the sandbox's namespaces) and the static
 * lensbox-init (init/), so it is plain fixed-size data. kind 'R': the sandbox is ready; 'N': the sandbox's first
 * process has its own mount namespace (sandbox.c); 'S': `status` is the program's wait status; 'P': `status` is the
 * program's pid (exec.c); 'L': the seccomp listener comes with it (SCM_RIGHTS, exec.c); 'E': the step named in `step`
 * (NUL-terminated) failed with errno `err`.
 */
#ifndef LB_RUNNER_REPORT_H
#define LB_RUNNER_REPORT_H

#include <stdint.h>

struct lb_child_report {
	int32_t kind;
	int32_t err;
	int32_t status;
	char step[52];
};

#endif

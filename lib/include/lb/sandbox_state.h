/*
 * sandbox_state.h — whether a sandbox is running: the one definition every part uses (store, core, API answers).
 *
 * Pure data and two lookups; no privilege, no state. An unknown name is refused (-EINVAL) everywhere the same way:
 * the store does not read a state it does not know as `stopped`.
 */
#ifndef LB_SANDBOX_STATE_H
#define LB_SANDBOX_STATE_H

enum lb_sandbox_state {
	LB_SANDBOX_STOPPED = 0, /* its files kept, no process */
	LB_SANDBOX_RUNNING = 1, /* started: its init and mounts exist */
	LB_SANDBOX_STATE_COUNT
};

/* "stopped", "running"; NULL for a value outside the enum. */
const char *lb_sandbox_state_name(enum lb_sandbox_state s);
/* The state called name, into *ret; -EINVAL (ret untouched) for anything else, NULL included. */
int lb_sandbox_state_parse(const char *name, enum lb_sandbox_state *ret);

#endif

/*
 * landlock.h — a Landlock domain with no filesystem access (lib/landlock.c).
 */
#ifndef LB_LANDLOCK_H
#define LB_LANDLOCK_H

#include <stddef.h>
#include <stdint.h>

#include "lb/error.h"

/* Enters a domain that handles every filesystem right of the kernel's ABI and grants none, refuses TCP bind and
 * allows TCP connect only to connect_ports (ABI 4), and scopes signals and abstract Unix sockets (ABI 6). *ret_abi:
 * the ABI enforced; 0 when the kernel has no Landlock (nothing done, 0 returned: the caller reports it). */
int lb_landlock_deny_all(const uint16_t *connect_ports, size_t n_ports, int *ret_abi, struct lb_error *err);

#endif

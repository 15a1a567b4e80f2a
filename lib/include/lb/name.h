/*
 * name.h — a sandbox name's grammar, the one definition every part checks against: ^[a-z0-9][a-z0-9._-]{0,62}$.
 *
 * Pure function; any process, no privilege. A name names a cgroup, mount points and a storage directory, so it can
 * never hold a '/', start with '.', be empty or be longer than LB_NAME_MAX.
 */
#ifndef LB_NAME_H
#define LB_NAME_H

#include <stdbool.h>

#define LB_NAME_MAX 63

/* True when name (NUL-terminated within LB_NAME_MAX + 1 bytes) matches the grammar; false for NULL. */
bool lb_sandbox_name_valid(const char *name);

#endif

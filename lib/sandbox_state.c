/*
 * sandbox_state.c — the sandbox state's name table (lb/sandbox_state.h). Pure functions: any process, no privilege.
 */
#include "lb/sandbox_state.h"

#include <errno.h>
#include <string.h>

static const char *const names[LB_SANDBOX_STATE_COUNT] = {
	[LB_SANDBOX_STOPPED] = "stopped",
	[LB_SANDBOX_RUNNING] = "running",
};

const char *lb_sandbox_state_name(enum lb_sandbox_state s)
{
	return (unsigned)s < LB_SANDBOX_STATE_COUNT ? names[s] : NULL;
}

int lb_sandbox_state_parse(const char *name, enum lb_sandbox_state *ret)
{
	for (unsigned s = 0; name && s < LB_SANDBOX_STATE_COUNT; s++)
		if (strcmp(name, names[s]) == 0) {
			*ret = (enum lb_sandbox_state)s;
			return 0;
		}
	return -EINVAL;
}

/*
 * tier.c — the network tier's name table (lb/tier.h). Pure functions: any process, no privilege.
 */
#include "lb/tier.h"

#include <errno.h>
#include <string.h>

static const char *const names[LB_TIER_COUNT] = {
	[LB_TIER_OFF] = "off",
	[LB_TIER_PACKAGES] = "packages",
	[LB_TIER_WEB] = "web",
};

const char *lb_tier_name(enum lb_tier t)
{
	return (unsigned)t < LB_TIER_COUNT ? names[t] : NULL;
}

int lb_tier_parse(const char *name, enum lb_tier *ret)
{
	for (unsigned t = 0; name && t < LB_TIER_COUNT; t++)
		if (strcmp(name, names[t]) == 0) {
			*ret = (enum lb_tier)t;
			return 0;
		}
	return -EINVAL;
}

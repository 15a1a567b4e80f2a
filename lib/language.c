/*
 * language.c — the run language's name table (lb/language.h). Pure functions: any process, no privilege.
 */
#include "lb/language.h"

#include <errno.h>
#include <string.h>

static const char *const names[LB_LANGUAGE_COUNT] = {
	[LB_LANGUAGE_PYTHON] = "python",
	[LB_LANGUAGE_BASH] = "bash",
};

const char *lb_language_name(enum lb_language l)
{
	return (unsigned)l < LB_LANGUAGE_COUNT ? names[l] : NULL;
}

int lb_language_parse(const char *name, enum lb_language *ret)
{
	for (unsigned l = 0; name && l < LB_LANGUAGE_COUNT; l++)
		if (strcmp(name, names[l]) == 0) {
			*ret = (enum lb_language)l;
			return 0;
		}
	return -EINVAL;
}

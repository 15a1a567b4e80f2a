/*
 * name.c — the sandbox name's grammar (lb/name.h). Pure function: any process, no privilege.
 */
#include "lb/name.h"

#include <string.h>

bool lb_sandbox_name_valid(const char *name)
{
	if (!name)
		return false;
	size_t n = strnlen(name, LB_NAME_MAX + 1);
	if (n == 0 || n > LB_NAME_MAX)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = name[i];
		bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
		if (!alnum && (i == 0 || (c != '.' && c != '_' && c != '-')))
			return false;
	}
	return true;
}

/*
 * fuzz_landlock_rules.c — libFuzzer target for the line-format policy parsers (landlock.rules, limits.conf):
 * the first byte picks the parser, the rest is the file. Built only with -DLENSBOX_FUZZ=ON and clang;
 * seeds in policy/fuzz-corpus/rules.
 */
#include "lb/policy-parse.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1 || size > 65536)
		return 0;
	char *text = malloc(size);
	if (!text)
		return 0;
	memcpy(text, data + 1, size - 1);
	text[size - 1] = '\0';
	struct lb_error err = { 0 };
	switch (data[0] % 2) {
	case 0: {
		struct lb_landlock_policy p = { 0 };
		if (lb_landlock_parse(text, "fuzz.rules", &p, &err) == 0)
			lb_landlock_policy_clear(&p);
		break;
	}
	default: {
		struct lb_limits_policy l;
		(void)lb_limits_parse(text, "fuzz.conf", &l, &err);
		break;
	}
	}
	free(text);
	return 0;
}

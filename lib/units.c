/*
 * units.c — parsers for sizes, CPU amounts and durations (see units.h). Pure; these read strings that come from
 * API requests and config files, so every path rejects trailing garbage, signs and overflow.
 */
#include "lb/units.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* Parses "123" or "123.456" into an integer part and a fraction scaled to 1e9, requiring at least one digit. */
static int parse_decimal(const char **sp, uint64_t *ret_int, uint64_t *ret_frac_e9, int *ret_has_frac)
{
	const char *s = *sp;
	uint64_t v = 0, frac = 0, scale = 100000000;
	int digits = 0, has_frac = 0;
	while (*s >= '0' && *s <= '9') {
		if (v > (UINT64_MAX - 9) / 10)
			return -ERANGE;
		v = v * 10 + (uint64_t)(*s - '0');
		s++;
		digits++;
	}
	if (*s == '.') {
		s++;
		has_frac = 1;
		int fdigits = 0;
		while (*s >= '0' && *s <= '9') {
			if (fdigits < 9) {
				frac += (uint64_t)(*s - '0') * scale;
				scale /= 10;
			}
			s++;
			fdigits++;
		}
		if (fdigits == 0)
			return -EINVAL;
	}
	if (digits == 0)
		return -EINVAL;
	*sp = s;
	*ret_int = v;
	*ret_frac_e9 = frac;
	*ret_has_frac = has_frac;
	return 0;
}

static int scale_value(uint64_t v, uint64_t frac_e9, uint64_t mult, uint64_t *ret)
{
	if (mult && v > UINT64_MAX / mult)
		return -ERANGE;
	uint64_t whole = v * mult;
	/* frac_e9 * mult / 1e9 without overflow for mult up to 2^40 */
	unsigned __int128 f = (unsigned __int128)frac_e9 * mult / 1000000000u;
	if (whole > UINT64_MAX - (uint64_t)f)
		return -ERANGE;
	*ret = whole + (uint64_t)f;
	return 0;
}

int lb_parse_size(const char *s, uint64_t *ret_bytes)
{
	static const struct {
		const char *suffix;
		uint64_t mult;
	} units[] = {
		{ "", 1 },	     { "B", 1 },	   { "Ki", 1ull << 10 },      { "K", 1ull << 10 },
		{ "k", 1000 },	     { "Mi", 1ull << 20 }, { "M", 1000000 },	      { "Gi", 1ull << 30 },
		{ "G", 1000000000 }, { "Ti", 1ull << 40 }, { "T", 1000000000000ull },
	};
	if (!s)
		return -EINVAL;
	uint64_t v, frac;
	int has_frac;
	int r = parse_decimal(&s, &v, &frac, &has_frac);
	if (r < 0)
		return r;
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (strcmp(s, units[i].suffix) != 0)
			continue;
		if (has_frac && units[i].mult == 1)
			return -EINVAL; /* fractional bytes */
		return scale_value(v, frac, units[i].mult, ret_bytes);
	}
	return -EINVAL;
}

int lb_parse_cpu(const char *s, uint32_t *ret_millicores)
{
	if (!s)
		return -EINVAL;
	uint64_t v, frac, out;
	int has_frac;
	int r = parse_decimal(&s, &v, &frac, &has_frac);
	if (r < 0)
		return r;
	if (strcmp(s, "m") == 0) {
		if (has_frac)
			return -EINVAL;
		out = v;
	} else if (*s == '\0') {
		r = scale_value(v, frac, 1000, &out);
		if (r < 0)
			return r;
		if (frac % 1000000 != 0)
			return -EINVAL; /* finer than a millicore */
	} else {
		return -EINVAL;
	}
	if (out > UINT32_MAX)
		return -ERANGE;
	*ret_millicores = (uint32_t)out;
	return 0;
}

int lb_parse_duration(const char *s, uint64_t *ret_seconds)
{
	if (!s)
		return -EINVAL;
	uint64_t v, frac;
	int has_frac;
	int r = parse_decimal(&s, &v, &frac, &has_frac);
	if (r < 0)
		return r;
	if (has_frac)
		return -EINVAL;
	uint64_t mult;
	if (*s == '\0' || strcmp(s, "s") == 0)
		mult = 1;
	else if (strcmp(s, "m") == 0)
		mult = 60;
	else if (strcmp(s, "h") == 0)
		mult = 3600;
	else if (strcmp(s, "d") == 0)
		mult = 86400;
	else
		return -EINVAL;
	return scale_value(v, 0, mult, ret_seconds);
}

char *lb_format_size(uint64_t bytes, char *buf, size_t size)
{
	static const char *const names[] = { "Ki", "Mi", "Gi", "Ti" };
	int unit = -1;
	uint64_t v = bytes;
	while (unit < 3 && v >= 1024 && v % 1024 == 0) {
		v /= 1024;
		unit++;
	}
	if (unit >= 0) {
		snprintf(buf, size, "%llu%s", (unsigned long long)v, names[unit]);
		return buf;
	}
	/* Not an exact multiple: one decimal in the largest unit that keeps the number >= 1. */
	double d = (double)bytes;
	int u = -1;
	while (u < 3 && d >= 1024.0) {
		d /= 1024.0;
		u++;
	}
	if (u < 0)
		snprintf(buf, size, "%llu", (unsigned long long)bytes);
	else
		snprintf(buf, size, "%.1f%s", d, names[u]);
	return buf;
}

char *lb_format_cpu(uint32_t millicores, char *buf, size_t size)
{
	if (millicores % 1000 == 0)
		snprintf(buf, size, "%u", millicores / 1000);
	else if (millicores % 100 == 0)
		snprintf(buf, size, "%u.%u", millicores / 1000, (millicores % 1000) / 100);
	else
		snprintf(buf, size, "%um", millicores);
	return buf;
}

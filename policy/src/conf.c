/*
 * conf.c — parses limits.conf, the `key = value` policy file of default sandbox limits.
 *
 * Runs in lensboxd (root) and lensbox-runner at policy load; needs no privilege. One `key = value` a line, `#`
 * starts a comment, blank lines are ignored. Every key must be known and appear exactly once; values go through
 * lib/units.h so "512Mi", "1.5", "60s" mean what they mean everywhere else. Errors read "limits.conf:4: …".
 */
#include "lb/policy-parse.h"
#include "lb/cleanup.h"
#include "lb/units.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LINE 1024

/* Calls fn(key, value, lineno) for each `key = value` line; stops at the first error. */
typedef int (*kv_fn)(void *ud, const char *key, char *value, unsigned lineno, const char *name, struct lb_error *err);

static char *trim(char *s)
{
	while (*s == ' ' || *s == '\t')
		s++;
	size_t n = strlen(s);
	while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r'))
		s[--n] = '\0';
	return s;
}

static int each_kv(const char *text, const char *name, kv_fn fn, void *ud, struct lb_error *err)
{
	unsigned lineno = 0;
	for (const char *line = text; *line;) {
		const char *nl = strchr(line, '\n');
		size_t len = nl ? (size_t)(nl - line) : strlen(line);
		lineno++;
		if (len >= MAX_LINE)
			return lb_error_setx(err, EINVAL, "%s:%u: line longer than %d bytes", name, lineno, MAX_LINE);
		char buf[MAX_LINE];
		memcpy(buf, line, len);
		buf[len] = '\0';
		line = nl ? nl + 1 : line + len;
		char *hash = strchr(buf, '#');
		if (hash)
			*hash = '\0';
		char *s = trim(buf);
		if (!*s)
			continue;
		char *eq = strchr(s, '=');
		if (!eq)
			return lb_error_setx(err, EINVAL, "%s:%u: expected \"key = value\"", name, lineno);
		*eq = '\0';
		char *key = trim(s), *value = trim(eq + 1);
		if (!*key || strspn(key, "abcdefghijklmnopqrstuvwxyz0123456789_") != strlen(key))
			return lb_error_setx(err, EINVAL, "%s:%u: bad key \"%s\"", name, lineno, key);
		int r = fn(ud, key, value, lineno, name, err);
		if (r < 0)
			return r;
	}
	return 0;
}

enum limit_key { K_CPU, K_MEMORY, K_PIDS, K_DISK, K_TMP, K_SHM, K_OUTPUT, K_TIMEOUT, K_UID, K_GID, K_COUNT };
static const char *const limit_keys[K_COUNT] = { "cpu", "memory", "pids",    "disk",	    "tmp",
						 "shm", "output", "timeout", "sandbox_uid", "sandbox_gid" };

struct limits_state {
	struct lb_limits_policy out;
	bool seen[K_COUNT];
};

static int parse_uint(const char *s, uint64_t max, uint64_t *ret)
{
	if (!*s || strspn(s, "0123456789") != strlen(s))
		return -EINVAL;
	errno = 0;
	unsigned long long v = strtoull(s, NULL, 10);
	if (errno || v > max)
		return -ERANGE;
	*ret = v;
	return 0;
}

static int limits_kv(void *ud, const char *key, char *value, unsigned lineno, const char *name, struct lb_error *err)
{
	struct limits_state *st = ud;
	size_t k;
	for (k = 0; k < K_COUNT && strcmp(key, limit_keys[k]) != 0; k++)
		;
	if (k == K_COUNT)
		return lb_error_setx(err, EINVAL, "%s:%u: unknown key \"%s\"", name, lineno, key);
	if (st->seen[k])
		return lb_error_setx(err, EINVAL, "%s:%u: \"%s\" given twice", name, lineno, key);
	st->seen[k] = true;
	struct lb_limits_policy *o = &st->out;
	uint64_t v = 0;
	int r;
	const char *want;
	switch ((enum limit_key)k) {
	case K_CPU:
		want = "a CPU amount such as 1, 0.5 or 500m";
		r = lb_parse_cpu(value, &o->cpu_millicores);
		if (r == 0 && o->cpu_millicores == 0)
			r = -ERANGE;
		break;
	case K_MEMORY:
	case K_DISK:
	case K_TMP:
	case K_SHM:
	case K_OUTPUT:
		want = "a size such as 512Mi (at least 4096 bytes)";
		r = lb_parse_size(value, &v);
		if (r == 0 && v < 4096)
			r = -ERANGE;
		if (r == 0)
			*(k == K_MEMORY ? &o->memory_bytes
			  : k == K_DISK ? &o->disk_bytes
			  : k == K_TMP	? &o->tmp_bytes
			  : k == K_SHM	? &o->shm_bytes
					: &o->output_bytes) = v;
		break;
	case K_PIDS:
		want = "a process count 1..4194304";
		r = parse_uint(value, 4194304, &v);
		if (r == 0 && v == 0)
			r = -ERANGE;
		o->pids = v;
		break;
	case K_TIMEOUT:
		want = "a duration such as 60, 90s or 15m (1s..24h)";
		r = lb_parse_duration(value, &v);
		if (r == 0 && (v == 0 || v > 86400))
			r = -ERANGE;
		o->timeout_seconds = (uint32_t)v;
		break;
	case K_UID:
	case K_GID:
		/* 0 would make the program root of its user namespace; 65535 is the kernel's overflow id. */
		want = "an id 1..65533 (never 0: the program must not be root of its namespace; 65534 is nobody)";
		r = parse_uint(value, 65533, &v);
		if (r == 0 && v == 0)
			r = -ERANGE;
		*(k == K_UID ? &o->sandbox_uid : &o->sandbox_gid) = (uint32_t)v;
		break;
	case K_COUNT:
	default:
		return -EINVAL;
	}
	if (r < 0)
		return lb_error_setx(err, -r, "%s:%u: %s: expected %s, got \"%s\"", name, lineno, key, want, value);
	return 0;
}

int lb_limits_parse(const char *text, const char *name, struct lb_limits_policy *ret, struct lb_error *err)
{
	struct limits_state st = { 0 };
	int r = each_kv(text, name, limits_kv, &st, err);
	if (r < 0)
		return r;
	for (size_t k = 0; k < K_COUNT; k++)
		if (!st.seen[k])
			return lb_error_setx(err, EINVAL, "%s: missing \"%s\"", name, limit_keys[k]);
	*ret = st.out;
	return 0;
}

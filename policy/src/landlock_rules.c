/*
 * landlock_rules.c — parses policy/landlock.rules, the filesystem and scope part of the Landlock policy.
 *
 * Runs in lensboxd (root) and lensbox-runner at policy load; needs no privilege and touches no file but the text it
 * is given. The format is one directive a line, words separated by blanks, `#` starting a comment:
 *
 *   min_abi 6                  the lowest Landlock ABI a sandbox may start with (required, once)
 *   degraded_min_abi 4         optional: a lower ABI the operator accepts; results always report the enforced ABI
 *   read-exec /                grant: read | exec | read-exec | write | read-write | dev-ioctl, then an absolute path
 *   write /sandbox
 *   scope abstract-unix        ABI 6 scopes: abstract-unix, signal
 *
 * Paths are inside the sandbox's root and must be normalised (absolute, no `.`/`..`/empty components, no trailing
 * slash). Several grants for one path merge. Invariant of a parsed policy: 1 <= degraded_min_abi <= min_abi, at least
 * one path rule, paths unique. Errors read "landlock.rules:12: unknown directive \"wirte\"".
 */
#include "lb/policy-parse.h"
#include "lb/cleanup.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define MAX_RULES 256
#define MAX_LINE  4096
#define MAX_ABI	  64

static const struct {
	const char *verb;
	unsigned access;
} verbs[] = {
	{ "read", LB_LL_READ },
	{ "exec", LB_LL_EXEC },
	{ "read-exec", LB_LL_READ | LB_LL_EXEC },
	{ "write", LB_LL_WRITE },
	{ "read-write", LB_LL_READ | LB_LL_WRITE },
	{ "dev-ioctl", LB_LL_DEV_IOCTL },
};

void lb_landlock_policy_clear(struct lb_landlock_policy *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->n_rules; i++)
		free(p->rules[i].path);
	free(p->rules);
	*p = (struct lb_landlock_policy){ 0 };
}

static bool path_is_normal(const char *p)
{
	if (p[0] != '/' || strlen(p) >= PATH_MAX)
		return false;
	if (strcmp(p, "/") == 0)
		return true;
	const char *c = p + 1;
	for (;;) {
		size_t n = strcspn(c, "/");
		if (n == 0 || (n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
			return false;
		for (size_t i = 0; i < n; i++)
			if ((unsigned char)c[i] < 0x21 || (unsigned char)c[i] == 0x7f)
				return false;
		if (c[n] == '\0')
			return true;
		c += n + 1;
	}
}

static int parse_abi(const char *s, int *ret)
{
	char *end = NULL;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < 1 || v > MAX_ABI)
		return -EINVAL;
	*ret = (int)v;
	return 0;
}

int lb_landlock_parse(const char *text, const char *name, struct lb_landlock_policy *ret, struct lb_error *err)
{
	struct lb_landlock_policy p = { 0 };
	int r = 0, degraded = 0;
	bool seen_unix = false, seen_signal = false;
	unsigned lineno = 0;

	for (const char *line = text; *line;) {
		const char *nl = strchr(line, '\n');
		size_t len = nl ? (size_t)(nl - line) : strlen(line);
		lineno++;
		if (len >= MAX_LINE) {
			r = lb_error_setx(err, EINVAL, "%s:%u: line longer than %d bytes", name, lineno, MAX_LINE);
			goto fail;
		}
		char buf[MAX_LINE];
		memcpy(buf, line, len);
		buf[len] = '\0';
		line = nl ? nl + 1 : line + len;

		char *hash = strchr(buf, '#');
		if (hash)
			*hash = '\0';
		char *save = NULL, *words[4] = { 0 };
		size_t n = 0;
		for (char *w = strtok_r(buf, " \t\r", &save); w; w = strtok_r(NULL, " \t\r", &save)) {
			if (n == LB_ARRAY_SIZE(words)) {
				r = lb_error_setx(err, EINVAL, "%s:%u: too many words", name, lineno);
				goto fail;
			}
			words[n++] = w;
		}
		if (n == 0)
			continue;
		if (n != 2) {
			r = lb_error_setx(err, EINVAL, "%s:%u: expected \"<directive> <argument>\"", name, lineno);
			goto fail;
		}
		const char *d = words[0], *arg = words[1];

		if (strcmp(d, "min_abi") == 0 || strcmp(d, "degraded_min_abi") == 0) {
			int *slot = d[0] == 'm' ? &p.min_abi : &degraded, v;
			if (*slot) {
				r = lb_error_setx(err, EINVAL, "%s:%u: %s given twice", name, lineno, d);
				goto fail;
			}
			if (parse_abi(arg, &v) < 0) {
				r = lb_error_setx(err, EINVAL, "%s:%u: %s must be an integer 1..%d, not \"%s\"", name,
						  lineno, d, MAX_ABI, arg);
				goto fail;
			}
			*slot = v;
			continue;
		}
		if (strcmp(d, "scope") == 0) {
			bool *slot = strcmp(arg, "abstract-unix") == 0 ? &seen_unix
				     : strcmp(arg, "signal") == 0      ? &seen_signal
								       : NULL;
			if (!slot) {
				r = lb_error_setx(err, EINVAL, "%s:%u: unknown scope \"%s\" (abstract-unix, signal)",
						  name, lineno, arg);
				goto fail;
			}
			if (*slot) {
				r = lb_error_setx(err, EINVAL, "%s:%u: scope %s given twice", name, lineno, arg);
				goto fail;
			}
			*slot = true;
			continue;
		}
		unsigned access = 0;
		for (size_t i = 0; i < LB_ARRAY_SIZE(verbs); i++)
			if (strcmp(d, verbs[i].verb) == 0)
				access = verbs[i].access;
		if (!access) {
			r = lb_error_setx(err, EINVAL, "%s:%u: unknown directive \"%s\"", name, lineno, d);
			goto fail;
		}
		if (!path_is_normal(arg)) {
			r = lb_error_setx(
			    err, EINVAL, "%s:%u: \"%s\" is not a normalised absolute path (no ., .., // or trailing /)",
			    name, lineno, arg);
			goto fail;
		}
		size_t i;
		for (i = 0; i < p.n_rules && strcmp(p.rules[i].path, arg) != 0; i++)
			;
		if (i == p.n_rules) {
			if (p.n_rules == MAX_RULES) {
				r = lb_error_setx(err, E2BIG, "%s:%u: more than %d paths", name, lineno, MAX_RULES);
				goto fail;
			}
			struct lb_landlock_path_rule *nr = realloc(p.rules, (p.n_rules + 1) * sizeof(*nr));
			if (!nr) {
				r = lb_error_set(err, ENOMEM, "%s:%u", name, lineno);
				goto fail;
			}
			p.rules = nr;
			p.rules[i] = (struct lb_landlock_path_rule){ .path = strdup(arg), .access = 0 };
			if (!p.rules[i].path) {
				r = lb_error_set(err, ENOMEM, "%s:%u", name, lineno);
				goto fail;
			}
			p.n_rules++;
		}
		p.rules[i].access |= access;
	}

	if (!p.min_abi) {
		r = lb_error_setx(err, EINVAL, "%s: min_abi is required", name);
		goto fail;
	}
	if (degraded > p.min_abi) {
		r = lb_error_setx(err, EINVAL, "%s: degraded_min_abi %d is above min_abi %d", name, degraded,
				  p.min_abi);
		goto fail;
	}
	if (p.n_rules == 0) {
		r = lb_error_setx(err, EINVAL, "%s: no path rules: the sandbox could not even execute its program",
				  name);
		goto fail;
	}
	p.degraded_min_abi = degraded ? degraded : p.min_abi;
	p.scope_abstract_unix = seen_unix;
	p.scope_signal = seen_signal;
	*ret = p;
	return 0;
fail:
	lb_landlock_policy_clear(&p);
	return r;
}

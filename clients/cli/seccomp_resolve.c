/*
 * seccomp_resolve.c — a Docker-format seccomp profile flattened to one (syscall, action, argument comparisons) per
 * rule as it applies to one architecture and no capability: policy/tools/seccomp-resolve's logic, in C, so that
 * `lensbox policy explain` can set our profile beside Docker's default without Python.
 *
 * Runs in the CLI process; needs no privilege. Both profiles are input (ours may have been edited by hand, Docker's
 * may be a file the reviewer passed): the text is bounded by the caller, its nesting is checked before yajl builds a
 * tree, every value is type-checked, and a rule count above MAX_RULES is refused. Docker's conditions: "arches"
 * (with the amd64/x86_64 and arm64/aarch64 aliases) and "caps" in includes/excludes are resolved for no capability;
 * "minKernel" is taken as met, as seccomp-resolve does. One difference in writing: a valueTwo of 0 is not shown,
 * since Docker's absent valueTwo means 0 (so our explicit "valueTwo": 0 and Docker's nothing compare equal).
 */
#include <errno.h>
#include <inttypes.h>
#include <seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yajl/yajl_tree.h>

#include "lb/cleanup.h"
#include "jtree.h"
#include "policy.h"

#define MAX_RULES 4096
#define MAX_DEPTH 16

static yajl_val get(yajl_val o, const char *key)
{
	return lbc_jtree_get(o, key);
}

static const char *str(yajl_val v)
{
	return lbc_jtree_str(v, NULL);
}

static bool depth_ok(const char *t, size_t len)
{
	int depth = 0;
	bool in_str = false;
	for (size_t i = 0; i < len; i++) {
		if (in_str) {
			if (t[i] == '\\')
				i++;
			else if (t[i] == '"')
				in_str = false;
		} else if (t[i] == '"') {
			in_str = true;
		} else if (t[i] == '{' || t[i] == '[') {
			if (++depth > MAX_DEPTH)
				return false;
		} else if (t[i] == '}' || t[i] == ']') {
			depth--;
		}
	}
	return true;
}

static bool arch_in(yajl_val arr, const char *arch)
{
	const char *alias = strcmp(arch, "amd64") == 0 ? "x86_64" : strcmp(arch, "arm64") == 0 ? "aarch64" : arch;
	for (size_t i = 0; YAJL_IS_ARRAY(arr) && i < arr->u.array.len; i++) {
		const char *a = str(arr->u.array.values[i]);
		if (a && (strcmp(a, arch) == 0 || strcmp(a, alias) == 0))
			return true;
	}
	return false;
}

static bool nonempty(yajl_val arr)
{
	return YAJL_IS_ARRAY(arr) && arr->u.array.len > 0;
}

/* seccomp-resolve's applies() for no capability */
static bool applies(yajl_val rule, const char *arch)
{
	yajl_val inc = get(rule, "includes"), exc = get(rule, "excludes");
	if (nonempty(get(inc, "arches")) && !arch_in(get(inc, "arches"), arch))
		return false;
	if (nonempty(get(inc, "caps")))
		return false; /* needs a capability a sandbox never has */
	if (nonempty(get(exc, "arches")) && arch_in(get(exc, "arches"), arch))
		return false;
	return true;
}

static bool u64_of(yajl_val v, uint64_t *ret)
{
	if (!YAJL_IS_NUMBER(v) || !v->u.number.r)
		return false;
	char *end;
	errno = 0;
	unsigned long long x = strtoull(v->u.number.r, &end, 10);
	if (errno || *end || v->u.number.r[0] == '-')
		return false;
	*ret = x;
	return true;
}

static int action_of(yajl_val action, yajl_val errno_ret, char *buf, size_t size)
{
	const char *a = str(action);
	if (!a || strncmp(a, "SCMP_ACT_", 9) != 0)
		return -EINVAL;
	uint64_t e = 1;
	if (strcmp(a, "SCMP_ACT_ERRNO") == 0) {
		if (errno_ret && !u64_of(errno_ret, &e))
			return -EINVAL;
		snprintf(buf, size, "ERRNO(%" PRIu64 ")", e);
	} else {
		snprintf(buf, size, "%.20s", a + 9);
	}
	return 0;
}

/* "a0 MASKED_EQ 0x7e020000 a1 EQ 0x1/0x2" as seccomp-resolve writes it */
static int args_of(yajl_val args, char *buf, size_t size)
{
	buf[0] = '\0';
	for (size_t i = 0; YAJL_IS_ARRAY(args) && i < args->u.array.len; i++) {
		yajl_val a = args->u.array.values[i], two = get(a, "valueTwo");
		uint64_t index, value, value2 = 0;
		const char *op = str(get(a, "op"));
		if (!u64_of(get(a, "index"), &index) || !u64_of(get(a, "value"), &value) || !op ||
		    strncmp(op, "SCMP_CMP_", 9) != 0 || (two && !YAJL_IS_NULL(two) && !u64_of(two, &value2)))
			return -EINVAL;
		size_t n = strlen(buf);
		int w =
		    snprintf(buf + n, size - n, "%sa%" PRIu64 " %.16s 0x%" PRIx64, n ? " " : "", index, op + 9, value);
		if (w >= 0 && value2 != 0) /* Docker's absent valueTwo is 0: both read alike */
			snprintf(buf + n + (size_t)w, size - n - (size_t)w, "/0x%" PRIx64, value2);
	}
	return 0;
}

static int rule_cmp(const void *a, const void *b)
{
	const struct lbc_sc_rule *x = a, *y = b;
	int c = strcmp(x->name, y->name);
	if (!c)
		c = strcmp(x->action, y->action);
	return c ? c : strcmp(x->args, y->args);
}

/* Adds one (name, action, args) for each name of an applicable rule. */
static int add_rule(struct lbc_sc_profile *p, yajl_val rule, size_t idx, struct lb_error *err)
{
	char action[24], args[200];
	yajl_val names = get(rule, "names");
	if (!YAJL_IS_ARRAY(names) ||
	    action_of(get(rule, "action"), get(rule, "errnoRet"), action, sizeof(action)) < 0 ||
	    args_of(get(rule, "args"), args, sizeof(args)) < 0)
		return lb_error_setx(err, EINVAL, "syscalls[%zu]: expected names, an action and well-formed args", idx);
	for (size_t i = 0; i < names->u.array.len; i++) {
		const char *name = str(names->u.array.values[i]);
		if (!name || !name[0] || strlen(name) >= sizeof(p->v[0].name))
			return lb_error_setx(err, EINVAL, "syscalls[%zu].names[%zu]: expected a syscall name", idx, i);
		if (p->n >= MAX_RULES)
			return lb_error_setx(err, E2BIG, "more than %d (syscall, rule) pairs", MAX_RULES);
		struct lbc_sc_rule *nv = realloc(p->v, (p->n + 1) * sizeof(*nv));
		if (!nv)
			return lb_error_set(err, ENOMEM, "resolving the profile");
		p->v = nv;
		struct lbc_sc_rule *r = &p->v[p->n++];
		snprintf(r->name, sizeof(r->name), "%s", name);
		snprintf(r->action, sizeof(r->action), "%s", action);
		snprintf(r->args, sizeof(r->args), "%s", args);
		r->native = seccomp_syscall_resolve_name(name) >= 0;
	}
	return 0;
}

int lbc_seccomp_resolve(const char *json, size_t len, const char *arch, struct lbc_sc_profile *ret,
			struct lb_error *err)
{
	if (!depth_ok(json, len))
		return lb_error_setx(err, EINVAL, "JSON nested deeper than %d", MAX_DEPTH);
	char ebuf[128] = "";
	_cleanup_jtree_ yajl_val root = yajl_tree_parse(json, ebuf, sizeof(ebuf));
	if (!root)
		return lb_error_setx(err, EINVAL, "invalid JSON: %.100s", ebuf);
	struct lbc_sc_profile p = { 0 };
	if (action_of(get(root, "defaultAction"), get(root, "defaultErrnoRet"), p.default_action,
		      sizeof(p.default_action)) < 0)
		return lb_error_setx(err, EINVAL, "defaultAction: expected an SCMP_ACT_ action");
	yajl_val rules = get(root, "syscalls");
	if (!YAJL_IS_ARRAY(rules))
		return lb_error_setx(err, EINVAL, "syscalls: expected an array");
	for (size_t i = 0; i < rules->u.array.len; i++) {
		yajl_val rule = rules->u.array.values[i];
		if (applies(rule, arch) && add_rule(&p, rule, i, err) < 0) {
			lbc_sc_profile_free(&p);
			return -err->code;
		}
	}
	if (p.n)
		qsort(p.v, p.n, sizeof(*p.v), rule_cmp);
	size_t w = 0; /* each (name, action, args) once */
	for (size_t i = 0; i < p.n; i++)
		if (w == 0 || rule_cmp(&p.v[w - 1], &p.v[i]) != 0)
			p.v[w++] = p.v[i];
	p.n = w;
	*ret = p;
	return 0;
}

void lbc_sc_profile_free(struct lbc_sc_profile *p)
{
	free(p->v);
	p->v = NULL;
	p->n = 0;
}

bool lbc_sc_allows(const struct lbc_sc_profile *p, const char *name)
{
	for (size_t i = 0; i < p->n; i++)
		if (strcmp(p->v[i].name, name) == 0 && strcmp(p->v[i].action, "ALLOW") == 0)
			return true;
	return false;
}

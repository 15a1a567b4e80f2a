/*
 * seccomp.c — compiles policy/seccomp.json (Docker's seccomp profile format) into a BPF program.
 *
 * Runs in lensboxd (root) and lensbox-runner once per policy load; needs no privilege: libseccomp builds the filter
 * in memory and we only export it, never load it here. The JSON is reviewed data but still parsed as hostile input:
 * its size is bounded by the caller, its nesting depth is checked before yajl sees it (yajl_tree frees recursively),
 * every key must be known and every value well typed; anything else is an error naming the JSON path.
 *
 * The subset of Docker's format we accept:
 *
 *   { "defaultAction": ACTION, "defaultErrnoRet": N, "badArchAction": KILL-ACTION (lensbox extension),
 *     "archMap": [ { "architecture": "SCMP_ARCH_…", "subArchitectures": [ "SCMP_ARCH_…", … ] }, … ],
 *     "syscalls": [ { "names": [ … ], "action": ACTION, "errnoRet": N,
 *                     "args": [ { "index": 0-5, "value": U64, "valueTwo": U64, "op": "SCMP_CMP_…" } ],
 *                     "comment": "…" }, … ] }
 *
 * Docker's conditional keys ("includes", "excludes", "minKernel") are refused: our file is Docker's profile already
 * resolved for a sandbox with no capabilities. Only the archMap entry of the native architecture is used; its
 * subArchitectures are added to the filter, every other architecture hits badArchAction. Invariants of the output:
 * a syscall named in an argument-less rule appears in no other rule (so no rule silently shadows another); a rule
 * whose action equals the default is kept in the file for reviewers but adds nothing to the filter; names that do
 * not exist on the native architecture (Docker's chown32, _llseek…) are accepted and compile to nothing.
 */
#include "lb/policy-parse.h"
#include "lb/cleanup.h"

#include <errno.h>
#include <inttypes.h>
#include <seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yajl/yajl_tree.h>

/* Deeper JSON than this is not a seccomp profile; the bound keeps yajl_tree's recursive free shallow. */
#define MAX_DEPTH 8
/* Highest native syscall number we track for conflict detection (x86_64 and aarch64 are far below). */
#define MAX_NR	 1024
#define MAX_ARGS 6
/* Rules are numbered in int16_t for conflict messages; real profiles have a few dozen. */
#define MAX_RULES 4096

struct compiler {
	const char *name; /* file name for messages */
	struct lb_error *err;
	scmp_filter_ctx sc;
	uint32_t default_action;
	bool has_subarch;
	int16_t uncond_rule[MAX_NR]; /* index+1 of the argument-less rule naming this syscall, 0 if none */
	int16_t any_rule[MAX_NR];    /* index+1 of the first rule naming this syscall, 0 if none */
	bool allowed[MAX_NR];
};

static void seccomp_ctx_releasep(scmp_filter_ctx *c)
{
	if (*c)
		seccomp_release(*c);
}

static void yajl_freep(yajl_val *v)
{
	if (*v)
		yajl_tree_free(*v);
}

/* Rejects NUL bytes and nesting deeper than MAX_DEPTH with a scan that understands strings and escapes. */
static int check_shape(struct compiler *c, const char *text, size_t len)
{
	int depth = 0;
	bool in_str = false, esc = false;
	for (size_t i = 0; i < len; i++) {
		char ch = text[i];
		if (ch == '\0')
			return lb_error_setx(c->err, EINVAL, "%s: NUL byte at offset %zu", c->name, i);
		if (in_str) {
			if (esc)
				esc = false;
			else if (ch == '\\')
				esc = true;
			else if (ch == '"')
				in_str = false;
			continue;
		}
		if (ch == '"')
			in_str = true;
		else if (ch == '{' || ch == '[') {
			if (++depth > MAX_DEPTH)
				return lb_error_setx(c->err, EINVAL, "%s: JSON nested deeper than %d at offset %zu",
						     c->name, MAX_DEPTH, i);
		} else if (ch == '}' || ch == ']')
			depth--;
	}
	return 0;
}

/* A JSON integer in [0, UINT64_MAX] written as plain digits. */
static int get_u64(struct compiler *c, yajl_val v, const char *what, uint64_t *ret)
{
	if (!YAJL_IS_NUMBER(v))
		return lb_error_setx(c->err, EINVAL, "%s: %s: expected a non-negative integer", c->name, what);
	const char *s = YAJL_GET_NUMBER(v);
	if (!s || !*s || strspn(s, "0123456789") != strlen(s) || strlen(s) > 20)
		return lb_error_setx(c->err, EINVAL, "%s: %s: expected a non-negative integer, got %s", c->name, what,
				     s ? s : "?");
	errno = 0;
	char *end = NULL;
	unsigned long long n = strtoull(s, &end, 10);
	if (errno == ERANGE || *end)
		return lb_error_setx(c->err, ERANGE, "%s: %s: %s does not fit in 64 bits", c->name, what, s);
	*ret = n;
	return 0;
}

static int get_errno_value(struct compiler *c, yajl_val v, const char *what, uint16_t *ret)
{
	uint64_t n = 0;
	int r = get_u64(c, v, what, &n);
	if (r < 0)
		return r;
	if (n < 1 || n > 4095)
		return lb_error_setx(c->err, ERANGE, "%s: %s: errno %" PRIu64 " outside 1..4095", c->name, what, n);
	*ret = (uint16_t)n;
	return 0;
}

/* Checks that obj is an object whose keys are all in allowed[] and none repeats. */
static int check_keys(struct compiler *c, yajl_val obj, const char *what, const char *const *allowed, size_t n_allowed)
{
	if (!YAJL_IS_OBJECT(obj))
		return lb_error_setx(c->err, EINVAL, "%s: %s: expected an object", c->name, what);
	for (size_t i = 0; i < obj->u.object.len; i++) {
		const char *k = obj->u.object.keys[i];
		bool known = false;
		for (size_t j = 0; j < n_allowed; j++)
			known = known || strcmp(k, allowed[j]) == 0;
		if (!known)
			return lb_error_setx(c->err, EINVAL, "%s: %s: unknown key \"%s\"", c->name, what, k);
		for (size_t j = 0; j < i; j++)
			if (strcmp(k, obj->u.object.keys[j]) == 0)
				return lb_error_setx(c->err, EINVAL, "%s: %s: key \"%s\" appears twice", c->name, what,
						     k);
	}
	return 0;
}

static yajl_val member(yajl_val obj, const char *key)
{
	for (size_t i = 0; i < obj->u.object.len; i++)
		if (strcmp(obj->u.object.keys[i], key) == 0)
			return obj->u.object.values[i];
	return NULL;
}

static const char *get_string(yajl_val v)
{
	return YAJL_IS_STRING(v) ? YAJL_GET_STRING(v) : NULL;
}

enum action_kind { ACT_ALLOW, ACT_ERRNO, ACT_KILL_PROCESS, ACT_KILL_THREAD, ACT_TRAP, ACT_LOG };

static const struct {
	const char *name;
	enum action_kind kind;
} actions[] = {
	{ "SCMP_ACT_ALLOW", ACT_ALLOW },
	{ "SCMP_ACT_ERRNO", ACT_ERRNO },
	{ "SCMP_ACT_KILL_PROCESS", ACT_KILL_PROCESS },
	{ "SCMP_ACT_KILL_THREAD", ACT_KILL_THREAD },
	{ "SCMP_ACT_KILL", ACT_KILL_THREAD }, /* libseccomp's historical name for KILL_THREAD */
	{ "SCMP_ACT_TRAP", ACT_TRAP },
	{ "SCMP_ACT_LOG", ACT_LOG },
};

static int parse_action_kind(struct compiler *c, yajl_val v, const char *what, enum action_kind *ret)
{
	const char *s = get_string(v);
	if (!s)
		return lb_error_setx(c->err, EINVAL, "%s: %s: expected an action string", c->name, what);
	for (size_t i = 0; i < LB_ARRAY_SIZE(actions); i++)
		if (strcmp(s, actions[i].name) == 0) {
			*ret = actions[i].kind;
			return 0;
		}
	if (strcmp(s, "SCMP_ACT_TRACE") == 0 || strcmp(s, "SCMP_ACT_NOTIFY") == 0)
		return lb_error_setx(c->err, ENOTSUP,
				     "%s: %s: action %s needs a tracer or listener lensbox does not run", c->name, what,
				     s);
	return lb_error_setx(c->err, EINVAL, "%s: %s: unknown action \"%s\"", c->name, what, s);
}

static uint32_t action_value(enum action_kind kind, uint16_t errno_ret)
{
	switch (kind) {
	case ACT_ALLOW:
		return SCMP_ACT_ALLOW;
	case ACT_ERRNO:
		return SCMP_ACT_ERRNO(errno_ret);
	case ACT_KILL_PROCESS:
		return SCMP_ACT_KILL_PROCESS;
	case ACT_KILL_THREAD:
		return SCMP_ACT_KILL_THREAD;
	case ACT_TRAP:
		return SCMP_ACT_TRAP;
	case ACT_LOG:
		return SCMP_ACT_LOG;
	}
	return SCMP_ACT_KILL_PROCESS;
}

static const struct {
	const char *name;
	uint32_t token;
} arches[] = {
	{ "SCMP_ARCH_X86_64", SCMP_ARCH_X86_64 },   { "SCMP_ARCH_X86", SCMP_ARCH_X86 },
	{ "SCMP_ARCH_X32", SCMP_ARCH_X32 },	    { "SCMP_ARCH_AARCH64", SCMP_ARCH_AARCH64 },
	{ "SCMP_ARCH_ARM", SCMP_ARCH_ARM },	    { "SCMP_ARCH_RISCV64", SCMP_ARCH_RISCV64 },
	{ "SCMP_ARCH_PPC64LE", SCMP_ARCH_PPC64LE }, { "SCMP_ARCH_PPC64", SCMP_ARCH_PPC64 },
	{ "SCMP_ARCH_S390X", SCMP_ARCH_S390X },	    { "SCMP_ARCH_S390", SCMP_ARCH_S390 },
};

static int parse_arch(struct compiler *c, yajl_val v, const char *what, uint32_t *ret)
{
	const char *s = get_string(v);
	if (!s)
		return lb_error_setx(c->err, EINVAL, "%s: %s: expected an architecture string", c->name, what);
	for (size_t i = 0; i < LB_ARRAY_SIZE(arches); i++)
		if (strcmp(s, arches[i].name) == 0) {
			*ret = arches[i].token;
			return 0;
		}
	return lb_error_setx(c->err, EINVAL, "%s: %s: unknown architecture \"%s\"", c->name, what, s);
}

static int compile_archmap(struct compiler *c, yajl_val map)
{
	static const char *const keys[] = { "architecture", "subArchitectures" };
	if (!YAJL_IS_ARRAY(map))
		return lb_error_setx(c->err, EINVAL, "%s: archMap: expected an array", c->name);
	uint32_t native = seccomp_arch_native();
	bool found = false;
	for (size_t i = 0; i < map->u.array.len; i++) {
		char what[64];
		snprintf(what, sizeof(what), "archMap[%zu]", i);
		yajl_val e = map->u.array.values[i];
		int r = check_keys(c, e, what, keys, LB_ARRAY_SIZE(keys));
		if (r < 0)
			return r;
		uint32_t arch = 0;
		yajl_val a = member(e, "architecture");
		if (!a)
			return lb_error_setx(c->err, EINVAL, "%s: %s: missing \"architecture\"", c->name, what);
		r = parse_arch(c, a, what, &arch);
		if (r < 0)
			return r;
		yajl_val subs = member(e, "subArchitectures");
		if (subs && !YAJL_IS_NULL(subs) && !YAJL_IS_ARRAY(subs))
			return lb_error_setx(c->err, EINVAL, "%s: %s.subArchitectures: expected an array", c->name,
					     what);
		size_t n_subs = subs && YAJL_IS_ARRAY(subs) ? subs->u.array.len : 0;
		for (size_t j = 0; j < n_subs; j++) {
			uint32_t sub = 0;
			r = parse_arch(c, subs->u.array.values[j], what, &sub);
			if (r < 0)
				return r;
			if (arch != native)
				continue;
			/* Adding an architecture widens the filter to its syscall table: only what the file asks. */
			r = seccomp_arch_add(c->sc, sub);
			if (r < 0 && r != -EEXIST)
				return lb_error_set(c->err, r, "%s: %s: adding sub-architecture", c->name, what);
			c->has_subarch = true;
		}
		if (arch == native) {
			if (found)
				return lb_error_setx(c->err, EINVAL, "%s: %s: native architecture listed twice",
						     c->name, what);
			found = true;
		}
	}
	if (!found)
		return lb_error_setx(c->err, EINVAL, "%s: archMap has no entry for this machine's architecture",
				     c->name);
	return 0;
}

static const struct {
	const char *name;
	enum scmp_compare op;
} ops[] = {
	{ "SCMP_CMP_NE", SCMP_CMP_NE },
	{ "SCMP_CMP_LT", SCMP_CMP_LT },
	{ "SCMP_CMP_LE", SCMP_CMP_LE },
	{ "SCMP_CMP_EQ", SCMP_CMP_EQ },
	{ "SCMP_CMP_GE", SCMP_CMP_GE },
	{ "SCMP_CMP_GT", SCMP_CMP_GT },
	{ "SCMP_CMP_MASKED_EQ", SCMP_CMP_MASKED_EQ },
};

static int parse_args(struct compiler *c, yajl_val args, const char *rule, struct scmp_arg_cmp *cmps, unsigned *ret_n)
{
	static const char *const keys[] = { "index", "value", "valueTwo", "op" };
	if (!YAJL_IS_ARRAY(args))
		return lb_error_setx(c->err, EINVAL, "%s: %s.args: expected an array", c->name, rule);
	if (args->u.array.len > MAX_ARGS)
		return lb_error_setx(c->err, EINVAL, "%s: %s.args: more than %d comparisons", c->name, rule, MAX_ARGS);
	for (size_t i = 0; i < args->u.array.len; i++) {
		char what[96];
		snprintf(what, sizeof(what), "%s.args[%zu]", rule, i);
		yajl_val a = args->u.array.values[i];
		int r = check_keys(c, a, what, keys, LB_ARRAY_SIZE(keys));
		if (r < 0)
			return r;
		yajl_val vi = member(a, "index"), vv = member(a, "value"), v2 = member(a, "valueTwo"),
			 vo = member(a, "op");
		if (!vi || !vv || !vo)
			return lb_error_setx(c->err, EINVAL, "%s: %s: needs \"index\", \"value\" and \"op\"", c->name,
					     what);
		uint64_t index = 0, value = 0, value2 = 0;
		if ((r = get_u64(c, vi, what, &index)) < 0 || (r = get_u64(c, vv, what, &value)) < 0 ||
		    (v2 && (r = get_u64(c, v2, what, &value2)) < 0))
			return r;
		if (index >= MAX_ARGS)
			return lb_error_setx(c->err, EINVAL,
					     "%s: %s.index: %" PRIu64 " is not a syscall argument (0-5)", c->name, what,
					     index);
		for (size_t j = 0; j < i; j++)
			if (cmps[j].arg == index)
				return lb_error_setx(c->err, EINVAL,
						     "%s: %s: argument %" PRIu64
						     " compared twice in one rule (libseccomp cannot express it)",
						     c->name, what, index);
		const char *op = get_string(vo);
		bool found = false;
		for (size_t j = 0; op && j < LB_ARRAY_SIZE(ops); j++)
			if (strcmp(op, ops[j].name) == 0) {
				/* Docker's order: for MASKED_EQ "value" is the mask and "valueTwo" the datum. */
				cmps[i] = (struct scmp_arg_cmp){
					.arg = (unsigned)index, .op = ops[j].op, .datum_a = value, .datum_b = value2
				};
				found = true;
			}
		if (!found)
			return lb_error_setx(c->err, EINVAL, "%s: %s.op: unknown operator \"%s\"", c->name, what,
					     op ? op : "(not a string)");
		if (v2 && cmps[i].op != SCMP_CMP_MASKED_EQ)
			return lb_error_setx(c->err, EINVAL,
					     "%s: %s: \"valueTwo\" is only meaningful with SCMP_CMP_MASKED_EQ", c->name,
					     what);
	}
	*ret_n = (unsigned)args->u.array.len;
	return 0;
}

static int compile_rule(struct compiler *c, yajl_val rule, size_t idx)
{
	static const char *const keys[] = { "names", "action", "errnoRet", "args", "comment" };
	char what[48];
	snprintf(what, sizeof(what), "syscalls[%zu]", idx);
	int r = check_keys(c, rule, what, keys, LB_ARRAY_SIZE(keys));
	if (r < 0)
		return r;
	yajl_val names = member(rule, "names"), act = member(rule, "action"), ern = member(rule, "errnoRet"),
		 args = member(rule, "args"), comment = member(rule, "comment");
	if (!names || !YAJL_IS_ARRAY(names) || names->u.array.len == 0)
		return lb_error_setx(c->err, EINVAL, "%s: %s: \"names\" must be a non-empty array", c->name, what);
	if (!act)
		return lb_error_setx(c->err, EINVAL, "%s: %s: missing \"action\"", c->name, what);
	if (comment && !YAJL_IS_STRING(comment))
		return lb_error_setx(c->err, EINVAL, "%s: %s.comment: expected a string", c->name, what);
	enum action_kind kind;
	if ((r = parse_action_kind(c, act, what, &kind)) < 0)
		return r;
	uint16_t errno_ret = EPERM; /* Docker's default for SCMP_ACT_ERRNO without errnoRet */
	if (ern) {
		if (kind != ACT_ERRNO)
			return lb_error_setx(c->err, EINVAL,
					     "%s: %s: \"errnoRet\" given for an action that is not SCMP_ACT_ERRNO",
					     c->name, what);
		if ((r = get_errno_value(c, ern, what, &errno_ret)) < 0)
			return r;
	}
	struct scmp_arg_cmp cmps[MAX_ARGS];
	unsigned n_cmps = 0;
	if (args && !YAJL_IS_NULL(args) && (r = parse_args(c, args, what, cmps, &n_cmps)) < 0)
		return r;
	uint32_t action = action_value(kind, errno_ret);

	for (size_t i = 0; i < names->u.array.len; i++) {
		const char *sys = get_string(names->u.array.values[i]);
		if (!sys)
			return lb_error_setx(c->err, EINVAL, "%s: %s.names[%zu]: expected a string", c->name, what, i);
		int nr = seccomp_syscall_resolve_name(sys);
		if (nr == __NR_SCMP_ERROR)
			return lb_error_setx(c->err, EINVAL, "%s: %s: unknown syscall \"%s\"", c->name, what, sys);
		if (nr < 0 && !c->has_subarch)
			continue; /* not a syscall of this architecture (Docker lists every architecture's names) */
		if (nr >= 0 && nr < MAX_NR) {
			int16_t me = (int16_t)(idx + 1);
			int16_t prev_uncond = c->uncond_rule[nr], prev_any = c->any_rule[nr];
			if (prev_uncond && prev_uncond != me)
				return lb_error_setx(c->err, EINVAL,
						     "%s: %s: \"%s\" already has an unconditional rule (syscalls[%d])",
						     c->name, what, sys, prev_uncond - 1);
			if (n_cmps == 0 && prev_any && prev_any != me)
				return lb_error_setx(c->err, EINVAL,
						     "%s: %s: unconditional rule for \"%s\" would shadow syscalls[%d]",
						     c->name, what, sys, prev_any - 1);
			if (prev_any == me)
				return lb_error_setx(c->err, EINVAL, "%s: %s: \"%s\" listed twice", c->name, what, sys);
			if (!prev_any)
				c->any_rule[nr] = me;
			if (n_cmps == 0)
				c->uncond_rule[nr] = me;
			if (kind == ACT_ALLOW)
				c->allowed[nr] = true;
		}
		if (action == c->default_action)
			continue; /* stated for reviewers; the default already answers it */
		r = seccomp_rule_add_array(c->sc, action, nr, n_cmps, n_cmps ? cmps : NULL);
		if (r < 0)
			return lb_error_set(c->err, r, "%s: %s: adding rule for \"%s\"", c->name, what, sys);
	}
	return 0;
}

static int export_bpf(struct compiler *c, struct sock_fprog *ret_prog)
{
	/* A memfd is private to this process; libseccomp 2.5 can only export to a descriptor. */
	_cleanup_close_ int fd = memfd_create("lensbox-seccomp", MFD_CLOEXEC);
	if (fd < 0)
		return lb_error_set(c->err, errno, "%s: memfd_create", c->name);
	int r = seccomp_export_bpf(c->sc, fd);
	if (r < 0)
		return lb_error_set(c->err, r, "%s: exporting BPF", c->name);
	struct stat st;
	if (fstat(fd, &st) < 0)
		return lb_error_set(c->err, errno, "%s: fstat of exported BPF", c->name);
	size_t size = (size_t)st.st_size;
	if (size == 0 || size % sizeof(struct sock_filter) != 0 || size / sizeof(struct sock_filter) > BPF_MAXINSNS)
		return lb_error_setx(c->err, E2BIG, "%s: exported BPF has %zu bytes, not 1..%d instructions", c->name,
				     size, BPF_MAXINSNS);
	_cleanup_free_ struct sock_filter *insns = malloc(size);
	if (!insns)
		return lb_error_set(c->err, ENOMEM, "%s: exporting BPF", c->name);
	size_t off = 0;
	while (off < size) {
		ssize_t n = pread(fd, (char *)insns + off, size - off, (off_t)off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return lb_error_set(c->err, n < 0 ? errno : EIO, "%s: reading exported BPF", c->name);
		off += (size_t)n;
	}
	ret_prog->len = (unsigned short)(size / sizeof(struct sock_filter));
	ret_prog->filter = TAKE_PTR(insns);
	return 0;
}

int lb_seccomp_compile_json(const char *text, size_t len, const char *name, struct sock_fprog *ret_prog,
			    size_t *ret_allowed, struct lb_error *err)
{
	static const char *const keys[] = { "defaultAction", "defaultErrnoRet", "badArchAction", "archMap",
					    "syscalls" };
	if (len > LB_POLICY_FILE_MAX)
		return lb_error_setx(err, EFBIG, "%s: larger than %d bytes", name, LB_POLICY_FILE_MAX);
	_cleanup_free_ struct compiler *c = calloc(1, sizeof(*c));
	if (!c)
		return lb_error_set(err, ENOMEM, "%s", name);
	c->name = name;
	c->err = err;
	int r = check_shape(c, text, len);
	if (r < 0)
		return r;

	char yerr[256] = "";
	__attribute__((cleanup(yajl_freep))) yajl_val root = yajl_tree_parse(text, yerr, sizeof(yerr));
	if (!root) {
		yerr[strcspn(yerr, "\n")] = '\0'; // NOLINT(clang-analyzer-unix.Malloc): c is _cleanup_free_
		return lb_error_setx(err, EINVAL, "%s: invalid JSON: %s", name, yerr[0] ? yerr : "parse error");
	}
	if ((r = check_keys(c, root, "top level", keys, LB_ARRAY_SIZE(keys))) < 0)
		return r;

	yajl_val dact = member(root, "defaultAction"), derr = member(root, "defaultErrnoRet"),
		 bad = member(root, "badArchAction"), map = member(root, "archMap"), sys = member(root, "syscalls");
	if (!dact || !map || !sys)
		return lb_error_setx(err, EINVAL, "%s: needs \"defaultAction\", \"archMap\" and \"syscalls\"", name);
	enum action_kind dkind = ACT_KILL_PROCESS;
	if ((r = parse_action_kind(c, dact, "defaultAction", &dkind)) < 0)
		return r;
	if (dkind == ACT_ALLOW || dkind == ACT_LOG)
		return lb_error_setx(err, EINVAL, "%s: defaultAction: a profile must be an allowlist, not %s", name,
				     get_string(dact));
	uint16_t derrno = EPERM;
	if (derr) {
		if (dkind != ACT_ERRNO)
			return lb_error_setx(err, EINVAL,
					     "%s: defaultErrnoRet given but defaultAction is not SCMP_ACT_ERRNO", name);
		if ((r = get_errno_value(c, derr, "defaultErrnoRet", &derrno)) < 0)
			return r;
	}
	c->default_action = action_value(dkind, derrno);
	uint32_t badarch = SCMP_ACT_KILL_PROCESS;
	if (bad) {
		enum action_kind bkind;
		if ((r = parse_action_kind(c, bad, "badArchAction", &bkind)) < 0)
			return r;
		if (bkind != ACT_KILL_PROCESS && bkind != ACT_KILL_THREAD)
			return lb_error_setx(
			    err, EINVAL,
			    "%s: badArchAction: must kill (a foreign-architecture syscall is an attack), not %s", name,
			    get_string(bad));
		badarch = action_value(bkind, 0);
	}
	if (!YAJL_IS_ARRAY(sys))
		return lb_error_setx(err, EINVAL, "%s: syscalls: expected an array", name);
	if (sys->u.array.len > MAX_RULES)
		return lb_error_setx(err, E2BIG, "%s: syscalls: more than %d rules", name, MAX_RULES);

	__attribute__((cleanup(seccomp_ctx_releasep))) scmp_filter_ctx sc = seccomp_init(c->default_action);
	if (!sc)
		return lb_error_setx(err, ENOMEM, "%s: seccomp_init failed", name);
	c->sc = sc;
	if ((r = seccomp_attr_set(sc, SCMP_FLTATR_ACT_BADARCH, badarch)) < 0)
		return lb_error_set(err, r, "%s: setting the bad-architecture action", name);
	/* The runner sets no_new_privs itself, before any other layer; the exported program does not carry it. */
	(void)seccomp_attr_set(sc, SCMP_FLTATR_CTL_OPTIMIZE, 2); /* binary search on syscall numbers */
	if ((r = compile_archmap(c, map)) < 0)
		return r;
	for (size_t i = 0; i < sys->u.array.len; i++)
		if ((r = compile_rule(c, sys->u.array.values[i], i)) < 0)
			return r;

	/* A profile that cannot even start or end a program is a mistake, not a policy: say so at load time rather
	 * than as a mysterious failure of every run. */
	static const char *const essential[] = { "execve", "exit", "exit_group" };
	for (size_t i = 0; i < LB_ARRAY_SIZE(essential); i++) {
		int nr = seccomp_syscall_resolve_name(essential[i]);
		if (nr >= 0 && nr < MAX_NR && !c->allowed[nr])
			return lb_error_setx(err, EINVAL, "%s: \"%s\" is not allowed: no program could run", name,
					     essential[i]);
	}

	struct sock_fprog prog;
	if ((r = export_bpf(c, &prog)) < 0)
		return r;
	size_t allowed = 0;
	for (size_t i = 0; i < MAX_NR; i++)
		allowed += c->allowed[i];
	*ret_prog = prog;
	if (ret_allowed)
		*ret_allowed = allowed;
	return 0;
}

/*
 * test_seccomp_table.c — cross-checks the compiled BPF against the JSON it came from, for EVERY x86_64 syscall
 * number: a small classic-BPF interpreter runs the exported program on a seccomp_data for each number, and the
 * answer must be what policy/seccomp.json says when read independently here (argument-less rules and the default).
 * Syscalls whose rules compare arguments are checked at chosen argument values. Also foreign architectures and x32.
 * Runs as any user; loads nothing into the kernel.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yajl/yajl_tree.h>

#include "lb/policy.h"

#define MAX_NR 512

/* Runs a classic BPF program as the kernel would for seccomp; fails the test on an opcode it does not know. */
static uint32_t run_bpf(const struct sock_fprog *prog, const struct seccomp_data *d)
{
	uint32_t A = 0, X = 0, M[BPF_MEMWORDS] = { 0 };
	const unsigned char *data = (const unsigned char *)d;
	for (unsigned pc = 0; pc < prog->len; pc++) {
		const struct sock_filter *f = &prog->filter[pc];
		uint32_t src = BPF_SRC(f->code) == BPF_X ? X : f->k;
		switch (BPF_CLASS(f->code)) {
		case BPF_LD:
			if (BPF_MODE(f->code) == BPF_ABS && BPF_SIZE(f->code) == BPF_W) {
				assert_true(f->k + 4 <= sizeof(*d));
				memcpy(&A, data + f->k, 4);
			} else if (BPF_MODE(f->code) == BPF_IMM)
				A = f->k;
			else if (BPF_MODE(f->code) == BPF_MEM)
				A = M[f->k];
			else
				fail_msg("unknown LD 0x%x at %u", f->code, pc);
			break;
		case BPF_LDX:
			if (BPF_MODE(f->code) == BPF_IMM)
				X = f->k;
			else if (BPF_MODE(f->code) == BPF_MEM)
				X = M[f->k];
			else
				fail_msg("unknown LDX 0x%x at %u", f->code, pc);
			break;
		case BPF_ST:
			M[f->k] = A;
			break;
		case BPF_STX:
			M[f->k] = X;
			break;
		case BPF_ALU:
			switch (BPF_OP(f->code)) {
			case BPF_AND:
				A &= src;
				break;
			case BPF_OR:
				A |= src;
				break;
			case BPF_ADD:
				A += src;
				break;
			case BPF_SUB:
				A -= src;
				break;
			case BPF_RSH:
				A >>= src;
				break;
			case BPF_LSH:
				A <<= src;
				break;
			default:
				fail_msg("unknown ALU 0x%x at %u", f->code, pc);
			}
			break;
		case BPF_JMP:
			if (BPF_OP(f->code) == BPF_JA) {
				pc += f->k;
				break;
			}
			bool t;
			switch (BPF_OP(f->code)) {
			case BPF_JEQ:
				t = A == src;
				break;
			case BPF_JGT:
				t = A > src;
				break;
			case BPF_JGE:
				t = A >= src;
				break;
			case BPF_JSET:
				t = (A & src) != 0;
				break;
			default:
				fail_msg("unknown JMP 0x%x at %u", f->code, pc);
				t = false;
			}
			pc += t ? f->jt : f->jf;
			break;
		case BPF_RET:
			return BPF_RVAL(f->code) == BPF_A ? A : f->k;
		case BPF_MISC:
			if (BPF_MISCOP(f->code) == BPF_TAX)
				X = A;
			else
				A = X;
			break;
		default:
			fail_msg("unknown class 0x%x at %u", f->code, pc);
		}
	}
	fail_msg("program fell off its end");
	return 0;
}

static uint32_t answer(const struct lb_policy *p, uint32_t arch, int nr, const uint64_t args[6])
{
	struct seccomp_data d = { .nr = nr, .arch = arch };
	for (int i = 0; i < 6; i++)
		d.args[i] = args ? args[i] : 0;
	return run_bpf(&p->seccomp, &d);
}

#define RET_ERRNO(e) (SECCOMP_RET_ERRNO | (uint32_t)(e))

static struct lb_policy *pol;
static uint32_t expected[MAX_NR]; /* from the JSON's argument-less rules; 0 = default */
static bool conditional[MAX_NR];  /* named by a rule that compares arguments */

static uint32_t json_action(yajl_val rule)
{
	const char *path_action[] = { "action", NULL }, *path_errno[] = { "errnoRet", NULL };
	const char *a = YAJL_GET_STRING(yajl_tree_get(rule, path_action, yajl_t_string));
	assert_non_null(a);
	if (strcmp(a, "SCMP_ACT_ALLOW") == 0)
		return SECCOMP_RET_ALLOW;
	if (strcmp(a, "SCMP_ACT_ERRNO") == 0) {
		yajl_val e = yajl_tree_get(rule, path_errno, yajl_t_number);
		return RET_ERRNO(e ? YAJL_GET_INTEGER(e) : EPERM);
	}
	fail_msg("the real profile uses only ALLOW and ERRNO rules, found %s", a);
	return 0;
}

static int setup(void **state)
{
	(void)state;
	struct lb_error err = { 0 };
	if (lb_policy_load(LENSBOX_SOURCE_DIR "/policy", &pol, &err) < 0) {
		fprintf(stderr, "%s\n", err.msg);
		return -1;
	}
	FILE *f = fopen(LENSBOX_SOURCE_DIR "/policy/seccomp.json", "r");
	if (!f)
		return -1;
	static char text[1 << 20];
	size_t n = fread(text, 1, sizeof(text) - 1, f);
	fclose(f);
	text[n] = '\0';
	yajl_val root = yajl_tree_parse(text, NULL, 0);
	if (!root)
		return -1;
	const char *path_sys[] = { "syscalls", NULL }, *path_names[] = { "names", NULL },
		   *path_args[] = { "args", NULL };
	yajl_val sys = yajl_tree_get(root, path_sys, yajl_t_array);
	for (size_t i = 0; sys && i < sys->u.array.len; i++) {
		yajl_val rule = sys->u.array.values[i];
		yajl_val names = yajl_tree_get(rule, path_names, yajl_t_array);
		yajl_val args = yajl_tree_get(rule, path_args, yajl_t_array);
		for (size_t j = 0; names && j < names->u.array.len; j++) {
			int nr = seccomp_syscall_resolve_name_arch(SCMP_ARCH_X86_64,
								   YAJL_GET_STRING(names->u.array.values[j]));
			if (nr < 0 || nr >= MAX_NR)
				continue;
			if (args && args->u.array.len > 0)
				conditional[nr] = true;
			else
				expected[nr] = json_action(rule);
		}
	}
	yajl_tree_free(root);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	lb_policy_free(pol);
	return 0;
}

static void test_every_syscall_number(void **state)
{
	(void)state;
	int checked = 0, allowed = 0;
	for (int nr = 0; nr < MAX_NR; nr++) {
		if (conditional[nr])
			continue;
		uint32_t want = expected[nr] ? expected[nr] : RET_ERRNO(ENOSYS);
		uint32_t got = answer(pol, AUDIT_ARCH_X86_64, nr, NULL);
		if (got != want) {
			char *name = seccomp_syscall_resolve_num_arch(SCMP_ARCH_X86_64, nr);
			fail_msg("syscall %d (%s): BPF answers 0x%x, seccomp.json says 0x%x", nr, name ? name : "?",
				 got, want);
		}
		checked++;
		allowed += got == SECCOMP_RET_ALLOW;
	}
	assert_true(checked > 450);
	assert_int_equal(allowed + 3 /* clone, socket, personality: allowed with arguments */, (int)pol->seccomp_rules);
	/* Far beyond any table. */
	assert_int_equal(answer(pol, AUDIT_ARCH_X86_64, 100000, NULL), RET_ERRNO(ENOSYS));
	assert_int_equal(answer(pol, AUDIT_ARCH_X86_64, -1, NULL), RET_ERRNO(ENOSYS));
}

static void test_foreign_architectures_killed(void **state)
{
	(void)state;
	uint32_t kill = SECCOMP_RET_KILL_PROCESS;
	assert_int_equal(answer(pol, AUDIT_ARCH_I386, 20, NULL), kill);
	assert_int_equal(answer(pol, AUDIT_ARCH_AARCH64, 172, NULL), kill);
	/* x32: the x86_64 arch with __X32_SYSCALL_BIT in the number. */
	assert_int_equal(answer(pol, AUDIT_ARCH_X86_64, 0x40000000 | 39, NULL), kill);
	assert_int_equal(answer(pol, AUDIT_ARCH_X86_64, 0x40000000 | 0, NULL), kill);
	assert_int_equal(answer(pol, AUDIT_ARCH_X86_64, 0x40000000 | 250, NULL), kill);
}

static void test_argument_rules(void **state)
{
	(void)state;
	const int clone = 56, socket = 41, personality = 135;
	uint64_t a[6] = { 0 };
	a[0] = 0x01200011; /* glibc fork: CLONE_CHILD_SETTID|CLONE_CHILD_CLEARTID|SIGCHLD */
	assert_int_equal(answer(pol, AUDIT_ARCH_X86_64, clone, a), SECCOMP_RET_ALLOW);
	a[0] = 0x003d0f00; /* pthread_create's flags */
	assert_int_equal(answer(pol, AUDIT_ARCH_X86_64, clone, a), SECCOMP_RET_ALLOW);
	static const uint64_t ns[] = { 0x00020000, 0x02000000, 0x04000000, 0x08000000,
				       0x10000000, 0x20000000, 0x40000000 };
	for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
		a[0] = ns[i] | 17;
		assert_int_equal(answer(pol, AUDIT_ARCH_X86_64, clone, a), RET_ERRNO(EPERM));
		a[0] = ns[i] | 0x003d0f00 | 0xffffffff00000000ull;
		assert_int_equal(answer(pol, AUDIT_ARCH_X86_64, clone, a), RET_ERRNO(EPERM));
	}
	/* socket: every family value below 64 and a few odd ones, for protocols 0 and 9. */
	for (uint64_t fam = 0; fam < 64; fam++)
		for (uint64_t proto = 0; proto <= 9; proto += 9) {
			a[0] = fam;
			a[2] = proto;
			bool ok = fam == 1 || fam == 2 || fam == 10 || (fam == 16 && proto == 0);
			assert_int_equal(answer(pol, AUDIT_ARCH_X86_64, socket, a),
					 ok ? SECCOMP_RET_ALLOW : RET_ERRNO(EPERM));
		}
	a[2] = 0;
	a[0] = 0x100000001ull; /* AF_UNIX with high bits set is not AF_UNIX to the filter */
	assert_int_equal(answer(pol, AUDIT_ARCH_X86_64, socket, a), RET_ERRNO(EPERM));
	a[0] = 0xffffffffffffffffull;
	assert_int_equal(answer(pol, AUDIT_ARCH_X86_64, socket, a), RET_ERRNO(EPERM));
	/* personality: the five safe values and nothing else. */
	static const uint64_t safe[] = { 0, 8, 0x20000, 0x20008, 0xffffffff };
	for (size_t i = 0; i < 5; i++) {
		a[0] = safe[i];
		assert_int_equal(answer(pol, AUDIT_ARCH_X86_64, personality, a), SECCOMP_RET_ALLOW);
	}
	static const uint64_t unsafe[] = {
		1, 7, 9, 0x40000, 0x400000, 0x20009, 0xfffffffe, 0x100000000ull, 0x1000000000000008ull
	};
	for (size_t i = 0; i < sizeof(unsafe) / sizeof(unsafe[0]); i++) {
		a[0] = unsafe[i];
		assert_int_equal(answer(pol, AUDIT_ARCH_X86_64, personality, a), RET_ERRNO(EPERM));
	}
}

int main(void)
{
#if !defined(__x86_64__)
	fprintf(stderr, "test_seccomp_table checks x86_64 syscall numbers; port it before trusting it here\n");
	return 1;
#endif
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_every_syscall_number),
		cmocka_unit_test(test_foreign_architectures_killed),
		cmocka_unit_test(test_argument_rules),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}

/*
 * seccomp_notify.c — counting the system calls the seccomp policy refuses, without changing a single answer.
 *
 * Runs in the caller (lensboxd or lensbox-runner, root), on the thread that runs the program's output loop.
 *
 * How. The policy's filter (classic BPF from libseccomp, policy/src/seccomp.c) answers an explicit refusal with
 * SECCOMP_RET_ERRNO(e). lb_seccomp_notify_prepare() copies the program and turns each such constant return into
 * SECCOMP_RET_USER_NOTIF, except ENOSYS: ENOSYS means "unknown or new syscall, fall back" (the default action, and
 * clone3, which glibc probes at every thread start) and must stay as fast as before and uncounted. Every other
 * instruction is kept, so both programs take the same path for the same seccomp_data. The run's last child installs
 * the variant with SECCOMP_FILTER_FLAG_NEW_LISTENER right before execve and hands the listener to the caller
 * (exec.c). A refused call then sleeps in the kernel until lb_seccomp_notify_answer() has read its seccomp_data,
 * run the *original* program over it with the interpreter below (lb_seccomp_eval) and sent back exactly the errno
 * the original filter returns. The program sees the same errno as without counting; it only waits for a round
 * trip through the caller (tens of microseconds), and only on calls the policy refuses.
 *
 * Invariants (each one is what makes this safe):
 *   - The answer is never SECCOMP_USER_NOTIF_FLAG_CONTINUE and never a success: the listener cannot let a refused
 *     call run. If the original program does not answer ERRNO for the data (it always does on a path that led to a
 *     USER_NOTIF return; an interpreter bug would be the only cause), the answer is EPERM.
 *   - The listener never reaches the sandbox: it is created CLOEXEC in the last child, sent to the caller and closed
 *     there before execve. A sandboxed program that installs a filter of its own with NEW_LISTENER gets EBUSY (the
 *     kernel allows one listener per filter chain); that is the only visible difference (docs/isolation.md).
 *   - Everything from the sandbox is hostile and bounded: each pending notification holds one of the sandbox's
 *     threads asleep (so at most the pids limit are pending); the caller takes one per poll round, with O(1)
 *     work and no allocation, between reads of the output pipes; the tally has a fixed number of slots.
 *   - The interpreter reads only inside the fixed seccomp_data and the program, jumps only forward (cBPF), and
 *     treats anything it does not know as a kill, so a malformed program can neither loop nor read out of bounds.
 *     tests/unit/runner/test_seccomp_notify.c checks it against the kernel on the policy and on random libseccomp
 *     filters.
 *
 * If the host lacks the notification action (Linux < 5.0) or the profile refuses a call the child needs after
 * installing the filter (sendmsg, close, write, execve, exit_group), prepare() says so and runs install the plain
 * filter: syscall refusals are then not reported, and health says why.
 */
#include "internal.h"

#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__)
#define LB_AUDIT_ARCH_NATIVE AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define LB_AUDIT_ARCH_NATIVE AUDIT_ARCH_AARCH64
#endif

#define RET_ACTION(v) ((v)&SECCOMP_RET_ACTION_FULL)
#define RET_DATA(v)   ((v)&SECCOMP_RET_DATA)

/* The kernel's checks (seccomp_check_filter, bpf_check_classic) accept only these; a word load must be aligned and
 * inside struct seccomp_data. */
uint32_t lb_seccomp_eval(const struct sock_filter *prog, size_t len, const struct seccomp_data *d)
{
	uint32_t a = 0, x = 0, mem[BPF_MEMWORDS];
	memset(mem, 0, sizeof(mem));
	const uint32_t kill = SECCOMP_RET_KILL_PROCESS;
	for (size_t pc = 0; pc < len; pc++) {
		const struct sock_filter *f = &prog[pc];
		uint32_t k = f->k;
		switch (f->code) {
		case BPF_LD | BPF_W | BPF_ABS:
			if (k >= sizeof(*d) || (k & 3))
				return kill;
			memcpy(&a, (const char *)d + k, 4);
			break;
		case BPF_LD | BPF_W | BPF_LEN:
			a = sizeof(*d);
			break;
		case BPF_LDX | BPF_W | BPF_LEN:
			x = sizeof(*d);
			break;
		case BPF_LD | BPF_IMM:
			a = k;
			break;
		case BPF_LDX | BPF_IMM:
			x = k;
			break;
		case BPF_LD | BPF_MEM:
		case BPF_LDX | BPF_MEM:
		case BPF_ST:
		case BPF_STX:
			if (k >= BPF_MEMWORDS)
				return kill;
			if (f->code == (BPF_LD | BPF_MEM))
				a = mem[k];
			else if (f->code == (BPF_LDX | BPF_MEM))
				x = mem[k];
			else
				mem[k] = f->code == BPF_ST ? a : x;
			break;
		case BPF_MISC | BPF_TAX:
			x = a;
			break;
		case BPF_MISC | BPF_TXA:
			a = x;
			break;
		case BPF_ALU | BPF_NEG:
			a = -a;
			break;
		case BPF_RET | BPF_K:
			return k;
		case BPF_RET | BPF_A:
			return a;
		case BPF_JMP | BPF_JA:
			if (k >= len - pc - 1)
				return kill;
			pc += k;
			break;
		default: {
			uint32_t cls = BPF_CLASS(f->code), src = BPF_SRC(f->code) == BPF_X ? x : k;
			if (cls == BPF_ALU) {
				switch (BPF_OP(f->code)) {
				case BPF_ADD:
					a += src;
					break;
				case BPF_SUB:
					a -= src;
					break;
				case BPF_MUL:
					a *= src;
					break;
				case BPF_DIV:
					if (!src)
						return 0;
					a /= src;
					break; /* the kernel: division by 0 returns 0 */
				case BPF_MOD:
					if (!src)
						return 0;
					a %= src;
					break;
				case BPF_AND:
					a &= src;
					break;
				case BPF_OR:
					a |= src;
					break;
				case BPF_XOR:
					a ^= src;
					break;
				case BPF_LSH:
					a = src < 32 ? a << src : 0;
					break;
				case BPF_RSH:
					a = src < 32 ? a >> src : 0;
					break;
				default:
					return kill;
				}
				break;
			}
			if (cls != BPF_JMP)
				return kill;
			bool t;
			switch (BPF_OP(f->code)) {
			case BPF_JEQ:
				t = a == src;
				break;
			case BPF_JGT:
				t = a > src;
				break;
			case BPF_JGE:
				t = a >= src;
				break;
			case BPF_JSET:
				t = (a & src) != 0;
				break;
			default:
				return kill;
			}
			unsigned off = t ? f->jt : f->jf;
			if (off >= len - pc - 1)
				return kill;
			pc += off;
			break;
		}
		}
	}
	return kill; /* fell off the end: the kernel refuses such a program */
}

static bool allows(const struct sock_filter *prog, size_t len, int nr)
{
	struct seccomp_data d;
	memset(&d, 0, sizeof(d));
	d.nr = nr;
	d.arch = LB_AUDIT_ARCH_NATIVE;
	return RET_ACTION(lb_seccomp_eval(prog, len, &d)) == SECCOMP_RET_ALLOW;
}

int lb_seccomp_notify_prepare(const struct sock_fprog *orig, struct lb_seccomp_notify *ret, const char **ret_why)
{
	memset(ret, 0, sizeof(*ret));
#ifndef LB_AUDIT_ARCH_NATIVE
	*ret_why = "counting refused system calls is not built for this architecture";
	return -ENOTSUP;
#else
	uint32_t act = SECCOMP_RET_USER_NOTIF;
	if (syscall(SYS_seccomp, SECCOMP_GET_ACTION_AVAIL, 0, &act) < 0) {
		*ret_why = "the kernel has no seccomp user notification (Linux 5.0)";
		return -ENOTSUP;
	}
	/* What the last child does once the filter is in place: hand over the listener, close it, report a failure,
	 * exec, exit. A profile refusing one of them would make it wait for an answer nobody can give yet. */
	static const int needed[] = { __NR_sendmsg, __NR_close, __NR_write, __NR_execve, __NR_exit_group };
	for (size_t i = 0; i < sizeof(needed) / sizeof(needed[0]); i++)
		if (!allows(orig->filter, orig->len, needed[i])) {
			*ret_why = "the seccomp profile refuses a call the runner needs after installing it";
			return -ENOTSUP;
		}
	struct sock_filter *v = calloc(orig->len, sizeof(*v));
	if (!v)
		return -ENOMEM;
	size_t rewritten = 0;
	for (size_t i = 0; i < orig->len; i++) {
		v[i] = orig->filter[i];
		if (v[i].code == (BPF_RET | BPF_K) && RET_ACTION(v[i].k) == SECCOMP_RET_ERRNO &&
		    RET_DATA(v[i].k) != ENOSYS) {
			v[i].k = SECCOMP_RET_USER_NOTIF;
			rewritten++;
		}
	}
	if (rewritten == 0) {
		free(v);
		*ret_why = "the seccomp profile refuses nothing with an errno";
		return -ENOTSUP;
	}
	ret->variant.filter = v;
	ret->variant.len = orig->len;
	ret->orig = orig;
	*ret_why = NULL;
	return 0;
#endif
}

void lb_seccomp_notify_free(struct lb_seccomp_notify *n)
{
	free(n->variant.filter);
	n->variant.filter = NULL;
	n->variant.len = 0;
}

void lb_syscall_tally_add(struct lb_syscall_tally *t, int nr)
{
	t->total++;
	for (size_t i = 0; i < t->n; i++)
		if (t->slot[i].nr == nr) {
			t->slot[i].count++;
			return;
		}
	if (t->n < LB_TALLY_SLOTS) {
		t->slot[t->n].nr = nr;
		t->slot[t->n].count = 1;
		t->n++;
	}
	/* else: counted in total only; the result names the most frequent of the first LB_TALLY_SLOTS */
}

int lb_seccomp_notify_answer(int listener, const struct lb_seccomp_notify *n, struct lb_syscall_tally *t)
{
	struct seccomp_notif req;
	memset(&req, 0, sizeof(req)); /* the kernel refuses a buffer that is not zeroed */
	if (syscall(SYS_ioctl, listener, (unsigned long)SECCOMP_IOCTL_NOTIF_RECV, &req) < 0)
		return -errno; /* ENOENT: the caller was killed or interrupted before we read it */
	uint32_t v = lb_seccomp_eval(n->orig->filter, n->orig->len, &req.data);
	int e = RET_ACTION(v) == SECCOMP_RET_ERRNO ? (int)RET_DATA(v) : EPERM;
	if (e == 0 || e > 4095)
		e = EPERM; /* never a success: the call must not look done */
	struct seccomp_notif_resp resp = { .id = req.id, .val = 0, .error = -e, .flags = 0 };
	lb_syscall_tally_add(t, req.data.nr);
	if (syscall(SYS_ioctl, listener, (unsigned long)SECCOMP_IOCTL_NOTIF_SEND, &resp) < 0)
		return -errno; /* ENOENT: the thread was killed or interrupted meanwhile; it was refused anyway */
	return 0;
}

void lb_syscall_tally_result(const struct lb_syscall_tally *t, struct lb_refusals *r)
{
	r->syscall = t->total;
	/* the most frequent first; ties keep the order they were first seen */
	bool used[LB_TALLY_SLOTS] = { false };
	r->n_syscalls = 0;
	while (r->n_syscalls < LB_REFUSED_SYSCALLS_MAX) {
		size_t best = LB_TALLY_SLOTS;
		for (size_t i = 0; i < t->n; i++)
			if (!used[i] && (best == LB_TALLY_SLOTS || t->slot[i].count > t->slot[best].count))
				best = i;
		if (best == LB_TALLY_SLOTS)
			break;
		used[best] = true;
		struct lb_refused_syscall *s = &r->syscalls[r->n_syscalls++];
		s->count = t->slot[best].count;
		char *name = seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE, t->slot[best].nr);
		if (name)
			snprintf(s->name, sizeof(s->name), "%s", name);
		else
			snprintf(s->name, sizeof(s->name), "syscall %d", t->slot[best].nr);
		free(name);
	}
}

/*
 * test_seccomp_notify.c — the counting of refused system calls (runner/seccomp_notify.c).
 *
 * The interpreter is checked against the kernel itself: a program's every non-ERRNO return is replaced by a marker
 * ERRNO (so nothing the filter allows ever runs), the program is installed in a forked child, and each call's errno
 * must be what lb_seccomp_eval() says for the same seccomp_data — over the real policy and over random filters
 * libseccomp compiles (arguments compared with every operator, on both 32-bit halves). Then the real path: a child
 * installs the variant with a listener, the test answers with lb_seccomp_notify_answer(), and the child must see
 * exactly the policy's errnos (EPERM, and ENOSYS unnotified), with the counts and names right. Runs as any user.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <errno.h>
#include <linux/audit.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <seccomp.h>
#include <signal.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../../runner/internal.h"

#define MARK_ALLOW 4000u

static struct lb_policy *pol;

static int setup(void **state)
{
	(void)state;
	struct lb_error err = { 0 };
	int r = lb_policy_load(LENSBOX_SOURCE_DIR "/policy", &pol, &err);
	if (r < 0)
		fprintf(stderr, "load: %s\n", err.msg);
	return r < 0 ? -1 : 0;
}

static int teardown(void **state)
{
	(void)state;
	lb_policy_free(pol);
	return 0;
}

/* Every constant return that is not ERRNO becomes ERRNO(4000 + a code per action): safe to run in a child. */
static struct sock_filter *marked(const struct sock_filter *prog, size_t len)
{
	struct sock_filter *m = calloc(len, sizeof(*m));
	assert_non_null(m);
	for (size_t i = 0; i < len; i++) {
		m[i] = prog[i];
		if (m[i].code == (BPF_RET | BPF_K) && (m[i].k & SECCOMP_RET_ACTION_FULL) != SECCOMP_RET_ERRNO) {
			uint32_t a = m[i].k & SECCOMP_RET_ACTION_FULL;
			uint32_t code = a == SECCOMP_RET_ALLOW		? 0
					: a == SECCOMP_RET_KILL_PROCESS ? 1
					: a == SECCOMP_RET_KILL_THREAD	? 2
					: a == SECCOMP_RET_TRAP		? 3
					: a == SECCOMP_RET_LOG		? 4
									: 5;
			m[i].k = SECCOMP_RET_ERRNO | (MARK_ALLOW + code);
		}
		assert_true(m[i].code != (BPF_RET | BPF_A)); /* libseccomp returns constants only */
	}
	return m;
}

struct call {
	long nr;
	uint64_t args[6];
	int err; /* filled by the child */
};

/* Runs each call in a child under prog (every return an ERRNO) and checks its errno against the interpreter. */
static void check_against_kernel(const struct sock_filter *prog, size_t len, struct call *calls_in, size_t n)
{
	struct call *calls =
	    mmap(NULL, n * sizeof(*calls) + 64, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	assert_true(calls != MAP_FAILED);
	memcpy(calls, calls_in, n * sizeof(*calls));
	volatile int *done = (volatile int *)((char *)calls + n * sizeof(*calls));
	struct sock_fprog fp = { .len = (unsigned short)len, .filter = (struct sock_filter *)prog };
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
		    syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &fp) < 0)
			_exit(100);
		/* from here every call answers an errno (nothing runs): results go to shared memory, and we spin */
		for (size_t i = 0; i < n; i++) {
			done[1] = (int)i;
			errno = 0;
			long r = syscall(calls[i].nr, calls[i].args[0], calls[i].args[1], calls[i].args[2],
					 calls[i].args[3], calls[i].args[4], calls[i].args[5]);
			calls[i].err = r < 0 ? errno : -1;
		}
		*done = 1;
		for (;;)
			;
	}
	int st = 0;
	bool reaped = false;
	for (int i = 0; i < 20000 && !*done && !(reaped = waitpid(pid, &st, WNOHANG) == pid); i++)
		usleep(1000);
	if (!reaped) {
		kill(pid, SIGKILL);
		waitpid(pid, reaped ? NULL : &st, 0);
	}
	if (!*done)
		fprintf(stderr, "the child did not finish: wait status %#x at call %d (nr %ld)\n", st, done[1],
			calls[done[1]].nr);
	if (!*done)
		for (int i = 0; i < done[1]; i++)
			if (calls[i].err != 38 && calls[i].err != 1 && (calls[i].err < 4000 || calls[i].err > 4005))
				fprintf(stderr, "  call %d: errno %d\n", i, calls[i].err);
	assert_true(*done);
	for (size_t i = 0; i < n; i++) {
		struct seccomp_data d;
		memset(&d, 0, sizeof(d));
		d.nr = (int)calls[i].nr;
		d.arch = AUDIT_ARCH_X86_64;
		memcpy(d.args, calls[i].args, sizeof(d.args));
		uint32_t v = lb_seccomp_eval(prog, len, &d);
		if ((v & SECCOMP_RET_ACTION_FULL) != SECCOMP_RET_ERRNO || (int)(v & SECCOMP_RET_DATA) != calls[i].err) {
			fprintf(stderr, "call %zu nr %ld arg0 %#llx: kernel errno %d, interpreter %#x\n", i,
				calls[i].nr, (unsigned long long)calls[i].args[0], calls[i].err, v);
			fail();
		}
	}
	munmap(calls, n * sizeof(*calls) + 64);
}

static uint64_t rnd64(void)
{
	return ((uint64_t)(unsigned)random() << 33) ^ ((uint64_t)(unsigned)random() << 11) ^
	       (uint64_t)(unsigned)random();
}

/* Arguments near the values filters compare with: 0, small, flags-like, high halves set, random. */
static uint64_t interesting(void)
{
	static const uint64_t v[] = {
		0,     1,	   2,	       3, 0x10, 0x7E020000,	      0x20000, 0xffffffff, 0x100000000ull,
		~0ull, 0x80000000, 0x40000000, 8, 16,	0x8000000000000000ull
	};
	return random() % 3 ? v[(size_t)random() % (sizeof(v) / sizeof(v[0]))] : rnd64();
}

static void eval_matches_kernel_on_the_policy(void **state)
{
	(void)state;
	srandom(16);
	size_t n = 470 + 3000;
	struct call *calls = calloc(n, sizeof(*calls));
	assert_non_null(calls);
	for (size_t i = 0; i < n; i++) {
		calls[i].nr = i < 470 ? (long)i : random() % 470;
		/* uretprobe (335) and uprobe (336) bypass seccomp since 6.11/6.16 (outside a probe they raise SIGSEGV):
		 * no filter ever sees them. */
		if (calls[i].nr == 335 || calls[i].nr == 336)
			calls[i].nr = 39;
		if (i >= 470)
			for (int a = 0; a < 6; a++)
				calls[i].args[a] = interesting();
	}
	struct sock_filter *m = marked(pol->seccomp.filter, pol->seccomp.len);
	check_against_kernel(m, pol->seccomp.len, calls, n);
	free(m);
	free(calls);
}

static struct sock_filter *export(scmp_filter_ctx ctx, size_t *ret_len)
{
	int fd = (int)syscall(SYS_memfd_create, "bpf", 0u);
	assert_true(fd >= 0);
	assert_int_equal(seccomp_export_bpf(ctx, fd), 0);
	off_t size = lseek(fd, 0, SEEK_END);
	assert_true(size > 0 && size % (off_t)sizeof(struct sock_filter) == 0);
	struct sock_filter *p = malloc((size_t)size);
	assert_non_null(p);
	assert_int_equal(pread(fd, p, (size_t)size, 0), size);
	close(fd);
	*ret_len = (size_t)size / sizeof(struct sock_filter);
	return p;
}

static void eval_matches_kernel_on_random_libseccomp_filters(void **state)
{
	(void)state;
	srandom(1616);
	static const int ops[] = { SCMP_CMP_NE, SCMP_CMP_LT, SCMP_CMP_LE,	SCMP_CMP_EQ,
				   SCMP_CMP_GE, SCMP_CMP_GT, SCMP_CMP_MASKED_EQ };
	static const long nrs[] = { 0, 1, 2, 3, 9, 16, 41, 56, 101, 135, 165, 250, 272, 321, 425, 435 };
	for (int f = 0; f < 40; f++) {
		uint32_t def = random() % 2 ? SCMP_ACT_ALLOW : SCMP_ACT_ERRNO(38);
		scmp_filter_ctx ctx = seccomp_init(def);
		assert_non_null(ctx);
		for (int rule = 0; rule < 12; rule++) {
			long nr = nrs[(size_t)random() % (sizeof(nrs) / sizeof(nrs[0]))];
			uint32_t act =
			    random() % 3 == 0 ? SCMP_ACT_ALLOW : SCMP_ACT_ERRNO(1 + (unsigned)random() % 100);
			if (act == def)
				continue;
			struct scmp_arg_cmp cmp[3];
			unsigned nc = (unsigned)random() % 4;
			for (unsigned c = 0; c < nc; c++) {
				int op = ops[(size_t)random() % (sizeof(ops) / sizeof(ops[0]))];
				cmp[c] = (struct scmp_arg_cmp){
					.arg = c, .op = op, .datum_a = interesting(), .datum_b = interesting()
				};
			}
			(void)seccomp_rule_add_array(ctx, act, (int)nr, nc,
						     cmp); /* conflicting rules are refused: fine */
		}
		size_t len;
		struct sock_filter *prog = export(ctx, &len);
		seccomp_release(ctx);
		size_t n = 400;
		struct call calls[400];
		memset(calls, 0, sizeof(calls));
		for (size_t i = 0; i < n; i++) {
			calls[i].nr = nrs[(size_t)random() % (sizeof(nrs) / sizeof(nrs[0]))];
			for (int a = 0; a < 6; a++)
				calls[i].args[a] = interesting();
		}
		struct sock_filter *m = marked(prog, len);
		check_against_kernel(m, len, calls, n);
		free(m);
		free(prog);
	}
}

static void eval_refuses_malformed_programs(void **state)
{
	(void)state;
	struct seccomp_data d;
	memset(&d, 0, sizeof(d));
	struct sock_filter out_of_bounds[] = { BPF_STMT(BPF_LD | BPF_W | BPF_ABS, sizeof(d)),
					       BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW) };
	assert_int_equal(lb_seccomp_eval(out_of_bounds, 2, &d), SECCOMP_RET_KILL_PROCESS);
	struct sock_filter misaligned[] = { BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 2),
					    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW) };
	assert_int_equal(lb_seccomp_eval(misaligned, 2, &d), SECCOMP_RET_KILL_PROCESS);
	struct sock_filter jump_out[] = { BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0, 5, 0),
					  BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW) };
	assert_int_equal(lb_seccomp_eval(jump_out, 2, &d), SECCOMP_RET_KILL_PROCESS);
	struct sock_filter no_return[] = { BPF_STMT(BPF_LD | BPF_IMM, 1) };
	assert_int_equal(lb_seccomp_eval(no_return, 1, &d), SECCOMP_RET_KILL_PROCESS);
	struct sock_filter bad_mem[] = { BPF_STMT(BPF_ST, 16), BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW) };
	assert_int_equal(lb_seccomp_eval(bad_mem, 2, &d), SECCOMP_RET_KILL_PROCESS);
}

static void variant_notifies_exactly_the_errno_refusals_but_enosys(void **state)
{
	(void)state;
	struct lb_seccomp_notify n;
	const char *why = NULL;
	assert_int_equal(lb_seccomp_notify_prepare(&pol->seccomp, &n, &why), 0);
	size_t notified = 0;
	for (int nr = 0; nr < 470; nr++) {
		struct seccomp_data d;
		memset(&d, 0, sizeof(d));
		d.nr = nr;
		d.arch = AUDIT_ARCH_X86_64;
		uint32_t o = lb_seccomp_eval(pol->seccomp.filter, pol->seccomp.len, &d);
		uint32_t v = lb_seccomp_eval(n.variant.filter, n.variant.len, &d);
		bool refusal = (o & SECCOMP_RET_ACTION_FULL) == SECCOMP_RET_ERRNO && (o & SECCOMP_RET_DATA) != ENOSYS;
		if (refusal) {
			assert_int_equal(v, SECCOMP_RET_USER_NOTIF);
			notified++;
		} else {
			assert_int_equal(v, o);
		}
	}
	assert_true(notified >= 20); /* mount, keyctl, ptrace, bpf, ... */
	lb_seccomp_notify_free(&n);
}

/* The real path: the child installs the variant with a listener and hands it over; we answer. */
static void answers_with_the_policys_errno_and_counts(void **state)
{
	(void)state;
	struct lb_seccomp_notify n;
	const char *why = NULL;
	assert_int_equal(lb_seccomp_notify_prepare(&pol->seccomp, &n, &why), 0);
	int sp[2];
	assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(sp[0]);
		if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
			_exit(100);
		int lfd =
		    (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &n.variant);
		if (lfd < 0)
			_exit(101);
		char c = 'L';
		union {
			char buf[CMSG_SPACE(sizeof(int))];
			struct cmsghdr align;
		} ctl;
		memset(&ctl, 0, sizeof(ctl));
		struct iovec iov = { .iov_base = &c, .iov_len = 1 };
		struct msghdr mh = {
			.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof(ctl.buf)
		};
		struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(cm), &lfd, sizeof(int));
		if (sendmsg(sp[1], &mh, 0) != 1)
			_exit(102);
		close(lfd);
		int bad = 0;
		for (int i = 0; i < 3; i++) /* keyctl x3 */
			if (syscall(SYS_keyctl, 0, 0, 0, 0, 0) != -1 || errno != EPERM)
				bad |= 1;
		if (syscall(SYS_mount, "none", "/", "tmpfs", 0, NULL) != -1 || errno != EPERM)
			bad |= 2;
		if (syscall(435, NULL, 0) != -1 || errno != ENOSYS) /* clone3: ENOSYS, never notified */
			bad |= 4;
		if (syscall(999) != -1 || errno != ENOSYS)
			bad |= 8;
		if (getpid() <= 0)
			bad |= 16;
		/* a second listener in the chain: the kernel refuses it (docs/isolation.md says so) */
		struct sock_filter allow[] = { BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW) };
		struct sock_fprog fp = { .len = 1, .filter = allow };
		if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &fp) != -1 ||
		    errno != EBUSY)
			bad |= 32;
		_exit(bad);
	}
	close(sp[1]);
	char c;
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = { .iov_base = &c, .iov_len = 1 };
	struct msghdr mh = {
		.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof(ctl.buf)
	};
	assert_int_equal(recvmsg(sp[0], &mh, MSG_CMSG_CLOEXEC), 1);
	int lfd;
	struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
	if (!cm) {
		fail_msg("the listener did not come with the message");
		return;
	}
	memcpy(&lfd, CMSG_DATA(cm), sizeof(int));
	close(sp[0]);
	struct lb_syscall_tally t;
	memset(&t, 0, sizeof(t));
	for (;;) {
		struct pollfd pf = { .fd = lfd, .events = POLLIN };
		assert_true(poll(&pf, 1, 10000) == 1);
		if (!(pf.revents & POLLIN))
			break; /* POLLHUP: the child is gone */
		lb_seccomp_notify_answer(lfd, &n, &t);
	}
	close(lfd);
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	struct lb_refusals r;
	memset(&r, 0, sizeof(r));
	lb_syscall_tally_result(&t, &r);
	assert_int_equal(r.syscall, 4);
	assert_int_equal(r.n_syscalls, 2);
	assert_string_equal(r.syscalls[0].name, "keyctl");
	assert_int_equal(r.syscalls[0].count, 3);
	assert_string_equal(r.syscalls[1].name, "mount");
	assert_int_equal(r.syscalls[1].count, 1);
	lb_seccomp_notify_free(&n);
}

static void tally_is_bounded(void **state)
{
	(void)state;
	struct lb_syscall_tally t;
	memset(&t, 0, sizeof(t));
	for (int i = 0; i < 1000; i++)
		lb_syscall_tally_add(&t, i % 100);
	lb_syscall_tally_add(&t, 5);
	assert_int_equal(t.total, 1001);
	assert_int_equal(t.n, LB_TALLY_SLOTS);
	struct lb_refusals r;
	memset(&r, 0, sizeof(r));
	lb_syscall_tally_result(&t, &r);
	assert_int_equal(r.n_syscalls, LB_REFUSED_SYSCALLS_MAX);
	assert_int_equal(r.syscalls[0].count, 11);
	assert_string_equal(r.syscalls[0].name, "fstat"); /* x86-64: 5 */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(eval_matches_kernel_on_the_policy),
		cmocka_unit_test(eval_matches_kernel_on_random_libseccomp_filters),
		cmocka_unit_test(eval_refuses_malformed_programs),
		cmocka_unit_test(variant_notifies_exactly_the_errno_refusals_but_enosys),
		cmocka_unit_test(answers_with_the_policys_errno_and_counts),
		cmocka_unit_test(tally_is_bounded),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}

/*
 * Unit tests for netfilter/src/confine.c: the services worker's seccomp filter. Each case forks a child, which loads
 * the filter and then tries one thing a worker taken over through a parser bug would try: signalling its
 * supervisor (here: the test, the child's parent), starting a process or a program, making a namespace, reaching
 * another process's memory, opening an unusual socket, calling through another architecture's table. What the
 * resolver and relay need (threads, internet and Unix sockets, signals to itself, TCP to 80/443 and the upstream)
 * must keep working, and opening any path, or TCP to another port, must not (Landlock).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <stdbool.h>
#include <sys/prctl.h>
#include <linux/netlink.h>
#include <linux/sched.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "../../../netfilter/src/internal.h"
#include "lb/landlock-abi.h"

#include "../host_probe.h"

/* Runs fn in a confined child; returns its wait status. fn returns the child's exit code. */
static int confined(int (*fn)(void))
{
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		/* cmocka's handlers would report a crash here as the child's own test failure and carry on: the parent
		 * must see the signal */
		signal(SIGSEGV, SIG_DFL);
		signal(SIGBUS, SIG_DFL);
		signal(SIGILL, SIG_DFL);
		struct lb_error err = { 0 };
		int abi = -1;
		if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 || lb_services_confine(53, &abi, &err) < 0) {
			fprintf(stderr, "lb_services_confine: %s\n", err.msg);
			_exit(100);
		}
		if (abi != lb_landlock_kernel_abi() &&
		    !(abi == LB_LANDLOCK_MAX_KNOWN_ABI && abi < lb_landlock_kernel_abi()))
			_exit(101); /* the ABI reported is the one enforced: the kernel's best that lensbox knows */
		_exit(fn());
	}
	int status = 0;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	return status;
}

static void assert_exit_0(int status)
{
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		fail_msg("the confined child failed: %s %d", WIFEXITED(status) ? "exit" : "signal",
			 WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
}

/* Each check: 0 when the call had the expected outcome, else the line number (an exit code the failure names). */
#define EXPECT_EPERM(call)                                  \
	do {                                                \
		errno = 0;                                  \
		if ((call) != -1 || errno != EPERM) {       \
			fprintf(stderr, "%s: %m\n", #call); \
			return __LINE__ % 250 + 1;          \
		}                                           \
	} while (0)
#define EXPECT_OK(call)                                     \
	do {                                                \
		if ((call) < 0) {                           \
			fprintf(stderr, "%s: %m\n", #call); \
			return __LINE__ % 250 + 1;          \
		}                                           \
	} while (0)

static int signals(void)
{
	pid_t parent = getppid(), self = getpid();
	EXPECT_EPERM(kill(parent, 0));
	EXPECT_EPERM(kill(parent, SIGKILL));
	EXPECT_EPERM(kill(0, 0));  /* its process group: the supervisor's too */
	EXPECT_EPERM(kill(-1, 0)); /* every process it may signal */
	EXPECT_EPERM((int)syscall(SYS_tgkill, parent, parent, 0));
	EXPECT_EPERM((int)syscall(SYS_tkill, parent, 0));
	siginfo_t si = { .si_code = SI_QUEUE };
	EXPECT_EPERM((int)syscall(SYS_rt_sigqueueinfo, parent, SIGUSR1, &si));
	EXPECT_EPERM((int)syscall(SYS_rt_tgsigqueueinfo, parent, parent, SIGUSR1, &si));
	EXPECT_EPERM((int)syscall(SYS_pidfd_open, parent, 0));
	EXPECT_EPERM((int)syscall(SYS_pidfd_send_signal, 3, SIGKILL, NULL, 0));
	/* Itself: allowed (the C library's raise() and abort() use tgkill on their own process). */
	EXPECT_OK(kill(self, 0));
	EXPECT_OK((int)syscall(SYS_tgkill, self, (pid_t)syscall(SYS_gettid), 0));
	return 0;
}

static void *thread_main(void *arg)
{
	*(int *)arg = 42;
	return NULL;
}

static int processes(void)
{
	int value = 0;
	pthread_t t;
	if (pthread_create(&t, NULL, thread_main, &value) != 0 || pthread_join(t, NULL) != 0 || value != 42)
		return 1; /* threads are what the services are made of */
	EXPECT_EPERM(fork());
	EXPECT_EPERM((int)syscall(SYS_vfork) == 0 ? (_exit(99), 0) : -1);
	EXPECT_EPERM((int)syscall(SYS_clone, (unsigned long)SIGCHLD, 0UL, NULL, NULL, 0UL));
	struct clone_args ca = { .exit_signal = SIGCHLD };
	errno = 0;
	if (syscall(SYS_clone3, &ca, sizeof(ca)) != -1 || errno != ENOSYS)
		return 2; /* ENOSYS, so the C library falls back to clone for its threads */
	char *const argv[] = { "/bin/true", NULL }, *const envp[] = { NULL };
	EXPECT_EPERM(execve("/bin/true", argv, envp));
	EXPECT_EPERM((int)syscall(SYS_execveat, -100, "/bin/true", argv, envp, 0));
	return 0;
}

static int namespaces_and_memory(void)
{
	EXPECT_EPERM(unshare(CLONE_NEWUSER));
	EXPECT_EPERM(unshare(CLONE_NEWNET));
	EXPECT_EPERM(setns(0, 0));
	EXPECT_EPERM((int)ptrace(PTRACE_TRACEME, 0, NULL, NULL));
	char buf[8];
	struct iovec local = { buf, sizeof(buf) }, remote = { buf, sizeof(buf) };
	EXPECT_EPERM((int)process_vm_readv(getppid(), &local, 1, &remote, 1, 0));
	EXPECT_EPERM((int)syscall(SYS_bpf, 0, NULL, 0));
	EXPECT_EPERM((int)syscall(SYS_perf_event_open, NULL, 0, -1, -1, 0));
	EXPECT_EPERM((int)syscall(SYS_userfaultfd, 0));
	EXPECT_EPERM((int)syscall(SYS_io_uring_setup, 1, NULL));
	EXPECT_EPERM((int)syscall(SYS_keyctl, 0, 0, 0, 0, 0));
	EXPECT_EPERM((int)syscall(SYS_open_tree, -100, "/", 0));
	return 0;
}

static int sockets(void)
{
	EXPECT_OK(socket(AF_INET, SOCK_DGRAM, 0));
	EXPECT_OK(socket(AF_INET, SOCK_STREAM, 0));
	EXPECT_OK(socket(AF_UNIX, SOCK_STREAM, 0));
	int sv[2];
	EXPECT_OK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv));
	errno = 0;
	if (socket(AF_INET6, SOCK_STREAM, 0) < 0 && errno == EPERM)
		return 1; /* allowed (a host without IPv6 answers EAFNOSUPPORT, not EPERM) */
	/* NETLINK_ROUTE: getifaddrs(), which the resolver uses to keep the host's own addresses out of answers. */
	EXPECT_OK(socket(AF_NETLINK, SOCK_RAW, NETLINK_ROUTE));
	EXPECT_EPERM(socket(AF_NETLINK, SOCK_RAW, NETLINK_NETFILTER));
	EXPECT_EPERM(socket(AF_NETLINK, SOCK_RAW, NETLINK_AUDIT));
	EXPECT_EPERM(socket(AF_NETLINK, SOCK_RAW, NETLINK_KOBJECT_UEVENT));
	static const int refused[] = { AF_UNSPEC, 3 /* AX25 */,	   5 /* APPLETALK */, 9 /* X25 */,     15 /* KEY */,
				       AF_PACKET, 38 /* AF_ALG */, 40 /* AF_VSOCK */, 44 /* AF_XDP */, 255 };
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		EXPECT_EPERM(socket(refused[i], SOCK_DGRAM, 0));
		EXPECT_EPERM(socketpair(refused[i], SOCK_DGRAM, 0, sv));
	}
	return 0;
}

/* Landlock (ABI 1): no path opens at all. */
static int landlock_paths(void)
{
	errno = 0;
	if (open("/etc/hostname", O_RDONLY | O_CLOEXEC) >= 0 || errno != EACCES)
		return 1;
	if (open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC) >= 0 || errno != EACCES)
		return 2;
	if (open("/tmp/lensbox-confine-test", O_WRONLY | O_CREAT | O_CLOEXEC, 0600) >= 0 || errno != EACCES)
		return 3;
	return 0;
}

/* Landlock (ABI 4): TCP connects only to 80, 443 and the upstream's port (53 here); no TCP bind. */
static int landlock_tcp(void)
{
	static const struct {
		uint16_t port;
		bool allowed;
	} tries[] = { { 80, true }, { 443, true }, { 53, true }, { 8080, false }, { 22, false } };
	for (size_t i = 0; i < sizeof(tries) / sizeof(tries[0]); i++) {
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		struct sockaddr_in a = { .sin_family = AF_INET,
					 .sin_port = htons(tries[i].port),
					 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		errno = 0;
		int r = connect(fd, (struct sockaddr *)&a, sizeof(a));
		/* allowed: whatever loopback answers (refused, mostly), never Landlock's EACCES */
		if (tries[i].allowed ? (r < 0 && errno == EACCES) : (r == 0 || errno != EACCES))
			return 10 + (int)i;
		close(fd);
	}
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in any = { .sin_family = AF_INET };
	errno = 0;
	if (bind(fd, (struct sockaddr *)&any, sizeof(any)) == 0 || errno != EACCES)
		return 20;
	return 0;
}

/* kill(parent, 0) through the x32 table (the number with bit 30 set): must never reach the kernel's kill. */
static int x32_kill(void)
{
	long r = syscall(0x40000000L | 62, (long)getppid(), 0L);
	return r == 0 ? 1 : 0;
}

/* kill(parent, 0) through the i386 table (int 0x80, eax 37). */
static int i386_kill(void)
{
	long r = 37;
	long pid = getppid();
	__asm__ volatile("int $0x80" : "+a"(r) : "b"(pid), "c"(0L) : "memory");
	return r == 0 ? 1 : 0;
}

static void the_supervisor_cannot_be_signalled(void **state)
{
	(void)state;
	assert_exit_0(confined(signals));
}

static void no_process_or_program_but_threads(void **state)
{
	(void)state;
	assert_exit_0(confined(processes));
}

static void no_namespaces_no_other_memory_no_rare_kernel_interfaces(void **state)
{
	(void)state;
	assert_exit_0(confined(namespaces_and_memory));
}

static void internet_and_unix_sockets_only(void **state)
{
	(void)state;
	assert_exit_0(confined(sockets));
}

/* Skips, saying why, when the kernel's Landlock is below abi (0: none at all). */
static void need_landlock(int abi, const char *what)
{
	int have = lb_landlock_kernel_abi();
	if (have < abi) {
		print_message("[  SKIP    ] %s needs Landlock ABI %d; this kernel has %d%s\n", what, abi, have,
			      have ? "" : " (Landlock off or not built in)");
		skip();
	}
}

static void no_path_opens(void **state)
{
	(void)state;
	need_landlock(1, "refusing every path");
	assert_exit_0(confined(landlock_paths));
}

static void only_the_services_tcp_ports(void **state)
{
	(void)state;
	need_landlock(4, "TCP connect and bind rules");
	assert_exit_0(confined(landlock_tcp));
}

static void assert_killed_by_the_filter(int status, const char *what)
{
	if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGSYS)
		fail_msg("the %s call was not killed by the filter (status %#x: %s %d)", what, status,
			 WIFSIGNALED(status) ? "signal" : "exit",
			 WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
}

/* x32 numbers (bit 30) arrive as this architecture's: the filter refuses them like a foreign architecture, on any
 * x86_64 kernel, whether or not it serves x32. */
static void x32_table_kills_the_caller(void **state)
{
	(void)state;
	assert_killed_by_the_filter(confined(x32_kill), "x32");
}

/* int 0x80 reaches the filter as AUDIT_ARCH_I386: the foreign-architecture action kills. Only where the host serves
 * the i386 table at all (tests/unit/host_probe.h); elsewhere int 0x80 never reaches a filter. */
static void i386_table_kills_the_caller(void **state)
{
	(void)state;
	char why[256];
	if (!lb_test_host_has_i386(why, sizeof(why))) {
		print_message("[  SKIP    ] %s\n", why);
		skip();
	}
	assert_killed_by_the_filter(confined(i386_kill), "i386");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(the_supervisor_cannot_be_signalled),
		cmocka_unit_test(no_process_or_program_but_threads),
		cmocka_unit_test(no_namespaces_no_other_memory_no_rare_kernel_interfaces),
		cmocka_unit_test(internet_and_unix_sockets_only),
		cmocka_unit_test(no_path_opens),
		cmocka_unit_test(only_the_services_tcp_ports),
		cmocka_unit_test(x32_table_kills_the_caller),
		cmocka_unit_test(i386_table_kills_the_caller),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

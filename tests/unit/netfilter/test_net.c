/*
 * Unit tests for netfilter/src/net.c, ruleset.c and veth.c against the kernel, in network namespaces this test
 * creates (unshare(CLONE_NEWNET)): never the machine's own. The first new namespace stands for the host, a second one
 * for a sandbox. Nothing is sent anywhere; the tests look at the table, links and addresses. Needs root.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <arpa/inet.h>
#include <sys/wait.h>
#include <sched.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "lb/landlock-abi.h"
#include "lb/netfilter.h"

static int host_fd = -1, sandbox_fd = -1;

static int enter_worlds(void **state)
{
	(void)state;
	if (geteuid() != 0) {
		fprintf(stderr, "test_net needs root (it creates network namespaces)\n");
		return -1;
	}
	/* the "host": a fresh, empty namespace, so the machine's ruleset and links are never touched */
	if (unshare(CLONE_NEWNET) < 0)
		return -1;
	host_fd = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	if (unshare(CLONE_NEWNET) < 0)
		return -1;
	sandbox_fd = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	if (host_fd < 0 || sandbox_fd < 0 || setns(host_fd, CLONE_NEWNET) < 0)
		return -1;
	return 0;
}

static int leave(void **state)
{
	(void)state;
	close(host_fd);
	close(sandbox_fd);
	return 0;
}

static char *run(const char *cmd)
{
	FILE *p = popen(cmd, "r");
	assert_non_null(p);
	char *buf = calloc(1, 1 << 16);
	size_t n = fread(buf, 1, (1 << 16) - 1, p);
	buf[n] = '\0';
	pclose(p);
	return buf;
}

static struct lb_net *start_warm(unsigned warm_slots)
{
	struct lb_net_config cfg = { .policy_dir = LENSBOX_SOURCE_DIR "/policy",
				     .warm_slots = warm_slots,
				     .pool = "10.231.0.0/24",
				     .dns_upstream = "192.0.2.53", /* never asked: no query is made in these tests */
				     .resolver_port = 20053,
				     .relay_port = 20080,
				     .skip_npm_lookup = true };
	struct lb_net *net = NULL;
	struct lb_error err = { 0 };
	int r = lb_net_init(&cfg, &net, &err);
	if (r < 0)
		fail_msg("lb_net_init: %s", err.msg);
	return net;
}

static struct lb_net *start(void)
{
	return start_warm(0);
}

static void attach_detach_web(void **state)
{
	(void)state;
	struct lb_net *net = start();
	struct lb_error err = { 0 };
	char *empty = run("nft list table inet lensbox");
	struct lb_net_info info;
	if (lb_net_attach(net, "unit-web", sandbox_fd, LB_TIER_WEB, &info, &err) < 0)
		fail_msg("attach: %s", err.msg);
	assert_string_equal(info.host_ifname, "lbh0");
	assert_string_equal(info.address, "10.231.0.2");
	assert_string_equal(info.gateway, "10.231.0.1");
	assert_true(if_nametoindex("lbh0") > 0);
	char *t = run("nft list table inet lensbox");
	assert_non_null(strstr(t, "chain sb0_fwd"));
	assert_non_null(strstr(t, "ip saddr != 10.231.0.2 counter name \"sb0_blocked\" drop"));
	assert_non_null(strstr(t, "comment \"refused packets of the sandbox on lbh0"));
	free(t);
	/* the sandbox side, seen from inside its namespace */
	assert_int_equal(setns(sandbox_fd, CLONE_NEWNET), 0);
	char *addr = run("ip -4 -o addr show dev eth0");
	char *route = run("ip route show default");
	char *v6 = run("cat /proc/sys/net/ipv6/conf/all/disable_ipv6");
	assert_int_equal(setns(host_fd, CLONE_NEWNET), 0);
	assert_non_null(strstr(addr, "10.231.0.2/30"));
	assert_non_null(strstr(route, "default via 10.231.0.1 dev eth0"));
	assert_string_equal(v6, "1\n");
	free(addr);
	free(route);
	free(v6);

	uint64_t blocked = 99;
	assert_int_equal(lb_net_blocked(net, "unit-web", &blocked, &err), 0);
	assert_int_equal(blocked, 0);
	/* a second sandbox of the same name replaces the first; a bad name or tier is refused */
	assert_int_equal(lb_net_attach(net, "unit-web", sandbox_fd, LB_TIER_WEB, &info, &err), 0);
	assert_string_equal(info.host_ifname, "lbh0");
	assert_int_equal(lb_net_attach(net, "Bad Name", sandbox_fd, LB_TIER_WEB, &info, &err), -EINVAL);
	assert_int_equal(lb_net_attach(net, "x", sandbox_fd, LB_TIER_COUNT, &info, &err), -EINVAL);

	/* someone deletes lensbox's table: verify loads it and the sandbox's rules again */
	unsigned repaired = 99;
	assert_int_equal(lb_net_verify(net, &repaired, &err), 0);
	assert_int_equal(repaired, 0);
	free(run("nft delete table inet lensbox"));
	assert_int_equal(lb_net_verify(net, &repaired, &err), 0);
	assert_int_equal(repaired, 2);
	t = run("nft list table inet lensbox");
	assert_non_null(strstr(t, "chain sb0_fwd"));
	free(t);

	assert_int_equal(lb_net_detach(net, "unit-web", &err), 0);
	assert_int_equal(if_nametoindex("lbh0"), 0);
	t = run("nft list table inet lensbox");
	assert_string_equal(t, empty);
	free(t);
	free(empty);
	assert_int_equal(lb_net_detach(net, "unit-web", &err), -ENOENT);
	assert_int_equal(lb_net_unload(net, &err), 0);
	lb_net_free(net);
}

/* A datagram from inside sandbox_ns to its gateway's port 9: refused by the slot's `in` chain and counted. */
static void send_refused(int sandbox_ns, const char *gateway)
{
	assert_int_equal(setns(sandbox_ns, CLONE_NEWNET), 0);
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in to = { .sin_family = AF_INET, .sin_port = htons(9) };
	assert_int_equal(inet_pton(AF_INET, gateway, &to.sin_addr), 1);
	assert_true(fd >= 0 && sendto(fd, "x", 1, 0, (struct sockaddr *)&to, sizeof(to)) == 1);
	close(fd);
	assert_int_equal(setns(host_fd, CLONE_NEWNET), 0);
}

static unsigned warm_count(struct lb_net *net)
{
	struct lb_net_health h;
	lb_net_health(net, &h);
	return h.warm_slots;
}

static bool table_has(const char *what)
{
	char *t = run("nft list table inet lensbox");
	bool has = strstr(t, what) != NULL;
	free(t);
	return has;
}

/* Warm slots: objects loaded ahead, unreachable (no map element, no veth) until a sandbox of their tier takes one;
 * its refusal counter starts at zero; detach returns the slot while fewer than warm_slots are kept. */
static void warm_slots(void **state)
{
	(void)state;
	struct lb_net *net = start_warm(1);
	struct lb_error err = { 0 };
	/* the pool is 10.231.0.0/24 (64 slots): warm slots come from the top, web first */
	assert_int_equal(warm_count(net), 2);
	assert_true(table_has("chain sb63_fwd"));      /* web's */
	assert_true(table_has("chain sb62_pre"));      /* packages' */
	assert_false(table_has("set sb62_tcp_ports")); /* packages has no forwarded ports */
	assert_false(table_has("\"lbh63\""));	       /* no element: nothing reaches the chains */
	assert_false(table_has("\"lbh62\""));

	struct lb_net_info info;
	assert_int_equal(lb_net_attach(net, "warm-a", sandbox_fd, LB_TIER_WEB, &info, &err), 0);
	assert_string_equal(info.host_ifname, "lbh63");
	assert_string_equal(info.address, "10.231.0.254");
	assert_true(table_has("\"lbh63\" : jump sb63_fwd"));
	assert_int_equal(warm_count(net), 1);
	send_refused(sandbox_fd, "10.231.0.253");
	/* The datagram leaves once the sandbox's kernel has resolved the gateway's address (ARP, asynchronous): the
	 * counter moves a moment after sendto returns (under ASan on a busy host, more than a moment). */
	uint64_t blocked = 0;
	for (int i = 0; i < 200 && blocked == 0; i++) {
		assert_int_equal(lb_net_blocked(net, "warm-a", &blocked, &err), 0);
		if (blocked == 0) {
			struct timespec ts = { 0, 10000000L };
			nanosleep(&ts, NULL);
		}
	}
	assert_true(blocked >= 1);

	/* detach: elements and veth go, the objects stay for the next web sandbox */
	assert_int_equal(lb_net_detach(net, "warm-a", &err), 0);
	assert_int_equal(if_nametoindex("lbh63"), 0);
	assert_false(table_has("\"lbh63\""));
	assert_true(table_has("chain sb63_fwd"));
	assert_int_equal(warm_count(net), 2);

	/* the next one starts with its own count, not the last sandbox's refusals */
	assert_int_equal(lb_net_attach(net, "warm-b", sandbox_fd, LB_TIER_WEB, &info, &err), 0);
	assert_string_equal(info.host_ifname, "lbh63");
	assert_int_equal(lb_net_blocked(net, "warm-b", &blocked, &err), 0);
	assert_int_equal(blocked, 0);

	/* a second web sandbox finds no warm slot: a cold one, loaded whole, removed whole (one warm web is kept) */
	assert_int_equal(unshare(CLONE_NEWNET), 0);
	int second = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	assert_int_equal(setns(host_fd, CLONE_NEWNET), 0);
	assert_true(second >= 0);
	assert_int_equal(lb_net_attach(net, "warm-c", second, LB_TIER_WEB, &info, &err), 0);
	assert_string_equal(info.host_ifname, "lbh0");
	assert_int_equal(lb_net_detach(net, "warm-b", &err), 0);
	assert_int_equal(lb_net_detach(net, "warm-c", &err), 0);
	assert_false(table_has("sb0_"));
	assert_true(table_has("chain sb63_fwd"));
	close(second);

	/* reconciling keeps them (they are this process's), the table's loss forgets them and verify makes one again */
	unsigned n = 0;
	assert_int_equal(lb_net_reconcile(net, NULL, 0, &n, &err), 0);
	assert_int_equal(n, 0);
	assert_int_equal(warm_count(net), 2);
	free(run("nft delete table inet lensbox"));
	assert_int_equal(lb_net_verify(net, &n, &err), 0);
	assert_int_equal(warm_count(net), 1);
	/* someone deletes a warm slot's chains: its next attach loads them whole */
	free(run("nft delete chain inet lensbox sb63_fwd"));
	assert_int_equal(lb_net_attach(net, "warm-d", sandbox_fd, LB_TIER_WEB, &info, &err), 0);
	assert_true(table_has("\"lbh63\" : jump sb63_fwd"));
	assert_true(table_has("chain sb63_fwd"));
	assert_int_equal(lb_net_detach(net, "warm-d", &err), 0);
	assert_int_equal(lb_net_unload(net, &err), 0);
	assert_int_equal(warm_count(net), 0);
	lb_net_free(net);
}

static void reconcile_after_restart(void **state)
{
	(void)state;
	struct lb_net *net = start();
	struct lb_error err = { 0 };
	assert_int_equal(lb_net_attach(net, "keep", sandbox_fd, LB_TIER_PACKAGES, NULL, &err), 0);
	lb_net_free(net); /* a crash leaves the veth and the table behind */
	assert_true(if_nametoindex("lbh0") > 0);
	net = start();
	struct lb_net_health h;
	lb_net_health(net, &h);
	assert_true(h.table_loaded);
	assert_int_equal(h.sandboxes, 1); /* the leftover's slot is taken until reconciled */
	const char *known[] = { "other" };
	unsigned removed = 0;
	assert_int_equal(lb_net_reconcile(net, known, 1, &removed, &err), 0);
	assert_int_equal(removed, 1);
	assert_int_equal(if_nametoindex("lbh0"), 0);
	lb_net_health(net, &h);
	assert_int_equal(h.sandboxes, 0);
	assert_int_equal(lb_net_unload(net, &err), 0);
	lb_net_free(net);
	char *t = run("nft list tables");
	assert_null(strstr(t, "lensbox"));
	free(t);
}

static void off_tier_and_resolv_conf(void **state)
{
	(void)state;
	struct lb_net *net = start();
	struct lb_error err = { 0 };
	struct lb_net_info info;
	assert_int_equal(lb_net_attach(net, "quiet", sandbox_fd, LB_TIER_OFF, &info, &err), 0);
	assert_string_equal(info.host_ifname, "");
	assert_int_equal(if_nametoindex("lbh0"), 0);
	assert_null(lb_net_resolv_conf(LB_TIER_OFF));
	assert_non_null(strstr(lb_net_resolv_conf(LB_TIER_WEB), "nameserver " LB_NET_RESOLVER_ADDR "\n"));
	assert_non_null(strstr(lb_net_resolv_conf(LB_TIER_PACKAGES), "nameserver " LB_NET_RESOLVER_ADDR "\n"));
	lb_net_unload(net, &err);
	lb_net_free(net);
}

static char *proc_status(unsigned pid)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%u/status", pid);
	FILE *f = fopen(path, "r");
	assert_non_null(f);
	char *status = calloc(1, 8192);
	assert_non_null(status);
	assert_true(fread(status, 1, 8191, f) > 0);
	fclose(f);
	return status;
}

/* The process has exited: no such pid, or a zombie nobody has reaped yet. */
static bool gone(unsigned pid)
{
	char path[64], buf[4096];
	snprintf(path, sizeof(path), "/proc/%u/stat", pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return true;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	const char *end = strrchr(buf, ')'); /* the state follows the command name, which may hold anything */
	return end && end[1] == ' ' && end[2] == 'Z';
}

/* 0 when this process can bind 0.0.0.0:port itself (the socket is closed again), else -errno. */
static int bind_port(int type, uint16_t port)
{
	int fd = socket(AF_INET, type | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = INADDR_ANY };
	int r = bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 ? -errno : 0;
	close(fd);
	return r;
}

/* What another local user would try to take a service's port: bind it as uid 65534 with SO_REUSEADDR, then with
 * SO_REUSEPORT. 0 when every try was refused with EADDRINUSE, else 1 (a bind succeeded or failed otherwise). */
static int hijack_refused(int type, uint16_t port)
{
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		if (setgroups(0, NULL) < 0 || setresgid(65534, 65534, 65534) < 0 || setresuid(65534, 65534, 65534) < 0)
			_exit(2);
		static const int opts[] = { SO_REUSEADDR, SO_REUSEPORT };
		for (size_t i = 0; i < 2; i++) {
			int fd = socket(AF_INET, type, 0), one = 1;
			struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
			if (fd < 0 || setsockopt(fd, SOL_SOCKET, opts[i], &one, sizeof(one)) < 0)
				_exit(3);
			if (bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 || errno != EADDRINUSE)
				_exit(1);
			close(fd);
		}
		_exit(0);
	}
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 4;
}

static void isolated_services(void **state)
{
	(void)state;
	struct lb_net_config cfg = { .policy_dir = LENSBOX_SOURCE_DIR "/policy",
				     .pool = "10.231.0.0/24",
				     .dns_upstream = "192.0.2.53",
				     .resolver_port = 20053,
				     .relay_port = 20080,
				     .skip_npm_lookup = true,
				     .services_uid = 65534 };
	struct lb_net *net = NULL;
	struct lb_error err = { 0 };
	if (lb_net_init(&cfg, &net, &err) < 0)
		fail_msg("lb_net_init: %s", err.msg);
	struct lb_net_health h;
	lb_net_health(net, &h);
	assert_true(h.services_isolated);
	assert_true(h.services_alive);
	assert_true(h.services_supervised);
	assert_int_not_equal(h.services_pid, (unsigned)getpid());
	assert_int_not_equal(h.services_worker_pid, 0);
	assert_int_not_equal(h.services_worker_pid, h.services_pid);
	assert_int_equal(h.services_restarts, 0);
	/* The worker reports the Landlock ABI it confined itself with: the kernel's best that lensbox knows. */
	int kabi = lb_landlock_kernel_abi();
	assert_int_equal(h.services_landlock_abi, kabi > LB_LANDLOCK_MAX_KNOWN_ABI ? LB_LANDLOCK_MAX_KNOWN_ABI : kabi);
	/* The keeper, the supervisor and its worker: uid 65534 everywhere, no capability, each the child of the one
	 * before. */
	assert_int_not_equal(h.services_keeper_pid, 0);
	assert_int_not_equal(h.services_pid, 0);
	unsigned pids[3] = { h.services_keeper_pid, h.services_pid, h.services_worker_pid };
	unsigned parents[3] = { (unsigned)getpid(), h.services_keeper_pid, h.services_pid };
	for (size_t i = 0; i < 3; i++) {
		char *status = proc_status(pids[i]);
		assert_non_null(strstr(status, "\nUid:\t65534\t65534\t65534\t65534\n"));
		assert_non_null(strstr(status, "\nGid:\t65534\t65534\t65534\t65534\n"));
		assert_non_null(strstr(status, "\nCapEff:\t0000000000000000\n"));
		assert_non_null(strstr(status, "\nCapPrm:\t0000000000000000\n"));
		assert_non_null(strstr(status, "\nNoNewPrivs:\t1\n"));
		/* The worker, which parses the sandboxes' bytes, runs under its seccomp filter (confine.c). */
		assert_non_null(strstr(status, i < 2 ? "\nSeccomp:\t0\n" : "\nSeccomp:\t2\n"));
		char ppid[32];
		snprintf(ppid, sizeof(ppid), "\nPPid:\t%u\n", parents[i]);
		assert_non_null(strstr(status, ppid));
		free(status);
	}
	assert_int_equal(lb_net_attach(net, "iso", sandbox_fd, LB_TIER_WEB, NULL, &err), 0);
	assert_int_equal(lb_net_detach(net, "iso", &err), 0);

	/* No other local user can take either port, with or without SO_REUSEADDR/SO_REUSEPORT: on UDP that would hand
	 * them the sandboxes' DNS queries to read and answer. */
	assert_int_equal(hijack_refused(SOCK_DGRAM, 20053), 0);
	assert_int_equal(hijack_refused(SOCK_STREAM, 20080), 0);

	/* A worker that dies is replaced, and the ports stay taken meanwhile (the supervisor holds the sockets). */
	unsigned worker = h.services_worker_pid;
	assert_int_equal(kill((pid_t)worker, SIGKILL), 0);
	assert_int_equal(bind_port(SOCK_DGRAM, 20053), -EADDRINUSE);
	assert_int_equal(bind_port(SOCK_STREAM, 20080), -EADDRINUSE);
	assert_int_equal(hijack_refused(SOCK_DGRAM, 20053), 0);
	for (int i = 0; i < 300; i++) { /* the first replacement comes after 100 ms */
		lb_net_health(net, &h);
		if (h.services_alive && h.services_worker_pid != worker)
			break;
		usleep(10000);
	}
	assert_true(h.services_alive);
	assert_int_equal(h.services_pid, pids[1]);
	assert_int_not_equal(h.services_worker_pid, 0);
	assert_int_not_equal(h.services_worker_pid, worker);
	assert_int_equal(h.services_restarts, 1);
	assert_int_equal(kill((pid_t)worker, 0), -1); /* reaped by the supervisor */
	worker = h.services_worker_pid;

	assert_true(h.services_supervised);
	assert_false(h.services_crash_loop);

	/* A supervisor that dies takes its worker along (parent-death SIGKILL); the keeper replaces both, and the
	 * ports stay taken meanwhile (the keeper holds the sockets). */
	unsigned supervisor = h.services_pid;
	assert_int_equal(kill((pid_t)supervisor, SIGKILL), 0);
	assert_int_equal(bind_port(SOCK_DGRAM, 20053), -EADDRINUSE);
	assert_int_equal(bind_port(SOCK_STREAM, 20080), -EADDRINUSE);
	for (int i = 0; i < 300; i++) {
		lb_net_health(net, &h);
		if (h.services_alive && h.services_pid != supervisor && h.services_pid != 0)
			break;
		usleep(10000);
	}
	assert_true(h.services_alive);
	assert_true(h.services_supervised);
	assert_int_not_equal(h.services_pid, supervisor);
	assert_int_not_equal(h.services_worker_pid, worker);
	assert_int_equal(h.services_supervisor_restarts, 1);
	assert_true(gone(worker));
	supervisor = h.services_pid;
	worker = h.services_worker_pid;
	unsigned keeper = h.services_keeper_pid;

	assert_int_equal(lb_net_unload(net, &err), 0);
	lb_net_free(net);
	assert_int_equal(kill((pid_t)keeper, 0), -1); /* killed and reaped with the context */
	for (int i = 0; i < 200 && !(gone(worker) && gone(supervisor)); i++)
		usleep(10000); /* parent-death SIGKILL (reaping is then init's) */
	assert_true(gone(supervisor));
	assert_true(gone(worker));
	/* The ports are free again (a dead process's last close may be finished by a kernel worker a moment later). */
	for (int i = 0; i < 200 && (bind_port(SOCK_DGRAM, 20053) < 0 || bind_port(SOCK_STREAM, 20080) < 0); i++)
		usleep(10000);
	assert_int_equal(bind_port(SOCK_DGRAM, 20053), 0);
	assert_int_equal(bind_port(SOCK_STREAM, 20080), 0);
}

static void bad_config_is_refused(void **state)
{
	(void)state;
	struct lb_net *net = NULL;
	struct lb_error err = { 0 };
	struct lb_net_config cfg = { .policy_dir = LENSBOX_SOURCE_DIR "/policy",
				     .pool = "10.231.0.0/30",
				     .dns_upstream = "192.0.2.53",
				     .skip_npm_lookup = true };
	assert_int_equal(lb_net_init(&cfg, &net, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "prefix 8..28"));
	cfg.pool = "10.231.0.0/24";
	cfg.veth_gso_max = 1500;
	assert_int_equal(lb_net_init(&cfg, &net, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "veth_gso_max 1500: expected 65536..524280"));
	cfg.veth_gso_max = LB_NET_MAX_VETH_GSO_MAX + 1;
	assert_int_equal(lb_net_init(&cfg, &net, &err), -EINVAL);
	cfg.veth_gso_max = 0;
	cfg.dns_upstream = "resolver.example";
	assert_int_equal(lb_net_init(&cfg, &net, &err), -EINVAL);
	cfg.dns_upstream = "192.0.2.53";
	cfg.policy_dir = "/nonexistent";
	assert_int_equal(lb_net_init(&cfg, &net, &err), -ENOENT);
	assert_non_null(strstr(err.msg, "/nonexistent/network/denied.list"));
	assert_null(net);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(attach_detach_web),	    cmocka_unit_test(reconcile_after_restart),
		cmocka_unit_test(off_tier_and_resolv_conf), cmocka_unit_test(isolated_services),
		cmocka_unit_test(bad_config_is_refused),    cmocka_unit_test(warm_slots),
	};
	return cmocka_run_group_tests(tests, enter_worlds, leave);
}

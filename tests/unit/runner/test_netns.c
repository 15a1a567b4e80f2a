/* Unit tests for network namespaces made ahead (runner/netns.c): lb_netns_make() returns a descriptor above stdio of
 * a namespace that is not the caller's, leaves the calling thread in its own, and the namespace holds only lo, up,
 * with every port bindable; two calls give two namespaces. Needs root (CAP_SYS_ADMIN), as lensboxd's core has. */
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "lb/runner.h"

static ino_t ns_ino(const char *path)
{
	struct stat st;
	assert_int_equal(stat(path, &st), 0);
	return st.st_ino;
}

static ino_t fd_ino(int fd)
{
	struct stat st;
	assert_int_equal(fstat(fd, &st), 0);
	return st.st_ino;
}

static void makes_a_namespace_and_stays_home(void **state)
{
	(void)state;
	ino_t home = ns_ino("/proc/thread-self/ns/net");
	struct lb_error err = { 0 };
	int a = lb_netns_make(&err);
	assert_true(a > 2);
	assert_true(fcntl(a, F_GETFD) & FD_CLOEXEC);
	int b = lb_netns_make(&err);
	assert_true(b > 2);
	assert_int_equal(ns_ino("/proc/thread-self/ns/net"), home);
	assert_int_not_equal(fd_ino(a), home);
	assert_int_not_equal(fd_ino(b), home);
	assert_int_not_equal(fd_ino(a), fd_ino(b));
	close(a);
	close(b);
}

static void holds_only_lo_up_and_any_port(void **state)
{
	(void)state;
	struct lb_error err = { 0 };
	int ns = lb_netns_make(&err);
	assert_true(ns > 2);
	int home = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	assert_true(home >= 0);
	assert_int_equal(setns(ns, CLONE_NEWNET), 0);

	struct if_nameindex *ifs = if_nameindex();
	assert_non_null(ifs);
	size_t n = 0;
	for (struct if_nameindex *i = ifs; i->if_index; i++, n++)
		assert_string_equal(i->if_name, "lo");
	if_freenameindex(ifs);
	assert_int_equal(n, 1);

	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	assert_true(s >= 0);
	struct ifreq ifr;
	memset(&ifr, 0, sizeof(ifr));
	memcpy(ifr.ifr_name, "lo", 3);
	assert_int_equal(ioctl(s, SIOCGIFFLAGS, &ifr), 0);
	assert_true(ifr.ifr_flags & IFF_UP);
	close(s);

	char buf[16] = "";
	FILE *f = fopen("/proc/sys/net/ipv4/ip_unprivileged_port_start", "re");
	assert_non_null(f);
	assert_non_null(fgets(buf, sizeof(buf), f));
	fclose(f);
	assert_string_equal(buf, "0\n");

	assert_int_equal(setns(home, CLONE_NEWNET), 0);
	close(home);
	close(ns);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(makes_a_namespace_and_stays_home),
		cmocka_unit_test(holds_only_lo_up_and_any_port),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * test_landlock_audit.c — the parser of Landlock's audit records (runner/landlock_audit.c): which records count for
 * a run, once per refusal, and what hostile text and lengths cannot do. Pure parsing: no audit, no root needed.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <linux/netlink.h>
#include <stdio.h>

#include "../../../runner/internal.h"

/* One netlink message of type holding text (as the kernel sends it: not NUL-terminated, length aligned). */
static size_t msg(char *buf, size_t off, int type, const char *text)
{
	size_t len = strlen(text);
	struct nlmsghdr h = { .nlmsg_len = (uint32_t)NLMSG_LENGTH(len), .nlmsg_type = (uint16_t)type };
	memcpy(buf + off, &h, sizeof(h));
	/* as the kernel sends it: not NUL-terminated */
	memcpy(buf + off + NLMSG_HDRLEN, text, len); // NOLINT(bugprone-not-null-terminated-result)
	return off + NLMSG_ALIGN(h.nlmsg_len);
}

static void feed(struct lb_ll_audit *a, int type, const char *text)
{
	union {
		char buf[1024];
		struct nlmsghdr align;
	} u;
	memset(&u, 0, sizeof(u));
	size_t n = msg(u.buf, 0, type, text);
	lb_ll_audit_take(a, u.buf, n);
}

static void fresh(struct lb_ll_audit *a, pid_t pid)
{
	memset(a, 0, sizeof(*a));
	a->fd = -1;
	a->pid = pid;
}

static void counts_the_runs_domain_once_per_refusal(void **state)
{
	(void)state;
	struct lb_ll_audit a;
	fresh(&a, 4242);
	/* first refusal: two records of one event, then the domain's record naming our pid */
	feed(&a, 1423, "audit(1.1:10): domain=1c3 blockers=fs.make_reg path=\"/proc/2\" dev=\"proc\" ino=1");
	feed(&a, 1424,
	     "audit(1.1:10): domain=1c3 status=allocated mode=enforcing pid=4242 uid=1 exe=\"/x\" comm=\"x\"");
	feed(&a, 1423, "audit(1.1:10): domain=1c3 blockers=fs.write_file path=\"/proc/2/comm\" dev=\"proc\" ino=2");
	assert_int_equal(a.domain, 0x1c3);
	assert_int_equal(a.fs, 1);
	/* later refusals: a TCP connect and another write */
	feed(&a, 1423, "audit(1.2:11): domain=1c3 blockers=net.connect_tcp daddr=127.0.0.1 dest=22");
	feed(&a, 1423, "audit(1.3:12): domain=1c3 blockers=fs.write_file path=\"/proc/2/oom_score_adj\"");
	assert_int_equal(a.fs, 2);
	assert_int_equal(a.net, 1);
	feed(&a, 1424, "audit(1.4:13): domain=1c3 status=deallocated denials=4");
	assert_true(a.deallocated);
}

static void other_domains_never_count(void **state)
{
	(void)state;
	struct lb_ll_audit a;
	fresh(&a, 4242);
	/* another run's domain; its exe tries to smuggle our pid past the quote */
	feed(&a, 1423, "audit(2.1:20): domain=aaa blockers=fs.write_file path=\"/etc\"");
	feed(&a, 1424, "audit(2.1:20): domain=aaa status=allocated mode=enforcing pid=7 uid=1 exe=\"/x pid=4242\"");
	assert_int_equal(a.domain, 0);
	feed(&a, 1423, "audit(2.2:21): domain=bbb blockers=fs.write_file path=\"/usr domain=ccc\"");
	feed(&a, 1424, "audit(2.2:21): domain=bbb status=allocated mode=enforcing pid=4242 uid=1 exe=\"/y\"");
	assert_int_equal(a.domain, 0xbbb);
	assert_int_equal(a.fs, 1); /* bbb's own record only; aaa's pending one was dropped */
	feed(&a, 1423, "audit(2.3:22): domain=aaa blockers=fs.write_file path=\"/etc\"");
	feed(&a, 1424, "audit(2.3:22): domain=bbb status=deallocated denials=1");
	assert_int_equal(a.fs, 1);
	assert_true(a.deallocated);
	/* records of other types and without a domain are ignored */
	feed(&a, 1300, "audit(2.4:23): arch=c000003e syscall=2 domain=bbb");
	feed(&a, 1423, "audit(2.5:24): blockers=fs.write_file");
	assert_int_equal(a.fs, 1);
}

static void pending_table_is_bounded(void **state)
{
	(void)state;
	struct lb_ll_audit a;
	fresh(&a, 99);
	for (int i = 1; i <= 1000; i++) {
		char t[128];
		snprintf(t, sizeof(t), "audit(3.%d:%d): domain=%x blockers=fs.write_file path=\"/a\"", i, 100 + i, i);
		feed(&a, 1423, t);
	}
	assert_true(a.n_pending <= LB_LL_PENDING);
	assert_int_equal(a.fs, 0);
}

static void marker_ends_the_wait(void **state)
{
	(void)state;
	struct lb_ll_audit a;
	fresh(&a, 1);
	snprintf(a.marker, sizeof(a.marker), "lensbox-run-end-1-7");
	feed(&a, 1121, "audit(4.1:30): pid=1 uid=0 auid=4294967295 ses=4294967295 msg='lensbox-run-end-1-6'");
	assert_false(a.marker_seen);
	feed(&a, 1121, "audit(4.1:31): pid=1 uid=0 auid=4294967295 ses=4294967295 msg='lensbox-run-end-1-7'");
	assert_true(a.marker_seen);
}

static void bad_lengths_stop_the_parse(void **state)
{
	(void)state;
	struct lb_ll_audit a;
	fresh(&a, 5);
	union {
		char buf[512];
		struct nlmsghdr align;
	} u;
	memset(&u, 0, sizeof(u));
	size_t n = msg(u.buf, 0, 1424, "audit(5.1:40): domain=5 status=allocated mode=enforcing pid=5");
	size_t second = n;
	n = msg(u.buf, n, 1423, "audit(5.2:41): domain=5 blockers=fs.write_file");
	/* the second message claims more than the buffer holds: it is not read */
	struct nlmsghdr *h = (struct nlmsghdr *)(void *)(u.buf + second);
	h->nlmsg_len = 4000;
	lb_ll_audit_take(&a, u.buf, n);
	assert_int_equal(a.domain, 5);
	assert_int_equal(a.fs, 0);
	/* a length below the header's: stop there */
	h->nlmsg_len = 3;
	lb_ll_audit_take(&a, u.buf, n);
	assert_int_equal(a.fs, 0);
	/* a buffer cut inside a header */
	lb_ll_audit_take(&a, u.buf, 7);
	/* a record longer than the parser's text buffer is cut, not overrun */
	char big[900];
	memset(big, 'x', sizeof(big));
	memcpy(big, "audit(5.3:42): domain=5 blockers=fs.read_file path=", 52);
	big[sizeof(big) - 1] = '\0';
	feed(&a, 1423, big);
	assert_int_equal(a.fs, 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(counts_the_runs_domain_once_per_refusal),
		cmocka_unit_test(other_domains_never_count),
		cmocka_unit_test(pending_table_is_bounded),
		cmocka_unit_test(marker_ends_the_wait),
		cmocka_unit_test(bad_lengths_stop_the_parse),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

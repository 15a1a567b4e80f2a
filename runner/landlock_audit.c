/*
 * landlock_audit.c — counting what Landlock refused during a run, from the kernel's audit records (ABI 7).
 *
 * Runs in the caller (lensboxd or lensbox-runner, root), on the thread of the run's output loop. Privileges: binding
 * the NETLINK_AUDIT read-log multicast group needs CAP_AUDIT_READ (root has it); it only reads copies of records the
 * kernel emits anyway. Nothing here ever changes the host's audit state: audit is host-wide (turning it on sends
 * every record to the kernel log when no auditd runs), so it is the admin's choice (`auditctl -e 1`), and
 * lb_ll_audit_open() only listens where audit is already enabled.
 *
 * The records (Linux 6.15+, Landlock ABI 7). With LANDLOCK_RESTRICT_SELF_LOG_NEW_EXEC_ON at restrict_self (exec.c
 * passes it only while a run listens), each denial of the run's domain, after the program's execve, is logged as
 *   type 1423 AUDIT_LANDLOCK_ACCESS  "audit(…): domain=1a2b3c blockers=fs.make_reg path=\"/usr\" dev=… ino=…"
 * and the domain's first denial is followed, in the same event, by
 *   type 1424 AUDIT_LANDLOCK_DOMAIN  "audit(…): domain=1a2b3c status=allocated mode=enforcing pid=4242 uid=… exe=…"
 * whose pid (host pid namespace) is the process that called restrict_self: the run's main process, C2. When the
 * domain's last process is gone the kernel logs "domain=1a2b3c status=deallocated denials=N". Every lensboxd run and
 * any other Landlock user on the host share the multicast group, so a record counts for this run only once its
 * domain's "allocated" record names this run's pid; records seen before that wait in a small table.
 *
 * One refused call can log several records (open(O_CREAT|O_WRONLY) of an existing file: fs.make_reg and
 * fs.write_file), all of one audit event: a refusal is counted once per event (the serial in "audit(time:serial)").
 *
 * Late records: the kernel queues records as the refused call happens and a kernel thread delivers them, in order.
 * When a run failed or had a refusal, lb_ll_audit_finish() sends a marker through the same queue once the run's
 * processes are gone (an AUDIT_TRUSTED_APP user message, "lensbox-run-end-<pid>-<n>": CAP_AUDIT_WRITE, which root
 * has) and reads until it comes back, at most wait_ms: every record the run caused has then arrived. A successful run
 * with no refusal seen sends none, so the admin's audit log gets at most one such line per run that had something
 * to report. (The domain's "deallocated" record would prove the same without a marker, but the kernel frees the
 * domain after an RCU grace period and a work item: ~50 ms after the run here.)
 *
 * Hostile input: the records carry strings the sandbox controls (path, exe, comm). The kernel hex-encodes any that
 * holds a space, a quote or a control character, and the fields read here come before the first quoted value, so
 * the text is cut at the first '"' and searched for " name=" only before it. Memory is fixed: one 8 KiB receive
 * buffer on the stack, a table of LB_LL_PENDING domains; at most LB_LL_BATCH records are read per poll round; a
 * flood the socket cannot hold is dropped by the kernel (ENOBUFS: `lost`) and never stalls the run.
 */
#include "internal.h"

#include "lb/landlock-abi.h"

#include <errno.h>
#include <linux/audit.h>
#include <linux/netlink.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define LB_LL_BATCH 64
#ifndef AUDIT_TRUSTED_APP
#define AUDIT_TRUSTED_APP 1121 /* "trusted app msg - freestyle text" (user message range) */
#endif

/* The next message of a receive buffer, or NULL: checked against what is left, whatever the kernel's lengths say. */
static const struct nlmsghdr *next_msg(const char *buf, size_t len, size_t *off)
{
	if (*off + sizeof(struct nlmsghdr) > len)
		return NULL;
	const struct nlmsghdr *h = (const struct nlmsghdr *)(const void *)(buf + *off);
	if (h->nlmsg_len < sizeof(*h) || h->nlmsg_len > len - *off)
		return NULL;
	size_t step = NLMSG_ALIGN(h->nlmsg_len);
	*off = step > len - *off ? len : *off + step;
	return h;
}

static uint64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Asks the kernel for its audit status on fd (AUDIT_GET); 0 with *ret filled, or -errno. */
static int audit_get(int fd, struct audit_status *ret)
{
	struct {
		struct nlmsghdr h;
		char pad[16];
	} req;
	memset(&req, 0, sizeof(req));
	req.h.nlmsg_len = NLMSG_LENGTH(0);
	req.h.nlmsg_type = AUDIT_GET;
	req.h.nlmsg_flags = NLM_F_REQUEST;
	req.h.nlmsg_seq = 1;
	struct sockaddr_nl kernel = { .nl_family = AF_NETLINK };
	if (sendto(fd, &req, req.h.nlmsg_len, 0, (struct sockaddr *)&kernel, sizeof(kernel)) < 0)
		return -errno;
	for (int tries = 0; tries < 64; tries++) {
		struct pollfd pf = { .fd = fd, .events = POLLIN };
		if (poll(&pf, 1, 100) != 1) /* the kernel answers within the sendto; never wait long */
			return -ETIMEDOUT;
		union {
			char buf[8192];
			struct nlmsghdr align;
		} u;
		ssize_t n = recv(fd, u.buf, sizeof(u.buf), MSG_DONTWAIT);
		if (n < 0) {
			if (errno == EINTR || errno == EAGAIN || errno == ENOBUFS)
				continue;
			return -errno;
		}
		size_t off = 0;
		for (const struct nlmsghdr *h; (h = next_msg(u.buf, (size_t)n, &off));) {
			if (h->nlmsg_type == NLMSG_ERROR && h->nlmsg_seq == 1) {
				const struct nlmsgerr *e = (const void *)((const char *)h + NLMSG_HDRLEN);
				if (h->nlmsg_len >= NLMSG_LENGTH(sizeof(*e)) && e->error < 0)
					return e->error;
			} else if (h->nlmsg_type == AUDIT_GET && h->nlmsg_seq == 1) {
				memset(ret, 0, sizeof(*ret));
				size_t len = h->nlmsg_len - NLMSG_HDRLEN;
				memcpy(ret, (const char *)h + NLMSG_HDRLEN, len < sizeof(*ret) ? len : sizeof(*ret));
				return 0;
			}
		}
	}
	return -ETIMEDOUT;
}

/* A socket bound to the read-log group (CLOEXEC, non-blocking reads), or -errno. */
static int readlog_socket(void)
{
	int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_AUDIT);
	if (fd < 0)
		return -errno;
	struct sockaddr_nl sa = { .nl_family = AF_NETLINK, .nl_groups = 1u << (AUDIT_NLGRP_READLOG - 1) };
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int e = -errno;
		close(fd);
		return e;
	}
	return fd;
}

const char *lb_ll_audit_why_not(int landlock_abi)
{
	if (landlock_abi < 7)
		return "Landlock logs its refusals from ABI 7 (Linux 6.15); this kernel's is older";
	int fd = readlog_socket();
	if (fd < 0)
		return fd == -EPERM ? "reading the kernel's audit records needs CAP_AUDIT_READ"
				    : "the kernel has no audit (CONFIG_AUDIT) or refused its read-log socket";
	close(fd);
	/* The status on a socket of its own: one bound to the read-log group may queue records before the answer. */
	fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_AUDIT);
	struct audit_status st = { 0 };
	int r = fd < 0 ? -errno : audit_get(fd, &st);
	if (fd >= 0)
		close(fd);
	if (r < 0)
		return "the kernel's audit did not answer its status (AUDIT_GET)";
	if (!st.enabled)
		return "the kernel's audit is off, and lensbox never turns it on (host-wide); an admin can: auditctl "
		       "-e 1";
	if (st.failure == AUDIT_FAIL_PANIC)
		return "the kernel's audit panics on lost records (auditctl -f 2): a sandbox flooding refusals could "
		       "halt the host, so lensbox does not ask Landlock to log";
	return NULL;
}

/* The answer of lb_ll_audit_why_not() for the policy's sandboxes, asked at most once a second per process: a run
 * pays for AUDIT_GET only when the admin may just have changed the setting. */
static bool audit_usable(int landlock_abi)
{
	static _Atomic uint64_t checked_ms;
	static _Atomic int usable;
	uint64_t now = mono_ms(), then = atomic_load(&checked_ms);
	if (then && now - then < 1000)
		return atomic_load(&usable) != 0;
	bool u = lb_ll_audit_why_not(landlock_abi) == NULL;
	atomic_store(&usable, u ? 1 : 0);
	atomic_store(&checked_ms, now ? now : 1);
	return u;
}

int lb_ll_audit_open(struct lb_ll_audit *a, int landlock_abi)
{
	memset(a, 0, sizeof(*a));
	a->fd = -1;
	if (landlock_abi < 7 || !audit_usable(landlock_abi))
		return -ENOTSUP;
	int fd = readlog_socket();
	if (fd < 0)
		return fd;
	a->fd = fd;
	return 0;
}

/* "audit(1733329022.123:456): …" → 456, or 0. */
static uint64_t serial_of(const char *text)
{
	const char *colon = strchr(text, ':');
	const char *close = strchr(text, ')');
	if (strncmp(text, "audit(", 6) != 0 || !colon || !close || colon > close)
		return 0;
	return strtoull(colon + 1, NULL, 10);
}

static const char *field(const char *text, const char *name)
{
	const char *p = strstr(text, name);
	return p ? p + strlen(name) : NULL;
}

static void pend(struct lb_ll_audit *a, uint64_t domain, bool fs, bool net)
{
	size_t i;
	for (i = 0; i < a->n_pending && a->pending[i].domain != domain; i++)
		;
	if (i == a->n_pending) {
		if (a->n_pending < LB_LL_PENDING)
			a->n_pending++;
		else
			i = a->next_evict++ % LB_LL_PENDING; /* another run's domain, most likely */
		a->pending[i].domain = domain;
		a->pending[i].fs = a->pending[i].net = 0;
	}
	a->pending[i].fs += fs;
	a->pending[i].net += net;
}

/* One record's text (NUL-terminated, cut at the first '"'). */
static void take_record(struct lb_ll_audit *a, int type, const char *text)
{
	const char *d = field(text, " domain=");
	if (!d)
		return;
	uint64_t domain = strtoull(d, NULL, 16);
	if (type == LB_AUDIT_LANDLOCK_ACCESS) {
		uint64_t serial = serial_of(text);
		if (serial && serial == a->last_serial)
			return; /* another record of a refusal already counted */
		a->last_serial = serial;
		const char *b = field(text, " blockers=");
		bool fs = b && strncmp(b, "fs.", 3) == 0, net = b && strncmp(b, "net.", 4) == 0;
		if (a->domain && domain == a->domain) {
			a->fs += fs;
			a->net += net;
		} else if (!a->domain) {
			pend(a, domain, fs, net);
		}
		return;
	}
	const char *status = field(text, " status=");
	if (!status)
		return;
	if (strncmp(status, "allocated ", 10) == 0 && !a->domain) {
		const char *p = field(text, " pid=");
		if (!p || a->pid <= 0 || strtol(p, NULL, 10) != a->pid)
			return;
		a->domain = domain;
		for (size_t i = 0; i < a->n_pending; i++)
			if (a->pending[i].domain == domain) {
				a->fs += a->pending[i].fs;
				a->net += a->pending[i].net;
			}
		a->n_pending = 0;
	} else if (strncmp(status, "deallocated", 11) == 0 && a->domain && domain == a->domain) {
		a->deallocated = true;
	}
}

void lb_ll_audit_take(struct lb_ll_audit *a, const char *buf, size_t n)
{
	size_t off = 0;
	for (const struct nlmsghdr *h; (h = next_msg(buf, n, &off));) {
		bool marker = h->nlmsg_type == AUDIT_TRUSTED_APP && a->marker[0];
		if (h->nlmsg_type != LB_AUDIT_LANDLOCK_ACCESS && h->nlmsg_type != LB_AUDIT_LANDLOCK_DOMAIN && !marker)
			continue;
		char text[512];
		size_t len = h->nlmsg_len - NLMSG_HDRLEN;
		if (len >= sizeof(text))
			len = sizeof(text) - 1;
		memcpy(text, (const char *)h + NLMSG_HDRLEN, len);
		text[len] = '\0';
		if (marker) {
			if (strstr(text, a->marker))
				a->marker_seen = true;
			continue;
		}
		char *q = strchr(text, '"');
		if (q)
			*q = '\0';
		take_record(a, h->nlmsg_type, text);
	}
}

void lb_ll_audit_read(struct lb_ll_audit *a)
{
	for (int i = 0; a->fd >= 0 && i < LB_LL_BATCH; i++) {
		union {
			char buf[8192];
			struct nlmsghdr align;
		} u;
		ssize_t n = recv(a->fd, u.buf, sizeof(u.buf), MSG_DONTWAIT);
		if (n < 0) {
			if (errno == ENOBUFS) {
				a->lost = true;
				continue;
			}
			return; /* EAGAIN: nothing more now */
		}
		lb_ll_audit_take(a, u.buf, (size_t)n);
	}
}

/* Sends the marker (see the opening comment); false when the kernel refused it. Privileged (CAP_AUDIT_WRITE: a
 * record in the host's audit log) and safe: the text is ours alone, fixed and short, nothing of the sandbox's, and
 * it is sent only where the admin has turned audit on, at most once per run. */
static bool send_marker(struct lb_ll_audit *a)
{
	static _Atomic unsigned long n;
	snprintf(a->marker, sizeof(a->marker), "lensbox-run-end-%d-%lu", (int)getpid(), atomic_fetch_add(&n, 1));
	struct {
		struct nlmsghdr h;
		char text[64];
	} req;
	memset(&req, 0, sizeof(req));
	size_t len = strlen(a->marker) + 1;
	memcpy(req.text, a->marker, len);
	req.h.nlmsg_len = (uint32_t)NLMSG_LENGTH(len);
	req.h.nlmsg_type = AUDIT_TRUSTED_APP;
	req.h.nlmsg_flags = NLM_F_REQUEST;
	struct sockaddr_nl kernel = { .nl_family = AF_NETLINK };
	if (sendto(a->fd, &req, req.h.nlmsg_len, 0, (struct sockaddr *)&kernel, sizeof(kernel)) < 0) {
		a->marker[0] = '\0';
		return false;
	}
	return true;
}

void lb_ll_audit_finish(struct lb_ll_audit *a, bool failed, int wait_ms)
{
	if (a->fd < 0)
		return;
	lb_ll_audit_read(a);
	if (!failed && !a->domain && a->n_pending == 0)
		return; /* nothing to report and nothing at stake: no marker, no wait */
	if (!send_marker(a))
		return;
	uint64_t until = mono_ms() + (uint64_t)wait_ms;
	while (!a->marker_seen) {
		uint64_t now = mono_ms();
		if (now >= until)
			break;
		struct pollfd pf = { .fd = a->fd, .events = POLLIN };
		if (poll(&pf, 1, (int)(until - now)) <= 0)
			break;
		lb_ll_audit_read(a);
	}
}

void lb_ll_audit_close(struct lb_ll_audit *a)
{
	if (a->fd >= 0)
		close(a->fd);
	a->fd = -1;
}

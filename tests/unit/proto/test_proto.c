/* Unit tests for supervisor/proto/proto.c: what the core's decoder accepts and refuses, as a compromised API
 * process would send it (forged, truncated, oversized, out of range, "../" and NUL in names, wrong descriptors),
 * and that a refused message leaves no descriptor open. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include "lb/tier.h"
#include "proto.h"

static int pair[2];

/* A run of chat-1 with src as its source (in a memfd, as the API process sends it) on pair[0]. */
static void send_run(const char *src)
{
	size_t len = strlen(src);
	int fd = lbp_memfd("src", src, len);
	assert_true(fd >= 0);
	struct lbp_run run = { .name = "chat-1",
			       .language = LB_LANGUAGE_PYTHON,
			       .timeout_seconds = 60,
			       .output_limit = 10000,
			       .source_len = len };
	assert_int_equal(lbp_send(pair[0], LBP_RUN, &run, sizeof(run), &fd, 1), 0);
	close(fd);
}

static int setup(void **state)
{
	(void)state;
	return socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair);
}

static int teardown(void **state)
{
	(void)state;
	close(pair[0]);
	close(pair[1]);
	return 0;
}

static bool fd_open(int fd)
{
	return fcntl(fd, F_GETFD) >= 0;
}

static int open_fds(void)
{
	int n = 0;
	for (int fd = 0; fd < 1024; fd++)
		n += fd_open(fd);
	return n;
}

/* Sends raw bytes (a forged datagram) with optional descriptors, then decodes on the other side. */
static int forge(const void *bytes, size_t len, const int *fds, size_t nfds, struct lbp_msg *m)
{
	struct iovec iov = { .iov_base = (void *)bytes, .iov_len = len };
	union {
		char space[CMSG_SPACE(sizeof(int) * 4)];
		struct cmsghdr align;
	} ctl;
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	if (nfds) {
		memset(&ctl, 0, sizeof(ctl));
		mh.msg_control = ctl.space;
		mh.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
	}
	assert_int_equal(sendmsg(pair[0], &mh, 0), (ssize_t)len);
	return lbp_recv(pair[1], m);
}

static size_t frame(void *buf, uint16_t type, const void *payload, size_t len, uint32_t nfds)
{
	struct lbp_hdr h = { LBP_MAGIC, LBP_VERSION, type, (uint32_t)len, nfds };
	memcpy(buf, &h, sizeof(h));
	memcpy((char *)buf + sizeof(h), payload, len);
	return sizeof(h) + len;
}

static struct lbp_msg m;

static void round_trip_every_request(void **state)
{
	(void)state;
	struct lbp_name n = { "chat-1" };
	assert_int_equal(lbp_send(pair[0], LBP_SANDBOX_GET, &n, sizeof(n), NULL, 0), 0);
	assert_int_equal(lbp_recv(pair[1], &m), 0);
	assert_int_equal(m.hdr.type, LBP_SANDBOX_GET);
	assert_string_equal(m.u.name.name, "chat-1");

	assert_int_equal(lbp_send(pair[0], LBP_HEALTH, NULL, 0, NULL, 0), 0);
	assert_int_equal(lbp_recv(pair[1], &m), 0);
	assert_int_equal(m.hdr.type, LBP_HEALTH);

	struct lbp_sandbox_put put = { .name = "chat-2" };
	put.spec.has = LBP_SPEC_NETWORK | LBP_SPEC_IMAGE | LBP_SPEC_MEMORY;
	put.spec.network = LB_TIER_WEB;
	strcpy(put.spec.image, "python:3.12-slim");
	put.spec.memory_bytes = 1ull << 30;
	assert_int_equal(lbp_send(pair[0], LBP_SANDBOX_PUT, &put, sizeof(put), NULL, 0), 0);
	assert_int_equal(lbp_recv(pair[1], &m), 0);
	assert_int_equal(m.u.put.spec.network, LB_TIER_WEB);

	const char src[] = "print(6*7)\n";
	send_run(src);
	assert_int_equal(lbp_recv(pair[1], &m), 0);
	assert_int_equal(m.nfds, 1);
	char back[32] = { 0 };
	assert_int_equal(pread(m.fds[0], back, sizeof(back), 0), (ssize_t)(sizeof(src) - 1));
	assert_string_equal(back, src);
	lbp_msg_clear(&m);

	struct lbp_file f = { .name = "chat-1", .path = "data/in.csv" };
	assert_int_equal(lbp_send(pair[0], LBP_FILE_GET, &f, sizeof(f), NULL, 0), 0);
	assert_int_equal(lbp_recv(pair[1], &m), 0);
	struct lbp_run_get g = { .id = "01jdx8w3q4r7m2k9v5n6p8t0ab" };
	assert_int_equal(lbp_send(pair[0], LBP_RUN_GET, &g, sizeof(g), NULL, 0), 0);
	assert_int_equal(lbp_recv(pair[1], &m), 0);
}

static void replies_inline_and_in_a_memfd(void **state)
{
	(void)state;
	assert_int_equal(lbp_send_reply(pair[0], 200, "application/json", "run=x", "{}", 2, -1), 0);
	assert_int_equal(lbp_recv(pair[1], &m), 0);
	assert_int_equal(m.u.reply.status, 200);
	assert_int_equal(m.u.reply.body_len, 2);
	assert_memory_equal(m.u.raw + sizeof(struct lbp_reply), "{}", 2);
	size_t big = LBP_INLINE_MAX + 1;
	char *body = malloc(big);
	memset(body, 'x', big);
	assert_int_equal(lbp_send_reply(pair[0], 200, "text/plain", "", body, big, -1), 0);
	assert_int_equal(lbp_recv(pair[1], &m), 0);
	assert_int_equal(m.u.reply.body_in_fd, 1);
	assert_int_equal(m.nfds, 1);
	lbp_msg_clear(&m);
	free(body);
}

/* A pull's progress (core -> API): sent without blocking, accepted as sent; anything out of range refused, since
 * the API process treats the core's messages as bounded input too. */
static void progress_accepted_and_forged_refused(void **state)
{
	(void)state;
	struct lbp_progress p = { .phase = LBP_PHASE_DOWNLOADING, .done = 5, .total = 10 };
	memset(p.layer, 'a', LBP_LAYER_HEX);
	assert_int_equal(lbp_send_progress(pair[0], &p), 0);
	assert_int_equal(lbp_recv(pair[1], &m), 0);
	assert_int_equal(m.hdr.type, LBP_PROGRESS);
	assert_int_equal(m.u.progress.done, 5);
	assert_string_equal(lbp_phase_name(m.u.progress.phase), "downloading");
	struct lbp_progress none = { .phase = LBP_PHASE_RESOLVING };
	assert_int_equal(lbp_send_progress(pair[0], &none), 0);
	assert_int_equal(lbp_recv(pair[1], &m), 0);
	assert_null(lbp_phase_name(LBP_PHASE_END));

	char buf[LBP_MESSAGE_MAX + 64];
	struct lbp_progress bad[7];
	for (size_t i = 0; i < 7; i++)
		bad[i] = p;
	bad[0].phase = LBP_PHASE_END;			 /* no such phase */
	bad[1].pad = 1;					 /* padding must be zero */
	bad[2].done = 11;				 /* more done than the total */
	bad[3].layer[3] = 'G';				 /* not lowercase hex */
	bad[4].layer[10] = '\0';			 /* neither "" nor 64 digits */
	memset(bad[5].layer, 'a', sizeof(bad[5].layer)); /* no NUL */
	bad[6].layer[LBP_LAYER_HEX + 2] = 'x';		 /* bytes after the NUL */
	for (size_t i = 0; i < 7; i++)
		assert_int_equal(forge(buf, frame(buf, LBP_PROGRESS, &bad[i], sizeof(bad[i]), 0), NULL, 0, &m),
				 -EBADMSG);
	/* a size that is not the struct's */
	assert_int_equal(forge(buf, frame(buf, LBP_PROGRESS, &p, sizeof(p) - 8, 0), NULL, 0, &m), -EBADMSG);
	/* a pull whose progress flag is neither 0 nor 1 */
	struct lbp_image_pull pull = { .ref = "python:3.12-slim", .progress = 2 };
	assert_int_equal(forge(buf, frame(buf, LBP_IMAGE_PULL, &pull, sizeof(pull), 0), NULL, 0, &m), -EBADMSG);
	pull.progress = 1;
	assert_int_equal(forge(buf, frame(buf, LBP_IMAGE_PULL, &pull, sizeof(pull), 0), NULL, 0, &m), 0);
}

/* Each forged request must be refused with -EBADMSG. */
static void forged_requests_refused(void **state)
{
	(void)state;
	char buf[LBP_MESSAGE_MAX + 64];
	struct lbp_name n;
	static const char *const bad_names[] = { "", "../etc", "Chat", "-x", "a/b", "a b" };
	for (size_t i = 0; i < sizeof(bad_names) / sizeof(bad_names[0]); i++) {
		memset(&n, 0, sizeof(n));
		snprintf(n.name, sizeof(n.name), "%s", bad_names[i]);
		assert_int_equal(forge(buf, frame(buf, LBP_SANDBOX_DELETE, &n, sizeof(n), 0), NULL, 0, &m), -EBADMSG);
	}
	/* a name with no NUL inside its array */
	memset(&n, 'a', sizeof(n));
	assert_int_equal(forge(buf, frame(buf, LBP_SANDBOX_GET, &n, sizeof(n), 0), NULL, 0, &m), -EBADMSG);
	/* a NUL in the middle hides nothing: what follows must not matter, but the name before it must be valid */
	memset(&n, 0, sizeof(n));
	memcpy(n.name, "\0../x", 5);
	assert_int_equal(forge(buf, frame(buf, LBP_SANDBOX_GET, &n, sizeof(n), 0), NULL, 0, &m), -EBADMSG);

	/* wrong magic, version, unknown type, length mismatches, truncation */
	strcpy(n.name, "ok");
	size_t len = frame(buf, LBP_SANDBOX_GET, &n, sizeof(n), 0);
	struct lbp_hdr *h = (struct lbp_hdr *)buf;
	h->magic ^= 1;
	assert_int_equal(forge(buf, len, NULL, 0, &m), -EBADMSG);
	h->magic ^= 1;
	h->version = 2;
	assert_int_equal(forge(buf, len, NULL, 0, &m), -EBADMSG);
	h->version = LBP_VERSION;
	h->type = 999;
	assert_int_equal(forge(buf, len, NULL, 0, &m), -EBADMSG);
	h->type = LBP_SANDBOX_GET;
	assert_int_equal(forge(buf, len - 1, NULL, 0, &m), -EBADMSG); /* truncated */
	h->len += 1;
	assert_int_equal(forge(buf, len + 1, NULL, 0, &m), -EBADMSG); /* oversized for the type */
	h->len -= 1;
	assert_int_equal(forge(buf, 7, NULL, 0, &m), -EBADMSG); /* shorter than a header */
	assert_int_equal(forge(buf, len, NULL, 0, &m), 0);	/* the untouched one passes */

	/* a datagram larger than any message */
	memset(buf, 0, sizeof(buf));
	assert_int_equal(forge(buf, sizeof(buf), NULL, 0, &m), -EBADMSG);

	/* paths */
	static const char *const bad_paths[] = { "../x", "a/../../b", "/etc/passwd", "a//b", "a/./b", "a/", "./x" };
	for (size_t i = 0; i < sizeof(bad_paths) / sizeof(bad_paths[0]); i++) {
		struct lbp_file f = { .name = "chat" };
		snprintf(f.path, sizeof(f.path), "%s", bad_paths[i]);
		assert_int_equal(forge(buf, frame(buf, LBP_FILE_GET, &f, sizeof(f), 0), NULL, 0, &m), -EBADMSG);
	}
	struct lbp_file empty = { .name = "chat" };
	assert_int_equal(forge(buf, frame(buf, LBP_FILE_GET, &empty, sizeof(empty), 0), NULL, 0, &m), -EBADMSG);
	assert_int_equal(forge(buf, frame(buf, LBP_FILES_LIST, &empty, sizeof(empty), 0), NULL, 0, &m), 0);

	/* out-of-range numbers and enums */
	struct lbp_sandbox_put put = { .name = "chat" };
	put.spec.has = LBP_SPEC_NETWORK;
	put.spec.network = LB_TIER_COUNT;
	assert_int_equal(forge(buf, frame(buf, LBP_SANDBOX_PUT, &put, sizeof(put), 0), NULL, 0, &m), -EBADMSG);
	put.spec.network = LB_TIER_OFF;
	put.spec.has = 1u << 20;
	assert_int_equal(forge(buf, frame(buf, LBP_SANDBOX_PUT, &put, sizeof(put), 0), NULL, 0, &m), -EBADMSG);
	put.spec.has = 0;
	put.spec.cpu_millicores = 500; /* a value for a field it says it did not give */
	assert_int_equal(forge(buf, frame(buf, LBP_SANDBOX_PUT, &put, sizeof(put), 0), NULL, 0, &m), -EBADMSG);
	struct lbp_runs_list rl = { .sandbox = "", .limit = 0 };
	assert_int_equal(forge(buf, frame(buf, LBP_RUNS_LIST, &rl, sizeof(rl), 0), NULL, 0, &m), -EBADMSG);
	rl.limit = 1001;
	assert_int_equal(forge(buf, frame(buf, LBP_RUNS_LIST, &rl, sizeof(rl), 0), NULL, 0, &m), -EBADMSG);
	struct lbp_run_get g = { .id = "01JDX8W3Q4R7M2K9V5N6P8T0AB" };
	assert_int_equal(forge(buf, frame(buf, LBP_RUN_GET, &g, sizeof(g), 0), NULL, 0, &m), -EBADMSG);
}

/* Descriptors: missing, extra, of the wrong kind, unsealed, of the wrong size; every one closed when refused. */
static void wrong_descriptors_refused_and_closed(void **state)
{
	(void)state;
	char buf[1024 * 8];
	const char src[] = "print(1)";
	int before = open_fds();
	struct lbp_run run = { .name = "chat",
			       .language = LB_LANGUAGE_PYTHON,
			       .timeout_seconds = 60,
			       .output_limit = 100,
			       .source_len = sizeof(src) - 1 };
	size_t len = frame(buf, LBP_RUN, &run, sizeof(run), 1);
	assert_int_equal(forge(buf, frame(buf, LBP_RUN, &run, sizeof(run), 0), NULL, 0, &m), -EBADMSG); /* none */

	int sealed = lbp_memfd("src", src, sizeof(src) - 1);
	int fds[2] = { sealed, sealed };
	/* two where one belongs: refused, and neither arrives open */
	struct lbp_hdr *h = (struct lbp_hdr *)buf;
	h->nfds = 2;
	assert_int_equal(forge(buf, len, fds, 2, &m), -EBADMSG);
	h->nfds = 1;

	/* an unsealed memfd (the sender could change the source after the core checked it) */
	int open_fd = memfd_create("unsealed", MFD_CLOEXEC);
	assert_int_equal(write(open_fd, src, sizeof(src) - 1), (ssize_t)(sizeof(src) - 1));
	assert_int_equal(forge(buf, len, &open_fd, 1, &m), -EBADMSG);

	/* a socket instead of a file */
	assert_int_equal(forge(buf, len, &pair[0], 1, &m), -EBADMSG);

	/* a sealed memfd whose size is not the one stated */
	run.source_len = 3;
	len = frame(buf, LBP_RUN, &run, sizeof(run), 1);
	assert_int_equal(forge(buf, len, &sealed, 1, &m), -EBADMSG);

	/* the right one passes */
	run.source_len = sizeof(src) - 1;
	len = frame(buf, LBP_RUN, &run, sizeof(run), 1);
	assert_int_equal(forge(buf, len, &sealed, 1, &m), 0);
	int got = m.fds[0];
	lbp_msg_clear(&m);
	assert_false(fd_open(got));

	/* nothing the refusals received is still open in this process: only our own two remain */
	assert_int_equal(open_fds(), before + 2);
	close(sealed);
	close(open_fd);
	assert_int_equal(open_fds(), before);
}

/* A flood of forged messages: each refused, the channel still serves a good one after. */
static void flood_then_serve(void **state)
{
	(void)state;
	char junk[256];
	for (int i = 0; i < 2000; i++) {
		memset(junk, i & 0xff, sizeof(junk));
		assert_int_equal(forge(junk, sizeof(junk), NULL, 0, &m), -EBADMSG);
	}
	struct lbp_name n = { "still-here" };
	assert_int_equal(lbp_send(pair[0], LBP_SANDBOX_STOP, &n, sizeof(n), NULL, 0), 0);
	assert_int_equal(lbp_recv(pair[1], &m), 0);
	assert_string_equal(m.u.name.name, "still-here");
}

/* The kernel could not install the message's descriptor (this process at its RLIMIT_NOFILE): -EMFILE, a shortage,
 * not -EBADMSG; once descriptors are free again the channel serves. */
static void out_of_fds_told_apart(void **state)
{
	(void)state;
	send_run("print(1)\n");
	struct rlimit old;
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
	int lowest = fcntl(pair[1], F_DUPFD_CLOEXEC, 0);
	assert_true(lowest >= 0);
	close(lowest);
	struct rlimit tight = { .rlim_cur = (rlim_t)lowest, .rlim_max = old.rlim_max };
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &tight), 0);
	int r = lbp_recv(pair[1], &m);
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
	assert_int_equal(r, -EMFILE);
	struct lbp_name n = { "after" };
	assert_int_equal(lbp_send(pair[0], LBP_SANDBOX_STOP, &n, sizeof(n), NULL, 0), 0);
	assert_int_equal(lbp_recv(pair[1], &m), 0);
	assert_string_equal(m.u.name.name, "after");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(round_trip_every_request, setup, teardown),
		cmocka_unit_test_setup_teardown(replies_inline_and_in_a_memfd, setup, teardown),
		cmocka_unit_test_setup_teardown(forged_requests_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(progress_accepted_and_forged_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(wrong_descriptors_refused_and_closed, setup, teardown),
		cmocka_unit_test_setup_teardown(flood_then_serve, setup, teardown),
		cmocka_unit_test_setup_teardown(out_of_fds_told_apart, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Unit tests for the API process's streamed answers (api/priv.c's priv_stream_*): the core's PROGRESS messages
 * become ndjson lines formatted here, the REPLY the last line (an error gets its status), a forged or malformed
 * message from the core ends the stream with an error line rather than passing bytes on, and a client that hangs
 * up while the stream waits ends it (so the channel closes and the core cancels). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include "api.h"

static struct lbd_api api;
static int core_end, client_end, mhd_end; /* mhd_end: the connection as libmicrohttpd holds it */

/* A stream over a fresh channel and client connection; the first line pending as priv_stream leaves it. */
static struct lbd_stream *open_stream(void)
{
	int ch[2], cl[2];
	assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ch), 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, cl), 0);
	core_end = ch[0];
	client_end = cl[0];
	mhd_end = cl[1];
	struct lbd_res res = { .fd = -1, .has_channel = true, .channel = ch[1] };
	res.body = strdup("{\"phase\":\"resolving\"}\n");
	res.len = strlen(res.body);
	atomic_store(&api.in_flight, 1);
	struct lbd_stream *s = priv_stream_open(&api, &res, cl[1]);
	assert_non_null(s);
	assert_false(res.has_channel);
	return s;
}

/* Everything the stream gives until its end (-1) or a break (-2, returned in *ret_end). */
static char *read_all(struct lbd_stream *s, ssize_t *ret_end)
{
	static char out[8192];
	size_t n = 0;
	char buf[7]; /* small reads: lines cut across calls */
	for (;;) {
		ssize_t k = priv_stream_read(s, buf, sizeof(buf));
		if (k < 0) {
			*ret_end = k;
			break;
		}
		assert_true(n + (size_t)k < sizeof(out));
		memcpy(out + n, buf, (size_t)k);
		n += (size_t)k;
	}
	out[n] = '\0';
	return out;
}

static void close_stream(struct lbd_stream *s)
{
	priv_stream_close(s);
	assert_int_equal(atomic_load(&api.in_flight), 0);
	close(core_end);
	close(client_end);
	close(mhd_end);
}

static void progress_lines_then_the_result(void **state)
{
	(void)state;
	struct lbd_stream *s = open_stream();
	struct lbp_progress p = { .phase = LBP_PHASE_DOWNLOADING, .done = 16384, .total = 524703 };
	memset(p.layer, 'a', LBP_LAYER_HEX);
	assert_int_equal(lbp_send_progress(core_end, &p), 0);
	struct lbp_progress q = { .phase = LBP_PHASE_UNPACKING };
	assert_int_equal(lbp_send_progress(core_end, &q), 0);
	const char body[] = "{\n  \"duration_ms\": 7,\n  \"image\": {\"name\": \"a\\nb\"}\n}\n";
	assert_int_equal(lbp_send_reply(core_end, 200, "application/json", "", body, strlen(body), -1), 0);
	ssize_t end = 0;
	const char *out = read_all(s, &end);
	assert_int_equal(end, -1);
	char want[1024];
	snprintf(want, sizeof(want),
		 "{\"phase\":\"resolving\"}\n"
		 "{\"phase\":\"downloading\",\"layer\":\"sha256:%.64s\",\"done\":16384,\"total\":524703}\n"
		 "{\"phase\":\"unpacking\",\"layer\":null,\"done\":0,\"total\":null}\n"
		 "{   \"duration_ms\": 7,   \"image\": {\"name\": \"a\\nb\"} }\n",
		 p.layer);
	assert_string_equal(out, want);
	close_stream(s);
}

static void an_error_reply_carries_its_status(void **state)
{
	(void)state;
	struct lbd_stream *s = open_stream();
	const char body[] = "{\"error\":{\"code\":\"registry_error\",\"message\":\"no\"}}";
	assert_int_equal(lbp_send_reply(core_end, 502, "application/json", "", body, strlen(body), -1), 0);
	ssize_t end = 0;
	const char *out = read_all(s, &end);
	assert_int_equal(end, -1);
	assert_string_equal(out, "{\"phase\":\"resolving\"}\n"
				 "{\"error\":{\"code\":\"registry_error\",\"message\":\"no\"},\"status\":502}\n");
	close_stream(s);
}

/* A forged progress message (a phase out of range, a layer that is not hex) is not passed on: the stream ends with
 * an error line of its own. So does a request type the core never sends to the API. */
static void forged_core_messages_end_the_stream(void **state)
{
	(void)state;
	struct {
		struct lbp_hdr h;
		struct lbp_progress p;
	} m = { { LBP_MAGIC, LBP_VERSION, LBP_PROGRESS, sizeof(struct lbp_progress), 0 }, { .phase = 9 } };
	struct lbp_progress bad_layer = { .phase = LBP_PHASE_DOWNLOADING };
	memcpy(bad_layer.layer, "\"}{\"x\":1", 8);
	struct lbp_name n = { "chat-1" };
	for (int i = 0; i < 3; i++) {
		struct lbd_stream *s = open_stream();
		if (i == 0)
			assert_int_equal(send(core_end, &m, sizeof(m), 0), (ssize_t)sizeof(m));
		else if (i == 1) {
			m.p = bad_layer;
			assert_int_equal(send(core_end, &m, sizeof(m), 0), (ssize_t)sizeof(m));
		} else
			assert_int_equal(lbp_send(core_end, LBP_SANDBOX_GET, &n, sizeof(n), NULL, 0), 0);
		ssize_t end = 0;
		const char *out = read_all(s, &end);
		assert_int_equal(end, -1);
		assert_non_null(strstr(out, "\n{\"error\":{\"code\":\"core_error\""));
		assert_null(strstr(out, "\"x\":1"));
		close_stream(s);
	}
}

static void the_core_ending_ends_the_stream(void **state)
{
	(void)state;
	struct lbd_stream *s = open_stream();
	close(core_end);
	ssize_t end = 0;
	const char *out = read_all(s, &end);
	assert_int_equal(end, -1);
	assert_non_null(strstr(out, "{\"error\":{\"code\":\"core_unavailable\""));
	core_end = dup(client_end); /* close_stream closes it */
	close_stream(s);
}

static void a_client_hang_up_breaks_the_stream(void **state)
{
	(void)state;
	struct lbd_stream *s = open_stream();
	char buf[64];
	assert_true(priv_stream_read(s, buf, sizeof(buf)) > 0); /* the first line */
	close(client_end);
	assert_int_equal(priv_stream_read(s, buf, sizeof(buf)), -2);
	client_end = dup(core_end);
	close_stream(s);
}

int main(void)
{
	pthread_mutex_init(&api.channels_mu, NULL);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(progress_lines_then_the_result),
		cmocka_unit_test(an_error_reply_carries_its_status),
		cmocka_unit_test(forged_core_messages_end_the_stream),
		cmocka_unit_test(the_core_ending_ends_the_stream),
		cmocka_unit_test(a_client_hang_up_breaks_the_stream),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

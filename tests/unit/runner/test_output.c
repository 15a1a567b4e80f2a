/* Unit tests for runner/output.c: the head and tail captures keep exactly the right bytes whatever the chunking,
 * count every byte, and never hold more than their limit. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "../../../runner/internal.h"

/* Feeds len bytes of a known pattern in pseudo-random chunks and checks the kept bytes against the pattern. */
static void check(enum lb_capture_mode mode, size_t limit, size_t len, unsigned seed)
{
	char *data = malloc(len + 1);
	assert_non_null(data);
	for (size_t i = 0; i < len; i++)
		data[i] = (char)('a' + (i * 7 + i / 13) % 26);
	struct lb_capture c;
	assert_int_equal(lb_capture_init(&c, mode, limit), 0);
	srand(seed);
	for (size_t off = 0; off < len;) {
		size_t n = (size_t)(rand() % 300) + 1;
		if (rand() % 10 == 0)
			n = (size_t)(rand() % (int)(3 * limit + 1)) + 1; /* sometimes larger than the whole buffer */
		if (n > len - off)
			n = len - off;
		lb_capture_add(&c, data + off, n);
		assert_true(c.len <= limit);
		off += n;
	}
	assert_int_equal(c.total, len);
	size_t got_len;
	char *got = lb_capture_take(&c, &got_len);
	assert_non_null(got);
	size_t want = len < limit ? len : limit;
	assert_int_equal(got_len, want);
	assert_int_equal(got[got_len], '\0');
	if (mode == LB_CAPTURE_HEAD)
		assert_memory_equal(got, data, want);
	else
		assert_memory_equal(got, data + (len - want), want);
	free(got);
	lb_capture_free(&c);
	free(data);
}

static void head_keeps_first_bytes(void **state)
{
	(void)state;
	for (unsigned seed = 1; seed < 20; seed++) {
		check(LB_CAPTURE_HEAD, 1024, 5000, seed);
		check(LB_CAPTURE_HEAD, 1024, 100, seed);
		check(LB_CAPTURE_HEAD, 1024, 1024, seed);
	}
}

static void tail_keeps_last_bytes(void **state)
{
	(void)state;
	for (unsigned seed = 1; seed < 20; seed++) {
		check(LB_CAPTURE_TAIL, 1024, 5000, seed);
		check(LB_CAPTURE_TAIL, 1024, 100, seed);
		check(LB_CAPTURE_TAIL, 1024, 1025, seed);
		check(LB_CAPTURE_TAIL, 7, 10000, seed);
	}
}

static void zero_limit_counts_only(void **state)
{
	(void)state;
	struct lb_capture c;
	assert_int_equal(lb_capture_init(&c, LB_CAPTURE_TAIL, 0), 0);
	lb_capture_add(&c, "hello", 5);
	lb_capture_add(&c, "world", 5);
	size_t n;
	char *s = lb_capture_take(&c, &n);
	assert_non_null(s);
	assert_int_equal(n, 0);
	assert_int_equal(c.total, 10);
	free(s);
	lb_capture_free(&c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(head_keeps_first_bytes),
		cmocka_unit_test(tail_keeps_last_bytes),
		cmocka_unit_test(zero_limit_counts_only),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

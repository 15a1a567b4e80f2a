/* Unit tests for lib/utf8.c: hostile program output must become valid UTF-8 and be cut on character bounds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "lb/utf8.h"

static void sanitize_keeps_valid(void **state)
{
	(void)state;
	const char *s = "h\xC3\xA9llo \xE2\x82\xAC \xF0\x9F\x98\x80";
	size_t n;
	char *out = lb_utf8_sanitize(s, strlen(s), &n);
	assert_non_null(out);
	assert_int_equal(n, strlen(s));
	assert_memory_equal(out, s, n);
	free(out);
}

static void sanitize_replaces_invalid(void **state)
{
	(void)state;
	/* stray continuation, overlong '/', surrogate, truncated 3-byte, byte 0xFF */
	const char s[] = "a\x80"
			 "b\xC0\xAF"
			 "c\xED\xA0\x80"
			 "d\xE2\x82"
			 "e\xFF";
	size_t n;
	char *out = lb_utf8_sanitize(s, sizeof(s) - 1, &n);
	assert_non_null(out);
	for (size_t i = 0; i < n;) {
		size_t l = lb_utf8_seq_len((const unsigned char *)out + i, n - i);
		assert_true(l > 0);
		i += l;
	}
	assert_non_null(strstr(out, "a\xEF\xBF\xBD"
				    "b"));
	assert_int_equal(out[n - 3], '\xEF');
	free(out);
}

static void head_and_tail_cut_on_characters(void **state)
{
	(void)state;
	const char *s = "\xC3\xA9\xC3\xA9\xC3\xA9x"; /* 3 x U+00E9 then 'x' */
	size_t len = strlen(s);
	assert_int_equal(lb_utf8_count(s, len), 4);
	assert_int_equal(lb_utf8_head(s, len, 2), 4);
	assert_int_equal(lb_utf8_head(s, len, 10), len);
	assert_int_equal(lb_utf8_tail(s, len, 2), 4); /* last two chars: U+00E9 'x' start at byte 4 */
	assert_int_equal(lb_utf8_tail(s, len, 0), len);
	assert_int_equal(lb_utf8_tail(s, len, 10), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(sanitize_keeps_valid),
		cmocka_unit_test(sanitize_replaces_invalid),
		cmocka_unit_test(head_and_tail_cut_on_characters),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

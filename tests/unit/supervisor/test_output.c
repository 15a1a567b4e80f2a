/* Unit tests for supervisor/output.c: stdout keeps its first N characters, stderr its last N, a character cut by
 * the runner's byte window is dropped rather than turned into U+FFFD, invalid UTF-8 is replaced. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "output.h"

static void check(const char *buf, size_t len, uint64_t total, size_t limit, bool head, const char *want,
		  bool want_trunc)
{
	struct lbd_cut c = { 0 };
	assert_int_equal(lbd_cut_output(buf, len, total, limit, head, &c), 0);
	assert_string_equal(c.text, want);
	assert_int_equal(c.len, strlen(want));
	assert_int_equal(c.truncated, want_trunc);
	free(c.text);
}

static void ascii(void **state)
{
	(void)state;
	check("hello", 5, 5, 10, true, "hello", false);
	check("hello", 5, 5, 5, true, "hello", false);
	check("hello", 5, 5, 3, true, "hel", true);
	check("hello", 5, 5, 3, false, "llo", true);
	check("", 0, 0, 3, true, "", false);
	check(NULL, 0, 0, 3, false, "", false);
}

static void multibyte_characters_are_counted_as_one(void **state)
{
	(void)state;
	const char *s = "\xe2\x82\xac\xe2\x82\xac\xf0\x9f\x98\x80"; /* €€😀 */
	check(s, 10, 10, 2, true, "\xe2\x82\xac\xe2\x82\xac", true);
	check(s, 10, 10, 1, false, "\xf0\x9f\x98\x80", true);
	check(s, 10, 10, 3, true, s, false);
}

static void a_character_cut_by_the_window_is_dropped(void **state)
{
	(void)state;
	/* the runner kept 5 bytes of "€€...": the second € lost its last byte */
	check("\xe2\x82\xac\xe2\x82", 5, 100, 10, true, "\xe2\x82\xac", true);
	/* the runner kept the last 5 bytes: the first € lost its lead byte */
	check("\x82\xac\xe2\x82\xac", 5, 100, 10, false, "\xe2\x82\xac", true);
	/* a 4-byte character cut after 1 byte */
	check("ab\xf0", 3, 10, 10, true, "ab", true);
}

static void invalid_utf8_is_replaced(void **state)
{
	(void)state;
	/* not at a window edge (total == len): the stray bytes are the program's and become U+FFFD */
	check("a\xff\xfe"
	      "b",
	      4, 4, 10, true,
	      "a\xef\xbf\xbd\xef\xbf\xbd"
	      "b",
	      false);
	check("ab\xf0", 3, 3, 10, true, "ab\xef\xbf\xbd", false);
	/* surrogates encoded in UTF-8 are invalid */
	check("\xed\xa0\x80z", 4, 4, 10, false, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbdz", false);
}

static void embedded_nul_is_kept(void **state)
{
	(void)state;
	struct lbd_cut c = { 0 };
	assert_int_equal(lbd_cut_output("a\0b", 3, 3, 10, true, &c), 0);
	assert_int_equal(c.len, 3);
	assert_memory_equal(c.text, "a\0b", 3);
	free(c.text);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(ascii),
		cmocka_unit_test(multibyte_characters_are_counted_as_one),
		cmocka_unit_test(a_character_cut_by_the_window_is_dropped),
		cmocka_unit_test(invalid_utf8_is_replaced),
		cmocka_unit_test(embedded_nul_is_kept),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

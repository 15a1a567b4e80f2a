/* Unit tests for clients/cli/format.c: the sizes, durations and relative times `lensbox` prints, the RFC 3339
 * parser it reads lensboxd's times with, terminal-safe text (hostile file names), and aligned tables. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "format.h"

static void bytes(void **state)
{
	(void)state;
	char b[32];
	assert_string_equal(lbc_format_bytes(0, b, sizeof(b)), "0 B");
	assert_string_equal(lbc_format_bytes(1023, b, sizeof(b)), "1023 B");
	assert_string_equal(lbc_format_bytes(1024, b, sizeof(b)), "1.0 KiB");
	assert_string_equal(lbc_format_bytes(1536, b, sizeof(b)), "1.5 KiB");
	assert_string_equal(lbc_format_bytes(10137, b, sizeof(b)), "9.9 KiB");
	assert_string_equal(lbc_format_bytes(10189, b, sizeof(b)), "10 KiB"); /* 9.95 rounds up: never "10.0" */
	assert_string_equal(lbc_format_bytes(512ull << 20, b, sizeof(b)), "512 MiB");
	assert_string_equal(lbc_format_bytes((25ull << 20) + 1, b, sizeof(b)), "25 MiB");
	assert_string_equal(lbc_format_bytes(3435973837ull, b, sizeof(b)), "3.2 GiB");
	assert_string_equal(lbc_format_bytes(UINT64_MAX, b, sizeof(b)), "16 EiB");
	/* a short buffer is cut, never overrun */
	char tiny[4];
	assert_string_equal(lbc_format_bytes(1536, tiny, sizeof(tiny)), "1.5");
}

static void durations(void **state)
{
	(void)state;
	char b[32];
	assert_string_equal(lbc_format_duration_ms(0, b, sizeof(b)), "0 ms");
	assert_string_equal(lbc_format_duration_ms(31, b, sizeof(b)), "31 ms");
	assert_string_equal(lbc_format_duration_ms(999, b, sizeof(b)), "999 ms");
	assert_string_equal(lbc_format_duration_ms(1250, b, sizeof(b)), "1.2 s");
	assert_string_equal(lbc_format_duration_ms(9999, b, sizeof(b)), "9.9 s");
	assert_string_equal(lbc_format_duration_ms(59000, b, sizeof(b)), "59 s");
	assert_string_equal(lbc_format_duration_ms(125000, b, sizeof(b)), "2 min 5 s");
	assert_string_equal(lbc_format_duration_ms(3780000, b, sizeof(b)), "1 h 3 min");
	assert_string_equal(lbc_format_duration_ms(187200000, b, sizeof(b)), "2 d 4 h");
}

static void relative(void **state)
{
	(void)state;
	char b[32];
	int64_t now = 1800000000000;
	assert_string_equal(lbc_format_relative(now, now, b, sizeof(b)), "just now");
	assert_string_equal(lbc_format_relative(now - 999, now, b, sizeof(b)), "just now");
	assert_string_equal(lbc_format_relative(now - 12000, now, b, sizeof(b)), "12 s ago");
	assert_string_equal(lbc_format_relative(now - 5LL * 60000 - 30000, now, b, sizeof(b)), "5 min ago");
	assert_string_equal(lbc_format_relative(now - 3LL * 3600000, now, b, sizeof(b)), "3 h ago");
	assert_string_equal(lbc_format_relative(now - 2 * 86400000LL, now, b, sizeof(b)), "2 d ago");
	assert_string_equal(lbc_format_relative(now + 12LL * 60000, now, b, sizeof(b)), "in 12 min");
	assert_string_equal(lbc_format_relative(now + 86400000LL, now, b, sizeof(b)), "in 1 d");
	assert_string_equal(lbc_format_relative(0, now, b, sizeof(b)), "-");
}

static void times(void **state)
{
	(void)state;
	int64_t t = 0;
	assert_int_equal(lbc_parse_time_ms("1970-01-01T00:00:00Z", &t), 0);
	assert_int_equal(t, 0);
	assert_int_equal(lbc_parse_time_ms("2026-11-30T19:25:11.042Z", &t), 0);
	assert_int_equal(t, 1796066711042LL);
	assert_int_equal(lbc_parse_time_ms("2026-11-30T19:25:11Z", &t), 0);
	assert_int_equal(t, 1796066711000LL);
	assert_int_equal(lbc_parse_time_ms("2026-11-30T19:25:11.5+00:00", &t), 0);
	assert_int_equal(t, 1796066711500LL);
	assert_int_equal(lbc_parse_time_ms("2026-11-30T19:25:11.123456789Z", &t), 0);
	assert_int_equal(t, 1796066711123LL);
	int64_t untouched = 77;
	const char *bad[] = { "",
			      "2026-11-30",
			      "2026-11-30T19:25:11",
			      "2026-11-30T19:25:11+01:00",
			      "2026-13-30T19:25:11Z",
			      "2026-11-30T24:00:00Z",
			      "2026-11-30T19:25:11.Z",
			      "x026-11-30T19:25:11Z",
			      "2026-11-30T19:25:11Zjunk" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(lbc_parse_time_ms(bad[i], &untouched), -EINVAL);
		assert_int_equal(untouched, 77);
	}
	assert_int_equal(lbc_parse_time_ms(NULL, &untouched), -EINVAL);
}

static void term_safe(void **state)
{
	(void)state;
	/* an OSC title change, a CSI clear, BEL, a C1 CSI (U+009B), DEL and an invalid byte all become '?' */
	const char evil[] = "a\x1b]0;pwned\x07"
			    "b\x1b[2Jc\xc2\x9b"
			    "31md\x7f"
			    "e\xff"
			    "f";
	char *s = lbc_term_safe(evil, sizeof(evil) - 1, false);
	assert_non_null(s);
	assert_string_equal(s, "a?]0;pwned?b?[2Jc?31md?e?f");
	free(s);
	/* printable UTF-8 (U+00E9, U+20AC, U+1F600) and U+00A0 are kept */
	const char ok[] = "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\xc2\xa0";
	s = lbc_term_safe(ok, sizeof(ok) - 1, false);
	assert_string_equal(s, ok);
	free(s);
	/* newlines and tabs only when asked; NUL never */
	const char nl[] = "a\nb\tc\0d";
	s = lbc_term_safe(nl, sizeof(nl) - 1, true);
	assert_string_equal(s, "a\nb\tc?d");
	free(s);
	s = lbc_term_safe(nl, sizeof(nl) - 1, false);
	assert_string_equal(s, "a?b?c?d");
	free(s);
}

static char *print_to_string(const struct lbc_table *t)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	assert_non_null(f);
	lbc_table_print(t, f);
	fclose(f);
	return buf;
}

static void table(void **state)
{
	(void)state;
	const char *headers[] = { "NAME", "SIZE", "PATH" };
	const bool right[] = { false, true, false };
	struct lbc_table *t = lbc_table_new(3, headers, right);
	assert_non_null(t);
	const char *r1[] = { "a", "1.5 KiB", "x" };
	const char *r2[] = { "long-name", "3 B", NULL };
	const char *r3[] = { "\xc3\xa9t\xc3\xa9", "10 KiB", "evil\x1b[2J" }; /* 3 columns wide, 5 bytes */
	assert_int_equal(lbc_table_add(t, r1), 0);
	assert_int_equal(lbc_table_add(t, r2), 0);
	assert_int_equal(lbc_table_add(t, r3), 0);
	assert_int_equal(lbc_table_rows(t), 3);
	char *out = print_to_string(t);
	assert_string_equal(out, "NAME          SIZE  PATH\n"
				 "a          1.5 KiB  x\n"
				 "long-name      3 B  -\n"
				 "\xc3\xa9t\xc3\xa9         10 KiB  evil?[2J\n");
	free(out);
	lbc_table_free(t);
	lbc_table_free(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(bytes), cmocka_unit_test(durations), cmocka_unit_test(relative),
		cmocka_unit_test(times), cmocka_unit_test(term_safe), cmocka_unit_test(table),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

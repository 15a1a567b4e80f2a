/*
 * fuzz_format.c — libFuzzer target for what `lensbox` does with bytes it did not write: lbc_term_safe() on names
 * and messages from a sandbox, lbc_parse_time_ms() on times from the daemon, and the table that shows them.
 *
 * Build: cmake -DLENSBOX_FUZZ=ON -DCMAKE_C_COMPILER=clang; run: ./fuzz_cli_format clients/cli/fuzz-corpus.
 * Besides memory errors (ASan/UBSan) it checks the promise of format.h: nothing a terminal interprets as a control
 * survives lbc_term_safe(), and its output is valid UTF-8.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "format.h"
#include "lb/utf8.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_safe(const char *s, size_t len, bool keep_newlines)
{
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == 0x7f || (c < 0x20 && !(keep_newlines && (c == '\n' || c == '\t'))))
			abort();
		if (c == 0xc2 && i + 1 < len && (unsigned char)s[i + 1] < 0xa0)
			abort(); /* a C1 control */
	}
	size_t clean_len;
	char *again = lb_utf8_sanitize(s, len, &clean_len);
	if (!again || clean_len != len || memcmp(again, s, len) != 0)
		abort(); /* sanitising changed it: it was not valid UTF-8 */
	free(again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	for (int keep = 0; keep < 2; keep++) {
		char *safe = lbc_term_safe((const char *)data, size, keep);
		if (!safe)
			return 0;
		check_safe(safe, strlen(safe), keep);
		(void)lbc_display_width(safe);
		free(safe);
	}
	char *s = malloc(size + 1);
	if (!s)
		return 0;
	memcpy(s, data, size);
	s[size] = '\0';
	int64_t ms = 0;
	if (lbc_parse_time_ms(s, &ms) == 0) {
		char buf[64];
		lbc_format_relative(ms, 1800000000000, buf, sizeof(buf));
	}
	static const char *const headers[] = { "A", "B" };
	struct lbc_table *t = lbc_table_new(2, headers, NULL);
	const char *cells[] = { s, "x" };
	if (t && lbc_table_add(t, cells) == 0) {
		FILE *null = fopen("/dev/null", "w");
		if (null) {
			lbc_table_print(t, null);
			fclose(null);
		}
	}
	lbc_table_free(t);
	free(s);
	return 0;
}

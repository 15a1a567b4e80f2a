/*
 * format.h — how the `lensbox` command shows things to people: sizes, durations, times relative to now, aligned
 * tables, and text from a sandbox made safe for a terminal.
 *
 * Pure functions used by the lensbox CLI (an unprivileged client process). Everything printed that came from a
 * sandbox (file names, program output in tables, messages) is hostile: lbc_term_safe() removes control characters
 * and escape sequences before it reaches a terminal, so a file named "\e]0;pwned\a" cannot retitle or reprogram it.
 */
#ifndef LBC_FORMAT_H
#define LBC_FORMAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* "0 B", "999 B", "1.0 KiB", "12 KiB", "1.5 MiB", "3.2 GiB": one decimal below 10 units, none above. Returns buf. */
char *lbc_format_bytes(uint64_t bytes, char *buf, size_t size);

/* "31 ms", "1.2 s", "59 s", "2 min 5 s", "1 h 3 min", "2 d 4 h". Returns buf. */
char *lbc_format_duration_ms(uint64_t ms, char *buf, size_t size);

/* then relative to now: "just now", "12 s ago", "5 min ago", "3 h ago", "2 d ago", "in 12 min", "in 1 d".
 * then <= 0 gives "-". Returns buf. */
char *lbc_format_relative(int64_t then_ms, int64_t now_ms, char *buf, size_t size);

/* Parses RFC 3339 UTC as lensboxd writes it ("2026-11-30T19:25:11.042Z", fraction optional, 'Z' or "+00:00")
 * into milliseconds since the epoch. -EINVAL when it is anything else. */
int lbc_parse_time_ms(const char *s, int64_t *ret_ms);

/* Copies s into a new string safe to print on a terminal: C0 controls (except tab when keep_tab), DEL, C1 controls
 * (U+0080-U+009F) and invalid UTF-8 become '?'; when keep_newlines, '\n' is kept. NULL on ENOMEM. */
char *lbc_term_safe(const char *s, size_t len, bool keep_newlines);

/* Display width of valid UTF-8 s, counting each code point as one column. */
size_t lbc_display_width(const char *s);

/* An aligned table: columns separated by two spaces, a header row, right-aligned numeric columns. Cells are
 * copied and made terminal-safe on add. */
struct lbc_table;
struct lbc_table *lbc_table_new(size_t ncols, const char *const *headers, const bool *right_align);
/* Adds one row of ncols cells (NULL cell = "-"). -ENOMEM on failure. */
int lbc_table_add(struct lbc_table *t, const char *const *cells);
/* Prints the table (header first) to f; the last column is not padded. */
void lbc_table_print(const struct lbc_table *t, FILE *f);
size_t lbc_table_rows(const struct lbc_table *t);
void lbc_table_free(struct lbc_table *t);

#endif

/*
 * utf8.h — making program output safe to put in JSON and to show a person.
 *
 * Program output is hostile bytes. lb_utf8_sanitize() turns any byte string into valid UTF-8 (each invalid
 * sequence becomes U+FFFD; NUL is kept as U+0000 is valid JSON when escaped). lb_utf8_head()/lb_utf8_tail() cut a
 * valid UTF-8 string to at most N Unicode characters, never in the middle of one. Pure functions.
 */
#ifndef LB_UTF8_H
#define LB_UTF8_H

#include <stdbool.h>
#include <stddef.h>

/* Returns a new valid UTF-8 buffer (NUL-terminated, *ret_len excludes the NUL) or NULL on ENOMEM. */
char *lb_utf8_sanitize(const char *in, size_t len, size_t *ret_len);

/* Length of a well-formed UTF-8 sequence starting at s (1-4), or 0 when it is invalid at that point. */
size_t lb_utf8_seq_len(const unsigned char *s, size_t avail);

/* Number of Unicode characters in valid UTF-8 s. */
size_t lb_utf8_count(const char *s, size_t len);

/* Byte length of the first max_chars characters of valid UTF-8 s. */
size_t lb_utf8_head(const char *s, size_t len, size_t max_chars);

/* Byte offset where the last max_chars characters of valid UTF-8 s begin. */
size_t lb_utf8_tail(const char *s, size_t len, size_t max_chars);

#endif

/*
 * utf8.c — validation, repair and character-exact cutting of UTF-8 (see utf8.h). Follows RFC 3629: no overlong
 * forms, no surrogates, nothing above U+10FFFF. Pure and allocation-bounded by the input length (x3 worst case).
 */
#include "lb/utf8.h"

#include <stdlib.h>
#include <string.h>

size_t lb_utf8_seq_len(const unsigned char *s, size_t avail)
{
	unsigned char c = s[0];
	if (c < 0x80)
		return 1;
	size_t n;
	unsigned char lo = 0x80, hi = 0xBF;
	if (c >= 0xC2 && c <= 0xDF)
		n = 2;
	else if (c >= 0xE0 && c <= 0xEF) {
		n = 3;
		if (c == 0xE0)
			lo = 0xA0;
		else if (c == 0xED)
			hi = 0x9F;
	} else if (c >= 0xF0 && c <= 0xF4) {
		n = 4;
		if (c == 0xF0)
			lo = 0x90;
		else if (c == 0xF4)
			hi = 0x8F;
	} else
		return 0;
	if (avail < n)
		return 0;
	if (s[1] < lo || s[1] > hi)
		return 0;
	for (size_t i = 2; i < n; i++)
		if (s[i] < 0x80 || s[i] > 0xBF)
			return 0;
	return n;
}

char *lb_utf8_sanitize(const char *in, size_t len, size_t *ret_len)
{
	/* Worst case: every byte invalid, each replaced by the 3-byte U+FFFD. */
	char *out = malloc(len * 3 + 1);
	if (!out)
		return NULL;
	const unsigned char *s = (const unsigned char *)in;
	size_t o = 0;
	for (size_t i = 0; i < len;) {
		size_t n = lb_utf8_seq_len(s + i, len - i);
		if (n == 0) {
			memcpy(out + o, "\xEF\xBF\xBD", 3);
			o += 3;
			i++;
		} else {
			memcpy(out + o, s + i, n);
			o += n;
			i += n;
		}
	}
	out[o] = '\0';
	if (ret_len)
		*ret_len = o;
	return out;
}

size_t lb_utf8_count(const char *s, size_t len)
{
	size_t chars = 0;
	for (size_t i = 0; i < len; i++)
		if (((unsigned char)s[i] & 0xC0) != 0x80)
			chars++;
	return chars;
}

size_t lb_utf8_head(const char *s, size_t len, size_t max_chars)
{
	size_t chars = 0;
	for (size_t i = 0; i < len; i++) {
		if (((unsigned char)s[i] & 0xC0) != 0x80) {
			if (chars == max_chars)
				return i;
			chars++;
		}
	}
	return len;
}

size_t lb_utf8_tail(const char *s, size_t len, size_t max_chars)
{
	size_t chars = 0, start = len;
	for (size_t i = len; i > 0 && chars < max_chars; i--) {
		if (((unsigned char)s[i - 1] & 0xC0) != 0x80) {
			chars++;
			start = i - 1;
		}
	}
	return start;
}

/*
 * output.c — a program's captured output made into the text a run returns (see output.h).
 *
 * Runs in lensboxd (root) on connection threads; pure functions over buffers the runner filled from the sandbox,
 * i.e. hostile bytes. The runner keeps a byte window (the first or last 4*N+4 bytes); a character cut by the edge
 * of that window is dropped, invalid UTF-8 becomes U+FFFD, and the text is then cut at N Unicode characters.
 */
#include "output.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lb/utf8.h"

/* Length of buf without a UTF-8 sequence cut off at its end (the capture window ended inside it). */
static size_t trim_cut_end(const char *buf, size_t len)
{
	for (size_t back = 1; back <= 3 && back <= len; back++) {
		unsigned char c = (unsigned char)buf[len - back];
		if ((c & 0xC0) == 0x80)
			continue; /* a continuation byte: keep looking for its lead */
		size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
		return need > back ? len - back : len;
	}
	return len;
}

/* Offset past continuation bytes at the start of buf (the capture window began inside a sequence). */
static size_t skip_cut_start(const char *buf, size_t len)
{
	size_t i = 0;
	while (i < 3 && i < len && ((unsigned char)buf[i] & 0xC0) == 0x80)
		i++;
	return i;
}

int lbd_cut_output(const char *buf, size_t len, uint64_t total, size_t limit, bool head, struct lbd_cut *ret)
{
	bool window_cut = total > len;
	size_t start = 0, end = len;
	if (window_cut) {
		if (head)
			end = trim_cut_end(buf, len);
		else
			start = skip_cut_start(buf, len);
	}
	size_t clen;
	char *clean = lb_utf8_sanitize(buf ? buf + start : "", end - start, &clen);
	if (!clean)
		return -ENOMEM;
	size_t chars = lb_utf8_count(clean, clen);
	ret->truncated = window_cut || chars > limit;
	if (chars > limit) {
		if (head) {
			clen = lb_utf8_head(clean, clen, limit);
			clean[clen] = '\0';
		} else {
			size_t off = lb_utf8_tail(clean, clen, limit);
			memmove(clean, clean + off, clen - off);
			clen -= off;
			clean[clen] = '\0';
		}
	}
	ret->text = clean;
	ret->len = clen;
	return 0;
}

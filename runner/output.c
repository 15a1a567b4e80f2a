/*
 * output.c — bounded capture of a sandboxed program's stdout (head) and stderr (tail).
 *
 * Runs in the caller. The program's output is hostile and unbounded (a 10 GB flood is a test case): memory is
 * allocated once, `limit` bytes, and never grows; everything past it is only counted. The tail mode is a ring.
 */
#include "internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int lb_capture_init(struct lb_capture *c, enum lb_capture_mode mode, size_t limit)
{
	memset(c, 0, sizeof(*c));
	c->mode = mode;
	c->limit = limit;
	if (limit > 0 && !(c->buf = malloc(limit)))
		return -ENOMEM;
	return 0;
}

void lb_capture_add(struct lb_capture *c, const char *data, size_t n)
{
	c->total += n;
	if (c->limit == 0 || n == 0)
		return;
	if (c->mode == LB_CAPTURE_HEAD) {
		size_t room = c->limit - c->len;
		size_t k = n < room ? n : room;
		memcpy(c->buf + c->len, data, k);
		c->len += k;
		return;
	}
	if (n >= c->limit) {
		memcpy(c->buf, data + (n - c->limit), c->limit);
		c->start = 0;
		c->len = c->limit;
		return;
	}
	/* Append at the ring's end, wrapping; what falls off the front is the oldest output. */
	size_t end = (c->start + c->len) % c->limit;
	size_t first = c->limit - end < n ? c->limit - end : n;
	memcpy(c->buf + end, data, first);
	memcpy(c->buf, data + first, n - first);
	if (c->len + n > c->limit) {
		c->start = (c->start + (c->len + n - c->limit)) % c->limit;
		c->len = c->limit;
	} else {
		c->len += n;
	}
}

char *lb_capture_take(struct lb_capture *c, size_t *ret_len)
{
	char *out = malloc(c->len + 1);
	if (!out)
		return NULL;
	size_t first = c->limit - c->start < c->len ? c->limit - c->start : c->len;
	if (c->len) {
		memcpy(out, c->buf + c->start, first);
		memcpy(out + first, c->buf, c->len - first);
	}
	out[c->len] = '\0';
	*ret_len = c->len;
	c->start = c->len = 0;
	return out;
}

void lb_capture_free(struct lb_capture *c)
{
	free(c->buf);
	c->buf = NULL;
	c->len = c->start = 0;
}

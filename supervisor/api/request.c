/*
 * request.c — what a handler reads of its request beyond the body: query-string arguments, percent-decoded, and the
 * percent-decoding that routes.c applies to each path segment (see api.h).
 *
 * Runs in lensboxd (root) on connection threads; pure over the request libmicrohttpd holds. Query strings and paths
 * are hostile: a value that holds %00, a raw NUL or a malformed escape is refused (NULL), never cut at the NUL, so a
 * handler either gets the whole value or knows it was bad.
 */
#include <microhttpd.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

char *lbd_percent_decode(const char *s, size_t len)
{
	char *out = malloc(len + 1);
	if (!out)
		return NULL;
	size_t o = 0;
	for (size_t i = 0; i < len; i++) {
		char c = s[i];
		if (c == '\0') {
			free(out);
			return NULL;
		}
		if (c == '%') {
			if (i + 2 >= len) {
				free(out);
				return NULL;
			}
			int h = hexval(s[i + 1]), l = hexval(s[i + 2]);
			if (h < 0 || l < 0 || (h == 0 && l == 0)) {
				free(out);
				return NULL;
			}
			out[o++] = (char)(h * 16 + l);
			i += 2;
			continue;
		}
		out[o++] = c;
	}
	out[o] = '\0';
	return out;
}

const char *lbd_http_query_raw(struct lbd_req *req, const char *key)
{
	return MHD_lookup_connection_value(req->conn, MHD_GET_ARGUMENT_KIND, key);
}

char *lbd_req_query(struct lbd_req *req, const char *key, bool *ret_bad)
{
	const char *raw = lbd_http_query_raw(req, key);
	*ret_bad = false;
	if (!raw)
		return NULL;
	/* '+' means a space in query strings. */
	char *plus = strdup(raw);
	if (!plus) {
		*ret_bad = true;
		return NULL;
	}
	for (char *p = plus; *p; p++)
		if (*p == '+')
			*p = ' ';
	char *v = lbd_percent_decode(plus, strlen(plus));
	free(plus);
	if (!v)
		*ret_bad = true;
	return v;
}

/*
 * res.c — response bodies out: the yajl generation helpers and the error envelope (see common.h).
 *
 * Runs in both of lensboxd's processes: the core writes every answer it gives, the API process writes the refusals
 * it decides alone (a malformed body, a route that does not exist). Pure functions; nothing here writes JSON by hand.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <yajl/yajl_gen.h>

#include "common.h"

yajl_gen lbd_gen_new(void)
{
	yajl_gen g = yajl_gen_alloc(NULL);
	if (!g)
		abort(); /* out of memory while answering: nothing sensible is left to do */
	yajl_gen_config(g, yajl_gen_beautify, 0);
	/* Strings are valid UTF-8 by construction (runs.c sanitises sandbox output); yajl still escapes controls. */
	yajl_gen_config(g, yajl_gen_validate_utf8, 1);
	return g;
}

void lbd_gen_key(yajl_gen g, const char *key)
{
	if (key)
		yajl_gen_string(g, (const unsigned char *)key, strlen(key));
}

void lbd_gen_strn(yajl_gen g, const char *key, const char *value, size_t len)
{
	lbd_gen_key(g, key);
	if (!value) {
		yajl_gen_null(g);
		return;
	}
	if (yajl_gen_string(g, (const unsigned char *)value, len) != yajl_gen_status_ok)
		yajl_gen_string(g, (const unsigned char *)"\xef\xbf\xbd", 3); /* invalid UTF-8 never breaks the JSON */
}

void lbd_gen_str(yajl_gen g, const char *key, const char *value)
{
	lbd_gen_strn(g, key, value, value ? strlen(value) : 0);
}

void lbd_gen_int(yajl_gen g, const char *key, long long value)
{
	lbd_gen_key(g, key);
	yajl_gen_integer(g, value);
}

void lbd_gen_uint(yajl_gen g, const char *key, uint64_t value)
{
	lbd_gen_key(g, key);
	yajl_gen_integer(g, value > (uint64_t)INT64_MAX ? INT64_MAX : (long long)value);
}

void lbd_gen_double(yajl_gen g, const char *key, double value)
{
	lbd_gen_key(g, key);
	yajl_gen_double(g, value);
}

void lbd_gen_bool(yajl_gen g, const char *key, bool value)
{
	lbd_gen_key(g, key);
	yajl_gen_bool(g, value);
}

void lbd_gen_null(yajl_gen g, const char *key)
{
	lbd_gen_key(g, key);
	yajl_gen_null(g);
}

void lbd_gen_time(yajl_gen g, const char *key, int64_t ms)
{
	if (ms <= 0) {
		lbd_gen_null(g, key);
		return;
	}
	time_t t = (time_t)(ms / 1000);
	struct tm tm;
	gmtime_r(&t, &tm);
	char buf[40];
	size_t n = strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(buf + n, sizeof(buf) - n, ".%03dZ", (int)(ms % 1000));
	lbd_gen_str(g, key, buf);
}

void lbd_gen_finish(yajl_gen g, struct lbd_res *res, int status)
{
	const unsigned char *buf;
	size_t len;
	yajl_gen_get_buf(g, &buf, &len);
	free(res->body);
	res->body = malloc(len + 1);
	if (!res->body)
		abort();
	memcpy(res->body, buf, len);
	res->body[len] = '\n';
	res->len = len + 1;
	res->status = status;
	res->content_type = "application/json";
	yajl_gen_free(g);
}

unsigned lbd_retry_after(int status, const char *code)
{
	if (!code)
		return 0;
	if ((status == 429 && strcmp(code, "capacity") == 0) ||
	    (status == 503 && (strcmp(code, "busy") == 0 || strcmp(code, "core_unavailable") == 0)))
		return 1;
	if (status == 503 && strcmp(code, "host_unavailable") == 0)
		return 5;
	return 0;
}

void lbd_res_error(struct lbd_res *res, int status, const char *code, const char *fmt, ...)
{
	char msg[LB_ERROR_MSG_MAX + 64];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	yajl_gen g = lbd_gen_new();
	yajl_gen_map_open(g);
	lbd_gen_key(g, "error");
	yajl_gen_map_open(g);
	lbd_gen_str(g, "code", code);
	lbd_gen_str(g, "message", msg);
	yajl_gen_map_close(g);
	yajl_gen_map_close(g);
	lbd_gen_finish(g, res, status);
}

void lbd_res_fail(struct lbd_res *res, const struct lbd_fail *f)
{
	lbd_res_error(res, f->status ? f->status : 500, f->code[0] ? f->code : "internal", "%s", f->message);
}

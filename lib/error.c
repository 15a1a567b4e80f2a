/*
 * error.c — formatting for struct lb_error (see error.h). Pure functions; no allocation, no logging.
 */
#define LB_ERROR_IMPLEMENTATION /* defines the functions error.h wraps for the analyzer */
#include "lb/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Messages are cut at LB_ERROR_MSG_MAX on purpose: a long path must not hide the reason behind it. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif

__attribute__((format(printf, 4, 0))) static int set_va(struct lb_error *err, int errnum, int with_strerror,
							const char *fmt, va_list ap)
{
	int code = errnum < 0 ? -errnum : errnum;
	if (code == 0)
		code = 5; /* EIO: a failure without an errno still fails */
	if (!err)
		return -code;
	err->code = code;
	char buf[LB_ERROR_MSG_MAX];
	vsnprintf(buf, sizeof(buf), fmt, ap);
	if (with_strerror)
		snprintf(err->msg, sizeof(err->msg), "%s: %s", buf, strerror(code));
	else
		snprintf(err->msg, sizeof(err->msg), "%s", buf);
	return -code;
}

int lb_error_set(struct lb_error *err, int errnum, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int r = set_va(err, errnum, 1, fmt, ap);
	va_end(ap);
	return r;
}

int lb_error_setx(struct lb_error *err, int errnum, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int r = set_va(err, errnum, 0, fmt, ap);
	va_end(ap);
	return r;
}

int lb_error_wrap(struct lb_error *err, const char *fmt, ...)
{
	if (!err)
		return -5;
	if (err->code == 0)
		err->code = 5;
	char ctx[LB_ERROR_MSG_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(ctx, sizeof(ctx), fmt, ap);
	va_end(ap);
	char old[LB_ERROR_MSG_MAX];
	memcpy(old, err->msg, sizeof(old));
	snprintf(err->msg, sizeof(err->msg), "%s: %s", ctx, old);
	return -err->code;
}

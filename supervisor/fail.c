/*
 * fail.c — filling a struct lbd_fail, the outcome of an operation on a sandbox or a request as the HTTP layer will
 * answer it: a status, an error code and one sentence (see common.h; lbd_res_fail turns it into the error envelope).
 *
 * Runs in both of lensboxd's processes on any thread; pure, over the caller's struct. The message is
 * cut to the struct's size, never overflowing it.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>

#include "common.h"

void lbd_fail_set(struct lbd_fail *f, int status, const char *code, const char *fmt, ...)
{
	f->status = status;
	snprintf(f->code, sizeof(f->code), "%s", code);
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(f->message, sizeof(f->message), fmt, ap);
	va_end(ap);
}

void lbd_fail_store(struct lbd_fail *f, int r, const char *what, const char *msg)
{
	if (r == -ENOSPC)
		lbd_fail_set(
		    f, 503, "host_unavailable",
		    "%s failed: lensboxd's state directory is full (%s); free space there, nothing was changed.", what,
		    msg);
	else if (r == -EBUSY)
		lbd_fail_set(f, 503, "busy",
			     "%s failed: another process holds lensboxd's state database (%s); try again.", what, msg);
	else
		lbd_fail_set(f, 500, "internal", "%s failed: %s", what, msg);
}

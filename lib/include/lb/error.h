/*
 * error.h — an error that gathers context as it travels up.
 *
 * Used in every process; never allocates. A function that can fail returns a negative errno and, when the caller
 * passed a struct lb_error, fills it with a sentence. Each caller may prefix what it was doing, so the message the
 * person reads says what, where and why: "starting sandbox: mounting /proc: Operation not permitted".
 * Invariant: err->code is 0 or a positive errno; err->msg is always NUL-terminated.
 */
#ifndef LB_ERROR_H
#define LB_ERROR_H

#include <stddef.h>

#define LB_ERROR_MSG_MAX 512

struct lb_error {
	int code;		    /* positive errno, 0 when no error was recorded */
	char msg[LB_ERROR_MSG_MAX]; /* human sentence, context first */
};

/* Records errnum (positive or negative) with a formatted message followed by ": strerror(errnum)"; returns
 * -abs(errnum). err may be NULL. */
int lb_error_set(struct lb_error *err, int errnum, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Like lb_error_set() but without the strerror suffix: for errors whose message already says everything. */
int lb_error_setx(struct lb_error *err, int errnum, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Prefixes the recorded message with "context: " and returns -err->code (or -EIO when nothing was recorded). */
int lb_error_wrap(struct lb_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#if defined(__clang_analyzer__) && !defined(LB_ERROR_IMPLEMENTATION)
/* For clang's analyzer (scripts/lint) only: it reads one file at a time and cannot see that the three functions above
 * always return a negative errno, so it follows "failed but returned >= 0" paths that cannot happen and reports the
 * out-parameters they leave unset. The builds never see these macros. */
#define LB_ERROR_NEGATIVE_(call)                 \
	({                                       \
		int lb_error_r_ = (call);        \
		if (lb_error_r_ >= 0)            \
			__builtin_unreachable(); \
		lb_error_r_;                     \
	})
#define lb_error_set(...)  LB_ERROR_NEGATIVE_((lb_error_set)(__VA_ARGS__))
#define lb_error_setx(...) LB_ERROR_NEGATIVE_((lb_error_setx)(__VA_ARGS__))
#define lb_error_wrap(...) LB_ERROR_NEGATIVE_((lb_error_wrap)(__VA_ARGS__))
#endif

static inline void lb_error_clear(struct lb_error *err)
{
	if (err) {
		err->code = 0;
		err->msg[0] = '\0';
	}
}

#endif

/*
 * log.c — the line format of lb_log (see log.h). Writes each line with a single write(2) so lines from several
 * threads never interleave. The level is set once at start-up before threads exist.
 */
#include "lb/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static enum lb_log_level min_level = LB_LOG_INFO;

void lb_log_set_level(enum lb_log_level level)
{
	min_level = level;
}

int lb_log_parse_level(const char *s, enum lb_log_level *ret_level)
{
	static const char *const names[] = { "debug", "info", "warn", "error" };
	for (unsigned i = 0; i < 4; i++)
		if (strcmp(s, names[i]) == 0) {
			*ret_level = (enum lb_log_level)i;
			return 0;
		}
	return -22;
}

void lb_log(enum lb_log_level level, const char *fields, const char *fmt, ...)
{
	static const char *const names[] = { "debug", "info", "warn", "error" };
	if (level < min_level)
		return;
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	/* Quotes and newlines inside the message would break one-line parsing: replace them. */
	for (char *p = msg; *p; p++)
		if (*p == '"' || *p == '\n' || *p == '\r')
			*p = *p == '"' ? '\'' : ' ';
	char line[1600];
	int n = snprintf(line, sizeof(line), "level=%s msg=\"%s\"%s%s\n", names[level], msg,
			 fields && *fields ? " " : "", fields ? fields : "");
	if (n < 0)
		return;
	size_t len = (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1;
	if (len == sizeof(line) - 1)
		line[len - 1] = '\n';
	ssize_t w = write(STDERR_FILENO, line, len);
	(void)w;
}

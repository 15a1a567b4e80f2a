/*
 * log.h — one line an event on stderr, for programs' top layers only (lensboxd, the tools' mains).
 *
 * Library code (runner/, policy/, store/, images/, netfilter/) never logs: it returns errors. Lines look like
 *   level=info msg="sandbox started" sandbox=lens-chat-1 duration_ms=12
 * so journald and grep both read them. lb_log_set_level() is called once at start-up from the parsed config.
 */
#ifndef LB_LOG_H
#define LB_LOG_H

enum lb_log_level { LB_LOG_DEBUG, LB_LOG_INFO, LB_LOG_WARN, LB_LOG_ERROR };

void lb_log_set_level(enum lb_log_level level);
int lb_log_parse_level(const char *s, enum lb_log_level *ret_level);

/* fields is a preformatted "key=value key2=value2" string (may be NULL); msg is quoted for the reader. */
void lb_log(enum lb_log_level level, const char *fields, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#define lb_debug(fields, ...) lb_log(LB_LOG_DEBUG, fields, __VA_ARGS__)
#define lb_info(fields, ...)  lb_log(LB_LOG_INFO, fields, __VA_ARGS__)
#define lb_warn(fields, ...)  lb_log(LB_LOG_WARN, fields, __VA_ARGS__)
#define lb_error(fields, ...) lb_log(LB_LOG_ERROR, fields, __VA_ARGS__)

#endif

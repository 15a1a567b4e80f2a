/*
 * format.c — the `lensbox` command's presentation helpers (see format.h). Pure functions, no I/O except
 * lbc_table_print(); run in the unprivileged CLI process. Invariant: every string that leaves lbc_term_safe() or a
 * table holds no byte that a terminal interprets as a control (ESC, CSI, BEL, C1...).
 */
#include "format.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lb/utf8.h"

char *lbc_format_bytes(uint64_t bytes, char *buf, size_t size)
{
	static const char *const units[] = { "KiB", "MiB", "GiB", "TiB", "PiB", "EiB" };
	if (bytes < 1024) {
		snprintf(buf, size, "%llu B", (unsigned long long)bytes);
		return buf;
	}
	double v = (double)bytes / 1024.0;
	size_t u = 0;
	while (v >= 1024.0 && u + 1 < sizeof(units) / sizeof(units[0])) {
		v /= 1024.0;
		u++;
	}
	/* one decimal while it matters; never print "10.0" (it would round from 9.95) */
	if (v < 9.95)
		snprintf(buf, size, "%.1f %s", v, units[u]);
	else
		snprintf(buf, size, "%.0f %s", v, units[u]);
	return buf;
}

char *lbc_format_duration_ms(uint64_t ms, char *buf, size_t size)
{
	if (ms < 1000) {
		snprintf(buf, size, "%llu ms", (unsigned long long)ms);
		return buf;
	}
	if (ms < 10000) {
		snprintf(buf, size, "%llu.%llu s", (unsigned long long)(ms / 1000),
			 (unsigned long long)(ms % 1000 / 100));
		return buf;
	}
	uint64_t s = ms / 1000;
	if (s < 60)
		snprintf(buf, size, "%llu s", (unsigned long long)s);
	else if (s < 3600)
		snprintf(buf, size, "%llu min %llu s", (unsigned long long)(s / 60), (unsigned long long)(s % 60));
	else if (s < 86400)
		snprintf(buf, size, "%llu h %llu min", (unsigned long long)(s / 3600),
			 (unsigned long long)(s % 3600 / 60));
	else
		snprintf(buf, size, "%llu d %llu h", (unsigned long long)(s / 86400),
			 (unsigned long long)(s % 86400 / 3600));
	return buf;
}

/* The largest whole unit of a non-negative span in seconds: "12 s", "5 min", "3 h", "2 d". */
static void span(uint64_t s, char *buf, size_t size)
{
	if (s < 60)
		snprintf(buf, size, "%llu s", (unsigned long long)s);
	else if (s < 3600)
		snprintf(buf, size, "%llu min", (unsigned long long)(s / 60));
	else if (s < 86400)
		snprintf(buf, size, "%llu h", (unsigned long long)(s / 3600));
	else
		snprintf(buf, size, "%llu d", (unsigned long long)(s / 86400));
}

char *lbc_format_relative(int64_t then_ms, int64_t now_ms, char *buf, size_t size)
{
	if (then_ms <= 0) {
		snprintf(buf, size, "-");
		return buf;
	}
	int64_t diff = now_ms - then_ms;
	uint64_t abs_s = (uint64_t)(diff < 0 ? -diff : diff) / 1000;
	if (abs_s < 1) {
		snprintf(buf, size, diff >= 0 ? "just now" : "now");
		return buf;
	}
	char s[32];
	span(abs_s, s, sizeof(s));
	if (diff >= 0)
		snprintf(buf, size, "%s ago", s);
	else
		snprintf(buf, size, "in %s", s);
	return buf;
}

static int digits(const char **sp, int n, int *ret)
{
	int v = 0;
	for (int i = 0; i < n; i++) {
		char c = (*sp)[i];
		if (c < '0' || c > '9')
			return -EINVAL;
		v = v * 10 + (c - '0');
	}
	*sp += n;
	*ret = v;
	return 0;
}

int lbc_parse_time_ms(const char *s, int64_t *ret_ms)
{
	if (!s)
		return -EINVAL;
	int y, mo, d, h, mi, sec, ms = 0;
	const char *p = s;
	if (digits(&p, 4, &y) < 0 || *p++ != '-' || digits(&p, 2, &mo) < 0 || *p++ != '-' || digits(&p, 2, &d) < 0 ||
	    (*p != 'T' && *p != 't' && *p != ' '))
		return -EINVAL;
	p++;
	if (digits(&p, 2, &h) < 0 || *p++ != ':' || digits(&p, 2, &mi) < 0 || *p++ != ':' || digits(&p, 2, &sec) < 0)
		return -EINVAL;
	if (*p == '.') {
		p++;
		int n = 0, scale = 100;
		while (*p >= '0' && *p <= '9') {
			if (n < 3) {
				ms += (*p - '0') * scale;
				scale /= 10;
			}
			p++;
			n++;
		}
		if (n == 0)
			return -EINVAL;
	}
	if (strcmp(p, "Z") != 0 && strcmp(p, "z") != 0 && strcmp(p, "+00:00") != 0)
		return -EINVAL;
	if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60)
		return -EINVAL;
	struct tm tm = {
		.tm_year = y - 1900, .tm_mon = mo - 1, .tm_mday = d, .tm_hour = h, .tm_min = mi, .tm_sec = sec
	};
	time_t t = timegm(&tm);
	if (t == (time_t)-1)
		return -EINVAL;
	*ret_ms = (int64_t)t * 1000 + ms;
	return 0;
}

char *lbc_term_safe(const char *s, size_t len, bool keep_newlines)
{
	/* each input byte yields at most one output byte, except that a valid multi-byte sequence is copied as is */
	char *out = malloc(len + 1);
	if (!out)
		return NULL;
	const unsigned char *u = (const unsigned char *)s;
	size_t i = 0, o = 0;
	while (i < len) {
		unsigned char c = u[i];
		if (c < 0x80) {
			bool ok = (c >= 0x20 && c != 0x7f) || (keep_newlines && (c == '\n' || c == '\t'));
			if (ok)
				out[o++] = (char)c;
			else
				out[o++] = '?';
			i++;
			continue;
		}
		size_t n = lb_utf8_seq_len(u + i, len - i);
		if (n == 0) {
			out[o++] = '?';
			i++;
			continue;
		}
		/* C1 controls U+0080-U+009F are encoded C2 80 - C2 9F; some terminals obey them like ESC sequences */
		if (n == 2 && c == 0xc2 && u[i + 1] < 0xa0) {
			out[o++] = '?';
			i += 2;
			continue;
		}
		memcpy(out + o, u + i, n);
		o += n;
		i += n;
	}
	out[o] = '\0';
	return out;
}

size_t lbc_display_width(const char *s)
{
	return lb_utf8_count(s, strlen(s));
}

struct lbc_table {
	size_t ncols;
	char **headers;
	bool *right;
	char **cells; /* rows * ncols */
	size_t rows, cap;
};

struct lbc_table *lbc_table_new(size_t ncols, const char *const *headers, const bool *right_align)
{
	struct lbc_table *t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	t->ncols = ncols;
	t->headers = calloc(ncols, sizeof(char *));
	t->right = calloc(ncols, sizeof(bool));
	if (!t->headers || !t->right) {
		lbc_table_free(t);
		return NULL;
	}
	for (size_t i = 0; i < ncols; i++) {
		t->headers[i] = strdup(headers[i]);
		if (!t->headers[i]) {
			lbc_table_free(t);
			return NULL;
		}
		t->right[i] = right_align ? right_align[i] : false;
	}
	return t;
}

int lbc_table_add(struct lbc_table *t, const char *const *cells)
{
	if (t->rows == t->cap) {
		size_t ncap = t->cap ? t->cap * 2 : 16;
		char **bigger = reallocarray(t->cells, ncap * t->ncols, sizeof(char *));
		if (!bigger)
			return -ENOMEM;
		t->cells = bigger;
		t->cap = ncap;
	}
	char **row = t->cells + t->rows * t->ncols;
	for (size_t i = 0; i < t->ncols; i++) {
		const char *c = cells[i] ? cells[i] : "-";
		row[i] = lbc_term_safe(c, strlen(c), false);
		if (!row[i]) {
			for (size_t j = 0; j < i; j++)
				free(row[j]);
			return -ENOMEM;
		}
	}
	t->rows++;
	return 0;
}

size_t lbc_table_rows(const struct lbc_table *t)
{
	return t->rows;
}

static void print_cell(FILE *f, const char *s, size_t width, bool right, bool last)
{
	size_t w = lbc_display_width(s);
	size_t pad = width > w ? width - w : 0;
	if (right)
		fprintf(f, "%*s%s", (int)pad, "", s);
	else if (last)
		fputs(s, f);
	else
		fprintf(f, "%s%*s", s, (int)pad, "");
}

void lbc_table_print(const struct lbc_table *t, FILE *f)
{
	size_t *width = calloc(t->ncols, sizeof(size_t));
	if (!width)
		return;
	for (size_t c = 0; c < t->ncols; c++) {
		width[c] = lbc_display_width(t->headers[c]);
		for (size_t r = 0; r < t->rows; r++) {
			size_t w = lbc_display_width(t->cells[r * t->ncols + c]);
			if (w > width[c])
				width[c] = w;
		}
	}
	for (size_t r = 0; r <= t->rows; r++) {
		for (size_t c = 0; c < t->ncols; c++) {
			const char *s = r == 0 ? t->headers[c] : t->cells[(r - 1) * t->ncols + c];
			bool last = c + 1 == t->ncols;
			print_cell(f, s, width[c], t->right[c], last);
			if (!last)
				fputs("  ", f);
		}
		fputc('\n', f);
	}
	free(width);
}

void lbc_table_free(struct lbc_table *t)
{
	if (!t)
		return;
	for (size_t i = 0; t->headers && i < t->ncols; i++)
		free(t->headers[i]);
	for (size_t i = 0; i < t->rows * t->ncols; i++)
		free(t->cells[i]);
	free(t->headers);
	free(t->right);
	free(t->cells);
	free(t);
}

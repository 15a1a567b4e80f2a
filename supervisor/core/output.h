/*
 * output.h — turning a program's captured stdout/stderr into valid UTF-8 of at most N Unicode characters.
 */
#ifndef LBD_OUTPUT_H
#define LBD_OUTPUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct lbd_cut {
	char *text; /* valid UTF-8, NUL-terminated, malloc'ed */
	size_t len;
	bool truncated; /* the program wrote more than text holds */
};

/* buf/len: the bytes captured, total: every byte the program wrote. head: buf is the start of the stream (keep
 * the first limit characters); else its end (keep the last limit). -ENOMEM only. */
int lbd_cut_output(const char *buf, size_t len, uint64_t total, size_t limit, bool head, struct lbd_cut *ret);

#endif

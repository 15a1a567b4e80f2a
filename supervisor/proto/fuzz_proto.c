/*
 * fuzz_proto.c — libFuzzer target for the core's message decoder (lbp_decode), the first code that reads what the
 * API process sends. Input: one flags byte, then the datagram. Flags bit 0 attaches one descriptor: a sealed memfd
 * of (flags >> 1) bytes, so messages that carry a run's source or a file reach their checks. Every accepted message
 * must satisfy the invariants proto.h states; a violation aborts. Seeds: supervisor/proto/fuzz-corpus.
 */
#include "proto.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_accepted(const struct lbp_msg *m, size_t len)
{
	if (m->hdr.len + sizeof(m->hdr) != len || (long)m->hdr.nfds != (long)m->nfds)
		abort();
	switch (m->hdr.type) {
	case LBP_SANDBOX_GET:
	case LBP_SANDBOX_DELETE:
	case LBP_SANDBOX_STOP:
		if (!lbp_name_valid(m->u.name.name))
			abort();
		break;
	case LBP_FILE_GET:
		if (!lbp_name_valid(m->u.file.name) || !lbp_path_valid(m->u.file.path, false))
			abort();
		break;
	case LBP_RUN:
		if (m->nfds != 1 || m->u.run.source_len > LBP_SOURCE_MAX)
			abort();
		break;
	case LBP_PROGRESS: {
		const struct lbp_progress *p = &m->u.progress;
		size_t n = strnlen(p->layer, sizeof(p->layer));
		if (!lbp_phase_name(p->phase) || (p->total && p->done > p->total) || (n != 0 && n != LBP_LAYER_HEX))
			abort();
		break;
	}
	default:
		break;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1 || size > LBP_MESSAGE_MAX + 1)
		return 0;
	int fds[1];
	size_t nfds = 0;
	if (data[0] & 1) {
		size_t n = data[0] >> 1;
		char buf[128] = { 0 };
		int fd = lbp_memfd("fuzz", buf, n);
		if (fd < 0)
			return 0;
		fds[nfds++] = fd;
	}
	struct lbp_msg *m = malloc(sizeof(*m));
	if (!m)
		abort();
	if (lbp_decode(data + 1, size - 1, fds, nfds, m) == 0) {
		check_accepted(m, size - 1);
		lbp_msg_clear(m);
	} else if (nfds && fcntl(fds[0], F_GETFD) >= 0) {
		abort(); /* a refused message must leave no descriptor behind */
	}
	free(m);
	return 0;
}

/*
 * fuzz_refusals.c — libFuzzer target for what the runner reads from a sandbox to count its refusals: the first byte
 * picks the parser. 0: a receive buffer of netlink audit messages (landlock_audit.c: Landlock's records and the
 * end-of-run marker, text the sandbox partly controls). 1: a classic BPF program and a seccomp_data for the
 * interpreter that answers seccomp notifications (seccomp_notify.c; the program is the policy's in practice, the
 * data the sandbox's registers). Built only with -DLENSBOX_FUZZ=ON and clang; seeds in runner/fuzz-corpus/refusals.
 */
#include "internal.h"

#include <linux/seccomp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1 || size > 65536)
		return 0;
	if (data[0] % 2 == 0) {
		struct lb_ll_audit a;
		memset(&a, 0, sizeof(a));
		a.fd = -1;
		a.pid = 4242;
		memcpy(a.marker, "lensbox-run-end-1-1", 20);
		/* the kernel hands whole, aligned buffers; copy so that reads past the end are caught */
		char *buf = malloc(size - 1 ? size - 1 : 1);
		if (!buf)
			return 0;
		memcpy(buf, data + 1, size - 1);
		lb_ll_audit_take(&a, buf, size - 1);
		free(buf);
		return 0;
	}
	struct seccomp_data d;
	memset(&d, 0, sizeof(d));
	size_t n = size - 1 < sizeof(d) ? size - 1 : sizeof(d);
	memcpy(&d, data + 1, n);
	size_t len = (size - 1 - n) / sizeof(struct sock_filter);
	if (len == 0)
		return 0;
	struct sock_filter *prog = malloc(len * sizeof(*prog));
	if (!prog)
		return 0;
	memcpy(prog, data + 1 + n, len * sizeof(*prog));
	(void)lb_seccomp_eval(prog, len, &d);
	free(prog);
	return 0;
}

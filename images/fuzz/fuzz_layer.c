/*
 * fuzz_layer — libFuzzer target for the layer applier (layer.c, resolve.c): the input is a layer blob (raw tar,
 * gzip or zstd, chosen by its magic bytes as in real imports) applied to a fresh empty root under /tmp with small
 * bounds. Run as root (owners are applied); a crash, sanitizer report or anything written outside the root is a bug.
 * Seeds: corpus/layer/.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../src/internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char base[64];

static void cleanup(void)
{
	(void)lbi_remove_at(AT_FDCWD, base);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!base[0]) {
		snprintf(base, sizeof(base), "/tmp/lb-fuzz-layer-%d", (int)getpid());
		mkdir(base, 0700);
		atexit(cleanup);
	}
	int basefd = open(base, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (basefd < 0)
		abort();
	(void)lbi_remove_at(basefd, "root");
	if (mkdirat(basefd, "root", 0755) < 0)
		abort();
	int rootfd = openat(basefd, "root", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int blob = memfd_create("layer", MFD_CLOEXEC);
	if (rootfd < 0 || blob < 0 || (size && write(blob, data, size) != (ssize_t)size))
		abort();
	struct lb_image_limits l;
	lb_image_limits_default(&l);
	l.max_total_bytes = 1 << 20;
	l.max_entries = 1000;
	struct lbi_unpack_stats st = { 0 };
	struct lb_error err = { 0 };
	(void)lbi_layer_apply(rootfd, blob, "0000000000000000000000000000000000000000000000000000000000000000", "fuzz",
			      &l, &st, &err);
	close(blob);
	close(rootfd);
	close(basefd);
	return 0;
}

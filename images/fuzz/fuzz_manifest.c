/*
 * fuzz_manifest — libFuzzer target for the JSON documents of an image (manifest.c): the input is written as an OCI
 * layout's index.json, and as a docker save archive's manifest.json and config.json, and each layout is planned
 * with small bounds. Runs unprivileged or as root; a crash or sanitizer report is a bug. Seeds: corpus/manifest/.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../src/manifest.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void put(int dirfd, const char *name, const uint8_t *data, size_t size)
{
	int fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || (size && write(fd, data, size) != (ssize_t)size))
		abort();
	close(fd);
}

static void plan(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		abort();
	struct lb_image_limits l;
	lb_image_limits_default(&l);
	l.max_json_bytes = 1 << 16;
	struct lbi_plan p;
	struct lb_error err = { 0 };
	(void)lbi_plan_load(fd, NULL, &l, &p, &err);
	lbi_plan_free(&p);
	close(fd);
}

static char oci[64], docker[64];

static void cleanup(void)
{
	(void)lbi_remove_at(AT_FDCWD, oci);
	(void)lbi_remove_at(AT_FDCWD, docker);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!oci[0]) {
		snprintf(oci, sizeof(oci), "/tmp/lb-fuzz-oci-%d", (int)getpid());
		snprintf(docker, sizeof(docker), "/tmp/lb-fuzz-docker-%d", (int)getpid());
		mkdir(oci, 0700);
		mkdir(docker, 0700);
		atexit(cleanup);
	}
	int ofd = open(oci, O_RDONLY | O_DIRECTORY | O_CLOEXEC), dfd = open(docker, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (ofd < 0 || dfd < 0)
		abort();
	put(ofd, "index.json", data, size);
	put(dfd, "manifest.json", data, size);
	put(dfd, "config.json", data, size);
	close(ofd);
	close(dfd);
	plan(oci);
	plan(docker);
	return 0;
}

/* Unit tests for lb_disk_ext4_layout() (runner/disk.c): on images made by mke2fs it finds the block size and the
 * blocks a mount reads first, each checked against the on-disk structure it must be (the superblock's magic, the
 * root directory's "." entry, the journal superblock's magic); on hostile or cut images it refuses or stays inside
 * the file. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "../../../runner/internal.h"
#include "lb/cleanup.h"

static char dir[] = "/tmp/lb-ext4-layout-XXXXXX";

static int setup(void **state)
{
	(void)state;
	return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	return system(cmd) == 0 ? 0 : -1;
}

/* A sparse file of size_mib made into ext4 by mke2fs with the given block size; returns its path (static buffer). */
static const char *make_image(unsigned size_mib, unsigned block_size)
{
	static char path[256];
	snprintf(path, sizeof(path), "%s/disk-%u.img", dir, block_size);
	char cmd[1024];
	snprintf(cmd, sizeof(cmd),
		 "truncate -s %uM '%s' && PATH=/usr/sbin:/sbin:/usr/bin:/bin mke2fs -q -F -t ext4 -b %u -m 0 "
		 "-E lazy_itable_init=1,lazy_journal_init=1 '%s' >/dev/null 2>&1",
		 size_mib, path, block_size, path);
	if (system(cmd) != 0)
		fail_msg("mke2fs (e2fsprogs, scripts/install-deps) could not make a test image: %s", cmd);
	return path;
}

static uint32_t le32_at(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The kinds of block found, by what is in them. */
struct found {
	bool superblock, root_dir, journal_sb;
};

static void check_image(const char *path, unsigned block_size)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	struct stat st;
	assert_int_equal(fstat(fd, &st), 0);
	struct lb_ext4_layout l;
	memset(&l, 0xff, sizeof(l));
	assert_int_equal(lb_disk_ext4_layout(fd, &l), 0);
	assert_int_equal(l.block_size, block_size);
	assert_true(l.n >= 4 && l.n <= LB_ARRAY_SIZE(l.offsets));
	struct found f = { false, false, false };
	unsigned char *b = malloc(block_size);
	assert_non_null(b);
	for (size_t i = 0; i < l.n; i++) {
		assert_int_equal(l.offsets[i] % block_size, 0);
		assert_true(l.offsets[i] + block_size <= (uint64_t)st.st_size);
		assert_int_equal(pread(fd, b, block_size, (off_t)l.offsets[i]), (ssize_t)block_size);
		/* ext4's superblock: magic 0xEF53 at byte 0x38 of the superblock, which starts at byte 1024 */
		size_t sbo = 1024 - (size_t)l.offsets[i];
		if (l.offsets[i] <= 1024 && sbo + 0x3a <= block_size && b[sbo + 0x38] == 0x53 && b[sbo + 0x39] == 0xef)
			f.superblock = true;
		/* a directory block whose first entry is "." of inode 2 (the root) */
		if (le32_at(b) == 2 && b[6] == 1 && b[8] == '.')
			f.root_dir = true;
		/* jbd2's superblock: big-endian magic 0xC03B3998 */
		if (b[0] == 0xc0 && b[1] == 0x3b && b[2] == 0x39 && b[3] == 0x98)
			f.journal_sb = true;
	}
	free(b);
	close(fd);
	assert_true(f.superblock);
	assert_true(f.root_dir);
	assert_true(f.journal_sb);
}

static void finds_the_first_reads_4k(void **state)
{
	(void)state;
	check_image(make_image(1024, 4096), 4096);
}

static void finds_the_first_reads_1k(void **state)
{
	(void)state;
	check_image(make_image(64, 1024), 1024);
}

static int write_file(const char *path, const void *buf, size_t len, off_t size)
{
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return -1;
	int ok = pwrite(fd, buf, len, 0) == (ssize_t)len && ftruncate(fd, size) == 0;
	return ok ? fd : (close(fd), -1);
}

static void refuses_what_is_not_ext4(void **state)
{
	(void)state;
	char path[256];
	snprintf(path, sizeof(path), "%s/zeros.img", dir);
	static unsigned char zeros[8192];
	int fd = write_file(path, zeros, sizeof(zeros), 1 << 20);
	assert_true(fd >= 0);
	struct lb_ext4_layout l = { .n = 77 };
	assert_int_equal(lb_disk_ext4_layout(fd, &l), -EINVAL);
	assert_int_equal(l.n, 77); /* untouched */
	close(fd);

	/* shorter than a superblock */
	snprintf(path, sizeof(path), "%s/short.img", dir);
	fd = write_file(path, zeros, 100, 100);
	assert_true(fd >= 0);
	assert_int_equal(lb_disk_ext4_layout(fd, &l), -EINVAL);
	close(fd);
}

static void hostile_superblock_stays_inside_the_file(void **state)
{
	(void)state;
	static unsigned char img[8192];
	memset(img, 0, sizeof(img));
	unsigned char *sb = img + 1024;
	sb[0x38] = 0x53, sb[0x39] = 0xef; /* magic */
	sb[0x18] = 40;			  /* block size 1024 << 40 */
	char path[256];
	snprintf(path, sizeof(path), "%s/hostile.img", dir);
	int fd = write_file(path, img, sizeof(img), sizeof(img));
	assert_true(fd >= 0);
	struct lb_ext4_layout l;
	assert_int_equal(lb_disk_ext4_layout(fd, &l), -EINVAL);
	close(fd);

	/* A plausible superblock whose group descriptor sends the inode table far past the end of the file, and an
	 * inode size that is not a power of two. */
	sb[0x18] = 0;			/* 1 KiB blocks */
	sb[0x14] = 1;			/* first data block */
	sb[0x28] = 0, sb[0x29] = 0x20;	/* 8192 inodes per group */
	sb[0x4c] = 1;			/* dynamic revision */
	sb[0x58] = 0, sb[0x59] = 1;	/* 256-byte inodes */
	sb[0xe0] = 8;			/* journal inode */
	unsigned char *gd = img + 2048; /* block 2 */
	gd[0x8] = 0xff, gd[0x9] = 0xff, gd[0xa] = 0xff, gd[0xb] = 0x7f;
	close(write_file(path, img, sizeof(img), sizeof(img)));
	fd = open(path, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(lb_disk_ext4_layout(fd, &l), 0);
	assert_int_equal(l.block_size, 1024);
	assert_int_equal(l.n, 2); /* the superblock and the descriptors; nothing from the made-up inode table */
	for (size_t i = 0; i < l.n; i++)
		assert_true(l.offsets[i] < sizeof(img));
	close(fd);

	sb[0x58] = 100, sb[0x59] = 0; /* 100-byte inodes */
	fd = write_file(path, img, sizeof(img), sizeof(img));
	assert_true(fd >= 0);
	assert_int_equal(lb_disk_ext4_layout(fd, &l), -EINVAL);
	close(fd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(finds_the_first_reads_4k),
		cmocka_unit_test(finds_the_first_reads_1k),
		cmocka_unit_test(refuses_what_is_not_ext4),
		cmocka_unit_test(hostile_superblock_stays_inside_the_file),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}

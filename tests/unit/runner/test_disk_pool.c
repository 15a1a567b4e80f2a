/* Unit tests for the pool of pre-formatted storage images (runner/disk_pool.c): a refill makes LB_DISK_POOL_TARGET
 * ext4 images of the asked size in the background and only one refiller works at a time; a take moves exactly one
 * image of exactly that size; a pool anyone else could write to, a pool reached through a symlink and a planted
 * symlink in the pool are refused; a dead refiller's half-made image is removed; a refiller bound to its caller
 * (lensboxd's) ends with it, leaving no half-made image and the lock free. Runs as root (mke2fs). */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "../../../runner/internal.h"

#define SIZE ((uint64_t)16 << 20)

static char dir[] = "/tmp/lb-disk-pool-XXXXXX";
static char pool[256];

static int setup(void **state)
{
	(void)state;
	if (!mkdtemp(dir))
		return -1;
	snprintf(pool, sizeof(pool), "%s/pool", dir);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	return system(cmd) == 0 ? 0 : -1;
}

/* Entries of the pool ending in suffix. */
static int count(const char *suffix)
{
	DIR *d = opendir(pool);
	if (!d)
		return -1;
	int n = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		size_t len = strlen(de->d_name), s = strlen(suffix);
		n += len > s && strcmp(de->d_name + len - s, suffix) == 0;
	}
	closedir(d);
	return n;
}

static bool wait_for_images(int want, int seconds)
{
	for (int i = 0; i < seconds * 20; i++) {
		if (count(".img") >= want && count(".new") == 0)
			return true;
		struct timespec ts = { 0, 50000000L };
		nanosleep(&ts, NULL);
	}
	return false;
}

static void refill_then_take(void **state)
{
	(void)state;
	char img[512];
	snprintf(img, sizeof(img), "%s/disk.img", dir);
	assert_int_equal(lb_disk_pool_take(pool, SIZE, img), -ENOENT); /* no pool yet */

	assert_int_equal(lb_disk_pool_refill(pool, SIZE, false), LB_DISK_POOL_TARGET);
	/* The first refiller holds the lock until it is done: a second one is not started. */
	assert_int_equal(lb_disk_pool_refill(pool, SIZE, false), 0);
	assert_true(wait_for_images(LB_DISK_POOL_TARGET, 30));
	struct stat st;
	assert_int_equal(stat(pool, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0700);

	/* Another size: none. This size: one, moved, an ext4 filesystem of exactly that size. */
	assert_int_equal(lb_disk_pool_take(pool, SIZE * 2, img), -ENOENT);
	assert_int_equal(lb_disk_pool_take(pool, SIZE, img), 0);
	assert_int_equal(count(".img"), LB_DISK_POOL_TARGET - 1);
	assert_int_equal(stat(img, &st), 0);
	assert_int_equal((uint64_t)st.st_size, SIZE);
	int fd = open(img, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	struct lb_ext4_layout l;
	assert_int_equal(lb_disk_ext4_layout(fd, &l), 0);
	close(fd);

	/* The refiller is gone (its lock free): a refill makes exactly the one missing image. */
	assert_int_equal(lb_disk_pool_refill(pool, SIZE, false), 1);
	assert_true(wait_for_images(LB_DISK_POOL_TARGET, 30));
	assert_int_equal(lb_disk_pool_refill(pool, SIZE, false), 0); /* full */

	/* The refiller left its template: a copy of it (the pool empty) is the same filesystem, as sparse. */
	char tpl[512];
	snprintf(tpl, sizeof(tpl), "%s/%llu.template", pool, (unsigned long long)SIZE);
	struct stat ts;
	assert_int_equal(stat(tpl, &ts), 0);
	assert_int_equal((uint64_t)ts.st_size, SIZE);
	char copy[512];
	snprintf(copy, sizeof(copy), "%s/copy.img", dir);
	fd = open(copy, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(lb_disk_pool_copy_template(pool, SIZE * 2, fd), -ENOENT); /* no template of that size */
	assert_int_equal(lb_disk_pool_copy_template(pool, SIZE, fd), 0);
	close(fd);
	assert_int_equal(stat(copy, &st), 0);
	assert_int_equal((uint64_t)st.st_size, SIZE);
	assert_true(st.st_blocks <= ts.st_blocks); /* holes stayed holes */
	char cmd[2048];
	snprintf(cmd, sizeof(cmd), "cmp -s '%s' '%s' && e2fsck -fn '%s' >/dev/null 2>&1", tpl, copy, copy);
	assert_int_equal(system(cmd), 0);
	/* The template's root is empty: mke2fs's lost+found went before the first copy (nothing to remove at a new
	 * storage's first mount). debugfs lists "." and ".." and nothing else. */
	snprintf(cmd, sizeof(cmd), "debugfs -R 'ls -p /' '%s' 2>/dev/null | grep -c '^/'", tpl);
	FILE *ls = popen(cmd, "r");
	assert_non_null(ls);
	int entries = -1;
	assert_int_equal(fscanf(ls, "%d", &entries), 1);
	pclose(ls);
	assert_int_equal(entries, 2);
	unlink(copy);
}

static void dead_refillers_leftovers_go(void **state)
{
	(void)state;
	char path[512];
	snprintf(path, sizeof(path), "%s/%llu.1-1.new", pool, (unsigned long long)SIZE);
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(lb_disk_pool_refill(pool, SIZE, false), 0); /* full, and the .new is a dead refiller's */
	assert_int_equal(access(path, F_OK), -1);
	/* A half-made image is never taken: only .img names are. */
	char img[512];
	snprintf(img, sizeof(img), "%s/other.img", dir);
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, (off_t)SIZE), 0);
	close(fd);
	char cmd[1024];
	snprintf(cmd, sizeof(cmd), "mv %s/*.img %s/", pool, dir);
	assert_int_equal(system(cmd), 0);
	assert_int_equal(lb_disk_pool_take(pool, SIZE, img), -ENOENT);
	assert_int_equal(unlink(path), 0);
}

static void hostile_pools_are_refused(void **state)
{
	(void)state;
	char img[512], p[512], link[512];
	snprintf(img, sizeof(img), "%s/hostile.img", dir);
	/* A pool others can write to: someone could have planted an image the kernel would mount. */
	snprintf(p, sizeof(p), "%s/open-pool", dir);
	assert_int_equal(mkdir(p, 0700), 0);
	assert_int_equal(chmod(p, 0777), 0);
	char planted[600];
	snprintf(planted, sizeof(planted), "%s/%llu.9-9.img", p, (unsigned long long)SIZE);
	int fd = open(planted, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, (off_t)SIZE), 0);
	close(fd);
	assert_int_equal(lb_disk_pool_take(p, SIZE, img), -EPERM);
	assert_int_equal(lb_disk_pool_refill(p, SIZE, false), -EPERM);
	/* A pool owned by another user. */
	assert_int_equal(chmod(p, 0700), 0);
	assert_int_equal(chown(p, 65534, 65534), 0);
	assert_int_equal(lb_disk_pool_take(p, SIZE, img), -EPERM);
	assert_int_equal(chown(p, 0, 0), 0);
	/* The pool reached through a symlink: not followed. */
	snprintf(link, sizeof(link), "%s/link-pool", dir);
	assert_int_equal(symlink(p, link), 0);
	int r = lb_disk_pool_take(link, SIZE, img);
	assert_true(r == -ELOOP || r == -ENOTDIR);
	/* In a good pool, a symlink named like an image (to a file elsewhere) is not taken. */
	assert_int_equal(unlink(planted), 0);
	char target[512];
	snprintf(target, sizeof(target), "%s/elsewhere", dir);
	fd = open(target, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, (off_t)SIZE), 0);
	close(fd);
	assert_int_equal(symlink(target, planted), 0);
	assert_int_equal(lb_disk_pool_take(p, SIZE, img), -ENOENT);
	assert_int_equal(access(img, F_OK), -1);
}

/* A caller that exits at once: its bound refiller gives up before its first mke2fs is done, and releases the lock. */
static void bound_refill_ends_with_its_caller(void **state)
{
	(void)state;
	snprintf(pool, sizeof(pool), "%s/pool-bound", dir);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(lb_disk_pool_refill(pool, SIZE, true) == LB_DISK_POOL_TARGET ? 0 : 1);
	int status = 0;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	char lock[300];
	snprintf(lock, sizeof(lock), "%s/.lock", pool);
	int fd = open(lock, O_RDWR | O_CLOEXEC);
	assert_true(fd >= 0);
	bool free = false;
	for (int i = 0; i < 60 && !free; i++) { /* 3 s: the refiller polls its caller's pidfd, it ends in ~0 s */
		free = flock(fd, LOCK_EX | LOCK_NB) == 0;
		struct timespec ts = { 0, 50000000L };
		if (!free)
			nanosleep(&ts, NULL);
	}
	close(fd);
	assert_true(free);
	assert_int_equal(count(".new"), 0);
	assert_true(count(".img") < LB_DISK_POOL_TARGET);
}

int main(void)
{
	if (geteuid() != 0) {
		fprintf(stderr, "test_disk_pool: needs root (mke2fs, chown)\n");
		return 1;
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(refill_then_take),
		cmocka_unit_test(dead_refillers_leftovers_go),
		cmocka_unit_test(hostile_pools_are_refused),
		cmocka_unit_test(bound_refill_ends_with_its_caller),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}

/* Unit tests for ready storages (runner/disk_ready.c): one is a pool image renamed .ready, attached and mounted
 * nowhere; freed unused, its image goes back to the pool as .img with nothing holding it; placed, the image becomes
 * the storage's disk.img and the filesystem is mounted at the mount point; one whose holder died (the kernel closed
 * its descriptors) is given back by the pool's next refill, and one still held is not. Runs as root (loop devices). */
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
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "../../../runner/internal.h"

#define SIZE	   ((uint64_t)16 << 20)
#define EXT4_MAGIC 0xEF53

static char dir[] = "/tmp/lb-disk-ready-XXXXXX";
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

/* Entries of the pool ending in suffix; with name, the last one's name. */
static int count(const char *suffix, char *name, size_t size)
{
	DIR *d = opendir(pool);
	if (!d)
		return -1;
	int n = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		size_t len = strlen(de->d_name), s = strlen(suffix);
		if (len > s && strcmp(de->d_name + len - s, suffix) == 0) {
			n++;
			if (name)
				snprintf(name, size, "%s", de->d_name);
		}
	}
	closedir(d);
	return n;
}

static bool wait_for(const char *suffix, int want, int seconds)
{
	for (int i = 0; i < seconds * 20; i++) {
		if (count(suffix, NULL, 0) == want && count(".new", NULL, 0) == 0)
			return true;
		struct timespec ts = { 0, 50000000L };
		nanosleep(&ts, NULL);
	}
	return false;
}

/* Whether anything holds pool/name open for writing (a loop device). */
static int held(const char *name)
{
	int fd = open(pool, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(fd >= 0);
	int r = lb_disk_file_in_use(fd, name);
	close(fd);
	return r;
}

static void fill_pool(void)
{
	if (count(".img", NULL, 0) < LB_DISK_POOL_TARGET)
		assert_true(lb_disk_pool_refill(pool, SIZE, false) >= 0);
	assert_true(wait_for(".img", LB_DISK_POOL_TARGET, 60));
}

static void freed_unused_goes_back_to_the_pool(void **state)
{
	(void)state;
	struct lb_disk_ready *r = NULL;
	struct lb_error err = { 0 };
	assert_int_equal(lb_disk_ready_make(pool, SIZE, &r, &err), -ENOENT); /* no pool yet */
	fill_pool();
	assert_int_equal(lb_disk_ready_make(pool, SIZE * 2, &r, &err), -ENOENT); /* no image of that size */
	assert_null(r);
	assert_int_equal(lb_disk_ready_make(pool, SIZE, &r, &err), 0);
	assert_non_null(r);
	assert_int_equal(lb_disk_ready_bytes(r), SIZE);
	char name[128];
	assert_int_equal(count(".ready", name, sizeof(name)), 1);
	assert_int_equal(count(".img", NULL, 0), LB_DISK_POOL_TARGET - 1); /* taken: no take or count sees it */
	assert_int_equal(held(name), 1);				   /* attached to a loop device */
	lb_disk_ready_free(r);
	assert_int_equal(count(".ready", NULL, 0), 0);
	assert_int_equal(count(".img", NULL, 0), LB_DISK_POOL_TARGET);
	assert_int_equal(held(name), 0);
}

static void placed_becomes_the_storage(void **state)
{
	(void)state;
	fill_pool();
	struct lb_disk_ready *r = NULL;
	struct lb_error err = { 0 };
	assert_int_equal(lb_disk_ready_make(pool, SIZE, &r, &err), 0);
	char storage[300], mnt[300], img[320];
	snprintf(storage, sizeof(storage), "%s/storage", dir);
	snprintf(mnt, sizeof(mnt), "%s/mnt/x", dir);
	snprintf(img, sizeof(img), "%s/disk.img", storage);
	assert_int_equal(mkdir(storage, 0700), 0);
	assert_int_equal(lb_disk_ready_place(r, storage, mnt, &err), 0);
	lb_disk_ready_free(r);
	struct statfs sf;
	assert_int_equal(statfs(mnt, &sf), 0);
	assert_int_equal(sf.f_type, EXT4_MAGIC);
	struct stat st;
	assert_int_equal(stat(img, &st), 0);
	assert_int_equal((uint64_t)st.st_size, SIZE);
	assert_int_equal(count(".ready", NULL, 0), 0);
	char lf[340];
	snprintf(lf, sizeof(lf), "%s/lost+found", mnt);
	assert_int_equal(access(lf, F_OK), -1); /* the template had none */
	char dev[64];
	assert_int_equal(lb_disk_find_loop(storage, dev, sizeof(dev)), 0); /* the loop device follows the file */
	assert_int_equal(umount2(mnt, 0), 0);
	assert_int_equal(lb_disk_wait_released(storage, 2000), 0); /* autoclear: nothing holds the image */
}

static void a_dead_holders_image_is_given_back(void **state)
{
	(void)state;
	fill_pool();
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct lb_disk_ready *r = NULL;
		struct lb_error err = { 0 };
		_exit(lb_disk_ready_make(pool, SIZE, &r, &err) == 0 ? 0 : 1); /* dies holding it */
	}
	int status = 0;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	char name[128];
	assert_int_equal(count(".ready", name, sizeof(name)), 1);
	assert_int_equal(held(name), 0); /* the kernel shut it down with the holder's descriptors */

	/* One held by a live holder stays its own. */
	struct lb_disk_ready *live = NULL;
	struct lb_error err = { 0 };
	assert_int_equal(lb_disk_ready_make(pool, SIZE, &live, &err), 0);
	assert_int_equal(count(".ready", NULL, 0), 2);
	/* The refill's count (under the pool's lock) names the dead holder's image .img again: the pool is full
	 * without making one, and the live one is untouched. */
	assert_int_equal(lb_disk_pool_refill(pool, SIZE, false), 1);
	assert_true(wait_for(".img", LB_DISK_POOL_TARGET, 60));
	assert_int_equal(count(".ready", NULL, 0), 1);
	lb_disk_ready_free(live);
	assert_int_equal(count(".ready", NULL, 0), 0);
	assert_int_equal(count(".img", NULL, 0), LB_DISK_POOL_TARGET + 1);
	/* The given-back image (named .img now) is a clean filesystem. */
	char cmd[600];
	size_t len = strlen(name);
	snprintf(cmd, sizeof(cmd), "e2fsck -fn '%s/%.*s.img' >/dev/null 2>&1", pool, (int)(len - 6), name);
	assert_int_equal(system(cmd), 0);
}

int main(void)
{
	if (geteuid() != 0) {
		printf("skipped: needs root (loop devices, mounts)\n");
		return 0;
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(freed_unused_goes_back_to_the_pool),
		cmocka_unit_test(placed_becomes_the_storage),
		cmocka_unit_test(a_dead_holders_image_is_given_back),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}

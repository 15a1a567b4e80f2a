/*
 * test_seccomp_cache.c — the compiled-BPF cache (policy/src/seccomp_cache.c): a stored entry gives back exactly the
 * filter the compiler made; another profile, an altered entry, one made by another libseccomp, and an entry or
 * directory someone else could write are all refused with the reason, and the loader then compiles and repairs the
 * entry. Writes only under a private mkdtemp directory. The foreign-owner case needs root (it chowns a file).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <dirent.h>

#include "lb/fileio.h"
#include "lb/policy-parse.h"
#include "lb/policy.h"

#define POLICY LENSBOX_SOURCE_DIR "/policy"

static char base[] = "/tmp/lensbox-seccomp-cache-XXXXXX";
static char cache[256];
static char *json;
static size_t json_len;

static int setup(void **state)
{
	(void)state;
	if (!mkdtemp(base))
		return -1;
	snprintf(cache, sizeof(cache), "%s/cache", base);
	return lb_read_file_at(AT_FDCWD, POLICY "/seccomp.json", LB_POLICY_FILE_MAX, &json, &json_len);
}

static void rm_tree(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		return;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		char p[512];
		snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
		if (unlink(p) < 0)
			rm_tree(p);
	}
	closedir(d);
	rmdir(dir);
}

static int teardown(void **state)
{
	(void)state;
	rm_tree(base);
	free(json);
	return 0;
}

/* The one entry file in the cache directory (tests store one profile at a time). */
static void entry_path(char *buf, size_t size)
{
	DIR *d = opendir(cache);
	assert_non_null(d);
	struct dirent *de;
	int n = 0;
	while ((de = readdir(d)))
		if (strncmp(de->d_name, "seccomp-", 8) == 0) {
			snprintf(buf, size, "%s/%s", cache, de->d_name);
			n++;
		}
	closedir(d);
	assert_int_equal(n, 1);
}

static void fresh_entry(struct sock_fprog *prog, size_t *allowed)
{
	rm_tree(cache);
	struct lb_error err = { 0 };
	if (lb_seccomp_compile_json(json, json_len, "seccomp.json", prog, allowed, &err) < 0)
		fail_msg("%s", err.msg);
	if (lb_seccomp_cache_put(cache, json, json_len, prog, *allowed, &err) < 0)
		fail_msg("%s", err.msg);
}

static void flip_byte(const char *path, off_t off)
{
	int fd = open(path, O_RDWR);
	assert_true(fd >= 0);
	unsigned char b;
	assert_int_equal(pread(fd, &b, 1, off), 1);
	b ^= 0x40;
	assert_int_equal(pwrite(fd, &b, 1, off), 1);
	close(fd);
}

static int get(const char *text, size_t len, struct sock_fprog *prog, struct lb_error *err)
{
	size_t allowed = 0;
	memset(prog, 0, sizeof(*prog));
	return lb_seccomp_cache_get(cache, text, len, prog, &allowed, err);
}

static void test_roundtrip(void **state)
{
	(void)state;
	struct sock_fprog prog, got;
	size_t allowed = 0, got_allowed = 0;
	fresh_entry(&prog, &allowed);
	struct stat st;
	assert_int_equal(stat(cache, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0700);
	struct lb_error err = { 0 };
	int r = lb_seccomp_cache_get(cache, json, json_len, &got, &got_allowed, &err);
	if (r < 0)
		fail_msg("%s", err.msg);
	assert_int_equal(got.len, prog.len);
	assert_memory_equal(got.filter, prog.filter, prog.len * sizeof(struct sock_filter));
	assert_int_equal(got_allowed, allowed);
	char path[512];
	entry_path(path, sizeof(path));
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	free(got.filter);
	free(prog.filter);
}

/* What the loader returns through the cache is what it returns without it, and the second load is a hit. */
static void test_policy_load_cached(void **state)
{
	(void)state;
	rm_tree(cache);
	struct lb_policy *plain = NULL, *first = NULL, *second = NULL;
	struct lb_error err = { 0 };
	if (lb_policy_load(POLICY, &plain, &err) < 0 || lb_policy_load_cached(POLICY, cache, &first, &err) < 0 ||
	    lb_policy_load_cached(POLICY, cache, &second, &err) < 0)
		fail_msg("%s", err.msg);
	assert_false(plain->seccomp_cached);
	// fail_msg() ends the test (cmocka longjmps), which clang 14's analyzer cannot see:
	assert_false(first->seccomp_cached); // NOLINT(clang-analyzer-core.NullDereference)
	assert_true(second->seccomp_cached); // NOLINT(clang-analyzer-core.NullDereference)
	for (struct lb_policy *p = first; p; p = p == first ? second : NULL) {
		assert_int_equal(p->seccomp.len, plain->seccomp.len);
		assert_memory_equal(p->seccomp.filter, plain->seccomp.filter,
				    plain->seccomp.len * sizeof(struct sock_filter));
		assert_int_equal(p->seccomp_rules, plain->seccomp_rules);
		assert_int_equal(p->landlock.n_rules, plain->landlock.n_rules);
		assert_int_equal(p->limits.memory_bytes, plain->limits.memory_bytes);
	}
	lb_policy_free(plain);
	lb_policy_free(first);
	lb_policy_free(second);
}

/* Another profile, even one byte apart and even stored under the same entry name, never gets this filter. */
static void test_other_profile(void **state)
{
	(void)state;
	struct sock_fprog prog, got;
	size_t allowed = 0;
	fresh_entry(&prog, &allowed);
	char *other = strdup(json);
	assert_non_null(other);
	/* Same length, same meaning to a JSON parser, other bytes: a space becomes a tab. */
	char *sp = strchr(other, ' ');
	assert_non_null(sp);
	*sp = '\t';
	struct lb_error err = { 0 };
	assert_int_equal(get(other, json_len, &got, &err), -ENOENT);

	/* Plant this profile's entry under the other profile's name: the byte comparison refuses it. */
	char mine[512], theirs[512];
	entry_path(mine, sizeof(mine));
	if (lb_seccomp_cache_put(cache, other, json_len, &prog, allowed, &err) < 0)
		fail_msg("%s", err.msg);
	DIR *d = opendir(cache);
	struct dirent *de;
	theirs[0] = '\0';
	while ((de = readdir(d)))
		if (strncmp(de->d_name, "seccomp-", 8) == 0 && !strstr(mine, de->d_name))
			snprintf(theirs, sizeof(theirs), "%s/%s", cache, de->d_name);
	closedir(d);
	assert_true(theirs[0]);
	assert_int_equal(rename(mine, theirs), 0);
	assert_int_equal(get(other, json_len, &got, &err), -EBADMSG);
	assert_non_null(strstr(err.msg, "another profile"));
	free(other);
	free(prog.filter);
}

/* A changed instruction fails the checksum; the loader compiles, answers correctly and repairs the entry. */
static void test_altered_entry(void **state)
{
	(void)state;
	struct sock_fprog prog, got;
	size_t allowed = 0;
	fresh_entry(&prog, &allowed);
	char path[512];
	entry_path(path, sizeof(path));
	struct stat st;
	assert_int_equal(stat(path, &st), 0);
	flip_byte(path, st.st_size - 3); /* inside the last instruction */
	struct lb_error err = { 0 };
	assert_int_equal(get(json, json_len, &got, &err), -EBADMSG);
	assert_non_null(strstr(err.msg, "checksum"));

	bool hit = true;
	size_t n = 0;
	if (lb_seccomp_compile_json_cached(json, json_len, "seccomp.json", cache, &got, &n, &hit, &err) < 0)
		fail_msg("%s", err.msg);
	assert_false(hit);
	assert_memory_equal(got.filter, prog.filter, prog.len * sizeof(struct sock_filter));
	free(got.filter);
	assert_int_equal(get(json, json_len, &got, &err), 0);
	free(got.filter);

	/* A cut entry is refused too. */
	assert_int_equal(truncate(path, st.st_size - 8), 0);
	assert_int_equal(get(json, json_len, &got, &err), -EBADMSG);
	free(prog.filter);
}

/* An entry written by another libseccomp (its version in the header) is stale. */
static void test_other_libseccomp(void **state)
{
	(void)state;
	struct sock_fprog prog, got;
	size_t allowed = 0;
	fresh_entry(&prog, &allowed);
	char path[512];
	entry_path(path, sizeof(path));
	flip_byte(path, 16); /* libseccomp's major version */
	struct lb_error err = { 0 };
	assert_int_equal(get(json, json_len, &got, &err), -ESTALE);
	free(prog.filter);
}

/* Only the caller's own, private directory and entries are trusted. */
static void test_permissions(void **state)
{
	(void)state;
	struct sock_fprog prog, got;
	size_t allowed = 0;
	fresh_entry(&prog, &allowed);
	char path[512], alias[600];
	entry_path(path, sizeof(path));
	struct lb_error err = { 0 };

	assert_int_equal(chmod(path, 0666), 0);
	assert_int_equal(get(json, json_len, &got, &err), -EPERM);
	assert_int_equal(chmod(path, 0620), 0);
	assert_int_equal(get(json, json_len, &got, &err), -EPERM);
	assert_int_equal(chmod(path, 0600), 0);

	/* A second name for the entry (a hard link someone kept) makes it untrusted. */
	snprintf(alias, sizeof(alias), "%s/../hardlink", cache);
	assert_int_equal(link(path, alias) == 0 ? 0 : errno, 0);
	assert_int_equal(get(json, json_len, &got, &err), -EPERM);
	assert_int_equal(unlink(alias), 0);
	assert_int_equal(get(json, json_len, &got, &err), 0);
	free(got.filter);

	/* A symlink in the entry's place is not followed. */
	snprintf(alias, sizeof(alias), "%s/../moved", cache);
	assert_int_equal(rename(path, alias), 0);
	assert_int_equal(symlink(alias, path), 0);
	assert_int_equal(get(json, json_len, &got, &err), -ELOOP);
	assert_int_equal(unlink(path), 0);
	assert_int_equal(rename(alias, path), 0);

	/* A directory others may write is neither read nor written. */
	assert_int_equal(chmod(cache, 0777), 0);
	assert_int_equal(get(json, json_len, &got, &err), -EPERM);
	assert_int_equal(lb_seccomp_cache_put(cache, json, json_len, &prog, allowed, &err), -EPERM);
	bool hit = true;
	size_t n = 0;
	if (lb_seccomp_compile_json_cached(json, json_len, "seccomp.json", cache, &got, &n, &hit, &err) < 0)
		fail_msg("%s", err.msg);
	assert_false(hit);
	free(got.filter);
	assert_int_equal(chmod(cache, 0700), 0);

	/* An entry of another user (root only: it needs chown). */
	if (geteuid() != 0)
		fail_msg("test_seccomp_cache needs root to check an entry owned by another user");
	assert_int_equal(chown(path, 65534, 65534), 0);
	assert_int_equal(get(json, json_len, &got, &err), -EPERM);
	assert_int_equal(chown(path, 0, 0), 0);
	assert_int_equal(get(json, json_len, &got, &err), 0);
	free(got.filter);
	free(prog.filter);
}

/* The directory stays bounded: storing past 64 entries clears the others. */
static void test_bounded(void **state)
{
	(void)state;
	struct sock_fprog prog;
	size_t allowed = 0;
	fresh_entry(&prog, &allowed);
	char *other = strdup(json);
	assert_non_null(other);
	char *spaces[80];
	size_t n = 0;
	for (char *p = other; *p && n < 80; p++)
		if (*p == ' ')
			spaces[n++] = p;
	assert_int_equal(n, 80);
	struct lb_error err = { 0 };
	for (size_t i = 0; i < 70; i++) {
		*spaces[i] = '\t'; // NOLINT(clang-analyzer-core.NullDereference): n is 80, asserted above
		if (lb_seccomp_cache_put(cache, other, json_len, &prog, allowed, &err) < 0)
			fail_msg("%s", err.msg);
	}
	size_t count = 0;
	DIR *d = opendir(cache);
	struct dirent *de;
	while ((de = readdir(d)))
		count += strncmp(de->d_name, "seccomp-", 8) == 0;
	closedir(d);
	assert_true(count >= 1 && count <= 64);
	/* The newest is there. */
	struct sock_fprog got;
	assert_int_equal(get(other, json_len, &got, &err), 0);
	free(got.filter);
	free(other);
	free(prog.filter);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_roundtrip),	 cmocka_unit_test(test_policy_load_cached),
		cmocka_unit_test(test_other_profile),	 cmocka_unit_test(test_altered_entry),
		cmocka_unit_test(test_other_libseccomp), cmocka_unit_test(test_permissions),
		cmocka_unit_test(test_bounded),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}

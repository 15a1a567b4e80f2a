/* Unit tests for the lb_images import pipeline (store.c, manifest.c, layer.c, resolve.c), run under ASan/UBSan in
 * CI: small OCI layouts are written here with libarchive (gzip layers) and imported into a private store; each
 * hostile case checks the exact errno and that nothing of the failed import remains; names set by several threads at
 * once each point at their own image. Needs root (file owners). */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>
#include <cmocka.h>
#include <openssl/evp.h>

#include "lb/images.h"

struct ent { // NOLINT(clang-analyzer-optin.performance.Padding): a table of test entries, in reading order
	const char *name;
	char type;	  /* f file, d dir, l symlink, h hard link, c char device */
	const char *data; /* file content, or link target */
	unsigned mode;
};

static char tmpdir[] = "/tmp/lb-images-unit-XXXXXX";

static void hex_sha256(const void *p, size_t n, char out[65])
{
	unsigned char md[32];
	unsigned int len = 0;
	EVP_Digest(p, n, md, &len, EVP_sha256(), NULL);
	for (size_t i = 0; i < 32; i++)
		sprintf(out + 2 * i, "%02x", md[i]);
}

/* Writes a tar of ents into *ret (malloc'd), gzip-compressed when gz. */
static size_t make_tar(const struct ent *ents, size_t n, bool gz, char **ret)
{
	size_t cap = 1 << 20, used = 0;
	char *buf = malloc(cap);
	struct archive *a = archive_write_new();
	archive_write_set_format_pax_restricted(a);
	if (gz)
		archive_write_add_filter_gzip(a);
	else
		archive_write_add_filter_none(a);
	archive_write_set_bytes_in_last_block(a, 1);
	assert_int_equal(archive_write_open_memory(a, buf, cap, &used), ARCHIVE_OK);
	for (size_t i = 0; i < n; i++) {
		struct archive_entry *e = archive_entry_new();
		archive_entry_set_pathname(e, ents[i].name);
		archive_entry_set_mtime(e, 1700000000, 0);
		archive_entry_set_perm(e, ents[i].mode ? ents[i].mode : 0644);
		size_t len = 0;
		switch (ents[i].type) {
		case 'f':
			archive_entry_set_filetype(e, AE_IFREG);
			len = ents[i].data ? strlen(ents[i].data) : 0;
			archive_entry_set_size(e, (la_int64_t)len);
			break;
		case 'd':
			archive_entry_set_filetype(e, AE_IFDIR);
			break;
		case 'l':
			archive_entry_set_filetype(e, AE_IFLNK);
			archive_entry_set_symlink(e, ents[i].data);
			break;
		case 'h':
			archive_entry_set_filetype(e, AE_IFREG);
			archive_entry_set_hardlink(e, ents[i].data);
			break;
		case 'c':
			archive_entry_set_filetype(e, AE_IFCHR);
			archive_entry_set_rdev(e, makedev(1, 3));
			break;
		}
		assert_int_equal(archive_write_header(a, e), ARCHIVE_OK);
		if (len)
			archive_write_data(a, ents[i].data, len);
		archive_entry_free(e);
	}
	archive_write_close(a);
	archive_write_free(a);
	*ret = buf;
	return used;
}

static void put_blob(const char *layout, const void *p, size_t n, char hex[65])
{
	char path[512];
	hex_sha256(p, n, hex);
	snprintf(path, sizeof(path), "%s/blobs/sha256/%s", layout, hex);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fwrite(p, 1, n, f);
	fclose(f);
}

/* A one-layer OCI layout at <tmpdir>/<name>; diff_id_override replaces the real diff_id when set; truncate_layer
 * keeps only the first half of the compressed blob (with its digest computed on that half). */
static void make_layout(const char *name, const struct ent *ents, size_t n, const char *diff_id_override,
			bool truncate_layer, char ret_path[static 400])
{
	char layout[400], path[512];
	snprintf(layout, sizeof(layout), "%s/%s", tmpdir, name);
	snprintf(path, sizeof(path), "%s/blobs/sha256", layout);
	mkdir(layout, 0755);
	snprintf(path, sizeof(path), "%s/blobs", layout);
	mkdir(path, 0755);
	snprintf(path, sizeof(path), "%s/blobs/sha256", layout);
	mkdir(path, 0755);

	char *raw, *gz, diff[65], lhex[65], chex[65], mhex[65];
	size_t rawn = make_tar(ents, n, false, &raw);
	size_t gzn = make_tar(ents, n, true, &gz);
	hex_sha256(raw, rawn, diff);
	if (truncate_layer)
		gzn /= 2;
	put_blob(layout, gz, gzn, lhex);
	char cfg[1024];
	int cn = snprintf(cfg, sizeof(cfg),
			  "{\"architecture\":\"%s\",\"os\":\"linux\",\"config\":{\"Env\":[\"PATH=/usr/bin:/bin\"],"
			  "\"WorkingDir\":\"/sandbox\"},\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[\"sha256:%s\"]}}",
#if defined(__x86_64__)
			  "amd64",
#else
			  "arm64",
#endif
			  diff_id_override ? diff_id_override : diff);
	put_blob(layout, cfg, (size_t)cn, chex);
	char man[1024];
	int mn = snprintf(man, sizeof(man),
			  "{\"schemaVersion\":2,\"config\":{\"mediaType\":\"application/vnd.oci.image.config.v1+json\","
			  "\"digest\":\"sha256:%s\",\"size\":%d},\"layers\":[{\"mediaType\":"
			  "\"application/vnd.oci.image.layer.v1.tar+gzip\",\"digest\":\"sha256:%s\",\"size\":%zu}]}",
			  chex, cn, lhex, gzn);
	put_blob(layout, man, (size_t)mn, mhex);
	snprintf(path, sizeof(path), "%s/index.json", layout);
	FILE *f = fopen(path, "w");
	fprintf(f,
		"{\"schemaVersion\":2,\"manifests\":[{\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\","
		"\"digest\":\"sha256:%s\",\"size\":%d}]}",
		mhex, mn);
	fclose(f);
	free(raw);
	free(gz);
	memcpy(ret_path, layout, sizeof(layout));
}

static int count_entries(const char *dir)
{
	char cmd[700];
	snprintf(cmd, sizeof(cmd), "test -z \"$(ls -A %s)\"", dir);
	return system(cmd) == 0 ? 0 : 1;
}

static int import_ents(const char *name, const struct ent *ents, size_t n, const char *diff_override, bool trunc,
		       struct lb_image_limits *limits, struct lb_image_info **ret, struct lb_error *err)
{
	char layout[512], root[512];
	make_layout(name, ents, n, diff_override, trunc, layout);
	snprintf(root, sizeof(root), "%s/store-%s", tmpdir, name);
	struct lb_images *s = NULL;
	assert_int_equal(lb_images_open(root, limits, &s, err), 0);
	int r = lb_image_import(s, layout, NULL, "test:1", ret, err);
	lb_images_free(s);
	if (r < 0) {
		char d[600];
		snprintf(d, sizeof(d), "%s/images", root);
		assert_int_equal(count_entries(d), 0);
		snprintf(d, sizeof(d), "%s/tmp", root);
		assert_int_equal(count_entries(d), 0);
	}
	return r;
}

#define BASE                                                                          \
	{ "usr/bin/python3", 'f', "py", 0755 }, { "usr/bin/bash", 'f', "sh", 04755 }, \
	{                                                                             \
		"bin", 'l', "usr/bin", 0                                              \
	}

static void good_image(void **state)
{
	(void)state;
	const struct ent e[] = { BASE,
				 { "etc/", 'd', NULL, 0755 },
				 { "etc/a", 'f', "hello", 0644 },
				 { "etc/b", 'h', "etc/a", 0 },
				 { "dev/null", 'c', NULL, 0666 } };
	struct lb_image_info *info = NULL;
	struct lb_error err = { 0 };
	assert_int_equal(import_ents("good", e, sizeof(e) / sizeof(e[0]), NULL, false, NULL, &info, &err), 0);
	assert_true(info->has_python3 && info->has_bash);
	assert_null(lb_image_info_warning(info));
	assert_int_equal(info->skipped_special, 1);
	assert_int_equal(info->stripped, 1);
	assert_string_equal(info->working_dir, "/sandbox");
	assert_int_equal(info->n_names, 1);
	assert_string_equal(info->names[0], "docker.io/library/test:1");
	char p[700];
	struct stat st;
	snprintf(p, sizeof(p), "%s/usr/bin/bash", info->rootfs);
	assert_int_equal(stat(p, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0755);
	snprintf(p, sizeof(p), "%s/etc/b", info->rootfs);
	assert_int_equal(stat(p, &st), 0);
	assert_int_equal(st.st_nlink, 2);
	lb_image_info_free(info);
}

static void refusals(void **state)
{
	(void)state;
	struct lb_error err = { 0 };
	const struct ent dotdot[] = { BASE, { "../x", 'f', "x", 0644 } };
	assert_int_equal(import_ents("dotdot", dotdot, 4, NULL, false, NULL, NULL, &err), -EXDEV);
	const struct ent abs[] = { BASE, { "/x", 'f', "x", 0644 } };
	assert_int_equal(import_ents("abs", abs, 4, NULL, false, NULL, NULL, &err), -EXDEV);
	const struct ent dot[] = { BASE, { ".", 'l', "/etc", 0 } };
	assert_int_equal(import_ents("dot", dot, 4, NULL, false, NULL, NULL, &err), -EXDEV);
	const struct ent shadow[] = { BASE, { "s", 'h', "/etc/shadow", 0 } };
	assert_int_equal(import_ents("shadow", shadow, 4, NULL, false, NULL, NULL, &err), -EXDEV);
	const struct ent wh[] = { BASE, { "usr/.wh..", 'f', "", 0644 } };
	assert_int_equal(import_ents("wh", wh, 4, NULL, false, NULL, NULL, &err), -EXDEV);
	assert_int_equal(import_ents("diff", wh, 3, "0000000000000000000000000000000000000000000000000000000000000000",
				     false, NULL, NULL, &err),
			 -EBADMSG);
	assert_non_null(strstr(err.msg, "diff_id"));
	const struct ent big[] = { BASE, { "big", 'f', "0123456789012345678901234567890123456789", 0644 } };
	assert_int_equal(import_ents("trunc", big, 4, NULL, true, NULL, NULL, &err), -EBADMSG);
	struct lb_image_limits l;
	lb_image_limits_default(&l);
	l.max_total_bytes = 10;
	assert_int_equal(import_ents("bytes", big, 4, NULL, false, &l, NULL, &err), -EFBIG);
	lb_image_limits_default(&l);
	l.max_entries = 3;
	assert_int_equal(import_ents("entries", big, 4, NULL, false, &l, NULL, &err), -E2BIG);
}

struct tagger {
	char root[512];
	const char *ref;    /* the image this thread names */
	const char *prefix; /* its names are <prefix>-<k>:1 */
	int failures;
};

static void *tag_many(void *arg)
{
	struct tagger *t = arg;
	struct lb_images *s = NULL;
	struct lb_error err = { 0 };
	if (lb_images_open(t->root, NULL, &s, &err) < 0) {
		t->failures = -1;
		return NULL;
	}
	for (int k = 0; k < 200; k++) {
		char name[64];
		snprintf(name, sizeof(name), "%s-%d:1", t->prefix, k);
		if (lb_image_tag(s, t->ref, name, &err) < 0)
			t->failures++;
	}
	lb_images_free(s);
	return NULL;
}

/* The supervisor imports and tags on several threads, each with its own handle on one store: two images named at the
 * same moment must each get their own names (a shared temporary link name once lost one and misnamed the other). */
static void concurrent_names(void **state)
{
	(void)state;
	const struct ent a[] = { BASE, { "a", 'f', "image a", 0644 } };
	const struct ent b[] = { BASE, { "b", 'f', "image b", 0644 } };
	char la[400], lbuf[400], root[512];
	make_layout("name-a", a, 4, NULL, false, la);
	make_layout("name-b", b, 4, NULL, false, lbuf);
	snprintf(root, sizeof(root), "%s/store-names", tmpdir);
	struct lb_images *s = NULL;
	struct lb_error err = { 0 };
	struct lb_image_info *ia = NULL, *ib = NULL;
	assert_int_equal(lb_images_open(root, NULL, &s, &err), 0);
	assert_int_equal(lb_image_import(s, la, NULL, "a:1", &ia, &err), 0);
	assert_int_equal(lb_image_import(s, lbuf, NULL, "b:1", &ib, &err), 0);
	assert_string_not_equal(ia->config_digest, ib->config_digest);

	struct tagger t[4];
	pthread_t th[4];
	for (int i = 0; i < 4; i++) {
		t[i] = (struct tagger){ .ref = i % 2 ? "b:1" : "a:1",
					.prefix = (const char *[]){ "w", "x", "y", "z" }[i] };
		snprintf(t[i].root, sizeof(t[i].root), "%s", root);
		assert_int_equal(pthread_create(&th[i], NULL, tag_many, &t[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		assert_int_equal(t[i].failures, 0);
	}
	for (int i = 0; i < 4; i++)
		for (int k = 0; k < 200; k++) {
			char name[64];
			struct lb_image_info *got = NULL;
			snprintf(name, sizeof(name), "%s-%d:1", t[i].prefix, k);
			assert_int_equal(lb_image_inspect(s, name, &got, &err), 0);
			assert_string_equal(got->config_digest, (i % 2 ? ib : ia)->config_digest);
			lb_image_info_free(got);
		}
	char d[600];
	snprintf(d, sizeof(d), "test -z \"$(ls -A %s/names | grep '^\\.')\"", root);
	assert_int_equal(system(d), 0); /* no temporary link left behind */
	lb_image_info_free(ia);
	lb_image_info_free(ib);
	lb_images_free(s);
}

/* Inspecting reads image.json once and keeps what it parsed (info_cache.c): a second inspect gives the same info, with
 * the usage records and names as they are now, and an image.json that is another file is read again. */
static void inspect_keeps_up_with_the_store(void **state)
{
	(void)state;
	const struct ent e[] = { BASE, { "c", 'f', "image c", 0644 } };
	char layout[400], root[512];
	make_layout("cache", e, 4, NULL, false, layout);
	snprintf(root, sizeof(root), "%s/store-cache", tmpdir);
	struct lb_images *s = NULL;
	struct lb_error err = { 0 };
	struct lb_image_info *imported = NULL, *a = NULL, *b = NULL, *c = NULL;
	assert_int_equal(lb_images_open(root, NULL, &s, &err), 0);
	assert_int_equal(lb_image_import(s, layout, NULL, "c:1", &imported, &err), 0);
	assert_int_equal(lb_image_inspect(s, "c:1", &a, &err), 0);
	assert_false(a->pinned);
	/* usage and names change between two inspections of the same image.json */
	assert_int_equal(lb_image_pin(s, "c:1", true, &err), 0);
	assert_int_equal(lb_image_tag(s, "c:1", "c:2", &err), 0);
	assert_int_equal(lb_image_inspect(s, "c:1", &b, &err), 0);
	assert_true(b->pinned);
	assert_int_equal(b->n_names, 2);
	assert_string_equal(b->config_digest, a->config_digest);
	assert_string_equal(b->working_dir, a->working_dir);
	assert_string_equal(b->rootfs, a->rootfs);
	assert_int_equal(b->n_env, a->n_env);
	for (size_t i = 0; i < a->n_env; i++)
		assert_string_equal(b->env[i], a->env[i]);
	assert_int_equal(b->imported_at, a->imported_at);
	/* a new image.json (another file, as a re-import makes) is read again */
	char path[700], tmp[720], cmd[1600];
	snprintf(path, sizeof(path), "%s/images/%s/image.json", root, a->config_digest + strlen("sha256:"));
	snprintf(tmp, sizeof(tmp), "%s.new", path);
	snprintf(cmd, sizeof(cmd), "sed 's|\"working_dir\": \"/sandbox\"|\"working_dir\": \"/elsewhere\"|' %s > %s",
		 path, tmp);
	assert_int_equal(system(cmd), 0);
	assert_int_equal(rename(tmp, path), 0);
	assert_int_equal(lb_image_inspect(s, "c:1", &c, &err), 0);
	assert_string_equal(c->working_dir, "/elsewhere");
	lb_image_info_free(imported);
	lb_image_info_free(a);
	lb_image_info_free(b);
	lb_image_info_free(c);
	lb_images_free(s);
}

static int setup(void **state)
{
	(void)state;
	if (geteuid() != 0) {
		fprintf(stderr, "test_import needs root (it keeps file owners)\n");
		return -1;
	}
	return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	char cmd[200];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
	return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(good_image),
		cmocka_unit_test(refusals),
		cmocka_unit_test(concurrent_names),
		cmocka_unit_test(inspect_keeps_up_with_the_store),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}

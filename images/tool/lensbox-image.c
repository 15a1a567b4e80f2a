/*
 * lensbox-image — the admin's front end to the image store: import, ls, inspect, tag, rm.
 *
 * Runs as root (files in the store keep the owners the image gives them). A thin shell over lb_images: it parses
 * arguments, calls the library and prints; every decision lives in the library. The supervisor serves the same
 * operations through its API by calling the library directly.
 *
 *   lensbox-image [--root DIR] [--max-bytes N] [--max-entries N] [--max-path N] COMMAND ...
 *     import FILE|DIR [--name NAME] [--ref REFNAME]   OCI layout (dir or tar) or docker save archive
 *     pull REF [--insecure-registry H]... [--ca-file F] [--credentials F] [--parallel N]
 *     ls [--json]
 *     inspect REF                                     JSON of the image's metadata
 *     tag REF NAME
 *     rm REF
 *     pin REF | unpin REF                             pinned images are never garbage-collected
 *     gc --older-than SECONDS                         remove unpinned images unused that long, and unwanted blobs
 * Exit status: 0 success, 1 operation failed (the message names the step), 2 usage.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <yajl/yajl_gen.h>

#include "lb/images.h"
#include "lb/log.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: lensbox-image [--root DIR] [--max-bytes N] [--max-entries N] [--max-path N] COMMAND ...\n"
		"  import FILE|DIR [--name NAME] [--ref REFNAME]\n"
		"  pull REF [--insecure-registry HOST[:PORT]]... [--ca-file FILE] [--credentials FILE] [--parallel N]\n"
		"  ls [--json]\n"
		"  inspect REF\n"
		"  tag REF NAME\n"
		"  rm REF\n"
		"image root default: " LB_IMAGES_DEFAULT_ROOT " (or $LENSBOX_IMAGE_ROOT)\n");
}

/* Logs a failed operation with the errno's name as a field, so scripts and tests can tell refusals apart. */
static void fail(const char *op, const struct lb_error *err)
{
	char fields[64];
	const char *name = err->code ? strerrorname_np(err->code) : NULL;
	snprintf(fields, sizeof(fields), "errno=%s", name ? name : "EIO");
	lb_error(fields, "%s: %s", op, err->msg);
}

static int parse_u64(const char *s, uint64_t *ret)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s || *end || s[0] == '-')
		return -EINVAL;
	*ret = v;
	return 0;
}

static void gen_s(yajl_gen g, const char *k, const char *v)
{
	yajl_gen_string(g, (const unsigned char *)k, strlen(k));
	yajl_gen_string(g, (const unsigned char *)v, strlen(v));
}

static void gen_u(yajl_gen g, const char *k, uint64_t v)
{
	yajl_gen_string(g, (const unsigned char *)k, strlen(k));
	yajl_gen_integer(g, (long long)v);
}

static void gen_b(yajl_gen g, const char *k, bool v)
{
	yajl_gen_string(g, (const unsigned char *)k, strlen(k));
	yajl_gen_bool(g, v);
}

static void gen_info(yajl_gen g, const struct lb_image_info *i)
{
	yajl_gen_map_open(g);
	gen_s(g, "config_digest", i->config_digest);
	gen_s(g, "manifest_digest", i->manifest_digest);
	yajl_gen_string(g, (const unsigned char *)"names", 5);
	yajl_gen_array_open(g);
	for (size_t k = 0; k < i->n_names; k++)
		yajl_gen_string(g, (const unsigned char *)i->names[k], strlen(i->names[k]));
	yajl_gen_array_close(g);
	gen_s(g, "rootfs", i->rootfs);
	gen_s(g, "architecture", i->architecture);
	gen_s(g, "variant", i->variant);
	gen_s(g, "os", i->os);
	yajl_gen_string(g, (const unsigned char *)"env", 3);
	yajl_gen_array_open(g);
	for (size_t k = 0; k < i->n_env; k++)
		yajl_gen_string(g, (const unsigned char *)i->env[k], strlen(i->env[k]));
	yajl_gen_array_close(g);
	gen_s(g, "working_dir", i->working_dir);
	gen_u(g, "size_bytes", i->size_bytes);
	gen_u(g, "entries", i->entries);
	gen_u(g, "skipped_special", i->skipped_special);
	gen_u(g, "stripped", i->stripped);
	gen_b(g, "has_python3", i->has_python3);
	gen_b(g, "has_bash", i->has_bash);
	const char *w = lb_image_info_warning(i);
	gen_s(g, "warning", w ? w : "");
	gen_u(g, "imported_at", (uint64_t)i->imported_at);
	gen_u(g, "last_used", (uint64_t)i->last_used);
	gen_b(g, "pinned", i->pinned);
	yajl_gen_map_close(g);
}

static void print_json(struct lb_image_info **list, size_t n, bool array)
{
	yajl_gen g = yajl_gen_alloc(NULL);
	if (!g)
		return;
	yajl_gen_config(g, yajl_gen_beautify, 1);
	if (array)
		yajl_gen_array_open(g);
	for (size_t i = 0; i < n; i++)
		gen_info(g, list[i]);
	if (array)
		yajl_gen_array_close(g);
	const unsigned char *buf;
	size_t len;
	if (yajl_gen_get_buf(g, &buf, &len) == yajl_gen_status_ok)
		fwrite(buf, 1, len, stdout);
	yajl_gen_free(g);
}

/* One line per finished blob; on a terminal, a progress line per blob that rewrites itself. */
static void progress(const char *hex, uint64_t done, uint64_t total, void *ud)
{
	bool tty = *(bool *)ud;
	if (tty)
		fprintf(stderr, "\r%.12s %6.1f / %6.1f MB%s", hex, (double)done / 1e6, (double)total / 1e6,
			done == total ? "\n" : "");
	else if (done == total)
		fprintf(stderr, "blob %.12s: %" PRIu64 " bytes\n", hex, total);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "root", required_argument, NULL, 'r' },
		{ "max-bytes", required_argument, NULL, 'b' },
		{ "max-entries", required_argument, NULL, 'e' },
		{ "max-path", required_argument, NULL, 'p' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *root = getenv("LENSBOX_IMAGE_ROOT");
	if (!root || !*root)
		root = LB_IMAGES_DEFAULT_ROOT;
	struct lb_image_limits limits;
	lb_image_limits_default(&limits);
	int c;
	while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
		uint64_t v = 0;
		switch (c) {
		case 'r':
			root = optarg;
			break;
		case 'b':
		case 'e':
		case 'p':
			if (parse_u64(optarg, &v) < 0 || v == 0) {
				fprintf(stderr, "lensbox-image: invalid number '%s'\n", optarg);
				return 2;
			}
			if (c == 'b')
				limits.max_total_bytes = v;
			else if (c == 'e')
				limits.max_entries = v;
			else
				limits.max_path_len = v;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind >= argc) {
		usage(stderr);
		return 2;
	}
	const char *cmd = argv[optind++];
	struct lb_error err = { 0 };
	struct lb_images *s = NULL;
	int r = lb_images_open(root, &limits, &s, &err);
	if (r < 0) {
		fail("open", &err);
		return 1;
	}

	int status = 0;
	if (!strcmp(cmd, "import")) {
		const char *file = NULL, *name = NULL, *ref = NULL;
		for (int i = optind; i < argc; i++) {
			if (!strcmp(argv[i], "--name") && i + 1 < argc)
				name = argv[++i];
			else if (!strcmp(argv[i], "--ref") && i + 1 < argc)
				ref = argv[++i];
			else if (!file && argv[i][0] != '-')
				file = argv[i];
			else {
				usage(stderr);
				status = 2;
				goto done;
			}
		}
		if (!file) {
			usage(stderr);
			status = 2;
			goto done;
		}
		struct lb_image_info *info = NULL;
		r = lb_image_import(s, file, ref, name, &info, &err);
		if (r < 0) {
			fail("import", &err);
			status = 1;
			goto done;
		}
		const char *w = lb_image_info_warning(info);
		if (w)
			lb_warn(NULL, "%s", w);
		printf("%s %s\n", info->config_digest, info->rootfs);
		lb_image_info_free(info);
	} else if (!strcmp(cmd, "pull") && optind < argc) {
		const char *ref = argv[optind];
		const char *insecure[17] = { 0 };
		size_t n_insecure = 0;
		bool tty = isatty(STDERR_FILENO);
		struct lb_pull_opts po = { .progress = progress, .progress_ud = &tty };
		for (int i = optind + 1; i < argc; i++) {
			uint64_t v = 0;
			if (!strcmp(argv[i], "--insecure-registry") && i + 1 < argc && n_insecure < 16)
				insecure[n_insecure++] = argv[++i];
			else if (!strcmp(argv[i], "--ca-file") && i + 1 < argc)
				po.ca_file = argv[++i];
			else if (!strcmp(argv[i], "--credentials") && i + 1 < argc)
				po.credentials_file = argv[++i];
			else if (!strcmp(argv[i], "--parallel") && i + 1 < argc && parse_u64(argv[++i], &v) == 0 &&
				 v > 0 && v <= 16)
				po.max_parallel = (unsigned)v;
			else {
				usage(stderr);
				status = 2;
				goto done;
			}
		}
		po.insecure_registries = insecure;
		struct lb_image_info *info = NULL;
		r = lb_image_pull(s, ref, &po, &info, &err);
		if (r < 0) {
			fail("pull", &err);
			status = 1;
			goto done;
		}
		const char *w = lb_image_info_warning(info);
		if (w)
			lb_warn(NULL, "%s", w);
		printf("%s %s\n", info->config_digest, info->rootfs);
		lb_image_info_free(info);
	} else if (!strcmp(cmd, "ls")) {
		bool json = optind < argc && !strcmp(argv[optind], "--json");
		struct lb_image_info **list = NULL;
		size_t n = 0;
		r = lb_image_list(s, &list, &n, &err);
		if (r < 0) {
			fail("ls", &err);
			status = 1;
			goto done;
		}
		if (json) {
			print_json(list, n, true);
		} else {
			printf("%-50s %-19s %10s %s\n", "NAME", "DIGEST", "SIZE", "PINNED");
			for (size_t i = 0; i < n; i++) {
				const char *short_digest = list[i]->config_digest;
				for (size_t k = 0; k < (list[i]->n_names ? list[i]->n_names : 1); k++)
					printf("%-50s %-19.19s %8.1fMB %s\n",
					       list[i]->n_names ? list[i]->names[k] : "<none>", short_digest,
					       (double)list[i]->size_bytes / 1e6, list[i]->pinned ? "yes" : "");
			}
		}
		lb_image_list_free(list, n);
	} else if (!strcmp(cmd, "inspect") && optind + 1 == argc) {
		struct lb_image_info *info = NULL;
		r = lb_image_inspect(s, argv[optind], &info, &err);
		if (r < 0) {
			fail("inspect", &err);
			status = 1;
			goto done;
		}
		print_json(&info, 1, false);
		lb_image_info_free(info);
	} else if (!strcmp(cmd, "tag") && optind + 2 == argc) {
		r = lb_image_tag(s, argv[optind], argv[optind + 1], &err);
		if (r < 0) {
			fail("tag", &err);
			status = 1;
		}
	} else if ((!strcmp(cmd, "pin") || !strcmp(cmd, "unpin")) && optind + 1 == argc) {
		r = lb_image_pin(s, argv[optind], !strcmp(cmd, "pin"), &err);
		if (r < 0) {
			fail(cmd, &err);
			status = 1;
		}
	} else if (!strcmp(cmd, "gc") && optind + 2 == argc && !strcmp(argv[optind], "--older-than")) {
		uint64_t secs = 0;
		size_t removed = 0;
		if (parse_u64(argv[optind + 1], &secs) < 0) {
			usage(stderr);
			status = 2;
			goto done;
		}
		/* Without the daemon this tool cannot know which sandboxes run: lensboxd's timer passes in_use. */
		r = lb_image_gc(s, secs, NULL, NULL, &removed, &err);
		if (r < 0) {
			fail("gc", &err);
			status = 1;
			goto done;
		}
		printf("removed %zu image(s)\n", removed);
	} else if (!strcmp(cmd, "rm") && optind + 1 == argc) {
		/* Without the daemon this tool cannot know which sandboxes run: lensboxd's API checks in-use. */
		r = lb_image_remove(s, argv[optind], NULL, NULL, &err);
		if (r < 0) {
			fail("rm", &err);
			status = 1;
		}
	} else {
		usage(stderr);
		status = 2;
	}
done:
	lb_images_free(s);
	return status;
}

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

/* Each command gets the arguments after its name (argc may be 0) and returns the exit status. */

/* What import and pull print once an image is in the store: its warning (if any), then "<config digest> <rootfs>". */
static int print_stored(struct lb_image_info *info)
{
	const char *w = lb_image_info_warning(info);
	if (w)
		lb_warn(NULL, "%s", w);
	printf("%s %s\n", info->config_digest, info->rootfs);
	lb_image_info_free(info);
	return 0;
}

static int cmd_import(struct lb_images *s, const char *cmd, int argc, char **argv)
{
	const char *file = NULL, *name = NULL, *ref = NULL;
	for (int i = 0; i < argc; i++) {
		if (!strcmp(argv[i], "--name") && i + 1 < argc)
			name = argv[++i];
		else if (!strcmp(argv[i], "--ref") && i + 1 < argc)
			ref = argv[++i];
		else if (!file && argv[i][0] != '-')
			file = argv[i];
		else {
			usage(stderr);
			return 2;
		}
	}
	if (!file) {
		usage(stderr);
		return 2;
	}
	struct lb_error err = { 0 };
	struct lb_image_info *info = NULL;
	if (lb_image_import(s, file, ref, name, &info, &err) < 0) {
		fail(cmd, &err);
		return 1;
	}
	return print_stored(info);
}

static int cmd_pull(struct lb_images *s, const char *cmd, int argc, char **argv)
{
	if (argc < 1) {
		usage(stderr);
		return 2;
	}
	const char *ref = argv[0];
	const char *insecure[17] = { 0 };
	size_t n_insecure = 0;
	bool tty = isatty(STDERR_FILENO);
	struct lb_pull_opts po = { .progress = progress, .progress_ud = &tty };
	for (int i = 1; i < argc; i++) {
		uint64_t v = 0;
		if (!strcmp(argv[i], "--insecure-registry") && i + 1 < argc && n_insecure < 16)
			insecure[n_insecure++] = argv[++i];
		else if (!strcmp(argv[i], "--ca-file") && i + 1 < argc)
			po.ca_file = argv[++i];
		else if (!strcmp(argv[i], "--credentials") && i + 1 < argc)
			po.credentials_file = argv[++i];
		else if (!strcmp(argv[i], "--parallel") && i + 1 < argc && parse_u64(argv[++i], &v) == 0 && v > 0 &&
			 v <= 16)
			po.max_parallel = (unsigned)v;
		else {
			usage(stderr);
			return 2;
		}
	}
	po.insecure_registries = insecure;
	struct lb_error err = { 0 };
	struct lb_image_info *info = NULL;
	if (lb_image_pull(s, ref, &po, &info, &err) < 0) {
		fail(cmd, &err);
		return 1;
	}
	return print_stored(info);
}

static int cmd_ls(struct lb_images *s, const char *cmd, int argc, char **argv)
{
	bool json = argc > 0 && !strcmp(argv[0], "--json");
	struct lb_error err = { 0 };
	struct lb_image_info **list = NULL;
	size_t n = 0;
	if (lb_image_list(s, &list, &n, &err) < 0) {
		fail(cmd, &err);
		return 1;
	}
	if (json) {
		print_json(list, n, true);
	} else {
		printf("%-50s %-19s %10s %s\n", "NAME", "DIGEST", "SIZE", "PINNED");
		for (size_t i = 0; i < n; i++) {
			const char *short_digest = list[i]->config_digest;
			for (size_t k = 0; k < (list[i]->n_names ? list[i]->n_names : 1); k++)
				printf("%-50s %-19.19s %8.1fMB %s\n", list[i]->n_names ? list[i]->names[k] : "<none>",
				       short_digest, (double)list[i]->size_bytes / 1e6, list[i]->pinned ? "yes" : "");
		}
	}
	lb_image_list_free(list, n);
	return 0;
}

static int cmd_inspect(struct lb_images *s, const char *cmd, int argc, char **argv)
{
	if (argc != 1) {
		usage(stderr);
		return 2;
	}
	struct lb_error err = { 0 };
	struct lb_image_info *info = NULL;
	if (lb_image_inspect(s, argv[0], &info, &err) < 0) {
		fail(cmd, &err);
		return 1;
	}
	print_json(&info, 1, false);
	lb_image_info_free(info);
	return 0;
}

static int cmd_tag(struct lb_images *s, const char *cmd, int argc, char **argv)
{
	if (argc != 2) {
		usage(stderr);
		return 2;
	}
	struct lb_error err = { 0 };
	if (lb_image_tag(s, argv[0], argv[1], &err) < 0) {
		fail(cmd, &err);
		return 1;
	}
	return 0;
}

static int cmd_pin(struct lb_images *s, const char *cmd, int argc, char **argv)
{
	if (argc != 1) {
		usage(stderr);
		return 2;
	}
	struct lb_error err = { 0 };
	if (lb_image_pin(s, argv[0], !strcmp(cmd, "pin"), &err) < 0) {
		fail(cmd, &err);
		return 1;
	}
	return 0;
}

static int cmd_gc(struct lb_images *s, const char *cmd, int argc, char **argv)
{
	uint64_t secs = 0;
	if (argc != 2 || strcmp(argv[0], "--older-than") != 0 || parse_u64(argv[1], &secs) < 0) {
		usage(stderr);
		return 2;
	}
	/* Without the daemon this tool cannot know which sandboxes run: lensboxd's timer passes in_use. */
	struct lb_error err = { 0 };
	size_t removed = 0;
	if (lb_image_gc(s, secs, NULL, NULL, &removed, &err) < 0) {
		fail(cmd, &err);
		return 1;
	}
	printf("removed %zu image(s)\n", removed);
	return 0;
}

static int cmd_rm(struct lb_images *s, const char *cmd, int argc, char **argv)
{
	if (argc != 1) {
		usage(stderr);
		return 2;
	}
	/* Without the daemon this tool cannot know which sandboxes run: lensboxd's API checks in-use. */
	struct lb_error err = { 0 };
	if (lb_image_remove(s, argv[0], NULL, NULL, &err) < 0) {
		fail(cmd, &err);
		return 1;
	}
	return 0;
}

static const struct command {
	const char *name;
	int (*run)(struct lb_images *s, const char *cmd, int argc, char **argv);
} commands[] = {
	{ "import", cmd_import },   { "pull", cmd_pull }, { "ls", cmd_ls },
	{ "inspect", cmd_inspect }, { "tag", cmd_tag },	  { "pin", cmd_pin },
	{ "unpin", cmd_pin },	    { "gc", cmd_gc },	  { "rm", cmd_rm },
};

/* The global options, before the command: the store's root and its limits. Returns -1 to go on, else the exit
 * status. */
static int parse_options(int argc, char **argv, const char **root, struct lb_image_limits *limits)
{
	static const struct option opts[] = {
		{ "root", required_argument, NULL, 'r' },
		{ "max-bytes", required_argument, NULL, 'b' },
		{ "max-entries", required_argument, NULL, 'e' },
		{ "max-path", required_argument, NULL, 'p' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c;
	while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
		uint64_t v = 0;
		switch (c) {
		case 'r':
			*root = optarg;
			break;
		case 'b':
		case 'e':
		case 'p':
			if (parse_u64(optarg, &v) < 0 || v == 0) {
				fprintf(stderr, "lensbox-image: invalid number '%s'\n", optarg);
				return 2;
			}
			if (c == 'b')
				limits->max_total_bytes = v;
			else if (c == 'e')
				limits->max_entries = v;
			else
				limits->max_path_len = v;
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
	return -1;
}

int main(int argc, char **argv)
{
	const char *root = getenv("LENSBOX_IMAGE_ROOT");
	if (!root || !*root)
		root = LB_IMAGES_DEFAULT_ROOT;
	struct lb_image_limits limits;
	lb_image_limits_default(&limits);
	int status = parse_options(argc, argv, &root, &limits);
	if (status >= 0)
		return status;
	const char *cmd = argv[optind++];
	struct lb_error err = { 0 };
	struct lb_images *s = NULL;
	if (lb_images_open(root, &limits, &s, &err) < 0) {
		fail("open", &err);
		return 1;
	}
	status = -1;
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (!strcmp(cmd, commands[i].name))
			status = commands[i].run(s, cmd, argc - optind, argv + optind);
	if (status < 0) {
		usage(stderr);
		status = 2;
	}
	lb_images_free(s);
	return status;
}

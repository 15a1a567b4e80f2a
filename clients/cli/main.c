/*
 * main.c — `lensbox`, the command-line client of lensboxd: run code in a sandbox, list and inspect sandboxes, stop
 * and remove them, list and copy files, read the run ledger and the daemon's health.
 *
 * Runs with the invoking user's privileges (the socket's mode and lensboxd's allowed_uids decide who may use it);
 * it holds no privilege of its own. Each command is one or two API requests (docs/api.md) and a presentation of the
 * answer: aligned tables and sizes/times people read by default, the daemon's JSON verbatim with --json. Everything
 * shown that came from a sandbox goes through lbc_term_safe() except a run's own stdout/stderr, which are passed
 * through as the program wrote them (they are valid UTF-8: lensboxd replaced anything else).
 *
 * Exit status: `run` exits with the program's status (124 when it hit its time limit, 128+N when killed by signal N,
 * 125 when lensbox itself failed); the other commands exit 0 on success, 1 on failure, 2 on a usage error;
 * `health` exits 1 when the host cannot run sandboxes.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <yajl/yajl_gen.h>

#include "client.h"
#include "doctor.h"
#include "format.h"
#include "image.h"
#include "policy_cmd.h"
#include "lb/name.h"
#include "lb/cleanup.h"
#include "lb/fileio.h"

#ifndef LENSBOX_POLICY_DIR
#define LENSBOX_POLICY_DIR "/etc/lensbox/policy"
#endif
#ifndef LENSBOX_CONFIG_FILE
#define LENSBOX_CONFIG_FILE "/etc/lensbox/lensboxd.conf"
#endif
#define EXIT_USAGE	 2
#define EXIT_RUN_FAILED	 125
#define EXIT_TIMED_OUT	 124
#define SOURCE_MAX	 (1u << 20)
#define FILE_MAX	 (25u << 20)
#define JSON_MAX	 (64u << 20)
#define RUN_HTTP_GRACE_S 300

struct opts {
	const char *socket;
	bool json;
	const char *python;
	const char *bash;
	long timeout;	   /* 0: the daemon's default */
	long output_limit; /* 0: the daemon's default */
	long limit;	   /* runs */
	const char *image, *network, *cpu, *memory;
	bool top_only;			     /* files: not recursive */
	const char *name;		     /* image import --name */
	bool no_nft;			     /* policy check --no-nft */
	const char *config, *docker_profile; /* policy diff --config, policy explain --docker-profile */
};

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static const char usage_text[] =
    "Usage: lensbox [--socket PATH] [--json] COMMAND ...\n"
    "\n"
    "  run NAME --python CODE | --bash SCRIPT | FILE   run code in sandbox NAME (created/started as needed)\n"
    "      [--timeout S] [--output-limit N] [--image REF] [--network off|packages|web] [--cpu C] [--memory M]\n"
    "      CODE or SCRIPT '-' reads it from standard input; FILE ending .py runs Python, .sh/.bash bash\n"
    "  ls                               list sandboxes\n"
    "  inspect NAME                     show one sandbox\n"
    "  stop NAME                        stop it now (its files stay)\n"
    "  rm NAME                          stop it and delete it with its files\n"
    "  files NAME [DIR] [--top]         list its files (recursively unless --top)\n"
    "  cp LOCAL NAME:PATH               copy a file in (at most 25 MiB; LOCAL '-' is standard input)\n"
    "  cp NAME:PATH LOCAL               copy a file out (LOCAL '-' is standard output)\n"
    "  runs [NAME] [--limit N]          the run ledger, newest first\n"
    "  health                           can this host run sandboxes? (exit 1 when not)\n"
    "  image pull REF                   pull an image from its registry into lensboxd's store\n"
    "  image import FILE [--name NAME]  import an OCI layout (directory or tar) or docker save archive\n"
    "  image ls                         list images: names, digest, size, sandboxes using each\n"
    "  image inspect REF                show one image (REF: a name, sha256:DIGEST or a 12+ digit prefix)\n"
    "  image rm REF                     remove it (refused while a sandbox uses it)\n"
    "  policy check [DIR] [--no-nft]    parse every policy file as lensboxd would: file:line: reason (exit 1)\n"
    "  policy explain [DIR] [--docker-profile FILE]\n"
    "                                   the seccomp allowlist against Docker's default, Landlock, limits,\n"
    "                                   each network tier's egress in words\n"
    "  policy diff [DIR] [--config FILE]  the live nftables table inet lensbox against the files (exit 1\n"
    "                                   on drift; root); DIR defaults to " LENSBOX_POLICY_DIR "\n"
    "                                   policy commands need no lensboxd\n"
    "  doctor [--config FILE]           can this host run lensboxd? checked without it (exit 0 all ok,\n"
    "                                   1 a blocking failure, 3 warnings only); FILE defaults to\n"
    "                                   " LENSBOX_CONFIG_FILE "\n"
    "\n"
    "  --socket PATH   lensboxd's socket (default $LENSBOX_SOCKET or " LBC_DEFAULT_SOCKET ")\n"
    "  --json          print lensboxd's JSON answer instead of a table\n"
    "\n"
    "`run` exits with the program's status: 124 when it hit its time limit, 128+N when killed by signal N,\n"
    "125 when lensbox could not run it. Other commands exit 1 on failure, 2 on a usage error.\n";

static void usage(FILE *f)
{
	fputs(usage_text, f);
}

/* `lensbox COMMAND --help`: the lines of the usage text about COMMAND (its line, "  COMMAND ...", and the more
 * deeply indented lines under it), so the two cannot differ. 0, or 2 for a command the text does not list. */
static int command_usage(const char *cmd)
{
	size_t cl = strlen(cmd);
	bool in = false, found = false;
	for (const char *line = usage_text; *line;) {
		const char *nl = strchr(line, '\n');
		size_t len = nl ? (size_t)(nl - line) : strlen(line);
		bool starts = len > 2 && line[0] == ' ' && line[1] == ' ' && line[2] != ' ';
		if (starts)
			in = strncmp(line + 2, cmd, cl) == 0 && (line[2 + cl] == ' ' || line[2 + cl] == '\n');
		else if (len == 0 || line[0] != ' ')
			in = false;
		if (in) {
			if (!found)
				fputs("Usage: lensbox [--socket PATH] [--json]\n", stdout);
			found = true;
			printf("%.*s\n", (int)len, line);
		}
		line += len + (nl ? 1 : 0);
	}
	if (!found) {
		fprintf(stderr, "lensbox: unknown command `%s`\nTry `lensbox --help`.\n", cmd);
		return 2;
	}
	return 0;
}

__attribute__((format(printf, 1, 2))) static int usage_error(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("lensbox: ", stderr);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs("\nTry `lensbox --help`.\n", stderr);
	return EXIT_USAGE;
}

static int fail_response(const struct lbc_response *res)
{
	_cleanup_free_ char *safe = lbc_term_safe(res->error, strlen(res->error), false);
	fprintf(stderr, "lensbox: %s (%s)\n", safe ? safe : res->error, res->code[0] ? res->code : "error");
	return 1;
}

/* GET path into res; prints the JSON and returns 1 (handled) under --json, 0 to continue, -1 on failure. */
static int get(const struct opts *o, const char *path, struct lbc_response *res)
{
	struct lbc_request req = { .method = "GET", .path = path, .max_response = JSON_MAX, .timeout_seconds = 60 };
	if (lbc_http(o->socket, &req, res) < 0)
		return -1;
	if (o->json) {
		fwrite(res->body ? res->body : "", 1, res->len, stdout);
		fputc('\n', stdout);
		return 1;
	}
	return 0;
}

/* GETs path and finds the array `key` in lensboxd's answer. Returns true with *ret_root and *ret_list set (the
 * caller frees root with yajl_tree_free and res with lbc_response_free); false when the command is over, with
 * everything released and its exit status in *ret_status (0 after --json printed the answer). */
static bool get_list(const struct opts *o, const char *path, const char *key, struct lbc_response *res,
		     yajl_val *ret_root, yajl_val *ret_list, int *ret_status)
{
	int r = get(o, path, res);
	if (r != 0) {
		*ret_status = r < 0 ? fail_response(res) : 0;
		lbc_response_free(res);
		return false;
	}
	yajl_val root = lbc_json(res);
	yajl_val list = lbc_jget(root, key);
	if (!root || !list || !YAJL_IS_ARRAY(list)) {
		if (root)
			snprintf(res->error, sizeof(res->error), "lensboxd's answer has no %s list", key);
		*ret_status = fail_response(res);
		yajl_tree_free(root);
		lbc_response_free(res);
		return false;
	}
	*ret_root = root;
	*ret_list = list;
	return true;
}

/* ---- reading local input ---- */

static int read_path(const char *path, size_t max, char **ret, size_t *ret_len)
{
	if (strcmp(path, "-") == 0)
		return lb_read_fd(STDIN_FILENO, max, ret, ret_len);
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0)
		return -errno;
	struct stat st;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (S_ISDIR(st.st_mode))
		return -EISDIR;
	if (S_ISREG(st.st_mode) && (uint64_t)st.st_size > max)
		return -EFBIG;
	return lb_read_fd(fd, max, ret, ret_len);
}

/* ---- run ---- */

static const char *language_of_file(const char *path, const char *source)
{
	const char *dot = strrchr(path, '.');
	if (dot && strcmp(dot, ".py") == 0)
		return "python";
	if (dot && (strcmp(dot, ".sh") == 0 || strcmp(dot, ".bash") == 0))
		return "bash";
	if (strncmp(source, "#!", 2) == 0) {
		const char *eol = strchr(source, '\n');
		size_t n = eol ? (size_t)(eol - source) : strlen(source);
		if (memmem(source, n, "python", 6))
			return "python";
		if (memmem(source, n, "bash", 4) || memmem(source, n, "/sh", 3))
			return "bash";
	}
	return NULL;
}

static void gen_str(yajl_gen g, const char *k, const char *v)
{
	yajl_gen_string(g, (const unsigned char *)k, strlen(k));
	yajl_gen_string(g, (const unsigned char *)v, strlen(v));
}

static void gen_int(yajl_gen g, const char *k, long v)
{
	yajl_gen_string(g, (const unsigned char *)k, strlen(k));
	yajl_gen_integer(g, v);
}

static int run_exit_status(yajl_val r)
{
	if (lbc_jbool(r, "timed_out"))
		return EXIT_TIMED_OUT;
	yajl_val code = lbc_jget(r, "exit_code");
	if (code && YAJL_IS_INTEGER(code)) {
		long long c = YAJL_GET_INTEGER(code);
		return c >= 0 && c <= 255 ? (int)c : 1;
	}
	int64_t sig = lbc_jint(r, "signal", 0);
	if (sig > 0 && sig < 128)
		return 128 + (int)sig;
	return EXIT_RUN_FAILED;
}

static int cmd_run(const struct opts *o, int argc, char **argv)
{
	if (argc < 1)
		return usage_error("run needs a sandbox NAME");
	const char *name = argv[0];
	if (!lb_sandbox_name_valid(name))
		return usage_error(
		    "`%s` is not a sandbox name (a-z 0-9 . _ -, at most 63, starting with a letter or digit)", name);
	int given = (o->python != NULL) + (o->bash != NULL) + (argc > 1);
	if (given != 1 || argc > 2)
		return usage_error("run takes exactly one of --python CODE, --bash SCRIPT or a FILE");

	const char *language;
	_cleanup_free_ char *source = NULL;
	size_t source_len = 0;
	const char *from = o->python ? o->python : o->bash ? o->bash : argv[1];
	bool from_file = argc > 1 || strcmp(from, "-") == 0;
	if (from_file) {
		int r = read_path(from, SOURCE_MAX, &source, &source_len);
		if (r == -EFBIG) {
			fprintf(stderr, "lensbox: %s is larger than 1 MiB, the most a run takes\n", from);
			return EXIT_RUN_FAILED;
		}
		if (r < 0) {
			fprintf(stderr, "lensbox: reading %s: %s\n", strcmp(from, "-") ? from : "standard input",
				strerror(-r));
			return EXIT_RUN_FAILED;
		}
		// NOLINTNEXTLINE(clang-analyzer-core.NonNullParamChecker): read_path() sets source when it returns 0
		if (memchr(source, '\0', source_len)) {
			fprintf(stderr, "lensbox: %s holds a NUL byte; a source is text\n", from);
			return EXIT_RUN_FAILED;
		}
	} else {
		source = strdup(from);
		if (!source)
			return EXIT_RUN_FAILED;
		source_len = strlen(source);
	}
	if (o->python)
		language = "python";
	else if (o->bash)
		language = "bash";
	else if (!(language = language_of_file(argv[1], source)))
		return usage_error(
		    "cannot tell the language of %s: name it .py or .sh, or use --python - / --bash - < FILE", argv[1]);

	yajl_gen g = yajl_gen_alloc(NULL);
	if (!g)
		return EXIT_RUN_FAILED; // NOLINT(clang-analyzer-unix.Malloc): source is _cleanup_free_
	yajl_gen_config(g, yajl_gen_validate_utf8, 1);
	yajl_gen_map_open(g);
	gen_str(g, "language", language);
	yajl_gen_string(g, (const unsigned char *)"source", 6);
	if (yajl_gen_string(g, (const unsigned char *)source, source_len) != yajl_gen_status_ok) {
		yajl_gen_free(g);
		fprintf(stderr, "lensbox: the source is not valid UTF-8\n");
		return EXIT_RUN_FAILED;
	}
	if (o->timeout)
		gen_int(g, "timeout_seconds", o->timeout);
	if (o->output_limit)
		gen_int(g, "output_limit", o->output_limit);
	if (o->image || o->network || o->cpu || o->memory) {
		yajl_gen_string(g, (const unsigned char *)"sandbox", 7);
		yajl_gen_map_open(g);
		if (o->image)
			gen_str(g, "image", o->image);
		if (o->network)
			gen_str(g, "network", o->network);
		if (o->cpu)
			gen_str(g, "cpu", o->cpu);
		if (o->memory)
			gen_str(g, "memory", o->memory);
		yajl_gen_map_close(g);
	}
	yajl_gen_map_close(g);
	const unsigned char *body;
	size_t body_len;
	yajl_gen_get_buf(g, &body, &body_len);

	char path[128];
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/runs", name);
	struct lbc_request req = { .method = "POST",
				   .path = path,
				   .body = body,
				   .body_len = body_len,
				   .content_type = "application/json",
				   .max_response = JSON_MAX,
				   .timeout_seconds = (o->timeout ? o->timeout : 600) + RUN_HTTP_GRACE_S };
	struct lbc_response res;
	int r = lbc_http(o->socket, &req, &res);
	yajl_gen_free(g);
	if (r < 0) {
		fail_response(&res);
		lbc_response_free(&res);
		return EXIT_RUN_FAILED;
	}
	yajl_val result = lbc_json(&res);
	if (!result) {
		fail_response(&res);
		lbc_response_free(&res);
		return EXIT_RUN_FAILED;
	}
	int status = run_exit_status(result);
	if (o->json) {
		fwrite(res.body, 1, res.len, stdout);
		fputc('\n', stdout);
	} else {
		/* the program's own output, as it wrote it */
		const char *out = lbc_jstr(result, "stdout", "");
		const char *err = lbc_jstr(result, "stderr", "");
		fputs(out, stdout);
		fflush(stdout);
		fputs(err, stderr);
		char a[32], b[32];
		if (lbc_jbool(result, "stdout_truncated"))
			fprintf(stderr, "lensbox: stdout was cut to its start (%s written in all)\n",
				lbc_format_bytes((uint64_t)lbc_jint(result, "stdout_bytes", 0), a, sizeof(a)));
		if (lbc_jbool(result, "stderr_truncated"))
			fprintf(stderr, "lensbox: stderr was cut to its end (%s written in all)\n",
				lbc_format_bytes((uint64_t)lbc_jint(result, "stderr_bytes", 0), b, sizeof(b)));
		const char *recreated = lbc_jstr(result, "recreated", NULL);
		if (recreated) {
			_cleanup_free_ char *safe = lbc_term_safe(recreated, strlen(recreated), false);
			fprintf(stderr, "lensbox: a fresh sandbox: %s\n", safe ? safe : "");
		}
		/* the daemon's sentence for the model; a plain non-zero exit already shows in our exit status */
		const char *message = lbc_jstr(result, "message", NULL);
		yajl_val code = lbc_jget(result, "exit_code");
		bool plain_exit = code && YAJL_IS_INTEGER(code) && !lbc_jbool(result, "timed_out") &&
				  !lbc_jbool(result, "oom_killed") && !lbc_jbool(result, "pids_limited");
		if (message && !plain_exit) {
			_cleanup_free_ char *safe = lbc_term_safe(message, strlen(message), false);
			fprintf(stderr, "lensbox: %s\n", safe ? safe : "");
		}
	}
	yajl_tree_free(result);
	lbc_response_free(&res);
	return status;
}

/* ---- sandboxes ---- */

static const char *spec_str(yajl_val sb, const char *key, char *buf, size_t size)
{
	yajl_val spec = lbc_jget(sb, "spec");
	yajl_val v = lbc_jget(spec, key);
	if (!v)
		return "-";
	if (YAJL_IS_STRING(v))
		return YAJL_GET_STRING(v);
	if (YAJL_IS_INTEGER(v))
		snprintf(buf, size, "%lld", YAJL_GET_INTEGER(v));
	else if (YAJL_IS_DOUBLE(v))
		snprintf(buf, size, "%g", YAJL_GET_DOUBLE(v));
	else
		return "-";
	return buf;
}

static const char *when(yajl_val obj, const char *key, int64_t now, char *buf, size_t size)
{
	int64_t t;
	const char *s = lbc_jstr(obj, key, NULL);
	if (!s || lbc_parse_time_ms(s, &t) < 0)
		return "-";
	return lbc_format_relative(t, now, buf, size);
}

static int cmd_ls(const struct opts *o, int argc, char **argv)
{
	(void)argv;
	if (argc != 0)
		return usage_error("ls takes no arguments");
	struct lbc_response res;
	yajl_val root, list;
	int status;
	if (!get_list(o, "/v1/sandboxes", "sandboxes", &res, &root, &list, &status))
		return status;
	static const char *const headers[] = { "NAME",	 "STATE", "IMAGE",     "NETWORK", "CPU",
					       "MEMORY", "RUNS",  "LAST USED", "STOPS",	  "DELETES" };
	static const bool right[] = { false, false, false, false, true, true, true, false, false, false };
	struct lbc_table *t = lbc_table_new(10, headers, right);
	if (!t)
		return 1;
	int64_t now = now_ms();
	for (size_t i = 0; i < list->u.array.len; i++) {
		yajl_val sb = list->u.array.values[i];
		char image[32], net[32], cpu[32], mem[32], runs[32], used[48], stops[48], del[48];
		snprintf(runs, sizeof(runs), "%lld", (long long)lbc_jint(sb, "runs", 0));
		const char *cells[] = { lbc_jstr(sb, "name", "?"),
					lbc_jstr(sb, "state", "?"),
					spec_str(sb, "image", image, sizeof(image)),
					spec_str(sb, "network", net, sizeof(net)),
					spec_str(sb, "cpu", cpu, sizeof(cpu)),
					spec_str(sb, "memory", mem, sizeof(mem)),
					runs,
					when(sb, "last_used_at", now, used, sizeof(used)),
					when(sb, "stops_at", now, stops, sizeof(stops)),
					when(sb, "deletes_at", now, del, sizeof(del)) };
		lbc_table_add(t, cells);
	}
	if (lbc_table_rows(t) == 0)
		puts("No sandboxes.");
	else
		lbc_table_print(t, stdout);
	lbc_table_free(t);
	yajl_tree_free(root);
	lbc_response_free(&res);
	return 0;
}

static void line(const char *key, const char *value)
{
	_cleanup_free_ char *safe = lbc_term_safe(value, strlen(value), false);
	printf("%-12s %s\n", key, safe ? safe : "");
}

static const char *at_and_relative(yajl_val obj, const char *key, int64_t now, char *buf, size_t size)
{
	int64_t t;
	const char *s = lbc_jstr(obj, key, NULL);
	if (!s || lbc_parse_time_ms(s, &t) < 0)
		return "-";
	char rel[48];
	snprintf(buf, size, "%s (%s)", s, lbc_format_relative(t, now, rel, sizeof(rel)));
	return buf;
}

static int cmd_inspect(const struct opts *o, int argc, char **argv)
{
	if (argc != 1)
		return usage_error("inspect takes one sandbox NAME");
	if (!lb_sandbox_name_valid(argv[0]))
		return usage_error("`%s` is not a sandbox name", argv[0]);
	char path[128];
	snprintf(path, sizeof(path), "/v1/sandboxes/%s", argv[0]);
	struct lbc_response res;
	int r = get(o, path, &res);
	if (r != 0) {
		int status = r < 0 ? fail_response(&res) : 0;
		lbc_response_free(&res);
		return status;
	}
	yajl_val sb = lbc_json(&res);
	if (!sb) {
		int status = fail_response(&res);
		lbc_response_free(&res);
		return status;
	}
	int64_t now = now_ms();
	char a[64], b[64], buf[256];
	line("name:", lbc_jstr(sb, "name", "?"));
	line("state:", lbc_jstr(sb, "state", "?"));
	const char *digest = lbc_jstr(sb, "image_digest", NULL);
	snprintf(buf, sizeof(buf), "%s%s%s%s", spec_str(sb, "image", a, sizeof(a)), digest ? " (" : "",
		 digest ? digest : "", digest ? ")" : "");
	line("image:", buf);
	line("network:", spec_str(sb, "network", a, sizeof(a)));
	line("cpu:", spec_str(sb, "cpu", a, sizeof(a)));
	line("memory:", spec_str(sb, "memory", a, sizeof(a)));
	int64_t used = lbc_jint(sb, "disk_used_bytes", -1);
	if (used >= 0)
		snprintf(buf, sizeof(buf), "%s (%s used)", spec_str(sb, "disk", a, sizeof(a)),
			 lbc_format_bytes((uint64_t)used, b, sizeof(b)));
	else
		snprintf(buf, sizeof(buf), "%s", spec_str(sb, "disk", a, sizeof(a)));
	line("disk:", buf);
	snprintf(buf, sizeof(buf), "%s min", spec_str(sb, "idle_minutes", a, sizeof(a)));
	line("idle stop:", buf);
	snprintf(buf, sizeof(buf), "%s h", spec_str(sb, "keep_hours", a, sizeof(a)));
	line("keep:", buf);
	line("created:", at_and_relative(sb, "created_at", now, buf, sizeof(buf)));
	line("last used:", at_and_relative(sb, "last_used_at", now, buf, sizeof(buf)));
	line("stops:", at_and_relative(sb, "stops_at", now, buf, sizeof(buf)));
	line("deletes:", at_and_relative(sb, "deletes_at", now, buf, sizeof(buf)));
	snprintf(buf, sizeof(buf), "%lld", (long long)lbc_jint(sb, "runs", 0));
	line("runs:", buf);
	int64_t uid = lbc_jint(sb, "host_uid", -1);
	if (uid >= 0) {
		snprintf(buf, sizeof(buf), "%lld", (long long)uid);
		line("host uid:", buf);
	}
	yajl_tree_free(sb);
	lbc_response_free(&res);
	return 0;
}

static int simple_post(const struct opts *o, const char *method, const char *name, const char *suffix,
		       const char *done_key, const char *yes, const char *no)
{
	if (!lb_sandbox_name_valid(name))
		return usage_error("`%s` is not a sandbox name", name);
	char path[128];
	snprintf(path, sizeof(path), "/v1/sandboxes/%s%s", name, suffix);
	struct lbc_request req = { .method = method, .path = path, .max_response = JSON_MAX, .timeout_seconds = 900 };
	struct lbc_response res;
	if (lbc_http(o->socket, &req, &res) < 0) {
		int status = fail_response(&res);
		lbc_response_free(&res);
		return status;
	}
	if (o->json) {
		fwrite(res.body ? res.body : "", 1, res.len, stdout);
		fputc('\n', stdout);
	} else {
		yajl_val v = lbc_json(&res);
		bool done = !v || !lbc_jget(v, done_key) || lbc_jbool(v, done_key);
		printf("%s: %s\n", name, done ? yes : no);
		if (v)
			yajl_tree_free(v);
	}
	lbc_response_free(&res);
	return 0;
}

static int cmd_stop(const struct opts *o, int argc, char **argv)
{
	if (argc != 1)
		return usage_error("stop takes one sandbox NAME");
	return simple_post(o, "POST", argv[0], "/stop", "stopped", "stopped; its files stay.", "was not running.");
}

static int cmd_rm(const struct opts *o, int argc, char **argv)
{
	if (argc != 1)
		return usage_error("rm takes one sandbox NAME");
	return simple_post(o, "DELETE", argv[0], "", "deleted", "deleted with its files.", "was not there.");
}

/* ---- files ---- */

static int cmd_files(const struct opts *o, int argc, char **argv)
{
	if (argc < 1 || argc > 2)
		return usage_error("files takes a sandbox NAME and optionally a DIR");
	if (!lb_sandbox_name_valid(argv[0]))
		return usage_error("`%s` is not a sandbox name", argv[0]);
	_cleanup_free_ char *dir = argc == 2 ? lbc_escape(argv[1]) : NULL;
	_cleanup_free_ char *path = NULL;
	if (asprintf(&path, "/v1/sandboxes/%s/files?recursive=%s%s%s", argv[0], o->top_only ? "false" : "true",
		     dir ? "&path=" : "", dir ? dir : "") < 0)
		return 1;
	struct lbc_response res;
	yajl_val root, files;
	int status;
	if (!get_list(o, path, "files", &res, &root, &files, &status))
		return status;
	static const char *const headers[] = { "TYPE", "SIZE", "MODIFIED", "PATH" };
	static const bool right[] = { false, true, false, false };
	struct lbc_table *t = lbc_table_new(4, headers, right);
	int64_t now = now_ms();
	for (size_t i = 0; t && i < files->u.array.len; i++) {
		yajl_val f = files->u.array.values[i];
		char size[32], mod[48];
		const char *type = lbc_jstr(f, "type", "?");
		bool is_dir = strcmp(type, "directory") == 0;
		const char *cells[] = { is_dir ? "dir" : type,
					is_dir ? "-"
					       : lbc_format_bytes((uint64_t)lbc_jint(f, "size", 0), size, sizeof(size)),
					when(f, "modified_at", now, mod, sizeof(mod)), lbc_jstr(f, "path", "?") };
		lbc_table_add(t, cells);
	}
	if (t && lbc_table_rows(t) == 0)
		puts("No files.");
	else if (t)
		lbc_table_print(t, stdout);
	int64_t more = lbc_jint(root, "more", 0);
	if (more > 0)
		printf("… and %lld more not shown\n", (long long)more);
	lbc_table_free(t);
	yajl_tree_free(root);
	lbc_response_free(&res);
	return 0;
}

/* "NAME:PATH" -> name and path (pointers into a copy); false when arg is a local path. */
static bool split_remote(const char *arg, char **ret_name, const char **ret_path)
{
	const char *colon = strchr(arg, ':');
	if (!colon || colon == arg)
		return false;
	char *name = strndup(arg, (size_t)(colon - arg));
	if (!name || !lb_sandbox_name_valid(name)) {
		free(name);
		return false;
	}
	*ret_name = name;
	*ret_path = colon + 1;
	return true;
}

static int cp_in(const struct opts *o, const char *local, const char *name, const char *rpath)
{
	_cleanup_free_ char *target = NULL;
	if (rpath[0] == '\0' || rpath[strlen(rpath) - 1] == '/') {
		if (strcmp(local, "-") == 0)
			return usage_error("copying standard input needs a file name: NAME:PATH");
		_cleanup_free_ char *copy = strdup(local);
		// NOLINTNEXTLINE(clang-analyzer-unix.Malloc): copy is _cleanup_free_
		if (!copy || asprintf(&target, "%s%s", rpath, basename(copy)) < 0)
			return 1;
	} else {
		target = strdup(rpath);
		if (!target)
			return 1;
	}
	_cleanup_free_ char *data = NULL;
	size_t len = 0;
	int r = read_path(local, FILE_MAX, &data, &len);
	if (r == -EFBIG) {
		// NOLINTNEXTLINE(clang-analyzer-unix.Malloc): target is _cleanup_free_
		fprintf(stderr, "lensbox: %s is larger than 25 MiB, the most a file copied in may be\n", local);
		return 1;
	}
	if (r < 0) {
		fprintf(stderr, "lensbox: reading %s: %s\n", local, strerror(-r));
		return 1;
	}
	_cleanup_free_ char *esc = lbc_escape_path(target);
	_cleanup_free_ char *path = NULL;
	if (!esc || asprintf(&path, "/v1/sandboxes/%s/files/%s", name, esc) < 0)
		return 1;
	struct lbc_request req = { .method = "PUT",
				   .path = path,
				   .body = data,
				   .body_len = len,
				   .content_type = "application/octet-stream",
				   .max_response = JSON_MAX,
				   .timeout_seconds = 600 };
	struct lbc_response res;
	if (lbc_http(o->socket, &req, &res) < 0) {
		int status = fail_response(&res);
		lbc_response_free(&res);
		return status;
	}
	if (o->json) {
		fwrite(res.body ? res.body : "", 1, res.len, stdout);
		fputc('\n', stdout);
	} else {
		char size[32];
		_cleanup_free_ char *safe = lbc_term_safe(target, strlen(target), false);
		printf("Copied %s to %s:%s\n", lbc_format_bytes(len, size, sizeof(size)), name, safe ? safe : "");
	}
	lbc_response_free(&res);
	return 0;
}

static int cp_out(const struct opts *o, const char *name, const char *rpath, const char *local)
{
	if (rpath[0] == '\0')
		return usage_error("copying out needs a file: NAME:PATH");
	_cleanup_free_ char *esc = lbc_escape_path(rpath);
	_cleanup_free_ char *path = NULL;
	if (!esc || asprintf(&path, "/v1/sandboxes/%s/files/%s", name, esc) < 0)
		return 1;

	bool to_stdout = strcmp(local, "-") == 0;
	_cleanup_free_ char *dest = NULL;
	struct stat st;
	if (!to_stdout && stat(local, &st) == 0 && S_ISDIR(st.st_mode)) {
		_cleanup_free_ char *copy = strdup(rpath);
		size_t n = strlen(local);
		bool slash = n > 0 && local[n - 1] == '/';
		// NOLINTNEXTLINE(clang-analyzer-unix.Malloc): copy is _cleanup_free_
		if (!copy || asprintf(&dest, "%s%s%s", local, slash ? "" : "/", basename(copy)) < 0)
			return 1;
	} else if (!to_stdout) {
		dest = strdup(local);
		if (!dest)
			return 1;
	}
	/* into a temporary file beside the destination, renamed at the end: a failed copy leaves nothing partial */
	_cleanup_free_ char *tmp = NULL;
	_cleanup_fclose_ FILE *f = NULL;
	if (to_stdout) {
		f = fdopen(dup(STDOUT_FILENO), "w");
	} else {
		if (asprintf(&tmp, "%s.lensbox-XXXXXX", dest) < 0)
			return 1; // NOLINT(clang-analyzer-unix.Malloc): dest is _cleanup_free_
		int fd = mkostemp(tmp, O_CLOEXEC);
		if (fd < 0) {
			fprintf(stderr, "lensbox: creating %s: %s\n", dest, strerror(errno));
			return 1;
		}
		/* mkostemp makes it 0600; give it the mode a new file of this user's would have */
		mode_t mask = umask(0);
		umask(mask);
		if (fchmod(fd, 0666 & ~mask) < 0) {
			fprintf(stderr, "lensbox: creating %s: %s\n", dest, strerror(errno));
			close(fd);
			unlink(tmp);
			return 1;
		}
		f = fdopen(fd, "w");
		if (!f)
			close(fd);
	}
	if (!f) {
		fprintf(stderr, "lensbox: opening the output: %s\n", strerror(errno));
		return 1;
	}
	struct lbc_request req = {
		.method = "GET", .path = path, .max_response = FILE_MAX, .sink = f, .timeout_seconds = 600
	};
	struct lbc_response res;
	int r = lbc_http(o->socket, &req, &res);
	if (r == 0 && fflush(f) != 0) {
		snprintf(res.code, sizeof(res.code), "write_failed");
		snprintf(res.error, sizeof(res.error), "writing %s: %s", dest ? dest : "standard output",
			 strerror(errno));
		r = -1;
	}
	if (r < 0) {
		if (tmp)
			unlink(tmp);
		int status = fail_response(&res);
		lbc_response_free(&res);
		return status;
	}
	if (tmp && rename(tmp, dest) < 0) {
		fprintf(stderr, "lensbox: renaming into %s: %s\n", dest, strerror(errno));
		unlink(tmp);
		return 1;
	}
	if (!to_stdout) {
		char size[32];
		long pos = ftell(f);
		fprintf(stderr, "Copied %s to %s\n", lbc_format_bytes(pos > 0 ? (uint64_t)pos : 0, size, sizeof(size)),
			dest);
	}
	lbc_response_free(&res);
	return 0;
}

static int cmd_cp(const struct opts *o, int argc, char **argv)
{
	if (argc != 2)
		return usage_error("cp takes a source and a destination, one of them NAME:PATH");
	_cleanup_free_ char *sname = NULL, *dname = NULL;
	const char *spath = NULL, *dpath = NULL;
	bool src_remote = split_remote(argv[0], &sname, &spath);
	bool dst_remote = split_remote(argv[1], &dname, &dpath);
	if (src_remote == dst_remote)
		// NOLINTNEXTLINE(clang-analyzer-unix.Malloc): dname is _cleanup_free_
		return usage_error("cp copies between this machine and a sandbox: exactly one side is NAME:PATH "
				   "(write ./%s for a local name with a colon)",
				   argv[0]);
	// NOLINTNEXTLINE(clang-analyzer-unix.Malloc): sname is _cleanup_free_
	return dst_remote ? cp_in(o, argv[0], dname, dpath) : cp_out(o, sname, spath, argv[1]);
}

/* ---- runs and health ---- */

static int cmd_runs(const struct opts *o, int argc, char **argv)
{
	if (argc > 1)
		return usage_error("runs takes at most one sandbox NAME");
	if (argc == 1 && !lb_sandbox_name_valid(argv[0]))
		return usage_error("`%s` is not a sandbox name", argv[0]);
	char path[160];
	snprintf(path, sizeof(path), "/v1/runs?limit=%ld%s%s", o->limit ? o->limit : 20, argc ? "&sandbox=" : "",
		 argc ? argv[0] : "");
	struct lbc_response res;
	yajl_val root, runs;
	int status;
	if (!get_list(o, path, "runs", &res, &root, &runs, &status))
		return status;
	static const char *const headers[] = { "STARTED", "SANDBOX",  "LANGUAGE", "OUTCOME", "EXIT",
					       "TIME",	  "CPU TIME", "MEMORY",	  "ID" };
	static const bool right[] = { false, false, false, false, true, true, true, true, false };
	struct lbc_table *t = lbc_table_new(9, headers, right);
	int64_t now = now_ms();
	for (size_t i = 0; t && i < runs->u.array.len; i++) {
		yajl_val run = runs->u.array.values[i];
		char started[48], exitc[16], dur[32], cpu[32], mem[32];
		yajl_val code = lbc_jget(run, "exit_code");
		if (code && YAJL_IS_INTEGER(code))
			snprintf(exitc, sizeof(exitc), "%lld", YAJL_GET_INTEGER(code));
		else if (lbc_jint(run, "signal", 0) > 0)
			snprintf(exitc, sizeof(exitc), "sig %lld", (long long)lbc_jint(run, "signal", 0));
		else
			snprintf(exitc, sizeof(exitc), "-");
		const char *cells[] = {
			when(run, "started_at", now, started, sizeof(started)),
			lbc_jstr(run, "sandbox", "?"),
			lbc_jstr(run, "language", "?"),
			lbc_jstr(run, "outcome", "?"),
			exitc,
			lbc_format_duration_ms((uint64_t)lbc_jint(run, "duration_ms", 0), dur, sizeof(dur)),
			lbc_format_duration_ms((uint64_t)lbc_jint(run, "cpu_ms", 0), cpu, sizeof(cpu)),
			lbc_format_bytes((uint64_t)lbc_jint(run, "peak_memory_bytes", 0), mem, sizeof(mem)),
			lbc_jstr(run, "id", "?"),
		};
		lbc_table_add(t, cells);
	}
	if (t && lbc_table_rows(t) == 0)
		puts("No runs.");
	else if (t)
		lbc_table_print(t, stdout);
	lbc_table_free(t);
	yajl_tree_free(root);
	lbc_response_free(&res);
	return 0;
}

static const char *yesno(yajl_val obj, const char *key)
{
	yajl_val v = lbc_jget(obj, key);
	return !v ? "-" : YAJL_IS_TRUE(v) ? "yes" : "no";
}

/* The default image: without it, runs that name no image are refused. */
static void show_image_health(yajl_val img)
{
	if (!img)
		return;
	char buf[512];
	const char *name = lbc_jstr(img, "name", "?");
	if (lbc_jbool(img, "available"))
		line("image:", name);
	else {
		snprintf(buf, sizeof(buf), "%s is not available (%s): runs that name no image are refused", name,
			 lbc_jstr(img, "why_not", "not imported"));
		line("image:", buf);
	}
}

/* The packages and web tiers, and what would stop them working: an admin reads here why pip install fails. */
static void show_network_health(yajl_val net)
{
	if (!net)
		return;
	char buf[512];
	if (!lbc_jbool(net, "tiers_available")) {
		snprintf(buf, sizeof(buf), "off only; packages and web are unavailable: %s",
			 lbc_jstr(net, "why_not", "no reason given"));
		line("network:", buf);
		return;
	}
	line("network:", "off, packages, web");
	static const char *const chains[] = { "blocking_forward_chain", "blocking_input_chain" };
	for (size_t i = 0; i < LB_ARRAY_SIZE(chains); i++) {
		const char *chain = lbc_jstr(net, chains[i], NULL);
		if (chain) {
			snprintf(buf, sizeof(buf),
				 "%s drops what it does not accept: packages and web traffic may stop there", chain);
			line("warning:", buf);
		}
	}
	yajl_val sv = lbc_jget(net, "services");
	if (!sv)
		return;
	long long restarts = lbc_jint(sv, "restarts", 0) + lbc_jint(sv, "supervisor_restarts", 0);
	if (!lbc_jbool(sv, "isolated"))
		snprintf(buf, sizeof(buf), "running in lensboxd (services_uid = 0)");
	else if (lbc_jget(sv, "supervised") && !lbc_jbool(sv, "supervised"))
		snprintf(buf, sizeof(buf),
			 "stopped: packages and web sandboxes get no DNS or relay until lensboxd restarts");
	else if (lbc_jget(sv, "crash_loop") && lbc_jbool(sv, "crash_loop"))
		snprintf(buf, sizeof(buf),
			 "crash loop: they keep dying at start, each replaced 5 s after the last (%lld replaced so "
			 "far; see lensboxd's log)",
			 restarts);
	else if (!lbc_jbool(sv, "alive"))
		snprintf(buf, sizeof(buf), "being replaced (%lld replaced so far)", restarts);
	else
		snprintf(buf, sizeof(buf), "running unprivileged (%lld replaced so far)", restarts);
	line("dns, relay:", buf);
}

static int cmd_health(const struct opts *o, int argc, char **argv)
{
	(void)argv;
	if (argc != 0)
		return usage_error("health takes no arguments");
	struct lbc_response res;
	int r = get(o, "/v1/health", &res);
	if (r < 0) {
		int status = fail_response(&res);
		lbc_response_free(&res);
		return status;
	}
	yajl_val h = lbc_json(&res);
	if (!h) {
		int status = fail_response(&res);
		lbc_response_free(&res);
		return status;
	}
	bool can_run = lbc_jbool(h, "can_run");
	if (r == 0) {
		char buf[256];
		line("version:", lbc_jstr(h, "version", "?"));
		line("can run:", can_run ? "yes" : "no");
		const char *why = lbc_jstr(h, "why_not", NULL);
		if (why)
			line("why not:", why);
		yajl_val host = lbc_jget(h, "host");
		line("kernel:", lbc_jstr(host, "kernel", "?"));
		snprintf(buf, sizeof(buf), "%lld", (long long)lbc_jint(host, "landlock_abi", 0));
		line("landlock:", buf);
		line("cgroup:", lbc_jstr(host, "cgroup", "?"));
		line("seccomp:", yesno(host, "seccomp"));
		line("nftables:", yesno(host, "nftables"));
		line("user ns:", yesno(host, "user_namespaces"));
		show_image_health(lbc_jget(h, "default_image"));
		show_network_health(lbc_jget(h, "network"));
		yajl_val sbs = lbc_jget(h, "sandboxes");
		snprintf(buf, sizeof(buf), "%lld running, %lld stopped", (long long)lbc_jint(sbs, "running", 0),
			 (long long)lbc_jint(sbs, "stopped", 0));
		line("sandboxes:", buf);
		yajl_val spares = lbc_jget(h, "spares");
		if (spares) {
			long long target = lbc_jint(spares, "target", 0), max = lbc_jint(spares, "max", 0);
			int w = snprintf(buf, sizeof(buf), "%lld ready of %lld",
					 (long long)lbc_jint(spares, "ready", 0), target);
			if (max > target && w > 0 && (size_t)w < sizeof(buf))
				snprintf(buf + w, sizeof(buf) - (size_t)w, " (up to %lld after a burst)", max);
			line("spares:", buf);
		}
		snprintf(buf, sizeof(buf), "%lld", (long long)lbc_jint(h, "runs_in_flight", 0));
		line("running now:", buf);
		yajl_val api = lbc_jget(h, "api_process");
		if (api) { /* the unprivileged process that answered: how often it was replaced, what the core refused
			    */
			snprintf(
			    buf, sizeof(buf), "unprivileged; replaced %lld times, %lld messages refused by the core",
			    (long long)lbc_jint(api, "restarts", 0), (long long)lbc_jint(api, "messages_refused", 0));
			line("api process:", buf);
		}
		int64_t up = lbc_jint(h, "uptime_seconds", -1);
		if (up >= 0) {
			line("up:", lbc_format_duration_ms((uint64_t)up * 1000, buf, sizeof(buf)));
		}
	}
	yajl_tree_free(h);
	lbc_response_free(&res);
	return can_run ? 0 : 1;
}

/* ---- arguments ---- */

static int parse_long(const char *s, long lo, long hi, long *ret)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi)
		return -EINVAL;
	*ret = v;
	return 0;
}

/* Checks that the options given belong to cmd and runs it; returns the exit status. */
static int dispatch(const struct opts *o, const char *cmd, int n, char **args)
{
	bool run_opts =
	    o->python || o->bash || o->timeout || o->output_limit || o->image || o->network || o->cpu || o->memory;
	if (run_opts && strcmp(cmd, "run") != 0)
		return usage_error(
		    "--python, --bash, --timeout, --output-limit, --image, --network, --cpu and --memory "
		    "belong to `run`, not `%s`",
		    cmd);
	if (o->limit && strcmp(cmd, "runs") != 0)
		return usage_error("--limit belongs to `runs`, not `%s`", cmd);
	if (o->top_only && strcmp(cmd, "files") != 0)
		return usage_error("--top belongs to `files`, not `%s`", cmd);
	if (o->name && strcmp(cmd, "image") != 0)
		return usage_error("--name belongs to `image import`, not `%s`", cmd);
	if ((o->no_nft || o->docker_profile) && strcmp(cmd, "policy") != 0)
		return usage_error("--no-nft and --docker-profile belong to `policy`, not `%s`", cmd);
	if (o->config && strcmp(cmd, "policy") != 0 && strcmp(cmd, "doctor") != 0)
		return usage_error("--config belongs to `policy diff` and `doctor`, not `%s`", cmd);
	if (strcmp(cmd, "doctor") == 0) {
		if (n > 0)
			return usage_error("doctor takes no arguments (--config FILE names lensboxd.conf)");
		return lbc_cmd_doctor(o->config ? o->config : LENSBOX_CONFIG_FILE, o->json);
	}
	if (strcmp(cmd, "policy") == 0) {
		struct lbc_policy_opts po = {
			.json = o->json, .no_nft = o->no_nft, .config = o->config, .docker_profile = o->docker_profile
		};
		return lbc_cmd_policy(&po, n, args);
	}
	if (strcmp(cmd, "image") == 0) {
		struct lbc_image_opts io = { .socket = o->socket, .json = o->json, .name = o->name };
		return lbc_cmd_image(&io, n, args);
	}

	static const struct {
		const char *name;
		int (*fn)(const struct opts *, int, char **);
	} commands[] = {
		{ "run", cmd_run },   { "ls", cmd_ls },	    { "inspect", cmd_inspect },
		{ "stop", cmd_stop }, { "rm", cmd_rm },	    { "files", cmd_files },
		{ "cp", cmd_cp },     { "runs", cmd_runs }, { "health", cmd_health },
	};
	for (size_t i = 0; i < LB_ARRAY_SIZE(commands); i++)
		if (strcmp(cmd, commands[i].name) == 0)
			return commands[i].fn(o, n, args);
	return usage_error("unknown command `%s`", cmd);
}

int main(int argc, char **argv)
{
	enum {
		OPT_SOCKET = 256,
		OPT_JSON,
		OPT_PYTHON,
		OPT_BASH,
		OPT_TIMEOUT,
		OPT_OUTPUT_LIMIT,
		OPT_LIMIT,
		OPT_IMAGE,
		OPT_NETWORK,
		OPT_CPU,
		OPT_MEMORY,
		OPT_TOP,
		OPT_NAME,
		OPT_VERSION,
		OPT_NO_NFT,
		OPT_CONFIG,
		OPT_DOCKER_PROFILE
	};
	static const struct option options[] = {
		{ "socket", required_argument, NULL, OPT_SOCKET },
		{ "json", no_argument, NULL, OPT_JSON },
		{ "python", required_argument, NULL, OPT_PYTHON },
		{ "bash", required_argument, NULL, OPT_BASH },
		{ "timeout", required_argument, NULL, OPT_TIMEOUT },
		{ "output-limit", required_argument, NULL, OPT_OUTPUT_LIMIT },
		{ "limit", required_argument, NULL, OPT_LIMIT },
		{ "image", required_argument, NULL, OPT_IMAGE },
		{ "network", required_argument, NULL, OPT_NETWORK },
		{ "cpu", required_argument, NULL, OPT_CPU },
		{ "memory", required_argument, NULL, OPT_MEMORY },
		{ "top", no_argument, NULL, OPT_TOP },
		{ "name", required_argument, NULL, OPT_NAME },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, OPT_VERSION },
		{ "no-nft", no_argument, NULL, OPT_NO_NFT },
		{ "config", required_argument, NULL, OPT_CONFIG },
		{ "docker-profile", required_argument, NULL, OPT_DOCKER_PROFILE },
		{ NULL, 0, NULL, 0 },
	};
	struct opts o = { .socket = getenv("LENSBOX_SOCKET") };
	bool help = false;
	if (!o.socket || !o.socket[0])
		o.socket = LBC_DEFAULT_SOCKET;
	int c;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", options, NULL)) != -1) {
		switch (c) {
		case OPT_SOCKET:
			o.socket = optarg;
			break;
		case OPT_JSON:
			o.json = true;
			break;
		case OPT_PYTHON:
			o.python = optarg;
			break;
		case OPT_BASH:
			o.bash = optarg;
			break;
		case OPT_TIMEOUT:
			if (parse_long(optarg, 1, 600, &o.timeout) < 0)
				return usage_error("--timeout takes 1 to 600 seconds, not `%s`", optarg);
			break;
		case OPT_OUTPUT_LIMIT:
			if (parse_long(optarg, 1, 1000000, &o.output_limit) < 0)
				return usage_error("--output-limit takes 1 to 1000000 characters, not `%s`", optarg);
			break;
		case OPT_LIMIT:
			if (parse_long(optarg, 1, 1000, &o.limit) < 0)
				return usage_error("--limit takes 1 to 1000, not `%s`", optarg);
			break;
		case OPT_IMAGE:
			o.image = optarg;
			break;
		case OPT_NETWORK:
			o.network = optarg;
			break;
		case OPT_CPU:
			o.cpu = optarg;
			break;
		case OPT_MEMORY:
			o.memory = optarg;
			break;
		case OPT_TOP:
			o.top_only = true;
			break;
		case OPT_NAME:
			o.name = optarg;
			break;
		case OPT_NO_NFT:
			o.no_nft = true;
			break;
		case OPT_CONFIG:
			o.config = optarg;
			break;
		case OPT_DOCKER_PROFILE:
			o.docker_profile = optarg;
			break;
		case 'h':
			help = true;
			break;
		case OPT_VERSION:
			printf("lensbox %s\n", LENSBOX_VERSION);
			return 0;
		case ':':
			return usage_error("%s needs a value", argv[optind - 1]);
		default:
			return usage_error("unknown option %s", argv[optind - 1]);
		}
	}
	if (help) {
		if (optind >= argc) {
			usage(stdout);
			return 0;
		}
		return command_usage(argv[optind]);
	}
	if (optind >= argc) {
		usage(stderr);
		return EXIT_USAGE;
	}
	return dispatch(&o, argv[optind], argc - optind - 1, argv + optind + 1);
}

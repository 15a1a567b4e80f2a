/*
 * image.c — `lensbox image pull|import|ls|rm|inspect` (see image.h): one API request each, then a presentation of
 * the answer (a table or `key: value` lines people read, or lensboxd's JSON verbatim with --json).
 *
 * Runs in the CLI process with the invoking user's privileges. Names and values shown come from lensboxd (and, for
 * image names and Env, from an image's author): they go through lbc_term_safe() before reaching a terminal.
 * `image pull` and `image import` (without --json) ask for lensboxd's streamed progress (application/x-ndjson) and
 * show it on stderr: on a terminal one bar per layer, redrawn in place; otherwise one plain line when a layer starts
 * a phase and one when it ends. Ctrl-C closes the connection, which makes lensboxd cancel the pull and remove what
 * it had started; the command then exits 130.
 */
#include "image.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <yajl/yajl_gen.h>

#include "client.h"
#include "format.h"
#include "lb/cleanup.h"

#define IMAGE_JSON_MAX	  (16u << 20)
#define PULL_TIMEOUT_S	  3600 /* a pull of a few GB over a slow link */
#define REQUEST_TIMEOUT_S 120

static int usage_error(const char *msg)
{
	fprintf(stderr, "lensbox: %s\nTry `lensbox --help`.\n", msg);
	return 2;
}

static int fail_response(const struct lbc_response *res)
{
	_cleanup_free_ char *safe = lbc_term_safe(res->error, strlen(res->error), false);
	fprintf(stderr, "lensbox: %s (%s)\n", safe ? safe : res->error, res->code[0] ? res->code : "error");
	return 1;
}

static void line(const char *key, const char *value)
{
	_cleanup_free_ char *safe = lbc_term_safe(value, strlen(value), false);
	printf("%-13s %s\n", key, safe ? safe : "");
}

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* "sha256:0123456789abcdef..." -> "0123456789ab" */
static const char *short_digest(const char *d, char *buf, size_t size)
{
	const char *hex = d && strncmp(d, "sha256:", 7) == 0 ? d + 7 : (d ? d : "-");
	snprintf(buf, size, "%.12s", hex);
	return buf;
}

static const char *relative(yajl_val obj, const char *key, char *buf, size_t size)
{
	int64_t t;
	const char *s = lbc_jstr(obj, key, NULL);
	if (!s || lbc_parse_time_ms(s, &t) < 0)
		return "-";
	return lbc_format_relative(t, now_ms(), buf, size);
}

/* Sends one request; under --json prints the answer. Returns 0 with *ret_root parsed (caller frees) when the caller
 * should present it, 1 when handled (JSON printed), or the failure exit status (<0 never). */
static int request(const struct lbc_image_opts *o, const char *method, const char *path, const char *body, long timeout,
		   yajl_val *ret_root, bool *ret_handled)
{
	struct lbc_request req = { .method = method,
				   .path = path,
				   .body = body,
				   .body_len = body ? strlen(body) : 0,
				   .content_type = body ? "application/json" : NULL,
				   .max_response = IMAGE_JSON_MAX,
				   .timeout_seconds = timeout };
	struct lbc_response res;
	*ret_handled = false;
	if (lbc_http(o->socket, &req, &res) < 0) {
		int status = fail_response(&res);
		lbc_response_free(&res);
		return status;
	}
	if (o->json) {
		fwrite(res.body ? res.body : "", 1, res.len, stdout);
		if (!res.body || !res.len || res.body[res.len - 1] != '\n')
			fputc('\n', stdout);
		lbc_response_free(&res);
		*ret_handled = true;
		return 0;
	}
	yajl_val root = lbc_json(&res);
	if (!root) {
		int status = fail_response(&res);
		lbc_response_free(&res);
		return status;
	}
	lbc_response_free(&res);
	*ret_root = root;
	return 0;
}

/* ---- streamed progress ---- */

#define VIEW_ROWS 64

/* What the progress display knows: one row per (layer or whole-image) step, in order of first appearance. */
struct progress_view {
	bool tty;
	int drawn; /* rows on screen (tty) */
	size_t n;
	struct {
		char layer[80]; /* "sha256:..." or "" */
		char phase[16];
		uint64_t done, total;
	} rows[VIEW_ROWS];
	char *final; /* the last line: the result or the error object */
};

static volatile int interrupted;

static void on_sigint(int sig)
{
	(void)sig;
	interrupted = 1;
}

static void row_text(const struct progress_view *v, size_t i, char *buf, size_t size)
{
	char done[32], total[32], bar[32], sd[16];
	const char *layer = v->rows[i].layer[0] ? short_digest(v->rows[i].layer, sd, sizeof(sd)) : "image";
	lbc_format_bytes(v->rows[i].done, done, sizeof(done));
	if (!v->rows[i].total) {
		if (v->tty)
			snprintf(buf, size, "%-12s %-11s", layer, v->rows[i].phase);
		else
			snprintf(buf, size, "%s %s", v->rows[i].phase, layer);
		return;
	}
	lbc_format_bytes(v->rows[i].total, total, sizeof(total));
	size_t fill = (size_t)(v->rows[i].done * 30 / v->rows[i].total);
	for (size_t k = 0; k < 30; k++)
		bar[k] = k < fill ? '#' : '.';
	bar[30] = '\0';
	if (v->tty)
		snprintf(buf, size, "%-12s %-11s [%s] %s / %s", layer, v->rows[i].phase, bar, done, total);
	else
		snprintf(buf, size, "%s %s %s / %s", v->rows[i].phase, layer, done, total);
}

static void show(struct progress_view *v, size_t changed, bool started)
{
	char text[256];
	if (!v->tty) {
		/* plain lines: a step's start and its end, nothing in between (logs stay short) */
		bool ended = v->rows[changed].total && v->rows[changed].done == v->rows[changed].total;
		if (!started && !ended)
			return;
		row_text(v, changed, text, sizeof(text));
		_cleanup_free_ char *safe = lbc_term_safe(text, strlen(text), false);
		fprintf(stderr, "%s\n", safe ? safe : "");
		return;
	}
	if (v->drawn)
		fprintf(stderr, "\033[%dA", v->drawn);
	for (size_t i = 0; i < v->n; i++) {
		row_text(v, i, text, sizeof(text));
		_cleanup_free_ char *safe = lbc_term_safe(text, strlen(text), false);
		fprintf(stderr, "\r\033[K%s\n", safe ? safe : "");
	}
	v->drawn = (int)v->n;
	fflush(stderr);
}

/* lbc_request.on_line: a progress step updates its row; any other line is the final object, kept. */
static int on_progress_line(const char *line, size_t len, void *ud)
{
	struct progress_view *v = ud;
	(void)len;
	yajl_val root = yajl_tree_parse(line, NULL, 0);
	const char *phase = lbc_jstr(root, "phase", NULL);
	if (!phase) {
		free(v->final);
		v->final = strdup(line);
		yajl_tree_free(root);
		return v->final ? 0 : 1;
	}
	const char *layer = lbc_jstr(root, "layer", "");
	size_t i = 0;
	while (i < v->n && strcmp(v->rows[i].layer, layer) != 0)
		i++;
	bool started = i == v->n || strcmp(v->rows[i].phase, phase) != 0;
	if (i == v->n && v->n < VIEW_ROWS)
		snprintf(v->rows[v->n++].layer, sizeof(v->rows[0].layer), "%s", layer);
	if (i < v->n) {
		snprintf(v->rows[i].phase, sizeof(v->rows[i].phase), "%s", phase);
		v->rows[i].done = (uint64_t)lbc_jint(root, "done", 0);
		v->rows[i].total = (uint64_t)lbc_jint(root, "total", 0);
		show(v, i, started);
	}
	yajl_tree_free(root);
	return 0;
}

/* A pull or an import with progress shown as it comes; the final object into *ret_root. 0, or the exit status. */
static int request_streamed(const struct lbc_image_opts *o, const char *path, const char *body, yajl_val *ret_root)
{
	struct progress_view v = { .tty = isatty(STDERR_FILENO) };
	struct lbc_request req = { .method = "POST",
				   .path = path,
				   .body = body,
				   .body_len = strlen(body),
				   .content_type = "application/json",
				   .max_response = IMAGE_JSON_MAX,
				   .timeout_seconds = PULL_TIMEOUT_S,
				   .accept = "application/x-ndjson",
				   .on_line = on_progress_line,
				   .line_ud = &v,
				   .cancel = &interrupted };
	struct sigaction sa = { .sa_handler = on_sigint }, old;
	sigemptyset(&sa.sa_mask);
	interrupted = 0;
	sigaction(SIGINT, &sa, &old);
	struct lbc_response res;
	int r = lbc_http(o->socket, &req, &res);
	sigaction(SIGINT, &old, NULL);
	if (r < 0 && strcmp(res.code, "cancelled") == 0) {
		fprintf(stderr, "lensbox: cancelled; lensboxd stops and removes what it had started\n");
		lbc_response_free(&res);
		free(v.final);
		return 130;
	}
	if (r < 0) {
		int status = fail_response(&res);
		lbc_response_free(&res);
		free(v.final);
		return status;
	}
	/* A lensboxd that did not stream answers one JSON object: it is the whole body. */
	char *final = v.final ? v.final : (res.len ? strdup(res.body) : NULL);
	lbc_response_free(&res);
	yajl_val root = final ? yajl_tree_parse(final, NULL, 0) : NULL;
	free(final);
	yajl_val e = lbc_jget(root, "error");
	if (!root || e) {
		struct lbc_response er = { .status = lbc_jint(root, "status", 502) };
		snprintf(er.code, sizeof(er.code), "%s", e ? lbc_jstr(e, "code", "error") : "bad_response");
		snprintf(er.error, sizeof(er.error), "%s",
			 e ? lbc_jstr(e, "message", "") : "lensboxd's stream ended without a result");
		yajl_tree_free(root);
		return fail_response(&er);
	}
	*ret_root = root;
	return 0;
}

/* JSON body {"key": value, ...} with string values (NULL values left out), generated by yajl. */
static char *json_body(const char *k1, const char *v1, const char *k2, const char *v2)
{
	yajl_gen g = yajl_gen_alloc(NULL);
	if (!g)
		return NULL;
	yajl_gen_map_open(g);
	const char *keys[] = { k1, k2 }, *vals[] = { v1, v2 };
	for (size_t i = 0; i < 2; i++) {
		if (!keys[i] || !vals[i])
			continue;
		yajl_gen_string(g, (const unsigned char *)keys[i], strlen(keys[i]));
		yajl_gen_string(g, (const unsigned char *)vals[i], strlen(vals[i]));
	}
	yajl_gen_map_close(g);
	const unsigned char *buf;
	size_t len;
	char *out = NULL;
	if (yajl_gen_get_buf(g, &buf, &len) == yajl_gen_status_ok)
		out = strndup((const char *)buf, len);
	yajl_gen_free(g);
	return out;
}

static void print_image_summary(const char *verb, yajl_val root)
{
	yajl_val img = lbc_jget(root, "image");
	char size[32], dur[32], sd[16];
	const char *name = lbc_jstr(img, "name", NULL);
	char msg[1024];
	snprintf(msg, sizeof(msg), "%s %s: %s (%s, %s)", verb, name ? name : "<no name>",
		 short_digest(lbc_jstr(img, "digest", NULL), sd, sizeof(sd)),
		 lbc_format_bytes((uint64_t)lbc_jint(img, "size_bytes", 0), size, sizeof(size)),
		 lbc_format_duration_ms((uint64_t)lbc_jint(root, "duration_ms", 0), dur, sizeof(dur)));
	_cleanup_free_ char *safe = lbc_term_safe(msg, strlen(msg), false);
	puts(safe ? safe : msg);
	const char *w = lbc_jstr(img, "warning", NULL);
	if (w) {
		_cleanup_free_ char *sw = lbc_term_safe(w, strlen(w), false);
		fprintf(stderr, "lensbox: warning: %s\n", sw ? sw : "");
	}
}

static int cmd_pull(const struct lbc_image_opts *o, int argc, char **argv)
{
	if (argc != 1)
		return usage_error("image pull takes one image REF");
	_cleanup_free_ char *body = json_body("ref", argv[0], NULL, NULL);
	if (!body)
		return 1;
	yajl_val root = NULL;
	bool handled = false;
	int status = o->json ? request(o, "POST", "/v1/images/pull", body, PULL_TIMEOUT_S, &root, &handled)
			     : request_streamed(o, "/v1/images/pull", body, &root);
	if (status || handled)
		return status;
	print_image_summary("pulled", root);
	yajl_tree_free(root);
	return 0;
}

static int cmd_import(const struct lbc_image_opts *o, int argc, char **argv)
{
	if (argc != 1)
		return usage_error("image import takes one FILE (an OCI layout directory or archive, or docker save)");
	/* lensboxd reads the path itself (as root), so it must be absolute and name the same file there. */
	char abs[PATH_MAX];
	if (!realpath(argv[0], abs)) {
		fprintf(stderr, "lensbox: %s: %s\n", argv[0], strerror(errno));
		return 1;
	}
	_cleanup_free_ char *body = json_body("path", abs, "name", o->name);
	if (!body)
		return 1;
	yajl_val root = NULL;
	bool handled = false;
	int status = o->json ? request(o, "POST", "/v1/images/import", body, PULL_TIMEOUT_S, &root, &handled)
			     : request_streamed(o, "/v1/images/import", body, &root);
	if (status || handled)
		return status;
	print_image_summary("imported", root);
	yajl_tree_free(root);
	return 0;
}

static int cmd_ls(const struct lbc_image_opts *o, int argc, char **argv)
{
	(void)argv;
	if (argc != 0)
		return usage_error("image ls takes no arguments");
	yajl_val root = NULL;
	bool handled;
	int status = request(o, "GET", "/v1/images", NULL, REQUEST_TIMEOUT_S, &root, &handled);
	if (status || handled)
		return status;
	yajl_val list = lbc_jget(root, "images");
	if (!list || !YAJL_IS_ARRAY(list)) {
		fprintf(stderr, "lensbox: lensboxd's answer has no images list (bad_response)\n");
		yajl_tree_free(root);
		return 1;
	}
	static const char *const headers[] = { "NAME", "DIGEST", "SIZE", "IN USE", "PINNED", "LAST USED" };
	static const bool right[] = { false, false, true, true, false, false };
	struct lbc_table *t = lbc_table_new(6, headers, right);
	if (!t) {
		yajl_tree_free(root);
		return 1;
	}
	for (size_t i = 0; i < list->u.array.len; i++) {
		yajl_val img = list->u.array.values[i];
		char sd[16], size[32], use[24], used[48];
		snprintf(use, sizeof(use), "%lld", (long long)lbc_jint(img, "in_use", 0));
		const char *row[] = { NULL,
				      short_digest(lbc_jstr(img, "digest", NULL), sd, sizeof(sd)),
				      lbc_format_bytes((uint64_t)lbc_jint(img, "size_bytes", 0), size, sizeof(size)),
				      use,
				      lbc_jbool(img, "pinned") ? "yes" : "no",
				      relative(img, "last_used", used, sizeof(used)) };
		yajl_val names = lbc_jget(img, "names");
		size_t n = names && YAJL_IS_ARRAY(names) ? names->u.array.len : 0;
		if (n == 0) {
			row[0] = "<none>";
			lbc_table_add(t, row);
		}
		for (size_t k = 0; k < n; k++) {
			yajl_val nv = names->u.array.values[k];
			row[0] = YAJL_IS_STRING(nv) ? YAJL_GET_STRING(nv) : "?";
			lbc_table_add(t, row);
		}
	}
	if (lbc_table_rows(t) == 0)
		puts("No images.");
	else
		lbc_table_print(t, stdout);
	lbc_table_free(t);
	yajl_tree_free(root);
	return 0;
}

/* The image path segment: ref percent-encoded component by component (its '/' kept). */
static char *image_path(const char *ref)
{
	_cleanup_free_ char *esc = lbc_escape_path(ref);
	if (!esc)
		return NULL;
	size_t len = strlen(esc) + 16;
	char *p = malloc(len);
	if (p)
		snprintf(p, len, "/v1/images/%s", esc);
	return p;
}

static int cmd_inspect(const struct lbc_image_opts *o, int argc, char **argv)
{
	if (argc != 1)
		return usage_error("image inspect takes one image REF");
	_cleanup_free_ char *path = image_path(argv[0]);
	if (!path)
		return 1;
	yajl_val root = NULL;
	bool handled;
	int status = request(o, "GET", path, NULL, REQUEST_TIMEOUT_S, &root, &handled);
	if (status || handled)
		return status;
	yajl_val img = lbc_jget(root, "image");
	char buf[256], a[48];
	yajl_val names = lbc_jget(img, "names");
	for (size_t k = 0; names && YAJL_IS_ARRAY(names) && k < names->u.array.len; k++)
		if (YAJL_IS_STRING(names->u.array.values[k]))
			line(k == 0 ? "names:" : "", YAJL_GET_STRING(names->u.array.values[k]));
	line("digest:", lbc_jstr(img, "digest", "-"));
	line("manifest:", lbc_jstr(img, "manifest_digest", "-"));
	snprintf(buf, sizeof(buf), "%s (%lld bytes)",
		 lbc_format_bytes((uint64_t)lbc_jint(img, "size_bytes", 0), a, sizeof(a)),
		 (long long)lbc_jint(img, "size_bytes", 0));
	line("size:", buf);
	snprintf(buf, sizeof(buf), "%s/%s", lbc_jstr(img, "os", "?"), lbc_jstr(img, "architecture", "?"));
	line("platform:", buf);
	line("python3:", lbc_jbool(img, "has_python3") ? "yes" : "no");
	line("bash:", lbc_jbool(img, "has_bash") ? "yes" : "no");
	const char *w = lbc_jstr(img, "warning", NULL);
	if (w)
		line("warning:", w);
	snprintf(buf, sizeof(buf), "%lld sandbox(es)", (long long)lbc_jint(img, "in_use", 0));
	line("in use by:", buf);
	line("pinned:", lbc_jbool(img, "pinned") ? "yes (never garbage-collected)" : "no");
	line("imported:", relative(img, "imported_at", a, sizeof(a)));
	line("last used:", relative(img, "last_used", a, sizeof(a)));
	line("working dir:", lbc_jstr(img, "working_dir", "-"));
	yajl_val env = lbc_jget(img, "env");
	for (size_t k = 0; env && YAJL_IS_ARRAY(env) && k < env->u.array.len; k++)
		if (YAJL_IS_STRING(env->u.array.values[k]))
			line(k == 0 ? "env:" : "", YAJL_GET_STRING(env->u.array.values[k]));
	line("rootfs:", lbc_jstr(img, "rootfs", "-"));
	yajl_tree_free(root);
	return 0;
}

static int cmd_rm(const struct lbc_image_opts *o, int argc, char **argv)
{
	if (argc != 1)
		return usage_error("image rm takes one image REF");
	_cleanup_free_ char *path = image_path(argv[0]);
	if (!path)
		return 1;
	yajl_val root = NULL;
	bool handled;
	int status = request(o, "DELETE", path, NULL, REQUEST_TIMEOUT_S, &root, &handled);
	if (status || handled)
		return status;
	char msg[512];
	snprintf(msg, sizeof(msg), "removed %s", lbc_jstr(root, "removed", argv[0]));
	_cleanup_free_ char *safe = lbc_term_safe(msg, strlen(msg), false);
	puts(safe ? safe : msg);
	yajl_tree_free(root);
	return 0;
}

int lbc_cmd_image(const struct lbc_image_opts *o, int argc, char **argv)
{
	if (argc < 1)
		return usage_error("image needs a verb: pull, import, ls, inspect or rm");
	if (o->name && strcmp(argv[0], "import") != 0)
		return usage_error("--name belongs to `image import`");
	static const struct {
		const char *name;
		int (*fn)(const struct lbc_image_opts *, int, char **);
	} verbs[] = {
		{ "pull", cmd_pull },	    { "import", cmd_import }, { "ls", cmd_ls },
		{ "inspect", cmd_inspect }, { "rm", cmd_rm },
	};
	for (size_t i = 0; i < sizeof(verbs) / sizeof(verbs[0]); i++)
		if (strcmp(argv[0], verbs[i].name) == 0)
			return verbs[i].fn(o, argc - 1, argv + 1);
	return usage_error("unknown image verb (pull, import, ls, inspect, rm)");
}

/*
 * fuzz_api.c — libFuzzer target for what lensboxd does with bytes it did not write, short of the HTTP framing
 * (libmicrohttpd's): a POST .../runs body through lbd_json_object() and the sandbox spec in it through
 * lbd_json_spec(); a file path from the API through lbd_path_check(); a program's captured output through
 * lbd_cut_output(). Each input is read all three ways.
 *
 * Build: cmake -DLENSBOX_FUZZ=ON -DCMAKE_C_COMPILER=clang; run: ./fuzz_supervisor_api supervisor/fuzz-corpus.
 * Besides memory errors (ASan/UBSan) it checks each function's promise and aborts when one is broken: an accepted
 * spec is within the documented ranges, an accepted path has none of the refused forms, cut output is valid UTF-8
 * of at most the asked number of characters.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "config.h"
#include "lb/utf8.h"
#include "output.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_body(const struct lbd_config *cfg, const char *body, size_t len)
{
	struct lbd_fail f = { 0 };
	yajl_val root = NULL;
	if (lbd_json_object(body, len, lbd_run_fields, LBD_RUN_FIELDS, &root, &f) < 0) {
		if ((f.status != 400 && f.status != 422) || !f.code[0] || !f.message[0])
			abort(); /* a refusal is a client error and says why */
		return;
	}
	if (!root || !YAJL_IS_OBJECT(root))
		abort();
	struct lbd_spec_request req;
	if (lbd_json_spec(cfg, lbd_json_get(root, "sandbox"), &req, &f) == 0) {
		const struct lb_store_spec *s = &req.spec;
		if (s->cpu_millicores < 100 || s->cpu_millicores > 64000 || s->memory_bytes < (64ull << 20) ||
		    s->memory_bytes > (64ull << 30) || s->disk_bytes < (16ull << 20) || s->disk_bytes > (1ull << 40))
			abort();
		if (!lb_tier_name(s->network))
			abort();
		if (req.has_image && !lbd_image_ref_valid(s->image))
			abort();
	} else if (f.status != 400 && f.status != 422) {
		abort();
	}
	yajl_tree_free(root);
}

static void check_path(const char *path)
{
	struct lbd_fail f = { 0 };
	if (lbd_path_check(path, false, &f) < 0)
		return;
	size_t len = strlen(path);
	if (len == 0 || len > 4095 || path[0] == '/')
		abort();
	for (const char *p = path;;) {
		size_t n = strcspn(p, "/");
		if (n == 0 || n > 255 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
			abort();
		if (p == path && n == 8 && memcmp(p, ".lensbox", 8) == 0)
			abort();
		if (!p[n])
			break;
		p += n + 1;
	}
}

static void check_cut(const uint8_t *data, size_t size)
{
	if (size < 2)
		return;
	size_t limit = 1 + data[0] % 64;
	bool head = data[1] & 1;
	uint64_t total = size - 2 + ((data[1] & 2) ? 100 : 0); /* bit 1: the capture window was cut */
	struct lbd_cut cut;
	if (lbd_cut_output((const char *)data + 2, size - 2, total, limit, head, &cut) < 0)
		return;
	if (!cut.text || cut.text[cut.len] != '\0' || lb_utf8_count(cut.text, cut.len) > limit)
		abort();
	size_t again_len;
	char *again = lb_utf8_sanitize(cut.text, cut.len, &again_len);
	if (!again || again_len != cut.len || memcmp(again, cut.text, cut.len) != 0)
		abort(); /* sanitising changed it: it was not valid UTF-8 */
	if (total > size - 2 && !cut.truncated)
		abort();
	free(again);
	free(cut.text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct lbd_config cfg;
	static bool ready;
	if (!ready) {
		lbd_config_defaults(&cfg);
		ready = true;
	}
	char *s = malloc(size + 1);
	if (!s)
		return 0;
	memcpy(s, data, size);
	s[size] = '\0';
	check_body(&cfg, s, size);
	check_path(s);
	free(s);
	check_cut(data, size);
	return 0;
}

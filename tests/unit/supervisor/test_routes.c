/* Unit tests for supervisor/routes.c and json.c: routing on the still-encoded path, percent-decoding that refuses
 * %00 and bad escapes, name validation, and request-body validation (types, unknown and repeated keys, ranges). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "api.h"

static void decode(void **state)
{
	(void)state;
	char *s = lbd_percent_decode("a%20b%2Fc", 9);
	assert_string_equal(s, "a b/c");
	free(s);
	s = lbd_percent_decode("plain", 5);
	assert_string_equal(s, "plain");
	free(s);
	assert_null(lbd_percent_decode("a%00b", 5));
	assert_null(lbd_percent_decode("a%2", 3));
	assert_null(lbd_percent_decode("a%", 2));
	assert_null(lbd_percent_decode("%zz", 3));
	assert_null(lbd_percent_decode("a\0b", 3));
}

static int route(const char *method, const char *path, struct lbd_route_match *m, int *status, char *code)
{
	struct lbd_res res = { 0 };
	int r = lbd_route(method, path, m, &res);
	*status = res.status;
	if (res.body) {
		const char *c = strstr(res.body, "\"code\":\"");
		assert_non_null(c);
		c += 8;
		size_t n = strcspn(c, "\"");
		memcpy(code, c, n);
		code[n] = '\0';
	} else {
		code[0] = '\0';
	}
	free(res.body);
	return r;
}

static void routes(void **state)
{
	(void)state;
	struct lbd_route_match m;
	int status;
	char code[64];
	assert_int_equal(route("GET", "/v1/health", &m, &status, code), 0);
	assert_ptr_equal(m.handler, lbd_ask_health);
	assert_int_equal(route("GET", "/metrics", &m, &status, code), 0);
	assert_ptr_equal(m.handler, lbd_ask_metrics);
	assert_int_equal(route("POST", "/v1/sandboxes/lens-chat-1/runs", &m, &status, code), 0);
	assert_ptr_equal(m.handler, lbd_ask_run);
	assert_string_equal(m.name, "lens-chat-1");
	assert_int_equal(m.body_max, LBD_JSON_BODY_MAX);
	assert_int_equal(route("PUT", "/v1/sandboxes/a/files/dir%2Fx%20y.txt", &m, &status, code), 0);
	assert_ptr_equal(m.handler, lbd_ask_file_put);
	assert_string_equal(m.file_path, "dir/x y.txt");
	assert_int_equal(m.body_max, LBD_FILE_MAX);
	free(m.file_path);
	assert_int_equal(route("GET", "/v1/sandboxes/a/files", &m, &status, code), 0);
	assert_ptr_equal(m.handler, lbd_ask_files_list);
	assert_int_equal(route("DELETE", "/v1/sandboxes/a", &m, &status, code), 0);
	assert_ptr_equal(m.handler, lbd_ask_sandbox_delete);
}

static void refusals(void **state)
{
	(void)state;
	struct lbd_route_match m;
	int status;
	char code[64];
	static const char *const bad_names[] = { "/v1/sandboxes/a%2Fb", "/v1/sandboxes/..", "/v1/sandboxes/A",
						 "/v1/sandboxes/a%00",	"/v1/sandboxes/-a", "/v1/sandboxes/a%20b" };
	for (size_t i = 0; i < sizeof(bad_names) / sizeof(bad_names[0]); i++) {
		assert_int_equal(route("GET", bad_names[i], &m, &status, code), -1);
		assert_int_equal(status, 400);
		assert_string_equal(code, "invalid_name");
	}
	assert_int_equal(route("GET", "/v1/sandboxes/a/b", &m, &status, code), -1);
	assert_int_equal(status, 404);
	assert_int_equal(route("POST", "/v1/health", &m, &status, code), -1);
	assert_int_equal(status, 405);
	assert_string_equal(code, "method_not_allowed");
	assert_int_equal(route("GET", "/v1/sandboxes/a/files/x%00y", &m, &status, code), -1);
	assert_int_equal(status, 400);
	assert_string_equal(code, "invalid_path");
	assert_int_equal(route("GET", "/etc/passwd", &m, &status, code), -1);
	assert_int_equal(status, 404);
}

static const struct lbd_jfield fields[] = { { "s", LBD_J_STRING }, { "i", LBD_J_INT }, { "o", LBD_J_OBJECT } };

static int parse(const char *body, char *code)
{
	struct lbd_fail f = { 0 };
	yajl_val v = NULL;
	int r = lbd_json_object(body, strlen(body), fields, 3, &v, &f);
	snprintf(code, 64, "%s", f.code);
	yajl_tree_free(v);
	return r < 0 ? f.status : 0;
}

static void json_validation(void **state)
{
	(void)state;
	char code[64];
	assert_int_equal(parse("{\"s\": \"x\", \"i\": 3, \"o\": {}}", code), 0);
	assert_int_equal(parse("", code), 0);
	assert_int_equal(parse("{", code), 400);
	assert_string_equal(code, "invalid_json");
	assert_int_equal(parse("[]", code), 400);
	assert_int_equal(parse("{\"x\": 1}", code), 400);
	assert_string_equal(code, "unknown_field");
	assert_int_equal(parse("{\"s\": \"a\", \"s\": \"b\"}", code), 400);
	assert_string_equal(code, "duplicate_field");
	assert_int_equal(parse("{\"i\": 1.5}", code), 400);
	assert_string_equal(code, "wrong_type");
	assert_int_equal(parse("{\"i\": \"1\"}", code), 400);
	assert_int_equal(parse("{\"s\": null}", code), 400);
	assert_int_equal(parse("{\"o\": []}", code), 400);
	assert_int_equal(parse("{\"s\": \"a\\u0000b\"}", code), 422);
	assert_string_equal(code, "invalid_value");
	assert_int_equal(parse("{\"s\": \"a\\\\u0000b\"}", code), 0); /* an escaped backslash, then text */
	assert_int_equal(parse("{\"s\": \"\xff\"}", code), 400);
	assert_string_equal(code, "invalid_json");
}

static void spec_ranges(void **state)
{
	(void)state;
	static struct lbd_config cfg;
	lbd_config_defaults(&cfg);
	struct lbd_spec_request req;
	struct lbd_fail f = { 0 };
	char errbuf[128];
	yajl_val v =
	    yajl_tree_parse("{\"cpu\": \"500m\", \"memory\": \"1Gi\", \"idle_minutes\": 5, \"network\": \"web\"}",
			    errbuf, sizeof(errbuf));
	assert_int_equal(lbd_json_spec(&cfg, v, &req, &f), 0);
	assert_int_equal(req.spec.cpu_millicores, 500);
	assert_int_equal(req.spec.memory_bytes, 1ull << 30);
	assert_int_equal(req.spec.idle_seconds, 300);
	assert_int_equal(req.spec.network, LB_TIER_WEB);
	assert_string_equal(req.spec.image, "python:3.12-slim"); /* the default */
	assert_true(req.has_cpu && req.has_network && !req.has_image);
	yajl_tree_free(v);
	static const char *const bad[] = { "{\"cpu\": 0.01}",	  "{\"memory\": \"63Mi\"}", "{\"idle_minutes\": 1441}",
					   "{\"keep_hours\": 0}", "{\"image\": \"../x\"}",  "{\"network\": \"all\"}",
					   "{\"disk\": \"2Ti\"}" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		v = yajl_tree_parse(bad[i], errbuf, sizeof(errbuf));
		assert_non_null(v);
		memset(&f, 0, sizeof(f));
		assert_true(lbd_json_spec(&cfg, v, &req, &f) < 0);
		assert_int_equal(f.status, 422);
		yajl_tree_free(v);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(decode),	   cmocka_unit_test(routes),	  cmocka_unit_test(refusals),
		cmocka_unit_test(json_validation), cmocka_unit_test(spec_ranges),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

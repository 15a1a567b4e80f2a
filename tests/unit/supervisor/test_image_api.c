/* Unit tests for the image parts of supervisor/: the /v1/images routes (a reference keeps its slashes, is
 * percent-decoded, refuses %00; pull and import are POST-only actions), reference validation (lbd_image_ref_valid),
 * and the image configuration keys (pull_missing_images, registries, image_gc_after with 0 = off). */
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
#include "config.h"

static int route(const char *method, const char *path, struct lbd_route_match *m, int *status)
{
	struct lbd_res res = { 0 };
	int r = lbd_route(method, path, m, &res);
	*status = res.status;
	free(res.body);
	return r;
}

static void image_routes(void **state)
{
	(void)state;
	struct lbd_route_match m;
	int status;
	assert_int_equal(route("GET", "/v1/images", &m, &status), 0);
	assert_ptr_equal(m.handler, lbd_ask_images_list);
	assert_int_equal(route("POST", "/v1/images/pull", &m, &status), 0);
	assert_ptr_equal(m.handler, lbd_ask_image_pull);
	assert_int_equal(route("POST", "/v1/images/import", &m, &status), 0);
	assert_ptr_equal(m.handler, lbd_ask_image_import);

	assert_int_equal(route("GET", "/v1/images/127.0.0.1:5000/ns/python%3A3.12-slim", &m, &status), 0);
	assert_ptr_equal(m.handler, lbd_ask_image_get);
	assert_string_equal(m.file_path, "127.0.0.1:5000/ns/python:3.12-slim");
	free(m.file_path);
	assert_int_equal(route("DELETE", "/v1/images/python:3.12-slim", &m, &status), 0);
	assert_ptr_equal(m.handler, lbd_ask_image_delete);
	assert_string_equal(m.file_path, "python:3.12-slim");
	free(m.file_path);
	/* GET of an image named "pull" is an inspect, not the action */
	assert_int_equal(route("GET", "/v1/images/pull", &m, &status), 0);
	assert_ptr_equal(m.handler, lbd_ask_image_get);
	free(m.file_path);

	assert_true(route("GET", "/v1/images/a%00b", &m, &status) < 0);
	assert_int_equal(status, 400);
	assert_true(route("POST", "/v1/images", &m, &status) < 0);
	assert_int_equal(status, 405);
	assert_true(route("PUT", "/v1/images/python:3", &m, &status) < 0);
	assert_int_equal(status, 405);
	assert_true(route("POST", "/v1/images/python:3", &m, &status) < 0);
	assert_int_equal(status, 405);
	assert_true(route("GET", "/v1/imagesx", &m, &status) < 0);
	assert_int_equal(status, 404);
}

static void references(void **state)
{
	(void)state;
	assert_true(lbd_image_ref_valid("python:3.12-slim"));
	assert_true(lbd_image_ref_valid("127.0.0.1:5000/ns/name:tag"));
	assert_true(lbd_image_ref_valid("sha256:ecf11d24bdfb52fba70f575c124b7410dcb6715c55e484b8c89c705c8db750c2"));
	assert_true(lbd_image_ref_valid("ecf11d24bdfb"));
	assert_false(lbd_image_ref_valid(""));
	assert_false(lbd_image_ref_valid("../etc"));
	assert_false(lbd_image_ref_valid("a/../b"));
	assert_false(lbd_image_ref_valid("/abs"));
	assert_false(lbd_image_ref_valid("has space"));
	assert_false(lbd_image_ref_valid("UPPER"));
	assert_false(lbd_image_ref_valid("a\nb"));
	char long_ref[300];
	memset(long_ref, 'a', sizeof(long_ref) - 1);
	long_ref[sizeof(long_ref) - 1] = '\0';
	assert_false(lbd_image_ref_valid(long_ref));
}

static void config_keys(void **state)
{
	(void)state;
	struct lbd_config c;
	lbd_config_defaults(&c);
	assert_false(c.pull_missing_images);
	assert_string_equal(c.insecure_registries, "");
	assert_string_equal(c.registry_ca_file, "");
	assert_int_equal(c.image_gc_after_seconds, 24 * 3600);
	struct lb_error err = { 0 };
	assert_int_equal(lbd_config_set(&c, "image_gc_after", "0", &err), 0);
	assert_int_equal(c.image_gc_after_seconds, 0);
	assert_int_equal(lbd_config_set(&c, "image_gc_after", "90s", &err), 0);
	assert_int_equal(c.image_gc_after_seconds, 90);
	assert_int_equal(lbd_config_set(&c, "image_gc_after", "8761", &err), -ERANGE);
	assert_int_equal(lbd_config_set(&c, "pull_missing_images", "on", &err), 0);
	assert_true(c.pull_missing_images);
	assert_int_equal(lbd_config_set(&c, "pull_missing_images", "maybe", &err), -EINVAL);
	assert_int_equal(lbd_config_set(&c, "insecure_registries", "127.0.0.1:5000, localhost:1", &err), 0);
	assert_int_equal(lbd_config_validate(&c, &err), 0);
	assert_int_equal(lbd_config_set(&c, "registry_ca_file", "relative.pem", &err), 0);
	assert_int_equal(lbd_config_validate(&c, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "absolute"));
	assert_int_equal(lbd_config_set(&c, "registry_ca_file", "/etc/ssl/ca.pem", &err), 0);
	assert_int_equal(lbd_config_validate(&c, &err), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(image_routes),
		cmocka_unit_test(references),
		cmocka_unit_test(config_keys),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

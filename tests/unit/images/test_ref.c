/* Unit tests for images/src/ref.c: image references parsed and normalised the way Docker does. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "lb/images.h"

static void expect(const char *in, const char *domain, const char *path, const char *tag, const char *digest,
		   const char *full)
{
	struct lb_image_ref r;
	struct lb_error err = { 0 };
	assert_int_equal(lb_image_ref_parse(in, &r, &err), 0);
	assert_string_equal(r.domain, domain);
	assert_string_equal(r.path, path);
	assert_string_equal(r.tag, tag);
	assert_string_equal(r.digest, digest);
	assert_string_equal(r.full, full);
}

#define D64 "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

static void docker_normalisation(void **state)
{
	(void)state;
	expect("python", "docker.io", "library/python", "latest", "", "docker.io/library/python:latest");
	expect("python:3.12-slim", "docker.io", "library/python", "3.12-slim", "",
	       "docker.io/library/python:3.12-slim");
	expect("ns/app", "docker.io", "ns/app", "latest", "", "docker.io/ns/app:latest");
	expect("docker.io/python", "docker.io", "library/python", "latest", "", "docker.io/library/python:latest");
	expect("index.docker.io/library/python:3", "docker.io", "library/python", "3", "",
	       "docker.io/library/python:3");
	expect("localhost:5000/python:3.12-slim", "localhost:5000", "python", "3.12-slim", "",
	       "localhost:5000/python:3.12-slim");
	expect("localhost/python", "localhost", "python", "latest", "", "localhost/python:latest");
	expect("registry.example.com:443/a/b/c@" D64, "registry.example.com:443", "a/b/c", "", D64,
	       "registry.example.com:443/a/b/c@" D64);
	expect("app:v1@" D64, "docker.io", "library/app", "v1", D64, "docker.io/library/app:v1@" D64);
	expect("my_ns/my__app-x.y", "docker.io", "my_ns/my__app-x.y", "latest", "",
	       "docker.io/my_ns/my__app-x.y:latest");
}

static void refusals(void **state)
{
	(void)state;
	static const char *const bad[] = {
		"",
		"Python",				       /* uppercase repository */
		"python:",				       /* empty tag */
		"python:-x",				       /* tag must start with [A-Za-z0-9_] */
		"python@sha256:abc",			       /* short digest */
		"python@md5:0123456789abcdef0123456789abcdef", /* not a sha256 digest */
		"/python",
		"python/",
		"a//b",
		"-a",
		"a-",
		"a..b",
		"host:99999999/x", /* port too long */
		"ex ample/x",
		"../x",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct lb_image_ref r;
		struct lb_error err = { 0 };
		assert_int_equal(lb_image_ref_parse(bad[i], &r, &err), -EINVAL);
		assert_int_equal(err.code, EINVAL);
	}
	char longname[600];
	memset(longname, 'a', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = '\0';
	struct lb_image_ref r;
	assert_int_equal(lb_image_ref_parse(longname, &r, NULL), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(docker_normalisation),
		cmocka_unit_test(refusals),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

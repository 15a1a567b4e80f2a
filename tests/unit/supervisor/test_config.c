/* Unit tests for supervisor/config.c: the defaults, every key documented in docs/configuration.md, the duration
 * forms seconds-scale tests rely on, ranges, and file errors naming the line. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "config.h"
#include "lb/fileio.h"

static void defaults_are_the_documented_ones(void **state)
{
	(void)state;
	struct lbd_config c;
	lbd_config_defaults(&c);
	assert_string_equal(c.socket_path, "/run/lensbox/lensboxd.sock");
	assert_string_equal(c.state_dir, "/var/lib/lensbox");
	assert_string_equal(c.default_image, "python:3.12-slim");
	assert_int_equal(c.idle_seconds, 15 * 60);
	assert_int_equal(c.keep_seconds, 24 * 3600);
	assert_int_equal(c.default_memory_bytes, 512ull << 20);
	assert_int_equal(c.default_cpu_millicores, 1000);
	assert_int_equal(c.default_timeout_seconds, 60);
	assert_int_equal(c.default_output_limit, 10000);
	assert_int_equal(c.max_running, 16);
	assert_int_equal(c.n_allowed_uids, 0);
	assert_int_equal(c.services_uid, 999999999); /* the resolver and relay are not root by default */
	assert_int_equal(lbd_config_validate(&c, NULL), 0);
}

static void services_uid_stays_out_of_the_sandboxes_range(void **state)
{
	(void)state;
	struct lbd_config c;
	lbd_config_defaults(&c);
	struct lb_error err = { 0 };
	assert_int_equal(lbd_config_set(&c, "services_uid", "1000000000", &err), 0); /* uid_range_start itself */
	assert_int_equal(lbd_config_validate(&c, &err), -ERANGE);
	assert_non_null(strstr(err.msg, "services_uid 1000000000 lies in the sandboxes' ids"));
	assert_int_equal(lbd_config_set(&c, "services_uid", "1000065535", &err), 0); /* the range's last uid */
	assert_int_equal(lbd_config_validate(&c, &err), -ERANGE);
	assert_int_equal(lbd_config_set(&c, "services_uid", "1000065536", &err), 0); /* the first sandbox's nobody */
	assert_int_equal(lbd_config_validate(&c, &err), -ERANGE);
	assert_int_equal(lbd_config_set(&c, "services_uid", "1000196607", &err), 0); /* the last sandbox's root */
	assert_int_equal(lbd_config_validate(&c, &err), -ERANGE);
	assert_int_equal(lbd_config_set(&c, "services_uid", "1000196608", &err), 0); /* just past them */
	assert_int_equal(lbd_config_validate(&c, &err), 0);
	assert_int_equal(lbd_config_set(&c, "services_uid", "0", &err), 0); /* lensboxd's own threads */
	assert_int_equal(lbd_config_validate(&c, &err), 0);
}

static void every_key_parses_its_default_and_is_documented(void **state)
{
	(void)state;
	char *doc = NULL;
	size_t len;
	assert_int_equal(lb_read_file_at(-100, LENSBOX_SOURCE_DIR "/docs/configuration.md", 1 << 20, &doc, &len), 0);
	const char *def, *help;
	size_t n = 0;
	for (const char *key; (key = lbd_config_key(n, &def, &help)); n++) {
		struct lbd_config c;
		lbd_config_defaults(&c);
		struct lb_error err = { 0 };
		if (lbd_config_set(&c, key, def, &err) != 0)
			fail_msg("default of %s does not parse: %s", key, err.msg);
		char needle[96];
		snprintf(needle, sizeof(needle), "| `%s` |", key);
		if (!strstr(doc, needle))
			fail_msg("%s is not documented in docs/configuration.md", key);
		assert_true(strlen(help) > 5);
	}
	assert_true(n >= 20);
	free(doc);
}

static void durations_accept_units_and_plain_numbers(void **state)
{
	(void)state;
	struct lbd_config c;
	lbd_config_defaults(&c);
	assert_int_equal(lbd_config_set(&c, "idle_minutes", "30", NULL), 0);
	assert_int_equal(c.idle_seconds, 1800);
	assert_int_equal(lbd_config_set(&c, "idle_minutes", "2s", NULL), 0);
	assert_int_equal(c.idle_seconds, 2);
	assert_int_equal(lbd_config_set(&c, "keep_hours", "90s", NULL), 0);
	assert_int_equal(c.keep_seconds, 90);
	assert_int_equal(lbd_config_set(&c, "keep_hours", "720", NULL), 0);
	assert_int_equal(c.keep_seconds, 720 * 3600);
	assert_int_equal(lbd_config_set(&c, "idle_minutes", "0s", NULL), -ERANGE);
	assert_int_equal(lbd_config_set(&c, "idle_minutes", "1441", NULL), -ERANGE);
	assert_int_equal(lbd_config_set(&c, "keep_hours", "721", NULL), -ERANGE);
	assert_int_equal(lbd_config_set(&c, "keep_hours", "soon", NULL), -EINVAL);
	assert_int_equal(c.keep_seconds, 720 * 3600); /* untouched by the failures */
}

static void ledger_retention_keys(void **state)
{
	(void)state;
	struct lbd_config c;
	lbd_config_defaults(&c);
	assert_int_equal(c.runs_keep_seconds, 30 * 86400);
	assert_int_equal(c.runs_keep_max, 100000);
	assert_int_equal(lbd_config_set(&c, "runs_keep_days", "7", NULL), 0);
	assert_int_equal(c.runs_keep_seconds, 7 * 86400);
	assert_int_equal(lbd_config_set(&c, "runs_keep_days", "3s", NULL), 0);
	assert_int_equal(c.runs_keep_seconds, 3);
	assert_int_equal(lbd_config_set(&c, "runs_keep_days", "0", NULL), 0); /* forever */
	assert_int_equal(c.runs_keep_seconds, 0);
	assert_int_equal(lbd_config_set(&c, "runs_keep_days", "36501", NULL), -ERANGE);
	assert_int_equal(lbd_config_set(&c, "runs_keep_days", "a month", NULL), -EINVAL);
	assert_int_equal(lbd_config_set(&c, "runs_keep_max", "0", NULL), 0); /* no limit */
	assert_int_equal(c.runs_keep_max, 0);
	assert_int_equal(lbd_config_set(&c, "runs_keep_max", "3", NULL), 0);
	assert_int_equal(c.runs_keep_max, 3);
	assert_int_equal(lbd_config_set(&c, "runs_keep_max", "1000000001", NULL), -ERANGE);
	assert_int_equal(c.runs_keep_max, 3);
}

static void bad_values_are_refused_with_their_range(void **state)
{
	(void)state;
	struct lbd_config c;
	lbd_config_defaults(&c);
	struct lb_error err = { 0 };
	assert_int_equal(lbd_config_set(&c, "frobnicate", "1", &err), -ENOENT);
	assert_non_null(strstr(err.msg, "frobnicate"));
	assert_int_equal(lbd_config_set(&c, "max_running", "0", &err), -ERANGE);
	assert_non_null(strstr(err.msg, "1-4096"));
	assert_int_equal(lbd_config_set(&c, "max_running", "12abc", &err), -EINVAL);
	assert_int_equal(lbd_config_set(&c, "max_running", "-1", &err), -EINVAL);
	assert_int_equal(lbd_config_set(&c, "default_cpu", "0.05", &err), -ERANGE);
	assert_int_equal(lbd_config_set(&c, "default_cpu", "500m", &err), 0);
	assert_int_equal(c.default_cpu_millicores, 500);
	assert_int_equal(lbd_config_set(&c, "default_memory", "65Gi", &err), -ERANGE);
	assert_int_equal(lbd_config_set(&c, "state_dir", "relative/dir", &err), -EINVAL);
	assert_int_equal(lbd_config_set(&c, "default_network", "everything", &err), -EINVAL);
	assert_int_equal(lbd_config_set(&c, "default_network", "web", &err), 0);
	assert_int_equal(c.default_network, LB_TIER_WEB);
	assert_int_equal(lbd_config_set(&c, "log_level", "loud", &err), -EINVAL);
	assert_int_equal(lbd_config_set(&c, "uid_range_start", "1000", &err), -ERANGE);
}

static void id_lists(void **state)
{
	(void)state;
	struct lbd_config c;
	lbd_config_defaults(&c);
	assert_int_equal(lbd_config_set(&c, "allowed_uids", "1000, 1001,1002", NULL), 0);
	assert_int_equal(c.n_allowed_uids, 3);
	assert_int_equal(c.allowed_uids[2], 1002);
	assert_int_equal(lbd_config_set(&c, "allowed_gids", "", NULL), 0);
	assert_int_equal(c.n_allowed_gids, 0);
	assert_int_equal(lbd_config_set(&c, "allowed_uids", "root", NULL), -EINVAL);
	assert_int_equal(lbd_config_set(&c, "allowed_uids", "4294967295", NULL), -ERANGE);
}

static void file_with_comments_and_an_error_line(void **state)
{
	(void)state;
	char path[] = "/tmp/lbd-config-XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	const char *text = "# a comment\n\nmax_running = 7   # trailing comment\nsocket=/run/x/y.sock\n"
			   "this line has no equals sign\n";
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	struct lbd_config c;
	lbd_config_defaults(&c);
	struct lb_error err = { 0 };
	assert_int_equal(lbd_config_load(&c, path, false, &err), -EINVAL);
	assert_non_null(strstr(err.msg, ":5:"));
	assert_int_equal(c.max_running, 7);
	assert_string_equal(c.socket_path, "/run/x/y.sock");
	unlink(path);
	assert_int_equal(lbd_config_load(&c, "/nonexistent/lensboxd.conf", true, &err), 0);
	assert_int_equal(lbd_config_load(&c, "/nonexistent/lensboxd.conf", false, &err), -ENOENT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(defaults_are_the_documented_ones),
		cmocka_unit_test(every_key_parses_its_default_and_is_documented),
		cmocka_unit_test(services_uid_stays_out_of_the_sandboxes_range),
		cmocka_unit_test(durations_accept_units_and_plain_numbers),
		cmocka_unit_test(ledger_retention_keys),
		cmocka_unit_test(bad_values_are_refused_with_their_range),
		cmocka_unit_test(id_lists),
		cmocka_unit_test(file_with_comments_and_an_error_line),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

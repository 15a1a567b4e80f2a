/* Unit tests for supervisor/res.c's lbd_retry_after: which error answers tell the client to try again, and when.
 * The answers that pass by themselves get a short wait; those that need someone to act (a missing image, a bad
 * request) get none, so a client does not loop on them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "common.h"

static void transient_answers_say_when(void **state)
{
	(void)state;
	assert_int_equal(lbd_retry_after(429, "capacity"), 1);
	assert_int_equal(lbd_retry_after(503, "busy"), 1);
	assert_int_equal(lbd_retry_after(503, "core_unavailable"), 1);
	assert_int_equal(lbd_retry_after(503, "host_unavailable"), 5);
}

static void others_say_nothing(void **state)
{
	(void)state;
	assert_int_equal(lbd_retry_after(503, "image_unavailable"), 0);
	assert_int_equal(lbd_retry_after(503, NULL), 0);
	assert_int_equal(lbd_retry_after(429, "busy"), 0); /* a code under another status is not that answer */
	assert_int_equal(lbd_retry_after(500, "internal"), 0);
	assert_int_equal(lbd_retry_after(404, "sandbox_not_found"), 0);
	assert_int_equal(lbd_retry_after(422, "capacity"), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(transient_answers_say_when),
		cmocka_unit_test(others_say_nothing),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

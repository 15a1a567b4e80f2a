/* Unit tests for lib/sandbox_state.c: the sandbox state's one name table; every unknown name refused alike. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "lb/sandbox_state.h"

static void names_round_trip(void **state)
{
	(void)state;
	for (unsigned t = 0; t < LB_SANDBOX_STATE_COUNT; t++) {
		enum lb_sandbox_state back = LB_SANDBOX_STATE_COUNT;
		assert_non_null(lb_sandbox_state_name((enum lb_sandbox_state)t));
		assert_int_equal(lb_sandbox_state_parse(lb_sandbox_state_name((enum lb_sandbox_state)t), &back), 0);
		assert_int_equal(back, t);
	}
	assert_string_equal(lb_sandbox_state_name(LB_SANDBOX_STOPPED), "stopped");
	assert_string_equal(lb_sandbox_state_name(LB_SANDBOX_RUNNING), "running");
	assert_null(lb_sandbox_state_name(LB_SANDBOX_STATE_COUNT));
	assert_null(lb_sandbox_state_name((enum lb_sandbox_state) - 1));
}

static void unknown_names_refused(void **state)
{
	(void)state;
	static const char *const bad[] = {
		"", "Running", "STOPPED", "run", "starting", "running ", " stopped", "paused"
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		enum lb_sandbox_state t = LB_SANDBOX_RUNNING;
		assert_int_equal(lb_sandbox_state_parse(bad[i], &t), -EINVAL);
		assert_int_equal(t, LB_SANDBOX_RUNNING); /* untouched */
	}
	enum lb_sandbox_state t = LB_SANDBOX_STOPPED;
	assert_int_equal(lb_sandbox_state_parse(NULL, &t), -EINVAL);
	assert_int_equal(t, LB_SANDBOX_STOPPED);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(names_round_trip),
		cmocka_unit_test(unknown_names_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

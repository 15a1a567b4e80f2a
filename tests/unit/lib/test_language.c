/* Unit tests for lib/language.c: the run language's one name table; every unknown name refused alike. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "lb/language.h"

static void names_round_trip(void **state)
{
	(void)state;
	for (unsigned t = 0; t < LB_LANGUAGE_COUNT; t++) {
		enum lb_language back = LB_LANGUAGE_COUNT;
		assert_non_null(lb_language_name((enum lb_language)t));
		assert_int_equal(lb_language_parse(lb_language_name((enum lb_language)t), &back), 0);
		assert_int_equal(back, t);
	}
	assert_string_equal(lb_language_name(LB_LANGUAGE_PYTHON), "python");
	assert_string_equal(lb_language_name(LB_LANGUAGE_BASH), "bash");
	assert_null(lb_language_name(LB_LANGUAGE_COUNT));
	assert_null(lb_language_name((enum lb_language) - 1));
}

static void unknown_names_refused(void **state)
{
	(void)state;
	static const char *const bad[] = {
		"", "Python", "BASH", "python3", "sh", "bash ", " python", "other", "pytho"
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		enum lb_language t = LB_LANGUAGE_BASH;
		assert_int_equal(lb_language_parse(bad[i], &t), -EINVAL);
		assert_int_equal(t, LB_LANGUAGE_BASH); /* untouched */
	}
	enum lb_language t = LB_LANGUAGE_PYTHON;
	assert_int_equal(lb_language_parse(NULL, &t), -EINVAL);
	assert_int_equal(t, LB_LANGUAGE_PYTHON);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(names_round_trip),
		cmocka_unit_test(unknown_names_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

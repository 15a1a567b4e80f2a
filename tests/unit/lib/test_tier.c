/* Unit tests for lib/tier.c: the network tier's one name table; every unknown name refused alike. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "lb/tier.h"

static void names_round_trip(void **state)
{
	(void)state;
	for (unsigned t = 0; t < LB_TIER_COUNT; t++) {
		enum lb_tier back = LB_TIER_COUNT;
		assert_non_null(lb_tier_name((enum lb_tier)t));
		assert_int_equal(lb_tier_parse(lb_tier_name((enum lb_tier)t), &back), 0);
		assert_int_equal(back, t);
	}
	assert_string_equal(lb_tier_name(LB_TIER_OFF), "off");
	assert_string_equal(lb_tier_name(LB_TIER_PACKAGES), "packages");
	assert_string_equal(lb_tier_name(LB_TIER_WEB), "web");
	assert_null(lb_tier_name(LB_TIER_COUNT));
	assert_null(lb_tier_name((enum lb_tier) - 1));
}

static void unknown_names_refused(void **state)
{
	(void)state;
	static const char *const bad[] = { "", "Off", "WEB", "web ", " web", "lan", "of", "webs", "packages\n" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		enum lb_tier t = LB_TIER_WEB;
		assert_int_equal(lb_tier_parse(bad[i], &t), -EINVAL);
		assert_int_equal(t, LB_TIER_WEB); /* untouched */
	}
	enum lb_tier t = LB_TIER_PACKAGES;
	assert_int_equal(lb_tier_parse(NULL, &t), -EINVAL);
	assert_int_equal(t, LB_TIER_PACKAGES);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(names_round_trip),
		cmocka_unit_test(unknown_names_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Unit tests for supervisor/wire.c: a sandbox spec survives its wire form (API process -> core) unchanged, only the
 * fields the client gave travel, and the core refuses out-of-range values a compromised API process could send even
 * where the decoder's own checks would not (it checks them again against the documented ranges). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "common.h"
#include "proto.h"

static void round_trip(void **state)
{
	(void)state;
	struct lbd_config cfg;
	lbd_config_defaults(&cfg);
	struct lbd_spec_request in, out;
	lbd_spec_defaults(&cfg, &in);
	in.has_network = in.has_memory = in.has_idle = in.has_image = true;
	in.spec.network = LB_TIER_WEB;
	in.spec.memory_bytes = 2ull << 30;
	in.spec.idle_seconds = 7ull * 60;
	strcpy(in.spec.image, "registry.local:5000/py:3.12");
	struct lbp_spec w;
	lbd_spec_to_wire(&in, &w);
	assert_int_equal(w.has, LBP_SPEC_NETWORK | LBP_SPEC_MEMORY | LBP_SPEC_IDLE | LBP_SPEC_IMAGE);
	assert_int_equal(w.cpu_millicores, 0); /* not given: not sent */
	struct lbd_fail f = { 0 };
	assert_int_equal(lbd_spec_from_wire(&cfg, &w, &out, &f), 0);
	assert_memory_equal(&in, &out, sizeof(in));
}

static void out_of_range_refused(void **state)
{
	(void)state;
	struct lbd_config cfg;
	lbd_config_defaults(&cfg);
	struct lbd_spec_request out;
	struct lbd_fail f = { 0 };
	struct lbp_spec w = { .has = LBP_SPEC_CPU, .cpu_millicores = 99 };
	assert_true(lbd_spec_from_wire(&cfg, &w, &out, &f) < 0);
	assert_int_equal(f.status, 422);
	w = (struct lbp_spec){ .has = LBP_SPEC_MEMORY, .memory_bytes = (64ull << 30) + 1 };
	assert_true(lbd_spec_from_wire(&cfg, &w, &out, &f) < 0);
	w = (struct lbp_spec){ .has = LBP_SPEC_NETWORK, .network = LB_TIER_COUNT };
	assert_true(lbd_spec_from_wire(&cfg, &w, &out, &f) < 0);
	w = (struct lbp_spec){ .has = LBP_SPEC_IMAGE };
	memset(w.image, 'a', sizeof(w.image)); /* no NUL inside the array */
	assert_true(lbd_spec_from_wire(&cfg, &w, &out, &f) < 0);
	w = (struct lbp_spec){ .has = LBP_SPEC_IMAGE, .image = "../../etc" };
	assert_true(lbd_spec_from_wire(&cfg, &w, &out, &f) < 0);
	w = (struct lbp_spec){ .has = LBP_SPEC_KEEP, .keep_hours = 721 };
	assert_true(lbd_spec_from_wire(&cfg, &w, &out, &f) < 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = { cmocka_unit_test(round_trip), cmocka_unit_test(out_of_range_refused) };
	return cmocka_run_group_tests(tests, NULL, NULL);
}

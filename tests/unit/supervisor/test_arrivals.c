/* Unit tests for supervisor/core/arrivals.c: the spare pool follows the largest recent burst of new sandboxes,
 * bounded by spare_sandboxes below and spare_sandboxes_max above, and falls back once the burst is out of the
 * window. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "arrivals.h"

#define WINDOW 60000
#define BURST  5000

static void none_arrived(void **state)
{
	(void)state;
	struct lbd_arrivals a;
	memset(&a, 0, sizeof(a));
	assert_int_equal(lbd_arrivals_peak(&a, 1000000, WINDOW, BURST), 0);
}

static void a_burst_counts_and_spaced_arrivals_do_not(void **state)
{
	(void)state;
	struct lbd_arrivals a;
	memset(&a, 0, sizeof(a));
	/* one every 10 s: never two within 5 s */
	for (uint64_t t = 100000; t < 160000; t += 10000)
		lbd_arrivals_note(&a, t);
	assert_int_equal(lbd_arrivals_peak(&a, 160000, WINDOW, BURST), 1);
	/* then three within a second */
	lbd_arrivals_note(&a, 161000);
	lbd_arrivals_note(&a, 161400);
	lbd_arrivals_note(&a, 161900);
	assert_int_equal(lbd_arrivals_peak(&a, 162000, WINDOW, BURST), 3);
	/* the burst is the pool's size for a minute, then it is out of the window */
	assert_int_equal(lbd_arrivals_peak(&a, 161000 + WINDOW, WINDOW, BURST), 3);
	assert_int_equal(lbd_arrivals_peak(&a, 161900 + WINDOW + 1, WINDOW, BURST), 0);
	/* an arrival exactly burst_ms after another is another burst */
	lbd_arrivals_note(&a, 300000);
	lbd_arrivals_note(&a, 300000 + BURST);
	assert_int_equal(lbd_arrivals_peak(&a, 300000 + BURST, WINDOW, BURST), 1);
}

static void only_the_newest_are_kept(void **state)
{
	(void)state;
	struct lbd_arrivals a;
	memset(&a, 0, sizeof(a));
	for (unsigned i = 0; i < 3 * LBD_ARRIVALS_KEPT; i++)
		lbd_arrivals_note(&a, 5000 + i);
	assert_int_equal(a.n, LBD_ARRIVALS_KEPT);
	assert_int_equal(lbd_arrivals_peak(&a, 6000, WINDOW, BURST), LBD_ARRIVALS_KEPT);
}

static void the_pool_is_bounded(void **state)
{
	(void)state;
	/* spares off: nothing, whatever arrived */
	assert_int_equal(lbd_arrivals_spares(10, 0, 4), 0);
	/* the floor when nothing or little arrived */
	assert_int_equal(lbd_arrivals_spares(0, 1, 4), 1);
	assert_int_equal(lbd_arrivals_spares(1, 2, 4), 2);
	/* the burst, up to the ceiling */
	assert_int_equal(lbd_arrivals_spares(3, 1, 4), 3);
	assert_int_equal(lbd_arrivals_spares(9, 1, 4), 4);
	/* a ceiling below the floor: no growth */
	assert_int_equal(lbd_arrivals_spares(9, 3, 1), 3);
	assert_int_equal(lbd_arrivals_spares(UINT32_MAX, 2, 0), 2);
}

/* After failures to make a spare: 1 s, then doubling, never above the bound (nor overflowing for a long series). */
static void retries_back_off_to_a_bound(void **state)
{
	(void)state;
	assert_int_equal(lbd_spares_retry_ms(1, 30000), 1000);
	assert_int_equal(lbd_spares_retry_ms(2, 30000), 2000);
	assert_int_equal(lbd_spares_retry_ms(5, 30000), 16000);
	assert_int_equal(lbd_spares_retry_ms(6, 30000), 30000);
	assert_int_equal(lbd_spares_retry_ms(UINT32_MAX, 30000), 30000);
	assert_int_equal(lbd_spares_retry_ms(3, 500), 500);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(none_arrived),
		cmocka_unit_test(a_burst_counts_and_spaced_arrivals_do_not),
		cmocka_unit_test(only_the_newest_are_kept),
		cmocka_unit_test(the_pool_is_bounded),
		cmocka_unit_test(retries_back_off_to_a_bound),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

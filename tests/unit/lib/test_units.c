/* Unit tests for lib/units.c: the sizes, CPU amounts and durations people type into specs and config. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "lb/units.h"

static void sizes_parse(void **state)
{
	(void)state;
	uint64_t v;
	assert_int_equal(lb_parse_size("512Mi", &v), 0);
	assert_int_equal(v, 512ull << 20);
	assert_int_equal(lb_parse_size("2Gi", &v), 0);
	assert_int_equal(v, 2ull << 30);
	assert_int_equal(lb_parse_size("1.5Gi", &v), 0);
	assert_int_equal(v, 3ull << 29);
	assert_int_equal(lb_parse_size("1073741824", &v), 0);
	assert_int_equal(v, 1073741824ull);
	assert_int_equal(lb_parse_size("64M", &v), 0);
	assert_int_equal(v, 64000000ull);
}

static void sizes_reject(void **state)
{
	(void)state;
	uint64_t v = 7;
	assert_int_equal(lb_parse_size("", &v), -EINVAL);
	assert_int_equal(lb_parse_size("-1Gi", &v), -EINVAL);
	assert_int_equal(lb_parse_size("12Qi", &v), -EINVAL);
	assert_int_equal(lb_parse_size("1.5", &v), -EINVAL);
	assert_int_equal(lb_parse_size("5Mi ", &v), -EINVAL);
	assert_int_equal(lb_parse_size("99999999999999999999", &v), -ERANGE);
	assert_int_equal(lb_parse_size("99999999999Ti", &v), -ERANGE);
	assert_int_equal(v, 7);
}

static void cpu_parse(void **state)
{
	(void)state;
	uint32_t m;
	assert_int_equal(lb_parse_cpu("1", &m), 0);
	assert_int_equal(m, 1000);
	assert_int_equal(lb_parse_cpu("0.5", &m), 0);
	assert_int_equal(m, 500);
	assert_int_equal(lb_parse_cpu("500m", &m), 0);
	assert_int_equal(m, 500);
	assert_int_equal(lb_parse_cpu("0.0001", &m), -EINVAL);
	assert_int_equal(lb_parse_cpu("1.5m", &m), -EINVAL);
	assert_int_equal(lb_parse_cpu("abc", &m), -EINVAL);
}

static void durations_parse(void **state)
{
	(void)state;
	uint64_t s;
	assert_int_equal(lb_parse_duration("60", &s), 0);
	assert_int_equal(s, 60);
	assert_int_equal(lb_parse_duration("15m", &s), 0);
	assert_int_equal(s, 900);
	assert_int_equal(lb_parse_duration("24h", &s), 0);
	assert_int_equal(s, 86400);
	assert_int_equal(lb_parse_duration("1.5h", &s), -EINVAL);
}

static void formatting(void **state)
{
	(void)state;
	char buf[32];
	assert_string_equal(lb_format_size(512ull << 20, buf, sizeof(buf)), "512Mi");
	assert_string_equal(lb_format_size(1536ull << 20, buf, sizeof(buf)), "1536Mi");
	assert_string_equal(lb_format_size(1000, buf, sizeof(buf)), "1000");
	assert_string_equal(lb_format_size(1500000, buf, sizeof(buf)), "1.4Mi");
	assert_string_equal(lb_format_cpu(500, buf, sizeof(buf)), "0.5");
	assert_string_equal(lb_format_cpu(2000, buf, sizeof(buf)), "2");
	assert_string_equal(lb_format_cpu(250, buf, sizeof(buf)), "250m");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(sizes_parse),	   cmocka_unit_test(sizes_reject), cmocka_unit_test(cpu_parse),
		cmocka_unit_test(durations_parse), cmocka_unit_test(formatting),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Unit tests for lib/name.c: the sandbox name's one grammar, ^[a-z0-9][a-z0-9._-]{0,62}$. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <cmocka.h>

#include "lb/name.h"

static void grammar(void **state)
{
	(void)state;
	static const char *const good[] = { "a", "0", "chat-1", "lens.chat_42", "a-", "9.9" };
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
		assert_true(lb_sandbox_name_valid(good[i]));
	static const char *const bad[] = { "", "-a", ".a", "_a", "A", "a/b", "../x", "a b", "a\n", "é", "a:b" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_false(lb_sandbox_name_valid(bad[i]));
	assert_false(lb_sandbox_name_valid(NULL));
	char longest[LB_NAME_MAX + 2];
	memset(longest, 'a', sizeof(longest));
	longest[LB_NAME_MAX] = '\0';
	assert_true(lb_sandbox_name_valid(longest));
	longest[LB_NAME_MAX] = 'a';
	longest[LB_NAME_MAX + 1] = '\0';
	assert_false(lb_sandbox_name_valid(longest));
}

int main(void)
{
	const struct CMUnitTest tests[] = { cmocka_unit_test(grammar) };
	return cmocka_run_group_tests(tests, NULL, NULL);
}

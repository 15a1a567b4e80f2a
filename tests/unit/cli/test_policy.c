/* Unit tests for clients/cli/policy_check.c and seccomp_resolve.c: `lensbox policy check` on the real policy
 * directory (clean) and on copies with one broken line in each kind of file (that file and line reported, and only
 * that), a symlink and a FIFO in place of a policy file, and Docker's conditional rules resolved as
 * policy/tools/seccomp-resolve resolves them. The expected lines are found in the copies by the test itself. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "policy.h"

#define POLICY LENSBOX_SOURCE_DIR "/policy"

static char tmp[64];

static int copy_policy(void **state)
{
	(void)state;
	snprintf(tmp, sizeof(tmp), "/tmp/lensbox-policy-test-XXXXXX");
	if (!mkdtemp(tmp))
		return -1;
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "cp -r '%s/.' '%s/'", POLICY, tmp);
	return system(cmd) == 0 ? 0 : -1;
}

static int remove_copy(void **state)
{
	(void)state;
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
	return system(cmd) == 0 ? 0 : -1;
}

/* Replaces the first `from` in tmp/file with `to`; returns the line it was on. */
static unsigned break_line(const char *file, const char *from, const char *to)
{
	char path[256];
	snprintf(path, sizeof(path), "%s/%s", tmp, file);
	FILE *f = fopen(path, "r");
	assert_non_null(f);
	static char buf[1 << 20];
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	char *at = strstr(buf, from);
	assert_non_null(at);
	unsigned line = 1;
	for (char *c = buf; c < at; c++)
		line += *c == '\n';
	f = fopen(path, "w");
	assert_non_null(f);
	fwrite(buf, 1, (size_t)(at - buf), f);
	fputs(to, f);
	fputs(at + strlen(from), f);
	fclose(f);
	return line;
}

/* Exactly one error, in file at line, whose reason contains want. */
static void expect_one(const char *file, unsigned line, const char *want, bool nft)
{
	struct lbc_findings f = { 0 };
	struct lb_error err = { 0 };
	assert_int_equal(lbc_policy_check(tmp, nft, &f, &err), 0);
	for (size_t i = 0; i < f.n; i++)
		if (!f.v[i].note)
			print_message("%s:%u: %s\n", f.v[i].file, f.v[i].line, f.v[i].reason);
	assert_int_equal(lbc_findings_errors(&f), 1);
	for (size_t i = 0; i < f.n; i++) {
		if (f.v[i].note)
			continue;
		assert_string_equal(f.v[i].file, file);
		assert_int_equal(f.v[i].line, line);
		assert_non_null(strstr(f.v[i].reason, want));
	}
	lbc_findings_free(&f);
}

static void real_policy_is_clean(void **state)
{
	(void)state;
	for (int nft = 0; nft < 2; nft++) {
		struct lbc_findings f = { 0 };
		struct lb_error err = { 0 };
		assert_int_equal(lbc_policy_check(POLICY, nft, &f, &err), 0);
		for (size_t i = 0; i < f.n; i++)
			print_message("%s:%u: %s\n", f.v[i].file, f.v[i].line, f.v[i].reason);
		assert_int_equal(lbc_findings_errors(&f), 0);
		lbc_findings_free(&f);
	}
}

static void seccomp_line(void **state)
{
	(void)state;
	unsigned line = break_line("seccomp.json", "\"keyctl\"", "\"keyctll\"");
	expect_one("seccomp.json", line, "unknown syscall \"keyctll\"", false);
}

static void landlock_line(void **state)
{
	(void)state;
	unsigned line = break_line("landlock.rules", "\nwrite /tmp\n", "\nwirte /tmp\n") + 1;
	expect_one("landlock.rules", line, "unknown directive \"wirte\"", false);
}

static void limits_line(void **state)
{
	(void)state;
	unsigned line = break_line("limits.conf", "\npids = 256", "\npids = lots") + 1;
	expect_one("limits.conf", line, "\"lots\"", false);
}

static void denied_line(void **state)
{
	(void)state;
	unsigned line = break_line("network/denied.list", "\n10.0.0.0/8", "\n10.0.0.1/8") + 1;
	expect_one("network/denied.list", line, "address range", false);
}

static void packages_line(void **state)
{
	(void)state;
	unsigned line = break_line("network/packages.list", "\npypi.org", "\npypi..org") + 1;
	expect_one("network/packages.list", line, "host name", false);
}

static void template_word(void **state)
{
	(void)state;
	unsigned line = break_line("network/base.nft", "ip saddr {{POOL4}}", "ip saddr {{POOL}}");
	expect_one("network/base.nft", line, "{{POOL}} is not a word lensboxd fills", false);
}

static void nft_rule_in_a_tier(void **state)
{
	(void)state;
	unsigned line = break_line("network/web.nft", "goto allowed", "goto allowd");
	expect_one("network/web.nft", line, "No such file or directory", true);
}

static void nft_syntax_in_services(void **state)
{
	(void)state;
	unsigned line = break_line("network/services.nft", "related } accept", "related } acept");
	expect_one("network/services.nft", line, "syntax error", true);
}

static void errors_of_every_file(void **state)
{
	(void)state;
	break_line("landlock.rules", "\nwrite /tmp\n", "\nwirte /tmp\n");
	break_line("limits.conf", "\npids = 256", "\npids = lots");
	break_line("network/web.nft", "{{SB}}_fwd {", "{{SB}}_fwd {{{OOPS}}");
	struct lbc_findings f = { 0 };
	struct lb_error err = { 0 };
	assert_int_equal(lbc_policy_check(tmp, false, &f, &err), 0);
	assert_int_equal(lbc_findings_errors(&f), 3);
	lbc_findings_free(&f);
}

static void symlink_and_fifo_refused(void **state)
{
	(void)state;
	char path[256];
	snprintf(path, sizeof(path), "%s/limits.conf", tmp);
	assert_int_equal(unlink(path), 0);
	assert_int_equal(symlink("/etc/passwd", path), 0);
	snprintf(path, sizeof(path), "%s/network/packages.list", tmp);
	assert_int_equal(unlink(path), 0);
	assert_int_equal(mkfifo(path, 0600), 0); /* must not hang the check */
	struct lbc_findings f = { 0 };
	struct lb_error err = { 0 };
	assert_int_equal(lbc_policy_check(tmp, false, &f, &err), 0);
	assert_int_equal(lbc_findings_errors(&f), 2);
	assert_string_equal(f.v[0].file, "limits.conf");
	assert_non_null(strstr(f.v[0].reason, "cannot open"));
	assert_string_equal(f.v[1].file, "network/packages.list");
	assert_non_null(strstr(f.v[1].reason, "not a regular file"));
	lbc_findings_free(&f);
}

static void docker_conditions_resolved(void **state)
{
	(void)state;
	static const char json[] =
	    "{\"defaultAction\":\"SCMP_ACT_ERRNO\",\"defaultErrnoRet\":1,\"syscalls\":["
	    "{\"names\":[\"read\",\"write\"],\"action\":\"SCMP_ACT_ALLOW\"},"
	    "{\"names\":[\"arch_prctl\"],\"action\":\"SCMP_ACT_ALLOW\",\"includes\":{\"arches\":[\"amd64\"]}},"
	    "{\"names\":[\"cacheflush\"],\"action\":\"SCMP_ACT_ALLOW\",\"includes\":{\"arches\":[\"arm64\"]}},"
	    "{\"names\":[\"mount\"],\"action\":\"SCMP_ACT_ALLOW\",\"includes\":{\"caps\":[\"CAP_SYS_ADMIN\"]}},"
	    "{\"names\":[\"clone\"],\"action\":\"SCMP_ACT_ALLOW\",\"args\":[{\"index\":0,\"value\":2114060288,"
	    "\"op\":\"SCMP_CMP_MASKED_EQ\"}],\"excludes\":{\"caps\":[\"CAP_SYS_ADMIN\"],\"arches\":[\"s390x\"]}},"
	    "{\"names\":[\"ptrace\"],\"action\":\"SCMP_ACT_ALLOW\",\"includes\":{\"minKernel\":\"4.8\"}},"
	    "{\"names\":[\"clone3\"],\"action\":\"SCMP_ACT_ERRNO\",\"errnoRet\":38}]}";
	struct lbc_sc_profile p = { 0 };
	struct lb_error err = { 0 };
	assert_int_equal(lbc_seccomp_resolve(json, strlen(json), "amd64", &p, &err), 0);
	assert_string_equal(p.default_action, "ERRNO(1)");
	static const char *const want[][3] = {
		{ "arch_prctl", "ALLOW", "" }, { "clone", "ALLOW", "a0 MASKED_EQ 0x7e020000" },
		{ "clone3", "ERRNO(38)", "" }, { "ptrace", "ALLOW", "" },
		{ "read", "ALLOW", "" },       { "write", "ALLOW", "" },
	};
	assert_int_equal(p.n, 6);
	for (size_t i = 0; i < p.n; i++) {
		assert_string_equal(p.v[i].name, want[i][0]);
		assert_string_equal(p.v[i].action, want[i][1]);
		assert_string_equal(p.v[i].args, want[i][2]);
	}
	assert_true(lbc_sc_allows(&p, "read"));
	assert_false(lbc_sc_allows(&p, "mount"));
	lbc_sc_profile_free(&p);
	/* arm64 takes cacheflush and not arch_prctl */
	assert_int_equal(lbc_seccomp_resolve(json, strlen(json), "arm64", &p, &err), 0);
	assert_true(lbc_sc_allows(&p, "cacheflush"));
	assert_false(lbc_sc_allows(&p, "arch_prctl"));
	lbc_sc_profile_free(&p);
	/* hostile shapes are errors, not crashes */
	static const char *const bad[] = { "[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]", "{\"defaultAction\":1}",
					   "{\"defaultAction\":\"SCMP_ACT_ALLOW\",\"syscalls\":[{\"names\":[1]}]}",
					   "{" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_true(lbc_seccomp_resolve(bad[i], strlen(bad[i]), "amd64", &p, &err) < 0);
}

static void json_paths_to_lines(void **state)
{
	(void)state;
	static const char t[] = "{\n \"a\": [\n  1,\n  {\"b\": \"x,]}\\\"\",\n   \"c\": [7, 8]}\n ],\n \"d\": 2\n}";
	assert_int_equal(lbc_json_path_line(t, strlen(t), "a"), 2);
	assert_int_equal(lbc_json_path_line(t, strlen(t), "a[0]"), 3);
	assert_int_equal(lbc_json_path_line(t, strlen(t), "a[1].b"), 4);
	assert_int_equal(lbc_json_path_line(t, strlen(t), "a[1].c[1]"), 5);
	assert_int_equal(lbc_json_path_line(t, strlen(t), "d"), 7);
	assert_int_equal(lbc_json_path_line(t, strlen(t), "e"), 0);
	static const char *const hostile[] = { "1,\"a\":2", "}}]]", "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[", "\"\\",
					       "{\t]\n\"a\": 1" };
	for (size_t i = 0; i < sizeof(hostile) / sizeof(hostile[0]); i++)
		assert_int_equal(lbc_json_path_line(hostile[i], strlen(hostile[i]), "a"), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(real_policy_is_clean),
		cmocka_unit_test_setup_teardown(seccomp_line, copy_policy, remove_copy),
		cmocka_unit_test_setup_teardown(landlock_line, copy_policy, remove_copy),
		cmocka_unit_test_setup_teardown(limits_line, copy_policy, remove_copy),
		cmocka_unit_test_setup_teardown(denied_line, copy_policy, remove_copy),
		cmocka_unit_test_setup_teardown(packages_line, copy_policy, remove_copy),
		cmocka_unit_test_setup_teardown(template_word, copy_policy, remove_copy),
		cmocka_unit_test_setup_teardown(nft_rule_in_a_tier, copy_policy, remove_copy),
		cmocka_unit_test_setup_teardown(nft_syntax_in_services, copy_policy, remove_copy),
		cmocka_unit_test_setup_teardown(errors_of_every_file, copy_policy, remove_copy),
		cmocka_unit_test_setup_teardown(symlink_and_fifo_refused, copy_policy, remove_copy),
		cmocka_unit_test(docker_conditions_resolved),
		cmocka_unit_test(json_paths_to_lines),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * test_policy_load.c — lb_policy_load() on the real policy directory, and each parser refusing malformed input with
 * an error that names the file, the line (or JSON path) and the problem. Runs as any user; writes only under a
 * private mkdtemp directory.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lb/policy-parse.h"
#include "lb/policy.h"

#define POLICY LENSBOX_SOURCE_DIR "/policy"

static void test_real_policy(void **state)
{
	(void)state;
	struct lb_policy *p = NULL;
	struct lb_error err = { 0 };
	int r = lb_policy_load(POLICY, &p, &err);
	if (r < 0)
		fail_msg("%s", err.msg);
	assert_string_equal(p->dir, POLICY);
	assert_true(p->seccomp.len > 10 && p->seccomp.filter);
	assert_true(p->seccomp_rules > 250);

	assert_int_equal(p->landlock.min_abi, 6);
	assert_int_equal(p->landlock.degraded_min_abi, 6);
	assert_true(p->landlock.scope_abstract_unix && p->landlock.scope_signal);
	bool root = false, sandbox = false, tmp = false;
	for (size_t i = 0; i < p->landlock.n_rules; i++) {
		const struct lb_landlock_path_rule *rule = &p->landlock.rules[i];
		if (strcmp(rule->path, "/") == 0)
			root = rule->access == (LB_LL_READ | LB_LL_EXEC);
		if (strcmp(rule->path, "/sandbox") == 0)
			sandbox = rule->access == LB_LL_WRITE;
		if (strcmp(rule->path, "/tmp") == 0)
			tmp = rule->access == LB_LL_WRITE;
		if (strcmp(rule->path, "/dev/pts") == 0)
			assert_int_equal(rule->access, LB_LL_WRITE | LB_LL_DEV_IOCTL);
	}
	assert_true(root && sandbox && tmp);

	assert_int_equal(p->limits.cpu_millicores, 1000);
	assert_int_equal(p->limits.memory_bytes, 512ull << 20);
	assert_int_equal(p->limits.pids, 256);
	assert_int_equal(p->limits.disk_bytes, 1ull << 30);
	assert_int_equal(p->limits.timeout_seconds, 60);
	assert_int_equal(p->limits.sandbox_uid, 1000);

	lb_policy_free(p);
}

/* Each malformed input must fail with this errno and a message containing this text. */
struct bad {
	const char *text;
	int code;
	const char *msg;
};

static void expect_err(int r, const struct lb_error *err, const struct bad *b)
{
	if (r >= 0)
		fail_msg("accepted: %s", b->text);
	if (err->code != b->code || !strstr(err->msg, b->msg))
		fail_msg("input %s\n  got (%d) %s\n  want (%d) ...%s...", b->text, err->code, err->msg, b->code,
			 b->msg);
	assert_int_equal(r, -b->code);
}

static void test_landlock_errors(void **state)
{
	(void)state;
	static const struct bad cases[] = {
		{ "min_abi 6\nwirte /tmp\n", EINVAL, "ll:2: unknown directive \"wirte\"" },
		{ "min_abi 6\nwrite tmp\n", EINVAL, "ll:2: \"tmp\" is not a normalised absolute path" },
		{ "min_abi 6\nwrite /a/../etc\n", EINVAL, "ll:2: \"/a/../etc\"" },
		{ "min_abi 6\nwrite /tmp/\n", EINVAL, "ll:2: \"/tmp/\"" },
		{ "min_abi 6\nwrite //tmp\n", EINVAL, "ll:2: \"//tmp\"" },
		{ "min_abi 6\nwrite /./tmp\n", EINVAL, "ll:2: \"/./tmp\"" },
		{ "read-exec /\n", EINVAL, "ll: min_abi is required" },
		{ "min_abi 6\nmin_abi 7\nread /\n", EINVAL, "ll:2: min_abi given twice" },
		{ "min_abi 0\nread /\n", EINVAL, "ll:1: min_abi must be an integer" },
		{ "min_abi six\nread /\n", EINVAL, "ll:1: min_abi must be an integer" },
		{ "min_abi 4\ndegraded_min_abi 5\nread /\n", EINVAL, "degraded_min_abi 5 is above min_abi 4" },
		{ "min_abi 6\nscope pipes\nread /\n", EINVAL, "ll:2: unknown scope \"pipes\"" },
		{ "min_abi 6\nscope signal\nscope signal\n", EINVAL, "ll:3: scope signal given twice" },
		{ "min_abi 6\n", EINVAL, "ll: no path rules" },
		{ "min_abi 6\nwrite /tmp /sandbox\n", EINVAL, "ll:2: expected \"<directive> <argument>\"" },
		{ "min_abi 6\nwrite\n", EINVAL, "ll:2: expected" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct lb_landlock_policy p = { 0 };
		struct lb_error err = { 0 };
		expect_err(lb_landlock_parse(cases[i].text, "ll", &p, &err), &err, &cases[i]);
		assert_null(p.rules);
	}
	/* Comments, blanks, merging of grants for one path, an allowed degraded level. */
	struct lb_landlock_policy p = { 0 };
	struct lb_error err = { 0 };
	assert_int_equal(
	    lb_landlock_parse("# x\n\n min_abi 7 # y\ndegraded_min_abi 4\nread /a\nwrite /a\n", "ll", &p, &err), 0);
	assert_int_equal(p.n_rules, 1);
	assert_int_equal(p.rules[0].access, LB_LL_READ | LB_LL_WRITE);
	assert_int_equal(p.degraded_min_abi, 4);
	assert_false(p.scope_signal);
	lb_landlock_policy_clear(&p);
}

#define LIMITS_OK                                                                                                \
	"cpu = 1\nmemory = 512Mi\npids = 256\ndisk = 1Gi\ntmp = 64Mi\nshm = 64Mi\noutput = 1Mi\ntimeout = 60s\n" \
	"sandbox_uid = 1000\n"

static void test_limits_errors(void **state)
{
	(void)state;
	static const struct bad cases[] = {
		{ LIMITS_OK "sandbox_gid = 1000\nswap = 1Gi\n", EINVAL, "lc:11: unknown key \"swap\"" },
		{ LIMITS_OK, EINVAL, "lc: missing \"sandbox_gid\"" },
		{ LIMITS_OK "sandbox_gid = 1000\ncpu = 2\n", EINVAL, "lc:11: \"cpu\" given twice" },
		{ "memory = lots\n", EINVAL, "lc:1: memory: expected a size" },
		{ "memory = 12\n", ERANGE, "lc:1: memory: expected a size" },
		{ "sandbox_uid = 0\n", ERANGE, "lc:1: sandbox_uid: expected an id 1..65533 (never 0" },
		{ "sandbox_uid = 65534\n", ERANGE, "lc:1: sandbox_uid: expected an id 1..65533" },
		{ "sandbox_gid = 65535\n", ERANGE, "lc:1: sandbox_gid" },
		{ "timeout = 0\n", ERANGE, "lc:1: timeout" },
		{ "timeout = 2d\n", ERANGE, "lc:1: timeout" },
		{ "pids = -1\n", EINVAL, "lc:1: pids" },
		{ "cpu = 0\n", ERANGE, "lc:1: cpu" },
		{ "cpu 1\n", EINVAL, "lc:1: expected \"key = value\"" },
		{ "CPU = 1\n", EINVAL, "lc:1: bad key \"CPU\"" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct lb_limits_policy l = { 0 };
		struct lb_error err = { 0 };
		expect_err(lb_limits_parse(cases[i].text, "lc", &l, &err), &err, &cases[i]);
	}
	struct lb_limits_policy l = { 0 };
	struct lb_error err = { 0 };
	assert_int_equal(lb_limits_parse(LIMITS_OK "sandbox_gid = 1001 # x\n", "lc", &l, &err), 0);
	assert_int_equal(l.sandbox_gid, 1001);
	assert_int_equal(l.tmp_bytes, 64ull << 20);
}

#define SC_HEAD                                                                                                        \
	"{\"defaultAction\":\"SCMP_ACT_ERRNO\",\"defaultErrnoRet\":38,\"archMap\":[{\"architecture\":\"SCMP_ARCH_X86_" \
	"64\"}],"
#define SC(rules) SC_HEAD "\"syscalls\":[" rules "]}"

static void test_seccomp_errors(void **state)
{
	(void)state;
	static const struct bad cases[] = {
		{ "{", EINVAL, "sc: invalid JSON" },
		{ "[]", EINVAL, "sc: top level: expected an object" },
		{ SC("") "x", EINVAL, "sc: invalid JSON" },
		{ "{\"defaultAction\":\"SCMP_ACT_ERRNO\",\"flags\":[]}", EINVAL,
		  "sc: top level: unknown key \"flags\"" },
		{ "{\"defaultAction\":\"SCMP_ACT_ERRNO\",\"defaultAction\":\"SCMP_ACT_ERRNO\"}", EINVAL,
		  "key \"defaultAction\" appears twice" },
		{ "{\"defaultAction\":\"SCMP_ACT_ERRNO\",\"archMap\":[]}", EINVAL,
		  "needs \"defaultAction\", \"archMap\" and \"syscalls\"" },
		{ "{\"defaultAction\":\"SCMP_ACT_ALLOW\",\"archMap\":[],\"syscalls\":[]}", EINVAL,
		  "defaultAction: a profile must be an allowlist" },
		{ "{\"defaultAction\":\"SCMP_ACT_NOPE\",\"archMap\":[],\"syscalls\":[]}", EINVAL,
		  "defaultAction: unknown action \"SCMP_ACT_NOPE\"" },
		{ "{\"defaultAction\":\"SCMP_ACT_ERRNO\",\"badArchAction\":\"SCMP_ACT_ALLOW\",\"archMap\":[],"
		  "\"syscalls\":[]}",
		  EINVAL, "badArchAction: must kill" },
		{ "{\"defaultAction\":\"SCMP_ACT_KILL_PROCESS\",\"defaultErrnoRet\":1,\"archMap\":[],\"syscalls\":[]}",
		  EINVAL, "defaultErrnoRet given but defaultAction is not SCMP_ACT_ERRNO" },
		{ "{\"defaultAction\":\"SCMP_ACT_ERRNO\",\"defaultErrnoRet\":5000,\"archMap\":[],\"syscalls\":[]}",
		  ERANGE, "defaultErrnoRet: errno 5000 outside 1..4095" },
		{ "{\"defaultAction\":\"SCMP_ACT_ERRNO\",\"archMap\":[{\"architecture\":\"SCMP_ARCH_AARCH64\"}],"
		  "\"syscalls\":[]}",
		  EINVAL, "archMap has no entry for this machine's architecture" },
		{ "{\"defaultAction\":\"SCMP_ACT_ERRNO\",\"archMap\":[{\"architecture\":\"SCMP_ARCH_VAX\"}],"
		  "\"syscalls\":[]}",
		  EINVAL, "archMap[0]: unknown architecture \"SCMP_ARCH_VAX\"" },
		{ SC("{\"names\":[\"read\"],\"action\":\"SCMP_ACT_ALLOW\",\"includes\":{}}"), EINVAL,
		  "syscalls[0]: unknown key \"includes\"" },
		{ SC("{\"names\":[\"raed\"],\"action\":\"SCMP_ACT_ALLOW\"}"), EINVAL,
		  "syscalls[0]: unknown syscall \"raed\"" },
		{ SC("{\"names\":[],\"action\":\"SCMP_ACT_ALLOW\"}"), EINVAL,
		  "syscalls[0]: \"names\" must be a non-empty array" },
		{ SC("{\"names\":[\"read\"]}"), EINVAL, "syscalls[0]: missing \"action\"" },
		{ SC("{\"names\":[\"read\"],\"action\":\"SCMP_ACT_TRACE\"}"), ENOTSUP,
		  "action SCMP_ACT_TRACE needs a tracer" },
		{ SC("{\"names\":[\"read\"],\"action\":\"SCMP_ACT_ALLOW\",\"errnoRet\":1}"), EINVAL,
		  "\"errnoRet\" given for an action that is not SCMP_ACT_ERRNO" },
		{ SC("{\"names\":[\"read\"],\"action\":\"SCMP_ACT_ALLOW\",\"args\":[{\"index\":6,\"value\":1,\"op\":"
		     "\"SCMP_CMP_EQ\"}]}"),
		  EINVAL, "syscalls[0].args[0].index: 6 is not a syscall argument" },
		{ SC("{\"names\":[\"read\"],\"action\":\"SCMP_ACT_ALLOW\",\"args\":[{\"index\":0,\"value\":1,\"op\":"
		     "\"SCMP_CMP_SIMILAR\"}]}"),
		  EINVAL, "syscalls[0].args[0].op: unknown operator \"SCMP_CMP_SIMILAR\"" },
		{ SC("{\"names\":[\"read\"],\"action\":\"SCMP_ACT_ALLOW\",\"args\":[{\"index\":0,\"value\":-1,\"op\":"
		     "\"SCMP_CMP_EQ\"}]}"),
		  EINVAL, "syscalls[0].args[0]: expected a non-negative integer" },
		{ SC("{\"names\":[\"read\"],\"action\":\"SCMP_ACT_ALLOW\",\"args\":[{\"index\":0,\"value\":1.5,\"op\":"
		     "\"SCMP_CMP_EQ\"}]}"),
		  EINVAL, "syscalls[0].args[0]: expected a non-negative integer" },
		{ SC("{\"names\":[\"read\"],\"action\":\"SCMP_ACT_ALLOW\",\"args\":[{\"index\":0,\"value\":"
		     "18446744073709551616,\"op\":\"SCMP_CMP_EQ\"}]}"),
		  ERANGE, "does not fit in 64 bits" },
		{ SC("{\"names\":[\"read\"],\"action\":\"SCMP_ACT_ALLOW\",\"args\":[{\"index\":0,\"value\":1,\"op\":"
		     "\"SCMP_CMP_EQ\"},{\"index\":0,\"value\":2,\"op\":\"SCMP_CMP_EQ\"}]}"),
		  EINVAL, "argument 0 compared twice" },
		{ SC("{\"names\":[\"read\"],\"action\":\"SCMP_ACT_ALLOW\",\"args\":[{\"index\":0,\"value\":1,"
		     "\"valueTwo\":1,\"op\":\"SCMP_CMP_EQ\"}]}"),
		  EINVAL, "\"valueTwo\" is only meaningful with SCMP_CMP_MASKED_EQ" },
		{ SC("{\"names\":[\"read\"],\"action\":\"SCMP_ACT_ALLOW\"},{\"names\":[\"read\"],\"action\":\"SCMP_ACT_"
		     "ERRNO\"}"),
		  EINVAL, "syscalls[1]: \"read\" already has an unconditional rule (syscalls[0])" },
		{ SC("{\"names\":[\"socket\"],\"action\":\"SCMP_ACT_ALLOW\",\"args\":[{\"index\":0,\"value\":1,\"op\":"
		     "\"SCMP_CMP_EQ\"}]},{\"names\":[\"socket\"],\"action\":\"SCMP_ACT_ERRNO\"}"),
		  EINVAL, "syscalls[1]: unconditional rule for \"socket\" would shadow syscalls[0]" },
		{ SC("{\"names\":[\"read\",\"read\"],\"action\":\"SCMP_ACT_ALLOW\"}"), EINVAL,
		  "\"read\" listed twice" },
		{ "{\"a\":[[[[[[[[[[1]]]]]]]]]]}", EINVAL, "JSON nested deeper than 8" },
		{ SC("{\"names\":[\"read\",\"exit\",\"exit_group\"],\"action\":\"SCMP_ACT_ALLOW\"}"), EINVAL,
		  "sc: \"execve\" is not allowed: no program could run" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct sock_fprog prog = { 0 };
		struct lb_error err = { 0 };
		expect_err(lb_seccomp_compile_json(cases[i].text, strlen(cases[i].text), "sc", &prog, NULL, &err), &err,
			   &cases[i]);
		assert_null(prog.filter);
	}
	/* An embedded NUL byte (yajl would stop there and accept the prefix). */
	static const char nul[] = SC("") "\0garbage";
	struct sock_fprog prog = { 0 };
	struct lb_error err = { 0 };
	assert_int_equal(lb_seccomp_compile_json(nul, sizeof(nul) - 1, "sc", &prog, NULL, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "sc: NUL byte at offset"));

	/* A minimal valid profile compiles; a non-native name (chown32) is accepted and counts for nothing. */
	static const char ok[] =
	    SC("{\"names\":[\"read\",\"chown32\",\"execve\",\"exit\",\"exit_group\"],\"action\":\"SCMP_ACT_ALLOW\","
	       "\"comment\":\"c\"}");
	size_t allowed = 0;
	assert_int_equal(lb_seccomp_compile_json(ok, sizeof(ok) - 1, "sc", &prog, &allowed, &err), 0);
	assert_int_equal(allowed, 4);
	assert_true(prog.len > 3);
	free(prog.filter);
}

static char tmpdir[64];

static void write_file(const char *rel, const char *text)
{
	char path[256];
	snprintf(path, sizeof(path), "%s/%s", tmpdir, rel);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static void copy_real(const char *rel)
{
	char src[512];
	snprintf(src, sizeof(src), "%s/%s", POLICY, rel);
	FILE *f = fopen(src, "r");
	assert_non_null(f);
	static char buf[1 << 20];
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	write_file(rel, buf);
}

static void test_load_errors(void **state)
{
	(void)state;
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/lb-policy-test-XXXXXX");
	assert_non_null(mkdtemp(tmpdir));
	copy_real("seccomp.json");
	copy_real("landlock.rules");

	struct lb_policy *p = NULL;
	struct lb_error err = { 0 };
	/* A missing file is named. */
	assert_int_equal(lb_policy_load(tmpdir, &p, &err), -ENOENT);
	assert_non_null(strstr(err.msg, "opening limits.conf"));
	assert_null(p);

	/* A parse error carries the directory, the file and the line. */
	write_file("limits.conf", "cpu = 1\nmemory = 512Mx\n");
	assert_int_equal(lb_policy_load(tmpdir, &p, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "limits.conf:2:"));
	assert_non_null(strstr(err.msg, tmpdir));

	/* A symlink in place of a policy file is refused (O_NOFOLLOW). */
	copy_real("limits.conf");
	char path[256];
	snprintf(path, sizeof(path), "%s/limits.conf", tmpdir);
	unlink(path);
	assert_int_equal(symlink(POLICY "/limits.conf", path), 0);
	assert_int_equal(lb_policy_load(tmpdir, &p, &err), -ELOOP);
	assert_non_null(strstr(err.msg, "opening limits.conf"));
	unlink(path);

	/* A file above the size cap is refused before it is read. */
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, LB_POLICY_FILE_MAX + 1), 0);
	close(fd);
	assert_int_equal(lb_policy_load(tmpdir, &p, &err), -EFBIG);
	assert_non_null(strstr(err.msg, "limits.conf: larger than"));
	unlink(path);

	/* A device in place of a file is refused. */
	assert_int_equal(symlink("/dev/zero", path), 0); /* still refused as a symlink; now try a fifo */
	unlink(path);
	assert_int_equal(mkfifo(path, 0644), 0);
	assert_int_equal(lb_policy_load(tmpdir, &p, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "limits.conf: not a regular file"));
	unlink(path);

	copy_real("limits.conf");
	assert_int_equal(lb_policy_load(tmpdir, &p, &err), 0);
	lb_policy_free(p);

	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf -- '%s'", tmpdir);
	assert_int_equal(system(cmd), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_real_policy),   cmocka_unit_test(test_landlock_errors),
		cmocka_unit_test(test_limits_errors), cmocka_unit_test(test_seccomp_errors),
		cmocka_unit_test(test_load_errors),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

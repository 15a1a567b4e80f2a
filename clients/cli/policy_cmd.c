/*
 * policy_cmd.c — `lensbox policy check|explain|diff [DIR]`: the arguments and the presentation of what
 * policy_check.c, policy_explain.c and policy_diff.c find, as tables people read or, with --json, one JSON document.
 *
 * Runs in the CLI process with the invoking user's privileges and needs no lensboxd. Everything printed that came
 * from the policy files (paths, names, rule text) goes through lbc_term_safe()/the table, which make it safe for a
 * terminal: the files may have been edited by anyone who could write them. Exit status: 0 when clean (no error, no
 * drift), 1 when problems were found or the command failed, 2 on a usage error.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yajl/yajl_gen.h>

#include "format.h"
#include "lb/cleanup.h"
#include "lb/policy-parse.h"
#include "policy.h"
#include "policy_cmd.h"

#ifndef LENSBOX_POLICY_DIR
#define LENSBOX_POLICY_DIR "/etc/lensbox/policy"
#endif
#ifndef LENSBOX_CONFIG_FILE
#define LENSBOX_CONFIG_FILE "/etc/lensbox/lensboxd.conf"
#endif

/* moby's profiles/seccomp/default.json, built in from clients/cli/data/ (see the NOTICE there) */
extern const unsigned char lbc_docker_profile[];
extern const size_t lbc_docker_profile_len;
extern const char lbc_docker_profile_source[];

static void yajl_gen_freep(yajl_gen *g)
{
	if (*g)
		yajl_gen_free(*g);
}

static void gs(yajl_gen g, const char *s)
{
	yajl_gen_string(g, (const unsigned char *)s, strlen(s));
}

static void gkv(yajl_gen g, const char *k, const char *v)
{
	gs(g, k);
	gs(g, v);
}

static void gki(yajl_gen g, const char *k, long long v)
{
	gs(g, k);
	yajl_gen_integer(g, v);
}

static void gkb(yajl_gen g, const char *k, bool v)
{
	gs(g, k);
	yajl_gen_bool(g, v);
}

static void print_gen(yajl_gen g)
{
	const unsigned char *buf;
	size_t len;
	if (yajl_gen_get_buf(g, &buf, &len) == yajl_gen_status_ok) {
		fwrite(buf, 1, len, stdout);
		fputc('\n', stdout);
	}
}

static void safe_puts(const char *s, FILE *f)
{
	_cleanup_free_ char *safe = lbc_term_safe(s, strlen(s), false);
	fputs(safe ? safe : "?", f);
}

/* ---- check ---- */

static int print_check(const char *dir, const struct lbc_findings *f, bool json)
{
	size_t errors = lbc_findings_errors(f);
	if (json) {
		__attribute__((cleanup(yajl_gen_freep))) yajl_gen g = yajl_gen_alloc(NULL);
		yajl_gen_map_open(g);
		gkv(g, "dir", dir);
		gkb(g, "ok", errors == 0);
		for (int notes = 0; notes < 2; notes++) {
			gs(g, notes ? "notes" : "errors");
			yajl_gen_array_open(g);
			for (size_t i = 0; i < f->n; i++) {
				if (f->v[i].note != (notes == 1))
					continue;
				yajl_gen_map_open(g);
				gkv(g, "file", f->v[i].file);
				gki(g, "line", f->v[i].line);
				gkv(g, "reason", f->v[i].reason);
				yajl_gen_map_close(g);
			}
			yajl_gen_array_close(g);
		}
		yajl_gen_map_close(g);
		print_gen(g);
		return errors ? 1 : 0;
	}
	for (size_t i = 0; i < f->n; i++) {
		char where[96];
		if (f->v[i].line)
			snprintf(where, sizeof(where), "%s:%u", f->v[i].file, f->v[i].line);
		else
			snprintf(where, sizeof(where), "%s", f->v[i].file);
		fputs(f->v[i].note ? "note: " : "", stdout);
		safe_puts(where, stdout);
		fputs(": ", stdout);
		safe_puts(f->v[i].reason, stdout);
		fputc('\n', stdout);
	}
	if (errors)
		printf("%zu error%s in ", errors, errors == 1 ? "" : "s");
	else
		printf("ok: every file of ");
	safe_puts(dir, stdout);
	printf(errors ? "\n" : " parses as lensboxd would load it\n");
	return errors ? 1 : 0;
}

static int cmd_check(const struct lbc_policy_opts *o, const char *dir)
{
	struct lbc_findings f = { 0 };
	struct lb_error err = { 0 };
	if (lbc_policy_check(dir, !o->no_nft, &f, &err) < 0) {
		fprintf(stderr, "lensbox: %s\n", err.msg);
		lbc_findings_free(&f);
		return 1;
	}
	int r = print_check(dir, &f, o->json);
	lbc_findings_free(&f);
	return r;
}

/* ---- explain ---- */

static const char *diff_name(enum lbc_sc_diff d)
{
	switch (d) {
	case LBC_SC_SAME:
		return "same";
	case LBC_SC_ONLY_LENSBOX:
		return "only_lensbox";
	case LBC_SC_ONLY_DOCKER:
		return "only_docker";
	case LBC_SC_ARGS_DIFFER:
		return "args_differ";
	}
	return "?";
}

static const char *rights_of(unsigned a, char *buf, size_t size)
{
	snprintf(buf, size, "%s%s%s%s", a & LB_LL_READ ? "read " : "", a & LB_LL_EXEC ? "exec " : "",
		 a & LB_LL_WRITE ? "write " : "", a & LB_LL_DEV_IOCTL ? "dev-ioctl " : "");
	size_t n = strlen(buf);
	if (n)
		buf[n - 1] = '\0';
	return buf;
}

static void explain_json(const char *dir, const struct lbc_explain *e)
{
	__attribute__((cleanup(yajl_gen_freep))) yajl_gen g = yajl_gen_alloc(NULL);
	char buf[64];
	yajl_gen_map_open(g);
	gkv(g, "dir", dir);
	gs(g, "seccomp");
	yajl_gen_map_open(g);
	gkv(g, "default", e->ours.default_action);
	gs(g, "rules");
	yajl_gen_array_open(g);
	for (size_t i = 0; i < e->ours.n; i++) {
		yajl_gen_map_open(g);
		gkv(g, "name", e->ours.v[i].name);
		gkv(g, "action", e->ours.v[i].action);
		gkv(g, "args", e->ours.v[i].args);
		gkb(g, "native", e->ours.v[i].native);
		yajl_gen_map_close(g);
	}
	yajl_gen_array_close(g);
	gs(g, "docker");
	yajl_gen_map_open(g);
	gkv(g, "source", e->docker_source);
	gkv(g, "default", e->docker.default_action);
	yajl_gen_map_close(g);
	gs(g, "compared");
	yajl_gen_array_open(g);
	for (size_t i = 0; i < e->n_cmp; i++) {
		yajl_gen_map_open(g);
		gkv(g, "name", e->cmp[i].name);
		gkv(g, "diff", diff_name(e->cmp[i].diff));
		gkv(g, "lensbox", e->cmp[i].here);
		gkv(g, "docker", e->cmp[i].docker);
		gkb(g, "native", e->cmp[i].native);
		yajl_gen_map_close(g);
	}
	yajl_gen_array_close(g);
	yajl_gen_map_close(g);
	gs(g, "landlock");
	yajl_gen_map_open(g);
	gki(g, "min_abi", e->landlock.min_abi);
	gki(g, "degraded_min_abi", e->landlock.degraded_min_abi);
	gkb(g, "scope_abstract_unix", e->landlock.scope_abstract_unix);
	gkb(g, "scope_signal", e->landlock.scope_signal);
	gs(g, "paths");
	yajl_gen_array_open(g);
	for (size_t i = 0; i < e->landlock.n_rules; i++) {
		yajl_gen_map_open(g);
		gkv(g, "path", e->landlock.rules[i].path);
		gkv(g, "rights", rights_of(e->landlock.rules[i].access, buf, sizeof(buf)));
		yajl_gen_map_close(g);
	}
	yajl_gen_array_close(g);
	yajl_gen_map_close(g);
	gs(g, "network");
	yajl_gen_map_open(g);
	gki(g, "denied4", (long long)e->n_denied4);
	gki(g, "denied6", (long long)e->n_denied6);
	gs(g, "packages");
	yajl_gen_array_open(g);
	for (size_t i = 0; i < e->n_package_names; i++)
		gs(g, e->package_names[i]);
	yajl_gen_array_close(g);
	gs(g, "tiers");
	yajl_gen_array_open(g);
	for (size_t t = 0; t < LB_ARRAY_SIZE(e->tiers); t++) {
		yajl_gen_map_open(g);
		gkv(g, "tier", e->tiers[t].tier);
		gkv(g, "summary", e->tiers[t].summary);
		gs(g, "unexplained");
		yajl_gen_array_open(g);
		for (size_t i = 0; i < e->tiers[t].n_unexplained; i++)
			gs(g, e->tiers[t].unexplained[i]);
		yajl_gen_array_close(g);
		yajl_gen_map_close(g);
	}
	yajl_gen_array_close(g);
	yajl_gen_map_close(g);
	yajl_gen_map_close(g);
	print_gen(g);
}

/* Rows for one syscall: name on the first, then one rule a row; a and b are "; "-joined rule lists (b may be
 * NULL for a two-column table). */
static void add_rule_rows(struct lbc_table *t, const char *name, const char *a, const char *b)
{
	char ca[sizeof(((struct lbc_sc_compare *)0)->here)], cb[sizeof(ca)];
	snprintf(ca, sizeof(ca), "%s", a);
	snprintf(cb, sizeof(cb), "%s", b ? b : "");
	char *sa = NULL, *sb = NULL;
	char *x = strtok_r(ca, ";", &sa), *y = strtok_r(cb, ";", &sb);
	for (bool first = true; x || y; first = false) {
		const char *cells[] = { first ? name : "", x ? x + strspn(x, " ") : "", y ? y + strspn(y, " ") : "" };
		if (lbc_table_add(t, cells) < 0)
			return;
		x = x ? strtok_r(NULL, ";", &sa) : NULL;
		y = y ? strtok_r(NULL, ";", &sb) : NULL;
	}
}

static void print_table(struct lbc_table *t)
{
	if (t)
		lbc_table_print(t, stdout);
	lbc_table_free(t);
}

/* The allowlist: every name with an ALLOW rule, with all of its rules. */
static void explain_allowlist(const struct lbc_explain *e)
{
	static const char *const headers[] = { "SYSCALL", "RULES" };
	struct lbc_table *t = lbc_table_new(2, headers, NULL);
	size_t native = 0, foreign = 0;
	char others[2048] = "";
	for (size_t i = 0; t && i < e->n_cmp; i++) {
		const struct lbc_sc_compare *c = &e->cmp[i];
		if (c->diff == LBC_SC_ONLY_DOCKER)
			continue;
		if (!c->native) {
			foreign++;
			size_t n = strlen(others);
			snprintf(others + n, sizeof(others) - n, "%s%s", n ? " " : "", c->name);
			continue;
		}
		native++;
		add_rule_rows(t, c->name, c->here, NULL);
	}
	printf("Allowed syscalls: %zu on this machine's architecture\n", native);
	print_table(t);
	if (foreign)
		printf("Also allowed by name, not syscalls of this architecture (%zu): %s\n", foreign, others);
}

static void explain_compare(const struct lbc_explain *e)
{
	static const enum lbc_sc_diff kinds[] = { LBC_SC_ONLY_LENSBOX, LBC_SC_ONLY_DOCKER, LBC_SC_ARGS_DIFFER };
	static const char *const titles[] = { "Allowed here, refused by Docker", "Refused here, allowed by Docker",
					      "Allowed by both, with other argument rules" };
	printf("\nCompared with Docker's default profile (%s; no capabilities)\n", e->docker_source);
	printf("Default answer: here %s, Docker %s\n", e->ours.default_action, e->docker.default_action);
	size_t same = 0;
	for (size_t i = 0; i < e->n_cmp; i++)
		same += e->cmp[i].native && e->cmp[i].diff == LBC_SC_SAME;
	for (size_t k = 0; k < LB_ARRAY_SIZE(kinds); k++) {
		static const char *const headers[] = { "SYSCALL", "HERE", "DOCKER" };
		struct lbc_table *t = lbc_table_new(3, headers, NULL);
		size_t n = 0;
		for (size_t i = 0; t && i < e->n_cmp; i++) {
			const struct lbc_sc_compare *c = &e->cmp[i];
			if (c->diff != kinds[k] || !c->native)
				continue;
			add_rule_rows(t, c->name, c->here, c->docker);
			n++;
		}
		printf("\n%s: %zu\n", titles[k], n);
		if (n)
			print_table(t);
		else
			lbc_table_free(t);
	}
	printf("\nAllowed alike by both: %zu syscalls of this architecture\n", same);
}

static void explain_text(const char *dir, const struct lbc_explain *e)
{
	printf("Policy ");
	safe_puts(dir, stdout);
	printf("\n\n== seccomp ==\n");
	explain_allowlist(e);
	explain_compare(e);
	printf("\n== Landlock ==\nminimum ABI %d", e->landlock.min_abi);
	if (e->landlock.degraded_min_abi != e->landlock.min_abi)
		printf(" (accepted down to %d)", e->landlock.degraded_min_abi);
	printf("; scopes: %s%s%s\n", e->landlock.scope_abstract_unix ? "abstract-unix " : "",
	       e->landlock.scope_signal ? "signal" : "",
	       !e->landlock.scope_abstract_unix && !e->landlock.scope_signal ? "none" : "");
	static const char *const headers[] = { "PATH", "RIGHTS" };
	struct lbc_table *t = lbc_table_new(2, headers, NULL);
	char buf[64];
	for (size_t i = 0; t && i < e->landlock.n_rules; i++) {
		const char *cells[] = { e->landlock.rules[i].path,
					rights_of(e->landlock.rules[i].access, buf, sizeof(buf)) };
		lbc_table_add(t, cells);
	}
	print_table(t);
	printf("everything else: denied for every right the enforced ABI handles; TCP ports are not handled\n");
	char cpu[32], mem[32], disk[32], tmp[32], shm[32], out[32];
	const struct lb_limits_policy *l = &e->limits;
	printf("\n== limits ==\ncpu %u.%03u, memory %s, pids %llu, disk %s, /tmp %s, /dev/shm %s, output %s, timeout "
	       "%u s, "
	       "uid/gid %u/%u\n",
	       l->cpu_millicores / 1000, l->cpu_millicores % 1000, lbc_format_bytes(l->memory_bytes, mem, sizeof(mem)),
	       (unsigned long long)l->pids, lbc_format_bytes(l->disk_bytes, disk, sizeof(disk)),
	       lbc_format_bytes(l->tmp_bytes, tmp, sizeof(tmp)), lbc_format_bytes(l->shm_bytes, shm, sizeof(shm)),
	       lbc_format_bytes(l->output_bytes, out, sizeof(out)), l->timeout_seconds, l->sandbox_uid, l->sandbox_gid);
	(void)cpu;
	printf("\n== network tiers ==\n");
	for (size_t i = 0; i < LB_ARRAY_SIZE(e->tiers); i++) {
		safe_puts(e->tiers[i].summary, stdout);
		fputc('\n', stdout);
		for (size_t k = 0; k < e->tiers[i].n_unexplained; k++) {
			fputs("  rule not summarised above: ", stdout);
			safe_puts(e->tiers[i].unexplained[k], stdout);
			fputc('\n', stdout);
		}
	}
}

static int cmd_explain(const struct lbc_policy_opts *o, const char *dir)
{
	_cleanup_free_ char *other = NULL;
	const char *docker = (const char *)lbc_docker_profile, *source = lbc_docker_profile_source;
	size_t docker_len = lbc_docker_profile_len;
	struct lb_error err = { 0 };
	if (o->docker_profile) {
		_cleanup_close_ int cwd = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (lbc_policy_read(cwd, o->docker_profile, &other, &docker_len, &err) < 0) {
			fprintf(stderr, "lensbox: %s: %s\n", o->docker_profile, err.msg);
			return 1;
		}
		docker = other;
		source = o->docker_profile;
	}
	struct lbc_explain e = { 0 };
	if (lbc_policy_explain(dir, docker, docker_len, source, &e, &err) < 0) {
		fprintf(stderr, "lensbox: %s (run `lensbox policy check` for every problem)\n", err.msg);
		return 1;
	}
	if (o->json)
		explain_json(dir, &e);
	else
		explain_text(dir, &e);
	lbc_explain_free(&e);
	return 0;
}

/* ---- diff ---- */

static int cmd_diff(const struct lbc_policy_opts *o, const char *dir)
{
	struct lbc_net_params params;
	struct lbc_diff d = { 0 };
	struct lb_error err = { 0 };
	if (lbc_net_params_read(o->config ? o->config : LENSBOX_CONFIG_FILE, &params, &err) < 0 ||
	    lbc_policy_diff(dir, &params, &d, &err) < 0) {
		fprintf(stderr, "lensbox: %s\n", err.msg);
		return 1;
	}
	if (o->json) {
		__attribute__((cleanup(yajl_gen_freep))) yajl_gen g = yajl_gen_alloc(NULL);
		yajl_gen_map_open(g);
		gkv(g, "dir", dir);
		gkb(g, "table_loaded", d.table_loaded);
		gki(g, "sandboxes", d.sandboxes);
		gki(g, "warm_slots", d.warm);
		gkb(g, "drift", d.n > 0);
		gs(g, "differences");
		yajl_gen_array_open(g);
		for (size_t i = 0; i < d.n; i++) {
			yajl_gen_map_open(g);
			gkv(g, "what", d.v[i].what);
			gkv(g, "change", d.v[i].change);
			gkv(g, "detail", d.v[i].detail);
			yajl_gen_map_close(g);
		}
		yajl_gen_array_close(g);
		yajl_gen_map_close(g);
		print_gen(g);
	} else if (!d.table_loaded) {
		printf(
		    "no table inet lensbox is loaded in this network namespace: lensboxd is not running here, or its "
		    "networking is off; nothing to compare\n");
	} else {
		for (size_t i = 0; i < d.n; i++) {
			printf("%-8s ", d.v[i].change);
			safe_puts(d.v[i].what, stdout);
			fputs(": ", stdout);
			safe_puts(d.v[i].detail, stdout);
			fputc('\n', stdout);
		}
		if (d.warm)
			printf("inet lensbox (with %u sandboxes' rules and %u warm slots') ", d.sandboxes, d.warm);
		else
			printf("inet lensbox (with %u sandboxes' rules) ", d.sandboxes);
		if (d.n)
			printf("differs from ");
		else
			printf("is what lensboxd loads from ");
		safe_puts(dir, stdout);
		printf(d.n ? " in %zu place%s\n" : "\n", d.n, d.n == 1 ? "" : "s");
	}
	int r = d.n ? 1 : 0;
	lbc_diff_free(&d);
	return r;
}

int lbc_cmd_policy(const struct lbc_policy_opts *o, int argc, char **argv)
{
	if (argc < 1 || argc > 2) {
		fputs("lensbox: policy takes check|explain|diff and optionally a policy DIR\nTry `lensbox --help`.\n",
		      stderr);
		return 2;
	}
	const char *dir = argc == 2 ? argv[1] : LENSBOX_POLICY_DIR;
	if ((o->no_nft && strcmp(argv[0], "check") != 0) || (o->docker_profile && strcmp(argv[0], "explain") != 0) ||
	    (o->config && strcmp(argv[0], "diff") != 0)) {
		fputs("lensbox: --no-nft belongs to `policy check`, --docker-profile to `policy explain`, --config to "
		      "`policy diff`\nTry `lensbox --help`.\n",
		      stderr);
		return 2;
	}
	if (strcmp(argv[0], "check") == 0)
		return cmd_check(o, dir);
	if (strcmp(argv[0], "explain") == 0)
		return cmd_explain(o, dir);
	if (strcmp(argv[0], "diff") == 0)
		return cmd_diff(o, dir);
	fprintf(stderr, "lensbox: unknown policy verb `%s` (check, explain, diff)\nTry `lensbox --help`.\n", argv[0]);
	return 2;
}

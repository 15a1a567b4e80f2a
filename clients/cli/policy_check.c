/*
 * policy_check.c — `lensbox policy check [DIR]`: every file of a policy directory through the parser lensboxd and
 * lensbox-runner use, each problem reported as "file:line: reason", the problems of every file and not only the
 * first file's.
 *
 * Runs in the CLI process with the invoking user's privileges; the nft part runs in a child in a throwaway network
 * namespace (policy_files.c), where the filled templates are loaded for real, in lensboxd's order (base.nft and the
 * denied sets, services.nft, then one sandbox of each tier and the flowtable), so a rule naming something the base
 * does not define fails as it would in lensboxd. The filled text keeps the template's lines (no value spans a line),
 * so the line nft names is the template's line.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lb/cleanup.h"
#include "lb/netparse.h"
#include "lb/nftpolicy.h"
#include "lb/policy-parse.h"
#include "policy.h"

#define JSON_MAX_DEPTH 32

struct json_frame {
	bool array;
	long index;
	char key[64];
};

/* The path of the value about to start, in seccomp.c's notation: "syscalls[3].names[0]". */
static void json_path(const struct json_frame *st, int depth, char *buf, size_t size)
{
	size_t n = 0;
	buf[0] = '\0';
	for (int i = 0; i < depth && n < size; i++) {
		int w = st[i].array ? snprintf(buf + n, size - n, "[%ld]", st[i].index)
				    : snprintf(buf + n, size - n, "%s%s", n ? "." : "", st[i].key);
		if (w < 0)
			return;
		n += (size_t)w;
	}
}

unsigned lbc_json_path_line(const char *t, size_t len, const char *want)
{
	struct json_frame st[JSON_MAX_DEPTH];
	int depth = 0;
	unsigned line = 1;
	bool value_next = true, key_next = false;
	char path[512];
	for (size_t i = 0; i < len; i++) {
		char c = t[i];
		if (c == '\n')
			line++;
		if (c == ' ' || c == '\t' || c == '\r' || c == '\n')
			continue;
		if (key_next && c == '"' && depth > 0 && !st[depth - 1].array) {
			size_t k = 0, j = i + 1;
			for (; j < len && t[j] != '"'; j++) {
				if (t[j] == '\\')
					j++;
				else if (k + 1 < sizeof(st[0].key))
					st[depth - 1].key[k++] = t[j];
			}
			st[depth - 1].key[k] = '\0';
			i = j;
			key_next = false;
			continue;
		}
		if (c == ':') {
			value_next = true;
			continue;
		}
		if (c == ',') {
			if (depth > 0 && st[depth - 1].array) {
				st[depth - 1].index++;
				value_next = true;
			} else if (depth > 0) {
				key_next = true;
			}
			continue;
		}
		if (c == '}' || c == ']') {
			depth = depth > 0 ? depth - 1 : 0;
			value_next = key_next = false;
			continue;
		}
		if (value_next) {
			json_path(st, depth, path, sizeof(path));
			if (strcmp(path, want) == 0)
				return line;
			value_next = false;
		}
		if (c == '{' || c == '[') {
			if (depth == JSON_MAX_DEPTH)
				return 0;
			st[depth] = (struct json_frame){ .array = c == '[' };
			depth++;
			key_next = c == '{';
			value_next = c == '[';
		} else if (c == '"') {
			for (i++; i < len && t[i] != '"'; i++)
				if (t[i] == '\\')
					i++;
		}
	}
	return 0;
}

/* A parser's message "NAME:LINE: reason", "NAME: reason" or "line LINE: reason" as a finding of file. */
static int add_parser_error(struct lbc_findings *f, const char *file, const char *name, const char *msg)
{
	size_t nl = strlen(name);
	unsigned line = 0;
	const char *p = msg;
	if (strncmp(p, name, nl) == 0 && p[nl] == ':') {
		p += nl + 1;
		char *end;
		unsigned long v = strtoul(p, &end, 10);
		if (end != p && *end == ':') {
			line = (unsigned)v;
			p = end + 1;
		}
	} else if (strncmp(p, "line ", 5) == 0) {
		char *end;
		unsigned long v = strtoul(p + 5, &end, 10);
		if (end != p + 5 && *end == ':') {
			line = (unsigned)v;
			p = end + 1;
		}
	}
	while (*p == ' ')
		p++;
	return lbc_findings_add(f, file, line, false, "%s", p);
}

static int check_seccomp(int dfd, struct lbc_findings *f)
{
	_cleanup_free_ char *text = NULL;
	size_t len;
	struct lb_error e = { 0 };
	if (lbc_policy_read(dfd, "seccomp.json", &text, &len, &e) < 0)
		return lbc_findings_add(f, "seccomp.json", 0, false, "%s", e.msg);
	struct sock_fprog prog = { 0 };
	size_t allowed = 0;
	if (lb_seccomp_compile_json(text, len, "seccomp.json", &prog, &allowed, &e) == 0) {
		free(prog.filter);
		return 0;
	}
	/* "seccomp.json: syscalls[3].names[0]: unknown syscall ..." -> the line where that value starts */
	const char *p = e.msg;
	if (strncmp(p, "seccomp.json: ", 14) == 0)
		p += 14;
	char path[256] = "";
	size_t pl = strcspn(p, ": ");
	if (pl < sizeof(path) && p[pl] == ':') {
		memcpy(path, p, pl);
		path[pl] = '\0';
	}
	unsigned line = path[0] ? lbc_json_path_line(text, len, path) : 0;
	/* a rule starts on one line and its offending name is further down: "unknown syscall \"keyctll\"" */
	const char *q = strchr(p, '"'), *qe = q ? strchr(q + 1, '"') : NULL;
	if (line && qe) {
		const char *from = text;
		for (unsigned l = 1; l < line && (from = strchr(from, '\n')); l++)
			from++;
		char tok[96];
		snprintf(tok, sizeof(tok), "%.*s", (int)(qe - q + 1 > 90 ? 90 : qe - q + 1), q);
		const char *hit = from ? strstr(from, tok) : NULL;
		for (const char *c = from; hit && c < hit; c++)
			line += *c == '\n';
	}
	return lbc_findings_add(f, "seccomp.json", line, false, "%s", p);
}

static int check_line_file(int dfd, const char *file, struct lbc_findings *f)
{
	_cleanup_free_ char *text = NULL;
	size_t len;
	struct lb_error e = { 0 };
	if (lbc_policy_read(dfd, file, &text, &len, &e) < 0)
		return lbc_findings_add(f, file, 0, false, "%s", e.msg);
	const char *base = strrchr(file, '/') ? strrchr(file, '/') + 1 : file;
	int r = 0;
	if (strcmp(file, "landlock.rules") == 0) {
		struct lb_landlock_policy p = { 0 };
		r = lb_landlock_parse(text, base, &p, &e);
		lb_landlock_policy_clear(&p);
	} else if (strcmp(file, "limits.conf") == 0) {
		struct lb_limits_policy p;
		r = lb_limits_parse(text, base, &p, &e);
	} else if (strcmp(file, "network/denied.list") == 0) {
		struct lb_cidr_list l = { 0 };
		r = lb_cidr_list_parse(text, &l, &e);
		lb_cidr_list_free(&l);
	} else {
		struct lb_name_list l = { 0 };
		r = lb_name_list_parse(text, &l, &e);
		lb_name_list_free(&l);
	}
	return r < 0 ? add_parser_error(f, file, base, e.msg) : 0;
}

/* Every {{WORD}} of a template must be one lensboxd fills for that file. */
static int check_words(enum lb_nft_template t, const char *file, const char *text, struct lbc_findings *f)
{
	size_t n;
	const char *const *words = lb_nft_template_words(t, &n);
	unsigned line = 1;
	for (const char *p = text; *p; p++) {
		if (*p == '\n')
			line++;
		if (p[0] != '{' || p[1] != '{')
			continue;
		const char *close = strstr(p + 2, "}}");
		const char *nl = strchr(p + 2, '\n');
		if (!close || (nl && nl < close)) {
			if (lbc_findings_add(f, file, line, false, "unterminated {{ (a word is {{NAME}} on one line)") <
			    0)
				return -ENOMEM;
			continue;
		}
		size_t klen = (size_t)(close - p - 2);
		bool known = false;
		for (size_t i = 0; i < n; i++)
			known |= strlen(words[i]) == klen && memcmp(words[i], p + 2, klen) == 0;
		if (!known) {
			char list[256] = "";
			for (size_t i = 0; i < n; i++)
				snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s", i ? ", " : "",
					 words[i]);
			if (lbc_findings_add(f, file, line, false, "{{%.*s}} is not a word lensboxd fills here (%s)",
					     (int)(klen > 40 ? 40 : klen), p + 2, list) < 0)
				return -ENOMEM;
		}
		p = close + 1;
	}
	return 0;
}

/* The nft side, in the throwaway namespace: everything is read and checked again there, so the child needs nothing
 * of the parent's but the directory's path. */
struct nft_job {
	const char *dir;
	bool words_ok[LB_NFT_TEMPLATE_COUNT];
};

static void report(int fd, const char *file, unsigned line, bool note, const char *reason)
{
	char one[LB_ERROR_MSG_MAX];
	snprintf(one, sizeof(one), "%s", reason);
	for (char *c = one; *c; c++)
		if (*c == '\n' || *c == '\t')
			*c = ' ';
	dprintf(fd, "%s\t%u\t%d\t%s\n", file, line, note, one);
}

/* "nftables refused the rules: /proc/self/fd/5:12:3-9: Error: reason" -> 12 and "reason" */
static void report_nft(int fd, const char *file, const char *msg)
{
	const char *at = strstr(msg, "/proc/self/fd/");
	unsigned line = 0;
	if (at && (at = strchr(at + 14, ':')))
		line = (unsigned)strtoul(at + 1, NULL, 10);
	const char *why = strstr(msg, "Error: ");
	report(fd, file, line, false, why ? why + 7 : msg);
}

static int nft_job_run(void *data, int fd)
{
	struct nft_job *job = data;
	_cleanup_close_ int dfd = open(job->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct lb_nft_vars vars = {
		.services_uid = 999999999, .upstream = "192.0.2.53", .upstream_port = 53, .uplinks = "\"lo\""
	};
	if (dfd < 0 || lb_nft_vars_init(&vars, NULL, NULL, 0, 0) < 0)
		return -EIO;
	_cleanup_free_ char *tmpl[LB_NFT_TEMPLATE_COUNT] = { 0 };
	for (int t = 0; t < LB_NFT_TEMPLATE_COUNT; t++) {
		char path[64];
		size_t len;
		struct lb_error e;
		snprintf(path, sizeof(path), "network/%s", lb_nft_template_file((enum lb_nft_template)t));
		if (job->words_ok[t] && lbc_policy_read(dfd, path, &tmpl[t], &len, &e) < 0)
			tmpl[t] = NULL;
	}
	_cleanup_free_ char *denied_text = NULL;
	size_t dlen;
	struct lb_error e = { 0 };
	struct lb_cidr_list denied = { 0 };
	if (lbc_policy_read(dfd, "network/denied.list", &denied_text, &dlen, &e) == 0)
		(void)lb_cidr_list_parse(denied_text, &denied, &e);
	/* lensboxd's order: base (with the denied sets), services, a sandbox of each tier, the flowtable */
	static const enum lb_nft_template order[] = { LB_NFT_BASE, LB_NFT_SERVICES, LB_NFT_PACKAGES, LB_NFT_WEB,
						      LB_NFT_OFFLOAD };
	bool base_ok = false;
	for (size_t i = 0; i < LB_ARRAY_SIZE(order); i++) {
		enum lb_nft_template t = order[i];
		char file[64];
		snprintf(file, sizeof(file), "network/%s", lb_nft_template_file(t));
		if (!tmpl[t])
			continue; /* its reading or its words were reported already */
		if (t != LB_NFT_BASE && !base_ok) {
			report(fd, file, 0, true, "not loaded into nftables: base.nft did not load");
			continue;
		}
		vars.slot = t == LB_NFT_WEB ? 1 : 0;
		_cleanup_free_ char *text = NULL;
		if (lb_nft_render(t, tmpl[t], &vars, &text, &e) < 0) {
			report(fd, file, 0, false, e.msg);
			continue;
		}
		bool dry = t == LB_NFT_OFFLOAD;
		if (lb_nft_exec(text, dry, NULL, &e) < 0) {
			if (t == LB_NFT_OFFLOAD && e.code == ENOENT && !strstr(e.msg, "syntax"))
				report(fd, file, 0, true,
				       "the kernel here refused the flowtable (no nf_flow_table?): checked for syntax "
				       "only");
			else
				report_nft(fd, file, e.msg);
			continue;
		}
		if (t == LB_NFT_BASE) {
			_cleanup_free_ char *sets = NULL;
			if (lb_nft_render_denied(&denied, &sets, &e) < 0 || lb_nft_exec(sets, false, NULL, &e) < 0)
				report(fd, "network/denied.list", 0, false, e.msg);
			base_ok = true;
		}
	}
	lb_cidr_list_free(&denied);
	return 0;
}

static int add_nft_findings(char *out, struct lbc_findings *f)
{
	char *save = NULL;
	for (char *l = strtok_r(out, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
		char *file = l, *line = strchr(file, '\t'), *note = line ? strchr(line + 1, '\t') : NULL;
		char *reason = note ? strchr(note + 1, '\t') : NULL;
		if (!reason)
			continue;
		*line++ = *note++ = *reason++ = '\0';
		if (lbc_findings_add(f, file, (unsigned)strtoul(line, NULL, 10), *note == '1', "%s", reason) < 0)
			return -ENOMEM;
	}
	return 0;
}

/* network/: the five templates (their words), and no .nft file lensboxd would ignore. */
static int check_templates(int dfd, struct nft_job *job, struct lbc_findings *f)
{
	for (int t = 0; t < LB_NFT_TEMPLATE_COUNT; t++) {
		char file[64];
		snprintf(file, sizeof(file), "network/%s", lb_nft_template_file((enum lb_nft_template)t));
		_cleanup_free_ char *text = NULL;
		size_t len;
		struct lb_error e = { 0 };
		if (lbc_policy_read(dfd, file, &text, &len, &e) < 0) {
			if (lbc_findings_add(f, file, 0, false, "%s", e.msg) < 0)
				return -ENOMEM;
			continue;
		}
		size_t before = f->n;
		if (check_words((enum lb_nft_template)t, file, text, f) < 0)
			return -ENOMEM;
		job->words_ok[t] = f->n == before;
	}
	_cleanup_close_ int nfd = openat(dfd, "network", O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	_cleanup_closedir_ DIR *d = nfd >= 0 ? fdopendir(TAKE_FD(nfd)) : NULL;
	for (struct dirent *de; d && (de = readdir(d));) {
		size_t n = strlen(de->d_name);
		bool known = false;
		for (int t = 0; t < LB_NFT_TEMPLATE_COUNT; t++)
			known |= strcmp(de->d_name, lb_nft_template_file((enum lb_nft_template)t)) == 0;
		if (n > 4 && strcmp(de->d_name + n - 4, ".nft") == 0 && !known &&
		    lbc_findings_add(f, "network", 0, false, "%.64s: lensboxd loads no file of that name", de->d_name) <
			0)
			return -ENOMEM;
	}
	return 0;
}

int lbc_policy_check(const char *dir, bool nft, struct lbc_findings *f, struct lb_error *err)
{
	_cleanup_close_ int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return lb_error_set(err, errno, "opening the policy directory %s", dir);
	static const char *const line_files[] = { "landlock.rules", "limits.conf", "network/denied.list",
						  "network/packages.list" };
	if (check_seccomp(dfd, f) < 0)
		return lb_error_set(err, ENOMEM, "checking %s", dir);
	for (size_t i = 0; i < LB_ARRAY_SIZE(line_files); i++)
		if (check_line_file(dfd, line_files[i], f) < 0)
			return lb_error_set(err, ENOMEM, "checking %s", dir);
	struct nft_job job = { .dir = dir };
	if (check_templates(dfd, &job, f) < 0)
		return lb_error_set(err, ENOMEM, "checking %s", dir);
	if (!nft)
		return 0;
	_cleanup_free_ char *out = NULL;
	size_t len;
	struct lb_error e = { 0 };
	if (lbc_in_throwaway_netns(nft_job_run, &job, 1 << 20, &out, &len, &e) < 0)
		return lbc_findings_add(f, "network", 0, true, "templates not loaded into nftables: %s", e.msg) < 0
			   ? lb_error_set(err, ENOMEM, "checking %s", dir)
			   : 0;
	if (add_nft_findings(out, f) < 0)
		return lb_error_set(err, ENOMEM, "checking %s", dir);
	return 0;
}

/*
 * policy_explain.c — `lensbox policy explain [DIR]`: what a policy directory lets a sandboxed program do, in the
 * terms a reviewer compares: the effective seccomp allowlist beside Docker's default profile (both flattened by
 * seccomp_resolve.c for this machine's architecture and no capability), the Landlock paths and rights, the limits,
 * and each network tier's egress in words.
 *
 * Runs in the CLI process; needs no privilege and loads nothing into the kernel. Every file goes through the parser
 * lensboxd uses first (an explanation of a policy lensboxd would refuse would mislead). The tier sentences come from
 * the rules of web.nft and packages.nft, recognised line by line; a rule line no sentence covers is returned
 * verbatim in `unexplained`, so an edit the words do not capture is shown, never hidden.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lb/cleanup.h"
#include "lb/netparse.h"
#include "lb/policy-parse.h"
#include "policy.h"

#if defined(__x86_64__)
#define NATIVE_ARCH "amd64"
#elif defined(__aarch64__)
#define NATIVE_ARCH "arm64"
#else
#define NATIVE_ARCH "unknown"
#endif

static void join(char *buf, size_t size, const char *s)
{
	size_t n = strlen(buf);
	snprintf(buf + n, size - n, "%s%s", n ? "; " : "", s);
}

/* name's rules in p, "; "-separated: "ALLOW [a0 EQ 0x1]; ERRNO(1) [a0 GT 0x0]"; the default when none. */
static void rules_of(const struct lbc_sc_profile *p, const char *name, char *buf, size_t size)
{
	buf[0] = '\0';
	for (size_t i = 0; i < p->n; i++) {
		if (strcmp(p->v[i].name, name) != 0)
			continue;
		char one[240];
		snprintf(one, sizeof(one), "%s%s%.200s%s", p->v[i].action, p->v[i].args[0] ? " [" : "", p->v[i].args,
			 p->v[i].args[0] ? "]" : "");
		join(buf, size, one);
	}
	if (!buf[0])
		snprintf(buf, size, "%s (default)", p->default_action);
}

/* The ALLOW rules of name in p, as one comparable string. */
static void allow_rules(const struct lbc_sc_profile *p, const char *name, char *buf, size_t size)
{
	buf[0] = '\0';
	for (size_t i = 0; i < p->n; i++)
		if (strcmp(p->v[i].name, name) == 0 && strcmp(p->v[i].action, "ALLOW") == 0)
			join(buf, size, p->v[i].args[0] ? p->v[i].args : "(any arguments)");
}

static int add_compare(struct lbc_explain *e, const char *name, bool native)
{
	for (size_t i = 0; i < e->n_cmp; i++)
		if (strcmp(e->cmp[i].name, name) == 0)
			return 0;
	struct lbc_sc_compare *nv = realloc(e->cmp, (e->n_cmp + 1) * sizeof(*nv));
	if (!nv)
		return -ENOMEM;
	e->cmp = nv;
	struct lbc_sc_compare *c = &e->cmp[e->n_cmp++];
	memset(c, 0, sizeof(*c));
	snprintf(c->name, sizeof(c->name), "%s", name);
	c->native = native;
	bool here = lbc_sc_allows(&e->ours, name), docker = lbc_sc_allows(&e->docker, name);
	char a[2048], b[2048];
	allow_rules(&e->ours, name, a, sizeof(a));
	allow_rules(&e->docker, name, b, sizeof(b));
	c->diff = here && docker ? (strcmp(a, b) == 0 ? LBC_SC_SAME : LBC_SC_ARGS_DIFFER)
		  : here	 ? LBC_SC_ONLY_LENSBOX
				 : LBC_SC_ONLY_DOCKER;
	rules_of(&e->ours, name, c->here, sizeof(c->here));
	rules_of(&e->docker, name, c->docker, sizeof(c->docker));
	return 0;
}

static int cmp_by_name(const void *a, const void *b)
{
	return strcmp(((const struct lbc_sc_compare *)a)->name, ((const struct lbc_sc_compare *)b)->name);
}

static int explain_seccomp(int dfd, const char *docker_json, size_t docker_len, struct lbc_explain *e,
			   struct lb_error *err)
{
	_cleanup_free_ char *text = NULL;
	size_t len;
	if (lbc_policy_read(dfd, "seccomp.json", &text, &len, err) < 0)
		return lb_error_wrap(err, "seccomp.json");
	struct sock_fprog prog = { 0 };
	size_t allowed;
	if (lb_seccomp_compile_json(text, len, "seccomp.json", &prog, &allowed, err) < 0)
		return -err->code;
	free(prog.filter);
	if (lbc_seccomp_resolve(text, len, NATIVE_ARCH, &e->ours, err) < 0)
		return lb_error_wrap(err, "seccomp.json");
	if (lbc_seccomp_resolve(docker_json, docker_len, NATIVE_ARCH, &e->docker, err) < 0)
		return lb_error_wrap(err, "Docker's profile (%s)", e->docker_source);
	const struct lbc_sc_profile *both[] = { &e->ours, &e->docker };
	for (size_t k = 0; k < 2; k++)
		for (size_t i = 0; i < both[k]->n; i++)
			if (strcmp(both[k]->v[i].action, "ALLOW") == 0 &&
			    add_compare(e, both[k]->v[i].name, both[k]->v[i].native) < 0)
				return lb_error_set(err, ENOMEM, "comparing the profiles");
	if (e->n_cmp)
		qsort(e->cmp, e->n_cmp, sizeof(*e->cmp), cmp_by_name);
	return 0;
}

/* ---- network tiers in words ---- */

struct tier_facts {
	char fwd_ports[64];   /* TCP ports the forward chain sends to `allowed` */
	char relay_ports[64]; /* TCP ports redirected to the relay */
	bool denied_first;    /* the forward chain refuses denied4 before anything else */
	bool dns_resolver;    /* UDP 53 to the gateway / resolver address goes to lensboxd's resolver */
	bool ipv4_only;	      /* sb_pre drops what is not IPv4 */
	bool anti_spoof;      /* sb_pre drops a source other than the sandbox's */
	bool anti_spoof6;     /* ... and an IPv6 source other than its IPv6 address */
	bool denied6_first;   /* the forward chain refuses denied6 before anything it allows */
	bool refuse_rest;     /* the forward chain ends in a refusal */
	bool udp, icmp;	      /* some rule lets UDP / ICMP through the forward chain */
	char dns_rate[32];    /* sb_pre drops DNS over this rate ("200/second"), "" when unlimited */
	char relay_rate[32];  /* sb_pre drops new relayed connections (SYNs) over this rate */
};

static void trim(char *s)
{
	size_t n = strlen(s);
	while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r'))
		s[--n] = '\0';
	size_t lead = strspn(s, " \t");
	memmove(s, s + lead, strlen(s + lead) + 1);
}

/* "{ 80, 443 }" or "80" after key in line -> "80, 443" */
static void ports_after(const char *line, const char *key, char *buf, size_t size)
{
	const char *p = strstr(line, key);
	if (!p)
		return;
	p += strlen(key);
	while (*p == ' ')
		p++;
	size_t n = *p == '{' ? strcspn(p + 1, "}") : strcspn(p, " ");
	snprintf(buf, size, "%.*s", (int)(n > 60 ? 60 : n), *p == '{' ? p + 1 : p);
	trim(buf);
}

/* One rule line of a tier chain (chain = the part after "{{SB}}_"); false when no sentence covers it. */
static bool recognise(struct tier_facts *f, const char *chain, const char *line, const char *set_ports)
{
	bool fwd = strcmp(chain, "fwd") == 0, dnat = strcmp(chain, "dnat") == 0, in = strcmp(chain, "in") == 0;
	bool pre = strcmp(chain, "pre") == 0, refuse = strcmp(chain, "refuse") == 0;
	if (strstr(line, "udp") && (fwd && (strstr(line, "accept") || strstr(line, "goto allowed"))))
		f->udp = true;
	if (strstr(line, "icmp") && fwd && (strstr(line, "accept") || strstr(line, "goto allowed")))
		f->icmp = true;
	if (refuse && (strncmp(line, "counter name", 12) == 0 || strncmp(line, "meta l4proto tcp reject", 23) == 0 ||
		       strncmp(line, "reject with icmpx", 17) == 0))
		return true;
	if (pre && strncmp(line, "ip saddr != {{ADDR}}", 20) == 0 && strstr(line, "drop"))
		return f->anti_spoof = true;
	if (pre && strncmp(line, "meta nfproto != ipv4", 20) == 0 && strstr(line, "drop"))
		return f->ipv4_only = true;
	if (pre && strncmp(line, "ip6 saddr != {{ADDR6}}", 22) == 0 && strstr(line, "drop"))
		return f->anti_spoof6 = true;
	/* the sandbox kernel's own link-local housekeeping (multicast listener reports, router solicitations) */
	if (pre && strncmp(line, "icmpv6 type { ", 14) == 0 && !strstr(line, "echo") && strstr(line, "} drop"))
		return true;
	if (pre && strcmp(line, "accept") == 0)
		return true;
	if (pre && strstr(line, " limit rate over ") && strstr(line, "drop") &&
	    (strncmp(line, "udp dport 53 ", 13) == 0 || strncmp(line, "tcp dport { 80, 443 } tcp flags", 31) == 0)) {
		char *rate = line[0] == 'u' ? f->dns_rate : f->relay_rate;
		ports_after(line, "limit rate over", rate, sizeof(f->dns_rate));
		return true;
	}
	if (dnat && strstr(line, "udp dport 53 dnat ip to {{GATEWAY}}:{{RESOLVER_PORT}}"))
		return f->dns_resolver = true;
	if (dnat && (strcmp(line, "ip daddr @denied4 return") == 0 || strcmp(line, "ip6 daddr @denied6 return") == 0 ||
		     strcmp(line, "fib daddr type local return") == 0))
		return true;
	if (dnat && strstr(line, "dnat ip6 to [{{GATEWAY6}}]:{{RELAY_PORT}}") && strncmp(line, "tcp dport", 9) == 0)
		return true; /* the IPv6 twin of the IPv4 redirection below, on the same ports */
	if (dnat && strstr(line, "dnat ip to {{GATEWAY}}:{{RELAY_PORT}}") && strncmp(line, "tcp dport", 9) == 0) {
		ports_after(line, "tcp dport", f->relay_ports, sizeof(f->relay_ports));
		return true;
	}
	if (in && strstr(line, "ct status dnat accept") &&
	    (strstr(line, "dport {{RESOLVER_PORT}}") || strstr(line, "dport {{RELAY_PORT}}")))
		return true;
	if ((in || fwd) && strcmp(line, "jump {{SB}}_refuse") == 0) {
		f->refuse_rest |= fwd;
		return true;
	}
	if (fwd && strcmp(line, "ip daddr @denied4 jump {{SB}}_refuse") == 0) {
		f->denied_first = !f->fwd_ports[0];
		return true;
	}
	if (fwd && strcmp(line, "ip6 daddr @denied6 jump {{SB}}_refuse") == 0) {
		f->denied6_first = !f->fwd_ports[0];
		return true;
	}
	if (fwd && strncmp(line, "tcp dport ", 10) == 0 && strstr(line, "goto allowed")) {
		if (strstr(line, "@{{SB}}_tcp_ports"))
			snprintf(f->fwd_ports, sizeof(f->fwd_ports), "%s", set_ports);
		else
			ports_after(line, "tcp dport", f->fwd_ports, sizeof(f->fwd_ports));
		return true;
	}
	return false;
}

static int add_unexplained(struct lbc_tier_words *w, const char *chain, const char *line)
{
	char **nv = realloc(w->unexplained, (w->n_unexplained + 1) * sizeof(*nv));
	if (!nv)
		return -ENOMEM;
	w->unexplained = nv;
	if (asprintf(&w->unexplained[w->n_unexplained], "chain {{SB}}_%s: %s", chain, line) < 0)
		return -ENOMEM;
	w->n_unexplained++;
	return 0;
}

/* Walks the chains of a tier template: "chain {{SB}}_X {" ... "}" and the elements of set {{SB}}_tcp_ports. */
static int tier_scan(char *text, struct tier_facts *f, struct lbc_tier_words *w)
{
	char chain[32] = "", set_ports[64] = "";
	const char *ports = strstr(text, "set {{SB}}_tcp_ports");
	if (ports && strstr(ports, "elements = {"))
		ports_after(strstr(ports, "elements = "), "elements =", set_ports, sizeof(set_ports));
	char *save = NULL;
	for (char *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
		trim(l);
		if (!l[0] || l[0] == '#')
			continue;
		if (sscanf(l, "chain {{SB}}_%31[a-z0-9_] {", chain) == 1)
			continue;
		if (strcmp(l, "}") == 0) {
			chain[0] = '\0';
			continue;
		}
		if (chain[0] && !recognise(f, chain, l, set_ports) && add_unexplained(w, chain, l) < 0)
			return -ENOMEM;
	}
	return 0;
}

static int explain_tier(int dfd, const char *tier, const struct lbc_explain *e, struct lbc_tier_words *w,
			struct lb_error *err)
{
	snprintf(w->tier, sizeof(w->tier), "%s", tier);
	char path[64];
	snprintf(path, sizeof(path), "network/%s.nft", tier);
	_cleanup_free_ char *text = NULL;
	size_t len;
	if (lbc_policy_read(dfd, path, &text, &len, err) < 0)
		return lb_error_wrap(err, "%s", path);
	struct tier_facts f = { 0 };
	if (tier_scan(text, &f, w) < 0)
		return lb_error_set(err, ENOMEM, "explaining %s", path);
	char names[256] = "";
	for (size_t i = 0; i < e->n_package_names; i++)
		join(names, sizeof(names), e->package_names[i]);
	for (char *c = names; *c; c++)
		if (*c == ';')
			*c = ',';
	char denied[96];
	snprintf(denied, sizeof(denied), "denied.list (%zu IPv4 and %zu IPv6 ranges, plus the sandbox pool)",
		 e->n_denied4, e->n_denied6);
	FILE *m = fmemopen(w->summary, sizeof(w->summary), "w");
	if (!m)
		return lb_error_set(err, errno, "explaining %s", path);
	if (f.fwd_ports[0])
		fprintf(m, "%s: TCP %s to any address %s %s", tier, f.fwd_ports,
			f.denied_first ? "not in" : "(denied ranges NOT refused first!) outside", denied);
	else
		fprintf(m, "%s: nothing is forwarded", tier);
	if (f.relay_ports[0])
		fprintf(m, "; ");
	if (f.relay_ports[0])
		fprintf(m, "TCP %s only through lensboxd's relay, to the names of packages.list (%s), never to %s",
			f.relay_ports, names, denied);
	fprintf(m, "; DNS %s", f.dns_resolver ? "only through lensboxd's resolver" : "none");
	if (f.dns_resolver && f.relay_ports[0])
		fprintf(m, ", which answers only those names");
	if (f.dns_rate[0] || f.relay_rate[0])
		fprintf(m, "; at most %s%s%s%s%s", f.dns_rate[0] ? f.dns_rate : "", f.dns_rate[0] ? " DNS queries" : "",
			f.dns_rate[0] && f.relay_rate[0] ? " and " : "", f.relay_rate,
			f.relay_rate[0] ? " new relayed connections" : "");
	fprintf(m, "; %s%s%s; %s; everything else refused at once and counted",
		f.udp ? "UDP forwarded (see the rules)" : "no UDP", f.icmp ? ", ICMP forwarded" : ", no ICMP",
		f.ipv4_only ? ", no IPv6"
		: f.anti_spoof6 && (f.denied6_first || !f.fwd_ports[0])
		    ? ", IPv6 under the same rules (denied.list's IPv6 ranges and the NAT64 form of every denied IPv4 "
		      "address refused first)"
		    : ", IPv6 NOT checked!",
		f.anti_spoof ? "a forged source address is dropped" : "source addresses NOT checked!");
	if (!f.refuse_rest)
		fprintf(m, " (the forward chain does NOT end in a refusal: base.nft's through_host decides)");
	fclose(m);
	return 0;
}

static int explain_network(int dfd, struct lbc_explain *e, struct lb_error *err)
{
	_cleanup_free_ char *denied = NULL, *names = NULL;
	size_t len;
	struct lb_cidr_list dl = { 0 };
	struct lb_name_list nl = { 0 };
	if (lbc_policy_read(dfd, "network/denied.list", &denied, &len, err) < 0 ||
	    lb_cidr_list_parse(denied, &dl, err) < 0)
		return lb_error_wrap(err, "network/denied.list");
	for (size_t i = 0; i < dl.n; i++)
		dl.v[i].family == AF_INET ? e->n_denied4++ : e->n_denied6++;
	lb_cidr_list_free(&dl);
	if (lbc_policy_read(dfd, "network/packages.list", &names, &len, err) < 0 ||
	    lb_name_list_parse(names, &nl, err) < 0)
		return lb_error_wrap(err, "network/packages.list");
	e->package_names = TAKE_PTR(nl.v);
	e->n_package_names = nl.n;
	snprintf(e->tiers[0].tier, sizeof(e->tiers[0].tier), "off");
	snprintf(e->tiers[0].summary, sizeof(e->tiers[0].summary),
		 "off: no interface but lo (no veth, no template); no DNS; reaches nothing, not even the host");
	if (explain_tier(dfd, "packages", e, &e->tiers[1], err) < 0 ||
	    explain_tier(dfd, "web", e, &e->tiers[2], err) < 0)
		return -err->code;
	return 0;
}

int lbc_policy_explain(const char *dir, const char *docker_json, size_t docker_len, const char *docker_source,
		       struct lbc_explain *ret, struct lb_error *err)
{
	_cleanup_close_ int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return lb_error_set(err, errno, "opening the policy directory %s", dir);
	struct lbc_explain e = { 0 };
	snprintf(e.docker_source, sizeof(e.docker_source), "%s", docker_source);
	_cleanup_free_ char *ll = NULL, *lim = NULL;
	size_t len;
	int r = explain_seccomp(dfd, docker_json, docker_len, &e, err);
	if (r == 0 && lbc_policy_read(dfd, "landlock.rules", &ll, &len, err) < 0)
		r = lb_error_wrap(err, "landlock.rules");
	if (r == 0 && lb_landlock_parse(ll, "landlock.rules", &e.landlock, err) < 0)
		r = -err->code;
	if (r == 0 && lbc_policy_read(dfd, "limits.conf", &lim, &len, err) < 0)
		r = lb_error_wrap(err, "limits.conf");
	if (r == 0 && lb_limits_parse(lim, "limits.conf", &e.limits, err) < 0)
		r = -err->code;
	if (r == 0)
		r = explain_network(dfd, &e, err);
	if (r < 0) {
		lbc_explain_free(&e);
		return r;
	}
	*ret = e;
	return 0;
}

void lbc_explain_free(struct lbc_explain *e)
{
	lbc_sc_profile_free(&e->ours);
	lbc_sc_profile_free(&e->docker);
	free(e->cmp);
	lb_landlock_policy_clear(&e->landlock);
	for (size_t t = 0; t < LB_ARRAY_SIZE(e->tiers); t++) {
		for (size_t i = 0; i < e->tiers[t].n_unexplained; i++)
			free(e->tiers[t].unexplained[i]);
		free(e->tiers[t].unexplained);
	}
	struct lb_name_list nl = { .v = e->package_names, .n = e->n_package_names };
	lb_name_list_free(&nl);
	memset(e, 0, sizeof(*e));
}

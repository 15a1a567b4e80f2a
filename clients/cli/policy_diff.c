/*
 * policy_diff.c — `lensbox policy diff`: the live table `inet lensbox` against the table lensboxd would load from
 * the policy files on disk.
 *
 * Runs in the CLI process, in the network namespace whose table it reads (CAP_NET_ADMIN there to list it). The
 * expected table is not guessed from the templates' text: a child in a throwaway network namespace (policy_files.c)
 * renders base.nft, services.nft, the denied sets and, for each sandbox slot found live, its tier's template for that
 * slot with lb_netfilter's renderer (the code lensboxd loads with), loads them, and lists the result as JSON. Both
 * listings are then reduced to comparable entries:
 *
 *   chain/set/map/counter/flowtable NAME   the object without its handle (counters without their counts, the
 *                                          flowtable without its devices, the maps without their elements)
 *   rule CHAIN                             the chain's rules in order, each as its expressions (no handle)
 *   element MAP KEY                        one verdict-map element: "lbh<N>" must jump to sb<N>_<hook>
 *
 * What comes and goes with sandboxes (their sb<N>_* objects, their map elements, their veths in the flowtable, the
 * counters' counts, the uplinks) is expected to differ from a fresh load and is compared with the template for its
 * slot instead of being ignored: a rule added by hand to a base chain or to a sandbox's chain is drift either way.
 * Every JSON value is type-checked and the nesting bounded; the listings are bounded in size.
 */
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <yajl/yajl_tree.h>

#include "lb/cleanup.h"
#include "lb/fileio.h"
#include "lb/netparse.h"
#include "lb/nftpolicy.h"
#include "jtree.h"
#include "policy.h"

#define LISTING_MAX (64u << 20)
#define MAX_SLOTS   16384
#define MAX_DEPTH   64

static yajl_val get(yajl_val o, const char *key)
{
	return lbc_jtree_get(o, key);
}

static const char *str(yajl_val v)
{
	return lbc_jtree_str(v, "");
}

/* "sb<N>_..." -> N */
static bool slot_of(const char *name, unsigned *ret)
{
	if (strncmp(name, "sb", 2) != 0 || name[2] < '0' || name[2] > '9')
		return false;
	char *end;
	unsigned long v = strtoul(name + 2, &end, 10);
	if (*end != '_' || v >= MAX_SLOTS)
		return false;
	*ret = (unsigned)v;
	return true;
}

/* ---- JSON to one comparable string ---- */

static void emit(FILE *f, yajl_val v, int depth, const char *const *skip, size_t n_skip)
{
	if (depth > MAX_DEPTH) {
		fputs("…", f);
		return;
	}
	if (YAJL_IS_STRING(v)) {
		fputc('"', f);
		for (const char *c = str(v); *c; c++)
			fprintf(f, *c == '"' || *c == '\\' ? "\\%c" : "%c", *c);
		fputc('"', f);
	} else if (YAJL_IS_NUMBER(v)) {
		fputs(v->u.number.r ? v->u.number.r : "0", f);
	} else if (YAJL_IS_OBJECT(v)) {
		fputc('{', f);
		bool first = true;
		for (size_t i = 0; i < v->u.object.len; i++) {
			bool skipped = false;
			for (size_t k = 0; k < n_skip; k++)
				skipped |= strcmp(v->u.object.keys[i], skip[k]) == 0;
			if (skipped)
				continue;
			fprintf(f, "%s\"%s\":", first ? "" : ",", v->u.object.keys[i]);
			emit(f, v->u.object.values[i], depth + 1, NULL, 0);
			first = false;
		}
		fputc('}', f);
	} else if (YAJL_IS_ARRAY(v)) {
		fputc('[', f);
		for (size_t i = 0; i < v->u.array.len; i++) {
			if (i)
				fputc(',', f);
			emit(f, v->u.array.values[i], depth + 1, NULL, 0);
		}
		fputc(']', f);
	} else {
		fputs(YAJL_IS_TRUE(v) ? "true" : YAJL_IS_FALSE(v) ? "false" : "null", f);
	}
}

static char *canon(yajl_val v, const char *const *skip, size_t n_skip)
{
	char *out = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&out, &len);
	if (!f)
		return NULL;
	emit(f, v, 0, skip, n_skip);
	if (fclose(f) != 0) {
		free(out);
		return NULL;
	}
	return out;
}

/* ---- a listing as entries ---- */

struct entry {
	char key[128]; /* "chain early", "rule to_host", "element sandbox_in lbh0" */
	char *canon;
	bool matched;
	long long handle; /* rules: their handle in the listing, to find their text */
};

struct entries {
	struct entry *v;
	size_t n;
};

static void entries_free(struct entries *e)
{
	for (size_t i = 0; i < e->n; i++)
		free(e->v[i].canon);
	free(e->v);
	e->v = NULL;
	e->n = 0;
}

__attribute__((format(printf, 3, 4))) static int entry_add(struct entries *e, char *canon_owned, const char *fmt, ...)
{
	if (!canon_owned)
		return -ENOMEM;
	struct entry *nv = realloc(e->v, (e->n + 1) * sizeof(*nv));
	if (!nv) {
		free(canon_owned);
		return -ENOMEM;
	}
	e->v = nv;
	struct entry *x = &e->v[e->n++];
	memset(x, 0, sizeof(*x));
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(x->key, sizeof(x->key), fmt, ap);
	va_end(ap);
	x->canon = canon_owned;
	return 0;
}

/* A verdict map's elements: [["lbh0", {"jump": {"target": "sb0_pre"}}], ...] (a lone element may not be nested). */
static int add_elements(struct entries *e, const char *map, yajl_val elem)
{
	for (size_t i = 0; YAJL_IS_ARRAY(elem) && i < elem->u.array.len; i++) {
		yajl_val pair = elem->u.array.values[i];
		if (!YAJL_IS_ARRAY(pair) || pair->u.array.len != 2)
			continue;
		if (entry_add(e, canon(pair->u.array.values[1], NULL, 0), "element %s %.40s", map,
			      str(pair->u.array.values[0])) < 0)
			return -ENOMEM;
	}
	return 0;
}

static int add_object(struct entries *e, const char *kind, yajl_val item, bool *slots)
{
	const char *name = str(get(item, "name"));
	unsigned s;
	bool per_sandbox = slot_of(name, &s);
	if (per_sandbox && slots)
		slots[s] = true;
	if (strcmp(kind, "rule") == 0) {
		static const char *const skip[] = { "family", "table", "chain", "handle" };
		if (slot_of(str(get(item, "chain")), &s) && slots)
			slots[s] = true;
		int r = entry_add(e, canon(item, skip, LB_ARRAY_SIZE(skip)), "rule %s", str(get(item, "chain")));
		yajl_val h = get(item, "handle");
		if (r == 0 && YAJL_IS_INTEGER(h))
			e->v[e->n - 1].handle = YAJL_GET_INTEGER(h);
		return r;
	}
	if (strcmp(kind, "map") == 0 && strncmp(name, "sandbox_", 8) == 0) {
		static const char *const skip[] = { "handle", "elem" };
		/* an element's slot counts as a sandbox only through its sb<N>_* objects: an element with none is drift
		 */
		yajl_val elem = get(item, "elem");
		if (add_elements(e, name, elem) < 0)
			return -ENOMEM;
		return entry_add(e, canon(item, skip, LB_ARRAY_SIZE(skip)), "map %s", name);
	}
	static const char *const skip_counter[] = { "handle", "packets", "bytes", "comment" };
	static const char *const skip_flowtable[] = { "handle", "dev" };
	static const char *const skip_other[] = { "handle" };
	const char *const *skip = strcmp(kind, "counter") == 0	   ? skip_counter
				  : strcmp(kind, "flowtable") == 0 ? skip_flowtable
								   : skip_other;
	size_t n = skip == skip_counter ? LB_ARRAY_SIZE(skip_counter) : skip == skip_flowtable ? 2 : 1;
	return entry_add(e, canon(item, skip, n), "%s %s", kind, name);
}

/* Parses a listing into entries; slots (may be NULL) gets the sandbox slots it holds. */
static int listing_entries(const char *json, struct entries *e, bool *slots, struct lb_error *err)
{
	char ebuf[128] = "";
	_cleanup_jtree_ yajl_val root = yajl_tree_parse(json, ebuf, sizeof(ebuf));
	yajl_val arr = get(root, "nftables");
	if (!YAJL_IS_ARRAY(arr))
		return lb_error_setx(err, EBADMSG, "nft's listing is not what nft -j writes: %.100s", ebuf);
	for (size_t i = 0; i < arr->u.array.len; i++) {
		yajl_val o = arr->u.array.values[i];
		if (!YAJL_IS_OBJECT(o) || o->u.object.len != 1)
			continue;
		const char *kind = o->u.object.keys[0];
		if (strcmp(kind, "metainfo") == 0 || strcmp(kind, "table") == 0)
			continue;
		if (add_object(e, kind, o->u.object.values[0], slots) < 0)
			return lb_error_set(err, ENOMEM, "reading nft's listing");
	}
	return 0;
}

/* ---- the expected table, built in a throwaway namespace ---- */

struct expect_job {
	const char *dir;
	const struct lbc_net_params *params;
	const bool *slots;     /* MAX_SLOTS */
	const bool *web;       /* MAX_SLOTS: the slot's tier is web (else packages) */
	const bool *connected; /* MAX_SLOTS: the slot has map elements (else it is warm: its objects only) */
	bool offload;	       /* the live table has offload.nft's flowtable */
};

static int read_template(int dfd, enum lb_nft_template t, char **ret, struct lb_error *err)
{
	char path[64];
	size_t len;
	snprintf(path, sizeof(path), "network/%s", lb_nft_template_file(t));
	if (lbc_policy_read(dfd, path, ret, &len, err) < 0)
		return lb_error_wrap(err, "%s", path);
	return 0;
}

/* In the child: loads what lensboxd would, writes the listing to fd, or "!message" when something failed. */
static int expect_job_run(void *data, int fd)
{
	struct expect_job *job = data;
	struct lb_error e = { 0 };
	_cleanup_close_ int dfd = open(job->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	_cleanup_free_ char *tmpl[LB_NFT_TEMPLATE_COUNT] = { 0 }, *denied = NULL, *text = NULL, *out = NULL;
	struct lb_nft_vars v = { .services_uid = job->params->services_uid,
				 .upstream_port = job->params->upstream_port,
				 .uplinks = "\"lo\"" };
	snprintf(v.upstream, sizeof(v.upstream), "%s", job->params->upstream);
	struct lb_cidr_list dl = { 0 };
	struct lb_cidr pool;
	size_t len;
	int r = dfd < 0 ? lb_error_set(&e, errno, "opening %s", job->dir) : 0;
	if (r == 0 && lb_nft_vars_init(&v, job->params->pool, job->params->pool6, 0, 0) < 0)
		r = lb_error_setx(&e, EINVAL,
				  "network pools %s, %s: not an IPv4 range with prefix 8..28 and an IPv6 one with "
				  "prefix 8..96",
				  job->params->pool, job->params->pool6);
	for (int t = 0; r == 0 && t < LB_NFT_TEMPLATE_COUNT; t++)
		if ((t != LB_NFT_SERVICES || v.services_uid) && (t != LB_NFT_OFFLOAD || job->offload))
			r = read_template(dfd, (enum lb_nft_template)t, &tmpl[t], &e);
	if (r == 0 && (lbc_policy_read(dfd, "network/denied.list", &denied, &len, &e) < 0 ||
		       lb_cidr_list_parse(denied, &dl, &e) < 0))
		r = lb_error_wrap(&e, "network/denied.list");
	if (r == 0 && (lb_cidr_parse(v.pool, &pool) < 0 || lb_cidr_list_add(&dl, &pool) < 0 ||
		       lb_cidr_parse(v.pool6, &pool) < 0 || lb_cidr_list_add(&dl, &pool) < 0))
		r = lb_error_setx(&e, EINVAL, "adding the pools to the denied ranges");
	/* lensboxd's order (net.c): base, services and the denied sets in one transaction, then each sandbox */
	_cleanup_free_ char *base = NULL, *services = NULL, *sets = NULL, *all = NULL;
	if (r == 0 &&
	    (lb_nft_render(LB_NFT_BASE, tmpl[LB_NFT_BASE], &v, &base, &e) < 0 ||
	     (tmpl[LB_NFT_SERVICES] && lb_nft_render(LB_NFT_SERVICES, tmpl[LB_NFT_SERVICES], &v, &services, &e) < 0) ||
	     lb_nft_render_denied(&dl, &sets, &e) < 0))
		r = -e.code;
	if (r == 0 && asprintf(&all, "%s\n%s\n%s", base, services ? services : "", sets) < 0)
		r = lb_error_set(&e, ENOMEM, "building the table");
	if (r == 0 && lb_nft_exec(all, false, NULL, &e) < 0)
		r = lb_error_wrap(&e, "loading base.nft as lensboxd would");
	/* The flowtable, over lo here (its devices are not compared): where the kernel refuses it, as it would
	 * refuse lensboxd, the live table cannot hold it either, and the comparison says so. */
	_cleanup_free_ char *offload = NULL;
	if (r == 0 && tmpl[LB_NFT_OFFLOAD] &&
	    lb_nft_render(LB_NFT_OFFLOAD, tmpl[LB_NFT_OFFLOAD], &v, &offload, &e) == 0)
		(void)lb_nft_exec(offload, false, NULL, &e);
	for (unsigned s = 0; r == 0 && s < MAX_SLOTS; s++) {
		if (!job->slots[s])
			continue;
		enum lb_nft_template t = job->web[s] ? LB_NFT_WEB : LB_NFT_PACKAGES;
		_cleanup_free_ char *rules = NULL;
		v.slot = s;
		size_t head;
		if (lb_nft_render(t, tmpl[t], &v, &rules, &e) < 0)
			r = lb_error_wrap(&e, "rendering %s for slot %u", lb_nft_template_file(t), s);
		else if (!job->connected[s] && lb_nft_split_elements(rules, NULL, NULL, &head) == 0)
			rules[head] = '\0'; /* a warm slot (lensboxd's net.c): its objects, no element yet */
		if (r == 0 && lb_nft_exec(rules, false, NULL, &e) < 0)
			r = lb_error_wrap(&e, "loading %s for slot %u", lb_nft_template_file(t), s);
	}
	lb_cidr_list_free(&dl);
	_cleanup_free_ char *text_listing = NULL;
	if (r == 0 && lb_nft_list_json(&out, &e) < 0)
		r = -e.code;
	if (r < 0) {
		dprintf(fd, "!%s", e.msg);
		return 0;
	}
	(void)lb_write_all(fd, out ? out : "", out ? strlen(out) : 0);
	/* then, after a record separator, the same table as text (best effort: only for showing rules) */
	if (lb_nft_list_text(&text_listing, &e) == 0)
		dprintf(fd, "\x1e%s", text_listing);
	return 0;
}

/* ---- comparing ---- */

/* The text of the rule with handle h in a text listing ("...rule... # handle h"), into buf; false when absent. */
static bool rule_text(const char *listing, long long h, char *buf, size_t size)
{
	char tag[40];
	snprintf(tag, sizeof(tag), " # handle %lld\n", h);
	const char *end = listing ? strstr(listing, tag) : NULL;
	if (!end)
		return false;
	const char *start = end;
	while (start > listing && start[-1] != '\n')
		start--;
	start += strspn(start, "\t ");
	snprintf(buf, size, "%.*s", (int)(end - start), start);
	return true;
}

static int drift(struct lbc_diff *d, const char *what, const char *change, const char *detail, const char *listing,
		 long long handle)
{
	char text[512];
	if (handle && rule_text(listing, handle, text, sizeof(text)))
		detail = text;
	struct lbc_drift *nv = realloc(d->v, (d->n + 1) * sizeof(*nv));
	if (!nv)
		return -ENOMEM;
	d->v = nv;
	struct lbc_drift *x = &d->v[d->n++];
	snprintf(x->what, sizeof(x->what), "%s", what);
	snprintf(x->change, sizeof(x->change), "%s", change);
	snprintf(x->detail, sizeof(x->detail), "%s", detail);
	return 0;
}

static struct entry *find(struct entries *e, const char *key, const char *canon_or_null)
{
	for (size_t i = 0; i < e->n; i++)
		if (!e->v[i].matched && strcmp(e->v[i].key, key) == 0 &&
		    (!canon_or_null || strcmp(e->v[i].canon, canon_or_null) == 0))
			return &e->v[i];
	return NULL;
}

/* Rules are matched by chain and expressions (a reordering shows as one removed and one added); objects by name,
 * a different body being a change. */
static int compare(struct entries *live, struct entries *want, const char *live_text, const char *want_text,
		   struct lbc_diff *d)
{
	for (size_t i = 0; i < want->n; i++) {
		struct entry *w = &want->v[i], *l = find(live, w->key, w->canon);
		if (l) {
			l->matched = w->matched = true;
			continue;
		}
		if (strncmp(w->key, "rule ", 5) == 0)
			continue;
		l = find(live, w->key, NULL);
		if (l) {
			l->matched = w->matched = true;
			char detail[512];
			snprintf(detail, sizeof(detail), "now %.240s; the files say %.240s", l->canon, w->canon);
			if (drift(d, w->key, "changed", detail, NULL, 0) < 0)
				return -ENOMEM;
		}
	}
	for (size_t i = 0; i < want->n; i++)
		if (!want->v[i].matched &&
		    drift(d, want->v[i].key, "removed", want->v[i].canon, want_text, want->v[i].handle) < 0)
			return -ENOMEM;
	for (size_t i = 0; i < live->n; i++)
		if (!live->v[i].matched &&
		    drift(d, live->v[i].key, "added", live->v[i].canon, live_text, live->v[i].handle) < 0)
			return -ENOMEM;
	return 0;
}

/* Which slots are web (the set sb<N>_tcp_ports exists only in web.nft) and which are connected (an element of a
 * verdict map jumps to one of their chains; a slot without is a warm one, kept loaded for the next sandbox). */
static void slot_tiers(const struct entries *live, bool *web, bool *connected)
{
	for (size_t i = 0; i < live->n; i++) {
		unsigned s;
		const char *k = live->v[i].key;
		if (strncmp(k, "set ", 4) == 0 && slot_of(k + 4, &s) && strstr(k + 4, "_tcp_ports"))
			web[s] = true;
		const char *target = strstr(live->v[i].canon ? live->v[i].canon : "", "\"sb");
		if (strncmp(k, "element ", 8) == 0 && target && slot_of(target + 1, &s))
			connected[s] = true;
	}
}

int lbc_policy_diff(const char *dir, const struct lbc_net_params *params, struct lbc_diff *ret, struct lb_error *err)
{
	struct lbc_diff d = { 0 };
	_cleanup_free_ char *live_json = NULL, *want_json = NULL;
	int r = lb_nft_list_json(&live_json, err);
	if (r == -ENOENT) {
		*ret = d;
		return 0;
	}
	if (r < 0 && strstr(err->msg, "Operation not permitted"))
		return lb_error_setx(err, EPERM,
				     "reading the live table inet lensbox needs CAP_NET_ADMIN (run diff as root)");
	if (r < 0)
		return lb_error_wrap(err, "reading the live table inet lensbox");
	d.table_loaded = true;
	bool slots[MAX_SLOTS] = { 0 }, web[MAX_SLOTS] = { 0 }, connected[MAX_SLOTS] = { 0 }; /* 48 KiB */
	struct entries live = { 0 }, want = { 0 };
	r = listing_entries(live_json, &live, slots, err);
	if (r == 0) {
		slot_tiers(&live, web, connected);
		for (unsigned s = 0; s < MAX_SLOTS; s++) {
			d.sandboxes += slots[s] && connected[s];
			d.warm += slots[s] && !connected[s];
		}
		struct expect_job job = { .dir = dir,
					  .params = params,
					  .slots = slots,
					  .web = web,
					  .connected = connected,
					  .offload = find(&live, "flowtable fastpath", NULL) != NULL };
		size_t len;
		r = lbc_in_throwaway_netns(expect_job_run, &job, LISTING_MAX, &want_json, &len, err);
		if (r < 0)
			lb_error_wrap(err, "building the table the files describe");
	}
	/* the rebuilt table's text follows its JSON after a record separator */
	char *want_text = r == 0 ? strchr(want_json, '\x1e') : NULL;
	if (want_text)
		*want_text++ = '\0';
	_cleanup_free_ char *live_text = NULL;
	struct lb_error e2;
	if (r == 0 && lb_nft_list_text(&live_text, &e2) < 0)
		live_text = NULL; /* rules are then shown as JSON */
	if (r == 0 && want_json[0] == '!')
		r = lb_error_setx(err, EINVAL, "building the table the files describe: %s", want_json + 1);
	if (r == 0)
		r = listing_entries(want_json, &want, NULL, err);
	if (r == 0 && compare(&live, &want, live_text, want_text, &d) < 0)
		r = lb_error_set(err, ENOMEM, "comparing the table");
	entries_free(&live);
	entries_free(&want);
	if (r < 0) {
		lbc_diff_free(&d);
		return r;
	}
	*ret = d;
	return 0;
}

void lbc_diff_free(struct lbc_diff *d)
{
	free(d->v);
	d->v = NULL;
	d->n = 0;
}

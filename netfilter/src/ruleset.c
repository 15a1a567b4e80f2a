/*
 * ruleset.c — lensbox's nftables table through libnftables: running rule text, filling the policy templates, finding
 * and removing one sandbox's objects, reading its counter, spotting other firewalls' forward policies.
 *
 * Runs in lensboxd (root, any thread) in the host's network namespace. Every change is one nft transaction, so the
 * kernel sees a sandbox's rules appear or vanish all at once. Rule text is built only from the reviewed files in
 * policy/network/ and values lensboxd generates (numbers, addresses, interface names lbh<N>); a sandbox's name is
 * validated against ^[a-z0-9][a-z0-9._-]{0,62}$ before it reaches a comment, so nothing from outside is parsed by nft.
 *
 * Layout (see policy/network/base.nft): sandbox N owns chains, sets and a counter named sb<N>_*, and one element
 * keyed "lbh<N>" in each of the verdict maps sandbox_pre, sandbox_dnat, sandbox_in and sandbox_fwd; a `web` sandbox
 * also has its veth lbh<N> among the devices of the flowtable `fastpath` when there is one (offload.nft).
 */
#include <errno.h>
#include <nftables/libnftables.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <yajl/yajl_tree.h>

#include "internal.h"
#include "lb/cleanup.h"
#include "lb/fileio.h"
#include "lb/nftpolicy.h"

static void nft_ctx_freep(struct nft_ctx **c)
{
	if (*c)
		nft_ctx_free(*c);
}

static void yajl_freep(yajl_val *v)
{
	if (*v)
		yajl_tree_free(*v);
}

/* cmds is nft's text, or with from_file the path of a file holding it (nft then names the line of an error). */
static int run_as(const char *cmds, unsigned output_flags, bool dry_run, bool from_file, char **ret_out,
		  struct lb_error *err)
{
	__attribute__((cleanup(nft_ctx_freep))) struct nft_ctx *nft = nft_ctx_new(NFT_CTX_DEFAULT);
	if (!nft)
		return lb_error_set(err, ENOMEM, "creating an nftables context");
	if (output_flags)
		nft_ctx_output_set_flags(nft, output_flags);
	if (dry_run)
		nft_ctx_set_dry_run(nft, true);
	if (nft_ctx_buffer_output(nft) < 0 || nft_ctx_buffer_error(nft) < 0)
		return lb_error_set(err, ENOMEM, "buffering nftables output");
	if ((from_file ? nft_run_cmd_from_filename(nft, cmds) : nft_run_cmd_from_buffer(nft, cmds)) != 0) {
		const char *e = nft_ctx_get_error_buffer(nft);
		/* keep the first line of nft's message: it names the file position and the problem */
		char first[300];
		snprintf(first, sizeof(first), "%s", e ? e : "");
		char *nl = strchr(first, '\n');
		if (nl)
			*nl = '\0';
		int code = strstr(e ? e : "", "No such file or directory") ? ENOENT : EINVAL;
		return lb_error_setx(err, code, "nftables refused the rules: %s", first);
	}
	if (ret_out) {
		char *out = strdup(nft_ctx_get_output_buffer(nft));
		if (!out)
			return lb_error_set(err, ENOMEM, "copying nftables output");
		*ret_out = out;
	}
	return 0;
}

static int run(const char *cmds, bool json, char **ret_out, struct lb_error *err)
{
	return run_as(cmds, json ? NFT_CTX_OUTPUT_JSON : 0, false, false, ret_out, err);
}

int lb_nft_run(const char *cmds, char **ret_out, struct lb_error *err)
{
	return run(cmds, false, ret_out, err);
}

int lb_nft_exec(const char *cmds, bool dry_run, char **ret_out, struct lb_error *err)
{
	/* Through a memfd: libnftables names the line of an error only for a file ("FILE:LINE:COL: Error: ..."). */
	_cleanup_close_ int fd = memfd_create("lensbox-nft", MFD_CLOEXEC);
	if (fd < 0)
		return lb_error_set(err, errno, "creating a memfd for nft");
	if (lb_write_all(fd, cmds, strlen(cmds)) < 0)
		return lb_error_set(err, errno, "writing the rules for nft");
	char path[64];
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	return run_as(path, 0, dry_run, true, ret_out, err);
}

int lb_nft_list_text(char **ret, struct lb_error *err)
{
	return run_as("list table inet lensbox", NFT_CTX_OUTPUT_HANDLE, false, false, ret, err);
}

int lb_nft_list_json(char **ret, struct lb_error *err)
{
	return run("list table inet lensbox", true, ret, err);
}

int lb_template_fill(const char *tmpl, const char *const *keys, const char *const *vals, size_t n, char **ret,
		     struct lb_error *err)
{
	char *out = NULL;
	size_t size = 0;
	_cleanup_fclose_ FILE *f = open_memstream(&out, &size);
	if (!f)
		return lb_error_set(err, errno, "allocating the rule text");
	const char *p = tmpl;
	for (;;) {
		const char *open = strstr(p, "{{");
		if (!open) {
			fputs(p, f);
			break;
		}
		fwrite(p, 1, (size_t)(open - p), f);
		const char *close = strstr(open, "}}");
		if (!close) {
			fclose(TAKE_PTR(f));
			free(out);
			return lb_error_setx(err, EINVAL, "template: unterminated {{");
		}
		size_t klen = (size_t)(close - open - 2);
		const char *val = NULL;
		for (size_t i = 0; i < n; i++)
			if (strlen(keys[i]) == klen && memcmp(keys[i], open + 2, klen) == 0)
				val = vals[i];
		if (!val) {
			fclose(TAKE_PTR(f));
			free(out);
			return lb_error_setx(err, EINVAL, "template: unknown word {{%.*s}}",
					     (int)(klen > 40 ? 40 : klen), open + 2);
		}
		fputs(val, f);
		p = close + 2;
	}
	if (fclose(TAKE_PTR(f)) != 0) {
		free(out);
		return lb_error_set(err, ENOMEM, "writing the rule text");
	}
	*ret = out;
	return 0;
}

/* The table as JSON, parsed; NULL object when the table does not exist. */
static int list_table(yajl_val *ret, struct lb_error *err)
{
	char *out = NULL;
	int r = run("list table inet lensbox", true, &out, err);
	if (r < 0)
		return r;
	char ebuf[128];
	yajl_val v = yajl_tree_parse(out, ebuf, sizeof(ebuf));
	free(out);
	if (!v)
		return lb_error_setx(err, EBADMSG, "parsing nft's JSON: %s", ebuf);
	*ret = v;
	return 0;
}

/* A JSON string's text, or "" for anything else (so string functions never see NULL). */
static const char *str_of(yajl_val v)
{
	return YAJL_IS_STRING(v) && v->u.string ? v->u.string : "";
}

static yajl_val obj_get(yajl_val o, const char *key)
{
	if (!YAJL_IS_OBJECT(o))
		return NULL;
	for (size_t i = 0; i < o->u.object.len; i++)
		if (strcmp(o->u.object.keys[i], key) == 0)
			return o->u.object.values[i];
	return NULL;
}

/* Calls fn(kind, name, item) for every chain/set/map/counter of the table. */
static void each_object(yajl_val root, void (*fn)(const char *kind, const char *name, yajl_val item, void *data),
			void *data)
{
	yajl_val arr = obj_get(root, "nftables");
	if (!YAJL_IS_ARRAY(arr))
		return;
	for (size_t i = 0; i < arr->u.array.len; i++) {
		yajl_val o = arr->u.array.values[i];
		if (!YAJL_IS_OBJECT(o) || o->u.object.len != 1)
			continue;
		const char *kind = o->u.object.keys[0];
		yajl_val item = o->u.object.values[0];
		yajl_val name = obj_get(item, "name");
		if (YAJL_IS_STRING(name))
			fn(kind, str_of(name), item, data);
	}
}

/* "sb<N>_..." -> N */
static bool slot_of_name(const char *name, unsigned *ret)
{
	if (strncmp(name, "sb", 2) != 0 || name[2] < '0' || name[2] > '9')
		return false;
	char *end;
	unsigned long v = strtoul(name + 2, &end, 10);
	if (*end != '_' || v > 1u << 20)
		return false;
	*ret = (unsigned)v;
	return true;
}

static bool map_has_key(yajl_val item, const char *key)
{
	yajl_val elem = obj_get(item, "elem");
	if (!YAJL_IS_ARRAY(elem))
		return false;
	for (size_t i = 0; i < elem->u.array.len; i++) {
		yajl_val e = elem->u.array.values[i];
		if (YAJL_IS_ARRAY(e) && e->u.array.len >= 1 && YAJL_IS_STRING(e->u.array.values[0]) &&
		    strcmp(str_of(e->u.array.values[0]), key) == 0)
			return true;
	}
	return false;
}

/* Whether the flowtable item lists ifname among its devices ("dev": a string for one device, else an array). */
static bool flowtable_has_dev(yajl_val item, const char *ifname)
{
	yajl_val dev = obj_get(item, "dev");
	if (YAJL_IS_STRING(dev))
		return strcmp(str_of(dev), ifname) == 0;
	for (size_t i = 0; YAJL_IS_ARRAY(dev) && i < dev->u.array.len; i++)
		if (strcmp(str_of(dev->u.array.values[i]), ifname) == 0)
			return true;
	return false;
}

int lb_nft_flowtable_device_cmd(bool add, const char *ifname, char **ret, struct lb_error *err)
{
	/* ifname is lensboxd's own lbh<N>, never a name from outside */
	int n = add ? asprintf(ret,
			       "add flowtable inet lensbox " LB_NFT_FLOWTABLE
			       " { hook ingress priority filter; devices = { \"%s\" }; }\n",
			       ifname)
		    : asprintf(ret, "delete flowtable inet lensbox " LB_NFT_FLOWTABLE " { devices = { \"%s\" }; }\n",
			       ifname);
	if (n < 0)
		return lb_error_set(err, ENOMEM, "building the flowtable's device change");
	return 0;
}

bool lb_nft_flowtable_present(void)
{
	struct lb_error e;
	return run("list flowtable inet lensbox " LB_NFT_FLOWTABLE, false, NULL, &e) == 0;
}

struct removal {
	unsigned slot;
	char key[16];
	FILE *flush, *del, *sets;
};

static void collect_removal(const char *kind, const char *name, yajl_val item, void *data)
{
	struct removal *rm = data;
	unsigned s;
	if (strcmp(kind, "flowtable") == 0 && strcmp(name, LB_NFT_FLOWTABLE) == 0) {
		/* the kernel then drops the flows through this device; the veth is deleted after this transaction */
		char *cmd = NULL;
		struct lb_error e;
		if (flowtable_has_dev(item, rm->key) && lb_nft_flowtable_device_cmd(false, rm->key, &cmd, &e) == 0)
			fputs(cmd, rm->flush);
		free(cmd);
		return;
	}
	if (strcmp(kind, "map") == 0 && strncmp(name, "sandbox_", 8) == 0) {
		if (map_has_key(item, rm->key))
			fprintf(rm->flush, "delete element inet lensbox %s { \"%s\" }\n", name, rm->key);
		return;
	}
	if (!slot_of_name(name, &s) || s != rm->slot)
		return;
	if (strcmp(kind, "chain") == 0) {
		fprintf(rm->flush, "flush chain inet lensbox %s\n", name);
		fprintf(rm->del, "delete chain inet lensbox %s\n", name);
	} else if (strcmp(kind, "set") == 0 || strcmp(kind, "map") == 0) {
		fprintf(rm->sets, "delete %s inet lensbox %s\n", kind, name);
	} else if (strcmp(kind, "counter") == 0) {
		fprintf(rm->sets, "delete counter inet lensbox %s\n", name);
	}
}

int lb_nft_remove_slot(unsigned slot, struct lb_error *err)
{
	__attribute__((cleanup(yajl_freep))) yajl_val root = NULL;
	struct lb_error e2;
	int r = list_table(&root, &e2);
	if (r == -ENOENT)
		return 0; /* no table: nothing of this sandbox can exist */
	if (r < 0) {
		*err = e2;
		return r;
	}
	_cleanup_free_ char *a = NULL, *b = NULL, *c = NULL;
	size_t la = 0, lb = 0, lc = 0;
	struct removal rm = { .slot = slot };
	snprintf(rm.key, sizeof(rm.key), LB_NET_IFPREFIX "%u", slot);
	rm.flush = open_memstream(&a, &la);
	rm.del = open_memstream(&b, &lb);
	rm.sets = open_memstream(&c, &lc);
	if (!rm.flush || !rm.del || !rm.sets) {
		if (rm.flush)
			fclose(rm.flush);
		if (rm.del)
			fclose(rm.del);
		if (rm.sets)
			fclose(rm.sets);
		return lb_error_set(err, ENOMEM, "building the removal");
	}
	each_object(root, collect_removal, &rm);
	fclose(rm.flush);
	fclose(rm.del);
	fclose(rm.sets);
	if (la + lb + lc == 0)
		return 0;
	/* map elements and rules first (they reference the chains, sets and counter), then the objects */
	_cleanup_free_ char *all = NULL;
	if (asprintf(&all, "%s%s%s", a, b, c) < 0)
		return lb_error_set(err, ENOMEM, "building the removal");
	r = lb_nft_run(all, NULL, err);
	if (r < 0)
		return lb_error_wrap(err, "removing the rules of sandbox slot %u", slot);
	return 0;
}

struct presence {
	bool *present;
	size_t n;
};

static void collect_presence(const char *kind, const char *name, yajl_val item, void *data)
{
	struct presence *p = data;
	unsigned s;
	if (slot_of_name(name, &s) && s < p->n)
		p->present[s] = true;
	if (strcmp(kind, "flowtable") != 0 || strcmp(name, LB_NFT_FLOWTABLE) != 0)
		return;
	/* a veth left in the flowtable counts as something of its slot's to remove */
	yajl_val dev = obj_get(item, "dev");
	size_t n = YAJL_IS_ARRAY(dev) ? dev->u.array.len : YAJL_IS_STRING(dev) ? 1 : 0;
	size_t plen = strlen(LB_NET_IFPREFIX);
	for (size_t i = 0; i < n; i++) {
		const char *d = str_of(YAJL_IS_ARRAY(dev) ? dev->u.array.values[i] : dev);
		char *end;
		if (strncmp(d, LB_NET_IFPREFIX, plen) != 0 || d[plen] < '0' || d[plen] > '9')
			continue;
		unsigned long v = strtoul(d + plen, &end, 10);
		if (*end == '\0' && v < p->n)
			p->present[v] = true;
	}
}

/* The base chains' shape: how many chains and rules the table holds outside the sandboxes' own sb<N>_* chains. */
static void base_shape(yajl_val root, struct lb_nft_shape *shape)
{
	yajl_val arr = obj_get(root, "nftables");
	for (size_t i = 0; YAJL_IS_ARRAY(arr) && i < arr->u.array.len; i++) {
		yajl_val o = arr->u.array.values[i], item;
		unsigned s;
		if ((item = obj_get(o, "chain")) && !slot_of_name(str_of(obj_get(item, "name")), &s))
			shape->chains++;
		else if ((item = obj_get(o, "rule")) && !slot_of_name(str_of(obj_get(item, "chain")), &s))
			shape->rules++;
	}
}

int lb_nft_slots_present(bool *present, size_t n, struct lb_nft_shape *ret_shape, struct lb_error *err)
{
	__attribute__((cleanup(yajl_freep))) yajl_val root = NULL;
	struct lb_error e2;
	if (ret_shape)
		*ret_shape = (struct lb_nft_shape){ 0 };
	int r = list_table(&root, &e2);
	if (r == -ENOENT)
		return 0;
	if (r < 0) {
		*err = e2;
		return r;
	}
	struct presence p = { present, n };
	each_object(root, collect_presence, &p);
	if (ret_shape)
		base_shape(root, ret_shape);
	return 0;
}

int lb_nft_counter_packets(unsigned slot, uint64_t *ret, struct lb_error *err)
{
	/* read straight from the kernel (nftlink.c): libnftables would fetch the whole table's cache for it */
	char name[32];
	snprintf(name, sizeof(name), "sb%u_blocked", slot);
	return lb_nftlink_counter(name, false, ret, err);
}

int lb_nft_foreign_drop(const char *hook_name, bool *ret, char *desc, size_t size)
{
	char *out = NULL;
	struct lb_error e;
	int r = run("list chains", true, &out, &e);
	if (r < 0)
		return r;
	char ebuf[128];
	__attribute__((cleanup(yajl_freep))) yajl_val root = yajl_tree_parse(out, ebuf, sizeof(ebuf));
	free(out);
	yajl_val arr = obj_get(root, "nftables");
	*ret = false;
	if (size)
		desc[0] = '\0';
	for (size_t i = 0; YAJL_IS_ARRAY(arr) && i < arr->u.array.len; i++) {
		yajl_val c = obj_get(arr->u.array.values[i], "chain");
		yajl_val hook = obj_get(c, "hook"), policy = obj_get(c, "policy"), table = obj_get(c, "table");
		yajl_val family = obj_get(c, "family"), name = obj_get(c, "name");
		if (!YAJL_IS_STRING(hook) || !YAJL_IS_STRING(policy) || !YAJL_IS_STRING(table) ||
		    !YAJL_IS_STRING(family) || !YAJL_IS_STRING(name))
			continue;
		if (strcmp(str_of(hook), hook_name) != 0 || strcmp(str_of(policy), "drop") != 0)
			continue;
		if (strcmp(str_of(table), "lensbox") == 0 && strcmp(str_of(family), "inet") == 0)
			continue;
		*ret = true;
		snprintf(desc, size, "%s %s %s (policy drop)", str_of(family), str_of(table), str_of(name));
		break;
	}
	return 0;
}

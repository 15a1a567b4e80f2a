/*
 * net.c — the network context: loading the policy, giving sandboxes their slot, veth and rules, taking them away.
 *
 * Runs in lensboxd (root, any thread) in the host's network namespace. A slot N is a /30 of the pool:
 *
 *   pool base + 4N + 0   network        + 1   gateway (host side, lbh<N>, the resolver)
 *                  + 2   the sandbox (eth0 inside)   + 3   broadcast
 *
 * Order of attach: slot taken (under the lock) -> veth created into the sandbox's netns -> host side addressed ->
 * sandbox side addressed and routed -> the tier's rules (and, for `web` with offload on, the veth's place in the
 * flowtable) loaded in one nft transaction. Until the last step the base chains drop everything from lbh<N> (no map
 * element), so a half-built sandbox reaches nothing. Any failure undoes the earlier steps. Detach runs the other way:
 * rules and flowtable device first, then the veth.
 * Offload (policy/network/offload.nft) is optional: lb_net_init() tries it once after the base table and the
 * uplinks are in place; a kernel without flowtables refuses that transaction as a whole and lensbox goes on without
 * it, saying why in lb_net_health().
 * Invariants: a slot is used iff its sandbox has (or is getting) a veth; names and tiers are validated before use.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "lb/name.h"
#include "lb/cleanup.h"
#include "lb/fileio.h"
#include "lb/nftpolicy.h"

extern char **environ;

#define MAX_SLOTS 16384

static void fill_warm(struct lb_net *ctx, unsigned max_new);
static void forget_warm(struct lb_net *ctx);

static int read_policy_file(const char *dir, const char *name, char **ret, struct lb_error *err)
{
	_cleanup_free_ char *path = NULL;
	if (asprintf(&path, "%s/network/%s", dir, name) < 0)
		return lb_error_set(err, ENOMEM, "building a path");
	size_t len;
	int r = lb_read_file_at(AT_FDCWD, path, 1 << 20, ret, &len);
	if (r < 0)
		return lb_error_set(err, r, "reading %s", path);
	return 0;
}

static int parse_upstream(const char *s, struct sockaddr_in *ret)
{
	char host[64];
	unsigned long port = 53;
	const char *colon = strchr(s, ':');
	size_t n = colon ? (size_t)(colon - s) : strlen(s);
	if (n == 0 || n >= sizeof(host))
		return -EINVAL;
	memcpy(host, s, n);
	host[n] = '\0';
	if (colon) {
		char *end;
		port = strtoul(colon + 1, &end, 10);
		if (*end || port == 0 || port > 65535)
			return -EINVAL;
	}
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	if (inet_pton(AF_INET, host, &a.sin_addr) != 1)
		return -EINVAL;
	*ret = a;
	return 0;
}

static int resolv_conf_upstream(struct sockaddr_in *ret)
{
	_cleanup_free_ char *text = NULL;
	size_t len;
	if (lb_read_file_at(AT_FDCWD, "/etc/resolv.conf", 1 << 16, &text, &len) < 0)
		return -ENOENT;
	for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
		char addr[64];
		if (sscanf(line, " nameserver %63s", addr) == 1 && parse_upstream(addr, ret) == 0)
			return 0;
	}
	return -ENOENT;
}

static void ip_str(uint32_t host_order, char buf[16])
{
	uint32_t be = htonl(host_order);
	inet_ntop(AF_INET, &be, buf, 16);
}

/* Remembers the base chains' shape as just loaded, for verify to compare with (best effort: a failed listing leaves
 * the shape unknown, and verify then reloads once). */
static void record_base_shape(struct lb_net *ctx)
{
	_cleanup_free_ bool *present = calloc(ctx->n_slots ? ctx->n_slots : 1, sizeof(bool));
	struct lb_error e2;
	if (!present || lb_nft_slots_present(present, ctx->n_slots, &ctx->base_shape, &e2) < 0)
		ctx->base_shape = (struct lb_nft_shape){ 0 };
}

/* The values lensboxd fills the templates with (nftpolicy.c knows which word is which). */
static void ctx_vars(const struct lb_net *ctx, struct lb_nft_vars *v)
{
	char base[16];
	*v = (struct lb_nft_vars){ .pool_base = ctx->pool_base,
				   .resolver_port = ctx->resolver_port,
				   .relay_port = ctx->relay_port,
				   .services_uid = (uint32_t)ctx->services_uid,
				   .upstream_port = ntohs(ctx->upstream.sin_port) };
	ip_str(ctx->pool_base, base);
	snprintf(v->pool, sizeof(v->pool), "%s/%u", base, ctx->pool_prefix);
	memcpy(v->pool6_base, ctx->pool6_base, 16);
	char base6[INET6_ADDRSTRLEN];
	inet_ntop(AF_INET6, ctx->pool6_base, base6, sizeof(base6));
	snprintf(v->pool6, sizeof(v->pool6), "%s/%u", base6, ctx->pool6_prefix);
	inet_ntop(AF_INET, &ctx->upstream.sin_addr, v->upstream, sizeof(v->upstream));
}

static int load_base(struct lb_net *ctx, struct lb_error *err)
{
	_cleanup_free_ char *tmpl = NULL, *text = NULL, *all = NULL, *denied = NULL;
	int r = read_policy_file(ctx->policy_dir, "base.nft", &tmpl, err);
	if (r < 0)
		return r;
	struct lb_nft_vars vars;
	ctx_vars(ctx, &vars);
	r = lb_nft_render(LB_NFT_BASE, tmpl, &vars, &text, err);
	if (r < 0)
		return r;
	/* The services' egress, when they run as their own uid: in the same transaction, so the table is never
	 * loaded without it. */
	_cleanup_free_ char *services = NULL;
	if (ctx->services_template) {
		r = lb_nft_render(LB_NFT_SERVICES, ctx->services_template, &vars, &services, err);
		if (r < 0)
			return r;
	}
	/* the denied sets' elements, from denied.list */
	r = lb_nft_render_denied(&ctx->denied, &denied, err);
	if (r < 0)
		return r;
	/* Replace any earlier table in the same transaction: "add" makes sure "delete" has something to delete. */
	if (asprintf(&all, "add table inet lensbox\ndelete table inet lensbox\n%s\n%s\n%s", text,
		     services ? services : "", denied) < 0)
		return lb_error_set(err, ENOMEM, "building the base ruleset");
	r = lb_nft_run(all, NULL, err);
	if (r < 0)
		return lb_error_wrap(err, "loading network/base.nft");
	return 0;
}

/* Adds the flowtable of offload.nft over the uplinks, when configured and the kernel has flowtables; records the
 * outcome in ctx->offload / offload_why. Never fails: without the flowtable every packet takes the ordinary path. */
static void load_offload(struct lb_net *ctx)
{
	char why[sizeof(ctx->offload_why)] = "";
	bool on = false;
	_cleanup_free_ char *devs = NULL, *text = NULL;
	size_t dlen = 0;
	struct lb_error err = { 0 };
	if (!ctx->offload_template) {
		snprintf(why, sizeof(why), "turned off in the configuration (no_flow_offload)");
		goto done;
	}
	struct lb_uplink up[LB_NET_MAX_UPLINKS];
	pthread_mutex_lock(&ctx->lock);
	size_t n = ctx->n_uplinks;
	memcpy(up, ctx->uplink, sizeof(up));
	pthread_mutex_unlock(&ctx->lock);
	if (n == 0) {
		snprintf(why, sizeof(why), "no uplink: the host has no default route");
		goto done;
	}
	/* "\"up0\", \"eth1\"": names of the host's own interfaces, from rtnetlink */
	FILE *f = open_memstream(&devs, &dlen);
	if (!f) {
		snprintf(why, sizeof(why), "out of memory");
		goto done;
	}
	for (size_t i = 0; i < n; i++)
		fprintf(f, "%s\"%s\"", i ? ", " : "", up[i].name);
	fclose(f);
	struct lb_nft_vars vars;
	ctx_vars(ctx, &vars);
	vars.uplinks = devs;
	if (lb_nft_render(LB_NFT_OFFLOAD, ctx->offload_template, &vars, &text, &err) < 0 ||
	    lb_nft_run(text, NULL, &err) < 0) {
		/* the usual reason: a kernel built without CONFIG_NF_FLOW_TABLE ("No such file or directory") */
		snprintf(why, sizeof(why), "the kernel refused the flowtable (nf_flow_table): %.100s", err.msg);
		goto done;
	}
	on = true;
done:
	pthread_mutex_lock(&ctx->lock);
	ctx->offload = on;
	snprintf(ctx->offload_why, sizeof(ctx->offload_why), "%s", why);
	pthread_mutex_unlock(&ctx->lock);
}

static void mark_existing(unsigned slot, const char *alias, void *data)
{
	struct lb_net *ctx = data;
	if (slot >= ctx->n_slots)
		return;
	ctx->slots[slot].used = true;
	const char *name = strncmp(alias, "lensbox:", 8) == 0 ? alias + 8 : "";
	snprintf(ctx->slots[slot].name, sizeof(ctx->slots[slot].name), "%s", name);
	ctx->slots[slot].tier = LB_TIER_OFF; /* unknown until re-attached; services refuse it meanwhile */
}

int lb_net_follow_uplinks(struct lb_net *ctx, unsigned *ret_added, struct lb_error *err)
{
	if (ret_added)
		*ret_added = 0;
	struct lb_uplink now[LB_NET_MAX_UPLINKS];
	size_t n = 0;
	bool route6 = false;
	int r = lb_veth_default_route_devices(now, LB_NET_MAX_UPLINKS, &n, &route6, err);
	if (r < 0)
		return lb_error_wrap(err, "finding the uplinks");
	atomic_store(&ctx->route6, route6);
	for (size_t i = 0; i < n; i++) {
		/* Known by name and ifindex: configured before. A name at a new ifindex is a new device (a VPN or PPP
		 * link that came back): the kernel gave it the default forwarding and dropped the old one's hook. */
		pthread_mutex_lock(&ctx->lock);
		size_t k = 0;
		while (k < ctx->n_uplinks && strcmp(ctx->uplink[k].name, now[i].name) != 0)
			k++;
		bool known = k < ctx->n_uplinks && ctx->uplink[k].ifindex == now[i].ifindex;
		bool offload = ctx->offload;
		pthread_mutex_unlock(&ctx->lock);
		if (known)
			continue;
		if (k == LB_NET_MAX_UPLINKS)
			return lb_error_setx(err, ENOSPC, "more than %d uplinks", LB_NET_MAX_UPLINKS);
		r = lb_veth_enable_forwarding(now[i].name, ctx->ipv6_per_interface, err);
		if (r < 0)
			return lb_error_wrap(err, "enabling forwarding on the uplink %s", now[i].name);
		pthread_mutex_lock(&ctx->lock);
		ctx->uplink[k] = now[i];
		if (k == ctx->n_uplinks)
			ctx->n_uplinks++;
		pthread_mutex_unlock(&ctx->lock);
		if (ret_added)
			(*ret_added)++;
		if (!offload)
			continue; /* at init, before the flowtable: load_offload() takes ctx->uplinks */
		/* Only speed depends on the flowtable: a refusal is reported, the uplink stays configured. */
		_cleanup_free_ char *cmd = NULL;
		r = lb_nft_flowtable_device_cmd(true, now[i].name, &cmd, err);
		if (r == 0)
			r = lb_nft_run(cmd, NULL, err);
		if (r < 0)
			return lb_error_wrap(err, "adding the uplink %s to the flowtable", now[i].name);
	}
	return 0;
}

/* Whether sandboxes get IPv6 (ctx->ipv6: the pool is on and the kernel has IPv6; else ctx->ipv6_why) and whether
 * web's can be forwarded (ctx->ipv6_forwarding; a packages sandbox's traffic ends at the host's relay, so it needs
 * none). Linux >= 6.17 forwards IPv6 for the interfaces lensbox names (force_forwarding on the sandboxes' veths and
 * the uplinks). Older kernels forward it only with net.ipv6.conf.all.forwarding on, a host-wide switch lensbox never
 * turns: it also makes every interface with accept_ra=1 ignore router advertisements. */
static void ipv6_decide(struct lb_net *ctx, bool on)
{
	_cleanup_free_ char *all = NULL;
	size_t len = 0;
	ctx->ipv6 = ctx->ipv6_forwarding = ctx->ipv6_per_interface = false;
	if (!on) {
		snprintf(ctx->ipv6_why, sizeof(ctx->ipv6_why), "turned off (network_pool6 = off)");
		return;
	}
	if (access("/proc/sys/net/ipv6", F_OK) != 0) {
		snprintf(ctx->ipv6_why, sizeof(ctx->ipv6_why), "this kernel has no IPv6");
		return;
	}
	ctx->ipv6 = true;
	if (access("/proc/sys/net/ipv6/conf/all/force_forwarding", F_OK) == 0) {
		ctx->ipv6_forwarding = ctx->ipv6_per_interface = true;
	} else if (lb_read_file_at(AT_FDCWD, "/proc/sys/net/ipv6/conf/all/forwarding", 16, &all, &len) == 0 &&
		   all[0] == '1') {
		ctx->ipv6_forwarding = true;
	} else {
		snprintf(ctx->ipv6_why, sizeof(ctx->ipv6_why),
			 "web: this kernel (before 6.17) forwards IPv6 only with net.ipv6.conf.all.forwarding = 1, "
			 "which is off; set accept_ra = 2 on an uplink that takes router advertisements, then turn it "
			 "on (packages sandboxes have IPv6 all the same)");
	}
}

/* The two pools of cfg into ctx (bases, prefixes, the number of slots) and whether web sandboxes get IPv6. */
static int take_pools(struct lb_net *ctx, const struct lb_net_config *cfg, struct lb_cidr *pool, struct lb_cidr *pool6,
		      struct lb_error *err)
{
	const char *pool_s = cfg->pool ? cfg->pool : LB_NET_DEFAULT_POOL;
	if (lb_cidr_parse(pool_s, pool) < 0 || pool->family != AF_INET || pool->prefix < 8 || pool->prefix > 28)
		return lb_error_setx(err, EINVAL, "network pool %s: expected an IPv4 range with prefix 8..28", pool_s);
	uint32_t base_be;
	memcpy(&base_be, pool->addr, 4);
	ctx->pool_base = ntohl(base_be);
	ctx->pool_prefix = pool->prefix;
	ctx->n_slots = (size_t)1 << (32 - pool->prefix - 2);
	if (ctx->n_slots > MAX_SLOTS)
		ctx->n_slots = MAX_SLOTS;
	bool ipv6_on;
	if (lb_net_pool6_parse(cfg->pool6, pool6, &ipv6_on) < 0)
		return lb_error_setx(err, EINVAL, "network pool6 %s: expected an IPv6 range with prefix 8..96, or off",
				     cfg->pool6);
	memcpy(ctx->pool6_base, pool6->addr, 16);
	ctx->pool6_prefix = pool6->prefix;
	ipv6_decide(ctx, ipv6_on);
	return 0;
}

/* The ports, time-outs and bounds of cfg into ctx, defaults filled in and ranges checked. */
static int take_limits(struct lb_net *ctx, const struct lb_net_config *cfg, struct lb_error *err)
{
	ctx->resolver_port = cfg->resolver_port ? cfg->resolver_port : LB_NET_DEFAULT_RESOLVER_PORT;
	ctx->relay_port = cfg->relay_port ? cfg->relay_port : LB_NET_DEFAULT_RELAY_PORT;
	ctx->timeout_ms = cfg->connect_timeout_ms ? cfg->connect_timeout_ms : 3000;
	ctx->dns_per_sandbox = cfg->dns_per_sandbox ? cfg->dns_per_sandbox : LB_NET_DEFAULT_DNS_PER_SANDBOX;
	ctx->relay_per_sandbox = cfg->relay_per_sandbox ? cfg->relay_per_sandbox : LB_NET_DEFAULT_RELAY_PER_SANDBOX;
	if (ctx->dns_per_sandbox > LB_NET_DNS_INFLIGHT_MAX || ctx->relay_per_sandbox > LB_NET_RELAY_CONNS_MAX) {
		return lb_error_setx(err, EINVAL, "dns_per_sandbox %u, relay_per_sandbox %u: expected 1..%u and 1..%u",
				     ctx->dns_per_sandbox, ctx->relay_per_sandbox, LB_NET_DNS_INFLIGHT_MAX,
				     LB_NET_RELAY_CONNS_MAX);
	}
	ctx->warm_slots = cfg->warm_slots;
	if (ctx->warm_slots > LB_NET_MAX_WARM_SLOTS || 2 * (size_t)ctx->warm_slots > ctx->n_slots / 2) {
		return lb_error_setx(err, EINVAL,
				     "warm_slots %u: expected 0..%d, and at most a quarter of the pool per tier",
				     ctx->warm_slots, LB_NET_MAX_WARM_SLOTS);
	}
	ctx->veth_gso_max = cfg->veth_gso_max ? cfg->veth_gso_max : LB_NET_DEFAULT_VETH_GSO_MAX;
	if (ctx->veth_gso_max < 65536 || ctx->veth_gso_max > LB_NET_MAX_VETH_GSO_MAX) {
		return lb_error_setx(err, EINVAL, "veth_gso_max %u: expected 65536..%u", ctx->veth_gso_max,
				     LB_NET_MAX_VETH_GSO_MAX);
	}
	return 0;
}

int lb_net_init(const struct lb_net_config *cfg, struct lb_net **ret, struct lb_error *err)
{
	struct lb_net *ctx = calloc(1, sizeof(*ctx));
	if (!ctx)
		return lb_error_set(err, ENOMEM, "allocating the network context");
	pthread_mutex_init(&ctx->lock, NULL);
	ctx->services_pidfd = -1;
	/* The host's sysctl directories of links, kept: each attach writes a few files below them. Read-only
	 * directory descriptors, close-on-exec; writing below them still takes root in the host's namespace. */
	ctx->conf4_fd = lb_veth_open_conf(AF_INET);
	ctx->conf6_fd = lb_veth_open_conf(AF_INET6);
	int r;
	_cleanup_free_ char *denied = NULL, *names = NULL;
	ctx->policy_dir = strdup(cfg->policy_dir);
	if (!ctx->policy_dir) {
		r = lb_error_set(err, ENOMEM, "copying the policy path");
		goto fail;
	}

	struct lb_cidr pool, pool6;
	r = take_pools(ctx, cfg, &pool, &pool6, err);
	if (r < 0)
		goto fail;
	ctx->slots = calloc(ctx->n_slots, sizeof(*ctx->slots));
	ctx->dns_cache = lb_dns_cache_new();
	if (!ctx->slots || !ctx->dns_cache) {
		r = lb_error_set(err, ENOMEM, "allocating slots");
		goto fail;
	}
	/* MAP_SHARED so an isolated services process sees tiers and the parent sees its refusal counts */
	void *shared =
	    mmap(NULL, ctx->n_slots * sizeof(*ctx->shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (shared == MAP_FAILED) {
		r = lb_error_set(err, errno, "mapping the shared slot table");
		goto fail;
	}
	ctx->shared = shared;
	r = take_limits(ctx, cfg, err);
	if (r < 0)
		goto fail;
	if (cfg->dns_upstream) {
		if (parse_upstream(cfg->dns_upstream, &ctx->upstream) < 0) {
			r = lb_error_setx(err, EINVAL, "DNS upstream %s: expected IPv4[:port]", cfg->dns_upstream);
			goto fail;
		}
	} else if (resolv_conf_upstream(&ctx->upstream) < 0) {
		r = lb_error_setx(err, ENOENT, "no IPv4 nameserver in /etc/resolv.conf and no DNS upstream configured");
		goto fail;
	}

	r = read_policy_file(cfg->policy_dir, "denied.list", &denied, err);
	if (r < 0)
		goto fail;
	r = lb_cidr_list_parse(denied, &ctx->denied, err);
	if (r < 0) {
		lb_error_wrap(err, "network/denied.list");
		goto fail;
	}
	r = lb_cidr_list_add(&ctx->denied, &pool); /* other sandboxes' subnets */
	if (r == 0)
		r = lb_cidr_list_add(&ctx->denied, &pool6);
	if (r < 0) {
		lb_error_set(err, r, "adding the pool to the denied ranges");
		goto fail;
	}
	r = read_policy_file(cfg->policy_dir, "packages.list", &names, err);
	if (r < 0)
		goto fail;
	r = lb_name_list_parse(names, &ctx->packages, err);
	if (r < 0) {
		lb_error_wrap(err, "network/packages.list");
		goto fail;
	}
	for (const char *const *p = cfg->extra_package_names; p && *p; p++) {
		r = lb_name_list_add(&ctx->packages, *p);
		if (r < 0) {
			lb_error_set(err, r, "extra package host %.64s", *p);
			goto fail;
		}
	}
	/* npm missing or printing nothing usable is fine: the admin then lists the host (docs/network.md) */
	if (!cfg->skip_npm_lookup && lb_net_npm_registry_host(ctx->npm_registry, sizeof(ctx->npm_registry)) == 0 &&
	    lb_name_list_add(&ctx->packages, ctx->npm_registry) < 0)
		ctx->npm_registry[0] = '\0';
	r = read_policy_file(cfg->policy_dir, "web.nft", &ctx->web_template, err);
	if (r < 0)
		goto fail;
	r = read_policy_file(cfg->policy_dir, "packages.nft", &ctx->packages_template, err);
	if (r < 0)
		goto fail;
	if (!cfg->no_flow_offload) {
		r = read_policy_file(cfg->policy_dir, "offload.nft", &ctx->offload_template, err);
		if (r < 0)
			goto fail;
	}

	if (cfg->services_uid) {
		ctx->services_uid = cfg->services_uid;
		r = read_policy_file(cfg->policy_dir, "services.nft", &ctx->services_template, err);
		if (r < 0)
			goto fail;
	}
	r = load_base(ctx, err);
	if (r < 0)
		goto fail;
	r = lb_net_follow_uplinks(ctx, NULL, err); /* before the flowtable exists: its first devices are these */
	if (r < 0)
		goto fail;
	load_offload(ctx);
	record_base_shape(ctx);
	r = lb_veth_list(mark_existing, ctx, err);
	if (r < 0)
		goto fail;
	fill_warm(ctx, UINT_MAX);
	if (cfg->services_uid) {
		r = lb_services_spawn_isolated(ctx, cfg->services_uid, cfg->services_uid, err);
		if (r < 0)
			goto fail;
	} else {
		r = lb_resolver_start(ctx, lb_service_bind(SOCK_DGRAM, ctx->resolver_port, err), err);
		if (r < 0)
			goto fail;
		r = lb_relay_start(ctx, lb_service_bind(SOCK_STREAM, ctx->relay_port, err), err);
		if (r < 0)
			goto fail;
	}
	*ret = ctx;
	return 0;
fail:
	lb_net_free(ctx);
	return r;
}

void lb_net_free(struct lb_net *ctx)
{
	if (!ctx)
		return;
	lb_services_kill(ctx); /* the isolated process, if any: its connections close with it */
	lb_service_halt(ctx->resolver);
	lb_service_halt(ctx->relay);
	/* Detached per-request threads hold ctx and the resolver's socket: wake the relayed connections, then wait for
	 * all of them. Each is bounded (hello 5 s, upstream connect and DNS by timeout_ms, splices end at the
	 * shutdown), so this ends. Only then are the sockets closed, so no answer goes to a reused descriptor. */
	lb_relay_shutdown_all(ctx);
	while (atomic_load(&ctx->relay_conns) || atomic_load(&ctx->dns_inflight)) {
		struct timespec ts = { 0, 10L * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
	lb_service_free(ctx->resolver);
	lb_service_free(ctx->relay);
	lb_cidr_list_free(&ctx->denied);
	lb_name_list_free(&ctx->packages);
	free(ctx->web_template);
	free(ctx->packages_template);
	free(ctx->offload_template);
	free(ctx->services_template);
	free(ctx->slots);
	lb_dns_cache_free(ctx->dns_cache);
	if (ctx->shared)
		munmap(ctx->shared, ctx->n_slots * sizeof(*ctx->shared));
	free(ctx->policy_dir);
	if (ctx->conf4_fd >= 0)
		close(ctx->conf4_fd);
	if (ctx->conf6_fd >= 0)
		close(ctx->conf6_fd);
	pthread_mutex_destroy(&ctx->lock);
	free(ctx);
}

static void slot_ifname(unsigned slot, char buf[16])
{
	snprintf(buf, 16, LB_NET_IFPREFIX "%u", slot);
}

static bool is_warm_locked(const struct lb_net *ctx, unsigned slot)
{
	for (size_t t = 0; t < LB_TIER_COUNT; t++)
		for (unsigned k = 0; k < ctx->n_warm[t]; k++)
			if (ctx->warm[t][k] == slot)
				return true;
	return false;
}

/* Takes the last warm slot of tier t off its list. */
static bool warm_take_locked(struct lb_net *ctx, enum lb_tier t, unsigned *ret)
{
	if (ctx->n_warm[t] == 0)
		return false;
	*ret = ctx->warm[t][--ctx->n_warm[t]];
	return true;
}

static int slot_elements(struct lb_net *ctx, unsigned slot, enum lb_tier t, struct lb_nft_element *els, size_t *n,
			 struct lb_error *err);
static int disconnect_to_warm(struct lb_net *ctx, unsigned slot, enum lb_tier t, bool flowdev, struct lb_error *err);

/* Removes everything of slot (rules, then veth) and frees it; or, with keep_warm when its tier has fewer warm slots
 * than configured, removes its map elements and veth and keeps its objects loaded for the next sandbox of the tier.
 * Errors other than "absent" are reported. */
static int teardown_slot(struct lb_net *ctx, unsigned slot, bool keep_warm, struct lb_error *err)
{
	atomic_store(&ctx->shared[slot].tier, LB_TIER_OFF); /* the services refuse it from now on */
	atomic_store(&ctx->shared[slot].ipv6, false);
	pthread_mutex_lock(&ctx->lock);
	enum lb_tier t = ctx->slots[slot].tier;
	bool flowdev = ctx->slots[slot].flowdev;
	bool to_warm = keep_warm && t != LB_TIER_OFF && ctx->n_warm[t] < ctx->warm_slots;
	pthread_mutex_unlock(&ctx->lock);
	struct lb_error werr;
	if (to_warm && disconnect_to_warm(ctx, slot, t, flowdev, &werr) == 0)
		return 0;
	/* not kept (or disconnecting failed half-way): everything of the slot goes, as without warm slots */
	int r = lb_nft_remove_slot(slot, err);
	if (r < 0)
		return r;
	char ifname[16];
	slot_ifname(slot, ifname);
	struct lb_error e2;
	r = lb_veth_delete(ifname, &e2);
	if (r < 0 && r != -ENODEV) {
		*err = e2;
		return r;
	}
	pthread_mutex_lock(&ctx->lock);
	memset(&ctx->slots[slot], 0, sizeof(ctx->slots[slot]));
	pthread_mutex_unlock(&ctx->lock);
	return 0;
}

static int find_slot_locked(struct lb_net *ctx, const char *name)
{
	for (size_t i = 0; i < ctx->n_slots; i++)
		if (ctx->slots[i].used && strcmp(ctx->slots[i].name, name) == 0)
			return (int)i;
	return -ENOENT;
}

/* The tier's rules for slot, rendered (its objects, then the `add element` lines that connect it). */
static int render_slot(struct lb_net *ctx, unsigned slot, enum lb_tier t, char **ret, struct lb_error *err)
{
	struct lb_nft_vars vars;
	ctx_vars(ctx, &vars);
	vars.slot = slot;
	return lb_nft_render(t == LB_TIER_WEB ? LB_NFT_WEB : LB_NFT_PACKAGES,
			     t == LB_TIER_WEB ? ctx->web_template : ctx->packages_template, &vars, ret, err);
}

/* Loads the tier's rules for slot in one nft transaction, with slot's veth in the flowtable when with_device (web,
 * offload on: the veth must exist by then). */
static int load_slot_rules(struct lb_net *ctx, unsigned slot, enum lb_tier t, bool with_device, struct lb_error *err)
{
	const char *tier = lb_tier_name(t);
	char ifname[16];
	slot_ifname(slot, ifname);
	_cleanup_free_ char *rules = NULL, *device = NULL, *all = NULL;
	int r = render_slot(ctx, slot, t, &rules, err);
	if (r < 0)
		return r;
	/* A web sandbox's veth joins the flowtable in the same transaction as its rules (offload.nft says why only
	 * connections its rules accepted can take it). */
	if (with_device) {
		r = lb_nft_flowtable_device_cmd(true, ifname, &device, err);
		if (r < 0)
			return r;
		if (asprintf(&all, "%s\n%s", rules, device) < 0)
			return lb_error_set(err, ENOMEM, "building the rules of slot %u", slot);
	}
	r = lb_nft_run(all ? all : rules, NULL, err);
	if (r < 0 && all) {
		/* The flowtable would not take this veth (it is only ever a speed-up): the sandbox gets its rules
		 * alone and every one of its packets takes the forward chain. */
		r = lb_nft_run(rules, NULL, err);
	}
	if (r < 0)
		return lb_error_wrap(err, "loading network/%s.nft", tier);
	return 0;
}

/* slot's rules rendered and split (nftpolicy.c): *ret_rules cut after its objects (may be NULL), its `add element`
 * lines parsed into els (may be NULL). */
static int slot_parts(struct lb_net *ctx, unsigned slot, enum lb_tier t, char **ret_rules, struct lb_nft_element *els,
		      size_t *n, struct lb_error *err)
{
	_cleanup_free_ char *rules = NULL;
	size_t head = 0;
	int r = render_slot(ctx, slot, t, &rules, err);
	if (r < 0)
		return r;
	if (lb_nft_split_elements(rules, els, n, &head) < 0)
		return lb_error_setx(err, EINVAL,
				     "network/%s.nft: expected the table block, then only lines `add element inet "
				     "lensbox MAP { \"KEY\" : jump CHAIN }`",
				     lb_tier_name(t));
	rules[head] = '\0';
	if (ret_rules)
		*ret_rules = TAKE_PTR(rules);
	return 0;
}

static int slot_elements(struct lb_net *ctx, unsigned slot, enum lb_tier t, struct lb_nft_element *els, size_t *n,
			 struct lb_error *err)
{
	return slot_parts(ctx, slot, t, NULL, els, n, err);
}

/* Loads slot's objects for tier t without its map elements: nothing reaches them until a sandbox is connected. */
static int warm_up(struct lb_net *ctx, unsigned slot, enum lb_tier t, struct lb_error *err)
{
	_cleanup_free_ char *rules = NULL;
	int r = slot_parts(ctx, slot, t, &rules, NULL, NULL, err);
	if (r < 0)
		return r;
	r = lb_nft_run(rules, NULL, err);
	if (r < 0)
		return lb_error_wrap(err, "loading network/%s.nft for a warm slot", lb_tier_name(t));
	return 0;
}

/* Prepares warm slots, up to ctx->warm_slots per tier and at most max_new of them now (each is one libnftables
 * transaction, about a millisecond). Taken from the top of the pool, where attaches of cold slots (from the bottom)
 * reach last. Best effort: a slot that fails is removed again, and an attach without a warm slot loads everything
 * as it would without them. */
static void fill_warm(struct lb_net *ctx, unsigned max_new)
{
	static const enum lb_tier tiers[] = { LB_TIER_WEB, LB_TIER_PACKAGES };
	unsigned made = 0;
	for (size_t k = 0; k < LB_ARRAY_SIZE(tiers); k++) {
		while (made < max_new) {
			long slot = -1;
			pthread_mutex_lock(&ctx->lock);
			if (ctx->n_warm[tiers[k]] < ctx->warm_slots)
				for (size_t i = ctx->n_slots; i-- > 0;)
					if (!ctx->slots[i].used && !is_warm_locked(ctx, (unsigned)i)) {
						slot = (long)i;
						break;
					}
			if (slot >= 0)
				ctx->slots[slot].used = true; /* reserved while its objects load */
			pthread_mutex_unlock(&ctx->lock);
			if (slot < 0)
				break;
			struct lb_error e;
			int r = warm_up(ctx, (unsigned)slot, tiers[k], &e);
			if (r < 0)
				(void)lb_nft_remove_slot((unsigned)slot, &e);
			pthread_mutex_lock(&ctx->lock);
			ctx->slots[slot] = (struct lb_slot){ 0 };
			if (r == 0)
				ctx->warm[tiers[k]][ctx->n_warm[tiers[k]]++] = (unsigned)slot;
			pthread_mutex_unlock(&ctx->lock);
			if (r < 0)
				return;
			made++;
		}
	}
}

/* Connects a warm slot's objects to its new sandbox: its veth in the flowtable when with_device, then its four map
 * elements in one transaction. Its refusal counter is zero: new, or zeroed when the last sandbox left. */
static int connect_warm(struct lb_net *ctx, unsigned slot, enum lb_tier t, bool with_device, struct lb_error *err)
{
	struct lb_nft_element els[LB_NFT_MAX_ELEMENTS];
	size_t n = 0;
	int r = slot_elements(ctx, slot, t, els, &n, err);
	if (r < 0)
		return r;
	char ifname[16];
	if (with_device) {
		_cleanup_free_ char *cmd = NULL;
		slot_ifname(slot, ifname);
		r = lb_nft_flowtable_device_cmd(true, ifname, &cmd, err);
		if (r == 0)
			r = lb_nft_run(cmd, NULL, err);
	}
	if (r == 0)
		r = lb_nftlink_elements(true, els, n, err);
	return r;
}

/* The other way: map elements first (nothing of the sandbox's reaches the chains from then on), its refusal counter
 * zeroed (the next sandbox's count starts there), the flowtable device, then the veth; the objects stay, the slot
 * becomes warm for tier t. */
static int disconnect_to_warm(struct lb_net *ctx, unsigned slot, enum lb_tier t, bool flowdev, struct lb_error *err)
{
	struct lb_nft_element els[LB_NFT_MAX_ELEMENTS];
	size_t n = 0;
	char ifname[16];
	slot_ifname(slot, ifname);
	int r = slot_elements(ctx, slot, t, els, &n, err);
	if (r == 0)
		r = lb_nftlink_elements(false, els, n, err);
	char counter[32];
	snprintf(counter, sizeof(counter), "sb%u_blocked", slot);
	uint64_t last;
	if (r == 0)
		r = lb_nftlink_counter(counter, true, &last, err);
	if (r == 0 && flowdev) {
		_cleanup_free_ char *cmd = NULL;
		r = lb_nft_flowtable_device_cmd(false, ifname, &cmd, err);
		if (r == 0)
			r = lb_nft_run(cmd, NULL, err);
	}
	if (r == 0) {
		r = lb_veth_delete(ifname, err);
		if (r == -ENODEV)
			r = 0;
	}
	if (r < 0)
		return r;
	pthread_mutex_lock(&ctx->lock);
	bool room = ctx->n_warm[t] < ctx->warm_slots;
	if (room) {
		ctx->slots[slot] = (struct lb_slot){ 0 };
		ctx->warm[t][ctx->n_warm[t]++] = slot;
	}
	pthread_mutex_unlock(&ctx->lock);
	/* another detach filled the list meanwhile: the caller removes the objects as for a cold slot */
	return room ? 0 : lb_error_setx(err, ENOSPC, "no room for another warm slot");
}

int lb_net_attach(struct lb_net *ctx, const char *name, int netns_fd, enum lb_tier t, struct lb_net_info *ret_info,
		  struct lb_error *err)
{
	if (!lb_sandbox_name_valid(name))
		return lb_error_setx(err, EINVAL, "sandbox name %.64s is not valid", name);
	if (!lb_tier_name(t))
		return lb_error_setx(err, EINVAL, "unknown network tier %d (off, packages, web)", (int)t);

	/* an earlier attachment of this name goes first */
	int r = lb_net_detach(ctx, name, err);
	if (r < 0 && r != -ENOENT)
		return lb_error_wrap(err, "removing the earlier network of %s", name);

	if (t == LB_TIER_OFF) {
		r = lb_veth_setup_sandbox(netns_fd, NULL, NULL, err);
		if (r < 0)
			return lb_error_wrap(err, "sandbox %s, tier off", name);
		if (ret_info)
			*ret_info = (struct lb_net_info){ 0 };
		return 0;
	}

	/* A warm slot of this tier first; else a cold one; else one kept warm for the other tier, emptied first. */
	pthread_mutex_lock(&ctx->lock);
	unsigned slot = 0;
	bool warm = warm_take_locked(ctx, t, &slot), found = warm, other = false;
	for (size_t i = 0; i < ctx->n_slots && !found; i++)
		if (!ctx->slots[i].used && !is_warm_locked(ctx, (unsigned)i)) {
			slot = (unsigned)i;
			found = true;
		}
	if (!found)
		found = other = warm_take_locked(ctx, t == LB_TIER_WEB ? LB_TIER_PACKAGES : LB_TIER_WEB, &slot);
	if (found) {
		ctx->slots[slot] = (struct lb_slot){ .used = true, .tier = LB_TIER_OFF };
		snprintf(ctx->slots[slot].name, sizeof(ctx->slots[slot].name), "%s", name);
	}
	pthread_mutex_unlock(&ctx->lock);
	if (!found)
		return lb_error_setx(err, ENOSPC, "the network pool has no free /30 left (%zu sandboxes)",
				     ctx->n_slots);

	char ifname[16], alias[80], addr_s[16], gw_s[16];
	slot_ifname(slot, ifname);
	snprintf(alias, sizeof(alias), "lensbox:%s", name);
	uint32_t gw = ctx->pool_base + 4 * slot + 1, addr = gw + 1;
	ip_str(gw, gw_s);
	ip_str(addr, addr_s);
	int ifindex = 0;
	if (other) {
		r = lb_nft_remove_slot(slot, err);
		if (r < 0)
			goto fail;
	}
	uint8_t gw6[16], addr6[16];
	lb_net_pool6_addr(ctx->pool6_base, slot, 1, gw6);
	lb_net_pool6_addr(ctx->pool6_base, slot, 2, addr6);
	bool ipv6 = ctx->ipv6 && atomic_load(&ctx->route6) && (t == LB_TIER_PACKAGES || ctx->ipv6_forwarding);
	struct lb_veth_host host = { .ifname = ifname,
				     .alias = alias,
				     .sandbox_ifname = "eth0",
				     .netns_fd = netns_fd,
				     .conf4_fd = ctx->conf4_fd,
				     .conf6_fd = ctx->conf6_fd,
				     .gateway = gw,
				     .gateway6 = ipv6 ? gw6 : NULL,
				     .addr6 = addr6 };
	r = lb_veth_add_host(&host, &ifindex, err);
	if (r < 0)
		goto fail;
	/* Larger segments from the host into the sandbox cut the relay's per-packet cost (services.c); only `packages`
	 * sandboxes talk to the relay, so only their veth changes. Best effort: a kernel without IPv4 BIG TCP keeps
	 * 64 KiB and the relay then splices instead of copying. */
	bool big = false;
	if (t == LB_TIER_PACKAGES && ctx->veth_gso_max > 65536) {
		uint32_t gso = 0;
		struct lb_error gso_err;
		big = lb_veth_set_gso_ipv4_max(ifindex, ctx->veth_gso_max, &gso, &gso_err) == 0 &&
		      gso == ctx->veth_gso_max;
	}
	struct lb_veth_addrs sb_addrs = { .addr = addr, .gateway = gw };
	if (ipv6) {
		sb_addrs.addr6 = addr6;
		sb_addrs.gateway6 = gw6;
		sb_addrs.host_mac = host.host_mac;
	}
	r = lb_veth_setup_sandbox(netns_fd, "eth0", &sb_addrs, err);
	if (r < 0)
		goto fail;
	pthread_mutex_lock(&ctx->lock);
	bool with_device = t == LB_TIER_WEB && ctx->offload;
	pthread_mutex_unlock(&ctx->lock);
	if (warm && connect_warm(ctx, slot, t, with_device, err) == 0) {
		r = 0;
	} else {
		/* cold, or the warm slot's objects were changed or removed meanwhile: load them whole */
		if (warm)
			(void)lb_nft_remove_slot(slot, err);
		r = load_slot_rules(ctx, slot, t, with_device, err);
	}
	if (r < 0)
		goto fail;
	pthread_mutex_lock(&ctx->lock);
	ctx->slots[slot].tier = t;
	ctx->slots[slot].flowdev = with_device;
	ctx->slots[slot].host_ifindex = ifindex;
	pthread_mutex_unlock(&ctx->lock);
	atomic_store(&ctx->shared[slot].refusals, 0);
	atomic_store(&ctx->shared[slot].big_segments, big);
	atomic_store(&ctx->shared[slot].ipv6, ipv6);
	atomic_store(&ctx->shared[slot].tier, t);
	if (ret_info) {
		struct lb_net_info info = { .prefix = 30, .slot = slot };
		memcpy(info.host_ifname, ifname, sizeof(info.host_ifname));
		snprintf(info.sandbox_ifname, sizeof(info.sandbox_ifname), "eth0");
		memcpy(info.address, addr_s, sizeof(info.address));
		memcpy(info.gateway, gw_s, sizeof(info.gateway));
		if (ipv6) {
			inet_ntop(AF_INET6, addr6, info.address6, sizeof(info.address6));
			inet_ntop(AF_INET6, gw6, info.gateway6, sizeof(info.gateway6));
		}
		*ret_info = info;
	}
	return 0;
fail:
	lb_error_wrap(err, "attaching sandbox %s to tier %s", name, lb_tier_name(t));
	struct lb_error ignored;
	if (teardown_slot(ctx, slot, false, &ignored) < 0) {
		/* keep the slot marked: reconciliation will retry; never hand out a half-removed subnet */
	}
	return r;
}

int lb_net_detach(struct lb_net *ctx, const char *name, struct lb_error *err)
{
	pthread_mutex_lock(&ctx->lock);
	int slot = find_slot_locked(ctx, name);
	pthread_mutex_unlock(&ctx->lock);
	if (slot < 0)
		return lb_error_setx(err, ENOENT, "sandbox %.64s has no network attached", name);
	int r = teardown_slot(ctx, (unsigned)slot, true, err);
	if (r < 0)
		return lb_error_wrap(err, "detaching sandbox %s", name);
	return 0;
}

int lb_net_reconcile(struct lb_net *ctx, const char *const *known, size_t n_known, unsigned *ret_removed,
		     struct lb_error *err)
{
	_cleanup_free_ bool *present = calloc(ctx->n_slots, sizeof(bool));
	if (!present)
		return lb_error_set(err, ENOMEM, "allocating");
	int r = lb_nft_slots_present(present, ctx->n_slots, NULL, err);
	if (r < 0)
		return lb_error_wrap(err, "reconciling the network");
	unsigned removed = 0;
	for (size_t i = 0; i < ctx->n_slots; i++) {
		pthread_mutex_lock(&ctx->lock);
		bool used = ctx->slots[i].used;
		bool warm = !used && present[i] && is_warm_locked(ctx, (unsigned)i);
		char name[64];
		memcpy(name, ctx->slots[i].name, sizeof(name));
		pthread_mutex_unlock(&ctx->lock);
		if (!used && (warm || !present[i]))
			continue; /* free, or kept warm by this process */
		bool keep = false;
		for (size_t k = 0; used && name[0] && k < n_known; k++)
			if (strcmp(known[k], name) == 0)
				keep = true;
		if (keep)
			continue;
		r = teardown_slot(ctx, (unsigned)i, false, err);
		if (r < 0)
			return lb_error_wrap(err, "reconciling the network");
		removed++;
	}
	if (ret_removed)
		*ret_removed = removed;
	return 0;
}

static int verify_with(struct lb_net *ctx, bool *present, bool *broken, unsigned *ret_repaired, struct lb_error *err)
{
	struct lb_error e2;
	bool table = lb_nft_run("list table inet lensbox", NULL, &e2) == 0;
	pthread_mutex_lock(&ctx->lock);
	bool offload = ctx->offload;
	pthread_mutex_unlock(&ctx->lock);
	/* A table that lost its flowtable (someone flushed `allowed` and deleted it) is reloaded whole, with every
	 * sandbox's rules: the flowtable's devices come back with them. Only speed depends on it, never a policy. */
	if (table && offload && !lb_nft_flowtable_present())
		table = false;
	struct lb_nft_shape shape;
	int r = lb_nft_slots_present(present, ctx->n_slots, &shape, err);
	if (r < 0)
		return lb_error_wrap(err, "verifying the network rules");
	/* A base chain flushed, deleted or given someone else's rule: the table is reloaded whole, as when it is gone
	 * (its chains hold every sandbox's first and last word: the denies before any allow, the final refusals). */
	if (table && (shape.chains != ctx->base_shape.chains || shape.rules != ctx->base_shape.rules))
		table = false;
	unsigned n_broken = 0;
	pthread_mutex_lock(&ctx->lock);
	for (size_t i = 0; i < ctx->n_slots; i++)
		if (ctx->slots[i].used && ctx->slots[i].tier != LB_TIER_OFF && (!table || !present[i])) {
			broken[i] = true;
			n_broken++;
		}
	pthread_mutex_unlock(&ctx->lock);
	if (table && n_broken == 0) {
		if (ret_repaired)
			*ret_repaired = 0;
		return 0;
	}
	/* Fail closed first: a sandbox whose rules are gone must not keep a working link meanwhile. */
	char ifname[16];
	for (size_t i = 0; i < ctx->n_slots; i++)
		if (broken[i]) {
			slot_ifname((unsigned)i, ifname);
			lb_veth_set_down(ifname, &e2);
		}
	if (!table) {
		r = load_base(ctx, err);
		if (r < 0)
			return lb_error_wrap(err, "reloading lensbox's table");
		forget_warm(ctx); /* the new table has none of their objects */
		load_offload(ctx);
		record_base_shape(ctx);
	}
	for (size_t i = 0; i < ctx->n_slots; i++) {
		if (!broken[i])
			continue;
		pthread_mutex_lock(&ctx->lock);
		enum lb_tier t = ctx->slots[i].tier;
		char name[64];
		memcpy(name, ctx->slots[i].name, sizeof(name));
		pthread_mutex_unlock(&ctx->lock);
		pthread_mutex_lock(&ctx->lock);
		bool with_device = t == LB_TIER_WEB && ctx->offload;
		pthread_mutex_unlock(&ctx->lock);
		r = lb_nft_remove_slot((unsigned)i, err);
		if (r == 0)
			r = load_slot_rules(ctx, (unsigned)i, t, with_device, err);
		if (r < 0)
			return lb_error_wrap(err, "reloading the rules of sandbox %s", name); /* its link stays down */
		slot_ifname((unsigned)i, ifname);
		r = lb_veth_set_up(ifname, err);
		if (r < 0)
			return r;
	}
	if (ret_repaired)
		*ret_repaired = n_broken + (table ? 0 : 1);
	return 0;
}

/* After the table was replaced or deleted: no slot is warm any more. */
static void forget_warm(struct lb_net *ctx)
{
	pthread_mutex_lock(&ctx->lock);
	memset(ctx->n_warm, 0, sizeof(ctx->n_warm));
	pthread_mutex_unlock(&ctx->lock);
}

int lb_net_verify(struct lb_net *ctx, unsigned *ret_repaired, struct lb_error *err)
{
	/* present[i]: slot i has objects in the table; broken[i]: it is attached and they are missing */
	bool *present = calloc(2 * ctx->n_slots, sizeof(bool));
	if (!present)
		return lb_error_set(err, ENOMEM, "allocating");
	bool *broken = present + ctx->n_slots;
	int r = verify_with(ctx, present, broken, ret_repaired, err);
	free(present);
	if (r == 0)
		fill_warm(ctx, 1); /* the ones attaches took, one per check, so a check stays short */
	return r;
}

int lb_net_unload(struct lb_net *ctx, struct lb_error *err)
{
	int r = lb_net_reconcile(ctx, NULL, 0, NULL, err);
	if (r < 0)
		return r;
	struct lb_error e2;
	r = lb_nft_run("delete table inet lensbox", NULL, &e2);
	if (r < 0 && r != -ENOENT) {
		*err = e2;
		return r;
	}
	forget_warm(ctx);
	return 0;
}

int lb_net_blocked(struct lb_net *ctx, const char *name, uint64_t *ret, struct lb_error *err)
{
	pthread_mutex_lock(&ctx->lock);
	int slot = find_slot_locked(ctx, name);
	pthread_mutex_unlock(&ctx->lock);
	uint64_t svc = slot >= 0 ? atomic_load(&ctx->shared[slot].refusals) : 0;
	if (slot < 0)
		return lb_error_setx(err, ENOENT, "sandbox %.64s has no network attached", name);
	uint64_t pk = 0;
	int r = lb_nft_counter_packets((unsigned)slot, &pk, err);
	if (r < 0)
		return r;
	*ret = pk + svc;
	return 0;
}

void lb_net_services_health(struct lb_net *ctx, struct lb_net_health *h)
{
	h->services_isolated = ctx->services_uid != 0;
	h->services_alive = h->services_isolated ? lb_services_alive(ctx) : true;
	if (h->services_isolated) {
		lb_services_state(ctx, h);
		h->services_landlock_abi = ctx->services_status ? atomic_load(&ctx->services_status->landlock_abi) : 0;
	} else {
		h->services_pid = (unsigned)getpid();
		h->services_supervised = true; /* our own threads: they live as long as we do */
		h->services_worker_pid = h->services_pid;
		h->services_restarts = 0;
	}
}

void lb_net_health(struct lb_net *ctx, struct lb_net_health *h)
{
	*h = (struct lb_net_health){ 0 };
	struct lb_error e;
	h->table_loaded = lb_nft_run("list table inet lensbox", NULL, &e) == 0;
	lb_nft_foreign_drop("forward", &h->foreign_forward_drop, h->foreign_forward, sizeof(h->foreign_forward));
	lb_nft_foreign_drop("input", &h->foreign_input_drop, h->foreign_input, sizeof(h->foreign_input));
	uint64_t fwd = 0;
	h->ip_forward = lb_read_u64_at(AT_FDCWD, "/proc/sys/net/ipv4/ip_forward", &fwd) == 0 && fwd == 1;
	pthread_mutex_lock(&ctx->lock);
	for (size_t i = 0; i < ctx->n_slots; i++)
		h->sandboxes += ctx->slots[i].used;
	h->warm_slots = ctx->n_warm[LB_TIER_WEB] + ctx->n_warm[LB_TIER_PACKAGES];
	pthread_mutex_unlock(&ctx->lock);
	char a[16];
	inet_ntop(AF_INET, &ctx->upstream.sin_addr, a, sizeof(a));
	snprintf(h->dns_upstream, sizeof(h->dns_upstream), "%s:%u", a, ntohs(ctx->upstream.sin_port));
	h->n_package_names = (unsigned)ctx->packages.n;
	pthread_mutex_lock(&ctx->lock);
	size_t used = 0;
	h->uplinks[0] = '\0';
	for (size_t i = 0; i < ctx->n_uplinks && used < sizeof(h->uplinks); i++)
		used += (size_t)snprintf(h->uplinks + used, sizeof(h->uplinks) - used, "%s%s", i ? " " : "",
					 ctx->uplink[i].name);
	pthread_mutex_unlock(&ctx->lock);
	snprintf(h->npm_registry, sizeof(h->npm_registry), "%s", ctx->npm_registry);
	lb_net_services_health(ctx, h);
	pthread_mutex_lock(&ctx->lock);
	h->flow_offload = ctx->offload && h->table_loaded;
	snprintf(h->flow_offload_why, sizeof(h->flow_offload_why), "%s",
		 !h->table_loaded ? "lensbox's table is not loaded" : ctx->offload_why);
	pthread_mutex_unlock(&ctx->lock);
	bool route6 = atomic_load(&ctx->route6);
	/* web's IPv6; ctx->ipv6 and ipv6_forwarding are set at init only */
	h->ipv6 = ctx->ipv6 && route6 && ctx->ipv6_forwarding;
	snprintf(h->ipv6_why, sizeof(h->ipv6_why), "%s",
		 !ctx->ipv6 || !route6 ? (ctx->ipv6 ? "the host has no IPv6 default route" : ctx->ipv6_why)
		 : h->ipv6	       ? ""
				       : ctx->ipv6_why);
}

const char *lb_net_resolv_conf(enum lb_tier tier)
{
	if (tier == LB_TIER_PACKAGES || tier == LB_TIER_WEB)
		return "# lensbox: DNS goes to lensboxd's resolver on the host side\nnameserver " LB_NET_RESOLVER_ADDR
		       "\noptions timeout:2 attempts:2\n";
	return NULL;
}

int lb_net_npm_registry_host(char *buf, size_t size)
{
	int pipefd[2];
	if (pipe2(pipefd, O_CLOEXEC) < 0)
		return -errno;
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, pipefd[1], 1);
	posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	char *argv[] = { (char *)"npm", (char *)"config", (char *)"get", (char *)"registry", NULL };
	pid_t pid;
	int r = posix_spawnp(&pid, "npm", &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	close(pipefd[1]);
	_cleanup_close_ int rd = pipefd[0];
	if (r != 0)
		return -ENOENT;
	_cleanup_pid_ pid_t child = pid;
	char out[512];
	size_t len = 0;
	struct timespec start;
	clock_gettime(CLOCK_MONOTONIC, &start);
	for (;;) {
		struct timespec now;
		clock_gettime(CLOCK_MONOTONIC, &now);
		long left = 5000 - (long)((now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000);
		if (left <= 0)
			return -ETIMEDOUT; /* child killed by its cleanup */
		struct pollfd p = { .fd = rd, .events = POLLIN };
		if (poll(&p, 1, (int)left) <= 0)
			continue;
		ssize_t n = read(rd, out + len, sizeof(out) - 1 - len);
		if (n <= 0)
			break;
		len += (size_t)n;
		if (len == sizeof(out) - 1)
			break;
	}
	int status;
	if (waitpid(TAKE_FD(child), &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
		return -ENOENT;
	out[len] = '\0';
	/* "https://host[:port]/path\n" */
	char *p = strstr(out, "://");
	if (!p)
		return -ENOENT;
	p += 3;
	size_t n = strcspn(p, ":/\n\r ");
	if (n == 0 || n >= size || !lb_hostname_valid(p, n))
		return -ENOENT;
	memcpy(buf, p, n);
	buf[n] = '\0';
	for (size_t i = 0; i < n; i++)
		if (buf[i] >= 'A' && buf[i] <= 'Z')
			buf[i] = (char)(buf[i] - 'A' + 'a');
	return 0;
}

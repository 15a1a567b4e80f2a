/*
 * config.c — parsing lensboxd.conf and flag overrides (see config.h).
 *
 * Runs in lensboxd (root) at start-up, single-threaded. The file is trusted as much as /etc is (root-owned), but it
 * is still parsed strictly: unknown keys, trailing garbage and out-of-range values are errors naming the line,
 * because a typo in a limit must not silently fall back to a default.
 *
 * One table (keys[]) lists every key with its default and help text; docs/configuration.md documents the same keys
 * and the unit test checks that every key in the table appears there.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lb/cleanup.h"
#include "lb/fileio.h"
#include "lb/units.h"

#ifndef LENSBOX_POLICY_DIR
#define LENSBOX_POLICY_DIR "/etc/lensbox/policy" /* the build passes the installed location */
#endif

enum key_type {
	K_PATH,
	K_STRING,
	K_UIDS,
	K_GIDS,
	K_NETWORK,
	K_CPU,
	K_SIZE,
	K_MINUTES, /* a number of minutes, or a duration string ("30s", "2m") */
	K_HOURS,   /* a number of hours, or a duration string */
	K_DAYS,	   /* a number of days, or a duration string */
	K_U32,
	K_LOGLEVEL,
	K_BOOL,
};

struct key_def {
	const char *name;
	enum key_type type;
	size_t offset;
	size_t size; /* of a char[] field */
	uint64_t min, max;
	const char *def;
	const char *help;
};

#define F(field)  offsetof(struct lbd_config, field), sizeof(((struct lbd_config *)0)->field)
#define FN(field) offsetof(struct lbd_config, field), 0

static const struct key_def keys[] = {
	{ "socket", K_PATH, F(socket_path), 0, 0, "/run/lensbox/lensboxd.sock", "the API's Unix socket" },
	{ "socket_group", K_STRING, F(socket_group), 0, 0, "root",
	  "group owning the socket and its directory (mode 0660 / 0750)" },
	{ "api_user", K_STRING, F(api_user), 0, 0, "999999998",
	  "user (name or numeric uid) the API process runs as: it parses every request, with no capability and no "
	  "file access; not root, outside the sandboxes' uid range, not services_uid" },
	{ "allowed_uids", K_UIDS, FN(allowed_uids), 0, 0, "",
	  "peer uids allowed to call the API, comma-separated; empty: any the socket mode lets in" },
	{ "allowed_gids", K_GIDS, FN(allowed_gids), 0, 0, "",
	  "peer gids allowed (a peer passes if uid OR gid matches)" },
	{ "state_dir", K_PATH, F(state_dir), 0, 0, "/var/lib/lensbox", "the store and every sandbox's storage" },
	{ "run_dir", K_PATH, F(run_dir), 0, 0, "/run/lensbox/sandboxes",
	  "runtime state (mounts) of running sandboxes" },
	{ "policy_dir", K_PATH, F(policy_dir), 0, 0, LENSBOX_POLICY_DIR, "the reviewed policy files" },
	{ "images_dir", K_PATH, F(images_dir), 0, 0, "/var/lib/lensbox/images", "unpacked images, <name>/rootfs" },
	{ "default_image", K_STRING, F(default_image), 0, 0, "python:3.12-slim",
	  "image of sandboxes whose spec names none" },
	{ "default_network", K_NETWORK, FN(default_network), 0, 0, "off", "off | packages | web" },
	{ "default_cpu", K_CPU, FN(default_cpu_millicores), 100, 64000, "1", "cores: 1, 0.5, 500m (0.1-64)" },
	{ "default_memory", K_SIZE, FN(default_memory_bytes), 64ull << 20, 64ull << 30, "512Mi",
	  "memory: 512Mi, 2Gi (64Mi-64Gi)" },
	{ "default_disk", K_SIZE, FN(default_disk_bytes), 16ull << 20, 1ull << 40, "1Gi",
	  "size of a sandbox's storage filesystem (16Mi-1Ti)" },
	{ "idle_minutes", K_MINUTES, FN(idle_seconds), 1, 1440ull * 60, "15",
	  "stop a sandbox unused this long: minutes, or a duration like 30s (1s-1440m)" },
	{ "keep_hours", K_HOURS, FN(keep_seconds), 1, 720ull * 3600, "24",
	  "delete a sandbox unused this long: hours, or a duration like 90s (1s-720h)" },
	{ "default_timeout_seconds", K_U32, FN(default_timeout_seconds), 1, 600, "60", "a run's time limit (1-600)" },
	{ "default_output_limit", K_U32, FN(default_output_limit), 1, 1000000, "10000",
	  "characters of stdout and stderr returned (1-1000000)" },
	{ "max_running", K_U32, FN(max_running), 1, 4096, "16", "running sandboxes at once (1-4096)" },
	{ "spare_sandboxes", K_U32, FN(spare_sandboxes), 0, 64, "1",
	  "sandboxes kept started ahead of time for new conversations, of the spec most new ones ask for (0-64); 0: "
	  "none" },
	{ "spare_sandboxes_max", K_U32, FN(spare_sandboxes_max), 0, 64, "4",
	  "spares kept after a burst of new sandboxes: the largest burst of the last minute, up to this (0-64); at "
	  "most spare_sandboxes when below it" },
	{ "ready_storages", K_U32, FN(ready_storages), 0, 16, "2",
	  "empty storage filesystems of the default disk size kept mounted ahead of time for new sandboxes that no "
	  "spare "
	  "serves (0-16); 0: none" },
	{ "ready_starts", K_U32, FN(ready_starts), 0, 16, "2",
	  "starts whose request-independent parts are made ahead of time: a network namespace each and, on cgroup v1, "
	  "the cgroup directories (0-16); 0: none" },
	{ "max_connections", K_U32, FN(max_connections), 8, 4096, "512", "simultaneous API connections (8-4096)" },
	{ "connection_timeout_seconds", K_U32, FN(connection_timeout_seconds), 5, 3600, "900",
	  "an idle or stalled connection is closed after this long (5-3600)" },
	{ "uid_range_start", K_U32, FN(uid_range_start), 65536, 4000000000u, "1000000000",
	  "first host uid/gid given to sandboxes (>= 65536)" },
	{ "uid_range_count", K_U32, FN(uid_range_count), 1, 100000000, "65536",
	  "how many host uids sandboxes may use" },
	{ "timer_interval_ms", K_U32, FN(timer_interval_ms), 100, 60000, "1000",
	  "how often idle and keep timers look (100-60000 ms)" },
	{ "runs_keep_days", K_DAYS, FN(runs_keep_seconds), 0, 36500ull * 86400, "30",
	  "delete ledger rows older than this: days, or a duration like 90s (0-36500 days); 0: keep them" },
	{ "runs_keep_max", K_U32, FN(runs_keep_max), 0, 1000000000, "100000",
	  "keep at most this many ledger rows, the newest (0-1000000000); 0: no limit" },
	{ "body_memory", K_SIZE, FN(body_memory_bytes), 32ull << 20, 64ull << 30, "512Mi",
	  "request bodies held in memory at once over all connections (32Mi-64Gi)" },
	{ "log_level", K_LOGLEVEL, FN(log_level), 0, 0, "info", "debug | info | warn | error" },
	{ "networking", K_BOOL, FN(networking), 0, 0, "on",
	  "on: the packages and web tiers work (nftables table inet lensbox, resolver, relay); off: only network off" },
	{ "network_pool", K_STRING, F(network_pool), 0, 0, "10.231.0.0/16", "IPv4 CIDR for the sandboxes' /30 links" },
	{ "network_pool6", K_STRING, F(network_pool6), 0, 0, "fd6c:6273::/64",
	  "IPv6 CIDR (prefix 8-96) for the web sandboxes' /126 links, translated onto the uplink; off: no IPv6" },
	{ "services_uid", K_U32, FN(services_uid), 0, 4000000000u, "999999999",
	  "uid and gid the DNS resolver and packages relay run as, in processes of their own (they parse the "
	  "sandboxes' DNS, TLS and HTTP bytes); outside the sandboxes' uid range; 0: as threads of lensboxd (root)" },
	{ "dns_per_sandbox", K_U32, FN(dns_per_sandbox), 1, 64, "16",
	  "DNS queries one sandbox may have in flight at the resolver (of 64 in all); more are dropped and counted" },
	{ "relay_per_sandbox", K_U32, FN(relay_per_sandbox), 1, 256, "64",
	  "connections one packages sandbox may have open through the relay (of 256 in all); more are reset and "
	  "counted" },
	{ "network_warm_slots", K_U32, FN(network_warm_slots), 0, 64, "4",
	  "slots of each networked tier whose nftables rules stay loaded for the next sandbox of that tier (its "
	  "network is then ~1 ms faster to attach); 0: loaded and removed with each sandbox" },
	{ "dns_upstream", K_STRING, F(dns_upstream), 0, 0, "",
	  "name server the resolver and relay ask (IPv4[:port]); empty: /etc/resolv.conf's first" },
	{ "pull_missing_images", K_BOOL, FN(pull_missing_images), 0, 0, "off",
	  "on: a run or PUT whose image is not in images_dir pulls it from its registry first" },
	{ "insecure_registries", K_STRING, F(insecure_registries), 0, 0, "",
	  "registries (host[:port], comma-separated) reached over plain HTTP; for test registries only" },
	{ "registry_ca_file", K_STRING, F(registry_ca_file), 0, 0, "",
	  "CA bundle for HTTPS registries (absolute path); empty: the system's" },
	{ "registry_credentials", K_STRING, F(registry_credentials), 0, 0, "",
	  "registry credentials, Docker config.json shape (absolute path); empty: anonymous" },
	{ "image_gc_after", K_HOURS, FN(image_gc_after_seconds), 0, 8760ull * 3600, "24",
	  "remove an image no sandbox uses, not pinned, unused this long: hours or a duration; 0: never" },
};

const char *lbd_config_key(size_t i, const char **ret_default, const char **ret_help)
{
	if (i >= LB_ARRAY_SIZE(keys))
		return NULL;
	if (ret_default)
		*ret_default = keys[i].def;
	if (ret_help)
		*ret_help = keys[i].help;
	return keys[i].name;
}

static int parse_u64(const char *s, uint64_t *ret)
{
	if (!*s || !isdigit((unsigned char)*s))
		return -EINVAL;
	errno = 0;
	char *end;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno == ERANGE)
		return -ERANGE;
	if (*end)
		return -EINVAL;
	*ret = v;
	return 0;
}

static int parse_id_list(const char *value, uint32_t *out, size_t *ret_n)
{
	size_t n = 0;
	const char *p = value;
	while (*p) {
		while (*p == ' ' || *p == ',')
			p++;
		if (!*p)
			break;
		char tok[16];
		size_t len = strcspn(p, ", ");
		if (len >= sizeof(tok))
			return -EINVAL;
		memcpy(tok, p, len);
		tok[len] = '\0';
		uint64_t v;
		int r = parse_u64(tok, &v);
		if (r < 0)
			return r;
		if (v >= UINT32_MAX)
			return -ERANGE;
		if (n >= LBD_MAX_ALLOWED)
			return -E2BIG;
		out[n++] = (uint32_t)v;
		p += len;
	}
	*ret_n = n;
	return 0;
}

static int parse_scaled_duration(const char *value, uint64_t unit, uint64_t *ret)
{
	uint64_t v;
	if (parse_u64(value, &v) == 0) {
		if (v > UINT64_MAX / unit)
			return -ERANGE;
		*ret = v * unit;
		return 0;
	}
	return lb_parse_duration(value, ret);
}

int lbd_config_set(struct lbd_config *cfg, const char *key, const char *value, struct lb_error *err)
{
	const struct key_def *k = NULL;
	for (size_t i = 0; i < LB_ARRAY_SIZE(keys); i++)
		if (strcmp(keys[i].name, key) == 0)
			k = &keys[i];
	if (!k)
		return lb_error_setx(err, ENOENT, "unknown setting `%s`", key);
	char *field = (char *)cfg + k->offset;
	uint64_t v = 0;
	int r = 0;
	switch (k->type) {
	case K_PATH:
		if (value[0] != '/')
			return lb_error_setx(err, EINVAL, "`%s` must be an absolute path", key);
		/* fall through */
	case K_STRING:
		if (strlen(value) >= k->size)
			return lb_error_setx(err, ERANGE, "`%s` is longer than %zu characters", key, k->size - 1);
		memcpy(field, value, strlen(value) + 1);
		return 0;
	case K_UIDS:
		r = parse_id_list(value, cfg->allowed_uids, &cfg->n_allowed_uids);
		break;
	case K_GIDS:
		r = parse_id_list(value, cfg->allowed_gids, &cfg->n_allowed_gids);
		break;
	case K_NETWORK:
		if (lb_tier_parse(value, &cfg->default_network) < 0)
			return lb_error_setx(err, EINVAL, "`%s` must be off, packages or web", key);
		return 0;
	case K_CPU: {
		uint32_t mc;
		r = lb_parse_cpu(value, &mc);
		v = mc;
		break;
	}
	case K_SIZE:
		r = lb_parse_size(value, &v);
		break;
	case K_MINUTES:
		r = parse_scaled_duration(value, 60, &v);
		break;
	case K_HOURS:
		r = parse_scaled_duration(value, 3600, &v);
		break;
	case K_DAYS:
		r = parse_scaled_duration(value, 86400, &v);
		break;
	case K_U32:
		r = parse_u64(value, &v);
		break;
	case K_BOOL:
		if (strcmp(value, "on") == 0 || strcmp(value, "true") == 0 || strcmp(value, "yes") == 0)
			*(bool *)(void *)field = true;
		else if (strcmp(value, "off") == 0 || strcmp(value, "false") == 0 || strcmp(value, "no") == 0)
			*(bool *)(void *)field = false;
		else
			return lb_error_setx(err, EINVAL, "`%s` must be on or off", key);
		return 0;
	case K_LOGLEVEL: {
		enum lb_log_level l;
		if (lb_log_parse_level(value, &l) < 0)
			return lb_error_setx(err, EINVAL, "`%s` must be debug, info, warn or error", key);
		cfg->log_level = l;
		return 0;
	}
	}
	if (r < 0)
		return lb_error_setx(err, -r, "`%s`: cannot read `%s` (%s)", key, value, k->help);
	if (k->max && (v < k->min || v > k->max))
		return lb_error_setx(err, ERANGE, "`%s` = %s is out of range (%s)", key, value, k->help);
	switch (k->type) {
	case K_CPU:
	case K_U32:
		*(uint32_t *)(void *)field = (uint32_t)v;
		break;
	case K_SIZE:
	case K_MINUTES:
	case K_HOURS:
	case K_DAYS:
		*(uint64_t *)(void *)field = v;
		break;
	case K_PATH:
	case K_STRING:
	case K_UIDS:
	case K_GIDS:
	case K_NETWORK:
	case K_LOGLEVEL:
	case K_BOOL:
		break;
	}
	return 0;
}

void lbd_config_defaults(struct lbd_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	for (size_t i = 0; i < LB_ARRAY_SIZE(keys); i++) {
		struct lb_error err;
		int r = lbd_config_set(cfg, keys[i].name, keys[i].def, &err);
		(void)r; /* the defaults are valid by construction; the unit test checks it */
	}
}

static char *trim(char *s)
{
	while (*s == ' ' || *s == '\t')
		s++;
	size_t n = strlen(s);
	while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r'))
		s[--n] = '\0';
	return s;
}

int lbd_config_load(struct lbd_config *cfg, const char *path, bool missing_ok, struct lb_error *err)
{
	_cleanup_free_ char *buf = NULL;
	size_t len;
	int r = lb_read_file_at(-100 /* AT_FDCWD */, path, (size_t)64 * 1024, &buf, &len);
	if (r == -ENOENT && missing_ok)
		return 0;
	if (r < 0)
		return lb_error_set(err, r, "reading %s", path);
	if (memchr(buf, '\0', len))
		return lb_error_setx(err, EINVAL, "%s: contains a NUL byte", path);
	unsigned line_no = 0;
	/* Line by line, empty lines included, so the numbers in messages are the file's. */
	for (char *line = buf, *next; line; line = next) {
		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		line_no++;
		char *hash = strchr(line, '#');
		if (hash)
			*hash = '\0';
		char *s = trim(line);
		if (!*s)
			continue;
		char *eq = strchr(s, '=');
		if (!eq)
			return lb_error_setx(err, EINVAL, "%s:%u: expected `key = value`", path, line_no);
		*eq = '\0';
		char *key = trim(s), *value = trim(eq + 1);
		r = lbd_config_set(cfg, key, value, err);
		if (r < 0)
			return lb_error_wrap(err, "%s:%u", path, line_no);
	}
	return 0;
}

int lbd_config_validate(const struct lbd_config *cfg, struct lb_error *err)
{
	/* Each sandbox has three host ids: its uid u, its nobody u + uid_range_count and its root u + 2 *
	 * uid_range_count (lbd_runner_spec), so the ids given to sandboxes are [start, start + 3 * count). */
	uint64_t end = (uint64_t)cfg->uid_range_start + 3 * (uint64_t)cfg->uid_range_count;
	if (end > UINT32_MAX - 1)
		return lb_error_setx(
		    err, ERANGE,
		    "uid_range_start + 3 * uid_range_count (each sandbox's uid, nobody and root) passes "
		    "the largest uid");
	/* A sandbox given the services' uid could signal them, or see its own traffic's parsers as its peer. */
	if (cfg->services_uid && cfg->services_uid >= cfg->uid_range_start && cfg->services_uid < end)
		return lb_error_setx(err, ERANGE,
				     "services_uid %u lies in the sandboxes' ids (uid_range_start %u to "
				     "uid_range_start + 3 * uid_range_count %u)",
				     cfg->services_uid, cfg->uid_range_start, cfg->uid_range_count);
	/* The API process is the one that parses hostile requests: it must hold nothing a sandbox or the services
	 * could reach by sharing its ids. */
	uid_t api_uid;
	gid_t api_gid;
	int r = lbd_config_api_ids(cfg, &api_uid, &api_gid, err);
	if (r < 0)
		return r;
	if (api_uid == 0 || (api_uid >= cfg->uid_range_start && api_uid < end) ||
	    (cfg->services_uid && api_uid == cfg->services_uid))
		return lb_error_setx(err, ERANGE,
				     "api_user `%s` (uid %u) must not be root, services_uid or in the sandboxes' ids "
				     "(uid_range_start %u to uid_range_start + 3 * uid_range_count %u)",
				     cfg->api_user, (unsigned)api_uid, cfg->uid_range_start, cfg->uid_range_count);
	if (strlen(cfg->state_dir) > 150 || strlen(cfg->run_dir) > 150)
		return lb_error_setx(err, ENAMETOOLONG, "state_dir and run_dir must be at most 150 characters");
	if ((cfg->registry_ca_file[0] && cfg->registry_ca_file[0] != '/') ||
	    (cfg->registry_credentials[0] && cfg->registry_credentials[0] != '/'))
		return lb_error_setx(err, EINVAL, "registry_ca_file and registry_credentials must be absolute paths");
	return 0;
}

int lbd_config_api_ids(const struct lbd_config *cfg, uid_t *ret_uid, gid_t *ret_gid, struct lb_error *err)
{
	const char *u = cfg->api_user;
	char *end = NULL;
	errno = 0;
	unsigned long n = strtoul(u, &end, 10);
	if (u[0] >= '0' && u[0] <= '9' && end && *end == '\0' && errno == 0 && n < UINT32_MAX) {
		/* A numeric id, like services_uid: no file needs to belong to it, so it need not be in /etc/passwd. */
		*ret_uid = (uid_t)n;
		*ret_gid = (gid_t)n;
		return 0;
	}
	struct passwd pw, *res = NULL;
	char buf[4096];
	if (getpwnam_r(u, &pw, buf, sizeof(buf), &res) != 0 || !res)
		return lb_error_setx(err, ENOENT,
				     "api_user `%s` does not exist: create it (useradd --system --no-create-home "
				     "--shell /usr/sbin/nologin %s) or set api_user to a numeric uid",
				     u, u);
	*ret_uid = res->pw_uid;
	*ret_gid = res->pw_gid;
	return 0;
}

/*
 * config.h — lensboxd's configuration: the key = value file (/etc/lensbox/lensboxd.conf) and the flags that
 * override it. Every key, its default and its range are documented in docs/configuration.md; config.c holds the
 * one table that defines them, so the two cannot drift apart silently (the unit test walks the table).
 *
 * Runs in lensboxd (root) at start-up, before any thread exists. The parsed struct is the daemon's only global
 * state and is read-only afterwards.
 */
#ifndef LBD_CONFIG_H
#define LBD_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "lb/tier.h"

#include "lb/error.h"
#include "lb/log.h"

#define LBD_MAX_ALLOWED 64

struct lbd_config {
	char socket_path[256];		     /* the API's Unix socket */
	char socket_group[64];		     /* group owning the socket and its directory ("" or "root": gid 0) */
	char api_user[64];		     /* the API process's user: a name or a numeric uid */
	uid_t allowed_uids[LBD_MAX_ALLOWED]; /* empty: any peer the socket's mode lets in */
	size_t n_allowed_uids;
	gid_t allowed_gids[LBD_MAX_ALLOWED];
	size_t n_allowed_gids;
	char state_dir[256];  /* the SQLite store and every sandbox's storage */
	char run_dir[256];    /* runtime state the runner keeps (mounts) */
	char policy_dir[256]; /* the reviewed policy files */
	char images_dir[256]; /* unpacked images: <images_dir>/<name>/rootfs */
	char default_image[128];
	enum lb_tier default_network;
	uint32_t default_cpu_millicores; /* 100..64000 */
	uint64_t default_memory_bytes;	 /* 64Mi..64Gi */
	uint64_t default_disk_bytes;	 /* 16Mi..1Ti */
	uint64_t idle_seconds;		 /* a running sandbox unused this long is stopped */
	uint64_t keep_seconds;		 /* a sandbox unused this long is deleted with its files */
	uint32_t default_timeout_seconds;
	uint32_t default_output_limit; /* characters of stdout (head) and stderr (tail) */
	uint32_t max_running;	       /* running sandboxes at once */
	uint32_t spare_sandboxes;      /* started ahead of time for new conversations (spares.c) */
	uint32_t spare_sandboxes_max;  /* the most spares kept after a burst of new sandboxes (arrivals.c) */
	uint32_t ready_storages;       /* new storages' filesystems mounted ahead of time (ready.c) */
	uint32_t ready_starts;	       /* network namespaces and v1 cgroup sets made ahead for starts (ready.c) */
	uint32_t max_connections;      /* simultaneous API connections */
	uint32_t connection_timeout_seconds;
	uint32_t uid_range_start; /* first host uid (and gid) handed to sandboxes */
	uint32_t uid_range_count;
	uint32_t timer_interval_ms;  /* how often the idle/keep timers look */
	uint64_t runs_keep_seconds;  /* ledger rows older than this are deleted; 0: kept forever */
	uint32_t runs_keep_max;	     /* at most this many ledger rows are kept, the newest; 0: no limit */
	uint64_t body_memory_bytes;  /* request bodies held in memory at once, over every connection */
	bool networking;	     /* run netfilter/ (nftables table, resolver, relay) for packages and web */
	char network_pool[32];	     /* IPv4 CIDR the sandboxes' /30s come from */
	char network_pool6[48];	     /* IPv6 CIDR the web sandboxes' /126s come from, or "off" */
	char dns_upstream[64];	     /* "" : the first nameserver of /etc/resolv.conf */
	uint32_t services_uid;	     /* uid/gid of the resolver's and relay's processes; 0: lensboxd's threads */
	uint32_t dns_per_sandbox;    /* resolver queries in flight per sandbox (fair shares) */
	uint32_t relay_per_sandbox;  /* relayed connections open per sandbox */
	uint32_t network_warm_slots; /* per tier, kept loaded between sandboxes (lb_net_config.warm_slots) */

	/* images: pulling and garbage collection */
	bool pull_missing_images;	 /* a missing image is pulled before a sandbox is made from it */
	char insecure_registries[512];	 /* comma-separated host[:port] reached over plain HTTP */
	char registry_ca_file[256];	 /* "" : the system's CA bundle */
	char registry_credentials[256];	 /* "" : anonymous */
	uint64_t image_gc_after_seconds; /* 0: images are never garbage-collected */

	enum lb_log_level log_level;
};

/* The API process's uid and gid: api_user's when it is a name (its primary group), else the number for both. */
int lbd_config_api_ids(const struct lbd_config *cfg, uid_t *ret_uid, gid_t *ret_gid, struct lb_error *err);

/* Fills cfg with the documented defaults. */
void lbd_config_defaults(struct lbd_config *cfg);

/* Applies one "key = value" setting (from the file or a flag). -EINVAL/-ERANGE with err naming the key and the
 * accepted range; -ENOENT for an unknown key. */
int lbd_config_set(struct lbd_config *cfg, const char *key, const char *value, struct lb_error *err);

/* Reads the file at path (comments start with '#', blank lines ignored, at most 64 KiB). A missing file is fine
 * when missing_ok. Errors name the file and line. */
int lbd_config_load(struct lbd_config *cfg, const char *path, bool missing_ok, struct lb_error *err);

/* Checks cross-key rules (uid range not overlapping system ids, paths absolute). */
int lbd_config_validate(const struct lbd_config *cfg, struct lb_error *err);

/* Iterates the documented keys (for the docs test and --help): returns the i-th key name or NULL past the end. */
const char *lbd_config_key(size_t i, const char **ret_default, const char **ret_help);

#endif

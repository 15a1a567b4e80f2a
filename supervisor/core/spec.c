/*
 * spec.c — what a sandbox is made from, in one place for the sandbox table (sandboxes.c) and the spares (spares.c),
 * so a spare and a sandbox started on demand are built alike: the config's defaults for a spec, the runner's key
 * and storage path of a host uid, the runner's spec (limits, tier, policy) for a store spec and an image, and
 * whether this host can run sandboxes at all.
 *
 * Runs in lensboxd (root) on connection threads, the timer thread and the spares' thread; pure functions over the
 * config and policy, which are read-only after start. Nothing here starts, stops or touches a sandbox.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "lb/images.h"
#include "lb/netfilter.h"
#include "core.h"

const char *lbd_cannot_run(const struct lbd *d)
{
	if (!d->policy)
		return d->policy_error;
	if (d->host.why_not[0])
		return d->host.why_not;
	return NULL;
}

void lbd_runner_key(uint32_t host_uid, char buf[LBD_RUNNER_KEY_MAX])
{
	snprintf(buf, LBD_RUNNER_KEY_MAX, "u%" PRIu32, host_uid);
}

void lbd_storage_path(const struct lbd *d, uint32_t host_uid, char *buf, size_t size)
{
	char key[LBD_RUNNER_KEY_MAX];
	lbd_runner_key(host_uid, key);
	snprintf(buf, size, "%s/sandboxes/%s", d->cfg.state_dir, key);
}

void lbd_storage_clear_orphan(const struct lbd *d, uint32_t host_uid)
{
	char storage[512];
	lbd_storage_path(d, host_uid, storage, sizeof(storage));
	struct stat st;
	if (stat(storage, &st) == 0)
		lb_sandbox_destroy_storage(storage, NULL);
}

void lbd_runner_spec(const struct lbd *d, const struct lb_store_spec *spec, uint32_t uid, const struct lbd_image *img,
		     const char *key, const char *storage, struct lb_sandbox_spec *ret)
{
	const struct lb_limits_policy *lp = &d->policy->limits;
	*ret = (struct lb_sandbox_spec){
		.disk_pool = d->disk_pool,
		.disk_pool_bound = true, /* a killed lensboxd must leave no process of its own */
		.cgroups = d->cgroups,
		.name = key,
		.hostname = LBD_SANDBOX_HOSTNAME,
		.rootfs = img->info->rootfs,
		.storage = storage,
		.run_dir = d->cfg.run_dir,
		.host_uid = uid,
		.host_gid = uid,
		/* its nobody and root: the same place in the two ranges above the sandboxes' (lbd_config_validate) */
		.host_id_stride = d->cfg.uid_range_count,
		.limits = { .cpu_millicores = spec->cpu_millicores,
			    .memory_bytes = spec->memory_bytes,
			    .pids = lp->pids,
			    .disk_bytes = spec->disk_bytes ? spec->disk_bytes : d->cfg.default_disk_bytes,
			    .tmp_bytes = lp->tmp_bytes,
			    .shm_bytes = lp->shm_bytes },
		.network = spec->network,
		.image_env = (const char *const *)img->info->env,
		.resolv_conf = lb_net_resolv_conf(spec->network),
		.policy = d->policy,
	};
}

/*
 * held.c — start-up reconciliation of the host uids the store holds before any sandbox row owns them: the spares'
 * (spares.c) and the reserved ones (reserved.c). Whatever an earlier instance started under such a uid had no
 * conversation yet, so all of it goes: its runner key's cgroups, mounts and loop device, its storage, its row.
 *
 * Runs in lensboxd (root) at start-up, before any request can start a sandbox (main.c), single-threaded.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "lb/log.h"
#include "core.h"

int lbd_held_reconcile(struct lbd *d, enum lb_store_holder holder, const char *what, size_t *ret_n,
		       unsigned *ret_failed, struct lb_error *err)
{
	uint32_t *uids = NULL;
	size_t n = 0;
	int r = lb_store_held_list(d->store, holder, &uids, &n, err);
	if (r < 0)
		return r;
	unsigned failed = 0;
	for (size_t i = 0; i < n; i++) {
		char key[LBD_RUNNER_KEY_MAX], storage[512];
		lbd_runner_key(uids[i], key);
		lbd_storage_path(d, uids[i], storage, sizeof(storage));
		struct lb_error e = { 0 };
		/* Safe: cleanup acts only on this uid's own cgroups, mount points and loop device, by its runner key;
		 * the storage removed is one no conversation ever owned (the uid never had a sandbox row). */
		r = lb_sandbox_cleanup(key, d->cfg.run_dir, &e);
		if (r == 0)
			r = lb_sandbox_destroy_storage(storage, &e);
		if (r == 0 || r == -ENOENT)
			r = lb_store_held_remove(d->store, holder, uids[i], &e);
		if (r < 0 && r != -ENOENT) {
			char lf[700];
			snprintf(lf, sizeof(lf), "runner=%s error=\"%s\"", key, e.msg);
			lb_error(lf, "reconciling %s failed", what);
			failed++;
		}
	}
	free(uids);
	*ret_n = n;
	*ret_failed = failed;
	return 0;
}

/*
 * timers.c — the thread that stops idle sandboxes and deletes unused ones.
 *
 * Runs in lensboxd (root), one thread. Every timer_interval_ms it asks the store which sandboxes are past their
 * idle or keep time (lbd_sandboxes_tick); a sandbox in use is skipped, never waited for, and is looked at again on
 * the next tick. The deadlines live in the store, so they survive a restart: a sandbox unused for keep_hours is
 * deleted even if lensboxd was down when the time came. The same thread garbage-collects images no sandbox uses
 * (lbd_images_tick, images.c), checks every LBD_NETWORK_VERIFY_MS that lensbox's nftables table is still loaded
 * (lbd_network_verify, network.c) and prunes the run ledger (lbd_ledger_prune, api_runs.c).
 */
#include <errno.h>
#include <time.h>

#include "lb/log.h"
#include "core.h"

static void *timer_main(void *arg)
{
	struct lbd *d = arg;
	uint64_t net_verified_ms = lbd_mono_ms(), ledger_pruned_ms = 0;
	while (!atomic_load(&d->stopping)) {
		struct timespec ts = { .tv_sec = d->cfg.timer_interval_ms / 1000,
				       .tv_nsec = (long)(d->cfg.timer_interval_ms % 1000) * 1000000 };
		while (nanosleep(&ts, &ts) < 0 && errno == EINTR && !atomic_load(&d->stopping))
			;
		if (atomic_load(&d->stopping))
			break;
		lbd_sandboxes_tick(d);
		uint64_t now = lbd_mono_ms();
		if (d->net && now - net_verified_ms >= LBD_NETWORK_VERIFY_MS) {
			net_verified_ms = now;
			lbd_network_verify(d); /* puts a flushed nftables table back */
		}
		if (now - ledger_pruned_ms >= lbd_ledger_prune_every_ms(d)) {
			ledger_pruned_ms = now;
			lbd_ledger_prune(d); /* runs_keep_days, runs_keep_max */
		}
		lbd_images_tick(d); /* image garbage collection, rate-limited inside */
	}
	return NULL;
}

int lbd_timers_start(struct lbd *d, pthread_t *ret_thread, struct lb_error *err)
{
	int r = pthread_create(ret_thread, NULL, timer_main, d);
	if (r != 0)
		return lb_error_set(err, r, "starting the timer thread");
	return 0;
}

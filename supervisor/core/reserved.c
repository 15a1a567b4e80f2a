/*
 * reserved.c — host uids reserved ahead for new sandboxes that get no spare, so that such a sandbox is started under
 * its uid at once and the commit that creates its row runs while the sandbox's child builds its root
 * (sandboxes.c), instead of before the start.
 *
 * Runs in lensboxd (root): any connection thread takes and gives back (under mu, never held across the store);
 * start-up and shutdown run before and after them.
 *
 * Invariants: every uid in the pool is held in the store's reserved_uids table (lb_store_held_add), so the allocator
 * never hands it out again and a crash leaves a record. A sandbox started under a reserved uid whose row was not
 * committed yet (lensboxd died in between) is therefore found by the next start's lbd_reserved_init, which cleans
 * up that uid's runner key and storage before releasing it, as spares' are. The pool is refilled by the commit that
 * uses one (lb_store_sandbox_create_held with reserve_next), so no store write is added to any request; a request
 * that finds the pool empty (several new sandboxes at once) reserves its own first. Reservations never cost a
 * sandbox its uid: a sandbox made without a start that finds the range full has the pool released and tries again
 * (sandboxes.c).
 *
 * A new sandbox's row (struct lbd_new_row) is recorded running by that commit, made during the start
 * (lb_sandbox_spec.while_building); a start that fails before that records it stopped afterwards, so a failed start
 * leaves the sandbox created, as a start after lb_store_sandbox_put always did.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lb/log.h"
#include "core.h"

int lbd_reserved_init(struct lbd *d, struct lb_error *err)
{
	struct lbd_reserved *p = &d->reserved;
	pthread_mutex_init(&p->mu, NULL);
	p->n = 0;
	size_t n = 0;
	unsigned failed = 0;
	if (lbd_held_reconcile(d, LB_STORE_RESERVED, "a reserved uid", &n, &failed, err) < 0)
		return lb_error_wrap(err, "listing reserved uids to reconcile");
	if (n) {
		char lf[96];
		snprintf(lf, sizeof(lf), "uids=%zu failed=%u", n, failed);
		lb_info(lf, "released the reserved uids of an earlier instance");
	}
	/* Not fatal: without reservations a new sandbox reserves its own uid first (one commit more). */
	while (p->n < LBD_RESERVED_KEEP) {
		struct lb_error e = { 0 };
		uint32_t uid = 0;
		if (lb_store_held_add(d->store, LB_STORE_RESERVED, lbd_now_ms(), &uid, &e) < 0) {
			if (e.code != EUSERS)
				lb_warn(NULL, "reserving a host uid ahead: %s", e.msg);
			break;
		}
		p->uids[p->n++] = uid;
	}
	return 0;
}

uint32_t lbd_reserved_take(struct lbd *d)
{
	struct lbd_reserved *p = &d->reserved;
	uint32_t uid = 0;
	pthread_mutex_lock(&p->mu);
	if (p->n)
		uid = p->uids[--p->n];
	pthread_mutex_unlock(&p->mu);
	return uid;
}

void lbd_reserved_give(struct lbd *d, uint32_t uid)
{
	struct lbd_reserved *p = &d->reserved;
	pthread_mutex_lock(&p->mu);
	bool kept = p->n < LBD_RESERVED_KEEP;
	if (kept)
		p->uids[p->n++] = uid;
	pthread_mutex_unlock(&p->mu);
	if (!kept) /* a failure leaves the record to the next start's reconciliation */
		(void)lb_store_held_remove(d->store, LB_STORE_RESERVED, uid, NULL);
}

unsigned lbd_reserved_drop(struct lbd *d)
{
	unsigned n = 0;
	uint32_t uid;
	while ((uid = lbd_reserved_take(d)) != 0)
		n += lb_store_held_remove(d->store, LB_STORE_RESERVED, uid, NULL) == 0;
	return n;
}

void lbd_reserved_stop(struct lbd *d)
{
	(void)lbd_reserved_drop(d);
	pthread_mutex_destroy(&d->reserved.mu);
}

/* ---- a new sandbox started under a reserved uid ---- */

int lbd_new_row_begin(struct lbd *d, const char *name, const struct lb_store_spec *spec, const char *digest,
		      struct lbd_new_row *nr, struct lb_store_sandbox *ret_row, struct lb_error *err)
{
	uint32_t uid = lbd_reserved_take(d);
	if (!uid) {
		int r = lb_store_held_add(d->store, LB_STORE_RESERVED, lbd_now_ms(), &uid, err);
		if (r < 0)
			return r;
	}
	lbd_storage_clear_orphan(d, uid);
	*nr = (struct lbd_new_row){ .d = d, .name = name, .spec = spec, .digest = digest, .uid = uid };
	/* what a start reads of its row; the store's own comes with the recording */
	memset(ret_row, 0, sizeof(*ret_row));
	snprintf(ret_row->name, sizeof(ret_row->name), "%s", name);
	ret_row->spec = *spec;
	ret_row->host_uid = ret_row->host_gid = uid;
	ret_row->state = LB_SANDBOX_STOPPED;
	return 0;
}

int lbd_new_row_record(struct lbd_new_row *nr, bool started)
{
	uint32_t next = 0;
	const struct lb_store_from_held from = {
		.holder = LB_STORE_RESERVED, .uid = nr->uid, .started = started, .reserve_next = true
	};
	nr->done = true;
	nr->r = lb_store_sandbox_create_held(nr->d->store, nr->name, nr->spec, nr->digest, lbd_now_ms(), &from, NULL,
					     &next, &nr->err);
	nr->started = nr->r == 0 && started;
	if (next)
		lbd_reserved_give(nr->d, next);
	return nr->r;
}

int lbd_new_row_while_building(void *arg, struct lb_error *err)
{
	struct lbd_new_row *nr = arg;
	int r = lbd_new_row_record(nr, true);
	return r < 0 ? lb_error_setx(err, -r, "recording the sandbox: %s", nr->err.msg) : 0;
}

void lbd_new_row_end(struct lbd_new_row *nr)
{
	if (!nr->uid)
		return;
	if (!nr->done)
		(void)lbd_new_row_record(nr, false);
	if (nr->r < 0) /* still reserved in the store: back to the pool */
		lbd_reserved_give(nr->d, nr->uid);
}

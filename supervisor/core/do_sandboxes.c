/*
 * do_sandboxes.c — the core's side of GET /v1/sandboxes, GET/PUT/DELETE /v1/sandboxes/{name} and
 * POST /v1/sandboxes/{name}/stop (messages LBP_SANDBOX_*).
 *
 * Runs in the core (root) on channel threads. Reads come from the store and never wait for a turn (a slow run
 * does not delay a listing); changes (ensure, stop, delete) take the sandbox's turn, so they happen between runs,
 * in arrival order.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "lb/cleanup.h"

/* Writes the sandbox object including disk_used_bytes. */
static void gen_sandbox_full(struct lbd *d, yajl_gen g, const struct lb_store_sandbox *row)
{
	char storage[512];
	lbd_storage_path(d, row->host_uid, storage, sizeof(storage));
	uint64_t used = 0;
	bool have = lb_storage_usage(storage, &used) == 0;
	lbd_gen_sandbox_with_disk(d, g, row, have ? (int64_t)used : -1);
}

void lbd_do_sandbox_list(struct lbd *d, struct lbp_msg *m, struct lbd_res *res)
{
	(void)m;
	struct lb_store_sandbox *list = NULL;
	size_t n = 0;
	struct lb_error err = { 0 };
	if (lb_store_sandbox_list(d->store, LB_STORE_ALL, LB_STORE_BY_NAME, &list, &n, &err) < 0) {
		lbd_res_error(res, 500, "internal", "Reading the sandboxes failed: %s", err.msg);
		return;
	}
	yajl_gen g = lbd_gen_new();
	yajl_gen_map_open(g);
	lbd_gen_key(g, "sandboxes");
	yajl_gen_array_open(g);
	for (size_t i = 0; i < n; i++)
		gen_sandbox_full(d, g, &list[i]);
	yajl_gen_array_close(g);
	yajl_gen_map_close(g);
	free(list);
	lbd_gen_finish(g, res, 200);
}

void lbd_do_sandbox_get(struct lbd *d, struct lbp_msg *m, struct lbd_res *res)
{
	const char *name = m->u.name.name;
	struct lb_store_sandbox row;
	struct lb_error err = { 0 };
	int r = lb_store_sandbox_get(d->store, name, &row, &err);
	if (r == -ENOENT) {
		lbd_res_error(res, 404, "sandbox_not_found", "There is no sandbox named %s.", name);
		return;
	}
	if (r < 0) {
		lbd_res_error(res, 500, "internal", "Reading the sandbox failed: %s", err.msg);
		return;
	}
	yajl_gen g = lbd_gen_new();
	gen_sandbox_full(d, g, &row);
	lbd_gen_finish(g, res, 200);
}

void lbd_do_sandbox_put(struct lbd *d, struct lbp_msg *m, struct lbd_res *res)
{
	const char *name = m->u.put.name;
	struct lbd_fail f = { 0 };
	struct lbd_spec_request spec;
	int r = lbd_spec_from_wire(&d->cfg, &m->u.put.spec, &spec, &f);
	if (r < 0) {
		lbd_res_fail(res, &f);
		return;
	}
	/* Only an image or network the request names can replace an existing sandbox; left out, they are the
	 * defaults for a new one and leave an existing one alone. A named image must be here (pulled first when the
	 * config allows); the default image of a new sandbox is checked (and pulled) by lbd_sandbox_ensure(), and an
	 * existing sandbox is never refused because the default image is missing. */
	struct lb_error err = { 0 };
	struct lbd_image_pulled pulled = { 0 };
	if (spec.has_image) {
		struct lbd_image img;
		if (lbd_image_get(d, spec.spec.image, true, false, &img, &pulled, &err) < 0) {
			lbd_res_error(res, 503, "image_unavailable", "The image %s is not available here: %s",
				      spec.spec.image, err.msg);
			return;
		}
		lbd_image_release(&img);
	}
	struct lbd_sandbox *sb = lbd_sandbox_acquire(d, name);
	if (!sb) {
		lbd_res_error(res, 500, "internal", "Out of memory.");
		return;
	}
	struct lbd_ensure_result er;
	r = lbd_sandbox_ensure(d, sb, &spec, false, &er, &f);
	/* The row is read within the same turn: a DELETE queued behind this PUT must not turn its success into a
	 * 404 (the answer describes the sandbox as this request left it). */
	struct lb_store_sandbox row = { 0 };
	if (r == 0 && (r = lb_store_sandbox_get(d->store, name, &row, &err)) < 0)
		lbd_fail_store(&f, r, "Reading the sandbox back", err.msg);
	lbd_sandbox_release(d, sb);
	if (r < 0) {
		lbd_res_fail(res, &f);
		return;
	}
	yajl_gen g = lbd_gen_new();
	yajl_gen_map_open(g);
	lbd_gen_bool(g, "created", er.created);
	lbd_gen_str(g, "recreated", er.recreated[0] ? er.recreated : NULL);
	lbd_gen_bool(g, "image_pulled", pulled.pulled || er.image_pulled);
	if (pulled.pulled || er.image_pulled)
		lbd_gen_uint(g, "image_pull_ms", pulled.ms + er.image_pull_ms);
	lbd_gen_key(g, "sandbox");
	gen_sandbox_full(d, g, &row);
	yajl_gen_map_close(g);
	lbd_gen_finish(g, res, er.created ? 201 : 200);
}

void lbd_do_sandbox_delete(struct lbd *d, struct lbp_msg *m, struct lbd_res *res)
{
	const char *name = m->u.name.name;
	struct lbd_sandbox *sb = lbd_sandbox_acquire(d, name);
	if (!sb) {
		lbd_res_error(res, 500, "internal", "Out of memory.");
		return;
	}
	struct lbd_fail f = { 0 };
	int r = lbd_sandbox_delete(d, sb, &f);
	lbd_sandbox_release(d, sb);
	if (r < 0) {
		lbd_res_fail(res, &f);
		return;
	}
	yajl_gen g = lbd_gen_new();
	yajl_gen_map_open(g);
	lbd_gen_bool(g, "deleted", true);
	yajl_gen_map_close(g);
	lbd_gen_finish(g, res, 200);
}

void lbd_do_sandbox_stop(struct lbd *d, struct lbp_msg *m, struct lbd_res *res)
{
	const char *name = m->u.name.name;
	struct lbd_sandbox *sb = lbd_sandbox_acquire(d, name);
	if (!sb) {
		lbd_res_error(res, 500, "internal", "Out of memory.");
		return;
	}
	struct lbd_fail f = { 0 };
	bool was = false;
	int r = lbd_sandbox_stop(d, sb, &was, &f);
	lbd_sandbox_release(d, sb);
	if (r < 0) {
		lbd_res_fail(res, &f);
		return;
	}
	yajl_gen g = lbd_gen_new();
	yajl_gen_map_open(g);
	lbd_gen_bool(g, "stopped", was);
	yajl_gen_map_close(g);
	lbd_gen_finish(g, res, 200);
}

/*
 * ask_sandboxes.c — GET /v1/sandboxes, GET/PUT/DELETE /v1/sandboxes/{name}, POST /v1/sandboxes/{name}/stop: the
 * request checked and sent to the core as LBP_SANDBOX_* (core/do_sandboxes.c answers).
 *
 * Runs in the API process (api_user, confined) on connection threads. routes.c validated the name; PUT's body is
 * parsed and range-checked here (parse.c) and only the fields the client gave are sent.
 */
#include <stdio.h>

#include "api.h"
#include "lb/cleanup.h"

void lbd_ask_sandbox_list(struct lbd_req *req, struct lbd_res *res)
{
	priv_call(req, LBP_SANDBOX_LIST, NULL, 0, -1, res);
}

/* A request whose only argument is the route's sandbox name. */
static void ask_by_name(struct lbd_req *req, uint16_t type, struct lbd_res *res)
{
	struct lbp_name n = { 0 };
	snprintf(n.name, sizeof(n.name), "%s", req->name);
	priv_call(req, type, &n, sizeof(n), -1, res);
}

void lbd_ask_sandbox_get(struct lbd_req *req, struct lbd_res *res)
{
	ask_by_name(req, LBP_SANDBOX_GET, res);
}

void lbd_ask_sandbox_delete(struct lbd_req *req, struct lbd_res *res)
{
	ask_by_name(req, LBP_SANDBOX_DELETE, res);
}

void lbd_ask_sandbox_stop(struct lbd_req *req, struct lbd_res *res)
{
	if (req->body_len) {
		lbd_res_error(res, 400, "unexpected_body", "Stopping takes no request body.");
		return;
	}
	ask_by_name(req, LBP_SANDBOX_STOP, res);
}

void lbd_ask_sandbox_put(struct lbd_req *req, struct lbd_res *res)
{
	static const struct lbd_jfield any[] = {
		{ "image", LBD_J_STRING },   { "network", LBD_J_STRING }, { "cpu", LBD_J_SCALAR },
		{ "memory", LBD_J_SCALAR },  { "disk", LBD_J_SCALAR },	  { "idle_minutes", LBD_J_INT },
		{ "keep_hours", LBD_J_INT },
	};
	struct lbd_fail f = { 0 };
	yajl_val root = NULL;
	if (lbd_json_object(req->body, req->body_len, any, LB_ARRAY_SIZE(any), &root, &f) < 0) {
		lbd_res_fail(res, &f);
		return;
	}
	struct lbd_spec_request spec;
	int r = lbd_json_spec(&req->a->cfg, root, &spec, &f);
	yajl_tree_free(root);
	if (r < 0) {
		lbd_res_fail(res, &f);
		return;
	}
	struct lbp_sandbox_put put = { 0 };
	snprintf(put.name, sizeof(put.name), "%s", req->name);
	lbd_spec_to_wire(&spec, &put.spec);
	priv_call(req, LBP_SANDBOX_PUT, &put, sizeof(put), -1, res);
}

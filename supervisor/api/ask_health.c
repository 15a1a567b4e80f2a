/*
 * ask_health.c — GET /v1/health and GET /metrics: the core answers (LBP_HEALTH, LBP_METRICS); the API process adds
 * to the metrics the counters only it keeps (requests by status, peers refused).
 *
 * Runs in the API process (api_user, confined) on connection threads.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "lb/cleanup.h"

void lbd_ask_health(struct lbd_req *req, struct lbd_res *res)
{
	priv_call(req, LBP_HEALTH, NULL, 0, -1, res);
}

/* Appends to res's inline body (malloc'ed; left unchanged when out of memory). */
static void append(struct lbd_res *res, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void append(struct lbd_res *res, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	char *nb = realloc(res->body, res->len + (size_t)n + 1);
	if (!nb)
		return;
	va_start(ap, fmt);
	vsnprintf(nb + res->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	res->body = nb;
	res->len += (size_t)n;
}

void lbd_ask_metrics(struct lbd_req *req, struct lbd_res *res)
{
	priv_call(req, LBP_METRICS, NULL, 0, -1, res);
	if (res->status != 200 || res->fd >= 0)
		return;
	const struct lbd_api_metrics *m = &req->a->metrics;
	append(res, "# HELP lensbox_api_requests_total API requests answered since the API process started, by "
		    "status.\n# TYPE lensbox_api_requests_total counter\n");
	for (int st = 100; st < 600; st++) {
		uint64_t v = atomic_load(&m->requests_by_status[st]);
		if (v)
			append(res, "lensbox_api_requests_total{status=\"%d\"} %llu\n", st, (unsigned long long)v);
	}
	append(res, "# HELP lensbox_api_refused_total Requests from peers not in allowed_uids/allowed_gids.\n"
		    "# TYPE lensbox_api_refused_total counter\n");
	append(res, "lensbox_api_refused_total %llu\n", (unsigned long long)atomic_load(&m->connections_refused));
}

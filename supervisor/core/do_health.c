/*
 * do_health.c — the core's side of GET /v1/health and GET /metrics (LBP_HEALTH, LBP_METRICS). The API process adds
 * its own request counters to the metrics.
 *
 * Runs in the core (root) on channel threads; reads only (host facts measured at start, the store's counts,
 * atomic counters), never waits for a sandbox's turn, so it answers at once even while every sandbox is busy.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "arrivals.h"
#include "core.h"
#include "lb/netfilter.h"

/* Which kinds of refusal a run's result can count on this host, and why not for the others (asked now: an admin may
 * turn the kernel's audit on or off at any time). */
static void gen_refusals(yajl_gen g, struct lbd *d)
{
	struct lb_refusal_support rs;
	lb_refusal_support(d->policy, &rs);
	lbd_gen_key(g, "refusals");
	yajl_gen_map_open(g);
	lbd_gen_bool(g, "filesystem", rs.filesystem_why_not == NULL);
	lbd_gen_str(g, "filesystem_why_not", rs.filesystem_why_not);
	lbd_gen_bool(g, "syscall", rs.syscall_why_not == NULL);
	lbd_gen_str(g, "syscall_why_not", rs.syscall_why_not);
	lbd_gen_bool(g, "network", true);
	yajl_gen_map_close(g);
}

void lbd_do_health(struct lbd *d, struct lbp_msg *m, struct lbd_res *res)
{
	(void)m;
	struct lb_store_counts c = { 0 };
	struct lb_error err = { 0 };
	bool store_ok = lb_store_counts(d->store, &c, &err) == 0;
	uint64_t running = 0, in_flight = 0;
	lbd_sandboxes_counts(d, &running, &in_flight);
	const char *why = lbd_cannot_run(d);

	yajl_gen g = lbd_gen_new();
	yajl_gen_map_open(g);
	lbd_gen_str(g, "version", LENSBOX_VERSION);
	lbd_gen_bool(g, "can_run", why == NULL && store_ok);
	if (!store_ok)
		lbd_gen_str(g, "why_not", err.msg);
	else
		lbd_gen_str(g, "why_not", why);
	lbd_gen_key(g, "host");
	yajl_gen_map_open(g);
	lbd_gen_str(g, "kernel", d->host.kernel);
	lbd_gen_int(g, "landlock_abi", d->host.landlock_abi);
	lbd_gen_str(g, "cgroup",
		    d->host.cgroup == LB_CGROUP_V2   ? "v2"
		    : d->host.cgroup == LB_CGROUP_V1 ? "v1"
						     : "none");
	lbd_gen_bool(g, "cgroup_v2_mounted", d->host.cgroup_v2_mounted);
	lbd_gen_bool(g, "seccomp", d->host.seccomp);
	struct lb_net_health nh = { 0 };
	if (d->net)
		lb_net_health(d->net, &nh);
	lbd_gen_bool(g, "nftables", nh.table_loaded);
	lbd_gen_bool(g, "user_namespaces", d->host.user_namespaces);
	lbd_gen_bool(g, "loop_devices", d->host.loop_devices);
	yajl_gen_map_close(g);
	/* Whether the default image is imported: without it, runs that name no image get 503 image_unavailable. */
	struct lbd_image img;
	struct lb_error ierr = { 0 };
	bool have_image = lbd_image_resolve(d, d->cfg.default_image, &img, &ierr) == 0;
	lbd_gen_key(g, "default_image");
	yajl_gen_map_open(g);
	lbd_gen_str(g, "name", d->cfg.default_image);
	lbd_gen_bool(g, "available", have_image);
	lbd_gen_str(g, "digest", have_image ? img.digest : NULL);
	lbd_gen_str(g, "why_not", have_image ? NULL : ierr.msg);
	yajl_gen_map_close(g);
	if (have_image)
		lbd_image_release(&img);
	gen_refusals(g, d);
	lbd_gen_key(g, "network");
	yajl_gen_map_open(g);
	lbd_gen_bool(g, "tiers_available", d->net != NULL);
	lbd_gen_str(g, "why_not", d->net ? NULL : d->net_error);
	if (d->net) {
		lbd_gen_bool(g, "ip_forward", nh.ip_forward);
		lbd_gen_str(g, "blocking_forward_chain", nh.foreign_forward_drop ? nh.foreign_forward : NULL);
		lbd_gen_str(g, "blocking_input_chain", nh.foreign_input_drop ? nh.foreign_input : NULL);
		lbd_gen_str(g, "dns_upstream", nh.dns_upstream);
		lbd_gen_bool(g, "flow_offload", nh.flow_offload);
		lbd_gen_str(g, "flow_offload_why_not", nh.flow_offload ? NULL : nh.flow_offload_why);
		lbd_gen_bool(g, "ipv6", nh.ipv6);
		lbd_gen_str(g, "ipv6_why_not", nh.ipv6 ? NULL : nh.ipv6_why);
		lbd_gen_uint(g, "attached", nh.sandboxes);
		/* The resolver and relay: unprivileged processes of their own (services_uid) or lensboxd's threads. */
		lbd_gen_key(g, "services");
		yajl_gen_map_open(g);
		lbd_gen_bool(g, "isolated", nh.services_isolated);
		lbd_gen_bool(g, "alive", nh.services_alive);
		lbd_gen_bool(g, "supervised", nh.services_supervised);
		lbd_gen_int(g, "landlock_abi", nh.services_landlock_abi);
		lbd_gen_uint(g, "restarts", nh.services_restarts);
		lbd_gen_uint(g, "supervisor_restarts", nh.services_supervisor_restarts);
		lbd_gen_bool(g, "crash_loop", nh.services_crash_loop);
		yajl_gen_map_close(g);
	}
	yajl_gen_map_close(g);
	lbd_gen_key(g, "sandboxes");
	yajl_gen_map_open(g);
	lbd_gen_uint(g, "running", running);
	lbd_gen_uint(g, "stopped", c.sandboxes_running + c.sandboxes_stopped - running);
	lbd_gen_uint(g, "max_running", d->cfg.max_running);
	yajl_gen_map_close(g);
	uint32_t spares_ready = 0, spares_target = 0;
	lbd_spares_counts(d, &spares_ready, &spares_target);
	lbd_gen_key(g, "spares");
	yajl_gen_map_open(g);
	lbd_gen_uint(g, "ready", spares_ready);
	lbd_gen_uint(g, "target", spares_target);
	lbd_gen_uint(g, "max", lbd_arrivals_spares(UINT32_MAX, d->cfg.spare_sandboxes, d->cfg.spare_sandboxes_max));
	yajl_gen_map_close(g);
	struct lbd_ready_counts rc;
	lbd_ready_counts(d, &rc);
	lbd_gen_key(g, "ready_storages");
	yajl_gen_map_open(g);
	lbd_gen_uint(g, "ready", rc.storages);
	lbd_gen_uint(g, "target", rc.storages_target);
	yajl_gen_map_close(g);
	lbd_gen_key(g, "ready_starts");
	yajl_gen_map_open(g);
	lbd_gen_uint(g, "target", rc.starts_target);
	lbd_gen_uint(g, "network_namespaces", rc.netns);
	/* null: cgroup v2 (no cgroup can be renamed), or making a set failed (logged): starts make their own */
	if (rc.cgroups_made)
		lbd_gen_uint(g, "cgroups", rc.cgroups);
	else
		lbd_gen_null(g, "cgroups");
	yajl_gen_map_close(g);
	lbd_gen_uint(g, "runs_in_flight", in_flight);
	lbd_gen_key(g, "api_process");
	yajl_gen_map_open(g);
	lbd_gen_uint(g, "restarts", atomic_load(&d->metrics.api_restarts));
	lbd_gen_uint(g, "messages_refused", atomic_load(&d->metrics.messages_refused));
	yajl_gen_map_close(g);
	lbd_gen_uint(g, "uptime_seconds", (uint64_t)(lbd_now_ms() - d->started_at_ms) / 1000);
	yajl_gen_map_close(g);
	lbd_gen_finish(g, res, 200);
}

/* ---- /metrics ---- */

struct sbuf {
	char *buf;
	size_t len, cap;
};

static void sb_printf(struct sbuf *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(struct sbuf *s, const char *fmt, ...)
{
	for (;;) {
		va_list ap;
		va_start(ap, fmt);
		int n = vsnprintf(s->buf ? s->buf + s->len : NULL, s->buf ? s->cap - s->len : 0, fmt, ap);
		va_end(ap);
		if (n < 0)
			return;
		if (s->buf && s->len + (size_t)n < s->cap) {
			s->len += (size_t)n;
			return;
		}
		size_t cap = s->cap ? s->cap * 2 : 8192;
		while (cap < s->len + (size_t)n + 1)
			cap *= 2;
		char *nb = realloc(s->buf, cap);
		if (!nb)
			abort(); /* out of memory while answering: nothing sensible is left */
		s->buf = nb;
		s->cap = cap;
	}
}

void lbd_do_metrics(struct lbd *d, struct lbp_msg *m, struct lbd_res *res)
{
	(void)m;
	struct lb_store_counts c = { 0 };
	struct lb_error err = { 0 };
	if (lb_store_counts(d->store, &c, &err) < 0) {
		lbd_res_error(res, 500, "internal", "Reading the counts failed: %s", err.msg);
		return;
	}
	uint64_t running = 0, in_flight = 0;
	lbd_sandboxes_counts(d, &running, &in_flight);
	uint64_t total = c.sandboxes_running + c.sandboxes_stopped;
	struct sbuf s = { 0 };
	sb_printf(&s, "# HELP lensbox_sandboxes Sandboxes by state.\n# TYPE lensbox_sandboxes gauge\n");
	sb_printf(&s, "lensbox_sandboxes{state=\"running\"} %llu\n", (unsigned long long)running);
	sb_printf(&s, "lensbox_sandboxes{state=\"stopped\"} %llu\n", (unsigned long long)(total - running));
	uint32_t spares_ready = 0, spares_target = 0;
	lbd_spares_counts(d, &spares_ready, &spares_target);
	sb_printf(&s,
		  "# HELP lensbox_spare_sandboxes Sandboxes started ahead of time, ready for a new conversation.\n"
		  "# TYPE lensbox_spare_sandboxes gauge\nlensbox_spare_sandboxes %u\n",
		  spares_ready);
	sb_printf(&s, "# HELP lensbox_runs_total Runs by language and outcome.\n# TYPE lensbox_runs_total counter\n");
	for (int l = 0; l < LB_LANGUAGE_COUNT; l++)
		for (int o = 0; o < LB_RUN_OUTCOME_COUNT; o++)
			sb_printf(&s, "lensbox_runs_total{language=\"%s\",outcome=\"%s\"} %llu\n",
				  lb_language_name((enum lb_language)l), lb_run_outcome_name((enum lb_run_outcome)o),
				  (unsigned long long)c.runs[l][o]);
	sb_printf(&s, "# HELP lensbox_run_duration_seconds How long runs took.\n"
		      "# TYPE lensbox_run_duration_seconds histogram\n");
	uint64_t cum = 0;
	for (int i = 0; i < LB_STORE_DURATION_BUCKETS; i++) {
		cum += c.duration_buckets[i];
		if (i < LB_STORE_DURATION_BUCKETS - 1)
			sb_printf(&s, "lensbox_run_duration_seconds_bucket{le=\"%g\"} %llu\n",
				  (double)lb_store_duration_bounds_ms[i] / 1000.0, (unsigned long long)cum);
		else
			sb_printf(&s, "lensbox_run_duration_seconds_bucket{le=\"+Inf\"} %llu\n",
				  (unsigned long long)cum);
	}
	sb_printf(&s, "lensbox_run_duration_seconds_sum %g\n", (double)c.duration_sum_ms / 1000.0);
	sb_printf(&s, "lensbox_run_duration_seconds_count %llu\n", (unsigned long long)c.runs_total);
	sb_printf(
	    &s, "# HELP lensbox_oom_kills_total Runs the kernel OOM-killed.\n# TYPE lensbox_oom_kills_total counter\n");
	sb_printf(&s, "lensbox_oom_kills_total %llu\n", (unsigned long long)c.oom_kills);
	sb_printf(&s, "# HELP lensbox_timeouts_total Runs killed at their time limit.\n"
		      "# TYPE lensbox_timeouts_total counter\n");
	sb_printf(&s, "lensbox_timeouts_total %llu\n", (unsigned long long)c.timeouts);
	sb_printf(&s, "# HELP lensbox_runs_in_flight Runs in progress.\n# TYPE lensbox_runs_in_flight gauge\n");
	sb_printf(&s, "lensbox_runs_in_flight %llu\n", (unsigned long long)in_flight);
	sb_printf(&s, "# HELP lensbox_sandbox_events_total Lifecycle events since lensboxd started.\n"
		      "# TYPE lensbox_sandbox_events_total counter\n");
	sb_printf(&s, "lensbox_sandbox_events_total{event=\"idle_stop\"} %llu\n",
		  (unsigned long long)atomic_load(&d->metrics.idle_stops));
	sb_printf(&s, "lensbox_sandbox_events_total{event=\"keep_delete\"} %llu\n",
		  (unsigned long long)atomic_load(&d->metrics.keep_deletions));
	sb_printf(&s, "lensbox_sandbox_events_total{event=\"eviction\"} %llu\n",
		  (unsigned long long)atomic_load(&d->metrics.evictions));
	sb_printf(&s, "lensbox_sandbox_events_total{event=\"recreate\"} %llu\n",
		  (unsigned long long)atomic_load(&d->metrics.recreations));
	sb_printf(&s, "# HELP lensbox_core_messages_refused_total Malformed messages the core refused from the API "
		      "process.\n# TYPE lensbox_core_messages_refused_total counter\n");
	sb_printf(&s, "lensbox_core_messages_refused_total %llu\n",
		  (unsigned long long)atomic_load(&d->metrics.messages_refused));
	sb_printf(&s, "# HELP lensbox_api_process_restarts_total API processes replaced after they ended.\n"
		      "# TYPE lensbox_api_process_restarts_total counter\n");
	sb_printf(&s, "lensbox_api_process_restarts_total %llu\n",
		  (unsigned long long)atomic_load(&d->metrics.api_restarts));
	free(res->body);
	res->body = s.buf;
	res->len = s.len;
	res->status = 200;
	res->content_type = "text/plain; version=0.0.4";
}

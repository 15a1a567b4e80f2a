/*
 * network.c — lensboxd's use of netfilter/: starting it, and why a tier is unavailable.
 *
 * Runs in lensboxd (root) in the host's network namespace, at start-up and shutdown (single-threaded then). The
 * per-sandbox work (attach after start, detach before stop, blocked-packet counters around a run) is done where
 * the sandbox's turn is held, in sandboxes.c and api_runs.c; netfilter/ serialises its own state. The timer thread
 * calls lbd_network_verify() every LBD_NETWORK_VERIFY_MS, so a flushed ruleset is put back within seconds; net_mu keeps
 * that repair from running in the middle of an attach or detach (it would reload a dying sandbox's rules). The same
 * call notices (and logs) a replaced or lost resolver/relay process.
 */
#include <stdio.h>
#include <string.h>

#include "lb/log.h"
#include "lb/netfilter.h"
#include "core.h"

void lbd_network_start(struct lbd *d)
{
	pthread_mutex_init(&d->net_mu, NULL);
	if (!d->cfg.networking) {
		snprintf(d->net_error, sizeof(d->net_error),
			 "networking is off in lensboxd's configuration (networking = off)");
		return;
	}
	if (!d->policy) {
		snprintf(d->net_error, sizeof(d->net_error), "the policy did not load");
		return;
	}
	struct lb_net_config nc = {
		.policy_dir = d->cfg.policy_dir,
		.pool = d->cfg.network_pool,
		.pool6 = d->cfg.network_pool6,
		.dns_upstream = d->cfg.dns_upstream[0] ? d->cfg.dns_upstream : NULL,
		.services_uid = d->cfg.services_uid,
		.dns_per_sandbox = d->cfg.dns_per_sandbox,
		.relay_per_sandbox = d->cfg.relay_per_sandbox,
		.warm_slots = d->cfg.network_warm_slots,
	};
	struct lb_error err = { 0 };
	if (lb_net_init(&nc, &d->net, &err) < 0) {
		snprintf(d->net_error, sizeof(d->net_error), "the network tiers could not start: %s", err.msg);
		lb_error(NULL, "%s", d->net_error);
		d->net = NULL;
		return;
	}
	/* No sandbox survives a restart (reconciliation stopped them all), so every veth and rule left is stale. */
	unsigned removed = 0;
	if (lb_net_reconcile(d->net, NULL, 0, &removed, &err) < 0)
		lb_warn(NULL, "removing stale sandbox networks: %s", err.msg);
	struct lb_net_health nh = { 0 };
	lb_net_health(d->net, &nh);
	char f[640];
	snprintf(f, sizeof(f), "removed=%u flow_offload=%d%s%s%s ipv6=%d%s%s%s", removed, nh.flow_offload,
		 nh.flow_offload ? "" : " why=\"", nh.flow_offload ? "" : nh.flow_offload_why,
		 nh.flow_offload ? "" : "\"", nh.ipv6, nh.ipv6 ? "" : " ipv6_why=\"", nh.ipv6 ? "" : nh.ipv6_why,
		 nh.ipv6 ? "" : "\"");
	lb_info(f, "network tiers ready");
}

void lbd_network_stop(struct lbd *d)
{
	lb_net_free(d->net);
	d->net = NULL;
}

int lbd_network_attach(struct lbd *d, const char *name, int netns_fd, enum lb_tier tier, struct lb_error *err)
{
	pthread_mutex_lock(&d->net_mu);
	int r = lb_net_attach(d->net, name, netns_fd, tier, NULL, err);
	pthread_mutex_unlock(&d->net_mu);
	return r;
}

int lbd_network_detach(struct lbd *d, const char *name, struct lb_error *err)
{
	pthread_mutex_lock(&d->net_mu);
	int r = lb_net_detach(d->net, name, err);
	pthread_mutex_unlock(&d->net_mu);
	return r;
}

/* The resolver's and relay's processes (when isolated): each replaced worker or supervisor is worth a warning, a
 * crash loop (replacements 5 s apart) an error when it starts and a note when it ends, a gone keeper (DNS and the
 * relay refused until lensboxd restarts) an error, logged once. */
static void check_services(struct lbd *d)
{
	struct lb_net_health h = { 0 };
	lb_net_services_health(d->net, &h);
	if (!h.services_isolated)
		return;
	if (h.services_restarts != d->net_services_restarts ||
	    h.services_supervisor_restarts != d->net_services_sup_restarts) {
		char f[128];
		snprintf(f, sizeof(f), "restarts=%u supervisor_restarts=%u worker=%u", h.services_restarts,
			 h.services_supervisor_restarts, h.services_worker_pid);
		lb_warn(f,
			"the resolver and relay's %s process ended and was replaced (a crash, or it was killed); "
			"queries and connections sent meanwhile waited for the new one",
			h.services_supervisor_restarts != d->net_services_sup_restarts ? "supervisor" : "worker");
		d->net_services_restarts = h.services_restarts;
		d->net_services_sup_restarts = h.services_supervisor_restarts;
	}
	if (h.services_crash_loop != d->net_services_looping) {
		char f[96];
		snprintf(f, sizeof(f), "crash_loop=%d restarts=%u supervisor_restarts=%u", h.services_crash_loop,
			 h.services_restarts, h.services_supervisor_restarts);
		if (h.services_crash_loop)
			lb_error(f, "the resolver and relay keep dying within 1 s of starting: each is now replaced "
				    "only 5 s after the last, and DNS and the relay are mostly refused meanwhile");
		else
			lb_info(f, "the resolver and relay's crash loop ended: one served 10 s");
		d->net_services_looping = h.services_crash_loop;
	}
	if (!h.services_supervised && !d->net_services_down_logged) {
		char f[32];
		snprintf(f, sizeof(f), "keeper=%u", h.services_keeper_pid);
		lb_error(f, "the resolver and relay's keeper process is gone: DNS and the packages relay are "
			    "refused until lensboxd restarts");
		d->net_services_down_logged = true;
	}
}

void lbd_network_verify(struct lbd *d)
{
	if (!d->net)
		return;
	check_services(d);
	unsigned repaired = 0, added = 0;
	struct lb_error err = { 0 }, uerr = { 0 };
	pthread_mutex_lock(&d->net_mu);
	/* The default route moved to another interface (a second link, a VPN that came back): web's replies arrive
	 * there, so it needs forwarding (and the fast path) as the first uplink got at start. */
	int ur = lb_net_follow_uplinks(d->net, &added, &uerr);
	int r = lb_net_verify(d->net, &repaired, &err);
	pthread_mutex_unlock(&d->net_mu);
	/* Logged when the failure starts or changes, not every 2 s while it lasts. */
	if (ur < 0 && strcmp(uerr.msg, d->net_uplink_error) != 0)
		lb_error(NULL,
			 "following the default route to a new uplink failed (web sandboxes may not reach out "
			 "through it): %s",
			 uerr.msg);
	snprintf(d->net_uplink_error, sizeof(d->net_uplink_error), "%s", ur < 0 ? uerr.msg : "");
	if (added > 0) {
		struct lb_net_health h = { 0 };
		lb_net_health(d->net, &h);
		char f[300];
		snprintf(f, sizeof(f), "uplinks=\"%s\"", h.uplinks);
		lb_info(f, "a new uplink carries the default route: forwarding turned on for it");
	}
	if (r < 0) {
		lb_error(NULL, "verifying lensbox's nftables table failed (affected sandboxes stay offline): %s",
			 err.msg);
		return;
	}
	if (repaired > 0) {
		char f[64];
		snprintf(f, sizeof(f), "repaired=%u", repaired);
		lb_warn(f, "nftables table restored: lensbox's table or a sandbox's rules had been removed (a ruleset "
			   "flush or a firewall reload); the affected sandboxes' links were down until now");
	}
}

const char *lbd_network_unavailable(const struct lbd *d, enum lb_tier network)
{
	if (network == LB_TIER_OFF || d->net)
		return NULL;
	return d->net_error;
}

/*
 * doctor_net.c — `lensbox doctor`'s network checks: whether nftables takes a table with the pieces the `packages`
 * and `web` tiers' templates use (the .nft files of policy/network: interval sets, conntrack state, fib, socket owner
 * uid, reject, counters, nat with dnat and masquerade, hooks input/forward/output/prerouting/postrouting), whether the
 * kernel has flowtables (policy/network/offload.nft, optional), whether a veth pair can be made, and whether `web`
 * sandboxes get IPv6 here (as lensboxd decides it in netfilter/src/net.c: the pool on, per-interface forwarding or
 * all.forwarding, an IPv6 default route; read from /proc under the doctor's root, so it can be simulated).
 *
 * Runs in the CLI process; the probes run in a child inside a throwaway network namespace (lbc_in_throwaway_netns,
 * as `lensbox policy check` loads its templates), so the host's tables and links are never touched. The child
 * writes one line per probe: "<name> ok" or "<name> <the kernel's or nftables' reason>".
 */
#include <errno.h>
#include <fcntl.h>
#include <netlink/netlink.h>
#include <netlink/route/link/veth.h>
#include <nftables/libnftables.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "doctor.h"
#include "policy.h"
#include "lb/cleanup.h"
#include "lb/fileio.h"

static const char probe_tiers[] =
    "add table inet lbdoctor\n"
    "add set inet lbdoctor denied { type ipv4_addr; flags interval; }\n"
    "add chain inet lbdoctor c_fwd { type filter hook forward priority 0; policy accept; }\n"
    "add chain inet lbdoctor c_in { type filter hook input priority 0; policy accept; }\n"
    "add chain inet lbdoctor c_out { type filter hook output priority 0; policy accept; }\n"
    "add chain inet lbdoctor c_pre { type nat hook prerouting priority -100; }\n"
    "add chain inet lbdoctor c_post { type nat hook postrouting priority 100; }\n"
    "add rule inet lbdoctor c_fwd ct state established,related counter accept\n"
    "add rule inet lbdoctor c_fwd iifname \"lbh0\" ip daddr @denied counter reject with icmp type admin-prohibited\n"
    "add rule inet lbdoctor c_fwd fib daddr type local counter drop\n"
    "add rule inet lbdoctor c_in meta skuid 999999999 tcp dport 53 reject with tcp reset\n"
    "add rule inet lbdoctor c_out meta skuid 999999999 counter accept\n"
    "add rule inet lbdoctor c_pre iifname \"lbh0\" udp dport 53 dnat ip to 10.231.0.1:5353\n"
    "add rule inet lbdoctor c_post oifname \"eth0\" masquerade\n";

static const char probe_flowtable[] = "add table inet lbdoctor\n"
				      "add flowtable inet lbdoctor fastpath { hook ingress priority filter; devices = "
				      "{ \"lo\" }; }\n";

static void nft_ctx_freep(struct nft_ctx **c)
{
	if (*c)
		nft_ctx_free(*c);
}

/* Loads text into a fresh nftables context; writes "<name> ok" or "<name> <first error line>" to out_fd. */
static void nft_probe_here(int out_fd, const char *name, const char *text)
{
	__attribute__((cleanup(nft_ctx_freep))) struct nft_ctx *nft = nft_ctx_new(NFT_CTX_DEFAULT);
	if (!nft) {
		dprintf(out_fd, "%s cannot make an nftables context\n", name);
		return;
	}
	nft_ctx_buffer_output(nft);
	nft_ctx_buffer_error(nft);
	if (nft_run_cmd_from_buffer(nft, text) == 0) {
		dprintf(out_fd, "%s ok\n", name);
		nft_run_cmd_from_buffer(nft, "delete table inet lbdoctor\n");
		return;
	}
	const char *e = nft_ctx_get_error_buffer(nft);
	size_t n = e ? strcspn(e, "\n") : 0;
	dprintf(out_fd, "%s %.*s\n", name, (int)(n > 300 ? 300 : n), n ? e : "nftables refused the table");
}

/* libnftables exit()s when it cannot open its netlink socket (mnl.c): each probe runs in a child of its own, whose
 * death is then the answer. */
static void nft_probe(int out_fd, const char *name, const char *text)
{
	pid_t pid = fork();
	if (pid < 0) {
		dprintf(out_fd, "%s cannot fork: %s\n", name, strerror(errno));
		return;
	}
	if (pid == 0) {
		nft_probe_here(out_fd, name, text);
		_exit(0);
	}
	int status = 0;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		dprintf(out_fd, "%s libnftables gave up (%s %d): it found no netlink socket for nf_tables\n", name,
			WIFEXITED(status) ? "exit status" : "signal",
			WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
}

static void nl_sock_freep(struct nl_sock **s)
{
	if (*s)
		nl_socket_free(*s);
}

static void veth_probe(int out_fd)
{
	__attribute__((cleanup(nl_sock_freep))) struct nl_sock *sk = nl_socket_alloc();
	int r = sk ? nl_connect(sk, NETLINK_ROUTE) : -NLE_NOMEM;
	if (r == 0)
		r = rtnl_link_veth_add(sk, "lbdoctor0", "lbdoctor1", getpid());
	if (r == 0)
		dprintf(out_fd, "veth ok\n");
	else
		dprintf(out_fd, "veth %s\n", nl_geterror(r));
}

static int probe_job(void *data, int out_fd)
{
	(void)data;
	nft_probe(out_fd, "nftables", probe_tiers);
	nft_probe(out_fd, "flowtable", probe_flowtable);
	veth_probe(out_fd);
	return 0;
}

/* The reason after "<name> " in the worker's output, NULL when the line is missing; "ok" when it passed. */
static const char *probe_line(char *out, const char *name, char *buf, size_t size)
{
	size_t nl = strlen(name);
	for (char *line = out; line && *line;) {
		char *next = strchr(line, '\n');
		size_t len = next ? (size_t)(next - line) : strlen(line);
		if (len > nl && strncmp(line, name, nl) == 0 && line[nl] == ' ') {
			snprintf(buf, size, "%.*s", (int)(len - nl - 1), line + nl + 1);
			return buf;
		}
		line = next ? next + 1 : NULL;
	}
	return NULL;
}

/* Whether /proc/net/ipv6_route (under the doctor's root) holds a usable default route: destination ::/0, not a
 * reject route, on a device other than lo. */
static bool has_ipv6_default_route(const struct lbc_doctor *d)
{
	char path[512];
	lbc_doc_path(d, "/proc/net/ipv6_route", path, sizeof(path));
	_cleanup_free_ char *text = NULL;
	if (lb_read_file_at(AT_FDCWD, path, 1 << 20, &text, NULL) < 0)
		return false;
	char *save = NULL;
	for (char *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
		char dst[33], dev[32];
		unsigned plen, flags;
		if (sscanf(l, "%32s %x %*s %*s %*s %*s %*s %*s %x %31s", dst, &plen, &flags, dev) != 4)
			continue;
		if (plen == 0 && strspn(dst, "0") == 32 && !(flags & 0x0200u) && strcmp(dev, "lo") != 0)
			return true; /* 0x0200: RTF_REJECT */
	}
	return false;
}

static void ipv6_check(struct lbc_doctor *d)
{
	char path[512];
	if (strcmp(d->cfg.network_pool6, "off") == 0) {
		lbc_doc_add(d, "ipv6", LBC_DOC_OK, NULL, NULL, "turned off (network_pool6 = off): web is IPv4 only");
		return;
	}
	lbc_doc_path(d, "/proc/sys/net/ipv6", path, sizeof(path));
	if (access(path, F_OK) != 0) {
		lbc_doc_add(d, "ipv6", LBC_DOC_OK, NULL, NULL, "this kernel has no IPv6: web is IPv4 only");
		return;
	}
	lbc_doc_path(d, "/proc/sys/net/ipv6/conf/all/force_forwarding", path, sizeof(path));
	bool per_interface = access(path, F_OK) == 0;
	lbc_doc_path(d, "/proc/sys/net/ipv6/conf/all/forwarding", path, sizeof(path));
	_cleanup_free_ char *all = NULL;
	bool all_on = lb_read_file_at(AT_FDCWD, path, 16, &all, NULL) == 0 && all[0] == '1';
	bool route = has_ipv6_default_route(d);
	if (!route) {
		lbc_doc_add(d, "ipv6", LBC_DOC_OK, NULL, NULL,
			    "no IPv6 default route on this host: web sandboxes get IPv4 only (IPv6 from the next "
			    "attach once the host has one)");
	} else if (!per_interface && !all_on) {
		lbc_doc_add(
		    d, "ipv6", LBC_DOC_WARN,
		    "web sandboxes get no IPv6: this kernel (before 6.17) forwards IPv6 only with the host-wide "
		    "net.ipv6.conf.all.forwarding, which lensboxd never turns on (it also makes interfaces "
		    "with accept_ra=1 ignore router advertisements)",
		    "sysctl -w net.ipv6.conf.UPLINK.accept_ra=2 (if the uplink takes router advertisements), "
		    "then sysctl -w net.ipv6.conf.all.forwarding=1, and restart lensboxd",
		    "an IPv6 default route, no per-interface forwarding, all.forwarding = 0: packages "
		    "sandboxes have IPv6, web ones do not");
	} else {
		lbc_doc_add(d, "ipv6", LBC_DOC_OK, NULL, NULL, "web sandboxes get IPv6 (%s)",
			    per_interface ? "force_forwarding on their veths and the uplinks" : "all.forwarding is on");
	}
}

void lbc_doctor_net(struct lbc_doctor *d)
{
	if (!d->cfg.networking) {
		lbc_doc_add(
		    d, "nftables", LBC_DOC_OK, NULL, NULL,
		    "networking = off in the configuration: only network `off` sandboxes run, nothing to check");
		return;
	}
	_cleanup_free_ char *out = NULL;
	size_t len = 0;
	struct lb_error err = { 0 };
	if (lbc_in_throwaway_netns(probe_job, NULL, 1 << 16, &out, &len, &err) < 0) {
		lbc_doc_add(d, "nftables", LBC_DOC_WARN, "the network tiers could not be probed",
			    "run `lensbox doctor` as root", "%s", err.msg);
		return;
	}
	char buf[LBC_DOC_TEXT];
	const char *r = probe_line(out, "nftables", buf, sizeof(buf));
	bool ok = r && strcmp(r, "ok") == 0;
	lbc_doc_add(d, "nftables", ok ? LBC_DOC_OK : LBC_DOC_WARN,
		    "the packages and web tiers are nftables rules: without them only network `off` sandboxes run",
		    "apt install nftables, and a kernel with nf_tables, nft_ct, nft_fib_inet, nft_reject_inet "
		    "and nft_nat (modprobe each)",
		    "%s",
		    ok	? "a table with the tiers' pieces loads (sets, ct, fib, skuid, reject, nat)"
		    : r ? r
			: "no answer from the probe");
	r = probe_line(out, "flowtable", buf, sizeof(buf));
	ok = r && strcmp(r, "ok") == 0;
	lbc_doc_add(d, "flowtables", ok ? LBC_DOC_OK : LBC_DOC_WARN,
		    "without them `web` sandboxes' established connections take the ordinary forward path (slower; "
		    "nothing else changes, lensboxd loads the tiers without offload.nft)",
		    "modprobe nf_flow_table nf_flow_table_inet nft_flow_offload (needs a kernel built with "
		    "CONFIG_NF_FLOW_TABLE)",
		    "%s%s", ok ? "available" : "missing: ",
		    ok	? ""
		    : r ? r
			: "no answer from the probe");
	r = probe_line(out, "veth", buf, sizeof(buf));
	ok = r && strcmp(r, "ok") == 0;
	lbc_doc_add(
	    d, "veth", ok ? LBC_DOC_OK : LBC_DOC_WARN,
	    "a packages or web sandbox reaches the host through a veth pair: without one only network `off` runs",
	    "modprobe veth (a kernel built with CONFIG_VETH)", "%s",
	    ok	? "a veth pair can be made"
	    : r ? r
		: "no answer from the probe");
	ipv6_check(d);
}

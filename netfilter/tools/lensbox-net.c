/*
 * lensbox-net — drives the network library by hand: load lensbox's table, attach and detach sandboxes' networks,
 * read counters. For admins checking a host, and for the network tests and benchmark (which run it inside their
 * sealed test world's "host" namespace, never in the machine's real one unless an admin means to).
 *
 * Runs as root in the network namespace it manages. `serve` keeps the resolver and relay running and reads one
 * command a line on stdin, answering one line on stdout ("ok ..." or "error <message>"):
 *   attach NAME NETNS_PATH TIER     ok HOST_IFNAME ADDRESS GATEWAY ADDRESS6 GATEWAY6   (TIER: off, packages, web;
 *                                   "-" for what the tier has not: IPv6 is web's only)
 *   detach NAME | blocked NAME      ok | ok COUNT
 *   reconcile [KNOWN_NAME...]       ok REMOVED
 *   health                          ok table=.. ip_forward=.. foreign_forward_drop=.. sandboxes=.. ... warm_slots=N
 *                                   offload=0|1 offload_why="..." (the flowtable of offload.nft, and why it is off)
 *   verify                          ok REPAIRED   (reloads what another tool flushed)
 *   uplinks                         ok ADDED      (follows the default route to a new interface)
 *   unload | quit
 * `npm-registry` prints the npm registry host lensboxd would add to packages.list.
 *
 * Built a second time as lensbox-net-sandbox (LB_NET_WITH_RUNNER), it also starts real sandboxes through lb_runner,
 * the way lensboxd does (start, attach the network to the sandbox's netns, exec, detach, stop), for the network
 * tests that prove each tier from inside a real sandbox:
 *   start NAME TIER ROOTFS STORAGE RUN_DIR UID      ok HOST_IFNAME ADDRESS GATEWAY ADDRESS6 GATEWAY6
 *   exec NAME TIMEOUT_S HEX(python source)           ok EXIT SIGNAL HEX(stdout) HEX(stderr)
 *   stop NAME                                        ok
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lb/cleanup.h"
#include "lb/netfilter.h"

static void reply_err(const char *what, const struct lb_error *err)
{
	printf("error %s: %s\n", what, err->msg);
}

#ifdef LB_NET_WITH_RUNNER
#include "lb/policy.h"
#include "lb/runner.h"

#define MAX_SANDBOXES 16

struct running {
	char name[64];
	char storage[512];
	struct lb_sandbox *sb;
};

static struct lb_policy *g_policy; /* parsed once at start; read-only afterwards */
static struct running g_running[MAX_SANDBOXES];

static struct running *find_running(const char *name)
{
	for (size_t i = 0; i < MAX_SANDBOXES; i++)
		if (g_running[i].sb && strcmp(g_running[i].name, name) == 0)
			return &g_running[i];
	return NULL;
}

static int unhex(const char *h, char **ret)
{
	size_t n = strlen(h);
	if (n % 2)
		return -EINVAL;
	char *out = malloc(n / 2 + 1);
	if (!out)
		return -ENOMEM;
	for (size_t i = 0; i < n / 2; i++) {
		unsigned v;
		if (sscanf(h + 2 * i, "%2x", &v) != 1) {
			free(out);
			return -EINVAL;
		}
		out[i] = (char)v;
	}
	out[n / 2] = '\0';
	*ret = out;
	return 0;
}

static void print_hex(const char *buf, size_t len)
{
	if (len == 0)
		fputs("-", stdout);
	for (size_t i = 0; i < len; i++)
		printf("%02x", (unsigned char)buf[i]);
}

static void cmd_start(struct lb_net *ctx, char **w)
{
	struct lb_error err = { 0 };
	struct running *slot = NULL;
	for (size_t i = 0; i < MAX_SANDBOXES && !slot; i++)
		if (!g_running[i].sb)
			slot = &g_running[i];
	if (!slot || find_running(w[1])) {
		printf("error start: no room, or %s is running\n", w[1]);
		return;
	}
	enum lb_tier tier;
	if (lb_tier_parse(w[2], &tier) < 0) {
		printf("error start: unknown tier %s (off, packages, web)\n", w[2]);
		return;
	}
	static const char *const image_env[] = { "PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin",
						 NULL };
	const struct lb_limits_policy *pl = &g_policy->limits;
	struct lb_sandbox_spec spec = { .name = w[1],
					.rootfs = w[3],
					.storage = w[4],
					.run_dir = w[5],
					.host_uid = (uid_t)strtoul(w[6], NULL, 10),
					.host_gid = (gid_t)strtoul(w[6], NULL, 10),
					.limits = { .cpu_millicores = pl->cpu_millicores,
						    .memory_bytes = pl->memory_bytes,
						    .pids = pl->pids,
						    .disk_bytes = pl->disk_bytes,
						    .tmp_bytes = pl->tmp_bytes,
						    .shm_bytes = pl->shm_bytes },
					.network = tier,
					.image_env = image_env,
					.policy = g_policy,
					.resolv_conf = lb_net_resolv_conf(tier) };
	struct lb_sandbox *sb = NULL;
	if (lb_sandbox_start(&spec, &sb, &err) < 0)
		return reply_err("start", &err);
	_cleanup_close_ int fd = lb_sandbox_netns_fd(sb);
	struct lb_net_info info;
	if (fd < 0 || lb_net_attach(ctx, w[1], fd, tier, &info, &err) < 0) {
		struct lb_error e2;
		lb_sandbox_stop(sb, &e2);
		if (fd < 0)
			lb_error_set(&err, fd, "the sandbox's network namespace");
		return reply_err("start", &err);
	}
	slot->sb = sb;
	snprintf(slot->name, sizeof(slot->name), "%s", w[1]);
	snprintf(slot->storage, sizeof(slot->storage), "%s", w[4]);
	printf("ok %s %s %s %s %s\n", info.host_ifname[0] ? info.host_ifname : "-",
	       info.address[0] ? info.address : "-", info.gateway[0] ? info.gateway : "-",
	       info.address6[0] ? info.address6 : "-", info.gateway6[0] ? info.gateway6 : "-");
}

static void cmd_exec(char **w)
{
	struct running *r = find_running(w[1]);
	if (!r) {
		printf("error exec: %s is not running\n", w[1]);
		return;
	}
	_cleanup_free_ char *code = NULL;
	if (unhex(w[3], &code) < 0) {
		printf("error exec: bad hex\n");
		return;
	}
	const char *argv[] = { "python3", "-c", code, NULL };
	struct lb_exec_spec es = { .argv = argv,
				   .timeout_ms = (uint32_t)strtoul(w[2], NULL, 10) * 1000,
				   .stdout_limit = 1 << 20,
				   .stderr_limit = 1 << 16 };
	struct lb_exec_result res = { 0 };
	struct lb_error err = { 0 };
	if (lb_sandbox_exec(r->sb, &es, &res, &err) < 0)
		return reply_err("exec", &err);
	printf("ok %d %d ", res.exit_code, res.signal);
	print_hex(res.stdout_buf, res.stdout_len);
	fputs(" ", stdout);
	print_hex(res.stderr_buf, res.stderr_len);
	fputs("\n", stdout);
	lb_exec_result_free(&res);
}

static void cmd_stop(struct lb_net *ctx, char **w)
{
	struct running *r = find_running(w[1]);
	if (!r) {
		printf("error stop: %s is not running\n", w[1]);
		return;
	}
	struct lb_error err = { 0 };
	int a = lb_net_detach(ctx, w[1], &err);
	if (a < 0 && a != -ENOENT)
		return reply_err("stop", &err);
	int b = lb_sandbox_stop(r->sb, &err);
	r->sb = NULL;
	if (b < 0)
		return reply_err("stop", &err);
	if (lb_sandbox_destroy_storage(r->storage, &err) < 0)
		return reply_err("stop", &err);
	printf("ok\n");
}
#endif

static void usage(void)
{
	fprintf(stderr, "usage: lensbox-net serve --policy DIR [--pool CIDR] [--pool6 CIDR|off] [--dns IP[:PORT]]\n"
			"                         [--resolver-port N]\n"
			"                         [--relay-port N] [--package HOST]... [--npm] [--services-uid UID]\n"
			"                         [--veth-gso-max BYTES] [--no-offload] [--dns-per-sandbox N]\n"
			"                         [--relay-per-sandbox N] [--warm-slots N]\n"
			"       lensbox-net npm-registry\n");
}

static void handle(struct lb_net *ctx, char *line, bool *quit)
{
	char *words[64];
	size_t n = 0;
	for (char *w = strtok(line, " \t\r\n"); w && n < LB_ARRAY_SIZE(words); w = strtok(NULL, " \t\r\n"))
		words[n++] = w;
	if (n == 0)
		return;
	struct lb_error err = { 0 };
	const char *cmd = words[0];
	if (strcmp(cmd, "attach") == 0 && n == 4) {
		_cleanup_close_ int fd = open(words[2], O_RDONLY | O_CLOEXEC);
		if (fd < 0) {
			printf("error opening %s: %s\n", words[2], strerror(errno));
			return;
		}
		struct lb_net_info info;
		enum lb_tier tier;
		if (lb_tier_parse(words[3], &tier) < 0) {
			printf("error attach: unknown tier %s (off, packages, web)\n", words[3]);
			return;
		}
		if (lb_net_attach(ctx, words[1], fd, tier, &info, &err) < 0)
			return reply_err("attach", &err);
		printf("ok %s %s %s %s %s\n", info.host_ifname[0] ? info.host_ifname : "-",
		       info.address[0] ? info.address : "-", info.gateway[0] ? info.gateway : "-",
		       info.address6[0] ? info.address6 : "-", info.gateway6[0] ? info.gateway6 : "-");
	} else if (strcmp(cmd, "detach") == 0 && n == 2) {
		if (lb_net_detach(ctx, words[1], &err) < 0)
			return reply_err("detach", &err);
		printf("ok\n");
	} else if (strcmp(cmd, "blocked") == 0 && n == 2) {
		uint64_t v;
		if (lb_net_blocked(ctx, words[1], &v, &err) < 0)
			return reply_err("blocked", &err);
		printf("ok %" PRIu64 "\n", v);
	} else if (strcmp(cmd, "reconcile") == 0) {
		unsigned removed;
		if (lb_net_reconcile(ctx, (const char *const *)words + 1, n - 1, &removed, &err) < 0)
			return reply_err("reconcile", &err);
		printf("ok %u\n", removed);
	} else if (strcmp(cmd, "verify") == 0 && n == 1) {
		unsigned repaired;
		if (lb_net_verify(ctx, &repaired, &err) < 0)
			return reply_err("verify", &err);
		printf("ok %u\n", repaired);
	} else if (strcmp(cmd, "uplinks") == 0 && n == 1) {
		unsigned added;
		if (lb_net_follow_uplinks(ctx, &added, &err) < 0)
			return reply_err("uplinks", &err);
		printf("ok %u\n", added);
	} else if (strcmp(cmd, "health") == 0 && n == 1) {
		struct lb_net_health h;
		lb_net_health(ctx, &h);
		printf("ok table=%d ip_forward=%d foreign_forward_drop=%d sandboxes=%u dns=%s packages=%u "
		       "uplinks=\"%s\" forward=\"%s\" input=\"%s\" npm=\"%s\" services_isolated=%d "
		       "services_alive=%d services_supervised=%d services_pid=%u services_worker_pid=%u "
		       "services_restarts=%u services_landlock_abi=%d services_keeper_pid=%u "
		       "services_supervisor_restarts=%u services_crash_loop=%d warm_slots=%u offload=%d "
		       "offload_why=\"%s\"\n",
		       h.table_loaded, h.ip_forward, h.foreign_forward_drop, h.sandboxes, h.dns_upstream,
		       h.n_package_names, h.uplinks, h.foreign_forward, h.foreign_input, h.npm_registry,
		       h.services_isolated, h.services_alive, h.services_supervised, h.services_pid,
		       h.services_worker_pid, h.services_restarts, h.services_landlock_abi, h.services_keeper_pid,
		       h.services_supervisor_restarts, h.services_crash_loop, h.warm_slots, h.flow_offload,
		       h.flow_offload_why);
	} else if (strcmp(cmd, "unload") == 0 && n == 1) {
		if (lb_net_unload(ctx, &err) < 0)
			return reply_err("unload", &err);
		printf("ok\n");
#ifdef LB_NET_WITH_RUNNER
	} else if (strcmp(cmd, "start") == 0 && n == 7) {
		cmd_start(ctx, words);
	} else if (strcmp(cmd, "exec") == 0 && n == 4) {
		cmd_exec(words);
	} else if (strcmp(cmd, "stop") == 0 && n == 2) {
		cmd_stop(ctx, words);
#endif
	} else if (strcmp(cmd, "quit") == 0) {
		*quit = true;
		printf("ok\n");
	} else {
		printf("error unknown command or wrong number of words\n");
	}
}

int main(int argc, char **argv)
{
	if (argc >= 2 && strcmp(argv[1], "npm-registry") == 0) {
		char host[256];
		int r = lb_net_npm_registry_host(host, sizeof(host));
		if (r < 0) {
			fprintf(stderr, "lensbox-net: no npm registry found: %s\n", strerror(-r));
			return 1;
		}
		printf("%s\n", host);
		return 0;
	}
	if (argc < 2 || strcmp(argv[1], "serve") != 0) {
		usage();
		return 2;
	}
	struct lb_net_config cfg = { 0 };
	const char *extra[33] = { 0 };
	size_t n_extra = 0;
	bool npm = false; /* --npm: ask npm for its registry, as lensboxd does; off by default for quick tests */
	static const struct option opts[] = {
		{ "policy", required_argument, NULL, 'p' },
		{ "pool", required_argument, NULL, 'P' },
		{ "pool6", required_argument, NULL, '6' },
		{ "dns", required_argument, NULL, 'd' },
		{ "resolver-port", required_argument, NULL, 'r' },
		{ "relay-port", required_argument, NULL, 'l' },
		{ "package", required_argument, NULL, 'k' },
		{ "npm", no_argument, NULL, 'n' },
		{ "services-uid", required_argument, NULL, 'u' },
		{ "veth-gso-max", required_argument, NULL, 'g' },
		{ "no-offload", no_argument, NULL, 'o' },
		{ "dns-per-sandbox", required_argument, NULL, 'D' },
		{ "relay-per-sandbox", required_argument, NULL, 'R' },
		{ "warm-slots", required_argument, NULL, 'w' },
		{ 0 },
	};
	int c;
	optind = 2;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'p':
			cfg.policy_dir = optarg;
			break;
		case 'P':
			cfg.pool = optarg;
			break;
		case '6':
			cfg.pool6 = optarg;
			break;
		case 'd':
			cfg.dns_upstream = optarg;
			break;
		case 'r':
			cfg.resolver_port = (uint16_t)strtoul(optarg, NULL, 10);
			break;
		case 'l':
			cfg.relay_port = (uint16_t)strtoul(optarg, NULL, 10);
			break;
		case 'k':
			if (n_extra < 32)
				extra[n_extra++] = optarg;
			break;
		case 'n':
			npm = true;
			break;
		case 'u':
			cfg.services_uid = (uint32_t)strtoul(optarg, NULL, 10);
			break;
		case 'g':
			cfg.veth_gso_max = (uint32_t)strtoul(optarg, NULL, 10);
			break;
		case 'o':
			cfg.no_flow_offload = true;
			break;
		case 'D':
			cfg.dns_per_sandbox = (uint32_t)strtoul(optarg, NULL, 10);
			break;
		case 'R':
			cfg.relay_per_sandbox = (uint32_t)strtoul(optarg, NULL, 10);
			break;
		case 'w':
			cfg.warm_slots = (unsigned)strtoul(optarg, NULL, 10);
			break;
		default:
			usage();
			return 2;
		}
	}
	if (!cfg.policy_dir) {
		usage();
		return 2;
	}
	cfg.extra_package_names = extra;
	cfg.skip_npm_lookup = !npm;
	struct lb_net *ctx = NULL;
	struct lb_error err = { 0 };
#ifdef LB_NET_WITH_RUNNER
	if (lb_policy_load(cfg.policy_dir, &g_policy, &err) < 0) {
		fprintf(stderr, "lensbox-net: loading the policy: %s\n", err.msg);
		return 1;
	}
	signal(SIGPIPE, SIG_IGN);
#endif
	if (lb_net_init(&cfg, &ctx, &err) < 0) {
		fprintf(stderr, "lensbox-net: %s\n", err.msg);
		return 1;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("ready\n");
	static char line[1 << 17]; /* exec carries a hex-encoded program */
	bool quit = false;
	while (!quit && fgets(line, sizeof(line), stdin))
		handle(ctx, line, &quit);
#ifdef LB_NET_WITH_RUNNER
	for (size_t i = 0; i < MAX_SANDBOXES; i++)
		if (g_running[i].sb) {
			char *w[] = { (char *)"stop", g_running[i].name };
			cmd_stop(ctx, w);
		}
	lb_policy_free(g_policy);
#endif
	lb_net_free(ctx);
	return 0;
}

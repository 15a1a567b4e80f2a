/*
 * lensbox-net — drives the network library by hand: load lensbox's table, attach and detach sandboxes' networks,
 * read counters. For admins checking a host, and for the network tests and benchmark (which run it inside their
 * sealed test world's "host" namespace, never in the machine's real one unless an admin means to).
 *
 * Runs as root in the network namespace it manages. `serve` keeps the resolver and relay running and reads one
 * command a line on stdin, answering one line on stdout ("ok ..." or "error <message>"):
 *   attach NAME NETNS_PATH TIER     ok HOST_IFNAME ADDRESS GATEWAY   (TIER: off, packages, web)
 *   detach NAME | blocked NAME      ok | ok COUNT
 *   reconcile [KNOWN_NAME...]       ok REMOVED
 *   health                          ok table=.. ip_forward=.. foreign_forward_drop=.. sandboxes=..
 *   unload | quit
 * `npm-registry` prints the npm registry host lensboxd would add to packages.list.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lb/cleanup.h"
#include "lb/netfilter.h"

static void usage(void)
{
	fprintf(stderr, "usage: lensbox-net serve --policy DIR [--pool CIDR] [--dns IP[:PORT]] [--resolver-port N]\n"
			"                         [--relay-port N] [--package HOST]... [--npm]\n"
			"       lensbox-net npm-registry\n");
}

static void reply_err(const char *what, const struct lb_error *err)
{
	printf("error %s: %s\n", what, err->msg);
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
		if (lb_net_attach(ctx, words[1], fd, words[3], &info, &err) < 0)
			return reply_err("attach", &err);
		printf("ok %s %s %s\n", info.host_ifname[0] ? info.host_ifname : "-",
		       info.address[0] ? info.address : "-", info.gateway[0] ? info.gateway : "-");
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
	} else if (strcmp(cmd, "health") == 0 && n == 1) {
		struct lb_net_health h;
		lb_net_health(ctx, &h);
		printf("ok table=%d ip_forward=%d foreign_forward_drop=%d sandboxes=%u dns=%s packages=%u "
		       "uplinks=\"%s\" forward=\"%s\"\n",
		       h.table_loaded, h.ip_forward, h.foreign_forward_drop, h.sandboxes, h.dns_upstream,
		       h.n_package_names, h.uplinks, h.foreign_forward);
	} else if (strcmp(cmd, "unload") == 0 && n == 1) {
		if (lb_net_unload(ctx, &err) < 0)
			return reply_err("unload", &err);
		printf("ok\n");
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
	char npm_host[256];
	static const struct option opts[] = {
		{ "policy", required_argument, NULL, 'p' },
		{ "pool", required_argument, NULL, 'P' },
		{ "dns", required_argument, NULL, 'd' },
		{ "resolver-port", required_argument, NULL, 'r' },
		{ "relay-port", required_argument, NULL, 'l' },
		{ "package", required_argument, NULL, 'k' },
		{ "npm", no_argument, NULL, 'n' },
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
			if (lb_net_npm_registry_host(npm_host, sizeof(npm_host)) == 0 && n_extra < 32)
				extra[n_extra++] = npm_host;
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
	struct lb_net *ctx = NULL;
	struct lb_error err = { 0 };
	if (lb_net_init(&cfg, &ctx, &err) < 0) {
		fprintf(stderr, "lensbox-net: %s\n", err.msg);
		return 1;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("ready\n");
	char line[4096];
	bool quit = false;
	while (!quit && fgets(line, sizeof(line), stdin))
		handle(ctx, line, &quit);
	lb_net_free(ctx);
	return 0;
}

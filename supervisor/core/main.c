/*
 * main.c — lensboxd's core: configuration, start-up in a safe order, the signal loop and an orderly shutdown.
 *
 * Runs as root (it creates namespaces, cgroups, loop devices and mounts through runner/). Start-up order:
 * config (file, then flags) -> logging -> signals blocked in every thread -> state and run directories (root-only)
 * -> policy and host facts (a failure here does not stop the daemon: /v1/health says why sandboxes cannot run
 * and runs get 503) -> the store -> reconciliation with the kernel (before any request can start a sandbox: what
 * sandboxes, spares and reserved uids left), then uids reserved ahead ->
 * the daemon's own leaf cgroup -> the network tiers (the resolver's and relay's unprivileged processes are forked
 * here, while the daemon is still single-threaded) -> spares -> the API socket and the API process (api_proc.c) ->
 * timers. SIGTERM/SIGINT stop the API process (it lets requests in progress finish), stop every running sandbox (files
 * stay) and close the store. A SIGKILL skips all that; the next start's reconciliation repairs it.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lb/cleanup.h"
#include "lb/fileio.h"
#include "lb/log.h"
#include "core.h"

#ifndef LENSBOX_CONFIG_FILE
#define LENSBOX_CONFIG_FILE "/etc/lensbox/lensboxd.conf" /* the build passes the installed location */
#endif
#define DEFAULT_CONFIG LENSBOX_CONFIG_FILE

static void usage(FILE *out)
{
	fprintf(out, "Usage: lensboxd [options]\n"
		     "  -c, --config FILE      configuration file (default " DEFAULT_CONFIG ")\n"
		     "  -s, --socket PATH      the API socket (config: socket)\n"
		     "      --state-dir DIR    state directory (config: state_dir)\n"
		     "      --run-dir DIR      runtime directory (config: run_dir)\n"
		     "      --policy-dir DIR   policy directory (config: policy_dir)\n"
		     "      --images-dir DIR   unpacked images (config: images_dir)\n"
		     "      --log-level LEVEL  debug, info, warn or error (config: log_level)\n"
		     "  -o, --set KEY=VALUE    any configuration key; flags override the file\n"
		     "      --check-config     print the effective configuration and exit\n"
		     "  -h, --help             this help\n"
		     "  -V, --version          print the version\n"
		     "Every key is documented in docs/configuration.md.\n");
}

struct override {
	char key[64];
	const char *value;
};

/* With systemd's Delegate=yes the service's cgroup v2 subtree is ours to divide, but a cgroup v2 node with processes
 * cannot also have children that get controllers: lensboxd moves itself into the leaf <service>/daemon, in the v2
 * hierarchy wherever it is mounted (/sys/fs/cgroup on a pure v2 host, /sys/fs/cgroup/unified on a hybrid one). It
 * acts only when it was started by its own unit, never on a cgroup someone else gave it. */
static void move_to_leaf_cgroup(void)
{
	_cleanup_free_ char *self = NULL;
	size_t len;
	if (lb_read_file_at(-100, "/proc/self/cgroup", 16384, &self, &len) < 0)
		return;
	char *line = strstr(self, "0::/");
	if (!line || (line != self && line[-1] != '\n'))
		return; /* no v2 hierarchy */
	line += 3;
	line[strcspn(line, "\n")] = '\0';
	size_t plen = strlen(line);
	if (plen < 16 || strcmp(line + plen - 16, "lensboxd.service") != 0)
		return; /* not started by our unit: leave the caller's cgroup alone */
	const char *mount = access("/sys/fs/cgroup/cgroup.controllers", F_OK) == 0	     ? "/sys/fs/cgroup"
			    : access("/sys/fs/cgroup/unified/cgroup.controllers", F_OK) == 0 ? "/sys/fs/cgroup/unified"
											     : NULL;
	if (!mount)
		return;
	char leaf[600];
	snprintf(leaf, sizeof(leaf), "%s%s/daemon", mount, line);
	/* Safe: a child of our own delegated service cgroup. */
	if (mkdir(leaf, 0755) < 0 && errno != EEXIST) {
		lb_warn("cgroup=daemon", "could not create the daemon's leaf cgroup %s: %s", leaf, strerror(errno));
		return;
	}
	char procs[700];
	snprintf(procs, sizeof(procs), "%s/cgroup.procs", leaf);
	if (lb_write_file_at(-100, procs, "0") < 0)
		lb_warn("cgroup=daemon", "could not move lensboxd into %s", leaf);
	else
		lb_info("cgroup=daemon", "lensboxd moved into its leaf cgroup %s", leaf);
}

/* Each relayed connection holds up to six descriptors in the services' worker, each run and sandbox a few here: a
 * default soft limit of 1024 (lensboxd started outside its unit, which sets 65536) would run out under a few busy
 * sandboxes. The soft limit goes up to the hard one, at most 65536, as the unit's LimitNOFILE. The services inherit
 * it. libmicrohttpd polls (MHD_USE_POLL), so descriptors above FD_SETSIZE are fine. */
static void raise_fd_limit(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return;
	rlim_t want = rl.rlim_max < 65536 ? rl.rlim_max : 65536;
	if (rl.rlim_cur >= want)
		return;
	rl.rlim_cur = want;
	if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
		lb_warn(NULL, "raising the open-file limit to %llu: %s", (unsigned long long)want, strerror(errno));
}

/* What the command line asked for: the config file, the keys it overrides, and whether only to print the result. */
struct flags {
	const char *config_path;
	bool config_given, check_only;
	struct override ov[128];
	size_t n_ov;
};

/* Step 1: the flags. -1 to go on; else the exit status (help and version printed, or a bad flag reported). */
static int parse_flags(int argc, char **argv, struct flags *ret)
{
	static const struct option opts[] = {
		{ "config", required_argument, NULL, 'c' },   { "socket", required_argument, NULL, 's' },
		{ "state-dir", required_argument, NULL, 1 },  { "run-dir", required_argument, NULL, 2 },
		{ "policy-dir", required_argument, NULL, 3 }, { "images-dir", required_argument, NULL, 4 },
		{ "log-level", required_argument, NULL, 5 },  { "set", required_argument, NULL, 'o' },
		{ "check-config", no_argument, NULL, 6 },     { "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },	      { NULL, 0, NULL, 0 },
	};
	ret->config_path = DEFAULT_CONFIG;
	ret->config_given = ret->check_only = false;
	ret->n_ov = 0;
	struct override *ov = ret->ov;
	int c;
	while ((c = getopt_long(argc, argv, "c:s:o:hV", opts, NULL)) != -1) {
		const char *key = NULL;
		switch (c) {
		case 'c':
			ret->config_path = optarg;
			ret->config_given = true;
			continue;
		case 's':
			key = "socket";
			break;
		case 1:
			key = "state_dir";
			break;
		case 2:
			key = "run_dir";
			break;
		case 3:
			key = "policy_dir";
			break;
		case 4:
			key = "images_dir";
			break;
		case 5:
			key = "log_level";
			break;
		case 6:
			ret->check_only = true;
			continue;
		case 'o': {
			char *eq = strchr(optarg, '=');
			if (!eq || eq == optarg || (size_t)(eq - optarg) >= sizeof(ov[0].key)) {
				fprintf(stderr, "lensboxd: --set takes KEY=VALUE, not `%s`\n", optarg);
				return 2;
			}
			if (ret->n_ov == LB_ARRAY_SIZE(ret->ov)) {
				fprintf(stderr, "lensboxd: too many --set options\n");
				return 2;
			}
			snprintf(ov[ret->n_ov].key, sizeof(ov[ret->n_ov].key), "%.*s", (int)(eq - optarg), optarg);
			ov[ret->n_ov++].value = eq + 1;
			continue;
		}
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf("lensboxd %s\n", LENSBOX_VERSION);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
		if (ret->n_ov == LB_ARRAY_SIZE(ret->ov))
			return 2;
		snprintf(ov[ret->n_ov].key, sizeof(ov[ret->n_ov].key), "%s", key);
		ov[ret->n_ov++].value = optarg;
	}
	if (optind < argc) {
		fprintf(stderr, "lensboxd: unexpected argument `%s`\n", argv[optind]);
		return 2;
	}
	return -1;
}

/* Step 2: the config file, then the flags over it, validated; with --check-config, printed. -1 to go on; else the
 * exit status. */
static int load_config(struct lbd *d, const struct flags *fl)
{
	struct lb_error err = { 0 };
	lbd_config_defaults(&d->cfg);
	if (lbd_config_load(&d->cfg, fl->config_path, !fl->config_given, &err) < 0) {
		fprintf(stderr, "lensboxd: %s\n", err.msg);
		return 2;
	}
	for (size_t i = 0; i < fl->n_ov; i++)
		if (lbd_config_set(&d->cfg, fl->ov[i].key, fl->ov[i].value, &err) < 0) {
			fprintf(stderr, "lensboxd: %s\n", err.msg);
			return 2;
		}
	if (lbd_config_validate(&d->cfg, &err) < 0) {
		fprintf(stderr, "lensboxd: %s\n", err.msg);
		return 2;
	}
	if (fl->check_only) {
		printf("socket = %s\nstate_dir = %s\nrun_dir = %s\npolicy_dir = %s\nimages_dir = %s\n"
		       "default_image = %s\nidle_seconds = %llu\nkeep_seconds = %llu\nmax_running = %u\n",
		       d->cfg.socket_path, d->cfg.state_dir, d->cfg.run_dir, d->cfg.policy_dir, d->cfg.images_dir,
		       d->cfg.default_image, (unsigned long long)d->cfg.idle_seconds,
		       (unsigned long long)d->cfg.keep_seconds, d->cfg.max_running);
		return 0;
	}
	return -1;
}

/* Step 3: the process itself. Signals are taken by sigwait() in this thread only (*set); every thread created
 * later inherits the mask. */
static void prepare_process(sigset_t *set)
{
	sigemptyset(set);
	sigaddset(set, SIGTERM);
	sigaddset(set, SIGINT);
	sigaddset(set, SIGHUP);
	pthread_sigmask(SIG_BLOCK, set, NULL);
	signal(SIGPIPE, SIG_IGN); /* a client that disconnects must not kill the daemon */
	/* runner/ creates directories and files the sandbox's uid must enter and read (private ones pass 0700). Set
	 * here, while single-threaded, and never changed again: the umask is the whole process's. */
	umask(0022);
	raise_fd_limit();
}

/* Step 4: the state and run directories, the policy and host facts (not fatal: health says why sandboxes cannot
 * run), the images, the store and reconciliation. 0, or 1 (logged) when the daemon cannot go on. */
static int open_state(struct lbd *d)
{
	struct lb_error err = { 0 };
	if (geteuid() != 0)
		lb_warn(NULL, "lensboxd is not running as root: sandboxes will not start");
	int r = lb_mkdir_p(d->cfg.state_dir, 0700);
	if (r < 0) {
		lb_error(NULL, "creating the state directory %s: %s", d->cfg.state_dir, strerror(-r));
		return 1;
	}
	/* Outside sandboxes/, which holds only sandboxes' storage; the runner makes it (root, 0700) when missing. */
	snprintf(d->disk_pool, sizeof(d->disk_pool), "%s/disk-pool", d->cfg.state_dir);
	r = lb_mkdir_p(d->cfg.run_dir, 0700);
	if (r < 0) {
		lb_error(NULL, "creating the run directory %s: %s", d->cfg.run_dir, strerror(-r));
		return 1;
	}

	/* Not fatal: without shared roots each start makes its own. */
	if (lbd_roots_open(d, &err) < 0)
		lb_warn(NULL, "%s (each sandbox gets a root of its own)", err.msg);

	if (lb_policy_load(d->cfg.policy_dir, &d->policy, &err) < 0) {
		snprintf(d->policy_error, sizeof(d->policy_error), "the policy in %s could not be loaded: %s",
			 d->cfg.policy_dir, err.msg);
		lb_error(NULL, "%s", d->policy_error);
		d->policy = NULL;
	}
	if (d->policy) {
		lb_host_probe(d->policy, &d->host);
		if (d->host.why_not[0])
			lb_warn(NULL, "sandboxes cannot run on this host: %s", d->host.why_not);
	}

	if (lbd_images_open(d, &err) < 0)
		lb_error(NULL, "%s (runs will answer image_unavailable)", err.msg);

	char db[512];
	snprintf(db, sizeof(db), "%s/state.db", d->cfg.state_dir);
	struct lb_store_config sc = { .path = db,
				      .uid_base = d->cfg.uid_range_start,
				      .uid_count = d->cfg.uid_range_count };
	if (lb_store_open(&sc, &d->store, &err) < 0) {
		lb_error(NULL, "opening the store: %s", err.msg);
		return 1;
	}
	if (lbd_sandboxes_init(d, &err) < 0 || lbd_reconcile(d, &err) < 0 || lbd_spares_reconcile(d, &err) < 0 ||
	    lbd_reserved_init(d, &err) < 0) {
		lb_error(NULL, "%s", err.msg);
		lb_store_close(d->store);
		return 1;
	}
	return 0;
}

/* Step 5: the leaf cgroup, the network tiers, spares, the API socket and the timers. 0, or 1 (logged, what was
 * started stopped again and the store closed) when the daemon cannot serve. */
static int start_serving(struct lbd *d, struct lbd_api_proc **ret_api, pthread_t *ret_timer)
{
	struct lb_error err = { 0 };
	/* The leaf first: the services' supervisor is forked by lbd_network_start() and stays in our cgroup. */
	move_to_leaf_cgroup();
	/* Found once, where we now are, for every start: before the threads that start sandboxes exist. */
	if (lb_cgroups_find(&d->cgroups, &err) < 0)
		d->cgroups = NULL; /* each start looks itself, and says why it cannot run */
	lbd_network_start(d);
	/* Before the API's threads exist, which read d->spares; not fatal: new sandboxes are then started on demand. */
	if (lbd_spares_start(d, &err) < 0)
		lb_warn(NULL, "%s", err.msg);
	if (lbd_ready_start(d, &err) < 0)
		lb_warn(NULL, "%s", err.msg);

	struct lbd_api_proc *api = NULL;
	if (lbd_api_proc_start(d, &api, &err) < 0) {
		lb_error(NULL, "%s", err.msg);
		lbd_ready_stop(d);
		lbd_spares_stop(d);
		lb_store_close(d->store);
		return 1;
	}
	if (lbd_timers_start(d, ret_timer, &err) < 0) {
		lb_error(NULL, "%s", err.msg);
		lbd_api_proc_stop(api);
		lbd_ready_stop(d);
		lbd_spares_stop(d);
		lb_store_close(d->store);
		return 1;
	}
	*ret_api = api;
	return 0;
}

/* Step 6: until SIGTERM or SIGINT; SIGHUP only says that the configuration is read at start. */
static void wait_for_stop(const sigset_t *set)
{
	for (;;) {
		int sig = 0;
		if (sigwait(set, &sig) != 0)
			continue;
		if (sig == SIGHUP) {
			lb_info(NULL, "SIGHUP: configuration is read at start only; restart lensboxd to change it");
			continue;
		}
		lb_info(NULL, "signal %d: shutting down", sig);
		break;
	}
}

/* Step 7: the server first (no new work), then the timers, spares, every sandbox (files stay), the network, the
 * store, the images and the policy. */
static int shut_down(struct lbd *d, struct lbd_api_proc *api, pthread_t timer)
{
	atomic_store(&d->stopping, true);
	int r = lbd_api_proc_stop(api);
	pthread_join(timer, NULL);
	lbd_ready_stop(d);
	lbd_spares_stop(d);
	lbd_sandboxes_shutdown(d);
	lbd_reserved_stop(d);
	lbd_roots_close(d);
	lbd_network_stop(d);
	lb_store_close(d->store);
	lbd_images_close(d);
	lb_policy_free(d->policy);
	lb_cgroups_free(d->cgroups);
	lb_info(NULL, "lensboxd stopped");
	return r < 0 ? 1 : 0;
}

int lbd_core_main(int argc, char **argv)
{
	struct flags fl;
	int r = parse_flags(argc, argv, &fl);
	if (r >= 0)
		return r;
	static struct lbd d; /* the daemon's context: passed by pointer everywhere, static only for its size */
	r = load_config(&d, &fl);
	if (r >= 0)
		return r;
	lb_log_set_level(d.cfg.log_level);
	d.started_at_ms = lbd_now_ms();

	sigset_t set;
	prepare_process(&set);
	if (open_state(&d) != 0)
		return 1;
	struct lbd_api_proc *api = NULL;
	pthread_t timer;
	if (start_serving(&d, &api, &timer) != 0)
		return 1;

	char fields[1024];
	snprintf(fields, sizeof(fields), "socket=%s state_dir=%s version=%s can_run=%s", d.cfg.socket_path,
		 d.cfg.state_dir, LENSBOX_VERSION, lbd_cannot_run(&d) ? "false" : "true");
	lb_info(fields, "lensboxd ready");

	wait_for_stop(&set);
	return shut_down(&d, api, timer);
}

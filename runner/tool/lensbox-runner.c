/*
 * lensbox-runner — start a sandbox, run one program in it (or the same one --repeat times), stop it, and print
 * the result as one JSON object. A thin front end over lb_runner for admins, security tests and benchmarks.
 *
 * Runs as root (it creates namespaces, cgroups, loop mounts). Exit status: 0 when the sandbox ran, whatever the
 * program did (its status is in the JSON); 1 with {"error": "..."} when the sandbox could not be set up or the
 * program could not be started; 2 on a usage error. Program output is sanitised to valid UTF-8 before printing.
 *
 *   lensbox-runner --rootfs DIR --storage DIR [--memory 512Mi] [--cpu 1] [--pids 256] [--disk 1Gi] [--timeout 60]
 *                  [--uid 200000] [--gid UID] [--policy DIR] [--output-limit 1Mi] [--name NAME] [--network off]
 *                  [--tmp 256Mi] [--shm 64Mi] [--hostname NAME]
 *                  [--run-dir /run/lensbox-runner] [--env K=V]... [--cwd DIR] [--repeat N] [--keep]
 *                  [--seccomp-cache DIR | --no-seccomp-cache] [--disk-pool DIR | --no-disk-pool] -- argv...
 *   lensbox-runner --cleanup NAME [--run-dir DIR]   what lensboxd does after a crash: kill, unmount, remove cgroups
 *   lensbox-runner --probe [--policy DIR]           the host's facts; exit 1 when sandboxes cannot run here
 *
 * The seccomp profile's compiled BPF is kept in <run-dir>/seccomp-cache (root's, 0700) between runs: compiling it
 * with libseccomp is most of this tool's own time, and a run with the same profile bytes and libseccomp reuses it
 * (policy/src/seccomp_cache.c says how an entry is checked). --no-seccomp-cache compiles every time.
 *
 * A new storage takes an image formatted ahead of time from <storage's parent>/.disk-pool (--disk-pool DIR, on the
 * storage's filesystem), which a detached refiller tops up (runner/disk_pool.c); --no-disk-pool runs mke2fs instead.
 */
#include "lb/cleanup.h"
#include "lb/error.h"
#include "lb/policy.h"
#include "lb/runner.h"
#include "lb/units.h"
#include "lb/utf8.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <yajl/yajl_gen.h>

#ifndef LENSBOX_POLICY_DIR
#define LENSBOX_POLICY_DIR "/etc/lensbox/policy"
#endif

#define MAX_ENV	   256
#define MAX_REPEAT 10000

static void usage(FILE *f)
{
	fprintf(f, "usage: lensbox-runner --rootfs DIR --storage DIR [--memory 512Mi] [--cpu 1] [--pids 256]\n"
		   "       [--disk 1Gi] [--timeout 60] [--uid 200000] [--gid GID] [--policy DIR] [--output-limit 1Mi]\n"
		   "       [--name NAME] [--network off] [--run-dir DIR] [--env K=V]... [--cwd DIR] [--repeat N]\n"
		   "       [--tmp 256Mi] [--shm 64Mi] [--hostname NAME]\n"
		   "       [--seccomp-cache DIR | --no-seccomp-cache] [--disk-pool DIR | --no-disk-pool]\n"
		   "       [--keep] -- program [args...]\n"
		   "       (inside, nobody 65534 is host uid/gid + 65536 and root 0 is + 131072)\n"
		   "       lensbox-runner --cleanup NAME [--run-dir DIR]\n"
		   "       lensbox-runner --probe [--policy DIR]\n");
}

static void gen_str(yajl_gen g, const char *s)
{
	yajl_gen_string(g, (const unsigned char *)s, strlen(s));
}

static void gen_kv_str(yajl_gen g, const char *k, const char *v)
{
	gen_str(g, k);
	gen_str(g, v);
}

static void gen_kv_int(yajl_gen g, const char *k, long long v)
{
	gen_str(g, k);
	yajl_gen_integer(g, v);
}

static void gen_kv_bool(yajl_gen g, const char *k, bool v)
{
	gen_str(g, k);
	yajl_gen_bool(g, v);
}

/* Program output is hostile bytes: valid UTF-8 only (invalid sequences become U+FFFD), then yajl escapes it. */
static int gen_kv_output(yajl_gen g, const char *k, const char *buf, size_t len)
{
	size_t n = 0;
	_cleanup_free_ char *clean = lb_utf8_sanitize(buf, len, &n);
	if (!clean)
		return -ENOMEM;
	gen_str(g, k);
	yajl_gen_string(g, (const unsigned char *)clean, n);
	return 0;
}

static void print_gen(yajl_gen g)
{
	const unsigned char *buf;
	size_t len;
	yajl_gen_get_buf(g, &buf, &len);
	fwrite(buf, 1, len, stdout);
	fputc('\n', stdout);
	fflush(stdout);
}

static int print_error(const char *msg)
{
	yajl_gen g = yajl_gen_alloc(NULL);
	if (!g)
		return 1;
	yajl_gen_map_open(g);
	size_t n = 0;
	_cleanup_free_ char *clean = lb_utf8_sanitize(msg, strlen(msg), &n);
	gen_str(g, "error");
	if (clean)
		yajl_gen_string(g, (const unsigned char *)clean, n);
	else
		gen_str(g, "out of memory");
	yajl_gen_map_close(g);
	print_gen(g);
	yajl_gen_free(g);
	return 1;
}

static uint64_t now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

/* --cleanup NAME: what lensboxd does after a crash, from the name alone (lb_sandbox_cleanup). */
static int do_cleanup(const char *name, const char *run_dir)
{
	struct lb_error err;
	lb_error_clear(&err);
	if (lb_sandbox_cleanup(name, run_dir, &err) < 0)
		return print_error(err.msg);
	yajl_gen g = yajl_gen_alloc(NULL);
	if (!g)
		return print_error("out of memory");
	yajl_gen_map_open(g);
	gen_kv_str(g, "cleaned", name);
	yajl_gen_map_close(g);
	print_gen(g);
	yajl_gen_free(g);
	return 0;
}

/* --probe: the host facts (lb_host_probe) against the policy. Exit 0 when sandboxes can run here. */
static int do_probe(const char *policy_dir)
{
	struct lb_error err;
	lb_error_clear(&err);
	struct lb_policy *policy = NULL;
	if (lb_policy_load(policy_dir, &policy, &err) < 0) {
		lb_error_wrap(&err, "loading the policy from %s", policy_dir);
		return print_error(err.msg);
	}
	struct lb_host_facts f;
	lb_host_probe(policy, &f);
	struct lb_refusal_support rs;
	lb_refusal_support(policy, &rs);
	lb_policy_free(policy);
	yajl_gen g = yajl_gen_alloc(NULL);
	if (!g)
		return print_error("out of memory");
	yajl_gen_map_open(g);
	gen_kv_str(g, "kernel", f.kernel);
	gen_kv_int(g, "landlock_abi", f.landlock_abi);
	gen_kv_str(g, "cgroup_version", f.cgroup == LB_CGROUP_V2 ? "v2" : f.cgroup == LB_CGROUP_V1 ? "v1" : "none");
	gen_kv_bool(g, "cgroup_v2_mounted", f.cgroup_v2_mounted);
	gen_kv_str(g, "cgroup_root", f.cgroup_root);
	gen_kv_bool(g, "seccomp", f.seccomp);
	gen_kv_bool(g, "user_namespaces", f.user_namespaces);
	gen_kv_bool(g, "loop_devices", f.loop_devices);
	gen_kv_bool(g, "ready", f.why_not[0] == '\0');
	gen_kv_str(g, "why_not", f.why_not);
	/* Which kinds of refusal a run can count here (docs/isolation.md section 10), as /v1/health says. */
	gen_str(g, "refusals");
	yajl_gen_map_open(g);
	gen_kv_bool(g, "syscall", rs.syscall_why_not == NULL);
	gen_kv_str(g, "syscall_why_not", rs.syscall_why_not ? rs.syscall_why_not : "");
	gen_kv_bool(g, "filesystem", rs.filesystem_why_not == NULL);
	gen_kv_str(g, "filesystem_why_not", rs.filesystem_why_not ? rs.filesystem_why_not : "");
	yajl_gen_map_close(g);
	yajl_gen_map_close(g);
	print_gen(g);
	yajl_gen_free(g);
	return f.why_not[0] ? 1 : 0;
}

/* "refused": counts by kind; null for a kind this host cannot count (lb_refusal_support says why). The tool runs
 * only network `off` (no tier rules to count), so its network count is Landlock's TCP refusals, read with the
 * filesystem ones from the audit records. */
static void gen_refused(yajl_gen g, const struct lb_refusals *r)
{
	gen_str(g, "refused");
	yajl_gen_map_open(g);
	gen_str(g, "filesystem");
	if (r->filesystem_reported)
		yajl_gen_integer(g, (long long)r->filesystem);
	else
		yajl_gen_null(g);
	gen_str(g, "syscall");
	if (r->syscall_reported)
		yajl_gen_integer(g, (long long)r->syscall);
	else
		yajl_gen_null(g);
	/* The tool runs tier off only: no interface but lo, whose ports are the sandbox's own, so nothing to refuse. */
	gen_str(g, "network");
	yajl_gen_integer(g, 0);
	gen_str(g, "syscalls");
	yajl_gen_map_open(g);
	for (size_t i = 0; i < r->n_syscalls; i++)
		gen_kv_int(g, r->syscalls[i].name, (long long)r->syscalls[i].count);
	yajl_gen_map_close(g);
	yajl_gen_map_close(g);
}

/* The command line, as given; defaults filled in by parse_options(). */
struct options {
	const char *rootfs, *storage, *policy_dir, *name, *cwd, *run_dir, *network;
	const char *memory, *cpu, *pids, *disk, *timeout, *output;
	const char *tmp, *shm, *hostname, *seccomp_cache, *disk_pool;
	bool no_seccomp_cache, keep, probe;
	unsigned long uid, gid, repeat;
	const char *cleanup;
	const char *env[MAX_ENV + 1];
	size_t n_env;
};

enum {
	O_ROOTFS = 256,
	O_STORAGE,
	O_MEMORY,
	O_CPU,
	O_PIDS,
	O_DISK,
	O_TIMEOUT,
	O_UID,
	O_GID,
	O_POLICY,
	O_OUTPUT,
	O_NAME,
	O_NETWORK,
	O_KEEP,
	O_RUNDIR,
	O_ENV,
	O_CWD,
	O_REPEAT,
	O_HELP,
	O_CLEANUP,
	O_PROBE,
	O_TMP,
	O_SHM,
	O_HOSTNAME,
	O_SECCOMP_CACHE,
	O_NO_SECCOMP_CACHE,
	O_DISK_POOL,
	O_NO_DISK_POOL
};

static const struct option opts[] = { { "rootfs", required_argument, NULL, O_ROOTFS },
				      { "storage", required_argument, NULL, O_STORAGE },
				      { "memory", required_argument, NULL, O_MEMORY },
				      { "cpu", required_argument, NULL, O_CPU },
				      { "pids", required_argument, NULL, O_PIDS },
				      { "disk", required_argument, NULL, O_DISK },
				      { "timeout", required_argument, NULL, O_TIMEOUT },
				      { "uid", required_argument, NULL, O_UID },
				      { "gid", required_argument, NULL, O_GID },
				      { "policy", required_argument, NULL, O_POLICY },
				      { "output-limit", required_argument, NULL, O_OUTPUT },
				      { "name", required_argument, NULL, O_NAME },
				      { "network", required_argument, NULL, O_NETWORK },
				      { "keep", no_argument, NULL, O_KEEP },
				      { "run-dir", required_argument, NULL, O_RUNDIR },
				      { "env", required_argument, NULL, O_ENV },
				      { "cwd", required_argument, NULL, O_CWD },
				      { "repeat", required_argument, NULL, O_REPEAT },
				      { "help", no_argument, NULL, O_HELP },
				      { "cleanup", required_argument, NULL, O_CLEANUP },
				      { "probe", no_argument, NULL, O_PROBE },
				      { "tmp", required_argument, NULL, O_TMP },
				      { "shm", required_argument, NULL, O_SHM },
				      { "hostname", required_argument, NULL, O_HOSTNAME },
				      { "seccomp-cache", required_argument, NULL, O_SECCOMP_CACHE },
				      { "no-seccomp-cache", no_argument, NULL, O_NO_SECCOMP_CACHE },
				      { "disk-pool", required_argument, NULL, O_DISK_POOL },
				      { "no-disk-pool", no_argument, NULL, O_NO_DISK_POOL },
				      { NULL, 0, NULL, 0 } };

/* Options up to the program's argv (optind); -1 to go on, else the exit status (--help 0, a usage error 2). The
 * quantities are parsed later, against the policy's defaults (build_spec). */
static int parse_options(int argc, char **argv, struct options *o)
{
	memset(o, 0, sizeof(*o));
	o->policy_dir = LENSBOX_POLICY_DIR;
	o->run_dir = "/run/lensbox-runner";
	o->network = "off";
	o->uid = 200000;
	o->repeat = 1;
	int c;
	while ((c = getopt_long(argc, argv, "+", opts, NULL)) != -1) {
		char *end;
		switch (c) {
		case O_ROOTFS:
			o->rootfs = optarg;
			break;
		case O_STORAGE:
			o->storage = optarg;
			break;
		case O_MEMORY:
			o->memory = optarg;
			break;
		case O_CPU:
			o->cpu = optarg;
			break;
		case O_PIDS:
			o->pids = optarg;
			break;
		case O_DISK:
			o->disk = optarg;
			break;
		case O_TIMEOUT:
			o->timeout = optarg;
			break;
		case O_OUTPUT:
			o->output = optarg;
			break;
		case O_POLICY:
			o->policy_dir = optarg;
			break;
		case O_NAME:
			o->name = optarg;
			break;
		case O_NETWORK:
			o->network = optarg;
			break;
		case O_KEEP:
			o->keep = true;
			break;
		case O_RUNDIR:
			o->run_dir = optarg;
			break;
		case O_DISK_POOL:
			o->disk_pool = optarg;
			break;
		case O_NO_DISK_POOL:
			o->disk_pool = "";
			break;
		case O_CWD:
			o->cwd = optarg;
			break;
		case O_ENV:
			if (o->n_env >= MAX_ENV) {
				fprintf(stderr, "lensbox-runner: too many --env\n");
				return 2;
			}
			o->env[o->n_env++] = optarg;
			break;
		case O_UID:
		case O_GID:
		case O_REPEAT: {
			errno = 0;
			unsigned long v = strtoul(optarg, &end, 10);
			if (errno || *end || end == optarg || v > 0xfffffffeUL) {
				fprintf(stderr, "lensbox-runner: bad number '%s'\n", optarg);
				return 2;
			}
			if (c == O_UID)
				o->uid = v;
			else if (c == O_GID)
				o->gid = v;
			else
				o->repeat = v;
			break;
		}
		case O_CLEANUP:
			o->cleanup = optarg;
			break;
		case O_PROBE:
			o->probe = true;
			break;
		case O_TMP:
			o->tmp = optarg;
			break;
		case O_SHM:
			o->shm = optarg;
			break;
		case O_HOSTNAME:
			o->hostname = optarg;
			break;
		case O_SECCOMP_CACHE:
			o->seccomp_cache = optarg;
			break;
		case O_NO_SECCOMP_CACHE:
			o->no_seccomp_cache = true;
			break;
		case O_HELP:
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	o->env[o->n_env] = NULL;
	return -1;
}

/* The policy, with its compiled seccomp BPF from the cache when it can be trusted. 0, or the exit status. */
static int load_policy(const struct options *o, struct lb_policy **ret, struct lb_error *err)
{
	const char *seccomp_cache = o->seccomp_cache;
	if (seccomp_cache && seccomp_cache[0] != '/') {
		fprintf(stderr, "lensbox-runner: --seccomp-cache must be an absolute path\n");
		return 2;
	}
	/* Default: beside the sandboxes' state, in the run directory (root's); a relative run dir fails at start. */
	char cache_dir[4096];
	if (!seccomp_cache && o->run_dir[0] == '/' &&
	    (size_t)snprintf(cache_dir, sizeof(cache_dir), "%s/seccomp-cache", o->run_dir) < sizeof(cache_dir))
		seccomp_cache = cache_dir;
	if (o->no_seccomp_cache)
		seccomp_cache = NULL;
	if (lb_policy_load_cached(o->policy_dir, seccomp_cache, ret, err) < 0) {
		lb_error_wrap(err, "loading the policy from %s", o->policy_dir);
		return print_error(err->msg);
	}
	return 0;
}

/* The pool of pre-formatted storage images by default: <storage's parent>/.disk-pool, on the storage's filesystem
 * as the pool must be. NULL (none) for a relative storage (the start refuses it) or a path too long. */
static const char *default_disk_pool(const char *storage)
{
	static char buf[4096];
	const char *slash = storage ? strrchr(storage, '/') : NULL;
	if (!slash || storage[0] != '/')
		return NULL;
	if ((size_t)snprintf(buf, sizeof(buf), "%.*s/.disk-pool", (int)(slash - storage), storage) >= sizeof(buf))
		return NULL;
	return buf;
}

/* What the sandbox and its runs are given: the policy's limits, overridden by the options. 0, or the exit status
 * (2: a bad quantity or an unsupported network). spec->name may point at defname (64 bytes). */
static int build_spec(const struct options *o, const struct lb_policy *policy, struct lb_sandbox_spec *spec,
		      char *defname, uint64_t *ret_timeout_s, uint64_t *ret_out_limit)
{
	memset(spec, 0, sizeof(*spec));
	snprintf(defname, 64, "runner-%d", (int)getpid());
	spec->name = o->name ? o->name : defname;
	spec->rootfs = o->rootfs;
	spec->hostname = o->hostname;
	spec->storage = o->storage;
	spec->disk_pool = o->disk_pool ? o->disk_pool : default_disk_pool(o->storage);
	/* removed after the stop: a storage this start makes is mounted without barriers (one that exists is not) */
	spec->storage_throwaway = !o->keep;
	spec->run_dir = o->run_dir;
	spec->host_uid = (uid_t)o->uid;
	spec->host_gid = (gid_t)o->gid;
	spec->policy = policy;
	const struct lb_limits_policy *pl = &policy->limits;
	spec->limits = (struct lb_sandbox_limits){ .cpu_millicores = pl->cpu_millicores,
						   .memory_bytes = pl->memory_bytes,
						   .pids = pl->pids,
						   .disk_bytes = pl->disk_bytes,
						   .tmp_bytes = pl->tmp_bytes,
						   .shm_bytes = pl->shm_bytes };
	uint64_t timeout_s = pl->timeout_seconds, out_limit = pl->output_bytes;
	int r = 0;
	if ((o->memory && (r = lb_parse_size(o->memory, &spec->limits.memory_bytes)) < 0) ||
	    (o->cpu && (r = lb_parse_cpu(o->cpu, &spec->limits.cpu_millicores)) < 0) ||
	    (o->disk && (r = lb_parse_size(o->disk, &spec->limits.disk_bytes)) < 0) ||
	    (o->tmp && (r = lb_parse_size(o->tmp, &spec->limits.tmp_bytes)) < 0) ||
	    (o->shm && (r = lb_parse_size(o->shm, &spec->limits.shm_bytes)) < 0) ||
	    (o->timeout && (r = lb_parse_duration(o->timeout, &timeout_s)) < 0) ||
	    (o->output && (r = lb_parse_size(o->output, &out_limit)) < 0)) {
		fprintf(stderr, "lensbox-runner: bad quantity: %s\n", strerror(-r));
		return 2;
	}
	if (o->pids) {
		char *end;
		errno = 0;
		spec->limits.pids = strtoull(o->pids, &end, 10);
		if (errno || *end || end == o->pids) {
			fprintf(stderr, "lensbox-runner: bad --pids\n");
			return 2;
		}
	}
	if (lb_tier_parse(o->network, &spec->network) < 0 || spec->network != LB_TIER_OFF) {
		/* packages and web need netfilter/'s veth and nftables, which lensboxd plugs in; not this tool. */
		fprintf(stderr, "lensbox-runner: only --network off is supported by the standalone tool (not `%s`)\n",
			o->network);
		return 2;
	}
	if (timeout_s > (uint64_t)24 * 3600 || out_limit > (256u << 20)) {
		fprintf(stderr, "lensbox-runner: timeout above 24h or output limit above 256Mi\n");
		return 2;
	}
	static const char *const image_env[] = { "PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin",
						 NULL };
	spec->image_env = image_env;
	*ret_timeout_s = timeout_s;
	*ret_out_limit = out_limit;
	return 0;
}

/* What the runs gave, for the JSON: the last run's result and every run's time, in microseconds. */
struct runs {
	struct lb_exec_result res;
	uint64_t *exec_us; /* repeat entries */
	uint64_t start_us, stop_us;
	int landlock_abi;
	enum lb_cgroup_version cgroup_version;
};

/* Start, the program run `repeat` times, stop, and the storage removed unless --keep. 0, or the exit status with
 * the error printed; on 0 the caller owns runs->res and runs->exec_us. */
static int start_run_stop(const struct options *o, const struct lb_sandbox_spec *spec, const char *const *prog,
			  uint64_t timeout_s, uint64_t out_limit, struct runs *runs, struct lb_error *err)
{
	uint64_t t0 = now_us();
	struct lb_sandbox *sb = NULL;
	struct stat st;
	bool storage_existed = stat(o->storage, &st) == 0;
	if (lb_sandbox_start(spec, &sb, err) < 0) {
		/* A storage this run created is not left behind; one that existed before is never touched here. */
		if (!storage_existed && !o->keep) {
			struct lb_error derr;
			lb_sandbox_destroy_storage(o->storage, &derr);
		}
		return print_error(err->msg);
	}
	uint64_t t1 = now_us();

	struct lb_exec_spec es = { .argv = prog,
				   .env = o->env,
				   .cwd = o->cwd,
				   .timeout_ms = (uint32_t)(timeout_s * 1000),
				   .stdout_limit = out_limit,
				   .stderr_limit = out_limit };
	memset(&runs->res, 0, sizeof(runs->res));
	runs->exec_us = calloc(o->repeat, sizeof(uint64_t));
	int er = runs->exec_us ? 0 : -ENOMEM;
	for (unsigned long i = 0; i < o->repeat && er == 0; i++) {
		lb_exec_result_free(&runs->res);
		uint64_t a = now_us();
		er = lb_sandbox_exec(sb, &es, &runs->res, err);
		runs->exec_us[i] = now_us() - a;
	}
	runs->landlock_abi = lb_sandbox_landlock_abi(sb);
	runs->cgroup_version = lb_sandbox_cgroup_version(sb);
	uint64_t t2 = now_us();
	struct lb_error serr;
	lb_error_clear(&serr);
	int sr = lb_sandbox_stop(sb, &serr);
	uint64_t t3 = now_us();
	if (!o->keep) {
		struct lb_error derr;
		lb_sandbox_destroy_storage(o->storage, &derr);
	}
	if (er < 0) {
		free(runs->exec_us);
		return print_error(err->msg);
	}
	if (sr < 0) {
		free(runs->exec_us);
		lb_exec_result_free(&runs->res);
		return print_error(serr.msg);
	}
	runs->start_us = t1 - t0;
	runs->stop_us = t3 - t2;
	return 0;
}

/* The result as one JSON object on stdout: the last run, what it refused, the isolation in place, the timings. */
static int print_result(const struct options *o, const struct lb_policy *policy, const struct lb_sandbox_spec *spec,
			const struct runs *runs)
{
	const struct lb_exec_result *res = &runs->res;
	yajl_gen g = yajl_gen_alloc(NULL);
	if (!g)
		return print_error("out of memory");
	yajl_gen_config(g, yajl_gen_validate_utf8, 1);
	yajl_gen_map_open(g);
	gen_kv_int(g, "exit_code", res->exit_code);
	gen_kv_int(g, "signal", res->signal);
	gen_kv_bool(g, "timed_out", res->timed_out);
	gen_kv_bool(g, "oom_killed", res->oom_killed);
	gen_kv_bool(g, "pids_limited", res->pids_limited);
	gen_kv_int(g, "wall_ms", (long long)res->wall_ms);
	gen_kv_int(g, "cpu_ms", (long long)res->cpu_ms);
	gen_kv_int(g, "peak_memory_bytes", (long long)res->peak_memory_bytes);
	int orr = gen_kv_output(g, "stdout", res->stdout_buf, res->stdout_len);
	gen_kv_int(g, "stdout_bytes", (long long)res->stdout_total);
	gen_kv_bool(g, "stdout_truncated", res->stdout_total > res->stdout_len);
	if (orr == 0)
		orr = gen_kv_output(g, "stderr", res->stderr_buf, res->stderr_len);
	gen_kv_int(g, "stderr_bytes", (long long)res->stderr_total);
	gen_kv_bool(g, "stderr_truncated", res->stderr_total > res->stderr_len);

	gen_refused(g, &res->refused);

	gen_str(g, "isolation");
	yajl_gen_map_open(g);
	gen_kv_int(g, "landlock_abi", runs->landlock_abi);
	enum lb_cgroup_version cgv = runs->cgroup_version;
	gen_kv_str(g, "cgroup_version", cgv == LB_CGROUP_V2 ? "v2" : cgv == LB_CGROUP_V1 ? "v1" : "none");
	gen_str(g, "seccomp");
	yajl_gen_map_open(g);
	gen_kv_int(g, "mode", 2); /* SECCOMP_MODE_FILTER: exec fails rather than run without it */
	gen_kv_int(g, "allowed_syscalls", (long long)policy->seccomp_rules);
	gen_kv_int(g, "bpf_instructions", policy->seccomp.len);
	gen_kv_bool(g, "bpf_from_cache", policy->seccomp_cached);
	yajl_gen_map_close(g);
	gen_str(g, "namespaces");
	yajl_gen_array_open(g);
	static const char *const ns[] = { "user", "mnt", "pid", "ipc", "uts", "net", "cgroup" };
	for (size_t i = 0; i < LB_ARRAY_SIZE(ns); i++)
		gen_str(g, ns[i]);
	yajl_gen_array_close(g);
	char map[96];
	unsigned in_uid = policy->limits.sandbox_uid ? policy->limits.sandbox_uid : 1000;
	unsigned in_gid = policy->limits.sandbox_gid ? policy->limits.sandbox_gid : 1000;
	const unsigned long s = LB_HOST_ID_STRIDE_DEFAULT, uid = o->uid, gid = o->gid;
	snprintf(map, sizeof(map), "0 %lu 1\n%u %lu 1\n65534 %lu 1", uid + 2 * s, in_uid, uid, uid + s);
	gen_kv_str(g, "uid_map", map);
	snprintf(map, sizeof(map), "0 %lu 1\n%u %lu 1\n65534 %lu 1", gid + 2 * s, in_gid, gid, gid + s);
	gen_kv_str(g, "gid_map", map);
	gen_kv_str(g, "network", lb_tier_name(spec->network));
	yajl_gen_map_close(g);

	gen_str(g, "timing_us");
	yajl_gen_map_open(g);
	gen_kv_int(g, "start", (long long)runs->start_us);
	gen_str(g, "exec");
	yajl_gen_array_open(g);
	for (unsigned long i = 0; i < o->repeat; i++)
		yajl_gen_integer(g, (long long)runs->exec_us[i]);
	yajl_gen_array_close(g);
	gen_kv_int(g, "stop", (long long)runs->stop_us);
	yajl_gen_map_close(g);
	yajl_gen_map_close(g);
	if (orr < 0) {
		yajl_gen_free(g);
		return print_error("out of memory");
	}
	print_gen(g);
	yajl_gen_free(g);
	return 0;
}

int main(int argc, char **argv)
{
	struct options o;
	int status = parse_options(argc, argv, &o);
	if (status >= 0)
		return status;
	if (o.cleanup)
		return do_cleanup(o.cleanup, o.run_dir);
	if (o.probe)
		return do_probe(o.policy_dir);
	if (!o.rootfs || !o.storage || optind >= argc || o.repeat == 0 || o.repeat > MAX_REPEAT) {
		usage(stderr);
		return 2;
	}
	if (o.gid == 0)
		o.gid = o.uid;

	struct lb_error err;
	lb_error_clear(&err);
	struct lb_policy *policy = NULL;
	if ((status = load_policy(&o, &policy, &err)) != 0)
		return status;
	struct lb_sandbox_spec spec;
	char defname[64];
	uint64_t timeout_s, out_limit;
	if ((status = build_spec(&o, policy, &spec, defname, &timeout_s, &out_limit)) != 0)
		goto out;

	/* A terminal's ^C must not leave a half-stopped sandbox: the tool finishes its stop first. */
	signal(SIGINT, SIG_IGN);
	signal(SIGPIPE, SIG_IGN);
	/* The sandbox's uid must enter and read what the start creates (its root's skeleton, /etc files, mount points),
	 * whatever umask the tool was started with: a shell's 077 made them root's alone. */
	umask(0022);

	struct runs runs;
	status = start_run_stop(&o, &spec, (const char *const *)&argv[optind], timeout_s, out_limit, &runs, &err);
	if (status != 0)
		goto out;
	status = print_result(&o, policy, &spec, &runs);
	free(runs.exec_us);
	lb_exec_result_free(&runs.res);
out:
	lb_policy_free(policy);
	return status;
}

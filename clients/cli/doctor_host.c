/*
 * doctor_host.c — `lensbox doctor`'s checks of the host around lensboxd: the sandboxes' host ids against the account
 * files (/etc/passwd, /etc/group, /etc/subuid, /etc/subgid), the free space where the state lives, and the socket's
 * directory (lensboxd refuses to start when others can enter it, and must be able to create the socket in it), and
 * that the API process's uid (api_user) is no other account's.
 *
 * Runs in the CLI process; reads only. The account files are read as text (not through NSS: the question is which
 * ids this host's files hand out), at most 4 MiB each, under LENSBOX_DOCTOR_ROOT when set.
 */
#include <errno.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "doctor.h"
#include "lb/cleanup.h"
#include "lb/fileio.h"

#include <fcntl.h>

struct id_clash {
	char file[32];
	char who[64];
	uint64_t first, last; /* the clashing ids */
	uint64_t highest;     /* the highest id any of the files hands out */
};

/* Looks through one colon-separated file: name:x:ID:... (passwd, group; field 3) or name:START:COUNT (subuid, subgid).
 * Records the first entry inside [lo, hi) in *c, and raises c->highest. */
static void scan_ids(const char *path, const char *file, bool ranges, uint64_t lo, uint64_t hi, struct id_clash *c)
{
	_cleanup_free_ char *text = NULL;
	if (lb_read_file_at(AT_FDCWD, path, 4u << 20, &text, NULL) < 0)
		return;
	char *save = NULL;
	for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char name[64];
		unsigned long long a = 0, b = 1;
		int n = ranges ? sscanf(line, "%63[^:]:%llu:%llu", name, &a, &b)
			       : sscanf(line, "%63[^:]:%*[^:]:%llu", name, &a);
		if (n != (ranges ? 3 : 2) || b == 0)
			continue;
		uint64_t first = a, last = a + b - 1;
		if (last > c->highest)
			c->highest = last;
		if (!c->file[0] && first < hi && last >= lo) {
			snprintf(c->file, sizeof(c->file), "%s", file);
			snprintf(c->who, sizeof(c->who), "%s", name);
			c->first = first;
			c->last = last;
		}
	}
}

static void check_uids(struct lbc_doctor *d)
{
	const struct lbd_config *cfg = &d->cfg;
	/* Each sandbox holds three host ids (config.c, lbd_config_validate): [start, start + 3 * count). */
	uint64_t lo = cfg->uid_range_start, hi = lo + 3 * (uint64_t)cfg->uid_range_count;
	struct id_clash c = { 0 };
	static const struct {
		const char *path, *file;
		bool ranges;
	} files[] = { { "/etc/passwd", "/etc/passwd", false },
		      { "/etc/group", "/etc/group", false },
		      { "/etc/subuid", "/etc/subuid", true },
		      { "/etc/subgid", "/etc/subgid", true } };
	for (size_t i = 0; i < LB_ARRAY_SIZE(files); i++) {
		char path[512];
		lbc_doc_path(d, files[i].path, path, sizeof(path));
		scan_ids(path, files[i].file, files[i].ranges, lo, hi, &c);
	}
	if (!c.file[0]) {
		lbc_doc_add(d, "uid-range", LBC_DOC_OK, NULL, NULL,
			    "%" PRIu64 "-%" PRIu64
			    " (uid_range_start %u, 3 x %u ids) is used by no account or subid range",
			    lo, hi - 1, cfg->uid_range_start, cfg->uid_range_count);
		return;
	}
	/* A start above every id the files hand out, on a 2^24 boundary, with room for the whole range. */
	uint64_t suggest = ((c.highest >> 24) + 1) << 24;
	char fix[LBC_DOC_TEXT];
	if (suggest + 3 * (uint64_t)cfg->uid_range_count < UINT32_MAX - 1)
		snprintf(fix, sizeof(fix),
			 "set `uid_range_start = %" PRIu64 "` in %s (above every id these files hand out), or move %s",
			 suggest, d->config_path, c.who);
	else
		snprintf(fix, sizeof(fix), "lower uid_range_count or move %s out of the range", c.who);
	lbc_doc_add(
	    d, "uid-range", LBC_DOC_FAIL,
	    "a sandbox given an id that belongs to an account (or to another tool's user namespaces) could read "
	    "or signal what that account owns",
	    fix, "%" PRIu64 "-%" PRIu64 " overlaps %s's %s%" PRIu64 "-%" PRIu64 " in %s", lo, hi - 1, c.who,
	    c.first == c.last ? "id " : "ids ", c.first, c.last, c.file);
}

/* The API process's uid (api_user): the config check refuses root, services_uid and the sandboxes' ids; here, that a
 * numeric uid is nobody else's. An account or another tool's user namespace holding it could signal the process that
 * parses every request. The Debian package's own account for it (lensbox-api) is the expected holder. */
static void check_api_user(struct lbc_doctor *d)
{
	uid_t uid;
	gid_t gid;
	struct lb_error err = { 0 };
	if (lbd_config_api_ids(&d->cfg, &uid, &gid, &err) < 0)
		return; /* the config check says why lensboxd would refuse it */
	const char *u = d->cfg.api_user;
	if (u[0] < '0' || u[0] > '9') {
		lbc_doc_add(d, "api-user", LBC_DOC_OK, NULL, NULL, "%s (uid %u)", u, (unsigned)uid);
		return;
	}
	static const struct {
		const char *path;
		bool ranges;
	} files[] = { { "/etc/passwd", false }, { "/etc/subuid", true } };
	for (size_t i = 0; i < LB_ARRAY_SIZE(files); i++) {
		char path[512];
		lbc_doc_path(d, files[i].path, path, sizeof(path));
		struct id_clash c = { 0 };
		scan_ids(path, files[i].path, files[i].ranges, uid, (uint64_t)uid + 1, &c);
		if (c.file[0] && !(strcmp(c.who, "lensbox-api") == 0 && !files[i].ranges)) {
			lbc_doc_add(
			    d, "api-user", LBC_DOC_WARN,
			    "the API process parses every request; whoever holds its uid can signal it",
			    "set `api_user` to an unused uid (or to that account's name, if it is meant for this)",
			    "uid %u (api_user) is %s's in %s", (unsigned)uid, c.who, c.file);
			return;
		}
	}
	lbc_doc_add(d, "api-user", LBC_DOC_OK, NULL, NULL, "uid %u, used by no other account or subid range",
		    (unsigned)uid);
}

/* The directory itself or, when it does not exist yet, the nearest ancestor that does (lensboxd creates the rest). */
static void existing_ancestor(const char *path, char *buf, size_t size)
{
	snprintf(buf, size, "%s", path);
	struct stat st;
	while (stat(buf, &st) < 0 && strcmp(buf, "/") != 0) {
		char *slash = strrchr(buf, '/');
		if (!slash)
			break;
		if (slash == buf)
			slash[1] = '\0';
		else
			*slash = '\0';
	}
}

#define DISK_FAIL_BYTES (256ull << 20)
#define DISK_WARN_BYTES (2ull << 30)

static void check_disk(struct lbc_doctor *d)
{
	char at[256];
	existing_ancestor(d->cfg.state_dir, at, sizeof(at));
	struct statvfs sv;
	if (statvfs(at, &sv) < 0) {
		lbc_doc_add(d, "disk", LBC_DOC_FAIL, "lensboxd keeps its store and every sandbox's disk there",
			    "create it on a mounted filesystem, or set state_dir in lensboxd.conf", "%s: %s", at,
			    strerror(errno));
		return;
	}
	uint64_t avail = (uint64_t)sv.f_bavail * sv.f_frsize;
	enum lbc_doc_status st = avail < DISK_FAIL_BYTES   ? LBC_DOC_FAIL
				 : avail < DISK_WARN_BYTES ? LBC_DOC_WARN
							   : LBC_DOC_OK;
	lbc_doc_add(d, "disk", st,
		    "sandboxes' disks are sparse files in state_dir: they fail to write when it fills (below 256 MiB "
		    "free is a failure, below 2 GiB a warning)",
		    "free space on that filesystem, or set state_dir in lensboxd.conf to a larger one",
		    "%" PRIu64 " MiB free in %s (state_dir %s)", avail >> 20, at, d->cfg.state_dir);
}

static void check_socket_dir(struct lbc_doctor *d)
{
	char dir[256];
	snprintf(dir, sizeof(dir), "%s", d->cfg.socket_path);
	char *slash = strrchr(dir, '/');
	if (!slash || slash == dir) {
		lbc_doc_add(d, "socket-dir", LBC_DOC_FAIL, "lensboxd refuses a socket outside a directory of its own",
			    "set socket = /run/lensbox/lensboxd.sock in lensboxd.conf", "socket %s",
			    d->cfg.socket_path);
		return;
	}
	*slash = '\0';
	static const char why_refused[] = "lensboxd refuses to start: its API socket would be reachable by every user";
	struct stat st;
	if (stat(dir, &st) < 0) {
		char at[256];
		existing_ancestor(dir, at, sizeof(at));
		bool ok = access(at, W_OK) == 0;
		lbc_doc_add(d, "socket-dir", ok ? LBC_DOC_OK : LBC_DOC_FAIL,
			    "lensboxd creates the socket's directory at start and cannot here: it will not start",
			    "make the filesystem writable, or set socket in lensboxd.conf to a path under /run",
			    ok ? "%s does not exist yet; lensboxd creates it (0750) under %s"
			       : "%s cannot be created: %s is "
				 "not writable",
			    dir, at);
		return;
	}
	if (!S_ISDIR(st.st_mode)) {
		lbc_doc_add(d, "socket-dir", LBC_DOC_FAIL, "lensboxd will not start",
			    "remove it, or set socket elsewhere", "%s is not a directory", dir);
		return;
	}
	char fix[LBC_DOC_TEXT];
	snprintf(fix, sizeof(fix), "chmod 0750 %s (the unit's RuntimeDirectoryMode does this)", dir);
	if (st.st_mode & 0007) {
		lbc_doc_add(d, "socket-dir", LBC_DOC_FAIL, why_refused, fix,
			    "%s is accessible to every user (mode %04o)", dir, st.st_mode & 07777);
		return;
	}
	if (access(dir, W_OK) < 0) {
		int e = errno;
		lbc_doc_add(d, "socket-dir", LBC_DOC_FAIL, "lensboxd cannot create its socket there: it will not start",
			    "make the filesystem writable (mount -o remount,rw), or set socket in lensboxd.conf to a "
			    "writable directory of its own",
			    "%s is not writable: %s", dir, strerror(e));
		return;
	}
	lbc_doc_add(d, "socket-dir", st.st_uid == 0 ? LBC_DOC_OK : LBC_DOC_WARN,
		    "whoever owns the directory can replace lensboxd's socket", "chown root %s",
		    "%s mode %04o, owner uid %u", dir, st.st_mode & 07777, (unsigned)st.st_uid);
}

void lbc_doctor_host(struct lbc_doctor *d)
{
	check_uids(d);
	check_api_user(d);
	check_disk(d);
	check_socket_dir(d);
}

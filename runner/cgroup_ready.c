/*
 * cgroup_ready.c — a sandbox's cgroup directories made ahead of time (cgroup v1 only).
 *
 * Runs in the caller (lensboxd's core, root), off any request's path. A start on v1 makes a directory in each of
 * four hierarchies and four leaves below them: nine `mkdir`s, ~0.3 ms, the memory cgroup's the dearest. Made ahead
 * under a name of the caller's (`lensbox/<ready>` in each hierarchy, with the leaves and no limit), they are renamed
 * to the sandbox's name by the start that takes them (lb_sandbox_spec.ready_cgroup, lb_cg_create_from), which then
 * writes the sandbox's limits as always. cgroup v2 has no rename: there the start makes its own.
 *
 * Invariants: nothing but these functions and the start touches a ready name's directories; no process ever joins
 * one (nothing knows them: a start joins its cgroup only after the rename); every directory is below our own
 * `lensbox` directory of a hierarchy. A crash leaves empty cgroups, which lb_ready_cgroup_sweep() removes by prefix.
 */
/* Paths built here come from bounded parts (names <= 63 bytes, mount points); a path cut at PATH_MAX only fails. */
#pragma GCC diagnostic ignored "-Wformat-truncation"

#include "cgroup.h"

#include "lb/cleanup.h"
#include "lb/name.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SWEEP_MAX 256 /* names removed per sweep: far more than lensboxd ever keeps (16) */

static int detect_v1(struct lb_cg_host *host, struct lb_error *err)
{
	int r = lb_cg_detect(host, err);
	if (r < 0)
		return r;
	if (host->version != LB_CGROUP_V1)
		return lb_error_setx(err, ENOTSUP,
				     "cgroup directories are made ahead on cgroup v1 only (v2 renames none)");
	return 0;
}

/* A ready name checked and the v1 layout found, or an error. */
static int ready_host(const char *ready, struct lb_cg_host *host, struct lb_error *err)
{
	if (!lb_sandbox_name_valid(ready))
		return lb_error_setx(err, EINVAL, "invalid name for cgroup directories made ahead");
	return detect_v1(host, err);
}

int lb_ready_cgroup_make(const char *ready, struct lb_error *err)
{
	struct lb_cg_host host;
	int r = ready_host(ready, &host, err);
	if (r < 0)
		return r;
	/* No limit: the start that takes them writes its sandbox's. */
	static const struct lb_sandbox_limits none = { 0 };
	struct lb_cgroup *cg = NULL;
	if ((r = lb_cg_create(&host, ready, &none, &cg, err)) < 0)
		return r;
	bool fresh = cg->fresh;
	lb_cg_free(cg);
	/* The caller's names are its own and never reused: one that exists is not ours to hand out. */
	if (!fresh)
		return lb_error_setx(err, EEXIST, "cgroup %s exists already", ready);
	return 0;
}

int lb_ready_cgroup_remove(const char *ready, struct lb_error *err)
{
	struct lb_cg_host host;
	int r = ready_host(ready, &host, err);
	if (r < 0)
		return r;
	struct lb_cgroup *cg = NULL;
	if ((r = lb_cg_open(&host, ready, &cg, err)) < 0)
		return r;
	r = lb_cg_destroy(cg, err);
	lb_cg_free(cg);
	return r;
}

int lb_ready_cgroup_sweep(const char *prefix, struct lb_error *err)
{
	size_t plen = prefix ? strlen(prefix) : 0;
	if (plen == 0)
		return lb_error_setx(err, EINVAL, "an empty prefix would sweep every sandbox's cgroup");
	struct lb_cg_host host;
	int r = detect_v1(&host, err);
	if (r == -ENOTSUP)
		return 0; /* nothing is ever made ahead there */
	if (r < 0)
		return r;
	char *names[SWEEP_MAX];
	size_t n = 0;
	for (int c = 0; c < LB_CG1_N && n < SWEEP_MAX; c++) {
		if (!host.v1_mount[c][0])
			continue;
		char dir[PATH_MAX];
		snprintf(dir, sizeof(dir), "%s/lensbox", host.v1_mount[c]);
		_cleanup_closedir_ DIR *d = opendir(dir);
		if (!d)
			continue; /* no sandbox ever ran in this hierarchy */
		struct dirent *de;
		while ((de = readdir(d)) && n < SWEEP_MAX) {
			if (strncmp(de->d_name, prefix, plen) != 0 || !lb_sandbox_name_valid(de->d_name))
				continue;
			bool seen = false;
			for (size_t i = 0; i < n && !seen; i++)
				seen = strcmp(names[i], de->d_name) == 0;
			if (!seen && (names[n] = strdup(de->d_name)))
				n++;
		}
	}
	int first = 0;
	for (size_t i = 0; i < n; i++) {
		struct lb_error e = { 0 };
		int rr = lb_ready_cgroup_remove(names[i], &e);
		if (rr < 0 && first == 0) {
			first = rr;
			if (err)
				*err = e;
		}
		free(names[i]);
	}
	return first;
}

/*
 * gen.c — the API's sandbox and run objects, written from the store's rows (see docs/api.md).
 *
 * Runs in the core (root) on channel threads; pure functions over rows the core read itself.
 */
#include <stdio.h>
#include <string.h>

#include "core.h"
#include "lb/units.h"

static void gen_size(yajl_gen g, const char *key, uint64_t bytes)
{
	char buf[32];
	lb_format_size(bytes, buf, sizeof(buf));
	lbd_gen_str(g, key, buf);
}

void lbd_gen_sandbox_with_disk(const struct lbd *d, yajl_gen g, const struct lb_store_sandbox *sb, int64_t disk_used)
{
	(void)d;
	yajl_gen_map_open(g);
	lbd_gen_str(g, "name", sb->name);
	lbd_gen_str(g, "state", lb_sandbox_state_name(sb->state));
	lbd_gen_key(g, "spec");
	yajl_gen_map_open(g);
	lbd_gen_str(g, "image", sb->spec.image);
	lbd_gen_str(g, "network", lb_tier_name(sb->spec.network));
	char cpu[32];
	lbd_gen_str(g, "cpu", lb_format_cpu(sb->spec.cpu_millicores, cpu, sizeof(cpu)));
	gen_size(g, "memory", sb->spec.memory_bytes);
	gen_size(g, "disk", sb->spec.disk_bytes);
	/* Whole minutes and hours as the API takes them; a seconds-scale test config shows as a fraction. */
	if (sb->spec.idle_seconds % 60 == 0)
		lbd_gen_uint(g, "idle_minutes", sb->spec.idle_seconds / 60);
	else
		lbd_gen_double(g, "idle_minutes", (double)sb->spec.idle_seconds / 60.0);
	if (sb->spec.keep_seconds % 3600 == 0)
		lbd_gen_uint(g, "keep_hours", sb->spec.keep_seconds / 3600);
	else
		lbd_gen_double(g, "keep_hours", (double)sb->spec.keep_seconds / 3600.0);
	yajl_gen_map_close(g);
	lbd_gen_str(g, "image_digest", sb->image_digest[0] ? sb->image_digest : NULL);
	lbd_gen_uint(g, "host_uid", sb->host_uid);
	if (disk_used >= 0)
		lbd_gen_int(g, "disk_used_bytes", disk_used);
	else
		lbd_gen_null(g, "disk_used_bytes");
	lbd_gen_time(g, "created_at", sb->created_at_ms);
	lbd_gen_time(g, "last_used_at", sb->last_used_at_ms);
	if (sb->state == LB_SANDBOX_RUNNING)
		lbd_gen_time(g, "stops_at", lb_store_stop_at_ms(sb));
	else
		lbd_gen_null(g, "stops_at");
	lbd_gen_time(g, "deletes_at", lb_store_delete_at_ms(sb));
	lbd_gen_uint(g, "runs", sb->runs);
	yajl_gen_map_close(g);
}

void lbd_gen_run(yajl_gen g, const struct lb_store_run *run)
{
	yajl_gen_map_open(g);
	lbd_gen_str(g, "id", run->id);
	lbd_gen_str(g, "sandbox", run->sandbox);
	lbd_gen_str(g, "language", run->language);
	lbd_gen_time(g, "started_at", run->started_at_ms);
	lbd_gen_uint(g, "duration_ms", run->duration_ms);
	if (run->exited)
		lbd_gen_int(g, "exit_code", run->exit_code);
	else
		lbd_gen_null(g, "exit_code");
	lbd_gen_int(g, "signal", run->signal);
	lbd_gen_bool(g, "timed_out", run->timed_out);
	lbd_gen_bool(g, "oom_killed", run->oom_killed);
	lbd_gen_bool(g, "pids_limited", run->pids_limited);
	lbd_gen_uint(g, "network_blocked", run->network_blocked);
	lbd_gen_uint(g, "cpu_ms", run->cpu_ms);
	lbd_gen_uint(g, "peak_memory_bytes", run->peak_memory_bytes);
	lbd_gen_uint(g, "stdout_bytes", run->stdout_bytes);
	lbd_gen_uint(g, "stderr_bytes", run->stderr_bytes);
	lbd_gen_str(g, "outcome", lb_run_outcome_name(lb_run_outcome_of(run)));
	lbd_gen_str(g, "message", run->message[0] ? run->message : NULL);
	yajl_gen_map_close(g);
}

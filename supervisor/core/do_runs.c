/*
 * do_runs.c — the core's side of POST /v1/sandboxes/{name}/runs (LBP_RUN: one run), GET /v1/runs and
 * GET /v1/runs/{id} (the ledger).
 *
 * Runs in the core (root) on the request's channel thread, which may block for the whole run (up to 600 s): other
 * requests have channels and threads of their own. The API process parsed and checked the body; the source arrives
 * as a sealed memfd of the size the message states (proto.c checked both), read here once. A run holds its sandbox's
 * turn from ensuring the sandbox to the end of the program, so runs in one sandbox execute one at a time in arrival
 * order.
 *
 * The source is written into the sandbox's private /tmp as /tmp/.lensbox-<run id>/main.py (or main.sh), owned by
 * the sandbox's uid, so tracebacks carry line numbers and a file name, and /sandbox holds only the user's files; it
 * is removed after the run. Program
 * output is hostile bytes: the runner keeps the first 4*N+4 bytes of stdout and the last 4*N+4 of stderr (N =
 * output_limit characters; a character is at most 4 bytes), this file drops a sequence cut by that window, replaces
 * invalid UTF-8 with U+FFFD and then cuts at N Unicode characters, so the JSON is always valid and never cuts a
 * character. A program that fails is a 200 with its status: HTTP errors are for requests lensboxd could not serve.
 *
 * Retention (lbd_ledger_prune, called from the timer thread): rows older than runs_keep_days and rows past the newest
 * runs_keep_max are deleted; /metrics' run counters are kept apart from the rows and are never reduced by it.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <unistd.h>

#include "core.h"
#include "files.h"
#include "output.h"
#include "lb/cleanup.h"
#include "lb/language.h"
#include "lb/log.h"
#include "lb/netfilter.h"
#include "lb/units.h"
#include "lb/utf8.h"

static const char *signal_name(int sig)
{
	const char *s = sigabbrev_np(sig);
	return s ? s : "?";
}

/* The run's network refusals: its tier's (network_blocked) plus the TCP binds and connects Landlock refused, which
 * only hosts reading Landlock's audit records can count (lb_refusals.filesystem_reported). */
/* "; the sandbox refused 2 system calls (mount, keyctl) and 1 network connection its tier (off) forbids" appended to
 * buf, when the sandbox refused anything; else, when the program's own error output says a write met the read-only
 * root (which no kernel facility reports: the mount refuses it before Landlock sees it), a clause saying where it
 * may write. */
/* The message is one sentence of at most LB_STORE_MESSAGE_MAX bytes: a clause cut at its end is still readable. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-truncation"
static void append_refusals(const struct lb_exec_result *x, uint64_t net, const char *tier, const char *stderr_tail,
			    char *buf, size_t size)
{
	const struct lb_refusals *r = &x->refused;
	char parts[3][200];
	size_t n = 0;
	if (r->filesystem_reported && r->filesystem)
		snprintf(parts[n++], sizeof(parts[0]), "%llu write%s outside /sandbox and /tmp",
			 (unsigned long long)r->filesystem, r->filesystem == 1 ? "" : "s");
	if (r->syscall_reported && r->syscall) {
		char names[120] = "";
		size_t used = 0;
		for (size_t i = 0; i < r->n_syscalls && i < 3 && used < sizeof(names); i++)
			used += (size_t)snprintf(names + used, sizeof(names) - used, "%s%s", i ? ", " : "",
						 r->syscalls[i].name);
		snprintf(parts[n++], sizeof(parts[0]), "%llu system call%s (%s%s)", (unsigned long long)r->syscall,
			 r->syscall == 1 ? "" : "s", names, r->n_syscalls > 3 ? ", ..." : "");
	}
	if (net)
		snprintf(parts[n++], sizeof(parts[0]), "%llu network connection%s its network tier (%s) forbids",
			 (unsigned long long)net, net == 1 ? "" : "s", tier);
	size_t len = strlen(buf);
	if (n == 0) {
		if (stderr_tail && strstr(stderr_tail, "Read-only file system"))
			snprintf(buf + len, size - len,
				 "; it tried to write where the sandbox is read-only (only /sandbox "
				 "and /tmp are writable)");
		return;
	}
	if (n == 1)
		snprintf(buf + len, size - len, "; the sandbox refused %s", parts[0]);
	else if (n == 2)
		snprintf(buf + len, size - len, "; the sandbox refused %s and %s", parts[0], parts[1]);
	else
		snprintf(buf + len, size - len, "; the sandbox refused %s, %s and %s", parts[0], parts[1], parts[2]);
}
#pragma GCC diagnostic pop

/* One sentence for the model when something went wrong. A refusal likely explains a failure (a non-zero exit or a
 * signal, not a time or memory limit), so then the sentence says what the sandbox refused. */
static void compose_message(const struct lb_exec_result *x, uint32_t timeout_s, const struct lb_store_spec *spec,
			    uint64_t pids, uint64_t network_blocked, char *buf, size_t size)
{
	char a[32];
	buf[0] = '\0';
	if (x->hung_up)
		snprintf(buf, size, "stopped: the client went away before the run ended");
	else if (x->timed_out)
		snprintf(buf, size, "killed after %u s: the time limit", timeout_s);
	else if (x->oom_killed)
		snprintf(buf, size, "out of memory: the limit is %s", lb_format_size(spec->memory_bytes, a, sizeof(a)));
	else if (x->signal)
		snprintf(buf, size, "killed by signal %d (SIG%s)", x->signal, signal_name(x->signal));
	else if (x->pids_limited)
		snprintf(buf, size, "could not start more processes: the limit is %llu", (unsigned long long)pids);
	else if (x->exit_code != 0)
		snprintf(buf, size, "exited with code %d", x->exit_code);
	if (!x->hung_up && !x->timed_out && !x->oom_killed && (x->signal || x->exit_code != 0))
		append_refusals(x, network_blocked, lb_tier_name(spec->network), x->stderr_buf, buf, size);
}

/* "refused": counts by kind, null for a kind this host cannot count (GET /v1/health says why), and the refused
 * system calls by name, most frequent first. */
static void gen_refused(yajl_gen g, const struct lb_exec_result *x, uint64_t network_blocked)
{
	const struct lb_refusals *r = &x->refused;
	lbd_gen_key(g, "refused");
	yajl_gen_map_open(g);
	if (r->filesystem_reported)
		lbd_gen_uint(g, "filesystem", r->filesystem);
	else
		lbd_gen_null(g, "filesystem");
	if (r->syscall_reported)
		lbd_gen_uint(g, "syscall", r->syscall);
	else
		lbd_gen_null(g, "syscall");
	lbd_gen_uint(g, "network", network_blocked);
	lbd_gen_key(g, "syscalls");
	yajl_gen_map_open(g);
	for (size_t i = 0; i < r->n_syscalls; i++)
		lbd_gen_uint(g, r->syscalls[i].name, r->syscalls[i].count);
	yajl_gen_map_close(g);
	yajl_gen_map_close(g);
}

/* LBP_RUN, validated: what the client asked to run and how. source is the caller's (malloc'ed). */
struct run_request {
	const char *lang;
	bool python;
	char *source;
	size_t source_len;
	long long timeout, limit; /* seconds; output characters per stream */
	struct lbd_spec_request spec;
	int hangup_fd; /* the request's channel: the API process closes it when the client goes away; 0: none */
};

/* What a run produced, for the answer: its ledger row, the runner's result (output and refusals; the caller frees it
 * once the run happened) and what ensuring the sandbox did. */
struct run_outcome {
	struct lb_store_run run;
	struct lb_exec_result x;
	struct lbd_ensure_result er;
};

/* Step 1: the message's fields as a request: the source read from its memfd, the spec rebuilt from the core's own
 * configuration and checked again. On a refusal fills res and returns -1. */
static int read_run_request(struct lbd *d, struct lbp_msg *m, struct run_request *ret, struct lbd_res *res)
{
	const struct lbp_run *w = &m->u.run;
	ret->python = w->language == LB_LANGUAGE_PYTHON;
	ret->lang = lb_language_name((enum lb_language)w->language);
	ret->timeout = w->timeout_seconds;
	ret->limit = w->output_limit;
	ret->source_len = (size_t)w->source_len;
	ret->source = malloc(ret->source_len + 1);
	if (!ret->source) {
		lbd_res_error(res, 500, "internal", "Out of memory.");
		return -1;
	}
	size_t done = 0;
	while (done < ret->source_len) {
		ssize_t n = pread(m->fds[0], ret->source + done, ret->source_len - done, (off_t)done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		done += (size_t)n;
	}
	ret->source[done] = '\0';
	if (done != ret->source_len) {
		lbd_res_error(res, 400, "bad_message", "The run's source could not be read whole.");
		return -1;
	}
	struct lbd_fail f = { 0 };
	if (lbd_spec_from_wire(&d->cfg, &w->spec, &ret->spec, &f) < 0) {
		lbd_res_fail(res, &f);
		return -1;
	}
	return 0;
}

/* Step 2a, under the turn: the sandbox made to exist and started, its row read, the run's id and ledger names. */
static int begin_run(struct lbd *d, const char *name, struct lbd_sandbox *sb, const struct run_request *rq,
		     struct run_outcome *o, struct lb_store_sandbox *ret_row, struct lbd_fail *f, struct lb_error *err,
		     struct lbd_res *res)
{
	if (lbd_sandbox_ensure(d, sb, &rq->spec, true, &o->er, f) < 0) {
		lbd_res_fail(res, f);
		return -1;
	}
	if (lb_store_sandbox_get(d->store, name, ret_row, NULL) < 0) {
		lbd_res_error(res, 500, "internal", "The sandbox's record vanished during the run.");
		return -1;
	}
	o->run.started_at_ms = lbd_now_ms();
	if (lb_run_id_generate(o->run.started_at_ms, o->run.id, err) < 0) {
		lbd_res_error(res, 500, "internal", "Making a run id failed: %s", err->msg);
		return -1;
	}
	snprintf(o->run.sandbox, sizeof(o->run.sandbox), "%s", name);
	snprintf(o->run.language, sizeof(o->run.language), "%s", rq->lang);
	snprintf(res->log_fields, sizeof(res->log_fields), "run=%s", o->run.id);
	/* A start just recorded its last use as now (lb_store_sandbox_started): one commit less for a new sandbox. */
	if (o->er.started)
		lbd_sandbox_note_use(d, sb);
	else
		lbd_sandbox_touch(d, sb);
	return 0;
}

/* Step 2b: the source written as rel under the sandbox's /tmp (rootfd). The sandbox's /tmp belongs to its user
 * namespace, where host root is unmapped: the file is created with this thread's filesystem ids set to the sandbox's
 * host uid/gid (per-thread credentials; the effective ids and the other threads are untouched), which also means it
 * is written with exactly the sandbox's own rights. */
static int write_source(int rootfd, const char *rel, const struct run_request *rq, const struct lb_store_sandbox *row,
			struct lbd_fail *f, struct lbd_res *res)
{
	setfsgid(row->host_gid);
	setfsuid(row->host_uid);
	int r = lbd_file_write(rootfd, rel, rq->source, rq->source_len, 0644, row->host_uid, row->host_gid, f);
	setfsuid(0);
	setfsgid(0);
	if (r < 0) {
		if (f->status == 413)
			lbd_res_error(res, 413, "disk_full",
				      "The sandbox's /tmp is full, so the source could not be written.");
		else
			lbd_res_fail(res, f);
		return -1;
	}
	return 0;
}

/* Step 2c: the program run on the source at inside; the network refusals it caused counted into o->run. *ret_t0
 * is when it started (monotonic ms). */
static int exec_program(struct lbd *d, const char *name, struct lb_sandbox *live, const struct run_request *rq,
			const struct lb_store_sandbox *row, const char *inside, struct run_outcome *o, uint64_t *ret_t0,
			struct lb_error *err)
{
	const char *argv[] = { rq->python ? "python3" : "bash", inside, NULL };
	const char *env[] = LBD_RUN_ENV_INIT;
	size_t window = (size_t)rq->limit * 4 + 4;
	struct lb_exec_spec es = {
		.argv = argv,
		.env = env,
		.cwd = "/sandbox",
		.timeout_ms = (uint32_t)rq->timeout * 1000,
		.stdout_limit = window,
		.stderr_limit = window,
		.hangup_fd = rq->hangup_fd,
	};
	uint64_t blocked0 = 0, blocked1 = 0;
	bool networked = d->net && row->spec.network != LB_TIER_OFF;
	if (networked)
		lb_net_blocked(d->net, name, &blocked0, NULL);
	*ret_t0 = lbd_mono_ms();
	int r = lb_sandbox_exec(live, &es, &o->x, err);
	/* The sandbox's counters only grow and its runs take turns, so the difference is this run's refusals. */
	if (networked && lb_net_blocked(d->net, name, &blocked1, NULL) == 0 && blocked1 > blocked0)
		o->run.network_blocked = blocked1 - blocked0;
	return r;
}

/* Step 2d: the ledger row filled from the result, logged and recorded. A failure to record is logged only: the
 * program ran and its answer stands. */
static void record_run(struct lbd *d, struct lbd_sandbox *sb, const char *name, const struct run_request *rq,
		       const struct lb_store_sandbox *row, uint64_t t0, struct run_outcome *o, struct lb_error *err)
{
	struct lb_store_run *run = &o->run;
	const struct lb_exec_result *x = &o->x;
	run->duration_ms = x->wall_ms ? x->wall_ms : lbd_mono_ms() - t0;
	run->exited = x->signal == 0 && x->exit_code >= 0;
	run->exit_code = run->exited ? x->exit_code : 0;
	run->signal = x->signal;
	run->timed_out = x->timed_out;
	run->oom_killed = x->oom_killed;
	run->pids_limited = x->pids_limited;
	run->cpu_ms = x->cpu_ms;
	run->peak_memory_bytes = x->peak_memory_bytes;
	run->stdout_bytes = x->stdout_total;
	run->stderr_bytes = x->stderr_total;
	compose_message(x, (uint32_t)rq->timeout, &row->spec, d->policy->limits.pids, run->network_blocked,
			run->message, sizeof(run->message));
	char lf[700];
	snprintf(lf, sizeof(lf),
		 "sandbox=%s run=%s language=%s exit_code=%d signal=%d duration_ms=%llu cpu_ms=%llu "
		 "network_blocked=%llu refused_syscall=%llu refused_filesystem=%llu%s%s%s%s",
		 name, run->id, run->language, run->exited ? run->exit_code : -1, run->signal,
		 (unsigned long long)run->duration_ms, (unsigned long long)run->cpu_ms,
		 (unsigned long long)run->network_blocked, (unsigned long long)x->refused.syscall,
		 (unsigned long long)x->refused.filesystem, run->timed_out ? " timed_out=1" : "",
		 run->oom_killed ? " oom_killed=1" : "", run->pids_limited ? " pids_limited=1" : "",
		 x->hung_up ? " client_gone=1" : "");
	lb_info(lf, "run finished");
	if (lb_store_run_insert(d->store, run, err) < 0) {
		snprintf(lf, sizeof(lf), "sandbox=%s run=%s", name, run->id);
		lb_error(lf, "recording the run in the ledger failed: %s", err->msg);
		lbd_sandbox_touch(d, sb); /* the idle timer still needs the use */
	}
}

/* Step 2, under the sandbox's turn: steps 2a to 2d, the source removed after the program. 0 when the program ran
 * (o->x is then the caller's to free); -1 with res filled when it did not. */
static int run_locked(struct lbd *d, const char *name, struct lbd_sandbox *sb, const struct run_request *rq,
		      struct run_outcome *o, struct lbd_res *res)
{
	struct lbd_fail f = { 0 };
	struct lb_error err = { 0 };
	struct lb_store_sandbox row;
	if (begin_run(d, name, sb, rq, o, &row, &f, &err, res) < 0)
		return -1;
	struct lb_sandbox *live = lbd_sandbox_live(sb);
	int rootfd = lbd_open_sandbox_tmp(lb_sandbox_init_pid(live), &f);
	if (rootfd < 0) {
		lbd_res_fail(res, &f);
		return -1;
	}
	char rel[128], inside[160];
	snprintf(rel, sizeof(rel), ".lensbox-%s/main.%s", o->run.id, rq->python ? "py" : "sh");
	snprintf(inside, sizeof(inside), "/tmp/%s", rel);
	if (write_source(rootfd, rel, rq, &row, &f, res) < 0) {
		close(rootfd);
		return -1;
	}
	uint64_t t0;
	int r = exec_program(d, name, live, rq, &row, inside, o, &t0, &err);
	setfsgid(row.host_gid);
	setfsuid(row.host_uid);
	lbd_file_remove(rootfd, rel);
	setfsuid(0);
	setfsgid(0);
	close(rootfd);		     /* an fd into the sandbox would keep its mounts alive past a stop */
	lbd_sandbox_note_use(d, sb); /* the store's last use comes with the ledger row */
	if (r < 0) {
		char lf[700];
		snprintf(lf, sizeof(lf), "sandbox=%s run=%s error=\"%s\"", name, o->run.id, err.msg);
		lb_error(lf, "running the program failed");
		if (r == -EMFILE || r == -ENFILE) {
			/* lensboxd's own fds (RLIMIT_NOFILE) or the host's (fs.file-max) ran out: a shortage of the
			 * daemon, not a fault of the sandbox, which stays as it is; the run may be tried again. */
			lbd_res_error(
			    res, 503, "busy",
			    "lensboxd ran out of file descriptors during the run (%s); no result was recorded. "
			    "Try again in a moment.",
			    err.msg);
			return -1;
		}
		/* A sandbox whose exec machinery failed may be broken: the next run starts a fresh one. */
		bool was;
		struct lbd_fail f2;
		lbd_sandbox_stop(d, sb, &was, &f2);
		lbd_res_error(res, 500, "internal", "Running the program failed: %s", err.msg);
		return -1;
	}
	record_run(d, sb, name, rq, &row, t0, o, &err);
	return 0;
}

/* Step 2: the run, counted in flight, in the sandbox's turn (in arrival order). 0 when the program ran. */
static int run_in_sandbox(struct lbd *d, const char *name, const struct run_request *rq, struct run_outcome *o,
			  struct lbd_res *res)
{
	const char *why = lbd_cannot_run(d);
	if (why) {
		lbd_res_error(res, 503, "host_unavailable", "This host cannot run sandboxes: %s", why);
		return -1;
	}
	atomic_fetch_add(&d->metrics.runs_in_flight, 1);
	struct lbd_sandbox *sb = lbd_sandbox_acquire(d, name);
	if (!sb) {
		atomic_fetch_sub(&d->metrics.runs_in_flight, 1);
		lbd_res_error(res, 500, "internal", "Out of memory.");
		return -1;
	}
	int r = run_locked(d, name, sb, rq, o, res);
	lbd_sandbox_release(d, sb);
	atomic_fetch_sub(&d->metrics.runs_in_flight, 1);
	return r;
}

/* Step 3: the answer, output cut to the request's limit as valid UTF-8. Frees o->x. */
static void answer_run(const struct run_request *rq, struct run_outcome *o, struct lbd_res *res)
{
	const struct lb_store_run *run = &o->run;
	struct lb_exec_result *x = &o->x;
	const struct lbd_ensure_result *er = &o->er;
	struct lbd_cut out = { 0 }, errc = { 0 };
	if (lbd_cut_output(x->stdout_buf, x->stdout_len, x->stdout_total, (size_t)rq->limit, true, &out) < 0 ||
	    lbd_cut_output(x->stderr_buf, x->stderr_len, x->stderr_total, (size_t)rq->limit, false, &errc) < 0) {
		free(out.text);
		lb_exec_result_free(x);
		lbd_res_error(res, 500, "internal", "Out of memory while preparing the output.");
		return;
	}
	yajl_gen g = lbd_gen_new();
	yajl_gen_map_open(g);
	lbd_gen_str(g, "id", run->id);
	lbd_gen_str(g, "sandbox", run->sandbox);
	lbd_gen_str(g, "language", run->language);
	if (run->exited)
		lbd_gen_int(g, "exit_code", run->exit_code);
	else
		lbd_gen_null(g, "exit_code");
	lbd_gen_int(g, "signal", run->signal);
	lbd_gen_bool(g, "timed_out", run->timed_out);
	lbd_gen_bool(g, "oom_killed", run->oom_killed);
	lbd_gen_bool(g, "pids_limited", run->pids_limited);
	lbd_gen_uint(g, "network_blocked", run->network_blocked);
	gen_refused(g, x, run->network_blocked);
	lbd_gen_uint(g, "duration_ms", run->duration_ms);
	lbd_gen_uint(g, "cpu_ms", run->cpu_ms);
	lbd_gen_uint(g, "peak_memory_bytes", run->peak_memory_bytes);
	lbd_gen_strn(g, "stdout", out.text, out.len);
	lbd_gen_uint(g, "stdout_bytes", run->stdout_bytes);
	lbd_gen_bool(g, "stdout_truncated", out.truncated);
	lbd_gen_strn(g, "stderr", errc.text, errc.len);
	lbd_gen_uint(g, "stderr_bytes", run->stderr_bytes);
	lbd_gen_bool(g, "stderr_truncated", errc.truncated);
	lbd_gen_bool(g, "sandbox_created", er->created);
	lbd_gen_bool(g, "sandbox_started", er->started);
	lbd_gen_str(g, "recreated", er->recreated[0] ? er->recreated : NULL);
	lbd_gen_bool(g, "image_pulled", er->image_pulled);
	if (er->image_pulled)
		lbd_gen_uint(g, "image_pull_ms", er->image_pull_ms);
	lbd_gen_str(g, "message", run->message[0] ? run->message : NULL);
	yajl_gen_map_close(g);
	lbd_gen_finish(g, res, 200);
	snprintf(res->log_fields, sizeof(res->log_fields), "run=%s language=%s exit_code=%d signal=%d run_ms=%llu%s%s",
		 run->id, run->language, run->exited ? run->exit_code : -1, run->signal,
		 (unsigned long long)run->duration_ms, run->timed_out ? " timed_out=1" : "",
		 run->oom_killed ? " oom_killed=1" : "");
	free(out.text);
	free(errc.text);
	lb_exec_result_free(x);
}

void lbd_do_run(struct lbd *d, struct lbp_msg *m, struct lbd_res *res)
{
	const char *name = m->u.run.name;
	struct run_request rq = { .hangup_fd = res->has_channel ? res->channel : 0 };
	struct run_outcome o = { 0 };
	if (read_run_request(d, m, &rq, res) == 0 && run_in_sandbox(d, name, &rq, &o, res) == 0)
		answer_run(&rq, &o, res);
	free(rq.source);
}

void lbd_do_runs_list(struct lbd *d, struct lbp_msg *m, struct lbd_res *res)
{
	const char *sandbox = m->u.runs_list.sandbox[0] ? m->u.runs_list.sandbox : NULL;
	unsigned long limit = m->u.runs_list.limit;
	struct lb_store_run *list = NULL;
	size_t n = 0;
	struct lb_error err = { 0 };
	if (lb_store_runs_list(d->store, sandbox, limit, &list, &n, &err) < 0) {
		lbd_res_error(res, 500, "internal", "Reading the ledger failed: %s", err.msg);
		return;
	}
	yajl_gen g = lbd_gen_new();
	yajl_gen_map_open(g);
	lbd_gen_key(g, "runs");
	yajl_gen_array_open(g);
	for (size_t i = 0; i < n; i++)
		lbd_gen_run(g, &list[i]);
	yajl_gen_array_close(g);
	yajl_gen_map_close(g);
	free(list);
	lbd_gen_finish(g, res, 200);
}

void lbd_do_run_get(struct lbd *d, struct lbp_msg *m, struct lbd_res *res)
{
	const char *id = m->u.run_get.id;
	struct lb_store_run run;
	struct lb_error err = { 0 };
	int r = lb_store_run_get(d->store, id, &run, &err);
	if (r == -ENOENT || r == -EINVAL) {
		lbd_res_error(res, 404, "run_not_found", "There is no run with that id.");
		return;
	}
	if (r < 0) {
		lbd_res_error(res, 500, "internal", "Reading the ledger failed: %s", err.msg);
		return;
	}
	yajl_gen g = lbd_gen_new();
	lbd_gen_run(g, &run);
	lbd_gen_finish(g, res, 200);
}

uint64_t lbd_ledger_prune_every_ms(const struct lbd *d)
{
	/* Once a minute is plenty for days-scale retention; seconds-scale test values are honoured to a tenth. */
	uint64_t every = 60000;
	if (d->cfg.runs_keep_seconds > 0 && d->cfg.runs_keep_seconds * 100 < every)
		every = d->cfg.runs_keep_seconds * 100;
	return every;
}

void lbd_ledger_prune(struct lbd *d)
{
	uint64_t by_age = 0, by_count = 0;
	struct lb_error err = { 0 };
	if (d->cfg.runs_keep_seconds > 0) {
		int64_t before = lbd_now_ms() - (int64_t)(d->cfg.runs_keep_seconds * 1000);
		if (lb_store_runs_prune(d->store, before, &by_age, &err) < 0)
			lb_error(NULL, "pruning the ledger by age: %s", err.msg);
	}
	if (d->cfg.runs_keep_max > 0 && lb_store_runs_prune_keep(d->store, d->cfg.runs_keep_max, &by_count, &err) < 0)
		lb_error(NULL, "pruning the ledger by count: %s", err.msg);
	if (by_age + by_count > 0) {
		char f[96];
		snprintf(f, sizeof(f), "deleted=%llu older=%llu over_max=%llu", (unsigned long long)(by_age + by_count),
			 (unsigned long long)by_age, (unsigned long long)by_count);
		lb_info(f, "ledger pruned");
	}
}

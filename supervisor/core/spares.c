/*
 * spares.c — sandboxes started ahead of time, so that a new conversation's first run does not wait for one to be
 * built (an empty storage filesystem made, a root mounted, cgroups and namespaces set up: ~10 ms, half of what a
 * short Python run takes).
 *
 * Runs in lensboxd (root): one thread of its own keeps spares ready; connection threads take them
 * (lbd_spares_claim, under the claiming sandbox's turn). How many: cfg.spare_sandboxes, or more after a burst of new
 * sandboxes, up to cfg.spare_sandboxes_max (arrivals.c); the surplus is discarded once the burst is a minute old. A
 * spare is a complete sandbox of the spec new sandboxes ask for (image at its current digest, network, cpu, memory and
 * disk) with an empty storage and a host uid of its own, started under the runner key of that uid ("u<uid>"), exactly
 * as a named sandbox would be. Its uid is reserved in the store's spares table before anything is made, so the
 * allocator never hands it out twice, and a crash leaves a record for the next start's reconciliation to clean up.
 *
 * Which spec: the one most new sandboxes asked for among the last SPARE_WINDOW (the config's default spec stands in
 * for the ones not seen yet, and keeps its place on a tie). So a client whose sandboxes all differ from the
 * daemon's defaults in the same way (Lens with its network set to `packages`, say) is served by spares after a few
 * of them, while an odd sandbox now and then does not turn the spares away from what most ask for. Spares of a spec
 * that lost its place are discarded and remade, as those of an image whose digest changed are. Only a spec whose
 * image is here is followed (a spare never pulls).
 *
 * Claiming moves the uid from the spares table to the sandbox's row in one store transaction
 * (lb_store_sandbox_adopt): from then on it is that sandbox, with nothing renamed — the runner key, the cgroup, the
 * mounts and the storage directory are all named after the uid. Only a sandbox that has no storage yet (new, or
 * just recreated) takes a spare, so no files are ever replaced; the uid its row held before owned nothing.
 *
 * Spares are not counted in max_running: they are extra, and cost an idle pid 1, a loop device and ~1 MiB of
 * memory each. A spare whose image digest is no longer the default image's is discarded by the thread.
 *
 * Lock order: a spare is taken out of the list under mu, which is never held while calling the runner or the
 * store's slow paths; mu is taken after table_mu when both are needed (never the other way round).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "lb/log.h"
#include "arrivals.h"
#include "core.h"

/* After failures to make a spare, the thread waits 1 s, then twice as long after each further one, up to this
 * (lbd_spares_retry_ms); it logs the first failure of a series and the one that ends it. */
#define SPARE_RETRY_MAX_MS 30000
/* How often the thread looks at the default image's digest even when nobody claimed anything. */
#define SPARE_CHECK_MS 2000
/* After a claim, the refill waits this long, so it does not compete for the CPU with the run that claimed. */
#define SPARE_SETTLE_MS 200
/* The spares' spec is the most asked for among this many new sandboxes (the default filling the window at start). */
#define SPARE_WINDOW 8
/* The pool is sized by the largest burst of new sandboxes (arrivals within SPARE_BURST_MS of each other) seen in the
 * last SPARE_RATE_WINDOW_MS (arrivals.c). */
#define SPARE_RATE_WINDOW_MS 60000
#define SPARE_BURST_MS	     5000

struct spare {
	struct spare *next;
	uint32_t uid;
	struct lb_sandbox *live;
	struct lb_store_spec spec; /* the default spec when it was made (timers aside) */
	char digest[LB_STORE_DIGEST_MAX + 1];
};

struct lbd_spares {
	pthread_mutex_t mu;
	pthread_cond_t cv; /* signalled on a claim and at stop */
	struct spare *list;
	uint32_t ready;
	bool stop;
	uint64_t claimed_mono;			  /* the last claim, for SPARE_SETTLE_MS */
	struct lb_store_spec want;		  /* what spares are made of: the most asked for in asked[] */
	struct lb_store_spec asked[SPARE_WINDOW]; /* the specs of the last new sandboxes, a ring */
	unsigned next_asked;
	struct lbd_arrivals arrivals; /* when new sandboxes asked for a spare */
	pthread_t thread;
	bool thread_started;
};

/* Stops a spare's sandbox, removes its storage and releases its uid. Never under mu. */
static void discard(struct lbd *d, struct spare *sp, const char *why)
{
	char key[LBD_RUNNER_KEY_MAX], storage[512], lf[700];
	lbd_runner_key(sp->uid, key);
	lbd_storage_path(d, sp->uid, storage, sizeof(storage));
	struct lb_error err = { 0 };
	if (sp->live && lb_sandbox_stop(sp->live, &err) < 0) {
		/* What stop could not release, cleanup removes (the path reconciliation takes after a crash). */
		struct lb_error e2 = { 0 };
		lb_sandbox_cleanup(key, d->cfg.run_dir, &e2);
	}
	sp->live = NULL;
	int r = lb_sandbox_destroy_storage(storage, &err);
	if (r == 0 || r == -ENOENT)
		r = lb_store_held_remove(d->store, LB_STORE_SPARE, sp->uid, &err);
	snprintf(lf, sizeof(lf), "runner=%s reason=%s", key, why);
	if (r < 0 && r != -ENOENT)
		lb_warn(lf, "discarding a spare sandbox failed: %s", err.msg);
	else
		lb_debug(lf, "spare sandbox discarded");
	free(sp);
}

/* Makes one spare of spec. Returns it, or NULL with err set. Never under mu. */
static struct spare *make_one(struct lbd *d, const struct lb_store_spec *spec, struct lb_error *err)
{
	const char *why = lbd_cannot_run(d);
	if (why) {
		lb_error_setx(err, ENOSYS, "this host cannot run sandboxes: %s", why);
		return NULL;
	}
	why = lbd_network_unavailable(d, spec->network);
	if (why) {
		lb_error_setx(err, ENOSYS, "network %s cannot run here: %s", lb_tier_name(spec->network), why);
		return NULL;
	}
	struct lbd_image img;
	/* No pull: a spare is made only from an image that is here; no touch: a spare is not a use. */
	int r = lbd_image_get(d, spec->image, false, false, &img, NULL, err);
	if (r < 0)
		return NULL;
	struct spare *sp = calloc(1, sizeof(*sp));
	if (!sp) {
		lbd_image_release(&img);
		lb_error_setx(err, ENOMEM, "out of memory");
		return NULL;
	}
	sp->spec = *spec;
	snprintf(sp->digest, sizeof(sp->digest), "%s", img.digest);
	if (lb_store_held_add(d->store, LB_STORE_SPARE, lbd_now_ms(), &sp->uid, err) < 0) {
		lbd_image_release(&img);
		free(sp);
		return NULL;
	}
	char key[LBD_RUNNER_KEY_MAX], storage[512];
	lbd_runner_key(sp->uid, key);
	lbd_storage_path(d, sp->uid, storage, sizeof(storage));
	/* A storage left under this uid by a crash belongs to nobody (the uid was free): the spare starts empty. */
	lb_sandbox_destroy_storage(storage, NULL);
	struct lb_sandbox_spec rs;
	lbd_runner_spec(d, &sp->spec, sp->uid, &img, key, storage, &rs);
	char root[PATH_MAX];
	rs.shared_root = lbd_root_get(d, rs.rootfs, root);
	r = lb_sandbox_start(&rs, &sp->live, err);
	lbd_root_put(d, rs.shared_root);
	lbd_image_release(&img);
	if (r >= 0) {
		/* Warming: the first program to run in a new sandbox pays for filling caches: its storage's, and its
		 * root's when the image's shared root is new or the sandbox has a root of its own (roots.c), ~3-5 ms
		 * for Python then. A spare pays it now, with a program that writes nothing, so the conversation's
		 * first run does not. */
		static const char *const argv[] = { "python3", "-c", "pass", NULL };
		static const char *const env[] = LBD_RUN_ENV_INIT;
		struct lb_exec_spec es = { .argv = argv,
					   .env = env,
					   .cwd = "/sandbox",
					   .timeout_ms = 10000,
					   .stdout_limit = 256,
					   .stderr_limit = 256 };
		struct lb_exec_result res = { 0 };
		r = lb_sandbox_exec(sp->live, &es, &res, err);
		if (r >= 0 && (res.exit_code != 0 || res.signal != 0))
			r = lb_error_setx(err, EIO, "python3 -c pass exited with %d (signal %d)", res.exit_code,
					  res.signal);
		lb_exec_result_free(&res);
		if (r < 0) {
			lb_error_wrap(err, "warming spare %s", key);
			struct lb_error e1 = { 0 };
			lb_sandbox_stop(sp->live, &e1);
		}
	}
	if (r < 0) {
		lb_error_wrap(err, "starting spare %s", key);
		if (r != -EEXIST) {
			struct lb_error e2 = { 0 };
			lb_sandbox_cleanup(key, d->cfg.run_dir, &e2);
		}
		sp->live = NULL;
		struct lb_error e3 = { 0 };
		if (lb_sandbox_destroy_storage(storage, &e3) == 0)
			lb_store_held_remove(d->store, LB_STORE_SPARE, sp->uid, &e3);
		free(sp);
		return NULL;
	}
	return sp;
}

/* The digest of image now ("" when it cannot be resolved). */
static void image_digest(struct lbd *d, const char *image, char out[LB_STORE_DIGEST_MAX + 1])
{
	out[0] = '\0';
	struct lbd_image img;
	if (lbd_image_resolve(d, image, &img, NULL) == 0) {
		snprintf(out, LB_STORE_DIGEST_MAX + 1, "%s", img.digest);
		lbd_image_release(&img);
	}
}

/* Whether a spare made of a serves a new sandbox of b: the same image, network, cpu, memory and disk (timers aside:
 * they are the row's). */
static bool same_spec(const struct lb_store_spec *a, const struct lb_store_spec *b)
{
	return strcmp(a->image, b->image) == 0 && a->network == b->network && a->cpu_millicores == b->cpu_millicores &&
	       a->memory_bytes == b->memory_bytes && a->disk_bytes == b->disk_bytes;
}

/* How many spares to keep now (caller holds mu). */
static uint32_t target_locked(struct lbd *d, struct lbd_spares *s, uint64_t now)
{
	uint32_t peak = lbd_arrivals_peak(&s->arrivals, now, SPARE_RATE_WINDOW_MS, SPARE_BURST_MS);
	return lbd_arrivals_spares(peak, d->cfg.spare_sandboxes, d->cfg.spare_sandboxes_max);
}

/* Takes the spares that no longer match the wanted spec, or the digest its image has now, out of the list (caller
 * holds mu). */
static struct spare *take_stale_locked(struct lbd_spares *s, const char *digest)
{
	struct spare *stale = NULL;
	for (struct spare **pp = &s->list; *pp;) {
		struct spare *sp = *pp;
		if (strcmp(sp->digest, digest) != 0 || !same_spec(&sp->spec, &s->want)) {
			*pp = sp->next;
			sp->next = stale;
			stale = sp;
			s->ready--;
		} else
			pp = &sp->next;
	}
	return stale;
}

static void *spares_main(void *arg)
{
	struct lbd *d = arg;
	struct lbd_spares *s = d->spares;
	uint64_t failed_mono = 0;
	uint32_t failures = 0; /* in a row */
	pthread_mutex_lock(&s->mu);
	while (!s->stop) {
		/* Right after a claim, nothing at all: not even the image's digest, whose read would run beside the
		 * claiming sandbox's first run. */
		uint64_t now = lbd_mono_ms();
		if (now - s->claimed_mono < SPARE_SETTLE_MS) {
			lbd_cond_wait_ms(&s->cv, &s->mu, SPARE_SETTLE_MS - (now - s->claimed_mono));
			continue;
		}
		struct lb_store_spec want = s->want;
		pthread_mutex_unlock(&s->mu);
		char digest[LB_STORE_DIGEST_MAX + 1];
		image_digest(d, want.image, digest);
		pthread_mutex_lock(&s->mu);
		if (!same_spec(&want, &s->want)) /* a new sandbox asked for another spec meanwhile */
			continue;
		struct spare *stale = take_stale_locked(s, digest);
		pthread_mutex_unlock(&s->mu);
		while (stale) {
			struct spare *next = stale->next;
			discard(d, stale, "new sandboxes ask for another spec or image");
			stale = next;
		}
		pthread_mutex_lock(&s->mu);
		now = lbd_mono_ms();
		if (now - s->claimed_mono < SPARE_SETTLE_MS) /* claimed while we looked */
			continue;
		bool retry_due = !failures || now - failed_mono >= lbd_spares_retry_ms(failures, SPARE_RETRY_MAX_MS);
		uint32_t target = target_locked(d, s, now);
		if (s->ready > target && s->list) {
			/* The burst that grew the pool is over: one surplus spare goes per pass. */
			struct spare *sp = s->list;
			s->list = sp->next;
			s->ready--;
			pthread_mutex_unlock(&s->mu);
			discard(d, sp, "more spares than new sandboxes lately call for");
			pthread_mutex_lock(&s->mu);
			continue;
		}
		if (s->ready < target && digest[0] && retry_due) {
			pthread_mutex_unlock(&s->mu);
			struct lb_error err = { 0 };
			uint64_t t0 = lbd_mono_ms();
			struct spare *sp = make_one(d, &want, &err);
			char lf[700];
			if (!sp) {
				if (!failures++) {
					snprintf(lf, sizeof(lf), "error=\"%s\" retry_ms=%llu", err.msg,
						 (unsigned long long)lbd_spares_retry_ms(1, SPARE_RETRY_MAX_MS));
					lb_warn(lf, "making a spare sandbox failed");
				}
				failed_mono = lbd_mono_ms();
			} else {
				if (failures) {
					snprintf(lf, sizeof(lf), "failures=%u", failures);
					lb_info(lf, "making spare sandboxes works again");
				}
				failures = 0;
				char key[LBD_RUNNER_KEY_MAX];
				lbd_runner_key(sp->uid, key);
				snprintf(lf, sizeof(lf), "runner=%s duration_ms=%llu", key,
					 (unsigned long long)(lbd_mono_ms() - t0));
				lb_debug(lf, "spare sandbox ready");
			}
			pthread_mutex_lock(&s->mu);
			if (sp) {
				sp->next = s->list;
				s->list = sp;
				s->ready++;
			}
			continue;
		}
		uint64_t wait_ms = SPARE_CHECK_MS;
		if (failures && s->ready < target) { /* wake for the next try, not the next check */
			uint64_t due = failed_mono + lbd_spares_retry_ms(failures, SPARE_RETRY_MAX_MS);
			if (due > now && due - now < wait_ms)
				wait_ms = due - now;
		}
		lbd_cond_wait_ms(&s->cv, &s->mu, wait_ms);
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

int lbd_spares_start(struct lbd *d, struct lb_error *err)
{
	struct lbd_spares *s = calloc(1, sizeof(*s));
	if (!s)
		return lb_error_setx(err, ENOMEM, "out of memory");
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	struct lbd_spec_request defaults;
	lbd_spec_defaults(&d->cfg, &defaults);
	s->want = defaults.spec;
	if (!s->want.disk_bytes)
		s->want.disk_bytes = d->cfg.default_disk_bytes;
	for (unsigned i = 0; i < SPARE_WINDOW; i++)
		s->asked[i] = s->want;
	d->spares = s;
	if (d->cfg.spare_sandboxes == 0)
		return 0;
	int r = pthread_create(&s->thread, NULL, spares_main, d);
	if (r != 0)
		return lb_error_set(err, r, "starting the spares thread");
	s->thread_started = true;
	return 0;
}

void lbd_spares_stop(struct lbd *d)
{
	struct lbd_spares *s = d->spares;
	if (!s)
		return;
	pthread_mutex_lock(&s->mu);
	s->stop = true;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
	if (s->thread_started)
		pthread_join(s->thread, NULL);
	struct spare *list = s->list;
	s->list = NULL;
	s->ready = 0;
	while (list) {
		struct spare *next = list->next;
		discard(d, list, "shutdown");
		list = next;
	}
	d->spares = NULL;
	pthread_cond_destroy(&s->cv);
	pthread_mutex_destroy(&s->mu);
	free(s);
}

int lbd_spares_reconcile(struct lbd *d, struct lb_error *err)
{
	size_t n = 0;
	unsigned failed = 0;
	if (lbd_held_reconcile(d, LB_STORE_SPARE, "a spare sandbox", &n, &failed, err) < 0)
		return lb_error_wrap(err, "listing spares to reconcile");
	if (n) {
		char lf[96];
		snprintf(lf, sizeof(lf), "spares=%zu failed=%u", n, failed);
		lb_info(lf, "removed the spare sandboxes of an earlier instance");
	}
	return 0;
}

/* Records a new sandbox's spec in the window and makes the most asked for the one spares are made of (the current
 * one keeps its place on a tie): true when that changed. Caller holds mu. */
static bool note_asked_locked(struct lbd_spares *s, const struct lb_store_spec *asked)
{
	s->asked[s->next_asked] = *asked;
	s->next_asked = (s->next_asked + 1) % SPARE_WINDOW;
	unsigned best = 0, best_n = 0;
	for (unsigned i = 0; i < SPARE_WINDOW; i++) {
		unsigned n = 0;
		for (unsigned j = 0; j < SPARE_WINDOW; j++)
			n += same_spec(&s->asked[i], &s->asked[j]);
		bool current = same_spec(&s->asked[i], &s->want);
		if (n > best_n || (n == best_n && current)) {
			best = i;
			best_n = n;
		}
	}
	if (same_spec(&s->asked[best], &s->want))
		return false;
	s->want = s->asked[best];
	return true;
}

/* Takes a ready spare of spec (disk 0: the default) at digest out of the pool, or NULL when none matches; either way
 * the arrival of a new sandbox of that spec is noted (the pool's spec and size follow them). Never under mu. */
static struct spare *take(struct lbd *d, const struct lb_store_spec *spec, const char *digest)
{
	struct lbd_spares *s = d->spares;
	if (!s)
		return NULL;
	struct lb_store_spec asked = *spec;
	if (!asked.disk_bytes)
		asked.disk_bytes = d->cfg.default_disk_bytes;
	pthread_mutex_lock(&s->mu);
	struct spare *sp = NULL;
	for (struct spare **pp = &s->list; *pp; pp = &(*pp)->next) {
		struct spare *c = *pp;
		if (same_spec(&c->spec, &asked) && strcmp(c->digest, digest) == 0) {
			*pp = c->next;
			sp = c;
			s->ready--;
			break;
		}
	}
	bool changed = note_asked_locked(s, &asked);
	uint64_t now = lbd_mono_ms();
	uint32_t before = target_locked(d, s, now);
	lbd_arrivals_note(&s->arrivals, now);
	if (target_locked(d, s, now) > before)
		changed = true;
	if (sp || changed) {
		s->claimed_mono = lbd_mono_ms();
		pthread_cond_signal(&s->cv);
	}
	pthread_mutex_unlock(&s->mu);
	return sp;
}

/* A spare whose hand-over to `name` failed in the store: logged and discarded (its uid is still the spare's). */
static void hand_over_failed(struct lbd *d, struct spare *sp, const char *name, const struct lb_error *err)
{
	char lf[700];
	snprintf(lf, sizeof(lf), "sandbox=%s error=\"%s\"", name, err->msg);
	lb_error(lf, "handing a spare to the sandbox failed; starting one instead");
	discard(d, sp, "hand-over failed");
}

bool lbd_spares_claim(struct lbd *d, const char *name, const struct lb_store_sandbox *row, const char *digest,
		      struct lb_sandbox **ret_live, uint32_t *ret_uid)
{
	struct spare *sp = take(d, &row->spec, digest);
	if (!sp)
		return false;
	struct lb_error err = { 0 };
	if (lb_store_sandbox_adopt(d->store, name, sp->uid, NULL, &err) < 0) {
		hand_over_failed(d, sp, name, &err);
		return false;
	}
	*ret_live = sp->live;
	*ret_uid = sp->uid;
	free(sp);
	return true;
}

bool lbd_spares_create(struct lbd *d, const char *name, const struct lb_store_spec *spec, const char *digest,
		       int64_t now_ms, struct lb_store_sandbox *ret_row, struct lb_sandbox **ret_live)
{
	struct spare *sp = take(d, spec, digest);
	if (!sp)
		return false;
	struct lb_error err = { 0 };
	const struct lb_store_from_held from = { .holder = LB_STORE_SPARE, .uid = sp->uid };
	if (lb_store_sandbox_create_held(d->store, name, spec, NULL, now_ms, &from, ret_row, NULL, &err) < 0) {
		hand_over_failed(d, sp, name, &err);
		return false;
	}
	*ret_live = sp->live;
	free(sp);
	return true;
}

void lbd_spares_counts(struct lbd *d, uint32_t *ret_ready, uint32_t *ret_target)
{
	struct lbd_spares *s = d->spares;
	*ret_target = lbd_arrivals_spares(0, d->cfg.spare_sandboxes, d->cfg.spare_sandboxes_max);
	*ret_ready = 0;
	if (!s)
		return;
	pthread_mutex_lock(&s->mu);
	*ret_ready = s->ready;
	*ret_target = target_locked(d, s, lbd_mono_ms());
	pthread_mutex_unlock(&s->mu);
}

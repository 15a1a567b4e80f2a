/*
 * doctor_files.c — `lensbox doctor`'s checks of lensboxd's files: the configuration (parsed by lensboxd's own
 * supervisor/config.c, linked into the CLI), the policy directory (every file through `lensbox policy check`'s
 * lbc_policy_check(), then lb_policy_load() as lensboxd loads it), the image store and the default image
 * (lb_images, as lensboxd opens it).
 *
 * Runs in the CLI process; reads only, except that opening an existing image store makes its missing subdirectories,
 * as lensboxd's first start would. The store is not opened when images_dir does not exist.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "doctor.h"
#include "policy.h"
#include "lb/cleanup.h"
#include "lb/images.h"

static void check_config(struct lbc_doctor *d)
{
	lbd_config_defaults(&d->cfg);
	struct lb_error err = { 0 };
	struct stat st;
	bool present = stat(d->config_path, &st) == 0;
	if (lbd_config_load(&d->cfg, d->config_path, true, &err) < 0 || lbd_config_validate(&d->cfg, &err) < 0) {
		lbc_doc_add(d, "config", LBC_DOC_FAIL, "lensboxd refuses to start with a configuration it cannot parse",
			    "edit the file: every key, its default and range are in docs/configuration.md", "%s: %s",
			    d->config_path, err.msg);
		lbd_config_defaults(&d->cfg); /* the other checks go on with the defaults */
		return;
	}
	lbc_doc_add(d, "config", LBC_DOC_OK, NULL, NULL, "%s%s", d->config_path,
		    present ? "" : " (absent: the defaults)");
}

static void check_policy(struct lbc_doctor *d)
{
	const char *dir = d->cfg.policy_dir;
	struct lbc_findings f = { 0 };
	struct lb_error err = { 0 };
	static const char why[] = "lensboxd runs no sandbox without its policy (runs get 503 host_unavailable)";
	char fix[LBC_DOC_TEXT];
	snprintf(fix, sizeof(fix), "correct the file named, then `lensbox policy check %s` lists what is left", dir);
	if (lbc_policy_check(dir, false, &f, &err) < 0) {
		lbc_doc_add(d, "policy", LBC_DOC_FAIL, why, fix, "%s", err.msg);
	} else if (lbc_findings_errors(&f) > 0) {
		const struct lbc_finding *first = NULL;
		for (size_t i = 0; i < f.n && !first; i++)
			if (!f.v[i].note)
				first = &f.v[i];
		if (first) /* always: there are errors */
			lbc_doc_add(d, "policy", LBC_DOC_FAIL, why, fix, "%zu problem(s) in %s, the first %s:%u: %s",
				    lbc_findings_errors(&f), dir, first->file, first->line, first->reason);
	}
	lbc_findings_free(&f);

	/* What lensboxd does at start (supervisor/main.c, open_state), worded as its health's why_not. */
	if (lb_policy_load(dir, &d->policy, &err) < 0) {
		d->policy = NULL;
		snprintf(d->policy_error, sizeof(d->policy_error), "the policy in %s could not be loaded: %s", dir,
			 err.msg);
		bool reported = d->n > 0 && strcmp(d->v[d->n - 1].name, "policy") == 0;
		if (!reported)
			lbc_doc_add(d, "policy", LBC_DOC_FAIL, why, fix, "%s", d->policy_error);
		return;
	}
	bool reported = d->n > 0 && strcmp(d->v[d->n - 1].name, "policy") == 0;
	if (!reported)
		lbc_doc_add(d, "policy", LBC_DOC_OK, NULL, NULL, "%s: %zu syscalls allowed, Landlock ABI >= %d", dir,
			    d->policy->seccomp_rules, d->policy->landlock.min_abi);
}

void lbc_doctor_files(struct lbc_doctor *d)
{
	check_config(d);
	check_policy(d);
}

static void images_free(struct lb_images **s)
{
	if (*s)
		lb_images_free(*s);
}

void lbc_doctor_images(struct lbc_doctor *d)
{
	const char *dir = d->cfg.images_dir, *name = d->cfg.default_image;
	char fix[LBC_DOC_TEXT];
	snprintf(fix, sizeof(fix),
		 "lensbox-image import \"$(images/recipes/python)\" --name %s (or `lensbox image pull REF` with "
		 "lensboxd running)",
		 name);
	static const char why[] = "runs that name no image get 503 image_unavailable until the default image is there";
	struct stat st;
	if (stat(dir, &st) < 0) {
		lbc_doc_add(d, "images", LBC_DOC_WARN, why, fix, "%s does not exist yet; default image %s missing", dir,
			    name);
		return;
	}
	if (!S_ISDIR(st.st_mode)) {
		lbc_doc_add(d, "images", LBC_DOC_FAIL, "lensboxd cannot open its image store",
			    "set images_dir in lensboxd.conf to a directory", "%s is not a directory", dir);
		return;
	}
	__attribute__((cleanup(images_free))) struct lb_images *s = NULL;
	struct lb_error err = { 0 };
	if (lb_images_open(dir, NULL, &s, &err) < 0) {
		lbc_doc_add(d, "images", LBC_DOC_FAIL, "lensboxd cannot open its image store",
			    "see the reason; the store must be a directory root owns", "%s: %s", dir, err.msg);
		return;
	}
	struct lb_image_info *info = NULL;
	if (lb_image_inspect(s, name, &info, &err) < 0) {
		lbc_doc_add(d, "images", LBC_DOC_WARN, why, fix, "store %s; default image %s: %s", dir, name, err.msg);
		return;
	}
	const char *warning = lb_image_info_warning(info);
	if (warning)
		lbc_doc_add(d, "images", LBC_DOC_WARN, why, fix, "store %s; default image %s: %s", dir, name, warning);
	else
		lbc_doc_add(d, "images", LBC_DOC_OK, NULL, NULL, "store %s; default image %s present", dir, name);
	lb_image_info_free(info);
}

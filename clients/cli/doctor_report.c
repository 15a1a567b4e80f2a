/*
 * doctor_report.c — `lensbox doctor`'s report: the list the checks (doctor_*.c) append to, the verdict worded as
 * lensboxd's /v1/health `why_not`, and its two presentations (a line a check, with `why:` and `fix:` under each that
 * is not ok; or one JSON document).
 *
 * Runs in the CLI process; no privilege, no I/O but stdout. Values may quote files (policy lines, image names): the
 * text form passes them through lbc_term_safe().
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yajl/yajl_gen.h>

#include "doctor.h"
#include "format.h"

void lbc_doc_add(struct lbc_doctor *d, const char *name, enum lbc_doc_status status, const char *why, const char *fix,
		 const char *fmt, ...)
{
	if (d->n >= LBC_DOC_MAX)
		return;
	struct lbc_doc_check *c = &d->v[d->n++];
	memset(c, 0, sizeof(*c));
	snprintf(c->name, sizeof(c->name), "%s", name);
	c->status = status;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(c->value, sizeof(c->value), fmt, ap);
	va_end(ap);
	snprintf(c->why, sizeof(c->why), "%s", why && status != LBC_DOC_OK ? why : "");
	snprintf(c->fix, sizeof(c->fix), "%s", fix && status != LBC_DOC_OK ? fix : "");
}

void lbc_doc_path(const struct lbc_doctor *d, const char *path, char *buf, size_t size)
{
	int n = snprintf(buf, size, "%s%s", d->root, path);
	if (n < 0 || (size_t)n >= size)
		buf[0] = '\0'; /* too long: opening "" fails, which reads as "missing" */
}

const char *lbc_doc_why_not(const struct lbc_doctor *d)
{
	/* The order of lensboxd's lbd_cannot_run(): the policy first, then the host facts. */
	if (!d->policy)
		return d->policy_error;
	if (d->facts_done && d->facts.why_not[0])
		return d->facts.why_not;
	return NULL;
}

static const char *status_name(enum lbc_doc_status s)
{
	switch (s) {
	case LBC_DOC_OK:
		return "ok";
	case LBC_DOC_WARN:
		return "warn";
	case LBC_DOC_FAIL:
		return "fail";
	}
	return "?";
}

static void gen_str(yajl_gen g, const char *k, const char *v)
{
	yajl_gen_string(g, (const unsigned char *)k, strlen(k));
	if (v)
		yajl_gen_string(g, (const unsigned char *)v, strlen(v));
	else
		yajl_gen_null(g);
}

static void print_json(const struct lbc_doctor *d, enum lbc_doc_status worst)
{
	yajl_gen g = yajl_gen_alloc(NULL);
	yajl_gen_config(g, yajl_gen_beautify, 1);
	yajl_gen_map_open(g);
	gen_str(g, "status", status_name(worst));
	const char *why = lbc_doc_why_not(d);
	yajl_gen_string(g, (const unsigned char *)"can_run", 7);
	yajl_gen_bool(g, why == NULL);
	gen_str(g, "why_not", why);
	const struct lb_host_facts *f = &d->facts;
	gen_str(g, "cgroup_layout",
		f->cgroup == LB_CGROUP_V2			    ? "v2"
		: f->cgroup == LB_CGROUP_V1 && f->cgroup_v2_mounted ? "hybrid"
		: f->cgroup == LB_CGROUP_V1			    ? "v1"
								    : "none");
	gen_str(g, "simulated_root", d->root[0] ? d->root : NULL);
	yajl_gen_string(g, (const unsigned char *)"checks", 6);
	yajl_gen_array_open(g);
	for (size_t i = 0; i < d->n; i++) {
		const struct lbc_doc_check *c = &d->v[i];
		yajl_gen_map_open(g);
		gen_str(g, "name", c->name);
		gen_str(g, "status", status_name(c->status));
		gen_str(g, "value", c->value);
		gen_str(g, "why", c->why[0] ? c->why : NULL);
		gen_str(g, "fix", c->fix[0] ? c->fix : NULL);
		yajl_gen_map_close(g);
	}
	yajl_gen_array_close(g);
	yajl_gen_map_close(g);
	const unsigned char *buf;
	size_t len;
	yajl_gen_get_buf(g, &buf, &len);
	fwrite(buf, 1, len, stdout);
	yajl_gen_free(g);
}

static void print_text(const struct lbc_doctor *d, enum lbc_doc_status worst)
{
	if (d->root[0])
		printf("simulated host: files under %s\n", d->root);
	for (size_t i = 0; i < d->n; i++) {
		const struct lbc_doc_check *c = &d->v[i];
		/* values quote files (policy lines, image names) that need not be printable */
		char *value = lbc_term_safe(c->value, strlen(c->value), false);
		printf("%-5s %-16s %s\n",
		       c->status == LBC_DOC_OK	   ? "ok"
		       : c->status == LBC_DOC_WARN ? "WARN"
						   : "FAIL",
		       c->name, value ? value : "?");
		free(value);
		if (c->status != LBC_DOC_OK) {
			printf("      why: %s\n", c->why);
			printf("      fix: %s\n", c->fix);
		}
	}
	const char *why = lbc_doc_why_not(d);
	printf("\nsandboxes can run: %s%s%s\n", why ? "no: " : "yes", why ? why : "",
	       worst == LBC_DOC_WARN ? " (with the warnings above)" : "");
}

void lbc_doc_print(const struct lbc_doctor *d, enum lbc_doc_status worst, bool json)
{
	if (json)
		print_json(d, worst);
	else
		print_text(d, worst);
}

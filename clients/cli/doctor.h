/*
 * doctor.h — `lensbox doctor`: can this host run lensboxd, checked without lensboxd. Each concern is one file that
 * appends checks to one report: doctor_kernel.c (kernel, namespaces, Landlock, seccomp, cgroups, loop devices, from
 * the runner's lb_host_probe_at(), the function lensboxd's /v1/health takes its `why_not` from), doctor_net.c
 * (nftables, the netfilter pieces the tiers use, flowtables, veth, probed in a throwaway network namespace),
 * doctor_host.c (the uid range against the account files, free disk, the socket directory) and doctor_files.c (the
 * configuration, the policy files, the image store and the default image). doctor.c runs them in order;
 * doctor_report.c keeps the list and prints it.
 *
 * Runs in the CLI process, normally as root (the probes that make a network namespace need it); changes nothing on
 * the host. Every check that is not ok says what is wrong, why it matters and the command that fixes it.
 *
 * LENSBOX_DOCTOR_ROOT (a directory laid out like /: proc/, sys/, dev/, etc/) and LENSBOX_DOCTOR_LANDLOCK_ABI replace
 * the host's files and the kernel's Landlock answer: the tests simulate broken hosts with them. Both are reported in
 * the output when set, so a simulated report cannot pass for the host's.
 */
#ifndef LBC_DOCTOR_H
#define LBC_DOCTOR_H

#include <stdbool.h>
#include <stddef.h>

#include "config.h"
#include "lb/policy.h"
#include "lb/runner.h"

enum lbc_doc_status {
	LBC_DOC_OK,
	LBC_DOC_WARN, /* sandboxes run, something is lost (a network tier, speed, the default image) */
	LBC_DOC_FAIL, /* sandboxes cannot run, or lensboxd cannot start */
};

#define LBC_DOC_MAX  40
#define LBC_DOC_TEXT 512

struct lbc_doc_check {
	char name[32];
	enum lbc_doc_status status;
	char value[LBC_DOC_TEXT]; /* what was found */
	char why[LBC_DOC_TEXT];	  /* not ok: why it matters */
	char fix[LBC_DOC_TEXT];	  /* not ok: the command (or edit) that fixes it */
};

struct lbc_doctor {
	const char *config_path;
	const char *root; /* "" for the host itself */
	int landlock_abi; /* -1: the kernel's */
	struct lbd_config cfg;
	struct lb_policy *policy; /* NULL when it did not load */
	char policy_error[1024];  /* as lensboxd's (lensboxd.h), so the two cut a long message alike */
	struct lb_host_facts facts;
	bool facts_done;
	struct lbc_doc_check v[LBC_DOC_MAX];
	size_t n;
};

/* Appends one check (dropped silently past LBC_DOC_MAX, which is above the number of checks). why and fix may be NULL
 * for an ok check. */
void lbc_doc_add(struct lbc_doctor *d, const char *name, enum lbc_doc_status status, const char *why, const char *fix,
		 const char *fmt, ...) __attribute__((format(printf, 6, 7)));

/* root + path into buf (root "" : path itself). */
void lbc_doc_path(const struct lbc_doctor *d, const char *path, char *buf, size_t size);

/* lensboxd's answer to "can sandboxes run here" (NULL: yes), worded as its /v1/health `why_not`. */
const char *lbc_doc_why_not(const struct lbc_doctor *d);

void lbc_doctor_files(struct lbc_doctor *d);  /* config, policy: first (the others need them) */
void lbc_doctor_kernel(struct lbc_doctor *d); /* host facts, cgroups */
void lbc_doctor_net(struct lbc_doctor *d);
void lbc_doctor_host(struct lbc_doctor *d);
void lbc_doctor_images(struct lbc_doctor *d);

/* Prints the report (doctor_report.c): text, or JSON when json. worst is the worst status of any check. */
void lbc_doc_print(const struct lbc_doctor *d, enum lbc_doc_status worst, bool json);

/* `lensbox doctor [--json] [--config FILE]`: 0 all ok, 1 a blocking failure, 3 warnings only. */
int lbc_cmd_doctor(const char *config_path, bool json);

#endif

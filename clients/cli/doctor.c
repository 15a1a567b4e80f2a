/*
 * doctor.c — `lensbox doctor [--json] [--config FILE]`: runs the checks of doctor_*.c in order and prints the report
 * (doctor_report.c).
 *
 * Runs in the CLI process (root for the full picture); reads only. Exit status: 0 every check ok, 1 at least one
 * failure (sandboxes cannot run, or lensboxd would not start), 3 warnings only (sandboxes run, something is lost),
 * 2 a usage error as for every other command. The JSON's `why_not` is worded exactly as lensboxd's /v1/health one.
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "doctor.h"

#define EXIT_WARNINGS 3

int lbc_cmd_doctor(const char *config_path, bool json)
{
	struct lbc_doctor *d = calloc(1, sizeof(*d));
	if (!d) {
		fputs("lensbox: out of memory\n", stderr);
		return 1;
	}
	d->config_path = config_path;
	const char *root = getenv("LENSBOX_DOCTOR_ROOT");
	d->root = root && root[0] == '/' ? root : "";
	const char *abi = getenv("LENSBOX_DOCTOR_LANDLOCK_ABI");
	d->landlock_abi = abi && abi[0] ? atoi(abi) : -1;
	if (geteuid() != 0 && !json)
		fputs("lensbox: not root: the namespace probes and some files may be out of reach\n", stderr);

	lbc_doctor_files(d);
	lbc_doctor_kernel(d);
	lbc_doctor_net(d);
	lbc_doctor_host(d);
	lbc_doctor_images(d);

	enum lbc_doc_status worst = LBC_DOC_OK;
	for (size_t i = 0; i < d->n; i++)
		if (d->v[i].status > worst)
			worst = d->v[i].status;
	lbc_doc_print(d, worst, json);
	lb_policy_free(d->policy);
	free(d);
	return worst == LBC_DOC_FAIL ? 1 : worst == LBC_DOC_WARN ? EXIT_WARNINGS : 0;
}

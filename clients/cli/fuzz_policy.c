/*
 * fuzz_policy.c — libFuzzer target for the parser `lensbox policy explain` runs on a seccomp profile it did not write
 * (ours edited by hand, or a Docker profile passed with --docker-profile): lbc_seccomp_resolve(), and the scanner
 * `policy check` turns a seccomp error's JSON path into a line with, lbc_json_path_line().
 *
 * Build: cmake -DLENSBOX_FUZZ=ON -DCMAKE_C_COMPILER=clang; run: ./fuzz_cli_policy clients/cli/fuzz-corpus-policy.
 * Besides memory errors (ASan/UBSan) it checks the promise of policy.h: the rules come back sorted and each once.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "policy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > 1 << 20)
		return 0;
	char *text = malloc(size + 1);
	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';
	struct lbc_sc_profile p = { 0 };
	struct lb_error err;
	if (lbc_seccomp_resolve(text, size, "amd64", &p, &err) == 0) {
		for (size_t i = 1; i < p.n; i++) {
			int c = strcmp(p.v[i - 1].name, p.v[i].name);
			if (c > 0 || (c == 0 && strcmp(p.v[i - 1].action, p.v[i].action) == 0 &&
				      strcmp(p.v[i - 1].args, p.v[i].args) == 0))
				abort();
		}
		lbc_sc_profile_free(&p);
	}
	/* the seccomp error's path -> line scanner runs on text no parser accepted */
	unsigned line = lbc_json_path_line(text, size, "syscalls[1].names[0]");
	unsigned lines = 1;
	for (size_t i = 0; i < size; i++)
		lines += text[i] == '\n';
	if (line > lines)
		abort();
	free(text);
	return 0;
}

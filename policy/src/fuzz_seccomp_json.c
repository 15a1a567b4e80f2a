/*
 * fuzz_seccomp_json.c — libFuzzer target for lb_seccomp_compile_json(): any bytes must give either a compiled
 * filter or an error, never a crash, a leak or unbounded work. Built only with -DLENSBOX_FUZZ=ON and clang:
 *
 *   cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DLENSBOX_FUZZ=ON && cmake --build build-fuzz -t
 * fuzz_seccomp_json build-fuzz/policy/fuzz_seccomp_json policy/fuzz-corpus/seccomp
 */
#include "lb/policy-parse.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > LB_POLICY_FILE_MAX)
		return 0;
	char *text = malloc(size + 1);
	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';
	struct sock_fprog prog = { 0 };
	struct lb_error err = { 0 };
	if (lb_seccomp_compile_json(text, size, "fuzz.json", &prog, NULL, &err) == 0)
		free(prog.filter);
	free(text);
	return 0;
}

/*
 * main.c — lensboxd's entry: one binary, two processes (docs/architecture.md).
 *
 * Started by systemd (or an admin) as root, it is the core (core/main.c). The core starts the API process by
 * exec'ing this same binary with `--api-process` and three inherited descriptors (core/api_proc.c); that flag is
 * internal, not for people: without those descriptors the API process refuses to start.
 */
#include <string.h>

#include "api.h"
#include "core.h"

int main(int argc, char **argv)
{
	if (argc == 2 && strcmp(argv[1], "--api-process") == 0)
		return lbd_api_main();
	return lbd_core_main(argc, argv);
}

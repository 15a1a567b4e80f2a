/*
 * image.h — `lensbox image ...`: the image verbs of the command-line client (pull, import, ls, rm, inspect), over
 * lensboxd's /v1/images API (docs/api.md).
 *
 * Runs in the CLI process with the invoking user's privileges; holds none of its own.
 */
#ifndef LBC_IMAGE_H
#define LBC_IMAGE_H

#include <stdbool.h>

struct lbc_image_opts {
	const char *socket;
	bool json;	  /* print lensboxd's JSON answer */
	const char *name; /* import --name */
};

/* argv[0] is the verb. Returns the process exit status: 0 success, 1 failure, 2 usage. */
int lbc_cmd_image(const struct lbc_image_opts *o, int argc, char **argv);

#endif

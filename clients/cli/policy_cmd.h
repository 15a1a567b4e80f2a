/*
 * policy_cmd.h — `lensbox policy check|explain|diff`: the reviewers' verbs of the command-line client. They read
 * a policy directory (and, for diff, the live nftables table) and need no lensboxd.
 *
 * Runs in the CLI process with the invoking user's privileges; `diff` needs CAP_NET_ADMIN to read the table.
 */
#ifndef LBC_POLICY_CMD_H
#define LBC_POLICY_CMD_H

#include <stdbool.h>

struct lbc_policy_opts {
	bool json;		    /* a JSON document instead of tables */
	bool no_nft;		    /* check: do not load the templates into nftables */
	const char *config;	    /* diff: lensboxd.conf to read the pool, services_uid and dns_upstream from */
	const char *docker_profile; /* explain: another Docker profile than the one the CLI carries */
};

/* argv[0] is the verb. Returns the process exit status: 0 clean, 1 problems found (or failure), 2 usage. */
int lbc_cmd_policy(const struct lbc_policy_opts *o, int argc, char **argv);

#endif

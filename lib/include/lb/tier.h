/*
 * tier.h — the network tier: the one definition every part uses (runner, netfilter, store, supervisor, tools).
 *
 * Pure data and two lookups; no privilege, no state. An unknown name is refused (-EINVAL) everywhere the same way:
 * nothing maps a name it does not know to `off` or to any other tier.
 */
#ifndef LB_TIER_H
#define LB_TIER_H

enum lb_tier {
	LB_TIER_OFF = 0,      /* only lo: no network at all */
	LB_TIER_PACKAGES = 1, /* the package registries of packages.list, through lensboxd's relay */
	LB_TIER_WEB = 2,      /* TCP 80 and 443 of public addresses */
	LB_TIER_COUNT
};

/* "off", "packages", "web"; NULL for a value outside the enum. */
const char *lb_tier_name(enum lb_tier t);
/* The tier called name, into *ret; -EINVAL (ret untouched) for anything else, NULL included. */
int lb_tier_parse(const char *name, enum lb_tier *ret);

#endif

/*
 * language.h — the language of a run: the one definition every part uses (API process, core, store, metrics).
 *
 * Pure data and two lookups; no privilege, no state. An unknown name is refused (-EINVAL) everywhere the same way.
 */
#ifndef LB_LANGUAGE_H
#define LB_LANGUAGE_H

enum lb_language {
	LB_LANGUAGE_PYTHON = 0, /* python3 runs the source */
	LB_LANGUAGE_BASH = 1,	/* bash runs the source */
	LB_LANGUAGE_COUNT
};

/* "python", "bash"; NULL for a value outside the enum. */
const char *lb_language_name(enum lb_language l);
/* The language called name, into *ret; -EINVAL (ret untouched) for anything else, NULL included. */
int lb_language_parse(const char *name, enum lb_language *ret);

#endif

/*
 * jtree.h — small helpers over yajl's tree for the CLI's readers of JSON it did not write (nft's listings, seccomp
 * profiles): a cleanup for a parsed tree and a key lookup that tolerates any node. Header-only, no state.
 */
#ifndef LBC_JTREE_H
#define LBC_JTREE_H

#include <string.h>
#include <yajl/yajl_tree.h>

static inline void lbc_jtree_freep(yajl_val *v)
{
	if (*v)
		yajl_tree_free(*v);
}
#define _cleanup_jtree_ __attribute__((cleanup(lbc_jtree_freep)))

/* The value of key in object o; NULL when o is no object or has no such key. */
static inline yajl_val lbc_jtree_get(yajl_val o, const char *key)
{
	if (!YAJL_IS_OBJECT(o))
		return NULL;
	for (size_t i = 0; i < o->u.object.len; i++)
		if (strcmp(o->u.object.keys[i], key) == 0)
			return o->u.object.values[i];
	return NULL;
}

/* A string node's text, or fallback for anything else. */
static inline const char *lbc_jtree_str(yajl_val v, const char *fallback)
{
	return YAJL_IS_STRING(v) && v->u.string ? v->u.string : fallback;
}

#endif

/*
 * info.c — struct lb_image_info: freeing and copying it, the warning it calls for, and the cache of the parsed
 * image.json of the images inspected lately, so that a new sandbox does not read and parse the file again (0.1-0.2 ms
 * of a cold start on a machine whose caches the last program left cold).
 *
 * Runs as root in lensboxd or lensbox-image, in any thread (the cache has a lock of its own, held only to look up or
 * replace an entry; the store's other state is its caller's). What is cached is image.json's content alone: an image
 * directory is complete before it is renamed into images/ and its image.json is never rewritten, so an entry stays
 * right for as long as the file is the same file. Each lookup is keyed by the file's stat (device, inode, size, mtime
 * and ctime), taken by the caller: a removed and re-imported image is a new file, hence a miss. The usage records
 * (pinned, last_used) and the names change at any time: the caller reads them, they are never cached.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "internal.h"

static void strv_free(char **v)
{
	if (!v)
		return;
	for (char **p = v; *p; p++)
		free(*p);
	free(v);
}

void lb_image_info_free(struct lb_image_info *info)
{
	if (!info)
		return;
	free(info->rootfs);
	free(info->architecture);
	free(info->variant);
	free(info->os);
	free(info->working_dir);
	strv_free(info->env);
	strv_free(info->names);
	free(info);
}

void lb_image_list_free(struct lb_image_info **list, size_t n)
{
	for (size_t i = 0; i < n; i++)
		lb_image_info_free(list[i]);
	free(list);
}

const char *lb_image_info_warning(const struct lb_image_info *info)
{
	if (!info->has_python3 && !info->has_bash)
		return "this image has neither python3 nor bash: run_python and run_bash will fail";
	if (!info->has_python3)
		return "this image has no python3: run_python will fail";
	if (!info->has_bash)
		return "this image has no bash: run_bash will fail";
	return NULL;
}

static char *dup_or_null(const char *s, bool *failed)
{
	char *d = s ? strdup(s) : NULL;
	if (s && !d)
		*failed = true;
	return d;
}

/* A copy of info with no names; NULL when out of memory. */
static struct lb_image_info *info_dup(const struct lb_image_info *info)
{
	struct lb_image_info *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	*c = *info;
	c->rootfs = c->architecture = c->variant = c->os = c->working_dir = NULL;
	c->env = c->names = NULL;
	c->n_names = 0;
	bool failed = false;
	c->rootfs = dup_or_null(info->rootfs, &failed);
	c->architecture = dup_or_null(info->architecture, &failed);
	c->variant = dup_or_null(info->variant, &failed);
	c->os = dup_or_null(info->os, &failed);
	c->working_dir = dup_or_null(info->working_dir, &failed);
	c->names = calloc(1, sizeof(char *));
	c->env = calloc(info->n_env + 1, sizeof(char *));
	for (size_t i = 0; c->env && i < info->n_env; i++)
		c->env[i] = dup_or_null(info->env[i], &failed);
	if (failed || !c->names || !c->env) {
		lb_image_info_free(c);
		return NULL;
	}
	return c;
}

static bool same_file(const struct lbi_info_entry *e, const struct stat *st)
{
	return e->dev == st->st_dev && e->ino == st->st_ino && e->size == st->st_size &&
	       e->mtim.tv_sec == st->st_mtim.tv_sec && e->mtim.tv_nsec == st->st_mtim.tv_nsec &&
	       e->ctim.tv_sec == st->st_ctim.tv_sec && e->ctim.tv_nsec == st->st_ctim.tv_nsec;
}

void lbi_info_cache_init(struct lbi_info_cache *c)
{
	memset(c, 0, sizeof(*c));
	pthread_mutex_init(&c->mu, NULL);
}

void lbi_info_cache_free(struct lbi_info_cache *c)
{
	for (size_t i = 0; i < LBI_INFO_CACHE_SIZE; i++)
		lb_image_info_free(c->e[i].info);
	pthread_mutex_destroy(&c->mu);
	memset(c, 0, sizeof(*c));
}

int lbi_info_cache_get(struct lbi_info_cache *c, const char *hex, const struct stat *st, struct lb_image_info **ret)
{
	int r = -ENOENT;
	pthread_mutex_lock(&c->mu);
	for (size_t i = 0; i < LBI_INFO_CACHE_SIZE && r == -ENOENT; i++) {
		const struct lbi_info_entry *e = &c->e[i];
		if (e->info && strcmp(e->hex, hex) == 0 && same_file(e, st))
			r = (*ret = info_dup(e->info)) ? 0 : -ENOMEM;
	}
	pthread_mutex_unlock(&c->mu);
	return r;
}

void lbi_info_cache_put(struct lbi_info_cache *c, const char *hex, const struct stat *st,
			const struct lb_image_info *info)
{
	struct lb_image_info *copy = info_dup(info);
	if (!copy)
		return; /* not cached: only the next lookup's time is lost */
	pthread_mutex_lock(&c->mu);
	struct lbi_info_entry *e = &c->e[c->next];
	c->next = (c->next + 1) % LBI_INFO_CACHE_SIZE;
	struct lb_image_info *old = e->info;
	snprintf(e->hex, sizeof(e->hex), "%s", hex);
	e->dev = st->st_dev;
	e->ino = st->st_ino;
	e->size = st->st_size;
	e->mtim = st->st_mtim;
	e->ctim = st->st_ctim;
	e->info = copy;
	pthread_mutex_unlock(&c->mu);
	lb_image_info_free(old);
}

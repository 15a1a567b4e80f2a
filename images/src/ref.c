/*
 * ref.c — image references parsed the way Docker does.
 *
 *   python                          docker.io/library/python:latest
 *   python:3.12-slim                docker.io/library/python:3.12-slim
 *   ns/app@sha256:<64 hex>          docker.io/ns/app@sha256:…
 *   localhost:5000/python:3.12-slim localhost:5000/python:3.12-slim
 *
 * The first component is a registry when it contains "." or ":" or is "localhost" and more components follow.
 * Repository components are lowercase alphanumerics joined by ".", "_", "__" or "-"; tags are
 * [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}. Pure code; runs anywhere, no privilege.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

/* Every copy below is bounded by a length check before it: the buffers in struct lb_image_ref are sized for the
 * longest valid reference, so a truncation warning here cannot fire at run time. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif

static bool component_ok(const char *s, size_t n)
{
	if (n == 0 || (!islower((unsigned char)s[0]) && !isdigit((unsigned char)s[0])))
		return false;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (islower(c) || isdigit(c))
			continue;
		if (c != '.' && c != '_' && c != '-')
			return false;
		/* separators sit between alphanumerics; "__" is the one allowed double */
		if (i + 1 >= n)
			return false;
		unsigned char d = (unsigned char)s[i + 1];
		if (c == '_' && d == '_' && i + 2 < n &&
		    (islower((unsigned char)s[i + 2]) || isdigit((unsigned char)s[i + 2]))) {
			i++;
			continue;
		}
		if (c == '-') {
			while (i + 1 < n && s[i + 1] == '-')
				i++;
			if (i + 1 >= n)
				return false;
			d = (unsigned char)s[i + 1];
		}
		if (!islower(d) && !isdigit(d))
			return false;
	}
	return true;
}

static bool domain_ok(const char *s, size_t n)
{
	size_t colon = n;
	for (size_t i = 0; i < n; i++)
		if (s[i] == ':') {
			colon = i;
			break;
		}
	if (colon == 0 || colon > 253)
		return false;
	/* dot-separated labels, each starting and ending with an alphanumeric ("..", ".x", "x-" are not hosts) */
	for (size_t i = 0; i < colon; i++) {
		unsigned char c = (unsigned char)s[i];
		bool label_start = i == 0 || s[i - 1] == '.', label_end = i + 1 == colon || s[i + 1] == '.';
		if (isalnum(c))
			continue;
		if (c == '.' && !label_start && !label_end)
			continue;
		if (c == '-' && !label_start && !label_end)
			continue;
		return false;
	}
	if (colon < n) {
		if (colon + 1 == n || n - colon - 1 > 5)
			return false;
		for (size_t i = colon + 1; i < n; i++)
			if (!isdigit((unsigned char)s[i]))
				return false;
	}
	return true;
}

int lb_image_ref_parse(const char *s, struct lb_image_ref *ret, struct lb_error *err)
{
	struct lb_image_ref r = { 0 };
	if (!s || !*s || strlen(s) > 512)
		return lb_error_setx(err, EINVAL, "image reference is empty or longer than 512 bytes");
	char buf[513];
	snprintf(buf, sizeof(buf), "%s", s);

	char *at = strchr(buf, '@');
	if (at) {
		char hex[65];
		if (lbi_digest_hex(at + 1, hex) < 0)
			return lb_error_setx(err, EINVAL, "image reference '%.200s': digest is not sha256:<64 hex>", s);
		snprintf(r.digest, sizeof(r.digest), "%s", at + 1);
		*at = '\0';
	}
	char *slash = strrchr(buf, '/');
	char *colon = strrchr(buf, ':');
	if (colon && (!slash || colon > slash)) {
		const char *tag = colon + 1;
		size_t tl = strlen(tag);
		if (tl == 0 || tl > 128 || !(isalnum((unsigned char)tag[0]) || tag[0] == '_'))
			return lb_error_setx(err, EINVAL, "image reference '%.200s': invalid tag", s);
		for (size_t i = 0; i < tl; i++)
			if (!isalnum((unsigned char)tag[i]) && tag[i] != '_' && tag[i] != '.' && tag[i] != '-')
				return lb_error_setx(err, EINVAL, "image reference '%.200s': invalid tag", s);
		snprintf(r.tag, sizeof(r.tag), "%s", tag);
		*colon = '\0';
	}

	const char *name = buf;
	const char *first_slash = strchr(name, '/');
	if (first_slash) {
		size_t n = (size_t)(first_slash - name);
		bool is_domain =
		    memchr(name, '.', n) || memchr(name, ':', n) || (n == 9 && !strncmp(name, "localhost", 9));
		if (is_domain) {
			if (!domain_ok(name, n))
				return lb_error_setx(err, EINVAL, "image reference '%.200s': invalid registry", s);
			snprintf(r.domain, sizeof(r.domain), "%.*s", (int)n, name);
			name = first_slash + 1;
		}
	}
	if (!r.domain[0] || !strcmp(r.domain, "index.docker.io") || !strcmp(r.domain, "registry-1.docker.io"))
		snprintf(r.domain, sizeof(r.domain), "docker.io");
	if (strlen(name) > 255 || !*name)
		return lb_error_setx(err, EINVAL, "image reference '%.200s': repository name empty or too long", s);
	for (const char *p = name;;) {
		const char *e = strchrnul(p, '/');
		if (!component_ok(p, (size_t)(e - p)))
			return lb_error_setx(err, EINVAL,
					     "image reference '%.200s': invalid repository name (lowercase letters, "
					     "digits and . _ - separators)",
					     s);
		if (!*e)
			break;
		p = e + 1;
	}
	if (!strcmp(r.domain, "docker.io") && !strchr(name, '/'))
		snprintf(r.path, sizeof(r.path), "library/%s", name);
	else
		snprintf(r.path, sizeof(r.path), "%s", name);
	if (!r.tag[0] && !r.digest[0])
		snprintf(r.tag, sizeof(r.tag), "latest");
	snprintf(r.full, sizeof(r.full), "%s/%s%s%s%s%s", r.domain, r.path, r.tag[0] ? ":" : "", r.tag,
		 r.digest[0] ? "@" : "", r.digest);
	*ret = r;
	return 0;
}

/*
 * pull.c — fetches an image from a registry with the OCI distribution API (libcurl) into the store's blob layout,
 * then imports it like any local layout.
 *
 * Runs as root in lensboxd or lensbox-image; the network part needs no privilege, and every byte it receives is
 * hostile: manifests are bounded and hashed, blobs are hashed and size-checked before they are renamed into
 * <root>/layout/blobs/sha256/<hex>, so nothing unverified ever sits under a digest name.
 *
 *   GET /v2/<name>/manifests/<tag|digest>   (Accept: OCI index/manifest, Docker list/manifest)
 *     401 + WWW-Authenticate: Bearer realm,service,scope -> GET realm?service=&scope= (basic auth there when the
 *         credentials file has this registry) -> {"token"|"access_token"} -> retry with "Authorization: Bearer"
 *     401 + WWW-Authenticate: Basic -> retry with the credentials file's user:password
 *   an index -> pick linux/<host arch> (manifest.c) -> GET that manifest by digest
 *   GET /v2/<name>/blobs/<digest> for the config and each missing layer, at most max_parallel at once; a partial
 *     download (<hex>.partial) resumes with a Range request; redirects (to a CDN) are followed by hand, and
 *     Authorization is sent only to the registry's own scheme://host:port.
 *
 * HTTPS is the default; plain HTTP only for registries listed in insecure_registries. Proxies come from the
 * environment (libcurl reads http_proxy, https_proxy, no_proxy). Blobs stay in the layout after the import, so a
 * second image sharing a layer downloads it once.
 */
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yajl/yajl_tree.h>

#include "lb/cleanup.h"
#include "lb/fileio.h"

#include "internal.h"
#include "manifest.h"

#define ACCEPT_MANIFESTS                                                                                \
	"Accept: application/vnd.oci.image.index.v1+json, application/vnd.oci.image.manifest.v1+json, " \
	"application/vnd.docker.distribution.manifest.list.v2+json, "                                   \
	"application/vnd.docker.distribution.manifest.v2+json"
#define MAX_REDIRECTS 5
#define TOKEN_MAX     ((size_t)64 * 1024)

struct puller {
	struct lb_images *s;
	const struct lb_pull_opts *o;
	struct lb_image_ref ref;
	char base[600];		   /* scheme://host[:port] of the registry */
	char origin[600];	   /* the same, as libcurl normalises it, for comparisons */
	char auth[TOKEN_MAX + 64]; /* "Authorization: …" header, "" when anonymous */
	char basic[1024];	   /* base64 user:password from the credentials file, "" when none */
	int layoutfd;
	struct lb_error *err;
	bool cancelled; /* the store's watcher asked to stop */
};

/* ---- small helpers ---- */

static void curl_freep(CURL **c)
{
	if (*c)
		curl_easy_cleanup(*c);
}

static void slist_freep(struct curl_slist **l)
{
	if (*l)
		curl_slist_free_all(*l);
}

/* scheme://host:port of url, as libcurl parses it; "" when it cannot be parsed. */
static void url_origin(const char *url, char *out, size_t size)
{
	out[0] = '\0';
	CURLU *u = curl_url();
	if (!u)
		return;
	char *scheme = NULL, *host = NULL, *port = NULL;
	if (curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK && curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == 0 &&
	    curl_url_get(u, CURLUPART_HOST, &host, 0) == 0 &&
	    curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) == 0)
		snprintf(out, size, "%s://%s:%s", scheme, host, port);
	curl_free(scheme);
	curl_free(host);
	curl_free(port);
	curl_url_cleanup(u);
}

static bool is_insecure(const struct puller *p)
{
	for (const char *const *r = p->o ? p->o->insecure_registries : NULL; r && *r; r++)
		if (!strcmp(*r, p->ref.domain))
			return true;
	return false;
}

static void setup_common(struct puller *p, CURL *c)
{
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L); /* redirects are ours: see auth_for() */
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, is_insecure(p) ? "http,https" : "https");
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 30L);
	curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
	curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 60L);
	curl_easy_setopt(c, CURLOPT_USERAGENT, "lensbox/" LENSBOX_VERSION);
	if (p->o && p->o->ca_file)
		curl_easy_setopt(c, CURLOPT_CAINFO, p->o->ca_file);
}

/* The Authorization header goes only to the registry itself, never to a host a redirect names. */
static const char *auth_for(const struct puller *p, const char *url)
{
	char o[600];
	url_origin(url, o, sizeof(o));
	return p->auth[0] && !strcmp(o, p->origin) ? p->auth : NULL;
}

/* ---- buffered GET (manifests, tokens) ---- */

struct membuf {
	char *data;
	size_t len, max;
	bool overflow;
};

static size_t mem_write(char *ptr, size_t size, size_t n, void *ud)
{
	struct membuf *m = ud;
	size_t len = size * n;
	if (m->len + len > m->max) {
		m->overflow = true;
		return 0;
	}
	char *nd = realloc(m->data, m->len + len + 1);
	if (!nd)
		return 0;
	m->data = nd;
	memcpy(m->data + m->len, ptr, len);
	m->len += len;
	m->data[m->len] = '\0';
	return len;
}

struct headers {
	char www_auth[2048];
	char content_type[256];
};

static size_t header_cb(char *buf, size_t size, size_t n, void *ud)
{
	struct headers *h = ud;
	size_t len = size * n;
	char line[2048];
	size_t l = len < sizeof(line) - 1 ? len : sizeof(line) - 1;
	memcpy(line, buf, l);
	line[l] = '\0';
	line[strcspn(line, "\r\n")] = '\0';
	if (!strncasecmp(line, "HTTP/", 5)) /* a new response (after a redirect): forget the previous headers */
		h->www_auth[0] = h->content_type[0] = '\0';
	else if (!strncasecmp(line, "WWW-Authenticate:", 17))
		snprintf(h->www_auth, sizeof(h->www_auth), "%s", line + 17 + strspn(line + 17, " "));
	else if (!strncasecmp(line, "Content-Type:", 13))
		snprintf(h->content_type, sizeof(h->content_type), "%s", line + 13 + strspn(line + 13, " "));
	return len;
}

/* GETs url into *body (at most max bytes) following up to 5 redirects; auth sent per auth_for(). basic, when set,
 * replaces it with HTTP basic auth (token requests). Returns the final status or a negative errno. */
static long http_get(struct puller *p, const char *url, const char *accept, const char *basic, size_t max,
		     struct membuf *body, struct headers *h)
{
	char cur[4096];
	snprintf(cur, sizeof(cur), "%s", url);
	for (int hop = 0; hop <= MAX_REDIRECTS; hop++) {
		__attribute__((cleanup(curl_freep))) CURL *c = curl_easy_init();
		__attribute__((cleanup(slist_freep))) struct curl_slist *hdrs = NULL;
		if (!c)
			return -ENOMEM;
		setup_common(p, c);
		free(body->data);
		*body = (struct membuf){ .max = max };
		*h = (struct headers){ 0 };
		curl_easy_setopt(c, CURLOPT_URL, cur);
		curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, mem_write);
		curl_easy_setopt(c, CURLOPT_WRITEDATA, body);
		curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, header_cb);
		curl_easy_setopt(c, CURLOPT_HEADERDATA, h);
		if (accept)
			hdrs = curl_slist_append(hdrs, accept);
		char auth[sizeof(p->auth) + 32];
		char o[600];
		url_origin(cur, o, sizeof(o));
		if (basic && basic[0] && hop == 0) {
			snprintf(auth, sizeof(auth), "Authorization: Basic %s", basic);
			hdrs = curl_slist_append(hdrs, auth);
		} else if (!basic && auth_for(p, cur)) {
			hdrs = curl_slist_append(hdrs, p->auth);
		}
		curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
		CURLcode cr = curl_easy_perform(c);
		if (cr != CURLE_OK) {
			if (body->overflow)
				return lb_error_setx(p->err, EFBIG, "GET %.300s: response larger than %zu bytes", cur,
						     max);
			return lb_error_setx(p->err, EIO, "GET %.300s: %s", cur, curl_easy_strerror(cr));
		}
		long status = 0;
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
		if (status >= 300 && status < 400) {
			char *loc = NULL;
			curl_easy_getinfo(c, CURLINFO_REDIRECT_URL, &loc);
			if (!loc || strlen(loc) >= sizeof(cur))
				return lb_error_setx(p->err, EBADMSG, "GET %.300s: redirect without a usable Location",
						     cur);
			snprintf(cur, sizeof(cur), "%s", loc);
			continue;
		}
		return status;
	}
	return lb_error_setx(p->err, ELOOP, "GET %.300s: more than %d redirects", url, MAX_REDIRECTS);
}

/* ---- authentication ---- */

/* Finds key="value" (or key=value) in a WWW-Authenticate challenge. */
static bool challenge_param(const char *ch, const char *key, char *out, size_t size)
{
	size_t kl = strlen(key);
	for (const char *p = ch; (p = strcasestr(p, key)); p += kl) {
		if ((p != ch && p[-1] != ' ' && p[-1] != ',') || p[kl] != '=')
			continue;
		const char *v = p + kl + 1;
		size_t n;
		if (*v == '"') {
			v++;
			n = strcspn(v, "\"");
		} else {
			n = strcspn(v, ", ");
		}
		if (n >= size)
			return false;
		memcpy(out, v, n);
		out[n] = '\0';
		return true;
	}
	return false;
}

/* A value that may go into an HTTP header: visible ASCII only (no CR, LF, spaces or control bytes). */
static bool header_safe(const char *v)
{
	for (; *v; v++)
		if (*v < 0x21 || *v > 0x7e)
			return false;
	return true;
}

static int authenticate(struct puller *p, const char *challenge)
{
	if (!strncasecmp(challenge, "Basic", 5)) {
		if (!p->basic[0])
			return lb_error_setx(p->err, EACCES, "%s asks for a password and the credentials file has none",
					     p->ref.domain);
		snprintf(p->auth, sizeof(p->auth), "Authorization: Basic %s", p->basic);
		return 0;
	}
	if (strncasecmp(challenge, "Bearer", 6) != 0)
		return lb_error_setx(p->err, EACCES, "%s: unsupported authentication challenge '%.100s'", p->ref.domain,
				     challenge);
	char realm[1024], service[512] = "", scope[512] = "";
	if (!challenge_param(challenge, "realm", realm, sizeof(realm)))
		return lb_error_setx(p->err, EBADMSG, "%s: bearer challenge without a realm", p->ref.domain);
	challenge_param(challenge, "service", service, sizeof(service));
	if (!challenge_param(challenge, "scope", scope, sizeof(scope)))
		snprintf(scope, sizeof(scope), "repository:%s:pull", p->ref.path);
	/* The token service gets the password too (as Docker does), so it must be reached as safely as the registry. */
	if (strncmp(realm, "https://", 8) != 0 && !(is_insecure(p) && !strncmp(realm, "http://", 7)))
		return lb_error_setx(p->err, EACCES, "%s: token realm %.200s is not https", p->ref.domain, realm);

	__attribute__((cleanup(curl_freep))) CURL *esc = curl_easy_init();
	if (!esc)
		return -ENOMEM;
	char *es = curl_easy_escape(esc, service, 0), *sc = curl_easy_escape(esc, scope, 0);
	char url[3072];
	snprintf(url, sizeof(url), "%s%sservice=%s&scope=%s", realm, strchr(realm, '?') ? "&" : "?", es ? es : "",
		 sc ? sc : "");
	curl_free(es);
	curl_free(sc);

	struct membuf body = { 0 };
	struct headers h;
	long status = http_get(p, url, NULL, p->basic, TOKEN_MAX, &body, &h);
	_cleanup_free_ char *data = body.data;
	if (status < 0)
		return lb_error_wrap(p->err, "token service");
	if (status != 200)
		return lb_error_setx(p->err, EACCES, "token service %.200s answered HTTP %ld", realm, status);
	yajl_val v = data ? yajl_tree_parse(data, NULL, 0) : NULL;
	const char *tok_path[] = { "token", NULL }, *acc_path[] = { "access_token", NULL };
	yajl_val t = v ? yajl_tree_get(v, tok_path, yajl_t_string) : NULL;
	if (!t && v)
		t = yajl_tree_get(v, acc_path, yajl_t_string);
	int r = 0;
	if (!t || !*t->u.string || strlen(t->u.string) > TOKEN_MAX || !header_safe(t->u.string))
		r = lb_error_setx(p->err, EBADMSG, "token service %.200s: no usable token in the answer", realm);
	else
		snprintf(p->auth, sizeof(p->auth), "Authorization: Bearer %s", t->u.string);
	if (v)
		yajl_tree_free(v);
	return r;
}

/* GET with one authentication round on 401. */
static long registry_get(struct puller *p, const char *url, const char *accept, size_t max, struct membuf *body,
			 struct headers *h)
{
	long status = http_get(p, url, accept, NULL, max, body, h);
	if (status == 401 && h->www_auth[0]) {
		char challenge[sizeof(h->www_auth)];
		snprintf(challenge, sizeof(challenge), "%s", h->www_auth);
		int r = authenticate(p, challenge);
		if (r < 0)
			return r;
		status = http_get(p, url, accept, NULL, max, body, h);
	}
	return status;
}

/* Credentials file: Docker's config.json shape, {"auths": {"host:port": {"auth": base64} | {"username","password"}}}.
 */
static int load_credentials(struct puller *p)
{
	if (!p->o || !p->o->credentials_file)
		return 0;
	_cleanup_free_ char *buf = NULL;
	size_t len;
	int r = lb_read_file_at(AT_FDCWD, p->o->credentials_file, 1 << 20, &buf, &len);
	if (r < 0)
		return lb_error_set(p->err, r, "reading credentials %s", p->o->credentials_file);
	yajl_val v = yajl_tree_parse(buf, NULL, 0);
	if (!v)
		return lb_error_setx(p->err, EBADMSG, "credentials %s: invalid JSON", p->o->credentials_file);
	const char *path[] = { "auths", p->ref.domain, NULL };
	yajl_val entry = yajl_tree_get(v, path, yajl_t_object);
	const char *ap[] = { "auth", NULL }, *up[] = { "username", NULL }, *pp[] = { "password", NULL };
	yajl_val a = entry ? yajl_tree_get(entry, ap, yajl_t_string) : NULL;
	yajl_val u = entry ? yajl_tree_get(entry, up, yajl_t_string) : NULL;
	yajl_val pw = entry ? yajl_tree_get(entry, pp, yajl_t_string) : NULL;
	if (a && strlen(a->u.string) < sizeof(p->basic) && header_safe(a->u.string))
		snprintf(p->basic, sizeof(p->basic), "%s", a->u.string);
	else if (u && pw) {
		char plain[600];
		int n = snprintf(plain, sizeof(plain), "%s:%s", u->u.string, pw->u.string);
		if (n > 0 && (size_t)n < sizeof(plain) && (size_t)n * 4 / 3 + 4 < sizeof(p->basic)) {
			static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
			size_t o = 0;
			for (int i = 0; i < n; i += 3) {
				unsigned x = (unsigned)(unsigned char)plain[i] << 16;
				if (i + 1 < n)
					x |= (unsigned)(unsigned char)plain[i + 1] << 8;
				if (i + 2 < n)
					x |= (unsigned char)plain[i + 2];
				p->basic[o++] = b64[(x >> 18) & 63];
				p->basic[o++] = b64[(x >> 12) & 63];
				p->basic[o++] = (char)(i + 1 < n ? b64[(x >> 6) & 63] : '=');
				p->basic[o++] = (char)(i + 2 < n ? b64[x & 63] : '=');
			}
			p->basic[o] = '\0';
		}
	}
	yajl_tree_free(v);
	return 0;
}

/* ---- blobs ---- */

static int store_verified(struct puller *p, const void *data, size_t len, const char *hex)
{
	/* The temporary file is this thread's own: pulls on several threads may store the same blob at once (the same
	 * content, so whichever rename comes last is as good), but a shared temporary name lets one rename the
	 * other's file away under it. */
	char name[100], tmp[200], suffix[64];
	snprintf(name, sizeof(name), "blobs/sha256/%s", hex);
	lbi_unique_suffix(suffix, sizeof(suffix));
	snprintf(tmp, sizeof(tmp), "blobs/sha256/.%s.%s", hex, suffix);
	_cleanup_close_ int fd = openat(p->layoutfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0)
		return lb_error_set(p->err, errno, "writing blob %s", hex);
	int r = lb_write_all(fd, data, len);
	if (r < 0 || renameat(p->layoutfd, tmp, p->layoutfd, name) < 0) {
		r = r < 0 ? r : -errno;
		unlinkat(p->layoutfd, tmp, 0);
		return lb_error_set(p->err, r, "writing blob %s", hex);
	}
	return 0;
}

static bool blob_present(struct puller *p, const char *hex, uint64_t size)
{
	char name[100];
	struct stat st;
	snprintf(name, sizeof(name), "blobs/sha256/%s", hex);
	return fstatat(p->layoutfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
	       (uint64_t)st.st_size == size;
}

struct dl {
	struct puller *p;
	const struct lbi_blob *b;
	CURL *c;
	struct curl_slist *hdrs;
	int fd; /* <hex>.partial, locked */
	uint64_t start, got;
	char url[4096];
	int hops;
	bool discard; /* body of a redirect or error: not written */
	bool restart; /* the server ignored our Range: start from zero */
	bool write_failed;
	bool reauthed; /* a 401 was answered with a fresh token once already */
};

static size_t dl_write(char *ptr, size_t size, size_t n, void *ud)
{
	struct dl *d = ud;
	size_t len = size * n;
	long status = 0;
	curl_easy_getinfo(d->c, CURLINFO_RESPONSE_CODE, &status);
	if (status != 200 && status != 206)
		return len; /* redirect or error page: ignored, the status decides */
	if (status == 200 && d->start > 0 && !d->restart) {
		d->restart = true;
		d->start = 0;
		if (ftruncate(d->fd, 0) < 0)
			return 0;
	}
	if (d->start + d->got + len > d->b->size) {
		d->write_failed = true; /* more bytes than the descriptor says: refuse rather than store */
		return 0;
	}
	if (lb_write_all(d->fd, ptr, len) < 0) {
		d->write_failed = true;
		return 0;
	}
	d->got += len;
	if (d->p->o && d->p->o->progress)
		d->p->o->progress(d->b->hex, d->start + d->got, d->b->size, d->p->o->progress_ud);
	if (lbi_watch(d->p->s, LB_IMAGE_DOWNLOADING, d->b->hex, d->start + d->got, d->b->size)) {
		d->p->cancelled = true;
		return 0; /* libcurl ends the transfer with CURLE_WRITE_ERROR */
	}
	return len;
}

static int dl_start(struct dl *d, CURLM *m)
{
	struct puller *p = d->p;
	if (d->c) {
		curl_multi_remove_handle(m, d->c);
		curl_easy_cleanup(d->c);
	}
	curl_slist_free_all(d->hdrs);
	d->hdrs = NULL;
	d->c = curl_easy_init();
	if (!d->c)
		return -ENOMEM;
	setup_common(p, d->c);
	struct stat st;
	if (fstat(d->fd, &st) < 0)
		return -errno;
	d->start = (uint64_t)st.st_size;
	d->got = 0;
	d->restart = false;
	curl_easy_setopt(d->c, CURLOPT_URL, d->url);
	curl_easy_setopt(d->c, CURLOPT_WRITEFUNCTION, dl_write);
	curl_easy_setopt(d->c, CURLOPT_WRITEDATA, d);
	curl_easy_setopt(d->c, CURLOPT_PRIVATE, d);
	if (d->start > 0 && d->start < d->b->size) {
		char range[64];
		snprintf(range, sizeof(range), "%llu-", (unsigned long long)d->start);
		curl_easy_setopt(d->c, CURLOPT_RANGE, range);
	}
	const char *auth = auth_for(p, d->url);
	if (auth)
		d->hdrs = curl_slist_append(d->hdrs, auth);
	curl_easy_setopt(d->c, CURLOPT_HTTPHEADER, d->hdrs);
	return curl_multi_add_handle(m, d->c) == CURLM_OK ? 0 : -EIO;
}

/* Handles one finished transfer: 1 when it needs another round (redirect), 0 when the blob is in place. */
static int dl_done(struct dl *d, CURLM *m, CURLcode cr)
{
	struct puller *p = d->p;
	long status = 0;
	curl_easy_getinfo(d->c, CURLINFO_RESPONSE_CODE, &status);
	if (cr != CURLE_OK) {
		if (d->write_failed) {
			/* an oversized answer is not worth resuming */
			char partial[120];
			snprintf(partial, sizeof(partial), "blobs/sha256/%s.partial", d->b->hex);
			unlinkat(p->layoutfd, partial, 0);
		}
		return lb_error_setx(p->err, d->write_failed ? EBADMSG : EIO, "blob sha256:%s: %s", d->b->hex,
				     d->write_failed ? "more bytes than its descriptor's size"
						     : curl_easy_strerror(cr));
	}
	if (status >= 300 && status < 400) {
		char *loc = NULL;
		curl_easy_getinfo(d->c, CURLINFO_REDIRECT_URL, &loc);
		if (!loc || strlen(loc) >= sizeof(d->url) || ++d->hops > MAX_REDIRECTS)
			return lb_error_setx(p->err, EBADMSG, "blob sha256:%s: bad or too many redirects", d->b->hex);
		snprintf(d->url, sizeof(d->url), "%s", loc);
		int r = dl_start(d, m);
		return r < 0 ? lb_error_set(p->err, r, "blob sha256:%s: following a redirect", d->b->hex) : 1;
	}
	if (status == 401 && !d->reauthed) {
		/* The token expired during a long pull: ask the registry for a fresh challenge and try once more. */
		d->reauthed = true;
		char url[700];
		snprintf(url, sizeof(url), "%s/v2/", p->base);
		struct membuf body = { 0 };
		struct headers h;
		long st = http_get(p, url, NULL, NULL, 4096, &body, &h);
		free(body.data);
		if (st == 401 && h.www_auth[0]) {
			char challenge[sizeof(h.www_auth)];
			snprintf(challenge, sizeof(challenge), "%s", h.www_auth);
			int r = authenticate(p, challenge);
			if (r < 0)
				return r;
			d->hops = 0;
			snprintf(d->url, sizeof(d->url), "%s/v2/%s/blobs/sha256:%s", p->base, p->ref.path, d->b->hex);
			r = dl_start(d, m);
			return r < 0 ? lb_error_set(p->err, r, "blob sha256:%s: retrying", d->b->hex) : 1;
		}
	}
	if (status != 200 && status != 206)
		return lb_error_setx(p->err, EIO, "blob sha256:%s: HTTP %ld", d->b->hex, status);
	char got[65];
	uint64_t size = 0;
	int r = lbi_sha256_fd(d->fd, d->b->size, got, &size);
	char partial[120], name[100];
	snprintf(partial, sizeof(partial), "blobs/sha256/%s.partial", d->b->hex);
	snprintf(name, sizeof(name), "blobs/sha256/%s", d->b->hex);
	if (r < 0 || size != d->b->size || strcmp(got, d->b->hex) != 0) {
		unlinkat(p->layoutfd, partial, 0);
		return lb_error_setx(p->err, EBADMSG, "blob sha256:%s: downloaded content is %llu bytes, sha256:%s",
				     d->b->hex, (unsigned long long)size, r < 0 ? "?" : got);
	}
	if (renameat(p->layoutfd, partial, p->layoutfd, name) < 0)
		return lb_error_set(p->err, errno, "blob sha256:%s: publishing", d->b->hex);
	return 0;
}

/* Opens and locks <hex>.partial for d. When another pull holds it, waits for that pull to finish with it: returns 1
 * when the blob is then complete, else takes over the (possibly new) partial file. */
static int open_partial(struct puller *p, struct dl *d, const char *partial)
{
	for (int attempt = 0; attempt < 3; attempt++) {
		d->fd = openat(p->layoutfd, partial, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0644);
		if (d->fd < 0)
			return lb_error_set(p->err, errno, "blob sha256:%s: opening %s", d->b->hex, partial);
		if (flock(d->fd, LOCK_EX | LOCK_NB) == 0)
			return 0;
		/* Blocking here stalls our other transfers, but a concurrent pull of the same blob is rare. */
		int r = flock(d->fd, LOCK_EX) < 0 ? -errno : 0;
		close(d->fd);
		d->fd = -1;
		if (r < 0)
			return lb_error_set(p->err, r, "blob sha256:%s: waiting for another pull", d->b->hex);
		if (blob_present(p, d->b->hex, d->b->size))
			return 1;
	}
	return lb_error_setx(p->err, EBUSY, "blob sha256:%s: another pull keeps downloading it", d->b->hex);
}

static int download_blobs(struct puller *p, const struct lbi_blob *blobs, size_t n)
{
	unsigned par = p->o && p->o->max_parallel ? p->o->max_parallel : 3;
	if (par > 16)
		par = 16;
	_cleanup_free_ struct dl *dls = calloc(n, sizeof(*dls));
	if (!dls)
		return lb_error_set(p->err, ENOMEM, "downloads");
	CURLM *m = curl_multi_init();
	if (!m) {
		// cppcheck-suppress memleak ; NOLINTNEXTLINE(clang-analyzer-unix.Malloc): dls is _cleanup_free_
		return lb_error_set(p->err, ENOMEM, "curl_multi_init");
	}
	size_t next = 0, active = 0, done = 0;
	int r = 0;
	for (size_t i = 0; i < n; i++)
		dls[i] = (struct dl){ .p = p, .b = &blobs[i], .fd = -1 };
	while (r == 0 && done < n) {
		while (next < n && active < par) {
			struct dl *d = &dls[next++];
			if (blob_present(p, d->b->hex, d->b->size)) {
				done++; /* shared with an image pulled before (verified when it was stored) */
				continue;
			}
			char partial[120];
			snprintf(partial, sizeof(partial), "blobs/sha256/%s.partial", d->b->hex);
			r = open_partial(p, d, partial);
			if (r < 0)
				break;
			if (r == 1) {
				done++; /* another pull finished it while we waited */
				r = 0;
				continue;
			}
			struct stat pst;
			if (fstat(d->fd, &pst) == 0 && (uint64_t)pst.st_size >= d->b->size) {
				/* A leftover as long as the blob (or longer): keep it only if it is the blob. */
				char got[65], name[100];
				uint64_t sz = 0;
				snprintf(name, sizeof(name), "blobs/sha256/%s", d->b->hex);
				if ((uint64_t)pst.st_size == d->b->size &&
				    lbi_sha256_fd(d->fd, d->b->size, got, &sz) == 0 && !strcmp(got, d->b->hex) &&
				    renameat(p->layoutfd, partial, p->layoutfd, name) == 0) {
					close(d->fd);
					d->fd = -1;
					done++;
					continue;
				}
				if (ftruncate(d->fd, 0) < 0) {
					r = lb_error_set(p->err, errno, "blob sha256:%s: truncating %s", d->b->hex,
							 partial);
					break;
				}
			}
			snprintf(d->url, sizeof(d->url), "%s/v2/%s/blobs/sha256:%s", p->base, p->ref.path, d->b->hex);
			int rr = dl_start(d, m);
			if (rr < 0) {
				r = lb_error_set(p->err, rr, "blob sha256:%s: starting", d->b->hex);
				break;
			}
			active++;
		}
		if (r < 0 || active == 0)
			break;
		int running = 0;
		if (curl_multi_perform(m, &running) != CURLM_OK) {
			r = lb_error_setx(p->err, EIO, "curl_multi_perform");
			break;
		}
		CURLMsg *msg;
		int left;
		while (r == 0 && (msg = curl_multi_info_read(m, &left))) {
			if (msg->msg != CURLMSG_DONE)
				continue;
			struct dl *d = NULL;
			curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&d);
			int rr = dl_done(d, m, msg->data.result);
			if (rr < 0)
				r = rr;
			else if (rr == 0) {
				curl_multi_remove_handle(m, d->c);
				curl_easy_cleanup(d->c);
				d->c = NULL;
				active--;
				done++;
			}
		}
		if (r == 0 && !p->cancelled && lbi_watch(p->s, LB_IMAGE_DOWNLOADING, NULL, 0, 0))
			p->cancelled = true; /* checked even while a registry sends nothing */
		if (p->cancelled) {
			r = lb_error_setx(p->err, ECANCELED, "cancelled while downloading");
			break;
		}
		if (r == 0 && running > 0)
			curl_multi_poll(m, NULL, 0, 250, NULL);
	}
	if (p->cancelled)
		r = lb_error_setx(p->err, ECANCELED, "cancelled while downloading");
	for (size_t i = 0; i < n; i++) {
		if (dls[i].fd >= 0 && p->cancelled) {
			/* A cancelled pull leaves no partial blob (we hold its lock, so no other pull writes it). */
			char partial[120];
			snprintf(partial, sizeof(partial), "blobs/sha256/%s.partial", dls[i].b->hex);
			unlinkat(p->layoutfd, partial, 0);
		}
		if (dls[i].c) {
			curl_multi_remove_handle(m, dls[i].c);
			curl_easy_cleanup(dls[i].c);
		}
		curl_slist_free_all(dls[i].hdrs);
		if (dls[i].fd >= 0)
			close(dls[i].fd);
	}
	curl_multi_cleanup(m); // NOLINT(clang-analyzer-unix.Malloc): dls is _cleanup_free_
	return r;
}

/* ---- manifests ---- */

static bool is_index_type(const char *ct, const char *body)
{
	if (strstr(ct, "image.index") || strstr(ct, "manifest.list"))
		return true;
	/* some registries answer application/json: look at the document's mediaType */
	return strstr(body, "\"application/vnd.oci.image.index.v1+json\"") ||
	       strstr(body, "\"application/vnd.docker.distribution.manifest.list.v2+json\"");
}

/* Fetches manifests/<what>, checks it against want_hex (when given) and stores it; *ret_index says whether it is
 * an index. */
static int fetch_manifest(struct puller *p, const char *what, const char *want_hex, char ret_hex[65],
			  uint64_t *ret_size, bool *ret_index)
{
	char url[1200];
	snprintf(url, sizeof(url), "%s/v2/%s/manifests/%s", p->base, p->ref.path, what);
	struct membuf body = { 0 };
	struct headers h;
	long status = registry_get(p, url, ACCEPT_MANIFESTS, p->s->limits.max_json_bytes, &body, &h);
	_cleanup_free_ char *data = body.data;
	if (status < 0)
		return lb_error_wrap(p->err, "fetching manifest %s", what);
	if (status != 200)
		return lb_error_setx(p->err, status == 404 ? ENOENT : EIO, "GET %s: HTTP %ld", url, status);
	if (!data)
		return lb_error_setx(p->err, EBADMSG, "GET %s: empty manifest", url);
	char hex[65];
	int r = lbi_sha256_buf(data, body.len, hex);
	if (r < 0)
		return lb_error_set(p->err, r, "sha256");
	if (want_hex && strcmp(hex, want_hex) != 0)
		return lb_error_setx(p->err, EBADMSG, "manifest %s: content is sha256:%s", what, hex);
	r = store_verified(p, data, body.len, hex);
	if (r < 0)
		return r;
	memcpy(ret_hex, hex, 65);
	*ret_size = body.len;
	*ret_index = is_index_type(h.content_type, data);
	return 0;
}

int lb_image_pull(struct lb_images *s, const char *refstr, const struct lb_pull_opts *o,
		  struct lb_image_info **ret_info, struct lb_error *err)
{
	struct puller p = { .s = s, .o = o, .err = err, .layoutfd = -1 };
	int r = lb_image_ref_parse(refstr, &p.ref, err);
	if (r < 0)
		return r;
	const char *host = !strcmp(p.ref.domain, "docker.io") ? "registry-1.docker.io" : p.ref.domain;
	snprintf(p.base, sizeof(p.base), "%s://%s", is_insecure(&p) ? "http" : "https", host);
	url_origin(p.base, p.origin, sizeof(p.origin));
	r = load_credentials(&p);
	if (r < 0)
		return r;

	if ((mkdirat(s->rootfd, "layout", 0711) < 0 && errno != EEXIST) ||
	    (mkdirat(s->rootfd, "layout/blobs", 0711) < 0 && errno != EEXIST) ||
	    (mkdirat(s->rootfd, "layout/blobs/sha256", 0711) < 0 && errno != EEXIST))
		return lb_error_set(err, errno, "creating %s/layout/blobs/sha256", s->root);
	_cleanup_close_ int layoutfd = openat(s->rootfd, "layout", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (layoutfd < 0)
		return lb_error_set(err, errno, "opening %s/layout", s->root);
	p.layoutfd = layoutfd;

	char hex[65], want[65];
	uint64_t size = 0;
	bool index = false;
	if (lbi_watch(s, LB_IMAGE_RESOLVING, "", 0, 0))
		return lb_error_setx(err, ECANCELED, "pulling %s: cancelled", p.ref.full);
	const char *what = p.ref.digest[0] ? p.ref.digest : p.ref.tag;
	bool by_digest = p.ref.digest[0] && lbi_digest_hex(p.ref.digest, want) == 0;
	r = fetch_manifest(&p, what, by_digest ? want : NULL, hex, &size, &index);
	if (r < 0)
		return lb_error_wrap(err, "pulling %s", p.ref.full);
	if (index) {
		char mhex[65], digest[LB_DIGEST_MAX];
		uint64_t msize = 0;
		r = lbi_index_pick(layoutfd, hex, size, &s->limits, mhex, &msize, err);
		if (r < 0)
			return lb_error_wrap(err, "pulling %s", p.ref.full);
		snprintf(digest, sizeof(digest), "sha256:%s", mhex);
		r = fetch_manifest(&p, digest, mhex, hex, &size, &index);
		if (r < 0)
			return lb_error_wrap(err, "pulling %s", p.ref.full);
		if (index)
			return lb_error_setx(err, EBADMSG, "pulling %s: nested index", p.ref.full);
	}
	_cleanup_free_ struct lbi_blob *blobs = NULL;
	size_t n = 0;
	r = lbi_manifest_blobs(layoutfd, hex, size, &s->limits, &blobs, &n, err);
	if (r < 0)
		return lb_error_wrap(err, "pulling %s", p.ref.full);
	r = download_blobs(&p, blobs, n);
	if (r < 0)
		return lb_error_wrap(err, "pulling %s", p.ref.full);
	struct lbi_plan plan;
	r = lbi_plan_load_manifest(layoutfd, hex, size, &s->limits, &plan, err);
	if (r == 0)
		r = lbi_store_publish(s, layoutfd, &plan, p.ref.full, ret_info, err);
	lbi_plan_free(&plan);
	if (r < 0)
		return lb_error_wrap(err, "pulling %s", p.ref.full);
	return 0;
}

/*
 * client.c — HTTP over lensboxd's Unix socket for the `lensbox` command (see client.h).
 *
 * Runs in the unprivileged CLI process. libcurl does the HTTP; this file bounds what it keeps (max_response),
 * turns lensboxd's error envelope {"error": {"code", "message"}} into one sentence, and encodes paths.
 */
#include "client.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "lb/cleanup.h"

struct sink {
	struct lbc_response *res;
	const struct lbc_request *req;
	size_t got;
	size_t cap;
	bool too_large;
	bool write_failed;
	long status; /* known once headers are in */
	CURL *curl;
	bool cancelled;
};

/* Line mode: hands each complete line of res->body to on_line and keeps only the incomplete rest. */
static bool take_lines(struct sink *s)
{
	char *body = s->res->body;
	size_t start = 0;
	for (char *nl; (nl = memchr(body + start, '\n', s->got - start));) {
		size_t len = (size_t)(nl - (body + start));
		*nl = '\0';
		if (s->req->on_line(body + start, len, s->req->line_ud)) {
			s->cancelled = true;
			return false;
		}
		start += len + 1;
	}
	memmove(body, body + start, s->got - start);
	s->got -= start;
	body[s->got] = '\0';
	s->res->len = s->got;
	return true;
}

static int on_xfer(void *arg, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow)
{
	(void)dltotal;
	(void)dlnow;
	(void)ultotal;
	(void)ulnow;
	struct sink *s = arg;
	if (s->req->cancel && *s->req->cancel) {
		s->cancelled = true;
		return 1; /* aborts: the connection closes, and lensboxd cancels what it was doing for it */
	}
	return 0;
}

static size_t on_data(char *data, size_t size, size_t n, void *arg)
{
	struct sink *s = arg;
	size_t len = size * n;
	if (s->got + len > s->req->max_response) {
		s->too_large = true;
		return 0; /* aborts the transfer */
	}
	long status = 0;
	curl_easy_getinfo(s->curl, CURLINFO_RESPONSE_CODE, &status);
	if (s->req->sink && status >= 200 && status < 300) {
		if (fwrite(data, 1, len, s->req->sink) != len) {
			s->write_failed = true;
			return 0;
		}
		s->got += len;
		return len;
	}
	if (s->got + len + 1 > s->cap) {
		size_t ncap = s->cap ? s->cap : 4096;
		while (ncap < s->got + len + 1)
			ncap *= 2;
		char *bigger = realloc(s->res->body, ncap);
		if (!bigger)
			return 0;
		s->res->body = bigger;
		s->cap = ncap;
	}
	memcpy(s->res->body + s->got, data, len);
	s->got += len;
	s->res->body[s->got] = '\0';
	s->res->len = s->got;
	if (s->req->on_line && status >= 200 && status < 300 && !take_lines(s))
		return 0;
	return len;
}

static void set_error_from_body(struct lbc_response *res)
{
	snprintf(res->code, sizeof(res->code), "http_error");
	const char *msg = NULL;
	yajl_val root = res->body ? yajl_tree_parse(res->body, NULL, 0) : NULL;
	yajl_val e = root ? lbc_jget(root, "error") : NULL;
	if (e && YAJL_IS_OBJECT(e)) {
		const char *code = lbc_jstr(e, "code", NULL);
		msg = lbc_jstr(e, "message", NULL);
		if (code)
			snprintf(res->code, sizeof(res->code), "%s", code);
	}
	if (msg)
		snprintf(res->error, sizeof(res->error), "%s", msg);
	else
		snprintf(res->error, sizeof(res->error), "lensboxd answered %ld: %.200s", res->status,
			 res->body && res->body[0] ? res->body : "(no body)");
	if (root)
		yajl_tree_free(root);
}

int lbc_http(const char *socket_path, const struct lbc_request *req, struct lbc_response *res)
{
	memset(res, 0, sizeof(*res));
	static bool inited;
	if (!inited) {
		curl_global_init(CURL_GLOBAL_DEFAULT);
		inited = true;
	}
	CURL *curl = curl_easy_init();
	if (!curl) {
		snprintf(res->code, sizeof(res->code), "internal");
		snprintf(res->error, sizeof(res->error), "could not start libcurl");
		return -1;
	}
	_cleanup_free_ char *url = NULL;
	if (asprintf(&url, "http://lensbox%s", req->path) < 0) {
		curl_easy_cleanup(curl);
		snprintf(res->error, sizeof(res->error), "out of memory");
		return -1;
	}
	struct sink s = { .res = res, .req = req, .curl = curl };
	struct curl_slist *headers = NULL;
	char accept[128];
	snprintf(accept, sizeof(accept), "Accept: %s", req->accept ? req->accept : "application/json");
	headers = curl_slist_append(headers, accept);
	headers = curl_slist_append(headers, "Expect:"); /* no 100-continue round trip on uploads */
	char ctype[128];
	if (req->body) {
		snprintf(ctype, sizeof(ctype), "Content-Type: %s",
			 req->content_type ? req->content_type : "application/octet-stream");
		headers = curl_slist_append(headers, ctype);
	}

	curl_easy_setopt(curl, CURLOPT_UNIX_SOCKET_PATH, socket_path);
	curl_easy_setopt(curl, CURLOPT_URL, url);
	curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http");
	curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, req->method);
	curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
	curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(curl, CURLOPT_WRITEDATA, &s);
	curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, 10L);
	if (req->cancel) {
		curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, on_xfer);
		curl_easy_setopt(curl, CURLOPT_XFERINFODATA, &s);
		curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
	}
	if (req->timeout_seconds > 0)
		curl_easy_setopt(curl, CURLOPT_TIMEOUT, req->timeout_seconds);
	if (strcmp(req->method, "GET") == 0) {
		curl_easy_setopt(curl, CURLOPT_HTTPGET, 1L);
		curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, NULL);
	} else if (req->body || strcmp(req->method, "POST") == 0 || strcmp(req->method, "PUT") == 0) {
		curl_easy_setopt(curl, CURLOPT_POSTFIELDS, req->body ? req->body : "");
		curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)(req->body ? req->body_len : 0));
	}

	CURLcode rc = curl_easy_perform(curl);
	curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &res->status);
	curl_slist_free_all(headers);
	curl_easy_cleanup(curl);

	if (s.cancelled) {
		snprintf(res->code, sizeof(res->code), "cancelled");
		snprintf(res->error, sizeof(res->error), "cancelled");
		return -1;
	}
	if (s.too_large) {
		snprintf(res->code, sizeof(res->code), "too_large");
		snprintf(res->error, sizeof(res->error), "the answer is larger than %zu bytes", req->max_response);
		return -1;
	}
	if (s.write_failed) {
		snprintf(res->code, sizeof(res->code), "write_failed");
		snprintf(res->error, sizeof(res->error), "writing the answer failed: %s", strerror(errno));
		return -1;
	}
	if (rc != CURLE_OK) {
		snprintf(res->code, sizeof(res->code), "daemon_unreachable");
		snprintf(res->error, sizeof(res->error), "lensboxd did not answer on %s: %s", socket_path,
			 curl_easy_strerror(rc));
		return -1;
	}
	if (res->status >= 400 || res->status < 200) {
		set_error_from_body(res);
		return -1;
	}
	return 0;
}

void lbc_response_free(struct lbc_response *res)
{
	free(res->body);
	res->body = NULL;
}

yajl_val lbc_json(struct lbc_response *res)
{
	char errbuf[256] = "";
	yajl_val v = res->body ? yajl_tree_parse(res->body, errbuf, sizeof(errbuf)) : NULL;
	if (!v) {
		snprintf(res->code, sizeof(res->code), "bad_response");
		snprintf(res->error, sizeof(res->error), "lensboxd's answer is not JSON");
	}
	return v;
}

static bool unreserved(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
	       c == '_' || c == '~';
}

static char *escape(const char *s, bool keep_slash)
{
	size_t n = strlen(s);
	char *out = malloc(n * 3 + 1);
	if (!out)
		return NULL;
	size_t o = 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (unreserved(c) || (keep_slash && c == '/')) {
			out[o++] = (char)c;
		} else {
			static const char hex[] = "0123456789ABCDEF";
			out[o++] = '%';
			out[o++] = hex[c >> 4];
			out[o++] = hex[c & 15];
		}
	}
	out[o] = '\0';
	return out;
}

char *lbc_escape_path(const char *path)
{
	return escape(path, true);
}

char *lbc_escape(const char *s)
{
	return escape(s, false);
}

yajl_val lbc_jget(yajl_val obj, const char *key)
{
	if (!obj || !YAJL_IS_OBJECT(obj))
		return NULL;
	for (size_t i = 0; i < obj->u.object.len; i++)
		if (strcmp(obj->u.object.keys[i], key) == 0)
			return obj->u.object.values[i];
	return NULL;
}

const char *lbc_jstr(yajl_val obj, const char *key, const char *fallback)
{
	yajl_val v = lbc_jget(obj, key);
	return v && YAJL_IS_STRING(v) ? YAJL_GET_STRING(v) : fallback;
}

int64_t lbc_jint(yajl_val obj, const char *key, int64_t fallback)
{
	yajl_val v = lbc_jget(obj, key);
	if (v && YAJL_IS_INTEGER(v))
		return (int64_t)YAJL_GET_INTEGER(v);
	if (v && YAJL_IS_DOUBLE(v))
		return (int64_t)YAJL_GET_DOUBLE(v);
	return fallback;
}

int lbc_jbool(yajl_val obj, const char *key)
{
	yajl_val v = lbc_jget(obj, key);
	return v && YAJL_IS_TRUE(v);
}

int lbc_jnull(yajl_val obj, const char *key)
{
	yajl_val v = lbc_jget(obj, key);
	return v && YAJL_IS_NULL(v);
}

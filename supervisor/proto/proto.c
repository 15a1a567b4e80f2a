/*
 * proto.c — the one encoder and decoder of the API process <-> core messages (proto.h says what a message is).
 *
 * Runs in both processes, needs no privilege, keeps no state. The decoder is the core's first contact with bytes a
 * compromised API process may have forged, so it checks everything proto.h lists before it hands a message over,
 * and a message it refuses leaves nothing behind (every descriptor that came with it is closed). Its libFuzzer
 * target is fuzz_proto.c.
 */
#include "proto.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lb/name.h"
#include "lb/tier.h"

static const struct {
	const char *name;
	long size;
	int fds;
} types[LBP_TYPE_END] = {
	[LBP_HEALTH] = { "health", 0, 0 },
	[LBP_METRICS] = { "metrics", 0, 0 },
	[LBP_SANDBOX_LIST] = { "sandbox_list", 0, 0 },
	[LBP_SANDBOX_GET] = { "sandbox_get", sizeof(struct lbp_name), 0 },
	[LBP_SANDBOX_PUT] = { "sandbox_put", sizeof(struct lbp_sandbox_put), 0 },
	[LBP_SANDBOX_DELETE] = { "sandbox_delete", sizeof(struct lbp_name), 0 },
	[LBP_SANDBOX_STOP] = { "sandbox_stop", sizeof(struct lbp_name), 0 },
	[LBP_RUN] = { "run", sizeof(struct lbp_run), 1 },
	[LBP_RUNS_LIST] = { "runs_list", sizeof(struct lbp_runs_list), 0 },
	[LBP_RUN_GET] = { "run_get", sizeof(struct lbp_run_get), 0 },
	[LBP_FILES_LIST] = { "files_list", sizeof(struct lbp_file), 0 },
	[LBP_FILE_GET] = { "file_get", sizeof(struct lbp_file), 0 },
	[LBP_FILE_PUT] = { "file_put", sizeof(struct lbp_file_put), 1 },
	[LBP_IMAGES_LIST] = { "images_list", 0, 0 },
	[LBP_IMAGE_GET] = { "image_get", sizeof(struct lbp_image_ref), 0 },
	[LBP_IMAGE_DELETE] = { "image_delete", sizeof(struct lbp_image_ref), 0 },
	[LBP_IMAGE_PULL] = { "image_pull", sizeof(struct lbp_image_pull), 0 },
	[LBP_IMAGE_IMPORT] = { "image_import", sizeof(struct lbp_image_import), 1 },
	[LBP_REPLY] = { "reply", sizeof(struct lbp_reply), -1 /* 0 or 1: body_in_fd */ },
	[LBP_CHANNEL] = { "channel", 0, 1 },
	[LBP_PROGRESS] = { "progress", sizeof(struct lbp_progress), 0 },
};

static const char *const phases[LBP_PHASE_END] = {
	[LBP_PHASE_RESOLVING] = "resolving",
	[LBP_PHASE_DOWNLOADING] = "downloading",
	[LBP_PHASE_EXTRACTING] = "extracting",
	[LBP_PHASE_UNPACKING] = "unpacking",
};

const char *lbp_phase_name(uint32_t phase)
{
	return phase < LBP_PHASE_END ? phases[phase] : NULL;
}

static bool type_known(uint16_t type)
{
	return type > 0 && type < LBP_TYPE_END && types[type].name;
}

long lbp_payload_size(uint16_t type)
{
	return type_known(type) ? types[type].size : -1;
}

int lbp_type_fds(uint16_t type)
{
	return type_known(type) ? types[type].fds : -1;
}

const char *lbp_type_name(uint16_t type)
{
	return type_known(type) ? types[type].name : "unknown";
}

/* ---- grammar ---- */

/* The array holds a NUL (the string cannot run past it). */
#define TERMINATED(arr) (memchr((arr), '\0', sizeof(arr)) != NULL)

bool lbp_name_valid(const char *s)
{
	return lb_sandbox_name_valid(s);
}

/* Relative, no empty, "." or ".." component, no trailing '/': what wire.c's lbd_path_check lets through (the
 * core applies that too, and still resolves the path beneath /sandbox with RESOLVE_IN_ROOT); this only refuses what
 * no honest API process sends. */
bool lbp_path_valid(const char *s, bool allow_empty)
{
	size_t n = strlen(s);
	if (n == 0)
		return allow_empty;
	if (n > LBP_PATH_MAX || s[0] == '/' || s[n - 1] == '/')
		return false;
	for (const char *p = s; p && *p;) {
		const char *slash = strchr(p, '/');
		size_t len = slash ? (size_t)(slash - p) : strlen(p);
		if (len == 0 || (len == 1 && p[0] == '.') || (len == 2 && p[0] == '.' && p[1] == '.'))
			return false;
		p = slash ? slash + 1 : NULL;
	}
	return true;
}

/* What may appear in a reference before images/ parses it (as lbd_image_ref_valid lets in). */
bool lbp_ref_valid(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > LBP_REF_MAX || !((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= '0' && s[0] <= '9')))
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
		      c == '_' || c == '/' || c == ':' || c == '@' || c == '-'))
			return false;
	}
	return true;
}

/* An absolute host path without "." or ".." segments, empty segments or control characters. */
bool lbp_host_path_valid(const char *s)
{
	size_t n = strlen(s);
	if (n < 2 || n > LBP_HOST_PATH_MAX || s[0] != '/')
		return false;
	for (const char *c = s; *c; c++)
		if ((unsigned char)*c < 0x20 || *c == 0x7f)
			return false;
	for (const char *p = s + 1; p;) {
		const char *slash = strchr(p, '/');
		size_t len = slash ? (size_t)(slash - p) : strlen(p);
		if ((len == 0 && slash) || (len == 1 && p[0] == '.') || (len == 2 && p[0] == '.' && p[1] == '.'))
			return false;
		p = slash ? slash + 1 : NULL;
	}
	return true;
}

/* fd is a socket of this family and type. */
static bool socket_of(int fd, int family, int type)
{
	int v = 0;
	socklen_t l = sizeof(v);
	if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &v, &l) < 0 || v != family)
		return false;
	l = sizeof(v);
	return getsockopt(fd, SOL_SOCKET, SO_TYPE, &v, &l) == 0 && v == type;
}

static bool printable(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || (unsigned char)*s > 0x7e)
			return false;
	return true;
}

/* ---- per-type validation (the payload is a copy, aligned, of exactly the type's size) ---- */

static bool spec_valid(const struct lbp_spec *s)
{
	if ((s->has & ~(uint32_t)LBP_SPEC_ALL) || s->pad || !TERMINATED(s->image))
		return false;
	if ((s->has & LBP_SPEC_IMAGE) ? !lbp_ref_valid(s->image) : s->image[0] != '\0')
		return false;
	if ((s->has & LBP_SPEC_NETWORK) ? s->network >= LB_TIER_COUNT : s->network != 0)
		return false;
	/* Ranges the API documents; the core checks them again against its configuration. */
	if ((s->has & LBP_SPEC_CPU) ? s->cpu_millicores < 100 || s->cpu_millicores > 64000 : s->cpu_millicores)
		return false;
	if ((s->has & LBP_SPEC_MEMORY) ? s->memory_bytes < (64ull << 20) || s->memory_bytes > (64ull << 30)
				       : s->memory_bytes != 0)
		return false;
	if ((s->has & LBP_SPEC_DISK) ? s->disk_bytes < (16ull << 20) || s->disk_bytes > (1ull << 40)
				     : s->disk_bytes != 0)
		return false;
	if ((s->has & LBP_SPEC_IDLE) ? s->idle_minutes < 1 || s->idle_minutes > 1440 : s->idle_minutes)
		return false;
	if ((s->has & LBP_SPEC_KEEP) ? s->keep_hours < 1 || s->keep_hours > 720 : s->keep_hours)
		return false;
	return true;
}

static bool sealed_memfd(int fd, uint64_t size)
{
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size < 0 || (uint64_t)st.st_size != size)
		return false;
	int seals = fcntl(fd, F_GET_SEALS);
	int want = F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL;
	return seals >= 0 && (seals & want) == want;
}

static bool run_id_valid(const struct lbp_run_get *g)
{
	for (size_t i = 0; i < sizeof(g->id); i++) {
		char c = g->id[i];
		bool digit = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z');
		if (i < LBP_RUN_ID_MAX ? !digit : c != '\0')
			return false;
	}
	return true;
}

static bool file_valid(const struct lbp_file *f, bool listing)
{
	return TERMINATED(f->name) && TERMINATED(f->path) && lbp_name_valid(f->name) &&
	       lbp_path_valid(f->path, listing) && f->recursive <= (listing ? 1u : 0u) && f->pad == 0;
}

static bool progress_valid(const struct lbp_progress *p)
{
	if (p->phase >= LBP_PHASE_END || p->pad || (p->total && p->done > p->total))
		return false;
	size_t n = strnlen(p->layer, sizeof(p->layer));
	if (n == sizeof(p->layer) || (n != 0 && n != LBP_LAYER_HEX))
		return false;
	for (size_t i = 0; i < sizeof(p->layer); i++) {
		char c = p->layer[i];
		if (i < n ? !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')) : c != '\0')
			return false;
	}
	return true;
}

static bool reply_valid(const struct lbp_msg *m, size_t payload_len)
{
	const struct lbp_reply *r = &m->u.reply;
	if (r->status < 200 || r->status > 599 || r->body_in_fd > 1 || !TERMINATED(r->content_type) ||
	    !TERMINATED(r->log_fields) || !printable(r->content_type) || !printable(r->log_fields))
		return false;
	if (r->body_in_fd) {
		struct stat st;
		return m->nfds == 1 && payload_len == sizeof(*r) && fstat(m->fds[0], &st) == 0 && S_ISREG(st.st_mode) &&
		       st.st_size >= 0 && (uint64_t)st.st_size == r->body_len;
	}
	return m->nfds == 0 && r->body_len <= LBP_INLINE_MAX && payload_len == sizeof(*r) + r->body_len;
}

static bool payload_valid(const struct lbp_msg *m, size_t payload_len)
{
	switch ((enum lbp_type)m->hdr.type) {
	case LBP_HEALTH:
	case LBP_METRICS:
	case LBP_SANDBOX_LIST:
	case LBP_IMAGES_LIST:
		return true;
	case LBP_SANDBOX_GET:
	case LBP_SANDBOX_DELETE:
	case LBP_SANDBOX_STOP:
		return TERMINATED(m->u.name.name) && lbp_name_valid(m->u.name.name);
	case LBP_SANDBOX_PUT:
		return TERMINATED(m->u.put.name) && lbp_name_valid(m->u.put.name) && spec_valid(&m->u.put.spec);
	case LBP_RUN: {
		const struct lbp_run *r = &m->u.run;
		return TERMINATED(r->name) && lbp_name_valid(r->name) && r->language < LB_LANGUAGE_COUNT &&
		       r->timeout_seconds >= 1 && r->timeout_seconds <= 600 && r->output_limit >= 1 &&
		       r->output_limit <= 1000000 && r->has_spec <= 1 && r->source_len <= LBP_SOURCE_MAX &&
		       (r->has_spec ? spec_valid(&r->spec) : spec_valid(&r->spec) && r->spec.has == 0) &&
		       sealed_memfd(m->fds[0], r->source_len);
	}
	case LBP_RUNS_LIST: {
		const struct lbp_runs_list *l = &m->u.runs_list;
		return TERMINATED(l->sandbox) && (l->sandbox[0] == '\0' || lbp_name_valid(l->sandbox)) &&
		       l->limit >= 1 && l->limit <= 1000 && l->pad == 0;
	}
	case LBP_RUN_GET:
		return run_id_valid(&m->u.run_get);
	case LBP_FILES_LIST:
		return file_valid(&m->u.file, true);
	case LBP_FILE_GET:
		return file_valid(&m->u.file, false);
	case LBP_FILE_PUT:
		return file_valid(&m->u.file_put.file, false) && m->u.file_put.size <= LBP_FILE_MAX &&
		       sealed_memfd(m->fds[0], m->u.file_put.size);
	case LBP_IMAGE_GET:
	case LBP_IMAGE_DELETE:
		return TERMINATED(m->u.image.ref) && lbp_ref_valid(m->u.image.ref);
	case LBP_IMAGE_PULL:
		return TERMINATED(m->u.pull.ref) && lbp_ref_valid(m->u.pull.ref) && m->u.pull.pin <= 1 &&
		       m->u.pull.progress <= 1;
	case LBP_IMAGE_IMPORT: {
		const struct lbp_image_import *im = &m->u.import;
		return TERMINATED(im->path) && TERMINATED(im->name) && lbp_host_path_valid(im->path) &&
		       (im->name[0] == '\0' || lbp_ref_valid(im->name)) && im->pin <= 1 && im->progress <= 1 &&
		       socket_of(m->fds[0], AF_UNIX, SOCK_STREAM);
	}
	case LBP_REPLY:
		return reply_valid(m, payload_len);
	case LBP_CHANNEL:
		return socket_of(m->fds[0], AF_UNIX, SOCK_SEQPACKET);
	case LBP_PROGRESS:
		return progress_valid(&m->u.progress);
	case LBP_TYPE_END:
		break;
	}
	return false;
}

void lbp_msg_clear(struct lbp_msg *m)
{
	for (size_t i = 0; i < m->nfds; i++)
		if (m->fds[i] >= 0)
			close(m->fds[i]);
	m->nfds = 0;
}

int lbp_decode(const void *buf, size_t len, const int *fds, size_t nfds, struct lbp_msg *ret)
{
	memset(ret, 0, offsetof(struct lbp_msg, fds));
	ret->nfds = 0;
	if (nfds > LBP_MAX_FDS || len < sizeof(struct lbp_hdr))
		goto refuse;
	memcpy(&ret->hdr, buf, sizeof(ret->hdr));
	const struct lbp_hdr *h = &ret->hdr;
	size_t payload_len = len - sizeof(*h);
	long want = lbp_payload_size(h->type);
	if (h->magic != LBP_MAGIC || h->version != LBP_VERSION || want < 0 || h->len != payload_len ||
	    h->nfds != nfds || payload_len > sizeof(ret->u.raw))
		goto refuse;
	if (h->type == LBP_REPLY ? payload_len < (size_t)want : payload_len != (size_t)want)
		goto refuse;
	if (h->type != LBP_REPLY && (int)nfds != lbp_type_fds(h->type))
		goto refuse;
	memcpy(ret->u.raw, (const char *)buf + sizeof(*h), payload_len);
	for (size_t i = 0; i < nfds; i++)
		ret->fds[i] = fds[i];
	ret->nfds = nfds; /* owned by ret now: closed by lbp_msg_clear */
	if (!payload_valid(ret, payload_len)) {
		lbp_msg_clear(ret);
		return -EBADMSG;
	}
	return 0;
refuse:
	for (size_t i = 0; i < nfds; i++)
		close(fds[i]);
	return -EBADMSG;
}

/* Whether this process has no descriptor left (it cannot duplicate sock). */
static bool out_of_fds(int sock)
{
	int t = fcntl(sock, F_DUPFD_CLOEXEC, 0);
	if (t >= 0) {
		close(t);
		return false;
	}
	return errno == EMFILE || errno == ENFILE;
}

int lbp_recv(int sock, struct lbp_msg *ret)
{
	static_assert(LBP_MESSAGE_MAX < (1u << 20), "a message fits a small receive buffer");
	/* One byte more than the largest message, so an oversized datagram shows as MSG_TRUNC (or len > max). */
	unsigned char *buf = malloc(LBP_MESSAGE_MAX + 1);
	if (!buf)
		return -ENOMEM;
	union {
		char space[CMSG_SPACE(sizeof(int) * (LBP_MAX_FDS + 1))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = { .iov_base = buf, .iov_len = LBP_MESSAGE_MAX + 1 };
	struct msghdr mh = {
		.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.space, .msg_controllen = sizeof(ctl)
	};
	ssize_t n;
	do
		n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n <= 0) {
		int e = n == 0 ? -ENODATA : -errno;
		free(buf);
		return e;
	}
	int fds[LBP_MAX_FDS + 1];
	size_t nfds = 0;
	bool bad = (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) {
			bad = true; /* credentials or anything else: not part of the protocol */
			continue;
		}
		size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < k; i++) {
			int fd;
			memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			if (nfds < LBP_MAX_FDS + 1)
				fds[nfds++] = fd;
			else
				close(fd);
		}
	}
	int r;
	if (bad || nfds > LBP_MAX_FDS) {
		for (size_t i = 0; i < nfds; i++)
			close(fds[i]);
		/* The kernel also says MSG_CTRUNC when it could not install a descriptor because this process is at
		 * its RLIMIT_NOFILE (our buffer holds one more than the protocol allows, so a sender cannot cause it
		 * otherwise without breaking the limit): that is a shortage of ours, not a malformed message. */
		r = (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) == MSG_CTRUNC && nfds <= LBP_MAX_FDS && out_of_fds(sock)
			? -EMFILE
			: -EBADMSG;
	} else {
		r = lbp_decode(buf, (size_t)n, fds, nfds, ret);
	}
	free(buf);
	return r;
}

static int send_flags(int sock, uint16_t type, const void *payload, size_t len, const int *fds, size_t nfds, int flags)
{
	if (!type_known(type) || nfds > LBP_MAX_FDS || len > sizeof(struct lbp_reply) + LBP_INLINE_MAX)
		return -EMSGSIZE;
	struct lbp_hdr h = {
		.magic = LBP_MAGIC, .version = LBP_VERSION, .type = type, .len = (uint32_t)len, .nfds = (uint32_t)nfds
	};
	struct iovec iov[2] = { { .iov_base = &h, .iov_len = sizeof(h) },
				{ .iov_base = (void *)payload, .iov_len = len } };
	union {
		char space[CMSG_SPACE(sizeof(int) * LBP_MAX_FDS)];
		struct cmsghdr align;
	} ctl;
	struct msghdr mh = { .msg_iov = iov, .msg_iovlen = len ? 2 : 1 };
	if (nfds) {
		memset(&ctl, 0, sizeof(ctl));
		mh.msg_control = ctl.space;
		mh.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
	}
	ssize_t n;
	do
		n = sendmsg(sock, &mh, MSG_NOSIGNAL | flags);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	return (size_t)n == sizeof(h) + len ? 0 : -EMSGSIZE;
}

int lbp_send(int sock, uint16_t type, const void *payload, size_t len, const int *fds, size_t nfds)
{
	return send_flags(sock, type, payload, len, fds, nfds, 0);
}

int lbp_send_progress(int sock, const struct lbp_progress *p)
{
	int r = send_flags(sock, LBP_PROGRESS, p, sizeof(*p), NULL, 0, MSG_DONTWAIT);
	return r == -EWOULDBLOCK ? -EAGAIN : r;
}

int lbp_memfd(const char *what, const void *bytes, size_t len)
{
	int fd = memfd_create(what, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	const char *p = bytes;
	for (size_t done = 0; done < len;) {
		ssize_t w = write(fd, p + done, len - done);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			int e = w < 0 ? -errno : -EIO;
			close(fd);
			return e;
		}
		done += (size_t)w;
	}
	if (fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL) < 0) {
		int e = -errno;
		close(fd);
		return e;
	}
	return fd;
}

int lbp_send_reply(int sock, unsigned status, const char *content_type, const char *log_fields, const void *body,
		   size_t len, int fd)
{
	struct {
		struct lbp_reply r;
		unsigned char body[LBP_INLINE_MAX];
	} m;
	memset(&m.r, 0, sizeof(m.r));
	m.r.status = status;
	m.r.body_len = len;
	if (strlen(content_type) > LBP_CTYPE_MAX)
		return -EINVAL;
	memcpy(m.r.content_type, content_type, strlen(content_type));
	snprintf(m.r.log_fields, sizeof(m.r.log_fields), "%s", log_fields ? log_fields : "");
	if (fd >= 0) {
		m.r.body_in_fd = 1;
		return lbp_send(sock, LBP_REPLY, &m.r, sizeof(m.r), &fd, 1);
	}
	if (len <= LBP_INLINE_MAX) {
		if (len)
			memcpy(m.body, body, len);
		return lbp_send(sock, LBP_REPLY, &m, sizeof(m.r) + len, NULL, 0);
	}
	int mfd = lbp_memfd("lensbox-reply", body, len);
	if (mfd < 0)
		return mfd;
	m.r.body_in_fd = 1;
	int r = lbp_send(sock, LBP_REPLY, &m.r, sizeof(m.r), &mfd, 1);
	close(mfd);
	return r;
}

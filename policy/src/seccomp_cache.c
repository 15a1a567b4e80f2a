/*
 * seccomp_cache.c — keeps the BPF compiled from seccomp.json between processes, so a short-lived loader (the
 * lensbox-runner tool, one sandbox per process) does not pay libseccomp's compilation (3-4 ms, most of the tool's
 * own time) on every run. lensboxd compiles once per policy load and needs no cache.
 *
 * Runs in the loading process (root in lensbox-runner; any user may call it, the checks below are against the
 * caller's own euid). Nothing here loads a filter: it only stores and returns the exported instructions.
 *
 * One entry per profile, a file <cache_dir>/seccomp-<16 hex>.bpf:
 *
 *   +--------------------------------+  magic "LBSCMP01", format, native arch token, libseccomp's version and the
 *   | header (struct entry_header)   |  identity of its shared object (device, inode, size, mtime), the identity of
 *   +--------------------------------+  the compiler (a hash of seccomp.c, set by the build), the JSON's length,
 *   | the exact seccomp.json bytes   |  the allowed-syscall count, the instruction count and a 64-bit checksum
 *   +--------------------------------+  of the header (checksum field zero) and the instructions
 *   | the BPF instructions           |
 *   +--------------------------------+
 *
 * The key is the profile's exact bytes, not a hash of them: a hit compares every byte of the stored JSON with the
 * file just read, so no collision can return another profile's filter (the name's hash only spreads entries).
 * Everything else that decides the output (architecture, libseccomp build, our compiler) must match too.
 *
 * Trust: a cached filter is as strong as whoever can write the cache, so an entry is used only when the directory
 * and the file belong to the caller's euid, are writable by nobody else, the file is a regular file with one link
 * (opened without following a symlink) and of the exact size its header implies; otherwise it is a miss. The
 * directory's parents are the caller's to choose (a root-only runtime directory). Entries are written under a
 * temporary name and renamed, so a reader never sees half an entry; a torn or altered one fails the checksum (its
 * header or instructions) or the comparison with the profile (its JSON).
 * Any failure here is a miss, never an error of the policy load: the caller compiles and tries to store again.
 * The directory holds at most MAX_ENTRIES entries; storing one more first removes the others.
 */
#include "lb/cleanup.h"
#include "lb/fileio.h"
#include "lb/policy-parse.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The build sets it to a hash of seccomp.c, so a changed compiler never reuses its predecessor's output. */
#ifndef LB_SECCOMP_COMPILER_ID
#define LB_SECCOMP_COMPILER_ID "unversioned"
#endif

#define ENTRY_MAGIC   "LBSCMP01"
#define ENTRY_FORMAT  2u /* 2: the checksum covers the header and the instructions (hash_words) */
#define ENTRY_PREFIX  "seccomp-"
#define ENTRY_SUFFIX  ".bpf"
#define MAX_ENTRIES   64
#define COMPILER_ID_N 48

struct entry_header {
	char magic[8];
	uint32_t format;
	uint32_t arch;
	uint32_t lib_version[3]; /* libseccomp major, minor, micro */
	uint32_t n_insns;
	uint64_t lib_dev, lib_ino, lib_size;
	int64_t lib_mtime_s, lib_mtime_ns;
	char compiler[COMPILER_ID_N];
	uint64_t json_len;
	uint64_t allowed;
	uint64_t checksum; /* hash_words() of the header with this field zero and the instructions */
};
/* Compared and hashed as bytes: no padding may hide in it. */
_Static_assert(sizeof(struct entry_header) == 144, "entry_header must have no padding");

/* What must match for an entry to be this process's: everything of the header but the per-entry fields. */
static int fill_identity(struct entry_header *h, struct lb_error *err)
{
	memset(h, 0, sizeof(*h));
	memcpy(h->magic, ENTRY_MAGIC, sizeof(h->magic));
	h->format = ENTRY_FORMAT;
	h->arch = seccomp_arch_native();
	const struct scmp_version *v = seccomp_version();
	if (!v)
		return lb_error_setx(err, ENOTSUP, "seccomp cache: libseccomp reports no version");
	h->lib_version[0] = v->major;
	h->lib_version[1] = v->minor;
	h->lib_version[2] = v->micro;
	/* The shared object itself: a rebuilt or patched libseccomp of the same version is another file. Linked into
	 * the executable (the tool links it statically), the executable is that file: dladdr names it only as argv[0]
	 * did, which may be relative or a bare name found in PATH, so it is reached through /proc/self/exe. A fully
	 * static executable (the musl build of the tool, LB_SECCOMP_IN_EXECUTABLE) has no dladdr to ask. */
	struct stat st;
#ifdef LB_SECCOMP_IN_EXECUTABLE
	const char *file = "/proc/self/exe";
#else
	Dl_info info, self;
	if (dladdr((void *)seccomp_init, &info) == 0 || !info.dli_fname)
		return lb_error_setx(err, ENOTSUP, "seccomp cache: cannot identify the libseccomp in use");
	const char *file = info.dli_fname;
	if (dladdr((void *)fill_identity, &self) != 0 && self.dli_fbase == info.dli_fbase)
		file = "/proc/self/exe";
#endif
	if (stat(file, &st) < 0)
		return lb_error_setx(err, ENOTSUP, "seccomp cache: cannot identify the libseccomp in use");
	h->lib_dev = (uint64_t)st.st_dev;
	h->lib_ino = (uint64_t)st.st_ino;
	h->lib_size = (uint64_t)st.st_size;
	h->lib_mtime_s = (int64_t)st.st_mtim.tv_sec;
	h->lib_mtime_ns = (int64_t)st.st_mtim.tv_nsec;
	snprintf(h->compiler, sizeof(h->compiler), "%s", LB_SECCOMP_COMPILER_ID);
	return 0;
}

/* FNV-1a's step over 64-bit little-endian words, then the tail's bytes: a hash that spreads entries and catches a torn
 * or altered file (not an attacker: only the caller's euid can write the cache), eight times fewer multiplications
 * than FNV-1a over bytes. The JSON is hashed only into the entry's name: a hit compares it byte for byte anyway. */
static uint64_t hash_words(uint64_t h, const void *data, size_t len)
{
	const unsigned char *p = data;
	for (; len >= 8; p += 8, len -= 8) {
		uint64_t w;
		memcpy(&w, p, 8);
		h ^= w;
		h *= 0x100000001b3ULL;
		h ^= h >> 29;
	}
	for (; len > 0; p++, len--) {
		h ^= *p;
		h *= 0x100000001b3ULL;
	}
	return h;
}

#define HASH_BASIS 0xcbf29ce484222325ULL

/* Of the header (this field zero) and the instructions. */
static uint64_t entry_checksum(const struct entry_header *h, const struct sock_filter *insns)
{
	struct entry_header copy = *h;
	copy.checksum = 0;
	uint64_t c = hash_words(HASH_BASIS, &copy, sizeof(copy));
	return hash_words(c, insns, (size_t)h->n_insns * sizeof(struct sock_filter));
}

/* The entry's file name: a hash of the identity and the JSON (collisions only cost a miss). */
static void entry_name(const struct entry_header *id, const char *text, size_t len, char *buf, size_t size)
{
	uint64_t h = hash_words(HASH_BASIS, id, sizeof(*id));
	h = hash_words(h, text, len);
	snprintf(buf, size, ENTRY_PREFIX "%016" PRIx64 ENTRY_SUFFIX, h);
}

/* True when st (a directory or an entry) is the caller's and nobody else may write it. */
static bool owned_and_private(const struct stat *st)
{
	return st->st_uid == geteuid() && (st->st_mode & (S_IWGRP | S_IWOTH)) == 0;
}

static int open_cache_dir(const char *cache_dir, bool create, struct lb_error *err)
{
	if (!cache_dir || cache_dir[0] != '/')
		return lb_error_setx(err, EINVAL, "seccomp cache: the directory must be an absolute path");
	if (create) {
		int r = lb_mkdir_p(cache_dir, 0700);
		if (r < 0)
			return lb_error_set(err, r, "seccomp cache: creating %s", cache_dir);
	}
	int dfd = open(cache_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0)
		return lb_error_set(err, errno, "seccomp cache: opening %s", cache_dir);
	struct stat st;
	if (fstat(dfd, &st) < 0) {
		int e = errno;
		close(dfd);
		return lb_error_set(err, e, "seccomp cache: stat %s", cache_dir);
	}
	if (!owned_and_private(&st)) {
		close(dfd);
		return lb_error_setx(err, EPERM, "seccomp cache: %s is not private to uid %u", cache_dir,
				     (unsigned)geteuid());
	}
	return dfd;
}

int lb_seccomp_cache_get(const char *cache_dir, const char *text, size_t len, struct sock_fprog *ret_prog,
			 size_t *ret_allowed, struct lb_error *err)
{
	struct entry_header want;
	int r = fill_identity(&want, err);
	if (r < 0)
		return r;
	_cleanup_close_ int dfd = open_cache_dir(cache_dir, false, err);
	if (dfd < 0)
		return dfd;
	char name[64];
	entry_name(&want, text, len, name, sizeof(name));
	_cleanup_close_ int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	if (fd < 0)
		return lb_error_set(err, errno, "seccomp cache: opening %s", name);
	struct stat st;
	if (fstat(fd, &st) < 0)
		return lb_error_set(err, errno, "seccomp cache: stat %s", name);
	if (!S_ISREG(st.st_mode) || st.st_nlink != 1 || !owned_and_private(&st))
		return lb_error_setx(err, EPERM, "seccomp cache: %s is not a private regular file of uid %u", name,
				     (unsigned)geteuid());
	uint64_t max = sizeof(struct entry_header) + (uint64_t)LB_POLICY_FILE_MAX +
		       (uint64_t)BPF_MAXINSNS * sizeof(struct sock_filter);
	if ((uint64_t)st.st_size < sizeof(struct entry_header) || (uint64_t)st.st_size > max)
		return lb_error_setx(err, EBADMSG, "seccomp cache: %s has an impossible size", name);
	_cleanup_free_ char *buf = NULL;
	size_t got = 0;
	r = lb_read_fd(fd, (size_t)st.st_size, &buf, &got);
	if (r < 0)
		return lb_error_set(err, r, "seccomp cache: reading %s", name);
	if (got != (size_t)st.st_size)
		return lb_error_setx(err, EBADMSG, "seccomp cache: %s changed while being read", name);

	struct entry_header h;
	memcpy(&h, buf, sizeof(h));
	/* Same identity (every field but the per-entry ones), then the exact profile bytes. */
	struct entry_header cmp = h;
	cmp.n_insns = 0;
	cmp.json_len = 0;
	cmp.allowed = 0;
	cmp.checksum = 0;
	if (memcmp(&cmp, &want, sizeof(cmp)) != 0)
		return lb_error_setx(err, ESTALE, "seccomp cache: %s was made by another compiler or libseccomp", name);
	if (h.json_len != len || h.n_insns == 0 || h.n_insns > BPF_MAXINSNS || h.allowed > 4096 ||
	    (uint64_t)got != sizeof(h) + h.json_len + (uint64_t)h.n_insns * sizeof(struct sock_filter))
		return lb_error_setx(err, EBADMSG, "seccomp cache: %s does not hold this profile", name);
	const char *json = buf + sizeof(h);
	if (memcmp(json, text, len) != 0)
		return lb_error_setx(err, EBADMSG, "seccomp cache: %s holds another profile", name);
	size_t insn_bytes = (size_t)h.n_insns * sizeof(struct sock_filter);
	struct sock_filter *insns = malloc(insn_bytes);
	if (!insns)
		return lb_error_set(err, ENOMEM, "seccomp cache: reading %s", name);
	memcpy(insns, json + len, insn_bytes);
	if (entry_checksum(&h, insns) != h.checksum) {
		free(insns);
		return lb_error_setx(err, EBADMSG, "seccomp cache: %s fails its checksum", name);
	}
	ret_prog->len = (unsigned short)h.n_insns;
	ret_prog->filter = insns;
	if (ret_allowed)
		*ret_allowed = (size_t)h.allowed;
	return 0;
}

/* Keeps the directory bounded: past MAX_ENTRIES entries, every entry but keep goes. */
static void prune(int dfd, const char *keep)
{
	int dup = fcntl(dfd, F_DUPFD_CLOEXEC, 3);
	if (dup < 0)
		return;
	_cleanup_closedir_ DIR *d = fdopendir(dup);
	if (!d) {
		close(dup);
		return;
	}
	size_t n = 0;
	struct dirent *de;
	while ((de = readdir(d)))
		n += strncmp(de->d_name, ENTRY_PREFIX, strlen(ENTRY_PREFIX)) == 0;
	if (n < MAX_ENTRIES)
		return;
	rewinddir(d);
	while ((de = readdir(d)))
		if (strncmp(de->d_name, ENTRY_PREFIX, strlen(ENTRY_PREFIX)) == 0 && strcmp(de->d_name, keep) != 0)
			(void)unlinkat(dfd, de->d_name, 0);
}

int lb_seccomp_cache_put(const char *cache_dir, const char *text, size_t len, const struct sock_fprog *prog,
			 size_t allowed, struct lb_error *err)
{
	if (!prog->filter || prog->len == 0 || len > LB_POLICY_FILE_MAX)
		return lb_error_setx(err, EINVAL, "seccomp cache: nothing to store");
	struct entry_header h;
	int r = fill_identity(&h, err);
	if (r < 0)
		return r;
	_cleanup_close_ int dfd = open_cache_dir(cache_dir, true, err);
	if (dfd < 0)
		return dfd;
	char name[64], tmp[96];
	entry_name(&h, text, len, name, sizeof(name));
	prune(dfd, name);
	h.n_insns = prog->len;
	h.json_len = len;
	h.allowed = allowed;
	h.checksum = entry_checksum(&h, prog->filter);

	/* A private temporary name, renamed over the entry once complete: readers see the old entry or the new. */
	snprintf(tmp, sizeof(tmp), ".tmp-%d-%s", (int)getpid(), name);
	_cleanup_close_ int fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0 && errno == EEXIST) {
		(void)unlinkat(dfd, tmp, 0); /* a leftover of a crashed process with our pid */
		fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	}
	if (fd < 0)
		return lb_error_set(err, errno, "seccomp cache: creating %s", tmp);
	if ((r = lb_write_all(fd, &h, sizeof(h))) < 0 || (r = lb_write_all(fd, text, len)) < 0 ||
	    (r = lb_write_all(fd, prog->filter, (size_t)prog->len * sizeof(struct sock_filter))) < 0) {
		(void)unlinkat(dfd, tmp, 0);
		return lb_error_set(err, r, "seccomp cache: writing %s", tmp);
	}
	if (renameat(dfd, tmp, dfd, name) < 0) {
		r = lb_error_set(err, errno, "seccomp cache: renaming %s", tmp);
		(void)unlinkat(dfd, tmp, 0);
		return r;
	}
	return 0;
}

int lb_seccomp_compile_json_cached(const char *text, size_t len, const char *name, const char *cache_dir,
				   struct sock_fprog *ret_prog, size_t *ret_allowed, bool *ret_hit,
				   struct lb_error *err)
{
	struct lb_error ignored;
	lb_error_clear(&ignored);
	if (cache_dir && lb_seccomp_cache_get(cache_dir, text, len, ret_prog, ret_allowed, &ignored) == 0) {
		if (ret_hit)
			*ret_hit = true;
		return 0;
	}
	struct sock_fprog prog;
	size_t allowed = 0;
	int r = lb_seccomp_compile_json(text, len, name, &prog, &allowed, err);
	if (r < 0)
		return r;
	if (cache_dir)
		(void)lb_seccomp_cache_put(cache_dir, text, len, &prog, allowed, &ignored); /* best effort */
	*ret_prog = prog;
	if (ret_allowed)
		*ret_allowed = allowed;
	if (ret_hit)
		*ret_hit = false;
	return 0;
}

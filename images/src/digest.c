/*
 * digest.c — SHA-256 over buffers, streams and files (OpenSSL's libcrypto EVP), and strict parsing of
 * "sha256:<hex>" digests.
 *
 * Runs in whichever process imports images; no privilege used. Only sha256 digests are accepted: OCI allows sha512
 * too but no registry or tool we meet produces it, and refusing is safer than half-supporting.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "lb/cleanup.h"

#include "internal.h"

int lbi_sha256_init(struct lbi_sha256 *h)
{
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	if (!ctx)
		return -ENOMEM;
	if (EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
		EVP_MD_CTX_free(ctx);
		return -EIO;
	}
	h->ctx = ctx;
	return 0;
}

void lbi_sha256_update(struct lbi_sha256 *h, const void *data, size_t len)
{
	if (len)
		EVP_DigestUpdate(h->ctx, data, len);
}

void lbi_sha256_final(struct lbi_sha256 *h, char hex[65])
{
	static const char digits[] = "0123456789abcdef";
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int n = 0;
	EVP_DigestFinal_ex(h->ctx, md, &n);
	for (size_t i = 0; i < 32; i++) {
		hex[2 * i] = digits[md[i] >> 4];
		hex[2 * i + 1] = digits[md[i] & 0xf];
	}
	hex[64] = '\0';
}

void lbi_sha256_done(struct lbi_sha256 *h)
{
	EVP_MD_CTX_free(h->ctx);
	h->ctx = NULL;
}

int lbi_sha256_buf(const void *data, size_t len, char hex[65])
{
	struct lbi_sha256 h;
	int r = lbi_sha256_init(&h);
	if (r < 0)
		return r;
	lbi_sha256_update(&h, data, len);
	lbi_sha256_final(&h, hex);
	lbi_sha256_done(&h);
	return 0;
}

int lbi_digest_hex(const char *digest, char hex[65])
{
	if (!digest || strncmp(digest, "sha256:", 7) != 0 || strlen(digest) != 7 + 64)
		return -EINVAL;
	for (size_t i = 0; i < 64; i++) {
		char c = digest[7 + i];
		if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
			return -EINVAL;
	}
	memcpy(hex, digest + 7, 65);
	return 0;
}

int lbi_sha256_fd(int fd, uint64_t max, char hex[65], uint64_t *ret_size)
{
	const size_t bufsize = 1 << 17;
	_cleanup_free_ unsigned char *buf = malloc(bufsize);
	struct lbi_sha256 h;
	uint64_t total = 0;
	if (!buf)
		return -ENOMEM;
	int r = lbi_sha256_init(&h);
	if (r < 0)
		return r; // cppcheck-suppress memleak ; NOLINT(clang-analyzer-unix.Malloc): buf is _cleanup_free_
	for (;;) {
		ssize_t n = pread(fd, buf, bufsize, (off_t)total);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			r = -errno;
			lbi_sha256_done(&h);
			return r;
		}
		if (n == 0)
			break;
		total += (uint64_t)n;
		if (total > max) {
			lbi_sha256_done(&h);
			return -EFBIG;
		}
		lbi_sha256_update(&h, buf, (size_t)n);
	}
	lbi_sha256_final(&h, hex);
	lbi_sha256_done(&h);
	if (ret_size)
		*ret_size = total;
	return 0;
}

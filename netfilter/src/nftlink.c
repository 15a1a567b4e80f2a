/*
 * nftlink.c — the few nf_tables operations an attach and a run need, spoken straight to the kernel with libnftnl
 * and libmnl instead of through libnftables: connecting a warm slot (adding or removing its four verdict-map
 * elements, one batch) and reading or resetting its refusal counter.
 *
 * Why not libnftables here: every libnftables command first fetches a cache of the table (its chains, sets, maps
 * and objects), whose size grows with every sandbox; adding four map elements took ~1 ms with 20 sandboxes and
 * ~3 ms with 200, against 0.05 and 0.3 ms sent directly. The rules themselves are still loaded by libnftables from
 * the policy files (ruleset.c); this file only adds, removes and reads elements and counters whose names and
 * verdicts come from those files as rendered (nftpolicy.c parses them), never from a sandbox.
 *
 * Runs in lensboxd (root: CAP_NET_ADMIN in the host's network namespace), any thread; each call opens its own
 * netlink socket, so calls never share state. Library code: no logging.
 */
#include <netinet/in.h> /* before the linux/ headers, which then leave the libc's definitions alone */
#include <errno.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>

#include <libmnl/libmnl.h>
#include <libnftnl/batch.h>
#include <libnftnl/common.h>
#include <libnftnl/object.h>
#include <libnftnl/set.h>

#include "internal.h"
#include "lb/cleanup.h"

static void mnl_socketp(struct mnl_socket **s)
{
	if (*s)
		mnl_socket_close(*s);
}
static void nftnl_setp(struct nftnl_set **s)
{
	if (*s)
		nftnl_set_free(*s);
}
static void nftnl_objp(struct nftnl_obj **o)
{
	if (*o)
		nftnl_obj_free(*o);
}
#define _cleanup_mnl_ __attribute__((cleanup(mnl_socketp)))
#define NL_BUF	      16384 /* a batch of LB_NFT_MAX_ELEMENTS elements, or one answer, fits many times over */

/* A netfilter netlink socket that gives up on an answer after 5 s (the kernel always answers; this only bounds a
 * bug). */
static int open_nfnl(struct mnl_socket **ret, struct lb_error *err)
{
	_cleanup_mnl_ struct mnl_socket *nl = mnl_socket_open2(NETLINK_NETFILTER, SOCK_CLOEXEC);
	if (!nl)
		return lb_error_set(err, errno, "opening a netfilter netlink socket");
	struct timeval tv = { .tv_sec = 5 };
	if (setsockopt(mnl_socket_get_fd(nl), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0 ||
	    mnl_socket_bind(nl, 0, MNL_SOCKET_AUTOPID) < 0)
		return lb_error_set(err, errno, "binding a netfilter netlink socket");
	*ret = TAKE_PTR(nl);
	return 0;
}

/* One NEWSETELEM/DELSETELEM message for e, appended to the batch. */
static int put_element(struct mnl_nlmsg_batch *b, bool add, const struct lb_nft_element *e, uint32_t seq)
{
	__attribute__((cleanup(nftnl_setp))) struct nftnl_set *s = nftnl_set_alloc();
	struct nftnl_set_elem *el = nftnl_set_elem_alloc();
	if (!s || !el) {
		if (el)
			nftnl_set_elem_free(el);
		return -ENOMEM;
	}
	char key[IFNAMSIZ] = { 0 }; /* an ifname key is the name zero-padded to IFNAMSIZ, as nft sends it */
	memcpy(key, e->key, strnlen(e->key, IFNAMSIZ - 1));
	nftnl_set_set_str(s, NFTNL_SET_TABLE, "lensbox");
	nftnl_set_set_str(s, NFTNL_SET_NAME, e->map);
	nftnl_set_elem_set(el, NFTNL_SET_ELEM_KEY, key, sizeof(key));
	if (add) {
		nftnl_set_elem_set_u32(el, NFTNL_SET_ELEM_VERDICT, (uint32_t)NFT_JUMP);
		nftnl_set_elem_set_str(el, NFTNL_SET_ELEM_CHAIN, e->chain);
	}
	nftnl_set_elem_add(s, el); /* s owns el now */
	struct nlmsghdr *h =
	    nftnl_nlmsg_build_hdr(mnl_nlmsg_batch_current(b), add ? NFT_MSG_NEWSETELEM : NFT_MSG_DELSETELEM,
				  NFPROTO_INET, (uint16_t)(NLM_F_ACK | (add ? NLM_F_CREATE | NLM_F_EXCL : 0)), seq);
	nftnl_set_elems_nlmsg_build_payload(h, s);
	return mnl_nlmsg_batch_next(b) ? 0 : -ENOBUFS;
}

/* Reads answers until every one of n messages is acknowledged; the first error (the batch was then not applied)
 * is returned as a negative errno. */
static int read_acks(struct mnl_socket *nl, size_t n)
{
	char buf[NL_BUF];
	size_t acks = 0;
	while (acks < n) {
		ssize_t len = mnl_socket_recvfrom(nl, buf, sizeof(buf));
		if (len < 0)
			return -errno;
		int left = (int)len;
		for (const struct nlmsghdr *h = (const struct nlmsghdr *)buf; mnl_nlmsg_ok(h, left);
		     h = mnl_nlmsg_next(h, &left)) {
			if (h->nlmsg_type != NLMSG_ERROR)
				continue;
			const struct nlmsgerr *e = mnl_nlmsg_get_payload(h);
			if (e->error)
				return e->error;
			acks++;
		}
	}
	return 0;
}

int lb_nftlink_elements(bool add, const struct lb_nft_element *els, size_t n, struct lb_error *err)
{
	if (n == 0 || n > LB_NFT_MAX_ELEMENTS)
		return lb_error_setx(err, EINVAL, "%zu map elements: expected 1..%d", n, LB_NFT_MAX_ELEMENTS);
	_cleanup_mnl_ struct mnl_socket *nl = NULL;
	int r = open_nfnl(&nl, err);
	if (r < 0)
		return r;
	char buf[NL_BUF];
	struct mnl_nlmsg_batch *b = mnl_nlmsg_batch_start(buf, sizeof(buf));
	uint32_t seq = (uint32_t)time(NULL);
	nftnl_batch_begin(mnl_nlmsg_batch_current(b), seq++);
	mnl_nlmsg_batch_next(b);
	for (size_t i = 0; i < n && r == 0; i++)
		r = put_element(b, add, &els[i], seq++);
	if (r == 0) {
		nftnl_batch_end(mnl_nlmsg_batch_current(b), seq++);
		if (!mnl_nlmsg_batch_next(b))
			r = -ENOBUFS;
	}
	/* Adding or removing the elements is the whole of connecting or disconnecting a slot: the chains they jump to
	 * were loaded from the policy files, and the transaction is applied whole or not at all. */
	if (r == 0 && mnl_socket_sendto(nl, mnl_nlmsg_batch_head(b), mnl_nlmsg_batch_size(b)) < 0)
		r = -errno;
	mnl_nlmsg_batch_stop(b);
	if (r == 0)
		r = read_acks(nl, n);
	if (r < 0)
		return lb_error_set(err, -r, "%s %s's elements of %s", add ? "adding" : "removing", els[0].key,
				    "table inet lensbox");
	return 0;
}

int lb_nftlink_counter(const char *name, bool reset, uint64_t *ret_packets, struct lb_error *err)
{
	_cleanup_mnl_ struct mnl_socket *nl = NULL;
	int r = open_nfnl(&nl, err);
	if (r < 0)
		return r;
	__attribute__((cleanup(nftnl_objp))) struct nftnl_obj *o = nftnl_obj_alloc();
	if (!o)
		return lb_error_set(err, ENOMEM, "allocating a counter");
	nftnl_obj_set_str(o, NFTNL_OBJ_TABLE, "lensbox");
	nftnl_obj_set_str(o, NFTNL_OBJ_NAME, name);
	nftnl_obj_set_u32(o, NFTNL_OBJ_TYPE, NFT_OBJECT_COUNTER);
	char buf[NL_BUF];
	uint32_t seq = (uint32_t)time(NULL);
	/* Reading (or reading and zeroing) one of lensbox's own counters; nothing else in the table changes. */
	struct nlmsghdr *h =
	    nftnl_nlmsg_build_hdr(buf, reset ? NFT_MSG_GETOBJ_RESET : NFT_MSG_GETOBJ, NFPROTO_INET, 0, seq);
	nftnl_obj_nlmsg_build_payload(h, o);
	if (mnl_socket_sendto(nl, h, h->nlmsg_len) < 0)
		return lb_error_set(err, errno, "asking for counter %s", name);
	ssize_t len = mnl_socket_recvfrom(nl, buf, sizeof(buf));
	if (len < 0)
		return lb_error_set(err, errno, "reading counter %s", name);
	int left = (int)len;
	for (const struct nlmsghdr *m = (const struct nlmsghdr *)buf; mnl_nlmsg_ok(m, left);
	     m = mnl_nlmsg_next(m, &left)) {
		if (m->nlmsg_type == NLMSG_ERROR) {
			const struct nlmsgerr *e = mnl_nlmsg_get_payload(m);
			if (e->error)
				return lb_error_set(err, -e->error, "reading counter %s", name);
			continue;
		}
		__attribute__((cleanup(nftnl_objp))) struct nftnl_obj *got = nftnl_obj_alloc();
		if (!got || nftnl_obj_nlmsg_parse(m, got) < 0 || !nftnl_obj_is_set(got, NFTNL_OBJ_CTR_PKTS))
			break;
		*ret_packets = nftnl_obj_get_u64(got, NFTNL_OBJ_CTR_PKTS);
		return 0;
	}
	return lb_error_setx(err, EBADMSG, "no packet count in the kernel's answer for counter %s", name);
}

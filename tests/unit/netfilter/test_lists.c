/* Unit tests for netfilter/src/lists.c and the shipped policy/network lists: what every tier denies, by address,
 * IPv6 included (an IPv6 address as lb_cidr_list_denies6 decides it: NAT64 forms by the IPv4 address they carry),
 * and the denied sets and IPv6 slot addresses nftpolicy.c renders from them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <fcntl.h>
#include <arpa/inet.h>
#include <cmocka.h>

#include "lb/fileio.h"
#include "lb/netfilter.h"
#include "lb/netparse.h"
#include "lb/nftpolicy.h"

static struct lb_cidr_list shipped;

static int load(void **state)
{
	(void)state;
	char *text;
	size_t len;
	if (lb_read_file_at(AT_FDCWD, LENSBOX_SOURCE_DIR "/policy/network/denied.list", 1 << 20, &text, &len) < 0)
		return -1;
	struct lb_error err;
	int r = lb_cidr_list_parse(text, &shipped, &err);
	free(text);
	return r;
}

static int unload(void **state)
{
	(void)state;
	lb_cidr_list_free(&shipped);
	return 0;
}

static bool denied(const char *s)
{
	uint8_t a[16];
	if (inet_pton(AF_INET, s, a) == 1)
		return lb_cidr_list_contains(&shipped, AF_INET, a);
	assert_int_equal(inet_pton(AF_INET6, s, a), 1);
	return lb_cidr_list_denies6(&shipped, a);
}

static void shipped_denied_list(void **state)
{
	(void)state;
	/* one address inside each range the issue lists */
	const char *inside[] = {
		"0.1.2.3",
		"10.200.3.4",
		"100.64.0.1",
		"100.127.255.254",
		"127.0.0.53",
		"169.254.169.254",
		"172.16.0.1",
		"172.31.255.255",
		"192.0.0.8",
		"192.0.2.1",
		"192.88.99.1",
		"192.168.1.1",
		"198.18.0.1",
		"198.19.255.255",
		"198.51.100.7",
		"203.0.113.9",
		"224.0.0.251",
		"239.255.255.250",
		"240.0.0.1",
		"255.255.255.255",
		"168.63.129.16",
		"::1",
		"::",
		"::ffff:10.0.0.1",
		"64:ff9b::a9fe:a9fe", /* NAT64 of the metadata address */
		"64:ff9b::a01:203",   /* ... of 10.1.2.3 */
		"64:ff9b::7f00:1",    /* ... of 127.0.0.1 */
		"64:ff9b::ffff:ffff", /* ... of 255.255.255.255 */
		"64:ff9b:1::a9fe:a9fe",
		"::a9fe:a9fe",		  /* IPv4-compatible */
		"::ffff:169.254.169.254", /* IPv4-mapped */
		"2001:0:a9fe:a9fe::1",	  /* Teredo */
		"2002:a9fe:a9fe::1",	  /* 6to4 */
		"fc00::1",
		"fd12::1",
		"fe80::1",
		"ff02::1",
		"2001::1",
		"2001:1ff::1",
		"2001:db8::1",
		"2002:a00:1::1",
		"3fff::1",
		"3fff:fff::1",
		"4000::1",
		"8000::1",
	};
	for (size_t i = 0; i < sizeof(inside) / sizeof(inside[0]); i++) {
		if (!denied(inside[i]))
			fail_msg("%s should be denied", inside[i]);
	}
	/* and the edges just outside them, plus public addresses, are not */
	const char *outside[] = {
		"1.1.1.1",	    "9.255.255.255",   "11.0.0.0",	"100.63.255.255",
		"100.128.0.0",	    "126.255.255.255", "128.0.0.0",	"169.253.255.255",
		"169.255.0.0",	    "172.15.255.255",  "172.32.0.0",	"192.0.1.0",
		"192.88.98.255",    "192.167.255.255", "192.169.0.0",	"198.17.255.255",
		"198.20.0.0",	    "223.255.255.255", "168.63.129.17", "2606:4700::1",
		"2001:200::1",	    "2a00::1",	       "3ffe::1",	"3fff:1000::1",
		"64:ff9b::101:101", /* NAT64 of 1.1.1.1: decided by the IPv4 address, which is public */
		"64:ff9b::b02:14",
	};
	for (size_t i = 0; i < sizeof(outside) / sizeof(outside[0]); i++) {
		if (denied(outside[i]))
			fail_msg("%s should not be denied", outside[i]);
	}
}

static void cidr_parsing(void **state)
{
	(void)state;
	struct lb_cidr c;
	assert_int_equal(lb_cidr_parse("10.0.0.0/8", &c), 0);
	assert_int_equal(c.prefix, 8);
	assert_int_equal(lb_cidr_parse("10.0.0.1/8", &c), -EINVAL); /* host bits set */
	assert_int_equal(lb_cidr_parse("10.0.0.0/33", &c), -EINVAL);
	assert_int_equal(lb_cidr_parse("10.0.0.0/", &c), -EINVAL);
	assert_int_equal(lb_cidr_parse("10.0.0.0/8x", &c), -EINVAL);
	assert_int_equal(lb_cidr_parse("10.0.0/8", &c), -EINVAL);
	assert_int_equal(lb_cidr_parse("2001:db8::/129", &c), -EINVAL);
	assert_int_equal(lb_cidr_parse("2001:db8::/32", &c), 0);
	assert_int_equal(lb_cidr_parse("1.2.3.4", &c), 0);
	assert_int_equal(c.prefix, 32);
	struct lb_cidr_list l;
	struct lb_error err;
	assert_int_equal(lb_cidr_list_parse("# c\n1.0.0.0/8 # x\n\n2.0.0.0/8 3.0.0.0/8\n", &l, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "line 4"));
}

static void names(void **state)
{
	(void)state;
	char *text;
	size_t len;
	assert_int_equal(
	    lb_read_file_at(AT_FDCWD, LENSBOX_SOURCE_DIR "/policy/network/packages.list", 1 << 20, &text, &len), 0);
	struct lb_name_list l;
	struct lb_error err;
	assert_int_equal(lb_name_list_parse(text, &l, &err), 0);
	free(text);
	assert_int_equal(l.n, 2);
	assert_true(lb_name_list_contains(&l, "PYPI.org", 8));
	assert_true(lb_name_list_contains(&l, "files.pythonhosted.org", 22));
	assert_false(lb_name_list_contains(&l, "evil.pypi.org", 13)); /* no subdomains */
	assert_false(lb_name_list_contains(&l, "pypi.org.evil", 13));
	assert_false(lb_name_list_contains(&l, "pypi.or", 7));
	assert_int_equal(lb_name_list_add(&l, "bad name"), -EINVAL);
	assert_int_equal(lb_name_list_add(&l, "-x.org"), -EINVAL);
	assert_int_equal(lb_name_list_add(&l, "a..b"), -EINVAL);
	assert_int_equal(lb_name_list_add(&l, "Mirror.Example"), 0);
	assert_true(lb_name_list_contains(&l, "mirror.example", 14));
	lb_name_list_free(&l);
	assert_false(lb_hostname_valid("a.b-", 4));
	char big[300];
	memset(big, 'a', sizeof(big));
	assert_false(lb_hostname_valid(big, 254));
}

/* denied.list "names" 64:ff9b::/96 itself: then every NAT64 address is denied, public ones too */
static void nat64_prefix_listed_itself(void **state)
{
	(void)state;
	struct lb_cidr_list l = { 0 };
	struct lb_error err;
	assert_int_equal(lb_cidr_list_parse("::/3\n10.0.0.0/8\n", &l, &err), 0);
	uint8_t a[16];
	inet_pton(AF_INET6, "64:ff9b::101:101", a);
	assert_false(lb_cidr_list_denies6(&l, a));
	inet_pton(AF_INET6, "64:ff9b::a00:1", a);
	assert_true(lb_cidr_list_denies6(&l, a));
	inet_pton(AF_INET6, "64:ff9a::1", a); /* just below the prefix: ::/3 */
	assert_true(lb_cidr_list_denies6(&l, a));
	inet_pton(AF_INET6, "64:ff9b::1:0:0", a); /* just above it */
	assert_true(lb_cidr_list_denies6(&l, a));
	struct lb_cidr c;
	assert_int_equal(lb_cidr_parse("64:ff9b::/96", &c), 0);
	assert_int_equal(lb_cidr_list_add(&l, &c), 0);
	inet_pton(AF_INET6, "64:ff9b::101:101", a);
	assert_true(lb_cidr_list_denies6(&l, a));
	lb_cidr_list_free(&l);
}

/* What lensboxd loads into denied4/denied6: ::/3 around the NAT64 prefix, each IPv4 range's NAT64 form. */
static void denied_sets_rendered(void **state)
{
	(void)state;
	struct lb_cidr_list l = { 0 };
	struct lb_error err;
	assert_int_equal(lb_cidr_list_parse("::/3\n10.0.0.0/8\n169.254.0.0/16\nfc00::/7\n", &l, &err), 0);
	char *out = NULL;
	assert_int_equal(lb_nft_render_denied(&l, &out, &err), 0);
	const char *want[] = { "add element inet lensbox denied4 { 10.0.0.0/8, 169.254.0.0/16 }",
			       "::-64:ff9a:ffff:ffff:ffff:ffff:ffff:ffff",
			       "64:ff9b::1:0:0-1fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
			       "64:ff9b::a00:0/104",
			       "64:ff9b::a9fe:0/112",
			       "fc00::/7" };
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
		if (!strstr(out, want[i]))
			fail_msg("%s is not in:\n%s", want[i], out);
	assert_null(strstr(out, "::/3"));
	free(out);
	lb_cidr_list_free(&l);
}

static void pool6(void **state)
{
	(void)state;
	struct lb_cidr c;
	bool on;
	assert_int_equal(lb_net_pool6_parse(NULL, &c, &on), 0);
	assert_true(on);
	assert_int_equal(c.prefix, 64);
	assert_int_equal(lb_net_pool6_parse("off", &c, &on), 0);
	assert_false(on);
	assert_int_equal(lb_net_pool6_parse("fd00:1::/48", &c, &on), 0);
	assert_int_equal(lb_net_pool6_parse("fd00::1/64", &c, &on), -EINVAL); /* host bits */
	assert_int_equal(lb_net_pool6_parse("fd00::/120", &c, &on), -EINVAL); /* slots need the low 32 bits */
	assert_int_equal(lb_net_pool6_parse("10.0.0.0/8", &c, &on), -EINVAL);
	assert_int_equal(lb_net_pool6_parse("fd6c:6273::/64", &c, &on), 0);
	uint8_t a[16];
	char s[INET6_ADDRSTRLEN];
	lb_net_pool6_addr(c.addr, 0, 1, a);
	assert_string_equal(inet_ntop(AF_INET6, a, s, sizeof(s)), "fd6c:6273::1");
	lb_net_pool6_addr(c.addr, 70000, 2, a); /* 4 * 70000 + 2 = 0x445c2 */
	assert_string_equal(inet_ntop(AF_INET6, a, s, sizeof(s)), "fd6c:6273::4:45c2");
}

/* A rendered tier file splits into its table block and the `add element` lines that connect a slot; anything else
 * after the first element, or a line of another shape, is refused (net.c would then never warm a slot wrongly). */
static void tier_elements_split(void **state)
{
	(void)state;
	static const char *const tiers[] = { "web.nft", "packages.nft" };
	for (size_t k = 0; k < 2; k++) {
		char path[256], *tmpl = NULL, *out = NULL;
		size_t len, n = 0, head = 0;
		snprintf(path, sizeof(path), "%s/policy/network/%s", LENSBOX_SOURCE_DIR, tiers[k]);
		assert_int_equal(lb_read_file_at(AT_FDCWD, path, 1 << 20, &tmpl, &len), 0);
		struct lb_nft_vars v;
		struct lb_error err;
		assert_int_equal(lb_nft_vars_init(&v, NULL, NULL, 0, 0), 0);
		v.slot = 7;
		assert_int_equal(lb_nft_render(k ? LB_NFT_PACKAGES : LB_NFT_WEB, tmpl, &v, &out, &err), 0);
		struct lb_nft_element els[LB_NFT_MAX_ELEMENTS];
		assert_int_equal(lb_nft_split_elements(out, els, &n, &head), 0);
		assert_int_equal(n, 4);
		assert_string_equal(els[0].map, "sandbox_pre");
		assert_string_equal(els[0].key, "lbh7");
		assert_string_equal(els[0].chain, "sb7_pre");
		assert_string_equal(els[3].chain, "sb7_fwd");
		assert_null(strstr(out + head - 2, "table inet")); /* the head ends with the table block */
		assert_non_null(strstr(out, "table inet lensbox {"));
		assert_true(strstr(out, "table inet lensbox {") < out + head);
		free(out);
		free(tmpl);
	}
	size_t n, head;
	const char *good =
	    "table inet lensbox {\n}\n\n# connect\nadd element inet lensbox sandbox_in { \"lbh1\" : jump "
	    "sb1_in }\n";
	assert_int_equal(lb_nft_split_elements(good, NULL, &n, &head), 0);
	assert_int_equal(n, 1);
	assert_int_equal(head, strlen("table inet lensbox {\n}\n\n# connect\n"));
	const char *bad[] = {
		"table inet lensbox {\n}\n",								   /* none */
		"add element inet lensbox m { \"lbh1\" : jump sb1_in }\nadd rule inet lensbox x accept\n", /* a rule
													      after */
		"add element inet lensbox m { \"lbh1\" : accept }\n",		 /* not a jump */
		"add element inet lensbox m { \"lbh1\" : jump sb1_in } extra\n", /* trailing words */
		"add element inet other m { \"lbh1\" : jump sb1_in }\n",	 /* another table */
		"add element inet lensbox m { \"lb h\" : jump sb1_in }\n",	 /* a name of another shape */
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(lb_nft_split_elements(bad[i], NULL, &n, &head), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(shipped_denied_list),
		cmocka_unit_test(cidr_parsing),
		cmocka_unit_test(names),
		cmocka_unit_test(nat64_prefix_listed_itself),
		cmocka_unit_test(denied_sets_rendered),
		cmocka_unit_test(pool6),
		cmocka_unit_test(tier_elements_split),
	};
	return cmocka_run_group_tests(tests, load, unload);
}

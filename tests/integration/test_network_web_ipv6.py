"""IPv6 for the `web` tier (issue 20), proven from inside sandboxes in the sealed network world
(tests/lensbox_testlib/networld.py, whose IPv6 addresses are in its docstring).

The contract: lensbox-net's --pool6 (lensboxd's network_pool6, default fd6c:6273::/64) gives the `web` sandbox of
slot N the /126 at pool6 + 4N: the host side of its veth (lbh<N>) +1, the sandbox's eth0 +2, a default route via the
host side, static neighbours and no link-local address. TCP 80 and 443 to any IPv6 address outside the denied list
are forwarded and masqueraded behind the host's uplink address (NAT66); the denied ranges (one address of each, every
IPv4-embedding form of a denied IPv4 address, the LAN), the host's own addresses and every other port, UDP and ICMPv6
are refused at once (a TCP reset: ECONNREFUSED; ICMPv6 admin-prohibited: EACCES, as the kernel maps it) and counted in
the sandbox's network_blocked. Every refused target has a live listener (networld.DENIED6_BAIT and the rest), so a
refusal proves the rule. The resolver answers AAAA for `web`, and for `packages` the names of its list; a `packages`
sandbox's TCP 80/443 over IPv6 goes to the relay like its IPv4, which reaches an IPv6-only registry by name
(networld.REGISTRY6); `off` has lo only.
"""
import ipaddress
import json
import os
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from lensbox_testlib import networld as nw  # noqa: E402

assert not nw.has_pool6(), "this build's lensbox-net has no --pool6: build the lensbox-net target"


def needs_pool6(f):  # every build has it now; kept so the tests read as the contract they check
    return f
METADATA_MAPPED = "::ffff:169.254.169.254"  # an IPv4-mapped address: the kernel turns the connect into IPv4


@pytest.fixture(scope="module")
def world():
    with nw.World() as w:
        w.start_lensbox(["--package", nw.REGISTRY6])
        w.a = w.add_sandbox("w6a", "web")
        w.b = w.add_sandbox("w6b", "web")
        w.pkg = w.add_sandbox("w6pkg", "packages")
        w.off = w.add_sandbox("w6off", "off")
        # listeners inside sandbox b, so that a refusal from a proves the rule
        w.b_listen = [[w.b["addr"], 80, False]] + ([[w.b["addr6"], 80, False]] if w.b["addr6"] != "-" else [])
        w.spawn(w.b["ns"], "http", {"site": "sandbox-b", "listen": w.b_listen})
        w.b_udp_log = f"{w.tmp}/sandbox-b-udp6.log"
        if w.b["addr6"] != "-":
            w.spawn(w.b["ns"], "udp_echo", {"listen": [w.b["addr6"], 9999], "log": w.b_udp_log})
        yield w


def refused(world, sb, expect, **args):
    before = world.blocked(sb)
    r = world.probe(sb, **args)
    assert r["ok"] is False, r
    assert r["error"] == expect, r
    assert r["elapsed"] < 1.0, r
    assert world.blocked(sb) > before, f"the refusal was not counted in network_blocked: {r}"
    return r


def slot_link6(sb, pool6=nw.POOL6_DEFAULT):
    """The contract's (gateway6, address6) for sandbox sb: the /126 at pool6 + 4 * slot (its veth is lbh<slot>)."""
    net = ipaddress.ip_network(pool6)
    slot = int(sb["ifname"][len("lbh"):])
    return str(net[4 * slot + 1]), str(net[4 * slot + 2])


def in_ns(ns, *args):
    return json.loads(nw.sh(*args, ns=ns).stdout or "[]")


def test_world_is_sealed(world):
    world.assert_sealed()


# ---- what a web sandbox gets


@needs_pool6
def test_web_sandbox_gets_its_ipv6_link(world):
    for sb in (world.a, world.b):
        gw6, addr6 = slot_link6(sb)
        assert (sb["gateway6"], sb["addr6"]) == (gw6, addr6), sb
        addrs = [(a["local"], a["prefixlen"], a["scope"]) for i in in_ns(sb["ns"], "ip", "-j", "-6", "addr", "show",
                                                                          "dev", "eth0") for a in i["addr_info"]]
        assert addrs == [(addr6, 126, "global")], addrs  # and no link-local address
        routes = in_ns(sb["ns"], "ip", "-j", "-6", "route", "show", "default")
        assert [(r["gateway"], r["dev"]) for r in routes] == [(gw6, "eth0")], routes
        neigh = in_ns(sb["ns"], "ip", "-j", "-6", "neigh", "show", "dev", "eth0")
        assert [(n["dst"], n["state"]) for n in neigh] == [(gw6, ["PERMANENT"])], neigh
        for key, want in (("accept_ra", "0"), ("autoconf", "0"), ("addr_gen_mode", "1")):
            got = nw.sh("cat", f"/proc/sys/net/ipv6/conf/eth0/{key}", ns=sb["ns"]).stdout.strip()
            assert got == want, (sb["name"], key, got)
        host = [(a["local"], a["prefixlen"]) for i in in_ns(world.host, "ip", "-j", "-6", "addr", "show", "dev",
                                                             sb["ifname"]) for a in i["addr_info"]]
        assert host == [(gw6, 126)], host


@needs_pool6
def test_site6_by_name_over_http_and_https(world):
    r = world.probe(world.a, op="http", host=nw.SITE6, family=6, port=80)
    assert r["ok"] and r["status"] == 200 and r["addr"] == nw.SITE6_IP, r
    body = json.loads(r["body"])
    # NAT66: the site sees the host's uplink address, never the sandbox's
    assert body["site"] == "site6" and body["client"] == nw.HOST_UPLINK6_IP, body
    r = world.probe(world.a, op="http", host=nw.SITE6, family=6, port=443, tls=True, sni=nw.SITE6, ca=world.ca)
    assert r["ok"] and r["status"] == 200 and json.loads(r["body"])["sni"] == nw.SITE6, r


@needs_pool6
def test_dual_stack_site_resolves_and_answers_over_both(world):
    r = world.probe(world.a, op="resolve", name=nw.SITE, family=0)
    assert r["ok"] and r["addrs"] == sorted([nw.SITE_IP, nw.SITE_DUAL6_IP]), r
    r = world.probe(world.a, op="http", host=nw.SITE, family=6, port=443, tls=True, sni=nw.SITE, ca=world.ca)
    assert r["ok"] and r["addr"] == nw.SITE_DUAL6_IP and json.loads(r["body"])["site"] == "site", r
    r = world.probe(world.a, op="http", host=nw.SITE, port=80)
    assert r["ok"] and r["addr"] == nw.SITE_IP and json.loads(r["body"])["client"] == nw.HOST_UPLINK_IP, r


@needs_pool6
def test_resolver_answers_aaaa_for_web(world):
    for name, want in ((nw.SITE6, [nw.SITE6_IP]), (nw.SITE, [nw.SITE_DUAL6_IP]), ("pypi.org", [nw.REGISTRY6_IP])):
        r = world.probe(world.a, op="dns", server=nw.RESOLVER_ADDR, name=name, qtype=28)
        assert r["ok"] and r["rcode"] == 0 and r["addrs"] == want, r
    r = world.probe(world.a, op="dns", server=nw.RESOLVER_ADDR, name=nw.SITE6, qtype=1)
    assert r["ok"] and r["rcode"] == 0 and r["addrs"] == [], r  # IPv6-only: no A


@needs_pool6
@pytest.mark.parametrize("name", [nw.REBIND6, nw.METADATA64])
def test_denied_aaaa_answers_are_dropped(world, name):
    """rebind6.example's AAAA is the LAN host, metadata64.example's the metadata address through NAT64: the world's
    DNS says so (test_networld_ipv6.py), lensbox's resolver drops the answer and counts it, as for A."""
    refused(world, world.a, "EAI_NONAME", op="resolve", name=name, family=6)


# ---- what a web sandbox is refused


@needs_pool6
@pytest.mark.parametrize("addr", list(nw.DENIED6_BAIT) + [nw.LAN6_IP, nw.HOST_LAN6_IP, METADATA_MAPPED],
                         ids=lambda a: a)
def test_denied_ipv6_addresses_refused(world, addr):
    refused(world, world.a, "ECONNREFUSED", op="http", host=addr, port=80)


@needs_pool6
def test_nat64_of_a_public_ipv4_address_is_not_denied_whole(world):
    """64:ff9b::/96 is checked per embedded IPv4 address: 64:ff9b::b02:14 (11.2.0.20, the site) is not refused by
    lensbox. The world has no NAT64, so the connection fails beyond the host (inet has no route): not ECONNREFUSED,
    and not counted."""
    before = world.blocked(world.a)
    r = world.probe(world.a, op="http", host="64:ff9b::b02:14", port=80, timeout=2)
    assert r["ok"] is False and r["error"] != "ECONNREFUSED", r
    assert world.blocked(world.a) == before, r


@needs_pool6
def test_host_ipv6_addresses_refused(world):
    """The host's own addresses, whichever: its uplink, its LAN address, the sandbox's gateway and another
    sandbox's; the host listens on [::]:80 and [::]:8000."""
    for addr in (nw.HOST_UPLINK6_IP, nw.HOST_LAN6_IP, world.a["gateway6"], world.b["gateway6"]):
        for port in (80, 8000):
            refused(world, world.a, "ECONNREFUSED", op="http", host=addr, port=port)


@needs_pool6
def test_other_sandbox_ipv6_refused(world):
    # b's own listener answers inside b over IPv6 ...
    r = world.probe(world.b, op="http", host=world.b["addr6"], port=80)
    assert r["ok"] and json.loads(r["body"])["site"] == "sandbox-b", r
    # ... but a cannot reach it
    refused(world, world.a, "ECONNREFUSED", op="http", host=world.b["addr6"], port=80)
    refused(world, world.a, "EACCES", op="udp", addr=world.b["addr6"], port=9999)
    time.sleep(0.2)
    assert not os.path.exists(world.b_udp_log) or world.a["addr6"] not in open(world.b_udp_log).read()


@needs_pool6
def test_udp_icmpv6_and_other_ports_to_site6_refused(world):
    refused(world, world.a, "ECONNREFUSED", op="http", host=nw.SITE6_IP, port=8080)
    refused(world, world.a, "EACCES", op="udp", addr=nw.SITE6_IP, port=9999)
    refused(world, world.a, "EACCES", op="ping6", addr=nw.SITE6_IP)
    time.sleep(0.2)
    assert not os.path.exists(world.udp6_log) or open(world.udp6_log).read() == ""


@needs_pool6
def test_dns_over_ipv6_refused(world):
    """The resolver is reached over IPv4 only (its answers carry AAAA): DNS to the gateway's IPv6 address or to
    another server over IPv6 is refused like any other UDP."""
    refused(world, world.a, "EACCES", op="dns", server=world.a["gateway6"], name=nw.SITE6, qtype=28)
    refused(world, world.a, "EACCES", op="dns", server=nw.DNS6_IP, name=nw.SITE6, qtype=28)
    # nor the resolver's own port, nor DNS over TCP, at the gateway's IPv6 address
    refused(world, world.a, "EACCES", op="udp", addr=world.a["gateway6"], port=nw.RESOLVER_PORT)
    refused(world, world.a, "ECONNREFUSED", op="http", host=world.a["gateway6"], port=53)


@needs_pool6
def test_spoofed_ipv6_sources_dropped(world):
    """Raw TCP SYNs to an allowed destination (site6:80) with forged IPv6 sources (another sandbox's address, an
    unassigned one of the pool, a public one, a link-local one): none reaches the forward hook, each is counted."""
    a6 = world.a["addr6"]
    unassigned = str(ipaddress.ip_network(nw.POOL6_DEFAULT)[4 * 200 + 2])
    forged = (world.b["addr6"], unassigned, nw.SITE6_IP, "fe80::1")
    rules = ("add table ip6 lbwatch6\n"
             "add chain ip6 lbwatch6 passed { type filter hook forward priority 10; policy accept; }\n"
             + "".join(f"add rule ip6 lbwatch6 passed ip6 saddr {s} tcp dport 80 tcp flags syn counter\n"
                       for s in (a6,) + forged))
    nw.sh("nft", "-f", "-", ns=world.host, input=rules)
    try:
        before = world.blocked(world.a)
        for source in forged + (a6,):
            r = world.probe(world.a, op="spoof_syn6", addr=nw.SITE6_IP, port=80, source=source)
            assert r["ok"] and r["sent"] == 60, r
        time.sleep(0.2)
        counts = watch_counts(nw.sh("nft", "list", "chain", "ip6", "lbwatch6", "passed", ns=world.host).stdout)
        assert counts[ipaddress.ip_address(a6)] == 1, counts  # the genuine SYN went through: the path works
        for s in forged:
            assert counts[ipaddress.ip_address(s)] == 0, counts
        assert world.blocked(world.a) >= before + len(forged)
    finally:
        nw.sh("nft", "delete", "table", "ip6", "lbwatch6", ns=world.host, check=False)


def watch_counts(listing):
    counts = {}
    for line in listing.splitlines():
        if "saddr" in line and "packets" in line:
            words = line.split()
            counts[ipaddress.ip_address(words[words.index("saddr") + 1])] = int(words[words.index("packets") + 1])
    return counts


@needs_pool6
def test_loopback_destination_never_reaches_the_host(world):
    """A frame to ::1 (the host's loopback, where it listens on 8000), written whole by the sandbox's root onto its
    link: the host never answers it. The same frame to site6:80 is forwarded, so the frame itself is sound."""
    mac = in_ns(world.host, "ip", "-j", "link", "show", world.a["ifname"])[0]["address"]
    a6 = world.a["addr6"]
    rules = ("add table ip6 lbwatch6\n"
             "add chain ip6 lbwatch6 forwarded { type filter hook forward priority 10; policy accept; }\n"
             f"add rule ip6 lbwatch6 forwarded ip6 saddr {a6} ip6 daddr {nw.SITE6_IP} tcp dport 80 "
             "tcp flags syn counter\n"
             "add chain ip6 lbwatch6 answered { type filter hook output priority 10; policy accept; }\n"
             f"add rule ip6 lbwatch6 answered ip6 daddr {a6} tcp sport 8000 counter\n")
    nw.sh("nft", "-f", "-", ns=world.host, input=rules)
    try:
        for dst, port in (("::1", 8000), (nw.SITE6_IP, 80)):
            r = world.probe(world.a, op="frame_syn6", dst_mac=mac, source=a6, addr=dst, port=port)
            assert r["ok"] and r["sent"] == 74, r
        time.sleep(0.2)
        listing = nw.sh("nft", "list", "table", "ip6", "lbwatch6", ns=world.host).stdout
        packets = [int(line.split("packets")[1].split()[0]) for line in listing.splitlines() if "packets" in line]
        assert packets == [1, 0], listing  # forwarded: the control; answered from port 8000: never
    finally:
        nw.sh("nft", "delete", "table", "ip6", "lbwatch6", ns=world.host, check=False)


@needs_pool6
def test_the_host_opens_nothing_to_a_sandbox_over_ipv6(world):
    """The IPv6 twin of test_network_web.py's: no process on the host, root or another user, opens a connection to a
    sandbox's IPv6 address or sends it a datagram (b listens on TCP 80 and UDP 9999 there), and is told so at once
    as over IPv4. A TCP connect meets the output hook's refusal: an ICMPv6 admin-prohibited (EACCES) or a reset
    (ECONNREFUSED), whichever the rule sends; a datagram's send is dropped at once (EPERM)."""
    out = json.loads(nw.sh(nw.PY, "-c", nw.HOST_TO_SANDBOX, world.b["addr6"], "80", "9999", ns=world.host).stdout)
    for uid, res in out.items():
        assert res["tcp"] in ("EACCES", "ECONNREFUSED") and res["fast"] and res["udp"] == "EPERM", (uid, out)
    assert set(out) == {"0", "65534"}, out
    time.sleep(0.2)
    assert not os.path.exists(world.b_udp_log) or "from-the-host" not in open(world.b_udp_log).read()


# ---- the other tiers: no IPv6 (these hold before and after the product)


def test_off_sandbox_has_only_lo(world):
    assert world.off["addr"] == "-" and world.off["addr6"] == "-", world.off
    links = [link["ifname"] for link in in_ns(world.off["ns"], "ip", "-j", "link", "show")]
    assert links == ["lo"], links
    for r in in_ns(world.off["ns"], "ip", "-j", "-6", "route", "show", "table", "all"):
        assert r.get("dev") == "lo", r  # nothing leads anywhere but its own loopback
    for addr in (nw.SITE6_IP, nw.HOST_UPLINK6_IP):
        r = world.probe(world.off, op="http", host=addr, port=80)
        assert r["ok"] is False and r["error"] == "ENETUNREACH" and r["elapsed"] < 1.0, r


def test_packages_sandbox_gets_its_ipv6_link(world):
    gw6, addr6 = slot_link6(world.pkg)
    assert (world.pkg["gateway6"], world.pkg["addr6"]) == (gw6, addr6), world.pkg
    # AAAA only for the names of its list, as A
    r = world.probe(world.pkg, op="dns", server=nw.RESOLVER_ADDR, name="pypi.org", qtype=28)
    assert r["ok"] and r["rcode"] == 0 and r["addrs"] == [nw.REGISTRY6_IP], r
    r = world.probe(world.pkg, op="dns", server=nw.RESOLVER_ADDR, name=nw.REGISTRY6, qtype=28)
    assert r["ok"] and r["rcode"] == 0 and r["addrs"] == [nw.REGISTRY6_IP], r
    r = world.probe(world.pkg, op="dns", server=nw.RESOLVER_ADDR, name=nw.REGISTRY6, qtype=1)
    assert r["ok"] and r["rcode"] == 0 and r["addrs"] == [], r
    r = world.probe(world.pkg, op="dns", server=nw.RESOLVER_ADDR, name=nw.SITE6, qtype=28)
    assert r["ok"] and r["rcode"] == 3, r  # NXDOMAIN: not on the list


@pytest.mark.parametrize("port,tls", [(80, False), (443, True)])
def test_packages_reaches_the_ipv6_only_registry_by_name(world, port, tls):
    args = {"op": "http", "host": nw.REGISTRY6, "family": 6, "port": port}
    if tls:
        args.update(tls=True, sni=nw.REGISTRY6, ca=world.ca)
    r = world.probe(world.pkg, **args)
    assert r["ok"] and r["status"] == 200 and '"site": "registry"' in r["body"], r
    assert f'"host": "{nw.REGISTRY6}"' in r["body"], r


def test_packages_refuses_other_ipv6_names_and_addresses(world):
    # a name not on the list, over IPv6: the relay resets it (the TCP connection reached the relay, not the site)
    refused(world, world.pkg, "ECONNRESET", op="http", host=nw.SITE6_IP, port=80, host_header=nw.SITE6)
    refused(world, world.pkg, "ECONNRESET", op="http", host=nw.SITE6_IP, port=443, tls=True, sni=nw.SITE6,
            ca=world.ca)
    # a listed name at another site's address: the relay resolves the name itself, so it reaches the registry
    r = world.probe(world.pkg, op="http", host=nw.SITE6_IP, port=80, host_header=nw.REGISTRY6)
    assert r["ok"] and '"site": "registry"' in r["body"], r
    # denied addresses are not even redirected; another port and the host's addresses are refused
    refused(world, world.pkg, "ECONNREFUSED", op="http", host=nw.LAN6_IP, port=443)
    refused(world, world.pkg, "ECONNREFUSED", op="http", host=nw.SITE6_IP, port=8080)
    refused(world, world.pkg, "ECONNREFUSED", op="http", host=nw.HOST_UPLINK6_IP, port=8000)


# ---- --pool6 off


@needs_pool6
def test_pool6_off_gives_web_no_ipv6():
    with nw.World(suffix="o") as w:  # beside the module's world
        w.start_lensbox(extra_args=("--pool6", "off"))
        sb = w.add_sandbox("w6offpool", "web")
        assert sb["addr6"] == "-" and sb["gateway6"] == "-", sb
        assert in_ns(sb["ns"], "ip", "-j", "-6", "route", "show", "table", "all") == []
        r = w.probe(sb, op="http", host=nw.SITE6_IP, port=80)
        assert r["ok"] is False and r["error"] == "EADDRNOTAVAIL" and r["elapsed"] < 1.0, r
        r = w.probe(sb, op="http", host=nw.SITE, port=80)  # IPv4 as ever
        assert r["ok"] and json.loads(r["body"])["site"] == "site", r


@needs_pool6
def test_ipv6_follows_the_default_route_to_a_new_uplink():
    """test_network_uplinks.py's move for IPv6: both default routes move to a second link; once lensbox has followed
    them (`uplinks`), a web sandbox's IPv6 leaves through the new link, masqueraded behind its address."""
    with nw.World(suffix="u") as w:
        w.start_lensbox()
        sb = w.add_sandbox("w6up", "web")
        r = w.probe(sb, op="http", host=nw.SITE6_IP, port=80)
        assert r["ok"] and json.loads(r["body"])["client"] == nw.HOST_UPLINK6_IP, r
        w.add_second_uplink()
        w.move_default_route(nw.INET_GW2_IP, "up1")
        assert w.ctl.ok("uplinks") == ["1"]
        r = w.probe(sb, op="http", host=nw.SITE6_IP, port=80)
        assert r["ok"] and json.loads(r["body"])["client"] == nw.HOST_UPLINK2_6_IP, r
        r = w.probe(sb, op="http", host=nw.SITE_IP, port=80)
        assert r["ok"] and json.loads(r["body"])["client"] == nw.HOST_UPLINK2_IP, r


REAL_NO_POOL6 = nw.has_pool6("lensbox-net-sandbox")


@pytest.mark.skipif(bool(REAL_NO_POOL6), reason=REAL_NO_POOL6 or "lensbox-net-sandbox has --pool6")
def test_real_web_sandbox_over_ipv6():
    """The same from inside a REAL sandbox (lb_runner: user, mount, pid and net namespaces, Landlock, seccomp, an
    unprivileged uid, the default python image), as test_network_sandbox.py does for IPv4: nothing of the runner's
    confinement stands in IPv6's way, and the host's refusals reach the program as they do in a plain namespace."""
    from lensbox_testlib import images
    rootfs = os.environ.get("LENSBOX_TEST_ROOTFS") or images.default_rootfs()
    agent = open(nw.AGENT).read().split('if __name__ == "__main__":')[0]
    with nw.World(suffix="r") as w:
        w.start_lensbox(tool="lensbox-net-sandbox")
        words = w.ctl.ok(f"start r6web web {rootfs} {w.tmp}/storage {w.tmp}/run 231300")
        try:
            assert len(words) == 5 and words[3] != "-", words
            gw6 = words[4]
            ops = [
                ({"op": "http", "host": nw.SITE6, "family": 6, "port": 80}, "ok"),
                ({"op": "http", "host": nw.SITE6, "family": 6, "port": 443, "tls": True, "sni": nw.SITE6,
                  "ca": "/tmp/ca.pem"}, "ok"),
                ({"op": "resolve", "name": nw.SITE, "family": 0}, "ok"),
                ({"op": "http", "host": nw.SITE6_IP, "port": 8080}, "ECONNREFUSED"),
                ({"op": "udp", "addr": nw.SITE6_IP, "port": 9999}, "EACCES"),
                ({"op": "http", "host": nw.LAN6_IP, "port": 80}, "ECONNREFUSED"),
                ({"op": "http", "host": nw.NAT64_METADATA_IP, "port": 80}, "ECONNREFUSED"),
                ({"op": "http", "host": nw.HOST_UPLINK6_IP, "port": 80}, "ECONNREFUSED"),
                ({"op": "http", "host": gw6, "port": 80}, "ECONNREFUSED"),
                ({"op": "resolve", "name": nw.REBIND6, "family": 6}, "EAI_NONAME"),
            ]
            code = (agent + f"\nopen('/tmp/ca.pem', 'w').write({open(w.ca).read()!r})\n"
                    f"for a in json.loads({json.dumps([o for o, _ in ops])!r}):\n    probe(a)\n")
            before = int(w.ctl.ok("blocked r6web")[0])
            reply = w.ctl.cmd(f"exec r6web 120 {code.encode().hex()}")
            assert reply.startswith("ok "), reply
            _, status, sig, out, err = reply.split(" ")
            assert (status, sig) == ("0", "0"), bytes.fromhex(err).decode() if err != "-" else ""
            results = [json.loads(line) for line in bytes.fromhex(out).decode().splitlines() if line.startswith("{")]
            assert len(results) == len(ops), results
            for r, (_, want) in zip(results, ops):
                if want == "ok":
                    assert r["ok"], r
                else:
                    assert r["ok"] is False and r["error"] == want and r["elapsed"] < 1.0, (want, r)
            assert json.loads(results[0]["body"])["site"] == "site6", results[0]
            assert results[2]["addrs"] == sorted([nw.SITE_IP, nw.SITE_DUAL6_IP]), results[2]
            assert int(w.ctl.ok("blocked r6web")[0]) >= before + len(ops) - 3
        finally:
            w.ctl.cmd("stop r6web")

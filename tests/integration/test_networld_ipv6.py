"""The sealed network world's IPv6 (tests/lensbox_testlib/networld.py), without lensbox: what the IPv6 tests of the
product stand on. From the world's host namespace, the IPv6-only site and the dual-stack one answer over IPv6, the DNS
server answers AAAA (over IPv4 and IPv6), every denied-range address that bait a refusal answers when nothing refuses,
and the world is sealed for IPv6 as for IPv4: no router advertisement taken, no address made by the kernel, no default
route but the world's own, nothing of the world in the machine's namespace.
"""
import ipaddress
import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from lensbox_testlib import networld as nw  # noqa: E402


@pytest.fixture(scope="module")
def world():
    with nw.World() as w:
        yield w


def probe_in(world, ns, **args):
    r = nw.sh(nw.PY, nw.AGENT, "probe", json.dumps(args), ns=ns, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_world_is_sealed_for_ipv6(world):
    world.assert_sealed()
    for ns in (world.host, world.inet, world.lan):
        for link in json.loads(nw.sh("ip", "-j", "link", "show", ns=ns).stdout):
            for key in ("accept_ra", "autoconf"):
                value = nw.sh("cat", f"/proc/sys/net/ipv6/conf/{link['ifname']}/{key}", ns=ns).stdout.strip()
                assert value == "0", (ns, link["ifname"], key, value)
    routes = json.loads(nw.sh("ip", "-j", "-6", "route", "show", "default", ns=world.host).stdout)
    assert [(r["gateway"], r["dev"]) for r in routes] == [(nw.INET_GW6_IP, "up0")], routes
    assert json.loads(nw.sh("ip", "-j", "-6", "route", "show", "default", ns=world.inet).stdout) == []
    # the check itself catches what it is for: a default route through a device of the world it was not told of
    nw.sh("ip", "-6", "route", "add", "default", "via", nw.HOST_UPLINK6_IP, "dev", "eth0", "metric", "2000",
          ns=world.inet)
    try:
        with pytest.raises(AssertionError, match="IPv6 default routes"):
            world.assert_sealed()
    finally:
        nw.sh("ip", "-6", "route", "del", "default", "via", nw.HOST_UPLINK6_IP, "dev", "eth0", "metric", "2000",
              ns=world.inet)
    world.assert_sealed()


def test_site6_answers_over_ipv6(world):
    r = probe_in(world, world.host, op="http", host=nw.SITE6_IP, port=80)
    assert r["ok"] and r["status"] == 200, r
    body = json.loads(r["body"])
    assert body["site"] == "site6" and body["client"] == nw.HOST_UPLINK6_IP, body
    r = probe_in(world, world.host, op="http", host=nw.SITE6, family=6, port=443, tls=True, sni=nw.SITE6,
                 ca=world.ca)
    assert r["ok"] and r["addr"] == nw.SITE6_IP and json.loads(r["body"])["sni"] == nw.SITE6, r
    # the dual-stack site over either family
    r = probe_in(world, world.host, op="http", host=nw.SITE, family=6, port=443, tls=True, sni=nw.SITE, ca=world.ca)
    assert r["ok"] and r["addr"] == nw.SITE_DUAL6_IP and json.loads(r["body"])["site"] == "site", r
    r = probe_in(world, world.host, op="http", host=nw.SITE, port=80)
    assert r["ok"] and r["addr"] == nw.SITE_IP and json.loads(r["body"])["client"] == nw.HOST_UPLINK_IP, r


def test_site6_answers_udp_and_icmpv6(world):
    r = probe_in(world, world.host, op="udp", addr=nw.SITE6_IP, port=9999, payload="hello6")
    assert r["ok"] and r["reply"] == "hello6", r
    r = probe_in(world, world.host, op="ping6", addr=nw.SITE6_IP)
    assert r["ok"], r


@pytest.mark.parametrize("server", [nw.DNS_IP, nw.DNS6_IP])
def test_dns_answers_aaaa(world, server):
    def ask(name, qtype):
        r = probe_in(world, world.host, op="dns", server=server, name=name, qtype=qtype)
        assert r["ok"] and r["rcode"] == 0, r
        return r["addrs"]

    assert ask(nw.SITE6, 28) == [nw.SITE6_IP] and ask(nw.SITE6, 1) == []
    assert ask(nw.SITE, 28) == [nw.SITE_DUAL6_IP] and ask(nw.SITE, 1) == [nw.SITE_IP]
    assert ask(nw.REBIND6, 28) == [nw.LAN6_IP]
    assert ask(nw.METADATA64, 28) == [nw.NAT64_METADATA_IP]
    assert ask("pypi.org", 28) == [nw.REGISTRY6_IP] and ask("pypi.org", 1) == [nw.REGISTRY_IP]
    assert ask(nw.REBIND, 28) == [] and ask(nw.REBIND, 1) == [nw.LAN_IP]  # IPv4 names are as they were
    r = probe_in(world, world.host, op="dns", server=server, name="nowhere.example", qtype=28)
    assert r["ok"] and r["rcode"] == 3 and r["addrs"] == [], r


def test_names_resolve_through_the_world_resolv_conf(world):
    r = probe_in(world, world.host, op="resolve", name=nw.SITE, family=0)
    assert r["ok"] and r["addrs"] == sorted([nw.SITE_IP, nw.SITE_DUAL6_IP]), r
    r = probe_in(world, world.host, op="resolve", name=nw.SITE6, family=6)
    assert r["ok"] and r["addrs"] == [nw.SITE6_IP], r


def test_denied_bait_and_lan_answer_when_nothing_refuses(world):
    """Each address the product's IPv6 refusals are tried against has a listener: from the world's host namespace,
    which has no lensbox, every one answers. A refusal from a sandbox then proves a rule, not an empty address."""
    for addr, what in nw.DENIED6_BAIT.items():
        r = probe_in(world, world.host, op="http", host=addr, port=80)
        assert r["ok"] and json.loads(r["body"])["site"] == "denied-bait", (what, r)
    r = probe_in(world, world.host, op="http", host=nw.LAN6_IP, port=80)
    assert r["ok"] and json.loads(r["body"])["site"] == "lan", r
    r = probe_in(world, world.lan, op="http", host=nw.HOST_UPLINK6_IP, port=8000)  # the host's own, over IPv6
    assert r["ok"] and json.loads(r["body"])["site"] == "host", r
    for addr in nw.DENIED6_BAIT:  # and each is really in a denied range of the policy's own list
        assert in_denied_list(addr), addr


def denied6():
    path = os.path.join(os.environ["LENSBOX_SOURCE_DIR"], "policy", "network", "denied.list")
    words = (line.split("#")[0].strip() for line in open(path))
    return [ipaddress.ip_network(w) for w in words if ":" in w]


def in_denied_list(addr):
    return any(ipaddress.ip_address(addr) in net for net in denied6())


def test_every_denied_ipv6_range_has_bait():
    """One bait address in each IPv6 line of denied.list: a range added there is tried by the product's tests too,
    once it has an address here."""
    bait = [ipaddress.ip_address(a) for a in nw.DENIED6_BAIT]
    missing = [str(net) for net in denied6() if not any(ip in net for ip in bait)]
    assert not missing, f"denied IPv6 ranges without an address in networld.DENIED6_BAIT: {missing}"


def test_world_addresses_are_not_denied(world):
    """The world's internet stands for the public one: none of its addresses is in a denied range, or the product's
    tests that reach it would prove nothing."""
    for addr in (nw.HOST_UPLINK6_IP, nw.INET_GW6_IP, nw.REGISTRY6_IP, nw.SITE_DUAL6_IP, nw.SITE6_IP, nw.DNS6_IP):
        assert not in_denied_list(addr), addr
    assert in_denied_list(nw.LAN6_IP) and in_denied_list(nw.HOST_LAN6_IP)

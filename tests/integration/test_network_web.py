"""The `web` tier, proven from inside sandboxes in a sealed network world (tests/lensbox_testlib/networld.py).

A web sandbox reaches public addresses on TCP 80 and 443, and nothing else: every refusal is asserted by its exact
errno, is fast (under a second), and is counted in the sandbox's network_blocked counter. Every refused target has a
live listener, so a refusal proves the rule and not an empty port.
"""
import os
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from lensbox_testlib import networld as nw  # noqa: E402


@pytest.fixture(scope="module")
def world():
    with nw.World() as w:
        w.start_lensbox()
        w.a = w.add_sandbox("weba", "web")
        w.b = w.add_sandbox("webb", "web")
        # a listener inside sandbox b, so that a refusal from a proves the rule
        w.spawn(w.b["ns"], "http", {"site": "sandbox-b", "listen": [[w.b["addr"], 80, False]]})
        w.b_udp_log = f"{w.tmp}/sandbox-b-udp.log"
        w.spawn(w.b["ns"], "udp_echo", {"listen": [w.b["addr"], 9999], "log": w.b_udp_log})
        yield w


def refused(world, sb, expect, **args):
    before = world.blocked(sb)
    r = world.probe(sb, **args)
    assert r["ok"] is False, r
    assert r["error"] == expect, r
    assert r["elapsed"] < 1.0, r
    assert world.blocked(sb) > before, "the refusal was not counted in network_blocked"
    return r


def test_world_is_sealed(world):
    world.assert_sealed()


def test_public_site_http_and_https(world):
    r = world.probe(world.a, op="http", host=nw.SITE, port=80)
    assert r["ok"] and r["status"] == 200 and '"site": "site"' in r["body"], r
    r = world.probe(world.a, op="http", host=nw.SITE, port=443, tls=True, sni=nw.SITE, ca=world.ca)
    assert r["ok"] and r["status"] == 200 and '"sni": "site.example"' in r["body"], r


def test_dns_through_lensbox_resolver(world):
    r = world.probe(world.a, op="resolve", name=nw.SITE)
    assert r["ok"] and r["addrs"] == [nw.SITE_IP], r


def test_port_8080_refused(world):
    refused(world, world.a, "ECONNREFUSED", op="http", host=nw.SITE_IP, port=8080)


def test_udp_refused(world):
    refused(world, world.a, "EHOSTUNREACH", op="udp", addr=nw.SITE_IP, port=9999)


def test_lan_refused(world):
    refused(world, world.a, "ECONNREFUSED", op="http", host=nw.LAN_IP, port=80)


def test_metadata_refused(world):
    refused(world, world.a, "ECONNREFUSED", op="http", host=nw.METADATA_IP, port=80)


def test_host_addresses_refused(world):
    refused(world, world.a, "ECONNREFUSED", op="http", host=nw.HOST_UPLINK_IP, port=80)
    refused(world, world.a, "ECONNREFUSED", op="http", host=nw.HOST_LAN_IP, port=80)
    refused(world, world.a, "ECONNREFUSED", op="http", host=world.a["gateway"], port=80)


def test_other_sandbox_refused(world):
    # b's own listener answers inside b ...
    r = world.probe(world.b, op="http", host=world.b["addr"], port=80)
    assert r["ok"] and '"site": "sandbox-b"' in r["body"], r
    # ... but a cannot reach it, neither its address nor its gateway
    refused(world, world.a, "ECONNREFUSED", op="http", host=world.b["addr"], port=80)
    refused(world, world.a, "ECONNREFUSED", op="http", host=world.b["gateway"], port=80)


def test_the_host_opens_nothing_to_a_sandbox(world):
    """base.nft's from_host: no process on the host, root or another user, opens a connection to a sandbox or sends it
    a datagram (b listens on TCP 80 and UDP 9999); only answers to what the sandbox opened go in (the DNS tests)."""
    import json
    out = json.loads(nw.sh(nw.PY, "-c", nw.HOST_TO_SANDBOX, world.b["addr"], "80", "9999", ns=world.host).stdout)
    want = {"tcp": "EHOSTUNREACH", "fast": True, "udp": "EPERM"}
    assert out == {"0": want, "65534": want}, out
    time.sleep(0.2)
    assert not os.path.exists(world.b_udp_log) or "from-the-host" not in open(world.b_udp_log).read()
    r = world.probe(world.b, op="resolve", name=nw.SITE)  # answers still go in
    assert r["ok"] and r["addrs"] == [nw.SITE_IP], r


def test_rebinding_name_does_not_resolve(world):
    # the world's DNS server says rebind.example is 10.1.0.10; lensbox's resolver drops that answer
    direct = nw.sh(nw.PY, nw.AGENT, "probe", '{"op": "dns", "server": "%s", "name": "%s"}' % (nw.DNS_IP, nw.REBIND),
                   ns=world.host)
    assert nw.LAN_IP in direct.stdout, direct.stdout
    refused(world, world.a, "EAI_NONAME", op="resolve", name=nw.REBIND)


def test_dns_to_another_server_refused(world):
    refused(world, world.a, "EHOSTUNREACH", op="dns", server=nw.DNS_IP, name=nw.SITE)


def test_spoofed_source_dropped(world):
    """Raw TCP SYNs to an allowed destination (site:80): the forged ones never reach the forward hook."""
    # a watch table in the world's host namespace, after lensbox's forward chain, counting what got through
    a, b = world.a["addr"], world.b["addr"]
    forged = (b, "10.231.7.2", nw.SITE_IP)
    rules = ("add table ip lbwatch\n"
             "add chain ip lbwatch passed { type filter hook forward priority 10; policy accept; }\n"
             + "".join(f"add rule ip lbwatch passed ip saddr {s} tcp dport 80 tcp flags syn counter\n"
                       for s in (a,) + forged))
    r = nw.sh("nft", "-f", "-", ns=world.host, input=rules)
    try:
        before = world.blocked(world.a)
        for source in forged + (a,):
            r = world.probe(world.a, op="spoof_syn", addr=nw.SITE_IP, port=80, source=source)
            assert r["ok"] and r["sent"] == 40, r
        time.sleep(0.2)
        listing = nw.sh("nft", "list", "chain", "ip", "lbwatch", "passed", ns=world.host).stdout
        counts = {}
        for line in listing.splitlines():
            if "ip saddr" in line:
                words = line.split()
                counts[words[words.index("saddr") + 1]] = int(words[words.index("packets") + 1])
        assert counts[a] == 1, listing  # the genuine SYN went through: the path works
        for s in forged:
            assert counts[s] == 0, listing  # the forged ones were dropped before forwarding
        assert world.blocked(world.a) >= before + len(forged)
    finally:
        nw.sh("nft", "delete", "table", "ip", "lbwatch", ns=world.host, check=False)


def test_dns_through_the_gateway_too(world):
    r = world.probe(world.a, op="dns", server=world.a["gateway"], name=nw.SITE)
    assert r["ok"] and r["rcode"] == 0 and r["addrs"] == [nw.SITE_IP], r


def test_resolver_port_and_tcp_dns_refused(world):
    refused(world, world.a, "EHOSTUNREACH", op="udp", addr=world.a["gateway"], port=nw.RESOLVER_PORT)
    refused(world, world.a, "ECONNREFUSED", op="http", host=nw.RESOLVER_ADDR, port=53)


def test_ipv6_under_the_rules_of_ipv4(world):
    # web sandboxes have IPv6 (docs/network.md): another sandbox's IPv6 address and a private one are refused
    assert world.a["addr6"] != "-" and world.b["addr6"] != "-", world.a
    refused(world, world.a, "ECONNREFUSED", op="v6", addr=world.b["addr6"], port=80)
    refused(world, world.a, "ECONNREFUSED", op="v6", addr="fd00::1", port=443)
    refused(world, world.a, "ECONNREFUSED", op="v6", addr="2606:4700::1111", port=22)

"""The `web` tier's fast path (policy/network/offload.nft, an nftables flowtable), in a sealed network world.

Every test runs on any kernel and asserts the exact outcome for the kernel it runs on, which it finds out apart from
lensbox (a throwaway namespace tries a flowtable):
  - with flowtables (Debian's kernels: nf_flow_table), lensbox loads the flowtable over the world's uplink (up0, found
    from the default route as on a real host) and each `web` sandbox's veth; established connections are offloaded
    (conntrack marks them [OFFLOAD], and their packets no longer cross the forward hook);
  - without them (this CI host's 6.18 is built without CONFIG_NF_FLOW_TABLE), lensbox says why in its health, has no
    flowtable, and every packet takes the forward chain.
In both cases: web works, a denied destination is refused at once and counted, forged sources are dropped and counted
even with a live connection of the same addresses and ports (offloaded where the kernel can), and removing a sandbox
leaves no device in the flowtable and no rule behind.
"""
import os
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from lensbox_testlib import netflow as nf  # noqa: E402
from lensbox_testlib import networld as nw  # noqa: E402

BULK = nf.BULK


@pytest.fixture(scope="module")
def world():
    w = nf.new_world()
    try:
        w.a = w.add_sandbox("fta", "web")
        w.b = w.add_sandbox("ftb", "web")
        # a listener inside sandbox b, so that a refusal from a proves the rule and not an empty port
        w.spawn(w.b["ns"], "http", {"site": "sandbox-b", "listen": [[w.b["addr"], 80, False]]})
        yield w
    finally:
        nf.unwatch(w)
        w.close()





def test_world_is_sealed(world):
    world.assert_sealed()


def test_offload_is_on_exactly_where_the_kernel_has_flowtables(world):
    h = nf.health(world.ctl)
    assert h["uplinks"] == "up0", h  # the world's uplink, found from its default route like a real host's
    if world.flowtables:
        assert h["offload"] == "1" and h["offload_why"] == "", h
        assert nf.flowtable_devices(world) == sorted(["up0", world.a["ifname"], world.b["ifname"]])
        t = world.nft("list", "chain", "inet", "lensbox", "allowed").stdout
        assert "ct state established flow add @fastpath" in t and t.index("flow add") < t.index("accept"), t
    else:
        assert "No such file or directory" in world.kernel_says, world.kernel_says
        assert h["offload"] == "0", h
        assert h["offload_why"].startswith("the kernel refused the flowtable (nf_flow_table): "), h
        assert "No such file or directory" in h["offload_why"], h
        assert nf.flowtable_devices(world) is None
        t = world.nft("list", "chain", "inet", "lensbox", "allowed").stdout
        assert "flow add" not in t and "accept" in t, t
    # in both cases the tier's chain reaches `allowed` only after its denies
    fwd = world.nft("list", "chain", "inet", "lensbox", f"sb{world.a['ifname'][3:]}_fwd").stdout
    assert fwd.index("@denied4") < fwd.index("goto allowed") < fwd.rindex("jump"), fwd


def test_web_download_takes_the_fast_path(world):
    a = world.a
    counts = nf.watch_forward(world, [f'oifname "{a["ifname"]}"', f'iifname "{a["ifname"]}"'])
    try:
        assert nf.curl_bulk(a) == BULK
        into, out_of = counts()
    finally:
        nf.unwatch(world)
    if world.flowtables:
        # the handshake's reply and the last packets (FIN, which leaves the fast path) at most: not the bulk
        assert into < 16 and out_of < 16, (into, out_of)
    else:
        assert into >= BULK // 65536 and out_of > 0, (into, out_of)
    # and a live connection is marked offloaded in conntrack (or not), both ways at once
    t = nf.Trickle(a, nw.SITE_IP)
    try:
        line, state = nf.wait_offload_state(world, t, world.flowtables)
        assert state is world.flowtables, line
    finally:
        assert t.close() > 0


def refused_once(world, sb, expect, **args):
    before = world.blocked(sb)
    r = world.probe(sb, **args)
    assert r["ok"] is False and r["error"] == expect, r
    assert r["elapsed"] < 1.0, r
    assert world.blocked(sb) == before + 1, "the refusal was not counted exactly once in network_blocked"


def test_denied_destinations_refused_fast_beside_an_offloaded_connection(world):
    a, b = world.a, world.b
    t = nf.Trickle(a, nw.SITE_IP)
    try:
        line, state = nf.wait_offload_state(world, t, world.flowtables)
        assert state is world.flowtables, line
        # the same address as the offloaded connection, another port; then denied and local addresses
        refused_once(world, a, "ECONNREFUSED", op="http", host=nw.SITE_IP, port=8080)
        refused_once(world, a, "ECONNREFUSED", op="http", host=nw.LAN_IP, port=80)
        refused_once(world, a, "ECONNREFUSED", op="http", host=nw.METADATA_IP, port=80)
        refused_once(world, a, "ECONNREFUSED", op="http", host=nw.HOST_UPLINK_IP, port=80)
        refused_once(world, a, "ECONNREFUSED", op="http", host=a["gateway"], port=80)
        refused_once(world, a, "ECONNREFUSED", op="http", host=b["addr"], port=80)
        refused_once(world, a, "EHOSTUNREACH", op="udp", addr=nw.SITE_IP, port=9999)
        # b's listener is alive: the refusal above is the rule's
        r = world.probe(b, op="http", host=b["addr"], port=80)
        assert r["ok"] and '"site": "sandbox-b"' in r["body"], r
        line, state = nf.offloaded(world, t)
        assert state is world.flowtables, line  # the offloaded connection went on meanwhile
        r = world.probe(a, op="http", host=nw.SITE_IP, host_header=nw.SITE, port=80)
        assert r["ok"] and r["status"] == 200 and '"site": "site"' in r["body"], r
    finally:
        assert t.close() > 0


def test_forged_sources_dropped_beside_offloaded_connections(world):
    """Hand-made segments from sandbox a: the genuine one of a's live connection, and forgeries of b's live
    connection (its exact tuple, from the wrong interface), of a LAN source, and of a's connection's reply."""
    a, b = world.a, world.b
    ta, tb = nf.Trickle(a, nw.SITE_IP), nf.Trickle(b, nw.SITE_IP)
    try:
        line_a, state = nf.wait_offload_state(world, ta, world.flowtables)
        assert state is world.flowtables, line_a
        line_b, state = nf.wait_offload_state(world, tb, world.flowtables)
        assert state is world.flowtables, line_b
        _, uplink_ip, _, masq_port = nf.reply_tuple(line_a)
        assert uplink_ip == nw.HOST_UPLINK_IP, line_a
        packets = [
            dict(src=a["addr"], dst=nw.SITE_IP, sport=ta.sport, dport=80, marker="lbflow-genuine", id=0x4c01),
            dict(src=b["addr"], dst=nw.SITE_IP, sport=tb.sport, dport=80, marker="lbflow-b-tuple", id=0x4c02),
            dict(src=nw.LAN_IP, dst=nw.SITE_IP, sport=ta.sport, dport=80, marker="lbflow-lan", id=0x4c03),
            dict(src=nw.SITE_IP, dst=nw.HOST_UPLINK_IP, sport=80, dport=masq_port, marker="lbflow-reply",
                 id=0x4c04),
        ]
        counts = nf.watch_forward(world, [f"ip id {p['id']}" for p in packets])
        sniff = nf.Sniffer(world)
        before = world.blocked(a), world.blocked(b)
        try:
            nf.inject(a, packets)
            time.sleep(0.5)
        finally:
            seen = sniff.stop()
        forwarded = counts()
        # the three forgeries took the slow path and were dropped by anti-spoofing, each counted once, in a's
        # counter; b's connection was not touched by them
        assert (world.blocked(a), world.blocked(b)) == (before[0] + 3, before[1]), (before, seen)
        assert sorted(seen) == ["lbflow-genuine"], seen
        assert forwarded[1:] == [0, 0, 0], forwarded
        if world.flowtables:
            # the genuine segment took the fast path: not seen by the forward hook, masqueraded all the same
            assert forwarded[0] == 0, forwarded
            assert seen["lbflow-genuine"]["src"] == nw.HOST_UPLINK_IP, seen
            assert seen["lbflow-genuine"]["sport"] == masq_port, seen
        else:
            assert forwarded[0] == 1, forwarded
        assert nf.offloaded(world, ta)[1] is world.flowtables and nf.offloaded(world, tb)[1] is world.flowtables
    finally:
        nf.unwatch(world)
        assert ta.close() > 0 and tb.close() > 0

"""The `web` tier's fast path (policy/network/offload.nft) over a sandbox's life, in a sealed network world.

Each test builds its own world (one at a time: a world's names come from the test's pid). Like
test_network_flowtable.py, every test runs on any kernel and asserts the exact outcome for the kernel it runs on:
the flowtable's device list follows the `web` sandboxes (attach adds the veth, detach removes it, a flush is repaired
with it, a restart starts from the uplink alone), or, on a kernel without flowtables, there is none at all. Either
way removing a sandbox leaves no device, veth or rule behind.
"""
import os
import re
import signal
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from lensbox_testlib import netflow as nf  # noqa: E402
from lensbox_testlib import networld as nw  # noqa: E402

BULK = nf.BULK


@pytest.fixture
def fresh():
    w = nf.new_world()
    try:
        yield w
    finally:
        w.close()


def lensbox_objects(world):
    """Anything of a sandbox's in lensbox's table: sb<N>_ objects, lbh<N> keys or devices."""
    t = world.nft("list", "table", "inet", "lensbox").stdout
    assert "chain through_host" in t, t
    return re.findall(r"\bsb\d+_\w+|\blbh\d+", t)


def test_removing_a_sandbox_leaves_no_device_and_no_rule(fresh):
    w = fresh
    c = w.add_sandbox("ftc", "web")
    p = w.add_sandbox("ftp", "packages")
    assert nf.flowtable_devices(w) == (sorted(["up0", c["ifname"]]) if w.flowtables else None)
    t = nf.Trickle(c, nw.SITE_IP)
    try:
        line, state = nf.wait_offload_state(w, t, w.flowtables)
        assert state is w.flowtables, line
        w.ctl.ok("detach ftc")
        assert nf.flowtable_devices(w) == (["up0"] if w.flowtables else None)
        assert w.host_links() == [p["ifname"]]
        # the kernel drops the connection's flow with its device: conntrack no longer marks it offloaded
        line, state = nf.wait_offload_state(w, t, False, seconds=5)
        assert state is False, line
    finally:
        t.close()
    w.ctl.ok("detach ftp")
    assert w.host_links() == [] and lensbox_objects(w) == [], w.nft("list", "table", "inet", "lensbox").stdout
    assert nf.flowtable_devices(w) == (["up0"] if w.flowtables else None)
    # the slot again, for a new web sandbox: its new veth joins, and it works
    c2 = w.add_sandbox("ftc2", "web")
    assert c2["ifname"] == c["ifname"]
    assert nf.flowtable_devices(w) == (sorted(["up0", c2["ifname"]]) if w.flowtables else None)
    assert nf.curl_bulk(c2, 1 << 20) == 1 << 20
    w.ctl.ok("detach ftc2")
    assert nf.flowtable_devices(w) == (["up0"] if w.flowtables else None)
    assert w.host_links() == [] and lensbox_objects(w) == []


def test_flush_and_restart_keep_the_device_list_right(fresh):
    w = fresh
    d = w.add_sandbox("ftd", "web")
    want = sorted(["up0", d["ifname"]]) if w.flowtables else None
    assert nf.flowtable_devices(w) == want
    # another tool flushes everything: verify puts back the table, the flowtable and d's place in it
    nw.sh("nft", "flush", "ruleset", ns=w.host)
    assert nf.flowtable_devices(w) is None
    assert int(w.ctl.ok("verify")[0]) >= 1
    assert nf.flowtable_devices(w) == want
    assert nf.health(w.ctl)["offload"] == ("1" if w.flowtables else "0")
    assert nf.curl_bulk(d, 1 << 20) == 1 << 20
    # lensbox dies with d attached; the next one starts a fresh table and removes what the dead one left
    w.ctl.p.send_signal(signal.SIGKILL)
    w.ctl.p.wait()
    w.ctl = None
    w.start_lensbox()
    assert nf.flowtable_devices(w) == (["up0"] if w.flowtables else None)
    assert w.host_links() == [d["ifname"]]
    assert w.ctl.ok("reconcile") == ["1"]
    assert w.host_links() == [] and lensbox_objects(w) == []
    assert nf.flowtable_devices(w) == (["up0"] if w.flowtables else None)


def test_a_lost_flowtable_is_put_back_with_its_devices(fresh):
    """Someone removes only the fast path (the rule that feeds it, then the flowtable): verify reloads the table
    whole, so the flowtable comes back with every web sandbox's veth. Without flowtables there is nothing to lose."""
    w = fresh
    g = w.add_sandbox("ftg", "web")
    if w.flowtables:
        nw.sh("nft", "-f", "-", ns=w.host, input="flush chain inet lensbox allowed\n"
              "add rule inet lensbox allowed accept\ndelete flowtable inet lensbox fastpath\n")
        assert nf.flowtable_devices(w) is None
        assert int(w.ctl.ok("verify")[0]) >= 1
        assert nf.flowtable_devices(w) == sorted(["up0", g["ifname"]])
        t = w.nft("list", "chain", "inet", "lensbox", "allowed").stdout
        assert "ct state established flow add @fastpath" in t, t
    else:
        assert w.ctl.ok("verify") == ["0"]
        assert nf.flowtable_devices(w) is None
    assert nf.curl_bulk(g, 1 << 20) == 1 << 20


def test_offload_turned_off_by_configuration():
    w = nf.new_world(["--no-offload"])
    try:
        h = nf.health(w.ctl)
        assert h["offload"] == "0" and h["offload_why"] == "turned off in the configuration (no_flow_offload)", h
        e = w.add_sandbox("fte", "web")
        assert nf.flowtable_devices(w) is None
        counts = nf.watch_forward(w, [f'oifname "{e["ifname"]}"'])
        assert nf.curl_bulk(e) == BULK
        assert counts()[0] >= BULK // 65536  # every packet crossed the forward chain
    finally:
        nf.unwatch(w)
        w.close()

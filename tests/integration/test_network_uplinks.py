"""The default route moves to another interface while sandboxes run (a second link, a VPN that came back): lensbox
follows it (lb_net_follow_uplinks, from lensboxd's timer) so that `web` sandboxes keep reaching out. In the sealed
network world: the host gets a second veth to the "internet", the default route moves there, and a `web` sandbox's
connection fails until the new uplink is configured (replies arrive on an interface without IPv4 forwarding), then
works; the new uplink joins the flowtable when there is one. No packet leaves the world's namespaces. The probes use
addresses, not names: this is about routes, not DNS."""
import os
import re
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from lensbox_testlib import netflow, networld as nw  # noqa: E402


@pytest.fixture(scope="module")
def world():
    with nw.World() as w:
        w.start_lensbox()
        w.web = w.add_sandbox("upweb", "web")
        yield w


def health(world):
    line = world.ctl.cmd("health")
    return dict(x.split("=", 1) for x in line.split('" ') if "=" in x), line


def flowtable_devices(world):
    """The devices of lensbox's flowtable (nft prints them quoted or not, depending on its version)."""
    text = world.nft("list", "flowtable", "inet", "lensbox", "fastpath").stdout
    m = re.search(r"devices = \{([^}]*)\}", text)
    assert m, text
    return {d.strip().strip('"') for d in m.group(1).split(",")}


def forwarding(world, dev):
    return nw.sh("cat", f"/proc/sys/net/ipv4/conf/{dev}/forwarding", ns=world.host).stdout.strip()


def test_web_follows_the_default_route_to_a_new_uplink(world):
    assert world.ctl.ok("uplinks") == ["0"]  # nothing new: up0 was configured at start
    assert world.probe(world.web, op="http", host=nw.SITE_IP, port=80)["ok"]
    world.add_second_uplink()
    assert forwarding(world, "up1") == "0"
    world.move_default_route(nw.INET_GW2_IP, "up1")
    # Before lensbox follows: the request leaves through up1 (masqueraded), the reply arrives on up1, which does not
    # forward, and is dropped. This is the failure the following prevents.
    r = world.probe(world.web, op="http", host=nw.SITE_IP, port=80, timeout=2)
    assert r["ok"] is False, r
    assert world.ctl.ok("uplinks") == ["1"]
    assert forwarding(world, "up1") == "1"
    r = world.probe(world.web, op="http", host=nw.SITE_IP, port=80)
    assert r["ok"], r
    _, line = health(world)
    assert 'uplinks="up0 up1"' in line, line
    # Where the kernel has flowtables (the VM lane), the fast path is on and holds the new uplink too.
    has, why = netflow.kernel_has_flowtables(world)
    assert ("offload=1" in line) is has, (line, why)
    if has:
        assert {"up0", "up1"} <= flowtable_devices(world)
    assert world.ctl.ok("uplinks") == ["0"]  # configured once


def test_an_uplink_that_comes_back_as_a_new_device_is_configured_again(world):
    """A VPN or PPP link that reconnects is a new device with the same name: default forwarding, no flowtable hook."""
    world.move_default_route(nw.INET_GW_IP, "up0")
    nw.sh("ip", "link", "del", "up1", ns=world.host)
    world.host_ifaces.discard("up1")
    world.inet_ifaces.discard("eth1")
    world.add_second_uplink()
    world.move_default_route(nw.INET_GW2_IP, "up1")
    assert forwarding(world, "up1") == "0"
    assert world.ctl.ok("uplinks") == ["1"]
    assert forwarding(world, "up1") == "1"
    r = world.probe(world.web, op="http", host=nw.SITE_IP, port=80)
    assert r["ok"], r
    if netflow.kernel_has_flowtables(world)[0]:  # the new device's hook is back in the fast path
        assert "up1" in flowtable_devices(world)

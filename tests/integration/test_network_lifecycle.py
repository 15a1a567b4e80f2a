"""Network lifecycle in a sealed world: the `off` tier, detach, tier change, and reconciliation after a crash.

Removing a sandbox's network must leave no veth, set, chain, counter or map element behind; a restarted lensbox must
remove what a crashed one left for sandboxes it no longer knows.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import time
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from lensbox_testlib import networld as nw  # noqa: E402


@pytest.fixture
def world():
    with nw.World() as w:
        w.start_lensbox()
        yield w


def table(world):
    return world.nft("list", "table", "inet", "lensbox").stdout


def test_off_reaches_nothing(world):
    sb = world.add_sandbox("offsb", "off")
    assert sb["addr"] == "-"
    links = [l["ifname"] for l in json.loads(nw.sh("ip", "-j", "link", "show", ns=sb["ns"]).stdout)]
    assert links == ["lo"]
    for host in (nw.HOST_UPLINK_IP, nw.SITE_IP, "10.231.0.1"):
        r = world.probe(sb, op="http", host=host, port=80)
        assert r["ok"] is False and r["error"] == "ENETUNREACH" and r["elapsed"] < 1.0, r
    r = world.probe(sb, op="udp", addr=nw.DNS_IP, port=53)
    assert r["ok"] is False and r["error"] == "ENETUNREACH", r
    assert world.host_links() == []


def test_detach_leaves_nothing(world):
    empty = table(world)
    sb = world.add_sandbox("gone", "web")
    assert world.host_links() == ["lbh0"]
    assert "sb0_fwd" in table(world) and '"lbh0"' in table(world)
    world.ctl.ok("detach gone")
    assert world.host_links() == []
    assert table(world) == empty
    links = [l["ifname"] for l in json.loads(nw.sh("ip", "-j", "link", "show", ns=sb["ns"]).stdout)]
    assert links == ["lo"]
    assert world.ctl.cmd("detach gone").startswith("error detach: sandbox gone has no network attached")


def test_tier_change_recreates(world):
    sb = world.add_sandbox("chg", "web")
    assert world.probe(sb, op="http", host=nw.SITE, port=80)["ok"]
    world.ctl.ok(f"attach chg /run/netns/{sb['ns']} packages")
    assert world.host_links() == ["lbh0"]
    t = table(world)
    assert "sb0_tcp_ports" not in t and "dnat ip to 10.231.0.1:10080" in t, t
    r = world.probe(sb, op="http", host=nw.SITE_IP, port=80)
    assert r["ok"] is False and r["error"] == "ECONNRESET", r  # now the relay refuses a raw IP


def test_reconcile_after_crash(world):
    keep = world.add_sandbox("keep", "web")
    world.add_sandbox("drop", "packages")
    assert world.host_links() == ["lbh0", "lbh1"]
    world.ctl.p.send_signal(signal.SIGKILL)
    world.ctl.p.wait()
    ctl = world.start_lensbox()  # a restart: a fresh table; the veths are still there
    assert world.host_links() == ["lbh0", "lbh1"]
    assert ctl.ok("reconcile keep") == ["1"]
    assert world.host_links() == ["lbh0"]
    # the surviving sandbox is attached again by its supervisor, and works
    ctl.ok(f"attach keep /run/netns/{keep['ns']} web")
    assert world.probe(keep, op="http", host=nw.SITE, port=80)["ok"]
    assert ctl.ok("reconcile") == ["1"]
    assert world.host_links() == []
    assert re.search(r"\bsb\d+_", table(world)) is None, table(world)
    assert re.search(r'"lbh\d', table(world)) is None, table(world)


def test_warm_slots_serve_like_cold_ones(world):
    """With warm slots (lensboxd's network_warm_slots, here lensbox-net --warm-slots 2) a sandbox takes a slot whose
    rules were loaded ahead: it reaches what its tier allows, is refused the rest and counted from zero; before and
    after, nothing reaches the slot (no veth, no map element), and its rules stay for the next one."""
    world.ctl.close()
    world.start_lensbox(extra_args=("--warm-slots", "2"))
    assert "warm_slots=4" in world.ctl.cmd("health")
    t = table(world)
    assert "chain sb16383_fwd" in t and "chain sb16380_pre" in t and re.search(r'"lbh\d', t) is None, t
    for n in range(2):  # the second web sandbox gets the slot the first left
        sb = world.add_sandbox(f"warm{n}", "web")
        assert sb["ifname"] == "lbh16382", sb
        assert '"lbh16382" : jump sb16382_fwd' in table(world)
        assert world.blocked(sb) == 0
        assert world.probe(sb, op="http", host=nw.SITE, port=80)["ok"]
        r = world.probe(sb, op="http", host=nw.LAN_IP, port=80)
        assert r["ok"] is False and r["error"] == "ECONNREFUSED" and r["elapsed"] < 1.0, r
        r = world.probe(sb, op="http", host=nw.SITE_IP, port=8080)
        assert r["ok"] is False and r["error"] == "ECONNREFUSED", r
        assert world.blocked(sb) >= 2
        world.ctl.ok(f"detach warm{n}")
        assert world.host_links() == []
        t = table(world)
        assert re.search(r'"lbh\d', t) is None and "chain sb16382_fwd" in t, t
    pk = world.add_sandbox("warmpkg", "packages")
    assert pk["ifname"] == "lbh16380", pk
    r = world.probe(pk, op="http", host=nw.SITE_IP, port=80)
    assert r["ok"] is False and r["error"] == "ECONNRESET", r  # the relay refuses a raw IP, as from a cold slot
    assert world.blocked(pk) >= 1
    assert "warm_slots=3" in world.ctl.cmd("health")
    world.ctl.ok("detach warmpkg")
    assert "warm_slots=4" in world.ctl.cmd("health")


def test_health_reports_foreign_forward_drop(world):
    h = world.ctl.cmd("health")
    assert "foreign_forward_drop=0" in h and "table=1" in h and 'uplinks="up0"' in h, h
    nw.sh("nft", "-f", "-", ns=world.host,
          input="add table ip filter\nadd chain ip filter FORWARD { type filter hook forward priority 0; policy drop; }\n")
    h = world.ctl.cmd("health")
    assert "foreign_forward_drop=1" in h and 'forward="ip filter FORWARD (policy drop)"' in h, h
    assert 'input=""' in h, h
    nw.sh("nft", "-f", "-", ns=world.host,
          input="add table inet ufwlike\nadd chain inet ufwlike in { type filter hook input priority 0; policy drop; }\n")
    h = world.ctl.cmd("health")
    assert 'input="inet ufwlike in (policy drop)"' in h, h


def test_stopping_with_an_idle_relayed_connection(world):
    """lensbox stops promptly with a relayed connection open: the connection is woken and closed, not abandoned."""
    sb = world.add_sandbox("hold", "packages")
    p = subprocess.Popen(["ip", "netns", "exec", sb["ns"], nw.PY, nw.AGENT, "probe",
                          json.dumps({"op": "hold", "host": "pypi.org", "port": 443, "sni": "pypi.org", "ca": world.ca})],
                         stdout=subprocess.PIPE, text=True)
    try:
        assert json.loads(p.stdout.readline())["held"]
        t0 = time.monotonic()
        assert world.ctl.cmd("quit") == "ok"
        assert world.ctl.p.wait(timeout=10) == 0
        assert time.monotonic() - t0 < 3.0
        last = json.loads(p.stdout.readline())
        assert last["ok"] and last["eof"], last  # the sandbox saw its connection end
    finally:
        p.kill()
        p.wait()
    world.ctl = None


def test_npm_registry_host_comes_from_npm(world):
    """With --npm (lensboxd's default) the host of `npm config get registry` joins packages.list; it is never
    written in the repository."""
    assert shutil.which("npm"), "npm is not installed on this machine: this test proves the lookup and needs npm"
    exe = os.path.join(os.environ["LENSBOX_BUILD_DIR"], "netfilter", "lensbox-net")
    host = subprocess.run([exe, "npm-registry"], capture_output=True, text=True, check=True).stdout.strip()
    assert host and "/" not in host and ":" not in host, host
    world.ctl.close()
    ctl = world.start_lensbox(extra_args=("--npm",))
    h = ctl.cmd("health")
    assert f'npm="{host}"' in h and "packages=3" in h, h
    listed = open(os.path.join(os.environ["LENSBOX_SOURCE_DIR"], "policy", "network", "packages.list")).read()
    assert host not in listed


def test_flushed_ruleset_is_restored_failing_closed(world):
    """Another tool flushes the ruleset (a firewall reload): verify reloads lensbox's table and the sandbox's rules;
    the sandbox works again and its refusals hold."""
    sb = world.add_sandbox("flushed", "web")
    assert world.ctl.ok("verify") == ["0"]  # all in place: nothing done
    nw.sh("nft", "flush", "ruleset", ns=world.host)
    assert world.nft("list", "table", "inet", "lensbox").returncode != 0
    assert world.ctl.ok("verify") == ["2"]  # the table and one sandbox
    t = table(world)
    assert "chain sb0_fwd" in t and '"lbh0" : jump sb0_fwd' in t, t
    links = json.loads(nw.sh("ip", "-j", "link", "show", "lbh0", ns=world.host).stdout)
    assert "UP" in links[0]["flags"], links
    assert world.probe(sb, op="http", host=nw.SITE, port=80)["ok"]
    r = world.probe(sb, op="http", host=nw.LAN_IP, port=80)
    assert r["ok"] is False and r["error"] == "ECONNREFUSED", r


def test_a_tampered_base_chain_is_restored(world):
    """Someone flushes one of lensbox's base chains, or slips a rule of their own into one, leaving the table in
    place: verify notices (the base chains' shape changed) and reloads the table whole, failing closed meanwhile."""
    sb = world.add_sandbox("tampered", "web")
    assert world.ctl.ok("verify") == ["0"]
    r = world.probe(sb, op="http", host=nw.SITE_IP, port=8080)
    assert r["ok"] is False and r["error"] == "ECONNREFUSED", r
    # the forward chain flushed: the tier's chain is never reached, so a port web does not allow gets through
    nw.sh("nft", "flush", "chain", "inet", "lensbox", "through_host", ns=world.host)
    assert "vmap @sandbox_fwd" not in table(world)
    r = world.probe(sb, op="http", host=nw.SITE_IP, port=8080)
    assert r["ok"], r  # the hole verify must close
    assert world.ctl.ok("verify") == ["2"]  # the table and the sandbox
    assert "iifname vmap @sandbox_fwd" in table(world)
    r = world.probe(sb, op="http", host=nw.SITE_IP, port=8080)
    assert r["ok"] is False and r["error"] == "ECONNREFUSED", r
    assert world.probe(sb, op="http", host=nw.SITE, port=80)["ok"]
    # an accept slipped in front of the forward chain's rules: reloaded away too
    nw.sh("nft", "insert", "rule", "inet", "lensbox", "through_host", "accept", ns=world.host)
    assert world.ctl.ok("verify") == ["2"]
    assert not re.search(r"through_host \{[^}]*?hook forward[^}]*?\n\s*accept\n", table(world)), table(world)
    r = world.probe(sb, op="http", host=nw.SITE_IP, port=8080)
    assert r["ok"] is False and r["error"] == "ECONNREFUSED", r
    # a base chain deleted outright (flushed first, as nft requires)
    nw.sh("nft", "flush", "chain", "inet", "lensbox", "from_host", ns=world.host)
    nw.sh("nft", "delete", "chain", "inet", "lensbox", "from_host", ns=world.host)
    assert world.ctl.ok("verify") == ["2"]
    assert "chain from_host" in table(world)
    assert world.ctl.ok("verify") == ["0"]

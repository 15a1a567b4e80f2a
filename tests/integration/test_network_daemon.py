"""lensboxd itself, run inside the sealed network world (tests/lensbox_testlib/networld.py), serving sandboxes with
network tiers through its API: the whole path a Lens conversation takes, with no packet leaving the world.

lensboxd is started in the world's host namespace (nsenter --net, so it keeps the machine's /sys and cgroups) with
the world's DNS server as its upstream. Each run's program is the in-sandbox probe; its refusals are asserted by errno.
"""
import json
import os
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from lensbox_testlib import netflow, networld as nw  # noqa: E402

AGENT_SRC = open(nw.AGENT).read().split('if __name__ == "__main__":')[0]


@pytest.fixture(scope="module")
def env():
    yield from nw.world_daemon()


def program(world, ops, extra=""):
    ca = open(world.ca).read()
    return (AGENT_SRC + f"\nopen('/tmp/ca.pem', 'w').write({ca!r})\n" + extra +
            f"\nfor a in json.loads({json.dumps(ops)!r}):\n    probe(a)\n")


def results(run):
    assert run["exit_code"] == 0, run
    return [json.loads(line) for line in run["stdout"].splitlines() if line.startswith("{")]


def test_health_reports_the_tiers(env):
    w, d = env
    w.assert_sealed()
    health = d.request("GET", "/v1/health")[1]
    assert health["network"]["tiers_available"] is True, health["network"]


def test_health_says_whether_web_takes_the_flowtable(env):
    """The fast path is on exactly when this kernel has flowtables (a probe apart from lensbox), and says why not."""
    w, d = env
    has, kernel_err = netflow.kernel_has_flowtables(w)
    net = d.request("GET", "/v1/health")[1]["network"]
    assert net["flow_offload"] is has, (net, kernel_err)
    if has:
        assert net["flow_offload_why_not"] is None, net
    else:
        assert "flowtable" in net["flow_offload_why_not"], net
    assert "flow_offload=%d" % has in d.read_log(), "the start log line says it too"


def test_web_run_through_lensboxd(env):
    w, d = env
    ops = [{"op": "http", "host": nw.SITE, "port": 443, "tls": True, "sni": nw.SITE, "ca": "/tmp/ca.pem"},
           {"op": "http", "host": nw.LAN_IP, "port": 80},
           {"op": "http", "host": nw.METADATA_IP, "port": 80},
           {"op": "http", "host": nw.SITE_IP, "port": 8080},
           {"op": "resolve", "name": nw.REBIND}]
    run = d.ok_run(d.name("web"), program(w, ops), sandbox={"network": "web"})
    r = results(run)
    assert r[0]["ok"] and '"site": "site"' in r[0]["body"], r[0]
    assert [x.get("error") for x in r[1:]] == ["ECONNREFUSED", "ECONNREFUSED", "ECONNREFUSED", "EAI_NONAME"], r
    assert all(x["elapsed"] < 1.0 for x in r[1:]), r


PIP = r"""
import subprocess
env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "PIP_CERT": "/tmp/ca.pem"}
p = subprocess.run(["python3", "-m", "pip", "download", "--no-cache-dir", "--disable-pip-version-check", "--no-deps",
                    "-d", "/tmp/dl", "--index-url", "https://pypi.org/simple/", "lbdemo"], env=env,
                   capture_output=True, text=True)
print(json.dumps({"op": "pip", "ok": p.returncode == 0, "out": (p.stdout + p.stderr)[-1500:], "elapsed": 0,
                  "files": os.listdir("/tmp/dl") if p.returncode == 0 else []}))
"""


def test_packages_run_through_lensboxd(env):
    w, d = env
    ops = [{"op": "http", "host": nw.REGISTRY_IP, "port": 443, "tls": True, "sni": nw.NEIGHBOUR, "ca": "/tmp/ca.pem"},
           {"op": "resolve", "name": nw.SITE}]
    run = d.ok_run(d.name("pkg"), program(w, ops, extra=PIP), sandbox={"network": "packages"})
    r = results(run)
    assert r[0]["ok"] and r[0]["files"] == ["lbdemo-1.0-py3-none-any.whl"], r[0]["out"]
    assert [x.get("error") for x in r[1:]] == ["ECONNRESET", "EAI_NONAME"], r


def test_off_run_through_lensboxd(env):
    w, d = env
    ops = [{"op": "http", "host": nw.SITE_IP, "port": 80}, {"op": "udp", "addr": nw.DNS_IP, "port": 53}]
    run = d.ok_run(d.name("off"), program(w, ops))
    assert [x.get("error") for x in results(run)] == ["ENETUNREACH", "ENETUNREACH"], run  # only lo: no route out


def test_health_names_a_foreign_forward_drop(env):
    """A Docker-like forward policy of drop in another table would stop `web`: /v1/health says which chain."""
    w, d = env
    assert d.request("GET", "/v1/health")[1]["network"]["blocking_forward_chain"] is None
    nw.sh("nft", "-f", "-", ns=w.host,
          input="add table ip filter\nadd chain ip filter FORWARD { type filter hook forward priority 0; policy drop; }\n")
    try:
        net = d.request("GET", "/v1/health")[1]["network"]
        assert net["blocking_forward_chain"] == "ip filter FORWARD (policy drop)", net
        # and it is true: web traffic now dies in that chain (a drop there, so the connection times out)
        run = d.ok_run(d.name("web"), program(w, [{"op": "http", "host": nw.SITE_IP, "port": 80, "timeout": 1}]),
                       sandbox={"network": "web"})
        assert results(run)[0].get("error") == "TIMEOUT", run
    finally:
        nw.sh("nft", "delete", "table", "ip", "filter", ns=w.host)


def test_lensboxd_follows_the_default_route_to_a_new_uplink(env):
    """The host's default route moves to a second link: lensboxd's timer turns forwarding on there (and logs it), so
    `web` runs keep reaching out; without it, replies arriving on the new link would be dropped."""
    w, d = env
    w.add_second_uplink()
    w.move_default_route(nw.INET_GW2_IP, "up1")
    try:
        deadline = time.monotonic() + 10  # the timer looks every 2 s
        while "a new uplink carries the default route" not in d.read_log() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert 'uplinks="up0 up1"' in d.read_log(), d.read_log()[-2000:]
        run = d.ok_run(d.name("web"), program(w, [{"op": "http", "host": nw.SITE, "port": 443, "tls": True,
                                                   "sni": nw.SITE, "ca": "/tmp/ca.pem"}]), sandbox={"network": "web"})
        assert results(run)[0]["ok"], run
    finally:
        w.move_default_route(nw.INET_GW_IP, "up0")

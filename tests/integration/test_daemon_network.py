"""lensboxd wires netfilter/ into a sandbox's life: a `web` or `packages` sandbox gets a veth and the resolver
address, an `off` sandbox only lo; stopping removes the host side; a restart after SIGKILL removes what was left;
with networking off, networked tiers are refused with 503. No packet leaves the host: the tests only look at
interfaces, routes and files, and the whole test runs in a sealed network namespace (lensbox_testlib.sealed)
so lensbox's table and forwarding never touch the machine's own network."""
import os
import socket
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from lensbox_testlib import sealed  # noqa: E402
from lensbox_testlib.lensboxd import Daemon  # noqa: E402

sealed.enter()

SHOW = "cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' ' | sort | tr '\\n' ' '; echo; cat /etc/resolv.conf 2>&1 | grep nameserver || echo none"


def host_veths():
    # netlink, not /sys/class/net: sysfs shows the namespace it was mounted in, not ours
    return {name for _, name in socket.if_nameindex() if name.startswith("lbh")}


def test_tiers_get_their_interfaces_and_lose_them_on_stop():
    with Daemon(settings={"networking": "on"}) as d:
        health = d.request("GET", "/v1/health")[1]
        assert health["network"]["tiers_available"] is True, health["network"]
        before = host_veths()
        web = d.ok_run(d.name("web"), SHOW, "bash", sandbox={"network": "web"})
        ifaces, resolv = web["stdout"].splitlines()
        assert ifaces.split() == ["eth0", "lo"]
        assert resolv == "nameserver 169.254.53.53"
        added = host_veths() - before
        assert len(added) == 1, added
        off = d.ok_run(d.name("off"), SHOW, "bash")
        ifaces, resolv = off["stdout"].splitlines()
        assert ifaces.split() == ["lo"] and resolv == "none"
        assert d.request("GET", "/v1/health")[1]["network"]["attached"] >= 1
        assert d.request("POST", f"/v1/sandboxes/{d.name('web')}/stop")[1] == {"stopped": True}
        assert not (host_veths() & added)
        # changing the network recreates it with the new tier's plumbing
        r = d.ok_run(d.name("web"), SHOW, "bash", sandbox={"network": "off"})
        assert r["recreated"] == "the network changed from web to off"
        assert r["stdout"].splitlines()[0].split() == ["lo"]


def test_sigkill_leaves_nothing_after_restart():
    d = Daemon(settings={"networking": "on"})
    try:
        before = host_veths()
        d.ok_run(d.name("pk"), "true", "bash", sandbox={"network": "packages"})
        added = host_veths() - before
        assert len(added) == 1
        d.kill9()
        assert host_veths() & added, "the veth should still be there right after SIGKILL"
        d.start()
        assert not (host_veths() & added), "reconciliation left the veth"
        assert d.leaks() == []
        r = d.ok_run(d.name("pk"), SHOW, "bash")
        assert r["stdout"].splitlines()[0].split() == ["eth0", "lo"]
    finally:
        d.cleanup()


def test_networking_off_refuses_networked_tiers():
    with Daemon(settings={"networking": "off"}) as d:
        health = d.request("GET", "/v1/health")[1]
        assert health["network"]["tiers_available"] is False
        assert "networking = off" in health["network"]["why_not"]
        status, b = d.run(d.name("w"), "print(1)", sandbox={"network": "web"})
        assert status == 503 and b["error"]["code"] == "host_unavailable"
        assert "networking = off" in b["error"]["message"]
        assert d.ok_run(d.name("o"), "print(1)")["stdout"] == "1\n"

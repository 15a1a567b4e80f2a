"""A server inside a sandbox is the sandbox's alone (docs/threat-model.md, "Servers inside a sandbox").

A real lensboxd in the sealed network world (tests/lensbox_testlib/networld.py) runs a program in sandbox A (tier
`web`, then `packages`) that listens on TCP 8000 and UDP 8001 of every address it has, and records every peer.
While it listens, everything outside tries to reach it: sandboxes of each tier, the host as root and as uid 65534,
and the LAN side of the world. Each attempt must fail the way the rules say, and A's log must show only A itself
(it connects to its own listener at start and at the end, which proves the listener was up all along).
"""
import errno
import json
import os
import sys
import threading
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from lensbox_testlib import networld as nw  # noqa: E402

LISTEN_SECONDS = 8

# Sandbox A: its own address (found with a UDP socket connected to the resolver's address: no packet is sent),
# listeners on 0.0.0.0, a self-connection, /sandbox/ready for the test, then every peer for LISTEN_SECONDS.
LISTENER = r"""
import json, select, socket, time
probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); probe.connect(("169.254.53.53", 53))
me = probe.getsockname()[0]
tcp = socket.socket(); tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
tcp.bind(("0.0.0.0", 8000)); tcp.listen(64)
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); udp.bind(("0.0.0.0", 8001))
peers, own = [], []
def self_check():
    c = socket.create_connection((me, 8000), timeout=2)
    a, peer = tcp.accept(); a.close(); c.close(); own.append(peer[0])
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.sendto(b"self", (me, 8001))
    data, peer = udp.recvfrom(100); own.append(peer[0])
self_check()
open("/sandbox/ready", "w").write(me)
end = time.monotonic() + %d
while time.monotonic() < end:
    r, _, _ = select.select([tcp, udp], [], [], 0.1)
    if tcp in r:
        a, peer = tcp.accept(); peers.append(["tcp", peer[0]]); a.close()
    if udp in r:
        data, peer = udp.recvfrom(100); peers.append(["udp", peer[0], data.decode(errors="replace")])
self_check()
print(json.dumps({"me": me, "own": own, "peers": peers}))
""" % LISTEN_SECONDS

# What another sandbox tries against A's address.
REACH = r"""
import errno, json, socket, sys, time
addr, res = sys.argv[1], {}
s = socket.socket(); s.settimeout(3); t = time.monotonic()
try:
    s.connect((addr, 8000)); res["tcp"] = "ok"
except OSError as e:
    res["tcp"] = errno.errorcode.get(e.errno, str(e))
res["fast"] = time.monotonic() - t < 1
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    u.sendto(b"from-another-sandbox", (addr, 8001)); res["udp"] = "sent"
except OSError as e:
    res["udp"] = errno.errorcode.get(e.errno, str(e))
print(json.dumps(res))
"""


@pytest.fixture(scope="module")
def env():
    yield from nw.world_daemon()


def reach_from_sandbox(d, name, tier, addr):
    src = REACH.replace("sys.argv[1]", repr(addr))
    run = d.ok_run(name, src, sandbox={"network": tier})
    assert run["exit_code"] == 0, run
    return json.loads(run["stdout"].splitlines()[-1]), run["network_blocked"]


def reach_from_lan(w, addr):
    code = REACH.replace("sys.argv[1]", repr(addr))
    r = nw.sh(nw.PY, "-c", code, ns=w.lan, timeout=30)
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("tier", ["web", "packages"])
def test_listener_in_a_sandbox_is_reached_by_nothing_outside(env, tier):
    w, d = env
    w.assert_sealed()
    a = d.name(f"srv-{tier}")
    box = {}

    def serve():
        box["run"] = d.run(a, LISTENER, timeout=60, sandbox={"network": tier})

    t = threading.Thread(target=serve)
    t.start()
    try:
        deadline = time.monotonic() + 30
        addr = None
        while time.monotonic() < deadline and t.is_alive():
            status, _, body = d.raw("GET", f"/v1/sandboxes/{a}/files/ready")
            if status == 200:
                addr = body.decode()
                break
            time.sleep(0.1)
        assert addr, f"the listener never said it was ready: {box.get('run')}"
        started = time.monotonic()

        # Other sandboxes, one of each tier: refused on the host (counted in their network_blocked), or no route.
        for btier in ("web", "packages", "off"):
            res, blocked = reach_from_sandbox(d, d.name(f"peer-{tier}-{btier}"), btier, addr)
            if btier == "off":
                assert res == {"tcp": "ENETUNREACH", "fast": True, "udp": "ENETUNREACH"}, (btier, res)
            else:
                assert res["tcp"] == "ECONNREFUSED" and res["fast"], (btier, res)
                assert blocked >= 2, f"{btier}: the refusals were not counted ({blocked})"

        # The host, as root and as any other user: base.nft's from_host.
        out = json.loads(nw.sh(nw.PY, "-c", nw.HOST_TO_SANDBOX, addr, "8000", "8001", ns=w.host).stdout)
        want = {"tcp": "EHOSTUNREACH", "fast": True, "udp": "EPERM"}
        assert out == {"0": want, "65534": want}, out

        # The LAN side: forwarded into a sandbox only as an answer (through_host).
        lan = reach_from_lan(w, addr)
        assert lan["tcp"] != "ok", lan
        assert time.monotonic() - started < LISTEN_SECONDS - 1, "the probes outlasted the listener: proves nothing"
    finally:
        t.join(timeout=90)
    run = box["run"]
    assert run[0] == 200 and run[1]["exit_code"] == 0, run
    log = json.loads(run[1]["stdout"].splitlines()[-1])
    assert log["own"] == [log["me"]] * 4, log  # its own listener answered it before and after the probes
    assert log["peers"] == [], f"something outside the sandbox reached its listener: {log['peers']}"

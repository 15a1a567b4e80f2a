"""The resolver and relay in their own unprivileged processes (lb_net_config.services_uid), in the sealed network world.

The parsers of a sandbox's DNS, TLS and HTTP bytes then run as uid 65534 with no capabilities, no_new_privs and
non-dumpable, in a worker whose supervisor (same uid, one thread, parses nothing) holds the two ports. The tiers
behave exactly as with in-process services and the refusal counts still reach network_blocked; a worker that dies is
replaced and nothing a sandbox sent meanwhile is lost; so is a supervisor, by the keeper above it; if the keeper dies,
DNS and the relay stop answering (fail closed) and health says so.
"""
import json
import os
import signal
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from lensbox_testlib import networld as nw  # noqa: E402
from lensbox_testlib.runner import kernel_landlock_abi  # noqa: E402

UID = 65534


@pytest.fixture(scope="module")
def world():
    with nw.World() as w:
        w.start_lensbox(extra_args=("--services-uid", str(UID), "--package", nw.REGISTRY6))
        w.pkg = w.add_sandbox("isopkg", "packages")
        w.web = w.add_sandbox("isoweb", "web")
        yield w


def health(world):
    words = world.ctl.cmd("health").split()
    return dict(w.split("=", 1) for w in words[1:] if "=" in w)


def proc_status(pid):
    return dict(l.split(":\t", 1) for l in open(f"/proc/{pid}/status").read().splitlines() if ":\t" in l)


def test_services_run_unprivileged(world):
    h = health(world)
    assert h["services_isolated"] == "1" and h["services_alive"] == "1" and h["services_supervised"] == "1", h
    keeper, supervisor, worker = int(h["services_keeper_pid"]), int(h["services_pid"]), int(h["services_worker_pid"])
    assert len({0, keeper, supervisor, worker}) == 4 and h["services_restarts"] == "0", h
    for pid in (keeper, supervisor, worker):
        status = proc_status(pid)
        assert status["Uid"].split() == [str(UID)] * 4, status["Uid"]
        assert status["Gid"].split() == [str(UID)] * 4, status["Gid"]
        assert status["Groups"].strip() == ""
        assert int(status["CapEff"], 16) == 0 and int(status["CapPrm"], 16) == 0 and int(status["CapBnd"], 16) != 0
        assert status["NoNewPrivs"].strip() == "1"
        # the fds it holds: stdio on /dev/null and its own sockets, nothing of lensbox-net's
        fds = {os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
        assert all(f == "/dev/null" or f.startswith(("socket:", "anon_inode:", "pipe:")) for f in fds), fds
    assert int(proc_status(worker)["PPid"]) == supervisor and int(proc_status(supervisor)["PPid"]) == keeper
    # the worker, which parses, is confined further: seccomp, and Landlock at the kernel's best ABI lensbox knows
    assert proc_status(worker)["Seccomp"].strip() == "2" and proc_status(supervisor)["Seccomp"].strip() == "0"
    assert proc_status(keeper)["Seccomp"].strip() == "0"
    assert int(h["services_landlock_abi"]) == min(7, kernel_landlock_abi()), h


def test_tiers_work_and_refusals_are_counted(world):
    r = world.probe(world.pkg, op="http", host="pypi.org", port=443, tls=True, sni="pypi.org", ca=world.ca)
    assert r["ok"] and '"sni": "pypi.org"' in r["body"], r
    before = world.blocked(world.pkg)
    r = world.probe(world.pkg, op="http", host=nw.REGISTRY_IP, port=443, tls=True, sni=nw.NEIGHBOUR, ca=world.ca)
    assert r["ok"] is False and r["error"] == "ECONNRESET" and r["elapsed"] < 1.0, r
    r = world.probe(world.pkg, op="resolve", name=nw.SITE)
    assert r["ok"] is False and r["error"] == "EAI_NONAME", r
    assert world.blocked(world.pkg) == before + 2  # both refusals by the services process, seen by the parent
    r = world.probe(world.web, op="resolve", name=nw.SITE)
    assert r["ok"] and r["addrs"] == [nw.SITE_IP], r
    r = world.probe(world.web, op="resolve", name=nw.REBIND)
    assert r["ok"] is False and r["error"] == "EAI_NONAME", r


def test_relay_reaches_an_ipv6_only_registry(world):
    # the confined worker connects over IPv6 too (its seccomp filter, Landlock ports and services.nft allow it)
    r = world.probe(world.pkg, op="http", host=nw.REGISTRY6, family=6, port=443, tls=True, sni=nw.REGISTRY6,
                    ca=world.ca)
    assert r["ok"] and r["status"] == 200 and f'"host": "{nw.REGISTRY6}"' in r["body"], r


def test_a_crashed_worker_is_replaced(world):
    """A worker that dies (a parser crash, say) is replaced by its supervisor within moments, and what a sandbox sent
    meanwhile waits in the sockets' queues: the supervisor holds both ports, so none goes unanswered or elsewhere."""
    h = health(world)
    supervisor, worker, restarts = int(h["services_pid"]), int(h["services_worker_pid"]), int(h["services_restarts"])
    os.kill(worker, signal.SIGKILL)
    r = world.probe(world.web, op="resolve", name=nw.SITE)  # sent at once: answered by the next worker
    assert r["ok"] and r["addrs"] == [nw.SITE_IP], r
    r = world.probe(world.pkg, op="http", host="pypi.org", port=443, tls=True, sni="pypi.org", ca=world.ca)
    assert r["ok"] and '"sni": "pypi.org"' in r["body"], r
    h = health(world)
    assert h["services_alive"] == "1" and int(h["services_pid"]) == supervisor, h
    assert int(h["services_worker_pid"]) not in (0, worker) and int(h["services_restarts"]) == restarts + 1, h


EGRESS_PROBE = r"""
import errno, json, os, socket, sys
uid = int(sys.argv[1])
if uid:
    os.setgroups([]); os.setresgid(uid, uid, uid); os.setresuid(uid, uid, uid)
out = {}
def tcp(name, addr, family=socket.AF_INET):
    s = socket.socket(family, socket.SOCK_STREAM); s.settimeout(2)
    try:
        s.connect(addr); out[name] = "ok"
    except OSError as e:
        out[name] = errno.errorcode.get(e.errno, str(e))
    s.close()
tcp("site_443", ("11.2.0.20", 443))
tcp("site_80", ("11.2.0.20", 80))
tcp("site_8080", ("11.2.0.20", 8080))
tcp("host_loopback", ("127.0.0.1", 8000))
tcp("host_lan_address", ("10.1.0.1", 80))
tcp("lan_host", ("10.1.0.10", 80))
tcp("metadata", ("169.254.169.254", 80))
tcp("ipv6_loopback", ("::1", 8000), socket.AF_INET6)
tcp("host_uplink", ("11.1.0.1", 80))
tcp("site6_443", ("2a0b:11:2::60", 443), socket.AF_INET6)
tcp("site6_8080", ("2a0b:11:2::60", 8080), socket.AF_INET6)
tcp("lan6_host", ("fd00:1::10", 80), socket.AF_INET6)
tcp("host_uplink6", ("2a0b:11:1::1", 80), socket.AF_INET6)
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.settimeout(2)
q = b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x04site\x07example\x00\x00\x01\x00\x01"
try:
    u.sendto(q, ("11.2.0.53", 53)); out["upstream_dns"] = "ok" if u.recv(512)[:2] == b"\x12\x34" else "bad"
except OSError as e:
    out["upstream_dns"] = errno.errorcode.get(e.errno, str(e))
try:
    u.sendto(b"x", ("11.2.0.20", 9999)); out["udp_elsewhere"] = "ok"
except OSError as e:
    out["udp_elsewhere"] = errno.errorcode.get(e.errno, str(e))
print(json.dumps(out))
"""


FROM_SERVICE_PORTS = r"""
import errno, json, socket, time
out = {}
def bound(kind, port):  # a dead process's sockets may close a moment after it
    for _ in range(150):
        s = socket.socket(socket.AF_INET, kind)
        if kind == socket.SOCK_STREAM:  # the relay's connections of the earlier tests wait in TIME_WAIT
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", port)); return s
        except OSError:
            s.close(); time.sleep(0.02)
    raise SystemExit(f"port {port} stayed taken")
def udp(name, sport):
    u = bound(socket.SOCK_DGRAM, sport)
    try:
        u.sendto(b"x", ("11.2.0.20", 9999)); out[name] = "ok"
    except OSError as e:
        out[name] = errno.errorcode.get(e.errno, str(e))
udp("udp_from_resolver_port", 10053)
udp("udp_from_other_port", 10054)
t = bound(socket.SOCK_STREAM, 10080); t.settimeout(2)
try:
    t.connect(("11.2.0.20", 443)); out["tcp_from_relay_port"] = "ok"
except OSError as e:
    out["tcp_from_relay_port"] = errno.errorcode.get(e.errno, str(e))
print(json.dumps(out))
"""


def egress_from(world, uid):
    return json.loads(nw.sh(nw.PY, "-c", EGRESS_PROBE, str(uid), ns=world.host).stdout)


def test_a_taken_over_service_reaches_only_the_upstream_and_public_web_ports(world):
    """services.nft: should a parser bug hand the resolver or relay to a sandbox's code, their uid still reaches only
    the DNS upstream and ports 80/443 of public addresses, never the host's own services, the LAN, the metadata
    address (over IPv4 or IPv6), or other ports. Root in the same namespace reaches them all: the refusals are the
    chain's."""
    as_services = egress_from(world, UID)
    # refused at once, never by a timeout: connect() gets the rule's ICMP (EHOSTUNREACH; EACCES for IPv6), a
    # datagram's sendto() EPERM
    assert as_services == {"site_443": "ok", "site_80": "ok", "site_8080": "EHOSTUNREACH",
                           "host_loopback": "EHOSTUNREACH", "host_lan_address": "EHOSTUNREACH",
                           "lan_host": "EHOSTUNREACH", "metadata": "EHOSTUNREACH", "ipv6_loopback": "EACCES",
                           "host_uplink": "EHOSTUNREACH", "site6_443": "ok", "site6_8080": "EACCES",
                           "lan6_host": "EACCES", "host_uplink6": "EACCES",
                           "upstream_dns": "ok", "udp_elsewhere": "EPERM"}, as_services
    as_root = egress_from(world, 0)
    assert all(as_root[k] == "ok" for k in ("site_8080", "host_loopback", "host_lan_address", "lan_host",
                                              "metadata", "udp_elsewhere", "host_uplink", "site6_8080", "lan6_host",
                                              "host_uplink6")), as_root


def gone(pid):
    """Exited: no such process, or a zombie left for whoever reaps orphans (parent-death SIGKILL reparents it)."""
    try:
        return proc_status(pid)["State"].startswith("Z")
    except FileNotFoundError:
        return True


def test_a_killed_supervisor_is_replaced(world):
    """The supervisor's worker follows it (parent-death SIGKILL); the keeper, which holds both ports, starts a new
    supervisor and so a new worker, and what a sandbox sent meanwhile is answered by it."""
    h = health(world)
    keeper, supervisor, worker = int(h["services_keeper_pid"]), int(h["services_pid"]), int(h["services_worker_pid"])
    restarts = int(h["services_supervisor_restarts"])
    os.kill(supervisor, signal.SIGKILL)
    r = world.probe(world.web, op="resolve", name=nw.SITE)  # sent at once: answered by the next worker
    assert r["ok"] and r["addrs"] == [nw.SITE_IP], r
    r = world.probe(world.pkg, op="http", host="pypi.org", port=443, tls=True, sni="pypi.org", ca=world.ca)
    assert r["ok"] and '"sni": "pypi.org"' in r["body"], r
    h = health(world)
    assert h["services_alive"] == "1" and h["services_supervised"] == "1" and h["services_crash_loop"] == "0", h
    assert int(h["services_keeper_pid"]) == keeper and int(h["services_pid"]) not in (0, supervisor), h
    assert int(h["services_worker_pid"]) not in (0, worker), h
    assert int(h["services_supervisor_restarts"]) == restarts + 1, h
    assert int(proc_status(int(h["services_worker_pid"]))["PPid"]) == int(h["services_pid"])
    assert gone(worker), "the old worker outlived its supervisor"


def test_a_dead_keeper_fails_closed(world):
    pid = int(health(world)["services_keeper_pid"])  # its supervisor and worker follow it (parent-death SIGKILL)
    os.kill(pid, signal.SIGKILL)
    time.sleep(0.2)
    h = health(world)
    assert h["services_alive"] == "0" and h["services_supervised"] == "0", h
    # nothing listens on the resolver and relay ports any more: the host's kernel refuses at once
    r = world.probe(world.web, op="dns", server=nw.RESOLVER_ADDR, name=nw.SITE, timeout=1)
    assert r["ok"] is False and r["error"] == "ECONNREFUSED", r
    r = world.probe(world.pkg, op="http", host=nw.REGISTRY_IP, port=443, tls=True, sni="pypi.org", ca=world.ca)
    assert r["ok"] is False and r["error"] == "ECONNREFUSED", r
    # The services' two ports send only answers to what sandboxes opened, whoever holds them (their sockets are
    # bound by lensbox, as root): with the ports free now, root's own new traffic from them is refused too.
    out = nw.sh(nw.PY, "-c", FROM_SERVICE_PORTS, ns=world.host).stdout
    assert json.loads(out) == {"udp_from_resolver_port": "EPERM", "tcp_from_relay_port": "EHOSTUNREACH",
                               "udp_from_other_port": "ok"}, out

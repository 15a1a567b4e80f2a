"""The resolver and relay in their own unprivileged processes (lb_net_config.services_uid), in the sealed network world.

The parsers of a sandbox's DNS, TLS and HTTP bytes then run as uid 65534 with no capabilities, no_new_privs and
non-dumpable, in a worker whose supervisor (same uid, one thread, parses nothing) holds the two ports. The tiers
behave exactly as with in-process services and the refusal counts still reach network_blocked; a worker that dies is
replaced and nothing a sandbox sent meanwhile is lost; if the supervisor dies, DNS and the relay stop answering (fail
closed) and health says so.
"""
import os
import signal
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from lensbox_testlib import networld as nw  # noqa: E402

UID = 65534


@pytest.fixture(scope="module")
def world():
    with nw.World() as w:
        w.start_lensbox(extra_args=("--services-uid", str(UID)))
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
    supervisor, worker = int(h["services_pid"]), int(h["services_worker_pid"])
    assert worker not in (0, supervisor) and h["services_restarts"] == "0", h
    for pid in (supervisor, worker):
        status = proc_status(pid)
        assert status["Uid"].split() == [str(UID)] * 4, status["Uid"]
        assert status["Gid"].split() == [str(UID)] * 4, status["Gid"]
        assert status["Groups"].strip() == ""
        assert int(status["CapEff"], 16) == 0 and int(status["CapPrm"], 16) == 0 and int(status["CapBnd"], 16) != 0
        assert status["NoNewPrivs"].strip() == "1"
        # the fds it holds: stdio on /dev/null and its own sockets, nothing of lensbox-net's
        fds = {os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
        assert all(f == "/dev/null" or f.startswith(("socket:", "anon_inode:", "pipe:")) for f in fds), fds
    assert int(proc_status(worker)["PPid"]) == supervisor


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


def test_a_dead_supervisor_fails_closed(world):
    pid = int(health(world)["services_pid"])  # the supervisor: its worker follows it (parent-death SIGKILL)
    os.kill(pid, signal.SIGKILL)
    time.sleep(0.2)
    h = health(world)
    assert h["services_alive"] == "0" and h["services_supervised"] == "0", h
    # nothing listens on the resolver and relay ports any more: the host's kernel refuses at once
    r = world.probe(world.web, op="dns", server=nw.RESOLVER_ADDR, name=nw.SITE, timeout=1)
    assert r["ok"] is False and r["error"] == "ECONNREFUSED", r
    r = world.probe(world.pkg, op="http", host=nw.REGISTRY_IP, port=443, tls=True, sni="pypi.org", ca=world.ca)
    assert r["ok"] is False and r["error"] == "ECONNREFUSED", r

"""The services' crash recovery (netfilter/src/isolate.c), measured under traffic in the sealed network world.

A `web` sandbox asks the resolver and a `packages` sandbox fetches through the relay, each every 20 ms, while the
worker and the supervisor are killed (SIGKILL) N times each, taking turns: after each kill both must answer again
within 1 s (the first attempt sent after the kill that succeeds, counted to its answer). Then a crash loop: each new
worker is killed as soon as it appears; the replacements slow down to 5 s apart and health reports the loop, until a
worker serves 10 s. The figures (recovery p50 and worst, per kind) are printed.
"""
import os
import signal
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from lensbox_testlib import networld as nw  # noqa: E402
from lensbox_testlib import svcload  # noqa: E402

UID = 65534
KILLS = int(os.environ.get("LENSBOX_SERVICES_KILLS", "8"))  # of each kind


@pytest.fixture(scope="module")
def world():
    with nw.World() as w:
        w.start_lensbox(extra_args=("--services-uid", str(UID)))
        w.pkg = w.add_sandbox("crashpkg", "packages")
        w.web = w.add_sandbox("crashweb", "web")
        yield w


def health(world):
    words = world.ctl.cmd("health").split()
    return dict(w.split("=", 1) for w in words[1:] if "=" in w)


def wait_recovered(traffic, since, seconds=5.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if all(svcload.recovery(t.results(), since) is not None for t in traffic):
            return
        time.sleep(0.02)


def test_killed_workers_and_supervisors_answer_again_within_a_second(world):
    h0 = health(world)
    dns = svcload.Traffic(world.web, "dns", name=nw.SITE, timeout=0.25, interval=0.02)
    relay = svcload.Traffic(world.pkg, "relay", addr=nw.REGISTRY_IP, host="pypi.org", timeout=0.5, interval=0.02)
    times = {"worker": {"dns": [], "relay": []}, "supervisor": {"dns": [], "relay": []}}
    try:
        time.sleep(0.5)
        assert all(ok for _, _, ok in dns.results()) and dns.results(), dns.results()[:5]
        assert all(ok for _, _, ok in relay.results()) and relay.results(), relay.results()[:5]
        for i in range(2 * KILLS):
            kind = "worker" if i % 2 == 0 else "supervisor"
            h = health(world)
            pid = int(h["services_worker_pid"] if kind == "worker" else h["services_pid"])
            assert pid > 0, h
            killed = time.monotonic()
            os.kill(pid, signal.SIGKILL)
            wait_recovered((dns, relay), killed)
            for name, t in (("dns", dns), ("relay", relay)):
                r = svcload.recovery(t.results(), killed)
                assert r is not None, f"{name} did not answer within 5 s of killing the {kind} (kill {i})"
                times[kind][name].append(r)
            time.sleep(1.2)  # a process that served 1 s is replaced after the first delay again (100 ms)
    finally:
        dns.stop()
        relay.stop()
    for kind, per in times.items():
        for name, v in per.items():
            print(f"{kind:10} killed x{len(v)}: {name:5} answers again after p50 {svcload.percentile(v, 50) * 1000:.0f}"
                  f" ms, worst {max(v) * 1000:.0f} ms")
    for kind, per in times.items():
        for name, v in per.items():
            assert max(v) < 1.0, (kind, name, v)
    h = health(world)
    assert h["services_alive"] == "1" and h["services_supervised"] == "1" and h["services_crash_loop"] == "0", h
    assert int(h["services_restarts"]) == int(h0["services_restarts"]) + KILLS, h
    assert int(h["services_supervisor_restarts"]) == int(h0["services_supervisor_restarts"]) + KILLS, h


def test_a_crash_loop_is_slowed_and_reported(world):
    """Each worker killed as soon as it appears: after six quick deaths the next comes 5 s later and health says
    crash_loop; once a worker has served 10 s the loop is over."""
    starts, seen = [], {int(health(world)["services_worker_pid"])}
    os.kill(next(iter(seen)), signal.SIGKILL)
    deadline = time.monotonic() + 30
    looping = False
    while time.monotonic() < deadline and len(starts) < 7:
        h = health(world)
        w = int(h["services_worker_pid"])
        if w and w not in seen:
            starts.append(time.monotonic())
            seen.add(w)
            if len(starts) < 7:
                os.kill(w, signal.SIGKILL)
        looping = looping or h["services_crash_loop"] == "1"
        time.sleep(0.01)
    assert len(starts) == 7, starts
    gaps = [b - a for a, b in zip(starts, starts[1:])]
    print("gaps between replacements in a crash loop (s):", " ".join(f"{g:.2f}" for g in gaps))
    assert gaps[-1] >= 4.5 and gaps[0] < 1.0, gaps  # 0.2 s doubling to 5 s
    h = health(world)
    assert looping and h["services_crash_loop"] == "1" and h["services_alive"] == "1", h
    r = world.probe(world.web, op="resolve", name=nw.SITE)  # the 7th worker serves
    assert r["ok"] and r["addrs"] == [nw.SITE_IP], r
    deadline = time.monotonic() + 15
    while health(world)["services_crash_loop"] == "1" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert health(world)["services_crash_loop"] == "0"
    assert time.monotonic() - starts[-1] >= 9.5

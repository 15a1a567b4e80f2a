"""Fair shares of the resolver and the relay (lb_net_config.dns_per_sandbox, relay_per_sandbox), in the sealed world.

Two quiet sandboxes ask the resolver (`web`) and fetch through the relay (`packages`) every 20 ms; two others flood
them: one sends DNS queries for names the world's DNS server answers 1 s late (each a new name, so none is answered
from lensbox's cache and each holds a query in flight) as fast as its socket takes them, the other holds 300 idle connections to the relay, opening a new one for each the relay
resets. The quiet sandboxes' latency is measured in quiet and flooded phases taking turns in the same run (three of
each, pooled), and the flooded p95 must stay within 1.5 x the quiet p95 (plus 2 ms, the timer resolution of a loaded
2-core machine), the flooded p99 within 3 x the quiet p99 plus 10 ms, with no failed attempt; the flooders' excess
is refused and counted in their `blocked`. (The p99 of ~450 attempts is their five slowest: on this shared 2-core
machine the scheduler alone moved it 2-6 x between phases: a build from before 2026-12-07 failed the old 1.5 x p99
bound in 2 of 4 runs that day, while the p95 moved by less than 1 ms.) The same
floods against a lensbox-net whose shares are the whole bounds (one sandbox may take them all) starve the quiet
sandboxes: that is what the shares prevent, and proves the measurement can see it.
"""
import os
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from lensbox_testlib import networld as nw  # noqa: E402
from lensbox_testlib import svcload  # noqa: E402

UID = 65534
PHASE = float(os.environ.get("LENSBOX_FAIR_PHASE_S", "3"))
ROUNDS = 3
DNS_FLOOD_RATE = 5000  # queries a second: 25 x the rate one sandbox may send the resolver, 300 x what it may hold


def build(extra):
    w = nw.World().__enter__()
    try:
        w.start_lensbox(extra_args=("--services-uid", str(UID), *extra))
        w.quiet_web = w.add_sandbox("qweb", "web")
        w.quiet_pkg = w.add_sandbox("qpkg", "packages")
        w.loud_web = w.add_sandbox("lweb", "web")
        w.loud_pkg = w.add_sandbox("lpkg", "packages")
    except BaseException:
        w.__exit__(None, None, None)
        raise
    return w


def phase(world, flooded):
    """One phase: the quiet sandboxes' attempts [(start, end, ok)] for dns and relay; the floods' attempt counts."""
    floods = []
    if flooded:
        floods = [svcload.Traffic(world.loud_web, "dns_flood", idle=True, name=nw.SLOW, rate=DNS_FLOOD_RATE,
                                  fresh=True),
                  svcload.Traffic(world.loud_pkg, "relay_hold", idle=True, addr=nw.REGISTRY_IP, conns=300)]
        time.sleep(1.0)  # the flood at full strength before measuring
    dns = svcload.Traffic(world.quiet_web, "dns", name=nw.SITE, timeout=1.0, interval=0.02)
    relay = svcload.Traffic(world.quiet_pkg, "relay", addr=nw.REGISTRY_IP, host="pypi.org", timeout=2.0,
                            interval=0.02)
    time.sleep(PHASE)
    dns.stop()
    relay.stop()
    for f in floods:
        f.stop()
    return dns.results(), relay.results(), [f.made() for f in floods]


def measure(world):
    out = {False: {"dns": [], "relay": []}, True: {"dns": [], "relay": []}}
    made = [0, 0]
    for _ in range(ROUNDS):
        for flooded in (False, True):
            d, r, m = phase(world, flooded)
            out[flooded]["dns"] += d
            out[flooded]["relay"] += r
            for i, n in enumerate(m):
                made[i] += n
            time.sleep(1.2 if flooded else 0)  # held connections and slow queries drain
    return out, made


def latencies(attempts):
    return [(end - start) * 1000 for start, end, ok in attempts if ok]


def test_a_flooding_sandbox_does_not_starve_the_quiet_ones():
    world = build(())
    try:
        before = {sb: world.blocked(getattr(world, sb)) for sb in ("loud_web", "loud_pkg", "quiet_web", "quiet_pkg")}
        out, made = measure(world)
        after = {sb: world.blocked(getattr(world, sb)) for sb in before}
    finally:
        world.__exit__(None, None, None)
    figures = {}
    for kind in ("dns", "relay"):
        quiet, loud = latencies(out[False][kind]), latencies(out[True][kind])
        fails = [a for a in out[True][kind] + out[False][kind] if not a[2]]
        q95, l95 = svcload.percentile(quiet, 95), svcload.percentile(loud, 95)
        q99, l99 = svcload.percentile(quiet, 99), svcload.percentile(loud, 99)
        print(f"{kind:5}: quiet p50 {svcload.percentile(quiet, 50):.2f} p95 {q95:.2f} p99 {q99:.2f} ms ({len(quiet)}); "
              f"flooded p50 {svcload.percentile(loud, 50):.2f} p95 {l95:.2f} p99 {l99:.2f} ms ({len(loud)}): "
              f"p95 x{l95 / q95:.2f}, p99 x{l99 / q99:.2f}; {len(fails)} failed")
        figures[kind] = (quiet, loud, fails, q95, l95, q99, l99)
    print(f"flood: {made[0]} DNS queries, {made[1]} relay connections; refused and counted: "
          f"{after['loud_web'] - before['loud_web']} and {after['loud_pkg'] - before['loud_pkg']}")
    for kind, (quiet, loud, fails, q95, l95, q99, l99) in figures.items():
        assert not fails, (kind, fails[:5])
        assert len(loud) >= ROUNDS * PHASE * 10, (kind, len(loud))
        assert l95 <= 1.5 * q95 + 2.0, (kind, q95, l95)
        assert l99 <= 3.0 * q99 + 10.0, (kind, q99, l99)
    # the floods' excess is refused and counted; the quiet sandboxes are never refused
    assert after["loud_web"] - before["loud_web"] >= made[0] // 2, (made, before, after)
    assert after["loud_pkg"] - before["loud_pkg"] >= (300 - 64) * ROUNDS, (made, before, after)
    assert after["quiet_web"] == before["quiet_web"] and after["quiet_pkg"] == before["quiet_pkg"], (before, after)


def test_without_shares_one_sandbox_takes_the_whole_bound():
    """The control: shares as large as the bounds (64 queries, 256 connections) let one flooding sandbox take all of
    them, and the quiet sandboxes' attempts fail."""
    world = build(("--dns-per-sandbox", "64", "--relay-per-sandbox", "256"))
    try:
        d, r, _ = phase(world, True)
    finally:
        world.__exit__(None, None, None)
    failed = {"dns": sum(1 for a in d if not a[2]), "relay": sum(1 for a in r if not a[2])}
    print(f"without shares, flooded: dns {failed['dns']} of {len(d)} failed, relay {failed['relay']} of {len(r)}")
    # the quiet DNS gets through whenever the flood leaves a unit free: any failure shows starvation (with the
    # shares none fails); the held connections take the relay for good
    assert failed["dns"] > 0 and failed["relay"] > len(r) // 2, failed

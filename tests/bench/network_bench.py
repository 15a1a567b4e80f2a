#!/usr/bin/env python3
"""Network tiers benchmark, in the sealed test world (tests/lensbox_testlib/networld.py): no packet leaves it.

Prints, from one run:
  - the time lb_net_attach() takes for a `web` sandbox against an `off` one (median of --rounds), and the difference:
    what the network adds to creating a sandbox (target: <= 1 ms), with lensboxd's default warm slots (--warm-slots,
    the slot's rules loaded ahead) and without them (each attach loads its rules: `web_cold`);
  - the throughput of a bulk download (curl, --size MiB) through the `web` tier (forward + masquerade, or the
    flowtable's fast path where the kernel has flowtables: the first line says which) and through the `packages`
    relay (HTTP and HTTPS), each against the same download made directly from the world's host namespace
    (target: >= 90 %). `--no-offload` runs lensbox without its flowtable, to compare;
  - whole HTTPS requests through the relay for smaller bodies (--bodies, default 100 KB and 10 MB: target >= 0.95 x
    direct): each request's time from curl's start to its last byte, name lookup, connection and TLS included.
The last line is the figures as JSON. Needs root and a built lensbox-net (LENSBOX_BUILD_DIR, default build/).

How the throughput is compared, and why:
  - Throughput is the body's bytes over the time from its first byte to its last (curl's time_total minus
    time_starttransfer). curl's own speed_download also counts name resolution and connecting, which differ by path
    (a sandbox resolves through lensbox's resolver, the relay resolves and connects upstream itself): that is a
    latency, reported on its own as `*_ttfb_ms` (time to the first byte, median) rather than folded into a rate.
  - Direct and through-the-tier downloads run in pairs, taking turns at going first; the figure is the median of
    the pairs' ratios. The machine is shared (2 cores, other builds): a pair sees the same load, a median ignores
    the one pair a build landed on. Each side's median rate is printed too.
  - 1 GiB per download by default, so a run lasts about a second at the local rates here: connection set-up and
    TCP's ramp are noise, not a share of the result.
  - Smaller bodies are what a package install mostly fetches; there set-up is most of the cost, so their figure is
    the whole request's: direct time over relayed time (a speed ratio, >1 when the relay is faster), median of
    --small-repeat pairs. Each side resolves the name as a program there would: the direct one through the world's
    DNS server (the host's resolv.conf), the relayed one through lensbox's resolver, which keeps answers for their
    TTL (the first request of a run pays the upstream round trip; the median is of the later ones, as a package
    install asking one host again and again sees).
  - Everything runs on the same two cores: the server, curl, and for the relay a second TCP connection's both ends.
    Nothing is pinned or rate-limited (the direct download is as fast as this machine makes it). So that the cost
    is visible and not only its effect on a rate, `*_cpu_ms_per_mib` is the CPU time (user + system, including the
    kernel's network work done on their behalf) that the world's processes, curl and ksoftirqd used per MiB moved.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
os.environ.setdefault("LENSBOX_SOURCE_DIR", os.path.dirname(os.path.dirname(HERE)))
os.environ.setdefault("LENSBOX_BUILD_DIR", os.path.join(os.environ["LENSBOX_SOURCE_DIR"], "build"))
from lensbox_testlib import networld as nw  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")


def attach_ms(world, tier, rounds, label=""):
    times = []
    for i in range(rounds):
        ns = f"{world.tag}-b{label}{tier[0]}{i}"
        nw.sh("ip", "netns", "add", ns)
        world.sandboxes.append(ns)
        t0 = time.perf_counter()
        world.ctl.ok(f"attach bench{tier[0]}{i} /run/netns/{ns} {tier}")
        times.append((time.perf_counter() - t0) * 1000)
        if tier != "off":
            world.ctl.ok(f"detach bench{tier[0]}{i}")
    return statistics.median(times)


def world_pids(world):
    """The processes whose CPU a download costs: the world's servers, lensbox-net (relay, resolver) and the kernel's
    softirq threads. `ip netns exec` and `nsenter` exec their command, so these pids are the programs themselves."""
    pids = [p.pid for p in world.procs] + [world.ctl.p.pid]
    for p in os.listdir("/proc"):
        try:
            if p.isdigit() and open(f"/proc/{p}/comm").read().startswith("ksoftirqd/"):
                pids.append(int(p))
        except OSError:
            pass
    return pids


def cpu_seconds(pids):
    """utime + stime of each whole process (its exited threads included)."""
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / CLK_TCK


def curl_run(ns, url, ca, size, pids, resolve=None, whole=False):
    """One download: (MiB/s from first to last byte, ms to the first byte, CPU seconds it cost); with whole, the
    request's ms from curl's start to its last byte and the ms its name lookup took in place of the rate."""
    cmd = ["ip", "netns", "exec", ns, "env", "-i", "PATH=/usr/bin:/bin", "curl", "-sS", "--noproxy", "*", "-o",
           "/dev/null", "-w", "%{size_download} %{time_starttransfer} %{time_total} %{time_namelookup}", "--cacert",
           ca, url]
    if resolve:
        cmd[-1:-1] = ["--resolve", resolve]
    before = cpu_seconds(pids)
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    timer = threading.Timer(300, p.kill)
    timer.start()
    out, errout = p.stdout.read(), p.stderr.read()  # both are a line at most
    # reaped here for its rusage (microseconds; `ip netns exec` and env exec curl, so it is curl's own)
    _, status, ru = os.wait4(p.pid, 0)
    timer.cancel()
    p.returncode = os.waitstatus_to_exitcode(status)
    spent = cpu_seconds(pids) - before + ru.ru_utime + ru.ru_stime
    if p.returncode != 0:
        raise SystemExit(f"curl {url} in {ns} failed ({p.returncode}): {errout.strip()}")
    n, t_first, t_total, t_lookup = out.split()
    n, t_first, t_total, t_lookup = int(n), float(t_first), float(t_total), float(t_lookup)
    if n != size:
        raise SystemExit(f"curl {url} in {ns} got {n} bytes, not {size}")
    if whole:
        return t_total * 1000, t_lookup * 1000, spent
    return n / (t_total - t_first) / (1 << 20), t_first * 1000, spent


def compare_whole(world, tier_ns, url, size, repeat, pids):
    """Pairs of whole (direct, relayed) requests, taking turns at going first: per side the median ms and median name
    lookup ms; the median of the pairs' direct/relayed ratios, and those ratios."""
    sides = {"direct": [], "tier": []}
    ratios = []
    for i in range(repeat):
        order = [("direct", world.host), ("tier", tier_ns)]
        if i % 2:
            order.reverse()
        pair = {}
        for side, ns in order:
            ms, lookup, _ = curl_run(ns, url, world.ca, size, pids, whole=True)
            pair[side] = ms
            sides[side].append((ms, lookup))
        ratios.append(pair["direct"] / pair["tier"])
    med = {s: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v)) for s, v in sides.items()}
    return med, statistics.median(ratios), ratios


def parse_size(text):
    """100K, 10M, 1G or a plain byte count (K = 1000, as "100 KB" means)."""
    units = {"K": 1000, "M": 1000 ** 2, "G": 1000 ** 3}
    text = text.strip().upper().rstrip("B")
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def compare(world, tier_ns, url, resolve, size, repeat, pids):
    """Pairs of (direct, through the tier) downloads, taking turns at going first."""
    sides = {"direct": [], "tier": []}
    ratios = []
    mib = size / (1 << 20)
    for i in range(repeat):
        order = [("direct", world.host, resolve), ("tier", tier_ns, None)]
        if i % 2:
            order.reverse()
        pair = {}
        for side, ns, res in order:
            rate, ttfb, spent = curl_run(ns, url, world.ca, size, pids, resolve=res)
            cpu_ms = spent * 1000 / mib
            pair[side] = rate
            sides[side].append((rate, ttfb, cpu_ms))
        ratios.append(pair["tier"] / pair["direct"])
    med = {s: [statistics.median(x[k] for x in v) for k in range(3)] for s, v in sides.items()}
    return med, statistics.median(ratios), ratios


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=20, help="attach/detach rounds per tier")
    ap.add_argument("--size", type=int, default=1024, help="MiB per download")
    ap.add_argument("--repeat", type=int, default=7, help="direct/tier pairs per path")
    ap.add_argument("--no-offload", action="store_true",
                    help="lensbox without its flowtable (lb_net_config.no_flow_offload), to compare")
    ap.add_argument("--bodies", default="100K,10M", help="body sizes of the whole HTTPS requests through the relay "
                    "(comma-separated; K and M are 1000 and 1000^2 bytes)")
    ap.add_argument("--small-repeat", type=int, default=21, help="direct/relayed pairs per body size")
    ap.add_argument("--warm-slots", type=int, default=4, help="lensbox-net --warm-slots (lensboxd's "
                    "network_warm_slots default: 4)")
    ap.add_argument("--only", default="", help="comma-separated paths to measure (web_http, relay_http, "
                    "relay_https, relay_https_bodies); default: all")
    a = ap.parse_args()
    size = a.size << 20
    w = nw.World()
    try:
        base = ["--no-offload"] if a.no_offload else []
        # without warm slots first (every attach loads and removes its slot's rules), then as lensboxd runs
        w.start_lensbox(base + ["--warm-slots", "0"])
        web_cold = attach_ms(w, "web", a.rounds, label="c")
        w.ctl.close()
        w.start_lensbox(base + ["--warm-slots", str(a.warm_slots)])
        health = dict(kv.split("=", 1) for kv in w.ctl.cmd("health").split() if "=" in kv)
        offload = health.get("offload") == "1"
        why = w.ctl.cmd("health").split('offload_why="', 1)[-1].rstrip('"')
        print(f"flowtable offload: {'on' if offload else 'off (' + why + ')'}")
        off = attach_ms(w, "off", a.rounds)
        web = attach_ms(w, "web", a.rounds)
        print(f"attach off {off:.2f} ms, web {web:.2f} ms: web adds {web - off:.2f} ms to a sandbox's creation "
              f"({a.warm_slots} warm slots; without: web {web_cold:.2f} ms, {web_cold - off:.2f} ms more than off)")
        wsb = w.add_sandbox("bweb", "web")
        psb = w.add_sandbox("bpkg", "packages")
        pids = world_pids(w)
        figures = {"attach_off_ms": round(off, 3), "attach_web_ms": round(web, 3),
                   "extra_create_ms": round(web - off, 3), "attach_web_cold_ms": round(web_cold, 3),
                   "warm_slots": a.warm_slots, "web_offload": offload}
        pairs = [
            ("web_http", wsb["ns"], f"http://{nw.SITE}/bulk/{size}", f"{nw.SITE}:80:{nw.SITE_IP}"),
            ("relay_http", psb["ns"], f"http://files.pythonhosted.org/bulk/{size}",
             f"files.pythonhosted.org:80:{nw.REGISTRY_IP}"),
            ("relay_https", psb["ns"], f"https://files.pythonhosted.org/bulk/{size}",
             f"files.pythonhosted.org:443:{nw.REGISTRY_IP}"),
        ]
        only = set(filter(None, a.only.split(",")))
        for key, ns, url, resolve in pairs:
            if only and key not in only:
                continue
            med, ratio, ratios = compare(w, ns, url, resolve, size, a.repeat, pids)
            (d_rate, d_ttfb, d_cpu), (t_rate, t_ttfb, t_cpu) = med["direct"], med["tier"]
            figures.update({f"{key}_direct_mibs": round(d_rate, 1), f"{key}_mibs": round(t_rate, 1),
                            f"{key}_ratio": round(ratio, 3), f"{key}_ratio_min": round(min(ratios), 3),
                            f"{key}_ratio_max": round(max(ratios), 3),
                            f"{key}_direct_ttfb_ms": round(d_ttfb, 2), f"{key}_ttfb_ms": round(t_ttfb, 2),
                            f"{key}_direct_cpu_ms_per_mib": round(d_cpu, 3), f"{key}_cpu_ms_per_mib": round(t_cpu, 3)})
            print(f"{key:12s} through the tier {t_rate:8.1f} MiB/s, direct {d_rate:8.1f} MiB/s: {ratio:.2f} x direct "
                  f"(pairs {min(ratios):.2f}-{max(ratios):.2f}); first byte {t_ttfb:.1f} vs {d_ttfb:.1f} ms; "
                  f"CPU {t_cpu:.2f} vs {d_cpu:.2f} ms/MiB")
        if not only or "relay_https_bodies" in only:
            for text in filter(None, a.bodies.split(",")):
                n = parse_size(text)
                key = f"relay_https_{text.strip().lower()}"
                med, ratio, ratios = compare_whole(w, psb["ns"], f"https://files.pythonhosted.org/bulk/{n}", n,
                                                   a.small_repeat, pids)
                (t_ms, t_lookup), (d_ms, d_lookup) = med["tier"], med["direct"]
                figures.update({f"{key}_ratio": round(ratio, 3), f"{key}_ratio_min": round(min(ratios), 3),
                                f"{key}_ratio_max": round(max(ratios), 3), f"{key}_ms": round(t_ms, 2),
                                f"{key}_direct_ms": round(d_ms, 2), f"{key}_lookup_ms": round(t_lookup, 2),
                                f"{key}_direct_lookup_ms": round(d_lookup, 2)})
                print(f"{key:18s} whole request through the relay {t_ms:7.1f} ms, direct {d_ms:7.1f} ms: {ratio:.2f} x "
                      f"direct's speed (pairs {min(ratios):.2f}-{max(ratios):.2f}); name lookup {t_lookup:.2f} vs "
                      f"{d_lookup:.2f} ms")
        print(json.dumps(figures))
    finally:
        w.close()


if __name__ == "__main__":
    main()

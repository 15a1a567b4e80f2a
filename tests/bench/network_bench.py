#!/usr/bin/env python3
"""Network tiers benchmark, in the sealed test world (tests/lensbox_testlib/networld.py): no packet leaves it.

Prints, from one run:
  - the time lb_net_attach() takes for a `web` sandbox against an `off` one (median of --rounds), and the difference:
    what the network adds to creating a sandbox (target: <= 15 ms);
  - the throughput of a bulk download (curl, --size MiB) through the `web` tier (forward + masquerade) and through
    the `packages` relay (HTTP and HTTPS, spliced), each against the same download made directly from the world's
    host namespace (target: >= 90 %).
The last line is the figures as JSON. Needs root and a built lensbox-net (LENSBOX_BUILD_DIR, default build/).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
os.environ.setdefault("LENSBOX_SOURCE_DIR", os.path.dirname(os.path.dirname(HERE)))
os.environ.setdefault("LENSBOX_BUILD_DIR", os.path.join(os.environ["LENSBOX_SOURCE_DIR"], "build"))
from lensbox_testlib import networld as nw  # noqa: E402


def attach_ms(world, tier, rounds):
    times = []
    for i in range(rounds):
        ns = f"{world.tag}-b{tier[0]}{i}"
        nw.sh("ip", "netns", "add", ns)
        world.sandboxes.append(ns)
        t0 = time.perf_counter()
        world.ctl.ok(f"attach bench{tier[0]}{i} /run/netns/{ns} {tier}")
        times.append((time.perf_counter() - t0) * 1000)
        if tier != "off":
            world.ctl.ok(f"detach bench{tier[0]}{i}")
    return statistics.median(times)


def curl_speed(ns, url, ca, resolve=None):
    """One download, in MiB/s."""
    cmd = ["env", "-i", "PATH=/usr/bin:/bin", "curl", "-sS", "--noproxy", "*", "-o", "/dev/null", "-w",
           "%{speed_download}", "--cacert", ca, url]
    if resolve:
        cmd[5:5] = ["--resolve", resolve]
    r = nw.sh(*cmd, ns=ns, check=False, timeout=300)
    if r.returncode != 0:
        raise SystemExit(f"curl {url} in {ns} failed: {r.stderr.strip()}")
    return float(r.stdout) / (1 << 20)


def compare(host_ns, tier_ns, url, ca, resolve, repeat):
    """Direct and through-the-tier downloads alternate, so both see the same load on a shared machine; best of each."""
    direct, tier = [], []
    for _ in range(repeat):
        direct.append(curl_speed(host_ns, url, ca, resolve=resolve))
        tier.append(curl_speed(tier_ns, url, ca))
    return max(direct), max(tier)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--size", type=int, default=512, help="MiB per download")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    size = a.size << 20
    w = nw.World()
    try:
        w.start_lensbox()
        off = attach_ms(w, "off", a.rounds)
        web = attach_ms(w, "web", a.rounds)
        print(f"attach off {off:.2f} ms, web {web:.2f} ms: web adds {web - off:.2f} ms to a sandbox's creation")
        wsb = w.add_sandbox("bweb", "web")
        psb = w.add_sandbox("bpkg", "packages")
        host = w.host
        site_http = f"http://{nw.SITE}/bulk/{size}"
        reg_http = f"http://files.pythonhosted.org/bulk/{size}"
        reg_https = f"https://files.pythonhosted.org/bulk/{size}"
        figures = {"attach_off_ms": round(off, 3), "attach_web_ms": round(web, 3),
                   "extra_create_ms": round(web - off, 3)}
        pairs = [
            ("web_http", wsb["ns"], site_http, f"{nw.SITE}:80:{nw.SITE_IP}"),
            ("relay_http", psb["ns"], reg_http, f"files.pythonhosted.org:80:{nw.REGISTRY_IP}"),
            ("relay_https", psb["ns"], reg_https, f"files.pythonhosted.org:443:{nw.REGISTRY_IP}"),
        ]
        for key, ns, url, resolve in pairs:
            direct, tier = compare(host, ns, url, w.ca, resolve, a.repeat)
            ratio = tier / direct
            figures[f"{key}_direct_mibs"] = round(direct, 1)
            figures[f"{key}_mibs"] = round(tier, 1)
            figures[f"{key}_ratio"] = round(ratio, 3)
            print(f"{key:12s} through the tier {tier:8.1f} MiB/s, direct {direct:8.1f} MiB/s: {ratio:.2f} x direct")
        print(json.dumps(figures))
    finally:
        w.close()


if __name__ == "__main__":
    main()

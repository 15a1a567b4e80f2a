#!/usr/bin/python3
"""Benchmark (not a test): how many sandboxes one host holds, through a real lensboxd (issue 18).

    LENSBOX_BUILD_DIR=build /usr/bin/python3 tests/bench/density.py [--sandboxes 1000] [--running 200] [--plot F.png]

What it does, in one run against one private lensboxd (networking off, no spares):
  1. creates --sandboxes sandboxes, each with one 4 KiB file uploaded (PUT /v1/sandboxes/{name}, then
     PUT .../files/data.bin), timing each creation (PUT + upload) and the sustained rate over the whole batch;
  2. stops every sandbox the uploads left running (POST .../stop, untimed; max_running = --running + 8 evicted the
     least recently used ones during step 1 already), lets the storages' flushers finish, then starts --running of
     them with one `pass` run each and leaves them running idle, sampling the host memory they cost every 20
     sandboxes against what the host used with none running;
  3. times GET /v1/sandboxes with every sandbox listed (median of 20), and a warm run in three of the idle sandboxes
     (median of 30 each; the worst of the three is the figure) against a warm run measured in the same daemon
     before any other sandbox existed (median of 60), each relative to bare `python3 -c pass` timed in the same
     rounds: the ratio is (among them / bare then) over (alone / bare at that time), so the machine's drift between
     the two moments cancels out. Both are measured once the host's writeback has finished (Dirty + Writeback
     below 1 MiB, at most 30 s): idle sandboxes, not the storages of the 1,000 creations being flushed.

Host memory per idle running sandbox = (sum of the sandboxes' cgroup memory usage: v1 memory.usage_in_bytes or v2
memory.current of lensbox/u<uid>) + (growth of the kernel's unreclaimable slab, SUnreclaim, and page tables,
PageTables, in /proc/meminfo) + (growth of lensboxd's RSS), divided by the number running. The cgroup usage already
counts each sandbox's tmpfs pages and the page cache its files pulled in; the slab growth catches what no cgroup is
charged for (namespaces, mounts, loop devices, inodes of the skeleton). Noisy on a shared machine: run it on a quiet
one, twice. Prints the figures and writes the plot (matplotlib from Debian) when --plot is given.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from lensbox_testlib.lensboxd import Daemon  # noqa: E402


def meminfo():
    out = {}
    with open("/proc/meminfo") as f:
        for line in f:
            key, value = line.split(":", 1)
            out[key] = int(value.split()[0]) * 1024
    return out


def rss(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def cgroup_usage(key):
    for path in (f"/sys/fs/cgroup/memory/lensbox/{key}/memory.usage_in_bytes",
                 f"/sys/fs/cgroup/lensbox/{key}/memory.current"):
        try:
            with open(path) as f:
                return int(f.read())
        except OSError:
            continue
    return 0


def timed(fn):
    t = time.perf_counter()
    r = fn()
    return time.perf_counter() - t, r


def settle(limit_s=30.0):
    """Waits (untimed, at most limit_s) until the host's writeback is done: the storages' dirty pages written and
    nothing being written back, so a warm run is measured on a host whose sandboxes are idle, not flushing."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        m = meminfo()
        if m["Dirty"] + m["Writeback"] < (1 << 20):
            break
        time.sleep(0.2)
    time.sleep(1.0)


def warm_against_bare(d, name, rounds=30):
    """Medians of a warm `pass` run in sandbox name and of bare python3 -c pass on the host, interleaved."""
    runs, bares = [], []
    for _ in range(rounds):
        runs.append(timed(lambda: d.ok_run(name, "pass"))[0])
        bares.append(timed(lambda: subprocess.run(["/usr/bin/python3", "-c", "pass"], check=True))[0])
    return statistics.median(runs), statistics.median(bares)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sandboxes", type=int, default=1000)
    ap.add_argument("--running", type=int, default=200)
    ap.add_argument("--plot", default=None)
    a = ap.parse_args()
    assert a.running <= a.sandboxes
    settings = {"max_running": str(a.running + 8), "idle_minutes": "60", "keep_hours": "24",
                "uid_range_count": str(max(10000, a.sandboxes + 100)), "spare_sandboxes": "0",
                "max_connections": "64", "log_level": "warn"}
    with Daemon(settings=settings) as d:
        names = [d.name(f"d{i}") for i in range(a.sandboxes)]
        payload = os.urandom(4096)

        # the warm baseline: one sandbox, nothing else there
        base_name = d.name("baseline")
        d.ok_run(base_name, "pass")
        settle()
        warm_quiet, bare_quiet = warm_against_bare(d, base_name, rounds=60)

        create_s, created_at = [], []
        t0 = time.perf_counter()
        for n in names:
            def create(n=n):
                s, _ = d.request("PUT", f"/v1/sandboxes/{n}", {})
                assert s in (200, 201), s
                s, _, body = d.raw("PUT", f"/v1/sandboxes/{n}/files/data.bin", payload)
                assert s in (200, 201), (s, body)
            dt, _ = timed(create)
            create_s.append(dt)
            created_at.append(time.perf_counter() - t0)
        create_total = time.perf_counter() - t0

        # None running: the memory baseline is taken against a host where no sandbox of this daemon runs.
        for n in names + [base_name]:
            s, body = d.request("POST", f"/v1/sandboxes/{n}/stop")
            assert s == 200, (s, body)
        s, body = d.request("GET", "/v1/health")
        assert body["sandboxes"]["running"] == 0, body
        time.sleep(2)  # the stopped storages' flushers finish
        m0, rss0 = meminfo(), rss(d.proc.pid)
        mem_samples = []
        for i, n in enumerate(names[:a.running]):
            d.ok_run(n, "pass")
            if (i + 1) % 20 == 0 or i + 1 == a.running:
                m = meminfo()
                cg = sum(cgroup_usage(d.runner_key(x)) for x in names[:i + 1])
                kernel = (m["SUnreclaim"] - m0["SUnreclaim"]) + (m["PageTables"] - m0["PageTables"])
                daemon = rss(d.proc.pid) - rss0
                mem_samples.append((i + 1, cg, kernel, daemon))
        count, cg, kernel, daemon = mem_samples[-1]
        per_sandbox = (cg + kernel + daemon) / count

        list_s = statistics.median(timed(lambda: d.request("GET", "/v1/sandboxes"))[0] for _ in range(20))
        s, body = d.request("GET", "/v1/sandboxes")
        listed = len(body["sandboxes"]) if isinstance(body, dict) else 0
        # "a run in any of them": three of the idle sandboxes, each against bare python3 in the same rounds; the
        # worst of the three is the figure
        settle()
        among = [warm_against_bare(d, names[a.running * k // 4]) for k in (1, 2, 3)]
        warm_busy, bare_busy = max(among, key=lambda wb: wb[0] / wb[1])

    rate = a.sandboxes / create_total
    # each warm figure relative to bare python3 timed in the same moments, so the machine's drift between the two
    # measurements (minutes apart) cancels out
    warm_ratio = (warm_busy / bare_busy) / (warm_quiet / bare_quiet)
    figures = {
        "sandboxes": a.sandboxes, "listed": listed, "running_idle": a.running,
        "create_ms_p50": round(statistics.median(create_s) * 1000, 2),
        "create_ms_p99": round(sorted(create_s)[int(len(create_s) * 0.99) - 1] * 1000, 2),
        "creations_per_second": round(rate, 1),
        "memory_per_idle_sandbox_kib": round(per_sandbox / 1024, 1),
        "memory_parts_kib": {"cgroups": round(cg / count / 1024, 1), "kernel": round(kernel / count / 1024, 1),
                             "lensboxd": round(daemon / count / 1024, 1)},
        "list_ms_p50": round(list_s * 1000, 2),
        "warm_run_ms": {"quiet": round(warm_quiet * 1000, 2), "bare_then": round(bare_quiet * 1000, 2),
                        "among_them": round(warm_busy * 1000, 2), "bare_now": round(bare_busy * 1000, 2)},
        "warm_run_ratio": round(warm_ratio, 3),
        "warm_run_ratios_of_three": [round((w / b) / (warm_quiet / bare_quiet), 3) for w, b in among],
    }
    print(json.dumps(figures, indent=2))
    print(f"targets (issue 18): creations/s >= 50: {rate:.1f}; memory per idle sandbox <= 1024 KiB: "
          f"{per_sandbox / 1024:.0f}; list < 50 ms: {list_s * 1000:.1f}; warm run <= 1.05x: "
          f"{warm_ratio:.3f}")
    if a.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
        ax1.plot(range(1, len(create_s) + 1), [x * 1000 for x in create_s], ",", alpha=0.6)
        ax1.set_xlabel("sandboxes existing")
        ax1.set_ylabel("create + 4 KiB upload (ms)")
        ax1.set_title("creation latency")
        ax2.plot([s[0] for s in mem_samples], [(s[1] + s[2] + s[3]) / 2**20 for s in mem_samples], "o-",
                 label="total")
        ax2.plot([s[0] for s in mem_samples], [s[1] / 2**20 for s in mem_samples], ".-", label="cgroups")
        ax2.plot([s[0] for s in mem_samples], [s[2] / 2**20 for s in mem_samples], ".-", label="kernel slab+pt")
        ax2.set_xlabel("sandboxes running idle")
        ax2.set_ylabel("host memory (MiB)")
        ax2.set_title("memory")
        ax2.legend()
        fig.tight_layout()
        fig.savefig(a.plot, dpi=100)
        print(f"plot: {a.plot}")


if __name__ == "__main__":
    main()

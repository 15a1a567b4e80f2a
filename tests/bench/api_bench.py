#!/usr/bin/python3
"""Benchmark (not a test): `print(1)` through lensboxd's API against bare `python3 -c 'print(1)'` on the host, in
one run, printing the ratios.

    LENSBOX_BUILD_DIR=build /usr/bin/python3 tests/bench/api_bench.py [--rounds N]

Eight figures, each the median of N rounds, measured from this process (wall clock, time.perf_counter):
  bare      subprocess.run(["/usr/bin/python3", "-c", "print(1)"]) on the host
  chroot    the image's own python3 (the binary and files a sandbox runs), chroot'ed: the same program without any
            isolation, ~4 ms faster to start here than the host's python3. Every ratio is printed against both: the
            targets are read against bare (as since this bench began), issue 18's own definition of bare is this one
  bwrap     the same under `bwrap --unshare-all` over the default image's root (read-only), fresh /proc, /dev, /tmp
  existing  POST /v1/sandboxes/{name}/runs with print(1) in a sandbox that is already running, each on a connection
            of its own (`kept-alive` is the same on one connection kept open across rounds, as the shipped client
            and the Lens backend send their requests: no connection and thread set up per request; `cold` has the
            same second line, measured on a third lensboxd with cold's settings)
  new       the first run in a sandbox that does not exist yet, as lensboxd runs by default (spare_sandboxes = 1):
            the daemon hands it the spare it started ahead of time. Before each round the benchmark waits,
            untimed, until every spare the pool wants is ready (GET /v1/health: ready = target), i.e. new
            conversations arrive no faster than one refill (~20 ms of work, started 200 ms after a claim); a burst
            larger than the pool gets the next figure for the runs past it. (Until 2026-12-07 it waited for one
            spare: the bench's arrivals grow the pool to 4, and the refill of the rest then ran beside the timed
            runs of the next round.) The variants run in an order shuffled every round (--seed), since the
            first after that wait runs with colder caches and each one runs faster right after a run in the same
            daemon
  cold      the first run in a new sandbox of a second lensboxd with spare_sandboxes = 0: created, storage made,
            started, run
Targets (issue 18): existing <= 1.05x bare, new <= 1.05x bare, cold <= 1.15x bare and below bwrap's ratio.
Runs as root against two private lensboxd.

With --compare-build-dir DIR, a third lensboxd from another build (e.g. main's, spare_sandboxes = 0) runs the
`existing` and `cold` variants in the same rounds against this build's second lensboxd, which has the same settings
(an `existing` there has no spare refill running behind it), and `compare` lines give both medians, their ratio
(this build / the other) and the median of the per-round differences: this machine is shared and its load swings, so only figures
from one run compare.
"""
import argparse
import http.client
import shutil
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from lensbox_testlib.lensboxd import Daemon  # noqa: E402


class OtherBuildDaemon(Daemon):
    """A lensboxd of another build (its supervisor/lensboxd), otherwise as Daemon."""

    def __init__(self, build_dir, **kw):
        self.binary = os.path.join(build_dir, "supervisor", "lensboxd")
        if not os.access(self.binary, os.X_OK):
            raise SystemExit(f"{self.binary} is not built")
        super().__init__(**kw)

    def argv(self):
        return [self.binary] + super().argv()[1:]


class Conn(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("lensbox", timeout=120)
        self.path_ = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(self.path_)


def api_run(sock, name, body, conn=None):
    """One run; on a connection of its own (opened and closed here), or on conn, kept alive across calls."""
    c = conn or Conn(sock)
    c.request("POST", f"/v1/sandboxes/{name}/runs", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    if conn is None:
        c.close()
    out = json.loads(data)
    if r.status != 200 or out.get("stdout") != "1\n":
        raise SystemExit(f"run failed: {r.status} {out}")
    return out


def timed(fn):
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--compare-build-dir", help="another build whose lensboxd runs `existing` alongside")
    ap.add_argument("--seed", type=int, default=1, help="of the order the variants run in each round")
    args = ap.parse_args()
    if args.compare_build_dir:
        settings = {"max_running": "64", "log_level": "info", "spare_sandboxes": "0"}
        with OtherBuildDaemon(args.compare_build_dir, settings=settings) as other:
            measure(args, other)
    else:
        measure(args, None)


def measure(args, other):
    body = json.dumps({"language": "python", "source": "print(1)"})
    with Daemon(settings={"max_running": "64", "log_level": "info", "spare_sandboxes": "1"}) as d, \
            Daemon(settings={"max_running": "64", "log_level": "info", "spare_sandboxes": "0"}) as cold_d, \
            Daemon(settings={"max_running": "64", "log_level": "info", "spare_sandboxes": "0"}) as cold_k_d:
        def bare():
            p = subprocess.run(["/usr/bin/python3", "-c", "print(1)"], capture_output=True)
            assert p.stdout == b"1\n"

        from lensbox_testlib.runner import rootfs
        bwrap_cmd = [shutil.which("bwrap") or "bwrap", "--unshare-all", "--die-with-parent", "--ro-bind", rootfs(),
                     "/", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--", "/usr/bin/python3", "-c",
                     "print(1)"]

        def bwrap():
            p = subprocess.run(bwrap_cmd, capture_output=True)
            assert p.stdout == b"1\n", p.stderr

        def spare_ready(timeout=30):
            # The whole pool, not one spare: the bench's own arrivals are a burst, which grows the pool to
            # spare_sandboxes_max (4), and a refill still making a spare competed with this round's variants
            deadline = time.monotonic() + timeout
            while True:
                spares = d.request("GET", "/v1/health")[1]["spares"]
                if spares["ready"] >= max(1, spares["target"]):
                    break
                if time.monotonic() > deadline:
                    raise SystemExit(f"the spares were not all ready within 30 s ({spares}): see the daemon's log")
                time.sleep(0.01)

        existing_name = d.name("bench")
        api_run(d.socket, existing_name, body)  # created and started: later runs find it running
        api_run(cold_d.socket, cold_d.name("warm"), body)
        for _ in range(3):  # warm caches on both sides
            bare()
            bwrap()
            api_run(d.socket, existing_name, body)
            if other:
                api_run(other.socket, other.name("bench"), body)
        if other:
            api_run(other.socket, other.name("warm"), body)
        bare_ms, existing_ms, new_ms, cold_ms, inside_ms, other_ms, kept_ms = [], [], [], [], [], [], []
        # a third lensboxd for cold runs on a kept-alive connection: two cold starts a round in one daemon would take
        # its ready starts faster than it makes them
        kept, cold_kept = Conn(d.socket), Conn(cold_k_d.socket)
        api_run(d.socket, existing_name, body, kept)
        api_run(cold_k_d.socket, cold_k_d.name("warm"), body, cold_kept)
        cold_kept_ms = []
        bwrap_ms, other_cold_ms, same_ms, chroot_ms = [], [], [], []
        chroot_cmd = ["chroot", rootfs(), "/usr/bin/python3", "-c", "print(1)"]

        def chroot():
            p = subprocess.run(chroot_cmd, capture_output=True)
            assert p.stdout == b"1\n", p.stderr
        rng = random.Random(args.seed)
        for i in range(args.rounds):
            spare_ready()  # not timed; the machine idles a moment here
            fresh, cold, cold_k = d.name(f"new{i}"), cold_d.name(f"cold{i}"), cold_k_d.name(f"cold{i}")
            variants = [
                lambda: bare_ms.append(timed(bare)),
                lambda: bwrap_ms.append(timed(bwrap)),
                lambda: chroot_ms.append(timed(chroot)),
                lambda: existing_ms.append(timed(
                    lambda: inside_ms.append(api_run(d.socket, existing_name, body)["duration_ms"]))),
                lambda: kept_ms.append(timed(lambda: api_run(d.socket, existing_name, body, kept))),
                lambda: new_ms.append(timed(lambda: api_run(d.socket, fresh, body))),
                lambda: cold_ms.append(timed(lambda: api_run(cold_d.socket, cold, body))),
                lambda: cold_kept_ms.append(timed(lambda: api_run(cold_k_d.socket, cold_k, body, cold_kept))),
            ]
            if other:
                other_cold = other.name(f"cold{i}")
                variants.append(lambda: other_ms.append(timed(lambda: api_run(other.socket, other.name("bench"), body))))
                # this build's `existing` with the other's settings (no spares, so no refill running behind it)
                variants.append(lambda: same_ms.append(timed(lambda: api_run(cold_d.socket, cold_d.name("warm"),
                                                                             body))))
                variants.append(lambda: other_cold_ms.append(timed(lambda: api_run(other.socket, other_cold, body))))
            # Interleaved, so any drift of the machine hits all of them alike, and in an order shuffled every
            # round: the first one after the idle moment runs with colder caches, and a run right after another
            # in the same daemon runs with warmer ones. A rotating order gave `kept-alive` the run of `existing`
            # as its predecessor in all but one round of each cycle, which made a kept-alive connection look
            # 1.2-1.4 ms faster than a new one instead of ~0.3 ms.
            order = list(range(len(variants)))
            rng.shuffle(order)
            for k in order:
                variants[k]()
            d.request("DELETE", f"/v1/sandboxes/{fresh}")  # not timed
            cold_d.request("DELETE", f"/v1/sandboxes/{cold}")
            cold_k_d.request("DELETE", f"/v1/sandboxes/{cold_k}")
            if other:
                other.request("DELETE", f"/v1/sandboxes/{other_cold}")
        fresh_names = {f"sandbox={d.name(f'new{i}')} " for i in range(args.rounds)}
        taken = sum(1 for line in d.read_log().splitlines()
                    if "spare=yes" in line and any(n in line for n in fresh_names))
        b, e, n, c, w = (statistics.median(x) for x in (bare_ms, existing_ms, new_ms, cold_ms, bwrap_ms))
        ch = statistics.median(chroot_ms)
        print(f"rounds: {args.rounds} (medians; wall clock seen by the client)")
        print(f"bare python3 -c 'print(1)' on the host : {b:7.1f} ms")
        print(f"bwrap --unshare-all, image's python3   : {w:7.1f} ms   ratio {w / b:4.2f}x")
        print(f"API run, existing sandbox              : {e:7.1f} ms   ratio {e / b:4.2f}x (target <= 1.05x)")
        k = statistics.median(kept_ms)
        print(f"  the same on a kept-alive connection    : {k:7.1f} ms   ratio {k / b:4.2f}x")
        print(f"API run, new sandbox (first run)       : {n:7.1f} ms   ratio {n / b:4.2f}x (target <= 1.05x)"
              f"   [{taken} of {args.rounds} from a spare]")
        print(f"API run, new sandbox, no spare (cold)  : {c:7.1f} ms   ratio {c / b:4.2f}x (target <= 1.15x and "
              f"< bwrap's {w / b:4.2f}x)")
        ck = statistics.median(cold_kept_ms)
        print(f"  the same on a kept-alive connection    : {ck:7.1f} ms   ratio {ck / b:4.2f}x")
        print(f"  of which the program itself (duration_ms, existing): {statistics.median(inside_ms):.1f} ms")
        print(f"against the image's python3 chroot'ed ({ch:.1f} ms, {ch / b:4.2f}x bare): bwrap {w / ch:4.2f}x, "
              f"existing {e / ch:4.2f}x (kept-alive {k / ch:4.2f}x), new {n / ch:4.2f}x, cold {c / ch:4.2f}x "
              f"(kept-alive {ck / ch:4.2f}x)")
        if other:
            o, same = statistics.median(other_ms), statistics.median(same_ms)
            paired = statistics.median(x - y for x, y in zip(same_ms, other_ms))
            print(f"compare: existing here {same:.2f} ms ({same / b:4.3f}x), {args.compare_build_dir} {o:.2f} ms "
                  f"({o / b:4.3f}x), ratio {same / o:5.3f}, paired difference {paired:+.2f} ms (both spare_sandboxes 0)")
            oc = statistics.median(other_cold_ms)
            paired_c = statistics.median(x - y for x, y in zip(cold_ms, other_cold_ms))
            print(f"compare: cold here {c:.2f} ms ({c / b:4.2f}x), {args.compare_build_dir} {oc:.2f} ms "
                  f"({oc / b:4.2f}x), ratio {c / oc:5.3f}, paired difference {paired_c:+.2f} ms")
        print(json.dumps({"bare_ms": round(b, 2), "chroot_ms": round(ch, 2), "bwrap_ms": round(w, 2),
                          "ratio_bwrap": round(w / b, 3),
                          "chroot_ratios": {"bwrap": round(w / ch, 3), "existing": round(e / ch, 3),
                                            "existing_kept_alive": round(k / ch, 3),
                                            "cold_kept_alive": round(ck / ch, 3),
                                            "new": round(n / ch, 3), "cold": round(c / ch, 3)},
                          "existing_ms": round(e, 2), "existing_kept_alive_ms": round(k, 2), "new_ms": round(n, 2),
                          "cold_ms": round(c, 2), "cold_kept_alive_ms": round(ck, 2),
                          "ratio_existing": round(e / b, 3), "ratio_new": round(n / b, 3),
                          "ratio_cold": round(c / b, 3), "new_from_spare": taken}))


if __name__ == "__main__":
    main()

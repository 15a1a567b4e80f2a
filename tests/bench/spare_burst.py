#!/usr/bin/python3
"""Benchmark (not a test): new conversations arriving in bursts, with the spare pool sized by arrival rate against a
fixed pool of one, in one run.

    LENSBOX_BUILD_DIR=build /usr/bin/python3 tests/bench/spare_burst.py [--bursts N] [--size K] [--gap S]

Two private lensboxd, both with spare_sandboxes = 1: `sized` keeps lensboxd's default spare_sandboxes_max (4), so
after a burst its pool holds as many spares as the burst had new sandboxes, for a minute (supervisor/core/arrivals.c);
`fixed` has spare_sandboxes_max = 1, the pool as it was before. Each burst is K first runs of `print(1)` in new
sandboxes, one after the other with no pause, on one daemon; the bursts alternate between the two daemons, each
followed by a pause of S seconds (not timed) in which the pools refill. Printed: each daemon's median and mean first
run, how many of them a spare served, and the ratios against bare `python3 -c 'print(1)'` on the host measured in
the same rounds. The first burst of `sized` finds one spare (nothing has arrived yet): it is in the figures, as it
would be on a real host after a quiet minute.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from lensbox_testlib.lensboxd import Daemon, wait_for  # noqa: E402
from api_bench import api_run, timed  # noqa: E402

BODY = json.dumps({"language": "python", "source": "print(1)"})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bursts", type=int, default=8, help="bursts per daemon")
    ap.add_argument("--size", type=int, default=4, help="new sandboxes per burst")
    ap.add_argument("--gap", type=float, default=3.0, help="seconds between bursts (the pools refill)")
    args = ap.parse_args()
    common = {"max_running": str(4 * args.bursts * args.size + 8), "log_level": "info", "spare_sandboxes": "1"}
    with Daemon(settings=dict(common)) as sized, Daemon(settings=dict(common, spare_sandboxes_max="1")) as fixed:
        daemons = {"sized": sized, "fixed": fixed}
        for d in daemons.values():
            if not wait_for(lambda: d.request("GET", "/v1/health")[1]["spares"]["ready"] >= 1, 30):
                raise SystemExit("no spare sandbox became ready within 30 s: see the daemon's log")
            api_run(d.socket, d.name("warm"), BODY)  # warm caches on both sides
        bare_ms = []
        first_ms = {k: [] for k in daemons}
        names = {k: [] for k in daemons}

        def bare():
            p = subprocess.run(["/usr/bin/python3", "-c", "print(1)"], capture_output=True)
            assert p.stdout == b"1\n", p.stderr
        for i in range(2 * args.bursts):
            key = ("sized", "fixed")[(i + i // 2) % 2]  # sized, fixed, fixed, sized, ...: each goes first as often
            d = daemons[key]
            time.sleep(args.gap)
            bare_ms.append(timed(bare))
            for k in range(args.size):
                n = d.name(f"b{i}-{k}")
                names[key].append(n)
                first_ms[key].append(timed(lambda: api_run(d.socket, n, BODY)))
        b = statistics.median(bare_ms)
        out = {"bare_ms": round(b, 2), "bursts": args.bursts, "size": args.size}
        print(f"bursts: {args.bursts} per daemon of {args.size} new sandboxes, {args.gap:g} s apart")
        print(f"bare python3 -c 'print(1)' on the host : {b:6.1f} ms")
        for key, d in daemons.items():
            started = [line for line in d.read_log().splitlines() if "spare=yes" in line]
            taken = sum(any(f"sandbox={n} " in line for line in started) for n in names[key])
            med, mean = statistics.median(first_ms[key]), statistics.mean(first_ms[key])
            mx = d.request("GET", "/v1/health")[1]["spares"]["max"]
            print(f"first run, {key:5} pool (max {mx})        : median {med:6.1f} ms ({med / b:4.2f}x), "
                  f"mean {mean:6.1f} ms ({mean / b:4.2f}x), {taken} of {len(names[key])} from a spare")
            out[key] = {"median_ms": round(med, 2), "mean_ms": round(mean, 2), "ratio_median": round(med / b, 3),
                        "ratio_mean": round(mean / b, 3), "from_spare": taken, "runs": len(names[key])}
        print(json.dumps(out))


if __name__ == "__main__":
    main()

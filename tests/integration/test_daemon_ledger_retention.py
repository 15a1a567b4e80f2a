"""The run ledger's retention against a real lensboxd with seconds-scale values: runs_keep_max keeps only the newest
rows, runs_keep_days deletes rows older than it, and /metrics' run counters are not reduced by either."""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from lensbox_testlib.lensboxd import Daemon, wait_for  # noqa: E402

KEEP_SECONDS = 4  # the timer then prunes every 0.4 s


def ledger(d, name):
    status, body = d.request("GET", f"/v1/runs?sandbox={name}&limit=100")
    assert status == 200, body
    return [r["id"] for r in body["runs"]]


def runs_total(d):
    text = d.raw("GET", "/metrics")[2].decode()
    return sum(int(line.split()[-1]) for line in text.splitlines() if line.startswith("lensbox_runs_total{"))


def test_keep_max_then_keep_days():
    with Daemon(settings={"runs_keep_days": f"{KEEP_SECONDS}s", "runs_keep_max": "3"}) as d:
        name = d.name("ledger")
        t0 = time.monotonic()
        ids = [d.ok_run(name, "true", "bash")["id"] for _ in range(5)]
        made_in = time.monotonic() - t0
        assert made_in < KEEP_SECONDS - 1, f"5 runs took {made_in:.1f} s: too slow to tell the two rules apart"
        # runs_keep_max: only the newest three stay (within a prune period or two)
        assert wait_for(lambda: len(ledger(d, name)) <= 3, 2), ledger(d, name)
        kept = ledger(d, name)
        if time.monotonic() - t0 < KEEP_SECONDS:  # none of them is old enough yet for runs_keep_days
            assert kept == ids[:1:-1], (kept, ids)
        # runs_keep_days: once older than KEEP_SECONDS they go too
        assert wait_for(lambda: ledger(d, name) == [], KEEP_SECONDS + 3), ledger(d, name)
        assert time.monotonic() - t0 >= KEEP_SECONDS - 0.5  # not before their time
        status, _ = d.request("GET", f"/v1/runs/{ids[-1]}")
        assert status == 404
        # a new run is recorded as usual, and the counters still count all six
        new = d.ok_run(name, "true", "bash")["id"]
        assert ledger(d, name) == [new]
        assert runs_total(d) == 6
        assert "ledger pruned" in d.read_log()

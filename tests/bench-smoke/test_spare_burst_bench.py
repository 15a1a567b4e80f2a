"""tests/bench/spare_burst.py runs end to end with few bursts against two real lensboxd and prints its ratios (the
figures are for people: performance is not asserted by tests). What is asserted is that it measured what it says:
the fixed pool served one run per burst from a spare, and the pool sized by arrivals served every run of every burst
after its first from a spare."""

import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.environ.get("LENSBOX_SOURCE_DIR", os.path.dirname(os.path.dirname(HERE)))


def test_spare_burst_benchmark_prints_ratios():
    bursts, size = 2, 3
    p = subprocess.run([sys.executable, os.path.join(SOURCE_DIR, "tests", "bench", "spare_burst.py"), "--bursts",
                        str(bursts), "--size", str(size), "--gap", "2"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    figures = json.loads(p.stdout.strip().splitlines()[-1])
    assert figures["bare_ms"] > 0, figures
    for key in ("sized", "fixed"):
        assert figures[key]["runs"] == bursts * size and figures[key]["ratio_median"] > 0, figures
    assert figures["fixed"]["from_spare"] == bursts, figures
    assert figures["sized"]["from_spare"] == 1 + (bursts - 1) * size, figures

"""tests/bench/api_bench.py runs end to end with few rounds against two real lensboxd and prints its ratios (the
figures are for people: performance is not asserted by tests). What is asserted is that the benchmark measured what
it says: every "new sandbox" round was served by a spare, as lensboxd's default configuration intends."""

import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.environ.get("LENSBOX_SOURCE_DIR", os.path.dirname(os.path.dirname(HERE)))


def test_api_benchmark_prints_ratios():
    rounds = 3
    p = subprocess.run([sys.executable, os.path.join(SOURCE_DIR, "tests", "bench", "api_bench.py"), "--rounds",
                        str(rounds)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    lines = p.stdout.strip().splitlines()
    assert any(line.startswith("API run, new sandbox (first run)") and "ratio" in line for line in lines), p.stdout
    figures = json.loads(lines[-1])
    for key in ("bare_ms", "chroot_ms", "existing_ms", "existing_kept_alive_ms", "new_ms", "cold_ms",
                "cold_kept_alive_ms", "ratio_existing", "ratio_new", "ratio_cold"):
        assert figures[key] > 0, (key, figures)
    assert figures["new_from_spare"] == rounds, figures
    assert set(figures["chroot_ratios"]) == {"bwrap", "existing", "existing_kept_alive", "new", "cold",
                                              "cold_kept_alive"}, figures

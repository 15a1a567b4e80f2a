"""tests/bench/network_bench.py runs end to end, small, in its sealed world and prints its ratios (the figures are
for people: performance is not asserted by tests)."""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.environ.get("LENSBOX_SOURCE_DIR", os.path.dirname(os.path.dirname(HERE)))


def test_network_benchmark_prints_ratios():
    p = subprocess.run([sys.executable, os.path.join(SOURCE_DIR, "tests", "bench", "network_bench.py"), "--rounds",
                        "3", "--size", "8", "--repeat", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.strip().splitlines()
    assert any(line.startswith("attach off") and "web adds" in line for line in lines), p.stdout
    figures = json.loads(lines[-1])
    for path in ("web_http", "relay_http", "relay_https"):
        for key in ("ratio", "ratio_min", "ratio_max", "mibs", "direct_mibs", "ttfb_ms", "direct_ttfb_ms",
                    "cpu_ms_per_mib", "direct_cpu_ms_per_mib"):
            assert figures[f"{path}_{key}"] > 0, (path, key, figures)
        assert figures[f"{path}_ratio_min"] <= figures[f"{path}_ratio"] <= figures[f"{path}_ratio_max"], figures
    for key in ("attach_off_ms", "attach_web_ms"):
        assert figures[key] > 0, (key, figures)

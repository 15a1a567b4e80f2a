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
                        "3", "--size", "8", "--repeat", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.strip().splitlines()
    assert any(line.startswith("attach off") and "web adds" in line for line in lines), p.stdout
    figures = json.loads(lines[-1])
    for key in ("attach_off_ms", "attach_web_ms", "web_http_ratio", "relay_http_ratio", "relay_https_ratio",
                "web_http_direct_mibs", "relay_https_mibs"):
        assert figures[key] > 0, (key, figures)

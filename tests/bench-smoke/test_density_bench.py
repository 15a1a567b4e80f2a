"""tests/bench/density.py runs end to end at a small scale and prints its figures and its plot (the figures
themselves are for people: performance is not asserted by tests)."""

import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.environ.get("LENSBOX_SOURCE_DIR", os.path.dirname(os.path.dirname(HERE)))


def test_density_benchmark_prints_figures_and_a_plot():
    with tempfile.TemporaryDirectory() as tmp:
        plot = os.path.join(tmp, "density.png")
        p = subprocess.run([sys.executable, os.path.join(SOURCE_DIR, "tests", "bench", "density.py"),
                            "--sandboxes", "24", "--running", "8", "--plot", plot],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=600)
        assert p.returncode == 0, p.stderr
        out = p.stdout
        figures = json.loads(out[:out.index("\ntargets")])
        assert figures["sandboxes"] == 24 and figures["listed"] >= 24 and figures["running_idle"] == 8, figures
        for key in ("create_ms_p50", "creations_per_second", "memory_per_idle_sandbox_kib", "list_ms_p50",
                    "warm_run_ratio"):
            assert figures[key] > 0, (key, figures)
        # the figure is the worst of the probes among the running ones, one per CPU set a baseline has, each against
        # the baseline on its CPUs, timed among / alone / among
        per_cpus = figures["warm_run_ratio_per_cpu_set"]
        assert per_cpus and max(per_cpus.values()) == figures["warm_run_ratio"], figures
        assert set(figures["warm_run_median_over_bare"]) == set(per_cpus), figures
        assert [p[0] for p in figures["warm_run_phases_run_over_bare"]] == ["among", "alone", "among"], figures
        with open(plot, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"

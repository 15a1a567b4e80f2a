"""The Python client is typed: mypy --strict finds nothing in clients/python/lensbox_client (a backend that type-checks
its own code can rely on the annotations)."""

import os
import subprocess
import tempfile

SRC = os.environ.get("LENSBOX_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))


def test_mypy_strict():
    probe = subprocess.run(["/usr/bin/python3", "-m", "mypy", "--version"], capture_output=True, text=True)
    assert probe.returncode == 0, "mypy is missing: run scripts/install-deps (Debian package mypy)"
    with tempfile.TemporaryDirectory() as cache:
        p = subprocess.run(["/usr/bin/python3", "-m", "mypy", "--strict", "--cache-dir", cache, "lensbox_client"],
                           cwd=os.path.join(SRC, "clients", "python"), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "Success: no issues found" in p.stdout

"""The `lensbox` command against a real lensboxd on a temporary socket: run with the program's exit status, files in
and out byte for byte, the tables, --json, and the daemon's errors as one line with their code."""

import json
import os
import subprocess
import sys

import pytest

SRC = os.environ.get("LENSBOX_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path[:0] = [os.path.join(SRC, "tests")]

from lensbox_testlib.lensboxd import BUILD_DIR, Daemon  # noqa: E402

LENSBOX = os.path.join(BUILD_DIR, "clients", "cli", "lensbox")


@pytest.fixture(scope="module")
def d():
    assert os.access(LENSBOX, os.X_OK), f"{LENSBOX} is not built: cmake --build {BUILD_DIR} --target lensbox"
    with Daemon() as daemon:
        yield daemon


def lb(d, *args, stdin=None):
    env = dict(os.environ, LENSBOX_SOCKET=d.socket)
    return subprocess.run([LENSBOX, *args], input=stdin, capture_output=True, env=env, timeout=120)


def test_health(d):
    p = lb(d, "health")
    assert p.returncode == 0, p.stdout + p.stderr
    out = p.stdout.decode()
    assert "can run:     yes" in out
    # The test daemon runs with networking off (lensbox_testlib.lensboxd): health says so, and why.
    assert "network:     off only; packages and web are unavailable: " in out, out
    assert "\nimage:       " in out, out
    # privilege separation: the process that answered, and what the core refused from it (nothing, here)
    assert "api process: unprivileged; replaced 0 times, 0 messages refused by the core" in out, out


def test_run_exit_statuses(d):
    n = d.name("cli-run")
    p = lb(d, "run", n, "--python", "import sys\nprint('out')\nprint('err', file=sys.stderr)\nsys.exit(3)")
    assert (p.returncode, p.stdout, p.stderr) == (3, b"out\n", b"err\n")
    p = lb(d, "run", n, "--bash", "sleep 30", "--timeout", "1")
    assert p.returncode == 124
    assert b"lensbox: " in p.stderr and b"time limit" in p.stderr
    p = lb(d, "run", n, "--bash", "kill -9 $$")
    assert p.returncode == 137
    p = lb(d, "run", n, "--python", "-", stdin=b"print(6*7)\n")
    assert (p.returncode, p.stdout) == (0, b"42\n")
    p = lb(d, "--json", "run", n, "--bash", "exit 5")
    assert p.returncode == 5 and json.loads(p.stdout)["exit_code"] == 5


def test_cp_files_ls_inspect_runs_stop_rm(d, tmp_path):
    n = d.name("cli-files")
    blob = os.urandom(300_000)
    (tmp_path / "in.bin").write_bytes(blob)
    p = lb(d, "cp", str(tmp_path / "in.bin"), f"{n}:data/")
    assert p.returncode == 0, p.stderr
    p = lb(d, "run", n, "--bash", "sha256sum data/in.bin | cut -c1-64 > data/sum.txt")
    assert p.returncode == 0, p.stderr
    out = tmp_path / "back"
    out.mkdir()
    assert lb(d, "cp", f"{n}:data/in.bin", str(out)).returncode == 0
    assert (out / "in.bin").read_bytes() == blob
    import hashlib

    p = lb(d, "cp", f"{n}:data/sum.txt", "-")
    assert p.stdout.decode().strip() == hashlib.sha256(blob).hexdigest()

    listing = lb(d, "files", n).stdout.decode()
    assert "data/in.bin" in listing and "293 KiB" in listing

    ls = lb(d, "ls").stdout.decode().splitlines()
    row = next(line for line in ls if line.startswith(n + " "))
    assert row.split()[1] == "running"
    insp = lb(d, "inspect", n).stdout.decode()
    assert f"name:        {n}" in insp and "state:       running" in insp

    runs = lb(d, "runs", n).stdout.decode().splitlines()
    assert len(runs) == 2 and " ok " in runs[1]

    p = lb(d, "stop", n)
    assert p.stdout.decode() == f"{n}: stopped; its files stay.\n"
    p = lb(d, "rm", n)
    assert p.stdout.decode() == f"{n}: deleted with its files.\n"
    p = lb(d, "inspect", n)
    assert p.returncode == 1
    assert p.stderr.decode() == f"lensbox: There is no sandbox named {n}. (sandbox_not_found)\n"


def test_daemon_refusals(d):
    n = d.name("cli-refuse")
    p = lb(d, "run", n, "--python", "1", "--memory", "1Ti")
    assert p.returncode == 125 and "(out_of_range)" in p.stderr.decode()
    lb(d, "run", n, "--bash", "mkfifo pipe")
    p = lb(d, "cp", f"{n}:pipe", "-")
    assert p.returncode == 1 and "(not_a_regular_file)" in p.stderr.decode()
    lb(d, "rm", n)

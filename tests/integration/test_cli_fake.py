"""The `lensbox` command against a fake lensboxd on a Unix socket: what it sends (the fake checks and records every
request), what it prints (tables, --json, hostile names made safe), and its exit codes (the program's for `run`)."""

import json
import os
import subprocess
import sys

import pytest

SRC = os.environ.get("LENSBOX_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("LENSBOX_BUILD_DIR", os.path.join(SRC, "build"))
sys.path[:0] = [os.path.join(SRC, "tests")]

from lensbox_testlib.fake_lensboxd import FakeLensboxd  # noqa: E402

LENSBOX = os.path.join(BUILD, "clients", "cli", "lensbox")
MiB = 1024 * 1024


@pytest.fixture(scope="module", autouse=True)
def built():
    assert os.access(LENSBOX, os.X_OK), f"{LENSBOX} is not built: cmake --build {BUILD} --target lensbox"


@pytest.fixture
def fake(tmp_path):
    with FakeLensboxd(str(tmp_path / "lensboxd.sock")) as f:
        yield f
        assert f.violations == [], "lensbox sent requests lensboxd would refuse"


def lb(fake, *args, stdin=None, env_socket=True, cwd=None):
    env = dict(os.environ)
    env.pop("LENSBOX_SOCKET", None)
    if env_socket:
        env["LENSBOX_SOCKET"] = fake.socket_path
    return subprocess.run([LENSBOX, *args], input=stdin, capture_output=True, env=env, timeout=60, cwd=cwd)


def test_health(fake):
    p = lb(fake, "health")
    assert p.returncode == 0, p.stderr
    out = p.stdout.decode()
    assert "can run:     yes" in out and "kernel:      6.18.0" in out
    assert fake.paths() == ["GET /v1/health"]
    p = lb(fake, "--json", "health")
    assert json.loads(p.stdout)["can_run"] is True


def test_health_says_what_stops_the_network_tiers_and_runs(fake):
    """An admin reads in `lensbox health` why `pip install` fails in a sandbox, and that the default image is
    missing, without reading JSON; the host can still run sandboxes, so the exit status stays 0."""
    p = lb(fake, "health")
    out = p.stdout.decode()
    assert "image:       python:3.12-slim\n" in out, out
    assert "network:     off, packages, web\n" in out, out
    assert "dns, relay:  running unprivileged (0 replaced so far)\n" in out, out
    assert "warning:" not in out, out
    health = json.loads(lb(fake, "--json", "health").stdout)
    health["default_image"].update(available=False, digest=None, why_not="python:3.12-slim is not imported")
    health["network"].update(blocking_forward_chain="inet firewalld filter_FORWARD")
    health["network"]["services"].update(alive=False, restarts=3)
    fake.next_raw = (200, json.dumps(health).encode(), "application/json")
    out = lb(fake, "health").stdout.decode()
    assert ("image:       python:3.12-slim is not available (python:3.12-slim is not imported): runs that name no "
            "image are refused\n") in out, out
    assert ("warning:     inet firewalld filter_FORWARD drops what it does not accept: packages and web traffic may "
            "stop there\n") in out, out
    assert "dns, relay:  being replaced (3 replaced so far)\n" in out, out
    health["network"]["services"].update(supervised=False)
    fake.next_raw = (200, json.dumps(health).encode(), "application/json")
    out = lb(fake, "health").stdout.decode()
    assert "dns, relay:  stopped: packages and web sandboxes get no DNS or relay until lensboxd restarts\n" in out
    health["network"] = {"tiers_available": False, "why_not": "nftables: the kernel has no nf_tables"}
    fake.next_raw = (200, json.dumps(health).encode(), "application/json")
    p = lb(fake, "health")
    out = p.stdout.decode()
    assert p.returncode == 0, out
    assert ("network:     off only; packages and web are unavailable: nftables: the kernel has no nf_tables\n"
            in out), out
    assert "dns, relay:" not in out, out


def test_health_exits_1_when_host_cannot_run(fake):
    fake.next_raw = (200, json.dumps({"version": "x", "can_run": False, "why_not": "no Landlock"}).encode(),
                     "application/json")
    p = lb(fake, "health")
    assert p.returncode == 1
    assert "why not:     no Landlock" in p.stdout.decode()


def test_socket_flag_and_unreachable(fake, tmp_path):
    p = lb(fake, "--socket", fake.socket_path, "ls", env_socket=False)
    assert p.returncode == 0, p.stderr
    nowhere = str(tmp_path / "none.sock")
    p = lb(fake, "--socket", nowhere, "ls")
    assert p.returncode == 1
    assert f"lensboxd did not answer on {nowhere}" in p.stderr.decode()
    assert "(daemon_unreachable)" in p.stderr.decode()
    p = lb(fake, "--socket", nowhere, "run", "a", "--python", "1")
    assert p.returncode == 125


def test_run_python_passes_output_and_exit_code(fake):
    fake.run_handler = lambda name, body: {"exit_code": 3, "stdout": "out ✓\n", "stderr": "Traceback…\n"}
    p = lb(fake, "run", "lens-chat-1", "--python", "import sys\nsys.exit(3)", "--timeout", "30")
    assert p.returncode == 3
    assert p.stdout.decode() == "out ✓\n"
    assert p.stderr.decode() == "Traceback…\n"
    req = fake.requests[-1]
    assert (req.method, req.path) == ("POST", "/v1/sandboxes/lens-chat-1/runs")
    assert json.loads(req.body) == {"language": "python", "source": "import sys\nsys.exit(3)", "timeout_seconds": 30}


@pytest.mark.parametrize("result,code", [
    ({"exit_code": None, "signal": 9, "timed_out": True, "message": "killed after 1 s: the time limit"}, 124),
    ({"exit_code": None, "signal": 9, "oom_killed": True, "message": "out of memory: the limit is 512Mi"}, 137),
    ({"exit_code": None, "signal": 11}, 139),
    ({"exit_code": 0}, 0),
    ({"exit_code": 255}, 255),
    ({"exit_code": 3, "message": "exited with code 3"}, 3),
])
def test_run_exit_status(fake, result, code):
    fake.run_handler = lambda name, body: dict(result)
    p = lb(fake, "run", "x", "--bash", "whatever")
    assert p.returncode == code
    if result.get("message"):
        # the daemon's sentence is shown when the program was stopped; a plain exit shows in the status alone
        shown = result["exit_code"] is None
        assert (f"lensbox: {result['message']}" in p.stderr.decode()) == shown


def test_run_notes_truncation_and_recreation(fake):
    fake.add("x", network="off")
    fake.run_handler = lambda name, body: {"exit_code": 0, "stdout": "a" * 10, "stdout_bytes": 5 * MiB,
                                           "stdout_truncated": True, "stderr": "", "stderr_truncated": False}
    p = lb(fake, "run", "x", "--python", "print('a'*5000000)", "--network", "web", "--memory", "1Gi")
    assert p.returncode == 0
    assert p.stdout.decode() == "a" * 10
    err = p.stderr.decode()
    assert "stdout was cut to its start (5.0 MiB written in all)" in err
    assert "a fresh sandbox: the network changed from off to web" in err
    assert json.loads(fake.requests[-1].body)["sandbox"] == {"network": "web", "memory": "1Gi"}


def test_run_json(fake):
    fake.run_handler = lambda name, body: {"exit_code": 7, "stdout": "x"}
    p = lb(fake, "--json", "run", "x", "--python", "1")
    assert p.returncode == 7
    r = json.loads(p.stdout)
    assert r["exit_code"] == 7 and r["stdout"] == "x" and r["sandbox"] == "x"


def test_run_from_file_and_stdin(fake, tmp_path):
    (tmp_path / "job.py").write_text("print('from file')\n")
    (tmp_path / "job.sh").write_text("echo from file\n")
    (tmp_path / "job").write_text("#!/usr/bin/env python3\nprint(1)\n")
    (tmp_path / "job.txt").write_text("echo ?\n")
    for name, lang in (("job.py", "python"), ("job.sh", "bash"), ("job", "python")):
        p = lb(fake, "run", "f", str(tmp_path / name))
        assert p.returncode == 0, p.stderr
        body = json.loads(fake.requests[-1].body)
        assert body["language"] == lang and body["source"] == (tmp_path / name).read_text()
    n = len(fake.requests)
    p = lb(fake, "run", "f", str(tmp_path / "job.txt"))
    assert p.returncode == 2 and "cannot tell the language" in p.stderr.decode()
    p = lb(fake, "run", "f", "--bash", "-", stdin=b"echo from stdin\n")
    assert p.returncode == 0
    assert json.loads(fake.requests[-1].body) == {"language": "bash", "source": "echo from stdin\n"}
    assert len(fake.requests) == n + 1


def test_run_refuses_before_sending(fake, tmp_path):
    big = tmp_path / "big.py"
    big.write_bytes(b"#" * (MiB + 1))
    binary = tmp_path / "bin.py"
    binary.write_bytes(b"print(1)\0")
    cases = [
        (("run", "f", str(big)), 125, "larger than 1 MiB"),
        (("run", "f", str(binary)), 125, "NUL byte"),
        (("run", "f", "--python", "1", "--bash", "2"), 2, "exactly one of"),
        (("run", "f", "--python", "1", str(big)), 2, "exactly one of"),
        (("run", "f"), 2, "exactly one of"),
        (("run", "../etc", "--python", "1"), 2, "not a sandbox name"),
        (("run", "A", "--python", "1"), 2, "not a sandbox name"),
        (("run", "a" * 64, "--python", "1"), 2, "not a sandbox name"),
        (("run", "f", "--python", "1", "--timeout", "601"), 2, "--timeout takes 1 to 600"),
        (("run", "f", "--python", "1", "--timeout", "0"), 2, "--timeout takes 1 to 600"),
        (("ls", "--python", "1"), 2, "belong to `run`"),
        (("ls", "--limit", "3"), 2, "--limit belongs to `runs`"),
        (("frobnicate",), 2, "unknown command"),
        (("inspect",), 2, "one sandbox NAME"),
        (("cp", "a", "b"), 2, "exactly one side is NAME:PATH"),
        (("cp", "x:a", "y:b"), 2, "exactly one side is NAME:PATH"),
    ]
    for args, code, text in cases:
        p = lb(fake, *args)
        assert p.returncode == code, (args, p.stderr)
        assert text in p.stderr.decode(), (args, p.stderr)
    assert fake.requests == []


def test_ls_and_inspect(fake):
    p = lb(fake, "ls")
    assert p.returncode == 0 and p.stdout.decode() == "No sandboxes.\n"
    fake.add("lens-chat-1")
    fake.add("b", image="python:3.13-slim", network="web", cpu="0.5", memory="2Gi").state = "running"
    p = lb(fake, "ls")
    lines = p.stdout.decode().splitlines()
    assert lines[0].split() == ["NAME", "STATE", "IMAGE", "NETWORK", "CPU", "MEMORY", "RUNS", "LAST", "USED",
                                "STOPS", "DELETES"]
    assert lines[1].split()[:6] == ["b", "running", "python:3.13-slim", "web", "0.5", "2Gi"]
    assert lines[2].split()[:6] == ["lens-chat-1", "stopped", "python:3.12-slim", "off", "1", "512Mi"]
    # columns line up: each header starts where its cells start
    col = lines[0].index("STATE")
    assert lines[1][col:].startswith("running") and lines[2][col:].startswith("stopped")
    assert "in 14 min" in lines[1] and "in 23 h" in lines[2]
    assert json.loads(lb(fake, "--json", "ls").stdout)["sandboxes"][0]["name"] == "b"

    p = lb(fake, "inspect", "b")
    out = p.stdout.decode()
    assert p.returncode == 0
    assert "image:       python:3.13-slim (sha256:abab" in out and "network:     web" in out
    assert "cpu:         0.5" in out and "memory:      2Gi" in out and "idle stop:   15 min" in out
    p = lb(fake, "inspect", "nope")
    assert p.returncode == 1
    assert p.stderr.decode() == "lensbox: There is no sandbox named nope. (sandbox_not_found)\n"


def test_stop_and_rm(fake):
    fake.add("s").state = "running"
    p = lb(fake, "stop", "s")
    assert (p.returncode, p.stdout.decode()) == (0, "s: stopped; its files stay.\n")
    assert fake.paths()[-1] == "POST /v1/sandboxes/s/stop"
    p = lb(fake, "stop", "s")
    assert p.stdout.decode() == "s: was not running.\n"
    p = lb(fake, "rm", "s")
    assert (p.returncode, p.stdout.decode()) == (0, "s: deleted with its files.\n")
    assert fake.paths()[-1] == "DELETE /v1/sandboxes/s"
    p = lb(fake, "rm", "s")
    assert p.returncode == 1 and "sandbox_not_found" in p.stderr.decode()


def test_files_listing_is_terminal_safe(fake):
    sb = fake.add("f")
    sb.files["data/a.csv"] = b"x" * 5000
    sb.files["evil\x1b]0;pwned\x07\x1b[2J.txt"] = b"e"
    p = lb(fake, "files", "f")
    out = p.stdout.decode()
    assert p.returncode == 0
    assert "\x1b" not in out and "\x07" not in out
    assert "evil?]0;pwned??[2J.txt" in out
    assert "4.9 KiB" in out and "data/a.csv" in out
    assert fake.requests[-1].path == "/v1/sandboxes/f/files?recursive=true"
    lb(fake, "files", "f", "data dir", "--top")
    assert fake.requests[-1].path == "/v1/sandboxes/f/files?recursive=false&path=data%20dir"


def test_cp_in_and_out(fake, tmp_path):
    blob = bytes(range(256)) * 100
    src = tmp_path / "in.bin"
    src.write_bytes(blob)
    p = lb(fake, "cp", str(src), "c:dir/sub/")
    assert p.returncode == 0, p.stderr
    assert fake.requests[-1].path == "/v1/sandboxes/c/files/dir/sub/in.bin"
    assert fake.sandboxes["c"].files["dir/sub/in.bin"] == blob
    p = lb(fake, "cp", "-", "c:odd name#1.txt", stdin=b"from stdin")
    assert fake.requests[-1].path == "/v1/sandboxes/c/files/odd%20name%231.txt"
    assert fake.sandboxes["c"].files["odd name#1.txt"] == b"from stdin"

    out_dir = tmp_path / "out"
    out_dir.mkdir()
    p = lb(fake, "cp", "c:dir/sub/in.bin", str(out_dir))
    assert p.returncode == 0, p.stderr
    assert (out_dir / "in.bin").read_bytes() == blob
    p = lb(fake, "cp", "c:odd name#1.txt", "-")
    assert p.stdout == b"from stdin"
    p = lb(fake, "cp", "c:missing.txt", str(out_dir / "m.txt"))
    assert p.returncode == 1 and "file_not_found" in p.stderr.decode()
    assert sorted(os.listdir(out_dir)) == ["in.bin"]  # nothing partial left behind


def test_cp_limits(fake, tmp_path):
    big = tmp_path / "big"
    big.write_bytes(b"\0" * (25 * MiB + 1))
    p = lb(fake, "cp", str(big), "c:big")
    assert p.returncode == 1 and "larger than 25 MiB" in p.stderr.decode()
    assert fake.requests == []
    # a daemon that sends more than 25 MiB is cut off, and nothing is left behind
    fake.add("c").files["huge"] = b"\0" * (25 * MiB + 10)
    p = lb(fake, "cp", "c:huge", str(tmp_path / "out"))
    assert p.returncode == 1 and "(too_large)" in p.stderr.decode()
    assert not any(n.startswith("out") for n in os.listdir(tmp_path))


def test_runs(fake):
    fake.run_handler = lambda name, body: {"exit_code": 1 if "fail" in body["source"] else 0}
    lb(fake, "run", "r1", "--python", "ok")
    lb(fake, "run", "r1", "--python", "fail")
    lb(fake, "run", "r2", "--bash", "ok")
    p = lb(fake, "runs")
    assert fake.requests[-1].path == "/v1/runs?limit=20"
    lines = p.stdout.decode().splitlines()
    assert lines[0].split()[:5] == ["STARTED", "SANDBOX", "LANGUAGE", "OUTCOME", "EXIT"]
    assert [ln.split()[2] for ln in lines[1:]] == ["r2", "r1", "r1"]  # "just now" is two words
    assert "failed" in lines[2]
    p = lb(fake, "runs", "r1", "--limit", "1")
    assert fake.requests[-1].path == "/v1/runs?limit=1&sandbox=r1"
    assert len(p.stdout.decode().splitlines()) == 2


def test_files_says_how_many_were_left_out(fake):
    fake.add("big")
    listing = {"files": [{"path": f"f{i:04d}", "type": "file", "size": i, "modified_at": None} for i in range(1000)],
               "more": 99000}
    fake.next_raw = (200, json.dumps(listing).encode(), "application/json")
    p = lb(fake, "files", "big")
    lines = p.stdout.decode().splitlines()
    assert p.returncode == 0 and len(lines) == 1 + 1000 + 1
    assert lines[1].split() == ["file", "0", "B", "-", "f0000"]
    assert lines[-1] == "… and 99000 more not shown"

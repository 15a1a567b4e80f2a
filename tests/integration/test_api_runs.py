"""Runs through lensboxd: the result object of docs/api.md, failing programs as 200s, the time and memory limits'
messages, output cut at Unicode characters (head of stdout, tail of stderr), invalid UTF-8, the ledger and metrics.
Through the Python client (clients/python) and through curl."""
import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from lensbox_testlib.lensboxd import Daemon  # noqa: E402

RESULT_KEYS = {"id", "sandbox", "language", "exit_code", "signal", "timed_out", "oom_killed", "pids_limited",
               "network_blocked", "duration_ms", "cpu_ms", "peak_memory_bytes", "stdout", "stdout_bytes",
               "stdout_truncated", "stderr", "stderr_bytes", "stderr_truncated", "sandbox_created", "sandbox_started",
               "recreated", "image_pulled", "message", "refused"}  # image_pull_ms too, only when it pulled


@pytest.fixture(scope="module")
def d():
    with Daemon() as daemon:
        yield daemon


def test_first_run_creates_and_starts_the_sandbox(d):
    n = d.name("first")
    r = d.ok_run(n, "print(6*7)")
    assert set(r) == RESULT_KEYS
    assert r["stdout"] == "42\n" and r["stdout_bytes"] == 3 and not r["stdout_truncated"]
    assert r["exit_code"] == 0 and r["signal"] == 0 and r["message"] is None
    assert r["sandbox_created"] is True and r["sandbox_started"] is True and r["recreated"] is None
    assert len(r["id"]) == 26 and r["sandbox"] == n and r["language"] == "python"
    r2 = d.ok_run(n, "print(1)")
    assert r2["sandbox_created"] is False and r2["sandbox_started"] is False
    assert r2["id"] > r["id"]


def test_through_the_python_client(d):
    c = d.client()
    n = d.name("client")
    res = c.run(n, "python", "import sys\nprint(open('in.txt').read().upper())\nsys.exit(3)",
                files={"in.txt": b"hello"})
    assert res.exit_code == 3 and res.stdout == "HELLO\n" and res.message == "exited with code 3"
    assert [e.path for e in c.files(n).files] == ["in.txt"]
    assert c.read_file(n, "in.txt") == b"hello"
    assert c.runs(n)[0].exit_code == 3


def test_through_curl(d):
    n = d.name("curl")
    code, body = d.curl("-X", "POST", "-H", "Content-Type: application/json", "-d",
                        json.dumps({"language": "bash", "source": "echo hi; echo oops >&2; exit 4"}),
                        f"http://lensbox/v1/sandboxes/{n}/runs")
    assert code == 200
    r = json.loads(body)
    assert (r["stdout"], r["stderr"], r["exit_code"]) == ("hi\n", "oops\n", 4)


def test_failing_program_is_a_200_with_a_traceback_line_number(d):
    r = d.ok_run(d.name("tb"), "x = 1\ny = 2\nraise ValueError('boom')\n")
    assert r["exit_code"] == 1
    assert "line 3" in r["stderr"] and "ValueError: boom" in r["stderr"]
    assert r["message"] == "exited with code 1"


def test_working_directory_home_and_user(d):
    r = d.ok_run(d.name("env"), 'echo "$PWD $HOME $(id -u)"; cat /proc/self/status | grep -c CapEff', "bash")
    assert r["stdout"].splitlines()[0] == "/sandbox /sandbox 1000"


def daemon_state(pid):
    """What a run's helper processes could change in the daemon if they leaked into it (they borrow its memory)."""
    with open(f"/proc/{pid}/status") as f:
        status = dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)
    keep = ("Uid", "Gid", "Groups", "CapEff", "CapPrm", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp",
            "Cpus_allowed_list")
    with open(f"/proc/{pid}/oom_score_adj") as f:
        oom = f.read().strip()
    with open(f"/proc/{pid}/cgroup") as f:
        cgroups = f.read()
    ns = {n: os.readlink(f"/proc/{pid}/ns/{n}") for n in ("user", "mnt", "pid", "net", "ipc", "uts", "cgroup")}
    return {k: status[k] for k in keep}, oom, cgroups, ns, os.readlink(f"/proc/{pid}/cwd")


def test_runs_leave_the_daemon_as_it_was(d):
    # The program is set up in processes that share the daemon's memory until their execve: none of what they
    # change (credentials, namespaces, cgroups, oom_score_adj, seccomp, cwd) may reach the daemon itself.
    n = d.name("state")
    d.ok_run(n, "print(0)")
    before = daemon_state(d.proc.pid)
    r = d.ok_run(n, "import os; print(open('/proc/self/oom_score_adj').read().strip(), "
                    "open('/proc/self/status').read().count('Seccomp:\t2'), sorted(os.sched_getaffinity(0)))")
    # the setup runs on the daemon's CPU; the program gets the sandbox's CPUs: one (cpu 1 by default) of the daemon's
    oom, seccomp, cpus = r["stdout"].split(" ", 2)
    assert (oom, seccomp) == ("1000", "1"), r["stdout"]
    cpus = json.loads(cpus)
    assert len(cpus) == 1 and set(cpus) <= os.sched_getaffinity(d.proc.pid), cpus
    for _ in range(5):
        d.ok_run(n, "import subprocess; subprocess.run(['true'])")
    after = daemon_state(d.proc.pid)
    assert after == before
    assert before[1] != "1000" and before[0]["Seccomp"] == "0" and before[0]["Uid"].split()[0] == "0"



def test_sandbox_init_has_every_cpu_of_the_daemon(d):
    # The init child starts on CPUs other than the starting thread's (runner/sandbox.c) and takes back the daemon's
    # whole affinity once released: pid 1 of each new sandbox has it.
    def cpu_list(cpus):
        return ",".join(str(c) for c in sorted(cpus))
    want = os.sched_getaffinity(d.proc.pid)
    for i in range(3):
        r = d.ok_run(d.name(f"initcpus{i}"), "import re\n"
                     "s = open('/proc/1/status').read()\n"
                     "print(re.search(r'Cpus_allowed_list:\\t(\\S+)', s).group(1))")
        listed = set()
        for part in r["stdout"].strip().split(","):
            a, _, b = part.partition("-")
            listed |= set(range(int(a), int(b or a) + 1))
        assert listed == want, (r["stdout"], cpu_list(want))

def test_time_limit_message(d):
    r = d.ok_run(d.name("slow"), "import time\nprint('started', flush=True)\ntime.sleep(30)", timeout_seconds=1)
    assert r["timed_out"] is True and r["exit_code"] is None and r["signal"] == 9
    assert r["message"] == "killed after 1 s: the time limit"
    assert r["stdout"] == "started\n"
    assert 900 <= r["duration_ms"] < 5000


def test_memory_limit_message(d):
    n = d.name("oom")
    r = d.ok_run(n, "b = bytearray(400 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1\nprint('survived')",
                 sandbox={"memory": "128Mi"})
    assert r["oom_killed"] is True and r["exit_code"] is None
    assert r["message"] == "out of memory: the limit is 128Mi"
    assert "survived" not in r["stdout"]
    # the sandbox is still usable afterwards
    assert d.ok_run(n, "print('again')")["stdout"] == "again\n"


def test_stdout_keeps_its_head_and_stderr_its_tail_in_characters(d):
    # 3-byte and 4-byte characters, so a byte cut would land inside one
    src = ("import sys\nsys.stdout.write('€' * 30 + '😀' * 30)\nsys.stderr.write('😀' * 30 + '€' * 25 + 'END')\n")
    r = d.ok_run(d.name("utf8"), src, output_limit=20)
    assert r["stdout"] == "€" * 20 and r["stdout_truncated"] is True
    assert r["stdout_bytes"] == 30 * 3 + 30 * 4
    assert r["stderr"] == "€" * 17 + "END" and r["stderr_truncated"] is True
    assert r["stderr_bytes"] == 30 * 4 + 25 * 3 + 3


def test_exactly_the_limit_is_not_truncated(d):
    r = d.ok_run(d.name("utf8"), "print('é' * 9, end='')", output_limit=9)
    assert r["stdout"] == "é" * 9 and r["stdout_truncated"] is False


def test_invalid_utf8_is_replaced(d):
    r = d.ok_run(d.name("bytes"), "import sys\nsys.stdout.buffer.write(b'a\\xff\\xfeb\\xc3')\n"
                                  "sys.stderr.buffer.write(b'\\x00\\xed\\xa0\\x80z')")
    assert r["stdout"] == "a\ufffd\ufffdb\ufffd"
    assert r["stderr"].startswith("\x00") and r["stderr"].endswith("z") and "\ufffd" in r["stderr"]


def test_large_output_is_bounded(d):
    r = d.ok_run(d.name("flood"), "import sys\nfor i in range(200000): sys.stdout.write('x' * 99 + '\\n')",
                 output_limit=1000)
    assert len(r["stdout"]) == 1000 and r["stdout_truncated"] is True
    assert r["stdout_bytes"] == 200000 * 100


def test_processes_left_behind_are_killed_when_the_run_ends(d):
    n = d.name("daemonize")
    d.ok_run(n, "(sleep 300 &) ; nohup sleep 301 >/dev/null 2>&1 & echo started", "bash")
    r = d.ok_run(n, "import glob\nprint(sorted(open(p).read().strip() for p in glob.glob('/proc/[0-9]*/comm')))")
    assert "sleep" not in r["stdout"], r["stdout"]
    assert "python3" in r["stdout"]


def test_signal_message(d):
    r = d.ok_run(d.name("sig"), "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)")
    assert r["exit_code"] is None and r["signal"] == 11
    assert r["message"] == "killed by signal 11 (SIGSEGV)"


def test_ledger_and_metrics(d):
    n = d.name("ledger")
    ids = [d.ok_run(n, f"print({i})")["id"] for i in range(3)]
    d.ok_run(n, "exit 2", "bash")
    status, b = d.request("GET", f"/v1/runs?sandbox={n}&limit=10")
    assert status == 200
    runs = b["runs"]
    assert [r["id"] for r in runs[1:]] == ids[::-1]
    assert runs[0]["language"] == "bash" and runs[0]["exit_code"] == 2 and runs[0]["outcome"] == "failed"
    assert runs[1]["outcome"] == "ok" and runs[1]["stdout_bytes"] == 2
    status, one = d.request("GET", f"/v1/runs/{ids[0]}")
    assert status == 200 and one["id"] == ids[0] and one["sandbox"] == n
    assert d.request("GET", f"/v1/runs?sandbox={n}&limit=1")[1]["runs"][0]["id"] == runs[0]["id"]
    status, _, text = d.raw("GET", "/metrics")
    text = text.decode()
    assert status == 200
    line = [x for x in text.splitlines() if x.startswith('lensbox_runs_total{language="bash",outcome="failed"}')]
    assert line and int(line[0].split()[-1]) >= 1
    assert "lensbox_run_duration_seconds_bucket{le=\"+Inf\"}" in text
    assert "lensbox_timeouts_total" in text and "lensbox_oom_kills_total" in text
    assert 'lensbox_sandboxes{state="running"}' in text


def test_sandbox_object(d):
    n = d.name("obj")
    d.ok_run(n, "open('f', 'w').write('x' * 100000)")
    status, sb = d.request("GET", f"/v1/sandboxes/{n}")
    assert status == 200
    assert sb["state"] == "running" and sb["runs"] == 1
    assert sb["spec"] == {"image": "python:3.12-slim", "network": "off", "cpu": "1", "memory": "512Mi",
                          "disk": "1Gi", "idle_minutes": 15, "keep_hours": 24}
    assert sb["disk_used_bytes"] > 100000
    assert d.uid_start <= sb["host_uid"] < d.uid_start + 10000
    for k in ("created_at", "last_used_at", "stops_at", "deletes_at"):
        assert sb[k].endswith("Z"), k
    names = [x["name"] for x in d.request("GET", "/v1/sandboxes")[1]["sandboxes"]]
    assert n in names and names == sorted(names)


def test_nothing_leaks_after_delete(d):
    status, b = d.request("GET", "/v1/sandboxes")
    for sb in b["sandboxes"]:
        assert d.request("DELETE", "/v1/sandboxes/" + sb["name"])[0] == 200
    assert d.request("GET", "/v1/sandboxes")[1] == {"sandboxes": []}
    assert d.leaks() == []

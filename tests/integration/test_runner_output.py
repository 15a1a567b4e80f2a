"""Output capture: the first N bytes of stdout and the last N of stderr are kept, totals counted, the JSON is valid
UTF-8 whatever the program printed, and a flood does not grow the caller's memory."""

import json
import os
import resource
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from lensbox_testlib import runner as rl  # noqa: E402
from lensbox_testlib.runner import RunnerEnv  # noqa: E402


@pytest.fixture(scope="module")
def env():
    e = RunnerEnv()
    yield e
    assert e.close() == [], "sandboxes left mounts, loop devices or cgroups behind"


def test_stdout_head_and_stderr_tail(env):
    code = (
        "import sys\n"
        "sys.stdout.write(''.join(f'{i:04d}\\n' for i in range(1000)))\n"
        "sys.stderr.write(''.join(f'{i:04d}\\n' for i in range(1000)))\n"
    )
    r = env.python(code, flags=["--output-limit", "1Ki"])
    assert r["stdout_bytes"] == 5000 and r["stderr_bytes"] == 5000
    assert r["stdout_truncated"] and r["stderr_truncated"]
    expect = "".join(f"{i:04d}\n" for i in range(1000))
    assert r["stdout"] == expect[:1024]
    assert r["stderr"] == expect[-1024:]


def test_short_output_not_truncated(env):
    r = env.python("print('hello')", flags=["--output-limit", "1Ki"])
    assert r["stdout"] == "hello\n" and not r["stdout_truncated"] and r["stdout_bytes"] == 6


def test_invalid_utf8_is_repaired(env):
    code = ("import sys; sys.stdout.buffer.write(b'ok \\xff\\xfe caf\\xc3\\xa9 \\xe2\\x82'); "
            "sys.stderr.buffer.write(b'\\x00\\xc0')")
    r = env.python(code)
    # lib/utf8.c replaces each byte of an invalid or truncated sequence with U+FFFD.
    head = "ok \ufffd\ufffd caf\u00e9 "
    assert r["stdout"].startswith(head) and set(r["stdout"][len(head):]) == {"\ufffd"}
    assert r["stdout_bytes"] == 14
    assert r["stderr"].startswith("\u0000") and "\ufffd" in r["stderr"]


def test_flood_does_not_grow_the_caller():
    # A fresh process so ru_maxrss measures only the runner tool (RUSAGE_CHILDREN of this helper).
    e = RunnerEnv()
    try:
        helper = (
            "import json, resource, subprocess, sys\n"
            "cmd = json.loads(sys.argv[1])\n"
            "p = subprocess.run(cmd, stdout=subprocess.PIPE)\n"
            "r = json.loads(p.stdout)\n"
            "assert not r['timed_out'], r\n"
            "print(json.dumps([r['stdout_bytes'], len(r['stdout']), r['stderr_bytes'],"
            " resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss]))\n"
        )
        flood = ("import os\nb = b'y' * (1 << 20)\n"
                 "for _ in range(1024): os.write(1, b); os.write(2, b[:4096])\n")
        cmd = [rl.runner_bin(), "--rootfs", rl.rootfs(), "--storage", e.storage(), "--policy", rl.POLICY_DIR,
               "--run-dir", e.run_dir, "--name", "flood", "--output-limit", "64Ki", "--timeout", "600", "--",
               "python3", "-c", flood]  # 600 s: under QEMU TCG (the VM lane) 1 GiB takes over a minute
        e.names.append("flood")
        out = subprocess.run([sys.executable, "-c", helper, json.dumps(cmd)], stdout=subprocess.PIPE, check=True,
                             timeout=900).stdout
        total, kept, err_total, maxrss_kib = json.loads(out)
        assert total == 1 << 30 and kept == 64 << 10 and err_total == 4096 * 1024
        assert maxrss_kib < 32 * 1024, f"the runner grew to {maxrss_kib} KiB on a 1 GiB flood"
    finally:
        assert e.close() == []

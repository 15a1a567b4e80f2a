"""cgroup limits: memory (OOM reported, swap off), pids (the limit reported, the sandbox usable afterwards) and cpu
(the quota holds the program to its share, within 20%)."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from lensbox_testlib.runner import RunnerEnv  # noqa: E402


@pytest.fixture(scope="module")
def env():
    e = RunnerEnv()
    yield e
    assert e.close() == [], "sandboxes left mounts, loop devices or cgroups behind"


def test_memory_bomb_is_oom_killed_and_reported(env):
    code = "x = []\nwhile True:\n    x.append(bytearray(16 << 20))\n"
    r = env.python(code, flags=["--memory", "128Mi"])
    assert r["oom_killed"] is True
    assert r["signal"] == 9 and r["exit_code"] == -1
    # The limit is hard but the kernel may overshoot it by a few pages while it reclaims and kills (seen on v2).
    assert 64 << 20 <= r["peak_memory_bytes"] <= (128 << 20) * 1.05


def test_normal_run_reports_no_oom_and_a_peak(env):
    r = env.python("x = bytearray(50 << 20); print(len(x))", flags=["--memory", "256Mi"])
    assert r["oom_killed"] is False and r["exit_code"] == 0
    assert 50 << 20 <= r["peak_memory_bytes"] < 256 << 20


def test_fork_bomb_hits_pids_limit_and_sandbox_stays_usable(env):
    code = (
        "import errno, os, time\n"
        "kids, err = 0, None\n"
        "for _ in range(100):\n"
        "    try:\n"
        "        pid = os.fork()\n"
        "    except OSError as e:\n"
        "        err = errno.errorcode[e.errno]; break\n"
        "    if pid == 0:\n"
        "        time.sleep(30); os._exit(0)\n"
        "    kids += 1\n"
        "print(err, kids)\n"
    )
    r = env.python(code, flags=["--pids", "20", "--repeat", "2"])
    err, kids = r["stdout"].split()
    assert err == "EAGAIN" and int(kids) < 20
    assert r["pids_limited"] is True
    assert r["exit_code"] == 0  # the second run worked: the first run's processes were all killed


def test_cpu_limit_holds_the_share(env):
    # Two busy processes for 2 s of wall time under a 0.5-core quota, measured inside over the busy window only
    # (interpreter start-up excluded): their CPU time adds up to ~1 s. At most 20% above the quota; at least 80%
    # of it, or of what an unthrottled sandbox got just before when the shared 2-core host is busy.
    code = (
        "import multiprocessing as mp, time\n"
        "def spin(q):\n"
        "    c0 = time.process_time(); end = time.monotonic() + 2.0\n"
        "    while time.monotonic() < end: pass\n"
        "    q.put(time.process_time() - c0)\n"
        "q = mp.Queue()\n"
        "ps = [mp.Process(target=spin, args=(q,)) for _ in range(2)]\n"
        "[p.start() for p in ps]\n"
        "print(sum(q.get() for _ in ps) / 2.0)\n"
        "[p.join() for p in ps]\n"
    )
    # The quota must never be exceeded; that it is not stricter than asked is a lower bound that a shared host under
    # load can push down for a moment, so it must hold in one of three interleaved tries (the upper one in all).
    tries = []
    for _ in range(3):
        base = env.python(code, flags=["--cpu", "2"])  # what the shared host gives an unthrottled sandbox right now
        r = env.python(code, flags=["--cpu", "0.5"])
        assert r["exit_code"] == 0 and base["exit_code"] == 0, (r, base)
        share, free = float(r["stdout"]), float(base["stdout"])
        assert share <= 0.6, f"cpu share {share:.2f} of one core under a 0.5 quota"
        tries.append((share, free))
        if share >= 0.8 * min(0.5, free):
            break
    else:
        raise AssertionError(f"cpu share under a 0.5 quota below 80% of it (or of an unthrottled run) three times: "
                             f"(share, unthrottled) = {tries}")
    # The run's cgroup accounting saw at least the work the program measured (it also counts interpreter start-up;
    # no upper bound: under QEMU TCG, the VM lane, the guest's clocks disagree).
    assert r["cpu_ms"] / 1000 >= 0.8 * 2 * share

"""A run's whole process tree dies at its end or its time limit (v1: freezer + SIGKILL, v2: cgroup.kill), and the
result arrives when the main process exits even if something still holds the output pipe."""

import json
import os
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from lensbox_testlib.runner import RunnerEnv  # noqa: E402


@pytest.fixture(scope="module")
def env():
    e = RunnerEnv()
    yield e
    assert e.close() == [], "sandboxes left mounts, loop devices or cgroups behind"


DAEMON = (
    "import os, time\n"
    "if os.fork() == 0:\n"
    "    os.setsid()\n"
    "    if os.fork() == 0:\n"
    "        time.sleep(1000)\n"
    "    os._exit(0)\n"
    "os.wait()\n"
)


def test_result_arrives_while_a_grandchild_holds_the_pipe(env):
    t = time.monotonic()
    r = env.python(DAEMON + "print('main done')", flags=["--timeout", "30"])
    elapsed = time.monotonic() - t
    assert r["stdout"] == "main done\n" and r["exit_code"] == 0 and not r["timed_out"]
    assert elapsed < 10, f"the result took {elapsed:.1f}s: the daemon holding stdout delayed it"


def test_leftover_daemon_does_not_survive_into_the_next_run(env):
    code = (
        "import os\n"
        "if not os.path.exists('/sandbox/started'):\n"
        "    open('/sandbox/started', 'w').close()\n" + "".join("    " + line + "\n" for line in DAEMON.splitlines()) +
        "else:\n"
        "    print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()), os.getpid())\n"
    )
    r = env.python(code, flags=["--repeat", "2"])
    pids, me = r["stdout"].split("] ")
    pids = json.loads(pids + "]")
    assert pids == sorted([1, int(me)]), f"processes of the first run survived: {pids}"


def test_timeout_kills_a_double_forked_daemon(env):
    t = time.monotonic()
    r = env.python(DAEMON + "time.sleep(1000)", flags=["--timeout", "2"])
    elapsed = time.monotonic() - t
    assert r["timed_out"] and r["signal"] == 9 and r["exit_code"] == -1
    assert 1.9 <= r["wall_ms"] / 1000 < 5 and elapsed < 10


def test_timeout_kills_a_process_ignoring_sigterm(env):
    code = ("import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            "print('armed', flush=True)\ntime.sleep(1000)\n")
    r = env.python(code, flags=["--timeout", "3"])  # 3 s: python starts slowly in the VM lane
    assert r["timed_out"] and r["signal"] == 9
    assert r["stdout"] == "armed\n"

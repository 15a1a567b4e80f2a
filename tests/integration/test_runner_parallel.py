"""Sandboxes started, run and stopped at the same time do not interfere: each gets its own loop device, cgroup,
state directory and storage, every result is its own, and nothing is left behind."""

import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from lensbox_testlib.runner import RunnerEnv  # noqa: E402


@pytest.fixture(scope="module")
def env():
    e = RunnerEnv()
    yield e
    assert e.close() == [], "sandboxes left mounts, loop devices or cgroups behind"


def test_six_sandboxes_at_once(env):
    def one(i):
        st = env.storage(f"par{i}")
        code = (f"import os, socket; open('/sandbox/me', 'w').write('{i}'); "
                "print(socket.gethostname(), open('/sandbox/me').read())")
        return env.python(code, storage=st, name=f"par-{os.getpid()}-{i}", flags=["--uid", str(310000 + i)])

    with ThreadPoolExecutor(max_workers=6) as pool:
        results = list(pool.map(one, range(6)))
    for i, r in enumerate(results):
        assert r.rc == 0, r
        assert r["stdout"] == f"par-{os.getpid()}-{i} {i}\n"
        assert r["isolation"]["uid_map"] == f"0 {310000 + 131072 + i} 1\n1000 {310000 + i} 1\n65534 {310000 + 65536 + i} 1"


def test_same_storage_twice_at_once_is_refused(env):
    # One ext4 image mounted (or resized) twice would be corrupted: the second start must fail while the first runs,
    # after waiting 2 s in case the holder was only just stopping (the storage lock, runner/disk.c).
    st = env.storage("shared")
    name = f"holder-{os.getpid()}"
    marker = os.path.join(env.run_dir, "mnt", name, "started")
    with ThreadPoolExecutor(max_workers=2) as pool:
        first = pool.submit(env.python, "import time; open('/sandbox/started', 'w').close(); time.sleep(6); "
                            "print('first')", storage=st, keep=True, name=name)
        deadline = time.monotonic() + 60
        while not os.path.exists(marker) and time.monotonic() < deadline:  # the first one is running
            time.sleep(0.05)
        second = env.python("print('second')", storage=st, keep=True, flags=["--timeout", "5"])
        r1 = first.result()
    assert r1["stdout"] == "first\n"
    assert second.rc == 1 and "is in use by another sandbox" in second["error"], second


def test_a_second_sandbox_of_the_same_name_is_refused_and_the_first_unharmed(env):
    name = f"dup-{os.getpid()}"
    with ThreadPoolExecutor(max_workers=1) as pool:
        first = pool.submit(env.python, "import time; open('/sandbox/started', 'w').close(); time.sleep(4); "
                            "print('first alive')", name=name)
        marker = os.path.join(env.run_dir, "mnt", name, "started")
        deadline = time.monotonic() + 60
        while not os.path.exists(marker) and time.monotonic() < deadline:  # the first one is running
            time.sleep(0.05)
        second = env.python("print('second')", name=name)
        r1 = first.result()
    assert second.rc == 1 and f"a sandbox named {name} is running" in second["error"], second
    assert r1["stdout"] == "first alive\n" and r1["exit_code"] == 0, r1

"""Crash recovery and storage growth.

A runner killed with SIGKILL mid-run leaves a live sandbox (init, its program, mounts, loop device, cgroups);
lb_sandbox_cleanup (lensbox-runner --cleanup NAME) removes all of it from the name alone, and the storage then starts
again with its files. A larger disk limit grows the storage filesystem, keeping the files. --probe reports the host.
"""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from lensbox_testlib import runner as rl  # noqa: E402
from lensbox_testlib.runner import RunnerEnv  # noqa: E402


@pytest.fixture(scope="module")
def env():
    e = RunnerEnv()
    yield e
    assert e.close() == [], "sandboxes left mounts, loop devices or cgroups behind"


def host_pids_of_uid(uid):
    pids = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/status") as f:
                    if any(line.startswith("Uid:") and line.split()[1] == str(uid) for line in f):
                        pids.append(int(p))
            except OSError:
                pass
    return pids


def test_cleanup_after_the_runner_was_killed(env):
    name, st, uid = f"crash-{os.getpid()}", env.storage("crash"), 320001
    env.names.append(name)
    cmd = [rl.runner_bin(), "--rootfs", rl.rootfs(), "--storage", st, "--policy", rl.POLICY_DIR, "--run-dir",
           env.run_dir, "--name", name, "--uid", str(uid), "--keep", "--", "python3", "-c",
           "import os, time\nwith open('/sandbox/before-crash.tmp', 'w') as f: f.write('x')\n"
           "os.rename('/sandbox/before-crash.tmp', '/sandbox/before-crash'); time.sleep(600)"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    # The storage is mounted on the host at <run_dir>/mnt/<name>: wait until the program has written its file.
    marker = os.path.join(env.run_dir, "mnt", name, "before-crash")
    deadline = time.monotonic() + 30
    while not os.path.exists(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert os.path.exists(marker) and len(host_pids_of_uid(uid)) >= 2  # init and python
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert env.leftovers(), "the killed runner should have left its sandbox behind"

    out = subprocess.run([rl.runner_bin(), "--cleanup", name, "--run-dir", env.run_dir], stdout=subprocess.PIPE,
                         check=True, timeout=60).stdout
    assert json.loads(out) == {"cleaned": name}
    deadline = time.monotonic() + 5
    while (env.leftovers() or host_pids_of_uid(uid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert env.leftovers() == [] and host_pids_of_uid(uid) == []
    # Cleaning a sandbox that left nothing is fine too.
    subprocess.run([rl.runner_bin(), "--cleanup", name, "--run-dir", env.run_dir], stdout=subprocess.PIPE, check=True)
    r = env.python("print(open('/sandbox/before-crash').read())", storage=st, name=name, flags=["--uid", str(uid)])
    assert r["stdout"] == "x\n"


def test_a_larger_disk_limit_grows_the_storage(env):
    st = env.storage("grow")
    code = "import os; s = os.statvfs('/sandbox'); print(s.f_blocks * s.f_frsize >> 20)"
    r = env.python("open('/sandbox/kept', 'w').write('k'); " + code, storage=st, keep=True, flags=["--disk", "64Mi"])
    small = int(r["stdout"].split()[-1])
    r = env.python("print(open('/sandbox/kept').read()); " + code, storage=st, keep=True, flags=["--disk", "256Mi"])
    kept, big = r["stdout"].split()
    assert kept == "k" and 48 <= small <= 64 and 200 <= int(big) <= 256, r["stdout"]
    assert os.stat(os.path.join(st, "disk.img")).st_size == 256 << 20
    # A smaller limit later never shrinks it (that could lose files).
    r = env.python(code, storage=st, flags=["--disk", "64Mi"])
    assert int(r["stdout"]) == int(big)


def test_probe_reports_the_host():
    p = subprocess.run([rl.runner_bin(), "--probe", "--policy", rl.POLICY_DIR], stdout=subprocess.PIPE, timeout=60)
    facts = json.loads(p.stdout)
    assert p.returncode == 0 and facts["ready"] is True and facts["why_not"] == ""
    assert facts["kernel"] == os.uname().release
    assert facts["cgroup_version"] in ("v1", "v2") and facts["seccomp"] and facts["loop_devices"]
    ref = facts["refusals"]
    assert ref["syscall"] is True and ref["syscall_why_not"] == "", ref
    assert ref["filesystem"] is (ref["filesystem_why_not"] == ""), ref


def test_a_failed_start_leaves_nothing(env):
    # A hostname that cannot go into /etc/hosts is refused while the root is prepared, after the cgroup, a new
    # storage image and its mount were made: all of it is undone, and the storage this run created removed again.
    bad = env.run(["true"], storage=env.storage("never"), flags=["--hostname", "two words"])
    assert bad.rc == 1 and bad["error"].startswith("preparing the root filesystem: hostname must be"), bad
    assert not os.path.exists(env.storage("never"))
    assert env.leftovers() == []
    # A missing image is refused before anything is made.
    bad = env.run(["true"], storage=env.storage("never2"), flags=["--rootfs", "/nonexistent-rootfs"])
    assert bad.rc == 1 and bad["error"] == "image rootfs /nonexistent-rootfs: No such file or directory", bad
    assert not os.path.exists(env.storage("never2")) and env.leftovers() == []

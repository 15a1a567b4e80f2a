"""lensbox-runner on cgroup v2 and an older Landlock ABI (runs in the VM lane guest only, as root).

The host lane runs the runner on cgroup v1 controllers and Landlock ABI 7; these are the same limits and kills on
the design target, cgroup v2 (memory.max + memory.events, memory.peak, cpu.max, pids.max + pids.events,
cgroup.kill), and the Landlock contract at the guest's ABI: the shipped policy (min_abi 6) refuses to start and
says why; a test copy that allows a degraded level runs and reports the ABI it enforced; what ABI 2 still enforces
and what it cannot (the signal scope arrives with ABI 6).
Each test checks that its sandboxes left no mount, loop device or cgroup behind.
"""
import os
import re
import sys

import pytest

import vmfacts
from vmfacts import expected_abi

vmfacts.skip_unless_guest()

sys.path.insert(0, os.path.join(os.environ["LENSBOX_SOURCE_DIR"], "tests"))
from lensbox_testlib import runner  # noqa: E402

MiB = 1 << 20


def policy_min_abi(policy_dir):
    with open(os.path.join(policy_dir, "landlock.rules")) as f:
        return int(re.search(r"^min_abi\s+(\d+)", f.read(), re.M).group(1))


SHIPPED_POLICY = os.path.join(os.environ["LENSBOX_SOURCE_DIR"], "policy")


@pytest.fixture(scope="module")
def degraded_policy():
    """The test copy of policy/ whose Landlock rules accept the guest's ABI as a degraded level (made by the guest's
    pytest plugin, tests/vm/boot/vmlane_plugin.py); check it differs from the shipped one by that line only."""
    d = os.environ["LENSBOX_VM_POLICY_DIR"]
    with open(os.path.join(SHIPPED_POLICY, "landlock.rules")) as a, open(os.path.join(d, "landlock.rules")) as b:
        shipped, copy = a.read().splitlines(), b.read().splitlines()
    assert [line for line in copy if line not in shipped] == [f"degraded_min_abi {expected_abi()}"]
    return d


@pytest.fixture
def env(degraded_policy, monkeypatch):
    monkeypatch.setattr(runner, "POLICY_DIR", degraded_policy)
    e = runner.RunnerEnv()
    yield e
    assert e.close() == [], "sandboxes left mounts, loop devices or cgroups behind"


def ran(res):
    assert res.rc == 0, f"runner failed: {dict(res)} {res.tool_stderr}"
    return res


# -------------------------------------------------------------------------------------------------- Landlock


def test_shipped_policy_refuses_a_kernel_below_its_minimum(monkeypatch):
    monkeypatch.setattr(runner, "POLICY_DIR", SHIPPED_POLICY)
    e = runner.RunnerEnv()
    try:
        res = e.python("print(45)")
    finally:
        assert e.close() == []
    need = policy_min_abi(SHIPPED_POLICY)
    if expected_abi() < need:
        assert res.rc == 1
        assert res["error"] == f"starting sandbox: Landlock ABI {expected_abi()} is below the policy's minimum {need}"
    else:
        assert ran(res)["stdout"] == "45\n"
        assert res["isolation"]["landlock_abi"] == expected_abi()


def test_degraded_policy_runs_and_reports_the_abi_and_cgroup_v2(env):
    res = ran(env.python("print(sum(range(10)))"))
    assert res["stdout"] == "45\n"
    assert res["isolation"]["landlock_abi"] == expected_abi()
    assert res["isolation"]["cgroup_version"] == "v2"
    assert res["isolation"]["seccomp"]["mode"] == 2


PROBE_FS = """
import errno, os
for path in ("/proc/self/comm", "/sandbox/ok", "/tmp/ok"):
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT)
        os.close(fd)
        print(path, "ok")
    except OSError as e:
        print(path, errno.errorcode[e.errno])
"""


def test_abi2_still_confines_writes_to_the_granted_places(env):
    # /proc/self/comm is writable by its process on any mount; only Landlock (read-exec on /) refuses it.
    out = ran(env.python(PROBE_FS))["stdout"].split("\n")
    assert out[:3] == ["/proc/self/comm EACCES", "/sandbox/ok ok", "/tmp/ok ok"]


PROBE_TCP = """
import errno, socket
def attempt(what, f):
    s = socket.socket()
    try:
        f(s)
        print(what, "ok")
    except OSError as e:
        print(what, errno.errorcode[e.errno])
    return s
srv = attempt("bind", lambda s: (s.bind(("127.0.0.1", 8080)), s.listen()))
attempt("connect", lambda s: s.connect(("127.0.0.1", 8080)))
"""


def test_servers_on_the_own_loopback_at_any_abi(env):
    # The policy hands Landlock no TCP rule at any ABI: a program binds and connects to itself inside the sandbox's
    # own network namespace (tier "off": loopback only), as on the host lane; the netns and the host's nft rules,
    # not Landlock, are what keep a sandbox off the network.
    out = ran(env.python(PROBE_TCP))["stdout"].split("\n")
    assert out[:2] == ["bind ok", "connect ok"]


def test_signal_scope_exists_only_from_abi_6(env):
    # The sandbox's init (pid 1) runs outside the run's Landlock domain: ABI 6 scopes refuse signalling it (EPERM,
    # as on the host lane); before ABI 6 nothing but the uid check stands between them. Signal 0 only probes.
    code = "import errno, os\ntry:\n    os.kill(1, 0)\n    print('ok')\nexcept OSError as e:\n    print(errno.errorcode[e.errno])"
    out = ran(env.python(code))["stdout"]
    assert out == ("EPERM\n" if expected_abi() >= 6 else "ok\n")


# -------------------------------------------------------------------------------------------------- cgroup v2


def test_memory_limit_oom_is_reported_and_peak_stays_under_it(env):
    res = ran(env.python("chunks = []\nwhile True:\n    chunks.append(bytearray(8 << 20))", flags=["--memory", "64Mi"]))
    assert res["oom_killed"] is True
    assert res["signal"] == 9
    # The kernel lets a task it is killing charge past memory.max (so it can exit): allow that, not more.
    assert 32 * MiB < res["peak_memory_bytes"] <= 66 * MiB


def test_memory_peak_measures_the_run(env):
    res = ran(env.python("b = bytearray(100 << 20)\nb[::4096] = b'x' * len(b[::4096])\nprint(len(b))",
                         flags=["--memory", "512Mi"]))
    assert res["stdout"] == f"{100 << 20}\n"
    assert res["oom_killed"] is False
    assert 100 * MiB <= res["peak_memory_bytes"] < 200 * MiB


PEAK_PER_RUN = """
import os
if not os.path.exists("/sandbox/first-done"):
    b = bytearray(150 << 20)
    b[::4096] = b"x" * len(b[::4096])
    open("/sandbox/first-done", "w").close()
print("ok")
"""


def test_memory_peak_is_per_run_not_per_sandbox(env):
    # The second run allocates nothing; its peak must not be the first run's 150 MiB.
    res = ran(env.python(PEAK_PER_RUN, flags=["--memory", "512Mi", "--repeat", "2"]))
    assert res["stdout"] == "ok\n"
    assert res["peak_memory_bytes"] < 64 * MiB, f"peak {res['peak_memory_bytes']} carries the previous run's"


CPU_BURN = """
import os, time
pids = []
for _ in range(2):
    pid = os.fork()
    if pid == 0:
        end = time.monotonic() + 3
        while time.monotonic() < end:
            pass
        os._exit(0)
    pids.append(pid)
for p in pids:
    os.waitpid(p, 0)
"""


def test_cpu_limit_from_cpu_max(env):
    # Two busy processes, limit half a core: the run's CPU time over its wall time is 0.5 within 20%.
    res = ran(env.python(CPU_BURN, flags=["--cpu", "0.5"]))
    share = res["cpu_ms"] / res["wall_ms"]
    assert 0.4 <= share <= 0.6, f"cpu {res['cpu_ms']} ms over wall {res['wall_ms']} ms"


FORK_BOMB = """
import errno, os, signal, time
children, refusal = [], None
for _ in range(100):
    try:
        pid = os.fork()
    except OSError as e:
        refusal = errno.errorcode[e.errno]
        break
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    children.append(pid)
for pid in children:
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
pid = os.fork()  # the sandbox is usable again once the bomb is gone
if pid == 0:
    os._exit(7)
print(len(children), refusal, os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""


def test_pids_limit_refuses_forks_and_is_reported(env):
    res = ran(env.python(FORK_BOMB, flags=["--pids", "16"]))
    forked, refusal, after = res["stdout"].split()
    assert refusal == "EAGAIN"
    assert 0 < int(forked) < 16
    assert after == "7"
    assert res["pids_limited"] is True


DAEMON_THEN_HANG = """
import os, signal, time
if os.path.exists("/sandbox/heartbeat"):
    # Second run: the first run's daemon must be dead, its heartbeat no longer growing.
    a = os.path.getsize("/sandbox/heartbeat"); time.sleep(1.5); b = os.path.getsize("/sandbox/heartbeat")
    print("grew" if b > a else "still")
else:
    open("/sandbox/heartbeat", "w").close()
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            while True:
                with open("/sandbox/heartbeat", "a") as f:
                    f.write(".")
                time.sleep(0.1)
        os._exit(0)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(60)
"""


def test_timeout_kills_the_run_and_its_double_forked_daemon(env):
    # --repeat 2 keeps the sandbox between the runs: the kill at the time limit is the run's (cgroup.kill of the
    # run's cgroup), not the sandbox's stop.
    res = ran(env.python(DAEMON_THEN_HANG, flags=["--timeout", "3", "--repeat", "2"]))
    assert res["stdout"] == "still\n"
    assert res["timed_out"] is False  # the result is the second run's


def test_timeout_is_reported(env):
    res = ran(env.python("import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(60)",
                         flags=["--timeout", "2"]))
    assert res["timed_out"] is True
    assert res["signal"] == 9
    assert 2000 <= res["wall_ms"] < 10000


DAEMON_AND_EXIT = """
import os, sys, time
if os.path.exists("/sandbox/heartbeat"):
    a = os.path.getsize("/sandbox/heartbeat"); time.sleep(1.5); b = os.path.getsize("/sandbox/heartbeat")
    print("grew" if b > a else "still")
else:
    open("/sandbox/heartbeat", "w").close()
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:  # keeps stdout open: the result must not wait for it
            while True:
                with open("/sandbox/heartbeat", "a") as f:
                    f.write(".")
                time.sleep(0.1)
        os._exit(0)
    print("main done")
"""


def test_main_exit_kills_a_daemon_that_holds_the_output_pipe(env):
    res = ran(env.python(DAEMON_AND_EXIT, flags=["--timeout", "30", "--repeat", "2"]))
    assert res["stdout"] == "still\n"
    first = res["timing_us"]["exec"][0]
    assert first < 10_000_000, f"first run took {first} us: the result waited for the daemon"

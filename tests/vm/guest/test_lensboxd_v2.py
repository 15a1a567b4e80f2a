"""lensboxd on cgroup v2 started the way systemd starts it, and on a kernel below the policy's Landlock minimum
(runs in the VM lane guest only, as root).

- With the shipped policy (min_abi 6) on 6.1 (ABI 2), lensboxd starts but refuses sandboxes: /v1/health says
  can_run false and why, and a run answers 503 with the same reason.
- With the lane's test copy of the policy (degraded_min_abi = the kernel's ABI), started as systemd starts the
  Delegate=yes unit (supervisor/lensboxd.service.in): its process placed in lensbox.service (marked
  trusted.delegate=1) before exec. lensboxd moves itself into lensbox.service/daemon, creates each sandbox's cgroup
  under lensbox.service/sandboxes with the policy's limits, removes it at idle stop, and after a crash (SIGKILL,
  then what systemd's KillMode=mixed does: kill what is left in the unit and remove its emptied cgroups) the next
  start reconciles: nothing leaks and the files are still there.
"""
import os
import re
import signal
import sys

import pytest

import vmfacts
from vmfacts import expected_abi

vmfacts.skip_unless_guest()

sys.path.insert(0, os.path.join(os.environ["LENSBOX_SOURCE_DIR"], "tests"))
from lensbox_testlib.lensboxd import Daemon, wait_for  # noqa: E402

CG = "/sys/fs/cgroup"
UNIT = os.environ["LENSBOX_VM_SYSTEMD_UNIT"]
SHIPPED_POLICY = os.path.join(os.environ["LENSBOX_SOURCE_DIR"], "policy")


def read(path):
    with open(path) as f:
        return f.read().strip()


def state(d, name):
    status, body = d.request("GET", f"/v1/sandboxes/{name}")
    return body["state"] if status == 200 else status


class ShippedPolicyDaemon(Daemon):
    """lensboxd with the policy as shipped (the lane's plugin otherwise passes the degraded test copy)."""

    def argv(self):
        test_copy = os.environ["LENSBOX_VM_POLICY_DIR"]
        return [SHIPPED_POLICY if a == test_copy else a for a in super().argv()]


class UnitDaemon(Daemon):
    """lensboxd started like systemd starts lensboxd.service: into the unit's cgroup, then exec."""

    def argv(self):
        return ["/bin/sh", "-c", f'echo $$ >{UNIT}/cgroup.procs && exec "$@"', "lensboxd", *super().argv()]


def systemd_cleans_up_the_unit():
    """What systemd does once the unit's main process is gone (KillMode=mixed after a crash, or after an orderly
    stop): SIGKILL whatever is left in the unit, then remove the emptied cgroups below it, so the next start
    begins with a fresh unit cgroup."""
    with open(f"{UNIT}/cgroup.kill", "w") as f:
        f.write("1")
    assert wait_for(lambda: read(f"{UNIT}/cgroup.events").find("populated 0") >= 0, 10)
    for dirpath, dirnames, _ in sorted(os.walk(UNIT), key=lambda w: -w[0].count("/")):
        if dirpath != UNIT:
            os.rmdir(dirpath)
    enabled = read(f"{UNIT}/cgroup.subtree_control").split()
    if enabled:
        with open(f"{UNIT}/cgroup.subtree_control", "w") as f:
            f.write(" ".join("-" + c for c in enabled))


@pytest.fixture
def unit():
    assert not [e for e in os.listdir(UNIT) if os.path.isdir(os.path.join(UNIT, e))], "the unit is not fresh"
    assert read(f"{UNIT}/cgroup.procs") == ""
    yield
    systemd_cleans_up_the_unit()


def test_health_with_the_shipped_policy_says_whether_and_why_not():
    need = int(re.search(r"^min_abi\s+(\d+)", open(f"{SHIPPED_POLICY}/landlock.rules").read(), re.M).group(1))
    with ShippedPolicyDaemon() as d:
        status, health = d.request("GET", "/v1/health")
        assert status == 200
        assert health["host"]["landlock_abi"] == expected_abi()
        assert health["host"]["cgroup"] == "v2"
        if expected_abi() >= need:  # the backports lane's 6.12: the shipped policy runs as is
            assert (health["can_run"], health["why_not"]) == (True, None), health
            r = d.ok_run(d.name("shipped"), "print(45)")
            assert r["stdout"] == "45\n"
        else:  # 6.1
            reason = f"Landlock ABI {expected_abi()} is below the policy's minimum {need}"
            assert (health["can_run"], health["why_not"]) == (False, reason), health
            status, body = d.run(d.name("refused"), "print(1)")
            assert status == 503
            assert body["error"]["code"] == "host_unavailable"
            assert reason in body["error"]["message"]
        assert d.leaks() == []


def test_delegated_unit_sandbox_cgroups_limits_and_idle_stop(unit):
    with UnitDaemon(settings={"idle_minutes": "3s"}) as d:
        status, health = d.request("GET", "/v1/health")
        assert health["can_run"] is True, health
        assert (health["host"]["cgroup"], health["host"]["landlock_abi"]) == ("v2", expected_abi())
        assert read(f"/proc/{d.proc.pid}/cgroup") == "0::/lensbox.service"  # where systemd put it

        n = d.name("unit")
        r = d.ok_run(n, "open('kept.txt', 'w').write('kept'); print(open('/proc/self/cgroup').read().strip())")
        assert "lensbox" not in r["stdout"]  # the cgroup namespace hides everything above the sandbox
        # Before its first sandbox cgroup, the daemon moved itself into the unit's leaf and enabled the
        # controllers for the sandboxes' cgroups (a v2 unit with children may hold no processes itself).
        assert read(f"/proc/{d.proc.pid}/cgroup") == "0::/lensbox.service/daemon"
        assert read(f"{UNIT}/cgroup.procs") == ""
        assert {"memory", "cpu", "pids"} <= set(read(f"{UNIT}/cgroup.subtree_control").split())
        sb = f"{UNIT}/sandboxes/{d.runner_key(n)}"  # the runner names it after the host uid
        assert os.path.isdir(sb), os.listdir(f"{UNIT}/sandboxes")
        assert read(f"{sb}/memory.max") == str(512 << 20)  # policy/limits.conf defaults
        assert read(f"{sb}/memory.swap.max") == "0"
        assert read(f"{sb}/pids.max") == "256"
        assert read(f"{sb}/cpu.max") == "100000 100000"
        assert read(f"{sb}/init/cgroup.procs") != ""  # the sandbox's init lives in its leaf

        assert wait_for(lambda: state(d, n) == "stopped", 15), "not stopped after its idle time"
        assert not os.path.exists(sb), "idle stop left the sandbox's cgroup"
        assert d.leaks() == []
        assert d.ok_run(n, "print(open('kept.txt').read())")["stdout"] == "kept\n"


def test_delegated_unit_crash_then_restart_reconciles(unit):
    d = UnitDaemon()
    try:
        n = d.name("crash")
        d.ok_run(n, "open('a.txt', 'w').write('one')")
        key = d.runner_key(n)
        d.proc.send_signal(signal.SIGKILL)
        d.proc.wait()
        assert os.path.isdir(f"{UNIT}/sandboxes/{key}"), "the sandbox should outlive the daemon's SIGKILL"
        systemd_cleans_up_the_unit()
        assert d.leaks(settle=0), "the mounts and loop device are left for reconciliation to find"
        d.start()
        assert d.leaks() == []
        assert state(d, n) == "stopped"
        assert d.ok_run(n, "print(open('a.txt').read())")["stdout"] == "one\n"
        assert d.stop() == 0
        assert d.leaks() == []
        assert [e for e in os.listdir(f"{UNIT}/sandboxes") if os.path.isdir(f"{UNIT}/sandboxes/{e}")] == []
    finally:
        d.cleanup()

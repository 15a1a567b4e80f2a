"""Attacks on the namespaces: no new namespaces from inside, no way into another one, nothing of the host or of
another sandbox visible. Cross-sandbox attacks start two sandboxes at once (two lensbox-runner processes)."""

import socket
import time

import pytest

from lensbox_testlib.attack import IN_PROBE, refused, succeeded

ATTACKS = [
    ("unshare_user", ["unshare", "user"], "EPERM"),
    ("unshare_mnt", ["unshare", "mnt"], "EPERM"),
    ("unshare_net", ["unshare", "net"], "EPERM"),
    ("unshare_pid", ["unshare", "pid"], "EPERM"),
    ("unshare_time", ["unshare", "time"], "EPERM"),
    ("clone_newuser", ["clone", "user"], "EPERM"),
    ("clone_newpid", ["clone", "pid"], "EPERM"),
    ("clone_newnet_newns", ["clone", "net,mnt"], "EPERM"),
    ("clone_newcgroup", ["clone", "cgroup"], "EPERM"),
    ("clone3_newuser", ["clone3", "user"], "ENOSYS"),
    ("setns_own_mnt", ["setns", "/proc/self/ns/mnt"], "EPERM"),
    ("setns_own_user", ["setns", "/proc/self/ns/user"], "EPERM"),
    ("sethostname", ["sethostname", "pwned"], "EPERM"),
    # /proc/1 is the sandbox's init, another (more privileged) process: its namespace files stay closed.
    ("open_init_ns", ["open", "/proc/1/ns/user"], "EACCES"),
]


@pytest.fixture(scope="module")
def batch(lab):
    return lab.script([a[1] for a in ATTACKS] + [["status"], ["ps"], ["read", "/proc/self/cgroup"],
                                                  ["ls", "/sys"], ["ls", "/sys/devices/system/cpu"],
                                                  ["ls", "/sys/devices/system"], ["ls", "/sys/devices"]])


@pytest.mark.parametrize("i", range(len(ATTACKS)), ids=[a[0] for a in ATTACKS])
def test_denied(batch, i):
    outs, res = batch
    refused(outs[i], ATTACKS[i][2], res)


def test_own_hostname_and_pid_namespace(batch):
    outs, res = batch
    status, ps = outs[len(ATTACKS)], outs[len(ATTACKS) + 1]
    succeeded(status, res)
    assert status["hostname"] != socket.gethostname(), status
    # One level of pid namespace seen from inside: NSpid has a single small number.
    assert len(status["NSpid"].split()) == 1 and int(status["NSpid"]) < 100, status
    succeeded(ps, res)
    # Only the sandbox's own processes: its init (pid 1), this run's shell and the probe. Nothing of the host.
    others = [p for p in ps["pids"] if p["pid"] != 1]
    assert {p["comm"] for p in others} <= {"sh", "lensbox-probe"}, ps
    assert all(p["pid"] < 100 for p in ps["pids"]), ps


def test_cgroup_namespace_hides_host_path(batch):
    outs, res = batch
    cg = outs[len(ATTACKS) + 2]
    succeeded(cg, res)
    for line in cg["data"].splitlines():
        assert line.endswith(":/"), f"cgroup path of the host visible: {line!r}"


def test_sys_holds_only_the_cpu_list(batch):
    """/sys is no sysfs: the skeleton's three read-only files that list the sandbox's CPUs (runner/cpus.c), nothing
    of the kernel's objects."""
    outs, res = batch
    listed = outs[len(ATTACKS) + 3:len(ATTACKS) + 7]
    for o in listed:
        succeeded(o, res)
    assert [sorted(o["entries"]) for o in listed] == [["devices"], ["online", "possible", "present"], ["cpu"],
                                                      ["system"]], listed


def _wait_for_pids(lab, uid, timeout=10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pids = lab.host_pids_of_uid(uid)
        if pids:
            return pids
        time.sleep(0.05)
    raise AssertionError(f"no process of host uid {uid} appeared")


def test_cross_sandbox_cannot_see_signal_or_trace(lab):
    """Sandbox A sleeps; sandbox B tries to find it, signal it and trace it by its host pid."""
    a = lab.start([IN_PROBE, "sleep", "4"], timeout=30)
    try:
        victim = max(_wait_for_pids(lab, a.lab_uid))
        outs, res = lab.script([["ps"], ["kill", victim, 9], ["ptrace-attach", victim],
                                ["process_vm_readv", victim, "0x400000"], ["pidfd_open", victim],
                                ["ls", f"/proc/{victim}/root/sandbox"]])
        ps, kill, trace, pvm, pidfd, root = outs
        refused(root, "ENOENT", res)     # A's files through /proc/<pid>/root: no such pid here
        succeeded(ps, res)
        assert victim not in [int(p["pid"]) for p in ps["pids"]], ps
        refused(kill, "ESRCH", res)      # that pid does not exist in B's pid namespace
        refused(trace, "EPERM", res)     # seccomp, before any pid lookup
        refused(pvm, "EPERM", res)
        refused(pidfd, "ESRCH", res)
        assert victim in lab.host_pids_of_uid(a.lab_uid), "A's process died: B reached it"
    finally:
        ra = lab.wait(a)  # never kill the runner itself: it would leave its sandbox behind
    assert ra["exit_code"] == 0 and ra["signal"] == 0, ra.describe()


def test_cross_sandbox_abstract_unix_socket(lab):
    """A listens on an abstract Unix socket; B connecting to the same name reaches nothing (own net namespace)."""
    a = lab.start([IN_PROBE, "abstract-listen", "lensbox-sec", "3"], timeout=30)
    try:
        _wait_for_pids(lab, a.lab_uid)
        time.sleep(0.2)
        p, res = lab.probe("abstract-connect", "lensbox-sec")
        refused(p, "ECONNREFUSED", res)
    finally:
        ra = lab.wait(a)
    assert ra["signal"] == 14, ra.describe()  # the listener ran until its own alarm (SIGALRM)
    assert '"abstract-listen","ok":true' in ra["stdout"], ra.describe()


def test_two_sandboxes_have_distinct_host_uids(lab):
    a = lab.start([IN_PROBE, "sleep", "3"], timeout=30)
    b = lab.start([IN_PROBE, "sleep", "3"], timeout=30)
    ra, rb = lab.wait(a), lab.wait(b)
    assert ra["isolation"]["uid_map"] != rb["isolation"]["uid_map"], (ra["isolation"], rb["isolation"])
    assert ra["exit_code"] == 0 and rb["exit_code"] == 0

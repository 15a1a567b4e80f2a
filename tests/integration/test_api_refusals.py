"""What the sandbox refused, in a run's result (`refused`, and the `message` when a refusal likely explains a failure)
and in /v1/health (which kinds this host can count). docs/api.md is the contract.

Refused system calls are counted on any host with seccomp user notification (Linux 5.0). Landlock's refusals
(file writes outside /sandbox and /tmp, TCP ports a tier forbids) are counted only where the kernel's audit is on,
which lensbox never turns on itself; the tests marked `audit` turn it on for their own duration and restore it
(tests/lensbox_testlib/audit.py), skipping when the host has no audit or no Landlock ABI 7. A write to /usr meets the
read-only root first (EROFS, before Landlock looks): no kernel facility reports that, and the message says so from
the program's own error output. Forbidden connects of the network tiers are test_daemon_network_upkeep.py's.
"""
import os
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from lensbox_testlib import audit  # noqa: E402
from lensbox_testlib.lensboxd import Daemon  # noqa: E402
from lensbox_testlib.runner import kernel_landlock_abi  # noqa: E402

MOUNT_AND_KEYCTL = r"""
import ctypes, errno, sys
libc = ctypes.CDLL(None, use_errno=True)
out = []
for _ in range(2):
    libc.mount(b"none", b"/tmp", b"tmpfs", 0, None); out.append(errno.errorcode[ctypes.get_errno()])
libc.syscall(250, 0, 0, 0, 0, 0); out.append(errno.errorcode[ctypes.get_errno()])   # keyctl
libc.syscall(435, 0, 0); out.append(errno.errorcode[ctypes.get_errno()])             # clone3: ENOSYS, not counted
print(" ".join(out))
sys.exit(1)
"""

LANDLOCK_WRITE = r"""
import sys
try:
    open("/proc/self/comm", "w")
except OSError as e:
    print(e.errno)
sys.exit(2)
"""


@pytest.fixture(scope="module")
def d():
    with Daemon() as daemon:
        yield daemon


def test_clean_run_refuses_nothing(d):
    r = d.ok_run(d.name("clean"), "print(1)")
    ref = r["refused"]
    assert set(ref) == {"filesystem", "syscall", "network", "syscalls"}, ref
    assert ref["syscall"] == 0 and ref["network"] == 0 and ref["syscalls"] == {}, ref
    assert ref["filesystem"] in (None, 0), ref
    assert r["message"] is None


def test_refused_system_calls_are_counted_and_named(d):
    r = d.ok_run(d.name("sys"), MOUNT_AND_KEYCTL)
    # the program saw exactly the policy's answers: counting changes none of them
    assert r["stdout"] == "EPERM EPERM EPERM ENOSYS\n", r
    assert r["refused"]["syscall"] == 3, r
    assert r["refused"]["syscalls"] == {"mount": 2, "keyctl": 1}, r
    assert r["message"] == "exited with code 1; the sandbox refused 3 system calls (mount, keyctl)", r
    # the Python client's types carry it
    res = d.client().run(d.name("sys"), "python", MOUNT_AND_KEYCTL)
    assert res.refused.syscall == 3 and res.refused.syscalls == {"mount": 2, "keyctl": 1}, res
    assert res.refused.filesystem is None or res.refused.filesystem == 0


def test_a_success_says_nothing_even_with_refusals(d):
    r = d.ok_run(d.name("quiet"), MOUNT_AND_KEYCTL.replace("sys.exit(1)", "sys.exit(0)"))
    assert r["refused"]["syscall"] == 3 and r["message"] is None, r


def test_a_write_to_usr_is_explained_from_the_read_only_root(d):
    r = d.ok_run(d.name("usr"), "open('/usr/lib/x', 'w')")
    assert r["exit_code"] == 1 and "Read-only file system" in r["stderr"], r
    assert r["message"] == ("exited with code 1; it tried to write where the sandbox is read-only (only /sandbox "
                            "and /tmp are writable)"), r


def test_a_refusal_flood_is_answered_and_bounded(d):
    """200,000 refused calls from 4 threads: every one answered with EPERM, counted, and the output still read."""
    src = r"""
import ctypes, threading
libc = ctypes.CDLL(None, use_errno=True)
bad = []
def flood():
    for _ in range(50000):
        if libc.syscall(250, 0, 0, 0, 0, 0) != -1 or ctypes.get_errno() != 1:
            bad.append(1)
ts = [threading.Thread(target=flood) for _ in range(4)]
[t.start() for t in ts]
print("x" * 100000)
[t.join() for t in ts]
print(len(bad))
"""
    t0 = time.monotonic()
    r = d.ok_run(d.name("flood"), src, timeout_seconds=120, output_limit=200000)
    assert r["exit_code"] == 0 and r["stdout"].endswith("\n0\n"), r["stdout"][-200:]
    assert r["refused"]["syscall"] == 200000 and r["refused"]["syscalls"] == {"keyctl": 200000}, r["refused"]
    assert time.monotonic() - t0 < 100


def health_refusals(d):
    status, h = d.request("GET", "/v1/health")
    assert status == 200, h
    return h["refusals"]


def test_health_says_which_kinds_this_host_counts(d):
    h = health_refusals(d)
    assert h["syscall"] is True and h["syscall_why_not"] is None, h
    assert h["network"] is True, h
    st = audit.status()
    if st is not None and st[0] == 0:
        assert h["filesystem"] is False, h
        assert "auditctl -e 1" in h["filesystem_why_not"], h
    assert "network_partial" not in h, h  # every network refusal is the host's nftables', counted everywhere


def audit_host():
    if kernel_landlock_abi() < 7:
        pytest.skip(f"Landlock ABI {kernel_landlock_abi()} logs no refusals (ABI 7, Linux 6.15)")
    st = audit.status()
    if st is None:
        pytest.skip("the kernel has no audit (CONFIG_AUDIT)")
    if st[0] == 2:
        pytest.skip("the kernel's audit is locked")
    if st[1] == 2:
        pytest.skip("the kernel's audit panics on lost records: lensbox does not ask Landlock to log there")


def test_landlock_refusals_counted_where_audit_is_on(d):
    audit_host()
    before = audit.status()
    with audit.enabled_for_test():
        time.sleep(1.1)  # lensbox re-reads the audit status at most once a second
        h = health_refusals(d)
        assert h["filesystem"] is True and h["filesystem_why_not"] is None, h
        r = d.ok_run(d.name("ll"), LANDLOCK_WRITE)
        assert r["stdout"] == "13\n", r  # EACCES: /proc is mounted writable, Landlock refuses the write
        assert r["refused"]["filesystem"] == 1, r  # one refusal, though the kernel logs two records for it
        assert r["message"] == "exited with code 2; the sandbox refused 1 write outside /sandbox and /tmp", r
        # a TCP connect to the sandbox's own loopback is no refusal: nothing listens on port 9, the kernel answers
        # ECONNREFUSED, and nothing is counted (forbidden connects are test_daemon_network_upkeep.py's)
        r = d.ok_run(d.name("ll"), "import socket\nsocket.socket().connect(('127.0.0.1', 9))")
        assert "ConnectionRefusedError" in r["stderr"], r
        assert r["refused"]["network"] == 0 and r["message"] == "exited with code 1", r
        # the next run counts only its own
        clean = d.ok_run(d.name("ll"), "print(1)")
        assert clean["refused"]["filesystem"] == 0 and clean["refused"]["network"] == 0, clean
    assert audit.status() == before, "the test must leave the kernel's audit as it found it"
    time.sleep(1.1)
    r = d.ok_run(d.name("ll"), LANDLOCK_WRITE)
    assert r["refused"]["filesystem"] is None, r

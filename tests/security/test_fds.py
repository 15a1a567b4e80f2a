"""Inherited file descriptors (runc's CVE-2024-21626 lesson): a sandboxed program holds 0, 1 and 2 only, stdin is
/dev/null, and no descriptor of the runner or of the host leaks in, even when the caller holds extra ones."""

import os
import subprocess

from lensbox_testlib.attack import IN_PROBE, refused, succeeded


def test_only_stdio(lab):
    p, res = lab.probe("fds")
    succeeded(p, res)
    assert sorted(p["fds"], key=int) == ["0", "1", "2"], p
    assert p["fds"]["0"] == "/dev/null", p
    assert p["fds"]["1"].startswith("pipe:") and p["fds"]["2"].startswith("pipe:"), p


def test_caller_descriptors_do_not_leak(lab):
    """The tool's caller leaves a host directory and a host file open (inheritable); none reaches the program."""
    dfd = os.open("/", os.O_RDONLY | os.O_DIRECTORY)
    ffd = os.open("/etc/hostname", os.O_RDONLY)
    os.set_inheritable(dfd, True)
    os.set_inheritable(ffd, True)
    try:
        cmd, uid = lab.command([IN_PROBE, "fds"])
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, close_fds=False, timeout=120)
    finally:
        os.close(dfd)
        os.close(ffd)
    res = lab._result(proc.returncode, proc.stdout, proc.stderr, cmd, uid, 0)
    p = res.probe
    succeeded(p, res)
    assert sorted(p["fds"], key=int) == ["0", "1", "2"], p


def test_stdin_is_empty(lab):
    p, res = lab.probe("read", "/dev/stdin", 16)
    succeeded(p, res)
    assert p["len"] == 0, p


def test_no_access_to_init_fds(lab):
    """The sandbox's init holds the sandbox's setup descriptors; its fd directory is closed to programs."""
    p, res = lab.probe("ls", "/proc/1/fd")
    refused(p, "EACCES", res)

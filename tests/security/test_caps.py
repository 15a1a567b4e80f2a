"""Attacks on the process's credentials: no capability in any set, securebits locked, no_new_privs, the sandbox uid
and gid only, a clean environment; every attempt to regain privilege is refused with EPERM."""

import pytest

from lensbox_testlib.attack import refused, succeeded

ATTACKS = [
    # Root (0) and nobody (65534) are mapped, to host ids of the sandbox's own (not the host's root): changing to
    # them needs CAP_SETUID/CAP_SETGID, which the program lacks (EPERM, as on Linux).
    ("setuid_root", ["setuid", 0], "EPERM"),
    ("setgid_root", ["setgid", 0], "EPERM"),
    ("setuid_nobody", ["setuid", 65534], "EPERM"),
    ("setgid_nogroup", ["setgid", 65534], "EPERM"),
    # Any other id does not exist in the namespace (EINVAL).
    ("setuid_unmapped", ["setuid", 1001], "EINVAL"),
    ("setgroups_root", ["setgroups", 0], "EPERM"),
    ("capset_all", ["capset"], "EPERM"),
    ("unlock_securebits", ["securebits", 0], "EPERM"),
    # Families seccomp allows, types that need CAP_NET_RAW (which the program lacks even in its own netns).
    ("raw_icmp_socket", ["socket", "inet", "raw", 1], "EPERM"),
    ("raw_ipv6_socket", ["socket", "inet6", "raw", 58], "EPERM"),
    ("chown_to_root", ["chown", "/sandbox/f", 0, 0], "EPERM"),
    ("chown_to_nobody", ["chown", "/sandbox/f", 65534, 65534], "EPERM"),
    ("chown_to_unmapped_gid", ["chown", "/sandbox/f", -1, 1001], "EINVAL"),
    # A valid VFS_CAP_REVISION_2 value granting every capability: needs CAP_SETFCAP.
    ("file_capability_xattr", ["setxattr", "/sandbox/f", "security.capability",
                               "hex:01000002" + "ffffffff" + "00000000" + "ffffffff" + "00000000"], "EPERM"),
]

SECUREBITS_LOCKED = 0xEF  # NOROOT, NO_SETUID_FIXUP, KEEP_CAPS_LOCKED, NO_CAP_AMBIENT_RAISE, each with its lock


@pytest.fixture(scope="module")
def batch(lab):
    return lab.script([["write", "/sandbox/f"]] + [a[1] for a in ATTACKS])


@pytest.mark.parametrize("i", range(len(ATTACKS)), ids=[a[0] for a in ATTACKS])
def test_denied(batch, i):
    outs, res = batch
    succeeded(outs[0], res)
    refused(outs[1 + i], ATTACKS[i][2], res)


@pytest.fixture(scope="module")
def status(lab):
    p, res = lab.probe("status")  # run directly by the runner, not through a shell
    succeeded(p, res)
    return p


@pytest.mark.parametrize("field", ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"])
def test_capability_set_empty(status, field):
    assert int(status[field], 16) == 0, status


def test_no_new_privs_and_securebits(status):
    assert status["NoNewPrivs"] == "1", status
    assert status["securebits"] == SECUREBITS_LOCKED, status


def test_runs_as_sandbox_uid(status):
    assert status["Uid"].split("\t") == ["1000"] * 4, status
    assert status["Gid"].split("\t") == ["1000"] * 4, status
    assert status["Groups"] == "", status


def test_core_dumps_off_and_clean_environment(status):
    assert status["core_limit"] == 0, status
    env = dict(e.split("=", 1) for e in status["env"])
    assert env.get("HOME") == "/sandbox" and env.get("LANG") == "C.UTF-8", env
    assert set(env) <= {"PATH", "HOME", "LANG", "PYTHONUNBUFFERED", "TERM", "HOSTNAME"}, env
    assert status["cwd"] == "/sandbox", status

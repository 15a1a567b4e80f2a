"""Privilege carried by the image: a setuid-root binary and a binary with file capabilities planted in the image
must not elevate anything (the root overlay is nosuid, host root is not mapped, no_new_privs is set, the bounding
set is empty). Uses a copy of the probe rootfs with the two binaries planted (see lensbox_testlib.attack)."""

import os

import pytest

from lensbox_testlib.attack import IN_PROBE, refused, succeeded


@pytest.fixture(scope="module")
def planted(lab):
    root = lab.rootfs("planted")
    st = os.stat(os.path.join(root, "usr/local/bin/suid-probe"))
    assert st.st_mode & 0o4000 and st.st_uid == 0, "the setuid binary was not planted"
    assert os.getxattr(os.path.join(root, "usr/local/bin/fcap-probe"), "security.capability")
    return lab


def _assert_unprivileged(p, res):
    succeeded(p, res)
    assert p["Uid"].split("\t") == ["1000"] * 4, p
    for field in ("CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(p[field], 16) == 0, (field, p)


def test_setuid_root_binary_run_directly(planted):
    res = planted.run(["/usr/local/bin/suid-probe", "status"], rootfs="planted")
    _assert_unprivileged(res.probe, res)


def test_setuid_root_binary_executed_by_the_program(planted):
    outs, res = planted.script([["exec", "/usr/local/bin/suid-probe", "status"]], rootfs="planted")
    _assert_unprivileged(outs[0], res)


def test_setuid_binary_cannot_become_root(planted):
    # root (0) is mapped (to a host id of the sandbox's own), so the kernel answers as on Linux: no CAP_SETUID
    res = planted.run(["/usr/local/bin/suid-probe", "setuid", "0"], rootfs="planted")
    refused(res.probe, "EPERM", res)


def test_file_capabilities_not_granted(planted):
    res = planted.run(["/usr/local/bin/fcap-probe", "status"], rootfs="planted")
    _assert_unprivileged(res.probe, res)


def test_file_capabilities_do_not_allow_mount(planted):
    res = planted.run(["/usr/local/bin/fcap-probe", "mount", "none", "/tmp", "tmpfs"], rootfs="planted")
    refused(res.probe, "EPERM", res)


def test_self_made_setuid_in_storage(planted):
    """The program copies the probe into /sandbox, marks it setuid and runs it: still uid 1000, /sandbox is nosuid."""
    outs, res = planted.script(["cp " + IN_PROBE + " /sandbox/p && chmod 4755 /sandbox/p",
                                ["stat", "/sandbox/p"], ["exec", "/sandbox/p", "status"]], rootfs="planted")
    assert outs[1]["mode"] == "4755", outs[1]
    _assert_unprivileged(outs[2], res)


def test_python_from_image_cannot_setuid(lab):
    code = ("import os, errno\n"
            "try:\n os.setuid(0); print('ROOT')\n"
            "except OSError as e:\n print(errno.errorcode[e.errno], os.getuid(), os.geteuid())\n")
    res = lab.run(["python3", "-c", code], rootfs="image")
    assert res["exit_code"] == 0, res.describe()
    assert res["stdout"].split() == ["EPERM", "1000", "1000"], res.describe()


def test_image_has_no_effective_setuid_binaries(lab):
    """Whatever setuid binaries the default image ships, none runs with another euid: a find over the image for
    setuid files, each started and asked for its ids is heavy; instead check the mount flag that neutralises them."""
    code = ("import os\n"
            "st = os.statvfs('/usr/bin')\n"
            "print(bool(st.f_flag & os.ST_NOSUID), bool(st.f_flag & os.ST_RDONLY))\n")
    res = lab.run(["python3", "-c", code], rootfs="image")
    assert res["stdout"].split() == ["True", "True"], res.describe()

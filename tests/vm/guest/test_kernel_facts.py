"""Facts of the VM lane's kernel that the rest of the lane relies on (runs in the guest only).

The lane exists to prove lensbox on cgroup v2 and on an older Landlock ABI; these tests fail loudly if the guest
stops offering them (a different kernel, a broken delegation), so later tests cannot pass for the wrong reason.
"""
import ctypes
import errno
import os
import platform

import pytest

import vmfacts
from vmfacts import expected_abi

vmfacts.skip_unless_guest()

CG = "/sys/fs/cgroup"
UNIT = os.environ["LENSBOX_VM_SYSTEMD_UNIT"]
REQUIRED = {"cpuset", "cpu", "io", "memory", "pids"}

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
SYS_landlock_create_ruleset = 444
SYS_landlock_add_rule = 445
SYS_landlock_restrict_self = 446
LANDLOCK_CREATE_RULESET_VERSION = 1 << 0


def read(path):
    with open(path) as f:
        return f.read()


def test_running_the_expected_kernel():
    assert platform.release() == os.environ["LENSBOX_VM_KERNEL"]


def test_cgroup2_is_the_only_hierarchy():
    mounts = [line.split() for line in read("/proc/self/mounts").splitlines()]
    cgroup_mounts = [(m[1], m[2]) for m in mounts if m[2] in ("cgroup", "cgroup2")]
    assert cgroup_mounts == [(CG, "cgroup2")]


def test_root_offers_and_enables_every_controller():
    offered = set(read(f"{CG}/cgroup.controllers").split())
    assert REQUIRED <= offered, f"missing controllers: {REQUIRED - offered}"
    assert set(read(f"{CG}/cgroup.subtree_control").split()) == offered


def test_tests_run_in_their_own_scope():
    assert read("/proc/self/cgroup").strip() == "0::/vm-lane.scope"


def test_lensbox_unit_is_delegated_like_systemd_does():
    offered = set(read(f"{CG}/cgroup.controllers").split())
    assert set(read(f"{UNIT}/cgroup.controllers").split()) == offered
    assert os.getxattr(UNIT, "trusted.delegate") == b"1"


def test_a_child_cgroup_has_every_limit_file():
    child = f"{CG}/vm-lane-probe-{os.getpid()}"
    os.mkdir(child)
    try:
        for f in ("memory.max", "memory.swap.max", "memory.events", "memory.peak", "cpu.max", "pids.max",
                  "pids.events", "cgroup.kill", "cgroup.freeze"):
            assert os.path.exists(f"{child}/{f}"), f
        with open(f"{child}/memory.max", "w") as fh:
            fh.write("67108864")
        assert read(f"{child}/memory.max").strip() == "67108864"
    finally:
        os.rmdir(child)


def landlock_abi():
    r = libc.syscall(SYS_landlock_create_ruleset, None, ctypes.c_size_t(0), ctypes.c_uint32(LANDLOCK_CREATE_RULESET_VERSION))
    return r if r >= 0 else -ctypes.get_errno()


def test_landlock_abi_is_the_kernels():
    assert landlock_abi() == expected_abi()


class RulesetAttr(ctypes.Structure):
    # struct landlock_ruleset_attr as of ABI 6: handled_access_fs, handled_access_net (ABI 4), scoped (ABI 6)
    _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]


def create_ruleset(fs, net=0, scoped=0, size=8):
    attr = RulesetAttr(fs, net, scoped)
    r = libc.syscall(SYS_landlock_create_ruleset, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if r < 0:
        return -ctypes.get_errno()
    os.close(r)
    return 0


ACCESS_FS_ABI1 = (1 << 13) - 1
ACCESS_FS_REFER = 1 << 13      # ABI 2
ACCESS_FS_TRUNCATE = 1 << 14   # ABI 3
ACCESS_FS_IOCTL_DEV = 1 << 15  # ABI 5


@pytest.mark.parametrize("right,since", [(ACCESS_FS_REFER, 2), (ACCESS_FS_TRUNCATE, 3), (ACCESS_FS_IOCTL_DEV, 5)],
                         ids=["refer", "truncate", "ioctl_dev"])
def test_filesystem_rights_exist_exactly_from_their_abi(right, since):
    # On 6.1 (ABI 2): refer is handled, truncate and device ioctl are not (EINVAL): lensbox cannot fence them.
    expected = 0 if expected_abi() >= since else -errno.EINVAL
    assert create_ruleset(ACCESS_FS_ABI1 | right) == expected


def test_network_rules_exist_exactly_from_abi_4():
    # The kernel knows an attribute of its own size; a larger one with non-zero trailing fields is E2BIG.
    expected = 0 if expected_abi() >= 4 else -errno.E2BIG
    assert create_ruleset(ACCESS_FS_ABI1, net=1, size=16) == expected


def test_scopes_exist_exactly_from_abi_6():
    expected = 0 if expected_abi() >= 6 else -errno.E2BIG
    assert create_ruleset(ACCESS_FS_ABI1, scoped=1, size=24) == expected

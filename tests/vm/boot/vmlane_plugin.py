"""vmlane_plugin.py — a pytest plugin loaded in the VM lane guest only (pytest -p vmlane_plugin; root, guest).

It adapts the shared test helpers to the guest without changing them, in the open:
- the shipped policy's Landlock minimum (6) is above 6.1's ABI 2, so every sandbox would be refused (which
  tests/vm/guest/test_runner_v2.py proves). The lane's other tests use a test copy of policy/ that adds
  `degraded_min_abi <the kernel's ABI>` and nothing else: $LENSBOX_VM_POLICY_DIR, also patched into
  lensbox_testlib.runner.POLICY_DIR, lensbox_testlib.attack.POLICY_DIR and the policy directory
  lensbox_testlib.lensboxd.Daemon passes to lensboxd;
- the default image cannot be built in the guest (no network, no mmdebstrap): run-vm carried the host's unpacked
  copy and its OCI archive in at their host paths, $LENSBOX_TEST_ROOTFS and $LENSBOX_TEST_IMAGE_ARCHIVE, which
  lensbox_testlib.images.default_rootfs and default_image_archive now return.
The supervisor's own tests start lensboxd from the tests' scope, like on the host (sandboxes' cgroups under
/sys/fs/cgroup/lensbox); tests/vm/guest/test_lensboxd_v2.py starts it the way systemd starts a Delegate=yes unit.
The kernel's ABI is asked from the kernel; the policy copy is made once per session under /run.
"""
import ctypes
import os
import re
import shutil
import sys

SOURCE_DIR = os.environ["LENSBOX_SOURCE_DIR"]
SHIPPED_POLICY = os.path.join(SOURCE_DIR, "policy")


def kernel_landlock_abi():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    r = libc.syscall(444, None, ctypes.c_size_t(0), ctypes.c_uint32(1))  # landlock_create_ruleset(VERSION)
    return max(int(r), 0)


def degraded_policy_copy(abi):
    dst = "/run/lensbox-vm/policy"
    if os.path.isdir(dst):
        return dst
    shutil.copytree(SHIPPED_POLICY, dst)
    rules = os.path.join(dst, "landlock.rules")
    with open(rules) as f:
        text = f.read()
    if re.search(r"^degraded_min_abi", text, re.M):
        raise RuntimeError(f"{SHIPPED_POLICY}/landlock.rules now sets degraded_min_abi: revisit vmlane_plugin")
    text, n = re.subn(r"^(min_abi\s+\d+)$", rf"\1\ndegraded_min_abi {abi}", text, count=1, flags=re.M)
    if n != 1:
        raise RuntimeError(f"no min_abi line in {SHIPPED_POLICY}/landlock.rules: revisit vmlane_plugin")
    with open(rules, "w") as f:
        f.write(text)
    return dst


def pytest_configure(config):
    policy = degraded_policy_copy(kernel_landlock_abi())
    os.environ["LENSBOX_VM_POLICY_DIR"] = policy
    sys.path.insert(0, os.path.join(SOURCE_DIR, "tests"))
    from lensbox_testlib import images, runner

    runner.POLICY_DIR = policy
    rootfs = os.environ["LENSBOX_TEST_ROOTFS"]
    archive = os.environ["LENSBOX_TEST_IMAGE_ARCHIVE"]
    images.default_rootfs = lambda: rootfs
    images.default_image_archive = lambda: archive
    try:
        from lensbox_testlib import attack
    except ImportError:
        pass
    else:
        attack.POLICY_DIR = policy
    try:
        from lensbox_testlib import lensboxd
    except ImportError:
        return
    plain_argv = lensboxd.Daemon.argv

    def argv_with_test_policy(self):
        return [policy if a == SHIPPED_POLICY else a for a in plain_argv(self)]

    lensboxd.Daemon.argv = argv_with_test_policy

"""vmlane_plugin.py — a pytest plugin loaded in the VM lane guest only (pytest -p vmlane_plugin; root, guest).

It adapts the shared test helpers to the guest without changing them, in the open:
- the shipped policy's Landlock minimum (6) is above 6.1's ABI 2, so every sandbox would be refused (which
  tests/vm/guest/test_runner_v2.py proves). The lane's other tests use a test copy of policy/ that adds
  `degraded_min_abi <the kernel's ABI>` and nothing else: $LENSBOX_VM_POLICY_DIR, also patched into
  lensbox_testlib.runner.POLICY_DIR and the policy directory lensbox_testlib.lensboxd.Daemon passes to lensboxd;
- lensboxd started by lensbox_testlib.lensboxd.Daemon is started the way systemd starts a Delegate=yes unit: its
  process is put into $LENSBOX_VM_SYSTEMD_UNIT before it execs lensboxd.
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
    from lensbox_testlib import runner

    runner.POLICY_DIR = policy
    try:
        from lensbox_testlib import lensboxd
    except ImportError:
        return
    unit = os.environ["LENSBOX_VM_SYSTEMD_UNIT"]
    plain_argv = lensboxd.Daemon.argv

    def argv_as_systemd_unit(self):
        argv = [policy if a == SHIPPED_POLICY else a for a in plain_argv(self)]
        # What systemd does for the unit's main process: into the unit's cgroup, then exec.
        return ["/bin/sh", "-c", f'echo $$ >{unit}/cgroup.procs && exec "$@"', "lensboxd", *argv]

    lensboxd.Daemon.argv = argv_as_systemd_unit

"""Helpers for tests that drive the lensbox-runner tool (start + exec + stop, one JSON result).

rootfs() is the image root the sandboxes use: $LENSBOX_TEST_ROOTFS when set (e.g. a tiny busybox root while
debugging), else the default image unpacked by images/recipes/python --rootfs (cached). RunnerEnv owns a private
temporary directory holding every storage and the run dir of the tests that use it, and checks at close that no
mount, loop device or cgroup of its sandboxes was left behind. Standard library only; runs as root.
"""

import itertools
import json
import os
import shutil
import subprocess
import tempfile
import time

from . import images

SOURCE_DIR = images.SOURCE_DIR
BUILD_DIR = os.environ.get("LENSBOX_BUILD_DIR", os.path.join(SOURCE_DIR, "build"))
RUNNER = os.path.join(BUILD_DIR, "runner", "lensbox-runner")
POLICY_DIR = os.path.join(SOURCE_DIR, "policy")
_counter = itertools.count()


def kernel_landlock_abi():
    """The kernel's best Landlock ABI (landlock_create_ruleset with LANDLOCK_CREATE_RULESET_VERSION), 0 when off."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    abi = libc.syscall(444, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    return max(abi, 0)


def rootfs():
    path = os.environ.get("LENSBOX_TEST_ROOTFS")
    return path if path else images.default_rootfs()


def runner_bin():
    if not os.access(RUNNER, os.X_OK):
        raise RuntimeError(f"{RUNNER} is not built: cmake --build {BUILD_DIR} --target lensbox-runner")
    return RUNNER


class Result(dict):
    """The runner's JSON plus the tool's own exit status (rc) and raw stderr."""

    rc = 0
    tool_stderr = ""


class RunnerEnv:
    def __init__(self):
        self.base = tempfile.mkdtemp(prefix="lensbox-runner-test-")
        self.run_dir = os.path.join(self.base, "run")
        self.names = []

    def storage(self, label=None):
        return os.path.join(self.base, "storage-" + (label or str(next(_counter))))

    def run(self, argv, storage=None, keep=False, flags=(), timeout=120, name=None, pass_fds=(), wrapper=(),
            image_rootfs=None):
        """wrapper: a command the tool runs under (e.g. unshare), its arguments before the tool's; image_rootfs:
        another image root than rootfs() (e.g. images.variant_rootfs(images.ZMQ))."""
        name = name or f"t{os.getpid()}-{next(_counter)}"
        self.names.append(name)
        cmd = [*wrapper, runner_bin(), "--rootfs", image_rootfs or rootfs(), "--storage", storage or self.storage(), "--policy", POLICY_DIR,
               "--run-dir", self.run_dir, "--name", name, *flags]
        if keep:
            cmd.append("--keep")
        cmd += ["--", *argv]
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout, pass_fds=pass_fds)
        out = proc.stdout.decode("utf-8")  # must be valid UTF-8 whatever the program printed
        try:
            res = Result(json.loads(out))
        except json.JSONDecodeError as e:
            raise AssertionError(f"runner printed no JSON (rc {proc.returncode}): {out!r} {proc.stderr!r}") from e
        res.rc = proc.returncode
        res.tool_stderr = proc.stderr.decode("utf-8", "replace")
        return res

    def python(self, code, **kw):
        return self.run(["python3", "-c", code], **kw)

    def leftovers(self):
        """Mounts, loop devices and cgroups of this env's sandboxes that still exist."""
        found = []
        with open("/proc/self/mountinfo") as f:
            found += [line.split()[4] for line in f if self.base in line.split()[4]]
        for dev in os.listdir("/sys/block"):
            bf = f"/sys/block/{dev}/loop/backing_file"
            if os.path.exists(bf):
                with open(bf) as f:
                    if f.read().startswith(self.base):
                        found.append("/dev/" + dev)
        for ctrl in ("memory", "cpu", "cpuacct", "pids", "freezer", "unified"):
            for name in self.names:
                for top in (f"/sys/fs/cgroup/{ctrl}/lensbox/{name}", f"/sys/fs/cgroup/lensbox/{name}"):
                    if os.path.exists(top):
                        found.append(top)
        return found

    def close(self):
        # A loop device detaches itself asynchronously after its last unmount: give it a moment.
        for _ in range(30):
            left = self.leftovers()
            if not left:
                break
            time.sleep(0.1)
        shutil.rmtree(self.base, ignore_errors=True)
        return left

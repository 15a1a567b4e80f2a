"""lensbox-runner keeps the compiled seccomp BPF between runs (<run-dir>/seccomp-cache, policy/src/seccomp_cache.c):
the second run with the same profile takes the cached filter, and the filter it enforces is the same (a denied
syscall answers EPERM, an unknown one ENOSYS). An altered entry, a cache directory others may write, or
--no-seccomp-cache mean compiling again, never a weaker filter. Runs as root.
"""

import os
import stat
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from lensbox_testlib.runner import POLICY_DIR, RunnerEnv, rootfs, runner_bin  # noqa: E402

# keyctl is denied with EPERM by the profile; 400 is in the gap of x86_64's table the profile knows: ENOSYS.
PROBE = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
errs = []
for nr in (250, 400):
    libc.syscall(ctypes.c_long(nr), ctypes.c_long(0), ctypes.c_long(0))
    errs.append(ctypes.get_errno())
print(*errs)
"""


@pytest.fixture(scope="module")
def env():
    e = RunnerEnv()
    yield e
    assert e.close() == [], "sandboxes left mounts, loop devices or cgroups behind"


def run(env, cache, extra=()):
    r = env.python(PROBE, flags=["--seccomp-cache", cache, *extra])
    assert r.rc == 0, r
    assert r["stdout"].split() == ["1", "38"], r["stdout"]  # EPERM, ENOSYS
    assert r["isolation"]["seccomp"]["mode"] == 2
    return r


def entries(cache):
    return sorted(f for f in os.listdir(cache) if f.startswith("seccomp-")) if os.path.isdir(cache) else []


def test_second_run_uses_the_cache_and_enforces_the_same_filter(env):
    cache = os.path.join(env.base, "cache-a")
    first = run(env, cache)
    assert first["isolation"]["seccomp"]["bpf_from_cache"] is False
    (name,) = entries(cache)
    st = os.stat(os.path.join(cache, name))
    assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == os.geteuid()
    assert stat.S_IMODE(os.stat(cache).st_mode) == 0o700
    second = run(env, cache)
    assert second["isolation"]["seccomp"]["bpf_from_cache"] is True
    for k in ("allowed_syscalls", "bpf_instructions"):
        assert second["isolation"]["seccomp"][k] == first["isolation"]["seccomp"][k]


def test_altered_entry_is_compiled_again(env):
    cache = os.path.join(env.base, "cache-b")
    run(env, cache)
    (name,) = entries(cache)
    path = os.path.join(cache, name)
    with open(path, "r+b") as f:  # turn the last instruction's constant into something else
        f.seek(-2, os.SEEK_END)
        b = f.read(1)
        f.seek(-2, os.SEEK_END)
        f.write(bytes([b[0] ^ 0x7f]))
    r = run(env, cache)
    assert r["isolation"]["seccomp"]["bpf_from_cache"] is False
    assert run(env, cache)["isolation"]["seccomp"]["bpf_from_cache"] is True  # repaired


def test_cache_others_may_write_is_not_used(env):
    cache = os.path.join(env.base, "cache-c")
    run(env, cache)
    os.chmod(cache, 0o777)
    try:
        assert run(env, cache)["isolation"]["seccomp"]["bpf_from_cache"] is False
    finally:
        os.chmod(cache, 0o700)


def test_no_seccomp_cache_compiles_and_writes_nothing(env):
    cache = os.path.join(env.base, "cache-d")
    r = run(env, cache, ["--no-seccomp-cache"])
    assert r["isolation"]["seccomp"]["bpf_from_cache"] is False
    assert entries(cache) == []


def test_relative_cache_dir_is_a_usage_error(env):
    p = subprocess.run([runner_bin(), "--rootfs", rootfs(), "--storage", env.storage(), "--policy", POLICY_DIR,
                        "--run-dir", env.run_dir, "--seccomp-cache", "relative/dir", "--", "true"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.returncode == 2 and b"--seccomp-cache must be an absolute path" in p.stderr

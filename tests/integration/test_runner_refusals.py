"""lensbox-runner's `refused`: refused system calls counted and named without changing their errno, Landlock's kinds
null where the kernel's audit is off, and the one visible side effect of counting (docs/isolation.md section 10): a
sandboxed program's own seccomp filter with a listener gets EBUSY, while one without a listener still installs."""
import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from lensbox_testlib import audit  # noqa: E402
from lensbox_testlib.runner import RunnerEnv  # noqa: E402


@pytest.fixture(scope="module")
def env():
    e = RunnerEnv()
    yield e
    assert e.close() == []


SECCOMP_OWN = r"""
import ctypes, errno, json, struct
libc = ctypes.CDLL(None, use_errno=True)
allow = struct.pack("=HBBI", 0x06, 0, 0, 0x7fff0000)        # BPF_RET|BPF_K SECCOMP_RET_ALLOW
buf = ctypes.create_string_buffer(allow)
prog = struct.pack("=HxxxxxxQ", 1, ctypes.addressof(buf))    # struct sock_fprog
out = {}
r = libc.syscall(317, 1, 1 << 3, prog)                       # seccomp(SET_MODE_FILTER, NEW_LISTENER)
out["listener"] = errno.errorcode.get(ctypes.get_errno()) if r < 0 else "ok"
r = libc.syscall(317, 1, 0, prog)                            # seccomp(SET_MODE_FILTER, 0)
out["plain"] = errno.errorcode.get(ctypes.get_errno()) if r < 0 else "ok"
libc.syscall(165, b"none", b"/tmp", b"tmpfs", 0, None)       # mount: still refused under both filters
out["mount"] = errno.errorcode.get(ctypes.get_errno())
print(json.dumps(out))
"""


def test_refused_calls_counted_and_named(env):
    r = env.python("import ctypes, errno\nlibc = ctypes.CDLL(None, use_errno=True)\n"
                   "libc.mount(b'none', b'/tmp', b'tmpfs', 0, None)\nprint(errno.errorcode[ctypes.get_errno()])\n"
                   "libc.syscall(999)\nprint(errno.errorcode[ctypes.get_errno()])")
    assert r["stdout"] == "EPERM\nENOSYS\n", r
    assert r["refused"]["syscall"] == 1 and r["refused"]["syscalls"] == {"mount": 1}, r["refused"]
    assert r["refused"]["network"] == 0, r["refused"]  # tier off: only lo, whose ports are the sandbox's own
    st = audit.status()
    if st is not None and st[0] == 0:
        assert r["refused"]["filesystem"] is None, r["refused"]


def test_own_filter_with_a_listener_gets_ebusy(env):
    r = env.python(SECCOMP_OWN)
    out = json.loads(r["stdout"])
    assert out == {"listener": "EBUSY", "plain": "ok", "mount": "EPERM"}, r
    assert r["refused"]["syscalls"] == {"mount": 1}, r["refused"]

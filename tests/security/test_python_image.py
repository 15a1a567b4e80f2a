"""Attacks written in Python, run by the default image's python3 (what Lens's run_python executes), and a workload
check: the policy must refuse the attacks without breaking what ordinary Python programs do."""

import json

import pytest

ATTACK = r'''
import ctypes, errno, json, os, socket
libc = ctypes.CDLL(None, use_errno=True)
out = {}
def sys_(name, nr, *args):
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    out[name] = "ok" if r >= 0 else errno.errorcode[ctypes.get_errno()]
sys_("keyctl", 250, 0, -3, 1)
sys_("unshare_user", 272, 0x10000000)
sys_("mount", 165, 0, 0, 0, 0, 0)
sys_("bpf", 321, 0, 0, 0)
sys_("ptrace_traceme", 101, 0, 0, 0, 0)
sys_("io_uring_setup", 425, 4, 0)
def attempt(name, fn):
    try:
        fn(); out[name] = "ok"
    except OSError as e:
        out[name] = errno.errorcode[e.errno]
import sysconfig
attempt("write_stdlib", lambda: open(os.path.join(sysconfig.get_paths()["stdlib"], "os.py"), "a"))
attempt("write_usr_local", lambda: open("/usr/local/lib/evil.pth", "w"))
attempt("raw_socket", lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP))
# its own loopback, where nothing listens: refused by the kernel, not the policy (servers may listen there)
attempt("connect_443", lambda: socket.create_connection(("127.0.0.1", 443), timeout=2))
attempt("chroot", lambda: os.chroot("/tmp"))
attempt("setuid0", lambda: os.setuid(0))
print(json.dumps(out))
'''

EXPECTED = {
    "keyctl": "EPERM", "unshare_user": "EPERM", "mount": "EPERM", "bpf": "EPERM", "ptrace_traceme": "EPERM",
    "io_uring_setup": "EPERM", "write_stdlib": "EROFS", "write_usr_local": "EROFS", "raw_socket": "EPERM",
    "connect_443": "ECONNREFUSED", "chroot": "EPERM", "setuid0": "EPERM",
}

WORKLOAD = r'''
import asyncio, multiprocessing, os, socket, sqlite3, ssl, subprocess, tempfile, threading, venv
print(subprocess.run(["bash", "-c", "echo hi"], capture_output=True, text=True).stdout.strip())
t = threading.Thread(target=print, args=("thread",)); t.start(); t.join()
with multiprocessing.Pool(2) as p: print(sum(p.map(abs, [-1, -2])))
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1", 0)); print("udp")
a, b = socket.socketpair(); a.send(b"unix"); print(b.recv(4).decode())
print(len(socket.if_nameindex()) >= 1)
ssl.create_default_context(); print("ssl")
db = sqlite3.connect("/sandbox/x.db"); db.execute("create table t(x)"); db.commit(); print("sqlite")
with tempfile.NamedTemporaryFile() as f: f.write(b"x"); print("tmp")
print(asyncio.run(asyncio.sleep(0, result="async")))
venv.create("/tmp/venv", with_pip=False)
print(subprocess.run(["/tmp/venv/bin/python", "-c", "print(6*7)"], capture_output=True, text=True).stdout.strip())
'''


@pytest.fixture(scope="module")
def attacks(lab):
    res = lab.run(["python3", "-c", ATTACK], rootfs="image")
    assert res["exit_code"] == 0, res.describe()
    return json.loads(res["stdout"]), res


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_python_attack_refused(attacks, name):
    got, res = attacks
    assert got[name] == EXPECTED[name], f"{name}: {got[name]}, expected {EXPECTED[name]}\n{res.describe()}"


def test_ordinary_python_still_works(lab):
    """Threads, processes (clone3 falls back to clone), subprocess, sockets, netlink (if_nameindex), TLS setup,
    sqlite, tempfiles, asyncio and a venv: nothing an ordinary program does is refused."""
    res = lab.run(["python3", "-c", WORKLOAD], rootfs="image")
    assert res["exit_code"] == 0, res.describe()
    assert res["stdout"].split() == ["hi", "thread", "3", "udp", "unix", "True", "ssl", "sqlite", "tmp", "async",
                                     "42"], res.describe()

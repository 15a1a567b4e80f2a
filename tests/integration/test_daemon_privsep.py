"""lensboxd's privilege separation (docs/architecture.md): the API process that parses requests holds no privilege,
and the core trusts nothing it sends.

The attack half speaks the core's protocol (supervisor/proto/proto.h) directly, as a compromised API process would:
it takes a copy of the API process's own control socket with pidfd_getfd(2) and sends forged, truncated, oversized
and out-of-range messages, names with `../` and NUL, wrong descriptor types and a flood. The core must refuse each
(400 bad_message on a channel, counted in /metrics), refuse an import on a connection that is not one of its own
socket's, and keep serving the real API process's requests all along."""

import ctypes
import json
import os
import socket
import struct
import sys
import tempfile
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from lensbox_testlib.lensboxd import Daemon, wait_for  # noqa: E402

MAGIC, VERSION = 0x3150424C, 1
(HEALTH, METRICS, SANDBOX_LIST, SANDBOX_GET, SANDBOX_PUT, SANDBOX_DELETE, SANDBOX_STOP, RUN, RUNS_LIST, RUN_GET,
 FILES_LIST, FILE_GET, FILE_PUT, IMAGES_LIST, IMAGE_GET, IMAGE_DELETE, IMAGE_PULL, IMAGE_IMPORT, REPLY,
 CHANNEL) = range(1, 21)
NAME, PATH, SPEC, RUN_SIZE, FILE_SIZE, IMPORT_SIZE = 64, 4096, 552, 640, 4168, 1544
REPLY_SIZE = 256
CONTROL_FD = 4  # supervisor/api/api.h: LBD_API_CONTROL_FD


def header(mtype, length, nfds=0, magic=MAGIC, version=VERSION):
    return struct.pack("<IHHII", magic, version, mtype, length, nfds)


def cstr(s, size):
    b = s.encode() if isinstance(s, str) else s
    return b + b"\0" * (size - len(b))


def status(d):
    st = {}
    for line in open(f"/proc/{d}/status"):
        k, _, v = line.partition(":")
        st[k] = v.strip()
    return st


def api_pid(daemon):
    core = daemon.proc.pid
    kids = []  # children of any of the core's threads (a replacement is forked by the watcher thread)
    for task in os.listdir(f"/proc/{core}/task"):
        try:
            kids += open(f"/proc/{core}/task/{task}/children").read().split()
        except OSError:
            pass
    named = [int(k) for k in kids if status(int(k)).get("Name") == "lensboxd-api"]
    assert len(named) == 1, f"expected one API process among the core's children {kids}"
    return named[0]


def socket_inodes(pid):
    out = set()
    for f in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{f}")
        except OSError:
            continue
        if link.startswith("socket:["):
            out.add(link[8:-1])
    return out


def listening_unix_inodes():
    """Inodes of listening Unix sockets (/proc/net/unix: flags 00010000 is __SO_ACCEPTCON)."""
    out = {}
    with open("/proc/net/unix") as f:
        next(f)
        for line in f:
            parts = line.split()
            if int(parts[3], 16) & 0x10000:
                out[parts[6]] = parts[7] if len(parts) > 7 else ""
    return out


def steal_control_socket(pid):
    """A copy of the API process's control socket, as the API process itself holds it."""
    libc = ctypes.CDLL(None, use_errno=True)
    pidfd = os.pidfd_open(pid)
    try:
        fd = libc.syscall(438, pidfd, CONTROL_FD, 0)  # pidfd_getfd
        if fd < 0:
            raise OSError(ctypes.get_errno(), "pidfd_getfd")
    finally:
        os.close(pidfd)
    return socket.socket(fileno=fd)


class Core:
    """The core's protocol, spoken from outside the API process."""

    def __init__(self, control):
        self.control = control

    def channel(self):
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        socket.send_fds(self.control, [header(CHANNEL, 0, 1)], [b.fileno()])
        b.close()
        return a

    def ask(self, datagram, fds=()):
        """Sends one raw datagram on a new channel; (status, body dict) of the reply, or None when the core closed
        the channel without one."""
        ch = self.channel()
        ch.settimeout(30)
        try:
            if fds:
                socket.send_fds(ch, [datagram], list(fds))
            else:
                ch.send(datagram)
            msg, rfds, _flags, _addr = socket.recv_fds(ch, 1 << 20, 1)
        finally:
            ch.close()
        for fd in rfds:
            os.close(fd)
        if not msg:
            return None
        magic, version, mtype, length, nfds = struct.unpack_from("<IHHII", msg)
        assert (magic, version, mtype) == (MAGIC, VERSION, REPLY)
        code, in_fd, body_len = struct.unpack_from("<IIQ", msg, 16)
        body = msg[16 + REPLY_SIZE:16 + REPLY_SIZE + body_len] if not in_fd else b""
        return code, (json.loads(body) if body.startswith(b"{") else body)


def sealed_memfd(data):
    fd = os.memfd_create("t", os.MFD_ALLOW_SEALING)
    os.write(fd, data)
    import fcntl

    fcntl.fcntl(fd, 1033, 0x1 | 0x2 | 0x4 | 0x8)  # F_ADD_SEALS: SEAL, SHRINK, GROW, WRITE
    return fd


def run_payload(name, source_len, language=0, timeout=10, limit=100):
    return (cstr(name, NAME) + struct.pack("<IIIIQ", language, timeout, limit, 0, source_len) + b"\0" * SPEC)


@pytest.fixture(scope="module")
def daemon():
    d = Daemon()
    yield d
    d.stop()
    d.cleanup()


def refused_count(daemon):
    code, body = daemon.request("GET", "/metrics")
    assert code == 200
    text = body.decode() if isinstance(body, bytes) else str(body)
    for line in text.splitlines():
        if line.startswith("lensbox_core_messages_refused_total "):
            return int(line.split()[1])
    raise AssertionError("lensbox_core_messages_refused_total is missing from /metrics")


def test_api_process_is_unprivileged_and_holds_the_socket(daemon):
    pid = api_pid(daemon)
    st = status(pid)
    assert st["Uid"].split()[0] != "0" and st["Uid"].split() == [st["Uid"].split()[0]] * 4, st["Uid"]
    assert st["Gid"].split()[0] != "0", st["Gid"]
    assert st["Groups"] == ""
    assert st["CapEff"] == st["CapPrm"] == st["CapBnd"] == "0000000000000000"
    assert st["NoNewPrivs"] == "1"
    assert st["Seccomp"] == "2"
    listening = listening_unix_inodes()
    ours = {ino for ino, path in listening.items() if path == daemon.socket}
    assert ours, f"nothing listens on {daemon.socket}"
    assert ours <= socket_inodes(pid), "the API process does not hold the listening socket"
    assert not (set(listening) & socket_inodes(daemon.proc.pid)), "the core holds a listening socket"
    code, body = daemon.request("GET", "/v1/health")
    assert code == 200 and body["api_process"]["restarts"] == 0


def test_forged_messages_are_refused_and_the_core_keeps_serving(daemon):
    pid = api_pid(daemon)
    with steal_control_socket(pid) as control:
        forge_everything(daemon, pid, Core(control))


def forge_everything(daemon, pid, core):
    before = refused_count(daemon)

    # The stolen socket really is the core's: a well-formed request is answered.
    code, body = core.ask(header(HEALTH, 0))
    assert code == 200 and body["can_run"] in (True, False)

    bad = {
        "wrong magic": header(HEALTH, 0, magic=0xDEADBEEF),
        "wrong version": header(HEALTH, 0, version=2),
        "unknown type": header(999, 0),
        "a reply as a request": header(REPLY, REPLY_SIZE) + b"\0" * REPLY_SIZE,
        "a channel on a channel": header(CHANNEL, 0),
        "truncated": header(SANDBOX_GET, NAME) + b"ok",
        "shorter than a header": b"\x4c\x42\x50",
        "oversized for its type": header(SANDBOX_GET, NAME + 1) + cstr("ok", NAME + 1),
        "length lies": header(SANDBOX_GET, NAME + 8) + cstr("ok", NAME),
        "name with ../": header(SANDBOX_DELETE, NAME) + cstr("../etc", NAME),
        "name after a NUL": header(SANDBOX_DELETE, NAME) + cstr(b"\0../x", NAME),
        "name without a NUL": header(SANDBOX_GET, NAME) + b"a" * NAME,
        "upper-case name": header(SANDBOX_STOP, NAME) + cstr("Chat", NAME),
        "path escaping": header(FILE_GET, FILE_SIZE) + cstr("chat", NAME) + cstr("../../etc/shadow", PATH) + b"\0" * 8,
        "absolute path": header(FILE_GET, FILE_SIZE) + cstr("chat", NAME) + cstr("/etc/shadow", PATH) + b"\0" * 8,
        "limit out of range": header(RUNS_LIST, NAME + 8) + cstr("", NAME) + struct.pack("<II", 5000, 0),
        "run id upper-case": header(RUN_GET, 32) + cstr("01JDX8W3Q4R7M2K9V5N6P8T0AB", 32),
        "spec field not given but set": header(SANDBOX_PUT, NAME + SPEC) + cstr("chat", NAME)
        + struct.pack("<II", 0, 0) + b"\0" * 512 + struct.pack("<IIII", 500, 0, 0, 0) + b"\0" * 16,
        "tier out of range": header(SANDBOX_PUT, NAME + SPEC) + cstr("chat", NAME)
        + struct.pack("<II", 2, 7) + b"\0" * (SPEC - 8),
        "image path in a ref": header(IMAGE_GET, 512) + cstr("../../../etc", 512),
        "a run without its source": header(RUN, RUN_SIZE) + run_payload("chat", 5),
    }
    for what, datagram in bad.items():
        reply = core.ask(datagram)
        assert reply is not None and reply[0] == 400, f"{what}: {reply}"
        assert reply[1]["error"]["code"] == "bad_message", what

    # Wrong descriptors: a pipe, an unsealed memfd, a directory and a sealed memfd of the wrong size as the source.
    r, w = os.pipe()
    unsealed = os.memfd_create("u")
    os.write(unsealed, b"print(1)")
    dirfd = os.open("/", os.O_RDONLY | os.O_DIRECTORY)
    short = sealed_memfd(b"pri")
    try:
        for what, fd in (("pipe", r), ("unsealed memfd", unsealed), ("directory", dirfd), ("wrong size", short)):
            reply = core.ask(header(RUN, RUN_SIZE, 1) + run_payload("chat", 8), fds=[fd])
            assert reply is not None and reply[0] == 400, f"{what}: {reply}"
        # two descriptors where one belongs
        good = sealed_memfd(b"print(1)")
        reply = core.ask(header(RUN, RUN_SIZE, 2) + run_payload("chat", 8), fds=[good, good])
        assert reply[0] == 400
        os.close(good)
    finally:
        for fd in (r, w, unsealed, dirfd, short):
            os.close(fd)

    # An import on a connection that is not one of lensboxd's: its peer is root (this test), but the core checks
    # where the connection was accepted, so a compromised API process cannot borrow a root peer from elsewhere.
    with tempfile.TemporaryDirectory() as tmp:
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        payload = cstr(tmp, 1024) + cstr("", 512) + struct.pack("<II", 0, 0)
        reply = core.ask(header(IMAGE_IMPORT, IMPORT_SIZE, 1) + payload, fds=[b.fileno()])
        a.close()
        b.close()
        assert reply is not None and reply[0] == 403, reply
        assert reply[1]["error"]["code"] == "forbidden"

    # The control socket itself: a channel message carrying a file instead of a socket, and garbage.
    with open("/dev/null", "rb") as f:
        socket.send_fds(core.control, [header(CHANNEL, 0, 1)], [f.fileno()])
    core.control.send(b"\xff" * 100)

    # A flood: garbage on the control socket and on many channels at once; nothing is served from it, nothing
    # stops the core.
    for i in range(3000):
        core.control.send(bytes([i & 0xFF]) * (16 + i % 200))
    chans = [core.channel() for _ in range(200)]
    for ch in chans:
        ch.send(b"\x00" * 40)
    answered = 0
    for ch in chans:
        ch.settimeout(30)
        msg = ch.recv(1 << 16)
        answered += bool(msg) and struct.unpack_from("<I", msg, 16)[0] == 400
        ch.close()
    assert answered == 200

    # Still serving, through the real API process, and nothing was replaced.
    code, body = daemon.request("GET", "/v1/health")
    assert code == 200 and body["api_process"]["restarts"] == 0
    assert api_pid(daemon) == pid
    assert daemon.proc.poll() is None
    after = refused_count(daemon)
    assert after - before >= len(bad) + 5 + 2 + 3000 + 200, (before, after)


def test_a_dead_api_process_is_replaced(daemon):
    pid = api_pid(daemon)
    os.kill(pid, 9)
    assert wait_for(lambda: daemon.proc.poll() is None and _other_api(daemon, pid), 15), daemon.read_log()[-2000:]
    assert wait_for(lambda: _health_ok(daemon), 15)
    code, body = daemon.request("GET", "/v1/health")
    assert body["api_process"]["restarts"] >= 1
    assert "the API process ended" in daemon.read_log()


def _other_api(daemon, old):
    try:
        return api_pid(daemon) != old
    except (AssertionError, OSError):
        return False


def _health_ok(daemon):
    try:
        return daemon.request("GET", "/v1/health", timeout=5)[0] == 200
    except OSError:
        return False


def test_the_api_process_ends_with_the_core():
    d = Daemon()
    try:
        pid = api_pid(d)
        os.kill(d.proc.pid, 9)
        d.proc.wait(10)
        assert wait_for(lambda: not os.path.exists(f"/proc/{pid}") or status(pid).get("State", "").startswith("Z"), 5)
    finally:
        d.cleanup()

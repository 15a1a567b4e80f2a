"""The kernel's audit switch, for the tests that prove Landlock's refusals are counted where audit is on.

lensbox itself never changes it (host-wide state: with no auditd every record goes to the kernel log). A test may turn
it on for its own duration with enabled_for_test(), which restores the exact previous state. Standard library only;
needs root (CAP_AUDIT_CONTROL) and a kernel with CONFIG_AUDIT.
"""

import contextlib
import socket
import struct

NETLINK_AUDIT = 9
AUDIT_GET = 1000
AUDIT_SET = 1001
AUDIT_STATUS_ENABLED = 1
NLM_F_REQUEST = 1
NLM_F_ACK = 4
NLMSG_ERROR = 2
_STATUS = struct.Struct("=10I")  # mask enabled failure pid rate_limit backlog_limit lost backlog version wait_time


def _request(kind, payload=b"", seq=1):
    s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_AUDIT)
    try:
        s.bind((0, 0))
        flags = NLM_F_REQUEST | (NLM_F_ACK if kind == AUDIT_SET else 0)
        s.send(struct.pack("=IHHII", 16 + len(payload), kind, flags, seq, 0) + payload)
        s.settimeout(2)
        while True:
            data = s.recv(65536)
            off = 0
            while off + 16 <= len(data):
                length, typ, _, rseq, _ = struct.unpack_from("=IHHII", data, off)
                body = data[off + 16: off + length]
                if rseq == seq and typ == NLMSG_ERROR:
                    err = struct.unpack_from("=i", body)[0]
                    if err:
                        raise OSError(-err, f"audit netlink request {kind}")
                    if kind == AUDIT_SET:
                        return None
                elif rseq == seq and typ == AUDIT_GET:
                    return _STATUS.unpack_from(body.ljust(_STATUS.size, b"\0"))
                off += (length + 3) & ~3
    finally:
        s.close()


def status():
    """(enabled, failure) of the kernel's audit, or None when the kernel has none."""
    try:
        st = _request(AUDIT_GET)
    except OSError:
        return None
    return st[1], st[2]


def set_enabled(value):
    payload = _STATUS.pack(AUDIT_STATUS_ENABLED, value, 0, 0, 0, 0, 0, 0, 0, 0)
    _request(AUDIT_SET, payload, seq=2)


@contextlib.contextmanager
def enabled_for_test():
    """Audit on for the block, then back to exactly what it was (left alone when it was already on)."""
    st = status()
    if st is None:
        raise OSError("the kernel has no audit")
    was = st[0]
    if was == 2:
        raise OSError("the kernel's audit is locked (enabled=2)")
    if not was:
        set_enabled(1)
    try:
        yield
    finally:
        if not was:
            set_enabled(0)

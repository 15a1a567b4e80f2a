"""`Retry-After` comes with the answers that pass by themselves (docs/api.md, "Errors"), and only with them. Each
documented cause is provoked for real: the uid range exhausted (429 capacity), a network tier this host cannot give
(503 host_unavailable), request bodies past body_memory (503 busy); an image not here (503 image_unavailable) and a
404 carry none. 503 core_unavailable needs the core gone mid-request; tests/chaos (part kill -9) requires the header
on it, and tests/unit/supervisor/test_res.c holds the table."""
import http.client
import os
import socket
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from lensbox_testlib.lensboxd import Daemon  # noqa: E402

# what docs/api.md promises, code -> seconds (None: no header)
WAIT = {"capacity": "1", "busy": "1", "host_unavailable": "5", "image_unavailable": None}


def refused(answer, status, code):
    st, hdrs, raw = answer
    assert st == status, raw
    assert f'"code":"{code}"' in raw.decode(), raw
    assert hdrs.get("Retry-After") == WAIT[code], (code, hdrs)


def announce(d, path, length):
    """A socket that sent a PUT's headers announcing length bytes and none of them."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(30)
    s.connect(d.socket)
    s.sendall(f"PUT {path} HTTP/1.1\r\nHost: lensbox\r\nContent-Length: {length}\r\n\r\n".encode())
    return s


def test_each_429_and_503_says_when_to_try_again():
    with Daemon(settings={"uid_range_count": "1", "body_memory": "32Mi"}) as d:
        a, b = d.name("a"), d.name("b")
        st, hdrs, raw = d.raw("PUT", f"/v1/sandboxes/{a}", {})
        assert st in (200, 201), raw
        assert "Retry-After" not in hdrs
        refused(d.raw("PUT", f"/v1/sandboxes/{b}", {}), 429, "capacity")
        refused(d.raw("PUT", f"/v1/sandboxes/{b}", {"network": "web"}), 503, "host_unavailable")
        refused(d.raw("PUT", f"/v1/sandboxes/{b}", {"image": "python:9.9"}), 503, "image_unavailable")
        st, hdrs, raw = d.raw("GET", f"/v1/sandboxes/{b}")
        assert st == 404 and "Retry-After" not in hdrs, (st, hdrs)

        # 20 MiB announced and held (no byte of it sent) leaves 12 of body_memory's 32 MiB: another 20 MiB is busy
        holder = announce(d, f"/v1/sandboxes/{a}/files/big", 20 << 20)
        try:
            # lensboxd answers from the headers alone, before any body byte (so none is sent). The holder's headers
            # are read on its own thread: until they are, the other one is the one waiting for its body.
            answer = None
            for _ in range(10):
                other = announce(d, f"/v1/sandboxes/{a}/files/other", 20 << 20)
                other.settimeout(2)
                try:
                    resp = http.client.HTTPResponse(other)
                    resp.begin()
                    answer = (resp.status, dict(resp.getheaders()), resp.read())
                    break
                except socket.timeout:
                    continue
                finally:
                    other.close()
            assert answer, "no answer to a body past body_memory"
            refused(answer, 503, "busy")
        finally:
            holder.close()
        assert d.leaks() == []

"""The Python clients' connections (clients/python/lensbox_client, client.py and aio.py): kept alive across many calls
(counted on the server's side), shared by threads, re-opened after lensboxd restarts, and the retry rule: a request is
sent again only when lensboxd surely did not act on it (a POST whose connection closed after it was sent is not).
Also one exception class per error code of docs/api.md, and AsyncClient against a real lensboxd."""

import asyncio
import os
import re
import socket
import sys
import threading

import pytest

SRC = os.environ.get("LENSBOX_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path[:0] = [os.path.join(SRC, "clients", "python"), os.path.join(SRC, "tests")]

import lensbox_client  # noqa: E402
from lensbox_client import Client, SandboxError  # noqa: E402
from lensbox_client.aio import AsyncClient  # noqa: E402
from lensbox_testlib.fake_lensboxd import FakeLensboxd  # noqa: E402
from lensbox_testlib.lensboxd import Daemon  # noqa: E402


@pytest.fixture
def fake(tmp_path):
    with FakeLensboxd(str(tmp_path / "lensboxd.sock")) as f:
        yield f
        assert f.violations == []


def test_sync_keeps_one_connection(fake):
    fake.add("kept")
    with Client(fake.socket_path, timeout=10) as c:
        for _ in range(200):
            c.health()
            assert c.get("kept").name == "kept"
        with pytest.raises(lensbox_client.SandboxNotFound):  # an error answer keeps the connection too
            c.get("absent")
        c.health()
    assert len(fake.requests) == 402
    assert fake.connections == 1, fake.connections


def test_sync_threads_share_a_small_pool(fake):
    c = Client(fake.socket_path, timeout=10)
    errors = []

    def work():
        try:
            for _ in range(50):
                c.health()
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert fake.connections <= 6, fake.connections  # at most one per thread at once, then reused
    before = fake.connections
    for _ in range(20):
        c.health()
    assert fake.connections == before
    c.close()


def test_async_keeps_one_connection(fake):
    async def main():
        async with AsyncClient(fake.socket_path, timeout=10) as c:
            for _ in range(200):
                await c.health()
            with pytest.raises(lensbox_client.SandboxNotFound):
                await c.get("absent")
            await c.health()
            return c.connections_opened

    assert asyncio.run(main()) == 1
    assert fake.connections == 1 and len(fake.requests) == 202


class OneShotServer:
    """Answers the first request on a connection with 200 (keep-alive), then reads the second request whole and
    closes without a byte of answer, as a daemon dying between reading a request and answering it would. Counts the
    requests it read, by method."""

    def __init__(self, path):
        self.path = path
        self.seen = []
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        self.sock.listen(8)
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def read_request(self, f):
        line = f.readline()
        if not line:
            return None
        n = 0
        while True:
            h = f.readline()
            if h in (b"\r\n", b""):
                break
            if h.lower().startswith(b"content-length:"):
                n = int(h.split(b":")[1])
        f.read(n)
        self.seen.append(line.split()[0].decode())
        return line

    def serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            f = conn.makefile("rb")
            if self.read_request(f):
                body = b'{"version":"x"}'
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                             % (len(body), body))
                self.read_request(f)
            f.close()
            conn.close()

    def close(self):
        self.sock.close()


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_retry_rule_after_a_silent_close(tmp_path, flavour):
    srv = OneShotServer(str(tmp_path / "s.sock"))
    try:
        if flavour == "sync":
            c = Client(srv.path, timeout=5)
            c.health()
            assert c.health() == {"version": "x"}  # GET on the dead kept-alive connection: sent again, answered
            assert c.connects_retried == 1
            with pytest.raises(lensbox_client.DaemonUnreachable):
                c.stop("sb")  # a POST that lensboxd may have acted on is not sent twice
        else:
            async def main():
                c = AsyncClient(srv.path, timeout=5)
                await c.health()
                assert await c.health() == {"version": "x"}
                assert c.connects_retried == 1
                with pytest.raises(lensbox_client.DaemonUnreachable):
                    await c.stop("sb")
                await c.close()
            asyncio.run(main())
        assert srv.seen.count("POST") == 1, srv.seen
        # connection 1: GET answered, GET closed silently; connection 2: the GET sent again, answered, then the POST
        # (on the kept-alive connection 2) closed silently and not sent again
        assert srv.seen == ["GET", "GET", "GET", "POST"], srv.seen
    finally:
        srv.close()


def test_every_documented_code_has_its_class():
    with open(os.path.join(SRC, "docs", "api.md"), encoding="utf-8") as f:
        text = f.read()
    table = text[text.index("| status | when | codes |"):text.index("A program that fails is **not**")]
    rows = [r.split("|") for r in table.splitlines()[2:] if r.startswith("|")]
    codes = {c for r in rows for c in re.findall(r"`([a-z_]+)`", r[3])}
    assert len(codes) >= 30, codes
    for code in codes:
        cls = lensbox_client.ERRORS.get(code)
        assert cls is not None and issubclass(cls, SandboxError), code
        e = lensbox_client.error_for(418, code, "m")
        assert type(e) is cls and e.code == code and e.status == 418
    assert type(lensbox_client.error_for(500, "from_a_newer_daemon", "m")) is SandboxError


@pytest.fixture(scope="module")
def d():
    with Daemon() as daemon:
        yield daemon


def test_sync_reconnects_after_restart(d):
    c = Client(d.socket, timeout=30)
    for _ in range(5):
        assert c.health()["can_run"] is True
    d.stop()
    d.start()
    assert c.health()["can_run"] is True  # the kept-alive connection died with the old lensboxd
    assert c.connects_retried == 1
    for _ in range(5):
        c.health()
    assert c.connects_retried == 1
    c.close()


def test_async_against_lensboxd(d):
    name = d.name("aio")

    async def main():
        async with AsyncClient(d.socket, timeout=60) as c:
            h = await c.health()
            assert h["can_run"] is True, h.get("why_not")
            r = await c.run(name, "python", "import sys; print(open('in.txt').read().upper()); sys.exit(3)",
                            files={"in.txt": b"kept alive"})
            assert r.exit_code == 3 and r.stdout == "KEPT ALIVE\n" and r.sandbox_created
            await c.write_file(name, "out/x.bin", bytes(range(256)) * 100)
            assert await c.read_file(name, "out/x.bin") == bytes(range(256)) * 100
            with pytest.raises(lensbox_client.FileTooLarge):
                await c.read_file(name, "out/x.bin", max_bytes=1000)
            listed = await c.files(name)
            assert {"in.txt", "out/x.bin"} <= {f.path for f in listed.files}
            assert name in [s.name for s in await c.list()]
            assert (await c.get(name)).runs == 1
            runs = await c.runs(name)
            assert runs and (await c.get_run(runs[0].id)).exit_code == 3
            imgs = await c.images()
            img = await c.get_image("python:3.12-slim")
            assert h["default_image"]["available"] and img.digest in [i.digest for i in imgs]
            assert "lensbox_runs_total" in await c.metrics()
            # concurrent requests on one client: each takes its own connection, then they are kept
            await asyncio.gather(*(c.health() for _ in range(8)))
            with pytest.raises(lensbox_client.SandboxNotFound):
                await c.get(d.name("nobody"))
            with pytest.raises(lensbox_client.OutOfRange):
                await c.ensure(d.name("big"), memory="1Ti")
            assert await c.delete(name) is True and await c.delete(name) is False
            opened = c.connections_opened
            # lensboxd restarts: the next GET goes on a new connection without the caller seeing it
            d.stop()
            d.start()
            assert (await c.health())["can_run"] is True
            return opened, c

    opened, c = asyncio.run(main())
    assert opened <= 9, opened  # one, plus at most 8 for the gather

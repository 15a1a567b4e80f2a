"""Ordinary programs that serve on the sandbox's own loopback, through a real lensboxd (tier off, the default image):
each one is a whole client/server conversation inside one run. Before issue 16 every one of these failed with
EACCES (Landlock refused TCP bind and connect). Also: ids and CPU count as programs see them.
"""
import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from lensbox_testlib.lensboxd import Daemon  # noqa: E402


@pytest.fixture(scope="module")
def d():
    with Daemon() as daemon:
        yield daemon


def ok(d, name, source, **fields):
    run = d.ok_run(d.name(name), source, **fields)
    assert run["exit_code"] == 0 and not run["timed_out"], run
    return run["stdout"]


HTTP_SERVER = r"""
import http.server, threading, urllib.request
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 8000), http.server.SimpleHTTPRequestHandler)
threading.Thread(target=srv.serve_forever, daemon=True).start()
open("/sandbox/hello.txt", "w").write("hello from the sandbox")
print(urllib.request.urlopen("http://127.0.0.1:8000/hello.txt", timeout=10).read().decode())
srv.shutdown()
"""


def test_http_server_and_urllib_in_one_run(d):
    assert ok(d, "http", HTTP_SERVER) == "hello from the sandbox\n"


def test_http_server_on_port_80_and_localhost_name(d):
    src = HTTP_SERVER.replace('("127.0.0.1", 8000)', '("0.0.0.0", 80)').replace("127.0.0.1:8000", "localhost:80")
    assert ok(d, "http80", src) == "hello from the sandbox\n"


ASYNCIO = r"""
import asyncio
async def handle(reader, writer):
    data = await reader.readline()
    writer.write(data.upper()); await writer.drain(); writer.close()
async def main():
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"ping\n"); await writer.drain()
    print((await reader.readline()).decode().strip())
    writer.close(); server.close(); await server.wait_closed()
asyncio.run(main())
"""


def test_asyncio_server_and_client(d):
    assert ok(d, "aio", ASYNCIO) == "PING\n"


SOCKETSERVER = r"""
import socket, socketserver, threading
class Echo(socketserver.StreamRequestHandler):
    def handle(self):
        self.wfile.write(self.rfile.readline().strip()[::-1] + b"\n")
class UEcho(socketserver.BaseRequestHandler):
    def handle(self):
        data, sock = self.request
        sock.sendto(data.upper(), self.client_address)
tcp = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Echo)
udp = socketserver.ThreadingUDPServer(("127.0.0.1", 0), UEcho)
for s in (tcp, udp):
    threading.Thread(target=s.serve_forever, daemon=True).start()
with socket.create_connection(tcp.server_address, timeout=10) as c:
    c.sendall(b"abc\n"); print(c.makefile().readline().strip())
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.settimeout(10)
u.sendto(b"datagram", udp.server_address); print(u.recvfrom(100)[0].decode())
tcp.shutdown(); udp.shutdown()
"""


def test_socketserver_tcp_and_udp(d):
    assert ok(d, "ss", SOCKETSERVER) == "cba\nDATAGRAM\n"


MULTIPROCESSING = r"""
import multiprocessing as mp, threading
from multiprocessing.connection import Client, Listener
from multiprocessing.managers import SyncManager
def serve(listener):
    with listener.accept() as conn:
        conn.send(conn.recv() * 2)
if __name__ == "__main__":
    with Listener(("127.0.0.1", 0), authkey=b"k") as listener:
        t = threading.Thread(target=serve, args=(listener,)); t.start()
        with Client(listener.address, authkey=b"k") as c:
            c.send(21); print(c.recv())
        t.join()
    m = SyncManager(address=("127.0.0.1", 0), authkey=b"m"); m.start()
    shared = m.dict(); shared["x"] = 1
    with mp.get_context("spawn").Pool(2) as pool:
        print(sum(pool.map(abs, [-1, -2, -3])), shared["x"], sorted(m.list([3, 1, 2])))
    m.shutdown()
"""


def test_multiprocessing_listener_client_and_manager_over_tcp(d):
    assert ok(d, "mp", MULTIPROCESSING) == "42\n6 1 [1, 2, 3]\n"


IDS_AND_CPUS = r"""
import json, os, subprocess
out = {"cpu_count": os.cpu_count(), "affinity": len(os.sched_getaffinity(0)),
       "nproc": int(subprocess.run(["nproc"], capture_output=True, text=True).stdout)}
for name, f in (("setuid_nobody", lambda: os.setuid(65534)), ("setgid_nogroup", lambda: os.setgid(65534)),
                ("setuid_root", lambda: os.setuid(0)), ("chown_nobody", lambda: os.chown("/sandbox", 65534, 65534))):
    try:
        f(); out[name] = "ok"
    except OSError as e:
        out[name] = e.errno
print(json.dumps(out))
"""


@pytest.mark.parametrize("cpu", [1, 2])
def test_cpu_count_follows_the_limit_and_ids_answer_eperm(d, cpu):
    host = len(os.sched_getaffinity(0))
    want = min(cpu, host)
    out = json.loads(ok(d, f"ids{cpu}", IDS_AND_CPUS, sandbox={"cpu": str(cpu)}))
    assert (out["cpu_count"], out["affinity"], out["nproc"]) == (want, want, want), out
    for k in ("setuid_nobody", "setgid_nogroup", "setuid_root", "chown_nobody"):
        assert out[k] == 1, (k, out)  # EPERM, as on Linux; an unmapped id would answer EINVAL (22)


ZEROMQ = r"""
import threading, zmq
ctx = zmq.Context()
rep = ctx.socket(zmq.REP)
port = rep.bind_to_random_port("tcp://127.0.0.1")
def serve():
    rep.send(rep.recv().upper())
t = threading.Thread(target=serve); t.start()
req = ctx.socket(zmq.REQ); req.connect(f"tcp://127.0.0.1:{port}")
req.send(b"ping"); print(req.recv().decode())
t.join(); req.close(); rep.close(); ctx.term()
"""


def test_zeromq_req_rep_over_tcp_loopback(d):
    """Jupyter kernels and Dask speak ZeroMQ over TCP on loopback: REQ/REP with Debian's python3-zmq, in an image
    made by the default recipe plus that package (images/recipes/python --with python3-zmq)."""
    from lensbox_testlib import images
    images.import_variant_image(d.images, images.ZMQ)
    out = ok(d, "zmq", ZEROMQ, sandbox={"image": images.variant_image_name(images.ZMQ)})
    assert out == "PING\n"

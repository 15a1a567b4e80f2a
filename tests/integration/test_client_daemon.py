"""The Python client (clients/python/lensbox_client) against a real lensboxd on a temporary socket and state
directory: every method, the errors it raises with the daemon's own codes, and one client shared by many threads."""

import os
import sys
import threading

import pytest

SRC = os.environ.get("LENSBOX_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path[:0] = [os.path.join(SRC, "clients", "python"), os.path.join(SRC, "tests")]

from lensbox_client import Client, SandboxError  # noqa: E402
from lensbox_testlib import sealed  # noqa: E402
from lensbox_testlib.lensboxd import Daemon  # noqa: E402

# The network-change test needs networking on; a sealed namespace keeps it off the machine's real network.
sealed.enter()

MiB = 1024 * 1024


@pytest.fixture(scope="module")
def d():
    with Daemon(settings={"networking": "on"}) as daemon:
        yield daemon


@pytest.fixture
def c(d):
    return Client(d.socket, timeout=60)


def raises(fn, status, code):
    with pytest.raises(SandboxError) as e:
        fn()
    assert (e.value.status, e.value.code) == (status, code), e.value
    assert e.value.message.endswith("."), "the daemon's sentence is passed on"
    return e.value


def test_health(c):
    h = c.health()
    assert h["can_run"] is True, h.get("why_not")
    assert h["version"] and h["host"]["landlock_abi"] >= 1


def test_ensure_get_list(d, c):
    n = d.name("ensure")
    r = c.ensure(n, network="off", cpu="0.5", memory="256Mi", idle_minutes=5, keep_hours=2)
    assert r.created is True and r.recreated is None
    sb = r.sandbox
    assert sb.name == n and sb.state == "stopped" and sb.runs == 0
    assert sb.spec["cpu"] == "0.5" and sb.spec["memory"] == "256Mi" and sb.spec["idle_minutes"] == 5
    assert sb.deletes_at is not None and sb.host_uid is not None
    again = c.ensure(n, network="off")
    assert again.created is False and again.recreated is None
    assert c.get(n).spec["memory"] == "256Mi"
    assert n in [s.name for s in c.list()]


def test_run_with_files_and_file_methods(d, c):
    n = d.name("files")
    blob = bytes(range(256)) * 64
    r = c.run(n, "python",
              "import os\n"
              "data = open('in/blob.bin', 'rb').read()\n"
              "print(len(data), open('naïve name.txt').read())\n"
              "os.makedirs('out', exist_ok=True)\n"
              "open('out/result.txt', 'w').write(str(sum(data)))\n",
              files={"in/blob.bin": blob, "naïve name.txt": "héllo".encode()}, timeout=30)
    assert r.exit_code == 0, r.stderr
    assert r.stdout == "16384 héllo\n"
    assert r.sandbox_created is True
    listing = c.files(n)
    paths = {e.path: e for e in listing.files}
    assert paths["in/blob.bin"].size == len(blob) and paths["in/blob.bin"].type == "file"
    assert paths["out"].type == "directory" and "naïve name.txt" in paths
    assert listing.more == 0
    assert [e.path for e in c.files(n, "out").files] == ["out/result.txt"]
    assert c.read_file(n, "out/result.txt") == str(sum(blob)).encode()
    assert c.read_file(n, "in/blob.bin") == blob
    c.write_file(n, "later.txt", b"written later")
    assert c.run(n, "bash", "cat later.txt").stdout == "written later"


def test_failures_are_results(d, c):
    n = d.name("fail")
    r = c.run(n, "python", "import sys\nprint('partial')\nsys.exit(3)")
    assert (r.exit_code, r.stdout, r.ok) == (3, "partial\n", False)
    r = c.run(n, "bash", "sleep 30", timeout=1)
    assert r.timed_out and r.exit_code is None and r.message and "time limit" in r.message


def test_recreated_when_the_network_changes(d, c):
    n = d.name("recreate")
    c.run(n, "bash", "echo keep > f.txt", spec={"network": "off"})
    assert c.read_file(n, "f.txt") == b"keep\n"
    r = c.run(n, "bash", "test ! -e f.txt && cat g.txt", files={"g.txt": b"new"}, spec={"network": "packages"})
    assert r.recreated, "changing the network replaces the sandbox and says so"
    assert (r.exit_code, r.stdout) == (0, "new"), "the old file is gone, the uploaded one is there"
    # leaving the network out (the daemon's default is off) is not a change: nothing is replaced
    assert c.ensure(n).recreated is None
    r = c.run(n, "bash", "cat g.txt h.txt", files={"h.txt": b"+"})
    assert (r.recreated, r.stdout) == (None, "new+")
    assert c.get(n).spec["network"] == "packages"


def test_daemon_errors_reach_the_caller(d, c, tmp_path):
    raises(lambda: c.get(d.name("nobody")), 404, "sandbox_not_found")
    n = d.name("errs")
    c.run(n, "bash", "mkfifo pipe; mkdir dir; truncate -s 30M sparse.bin")
    raises(lambda: c.read_file(n, "missing.txt"), 404, "file_not_found")
    raises(lambda: c.read_file(n, "pipe"), 422, "not_a_regular_file")
    raises(lambda: c.read_file(n, "dir"), 422, "not_a_regular_file")
    e = raises(lambda: c.read_file(n, "sparse.bin"), 413, "file_too_large")
    assert str(30 * MiB) in e.message
    raises(lambda: c.run(n, "python", "1", spec={"memory": "1Ti"}), 422, "out_of_range")
    raises(lambda: c.ensure(n, network="internet"), 422, "invalid_value")
    raises(lambda: c.runs(n, limit=5000), 422, "out_of_range")


def test_stop_delete_and_ledger(d, c):
    n = d.name("life")
    c.run(n, "bash", "echo x > kept.txt")
    assert c.get(n).state == "running"
    assert c.stop(n) is True
    assert c.get(n).state == "stopped"
    assert c.stop(n) is False
    r = c.run(n, "bash", "cat kept.txt")
    assert r.sandbox_started is True and r.stdout == "x\n", "files survive a stop"
    rows = c.runs(n)
    assert [row.sandbox for row in rows] == [n, n]
    assert rows[0].id > rows[1].id and rows[0].outcome == "ok"
    assert c.get_run(rows[1].id).id == rows[1].id
    raises(lambda: c.get_run("0" * 26), 404, "run_not_found")
    assert c.delete(n) is True
    raises(lambda: c.get(n), 404, "sandbox_not_found")
    assert c.delete(n) is False
    assert len(c.runs(n)) == 2, "the ledger keeps a deleted sandbox's runs"


def test_metrics(c):
    text = c.metrics()
    assert "lensbox_" in text


def test_one_client_many_threads(d, c):
    names = [d.name(f"par{i}") for i in range(8)]
    errors = []

    def work(name):
        try:
            r = c.run(name, "python", "import os\nprint(open('me.txt').read())", files={"me.txt": name.encode()})
            assert r.exit_code == 0 and r.stdout == name + "\n", r
        except Exception as e:  # gathered and asserted below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(n,)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for n in names:
        c.delete(n)


def test_cancelling_an_async_run_stops_it(d):
    """Leaving run() early closes the connection, and lensboxd stops the run: the program (which would sleep 50 s)
    is gone within seconds and the ledger says why (docs/api.md)."""
    import asyncio
    import time
    from lensbox_client.aio import AsyncClient

    n = d.name("cancel")
    sync = Client(d.socket, timeout=60)
    sync.run(n, "python", "print(0)")

    async def main():
        box = AsyncClient(d.socket, timeout=60)
        task = asyncio.ensure_future(box.run(n, "python", "open('/sandbox/began', 'w').write('1')\n"
                                                         "import time\ntime.sleep(50)\n"))
        for _ in range(300):
            if any(f.path == "began" for f in sync.files(n).files):
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError("the run never began")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await box.close()
    asyncio.run(main())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        runs = sync.runs(n)
        if len(runs) == 2:
            break
        time.sleep(0.2)
    assert len(runs) == 2, "the run was not stopped within 10 s of the cancel"
    assert runs[0].exit_code is None and runs[0].signal == 9, runs[0]
    assert runs[0].message == "stopped: the client went away before the run ended", runs[0]

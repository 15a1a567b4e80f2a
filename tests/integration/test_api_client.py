"""Every endpoint through the Python client (clients/python, what Lens's backend uses) against a real lensboxd:
ensure, get, list, run with files and a spec, files, read_file, write_file, runs, stop, delete, health, metrics,
and lensboxd's errors arriving as SandboxError with the server's status, code and message."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from lensbox_testlib.lensboxd import Daemon  # noqa: E402
from lensbox_client import SandboxError  # noqa: E402  (on the path once lensbox_testlib.lensboxd is imported)


@pytest.fixture(scope="module")
def d():
    with Daemon() as daemon:
        yield daemon


def test_lens_conversation_through_the_client(d):
    c = d.client()
    n = d.name("lens-chat-7")
    assert c.health()["can_run"] is True
    ens = c.ensure(n, memory="1Gi", idle_minutes=10)
    assert ens.created is True and ens.recreated is None
    assert ens.sandbox.state == "stopped" and ens.sandbox.spec["memory"] == "1Gi"
    assert c.ensure(n, memory="1Gi").created is False

    res = c.run(n, "python", "import csv\nrows = list(csv.reader(open('data.csv')))\nprint(len(rows))\n"
                "open('out/summary.txt', 'w').write(str(rows))", files={"data.csv": b"a,b\n1,2\n3,4\n",
                                                                    "out/.keep": b""})
    # ensure created it stopped; uploads write a stopped sandbox's storage without starting it,
    # so the run itself starts it
    assert res.ok and res.stdout == "3\n" and res.sandbox_created is False and res.sandbox_started is True
    assert res.message is None and len(res.id) == 26

    listing = c.files(n)
    assert [(f.path, f.type) for f in listing.files] == [("data.csv", "file"), ("out", "directory"),
                                                          ("out/.keep", "file"), ("out/summary.txt", "file")]
    assert listing.more == 0
    assert c.read_file(n, "out/summary.txt") == b"[['a', 'b'], ['1', '2'], ['3', '4']]"
    assert c.write_file(n, "notes/n.txt", b"note")["size"] == 4

    sb = c.get(n)
    assert sb.state == "running" and sb.runs == 1 and sb.image_digest.startswith("sha256:")
    assert n in [s.name for s in c.list()]
    assert [r.id for r in c.runs(n)] == [res.id]

    assert c.stop(n) is True
    assert c.stop(n) is False
    bash = c.run(n, "bash", "cat notes/n.txt; exit 5")
    assert bash.exit_code == 5 and bash.stdout == "note" and bash.sandbox_started is True
    assert bash.message == "exited with code 5"

    # the conversation's network changes: a fresh sandbox, said so
    again = c.run(n, "bash", "ls", spec={"network": "off", "image": "python:3.12-slim"})
    assert again.recreated is None
    assert "lensbox_runs_total" in c.metrics()

    assert c.delete(n) is True
    assert c.delete(n) is False
    with pytest.raises(SandboxError) as e:
        c.get(n)
    assert (e.value.status, e.value.code) == (404, "sandbox_not_found")


def test_server_errors_reach_the_client(d):
    c = d.client()
    n = d.name("errs")
    with pytest.raises(SandboxError) as e:
        c.run(n, "python", "print(1)", spec={"memory": "1Ti"})
    assert (e.value.status, e.value.code) == (422, "out_of_range")
    with pytest.raises(SandboxError) as e:
        c.run(n, "python", "print(1)", spec={"image": "python:0.0"})
    assert (e.value.status, e.value.code) == (503, "image_unavailable")
    with pytest.raises(SandboxError) as e:  # nothing was created for the missing image
        c.get(n)
    assert (e.value.status, e.value.code) == (404, "sandbox_not_found")
    c.run(n, "bash", "true")
    with pytest.raises(SandboxError) as e:
        c.read_file(n, "missing.txt")
    assert (e.value.status, e.value.code) == (404, "file_not_found")
    c.run(n, "bash", "mkfifo p")
    with pytest.raises(SandboxError) as e:
        c.read_file(n, "p")
    assert (e.value.status, e.value.code) == (422, "not_a_regular_file")

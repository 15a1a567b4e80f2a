"""Streamed progress of POST /v1/images/pull and /v1/images/import (Accept: application/x-ndjson): progress lines
(phase, layer, done, total) from a slow registry front on loopback (test_image_pull's Front) and then the result or
the error object as the last line; the same requests without the header answer one JSON object as before; an early
refusal is still a plain JSON error with its status; a client that hangs up mid-pull cancels it, and the store is
left with no temporary tree, no partial blob, no image and no name. Nothing leaves the loopback interface."""

import asyncio
import json
import os
import sys
import tarfile
import threading
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("LENSBOX_SOURCE_DIR", os.path.join(HERE, "..", ".."))
sys.path[:0] = [os.path.join(SRC, "clients", "python"), os.path.join(HERE, ".."), HERE]

from lensbox_client import SandboxError  # noqa: E402
from lensbox_client.aio import AsyncClient  # noqa: E402

from lensbox_testlib import oci  # noqa: E402
from lensbox_testlib.lensboxd import Daemon, UnixHTTPConnection  # noqa: E402
from lensbox_testlib.oci import f, tar_layer  # noqa: E402
from test_api_images import store_dir, tiny_layout  # noqa: E402
from test_image_pull import Front  # noqa: E402

NDJSON = {"Accept": "application/x-ndjson", "Content-Type": "application/json"}


@pytest.fixture(scope="module", autouse=True)
def _root():
    if os.geteuid() != 0:
        pytest.fail("run as root")


def slow_layout(path, size):
    layer = tar_layer([f("usr/bin/python3", b"", 0o755), f("bin/bash", b"", 0o755), f("big", os.urandom(size))])
    return oci.write_layout(str(path), [layer], ref_name="1")


def open_stream(d, path, body, headers=NDJSON, timeout=120):
    conn = UnixHTTPConnection(d.socket, timeout=timeout)
    conn.request("POST", path, body=json.dumps(body).encode(), headers=headers)
    return conn, conn.getresponse()


def read_lines(resp):
    lines = []
    for raw in resp:
        assert raw.endswith(b"\n"), raw
        lines.append(json.loads(raw))
    return lines


def store_leftovers(images_dir):
    """Everything a pull may leave in the store besides verified blobs: temporary trees, partial blobs, images and
    names."""
    found = []
    for sub in ("tmp", "images", "names"):
        p = os.path.join(images_dir, sub)
        if os.path.isdir(p):
            found += [f"{sub}/{n}" for n in os.listdir(p)]
    blobs = os.path.join(images_dir, "layout", "blobs", "sha256")
    if os.path.isdir(blobs):
        found += [f"blobs/{n}" for n in os.listdir(blobs) if n.endswith(".partial")]
    return found


def test_pull_streams_progress_then_the_image(tmp_path):
    lay = tmp_path / "lay"
    digests = slow_layout(lay, 1 << 20)
    big = digests["layers"][0]
    big_size = os.path.getsize(oci.blob_path(str(lay), big))
    front = Front(str(lay), "127.0.0.1", auth=False, slow=True)
    try:
        with Daemon(images_dir=store_dir(tmp_path), settings={"insecure_registries": f"{front.host}, 127.0.0.1:1"}) as d:
            ref = f"{front.host}/lbtest/progress:1"
            conn, resp = open_stream(d, "/v1/images/pull", {"ref": ref})
            assert resp.status == 200
            assert resp.getheader("Content-Type") == "application/x-ndjson"
            assert resp.getheader("Transfer-Encoding") == "chunked"
            lines = read_lines(resp)
            conn.close()
            *progress, last = lines
            assert progress[0] == {"phase": "resolving", "layer": None, "done": 0, "total": None}, progress[0]
            assert all(set(p) == {"phase", "layer", "done", "total"} for p in progress), progress
            down = [p for p in progress if p["phase"] == "downloading" and p["layer"] == big]
            # 1 MiB dribbled over ~1.3 s, at most one line per 100 ms plus the end: several lines, rising to the end
            assert len(down) >= 4, down
            assert all(p["total"] == big_size and 0 < p["done"] <= big_size for p in down), down
            assert [p["done"] for p in down] == sorted(p["done"] for p in down)
            assert down[-1]["done"] == big_size
            unpack = [p for p in progress if p["phase"] == "unpacking" and p["layer"] == big]
            assert unpack[0]["done"] == 0 and unpack[-1]["done"] == big_size, unpack
            phases = [p["phase"] for p in progress]
            assert phases.index("unpacking") > max(i for i, p in enumerate(phases) if p == "downloading")
            assert last["image"]["digest"] == digests["config"] and last["image"]["names"] == [ref], last
            assert last["duration_ms"] >= 0

            # without the header: one JSON object, as before
            status, headers, data = d.raw("POST", "/v1/images/pull", {"ref": ref}, timeout=600)
            assert status == 200 and headers["Content-Type"] == "application/json", (status, headers)
            body = json.loads(data)
            assert body["image"]["digest"] == digests["config"] and "phase" not in body

            # nothing listens on the registry's port: progress began, so the error is the last line
            conn, resp = open_stream(d, "/v1/images/pull", {"ref": "127.0.0.1:1/lbtest/nosuch:1"})
            assert resp.status == 200
            *progress, last = read_lines(resp)
            conn.close()
            assert progress and all(p["phase"] == "resolving" for p in progress), progress
            assert last["error"]["code"] == "registry_error" and "nosuch" in last["error"]["message"], last
            assert last["status"] == 502, last
            t0 = time.monotonic()  # the stream's log line comes as libmicrohttpd ends the response, just after
            while not any("stream failed" in ln and "status=502" in ln for ln in d.read_log().splitlines()):
                assert time.monotonic() - t0 < 5, d.read_log()[-2000:]
                time.sleep(0.05)

            # refused before anything starts: the plain JSON error with its status, as without the header
            conn, resp = open_stream(d, "/v1/images/pull", {"ref": "sha256:" + "0" * 64})
            assert resp.status == 422 and resp.getheader("Content-Type") == "application/json"
            assert json.loads(resp.read())["error"]["code"] == "invalid_value"
            conn.close()
    finally:
        front.shutdown()


def test_hanging_up_cancels_the_pull_and_leaves_the_store_clean(tmp_path):
    lay = tmp_path / "lay"
    digests = slow_layout(lay, 4 << 20)  # ~5 s at the front's pace
    big = digests["layers"][0]
    front = Front(str(lay), "127.0.0.1", auth=False, slow=True)
    images_dir = store_dir(tmp_path)
    try:
        with Daemon(images_dir=images_dir, settings={"insecure_registries": front.host}) as d:
            ref = f"{front.host}/lbtest/cancel:1"
            conn, resp = open_stream(d, "/v1/images/pull", {"ref": ref})
            assert resp.status == 200
            while True:
                line = json.loads(resp.readline())
                if line["phase"] == "downloading" and line["layer"] == big and line["done"] > 0:
                    break
            assert line["done"] < line["total"], "the download ended before the hang-up: nothing was cancelled"
            partial = os.path.join(images_dir, "layout", "blobs", "sha256", big[7:] + ".partial")
            assert os.path.exists(partial), "the download in progress has its partial blob"
            t0 = time.monotonic()
            resp.close()
            conn.close()  # the client goes away mid-download

            def cancelled():
                return [ln for ln in d.read_log().splitlines()
                        if f"image={ref}" in ln and "pulling the image failed" in ln]
            while not cancelled() and time.monotonic() - t0 < 20:
                time.sleep(0.05)
            took = time.monotonic() - t0
            log = cancelled()
            assert log and "cancelled" in log[0], d.read_log()[-3000:]
            assert took < 2.0, f"the pull went on {took:.2f} s after the client left"
            # the access log's second line for the stream says how it ended
            t0 = time.monotonic()
            while not [ln for ln in d.read_log().splitlines() if "stream cancelled by the client" in ln]:
                assert time.monotonic() - t0 < 5, d.read_log()[-2000:]
                time.sleep(0.05)
            ended = [ln for ln in d.read_log().splitlines() if "stream cancelled by the client" in ln]
            assert ended and "path=/v1/images/pull" in ended[0] and "status=0" in ended[0], d.read_log()[-2000:]
            assert store_leftovers(images_dir) == [], store_leftovers(images_dir)
            assert not os.path.exists(os.path.join(images_dir, "layout", "blobs", "sha256", big[7:]))
            status, body = d.request("GET", "/v1/images")
            assert status == 200 and body["images"] == [], body
            assert d.request("GET", "/v1/health", timeout=10)[0] == 200

            # the next pull of it starts over and completes
            status, body = d.request("POST", "/v1/images/pull", {"ref": ref}, timeout=600)
            assert status == 200 and body["image"]["digest"] == digests["config"], body
            assert [x for x in store_leftovers(images_dir) if not x.startswith(("images/", "names/"))] == []
    finally:
        front.shutdown()


def test_import_streams_progress_then_the_image(tmp_path):
    lay = tmp_path / "lay"
    digests = tiny_layout(lay, "progress-import")
    with Daemon(images_dir=store_dir(tmp_path)) as d:
        conn, resp = open_stream(d, "/v1/images/import", {"path": str(lay), "name": "lbtest/imp:1"})
        assert resp.status == 200 and resp.getheader("Content-Type") == "application/x-ndjson"
        *progress, last = read_lines(resp)
        conn.close()
        assert progress[0]["phase"] == "resolving", progress
        layer = digests["layers"][0]
        assert [(p["phase"], p["layer"], p["done"] == p["total"]) for p in progress[1:]] == [
            ("unpacking", layer, False), ("unpacking", layer, True)], progress
        assert last["image"]["digest"] == digests["config"], last

        # the same layout as a tar: its blobs are extracted first
        lay2 = tmp_path / "lay2"
        digests2 = tiny_layout(lay2, "progress-import-tar")
        archive = tmp_path / "lay2.tar"
        with tarfile.open(archive, "w") as t:
            for entry in sorted(os.listdir(lay2)):
                t.add(lay2 / entry, arcname=entry)
        conn, resp = open_stream(d, "/v1/images/import", {"path": str(archive)})
        *progress, last = read_lines(resp)
        conn.close()
        assert [p["phase"] for p in progress] == ["resolving", "extracting", "unpacking", "unpacking"], progress
        assert progress[1]["total"] == os.path.getsize(archive) and progress[1]["layer"] is None, progress
        assert last["image"]["digest"] == digests2["config"], last

        # a path that is not there: refused by the core before anything starts, the plain 404
        conn, resp = open_stream(d, "/v1/images/import", {"path": str(tmp_path / "nosuch")})
        assert resp.status == 404 and json.loads(resp.read())["error"]["code"] == "path_not_found"
        conn.close()


def wait_cancelled(d, ref, t0, seconds=20):
    while time.monotonic() - t0 < seconds:
        log = [ln for ln in d.read_log().splitlines() if f"image={ref}" in ln and "pulling the image failed" in ln]
        if log:
            return log[0], time.monotonic() - t0
        time.sleep(0.05)
    return None, time.monotonic() - t0


def test_python_clients_report_progress_and_cancel(tmp_path):
    """Client and AsyncClient pull_image/import_image with a progress callback get every step, then "done"; a
    callback that raises (as Ctrl-C would) closes the connection and lensboxd cancels, leaving the store clean."""
    lay = tmp_path / "lay"
    digests = slow_layout(lay, 1 << 20)
    big = digests["layers"][0]
    big_size = os.path.getsize(oci.blob_path(str(lay), big))
    slow = tmp_path / "slow"
    slow_digests = slow_layout(slow, 4 << 20)
    front = Front(str(lay), "127.0.0.1", auth=False, slow=True)
    slow_front = Front(str(slow), "127.0.0.1", auth=False, slow=True)
    images_dir = store_dir(tmp_path)
    try:
        settings = {"insecure_registries": f"{front.host}, {slow_front.host}"}
        with Daemon(images_dir=images_dir, settings=settings) as d:
            c = d.client()
            steps = []
            r = c.pull_image(f"{front.host}/lbtest/cli:1", progress=steps.append)
            assert r.image.digest == digests["config"]
            assert steps[0].phase == "resolving" and steps[-1].phase == "done", steps
            down = [p for p in steps if p.phase == "downloading" and p.layer == big]
            assert len(down) >= 4 and down[-1].done_bytes == big_size == down[-1].total_bytes, down
            assert any(p.phase == "unpacking" and p.layer == big for p in steps), steps

            # the async client, on an import this time, and its errors with the daemon's status
            tiny = tmp_path / "tiny"
            tiny_digests = tiny_layout(tiny, "aio-progress")

            async def aio():
                a = AsyncClient(d.socket)
                got = []
                res = await a.import_image(tiny, "lbtest/aio:1", progress=got.append)
                with pytest.raises(SandboxError) as e:
                    await a.pull_image("127.0.0.1:1/lbtest/none:1", progress=got.append)
                await a.close()
                return res, got, e.value
            res, got, e = asyncio.run(aio())
            assert res.image.digest == tiny_digests["config"]
            assert [p.phase for p in got[:4]] == ["resolving", "unpacking", "unpacking", "done"], got
            assert (e.status, e.code) == (502, "registry_error"), e

            # a callback that raises mid-download: the pull is cancelled and nothing half-written stays
            ref = f"{slow_front.host}/lbtest/stop:1"

            class Stop(Exception):
                pass

            def stop_at_bytes(p):
                if p.phase == "downloading" and p.done_bytes > 0:
                    raise Stop

            with pytest.raises(Stop):
                c.pull_image(ref, progress=stop_at_bytes)
            line, took = wait_cancelled(d, ref, time.monotonic())
            assert line and "cancelled" in line, d.read_log()[-2000:]
            assert [x for x in store_leftovers(images_dir) if "stop" in x or slow_digests["config"][7:] in x
                    or x.startswith("tmp/") or x.endswith(".partial")] == []
            assert ref not in [n for i in c.images() for n in i.names]

            # an asyncio task cancelled mid-download: the same
            ref = f"{slow_front.host}/lbtest/task:1"

            async def cancel_task():
                a = AsyncClient(d.socket)
                started = asyncio.Event()

                def seen(p):
                    if p.phase == "downloading" and p.done_bytes > 0:
                        started.set()
                task = asyncio.create_task(a.pull_image(ref, progress=seen))
                await asyncio.wait_for(started.wait(), 30)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                await a.close()
                return time.monotonic()
            line, took = wait_cancelled(d, ref, asyncio.run(cancel_task()))
            assert line and "cancelled" in line and took < 2.0, (took, d.read_log()[-2000:])
            assert [x for x in store_leftovers(images_dir) if x.startswith("tmp/") or x.endswith(".partial")] == []
    finally:
        front.shutdown()
        slow_front.shutdown()


def test_sigterm_lets_a_streamed_pull_finish(tmp_path):
    """An orderly stop waits for requests in progress: a streamed pull goes on to its last line, then lensboxd
    exits 0."""
    lay = tmp_path / "lay"
    digests = slow_layout(lay, 2 << 20)  # ~2.6 s at the front's pace
    big = digests["layers"][0]
    front = Front(str(lay), "127.0.0.1", auth=False, slow=True)
    try:
        with Daemon(images_dir=store_dir(tmp_path), settings={"insecure_registries": front.host}) as d:
            conn, resp = open_stream(d, "/v1/images/pull", {"ref": f"{front.host}/lbtest/term:1"})
            while True:
                line = json.loads(resp.readline())
                if line["phase"] == "downloading" and line["layer"] == big and line["done"] > 0:
                    break
            assert line["done"] < line["total"]
            stopper = threading.Thread(target=lambda: setattr(d, "rc", d.stop(timeout=90)))
            stopper.start()
            *_, last = read_lines(resp)
            conn.close()
            stopper.join()
            assert last["image"]["digest"] == digests["config"], last
            assert d.rc == 0, d.read_log()[-2000:]
    finally:
        front.shutdown()


def test_a_pull_waiting_for_another_of_its_reference_streams_too(tmp_path):
    """Two streamed pulls of one reference at once: the second waits for the first (one download), and both answer
    ndjson, starting with `resolving` and ending with the image."""
    lay = tmp_path / "lay"
    digests = slow_layout(lay, 1 << 20)
    front = Front(str(lay), "127.0.0.1", auth=False, slow=True)
    try:
        with Daemon(images_dir=store_dir(tmp_path), settings={"insecure_registries": front.host}) as d:
            ref = f"{front.host}/lbtest/twice:1"
            results = []

            def one():
                conn, resp = open_stream(d, "/v1/images/pull", {"ref": ref})
                results.append((resp.getheader("Content-Type"), read_lines(resp)))
                conn.close()
            threads = [threading.Thread(target=one) for _ in range(2)]
            for t in threads:
                t.start()
                time.sleep(0.2)
            for t in threads:
                t.join()
            assert [ct for ct, _ in results] == ["application/x-ndjson"] * 2, results
            for _, lines in results:
                assert lines[0]["phase"] == "resolving" and lines[-1]["image"]["digest"] == digests["config"], lines
            big = digests["layers"][0]
            assert sum(1 for path, _ in front.requests if path.endswith("/blobs/" + big)) == 1, front.requests
    finally:
        front.shutdown()

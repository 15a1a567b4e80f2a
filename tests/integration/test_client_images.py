"""The Python client's image methods (images, get_image, pull_image, import_image, delete_image) against a real
lensboxd: the Image objects it builds from the daemon's answers, lensboxd's refusals arriving as SandboxError with
the daemon's status, code and sentence (404 image_not_found, 409 image_in_use, 403 forbidden, 422 invalid_image,
502 registry_error), the references and paths it refuses itself, a pull that outlasts the client's ordinary
timeout, and the README's image example run as written. The shared test store is only read; imports, pulls and
removals use a store of each test's own. Pulls come from Debian's docker-registry on loopback (test_api_images'
fixture) or test_image_pull's registry front on 127.0.0.1: nothing leaves the loopback interface."""

import contextlib
import io
import os
import re
import socket
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("LENSBOX_SOURCE_DIR", os.path.join(HERE, "..", ".."))
sys.path[:0] = [os.path.join(SRC, "clients", "python"), os.path.join(SRC, "tests"), HERE]

from lensbox_client import Client, SandboxError  # noqa: E402
from lensbox_testlib import oci  # noqa: E402
from lensbox_testlib.images import default_image_archive, import_default_image  # noqa: E402
from lensbox_testlib.lensboxd import DEFAULT_IMAGE, Daemon  # noqa: E402
from lensbox_testlib.oci import f, tar_layer  # noqa: E402
from test_api_images import _tools, registry, store_dir, tiny_layout  # noqa: E402,F401  (_tools, registry: fixtures)
from test_image_pull import Front, push  # noqa: E402

DEFAULT_FULL = "docker.io/library/" + DEFAULT_IMAGE


def raises(fn, status, code):
    with pytest.raises(SandboxError) as e:
        fn()
    assert (e.value.status, e.value.code) == (status, code), e.value
    return e.value


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_shared_default_image(tmp_path):
    """The store every test daemon shares holds the default image: listed and inspected by name, digest and
    prefix, read only."""
    with Daemon() as d:
        c = d.client()
        listed = [i for i in c.images() if DEFAULT_FULL in i.names]
        assert len(listed) == 1, [i.names for i in c.images()]
        img = listed[0]
        assert img.digest.startswith("sha256:") and len(img.digest) == 71
        assert img.has_python3 and img.has_bash and img.warning is None
        assert img.size_bytes > 50_000_000 and img.size.endswith("Mi")
        assert img.os == "linux" and img.architecture and img.in_use == 0
        assert img.imported_at and img.last_used
        assert img.env is None and img.rootfs is None, "the list leaves out what only inspect gives"

        full = c.get_image(DEFAULT_IMAGE)
        assert full.digest == img.digest and full.names == img.names and full.name == img.names[0]
        assert "LANG=C.UTF-8" in full.env and any(e.startswith("PATH=") for e in full.env)
        assert full.working_dir == "/sandbox"
        assert full.rootfs == os.path.join(d.images, "images", img.digest[7:], "rootfs")
        assert os.path.exists(os.path.join(full.rootfs, "usr", "bin", "python3"))
        assert full.entries > 1000 and full.skipped_special is not None and full.stripped is not None
        assert full.raw["digest"] == img.digest
        for ref in (img.digest, img.digest[7:19], DEFAULT_FULL):
            assert c.get_image(ref).digest == img.digest, ref
        e = raises(lambda: c.get_image("lbtest/nosuch:1"), 404, "image_not_found")
        assert "lbtest/nosuch:1" in e.message


def test_import_inspect_and_delete_refused_while_in_use(tmp_path, monkeypatch):
    lay = tmp_path / "lay"
    digests = tiny_layout(lay, "client-import")
    with Daemon(images_dir=store_dir(tmp_path)) as d:
        c = d.client()
        assert c.images() == []
        r = c.import_image(lay, "lbtest/tiny:1")
        assert r.duration_ms >= 0
        img = r.image
        assert img.digest == digests["config"] and img.manifest_digest == digests["manifest"]
        assert img.names == ["docker.io/lbtest/tiny:1"] and img.name == "docker.io/lbtest/tiny:1"
        assert img.has_python3 and img.has_bash and img.warning is None and img.in_use == 0 and not img.pinned
        assert img.rootfs == os.path.join(d.images, "images", digests["config"][7:], "rootfs")
        assert img.entries is not None and img.env is not None

        # a relative path is the caller's: the client makes it absolute for lensboxd
        monkeypatch.chdir(tmp_path)
        again = c.import_image("lay", "lbtest/tiny:2").image
        assert again.digest == img.digest
        assert sorted(again.names) == ["docker.io/lbtest/tiny:1", "docker.io/lbtest/tiny:2"]
        assert [sorted(i.names) for i in c.images()] == [sorted(again.names)], "two names, one image"
        assert c.get_image(img.digest[7:19]).names == again.names

        # a sandbox whose spec names it: in use, and removing it by that name or by digest is refused
        name = d.name("uses")
        c.ensure(name, image="lbtest/tiny:1")
        assert c.get_image("lbtest/tiny:1").in_use == 1
        e = raises(lambda: c.delete_image("lbtest/tiny:1"), 409, "image_in_use")
        assert name in e.message and e.message.endswith("."), e.message
        raises(lambda: c.delete_image(img.digest), 409, "image_in_use")
        raises(lambda: c.delete_image(img.digest, missing_ok=False), 409, "image_in_use")
        assert len(c.images()) == 1

        # once the sandbox is gone: removed, then missing (False, or 404 when asked)
        assert c.delete(name) is True
        assert c.get_image("lbtest/tiny:1").in_use == 0
        assert c.delete_image("lbtest/tiny:2") is True
        assert c.get_image(img.digest).names == ["docker.io/lbtest/tiny:1"], "the other name keeps the image"
        assert c.delete_image(img.digest) is True
        assert c.images() == []
        assert not os.path.exists(os.path.join(d.images, "images", digests["config"][7:]))
        raises(lambda: c.get_image("lbtest/tiny:1"), 404, "image_not_found")
        assert c.delete_image("lbtest/tiny:1") is False
        raises(lambda: c.delete_image("lbtest/tiny:1", missing_ok=False), 404, "image_not_found")


def test_import_refusals(tmp_path):
    lay = tmp_path / "lay"
    tiny_layout(lay, "client-refusals")
    garbage = tmp_path / "garbage.tar"
    garbage.write_bytes(b"not a tar archive at all" * 100)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    escape = tmp_path / "escape"
    oci.write_layout(str(escape), [tar_layer([f("usr/bin/python3", b"", 0o755), f("../../outside", b"x")])])
    with Daemon(images_dir=store_dir(tmp_path)) as d:
        c = d.client()
        e = raises(lambda: c.import_image(tmp_path / "missing.tar"), 404, "path_not_found")
        assert str(tmp_path / "missing.tar") in e.message
        t0 = time.monotonic()
        raises(lambda: c.import_image(fifo), 422, "invalid_path")  # never opened by lensboxd
        assert time.monotonic() - t0 < 10
        raises(lambda: c.import_image("/dev/null"), 422, "invalid_path")
        e = raises(lambda: c.import_image(garbage, "lbtest/garbage:1"), 422, "invalid_image")
        assert str(garbage) in e.message, e.message
        e = raises(lambda: c.import_image(escape, "lbtest/escape:1"), 422, "invalid_image")
        assert "escapes the root" in e.message, e.message
        assert not (tmp_path / "outside").exists()
        assert c.images() == [], "nothing of a refused import stays"

        # refused by the client before anything is sent (lensboxd would answer the same)
        raises(lambda: c.import_image(lay, "Bad Name"), 422, "invalid_value")
        raises(lambda: c.import_image(lay, "sha256:" + "0" * 64), 422, "invalid_value")
        raises(lambda: c.import_image(lay, "lbtest/x@sha256:" + "0" * 64), 422, "invalid_value")
        raises(lambda: c.import_image("/" + "a" * 1100), 422, "invalid_path")
        raises(lambda: c.import_image("a\0b"), 422, "invalid_path")
        raises(lambda: c.import_image(lay, timeout=0), 422, "invalid_value")
        assert c.images() == []

        # lensboxd's own check of the name's grammar (the client only checks its characters)
        e = raises(lambda: c.import_image(lay, "lbtest/x:" + "t" * 200), 422, "invalid_value")
        assert "image name" in e.message, e.message

        pinned = c.import_image(lay, "lbtest/pinned:1", pin=True).image
        assert pinned.pinned and c.get_image("lbtest/pinned:1").pinned


def test_import_needs_a_root_caller(tmp_path):
    """The client in a process that is not root (a peer the socket lets in through its group): lensboxd's 403
    arrives as SandboxError; listing is allowed."""
    lay = tmp_path / "lay"
    tiny_layout(lay, "client-peer")
    os.chmod(tmp_path, 0o755)
    script = (
        "import sys\n"
        f"sys.path.insert(0, {os.path.join(SRC, 'clients', 'python')!r})\n"
        "from lensbox_client import Client, SandboxError\n"
        "c = Client(sys.argv[1], timeout=30)\n"
        "print(len(c.images()))\n"
        "try:\n"
        "    c.import_image(sys.argv[2])\n"
        "except SandboxError as e:\n"
        "    print(e.status, e.code)\n"
        "    print(e.message)\n"
    )
    with Daemon(images_dir=store_dir(tmp_path), settings={"socket_group": "nogroup"}, dir_mode=0o711) as d:
        p = subprocess.run(["/usr/bin/python3", "-c", script, d.socket, str(lay)], capture_output=True, text=True,
                           timeout=60, user=65534, group=65534, extra_groups=[])
        assert p.returncode == 0, p.stderr
        count, status, message = p.stdout.splitlines()
        assert (count, status) == ("0", "403 forbidden"), p.stdout
        assert "only root may ask" in message and "uid 65534" in message, message
        assert d.client().images() == []


def test_pull_and_its_refusals(registry, tmp_path):
    lay = tmp_path / "lay"
    digests = tiny_layout(lay, "client-pull")
    push(f"oci:{lay}:1", f"{registry.host}/lbtest/cpull:1")
    push(f"oci:{lay}:1", f"{registry.host}/lbtest/cpull:2")
    closed = f"127.0.0.1:{free_port()}"  # a port nobody listens on
    with Daemon(images_dir=store_dir(tmp_path), settings={"insecure_registries": f"{registry.host}, {closed}"}) as d:
        c = d.client()
        ref = f"{registry.host}/lbtest/cpull:1"
        r = c.pull_image(ref)
        assert r.image.digest == digests["config"] and r.image.manifest_digest == digests["manifest"]
        assert r.image.names == [ref] and r.image.has_python3 and not r.image.pinned and r.duration_ms >= 0
        assert [i.names for i in c.images()] == [[ref]]

        pinned = c.pull_image(f"{registry.host}/lbtest/cpull:2", pin=True).image
        assert pinned.digest == digests["config"] and pinned.pinned
        assert sorted(c.get_image(ref).names) == sorted([ref, f"{registry.host}/lbtest/cpull:2"])

        e = raises(lambda: c.pull_image(f"{registry.host}/lbtest/nosuch:1"), 404, "image_not_found")
        assert "lbtest/nosuch:1" in e.message, e.message
        e = raises(lambda: c.pull_image(f"{closed}/lbtest/cpull:1"), 502, "registry_error")
        assert closed in e.message, e.message
        # lensboxd's own grammar check (the characters pass the client's)
        raises(lambda: c.pull_image(f"{registry.host}/lbtest/x@sha256:abc"), 422, "invalid_value")

        # refused by the client before anything is sent
        raises(lambda: c.pull_image("sha256:" + "0" * 64), 422, "invalid_value")
        raises(lambda: c.pull_image("../x"), 422, "invalid_value")
        raises(lambda: c.pull_image("a b"), 422, "invalid_value")
        raises(lambda: c.pull_image("Upper/case"), 422, "invalid_value")
        raises(lambda: c.pull_image("x" * 256), 422, "invalid_value")
        raises(lambda: c.get_image("a%2fb"), 422, "invalid_value")
        raises(lambda: c.delete_image("a?b"), 422, "invalid_value")
        assert len(c.images()) == 1


def slow_front(path):
    """test_image_pull's registry front serving a fresh image with a 1 MiB layer it dribbles out (about 1.3 s)."""
    layer = tar_layer([f("usr/bin/python3", b"", 0o755), f("bin/bash", b"", 0o755), f("big", os.urandom(1 << 20))])
    digests = oci.write_layout(str(path), [layer], ref_name="1")
    return Front(str(path), "127.0.0.1", auth=False, slow=True), digests


def test_a_pull_outlasts_the_client_timeout(tmp_path):
    """A pull waits for its own (long) timeout, not the client's: a registry front that dribbles a blob out makes
    the pull take longer than the client's 0.3 s, and it succeeds; a pull given timeout=0.3 itself fails as the
    client's other timeouts do, and lensboxd still finishes it."""
    front, digests = slow_front(tmp_path / "one")
    other, other_digests = slow_front(tmp_path / "two")
    try:
        settings = {"insecure_registries": f"{front.host}, {other.host}"}
        with Daemon(images_dir=store_dir(tmp_path), settings=settings) as d:
            impatient = Client(d.socket, timeout=0.3)
            t0 = time.monotonic()
            r = impatient.pull_image(f"{front.host}/lbtest/slow:1")
            took = time.monotonic() - t0
            assert r.image.digest == digests["config"]
            assert took > 0.3, f"the pull took {took:.2f} s: the front did not slow it, nothing was tested"

            ref = f"{other.host}/lbtest/slow:2"
            e = raises(lambda: d.client().pull_image(ref, timeout=0.3), 503, "daemon_unreachable")
            assert "timed out" in e.message, e.message
            # lensboxd finishes the pull it started; a patient client then finds the image
            deadline = time.monotonic() + 60
            while ref not in [n for i in d.client().images() for n in i.names] and time.monotonic() < deadline:
                time.sleep(0.2)
            assert d.client().get_image(ref).digest == other_digests["config"]
    finally:
        front.shutdown()
        other.shutdown()


def readme_image_example():
    with open(os.path.join(SRC, "clients", "python", "README.md"), encoding="utf-8") as fh:
        text = fh.read()
    section = text[text.index("## Images"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_readme_image_example_runs_as_written(registry, tmp_path):
    """clients/python/README.md's image example, executed against a daemon whose store holds the default image,
    prints what its comments say (registry address and archive path swapped for the test's own)."""
    code = readme_image_example()
    expected = [ln[2:] for ln in code.splitlines() if ln.startswith("# ")]
    assert len(expected) == 2, code
    store = tmp_path / "images"
    digest, _ = import_default_image(store)
    lay = tmp_path / "lay"
    tiny_layout(lay, "readme")
    push(f"oci:{lay}:1", f"{registry.host}/python:3.12-slim")
    code = code.replace("127.0.0.1:5000", registry.host).replace("/srv/python-oci.tar", default_image_archive())
    with Daemon(images_dir=str(store), settings={"insecure_registries": registry.host}) as d:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code, "clients/python/README.md", "exec"), {"box": d.client(), "SandboxError": SandboxError})
        documented = [ln.replace("sha256:ecf11d24bdfb", digest[:19]) for ln in expected]
        assert out.getvalue().splitlines() == documented
        names = sorted(n for i in d.client().images() for n in i.names)
        assert names == [f"{registry.host}/python:3.12-slim", DEFAULT_FULL], "the example removed what it imported"
        assert d.client().get_image(f"{registry.host}/python:3.12-slim").pinned

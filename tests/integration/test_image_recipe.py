"""The default image recipe (images/recipes/python) writes a real, verifiable OCI image layout archive.

Checks, against the archive the recipe prints: the layout's structure; every blob's sha256 equals its name and every
descriptor's digest and size match the bytes; the uncompressed layer's sha256 is the config's diff_id; the config
carries Env PATH, WorkingDir, architecture and os; umoci stat/unpack and skopeo inspect accept it; python3 and bash
are in it and run; a second run is a cache hit (same path, file untouched); the --rootfs tree is root-owned and its
Python stdlib world-readable.
"""

import gzip
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from lensbox_testlib.images import RECIPE, default_image_archive, default_rootfs  # noqa: E402

SOURCE_DIR = os.environ.get("LENSBOX_SOURCE_DIR", os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
OCI_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}[platform.machine()]


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def require_tool(name):
    path = shutil.which(name)
    if not path:
        pytest.fail(f"{name} is not installed: run scripts/install-deps")
    return path


@pytest.fixture(scope="module")
def archive():
    if os.geteuid() != 0:
        pytest.fail("the image recipe runs mmdebstrap as root: run the tests as root")
    return default_image_archive()


@pytest.fixture(scope="module")
def layout(archive, tmp_path_factory):
    d = tmp_path_factory.mktemp("layout")
    with tarfile.open(archive) as t:
        for m in t.getmembers():
            assert not m.name.startswith("/") and ".." not in m.name.split("/"), m.name
        t.extractall(d)
    return d


def read_blob(layout, digest):
    algo, hexd = digest.split(":")
    assert algo == "sha256"
    return (layout / "blobs" / "sha256" / hexd).read_bytes()


def test_archive_is_cached_outside_the_source_tree(archive):
    assert os.path.isabs(archive) and os.path.isfile(archive)
    assert not os.path.realpath(archive).startswith(os.path.realpath(SOURCE_DIR) + os.sep)
    key = subprocess.run([RECIPE, "--hash"], check=True, stdout=subprocess.PIPE, text=True).stdout.strip()
    assert len(key) == 16 and key in archive
    before = os.stat(archive)
    again = subprocess.run([RECIPE], check=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert again.stdout.strip() == archive
    assert "building" not in again.stderr, "a second run rebuilt the image instead of using the cache"
    after = os.stat(archive)
    assert (before.st_ino, before.st_mtime_ns) == (after.st_ino, after.st_mtime_ns)


def test_layout_structure(layout):
    assert json.loads((layout / "oci-layout").read_text()) == {"imageLayoutVersion": "1.0.0"}
    names = sorted(p.name for p in layout.iterdir())
    assert names == ["blobs", "index.json", "oci-layout"]


def test_every_blob_digest_verifies(layout):
    blobs = list((layout / "blobs" / "sha256").iterdir())
    assert len(blobs) == 3  # manifest, config, one layer
    for b in blobs:
        assert sha256_file(b) == b.name, f"blob {b.name} does not hash to its name"


def test_descriptors_config_and_diff_ids(layout, tmp_path):
    index = json.loads((layout / "index.json").read_text())
    assert index["schemaVersion"] == 2
    (mdesc,) = index["manifests"]
    assert mdesc["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    assert mdesc["platform"] == {"architecture": OCI_ARCH, "os": "linux"}
    assert mdesc["annotations"]["org.opencontainers.image.ref.name"] == "3.12-slim"
    mbytes = read_blob(layout, mdesc["digest"])
    assert len(mbytes) == mdesc["size"]
    manifest = json.loads(mbytes)

    cdesc = manifest["config"]
    assert cdesc["mediaType"] == "application/vnd.oci.image.config.v1+json"
    cbytes = read_blob(layout, cdesc["digest"])
    assert len(cbytes) == cdesc["size"]
    config = json.loads(cbytes)
    assert config["architecture"] == OCI_ARCH and config["os"] == "linux"
    env = dict(e.split("=", 1) for e in config["config"]["Env"])
    assert "/usr/bin" in env["PATH"].split(":") and "/bin" in env["PATH"].split(":")
    assert config["config"]["WorkingDir"] == "/sandbox"

    (ldesc,) = manifest["layers"]
    assert ldesc["mediaType"] == "application/vnd.oci.image.layer.v1.tar+gzip"
    lpath = layout / "blobs" / "sha256" / ldesc["digest"].split(":")[1]
    assert lpath.stat().st_size == ldesc["size"]
    h = hashlib.sha256()
    with gzip.open(lpath) as g:
        for chunk in iter(lambda: g.read(1 << 20), b""):
            h.update(chunk)
    assert config["rootfs"] == {"type": "layers", "diff_ids": ["sha256:" + h.hexdigest()]}

    with tarfile.open(lpath, "r:gz") as t:
        members = {m.name.removeprefix("./"): m for m in t.getmembers()}
    for name in ("usr/bin/python3", "usr/bin/bash", "usr/bin/pip3", "usr/bin/ls", "etc/ssl/certs/ca-certificates.crt"):
        assert name in members, f"{name} missing from the layer"
    assert members["bin"].issym() and members["bin"].linkname == "usr/bin"  # merged /usr
    assert not [m.name for m in members.values() if m.isdev() or m.isfifo()], "device nodes in the layer"
    assert not [m.name for m in members.values() if m.uid != 0], "files not owned by root in the layer"


def test_umoci_stat_and_unpack(layout, tmp_path):
    umoci = require_tool("umoci")
    st = subprocess.run([umoci, "stat", "--image", f"{layout}:3.12-slim"], stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE, text=True)
    assert st.returncode == 0, st.stderr
    assert "lensbox images/recipes/python" in st.stdout
    bundle = tmp_path / "bundle"
    up = subprocess.run([umoci, "unpack", "--image", f"{layout}:3.12-slim", str(bundle)], stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE, text=True)
    assert up.returncode == 0, up.stderr
    rootfs = bundle / "rootfs"
    assert os.access(rootfs / "usr/bin/python3", os.X_OK)
    assert os.access(rootfs / "usr/bin/bash", os.X_OK)


def test_skopeo_inspect(archive, layout):
    skopeo = require_tool("skopeo")
    r = subprocess.run([skopeo, "inspect", f"oci-archive:{archive}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True)
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    index = json.loads((layout / "index.json").read_text())
    assert info["Digest"] == index["manifests"][0]["digest"]
    assert info["Architecture"] == OCI_ARCH and info["Os"] == "linux"
    assert len(info["Layers"]) == 1


def test_rootfs_runs_python_and_bash():
    rootfs = default_rootfs()
    for rel in ("usr/bin/python3", "usr/bin/bash"):
        st = os.stat(os.path.join(rootfs, rel))
        assert st.st_uid == 0 and st.st_mode & 0o005 == 0o005, f"{rel} is not root-owned and world-executable"
    r = subprocess.run(["chroot", rootfs, "/usr/bin/env", "-i", "PATH=/usr/bin:/bin", "bash", "-c",
                        "python3 -c 'import ssl, sqlite3, json; print(6*7)' && echo $BASH_VERSION"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert r.returncode == 0, r.stderr
    out = r.stdout.split()
    assert out[0] == "42" and out[1].startswith("5.2")


def test_rootfs_owned_by_root_and_readable():
    rootfs = default_rootfs()
    not_root, unreadable, setid = [], [], []
    for dirpath, dirnames, filenames in os.walk(rootfs):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            if st.st_uid != 0:
                not_root.append(p)
            if os.path.isfile(p) and not os.path.islink(p) and st.st_mode & 0o6000:
                setid.append(p)
            if p.startswith(os.path.join(rootfs, "usr/lib/python3")) and not os.path.islink(p) and \
                    not st.st_mode & 0o004:
                unreadable.append(p)
    assert not_root == []
    assert unreadable == []
    assert setid == [], "setuid/setgid files left in the unpacked rootfs"


def test_variant_has_its_own_key_and_the_default_keeps_its_own(archive):
    """--with adds packages under another cache key and directory; without it the key is the default's (the one the
    archive above was cached under). Names that are not Debian package names are refused before any work."""
    def recipe(*args):
        return subprocess.run([RECIPE, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    default = recipe("--hash")
    zmq = recipe("--with", "python3-zmq", "--hash")
    two = recipe("--hash", "--with", "python3-zmq,net-tools")
    assert default.returncode == zmq.returncode == two.returncode == 0, (default.stderr, zmq.stderr, two.stderr)
    keys = [default.stdout.strip(), zmq.stdout.strip(), two.stdout.strip()]
    assert len(set(keys)) == 3 and all(len(k) == 16 for k in keys), keys
    assert os.path.basename(os.path.dirname(archive)) == f"python-{keys[0]}"
    for bad in ("Python3-zmq", "zmq;rm", "a,", "../x"):
        r = recipe("--with", bad, "--hash")
        assert r.returncode == 1 and "not a list of package names" in r.stderr and not r.stdout, (bad, r)

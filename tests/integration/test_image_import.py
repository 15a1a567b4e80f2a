"""lensbox-image import against hostile and unusual archives, each built here, each refused or neutralised exactly
as docs/images.md says: refusals are checked by their errno name, neutralisations by what is (and is not) on disk,
inside and outside the image root. Plus the good cases: formats (tar, gzip, zstd, oci-archive, docker save),
platform choice, dedupe by config digest, names, inspect and rm.
"""

import hashlib
import json
import os
import re
import stat
import subprocess
import sys
import tarfile
import zlib

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from lensbox_testlib import oci  # noqa: E402
from lensbox_testlib.oci import d, dev, f, fifo, hard, sym, tar_layer, wh, write_layout  # noqa: E402

BUILD_DIR = os.environ.get("LENSBOX_BUILD_DIR", "")
TOOL = os.path.join(BUILD_DIR, "images", "lensbox-image")


@pytest.fixture(scope="module", autouse=True)
def _tool():
    if os.geteuid() != 0:
        pytest.fail("image import keeps file owners: run the tests as root")
    if not os.access(TOOL, os.X_OK):
        pytest.fail(f"{TOOL} is not built (set LENSBOX_BUILD_DIR and build the lensbox-image target)")


class Store:
    def __init__(self, root):
        self.root = str(root)

    def run(self, *args, limits=()):
        return subprocess.run([TOOL, "--root", self.root, *limits, *args], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, timeout=300)

    def import_(self, path, *extra, limits=()):
        return self.run("import", str(path), *extra, limits=limits)

    def ok(self, path, *extra, limits=()):
        r = self.import_(path, *extra, limits=limits)
        assert r.returncode == 0, r.stderr
        digest, rootfs = r.stdout.split()
        return digest, rootfs

    def refused(self, path, errno_name, *extra, limits=(), says=None):
        r = self.import_(path, *extra, limits=limits)
        assert r.returncode == 1, f"import was not refused: {r.stdout} {r.stderr}"
        m = re.search(r"errno=(\w+)", r.stderr)
        assert m and m.group(1) == errno_name, r.stderr
        if says:
            assert says in r.stderr, r.stderr
        # Nothing of a failed import remains.
        assert os.listdir(os.path.join(self.root, "images")) == []
        assert os.listdir(os.path.join(self.root, "tmp")) == []
        return r.stderr

    def inspect(self, ref):
        r = self.run("inspect", ref)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)


@pytest.fixture
def store(tmp_path):
    return Store(tmp_path / "store")


def layout_of(tmp_path, *layers, name="img", **kw):
    p = tmp_path / name
    write_layout(p, list(layers), **kw)
    return p


BASE = [d("usr/"), d("usr/bin/"), f("usr/bin/python3", b"#!py", 0o755), f("usr/bin/bash", b"#!sh", 0o755),
        sym("bin", "usr/bin")]


# ---- names that escape ----

@pytest.mark.parametrize("name", ["../escape", "a/../../escape", "/etc/escape", "./../escape"])
def test_escaping_names_refuse_the_image(store, tmp_path, name):
    store.refused(layout_of(tmp_path, tar_layer(BASE + [f(name, b"x")])), "EXDEV", says="escapes the root")
    assert not os.path.exists(tmp_path / "escape")


def test_symlink_parent_escape_refused_when_target_missing_inside(store, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    layer1 = tar_layer(BASE + [sym("evil", str(outside))])
    layer2 = tar_layer([f("evil/pwned", b"1")])
    store.refused(layout_of(tmp_path, layer1, layer2), "ENOENT", says="opening its parent directory inside the root")
    assert os.listdir(outside) == []


def test_symlink_parent_escape_stays_inside(store, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    inside = str(outside).lstrip("/")
    dirs = [d(inside[: i]) for i in range(len(inside) + 1) if i == len(inside) or inside[i] == "/"]
    layer1 = tar_layer(BASE + dirs + [sym("evil", str(outside)), sym("rel", "../../../../../../" + str(outside))])
    layer2 = tar_layer([f("evil/pwned", b"1"), f("rel/pwned2", b"2")])
    _, rootfs = store.ok(layout_of(tmp_path, layer1, layer2))
    assert os.listdir(outside) == []
    assert open(os.path.join(rootfs, inside, "pwned"), "rb").read() == b"1"
    assert open(os.path.join(rootfs, inside, "pwned2"), "rb").read() == b"2"


@pytest.mark.parametrize("target", ["/etc/shadow", "../../../../../../etc/shadow"])
def test_hard_link_to_host_shadow_refused(store, tmp_path, target):
    before = os.stat("/etc/shadow").st_nlink
    store.refused(layout_of(tmp_path, tar_layer(BASE + [hard("shadow", target)])), "EXDEV", says="hard link")
    assert os.stat("/etc/shadow").st_nlink == before


def test_hard_link_through_symlink_resolves_inside(store, tmp_path):
    before = os.stat("/etc/shadow").st_nlink
    store.refused(layout_of(tmp_path, tar_layer(BASE + [sym("hostetc", "/etc"), hard("shadow", "hostetc/shadow")])),
                  "ENOENT", says="resolving the hard link's target inside the root")
    assert os.stat("/etc/shadow").st_nlink == before


def test_hard_link_inside_is_a_link(store, tmp_path):
    _, rootfs = store.ok(layout_of(tmp_path, tar_layer(BASE + [f("a", b"data"), hard("b", "a")])))
    sa, sb = os.stat(os.path.join(rootfs, "a")), os.stat(os.path.join(rootfs, "b"))
    assert sa.st_ino == sb.st_ino and sa.st_nlink == 2


@pytest.mark.parametrize("name,says", [(".", "would replace the root itself"),
                                       ("./", "would replace the root itself"),
                                       ("/", "escapes the root")])
def test_symlink_named_dot_refused(store, tmp_path, name, says):
    # umoci's CVE-2021-29136: a symlink entry for the root itself.
    store.refused(layout_of(tmp_path, tar_layer(BASE + [sym(name, "/etc")])), "EXDEV", says=says)


def test_whiteout_escape_refused(store, tmp_path):
    store.refused(layout_of(tmp_path, tar_layer(BASE + [wh("../.wh.victim")])), "EXDEV")
    store.refused(layout_of(tmp_path, tar_layer(BASE + [wh("usr/.wh..")]), name="img2"), "EXDEV")


def test_whiteout_through_symlink_deletes_only_inside(store, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim").write_text("keep me")
    layer1 = tar_layer(BASE + [sym("up", str(outside))])
    layer2 = tar_layer([wh("up/.wh.victim"), wh("up/.wh..wh..opq")])
    store.ok(layout_of(tmp_path, layer1, layer2))
    assert (outside / "victim").read_text() == "keep me"


# ---- neutralised content ----

def test_device_nodes_and_fifos_skipped(store, tmp_path):
    digest, rootfs = store.ok(layout_of(tmp_path, tar_layer(BASE + [dev("dev/mem", 1, 1), fifo("pipe")])))
    assert not os.path.lexists(os.path.join(rootfs, "dev/mem"))
    assert not os.path.lexists(os.path.join(rootfs, "pipe"))
    assert store.inspect(digest)["skipped_special"] == 2


def test_setuid_setgid_stripped(store, tmp_path):
    digest, rootfs = store.ok(layout_of(tmp_path, tar_layer(
        BASE + [f("usr/bin/su", b"x", 0o4755), f("usr/bin/wall", b"y", 0o2755), d("shared", 0o3777)])))
    assert stat.S_IMODE(os.stat(os.path.join(rootfs, "usr/bin/su")).st_mode) == 0o755
    assert stat.S_IMODE(os.stat(os.path.join(rootfs, "usr/bin/wall")).st_mode) == 0o755
    assert stat.S_IMODE(os.stat(os.path.join(rootfs, "shared")).st_mode) == 0o1777
    assert store.inspect(digest)["stripped"] == 3


def test_file_capabilities_not_applied(store, tmp_path):
    # security.capability v2 blob granting cap_setuid, as `setcap cap_setuid+ep` writes it
    cap = bytes([0, 0, 0, 2, 0x80, 0, 0, 0, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0])
    pax = {"SCHILY.xattr.security.capability": cap.decode("latin-1"), "SCHILY.xattr.user.note": "hi"}
    _, rootfs = store.ok(layout_of(tmp_path, tar_layer(BASE + [f("usr/bin/capped", b"x", 0o755, pax=pax)])))
    p = os.path.join(rootfs, "usr/bin/capped")
    assert os.listxattr(p) == []
    with pytest.raises(OSError) as e:
        os.getxattr(p, "security.capability")
    assert e.value.errno == 61  # ENODATA


def test_same_path_redefined(store, tmp_path):
    entries = BASE + [d("etc/"), f("x", b"file"), d("x/"), f("x/y", b"in dir"), sym("x", "/etc"), f("x/z", b"through")]
    _, rootfs = store.ok(layout_of(tmp_path, tar_layer(entries)))
    assert os.readlink(os.path.join(rootfs, "x")) == "/etc"
    assert open(os.path.join(rootfs, "etc/z"), "rb").read() == b"through"
    assert not os.path.exists("/etc/z")


# ---- verification ----

def test_wrong_layer_digest(store, tmp_path):
    lay = layout_of(tmp_path, tar_layer(BASE))
    digests = json.loads(json.dumps(oci.write_layout(lay, [tar_layer(BASE)])))
    p = oci.blob_path(lay, digests["layers"][0])
    data = bytearray(open(p, "rb").read())
    data[-1] ^= 1
    open(p, "wb").write(bytes(data))
    store.refused(lay, "EBADMSG", says=f"layer 0 ({digests['layers'][0]}): blob content is")


def test_wrong_diff_id(store, tmp_path):
    layer = tar_layer(BASE)
    cfg = oci.image_config([layer])
    cfg["rootfs"]["diff_ids"] = ["sha256:" + "0" * 64]
    store.refused(layout_of(tmp_path, layer, config=cfg), "EBADMSG", says="diff_id")


def test_wrong_manifest_digest(store, tmp_path):
    lay = layout_of(tmp_path, tar_layer(BASE))
    index = json.loads((lay / "index.json").read_text())
    index["manifests"][0]["size"] += 1
    (lay / "index.json").write_text(json.dumps(index))
    store.refused(lay, "EBADMSG", says="does not match its descriptor")


def test_truncated_gzip(store, tmp_path):
    good = tar_layer(BASE + [f("big", os.urandom(200000))])
    bad = oci.Layer(good.blob[: len(good.blob) // 2], good.media_type, good.diff_id)
    store.refused(layout_of(tmp_path, bad), "EBADMSG", says="truncated gzip stream")


def test_sparse_10g_against_bound(store, tmp_path):
    src = tmp_path / "sparse"
    src.mkdir()
    with open(src / "huge", "wb") as fh:
        fh.truncate(10 * 1024 ** 3)
    raw = tmp_path / "sparse.tar"
    subprocess.run(["tar", "--sparse", "--format=posix", "-C", str(src), "-cf", str(raw), "huge"], check=True)
    assert raw.stat().st_size < 1 << 20
    store.refused(layout_of(tmp_path, oci.raw_layer(raw.read_bytes())), "EFBIG", says="8589934592-byte bound")


def test_sparse_file_within_bound_keeps_holes(store, tmp_path):
    src = tmp_path / "sparse"
    src.mkdir()
    with open(src / "holey", "wb") as fh:
        fh.seek(64 * 1024 ** 2)
        fh.write(b"end")
    raw = tmp_path / "sparse.tar"
    subprocess.run(["tar", "--sparse", "--format=posix", "-C", str(src), "-cf", str(raw), "holey"], check=True)
    _, rootfs = store.ok(layout_of(tmp_path, oci.raw_layer(raw.read_bytes() + b"", compression=None)))
    st = os.stat(os.path.join(rootfs, "holey"))
    assert st.st_size == 64 * 1024 ** 2 + 3 and st.st_blocks * 512 < 1024 ** 2


def _many_empty_files_layer(n):
    """A gzip layer of n empty files, generated fast: one ustar header template, a new name and checksum each."""
    h = bytearray(512)
    h[100:108] = b"0000644\0"
    h[108:116] = b"0000000\0"
    h[116:124] = b"0000000\0"
    h[124:136] = b"00000000000\0"
    h[136:148] = b"14000000000\0"
    h[148:156] = b" " * 8
    h[156:157] = b"0"
    h[257:263] = b"ustar\0"
    h[263:265] = b"00"
    base = sum(h)
    mid, tail = bytes(h[100:148]), bytes(h[156:512])
    z = zlib.compressobj(1, zlib.DEFLATED, 31)
    diff = hashlib.sha256()
    out = []
    for start in range(0, n, 10000):
        chunk = []
        for i in range(start, min(n, start + 10000)):
            name = b"f/%07d" % i
            chunk.append(name.ljust(100, b"\0") + mid + b"%06o\0 " % (base + sum(name)) + tail)
        data = b"".join(chunk)
        diff.update(data)
        out.append(z.compress(data))
    diff.update(bytes(1024))
    out.append(z.compress(bytes(1024)))
    out.append(z.flush())
    return oci.Layer(b"".join(out), oci.MT_LAYER["gzip"], diff.hexdigest())


def test_million_empty_files_against_bound(store, tmp_path):
    layer = _many_empty_files_layer(1_000_000)
    store.refused(layout_of(tmp_path, tar_layer(BASE), layer), "E2BIG", limits=("--max-entries", "100000"),
                  says="more than 100000 entries")


def test_path_length_bound(store, tmp_path):
    store.refused(layout_of(tmp_path, tar_layer(BASE + [f("a/" * 100 + "x", b"")])), "ENAMETOOLONG",
                  limits=("--max-path", "100"))


# ---- formats, platforms, dedupe, names ----

@pytest.mark.parametrize("compression", [None, "gzip", "zstd"])
def test_layer_compressions(store, tmp_path, compression):
    _, rootfs = store.ok(layout_of(tmp_path, tar_layer(BASE + [f("etc/hello", b"hello")], compression)))
    assert open(os.path.join(rootfs, "etc/hello"), "rb").read() == b"hello"


def test_oci_archive_and_dedupe(store, tmp_path):
    lay = layout_of(tmp_path, tar_layer(BASE))
    archive = oci.tar_dir(lay, tmp_path / "img.tar")
    d1, r1 = store.ok(archive, "--name", "example.com/a/b:1")
    d2, r2 = store.ok(lay, "--name", "c")
    assert (d1, r1) == (d2, r2)
    info = store.inspect("c:latest")
    assert sorted(info["names"]) == ["docker.io/library/c:latest", "example.com/a/b:1"]
    assert info["has_python3"] and info["has_bash"] and info["warning"] == ""
    assert info["working_dir"] == "/sandbox" and info["env"] == ["PATH=/usr/local/bin:/usr/bin:/bin"]


def test_docker_save_archive(store, tmp_path):
    layers = [tar_layer(BASE, compression=None), tar_layer([f("etc/x", b"1")], compression=None)]
    cfg = json.dumps(oci.image_config(layers)).encode()
    cfg_hex = oci.sha256(cfg)
    src = tmp_path / "save"
    src.mkdir()
    (src / f"{cfg_hex}.json").write_bytes(cfg)
    names = []
    for i, l in enumerate(layers):
        (src / f"l{i}").mkdir()
        (src / f"l{i}" / "layer.tar").write_bytes(l.blob)
        names.append(f"l{i}/layer.tar")
    (src / "manifest.json").write_text(json.dumps([{"Config": f"{cfg_hex}.json", "RepoTags": ["x:1"],
                                                    "Layers": names}]))
    archive = oci.tar_dir(src, tmp_path / "save.tar")
    digest, rootfs = store.ok(archive, "--ref", "x:1")
    assert digest == "sha256:" + cfg_hex
    assert open(os.path.join(rootfs, "etc/x"), "rb").read() == b"1"


def test_multi_platform_index_skips_attestations(store, tmp_path):
    lay = str(tmp_path / "multi")
    other = "arm64" if oci.OCI_ARCH == "amd64" else "amd64"
    foreign, _ = oci.write_manifest(lay, [tar_layer([f("which", b"foreign")])], arch=other)
    native, ncfg = oci.write_manifest(lay, [tar_layer(BASE + [f("which", b"native")])])
    attest, _ = oci.write_manifest(lay, [tar_layer([f("which", b"attestation")])], arch="unknown")
    oci.write_index(lay, [
        dict(foreign, platform={"architecture": other, "os": "linux"}),
        dict(attest, platform={"architecture": "unknown", "os": "unknown"},
             annotations={"vnd.docker.reference.type": "attestation-manifest"}),
        dict(native, platform={"architecture": oci.OCI_ARCH, "os": "linux"}),
    ])
    digest, rootfs = store.ok(lay)
    assert digest == ncfg["digest"]
    assert open(os.path.join(rootfs, "which"), "rb").read() == b"native"


def test_foreign_only_image_refused(store, tmp_path):
    other = "arm64" if oci.OCI_ARCH == "amd64" else "amd64"
    layer = tar_layer(BASE)
    store.refused(layout_of(tmp_path, layer, config=oci.image_config([layer], arch=other)), "ENOENT",
                  says=f"the image is for linux/{other}")


def test_missing_bash_warns(store, tmp_path):
    r = store.import_(layout_of(tmp_path, tar_layer([f("usr/bin/python3", b"", 0o755)])))
    assert r.returncode == 0, r.stderr
    assert "this image has no bash: run_bash will fail" in r.stderr


def test_rm_by_name_then_digest(store, tmp_path):
    digest, rootfs = store.ok(layout_of(tmp_path, tar_layer(BASE)), "--name", "one")
    assert store.run("tag", "one", "two").returncode == 0
    assert store.run("rm", "one").returncode == 0
    assert os.path.isdir(rootfs)  # "two" still names it
    assert store.run("rm", "two").returncode == 0
    assert not os.path.exists(rootfs)
    r = store.run("inspect", digest)
    assert r.returncode == 1 and "errno=ENOENT" in r.stderr


def test_gc_pins_and_idle_time(store, tmp_path):
    keep, keep_root = store.ok(layout_of(tmp_path, tar_layer(BASE + [f("a", b"1")]), name="i1"), "--name", "keep")
    drop, drop_root = store.ok(layout_of(tmp_path, tar_layer(BASE + [f("a", b"2")]), name="i2"), "--name", "drop")
    assert store.run("pin", "keep").returncode == 0
    assert store.inspect("keep")["pinned"] is True and store.inspect("drop")["pinned"] is False
    r = store.run("gc", "--older-than", "3600")  # both were used just now
    assert r.returncode == 0 and r.stdout.strip() == "removed 0 image(s)"
    assert os.path.isdir(drop_root)
    r = store.run("gc", "--older-than", "0")
    assert r.returncode == 0 and r.stdout.strip() == "removed 1 image(s)"
    assert os.path.isdir(keep_root) and not os.path.exists(drop_root)
    assert store.run("inspect", "drop").returncode == 1
    assert store.run("unpin", "keep").returncode == 0
    assert store.run("gc", "--older-than", "0").stdout.strip() == "removed 1 image(s)"
    assert os.listdir(os.path.join(store.root, "images")) == []


def test_concurrent_imports_share_one_tree(store, tmp_path):
    lay = layout_of(tmp_path, tar_layer(BASE + [f("big", os.urandom(1 << 20))]))
    procs = [subprocess.Popen([TOOL, "--root", store.root, "import", str(lay), "--name", f"n{i}"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(3)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], [e for _, e in outs]
    assert len({o.split()[1] for o, _ in outs}) == 1
    assert len(os.listdir(os.path.join(store.root, "images"))) == 1
    assert os.listdir(os.path.join(store.root, "tmp")) == []
    assert sorted(store.inspect("n0")["names"]) == [f"docker.io/library/n{i}:latest" for i in range(3)]


def test_outer_archive_escapes(store, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    # "../" in the outer archive
    bad = tmp_path / "dotdot.tar"
    with tarfile.open(bad, "w") as t:
        ti = tarfile.TarInfo("../evil")
        ti.size = 1
        t.addfile(ti, __import__("io").BytesIO(b"x"))
    store.refused(bad, "EXDEV", says="escapes the archive")
    # a symlink to the host followed by a file through it: stays inside the staging directory, then is refused
    sneaky = tmp_path / "sneaky.tar"
    with tarfile.open(sneaky, "w") as t:
        ti = tarfile.TarInfo("blobs")
        ti.type, ti.linkname = tarfile.SYMTYPE, str(outside)
        t.addfile(ti)
        ti = tarfile.TarInfo("blobs/planted")
        ti.size = 1
        t.addfile(ti, __import__("io").BytesIO(b"x"))
    store.refused(sneaky, "ENOENT", says="parent directory")
    assert os.listdir(outside) == []


def test_skopeo_written_formats(tmp_path):
    """Archives written by a real tool: skopeo's docker-archive (layer.tar as a symlink, RepoTags in canonical form)
    and an OCI layout recompressed with zstd, each into a fresh store, give the same image as the original."""
    lay = layout_of(tmp_path, tar_layer(BASE + [d("etc/"), f("etc/motd", b"hi"), sym("etc/l", "motd")]))
    digest, rootfs = Store(tmp_path / "s0").ok(lay)
    docker = tmp_path / "docker.tar"
    zst = tmp_path / "zst"
    for dest, extra in ((f"docker-archive:{docker}:example/app:2", []), (f"oci:{zst}:z", ["--dest-compress-format",
                                                                                        "zstd"])):
        r = subprocess.run(["skopeo", "copy", "-q", *extra, f"oci:{lay}:latest", dest], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
        assert r.returncode == 0, r.stderr
    assert "tar+zstd" in open(oci.blob_path(zst, json.loads((zst / "index.json").read_text())["manifests"][0]
                                            ["digest"])).read()
    with tarfile.open(docker) as t:
        assert any(m.issym() for m in t.getmembers())
    d1, r1 = Store(tmp_path / "s1").ok(docker, "--ref", "example/app:2")
    d2, r2 = Store(tmp_path / "s2").ok(zst)
    assert d1 == d2 == digest
    for r in (r1, r2):
        assert open(os.path.join(r, "etc/motd"), "rb").read() == b"hi" and os.readlink(os.path.join(r, "etc/l")) == "motd"

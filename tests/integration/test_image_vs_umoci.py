"""Whiteout and layering semantics against a reference: the same multi-layer image unpacked by lensbox-image and by
`umoci unpack` must give identical trees (paths, types, modes, owners, link targets, file contents, file mtimes),
up to the documented differences: lensbox strips setuid/setgid bits and skips device nodes. The default image from
images/recipes/python is compared the same way.
"""

import hashlib
import os
import shutil
import stat
import subprocess
import sys
import tarfile

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from lensbox_testlib import oci  # noqa: E402
from lensbox_testlib.images import default_image_archive  # noqa: E402
from lensbox_testlib.oci import d, f, hard, sym, tar_layer, wh  # noqa: E402

TOOL = os.path.join(os.environ.get("LENSBOX_BUILD_DIR", ""), "images", "lensbox-image")


@pytest.fixture(scope="module", autouse=True)
def _tools():
    if os.geteuid() != 0:
        pytest.fail("run as root")
    if not os.access(TOOL, os.X_OK):
        pytest.fail(f"{TOOL} is not built")
    if not shutil.which("umoci"):
        pytest.fail("umoci is not installed: run scripts/install-deps")


def tree(root):
    out = {}
    for dp, dns, fns in os.walk(root):
        for n in dns + fns:
            p = os.path.join(dp, n)
            st = os.lstat(p)
            rel = os.path.relpath(p, root)
            mode = stat.S_IMODE(st.st_mode) & ~0o6000  # documented: lensbox strips setuid/setgid
            if stat.S_ISREG(st.st_mode):
                with open(p, "rb") as fh:
                    h = hashlib.sha256(fh.read()).hexdigest()
                out[rel] = ("file", mode, st.st_uid, st.st_gid, h, st.st_mtime_ns, st.st_nlink)
            elif stat.S_ISLNK(st.st_mode):
                out[rel] = ("symlink", st.st_uid, st.st_gid, os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", mode, st.st_uid, st.st_gid)
            else:
                out[rel] = ("special", st.st_mode)
    return out


def unpack_both(layout, tmp_path, ref="latest"):
    bundle = tmp_path / "umoci"
    r = subprocess.run(["umoci", "unpack", "--image", f"{layout}:{ref}", str(bundle)], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([TOOL, "--root", str(tmp_path / "store"), "import", str(layout)], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    assert r.returncode == 0, r.stderr
    return tree(bundle / "rootfs"), tree(r.stdout.split()[1])


def assert_same(ours, ref):
    diff = {k: (ours.get(k), ref.get(k)) for k in set(ours) | set(ref) if ours.get(k) != ref.get(k)}
    assert diff == {}


def test_multi_layer_whiteouts_match_umoci(tmp_path):
    layer1 = tar_layer([
        d("etc/"), f("etc/conf", b"v1"), f("etc/keep", b"keep", 0o600, uid=1000, gid=1000),
        d("opq/"), f("opq/a", b"a"), d("opq/sub/"), f("opq/sub/b", b"b"),
        d("del/"), f("del/x", b"x"), f("del/y", b"y"),
        f("gone", b"gone"), d("wasdir/"), f("wasdir/child", b"c"), f("wasfile", b"f"),
        sym("link", "etc/conf"), f("usr/bin/tool", b"tool", 0o4755), hard("usr/bin/tool2", "usr/bin/tool"),
        d("home/user/", 0o700, uid=1000, gid=1000), f("home/user/.profile", b"p", 0o640, uid=1000, gid=1000),
    ])
    layer2 = tar_layer([
        f("etc/conf", b"v2", 0o640), wh(".wh.gone"), wh("del/.wh.x"),
        f("opq/new", b"new"), wh("opq/.wh..wh..opq"),  # marker after this layer's own entry in that directory
        f("wasdir", b"now a file"), d("wasfile/"), f("wasfile/inner", b"i"),
        sym("link", "etc/keep"),
    ], compression=None)
    layer3 = tar_layer([
        d("del/"), wh("del/.wh.y"), f("del/z", b"z"), d("newdir/", 0o750), f("newdir/deep/file", b"deep"),
        wh("wasfile/.wh..wh..opq"),
    ])
    layout = tmp_path / "img"
    oci.write_layout(layout, [layer1, layer2, layer3])
    ours, ref = unpack_both(layout, tmp_path)
    assert_same(ours, ref)
    # and the semantics are the expected ones, not merely shared mistakes
    assert "gone" not in ours and "del/x" not in ours and "del/y" not in ours and "del/z" in ours
    assert "opq/a" not in ours and "opq/sub" not in ours and ours["opq/new"][0] == "file"
    assert ours["wasdir"][0] == "file" and ours["wasfile"][0] == "dir" and "wasfile/inner" not in ours
    assert ours["link"] == ("symlink", 0, 0, "etc/keep")
    assert ours["usr/bin/tool"][1] == 0o755 and ours["usr/bin/tool"][6] == 2


def test_default_image_matches_umoci(tmp_path):
    layout = tmp_path / "layout"
    layout.mkdir()
    with tarfile.open(default_image_archive()) as t:
        t.extractall(layout)
    ours, ref = unpack_both(layout, tmp_path, ref="3.12-slim")
    assert len(ours) > 4000
    assert_same(ours, ref)

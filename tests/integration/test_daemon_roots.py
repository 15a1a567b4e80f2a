"""The images' shared roots (supervisor/core/roots.c, runner/root_share.c): every sandbox of an image binds one
read-only overlay that lensboxd keeps while it runs, with the sandbox's own /etc files and CPU list bound over it.
Proven here: two sandboxes of one image see the same root filesystem (one overlay, one device) and each its own
files; neither can write the root nor its own files; the overlay names no host path; a clean stop leaves nothing; a
SIGKILLed lensboxd's roots stay until its next start sweeps them; removing an image detaches its root at once."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from lensbox_testlib import images  # noqa: E402
from lensbox_testlib.lensboxd import Daemon  # noqa: E402

INSIDE = """
import errno, json, os
out = {"dev": os.stat("/").st_dev, "etc_dev": os.stat("/etc/passwd").st_dev,
       "passwd": open("/etc/passwd").read(), "cpus": open("/sys/devices/system/cpu/online").read()}
for p in ("/etc/passwd", "/etc/hosts", "/etc/resolv.conf", "/sys/devices/system/cpu/online", "/usr/bin/python3"):
    try:
        open(p, "a").close()
        out[p] = "written"
    except OSError as e:
        out[p] = errno.errorcode[e.errno]
mounts = {l.split()[4]: l.split() for l in open("/proc/self/mountinfo")}
out["root_opts"] = mounts["/"][5]
out["root_super"] = mounts["/"][-1]
print(json.dumps(out))
"""


def roots(d):
    """Mount id, mount point and options of each mount under the daemon's run_dir/roots."""
    base = os.path.join(d.run_dir, "roots") + "/"
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if fields[4].startswith(base):
                out.append((fields[0], fields[4], fields[-1]))
    return out


def inside(d, name):
    import json
    return json.loads(d.ok_run(name, INSIDE)["stdout"])


def test_sandboxes_of_an_image_share_one_root_and_keep_their_own_files():
    with Daemon() as d:
        a, b = inside(d, d.name("a")), inside(d, d.name("b"))
        # one overlay for both: the same filesystem at /, and /etc/passwd is another (the sandbox's own bind)
        assert a["dev"] == b["dev"], (a, b)
        assert a["etc_dev"] != a["dev"]
        for o in (a, b):
            assert "sandbox:x:1000:1000" in o["passwd"]
            assert o["cpus"].strip()
            for p in ("/etc/passwd", "/etc/hosts", "/etc/resolv.conf", "/sys/devices/system/cpu/online",
                      "/usr/bin/python3"):
                assert o[p] == "EROFS", (p, o)
            assert o["root_opts"].split(",")[:3] == ["ro", "nosuid", "nodev"], o
            assert "lowerdir=skel:img" in o["root_super"], o  # layers named relative: no host path
        # on the host: one root (its tmpfs, the image's bind, the overlay), read-only
        found = roots(d)
        assert len(found) == 3, found
        overlay = [r for r in found if r[1].endswith("/root")]
        assert len(overlay) == 1 and overlay[0][2].startswith("ro,lowerdir=skel:img"), found
        d.stop()
        assert roots(d) == []
        assert d.leaks() == []


def test_a_killed_daemons_roots_are_swept_at_its_next_start():
    with Daemon() as d:
        d.ok_run(d.name("a"), "pass")
        before = {r[0] for r in roots(d)}
        assert len(before) == 3, roots(d)
        d.kill9()
        # left until the next start, which is what leaks() says for a dead daemon's roots
        assert {r[0] for r in roots(d)} == before
        assert any("/roots/" in x for x in d.leaks(settle=0))
        assert not any("/roots/" in x for x in d.leaks(settle=0, made_ahead=False))
        d.start()
        assert not before & {r[0] for r in roots(d)}, "the dead daemon's roots were not swept"
        d.ok_run(d.name("b"), "pass")
        assert len(roots(d)) == 3
        d.stop()
        assert d.leaks() == []


def test_removing_an_image_detaches_its_root(tmp_path):
    store = tmp_path / "images"
    store.mkdir(mode=0o711)
    images.import_default_image(str(store), name="lbtest/roots:1")
    with Daemon(images_dir=str(store)) as d:
        name = d.name("r")
        assert d.request("PUT", f"/v1/sandboxes/{name}", {"image": "lbtest/roots:1"})[0] == 201
        d.ok_run(name, "pass")
        assert len(roots(d)) == 3
        assert d.request("DELETE", f"/v1/sandboxes/{name}")[0] == 200
        status, body = d.request("DELETE", "/v1/images/lbtest/roots:1")
        assert status == 200, body
        assert roots(d) == [], "the removed image's root is still mounted"
        d.stop()
        assert d.leaks() == []

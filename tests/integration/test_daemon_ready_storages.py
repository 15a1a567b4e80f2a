"""Ready storages (supervisor/core/ready.c, runner/disk_ready.c): lensboxd keeps `ready_storages` empty filesystems
of the default disk size mounted nowhere, and a new sandbox that no spare serves moves one into place instead of
mounting its own during the start. Proven here: the new sandbox's storage image is one that was ready (same inode),
it is the sandbox's alone (its uid's, mounted nosuid,nodev where the sandbox sees it, files kept across a stop),
a sandbox of another disk size does not take one, the pool tops up again, and nothing of a ready storage outlives
lensboxd: neither a clean stop (the images go back to the pool) nor a SIGKILL (the kernel shuts them down and the
next refill gives their images back)."""
import glob
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from lensbox_testlib.lensboxd import Daemon, wait_for  # noqa: E402


def ready(d):
    return d.request("GET", "/v1/health")[1]["ready_storages"]


def pool_files(d, suffix):
    pool = os.path.join(d.state, "disk-pool")
    return {f: os.stat(os.path.join(pool, f)).st_ino for f in os.listdir(pool) if f.endswith(suffix)}


def attached(path_prefix):
    """Backing files of loop devices under path_prefix."""
    out = []
    for bf in glob.glob("/sys/block/loop*/loop/backing_file"):
        try:
            with open(bf) as f:
                b = f.read().strip()
        except OSError:
            continue
        if b.startswith(path_prefix):
            out.append(b)
    return out


def test_a_new_sandbox_takes_a_ready_filesystem_and_it_is_its_own():
    with Daemon(settings={"ready_storages": "2"}) as d:
        assert ready(d)["target"] == 2
        d.ok_run(d.name("first"), "pass")  # the pool's first images exist after a first storage
        assert wait_for(lambda: ready(d)["ready"] == 2, 30), ready(d)
        inodes = set(pool_files(d, ".ready").values())
        assert len(inodes) == 2

        n = d.name("new")
        r = d.ok_run(n, "import os\n"
                        "st = os.stat('/sandbox')\n"
                        "opts = [l.split()[5] for l in open('/proc/self/mountinfo') if l.split()[4] == '/sandbox']\n"
                        "print(os.listdir('/sandbox'), st.st_uid, opts)\n"
                        "open('/sandbox/kept.txt', 'w').write('kept')")
        assert r["stdout"].startswith("[] 1000 ['rw,nosuid,nodev"), r
        img = os.path.join(d.storage_of(n), "disk.img")
        assert os.stat(img).st_ino in inodes  # the image that was ready, now the sandbox's
        assert len(pool_files(d, ".ready")) == 1
        d.request("POST", f"/v1/sandboxes/{n}/stop")
        assert d.ok_run(n, "print(open('/sandbox/kept.txt').read())")["stdout"] == "kept\n"

        # topped up again, by other images
        assert wait_for(lambda: ready(d)["ready"] == 2, 30), ready(d)
        assert os.stat(img).st_ino not in pool_files(d, ".ready").values()

        # another disk size than the default's: a storage of its own, no ready one taken
        before = set(pool_files(d, ".ready").values())
        other = d.name("other")
        s, body = d.request("PUT", f"/v1/sandboxes/{other}", {"disk": "2Gi"})
        assert s in (200, 201), body
        d.ok_run(other, "pass")
        assert os.stat(os.path.join(d.storage_of(other), "disk.img")).st_ino not in before
        assert set(pool_files(d, ".ready").values()) == before

        # a clean stop gives the images back to the pool: nothing attached, nothing left .ready
        pool = os.path.join(d.state, "disk-pool") + "/"
        d.stop()
        assert attached(pool) == []
        assert pool_files(d, ".ready") == {}
        assert d.leaks() == []


def test_nothing_of_a_ready_storage_outlives_a_killed_lensboxd():
    d = Daemon(settings={"ready_storages": "2"})
    try:
        d.ok_run(d.name("first"), "pass")
        assert wait_for(lambda: ready(d)["ready"] == 2, 30), ready(d)
        pool = os.path.join(d.state, "disk-pool") + "/"
        held = pool_files(d, ".ready")
        d.kill9()
        # the kernel shut them down with the daemon's descriptors: no loop device holds them
        assert wait_for(lambda: attached(pool) == [], 10), attached(pool)
        d.start()
        # the first refill after the restart gives the dead instance's images back; the new instance holds its own
        assert wait_for(lambda: ready(d)["ready"] == 2, 30), ready(d)
        assert wait_for(lambda: not (set(held) & set(pool_files(d, ".ready"))), 30)
        now = pool_files(d, ".ready")
        assert len(now) == 2 and all(os.path.join(pool, f) in attached(pool) for f in now), (now, attached(pool))
        # given back to the pool, not lost: each is an image again, or one the new instance made ready in turn
        images = set(pool_files(d, ".img").values()) | set(now.values())
        assert set(held.values()) <= images, (held, images)
    finally:
        d.cleanup()

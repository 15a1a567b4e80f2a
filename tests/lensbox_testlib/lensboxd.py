"""A real lensboxd for tests: started on a temporary socket and state directory, talked to through http.client
over AF_UNIX and through curl --unix-socket, and checked for leaked kernel objects afterwards.

    from lensbox_testlib.lensboxd import Daemon
    with Daemon(settings={"idle_minutes": "2s"}) as d:
        status, body = d.request("GET", "/v1/health")

Each Daemon gets its own directories, its own random host-uid range and names its sandboxes with a per-process
prefix (d.name("x")), so tests running in parallel never share a sandbox, a cgroup or a uid. Standard library only;
runs as root like every lensbox test.
"""

import glob
import http.client
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from . import images

SOURCE_DIR = os.environ.get("LENSBOX_SOURCE_DIR", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BUILD_DIR = os.environ.get("LENSBOX_BUILD_DIR", os.path.join(SOURCE_DIR, "build"))
LENSBOXD = os.path.join(BUILD_DIR, "supervisor", "lensboxd")
DEFAULT_IMAGE = "python:3.12-slim"

sys.path.insert(0, os.path.join(SOURCE_DIR, "clients", "python"))


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout=120):
        super().__init__("lensbox", timeout=timeout)
        self.unix_path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self.unix_path)
        self.sock = s


LENSBOX_IMAGE = os.path.join(BUILD_DIR, "images", "lensbox-image")


def image_tool(root, *args):
    p = subprocess.run([LENSBOX_IMAGE, "--root", root, *args], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, f"lensbox-image {' '.join(args)} failed: {p.stderr}"
    return p.stdout


def shared_images_dir():
    """An image store (images/' layout) holding the default image as python:3.12-slim, imported once per recipe
    hash and shared by every test daemon (they only read it). Concurrent first imports are safe: lb_images
    renames complete images into place."""
    assert os.path.isfile(LENSBOX_IMAGE), f"{LENSBOX_IMAGE} was not built (cmake --build the lensbox-image target)"
    try:
        archive = images.default_image_archive()
    except Exception as e:  # the recipe's own message says what is missing
        raise AssertionError(f"the default image could not be built (images/recipes/python): {e}")
    key = os.path.basename(os.path.dirname(archive))
    root = os.path.join("/var/tmp", "lensbox-test-images", key)
    os.makedirs(root, mode=0o711, exist_ok=True)
    inspect = subprocess.run([LENSBOX_IMAGE, "--root", root, "inspect", DEFAULT_IMAGE], capture_output=True)
    if inspect.returncode != 0:
        image_tool(root, "import", archive, "--name", DEFAULT_IMAGE)
    return root



def wait_for(pred, seconds, step=0.05):
    """Polls pred every `step` seconds until it is true or `seconds` have passed; returns its last value."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(step)
    return pred()

class Daemon:
    def __init__(self, settings=None, images_dir=None, start=True, keep_dirs=None, dir_mode=0o700, env=None):
        assert os.path.isfile(LENSBOXD), f"{LENSBOXD} was not built (cmake --build the lensboxd target)"
        self.images = images_dir or shared_images_dir()  # first: it may fail, and then nothing is left behind
        self.dir = keep_dirs or tempfile.mkdtemp(prefix="lbd-")
        os.chmod(self.dir, dir_mode)
        self.socket = os.path.join(self.dir, "sock", "lensboxd.sock")
        self.state = os.path.join(self.dir, "state")
        self.run_dir = os.path.join(self.dir, "run")
        self.prefix = f"t{os.getpid() % 100000}-{random.randrange(36 ** 3):03x}"
        # A host-uid range of its own: daemons of parallel tests must never share a uid. Each sandbox has three ids,
        # its uid, its nobody and its root, uid_range_count apart, so a daemon holds 30000 ids from uid_start.
        self.uid_start = 1_100_000_000 + random.randrange(10000) * 30000
        self.settings = {
            "uid_range_start": str(self.uid_start),
            "uid_range_count": "10000",
            "timer_interval_ms": "200",
            "log_level": "info",
            # netfilter/ owns one host-wide nftables table: only tests about the network tiers turn it on
            "networking": "off",
            # the shared image store outlives each daemon: only tests of image gc (with a store of their own) turn
            # garbage collection on
            "image_gc_after": "0",
            # never reach for a public registry: only tests with a loopback registry of their own pull
            "pull_missing_images": "off",
            # spares are kernel objects in steady state that leaks() would report: only the tests about spares
            # (test_daemon_spares.py) and the API benchmark turn them on
            "spare_sandboxes": "0",
        }
        self.settings.update(settings or {})
        self.env = env  # extra environment for lensboxd (chaos: a preloaded fault), None: the test's own
        self.proc = None
        self.log_path = os.path.join(self.dir, "lensboxd.log")
        if start:
            try:
                self.start()
            except BaseException:
                log = self.read_log() if os.path.exists(self.log_path) else ""
                self.cleanup()
                if log:
                    sys.stderr.write(log[-3000:])
                raise

    # ---- process ----

    def argv(self):
        argv = [LENSBOXD, "--config", os.path.join(self.dir, "none.conf"), "--socket", self.socket,
                "--state-dir", self.state, "--run-dir", self.run_dir,
                "--policy-dir", os.path.join(SOURCE_DIR, "policy"), "--images-dir", self.images]
        for k, v in self.settings.items():
            argv += ["--set", f"{k}={v}"]
        return argv

    def start(self, timeout=20):
        open(os.path.join(self.dir, "none.conf"), "a").close()
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.argv(), stdout=self.log, stderr=self.log,
                                     env={**os.environ, **self.env} if self.env else None)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"lensboxd exited with {self.proc.returncode} at start:\n{self.read_log()[-3000:]}")
            if os.path.exists(self.socket):
                try:
                    status, _ = self.request("GET", "/v1/health", timeout=5)
                    if status == 200:
                        return
                except OSError:
                    pass
            time.sleep(0.05)
        raise AssertionError(f"lensboxd did not answer within {timeout} s:\n{self.read_log()[-3000:]}")

    def stop(self, sig=signal.SIGTERM, timeout=60):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError("lensboxd did not stop within %d s after signal %d" % (timeout, sig))
        rc = self.proc.returncode if self.proc else None
        self.proc = None
        return rc

    def kill9(self):
        self.proc.kill()
        self.proc.wait()
        self.proc = None

    def read_log(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def cleanup(self):
        """Deletes every sandbox this daemon knows, stops it and removes its directories."""
        if self.proc and self.proc.poll() is None:
            try:
                _, body = self.request("GET", "/v1/sandboxes", timeout=30)
                for sb in body.get("sandboxes", []):
                    self.request("DELETE", "/v1/sandboxes/" + sb["name"], timeout=120)
            except OSError:
                pass
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.cleanup()

    # ---- talking to it ----

    def name(self, suffix):
        return f"{self.prefix}-{suffix}"

    def client(self, timeout=60.0):
        from lensbox_client import Client
        return Client(self.socket, timeout=timeout)

    def raw(self, method, path, body=None, headers=None, timeout=120):
        """(status, headers dict, raw bytes)."""
        conn = UnixHTTPConnection(self.socket, timeout=timeout)
        try:
            if isinstance(body, (dict, list)):
                body = json.dumps(body).encode()
                headers = dict(headers or {}, **{"Content-Type": "application/json"})
            chunked = (headers or {}).get("Transfer-Encoding") == "chunked"
            conn.request(method, path, body=body, headers=headers or {}, encode_chunked=chunked)
            resp = conn.getresponse()
            data = resp.read()
            return resp.status, dict(resp.getheaders()), data
        finally:
            conn.close()

    def request(self, method, path, body=None, headers=None, timeout=120):
        """(status, parsed JSON body or None)."""
        status, _, data = self.raw(method, path, body, headers, timeout)
        try:
            return status, json.loads(data) if data else None
        except ValueError:
            return status, data

    def run(self, name, source, language="python", timeout=120, **fields):
        body = dict(language=language, source=source, **fields)
        return self.request("POST", f"/v1/sandboxes/{name}/runs", body, timeout=timeout)

    def ok_run(self, name, source, language="python", **fields):
        status, body = self.run(name, source, language, **fields)
        assert status == 200, (status, body)
        return body

    def curl(self, *args):
        """curl --unix-socket against the daemon: (status, body bytes)."""
        out = subprocess.run(["curl", "-s", "-S", "--unix-socket", self.socket, "-w", "\n%{http_code}", *args],
                             capture_output=True, timeout=120)
        assert out.returncode == 0, out.stderr
        body, _, code = out.stdout.rpartition(b"\n")
        return int(code), body

    # ---- what the kernel holds ----

    def runner_key(self, name):
        """The runner's name for sandbox `name` (its cgroup, mounts and storage directory): u<host uid>."""
        status, body = self.request("GET", f"/v1/sandboxes/{name}")
        assert status == 200, (status, body)
        return f"u{body['host_uid']}"

    def storage_of(self, name):
        """The storage directory (disk image and lock) of sandbox `name`."""
        return os.path.join(self.state, "sandboxes", self.runner_key(name))

    def leaks(self, settle=3.0, except_uids=(), made_ahead=True):
        """Kernel objects left for this daemon's sandboxes: mounts under run_dir, loop devices backed by files in
        state_dir, cgroups named after its sandboxes (u<host uid>), processes running as one of its host uids
        (zombies excepted: a SIGKILLed process is gone once its parent reaps it). A killed process takes a moment to
        exit, so this looks again for up to `settle` seconds before reporting. except_uids: host uids whose sandboxes
        are meant to be running (spares), left out. made_ahead=False leaves out the cgroup sets a dead daemon made
        ahead for starts and its images' shared roots (its next start sweeps both): for asserting that sandboxes were
        left."""
        deadline = time.monotonic() + settle
        while True:
            found = self._leaks_now(set(except_uids), made_ahead)
            if not found or time.monotonic() >= deadline:
                return found
            time.sleep(0.1)

    def _leaks_now(self, except_uids, made_ahead=True):
        found = []
        keys = [f"u{u}" for u in except_uids]

        def excepted(path_text):
            return any(f"/{k}/" in path_text or path_text.rstrip().endswith(f"/{k}") for k in keys)

        alive = self.proc is not None and self.proc.poll() is None
        with open("/proc/self/mountinfo") as f:
            for line in f:
                where = line.split(" - ")[0]
                if (self.run_dir in line or self.state in where) and not excepted(where.split()[4] + "/"):
                    # the images' shared roots (runner/root_share.c): a running lensboxd's own; a dead one's stay
                    # until its next start sweeps them, like the cgroup sets it made ahead
                    if where.split()[4].startswith(os.path.join(self.run_dir, "roots") + "/") and \
                            (alive or not made_ahead):
                        continue
                    found.append("mount: " + line.strip())
        for bf in glob.glob("/sys/block/loop*/loop/backing_file"):
            try:
                with open(bf) as f:
                    backing = f.read()
                # a running lensboxd's ready storages (runner/disk_ready.c): empty pool images it holds mounted
                # nowhere; once it is gone (stopped or killed), one still attached is a leak like any other
                ready = self.proc is not None and self.proc.poll() is None and \
                    backing.startswith(os.path.join(self.state, "disk-pool") + "/") and \
                    backing.rstrip().endswith(".ready")
                if backing.startswith(self.state) and not excepted(backing) and not ready:
                    found.append(f"loop: {bf} ({backing.strip()})")
            except OSError:
                pass
        lo, hi = self.uid_start, self.uid_start + 10000
        # the runner names a sandbox's cgroup after its host uid (u<uid>), which is in this daemon's range
        for cg in glob.glob("/sys/fs/cgroup/*/lensbox/u*") + glob.glob("/sys/fs/cgroup/unified/lensbox/u*") + \
                glob.glob("/sys/fs/cgroup/lensbox/u*"):
            key = os.path.basename(cg)[1:]
            if key.isdigit() and lo <= int(key) < hi and int(key) not in except_uids:
                found.append("cgroup: " + cg)
        # cgroup directories a running lensboxd made ahead for starts (runner/cgroup_ready.c), named after its uid
        # range; once it is gone, one left is a leak (its next start sweeps them, a stopped one removes them)
        if made_ahead and (self.proc is None or self.proc.poll() is not None):
            found += ["cgroup made ahead: " + cg for cg in glob.glob(f"/sys/fs/cgroup/*/lensbox/r{self.uid_start}-*")]
        for st in glob.glob("/proc/[0-9]*/status"):
            try:
                with open(st) as f:
                    fields = dict(line.split(":", 1) for line in f if ":" in line)
                uid = int(fields["Uid"].split()[0])
                if lo <= uid < hi and uid not in except_uids and not fields.get("State", "").strip().startswith("Z"):
                    found.append(f"process: {st} uid {uid}")
            except (OSError, KeyError, ValueError):
                pass
        return found

"""The chaos and soak harness: lensbox under repeated crashes, load, exhausted resources and noisy neighbours.

Each part is a function taking a Scale (how many tries, how long) and returning a Part: its tries, failures (each a
sentence), leaks (each a kernel object or process left), latencies in ms, and notes (figures and findings that are
not failures). tests/chaos/test_*.py run them short (the ctest label `chaos`), scripts/soak runs them long and prints
the table docs/reliability.md holds.

What is checked after lensboxd dies or is restarted (`check_restart`):
  - every upload it acknowledged (201) is there with its checksum, unless its sandbox was being deleted then;
  - every run it answered (200) is in the ledger (`GET /v1/runs/{id}`);
  - no mount, loop device, cgroup or process of its sandboxes (Daemon.leaks), no process lensboxd started (any
    descendant of the pid the harness started — the core, whatever it forks: an API process, the services), no
    `lbh*` veth or `sb<N>_*` nft chain of its network beyond the warm slots it keeps (in the sealed world's host
    namespace, when networking is on);
  - `PRAGMA integrity_check` of state.db is `ok` (read while lensboxd is down);
  - `/v1/health` says `can_run`.
lensboxd is found by the pid the harness started (Daemon.proc.pid), never by name, and it may be one process or more.

Safety: traffic goes only over lensboxd's Unix socket and, for the network parts, inside the sealed world of
tests/lensbox_testlib/networld.py. Every part is bounded in tries and seconds. Standard library only.
"""
import glob
import hashlib
import json
import re
import os
import random
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from lensbox_testlib.lensboxd import LENSBOXD, Daemon  # noqa: E402
from lensbox_testlib.images import import_default_image  # noqa: E402
from lensbox_testlib import svcload  # noqa: E402

# Statuses and codes docs/api.md documents for overload and exhaustion, and for the core ending mid-request (the API
# process says so in the instant before it ends too; like a dropped connection, nothing is acknowledged): anything
# else under load is unexplained.
OVERLOAD = {(429, "capacity"), (503, "busy"), (503, "host_unavailable"), (503, "core_unavailable")}


def no_retry_after(st, hdrs, data):
    """True for an overload answer (each carries Retry-After in docs/api.md) without the header."""
    return (st, _code(_json(data) if data else None)) in OVERLOAD and not any(k.lower() == "retry-after"
                                                                              for k in hdrs)


@dataclass
class Scale:
    kills: int = 10            # lensboxd SIGKILLs (part 1)
    sandboxes: int = 4         # sandboxes of the mixed workload
    service_kills: int = 5     # of the services' worker and of their supervisor, each (part 2)
    load_seconds: float = 30   # part 4
    load_connections: int = 40
    load_sandboxes: int = 10
    noise_seconds: float = 8   # each noisy neighbour (part 6)
    host_rounds: int = 1       # loop devices exhausted, fd limits reached (faults: host, hostfaults.py)


SHORT = Scale()
FULL = Scale(kills=100, sandboxes=20, service_kills=50, load_seconds=600, load_connections=200, load_sandboxes=50,
             noise_seconds=30, host_rounds=10)


@dataclass
class Part:
    name: str
    tries: int = 0
    failures: list = field(default_factory=list)
    leaks: list = field(default_factory=list)
    latencies: dict = field(default_factory=dict)  # label -> [ms]
    notes: list = field(default_factory=list)
    known: list = field(default_factory=list)  # leaks of a bug already reported, told apart by their signature
    deferred: list = field(default_factory=list)  # sandbox inits left at a kill, for the restart to end

    def fail(self, msg):
        self.failures.append(msg)

    def lat(self, label, ms):
        self.latencies.setdefault(label, []).append(ms)


def pct(values, p):
    return svcload.percentile(values, p)


def sha(data):
    return hashlib.sha256(data).hexdigest()


# ---- what lensboxd holds ----

def descendants(pid):
    """Every process below pid (children of every thread, recursively)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for task in _listdir(f"/proc/{p}/task"):
            try:
                with open(f"/proc/{p}/task/{task}/children") as f:
                    kids = [int(x) for x in f.read().split()]
            except OSError:
                kids = []
            out += kids
            todo += kids
    return out


def _listdir(path):
    try:
        return os.listdir(path)
    except OSError:
        return []


def _cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline") as f:
            return f.read().replace("\0", " ")
    except OSError:
        return ""


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def proc_figures(pid):
    """(RSS in KiB, open fds) of lensboxd: the core plus every process of lensboxd's own program below it (the API
    process once lensboxd is split), not the sandboxes or the services."""
    exe = os.path.realpath(f"/proc/{pid}/exe")
    rss = fds = 0
    for p in [pid] + descendants(pid):
        try:
            if os.path.realpath(f"/proc/{p}/exe") != exe or (p != pid and _uid(p) != 0 and _comm(p) != "lensboxd-api"):
                continue
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        rss += int(line.split()[1])
            fds += len(os.listdir(f"/proc/{p}/fd"))
        except OSError:
            pass
    return rss, fds


def _comm(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def _uid(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("Uid:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return -1  # gone meanwhile


def integrity(d):
    db = sqlite3.connect(f"file:{os.path.join(d.state, 'state.db')}?mode=ro", uri=True, timeout=10)
    try:
        return db.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        db.close()


def stop_and_check_integrity(d, part):
    """Stops lensboxd in an orderly way, then fails part unless its state database passes PRAGMA integrity_check."""
    d.stop()
    r = integrity(d)
    if r != "ok":
        part.fail(f"PRAGMA integrity_check after the faults: {r}")


WARM_SLOTS = 2 * 4  # lensboxd's network_warm_slots (default 4) for each of web and packages


def net_leaks(world):
    """lbh* veths, and sb<N>_* chains of a slot that is connected (a map element names lbh<N>) or beyond the warm
    slots lensboxd keeps (a slot's chains without element or veth, loaded for the next sandbox), left in the sealed
    world's host namespace."""
    found = []
    links = json.loads(subprocess.run(["ip", "-n", world.host, "-j", "link", "show"], capture_output=True,
                                      text=True).stdout or "[]")
    found += [f"veth: {link['ifname']}" for link in links if link["ifname"].startswith("lbh")]
    out = subprocess.run(["ip", "netns", "exec", world.host, "nft", "list", "table", "inet", "lensbox"],
                         capture_output=True, text=True).stdout
    connected = set(re.findall(r'"lbh(\d+)"', out))
    slots = {}
    for m in re.finditer(r"^\s*chain (sb(\d+)_\w+)", out, re.M):
        slots.setdefault(m.group(2), []).append(m.group(1))
    warm = [n for n in slots if n not in connected]
    for n, chains in sorted(slots.items()):
        if n in connected or len(warm) > WARM_SLOTS:
            found += [f"nft chain: {c}" for c in chains]
    return found


def stuck_sandbox_init(pid):
    """The known leak (reported, see docs/reliability.md): a sandbox's init cloned by lensboxd (the runner's
    start_clone_init) and still waiting for its release when lensboxd died. It is pid 1 of its own pid namespace,
    has no parent-death signal and holds copies of lensboxd's descriptors (state.db.lock among them, so lensboxd cannot
    start again) and of other starting sandboxes' release sockets (so none of them sees EOF)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            st = f.read()
        nspid = st.split("NSpid:")[1].split("\n")[0].split()
        return len(nspid) == 2 and nspid[1] == "1" and "Threads:\t1\n" in st
    except (OSError, IndexError):
        return False


def kill_core(d, part):
    """SIGKILL the pid the harness started; then every process it had started must go (parent-death signals). What
    is left is a leak; it is then killed by its pid (the harness started it), so that the next round can run."""
    pid = d.proc.pid
    svc = int(d.settings.get("services_uid", "999999999"))
    below = [p for p in descendants(pid) if _uid(p) in (0, svc)]
    d.kill9()
    # and what it forked between the listing and the kill: every process whose command line is this daemon's
    # (same --socket), wherever it was reparented, and every process below those
    mine = [int(p) for p in _listdir("/proc") if p.isdigit() and d.socket in _cmdline(int(p))]
    below = sorted(set(below + mine + [q for p in mine for q in descendants(p) if _uid(q) in (0, svc)]))
    deadline = time.monotonic() + 5
    while any(alive(p) for p in below) and time.monotonic() < deadline:
        time.sleep(0.05)
    part.deferred = []
    for p in below:
        if alive(p) and os.path.realpath(f"/proc/{p}/exe") != os.path.realpath(LENSBOXD) and \
                "lensbox-init" in _cmdline(p):
            part.deferred.append(p)  # a sandbox's own init (exec'd): restart's reconciliation must end it
        elif alive(p):
            what = "known: sandbox init stuck before its release" if stuck_sandbox_init(p) else "process"
            try:
                cmd = open(f"/proc/{p}/cmdline").read().replace("\0", " ")[:80]
            except OSError:
                cmd = "?"
            (part.known if what.startswith("known") else part.leaks).append(
                f"{what} {p} outlived lensboxd: {cmd}")
            try:
                os.kill(p, 9)
            except OSError:
                pass


# ---- part 1: kill -9 during a mixed workload ----

class ImageSource:
    """What the workload's image operations use: an OCI layout to import by path and the same layout served as a
    registry on 127.0.0.1 (test_image_pull's Front, no auth) to pull from. Nothing leaves the loopback interface."""

    def __init__(self, tmp):
        sys.path.insert(0, os.path.join(os.path.dirname(HERE), "integration"))
        from lensbox_testlib import oci
        from test_image_pull import Front
        layer = oci.tar_layer([oci.f("usr/bin/python3", b"", 0o755), oci.f("bin/bash", b"", 0o755),
                               oci.f("chaos", os.urandom(64 << 10))])
        self.layout = os.path.join(tmp, "chaos-layout")
        oci.write_layout(self.layout, [layer], ref_name="1")
        self.front = Front(self.layout, "127.0.0.1", auth=False)

    def close(self):
        self.front.shutdown()


def image_leftovers(images_dir):
    """What an interrupted import or pull may leave and a restart must clean: temporary trees, partial blobs."""
    found = [f"tmp/{n}" for n in _listdir(os.path.join(images_dir, "tmp"))]
    blobs = os.path.join(images_dir, "layout", "blobs", "sha256")
    return found + [f"blobs/{n}" for n in _listdir(blobs) if n.endswith(".partial")]


class Workload:
    """Threads doing random API calls on a pool of sandboxes, remembering what lensboxd acknowledged."""

    def __init__(self, d, names, tiers=("off",), images=None):
        self.d, self.names, self.tiers, self.image_source = d, names, tiers, images
        self.images = {}     # name -> config digest of an image import or pull answered 200
        self.lock = threading.Lock()
        self.files = {}      # (sandbox, path) -> sha256 of an upload answered 201 and no delete could have undone
        self.deleted_at = {}  # sandbox -> when its last DELETE was answered: uploads sent before may be gone
        self.runs = {}       # run id -> sandbox, of runs answered 200
        self.uncertain = set()  # sandboxes a delete was sent for and not answered
        self.unexplained = []
        self.stop = threading.Event()
        self.seq = 0

    def _next(self):
        with self.lock:
            self.seq += 1
            return self.seq

    def _raw(self, method, path, body=None, timeout=120):
        """d.raw, and a 429/503 without Retry-After is unexplained."""
        st, hdrs, data = self.d.raw(method, path, body, timeout=timeout)
        if no_retry_after(st, hdrs, data):
            self.unexplained.append(f"{method} {path} -> {st} without Retry-After: {data[:200]!r}")
        return st, hdrs, data

    def _req(self, method, path, body=None, timeout=120):
        st, _, data = self._raw(method, path, body, timeout)
        return st, _json(data) if data else None

    def one(self):
        n = random.choice(self.names)
        op = random.choices(["put", "get", "list", "run_py", "run_bash", "stop", "delete", "tier", "ls", "image"],
                            [6, 3, 2, 4, 2, 1, 1, 1, 1, 1 if self.image_source else 0])[0]
        if op == "put":
            i = self._next()
            data = os.urandom(random.randrange(1, 200_000))
            sent = time.monotonic()
            st, body = self._req("PUT", f"/v1/sandboxes/{n}/files/chaos/{i}.bin", data, timeout=60)
            if st == 201:
                with self.lock:
                    if n not in self.uncertain and sent > self.deleted_at.get(n, 0):
                        self.files[(n, f"chaos/{i}.bin")] = sha(data)
            elif (st, _code(body)) not in OVERLOAD:
                self.unexplained.append(f"PUT file -> {st} {body}")
        elif op == "get":
            with self.lock:
                mine = [k for k in self.files if k[0] == n]
            if mine:
                path = random.choice(mine)[1]
                st, _, data = self._raw("GET", f"/v1/sandboxes/{n}/files/{path}", timeout=60)
                with self.lock:
                    want = self.files.get((n, path))
                if st == 200 and want and sha(data) != want:
                    self.unexplained.append(f"GET {n}/{path}: checksum differs from the acknowledged upload")
                elif st not in (200, 404) and (st, _code(_json(data))) not in OVERLOAD:
                    self.unexplained.append(f"GET file -> {st} {data[:200]!r}")
        elif op in ("list", "ls"):
            path = "/v1/sandboxes" if op == "list" else f"/v1/sandboxes/{n}/files?path=chaos"
            st, body = self._req("GET", path, timeout=60)
            if st not in (200, 404) and (st, _code(body)) not in OVERLOAD:
                self.unexplained.append(f"GET {path} -> {st} {body}")
        elif op in ("run_py", "run_bash"):
            lang, src = ("python", "print(sum(range(1000)))") if op == "run_py" else ("bash", "echo $((6*7))")
            st, body = self._req("POST", f"/v1/sandboxes/{n}/runs", {"language": lang, "source": src}, timeout=120)
            if st == 200 and body.get("id"):
                with self.lock:
                    self.runs[body["id"]] = n
            elif st != 200 and (st, _code(body)) not in OVERLOAD:
                self.unexplained.append(f"run -> {st} {body}")
        elif op == "stop":
            st, body = self._req("POST", f"/v1/sandboxes/{n}/stop", timeout=60)
            if st not in (200, 204, 404) and (st, _code(body)) not in OVERLOAD:
                self.unexplained.append(f"stop -> {st} {body}")
        elif op == "delete":
            with self.lock:
                self.uncertain.add(n)
            st, body = self._req("DELETE", f"/v1/sandboxes/{n}", timeout=120)
            if st in (200, 204, 404):
                with self.lock:
                    self.files = {k: v for k, v in self.files.items() if k[0] != n}
                    self.deleted_at[n] = time.monotonic()
                    self.uncertain.discard(n)
            elif (st, _code(body)) not in OVERLOAD:
                self.unexplained.append(f"DELETE -> {st} {body}")  # an explained refusal leaves it uncertain
        elif op == "tier":
            st, body = self._req("PUT", f"/v1/sandboxes/{n}", {"network": random.choice(self.tiers)}, timeout=120)
            if st not in (200, 201) and (st, _code(body)) not in OVERLOAD:
                self.unexplained.append(f"PUT sandbox tier -> {st} {body}")
        elif op == "image":
            i = self._next()
            if random.random() < 0.5:
                name, path, body = f"chaos/imp:{i}", "/v1/images/import", {"path": self.image_source.layout}
                body["name"] = name
            else:
                name = f"{self.image_source.front.host}/chaos/pull:{i}"
                path, body = "/v1/images/pull", {"ref": name}
            st, body = self._req("POST", path, body, timeout=120)
            if st == 200 and body.get("image", {}).get("digest"):
                with self.lock:
                    self.images[name] = body["image"]["digest"]
            elif (st, _code(body)) not in OVERLOAD:
                self.unexplained.append(f"POST {path} -> {st} {body}")

    def loop(self):
        while not self.stop.is_set():
            try:
                self.one()
            except OSError:
                return  # lensboxd went away mid-request: expected when it is killed

    def run_until_killed(self, threads, kill_after):
        self.stop.clear()
        ts = [threading.Thread(target=self.loop, daemon=True) for _ in range(threads)]
        for t in ts:
            t.start()
        time.sleep(kill_after)
        return ts


def _json(data):
    try:
        return json.loads(data)
    except ValueError:
        return None


def _code(body):
    try:
        return body["error"]["code"]
    except (TypeError, KeyError):
        return None


def check_restart(d, wl, part, world=None):
    """After lensboxd was killed: integrity while it is down, then start it and check what it acknowledged."""
    try:
        r = integrity(d)
        if r != "ok":
            part.fail(f"PRAGMA integrity_check: {r}")
    except sqlite3.Error as e:
        part.fail(f"PRAGMA integrity_check could not run: {e}")
    t0 = time.monotonic()
    d.start(timeout=60)
    part.lat("restart", (time.monotonic() - t0) * 1000)
    part.leaks += d.leaks()
    deadline = time.monotonic() + 5
    while any(alive(p) for p in part.deferred) and time.monotonic() < deadline:
        time.sleep(0.05)
    part.leaks += [f"sandbox init {p} of the killed lensboxd outlived its restart" for p in part.deferred if alive(p)]
    if world is not None:
        deadline = time.monotonic() + 5
        while net_leaks(world) and time.monotonic() < deadline:
            time.sleep(0.1)
        part.leaks += net_leaks(world)
    h = d.request("GET", "/v1/health")[1]
    if not h.get("can_run"):
        part.fail(f"health after restart: can_run false: {h.get('why_not')}")
    names = {s["name"] for s in d.request("GET", "/v1/sandboxes")[1]["sandboxes"]}
    # a DELETE unanswered when lensboxd died may or may not have happened: that sandbox's uploads are not checked
    wl.files = {k: v for k, v in wl.files.items() if k[0] not in wl.uncertain}
    wl.deleted_at.update({n: time.monotonic() for n in wl.uncertain})
    wl.uncertain = set()
    for (n, path), want in list(wl.files.items()):
        if n not in names:
            part.fail(f"sandbox {n} with acknowledged uploads is gone")
            continue
        st, _, data = d.raw("GET", f"/v1/sandboxes/{n}/files/{path}", timeout=60)
        if st != 200 or sha(data) != want:
            part.fail(f"acknowledged upload {n}/{path} lost or changed ({st})")
    for rid in list(wl.runs):
        st, _ = d.request("GET", f"/v1/runs/{rid}")
        if st != 200:
            part.fail(f"run {rid} answered 200 is not in the ledger ({st})")
    # every image import or pull answered 200 is there under its name; nothing half-made is left in the store
    for name, digest in list(wl.images.items()):
        st, body = d.request("GET", f"/v1/images/{name}")
        if st != 200 or (body.get("image") or {}).get("digest") != digest:
            part.fail(f"acknowledged image {name} lost or changed ({st} {body})")
    if wl.image_source:
        left = image_leftovers(d.images)
        if left:
            part.fail(f"the image store keeps what interrupted imports or pulls left: {left[:5]}")


def part_kill9(scale, world_daemon=None):
    """lensboxd SIGKILLed at random moments of a mixed workload, then started again on the same state."""
    part = Part("kill -9 lensboxd")
    images = None
    if world_daemon:
        world, d = world_daemon
        tiers = ("off", "packages", "web")
    else:
        # a store of its own (the default image imported into it), so that its imports and pulls touch no other
        # test's images
        images_dir = tempfile.mkdtemp(prefix="lbchaos-images-")
        os.chmod(images_dir, 0o711)
        import_default_image(images_dir)
        images = ImageSource(tempfile.mkdtemp(prefix="lbchaos-layout-"))
        images.store = images_dir
        world, tiers = None, ("off",)
        d = Daemon(images_dir=images_dir, settings={"insecure_registries": images.front.host})
    try:
        names = [d.name(f"c{i}") for i in range(scale.sandboxes)]
        wl = Workload(d, names, tiers, images)
        for i in range(scale.kills):
            ts = wl.run_until_killed(threads=min(8, scale.sandboxes * 2), kill_after=random.uniform(0.5, 2.5))
            kill_core(d, part)
            wl.stop.set()
            for t in ts:
                t.join(timeout=150)
            part.tries += 1
            check_restart(d, wl, part, world)
        part.failures += [f"unexplained answer: {u}" for u in wl.unexplained]
        part.notes.append(f"{len(wl.files)} uploads, {len(wl.runs)} runs and {len(wl.images)} image imports and "
                          f"pulls acknowledged and checked after each restart")
    finally:
        if not world_daemon:
            d.cleanup()
            images.close()
            shutil.rmtree(os.path.dirname(images.layout), ignore_errors=True)
            shutil.rmtree(images.store, ignore_errors=True)
    return part


# ---- part 2: the services' processes killed, through lensboxd ----

def part_services(scale):
    """The resolver's and relay's worker and supervisor SIGKILLed in turn under a lensboxd with networking on (in the
    sealed world): each time /v1/health must show a new one serving within 1 s, the counts must add up, and nothing
    may be left when lensboxd is killed at the end. (Traffic during the kills: test_network_services_crash.py.)"""
    from lensbox_testlib import networld
    part = Part("services crash")
    gen = networld.world_daemon()
    world, d = next(gen)
    try:
        svc = lambda: d.request("GET", "/v1/health")[1]["network"]["services"]  # noqa: E731
        keeper = [p for p in descendants(d.proc.pid) if _uid(p) == 999999999 and
                  int(open(f"/proc/{p}/status").read().split("PPid:")[1].split()[0]) == d.proc.pid]
        if len(keeper) != 1:
            part.fail(f"expected one services keeper below lensboxd, found {keeper}")
            return part
        for i in range(2 * scale.service_kills):
            kind = "worker" if i % 2 == 0 else "supervisor"
            sup = [p for p in descendants(keeper[0]) if _ppid(p) == keeper[0]]
            victim = sup[0] if kind == "supervisor" else [p for p in descendants(sup[0]) if _ppid(p) == sup[0]][0]
            before = svc()
            t0 = time.monotonic()
            os.kill(victim, 9)
            while time.monotonic() - t0 < 3:
                s = svc()
                key = "restarts" if kind == "worker" else "supervisor_restarts"
                if s["alive"] and s[key] == before[key] + 1:
                    break
                time.sleep(0.01)
            took = time.monotonic() - t0
            part.tries += 1
            part.lat(kind, took * 1000)
            if not (s["alive"] and s["supervised"]) or took >= 1.0:
                part.fail(f"{kind} kill {i}: services {s} after {took:.2f} s")
            time.sleep(1.05)  # served 1 s: the next replacement comes after the first delay again
        s = svc()
        if s["crash_loop"]:
            part.fail(f"kills 1 s apart reported as a crash loop: {s}")
        kill_core(d, part)
        # the cgroup sets lensboxd made ahead for starts stay, empty, until its next start sweeps them (checked below)
        made_ahead = set(glob.glob(f"/sys/fs/cgroup/*/lensbox/r{d.uid_start}-*"))
        part.leaks += d.leaks(made_ahead=False) + net_leaks(world)
        inodes = {os.stat(p).st_ino for p in made_ahead}
        d.start(timeout=60)
        left = [p for p in made_ahead if os.path.exists(p) and os.stat(p).st_ino in inodes]
        part.leaks += ["cgroup made ahead, not swept at the restart: " + p for p in left]
    finally:
        try:
            next(gen)
        except StopIteration:
            pass
    return part


def _ppid(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            return int(f.read().split("PPid:")[1].split()[0])
    except (OSError, IndexError, ValueError):
        return -1


# ---- part 5: capacity faults ----

def part_capacity(scale):
    """max_running reached and the uid range exhausted: each gives `429 capacity` (docs/api.md) with its sentence,
    and goes away by itself when the cause does."""
    part = Part("faults: capacity")
    d = Daemon(settings={"max_running": "1", "uid_range_count": "3"})
    try:
        a, b, c, e = (d.name(x) for x in "abce")
        for n in (a, b, c):
            st, body = d.request("PUT", f"/v1/sandboxes/{n}", {})
            part.tries += 1
            if st not in (200, 201):
                part.fail(f"PUT {n}: {st} {body}")
        st, hdrs, raw = d.raw("PUT", f"/v1/sandboxes/{e}", {})
        body = json.loads(raw) if raw else None
        part.tries += 1
        if st == 429 and hdrs.get("Retry-After") != "1":
            part.fail(f"429 capacity without `Retry-After: 1` (docs/api.md): {hdrs}")
        if (st, _code(body)) != (429, "capacity"):
            part.fail(f"a 4th sandbox with 3 host uids: {st} {body}")
        else:
            part.notes.append(f"uid range exhausted: 429 capacity: {body['error']['message']}")
        d.request("DELETE", f"/v1/sandboxes/{c}")
        st, body = d.request("PUT", f"/v1/sandboxes/{e}", {})
        if st not in (200, 201):
            part.fail(f"after a delete freed a uid: {st} {body}")
        # max_running 1: a long run holds the only running sandbox; another sandbox's run must get 429
        holder = threading.Thread(target=lambda: d.run(a, "import time; time.sleep(4)", timeout=60))
        holder.start()
        deadline = time.monotonic() + 20
        while d.request("GET", "/v1/health")[1]["runs_in_flight"] < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        st, hdrs, raw = d.raw("POST", f"/v1/sandboxes/{b}/runs", {"language": "python", "source": "print(1)"})
        body = json.loads(raw) if raw else None
        part.tries += 1
        if hdrs.get("Retry-After") != "1":
            part.fail(f"429 capacity without `Retry-After: 1` (docs/api.md): {hdrs}")
        if (st, _code(body)) != (429, "capacity"):
            part.fail(f"a run past max_running with every sandbox busy: {st} {body}")
        else:
            part.notes.append(f"max_running reached: 429 capacity: {body['error']['message']}")
        holder.join()
        st, body = d.run(b, "print(1)")
        if st != 200:
            part.fail(f"after the busy run ended: {st} {body}")
    finally:
        d.cleanup()
    part.leaks += d.leaks(settle=3)
    return part


# ---- part 4: load ----

def part_load(scale):
    """load_connections clients at once for load_seconds on load_sandboxes sandboxes: health, listings, uploads,
    downloads, python and bash runs. Every answer is a success or a documented overload answer (429/503 with its
    code) carrying Retry-After; p50/p99 per endpoint; lensboxd's RSS and open fds (core and API process) back to
    where they were once the load ends."""
    part = Part("load")
    d = Daemon(settings={"max_running": str(max(4, scale.load_sandboxes // 2))})
    try:
        names = [d.name(f"l{i}") for i in range(scale.load_sandboxes)]
        for n in names:  # made before the clock starts, each with one file to read back
            d.request("PUT", f"/v1/sandboxes/{n}/files/seed.txt", b"seed")
        lock = threading.Lock()
        uploaded = {n: {"seed.txt": b"seed"} for n in names}
        stop = threading.Event()
        unexplained = []

        def check(label, st, hdrs, raw, ok):
            if st in ok:
                return True
            body = _json(raw) if raw else None
            if (st, _code(body)) in OVERLOAD:
                if not hdrs.get("Retry-After"):
                    unexplained.append(f"{label} -> {st} {_code(body)} without Retry-After")
                return False
            unexplained.append(f"{label} -> {st} {raw[:200]!r}")
            return False

        def client(k):
            rnd = random.Random(k)
            seq = 0
            while not stop.is_set():
                n = rnd.choice(names)
                op = rnd.choices(["health", "list", "get_sandbox", "put", "get", "ls", "run_py", "run_bash"],
                                 [2, 2, 2, 3, 3, 1, 3, 2])[0]
                t0 = time.monotonic()
                try:
                    if op == "health":
                        st, h, raw = d.raw("GET", "/v1/health", timeout=60)
                        check(op, st, h, raw, (200,))
                    elif op == "list":
                        st, h, raw = d.raw("GET", "/v1/sandboxes", timeout=60)
                        check(op, st, h, raw, (200,))
                    elif op == "get_sandbox":
                        st, h, raw = d.raw("GET", f"/v1/sandboxes/{n}", timeout=60)
                        check(op, st, h, raw, (200,))
                    elif op == "put":
                        seq += 1
                        path, data = f"c{k}/{seq}.bin", os.urandom(rnd.randrange(1, 20000))
                        st, h, raw = d.raw("PUT", f"/v1/sandboxes/{n}/files/{path}", data, timeout=60)
                        if check(op, st, h, raw, (201,)):
                            with lock:
                                uploaded[n][path] = data
                    elif op == "get":
                        with lock:
                            path, want = rnd.choice(list(uploaded[n].items()))
                        st, h, raw = d.raw("GET", f"/v1/sandboxes/{n}/files/{path}", timeout=60)
                        if check(op, st, h, raw, (200,)) and raw != want:
                            unexplained.append(f"GET {n}/{path}: not the acknowledged bytes")
                    elif op == "ls":
                        st, h, raw = d.raw("GET", f"/v1/sandboxes/{n}/files", timeout=60)
                        check(op, st, h, raw, (200,))
                    else:
                        lang, src = (("python", "print(sum(range(1000)))") if op == "run_py"
                                     else ("bash", "echo $((6*7))"))
                        st, h, raw = d.raw("POST", f"/v1/sandboxes/{n}/runs", {"language": lang, "source": src},
                                           timeout=120)
                        if check(op, st, h, raw, (200,)) and (_json(raw) or {}).get("exit_code") != 0:
                            unexplained.append(f"{op} in {n}: {raw[:200]!r}")
                except OSError as e:
                    unexplained.append(f"{op}: {e!r}")
                part.tries += 1
                part.lat(op, (time.monotonic() - t0) * 1000)

        ts = [threading.Thread(target=client, args=(k,), daemon=True) for k in range(scale.load_connections)]
        before = proc_figures(d.proc.pid)
        t_end = time.monotonic() + scale.load_seconds
        for t in ts:
            t.start()
        samples = []
        while time.monotonic() < t_end:
            time.sleep(1)
            samples.append(proc_figures(d.proc.pid))
        stop.set()
        for t in ts:
            t.join(timeout=180)
        # A running sandbox holds descriptors in the core (its process, cgroup, storage) by design: stop them all, so
        # that what is left to compare is what the load itself may have leaked.
        for n in names:
            d.raw("POST", f"/v1/sandboxes/{n}/stop", timeout=60)
        time.sleep(2)
        after = proc_figures(d.proc.pid)
        part.failures += [f"unexplained answer: {u}" for u in unexplained[:20]]
        if len(unexplained) > 20:
            part.fail(f"... and {len(unexplained) - 20} more unexplained answers")
        peak_rss = max(r for r, _ in samples) if samples else after[0]
        part.notes.append(f"{scale.load_connections} clients, {scale.load_sandboxes} sandboxes, "
                          f"{scale.load_seconds:.0f} s: {part.tries} requests; lensboxd RSS {before[0]} KiB before, "
                          f"{peak_rss} KiB at most, {after[0]} KiB after; open fds {before[1]} before, {after[1]} after")
        # flat: after the load, what lensboxd holds is back where it was; the channel pool may stay grown, up to 64
        # idle channels with one end in the API process and one in the core
        if after[1] > before[1] + 2 * 64 + 8:
            part.fail(f"lensboxd holds {after[1]} fds after the load, {before[1]} before: a leak")
        # growing: the second half's median above the first half's. Not their peaks: the API process holds request
        # bodies in memory while they pass (bounded, docs/configuration.md), so single samples spike and fall back.
        half = samples[len(samples) // 2:] if samples else []
        first = samples[:len(samples) // 2] or [(1, 0)]
        if half and statistics.median(r for r, _ in half) > 1.5 * statistics.median(r for r, _ in first) + 16384:
            part.fail(f"lensboxd's RSS kept growing under a steady load: {[r for r, _ in samples]}")
        for n in names:  # every acknowledged upload reads back
            for path, want in list(uploaded[n].items())[-3:]:
                st, _, raw = d.raw("GET", f"/v1/sandboxes/{n}/files/{path}")
                if st != 200 or raw != want:
                    part.fail(f"acknowledged upload {n}/{path} lost or changed ({st})")
    finally:
        d.cleanup()
    part.leaks += d.leaks(settle=5)
    return part


# ---- part 5: resource faults (the state directory) ----

def _answer_ok(part, label, st, hdrs, raw, ok):
    """A success, or a documented answer for the fault (503 busy / host_unavailable) with Retry-After."""
    if st in ok:
        return True
    body = _json(raw) if raw else None
    if (st, _code(body)) in {(503, "busy"), (503, "host_unavailable")} and hdrs.get("Retry-After"):
        part.notes.append(f"{label}: {st} {_code(body)}: {body['error']['message'][:160]}")
    else:
        part.fail(f"{label}: {st} {raw[:300]!r}")
    return False


def part_state_faults(scale):
    """The state database held by another process past lensboxd's busy timeout, and the state directory's filesystem
    full (a 48 MiB tmpfs): each request gets a success or a documented 503 with its cause, nothing acknowledged is
    lost, the database stays intact, and lensboxd serves again by itself once the cause goes."""
    part = Part("faults: state")
    d = Daemon(start=False, settings={"spare_sandboxes": "0"})
    mounted = False
    try:
        os.makedirs(d.state, mode=0o700, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m,mode=0700", "lensbox-chaos", d.state], check=True)
        mounted = True
        d.start(timeout=60)
        a, b, c = (d.name(x) for x in "abc")
        st, h, raw = d.raw("PUT", f"/v1/sandboxes/{a}/files/keep.txt", b"acknowledged")
        if st != 201:
            part.fail(f"first upload: {st} {raw[:200]!r}")

        # SQLite busy: another process holds the write lock for 7 s (lensboxd waits 5 s)
        held, go = threading.Event(), threading.Event()

        def hold():
            db = sqlite3.connect(os.path.join(d.state, "state.db"), timeout=1, isolation_level=None)
            db.execute("BEGIN EXCLUSIVE")
            held.set()
            go.wait(7)
            db.execute("ROLLBACK")
            db.close()

        t = threading.Thread(target=hold)
        t.start()
        held.wait(10)
        st, h, raw = d.raw("PUT", f"/v1/sandboxes/{b}", {}, timeout=60)
        part.tries += 1
        if _answer_ok(part, "a new sandbox while the database is held", st, h, raw, (200, 201)):
            part.notes.append("a new sandbox while the database was held: created (lensboxd waited)")
        go.set()
        t.join()
        st, h, raw = d.raw("PUT", f"/v1/sandboxes/{b}", {})
        if st not in (200, 201):
            part.fail(f"a new sandbox once the database is free: {st} {raw[:200]!r}")

        # the state directory full
        filler = os.path.join(d.state, "filler")
        with open(filler, "wb") as f:
            try:
                while True:
                    f.write(b"\0" * (1 << 20))
                    f.flush()
            except OSError:
                pass
        for label, method, path, body, ok in (
                ("a new sandbox", "PUT", f"/v1/sandboxes/{c}", {}, (200, 201)),
                ("an upload to a new sandbox", "PUT", f"/v1/sandboxes/{c}/files/x.bin", os.urandom(200_000), (201,)),
                ("a run", "POST", f"/v1/sandboxes/{a}/runs", {"language": "python", "source": "print(1)"}, (200,)),
                ("a download", "GET", f"/v1/sandboxes/{a}/files/keep.txt", None, (200,))):
            st, h, raw = d.raw(method, path, body, timeout=120)
            part.tries += 1
            _answer_ok(part, f"{label}, state directory full", st, h, raw, ok)
        os.unlink(filler)
        st, h, raw = d.raw("PUT", f"/v1/sandboxes/{c}/files/after.txt", b"after", timeout=120)
        if st != 201:
            part.fail(f"an upload once space is back: {st} {raw[:200]!r}")
        st, h, raw = d.raw("POST", f"/v1/sandboxes/{c}/runs", {"language": "bash", "source": "cat after.txt"})
        if st != 200 or (_json(raw) or {}).get("stdout") != "after":
            part.fail(f"a run once space is back: {st} {raw[:200]!r}")
        st, _, raw = d.raw("GET", f"/v1/sandboxes/{a}/files/keep.txt")
        if (st, raw) != (200, b"acknowledged"):
            part.fail(f"the upload acknowledged before the faults: {st} {raw[:100]!r}")
        stop_and_check_integrity(d, part)
    finally:
        if d.proc and d.proc.poll() is None:
            d.stop()
        part.leaks += [x for x in d.leaks(settle=5) if "lensbox-chaos" not in x]  # not the fault's own tmpfs
        if mounted:
            subprocess.run(["umount", "-l", d.state], check=False)
        d.cleanup()
    return part


# ---- part 6: noisy neighbours ----

NOISES = [  # name, language, source, what its result must say
    ("fork bomb", "bash", "f() { f | f & }; f; sleep 30", lambda r: r.get("pids_limited") or r.get("timed_out")),
    ("cpu spin", "python", "while True: pass", lambda r: r.get("timed_out")),
    ("output flood 1 GB", "python",
     "import sys\nb = b'x' * (1 << 20)\nfor _ in range(1024): sys.stdout.buffer.write(b)",
     lambda r: r.get("stdout_truncated") and r.get("stdout_bytes", 0) >= 1 << 30),
    ("disk fill", "bash", "dd if=/dev/zero of=fill bs=1M 2>&1; df -k . | tail -1",
     lambda r: r.get("exit_code") != 0 or "No space" in r.get("stdout", "") + r.get("stderr", "")),
    ("oom", "python", "a = []\nwhile True: a.append(bytearray(1 << 20))", lambda r: r.get("oom_killed")),
]


def part_noisy(scale):
    """One sandbox (128 MiB memory, 64 MiB disk) runs each noise of NOISES for noise_seconds while another runs
    `print(1)` over and over: the quiet sandbox's runs all succeed, each noise ends with its documented result, and
    lensboxd's RSS stays flat. The quiet runs' p50 and p99 against the same runs with no noise, for as long just before
    each noise, are printed (the soak's 1.5x question); they are figures, not a verdict, on a shared machine."""
    part = Part("noisy neighbours")
    d = Daemon()
    try:
        quiet, noisy = d.name("quiet"), d.name("noisy")
        st, body = d.request("PUT", f"/v1/sandboxes/{noisy}", {"memory": "128Mi", "disk": "64Mi"})
        if st not in (200, 201):
            part.fail(f"PUT {noisy}: {st} {body}")
            return part

        def warm_runs(until):
            lat = []
            while time.monotonic() < until:
                t0 = time.monotonic()
                st, r = d.run(quiet, "print(1)", timeout=120)
                lat.append((time.monotonic() - t0) * 1000)
                if st != 200 or r.get("stdout") != "1\n":
                    part.fail(f"a quiet run beside the noise: {st} {str(r)[:200]}")
            return lat

        d.run(quiet, "print(1)")
        d.run(noisy, "print(1)")
        part.latencies["quiet, alone"] = []
        rss0 = proc_figures(d.proc.pid)[0]
        peak = rss0
        for name, lang, src, says in NOISES:
            # Each noise against its own baseline: as long as the noise and just before it, so that both p99s come
            # from as many runs and from the same minute of this shared machine.
            base = warm_runs(time.monotonic() + scale.noise_seconds)
            part.latencies["quiet, alone"] += base
            out = {}

            def noise():
                out["r"] = d.request("POST", f"/v1/sandboxes/{noisy}/runs",
                                     {"language": lang, "source": src, "timeout_seconds": int(scale.noise_seconds)},
                                     timeout=300)

            t = threading.Thread(target=noise)
            t.start()
            time.sleep(0.5)
            lat = []
            while t.is_alive():
                lat += warm_runs(time.monotonic() + 1)
                peak = max(peak, proc_figures(d.proc.pid)[0])
            t.join()
            part.tries += 1
            part.latencies[f"quiet, beside {name}"] = lat
            st, r = out.get("r", (None, None))
            if st != 200 or not says(r or {}):
                part.fail(f"{name}: {st} {str(r)[:300]}")
            elif lat and base:
                part.notes.append(f"{name}: quiet p50 {pct(lat, 50) / pct(base, 50):.2f}x, p99 "
                                  f"{pct(lat, 99) / pct(base, 99):.2f}x of alone ({len(lat)} runs)")
        rss1 = proc_figures(d.proc.pid)[0]
        part.notes.append(f"lensboxd RSS {rss0} KiB before the noises, {peak} KiB at most, {rss1} KiB after")
        if peak > 2 * rss0 + 65536:
            part.fail(f"lensboxd's RSS grew from {rss0} to {peak} KiB under the noise")
    finally:
        d.cleanup()
    part.leaks += d.leaks(settle=5)
    return part


def table(parts):
    """The soak's table: one line a part."""
    rows = [("part", "tries", "failures", "leaks", "known", "p50 ms", "p99 ms")]
    for p in parts:
        lat = [v for vs in p.latencies.values() for v in vs]
        rows.append((p.name, str(p.tries), str(len(p.failures)), str(len(p.leaks)), str(len(p.known)),
                     f"{pct(lat, 50):.0f}" if lat else "-", f"{pct(lat, 99):.0f}" if lat else "-"))
    w = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w[i]) for i, c in enumerate(r)) for r in rows)


def report(p):
    lines = [f"{p.name}: {p.tries} tries"]
    for k, v in p.latencies.items():
        if not v:
            lines.append(f"  {k}: none")
            continue
        lines.append(f"  {k}: p50 {pct(v, 50):.0f} ms, p99 {pct(v, 99):.0f} ms, worst {max(v):.0f} ms ({len(v)})")
    lines += [f"  note: {n}" for n in p.notes]
    lines += [f"  FAILURE: {f}" for f in p.failures]
    lines += [f"  LEAK: {x}" for x in p.leaks]
    lines += [f"  {x}" for x in p.known]
    return "\n".join(lines)

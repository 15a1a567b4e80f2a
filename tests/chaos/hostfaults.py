"""Chaos part "faults: host" (part_host_faults): the host's loop devices exhausted and lensboxd's file descriptor
limit reached, each for one lensboxd only. A module of its own next to chaos.py, which holds the other parts and the
shared checks (leaks, integrity, the report).

Loop devices are host-wide: they are never really exhausted here. lensboxd is started with tests/chaos/loopfault.c
preloaded (built as build/tests/chaos/libloopfault.so), which answers LOOP_CTL_GET_FREE with ENOSPC, as the kernel
does when no loop device can be added, while a flag file exists. The fd limit is lowered with prlimit on one process
of lensboxd (the core, then the API process) to a few above what it holds: only the soft limit (the hard one stays,
so the test needs no CAP_SYS_RESOURCE), never fs.file-max.

What must hold, or the part reports a failure: every answer is a success or a documented refusal (503 busy /
host_unavailable with Retry-After and its sentence); no request hangs (30 s); lensboxd and its API process stay up
and do not spin; a running sandbox's runs keep working while loop devices are short; nothing acknowledged is lost;
once the cause goes, the same requests succeed without a restart; no leak (Daemon.leaks) and state.db intact.
"""
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time

from chaos import Part, _code, _json, descendants, sha, stop_and_check_integrity
from lensbox_testlib.lensboxd import BUILD_DIR, Daemon

LOOPFAULT = os.path.join(BUILD_DIR, "tests", "chaos", "libloopfault.so")
REFUSED = {(503, "busy"), (503, "host_unavailable")}
NO_LOOP = "no free loop device on this host"


def _verdict(part, label, st, hdrs, raw, ok, must_say=None):
    """'ok' for a success, the refusal's code for a documented refusal with Retry-After (and must_say in its
    sentence when given), else a failure. Every answer is noted with what it got."""
    if st in ok:
        part.notes.append(f"{label}: {st}")
        return "ok"
    body = _json(raw) if raw else None
    code = _code(body)
    msg = body["error"]["message"] if code else ""
    if (st, code) in REFUSED and hdrs.get("Retry-After") and (must_say is None or must_say in msg):
        part.notes.append(f"{label}: {st} {code} (Retry-After {hdrs['Retry-After']}): {msg[:170]}")
        return code
    part.fail(f"{label}: {st} {raw[:300]!r}")
    return None


def _ask(d, part, label, method, path, body=None, timeout=30):
    """(status, headers, raw), or (None, {}, b'') after noting a failure: no answer within timeout is a hang."""
    try:
        return d.raw(method, path, body, timeout=timeout)
    except OSError as e:
        part.fail(f"{label}: no answer ({e!r})")
        return None, {}, b""


def _run_body(source):
    return {"language": "python", "source": source}


def _loop_fault(d, part, flag, acked, rnd):
    """The loop devices exhausted (the flag file exists), then back."""
    a, s, n = d.name("running"), d.name(f"stopped{rnd}"), d.name(f"new{rnd}")
    st, _, raw = d.raw("POST", f"/v1/sandboxes/{a}/runs", _run_body("print('up')"))
    st2, _, raw2 = d.raw("POST", f"/v1/sandboxes/{s}/runs", _run_body("print('up')"))
    st3, _, raw3 = d.raw("POST", f"/v1/sandboxes/{s}/stop")
    if (st, st2, st3) != (200, 200, 200):
        part.fail(f"setting up: {st} {raw[:150]!r} / {st2} {raw2[:150]!r} / stop {st3} {raw3[:150]!r}")
        return
    open(flag, "w").close()
    hits0 = _hits(flag)
    # a running sandbox needs no loop device: its runs and files must work as before
    st, h, raw = _ask(d, part, "a run in a running sandbox, no loop device", "POST", f"/v1/sandboxes/{a}/runs",
                      _run_body("print(6 * 7)"))
    part.tries += 1
    if _verdict(part, "a run in a running sandbox, no loop device", st, h, raw, (200,)) == "ok" and \
            (_json(raw) or {}).get("stdout") != "42\n":
        part.fail(f"a run in a running sandbox, no loop device: {raw[:200]!r}")
    data = os.urandom(50_000)
    st, h, raw = _ask(d, part, "an upload to a running sandbox, no loop device", "PUT",
                      f"/v1/sandboxes/{a}/files/during{rnd}.bin", data)
    part.tries += 1
    if _verdict(part, "an upload to a running sandbox, no loop device", st, h, raw, (201,)) == "ok":
        acked[(a, f"during{rnd}.bin")] = sha(data)
    # what needs a new storage mount must be refused with its cause
    for label, method, path, body in (
            ("a new sandbox's first run, no loop device", "POST", f"/v1/sandboxes/{n}/runs", _run_body("print(1)")),
            ("an upload to a stopped sandbox, no loop device", "PUT", f"/v1/sandboxes/{s}/files/x.txt", b"x"),
            ("a run in a stopped sandbox, no loop device", "POST", f"/v1/sandboxes/{s}/runs", _run_body("print(1)"))):
        st, h, raw = _ask(d, part, label, method, path, body)
        part.tries += 1
        if st is not None and _verdict(part, label, st, h, raw, (), must_say=NO_LOOP) != "host_unavailable":
            pass  # _verdict noted the failure (a success here would mean the fault was not met)
    if _hits(flag) == hits0:
        part.fail("the loop fault was never met (LOOP_CTL_GET_FREE not refused)")
    part.notes.append(f"LOOP_CTL_GET_FREE refused {_hits(flag) - hits0} times")
    os.unlink(flag)
    # the same requests, once loop devices are back, without a restart
    for label, method, path, body, ok in (
            ("a new sandbox's first run, loop devices back", "POST", f"/v1/sandboxes/{n}/runs",
             _run_body("print(1)"), (200,)),
            ("an upload to a stopped sandbox, loop devices back", "PUT", f"/v1/sandboxes/{s}/files/x.txt", b"x", (201,)),
            ("a run in the stopped sandbox, loop devices back", "POST", f"/v1/sandboxes/{s}/runs",
             _run_body("print(open('x.txt').read())"), (200,))):
        st, h, raw = _ask(d, part, label, method, path, body)
        if st not in ok:
            part.fail(f"{label}: {st} {raw[:300]!r}")
    acked[(s, "x.txt")] = sha(b"x")


def _hits(flag):
    try:
        with open(flag + ".hits") as f:
            return len(f.readlines())
    except OSError:
        return 0


def _api_pid(d):
    exe = os.path.realpath(f"/proc/{d.proc.pid}/exe")
    for p in descendants(d.proc.pid):
        try:
            if os.path.realpath(f"/proc/{p}/exe") == exe:
                return p
        except OSError:
            pass
    return None


def _ids(pid):
    st = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            st[k] = v.split()
    return int(st["Uid"][0]), int(st["Gid"][0])


def _nofile(pid, soft=None):
    """The soft and hard RLIMIT_NOFILE of pid; with soft, sets the soft one (the hard one unchanged). For a process
    of another uid (the API process) prlimit runs as that uid: otherwise it would need CAP_SYS_RESOURCE."""
    with open(f"/proc/{pid}/limits") as f:
        line = next(x for x in f if x.startswith("Max open files"))
    cur, hard = line.split()[3:5]
    if soft is not None:
        uid, gid = _ids(pid)
        pre = [] if uid == 0 else ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups"]
        subprocess.run(pre + ["prlimit", "--pid", str(pid), f"--nofile={soft}:{hard}"], check=True)
    return cur, hard


def _cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        x = f.read().rsplit(")", 1)[1].split()
    return int(x[11]) + int(x[12])


def _fd_fault(d, part, which, slack, acked, run_ids, rnd):
    """One process of lensboxd held to slack fds above what it has; requests of every kind, then the limit back.
    With a small slack the limit must be met (some request refused); with a larger one, requests may pass the
    core's headroom check and run out halfway: then too, each answer must be a documented one."""
    pid = d.proc.pid if which == "core" else _api_pid(d)
    if not pid:
        part.fail(f"{which}: the API process was not found below {d.proc.pid}")
        return
    a, m = d.name("running"), d.name(f"fd-{which}-{slack}-{rnd}")
    held = len(os.listdir(f"/proc/{pid}/fd"))
    soft, _ = _nofile(pid)
    _nofile(pid, held + slack)
    idle, results, lock = [], [], threading.Lock()
    refusals = 0
    try:
        t0, c0 = time.monotonic(), _cpu_ticks(pid)
        for _ in range(20):  # connections that only wait: each holds an fd in the API process
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(d.socket)
            idle.append(s)
        reqs = [("health", "GET", "/v1/health", None, (200,)),
                ("a run in a running sandbox", "POST", f"/v1/sandboxes/{a}/runs", _run_body("print(5)"), (200,)),
                ("a new sandbox's first run", "POST", f"/v1/sandboxes/{m}/runs", _run_body("print(5)"), (200,)),
                ("an upload", "PUT", f"/v1/sandboxes/{a}/files/fd-{which}-{slack}-{rnd}.bin", os.urandom(30_000),
                 (201,)),
                ("a download", "GET", f"/v1/sandboxes/{a}/files/during{rnd}.bin", None, (200,)),
                ("a listing", "GET", "/v1/sandboxes", None, (200,))]

        def one(i, req):
            label, method, path, body, ok = req
            st, h, raw = _ask(d, part, f"{which} fd limit +{slack}: {label} #{i}", method, path, body)
            with lock:
                results.append((label, i, st, h, raw, ok, body))

        threads = [threading.Thread(target=one, args=(i, r)) for i in range(3) for r in reqs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        time.sleep(2)  # with the idle connections held: a process at its limit must wait, not spin
        ticks, wall = _cpu_ticks(pid) - c0, time.monotonic() - t0
        for label, i, st, h, raw, ok, body in sorted(results, key=lambda r: (r[0], r[1])):
            part.tries += 1
            if st is None:
                continue
            v = _verdict(part, f"{which} fd limit +{slack}: {label} #{i}", st, h, raw, ok)
            refusals += v not in ("ok", None)
            if v == "ok" and label == "an upload":
                acked[(a, f"fd-{which}-{slack}-{rnd}.bin")] = sha(body)
            if v == "ok" and "run" in label:
                run_ids.append((_json(raw) or {}).get("id"))
        busy = ticks / (os.sysconf("SC_CLK_TCK") * wall)
        part.notes.append(f"{which} fd limit +{slack} ({held} held, soft limit {held + slack}): {refusals} documented refusals, "
                          f"{busy:.0%} of a CPU over {wall:.1f} s")
        if busy > 0.5:
            part.fail(f"{which} fd limit +{slack}: lensboxd's {which} process used {busy:.0%} of a CPU (spinning)")
        if not refusals and slack < 10:
            part.fail(f"{which} fd limit +{slack}: every request succeeded: the limit was never reached")
    finally:
        for s in idle:
            s.close()
        _nofile(pid, soft)
    if d.proc.poll() is not None or (which == "api" and _api_pid(d) != pid):
        part.fail(f"{which} fd limit +{slack}: lensboxd's {which} process did not survive")
        return
    for label, method, path, body, ok in (
            ("health", "GET", "/v1/health", None, (200,)),
            ("a run in the running sandbox", "POST", f"/v1/sandboxes/{a}/runs", _run_body("print(7)"), (200,)),
            ("a new sandbox's first run", "POST", f"/v1/sandboxes/{m}/runs", _run_body("print(7)"), (200,)),
            ("an upload", "PUT", f"/v1/sandboxes/{a}/files/after-{which}-{slack}-{rnd}.txt", b"after", (201,))):
        st, h, raw = _ask(d, part, f"{which} limit +{slack} restored: {label}", method, path, body)
        if st not in ok:
            part.fail(f"{which} limit +{slack} restored: {label}: {st} {raw[:300]!r}")
    acked[(a, f"after-{which}-{slack}-{rnd}.txt")] = sha(b"after")


def part_host_faults(scale):
    """Loop devices exhausted, then the core's and the API process's fd limits reached (see the module's text)."""
    part = Part("faults: host")
    if not os.path.isfile(LOOPFAULT):
        part.fail(f"{LOOPFAULT} was not built (cmake --build the loopfault target)")
        return part
    fdir = tempfile.mkdtemp(prefix="lb-loopfault-")
    flag = os.path.join(fdir, "exhausted")
    # ASan wants its runtime first among the preloads; the shim needs none of it
    d = Daemon(env={"LD_PRELOAD": LOOPFAULT, "LENSBOX_LOOPFAULT_FLAG": flag, "ASAN_OPTIONS": os.environ.get(
        "ASAN_OPTIONS", "") + ":verify_asan_link_order=0"})
    acked, run_ids = {}, []
    try:
        a = d.name("running")
        keep = os.urandom(100_000)
        st, _, raw = d.raw("PUT", f"/v1/sandboxes/{a}/files/keep.bin", keep)
        if st != 201:
            part.fail(f"first upload: {st} {raw[:200]!r}")
        acked[(a, "keep.bin")] = sha(keep)
        for rnd in range(scale.host_rounds):
            _loop_fault(d, part, flag, acked, rnd)
            for which, slack in (("core", 4), ("core", 80), ("api", 4)):
                _fd_fault(d, part, which, slack, acked, run_ids, rnd)
            # the round's sandboxes stopped (files kept), so that rounds never meet max_running
            for name in [d.name(f"stopped{rnd}"), d.name(f"new{rnd}")] + [
                    d.name(f"fd-{w}-{k}-{rnd}") for w, k in (("core", 4), ("core", 80), ("api", 4))]:
                st, _, raw = d.raw("POST", f"/v1/sandboxes/{name}/stop")
                if st not in (200, 404):  # 404: its first run was refused before the sandbox was made
                    part.fail(f"stopping {name} after round {rnd}: {st} {raw[:200]!r}")
        for (name, path), digest in acked.items():
            st, _, raw = d.raw("GET", f"/v1/sandboxes/{name}/files/{path}")
            if st != 200 or sha(raw) != digest:
                part.fail(f"acknowledged upload {name}/{path} lost: {st} {raw[:100]!r}")
        for rid in run_ids:
            st, _, raw = d.raw("GET", f"/v1/runs/{rid}")
            if st != 200:
                part.fail(f"answered run {rid} not in the ledger: {st} {raw[:200]!r}")
        stop_and_check_integrity(d, part)
    finally:
        if d.proc and d.proc.poll() is None:
            d.stop()
        part.leaks += d.leaks(settle=5)
        d.cleanup()
        shutil.rmtree(fdir, ignore_errors=True)
    return part

"""Helpers for the security suite: run lensbox-probe (or any program) inside real sandboxes and read its verdict.

The probe (tests/probe/probe.c, built as $LENSBOX_BUILD_DIR/tests/probe/lensbox-probe) attempts one operation per
invocation and prints one JSON line, e.g. {"op":"bpf","ok":false,"errno":"EPERM","errno_num":1}. Lab builds, once
per test session, small root filesystems that contain it:

  tiny      busybox (sh, ls, cat...) + /usr/local/bin/lensbox-probe + /etc/secret (root, 0600)
  planted   tiny + a setuid-root copy of the probe (/usr/local/bin/suid-probe, 04755 root:root) and a copy carrying
            a security.capability xattr granting CAP_SYS_ADMIN and CAP_SETUID (/usr/local/bin/fcap-probe)

and the default image (images/recipes/python --rootfs) for attacks written in Python. Every sandbox gets its own host
uid (never reused within a session) and storage under a private temporary directory; close() reports any mount or
loop device of ours left behind. Runs as root, standard library only.
"""

import itertools
import json
import os
import shlex
import shutil
import struct
import subprocess
import tempfile
import time

from . import images

SOURCE_DIR = images.SOURCE_DIR
BUILD_DIR = os.environ.get("LENSBOX_BUILD_DIR", os.path.join(SOURCE_DIR, "build"))
RUNNER = os.path.join(BUILD_DIR, "runner", "lensbox-runner")
PROBE = os.path.join(BUILD_DIR, "tests", "probe", "lensbox-probe")
POLICY_DIR = os.path.join(SOURCE_DIR, "policy")
BUSYBOX = "/usr/bin/busybox"  # busybox-static (scripts/install-deps)
IN_PROBE = "/usr/local/bin/lensbox-probe"

# Host uids for sandboxes: a block per test process so parallel ctest runs never share one.
_uids = itertools.count(400000 + (os.getpid() % 2000) * 50)
_names = itertools.count()


class LabError(AssertionError):
    pass


def preflight():
    """Fails (with what to do) when this machine or build cannot run the security suite."""
    if os.geteuid() != 0:
        raise LabError("the security suite runs sandboxes and must run as root")
    for path, what in ((RUNNER, "lensbox-runner"), (PROBE, "lensbox-probe")):
        if not os.access(path, os.X_OK):
            raise LabError(f"{path} is not built: cmake --build {BUILD_DIR} --target {what}")
    if not os.access(BUSYBOX, os.X_OK):
        raise LabError(f"{BUSYBOX} missing: run scripts/install-deps (busybox-static)")


def _cap_xattr(caps):
    """A VFS_CAP_REVISION_2 security.capability value with the effective bit and these permitted capabilities."""
    lo = sum(1 << c for c in caps if c < 32)
    hi = sum(1 << (c - 32) for c in caps if c >= 32)
    return struct.pack("<IIIII", 0x02000000 | 0x1, lo, 0, hi, 0)


CAP_SETUID, CAP_SYS_ADMIN = 7, 21


class Result(dict):
    """lensbox-runner's JSON result; .probes holds the probe lines found in stdout, in order."""

    @property
    def probes(self):
        out = []
        for line in self.get("stdout", "").splitlines():
            line = line.strip()
            if line.startswith("{") and line.endswith("}"):
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    pass
        return out

    @property
    def probe(self):
        p = self.probes
        if len(p) != 1:
            raise AssertionError(f"expected one probe line, got {len(p)}:\n{self.describe()}")
        return p[0]

    def describe(self):
        return json.dumps(self, indent=1)[:6000]


class Lab:
    def __init__(self):
        preflight()
        self.base = tempfile.mkdtemp(prefix="lensbox-security-")
        os.chmod(self.base, 0o755)
        self.run_dir = os.path.join(self.base, "run")
        self._rootfs = {}

    # ---- root filesystems ------------------------------------------------------------------------------------
    def _tiny(self, path):
        for d in ("bin", "usr/bin", "usr/local/bin", "etc", "sandbox", "tmp", "proc", "dev"):
            os.makedirs(os.path.join(path, d), exist_ok=True)
        shutil.copy2(BUSYBOX, os.path.join(path, "bin/busybox"))
        for tool in ("sh", "ls", "cat", "echo", "sleep", "true", "id", "env", "wc", "head", "kill", "ps", "cp", "chmod"):
            os.symlink("busybox", os.path.join(path, "bin", tool))
        shutil.copy2(PROBE, os.path.join(path, IN_PROBE.lstrip("/")))
        os.chmod(os.path.join(path, IN_PROBE.lstrip("/")), 0o755)
        with open(os.path.join(path, "etc/secret"), "w") as f:
            f.write("TOPSECRET\n")
        os.chmod(os.path.join(path, "etc/secret"), 0o600)

    def rootfs(self, kind="tiny"):
        if kind == "image":
            return images.default_rootfs()
        if kind in self._rootfs:
            return self._rootfs[kind]
        path = os.path.join(self.base, "rootfs-" + kind)
        os.makedirs(path)
        self._tiny(path)
        if kind == "planted":
            suid = os.path.join(path, "usr/local/bin/suid-probe")
            shutil.copy2(PROBE, suid)
            os.chown(suid, 0, 0)
            os.chmod(suid, 0o4755)
            fcap = os.path.join(path, "usr/local/bin/fcap-probe")
            shutil.copy2(PROBE, fcap)
            os.chmod(fcap, 0o755)
            os.setxattr(fcap, "security.capability", _cap_xattr([CAP_SETUID, CAP_SYS_ADMIN]))
        elif kind != "tiny":
            raise ValueError(kind)
        for root, dirs, files in os.walk(path):
            for d in dirs:
                os.chmod(os.path.join(root, d), 0o755)
        self._rootfs[kind] = path
        return path

    # ---- running ---------------------------------------------------------------------------------------------
    def new_uid(self):
        return next(_uids)

    def command(self, argv, *, rootfs="tiny", storage=None, uid=None, memory=None, cpu=None, pids=None, disk=None,
                timeout=None, output_limit=None, repeat=None, keep=False, env=(), name=None, policy=None):
        name = name or f"sec{os.getpid()}-{next(_names)}"
        storage = storage or os.path.join(self.base, "storage-" + name)
        uid = uid if uid is not None else self.new_uid()
        cmd = [RUNNER, "--rootfs", self.rootfs(rootfs), "--storage", storage, "--policy", policy or POLICY_DIR,
               "--run-dir", self.run_dir, "--name", name, "--uid", str(uid)]
        for flag, value in (("--memory", memory), ("--cpu", cpu), ("--pids", pids), ("--disk", disk),
                            ("--timeout", timeout), ("--output-limit", output_limit), ("--repeat", repeat)):
            if value is not None:
                cmd += [flag, str(value)]
        for e in env:
            cmd += ["--env", e]
        if keep:
            cmd.append("--keep")
        return cmd + ["--", *argv], uid

    def run(self, argv, wall_timeout=300, **kw):
        cmd, uid = self.command(argv, **kw)
        t0 = time.monotonic()
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=wall_timeout)
        return self._result(proc.returncode, proc.stdout, proc.stderr, cmd, uid, time.monotonic() - t0)

    def start(self, argv, **kw):
        """Starts lensbox-runner in the background (for two sandboxes at once); finish with wait()."""
        cmd, uid = self.command(argv, **kw)
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        proc.lab_cmd, proc.lab_uid, proc.lab_t0 = cmd, uid, time.monotonic()
        return proc

    def wait(self, proc, timeout=120):
        out, err = proc.communicate(timeout=timeout)
        return self._result(proc.returncode, out, err, proc.lab_cmd, proc.lab_uid, time.monotonic() - proc.lab_t0)

    @staticmethod
    def _result(rc, out, err, cmd, uid, elapsed):
        try:
            text = out.decode("utf-8")  # the runner promises valid UTF-8
            res = Result(json.loads(text))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise LabError(f"lensbox-runner printed no JSON (rc {rc}): {out[:2000]!r}\nstderr: {err[:2000]!r}\n"
                           f"command: {shlex.join(cmd)}") from e
        if "error" in res:
            raise LabError(f"lensbox-runner failed (rc {rc}): {res['error']}\ncommand: {shlex.join(cmd)}")
        res.rc, res.uid, res.cmd, res.elapsed = rc, uid, cmd, elapsed
        return res

    def policy_copy(self, label, **replace):
        """A copy of policy/ with whole files replaced: policy_copy("x", **{"landlock.rules": "..."})."""
        path = os.path.join(self.base, "policy-" + label)
        shutil.copytree(POLICY_DIR, path)
        for rel, text in replace.items():
            with open(os.path.join(path, rel), "w") as f:
                f.write(text)
        return path

    def run_raw(self, argv, **kw):
        """Like run() but returns (exit status, parsed JSON) even when the runner reports an error."""
        cmd, uid = self.command(argv, **kw)
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
        return proc.returncode, json.loads(proc.stdout.decode("utf-8"))

    def probe(self, op, *args, **kw):
        """Runs one probe operation in a fresh sandbox; returns (probe line, runner result)."""
        res = self.run([IN_PROBE, op, *map(str, args)], **kw)
        return res.probe, res

    def script(self, steps, **kw):
        """Runs several probe operations, one after another, in ONE sandbox (busybox sh); returns the probe lines in
        order (None where a step printed nothing) and the runner result. A step is a list of probe arguments, or a
        string of shell."""
        lines = []
        for i, step in enumerate(steps):
            lines.append(f"echo '@@{i}'")
            lines.append(step if isinstance(step, str) else shlex.join([IN_PROBE, *map(str, step)]))
        res = self.run(["/bin/sh", "-c", "\n".join(lines)], **kw)
        outs = [None] * len(steps)
        cur = None
        for line in res.get("stdout", "").splitlines():
            if line.startswith("@@"):
                cur = int(line[2:])
            elif cur is not None and line.startswith("{") and outs[cur] is None:
                outs[cur] = json.loads(line)
        return outs, res

    # ---- the host side ---------------------------------------------------------------------------------------
    @staticmethod
    def host_pids_of_uid(uid):
        pids = []
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                with open(f"/proc/{d}/status") as f:
                    for line in f:
                        if line.startswith("Uid:"):
                            if int(line.split()[1]) == uid:
                                pids.append(int(d))
                            break
            except OSError:
                pass
        return pids

    def leftovers(self):
        found = []
        with open("/proc/self/mountinfo") as f:
            found += [line.split()[4] for line in f if self.base in line.split()[4]]
        for dev in os.listdir("/sys/block"):
            bf = f"/sys/block/{dev}/loop/backing_file"
            if os.path.exists(bf):
                with open(bf) as f:
                    if f.read().startswith(self.base):
                        found.append("/dev/" + dev)
        return found

    def close(self):
        left = self.leftovers()
        if not left:
            shutil.rmtree(self.base, ignore_errors=True)
        return left


def refused(p, errno_name, res=None):
    """Asserts a probe line reports failure with exactly this errno."""
    ctx = f"\nprobe: {json.dumps(p)}" + (f"\nrunner: {res.describe()}" if res is not None else "")
    assert p is not None, "the probe printed nothing" + ctx
    assert p.get("ok") is False, f"{p.get('op')} SUCCEEDED, expected {errno_name}" + ctx
    assert p.get("errno") == errno_name, f"{p.get('op')} failed with {p.get('errno') or p.get('signal')}, expected {errno_name}" + ctx


def killed(p, signal_name, res=None):
    ctx = f"\nprobe: {json.dumps(p)}" + (f"\nrunner: {res.describe()}" if res is not None else "")
    assert p is not None, "the probe printed nothing" + ctx
    assert p.get("ok") is False and p.get("signal") == signal_name, f"expected {signal_name}" + ctx


def succeeded(p, res=None):
    ctx = f"\nprobe: {json.dumps(p)}" + (f"\nrunner: {res.describe()}" if res is not None else "")
    assert p is not None, "the probe printed nothing" + ctx
    assert p.get("ok") is True, "expected success" + ctx

"""guest_steps.py — the package's life in a Debian guest booted with systemd (VM lane, tests/vm/test_deb_package.py).

Runs in the guest as root (PID 1 is systemd), started by the payload's `run`. Each step runs real commands and
records what they said (exit status, output, seconds) as one JSON object a line in the results file; the host's
pytest asserts on them. Nothing here decides pass or fail: a step that breaks still records, and later steps run
(the purge must clean up whatever state the earlier ones reached). Standard library only.

Usage: python3 guest_steps.py PAYLOAD_DIR RESULTS_FILE
"""
import ctypes
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import time

PAYLOAD, RESULTS = sys.argv[1], sys.argv[2]
ENV = dict(os.environ, DEBIAN_FRONTEND="noninteractive", PATH="/usr/sbin:/usr/bin:/sbin:/bin", LC_ALL="C.UTF-8")
IMAGE = "python:3.12-slim"
RULES = "/etc/lensbox/policy/landlock.rules"

ASYNC_RUN = r"""
import asyncio, json
from lensbox_client.aio import AsyncClient

async def main():
    async with AsyncClient() as c:
        health = await c.health()
        r = await c.run("vm-async", "python", "import sys; print('async', 6 * 7, sys.version_info[0])", timeout=120)
        names = [s.name for s in await c.list()]
        print(json.dumps({"can_run": health["can_run"], "stdout": r.stdout, "exit_code": r.exit_code, "sandboxes": names,
                          "connections": c.connections_opened}))

asyncio.run(main())
"""


def landlock_abi():
    """The kernel's Landlock ABI: landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)."""
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.syscall(444, None, ctypes.c_size_t(0), ctypes.c_uint32(1))


def record(step, **fields):
    with open(RESULTS, "a") as f:
        f.write(json.dumps({"step": step, **fields}) + "\n")
        f.flush()
        os.fsync(f.fileno())
    print(f"LENSBOX-DEB-STEP {step} rc={fields.get('rc')}", flush=True)


def sh(step, cmd, timeout=600, **kw):
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=timeout, **kw)
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        rc, out, err = "timeout", str(e.stdout or ""), str(e.stderr or "")
    record(step, cmd=cmd if isinstance(cmd, str) else " ".join(cmd), rc=rc, stdout=out[-20000:],
           stderr=err[-20000:], secs=round(time.monotonic() - t0, 1))
    return rc, out


def leftovers(files):
    """What an installed lensbox could leave behind, looked at after the purge."""
    mounts = [l for l in open("/proc/self/mountinfo") if "lensbox" in l]
    # (lensbox-vmtest.service is this test's own unit.)
    cgroups = sorted(p for p in glob.glob("/sys/fs/cgroup/**/*lensbox*", recursive=True)
                     if os.path.isdir(p) and not p.endswith("/lensbox-vmtest.service"))
    procs = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if "lensbox" in cmd and "guest_steps" not in cmd:
                procs.append(f"{pid} {cmd}")
    nft = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True, env=ENV)
    loops = subprocess.run(["losetup", "-a"], capture_output=True, text=True, env=ENV)
    units = subprocess.run(["systemctl", "list-units", "--all", "--plain", "--no-legend", "*lensbox*"],
                           capture_output=True, text=True, env=ENV)
    unit_files = subprocess.run(["systemctl", "list-unit-files", "--no-legend", "lensboxd*"], capture_output=True,
                                text=True, env=ENV)
    return {
        "files": [f for f in files if os.path.lexists(f) and not os.path.isdir(f)],
        "dirs": [d for d in ("/var/lib/lensbox", "/run/lensbox", "/etc/lensbox", "/usr/lib/python3/dist-packages/"
                             "lensbox_client", "/usr/share/doc/lensbox") if os.path.lexists(d)],
        "mounts": mounts, "cgroups": cgroups, "processes": procs,
        "nft_tables": nft.stdout.splitlines(), "loop_devices": loops.stdout.splitlines(),
        "units": [u for u in units.stdout.splitlines() if u.strip() and "vmtest" not in u],
        "unit_files": [u for u in unit_files.stdout.splitlines() if u.strip()],
        "passwd": subprocess.run(["getent", "passwd", "lensbox-api"], capture_output=True, text=True).stdout,
        "group": subprocess.run(["getent", "group", "lensbox"], capture_output=True, text=True).stdout,
    }


def main():
    debs = sorted(glob.glob(os.path.join(PAYLOAD, "lensbox_*.deb")))
    record("payload", rc=0 if len(debs) == 1 else 1, debs=debs, kernel=os.uname().release, landlock=landlock_abi(),
           systemd=os.path.isdir("/run/systemd/system"), uptime=open("/proc/uptime").read().split()[0])
    os.makedirs("/root/pkg", exist_ok=True)
    for d in debs:
        shutil.copy(d, "/root/pkg/")
    # The package's own words: apt, offline (every dependency is already in the image), from the file.
    sh("install", "apt install -y ./lensbox_*.deb", shell=True, cwd="/root/pkg")
    # Debian 12's kernel has Landlock ABI 2 and the shipped policy asks for 6: doctor must say so and the postinst
    # must leave lensboxd stopped. (On a kernel with ABI 6, run by hand with bookworm-backports, both pass.)
    sh("doctor", ["lensbox", "doctor"])
    sh("doctor_json", ["lensbox", "doctor", "--json"])
    sh("active_after_install", ["systemctl", "is-active", "lensboxd"])
    with open(RULES) as f:
        text = f.read()
    if landlock_abi() < int(re.search(r"^min_abi\s+(\d+)", text, re.M).group(1)):
        # What an admin of this kernel does on purpose (policy/landlock.rules says how), as the VM lane's test copy
        # of the policy does: accept the kernel's ABI as a degraded level. It edits a conffile, which the purge
        # must remove.
        with open(RULES, "w") as f:
            f.write(re.sub(r"^(min_abi\s+\d+)$", rf"\1\ndegraded_min_abi {landlock_abi()}", text, count=1, flags=re.M))
        sh("doctor_degraded", ["lensbox", "doctor"])
    # Installing again runs the postinst again (after prerm upgrade): with doctor passing, it (re)starts lensboxd.
    sh("reinstall", "apt install -y --reinstall ./lensbox_*.deb", shell=True, cwd="/root/pkg")
    sh("conffile_kept", ["grep", "-c", "^degraded_min_abi", RULES])
    rc, _ = sh("active_after_reinstall", ["systemctl", "is-active", "lensboxd"])
    if rc != 0:
        sh("start", ["systemctl", "start", "lensboxd"], timeout=120)
    sh("active", ["systemctl", "is-active", "lensboxd"])
    sh("journal_start", ["journalctl", "-b", "-u", "lensboxd", "--no-pager", "-o", "cat"])
    # The socket appears once lensboxd listens; `health` is the first real request.
    for _ in range(60):
        if os.path.exists("/run/lensbox/lensboxd.sock"):
            break
        time.sleep(0.5)
    sh("health", ["lensbox", "health"])
    archive = os.path.join(PAYLOAD, "python.tar")
    sh("image_import", ["lensbox", "image", "import", archive, "--name", IMAGE], timeout=600)
    sh("cli_run", ["lensbox", "run", "vm-cli", "--python", "import sys; print('cli', 6 * 7, sys.version_info[0])"],
       timeout=300)
    sh("async_run", ["python3", "-c", ASYNC_RUN], timeout=300)
    sh("sandboxes", ["lensbox", "ls"])
    _, listing = sh("dpkg_listing", ["dpkg", "-L", "lensbox"])
    files = [l for l in listing.splitlines() if l.startswith("/")]
    # What the running sandboxes hold now: the purge must remove all of it (and the check must be able to see it).
    record("before_purge", rc=0, **leftovers(files))
    sh("purge", ["apt", "purge", "-y", "lensbox"], timeout=300)
    sh("dpkg_status", ["dpkg-query", "-W", "-f", "${Status}", "lensbox"])
    record("leftovers", rc=0, **leftovers(files))
    sh("journal", ["journalctl", "-b", "--no-pager", "-o", "short-monotonic", "-u", "lensboxd"])


if __name__ == "__main__":
    main()

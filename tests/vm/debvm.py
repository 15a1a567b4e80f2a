"""debvm.py — the VM lane's package test, host side: install the .deb in a Debian guest booted with systemd.

Runs on the host as root; imported by tests/vm/test_deb_package.py, or run as a script to do the same by hand
(`LENSBOX_BUILD_DIR=build python3 tests/vm/debvm.py [bookworm-backports]`). It builds dist/lensbox_*.deb (scripts/package), the cached
Debian root image with the package's Depends installed (deb/debian-root), the default OCI image (the recipe the
host tests use), an initramfs with run-vm's module list and deb/init.sh, and boots Debian's 6.1 kernel under QEMU
(TCG) with three disks:
  /dev/vda  the Debian root, snapshot=on: the guest writes to a temporary overlay, the cached image never changes
  /dev/vdb  the payload (read-only ext4): the .deb, the OCI archive python.tar, deb/run and deb/guest_steps.py
  /dev/vdc  the results (ext4): steps.jsonl, rc, journal.txt; read back with debugfs (no host mount)
systemd starts lensbox-vmtest.service, which runs the payload's `run`. The guest has no network device.
"""
import importlib.machinery
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE_DIR = Path(os.environ.get("LENSBOX_SOURCE_DIR", HERE.parent.parent)).resolve()
sys.path.insert(0, str(SOURCE_DIR / "tests"))

GUEST_TIMEOUT = int(os.environ.get("LENSBOX_DEB_VM_TIMEOUT", 480))


def missing_tools():
    """The host programs this test needs that are not installed (scripts/install-deps installs them)."""
    tools = ("qemu-system-x86_64", "mmdebstrap", "mke2fs", "debugfs", "cpio", "busybox", "dpkg-deb", "cpack")
    return [t for t in tools if not shutil.which(t) and not os.path.exists(f"/usr/sbin/{t}")]


def _run_vm_module():
    loader = importlib.machinery.SourceFileLoader("run_vm", str(HERE / "run-vm"))
    spec = importlib.util.spec_from_loader("run_vm", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def _out(cmd, timeout):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed ({p.returncode}):\n{p.stdout[-3000:]}{p.stderr[-3000:]}")
    return p.stdout


class Guest:
    """What one boot gave back: the steps (by name), the console, the timings, the files of the results disk."""

    def __init__(self, steps, console, timings, results, hung, deb):
        self.steps = steps
        self.console = console
        self.timings = timings
        self.results = results
        self.hung = hung
        self.deb = deb

    def step(self, name):
        assert name in self.steps, f"the guest never reached step {name!r}\n" + self.output()
        return self.steps[name]

    def output(self, lines=80):
        journal = self.results / "journal.txt"
        tail = journal.read_text(errors="replace").splitlines()[-lines:] if journal.exists() else []
        return (f"timings: {self.timings}\n--- console (last {lines} lines) ---\n"
                + "\n".join(self.console.splitlines()[-lines:])
                + f"\n--- guest journal (last {lines} lines) ---\n" + "\n".join(tail))


def _payload_disk(work, deb, archive):
    stage = work / "payload"
    if stage.exists():
        shutil.rmtree(stage)
    stage.mkdir()
    for src, name in ((deb, deb.name), (archive, "python.tar"), (HERE / "deb/run", "run"),
                      (HERE / "deb/guest_steps.py", "guest_steps.py")):
        try:
            os.link(src, stage / name)  # same filesystem: mke2fs reads through the link, nothing copied
        except OSError:
            shutil.copy2(src, stage / name)
    size = sum(f.stat().st_size for f in stage.iterdir()) // 2**20 + 64
    img = work / "payload.img"
    img.unlink(missing_ok=True)
    subprocess.run(["mke2fs", "-q", "-F", "-t", "ext4", "-O", "^has_journal", "-E", "root_owner=0:0", "-d",
                    str(stage), str(img), f"{size}M"], check=True, stdout=subprocess.DEVNULL)
    shutil.rmtree(stage)
    return img


def _boot(work, kernel, initrd, root, payload, results, timeout, memory=2048, cpus=2):
    cmd = [
        "qemu-system-x86_64", "-nodefaults", "-no-user-config", "-no-reboot", "-display", "none",
        "-accel", "tcg,thread=multi", "-cpu", "max", "-m", str(memory), "-smp", str(cpus),
        "-kernel", str(kernel), "-initrd", str(initrd),
        "-append", "console=ttyS0 panic=-1 loglevel=4 rdinit=/init systemd.show_status=0",
        "-drive", f"file={root},if=virtio,format=raw,snapshot=on",
        "-drive", f"file={payload},if=virtio,format=raw,readonly=on",
        "-drive", f"file={results},if=virtio,format=raw",
        "-serial", "stdio", "-monitor", "none",
    ]
    console = work / "console.log"
    started = time.monotonic()
    with open(console, "wb") as con:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

        def pump():
            for chunk in iter(lambda: proc.stdout.read1(4096), b""):
                con.write(chunk)
                con.flush()

        t = threading.Thread(target=pump, daemon=True)
        t.start()
        hung = False
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            hung = True
            proc.kill()  # our own child, by its handle
            proc.wait()
        t.join(timeout=5)
    return hung, time.monotonic() - started, console.read_text(errors="replace")


def boot_package_guest(build_dir, timeout=GUEST_TIMEOUT, suite="bookworm"):
    """Builds everything (cached where it can be) and boots the guest of `suite`'s kernel once; returns a Guest.
    bookworm-backports (6.12, Landlock ABI 6) is for runs by hand: this QEMU boots it reliably only on one vCPU
    of an idle host (docs/vm-lane.md)."""
    from lensbox_testlib import images

    run_vm = _run_vm_module()
    work = Path(build_dir).resolve() / "vm-lane" / ("deb" if suite == "bookworm" else f"deb-{suite}")
    work.mkdir(parents=True, exist_ok=True)
    timings = {}
    t = time.monotonic()
    dist = work / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    _out([str(SOURCE_DIR / "scripts/package"), str(Path(build_dir).resolve() / "package-build"), str(dist)], 1800)
    deb = next(dist.glob("lensbox_*_amd64.deb"))
    timings["package"] = round(time.monotonic() - t, 1)
    t = time.monotonic()
    depends = _out(["dpkg-deb", "-f", str(deb), "Depends"], 60).strip()
    root = Path(_out([str(HERE / "deb/debian-root"), "--include", depends], 1800).strip().splitlines()[-1])
    timings["root_image"] = round(time.monotonic() - t, 1)
    t = time.monotonic()
    archive = Path(images.default_image_archive())
    timings["oci_image"] = round(time.monotonic() - t, 1)
    t = time.monotonic()
    kdir = Path(_out([str(HERE / "fetch-kernel"), "--suite", suite], 900).strip())
    release = next((kdir / "lib/modules").iterdir()).name
    initrd, _ = run_vm.build_initramfs(work, kdir, release, init=HERE / "deb/init.sh")
    payload = _payload_disk(work, deb, archive)
    results = run_vm.make_results_disk(work)
    timings["disks"] = round(time.monotonic() - t, 1)
    hung, secs, console = _boot(work, kdir / "boot" / f"vmlinuz-{release}", initrd, root, payload, results, timeout,
                                cpus=run_vm.SUITE_CPUS.get(suite, 2))
    timings["guest"] = round(secs, 1)
    out = run_vm.read_results(work, results)
    steps = {}
    jsonl = out / "steps.jsonl"
    if jsonl.exists():
        for line in jsonl.read_text(errors="replace").splitlines():
            if line.strip():
                d = json.loads(line)
                steps[d["step"]] = d
    if "payload" in steps:
        timings["guest_boot_to_test"] = float(steps["payload"]["uptime"])
    return Guest(steps, console, timings, out, hung, deb)


if __name__ == "__main__":
    g = boot_package_guest(os.environ.get("LENSBOX_BUILD_DIR", SOURCE_DIR / "build"),
                           suite=sys.argv[1] if len(sys.argv) > 1 else "bookworm")
    for name, s in g.steps.items():
        print(f"{name}: rc={s.get('rc')} {s.get('secs', '')}s")
    print(g.timings)
    if g.hung or not g.steps:
        print(g.output())
        sys.exit(1)

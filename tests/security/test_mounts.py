"""Attacks on the mount layer: the mount table cannot change, the image root is read-only, /proc hides what Docker
hides, and nothing of the host's filesystem is reachable (mountinfo, /proc/1/root, symlinks, hard links)."""

import os

import pytest

from lensbox_testlib.attack import refused, succeeded

ATTACKS = [
    ("mount_tmpfs_over_tmp", ["mount", "none", "/tmp", "tmpfs"], "EPERM"),
    ("mount_proc_again", ["mount", "proc", "/sandbox", "proc"], "EPERM"),
    ("bind_mount_root", ["mount", "/", "/sandbox", "none", 4096], "EPERM"),  # MS_BIND
    ("remount_root_rw", ["mount", "none", "/", "none", 32], "EPERM"),  # MS_REMOUNT
    ("umount_sandbox", ["umount", "/sandbox"], "EPERM"),
    ("umount_proc_lazy", ["umount", "/proc", 2], "EPERM"),  # MNT_DETACH
    ("pivot_root", ["pivot_root", "/sandbox", "/sandbox"], "EPERM"),
    ("chroot", ["chroot", "/sandbox"], "EPERM"),
    ("chroot_escape", ["chroot-escape", "/tmp/jail"], "EPERM"),
    ("fsopen_tmpfs", ["fsopen", "tmpfs"], "EPERM"),
    ("open_tree_clone", ["open_tree", "/"], "EPERM"),
    # The image root: an overlay mounted read-only.
    ("write_etc_passwd", ["write", "/etc/passwd", "root::0:0::/:/bin/sh\n"], "EROFS"),
    ("create_in_usr_bin", ["write", "/usr/bin/evil"], "EROFS"),
    ("create_in_root", ["write", "/evil"], "EROFS"),
    ("truncate_busybox", ["truncate", "/bin/busybox", 0], "EROFS"),
    ("unlink_etc_hostname", ["unlink", "/etc/hostname"], "EROFS"),
    ("chmod_etc_passwd", ["chmod", "/etc/passwd", "666"], "EROFS"),
    ("rename_out_of_etc", ["rename", "/etc/passwd", "/sandbox/passwd"], "EXDEV"),
    # Host-wide kernel knobs: /proc/sys is read-only, /sys is no sysfs.
    ("write_proc_sys_hostname", ["write", "/proc/sys/kernel/hostname", "pwned"], "EROFS"),
    ("write_core_pattern", ["write", "/proc/sys/kernel/core_pattern", "|/sandbox/x"], "EROFS"),
    ("write_sys_uevent_helper", ["write", "/sys/kernel/uevent_helper", "/sandbox/x"], "ENOENT"),
    # Another process's root: /proc/1 is the sandbox's init, not ours to open.
    ("proc_1_root", ["ls", "/proc/1/root/"], "EACCES"),
    ("proc_1_environ", ["read", "/proc/1/environ"], "EACCES"),
    # The sandbox's init is a host binary (lensbox-runner / lensboxd): its /proc/1/exe magic link leads outside
    # every mount namespace (runc's CVE-2019-5736 overwrote the host runtime through it).
    ("proc_1_exe_readlink", ["readlink", "/proc/1/exe"], "EACCES"),
    ("proc_1_exe_read", ["open", "/proc/1/exe", "rdonly"], "EACCES"),
    ("proc_1_exe_write", ["open", "/proc/1/exe", "wronly"], "EACCES"),
    ("proc_1_cwd", ["ls", "/proc/1/cwd/"], "EACCES"),
    ("proc_1_map_files", ["ls", "/proc/1/map_files"], "EACCES"),
    ("proc_1_mem", ["open", "/proc/1/mem", "rdwr"], "EACCES"),
    # DAC still applies to the image's private files.
    ("read_root_only_file", ["read", "/etc/secret"], "EACCES"),
    # Planted links: a hard link to a file of the image crosses mounts; a symlink resolves inside our root.
    ("hardlink_to_image_file", ["link", "/etc/passwd", "/sandbox/passwd-link"], "EXDEV"),
]

# Multi-step attacks in the same sandbox: plant, then use.
PLANTS = [
    ["symlink", "/../../../../../../proc/1/root/etc/secret", "/sandbox/up"],
    ["read", "/sandbox/up"],
    ["symlink", "../../../../../../../work", "/sandbox/host"],
    ["ls", "/sandbox/host"],
]


MASKED_FILES = ["kcore", "keys", "latency_stats", "timer_list", "timer_stats", "sched_debug", "sysrq-trigger",
                "interrupts"]
MASKED_DIRS = ["acpi", "asound", "scsi", "driver"]


@pytest.fixture(scope="module")
def batch(lab):
    steps = [a[1] for a in ATTACKS] + PLANTS + [
        ["read", "/proc/self/mountinfo", 65536],
        ["ls", "/"],
        ["write", "/proc/keys", "x"],
    ] + [["stat", "/proc/" + f] for f in MASKED_FILES] + [["ls", "/proc/" + d] for d in MASKED_DIRS]
    return lab.script(steps)


def extra(batch, k):
    outs, res = batch
    return outs[len(ATTACKS) + len(PLANTS) + k], res


@pytest.mark.parametrize("i", range(len(ATTACKS)), ids=[a[0] for a in ATTACKS])
def test_denied(batch, i):
    outs, res = batch
    refused(outs[i], ATTACKS[i][2], res)


def test_planted_symlink_through_proc_1_root(batch):
    outs, res = batch
    n = len(ATTACKS)
    succeeded(outs[n], res)  # planting a symlink in /sandbox is allowed...
    refused(outs[n + 1], "EACCES", res)  # ...following it into init's root is not


def test_planted_symlink_to_host_path(batch):
    outs, res = batch
    n = len(ATTACKS)
    succeeded(outs[n + 2], res)
    refused(outs[n + 3], "ENOENT", res)  # ".." stops at the sandbox's root: the host's /work is not there


def _host_paths(mountinfo):
    """Host paths a reader of mountinfo learns: overlay layer directories and the roots of bind mounts."""
    paths = set()
    for line in mountinfo.splitlines():
        f = line.split()
        if f[3] != "/":
            paths.add(f[3])
        for opt in f[-1].split(","):
            if opt.startswith(("lowerdir=", "upperdir=", "workdir=")):
                paths.update(x for x in opt.split("=", 1)[1].split(":") if x.startswith("/"))
    return sorted(paths)


def test_mountinfo_paths_lead_nowhere(batch, lab):
    """The mountinfo trick: read the host paths mountinfo reveals, then try to reach them from inside. Every one
    must be absent from the sandbox's root (ENOENT), and the storage's host path must not even be named."""
    p, res = extra(batch, 0)
    succeeded(p, res)
    text = p["data"]
    assert "storage-" not in text and "/work/" not in text, text
    mounts = {line.split()[4]: line.split()[5] for line in text.splitlines()}
    assert mounts["/"].split(",")[0] == "ro", mounts
    for point in ("/", "/sandbox", "/tmp", "/dev/shm"):
        assert {"nosuid", "nodev"} <= set(mounts[point].split(",")), (point, mounts[point])
    paths = [x for x in _host_paths(text) if x not in ("/null", "/zero", "/full", "/random", "/urandom", "/tty")
             and not x.startswith(("/bus", "/fs", "/irq", "/sys"))]  # devtmpfs nodes and /proc's own subdirs
    layers = [x for line in text.splitlines() for opt in line.split()[-1].split(",")
              if opt.startswith("lowerdir=") for x in opt.split("=", 1)[1].split(":")]
    assert layers and not [x for x in layers if x.startswith("/")], f"overlay layers name host paths: {layers}"
    if paths:
        outs, res2 = lab.script([["ls", x] for x in paths] + [["stat", x + "/etc/secret"] for x in paths])
        for x, o in zip(paths * 2, outs):
            refused(o, "ENOENT", res2)


def test_every_mount_is_private_and_sandbox_is_the_storage(batch):
    """Every mount of the sandbox is private (rootfs.c): none may carry a propagation tag (shared:N, master:N), so
    nothing the host mounts or unmounts reaches the sandbox and nothing propagates back; the mount on top at /sandbox
    is the storage (ext4), nosuid,nodev."""
    p, res = extra(batch, 0)
    succeeded(p, res)
    lines = p["data"].splitlines()
    tagged = [line for line in lines if line.split(" - ")[0].split()[6:]]
    assert not tagged, f"mounts that still propagate: {tagged}"
    sandbox = [line for line in lines if line.split()[4] == "/sandbox"]
    parents = {line.split()[1] for line in sandbox}
    tops = [line for line in sandbox if line.split()[0] not in parents]  # mounted on by no other /sandbox mount
    assert len(tops) == 1, sandbox
    top = tops[0].split(" - ")
    assert top[1].split()[0] == "ext4", sandbox
    assert {"nosuid", "nodev"} <= set(top[0].split()[5].split(",")), sandbox


def test_root_lists_only_the_image(batch):
    p, res = extra(batch, 1)
    succeeded(p, res)
    # (the test image has no /sys; the skeleton's, which lists the sandbox's CPUs only, is test_namespaces.py's)
    assert not set(p["entries"]) & {"work", "root", "home", "boot", "old_root", "run"}, p["entries"]


def test_masked_proc_file_swallows_writes(batch):
    p, res = extra(batch, 2)
    succeeded(p, res)  # /proc/keys is /dev/null: the write goes nowhere


@pytest.mark.parametrize("i", range(len(MASKED_FILES)), ids=MASKED_FILES)
def test_proc_masked_files(batch, i):
    """Docker's masked /proc files: /dev/null in the sandbox where the host kernel has them, absent otherwise."""
    p, res = extra(batch, 3 + i)
    if os.path.exists("/proc/" + MASKED_FILES[i]):
        succeeded(p, res)
        assert p["type"] == "char" and p["rdev"] == "1:3", p
    else:
        refused(p, "ENOENT", res)


@pytest.mark.parametrize("i", range(len(MASKED_DIRS)), ids=MASKED_DIRS)
def test_proc_masked_dirs(batch, i):
    p, res = extra(batch, 3 + len(MASKED_FILES) + i)
    if os.path.exists("/proc/" + MASKED_DIRS[i]):
        succeeded(p, res)
        assert p["entries"] == [], p
    else:
        refused(p, "ENOENT", res)

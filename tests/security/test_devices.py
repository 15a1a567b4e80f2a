"""Attacks through device nodes: /dev holds only harmless nodes, new nodes cannot be made (Landlock has no
make-char/make-block right anywhere, the kernel wants CAP_MKNOD, and every writable mount is nodev), and disks,
memory, kernel log and the like are absent."""

import pytest

from lensbox_testlib.attack import refused, succeeded

ALLOWED_DEV = {"null", "zero", "full", "random", "urandom", "tty", "pts", "ptmx", "shm", "fd", "stdin", "stdout",
               "stderr", "console", "mqueue"}

ATTACKS = [
    ("mknod_dev_mem_in_sandbox", ["mknod", "/sandbox/mem", "c", 1, 1], "EACCES"),
    ("mknod_disk_in_tmp", ["mknod", "/tmp/sda", "b", 8, 0], "EACCES"),
    ("mknod_kmsg_in_shm", ["mknod", "/dev/shm/kmsg", "c", 1, 11], "EACCES"),
    ("mknod_in_dev", ["mknod", "/dev/mem", "c", 1, 1], "EROFS"),
    ("create_in_dev", ["write", "/dev/evil"], "EROFS"),
    ("open_dev_mem", ["open", "/dev/mem", "rdonly"], "ENOENT"),
    ("open_dev_kmem", ["open", "/dev/kmem", "rdonly"], "ENOENT"),
    ("open_dev_port", ["open", "/dev/port", "rdonly"], "ENOENT"),
    ("open_dev_kmsg", ["open", "/dev/kmsg", "rdonly"], "ENOENT"),
    ("open_dev_vda", ["open", "/dev/vda", "rdonly"], "ENOENT"),
    ("open_dev_sda", ["open", "/dev/sda", "rdonly"], "ENOENT"),
    ("open_dev_loop_control", ["open", "/dev/loop-control", "rdwr"], "ENOENT"),
    ("open_dev_net_tun", ["open", "/dev/net/tun", "rdwr"], "ENOENT"),
    ("open_dev_fuse", ["open", "/dev/fuse", "rdwr"], "ENOENT"),
    ("open_dev_kvm", ["open", "/dev/kvm", "rdwr"], "ENOENT"),
    ("open_dev_console", ["open", "/dev/console", "wronly"], "ENOENT"),
]


@pytest.fixture(scope="module")
def batch(lab):
    return lab.script([a[1] for a in ATTACKS] + [["ls", "/dev"], ["read", "/dev/zero", 8], ["write", "/dev/full", "x"]])


@pytest.mark.parametrize("i", range(len(ATTACKS)), ids=[a[0] for a in ATTACKS])
def test_denied(batch, i):
    outs, res = batch
    refused(outs[i], ATTACKS[i][2], res)


def test_dev_holds_only_harmless_nodes(batch):
    outs, res = batch
    ls = outs[len(ATTACKS)]
    succeeded(ls, res)
    assert set(ls["entries"]) <= ALLOWED_DEV, sorted(set(ls["entries"]) - ALLOWED_DEV)
    assert {"null", "zero", "urandom"} <= set(ls["entries"]), ls


def test_harmless_nodes_behave(batch):
    outs, res = batch
    zero, full = outs[len(ATTACKS) + 1], outs[len(ATTACKS) + 2]
    succeeded(zero, res)
    assert zero["data"] == "\\u0000" * 0 + "\u0000" * 8, zero
    refused(full, "ENOSPC", res)

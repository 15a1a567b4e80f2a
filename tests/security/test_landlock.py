"""Attacks on the Landlock layer: writes outside /sandbox, /tmp, /dev/shm and the device nodes are refused even
where the mount and file permissions would allow them, and signals cannot leave the sandbox's Landlock domain.
Expected answers: EACCES for filesystem rules, EPERM for the signal scope (the errnos Landlock documents).
TCP is not Landlock's to refuse (runner/landlock.c says why): binding any port of the sandbox's own network
namespace works; security/test_listeners.py proves nothing outside reaches such a listener."""

import json
import subprocess

import pytest

from lensbox_testlib.attack import IN_PROBE, PROBE, refused, succeeded

ATTACKS = [
    # /proc/self/* belongs to the probe itself (DAC allows it) and /proc is mounted rw: only Landlock says no.
    ("write_proc_self_comm", ["write", "/proc/self/comm", "renamed"], "EACCES"),
    ("write_proc_self_oom_score_adj", ["write", "/proc/self/oom_score_adj", "1000"], "EACCES"),
    ("write_proc_self_attr", ["write", "/proc/self/attr/exec", "unconfined"], "EACCES"),
    ("write_proc_self_setgroups", ["write", "/proc/self/setgroups", "deny"], "EACCES"),
    ("write_proc_self_uid_map", ["write", "/proc/self/uid_map", "0 0 1"], "EACCES"),
    ("write_proc_self_mem", ["open", "/proc/self/mem", "rdwr"], "EACCES"),
    # pid 1 is the sandbox's init: same uid, but outside this run's Landlock domain (ABI 6 signal scope).
    ("signal_init", ["kill", 1, 15], "EPERM"),
    ("signal_init_probe_only", ["kill", 1, 0], "EPERM"),
]

# What the policy grants must keep working, or the refusals above prove nothing.
ALLOWED = [
    ("write_sandbox", ["write", "/sandbox/f"]),
    ("write_tmp", ["write", "/tmp/f"]),
    ("write_dev_shm", ["write", "/dev/shm/f"]),
    ("write_dev_null", ["write", "/dev/null"]),
    ("mkdir_sandbox", ["mkdir", "/sandbox/d"]),
    ("fifo_in_tmp", ["mknod", "/tmp/fifo", "p"]),
    ("truncate_sandbox", ["truncate", "/sandbox/f", 0]),
    ("read_image", ["read", "/bin/busybox", 4]),
    # the sandbox's own ports, privileged ones included (ip_unprivileged_port_start is 0 in its namespace)
    ("tcp_bind_8080", ["tcp-bind", 8080]),
    ("tcp_bind_80", ["tcp-bind", 80]),
    ("tcp_bind_ephemeral", ["tcp-bind", 0]),
]


@pytest.fixture(scope="module")
def batch(lab):
    return lab.script([a[1] for a in ATTACKS] + [a[1] for a in ALLOWED] + [["landlock-abi"]])


@pytest.mark.parametrize("i", range(len(ATTACKS)), ids=[a[0] for a in ATTACKS])
def test_denied(batch, i):
    outs, res = batch
    refused(outs[i], ATTACKS[i][2], res)


@pytest.mark.parametrize("i", range(len(ALLOWED)), ids=[a[0] for a in ALLOWED])
def test_granted(batch, i):
    outs, res = batch
    succeeded(outs[len(ATTACKS) + i], res)


def test_enforced_abi_is_the_kernels_best(batch):
    outs, res = batch
    host = json.loads(subprocess.run([PROBE, "landlock-abi"], stdout=subprocess.PIPE, check=True).stdout)
    assert host["ok"], host
    assert res["isolation"]["landlock_abi"] == host["value"], (res["isolation"], host)
    assert host["value"] >= 6, "the policy needs Landlock ABI 6 (policy/landlock.rules: min_abi)"
    inside = outs[-1]
    succeeded(inside, res)
    assert inside["value"] == host["value"], inside


def test_rename_across_writable_mounts(lab):
    """Renaming or linking between /sandbox and /tmp crosses mounts (EXDEV) — no way to move a file around the
    rules with rename."""
    outs, res = lab.script([["write", "/tmp/a"], ["rename", "/tmp/a", "/sandbox/a"], ["link", "/tmp/a", "/sandbox/b"]])
    succeeded(outs[0], res)
    refused(outs[1], "EXDEV", res)
    refused(outs[2], "EXDEV", res)


def _rules_with(lines):
    from lensbox_testlib.attack import POLICY_DIR
    with open(f"{POLICY_DIR}/landlock.rules") as f:
        body = [x for x in f.read().splitlines() if not x.startswith(("min_abi", "degraded_min_abi"))]
    return "\n".join(lines + body) + "\n"


def test_policy_minimum_above_kernel_refuses_to_start(lab):
    """Never silently unenforced: a policy asking for more Landlock than the kernel has stops the start, and the
    error says why; nothing runs."""
    host = json.loads(subprocess.run([PROBE, "landlock-abi"], stdout=subprocess.PIPE, check=True).stdout)["value"]
    pol = lab.policy_copy("abi-too-high", **{"landlock.rules": _rules_with([f"min_abi {host + 1}"])})
    rc, out = lab.run_raw(["/bin/sh", "-c", "echo RAN"], policy=pol)
    assert rc == 1 and "error" in out, out
    assert "andlock" in out["error"] and str(host + 1) in out["error"], out
    assert "RAN" not in json.dumps(out)


def test_policy_degraded_level_runs_and_reports_the_abi(lab):
    host = json.loads(subprocess.run([PROBE, "landlock-abi"], stdout=subprocess.PIPE, check=True).stdout)["value"]
    pol = lab.policy_copy("abi-degraded", **{"landlock.rules": _rules_with([f"min_abi {host + 1}",
                                                                            f"degraded_min_abi {host}"])})
    rc, out = lab.run_raw([IN_PROBE, "write", "/etc/x"], policy=pol)
    assert rc == 0 and out["isolation"]["landlock_abi"] == host, out
    assert '"errno":"EROFS"' in out["stdout"], out

"""Resource attacks: fork bomb, memory bomb, disk, /tmp and /dev/shm fill, CPU hog, processes that outlive their
run or ignore SIGTERM, output floods. Each must hit its limit with the exact symptom (EAGAIN, SIGKILL + oom_killed,
ENOSPC, CPU share, timed_out) while the host and the sandbox stay usable."""

import os
import time

import pytest

from lensbox_testlib.attack import IN_PROBE, refused, succeeded


def test_fork_bomb_hits_pids_limit_and_sandbox_survives(lab):
    outs, res = lab.script([["forkbomb", 100000], ["status"]], pids=64)
    bomb, after = outs
    assert bomb is not None and bomb["ok"] is False and bomb["errno"] == "EAGAIN", (bomb, res.describe())
    assert bomb["forked"] < 64, bomb
    assert res["pids_limited"] is True, res.describe()
    succeeded(after, res)  # the shell could still start a process once the bomb's children were reaped


def test_memory_bomb_is_oom_killed(lab):
    outs, res = lab.script([["memhog", 4096], ["status"]], memory="96Mi")
    assert outs[0] is None, f"the memory hog survived: {outs[0]}"  # killed before it could report
    assert res["oom_killed"] is True, res.describe()
    _peak_held_at_limit(res, 96 << 20)
    succeeded(outs[1], res)  # the next process of the same run works
    # The host is fine: this test process still allocates and the runner reported in time.
    assert res.elapsed < 60, res.elapsed


def test_memory_bomb_as_main_process(lab):
    res = lab.run([IN_PROBE, "memhog", "4096"], memory="64Mi")
    assert res["signal"] == 9 and res["exit_code"] == -1, res.describe()
    assert res["oom_killed"] is True, res.describe()
    _peak_held_at_limit(res, 64 << 20)


def _peak_held_at_limit(res, limit):
    """The sandbox's own limit stopped the hog, not the machine running out: its peak reached the limit's
    neighbourhood and never went past it (2 MiB of slack for the kernel's per-cpu charge batching on v2)."""
    peak = res["peak_memory_bytes"]
    assert limit // 2 <= peak <= limit + (2 << 20), f"peak {peak >> 20} MiB under a {limit >> 20} MiB limit"


def _allocated_bytes(path):
    total = 0
    for root, dirs, files in os.walk(path):
        for f in files:
            total += os.lstat(os.path.join(root, f)).st_blocks * 512
    return total


def test_disk_fill_gets_enospc_and_host_disk_is_safe(lab):
    """The program writes until ENOSPC; what the host spent is the storage's allocated blocks (measured on the kept
    storage directory, so other activity on the host's disk cannot blur it): at most the limit plus metadata."""
    storage = os.path.join(lab.base, "storage-diskfill")
    p, res = lab.probe("fill", "/sandbox/big", 4096, disk="64Mi", storage=storage, keep=True)
    assert p["ok"] is False and p["errno"] == "ENOSPC", p
    assert 32 << 20 <= p["bytes"] <= 64 << 20, p
    used = _allocated_bytes(storage)
    assert used <= 72 << 20, f"the host spent {used >> 20} MiB on a 64 MiB sandbox"


@pytest.mark.parametrize("path,limit", [("/tmp/big", 256 << 20), ("/dev/shm/big", 64 << 20)], ids=["tmp", "shm"])
def test_tmpfs_fill_gets_enospc(lab, path, limit):
    """Sizes from policy/limits.conf (tmp = 256Mi, shm = 64Mi); memory is 512Mi so the tmpfs limit comes first."""
    p, res = lab.probe("fill", path, 4096)
    assert p["ok"] is False and p["errno"] == "ENOSPC", (p, res.describe())
    assert limit - (8 << 20) <= p["bytes"] <= limit, p


@pytest.mark.parametrize("cpu", ["0.5", "1"])
def test_cpu_limit_enforced(lab, cpu):
    """Two spinning processes for two seconds: their CPU per wall second never exceeds the limit by more than 20%,
    and reaches at least 80% of it, or of what an unlimited sandbox got just before when the shared host is busy
    (2 cores, other builds running): the limit must not be confused with host contention."""
    limit = float(cpu)
    for attempt in range(2):  # the host's 2 cores are shared: a busy moment may starve one measurement
        base, _ = lab.probe("cpuspin", 2, 2)
        succeeded(base)
        p, res = lab.probe("cpuspin", 2, 2, cpu=cpu)
        succeeded(p, res)
        assert p["cpu_per_wall"] <= 1.2 * limit, p  # the security property: never retried away
        if p["cpu_per_wall"] >= 0.8 * min(limit, base["cpu_per_wall"]):
            break
    else:
        raise AssertionError(f"limited run got {p['cpu_per_wall']} CPU/s, unlimited {base['cpu_per_wall']}")
    assert abs(res["cpu_ms"] / 1000 - p["cpu"]) < 0.25 * p["cpu"] + 0.05, (res["cpu_ms"], p)


def test_timeout_kills_process_ignoring_sigterm(lab):
    res = lab.run([IN_PROBE, "ignore-term"], timeout=2)
    assert res["timed_out"] is True, res.describe()
    assert res["signal"] == 9, res.describe()
    assert res["wall_ms"] < 10000, res.describe()
    assert lab.host_pids_of_uid(res.uid) == []


def test_timeout_kills_double_forked_daemon(lab):
    res = lab.run(["/bin/sh", "-c", IN_PROBE + " daemon 3600; " + IN_PROBE + " sleep 3600"], timeout=2)
    assert res["timed_out"] is True, res.describe()
    assert lab.host_pids_of_uid(res.uid) == [], "a daemon outlived the run's time limit"


def test_daemon_does_not_outlive_its_run(lab):
    """Run 1 leaves a double-forked daemon and exits at once; run 2 (same sandbox) lists the processes."""
    script = IN_PROBE + " ps; " + IN_PROBE + " daemon 3600"
    res = lab.run(["/bin/sh", "-c", script], repeat=2)
    ps = res.probes[0]
    succeeded(ps, res)
    others = [x for x in ps["pids"] if x["pid"] != 1]
    assert sorted(x["comm"] for x in others) == ["lensbox-probe", "sh"], ps
    assert res["wall_ms"] < 10000, res.describe()
    assert lab.host_pids_of_uid(res.uid) == []


def test_result_arrives_while_a_child_holds_stdout(lab):
    t0 = time.monotonic()
    res = lab.run(["/bin/sh", "-c", IN_PROBE + " sleep 60 & echo started"], timeout=30)
    assert res["exit_code"] == 0 and res["stdout"].strip() == "started", res.describe()
    assert time.monotonic() - t0 < 20, "the run waited for the background child"
    assert res["timed_out"] is False


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_output_flood_is_bounded(lab, stream):
    total = 200 << 20
    argv = [IN_PROBE, "flood", str(total)] + (["stderr"] if stream == "stderr" else [])
    res = lab.run(argv, output_limit="64Ki")
    assert res["exit_code"] == 0, res.describe()
    assert res[stream + "_bytes"] == total, res.describe()
    assert res[stream + "_truncated"] is True
    assert len(res[stream].encode()) <= 64 << 10, len(res[stream])


def test_binary_output_yields_valid_json(lab):
    """Random bytes on both streams: the runner's JSON still parses as UTF-8 (Lab decodes strictly)."""
    res = lab.run(["/bin/sh", "-c", "head -c 65536 /dev/urandom; head -c 65536 /dev/urandom >&2"])
    assert res["exit_code"] == 0 and res["stdout_bytes"] == 65536 and res["stderr_bytes"] == 65536, res.describe()


@pytest.mark.parametrize("path", ["/tmp", "/dev/shm"])
def test_tmpfs_inode_exhaustion_gets_enospc(lab, path):
    """Empty files cost no bytes but inodes: the tmpfs inode limit answers ENOSPC long before host memory matters."""
    p, res = lab.probe("files", path, 2000000)
    assert p["ok"] is False and p["errno"] == "ENOSPC", (p, res.describe())
    assert p["files"] <= 1 << 20, p

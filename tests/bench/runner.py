#!/usr/bin/python3
"""Benchmark: starting a lensbox sandbox and running `python3 -c pass` in it, against the same python3 run bare on
the host and under bubblewrap (`bwrap --unshare-all`), all in one run on this machine. Prints medians and ratios.

  tests/bench/runner.py [--iterations N] [--rootfs DIR] [--build-dir DIR] [--compare-build-dir DIR]

Measured, each as the wall time of one whole command seen from outside, median of N rounds that run every variant
once in turn (so load from other work on a shared machine hits all of them alike):
  bare      /usr/bin/python3 -c pass on the host (the baseline of every ratio)
  chroot    the image's own python3 (same binary and files as in the sandbox), chroot'ed, for comparison
  bwrap     bwrap --unshare-all over the image root (read-only), fresh /proc and /dev, the image's python3
  new       lensbox-runner: start a sandbox (storage already exists, as for a returning conversation), exec
            python3 -c pass, stop it; the policy is loaded by the tool each time (as lensboxd would not), its
            seccomp BPF from the tool's cache in the run directory after the warm-up run
  fresh     as new, but with a storage that does not exist yet (a new conversation's first start) and is removed
            after the run: its image comes from the pool of pre-formatted images (runner/disk_pool.c), which the
            tool's detached refiller tops up between rounds
  fresh_mkfs  the same with --no-disk-pool: mke2fs formats the image on the critical path (the code before the pool)
  exec      one more exec in an already started sandbox: (T(--repeat K+1) - T(new)) / K, measured the same way, so
            it is the marginal cost of an exec as lensboxd pays it
  library   the same two from the tool's own timing_us (start + exec + stop; the later execs), without the tool's
            process start-up and policy compilation, which lensboxd does once
With --compare-build-dir, another build's lensbox-runner (e.g. the previous commit's) runs the same new and exec
variants in the same rounds, so a change is measured before/after under the same load; the paired line gives the
median of the per-round differences (a load swing between rounds cancels out of it).
Targets (issue 3): new < 1.3x bare, exec < 1.1x bare; (issue 18) fresh <= 1.3x bare. Runs as root. Standard library only.
"""

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.environ.get("LENSBOX_SOURCE_DIR", os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, os.path.join(SOURCE_DIR, "tests"))


def timed(cmd):
    t = time.perf_counter()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    dt = time.perf_counter() - t
    if p.returncode != 0:
        raise SystemExit(f"benchmark command failed ({p.returncode}): {' '.join(cmd)}\n{p.stdout[-2000:]!r}\n"
                         f"{p.stderr[-2000:]!r}")
    return dt, p.stdout


def lensbox_timing(out):
    t = json.loads(out)["timing_us"]
    return ((t["start"] + t["exec"][0] + t["stop"]) / 1000, [x / 1000 for x in t["exec"][1:]],
            (t["start"] + t["exec"][0]) / 1000)


def phases(out, into):
    t = json.loads(out)["timing_us"]
    into["start"].append(t["start"] / 1000)
    into["exec1"].append(t["exec"][0] / 1000)
    into["stop"].append(t["stop"] / 1000)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iterations", type=int, default=20, help="rounds (each runs every variant once)")
    ap.add_argument("--repeat", type=int, default=20, help="K, execs per sandbox for the exec measurement")
    ap.add_argument("--rootfs")
    ap.add_argument("--build-dir", default=os.environ.get("LENSBOX_BUILD_DIR", os.path.join(SOURCE_DIR, "build")))
    ap.add_argument("--compare-build-dir", help="another build whose lensbox-runner runs alongside (before/after)")
    ap.add_argument("--seed", type=int, default=1, help="of the order the variants run in each round")
    args = ap.parse_args()

    if args.rootfs:
        rootfs = args.rootfs
    else:
        from lensbox_testlib.runner import rootfs as default_rootfs
        rootfs = default_rootfs()
    runner = os.path.join(args.build_dir, "runner", "lensbox-runner")
    other = os.path.join(args.compare_build_dir, "runner", "lensbox-runner") if args.compare_build_dir else None
    for r in (runner, other):
        if r and not os.access(r, os.X_OK):
            raise SystemExit(f"{r} not built")
    bwrap = shutil.which("bwrap")
    if not bwrap:
        raise SystemExit("bwrap not installed (scripts/install-deps)")
    policy = os.path.join(SOURCE_DIR, "policy")
    base = tempfile.mkdtemp(prefix="lensbox-bench-")
    n = args.iterations
    try:
        storage = os.path.join(base, "storage")
        lensbox = [runner, "--rootfs", rootfs, "--storage", storage, "--policy", policy, "--run-dir",
                   os.path.join(base, "run"), "--name", f"bench-{os.getpid()}", "--keep"]
        timed(lensbox + ["--", "true"])  # creates the storage image once (mke2fs), like a first conversation
        # The other build gets its own storage and name (never the same image twice at once).
        # ... and its own disk pool: a shared one would hand each build the other's images and template
        lensbox_o = [other, "--rootfs", rootfs, "--storage", storage + "-o", "--policy", policy, "--run-dir",
                     os.path.join(base, "run"), "--name", f"bench-{os.getpid()}-o", "--keep",
                     "--disk-pool", os.path.join(base, ".disk-pool-o")] if other else None
        if other:
            timed(lensbox_o + ["--", "true"])

        # Interleaved: one of each per round, so a busy shared machine slows every variant alike.
        k = args.repeat
        cmds = {
            "bare": ["/usr/bin/python3", "-c", "pass"],
            "chroot": ["chroot", rootfs, "/usr/bin/python3", "-c", "pass"],
            "bwrap": [bwrap, "--unshare-all", "--die-with-parent", "--ro-bind", rootfs, "/", "--proc", "/proc",
                      "--dev", "/dev", "--tmpfs", "/tmp", "--", "/usr/bin/python3", "-c", "pass"],
            "new": lensbox + ["--", "python3", "-c", "pass"],
            "many": lensbox + ["--repeat", str(k + 1), "--", "python3", "-c", "pass"],
        }
        fresh = [a if a != storage else os.path.join(base, "fresh") for a in lensbox if a != "--keep"]
        cmds["fresh"] = fresh + ["--", "python3", "-c", "pass"]
        cmds["fresh_mkfs"] = fresh + ["--no-disk-pool", "--", "python3", "-c", "pass"]
        if other:
            cmds["new_o"] = lensbox_o + ["--", "python3", "-c", "pass"]
            cmds["many_o"] = lensbox_o + ["--repeat", str(k + 1), "--", "python3", "-c", "pass"]
            fresh_o = [a if a != storage + "-o" else os.path.join(base, "fresh-o") for a in lensbox_o if a != "--keep"]
            cmds["fresh_o"] = fresh_o + ["--", "python3", "-c", "pass"]
        for cmd in cmds.values():  # warm-up
            timed(cmd)
        wall = {name: [] for name in cmds}
        new_lib, exec_lib, first_lib = [], [], []
        lib_o = {"new": [], "first": [], "exec": [], "start": [], "exec1": [], "stop": []}
        lib_t = {"start": [], "exec1": [], "stop": []}
        names = list(cmds)
        rng = random.Random(args.seed)
        for i in range(n):
            # in an order shuffled every round: in a fixed order each variant always follows the same one, and what
            # that one leaves behind (a storage's writeback, a pool refill, warm caches) always lands on it; a
            # rotating order still gave each variant the same predecessor in all but one round of a cycle (this
            # build's `new` and the other build's ran back to back)
            order = names[:]
            rng.shuffle(order)
            for name in order:
                cmd = cmds[name]
                dt, out = timed(cmd)
                wall[name].append(dt * 1000)
                if name == "new":
                    new_lib.append(lensbox_timing(out)[0])
                    first_lib.append(lensbox_timing(out)[2])
                    phases(out, lib_t)
                elif name == "new_o":
                    lib_o["new"].append(lensbox_timing(out)[0])
                    lib_o["first"].append(lensbox_timing(out)[2])
                    phases(out, lib_o)
                elif name == "many_o":
                    lib_o["exec"] += lensbox_timing(out)[1]
                elif name == "many":
                    exec_lib += lensbox_timing(out)[1]
        med = {name: statistics.median(v) for name, v in wall.items()}
        bare, bw, new = med["bare"], med["bwrap"], med["new"]
        exec_ms = (med["many"] - med["new"]) / k
        new_lib, exec_lib, first_lib = statistics.median(new_lib), statistics.median(exec_lib), statistics.median(
            first_lib)

        print(f"python3 -c pass, median of {n} interleaved rounds (ms)")
        print(f"  bare host                      {bare:8.2f}")
        chroot = med["chroot"]
        print(f"  bare, image's python (chroot)  {chroot:8.2f}   ratio {chroot / bare:5.2f}x bare   "
              "(the same binary and files as in the sandbox)")
        print(f"  bwrap --unshare-all            {bw:8.2f}   ratio {bw / bare:5.2f}x bare")
        print(f"  lensbox new sandbox, tool      {new:8.2f}   ratio {new / bare:5.2f}x bare   (target < 1.30x)")
        print(f"  lensbox new sandbox, library   {new_lib:8.2f}   ratio {new_lib / bare:5.2f}x bare   "
              "(start + exec + stop inside the tool)")
        print(f"  lensbox first result, library  {first_lib:8.2f}   ratio {first_lib / bare:5.2f}x bare   "
              "(start + exec: what a new conversation waits for; lensboxd stops sandboxes later)")
        print(f"  lensbox new, fresh storage     {med['fresh']:8.2f}   ratio {med['fresh'] / bare:5.2f}x bare   "
              "(target <= 1.30x; image from the pool)")
        print(f"  lensbox new, fresh, mke2fs     {med['fresh_mkfs']:8.2f}   ratio {med['fresh_mkfs'] / bare:5.2f}x bare   "
              "(--no-disk-pool: formatted on the critical path)")
        print(f"  lensbox exec, tool marginal    {exec_ms:8.2f}   ratio {exec_ms / bare:5.2f}x bare   (target < 1.10x)")
        print(f"  lensbox exec, library          {exec_lib:8.2f}   ratio {exec_lib / bare:5.2f}x bare")
        m = statistics.median
        print(f"  phases (library, new sandbox)  start {m(lib_t['start']):.2f}  first exec {m(lib_t['exec1']):.2f}  "
              f"stop {m(lib_t['stop']):.2f}")
        if other:
            exec_o = (med["many_o"] - med["new_o"]) / k
            print(f"compared with {other} (same rounds):")
            print(f"  new sandbox, tool      {med['new_o']:8.2f}   ratio {med['new_o'] / bare:5.2f}x bare   "
                  f"(this build {new / med['new_o']:5.2f}x of it)")
            print(f"  new sandbox, library   {m(lib_o['new']):8.2f}   ratio {m(lib_o['new']) / bare:5.2f}x bare   "
                  f"(this build {new_lib / m(lib_o['new']):5.2f}x of it)")
            print(f"  first result, library  {m(lib_o['first']):8.2f}   ratio {m(lib_o['first']) / bare:5.2f}x bare   "
                  f"(this build {first_lib / m(lib_o['first']):5.2f}x of it)")
            print(f"  new, fresh storage     {med['fresh_o']:8.2f}   ratio {med['fresh_o'] / bare:5.2f}x bare   "
                  f"(this build {med['fresh'] / med['fresh_o']:5.2f}x of it)")
            print(f"  exec, tool marginal    {exec_o:8.2f}   ratio {exec_o / bare:5.2f}x bare")
            print(f"  exec, library          {m(lib_o['exec']):8.2f}   ratio {m(lib_o['exec']) / bare:5.2f}x bare")
            print(f"  phases (library)       start {m(lib_o['start']):.2f}  first exec {m(lib_o['exec1']):.2f}  "
                  f"stop {m(lib_o['stop']):.2f}")
            # Paired: this build minus the other in the same round, so a load swing between rounds cancels out.
            def paired(a, b):
                return m([x - y for x, y in zip(a, b)])
            print(f"  paired, median of this build - other per round (ms): new sandbox, tool "
                  f"{paired(wall['new'], wall['new_o']):+.2f}  start {paired(lib_t['start'], lib_o['start']):+.2f}  "
                  f"first exec {paired(lib_t['exec1'], lib_o['exec1']):+.2f}  "
                  f"stop {paired(lib_t['stop'], lib_o['stop']):+.2f}  fresh storage, tool "
                  f"{paired(wall['fresh'], wall['fresh_o']):+.2f}")
        print(json.dumps({"bare_ms": round(bare, 3), "chroot_ms": round(chroot, 3), "bwrap_ms": round(bw, 3),
                          "new_ms": round(new, 3),
                          "fresh_ms": round(med["fresh"], 3), "fresh_mkfs_ms": round(med["fresh_mkfs"], 3),
                          "ratio_fresh": round(med["fresh"] / bare, 3),
                          "ratio_fresh_mkfs": round(med["fresh_mkfs"] / bare, 3),
                          "new_library_ms": round(new_lib, 3), "first_result_library_ms": round(first_lib, 3),
                          "exec_ms": round(exec_ms, 3),
                          "exec_library_ms": round(exec_lib, 3), "ratio_bwrap": round(bw / bare, 3),
                          "ratio_new": round(new / bare, 3), "ratio_new_library": round(new_lib / bare, 3),
                          "ratio_exec": round(exec_ms / bare, 3), "ratio_exec_library": round(exec_lib / bare, 3)}))
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()

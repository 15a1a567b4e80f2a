"""The VM lane (ctest label vm): boots Debian's 6.1 kernel under QEMU and runs the kernel-dependent tests there.

Runs on the host as root, from ctest (tests/CMakeLists.txt registers every tests/vm/test_*.py). It calls run-vm,
which builds the guest images from LENSBOX_BUILD_DIR, boots it (TCG; 2 GiB, 2 vCPUs; killed at the time limit) and
runs the selection in tests/vm/selection inside: the guest kernel facts (tests/vm/guest), and the cgroup v2 and
Landlock ABI 2 tests of the other suites. The host lane (this machine's 6.18, Landlock 7, cgroup v1) cannot prove
those; this file fails unless every guest test ran and passed.
"""
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
BUILD = Path(os.environ.get("LENSBOX_BUILD_DIR", "")).resolve()
SUITE = os.environ.get("LENSBOX_VM_SUITE", "bookworm")
GUEST_TIMEOUT = int(os.environ.get("LENSBOX_VM_TIMEOUT", 480))


@pytest.fixture(scope="module")
def lane():
    if not os.environ.get("LENSBOX_BUILD_DIR"):
        pytest.fail("LENSBOX_BUILD_DIR is not set: run through ctest or set it to a build directory")
    work = BUILD / "vm-lane" / SUITE
    junit = work / "results" / "junit.xml"
    junit.unlink(missing_ok=True)
    r = subprocess.run([sys.executable, str(HERE / "run-vm"), "--suite", SUITE, "--timeout", str(GUEST_TIMEOUT)],
                       capture_output=True, text=True, timeout=GUEST_TIMEOUT + 300)
    cases = []
    if junit.exists():
        for case in ET.parse(junit).getroot().iter("testcase"):
            outcome = "passed"
            for kind in ("failure", "error", "skipped"):
                el = case.find(kind)
                if el is not None:
                    outcome = f"{kind}: {el.get('message', '')[:300]}"
            cases.append((f"{case.get('classname')}::{case.get('name')}", outcome))
    return r, cases, work


def output(r):
    return f"--- run-vm stdout ---\n{r.stdout[-20000:]}\n--- run-vm stderr ---\n{r.stderr[-20000:]}"


def test_guest_booted_and_reported(lane):
    r, cases, work = lane
    assert r.returncode != 3, "the guest hung or never reported a result\n" + output(r)
    assert (work / "results" / "rc").exists(), output(r)
    assert cases, "the guest produced no JUnit report\n" + output(r)


def test_guest_kernel_facts_ran(lane):
    r, cases, _ = lane
    facts = [n for n, _ in cases if n.startswith("tests.vm.guest.test_kernel_facts::")]
    # The probes of cgroup v2 delegation and Landlock ABI 2 are the lane's foundation: all of them must have run.
    assert len(facts) >= 8, f"only {facts} ran\n" + output(r)


def test_every_guest_test_passed(lane):
    r, cases, _ = lane
    bad = [f"{n}: {o}" for n, o in cases if o != "passed"]
    assert not bad, "guest tests that did not pass:\n  " + "\n  ".join(bad) + "\n" + output(r)
    assert r.returncode == 0, output(r)

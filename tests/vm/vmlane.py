"""vmlane.py — host-side helpers shared by the VM lane's ctest files (test_vm_lane*.py); runs on the host as root.

boot_lane() calls run-vm for one kernel suite and returns its output and the guest's JUnit cases; the assertion
helpers turn them into failures that show the guest's output. Nothing here runs in the guest.
"""
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
# The guest runs under TCG: on the slower machines of this kind (bare python3 23-26 ms instead of 13-19) the
# selection ran past 435 s and was cut off in its last file: 480 s was not enough.
GUEST_TIMEOUT = int(os.environ.get("LENSBOX_VM_TIMEOUT", 840))


class Lane:
    def __init__(self, proc, cases, work):
        self.proc = proc
        self.cases = cases  # [(node id "pkg.module::test", "passed" | "failure: ..." | "error: ..." | "skipped: ...")]
        self.work = work

    def output(self):
        return (f"--- run-vm stdout ---\n{self.proc.stdout[-20000:]}\n"
                f"--- run-vm stderr ---\n{self.proc.stderr[-20000:]}")


def boot_lane(suite, selection=None):
    """Boots the guest of `suite` with the selection file (default tests/vm/selection) and collects its results."""
    if not os.environ.get("LENSBOX_BUILD_DIR"):
        pytest.fail("LENSBOX_BUILD_DIR is not set: run through ctest or set it to a build directory")
    work = Path(os.environ["LENSBOX_BUILD_DIR"]).resolve() / "vm-lane" / suite
    junit = work / "results" / "junit.xml"
    junit.unlink(missing_ok=True)
    cmd = [sys.executable, str(HERE / "run-vm"), "--suite", suite, "--timeout", str(GUEST_TIMEOUT)]
    if selection:
        cmd += ["--selection", str(HERE / selection)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=GUEST_TIMEOUT + 300)
    cases = []
    if junit.exists():
        for case in ET.parse(junit).getroot().iter("testcase"):
            outcome = "passed"
            for kind in ("failure", "error", "skipped"):
                el = case.find(kind)
                if el is not None:
                    outcome = f"{kind}: {el.get('message', '')[:300]}"
            cases.append((f"{case.get('classname')}::{case.get('name')}", outcome))
    return Lane(proc, cases, work)


def assert_reported(lane):
    assert lane.proc.returncode != 3, "the guest hung or never reported a result\n" + lane.output()
    assert (lane.work / "results" / "rc").exists(), lane.output()
    assert lane.cases, "the guest produced no JUnit report\n" + lane.output()


def assert_ran(lane, prefix, at_least):
    ran = [n for n, _ in lane.cases if n.startswith(prefix)]
    assert len(ran) >= at_least, f"only {len(ran)} tests of {prefix} ran: {ran}\n" + lane.output()


def assert_all_passed(lane):
    # A skip in the guest is a failure too: the selection must only pick tests that belong to this lane.
    bad = [f"{n}: {o}" for n, o in lane.cases if o != "passed"]
    assert not bad, "guest tests that did not pass:\n  " + "\n  ".join(bad) + "\n" + lane.output()
    assert lane.proc.returncode == 0, lane.output()

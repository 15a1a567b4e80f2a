"""The i386 cases of the seccomp unit tests, where the kernel serves the i386 table (runs in the guest only).

On the host lane (6.18, a PVM guest) `int 0x80` raises SIGSEGV before any filter, so the unit tests'
i386 cases skip there with the reason (tests/unit/host_probe.h). Debian's 6.1 serves the table: here the same
binaries must run those cases, not skip them, and the filters must kill the caller (SIGSYS).
"""
import os
import re
import subprocess

import pytest

import vmfacts

vmfacts.skip_unless_guest()

BUILD = os.environ.get("LENSBOX_BUILD_DIR", "")

# unit binary -> the case that must have run and passed here
CASES = {
    "unit_policy_test_seccomp_filter": "test_i386_killed",
    "unit_netfilter_test_confine": "i386_table_kills_the_caller",
}


@pytest.mark.parametrize("binary", sorted(CASES))
def test_i386_case_runs_and_passes(binary):
    proc = subprocess.run([os.path.join(BUILD, "tests", binary)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout
    case = CASES[binary]
    # skipped means the probe found no i386 table: this kernel is not the one the lane expects
    assert not re.search(rf"^\[\s+SKIPPED \] {case}$", proc.stdout, re.M), proc.stdout
    assert re.search(rf"^\[\s+OK \] {case}$", proc.stdout, re.M), proc.stdout

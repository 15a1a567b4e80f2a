"""The VM lane's second kernel: bookworm-backports' 6.12 (cgroup v2, Landlock ABI 6); ctest label vm.

Runs on the host as root, like test_vm_lane.py, with one vCPU (run-vm's SUITE_CPUS says why) and the smaller
selection in tests/vm/selection-backports: between the host's ABI 7 and 6.1's ABI 2, it proves lensbox's Landlock
handling at a middle ABI (network rules and scopes present, no ABI 7 features) on cgroup v2.
"""
import pytest

import vmlane


@pytest.fixture(scope="module")
def lane():
    return vmlane.boot_lane("bookworm-backports", selection="selection-backports")


def test_guest_booted_and_reported(lane):
    vmlane.assert_reported(lane)


def test_guest_kernel_facts_ran(lane):
    vmlane.assert_ran(lane, "tests.vm.guest.test_kernel_facts::", 11)


def test_every_guest_test_passed(lane):
    vmlane.assert_all_passed(lane)

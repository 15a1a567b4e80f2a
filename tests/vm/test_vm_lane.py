"""The VM lane on Debian 12's kernel (6.1: cgroup v2 with every controller, Landlock ABI 2); ctest label vm.

Runs on the host as root. run-vm builds the guest from LENSBOX_BUILD_DIR, boots it under QEMU (TCG, 2 GiB,
2 vCPUs, killed at the time limit) and runs tests/vm/selection inside: the kernel facts (tests/vm/guest) and the
cgroup v2 and Landlock tests of the runner, security and supervisor suites. The host lane (6.18, Landlock 7,
cgroup v1 controllers) cannot prove those; this file fails unless every selected guest test ran and passed.
"""
import pytest

import vmlane


@pytest.fixture(scope="module")
def lane():
    return vmlane.boot_lane("bookworm")


def test_guest_booted_and_reported(lane):
    vmlane.assert_reported(lane)


def test_guest_kernel_facts_ran(lane):
    # The probes of cgroup v2 delegation and Landlock ABI 2 are the lane's foundation: all of them must have run.
    vmlane.assert_ran(lane, "tests.vm.guest.test_kernel_facts::", 11)


@pytest.mark.parametrize("prefix,at_least", [
    ("tests.vm.guest.test_runner_v2::", 13),
    ("tests.vm.guest.test_lensboxd_v2::", 3),
    ("tests.integration.test_runner_limits::", 4),
    ("tests.integration.test_runner_kill::", 4),
    ("tests.security.test_cgroups::", 15),
    ("tests.security.test_landlock::", 17),
    ("tests.integration.test_daemon_lifecycle::", 2),
    ("tests.integration.test_api_runs::", 3),
    ("tests.integration.test_daemon_restart::", 1),
    ("tests.integration.test_network_flowtable::", 5),
    ("tests.integration.test_network_flowtable_lifecycle::", 4),
    ("tests.integration.test_network_isolated::", 5),
])
def test_each_selected_suite_ran(lane, prefix, at_least):
    # A suite that shrank or vanished from the guest run (a renamed test, a broken collection) fails here.
    vmlane.assert_ran(lane, prefix, at_least)


def test_every_guest_test_passed(lane):
    vmlane.assert_all_passed(lane)

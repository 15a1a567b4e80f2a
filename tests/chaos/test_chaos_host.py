"""Chaos, short: the host's loop devices exhausted (emulated for one lensboxd: LOOP_CTL_GET_FREE refused by a
preloaded shim) and lensboxd's core and API process at their fd limit (prlimit): each request gets a success or a
documented 503 with its cause and Retry-After, a running sandbox keeps working, nothing acknowledged is lost, no
process spins, and service comes back by itself when the cause goes (tests/chaos/hostfaults.py, part_host_faults)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chaos  # noqa: E402
import hostfaults  # noqa: E402


def test_host_faults_are_refused_as_documented_and_recover():
    p = hostfaults.part_host_faults(chaos.SHORT)
    print(chaos.report(p))
    assert p.tries >= 20, p.tries
    assert not p.failures, p.failures
    assert not p.leaks, p.leaks

"""Chaos, short: lensboxd's state database held by another process past its busy timeout, and its state directory
full: each request gets a success or a documented 503 with its cause and Retry-After, nothing acknowledged is lost,
the database stays intact, and service comes back by itself when the cause goes (tests/chaos/chaos.py,
part_state_faults)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chaos  # noqa: E402


def test_state_faults_are_refused_as_documented_and_recover():
    p = chaos.part_state_faults(chaos.SHORT)
    print(chaos.report(p))
    assert p.tries >= 5, p.tries
    assert not p.failures, p.failures
    assert not p.leaks, p.leaks

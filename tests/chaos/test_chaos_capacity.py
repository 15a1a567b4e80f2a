"""Chaos, short: the uid range exhausted and max_running reached each give `429 capacity` with its sentence and go
away by themselves when the cause does (tests/chaos/chaos.py, part_capacity)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chaos  # noqa: E402


def test_capacity_faults_are_refused_as_documented_and_recover():
    p = chaos.part_capacity(chaos.SHORT)
    print(chaos.report(p))
    assert not p.failures, p.failures
    assert not p.leaks, p.leaks

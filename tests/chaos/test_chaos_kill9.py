"""Chaos, short (ctest label `chaos`): lensboxd SIGKILLed 10 times during a mixed workload on 4 sandboxes, restarted
on the same state each time (tests/chaos/chaos.py, part_kill9). Fails on any lost upload or run, leak, unexplained
answer, failed integrity check or can_run false. The one known leak (a sandbox's init cloned by lensboxd and not yet
released outlives it; docs/reliability.md) is printed, and fails the test only if it stops restarts."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chaos  # noqa: E402


def test_kill9_during_a_mixed_workload():
    p = chaos.part_kill9(chaos.SHORT)
    print(chaos.report(p))
    assert p.tries == chaos.SHORT.kills
    assert not p.failures, p.failures
    assert not p.leaks, p.leaks

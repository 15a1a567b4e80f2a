"""Chaos, short (ctest label `chaos`): lensboxd SIGKILLed 10 times during a mixed workload on 4 sandboxes, restarted
on the same state each time (tests/chaos/chaos.py, part_kill9). Fails on any lost upload or run, leak, unexplained
answer, failed integrity check or can_run false. The one known leak (a sandbox's init cloned by lensboxd and not yet
released outlives it, holding state.db.lock; docs/reliability.md) is told apart by its signature, printed and killed
by pid so the next restart can run; it does not fail the test, as its fix belongs in runner/ and is reported."""
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

"""Chaos, short: a fork bomb, a CPU spin, a 1 GB output flood, a disk fill and an OOM in one sandbox while another
runs `print(1)` over and over: every quiet run succeeds, each noise ends with its documented result (pids_limited,
timed_out, stdout_truncated, a full disk, oom_killed), lensboxd's RSS stays flat, nothing leaks. The quiet runs'
latency against no noise is printed, not asserted (tests/chaos/chaos.py, part_noisy; docs/reliability.md)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chaos  # noqa: E402


def test_noisy_neighbours_do_not_break_the_others():
    p = chaos.part_noisy(chaos.SHORT)
    print(chaos.report(p))
    assert p.tries == len(chaos.NOISES), p.tries
    assert not p.failures, p.failures
    assert not p.leaks, p.leaks
